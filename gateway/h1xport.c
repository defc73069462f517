/*
 * The byte streams the HTTP/1 engine runs over (struct h1x in gw.h).
 *
 * A stream transport: the sockets, on lib/stream.c (plain or TLS), which
 * writes at the end of the loop pass and stops reading at the input's
 * high watermark by itself.  An in-memory transport: two evbuffers on a
 * real event base and no socket, for the unit tests and the fuzz harness;
 * it calls back from the loop as a bufferevent does, and reads again on
 * every pass while its input is full and reading is on, as libevent 2.1
 * does, so an engine that forgets the read-stop rule spins visibly.
 */
#include <sys/socket.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <openssl/ssl.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "stream.h"
#include "tls.h"

/* A transport on a stream (lib/stream.h). */
struct h1x_stream {
	struct h1x xs_x;
	struct stream *xs_s;
	int xs_flags;
#define H1X_STREAM_F_LENT 0x01 /* the socket is lent to splice(2) */
#define H1X_STREAM_F_TLS_UP 0x02 /* the TLS handshake completed */
};

/*
 * Take the socket back from splice(2): the engine's next use of the
 * transport after h1x_stream_fd means the move is over.
 */
static void
h1x_stream_unlend(struct h1x_stream *xs)
{
	if (!(xs->xs_flags & H1X_STREAM_F_LENT))
		return;
	xs->xs_flags &= ~H1X_STREAM_F_LENT;
	stream_unlend(xs->xs_s);
}

/* Bytes from the peer. */
static void
h1x_stream_read_cb(struct stream *s, void *arg)
{
	struct h1x_stream *xs = arg;

	(void)s;
	xs->xs_x.hx_cb_read(xs->xs_x.hx_cb_arg);
}

/* The output drained to its low watermark. */
static void
h1x_stream_write_cb(struct stream *s, void *arg)
{
	struct h1x_stream *xs = arg;

	(void)s;
	xs->xs_x.hx_cb_write(xs->xs_x.hx_cb_arg);
}

/*
 * The end of the peer's stream, an error (with OpenSSL's words for a TLS
 * one; a handshake that fails is logged), or a timeout; the TLS
 * handshake's end is noted.
 */
static void
h1x_stream_event_cb(struct stream *s, short what, void *arg)
{
	struct h1x_stream *xs = arg;
	struct h1x *x = &xs->xs_x;
	char why[160], tlserr[128];
	unsigned long e;

	if (what & STREAM_EV_CONNECTED) {
		xs->xs_flags |= H1X_STREAM_F_TLS_UP;
		return;
	}
	if ((what & STREAM_EV_ERROR) && (e = stream_tls_error(s)) != 0) {
		tls_error_string(e, tlserr, sizeof tlserr);
		if (!(xs->xs_flags & H1X_STREAM_F_TLS_UP)) {
			x->hx_cb_event(x->hx_cb_arg, H1X_EV_TLS_FAILED, tlserr);
			return;
		}
		snprintf(why, sizeof why, "TLS error: %s", tlserr);
		x->hx_cb_event(x->hx_cb_arg, H1X_EV_ERROR, why);
	} else if (what & STREAM_EV_ERROR) {
		snprintf(why, sizeof why, "client error: %s",
		    strerror(stream_errno(s)));
		x->hx_cb_event(x->hx_cb_arg, H1X_EV_ERROR, why);
	} else if (what & STREAM_EV_TIMEOUT)
		x->hx_cb_event(x->hx_cb_arg, H1X_EV_ERROR,
		    (what & STREAM_EV_READING)
			? "client sent nothing for the idle timeout"
			: H1X_WHY_WRITE_TIMEOUT);
	else if (what & STREAM_EV_EOF)
		x->hx_cb_event(x->hx_cb_arg, H1X_EV_EOF, NULL);
}

/* Turn reading on or off. */
static void
h1x_stream_read(struct h1x *x, int on)
{
	struct h1x_stream *xs = (struct h1x_stream *)x;

	h1x_stream_unlend(xs);
	if (on)
		stream_enable(xs->xs_s, EV_READ);
	else
		stream_disable(xs->xs_s, EV_READ);
}

/*
 * The input cannot move on: the stream stops reading by itself at its
 * high watermark, and reads again once the engine drains it below, so
 * there is nothing to do (no loop spin to guard against).
 */
static int
h1x_stream_hold(struct h1x *x)
{
	(void)x;
	return (0);
}

/* The input may move on: the stream saw it drain (h1x_stream_hold). */
static void
h1x_stream_unhold(struct h1x *x)
{
	h1x_stream_unlend((struct h1x_stream *)x);
}

