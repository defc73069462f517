/*
 * The HTTP/2 server engine: one struct h2s per client connection, one
 * nghttp2 server session in it, over the HTTP/1 engine's transport
 * (struct h1x: a stream, memory in the unit tests).
 *
 * Input: the transport's input goes to nghttp2_session_mem_recv chain by
 * chain.  Each request stream gets a struct h2s_stream: its header block
 * becomes a struct head for the owner (on_head), its DATA goes into the
 * stream's own buffer and the window for it goes back to the peer only as
 * the owner takes it (h2s_stream_body_read), so a stream holds at most its
 * window.  Output: each stream's sink (h2s_sink.c) queues frames in
 * nghttp2; nghttp2_session_send writes them into the transport's output
 * while that is under H2S_OUT_MARK, DATA payload moved out of the stream's
 * buffer without a copy, and goes on from the transport's write callback.
 * While the output cannot drain, input is not read either, so a peer that
 * floods frames and reads nothing grows nothing.
 *
 * The engine refuses itself what would let a peer make it hold or do too
 * much: rapid reset (the peer's resets and those it provokes, counted),
 * floods (PING and SETTINGS acks, SETTINGS entries, CONTINUATION frames,
 * empty DATA frames), header lists past the limit (431), streams past the
 * concurrent and the lifetime caps, and the head, idle and stream idle
 * timeouts.  h2s_close is the one close path: on_error for every stream
 * the owner has, a GOAWAY, the output flushed and the input drained for
 * a moment, on_close, and the free from the loop, never inside a
 * callback of its own.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "h2s_int.h"

/* Error strings: the why of on_error, by what ended the stream. */
static const char h2s_why_reset[] = "stream reset by the client";
static const char h2s_why_closed[] = "stream closed";
static const char h2s_why_idle[] = "stream idle timeout";

