/*
 * Port B of a terminate-mode tunnel: HTTP/1.1 from code in the sandbox
 * (tunnel-protocol.md §10), one exchange at a time per connection
 * (keep-alive; pipelined requests wait in the input).
 *
 * The HTTP/1 engine (h1s.c) runs each connection: heads parsed strictly,
 * keep-alive, timers, linger, read-stop, its own refusals of bad heads.
 * This file is the engine's owner and owns the life of each exchange:
 * hold the request while no client is attached (client_wait), send it as
 * http_req when its body is known and fits the fast path or as
 * http_req_begin otherwise (§10.2), time it out, and answer every refusal
 * through the engine's sink with a status, a code and a sentence.
 * tunnel_body.c moves the bodies.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "stream.h"

/* Request head limits on Port B (§6.5, §10.1). */
#define TDC_HEAD_MAX (64 * 1024)
#define TDC_LINE_MAX (8 * 1024)
#define TDC_HEADERS_MAX 200
/* The whole head must arrive within this (§10.1). */
#define TDC_HEAD_TIMEOUT_MS (10 * 1000)
/* An idle kept-alive connection is closed after this. */
#define TDC_IDLE_MS (120 * 1000)
/* How long a closing connection drains input after its answer. */
#define TDC_LINGER_MS 2000
/* Output left to drain after an answer before the connection is cut. */
#define TDC_WRITE_MS (30 * 1000)
/* Input buffered before reading pauses, while a head is read. */
#define TDC_READ_HIGH (TDC_HEAD_MAX + 4096)
/*
 * The same while a request body streams: the body's own buffer is bounded
 * (TX_UP_BUF_MAX), and reading 70 KB per wakeup cost a quarter of the
 * gateway's CPU in an upload.
 */
#define TDC_BODY_READ_HIGH (256 * 1024)
/* Credits go back, and the next request starts, below this much output. */
#define TDC_OUT_LOW (64 * 1024)
/* Connections on one Port B. */
#define TDC_MAX 1024
/* Connections past TDC_MAX that get a 429 before they close. */
#define TDC_MAX_OVER 64
/*
 * A body of unknown length is read up to the fast-path limit + 1 byte for
 * at most this long: if it ends by then it goes as http_req with its
 * length, else it streams (§10.2, as the Python V2 sandbox does).
 */
#define TX_PROBE_MS 250

static const struct http1_limits tdc_limits = { TDC_HEAD_MAX, TDC_LINE_MAX,
	TDC_HEADERS_MAX };

/*
 * How the engine runs Port B: a caller that ends its stream during an
 * exchange has given up (like hyper, §10.4).
 */
static const struct h1s_conf tdc_h1conf = {
	.hc_name = "tunnel Port B",
	.hc_limits = &tdc_limits,
	.hc_head_ms = TDC_HEAD_TIMEOUT_MS,
	.hc_idle_ms = TDC_IDLE_MS,
	.hc_write_ms = TDC_WRITE_MS,
	.hc_linger_ms = TDC_LINGER_MS,
	.hc_flags = H1S_C_EOF_ABORTS,
};

/* Hop-by-hop fields, never relayed in either direction (§9.2). */
static const char *const tx_hop[] = { "connection", "keep-alive",
	"proxy-authenticate", "proxy-authorization", "proxy-connection", "te",
	"trailer", "transfer-encoding", "upgrade", NULL };

static void tx_finish(struct tunnel_xchg *, const char *);
static void tx_timer_cb(evutil_socket_t, short, void *);
static void tx_stream(struct tunnel_xchg *);

/* Arm a one-shot timer for ms milliseconds. */
static void
tdc_timer_set(struct event *ev, uint64_t ms)
{
	struct timeval tv;

	clock_msec_to_tv(ms, &tv);
	evtimer_add(ev, &tv);
}

/* Is name a hop-by-hop field? */
int
tunnel_hop_field(const char *name)
{
	size_t i;

	for (i = 0; tx_hop[i] != NULL; i++) {
		if (strcasecmp(name, tx_hop[i]) == 0)
			return (1);
	}
	return (0);
}

/* Is name listed in a Connection field of the request? */
static int
tx_req_conn_named(const struct http1_msg *m, const char *name)
{
	size_t i;

	for (i = 0; i < m->m_nheaders; i++) {
		if (strcasecmp(m->m_headers[i].name, "connection") == 0 &&
		    http1_list_has(
			m->m_headers[i].value, m->m_headers[i].value_len, name))
			return (1);
	}
	return (0);
}

/*
 * Copy the request headers a frame carries into m: all but hop-by-hop,
 * Connection-named, Host, Content-Length and Expect (§10.1, §9.2), in
 * order, duplicates kept.
 */
static void
tx_req_headers(const struct http1_msg *req, struct tunproto_msg *m)
{
	const struct hfield *h;
	size_t i;

	for (i = 0; i < req->m_nheaders; i++) {
		h = &req->m_headers[i];
		if (tunnel_hop_field(h->name) ||
		    tx_req_conn_named(req, h->name) ||
		    strcasecmp(h->name, "host") == 0 ||
		    strcasecmp(h->name, "content-length") == 0 ||
		    strcasecmp(h->name, "expect") == 0)
			continue;
		tunproto_msg_add_header(m, h->name, h->value);
	}
}