/* The output goes at the end of the loop pass, with every stream's. */
static void
h1x_stream_flush(struct h1x *x)
{
	h1x_stream_unlend((struct h1x_stream *)x);
}

/* Shut our side once the output has gone; not under TLS records (-1). */
static int
h1x_stream_shutdown(struct h1x *x)
{
	struct h1x_stream *xs = (struct h1x_stream *)x;

	h1x_stream_unlend(xs);
	if (stream_ssl(xs->xs_s) != NULL)
		return (-1);
	return (stream_shutdown_write(xs->xs_s));
}

/*
 * Has the peer sent nothing more than what was read?  One peek, when the
 * engine is about to close (no FIONREAD on the data path).
 */
static int
h1x_stream_quiet(struct h1x *x)
{
	struct h1x_stream *xs = (struct h1x_stream *)x;
	char b;
	ssize_t n;
	int fd;

	if (evbuffer_get_length(x->hx_in) != 0 ||
	    stream_ssl(xs->xs_s) != NULL || (fd = stream_getfd(xs->xs_s)) == -1)
		return (0);
	n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return (
	    n == 0 || (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)));
}

/* Free the transport and hand its stream on, callbacks cleared. */
static void *
h1x_stream_detach(struct h1x *x)
{
	struct h1x_stream *xs = (struct h1x_stream *)x;
	struct stream *s = xs->xs_s;

	h1x_stream_unlend(xs);
	stream_setcb(s, NULL, NULL, NULL, NULL);
	stream_set_timeouts(s, NULL, NULL);
	stream_setwatermark(s, EV_READ | EV_WRITE, 0, 0);
	free(xs);
	return (s);
}

/* Free the transport and its connection. */
static void
h1x_stream_free(struct h1x *x)
{
	struct h1x_stream *xs = (struct h1x_stream *)x;

	stream_free(xs->xs_s);
	free(xs);
}

/* Keep at most high bytes of input before reading stops. */
static void
h1x_stream_read_high(struct h1x *x, size_t high)
{
	stream_setwatermark(((struct h1x_stream *)x)->xs_s, EV_READ, 0, high);
}

/*
 * Give up when output waits ms without a byte of it written (the
 * stream's write timeout: it runs only while output waits); 0: never.
 */
static void
h1x_stream_write_timeout(struct h1x *x, uint64_t ms)
{
	struct h1x_stream *xs = (struct h1x_stream *)x;
	struct timeval tv;

	if (ms == 0) {
		stream_set_timeouts(xs->xs_s, NULL, NULL);
		return;
	}
	clock_msec_to_tv(ms, &tv);
	stream_set_timeouts(xs->xs_s, NULL, &tv);
}

/*
 * Write what is queued now, then lend the plain socket to splice(2)
 * (stream_lend): the stream does no I/O on it until the engine uses the
 * transport again.  -1 for TLS, or while output waits.
 */
static int
h1x_stream_fd(struct h1x *x)
{
	struct h1x_stream *xs = (struct h1x_stream *)x;
	int fd;

	if (xs->xs_flags & H1X_STREAM_F_LENT)
		return (stream_getfd(xs->xs_s));
	if ((fd = stream_lend(xs->xs_s)) == -1)
		return (-1);
	xs->xs_flags |= H1X_STREAM_F_LENT;
	return (fd);
}

/*
 * No xo_write_now: a TLS stream writes its output at the end of the pass
 * in records of up to 16 KiB, so a small head and body go as one record
 * in one write(2) anyway.
 */
static const struct h1x_ops h1x_stream_ops = {
	.xo_read = h1x_stream_read,
	.xo_hold = h1x_stream_hold,
	.xo_unhold = h1x_stream_unhold,
	.xo_flush = h1x_stream_flush,
	.xo_shutdown = h1x_stream_shutdown,
	.xo_quiet = h1x_stream_quiet,
	.xo_detach = h1x_stream_detach,
	.xo_free = h1x_stream_free,
	.xo_read_high = h1x_stream_read_high,
	.xo_write_timeout = h1x_stream_write_timeout,
	.xo_fd = h1x_stream_fd,
};

/*
 * A transport on stream s, which it owns from now on: reading stops with
 * in_high bytes in the input (a head, or a body the owner does not take
 * yet) and starts again by itself as the input drains, and the user
 * hears when the output is at most out_low.  Reading starts when the
 * user turns it on.
 */
