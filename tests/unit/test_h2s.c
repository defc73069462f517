/*
 * The HTTP/2 server engine (gateway/h2s.c, h2s_sink.c) over the in-memory
 * transport (h1xport.c), with an nghttp2 client session in the test as the
 * peer: its bytes pumped to h1x_mem_send, the engine's from h1x_mem_recv,
 * the event loop run without waiting.  An owner records the hooks.  The
 * defences are driven with raw frames and the engine's frames parsed by
 * hand: the GOAWAY code and the refusal's hr_code are checked.
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
#include <nghttp2/nghttp2.h>

#include "gw.h"

#define T_MAXST 512 /* streams the test keeps a record of */

/* What the owner does with a request head. */
enum t_mode {
	T_ECHO =
	    0, /* read the body; answer 200 with t->resp once it is whole */
	T_HOLD, /* keep the stream: the test answers */
};

/* What the client saw of one stream. */
struct t_cst {
	int status; /* the final status */
	int interim; /* an interim status seen before it */
	int head_end; /* END_STREAM on the response HEADERS */
	int trailers; /* a second HEADERS block (trailer fields) */
	int ended; /* END_STREAM seen */
	int rst; /* RST_STREAM received: code + 1 */
	int order_rst_after_end; /* the RST came after END_STREAM */
	char fields[512]; /* "name: value\n" ... */
	struct evbuffer *body;
};

/* One connection under test. */
struct t {
	struct event_base *base;
	struct h2s_conf conf;
	struct http1_limits limits;
	struct h2s *h;
	struct h1x_mem *peer;
	nghttp2_session *cl; /* the client, or NULL: raw frames */
	struct evbuffer *raw; /* raw mode: what the engine sent */
	size_t rawpos; /* ... parsed up to here */
	int no_read; /* the client reads nothing */
	int eof_sent; /* the client ended its stream */
	size_t read_max; /* the client reads this much a pump */
	enum t_mode mode;
	const char *resp; /* T_ECHO's body */
	int resp_trailers, resp_interim;
	struct t_cst cst[T_MAXST];
	/* Frames the client received. */
	int goaways, wupdates, settings_acks, pings;
	int goaway_code;
	int rst_count;
	/* The owner's record. */
	struct h2s_stream *st[T_MAXST]; /* by (id - 1) / 2 */
	struct evbuffer *body[T_MAXST]; /* request body read */
	int heads, bodies, drains, errors, logs, closes, frees;
	char method[16], protocol[32]; /* the last request head's */
	int head_flags;
	struct evbuffer *cl_out; /* a client's streamed body (t_cl_read_cb) */
	int cl_end; /* ... and its end */
	char log_code[64];
	char log_all[1024]; /* every hr_code, comma-separated */
	int log_status;
	char why[64];
};

static const struct h2s_hooks t_hooks;

static int
t_idx(int32_t id)
{
	assert_true(id >= 1 && id % 2 == 1 && (id - 1) / 2 < T_MAXST);
	return ((id - 1) / 2);
}

/* Client callbacks. */
static ssize_t
t_cl_send_cb(
    nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *arg)
{
	struct t *t = arg;

	(void)s;
	(void)flags;
	h1x_mem_send(t->peer, data, len);
	return ((ssize_t)len);
}

static int
t_cl_frame_cb(nghttp2_session *s, const nghttp2_frame *fr, void *arg)
{
	struct t *t = arg;
	struct t_cst *c;

	(void)s;
	switch (fr->hd.type) {
	case NGHTTP2_GOAWAY:
		t->goaways++;
		t->goaway_code = (int)fr->goaway.error_code;
		return (0);
	case NGHTTP2_WINDOW_UPDATE:
		t->wupdates++;
		return (0);
	case NGHTTP2_SETTINGS:
		if (fr->hd.flags & NGHTTP2_FLAG_ACK)
			t->settings_acks++;
		return (0);
	case NGHTTP2_PING:
		t->pings++;
		return (0);
	default:
		break;
	}
	if (fr->hd.stream_id == 0)
		return (0);
	c = &t->cst[t_idx(fr->hd.stream_id)];
	if (fr->hd.type == NGHTTP2_RST_STREAM) {
		t->rst_count++;
		c->rst = (int)fr->rst_stream.error_code + 1;
		c->order_rst_after_end = c->ended;
		return (0);
	}
	if (fr->hd.type == NGHTTP2_HEADERS &&
	    fr->headers.cat == NGHTTP2_HCAT_HEADERS && c->status != 0)
		c->trailers = 1;
	if (fr->hd.type == NGHTTP2_HEADERS &&
	    (fr->hd.flags & NGHTTP2_FLAG_END_STREAM) && !c->trailers &&
	    c->status >= 200)
		c->head_end = 1;
	if ((fr->hd.type == NGHTTP2_HEADERS || fr->hd.type == NGHTTP2_DATA) &&
	    (fr->hd.flags & NGHTTP2_FLAG_END_STREAM))
		c->ended = 1;
	return (0);
}

static int
t_cl_header_cb(nghttp2_session *s, const nghttp2_frame *fr, const uint8_t *name,
    size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
    void *arg)
{
	struct t *t = arg;
	struct t_cst *c;
	size_t l;

	(void)s;
	(void)flags;
	c = &t->cst[t_idx(fr->hd.stream_id)];
	if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
		int st = atoi((const char *)value);

		if (st < 200)
			c->interim = st;
		else
			c->status = st;
		return (0);
	}
	l = strlen(c->fields);
	snprintf(c->fields + l, sizeof c->fields - l, "%.*s: %.*s\n",
	    (int)namelen, name, (int)valuelen, value);
	return (0);
}

static int
t_cl_data_cb(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
    size_t len, void *arg)
{
	struct t *t = arg;
	struct t_cst *c = &t->cst[t_idx(id)];

	(void)s;
	(void)flags;
	if (c->body == NULL)
		c->body = evbuffer_new();
	evbuffer_add(c->body, data, len);
	return (0);
}

