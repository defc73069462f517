/*
 * Error responses the gateway itself sends: a status, a machine-readable
 * code in X-Gateway-Error and the body, and a sentence a person can act on.
 * The body is JSON, or a small HTML page for a browser navigation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "alloc.h"
#include "gw.h"

const struct gw_error gw_err_no_route[] = { { 404, "no_route" } };
const struct gw_error gw_err_bad_host[] = { { 400, "bad_host" } };
const struct gw_error gw_err_ambiguous_host[] = { { 400, "ambiguous_host" } };
const struct gw_error gw_err_sandbox_not_found[] = { { 404,
    "sandbox_not_found" } };
const struct gw_error gw_err_port_not_published[] = { { 404,
    "port_not_published" } };
const struct gw_error gw_err_port_not_listening[] = { { 502,
    "port_not_listening" } };
const struct gw_error gw_err_upstream_timeout[] = { { 504,
    "upstream_timeout" } };
const struct gw_error gw_err_upstream_closed[] = { { 502, "upstream_closed" } };
const struct gw_error gw_err_bad_response[] = { { 502,
    "bad_upstream_response" } };
const struct gw_error gw_err_too_many_connections[] = { { 429,
    "too_many_connections" } };
const struct gw_error gw_err_body_too_large[] = { { 413, "body_too_large" } };
const struct gw_error gw_err_request_timeout[] = { { 408, "request_timeout" } };
const struct gw_error gw_err_bad_path[] = { { 400, "bad_path" } };
const struct gw_error gw_err_tunnel_not_configured[] = { { 404,
    "tunnel_not_configured" } };
const struct gw_error gw_err_no_resources[] = { { 503, "out_of_resources" } };
const struct gw_error gw_err_upstream_reset[] = { { 502, "upstream_reset" } };
const struct gw_error gw_err_grpc_needs_http2[] = { { 400,
    "grpc_needs_http2" } };
const struct gw_error gw_err_unsupported_protocol[] = { { 501,
    "unsupported_protocol" } };
const struct gw_error gw_err_sandbox_unreachable[] = { { 502,
    "sandbox_unreachable" } };
const struct gw_error gw_err_upstream_unreachable[] = { { 502,
    "upstream_unreachable" } };
const struct gw_error gw_err_bad_target[] = { { 400, "bad_request_target" } };
const struct gw_error gw_err_tunnel_needs_http1[] = { { 400,
    "tunnel_needs_http1" } };

/*
 * Send head h with body, whose length it gets, through sink s (the HTTP/1
 * one writes it with h1sink.c's one writer of heads).  Returns 0, or -1
 * when the sink is gone.
 */
static int
errpage_emit(struct sink *s, struct head *h, struct evbuffer *body)
{
	size_t len = evbuffer_get_length(body);

	h->h_flags |= HEAD_F_LENGTH;
	h->h_length = len;
	if (sink_head(s, h) != 0 || (len > 0 && sink_body(s, body, len) != 0))
		return (-1);
	return (sink_end(s));
}

/* A response head of ours: status, fields, and close unless keepalive. */
static void
errpage_head(
    struct head *h, int status, const struct hfield *f, size_t n, int keepalive)
{
	memset(h, 0, sizeof *h);
	h->h_status = status;
	h->h_version = 11;
	h->h_fields = f;
	h->h_nfields = n;
	if (!keepalive)
		h->h_flags |= HEAD_F_CLOSE;
}

/*
 * A redirect of the gateway's own (301, 302, 307, 308) to location, with
 * an empty body, through a sink.  Returns 0, or -1 when it is gone.
 */
