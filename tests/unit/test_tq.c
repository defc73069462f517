/*
 * Timer queues: timers of several durations fire in deadline order, a
 * stopped one never fires, one set again moves to its new deadline, and a
 * callback may set timers (its own included) without the run looping.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/event.h>

#include "clock.h"
#include "tq.h"

struct fired {
	struct tq *f_q;
	char f_order[16];
	size_t f_n;
	uint64_t f_start;
};

struct tmr {
	struct tq_timer t;
	struct fired *f;
	char name;
	int again; /* set itself again (0 ms) this many times */
	uint64_t at_ms; /* when it fired, from f_start */
};

static void
tmr_cb(void *arg)
{
	struct tmr *m = arg;
	struct fired *f = m->f;

	assert_false(tq_timer_pending(&m->t));
	m->at_ms = (clock_mono_usec() - f->f_start) / 1000;
	if (f->f_n < sizeof f->f_order - 1)
		f->f_order[f->f_n++] = m->name;
	if (m->again > 0) {
		m->again--;
		tq_timer_set(f->f_q, &m->t, 0);
	}
}

static void
tmr_init(struct tmr *m, struct fired *f, char name)
{
	memset(m, 0, sizeof *m);
	m->f = f;
	m->name = name;
	tq_timer_init(&m->t, tmr_cb, m);
}

/* Three durations, set out of order: they fire by deadline. */
static void
test_order(void **state)
{
	struct event_base *base = event_base_new();
	struct fired f;
	struct tmr a, b, c, d;

	(void)state;
	memset(&f, 0, sizeof f);
	f.f_q = tq_get(base);
	assert_ptr_equal(tq_base(f.f_q), base);
	f.f_start = clock_mono_usec();
	tmr_init(&a, &f, 'a');
	tmr_init(&b, &f, 'b');
	tmr_init(&c, &f, 'c');
	tmr_init(&d, &f, 'd');
	tq_timer_set(f.f_q, &a.t, 60);
	tq_timer_set(f.f_q, &b.t, 20);
	tq_timer_set(f.f_q, &c.t, 40);
	tq_timer_set(f.f_q, &d.t, 20);
	assert_true(tq_timer_pending(&a.t));
	event_base_dispatch(base);
	assert_string_equal(f.f_order, "bdca");
	assert_true(b.at_ms >= 20 && c.at_ms >= 40 && a.at_ms >= 60);
	assert_false(tq_timer_pending(&a.t));
	tq_put(f.f_q);
	event_base_free(base);
}

/* A stopped timer never fires; one set again waits for its new deadline. */
static void
test_stop_and_reset(void **state)
{
	struct event_base *base = event_base_new();
	struct fired f;
	struct tmr a, b, c;

	(void)state;
	memset(&f, 0, sizeof f);
	f.f_q = tq_get(base);
	f.f_start = clock_mono_usec();
	tmr_init(&a, &f, 'a');
	tmr_init(&b, &f, 'b');
	tmr_init(&c, &f, 'c');
	tq_timer_set(f.f_q, &a.t, 10); /* the event is armed for a ... */
	tq_timer_set(f.f_q, &b.t, 30);
	tq_timer_set(f.f_q, &c.t, 10);
	tq_timer_stop(&a.t); /* ... which goes: the event finds c */
	tq_timer_stop(&a.t);
	tq_timer_set(f.f_q, &c.t, 50); /* c moves behind b */
	event_base_dispatch(base);
	assert_string_equal(f.f_order, "bc");
	assert_true(c.at_ms >= 50);
	tq_put(f.f_q);
	event_base_free(base);
}

/* A callback that sets itself again for 0 ms fires once per run. */
static void
test_set_from_callback(void **state)
{
	struct event_base *base = event_base_new();
	struct fired f;
	struct tmr a, b;

	(void)state;
	memset(&f, 0, sizeof f);
	f.f_q = tq_get(base);
	f.f_start = clock_mono_usec();
	tmr_init(&a, &f, 'a');
	tmr_init(&b, &f, 'b');
	a.again = 2;
	tq_timer_set(f.f_q, &a.t, 0);
	tq_timer_set(f.f_q, &b.t, 0);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_string_equal(f.f_order, "ab");
	event_base_dispatch(base);
	assert_string_equal(f.f_order, "abaa");
	tq_put(f.f_q);
	event_base_free(base);
}

/* One queue per base, shared by reference; many durations stay bounded. */
static void
test_shared_and_lanes(void **state)
{
	struct event_base *base = event_base_new();
	struct fired f;
	struct tmr m[40];
	struct tq *q2;
	size_t i;

	(void)state;
	memset(&f, 0, sizeof f);
	f.f_q = tq_get(base);
	q2 = tq_get(base);
	assert_ptr_equal(f.f_q, q2);
	tq_put(q2);
	f.f_start = clock_mono_usec();
	/* More durations than the queue keeps lanes for: empty ones go. */
	for (i = 0; i < 40; i++) {
		tmr_init(&m[i], &f, 'x');
		tq_timer_set(f.f_q, &m[i].t, 1 + i);
		if (i % 2 == 0)
			tq_timer_stop(&m[i].t);
	}
	event_base_dispatch(base);
	assert_int_equal(f.f_n, 15); /* f_order keeps 15; 20 fired */
	for (i = 0; i < 40; i++)
		assert_false(tq_timer_pending(&m[i].t));
	tq_put(f.f_q);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_stop_and_reset),
		cmocka_unit_test(test_set_from_callback),
		cmocka_unit_test(test_shared_and_lanes),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