/* Parse the raw frames the engine sent (raw mode). */
static void
t_raw_parse(struct t *t)
{
	uint8_t hd[9], p[8];
	size_t len, n;
	uint32_t id;

	for (;;) {
		n = evbuffer_get_length(t->raw) - t->rawpos;
		if (n < 9)
			return;
		{
			struct evbuffer_ptr ptr;

			evbuffer_ptr_set(
			    t->raw, &ptr, t->rawpos, EVBUFFER_PTR_SET);
			evbuffer_copyout_from(t->raw, &ptr, hd, 9);
			len = ((size_t)hd[0] << 16) | ((size_t)hd[1] << 8) |
			    hd[2];
			if (n < 9 + len)
				return;
			memset(p, 0, sizeof p);
			evbuffer_ptr_set(
			    t->raw, &ptr, t->rawpos + 9, EVBUFFER_PTR_SET);
			evbuffer_copyout_from(
			    t->raw, &ptr, p, len < 8 ? len : 8);
		}
		id = ((uint32_t)(hd[5] & 0x7f) << 24) |
		    ((uint32_t)hd[6] << 16) | ((uint32_t)hd[7] << 8) | hd[8];
		switch (hd[3]) {
		case NGHTTP2_GOAWAY:
			t->goaways++;
			t->goaway_code = (int)(((uint32_t)p[4] << 24) |
			    ((uint32_t)p[5] << 16) | ((uint32_t)p[6] << 8) |
			    p[7]);
			break;
		case NGHTTP2_RST_STREAM:
			t->rst_count++;
			if (id % 2 == 1 && (id - 1) / 2 < T_MAXST)
				t->cst[(id - 1) / 2].rst =
				    (int)(((uint32_t)p[0] << 24) |
					((uint32_t)p[1] << 16) |
					((uint32_t)p[2] << 8) | p[3]) +
				    1;
			break;
		case NGHTTP2_PING:
			t->pings++;
			break;
		case NGHTTP2_SETTINGS:
			if (hd[4] & NGHTTP2_FLAG_ACK)
				t->settings_acks++;
			break;
		case NGHTTP2_HEADERS:
			if (id % 2 == 1 && (id - 1) / 2 < T_MAXST)
				t->cst[(id - 1) / 2].status = -1;
			break;
		default:
			break;
		}
		t->rawpos += 9 + len;
	}
}

