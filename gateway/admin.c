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
#include <event2/event.h>
#include <event2/listener.h>
#include <jansson.h>
#include <openssl/crypto.h>

#include "addr.h"
#include "alloc.h"
#include "config.h"
#include "gw.h"
#include "stream.h"
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

/* The prefix of the sandbox directory's paths. */
#define ADMIN_SANDBOXES "/v1/sandboxes"

/*
 * A connection to the admin listener.  The HTTP/1 engine (h1s.c) runs it;
 * this is the request being answered.
 */
struct admin_conn {
	TAILQ_ENTRY(admin_conn) ac_entry;
	struct admin *ac_admin;
	struct h1s *ac_h1s;
	int ac_flags;
#define ADMIN_F_BODY 0x01 /* reading the request body */
#define ADMIN_F_LISTED 0x02 /* on a_conns */
	char ac_peer[64]; /* ip:port */
	const struct head *ac_head; /* the request's, while it is answered */
	struct evbuffer *ac_body; /* the request body, at most 1 MiB */
	char *ac_method;
	char *ac_path; /* target without the query */
	char *ac_note; /* what a change did, for the log line */
};

/* The admin listener and its connections. */
struct admin {
	struct gw *a_gw;
	struct evconnlistener *a_lev;
	struct event *a_pause; /* EMFILE back-off (listener_backoff) */
	struct http1_limits a_limits;
	struct h1s_conf a_h1conf;
	TAILQ_HEAD(, admin_conn) a_conns;
	size_t a_nconns;
	uint64_t a_ids;
};