struct h1x *
h1x_stream_new(struct stream *s, size_t in_high, size_t out_low)
{
	struct h1x_stream *xs;

	xs = xcalloc(1, sizeof *xs);
	xs->xs_s = s;
	xs->xs_x.hx_ops = &h1x_stream_ops;
	xs->xs_x.hx_in = stream_input(s);
	xs->xs_x.hx_out = stream_output(s);
	xs->xs_x.hx_out_low = out_low;
	/* Made after the handshake (conn.c waits for ALPN): TLS is up. */
	if (stream_ssl(s) != NULL && SSL_is_init_finished(stream_ssl(s)))
		xs->xs_flags |= H1X_STREAM_F_TLS_UP;
	stream_setcb(s, h1x_stream_read_cb, h1x_stream_write_cb,
	    h1x_stream_event_cb, xs);
	stream_setwatermark(s, EV_READ, 0, in_high);
	stream_setwatermark(s, EV_WRITE, out_low, 0);
	stream_enable(s, EV_WRITE);
	return (&xs->xs_x);
}

/*
 * The in-memory transport.  The peer (a test) sends into mp_wire, which
 * the transport reads into its input while reading is on and the input is
 * under in_high, and receives from the output.
 */
struct h1x_memx {
	struct h1x mx_x;
	struct h1x_mem *mx_peer;
	struct event *mx_pump; /* callbacks, from the loop */
	struct event *mx_wtimer; /* the write timeout, while output waits */
	uint64_t mx_wt_ms; /* ... or 0 */
	size_t mx_in_high;
	int mx_reading;
	int mx_wrote; /* output taken since the last write callback */
};

/* The peer's end, the test's: it outlives the transport. */
struct h1x_mem {
	struct h1x_memx *mp_x; /* NULL once freed */
	struct evbuffer *mp_wire; /* sent, not read by the transport yet */
	struct evbuffer *mp_auto; /* receive everything into it, or NULL */
	unsigned mp_reads; /* read callbacks made */
	int mp_state; /* H1X_MEM_* */
	int mp_eof; /* the peer ended its stream */
	int mp_eof_told;
};

/*
 * Run the pump on the loop's next pass: a timer, so that a pump that
 * keeps calling back (a spin) takes one pass each time, as a socket's
 * would, instead of running forever inside one.
 */
static void
h1x_mem_kick(struct h1x_memx *mx)
{
	struct timeval tv = { 0, 0 };

	if (mx != NULL)
		evtimer_add(mx->mx_pump, &tv);
}

/*
 * The write timeout: it runs while output waits, from when output came
 * (or, with restart, from now: the peer took some), as libevent's does.
 */
static void
h1x_mem_wt(struct h1x_memx *mx, int restart)
{
	struct timeval tv;

	if (mx->mx_wt_ms == 0 || evbuffer_get_length(mx->mx_x.hx_out) == 0) {
		evtimer_del(mx->mx_wtimer);
		return;
	}
	if (!restart && evtimer_pending(mx->mx_wtimer, NULL))
		return;
	clock_msec_to_tv(mx->mx_wt_ms, &tv);
	evtimer_add(mx->mx_wtimer, &tv);
}

/* The peer took nothing of the output for the write timeout. */
static void
h1x_mem_wt_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h1x_memx *mx = arg;
	struct h1x *x = &mx->mx_x;

	(void)fd;
	(void)what;
	if (evbuffer_get_length(x->hx_out) != 0)
		x->hx_cb_event(
		    x->hx_cb_arg, H1X_EV_ERROR, H1X_WHY_WRITE_TIMEOUT);
}

/*
 * One pass: read what the wire holds (up to in_high), call back for
 * input, for a drained output, for the end of the peer's stream.  A full
 * input with reading on is read again on the next pass, as libevent 2.1
 * does.  The user may free the transport in any callback (from the loop
 * later), so each is the last thing the pass does with what it checked.
 */
