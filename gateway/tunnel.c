/*
 * Reverse tunnels, the sandbox role (tunnel-protocol.md), terminate mode:
 * the gateway is the tunnel server.  One struct tunnel per configured
 * (sandbox, listen port) owns Port B, a loopback listener placed inside the
 * sandbox, for as long as the tunnel is configured; client WebSockets
 * ("links") attach to it through the gateway's tunnel route, newest first.
 *
 * This file keeps the tunnels in step with the directory, accepts links,
 * answers the client's heartbeat, and routes every control message and
 * data envelope to its exchange.  tunnel_hello.c negotiates V2 on the
 * client's hello and binds exchanges to the client's session, so they
 * pause on a lost link and resume (§8) when the same session says hello
 * again.  tunnel_req.c serves HTTP on Port B, tunnel_ws.c application
 * WebSockets.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "netns.h"
#include "stream.h"
#include "wsconn.h"

/*
 * Finished ids remembered, and for how long (§8.8, Rust); past the cap the
 * oldest is forgotten first (and counted: "tombstones_evicted").
 */
#define TUNNEL_TOMBS 1024
#define TUNNEL_TOMB_MS (30 * 1000)
/*
 * Replaced sessions remembered, and for how long: a client cut off while
 * a newer one took over may not take the tunnel back when it returns.
 */
#define TUNNEL_REPLACED 32
#define TUNNEL_REPLACED_MS (60 * 60 * 1000)
/*
 * A link that sent nothing for this long is dead (§7): three of the
 * client's 20 s ping intervals.  The sandbox role never pings.
 */
#define TUNNEL_SILENCE_MS (60 * 1000)
/* Requests that may wait for a client or a slot in max_inflight. */
#define TUNNEL_MAX_QUEUED 256
/* A link without a V2 hello by then is logged once. */
#define TUNNEL_HELLO_MS 250
/* Housekeeping period. */
#define TUNNEL_TICK_MS 1000
/* Retry a Port B listener that could not be opened. */
#define TUNNEL_RETRY_MS 2000
/* Data envelopes wait while more than this is queued on the link (§6.3). */
#define TUNNEL_DATA_HIWAT ((size_t)2 << 20)
/* Largest message on the link: one control frame (§3.1). */
#define TUNNEL_MAX_MESSAGE ((size_t)TUNPROTO_CONTROL_MAX)

/* Every tunnel of a process, and the housekeeping timer. */
struct tunnel_set {
	struct gw *ts_gw;
	TAILQ_HEAD(, tunnel) ts_list; /* configured */
	TAILQ_HEAD(, tunnel) ts_dead; /* removed, waiting for their links */
	struct event *ts_tick;
};

const struct gw_error gw_err_tunnel_not_connected[] = { { 503,
    "tunnel_not_connected" } };
const struct gw_error gw_err_tunnel_timeout[] = { { 504, "tunnel_timeout" } };
const struct gw_error gw_err_tunnel_busy[] = { { 429, "tunnel_busy" } };
const struct gw_error gw_err_tunnel_error[] = { { 502, "tunnel_error" } };
const struct gw_error gw_err_tunnel_gone[] = { { 503, "tunnel_removed" } };
static const struct gw_error tunnel_err_upgrade[] = { { 400,
    "bad_websocket_upgrade" } };
static const struct gw_error tunnel_err_version[] = { { 426,
    "websocket_version" } };

static void tunnel_link_lost(struct tunnel_link *, const char *);
static void tunnel_bind(struct tunnel *);

/* Name of an exchange state, for debug logs. */
const char *
tx_state_name(enum tx_state s)
{
	switch (s) {
	case TX_S_BODY:
		return ("body");
	case TX_S_HOLD:
		return ("hold");
	case TX_S_SENT:
		return ("sent");
	case TX_S_STREAM:
		return ("stream");
	case TX_S_WS_WAIT:
		return ("ws-wait");
	case TX_S_WS_OPEN:
		return ("ws-open");
	case TX_S_DONE:
		return ("done");
	}
	return ("?");
}

/* Names of TX_F_* bits, in bit order, for tunnel_xchg_show. */
static const char *const tx_flag_names[] = { "WS", "STREAM_REQ", "UP_LENGTH",
	"UP_DONE", "UP_END_SENT", "UP_WINDOW", "UP_STOPPED", "RESP_LENGTH",
	"RESP_NOBODY", "PAUSED", "COUNTED", "WS_CLOSED", "RETRY", "UP_PROBE",
	"CONN" };

/*
 * An exchange's id, state and flags into buf of size bytes for debug logs,
 * as "ID state=sent flags=COUNTED|STREAM_REQ"; returns buf.
 */
const char *
tunnel_xchg_show(const struct tunnel_xchg *x, char *buf, size_t size)
{
	size_t i, n;
	int first = 1, len;

	len = snprintf(buf, size, "%s state=%s flags=", x->x_id,
	    tx_state_name(x->x_state));
	n = len < 0 ? 0 : (size_t)len;
	for (i = 0; i < sizeof tx_flag_names / sizeof *tx_flag_names; i++) {
		if (!(x->x_flags & (1 << i)) || n >= size)
			continue;
		len = snprintf(buf + n, size - n, "%s%s", first ? "" : "|",
		    tx_flag_names[i]);
		n += len < 0 ? 0 : (size_t)len;
		first = 0;
	}
	if (first && n < size)
		snprintf(buf + n, size - n, "-");
	return (buf);
}

/* Name of a link state, for logs. */
static const char *
tunnel_link_state_name(enum tlink_state s)
{
	switch (s) {
	case TLINK_S_HELLO:
		return ("hello");
	case TLINK_S_V2:
		return ("v2");
	case TLINK_S_GONE:
		return ("gone");
	}
	return ("?");
}

/* The link requests flow on: the newest, once it negotiated V2. */
struct tunnel_link *
tunnel_active(const struct tunnel *t)
{
	if (t->t_link == NULL || t->t_link->l_state != TLINK_S_V2)
		return (NULL);
	return (t->t_link);
}

/*
 * Snapshot the exchanges, so a walk survives exchanges ending (their free
 * waits for the loop); the caller frees the array.
 */
struct tunnel_xchg **
tunnel_xchg_snapshot(const struct tunnel *t, size_t *n)
{
	struct tunnel_xchg *x, **v;
	size_t i = 0;

	*n = 0;
	TAILQ_FOREACH (x, &t->t_xchgs, x_entry)
		(*n)++;
	v = xcalloc(*n + 1, sizeof *v);
	TAILQ_FOREACH (x, &t->t_xchgs, x_entry)
		v[i++] = x;
	return (v);
}

/* Has x been sent to a client (it belongs to the session)? */
int
tunnel_xchg_sent(const struct tunnel_xchg *x)
{
	return (x->x_state == TX_S_SENT || x->x_state == TX_S_STREAM ||
	    x->x_state == TX_S_WS_WAIT || x->x_state == TX_S_WS_OPEN);
}

/*
 * Queue one control message on link l.  Returns 0, or -1 if it cannot be
 * encoded or queued; a link whose queue refuses is closed, and its loss is
 * handled when the close completes.
 */
