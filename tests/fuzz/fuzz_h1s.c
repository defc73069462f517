/*
 * libFuzzer harness for the HTTP/1 server engine (gateway/h1s.c) over the
 * in-memory transport: the input's bytes arrive in pieces whose sizes the
 * input chooses, to a trivial owner that reads bodies and answers each
 * request by a byte of it (Content-Length, chunked with a trailer, a 1xx
 * first, or not at all), closes from a hook now and then, and the peer
 * reads slowly.  Nothing may crash, every hook pairs up (one on_close,
 * then one on_free), and nothing may stay allocated (LeakSanitizer).
 */
#include <event2/buffer.h>
#include <event2/event.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"

/* Abort with the failed condition, so libFuzzer saves the input. */
#define FUZZ_ASSERT(c) fuzz_assert((c) != 0, #c, __LINE__)

static void
fuzz_assert(int ok, const char *what, int line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_h1s.c:%d: %s\n", line, what);
	abort();
}

/* The owner: what the hooks saw. */
struct fz {
	struct h1s *h;
	const uint8_t *data;
	size_t size;
	size_t pos; /* next byte that chooses something */
	struct evbuffer *body;
	int closes, frees;
};

/* A byte of the input that chooses what happens, cycling. */
static uint8_t
fz_pick(struct fz *f)
{
	if (f->size == 0)
		return (0);
	return (f->data[f->pos++ % f->size]);
}

/* Answer the current request in a way a byte chooses. */
static void
fz_answer(struct fz *f, struct h1s *h)
{
	struct sink *sk = h1s_sink(h);
	struct hfield fl;
	struct head rh;
	uint8_t how = fz_pick(f);
	size_t n;

	memset(&rh, 0, sizeof rh);
	if (how & 0x01) {
		rh.h_status = 100 + (how & 0x03);
		sink_head(sk, &rh);
	}
	rh.h_status = (how & 0x02) ? 204 : 200 + (how >> 4);
	hfield_set(&fl, "X-Fuzz", "1");
	rh.h_fields = &fl;
	rh.h_nfields = 1;
	n = evbuffer_get_length(f->body);
	if (how & 0x04) {
		rh.h_flags |= HEAD_F_LENGTH;
		rh.h_length = n + (how & 0x08 ? 1 : 0); /* may fall short */
	}
	if (how & 0x40)
		rh.h_flags |= HEAD_F_CLOSE;
	if (sink_head(sk, &rh) != 0)
		return;
	sink_body(sk, f->body, n);
	if (how & 0x80) {
		hfield_set(&fl, "X-Trailer", "t");
		sink_trailers(sk, &fl, 1);
	}
	sink_end(sk);
}

/* Read what body waits; answer once it is whole. */
static void
fz_body(struct fz *f, struct h1s *h)
{
	enum http1_err err;
	uint8_t b = fz_pick(f);

	if (b == 0xfe) {
		h1s_close(h, "fuzz");
		return;
	}
	if (h1s_body_read(h, f->body, 1 + (b & 0x3f), &err) < 0) {
		if (err != HTTP1_E_NONE)
			sink_abort(h1s_sink(h), "bad body");
		return;
	}
	if (h1s_body_done(h) && b != 0xff)
		fz_answer(f, h);
}

static void
fz_head_cb(
    struct h1s *h, void *arg, const struct head *req, const struct http1_msg *m)
{
	(void)req;
	(void)m;
	fz_body(arg, h);
}

static void
fz_body_cb(struct h1s *h, void *arg)
{
	fz_body(arg, h);
}

static void
fz_error_cb(struct h1s *h, void *arg, const char *why)
{
	(void)h;
	(void)why;
	evbuffer_drain(((struct fz *)arg)->body,
	    evbuffer_get_length(((struct fz *)arg)->body));
}

static void
fz_log_cb(struct h1s *h, void *arg, const struct h1s_refusal *r)
{
	(void)h;
	(void)arg;
	FUZZ_ASSERT(r->hr_status >= 400 && r->hr_code != NULL);
}

static void
fz_close_cb(struct h1s *h, void *arg, const char *reason)
{
	struct fz *f = arg;

	(void)h;
	(void)reason;
	f->closes++;
	FUZZ_ASSERT(f->frees == 0);
}

static void
fz_free_cb(void *arg)
{
	((struct fz *)arg)->frees++;
}

static const struct h1s_hooks fz_hooks = {
	.on_head = fz_head_cb,
	.on_body = fz_body_cb,
	.on_error = fz_error_cb,
	.on_log = fz_log_cb,
	.on_close = fz_close_cb,
	.on_free = fz_free_cb,
};

static const struct http1_limits fz_limits = { 2048, 512, 24 };
static const struct h1s_conf fz_conf = {
	.hc_name = "fuzz",
	.hc_limits = &fz_limits,
	.hc_head_ms = 10000,
	.hc_idle_ms = 10000,
	.hc_linger_ms = 10000,
	.hc_out_high = 4096,
	.hc_max_requests = 50,
};

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct event_base *base;
	struct h1x_mem *peer;
	struct evbuffer *rx;
	struct fz f;
	size_t off = 0, piece;
	int pass;

	memset(&f, 0, sizeof f);
	f.data = data;
	f.size = size;
	f.pos = size / 2;
	base = event_base_new();
	rx = evbuffer_new();
	f.body = evbuffer_new();
	f.h = h1s_new(base, h1x_mem_new(base, 4096, 512, &peer), &fz_conf,
	    &fz_hooks, &f, 1, "fuzz");
	/* The input in pieces of 1 to 64 bytes; the peer reads slowly. */
	for (pass = 0; pass < 4096 && f.frees == 0; pass++) {
		if (off < size) {
			piece = 1 + data[off] % 64;
			if (piece > size - off)
				piece = size - off;
			h1x_mem_send(peer, data + off, piece);
			off += piece;
		} else if (off == size) {
			h1x_mem_send_eof(peer);
			off++;
		}
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		h1x_mem_recv(peer, rx, 1024);
		evbuffer_drain(rx, evbuffer_get_length(rx));
		if (off > size && pass > 2048)
			break;
	}
	if (f.frees == 0)
		h1s_close(f.h, "fuzz over");
	event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	FUZZ_ASSERT(f.closes == 1 && f.frees == 1);
	FUZZ_ASSERT(h1x_mem_state(peer) & H1X_MEM_FREED);
	h1x_mem_free(peer);
	evbuffer_free(f.body);
	evbuffer_free(rx);
	event_base_free(base);
	return (0);
}
