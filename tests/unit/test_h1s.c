/*
 * The HTTP/1 server engine (gateway/h1s.c) and its response sink over the
 * in-memory transport (h1xport.c): a real event base, two evbuffers, no
 * socket.  Framing in and out, pipelining, keep-alive, every refusal of a
 * bad head, 100-continue, the read-stop rule, the sink's flow control,
 * trailers, interim heads, the upgrade hand-over, a free from inside a
 * hook, the read watermark changed at run time, the write timeout and the
 * count of bytes sent, each checked on the bytes the peer receives.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "clock.h"
#include "gw.h"

/* What the test owner does with a request head. */
enum t_mode {
	T_ECHO = 0, /* read the body, answer 200 with what it read */
	T_HOLD, /* do nothing: the test answers */
	T_CLOSE_HEAD, /* h1s_close inside on_head */
	T_CLOSE_BODY, /* h1s_close inside on_body */
	T_CLOSE_LOG, /* h1s_close inside on_log */
};

/* One connection under test and its owner's record of the hooks. */
struct t {
	struct event_base *base;
	struct h1s_conf conf;
	struct http1_limits limits;
	struct h1s *h;
	struct h1x_mem *peer;
	struct evbuffer *got; /* what the peer received */
	struct evbuffer *body; /* request body the owner read */
	enum t_mode mode;
	int resp_flags; /* T_R_*: how T_ECHO answers */
#define T_R_CHUNKED 0x01 /* no Content-Length */
#define T_R_TRAILERS 0x02 /* with a trailer field */
#define T_R_INTERIM 0x04 /* a 103 first */
#define T_R_STATUS204 0x08
#define T_R_STATUS304 0x10
	int heads, bodies, drains, errors, logs, closes, frees;
	char targets[8][32];
	int log_status;
	char log_code[64];
	int free_state; /* h1x_mem_state at on_free */
};

static const struct h1s_hooks t_hooks;