/* Free an exchange's memory; nothing refers to it any more. */
void
tunnel_xchg_free(struct tunnel_xchg *x)
{
	tunnel_ws_free(x);
	if (x->x_timer != NULL)
		event_free(x->x_timer);
	if (x->x_body != NULL)
		evbuffer_free(x->x_body);
	free(x->x_frame);
	free(x->x_up_ends);
	free(x->x_resp_q);
	free(x->x_resp_qack);
	free(x->x_method);
	free(x->x_target);
	free(x);
}

/* Free an exchange from the loop. */
static void
tx_free_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd;
	(void)events;
	tunnel_xchg_free(arg);
}

/* Schedule the free of a finished exchange. */
void
tunnel_xchg_end(struct tunnel_xchg *x, const char *reason)
{
	struct timeval tv = { 0, 0 };

	if (x->x_state == TX_S_DONE)
		return;
	tx_finish(x, reason);
	/* An open WebSocket frees it from its on_close, after its close. */
	if ((x->x_flags & TX_F_WS) && x->x_ws != NULL &&
	    !(x->x_flags & TX_F_WS_CLOSED))
		return;
	event_base_once(x->x_base, -1, EV_TIMEOUT, tx_free_cb, x, &tv);
}

/*
 * What one tunnel_access line says: an exchange's, or a refusal's before
 * any exchange (no id, no time, no bytes).
 */
struct tx_line {
	const char *tl_id; /* or NULL */
	const char *tl_method; /* or NULL */
	size_t tl_method_len;
	const char *tl_path; /* or NULL; only up to the query is logged */
	size_t tl_path_len;
	int tl_ws;
	int tl_status;
	uint64_t tl_in, tl_out; /* body bytes from and to the caller */
	int64_t tl_us; /* duration, or -1 */
	const char *tl_code; /* gateway error code, or NULL */
	const char *tl_end;
};

/* Log one tunnel_access line for tunnel t; never a query string. */
static void
tx_log_line(const struct tunnel *t, const struct tx_line *tl)
{
	const char *q;
	json_t *f;

	if (!log_enabled(LOG_LVL_INFO))
		return;
	f = json_object();
	json_object_set_new(f, "sandbox", json_string(t->t_name));
	json_object_set_new(f, "listen_port", json_integer(t->t_port));
	json_object_set_new(
	    f, "id", tl->tl_id != NULL ? json_string(tl->tl_id) : json_null());
	json_object_set_new(f, "method",
	    tl->tl_method != NULL
		? json_stringn(tl->tl_method, tl->tl_method_len)
		: json_null());
	if (tl->tl_path != NULL &&
	    (q = memchr(tl->tl_path, '?', tl->tl_path_len)) == NULL)
		q = tl->tl_path + tl->tl_path_len;
	json_object_set_new(f, "path",
	    tl->tl_path != NULL
		? json_stringn(tl->tl_path, (size_t)(q - tl->tl_path))
		: json_null());
	json_object_set_new(f, "websocket", json_boolean(tl->tl_ws));
	json_object_set_new(f, "status", json_integer(tl->tl_status));
	json_object_set_new(f, "bytes_in", json_integer((json_int_t)tl->tl_in));
	json_object_set_new(
	    f, "bytes_out", json_integer((json_int_t)tl->tl_out));
	json_object_set_new(f, "ms",
	    tl->tl_us >= 0 ? json_real((double)tl->tl_us / 1000) : json_null());
	json_object_set_new(f, "error",
	    tl->tl_code != NULL ? json_string(tl->tl_code) : json_null());
	json_object_set_new(f, "end", json_string(tl->tl_end));
	log_event(LOG_LVL_INFO, "tunnel_access", f);
}

/* Log one line for a finished exchange. */
static void
tx_log(struct tunnel_xchg *x, const char *how)
{
	struct tx_line tl;

	memset(&tl, 0, sizeof tl);
	tl.tl_id = x->x_id;
	tl.tl_method = x->x_method;
	tl.tl_method_len = x->x_method != NULL ? strlen(x->x_method) : 0;
	tl.tl_path = x->x_target;
	tl.tl_path_len = x->x_target != NULL ? strlen(x->x_target) : 0;
	tl.tl_ws = (x->x_flags & TX_F_WS) != 0;
	tl.tl_status = x->x_status;
	tl.tl_in = x->x_up_read;
	tl.tl_out = x->x_resp_received;
	tl.tl_us = (int64_t)(clock_mono_usec() - x->x_start_us);
	tl.tl_code = x->x_err != NULL ? x->x_err->e_code : NULL;
	tl.tl_end = how;
	tx_log_line(x->x_tunnel, &tl);
}

/*
 * The exchange on d is over: detach it, and put back the read watermark a
 * streamed body raised.  The engine goes on with what the answer's end
 * says.
 */
