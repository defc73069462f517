/*
 * Raw byte relay for upgraded connections (WebSocket after 101 Switching
 * Protocols).  Bytes move between the two bufferevents without copying,
 * with the same watermarks as the HTTP relay, and the connection ends after
 * a long idle time with no byte in either direction.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "splicer.h"

/* Stop reading a side when the other side's output holds this much. */
#define RELAY_HIGH (256 * 1024)
#define RELAY_LOW (64 * 1024)

static void relay_upstream_read_cb(struct bufferevent *, void *);
static void relay_upstream_write_cb(struct bufferevent *, void *);
static void relay_upstream_event_cb(struct bufferevent *, short, void *);

/* Move what src has read to dst's output; pause src when dst is full. */
static void
relay_move(struct conn *c, struct bufferevent *src, struct bufferevent *dst)
{
	struct evbuffer *in = bufferevent_get_input(src);
	struct evbuffer *out = bufferevent_get_output(dst);
	size_t n;

	if ((n = evbuffer_get_length(in)) > 0) {
		evbuffer_add_buffer(out, in);
		c->c_active_ms = clock_mono_msec();
		if (src == c->c_bev)
			c->c_req_body.b_total += n;
		else
			c->c_resp_body.b_total += n;
	}
	if (evbuffer_get_length(out) >= RELAY_HIGH)
		bufferevent_disable(src, EV_READ);
	else
		bufferevent_enable(src, EV_READ);
}

/* Arm the idle check for the rest of the idle time. */
static void
relay_arm_idle(struct conn *c)
{
	uint64_t idle = c->c_gw->g_conf->cf_ws_idle_timeout;
	uint64_t since = clock_mono_msec() - c->c_active_ms;
	struct timeval tv;

	clock_msec_to_tv(since >= idle ? 1 : idle - since, &tv);
	evtimer_add(c->c_timer, &tv);
}

/*
 * The idle timer fired: close when nothing moved for the whole idle time,
 * else wait for the rest of it.  Checking lazily keeps the data path free
 * of timer updates.
 */
void
relay_idle(struct conn *c)
{
	if (clock_mono_msec() - c->c_active_ms >=
	    c->c_gw->g_conf->cf_ws_idle_timeout) {
		conn_close(c, "websocket idle timeout");
		return;
	}
	relay_arm_idle(c);
}

/*
 * A loop's pipe pool for splice(2), or NULL when AKGW_SPLICE=0 turns it off
 * (to measure what it buys).
 */
struct splice_pool *
relay_splice_pool(void)
{
	const char *v = getenv("AKGW_SPLICE");

	if (v != NULL && strcmp(v, "0") == 0)
		return (NULL);
	return (splice_pool_new());
}

/* Stop the splice(2) moves of c, if any. */
void
relay_splice_stop(struct conn *c)
{
	relay_splice_stop_one(c, 0);
	relay_splice_stop_one(c, 1);
}

/* Stop one direction's move: 0 to the upstream, 1 to the client. */
void
relay_splice_stop_one(struct conn *c, int dir)
{
	splicer_free(c->c_spl[dir]);
	c->c_spl[dir] = NULL;
}

/* Bytes went from the client to the upstream in the kernel. */
static void
relay_splice_up(void *arg, size_t n)
{
	struct conn *c = arg;

	c->c_active_ms = clock_mono_msec();
	c->c_req_body.b_total += n;
}

/* Bytes went from the upstream to the client in the kernel. */
static void
relay_splice_down(void *arg, size_t n)
{
	struct conn *c = arg;

	c->c_active_ms = clock_mono_msec();
	c->c_resp_body.b_total += n;
}

/* The client's side ended: everything it sent was passed on. */
static void
relay_splice_up_done(void *arg, int error)
{
	struct conn *c = arg;

	relay_splice_stop(c);
	conn_close(c, error == 0 ? "websocket client closed"
				 : "websocket client error");
}

/* The upstream's side ended: everything it sent was passed on. */
static void
relay_splice_down_done(void *arg, int error)
{
	struct conn *c = arg;

	relay_splice_stop(c);
	if (c->c_up != NULL)
		upstream_close(c->c_up,
		    error == 0 ? "websocket upstream closed"
			       : "websocket upstream error");
	c->c_up = NULL;
	conn_finish(c);
}

/*
 * Once nothing is buffered on either side of a plaintext upgraded
 * connection, move its bytes with splice(2): they no longer enter user
 * space.  The bufferevents rest until the connection closes.
 */
