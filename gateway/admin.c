/*
 * The admin API: a separate HTTP/1.1 listener (default 127.0.0.1:9090) for
 * health checks, Prometheus metrics and the sandbox directory.
 *
 * Sandboxes are PUT as JSON in the shape of a YAML sandboxes: entry; the
 * JSON is turned into a configuration tree and checked by the same schema
 * code as the configuration file.  A change builds a new directory and
 * swaps it in whole, so new requests see it at once and requests in flight
 * keep the sandbox version they hold a reference to.
 *
 * Everything except /healthz and /readyz needs the bearer admin token when
 * one is configured; it is compared in constant time and never logged.
 * Memory is bounded: a 16 KiB head, a 1 MiB body, one response in flight
 * per connection and a fixed number of connections.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>
#include <openssl/crypto.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "config.h"
#include "gw.h"
#include "strbuf.h"

/* Largest request head, start line and number of header fields. */
#define ADMIN_MAX_HEAD (16 * 1024)
#define ADMIN_MAX_LINE (8 * 1024)
#define ADMIN_MAX_HEADERS 100
/* Largest request body. */
#define ADMIN_MAX_BODY (1024 * 1024)
/* Admin connections open at once; more are closed on accept. */
#define ADMIN_MAX_CONNS 64
/* Input buffered before reading pauses. */
#define ADMIN_READ_HIGH (64 * 1024)
/* Time allowed for a request body, and for writing a response. */
#define ADMIN_BODY_TIMEOUT_MS (30 * 1000)
#define ADMIN_WRITE_TIMEOUT_MS (30 * 1000)
/* How long a closing connection drains input after its answer. */
#define ADMIN_LINGER_MS 2000
/* Accept pause after running out of file descriptors. */
#define ADMIN_PAUSE_MS 1000

/* The prefix of the sandbox directory's paths. */
#define ADMIN_SANDBOXES "/v1/sandboxes"

enum admin_state {
	ADMIN_S_HEAD = 0, /* reading a request head */
	ADMIN_S_BODY, /* reading the request body */
	ADMIN_S_WRITE, /* writing a response, then the next request */
	ADMIN_S_CLOSING, /* writing a last response, then closing */
	ADMIN_S_DEAD, /* closed; freed from the loop */
};

/* A connection to the admin listener. */
struct admin_conn {
	TAILQ_ENTRY(admin_conn) ac_entry;
	struct admin *ac_admin;
	struct event_base *ac_base;
	uint64_t ac_id;
	struct bufferevent *ac_bev;
	struct event *ac_timer; /* head deadline, body, write, idle */
	enum admin_state ac_state;
	int ac_flags;
#define ADMIN_F_KEEPALIVE 0x01 /* the client allows another request */
#define ADMIN_F_HEAD_STARTED 0x02 /* a byte of a new head arrived */
#define ADMIN_F_HEAD_REQ 0x04 /* HEAD: answer without a body */
#define ADMIN_F_BODY_DONE 0x08 /* the request body was read in full */
#define ADMIN_F_CLIENT_EOF 0x10 /* the client shut its side */
#define ADMIN_F_LINGER 0x20 /* shut down, draining input */
#define ADMIN_F_READ_HELD 0x40 /* reading off: the input cannot move on */
	char ac_peer[64]; /* ip:port */
	struct http1_msg ac_req;
	struct http1_chunked ac_chunked;
	uint64_t ac_left; /* Content-Length bytes still to come */
	struct evbuffer *ac_body; /* the request body, at most 1 MiB */
	char *ac_method;
	char *ac_path; /* target without the query */
	char *ac_note; /* what a change did, for the log line */
};

/* The admin listener and its connections. */
struct admin {
	struct gw *a_gw;
	struct evconnlistener *a_lev;
	struct event *a_pause; /* EMFILE back-off */
	struct http1_limits a_limits;
	TAILQ_HEAD(, admin_conn) a_conns;
	size_t a_nconns;
	uint64_t a_ids;
};

