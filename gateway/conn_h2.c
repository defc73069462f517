/*
 * A client connection's HTTP/2 session (h2s.c) and the exchanges of its
 * streams: each stream's head starts an exchange (xchg.c), which routes,
 * checks, proxies and logs it exactly as it does an HTTP/1 request, and
 * answers through the stream's sink.  The connection (conn.c) keeps the
 * socket, TLS, the peer and the one close path.
 */
#include <netinet/in.h>

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "stream.h"

static const struct xchg_ops conn_h2_xops;

/* Fill hc, how HTTP/2 sessions of the loop behave, from the configuration. */
static void
conn_h2conf_fill(struct gw *g, struct h2s_conf *hc)
{
	const struct gw_config *cf = g->g_conf;

	hc->hc_name = "conn";
	hc->hc_limits = &g->g_limits;
	hc->hc_max_streams = (uint32_t)cf->cf_h2_max_streams;
	hc->hc_stream_window = (uint32_t)cf->cf_h2_window;
	hc->hc_max_streams_total = cf->cf_h2_max_requests;
	hc->hc_head_ms = cf->cf_header_timeout;
	hc->hc_idle_ms = cf->cf_keepalive_timeout;
	hc->hc_stream_idle_ms = cf->cf_idle_timeout;
	hc->hc_write_ms = cf->cf_idle_timeout;
	/* RFC 8441: WebSockets over the session (ws_h2.c). */
	hc->hc_flags = H2S_C_CONNECT_PROTOCOL;
}

/* How HTTP/2 sessions of the loop behave: the configuration's limits. */
static const struct h2s_conf *
conn_h2conf(struct gw *g)
{
	if (g->g_h2conf == NULL) {
		g->g_h2conf = xcalloc(1, sizeof *g->g_h2conf);
		conn_h2conf_fill(g, g->g_h2conf);
	}
	return (g->g_h2conf);
}

/* The loop's configuration changed (gw_conf_apply): sessions follow it. */
void
conn_h2_conf_apply(struct gw *g)
{
	if (g->g_h2conf != NULL)
		conn_h2conf_fill(g, g->g_h2conf);
}

/* A stream's request head: its exchange starts, as an HTTP/1 one does. */
static void
conn_h2_on_head(struct h2s *h, void *arg, struct h2s_stream *st,
    const struct head *head)
{
	struct conn *c = arg;
	struct gw_xchg *x;
	enum http1_body kind;

	x = xchg_new(c, &conn_h2_xops, st, h2s_stream_sink(st),
	    h2s_stream_started_us(st));
	x->x_stream = h2s_stream_id(st);
	h2s_stream_set_arg(st, x);
	TAILQ_INSERT_TAIL(&c->c_xchgs, x, x_entry);
	/* An RFC 8441 stream's bytes are the WebSocket's (ws_h2.c). */
	if (h2s_stream_body_done(st) || head->h_protocol != NULL)
		kind = HTTP1_BODY_NONE;
	else if (head->h_flags & HEAD_F_LENGTH)
		kind = HTTP1_BODY_LENGTH;
	else
		kind = HTTP1_BODY_CHUNKED; /* streamed: chunked upstream */
	if (c->c_flags & CONN_F_FULL) {
		/* Past the gateway's limit: each stream hears it, then go. */
		xchg_start_refused(x, head, gw_err_too_many_connections,
		    "The gateway is at its limit of %llu connections; try "
		    "again shortly.",
		    (unsigned long long)c->c_gw->g_conf->cf_max_connections);
		h2s_shutdown(h);
		return;
	}
	if (head->h_protocol != NULL) {
		if (!ws_h2_protocol_ok(head)) {
			xchg_start_refused(x, head, gw_err_unsupported_protocol,
			    "The gateway carries only WebSockets over HTTP/2's "
			    "extended CONNECT (:protocol websocket), not '%s'.",
			    head->h_protocol);
			return;
		}
		x->x_flags |= XCHG_F_H2_WS;
	}
	xchg_start(x, head, NULL, kind,
	    kind == HTTP1_BODY_LENGTH ? head->h_length : 0);
}

/* Request body bytes (or the body's end) wait in the stream. */
static void
conn_h2_on_body(struct h2s_stream *st, void *sarg)
{
	struct gw_xchg *x = sarg;

	(void)st;
	if (x == NULL)
		return;
	if (x->x_flags & XCHG_F_UPGRADED)
		ws_h2_client_data(x);
	else if (x->x_state == XCHG_S_BODY)
		proxy_request_body(x);
}

/* The stream's sink has room again: the upstream reads on. */
static void
conn_h2_on_drain(struct h2s_stream *st, void *sarg)
{
	(void)st;
	if (sarg != NULL)
		proxy_client_drained(sarg);
}

/* The stream ended before its answer did: reset, timed out, gone. */
static void
conn_h2_on_error(struct h2s_stream *st, void *sarg, const char *why)
{
	struct gw_xchg *x = sarg;

	(void)st;
	if (x == NULL)
		return;
	x->x_tr = NULL; /* the stream is not used again */
	ws_h2_lost(x);
	xchg_lost(x, why);
}

/*
 * The session refused something itself (a stream's head too large, a
 * flood): an access line for a stream with a head, a log line for the
 * connection, and the code counted either way.
 */
