/*
 * Raw byte relay for upgraded connections (WebSocket after 101 Switching
 * Protocols).  Bytes move between the two streams without copying,
 * with the same watermarks as the HTTP relay, or with splice(2) between
 * two plain sockets.
 *
 * Each direction ends on its own: when one side ends its stream, what it
 * sent is written to the other side, whose write side is then shut
 * (shutdown(2), or close_notify towards a TLS client), and the other
 * direction goes on.  The connection closes when both directions have
 * ended, after timeouts.websocket_idle with no byte in either direction,
 * or after timeouts.websocket_fin once one direction has ended.  The
 * upstream socket belongs to its client connection until then: it never
 * outlives it, and counts in max_connections, /metrics and shutdown with
 * it.
 *
 * A WebSocket's frames from the upstream are followed (lib/wsframe.c's
 * ws_track: the lengths in their headers, nothing copied) while they pass
 * through our buffers, so that a drain can end it with a close frame 1001
 * of ours between two of them (relay_drain_close).  Once splice(2) moves
 * them they can no longer be followed, and splicing does not start while
 * the gateway drains.
 */
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <linux/sockios.h>

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "splicer.h"
#include "stream.h"
#include "wsframe.h"

/* Stop reading a side when the other side's output holds this much. */
#define RELAY_HIGH (256 * 1024)
#define RELAY_LOW (64 * 1024)

static void relay_upstream_read_cb(struct stream *, void *);
static void relay_upstream_write_cb(struct stream *, void *);
static void relay_upstream_event_cb(struct stream *, short, void *);

static void relay_check(struct conn *);
static void relay_drain_closed(struct conn *);

/* The connection an upgraded upstream relays for: its exchange's. */
static inline struct conn *
relay_conn(const struct upstream *up)
{
	return (((struct gw_xchg *)up->u_owner_arg)->x_conn);
}

/*
 * Move what src has read to dst's output; pause src when dst is full.  A
 * side that has ended is not read again.  While splice(2) moves the bytes
 * the streams are lent to it (stream_lend) and do nothing.
 */
static void
relay_move(struct conn *c, struct stream *src, struct stream *dst)
{
	struct evbuffer *in = stream_input(src);
	struct evbuffer *out = stream_output(dst);
	int down = src != c->c_stream;
	int ended = c->c_relay & (down ? RELAY_F_DOWN_EOF : RELAY_F_UP_EOF);
	size_t n, have;

	if (c->c_spl[0] != NULL || c->c_spl[1] != NULL)
		return;

	if ((n = have = evbuffer_get_length(in)) > 0) {
		/* The upstream's frames are followed; a close stops at one. */
		if (down && c->c_wst != NULL)
			n = ws_track_evbuffer(c->c_wst, in, have,
			    (c->c_flags & CONN_F_DRAIN_WS) != 0);
		if (n == have)
			evbuffer_add_buffer(out, in);
		else
			evbuffer_remove_buffer(in, out, n);
		c->c_active_ms = clock_mono_msec();
		if (!down)
			c->c_x->x_req_body.b_total += n;
		else
			c->c_x->x_resp_body.b_total += n;
	}
	if (down && (c->c_flags & CONN_F_DRAIN_WS) &&
	    ws_track_between(c->c_wst)) {
		relay_drain_closed(c);
		return;
	}
	if (ended || evbuffer_get_length(out) >= RELAY_HIGH)
		stream_disable(src, EV_READ);
	else
		stream_enable(src, EV_READ);
}

/*
 * How long the relay may move nothing: websocket_idle, or websocket_fin
 * (when shorter) once a direction has ended.
 */
static uint64_t
relay_idle_limit(const struct conn *c)
{
	const struct gw_config *cf = c->c_gw->g_conf;

	if (c->c_relay != 0 && cf->cf_ws_fin_timeout < cf->cf_ws_idle_timeout)
		return (cf->cf_ws_fin_timeout);
	return (cf->cf_ws_idle_timeout);
}

