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
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <jansson.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "tls.h"
#include "token.h"

/* How long a closing connection drains input after its answer. */
#define CONN_LINGER_MS 2000
/* Output low watermark: the relay resumes below this. */
#define CONN_LOW (64 * 1024)

static void conn_read_cb(struct bufferevent *, void *);
static void conn_read(struct conn *, struct bufferevent *);
static void conn_write_cb(struct bufferevent *, void *);
static void conn_event_cb(struct bufferevent *, short, void *);
static void conn_read_head(struct conn *);
static void conn_log_access(struct conn *, const char *);

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

/* Arm the connection timer for ms milliseconds. */
static void
conn_timer_set(struct conn *c, uint64_t ms)
{
	struct timeval tv;

	clock_msec_to_tv(ms, &tv);
	evtimer_add(c->c_timer, &tv);
}

/* The exchange of c, made when its first use needs it. */
static struct gw_xchg *
conn_xchg(struct conn *c)
{
	if (c->c_x == NULL) {
		c->c_x = xcalloc(1, sizeof *c->c_x);
		c->c_x->x_start_us = clock_mono_usec();
	}
	return (c->c_x);
}

/* Free the exchange of c, if any: what belongs to the current request. */
static void
conn_reset_exchange(struct conn *c)
{
	struct gw_xchg *x = c->c_x;

	c->c_flags &= ~(CONN_F_HEAD_STARTED | CONN_F_READ_HELD);
	if (x == NULL)
		return;
	c->c_x = NULL;
	http1_msg_reset(&x->x_req);
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

/* Print c's state, flags and exchange into buf, for debug logs. */
void
conn_print(const struct conn *c, char *buf, size_t len)
{
	const struct gw_xchg *x = c->c_x;

	snprintf(buf, len,
	    "conn %llu %s state=%s flags=%#x relay=%#x xchg=%s%s%s flags=%#x "
	    "status=%d up=%s",
	    (unsigned long long)c->c_id, c->c_peer, conn_state_name(c->c_state),
	    (unsigned)c->c_flags, (unsigned)c->c_relay, x != NULL ? "" : "none",
	    x != NULL && x->x_method != NULL ? x->x_method : "",
	    x != NULL && x->x_path != NULL ? x->x_path : "",
	    x != NULL ? (unsigned)x->x_flags : 0u, x != NULL ? x->x_status : 0,
	    x != NULL && x->x_up != NULL ? upstream_state_name(x->x_up->u_state)
					 : "none");
}

/* Free a connection; called from the loop after conn_close. */
static void
conn_free_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)events;
	conn_reset_exchange(c);
	if (c->c_bev != NULL)
		bufferevent_free(c->c_bev);
	if (c->c_timer != NULL)
		event_free(c->c_timer);
	free(c);
}

