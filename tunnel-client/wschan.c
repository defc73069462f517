/*
 * Application WebSockets (tunnel-protocol.md §4.10, §9.8): a ws_connect
 * from the sandbox opens a WebSocket to the target (ws:// or wss:// from
 * the target URL, the base path kept), and messages flow both ways until
 * either side closes. One struct tun_chan per channel id. Channels never
 * survive a tunnel reconnect (§8.7).
 *
 * Binary messages travel as WS_BINARY_DATA envelopes in V2 (split at
 * max_stream_chunk, END on the last; reassembled the other way) and as
 * base64 ws_message in V1. WebSockets have no credits: each direction is
 * bounded by a queue limit, past which the channel fails with "WebSocket
 * channel queue limit reached".
 */
#include <sys/socket.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "stream.h"
#include "tls.h"
#include "tun.h"
#include "wsconn.h"

/* Seconds to open the target WebSocket (§10.6: the sandbox waits 10 s). */
#define CHAN_OPEN_TIMEOUT 10

/* Handshake headers never forwarded to the target (§9.8). */
static const char *const chan_dropped[] = { "connection", "content-length",
	"host", "sec-websocket-extensions", "sec-websocket-key",
	"sec-websocket-version", "upgrade", NULL };

static void chan_connect_next(struct tun_chan *);

/* The channel with id, or NULL. */
static struct tun_chan *
chan_find(struct tun *t, const char *id)
{
	return (idmap_find(&t->t_chan_ids, id));
}

/* Largest message one channel carries (§9.8). */
static size_t
chan_max_message(const struct tun *t)
{
	const struct tunproto_limits *l = tun_limits(t);

	if (t->t_v2)
		return ((size_t)l->l_max_ws_message_size);
	return ((size_t)(l->l_max_body_size < TUNPROTO_V1_BODY_MAX
		? l->l_max_body_size
		: TUNPROTO_V1_BODY_MAX));
}

/* Most bytes waiting in either direction before the channel fails. */
static size_t
chan_queue_limit(const struct tun *t)
{
	return (chan_max_message(t) +
	    2 * (size_t)tun_limits(t)->l_max_stream_chunk);
}

/* Free a channel's memory, from the loop. */
static void
chan_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_chan *ch = arg;

	(void)fd;
	(void)what;
	if (ch->ch_timer != NULL)
		event_free(ch->ch_timer);
	if (ch->ch_msg != NULL)
		evbuffer_free(ch->ch_msg);
	http1_msg_reset(&ch->ch_resp);
	free(ch->ch_request);
	free(ch->ch_protocols);
	free(ch->ch_error);
	free(ch->ch_path);
	free(ch->ch_id);
	free(ch);
}

/*
 * End a channel for reason: the one way each ends. The target socket goes
 * at once (wsconn and stream cope with being freed from their own
 * callbacks), the memory from the loop; the id is tombstoned so late data
 * is absorbed.
 */
static void
chan_close(struct tun_chan *ch, const char *reason)
{
	struct tun *t = ch->ch_tun;

	if (ch->ch_state == CH_S_DEAD)
		return;
	log_debug("channel %s closed: %s", ch->ch_id, reason);
	ch->ch_state = CH_S_DEAD;
	if (ch->ch_query != NULL) {
		dns_cancel(ch->ch_query);
		ch->ch_query = NULL;
	}
	evtimer_del(ch->ch_timer);
	if (ch->ch_ws != NULL) {
		wsconn_free(ch->ch_ws);
		ch->ch_ws = NULL;
	}
	if (ch->ch_s != NULL) {
		stream_free(ch->ch_s);
		ch->ch_s = NULL;
	}
	TAILQ_REMOVE(&t->t_chans, ch, ch_entry);
	idmap_del(&t->t_chan_ids, ch->ch_id);
	t->t_nchans--;
	tombs_add(&t->t_tombs, ch->ch_id, clock_mono_msec());
	if (event_base_once(
		t->t_base, -1, EV_TIMEOUT, chan_free_cb, ch, NULL) != 0)
		chan_free_cb(-1, 0, ch);
}

/* The channel failed: the sandbox gets an error with why. */
static void
chan_fail(struct tun_chan *ch, const char *why)
{
	if (ch->ch_state == CH_S_DEAD)
		return;
	if (ch->ch_tun->t_opts->verbose)
		log_warn("WebSocket %.*s failed: %s",
		    (int)strcspn(ch->ch_path, "?"), ch->ch_path, why);
	tun_send_error(ch->ch_tun, ch->ch_id, why);
	chan_close(ch, why);
}

