/*
 * Exchanges: one request and its response, from the head to the end,
 * whatever carries them (an HTTP/1 connection's engine, or a stream of an
 * HTTP/2 session).  Routing, credentials, limits, refusals and the access
 * line are here, written once; the transport is reached through the
 * exchange's ops and its sink, the upstream through proxy.c.
 */
#include <netinet/in.h>

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "token.h"

static void xchg_route(struct gw_xchg *);

/* The path of a target (len bytes) without its query, for the log. */
char *
xchg_path_of(const char *target, size_t len)
{
	const char *q = memchr(target, '?', len);

	return (xstrndup(target, q != NULL ? (size_t)(q - target) : len));
}

static const char *
xchg_state_name(enum xchg_state s)
{
	switch (s) {
	case XCHG_S_ROUTE:
		return ("route");
	case XCHG_S_BODY:
		return ("body");
	case XCHG_S_WAIT:
		return ("wait");
	case XCHG_S_DONE:
		return ("done");
	}
	return ("?");
}

/*
 * A new exchange on connection c, carried by ops (with tr, the transport's
 * own object), answering through sk; start_us is when its head began.
 */
struct gw_xchg *
xchg_new(struct conn *c, const struct xchg_ops *ops, void *tr, struct sink *sk,
    uint64_t start_us)
{
	struct gw_xchg *x;

	x = xcalloc(1, sizeof *x);
	x->x_conn = c;
	x->x_ops = ops;
	x->x_tr = tr;
	x->x_sink = sk;
	x->x_start_us = start_us != 0 ? start_us : clock_mono_usec();
	return (x);
}

/* Free x and what it holds; its transport has let go of it. */
void
xchg_free(struct gw_xchg *x)
{
	if (x == NULL)
		return;
	if (x->x_up != NULL)
		upstream_close(x->x_up, "exchange ended");
	free(x->x_target);
	free(x->x_host);
	free(x->x_method);
	free(x->x_path);
	free(x->x_prefix);
	ws_h2_free(x);
	if (x->x_sandbox != NULL) {
		if (x->x_flags & XCHG_F_COUNTED)
			__atomic_sub_fetch(
			    &x->x_sandbox->sb_nconns, 1, __ATOMIC_RELAXED);
		sandbox_unref(x->x_sandbox);
	}
	free(x);
}

/* Free the exchanges that are done, from the loop. */
static void
xchg_reap_cb(evutil_socket_t fd, short events, void *arg)
{
	struct gw *g = arg;
	struct gw_xchg *x;

	(void)fd;
	(void)events;
	while ((x = TAILQ_FIRST(&g->g_xdead)) != NULL) {
		TAILQ_REMOVE(&g->g_xdead, x, x_entry);
		xchg_free(x);
	}
}

/* The loop's list of exchanges to free, and its event. */
void
xchg_reap_start(struct gw *g)
{
	TAILQ_INIT(&g->g_xdead);
	g->g_xreap = event_new(g->g_base, -1, 0, xchg_reap_cb, g);
}

void
xchg_reap_stop(struct gw *g)
{
	if (g->g_xreap == NULL)
		return;
	xchg_reap_cb(-1, 0, g);
	event_free(g->g_xreap);
	g->g_xreap = NULL;
}

/*
 * The exchange is done (answered, refused or cut short): its upstream
 * goes, its transport lets go of it, and it is freed from the loop, so
 * the callbacks that ended it may still read it.
 */
void
xchg_done(struct gw_xchg *x)
{
	struct gw *g = x->x_conn->c_gw;

	if (x->x_state == XCHG_S_DONE)
		return;
	x->x_state = XCHG_S_DONE;
	if (x->x_up != NULL)
		upstream_close(x->x_up, "exchange ended");
	x->x_ops->xo_done(x);
	TAILQ_INSERT_TAIL(&g->g_xdead, x, x_entry);
	event_active(g->g_xreap, EV_TIMEOUT, 0);
}

/*
 * Cut the exchange short (the upstream broke off mid-response, a refusal
 * after the head went): HTTP/1 closes the connection, HTTP/2 resets the
 * stream.
 */
void
xchg_abort(struct gw_xchg *x, const char *why)
{
	x->x_ops->xo_abort(x, why);
}

/*
 * The transport lost the exchange before its end (an HTTP/2 stream reset
 * by the client, its connection gone): its line says why, and it is done.
 */