static void
tdc_xchg_over(struct tunnel_dconn *d)
{
	struct tunnel_xchg *x = d->d_x;

	if (x != NULL)
		x->x_dconn = NULL;
	d->d_x = NULL;
	d->d_head = NULL;
	d->d_req = NULL;
	if (d->d_flags & TDC_F_READ_HIGH)
		h1s_read_high(d->d_h1s, TDC_READ_HIGH);
	d->d_flags &= ~TDC_F_READ_HIGH;
}

/*
 * Finish an exchange: count and log it, remember its id, and detach it
 * from its connection, whose caller decides what comes next.
 */
static void
tx_finish(struct tunnel_xchg *x, const char *how)
{
	struct tunnel *t = x->x_tunnel;
	char show[256];

	if (x->x_state == TX_S_DONE)
		return;
	log_debug("tunnel %s:%d: %s %s finished: %s", t->t_name, t->t_port,
	    (x->x_flags & TX_F_WS) ? "channel" : "exchange",
	    tunnel_xchg_show(x, show, sizeof show), how);
	if (x->x_state == TX_S_HOLD)
		t->t_nheld--;
	x->x_state = TX_S_DONE;
	TAILQ_REMOVE(&t->t_xchgs, x, x_entry);
	idmap_del(&t->t_xchg_ids, x->x_id);
	if (x->x_flags & TX_F_COUNTED) {
		if (x->x_flags & TX_F_WS)
			t->t_nchannels--;
		else
			t->t_ninflight--;
		tombs_add(&t->t_tombs, x->x_id, clock_mono_msec());
		/* A slot in max_inflight freed: the oldest waiting goes. */
		if (t->t_nheld > 0 && !(x->x_flags & TX_F_WS))
			event_active(t->t_kick, EV_TIMEOUT, 1);
	}
	evtimer_del(x->x_timer);
	t->t_requests++;
	GW_ADD(t->t_gw->g_metrics.m_tunnel_requests, 1);
	if (x->x_err != NULL)
		metrics_code(t->t_gw, x->x_err->e_code);
	tx_log(x, how);
	if (x->x_dconn != NULL)
		tdc_xchg_over(x->x_dconn);
	if (x->x_flags & TX_F_CONN)
		t->t_ndconns--;
	tunnel_released(t);
}

/*
 * Answer the request on h with err and the sentence msg (JSON) through
 * the engine's sink; the connection stays open after it only with keep.
 */
static void
tdc_answer_error(
    struct h1s *h, const struct gw_error *err, const char *msg, int keep)
{
	struct errpage ep;

	memset(&ep, 0, sizeof ep);
	ep.ep_status = err->e_status;
	ep.ep_code = err->e_code;
	ep.ep_message = msg;
	ep.ep_flags = keep ? ERRPAGE_F_KEEPALIVE : 0;
	errpage_send(h1s_sink(h), &ep);
}

/*
 * Fail an exchange: answer the caller with err and a sentence when no
 * response has started, else cut its connection; tell the client
 * error{id, tell} when tell is not NULL and the request was sent.
 */
void
tunnel_xchg_fail(struct tunnel_xchg *x, const struct gw_error *err,
    const char *tell, const char *fmt, ...)
{
	struct tunnel *t = x->x_tunnel;
	struct tunnel_dconn *d = x->x_dconn;
	struct h1s *h;
	va_list ap;
	char *msg;
	int keep;

	if (x->x_state == TX_S_DONE)
		return;
	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	if (tell != NULL && (x->x_flags & TX_F_COUNTED))
		tunnel_send_error(t, x->x_id, tell);
	if (err->e_status != 503 && err->e_status != 429) {
		t->t_errors++;
		GW_ADD(t->t_gw->g_metrics.m_tunnel_errors, 1);
	}
	x->x_err = err;
	log_info("tunnel %s:%d: %s %s: %s: %s", t->t_name, t->t_port,
	    x->x_method != NULL ? x->x_method : "-", x->x_id, err->e_code, msg);
	/* The exchange ends first: the engine may go on within the answer. */
	if (d == NULL) {
		tunnel_xchg_end(x, err->e_code);
	} else if (x->x_state == TX_S_STREAM) {
		/* Headers went out: cut the body short (§10.4). */
		h = d->d_h1s;
		tunnel_xchg_end(x, err->e_code);
		sink_abort(h1s_sink(h), msg);
	} else {
		h = d->d_h1s;
		keep = h1s_keeps(h) && (x->x_flags & TX_F_UP_DONE) &&
		    !(x->x_flags & TX_F_UP_STOPPED) &&
		    t->t_state != TUNNEL_S_DEAD;
		if (!keep)
			h1s_no_keep(h);
		x->x_status = err->e_status;
		tunnel_xchg_end(x, err->e_code);
		tdc_answer_error(h, err, msg, keep);
	}
	free(msg);
}

/*
 * A refusal before any exchange (the engine's, or ours): counted and
 * logged like an exchange, with the request's method and path when its
 * head was read (rh, or NULL).
 */