static void h2s_input(struct h2s *);
static void h2s_fail(struct h2s *, uint32_t code, const char *hr_code,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void h2s_close_code(struct h2s *, uint32_t code, const char *reason);

/* Name of a state, for debug logs. */
static const char *
h2s_state_name(int s)
{
	switch (s) {
	case H2S_S_OPEN:
		return ("open");
	case H2S_S_DRAIN:
		return ("drain");
	case H2S_S_CLOSING:
		return ("closing");
	case H2S_S_DEAD:
		return ("dead");
	}
	return ("?");
}

/* Print h's state, flags and counts into buf, for debug logs. */
char *
h2s_print(const struct h2s *h, char *buf, size_t len)
{
	snprintf(buf, len,
	    "state=%s flags=%#x streams=%zu total=%llu out=%zu queued=%zu",
	    h2s_state_name(h->h_state), (unsigned)h->h_flags, h->h_nstreams,
	    (unsigned long long)h->h_total, h->h_out,
	    h->h_x != NULL ? evbuffer_get_length(h->h_x->hx_out) : 0);
	return (buf);
}

/* Streams the engine holds (open in nghttp2, or still the owner's). */
size_t
h2s_nstreams(const struct h2s *h)
{
	return (h->h_nstreams);
}

/* Tell the owner about a refusal of the engine's own. */
void
h2s_log(struct h2s *h, int status, const char *code, const char *msg,
    const struct h2s_stream *st)
{
	struct h2s_refusal r;

	if (h->h_hooks->on_log == NULL)
		return;
	memset(&r, 0, sizeof r);
	r.hr_status = status;
	r.hr_code = code;
	r.hr_message = msg;
	if (st != NULL) {
		r.hr_stream = (uint32_t)st->st_id;
		if (st->st_flags & ST_F_HEAD)
			r.hr_head = &st->st_head;
	}
	h->h_hooks->on_log(h, h->h_arg, &r);
}

/* The same, with the stream given by id (no struct of ours). */
static void
h2s_log_id(struct h2s *h, const char *code, const char *msg, int32_t id)
{
	struct h2s_refusal r;

	if (h->h_hooks->on_log == NULL)
		return;
	memset(&r, 0, sizeof r);
	r.hr_code = code;
	r.hr_message = msg;
	r.hr_stream = (uint32_t)id;
	h->h_hooks->on_log(h, h->h_arg, &r);
}

/* Is the transport's output too full to add frames to? */
int
h2s_out_blocked(const struct h2s *h)
{
	return (evbuffer_get_length(h->h_x->hx_out) >= H2S_OUT_MARK);
}

/* (Re)arm a stream's idle timer: it moved something. */
void
h2s_stream_touch(struct h2s_stream *st)
{
	struct h2s *h = st->st_h;
	uint64_t ms = st->st_idle_ms != 0 ? st->st_idle_ms
					  : h->h_conf->hc_stream_idle_ms;

	if (ms != 0 && !(st->st_flags & ST_F_CLOSED))
		tq_timer_set(h->h_tq, &st->st_timer, ms);
}

/* Give back connection window for n body bytes nobody will read. */
static void
h2s_consume_conn(struct h2s *h, size_t n)
{
	if (n > 0 && !(h->h_flags & H2S_F_NGDONE))
		nghttp2_session_consume_connection(h->h_ng, n);
}

/* Drop what a stream's body buffer holds, its window given back. */
static void
h2s_stream_drop_in(struct h2s_stream *st)
{
	size_t n = evbuffer_get_length(st->st_in);

	if (n == 0)
		return;
	evbuffer_drain(st->st_in, n);
	if (st->st_flags & ST_F_CLOSED)
		h2s_consume_conn(st->st_h, n);
	else if (!(st->st_h->h_flags & H2S_F_NGDONE))
		nghttp2_session_consume(st->st_h->h_ng, st->st_id, n);
}

/* Drop what a stream's output holds. */
void
h2s_stream_drop_out(struct h2s_stream *st)
{
	size_t n = evbuffer_get_length(st->st_out);

	evbuffer_drain(st->st_out, n);
	st->st_h->h_out -= n;
}

/* Free a stream: its fields' buffers, its bodies, its timer. */
static void
h2s_stream_free(struct h2s_stream *st)
{
	size_t i;

	tq_timer_stop(&st->st_timer);
	for (i = 0; i < st->st_nrc; i++)
		nghttp2_rcbuf_decref(st->st_rc[i]);
	for (i = 0; i < H2S_PS_MAX; i++)
		if (st->st_ps[i] != NULL)
			nghttp2_rcbuf_decref(st->st_ps[i]);
	free(st->st_rc);
	free(st->st_fields);
	free(st->st_tr);
	evbuffer_free(st->st_in);
	evbuffer_free(st->st_out);
	free(st);
}

/*
 * Nobody needs the stream any more (nghttp2 closed it, the owner let go):
 * off the list now, freed from the loop.
 */
static void
h2s_stream_reap(struct h2s_stream *st)
{
	struct h2s *h = st->st_h;

	if (st->st_flags & ST_F_REAP)
		return;
	st->st_flags |= ST_F_REAP;
	tq_timer_stop(&st->st_timer);
	if (st->st_flags & ST_F_FULL) {
		st->st_flags &= ~ST_F_FULL;
		h->h_nfull--;
	}
	h2s_stream_drop_out(st);
	TAILQ_REMOVE(&h->h_streams, st, st_entry);
	TAILQ_INSERT_TAIL(&h->h_reap, st, st_entry);
	if (--h->h_nstreams == 0 && h->h_state == H2S_S_OPEN &&
	    h->h_conf->hc_idle_ms != 0)
		tq_timer_set(h->h_tq, &h->h_timer, h->h_conf->hc_idle_ms);
	h2s_kick(h);
}

/* The stream ended before the owner let go of it: tell it, once. */
static void
h2s_stream_lost(struct h2s_stream *st, const char *why)
{
	struct h2s *h = st->st_h;

	if (!(st->st_flags & ST_F_OWNED))
		return;
	st->st_flags &= ~ST_F_OWNED;
	if (h->h_hooks->on_error != NULL)
		h->h_hooks->on_error(st, st->st_arg, why);
}

/*
 * Count a reset the peer sent or provoked; past the token bucket's burst
 * (refilled at H2S_RST_RATE a second) the connection goes.  Returns -1
 * then.
 */
/*
 * Take a token from bucket b (burst, refilled at rate a second); 0 when
 * there was one, -1 when the peer used them all.
 */
static int
h2s_bucket_take(struct h2s_bucket *b, uint64_t burst, uint64_t rate)
{
	uint64_t now = clock_mono_msec(), add;

	if (b->b_at == 0) {
		b->b_at = now;
		b->b_tokens = burst;
	}
	add = (now - b->b_at) * rate / 1000;
	if (add > 0) {
		b->b_tokens += add;
		if (b->b_tokens > burst)
			b->b_tokens = burst;
		b->b_at = now;
	}
	if (b->b_tokens == 0)
		return (-1);
	b->b_tokens--;
	return (0);
}

static int
h2s_rst_count(struct h2s *h)
{
	if (h2s_bucket_take(&h->h_rst, H2S_RST_BURST, H2S_RST_RATE) == 0)
		return (0);
	h2s_fail(h, NGHTTP2_ENHANCE_YOUR_CALM, "h2_rapid_reset",
	    "The client reset (or made us reset) more than %u streams at "
	    "%u a second.",
	    H2S_RST_BURST, H2S_RST_RATE);
	return (-1);
}

/* Free an engine; from the loop, after h2s_close. */
static void
h2s_free_cb(evutil_socket_t fd, short events, void *arg)
{
	struct h2s *h = arg;
	struct h2s_stream *st;

	(void)fd;
	(void)events;
	if (h->h_hooks->on_free != NULL)
		h->h_hooks->on_free(h->h_arg);
	nghttp2_session_del(h->h_ng);
	while ((st = TAILQ_FIRST(&h->h_streams)) != NULL) {
		TAILQ_REMOVE(&h->h_streams, st, st_entry);
		h2s_stream_free(st);
	}
	while ((st = TAILQ_FIRST(&h->h_reap)) != NULL) {
		TAILQ_REMOVE(&h->h_reap, st, st_entry);
		h2s_stream_free(st);
	}
	h->h_x->hx_ops->xo_free(h->h_x);
	tq_timer_stop(&h->h_timer);
	tq_timer_stop(&h->h_htimer);
	tq_put(h->h_tq);
	event_free(h->h_kick);
	free(h->h_reason);
	free(h);
}

/* The output drained, or the moment for it passed: free from the loop. */
static void
h2s_finish(struct h2s *h)
{
	struct timeval tv = { 0, 0 };

	if (h->h_state == H2S_S_DEAD)
		return;
	h->h_state = H2S_S_DEAD;
	/* The owner keeps the connection listed until it is really gone. */
	if (h->h_hooks->on_close != NULL)
		h->h_hooks->on_close(h, h->h_arg, h->h_reason);
	tq_timer_stop(&h->h_timer);
	tq_timer_stop(&h->h_htimer);
	event_del(h->h_kick);
	event_base_once(tq_base(h->h_tq), -1, EV_TIMEOUT, h2s_free_cb, h, &tv);
}

/*
 * A closing connection's output is written: shut our side and drain the
 * peer's input for a moment, so that what it sent unread (a flood, a
 * request) does not make the kernel reset the connection and destroy
 * the GOAWAY before the peer read it.  A transport that cannot shut its
 * side (TLS), or a peer that already ended its own, is finished at once.
 */
static void
h2s_drained(struct h2s *h)
{
	struct h1x *x = h->h_x;

	if ((h->h_flags & (H2S_F_LINGER | H2S_F_EOF)) ||
	    x->hx_ops->xo_shutdown(x) != 0) {
		h2s_finish(h);
		return;
	}
	h->h_flags |= H2S_F_LINGER;
	x->hx_ops->xo_read(x, 1);
	tq_timer_set(h->h_tq, &h->h_timer, H2S_LINGER_MS);
}

/* Append a GOAWAY frame of our own, after whatever nghttp2 wrote. */
static void
h2s_goaway_raw(struct h2s *h, uint32_t code)
{
	uint8_t f[17];
	int32_t last = nghttp2_session_get_last_proc_stream_id(h->h_ng);

	memset(f, 0, sizeof f);
	f[2] = 8; /* length */
	f[3] = NGHTTP2_GOAWAY;
	f[9] = (uint8_t)((last >> 24) & 0x7f);
	f[10] = (uint8_t)(last >> 16);
	f[11] = (uint8_t)(last >> 8);
	f[12] = (uint8_t)last;
	f[13] = (uint8_t)(code >> 24);
	f[14] = (uint8_t)(code >> 16);
	f[15] = (uint8_t)(code >> 8);
	f[16] = (uint8_t)code;
	evbuffer_add(h->h_x->hx_out, f, sizeof f);
	h->h_flags |= H2S_F_GOAWAY_SENT;
}

/*
 * Closing, from the loop: what nghttp2 still has queued goes (unless it
 * failed), then our GOAWAY unless it sent one; the free once the output
 * drained, or after a moment.
 */
static void
h2s_closing_flush(struct h2s *h)
{
	uint64_t ms = H2S_LINGER_MS;

	if (!(h->h_flags & H2S_F_NGDONE)) {
		(void)nghttp2_session_send(h->h_ng);
		h->h_flags |= H2S_F_NGDONE;
	}
	if (!(h->h_flags & H2S_F_GOAWAY_SENT))
		h2s_goaway_raw(h, h->h_code);
	h->h_x->hx_ops->xo_flush(h->h_x);
	if (evbuffer_get_length(h->h_x->hx_out) == 0) {
		h2s_drained(h);
		return;
	}
	if (h->h_conf->hc_write_ms != 0 && h->h_conf->hc_write_ms < ms)
		ms = h->h_conf->hc_write_ms;
	tq_timer_set(h->h_tq, &h->h_timer, ms);
}

/*
 * Close with a GOAWAY of code, logging why: every stream the owner still
 * has hears on_error now, the owner on_close once the connection is gone
 * (h2s_finish) and on_free from the loop.
 */
static void
h2s_close_code(struct h2s *h, uint32_t code, const char *reason)
{
	struct h2s_stream *st, *next;
	char buf[160];

	if (h->h_state >= H2S_S_CLOSING)
		return;
	log_debug("%s %llu %s: h2 closed, %s: %s", h->h_conf->hc_name,
	    (unsigned long long)h->h_id, h->h_peer,
	    h2s_print(h, buf, sizeof buf), reason);
	h->h_state = H2S_S_CLOSING;
	h->h_code = code;
	h->h_reason = xstrdup(reason);
	tq_timer_stop(&h->h_timer);
	tq_timer_stop(&h->h_htimer);
	h->h_x->hx_ops->xo_read(h->h_x, 0);
	for (st = TAILQ_FIRST(&h->h_streams); st != NULL; st = next) {
		next = TAILQ_NEXT(st, st_entry);
		tq_timer_stop(&st->st_timer);
		h2s_stream_lost(st, h->h_reason);
	}
	h2s_kick(h);
}

/*
 * Close the connection, logging why: the one close path.  GOAWAY
 * NO_ERROR after what is queued, then as h2s_close_code.
 */
void
h2s_close(struct h2s *h, const char *reason)
{
	h2s_close_code(h, NGHTTP2_NO_ERROR, reason);
}

/*
 * Close at once, the gateway stopping: as h2s_close, with the GOAWAY
 * written but not waited for, and the free from the loop's next pass.
 */
void
h2s_close_now(struct h2s *h, const char *reason)
{
	if (h->h_state == H2S_S_DEAD)
		return;
	h2s_close_code(h, NGHTTP2_NO_ERROR, reason);
	if (!(h->h_flags & H2S_F_GOAWAY_SENT))
		h2s_goaway_raw(h, NGHTTP2_NO_ERROR);
	h->h_flags |= H2S_F_NGDONE;
	h->h_x->hx_ops->xo_flush(h->h_x);
	h2s_finish(h);
}

/* The peer misbehaved: on_log says how, a GOAWAY of code, the close. */
static void
h2s_fail(struct h2s *h, uint32_t code, const char *hr_code, const char *fmt,
    ...)
{
	va_list ap;
	char *msg;

	if (h->h_state >= H2S_S_CLOSING)
		return;
	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	/* What nghttp2 still queued for a peer like this does not go. */
	h->h_flags |= H2S_F_NGDONE;
	h2s_log(h, 0, hr_code, msg, NULL);
	h2s_close_code(h, code, hr_code);
	free(msg);
}

/*
 * Graceful: GOAWAY(NO_ERROR) naming the last stream taken, no new
 * streams, the close once those finished.
 */
void
h2s_shutdown(struct h2s *h)
{
	if (h->h_state != H2S_S_OPEN)
		return;
	h->h_state = H2S_S_DRAIN;
	tq_timer_stop(&h->h_timer);
	nghttp2_submit_goaway(h->h_ng, NGHTTP2_FLAG_NONE,
	    nghttp2_session_get_last_proc_stream_id(h->h_ng), NGHTTP2_NO_ERROR,
	    NULL, 0);
	h2s_kick(h);
}

/* Run the engine's deferred work from the loop (h2s_kick_cb). */
void
h2s_kick(struct h2s *h)
{
	if (h->h_state != H2S_S_DEAD)
		event_active(h->h_kick, EV_TIMEOUT, 1);
}

/*
 * Streams told they were full hear on_drain once their buffer is under
 * half its mark and the connection's under half of its own.
 */
static void
h2s_drains(struct h2s *h)
{
	struct h2s_stream *st, *next;

	if (h->h_nfull == 0 || h->h_out >= h2s_conn_high(h) / 2)
		return;
	for (st = TAILQ_FIRST(&h->h_streams); st != NULL; st = next) {
		next = TAILQ_NEXT(st, st_entry);
		if (!(st->st_flags & ST_F_FULL) ||
		    evbuffer_get_length(st->st_out) >= h2s_out_high(h) / 2)
			continue;
		st->st_flags &= ~ST_F_FULL;
		h->h_nfull--;
		if ((st->st_flags & ST_F_OWNED) &&
		    h->h_hooks->on_drain != NULL)
			h->h_hooks->on_drain(st, st->st_arg);
		if (h->h_state >= H2S_S_CLOSING)
			return;
	}
}

/*
 * Frames out: nghttp2 writes what it has queued while the output is under
 * its mark; then the owner hears of room, and a finished connection
 * closes.
 */
static void
h2s_send(struct h2s *h)
{
	int rv;

	if (h->h_state >= H2S_S_CLOSING)
		return;
	if ((rv = nghttp2_session_send(h->h_ng)) != 0) {
		h2s_fail(h, NGHTTP2_INTERNAL_ERROR, "h2_internal_error",
		    "nghttp2 could not send: %s.", nghttp2_strerror(rv));
		return;
	}
	h->h_x->hx_ops->xo_flush(h->h_x);
	h2s_drains(h);
	if (h->h_state >= H2S_S_CLOSING)
		return;
	if (h->h_state == H2S_S_DRAIN && h->h_nstreams == 0) {
		h2s_close(h, "shut down");
		return;
	}
	if (!nghttp2_session_want_read(h->h_ng) &&
	    !nghttp2_session_want_write(h->h_ng))
		h2s_close(h, "session over");
}

/* Deferred work, from the loop: free streams, write, read what waits. */
static void
h2s_kick_cb(evutil_socket_t fd, short events, void *arg)
{
	struct h2s *h = arg;
	struct h2s_stream *st;

	(void)fd;
	(void)events;
	while ((st = TAILQ_FIRST(&h->h_reap)) != NULL) {
		TAILQ_REMOVE(&h->h_reap, st, st_entry);
		h2s_stream_free(st);
	}
	if (h->h_state == H2S_S_CLOSING) {
		h2s_closing_flush(h);
		return;
	}
	if (h->h_state == H2S_S_DEAD)
		return;
	h2s_send(h);
	if ((h->h_flags & H2S_F_RSTOP) && h->h_state < H2S_S_CLOSING &&
	    !h2s_out_blocked(h))
		h2s_input(h);
}

/*
 * Input: feed it to nghttp2 a chain (at most H2S_IN_PIECE) at a time,
 * writing after each, until it is all taken or the output is full; then
 * reading stops until the output drains (h2s_write_cb).
 */
static void
h2s_input(struct h2s *h)
{
	struct h1x *x = h->h_x;
	struct evbuffer_iovec v;
	ssize_t rv;
	size_t n;

	while (h->h_state < H2S_S_CLOSING) {
		if (h2s_out_blocked(h)) {
			if (!(h->h_flags & H2S_F_RSTOP)) {
				h->h_flags |= H2S_F_RSTOP;
				x->hx_ops->xo_read(x, 0);
			}
			return;
		}
		if (evbuffer_peek(x->hx_in, -1, NULL, &v, 1) < 1)
			break;
		n = v.iov_len < H2S_IN_PIECE ? v.iov_len : H2S_IN_PIECE;
		h->h_flags |= H2S_F_IN_NG;
		rv = nghttp2_session_mem_recv(h->h_ng, v.iov_base, n);
		h->h_flags &= ~H2S_F_IN_NG;
		if (h->h_state >= H2S_S_CLOSING)
			return;
		if (rv < 0) {
			h2s_recv_error(h, (int)rv);
			return;
		}
		evbuffer_drain(x->hx_in, (size_t)rv);
		h2s_send(h);
	}
	if (h->h_state >= H2S_S_CLOSING)
		return;
	if (h->h_flags & H2S_F_RSTOP) {
		h->h_flags &= ~H2S_F_RSTOP;
		x->hx_ops->xo_read(x, 1);
	}
	x->hx_ops->xo_flush(x);
}

/* nghttp2 refused the input for good: say which defence, and close. */
void
h2s_recv_error(struct h2s *h, int rv)
{
	switch (rv) {
	case NGHTTP2_ERR_FLOODED:
		h2s_fail(h, NGHTTP2_ENHANCE_YOUR_CALM, "h2_flood",
		    "The client sent more PING or SETTINGS frames than it "
		    "read the answers to.");
		break;
	case NGHTTP2_ERR_TOO_MANY_CONTINUATIONS:
		h2s_fail(h, NGHTTP2_ENHANCE_YOUR_CALM, "h2_continuation_flood",
		    "The client sent more than %u CONTINUATION frames for "
		    "one header block.",
		    H2S_MAX_CONTINUATIONS);
		break;
	case NGHTTP2_ERR_BAD_CLIENT_MAGIC:
		h2s_fail(h, NGHTTP2_PROTOCOL_ERROR, "h2_bad_preface",
		    "The connection did not start with the HTTP/2 preface.");
		break;
	case NGHTTP2_ERR_CALLBACK_FAILURE:
		/* One of ours refused and said why already. */
		h2s_fail(h, NGHTTP2_INTERNAL_ERROR, "h2_internal_error",
		    "The session stopped: %s.", nghttp2_strerror(rv));
		break;
	default:
		h2s_fail(h, NGHTTP2_PROTOCOL_ERROR, "h2_protocol_error",
		    "The session stopped: %s.", nghttp2_strerror(rv));
		break;
	}
}

/* Bytes from the peer. */
static void
h2s_read_cb(void *arg)
{
	struct h2s *h = arg;

	if (h->h_state >= H2S_S_CLOSING) {
		evbuffer_drain(h->h_x->hx_in, evbuffer_get_length(h->h_x->hx_in));
		return;
	}
	h2s_input(h);
}

/* The output drained to its low watermark: write more, read again. */
static void
h2s_write_cb(void *arg)
{
	struct h2s *h = arg;

	switch (h->h_state) {
	case H2S_S_OPEN:
	case H2S_S_DRAIN:
		h2s_send(h);
		if ((h->h_flags & H2S_F_RSTOP) && h->h_state < H2S_S_CLOSING &&
		    !h2s_out_blocked(h))
			h2s_input(h);
		break;
	case H2S_S_CLOSING:
		if (evbuffer_get_length(h->h_x->hx_out) == 0 &&
		    (h->h_flags & H2S_F_NGDONE) && !(h->h_flags & H2S_F_LINGER))
			h2s_drained(h);
		break;
	default:
		break;
	}
}

/* The peer ended its stream, or the connection failed. */
static void
h2s_event_cb(void *arg, int what, const char *why)
{
	struct h2s *h = arg;

	if (what == H1X_EV_EOF)
		h->h_flags |= H2S_F_EOF;
	if (h->h_state == H2S_S_CLOSING) {
		/* The peer's end while our output still drains: it may read. */
		if ((h->h_flags & H2S_F_LINGER) || what != H1X_EV_EOF)
			h2s_finish(h);
		return;
	}
	if (h->h_state == H2S_S_DEAD)
		return;
	if (what == H1X_EV_EOF)
		why = "client closed";
	h->h_flags |= H2S_F_NGDONE; /* nobody to write to */
	h2s_close(h, why != NULL ? why : "connection failed");
	if (h->h_state == H2S_S_CLOSING && what != H1X_EV_EOF)
		h2s_finish(h);
}

/* The connection timer: preface, idle, or the moment to flush at close. */
static void
h2s_timer_cb(void *arg)
{
	struct h2s *h = arg;

	switch (h->h_state) {
	case H2S_S_OPEN:
		if (h->h_nstreams != 0)
			break;
		h2s_log(h, 0, "h2_idle", "No stream for the idle timeout.",
		    NULL);
		if (h->h_state == H2S_S_OPEN)
			h2s_close(h, "h2 idle timeout");
		break;
	case H2S_S_CLOSING:
		h2s_finish(h);
		break;
	default:
		break;
	}
}

/* The head deadline: the preface and SETTINGS, or a header block. */
static void
h2s_htimer_cb(void *arg)
{
	struct h2s *h = arg;

	if (h->h_flags & H2S_F_SETTINGS)
		h2s_fail(h, NGHTTP2_ENHANCE_YOUR_CALM, "h2_head_timeout",
		    "A header block did not arrive within %llums.",
		    (unsigned long long)h->h_conf->hc_head_ms);
	else
		h2s_fail(h, NGHTTP2_SETTINGS_TIMEOUT, "h2_head_timeout",
		    "The preface and SETTINGS did not arrive within %llums.",
		    (unsigned long long)h->h_conf->hc_head_ms);
}

/* A stream moved nothing for its idle timeout: reset it. */
static void
h2s_stream_timer_cb(void *arg)
{
	struct h2s_stream *st = arg;
	struct h2s *h = st->st_h;

	if (h->h_state >= H2S_S_CLOSING || (st->st_flags & ST_F_CLOSED))
		return;
	if (st->st_flags & ST_F_DISCARD) {
		/* Answered long ago: the rest of the body is not waited for. */
		h2s_stream_reset(st, NGHTTP2_NO_ERROR);
		return;
	}
	h2s_log(h, 0, "h2_stream_idle", "The stream moved nothing for its "
	    "idle timeout.", st);
	h2s_stream_reset(st, NGHTTP2_CANCEL);
	h2s_stream_lost(st, h2s_why_idle);
	h2s_kick(h);
}

/* Reset a stream ourselves (not counted against the peer). */
void
h2s_stream_reset(struct h2s_stream *st, uint32_t code)
{
	struct h2s *h = st->st_h;

	if (st->st_flags & (ST_F_CLOSED | ST_F_OURRST))
		return;
	st->st_flags |= ST_F_OURRST;
	h2s_stream_drop_out(st);
	nghttp2_submit_rst_stream(
	    h->h_ng, NGHTTP2_FLAG_NONE, st->st_id, code);
	h2s_kick(h);
}

/* A new request stream: its state, within the caps. */
static int
h2s_begin_headers_cb(nghttp2_session *ng, const nghttp2_frame *fr, void *arg)
{
	struct h2s *h = arg;
	struct h2s_stream *st;
	int32_t id = fr->hd.stream_id;

	if (h->h_state >= H2S_S_CLOSING)
		return (NGHTTP2_ERR_CALLBACK_FAILURE);
	if (fr->hd.type != NGHTTP2_HEADERS ||
	    fr->headers.cat != NGHTTP2_HCAT_REQUEST)
		return (0);
	/* Refused at the end of the block (h2s_frame_recv_cb). */
	if (h->h_state != H2S_S_OPEN || h->h_nstreams >= h2s_max_streams(h))
		return (0);
	st = xcalloc(1, sizeof *st);
	st->st_h = h;
	st->st_id = id;
	st->st_in = evbuffer_new();
	st->st_out = evbuffer_new();
	st->st_sink.sk_ops = &h2s_sink_ops;
	st->st_sink.sk_arg = st;
	st->st_started_us = clock_mono_usec();
	tq_timer_init(&st->st_timer, h2s_stream_timer_cb, st);
	TAILQ_INSERT_TAIL(&h->h_streams, st, st_entry);
	nghttp2_session_set_stream_user_data(ng, id, st);
	h->h_nstreams++;
	tq_timer_stop(&h->h_timer);
	h2s_stream_touch(st);
	if (++h->h_total >= h2s_max_total(h)) {
		/* The last one: those in flight finish, then the close. */
		h2s_log(h, 0, "h2_stream_limit",
		    "The connection's streams reached the lifetime limit.",
		    NULL);
		h->h_state = H2S_S_DRAIN;
		nghttp2_submit_goaway(
		    ng, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR, NULL, 0);
	}
	return (0);
}

/* Which pseudo-header name is, or -1. */
static int
h2s_pseudo(const nghttp2_vec *n)
{
	static const char *names[H2S_PS_MAX] = { ":method", ":path",
		":authority", ":protocol", ":scheme" };
	int i;

	for (i = 0; i < H2S_PS_MAX; i++)
		if (strlen(names[i]) == n->len &&
		    memcmp(names[i], n->base, n->len) == 0)
			return (i);
	return (-1);
}

/*
 * A request header field: kept (its buffers referenced, not copied) while
 * the list stays within the limits; past them the stream gets 431.
 */
static int
h2s_header_cb(nghttp2_session *ng, const nghttp2_frame *fr,
    nghttp2_rcbuf *name, nghttp2_rcbuf *value, uint8_t flags, void *arg)
{
	struct h2s *h = arg;
	const struct http1_limits *lim = h->h_conf->hc_limits;
	struct h2s_stream *st;
	nghttp2_vec n, v;
	int ps;

	(void)flags;
	if (h->h_state >= H2S_S_CLOSING)
		return (NGHTTP2_ERR_CALLBACK_FAILURE);
	if (fr->hd.type != NGHTTP2_HEADERS ||
	    fr->headers.cat != NGHTTP2_HCAT_REQUEST ||
	    (st = nghttp2_session_get_stream_user_data(ng, fr->hd.stream_id)) ==
		NULL ||
	    (st->st_flags & ST_F_TOOBIG))
		return (0);
	n = nghttp2_rcbuf_get_buf(name);
	v = nghttp2_rcbuf_get_buf(value);
	st->st_hsize += n.len + v.len + 32;
	if (n.len > 0 && n.base[0] == ':') {
		if (lim != NULL && lim->max_head != 0 &&
		    st->st_hsize > lim->max_head) {
			st->st_flags |= ST_F_TOOBIG;
			return (0);
		}
		if ((ps = h2s_pseudo(&n)) >= 0 && st->st_ps[ps] == NULL) {
			nghttp2_rcbuf_incref(value);
			st->st_ps[ps] = value;
		}
		return (0);
	}
	if (lim != NULL && ((lim->max_head != 0 && st->st_hsize > lim->max_head) ||
	    (lim->max_headers != 0 && st->st_nrc / 2 >= lim->max_headers))) {
		st->st_flags |= ST_F_TOOBIG;
		return (0);
	}
	if (st->st_nrc + 2 > st->st_rccap) {
		st->st_rccap = st->st_rccap == 0 ? 16 : st->st_rccap * 2;
		st->st_rc = xreallocarray(
		    st->st_rc, st->st_rccap, sizeof *st->st_rc);
	}
	nghttp2_rcbuf_incref(name);
	nghttp2_rcbuf_incref(value);
	st->st_rc[st->st_nrc++] = name;
	st->st_rc[st->st_nrc++] = value;
	return (0);
}

/* Point a head's string at a kept buffer. */
static const char *
h2s_rc_str(nghttp2_rcbuf *rc, size_t *len)
{
	nghttp2_vec v;

	if (rc == NULL) {
		*len = 0;
		return (NULL);
	}
	v = nghttp2_rcbuf_get_buf(rc);
	*len = v.len;
	return ((const char *)v.base);
}

/* Make the stream's struct head from the fields it kept. */
static void
h2s_stream_head(struct h2s_stream *st)
{
	struct head *hd = &st->st_head;
	const struct hfield *f;
	size_t i, n = st->st_nrc / 2, len;
	uint64_t cl;
	char *end;

	st->st_fields = xcalloc(n > 0 ? n : 1, sizeof *st->st_fields);
	for (i = 0; i < n; i++) {
		st->st_fields[i].name = h2s_rc_str(
		    st->st_rc[2 * i], &st->st_fields[i].name_len);
		st->st_fields[i].value = h2s_rc_str(
		    st->st_rc[2 * i + 1], &st->st_fields[i].value_len);
	}
	memset(hd, 0, sizeof *hd);
	hd->h_version = 20;
	hd->h_fields = st->st_fields;
	hd->h_nfields = n;
	hd->h_method = h2s_rc_str(st->st_ps[H2S_PS_METHOD], &hd->h_method_len);
	hd->h_authority = h2s_rc_str(
	    st->st_ps[H2S_PS_AUTHORITY], &hd->h_authority_len);
	if (hd->h_authority == NULL && (f = head_find(hd, "host")) != NULL) {
		hd->h_authority = f->value;
		hd->h_authority_len = f->value_len;
	}
	hd->h_protocol = h2s_rc_str(st->st_ps[H2S_PS_PROTOCOL], &len);
	hd->h_target = h2s_rc_str(st->st_ps[H2S_PS_PATH], &hd->h_target_len);
	if (hd->h_target == NULL && head_method_is(hd, "CONNECT")) {
		/* A plain CONNECT names its authority only. */
		hd->h_target = hd->h_authority;
		hd->h_target_len = hd->h_authority_len;
	}
	if (hd->h_protocol != NULL) {
		hd->h_flags |= HEAD_F_UPGRADE;
		st->st_flags |= ST_F_CONNECT;
	}
	if (head_method_is(hd, "HEAD"))
		st->st_flags |= ST_F_HEAD_REQ;
	/* nghttp2 checked it is digits, and that the DATA will match. */
	if ((f = head_find(hd, "content-length")) != NULL) {
		cl = strtoull(f->value, &end, 10);
		if (end != f->value && *end == '\0') {
			hd->h_flags |= HEAD_F_LENGTH;
			hd->h_length = cl;
		}
	}
	if (st->st_flags & ST_F_IN_END) {
		hd->h_flags |= HEAD_F_LENGTH;
		hd->h_length = 0;
	}
	st->st_flags |= ST_F_HEAD;
}

/* The header block is complete: the stream's head to the owner. */
static void
h2s_request(struct h2s *h, struct h2s_stream *st)
{
	struct errpage ep;
	char msg[160];

	h2s_stream_head(st);
	if (st->st_flags & ST_F_TOOBIG) {
		snprintf(msg, sizeof msg,
		    "The request's header list is larger than %zu bytes or "
		    "%zu fields.",
		    h->h_conf->hc_limits->max_head,
		    h->h_conf->hc_limits->max_headers);
		st->st_flags |= ST_F_REFUSED;
		h2s_log(h, 431, "header_too_large", msg, st);
		if (h->h_state >= H2S_S_CLOSING)
			return;
		memset(&ep, 0, sizeof ep);
		ep.ep_status = 431;
		ep.ep_code = "header_too_large";
		ep.ep_message = msg;
		errpage_send(&st->st_sink, &ep);
		return;
	}
	if ((st->st_flags & ST_F_CONNECT) &&
	    !(h->h_conf->hc_flags & H2S_C_CONNECT_PROTOCOL)) {
		h2s_log(h, 0, "h2_protocol_error",
		    "Extended CONNECT is not enabled.", st);
		h2s_stream_reset(st, NGHTTP2_PROTOCOL_ERROR);
		return;
	}
	st->st_flags |= ST_F_OWNED;
	h->h_hooks->on_head(h, h->h_arg, st, &st->st_head);
}

/* A frame arrived whole. */
static int
h2s_frame_recv_cb(nghttp2_session *ng, const nghttp2_frame *fr, void *arg)
{
	struct h2s *h = arg;
	struct h2s_stream *st;

	if (h->h_state >= H2S_S_CLOSING)
		return (NGHTTP2_ERR_CALLBACK_FAILURE);
	st = fr->hd.stream_id != 0
	    ? nghttp2_session_get_stream_user_data(ng, fr->hd.stream_id)
	    : NULL;
	switch (fr->hd.type) {
	case NGHTTP2_SETTINGS:
		if (!(fr->hd.flags & NGHTTP2_FLAG_ACK) &&
		    !(h->h_flags & H2S_F_SETTINGS)) {
			h->h_flags |= H2S_F_SETTINGS;
			tq_timer_stop(&h->h_htimer);
		}
		break;
	case NGHTTP2_HEADERS:
		tq_timer_stop(&h->h_htimer);
		if (fr->headers.cat == NGHTTP2_HCAT_REQUEST && st == NULL) {
			/* Over a cap (h2s_begin_headers_cb). */
			nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE,
			    fr->hd.stream_id, NGHTTP2_REFUSED_STREAM);
			break;
		}
		if (st == NULL)
			break;
		if (fr->hd.flags & NGHTTP2_FLAG_END_STREAM)
			st->st_flags |= ST_F_IN_END;
		if (fr->headers.cat == NGHTTP2_HCAT_REQUEST)
			h2s_request(h, st);
		else if ((st->st_flags & ST_F_OWNED) &&
		    (st->st_flags & ST_F_IN_END) && h->h_hooks->on_body != NULL)
			h->h_hooks->on_body(st, st->st_arg); /* trailers */
		break;
	case NGHTTP2_DATA:
		if (fr->hd.length == 0 &&
		    !(fr->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
		    ++h->h_empty_data > H2S_EMPTY_DATA_MAX) {
			h2s_fail(h, NGHTTP2_ENHANCE_YOUR_CALM, "h2_flood",
			    "The client sent more than %u empty DATA frames.",
			    H2S_EMPTY_DATA_MAX);
			return (NGHTTP2_ERR_CALLBACK_FAILURE);
		}
		if (st == NULL)
			break;
		if (fr->hd.flags & NGHTTP2_FLAG_END_STREAM)
			st->st_flags |= ST_F_IN_END;
		if ((st->st_flags & ST_F_OWNED) && h->h_hooks->on_body != NULL)
			h->h_hooks->on_body(st, st->st_arg);
		break;
	case NGHTTP2_RST_STREAM:
		if (h2s_rst_count(h) != 0)
			return (NGHTTP2_ERR_CALLBACK_FAILURE);
		break;
	case NGHTTP2_PING:
		if ((fr->hd.flags & NGHTTP2_FLAG_ACK) ||
		    h2s_bucket_take(&h->h_ping, H2S_PING_BURST,
			H2S_PING_RATE) == 0)
			break;
		h2s_fail(h, NGHTTP2_ENHANCE_YOUR_CALM, "h2_flood",
		    "The client sent more than %u PING frames at %u a second.",
		    H2S_PING_BURST, H2S_PING_RATE);
		return (NGHTTP2_ERR_CALLBACK_FAILURE);
	default:
		break;
	}
	return (h->h_state >= H2S_S_CLOSING ? NGHTTP2_ERR_CALLBACK_FAILURE : 0);
}

/*
 * A piece of DATA payload: into the stream's buffer for the owner, or,
 * for a stream nobody reads, dropped with its window given back.
 */
static int
h2s_data_cb(nghttp2_session *ng, uint8_t flags, int32_t id,
    const uint8_t *data, size_t len, void *arg)
{
	struct h2s *h = arg;
	struct h2s_stream *st;

	(void)flags;
	if (h->h_state >= H2S_S_CLOSING)
		return (NGHTTP2_ERR_CALLBACK_FAILURE);
	st = nghttp2_session_get_stream_user_data(ng, id);
	if (st != NULL)
		st->st_in_total += len;
	if (st == NULL || !(st->st_flags & ST_F_OWNED)) {
		nghttp2_session_consume(ng, id, len);
		return (0);
	}
	evbuffer_add(st->st_in, data, len);
	h2s_stream_touch(st);
	return (0);
}

/*
 * A frame is about to arrive: a header block starts its deadline, any
 * frame after one (CONTINUATION aside) means it ended.
 */
static int
h2s_begin_frame_cb(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *arg)
{
	struct h2s *h = arg;

	(void)ng;
	if (!(h->h_flags & H2S_F_SETTINGS) || h->h_conf->hc_head_ms == 0)
		return (0);
	if (hd->type == NGHTTP2_HEADERS)
		tq_timer_set(h->h_tq, &h->h_htimer, h->h_conf->hc_head_ms);
	else if (hd->type != NGHTTP2_CONTINUATION)
		tq_timer_stop(&h->h_htimer);
	return (0);
}

/* nghttp2 closed a stream: the owner hears if it did not end it. */
static int
h2s_stream_close_cb(
    nghttp2_session *ng, int32_t id, uint32_t code, void *arg)
{
	struct h2s *h = arg;
	struct h2s_stream *st;

	if ((st = nghttp2_session_get_stream_user_data(ng, id)) == NULL)
		return (0);
	nghttp2_session_set_stream_user_data(ng, id, NULL);
	st->st_flags |= ST_F_CLOSED;
	h2s_stream_drop_in(st);
	h2s_stream_drop_out(st);
	tq_timer_stop(&st->st_timer);
	if (h->h_state >= H2S_S_CLOSING)
		return (0);
	if ((st->st_flags & ST_F_OWNED) &&
	    !(st->st_flags & (ST_F_END | ST_F_ABORT)))
		h2s_stream_lost(st, code == NGHTTP2_NO_ERROR ? h2s_why_closed
		    : (st->st_flags & ST_F_OURRST) ? "stream reset"
						   : h2s_why_reset);
	if (!(st->st_flags & ST_F_OWNED))
		h2s_stream_reap(st);
	return (0);
}

/* Which defence of nghttp2's own a GOAWAY it sent stands for. */
static const char *
h2s_goaway_code(struct h2s *h, uint32_t code)
{
	switch (h->h_ngerr) {
	case NGHTTP2_ERR_TOO_MANY_SETTINGS:
		return ("h2_settings_flood");
	case NGHTTP2_ERR_FLOODED:
		return ("h2_flood");
	default:
		break;
	}
	switch (code) {
	case NGHTTP2_ENHANCE_YOUR_CALM:
		return ("h2_flood");
	case NGHTTP2_FLOW_CONTROL_ERROR:
		return ("h2_flow_control_error");
	case NGHTTP2_FRAME_SIZE_ERROR:
		return ("h2_frame_size_error");
	case NGHTTP2_COMPRESSION_ERROR:
		return ("h2_compression_error");
	case NGHTTP2_INTERNAL_ERROR:
		return ("h2_rapid_reset"); /* nghttp2's own reset limit */
	default:
		return ("h2_protocol_error");
	}
}

/*
 * The response went out whole before the request: is what is left of
 * the request body small enough (a length said, at most H2S_DISCARD_MAX
 * to come) to read and drop rather than reset the stream?
 */
static int
h2s_stream_discards(const struct h2s_stream *st)
{
	const struct head *hd = &st->st_head;

	return ((st->st_flags & ST_F_HEAD) && !(st->st_flags & ST_F_CONNECT) &&
	    (hd->h_flags & HEAD_F_LENGTH) && hd->h_length >= st->st_in_total &&
	    hd->h_length - st->st_in_total <= H2S_DISCARD_MAX);
}

/*
 * A frame went out.  A GOAWAY nghttp2 sent on its own is a defence of its
 * that fired; a reset it sent on its own was provoked by the peer and is
 * counted; the end of a response while the request still comes is
 * followed by RST_STREAM(NO_ERROR) (RFC 9113 section 8.1).
 */
static int
h2s_frame_send_cb(nghttp2_session *ng, const nghttp2_frame *fr, void *arg)
{
	struct h2s *h = arg;
	struct h2s_stream *st;
	char msg[200];

	st = fr->hd.stream_id != 0
	    ? nghttp2_session_get_stream_user_data(ng, fr->hd.stream_id)
	    : NULL;
	switch (fr->hd.type) {
	case NGHTTP2_GOAWAY:
		h->h_flags |= H2S_F_GOAWAY_SENT;
		if (fr->goaway.error_code == NGHTTP2_NO_ERROR ||
		    h->h_state >= H2S_S_CLOSING)
			break;
		snprintf(msg, sizeof msg, "nghttp2 ended the session (%s)%s%s.",
		    nghttp2_http2_strerror(fr->goaway.error_code),
		    h->h_ngmsg[0] != '\0' ? ": " : "", h->h_ngmsg);
		h2s_log(h, 0, h2s_goaway_code(h, fr->goaway.error_code), msg,
		    NULL);
		h->h_flags |= H2S_F_NGDONE;
		h2s_close_code(h, fr->goaway.error_code, msg);
		break;
	case NGHTTP2_RST_STREAM:
		if (h->h_state >= H2S_S_CLOSING ||
		    (st != NULL && (st->st_flags & ST_F_OURRST)))
			break;
		if (fr->rst_stream.error_code == NGHTTP2_REFUSED_STREAM) {
			if (h->h_state == H2S_S_OPEN)
				h2s_log_id(h, "h2_too_many_streams",
				    "The client opened more streams than "
				    "SETTINGS_MAX_CONCURRENT_STREAMS.",
				    fr->hd.stream_id);
			else
				break; /* after our GOAWAY: not its fault */
		} else {
			snprintf(msg, sizeof msg, "Stream reset: %s%s%s.",
			    nghttp2_http2_strerror(fr->rst_stream.error_code),
			    h->h_ngmsg[0] != '\0' ? ": " : "", h->h_ngmsg);
			h2s_log_id(h, "h2_stream_error", msg, fr->hd.stream_id);
		}
		if (h->h_state < H2S_S_CLOSING)
			(void)h2s_rst_count(h);
		break;
	case NGHTTP2_HEADERS:
	case NGHTTP2_DATA:
		if (st == NULL || !(fr->hd.flags & NGHTTP2_FLAG_END_STREAM))
			break;
		st->st_flags |= ST_F_OUT_DONE;
		if ((st->st_flags & ST_F_CLOSED) ||
		    nghttp2_session_get_stream_remote_close(ng, st->st_id) != 0)
			break;
		if (h2s_stream_discards(st)) {
			st->st_flags |= ST_F_DISCARD;
			tq_timer_set(h->h_tq, &st->st_timer, H2S_DISCARD_MS);
		} else
			h2s_stream_reset(st, NGHTTP2_NO_ERROR);
		break;
	default:
		break;
	}
	h->h_ngerr = 0;
	h->h_ngmsg[0] = '\0';
	return (0);
}

/* What nghttp2 says went wrong, kept for the frame that follows. */
static int
h2s_error_cb(nghttp2_session *ng, int lib_error_code, const char *msg,
    size_t len, void *arg)
{
	struct h2s *h = arg;

	(void)ng;
	h->h_ngerr = lib_error_code;
	if (len >= sizeof h->h_ngmsg)
		len = sizeof h->h_ngmsg - 1;
	memcpy(h->h_ngmsg, msg, len);
	h->h_ngmsg[len] = '\0';
	log_debug("%s %llu %s: h2: %s", h->h_conf->hc_name,
	    (unsigned long long)h->h_id, h->h_peer, h->h_ngmsg);
	return (0);
}

/*
 * Frame bytes out: into the transport's output while it is under its
 * mark (closing, what is left goes regardless, once).
 */
static ssize_t
h2s_send_cb(nghttp2_session *ng, const uint8_t *data, size_t len, int flags,
    void *arg)
{
	struct h2s *h = arg;

	(void)ng;
	(void)flags;
	if (h->h_state < H2S_S_CLOSING && h2s_out_blocked(h))
		return (NGHTTP2_ERR_WOULDBLOCK);
	evbuffer_add(h->h_x->hx_out, data, len);
	return ((ssize_t)len);
}

/* Run an HTTP/2 server on transport x, which it owns from now on. */
struct h2s *
h2s_new(struct event_base *base, struct h1x *x, const struct h2s_conf *conf,
    const struct h2s_hooks *hooks, void *arg, uint64_t id, const char *peer)
{
	nghttp2_session_callbacks *cb;
	nghttp2_option *opt;
	nghttp2_settings_entry iv[6];
	struct h2s *h;
	size_t n = 0;

	h = xcalloc(1, sizeof *h);
	h->h_x = x;
	h->h_conf = conf;
	h->h_hooks = hooks;
	h->h_arg = arg;
	h->h_id = id;
	h->h_peer = peer;
	h->h_state = H2S_S_OPEN;
	TAILQ_INIT(&h->h_streams);
	TAILQ_INIT(&h->h_reap);
	h->h_tq = tq_get(base);
	tq_timer_init(&h->h_timer, h2s_timer_cb, h);
	tq_timer_init(&h->h_htimer, h2s_htimer_cb, h);
	h->h_kick = event_new(base, -1, 0, h2s_kick_cb, h);

	nghttp2_session_callbacks_new(&cb);
	nghttp2_session_callbacks_set_send_callback(cb, h2s_send_cb);
	nghttp2_session_callbacks_set_send_data_callback(cb, h2s_send_data_cb);
	nghttp2_session_callbacks_set_on_begin_headers_callback(
	    cb, h2s_begin_headers_cb);
	nghttp2_session_callbacks_set_on_header_callback2(cb, h2s_header_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(
	    cb, h2s_frame_recv_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
	    cb, h2s_data_cb);
	nghttp2_session_callbacks_set_on_begin_frame_callback(
	    cb, h2s_begin_frame_cb);
	nghttp2_session_callbacks_set_on_stream_close_callback(
	    cb, h2s_stream_close_cb);
	nghttp2_session_callbacks_set_on_frame_send_callback(
	    cb, h2s_frame_send_cb);
	nghttp2_session_callbacks_set_error_callback2(cb, h2s_error_cb);
	nghttp2_option_new(&opt);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	nghttp2_option_set_no_closed_streams(opt, 1);
	nghttp2_option_set_max_outbound_ack(opt, H2S_MAX_OUTBOUND_ACK);
	nghttp2_option_set_max_settings(opt, H2S_MAX_SETTINGS);
	nghttp2_option_set_max_continuations(opt, H2S_MAX_CONTINUATIONS);
	nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
	/* nghttp2's own, behind ours (h2s_rst_count), which counts more. */
	nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33);
	nghttp2_session_server_new2(&h->h_ng, cb, h, opt);
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cb);

	iv[n].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
	iv[n++].value = h2s_max_streams(h);
	iv[n].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
	iv[n++].value = conf->hc_stream_window != 0 ? conf->hc_stream_window
						    : H2S_STREAM_WINDOW;
	iv[n].settings_id = NGHTTP2_SETTINGS_HEADER_TABLE_SIZE;
	iv[n++].value = 4096;
	if (conf->hc_limits != NULL && conf->hc_limits->max_head != 0) {
		iv[n].settings_id = NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE;
		iv[n++].value = (uint32_t)conf->hc_limits->max_head;
	}
	iv[n].settings_id = NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES;
	iv[n++].value = 1;
	if (conf->hc_flags & H2S_C_CONNECT_PROTOCOL) {
		iv[n].settings_id = NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL;
		iv[n++].value = 1;
	}
	nghttp2_submit_settings(h->h_ng, NGHTTP2_FLAG_NONE, iv, n);
	nghttp2_session_set_local_window_size(h->h_ng, NGHTTP2_FLAG_NONE, 0,
	    conf->hc_conn_window != 0 ? (int32_t)conf->hc_conn_window
				      : H2S_CONN_WINDOW);

	x->hx_cb_read = h2s_read_cb;
	x->hx_cb_write = h2s_write_cb;
	x->hx_cb_event = h2s_event_cb;
	x->hx_cb_arg = h;
	if (conf->hc_write_ms != 0)
		x->hx_ops->xo_write_timeout(x, conf->hc_write_ms);
	if (conf->hc_head_ms != 0)
		tq_timer_set(h->h_tq, &h->h_htimer, conf->hc_head_ms);
	if (conf->hc_idle_ms != 0)
		tq_timer_set(h->h_tq, &h->h_timer, conf->hc_idle_ms);
	x->hx_ops->xo_read(x, 1);
	h2s_kick(h); /* our SETTINGS */
	return (h);
}