/* Close a connection, logging why; it is freed from the loop. */
void
conn_close(struct conn *c, const char *reason)
{
	struct gw *g = c->c_gw;
	struct gw_xchg *x = c->c_x;
	struct timeval tv = { 0, 0 };
	char buf[256];

	if (c->c_state == CONN_S_DEAD)
		return;
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
	wthru_detach(&c->c_wt);
	if (c->c_bev != NULL)
		bufferevent_disable(c->c_bev, EV_READ | EV_WRITE);
	evtimer_del(c->c_timer);
	TAILQ_REMOVE(&g->g_conns, c, c_entry);
	g->g_nconns--;
	if (g->g_shared != NULL && !(c->c_flags & CONN_F_ADOPTED))
		__atomic_sub_fetch(&g->g_shared->s_nconns, 1, __ATOMIC_RELAXED);
	event_base_once(g->g_base, -1, EV_TIMEOUT, conn_free_cb, c, &tv);
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
	uint64_t now = clock_mono_usec(), us = now - c->c_x->x_start_us;
	json_t *f;

	c->c_x->x_flags |= XCHG_F_LOGGED;
	metrics_request(c->c_gw, c->c_x->x_status, c->c_x->x_err_code, us);
	GW_ADD(m->m_bytes_in, c->c_x->x_req_body.b_total);
	GW_ADD(m->m_bytes_out, c->c_x->x_resp_body.b_total);
	if (!log_enabled(LOG_LVL_INFO))
		return;
	f = json_object();
	json_object_set_new(f, "conn", json_integer((json_int_t)c->c_id));
	json_object_set_new(f, "client", json_string(c->c_peer_ip));
	json_object_set_new(f, "request_id",
	    c->c_x->x_request_id[0] != '\0' ? json_string(c->c_x->x_request_id)
					    : json_null());
	json_object_set_new(f, "method",
	    c->c_x->x_method != NULL ? json_string_nocheck(c->c_x->x_method)
				     : json_null());
	json_object_set_new(f, "path",
	    c->c_x->x_path != NULL ? json_string_nocheck(c->c_x->x_path)
				   : json_null());
	json_object_set_new(f, "status", json_integer(c->c_x->x_status));
	json_object_set_new(f, "sandbox",
	    c->c_x->x_sandbox != NULL
		? json_string_nocheck(c->c_x->x_sandbox->sb_id)
		: json_null());
	json_object_set_new(f, "port",
	    c->c_x->x_port != 0 ? json_integer(c->c_x->x_port) : json_null());
	json_object_set_new(f, "bytes_in",
	    json_integer((json_int_t)c->c_x->x_req_body.b_total));
	json_object_set_new(f, "bytes_out",
	    json_integer((json_int_t)c->c_x->x_resp_body.b_total));
	json_object_set_new(f, "ms", json_real((double)us / 1000));
	json_object_set_new(f, "upstream_ms",
	    c->c_x->x_up_start_us != 0
		? json_real((double)(now - c->c_x->x_up_start_us) / 1000)
		: json_null());
	json_object_set_new(f, "error",
	    c->c_x->x_err_code != NULL ? json_string(c->c_x->x_err_code)
				       : json_null());
	json_object_set_new(f, "close", json_string_nocheck(close));
	log_event(LOG_LVL_INFO, "access", f);
}

/* Start the next exchange on a kept-alive connection. */
static void
conn_next(struct conn *c)
{
	conn_reset_exchange(c);
	c->c_state = CONN_S_HEAD;
	bufferevent_set_timeouts(c->c_bev, NULL, NULL);
	conn_timer_set(c, c->c_gw->g_conf->cf_keepalive_timeout);
	bufferevent_enable(c->c_bev, EV_READ);
	/* A pipelined request already buffered: parse it from the loop. */
	if (evbuffer_get_length(bufferevent_get_input(c->c_bev)) != 0)
		bufferevent_trigger(c->c_bev, EV_READ,
		    BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/*
 * Finish with a connection that will not be reused: once the output has
 * drained, shut down our side and drain the client's input for a moment,
 * so a response is not destroyed by a reset.
 */
void
conn_finish(struct conn *c)
{
	if (c->c_x != NULL && c->c_x->x_up != NULL)
		upstream_close(c->c_x->x_up, "client connection finishing");
	c->c_state = CONN_S_ERROR;
	bufferevent_setwatermark(c->c_bev, EV_WRITE, 0, 0);
	bufferevent_enable(c->c_bev, EV_WRITE);
	bufferevent_disable(c->c_bev, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->c_bev)) == 0)
		conn_write_cb(c->c_bev, c);
}

/* Is the request a browser navigation, which gets HTML errors? */
static int
conn_wants_html(const struct conn *c)
{
	const struct hfield *h;

	if (c->c_x == NULL || c->c_x->x_head.h_method == NULL)
		return (0);
	if ((h = head_find(&c->c_x->x_head, "sec-fetch-mode")) != NULL &&
	    strcasecmp(h->value, "navigate") == 0)
		return (1);
	if ((h = head_find(&c->c_x->x_head, "accept")) != NULL &&
	    strstr(h->value, "text/html") != NULL)
		return (1);
	return (0);
}

/*
 * Answer the current request with a gateway error: e gives status and code,
 * or, when e is NULL, the parser error err.  The request never reaches (or
 * no longer uses) the upstream.
 */