/* Send one target message to the sandbox (§9.8). */
static void
chan_to_sandbox(struct tun_chan *ch, int binary, const uint8_t *p, size_t n)
{
	struct tun *t = ch->ch_tun;
	struct tunproto_msg m;
	struct evbuffer *b;
	size_t chunk, off, len;
	uint8_t flags;

	if (!tun_connected(t))
		return;
	if (n > chan_max_message(t)) {
		chan_fail(ch, "WebSocket binary message exceeds tunnel limit");
		return;
	}
	if (!tun_send_room(t) &&
	    tun_queued(t) > chan_queue_limit(t) + TUN_WS_DATA_HIWAT) {
		chan_fail(ch, "WebSocket channel queue limit reached");
		return;
	}
	if (!binary || !t->t_v2) {
		memset(&m, 0, sizeof m);
		m.m_type = TUNPROTO_T_WS_MESSAGE;
		m.m_id = ch->ch_id;
		m.m_body = (uint8_t *)(uintptr_t)p;
		m.m_body_len = n;
		if (binary)
			m.m_flags |= TUNPROTO_MSG_F_BINARY;
		if (tun_send_msg(t, &m) != 0 && tun_connected(t))
			chan_fail(ch,
			    "WebSocket text message exceeds control-frame "
			    "limit");
		return;
	}
	chunk = (size_t)tun_limits(t)->l_max_stream_chunk;
	if ((b = evbuffer_new()) == NULL)
		abort();
	evbuffer_add_reference(b, p, n, NULL, NULL);
	off = 0;
	do {
		len = n - off < chunk ? n - off : chunk;
		flags = off + len == n ? TUNPROTO_ENV_F_END : 0;
		if (tun_send_data(t, TUNPROTO_ENV_WS_BINARY_DATA, ch->ch_id, 0,
			flags, b, off, len) != 0)
			break;
		off += len;
	} while (off < n);
	evbuffer_free(b);
}

/* A whole message from the target. */
static void
chan_message_cb(void *arg, int is_binary, const uint8_t *data, size_t len)
{
	struct tun_chan *ch = arg;

	if (ch->ch_state != CH_S_OPEN)
		return;
	chan_to_sandbox(ch, is_binary, data, len);
}

/* The target WebSocket closed: tell the sandbox how (§4.10). */
static void
chan_close_cb(void *arg, uint16_t code, const char *reason)
{
	struct tun_chan *ch = arg;
	struct tunproto_msg m;
	char why[256];

	if (ch->ch_state == CH_S_DEAD)
		return;
	if (code == WS_CLOSE_ABNORMAL && !(ch->ch_flags & CH_F_CLOSE_SENT)) {
		snprintf(
		    why, sizeof why, "target WebSocket closed: %s", reason);
		chan_fail(ch, why);
		return;
	}
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_WS_CLOSE;
	m.m_id = ch->ch_id;
	m.m_code = (code == WS_CLOSE_NO_STATUS || code == WS_CLOSE_ABNORMAL)
	    ? WS_CLOSE_NORMAL
	    : code;
	m.m_reason = (char *)(uintptr_t)reason;
	tun_send_msg(ch->ch_tun, &m);
	chan_close(ch, "closed");
}

/* The upgrade succeeded: run the WebSocket and say ws_connected. */
static void
chan_open(struct tun_chan *ch)
{
	static const struct wsconn_cbs cbs = {
		.on_message = chan_message_cb,
		.on_close = chan_close_cb,
	};
	struct tun *t = ch->ch_tun;
	struct tunproto_msg m;

	evtimer_del(ch->ch_timer);
	ch->ch_ws = wsconn_new(
	    t->t_base, ch->ch_s, 1, &cbs, ch, chan_max_message(t));
	if (ch->ch_ws == NULL) {
		chan_fail(ch, "cannot start the target WebSocket");
		return;
	}
	ch->ch_s = NULL;
	ch->ch_state = CH_S_OPEN;
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_WS_CONNECTED;
	m.m_id = ch->ch_id;
	tun_send_msg(t, &m);
	if (t->t_opts->verbose)
		log_info("WebSocket %.*s open", (int)strcspn(ch->ch_path, "?"),
		    ch->ch_path);
}

/*
 * Check the target's 101: the accept key and the rest as lib/wsconn.c
 * does, except that a subprotocol we offered may be chosen. Returns 0 or
 * -1 with *why.
 */