/* Arm the idle check for the rest of the idle time. */
static void
relay_arm_idle(struct conn *c)
{
	uint64_t idle = relay_idle_limit(c);
	uint64_t since = clock_mono_msec() - c->c_active_ms;

	conn_timer_set(c, since >= idle ? 1 : idle - since);
}

/*
 * Make closing s reset its connection when it holds bytes its peer never
 * read: the kernel would otherwise keep the socket, and try to deliver
 * them, long after the relay gave up on it.
 */
void
relay_abort_stuck(struct stream *s)
{
	struct linger l = { 1, 0 };
	int fd, n = 0;

	if ((fd = stream_getfd(s)) == -1)
		return;
	if (evbuffer_get_length(stream_output(s)) == 0 &&
	    (ioctl(fd, SIOCOUTQ, &n) != 0 || n == 0))
		return;
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
}

/*
 * The relay of c gives up (a timeout, or the gateway stopping): the
 * sockets that hold bytes their peers never read are reset as they close.
 */
void
relay_abort(struct conn *c)
{
	if (c->c_state != CONN_S_UPGRADED)
		return;
	if (c->c_stream != NULL)
		relay_abort_stuck(c->c_stream);
	if (c->c_x->x_up != NULL && c->c_x->x_up->u_stream != NULL)
		relay_abort_stuck(c->c_x->x_up->u_stream);
}

/*
 * The idle timer fired: close when nothing moved for the whole idle time,
 * else wait for the rest of it.  Checking lazily keeps the data path free
 * of timer updates.
 */
void
relay_idle(struct conn *c)
{
	if (clock_mono_msec() - c->c_active_ms >= relay_idle_limit(c)) {
		relay_abort(c);
		conn_close(c,
		    c->c_relay != 0 ? "websocket half-closed timeout"
				    : "websocket idle timeout");
		return;
	}
	relay_arm_idle(c);
}

/*
 * Direction flag eof ended (RELAY_F_UP_EOF: the client's stream, or
 * RELAY_F_DOWN_EOF: the upstream's).  The first end starts the
 * half-closed deadline and is counted until the connection closes.
 */
static void
relay_ended(struct conn *c, int eof)
{
	struct stream *dst = eof == RELAY_F_UP_EOF ? c->c_x->x_up->u_stream
						   : c->c_stream;

	if (c->c_relay & eof)
		return;
	if (c->c_relay == 0) {
		GW_ADD(c->c_gw->g_metrics.m_relay_half_closed, 1);
		if (eof == RELAY_F_UP_EOF)
			c->c_relay |= RELAY_F_CLIENT_FIRST;
	}
	c->c_relay |= eof;
	c->c_active_ms = clock_mono_msec();
	log_debug("conn %llu: websocket %s ended its stream",
	    (unsigned long long)c->c_id,
	    eof == RELAY_F_UP_EOF ? "client" : "upstream");
	/* The write callback now runs when the output is empty. */
	stream_setwatermark(dst, EV_WRITE, 0, 0);
	relay_arm_idle(c);
}

/*
 * Shut the write side of s, whose output is written (or lent to splice,
 * which wrote it): close_notify then a FIN on TLS, a FIN on a plain
 * socket.  0, or -1 when the peer cannot be told (the connection then
 * closes).
 */
static int
relay_shut(struct stream *s)
{
	if (stream_ssl(s) == NULL)
		return (shutdown(stream_getfd(s), SHUT_WR));
	return (stream_shutdown_write(s));
}

/*
 * Pass on the end of each ended direction whose output has drained, and
 * close the connection once both have.
 */