static int
tunnel_link_send(struct tunnel_link *l, const struct tunproto_msg *m)
{
	char *s;
	size_t len;

	if (l->l_state == TLINK_S_GONE)
		return (-1);
	if ((s = tunproto_msg_encode(m, &len)) == NULL) {
		log_warn("tunnel %s:%d: cannot encode a %s frame",
		    l->l_tunnel->t_name, l->l_tunnel->t_port,
		    tunproto_type_name(m->m_type));
		return (-1);
	}
	if (wsconn_send(l->l_ws, 0, (const uint8_t *)s, len) != 0) {
		free(s);
		log_warn("tunnel %s:%d: client %s: cannot queue a frame; "
			 "closing the link",
		    l->l_tunnel->t_name, l->l_tunnel->t_port, l->l_peer);
		wsconn_close(l->l_ws, WS_CLOSE_INTERNAL_ERROR, "queue full");
		return (-1);
	}
	l->l_bytes_out += len;
	free(s);
	return (0);
}

/* Send an encoded control frame on the active link; -1 without one. */
int
tunnel_send_frame(struct tunnel *t, const char *s, size_t len)
{
	struct tunnel_link *l;

	if ((l = tunnel_active(t)) == NULL)
		return (-1);
	if (wsconn_send(l->l_ws, 0, (const uint8_t *)s, len) != 0) {
		log_warn("tunnel %s:%d: client %s: cannot queue a frame; "
			 "closing the link",
		    t->t_name, t->t_port, l->l_peer);
		wsconn_close(l->l_ws, WS_CLOSE_INTERNAL_ERROR, "queue full");
		return (-1);
	}
	l->l_bytes_out += len;
	return (0);
}

/* Send a control message on the active link; -1 without one. */
int
tunnel_send_msg(struct tunnel *t, const struct tunproto_msg *m)
{
	struct tunnel_link *l;

	if ((l = tunnel_active(t)) == NULL)
		return (-1);
	return (tunnel_link_send(l, m));
}

/* May data envelopes go out now?  If not, on_writable will pump. */
int
tunnel_data_ok(const struct tunnel *t)
{
	struct tunnel_link *l;

	if ((l = tunnel_active(t)) == NULL)
		return (0);
	if (wsconn_queued(l->l_ws) < TUNNEL_DATA_HIWAT)
		return (1);
	l->l_flags |= TLINK_F_BLOCKED;
	return (0);
}

/* Fill env for a data envelope of len payload bytes. */
static void
tunnel_data_env(struct tunproto_env *env, uint8_t kind, const char *id,
    int flags, uint64_t offset, size_t len)
{
	memset(env, 0, sizeof *env);
	env->e_kind = kind;
	env->e_flags = (uint8_t)flags;
	snprintf(env->e_id, sizeof env->e_id, "%s", id);
	env->e_offset = offset;
	env->e_len = len;
}

/* A data envelope could not be encoded (err is freed). */
static int
tunnel_data_bad(struct tunnel *t, const char *id, char *err)
{
	log_warn("tunnel %s:%d: cannot encode data for %s: %s", t->t_name,
	    t->t_port, id, err);
	free(err);
	return (-1);
}

/* The link's queue refused a data envelope: the link is closed. */
static int
tunnel_data_refused(struct tunnel *t, struct tunnel_link *l)
{
	log_warn("tunnel %s:%d: client %s: cannot queue data; closing the link",
	    t->t_name, t->t_port, l->l_peer);
	wsconn_close(l->l_ws, WS_CLOSE_INTERNAL_ERROR, "queue full");
	return (-1);
}

/*
 * Send one data envelope (§3.2) on the active link: kind, id, flags
 * (TUNPROTO_ENV_F_*), offset with TUNPROTO_ENV_F_OFFSET, and len payload
 * bytes.  Returns 0 or -1.
 */
int
tunnel_send_data(struct tunnel *t, uint8_t kind, const char *id, int flags,
    uint64_t offset, const uint8_t *p, size_t len)
{
	struct tunnel_link *l;
	struct tunproto_env env;
	uint8_t *buf;
	size_t n;
	char *err = NULL;
	int rv;

	if ((l = tunnel_active(t)) == NULL)
		return (-1);
	tunnel_data_env(&env, kind, id, flags, offset, len);
	env.e_payload = p;
	buf = tunproto_env_encode_alloc(
	    &env, l->l_neg.l_max_stream_chunk, &n, &err);
	if (buf == NULL)
		return (tunnel_data_bad(t, id, err));
	rv = wsconn_send(l->l_ws, 1, buf, n);
	free(buf);
	if (rv != 0)
		return (tunnel_data_refused(t, l));
	l->l_bytes_out += n;
	return (0);
}

/*
 * Send one data envelope as tunnel_send_data, its payload the len bytes at
 * position pos of src (not drained), copied once, straight into the
 * WebSocket's output.  Returns 0 or -1.
 */
int
tunnel_send_data_ev(struct tunnel *t, uint8_t kind, const char *id, int flags,
    uint64_t offset, struct evbuffer *src, size_t pos, size_t len)
{
	struct tunnel_link *l;
	struct tunproto_env env;
	uint8_t hdr[TUNPROTO_ENV_PREFIX_MAX];
	size_t hlen;
	char *err = NULL;

	if ((l = tunnel_active(t)) == NULL)
		return (-1);
	tunnel_data_env(&env, kind, id, flags, offset, len);
	if (tunproto_env_encode_header(
		&env, l->l_neg.l_max_stream_chunk, hdr, &hlen, &err) != 0)
		return (tunnel_data_bad(t, id, err));
	if (wsconn_send_ev(l->l_ws, 1, hdr, hlen, src, pos, len) != 0)
		return (tunnel_data_refused(t, l));
	l->l_bytes_out += hlen + len;
	return (0);
}

/*
 * Send window{id, credits[, ack_offset][, complete]} (§4.8) on the active
 * link, if there is one.
 */
void
tunnel_send_window(struct tunnel *t, const char *id, uint64_t credits, int ack,
    uint64_t ack_offset, int complete)
{
	struct tunproto_msg m;

	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_WINDOW;
	m.m_id = (char *)id;
	m.m_credits = credits;
	if (ack) {
		m.m_flags |= TUNPROTO_MSG_F_ACK_OFFSET;
		m.m_ack_offset = ack_offset;
	}
	if (complete)
		m.m_flags |= TUNPROTO_MSG_F_COMPLETE;
	tunnel_send_msg(t, &m);
}

/* Send error{id, message} (§4.9) on the active link, if there is one. */
void
tunnel_send_error(struct tunnel *t, const char *id, const char *msg)
{
	struct tunproto_msg m;

	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_ERROR;
	m.m_id = (char *)id;
	m.m_message = (char *)msg;
	tunnel_send_msg(t, &m);
}

/*
 * The client broke the protocol on the active link: close it with 1002
 * (Python V2 sandbox) and treat it as lost.  The caller returns at once;
 * exchanges may have ended.
 */
void
tunnel_protocol_error(struct tunnel *t, const char *why)
{
	struct tunnel_link *l = t->t_link;

	t->t_errors++;
	GW_ADD(t->t_gw->g_metrics.m_tunnel_errors, 1);
	if (l == NULL)
		return;
	log_warn("tunnel %s:%d: client %s broke the protocol: %s", t->t_name,
	    t->t_port, l->l_peer, why);
	tunnel_link_drop(l, WS_CLOSE_PROTOCOL_ERROR, "invalid tunnel frame");
}

