/*
 * WebSockets over HTTP/2 (RFC 8441) from clients.  An extended CONNECT
 * with :protocol websocket on a stream of a client's session is an
 * exchange like any other (conn_h2.c, xchg.c): routed from :authority
 * and :path, its credentials checked, its limits counted, refused through
 * the stream's sink, one access line with proto=h2.  Upstream it becomes
 * an HTTP/1.1 upgrade to the sandbox port, written by proxy.c from a
 * request head made here: GET, Upgrade: websocket, a fresh
 * Sec-WebSocket-Key, Sec-WebSocket-Version: 13, the client's
 * Sec-WebSocket-Protocol and -Extensions as it sent them.
 *
 * The exchange's upstream owner is proxy.c's with three hooks of ours
 * (the final head, the request output drained, the end).  A 101 whose
 * Sec-WebSocket-Accept matches our key is answered 200 on the stream
 * (proxy_upgrade_head), which stays open; any other answer is relayed as
 * a normal response by proxy.c, and a 101 that does not match is 502
 * bad_upstream_response.  After the 101:
 *
 *   upstream to client: the upstream reads the rest of its connection as
 *   a body that ends with the close (upstream_read_raw); proxy.c moves it
 *   into the stream's sink, whose DATA frames the client's window paces,
 *   and pauses the upstream while the sink is full.  The upstream's end
 *   ends the stream.
 *
 *   client to upstream: the stream's DATA is moved to the upstream's
 *   output while it holds less than WS_H2_HIGH, the stream's window given
 *   back only as the bytes are taken (ws_h2_client_data); the client's
 *   END_STREAM shuts the upstream's write side once what it sent is
 *   written.
 *
 * The bytes are relayed untouched, so the WebSocket's frames, masks and
 * extensions (permessage-deflate) are the client's and the sandbox's
 * business.  A reset from the client, the stream's idle timeout
 * (timeouts.websocket_idle, websocket_fin once the client ended) or the
 * session's end reach the exchange as on_error and close the upstream.
 * The upstream's frames are followed on their way (ws_track), so that a
 * drain can end the stream with a close frame 1001 of ours between two
 * of them (ws_h2_drain_close).
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "gw.h"
#include "stream.h"
#include "wsconn.h"
#include "wsframe.h"

/* The client's bytes wait in its stream while the upstream holds this. */
#define WS_H2_HIGH (256 * 1024)

/* An RFC 8441 WebSocket's state, beside its exchange (x_ws). */
struct ws_h2 {
	struct upstream_owner wh_owner; /* proxy_owner, with our hooks */
	struct hfield *wh_fields; /* the upstream request's fields */
	char wh_key[WS_KEY_LEN + 1]; /* our Sec-WebSocket-Key */
	struct ws_track wh_track; /* the upstream's frames, relayed */
	int wh_flags;
#define WH_F_COUNTED 0x01 /* in m_ws_active */
#define WH_F_CLIENT_END 0x02 /* the client ended its stream */
#define WH_F_DRAIN 0x04 /* a close 1001 goes at the next boundary */
};

static int ws_h2_head_cb(struct upstream *, const struct head *, void *);
static void ws_h2_drained_cb(struct upstream *, void *);
static void ws_h2_done_cb(struct upstream *, void *);
static void ws_h2_event_cb(struct upstream *, short, void *);
static int ws_h2_body_cb(struct upstream *, struct evbuffer *, size_t, void *);

/* Is the extended CONNECT's :protocol one the gateway carries? */
int
ws_h2_protocol_ok(const struct head *h)
{
	return (h->h_protocol != NULL &&
	    strcasecmp(h->h_protocol, "websocket") == 0);
}

/* Is f called name (lowercase)? */
static int
ws_h2_named(const struct hfield *f, const char *name)
{
	return (f->name_len == strlen(name) &&
	    strncasecmp(f->name, name, f->name_len) == 0);
}

