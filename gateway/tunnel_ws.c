/*
 * Application WebSockets on Port B (tunnel-protocol.md §10.6, §4.10): the
 * caller's upgrade becomes ws_connect; the 101 goes out only once the
 * client answers ws_connected (within 10 s), so a failure is still an
 * HTTP answer.  Then messages flow both ways: text as ws_message, binary
 * as WS_BINARY_DATA envelopes split at the negotiated chunk size, END on
 * the last.  Channels have no credits (§6.1); a channel whose queue passes
 * TWS_QUEUE_MAX fails instead of buffering more.  Channels never survive a
 * lost link (§8.7).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "stream.h"
#include "wsconn.h"

/* The client must answer ws_connect within this (§4.10). */
#define TWS_CONNECT_MS (10 * 1000)
/* Bytes queued toward the caller, or on the link, before a channel fails. */
#define TWS_QUEUE_MAX ((size_t)16 << 20)

static const struct gw_error tws_err_upgrade[] = { { 400,
    "bad_websocket_upgrade" } };
static const struct gw_error tws_err_version[] = { { 426,
    "websocket_version" } };

/* Free what a channel holds of its WebSocket. */
void
tunnel_ws_free(struct tunnel_xchg *x)
{
	wsconn_free(x->x_ws);
	x->x_ws = NULL;
	if (x->x_ws_msg != NULL)
		evbuffer_free(x->x_ws_msg);
	x->x_ws_msg = NULL;
}

/*
 * End an open channel: close the caller's WebSocket with code and reason,
 * optionally tell the client error{id, tell}, and close the connection.
 */
static void
tws_fail(
    struct tunnel_xchg *x, uint16_t code, const char *reason, const char *tell)
{
	struct tunnel_dconn *d = x->x_dconn;

	if (x->x_state == TX_S_DONE)
		return;
	if (tell != NULL)
		tunnel_send_error(x->x_tunnel, x->x_id, tell);
	if (x->x_ws != NULL && !(x->x_flags & TX_F_WS_CLOSED))
		wsconn_close(x->x_ws, code, reason);
	tunnel_xchg_end(x, reason);
	if (d != NULL)
		tunnel_dconn_close(d, reason);
}

/*
 * Start a channel for a WebSocket upgrade on Port B: check it (400, or
 * 426 for a version other than 13), then send ws_connect, or hold it for
 * a client like any request.
 */
void
tunnel_ws_start(struct tunnel_dconn *d)
{
	const struct http1_msg *m = d->d_req;
	const struct hfield *h;
	struct tunnel_xchg *x;
	const char *key;
	char *why;

	/* The connection is the channel's, or it closes after a refusal. */
	h1s_no_keep(d->d_h1s);
	if (ws_check_upgrade_request(m, &key, &why) != 0) {
		h = http1_msg_find(m, "sec-websocket-version");
		tunnel_dconn_refuse(d,
		    h != NULL && strcmp(h->value, "13") != 0 ? tws_err_version
							     : tws_err_upgrade,
		    "Not a valid WebSocket upgrade: %s.", why);
		free(why);
		return;
	}
	if (m->m_target_len == 0 || *m->m_target != '/') {
		tunnel_dconn_refuse(d, gw_err_bad_target,
		    "The request target must be a path such as /chat.");
		return;
	}
	x = tunnel_xchg_new(d, TX_F_WS | TX_F_UP_DONE);
	x->x_target = xstrndup(m->m_target, m->m_target_len);
	if (ws_accept_key(key, x->x_ws_accept) != 0) {
		tunnel_xchg_fail(x, tws_err_upgrade, NULL,
		    "Cannot compute Sec-WebSocket-Accept.");
		return;
	}
	tunnel_xchg_ready(x);
}

/*
 * Send ws_connect (§4.10): the path with its query and every handshake
 * header but Host, as an object.
 */
void
tunnel_ws_dispatch(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;
	const struct tunnel_link *l = tunnel_active(t);
	struct tunnel_dconn *d = x->x_dconn;
	const struct hfield *h;
	struct tunproto_msg m;
	struct timeval tv;
	size_t i;

	if (l == NULL || d == NULL)
		return;
	if (t->t_nchannels >= l->l_neg.l_max_inflight) {
		tunnel_xchg_fail(x, gw_err_tunnel_busy, NULL,
		    "Tunnel WebSocket channel limit reached: %llu are open.",
		    (unsigned long long)l->l_neg.l_max_inflight);
		return;
	}
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_WS_CONNECT;
	m.m_id = x->x_id;
	m.m_path = x->x_target;
	for (i = 0; i < d->d_req->m_nheaders; i++) {
		h = &d->d_req->m_headers[i];
		if (strcasecmp(h->name, "host") != 0)
			tunproto_msg_add_header(&m, h->name, h->value);
	}
	evtimer_del(x->x_timer);
	x->x_flags |= TX_F_COUNTED;
	t->t_nchannels++;
	x->x_state = TX_S_WS_WAIT;
	tunnel_send_msg(t, &m);
	m.m_id = m.m_path = NULL;
	tunproto_msg_free(&m);
	clock_msec_to_tv(TWS_CONNECT_MS, &tv);
	evtimer_add(x->x_timer, &tv);
}