static void
relay_check(struct conn *c)
{
	struct upstream *up = c->c_x->x_up;

	if (c->c_state != CONN_S_UPGRADED || up == NULL)
		return;
	if ((c->c_relay & (RELAY_F_UP_EOF | RELAY_F_UP_SHUT)) ==
		RELAY_F_UP_EOF &&
	    evbuffer_get_length(stream_output(up->u_stream)) == 0) {
		c->c_relay |= RELAY_F_UP_SHUT;
		if (relay_shut(up->u_stream) != 0) {
			conn_close(c, "websocket upstream error");
			return;
		}
	}
	if ((c->c_relay & (RELAY_F_DOWN_EOF | RELAY_F_DOWN_SHUT)) ==
		RELAY_F_DOWN_EOF &&
	    evbuffer_get_length(stream_output(c->c_stream)) == 0) {
		c->c_relay |= RELAY_F_DOWN_SHUT;
		if (relay_shut(c->c_stream) != 0) {
			conn_close(c, "websocket client error");
			return;
		}
	}
	if ((c->c_relay & (RELAY_F_UP_SHUT | RELAY_F_DOWN_SHUT)) ==
	    (RELAY_F_UP_SHUT | RELAY_F_DOWN_SHUT))
		conn_close(c,
		    (c->c_relay & RELAY_F_CLIENT_FIRST)
			? "websocket client closed"
			: "websocket upstream closed");
}

/* The relay of c ends with the connection (conn_close). */
void
relay_end(struct conn *c)
{
	relay_splice_stop(c);
	free(c->c_wst);
	c->c_wst = NULL;
	c->c_flags &= ~CONN_F_DRAIN_WS;
	if (c->c_relay != 0)
		GW_ADD(c->c_gw->g_metrics.m_relay_half_closed, -1);
	c->c_relay = 0;
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
	c->c_x->x_req_body.b_total += n;
}

/* Bytes went from the upstream to the client in the kernel. */
static void
relay_splice_down(void *arg, size_t n)
{
	struct conn *c = arg;

	c->c_active_ms = clock_mono_msec();
	c->c_x->x_resp_body.b_total += n;
}

/*
 * A spliced direction ended: dir 0, the client's stream, all of it passed
 * to the upstream; 1, the upstream's, passed to the client.  The end is
 * passed on and the other direction goes on.
 */
static void
relay_splice_done(struct conn *c, int dir, int error)
{
	relay_splice_stop_one(c, dir);
	if (error != 0) {
		relay_splice_stop(c);
		conn_close(c,
		    dir == 0 ? "websocket client error"
			     : "websocket upstream error");
		return;
	}
	if (dir == 0)
		c->c_flags |= CONN_F_CLIENT_EOF;
	relay_ended(c, dir == 0 ? RELAY_F_UP_EOF : RELAY_F_DOWN_EOF);
	relay_check(c);
}

/* The client's side ended: everything it sent was passed on. */
static void
relay_splice_up_done(void *arg, int error)
{
	relay_splice_done(arg, 0, error);
}

/* The upstream's side ended: everything it sent was passed on. */
static void
relay_splice_down_done(void *arg, int error)
{
	relay_splice_done(arg, 1, error);
}

/*
 * Once nothing is buffered on either side of a plaintext upgraded
 * connection, move its bytes with splice(2): they no longer enter user
 * space.  The streams are lent to splice(2) until the connection closes.
 */