/* Run the loop n passes, moving bytes both ways between each. */
static void
t_pump(struct t *t, int n)
{
	struct evbuffer *rx = evbuffer_new();
	unsigned char *p;
	size_t len;

	while (n-- > 0) {
		if (t->cl != NULL)
			assert_int_equal(nghttp2_session_send(t->cl), 0);
		event_base_loop(t->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		/*
		 * As a client does, end our stream once the engine ended its
		 * own (after its GOAWAY): the engine's linger then ends.
		 */
		if (!t->eof_sent && !(h1x_mem_state(t->peer) & H1X_MEM_FREED) &&
		    (h1x_mem_state(t->peer) & H1X_MEM_SHUT)) {
			t->eof_sent = 1;
			h1x_mem_send_eof(t->peer);
		}
		if (t->no_read)
			continue;
		if (t->cl == NULL) {
			h1x_mem_recv(t->peer, t->raw, 1 << 24);
			t_raw_parse(t);
			continue;
		}
		h1x_mem_recv(t->peer, rx, t->read_max);
		len = evbuffer_get_length(rx);
		if (len == 0)
			continue;
		p = evbuffer_pullup(rx, -1);
		assert_int_equal(
		    nghttp2_session_mem_recv(t->cl, p, len), (ssize_t)len);
		evbuffer_drain(rx, len);
	}
	evbuffer_free(rx);
}

/* Run the loop for ms milliseconds (timers fire), then pump. */
static void
t_sleep(struct t *t, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	event_base_loopexit(t->base, &tv);
	event_base_dispatch(t->base);
	t_pump(t, 5);
}

/* Defaults for a connection; the test may change t->conf, then t_start. */
static void
t_init(struct t *t)
{
	memset(t, 0, sizeof *t);
	t->base = event_base_new();
	t->limits.max_head = 8192;
	t->limits.max_line = 4096;
	t->limits.max_headers = 64;
	t->conf.hc_name = "test";
	t->conf.hc_limits = &t->limits;
	t->conf.hc_head_ms = 5000;
	t->conf.hc_idle_ms = 5000;
	t->read_max = 1 << 24;
	t->resp = "hello, world\n";
}

/* The engine, and the client (raw: none, the test writes frames). */
static void
t_start(struct t *t, int raw)
{
	nghttp2_session_callbacks *cb;
	nghttp2_option *opt;
	struct h1x *x;

	x = h1x_mem_new(t->base, 64 * 1024, 0, &t->peer);
	t->h = h2s_new(t->base, x, &t->conf, &t_hooks, t, 1, "peer");
	if (raw) {
		static const char pre[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
					  "\0\0\0\4\0\0\0\0\0";

		t->raw = evbuffer_new();
		h1x_mem_send(t->peer, pre, sizeof pre - 1);
		t_pump(t, 5);
		return;
	}
	nghttp2_session_callbacks_new(&cb);
	nghttp2_session_callbacks_set_send_callback(cb, t_cl_send_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(cb, t_cl_frame_cb);
	nghttp2_session_callbacks_set_on_header_callback(cb, t_cl_header_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
	    cb, t_cl_data_cb);
	nghttp2_option_new(&opt);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	nghttp2_session_client_new2(&t->cl, cb, t, opt);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);
	nghttp2_submit_settings(t->cl, NGHTTP2_FLAG_NONE, NULL, 0);
	t_pump(t, 5);
}

/* The client consumes what it received of stream id (window back). */
static void
t_consume(struct t *t, int32_t id)
{
	nghttp2_session_consume(t->cl, id,
	    (size_t)nghttp2_session_get_stream_effective_recv_data_length(
		t->cl, id));
}

/* Close what is left, run the frees, check they ran once each. */
static void
t_done(struct t *t)
{
	int i;

	if (t->frees == 0)
		h2s_close(t->h, "test over");
	h1x_mem_send_eof(t->peer);
	t_pump(t, 10);
	assert_int_equal(t->closes, 1);
	assert_int_equal(t->frees, 1);
	assert_true(h1x_mem_state(t->peer) & H1X_MEM_FREED);
	h1x_mem_free(t->peer);
	if (t->cl != NULL)
		nghttp2_session_del(t->cl);
	if (t->raw != NULL)
		evbuffer_free(t->raw);
	if (t->cl_out != NULL)
		evbuffer_free(t->cl_out);
	for (i = 0; i < T_MAXST; i++) {
		if (t->cst[i].body != NULL)
			evbuffer_free(t->cst[i].body);
		if (t->body[i] != NULL)
			evbuffer_free(t->body[i]);
	}
	event_base_free(t->base);
}

/* The client submits a request; the stream id. */
static int32_t
t_req(struct t *t, const char *method, const char *path,
    const nghttp2_nv *extra, size_t nextra, nghttp2_data_provider *dp)
{
	nghttp2_nv nv[16];
	size_t n = 0, i;
	int32_t id;

#define T_NV(a, b) \
	nv[n++] = (nghttp2_nv){ (uint8_t *)(a), (uint8_t *)(b), strlen(a), \
		strlen(b), NGHTTP2_NV_FLAG_NONE }
	T_NV(":method", method);
	T_NV(":path", path);
	T_NV(":scheme", "https");
	T_NV(":authority", "example.test");
#undef T_NV
	for (i = 0; i < nextra && n < 16; i++)
		nv[n++] = extra[i];
	id = nghttp2_submit_request(t->cl, NULL, nv, n, dp, NULL);
	assert_true(id > 0);
	return (id);
}

/* The response to a stream: status, fields, t->resp, maybe trailers. */
static void
t_answer(struct t *t, struct h2s_stream *st, const char *text)
{
	struct sink *sk = h2s_stream_sink(st);
	struct hfield f[4], tr;
	struct evbuffer *b;
	struct head rh;

	if (t->resp_interim) {
		memset(&rh, 0, sizeof rh);
		rh.h_status = 103;
		hfield_set(&f[0], "Link", "</a.css>; rel=preload");
		rh.h_fields = f;
		rh.h_nfields = 1;
		assert_int_equal(sink_head(sk, &rh), 0);
	}
	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	hfield_set(&f[0], "Content-Type", "text/plain");
	hfield_set(&f[1], "Connection", "close");
	hfield_set(&f[2], "Keep-Alive", "timeout=5");
	hfield_set(&f[3], "X-Mixed-Case", "Value");
	rh.h_fields = f;
	rh.h_nfields = 4;
	rh.h_flags = HEAD_F_LENGTH;
	rh.h_length = strlen(text);
	assert_int_equal(sink_head(sk, &rh), 0);
	b = evbuffer_new();
	evbuffer_add(b, text, strlen(text));
	assert_int_equal(sink_body(sk, b, strlen(text)), 0);
	evbuffer_free(b);
	if (t->resp_trailers) {
		hfield_set(&tr, "X-Checksum", "abc");
		assert_int_equal(sink_trailers(sk, &tr, 1), 0);
	}
	assert_int_equal(sink_end(sk), 0);
}

/* The owner's hooks. */
static void
t_read(struct t *t, struct h2s_stream *st)
{
	int i = t_idx((int32_t)h2s_stream_id(st));

	if (t->body[i] == NULL)
		t->body[i] = evbuffer_new();
	while (h2s_stream_body_read(st, t->body[i], 65536) > 0)
		;
	if (h2s_stream_body_done(st) && t->st[i] != NULL) {
		t_answer(t, st, t->resp);
		h2s_stream_release(st);
		t->st[i] = NULL;
	}
}

static void
t_head_cb(
    struct h2s *h, void *arg, struct h2s_stream *st, const struct head *req)
{
	struct t *t = arg;

	(void)h;
	t->heads++;
	snprintf(t->method, sizeof t->method, "%.*s", (int)req->h_method_len,
	    req->h_method);
	snprintf(t->protocol, sizeof t->protocol, "%s",
	    req->h_protocol != NULL ? req->h_protocol : "");
	t->head_flags = req->h_flags;
	h2s_stream_set_arg(st, t);
	t->st[t_idx((int32_t)h2s_stream_id(st))] = st;
	if (t->mode == T_ECHO)
		t_read(t, st);
}

static void
t_body_cb(struct h2s_stream *st, void *sarg)
{
	struct t *t = sarg;

	t->bodies++;
	if (t->mode == T_ECHO)
		t_read(t, st);
}

static void
t_drain_cb(struct h2s_stream *st, void *sarg)
{
	(void)st;
	((struct t *)sarg)->drains++;
}

static void
t_error_cb(struct h2s_stream *st, void *sarg, const char *why)
{
	struct t *t = sarg;

	t->errors++;
	t->st[t_idx((int32_t)h2s_stream_id(st))] = NULL;
	snprintf(t->why, sizeof t->why, "%s", why);
}

static void
t_log_cb(struct h2s *h, void *arg, const struct h2s_refusal *r)
{
	struct t *t = arg;

	(void)h;
	t->logs++;
	t->log_status = r->hr_status;
	snprintf(t->log_code, sizeof t->log_code, "%s", r->hr_code);
	if (strlen(t->log_all) + strlen(r->hr_code) + 2 < sizeof t->log_all) {
		strcat(t->log_all, r->hr_code);
		strcat(t->log_all, ",");
	}
}

static void
t_close_cb(struct h2s *h, void *arg, const char *reason)
{
	(void)h;
	(void)reason;
	((struct t *)arg)->closes++;
}

static void
t_free_cb(void *arg)
{
	((struct t *)arg)->frees++;
}

static const struct h2s_hooks t_hooks = {
	.on_head = t_head_cb,
	.on_body = t_body_cb,
	.on_drain = t_drain_cb,
	.on_error = t_error_cb,
	.on_log = t_log_cb,
	.on_close = t_close_cb,
	.on_free = t_free_cb,
};

/* A raw frame from the peer. */
static void
t_frame(
    struct t *t, int type, int flags, uint32_t id, const void *p, size_t len)
{
	uint8_t hd[9];

	hd[0] = (uint8_t)(len >> 16);
	hd[1] = (uint8_t)(len >> 8);
	hd[2] = (uint8_t)len;
	hd[3] = (uint8_t)type;
	hd[4] = (uint8_t)flags;
	hd[5] = (uint8_t)(id >> 24);
	hd[6] = (uint8_t)(id >> 16);
	hd[7] = (uint8_t)(id >> 8);
	hd[8] = (uint8_t)id;
	h1x_mem_send(t->peer, hd, 9);
	if (len != 0)
		h1x_mem_send(t->peer, p, len);
}

/* A GET's header block, HPACK: the static table's indexed fields. */
static const uint8_t t_get_block[] = { 0x82, 0x84, 0x87, 0x41, 0x01, 'a' };

/* The body the client received on stream id, as a string. */
static void
t_body_is(struct t *t, int32_t id, const char *want)
{
	struct evbuffer *b = t->cst[t_idx(id)].body;
	size_t n = b != NULL ? evbuffer_get_length(b) : 0;
	char *s = malloc(n + 1);

	if (n != 0)
		evbuffer_copyout(b, s, n);
	s[n] = '\0';
	assert_string_equal(s, want);
	free(s);
}

/* A GET answered through the sink. */
static void
test_get(void **state)
{
	static struct t t;
	int32_t id;
	struct t_cst *c;

	(void)state;
	t_init(&t);
	t_start(&t, 0);
	id = t_req(&t, "GET", "/x", NULL, 0, NULL);
	t_pump(&t, 10);
	c = &t.cst[t_idx(id)];
	assert_int_equal(t.heads, 1);
	assert_int_equal(c->status, 200);
	assert_true(c->ended);
	assert_int_equal(c->rst, 0);
	assert_non_null(strstr(c->fields, "content-type: text/plain\n"));
	assert_non_null(strstr(c->fields, "x-mixed-case: Value\n"));
	assert_non_null(strstr(c->fields, "content-length: 13\n"));
	assert_null(strstr(c->fields, "connection"));
	assert_null(strstr(c->fields, "keep-alive"));
	t_body_is(&t, id, "hello, world\n");
	assert_int_equal(h2s_nstreams(t.h), 0);
	t_done(&t);
}

/*
 * A POST body read in pieces; the window goes back only as it is read
 * (nghttp2 sends WINDOW_UPDATE once half the window was consumed, so each
 * piece is more than that).
 */
static ssize_t
t_post_read_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
    uint32_t *flags, nghttp2_data_source *src, void *arg)
{
	size_t *left = src->ptr;

	(void)s;
	(void)id;
	(void)arg;
	if (len > *left)
		len = *left;
	memset(buf, 'p', len);
	*left -= len;
	if (*left == 0)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return ((ssize_t)len);
}

static void
test_post_window(void **state)
{
	static struct t t;
	struct h2s_stream *st;
	nghttp2_data_provider dp;
	size_t left = 100000, got = 0;
	int32_t id;
	int w;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t.conf.hc_stream_window = 65535;
	t_start(&t, 0);
	dp.source.ptr = &left;
	dp.read_callback = t_post_read_cb;
	id = t_req(&t, "POST", "/up", NULL, 0, &dp);
	t_pump(&t, 10);
	st = t.st[t_idx(id)];
	assert_non_null(st);
	/* The window is full: 65535 bytes sent, none given back. */
	assert_int_equal(left, 100000 - 65535);
	w = t.wupdates;
	t.body[0] = evbuffer_new();
	t_pump(&t, 5);
	assert_int_equal(t.wupdates, w);
	while (left != 0 || !h2s_stream_body_done(st)) {
		ssize_t n = h2s_stream_body_read(st, t.body[0], 40000);

		assert_true(n >= 0);
		got += (size_t)n;
		w = t.wupdates;
		t_pump(&t, 5);
		if (n > 0 && left != 0)
			assert_true(t.wupdates > w);
		if (n == 0 && left == 0 && h2s_stream_body_done(st))
			break;
		assert_true(got <= 100000);
	}
	assert_int_equal(evbuffer_get_length(t.body[0]), 100000);
	t_answer(&t, st, "ok");
	h2s_stream_release(st);
	t_pump(&t, 10);
	assert_int_equal(t.cst[0].status, 200);
	t_body_is(&t, id, "ok");
	t_done(&t);
}

/* A response larger than the client's window arrives as it consumes. */
static void
test_big_response(void **state)
{
	static struct t t;
	struct h2s_stream *st;
	struct sink *sk;
	struct evbuffer *b;
	struct head rh;
	size_t total = 300000, sent = 0, room, had, consumed = 0;
	int32_t id;
	int i;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 0);
	id = t_req(&t, "GET", "/big", NULL, 0, NULL);
	t_pump(&t, 10);
	st = t.st[0];
	assert_non_null(st);
	sk = h2s_stream_sink(st);
	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	rh.h_flags = HEAD_F_LENGTH;
	rh.h_length = total;
	assert_int_equal(sink_head(sk, &rh), 0);
	b = evbuffer_new();
	for (i = 0; i < 1000 && !t.cst[0].ended; i++) {
		room = sink_room(sk);
		if (room > total - sent)
			room = total - sent;
		if (room > 0) {
			char chunk[4096];

			if (room > sizeof chunk)
				room = sizeof chunk;
			memset(chunk, 'a' + (int)(sent % 26), room);
			evbuffer_add(b, chunk, room);
			assert_int_equal(sink_body(sk, b, room), 0);
			sent += room;
			if (sent == total) {
				assert_int_equal(sink_end(sk), 0);
				h2s_stream_release(st);
			}
		}
		t_pump(&t, 2);
		had = t.cst[0].body != NULL ? evbuffer_get_length(t.cst[0].body)
					    : 0;
		/* Never more than the client's window past what it consumed. */
		assert_true(had - consumed <= 65535);
		t_consume(&t, id);
		consumed = had;
	}
	evbuffer_free(b);
	assert_true(t.cst[0].ended);
	assert_int_equal(evbuffer_get_length(t.cst[0].body), total);
	t_done(&t);
}

