/*
 * Client connections on the public listeners.  One struct conn per
 * connection with an explicit state; callbacks are swapped per phase; one
 * close path logs the reason and frees from the loop, never from inside a
 * callback of the object being freed.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "stream.h"
#include "tls.h"
#include "token.h"

/* How long a closing connection drains input after its answer. */
#define CONN_LINGER_MS 2000
/* Output low watermark: the relay resumes below this. */
#define CONN_LOW (64 * 1024)

static void conn_read_cb(struct stream *, void *);
static void conn_timer_cb(evutil_socket_t, short, void *);
static void conn_write_cb(struct stream *, void *);
static void conn_event_cb(struct stream *, short, void *);
static void conn_log_access(struct conn *, const char *);
static void conn_route(struct conn *);
static const struct h1s_hooks conn_hooks;

/* Name of a state, for debug logs. */
const char *
conn_state_name(enum conn_state s)
{
	switch (s) {
	case CONN_S_HEAD:
		return ("head");
	case CONN_S_BODY:
		return ("body");
	case CONN_S_WAIT:
		return ("wait");
	case CONN_S_UPGRADED:
		return ("upgraded");
	case CONN_S_ERROR:
		return ("closing");
	case CONN_S_DEAD:
		return ("dead");
	}
	return ("?");
}

/* Arm the connection timer (the relay's idle, the linger) for ms. */
void
conn_timer_set(struct conn *c, uint64_t ms)
{
	struct timeval tv;

	/* Made on first use: a connection the engine keeps needs none. */
	if (c->c_timer == NULL)
		c->c_timer = evtimer_new(c->c_gw->g_base, conn_timer_cb, c);
	clock_msec_to_tv(ms, &tv);
	evtimer_add(c->c_timer, &tv);
}

/* The exchange of c, made when its first use needs it. */
static struct gw_xchg *
conn_xchg(struct conn *c)
{
	uint64_t t;

	if (c->c_x == NULL) {
		c->c_x = xcalloc(1, sizeof *c->c_x);
		t = c->c_h1 != NULL ? h1s_started_us(c->c_h1) : 0;
		c->c_x->x_start_us = t != 0 ? t : clock_mono_usec();
	}
	return (c->c_x);
}

/* Free the exchange of c, if any: what belongs to the current request. */
static void
conn_reset_exchange(struct conn *c)
{
	struct gw_xchg *x = c->c_x;

	if (x == NULL)
		return;
	c->c_x = NULL;
	if (x->x_up != NULL)
		upstream_close(x->x_up, "exchange ended");
	free(x->x_target);
	free(x->x_host);
	free(x->x_method);
	free(x->x_path);
	free(x->x_prefix);
	if (x->x_sandbox != NULL) {
		if (x->x_flags & XCHG_F_COUNTED)
			__atomic_sub_fetch(
			    &x->x_sandbox->sb_nconns, 1, __ATOMIC_RELAXED);
		sandbox_unref(x->x_sandbox);
	}
	free(x);
}

/*
 * The client's address without its port (what c_peer holds before the
 * last ':', without the brackets of an IPv6 one), in buf; returns buf.
 */
const char *
conn_peer_ip(const struct conn *c, char *buf, size_t len)
{
	const char *p = c->c_peer, *end;
	size_t n;

	if (*p == '[') {
		p++;
		end = strchr(p, ']');
	} else
		end = strrchr(p, ':');
	n = end != NULL ? (size_t)(end - p) : strlen(p);
	if (n >= len)
		n = len - 1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return (buf);
}

/* Print c's state, flags and exchange into buf, for debug logs. */
void
conn_print(const struct conn *c, char *buf, size_t len)
{
	const struct gw_xchg *x = c->c_x;
	char eng[160];

	if (c->c_h1 != NULL)
		h1s_print(c->c_h1, eng, sizeof eng);
	else
		snprintf(eng, sizeof eng, "released");
	snprintf(buf, len,
	    "conn %llu %s state=%s flags=%#x relay=%#x [%s] xchg=%s%s%s "
	    "flags=%#x status=%d up=%s",
	    (unsigned long long)c->c_id, c->c_peer, conn_state_name(c->c_state),
	    (unsigned)c->c_flags, (unsigned)c->c_relay, eng,
	    x != NULL ? "" : "none",
	    x != NULL && x->x_method != NULL ? x->x_method : "",
	    x != NULL && x->x_path != NULL ? x->x_path : "",
	    x != NULL ? (unsigned)x->x_flags : 0u, x != NULL ? x->x_status : 0,
	    x != NULL && x->x_up != NULL ? upstream_state_name(x->x_up->u_state)
					 : "none");
}

/*
 * Drop a reference to c: the engine holds one until it is freed, the
 * open connection one until it is closed (tmux's client style), so that
 * neither frees c under the other after a release.
 */
static void
conn_unref(struct conn *c)
{
	if (--c->c_refcnt > 0)
		return;
	conn_reset_exchange(c);
	if (c->c_timer != NULL)
		event_free(c->c_timer);
	free(c);
}

/* A relayed connection closed: from the loop, its socket goes. */
static void
conn_free_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)events;
	stream_free(c->c_stream);
	c->c_stream = NULL;
	conn_unref(c);
}

/*
 * The connection closes, for reason: its access line if a request was cut
 * short, its upstream, its counters.  Run once, from conn_close or from
 * the engine's close (conn_on_close).
 */
