/*
 * akbench-backend: the origin server behind the proxies being measured.
 *
 * It must never be the bottleneck, so it is a plain epoll loop per thread
 * (edge triggered, each thread with its own SO_REUSEPORT listener), reads
 * into one scratch buffer per thread and keeps nothing per idle connection
 * but a small struct: partial heads are the only input ever copied.
 *
 *   GET|HEAD /size/N	200 with N bytes of 'x' (streamed, never allocated)
 *   any body, any path	the body is read and dropped; 200 "<bytes>\n"
 *   GET /ws (upgrade)	a WebSocket echo server
 *   anything else	404
 *
 * Requests are parsed strictly; a bad one gets 400 and the connection
 * closes once the answer is out.
 */
#include <sys/types.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "wsconn.h"

#include "common.h"

/* Bytes read per read(2), into the worker's scratch buffer. */
#define BACKEND_SCRATCH (256 * 1024)
/* Size of the body pattern; larger bodies send it again and again. */
#define BACKEND_PATTERN (256 * 1024)
/* Bodies up to this size are copied behind their head: one write. */
#define BACKEND_INLINE 8192
/* Pipelined requests wait while this much output is pending. */
#define BACKEND_OUT_HIWAT (64 * 1024)
/* An output buffer grown past this is freed once it drains. */
#define BACKEND_OUT_KEEP (64 * 1024)
/* Largest /size/N. */
#define BACKEND_MAX_SIZE ((uint64_t)64 << 30)
/* Largest WebSocket message echoed. */
#define BACKEND_WS_MAX_MSG ((uint64_t)16 << 20)
/* A WebSocket is not read while this much echo waits for the peer. */
#define BACKEND_WS_HIWAT ((size_t)20 << 20)
/* How long a closing connection may keep sending before we drop it. */
#define BACKEND_LINGER_MS 2000
/* Pause in accepting after EMFILE or ENFILE. */
#define BACKEND_PAUSE_MS 1000
/* Epoll events taken per wait, and connections accepted per wakeup. */
#define BACKEND_EVENTS 256
#define BACKEND_ACCEPTS 256

/* What a connection is doing. */
enum conn_state {
	CONN_S_HEAD, /* waiting for a request head */
	CONN_S_BODY, /* reading and dropping a request body */
	CONN_S_WS, /* WebSocket echo */
	CONN_S_LINGER, /* output shut down, dropping input until EOF */
};

/* What answers the current request once its body is read. */
enum conn_route {
	ROUTE_SIZE, /* /size/N */
	ROUTE_SINK, /* the body byte count */
};

struct worker;

/* One client connection. */
struct conn {
	int c_fd;
	struct worker *c_worker;
	LIST_ENTRY(conn) c_entry; /* in w_conns */
	LIST_ENTRY(conn) c_lentry; /* in w_linger, in CONN_S_LINGER */

	enum conn_state c_state;
	int c_flags;
#define CONN_F_READABLE 0x001 /* unread bytes may wait in the socket */
#define CONN_F_WRITABLE 0x002 /* the socket took the last write whole */
#define CONN_F_LAST 0x004 /* close once the current answer is out */
#define CONN_F_DEAD 0x008 /* closed; the loop frees it */
#define CONN_F_EOF 0x010 /* the peer sent FIN */
#define CONN_F_MORE 0x020 /* c_in may hold a whole request */
#define CONN_F_HEADREQ 0x040 /* the request is HEAD: answers have no body */
#define CONN_F_CHUNKED 0x080 /* the request body is chunked */
#define CONN_F_KEEP10 0x100 /* HTTP/1.0 keep-alive: say so in answers */
#define CONN_F_RDHUP 0x200 /* a FIN is coming: read until it, not less */

	struct buf c_in; /* bytes read but not parsed yet */
	struct buf c_out; /* bytes to write */
	uint64_t c_send_left; /* pattern bytes to send after c_out */

	enum conn_route c_route;
	uint64_t c_size; /* ROUTE_SIZE: bytes asked for */
	uint64_t c_body_left; /* Content-Length bytes still to read */
	uint64_t c_body_total; /* body bytes read */
	struct chunked c_chunked;

	struct wsparse *c_wp; /* CONN_S_WS: the client's frames */
	uint64_t c_linger_until; /* CONN_S_LINGER: drop it then (ms) */
};

/* One thread: a listener, an epoll set and its connections. */
struct worker {
	int w_ep;
	int w_lfd;
	pthread_t w_thread;
	uint8_t *w_scratch;
	LIST_HEAD(, conn) w_conns;
	LIST_HEAD(, conn) w_linger;
	uint64_t w_resume_at; /* accepting paused until then (ms), or 0 */
};

static int backend_verbose;
/* Written once at shutdown; every epoll set watches it. */
static int backend_stopfd = -1;
static uint8_t backend_pattern[BACKEND_PATTERN];