/* Free a link's memory; from the loop, after its WebSocket closed. */
static void
tunnel_link_free_cb(evutil_socket_t fd, short events, void *arg)
{
	struct tunnel_link *l = arg;

	(void)fd;
	(void)events;
	wsconn_free(l->l_ws);
	free(l);
}

/* Free a tunnel's memory; from the loop once nothing refers to it. */
static void
tunnel_free_cb(evutil_socket_t fd, short events, void *arg)
{
	struct tunnel *t = arg;

	(void)fd;
	(void)events;
	tombs_clear(&t->t_tombs);
	tombs_clear(&t->t_replaced);
	idmap_free(&t->t_xchg_ids);
	event_free(t->t_kick);
	free(t->t_name);
	free(t->t_netns);
	free(t->t_bind_error);
	free(t);
}

/* A removed tunnel goes once its links and Port B connections have. */
static void
tunnel_maybe_free(struct tunnel *t)
{
	struct tunnel_set *ts = t->t_gw->g_tunnels;
	struct timeval tv = { 0, 0 };

	if (t->t_state != TUNNEL_S_DEAD || (t->t_flags & TUNNEL_F_FREEING) ||
	    !TAILQ_EMPTY(&t->t_links) || !TAILQ_EMPTY(&t->t_dconns) ||
	    !TAILQ_EMPTY(&t->t_xchgs))
		return;
	t->t_flags |= TUNNEL_F_FREEING;
	TAILQ_REMOVE(&ts->ts_dead, t, t_entry);
	event_base_once(
	    t->t_gw->g_base, -1, EV_TIMEOUT, tunnel_free_cb, t, &tv);
}

/* Tell the tunnel code that an exchange or connection left a tunnel. */
void
tunnel_released(struct tunnel *t)
{
	tunnel_maybe_free(t);
}

/*
 * The link is no longer the tunnel's: detach it, and pause the session's
 * exchanges when it was resumable or fail them when not (§8.3).  Channels
 * never survive (§8.7).
 */
static void
tunnel_link_lost(struct tunnel_link *l, const char *reason)
{
	struct tunnel *t = l->l_tunnel;
	struct tunnel_xchg **v;
	size_t i, n;
	int was_v2 = l->l_state == TLINK_S_V2;

	if (l->l_state == TLINK_S_GONE)
		return;
	l->l_state = TLINK_S_GONE;
	if (t->t_link == l)
		t->t_link = NULL;
	if (was_v2)
		GW_ADD(t->t_gw->g_metrics.m_tunnel_sessions, -1);
	log_info("tunnel %s:%d: client %s (generation %llu) gone: %s",
	    t->t_name, t->t_port, l->l_peer, (unsigned long long)l->l_gen,
	    reason);
	if (!was_v2)
		return;
	v = tunnel_xchg_snapshot(t, &n);
	for (i = 0; i < n; i++) {
		if (v[i]->x_state == TX_S_DONE || !tunnel_xchg_sent(v[i]))
			continue;
		if (v[i]->x_flags & TX_F_WS)
			tunnel_ws_lost(v[i], "tunnel client disconnected");
		else if (l->l_flags & TLINK_F_RESUMABLE)
			tunnel_xchg_pause(v[i]);
		else
			tunnel_xchg_fail(v[i], gw_err_tunnel_error, NULL,
			    "The tunnel client disconnected before the "
			    "response was complete (%s).",
			    reason);
	}
	free(v);
}

/* Take a link away from its tunnel and close its WebSocket with code. */
void
tunnel_link_drop(struct tunnel_link *l, uint16_t code, const char *reason)
{
	tunnel_link_lost(l, reason);
	if ((l->l_flags & TLINK_F_CLOSED) ||
	    wsconn_close(l->l_ws, code, reason) == 0)
		return;
	/* -1: already closing, and on_close will come. */
}

/* The link's WebSocket is over; free it from the loop. */
static void
tunnel_link_close_cb(void *arg, uint16_t code, const char *reason)
{
	struct tunnel_link *l = arg;
	struct tunnel *t = l->l_tunnel;
	struct timeval tv = { 0, 0 };
	char why[192];

	l->l_flags |= TLINK_F_CLOSED;
	if (l->l_state != TLINK_S_GONE) {
		snprintf(why, sizeof why, "WebSocket closed with %u%s%s", code,
		    *reason != '\0' ? ": " : "", reason);
		tunnel_link_lost(l, why);
	}
	TAILQ_REMOVE(&t->t_links, l, l_entry);
	event_base_once(
	    t->t_gw->g_base, -1, EV_TIMEOUT, tunnel_link_free_cb, l, &tv);
	tunnel_maybe_free(t);
}

/* The link's queue drained: let streamed uploads go on. */
static void
tunnel_link_writable_cb(void *arg)
{
	struct tunnel_link *l = arg;
	struct tunnel *t = l->l_tunnel;
	struct tunnel_xchg **v;
	size_t i, n;

	if (l->l_state != TLINK_S_V2 || t->t_link != l)
		return;
	l->l_flags &= ~TLINK_F_BLOCKED;
	v = tunnel_xchg_snapshot(t, &n);
	for (i = 0; i < n && !(l->l_flags & TLINK_F_BLOCKED); i++) {
		if (v[i]->x_state != TX_S_DONE &&
		    (v[i]->x_flags & TX_F_STREAM_REQ))
			tunnel_xchg_pump(v[i]);
	}
	free(v);
}

/*
 * Answer a ping (§7, §4.11).  The sandbox role never pings: the client
 * does, and a client that stops is found by its silence (tunnel_link_tick).
 */
static void
tunnel_link_heartbeat(struct tunnel_link *l, const struct tunproto_msg *m)
{
	struct tunproto_msg r;

	if (m->m_type != TUNPROTO_T_PING)
		return;
	l->l_client_pings++;
	r = *m;
	r.m_type = TUNPROTO_T_PONG;
	tunnel_link_send(l, &r);
}