static int
chan_check_accept(struct tun_chan *ch, char **why)
{
	struct http1_msg copy = ch->ch_resp;
	struct hfield *h;
	size_t i, n = 0;
	int rv;

	h = xcalloc(ch->ch_resp.m_nheaders + 1, sizeof *h);
	for (i = 0; i < ch->ch_resp.m_nheaders; i++) {
		if (strcasecmp(ch->ch_resp.m_headers[i].name,
			"sec-websocket-protocol") == 0 &&
		    ch->ch_protocols != NULL &&
		    http1_list_has(ch->ch_protocols, strlen(ch->ch_protocols),
			ch->ch_resp.m_headers[i].value))
			continue;
		h[n++] = ch->ch_resp.m_headers[i];
	}
	copy.m_headers = h;
	copy.m_nheaders = n;
	rv = ws_check_accept_response(&copy, ch->ch_key, why);
	free(h);
	return (rv);
}

/* Bytes of the target's upgrade response arrived. */
static void
chan_read_cb(struct stream *s, void *arg)
{
	struct tun_chan *ch = arg;
	struct http1_limits lim = { TUN_HEAD_MAX, TUN_HEAD_LINE_MAX,
		TUN_HEAD_FIELDS_MAX };
	enum http1_err herr;
	char why[256], *err = NULL;
	int rv;

	if (ch->ch_state != CH_S_UPGRADING)
		return;
	rv = http1_parse_response(
	    stream_input(s), &lim, 0, &ch->ch_resp, &herr);
	if (rv == 0)
		return;
	if (rv < 0) {
		snprintf(why, sizeof why,
		    "malformed WebSocket upgrade response from the target: %s",
		    http1_err_message(herr));
		chan_fail(ch, why);
		return;
	}
	if (ch->ch_resp.m_status != 101) {
		snprintf(why, sizeof why,
		    "the target refused the WebSocket upgrade: HTTP %d",
		    ch->ch_resp.m_status);
		chan_fail(ch, why);
		return;
	}
	if (chan_check_accept(ch, &err) != 0) {
		snprintf(why, sizeof why,
		    "bad WebSocket upgrade from the "
		    "target: %s",
		    err);
		free(err);
		chan_fail(ch, why);
		return;
	}
	chan_open(ch);
}

/*
 * Describe a failed connect or TLS handshake to the target: what stream
 * s's event said, or with s NULL the errno err of a connect that could
 * not start.
 */
static char *
chan_stream_error(struct tun_chan *ch, struct stream *s, short what, int err)
{
	const struct tun_url *u = &ch->ch_tun->t_opts->target;
	char *hp, *who, *msg;

	hp = tun_host_port(u->u_host, u->u_port, -1);
	xasprintf(&who, "the target %s", hp);
	msg = tun_stream_error(s, what, err, who);
	free(who);
	free(hp);
	return (msg);
}

/* Connect, TLS and errors before the WebSocket is open. */
static void
chan_event_cb(struct stream *s, short what, void *arg)
{
	struct tun_chan *ch = arg;

	/* stream_connect set TCP_NODELAY. */
	if (what & STREAM_EV_CONNECTED) {
		if (ch->ch_state != CH_S_CONNECTING)
			return;
		ch->ch_state = CH_S_UPGRADING;
		if (evbuffer_add(stream_output(s), ch->ch_request,
			strlen(ch->ch_request)) != 0)
			abort(); /* allocation failure, as with xmalloc */
		stream_enable(s, EV_READ);
		return;
	}
	if (ch->ch_state == CH_S_CONNECTING) {
		free(ch->ch_error);
		ch->ch_error = chan_stream_error(ch, s, what, 0);
		stream_free(ch->ch_s);
		ch->ch_s = NULL;
		chan_connect_next(ch);
		return;
	}
	chan_read_cb(s, ch);
	if (ch->ch_state == CH_S_UPGRADING)
		chan_fail(ch,
		    "the target closed the connection during the WebSocket "
		    "upgrade");
}

/* Dial the next address of the target, or fail. */
static void
chan_connect_next(struct tun_chan *ch)
{
	struct tun *t = ch->ch_tun;
	struct sockaddr_storage *ss;
	char *cause = NULL;
	SSL *ssl = NULL;

	for (;;) {
		if (ch->ch_next >= ch->ch_naddrs) {
			chan_fail(ch,
			    ch->ch_error != NULL
				? ch->ch_error
				: "cannot connect to the target");
			return;
		}
		ss = &ch->ch_addrs[ch->ch_next++];
		if (t->t_target_tls != NULL) {
			ssl = tls_client_ssl_new(
			    t->t_target_tls, t->t_opts->target.u_host, &cause);
			if (ssl == NULL) {
				chan_fail(ch, cause);
				free(cause);
				return;
			}
		}
		/* A close without close_notify is EOF, as a stream's is. */
		ch->ch_s = stream_new(t->t_base, -1, ssl, 0);
		stream_setcb(ch->ch_s, chan_read_cb, NULL, chan_event_cb, ch);
		ch->ch_state = CH_S_CONNECTING;
		if (stream_connect(ch->ch_s,
			(struct sockaddr *)ss,
			ss->ss_family == AF_INET6
			    ? sizeof(struct sockaddr_in6)
			    : sizeof(struct sockaddr_in)) == 0)
			return;
		free(ch->ch_error);
		ch->ch_error = chan_stream_error(ch, NULL, 0, errno);
		stream_free(ch->ch_s);
		ch->ch_s = NULL;
	}
}

