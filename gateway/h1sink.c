/*
 * The HTTP/1 wire form of a protocol-neutral response head: the status
 * line with its registered reason phrase, the fields, and the framing and
 * Connection fields the engine chose (never those of the head itself).
 * The HTTP/1 engine's sink (h1s.c) and the gateway's own answers
 * (errpage.c) write their heads here, so there is one such writer.
 */
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "gw.h"

/* A head is put together here and added to the evbuffer in few pieces. */
struct h1_out {
	struct evbuffer *o_ev;
	size_t o_len;
	char o_buf[2048];
};

/* Add what o holds to its evbuffer. */
static void
h1_out_flush(struct h1_out *o)
{
	if (o->o_len > 0)
		evbuffer_add(o->o_ev, o->o_buf, o->o_len);
	o->o_len = 0;
}

/* Append n bytes; a piece larger than the buffer goes on its own. */
static void
h1_out_add(struct h1_out *o, const void *p, size_t n)
{
	if (n > sizeof o->o_buf - o->o_len)
		h1_out_flush(o);
	if (n > sizeof o->o_buf) {
		evbuffer_add(o->o_ev, p, n);
		return;
	}
	memcpy(o->o_buf + o->o_len, p, n);
	o->o_len += n;
}

/* Append a C string. */
static void
h1_out_adds(struct h1_out *o, const char *s)
{
	h1_out_add(o, s, strlen(s));
}

/* Append "name: value" and CRLF. */
static void
h1_out_field(struct h1_out *o, const char *name, size_t nlen, const char *value,
    size_t vlen)
{
	h1_out_add(o, name, nlen);
	h1_out_add(o, ": ", 2);
	h1_out_add(o, value, vlen);
	h1_out_add(o, "\r\n", 2);
}

/* Append a decimal number. */
static void
h1_out_u64(struct h1_out *o, uint64_t n)
{
	char num[24];

	h1_out_add(o, num, fmt_u64(num, n));
}

/* Fill f with name and value, NUL-terminated strings that outlive it. */
void
hfield_set(struct hfield *f, const char *name, const char *value)
{
	f->name = name;
	f->name_len = strlen(name);
	f->value = value;
	f->value_len = strlen(value);
}

/*
 * Is f a field the HTTP/1 framing owns (Connection, Keep-Alive,
 * Content-Length, Transfer-Encoding)?  A head's own are never written:
 * the engine decides them.
 */
int
h1_field_is_framing(const struct hfield *f)
{
	switch (f->name_len) {
	case 10:
		return (strncasecmp(f->name, "connection", 10) == 0 ||
		    strncasecmp(f->name, "keep-alive", 10) == 0);
	case 14:
		return (strncasecmp(f->name, "content-length", 14) == 0);
	case 17:
		return (strncasecmp(f->name, "transfer-encoding", 17) == 0);
	}
	return (0);
}

/*
 * Append the response head h to out: "HTTP/1.1", the status and its
 * reason (h's, else the registered one), h's fields but the framing ones, then the framing
 * (Content-Length for H1_FRAME_LENGTH, also for a body left out of a HEAD
 * answer or a 304 when h has HEAD_F_LENGTH; never for 1xx or 204;
 * Transfer-Encoding for H1_FRAME_CHUNKED) and the Connection field conn
 * says (H1_CONN_*).
 */
void
h1_head_put(
    struct evbuffer *out, const struct head *h, enum h1_frame frame, int conn)
{
	struct h1_out o;
	const char *reason = h->h_reason != NULL && h->h_reason[0] != '\0'
	    ? h->h_reason
	    : http1_reason(h->h_status);
	size_t i;

	o.o_ev = out;
	o.o_len = 0;
	h1_out_add(&o, "HTTP/1.1 ", 9);
	h1_out_u64(&o, (uint64_t)h->h_status);
	h1_out_add(&o, " ", 1);
	h1_out_adds(&o, reason);
	h1_out_add(&o, "\r\n", 2);
	for (i = 0; i < h->h_nfields; i++) {
		if (h1_field_is_framing(&h->h_fields[i]))
			continue;
		h1_out_field(&o, h->h_fields[i].name, h->h_fields[i].name_len,
		    h->h_fields[i].value, h->h_fields[i].value_len);
	}
	if (frame == H1_FRAME_LENGTH ||
	    (frame == H1_FRAME_NONE && (h->h_flags & HEAD_F_LENGTH) &&
		h->h_status >= 200 && h->h_status != 204)) {
		h1_out_add(&o, "Content-Length: ", 16);
		h1_out_u64(&o, h->h_length);
		h1_out_add(&o, "\r\n", 2);
	} else if (frame == H1_FRAME_CHUNKED)
		h1_out_adds(&o, "Transfer-Encoding: chunked\r\n");
	switch (conn) {
	case H1_CONN_CLOSE:
		h1_out_adds(&o, "Connection: close\r\n");
		break;
	case H1_CONN_KEEPALIVE:
		h1_out_adds(&o, "Connection: keep-alive\r\n");
		break;
	case H1_CONN_UPGRADE:
		h1_out_adds(&o, "Connection: Upgrade\r\n");
		break;
	}
	h1_out_add(&o, "\r\n", 2);
	h1_out_flush(&o);
}

/*
 * Append the last chunk of a chunked body with n trailer fields (the
 * framing ones left out) and the CRLF that ends them.
 */
void
h1_trailers_put(struct evbuffer *out, const struct hfield *f, size_t n)
{
	struct h1_out o;
	size_t i;

	o.o_ev = out;
	o.o_len = 0;
	h1_out_add(&o, "0\r\n", 3);
	for (i = 0; i < n; i++) {
		if (!h1_field_is_framing(&f[i]))
			h1_out_field(&o, f[i].name, f[i].name_len, f[i].value,
			    f[i].value_len);
	}
	h1_out_add(&o, "\r\n", 2);
	h1_out_flush(&o);
}

/*
 * Append request head h to out as HTTP/1.1, every field as it came (its
 * framing too: a body that follows is passed on as sent).  For a request
 * handed on to another loop (conn.c).
 */
void
h1_request_put(struct evbuffer *out, const struct head *h)
{
	struct h1_out o;
	size_t i;

	o.o_ev = out;
	o.o_len = 0;
	h1_out_add(&o, h->h_method, h->h_method_len);
	h1_out_add(&o, " ", 1);
	h1_out_add(&o, h->h_target, h->h_target_len);
	h1_out_adds(&o, h->h_version == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n");
	for (i = 0; i < h->h_nfields; i++)
		h1_out_field(&o, h->h_fields[i].name, h->h_fields[i].name_len,
		    h->h_fields[i].value, h->h_fields[i].value_len);
	h1_out_add(&o, "\r\n", 2);
	h1_out_flush(&o);
}