static void admin_read_head(struct admin_conn *);
static void admin_error(struct admin_conn *, int status, const char *code,
    const char *extra, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Name of a state, for debug logs. */
static const char *
admin_state_name(enum admin_state s)
{
	switch (s) {
	case ADMIN_S_HEAD:
		return ("head");
	case ADMIN_S_BODY:
		return ("body");
	case ADMIN_S_WRITE:
		return ("write");
	case ADMIN_S_CLOSING:
		return ("closing");
	case ADMIN_S_DEAD:
		return ("dead");
	}
	return ("?");
}

/* Arm the connection timer for ms milliseconds. */
static void
admin_timer_set(struct admin_conn *ac, uint64_t ms)
{
	struct timeval tv;

	clock_msec_to_tv(ms, &tv);
	evtimer_add(ac->ac_timer, &tv);
}

/* Forget the current request. */
static void
admin_reset_request(struct admin_conn *ac)
{
	http1_msg_reset(&ac->ac_req);
	memset(&ac->ac_chunked, 0, sizeof ac->ac_chunked);
	ac->ac_left = 0;
	if (ac->ac_body != NULL)
		evbuffer_drain(ac->ac_body, evbuffer_get_length(ac->ac_body));
	free(ac->ac_method);
	free(ac->ac_path);
	free(ac->ac_note);
	ac->ac_method = ac->ac_path = ac->ac_note = NULL;
	ac->ac_flags &= ~(ADMIN_F_KEEPALIVE | ADMIN_F_HEAD_STARTED |
	    ADMIN_F_HEAD_REQ | ADMIN_F_BODY_DONE);
}

/* Free a connection; called from the loop after admin_close. */
static void
admin_free_cb(evutil_socket_t fd, short events, void *arg)
{
	struct admin_conn *ac = arg;

	(void)fd;
	(void)events;
	admin_reset_request(ac);
	if (ac->ac_body != NULL)
		evbuffer_free(ac->ac_body);
	if (ac->ac_bev != NULL)
		bufferevent_free(ac->ac_bev);
	if (ac->ac_timer != NULL)
		event_free(ac->ac_timer);
	free(ac);
}

/*
 * Close a connection, logging why; it is freed from the loop.  The free
 * does not touch the listener, which may be gone by then.
 */
static void
admin_close(struct admin_conn *ac, const char *reason)
{
	struct admin *a = ac->ac_admin;
	struct timeval tv = { 0, 0 };

	if (ac->ac_state == ADMIN_S_DEAD)
		return;
	log_debug("admin %llu %s: closed in state %s: %s",
	    (unsigned long long)ac->ac_id, ac->ac_peer,
	    admin_state_name(ac->ac_state), reason);
	ac->ac_state = ADMIN_S_DEAD;
	bufferevent_disable(ac->ac_bev, EV_READ | EV_WRITE);
	evtimer_del(ac->ac_timer);
	TAILQ_REMOVE(&a->a_conns, ac, ac_entry);
	a->a_nconns--;
	event_base_once(ac->ac_base, -1, EV_TIMEOUT, admin_free_cb, ac, &tv);
}

/*
 * Send a whole response: status, content type and body (NULL for none),
 * plus extra header lines ("Name: value\r\n", or NULL).  Logs the request
 * and moves on to the next request or to closing.
 */
static void
admin_reply(struct admin_conn *ac, int status, const char *ctype,
    struct evbuffer *body, const char *extra, const char *code)
{
	struct evbuffer *out = bufferevent_get_output(ac->ac_bev);
	int keep;

	if (ac->ac_state == ADMIN_S_DEAD || ac->ac_state == ADMIN_S_WRITE ||
	    ac->ac_state == ADMIN_S_CLOSING)
		return;
	keep = (ac->ac_flags & ADMIN_F_KEEPALIVE) &&
	    (ac->ac_flags & ADMIN_F_BODY_DONE) &&
	    !(ac->ac_flags & ADMIN_F_CLIENT_EOF);
	evbuffer_add_printf(
	    out, "HTTP/1.1 %d %s\r\n", status, http1_reason(status));
	if (status != 204)
		evbuffer_add_printf(out,
		    "Content-Type: %s\r\nContent-Length: %zu\r\n", ctype,
		    body != NULL ? evbuffer_get_length(body) : 0);
	evbuffer_add_printf(out, "Cache-Control: no-store\r\n%s%s\r\n",
	    extra != NULL ? extra : "", keep ? "" : "Connection: close\r\n");
	if (body != NULL && status != 204 && !(ac->ac_flags & ADMIN_F_HEAD_REQ))
		evbuffer_add_buffer(out, body);

	/* One line per request: never a header, a query or the token. */
	log_info("admin %s: \"%s %s\" %d%s%s%s%s", ac->ac_peer,
	    ac->ac_method != NULL ? ac->ac_method : "-",
	    ac->ac_path != NULL ? ac->ac_path : "-", status,
	    code != NULL ? " error=" : "", code != NULL ? code : "",
	    ac->ac_note != NULL ? " " : "",
	    ac->ac_note != NULL ? ac->ac_note : "");

	admin_reset_request(ac);
	ac->ac_state = keep ? ADMIN_S_WRITE : ADMIN_S_CLOSING;
	bufferevent_disable(ac->ac_bev, EV_READ);
	bufferevent_enable(ac->ac_bev, EV_WRITE);
	admin_timer_set(ac, ADMIN_WRITE_TIMEOUT_MS);
}

/* Send a JSON response; takes the reference to obj. */
static void
admin_reply_json(struct admin_conn *ac, int status, json_t *obj,
    const char *extra, const char *code)
{
	struct evbuffer *body;
	char *js;

	body = evbuffer_new();
	if (obj != NULL && (js = json_dumps(obj, JSON_COMPACT)) != NULL) {
		evbuffer_add_printf(body, "%s\n", js);
		free(js);
	}
	json_decref(obj);
	admin_reply(ac, status, "application/json", body, extra, code);
	evbuffer_free(body);
}

/*
 * Answer with an error: status, machine-readable code and a sentence, as
 * {"status":...,"code":...,"message":...}.
 */
static void
admin_error(struct admin_conn *ac, int status, const char *code,
    const char *extra, const char *fmt, ...)
{
	va_list ap;
	json_t *obj;
	char *msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	obj = json_pack(
	    "{s:i, s:s, s:s}", "status", status, "code", code, "message", msg);
	if (obj == NULL) /* the message quotes bytes that are not UTF-8 */
		obj = json_pack("{s:i, s:s, s:s}", "status", status, "code",
		    code, "message", http1_reason(status));
	free(msg);
	admin_reply_json(ac, status, obj, extra, code);
}

/* A sandbox as the admin API shows it, with its tunnels' state. */
static json_t *
admin_sandbox_json(const struct gw *g, const struct gw_sandbox *sb)
{
	const struct gw_port_rule *pr;
	json_t *o, *ports, *p, *t, *lp;
	char range[16];
	size_t i;

	o = json_object();
	json_object_set_new(o, "id", json_string(sb->sb_id));
	json_object_set_new(o, "safe_id", json_string(sb->sb_safe_id));
	if (sb->sb_address != NULL)
		json_object_set_new(o, "address", json_string(sb->sb_address));
	if (sb->sb_netns != NULL)
		json_object_set_new(o, "netns", json_string(sb->sb_netns));
	if (sb->sb_max_connections != 0)
		json_object_set_new(o, "max_connections",
		    json_integer((json_int_t)sb->sb_max_connections));
	json_object_set_new(
	    o, "generation", json_integer((json_int_t)sb->sb_generation));
	ports = json_array();
	for (i = 0; i < sb->sb_nports; i++) {
		pr = &sb->sb_ports[i];
		p = json_object();
		if (pr->pr_lo == pr->pr_hi)
			json_object_set_new(p, "port", json_integer(pr->pr_lo));
		else {
			snprintf(range, sizeof range, "%u-%u",
			    (unsigned)pr->pr_lo, (unsigned)pr->pr_hi);
			json_object_set_new(p, "port", json_string(range));
		}
		json_object_set_new(p, "access",
		    json_string(pr->pr_private ? "private" : "public"));
		if (pr->pr_host_rewrite != NULL)
			json_object_set_new(p, "host_rewrite",
			    json_string(pr->pr_host_rewrite));
		json_array_append_new(ports, p);
	}
	json_object_set_new(o, "ports", ports);
	if (sb->sb_ntunnel_ports > 0) {
		t = json_object();
		if (sb->sb_ntunnel_ports == 1)
			lp = json_integer(sb->sb_tunnel_ports[0]);
		else {
			lp = json_array();
			for (i = 0; i < sb->sb_ntunnel_ports; i++)
				json_array_append_new(
				    lp, json_integer(sb->sb_tunnel_ports[i]));
		}
		json_object_set_new(t, "listen_port", lp);
		json_object_set_new(t, "mode",
		    json_string(sb->sb_tunnel_mode == GW_TUNNEL_FORWARD
			    ? "forward"
			    : "terminate"));
		/* tunnel.c: state, client, generation, RTT, bytes. */
		json_object_set_new(t, "listeners", tunnel_admin_json(g, sb));
		json_object_set_new(o, "tunnel", t);
	}
	json_object_set_new(
	    o, "connections", json_integer((json_int_t)GW_LOAD(sb->sb_nconns)));
	return (o);
}

/* The whole directory as the admin API shows it. */
static json_t *
admin_directory_json(const struct gw *g, const struct gw_directory *d)
{
	json_t *list;
	size_t i;

	list = json_array();
	for (i = 0; i < d->d_count; i++)
		json_array_append_new(
		    list, admin_sandbox_json(g, d->d_sandboxes[i]));
	return (json_pack("{s:I, s:o}", "generation",
	    (json_int_t)d->d_generation, "sandboxes", list));
}

/*
 * Decode the %XX escapes of a path segment.  Returns a new string, or NULL
 * when an escape is malformed or decodes to a NUL byte.
 */
static char *
admin_unescape(const char *s)
{
	char *out, *p;
	int hi, lo;

	out = p = xmalloc(strlen(s) + 1);
	while (*s != '\0') {
		if (*s != '%') {
			*p++ = *s++;
			continue;
		}
		if ((hi = hex_value(s[1])) == -1 ||
		    (lo = hex_value(s[2])) == -1 || (hi == 0 && lo == 0)) {
			free(out);
			return (NULL);
		}
		*p++ = (char)(hi << 4 | lo);
		s += 3;
	}
	*p = '\0';
	return (out);
}

/*
 * Does the request carry "Authorization: Bearer <token>" with the admin
 * token?  With no token configured, the API is open.  Equal lengths are
 * compared in constant time; a different length compares the token with
 * itself, so the time taken says nothing about the content.
 */
static int
admin_authorized(const struct admin_conn *ac)
{
	const char *token = ac->ac_admin->a_gw->g_conf->cf_admin_token;
	const struct hfield *h;
	const char *p;
	size_t want, got;
	int diff;

	if (token == NULL || *token == '\0')
		return (1);
	if ((h = http1_msg_find(&ac->ac_req, "authorization")) == NULL)
		return (0);
	if (h->value_len < 7 || strncasecmp(h->value, "Bearer ", 7) != 0)
		return (0);
	p = h->value + 7;
	got = h->value_len - 7;
	while (got > 0 && (*p == ' ' || *p == '\t')) {
		p++;
		got--;
	}
	want = strlen(token);
	diff = CRYPTO_memcmp(token, got == want ? p : token, want);
	return (got == want && diff == 0);
}

/* Is the method GET or HEAD? */
static int
admin_is_get(const struct admin_conn *ac)
{
	return (strcmp(ac->ac_method, "GET") == 0 ||
	    strcmp(ac->ac_method, "HEAD") == 0);
}

/* Answer 405 for a path that allows the methods in allow. */
static void
admin_bad_method(struct admin_conn *ac, const char *allow)
{
	char *extra;

	xasprintf(&extra, "Allow: %s\r\n", allow);
	admin_error(ac, 405, "method_not_allowed", extra,
	    "%s does not allow %s; use %s.", ac->ac_path, ac->ac_method, allow);
	free(extra);
}

/* GET /healthz and /readyz. */
static void
admin_health(struct admin_conn *ac, int ready)
{
	struct gw *g = ac->ac_admin->a_gw;

	if (!admin_is_get(ac)) {
		admin_bad_method(ac, "GET, HEAD");
		return;
	}
	if (!ready) {
		admin_reply_json(
		    ac, 200, json_pack("{s:s}", "status", "ok"), NULL, NULL);
		return;
	}
	if (g->g_nlisteners == 0) {
		admin_error(ac, 503, "not_ready", NULL,
		    "The gateway's public listeners are not open.");
		return;
	}
	admin_reply_json(
	    ac, 200, json_pack("{s:s}", "status", "ready"), NULL, NULL);
}

/* GET /metrics, in the Prometheus text format. */
static void
admin_metrics(struct admin_conn *ac)
{
	struct evbuffer *body;

	if (!admin_is_get(ac)) {
		admin_bad_method(ac, "GET, HEAD");
		return;
	}
	body = evbuffer_new();
	metrics_render(ac->ac_admin->a_gw, body);
	admin_reply(ac, 200, "text/plain; version=0.0.4", body, NULL, NULL);
	evbuffer_free(body);
}

/* Swap in a new directory; new requests are routed with it. */
static void
admin_swap(struct gw *g, struct gw_directory *nd)
{
	gw_dir_publish(g, nd); /* worker.c: the workers take it too */
	tunnel_sync(g); /* tunnel.c: open, move or close Port B listeners */
}

/* PUT /v1/sandboxes/{id}: create or replace a sandbox. */
static void
admin_put_sandbox(struct admin_conn *ac, const char *pid)
{
	struct gw *g = ac->ac_admin->a_gw;
	const struct gw_directory *d = g->g_dir;
	struct gw_sandbox *sb, *other;
	struct cfg_doc *doc;
	json_error_t jerr;
	json_t *root, *js;
	char *cause = NULL;
	const char *data;
	size_t len, i;
	int created = 1;

	len = evbuffer_get_length(ac->ac_body);
	if (len == 0) {
		admin_error(ac, 400, "invalid_json", NULL,
		    "PUT needs a JSON body describing the sandbox, in the "
		    "shape of a sandboxes: entry of the configuration.");
		return;
	}
	data = (const char *)evbuffer_pullup(ac->ac_body, -1);
	if ((root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr)) ==
	    NULL) {
		admin_error(ac, 400, "invalid_json", NULL,
		    "The request body is not valid JSON: %s (line %d, "
		    "column %d).",
		    jerr.text, jerr.line, jerr.column);
		return;
	}
	/* Without an id, the body is for the sandbox the path names. */
	if (json_is_object(root) && json_object_get(root, "id") == NULL) {
		other = directory_find(d, pid);
		js = json_string(other != NULL ? other->sb_id : pid);
		if (js == NULL) {
			json_decref(root);
			admin_error(ac, 400, "invalid_sandbox", NULL,
			    "The sandbox id in the path is not valid UTF-8.");
			return;
		}
		json_object_set_new(root, "id", js);
	}
	doc = cfg_from_json("request body", root, &cause);
	json_decref(root);
	if (doc == NULL)
		goto invalid;
	sb = conf_sandbox_parse(g->g_conf, doc, doc->d_root, &cause);
	cfg_doc_free(doc);
	if (sb == NULL)
		goto invalid;

	if (strcmp(sb->sb_id, pid) != 0 &&
	    strcasecmp(sb->sb_safe_id, pid) != 0) {
		admin_error(ac, 400, "id_mismatch", NULL,
		    "The body is for sandbox '%s' but the path names '%s'; "
		    "omit id or make them the same.",
		    sb->sb_id, pid);
		sandbox_unref(sb);
		return;
	}
	for (i = 0; i < d->d_count; i++) {
		other = d->d_sandboxes[i];
		if (strcmp(other->sb_id, sb->sb_id) == 0) {
			created = 0;
			continue;
		}
		if (strcasecmp(other->sb_safe_id, sb->sb_safe_id) != 0)
			continue;
		admin_error(ac, 409, "id_conflict", NULL,
		    "Sandbox '%s' would have the safe id '%s', which sandbox "
		    "'%s' already has in URLs; choose another id or delete "
		    "'%s' first.",
		    sb->sb_id, sb->sb_safe_id, other->sb_id, other->sb_id);
		sandbox_unref(sb);
		return;
	}

	admin_swap(g, directory_put(d, sb));
	/* Pooled connections belong to the old version; close them. */
	upstream_pool_flush_sandbox(g, sb->sb_id);
	xasprintf(&ac->ac_note, "sandbox=%s %s generation=%llu", sb->sb_id,
	    created ? "created" : "replaced",
	    (unsigned long long)sb->sb_generation);
	admin_reply_json(
	    ac, created ? 201 : 200, admin_sandbox_json(g, sb), NULL, NULL);
	sandbox_unref(sb);
	return;
invalid:
	admin_error(ac, 400, "invalid_sandbox", NULL, "%s", cause);
	free(cause);
}