static void
conn_h2_on_log(struct h2s *h, void *arg, const struct h2s_refusal *r)
{
	struct conn *c = arg;
	const struct head *hd = r->hr_head;
	struct xchg_line l;
	char ip[INET6_ADDRSTRLEN], *method = NULL, *path = NULL;

	(void)h;
	if (r->hr_stream != 0) {
		/* No exchange was made for it: the line is the refusal's. */
		if (hd != NULL && hd->h_method != NULL)
			method = xstrndup(hd->h_method, hd->h_method_len);
		if (hd != NULL && hd->h_target != NULL)
			path = xchg_path_of(hd->h_target, hd->h_target_len);
		memset(&l, 0, sizeof l);
		l.xl_method = method;
		l.xl_path = path;
		l.xl_err_code = r->hr_code;
		l.xl_close = r->hr_status != 0 ? "keep-alive" : "reset";
		l.xl_proto = conn_h2_xops.xo_proto;
		l.xl_status = r->hr_status;
		l.xl_stream = r->hr_stream;
		l.xl_start_us = clock_mono_usec();
		xchg_log_line(c, &l);
		free(method);
		free(path);
	} else
		metrics_code(c->c_gw, r->hr_code);
	log_info("conn %llu %s: HTTP/2 %s%s: %s", (unsigned long long)c->c_id,
	    conn_peer_ip(c, ip, sizeof ip), r->hr_code,
	    r->hr_stream == 0 ? " (connection)" : "", r->hr_message);
}

/* The session closes the connection. */
static void
conn_h2_on_close(struct h2s *h, void *arg, const char *reason)
{
	struct conn *c = arg;

	(void)h;
	c->c_stream = NULL; /* the session's transport frees it */
	conn_closed(c, reason);
	conn_unref(c); /* the open connection's */
}

/* The session is freed: so is the connection. */
static void
conn_h2_on_free(void *arg)
{
	struct conn *c = arg;

	c->c_h2 = NULL;
	conn_unref(c); /* the session's */
}

static const struct h2s_hooks conn_h2_hooks = {
	.on_head = conn_h2_on_head,
	.on_body = conn_h2_on_body,
	.on_drain = conn_h2_on_drain,
	.on_error = conn_h2_on_error,
	.on_log = conn_h2_on_log,
	.on_close = conn_h2_on_close,
	.on_free = conn_h2_on_free,
};

/* Start c's HTTP/2 session over x (conn.c chose it). */
void
conn_h2_start(struct conn *c, struct h1x *x)
{
	struct gw *g = c->c_gw;

	GW_ADD(g->g_metrics.m_h2_conns, 1);
	c->c_h2 = h2s_new(g->g_base, x, conn_h2conf(g), &conn_h2_hooks, c,
	    c->c_id, c->c_peer);
}

/*
 * The exchange's side of a stream.  x_tr is the stream until the
 * exchange is done or the stream is gone (conn_h2_on_error).
 */
static ssize_t
conn_h2_body_read(
    struct gw_xchg *x, struct evbuffer *dst, size_t max, enum http1_err *err)
{
	*err = HTTP1_E_NONE;
	if (x->x_tr == NULL)
		return (-1);
	/* An RFC 8441 stream's bytes wait for the upstream's 101. */
	if ((x->x_flags & (XCHG_F_H2_WS | XCHG_F_UPGRADED)) == XCHG_F_H2_WS)
		return (0);
	return (h2s_stream_body_read(x->x_tr, dst, max));
}

static int
conn_h2_body_done(const struct gw_xchg *x)
{
	return (x->x_tr == NULL || h2s_stream_body_done(x->x_tr));
}

static uint64_t
conn_h2_body_left(const struct gw_xchg *x)
{
	(void)x;
	return (0); /* never spliced: the bytes come in frames */
}

static void
conn_h2_body_skip(struct gw_xchg *x, uint64_t n)
{
	(void)x;
	(void)n;
}

static int
conn_h2_splice_fd(struct gw_xchg *x)
{
	(void)x;
	return (-1);
}

static int
conn_h2_keeps(const struct gw_xchg *x)
{
	(void)x;
	return (1); /* the session goes on whatever one stream does */
}

static void
conn_h2_no_keep(struct gw_xchg *x)
{
	(void)x;
}

/* The session keeps each stream's own idle timer. */
static void
conn_h2_timeouts(struct gw_xchg *x, int reading, int writing)
{
	(void)x;
	(void)reading;
	(void)writing;
}

/* Cut the exchange short: its line, then the stream is reset. */
static void
conn_h2_abort(struct gw_xchg *x, const char *why)
{
	if (x->x_state == XCHG_S_DONE)
		return;
	if (x->x_up != NULL)
		upstream_close(x->x_up, why);
	if (x->x_method != NULL && !(x->x_flags & XCHG_F_LOGGED))
		xchg_log_access(x, why);
	if (x->x_tr != NULL)
		sink_abort(x->x_sink, why);
	xchg_done(x);
}

/* The exchange is done: the stream goes back to the session. */
static void
conn_h2_done(struct gw_xchg *x)
{
	ws_h2_end(x);
	if (x->x_tr != NULL) {
		h2s_stream_set_arg(x->x_tr, NULL);
		h2s_stream_release(x->x_tr);
		x->x_tr = NULL;
	}
	TAILQ_REMOVE(&x->x_conn->c_xchgs, x, x_entry);
}

static const struct xchg_ops conn_h2_xops = {
	.xo_proto = "h2",
	.xo_body_read = conn_h2_body_read,
	.xo_body_done = conn_h2_body_done,
	.xo_body_left = conn_h2_body_left,
	.xo_body_skip = conn_h2_body_skip,
	.xo_splice_fd = conn_h2_splice_fd,
	.xo_body_sent = conn_h2_body_skip,
	.xo_keeps = conn_h2_keeps,
	.xo_no_keep = conn_h2_no_keep,
	.xo_timeouts = conn_h2_timeouts,
	.xo_abort = conn_h2_abort,
	.xo_done = conn_h2_done,
};