void
conn_refuse(struct conn *c, const struct gw_error *e, enum http1_err err,
    const char *fmt, ...)
{
	struct errpage ep;
	va_list ap;
	char *msg;
	const char *code;
	int status, keep;

	if (c->c_state == CONN_S_DEAD || c->c_state == CONN_S_ERROR)
		return;
	(void)conn_xchg(c); /* a refusal at accept has its line too */
	memset(&ep, 0, sizeof ep);
	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	status = e != NULL ? e->e_status : http1_err_status(err);
	code = e != NULL ? e->e_code : http1_err_code(err);
	if (c->c_x->x_up != NULL) {
		c->c_x->x_up->u_flags |= UP_F_NO_REUSE;
		upstream_close(c->c_x->x_up, "request refused");
	}
	if (c->c_x->x_flags & XCHG_F_RESP_STARTED) {
		log_warn("conn %llu %s: %s: %s", (unsigned long long)c->c_id,
		    c->c_peer_ip, code, msg);
		c->c_x->x_err_code = code;
		conn_close(c, code);
		free(msg);
		return;
	}
	/* Keep the connection only when the request was read in full. */
	/*
	 * Keep the connection only when the request was read in full: a body
	 * left unread would otherwise be parsed as the next request.
	 */
	keep = e != NULL && (c->c_x->x_flags & XCHG_F_KEEPALIVE) &&
	    c->c_x->x_req.m_buf != NULL &&
	    (c->c_x->x_req.m_body == HTTP1_BODY_NONE ||
		c->c_x->x_req_body.b_done) &&
	    !(c->c_flags & CONN_F_CLIENT_EOF);
	ep.ep_request_id = c->c_x->x_request_id[0] != '\0'
	    ? c->c_x->x_request_id
	    : NULL;
	ep.ep_status = status;
	ep.ep_code = code;
	ep.ep_message = msg;
	ep.ep_sandbox = c->c_x->x_sandbox != NULL ? c->c_x->x_sandbox->sb_id
						  : NULL;
	ep.ep_port = c->c_x->x_port;
	ep.ep_flags = (conn_wants_html(c) ? ERRPAGE_F_HTML : 0) |
	    ((c->c_x->x_flags & XCHG_F_HEAD_REQ) ? ERRPAGE_F_HEAD : 0) |
	    (keep ? ERRPAGE_F_KEEPALIVE : 0);
	errpage_put(bufferevent_get_output(c->c_bev), &ep);
	c->c_x->x_status = status;
	c->c_x->x_err_code = code;
	log_debug("conn %llu %s: refused %d %s: %s",
	    (unsigned long long)c->c_id, c->c_peer_ip, status, code, msg);
	free(msg);
	/* Refused heads too: a 400, 408, 429 or 431 leaves its line. */
	conn_log_access(c, keep ? "keep-alive" : "close");
	if (keep)
		conn_next(c);
	else
		conn_finish(c);
}