/* A control message from the client. */
static void
tunnel_link_text(struct tunnel_link *l, const uint8_t *data, size_t len)
{
	struct tunnel *t = l->l_tunnel;
	struct tunnel_xchg *x;
	struct tunproto_msg m;
	char *err = NULL;
	int rv;

	rv = tunproto_msg_decode((const char *)data, len, &m, &err);
	if (rv == TUNPROTO_DEC_MALFORMED || rv == TUNPROTO_DEC_UNKNOWN) {
		/* Dropped and logged, as the issue chose (§14.17). */
		log_warn("tunnel %s:%d: client %s: control frame dropped: %s",
		    t->t_name, t->t_port, l->l_peer, err);
		free(err);
		return;
	}
	switch (m.m_type) {
	case TUNPROTO_T_HELLO:
		tunnel_link_hello(l, &m);
		break;
	case TUNPROTO_T_PING:
	case TUNPROTO_T_PONG:
		tunnel_link_heartbeat(l, &m);
		break;
	case TUNPROTO_T_HTTP_REQ:
	case TUNPROTO_T_HTTP_REQ_BEGIN:
	case TUNPROTO_T_HTTP_REQ_END:
	case TUNPROTO_T_WS_CONNECT:
		log_warn(
		    "tunnel %s:%d: client %s sent %s, which only a sandbox "
		    "sends; dropped",
		    t->t_name, t->t_port, l->l_peer,
		    tunproto_type_name(m.m_type));
		break;
	default:
		if (l->l_state != TLINK_S_V2 || t->t_link != l) {
			log_debug("tunnel %s:%d: %s before the hello dropped",
			    t->t_name, t->t_port, tunproto_type_name(m.m_type));
			break;
		}
		if ((x = tunnel_xchg_find(t, m.m_id)) == NULL) {
			log_debug("tunnel %s:%d: %s for %s %s dropped",
			    t->t_name, t->t_port, tunproto_type_name(m.m_type),
			    tombs_has(&t->t_tombs, m.m_id, clock_mono_msec())
				? "finished"
				: "unknown",
			    m.m_id);
			break;
		}
		if (rv == TUNPROTO_DEC_BAD_BASE64) {
			log_warn("tunnel %s:%d: %s", t->t_name, t->t_port, err);
			if (x->x_flags & TX_F_WS)
				tunnel_ws_lost(
				    x, "invalid base64 in ws_message");
			else if (m.m_type == TUNPROTO_T_HTTP_RESP)
				tunnel_xchg_fail(x, gw_err_tunnel_error, NULL,
				    "Invalid tunnel response body.");
			break;
		}
		if (x->x_flags & TX_F_WS)
			tunnel_ws_msg(x, &m);
		else
			tunnel_xchg_msg(x, &m);
		break;
	}
	free(err);
	tunproto_msg_free(&m);
}

/*
 * A data envelope from the client (§3.2), the whole of msg.  A response
 * chunk's payload moves from msg to the caller without a copy.
 */
static void
tunnel_link_binary(struct tunnel_link *l, struct evbuffer *msg)
{
	struct tunnel *t = l->l_tunnel;
	struct tunnel_xchg *x;
	struct tunproto_env env;
	const uint8_t *data;
	size_t len = evbuffer_get_length(msg), hlen;
	char *err = NULL, why[160];

	if (l->l_state != TLINK_S_V2 || t->t_link != l) {
		log_warn("tunnel %s:%d: client %s: binary frame before the "
			 "hello dropped",
		    t->t_name, t->t_port, l->l_peer);
		return;
	}
	/* The header only: the payload stays where it is. */
	hlen = len < TUNPROTO_ENV_PREFIX_MAX ? len : TUNPROTO_ENV_PREFIX_MAX;
	if ((data = evbuffer_pullup(msg, (ev_ssize_t)hlen)) == NULL)
		data = (const uint8_t *)"";
	if (tunproto_env_decode_prefix(data, len, l->l_neg.l_max_stream_chunk,
		&env, &hlen, &err) != 0) {
		tunnel_protocol_error(t, err);
		free(err);
		return;
	}
	if (env.e_kind == TUNPROTO_ENV_HTTP_REQUEST_DATA) {
		tunnel_protocol_error(t,
		    "TunnelClient sent request-body data in the wrong "
		    "direction");
		return;
	}
	x = tunnel_xchg_find(t, env.e_id);
	if (x != NULL &&
	    ((env.e_kind == TUNPROTO_ENV_WS_BINARY_DATA) ==
		((x->x_flags & TX_F_WS) != 0))) {
		evbuffer_drain(msg, hlen);
		if (x->x_flags & TX_F_WS) {
			if ((data = evbuffer_pullup(msg, -1)) == NULL)
				data = (const uint8_t *)"";
			env.e_payload = data;
			tunnel_ws_data(x, &env);
		} else
			tunnel_xchg_data(x, &env, msg);
		return;
	}
	if (tombs_has(&t->t_tombs, env.e_id, clock_mono_msec()))
		return;
	snprintf(why, sizeof why, "%s data for unknown stream %s",
	    env.e_kind == TUNPROTO_ENV_WS_BINARY_DATA ? "WebSocket"
						      : "response",
	    env.e_id);
	tunnel_protocol_error(t, why);
}

/* One whole WebSocket message on a link. */
static void
tunnel_link_message_cb(void *arg, int is_binary, struct evbuffer *msg)
{
	struct tunnel_link *l = arg;
	const uint8_t *data;
	size_t len = evbuffer_get_length(msg);

	if (l->l_state == TLINK_S_GONE)
		return;
	l->l_last_rx = clock_mono_msec();
	l->l_bytes_in += len;
	if (is_binary)
		tunnel_link_binary(l, msg);
	else {
		if ((data = evbuffer_pullup(msg, -1)) == NULL)
			data = (const uint8_t *)"";
		tunnel_link_text(l, data, len);
	}
}

/*
 * A client WebSocket for tunnel t on stream s, after the 101 was written
 * into its output; our hello goes out at once (§4.2).  The newest link wins
 * (§8.2): one that has not said hello yet is closed with 1012 "replaced"
 * now, a negotiated one once this link's hello shows it is not a replaced
 * session coming back (tunnel_link_hello).
 */
void
tunnel_link_accept(
    struct tunnel *t, struct stream *s, const char *peer, const char *session)
{
	static const struct wsconn_cbs cbs = {
		.on_message_buf = tunnel_link_message_cb,
		.on_close = tunnel_link_close_cb,
		.on_writable = tunnel_link_writable_cb,
	};
	struct tunnel_link *l, *o, *next;
	struct tunproto_msg hello;
	char *err = NULL;

	l = xcalloc(1, sizeof *l);
	l->l_tunnel = t;
	snprintf(l->l_peer, sizeof l->l_peer, "%s", peer);
	l->l_since = (int64_t)time(NULL);
	l->l_last_rx = clock_mono_msec();
	l->l_hello_by = l->l_last_rx + TUNNEL_HELLO_MS;
	if (stream_ssl(s) != NULL)
		l->l_flags |= TLINK_F_TLS;
	l->l_ws = wsconn_new(
	    t->t_gw->g_base, s, 0, &cbs, l, TUNNEL_MAX_MESSAGE);
	if (l->l_ws == NULL) {
		log_error("tunnel %s:%d: cannot start a WebSocket for %s",
		    t->t_name, t->t_port, peer);
		stream_free(s);
		free(l);
		return;
	}
	l->l_gen = ++t->t_generation;
	GW_ADD(t->t_gw->g_metrics.m_tunnel_links, 1);
	TAILQ_INSERT_TAIL(&t->t_links, l, l_entry);
	log_info("tunnel %s:%d: client %s attached (generation %llu)",
	    t->t_name, t->t_port, peer, (unsigned long long)l->l_gen);
	for (o = TAILQ_FIRST(&t->t_links); o != NULL; o = next) {
		next = TAILQ_NEXT(o, l_entry);
		if (o != l && o->l_state == TLINK_S_HELLO)
			tunnel_link_drop(
			    o, TUNPROTO_CLOSE_REPLACED, "replaced");
	}
	if (t->t_link == NULL)
		t->t_link = l;
	l->l_state = TLINK_S_HELLO;
	if (tunproto_hello(&t->t_local, NULL, &hello, &err) != 0) {
		log_error("tunnel %s:%d: cannot build our hello: %s", t->t_name,
		    t->t_port, err);
		free(err);
		return;
	}
	/* Tell a client that named its session whether it resumes. */
	if (session != NULL && tunproto_uuid_valid(session)) {
		hello.m_flags |= TUNPROTO_MSG_F_SESSION_TOLD;
		if ((t->t_flags & TUNNEL_F_RESUMABLE) &&
		    strcmp(t->t_session, session) == 0)
			hello.m_flags |= TUNPROTO_MSG_F_SESSION_RESUMED;
	}
	tunnel_link_send(l, &hello);
	tunproto_msg_free(&hello);
}