int
errpage_moved(struct sink *out, const char *request_id, int status,
    const char *location, int keepalive)
{
	int rv;
	struct evbuffer *body = evbuffer_new();
	struct hfield f[3];
	struct head h;
	size_t n = 0;

	hfield_set(&f[n++], "Location", location);
	hfield_set(&f[n++], "Cache-Control", "no-store");
	if (request_id != NULL)
		hfield_set(&f[n++], "X-Request-Id", request_id);
	errpage_head(&h, status, f, n, keepalive);
	rv = errpage_emit(out, &h, body);
	evbuffer_free(body);
	return (rv);
}

/* Escape text for HTML. */
static void
errpage_html_escape(struct evbuffer *out, const char *s)
{
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '<':
			evbuffer_add(out, "&lt;", 4);
			break;
		case '>':
			evbuffer_add(out, "&gt;", 4);
			break;
		case '&':
			evbuffer_add(out, "&amp;", 5);
			break;
		case '"':
			evbuffer_add(out, "&quot;", 6);
			break;
		default:
			evbuffer_add(out, s, 1);
			break;
		}
	}
}

/*
 * Append the answer that sets a cookie (the access-token exchange for
 * browsers) and sends the browser on to location: a 303, or with page a
 * 200 page of ours that goes on by a meta refresh (and a link), so that
 * the browser's next request comes from this origin.  Through a sink;
 * returns 0, or -1 when it is gone.
 */
int
errpage_redirect(struct sink *out, const char *request_id, const char *location,
    const char *set_cookie, int page, int keepalive)
{
	struct evbuffer *body = evbuffer_new();
	struct hfield f[6];
	struct head h;
	size_t n;
	int rv;

	if (page) {
		evbuffer_add_printf(body,
		    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
		    "<meta http-equiv=\"refresh\" content=\"0;url=");
		errpage_html_escape(body, location);
		evbuffer_add_printf(body,
		    "\"><title>Signed in</title></head>\n"
		    "<body><p>Signed in; <a href=\"");
		errpage_html_escape(body, location);
		evbuffer_add_printf(
		    body, "\">continue</a>.</p></body></html>\n");
	}
	n = 0;
	if (!page)
		hfield_set(&f[n++], "Location", location);
	hfield_set(&f[n++], "Set-Cookie", set_cookie);
	hfield_set(&f[n++], "Cache-Control", "no-store");
	hfield_set(&f[n++], "Referrer-Policy", "no-referrer");
	if (page)
		hfield_set(&f[n++], "Content-Type", "text/html; charset=utf-8");
	if (request_id != NULL)
		hfield_set(&f[n++], "X-Request-Id", request_id);
	errpage_head(&h, page ? 200 : 303, f, n, keepalive);
	rv = errpage_emit(out, &h, body);
	evbuffer_free(body);
	return (rv);
}

/* What a person can do next, by error code; the last entry is the default. */
static const struct {
	const char *h_code;
	const char *h_next;
} errpage_hints[] = {
	{ "no_route",
	    "Open a port URL as shown above, with the sandbox's id and a port "
	    "it publishes." },
	{ "bad_host", "Correct the address as shown above, then try again." },
	{ "bad_path", "Correct the address as shown above, then try again." },
	{ "ambiguous_host",
	    "Use the path form /{sandbox}/{port}/, which names both without "
	    "doubt." },
	{ "sandbox_not_found",
	    "Check the sandbox id in the address: the sandbox may have been "
	    "stopped or deleted." },
	{ "port_not_published",
	    "Use a port the sandbox publishes, or ask its owner to publish "
	    "this one." },
	{ "port_not_listening",
	    "Start the server in the sandbox on this port (listening on "
	    "0.0.0.0, or 127.0.0.1 for a local sandbox), then reload this "
	    "page." },
	{ "upstream_unreachable",
	    "The sandbox may be stopping or its network down: check that it "
	    "runs, then reload this page." },
	{ "sandbox_unreachable",
	    "The sandbox may be stopping: check that it runs, then reload "
	    "this page." },
	{ "upstream_timeout",
	    "The server in the sandbox is slow or stuck: reload in a "
	    "moment, or look at its logs." },
	{ "upstream_closed",
	    "The server in the sandbox failed on this request: look at its "
	    "logs, then reload this page." },
	{ "bad_upstream_response",
	    "The server in the sandbox sent a malformed answer: look at its "
	    "logs." },
	{ "unauthorized",
	    "Open the link again with a fresh access token, or ask the "
	    "sandbox's owner for one." },
	{ "forbidden",
	    "This token is for another sandbox or port: get one for this "
	    "address." },
	{ "host_form_required",
	    "Open the sandbox at its host-form address "
	    "({port}-{sandbox}.domain) instead." },
	{ "credentials_need_tls",
	    "Open the address with https:// instead of http://." },
	{ "cross_origin_credential",
	    "Open the address directly, not from another site's page." },
	{ "too_many_connections",
	    "Too many requests at once: wait a moment, then reload this "
	    "page." },
	{ "tunnel_not_connected",
	    "Start aktunnel for this sandbox on the developer's machine, "
	    "then try again." },
	{ NULL,
	    "Reload this page. If it keeps failing, give the request id "
	    "below to whoever runs this gateway." },
};