/* sink_room is 0 at hc_out_high, and on_drain comes once it drained. */
static void
test_room_drain(void **state)
{
	static struct t t;
	struct h2s_stream *st;
	struct sink *sk;
	struct evbuffer *b;
	struct head rh;
	char chunk[8192];
	int32_t id;
	int drains;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t.conf.hc_out_high = 8192;
	t_start(&t, 0);
	id = t_req(&t, "GET", "/r", NULL, 0, NULL);
	t_pump(&t, 10);
	st = t.st[0];
	sk = h2s_stream_sink(st);
	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	assert_int_equal(sink_head(sk, &rh), 0);
	/* The client's window (64 KiB) fills, then the sink. */
	b = evbuffer_new();
	memset(chunk, 'z', sizeof chunk);
	while (sink_room(sk) > 0) {
		size_t n = sink_room(sk);

		if (n > sizeof chunk)
			n = sizeof chunk;
		evbuffer_add(b, chunk, n);
		assert_int_equal(sink_body(sk, b, n), 0);
		t_pump(&t, 2);
	}
	assert_int_equal(sink_room(sk), 0);
	drains = t.drains;
	t_pump(&t, 10);
	assert_int_equal(sink_room(sk), 0);
	assert_int_equal(t.drains, drains);
	t_consume(&t, id);
	t_pump(&t, 10);
	assert_true(t.drains > drains);
	assert_true(sink_room(sk) > 0);
	assert_int_equal(sink_end(sk), 0);
	h2s_stream_release(st);
	t_consume(&t, id);
	t_pump(&t, 10);
	assert_true(t.cst[0].ended);
	evbuffer_free(b);
	t_done(&t);
}

