/*
 * libFuzzer harness for the HTTP/2 server engine (gateway/h2s.c) over the
 * in-memory transport: the client preface, then the input's bytes in
 * pieces whose sizes the input chooses, to a trivial owner that reads
 * every request body and answers each stream through its sink (a head, a
 * body, the end) once the body is whole.  Nothing may crash, the close
 * hooks pair up (one on_close, then one on_free), and nothing may stay
 * allocated (LeakSanitizer).
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
	fprintf(stderr, "fuzz_h2s.c:%d: %s\n", line, what);
	abort();
}

static const char fz_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/* The owner: what the hooks saw. */
struct fz {
	struct h2s *h;
	struct evbuffer *scratch;
	int closes, frees;
};

/* Answer a stream whose body is whole: a head, a body, the end. */
static void
fz_answer(struct fz *f, struct h2s_stream *st)
{
	struct sink *sk = h2s_stream_sink(st);
	struct hfield fl;
	struct head rh;

	memset(&rh, 0, sizeof rh);
	rh.h_status = 200;
	hfield_set(&fl, "X-Fuzz", "1");
	rh.h_fields = &fl;
	rh.h_nfields = 1;
	if (sink_head(sk, &rh) == 0) {
		evbuffer_add(f->scratch, "fuzz body\n", 10);
		if (sink_body(sk, f->scratch, 10) == 0)
			sink_end(sk);
	}
	evbuffer_drain(f->scratch, evbuffer_get_length(f->scratch));
	h2s_stream_release(st);
}

/* Read what body waits; answer once it is whole. */
static void
fz_body(struct fz *f, struct h2s_stream *st)
{
	ssize_t n;

	do {
		n = h2s_stream_body_read(st, f->scratch, 65536);
		evbuffer_drain(f->scratch, evbuffer_get_length(f->scratch));
	} while (n > 0);
	if (n < 0)
		return;
	if (h2s_stream_body_done(st))
		fz_answer(f, st);
}

static void
fz_head_cb(
    struct h2s *h, void *arg, struct h2s_stream *st, const struct head *req)
{
	(void)h;
	(void)req;
	h2s_stream_set_arg(st, arg);
	fz_body(arg, st);
}

static void
fz_body_cb(struct h2s_stream *st, void *sarg)
{
	fz_body(sarg, st);
}

static void
fz_drain_cb(struct h2s_stream *st, void *sarg)
{
	(void)st;
	(void)sarg;
}

static void
fz_error_cb(struct h2s_stream *st, void *sarg, const char *why)
{
	(void)st;
	(void)sarg;
	FUZZ_ASSERT(why != NULL);
}

static void
fz_log_cb(struct h2s *h, void *arg, const struct h2s_refusal *r)
{
	(void)h;
	(void)arg;
	FUZZ_ASSERT(r->hr_code != NULL && r->hr_message != NULL);
}

static void
fz_close_cb(struct h2s *h, void *arg, const char *reason)
{
	struct fz *f = arg;

	(void)h;
	(void)reason;
	f->closes++;
	FUZZ_ASSERT(f->closes == 1 && f->frees == 0);
}

static void
fz_free_cb(void *arg)
{
	((struct fz *)arg)->frees++;
}

static const struct h2s_hooks fz_hooks = {
	.on_head = fz_head_cb,
	.on_body = fz_body_cb,
	.on_drain = fz_drain_cb,
	.on_error = fz_error_cb,
	.on_log = fz_log_cb,
	.on_close = fz_close_cb,
	.on_free = fz_free_cb,
};

static const struct http1_limits fz_limits = { 4096, 1024, 64 };
static const struct h2s_conf fz_conf = {
	.hc_name = "fuzz",
	.hc_limits = &fz_limits,
	.hc_max_streams = 16,
	.hc_stream_window = 65535,
	.hc_conn_window = 1 << 20,
	.hc_max_streams_total = 200,
	.hc_head_ms = 10000,
	.hc_idle_ms = 10000,
	.hc_out_high = 4096,
	.hc_conn_out_high = 65536,
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
	base = event_base_new();
	rx = evbuffer_new();
	f.scratch = evbuffer_new();
	f.h = h2s_new(base, h1x_mem_new(base, 16384, 0, &peer), &fz_conf,
	    &fz_hooks, &f, 1, "fuzz");
	h1x_mem_send(peer, fz_preface, sizeof fz_preface - 1);
	/* The input in pieces of 1 to 256 bytes; the peer reads everything. */
	for (pass = 0; pass < 4096 && f.frees == 0; pass++) {
		if (off < size) {
			piece = 1 + data[off] % 256;
			if (piece > size - off)
				piece = size - off;
			h1x_mem_send(peer, data + off, piece);
			off += piece;
		} else if (off == size) {
			h1x_mem_send_eof(peer);
			off++;
		}
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		h1x_mem_recv(peer, rx, 1 << 20);
		evbuffer_drain(rx, evbuffer_get_length(rx));
		if (off > size && pass > 64 && h1x_mem_waiting(peer) == 0 &&
		    (h1x_mem_state(peer) & H1X_MEM_SHUT))
			break;
	}
	if (f.frees == 0)
		h2s_close(f.h, "fuzz over");
	for (pass = 0; pass < 64 && f.frees == 0; pass++) {
		event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
		h1x_mem_recv(peer, rx, 1 << 20);
		evbuffer_drain(rx, evbuffer_get_length(rx));
	}
	FUZZ_ASSERT(f.closes == 1 && f.frees == 1);
	FUZZ_ASSERT(h1x_mem_state(peer) & H1X_MEM_FREED);
	h1x_mem_free(peer);
	evbuffer_free(f.scratch);
	evbuffer_free(rx);
	event_base_free(base);
	return (0);
}