/* DELETE /v1/sandboxes/{id}: remove a sandbox and its pooled connections. */
static void
admin_delete_sandbox(struct admin_conn *ac, const char *pid)
{
	struct gw *g = ac->ac_admin->a_gw;
	struct gw_sandbox *sb;
	char *id;

	if ((sb = directory_find(g->g_dir, pid)) == NULL) {
		admin_error(ac, 404, "sandbox_not_found", NULL,
		    "No sandbox '%s' is known to this gateway.", pid);
		return;
	}
	id = xstrdup(sb->sb_id);
	admin_swap(g, directory_delete(g->g_dir, pid));
	upstream_pool_flush_sandbox(g, id);
	xasprintf(&ac->ac_note, "sandbox=%s deleted", id);
	free(id);
	admin_reply(ac, 204, NULL, NULL, NULL, NULL);
}

/* /v1/sandboxes/{segment}: one sandbox, by raw or safe id. */
static void
admin_sandbox(struct admin_conn *ac, const char *segment)
{
	struct gw_sandbox *sb;
	char *pid;

	if ((pid = admin_unescape(segment)) == NULL) {
		admin_error(ac, 400, "bad_path", NULL,
		    "The sandbox id in the path is not valid "
		    "percent-encoding.");
		return;
	}
	if (admin_is_get(ac)) {
		sb = directory_find(ac->ac_admin->a_gw->g_dir, pid);
		if (sb == NULL)
			admin_error(ac, 404, "sandbox_not_found", NULL,
			    "No sandbox '%s' is known to this gateway.", pid);
		else
			admin_reply_json(ac, 200,
			    admin_sandbox_json(ac->ac_admin->a_gw, sb), NULL,
			    NULL);
	} else if (strcmp(ac->ac_method, "PUT") == 0)
		admin_put_sandbox(ac, pid);
	else if (strcmp(ac->ac_method, "DELETE") == 0)
		admin_delete_sandbox(ac, pid);
	else
		admin_bad_method(ac, "GET, HEAD, PUT, DELETE");
	free(pid);
}