/* Trailers after DATA, and an interim 103 before the 200. */
static void
test_trailers_interim(void **state)
{
	static struct t t;
	int32_t id;
	struct t_cst *c;

	(void)state;
	t_init(&t);
	t.resp_trailers = 1;
	t.resp_interim = 1;
	t_start(&t, 0);
	id = t_req(&t, "GET", "/t", NULL, 0, NULL);
	t_pump(&t, 10);
	c = &t.cst[t_idx(id)];
	assert_int_equal(c->interim, 103);
	assert_int_equal(c->status, 200);
	assert_true(c->trailers);
	assert_true(c->ended);
	assert_non_null(strstr(c->fields, "link: </a.css>; rel=preload\n"));
	assert_non_null(strstr(c->fields, "x-checksum: abc\n"));
	t_body_is(&t, id, "hello, world\n");
	t_done(&t);
}

/* HEAD: END_STREAM on the response HEADERS, no DATA. */
static void
test_head(void **state)
{
	static struct t t;
	int32_t id;
	struct t_cst *c;

	(void)state;
	t_init(&t);
	t_start(&t, 0);
	id = t_req(&t, "HEAD", "/h", NULL, 0, NULL);
	t_pump(&t, 10);
	c = &t.cst[t_idx(id)];
	assert_int_equal(c->status, 200);
	assert_true(c->head_end);
	assert_null(c->body);
	t_done(&t);
}

/* 50 streams at once. */
static void
test_concurrent(void **state)
{
	static struct t t;
	int32_t id[50];
	int i;

	(void)state;
	t_init(&t);
	t_start(&t, 0);
	for (i = 0; i < 50; i++)
		id[i] = t_req(&t, "GET", "/c", NULL, 0, NULL);
	t_pump(&t, 20);
	assert_int_equal(t.heads, 50);
	for (i = 0; i < 50; i++) {
		assert_int_equal(t.cst[t_idx(id[i])].status, 200);
		t_body_is(&t, id[i], "hello, world\n");
	}
	assert_int_equal(h2s_nstreams(t.h), 0);
	t_done(&t);
}

/* A stream reset by the client: on_error. */
static void
test_client_reset(void **state)
{
	static struct t t;
	int32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 0);
	id = t_req(&t, "GET", "/rst", NULL, 0, NULL);
	t_pump(&t, 10);
	assert_non_null(t.st[0]);
	nghttp2_submit_rst_stream(t.cl, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
	t_pump(&t, 10);
	assert_int_equal(t.errors, 1);
	assert_null(t.st[0]);
	assert_string_equal(t.why, "stream reset by the client");
	assert_int_equal(h2s_nstreams(t.h), 0);
	t_done(&t);
}

/* Released before the end: RST_STREAM(CANCEL). */
static void
test_release_cancel(void **state)
{
	static struct t t;
	struct head rh;
	int32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 0);
	id = t_req(&t, "GET", "/c", NULL, 0, NULL);
	t_pump(&t, 10);
	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	assert_int_equal(sink_head(h2s_stream_sink(t.st[0]), &rh), 0);
	h2s_stream_release(t.st[0]);
	t_pump(&t, 10);
	assert_int_equal(t.cst[t_idx(id)].rst, NGHTTP2_CANCEL + 1);
	assert_int_equal(t.errors, 0);
	assert_int_equal(h2s_nstreams(t.h), 0);
	t_done(&t);
}

/* The response ends while the request body still comes:
 * RST_STREAM(NO_ERROR) after END_STREAM. */
static void
test_early_response(void **state)
{
	static struct t t;
	nghttp2_data_provider dp;
	size_t left = 200000;
	int32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t.conf.hc_stream_window = 65535;
	t_start(&t, 0);
	dp.source.ptr = &left;
	dp.read_callback = t_post_read_cb;
	id = t_req(&t, "POST", "/e", NULL, 0, &dp);
	t_pump(&t, 10);
	assert_non_null(t.st[0]);
	t_answer(&t, t.st[0], "early");
	h2s_stream_release(t.st[0]);
	t_pump(&t, 10);
	assert_int_equal(t.cst[t_idx(id)].status, 200);
	assert_true(t.cst[t_idx(id)].ended);
	assert_int_equal(t.cst[t_idx(id)].rst, NGHTTP2_NO_ERROR + 1);
	assert_true(t.cst[t_idx(id)].order_rst_after_end);
	t_body_is(&t, id, "early");
	t_done(&t);
}

/* A request body that stops after "first" bytes until told to go on. */
struct t_held_body {
	size_t left;
	size_t first;
	int hold;
};

static ssize_t
t_held_read_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
    uint32_t *flags, nghttp2_data_source *src, void *arg)
{
	struct t_held_body *b = src->ptr;

	(void)s;
	(void)id;
	(void)arg;
	if (b->hold && b->first == 0)
		return (NGHTTP2_ERR_DEFERRED);
	if (b->hold && len > b->first)
		len = b->first;
	if (len > b->left)
		len = b->left;
	memset(buf, 'q', len);
	b->left -= len;
	if (b->hold)
		b->first -= len;
	if (b->left == 0)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return ((ssize_t)len);
}

/*
 * The response ends while a small body of known length still comes: its
 * rest is read and dropped, and the stream ends without a reset (some
 * clients take RST_STREAM(NO_ERROR) for an error); a large rest is reset.
 */
static void
test_early_response_small(void **state)
{
	static struct t t;
	nghttp2_data_provider dp;
	struct t_held_body b = { 10000, 4000, 1 };
	struct t_held_body big = { 300000, 4000, 1 };
	nghttp2_nv cl[1] = { { (uint8_t *)"content-length", (uint8_t *)"10000",
	    14, 5, NGHTTP2_NV_FLAG_NONE } };
	nghttp2_nv bigcl[1] = { { (uint8_t *)"content-length",
	    (uint8_t *)"300000", 14, 6, NGHTTP2_NV_FLAG_NONE } };
	int32_t id, id2;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 0);
	dp.source.ptr = &b;
	dp.read_callback = t_held_read_cb;
	id = t_req(&t, "POST", "/s", cl, 1, &dp);
	t_pump(&t, 10);
	assert_non_null(t.st[0]);
	t_answer(&t, t.st[0], "early");
	h2s_stream_release(t.st[0]);
	t_pump(&t, 10);
	assert_int_equal(t.cst[t_idx(id)].status, 200);
	assert_true(t.cst[t_idx(id)].ended);
	assert_int_equal(t.cst[t_idx(id)].rst, 0);
	/* The rest of the body comes: the stream closes, still no reset. */
	b.hold = 0;
	nghttp2_session_resume_data(t.cl, id);
	t_pump(&t, 10);
	assert_int_equal(b.left, 0);
	assert_int_equal(t.cst[t_idx(id)].rst, 0);
	assert_int_equal(h2s_nstreams(t.h), 0);
	t_body_is(&t, id, "early");
	/* Too much left to wait for: RST_STREAM(NO_ERROR), as before. */
	dp.source.ptr = &big;
	id2 = t_req(&t, "POST", "/b", bigcl, 1, &dp);
	t_pump(&t, 10);
	assert_non_null(t.st[1]);
	t_answer(&t, t.st[1], "early");
	h2s_stream_release(t.st[1]);
	t_pump(&t, 10);
	assert_true(t.cst[t_idx(id2)].ended);
	assert_int_equal(t.cst[t_idx(id2)].rst, NGHTTP2_NO_ERROR + 1);
	t_done(&t);
}

