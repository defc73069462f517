/*
 * Timer queues: the timers of one event base, each of one of a few
 * durations, on one struct event.
 *
 * A connection's timeouts are each of a length fixed by the
 * configuration (keep-alive idle, request head, body, write, linger), so
 * timers of one duration expire in the order they were set.  Each
 * duration is a FIFO lane: setting a timer appends it to its lane,
 * stopping it unlinks it, both O(1); the queue's one event is armed for
 * the earliest deadline at the head of a lane.  A timer is a few words
 * inside its owner, not a struct event of its own (128 bytes and an
 * allocation per connection, docs/performance.md "Idle memory").
 */
#ifndef AK_TQ_H
#define AK_TQ_H

#include <sys/queue.h>

#include <stdint.h>

struct event_base;
struct tq;
struct tq_lane;

/* A timer; its owner embeds it and sets it up with tq_timer_init. */
struct tq_timer {
	TAILQ_ENTRY(tq_timer) t_entry;
	struct tq_lane *t_lane; /* the lane it waits on, NULL: stopped */
	uint64_t t_at; /* deadline, monotonic microseconds */
	void (*t_cb)(void *);
	void *t_arg;
};

struct tq *tq_get(struct event_base *);
void tq_put(struct tq *);
struct event_base *tq_base(const struct tq *);
void tq_timer_init(struct tq_timer *, void (*)(void *), void *);
void tq_timer_set(struct tq *, struct tq_timer *, uint64_t ms);
void tq_timer_stop(struct tq_timer *);
int tq_timer_pending(const struct tq_timer *);

#endif