/* Run the loop n passes, without waiting (one pass each: EVLOOP_ONCE). */
static void
t_spin(struct t *t, int n)
{
	while (n-- > 0)
		event_base_loop(t->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

/* Run the loop for ms milliseconds (timers fire). */
static void
t_sleep(struct t *t, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(t->base, &tv);
	event_base_dispatch(t->base);
}

/* A connection with small timeouts; the peer receives everything. */
static void
t_open(struct t *t, size_t in_high, int autorecv)
{
	struct h1x *x;

	memset(t, 0, sizeof *t);
	t->base = event_base_new();
	t->limits.max_head = 4096;
	t->limits.max_line = 1024;
	t->limits.max_headers = 20;
	t->conf.hc_name = "test";
	t->conf.hc_limits = &t->limits;
	t->conf.hc_head_ms = 200;
	t->conf.hc_idle_ms = 5000;
	t->conf.hc_linger_ms = 50;
	t->got = evbuffer_new();
	t->body = evbuffer_new();
	x = h1x_mem_new(t->base, in_high, 0, &t->peer);
	if (autorecv)
		h1x_mem_autorecv(t->peer, t->got);
	t->h = h1s_new(t->base, x, &t->conf, &t_hooks, t, 1, "peer");
}

/* Close what is left, run the frees, check they ran once each. */
static void
t_done(struct t *t)
{
	if (t->frees == 0)
		h1s_close(t->h, "test over");
	t_spin(t, 5);
	assert_int_equal(t->closes, 1);
	assert_int_equal(t->frees, 1);
	assert_true(h1x_mem_state(t->peer) & H1X_MEM_FREED);
	h1x_mem_free(t->peer);
	evbuffer_free(t->got);
	evbuffer_free(t->body);
	event_base_free(t->base);
}

/* The peer sends a string, then the loop runs. */
static void
t_send(struct t *t, const char *s)
{
	h1x_mem_send(t->peer, s, strlen(s));
	t_spin(t, 10);
}

/* The peer sends a string one byte per loop pass: every split. */
static void
t_send_bytes(struct t *t, const char *s)
{
	size_t i;

	for (i = 0; s[i] != '\0'; i++) {
		h1x_mem_send(t->peer, s + i, 1);
		t_spin(t, 3);
	}
	t_spin(t, 10);
}

/* What the peer received, as a string (freed by the caller). */
static char *
t_got(struct t *t)
{
	size_t n = evbuffer_get_length(t->got);
	char *s = malloc(n + 1);

	evbuffer_copyout(t->got, s, n);
	s[n] = '\0';
	return (s);
}

/* The peer received exactly want (and it is consumed). */
static void
t_expect(struct t *t, const char *want)
{
	char *s = t_got(t);

	assert_string_equal(s, want);
	evbuffer_drain(t->got, evbuffer_get_length(t->got));
	free(s);
}

/* The peer received something containing want. */
static void
t_expect_has(struct t *t, const char *want)
{
	char *s = t_got(t);

	if (strstr(s, want) == NULL)
		fail_msg("expected \"%s\" in \"%s\"", want, s);
	free(s);
}

/* Answer the current request: status, body, as t->resp_flags say. */
static void
t_answer(struct t *t, struct h1s *h, int status, const char *text)
{
	struct sink *sk = h1s_sink(h);
	struct hfield f[2], tr;
	struct head rh;
	struct evbuffer *b;

	if (t->resp_flags & T_R_INTERIM) {
		memset(&rh, 0, sizeof rh);
		rh.h_status = 103;
		hfield_set(&f[0], "Link", "</a.css>; rel=preload");
		rh.h_fields = f;
		rh.h_nfields = 1;
		assert_int_equal(sink_head(sk, &rh), 0);
	}
	if (t->resp_flags & T_R_STATUS204)
		status = 204;
	if (t->resp_flags & T_R_STATUS304)
		status = 304;
	memset(&rh, 0, sizeof rh);
	rh.h_status = status;
	hfield_set(&f[0], "Content-Type", "text/plain");
	/* The sink writes its own framing: a head's own is never sent. */
	hfield_set(&f[1], "Content-Length", "999");
	rh.h_fields = f;
	rh.h_nfields = 2;
	if (!(t->resp_flags & T_R_CHUNKED)) {
		rh.h_flags |= HEAD_F_LENGTH;
		rh.h_length = strlen(text);
	}
	assert_int_equal(sink_head(sk, &rh), 0);
	b = evbuffer_new();
	evbuffer_add(b, text, strlen(text));
	assert_int_equal(sink_body(sk, b, strlen(text)), 0);
	assert_int_equal(evbuffer_get_length(b), 0);
	evbuffer_free(b);
	if (t->resp_flags & T_R_TRAILERS) {
		hfield_set(&tr, "X-Checksum", "abc");
		assert_int_equal(sink_trailers(sk, &tr, 1), 0);
	}
	assert_int_equal(sink_end(sk), 0);
}

/* Read what body waits; once it is whole, answer with it (T_ECHO). */
static void
t_read_body(struct t *t, struct h1s *h)
{
	enum http1_err err;
	char *text;
	size_t n;

	if (h1s_body_read(h, t->body, 1 << 20, &err) < 0)
		fail_msg("body read failed: %s", http1_err_code(err));
	if (!h1s_body_done(h))
		return;
	n = evbuffer_get_length(t->body);
	text = malloc(n + 1);
	evbuffer_remove(t->body, text, n);
	text[n] = '\0';
	t_answer(t, h, 200, text);
	free(text);
}

static void
t_head_cb(
    struct h1s *h, void *arg, const struct head *req, const struct http1_msg *m)
{
	struct t *t = arg;
	size_t n = req->h_target_len < 31 ? req->h_target_len : 31;

	(void)m;
	if (t->heads < 8) {
		memcpy(t->targets[t->heads], req->h_target, n);
		t->targets[t->heads][n] = '\0';
	}
	t->heads++;
	switch (t->mode) {
	case T_ECHO:
		t_read_body(t, h);
		break;
	case T_CLOSE_HEAD:
		h1s_close(h, "closed in on_head");
		/* The engine is still here, dead: calls do nothing. */
		assert_int_equal(h1s_state(h), H1S_S_DEAD);
		assert_int_equal(sink_head(h1s_sink(h), req), -1);
		break;
	default:
		break;
	}
}

static void
t_body_cb(struct h1s *h, void *arg)
{
	struct t *t = arg;

	t->bodies++;
	if (t->mode == T_ECHO)
		t_read_body(t, h);
	else if (t->mode == T_CLOSE_BODY)
		h1s_close(h, "closed in on_body");
}

static void
t_drain_cb(struct h1s *h, void *arg)
{
	(void)h;
	((struct t *)arg)->drains++;
}

static void
t_error_cb(struct h1s *h, void *arg, const char *why)
{
	(void)h;
	(void)why;
	((struct t *)arg)->errors++;
}

static void
t_log_cb(struct h1s *h, void *arg, const struct h1s_refusal *r)
{
	struct t *t = arg;

	t->logs++;
	t->log_status = r->hr_status;
	snprintf(t->log_code, sizeof t->log_code, "%s", r->hr_code);
	if (t->mode == T_CLOSE_LOG)
		h1s_close(h, "closed in on_log");
}

static void
t_close_cb(struct h1s *h, void *arg, const char *reason)
{
	(void)h;
	(void)reason;
	((struct t *)arg)->closes++;
}

static void
t_free_cb(void *arg)
{
	struct t *t = arg;

	t->frees++;
	t->free_state = h1x_mem_state(t->peer);
}

static const struct h1s_hooks t_hooks = {
	.on_head = t_head_cb,
	.on_body = t_body_cb,
	.on_drain = t_drain_cb,
	.on_error = t_error_cb,
	.on_log = t_log_cb,
	.on_close = t_close_cb,
	.on_free = t_free_cb,
};

/* A Content-Length body in, split at every byte, and out. */
static void
test_length_body(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t_send_bytes(&t,
	    "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n"
	    "hello world");
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 11\r\n\r\nhello world");
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	assert_int_equal(t.errors, 0);
	t_done(&t);
}

/* A chunked body in, split at every byte; chunked out with trailers. */
static void
test_chunked_body(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t.resp_flags = T_R_CHUNKED | T_R_TRAILERS;
	t_send_bytes(&t,
	    "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n");
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n"
	    "b\r\nhello world\r\n0\r\nX-Checksum: abc\r\n\r\n");
	/* Trailers on a Content-Length body are dropped. */
	t.resp_flags = T_R_TRAILERS;
	t_send(&t, "GET /d HTTP/1.1\r\nHost: x\r\n\r\n");
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 0\r\n\r\n");
	t_done(&t);
}

/* A malformed chunked body: the owner hears it and refuses. */
static void
test_chunked_bad(void **state)
{
	struct t t;
	enum http1_err err;

	(void)state;
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(&t,
	    "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "zz\r\n");
	assert_int_equal(h1s_body_read(t.h, t.body, 100, &err), -1);
	assert_int_equal(err, HTTP1_E_BAD_CHUNK_SIZE);
	t_done(&t);
}

/* HEAD, 204 and 304 get no body; HEAD keeps its Content-Length. */
static void
test_no_body(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t_send(&t,
	    "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\nGET /g HTTP/1.1\r\n"
	    "Host: x\r\n\r\n");
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 0\r\n\r\n"
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 0\r\n\r\n");
	t.mode = T_HOLD;
	t_send(&t, "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n");
	t_answer(&t, t.h, 200, "12345");
	t_spin(&t, 10);
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 5\r\n\r\n");
	t.resp_flags = T_R_STATUS204;
	t_send(&t, "GET /n HTTP/1.1\r\nHost: x\r\n\r\n");
	t_answer(&t, t.h, 200, "12345");
	t_spin(&t, 10);
	t_expect(&t,
	    "HTTP/1.1 204 No Content\r\nContent-Type: text/plain\r\n"
	    "\r\n");
	t.resp_flags = T_R_STATUS304 | T_R_CHUNKED;
	t_send(&t, "GET /m HTTP/1.1\r\nHost: x\r\n\r\n");
	t_answer(&t, t.h, 200, "12345");
	t_spin(&t, 10);
	t_expect(&t,
	    "HTTP/1.1 304 Not Modified\r\nContent-Type: text/plain\r\n"
	    "\r\n");
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	t_done(&t);
}

/* HTTP/1.0: close-delimited without a length; keep-alive when asked. */
static void
test_http10(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t_send(&t, "GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 0\r\nConnection: keep-alive\r\n\r\n");
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	t.resp_flags = T_R_CHUNKED | T_R_INTERIM;
	t.mode = T_HOLD;
	t_send(&t, "GET /e HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
	t_answer(&t, t.h, 200, "raw bytes");
	t_spin(&t, 10);
	/* No 103 for HTTP/1.0, no chunks: the close ends the body. */
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Connection: close\r\n\r\nraw bytes");
	assert_int_equal(t.frees, 1);
	/* on_free comes first; the transport goes right after it. */
	assert_false(t.free_state & H1X_MEM_FREED);
	t_done(&t);
}

/* Three requests in one write: answered in order, one at a time. */
static void
test_pipelining(void **state)
{
	struct t t;
	int i;

	(void)state;
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(&t,
	    "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n"
	    "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
	    "GET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	for (i = 1; i <= 3; i++) {
		/* The next head is not parsed before this answer ends. */
		t_spin(&t, 20);
		assert_int_equal(t.heads, i);
		assert_string_equal(t.targets[i - 1],
		    i == 1       ? "/1"
			: i == 2 ? "/2"
				 : "/3");
		t_answer(&t, t.h, 200, t.targets[i - 1]);
	}
	t_spin(&t, 20);
	assert_int_equal(t.heads, 3);
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 2\r\n\r\n/1"
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 2\r\n\r\n/2"
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 2\r\nConnection: close\r\n\r\n/3");
	/* The whole request was read and nothing more came: closed. */
	assert_int_equal(t.frees, 1);
	t_done(&t);
}

/* Keep-alive by default; Connection: close, then shut and linger. */
static void
test_keepalive_close(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t_send(&t, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	assert_int_equal(t.closes, 0);
	evbuffer_drain(t.got, evbuffer_get_length(t.got));
	t.mode = T_HOLD;
	t_send(&t, "GET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_false(h1s_keeps(t.h));
	/* More bytes after the request: our side shuts, then lingers. */
	t_send(&t, "GET /3 HTTP/1.1\r\n");
	t_answer(&t, t.h, 200, "x");
	t_spin(&t, 10);
	t_expect_has(&t, "Connection: close\r\n\r\nx");
	assert_int_equal(h1s_state(t.h), H1S_S_LINGER);
	assert_true(h1x_mem_state(t.peer) & H1X_MEM_SHUT);
	assert_int_equal(t.heads, 2);
	t_sleep(&t, 150);
	assert_int_equal(t.frees, 1);
	t_done(&t);
}

/*
 * A drain: an idle connection closes at once; a request in progress, or
 * one whose head is still coming, is answered with Connection: close and
 * the connection then closes; a pipelined request behind it is not read.
 */
static void
test_drain(void **state)
{
	struct t t;

	(void)state;
	/* Idle, between requests. */
	t_open(&t, 0, 1);
	t_send(&t, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	assert_int_equal(h1s_drain(t.h, "draining"), 1);
	assert_int_equal(t.closes, 1);
	t_done(&t);

	/* In an exchange, a pipelined request waiting behind it. */
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(&t,
	    "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n"
	    "GET /3 HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_int_equal(h1s_drain(t.h, "draining"), 0);
	assert_false(h1s_keeps(t.h));
	t_answer(&t, t.h, 200, "x");
	t_spin(&t, 10);
	t_expect_has(&t, "Connection: close\r\n\r\nx");
	assert_int_equal(t.heads, 1);
	t_sleep(&t, 150);
	assert_int_equal(t.frees, 1);
	t_done(&t);

	/* Half a head: the request is answered, with Connection: close. */
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(&t, "GET /4 HTTP/1.1\r\n");
	assert_int_equal(h1s_state(t.h), H1S_S_HEAD);
	assert_int_equal(h1s_drain(t.h, "draining"), 0);
	t_send(&t, "Host: x\r\n\r\n");
	assert_int_equal(t.heads, 1);
	t_answer(&t, t.h, 200, "y");
	t_spin(&t, 10);
	t_expect_has(&t, "Connection: close\r\n\r\ny");
	t_sleep(&t, 150);
	assert_int_equal(t.frees, 1);
	t_done(&t);
}

/* A request that makes the parser refuse with err. */
struct t_bad {
	enum http1_err tb_err;
	const char *tb_req;
};

/* Every refusal of a bad head: status, code, JSON, close after linger. */
static void
test_refusals(void **state)
{
	static const struct t_bad bad[] = {
		{ HTTP1_E_HEAD_TOO_LARGE,
		    "GET / HTTP/1.1\r\nHost: x\r\nX-A: "
		    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		    "AAAAA"
		    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		    "AAAAA"
		    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		    "AAAAA"
		    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
		    "AAAAA"
		    "\r\n\r\n" },
		{ HTTP1_E_LINE_TOO_LONG,
		    "GET /"
		    "LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL"
		    "LLLLL"
		    "LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL"
		    "LLLLL"
		    " HTTP/1.1\r\nHost: x\r\n\r\n" },
		{ HTTP1_E_TOO_MANY_HEADERS,
		    "GET / HTTP/1.1\r\nHost: x\r\na: 1\r\nb: 1\r\nc: 1\r\n"
		    "d: 1\r\n\r\n" },
		{ HTTP1_E_BAD_REQUEST_LINE,
		    "GET  / HTTP/1.1\r\nHost: x\r\n\r\n" },
		{ HTTP1_E_BAD_VERSION, "GET / HTTP/2.0\r\nHost: x\r\n\r\n" },
		{ HTTP1_E_BAD_HEADER_NAME,
		    "GET / HTTP/1.1\r\nHo@st: x\r\n\r\n" },
		{ HTTP1_E_SPACE_BEFORE_COLON,
		    "GET / HTTP/1.1\r\nHost : x\r\n\r\n" },
		{ HTTP1_E_OBS_FOLD, "GET / HTTP/1.1\r\nHost: x\r\n y\r\n\r\n" },
		{ HTTP1_E_BAD_HEADER_VALUE,
		    "GET / HTTP/1.1\r\nHost: x\001y\r\n\r\n" },
		{ HTTP1_E_BARE_CR, "GET / HTTP/1.1\r\nHost: x\ry\r\n\r\n" },
		{ HTTP1_E_BARE_LF, "GET / HTTP/1.1\r\nHost: x\n\r\n" },
		{ HTTP1_E_BAD_CONTENT_LENGTH,
		    "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "
		    "+3\r\n\r\n" },
		{ HTTP1_E_DUP_CONTENT_LENGTH,
		    "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
		    "Content-Length: 3\r\n\r\n" },
		{ HTTP1_E_CL_AND_TE,
		    "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n" },
		{ HTTP1_E_BAD_TRANSFER_ENCODING,
		    "POST / HTTP/1.1\r\nHost: x\r\n"
		    "Transfer-Encoding: chunked, chunked\r\n\r\n" },
		{ HTTP1_E_UNSUPPORTED_TE,
		    "POST / HTTP/1.1\r\nHost: x\r\n"
		    "Transfer-Encoding: gzip, chunked\r\n\r\n" },
		{ HTTP1_E_MISSING_HOST, "GET / HTTP/1.1\r\n\r\n" },
		{ HTTP1_E_DUP_HOST,
		    "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n" },
	};
	struct t t;
	char want[512];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		t_open(&t, 0, 1);
		if (bad[i].tb_err == HTTP1_E_TOO_MANY_HEADERS)
			t.limits.max_headers = 3;
		if (bad[i].tb_err == HTTP1_E_HEAD_TOO_LARGE)
			t.limits.max_head = 200;
		if (bad[i].tb_err == HTTP1_E_LINE_TOO_LONG)
			t.limits.max_line = 100;
		t_send(&t, bad[i].tb_req);
		assert_int_equal(t.heads, 0);
		assert_int_equal(t.logs, 1);
		assert_string_equal(t.log_code, http1_err_code(bad[i].tb_err));
		assert_int_equal(t.log_status, http1_err_status(bad[i].tb_err));
		snprintf(want, sizeof want, "HTTP/1.1 %d %s\r\n",
		    http1_err_status(bad[i].tb_err),
		    http1_reason(http1_err_status(bad[i].tb_err)));
		t_expect_has(&t, want);
		t_expect_has(&t, "Content-Type: application/json\r\n");
		snprintf(want, sizeof want, "X-Gateway-Error: %s\r\n",
		    http1_err_code(bad[i].tb_err));
		t_expect_has(&t, want);
		t_expect_has(&t, "Connection: close\r\n\r\n");
		snprintf(want, sizeof want,
		    "\r\n\r\n{\"status\":%d,\"code\":\"%s\",\"message\":\"%s\"}"
		    "\n",
		    http1_err_status(bad[i].tb_err),
		    http1_err_code(bad[i].tb_err),
		    http1_err_message(bad[i].tb_err));
		t_expect_has(&t, want);
		/* Our side shut; the peer's input drains, then the close. */
		assert_true(h1x_mem_state(t.peer) & H1X_MEM_SHUT);
		assert_int_equal(t.frees, 0);
		t_sleep(&t, 120);
		assert_int_equal(t.frees, 1);
		t_done(&t);
	}
}

/* A head that does not arrive in time: 408; an idle one just closes. */
static void
test_timeouts(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t_send(&t, "GET / HTTP/1.1\r\nHo");
	t_sleep(&t, 300);
	t_expect_has(&t, "HTTP/1.1 408 Request Timeout\r\n");
	t_expect_has(&t, "The request head did not arrive within 200ms.");
	assert_string_equal(t.log_code, "request_timeout");
	t_done(&t);

	t_open(&t, 0, 1);
	t.conf.hc_idle_ms = 50;
	t_send(&t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
	evbuffer_drain(t.got, evbuffer_get_length(t.got));
	t_sleep(&t, 150);
	assert_int_equal(t.frees, 1);
	assert_int_equal(evbuffer_get_length(t.got), 0);
	assert_int_equal(t.logs, 0);
	t_done(&t);
}

/* 100 Continue only once the owner reads the body, never after an answer. */
static void
test_continue(void **state)
{
	struct t t;
	enum http1_err err;

	(void)state;
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(&t,
	    "PUT /u HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
	    "Expect: 100-continue\r\n\r\n");
	assert_int_equal(t.heads, 1);
	assert_int_equal(evbuffer_get_length(t.got), 0);
	assert_int_equal(h1s_body_read(t.h, t.body, 100, &err), 0);
	t_spin(&t, 5);
	t_expect(&t, "HTTP/1.1 100 Continue\r\n\r\n");
	t_send(&t, "hello");
	t.mode = T_ECHO;
	t_read_body(&t, t.h);
	t_spin(&t, 5);
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 5\r\n\r\nhello");
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	/* Answered first: no 100, and the body never comes: close. */
	t.mode = T_HOLD;
	t_send(&t,
	    "PUT /v HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
	    "Expect: 100-continue\r\n\r\n");
	t_answer(&t, t.h, 413, "no");
	assert_int_equal(h1s_body_read(t.h, t.body, 100, &err), 0);
	t_spin(&t, 5);
	t_expect(&t,
	    "HTTP/1.1 413 Content Too Large\r\n"
	    "Content-Type: text/plain\r\nContent-Length: 2\r\n"
	    "Connection: close\r\n\r\nno");
	t_done(&t);
}

/*
 * A peer floods pipelined requests while the first answer is held: the
 * input stays at its limit, the rest waits on the wire, and the read
 * callback is not run again and again (no busy loop).
 */
static void
test_read_stop(void **state)
{
	const char *req = "GET /p HTTP/1.1\r\nHost: x\r\n\r\n";
	struct t t;
	unsigned reads;
	int i, n = 2000;

	(void)state;
	t_open(&t, 1024, 1);
	t.mode = T_HOLD;
	for (i = 0; i < n; i++)
		h1x_mem_send(t.peer, req, strlen(req));
	t_spin(&t, 1000);
	assert_int_equal(t.heads, 1);
	reads = h1x_mem_reads(t.peer);
	assert_true(reads < 10);
	assert_false(h1x_mem_state(t.peer) & H1X_MEM_READING);
	/* The first head was taken from the input: it read one more. */
	assert_true(
	    h1x_mem_waiting(t.peer) >= n * strlen(req) - 1024 - strlen(req));
	/* Answer them all; each is parsed after the one before it. */
	t.mode = T_ECHO;
	t_answer(&t, t.h, 200, "");
	for (i = 0; i < 100 * n && t.heads < n; i++)
		t_spin(&t, 1);
	assert_int_equal(t.heads, n);
	assert_int_equal(h1x_mem_waiting(t.peer), 0);
	/*
	 * Each read brought new bytes, about two per request (the room a
	 * head left, then the head after it); a spin would be one per pass.
	 */
	if (h1x_mem_reads(t.peer) > 2 * (unsigned)n + 10)
		fail_msg("%u reads for %d requests", h1x_mem_reads(t.peer), n);
	t_done(&t);
}

/*
 * The sink's flow control: the owner writes until sink_room says full,
 * hears on_drain once the peer read, and ends.
 */
static void
test_sink_flow(void **state)
{
	struct t t;
	struct sink *sk;
	struct evbuffer *b, *rx;
	struct head rh;
	char piece[1000];
	size_t sent = 0, total = 0;
	int drains;

	(void)state;
	t_open(&t, 0, 0);
	t.conf.hc_out_high = 8192;
	t.mode = T_HOLD;
	rx = evbuffer_new();
	t_send(&t, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
	sk = h1s_sink(t.h);
	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	assert_int_equal(sink_head(sk, &rh), 0);
	memset(piece, 'a', sizeof piece);
	b = evbuffer_new();
	while (sink_room(sk) > 0 && sent < 100000) {
		evbuffer_add(b, piece, sizeof piece);
		assert_int_equal(sink_body(sk, b, sizeof piece), 0);
		sent += sizeof piece;
	}
	assert_true(sent >= 7000 && sent <= 9000);
	assert_int_equal(sink_room(sk), 0);
	t_spin(&t, 10);
	assert_int_equal(t.drains, 0);
	drains = t.drains;
	/* The peer reads: the owner hears it and goes on. */
	total += h1x_mem_recv(t.peer, rx, 1 << 20);
	t_spin(&t, 10);
	assert_true(t.drains > drains);
	assert_true(sink_room(sk) == 8192);
	evbuffer_add(b, piece, sizeof piece);
	assert_int_equal(sink_body(sk, b, sizeof piece), 0);
	sent += sizeof piece;
	assert_int_equal(sink_end(sk), 0);
	t_spin(&t, 5);
	total += h1x_mem_recv(t.peer, rx, 1 << 20);
	t_spin(&t, 5);
	/* Chunked: each 1000-byte piece is "3e8\r\n" + data + "\r\n". */
	assert_true(total > sent);
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	evbuffer_free(b);
	evbuffer_free(rx);
	t_done(&t);
}

/* An interim head goes before the final one, to HTTP/1.1. */
static void
test_interim(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t.resp_flags = T_R_INTERIM;
	t_send(&t, "GET /i HTTP/1.1\r\nHost: x\r\n\r\n");
	t_expect(&t,
	    "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload"
	    "\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 0\r\n\r\n");
	t_done(&t);
}

/* The peer ends mid-body: the owner hears on_error; mid-head: no line. */
static void
test_eof(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(
	    &t, "POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nab");
	h1x_mem_send_eof(t.peer);
	t_spin(&t, 10);
	assert_int_equal(t.errors, 1);
	assert_int_equal(t.frees, 1);
	t_done(&t);

	/* A whole request, then the end: a half-close, still answered. */
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(&t, "GET /h HTTP/1.1\r\nHost: x\r\n\r\n");
	h1x_mem_send_eof(t.peer);
	t_spin(&t, 10);
	assert_int_equal(t.errors, 0);
	assert_int_equal(t.closes, 0);
	t_answer(&t, t.h, 200, "late");
	t_spin(&t, 10);
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 4\r\nConnection: close\r\n\r\nlate");
	assert_int_equal(t.frees, 1);
	t_done(&t);
}

/* 101 and the hand-over: the connection leaves with the bytes after it. */
static void
test_release(void **state)
{
	struct t t;
	struct hfield f;
	struct head rh;
	struct h1x_mem *mp;

	(void)state;
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(&t,
	    "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
	    "Upgrade: websocket\r\n\r\nframes");
	memset(&rh, 0, sizeof rh);
	rh.h_status = 101;
	hfield_set(&f, "Upgrade", "websocket");
	rh.h_fields = &f;
	rh.h_nfields = 1;
	assert_int_equal(sink_head(h1s_sink(t.h), &rh), 0);
	mp = h1s_release(t.h);
	assert_ptr_equal(mp, t.peer);
	assert_true(h1x_mem_state(t.peer) & H1X_MEM_DETACHED);
	t_expect(&t,
	    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket"
	    "\r\nConnection: Upgrade\r\n\r\n");
	assert_null(h1s_release(t.h));
	t_done(&t);
}

/* The owner may close the engine from inside its hooks. */
static void
test_close_in_hook(void **state)
{
	struct t t;

	(void)state;
	t_open(&t, 0, 1);
	t.mode = T_CLOSE_HEAD;
	t_send(&t, "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\n");
	assert_int_equal(t.heads, 1);
	assert_int_equal(t.closes, 1);
	assert_int_equal(t.frees, 1);
	t_done(&t);

	t_open(&t, 0, 1);
	t.mode = T_CLOSE_BODY;
	t_send(&t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n");
	t_send(&t, "abc");
	assert_int_equal(t.bodies, 1);
	assert_int_equal(t.frees, 1);
	t_done(&t);

	t_open(&t, 0, 1);
	t.mode = T_CLOSE_LOG;
	t_send(&t, "GET / HTTP/9.9\r\n\r\n");
	assert_int_equal(t.logs, 1);
	assert_int_equal(evbuffer_get_length(t.got), 0);
	assert_int_equal(t.frees, 1);
	t_done(&t);
}

/*
 * The read watermark changed at run time: a body the owner does not take
 * fills the input to the mark, then to a raised one, with reading
 * stopped in between (no read callback per pass), then drains.
 */
static void
test_read_high(void **state)
{
	static char body[100000];
	struct t t;
	unsigned reads;
	enum http1_err err;
	size_t got = 0;
	ssize_t n;
	int i;

	(void)state;
	t_open(&t, 1024, 1);
	t.mode = T_HOLD;
	t_send(&t, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 100000"
		   "\r\n\r\n");
	memset(body, 'b', sizeof body);
	h1x_mem_send(t.peer, body, sizeof body);
	t_spin(&t, 200);
	assert_int_equal(h1x_mem_waiting(t.peer), sizeof body - 1024);
	assert_false(h1x_mem_state(t.peer) & H1X_MEM_READING);
	reads = h1x_mem_reads(t.peer);
	assert_true(reads < 10);
	h1s_read_high(t.h, 8192);
	t_spin(&t, 200);
	assert_int_equal(h1x_mem_waiting(t.peer), sizeof body - 8192);
	assert_false(h1x_mem_state(t.peer) & H1X_MEM_READING);
	assert_true(h1x_mem_reads(t.peer) < reads + 10);
	for (i = 0; i < 1000 && !h1s_body_done(t.h); i++) {
		n = h1s_body_read(t.h, t.body, 1 << 20, &err);
		assert_true(n >= 0);
		got += (size_t)n;
		t_spin(&t, 2);
	}
	assert_int_equal(got, sizeof body);
	assert_true(h1s_body_done(t.h));
	t_done(&t);
}

/* Start a response the peer does not read: a head and 1000 body bytes. */
static void
t_stream_start(struct t *t)
{
	struct evbuffer *b;
	struct head rh;
	char piece[1000];

	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	assert_int_equal(sink_head(h1s_sink(t->h), &rh), 0);
	memset(piece, 'c', sizeof piece);
	b = evbuffer_new();
	evbuffer_add(b, piece, sizeof piece);
	assert_int_equal(sink_body(h1s_sink(t->h), b, sizeof piece), 0);
	evbuffer_free(b);
}

/*
 * The write timeout: output that waits without the peer taking any of it
 * ends the exchange (on_error) and the connection; each read restarts it,
 * and it does not run while nothing waits.
 */
static void
test_write_timeout(void **state)
{
	struct evbuffer *rx;
	struct t t;
	int i;

	(void)state;
	t_open(&t, 0, 0);
	t.mode = T_HOLD;
	rx = evbuffer_new();
	h1s_write_timeout(t.h, 150);
	t_send(&t, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
	/* Nothing queued: no timeout. */
	t_sleep(&t, 300);
	assert_int_equal(t.closes, 0);
	t_stream_start(&t);
	/* The peer takes a little at a time, within the timeout each time. */
	for (i = 0; i < 4; i++) {
		t_sleep(&t, 80);
		assert_true(h1x_mem_recv(t.peer, rx, 100) > 0);
	}
	t_sleep(&t, 50);
	assert_int_equal(t.closes, 0);
	assert_int_equal(t.errors, 0);
	/* Then nothing: the exchange and the connection end. */
	t_sleep(&t, 300);
	assert_int_equal(t.errors, 1);
	assert_int_equal(t.closes, 1);
	evbuffer_free(rx);
	t_done(&t);

	/* 0 turns it off again. */
	t_open(&t, 0, 0);
	t.mode = T_HOLD;
	h1s_write_timeout(t.h, 100);
	h1s_write_timeout(t.h, 0);
	t_send(&t, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n");
	t_stream_start(&t);
	t_sleep(&t, 250);
	assert_int_equal(t.closes, 0);
	t_done(&t);
}

/* h1s_sent counts what the peer took; h1s_queued what still waits. */
static void
test_sent(void **state)
{
	struct evbuffer *rx;
	struct t t;
	size_t total, taken;

	(void)state;
	t_open(&t, 0, 0);
	t.mode = T_HOLD;
	rx = evbuffer_new();
	h1s_count_sent(t.h);
	t_send(&t, "GET /count HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_int_equal(h1s_sent(t.h), 0);
	t_stream_start(&t);
	total = h1s_queued(t.h);
	assert_true(total > 1000);
	taken = h1x_mem_recv(t.peer, rx, 300);
	assert_int_equal(taken, 300);
	assert_int_equal(h1s_sent(t.h), 300);
	assert_int_equal(h1s_queued(t.h), total - 300);
	taken += h1x_mem_recv(t.peer, rx, 1 << 20);
	assert_int_equal(h1s_sent(t.h), total);
	assert_int_equal(h1s_queued(t.h), 0);
	assert_int_equal(evbuffer_get_length(rx), taken);
	evbuffer_free(rx);
	t_done(&t);
}

/* The state print names the state and the flags. */
static void
test_print(void **state)
{
	struct t t;
	char buf[256];

	(void)state;
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	t_send(&t, "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
	h1s_print(t.h, buf, sizeof buf);
	assert_string_equal(buf,
	    "state=exchange flags=keepalive|head_req|body_done|xchg "
	    "requests=1 in=0 out=0");
	t_done(&t);
}

/*
 * What port URLs use: the upstream's reason phrase goes on; body bytes
 * spliced past the input count as read (h1s_body_skip) and past the
 * output as sent (h1s_body_sent), so the connection is kept; the head's
 * first byte is timed; HEAD_F_BODY_NOW on a transport without
 * xo_write_now changes nothing.
 */
static void
test_splice_accounting(void **state)
{
	struct t t;
	struct sink *sk;
	struct evbuffer *b;
	struct head rh;
	enum http1_err err;
	uint64_t before;

	(void)state;
	t_open(&t, 0, 1);
	t.mode = T_HOLD;
	before = clock_mono_usec();
	t_send(&t,
	    "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"
	    "\r\n0123");
	assert_int_equal(t.heads, 1);
	assert_true(h1s_started_us(t.h) >= before);
	assert_true(h1s_started_us(t.h) <= clock_mono_usec());
	assert_int_equal(h1s_body_left(t.h), 10);
	assert_int_equal(h1s_body_read(t.h, t.body, 100, &err), 4);
	assert_int_equal(h1s_body_left(t.h), 6);
	assert_false(h1s_body_done(t.h));
	/* Six bytes went to the upstream by splice(2). */
	h1s_body_skip(t.h, 6);
	assert_true(h1s_body_done(t.h));
	assert_int_equal(h1s_body_left(t.h), 0);
	/* The memory transport has no socket to splice into. */
	assert_int_equal(h1s_splice_fd(t.h), -1);
	sk = h1s_sink(t.h);
	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	rh.h_reason = "Fine";
	rh.h_flags = HEAD_F_LENGTH | HEAD_F_BODY_NOW;
	rh.h_length = 8;
	assert_int_equal(sink_head(sk, &rh), 0);
	b = evbuffer_new();
	evbuffer_add(b, "abc", 3);
	assert_int_equal(sink_body(sk, b, 3), 0);
	/* Five more went to the client by splice(2). */
	h1s_body_sent(t.h, 5);
	assert_int_equal(sink_end(sk), 0);
	t_spin(&t, 10);
	t_expect(&t, "HTTP/1.1 200 Fine\r\nContent-Length: 8\r\n\r\nabc");
	/* Kept: the next request is served on the same connection. */
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	t.mode = T_ECHO;
	t_send(&t, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n");
	t_expect_has(&t, "HTTP/1.1 200 OK\r\n");
	assert_int_equal(t.heads, 2);
	evbuffer_free(b);
	t_done(&t);
}

/*
 * H1S_C_RELAY_CONTINUE: the owner passes Expect on and relays the
 * upstream's 100 as an interim head; the engine sends none of its own.
 */
static void
test_relay_continue(void **state)
{
	struct t t;
	struct head rh;
	enum http1_err err;

	(void)state;
	t_open(&t, 0, 1);
	t.conf.hc_flags = H1S_C_RELAY_CONTINUE;
	t.mode = T_HOLD;
	t_send(&t,
	    "PUT /u HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
	    "Expect: 100-continue\r\n\r\n");
	assert_int_equal(h1s_body_read(t.h, t.body, 100, &err), 0);
	t_spin(&t, 5);
	assert_int_equal(evbuffer_get_length(t.got), 0);
	memset(&rh, 0, sizeof rh);
	rh.h_status = 100;
	assert_int_equal(sink_head(h1s_sink(t.h), &rh), 0);
	t_spin(&t, 5);
	t_expect(&t, "HTTP/1.1 100 Continue\r\n\r\n");
	t_send(&t, "hello");
	t.mode = T_ECHO;
	t_read_body(&t, t.h);
	t_spin(&t, 5);
	t_expect(&t,
	    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
	    "Content-Length: 5\r\n\r\nhello");
	assert_int_equal(h1s_state(t.h), H1S_S_IDLE);
	t_done(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_length_body),
		cmocka_unit_test(test_chunked_body),
		cmocka_unit_test(test_chunked_bad),
		cmocka_unit_test(test_no_body),
		cmocka_unit_test(test_http10),
		cmocka_unit_test(test_pipelining),
		cmocka_unit_test(test_keepalive_close),
		cmocka_unit_test(test_drain),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_timeouts),
		cmocka_unit_test(test_continue),
		cmocka_unit_test(test_read_stop),
		cmocka_unit_test(test_sink_flow),
		cmocka_unit_test(test_interim),
		cmocka_unit_test(test_eof),
		cmocka_unit_test(test_release),
		cmocka_unit_test(test_close_in_hook),
		cmocka_unit_test(test_read_high),
		cmocka_unit_test(test_write_timeout),
		cmocka_unit_test(test_sent),
		cmocka_unit_test(test_print),
		cmocka_unit_test(test_splice_accounting),
		cmocka_unit_test(test_relay_continue),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
