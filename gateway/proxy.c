/*
 * The HTTP/1.1 relay between a client connection and an upstream
 * connection: request head rewriting, bodies streamed in both directions
 * with watermarks, and response framing chosen for the client.
 */
#include <netinet/in.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "evb.h"
#include "gw.h"
#include "splicer.h"
#include "stream.h"
#include "tls.h"

/*
 * Output watermarks: a writer stops reading its source when the other
 * side's output buffer holds PROXY_HIGH bytes and resumes below PROXY_LOW.
 */
#define PROXY_HIGH (256 * 1024)
#define PROXY_LOW (64 * 1024)
/* Most data moved in one step, so one connection cannot starve others. */
#define PROXY_STEP (256 * 1024)
/* A TLS response up to this size is sent as one record (one write). */
#define PROXY_TLS_SMALL (12 * 1024)
/* Request bodies with less than this left are not worth a splice(2). */
#define PROXY_SPLICE_MIN UPSTREAM_SPLICE_MIN

static void proxy_splice_try(struct gw_xchg *, struct upstream *);
static void proxy_upstream_ready(struct upstream *, void *);
static void proxy_upstream_failed(
    struct upstream *, const struct gw_error *, const char *, void *);
static void proxy_upstream_event(struct upstream *, short, void *);
static void proxy_response_timeout(struct upstream *, void *);
static void proxy_grpc_deadline(struct upstream *, void *);
static void proxy_upstream_detach(struct upstream *, void *);
static void proxy_upstream_drained(struct upstream *, void *);
static int proxy_interim(struct upstream *, const struct head *, void *);
static int proxy_response_head(struct upstream *, const struct head *, void *);
static int
proxy_response_body(struct upstream *, struct evbuffer *, size_t, void *);
static void proxy_response_trailers(
    struct upstream *, const struct hfield *, size_t, void *);
static void proxy_response_complete(struct upstream *, void *);
static void proxy_response_error(
    struct upstream *, const struct gw_error *, const char *, void *);

/* What a client connection's upstream tells it (upstream.c). */
const struct upstream_owner proxy_owner = {
	.uo_ready = proxy_upstream_ready,
	.uo_failed = proxy_upstream_failed,
	.uo_event = proxy_upstream_event,
	.uo_timeout = proxy_response_timeout,
	.uo_deadline = proxy_grpc_deadline,
	.uo_detach = proxy_upstream_detach,
	.uo_drained = proxy_upstream_drained,
	.uo_interim = proxy_interim,
	.uo_head = proxy_response_head,
	.uo_body = proxy_response_body,
	.uo_trailers = proxy_response_trailers,
	.uo_done = proxy_response_complete,
	.uo_error = proxy_response_error,
};

struct proxy_name {
	const char *pn_name;
	size_t pn_len;
};
#define PROXY_NAME(s) \
	{ \
		s, sizeof(s) - 1 \
	}

/*
 * Hop-by-hop fields, never forwarded in either direction, and the fields
 * the gateway writes itself on requests, replacing the client's.
 */
static const struct proxy_name proxy_hop[] = { PROXY_NAME("connection"),
	PROXY_NAME("keep-alive"), PROXY_NAME("proxy-connection"),
	PROXY_NAME("te"), PROXY_NAME("trailer"),
	PROXY_NAME("transfer-encoding"), PROXY_NAME("upgrade"),
	PROXY_NAME("proxy-authorization"), PROXY_NAME("proxy-authenticate"),
	PROXY_NAME("content-length"), PROXY_NAME("x-forwarded-proto"),
	PROXY_NAME("x-forwarded-host"), PROXY_NAME("x-forwarded-prefix") };

/* Is h called name (len bytes, lowercase)? */
static inline int
proxy_named(const struct hfield *h, const char *name, size_t len)
{
	return (h->name_len == len && strncasecmp(h->name, name, len) == 0);
}

/* How many Connection fields m has: proxy_is_hop reads them when any. */
static size_t
proxy_nconnection(const struct head *m)
{
	size_t i, n = 0;

	for (i = 0; i < m->h_nfields; i++)
		n += proxy_named(&m->h_fields[i], "connection", 10);
	return (n);
}

/*
 * Is field h hop-by-hop for message m (the fixed list, or named in one of
 * m's nconn Connection fields)?
 */
static int
proxy_is_hop(const struct head *m, const struct hfield *h, size_t nconn)
{
	const struct hfield *ch;
	size_t i;

	for (i = 0; i < sizeof proxy_hop / sizeof proxy_hop[0]; i++) {
		if (proxy_named(h, proxy_hop[i].pn_name, proxy_hop[i].pn_len))
			return (1);
	}
	for (i = 0; nconn > 0 && i < m->h_nfields; i++) {
		ch = &m->h_fields[i];
		if (!proxy_named(ch, "connection", 10))
			continue;
		nconn--;
		if (http1_list_has(ch->value, ch->value_len, h->name))
			return (1);
	}
	return (0);
}

/*
 * Where the request head for the upstream is written: HTTP/1 wire bytes
 * ("Name: value\r\n"), or for an HTTP/2 upstream each field's lowercase
 * name and value, NUL-ended, with their offsets, made into hfields
 * afterwards (proxy_out_fields).  The same rewrite writes both.
 */
#define PROXY_OUT_INLINE 32
struct proxy_out {
	struct strbuf *po_sb;
	int po_h2;
	size_t po_n; /* HTTP/2: fields written */
	size_t po_cap;
	size_t *po_off; /* HTTP/2: per field, name and value offsets */
	size_t po_off_inline[2 * PROXY_OUT_INLINE];
};

/* Start a field called name (len bytes): its value is appended next. */
static void
proxy_field_begin(struct proxy_out *po, const char *name, size_t len)
{
	struct strbuf *sb = po->po_sb;
	size_t i;

	if (!po->po_h2) {
		strbuf_add(sb, name, len);
		strbuf_add(sb, ": ", 2);
		return;
	}
	if (po->po_n == po->po_cap) {
		po->po_cap *= 2;
		if (po->po_off == po->po_off_inline) {
			po->po_off = xcalloc(2 * po->po_cap, sizeof *po->po_off);
			memcpy(po->po_off, po->po_off_inline,
			    sizeof po->po_off_inline);
		} else
			po->po_off = xreallocarray(
			    po->po_off, 2 * po->po_cap, sizeof *po->po_off);
	}
	po->po_off[2 * po->po_n] = sb->sb_len;
	strbuf_grow(sb, len + 1);
	for (i = 0; i < len; i++) /* HTTP/2 names are lowercase */
		sb->sb_buf[sb->sb_len + i] =
		    (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32
							    : name[i]);
	sb->sb_buf[sb->sb_len + len] = '\0';
	sb->sb_len += len + 1;
	po->po_off[2 * po->po_n + 1] = sb->sb_len;
}

