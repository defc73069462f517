/*
 * Error responses the gateway itself sends: a status, a machine-readable
 * code in X-Gateway-Error and the body, and a sentence a person can act on.
 * The body is JSON, or a small HTML page for a browser navigation.
 */
#include <stdlib.h>
#include <string.h>

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
const struct gw_error gw_err_sandbox_unreachable[] = { { 502,
    "sandbox_unreachable" } };
const struct gw_error gw_err_bad_target[] = { { 400, "bad_request_target" } };

/*
 * A redirect of the gateway's own (301, 302, 307, 308) to location, with
 * an empty body.
 */
void
errpage_moved(struct evbuffer *out, const char *request_id, int status,
    const char *location, int keepalive)
{
	evbuffer_add_printf(out,
	    "HTTP/1.1 %d %s\r\nLocation: %s\r\nContent-Length: 0\r\n"
	    "Cache-Control: no-store\r\n%s%s%s%s\r\n",
	    status, http1_reason(status), location,
	    request_id != NULL ? "X-Request-Id: " : "",
	    request_id != NULL ? request_id : "",
	    request_id != NULL ? "\r\n" : "",
	    keepalive ? "" : "Connection: close\r\n");
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
 * the browser's next request comes from this origin.
 */
void
errpage_redirect(struct evbuffer *out, const char *request_id,
    const char *location, const char *set_cookie, int page, int keepalive)
{
	struct evbuffer *body = evbuffer_new();

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
	evbuffer_add_printf(out,
	    "HTTP/1.1 %s\r\n"
	    "%s%s%s"
	    "Set-Cookie: %s\r\n"
	    "Cache-Control: no-store\r\n"
	    "Referrer-Policy: no-referrer\r\n"
	    "%s"
	    "Content-Length: %zu\r\n"
	    "%s%s%s"
	    "%s"
	    "\r\n",
	    page ? "200 OK" : "303 See Other",
	    page ? "" : "Location: ", page ? "" : location, page ? "" : "\r\n",
	    set_cookie,
	    page ? "Content-Type: text/html; charset=utf-8\r\n" : "",
	    evbuffer_get_length(body),
	    request_id != NULL ? "X-Request-Id: " : "",
	    request_id != NULL ? request_id : "",
	    request_id != NULL ? "\r\n" : "",
	    keepalive ? "" : "Connection: close\r\n");
	evbuffer_add_buffer(out, body);
	evbuffer_free(body);
}

/*
 * Append a whole error response to out.  request_id, when not NULL, is
 * sent as X-Request-Id; head_only leaves the body out (a HEAD request) but
 * keeps its Content-Length.
 */
void
errpage_write(struct evbuffer *out, const char *request_id, int status,
    const char *code, const char *message, int html, int head_only,
    int keepalive)
{
	struct evbuffer *body;
	json_t *obj;
	char *js;

	body = evbuffer_new();
	if (html) {
		evbuffer_add_printf(body,
		    "<!DOCTYPE html>\n<html><head>"
		    "<meta charset=\"utf-8\"><title>%d %s</title></head>\n"
		    "<body><h1>%d %s</h1>\n<p>",
		    status, http1_reason(status), status,
		    http1_reason(status));
		errpage_html_escape(body, message);
		evbuffer_add_printf(body,
		    "</p>\n<p><code>%s</code></p>\n"
		    "<hr><p>akgateway</p></body></html>\n",
		    code);
	} else {
		obj = json_pack("{s:i, s:s, s:s}", "status", status, "code",
		    code, "message", message);
		if (obj == NULL) /* message not UTF-8 */
			obj = json_pack("{s:i, s:s, s:s}", "status", status,
			    "code", code, "message", http1_reason(status));
		js = json_dumps(obj, JSON_COMPACT);
		evbuffer_add_printf(body, "%s\n", js);
		free(js);
		json_decref(obj);
	}
	evbuffer_add_printf(out,
	    "HTTP/1.1 %d %s\r\n"
	    "Content-Type: %s\r\n"
	    "Content-Length: %zu\r\n"
	    "Cache-Control: no-store\r\n"
	    "X-Gateway-Error: %s\r\n"
	    "%s%s%s"
	    "%s%s"
	    "\r\n",
	    status, http1_reason(status),
	    html ? "text/html; charset=utf-8" : "application/json",
	    evbuffer_get_length(body), code,
	    request_id != NULL ? "X-Request-Id: " : "",
	    request_id != NULL ? request_id : "",
	    request_id != NULL ? "\r\n" : "",
	    /* 426 refuses a WebSocket version: say which one we speak. */
	    status == 426 ? "Sec-WebSocket-Version: 13\r\n" : "",
	    keepalive ? "" : "Connection: close\r\n");
	if (!head_only)
		evbuffer_add_buffer(out, body);
	evbuffer_free(body);
}