/* Queue one message for the caller, failing the channel past the cap. */
static void
tws_to_caller(struct tunnel_xchg *x, int binary, const uint8_t *p, size_t len)
{
	if (x->x_ws == NULL || (x->x_flags & TX_F_WS_CLOSED))
		return;
	if (wsconn_queued(x->x_ws) + len > TWS_QUEUE_MAX ||
	    wsconn_send(x->x_ws, binary, p, len) != 0) {
		tws_fail(x, WS_CLOSE_INTERNAL_ERROR,
		    "WebSocket channel queue limit reached",
		    "WebSocket channel queue limit reached");
		return;
	}
	x->x_tunnel->t_bytes_out += len;
	x->x_resp_received += len;
}

/* A message from the caller: to the client as ws_message or envelopes. */
static void
tws_message_cb(void *arg, int is_binary, const uint8_t *data, size_t len)
{
	struct tunnel_xchg *x = arg;
	struct tunnel *t = x->x_tunnel;
	const struct tunnel_link *l;
	struct tunproto_msg m;
	size_t off, n, chunk;
	int flags;

	if (x->x_state != TX_S_WS_OPEN || (l = tunnel_active(t)) == NULL)
		return;
	if (wsconn_queued(l->l_ws) > TWS_QUEUE_MAX) {
		tws_fail(x, WS_CLOSE_INTERNAL_ERROR, "tunnel congested",
		    "WebSocket channel queue limit reached");
		return;
	}
	t->t_bytes_in += len;
	x->x_up_read += len;
	if (!is_binary) {
		memset(&m, 0, sizeof m);
		m.m_type = TUNPROTO_T_WS_MESSAGE;
		m.m_id = x->x_id;
		m.m_body = (uint8_t *)data;
		m.m_body_len = len;
		if (tunnel_send_msg(t, &m) != 0 && tunnel_active(t) != NULL)
			tws_fail(x, WS_CLOSE_TOO_BIG,
			    "text message exceeds the control-frame limit",
			    "WebSocket text message exceeds control-frame "
			    "limit");
		return;
	}
	chunk = (size_t)l->l_neg.l_max_stream_chunk;
	off = 0;
	do {
		n = len - off < chunk ? len - off : chunk;
		flags = off + n == len ? TUNPROTO_ENV_F_END : 0;
		if (tunnel_send_data(t, TUNPROTO_ENV_WS_BINARY_DATA, x->x_id,
			flags, 0, data + off, n) != 0)
			return;
		off += n;
	} while (off < len);
}

/* Free a finished channel from the loop, once its WebSocket closed. */
static void
tws_free_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd;
	(void)events;
	tunnel_xchg_free(arg);
}

/* The caller's WebSocket closed: tell the client ws_close (§4.10). */
static void
tws_close_cb(void *arg, uint16_t code, const char *reason)
{
	struct tunnel_xchg *x = arg;
	struct tunnel_dconn *d = x->x_dconn;
	struct tunproto_msg m;
	struct timeval tv = { 0, 0 };

	x->x_flags |= TX_F_WS_CLOSED;
	if (x->x_state == TX_S_DONE) {
		/* Ended earlier, waiting for this close; the tunnel may be gone. */
		event_base_once(x->x_base, -1, EV_TIMEOUT, tws_free_cb, x, &tv);
		return;
	}
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_WS_CLOSE;
	m.m_id = x->x_id;
	m.m_code = code == WS_CLOSE_NO_STATUS || code == WS_CLOSE_ABNORMAL
	    ? WS_CLOSE_NORMAL
	    : code;
	m.m_reason = code == WS_CLOSE_ABNORMAL ? NULL : (char *)reason;
	tunnel_send_msg(x->x_tunnel, &m);
	/* Closed: tunnel_xchg_end frees it from the loop. */
	tunnel_xchg_end(x, "caller closed the WebSocket");
	if (d != NULL)
		tunnel_dconn_close(d, "WebSocket closed");
}

/*
 * The client opened the target WebSocket: the 101 to the caller through
 * the engine's sink, which hands the connection over (h1s_release), then
 * relay.
 */