void
xchg_lost(struct gw_xchg *x, const char *why)
{
	if (x->x_state == XCHG_S_DONE)
		return;
	if (x->x_up != NULL)
		upstream_close(x->x_up, why);
	if (x->x_method != NULL && !(x->x_flags & XCHG_F_LOGGED))
		xchg_log_access(x, why);
	xchg_done(x);
}

/* Print x's state and flags into buf, for debug logs. */
void
xchg_print(const struct gw_xchg *x, char *buf, size_t len)
{
	if (x == NULL) {
		snprintf(buf, len, "none");
		return;
	}
	snprintf(buf, len, "%s%s%s %s stream=%u state=%s flags=%#x status=%d "
	    "up=%s",
	    x->x_method != NULL ? x->x_method : "",
	    x->x_method != NULL ? " " : "",
	    x->x_path != NULL ? x->x_path : "", x->x_ops->xo_proto,
	    (unsigned)x->x_stream, xchg_state_name(x->x_state),
	    (unsigned)x->x_flags, x->x_status,
	    x->x_up != NULL ? upstream_state_name(x->x_up->u_state) : "none");
}

/*
 * The transport parsed a request head: the exchange starts, routed.  m is
 * HTTP/1's parsed message (NULL for HTTP/2); kind and length say how the
 * request body is framed.
 */
void
xchg_start(struct gw_xchg *x, const struct head *head,
    const struct http1_msg *m, enum http1_body kind, uint64_t length)
{
	x->x_req = m;
	x->x_head = *head;
	x->x_req_kind = kind;
	x->x_req_length = length;
	if (head_method_is(head, "HEAD"))
		x->x_flags |= XCHG_F_HEAD_REQ;
	if (x->x_ops->xo_body_done(x))
		x->x_flags |= XCHG_F_REQ_WHOLE;
	xchg_route(x);
}

/*
 * Log one access line on connection c and count it: a finished exchange's
 * (xchg_log_access), or a stream an engine refused before there was one.
 * The query string is never logged.
 */
void
xchg_log_line(struct conn *c, const struct xchg_line *l)
{
	struct gw_metrics *m = &c->c_gw->g_metrics;
	uint64_t now = clock_mono_usec(), us = now - l->xl_start_us;
	char ip[INET6_ADDRSTRLEN];
	struct log_field f[16];

	metrics_request(c->c_gw, l->xl_status, l->xl_err_code, us,
	    l->xl_stream != 0);
	GW_ADD(m->m_bytes_in, l->xl_bytes_in);
	GW_ADD(m->m_bytes_out, l->xl_bytes_out);
	if (!log_enabled(LOG_LVL_INFO))
		return;
	f[0] = log_fint("conn", (int64_t)c->c_id);
	f[1] = log_fstr("client", conn_peer_ip(c, ip, sizeof ip));
	f[2] = log_fstr("request_id", l->xl_request_id);
	f[3] = log_fstr("method", l->xl_method);
	f[4] = log_fstr("path", l->xl_path);
	f[5] = log_fint("status", l->xl_status);
	f[6] = log_fstr("sandbox", l->xl_sandbox);
	f[7] = l->xl_port != 0 ? log_fint("port", l->xl_port)
			       : log_fnull("port");
	f[8] = log_fint("bytes_in", (int64_t)l->xl_bytes_in);
	f[9] = log_fint("bytes_out", (int64_t)l->xl_bytes_out);
	f[10] = log_fms("ms", us);
	f[11] = l->xl_up_start_us != 0
	    ? log_fms("upstream_ms", now - l->xl_up_start_us)
	    : log_fnull("upstream_ms");
	f[12] = log_fstr("error", l->xl_err_code);
	f[13] = log_fstr("close", l->xl_close);
	f[14] = log_fstr("proto", l->xl_proto);
	f[15] = l->xl_stream != 0 ? log_fint("stream", (int64_t)l->xl_stream)
				  : log_fnull("stream");
	log_fields(LOG_LVL_INFO, "access", f, sizeof f / sizeof f[0]);
}

/*
 * Log the access line of a finished request and count it.  close says
 * what happens to the connection next ("keep-alive", or why it closes).
 */