void
relay_splice_try(struct conn *c)
{
	static const struct splicer_cbs up_cbs = { relay_splice_up,
		relay_splice_up_done };
	static const struct splicer_cbs down_cbs = { relay_splice_down,
		relay_splice_down_done };
	struct upstream *up = c->c_x->x_up;
	struct event_base *base = c->c_gw->g_base;
	int cfd, ufd;

	if (c->c_gw->g_splice == NULL || c->c_spl[0] != NULL ||
	    c->c_spl[1] != NULL || c->c_relay != 0 || up == NULL ||
	    (c->c_flags & CONN_F_TLS) || c->c_state != CONN_S_UPGRADED ||
	    up->u_state != UP_S_ACTIVE ||
	    (c->c_wst != NULL && gw_draining(c->c_gw)))
		return;
	/* What the pass queued goes first (stream_lend writes it). */
	if (evbuffer_get_length(stream_input(c->c_stream)) != 0 ||
	    evbuffer_get_length(stream_input(up->u_stream)) != 0 ||
	    stream_flush(c->c_stream) != 0 || stream_flush(up->u_stream) != 0)
		return;
	if ((cfd = stream_lend(c->c_stream)) == -1)
		return;
	if ((ufd = stream_lend(up->u_stream)) == -1) {
		stream_unlend(c->c_stream);
		return;
	}
	/* The frames are no longer seen: a drain will cut this one. */
	free(c->c_wst);
	c->c_wst = NULL;
	c->c_spl[0] = splicer_new(
	    base, c->c_gw->g_splice, cfd, ufd, SPLICER_TO_EOF, 0, &up_cbs, c);
	c->c_spl[1] = splicer_new(
	    base, c->c_gw->g_splice, ufd, cfd, SPLICER_TO_EOF, 0, &down_cbs, c);
	log_debug(
	    "conn %llu: relaying with splice(2)", (unsigned long long)c->c_id);
	splicer_start(c->c_spl[0]);
	/* The first may have ended the connection already. */
	if (c->c_spl[1] != NULL)
		splicer_start(c->c_spl[1]);
}

/* Switch conn c and its upstream to the raw relay after a 101 response. */
void
relay_start(struct conn *c)
{
	struct upstream *up = c->c_x->x_up;

	c->c_state = CONN_S_UPGRADED;
	c->c_flags |= CONN_F_UPGRADED;
	c->c_active_ms = clock_mono_msec();
	up->u_flags |= UP_F_NO_REUSE;
	evtimer_del(up->u_timer);
	stream_set_timeouts(up->u_stream, NULL, NULL);
	stream_set_timeouts(c->c_stream, NULL, NULL);
	stream_setwatermark(up->u_stream, EV_WRITE, RELAY_LOW, 0);
	stream_setwatermark(c->c_stream, EV_WRITE, RELAY_LOW, 0);
	stream_setcb(up->u_stream, relay_upstream_read_cb,
	    relay_upstream_write_cb, relay_upstream_event_cb, up);
	if (!(c->c_flags & CONN_F_HANDED))
		GW_ADD(c->c_gw->g_metrics.m_ws_active, 1);
	/* A WebSocket's frames are followed (not a tunnel link's bytes). */
	if ((c->c_x->x_flags & XCHG_F_WS_REQ) && !(c->c_flags & CONN_F_HANDED))
		c->c_wst = xcalloc(1, sizeof *c->c_wst);
	relay_arm_idle(c);
	/* Bytes that arrived with the 101, and any the client sent early. */
	relay_move(c, up->u_stream, c->c_stream);
	relay_move(c, c->c_stream, up->u_stream);
}

/* The client sent bytes. */
void
relay_client_read(struct conn *c)
{
	if (c->c_x->x_up != NULL)
		relay_move(c, c->c_stream, c->c_x->x_up->u_stream);
}

/* The client's output drained: read the upstream again, or pass its end. */
void
relay_client_drained(struct conn *c)
{
	if (c->c_x->x_up == NULL)
		return;
	relay_move(c, c->c_x->x_up->u_stream, c->c_stream);
	relay_check(c);
	relay_splice_try(c);
}

/*
 * The client ended its stream: pass on what it sent, then shut the
 * upstream's write side once that is written, and keep relaying what the
 * upstream sends.
 */
void
relay_client_eof(struct conn *c)
{
	if (c->c_x->x_up == NULL) {
		conn_close(c, "websocket client closed");
		return;
	}
	relay_ended(c, RELAY_F_UP_EOF);
	relay_move(c, c->c_stream, c->c_x->x_up->u_stream);
	relay_check(c);
}