/* Find the tunnel of (name, port), or NULL. */
static struct tunnel *
tunnel_find(const struct gw *g, const char *name, int port)
{
	struct tunnel *t;

	if (g->g_tunnels == NULL)
		return (NULL);
	TAILQ_FOREACH (t, &g->g_tunnels->ts_list, t_entry) {
		if (t->t_port == port && strcmp(t->t_name, name) == 0)
			return (t);
	}
	return (NULL);
}

/*
 * The tunnel route, terminate mode: check the upgrade (400, or 426 for a
 * version other than 13), answer 101, take the connection and attach it.
 */
void
tunnel_attach(struct conn *c, struct gw_sandbox *sb, int listen_port)
{
	const struct hfield *h;
	struct tunnel *t;
	const char *key;
	char *why, accept[WS_ACCEPT_LEN + 1], peer[64];

	if ((t = tunnel_find(c->c_gw, sb->sb_id, listen_port)) == NULL) {
		xchg_fail(c->c_x, gw_err_tunnel_not_configured,
		    "Sandbox '%s' has no terminate-mode tunnel on port %d.",
		    sb->sb_id, listen_port);
		return;
	}
	if (ws_check_upgrade_request(c->c_x->x_req, &key, &why) != 0) {
		h = http1_msg_find(c->c_x->x_req, "sec-websocket-version");
		h1s_no_keep(c->c_h1);
		xchg_fail(c->c_x,
		    h != NULL && strcmp(h->value, "13") != 0
			? tunnel_err_version
			: tunnel_err_upgrade,
		    "The tunnel of sandbox '%s' is a WebSocket: %s.", sb->sb_id,
		    why);
		free(why);
		return;
	}
	if (ws_accept_key(key, accept) != 0) {
		xchg_fail(c->c_x, tunnel_err_upgrade,
		    "Cannot compute Sec-WebSocket-Accept.");
		return;
	}
	ws_write_accept_response(
	    stream_output(c->c_stream), accept, NULL);
	snprintf(peer, sizeof peer, "%s", c->c_peer);
	h = http1_msg_find(c->c_x->x_req, TUNPROTO_SESSION_HEADER);
	tunnel_link_accept(t, conn_steal_stream(c), peer,
	    h != NULL ? h->value : NULL);
}

/* A Port B connection was accepted. */
static void
tunnel_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	(void)lev;
	(void)salen;
	tunnel_dconn_accept(arg, fd, sa);
}

/* accept(2) on Port B failed: pause for a second when out of descriptors. */
static void
tunnel_accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct tunnel *t = arg;

	/* The tick (tunnel_tick_cb) accepts again. */
	if (listener_backoff(lev, NULL, "tunnel %s:%d", t->t_name, t->t_port)) {
		t->t_flags |= TUNNEL_F_PAUSED;
		t->t_retry_at = clock_mono_msec() + LISTENER_PAUSE_MS;
	}
}

/* Close Port B. */
static void
tunnel_unbind(struct tunnel *t)
{
	if (t->t_lev != NULL)
		evconnlistener_free(t->t_lev);
	t->t_lev = NULL;
	t->t_flags &= ~TUNNEL_F_PAUSED;
	t->t_state = TUNNEL_S_UNBOUND;
}

/*
 * Open Port B: inside the sandbox's namespace at 127.0.0.1:port, or at
 * its address.  On failure the tunnel stays UNBOUND and is retried.
 */
static void
tunnel_bind(struct tunnel *t)
{
	char *cause = NULL;
	int fd, one = 1, family = t->t_addr.ss_family;

	/* A draining gateway opens nothing: the next process will. */
	if (gw_draining(t->t_gw) && !(t->t_flags & TUNNEL_F_STANDALONE)) {
		t->t_state = TUNNEL_S_UNBOUND;
		t->t_retry_at = UINT64_MAX;
		return;
	}

	/* One an old process passed on (SIGUSR2): connections queued on it
	 * are ours now, and wait for the client. */
	fd = upgrade_take_tunnel(t->t_name, t->t_port,
	    t->t_netns != NULL ? t->t_netns : t->t_addr_str);
	if (fd != -1 &&
	    (t->t_lev = listener_wrap(
		 t->t_gw->g_base, tunnel_accept_cb, t, fd)) != NULL)
		goto bound;
	if (t->t_netns != NULL)
		fd = netns_socket(t->t_netns, family,
		    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, &cause);
	else if ((fd = socket(family,
		      SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) == -1)
		xasprintf(
		    &cause, "cannot create a socket: %s", strerror(errno));
	if (fd != -1) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, (struct sockaddr *)&t->t_addr, t->t_addrlen) ==
			-1 ||
		    listen(fd, 511) == -1) {
			xasprintf(&cause, "cannot listen on %s: %s",
			    t->t_addr_str, strerror(errno));
			close(fd);
			fd = -1;
		}
	}
	if (fd != -1 && (t->t_lev = listener_wrap(t->t_gw->g_base,
			     tunnel_accept_cb, t, fd)) == NULL)
		xasprintf(&cause, "cannot listen on %s", t->t_addr_str);
	if (t->t_lev == NULL) {
		if (t->t_bind_failures++ % 30 == 0)
			log_warn("tunnel %s:%d: %s; retrying every %dms",
			    t->t_name, t->t_port, cause, TUNNEL_RETRY_MS);
		free(t->t_bind_error);
		t->t_bind_error = cause;
		t->t_state = TUNNEL_S_UNBOUND;
		t->t_retry_at = clock_mono_msec() + TUNNEL_RETRY_MS;
		return;
	}
bound:
	evconnlistener_set_error_cb(t->t_lev, tunnel_accept_error_cb);
	free(t->t_bind_error);
	t->t_bind_error = NULL;
	t->t_bind_failures = 0;
	t->t_state = TUNNEL_S_LISTENING;
	log_info("tunnel %s:%d: listening on %s%s%s", t->t_name, t->t_port,
	    t->t_addr_str, t->t_netns != NULL ? " in " : "",
	    t->t_netns != NULL ? t->t_netns : "");
}