/* The inline style sheet: no external resource, light and dark. */
static const char errpage_css[] =
    ":root{color-scheme:light dark;--bg:#f4f5f7;--fg:#1c2230;"
    "--card:#fff;--muted:#5a6477;--line:#dfe3ea;--accent:#c2410c}"
    "@media (prefers-color-scheme:dark){:root{--bg:#0f1217;--fg:#e5e8ee;"
    "--card:#181d25;--muted:#98a2b3;--line:#2a313c;--accent:#fb923c}}"
    ".s5{--accent:#dc2626}"
    "@media (prefers-color-scheme:dark){.s5{--accent:#f87171}}"
    "*{box-sizing:border-box}"
    "body{margin:0;min-height:100vh;display:flex;align-items:center;"
    "justify-content:center;background:var(--bg);color:var(--fg);"
    "font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,"
    "'Helvetica Neue',Arial,sans-serif}"
    "main{width:min(40rem,calc(100% - 2rem));margin:2rem 0;"
    "background:var(--card);border:1px solid var(--line);"
    "border-top:4px solid var(--accent);border-radius:10px;"
    "padding:2rem 2.25rem;box-shadow:0 1px 3px rgba(0,0,0,.08)}"
    ".st{margin:0;color:var(--accent);font-weight:700;font-size:.95rem;"
    "letter-spacing:.04em;text-transform:uppercase}"
    "h1{margin:.25rem 0 1rem;font-size:1.6rem;line-height:1.25}"
    ".msg{margin:0 0 1rem;font-size:1.05rem}"
    ".next{margin:0 0 1.5rem;padding:.75rem 1rem;border-radius:6px;"
    "background:var(--bg);border-left:3px solid var(--accent)}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:.35rem 1rem;"
    "margin:0;font-size:.9rem}"
    "dt{color:var(--muted)}dd{margin:0;overflow-wrap:anywhere}"
    "code{font:.9em ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}"
    "footer{margin-top:1.5rem;padding-top:1rem;border-top:1px solid "
    "var(--line);color:var(--muted);font-size:.85rem}"
    "a{color:inherit}";

/* The next-step sentence for code. */
static const char *
errpage_hint(const char *code)
{
	size_t i;

	for (i = 0; errpage_hints[i].h_code != NULL; i++) {
		if (strcmp(errpage_hints[i].h_code, code) == 0)
			break;
	}
	return (errpage_hints[i].h_next);
}

/* Append one row of the details list, its value escaped, in code. */
static void
errpage_html_row(struct evbuffer *body, const char *name, const char *value)
{
	evbuffer_add_printf(body, "<dt>%s</dt><dd><code>", name);
	errpage_html_escape(body, value);
	evbuffer_add_printf(body, "</code></dd>");
}