/* End the field proxy_field_begin started. */
static void
proxy_field_end(struct proxy_out *po)
{
	if (!po->po_h2) {
		strbuf_add(po->po_sb, "\r\n", 2);
		return;
	}
	strbuf_add(po->po_sb, "", 1);
	po->po_n++;
}

/* A whole field. */
static void
proxy_field(struct proxy_out *po, const char *name, size_t nlen,
    const char *value, size_t vlen)
{
	if (!po->po_h2) {
		strbuf_add_header(po->po_sb, name, nlen, value, vlen);
		return;
	}
	proxy_field_begin(po, name, nlen);
	strbuf_add(po->po_sb, value, vlen);
	proxy_field_end(po);
}

/*
 * The HTTP/2 fields written, as hfields into f (po_n of them, pointing
 * into the scratch buffer until it is written again).
 */
static void
proxy_out_fields(const struct proxy_out *po, struct hfield *f)
{
	const char *b = po->po_sb->sb_buf;
	size_t i, no, vo;

	for (i = 0; i < po->po_n; i++) {
		no = po->po_off[2 * i];
		vo = po->po_off[2 * i + 1];
		f[i].name = b + no;
		f[i].name_len = vo - no - 1;
		f[i].value = b + vo;
		f[i].value_len = strlen(b + vo);
	}
}

/*
 * A field "name: v1, v2, last" joining every field called name (len
 * bytes) in m (they form one list, RFC 9110 section 5.3) with last at
 * the end.
 */
static void
proxy_add_list(struct proxy_out *po, const struct head *m, const char *name,
    size_t len, const char *last)
{
	const struct hfield *h;
	size_t i;

	proxy_field_begin(po, name, len);
	for (i = 0; i < m->h_nfields; i++) {
		h = &m->h_fields[i];
		if (h->value_len == 0 || !proxy_named(h, name, len))
			continue;
		strbuf_add(po->po_sb, h->value, h->value_len);
		strbuf_add(po->po_sb, ", ", 2);
	}
	strbuf_adds(po->po_sb, last);
	proxy_field_end(po);
}

/* Copy the client's Upgrade field and say Connection: Upgrade. */
static void
proxy_add_upgrade(const struct head *m, struct proxy_out *po)
{
	const struct hfield *h;

	if ((h = head_find(m, "upgrade")) != NULL)
		proxy_field(po, "Upgrade", 7, h->value, h->value_len);
	proxy_field(po, "Connection", 10, "Upgrade", 7);
}

/*
 * Take the client's X-Request-Id when it is a sane token (up to 36 visible
 * characters), else make one: 32 random hex digits.
 */