static void
conn_closed(struct conn *c, const char *reason)
{
	struct gw *g = c->c_gw;
	struct gw_xchg *x = c->c_x;
	char buf[384];

	if (c->c_flags & CONN_F_CLOSED)
		return;
	c->c_flags |= CONN_F_CLOSED;
	if (log_enabled(LOG_LVL_DEBUG)) {
		conn_print(c, buf, sizeof buf);
		log_debug("%s: closed: %s", buf, reason);
	}
	if ((c->c_flags & (CONN_F_UPGRADED | CONN_F_HANDED)) == CONN_F_UPGRADED)
		GW_ADD(g->g_metrics.m_ws_active, -1);
	/*
	 * A request cut short (a client gone mid-body, an upstream gone
	 * mid-response) or a WebSocket ending gets its line here.
	 */
	if (x != NULL && x->x_method != NULL && !(x->x_flags & XCHG_F_LOGGED) &&
	    !(c->c_flags & CONN_F_HANDED))
		conn_log_access(c, reason);
	c->c_flags &= ~CONN_F_UPGRADED;
	relay_end(c);
	if (x != NULL && x->x_up != NULL)
		upstream_close(x->x_up, "client connection closed");
	c->c_state = CONN_S_DEAD;
	if (c->c_timer != NULL)
		evtimer_del(c->c_timer);
	TAILQ_REMOVE(&g->g_conns, c, c_entry);
	g->g_nconns--;
	if (g->g_shared != NULL && !(c->c_flags & CONN_F_ADOPTED))
		__atomic_sub_fetch(&g->g_shared->s_nconns, 1, __ATOMIC_RELAXED);
}

/*
 * Close a connection, logging why: through the engine while it has the
 * socket (it calls conn_on_close, then conn_on_free from the loop), else
 * here; it is freed from the loop.
 */
void
conn_close(struct conn *c, const char *reason)
{
	struct timeval tv = { 0, 0 };

	if (c->c_state == CONN_S_DEAD)
		return;
	if (c->c_h1 != NULL) {
		h1s_close(c->c_h1, reason);
		return;
	}
	conn_closed(c, reason);
	if (c->c_stream != NULL)
		stream_disable(c->c_stream, EV_READ | EV_WRITE);
	event_base_once(c->c_gw->g_base, -1, EV_TIMEOUT, conn_free_cb, c, &tv);
}

/*
 * Log one access line for a finished request and count it.  close says
 * what happens to the connection next ("keep-alive", or why it closes).
 * The query string is never logged.
 */
static void
conn_log_access(struct conn *c, const char *close)
{
	struct gw_metrics *m = &c->c_gw->g_metrics;
	struct gw_xchg *x = c->c_x;
	uint64_t now = clock_mono_usec(), us = now - x->x_start_us;
	char ip[INET6_ADDRSTRLEN];
	struct log_field f[14];

	x->x_flags |= XCHG_F_LOGGED;
	metrics_request(c->c_gw, x->x_status, x->x_err_code, us);
	GW_ADD(m->m_bytes_in, x->x_req_body.b_total);
	GW_ADD(m->m_bytes_out, x->x_resp_body.b_total);
	if (!log_enabled(LOG_LVL_INFO))
		return;
	f[0] = log_fint("conn", (int64_t)c->c_id);
	f[1] = log_fstr("client", conn_peer_ip(c, ip, sizeof ip));
	f[2] = log_fstr(
	    "request_id", x->x_request_id[0] != '\0' ? x->x_request_id : NULL);
	f[3] = log_fstr("method", x->x_method);
	f[4] = log_fstr("path", x->x_path);
	f[5] = log_fint("status", x->x_status);
	f[6] = log_fstr(
	    "sandbox", x->x_sandbox != NULL ? x->x_sandbox->sb_id : NULL);
	f[7] = x->x_port != 0 ? log_fint("port", x->x_port) : log_fnull("port");
	f[8] = log_fint("bytes_in", (int64_t)x->x_req_body.b_total);
	f[9] = log_fint("bytes_out", (int64_t)x->x_resp_body.b_total);
	f[10] = log_fms("ms", us);
	f[11] = x->x_up_start_us != 0
	    ? log_fms("upstream_ms", now - x->x_up_start_us)
	    : log_fnull("upstream_ms");
	f[12] = log_fstr("error", x->x_err_code);
	f[13] = log_fstr("close", close);
	log_fields(LOG_LVL_INFO, "access", f, sizeof f / sizeof f[0]);
}

/*
 * The exchange's answer is about to end: its access line, with what
 * happens to the connection next (the engine keeps it when the request
 * was read in full and both sides allow it).
 */
static void
conn_xchg_log(struct conn *c)
{
	int keep = c->c_h1 != NULL && h1s_keeps(c->c_h1) &&
	    h1s_body_done(c->c_h1);

	if (c->c_stream != NULL && c->c_h1 != NULL)
		stream_set_timeouts(c->c_stream, NULL, NULL);
	conn_log_access(c, keep ? "keep-alive" : "close");
}

/* The exchange ended: let it go; the engine has the connection. */
static void
conn_xchg_done(struct conn *c)
{
	conn_reset_exchange(c);
	if (c->c_state != CONN_S_DEAD)
		c->c_state = CONN_S_HEAD;
}

/*
 * Finish with a relayed connection (after a 101): once the output has
 * drained, shut down our side and drain the client's input for a moment,
 * so the last bytes are not destroyed by a reset.  While the engine has
 * the socket, it finishes the connection itself: closing it ends it.
 */
void
conn_finish(struct conn *c)
{
	if (c->c_x != NULL && c->c_x->x_up != NULL)
		upstream_close(c->c_x->x_up, "client connection finishing");
	if (c->c_h1 != NULL) {
		sink_abort(h1s_sink(c->c_h1), "finishing");
		return;
	}
	c->c_state = CONN_S_ERROR;
	stream_setwatermark(c->c_stream, EV_WRITE, 0, 0);
	stream_enable(c->c_stream, EV_WRITE);
	stream_disable(c->c_stream, EV_READ);
	if (evbuffer_get_length(stream_output(c->c_stream)) == 0)
		conn_write_cb(c->c_stream, c);
}

