/*
 * Draining: the gateway stops accepting and lets what is in flight finish
 * before the process exits, for up to timeouts.drain (SIGTERM; the old
 * process of a binary upgrade).
 *
 * drain_start runs on the main loop.  The shared deadline goes up
 * (/readyz answers 503 draining, /metrics akgw_draining 1), the tunnels'
 * Port B listeners close, and each loop (the workers by GW_CMD_DRAIN)
 * closes its public listeners and then, on a timer:
 *
 *   - HTTP/1: a connection between requests closes at once; a request in
 *     progress is answered with Connection: close (unless its head went
 *     already), then the connection closes (h1s_drain); Port B the same;
 *   - HTTP/2: GOAWAY, the streams in flight finish, then the connection
 *     closes (h2s_shutdown);
 *   - WebSockets stay open until the deadline;
 *   - tunnel links (main loop) close with 1012 "service restart" once
 *     their exchanges are done, so that their clients reconnect.
 *
 * At the deadline each loop closes what it has left: a WebSocket gets a
 * close frame 1001 "going away" between two of the upstream's frames when
 * the relay followed them (relay_drain_close, ws_h2_drain_close: not once
 * splice(2) moves them, so a plain WebSocket relayed by splice is cut),
 * tunnel links 1012, and the rest is cut; each counted in /metrics.  The
 * main loop stops the process (the stop callback, the path SIGINT takes)
 * once no loop has anything left, or DRAIN_GRACE_MS after the deadline.
 */
#include <stdlib.h>

#include <event2/event.h>

#include "clock.h"
#include "gw.h"

/* How often a draining loop looks at what it has left. */
#define DRAIN_TICK_MS 50
/* Why connections close, in their log lines. */
#define DRAIN_WHY "gateway draining"
#define DRAIN_WHY_CUT "drain deadline"

/* What the deadline did to one connection. */
enum drain_cut {
	DRAIN_C_NONE = 0, /* it was closing anyway, or is not this loop's */
	DRAIN_C_WS, /* a close 1001 went or goes to its WebSocket(s) */
	DRAIN_C_CUT, /* an exchange or a WebSocket was cut */
};

/* The process's drain, on the main loop. */
static struct {
	void (*d_stop)(struct gw *); /* stops the process */
	uint64_t d_start; /* monotonic ms */
} drain_main;

static void drain_tick_cb(evutil_socket_t, short, void *);

/* Look at the loop again in a moment (freed with the loop if it stops). */
static void
drain_tick(struct gw *g)
{
	struct timeval tv;

	clock_msec_to_tv(DRAIN_TICK_MS, &tv);
	event_base_once(g->g_base, -1, EV_TIMEOUT, drain_tick_cb, g, &tv);
}

/* What loop g still has: connections, and on the main loop tunnels. */
static size_t
drain_left(struct gw *g)
{
	size_t n = (size_t)g->g_nconns;

	if (g->g_index == 0)
		n += tunnel_drain_tick(g); /* closes finished links: 1012 */
	return (n);
}

/* The drain starts for connection c: no new requests on it. */
static void
drain_conn_start(struct conn *c)
{
	if (c->c_h1 != NULL)
		(void)h1s_drain(c->c_h1, DRAIN_WHY);
	else if (c->c_h2 != NULL)
		h2s_shutdown(c->c_h2);
	else if (c->c_state == CONN_S_SNIFF)
		conn_close(c, DRAIN_WHY); /* not a byte of a request yet */
}

/* The HTTP/2 connection c at the deadline: its streams end. */
static enum drain_cut
drain_h2_cut(struct conn *c)
{
	struct gw_xchg *x, *next;
	int ws = 0, cut = 0;

	for (x = TAILQ_FIRST(&c->c_xchgs); x != NULL; x = next) {
		next = TAILQ_NEXT(x, x_entry);
		if (ws_h2_drain_close(x) == 0) {
			ws++;
			continue;
		}
		cut++;
		xchg_abort(x, DRAIN_WHY_CUT);
	}
	/* With a WebSocket closing, the session ends after its stream. */
	if (ws == 0 && c->c_h2 != NULL)
		h2s_close(c->c_h2, DRAIN_WHY_CUT);
	return (cut != 0 ? DRAIN_C_CUT : ws != 0 ? DRAIN_C_WS : DRAIN_C_NONE);
}

/* Connection c at the deadline: closed, or its WebSocket told to go. */
static enum drain_cut
drain_conn_cut(struct conn *c)
{
	switch (c->c_state) {
	case CONN_S_UPGRADED:
		/* A tunnel link's bytes: the main loop closes it (1012). */
		if (c->c_flags & CONN_F_HANDED)
			return (DRAIN_C_NONE);
		if (relay_drain_close(c) == 0)
			return (DRAIN_C_WS);
		relay_abort(c);
		conn_close(c, DRAIN_WHY_CUT);
		return (DRAIN_C_CUT);
	case CONN_S_HEAD:
		if (c->c_h2 != NULL)
			return (drain_h2_cut(c));
		if (c->c_h1 != NULL && h1s_state(c->c_h1) == H1S_S_LINGER) {
			conn_close(c, DRAIN_WHY_CUT); /* answered already */
			return (DRAIN_C_NONE);
		}
		conn_close(c, DRAIN_WHY_CUT);
		return (DRAIN_C_CUT);
	default:
		/* Closing, or an error being written: it goes anyway. */
		conn_close(c, DRAIN_WHY_CUT);
		return (DRAIN_C_NONE);
	}
}