static void
h1x_mem_pump_cb(evutil_socket_t fd, short what, void *arg)
{
	struct h1x_memx *mx = arg;
	struct h1x_mem *mp = mx->mx_peer;
	struct h1x *x = &mx->mx_x;
	size_t inlen, n;
	int call = 0;

	(void)fd;
	(void)what;
	if (mp->mp_auto != NULL && evbuffer_get_length(x->hx_out) > 0) {
		evbuffer_add_buffer(mp->mp_auto, x->hx_out);
		mx->mx_wrote = 1;
		h1x_mem_wt(mx, 1);
	}
	if (mx->mx_reading) {
		inlen = evbuffer_get_length(x->hx_in);
		n = evbuffer_get_length(mp->mp_wire);
		if (mx->mx_in_high != 0 && inlen + n > mx->mx_in_high)
			n = inlen >= mx->mx_in_high ? 0
						    : mx->mx_in_high - inlen;
		if (n > 0) {
			evbuffer_remove_buffer(mp->mp_wire, x->hx_in, n);
			call = 1;
		} else if (mx->mx_in_high != 0 && inlen >= mx->mx_in_high)
			call = 1; /* libevent 2.1 calls again: a spin */
	}
	if (call) {
		mp->mp_reads++;
		h1x_mem_kick(mx);
		x->hx_cb_read(x->hx_cb_arg);
		return;
	}
	if (mx->mx_wrote && evbuffer_get_length(x->hx_out) <= x->hx_out_low) {
		mx->mx_wrote = 0;
		h1x_mem_kick(mx);
		x->hx_cb_write(x->hx_cb_arg);
		return;
	}
	if (mx->mx_reading && mp->mp_eof && !mp->mp_eof_told &&
	    evbuffer_get_length(mp->mp_wire) == 0) {
		mp->mp_eof_told = 1;
		mx->mx_reading = 0;
		mp->mp_state &= ~H1X_MEM_READING;
		x->hx_cb_event(x->hx_cb_arg, H1X_EV_EOF, NULL);
	}
}

/* Turn reading on or off. */
static void
h1x_mem_read(struct h1x *x, int on)
{
	struct h1x_memx *mx = (struct h1x_memx *)x;

	mx->mx_reading = on;
	if (on) {
		mx->mx_peer->mp_state |= H1X_MEM_READING;
		h1x_mem_kick(mx);
	} else
		mx->mx_peer->mp_state &= ~H1X_MEM_READING;
}

/* Stop reading when the input is full; 1 when it stopped. */
static int
h1x_mem_hold(struct h1x *x)
{
	struct h1x_memx *mx = (struct h1x_memx *)x;

	if (!mx->mx_reading || mx->mx_in_high == 0 ||
	    evbuffer_get_length(x->hx_in) < mx->mx_in_high)
		return (0);
	h1x_mem_read(x, 0);
	return (1);
}

/* Read again: the input may move on. */
static void
h1x_mem_unhold(struct h1x *x)
{
	struct h1x_memx *mx = (struct h1x_memx *)x;

	if (!mx->mx_reading && !mx->mx_peer->mp_eof_told)
		h1x_mem_read(x, 1);
}

/* The peer receives when it asks (or at once with h1x_mem_autorecv). */
static void
h1x_mem_flush(struct h1x *x)
{
	struct h1x_memx *mx = (struct h1x_memx *)x;

	if (mx->mx_peer->mp_auto != NULL)
		h1x_mem_kick(mx);
	h1x_mem_wt(mx, 0);
}

/* Our side ends its stream. */
static int
h1x_mem_shutdown(struct h1x *x)
{
	((struct h1x_memx *)x)->mx_peer->mp_state |= H1X_MEM_SHUT;
	return (0);
}

/* Has the peer sent nothing more? */
static int
h1x_mem_quiet(struct h1x *x)
{
	struct h1x_memx *mx = (struct h1x_memx *)x;

	return (evbuffer_get_length(x->hx_in) == 0 &&
	    evbuffer_get_length(mx->mx_peer->mp_wire) == 0);
}

/* Free the transport; the peer's end stays for the test to look at. */
static void
h1x_mem_gone(struct h1x *x, int state)
{
	struct h1x_memx *mx = (struct h1x_memx *)x;
	struct h1x_mem *mp = mx->mx_peer;

	if (mp->mp_auto != NULL)
		evbuffer_add_buffer(mp->mp_auto, x->hx_out);
	mp->mp_state = (mp->mp_state & ~H1X_MEM_READING) | state;
	mp->mp_x = NULL;
	event_free(mx->mx_pump);
	event_free(mx->mx_wtimer);
	evbuffer_free(x->hx_in);
	evbuffer_free(x->hx_out);
	free(mx);
}

/* Free, handing the connection (the peer's end) on. */
static void *
h1x_mem_detach(struct h1x *x)
{
	struct h1x_mem *mp = ((struct h1x_memx *)x)->mx_peer;

	h1x_mem_gone(x, H1X_MEM_FREED | H1X_MEM_DETACHED);
	return (mp);
}

/* Free with the connection. */
static void
h1x_mem_xfree(struct h1x *x)
{
	h1x_mem_gone(x, H1X_MEM_FREED);
}