/* Answer an authorised request whose body has been read. */
static void
admin_dispatch(struct admin_conn *ac)
{
	const char *path = ac->ac_path, *seg;
	size_t plen = strlen(ADMIN_SANDBOXES);

	if (strcmp(path, "/healthz") == 0)
		admin_health(ac, 0);
	else if (strcmp(path, "/readyz") == 0)
		admin_health(ac, 1);
	else if (strcmp(path, "/metrics") == 0)
		admin_metrics(ac);
	else if (strcmp(path, ADMIN_SANDBOXES) == 0) {
		if (!admin_is_get(ac))
			admin_bad_method(ac, "GET, HEAD");
		else
			admin_reply_json(ac, 200,
			    admin_directory_json(
				ac->ac_admin->a_gw, ac->ac_admin->a_gw->g_dir),
			    NULL, NULL);
	} else if (strncmp(path, ADMIN_SANDBOXES "/", plen + 1) == 0 &&
	    *(seg = path + plen + 1) != '\0' && strchr(seg, '/') == NULL)
		admin_sandbox(ac, seg);
	else
		admin_error(ac, 404, "not_found", NULL,
		    "The admin API has no %s; see /v1/sandboxes, /metrics, "
		    "/healthz and /readyz.",
		    path);
}

/* Read the request body into ac_body, then answer. */
static void
admin_read_body(struct admin_conn *ac)
{
	struct evbuffer *in = bufferevent_get_input(ac->ac_bev);
	enum http1_err err;
	size_t n, moved;
	int r;

	switch (ac->ac_req.m_body) {
	case HTTP1_BODY_LENGTH:
		n = evbuffer_get_length(in);
		if (n > ac->ac_left)
			n = (size_t)ac->ac_left;
		evbuffer_remove_buffer(in, ac->ac_body, n);
		ac->ac_left -= n;
		if (ac->ac_left > 0)
			return;
		break;
	case HTTP1_BODY_CHUNKED:
		/* Room for one byte too many, to tell "too large". */
		n = ADMIN_MAX_BODY + 1 - evbuffer_get_length(ac->ac_body);
		r = http1_chunked_decode(
		    &ac->ac_chunked, in, ac->ac_body, n, &moved, &err);
		if (r < 0) {
			admin_error(ac, http1_err_status(err),
			    http1_err_code(err), NULL, "%s",
			    http1_err_message(err));
			return;
		}
		if (evbuffer_get_length(ac->ac_body) > ADMIN_MAX_BODY) {
			admin_error(ac, 413, "body_too_large", NULL,
			    "The request body is larger than the %d bytes "
			    "the admin API accepts.",
			    ADMIN_MAX_BODY);
			return;
		}
		if (r == 0)
			return;
		break;
	default:
		break;
	}
	ac->ac_flags |= ADMIN_F_BODY_DONE;
	evtimer_del(ac->ac_timer);
	admin_dispatch(ac);
}