void
proxy_request_id(struct gw_xchg *x)
{
	static uint64_t seed, counter;
	const struct hfield *h;
	uint64_t n, v;
	size_t i;

	h = head_find(&x->x_head, "x-request-id");
	if (h != NULL && h->value_len > 0 &&
	    h->value_len < sizeof x->x_request_id &&
	    strspn(h->value,
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWX"
		"YZ0123456789-_.:") == h->value_len) {
		memcpy(x->x_request_id, h->value, h->value_len + 1);
		return;
	}
	/*
	 * Unique, not secret: 64 random bits chosen once per process, then
	 * a counter (a random number per request costs a getrandom call).
	 */
	if (__atomic_load_n(&seed, __ATOMIC_RELAXED) == 0) {
		arc4random_buf(&v, sizeof v);
		v |= 1;
		n = 0;
		__atomic_compare_exchange_n(
		    &seed, &n, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
	}
	v = __atomic_load_n(&seed, __ATOMIC_RELAXED);
	n = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
	for (i = 0; i < 16; i++) {
		x->x_request_id[i] =
		    "0123456789abcdef"[(v >> (60 - 4 * i)) & 0xf];
		x->x_request_id[16 + i] =
		    "0123456789abcdef"[(n >> (60 - 4 * i)) & 0xf];
	}
	x->x_request_id[32] = '\0';
}

/*
 * Is the request native gRPC: content-type application/grpc, alone or
 * with a "+format" or parameters (not gRPC-Web, which is HTTP/1-able)?
 */
int
proxy_is_grpc(const struct head *m)
{
	const struct hfield *h = head_find(m, "content-type");

	if (h == NULL || h->value_len < 16 ||
	    strncasecmp(h->value, "application/grpc", 16) != 0)
		return (0);
	return (h->value_len == 16 || h->value[16] == '+' ||
	    h->value[16] == ';');
}

/*
 * The deadline a gRPC request carries (grpc-timeout: up to 8 digits and
 * a unit, H M S m u n), in ms rounded up; 0 for none or a malformed one.
 */
static uint64_t
proxy_grpc_timeout(const struct head *m)
{
	const struct hfield *h;
	uint64_t v = 0, ms;
	size_t i;

	if (!proxy_is_grpc(m) || (h = head_find(m, "grpc-timeout")) == NULL ||
	    h->value_len < 2 || h->value_len > 9)
		return (0);
	for (i = 0; i + 1 < h->value_len; i++) {
		if (h->value[i] < '0' || h->value[i] > '9')
			return (0);
		v = v * 10 + (uint64_t)(h->value[i] - '0');
	}
	switch (h->value[i]) {
	case 'H':
		ms = v * 3600 * 1000;
		break;
	case 'M':
		ms = v * 60 * 1000;
		break;
	case 'S':
		ms = v * 1000;
		break;
	case 'm':
		ms = v;
		break;
	case 'u':
		ms = (v + 999) / 1000;
		break;
	case 'n':
		ms = (v + 999999) / 1000000;
		break;
	default:
		return (0);
	}
	return (ms == 0 ? 1 : ms);
}

/*
 * Does x go to its port over HTTP/2: an h2c port, or native gRPC to an
 * auto one?  WebSockets upgrade over HTTP/1.1 whatever the port says.
 */
static int
proxy_wants_h2(const struct gw_xchg *x)
{
	if (x->x_flags & XCHG_F_WS_REQ)
		return (0);
	switch (x->x_rule->pr_protocol) {
	case GW_PROTO_H2C:
		return (1);
	case GW_PROTO_AUTO:
		return (proxy_is_grpc(&x->x_head));
	default:
		return (0);
	}
}

/* Is the request a WebSocket upgrade (GET, Connection: upgrade, websocket)? */
static int
proxy_is_websocket(const struct head *m)
{
	const struct hfield *h;

	if (!(m->h_flags & HEAD_F_UPGRADE) || !head_method_is(m, "GET"))
		return (0);
	h = head_find(m, "upgrade");
	return (
	    h != NULL && http1_list_has(h->value, h->value_len, "websocket"));
}

/*
 * The request's fields for the upstream: the client's end-to-end ones
 * without credentials, and the gateway's own (Host, X-Request-Id, the
 * X-Forwarded-* set, Via, the body's framing for HTTP/1).
 */
static void
proxy_request_fields(struct gw_xchg *x, struct proxy_out *po)
{
	const struct head *m = &x->x_head;
	const struct hfield *h;
	const struct gw_port_rule *pr = x->x_rule;
	struct conn *c = x->x_conn;
	struct strbuf *sb = po->po_sb;
	const char *p;
	size_t i, nconn = proxy_nconnection(m);
	char *cookie, ip[INET6_ADDRSTRLEN];

	/*
	 * Host is the gateway's to write: the authority of an absolute-form
	 * target replaces the client's field (RFC 9112 section 3.2.2), and
	 * a Connection field naming Host cannot remove it.
	 */
	if (pr->pr_host_rewrite == NULL && x->x_host != NULL)
		proxy_field(po, "Host", 4, x->x_host, strlen(x->x_host));
	for (i = 0; i < m->h_nfields; i++) {
		h = &m->h_fields[i];
		if (proxy_is_hop(m, h, nconn))
			continue;
		if (proxy_named(h, "host", 4))
			continue; /* written above */
		if (proxy_named(h, "x-forwarded-for", 15) ||
		    proxy_named(h, "via", 3) ||
		    proxy_named(h, "x-request-id", 12))
			continue; /* rewritten below */
		/* Credentials never travel further than the gateway. */
		if (auth_is_credential_header(c->c_gw->g_conf, h))
			continue;
		if (proxy_named(h, "cookie", 6)) {
			if ((cookie = auth_strip_cookie(c->c_gw->g_conf,
				 h->value, h->value_len)) != NULL) {
				proxy_field(
				    po, "Cookie", 6, cookie, strlen(cookie));
				free(cookie);
			}
			continue;
		}
		proxy_field(po, h->name, h->name_len, h->value, h->value_len);
	}
	if (x->x_flags & XCHG_F_WS_REQ)
		proxy_add_upgrade(m, po);
	/* gRPC servers want to hear that trailers are understood. */
	if (po->po_h2 && (h = head_find(m, "te")) != NULL &&
	    http1_list_has(h->value, h->value_len, "trailers"))
		proxy_field(po, "te", 2, "trailers", 8);
	proxy_field(po, "X-Request-Id", 12, x->x_request_id,
	    strlen(x->x_request_id));
	if (x->x_prefix != NULL)
		proxy_field(po, "X-Forwarded-Prefix", 18, x->x_prefix,
		    strlen(x->x_prefix));
	if (pr->pr_host_rewrite != NULL) {
		proxy_field_begin(po, "Host", 4);
		if ((p = strstr(pr->pr_host_rewrite, "${port}")) != NULL) {
			strbuf_add(sb, pr->pr_host_rewrite,
			    (size_t)(p - pr->pr_host_rewrite));
			strbuf_add_u64(sb, (uint64_t)x->x_port);
			strbuf_adds(sb, p + 7);
		} else
			strbuf_adds(sb, pr->pr_host_rewrite);
		proxy_field_end(po);
	}
	if (x->x_host != NULL)
		proxy_field(po, "X-Forwarded-Host", 16, x->x_host,
		    strlen(x->x_host));
	if (c->c_flags & CONN_F_TLS)
		proxy_field(po, "X-Forwarded-Proto", 17, "https", 5);
	else
		proxy_field(po, "X-Forwarded-Proto", 17, "http", 4);
	proxy_add_list(
	    po, m, "X-Forwarded-For", 15, conn_peer_ip(c, ip, sizeof ip));
	proxy_add_list(po, m, "Via", 3,
	    m->h_version == 10	 ? "1.0 akgateway"
		: m->h_version == 20 ? "2 akgateway"
				     : "1.1 akgateway");
	switch (x->x_req_body.b_kind) {
	case HTTP1_BODY_LENGTH:
		proxy_field_begin(po, "Content-Length", 14);
		strbuf_add_u64(sb, m->h_length);
		proxy_field_end(po);
		break;
	case HTTP1_BODY_CHUNKED:
		/* HTTP/2 frames the body itself. */
		if (!po->po_h2)
			proxy_field(po, "Transfer-Encoding", 17, "chunked", 7);
		break;
	default:
		/* A body-less POST keeps its explicit zero length. */
		if (head_find(m, "content-length") != NULL)
			proxy_field(po, "Content-Length", 14, "0", 1);
		break;
	}
}

/* Write the HTTP/1.1 request head for the upstream. */
static void
proxy_write_request_head(struct gw_xchg *x, struct evbuffer *out)
{
	const struct head *m = &x->x_head;
	struct proxy_out po;

	memset(&po, 0, sizeof po);
	po.po_sb = &x->x_conn->c_gw->g_head;
	strbuf_reset(po.po_sb);
	strbuf_add(po.po_sb, m->h_method, m->h_method_len);
	strbuf_add(po.po_sb, " ", 1);
	strbuf_adds(po.po_sb, x->x_target);
	strbuf_add(po.po_sb, " HTTP/1.1\r\n", 11);
	proxy_request_fields(x, &po);
	strbuf_add(po.po_sb, "\r\n", 2);
	evbuffer_add(out, po.po_sb->sb_buf, po.po_sb->sb_len);
}

/*
 * Submit the request head on an HTTP/2 upstream stream: the same fields,
 * Host as :authority.
 */
static void
proxy_submit_request_h2(struct gw_xchg *x)
{
	const struct head *m = &x->x_head;
	struct proxy_out po;
	struct hfield f_inline[PROXY_OUT_INLINE], *f;
	struct head rh;
	size_t i, n;

	memset(&po, 0, sizeof po);
	po.po_sb = &x->x_conn->c_gw->g_head;
	po.po_h2 = 1;
	po.po_cap = PROXY_OUT_INLINE;
	po.po_off = po.po_off_inline;
	strbuf_reset(po.po_sb);
	proxy_request_fields(x, &po);
	/* Most requests' fields fit on the stack: no allocation. */
	f = po.po_n <= PROXY_OUT_INLINE ? f_inline
					: xcalloc(po.po_n, sizeof *f);
	proxy_out_fields(&po, f);
	memset(&rh, 0, sizeof rh);
	rh.h_method = m->h_method;
	rh.h_method_len = m->h_method_len;
	rh.h_target = x->x_target;
	rh.h_target_len = strlen(x->x_target);
	for (i = n = 0; i < po.po_n; i++) {
		if (strcmp(f[i].name, "host") == 0) {
			rh.h_authority = f[i].value;
			rh.h_authority_len = f[i].value_len;
			continue;
		}
		if (strcmp(f[i].name, "content-length") == 0) {
			rh.h_flags |= HEAD_F_LENGTH;
			rh.h_length = strtoull(f[i].value, NULL, 10);
		}
		f[n++] = f[i];
	}
	rh.h_fields = f;
	rh.h_nfields = n;
	upstream_h2_request(x->x_up, &rh, x->x_req_body.b_kind !=
		HTTP1_BODY_NONE);
	if (f != f_inline)
		free(f);
	if (po.po_off != po.po_off_inline)
		free(po.po_off);
}

/*
 * Check the chunked framing of the body bytes that arrived with the head,
 * before anything goes upstream: a malformed body is refused
 * before the upstream sees a head it would then see cut short.  Returns 0,
 * or -1 with *err set.
 */
static int
proxy_check_buffered_chunks(struct gw_xchg *x, enum http1_err *err)
{
	struct evbuffer *in = stream_input(x->x_conn->c_stream), *copy, *sink;
	struct evbuffer_iovec iov[8];
	struct http1_chunked ck;
	size_t moved, before;
	int i, n, r = 0;

	if (evbuffer_get_length(in) == 0)
		return (0);
	/*
	 * The check reads the input's own memory, by reference: nothing is
	 * copied, and the input is not touched while it runs.  The few
	 * chains of a head's read (iov) are enough to tell.
	 */
	n = evbuffer_peek(in, -1, NULL, iov, 8);
	if (n > 8)
		n = 8;
	copy = evbuffer_new();
	sink = evbuffer_new();
	for (i = 0; i < n; i++)
		evbuffer_add_reference(
		    copy, iov[i].iov_base, iov[i].iov_len, NULL, NULL);
	memset(&ck, 0, sizeof ck);
	do {
		before = evbuffer_get_length(copy);
		r = http1_chunked_decode(
		    &ck, copy, sink, PROXY_STEP, &moved, err);
		evbuffer_drain(sink, evbuffer_get_length(sink));
	} while (r == 0 && evbuffer_get_length(copy) != before &&
	    evbuffer_get_length(copy) != 0);
	evbuffer_free(sink);
	evbuffer_free(copy);
	return (r < 0 ? -1 : 0);
}

/* Begin relaying the current request of conn c. */
void
proxy_start(struct gw_xchg *x)
{
	struct conn *c = x->x_conn;
	struct gw_body *b = &x->x_req_body;
	enum http1_err err = HTTP1_E_NONE;
	int h2;

	if (x->x_req_kind == HTTP1_BODY_CHUNKED && xchg_is_h1(x) &&
	    !(x->x_flags & XCHG_F_RETRIED) &&
	    proxy_check_buffered_chunks(x, &err) != 0) {
		xchg_refuse(x, NULL, err, "%s", http1_err_message(err));
		return;
	}
	memset(b, 0, sizeof *b);
	b->b_kind = x->x_req_kind;
	b->b_left = x->x_req_length;
	x->x_state = XCHG_S_BODY;
	if (proxy_is_websocket(&x->x_head))
		x->x_flags |= XCHG_F_WS_REQ;
	h2 = proxy_wants_h2(x);
	/* HTTP/2 frames a body of unknown length itself. */
	b->b_out_chunked = b->b_kind == HTTP1_BODY_CHUNKED && !h2;
	/*
	 * The client must keep sending a body, and keep reading the answer.
	 * Once its request is whole it owes us nothing (proxy_request_body).
	 */
	x->x_ops->xo_timeouts(x, b->b_kind != HTTP1_BODY_NONE, 1);
	if (x->x_up_start_us == 0)
		x->x_up_start_us = clock_mono_usec();
	x->x_up = (h2 ? upstream_h2_get : upstream_get)(c->c_gw, x->x_sandbox,
	    x->x_port, x->x_flags & XCHG_F_RETRIED,
	    x->x_uo != NULL ? x->x_uo : &proxy_owner, x);
	if (x->x_up->u_state == UP_S_ACTIVE)
		proxy_upstream_ready(x->x_up, x);
}

/* The upstream is connected (or came from the pool): send the request. */
static void
proxy_upstream_ready(struct upstream *up, void *arg)
{
	struct gw_xchg *x = arg;
	struct conn *c = x->x_conn;
	struct gw_config *cf = c->c_gw->g_conf;
	struct timeval tv;

	up->u_flags |= UP_F_SENT;
	if (up->u_flags & UP_F_H2) {
		proxy_submit_request_h2(x);
		upstream_read_response(up, x->x_flags & XCHG_F_HEAD_REQ);
		upstream_h2_timeouts(up, cf->cf_idle_timeout,
		    cf->cf_response_timeout, proxy_grpc_timeout(&x->x_head));
		proxy_request_body(x);
		return;
	}
	proxy_write_request_head(x, stream_output(up->u_stream));
	upstream_read_response(up, x->x_flags & XCHG_F_HEAD_REQ);
	stream_setwatermark(up->u_stream, EV_WRITE, PROXY_LOW, 0);
	/* No progress either way for this long ends the exchange. */
	clock_msec_to_tv(cf->cf_idle_timeout, &tv);
	stream_set_timeouts(up->u_stream, &tv, &tv);
	if (cf->cf_response_timeout != 0) {
		clock_msec_to_tv(cf->cf_response_timeout, &tv);
		evtimer_add(up->u_timer, &tv);
	}
	stream_enable(up->u_stream, EV_READ | EV_WRITE);
	proxy_request_body(x);
}

/*
 * Relay request body bytes from the client to the upstream: the engine
 * de-frames them (h1s_body_read), chunked ones are chunked again.  While
 * the upstream's output is full the body waits in the engine's input,
 * whose reading then stops (the read-stop rule); the upstream's drain
 * resumes it.
 */
void
proxy_request_body(struct gw_xchg *x)
{
	struct conn *c = x->x_conn;
	struct upstream *up = x->x_up;
	struct gw_body *b = &x->x_req_body;
	enum http1_err err = HTTP1_E_NONE;
	uint64_t max = c->c_gw->g_conf->cf_max_body_size;
	struct evbuffer *out, *tmp = NULL;
	ssize_t n;
	int h2, done;

	if (x->x_state != XCHG_S_BODY || up == NULL ||
	    up->u_state != UP_S_ACTIVE ||
	    (xchg_is_h1(x) && c->c_spl[0] != NULL))
		return; /* or splice(2) has the rest of the body */
	h2 = (up->u_flags & UP_F_H2) != 0;
	out = h2 ? upstream_h2_body_out(up) : stream_output(up->u_stream);
	while (!x->x_ops->xo_body_done(x)) {
		if (evbuffer_get_length(out) >= PROXY_HIGH)
			break; /* resumed by proxy_upstream_drained */
		if (b->b_out_chunked) {
			if (tmp == NULL)
				tmp = evbuffer_new();
			n = x->x_ops->xo_body_read(x, tmp, PROXY_STEP, &err);
			if (n > 0) {
				http1_chunk_header(out, (size_t)n);
				evbuffer_add_buffer(out, tmp);
				http1_chunk_trailer(out);
			}
		} else
			n = x->x_ops->xo_body_read(x, out, PROXY_STEP, &err);
		if (n < 0) {
			up->u_flags |= UP_F_NO_REUSE;
			if (err != HTTP1_E_NONE)
				xchg_refuse(
				    x, NULL, err, "%s", http1_err_message(err));
			break;
		}
		b->b_total += (uint64_t)n;
		if (max != 0 && b->b_total > max) {
			up->u_flags |= UP_F_NO_REUSE;
			xchg_refuse(x, gw_err_body_too_large, 0,
			    "The request "
			    "body is larger than the %llu bytes this gateway "
			    "accepts.",
			    (unsigned long long)max);
			break;
		}
		if (n == 0)
			break; /* needs more input */
	}
	if (tmp != NULL)
		evbuffer_free(tmp);
	if (x->x_state != XCHG_S_BODY)
		return;
	done = x->x_ops->xo_body_done(x);
	if (h2)
		upstream_h2_body_more(up, done);
	if (!done)
		return;
	if (b->b_out_chunked)
		http1_chunk_last(out);
	b->b_done = 1;
	/*
	 * Reading goes on: pipelined requests wait in the input buffer (up
	 * to its high watermark), and a client that goes away is noticed.
	 */
	x->x_state = XCHG_S_WAIT;
	x->x_flags |= XCHG_F_REQ_WHOLE;
	/* A silent client is no longer idle: it is waiting. */
	if (b->b_kind != HTTP1_BODY_NONE)
		x->x_ops->xo_timeouts(x, 0, 1);
}

/* The upstream's output drained below the low watermark: more body. */
static void
proxy_upstream_drained(struct upstream *up, void *arg)
{
	struct gw_xchg *x = arg;

	proxy_request_body(x);
	if (x->x_state != XCHG_S_DONE && x->x_up == up)
		proxy_request_splice_try(x);
}

/* Bytes of a request body went to the upstream in the kernel. */
static void
proxy_request_splice_progress(void *arg, size_t n)
{
	struct gw_xchg *x = arg;

	x->x_ops->xo_body_skip(x, n);
	x->x_req_body.b_total += n;
}

/* The spliced part of a request body ended. */
static void
proxy_request_splice_done(void *arg, int error)
{
	struct gw_xchg *x = arg;
	struct conn *c = x->x_conn;

	relay_splice_stop_one(c, 0);
	if (error == 0 && x->x_ops->xo_body_done(x)) {
		if (x->x_state != XCHG_S_BODY)
			return;
		/* Reading on, as after any whole request. */
		stream_enable(c->c_stream, EV_READ);
		proxy_request_body(x);
		return;
	}
	xchg_abort(x,
	    error == ETIMEDOUT   ? "idle timeout mid-body"
		: error == EPIPE ? "client closed mid-body"
				 : "error relaying the request body");
}

/*
 * The rest of a large Content-Length request body from a plaintext client
 * moves with splice(2) once nothing of it is buffered on either side, as
 * responses do (proxy_splice_try): the bytes no longer enter user space.
 * The client's socket stops reading meanwhile.
 */
void
proxy_request_splice_try(struct gw_xchg *x)
{
	static const struct splicer_cbs cbs = { proxy_request_splice_progress,
		proxy_request_splice_done };
	struct conn *c = x->x_conn;
	struct upstream *up = x->x_up;
	uint64_t left;
	int sfd, dfd;

	if (c->c_gw->g_splice == NULL || !xchg_is_h1(x) ||
	    c->c_spl[0] != NULL || up == NULL || up->u_state != UP_S_ACTIVE ||
	    (up->u_flags & UP_F_H2) ||
	    x->x_state != XCHG_S_BODY || x->x_req_body.b_out_chunked ||
	    (left = x->x_ops->xo_body_left(x)) < PROXY_SPLICE_MIN)
		return;
	/*
	 * What the pass queued for the upstream goes first.  Only the
	 * client's reading stops: what the engine writes to it (a 100
	 * Continue, an early answer) still goes.
	 */
	if (evbuffer_get_length(stream_input(c->c_stream)) != 0 ||
	    stream_flush(up->u_stream) != 0 ||
	    (sfd = stream_getfd(c->c_stream)) == -1 ||
	    (dfd = stream_getfd(up->u_stream)) == -1)
		return;
	stream_disable(c->c_stream, EV_READ);
	c->c_spl[0] = splicer_new(c->c_gw->g_base, c->c_gw->g_splice, sfd, dfd,
	    left, c->c_gw->g_conf->cf_idle_timeout, &cbs, x);
	splicer_start(c->c_spl[0]);
}

/* The client output drained below the low watermark: read on. */
void
proxy_client_drained(struct gw_xchg *x)
{
	struct upstream *up;

	if (x->x_state == XCHG_S_DONE || (up = x->x_up) == NULL ||
	    up->u_state != UP_S_ACTIVE || !(up->u_flags & UP_F_SENT))
		return;
	upstream_read_resume(up);
	if (x->x_state != XCHG_S_DONE && x->x_up == up)
		proxy_splice_try(x, up);
}

/*
 * The Host the upstream of c was sent: host_rewrite with its port, or the
 * client's.  xmalloc'd, or NULL when there was none.
 */
static char *
proxy_upstream_host(const struct gw_xchg *x)
{
	const char *rw = x->x_rule->pr_host_rewrite, *p;
	char *s;

	if (rw == NULL)
		return (
		    x->x_host != NULL ? xstrdup(x->x_host) : NULL);
	if ((p = strstr(rw, "${port}")) == NULL)
		return (xstrdup(rw));
	xasprintf(&s, "%.*s%d%s", (int)(p - rw), rw, x->x_port, p + 7);
	return (s);
}

/*
 * Does a URL's authority (len bytes) name the sandbox port of c as the
 * sandbox knows itself: the Host it was sent, or localhost / 127.0.0.1 at
 * the port?
 */
static int
proxy_own_authority(const struct gw_xchg *x, const char *a, size_t len)
{
	char *host = proxy_upstream_host(x), own[32];
	int r = 0;
	size_t n;

	if (host != NULL && strlen(host) == len &&
	    strncasecmp(host, a, len) == 0)
		r = 1;
	free(host);
	n = (size_t)snprintf(own, sizeof own, "localhost:%d", x->x_port);
	if (n == len && strncasecmp(own, a, len) == 0)
		r = 1;
	n = (size_t)snprintf(own, sizeof own, "127.0.0.1:%d", x->x_port);
	if (n == len && memcmp(own, a, len) == 0)
		r = 1;
	return (r);
}

/*
 * A path (len bytes) that points into the sandbox port, under the
 * path-form prefix: "/sub/" becomes "/{id}/{port}/sub/".  A path already
 * under the prefix (an app that honours X-Forwarded-Prefix) stays.
 * Returns an xmalloc'd value, or NULL to keep the path.
 */
static char *
proxy_prefix_path(const struct gw_xchg *x, const char *path, size_t len)
{
	size_t plen = strlen(x->x_prefix);
	char *s;

	if (len >= plen && memcmp(path, x->x_prefix, plen) == 0 &&
	    (len == plen || strchr("/?#", path[plen]) != NULL))
		return (NULL);
	xasprintf(&s, "%s%s%.*s", x->x_prefix,
	    len == 0 || path[0] != '/' ? "/" : "", (int)len, path);
	return (s);
}

/*
 * Rewrite a response field for a path-form request, as nginx's
 * proxy_redirect and proxy_cookie_path do: Location and Content-Location
 * that point into the sandbox port (an absolute path, or an absolute URL
 * naming the sandbox's own host) move under the prefix, and so does a
 * Set-Cookie Path.  Returns the new value (xmalloc'd), or NULL to keep h.
 */
static char *
proxy_prefix_field(const struct gw_xchg *x, const struct hfield *h)
{
	const char *v = h->value, *end = h->value + h->value_len, *a, *e, *p;
	char *np, *s;
	size_t slen;

	if (proxy_named(h, "location", 8) ||
	    proxy_named(h, "content-location", 16)) {
		if (v < end && v[0] == '/' && (v + 1 == end || v[1] != '/'))
			return (proxy_prefix_path(x, v, h->value_len));
		if (h->value_len > 7 && strncasecmp(v, "http://", 7) == 0)
			slen = 7;
		else if (h->value_len > 8 && strncasecmp(v, "https://", 8) == 0)
			slen = 8;
		else
			return (NULL);
		a = v + slen;
		for (e = a; e < end && strchr("/?#", *e) == NULL; e++)
			;
		if (!proxy_own_authority(x, a, (size_t)(e - a)))
			return (NULL);
		if ((np = proxy_prefix_path(x, e, (size_t)(end - e))) != NULL)
			return (np);
		return (xstrndup(e, (size_t)(end - e)));
	}
	if (!proxy_named(h, "set-cookie", 10))
		return (NULL);
	/* The Path attribute: after a ';' and optional spaces. */
	for (p = memchr(v, ';', h->value_len); p != NULL && p < end;
	     p = memchr(p + 1, ';', (size_t)(end - p - 1))) {
		for (a = p + 1; a < end && (*a == ' ' || *a == '\t'); a++)
			;
		if (end - a < 6 || strncasecmp(a, "path=/", 6) != 0)
			continue;
		a += 5;
		e = memchr(a, ';', (size_t)(end - a));
		if (e == NULL)
			e = end;
		if ((np = proxy_prefix_path(x, a, (size_t)(e - a))) == NULL)
			return (NULL);
		xasprintf(
		    &s, "%.*s%s%.*s", (int)(a - v), v, np, (int)(end - e), e);
		free(np);
		return (s);
	}
	return (NULL);
}

/*
 * A response head for the client, with the values made for it.  It lives on
 * the stack while the head is sent, and a head of up to PROXY_HEAD_INLINE
 * fields (most) needs no allocation.
 */
#define PROXY_HEAD_INLINE 24
struct proxy_head {
	struct head ph_head;
	struct hfield *ph_fields;
	char **ph_made; /* rewritten values, freed with it */
	size_t ph_nmade;
	struct hfield ph_fields_inline[PROXY_HEAD_INLINE];
	char *ph_made_inline[PROXY_HEAD_INLINE];
};

/*
 * The response head for the client from the upstream's mh, as the core
 * reads it: its status and reason, its end-to-end fields (hop-by-hop ones
 * dropped, a path-form request's Location, Content-Location and cookie
 * Path moved under the prefix), Upgrade for a 101, and unless mh has one
 * (or with interim) our X-Request-Id.  The framing is the sink's: only
 * the length is said (HEAD's answer and a 304 keep the one of the body
 * they describe).
 */
static void
proxy_head_make(struct gw_xchg *x, const struct head *mh, int interim,
    struct proxy_head *ph)
{
	struct head *rh = &ph->ph_head;
	const struct hfield *h;
	size_t i, n = 0, nconn;
	int own_id = 0;
	char *v;

	nconn = proxy_nconnection(mh);
	ph->ph_fields = mh->h_nfields + 2 <= PROXY_HEAD_INLINE
	    ? ph->ph_fields_inline
	    : xcalloc(mh->h_nfields + 2, sizeof *ph->ph_fields);
	/* Values are made only for a path-form request. */
	ph->ph_made = x->x_prefix == NULL ? NULL
	    : mh->h_nfields + 1 <= PROXY_HEAD_INLINE
	    ? ph->ph_made_inline
	    : xcalloc(mh->h_nfields + 1, sizeof *ph->ph_made);
	ph->ph_nmade = 0;
	for (i = 0; i < mh->h_nfields; i++) {
		h = &mh->h_fields[i];
		if (proxy_is_hop(mh, h, nconn))
			continue;
		own_id |= proxy_named(h, "x-request-id", 12);
		ph->ph_fields[n] = *h;
		if (x->x_prefix != NULL &&
		    (v = proxy_prefix_field(x, h)) != NULL) {
			ph->ph_made[ph->ph_nmade++] = v;
			ph->ph_fields[n].value = v;
			ph->ph_fields[n].value_len = strlen(v);
		}
		n++;
	}
	if (mh->h_status == 101 && (h = head_find(mh, "upgrade")) != NULL)
		ph->ph_fields[n++] = *h;
	if (!own_id && !interim)
		hfield_set(
		    &ph->ph_fields[n++], "X-Request-Id", x->x_request_id);
	memset(rh, 0, sizeof *rh);
	rh->h_status = mh->h_status;
	rh->h_reason = mh->h_reason;
	rh->h_version = 11;
	rh->h_fields = ph->ph_fields;
	rh->h_nfields = n;
	rh->h_flags = mh->h_flags & (HEAD_F_LENGTH | HEAD_F_NO_BODY);
	rh->h_length = mh->h_length;
	if ((mh->h_flags & (HEAD_F_NO_BODY | HEAD_F_LENGTH)) ==
		HEAD_F_NO_BODY &&
	    mh->h_status >= 200 && mh->h_status != 204 &&
	    (h = head_find(mh, "content-length")) != NULL) {
		rh->h_flags |= HEAD_F_LENGTH;
		rh->h_length = strtoull(h->value, NULL, 10);
	}
}

/* Free what proxy_head_make made. */
static void
proxy_head_free(struct proxy_head *ph)
{
	size_t i;

	for (i = 0; i < ph->ph_nmade; i++)
		free(ph->ph_made[i]);
	if (ph->ph_made != ph->ph_made_inline)
		free(ph->ph_made);
	if (ph->ph_fields != ph->ph_fields_inline)
		free(ph->ph_fields);
}

/*
 * An RFC 8441 WebSocket's answer, from the upstream's 101: 200 with the
 * 101's end-to-end fields (its Sec-WebSocket-Protocol and -Extensions
 * among them, not Sec-WebSocket-Accept, which is HTTP/1's handshake) and
 * a stream that stays open for the bytes both ways.  Returns sink_head's
 * result.
 */
int
proxy_upgrade_head(struct gw_xchg *x, const struct head *m)
{
	struct proxy_head ph;
	struct head *rh = &ph.ph_head;
	size_t i, n = 0;
	int r;

	proxy_head_make(x, m, 0, &ph);
	for (i = 0; i < rh->h_nfields; i++) {
		if (proxy_named(&ph.ph_fields[i], "sec-websocket-accept", 20) ||
		    proxy_named(&ph.ph_fields[i], "upgrade", 7))
			continue;
		ph.ph_fields[n++] = ph.ph_fields[i];
	}
	rh->h_nfields = n;
	rh->h_status = 200;
	rh->h_reason = NULL;
	rh->h_flags = 0;
	r = sink_head(x->x_sink, rh);
	proxy_head_free(&ph);
	return (r);
}

/* The final response head arrived: check it and send it on. */
static int
proxy_response_head(struct upstream *up, const struct head *m, void *arg)
{
	struct gw_xchg *x = arg;
	struct conn *c = x->x_conn;
	struct gw_body *b = &x->x_resp_body;
	struct sink *sk = x->x_sink;
	struct proxy_head ph;

	memset(b, 0, sizeof *b);
	if (m->h_flags & HEAD_F_NO_BODY)
		b->b_kind = HTTP1_BODY_NONE;
	else if (m->h_flags & HEAD_F_LENGTH) {
		b->b_kind = HTTP1_BODY_LENGTH;
		b->b_left = m->h_length;
	} else
		b->b_kind = HTTP1_BODY_EOF; /* until the upstream ends it */
	if (m->h_status == 101 && !(x->x_flags & XCHG_F_WS_REQ)) {
		xchg_fail(x, gw_err_bad_response,
		    "Sandbox '%s' port "
		    "%d switched protocols without being asked to.",
		    x->x_sandbox->sb_id, x->x_port);
		return (-1);
	}
	if (x->x_flags & XCHG_F_WS_REQ)
		up->u_flags |= UP_F_NO_REUSE;
	proxy_head_make(x, m, 0, &ph);
	x->x_status = m->h_status;
	x->x_flags |= XCHG_F_RESP_STARTED;
	if (m->h_status == 101) {
		(void)sink_head(sk, &ph.ph_head);
		(void)sink_end(sk);
		proxy_head_free(&ph);
		conn_upgrade(c);
		relay_start(c);
		return (1);
	}
	/* All of a small body is here: over TLS, one record with the head. */
	if ((c->c_flags & CONN_F_TLS) &&
	    (b->b_kind == HTTP1_BODY_NONE ||
		(b->b_kind == HTTP1_BODY_LENGTH &&
		    b->b_left <= PROXY_TLS_SMALL &&
		    upstream_buffered(up) >= b->b_left)))
		ph.ph_head.h_flags |= HEAD_F_BODY_NOW;
	(void)sink_head(sk, &ph.ph_head);
	proxy_head_free(&ph);
	return (0);
}

/*
 * The upstream's trailer fields, before the end: to the client with the
 * last chunk when its framing is chunked; the sink drops them otherwise
 * (an HTTP/1.0 client, a Content-Length answer).
 */
static void
proxy_response_trailers(
    struct upstream *up, const struct hfield *f, size_t n, void *arg)
{
	struct gw_xchg *x = arg;

	(void)up;
	(void)sink_trailers(x->x_sink, f, n);
}

/* The response was relayed in full: the engine ends it. */
static void
proxy_response_complete(struct upstream *up, void *arg)
{
	struct gw_xchg *x = arg;
	struct gw_body *b = &x->x_resp_body;

	if (up->u_spliced != 0) {
		x->x_ops->xo_body_sent(x, up->u_spliced);
		b->b_total += up->u_spliced;
	}
	b->b_done = 1;
	x->x_flags |= XCHG_F_RESP_DONE;
	/* Answered before the request body ended: the upstream has it. */
	if (x->x_state != XCHG_S_WAIT)
		up->u_flags |= UP_F_NO_REUSE;
	xchg_response_done(x);
}

/*
 * n bytes of the response body, de-framed, at the front of src: to the
 * client through the sink, which frames them for it.  The upstream stops
 * reading while the sink is full.
 */
static int
proxy_response_body(
    struct upstream *up, struct evbuffer *src, size_t n, void *arg)
{
	struct gw_xchg *x = arg;
	struct gw_body *b = &x->x_resp_body;
	struct sink *sk = x->x_sink;

	b->b_total += n;
	if (b->b_kind == HTTP1_BODY_LENGTH)
		b->b_left -= n < b->b_left ? n : b->b_left;
	if (sink_body(sk, src, n) != 0)
		return (-1);
	if (sink_room(sk) == 0) {
		/* Backpressure: read on from proxy_client_drained. */
		upstream_read_pause(up);
		return (0);
	}
	proxy_splice_try(x, up);
	return (0);
}

/*
 * The rest of a large Content-Length response body between two plaintext
 * sockets moves with splice(2), once nothing of it is buffered: the bytes
 * no longer enter user space.  Chunked and close-delimited bodies, and TLS
 * clients, keep the buffered relay.
 */
static void
proxy_splice_try(struct gw_xchg *x, struct upstream *up)
{
	int fd;

	if (x->x_conn->c_gw->g_splice == NULL || (up->u_flags & UP_F_H2) ||
	    !(x->x_flags & XCHG_F_RESP_STARTED) ||
	    x->x_resp_body.b_kind != HTTP1_BODY_LENGTH ||
	    x->x_resp_body.b_left < PROXY_SPLICE_MIN ||
	    x->x_state == XCHG_S_DONE || upstream_buffered(up) != 0 ||
	    (fd = x->x_ops->xo_splice_fd(x)) == -1)
		return;
	(void)upstream_splice_body(up, fd);
}

/*
 * Pass an interim (1xx) response on with its fields (hop-by-hop ones
 * dropped); the sink gives an HTTP/1.0 client none (RFC 9110 section
 * 15.2).  The upstream caps how many it reads.  While the client has not
 * read them, the upstream stops reading.
 */
static int
proxy_interim(struct upstream *up, const struct head *m, void *arg)
{
	struct gw_xchg *x = arg;
	struct sink *sk = x->x_sink;
	struct proxy_head ph;

	proxy_head_make(x, m, 1, &ph);
	(void)sink_head(sk, &ph.ph_head);
	proxy_head_free(&ph);
	if (sink_room(sk) == 0)
		upstream_read_pause(up);
	return (0);
}

/* The response could not be read on. */
static void
proxy_response_error(
    struct upstream *up, const struct gw_error *e, const char *why, void *arg)
{
	struct gw_xchg *x = arg;
	struct conn *c = x->x_conn;

	if (x->x_flags & XCHG_F_RESP_STARTED) {
		/* Nothing can be said to the client mid-body: close it. */
		log_warn("conn %llu: response from sandbox '%s' port %d broke "
			 "off: %s",
		    (unsigned long long)c->c_id, x->x_sandbox->sb_id,
		    x->x_port, why);
		x->x_resp_body.b_total += up->u_spliced;
		upstream_close(up, "closed mid-response");
		xchg_abort(x, "upstream closed mid-response");
		return;
	}
	xchg_fail(x, e != NULL ? e : gw_err_bad_response, "%s", why);
}

/* EOF, error or timeout on an active upstream. */
static void
proxy_upstream_event(struct upstream *up, short what, void *arg)
{
	struct gw_xchg *x = arg;

	if (x->x_flags & XCHG_F_RESP_STARTED) {
		/* Nothing can be said to the client mid-body: close it. */
		upstream_close(up, "closed mid-response");
		xchg_abort(x, "upstream closed mid-response");
		return;
	}
	if ((up->u_flags & UP_F_REUSED) && !(up->u_flags & UP_F_GOT_BYTES) &&
	    x->x_req_body.b_kind == HTTP1_BODY_NONE &&
	    !(x->x_flags & XCHG_F_RETRIED)) {
		/* A pooled connection the server had closed: try a new one. */
		upstream_close(up, "stale pooled connection");
		x->x_flags |= XCHG_F_RETRIED;
		proxy_start(x);
		return;
	}
	if (what & STREAM_EV_TIMEOUT)
		xchg_fail(x, gw_err_upstream_timeout,
		    "Sandbox '%s' port %d "
		    "did not answer in time.",
		    x->x_sandbox->sb_id, x->x_port);
	else if (up->u_flags & UP_F_H2)
		xchg_fail(x, gw_err_upstream_closed,
		    "Sandbox '%s' port %d ended the HTTP/2 stream without "
		    "answering (it refused the stream, or closed its "
		    "connection).",
		    x->x_sandbox->sb_id, x->x_port);
	else
		xchg_fail(x, gw_err_upstream_closed,
		    "Sandbox '%s' port %d "
		    "closed the connection without answering.",
		    x->x_sandbox->sb_id, x->x_port);
}

/* The response-header timer fired. */
static void
proxy_response_timeout(struct upstream *up, void *arg)
{
	struct gw_xchg *x = arg;
	struct conn *c = x->x_conn;

	(void)up;
	if (x->x_flags & XCHG_F_RESP_STARTED)
		return;
	xchg_fail(x, gw_err_upstream_timeout,
	    "Sandbox '%s' port %d did not "
	    "send a response head within %llums.",
	    x->x_sandbox->sb_id, x->x_port,
	    (unsigned long long)c->c_gw->g_conf->cf_response_timeout);
}

/*
 * The gRPC deadline (grpc-timeout) passed before the answer ended: the
 * upstream stream is cancelled and the client hears DEADLINE_EXCEEDED,
 * as the whole (trailers-only) answer or as trailers after what it had.
 */
static void
proxy_grpc_deadline(struct upstream *up, void *arg)
{
	static const char msg[] = "The request's grpc-timeout passed before "
				  "the sandbox answered (gateway)";
	struct gw_xchg *x = arg;
	struct sink *sk = x->x_sink;
	struct hfield f[2];

	upstream_close(up, "grpc-timeout passed");
	x->x_err_code = "grpc_deadline_exceeded";
	log_info("conn %llu: sandbox '%s' port %d: grpc-timeout passed, "
		 "stream cancelled",
	    (unsigned long long)x->x_conn->c_id, x->x_sandbox->sb_id,
	    x->x_port);
	x->x_resp_body.b_done = 1;
	x->x_flags |= XCHG_F_RESP_DONE;
	if (!(x->x_flags & XCHG_F_RESP_STARTED)) {
		/* The whole answer: trailers-only, as the sink ends it. */
		x->x_status = 200;
		x->x_flags |= XCHG_F_RESP_STARTED;
		xchg_log_end(x);
		(void)errpage_grpc(sk, x->x_request_id, 4, x->x_err_code, msg);
		xchg_done(x);
		return;
	}
	hfield_set(&f[0], "grpc-status", "4");
	hfield_set(&f[1], "grpc-message", msg);
	(void)sink_trailers(sk, f, 2);
	xchg_response_done(x);
}

/* Connecting failed for good: tell the client. */
static void
proxy_upstream_failed(
    struct upstream *up, const struct gw_error *e, const char *why, void *arg)
{
	struct gw_xchg *x = arg;
	struct gw *g = up->u_gw;
	char addr[ADDR_STRLEN];

	upstream_addr_format(up, addr, sizeof addr);
	upstream_close(up, why);
	if (e == gw_err_sandbox_unreachable)
		xchg_fail(x, e, "Sandbox '%s' cannot be reached: %s (%s).",
		    x->x_sandbox->sb_id, why, x->x_sandbox->sb_netns);
	else if (e == gw_err_upstream_unreachable &&
	    strcmp(why, UPSTREAM_WHY_TIMEOUT) == 0)
		xchg_fail(x, e,
		    "Sandbox '%s' cannot be reached: %s did not answer "
		    "a connection within %llums; the sandbox may be down "
		    "or its address unroutable.",
		    x->x_sandbox->sb_id, addr,
		    (unsigned long long)g->g_conf->cf_connect_timeout);
	else if (e == gw_err_upstream_unreachable)
		xchg_fail(x, e,
		    "Sandbox '%s' cannot be reached: no route to %s (%s); "
		    "the sandbox may be down or its address unroutable.",
		    x->x_sandbox->sb_id, addr, why);
	else
		xchg_fail(x, e,
		    "Nothing is listening on port %d in sandbox "
		    "'%s' (%s).",
		    x->x_port, x->x_sandbox->sb_id, why);
}

/*
 * x's upstream leaves it (closed or pooled): no splice(2) may outlive the
 * descriptor it moves bytes to, and c forgets it.
 */
static void
proxy_upstream_detach(struct upstream *up, void *arg)
{
	struct gw_xchg *x = arg;
	struct conn *c = x->x_conn;

	if (x->x_up != up)
		return;
	if (xchg_is_h1(x))
		relay_splice_stop(c);
	x->x_up = NULL;
}