/* Is the request a browser navigation, which gets HTML errors? */
static int
conn_wants_html(const struct conn *c)
{
	if (c->c_x == NULL || c->c_x->x_head.h_method == NULL)
		return (0);
	return (errpage_wants_html(&c->c_x->x_head));
}

/*
 * Answer the current request with a gateway error: e gives status and code,
 * or, when e is NULL, the parser error err (the connection then closes).
 * The request never reaches (or no longer uses) the upstream.
 */
void
conn_refuse(struct conn *c, const struct gw_error *e, enum http1_err err,
    const char *fmt, ...)
{
	struct errpage ep;
	struct gw_xchg *x;
	va_list ap;
	char *msg;
	const char *code;
	char ip[INET6_ADDRSTRLEN];
	int status;

	if (c->c_state == CONN_S_DEAD || c->c_state == CONN_S_ERROR ||
	    c->c_h1 == NULL)
		return;
	x = conn_xchg(c); /* a refusal at accept has its line too */
	memset(&ep, 0, sizeof ep);
	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
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
		conn_close(c, code);
		free(msg);
		return;
	}
	if (e == NULL)
		h1s_no_keep(c->c_h1);
	x->x_status = status;
	/* Refused heads too: a 400, 408, 429 or 431 leaves its line. */
	conn_xchg_log(c);
	ep.ep_request_id = x->x_request_id[0] != '\0' ? x->x_request_id : NULL;
	ep.ep_status = status;
	ep.ep_code = code;
	ep.ep_message = msg;
	ep.ep_sandbox = x->x_sandbox != NULL ? x->x_sandbox->sb_id : NULL;
	ep.ep_port = x->x_port;
	/* The engine keeps the connection only when it may. */
	ep.ep_flags = (conn_wants_html(c) ? ERRPAGE_F_HTML : 0) |
	    ERRPAGE_F_KEEPALIVE;
	log_debug("conn %llu %s: refused %d %s: %s",
	    (unsigned long long)c->c_id, conn_peer_ip(c, ip, sizeof ip), status,
	    code, msg);
	(void)errpage_send(h1s_sink(c->c_h1), &ep);
	free(msg);
	conn_xchg_done(c);
}

/* The response was relayed in full: the engine has its end. */
void
conn_response_done(struct conn *c)
{
	struct gw_xchg *x = c->c_x;
	struct upstream *up = x->x_up;
	int reusable;

	reusable = h1s_body_done(c->c_h1) && x->x_resp_body.b_done;
	conn_xchg_log(c);
	if (up != NULL)
		upstream_release(up, reusable);
	(void)sink_end(h1s_sink(c->c_h1));
	conn_xchg_done(c);
}

/* Copy the path of a target without its query, for the log. */
static char *
conn_log_path(const char *target)
{
	return (xstrndup(target, strcspn(target, "?")));
}

/* Take the target and host of a request; -1 if the target is refused. */
static int
conn_target(struct conn *c)
{
	const struct http1_msg *m = c->c_x->x_req;
	const struct hfield *h;
	const char *t = m->m_target, *slash;
	size_t tlen = m->m_target_len;

	if (tlen > 7 && strncasecmp(t, "http://", 7) == 0) {
		/* absolute-form: the authority replaces Host. */
		slash = memchr(t + 7, '/', tlen - 7);
		if (slash == NULL)
			slash = t + tlen;
		c->c_x->x_host = xstrndup(t + 7, (size_t)(slash - t - 7));
		if (slash == t + tlen)
			c->c_x->x_target = xstrdup("/");
		else
			c->c_x->x_target = xstrndup(
			    slash, (size_t)(t + tlen - slash));
	} else if (*t == '/' ||
	    (tlen == 1 && *t == '*' &&
		strcmp(c->c_x->x_method, "OPTIONS") == 0)) {
		c->c_x->x_target = xstrndup(t, tlen);
		if ((h = http1_msg_find(m, "host")) != NULL)
			c->c_x->x_host = xstrndup(h->value, h->value_len);
	} else {
		c->c_x->x_path = xstrdup("-");
		conn_fail(c, gw_err_bad_target,
		    "The request target must be "
		    "a path such as /index.html.");
		return (-1);
	}
	c->c_x->x_path = conn_log_path(c->c_x->x_target);
	return (0);
}

/* "/{id}/{port}", without printf: it is on every path-form request. */
static char *
conn_path_prefix(const char *id, int port)
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
struct conn_addr {
	enum route_result ca_host;
	struct route_host ca_rh; /* the host form's readings */
	enum route_result ca_path;
	char *ca_path_id;
	int ca_path_port;
	char *ca_rest;
};

static void
conn_addr_parse(struct conn *c, struct conn_addr *a)
{
	const struct gw_config *cf = c->c_gw->g_conf;

	memset(a, 0, sizeof *a);
	a->ca_host = a->ca_path = ROUTE_NONE;
	if (c->c_x->x_host != NULL)
		a->ca_host = route_parse_host(c->c_x->x_host,
		    strlen(c->c_x->x_host), cf->cf_domains,
		    cf->cf_domain_formats, cf->cf_ndomains, &a->ca_rh);
	if (a->ca_host == ROUTE_NONE)
		a->ca_path = route_parse_path(c->c_x->x_target, &a->ca_path_id,
		    &a->ca_path_port, &a->ca_rest);
}