/* The target's addresses are known (or not). */
static void
chan_resolved_cb(
    const struct sockaddr_storage *addrs, size_t n, const char *err, void *arg)
{
	struct tun_chan *ch = arg;

	ch->ch_query = NULL;
	if (err != NULL) {
		chan_fail(ch, err);
		return;
	}
	memcpy(ch->ch_addrs, addrs, n * sizeof *addrs);
	ch->ch_naddrs = n;
	chan_connect_next(ch);
}

/* Opening took too long. */
static void
chan_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	chan_fail(arg, "timed out opening the target WebSocket");
}

/*
 * Build the upgrade request from ws_connect's path and headers (§9.8):
 * Origin and Sec-WebSocket-Protocol kept, the handshake's own headers
 * dropped, the rest forwarded. Returns NULL with *cause.
 */
static char *
chan_request(struct tun_chan *ch, const struct tunproto_msg *m, char **cause)
{
	struct tun *t = ch->ch_tun;
	const char *const *d;
	char **extra, *path, *req;
	size_t i, n = 0;

	if ((path = target_join_path(
		 t->t_opts->target.u_path, m->m_path, cause)) == NULL)
		return (NULL);
	extra = xcalloc(m->m_nheaders + 1, sizeof *extra);
	for (i = 0; i < m->m_nheaders; i++) {
		for (d = chan_dropped; *d != NULL; d++) {
			if (strcasecmp(m->m_headers[i].h_name, *d) == 0)
				break;
		}
		if (*d != NULL)
			continue;
		if (strcasecmp(m->m_headers[i].h_name,
			"sec-websocket-protocol") == 0) {
			free(ch->ch_protocols);
			ch->ch_protocols = xstrdup(m->m_headers[i].h_value);
		}
		xasprintf(&extra[n++], "%s: %s", m->m_headers[i].h_name,
		    m->m_headers[i].h_value);
	}
	ws_random_key(ch->ch_key);
	req = ws_client_request(t->t_target_authority, path, ch->ch_key,
	    (const char *const *)extra);
	for (i = 0; i < n; i++)
		free(extra[i]);
	free(extra);
	free(path);
	if (req == NULL)
		xasprintf(cause, "invalid WebSocket handshake header");
	return (req);
}

/* A ws_connect (§4.10): open the target WebSocket for a new channel. */
void
chan_connect(struct tun *t, const struct tunproto_msg *m)
{
	struct tun_chan *ch;
	struct timeval tv = { CHAN_OPEN_TIMEOUT, 0 };
	char *cause = NULL;

	if (m->m_id == NULL || *m->m_id == '\0')
		return;
	if (chan_find(t, m->m_id) != NULL ||
	    tombs_has(&t->t_tombs, m->m_id, clock_mono_msec())) {
		tun_send_error(t, m->m_id, "duplicate WebSocket channel id");
		return;
	}
	if (t->t_nchans >= tun_limits(t)->l_max_inflight) {
		tun_send_error(
		    t, m->m_id, "tunnel WebSocket channel limit reached");
		return;
	}
	ch = xcalloc(1, sizeof *ch);
	ch->ch_tun = t;
	ch->ch_id = xstrdup(m->m_id);
	ch->ch_path = xstrdup(m->m_path);
	ch->ch_state = CH_S_RESOLVING;
	if ((ch->ch_msg = evbuffer_new()) == NULL ||
	    (ch->ch_timer = evtimer_new(t->t_base, chan_timeout_cb, ch)) ==
		NULL)
		abort();
	TAILQ_INSERT_TAIL(&t->t_chans, ch, ch_entry);
	idmap_put(&t->t_chan_ids, ch->ch_id, ch);
	t->t_nchans++;
	if ((ch->ch_request = chan_request(ch, m, &cause)) == NULL) {
		chan_fail(ch, cause);
		free(cause);
		return;
	}
	evtimer_add(ch->ch_timer, &tv);
	ch->ch_query = dns_lookup(t->t_dns, t->t_opts->target.u_host,
	    t->t_opts->target.u_port, chan_resolved_cb, ch);
}