/* Parse a request head, check it and the credentials, then read the body. */
static void
admin_read_head(struct admin_conn *ac)
{
	struct evbuffer *in = bufferevent_get_input(ac->ac_bev);
	struct http1_msg *m = &ac->ac_req;
	enum http1_err err = HTTP1_E_NONE;
	char *target;
	int r;

	if (evbuffer_get_length(in) == 0)
		return;
	if (!(ac->ac_flags & ADMIN_F_HEAD_STARTED)) {
		/* A whole-head deadline, not an idle timer. */
		ac->ac_flags |= ADMIN_F_HEAD_STARTED;
		admin_timer_set(
		    ac, ac->ac_admin->a_gw->g_conf->cf_header_timeout);
	}
	r = http1_parse_request(in, &ac->ac_admin->a_limits, m, &err);
	if (r == 0)
		return;
	if (r < 0) {
		http1_msg_reset(m);
		admin_error(ac, http1_err_status(err), http1_err_code(err),
		    NULL, "%s", http1_err_message(err));
		return;
	}
	evtimer_del(ac->ac_timer);
	if (m->m_minor == 1)
		ac->ac_flags |= (m->m_flags & HTTP1_F_CONN_CLOSE)
		    ? 0
		    : ADMIN_F_KEEPALIVE;
	else if (m->m_flags & HTTP1_F_CONN_KEEPALIVE)
		ac->ac_flags |= ADMIN_F_KEEPALIVE;
	ac->ac_method = xstrndup(m->m_method, m->m_method_len);
	if (strcmp(ac->ac_method, "HEAD") == 0)
		ac->ac_flags |= ADMIN_F_HEAD_REQ;
	if (m->m_body == HTTP1_BODY_NONE ||
	    (m->m_body == HTTP1_BODY_LENGTH && m->m_content_length == 0))
		ac->ac_flags |= ADMIN_F_BODY_DONE;

	target = xstrndup(m->m_target, m->m_target_len);
	ac->ac_path = xstrndup(target, strcspn(target, "?"));
	free(target);
	if (*ac->ac_path != '/') {
		admin_error(ac, 400, "bad_request_target", NULL,
		    "The request target must be a path such as /v1/sandboxes.");
		return;
	}
	if (strcmp(ac->ac_path, "/healthz") != 0 &&
	    strcmp(ac->ac_path, "/readyz") != 0 && !admin_authorized(ac)) {
		admin_error(ac, 401, "unauthorized",
		    "WWW-Authenticate: Bearer realm=\"akgateway admin\"\r\n",
		    "The admin API needs the header 'Authorization: Bearer "
		    "<admin token>' with the token from admin.token in the "
		    "configuration.");
		return;
	}
	if (m->m_body == HTTP1_BODY_LENGTH &&
	    m->m_content_length > ADMIN_MAX_BODY) {
		admin_error(ac, 413, "body_too_large", NULL,
		    "The request body of %llu bytes is larger than the %d "
		    "bytes the admin API accepts.",
		    (unsigned long long)m->m_content_length, ADMIN_MAX_BODY);
		return;
	}
	ac->ac_left = m->m_body == HTTP1_BODY_LENGTH ? m->m_content_length : 0;
	if (!(ac->ac_flags & ADMIN_F_BODY_DONE) &&
	    (m->m_flags & HTTP1_F_EXPECT_CONTINUE))
		evbuffer_add_printf(bufferevent_get_output(ac->ac_bev),
		    "HTTP/1.1 100 Continue\r\n\r\n");
	ac->ac_state = ADMIN_S_BODY;
	admin_timer_set(ac, ADMIN_BODY_TIMEOUT_MS);
	admin_read_body(ac);
}