static void
conn_addr_clear(struct conn_addr *a)
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
conn_host_reading(struct conn *c, struct route_host *rh)
{
	struct gw *g = c->c_gw;
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
		conn_fail(c, gw_err_ambiguous_host,
		    "The host '%s' names port %d of sandbox '%s' and port %d "
		    "of sandbox '%s'; give the domain a host_format, or use "
		    "the path form /{sandbox}/{port}/.",
		    c->c_x->x_host, rh->rh_port[0], rh->rh_id[0],
		    rh->rh_port[1], rh->rh_id[1]);
		return (NULL);
	}
	if (npub == 0)
		pick = known < rh->rh_n ? known : 0;
	c->c_x->x_port = rh->rh_port[pick];
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
conn_find_route(struct conn *c, struct conn_addr *a)
{
	struct gw *g = c->c_gw;
	const char *dom = g->g_conf->cf_domains[0];
	enum route_result r = a->ca_host;
	char *id, port[16];
	int tls;

	if (r == ROUTE_OK)
		return (conn_host_reading(c, &a->ca_rh));
	if (r == ROUTE_BAD) {
		conn_fail(c, gw_err_bad_host,
		    "The host '%s' is not a port "
		    "URL: write it as {port}-{sandbox}.%s or "
		    "{sandbox}-{port}.%s, for example 8000-mysandbox.%s.",
		    c->c_x->x_host, dom, dom, dom);
		return (NULL);
	}
	switch (a->ca_path) {
	case ROUTE_OK:
		/* The upstream sees the rest; the prefix travels apart. */
		c->c_x->x_port = a->ca_path_port;
		id = a->ca_path_id;
		a->ca_path_id = NULL;
		c->c_x->x_prefix = conn_path_prefix(id, c->c_x->x_port);
		/* "/{id}/{port}" or "/{id}/{port}?q": no slash after it. */
		if (c->c_x->x_target[strlen(c->c_x->x_prefix)] != '/')
			c->c_x->x_flags |= XCHG_F_NO_SLASH;
		free(c->c_x->x_target);
		c->c_x->x_target = a->ca_rest;
		a->ca_rest = NULL;
		return (id);
	case ROUTE_BAD:
		conn_fail(c, gw_err_bad_path,
		    "The path '%s' is not a port "
		    "URL: write it as /{sandbox}/{port}/..., with a port from "
		    "1 to 65535.",
		    c->c_x->x_path);
		return (NULL);
	case ROUTE_RESERVED:
		conn_fail(c, gw_err_no_route,
		    "The path '%s' is reserved for "
		    "the control plane.",
		    c->c_x->x_path);
		return (NULL);
	default:
		/* The listener's own scheme and port, so the example works. */
		tls = (c->c_flags & CONN_F_TLS) != 0;
		if (c->c_local_port == (tls ? 443 : 80))
			port[0] = '\0';
		else
			snprintf(port, sizeof port, ":%d", c->c_local_port);
		conn_fail(c, gw_err_no_route,
		    "This gateway serves sandbox "
		    "ports at %s://%s.%s%s/ and "
		    "/{sandbox}/{port}/; '%s%s' is not such an address.",
		    tls ? "https" : "http",
		    g->g_conf->cf_domain_formats[0] == ROUTE_HF_ID_PORT
			? "{sandbox}-{port}"
			: "{port}-{sandbox}",
		    dom, port, c->c_x->x_host != NULL ? c->c_x->x_host : "",
		    c->c_x->x_path);
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
conn_auth(struct conn *c)
{
	struct gw *g = c->c_gw;
	struct auth_req aq;
	struct auth_result ar;
	int r, page;

	memset(&aq, 0, sizeof aq);
	aq.aq_head = &c->c_x->x_head;
	aq.aq_target = c->c_x->x_target;
	aq.aq_host = c->c_x->x_host;
	aq.aq_prefix = c->c_x->x_prefix;
	aq.aq_now = (uint64_t)time(NULL);
	aq.aq_flags = (c->c_flags & CONN_F_TLS ? AUTH_F_TLS : 0) |
	    (conn_wants_html(c) ? AUTH_F_NAVIGATION : 0);
	r = auth_check(g->g_conf, c->c_x->x_sandbox, c->c_x->x_port,
	    c->c_x->x_rule, &aq, &ar);
	if (r < 0) {
		conn_fail(c, ar.ar_err, "%s", ar.ar_message);
		auth_result_free(&ar);
		return (-1);
	}
	if (r > 0) {
		/* A page has a body, which HEAD must not get: a 303 then. */
		page = (ar.ar_flags & AUTH_R_F_PAGE) &&
		    !(c->c_x->x_flags & XCHG_F_HEAD_REQ);
		c->c_x->x_status = page ? 200 : 303;
		conn_xchg_log(c);
		(void)errpage_redirect(h1s_sink(c->c_h1), c->c_x->x_request_id,
		    ar.ar_location, ar.ar_set_cookie, page, 1);
		auth_result_free(&ar);
		conn_xchg_done(c);
		return (-1);
	}
	if (ar.ar_target != NULL) {
		free(c->c_x->x_target);
		c->c_x->x_target = ar.ar_target;
		ar.ar_target = NULL;
	}
	auth_result_free(&ar);
	return (0);
}

/*
 * Take the client's socket from the engine, once the answer is queued in
 * its output: for the relay after a 101 (conn_upgrade), the main loop's
 * channel, the tunnel.  The connection is ours from now on.
 */
static struct stream *
conn_release(struct conn *c)
{
	struct stream *s;

	c->c_flags |= CONN_F_RELEASING;
	s = h1s_release(c->c_h1);
	c->c_flags &= ~CONN_F_RELEASING;
	c->c_h1 = NULL;
	/* The head was the engine's. */
	if (c->c_x != NULL) {
		c->c_x->x_req = NULL;
		memset(&c->c_x->x_head, 0, sizeof c->c_x->x_head);
	}
	return (s);
}

/*
 * Hand the client's stream to another owner (the tunnel) and close the
 * connection object around it: bytes the client sent after its request
 * are still in its input.  The caller has written what the client needed
 * (the 101) into its output.
 */
struct stream *
conn_steal_stream(struct conn *c)
{
	struct stream *s;

	c->c_x->x_status = 101;
	conn_log_access(c, "tunnel");
	s = conn_release(c);
	c->c_stream = NULL;
	conn_close(c, "handed to the tunnel");
	return (s);
}

/*
 * Relay the client's socket from now on (a 101 was queued): the engine
 * lets go of it, and it gets our callbacks.
 */
void
conn_upgrade(struct conn *c)
{
	c->c_stream = conn_release(c);
	stream_setcb(
	    c->c_stream, conn_read_cb, conn_write_cb, conn_event_cb, c);
	stream_enable(c->c_stream, EV_READ | EV_WRITE);
}

/*
 * A worker found a terminate-mode tunnel request; tunnels live on the main
 * loop.  Pass the request on to a new connection of the main loop, joined
 * to this one by a socketpair, which reads it as any other and answers
 * 101 and runs the tunnel; this loop relays the bytes and keeps the
 * client (and its TLS).
 */
static void
conn_handoff(struct conn *c, int listen_port)
{
	struct conn *nc;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		sv) == -1) {
		h1s_no_keep(c->c_h1);
		conn_fail(c, gw_err_no_resources,
		    "The gateway cannot open a channel to its main loop "
		    "(%s); try again shortly.",
		    strerror(errno));
		return;
	}
	nc = xcalloc(1, sizeof *nc);
	nc->c_id = c->c_id;
	nc->c_flags = c->c_flags & CONN_F_TLS;
	memcpy(nc->c_peer, c->c_peer, sizeof nc->c_peer);
	nc->c_local_port = c->c_local_port;
	c->c_flags |= CONN_F_HANDED;
	c->c_x->x_up = upstream_pipe(
	    c->c_gw, c->c_x->x_sandbox, sv[0], &proxy_owner, c);
	/* The request as it came; what the client sent after it follows. */
	h1_request_put(stream_output(c->c_x->x_up->u_stream), &c->c_x->x_head);
	c->c_x->x_flags |= XCHG_F_RESP_STARTED;
	conn_upgrade(c);
	gw_handoff(c->c_gw, nc, sv[1], listen_port);
	relay_start(c);
}