/* h2s_shutdown: GOAWAY(NO_ERROR), the close after the last stream. */
static void
test_shutdown(void **state)
{
	static struct t t;
	int32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 0);
	id = t_req(&t, "GET", "/s", NULL, 0, NULL);
	t_pump(&t, 10);
	h2s_shutdown(t.h);
	t_pump(&t, 10);
	assert_int_equal(t.goaways, 1);
	assert_int_equal(t.goaway_code, NGHTTP2_NO_ERROR);
	assert_int_equal(t.closes, 0);
	t_answer(&t, t.st[0], "last");
	h2s_stream_release(t.st[0]);
	t_pump(&t, 10);
	t_body_is(&t, id, "last");
	assert_int_equal(t.closes, 1);
	t_done(&t);
}

/* The owner heard a refusal of code. */
static void
t_logged(struct t *t, const char *code)
{
	if (strstr(t->log_all, code) == NULL)
		fail_msg(
		    "expected %s in the log codes \"%s\"", code, t->log_all);
}

/* The connection went with a GOAWAY of code, and closed. */
static void
t_gone(struct t *t, int code)
{
	assert_true(t->goaways >= 1);
	assert_int_equal(t->goaway_code, code);
	assert_int_equal(t->closes, 1);
}

static void
test_rapid_reset(void **state)
{
	static struct t t;
	static const uint8_t cancel[4] = { 0, 0, 0, NGHTTP2_CANCEL };
	uint32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 1);
	for (id = 1; id < 2 * 400 && t.closes == 0; id += 2) {
		t_frame(&t, NGHTTP2_HEADERS,
		    NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, id,
		    t_get_block, sizeof t_get_block);
		t_frame(&t, NGHTTP2_RST_STREAM, 0, id, cancel, 4);
		if (id % 32 == 1)
			t_pump(&t, 2);
	}
	t_pump(&t, 10);
	t_logged(&t, "h2_rapid_reset");
	t_gone(&t, NGHTTP2_ENHANCE_YOUR_CALM);
	t_done(&t);
}

static void
test_continuation_flood(void **state)
{
	static struct t t;
	int i;

	(void)state;
	t_init(&t);
	t_start(&t, 1);
	t_frame(
	    &t, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, 1, t_get_block, 3);
	for (i = 0; i < 20; i++)
		t_frame(&t, NGHTTP2_CONTINUATION, 0, 1, NULL, 0);
	t_pump(&t, 10);
	t_logged(&t, "h2_continuation_flood");
	t_gone(&t, NGHTTP2_ENHANCE_YOUR_CALM);
	t_done(&t);
}

static void
test_settings_flood(void **state)
{
	static struct t t;
	static uint8_t fl[3000 * 9];
	int i;

	(void)state;
	t_init(&t);
	t_start(&t, 1);
	/* Empty SETTINGS frames in a burst: more acks queued than allowed. */
	memset(fl, 0, sizeof fl);
	for (i = 0; i < 3000; i++)
		fl[9 * i + 3] = NGHTTP2_SETTINGS;
	h1x_mem_send(t.peer, fl, sizeof fl);
	t_pump(&t, 10);
	t_logged(&t, "h2_flood");
	t_gone(&t, NGHTTP2_ENHANCE_YOUR_CALM);
	t_done(&t);
}

/* One SETTINGS frame with more entries than H2S_MAX_SETTINGS. */
static void
test_settings_entries(void **state)
{
	static struct t t;
	uint8_t p[6 * 40];
	int i;

	(void)state;
	t_init(&t);
	t_start(&t, 1);
	for (i = 0; i < 40; i++) {
		p[6 * i] = 0;
		p[6 * i + 1] = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
		p[6 * i + 2] = 0;
		p[6 * i + 3] = 0;
		p[6 * i + 4] = 0;
		p[6 * i + 5] = (uint8_t)i;
	}
	t_frame(&t, NGHTTP2_SETTINGS, 0, 0, p, sizeof p);
	t_pump(&t, 10);
	/* nghttp2 reports no error code for it: the GOAWAY's code names it. */
	t_logged(&t, "h2_flood");
	t_gone(&t, NGHTTP2_ENHANCE_YOUR_CALM);
	t_done(&t);
}

static void
test_ping_flood(void **state)
{
	static struct t t;
	uint8_t p[8] = { 0 };
	int i;

	(void)state;
	t_init(&t);
	t_start(&t, 1);
	for (i = 0; i < 600 && t.closes == 0; i++) {
		t_frame(&t, NGHTTP2_PING, 0, 0, p, 8);
		if (i % 50 == 0)
			t_pump(&t, 2);
	}
	t_pump(&t, 10);
	t_logged(&t, "h2_flood");
	t_gone(&t, NGHTTP2_ENHANCE_YOUR_CALM);
	assert_true(t.pings >= 400);
	t_done(&t);
}

static void
test_empty_data(void **state)
{
	static struct t t;
	int i;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 1);
	t_frame(&t, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, t_get_block,
	    sizeof t_get_block);
	for (i = 0; i < 150; i++)
		t_frame(&t, NGHTTP2_DATA, 0, 1, NULL, 0);
	t_pump(&t, 10);
	t_logged(&t, "h2_flood");
	t_gone(&t, NGHTTP2_ENHANCE_YOUR_CALM);
	assert_int_equal(t.errors, 1);
	t_done(&t);
}