static void
tws_open(struct tunnel_xchg *x)
{
	static const struct wsconn_cbs cbs = {
		.on_message = tws_message_cb,
		.on_close = tws_close_cb,
	};
	struct tunnel *t = x->x_tunnel;
	const struct tunnel_link *l = tunnel_active(t);
	struct tunnel_dconn *d = x->x_dconn;
	struct stream *s;
	struct hfield f[2];
	struct head rh;
	char peer[64];

	if (d == NULL || l == NULL)
		return;
	evtimer_del(x->x_timer);
	memset(&rh, 0, sizeof rh);
	hfield_set(&f[0], "Upgrade", "websocket");
	hfield_set(&f[1], "Sec-WebSocket-Accept", x->x_ws_accept);
	rh.h_status = 101;
	rh.h_version = 11;
	rh.h_fields = f;
	rh.h_nfields = 2;
	rh.h_flags = HEAD_F_UPGRADE;
	snprintf(peer, sizeof peer, "%s", d->d_peer);
	if ((s = tunnel_dconn_release(d, &rh)) == NULL)
		return;
	x->x_ws = wsconn_new(t->t_gw->g_base, s, 0, &cbs, x,
	    (size_t)l->l_neg.l_max_ws_message_size);
	if (x->x_ws == NULL) {
		stream_free(s);
		tws_fail(x, 0, "cannot start the WebSocket",
		    "downstream request closed");
		return;
	}
	x->x_state = TX_S_WS_OPEN;
	x->x_status = 101;
	log_debug("tunnel %s:%d: channel %s open for %s", t->t_name, t->t_port,
	    x->x_id, peer);
}

/* A control message for a channel. */
void
tunnel_ws_msg(struct tunnel_xchg *x, const struct tunproto_msg *m)
{
	uint16_t code;

	switch (m->m_type) {
	case TUNPROTO_T_WS_CONNECTED:
		if (x->x_state == TX_S_WS_WAIT)
			tws_open(x);
		break;
	case TUNPROTO_T_WS_MESSAGE:
		if (x->x_state != TX_S_WS_OPEN)
			break;
		if ((m->m_flags & TUNPROTO_MSG_F_BINARY) &&
		    m->m_body_len > tunnel_active(x->x_tunnel)
					->l_neg.l_max_ws_message_size) {
			tws_fail(x, WS_CLOSE_TOO_BIG, "message too big",
			    "WebSocket binary message exceeds limit");
			break;
		}
		tws_to_caller(x, (m->m_flags & TUNPROTO_MSG_F_BINARY) != 0,
		    m->m_body, m->m_body_len);
		break;
	case TUNPROTO_T_WS_CLOSE:
		if (x->x_state == TX_S_WS_WAIT) {
			tunnel_xchg_fail(x, gw_err_tunnel_error, NULL,
			    "The target closed the WebSocket (%d %s).",
			    m->m_code, m->m_reason != NULL ? m->m_reason : "");
			break;
		}
		code = (uint16_t)m->m_code;
		if (!ws_close_code_valid((unsigned int)m->m_code))
			code = WS_CLOSE_NORMAL;
		tws_fail(x, code, m->m_reason != NULL ? m->m_reason : "", NULL);
		break;
	case TUNPROTO_T_ERROR:
		if (x->x_state == TX_S_WS_WAIT)
			tunnel_xchg_fail(
			    x, gw_err_tunnel_error, NULL, "%s", m->m_message);
		else
			tws_fail(
			    x, WS_CLOSE_INTERNAL_ERROR, m->m_message, NULL);
		break;
	default:
		break;
	}
}

/* A WS_BINARY_DATA envelope: reassemble until END (§4.10). */
void
tunnel_ws_data(struct tunnel_xchg *x, const struct tunproto_env *env)
{
	const struct tunnel_link *l = tunnel_active(x->x_tunnel);
	size_t have;

	if (x->x_state != TX_S_WS_OPEN || l == NULL)
		return;
	if (x->x_ws_msg == NULL)
		x->x_ws_msg = evbuffer_new();
	have = evbuffer_get_length(x->x_ws_msg);
	if (have + env->e_len > l->l_neg.l_max_ws_message_size) {
		tws_fail(x, WS_CLOSE_TOO_BIG, "message too big",
		    "WebSocket binary message exceeds limit");
		return;
	}
	evbuffer_add(x->x_ws_msg, env->e_payload, env->e_len);
	if (!(env->e_flags & TUNPROTO_ENV_F_END))
		return;
	have = evbuffer_get_length(x->x_ws_msg);
	tws_to_caller(x, 1, evbuffer_pullup(x->x_ws_msg, -1), have);
	if (x->x_ws_msg != NULL)
		evbuffer_drain(x->x_ws_msg, have);
}

/*
 * End a channel whose link went away or whose caller did: before the 101
 * the caller gets an HTTP error, after it a close (1011).  A client still
 * attached is told ws_close.
 */
void
tunnel_ws_lost(struct tunnel_xchg *x, const char *reason)
{
	struct tunnel *t = x->x_tunnel;
	struct tunproto_msg m;

	if (x->x_state == TX_S_DONE)
		return;
	if ((x->x_flags & TX_F_COUNTED) && tunnel_active(t) != NULL) {
		memset(&m, 0, sizeof m);
		m.m_type = TUNPROTO_T_WS_CLOSE;
		m.m_id = x->x_id;
		m.m_code = WS_CLOSE_NORMAL;
		tunnel_send_msg(t, &m);
	}
	if (x->x_state == TX_S_WS_OPEN)
		tws_fail(x, WS_CLOSE_INTERNAL_ERROR, reason, NULL);
	else
		tunnel_xchg_fail(x, gw_err_tunnel_error, NULL,
		    "The WebSocket could not be opened: %s.", reason);
}