static void conn_close(struct conn *, const char *);
static void conn_input(struct conn *, const uint8_t *, size_t);

/* Say why a connection goes, with -v. */
static void __attribute__((format(printf, 2, 3)))
conn_log(struct conn *c, const char *fmt, ...)
{
	va_list ap;

	if (!backend_verbose)
		return;
	fprintf(stderr, "akbench-backend: fd %d: ", c->c_fd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Names of a connection's state and flags, for -v. */
static const char *
conn_state_name(const struct conn *c)
{
	switch (c->c_state) {
	case CONN_S_HEAD:
		return ("head");
	case CONN_S_BODY:
		return ("body");
	case CONN_S_WS:
		return ("ws");
	case CONN_S_LINGER:
		return ("linger");
	}
	return ("?");
}

/* Close a connection; the worker loop frees it. */
static void
conn_close(struct conn *c, const char *reason)
{
	if (c->c_flags & CONN_F_DEAD)
		return;
	conn_log(c, "close in %s (flags 0x%x): %s", conn_state_name(c),
	    c->c_flags, reason);
	c->c_flags |= CONN_F_DEAD;
	close(c->c_fd);
	c->c_fd = -1;
}

/* Free a closed connection; only the worker loop calls this. */
static void
conn_free(struct conn *c)
{
	if (c->c_fd != -1)
		close(c->c_fd);
	if (c->c_state == CONN_S_LINGER)
		LIST_REMOVE(c, c_lentry);
	LIST_REMOVE(c, c_entry);
	free(c->c_wp);
	buf_free(&c->c_in);
	buf_free(&c->c_out);
	free(c);
}

/* Append the Connection field an answer needs, if any. */
static void
conn_add_connection(struct conn *c)
{
	if (c->c_flags & CONN_F_LAST)
		buf_append_str(&c->c_out, "Connection: close\r\n");
	else if (c->c_flags & CONN_F_KEEP10)
		buf_append_str(&c->c_out, "Connection: keep-alive\r\n");
}

/* The reason phrase of an error status we send. */
static const char *
conn_reason(int status)
{
	switch (status) {
	case 404:
		return ("Not Found");
	case 426:
		return ("Upgrade Required");
	default:
		return ("Bad Request");
	}
}

/*
 * Answer with an error status and a one-line body.  400 also ends the
 * connection: after a bad head we cannot know where the next one starts.
 */
static void
conn_error(struct conn *c, int status, const char *text, const char *extra)
{
	struct buf *o = &c->c_out;

	conn_log(c, "answer %d: %s", status, text);
	if (status == 400)
		c->c_flags |= CONN_F_LAST;
	buf_append_str(o, "HTTP/1.1 ");
	buf_append_u64(o, (uint64_t)status);
	buf_append_str(o, " ");
	buf_append_str(o, conn_reason(status));
	buf_append_str(o, "\r\nContent-Type: text/plain\r\nContent-Length: ");
	buf_append_u64(o, strlen(text) + 1);
	buf_append_str(o, "\r\n");
	if (extra != NULL)
		buf_append_str(o, extra);
	conn_add_connection(c);
	buf_append_str(o, "\r\n");
	if (!(c->c_flags & CONN_F_HEADREQ)) {
		buf_append_str(o, text);
		buf_append_str(o, "\n");
	}
	c->c_state = CONN_S_HEAD;
}

/* Answer /size/N: the head, then N bytes of pattern. */
static void
conn_answer_size(struct conn *c)
{
	struct buf *o = &c->c_out;

	buf_append_str(o, "HTTP/1.1 200 OK\r\nContent-Length: ");
	buf_append_u64(o, c->c_size);
	buf_append_str(o, "\r\nContent-Type: application/octet-stream\r\n");
	conn_add_connection(c);
	buf_append_str(o, "\r\n");
	if (c->c_flags & CONN_F_HEADREQ)
		return;
	if (c->c_size <= BACKEND_INLINE)
		buf_append(o, backend_pattern, (size_t)c->c_size);
	else
		c->c_send_left = c->c_size;
}

/* Answer a request whose body was dropped: its byte count. */
static void
conn_answer_sink(struct conn *c)
{
	struct buf *o = &c->c_out;
	char num[24];
	int len;

	len = snprintf(
	    num, sizeof num, "%llu\n", (unsigned long long)c->c_body_total);
	buf_append_str(o, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n");
	buf_append_str(o, "Content-Length: ");
	buf_append_u64(o, (uint64_t)len);
	buf_append_str(o, "\r\n");
	conn_add_connection(c);
	buf_append_str(o, "\r\n");
	if (!(c->c_flags & CONN_F_HEADREQ))
		buf_append(o, num, (size_t)len);
}

/* The request body is all read: answer it. */
static void
conn_body_done(struct conn *c)
{
	c->c_state = CONN_S_HEAD;
	if (c->c_route == ROUTE_SIZE)
		conn_answer_size(c);
	else
		conn_answer_sink(c);
}

/* Is a Sec-WebSocket-Key 16 bytes in base64? */
static int
conn_ws_key_valid(const char *k, size_t n)
{
	size_t i;

	if (n != WS_KEY_LEN || k[22] != '=' || k[23] != '=')
		return (0);
	for (i = 0; i < 22; i++) {
		if (!((k[i] >= 'A' && k[i] <= 'Z') ||
			(k[i] >= 'a' && k[i] <= 'z') ||
			(k[i] >= '0' && k[i] <= '9') || k[i] == '+' ||
			k[i] == '/'))
			return (0);
	}
	return (1);
}

/* Accept a WebSocket upgrade with key and become an echo server. */
static void
conn_ws_accept(struct conn *c, const char *key)
{
	struct buf *o = &c->c_out;
	char accept[WS_ACCEPT_LEN + 1];

	if (ws_accept_key(key, accept) != 0) {
		conn_close(c, "cannot compute Sec-WebSocket-Accept");
		return;
	}
	buf_append_str(o,
	    "HTTP/1.1 101 Switching Protocols\r\n"
	    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
	    "Sec-WebSocket-Accept: ");
	buf_append_str(o, accept);
	buf_append_str(o, "\r\n\r\n");
	c->c_wp = xmalloc(sizeof *c->c_wp);
	ws_parse_init(c->c_wp, 1, BACKEND_WS_MAX_MSG);
	c->c_state = CONN_S_WS;
}

/* End the WebSocket with a close frame; input is dropped from now on. */
static void
conn_ws_close(struct conn *c, uint16_t code, const char *why)
{
	uint8_t b[2] = { (uint8_t)(code >> 8), (uint8_t)code };

	conn_log(c, "websocket close %u: %s", code, why);
	ws_frame_append(&c->c_out, 1, WS_OP_CLOSE, b, code != 0 ? 2 : 0, NULL);
	c->c_flags |= CONN_F_LAST;
}

/* A frame is complete: answer pings and closes. */
static void
conn_ws_frame_end(struct conn *c)
{
	struct wsparse *wp = c->c_wp;

	if (wp->wp_op == WS_OP_PING)
		ws_frame_append(&c->c_out, 1, WS_OP_PONG, wp->wp_ctl,
		    (size_t)wp->wp_len, NULL);
	else if (wp->wp_op == WS_OP_CLOSE) {
		/* Echo the status code, as RFC 6455 5.5.1 suggests. */
		conn_ws_close(c,
		    wp->wp_len >= 2
			? (uint16_t)(wp->wp_ctl[0] << 8 | wp->wp_ctl[1])
			: 0,
		    "closed by the client");
	}
}

/*
 * Frame bytes from the client.  Frames are echoed as they stream in: a
 * data frame's header goes out as soon as it is parsed and its payload as
 * it is read and unmasked, so nothing is held but control frames, and
 * fragmented messages come back fragmented the same way.
 */
static void
conn_ws_input(struct conn *c, const uint8_t *p, size_t n)
{
	struct wsparse *wp = c->c_wp;
	struct buf *o = &c->c_out;
	uint8_t h[WS_HEADER_MAX];
	const uint8_t *d = NULL;
	size_t dl = 0;

	while (!(c->c_flags & CONN_F_LAST)) {
		switch (ws_parse(wp, &p, &n, &d, &dl)) {
		case WS_EV_NEED:
			return;
		case WS_EV_ERROR:
			conn_ws_close(c, wp->wp_code, wp->wp_why);
			return;
		case WS_EV_HEADER:
			if (!(wp->wp_op & 0x08))
				buf_append(o, h,
				    ws_frame_header(h, wp->wp_fin, wp->wp_op,
					wp->wp_len, NULL));
			break;
		case WS_EV_DATA:
			buf_reserve(o, dl);
			ws_unmask(o->b_data + o->b_len, d, dl, wp->wp_mask,
			    wp->wp_chunk_off);
			o->b_len += dl;
			break;
		case WS_EV_END:
			conn_ws_frame_end(c);
			break;
		}
	}
}

/* Is a request target "/size/N"?  Fills *size, or -1 if N is bad. */
static int
conn_size_target(const char *t, size_t n, uint64_t *size)
{
	uint64_t v = 0;
	size_t i;

	if (n < 7 || memcmp(t, "/size/", 6) != 0)
		return (0);
	for (i = 6; i < n; i++) {
		if (t[i] < '0' || t[i] > '9' || i > 6 + 11)
			return (-1);
		v = v * 10 + (uint64_t)(t[i] - '0');
	}
	if (v > BACKEND_MAX_SIZE)
		return (-1);
	*size = v;
	return (1);
}

/*
 * Handle one request head p[0 .. n) (the empty line included): parse it,
 * and either answer it at once or start reading its body.
 */
static void
conn_request(struct conn *c, const char *p, size_t n)
{
	struct http_field fields[BENCH_FIELDS_MAX], *f;
	const char *sp, *nl, *target, *why, *key = NULL;
	size_t i, nfields, tlen, mlen, klen = 0;
	uint64_t len = 0;
	char k[WS_KEY_LEN + 1];
	int minor, has_len = 0, has_te = 0, upgrade = 0, cupgrade = 0;
	int tok_close = 0, tok_keep = 0, expect = 0, version = 0, r;

	c->c_flags &= ~(CONN_F_HEADREQ | CONN_F_CHUNKED | CONN_F_KEEP10);
	c->c_body_total = 0;

	/* Request line: method SP origin-form SP HTTP/1.x CRLF. */
	nl = memchr(p, '\n', n);
	for (sp = p; sp < nl && *sp != ' '; sp++)
		;
	mlen = (size_t)(sp - p);
	if (!http_is_token(p, mlen) || *sp != ' ') {
		conn_error(c, 400, "malformed request line", NULL);
		return;
	}
	target = sp + 1;
	for (sp = target; sp < nl && (uint8_t)*sp > 0x20 && *sp != 0x7f; sp++)
		;
	tlen = (size_t)(sp - target);
	if (tlen == 0 || *target != '/' || *sp != ' ' || nl - sp != 10 ||
	    memcmp(sp + 1, "HTTP/1.", 7) != 0 ||
	    (sp[8] != '0' && sp[8] != '1')) {
		conn_error(c, 400, "malformed request line", NULL);
		return;
	}
	minor = sp[8] - '0';
	if (mlen == 4 && memcmp(p, "HEAD", 4) == 0)
		c->c_flags |= CONN_F_HEADREQ;

	if (http_parse_fields(nl + 1, n - (size_t)(nl + 1 - p), fields,
		BENCH_FIELDS_MAX, &nfields, &why) != 0) {
		conn_error(c, 400, why, NULL);
		return;
	}
	for (i = 0; i < nfields; i++) {
		f = &fields[i];
		if (http_field_is(f, "content-length")) {
			if (http_parse_length(
				f->f_value, f->f_valuelen, &len) != 0 ||
			    has_len) {
				conn_error(c, 400, "bad Content-Length", NULL);
				return;
			}
			has_len = 1;
		} else if (http_field_is(f, "transfer-encoding")) {
			if (has_te || f->f_valuelen != 7 ||
			    strncasecmp(f->f_value, "chunked", 7) != 0) {
				conn_error(c, 400,
				    "only Transfer-Encoding: chunked is "
				    "supported",
				    NULL);
				return;
			}
			has_te = 1;
		} else if (http_field_is(f, "connection")) {
			tok_close |= http_list_has(
			    f->f_value, f->f_valuelen, "close");
			tok_keep |= http_list_has(
			    f->f_value, f->f_valuelen, "keep-alive");
			cupgrade |= http_list_has(
			    f->f_value, f->f_valuelen, "upgrade");
		} else if (http_field_is(f, "upgrade"))
			upgrade |= http_list_has(
			    f->f_value, f->f_valuelen, "websocket");
		else if (http_field_is(f, "expect"))
			expect = f->f_valuelen == 12 &&
			    strncasecmp(f->f_value, "100-continue", 12) == 0;
		else if (http_field_is(f, "sec-websocket-key")) {
			key = f->f_value;
			klen = f->f_valuelen;
		} else if (http_field_is(f, "sec-websocket-version"))
			version = f->f_valuelen == 2 &&
			    memcmp(f->f_value, "13", 2) == 0;
	}
	if (has_len && has_te) {
		conn_error(
		    c, 400, "Content-Length with Transfer-Encoding", NULL);
		return;
	}
	if (minor == 0 && tok_keep && !tok_close)
		c->c_flags |= CONN_F_KEEP10;
	else if (tok_close || minor == 0)
		c->c_flags |= CONN_F_LAST;

	/* Routes; the query string plays no part. */
	for (i = 0; i < tlen && target[i] != '?'; i++)
		;
	tlen = i;
	if (tlen == 3 && memcmp(target, "/ws", 3) == 0) {
		if (!upgrade || !cupgrade || mlen != 3 ||
		    memcmp(p, "GET", 3) != 0 || has_len || has_te ||
		    minor != 1) {
			conn_error(
			    c, 400, "expected a WebSocket upgrade", NULL);
			return;
		}
		if (!version) {
			conn_error(c, 426, "WebSocket version 13 only",
			    "Sec-WebSocket-Version: 13\r\n");
			return;
		}
		if (key == NULL || !conn_ws_key_valid(key, klen)) {
			conn_error(c, 400, "bad Sec-WebSocket-Key", NULL);
			return;
		}
		/* The key sits in our input: copy it to terminate it. */
		memcpy(k, key, WS_KEY_LEN);
		k[WS_KEY_LEN] = '\0';
		conn_ws_accept(c, k);
		return;
	}
	r = 0;
	if ((mlen == 3 && memcmp(p, "GET", 3) == 0) ||
	    (c->c_flags & CONN_F_HEADREQ))
		r = conn_size_target(target, tlen, &c->c_size);
	if (r < 0) {
		conn_error(
		    c, 400, "bad size: /size/N takes 0 to 68719476736", NULL);
		return;
	}
	if (r == 0 && !has_len && !has_te) {
		conn_error(c, 404, "not found", NULL);
		return;
	}
	c->c_route = r > 0 ? ROUTE_SIZE : ROUTE_SINK;
	if (!has_len && !has_te) {
		conn_body_done(c);
		return;
	}
	if (expect)
		buf_append_str(&c->c_out, "HTTP/1.1 100 Continue\r\n\r\n");
	c->c_state = CONN_S_BODY;
	if (has_te) {
		c->c_flags |= CONN_F_CHUNKED;
		chunked_init(&c->c_chunked);
	} else if ((c->c_body_left = len) == 0)
		conn_body_done(c);
}

/* Read and drop body bytes from p[0 .. n); returns the bytes used. */
static size_t
conn_body(struct conn *c, const uint8_t *p, size_t n)
{
	const char *why;
	ssize_t r;
	int done;

	if (c->c_flags & CONN_F_CHUNKED) {
		r = chunked_feed(
		    &c->c_chunked, p, n, &c->c_body_total, &done, &why);
		if (r < 0) {
			conn_error(c, 400, why, NULL);
			return (n);
		}
		if (done)
			conn_body_done(c);
		return ((size_t)r);
	}
	if (n > c->c_body_left)
		n = (size_t)c->c_body_left;
	c->c_body_left -= n;
	c->c_body_total += n;
	if (c->c_body_left == 0)
		conn_body_done(c);
	return (n);
}

/*
 * Parse what can be parsed of p[0 .. n): heads, bodies, WebSocket frames.
 * Returns the bytes used; the rest waits for more input (a partial head)
 * or for output to drain (CONN_F_MORE).
 */
static size_t
conn_consume(struct conn *c, const uint8_t *p, size_t n)
{
	size_t used = 0, len;
	int r;

	while (used < n && !(c->c_flags & CONN_F_DEAD)) {
		switch (c->c_state) {
		case CONN_S_HEAD:
			if (c->c_flags & CONN_F_LAST)
				return (n);
			if (BUF_LEN(&c->c_out) >= BACKEND_OUT_HIWAT ||
			    c->c_send_left > 0) {
				c->c_flags |= CONN_F_MORE;
				return (used);
			}
			/* Empty lines before a request are ignored. */
			while (n - used >= 2 && p[used] == '\r' &&
			    p[used + 1] == '\n')
				used += 2;
			if (used == n)
				return (used);
			r = http_head_end(
			    (const char *)p + used, n - used, &len);
			if (r < 0) {
				conn_error(c, 400, "bare LF in the head", NULL);
				return (n);
			}
			if ((r == 0 && n - used > BENCH_HEAD_MAX) ||
			    (r > 0 && len > BENCH_HEAD_MAX)) {
				conn_error(
				    c, 400, "request head over 16 KiB", NULL);
				return (n);
			}
			if (r == 0)
				return (used);
			conn_request(c, (const char *)p + used, len);
			used += len;
			break;
		case CONN_S_BODY:
			used += conn_body(c, p + used, n - used);
			break;
		case CONN_S_WS:
			conn_ws_input(c, p + used, n - used);
			return (n);
		case CONN_S_LINGER:
			return (n);
		}
	}
	return (used);
}

/*
 * New input p[0 .. n), or none (p NULL) to parse what c_in holds.  Input
 * is parsed where it lies; only what cannot be parsed yet is copied.
 */
static void
conn_input(struct conn *c, const uint8_t *p, size_t n)
{
	size_t used;

	if (p == NULL || BUF_LEN(&c->c_in) > 0) {
		if (p != NULL)
			buf_append(&c->c_in, p, n);
		used = conn_consume(c, BUF_PTR(&c->c_in), BUF_LEN(&c->c_in));
		buf_consume(&c->c_in, used);
		if (BUF_LEN(&c->c_in) == 0)
			buf_free(&c->c_in);
		return;
	}
	used = conn_consume(c, p, n);
	if (used < n && !(c->c_flags & CONN_F_DEAD))
		buf_append(&c->c_in, p + used, n - used);
}

/* Is there anything to write? */
static int
conn_output_pending(struct conn *c)
{
	return (BUF_LEN(&c->c_out) > 0 || c->c_send_left > 0);
}

/*
 * Write pending output: staged bytes, then pattern bytes of a large body.
 * Returns 1 when all is out, 0 when the socket is full, -1 on error.
 */
static int
conn_flush(struct conn *c)
{
	struct buf *o = &c->c_out;
	struct iovec iov[2];
	struct msghdr mh;
	size_t want, k;
	ssize_t n;

	for (;;) {
		if (BUF_LEN(o) == 0 && c->c_send_left == 0)
			break;
		if (!(c->c_flags & CONN_F_WRITABLE))
			return (0);
		memset(&mh, 0, sizeof mh);
		mh.msg_iov = iov;
		want = 0;
		if (BUF_LEN(o) > 0) {
			iov[mh.msg_iovlen].iov_base = BUF_PTR(o);
			iov[mh.msg_iovlen++].iov_len = BUF_LEN(o);
			want += BUF_LEN(o);
		}
		if (c->c_send_left > 0) {
			k = c->c_send_left < BACKEND_PATTERN
			    ? (size_t)c->c_send_left
			    : BACKEND_PATTERN;
			iov[mh.msg_iovlen].iov_base = backend_pattern;
			iov[mh.msg_iovlen++].iov_len = k;
			want += k;
		}
		n = sendmsg(c->c_fd, &mh, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				c->c_flags &= ~CONN_F_WRITABLE;
				return (0);
			}
			return (-1);
		}
		k = (size_t)n < BUF_LEN(o) ? (size_t)n : BUF_LEN(o);
		buf_consume(o, k);
		c->c_send_left -= (size_t)n - k;
		if ((size_t)n < want) {
			c->c_flags &= ~CONN_F_WRITABLE;
			return (0);
		}
	}
	if (o->b_cap > BACKEND_OUT_KEEP && c->c_state != CONN_S_WS)
		buf_free(o);
	return (1);
}

/* Stop writing and drop input until the peer closes or time runs out. */
static void
conn_linger(struct conn *c)
{
	struct worker *w = c->c_worker;

	conn_log(c, "linger");
	shutdown(c->c_fd, SHUT_WR);
	c->c_state = CONN_S_LINGER;
	c->c_linger_until = clock_mono_msec() + BACKEND_LINGER_MS;
	LIST_INSERT_HEAD(&w->w_linger, c, c_lentry);
	buf_free(&c->c_in);
	buf_free(&c->c_out);
}

/*
 * Nothing is left to write: close, linger or parse what waited for the
 * output to drain.  Returns -1 if the connection closed, 1 if something
 * changed (look again), 0 if it is time to read.
 */
static int
conn_drained(struct conn *c)
{
	switch (c->c_state) {
	case CONN_S_WS:
		if (c->c_flags & CONN_F_LAST) {
			conn_linger(c);
			return (1);
		}
		if (c->c_flags & CONN_F_EOF) {
			conn_close(c, "peer closed the websocket");
			return (-1);
		}
		return (0);
	case CONN_S_HEAD:
		if (c->c_flags & CONN_F_LAST) {
			conn_linger(c);
			return (1);
		}
		if (c->c_flags & CONN_F_MORE) {
			c->c_flags &= ~CONN_F_MORE;
			conn_input(c, NULL, 0);
			return (1);
		}
		/* FALLTHROUGH */
	case CONN_S_BODY:
		if (c->c_flags & CONN_F_EOF) {
			conn_close(c, "peer closed");
			return (-1);
		}
		return (0);
	case CONN_S_LINGER:
		break;
	}
	return (0);
}

/* Read and drop input of a lingering connection. */
static void
conn_linger_read(struct conn *c)
{
	ssize_t n;

	for (;;) {
		n = read(c->c_fd, c->c_worker->w_scratch, BACKEND_SCRATCH);
		if (n > 0)
			continue;
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			c->c_flags &= ~CONN_F_READABLE;
			return;
		}
		conn_close(c, n == 0 ? "closed after linger" : "linger error");
		return;
	}
}

/* Move a connection along as far as its socket allows. */
static void
conn_run(struct conn *c)
{
	struct worker *w = c->c_worker;
	ssize_t n;

	while (!(c->c_flags & CONN_F_DEAD)) {
		if (c->c_state == CONN_S_LINGER) {
			if (c->c_flags & CONN_F_READABLE)
				conn_linger_read(c);
			return;
		}
		/*
		 * Output first: a peer that does not read is not read, except
		 * that a WebSocket may send a whole message (16 MiB) before
		 * it reads the echo, as clients that buffer messages do.
		 */
		if (conn_output_pending(c)) {
			switch (conn_flush(c)) {
			case -1:
				conn_close(c, "write failed");
				return;
			case 0:
				if (c->c_state != CONN_S_WS ||
				    BUF_LEN(&c->c_out) >= BACKEND_WS_HIWAT)
					return;
				break;
			default:
				continue;
			}
		} else {
			switch (conn_drained(c)) {
			case -1:
				return;
			case 1:
				continue;
			}
		}
		if (!(c->c_flags & CONN_F_READABLE) ||
		    (c->c_flags & CONN_F_EOF))
			return;
		n = read(c->c_fd, w->w_scratch, BACKEND_SCRATCH);
		if (n > 0) {
			/*
			 * Short read: the socket is empty until the next edge,
			 * unless the FIN already came with this one.
			 */
			if ((size_t)n < BACKEND_SCRATCH &&
			    !(c->c_flags & CONN_F_RDHUP))
				c->c_flags &= ~CONN_F_READABLE;
			conn_input(c, w->w_scratch, (size_t)n);
		} else if (n == 0) {
			c->c_flags |= CONN_F_EOF;
			c->c_flags &= ~CONN_F_READABLE;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			c->c_flags &= ~CONN_F_READABLE;
			return;
		} else if (errno != EINTR) {
			conn_close(c, "read failed");
			return;
		}
	}
}

/* Take a new connection. */
static void
conn_accept(struct worker *w, int fd)
{
	struct epoll_event ev;
	struct conn *c;

	c = xcalloc(1, sizeof *c);
	c->c_worker = w;
	c->c_fd = fd;
	c->c_state = CONN_S_HEAD;
	c->c_flags = CONN_F_WRITABLE;
	LIST_INSERT_HEAD(&w->w_conns, c, c_entry);
	sock_nodelay(fd);
	memset(&ev, 0, sizeof ev);
	ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
	ev.data.ptr = c;
	if (epoll_ctl(w->w_ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
		conn_close(c, "epoll_ctl failed");
		conn_free(c);
	}
}

/* The listener is readable: accept what waits. */
static void
worker_accept(struct worker *w)
{
	int fd, i;

	for (i = 0; i < BACKEND_ACCEPTS; i++) {
		fd = accept4(
		    w->w_lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd != -1) {
			conn_accept(w, fd);
			continue;
		}
		if (errno == EINTR || errno == ECONNABORTED)
			continue;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
		    errno == ENOMEM) {
			/* Out of descriptors: pause instead of spinning. */
			fprintf(stderr,
			    "akbench-backend: accept: %s; pausing "
			    "for %d ms\n",
			    strerror(errno), BACKEND_PAUSE_MS);
			epoll_ctl(w->w_ep, EPOLL_CTL_DEL, w->w_lfd, NULL);
			w->w_resume_at = clock_mono_msec() + BACKEND_PAUSE_MS;
		}
		return;
	}
}

/* Expire lingering connections and end an accept pause. */
static void
worker_timers(struct worker *w)
{
	struct epoll_event ev;
	struct conn *c, *next;
	uint64_t now = clock_mono_msec();

	for (c = LIST_FIRST(&w->w_linger); c != NULL; c = next) {
		next = LIST_NEXT(c, c_lentry);
		if (now >= c->c_linger_until) {
			conn_close(c, "linger timeout");
			conn_free(c);
		}
	}
	if (w->w_resume_at != 0 && now >= w->w_resume_at) {
		w->w_resume_at = 0;
		memset(&ev, 0, sizeof ev);
		ev.events = EPOLLIN;
		ev.data.ptr = &w->w_lfd;
		epoll_ctl(w->w_ep, EPOLL_CTL_ADD, w->w_lfd, &ev);
	}
}

/* A worker thread: its epoll loop until the stop descriptor fires. */
static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct epoll_event evs[BACKEND_EVENTS];
	struct conn *c;
	int i, n, stop = 0;

	while (!stop) {
		n = epoll_wait(w->w_ep, evs, BACKEND_EVENTS, 500);
		if (n == -1 && errno != EINTR) {
			fprintf(stderr, "akbench-backend: epoll_wait: %s\n",
			    strerror(errno));
			exit(1);
		}
		for (i = 0; i < n; i++) {
			if (evs[i].data.ptr == &w->w_lfd) {
				worker_accept(w);
				continue;
			}
			if (evs[i].data.ptr == &backend_stopfd) {
				stop = 1;
				continue;
			}
			c = evs[i].data.ptr;
			if (evs[i].events &
			    (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				c->c_flags |= CONN_F_READABLE;
			if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
				c->c_flags |= CONN_F_RDHUP;
			if (evs[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
				c->c_flags |= CONN_F_WRITABLE;
			conn_run(c);
			if (c->c_flags & CONN_F_DEAD)
				conn_free(c);
		}
		if (!LIST_EMPTY(&w->w_linger) || w->w_resume_at != 0)
			worker_timers(w);
	}
	while ((c = LIST_FIRST(&w->w_conns)) != NULL) {
		conn_close(c, "shutting down");
		conn_free(c);
	}
	return (NULL);
}

/*
 * Open a worker's listener on addr (SO_REUSEPORT: every worker binds the
 * same address) and its epoll set.  Returns 0, or -1 with *cause set.
 */
static int
worker_setup(
    struct worker *w, const struct sockaddr *sa, socklen_t salen, char **cause)
{
	struct epoll_event ev;
	int one = 1;

	LIST_INIT(&w->w_conns);
	LIST_INIT(&w->w_linger);
	w->w_lfd = socket(
	    sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (w->w_lfd == -1) {
		xasprintf(cause, "socket: %s", strerror(errno));
		return (-1);
	}
	if (setsockopt(w->w_lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) !=
		0 ||
	    setsockopt(w->w_lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) !=
		0) {
		xasprintf(cause, "setsockopt: %s", strerror(errno));
		goto fail;
	}
	if (bind(w->w_lfd, sa, salen) != 0) {
		xasprintf(cause, "bind: %s", strerror(errno));
		goto fail;
	}
	if (listen(w->w_lfd, 65535) != 0) {
		xasprintf(cause, "listen: %s", strerror(errno));
		goto fail;
	}
	if ((w->w_ep = epoll_create1(EPOLL_CLOEXEC)) == -1) {
		xasprintf(cause, "epoll_create1: %s", strerror(errno));
		goto fail;
	}
	memset(&ev, 0, sizeof ev);
	ev.events = EPOLLIN;
	ev.data.ptr = &w->w_lfd;
	if (epoll_ctl(w->w_ep, EPOLL_CTL_ADD, w->w_lfd, &ev) != 0)
		goto fail_ep;
	ev.data.ptr = &backend_stopfd;
	if (epoll_ctl(w->w_ep, EPOLL_CTL_ADD, backend_stopfd, &ev) != 0)
		goto fail_ep;
	w->w_scratch = xmalloc(BACKEND_SCRATCH);
	return (0);

fail_ep:
	xasprintf(cause, "epoll_ctl: %s", strerror(errno));
	close(w->w_ep);
fail:
	close(w->w_lfd);
	return (-1);
}

/* Print how to use the tool; exit with status. */
static void __attribute__((noreturn)) usage(int status)
{
	fprintf(status == 0 ? stdout : stderr,
	    "usage: akbench-backend --listen ADDR:PORT [--threads N] [-v]\n"
	    "  GET|HEAD /size/N  N bytes of 'x' (0 to 64 GiB)\n"
	    "  any body          read and dropped; answers \"<bytes>\\n\"\n"
	    "  GET /ws           WebSocket echo (upgrade)\n"
	    "Listens on loopback only; prints \"ready\" once listening.\n");
	exit(status);
}

/* Listen, start the workers, and run until SIGTERM or SIGINT. */
int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct sockaddr_storage ss;
	struct worker *workers;
	const char *listen_arg = NULL;
	char *cause = NULL;
	uint64_t nthreads = 1, one = 1;
	socklen_t sslen;
	sigset_t sigs;
	size_t i;
	int ch, sig;

	while ((ch = getopt_long(argc, argv, "l:t:vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'l':
			listen_arg = optarg;
			break;
		case 't':
			if (opt_u64("--threads", optarg, 1, 256, &nthreads,
				&cause) != 0)
				goto fail;
			break;
		case 'v':
			backend_verbose = 1;
			break;
		case 'h':
			usage(0);
		case 'V':
			printf("akbench-backend %s\n", AK_VERSION);
			exit(0);
		default:
			usage(1);
		}
	}
	if (optind != argc || listen_arg == NULL)
		usage(1);
	if (addr_parse_hostport(listen_arg, &ss, &sslen, &cause) != 0)
		goto fail;
	if (!addr_is_loopback((struct sockaddr *)&ss)) {
		xasprintf(&cause,
		    "--listen %s: not a loopback address; the benchmark "
		    "backend only listens on 127.0.0.0/8 or ::1",
		    listen_arg);
		goto fail;
	}
	if (nofile_raise(0, &cause) != 0)
		goto fail;

	memset(backend_pattern, 'x', sizeof backend_pattern);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	if ((backend_stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) == -1) {
		xasprintf(&cause, "eventfd: %s", strerror(errno));
		goto fail;
	}
	workers = xcalloc(nthreads, sizeof *workers);
	for (i = 0; i < nthreads; i++) {
		if (worker_setup(&workers[i], (struct sockaddr *)&ss, sslen,
			&cause) != 0)
			goto fail;
	}
	for (i = 0; i < nthreads; i++) {
		if ((errno = pthread_create(&workers[i].w_thread, NULL,
			 worker_main, &workers[i])) != 0) {
			xasprintf(
			    &cause, "pthread_create: %s", strerror(errno));
			goto fail;
		}
	}
	printf("ready\n");
	fflush(stdout);

	do {
		if (sigwait(&sigs, &sig) != 0)
			sig = 0;
	} while (sig != SIGINT && sig != SIGTERM);
	if (write(backend_stopfd, &one, sizeof one) != (ssize_t)sizeof one)
		abort();
	for (i = 0; i < nthreads; i++) {
		pthread_join(workers[i].w_thread, NULL);
		free(workers[i].w_scratch);
		close(workers[i].w_lfd);
		close(workers[i].w_ep);
	}
	free(workers);
	close(backend_stopfd);
	return (0);

fail:
	fprintf(stderr, "akbench-backend: %s\n", cause);
	free(cause);
	return (1);
}