static void
tdc_refused(struct tunnel_dconn *d, int status, const char *code,
    const char *msg, const struct head *rh)
{
	struct tunnel *t = d->d_tunnel;
	struct tx_line tl;

	log_debug("tunnel %s:%d: conn %llu %s: %d %s: %s", t->t_name, t->t_port,
	    (unsigned long long)d->d_id, d->d_peer, status, code, msg);
	t->t_requests++;
	t->t_errors++;
	GW_ADD(t->t_gw->g_metrics.m_tunnel_requests, 1);
	GW_ADD(t->t_gw->g_metrics.m_tunnel_errors, 1);
	metrics_code(t->t_gw, code);
	memset(&tl, 0, sizeof tl);
	if (rh != NULL) {
		tl.tl_method = rh->h_method;
		tl.tl_method_len = rh->h_method_len;
		tl.tl_path = rh->h_target;
		tl.tl_path_len = rh->h_target_len;
	}
	tl.tl_status = status;
	tl.tl_us = -1;
	tl.tl_code = code;
	tl.tl_end = "refused";
	tx_log_line(t, &tl);
}

/*
 * Refuse the request on d (or, before any, the connection) with err and a
 * sentence through the engine's sink, then close.
 */
void
tunnel_dconn_refuse(
    struct tunnel_dconn *d, const struct gw_error *err, const char *fmt, ...)
{
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	tdc_refused(d, err->e_status, err->e_code, msg, d->d_head);
	/* The engine's, and it forgets them once the answer is out. */
	d->d_head = NULL;
	d->d_req = NULL;
	h1s_no_keep(d->d_h1s);
	tdc_answer_error(d->d_h1s, err, msg, 0);
	free(msg);
}

/* A new exchange (or, with TX_F_WS, channel) for the request on d. */
struct tunnel_xchg *
tunnel_xchg_new(struct tunnel_dconn *d, int flags)
{
	struct tunnel *t = d->d_tunnel;
	const struct http1_msg *m = d->d_req;
	struct tunnel_xchg *x;

	x = xcalloc(1, sizeof *x);
	x->x_tunnel = t;
	x->x_base = t->t_gw->g_base;
	x->x_dconn = d;
	x->x_flags = flags;
	x->x_state = TX_S_BODY;
	x->x_start_us = clock_mono_usec();
	if (tunproto_uuid_random(x->x_id) != 0) {
		log_error("tunnel: no random bytes for an exchange id");
		abort();
	}
	x->x_method = xstrndup(m->m_method, m->m_method_len);
	x->x_timer = evtimer_new(t->t_gw->g_base, tx_timer_cb, x);
	x->x_body = evbuffer_new();
	TAILQ_INSERT_TAIL(&t->t_xchgs, x, x_entry);
	/* A random UUID: a clash would be a broken random source. */
	if (idmap_put(&t->t_xchg_ids, x->x_id, x) != 0) {
		log_error("tunnel: exchange id %s drawn twice", x->x_id);
		abort();
	}
	d->d_x = x;
	return (x);
}

/* Find the live exchange or channel named id. */
struct tunnel_xchg *
tunnel_xchg_find(const struct tunnel *t, const char *id)
{
	return (idmap_find(&t->t_xchg_ids, id));
}

/* The negotiated limits while a client is attached, else ours. */
const struct tunproto_limits *
tunnel_xchg_limits(const struct tunnel *t)
{
	const struct tunnel_link *l = tunnel_active(t);

	return (l != NULL ? &l->l_neg : &t->t_local);
}

/* No client came within client_wait: 503 (§10.4, issue #4). */
static void
tx_not_connected(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;

	if (t->t_flags & TUNNEL_F_STANDALONE)
		tunnel_xchg_fail(x, gw_err_tunnel_not_connected, NULL,
		    "No tunnel client is connected.");
	else
		tunnel_xchg_fail(x, gw_err_tunnel_not_connected, NULL,
		    "No tunnel client is connected for sandbox '%s'.",
		    t->t_name);
}

/*
 * The request waits (TX_S_HOLD) for a client, or for a slot in the
 * client's max_inflight window, at most client_wait from when it began to
 * wait and among at most max_queued others; else it is refused now.
 */
static void
tx_hold(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;
	const struct tunnel_link *l = tunnel_active(t);

	if (t->t_nheld >= t->t_max_queued) {
		tunnel_xchg_fail(x, gw_err_tunnel_busy, NULL,
		    "The tunnel's queue is full: %zu %s for %s (max_queued).",
		    t->t_nheld,
		    t->t_nheld == 1 ? "request already waits"
				    : "requests already wait",
		    l != NULL ? "a free slot in the client's max_inflight"
			      : "a tunnel client");
		return;
	}
	if (t->t_client_wait == 0) {
		if (l == NULL)
			tx_not_connected(x);
		else
			tunnel_xchg_fail(x, gw_err_tunnel_busy, NULL,
			    "Tunnel negotiated max_inflight limit reached: "
			    "%llu requests are in flight.",
			    (unsigned long long)l->l_neg.l_max_inflight);
		return;
	}
	x->x_state = TX_S_HOLD;
	t->t_nheld++;
	if (!evtimer_pending(x->x_timer, NULL))
		tdc_timer_set(x->x_timer, t->t_client_wait);
}