/* Read at most high bytes into the input (0: no limit). */
static void
h1x_mem_read_high(struct h1x *x, size_t high)
{
	struct h1x_memx *mx = (struct h1x_memx *)x;

	mx->mx_in_high = high;
	if (mx->mx_reading)
		h1x_mem_kick(mx);
}

/* Give up when output waits ms without the peer taking any; 0: never. */
static void
h1x_mem_write_timeout(struct h1x *x, uint64_t ms)
{
	struct h1x_memx *mx = (struct h1x_memx *)x;

	mx->mx_wt_ms = ms;
	h1x_mem_wt(mx, 1);
}

static const struct h1x_ops h1x_mem_ops = {
	.xo_read = h1x_mem_read,
	.xo_hold = h1x_mem_hold,
	.xo_unhold = h1x_mem_unhold,
	.xo_flush = h1x_mem_flush,
	.xo_shutdown = h1x_mem_shutdown,
	.xo_quiet = h1x_mem_quiet,
	.xo_detach = h1x_mem_detach,
	.xo_free = h1x_mem_xfree,
	.xo_read_high = h1x_mem_read_high,
	.xo_write_timeout = h1x_mem_write_timeout,
};

/*
 * An in-memory transport on base, reading at most in_high into its input
 * (0: no limit), calling back when its output is at most out_low.  *peer
 * is the other end, for the caller to free with h1x_mem_free after the
 * transport is gone.
 */
struct h1x *
h1x_mem_new(struct event_base *base, size_t in_high, size_t out_low,
    struct h1x_mem **peer)
{
	struct h1x_memx *mx;
	struct h1x_mem *mp;

	mx = xcalloc(1, sizeof *mx);
	mp = xcalloc(1, sizeof *mp);
	mp->mp_x = mx;
	mp->mp_wire = evbuffer_new();
	mx->mx_peer = mp;
	mx->mx_in_high = in_high;
	mx->mx_pump = event_new(base, -1, 0, h1x_mem_pump_cb, mx);
	mx->mx_wtimer = evtimer_new(base, h1x_mem_wt_cb, mx);
	mx->mx_x.hx_ops = &h1x_mem_ops;
	mx->mx_x.hx_in = evbuffer_new();
	mx->mx_x.hx_out = evbuffer_new();
	mx->mx_x.hx_out_low = out_low;
	*peer = mp;
	return (&mx->mx_x);
}

/* The peer sends n bytes. */
void
h1x_mem_send(struct h1x_mem *mp, const void *p, size_t n)
{
	evbuffer_add(mp->mp_wire, p, n);
	if (mp->mp_x != NULL && mp->mp_x->mx_reading)
		h1x_mem_kick(mp->mp_x);
}

/* The peer ends its stream after what it sent. */
void
h1x_mem_send_eof(struct h1x_mem *mp)
{
	mp->mp_eof = 1;
	if (mp->mp_x != NULL)
		h1x_mem_kick(mp->mp_x);
}

/* The peer receives up to max bytes into dst; returns how many. */
size_t
h1x_mem_recv(struct h1x_mem *mp, struct evbuffer *dst, size_t max)
{
	struct h1x_memx *mx = mp->mp_x;
	size_t n;

	if (mx == NULL)
		return (0);
	n = evbuffer_get_length(mx->mx_x.hx_out);
	if (n > max)
		n = max;
	if (n == 0)
		return (0);
	evbuffer_remove_buffer(mx->mx_x.hx_out, dst, n);
	mx->mx_wrote = 1;
	h1x_mem_wt(mx, 1);
	h1x_mem_kick(mx);
	return (n);
}

/* From now on the peer receives everything into dst, as it is written. */
void
h1x_mem_autorecv(struct h1x_mem *mp, struct evbuffer *dst)
{
	mp->mp_auto = dst;
	h1x_mem_kick(mp->mp_x);
}

/* Bytes sent and not read by the transport yet (its socket buffer). */
size_t
h1x_mem_waiting(const struct h1x_mem *mp)
{
	return (evbuffer_get_length(mp->mp_wire));
}

/* Read callbacks made so far. */
unsigned
h1x_mem_reads(const struct h1x_mem *mp)
{
	return (mp->mp_reads);
}

/* H1X_MEM_* bits. */
int
h1x_mem_state(const struct h1x_mem *mp)
{
	return (mp->mp_state);
}

/* Free the peer's end, once the transport is gone (before, nothing). */
void
h1x_mem_free(struct h1x_mem *mp)
{
	if (mp == NULL || mp->mp_x != NULL)
		return;
	evbuffer_free(mp->mp_wire);
	free(mp);
}