/*
 * The routed exchange goes upstream: its head becomes the HTTP/1.1
 * upgrade request (the client's fields, but the handshake's own, which
 * are ours to write), and proxy.c relays it with our owner hooks.
 */
void
ws_h2_start(struct gw_xchg *x)
{
	struct head *m = &x->x_head;
	const struct hfield *f;
	struct ws_h2 *w;
	size_t i, n = 0;

	w = x->x_ws = xcalloc(1, sizeof *w);
	w->wh_fields = xcalloc(m->h_nfields + 3, sizeof *w->wh_fields);
	for (i = 0; i < m->h_nfields; i++) {
		f = &m->h_fields[i];
		if (ws_h2_named(f, "sec-websocket-key") ||
		    ws_h2_named(f, "sec-websocket-version") ||
		    ws_h2_named(f, "sec-websocket-accept") ||
		    ws_h2_named(f, "upgrade") ||
		    ws_h2_named(f, "content-length"))
			continue;
		w->wh_fields[n++] = *f;
	}
	ws_random_key(w->wh_key);
	hfield_set(&w->wh_fields[n++], "Upgrade", "websocket");
	hfield_set(&w->wh_fields[n++], "Sec-WebSocket-Key", w->wh_key);
	hfield_set(&w->wh_fields[n++], "Sec-WebSocket-Version", "13");
	/* x_method keeps CONNECT for the access line. */
	m->h_method = "GET";
	m->h_method_len = 3;
	m->h_fields = w->wh_fields;
	m->h_nfields = n;
	m->h_flags |= HEAD_F_UPGRADE;
	m->h_flags &= ~HEAD_F_LENGTH;
	m->h_length = 0;
	w->wh_owner = proxy_owner;
	w->wh_owner.uo_head = ws_h2_head_cb;
	w->wh_owner.uo_drained = ws_h2_drained_cb;
	w->wh_owner.uo_done = ws_h2_done_cb;
	w->wh_owner.uo_event = ws_h2_event_cb;
	w->wh_owner.uo_body = ws_h2_body_cb;
	x->x_uo = &w->wh_owner;
	proxy_start(x);
}

/*
 * The upstream's final head.  A 101 that accepts our key makes the
 * stream a WebSocket: 200 to the client, the rest of the upstream's
 * connection read as a body to the close, the client's bytes relayed
 * from now on.  Anything else is proxy.c's, a normal response.
 */
static int
ws_h2_head_cb(struct upstream *up, const struct head *m, void *arg)
{
	struct gw_xchg *x = arg;
	struct ws_h2 *w = x->x_ws;
	struct gw *g = x->x_conn->c_gw;
	char *why;

	if (m->h_status != 101)
		return (proxy_owner.uo_head(up, m, arg));
	if (ws_check_accept_relayed(m, w->wh_key, &why) != 0) {
		xchg_fail(x, gw_err_bad_response,
		    "Sandbox '%s' port %d did not accept the WebSocket "
		    "properly: %s.",
		    x->x_sandbox->sb_id, x->x_port, why);
		free(why);
		return (-1);
	}
	x->x_status = 200;
	x->x_flags |= XCHG_F_RESP_STARTED | XCHG_F_UPGRADED;
	/* Nothing of proxy.c's request body relay runs from now on. */
	x->x_state = XCHG_S_WAIT;
	memset(&x->x_resp_body, 0, sizeof x->x_resp_body);
	x->x_resp_body.b_kind = HTTP1_BODY_EOF;
	if (proxy_upgrade_head(x, m) != 0) {
		upstream_close(up, "websocket client gone");
		xchg_abort(x, "websocket client gone");
		return (-1);
	}
	upstream_read_raw(up);
	stream_set_timeouts(up->u_stream, NULL, NULL);
	if (x->x_tr != NULL)
		h2s_stream_idle(x->x_tr, g->g_conf->cf_ws_idle_timeout);
	GW_ADD(g->g_metrics.m_ws_active, 1);
	w->wh_flags |= WH_F_COUNTED;
	/* What the client sent before the 101 goes first. */
	ws_h2_client_data(x);
	return (x->x_up == up && x->x_state != XCHG_S_DONE ? 0 : -1);
}