void
xchg_log_access(struct gw_xchg *x, const char *close)
{
	struct xchg_line l = {
		.xl_request_id =
		    x->x_request_id[0] != '\0' ? x->x_request_id : NULL,
		.xl_method = x->x_method,
		.xl_path = x->x_path,
		.xl_sandbox = x->x_sandbox != NULL ? x->x_sandbox->sb_id : NULL,
		.xl_err_code = x->x_err_code,
		.xl_close = close,
		.xl_proto = x->x_ops->xo_proto,
		.xl_status = x->x_status,
		.xl_port = x->x_port,
		.xl_stream = x->x_stream,
		.xl_bytes_in = x->x_req_body.b_total,
		.xl_bytes_out = x->x_resp_body.b_total,
		.xl_start_us = x->x_start_us,
		.xl_up_start_us = x->x_up_start_us,
	};

	x->x_flags |= XCHG_F_LOGGED;
	xchg_log_line(x->x_conn, &l);
}

/*
 * The exchange's answer is about to end: its access line, with what
 * happens to the connection next (the engine keeps it when the request
 * was read in full and both sides allow it).
 */
void
xchg_log_end(struct gw_xchg *x)
{
	int keep = x->x_ops->xo_keeps(x) && x->x_ops->xo_body_done(x);

	x->x_ops->xo_timeouts(x, 0, 0);
	xchg_log_access(x, keep ? "keep-alive" : "close");
}


/* Is the request a browser navigation, which gets HTML errors? */
static int
xchg_wants_html(const struct gw_xchg *x)
{
	if (x == NULL || x->x_head.h_method == NULL)
		return (0);
	return (errpage_wants_html(&x->x_head));
}

/*
 * Answer the current request with a gateway error: e gives status and code,
 * or, when e is NULL, the parser error err (the connection then closes).
 * The request never reaches (or no longer uses) the upstream.
 */
static void __attribute__((format(printf, 4, 0)))
xchg_vrefuse(struct gw_xchg *x, const struct gw_error *e, enum http1_err err,
    const char *fmt, va_list ap)
{
	struct conn *c = x->x_conn;
	struct errpage ep;
	char *msg;
	const char *code;
	char ip[INET6_ADDRSTRLEN];
	int status;

	if (x->x_state == XCHG_S_DONE ||
	    (xchg_is_h1(x) &&
		(c->c_state == CONN_S_DEAD || c->c_state == CONN_S_ERROR ||
		    c->c_h1 == NULL)))
		return;
	memset(&ep, 0, sizeof ep);
	xvasprintf(&msg, fmt, ap);
	status = e != NULL ? e->e_status : http1_err_status(err);
	code = e != NULL ? e->e_code : http1_err_code(err);
	if (x->x_up != NULL) {
		x->x_up->u_flags |= UP_F_NO_REUSE;
		upstream_close(x->x_up, "request refused");
	}
	x->x_err_code = code;
	if (x->x_flags & XCHG_F_RESP_STARTED) {
		log_warn("conn %llu %s: %s: %s", (unsigned long long)c->c_id,
		    conn_peer_ip(c, ip, sizeof ip), code, msg);
		xchg_abort(x, code);
		free(msg);
		return;
	}
	if (e == NULL)
		x->x_ops->xo_no_keep(x);
	x->x_status = status;
	/* Refused heads too: a 400, 408, 429 or 431 leaves its line. */
	xchg_log_end(x);
	ep.ep_request_id = x->x_request_id[0] != '\0' ? x->x_request_id : NULL;
	ep.ep_status = status;
	ep.ep_code = code;
	ep.ep_message = msg;
	ep.ep_sandbox = x->x_sandbox != NULL ? x->x_sandbox->sb_id : NULL;
	ep.ep_port = x->x_port;
	/* The engine keeps the connection only when it may. */
	ep.ep_flags = (xchg_wants_html(x) ? ERRPAGE_F_HTML : 0) |
	    ERRPAGE_F_KEEPALIVE;
	/* A gRPC client reads errors from grpc-status, not a page. */
	if (!xchg_is_h1(x) && x->x_head.h_method != NULL &&
	    proxy_is_grpc(&x->x_head))
		ep.ep_flags |= ERRPAGE_F_GRPC;
	log_debug("conn %llu %s: refused %d %s: %s",
	    (unsigned long long)c->c_id, conn_peer_ip(c, ip, sizeof ip), status,
	    code, msg);
	(void)errpage_send(x->x_sink, &ep);
	free(msg);
	xchg_done(x);
}