/* A header list over hc_limits->max_head: 431 through the sink. */
static void
test_header_too_large(void **state)
{
	static struct t t;
	static char big[6000];
	nghttp2_nv nv;
	int32_t id;

	(void)state;
	t_init(&t);
	t.limits.max_head = 4096;
	t_start(&t, 0);
	memset(big, 'b', sizeof big - 1);
	nv = (nghttp2_nv){ (uint8_t *)"x-big", (uint8_t *)big, 5,
		sizeof big - 1, NGHTTP2_NV_FLAG_NONE };
	id = t_req(&t, "GET", "/big", &nv, 1, NULL);
	t_pump(&t, 10);
	assert_int_equal(t.heads, 0);
	assert_int_equal(t.cst[t_idx(id)].status, 431);
	assert_int_equal(t.log_status, 431);
	t_logged(&t, "header_too_large");
	/* The connection goes on. */
	id = t_req(&t, "GET", "/ok", NULL, 0, NULL);
	t_pump(&t, 10);
	assert_int_equal(t.cst[t_idx(id)].status, 200);
	t_done(&t);
}

/* More streams than hc_max_streams: REFUSED_STREAM. */
static void
test_max_streams(void **state)
{
	static struct t t;
	uint32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t.conf.hc_max_streams = 4;
	t_start(&t, 1);
	for (id = 1; id <= 11; id += 2)
		t_frame(&t, NGHTTP2_HEADERS,
		    NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, id,
		    t_get_block, sizeof t_get_block);
	t_pump(&t, 10);
	assert_int_equal(t.heads, 4);
	assert_int_equal(t.cst[4].rst, NGHTTP2_REFUSED_STREAM + 1);
	assert_int_equal(t.cst[5].rst, NGHTTP2_REFUSED_STREAM + 1);
	assert_int_equal(t.cst[0].rst, 0);
	assert_int_equal(t.closes, 0);
	t_done(&t);
}

/* hc_max_streams_total: GOAWAY(NO_ERROR), the close once they finish. */
static void
test_max_total(void **state)
{
	static struct t t;
	int32_t id[3];
	int i;

	(void)state;
	t_init(&t);
	t.conf.hc_max_streams_total = 3;
	t_start(&t, 0);
	for (i = 0; i < 3; i++)
		id[i] = t_req(&t, "GET", "/t", NULL, 0, NULL);
	t_pump(&t, 20);
	for (i = 0; i < 3; i++)
		assert_int_equal(t.cst[t_idx(id[i])].status, 200);
	t_logged(&t, "h2_stream_limit");
	t_gone(&t, NGHTTP2_NO_ERROR);
	t_done(&t);
}

/* The idle timer. */
static void
test_idle(void **state)
{
	static struct t t;

	(void)state;
	t_init(&t);
	t.conf.hc_idle_ms = 100;
	t_start(&t, 1);
	assert_int_equal(t.closes, 0);
	t_sleep(&t, 250);
	t_logged(&t, "h2_idle");
	t_gone(&t, NGHTTP2_NO_ERROR);
	t_done(&t);
}

/* The head deadline: a header block that never ends. */
static void
test_head_timeout(void **state)
{
	static struct t t;

	(void)state;
	t_init(&t);
	t.conf.hc_head_ms = 100;
	t_start(&t, 1);
	t_frame(&t, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_STREAM, 1, t_get_block,
	    sizeof t_get_block);
	t_pump(&t, 5);
	assert_int_equal(t.closes, 0);
	t_sleep(&t, 250);
	t_logged(&t, "h2_head_timeout");
	t_gone(&t, NGHTTP2_ENHANCE_YOUR_CALM);
	t_done(&t);
}

/* A peer that floods PINGs and reads nothing: the output stays bounded
 * and the input is no longer read. */
static void
test_ping_noread(void **state)
{
	static struct t t;
	static char resp[40000];
	static const uint8_t win[4] = { 0, 0x10, 0, 0 };
	uint8_t set[6] = { 0, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0, 0x10, 0,
		0 };
	uint8_t p[8] = { 0 };
	size_t before;
	uint32_t id;
	int i;

	(void)state;
	t_init(&t);
	memset(resp, 'r', sizeof resp - 1);
	t.resp = resp;
	t_start(&t, 1);
	t.no_read = 1;
	t_frame(&t, NGHTTP2_SETTINGS, 0, 0, set, 6);
	t_frame(&t, NGHTTP2_WINDOW_UPDATE, 0, 0, win, 4);
	for (id = 1; id <= 7; id += 2)
		t_frame(&t, NGHTTP2_HEADERS,
		    NGHTTP2_FLAG_END_HEADERS | NGHTTP2_FLAG_END_STREAM, id,
		    t_get_block, sizeof t_get_block);
	t_pump(&t, 20);
	for (i = 0; i < 450; i++)
		t_frame(&t, NGHTTP2_PING, 0, 0, p, 8);
	t_pump(&t, 20);
	before = h1x_mem_waiting(t.peer);
	assert_true(before > 0);
	assert_false(h1x_mem_state(t.peer) & H1X_MEM_READING);
	t_pump(&t, 20);
	assert_int_equal(h1x_mem_waiting(t.peer), before);
	/* What the engine wrote is bounded: about its mark and a frame. */
	t.no_read = 0;
	h1x_mem_recv(t.peer, t.raw, 1 << 24);
	assert_true(evbuffer_get_length(t.raw) < 2 * 64 * 1024 + 16384);
	t_raw_parse(&t);
	t_pump(&t, 40);
	assert_int_equal(h1x_mem_waiting(t.peer), 0);
	assert_int_equal(t.pings, 450);
	assert_int_equal(t.closes, 0);
	t_done(&t);
}

/* A client's body as it comes (t->cl_out), deferred while there is none. */
static ssize_t
t_cl_read_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
    uint32_t *flags, nghttp2_data_source *src, void *arg)
{
	struct t *t = src->ptr;
	size_t n = evbuffer_get_length(t->cl_out);

	(void)s;
	(void)id;
	(void)arg;
	if (n == 0 && !t->cl_end)
		return (NGHTTP2_ERR_DEFERRED);
	if (n > len)
		n = len;
	evbuffer_remove(t->cl_out, buf, n);
	if (t->cl_end && evbuffer_get_length(t->cl_out) == 0)
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	return ((ssize_t)n);
}

/* The client sends text on stream id (or, text NULL, ends it). */
static void
t_cl_write(struct t *t, int32_t id, const char *text)
{
	if (text != NULL)
		evbuffer_add(t->cl_out, text, strlen(text));
	else
		t->cl_end = 1;
	nghttp2_session_resume_data(t->cl, id);
	t_pump(t, 10);
}