/* The response was relayed in full. */
void
conn_response_done(struct conn *c)
{
	struct upstream *up = c->c_x->x_up;
	int reusable, keep;

	reusable = c->c_x->x_req_body.b_done && c->c_x->x_resp_body.b_done;
	keep = (c->c_x->x_flags & XCHG_F_KEEPALIVE) &&
	    c->c_x->x_req_body.b_done && !(c->c_flags & CONN_F_CLIENT_EOF);
	conn_log_access(c, keep ? "keep-alive" : "close");
	if (up != NULL)
		upstream_release(up, reusable);
	if (keep)
		conn_next(c);
	else
		conn_finish(c);
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
	const struct http1_msg *m = &c->c_x->x_req;
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
	int r, keep, page;

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
		keep = (c->c_x->x_flags & XCHG_F_KEEPALIVE) &&
		    c->c_x->x_req.m_body == HTTP1_BODY_NONE;
		/* A page has a body, which HEAD must not get: a 303 then. */
		page = (ar.ar_flags & AUTH_R_F_PAGE) &&
		    !(c->c_x->x_flags & XCHG_F_HEAD_REQ);
		errpage_redirect(bufferevent_get_output(c->c_bev),
		    c->c_x->x_request_id, ar.ar_location, ar.ar_set_cookie,
		    page, keep);
		c->c_x->x_status = page ? 200 : 303;
		conn_log_access(c, keep ? "keep-alive" : "close");
		auth_result_free(&ar);
		if (keep)
			conn_next(c);
		else
			conn_finish(c);
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
 * Hand the client's bufferevent to another owner (the tunnel) and close the
 * connection object around it.  The caller has written what the client
 * needed (the 101) into its output.
 */
struct bufferevent *
conn_steal_bev(struct conn *c)
{
	struct bufferevent *bev = c->c_bev;

	wthru_detach(&c->c_wt);
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	bufferevent_set_timeouts(bev, NULL, NULL);
	bufferevent_setwatermark(bev, EV_READ | EV_WRITE, 0, 0);
	c->c_bev = NULL;
	c->c_x->x_status = 101;
	conn_log_access(c, "tunnel");
	conn_close(c, "handed to the tunnel");
	return (bev);
}

/*
 * A worker found a terminate-mode tunnel request; tunnels live on the main
 * loop.  Move the request into a new connection for the main loop, joined
 * to this one by a socketpair, and relay the bytes: the main loop answers
 * 101 and runs the tunnel, this loop keeps the client (and its TLS).
 */
static void
conn_handoff(struct conn *c, int listen_port)
{
	struct conn *nc;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		sv) == -1) {
		c->c_x->x_flags &= ~XCHG_F_KEEPALIVE;
		conn_fail(c, gw_err_no_resources,
		    "The gateway cannot open a channel to its main loop "
		    "(%s); try again shortly.",
		    strerror(errno));
		return;
	}
	nc = xcalloc(1, sizeof *nc);
	nc->c_id = c->c_id;
	nc->c_flags = c->c_flags & (CONN_F_TLS | CONN_F_TLS_UP);
	(void)conn_xchg(nc);
	nc->c_x->x_flags = c->c_x->x_flags & XCHG_F_WS_REQ;
	memcpy(nc->c_peer, c->c_peer, sizeof nc->c_peer);
	memcpy(nc->c_peer_ip, c->c_peer_ip, sizeof nc->c_peer_ip);
	nc->c_local_port = c->c_local_port;
	nc->c_x->x_start_us = c->c_x->x_start_us;
	memcpy(nc->c_x->x_request_id, c->c_x->x_request_id,
	    sizeof nc->c_x->x_request_id);
	nc->c_x->x_req = c->c_x->x_req; /* the head and its fields move */
	memset(&c->c_x->x_req, 0, sizeof c->c_x->x_req);
	nc->c_x->x_head = c->c_x->x_head; /* points into the moved head */
	memset(&c->c_x->x_head, 0, sizeof c->c_x->x_head);
	nc->c_x->x_sandbox = c->c_x->x_sandbox;
	sandbox_ref(nc->c_x->x_sandbox);
	nc->c_x->x_port = c->c_x->x_port;
	nc->c_x->x_method = xstrdup(c->c_x->x_method);
	if (c->c_x->x_target != NULL)
		nc->c_x->x_target = xstrdup(c->c_x->x_target);
	if (c->c_x->x_path != NULL)
		nc->c_x->x_path = xstrdup(c->c_x->x_path);
	c->c_flags |= CONN_F_HANDED;
	c->c_x->x_up = upstream_pipe(
	    c->c_gw, c->c_x->x_sandbox, sv[0], &proxy_owner, c);
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
	int keep;

	/* c_target is "/" then the query, if any. */
	xasprintf(&loc, "%s/%s", c->c_x->x_prefix, c->c_x->x_target + 1);
	keep = (c->c_x->x_flags & XCHG_F_KEEPALIVE) &&
	    c->c_x->x_req.m_body == HTTP1_BODY_NONE;
	errpage_moved(bufferevent_get_output(c->c_bev), c->c_x->x_request_id,
	    308, loc, keep);
	free(loc);
	c->c_x->x_status = 308;
	conn_log_access(c, keep ? "keep-alive" : "close");
	if (keep)
		conn_next(c);
	else
		conn_finish(c);
}

/* Route a parsed request to a sandbox port, or refuse it. */
static void
conn_route(struct conn *c)
{
	struct gw *g = c->c_gw;
	const struct http1_msg *m = &c->c_x->x_req;
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
		c->c_x->x_flags &= ~XCHG_F_KEEPALIVE;
		conn_fail(c, gw_err_body_too_large,
		    "The request body of %llu "
		    "bytes is larger than the %llu bytes this gateway accepts.",
		    (unsigned long long)m->m_content_length,
		    (unsigned long long)g->g_conf->cf_max_body_size);
		return;
	}
	proxy_start(c);
}