void
xchg_refuse(struct gw_xchg *x, const struct gw_error *e, enum http1_err err,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	xchg_vrefuse(x, e, err, fmt, ap);
	va_end(ap);
}

/*
 * Start an exchange only to refuse it (a connection past the gateway's
 * limit): its head is taken for the access line, nothing is routed.
 */
void
xchg_start_refused(struct gw_xchg *x, const struct head *head,
    const struct gw_error *e, const char *fmt, ...)
{
	va_list ap;

	x->x_head = *head;
	if (head->h_method != NULL)
		x->x_method = xstrndup(head->h_method, head->h_method_len);
	if (head->h_target != NULL)
		x->x_path = xchg_path_of(head->h_target, head->h_target_len);
	va_start(ap, fmt);
	xchg_vrefuse(x, e, HTTP1_E_NONE, fmt, ap);
	va_end(ap);
}

/* The response was relayed in full: the engine has its end. */
void
xchg_response_done(struct gw_xchg *x)
{
	struct upstream *up = x->x_up;
	int reusable;

	reusable = x->x_ops->xo_body_done(x) && x->x_resp_body.b_done;
	xchg_log_end(x);
	if (up != NULL)
		upstream_release(up, reusable);
	(void)sink_end(x->x_sink);
	xchg_done(x);
}

/* Copy the path of a target without its query, for the log. */
static char *
xchg_log_path(const char *target)
{
	return (xstrndup(target, strcspn(target, "?")));
}

/* Take the target and host of a request; -1 if the target is refused. */
static int
xchg_target(struct gw_xchg *x)
{
	const struct head *m = &x->x_head;
	const char *t = m->h_target, *slash;
	size_t tlen = m->h_target_len;

	if (tlen > 7 && strncasecmp(t, "http://", 7) == 0) {
		/* absolute-form: the authority replaces Host. */
		slash = memchr(t + 7, '/', tlen - 7);
		if (slash == NULL)
			slash = t + tlen;
		x->x_host = xstrndup(t + 7, (size_t)(slash - t - 7));
		if (slash == t + tlen)
			x->x_target = xstrdup("/");
		else
			x->x_target = xstrndup(
			    slash, (size_t)(t + tlen - slash));
	} else if (*t == '/' ||
	    (tlen == 1 && *t == '*' &&
		strcmp(x->x_method, "OPTIONS") == 0)) {
		x->x_target = xstrndup(t, tlen);
		if (m->h_authority != NULL)
			x->x_host = xstrndup(m->h_authority, m->h_authority_len);
	} else {
		x->x_path = xstrdup("-");
		xchg_fail(x, gw_err_bad_target,
		    "The request target must be "
		    "a path such as /index.html.");
		return (-1);
	}
	x->x_path = xchg_log_path(x->x_target);
	return (0);
}

/* "/{id}/{port}", without printf: it is on every path-form request. */
static char *
xchg_path_prefix(const char *id, int port)
{
	size_t idlen = strlen(id), n;
	char *p;

	p = xmalloc(idlen + 24);
	p[0] = '/';
	memcpy(p + 1, id, idlen);
	p[idlen + 1] = '/';
	n = fmt_u64(p + idlen + 2, (uint64_t)port);
	p[idlen + 2 + n] = '\0';
	return (p);
}

/*
 * A request's address, parsed once for the tunnel routes and the port
 * routes: the host form, and the path form when the host is not a port
 * URL.  Ids and rest are xmalloc'd; whoever takes one sets it NULL.
 */
struct xchg_addr {
	enum route_result ca_host;
	struct route_host ca_rh; /* the host form's readings */
	enum route_result ca_path;
	char *ca_path_id;
	int ca_path_port;
	char *ca_rest;
};

static void
xchg_addr_parse(struct gw_xchg *x, struct xchg_addr *a)
{
	const struct gw_config *cf = x->x_conn->c_gw->g_conf;

	memset(a, 0, sizeof *a);
	a->ca_host = a->ca_path = ROUTE_NONE;
	if (x->x_host != NULL)
		a->ca_host = route_parse_host(x->x_host,
		    strlen(x->x_host), cf->cf_domains,
		    cf->cf_domain_formats, cf->cf_ndomains, &a->ca_rh);
	if (a->ca_host == ROUTE_NONE)
		a->ca_path = route_parse_path(x->x_target, &a->ca_path_id,
		    &a->ca_path_port, &a->ca_rest);
}