/* A held exchange is about to be sent: it no longer waits. */
static void
tx_unhold(struct tunnel_xchg *x)
{
	if (x->x_state != TX_S_HOLD)
		return;
	x->x_tunnel->t_nheld--;
	x->x_state = TX_S_BODY;
}

/* client_wait ran out for a held exchange: 503 without a client, else 429. */
static void
tx_hold_expired(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;
	const struct tunnel_link *l = tunnel_active(t);

	if (l == NULL) {
		tx_not_connected(x);
		return;
	}
	tunnel_xchg_fail(x, gw_err_tunnel_busy, NULL,
	    "Tunnel negotiated max_inflight limit reached: no slot of %llu "
	    "freed within client_wait (%llums).",
	    (unsigned long long)l->l_neg.l_max_inflight,
	    (unsigned long long)t->t_client_wait);
}

/* A slot freed (tx_finish): send waiting exchanges, oldest first. */
void
tunnel_queue_cb(evutil_socket_t fd, short events, void *arg)
{
	struct tunnel *t = arg;
	const struct tunnel_link *l;
	struct tunnel_xchg **v;
	size_t i, n;

	(void)fd;
	(void)events;
	if (t->t_state == TUNNEL_S_DEAD)
		return;
	/* A snapshot: a dispatch may end other exchanges. */
	v = tunnel_xchg_snapshot(t, &n);
	for (i = 0; i < n; i++) {
		if ((l = tunnel_active(t)) == NULL ||
		    t->t_ninflight >= l->l_neg.l_max_inflight)
			break;
		if (v[i]->x_state == TX_S_HOLD && !(v[i]->x_flags & TX_F_WS))
			tunnel_xchg_dispatch(v[i]);
	}
	free(v);
}

/* The exchange timer: client_wait, http_timeout, or a paused stream. */
static void
tx_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	struct tunnel_xchg *x = arg;
	struct tunnel *t = x->x_tunnel;

	(void)fd;
	(void)events;
	switch (x->x_state) {
	case TX_S_HOLD:
		tx_hold_expired(x);
		break;
	case TX_S_BODY:
		/* A small body still arriving: stream it from here. */
		if (x->x_flags & TX_F_UP_PROBE)
			tx_stream(x);
		break;
	case TX_S_SENT:
		tunnel_xchg_fail(x, gw_err_tunnel_timeout,
		    "downstream request closed",
		    "No response metadata from the tunnel client within "
		    "%llums: Tunnel timeout",
		    (unsigned long long)t->t_http_timeout);
		break;
	case TX_S_STREAM:
		tunnel_xchg_fail(x, gw_err_tunnel_timeout, NULL,
		    "The tunnel client did not resume the response within "
		    "%llums.",
		    (unsigned long long)t->t_http_timeout);
		break;
	case TX_S_WS_WAIT:
		tunnel_xchg_fail(x, gw_err_tunnel_timeout, NULL,
		    "The tunnel client did not open the WebSocket within "
		    "10s.");
		break;
	default:
		break;
	}
}

/*
 * The request is ready to go (head parsed; for the fast path, body read):
 * send it when a client is attached and no request waits before it, else
 * hold it.
 */
void
tunnel_xchg_ready(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;

	if (tunnel_active(t) != NULL &&
	    (t->t_nheld == 0 || (x->x_flags & TX_F_WS))) {
		tunnel_xchg_dispatch(x);
		return;
	}
	if (tunnel_active(t) != NULL)
		event_active(t->t_kick, EV_TIMEOUT, 1);
	tx_hold(x);
}

/*
 * Send a request to the client (§10.2): http_req when its body is known
 * and fits the fast path, else http_req_begin with the body to follow.
 * The frame is kept for replay until response metadata arrives (§8.4).
 */