/* The owner's pointer for the stream's hooks. */
void
h2s_stream_set_arg(struct h2s_stream *st, void *sarg)
{
	st->st_arg = sarg;
}

/* The sink the stream's response goes through. */
struct sink *
h2s_stream_sink(struct h2s_stream *st)
{
	return (&st->st_sink);
}

/* The session a stream belongs to. */
struct h2s *
h2s_stream_session(struct h2s_stream *st)
{
	return (st->st_h);
}

/* The stream's id. */
uint32_t
h2s_stream_id(const struct h2s_stream *st)
{
	return ((uint32_t)st->st_id);
}

/*
 * The stream's own idle timeout from now on (an RFC 8441 WebSocket's is
 * the upgraded connections' one), in place of hc_stream_idle_ms.
 */
void
h2s_stream_idle(struct h2s_stream *st, uint64_t ms)
{
	st->st_idle_ms = ms;
	h2s_stream_touch(st);
}

/* When the stream's HEADERS began (monotonic microseconds). */
uint64_t
h2s_stream_started_us(const struct h2s_stream *st)
{
	return (st->st_started_us);
}

/*
 * Move up to max request body bytes into dst; their window goes back to
 * the peer now.  Returns the bytes moved (0: none waiting, or the end:
 * h2s_stream_body_done), or -1 when the stream or session is gone.
 */