/*
 * Move the client's bytes to the upstream while its output has room; the
 * stream's window goes back only as they are taken, so a sandbox that
 * reads slowly slows its client.  Once the client ended its stream and
 * all it sent is taken, the upstream's write side is shut after it.
 */
void
ws_h2_client_data(struct gw_xchg *x)
{
	struct ws_h2 *w = x->x_ws;
	struct upstream *up = x->x_up;
	struct gw *g = x->x_conn->c_gw;
	enum http1_err err;
	struct evbuffer *out;
	size_t len;
	ssize_t n;

	if (w == NULL || !(x->x_flags & XCHG_F_UPGRADED) ||
	    (w->wh_flags & WH_F_CLIENT_END) || x->x_state == XCHG_S_DONE ||
	    up == NULL || up->u_state != UP_S_ACTIVE)
		return;
	out = stream_output(up->u_stream);
	while ((len = evbuffer_get_length(out)) < WS_H2_HIGH) {
		n = x->x_ops->xo_body_read(x, out, WS_H2_HIGH - len, &err);
		if (n < 0)
			return; /* the stream is gone: on_error ends it */
		if (n == 0)
			break;
		x->x_req_body.b_total += (uint64_t)n;
	}
	if (!x->x_ops->xo_body_done(x))
		return; /* more when the output drains (ws_h2_drained_cb) */
	w->wh_flags |= WH_F_CLIENT_END;
	x->x_req_body.b_done = 1;
	log_debug("conn %llu stream %u: websocket client ended its stream",
	    (unsigned long long)x->x_conn->c_id, (unsigned)x->x_stream);
	if (stream_shutdown_write(up->u_stream) != 0) {
		upstream_close(up, "websocket upstream error");
		xchg_abort(x, "websocket upstream error");
		return;
	}
	/* One direction ended: the other has websocket_fin, when shorter. */
	if (x->x_tr != NULL &&
	    g->g_conf->cf_ws_fin_timeout < g->g_conf->cf_ws_idle_timeout)
		h2s_stream_idle(x->x_tr, g->g_conf->cf_ws_fin_timeout);
}

/* The upstream's output drained below its low watermark. */
static void
ws_h2_drained_cb(struct upstream *up, void *arg)
{
	struct gw_xchg *x = arg;

	if (x->x_flags & XCHG_F_UPGRADED)
		ws_h2_client_data(x);
	else
		proxy_owner.uo_drained(up, arg);
}

/*
 * The WebSocket is over, for why (its access line): the upstream is
 * closed, the stream ends (a client still sending is told to stop, RFC
 * 9113 section 8.1), and the exchange with it.
 */
static void
ws_h2_finish(struct gw_xchg *x, const char *why)
{
	x->x_resp_body.b_done = 1;
	x->x_flags |= XCHG_F_RESP_DONE;
	xchg_log_access(x, why);
	if (x->x_up != NULL)
		upstream_close(x->x_up, why);
	(void)sink_end(x->x_sink);
	xchg_done(x);
}

/* The upstream ended its connection and the client has all it sent. */
static void
ws_h2_done_cb(struct upstream *up, void *arg)
{
	struct gw_xchg *x = arg;

	if (!(x->x_flags & XCHG_F_UPGRADED)) {
		proxy_owner.uo_done(up, arg);
		return;
	}
	ws_h2_finish(x, "websocket upstream closed");
}

/*
 * The drain's close frame goes on the stream after what was relayed, at a
 * boundary between two of the upstream's frames; then the WebSocket is
 * over.
 */