/*
 * Check the credential on a tunnel route: X-Auth or Authorization: Bearer
 * carrying the sandbox's tunnel token or an access token of scope
 * "tunnel".  With neither configured the route is open.  Returns 0, or -1
 * after refusing.
 */
static int
conn_tunnel_auth(struct conn *c, struct gw_sandbox *sb)
{
	const struct gw_config *cf = c->c_gw->g_conf;
	const struct hfield *h;
	const char *tok = NULL;
	size_t len = 0;

	if ((h = head_find(&c->c_x->x_head, "x-auth")) != NULL) {
		tok = h->value;
		len = h->value_len;
	} else if ((h = head_find(&c->c_x->x_head, "authorization")) != NULL &&
	    h->value_len > 7 && strncasecmp(h->value, "bearer ", 7) == 0) {
		tok = h->value + 7;
		len = h->value_len - 7;
	}
	if (sb->sb_tunnel_token == NULL && cf->cf_auth_secret == NULL)
		return (0);
	if (tok == NULL) {
		conn_fail(c, gw_err_unauthorized,
		    "The tunnel of sandbox '%s' "
		    "needs a token in X-Auth or Authorization: Bearer.",
		    sb->sb_id);
		return (-1);
	}
	if (cf->cf_require_tls_creds && !(c->c_flags & CONN_F_TLS)) {
		conn_fail(c, gw_err_credentials_need_tls,
		    "Tunnel tokens are "
		    "accepted over TLS only on this gateway.");
		return (-1);
	}
	if (sb->sb_tunnel_token != NULL &&
	    token_secret_equal(
		tok, len, sb->sb_tunnel_token, strlen(sb->sb_tunnel_token)))
		return (0);
	if (cf->cf_auth_secret != NULL &&
	    token_verify(cf->cf_auth_secret, cf->cf_auth_secret_len, tok, len,
		sb->sb_id, sb->sb_safe_id, "tunnel",
		(uint64_t)time(NULL)) == TOKEN_OK)
		return (0);
	conn_fail(c, gw_err_forbidden,
	    "The token does not open the tunnel of "
	    "sandbox '%s'.",
	    sb->sb_id);
	return (-1);
}

/* The port-URL rule a forward-mode tunnel WebSocket is proxied with. */
static const struct gw_port_rule conn_forward_rule = { 0, 0, 0, NULL };

/*
 * Serve a tunnel route: /tunnel/{id}[/{ws_port}] or /{id}/{reverse_port}.
 * Returns 0 when the request is not a tunnel route, 1 when it was handled
 * (attached, proxied or refused).
 */
