/*
 * Giving memory back once load has left.  glibc keeps what a burst of
 * connections freed: each worker thread allocates from its own arena, a
 * heap shrinks only from its top (and evio_malloc_tune keeps 16 MiB
 * there for bulk transfers), so the buffers of thousands of closed
 * connections stayed resident, fragmented between the few live ones.
 * malloc_trim(3) returns every free page of every arena.
 *
 * Every accept notes the highest connection count (memtrim_count); the
 * main loop looks at the count every second and trims when it has fallen
 * to half of the highest since the last trim, by MEMTRIM_DROP connections
 * at least: never under steady load, once after a burst.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"

/* How often the connection count is looked at. */
#define MEMTRIM_CHECK_MS 1000
/* A fall smaller than this is not worth a trim. */
#define MEMTRIM_DROP 256

struct memtrim {
	struct event *mt_ev;
	struct gw *mt_gw;
	uint64_t mt_peak; /* highest count since the last trim */
};

/*
 * A connection was accepted on loop g, making n in the process: remember
 * the highest n.  Two loops may race; the peak is a hint, and losing one
 * of two close values to the race does not matter.
 */
void
memtrim_count(struct gw *g, uint64_t n)
{
	struct gw_shared *s = g->g_shared;

	if (s != NULL &&
	    n > __atomic_load_n(&s->s_nconns_peak, __ATOMIC_RELAXED))
		__atomic_store_n(&s->s_nconns_peak, n, __ATOMIC_RELAXED);
}

/* The process's resident memory in KiB (/proc/self/statm), or 0. */
static uint64_t
memtrim_rss_kib(void)
{
	unsigned long long size, pages;
	FILE *f;
	int n;

	if ((f = fopen("/proc/self/statm", "re")) == NULL)
		return (0);
	n = fscanf(f, "%llu %llu", &size, &pages);
	fclose(f);
	return (n == 2 ? pages * (uint64_t)(getpagesize() / 1024) : 0);
}

/* The check timer fired: trim when the count fell far from its peak. */
static void
memtrim_cb(evutil_socket_t fd, short events, void *arg)
{
	struct memtrim *mt = arg;
	struct gw_shared *s = mt->mt_gw->g_shared;
	uint64_t n, peak, t0, rss;

	(void)fd;
	(void)events;
	n = __atomic_load_n(&s->s_nconns, __ATOMIC_RELAXED);
	/* The peak since the last look; the next one starts from now. */
	peak = __atomic_exchange_n(&s->s_nconns_peak, n, __ATOMIC_RELAXED);
	if (peak > mt->mt_peak)
		mt->mt_peak = peak;
	if (n >= mt->mt_peak) {
		mt->mt_peak = n;
		return;
	}
	if (mt->mt_peak - n < MEMTRIM_DROP || n > mt->mt_peak / 2)
		return;
	t0 = clock_mono_usec();
	rss = memtrim_rss_kib();
	malloc_trim(0);
	/* Once after a burst: worth a line at info. */
	log_info("memory trimmed in %lluus: %llu connections, down from %llu; "
		 "RSS %llu KiB, was %llu KiB",
	    (unsigned long long)(clock_mono_usec() - t0), (unsigned long long)n,
	    (unsigned long long)mt->mt_peak,
	    (unsigned long long)memtrim_rss_kib(), (unsigned long long)rss);
	mt->mt_peak = n;
}

/* Start looking after the process's memory from the main loop g. */
void
memtrim_start(struct gw *g)
{
	struct memtrim *mt;
	struct timeval tv;

	if (g->g_shared == NULL)
		return;
	mt = xcalloc(1, sizeof *mt);
	mt->mt_gw = g;
	mt->mt_ev = event_new(g->g_base, -1, EV_PERSIST, memtrim_cb, mt);
	clock_msec_to_tv(MEMTRIM_CHECK_MS, &tv);
	event_add(mt->mt_ev, &tv);
	g->g_memtrim = mt;
}

/* Stop it (shutdown). */
void
memtrim_stop(struct gw *g)
{
	struct memtrim *mt = g->g_memtrim;

	if (mt == NULL)
		return;
	event_free(mt->mt_ev);
	free(mt);
	g->g_memtrim = NULL;
}