static void
ws_h2_drain_closed(struct gw_xchg *x)
{
	uint8_t f[WS_CLOSE_FRAME_MAX];
	struct evbuffer *b = evbuffer_new();
	size_t n;

	x->x_ws->wh_flags &= ~WH_F_DRAIN;
	n = ws_close_put(f, WS_CLOSE_GOING_AWAY, "going away");
	evbuffer_add(b, f, n);
	(void)sink_body(x->x_sink, b, n);
	evbuffer_free(b);
	ws_h2_lost(x); /* an upstream that stopped reading is reset */
	ws_h2_finish(x, "websocket closed by the drain (1001)");
}

/*
 * The upstream's bytes after the 101 go to the stream as proxy.c moves
 * them, followed frame by frame; with a drain's close pending only up to
 * the next boundary, where the close goes and the rest is dropped.
 */
static int
ws_h2_body_cb(struct upstream *up, struct evbuffer *src, size_t n, void *arg)
{
	struct gw_xchg *x = arg;
	struct ws_h2 *w = x->x_ws;
	size_t k;

	if (!(x->x_flags & XCHG_F_UPGRADED))
		return (proxy_owner.uo_body(up, src, n, arg));
	k = ws_track_evbuffer(
	    &w->wh_track, src, n, (w->wh_flags & WH_F_DRAIN) != 0);
	if (k > 0 && proxy_owner.uo_body(up, src, k, arg) != 0)
		return (-1);
	if (!(w->wh_flags & WH_F_DRAIN) || !ws_track_between(&w->wh_track) ||
	    x->x_state == XCHG_S_DONE)
		return (0);
	evbuffer_drain(src, n - k);
	ws_h2_drain_closed(x);
	return (-1);
}

/*
 * The drain's deadline: end x's WebSocket with a close frame 1001 "going
 * away" to the client, now or once the upstream's frame in progress has
 * been relayed.  -1 when x is not an open WebSocket.
 */
int
ws_h2_drain_close(struct gw_xchg *x)
{
	struct ws_h2 *w = x->x_ws;

	if (w == NULL || !(x->x_flags & XCHG_F_UPGRADED) ||
	    x->x_state == XCHG_S_DONE || x->x_up == NULL || x->x_tr == NULL)
		return (-1);
	w->wh_flags |= WH_F_DRAIN;
	if (ws_track_between(&w->wh_track))
		ws_h2_drain_closed(x);
	return (0);
}

/* The upstream's connection failed (not its orderly end). */
static void
ws_h2_event_cb(struct upstream *up, short what, void *arg)
{
	struct gw_xchg *x = arg;

	if (!(x->x_flags & XCHG_F_UPGRADED)) {
		proxy_owner.uo_event(up, what, arg);
		return;
	}
	upstream_close(up, "websocket upstream error");
	xchg_abort(x, "websocket upstream error");
}

/*
 * The stream is gone before the WebSocket ended (the client reset it,
 * its idle timeout, the session's end): as the HTTP/1 relay does, an
 * upstream socket that still holds bytes the sandbox never read is reset
 * when it closes, so it does not linger in the kernel.
 */
void
ws_h2_lost(struct gw_xchg *x)
{
	if ((x->x_flags & XCHG_F_UPGRADED) && x->x_up != NULL &&
	    x->x_up->u_stream != NULL)
		relay_abort_stuck(x->x_up->u_stream);
}

/* The exchange is done: it no longer counts as an open WebSocket. */
void
ws_h2_end(struct gw_xchg *x)
{
	struct ws_h2 *w = x->x_ws;

	if (w == NULL || !(w->wh_flags & WH_F_COUNTED))
		return;
	w->wh_flags &= ~WH_F_COUNTED;
	GW_ADD(x->x_conn->c_gw->g_metrics.m_ws_active, -1);
}

/* Free what ws_h2_start made for x, if anything. */
void
ws_h2_free(struct gw_xchg *x)
{
	struct ws_h2 *w = x->x_ws;

	if (w == NULL)
		return;
	x->x_ws = NULL;
	free(w->wh_fields);
	free(w);
}