void
tunnel_xchg_dispatch(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;
	struct tunnel_dconn *d = x->x_dconn;
	const struct tunnel_link *l = tunnel_active(t);
	struct tunproto_msg m;
	char clen[24];
	int fast;

	tx_unhold(x);
	if (x->x_flags & TX_F_WS) {
		tunnel_ws_dispatch(x);
		return;
	}
	if (d == NULL) {
		tunnel_xchg_end(x, "caller gone");
		return;
	}
	if (l == NULL || t->t_ninflight >= l->l_neg.l_max_inflight) {
		/* Queued behind the client's window (§6.4). */
		tx_hold(x);
		return;
	}
	if ((x->x_flags & TX_F_UP_LENGTH) &&
	    x->x_up_len > l->l_neg.l_max_body_size) {
		h1s_no_keep(d->d_h1s);
		tunnel_xchg_fail(x, gw_err_body_too_large, NULL,
		    "The request body of %llu bytes exceeds the tunnel's "
		    "limit of %llu bytes.",
		    (unsigned long long)x->x_up_len,
		    (unsigned long long)l->l_neg.l_max_body_size);
		return;
	}
	fast = !(x->x_flags & TX_F_STREAM_REQ) &&
	    x->x_up_read <= l->l_neg.l_fast_path_body;
	if (!fast)
		x->x_flags |= TX_F_STREAM_REQ;

	memset(&m, 0, sizeof m);
	m.m_type = fast ? TUNPROTO_T_HTTP_REQ : TUNPROTO_T_HTTP_REQ_BEGIN;
	m.m_id = x->x_id;
	m.m_method = x->x_method;
	m.m_path = x->x_target;
	tx_req_headers(d->d_req, &m);
	if (fast) {
		if (x->x_up_read > 0)
			tunproto_msg_set_body(&m,
			    evbuffer_pullup(x->x_body, -1),
			    (size_t)x->x_up_read);
		/* Its length, also for a chunked body (Python V2 does so). */
		if (d->d_req->m_body == HTTP1_BODY_LENGTH ||
		    d->d_req->m_body == HTTP1_BODY_CHUNKED) {
			snprintf(clen, sizeof clen, "%llu",
			    (unsigned long long)x->x_up_read);
			tunproto_msg_add_header(&m, "Content-Length", clen);
		}
	} else if (x->x_flags & TX_F_UP_LENGTH) {
		m.m_flags |= TUNPROTO_MSG_F_CONTENT_LENGTH;
		m.m_content_length = x->x_up_len;
	}
	free(x->x_frame);
	x->x_frame = tunproto_msg_encode(&m, &x->x_frame_len);
	m.m_id = m.m_method = m.m_path = NULL;
	tunproto_msg_free(&m);
	if (x->x_frame == NULL) {
		tunnel_xchg_fail(x, gw_err_bad_target, NULL,
		    "The request cannot be carried by the tunnel (a header "
		    "or the path is too large).");
		return;
	}
	if (fast)
		evbuffer_drain(x->x_body, evbuffer_get_length(x->x_body));
	x->x_flags |= TX_F_COUNTED;
	t->t_ninflight++;
	x->x_state = TX_S_SENT;
	x->x_up_sent = x->x_up_acked;
	x->x_up_credits = 0;
	evtimer_del(x->x_timer);
	tdc_timer_set(x->x_timer, t->t_http_timeout);
	tunnel_send_frame(t, x->x_frame, x->x_frame_len);
}

/*
 * May x, sent to a client that went away without resuming, be sent again
 * to the next client session?  Only when nothing of the answer arrived,
 * the whole request is in the kept frame (fast path), and the method is
 * idempotent (RFC 9110 §9.2.2), so running it twice at the target is safe.
 */
int
tunnel_xchg_retryable(const struct tunnel_xchg *x)
{
	static const char *const idempotent[] = { "GET", "HEAD", "OPTIONS",
		"TRACE", "PUT", "DELETE" };
	size_t i;

	if (x->x_state != TX_S_SENT || x->x_frame == NULL ||
	    (x->x_flags & (TX_F_WS | TX_F_STREAM_REQ)))
		return (0);
	for (i = 0; i < sizeof idempotent / sizeof idempotent[0]; i++) {
		if (strcmp(x->x_method, idempotent[i]) == 0)
			return (1);
	}
	return (0);
}

/* Bytes from the caller for the exchange in progress. */
static void
tx_input(struct tunnel_xchg *x)
{
	if (tunnel_xchg_read_body(x) < 0)
		return;
	if (x->x_state == TX_S_BODY && (x->x_flags & TX_F_UP_DONE)) {
		if (x->x_flags & TX_F_UP_PROBE) {
			x->x_flags &= ~TX_F_UP_PROBE;
			evtimer_del(x->x_timer);
		}
		tunnel_xchg_ready(x);
	} else if (x->x_state == TX_S_BODY && (x->x_flags & TX_F_UP_PROBE) &&
	    x->x_up_read > x->x_tunnel->t_local.l_fast_path_body)
		tx_stream(x);
	else if (x->x_state == TX_S_SENT && (x->x_flags & TX_F_STREAM_REQ))
		tunnel_xchg_pump(x);
}

/*
 * Start an HTTP exchange for the parsed head on d: 413 for a body over
 * the limit; a fast-path body is read first, a streamed one follows the
 * client's credits.  The engine sends a 100 Continue the caller asked for
 * at the first read of the body, when the gateway means to take it
 * (RFC 9110 §10.1.1): at once for the fast path, once a client opened
 * its window for a stream, never for a refusal.
 */