/* The owner sends text on the stream's sink (or, text NULL, ends it). */
static void
t_sink_write(struct t *t, struct h2s_stream *st, const char *text)
{
	struct sink *sk = h2s_stream_sink(st);
	struct evbuffer *b;

	if (text == NULL) {
		assert_int_equal(sink_end(sk), 0);
	} else {
		b = evbuffer_new();
		evbuffer_add(b, text, strlen(text));
		assert_int_equal(sink_body(sk, b, strlen(text)), 0);
		evbuffer_free(b);
	}
	t_pump(t, 10);
}

/*
 * RFC 8441: the session says SETTINGS_ENABLE_CONNECT_PROTOCOL=1, an
 * extended CONNECT reaches the owner with its :protocol, and a 200
 * without a length leaves the stream open for bytes both ways, each
 * side's end on its own.
 */
static void
test_extended_connect(void **state)
{
	static struct t t;
	nghttp2_nv proto = { (uint8_t *)":protocol", (uint8_t *)"websocket", 9,
		9, NGHTTP2_NV_FLAG_NONE };
	nghttp2_data_provider dp;
	struct h2s_stream *st;
	struct t_cst *c;
	struct evbuffer *in;
	struct head rh;
	int32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t.conf.hc_flags = H2S_C_CONNECT_PROTOCOL;
	t_start(&t, 0);
	assert_int_equal(nghttp2_session_get_remote_settings(
			     t.cl, NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL),
	    1);
	t.cl_out = evbuffer_new();
	dp.source.ptr = &t;
	dp.read_callback = t_cl_read_cb;
	id = t_req(&t, "CONNECT", "/chat", &proto, 1, &dp);
	t_pump(&t, 10);
	assert_int_equal(t.heads, 1);
	assert_string_equal(t.method, "CONNECT");
	assert_string_equal(t.protocol, "websocket");
	assert_true(t.head_flags & HEAD_F_UPGRADE);
	assert_false(t.head_flags & HEAD_F_LENGTH);
	st = t.st[t_idx(id)];
	assert_non_null(st);
	assert_false(h2s_stream_body_done(st));

	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	assert_int_equal(sink_head(h2s_stream_sink(st), &rh), 0);
	t_sink_write(&t, st, "from the server ");
	c = &t.cst[t_idx(id)];
	assert_int_equal(c->status, 200);
	assert_false(c->ended);
	assert_int_equal(c->rst, 0);
	assert_null(strstr(c->fields, "content-length"));

	in = evbuffer_new();
	t_cl_write(&t, id, "from the client");
	assert_int_equal(h2s_stream_body_read(st, in, 1024), 15);
	assert_false(h2s_stream_body_done(st));
	/* The client ends its side; the server's still sends. */
	t_cl_write(&t, id, NULL);
	assert_int_equal(h2s_stream_body_read(st, in, 1024), 0);
	assert_true(h2s_stream_body_done(st));
	assert_int_equal(evbuffer_get_length(in), 15);
	t_sink_write(&t, st, "and its last words");
	assert_false(c->ended);
	t_sink_write(&t, st, NULL);
	h2s_stream_release(st);
	t_pump(&t, 10);
	assert_true(c->ended);
	assert_int_equal(c->rst, 0);
	assert_int_equal(t.errors, 0);
	t_body_is(&t, id, "from the server and its last words");
	assert_int_equal(h2s_nstreams(t.h), 0);
	evbuffer_free(in);
	t_done(&t);
}

/* Without H2S_C_CONNECT_PROTOCOL an extended CONNECT is reset. */
static void
test_extended_connect_off(void **state)
{
	static struct t t;
	nghttp2_nv proto = { (uint8_t *)":protocol", (uint8_t *)"websocket", 9,
		9, NGHTTP2_NV_FLAG_NONE };
	int32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 0);
	assert_int_equal(nghttp2_session_get_remote_settings(
			     t.cl, NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL),
	    0);
	id = t_req(&t, "CONNECT", "/chat", &proto, 1, NULL);
	t_pump(&t, 10);
	assert_int_equal(t.heads, 0);
	assert_int_equal(t.cst[t_idx(id)].rst, NGHTTP2_PROTOCOL_ERROR + 1);
	assert_int_equal(h2s_nstreams(t.h), 0);
	t_done(&t);
}

/* A stream's own idle timeout (h2s_stream_idle): reset, on_error. */
static void
test_stream_idle(void **state)
{
	static struct t t;
	int32_t id;

	(void)state;
	t_init(&t);
	t.mode = T_HOLD;
	t_start(&t, 0);
	id = t_req(&t, "GET", "/quiet", NULL, 0, NULL);
	t_pump(&t, 10);
	assert_non_null(t.st[0]);
	h2s_stream_idle(t.st[0], 100);
	t_sleep(&t, 50);
	assert_int_equal(t.errors, 0);
	t_sleep(&t, 250);
	assert_int_equal(t.errors, 1);
	assert_string_equal(t.why, "stream idle timeout");
	assert_int_equal(t.cst[t_idx(id)].rst, NGHTTP2_CANCEL + 1);
	t_logged(&t, "h2_stream_idle");
	assert_int_equal(h2s_nstreams(t.h), 0);
	t_done(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_get),
		cmocka_unit_test(test_post_window),
		cmocka_unit_test(test_big_response),
		cmocka_unit_test(test_room_drain),
		cmocka_unit_test(test_trailers_interim),
		cmocka_unit_test(test_head),
		cmocka_unit_test(test_concurrent),
		cmocka_unit_test(test_client_reset),
		cmocka_unit_test(test_release_cancel),
		cmocka_unit_test(test_early_response),
		cmocka_unit_test(test_early_response_small),
		cmocka_unit_test(test_shutdown),
		cmocka_unit_test(test_rapid_reset),
		cmocka_unit_test(test_continuation_flood),
		cmocka_unit_test(test_settings_flood),
		cmocka_unit_test(test_settings_entries),
		cmocka_unit_test(test_ping_flood),
		cmocka_unit_test(test_empty_data),
		cmocka_unit_test(test_header_too_large),
		cmocka_unit_test(test_max_streams),
		cmocka_unit_test(test_max_total),
		cmocka_unit_test(test_idle),
		cmocka_unit_test(test_head_timeout),
		cmocka_unit_test(test_ping_noread),
		cmocka_unit_test(test_extended_connect),
		cmocka_unit_test(test_extended_connect_off),
		cmocka_unit_test(test_stream_idle),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