/* Start the next request on a kept-alive connection. */
static void
admin_next(struct admin_conn *ac)
{
	ac->ac_state = ADMIN_S_HEAD;
	admin_timer_set(ac, ac->ac_admin->a_gw->g_conf->cf_keepalive_timeout);
	ac->ac_flags &= ~ADMIN_F_READ_HELD;
	bufferevent_enable(ac->ac_bev, EV_READ);
	/* A pipelined request may already be buffered. */
	admin_read_head(ac);
}

/* Bytes from the client. */
static void
admin_read_cb(struct bufferevent *bev, void *arg)
{
	struct admin_conn *ac = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	switch (ac->ac_state) {
	case ADMIN_S_HEAD:
		admin_read_head(ac);
		break;
	case ADMIN_S_BODY:
		admin_read_body(ac);
		break;
	case ADMIN_S_CLOSING:
		/* Lingering: discard what the client still sends. */
		evbuffer_drain(in, evbuffer_get_length(in));
		break;
	case ADMIN_S_WRITE:
	case ADMIN_S_DEAD:
		break;
	}
	/* The same rule as every HTTP/1 loop: no reading what cannot move. */
	if (ac->ac_state == ADMIN_S_HEAD || ac->ac_state == ADMIN_S_BODY)
		evio_read_hold(bev, &ac->ac_flags, ADMIN_F_READ_HELD);
}