/* The upstream sent bytes. */
static void
relay_upstream_read_cb(struct stream *s, void *arg)
{
	struct upstream *up = arg;
	struct conn *c = relay_conn(up);

	(void)s;
	if (up->u_state == UP_S_DEAD || c == NULL)
		return;
	relay_move(c, up->u_stream, c->c_stream);
	relay_splice_try(c);
}

/* The upstream's output drained: read the client again, or pass its end. */
static void
relay_upstream_write_cb(struct stream *s, void *arg)
{
	struct upstream *up = arg;
	struct conn *c = relay_conn(up);

	(void)s;
	if (up->u_state == UP_S_DEAD || c == NULL)
		return;
	relay_move(c, c->c_stream, up->u_stream);
	relay_check(c);
	/* The check may have closed the connection. */
	if (c->c_state == CONN_S_UPGRADED)
		relay_splice_try(c);
}

/*
 * The upstream ended its stream or failed.  On an end, pass on what it
 * sent, then shut the client's write side once that is written, and keep
 * relaying what the client sends; on an error, pass on what it sent and
 * finish the client connection.
 */
static void
relay_upstream_event_cb(struct stream *s, short what, void *arg)
{
	struct upstream *up = arg;
	struct conn *c = relay_conn(up);

	(void)s;
	if (up->u_state == UP_S_DEAD)
		return;
	if (c == NULL) {
		upstream_close(up, "websocket upstream gone");
		return;
	}
	if (what & STREAM_EV_EOF) {
		relay_ended(c, RELAY_F_DOWN_EOF);
		relay_move(c, up->u_stream, c->c_stream);
		relay_check(c);
		return;
	}
	evbuffer_add_buffer(
	    stream_output(c->c_stream), stream_input(up->u_stream));
	upstream_close(up, "websocket upstream error");
	conn_finish(c);
}

/*
 * The drain's close frame goes to the client after what was relayed, at
 * a boundary between two of the upstream's frames; the upstream is
 * closed and the client's connection finishes (its output written, then
 * our side shut).
 */
static void
relay_drain_closed(struct conn *c)
{
	uint8_t f[WS_CLOSE_FRAME_MAX];
	size_t n;

	c->c_flags &= ~CONN_F_DRAIN_WS;
	n = ws_close_put(f, WS_CLOSE_GOING_AWAY, "going away");
	evbuffer_add(stream_output(c->c_stream), f, n);
	log_debug("conn %llu: websocket closed with 1001 (draining)",
	    (unsigned long long)c->c_id);
	if (c->c_x->x_method != NULL && !(c->c_x->x_flags & XCHG_F_LOGGED))
		xchg_log_access(c->c_x, "websocket closed by the drain (1001)");
	/* An upstream that stopped reading is reset, not left to linger. */
	if (c->c_x->x_up != NULL)
		relay_abort_stuck(c->c_x->x_up->u_stream);
	/* A client that reads nothing more is closed with the process. */
	conn_timer_set(c, DRAIN_GRACE_MS);
	conn_finish(c);
}

/*
 * The drain's deadline: end the WebSocket of c with a close frame 1001
 * "going away" to the client, between two of the upstream's frames: now,
 * or once the frame in progress has been relayed.  Returns -1 when that
 * cannot be done (the frames were not followed: splice(2) moved them, or
 * it is not a WebSocket; the upstream has ended its stream); the caller
 * cuts the connection.
 */
int
relay_drain_close(struct conn *c)
{
	struct upstream *up;

	/* No tracker once splice(2) took the bytes: c_wst is NULL then. */
	if (c->c_state != CONN_S_UPGRADED || c->c_wst == NULL ||
	    (up = c->c_x->x_up) == NULL ||
	    (c->c_relay & (RELAY_F_DOWN_EOF | RELAY_F_DOWN_SHUT)))
		return (-1);
	c->c_flags |= CONN_F_DRAIN_WS;
	/* What waits goes, up to the boundary; the close may go now. */
	relay_move(c, up->u_stream, c->c_stream);
	return (0);
}