static void admin_error(struct admin_conn *, int status, const char *code,
    const struct hfield *extra, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Forget the current request. */
static void
admin_reset_request(struct admin_conn *ac)
{
	if (ac->ac_body != NULL)
		evbuffer_drain(ac->ac_body, evbuffer_get_length(ac->ac_body));
	free(ac->ac_method);
	free(ac->ac_path);
	free(ac->ac_note);
	ac->ac_method = ac->ac_path = ac->ac_note = NULL;
	ac->ac_head = NULL;
	ac->ac_flags &= ~ADMIN_F_BODY;
}

/* Log the request's one line: never a header, a query or the token. */
static void
admin_log(const struct admin_conn *ac, int status, const char *code)
{
	log_info("admin %s: \"%s %s\" %d%s%s%s%s", ac->ac_peer,
	    ac->ac_method != NULL ? ac->ac_method : "-",
	    ac->ac_path != NULL ? ac->ac_path : "-", status,
	    code != NULL ? " error=" : "", code != NULL ? code : "",
	    ac->ac_note != NULL ? " " : "",
	    ac->ac_note != NULL ? ac->ac_note : "");
}

/*
 * Send a whole response through the engine's sink: status, content type
 * and body (NULL for none), plus an extra field (or NULL).  Logs the
 * request; the engine goes on with the next one or closes (a body left
 * unread closes the connection).
 */
static void
admin_reply(struct admin_conn *ac, int status, const char *ctype,
    struct evbuffer *body, const struct hfield *extra, const char *code)
{
	struct sink *sk = h1s_sink(ac->ac_h1s);
	struct hfield f[3];
	struct head h;
	size_t n = 0, len = body != NULL ? evbuffer_get_length(body) : 0;

	memset(&h, 0, sizeof h);
	if (status != 204)
		hfield_set(&f[n++], "Content-Type", ctype);
	hfield_set(&f[n++], "Cache-Control", "no-store");
	if (extra != NULL)
		f[n++] = *extra;
	h.h_status = status;
	h.h_version = 11;
	h.h_fields = f;
	h.h_nfields = n;
	if (status == 204)
		h.h_flags |= HEAD_F_NO_BODY;
	else {
		h.h_flags |= HEAD_F_LENGTH;
		h.h_length = len;
	}
	if (!h1s_body_done(ac->ac_h1s))
		h.h_flags |= HEAD_F_CLOSE;
	if (sink_head(sk, &h) != 0)
		return;
	admin_log(ac, status, code);
	admin_reset_request(ac);
	if (len > 0 && sink_body(sk, body, len) != 0)
		return;
	sink_end(sk);
}

/* Send a JSON response; takes the reference to obj. */
static void
admin_reply_json(struct admin_conn *ac, int status, json_t *obj,
    const struct hfield *extra, const char *code)
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
 * {"status":...,"code":...,"message":...} (errpage.c), plus an extra
 * field (or NULL).
 */
static void
admin_error(struct admin_conn *ac, int status, const char *code,
    const struct hfield *extra, const char *fmt, ...)
{
	struct errpage ep;
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	memset(&ep, 0, sizeof ep);
	ep.ep_status = status;
	ep.ep_code = code;
	ep.ep_message = msg;
	ep.ep_fields = extra;
	ep.ep_nfields = extra != NULL ? 1 : 0;
	if (h1s_body_done(ac->ac_h1s))
		ep.ep_flags |= ERRPAGE_F_KEEPALIVE;
	admin_log(ac, status, code);
	admin_reset_request(ac);
	errpage_send(h1s_sink(ac->ac_h1s), &ep);
	free(msg);
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
		if (pr->pr_protocol != GW_PROTO_HTTP1)
			json_object_set_new(p, "protocol",
			    json_string(pr->pr_protocol == GW_PROTO_H2C ? "h2c"
									: "auto"));
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
admin_authorized(const struct admin *a, const struct head *req)
{
	const char *token = a->a_gw->g_conf->cf_admin_token;
	const struct hfield *h;
	const char *p;
	size_t want, got;
	int diff;

	if (token == NULL || *token == '\0')
		return (1);
	if ((h = head_find(req, "authorization")) == NULL)
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
	struct hfield f;

	hfield_set(&f, "Allow", allow);
	admin_error(ac, 405, "method_not_allowed", &f,
	    "%s does not allow %s; use %s.", ac->ac_path, ac->ac_method, allow);
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
	if (gw_draining(g)) {
		admin_error(ac, 503, "draining", NULL,
		    "The gateway is draining: it finishes the requests in "
		    "flight and accepts no new connections.");
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

	sb->sb_flags |= SB_F_API; /* a reload leaves it alone (reload.c) */
	reload_put(g, sb->sb_id);
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
	reload_deleted(g, sb); /* a reload does not bring it back */
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

/* POST /v1/reload: read the configuration file again (reload.c). */
static void
admin_reload(struct admin_conn *ac)
{
	struct gw *g = ac->ac_admin->a_gw;
	char *cause = NULL;

	if (strcmp(ac->ac_method, "POST") != 0) {
		admin_bad_method(ac, "POST");
		return;
	}
	if (reload_run(g, "the admin API", &cause) != 0) {
		admin_error(ac, 422, "invalid_config", NULL,
		    "The configuration was not reloaded and the running one "
		    "stays: %s",
		    cause);
		free(cause);
		return;
	}
	xasprintf(&ac->ac_note, "reloaded %s", g->g_conf->cf_file);
	admin_reply_json(ac, 200,
	    json_pack("{s:s,s:s,s:I,s:I}", "status", "reloaded", "file",
		g->g_conf->cf_file, "reloads", (json_int_t)g->g_reloads,
		"sandboxes", (json_int_t)g->g_dir->d_count),
	    NULL, NULL);
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
	else if (strcmp(path, "/v1/reload") == 0)
		admin_reload(ac);
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
		    "The admin API has no %s; see /v1/sandboxes, /v1/reload, "
		    "/metrics, /healthz and /readyz.",
		    path);
}

/* Read the request body into ac_body, then answer. */
static void
admin_read_body(struct admin_conn *ac)
{
	enum http1_err err;
	ssize_t r;

	/* Room for one byte too many, to tell "too large". */
	r = h1s_body_read(ac->ac_h1s, ac->ac_body,
	    ADMIN_MAX_BODY + 1 - evbuffer_get_length(ac->ac_body), &err);
	if (r < 0) {
		if (err != HTTP1_E_NONE)
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
	if (!h1s_body_done(ac->ac_h1s))
		return;
	ac->ac_flags &= ~ADMIN_F_BODY;
	admin_dispatch(ac);
}

/* A request head: check it and the credentials, then read the body. */
static void
admin_head_cb(
    struct h1s *h, void *arg, const struct head *req, const struct http1_msg *m)
{
	struct admin_conn *ac = arg;
	struct hfield f;
	char *target;

	(void)h;
	(void)m;
	ac->ac_head = req;
	ac->ac_method = xstrndup(req->h_method, req->h_method_len);
	target = xstrndup(req->h_target, req->h_target_len);
	ac->ac_path = xstrndup(target, strcspn(target, "?"));
	free(target);
	if (*ac->ac_path != '/') {
		admin_error(ac, 400, "bad_request_target", NULL,
		    "The request target must be a path such as /v1/sandboxes.");
		return;
	}
	if (strcmp(ac->ac_path, "/healthz") != 0 &&
	    strcmp(ac->ac_path, "/readyz") != 0 &&
	    !admin_authorized(ac->ac_admin, req)) {
		hfield_set(
		    &f, "WWW-Authenticate", "Bearer realm=\"akgateway admin\"");
		admin_error(ac, 401, "unauthorized", &f,
		    "The admin API needs the header 'Authorization: Bearer "
		    "<admin token>' with the token from admin.token in the "
		    "configuration.");
		return;
	}
	if ((req->h_flags & HEAD_F_LENGTH) && req->h_length > ADMIN_MAX_BODY) {
		admin_error(ac, 413, "body_too_large", NULL,
		    "The request body of %llu bytes is larger than the %d "
		    "bytes the admin API accepts.",
		    (unsigned long long)req->h_length, ADMIN_MAX_BODY);
		return;
	}
	ac->ac_flags |= ADMIN_F_BODY;
	admin_read_body(ac);
}

/* Request body bytes arrived. */
static void
admin_body_cb(struct h1s *h, void *arg)
{
	struct admin_conn *ac = arg;

	(void)h;
	if (ac->ac_flags & ADMIN_F_BODY)
		admin_read_body(ac);
}

/* The request ended without an answer of ours (the client went away). */
static void
admin_error_cb(struct h1s *h, void *arg, const char *why)
{
	(void)h;
	(void)why;
	admin_reset_request(arg);
}

/* The engine refused a request itself (a bad head, 408): its line. */
static void
admin_log_cb(struct h1s *h, void *arg, const struct h1s_refusal *r)
{
	struct admin_conn *ac = arg;

	(void)h;
	admin_log(ac, r->hr_status, r->hr_code);
}

/* The connection is closing: off the list, which may be freed first. */
static void
admin_close_cb(struct h1s *h, void *arg, const char *reason)
{
	struct admin_conn *ac = arg;
	struct admin *a = ac->ac_admin;

	(void)h;
	(void)reason;
	if (!(ac->ac_flags & ADMIN_F_LISTED))
		return;
	ac->ac_flags &= ~ADMIN_F_LISTED;
	TAILQ_REMOVE(&a->a_conns, ac, ac_entry);
	a->a_nconns--;
}

/* Free a connection, from the loop. */
static void
admin_free_cb(void *arg)
{
	struct admin_conn *ac = arg;

	admin_reset_request(ac);
	evbuffer_free(ac->ac_body);
	free(ac);
}

static const struct h1s_hooks admin_hooks = {
	.on_head = admin_head_cb,
	.on_body = admin_body_cb,
	.on_error = admin_error_cb,
	.on_log = admin_log_cb,
	.on_close = admin_close_cb,
	.on_free = admin_free_cb,
};

/* A new connection to the admin listener. */
static void
admin_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct admin *a = arg;
	struct gw *g = a->a_gw;
	struct admin_conn *ac;
	struct h1x *x;
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
	addr_format(sa, ac->ac_peer, sizeof ac->ac_peer);
	ac->ac_body = evbuffer_new();
	x = h1x_stream_new(stream_new(g->g_base, fd, NULL, STREAM_O_CLOSE),
	    ADMIN_READ_HIGH, 0);
	TAILQ_INSERT_TAIL(&a->a_conns, ac, ac_entry);
	ac->ac_flags |= ADMIN_F_LISTED;
	a->a_nconns++;
	ac->ac_h1s = h1s_new(g->g_base, x, &a->a_h1conf, &admin_hooks, ac,
	    ++a->a_ids, ac->ac_peer);
}

/* accept(2) failed: pause for a second when out of descriptors. */
static void
admin_listen_error_cb(struct evconnlistener *lev, void *arg)
{
	struct admin *a = arg;

	listener_backoff(lev, a->a_pause, "admin listener");
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

/* Bind the admin listener to l for admin a; NULL with *cause. */
static struct evconnlistener *
admin_listen(
    struct gw *g, struct admin *a, const struct gw_listen *l, char **cause)
{
	struct evconnlistener *lev;
	int fd;

	/* A socket an old process (SIGUSR2) or systemd passed, else ours. */
	if ((fd = upgrade_take_admin(&l->l_ss, l->l_sslen)) != -1)
		lev = listener_wrap(g->g_base, admin_accept_cb, a, fd);
	else
		lev = evconnlistener_new_bind(g->g_base, admin_accept_cb, a,
		    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
			LEV_OPT_CLOSE_ON_EXEC,
		    64, (const struct sockaddr *)&l->l_ss, (int)l->l_sslen);
	if (lev == NULL) {
		xasprintf(cause, "cannot listen on %s for the admin API: %s",
		    l->l_address, strerror(errno));
		return (NULL);
	}
	evconnlistener_set_error_cb(lev, admin_listen_error_cb);
	return (lev);
}

/* Point admin a's listener at lev (NULL: none) and log what it serves. */
static void
admin_set_listener(struct admin *a, struct evconnlistener *lev)
{
	struct gw *g = a->a_gw;
	const struct gw_config *cf = g->g_conf;
	const struct gw_listen *l = &cf->cf_admin;
	int open_api;

	if (a->a_lev != NULL) {
		evconnlistener_free(a->a_lev);
		event_free(a->a_pause);
		a->a_lev = NULL;
		a->a_pause = NULL;
	}
	if (lev == NULL)
		return;
	a->a_lev = lev;
	evconnlistener_set_cb(lev, admin_accept_cb, a);
	a->a_pause = listener_pause_new(g->g_base, lev);
	open_api = cf->cf_admin_token == NULL || *cf->cf_admin_token == '\0';
	log_info("admin API on http://%s%s", l->l_address,
	    open_api ? " (no admin.token: open to anyone who can connect)"
		     : "");
	if (open_api && !admin_is_loopback(&l->l_ss))
		log_warn("admin API on %s is not on loopback and has no "
			 "admin.token: anyone who can reach it can change the "
			 "sandbox directory",
		    l->l_address);
}

/* The admin API's timers follow the configuration. */
static void
admin_apply(struct admin *a, const struct gw_config *cf)
{
	a->a_h1conf.hc_head_ms = cf->cf_header_timeout;
	a->a_h1conf.hc_idle_ms = cf->cf_keepalive_timeout;
}

/* A new admin API (no listener yet) of loop g. */
static struct admin *
admin_new(struct gw *g)
{
	struct admin *a;

	a = xcalloc(1, sizeof *a);
	a->a_gw = g;
	a->a_limits.max_head = ADMIN_MAX_HEAD;
	a->a_limits.max_line = ADMIN_MAX_LINE;
	a->a_limits.max_headers = ADMIN_MAX_HEADERS;
	a->a_h1conf.hc_name = "admin";
	a->a_h1conf.hc_limits = &a->a_limits;
	a->a_h1conf.hc_body_ms = ADMIN_BODY_TIMEOUT_MS;
	a->a_h1conf.hc_write_ms = ADMIN_WRITE_TIMEOUT_MS;
	a->a_h1conf.hc_linger_ms = ADMIN_LINGER_MS;
	admin_apply(a, g->g_conf);
	TAILQ_INIT(&a->a_conns);
	g->g_admin = a;
	return (a);
}

/*
 * Open the admin listener when admin.address is set; -1 with *cause if it
 * cannot bind.
 */
int
admin_start(struct gw *g, char **cause)
{
	const struct gw_listen *l = &g->g_conf->cf_admin;
	struct evconnlistener *lev;
	struct admin *a;

	if (l->l_address == NULL)
		return (0);
	a = admin_new(g);
	if ((lev = admin_listen(g, a, l, cause)) == NULL) {
		free(a);
		g->g_admin = NULL;
		return (-1);
	}
	admin_set_listener(a, lev);
	return (0);
}

/*
 * A reload to configuration cf, first step: when admin.address moves, bind
 * the new address into *levp (else NULL); -1 with *cause if it cannot,
 * and nothing changed.
 */
int
admin_reload_prepare(struct gw *g, const struct gw_config *cf,
    struct evconnlistener **levp, char **cause)
{
	const struct gw_listen *ol = &g->g_conf->cf_admin, *nl = &cf->cf_admin;

	*levp = NULL;
	if (nl->l_address == NULL ||
	    (ol->l_address != NULL && g->g_admin != NULL &&
		g->g_admin->a_lev != NULL && ol->l_sslen == nl->l_sslen &&
		memcmp(&ol->l_ss, &nl->l_ss, nl->l_sslen) == 0))
		return (0);
	*levp = admin_listen(g, g->g_admin, nl, cause);
	return (*levp == NULL ? -1 : 0);
}

/*
 * The reload is done (g->g_conf is the new configuration): the admin API
 * moves to lev from admin_reload_prepare, or stops listening when
 * admin.address is gone.  Its connections, the one asking for the reload
 * among them, go on.
 */
void
admin_reload_commit(struct gw *g, struct evconnlistener *lev)
{
	struct admin *a = g->g_admin;

	if (a == NULL && lev == NULL)
		return;
	if (a == NULL)
		a = admin_new(g);
	admin_apply(a, g->g_conf);
	if (lev != NULL)
		admin_set_listener(a, lev);
	else if (g->g_conf->cf_admin.l_address == NULL && a->a_lev != NULL) {
		log_info("admin API no longer listening");
		admin_set_listener(a, NULL);
	}
}

/* The admin listener's socket, or -1 (an upgrade passes it on). */
int
admin_fd(struct gw *g)
{
	if (g->g_admin == NULL || g->g_admin->a_lev == NULL)
		return (-1);
	return (evconnlistener_get_fd(g->g_admin->a_lev));
}

/* Close the admin listener and its connections. */
void
admin_stop(struct gw *g)
{
	struct admin *a = g->g_admin;
	struct admin_conn *ac;

	if (a == NULL)
		return;
	/* Each leaves the list now and is freed from the loop. */
	while ((ac = TAILQ_FIRST(&a->a_conns)) != NULL)
		h1s_close(ac->ac_h1s, "gateway stopping");
	admin_set_listener(a, NULL);
	free(a);
	g->g_admin = NULL;
}