/* The output drained: go on with the next request, or close. */
static void
admin_write_cb(struct bufferevent *bev, void *arg)
{
	struct admin_conn *ac = arg;

	if (evbuffer_get_length(bufferevent_get_output(bev)) != 0)
		return;
	switch (ac->ac_state) {
	case ADMIN_S_WRITE:
		admin_next(ac);
		break;
	case ADMIN_S_CLOSING:
		if (ac->ac_flags & ADMIN_F_LINGER)
			break;
		if (ac->ac_flags & ADMIN_F_CLIENT_EOF) {
			admin_close(ac, "done");
			break;
		}
		/* Drain the client's input so the answer is not reset. */
		ac->ac_flags |= ADMIN_F_LINGER;
		shutdown(bufferevent_getfd(bev), SHUT_WR);
		bufferevent_enable(bev, EV_READ);
		admin_timer_set(ac, ADMIN_LINGER_MS);
		break;
	default:
		break;
	}
}

/* EOF or error from the client. */
static void
admin_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct admin_conn *ac = arg;
	char why[128];

	if (ac->ac_state == ADMIN_S_DEAD)
		return;
	if (what & BEV_EVENT_ERROR) {
		snprintf(why, sizeof why, "client error: %s",
		    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		admin_close(ac, why);
		return;
	}
	if (!(what & BEV_EVENT_EOF))
		return;
	ac->ac_flags |= ADMIN_F_CLIENT_EOF;
	switch (ac->ac_state) {
	case ADMIN_S_HEAD:
		admin_close(ac,
		    (ac->ac_flags & ADMIN_F_HEAD_STARTED)
			? "client closed mid-head"
			: "client closed");
		break;
	case ADMIN_S_BODY:
		admin_close(ac, "client closed mid-body");
		break;
	case ADMIN_S_WRITE:
		/* Half-close: finish the answer, then close. */
		ac->ac_state = ADMIN_S_CLOSING;
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			admin_close(ac, "done");
		break;
	case ADMIN_S_CLOSING:
		if ((ac->ac_flags & ADMIN_F_LINGER) ||
		    evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			admin_close(ac, "done");
		break;
	case ADMIN_S_DEAD:
		break;
	}
}

/* The head deadline, body, write, idle or linger timer fired. */
static void
admin_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	struct admin_conn *ac = arg;

	(void)fd;
	(void)events;
	switch (ac->ac_state) {
	case ADMIN_S_HEAD:
		if (!(ac->ac_flags & ADMIN_F_HEAD_STARTED)) {
			admin_close(ac, "keep-alive idle timeout");
			break;
		}
		admin_error(ac, 408, "request_timeout", NULL,
		    "The request head did not arrive within %llums.",
		    (unsigned long long)
			ac->ac_admin->a_gw->g_conf->cf_header_timeout);
		break;
	case ADMIN_S_BODY:
		admin_error(ac, 408, "request_timeout", NULL,
		    "The request body did not arrive within %dms.",
		    ADMIN_BODY_TIMEOUT_MS);
		break;
	case ADMIN_S_WRITE:
	case ADMIN_S_CLOSING:
		admin_close(ac,
		    (ac->ac_flags & ADMIN_F_LINGER)
			? "linger timeout"
			: "timeout writing a response");
		break;
	case ADMIN_S_DEAD:
		break;
	}
}