static void
xchg_addr_clear(struct xchg_addr *a)
{
	route_host_clear(&a->ca_rh);
	free(a->ca_path_id);
	free(a->ca_rest);
}

/*
 * Choose between the readings of a host-form label ({port}-{id} and
 * {id}-{port}): the one whose sandbox publishes its port; when both do,
 * the host is ambiguous (400); when neither does, the first whose sandbox
 * exists, else the first, so the refusal names what is missing.  Returns
 * the id (xmalloc'd) with c_port set, or NULL after refusing.
 */
static char *
xchg_host_reading(struct gw_xchg *x, struct route_host *rh)
{
	struct gw *g = x->x_conn->c_gw;
	struct gw_directory *d = gw_dir(g);
	struct gw_sandbox *sb;
	size_t i, pick = 0, npub = 0, known = rh->rh_n;
	char *id;

	for (i = rh->rh_n; rh->rh_n > 1 && i-- > 0;) {
		if ((sb = directory_find(d, rh->rh_id[i])) == NULL)
			continue;
		known = i;
		if (route_find_port(g, sb, rh->rh_port[i]) != NULL) {
			npub++;
			pick = i;
		}
	}
	if (npub > 1) {
		xchg_fail(x, gw_err_ambiguous_host,
		    "The host '%s' names port %d of sandbox '%s' and port %d "
		    "of sandbox '%s'; give the domain a host_format, or use "
		    "the path form /{sandbox}/{port}/.",
		    x->x_host, rh->rh_port[0], rh->rh_id[0],
		    rh->rh_port[1], rh->rh_id[1]);
		return (NULL);
	}
	if (npub == 0)
		pick = known < rh->rh_n ? known : 0;
	x->x_port = rh->rh_port[pick];
	id = rh->rh_id[pick];
	rh->rh_id[pick] = NULL;
	return (id);
}

/*
 * Find which sandbox and port the request is for: the host form first,
 * then the path form, whose prefix is stripped.  Returns the id
 * (xmalloc'd) or NULL after refusing the request.
 */
static char *
xchg_find_route(struct gw_xchg *x, struct xchg_addr *a)
{
	struct gw *g = x->x_conn->c_gw;
	const char *dom = g->g_conf->cf_domains[0];
	enum route_result r = a->ca_host;
	char *id, port[16];
	int tls;

	if (r == ROUTE_OK)
		return (xchg_host_reading(x, &a->ca_rh));
	if (r == ROUTE_BAD) {
		xchg_fail(x, gw_err_bad_host,
		    "The host '%s' is not a port "
		    "URL: write it as {port}-{sandbox}.%s or "
		    "{sandbox}-{port}.%s, for example 8000-mysandbox.%s.",
		    x->x_host, dom, dom, dom);
		return (NULL);
	}
	switch (a->ca_path) {
	case ROUTE_OK:
		/* The upstream sees the rest; the prefix travels apart. */
		x->x_port = a->ca_path_port;
		id = a->ca_path_id;
		a->ca_path_id = NULL;
		x->x_prefix = xchg_path_prefix(id, x->x_port);
		/* "/{id}/{port}" or "/{id}/{port}?q": no slash after it. */
		if (x->x_target[strlen(x->x_prefix)] != '/')
			x->x_flags |= XCHG_F_NO_SLASH;
		free(x->x_target);
		x->x_target = a->ca_rest;
		a->ca_rest = NULL;
		return (id);
	case ROUTE_BAD:
		xchg_fail(x, gw_err_bad_path,
		    "The path '%s' is not a port "
		    "URL: write it as /{sandbox}/{port}/..., with a port from "
		    "1 to 65535.",
		    x->x_path);
		return (NULL);
	case ROUTE_RESERVED:
		xchg_fail(x, gw_err_no_route,
		    "The path '%s' is reserved for "
		    "the control plane.",
		    x->x_path);
		return (NULL);
	default:
		/* The listener's own scheme and port, so the example works. */
		tls = (x->x_conn->c_flags & CONN_F_TLS) != 0;
		if (x->x_conn->c_local_port == (tls ? 443 : 80))
			port[0] = '\0';
		else
			snprintf(port, sizeof port, ":%d",
			    x->x_conn->c_local_port);
		xchg_fail(x, gw_err_no_route,
		    "This gateway serves sandbox "
		    "ports at %s://%s.%s%s/ and "
		    "/{sandbox}/{port}/; '%s%s' is not such an address.",
		    tls ? "https" : "http",
		    g->g_conf->cf_domain_formats[0] == ROUTE_HF_ID_PORT
			? "{sandbox}-{port}"
			: "{port}-{sandbox}",
		    dom, port, x->x_host != NULL ? x->x_host : "",
		    x->x_path);
		return (NULL);
	}
}