static int
conn_tunnel_route(struct conn *c, const struct conn_addr *a)
{
	struct gw *g = c->c_gw;
	struct gw_sandbox *sb = NULL;
	char *id = NULL;
	int ws_port = 0, lp = 0;
	size_t i;

	/* A host-form port URL keeps its whole path, /tunnel/ included. */
	if (a->ca_host != ROUTE_NONE)
		return (0);
	switch (route_parse_tunnel(c->c_x->x_target, &id, &ws_port)) {
	case ROUTE_OK:
		break;
	case ROUTE_BAD:
		conn_fail(c, gw_err_bad_path,
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
		conn_fail(c, gw_err_sandbox_not_found,
		    "No sandbox '%s' is "
		    "known to this gateway.",
		    id);
		free(id);
		return (1);
	}
	free(id);
	sandbox_ref(sb);
	c->c_x->x_sandbox = sb;
	for (i = 0; lp == 0 && i < sb->sb_ntunnel_ports; i++) {
		if (ws_port == 0 || sb->sb_tunnel_ports[i] - 1 == ws_port)
			lp = sb->sb_tunnel_ports[i];
	}
	if (lp == 0) {
		conn_fail(c, gw_err_tunnel_not_configured,
		    ws_port == 0 ? "Sandbox '%s' has no reverse tunnel."
				 : "Sandbox '%s' has "
				   "no reverse tunnel on port %d.",
		    sb->sb_id, ws_port);
		return (1);
	}
	c->c_x->x_port = lp - 1;
	if (conn_tunnel_auth(c, sb) != 0)
		return (1);
	if (sb->sb_tunnel_mode == GW_TUNNEL_FORWARD) {
		/* The in-sandbox tunnel server takes the WebSocket on "/". */
		free(c->c_x->x_target);
		c->c_x->x_target = xstrdup("/");
		c->c_x->x_rule = &conn_forward_rule;
		__atomic_add_fetch(&sb->sb_nconns, 1, __ATOMIC_RELAXED);
		c->c_x->x_flags |= XCHG_F_COUNTED;
		proxy_start(c);
		return (1);
	}
	if (g->g_index != 0) {
		/* Terminate-mode tunnels live on the main loop. */
		conn_handoff(c, lp);
		return (1);
	}
	tunnel_attach(c, sb, lp);
	return (1);
}

/*
 * A path-form GET or HEAD without the slash after the port,
 * "/{id}/{port}" (and a query): send the browser to "/{id}/{port}/" with
 * 308, so relative links resolve under the prefix.
 */
static void
conn_slash_redirect(struct conn *c)
{
	char *loc;

	/* c_target is "/" then the query, if any. */
	xasprintf(&loc, "%s/%s", c->c_x->x_prefix, c->c_x->x_target + 1);
	c->c_x->x_status = 308;
	conn_xchg_log(c);
	(void)errpage_moved(
	    h1s_sink(c->c_h1), c->c_x->x_request_id, 308, loc, 1);
	free(loc);
	conn_xchg_done(c);
}

/* Route a parsed request to a sandbox port, or refuse it. */
static void
conn_route(struct conn *c)
{
	struct gw *g = c->c_gw;
	const struct http1_msg *m = c->c_x->x_req;
	struct gw_sandbox *sb;
	struct conn_addr a;
	uint64_t limit;
	char *id;

	c->c_x->x_method = xstrndup(m->m_method, m->m_method_len);
	proxy_request_id(c);
	if (conn_target(c) != 0)
		return;
	conn_addr_parse(c, &a);
	if (conn_tunnel_route(c, &a)) {
		conn_addr_clear(&a);
		return;
	}
	id = conn_find_route(c, &a);
	conn_addr_clear(&a);
	if (id == NULL)
		return;
	if ((sb = directory_find(gw_dir(g), id)) == NULL) {
		conn_fail(c, gw_err_sandbox_not_found,
		    "No sandbox '%s' is "
		    "known to this gateway.",
		    id);
		free(id);
		return;
	}
	free(id);
	sandbox_ref(sb);
	c->c_x->x_sandbox = sb;
	if ((c->c_x->x_rule = route_find_port(g, sb, c->c_x->x_port)) == NULL) {
		conn_fail(c, gw_err_port_not_published,
		    "Sandbox '%s' does not publish port %d.", sb->sb_id,
		    c->c_x->x_port);
		return;
	}
	/* Browsers follow it; an upgrade or a POST goes on as to "/". */
	if ((c->c_x->x_flags & XCHG_F_NO_SLASH) &&
	    !(m->m_flags & HTTP1_F_UPGRADE) &&
	    (strcmp(c->c_x->x_method, "GET") == 0 ||
		strcmp(c->c_x->x_method, "HEAD") == 0)) {
		conn_slash_redirect(c);
		return;
	}
	if (conn_auth(c) != 0)
		return;
	limit = sb->sb_max_connections != 0
	    ? sb->sb_max_connections
	    : g->g_conf->cf_max_connections_per_sandbox;
	/* Counted before the check: workers count concurrently. */
	if (__atomic_add_fetch(&sb->sb_nconns, 1, __ATOMIC_RELAXED) > limit &&
	    limit != 0) {
		__atomic_sub_fetch(&sb->sb_nconns, 1, __ATOMIC_RELAXED);
		conn_fail(c, gw_err_too_many_connections,
		    "Sandbox '%s' is at "
		    "its limit of %llu connections; try again shortly.",
		    sb->sb_id, (unsigned long long)limit);
		return;
	}
	c->c_x->x_flags |= XCHG_F_COUNTED;
	if (g->g_conf->cf_max_body_size != 0 &&
	    m->m_body == HTTP1_BODY_LENGTH &&
	    m->m_content_length > g->g_conf->cf_max_body_size) {
		h1s_no_keep(c->c_h1);
		conn_fail(c, gw_err_body_too_large,
		    "The request body of %llu "
		    "bytes is larger than the %llu bytes this gateway accepts.",
		    (unsigned long long)m->m_content_length,
		    (unsigned long long)g->g_conf->cf_max_body_size);
		return;
	}
	proxy_start(c);
}

/* The engine parsed a request head: its exchange starts, routed. */
static void
conn_on_head(struct h1s *h, void *arg, const struct head *head,
    const struct http1_msg *m)
{
	struct conn *c = arg;
	struct gw_xchg *x;

	(void)h;
	conn_reset_exchange(c); /* none should be left; to be sure */
	x = conn_xchg(c);
	x->x_req = m;
	x->x_head = *head;
	if (head_method_is(head, "HEAD"))
		x->x_flags |= XCHG_F_HEAD_REQ;
	if (h1s_body_done(c->c_h1))
		x->x_flags |= XCHG_F_REQ_WHOLE;
	conn_route(c);
}

/* Request body bytes wait in the engine's input. */
static void
conn_on_body(struct h1s *h, void *arg)
{
	struct conn *c = arg;

	(void)h;
	if (c->c_state == CONN_S_BODY) {
		proxy_request_body(c);
		if (c->c_state == CONN_S_BODY)
			proxy_request_splice_try(c);
	}
}

/* The client's output drained to its low watermark: read on upstream. */
static void
conn_on_drain(struct h1s *h, void *arg)
{
	(void)h;
	proxy_client_drained(arg);
}

/*
 * The exchange ended without its answer's end: the client went away or
 * timed out; its line says why (conn_closed, as the engine closes).
 */
static void
conn_on_error(struct h1s *h, void *arg, const char *why)
{
	struct conn *c = arg;

	(void)h;
	if (c->c_x != NULL && c->c_x->x_up != NULL)
		upstream_close(c->c_x->x_up, why);
}

/* The engine refused a request itself (a bad head, 408): its line. */
static void
conn_on_log(struct h1s *h, void *arg, const struct h1s_refusal *r)
{
	struct conn *c = arg;
	struct gw_xchg *x;
	char ip[INET6_ADDRSTRLEN];

	(void)h;
	x = conn_xchg(c);
	if (x->x_flags & XCHG_F_LOGGED)
		return;
	x->x_status = r->hr_status;
	x->x_err_code = r->hr_code;
	log_debug("conn %llu %s: refused %d %s: %s",
	    (unsigned long long)c->c_id, conn_peer_ip(c, ip, sizeof ip),
	    r->hr_status, r->hr_code, r->hr_message);
	conn_log_access(c, "close");
}

/* The engine closes the connection (unless it lets go of the socket). */
static void
conn_on_close(struct h1s *h, void *arg, const char *reason)
{
	struct conn *c = arg;

	(void)h;
	if (c->c_flags & CONN_F_RELEASING)
		return;
	c->c_stream = NULL; /* the engine's transport frees it */
	conn_closed(c, reason);
	conn_unref(c); /* the open connection's */
}

/* The engine is freed: so is the connection, unless the relay has it. */
static void
conn_on_free(void *arg)
{
	struct conn *c = arg;

	c->c_h1 = NULL;
	conn_unref(c); /* the engine's */
}

static const struct h1s_hooks conn_hooks = {
	.on_head = conn_on_head,
	.on_body = conn_on_body,
	.on_drain = conn_on_drain,
	.on_error = conn_on_error,
	.on_log = conn_on_log,
	.on_close = conn_on_close,
	.on_free = conn_on_free,
};

/* Bytes from the client of a relayed connection. */
static void
conn_read_cb(struct stream *s, void *arg)
{
	struct conn *c = arg;

	switch (c->c_state) {
	case CONN_S_UPGRADED:
		relay_client_read(c);
		break;
	case CONN_S_ERROR:
		/* Lingering: discard what the client still sends. */
		evbuffer_drain(
		    stream_input(s), evbuffer_get_length(stream_input(s)));
		return;
	default:
		return;
	}
	if (c->c_state == CONN_S_UPGRADED)
		relay_splice_try(c);
}

/* The relayed client's output drained below the low watermark. */
static void
conn_write_cb(struct stream *s, void *arg)
{
	struct conn *c = arg;

	if (c->c_state == CONN_S_DEAD)
		return;
	if (c->c_state == CONN_S_UPGRADED) {
		relay_client_drained(c);
		return;
	}
	if (c->c_state != CONN_S_ERROR ||
	    evbuffer_get_length(stream_output(s)) != 0 ||
	    (c->c_flags & CONN_F_LINGER))
		return;
	c->c_flags |= CONN_F_LINGER;
	if ((c->c_flags & (CONN_F_CLIENT_EOF | CONN_F_TLS)) ||
	    shutdown(stream_getfd(s), SHUT_WR) != 0) {
		/* A raw shutdown would cut a TLS stream; just close. */
		conn_close(c, "done");
		return;
	}
	stream_enable(s, EV_READ);
	conn_timer_set(c, CONN_LINGER_MS);
}

/* EOF or error from the client of a relayed connection. */
static void
conn_event_cb(struct stream *s, short what, void *arg)
{
	struct conn *c = arg;
	char why[160], tlserr[128];

	if (c->c_state == CONN_S_DEAD)
		return;
	if (what & STREAM_EV_ERROR) {
		if (stream_tls_error(s) != 0) {
			tls_error_string(
			    stream_tls_error(s), tlserr, sizeof tlserr);
			snprintf(why, sizeof why, "client error: %s", tlserr);
		} else
			snprintf(why, sizeof why, "client error: %s",
			    strerror(stream_errno(s)));
		conn_close(c, why);
		return;
	}
	if (what & STREAM_EV_TIMEOUT) {
		conn_close(c,
		    (what & STREAM_EV_READING)
			? "client sent nothing for the idle timeout"
			: "client read nothing for the idle timeout");
		return;
	}
	if (!(what & STREAM_EV_EOF))
		return;
	c->c_flags |= CONN_F_CLIENT_EOF;
	if (c->c_state == CONN_S_UPGRADED)
		relay_client_eof(c);
	else
		conn_close(c, "done");
}

/* The relay's idle timer or the linger fired. */
static void
conn_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)events;
	switch (c->c_state) {
	case CONN_S_UPGRADED:
		relay_idle(c);
		break;
	case CONN_S_ERROR:
		conn_close(c,
		    (c->c_flags & CONN_F_LINGER) ? "linger timeout"
						 : "timeout writing an error");
		break;
	default:
		break;
	}
}