/* Parse a request head from the input, then route it. */
static void
conn_read_head(struct conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->c_bev);
	enum http1_err err = HTTP1_E_NONE;
	int r;

	if (evbuffer_get_length(in) == 0)
		return;
	if (!(c->c_flags & CONN_F_HEAD_STARTED)) {
		/* A whole-head deadline, not an idle timer. */
		c->c_flags |= CONN_F_HEAD_STARTED;
		(void)conn_xchg(c);
		conn_timer_set(c, c->c_gw->g_conf->cf_header_timeout);
	}
	r = http1_parse_request(in, &c->c_gw->g_limits, &c->c_x->x_req, &err);
	if (r == 0)
		return;
	if (r < 0) {
		http1_msg_reset(&c->c_x->x_req);
		conn_refuse(c, NULL, err, "%s", http1_err_message(err));
		return;
	}
	evtimer_del(c->c_timer);
	http1_msg_head(&c->c_x->x_req, &c->c_x->x_head);
	if (c->c_x->x_req.m_minor == 1)
		c->c_x->x_flags |= (c->c_x->x_req.m_flags & HTTP1_F_CONN_CLOSE)
		    ? 0
		    : XCHG_F_KEEPALIVE;
	else if (c->c_x->x_req.m_flags & HTTP1_F_CONN_KEEPALIVE)
		c->c_x->x_flags |= XCHG_F_KEEPALIVE;
	if (c->c_x->x_req.m_method_len == 4 &&
	    memcmp(c->c_x->x_req.m_method, "HEAD", 4) == 0)
		c->c_x->x_flags |= XCHG_F_HEAD_REQ;
	if (c->c_x->x_req.m_body == HTTP1_BODY_NONE)
		c->c_x->x_flags |= XCHG_F_REQ_WHOLE;
	conn_route(c);
}

/* Bytes from the client. */
static void
conn_read_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;
	struct upstream *up;

	evio_read_more(bev);
	conn_read(c, bev);
	/*
	 * Input that cannot move on (a pipelined request while one is in
	 * flight, a body while the upstream connects): stop reading until
	 * something consumes it, or libevent calls back on every loop pass.
	 */
	if (c->c_state == CONN_S_HEAD || c->c_state == CONN_S_BODY ||
	    c->c_state == CONN_S_WAIT)
		evio_read_hold(bev, &c->c_flags, CONN_F_READ_HELD);
	/* Send what this input made at once (wthru.h). */
	if (c->c_x != NULL && (up = c->c_x->x_up) != NULL &&
	    up->u_state == UP_S_ACTIVE)
		wthru_flush(&up->u_wt);
	wthru_flush(&c->c_wt);
	if (c->c_state == CONN_S_UPGRADED)
		relay_splice_try(c);
	else if (c->c_state == CONN_S_BODY)
		proxy_request_splice_try(c);
}

/* Input from the client, by state. */
static void
conn_read(struct conn *c, struct bufferevent *bev)
{
	switch (c->c_state) {
	case CONN_S_HEAD:
		conn_read_head(c);
		break;
	case CONN_S_BODY:
		proxy_request_body(c);
		break;
	case CONN_S_WAIT:
		break;
	case CONN_S_UPGRADED:
		relay_client_read(c);
		break;
	case CONN_S_ERROR:
		/* Lingering: discard what the client still sends. */
		evbuffer_drain(bufferevent_get_input(bev),
		    evbuffer_get_length(bufferevent_get_input(bev)));
		break;
	case CONN_S_DEAD:
		break;
	}
}

/*
 * Closing at once is safe when the client sent its whole request and
 * nothing after it: close(2) then sends a FIN, not a reset that could
 * destroy the answer before the client reads it.  Otherwise the
 * connection lingers, reading what the client still sends (as nginx's
 * lingering_close does by the same rule).
 */