/*
 * Check credentials for the routed port.  Returns 0 to go on (the target
 * may lose its access_token), or -1 after answering: a refusal, or for a
 * browser that brought a token in the query, a 303 that moves it into a
 * cookie.
 */
static int
xchg_auth(struct gw_xchg *x)
{
	struct gw *g = x->x_conn->c_gw;
	struct auth_req aq;
	struct auth_result ar;
	int r, page;

	memset(&aq, 0, sizeof aq);
	aq.aq_head = &x->x_head;
	aq.aq_target = x->x_target;
	aq.aq_host = x->x_host;
	aq.aq_prefix = x->x_prefix;
	aq.aq_now = (uint64_t)time(NULL);
	aq.aq_flags = (x->x_conn->c_flags & CONN_F_TLS ? AUTH_F_TLS : 0) |
	    (xchg_wants_html(x) ? AUTH_F_NAVIGATION : 0);
	r = auth_check(g->g_conf, x->x_sandbox, x->x_port,
	    x->x_rule, &aq, &ar);
	if (r < 0) {
		xchg_fail(x, ar.ar_err, "%s", ar.ar_message);
		auth_result_free(&ar);
		return (-1);
	}
	if (r > 0) {
		/* A page has a body, which HEAD must not get: a 303 then. */
		page = (ar.ar_flags & AUTH_R_F_PAGE) &&
		    !(x->x_flags & XCHG_F_HEAD_REQ);
		x->x_status = page ? 200 : 303;
		xchg_log_end(x);
		(void)errpage_redirect(x->x_sink, x->x_request_id,
		    ar.ar_location, ar.ar_set_cookie, page, 1);
		auth_result_free(&ar);
		xchg_done(x);
		return (-1);
	}
	if (ar.ar_target != NULL) {
		free(x->x_target);
		x->x_target = ar.ar_target;
		ar.ar_target = NULL;
	}
	auth_result_free(&ar);
	return (0);
}

/*
 * Check the credential on a tunnel route: X-Auth or Authorization: Bearer
 * carrying the sandbox's tunnel token or an access token of scope
 * "tunnel".  With neither configured the route is open.  Returns 0, or -1
 * after refusing.
 */
static int
xchg_tunnel_auth(struct gw_xchg *x, struct gw_sandbox *sb)
{
	const struct gw_config *cf = x->x_conn->c_gw->g_conf;
	const struct hfield *h;
	const char *tok = NULL;
	size_t len = 0;

	if ((h = head_find(&x->x_head, "x-auth")) != NULL) {
		tok = h->value;
		len = h->value_len;
	} else if ((h = head_find(&x->x_head, "authorization")) != NULL &&
	    h->value_len > 7 && strncasecmp(h->value, "bearer ", 7) == 0) {
		tok = h->value + 7;
		len = h->value_len - 7;
	}
	if (sb->sb_tunnel_token == NULL && cf->cf_nauth_secrets == 0)
		return (0);
	if (tok == NULL) {
		xchg_fail(x, gw_err_unauthorized,
		    "The tunnel of sandbox '%s' "
		    "needs a token in X-Auth or Authorization: Bearer.",
		    sb->sb_id);
		return (-1);
	}
	if (cf->cf_require_tls_creds && !(x->x_conn->c_flags & CONN_F_TLS)) {
		xchg_fail(x, gw_err_credentials_need_tls,
		    "Tunnel tokens are "
		    "accepted over TLS only on this gateway.");
		return (-1);
	}
	if (sb->sb_tunnel_token != NULL &&
	    token_secret_equal(
		tok, len, sb->sb_tunnel_token, strlen(sb->sb_tunnel_token)))
		return (0);
	if (cf->cf_nauth_secrets != 0 &&
	    token_verify_any(cf->cf_auth_secrets, cf->cf_nauth_secrets, tok,
		len, sb->sb_id, sb->sb_safe_id, "tunnel",
		(uint64_t)time(NULL)) == TOKEN_OK)
		return (0);
	xchg_fail(x, gw_err_forbidden,
	    "The token does not open the tunnel of "
	    "sandbox '%s'.",
	    sb->sb_id);
	return (-1);
}