static void
tdc_start(struct tunnel_dconn *d)
{
	struct tunnel *t = d->d_tunnel;
	const struct http1_msg *m = d->d_req;
	struct tunnel_xchg *x;
	const char *tg = m->m_target, *slash;
	size_t tlen = m->m_target_len;

	x = tunnel_xchg_new(d, 0);
	if (tlen > 7 && strncasecmp(tg, "http://", 7) == 0) {
		/* absolute-form: keep the path. */
		slash = memchr(tg + 7, '/', tlen - 7);
		x->x_target = slash != NULL
		    ? xstrndup(slash, (size_t)(tg + tlen - slash))
		    : xstrdup("/");
	} else if (tlen > 0 && *tg == '/')
		x->x_target = xstrndup(tg, tlen);
	else {
		h1s_no_keep(d->d_h1s);
		tunnel_xchg_fail(x, gw_err_bad_target, NULL,
		    "The request target must be a path such as /index.html.");
		return;
	}
	switch (m->m_body) {
	case HTTP1_BODY_LENGTH:
		x->x_flags |= TX_F_UP_LENGTH;
		x->x_up_len = m->m_content_length;
		if (x->x_up_len == 0)
			x->x_flags |= TX_F_UP_DONE;
		break;
	case HTTP1_BODY_CHUNKED:
		break;
	default:
		x->x_flags |= TX_F_UP_DONE;
		break;
	}
	if ((x->x_flags & TX_F_UP_LENGTH) &&
	    x->x_up_len > tunnel_xchg_limits(t)->l_max_body_size) {
		h1s_no_keep(d->d_h1s);
		tunnel_xchg_fail(x, gw_err_body_too_large, NULL,
		    "The request body of %llu bytes exceeds the tunnel's "
		    "limit of %llu bytes (request body exceeds limit).",
		    (unsigned long long)x->x_up_len,
		    (unsigned long long)tunnel_xchg_limits(t)->l_max_body_size);
		return;
	}
	if ((x->x_flags & TX_F_UP_DONE) ||
	    ((x->x_flags & TX_F_UP_LENGTH) &&
		x->x_up_len <= t->t_local.l_fast_path_body)) {
		x->x_state = TX_S_BODY;
		tx_input(x);
		return;
	}
	if (!(x->x_flags & TX_F_UP_LENGTH)) {
		/* Chunked: read up to the fast-path limit + 1 first. */
		x->x_flags |= TX_F_UP_PROBE;
		x->x_state = TX_S_BODY;
		tdc_timer_set(x->x_timer, TX_PROBE_MS);
		tx_input(x);
		return;
	}
	tx_stream(x);
}

/*
 * Send the request body as a stream (http_req_begin, data, http_req_end),
 * with whatever a probe has read of it already in x_body.
 */
static void
tx_stream(struct tunnel_xchg *x)
{
	struct tunnel_dconn *d = x->x_dconn;

	x->x_flags &= ~TX_F_UP_PROBE;
	x->x_flags |= TX_F_STREAM_REQ;
	evtimer_del(x->x_timer);
	if (d != NULL) {
		h1s_read_high(d->d_h1s, TDC_BODY_READ_HIGH);
		d->d_flags |= TDC_F_READ_HIGH;
	}
	tunnel_xchg_ready(x);
}

/*
 * The caller's connection is gone, or the exchange on it ended without
 * our answer (the caller closed, the write timeout): the client is told
 * the caller went away (§10.4), unless it has the whole response and
 * only its end is to come.
 */
static void
tdc_lost(struct tunnel_dconn *d, const char *reason)
{
	struct tunnel_xchg *x = d->d_x;

	if (x == NULL)
		return;
	d->d_x = NULL;
	x->x_dconn = NULL;
	if (x->x_flags & TX_F_WS)
		tunnel_ws_lost(x, reason);
	else if (x->x_state == TX_S_STREAM &&
	    ((x->x_flags & TX_F_RESP_NOBODY) ||
		((x->x_flags & TX_F_RESP_LENGTH) &&
		    x->x_resp_received == x->x_resp_len)))
		; /* It has the whole body: http_resp_end ends it. */
	else if (x->x_state == TX_S_STREAM)
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "downstream response closed",
		    "The caller's connection ended: %s.", reason);
	else
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "downstream request closed",
		    "The caller's connection ended: %s.", reason);
}

/*
 * Close a Port B connection, logging why: the engine's one close path.
 * An exchange in progress ends (tdc_lost).  Freed from the loop.
 */
void
tunnel_dconn_close(struct tunnel_dconn *d, const char *reason)
{
	h1s_close(d->d_h1s, reason);
}

/*
 * The tunnel is going: connections between requests close now, the
 * others once their answer is written (and a request that still comes
 * is refused, tdc_head_cb).
 */
void
tunnel_dconns_retire(struct tunnel *t, const char *reason)
{
	struct tunnel_dconn *d, *next;
	enum h1s_state st;

	for (d = TAILQ_FIRST(&t->t_dconns); d != NULL; d = next) {
		next = TAILQ_NEXT(d, d_entry);
		st = h1s_state(d->d_h1s);
		if (d->d_x == NULL && (st == H1S_S_IDLE || st == H1S_S_HEAD))
			tunnel_dconn_close(d, reason);
		else
			h1s_no_keep(d->d_h1s);
	}
}

/* A request head: an exchange, an application WebSocket, or a refusal. */
static void
tdc_head_cb(
    struct h1s *h, void *arg, const struct head *req, const struct http1_msg *m)
{
	struct tunnel_dconn *d = arg;
	struct tunnel *t = d->d_tunnel;
	const struct hfield *f;

	(void)h;
	d->d_head = req;
	d->d_req = m;
	if (t->t_state == TUNNEL_S_DEAD) {
		tunnel_dconn_refuse(d, gw_err_tunnel_gone,
		    "The tunnel of sandbox '%s' was removed.", t->t_name);
		return;
	}
	if ((m->m_flags & HTTP1_F_UPGRADE) &&
	    (f = http1_msg_find(m, "upgrade")) != NULL &&
	    http1_list_has(f->value, f->value_len, "websocket")) {
		tunnel_ws_start(d);
		return;
	}
	tdc_start(d);
}