/* Append the HTML page of error ep to body. */
static void
errpage_html(struct evbuffer *body, const struct errpage *ep)
{
	const char *reason = http1_reason(ep->ep_status);
	char port[16];

	evbuffer_add_printf(body,
	    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
	    "<meta name=\"viewport\" content=\"width=device-width,"
	    "initial-scale=1\"><meta name=\"color-scheme\" "
	    "content=\"light dark\">"
	    "<title>%d %s</title><style>%s</style></head>\n"
	    "<body class=\"s%d\"><main>\n<p class=\"st\">Error %d</p>\n"
	    "<h1>%s</h1>\n<p class=\"msg\">",
	    ep->ep_status, reason, errpage_css, ep->ep_status / 100,
	    ep->ep_status, reason);
	errpage_html_escape(body, ep->ep_message);
	evbuffer_add_printf(body, "</p>\n<p class=\"next\">");
	errpage_html_escape(body, errpage_hint(ep->ep_code));
	evbuffer_add_printf(body, "</p>\n<dl>");
	errpage_html_row(body, "Code", ep->ep_code);
	if (ep->ep_sandbox != NULL)
		errpage_html_row(body, "Sandbox", ep->ep_sandbox);
	if (ep->ep_port > 0) {
		snprintf(port, sizeof port, "%d", ep->ep_port);
		errpage_html_row(body, "Port", port);
	}
	if (ep->ep_request_id != NULL)
		errpage_html_row(body, "Request id", ep->ep_request_id);
	evbuffer_add_printf(body,
	    "</dl>\n<footer>akgateway &middot; <a href=\"\">try "
	    "again</a></footer>\n</main></body></html>\n");
}

/*
 * The gRPC status a refusal of HTTP status stands for: what the client
 * can do about it (RFC-less; gRPC's own status codes).
 */
static int
errpage_grpc_status(int status)
{
	switch (status) {
	case 400:
		return (3); /* INVALID_ARGUMENT */
	case 401:
		return (16); /* UNAUTHENTICATED */
	case 403:
		return (7); /* PERMISSION_DENIED */
	case 404:
		return (5); /* NOT_FOUND */
	case 413:
	case 431:
		return (8); /* RESOURCE_EXHAUSTED */
	case 429:
	case 502:
	case 503:
	case 504:
		return (14); /* UNAVAILABLE: worth a retry */
	default:
		return (status < 500 ? 3 : 13); /* INVALID_ARGUMENT, INTERNAL */
	}
}

/*
 * Send a gRPC client a trailers-only answer of ours (HTTP 200, no body,
 * grpc-status and grpc-message in the one HEADERS frame, as gRPC clients
 * read an error), with the gateway's code in X-Gateway-Error.  The
 * message is percent-encoded as gRPC's wire format says.  Returns 0, or
 * -1 when the sink is gone.
 */
int
errpage_grpc(struct sink *to, const char *request_id, int grpc_status,
    const char *code, const char *message)
{
	static const char hex[] = "0123456789ABCDEF";
	struct hfield f[5];
	struct head h;
	char st[8], *msg, *p;
	const unsigned char *m;
	size_t n = 0;
	int rv;

	msg = p = xmalloc(3 * strlen(message) + 1);
	for (m = (const unsigned char *)message; *m != '\0'; m++) {
		if (*m >= 0x20 && *m <= 0x7e && *m != '%')
			*p++ = (char)*m;
		else {
			*p++ = '%';
			*p++ = hex[*m >> 4];
			*p++ = hex[*m & 0xf];
		}
	}
	*p = '\0';
	snprintf(st, sizeof st, "%d", grpc_status);
	hfield_set(&f[n++], "content-type", "application/grpc");
	hfield_set(&f[n++], "grpc-status", st);
	hfield_set(&f[n++], "grpc-message", msg);
	hfield_set(&f[n++], "x-gateway-error", code);
	if (request_id != NULL)
		hfield_set(&f[n++], "x-request-id", request_id);
	errpage_head(&h, 200, f, n, 1);
	h.h_flags |= HEAD_F_NO_BODY;
	rv = sink_head(to, &h) != 0 ? -1 : sink_end(to);
	free(msg);
	return (rv);
}