/* The port-URL rule a forward-mode tunnel WebSocket is proxied with. */
static const struct gw_port_rule xchg_forward_rule = {
	.pr_protocol = GW_PROTO_HTTP1,
};

/*
 * Serve a tunnel route: /tunnel/{id}[/{ws_port}] or /{id}/{reverse_port}.
 * Returns 0 when the request is not a tunnel route, 1 when it was handled
 * (attached, proxied or refused).
 */
static int
xchg_tunnel_route(struct gw_xchg *x, const struct xchg_addr *a)
{
	struct gw *g = x->x_conn->c_gw;
	struct gw_sandbox *sb = NULL;
	char *id = NULL;
	int ws_port = 0, lp = 0;
	size_t i;

	/* A host-form port URL keeps its whole path, /tunnel/ included. */
	if (a->ca_host != ROUTE_NONE)
		return (0);
	switch (route_parse_tunnel(x->x_target, &id, &ws_port)) {
	case ROUTE_OK:
		break;
	case ROUTE_BAD:
		xchg_fail(x, gw_err_bad_path,
		    "A tunnel path is "
		    "/tunnel/{sandbox}[/{port}].");
		return (1);
	default:
		/* /{id}/{reverse_port}: only when that sandbox has it. */
		if (a->ca_path != ROUTE_OK)
			return (0);
		ws_port = a->ca_path_port;
		sb = directory_find(gw_dir(g), a->ca_path_id);
		for (i = 0; sb != NULL && i < sb->sb_ntunnel_ports; i++) {
			if (sb->sb_tunnel_ports[i] - 1 == ws_port)
				lp = sb->sb_tunnel_ports[i];
		}
		if (lp == 0)
			return (0);
		break; /* sb is the sandbox */
	}
	if (id != NULL && (sb = directory_find(gw_dir(g), id)) == NULL) {
		xchg_fail(x, gw_err_sandbox_not_found,
		    "No sandbox '%s' is "
		    "known to this gateway.",
		    id);
		free(id);
		return (1);
	}
	free(id);
	sandbox_ref(sb);
	x->x_sandbox = sb;
	for (i = 0; lp == 0 && i < sb->sb_ntunnel_ports; i++) {
		if (ws_port == 0 || sb->sb_tunnel_ports[i] - 1 == ws_port)
			lp = sb->sb_tunnel_ports[i];
	}
	if (lp == 0) {
		xchg_fail(x, gw_err_tunnel_not_configured,
		    ws_port == 0 ? "Sandbox '%s' has no reverse tunnel."
				 : "Sandbox '%s' has "
				   "no reverse tunnel on port %d.",
		    sb->sb_id, ws_port);
		return (1);
	}
	x->x_port = lp - 1;
	if (!xchg_is_h1(x)) {
		xchg_fail(x, gw_err_tunnel_needs_http1,
		    "The reverse tunnel of sandbox '%s' is a WebSocket over "
		    "HTTP/1.1; connect to it with HTTP/1.1.",
		    sb->sb_id);
		return (1);
	}
	if (xchg_tunnel_auth(x, sb) != 0)
		return (1);
	if (sb->sb_tunnel_mode == GW_TUNNEL_FORWARD) {
		/* The in-sandbox tunnel server takes the WebSocket on "/". */
		free(x->x_target);
		x->x_target = xstrdup("/");
		x->x_rule = &xchg_forward_rule;
		__atomic_add_fetch(&sb->sb_nconns, 1, __ATOMIC_RELAXED);
		x->x_flags |= XCHG_F_COUNTED;
		proxy_start(x);
		return (1);
	}
	if (g->g_index != 0) {
		/* Terminate-mode tunnels live on the main loop. */
		conn_handoff(x->x_conn, lp);
		return (1);
	}
	tunnel_attach(x->x_conn, sb, lp);
	return (1);
}