/* A new connection to the admin listener. */
static void
admin_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct admin *a = arg;
	struct gw *g = a->a_gw;
	struct admin_conn *ac;
	int one = 1;

	(void)lev;
	(void)salen;
	if (a->a_nconns >= ADMIN_MAX_CONNS) {
		log_warn("admin: %d connections already open; closing a new "
			 "one",
		    ADMIN_MAX_CONNS);
		evutil_closesocket(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	ac = xcalloc(1, sizeof *ac);
	ac->ac_admin = a;
	ac->ac_base = g->g_base;
	ac->ac_id = ++a->a_ids;
	addr_format(sa, ac->ac_peer, sizeof ac->ac_peer);
	ac->ac_body = evbuffer_new();
	ac->ac_bev = bufferevent_socket_new(
	    g->g_base, fd, BEV_OPT_CLOSE_ON_FREE);
	ac->ac_timer = evtimer_new(g->g_base, admin_timer_cb, ac);
	bufferevent_setcb(
	    ac->ac_bev, admin_read_cb, admin_write_cb, admin_event_cb, ac);
	bufferevent_setwatermark(ac->ac_bev, EV_READ, 0, ADMIN_READ_HIGH);
	bufferevent_setwatermark(ac->ac_bev, EV_WRITE, 0, 0);
	TAILQ_INSERT_TAIL(&a->a_conns, ac, ac_entry);
	a->a_nconns++;
	ac->ac_state = ADMIN_S_HEAD;
	admin_timer_set(ac, g->g_conf->cf_keepalive_timeout);
	bufferevent_enable(ac->ac_bev, EV_READ | EV_WRITE);
}

/* The accept pause is over. */
static void
admin_resume_cb(evutil_socket_t fd, short events, void *arg)
{
	struct admin *a = arg;

	(void)fd;
	(void)events;
	evconnlistener_enable(a->a_lev);
}

/* accept(2) failed: pause for a second when out of descriptors. */
static void
admin_listen_error_cb(struct evconnlistener *lev, void *arg)
{
	struct admin *a = arg;
	struct timeval tv;
	int e = EVUTIL_SOCKET_ERROR();

	if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
		log_warn("admin listener: %s; pausing accept for %dms",
		    strerror(e), ADMIN_PAUSE_MS);
		evconnlistener_disable(lev);
		clock_msec_to_tv(ADMIN_PAUSE_MS, &tv);
		evtimer_add(a->a_pause, &tv);
		return;
	}
	log_warn("admin listener: accept: %s", strerror(e));
}

/* Is the address a loopback address? */
static int
admin_is_loopback(const struct sockaddr_storage *ss)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)ss;
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)ss;

	if (ss->ss_family == AF_INET)
		return ((ntohl(sin->sin_addr.s_addr) >> 24) == 127);
	if (ss->ss_family == AF_INET6)
		return (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));
	return (0);
}

/*
 * Open the admin listener when admin.address is set; -1 with *cause if it
 * cannot bind.
 */
int
admin_start(struct gw *g, char **cause)
{
	struct gw_config *cf = g->g_conf;
	struct gw_listen *l = &cf->cf_admin;
	struct admin *a;
	int open_api;

	if (l->l_address == NULL)
		return (0);
	a = xcalloc(1, sizeof *a);
	a->a_gw = g;
	a->a_limits.max_head = ADMIN_MAX_HEAD;
	a->a_limits.max_line = ADMIN_MAX_LINE;
	a->a_limits.max_headers = ADMIN_MAX_HEADERS;
	TAILQ_INIT(&a->a_conns);
	a->a_lev = evconnlistener_new_bind(g->g_base, admin_accept_cb, a,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    64, (struct sockaddr *)&l->l_ss, (int)l->l_sslen);
	if (a->a_lev == NULL) {
		xasprintf(cause, "cannot listen on %s for the admin API: %s",
		    l->l_address, strerror(errno));
		free(a);
		return (-1);
	}
	evconnlistener_set_error_cb(a->a_lev, admin_listen_error_cb);
	a->a_pause = evtimer_new(g->g_base, admin_resume_cb, a);
	g->g_admin = a;
	open_api = cf->cf_admin_token == NULL || *cf->cf_admin_token == '\0';
	log_info("admin API on http://%s%s", l->l_address,
	    open_api ? " (no admin.token: open to anyone who can connect)"
		     : "");
	if (open_api && !admin_is_loopback(&l->l_ss))
		log_warn("admin API on %s is not on loopback and has no "
			 "admin.token: anyone who can reach it can change the "
			 "sandbox directory",
		    l->l_address);
	return (0);
}

/* Close the admin listener and its connections. */
void
admin_stop(struct gw *g)
{
	struct admin *a = g->g_admin;
	struct admin_conn *ac;

	if (a == NULL)
		return;
	while ((ac = TAILQ_FIRST(&a->a_conns)) != NULL)
		admin_close(ac, "gateway stopping");
	evconnlistener_free(a->a_lev);
	event_free(a->a_pause);
	free(a);
	g->g_admin = NULL;
}