/* How the engine serves port URLs: the configuration's limits and timers. */
static const struct h1s_conf *
conn_h1conf(struct gw *g)
{
	const struct gw_config *cf = g->g_conf;
	struct h1s_conf *hc;

	if (g->g_h1conf != NULL)
		return (g->g_h1conf);
	hc = g->g_h1conf = xcalloc(1, sizeof *hc);
	hc->hc_name = "conn";
	hc->hc_limits = &g->g_limits;
	hc->hc_head_ms = cf->cf_header_timeout;
	hc->hc_idle_ms = cf->cf_keepalive_timeout;
	hc->hc_write_ms = cf->cf_idle_timeout;
	hc->hc_linger_ms = CONN_LINGER_MS;
	/* The upstream answers Expect: 100-continue; its 100 is relayed. */
	hc->hc_flags = H1S_C_RELAY_CONTINUE;
	return (hc);
}

/*
 * Give connection c its engine over bev and its timer, and list it on
 * loop g.  The input stops at the high watermark: a head, or a body the
 * upstream cannot take yet.
 */
static void
conn_setup(struct gw *g, struct conn *c, struct stream *s)
{
	struct h1x *x;
	size_t high;

	c->c_gw = g;
	c->c_stream = s;
	c->c_refcnt = 2; /* the engine's and the open connection's */
	high = g->g_conf->cf_max_header_size + 4096;
	if (high < 64 * 1024)
		high = 64 * 1024;
	x = h1x_stream_new(s, high, CONN_LOW);
	TAILQ_INSERT_TAIL(&g->g_conns, c, c_entry);
	g->g_nconns++;
	c->c_state = CONN_S_HEAD;
	c->c_h1 = h1s_new(
	    g->g_base, x, conn_h1conf(g), &conn_hooks, c, c->c_id, c->c_peer);
}