/*
 * A path-form GET or HEAD without the slash after the port,
 * "/{id}/{port}" (and a query): send the browser to "/{id}/{port}/" with
 * 308, so relative links resolve under the prefix.
 */
static void
xchg_slash_redirect(struct gw_xchg *x)
{
	char *loc;

	/* c_target is "/" then the query, if any. */
	xasprintf(&loc, "%s/%s", x->x_prefix, x->x_target + 1);
	x->x_status = 308;
	xchg_log_end(x);
	(void)errpage_moved(
	    x->x_sink, x->x_request_id, 308, loc, 1);
	free(loc);
	xchg_done(x);
}

/* Route a parsed request to a sandbox port, or refuse it. */
static void
xchg_route(struct gw_xchg *x)
{
	struct gw *g = x->x_conn->c_gw;
	const struct head *m = &x->x_head;
	struct gw_sandbox *sb;
	struct xchg_addr a;
	uint64_t limit;
	char *id;

	x->x_method = xstrndup(m->h_method, m->h_method_len);
	proxy_request_id(x);
	if (xchg_target(x) != 0)
		return;
	xchg_addr_parse(x, &a);
	if (xchg_tunnel_route(x, &a)) {
		xchg_addr_clear(&a);
		return;
	}
	id = xchg_find_route(x, &a);
	xchg_addr_clear(&a);
	if (id == NULL)
		return;
	if ((sb = directory_find(gw_dir(g), id)) == NULL) {
		xchg_fail(x, gw_err_sandbox_not_found,
		    "No sandbox '%s' is "
		    "known to this gateway.",
		    id);
		free(id);
		return;
	}
	free(id);
	sandbox_ref(sb);
	x->x_sandbox = sb;
	if ((x->x_rule = route_find_port(g, sb, x->x_port)) == NULL) {
		xchg_fail(x, gw_err_port_not_published,
		    "Sandbox '%s' does not publish port %d.", sb->sb_id,
		    x->x_port);
		return;
	}
	/* Browsers follow it; an upgrade or a POST goes on as to "/". */
	if ((x->x_flags & XCHG_F_NO_SLASH) &&
	    !(m->h_flags & HEAD_F_UPGRADE) && m->h_protocol == NULL &&
	    (strcmp(x->x_method, "GET") == 0 ||
		strcmp(x->x_method, "HEAD") == 0)) {
		xchg_slash_redirect(x);
		return;
	}
	if (xchg_auth(x) != 0)
		return;
	/* gRPC needs trailers and streams both ways at once: HTTP/2. */
	if (xchg_is_h1(x) && proxy_is_grpc(m)) {
		xchg_fail(x, gw_err_grpc_needs_http2,
		    "gRPC needs HTTP/2; this request came over HTTP/1.%d. "
		    "Use an HTTP/2 client (prior knowledge on http://, ALPN "
		    "h2 on https://).",
		    m->h_version == 10 ? 0 : 1);
		return;
	}
	limit = sb->sb_max_connections != 0
	    ? sb->sb_max_connections
	    : g->g_conf->cf_max_connections_per_sandbox;
	/* Counted before the check: workers count concurrently. */
	if (__atomic_add_fetch(&sb->sb_nconns, 1, __ATOMIC_RELAXED) > limit &&
	    limit != 0) {
		__atomic_sub_fetch(&sb->sb_nconns, 1, __ATOMIC_RELAXED);
		xchg_fail(x, gw_err_too_many_connections,
		    "Sandbox '%s' is at "
		    "its limit of %llu connections; try again shortly.",
		    sb->sb_id, (unsigned long long)limit);
		return;
	}
	x->x_flags |= XCHG_F_COUNTED;
	if (g->g_conf->cf_max_body_size != 0 &&
	    x->x_req_kind == HTTP1_BODY_LENGTH &&
	    x->x_req_length > g->g_conf->cf_max_body_size) {
		x->x_ops->xo_no_keep(x);
		xchg_fail(x, gw_err_body_too_large,
		    "The request body of %llu "
		    "bytes is larger than the %llu bytes this gateway accepts.",
		    (unsigned long long)x->x_req_length,
		    (unsigned long long)g->g_conf->cf_max_body_size);
		return;
	}
	if (x->x_flags & XCHG_F_H2_WS)
		ws_h2_start(x);
	else
		proxy_start(x);
}