void
relay_splice_try(struct conn *c)
{
	static const struct splicer_cbs up_cbs = { relay_splice_up,
		relay_splice_up_done };
	static const struct splicer_cbs down_cbs = { relay_splice_down,
		relay_splice_down_done };
	struct upstream *up = c->c_up;
	struct event_base *base = c->c_gw->g_base;
	int cfd, ufd;

	if (c->c_gw->g_splice == NULL || c->c_spl[0] != NULL || up == NULL ||
	    (c->c_flags & CONN_F_TLS) || c->c_state != CONN_S_UPGRADED ||
	    up->u_state != UP_S_ACTIVE)
		return;
	/* What the pass queued goes first (wthru.h). */
	wthru_write_now(&c->c_wt);
	wthru_write_now(&up->u_wt);
	if (evbuffer_get_length(bufferevent_get_input(c->c_bev)) != 0 ||
	    evbuffer_get_length(bufferevent_get_output(c->c_bev)) != 0 ||
	    evbuffer_get_length(bufferevent_get_input(up->u_bev)) != 0 ||
	    evbuffer_get_length(bufferevent_get_output(up->u_bev)) != 0)
		return;
	if ((cfd = bufferevent_getfd(c->c_bev)) == -1 ||
	    (ufd = bufferevent_getfd(up->u_bev)) == -1)
		return;
	bufferevent_disable(c->c_bev, EV_READ | EV_WRITE);
	bufferevent_disable(up->u_bev, EV_READ | EV_WRITE);
	c->c_spl[0] = splicer_new(base, c->c_gw->g_splice, cfd, ufd,
	    SPLICER_TO_EOF, 0, &up_cbs, c);
	c->c_spl[1] = splicer_new(base, c->c_gw->g_splice, ufd, cfd,
	    SPLICER_TO_EOF, 0, &down_cbs, c);
	log_debug("conn %llu: relaying with splice(2)",
	    (unsigned long long)c->c_id);
	splicer_start(c->c_spl[0]);
	/* The first may have ended the connection already. */
	if (c->c_spl[1] != NULL)
		splicer_start(c->c_spl[1]);
}

/* Switch conn c and its upstream to the raw relay after a 101 response. */
void
relay_start(struct conn *c)
{
	struct upstream *up = c->c_up;

	c->c_state = CONN_S_UPGRADED;
	c->c_flags |= CONN_F_UPGRADED;
	c->c_active_ms = clock_mono_msec();
	up->u_flags |= UP_F_NO_REUSE;
	evtimer_del(up->u_timer);
	bufferevent_set_timeouts(up->u_bev, NULL, NULL);
	bufferevent_set_timeouts(c->c_bev, NULL, NULL);
	bufferevent_setwatermark(up->u_bev, EV_WRITE, RELAY_LOW, 0);
	bufferevent_setwatermark(c->c_bev, EV_WRITE, RELAY_LOW, 0);
	bufferevent_setcb(up->u_bev, relay_upstream_read_cb,
	    relay_upstream_write_cb, relay_upstream_event_cb, up);
	if (!(c->c_flags & CONN_F_HANDED))
		GW_ADD(c->c_gw->g_metrics.m_ws_active, 1);
	relay_arm_idle(c);
	/* Bytes that arrived with the 101, and any the client sent early. */
	relay_move(c, up->u_bev, c->c_bev);
	relay_move(c, c->c_bev, up->u_bev);
}

/* The client sent bytes. */
void
relay_client_read(struct conn *c)
{
	if (c->c_up != NULL)
		relay_move(c, c->c_bev, c->c_up->u_bev);
}

/* The client's output drained: read the upstream again. */
void
relay_client_drained(struct conn *c)
{
	if (c->c_up != NULL) {
		relay_move(c, c->c_up->u_bev, c->c_bev);
		relay_splice_try(c);
	}
}

/*
 * The client closed: pass on what it sent, then close the upstream once
 * that is written, and the client connection now.
 */
void
relay_client_eof(struct conn *c)
{
	struct upstream *up = c->c_up;

	if (up != NULL) {
		evbuffer_add_buffer(bufferevent_get_output(up->u_bev),
		    bufferevent_get_input(c->c_bev));
		up->u_conn = NULL;
		c->c_up = NULL;
		up->u_flags |= UP_F_CLOSE_DRAINED;
		bufferevent_disable(up->u_bev, EV_READ);
		bufferevent_setwatermark(up->u_bev, EV_WRITE, 0, 0);
		if (evbuffer_get_length(bufferevent_get_output(up->u_bev)) == 0)
			upstream_close(up, "websocket client closed");
	}
	conn_close(c, "websocket client closed");
}

/* The upstream sent bytes. */
static void
relay_upstream_read_cb(struct bufferevent *bev, void *arg)
{
	struct upstream *up = arg;

	if (up->u_state == UP_S_DEAD || up->u_conn == NULL)
		return;
	evio_read_more(bev);
	relay_move(up->u_conn, up->u_bev, up->u_conn->c_bev);
	wthru_flush(&up->u_conn->c_wt);
	relay_splice_try(up->u_conn);
}

/* The upstream's output drained: read the client again, or finish. */
static void
relay_upstream_write_cb(struct bufferevent *bev, void *arg)
{
	struct upstream *up = arg;

	if (up->u_state == UP_S_DEAD)
		return;
	if (up->u_flags & UP_F_CLOSE_DRAINED) {
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			upstream_close(up, "websocket client closed");
		return;
	}
	if (up->u_conn != NULL) {
		relay_move(up->u_conn, up->u_conn->c_bev, up->u_bev);
		relay_splice_try(up->u_conn);
	}
}

/* The upstream closed or failed: pass on what it sent, then finish. */
static void
relay_upstream_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct upstream *up = arg;
	struct conn *c = up->u_conn;

	(void)bev;
	if (up->u_state == UP_S_DEAD)
		return;
	if (c == NULL) {
		upstream_close(up, "websocket upstream gone");
		return;
	}
	evbuffer_add_buffer(
	    bufferevent_get_output(c->c_bev), bufferevent_get_input(up->u_bev));
	upstream_close(up,
	    (what & BEV_EVENT_EOF) ? "websocket upstream closed"
				   : "websocket upstream error");
	conn_finish(c);
}