/* A new client connection from a listener. */
void
conn_accept(struct gw *g, int fd, struct sockaddr *sa, int salen,
    struct gw_listener *gl)
{
	struct stream *s;
	struct conn *c;
	uint64_t n;
	SSL *ssl = NULL;

	/* fd has TCP_NODELAY already, from its listener (listener.c). */
	(void)salen;
	if (gl->gl_ctx != NULL) {
		/* A client that closes without close_notify is just EOF. */
		ssl = tls_server_ssl_new(gl->gl_ctx);
		s = ssl != NULL ? stream_new(g->g_base, fd, ssl,
				      STREAM_O_CLOSE | STREAM_O_ACCEPT)
				: NULL;
		if (s == NULL) {
			log_warn("cannot start TLS on an accepted connection");
			if (ssl != NULL)
				tls_ssl_free(ssl);
			close(fd);
			return;
		}
	} else
		s = stream_new(g->g_base, fd, NULL, STREAM_O_CLOSE);
	c = xcalloc(1, sizeof *c);
	c->c_id = g->g_shared != NULL
	    ? __atomic_add_fetch(&g->g_shared->s_conn_ids, 1, __ATOMIC_RELAXED)
	    : ++g->g_conn_ids;
	c->c_local_port = gl->gl_port;
	addr_format(sa, c->c_peer, sizeof c->c_peer);
	if (ssl != NULL)
		c->c_flags |= CONN_F_TLS;
	conn_setup(g, c, s);
	GW_ADD(g->g_metrics.m_conns_accepted, 1);
	log_debug("conn %llu %s: accepted on port %d",
	    (unsigned long long)c->c_id, c->c_peer, gl->gl_port);
	n = g->g_shared != NULL
	    ? __atomic_add_fetch(&g->g_shared->s_nconns, 1, __ATOMIC_RELAXED)
	    : g->g_nconns;
	memtrim_count(g, n);
	if (n > g->g_conf->cf_max_connections)
		conn_fail(c, gw_err_too_many_connections,
		    "The gateway is at "
		    "its limit of %llu connections; try again shortly.",
		    (unsigned long long)g->g_conf->cf_max_connections);
}

/*
 * The main loop adopts c, a tunnel request a worker passed on
 * (conn_handoff), on fd, the main loop's end of the socketpair the worker
 * relays through: the request arrives on it as from a client.  With g
 * NULL (stopping) c is only freed.
 */
void
conn_adopt(struct gw *g, struct conn *c, int fd, int listen_port)
{
	(void)listen_port;
	if (g == NULL || fd == -1) {
		if (fd != -1)
			close(fd);
		free(c);
		return;
	}
	c->c_flags |= CONN_F_ADOPTED;
	conn_setup(g, c, stream_new(g->g_base, fd, NULL, STREAM_O_CLOSE));
	log_debug("conn %llu %s: handed to the main loop",
	    (unsigned long long)c->c_id, c->c_peer);
}

/* Close every connection (shutdown). */
void
conn_close_all(struct gw *g)
{
	struct conn *c;

	while ((c = TAILQ_FIRST(&g->g_conns)) != NULL) {
		relay_abort(c);
		conn_close(c, "gateway stopping");
	}
}