static int
conn_nothing_more(struct conn *c, struct bufferevent *bev)
{
	int fd, n = 0;

	if (c->c_x == NULL || !(c->c_x->x_flags & XCHG_F_REQ_WHOLE) ||
	    evbuffer_get_length(bufferevent_get_input(bev)) != 0 ||
	    (fd = bufferevent_getfd(bev)) == -1)
		return (0);
	return (ioctl(fd, FIONREAD, &n) == 0 && n == 0);
}

/* The client's output drained below the low watermark. */
static void
conn_write_cb(struct bufferevent *bev, void *arg)
{
	struct conn *c = arg;

	if (c->c_state == CONN_S_DEAD)
		return;
	if (c->c_state == CONN_S_UPGRADED) {
		relay_client_drained(c);
		return;
	}
	if (c->c_state != CONN_S_ERROR) {
		proxy_client_drained(c);
		return;
	}
	if (evbuffer_get_length(bufferevent_get_output(bev)) != 0 ||
	    (c->c_flags & CONN_F_LINGER))
		return;
	c->c_flags |= CONN_F_LINGER;
	if (c->c_flags & CONN_F_CLIENT_EOF) {
		conn_close(c, "done");
		return;
	}
	if (c->c_flags & CONN_F_TLS) {
		/* A raw shutdown would cut the TLS stream; just close. */
		conn_close(c, "done");
		return;
	}
	if (conn_nothing_more(c, bev)) {
		conn_close(c, "done");
		return;
	}
	shutdown(bufferevent_getfd(bev), SHUT_WR);
	bufferevent_enable(bev, EV_READ);
	conn_timer_set(c, CONN_LINGER_MS);
}

/* EOF or error from the client. */
static void
conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct conn *c = arg;
	char why[160], tlserr[128];
	unsigned long e;

	(void)bev;
	if (c->c_state == CONN_S_DEAD)
		return;
	if (what & BEV_EVENT_CONNECTED) {
		c->c_flags |= CONN_F_TLS_UP;
		return;
	}
	if ((what & BEV_EVENT_ERROR) && (c->c_flags & CONN_F_TLS) &&
	    (e = bufferevent_get_openssl_error(bev)) != 0) {
		tls_error_string(e, tlserr, sizeof tlserr);
		snprintf(why, sizeof why, "TLS error: %s", tlserr);
		if (!(c->c_flags & CONN_F_TLS_UP))
			log_info("conn %llu %s: TLS handshake failed: %s",
			    (unsigned long long)c->c_id, c->c_peer_ip, tlserr);
		conn_close(c, why);
		return;
	}
	if (what & BEV_EVENT_ERROR) {
		snprintf(why, sizeof why, "client error: %s",
		    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		conn_close(c, why);
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		conn_close(c,
		    (what & BEV_EVENT_READING)
			? "client sent nothing for the idle timeout"
			: "client read nothing for the idle timeout");
		return;
	}
	if (!(what & BEV_EVENT_EOF))
		return;
	c->c_flags |= CONN_F_CLIENT_EOF;
	switch (c->c_state) {
	case CONN_S_HEAD:
		conn_close(c,
		    (c->c_flags & CONN_F_HEAD_STARTED)
			? "client closed mid-head"
			: "client closed");
		break;
	case CONN_S_BODY:
		conn_close(c, "client closed mid-body");
		break;
	case CONN_S_WAIT:
		/* Half-close: still send the response, then close. */
		break;
	case CONN_S_UPGRADED:
		relay_client_eof(c);
		break;
	case CONN_S_ERROR:
		if (c->c_flags & CONN_F_LINGER)
			conn_close(c, "done");
		break;
	case CONN_S_DEAD:
		break;
	}
}