/* Housekeeping for one link: the client's silence, a missing hello. */
static void
tunnel_link_tick(struct tunnel_link *l, uint64_t now)
{
	struct tunnel *t = l->l_tunnel;
	char why[96];

	if (l->l_state == TLINK_S_GONE)
		return;
	if (now - l->l_last_rx >= t->t_silence) {
		snprintf(why, sizeof why,
		    "no frame from the client for %llums (silence_timeout)",
		    (unsigned long long)t->t_silence);
		tunnel_link_drop(l, WS_CLOSE_GOING_AWAY, why);
		return;
	}
	if (l->l_state == TLINK_S_HELLO && l->l_hello_by != 0 &&
	    now >= l->l_hello_by) {
		l->l_hello_by = 0;
		log_warn("tunnel %s:%d: client %s sent no V2 hello within "
			 "%dms; requests wait for one",
		    t->t_name, t->t_port, l->l_peer, TUNNEL_HELLO_MS);
	}
}

/* Every second: retry listeners, resume accepting, watch links. */
static void
tunnel_tick_cb(evutil_socket_t fd, short events, void *arg)
{
	struct tunnel_set *ts = arg;
	struct tunnel *t;
	struct tunnel_link *l, *next;
	uint64_t now = clock_mono_msec();

	(void)fd;
	(void)events;
	TAILQ_FOREACH (t, &ts->ts_list, t_entry) {
		if (t->t_state == TUNNEL_S_UNBOUND && now >= t->t_retry_at)
			tunnel_bind(t);
		if ((t->t_flags & TUNNEL_F_PAUSED) && now >= t->t_retry_at) {
			t->t_flags &= ~TUNNEL_F_PAUSED;
			evconnlistener_enable(t->t_lev);
		}
		/* Expired ids go even when no frame looks them up. */
		tombs_expire(&t->t_tombs, now);
		tombs_expire(&t->t_replaced, now);
		/* A dropped link stays listed until its close completes. */
		for (l = TAILQ_FIRST(&t->t_links); l != NULL; l = next) {
			next = TAILQ_NEXT(l, l_entry);
			tunnel_link_tick(l, now);
		}
	}
}

/* The process's tunnel set, made on first use. */
static struct tunnel_set *
tunnel_set_get(struct gw *g)
{
	struct tunnel_set *ts;
	struct timeval tv;

	if (g->g_tunnels != NULL)
		return (g->g_tunnels);
	ts = xcalloc(1, sizeof *ts);
	ts->ts_gw = g;
	TAILQ_INIT(&ts->ts_list);
	TAILQ_INIT(&ts->ts_dead);
	ts->ts_tick = event_new(g->g_base, -1, EV_PERSIST, tunnel_tick_cb, ts);
	clock_msec_to_tv(TUNNEL_TICK_MS, &tv);
	event_add(ts->ts_tick, &tv);
	g->g_tunnels = ts;
	return (ts);
}

/* A new tunnel, not yet bound, with the YR_TUNNEL_* limits (§11). */
static struct tunnel *
tunnel_new(struct gw *g, const char *name, int port)
{
	struct tunnel_set *ts = tunnel_set_get(g);
	struct tunnel *t;
	char *err = NULL;

	t = xcalloc(1, sizeof *t);
	t->t_gw = g;
	t->t_name = xstrdup(name);
	t->t_port = port;
	t->t_state = TUNNEL_S_UNBOUND;
	TAILQ_INIT(&t->t_links);
	TAILQ_INIT(&t->t_xchgs);
	TAILQ_INIT(&t->t_dconns);
	idmap_init(&t->t_xchg_ids, 0);
	tombs_init(&t->t_tombs, TUNNEL_TOMBS, TUNNEL_TOMB_MS);
	tombs_init(&t->t_replaced, TUNNEL_REPLACED, TUNNEL_REPLACED_MS);
	t->t_kick = evtimer_new(g->g_base, tunnel_queue_cb, t);
	if (tunproto_limits_from_env(&t->t_local, NULL, NULL, &err) != 0) {
		log_warn("tunnel %s:%d: %s", name, port, err);
		free(err);
	}
	t->t_client_wait = 10 * 1000;
	t->t_http_timeout = (uint64_t)(t->t_local.l_http_timeout * 1000);
	t->t_silence = TUNNEL_SILENCE_MS;
	t->t_max_queued = TUNNEL_MAX_QUEUED;
	TAILQ_INSERT_TAIL(&ts->ts_list, t, t_entry);
	return (t);
}

/*
 * Set where Port B binds from the sandbox's placement.  Returns 1 when it
 * changed (the listener must move), 0 when not.
 */
static int
tunnel_placement(struct tunnel *t, const struct gw_sandbox *sb)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char *netns = sb->sb_netns;

	if (netns != NULL)
		addr_parse_ip("127.0.0.1", t->t_port, &ss, &len);
	else {
		ss = sb->sb_addr;
		len = sb->sb_addrlen;
		addr_set_port(&ss, t->t_port);
	}
	if (len == t->t_addrlen && memcmp(&ss, &t->t_addr, len) == 0 &&
	    ((netns == NULL && t->t_netns == NULL) ||
		(netns != NULL && t->t_netns != NULL &&
		    strcmp(netns, t->t_netns) == 0)))
		return (0);
	t->t_addr = ss;
	t->t_addrlen = len;
	free(t->t_netns);
	t->t_netns = netns != NULL ? xstrdup(netns) : NULL;
	addr_format(
	    (struct sockaddr *)&t->t_addr, t->t_addr_str, sizeof t->t_addr_str);
	return (1);
}

/*
 * Remove a tunnel: close Port B, answer its waiting and pending requests
 * 503, close its link and connections; it is freed once they are gone.
 */
static void
tunnel_remove(struct tunnel *t, const char *reason)
{
	struct tunnel_set *ts = t->t_gw->g_tunnels;
	struct tunnel_xchg **v;
	struct tunnel_link *l;
	size_t i, n;

	log_info("tunnel %s:%d: removed: %s", t->t_name, t->t_port, reason);
	tunnel_unbind(t);
	t->t_state = TUNNEL_S_DEAD;
	TAILQ_REMOVE(&ts->ts_list, t, t_entry);
	TAILQ_INSERT_TAIL(&ts->ts_dead, t, t_entry);
	/* The client's link, and a newer one still waiting for its hello. */
	TAILQ_FOREACH (l, &t->t_links, l_entry) {
		if (l->l_state != TLINK_S_GONE)
			tunnel_link_drop(
			    l, WS_CLOSE_GOING_AWAY, "tunnel removed");
	}
	v = tunnel_xchg_snapshot(t, &n);
	for (i = 0; i < n; i++) {
		if (v[i]->x_state == TX_S_DONE)
			continue;
		if (v[i]->x_flags & TX_F_WS)
			tunnel_ws_lost(v[i], "tunnel removed");
		else
			tunnel_xchg_fail(v[i], gw_err_tunnel_gone, NULL,
			    "The tunnel of sandbox '%s' was removed.",
			    t->t_name);
	}
	free(v);
	/* Idle keep-alive connections go now; answers drain first. */
	tunnel_dconns_retire(t, "tunnel removed");
	tunnel_maybe_free(t);
}

/*
 * Make the tunnels match the directory: one per terminate-mode listen
 * port, kept across directory versions (exchanges and links survive an
 * unrelated change), moved when the placement changes, removed when gone.
 */