/*
 * Send error ep through sink to: JSON, or with ERRPAGE_F_HTML a page for a
 * browser, with the code in X-Gateway-Error and ep's own fields after
 * ours.  Returns 0, or -1 when the sink is gone.
 */
static int
errpage_out(struct sink *to, const struct errpage *ep)
{
	struct evbuffer *body;
	struct hfield *f;
	struct head h;
	int html = ep->ep_flags & ERRPAGE_F_HTML, rv;
	json_t *obj;
	size_t n = 0, i;
	char *js;

	if (ep->ep_flags & ERRPAGE_F_GRPC)
		return (errpage_grpc(to, ep->ep_request_id,
		    errpage_grpc_status(ep->ep_status), ep->ep_code,
		    ep->ep_message));
	body = evbuffer_new();
	if (html) {
		errpage_html(body, ep);
	} else {
		obj = json_pack("{s:i, s:s, s:s}", "status", ep->ep_status,
		    "code", ep->ep_code, "message", ep->ep_message);
		if (obj == NULL) /* message not UTF-8 */
			obj = json_pack("{s:i, s:s, s:s}", "status",
			    ep->ep_status, "code", ep->ep_code, "message",
			    http1_reason(ep->ep_status));
		js = json_dumps(obj, JSON_COMPACT);
		evbuffer_add_printf(body, "%s\n", js);
		free(js);
		json_decref(obj);
	}
	f = xcalloc(6 + ep->ep_nfields, sizeof *f);
	hfield_set(&f[n++], "Content-Type",
	    html ? "text/html; charset=utf-8" : "application/json");
	hfield_set(&f[n++], "Cache-Control", "no-store");
	hfield_set(&f[n++], "X-Gateway-Error", ep->ep_code);
	if (ep->ep_request_id != NULL)
		hfield_set(&f[n++], "X-Request-Id", ep->ep_request_id);
	/* Our page loads nothing, and nothing may be injected into it. */
	if (html)
		hfield_set(&f[n++], "Content-Security-Policy",
		    "default-src 'none'; style-src 'unsafe-inline'");
	/* 426 refuses a WebSocket version: say which one we speak. */
	if (ep->ep_status == 426)
		hfield_set(&f[n++], "Sec-WebSocket-Version", "13");
	for (i = 0; i < ep->ep_nfields; i++)
		f[n++] = ep->ep_fields[i];
	errpage_head(
	    &h, ep->ep_status, f, n, (ep->ep_flags & ERRPAGE_F_KEEPALIVE) != 0);
	rv = errpage_emit(to, &h, body);
	free(f);
	evbuffer_free(body);
	return (rv);
}

/*
 * Send error ep through a response sink, which decides what a HEAD
 * request gets.  Without ERRPAGE_F_KEEPALIVE the head asks the transport
 * to close after it.  Returns 0, or -1 when the sink is gone.
 */
int
errpage_send(struct sink *s, const struct errpage *ep)
{
	return (errpage_out(s, ep));
}

/*
 * Does request head h come from a browser navigation, which gets the HTML
 * page rather than JSON (Sec-Fetch-Mode: navigate, or an Accept naming
 * text/html)?  NULL, for a request not parsed, gets JSON.
 */
int
errpage_wants_html(const struct head *h)
{
	const struct hfield *f;

	if (h == NULL)
		return (0);
	if ((f = head_find(h, "sec-fetch-mode")) != NULL &&
	    strcasecmp(f->value, "navigate") == 0)
		return (1);
	if ((f = head_find(h, "accept")) != NULL &&
	    strstr(f->value, "text/html") != NULL)
		return (1);
	return (0);
}