ssize_t
h2s_stream_body_read(struct h2s_stream *st, struct evbuffer *dst, size_t max)
{
	struct h2s *h = st->st_h;
	size_t n = evbuffer_get_length(st->st_in);

	if (h->h_state >= H2S_S_CLOSING || (st->st_flags & ST_F_CLOSED))
		return (-1);
	if (n > max)
		n = max;
	if (n > H2S_READ_MAX)
		n = H2S_READ_MAX;
	if (n == 0)
		return (0);
	evb_take(st->st_in, dst, n);
	nghttp2_session_consume(h->h_ng, st->st_id, n);
	h2s_stream_touch(st);
	h2s_kick(h);
	return ((ssize_t)n);
}

/* END_STREAM seen, and all the body read. */
int
h2s_stream_body_done(const struct h2s_stream *st)
{
	return ((st->st_flags & ST_F_IN_END) &&
	    evbuffer_get_length(st->st_in) == 0);
}

/*
 * The owner is done with the stream (after sink_end or sink_abort): no
 * more hooks.  A response it did not end is reset; the engine frees the
 * stream once nghttp2 has closed it.
 */
void
h2s_stream_release(struct h2s_stream *st)
{
	struct h2s *h = st->st_h;

	if (!(st->st_flags & ST_F_OWNED))
		return;
	st->st_flags &= ~ST_F_OWNED;
	if (h->h_state >= H2S_S_CLOSING)
		return;
	h2s_stream_drop_in(st);
	if (st->st_flags & ST_F_CLOSED) {
		h2s_stream_reap(st);
		return;
	}
	if (!(st->st_flags & (ST_F_END | ST_F_ABORT)))
		h2s_stream_reset(st, NGHTTP2_CANCEL);
	h2s_kick(h);
}