void
tunnel_sync(struct gw *g)
{
	struct tunnel_set *ts = tunnel_set_get(g);
	const struct gw_directory *dir = g->g_dir;
	const struct gw_sandbox *sb;
	struct tunnel *t, *next;
	size_t i, j;

	TAILQ_FOREACH (t, &ts->ts_list, t_entry)
		t->t_flags &= ~TUNNEL_F_SEEN;
	for (i = 0; dir != NULL && i < dir->d_count; i++) {
		sb = dir->d_sandboxes[i];
		if (sb->sb_tunnel_mode != GW_TUNNEL_TERMINATE)
			continue;
		for (j = 0; j < sb->sb_ntunnel_ports; j++) {
			t = tunnel_find(g, sb->sb_id, sb->sb_tunnel_ports[j]);
			if (t == NULL)
				t = tunnel_new(
				    g, sb->sb_id, sb->sb_tunnel_ports[j]);
			t->t_flags |= TUNNEL_F_SEEN;
			t->t_client_wait = sb->sb_tunnel_client_wait;
			t->t_http_timeout = sb->sb_tunnel_http_timeout;
			t->t_silence = sb->sb_tunnel_silence;
			t->t_max_queued = (size_t)sb->sb_tunnel_max_queued;
			if (tunnel_placement(t, sb) && t->t_lev != NULL) {
				log_info("tunnel %s:%d: placement changed",
				    t->t_name, t->t_port);
				tunnel_unbind(t);
			}
			if (t->t_lev == NULL) {
				t->t_bind_failures = 0;
				tunnel_bind(t);
			}
		}
	}
	for (t = TAILQ_FIRST(&ts->ts_list); t != NULL; t = next) {
		next = TAILQ_NEXT(t, t_entry);
		if (!(t->t_flags & TUNNEL_F_SEEN))
			tunnel_remove(t, "no longer configured");
	}
}

/* How many tunnels the main loop g has (upgrade.c). */
size_t
tunnel_count(struct gw *g)
{
	struct tunnel *t;
	size_t n = 0;

	if (g->g_tunnels == NULL)
		return (0);
	TAILQ_FOREACH (t, &g->g_tunnels->ts_list, t_entry)
		n++;
	return (n);
}

/*
 * The Port B socket of tunnel i of g, with its name, port and place (its
 * namespace, or its address), for an upgrade to pass on: -1 when it does
 * not listen now, -2 past the last tunnel.
 */
int
tunnel_listen_fd(struct gw *g, size_t i, const char **name, int *port,
    const char **place)
{
	struct tunnel *t;

	if (g->g_tunnels == NULL)
		return (-2);
	TAILQ_FOREACH (t, &g->g_tunnels->ts_list, t_entry) {
		if (i-- > 0)
			continue;
		if (t->t_lev == NULL || (t->t_flags & TUNNEL_F_STANDALONE))
			return (-1);
		*name = t->t_name;
		*port = t->t_port;
		*place = t->t_netns != NULL ? t->t_netns : t->t_addr_str;
		return (evconnlistener_get_fd(t->t_lev));
	}
	return (-2);
}

/*
 * The standalone server role (akgateway tunnel-server): one tunnel whose
 * Port B listens on listen.  Returns it, or NULL with *cause.
 */
struct tunnel *
tunnel_standalone(struct gw *g, const char *listen, uint64_t client_wait,
    uint64_t http_timeout, char **cause)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct tunnel *t;

	if (addr_parse_hostport(listen, &ss, &len, cause) != 0)
		return (NULL);
	t = tunnel_new(g, "tunnel-server", addr_port((struct sockaddr *)&ss));
	t->t_flags |= TUNNEL_F_STANDALONE;
	t->t_addr = ss;
	t->t_addrlen = len;
	addr_format(
	    (struct sockaddr *)&ss, t->t_addr_str, sizeof t->t_addr_str);
	t->t_client_wait = client_wait;
	if (http_timeout != 0)
		t->t_http_timeout = http_timeout;
	tunnel_bind(t);
	if (t->t_lev == NULL) {
		*cause = xstrdup(t->t_bind_error);
		return (NULL);
	}
	return (t);
}

/* Free one tunnel and everything it holds, now (shutdown). */
static void
tunnel_destroy(struct tunnel *t)
{
	struct tunnel_xchg *x;
	struct tunnel_dconn *d;
	struct tunnel_link *l;

	tunnel_unbind(t);
	while ((x = TAILQ_FIRST(&t->t_xchgs)) != NULL) {
		TAILQ_REMOVE(&t->t_xchgs, x, x_entry);
		idmap_del(&t->t_xchg_ids, x->x_id);
		x->x_state = TX_S_DONE;
		if (x->x_dconn != NULL)
			x->x_dconn->d_x = NULL;
		tunnel_xchg_free(x);
	}
	while ((d = TAILQ_FIRST(&t->t_dconns)) != NULL)
		tunnel_dconn_close(d, "gateway stopping");
	while ((l = TAILQ_FIRST(&t->t_links)) != NULL) {
		TAILQ_REMOVE(&t->t_links, l, l_entry);
		if (l->l_state == TLINK_S_V2)
			GW_ADD(t->t_gw->g_metrics.m_tunnel_sessions, -1);
		wsconn_free(l->l_ws);
		free(l);
	}
	tunnel_free_cb(-1, 0, t);
}

/* Stop every tunnel (SIGTERM): listeners, links, connections. */
void
tunnel_shutdown(struct gw *g)
{
	struct tunnel_set *ts = g->g_tunnels;
	struct tunnel *t;

	if (ts == NULL)
		return;
	while ((t = TAILQ_FIRST(&ts->ts_list)) != NULL) {
		TAILQ_REMOVE(&ts->ts_list, t, t_entry);
		t->t_state = TUNNEL_S_DEAD;
		tunnel_destroy(t);
	}
	while ((t = TAILQ_FIRST(&ts->ts_dead)) != NULL) {
		TAILQ_REMOVE(&ts->ts_dead, t, t_entry);
		tunnel_destroy(t);
	}
	event_free(ts->ts_tick);
	free(ts);
	g->g_tunnels = NULL;
}

/* Every tunnel of the process, configured or removed, in turn. */
static struct tunnel *
tunnel_next_any(const struct tunnel_set *ts, struct tunnel *t)
{
	struct tunnel *n;

	if (t == NULL)
		return (TAILQ_FIRST(&ts->ts_list) != NULL
			? TAILQ_FIRST(&ts->ts_list)
			: TAILQ_FIRST(&ts->ts_dead));
	if ((n = TAILQ_NEXT(t, t_entry)) != NULL)
		return (n);
	if (t->t_state != TUNNEL_S_DEAD)
		return (TAILQ_FIRST(&ts->ts_dead));
	return (NULL);
}

/*
 * The gateway drains (drain.c): Port B closes and stays closed
 * (tunnel_bind), its connections between requests close now and the
 * others after their answer (h1s_drain).
 */