/* Queue one message for the target, within the channel's queue limit. */
static void
chan_to_target(struct tun_chan *ch, int binary, const uint8_t *p, size_t n)
{
	struct tun *t = ch->ch_tun;

	if (ch->ch_state != CH_S_OPEN || ch->ch_ws == NULL)
		return;
	if (binary && n > chan_max_message(t)) {
		chan_fail(ch, "WebSocket binary message exceeds tunnel limit");
		return;
	}
	if (wsconn_queued(ch->ch_ws) + n > chan_queue_limit(t) ||
	    wsconn_send(ch->ch_ws, binary, p, n) != 0)
		chan_fail(ch, "WebSocket channel queue limit reached");
}

/* A ws_message from the sandbox; bad_body: its base64 did not decode. */
void
chan_message(struct tun *t, const struct tunproto_msg *m, int bad_body)
{
	struct tun_chan *ch;

	if ((ch = chan_find(t, m->m_id)) == NULL)
		return;
	if (bad_body) {
		chan_fail(ch, "WebSocket binary message is not valid base64");
		return;
	}
	chan_to_target(ch, (m->m_flags & TUNPROTO_MSG_F_BINARY) != 0,
	    m->m_body != NULL ? m->m_body : (const uint8_t *)"", m->m_body_len);
}

/* A WS_BINARY_DATA envelope: reassemble until END (§3.2). */
void
chan_data(struct tun *t, const struct tunproto_env *env)
{
	struct tun_chan *ch;
	size_t have;

	if ((ch = chan_find(t, env->e_id)) == NULL) {
		if (!tombs_has(&t->t_tombs, env->e_id, clock_mono_msec()))
			tun_protocol_error(t,
			    "WebSocket data for unknown channel %s", env->e_id);
		return;
	}
	have = evbuffer_get_length(ch->ch_msg);
	if (have + env->e_len > chan_max_message(t)) {
		chan_fail(ch, "WebSocket binary message exceeds tunnel limit");
		return;
	}
	evbuffer_add(ch->ch_msg, env->e_payload, env->e_len);
	if (!(env->e_flags & TUNPROTO_ENV_F_END))
		return;
	have = evbuffer_get_length(ch->ch_msg);
	chan_to_target(ch, 1, evbuffer_pullup(ch->ch_msg, -1), have);
	if (ch->ch_state != CH_S_DEAD)
		evbuffer_drain(ch->ch_msg, have);
}

/* A ws_close from the sandbox: close the target with its code (§4.10). */
void
chan_close_msg(struct tun *t, const struct tunproto_msg *m)
{
	struct tun_chan *ch;

	if ((ch = chan_find(t, m->m_id)) == NULL)
		return;
	if (ch->ch_state != CH_S_OPEN || ch->ch_ws == NULL ||
	    wsconn_close(ch->ch_ws, (uint16_t)m->m_code, m->m_reason) != 0) {
		chan_close(ch, "closed by the sandbox");
		return;
	}
	ch->ch_flags |= CH_F_CLOSE_SENT;
}

/* An error from the sandbox cancels the channel: nothing is sent back. */
int
chan_peer_error(struct tun *t, const struct tunproto_msg *m)
{
	struct tun_chan *ch;

	if ((ch = chan_find(t, m->m_id)) == NULL)
		return (0);
	chan_close(ch, "cancelled by the sandbox");
	return (1);
}

/* The tunnel connection is gone: every channel goes with it (§8.7). */
void
chan_drop_all(struct tun *t)
{
	struct tun_chan *ch;

	while ((ch = TAILQ_FIRST(&t->t_chans)) != NULL)
		chan_close(ch, "tunnel connection lost");
}

/* Free every channel now; only outside the loop's callbacks. */
void
chan_free_all(struct tun *t)
{
	struct tun_chan *ch;

	while ((ch = TAILQ_FIRST(&t->t_chans)) != NULL) {
		TAILQ_REMOVE(&t->t_chans, ch, ch_entry);
		if (ch->ch_query != NULL)
			dns_cancel(ch->ch_query);
		if (ch->ch_ws != NULL)
			wsconn_free(ch->ch_ws);
		if (ch->ch_s != NULL)
			stream_free(ch->ch_s);
		chan_free_cb(-1, 0, ch);
	}
	idmap_free(&t->t_chan_ids);
	t->t_nchans = 0;
}