/* The deadline passed on loop g: close what is left, count it. */
static void
drain_cut(struct gw *g)
{
	struct conn *c, *next;
	uint64_t ws = 0, cut = 0;

	g->g_drain |= DRAIN_L_CUT;
	for (c = TAILQ_FIRST(&g->g_conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, c_entry);
		switch (drain_conn_cut(c)) {
		case DRAIN_C_WS:
			ws++;
			break;
		case DRAIN_C_CUT:
			cut++;
			break;
		case DRAIN_C_NONE:
			break;
		}
	}
	if (g->g_index == 0)
		cut += tunnel_drain_cut(g);
	GW_ADD(g->g_metrics.m_drain_ws_closed, ws);
	GW_ADD(g->g_metrics.m_drain_cut, cut);
	if (ws + cut != 0)
		log_debug("loop %zu: drain deadline: %llu WebSockets closed "
			  "with 1001, %llu connections cut",
		    g->g_index, (unsigned long long)ws,
		    (unsigned long long)cut);
}

/* Every worker has nothing left (their counts are atomic). */
static int
drain_workers_idle(const struct gw *g)
{
	const struct gw_shared *s = g->g_shared;

	return (s == NULL ||
	    __atomic_load_n(&s->s_drain_idle, __ATOMIC_ACQUIRE) + 1 >=
		s->s_nworkers);
}

/* The drain is over (main loop): say how it went, stop the process. */
static void
drain_end(struct gw *g)
{
	struct gw_metrics sum;
	uint64_t nconns, ms = clock_mono_msec() - drain_main.d_start;
	size_t links = tunnel_drain_tick(g);

	gw_metrics_sum(g, &sum, &nconns);
	if (!(g->g_drain & DRAIN_L_CUT))
		log_info("drained in %llu.%01llus: every connection finished",
		    (unsigned long long)(ms / 1000),
		    (unsigned long long)(ms % 1000 / 100));
	else
		log_info("drain deadline passed with %llu connections still "
			 "open: %llu WebSockets closed with 1001, %llu cut; "
			 "%llu left after the grace are closed now",
		    (unsigned long long)(sum.m_drain_ws_closed +
			sum.m_drain_cut),
		    (unsigned long long)sum.m_drain_ws_closed,
		    (unsigned long long)sum.m_drain_cut,
		    (unsigned long long)(nconns + links));
	g->g_drain |= DRAIN_L_OVER;
	drain_main.d_stop(g);
}

/*
 * A draining loop's timer: the deadline, then what is left.  A worker
 * with nothing left says so and stops looking; the main loop ends the
 * drain once every loop has nothing left, or after the grace.
 */
static void
drain_tick_cb(evutil_socket_t fd, short events, void *arg)
{
	struct gw *g = arg;
	uint64_t now = clock_mono_msec();
	size_t left;

	(void)fd;
	(void)events;
	if (g->g_drain & (DRAIN_L_OVER | DRAIN_L_IDLE))
		return;
	if (!(g->g_drain & DRAIN_L_CUT) && now >= g->g_drain_at)
		drain_cut(g);
	left = drain_left(g);
	if (g->g_index != 0) {
		if (left != 0) {
			drain_tick(g);
			return;
		}
		g->g_drain |= DRAIN_L_IDLE;
		__atomic_add_fetch(
		    &g->g_shared->s_drain_idle, 1, __ATOMIC_RELEASE);
		return;
	}
	if ((left == 0 && drain_workers_idle(g)) ||
	    now >= g->g_drain_at + DRAIN_GRACE_MS) {
		drain_end(g);
		return;
	}
	drain_tick(g);
}

/* Loop g drains until deadline at: no more accepting, no new requests. */
static void
drain_loop_begin(struct gw *g, uint64_t at)
{
	struct conn *c, *next;

	if (gw_draining(g))
		return;
	g->g_drain_at = at;
	listener_stop(g);
	for (c = TAILQ_FIRST(&g->g_conns); c != NULL; c = next) {
		next = TAILQ_NEXT(c, c_entry);
		drain_conn_start(c);
	}
	drain_tick(g);
}

/* A worker drains (GW_CMD_DRAIN), until the deadline drain_start set. */
void
drain_loop_start(struct gw *g)
{
	drain_loop_begin(
	    g, __atomic_load_n(&g->g_shared->s_drain_at, __ATOMIC_ACQUIRE));
}

/*
 * Start draining the process, for up to ms milliseconds (main loop; the
 * caller has logged why).  With DRAIN_F_UPGRADE the listening sockets
 * went to a new process: this one closes its copies the same way, and
 * its admin API too.  stop ends the process once the drain is over; it
 * calls drain_stop.  A second call does nothing.
 */
void
drain_start(struct gw *g, uint64_t ms, int flags, void (*stop)(struct gw *))
{
	uint64_t now = clock_mono_msec();

	if (gw_draining(g))
		return;
	drain_main.d_stop = stop;
	drain_main.d_start = now;
	__atomic_store_n(&g->g_shared->s_drain_at, now + ms, __ATOMIC_RELEASE);
	if (flags & DRAIN_F_UPGRADE)
		admin_stop(g);
	drain_loop_begin(g, now + ms);
	tunnel_drain_start(g);
	workers_post(g, GW_CMD_DRAIN);
}

/* The loop stops (the process exits): the drain's timer does nothing. */
void
drain_stop(struct gw *g)
{
	g->g_drain |= DRAIN_L_OVER;
}