void
tunnel_drain_start(struct gw *g)
{
	struct tunnel_set *ts = g->g_tunnels;
	struct tunnel_dconn *d, *next;
	struct tunnel *t = NULL;

	if (ts == NULL)
		return;
	while ((t = tunnel_next_any(ts, t)) != NULL) {
		if (t->t_lev != NULL)
			log_info("tunnel %s:%d: Port B closed: the gateway is "
				 "draining",
			    t->t_name, t->t_port);
		tunnel_unbind(t);
		t->t_retry_at = UINT64_MAX;
		for (d = TAILQ_FIRST(&t->t_dconns); d != NULL; d = next) {
			next = TAILQ_NEXT(d, d_entry);
			(void)h1s_drain(d->d_h1s, "gateway draining");
		}
	}
}

/*
 * While the gateway drains: each link whose tunnel has no exchange left
 * closes with 1012 "service restart", so that its client reconnects (to
 * the next process).  Returns the links and Port B connections still
 * open.
 */
size_t
tunnel_drain_tick(struct gw *g)
{
	struct tunnel_set *ts = g->g_tunnels;
	struct tunnel_link *l, *next;
	struct tunnel *t = NULL;
	size_t n = 0;

	if (ts == NULL)
		return (0);
	while ((t = tunnel_next_any(ts, t)) != NULL) {
		for (l = TAILQ_FIRST(&t->t_links); l != NULL; l = next) {
			next = TAILQ_NEXT(l, l_entry);
			if (l->l_state != TLINK_S_GONE &&
			    TAILQ_EMPTY(&t->t_xchgs))
				tunnel_link_drop(l, TUNPROTO_CLOSE_REPLACED,
				    TUNPROTO_RESTART_REASON);
			n++; /* listed until its close completes */
		}
		n += t->t_ndconns + !TAILQ_EMPTY(&t->t_xchgs);
	}
	return (n);
}

/*
 * The drain's deadline: Port B connections are cut (their exchanges
 * end), then every link closes with 1012.  Returns how many were cut.
 */
size_t
tunnel_drain_cut(struct gw *g)
{
	struct tunnel_set *ts = g->g_tunnels;
	struct tunnel_dconn *d, *dnext;
	struct tunnel_link *l, *lnext;
	struct tunnel *t = NULL;
	size_t n = 0;

	if (ts == NULL)
		return (0);
	while ((t = tunnel_next_any(ts, t)) != NULL) {
		for (d = TAILQ_FIRST(&t->t_dconns); d != NULL; d = dnext) {
			dnext = TAILQ_NEXT(d, d_entry);
			tunnel_dconn_close(d, "drain deadline");
			n++;
		}
		for (l = TAILQ_FIRST(&t->t_links); l != NULL; l = lnext) {
			lnext = TAILQ_NEXT(l, l_entry);
			if (l->l_state == TLINK_S_GONE)
				continue;
			tunnel_link_drop(l, TUNPROTO_CLOSE_REPLACED,
			    TUNPROTO_RESTART_REASON);
			n++;
		}
	}
	return (n);
}

/* A wall-clock time as RFC 3339 UTC. */
static json_t *
tunnel_json_time(int64_t secs)
{
	char buf[32];
	time_t tt = (time_t)secs;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return (json_string(buf));
}

/* One tunnel as the admin API shows it. */
static json_t *
tunnel_json(const struct tunnel *t)
{
	const struct tunnel_link *l = t->t_link;
	const struct tunnel_xchg *x;
	const char *state;
	json_t *o;
	size_t held = 0, paused = 0;

	TAILQ_FOREACH (x, &t->t_xchgs, x_entry) {
		if (x->x_state == TX_S_HOLD)
			held++;
		if (x->x_flags & TX_F_PAUSED)
			paused++;
	}
	if (t->t_state == TUNNEL_S_UNBOUND)
		state = "unbound";
	else if (l != NULL && l->l_state == TLINK_S_V2)
		state = "connected";
	else if (l != NULL || paused > 0)
		state = "waiting";
	else
		state = "listening";
	o = json_object();
	json_object_set_new(o, "listen_port", json_integer(t->t_port));
	json_object_set_new(o, "listen", json_string(t->t_addr_str));
	if (t->t_netns != NULL)
		json_object_set_new(o, "netns", json_string(t->t_netns));
	json_object_set_new(o, "state", json_string(state));
	if (t->t_bind_error != NULL)
		json_object_set_new(o, "error", json_string(t->t_bind_error));
	json_object_set_new(
	    o, "client", l != NULL ? json_string(l->l_peer) : json_null());
	json_object_set_new(o, "connected_since",
	    l != NULL ? tunnel_json_time(l->l_since) : json_null());
	json_object_set_new(
	    o, "generation", json_integer((json_int_t)t->t_generation));
	json_object_set_new(o, "protocol",
	    l != NULL ? json_string(tunnel_link_state_name(l->l_state))
		      : json_null());
	json_object_set_new(
	    o, "resumable", json_boolean(t->t_flags & TUNNEL_F_RESUMABLE));
	json_object_set_new(
	    o, "in_flight", json_integer((json_int_t)t->t_ninflight));
	json_object_set_new(o, "waiting", json_integer((json_int_t)held));
	json_object_set_new(o, "paused", json_integer((json_int_t)paused));
	json_object_set_new(
	    o, "channels", json_integer((json_int_t)t->t_nchannels));
	json_object_set_new(
	    o, "connections", json_integer((json_int_t)t->t_ndconns));
	json_object_set_new(o, "exchanges",
	    json_integer((json_int_t)idmap_count(&t->t_xchg_ids)));
	json_object_set_new(
	    o, "tombstones", json_integer((json_int_t)t->t_tombs.tm_count));
	json_object_set_new(
	    o, "tombstones_max", json_integer((json_int_t)t->t_tombs.tm_cap));
	json_object_set_new(o, "tombstones_evicted",
	    json_integer((json_int_t)t->t_tombs.tm_evicted));
	/* The client pings; we only answer (§7). */
	json_object_set_new(o, "idle_ms",
	    l != NULL
		? json_integer((json_int_t)(clock_mono_msec() - l->l_last_rx))
		: json_null());
	json_object_set_new(o, "client_pings",
	    json_integer(l != NULL ? (json_int_t)l->l_client_pings : 0));
	json_object_set_new(
	    o, "requests", json_integer((json_int_t)t->t_requests));
	json_object_set_new(o, "errors", json_integer((json_int_t)t->t_errors));
	json_object_set_new(
	    o, "bytes_in", json_integer((json_int_t)t->t_bytes_in));
	json_object_set_new(
	    o, "bytes_out", json_integer((json_int_t)t->t_bytes_out));
	json_object_set_new(o, "link_bytes_in",
	    json_integer(l != NULL ? (json_int_t)l->l_bytes_in : 0));
	json_object_set_new(o, "link_bytes_out",
	    json_integer(l != NULL ? (json_int_t)l->l_bytes_out : 0));
	return (o);
}

/*
 * The terminate-mode tunnels of a sandbox for the admin API: an array,
 * one object per listen port (empty for forward mode).
 */
json_t *
tunnel_admin_json(const struct gw *g, const struct gw_sandbox *sb)
{
	const struct tunnel *t;
	json_t *a = json_array();

	if (g->g_tunnels == NULL)
		return (a);
	TAILQ_FOREACH (t, &g->g_tunnels->ts_list, t_entry) {
		if (strcmp(t->t_name, sb->sb_id) == 0)
			json_array_append_new(a, tunnel_json(t));
	}
	return (a);
}
