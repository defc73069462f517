/*
 * Timer queues; see tq.h.
 *
 * The queue's event is armed for a deadline (q_armed) no later than the
 * earliest pending timer's.  Stopping a timer does not touch the event:
 * if it fires for a timer that is gone, it finds nothing due and is armed
 * again for the earliest timer left, so a keep-alive connection's timer
 * set again per request costs two list operations and no event_add.
 */
#include <sys/queue.h>
#include <sys/time.h>

#include <stdlib.h>

#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "tq.h"

/* Distinct durations kept before empty lanes are given back. */
#define TQ_LANES_MAX 16

/* The timers of one duration, in deadline order. */
struct tq_lane {
	uint64_t l_us;
	TAILQ_HEAD(, tq_timer) l_list;
	struct tq_lane *l_next;
};

struct tq {
	struct event_base *q_base;
	struct event *q_ev;
	struct tq_lane *q_lanes;
	unsigned int q_nlanes;
	unsigned int q_refs; /* tq_get's not yet put */
	uint64_t q_armed; /* the deadline q_ev waits for, 0: none */
	uint64_t q_now; /* while tq_run_cb runs: its time, else 0 */
	struct tq *q_next;
};

/* This thread's queues, one per event base. */
static __thread struct tq *tqs;

/* Arm q's event for deadline at (monotonic microseconds). */
static void
tq_arm(struct tq *q, uint64_t at)
{
	uint64_t now = clock_mono_usec(), d = at > now ? at - now : 0;
	struct timeval tv;

	tv.tv_sec = (time_t)(d / 1000000);
	tv.tv_usec = (suseconds_t)(d % 1000000);
	event_add(q->q_ev, &tv);
	q->q_armed = at;
}

/* The lane whose head is due first, or NULL when every lane is empty. */
static struct tq_lane *
tq_first(struct tq *q)
{
	struct tq_lane *l, *best = NULL;
	struct tq_timer *t;

	for (l = q->q_lanes; l != NULL; l = l->l_next) {
		if ((t = TAILQ_FIRST(&l->l_list)) == NULL)
			continue;
		if (best == NULL || t->t_at < TAILQ_FIRST(&best->l_list)->t_at)
			best = l;
	}
	return (best);
}

/*
 * q's event fired: run every timer due, earliest first, then arm for the
 * next.  A callback may set or stop any timer; one it sets now is due
 * after this run's time, so it waits for the next run.
 */
static void
tq_run_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tq *q = arg;
	struct tq_lane *l;
	struct tq_timer *t;

	(void)fd;
	(void)what;
	q->q_armed = 0;
	q->q_now = clock_mono_usec();
	q->q_refs++; /* a callback's tq_put cannot free q under us */
	while ((l = tq_first(q)) != NULL) {
		t = TAILQ_FIRST(&l->l_list);
		if (t->t_at > q->q_now)
			break;
		TAILQ_REMOVE(&l->l_list, t, t_entry);
		t->t_lane = NULL;
		t->t_cb(t->t_arg);
	}
	q->q_now = 0;
	if ((l = tq_first(q)) != NULL && q->q_armed == 0)
		tq_arm(q, TAILQ_FIRST(&l->l_list)->t_at);
	tq_put(q);
}

/* The queue of base on this thread, with a reference (tq_put drops it). */
struct tq *
tq_get(struct event_base *base)
{
	struct tq *q;

	for (q = tqs; q != NULL; q = q->q_next) {
		if (q->q_base == base) {
			q->q_refs++;
			return (q);
		}
	}
	q = xcalloc(1, sizeof *q);
	q->q_base = base;
	if ((q->q_ev = evtimer_new(base, tq_run_cb, q)) == NULL)
		abort(); /* allocation failure, as with xmalloc */
	q->q_refs = 1;
	q->q_next = tqs;
	tqs = q;
	return (q);
}

/* Drop a reference; the last frees q (its timers must all be stopped). */
void
tq_put(struct tq *q)
{
	struct tq **qp;
	struct tq_lane *l;

	if (q == NULL || --q->q_refs != 0)
		return;
	for (qp = &tqs; *qp != NULL; qp = &(*qp)->q_next) {
		if (*qp == q) {
			*qp = q->q_next;
			break;
		}
	}
	while ((l = q->q_lanes) != NULL) {
		q->q_lanes = l->l_next;
		free(l);
	}
	event_free(q->q_ev);
	free(q);
}

/* The event base q runs on. */
struct event_base *
tq_base(const struct tq *q)
{
	return (q->q_base);
}

/* Set up a stopped timer that calls cb(arg) when it expires. */
void
tq_timer_init(struct tq_timer *t, void (*cb)(void *), void *arg)
{
	t->t_lane = NULL;
	t->t_at = 0;
	t->t_cb = cb;
	t->t_arg = arg;
}

/* The lane of duration us, made when q has none (empty ones given back). */
static struct tq_lane *
tq_lane(struct tq *q, uint64_t us)
{
	struct tq_lane *l, **lp;

	for (l = q->q_lanes; l != NULL; l = l->l_next) {
		if (l->l_us == us)
			return (l);
	}
	/* Durations come from the configuration; reloads may change them. */
	if (q->q_nlanes >= TQ_LANES_MAX) {
		for (lp = &q->q_lanes; (l = *lp) != NULL;) {
			if (TAILQ_EMPTY(&l->l_list)) {
				*lp = l->l_next;
				free(l);
				q->q_nlanes--;
			} else
				lp = &l->l_next;
		}
	}
	l = xcalloc(1, sizeof *l);
	l->l_us = us;
	TAILQ_INIT(&l->l_list);
	l->l_next = q->q_lanes;
	q->q_lanes = l;
	q->q_nlanes++;
	return (l);
}

/* (Re)start t on q: it expires ms milliseconds from now. */
void
tq_timer_set(struct tq *q, struct tq_timer *t, uint64_t ms)
{
	uint64_t now;

	tq_timer_stop(t);
	now = clock_mono_usec();
	/* Set from a callback of this run, it waits for the next. */
	if (q->q_now != 0 && now <= q->q_now)
		now = q->q_now + 1;
	t->t_lane = tq_lane(q, ms * 1000);
	t->t_at = now + ms * 1000;
	TAILQ_INSERT_TAIL(&t->t_lane->l_list, t, t_entry);
	/* Inside a run, tq_run_cb arms for what is left when it ends. */
	if (q->q_now == 0 && (q->q_armed == 0 || t->t_at < q->q_armed))
		tq_arm(q, t->t_at);
}

/* Stop t, if it is pending. */
void
tq_timer_stop(struct tq_timer *t)
{
	if (t->t_lane == NULL)
		return;
	TAILQ_REMOVE(&t->t_lane->l_list, t, t_entry);
	t->t_lane = NULL;
}

/* Is t set and not yet expired? */
int
tq_timer_pending(const struct tq_timer *t)
{
	return (t->t_lane != NULL);
}