/* Request body bytes from the caller. */
static void
tdc_body_cb(struct h1s *h, void *arg)
{
	struct tunnel_dconn *d = arg;

	(void)h;
	if (d->d_x != NULL && !(d->d_x->x_flags & TX_F_WS))
		tx_input(d->d_x);
}

/* The caller's output drained: credits for what it has been sent. */
static void
tdc_drain_cb(struct h1s *h, void *arg)
{
	struct tunnel_dconn *d = arg;

	(void)h;
	if (d->d_x != NULL && d->d_x->x_state == TX_S_STREAM)
		tunnel_xchg_credit(d->d_x);
}

/* The exchange ended without our answer: the caller went away. */
static void
tdc_error_cb(struct h1s *h, void *arg, const char *why)
{
	(void)h;
	tdc_lost(arg, why);
}

/* The engine refused a request itself (a bad head, 408): log, count. */
static void
tdc_log_cb(struct h1s *h, void *arg, const struct h1s_refusal *r)
{
	(void)h;
	tdc_refused(arg, r->hr_status, r->hr_code, r->hr_message, r->hr_head);
}

/*
 * The connection is closing: its exchange ends, and it leaves the tunnel
 * (a connection handed to a WebSocket channel stays counted in it).
 */
static void
tdc_close_cb(struct h1s *h, void *arg, const char *reason)
{
	struct tunnel_dconn *d = arg;
	struct tunnel *t = d->d_tunnel;

	(void)h;
	log_debug("tunnel %s:%d: conn %llu %s: closed: %s", t->t_name,
	    t->t_port, (unsigned long long)d->d_id, d->d_peer, reason);
	tdc_lost(d, reason);
	if (!(d->d_flags & TDC_F_LISTED))
		return;
	d->d_flags &= ~TDC_F_LISTED;
	TAILQ_REMOVE(&t->t_dconns, d, d_entry);
	if (!(d->d_flags & TDC_F_RELEASED))
		t->t_ndconns--;
	tunnel_released(t);
}

static const struct h1s_hooks tdc_hooks = {
	.on_head = tdc_head_cb,
	.on_body = tdc_body_cb,
	.on_drain = tdc_drain_cb,
	.on_error = tdc_error_cb,
	.on_log = tdc_log_cb,
	.on_close = tdc_close_cb,
	.on_free = free,
};

/*
 * Hand the caller's connection, its upgrade answered with the 101 in head
 * rh, to the application WebSocket of channel x: the socket is x's from
 * now on, and stays counted in t_ndconns until x ends.  Returns the
 * stream, callbacks cleared, or NULL when the connection is gone.
 */
struct stream *
tunnel_dconn_release(struct tunnel_dconn *d, const struct head *rh)
{
	struct tunnel_xchg *x = d->d_x;
	struct h1s *h = d->d_h1s;

	if (sink_head(h1s_sink(h), rh) != 0)
		return (NULL);
	tdc_xchg_over(d);
	x->x_flags |= TX_F_CONN;
	d->d_flags |= TDC_F_RELEASED;
	return (h1s_release(h));
}

/* A new connection on Port B. */
void
tunnel_dconn_accept(struct tunnel *t, int fd, struct sockaddr *sa)
{
	struct tunnel_dconn *d;
	struct h1x *hx;
	int one = 1;

	if (t->t_ndconns >= TDC_MAX + TDC_MAX_OVER) {
		/* Past even the refusals' room: close at once. */
		log_warn("tunnel %s:%d: %zu connections open; closing a new "
			 "one",
		    t->t_name, t->t_port, t->t_ndconns);
		close(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	d = xcalloc(1, sizeof *d);
	d->d_tunnel = t;
	d->d_id = ++t->t_ids;
	addr_format(sa, d->d_peer, sizeof d->d_peer);
	hx = h1x_stream_new(
	    stream_new(t->t_gw->g_base, fd, NULL, STREAM_O_CLOSE),
	    TDC_READ_HIGH, TDC_OUT_LOW);
	TAILQ_INSERT_TAIL(&t->t_dconns, d, d_entry);
	d->d_flags |= TDC_F_LISTED;
	t->t_ndconns++;
	d->d_h1s = h1s_new(t->t_gw->g_base, hx, &tdc_h1conf, &tdc_hooks, d,
	    d->d_id, d->d_peer);
	h1s_count_sent(d->d_h1s);
	/* A caller that reads nothing of an answer for http_timeout goes. */
	h1s_write_timeout(d->d_h1s, t->t_http_timeout);
	log_debug("tunnel %s:%d: conn %llu %s: accepted", t->t_name, t->t_port,
	    (unsigned long long)d->d_id, d->d_peer);
	if (t->t_ndconns > TDC_MAX)
		tunnel_dconn_refuse(d, gw_err_too_many_connections,
		    "The tunnel has its limit of connections open; try again "
		    "shortly.");
}