/* The header deadline, keep-alive idle or linger timer fired. */
static void
conn_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)events;
	switch (c->c_state) {
	case CONN_S_HEAD:
		if (!(c->c_flags & CONN_F_HEAD_STARTED)) {
			conn_close(c, "keep-alive idle timeout");
			break;
		}
		conn_fail(c, gw_err_request_timeout,
		    "The request head did not "
		    "arrive within %llums.",
		    (unsigned long long)c->c_gw->g_conf->cf_header_timeout);
		break;
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

/* Give connection c its bufferevent and timer, and list it on loop g. */
static void
conn_setup(struct gw *g, struct conn *c, struct bufferevent *bev)
{
	size_t high;

	c->c_gw = g;
	c->c_bev = bev;
	evio_tune(c->c_bev);
	c->c_timer = evtimer_new(g->g_base, conn_timer_cb, c);
	bufferevent_setcb(
	    c->c_bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
	wthru_attach(&c->c_wt, c->c_bev, g->g_wq);
	evio_own_reads(c->c_bev);
	/* Input stops at the high watermark: a head, or body backpressure. */
	high = g->g_conf->cf_max_header_size + 4096;
	if (high < 64 * 1024)
		high = 64 * 1024;
	bufferevent_setwatermark(c->c_bev, EV_READ, 0, high);
	bufferevent_setwatermark(c->c_bev, EV_WRITE, CONN_LOW, 0);
	TAILQ_INSERT_TAIL(&g->g_conns, c, c_entry);
	g->g_nconns++;
}

/* A new client connection from a listener. */
void
conn_accept(struct gw *g, int fd, struct sockaddr *sa, int salen,
    struct gw_listener *gl)
{
	struct bufferevent *bev;
	struct conn *c;
	uint64_t n;

	/* fd has TCP_NODELAY already, from its listener (listener.c). */
	(void)salen;
	c = xcalloc(1, sizeof *c);
	c->c_id = g->g_shared != NULL
	    ? __atomic_add_fetch(&g->g_shared->s_conn_ids, 1, __ATOMIC_RELAXED)
	    : ++g->g_conn_ids;
	c->c_local_port = gl->gl_port;
	addr_format(sa, c->c_peer, sizeof c->c_peer);
	addr_format_ip(sa, c->c_peer_ip, sizeof c->c_peer_ip);
	if (gl->gl_ctx != NULL) {
		c->c_flags |= CONN_F_TLS;
		bev = bufferevent_openssl_socket_new(g->g_base, fd,
		    tls_server_ssl_new(gl->gl_ctx), BUFFEREVENT_SSL_ACCEPTING,
		    BEV_OPT_CLOSE_ON_FREE);
		/* A client that closes without close_notify is just EOF. */
		bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	} else
		bev = bufferevent_socket_new(
		    g->g_base, fd, BEV_OPT_CLOSE_ON_FREE);
	conn_setup(g, c, bev);
	GW_ADD(g->g_metrics.m_conns_accepted, 1);
	log_debug("conn %llu %s: accepted on port %d",
	    (unsigned long long)c->c_id, c->c_peer, gl->gl_port);
	n = g->g_shared != NULL
	    ? __atomic_add_fetch(&g->g_shared->s_nconns, 1, __ATOMIC_RELAXED)
	    : g->g_nconns;
	memtrim_count(g, n);
	if (n > g->g_conf->cf_max_connections) {
		conn_fail(c, gw_err_too_many_connections,
		    "The gateway is at "
		    "its limit of %llu connections; try again shortly.",
		    (unsigned long long)g->g_conf->cf_max_connections);
		return;
	}
	c->c_state = CONN_S_HEAD;
	conn_timer_set(c, g->g_conf->cf_keepalive_timeout);
	bufferevent_enable(c->c_bev, EV_READ | EV_WRITE);
}

/*
 * The main loop adopts c, a tunnel request a worker moved out of its
 * connection (conn_handoff), on fd, the main loop's end of the socketpair
 * the worker relays through.  With g NULL (stopping) c is only freed.
 */
void
conn_adopt(struct gw *g, struct conn *c, int fd, int listen_port)
{
	struct bufferevent *bev;

	if (g == NULL ||
	    (bev = bufferevent_socket_new(
		 g->g_base, fd, BEV_OPT_CLOSE_ON_FREE)) == NULL) {
		if (fd != -1)
			close(fd);
		conn_reset_exchange(c);
		free(c);
		return;
	}
	c->c_flags |= CONN_F_ADOPTED;
	conn_setup(g, c, bev);
	c->c_state = CONN_S_HEAD;
	bufferevent_enable(c->c_bev, EV_READ | EV_WRITE);
	log_debug("conn %llu %s: handed to the main loop",
	    (unsigned long long)c->c_id, c->c_peer);
	tunnel_attach(c, c->c_x->x_sandbox, listen_port);
	wthru_flush(&c->c_wt);
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
