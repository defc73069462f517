/*
 * A byte stream over a socket, plain or TLS; see stream.h.
 *
 * Three rules hold the design together:
 *
 * - I/O functions (stream_read, stream_write, stream_handshake ...) never
 *   call the owner.  They leave what the owner must hear in s_notify and
 *   s_pending, and the loop's entry points (the read and write events and
 *   the end-of-pass queue) tell it afterwards, in stream_deliver.  So no
 *   callback runs inside a stream_* call, and an entry point holds the
 *   stream (s_depth) while it runs: stream_free inside a callback only
 *   marks it, and the last release frees it.
 * - Which events are added follows from the state alone (stream_update):
 *   every change of state or flags calls it, and it adds or deletes only
 *   what changed (with the epoll changelist an add and a delete in one
 *   pass cost no system call).
 * - Work for the end of the pass (writes, a read OpenSSL may hold bytes
 *   for, a handshake to start, a callback to run) goes on the loop's
 *   queue, one per event base and thread, run from one event made active
 *   by the first stream queued in a pass: after every event the pass's
 *   epoll_wait found.  The peers then wake once per pass, not once per
 *   write (docs/performance.md, "Writes at the end of a loop pass").
 */
#include <sys/types.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "stream.h"
#include "stream_int.h"
#include "tls.h"

/* The end-of-pass queue of one event base on this thread. */
struct stream_q {
	struct event_base *q_base;
	struct event *q_ev;
	TAILQ_HEAD(, stream) q_list;
	unsigned int q_refs; /* streams on this base */
	unsigned int q_gen; /* runs so far */
	int q_running;
	struct stream_q *q_next;
};

static const char *const stream_state_names[] = { "new", "connecting",
	"handshake", "open", "failed" };

static __thread struct stream_q *stream_qs;
static __thread unsigned char stream_scratch[64 * 1024];

static void stream_q_run_cb(evutil_socket_t, short, void *);
static void stream_destroy(struct stream *);
static void stream_wev_new(struct stream *);
static void
stream_in_cb(struct evbuffer *, const struct evbuffer_cb_info *, void *);

/* The queue of base on this thread, with a reference for a new stream. */
static struct stream_q *
stream_q_get(struct event_base *base)
{
	struct stream_q *q;

	for (q = stream_qs; q != NULL; q = q->q_next) {
		if (q->q_base == base) {
			q->q_refs++;
			return (q);
		}
	}
	q = xcalloc(1, sizeof *q);
	q->q_base = base;
	TAILQ_INIT(&q->q_list);
	if ((q->q_ev = event_new(base, -1, 0, stream_q_run_cb, q)) == NULL)
		abort(); /* allocation failure, as with xmalloc */
	q->q_refs = 1;
	q->q_next = stream_qs;
	stream_qs = q;
	return (q);
}

/* Drop a stream's reference; the last one frees the queue (after its run). */
static void
stream_q_put(struct stream_q *q)
{
	struct stream_q **qp;

	if (--q->q_refs != 0)
		return;
	for (qp = &stream_qs; *qp != NULL; qp = &(*qp)->q_next) {
		if (*qp == q) {
			*qp = q->q_next;
			break;
		}
	}
	if (q->q_running)
		return; /* stream_q_run_cb frees it */
	event_free(q->q_ev);
	free(q);
}

/* Put work for the end of this pass on s's queue. */
static void
stream_queue(struct stream *s, unsigned char work)
{
	struct stream_q *q = s->s_q;

	if (s->s_flags & STREAM_F_FREED)
		return;
	if (s->s_work == 0) {
		if (TAILQ_EMPTY(&q->q_list) && !q->q_running)
			event_active(q->q_ev, 0, 0);
		TAILQ_INSERT_TAIL(&q->q_list, s, s_qentry);
		s->s_qgen = q->q_gen;
	}
	s->s_work |= work;
}

/* Take s off its queue, work and all. */
static void
stream_unqueue(struct stream *s)
{
	if (s->s_work == 0)
		return;
	TAILQ_REMOVE(&s->s_q->q_list, s, s_qentry);
	s->s_work = 0;
}

/* An entry point is done with s: free it if its owner asked meanwhile. */
static void
stream_release(struct stream *s)
{
	if (--s->s_depth == 0 && (s->s_flags & STREAM_F_FREED))
		stream_destroy(s);
}

/*
 * Tell the owner what the I/O left for it: connected first, then the
 * input, then the output drained, then the end, an error or a timeout.
 * Stops when the owner frees s.
 */
static void
stream_deliver(struct stream *s)
{
	short ev;

	while (!(s->s_flags & STREAM_F_FREED)) {
		if (s->s_pending & STREAM_EV_CONNECTED) {
			s->s_pending &= ~STREAM_EV_CONNECTED;
			if (s->s_eventcb != NULL)
				s->s_eventcb(s, STREAM_EV_CONNECTED, s->s_arg);
		} else if (s->s_notify & STREAM_N_READ) {
			ev = (s->s_notify & STREAM_N_READ_ANY) != 0;
			s->s_notify &= ~(STREAM_N_READ | STREAM_N_READ_ANY);
			if (s->s_readcb != NULL &&
			    evbuffer_get_length(s->s_in) != 0 &&
			    (ev || evbuffer_get_length(s->s_in) >= s->s_rlo))
				s->s_readcb(s, s->s_arg);
		} else if (s->s_notify & STREAM_N_WRITE) {
			s->s_notify &= ~STREAM_N_WRITE;
			if (s->s_writecb != NULL)
				s->s_writecb(s, s->s_arg);
		} else if (s->s_pending != 0) {
			ev = s->s_pending;
			s->s_pending = 0;
			if (s->s_eventcb != NULL)
				s->s_eventcb(s, ev, s->s_arg);
		} else
			break;
	}
}

/* Tell the owner, then release s (an entry point's last act). */
static void
stream_deliver_release(struct stream *s)
{
	stream_deliver(s);
	stream_release(s);
}

/*
 * I/O on s failed (or timed out): report ev, stop all I/O.  err is the
 * errno, tlserr the OpenSSL error (0 for none).
 */
void
stream_fail(struct stream *s, short ev, int err, unsigned long tlserr)
{
	s->s_state = STREAM_S_FAILED;
	s->s_errno = err;
	s->s_tlserr = tlserr;
	s->s_pending |= ev;
	s->s_flags &= ~(STREAM_F_WBLOCKED | STREAM_F_HS_READ |
	    STREAM_F_HS_WRITE | STREAM_F_RD_WANTS_W | STREAM_F_WR_WANTS_R);
	stream_update(s);
	/* From an API call, the loop tells the owner. */
	if (s->s_depth == 0)
		stream_queue(s, STREAM_W_EVENT);
}

/*
 * Add ev (with tv) or delete it, when that changes; *on tracks it.
 *
 * A timeout cleared (tv NULL) on an event that stays added is left to run
 * out: event_add with no timeout keeps the one the event had, and a delete
 * and an add in one loop pass cost an epoll_ctl, which was three system
 * calls in seven per proxied request (the engine and the proxy set and clear
 * timeouts on every request).  The callback drops it when it fires
 * (stream_timeout_stale), seconds later and rarely.
 */
static void
stream_event_set(struct event *ev, unsigned char *on, int want,
    const struct timeval *tv, int force)
{
	if (want && (!*on || force)) {
		if (tv != NULL || !*on)
			event_add(ev, tv);
		*on = 1;
	} else if (!want && *on) {
		event_del(ev);
		*on = 0;
	}
}

/* Make the added events match s's state; force re-adds (new timeouts). */
static void
stream_update_force(struct stream *s, int force)
{
	struct timeval rtv, wtv;
	int r = 0, w = 0, f = s->s_flags;

	if (s->s_rev == NULL)
		return;
	if (!(f & (STREAM_F_LENT | STREAM_F_FREED))) {
		switch (s->s_state) {
		case STREAM_S_CONNECTING:
			w = 1;
			break;
		case STREAM_S_HANDSHAKE:
			r = (f & STREAM_F_HS_READ) != 0;
			w = (f & STREAM_F_HS_WRITE) != 0;
			break;
		case STREAM_S_OPEN:
			r = ((s->s_enabled & EV_READ) &&
				!(f & (STREAM_F_FULL | STREAM_F_EOF))) ||
			    (f & STREAM_F_WR_WANTS_R);
			w = ((s->s_enabled & EV_WRITE) &&
				(f & STREAM_F_WBLOCKED)) ||
			    (f & STREAM_F_RD_WANTS_W);
			break;
		default:
			break;
		}
	}
	if (f & STREAM_F_RTV)
		clock_msec_to_tv(s->s_rto_ms, &rtv);
	if (f & STREAM_F_WTV)
		clock_msec_to_tv(s->s_wto_ms, &wtv);
	stream_event_set(
	    s->s_rev, &s->s_ron, r, (f & STREAM_F_RTV) ? &rtv : NULL, force);
	/*
	 * The write event is made the first time a write waits for the
	 * socket (or a connect, a handshake): most writes of a keep-alive
	 * connection go at once, and an idle one then holds no such event.
	 */
	if (w && s->s_wev == NULL)
		stream_wev_new(s);
	if (s->s_wev != NULL)
		stream_event_set(s->s_wev, &s->s_won, w,
		    (f & STREAM_F_WTV) ? &wtv : NULL, force);
}

/* Make the added events match s's state. */
void
stream_update(struct stream *s)
{
	stream_update_force(s, 0);
}

/*
 * The input reached the read high watermark: stop reading until it
 * drains, which the input's callback sees.  The callback is there only
 * while the input is full, so that most streams never hold one.
 */
static void
stream_full(struct stream *s)
{
	s->s_flags |= STREAM_F_FULL;
	if (s->s_incb == NULL &&
	    (s->s_incb = evbuffer_add_cb(s->s_in, stream_in_cb, s)) == NULL)
		abort(); /* allocation failure, as with xmalloc */
	stream_update(s);
}

/*
 * The input may take more again: read on (OpenSSL may hold records).
 * From the input's callback too, which libevent lets remove itself.
 */
static void
stream_unfull(struct stream *s)
{
	s->s_flags &= ~STREAM_F_FULL;
	if (s->s_incb != NULL) {
		evbuffer_remove_cb_entry(s->s_in, s->s_incb);
		s->s_incb = NULL;
	}
	stream_update(s);
	if (s->s_ssl != NULL && s->s_state == STREAM_S_OPEN)
		stream_queue(s, STREAM_W_READ);
}

/* The owner drained the input: below the high watermark it reads again. */
static void
stream_in_cb(
    struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct stream *s = arg;

	if (info->n_deleted == 0 || !(s->s_flags & STREAM_F_FULL))
		return;
	if (s->s_rhi == 0 || evbuffer_get_length(buf) < s->s_rhi)
		stream_unfull(s);
}

/* The owner added output: write it at the end of the pass. */
static void
stream_out_cb(
    struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct stream *s = arg;

	(void)buf;
	if (info->n_added != 0 && !(s->s_work & STREAM_W_WRITE) &&
	    !(s->s_flags & STREAM_F_WBLOCKED) && s->s_state != STREAM_S_FAILED)
		stream_queue(s, STREAM_W_WRITE);
}

/* The end of the stream: the peer closed (dirty: TLS without close_notify). */
void
stream_eof(struct stream *s, int dirty)
{
	s->s_flags |= STREAM_F_EOF | (dirty ? STREAM_F_DIRTY : 0);
	s->s_pending |= STREAM_EV_EOF | STREAM_EV_READING;
	stream_update(s);
}

/* How much a read may take now; 0 marks the input full. */
size_t
stream_read_room(struct stream *s)
{
	size_t len = evbuffer_get_length(s->s_in), room = EVIO_MAX_IO;

	if (s->s_rhi != 0) {
		if (len >= s->s_rhi) {
			stream_full(s);
			return (0);
		}
		if (s->s_rhi - len < room)
			room = s->s_rhi - len;
	}
	return (room);
}

/*
 * One readv of a plain socket, up to room: EVIO_OWN_READ into the input
 * and the rest through the scratch buffer, or all of it into the input
 * when the last read filled what it was offered (a bulk transfer).
 */
static void
stream_read_plain(struct stream *s, size_t room)
{
	struct evbuffer_iovec v[2];
	struct iovec iov[3];
	size_t want = 0, first, got, direct = 0;
	ssize_t r;
	int n, i, niov = 0, used;

	first = room;
	if (!(s->s_flags & STREAM_F_BULK) && first > EVIO_OWN_READ)
		first = EVIO_OWN_READ;
	if ((n = evbuffer_reserve_space(s->s_in, (ev_ssize_t)first, v, 2)) <= 0)
		abort(); /* allocation failure, as with xmalloc */
	for (i = 0; i < n && direct < first; i++) {
		if (v[i].iov_len > first - direct)
			v[i].iov_len = first - direct;
		iov[niov].iov_base = v[i].iov_base;
		iov[niov++].iov_len = v[i].iov_len;
		direct += v[i].iov_len;
	}
	n = niov;
	want = direct;
	if (room > direct) {
		iov[niov].iov_base = stream_scratch;
		iov[niov].iov_len = room - direct < sizeof stream_scratch
		    ? room - direct
		    : sizeof stream_scratch;
		want += iov[niov++].iov_len;
	}
	r = readv(s->s_fd, iov, niov);
	if (r <= 0) {
		evbuffer_commit_space(s->s_in, v, 0);
		if (r == 0)
			stream_eof(s, 0);
		else if (errno != EAGAIN && errno != EWOULDBLOCK &&
		    errno != EINTR)
			stream_fail(
			    s, STREAM_EV_ERROR | STREAM_EV_READING, errno, 0);
		return;
	}
	got = (size_t)r;
	for (i = 0, used = 0; i < n && got != 0; i++, used++) {
		if (v[i].iov_len > got)
			v[i].iov_len = got;
		got -= v[i].iov_len;
	}
	evbuffer_commit_space(s->s_in, v, used);
	if (got != 0 && evbuffer_add(s->s_in, stream_scratch, got) != 0)
		abort();
	if ((size_t)r == want)
		s->s_flags |= STREAM_F_BULK;
	else
		s->s_flags &= ~STREAM_F_BULK;
	s->s_notify |= STREAM_N_READ;
}

/* Read what the socket holds, if the owner reads and the input has room. */
void
stream_read(struct stream *s)
{
	size_t room;

	if (s->s_state != STREAM_S_OPEN || !(s->s_enabled & EV_READ) ||
	    (s->s_flags & (STREAM_F_EOF | STREAM_F_LENT | STREAM_F_FREED)) ||
	    (room = stream_read_room(s)) == 0)
		return;
	if (s->s_ssl != NULL)
		stream_read_tls(s, room);
	else
		stream_read_plain(s, room);
	if (s->s_state == STREAM_S_OPEN && !(s->s_flags & STREAM_F_EOF))
		(void)stream_read_room(s);
}

/* The output is empty and a shutdown was asked: do it (TLS: close_notify). */
static void
stream_shutdown(struct stream *s)
{
	if (s->s_ssl != NULL && stream_close_notify(s) != 1)
		return;
	s->s_flags |= STREAM_F_SHUT_DONE;
	s->s_flags &= ~STREAM_F_WBLOCKED;
	if (shutdown(s->s_fd, SHUT_WR) != 0 && errno != ENOTCONN)
		stream_fail(s, STREAM_EV_ERROR | STREAM_EV_WRITING, errno, 0);
}

/*
 * Write what the output holds (if the owner writes), then the shutdown
 * asked for; what the socket does not take waits for EV_WRITE.
 */
static void
stream_write(struct stream *s)
{
	ssize_t n;

	if (s->s_state != STREAM_S_OPEN || !(s->s_enabled & EV_WRITE) ||
	    (s->s_flags & (STREAM_F_LENT | STREAM_F_WR_WANTS_R)))
		return;
	s->s_flags &= ~STREAM_F_WBLOCKED;
	if (evbuffer_get_length(s->s_out) != 0) {
		if (s->s_ssl != NULL) {
			if ((n = stream_write_tls(s)) < 0)
				return;
		} else if ((n = evbuffer_write_atmost(
				s->s_out, s->s_fd, EVIO_MAX_IO)) < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK &&
			    errno != EINTR) {
				stream_fail(s,
				    STREAM_EV_ERROR | STREAM_EV_WRITING, errno,
				    0);
				return;
			}
			n = 0;
		}
		if (evbuffer_get_length(s->s_out) != 0)
			s->s_flags |= STREAM_F_WBLOCKED;
		if (n > 0 && evbuffer_get_length(s->s_out) <= s->s_wlo)
			s->s_notify |= STREAM_N_WRITE;
	}
	if (evbuffer_get_length(s->s_out) == 0 &&
	    (s->s_flags & (STREAM_F_SHUT | STREAM_F_SHUT_DONE)) ==
		STREAM_F_SHUT)
		stream_shutdown(s);
	stream_update(s);
}

/* The handshake is done: connected; write what waited, read what came. */
void
stream_open(struct stream *s)
{
	s->s_state = STREAM_S_OPEN;
	s->s_pending |= STREAM_EV_CONNECTED;
	stream_update(s);
	stream_write(s);
	if (s->s_ssl != NULL && tls_has_pending(s->s_ssl))
		stream_read(s);
}

/* connect(2) finished: open (plain) or start the TLS handshake. */
static void
stream_connected(struct stream *s)
{
	socklen_t len = sizeof(int);
	int err = 0;

	if (getsockopt(s->s_fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = errno;
	if (err == EINPROGRESS)
		return;
	if (err != 0) {
		stream_fail(s, STREAM_EV_ERROR, err, 0);
		return;
	}
	if (s->s_ssl == NULL) {
		stream_open(s);
		return;
	}
	if (tls_stream_attach(s->s_ssl, s->s_fd, 0) != 0) {
		stream_fail(s, STREAM_EV_ERROR, EINVAL, 0);
		return;
	}
	s->s_state = STREAM_S_HANDSHAKE;
	stream_handshake(s);
}

/*
 * A timeout fired that was cleared while its event stayed added
 * (stream_event_set): drop it, and keep the event without one.  Returns
 * what without EV_TIMEOUT then.
 */
static short
stream_timeout_stale(struct event *ev, unsigned char on, short what,
    int wanted)
{
	if (!(what & EV_TIMEOUT) || wanted)
		return (what);
	event_del(ev);
	if (on)
		event_add(ev, NULL);
	return (what & ~EV_TIMEOUT);
}

/*
 * The socket is readable, or the read timeout passed: the handshake, a
 * write that waited for it, then the owner's read.
 */
static void
stream_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stream *s = arg;

	(void)fd;
	what = stream_timeout_stale(s->s_rev, s->s_ron, what,
	    (s->s_flags & STREAM_F_RTV) != 0);
	if (what == 0)
		return; /* only a timeout no longer wanted */
	s->s_depth++;
	if (what & EV_TIMEOUT) {
		/* As a bufferevent: an open stream stops reading, and says. */
		if (s->s_state == STREAM_S_OPEN) {
			s->s_enabled &= ~EV_READ;
			s->s_pending |= STREAM_EV_TIMEOUT | STREAM_EV_READING;
			stream_update(s);
		} else
			stream_fail(s, STREAM_EV_TIMEOUT | STREAM_EV_READING,
			    ETIMEDOUT, 0);
	} else if (s->s_state == STREAM_S_HANDSHAKE)
		stream_handshake(s);
	else {
		if (s->s_flags & STREAM_F_WR_WANTS_R) {
			s->s_flags &= ~STREAM_F_WR_WANTS_R;
			stream_write(s);
		}
		stream_read(s);
	}
	stream_deliver_release(s);
}

/*
 * The socket is writable, or the write timeout passed: the connect, the
 * handshake, a read that waited for it, then the output.
 */
static void
stream_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stream *s = arg;

	(void)fd;
	what = stream_timeout_stale(s->s_wev, s->s_won, what,
	    (s->s_flags & STREAM_F_WTV) != 0);
	if (what == 0)
		return; /* only a timeout no longer wanted */
	s->s_depth++;
	if (what & EV_TIMEOUT) {
		if (s->s_state == STREAM_S_OPEN) {
			s->s_enabled &= ~EV_WRITE;
			s->s_pending |= STREAM_EV_TIMEOUT | STREAM_EV_WRITING;
			stream_update(s);
		} else
			stream_fail(s, STREAM_EV_TIMEOUT | STREAM_EV_WRITING,
			    ETIMEDOUT, 0);
	} else if (s->s_state == STREAM_S_CONNECTING)
		stream_connected(s);
	else if (s->s_state == STREAM_S_HANDSHAKE)
		stream_handshake(s);
	else {
		if (s->s_flags & STREAM_F_RD_WANTS_W) {
			s->s_flags &= ~STREAM_F_RD_WANTS_W;
			stream_read(s);
		}
		stream_write(s);
	}
	stream_deliver_release(s);
}

/* The end of a pass: do what the streams queued, then tell their owners. */
static void
stream_q_run_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stream_q *q = arg;
	struct stream *s;
	unsigned char work;
	unsigned int gen;

	(void)fd;
	(void)what;
	q->q_running = 1;
	gen = ++q->q_gen;
	while ((s = TAILQ_FIRST(&q->q_list)) != NULL && s->s_qgen != gen) {
		TAILQ_REMOVE(&q->q_list, s, s_qentry);
		work = s->s_work;
		s->s_work = 0;
		s->s_depth++;
		if ((work & STREAM_W_HANDSHAKE) &&
		    s->s_state == STREAM_S_HANDSHAKE)
			stream_handshake(s);
		if (work & STREAM_W_READ)
			stream_read(s);
		if (work & STREAM_W_NOTIFY)
			s->s_notify |= STREAM_N_READ | STREAM_N_READ_ANY;
		if (work & STREAM_W_WRITE)
			stream_write(s);
		stream_deliver_release(s);
	}
	q->q_running = 0;
	if (q->q_refs == 0) {
		event_free(q->q_ev);
		free(q);
		return;
	}
	if (!TAILQ_EMPTY(&q->q_list))
		event_active(q->q_ev, 0, 0);
}

/* Make s's read event, once it has a socket (the write event waits). */
static void
stream_events_new(struct stream *s)
{
	s->s_rev = event_new(
	    s->s_base, s->s_fd, EV_READ | EV_PERSIST, stream_read_cb, s);
	if (s->s_rev == NULL)
		abort(); /* allocation failure, as with xmalloc */
}

/* Make s's write event, the first time it is needed (stream_update). */
static void
stream_wev_new(struct stream *s)
{
	s->s_wev = event_new(
	    s->s_base, s->s_fd, EV_WRITE | EV_PERSIST, stream_write_cb, s);
	if (s->s_wev == NULL)
		abort(); /* allocation failure, as with xmalloc */
}

/*
 * A stream on fd (non-blocking, connected or accepted), or on none (-1)
 * for stream_connect to make.  With ssl, which the stream takes over, it
 * is TLS: the handshake starts from the loop, as a server's with
 * STREAM_O_ACCEPT, and STREAM_EV_CONNECTED says when it is done.  With
 * STREAM_O_CLOSE the stream closes fd when it is freed (a socket
 * stream_connect makes is always closed).  Writing is enabled, reading
 * not, as with a bufferevent.  NULL when OpenSSL refuses the socket.
 */
struct stream *
stream_new(struct event_base *base, int fd, SSL *ssl, int flags)
{
	struct stream *s;

	s = xcalloc(1, sizeof *s);
	s->s_base = base;
	s->s_fd = fd;
	s->s_ssl = ssl;
	s->s_enabled = EV_WRITE;
	if (flags & STREAM_O_CLOSE)
		s->s_flags |= STREAM_F_CLOSE;
	if (flags & STREAM_O_ACCEPT)
		s->s_flags |= STREAM_F_ACCEPT;
	if ((s->s_in = evbuffer_new()) == NULL ||
	    (s->s_out = evbuffer_new()) == NULL ||
	    (s->s_outcb = evbuffer_add_cb(s->s_out, stream_out_cb, s)) == NULL)
		abort(); /* allocation failure, as with xmalloc */
	s->s_q = stream_q_get(base);
	if (fd == -1)
		return (s);
	stream_events_new(s);
	if (ssl == NULL) {
		s->s_state = STREAM_S_OPEN;
		return (s);
	}
	if (tls_stream_attach(ssl, fd, (flags & STREAM_O_ACCEPT) != 0) != 0) {
		s->s_ssl = NULL; /* the caller keeps it */
		s->s_flags &= ~STREAM_F_CLOSE;
		stream_destroy(s);
		return (NULL);
	}
	s->s_state = STREAM_S_HANDSHAKE;
	stream_queue(s, STREAM_W_HANDSHAKE);
	return (s);
}

/* Free s now: its events, buffers, the SSL, the socket if it owns it. */
static void
stream_destroy(struct stream *s)
{
	int flush;

	flush = ((s->s_work & STREAM_W_WRITE) ||
		    (s->s_flags & STREAM_F_FLUSH)) &&
	    !(s->s_flags & STREAM_F_LENT);
	stream_unqueue(s);
	s->s_flags |= STREAM_F_FREED;
	/* A write the pass queued goes now: the owner may be closing. */
	if (flush) {
		s->s_depth++;
		stream_write(s);
		s->s_depth--;
	}
	if (s->s_rev != NULL)
		event_free(s->s_rev);
	if (s->s_wev != NULL)
		event_free(s->s_wev);
	evbuffer_free(s->s_in);
	evbuffer_free(s->s_out);
	if (s->s_ssl != NULL)
		tls_ssl_free(s->s_ssl);
	if ((s->s_flags & STREAM_F_CLOSE) && s->s_fd != -1)
		close(s->s_fd);
	stream_q_put(s->s_q);
	free(s);
}

/*
 * Free s: at once, or when its callback returns if called from one.  A
 * write the pass queued is made first; nothing more is reported.
 */
void
stream_free(struct stream *s)
{
	if (s == NULL)
		return;
	if (s->s_depth == 0) {
		stream_destroy(s);
		return;
	}
	if (s->s_flags & STREAM_F_FREED)
		return;
	/* Keep the queued write for stream_destroy; nothing else. */
	if (s->s_work & STREAM_W_WRITE)
		s->s_flags |= STREAM_F_FLUSH;
	stream_unqueue(s);
	s->s_flags |= STREAM_F_FREED;
	s->s_readcb = s->s_writecb = NULL;
	s->s_eventcb = NULL;
	stream_update(s);
}

/* Set the callbacks; NULL ones are not called. */
void
stream_setcb(struct stream *s, stream_data_cb readcb, stream_data_cb writecb,
    stream_event_cb eventcb, void *arg)
{
	if (s->s_flags & STREAM_F_FREED)
		return;
	s->s_readcb = readcb;
	s->s_writecb = writecb;
	s->s_eventcb = eventcb;
	s->s_arg = arg;
}

/* Read (EV_READ) and/or write (EV_WRITE) from now on. */
void
stream_enable(struct stream *s, short what)
{
	short was = s->s_enabled;

	s->s_enabled |= what & (EV_READ | EV_WRITE);
	if (s->s_state == STREAM_S_OPEN && !(was & EV_WRITE) &&
	    (what & EV_WRITE) && evbuffer_get_length(s->s_out) != 0)
		stream_queue(s, STREAM_W_WRITE);
	/* Records OpenSSL read ahead make the socket readable no more. */
	if (s->s_state == STREAM_S_OPEN && !(was & EV_READ) &&
	    (what & EV_READ) && s->s_ssl != NULL && tls_has_pending(s->s_ssl))
		stream_queue(s, STREAM_W_READ);
	stream_update(s);
}

/* Stop reading and/or writing (bytes stay where they are). */
void
stream_disable(struct stream *s, short what)
{
	s->s_enabled &= ~(what & (EV_READ | EV_WRITE));
	stream_update(s);
}

/* EV_READ and EV_WRITE as the owner enabled them. */
short
stream_get_enabled(const struct stream *s)
{
	return (s->s_enabled);
}

/* The input: the owner reads and drains it. */
struct evbuffer *
stream_input(struct stream *s)
{
	return (s->s_in);
}

/* The output: the owner appends to it, the stream writes and drains it. */
struct evbuffer *
stream_output(struct stream *s)
{
	return (s->s_out);
}

/*
 * Watermarks, as a bufferevent's: EV_READ's lo is the input the read
 * callback waits for, hi (0: none) the input at which reading stops
 * until the owner drains it; EV_WRITE's lo is the output at or below
 * which the write callback runs after a write.
 */
void
stream_setwatermark(struct stream *s, short what, size_t lo, size_t hi)
{
	if (what & EV_WRITE)
		s->s_wlo = lo;
	if (!(what & EV_READ))
		return;
	s->s_rlo = lo;
	s->s_rhi = hi;
	if ((s->s_flags & STREAM_F_FULL) &&
	    (hi == 0 || evbuffer_get_length(s->s_in) < hi))
		stream_unfull(s);
}

/* A timeout in whole milliseconds, rounded up, at most UINT32_MAX. */
static uint32_t
stream_tv_ms(const struct timeval *tv)
{
	uint64_t ms;

	if (tv->tv_sec < 0 || (tv->tv_sec == 0 && tv->tv_usec <= 0))
		return (0);
	ms = (uint64_t)tv->tv_sec * 1000 + ((uint64_t)tv->tv_usec + 999) / 1000;
	return (ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms);
}

/*
 * Timeouts on the loop's monotonic clock (NULL: none): rd while the
 * stream waits for input the owner reads, wr while output waits for the
 * socket (and for a connect).  An open stream that times out stops that
 * direction and says STREAM_EV_TIMEOUT; a connect or handshake fails.
 * Setting them again starts them again.  They are kept in whole
 * milliseconds (rounded up; at most 49 days), 8 bytes instead of 32.
 */
void
stream_set_timeouts(
    struct stream *s, const struct timeval *rd, const struct timeval *wr)
{
	s->s_flags &= ~(STREAM_F_RTV | STREAM_F_WTV);
	if (rd != NULL) {
		s->s_rto_ms = stream_tv_ms(rd);
		s->s_flags |= STREAM_F_RTV;
	}
	if (wr != NULL) {
		s->s_wto_ms = stream_tv_ms(wr);
		s->s_flags |= STREAM_F_WTV;
	}
	stream_update_force(s, 1);
}

/*
 * Connect a stream made without a socket to sa, without blocking (TCP
 * gets TCP_NODELAY).  The outcome comes from the loop: STREAM_EV_CONNECTED
 * (after the TLS handshake, for TLS), or STREAM_EV_ERROR with
 * stream_errno (ECONNREFUSED ...), or STREAM_EV_TIMEOUT after the write
 * timeout.  Returns -1 only when no socket could be made (errno says
 * why).
 */
int
stream_connect(struct stream *s, const struct sockaddr *sa, socklen_t len)
{
	int fd;

	if (s->s_state != STREAM_S_NEW || s->s_fd != -1) {
		errno = EISCONN;
		return (-1);
	}
	fd = socket(
	    sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return (-1);
	return (stream_connect_fd(s, fd, sa, len));
}

/*
 * stream_connect on fd, a non-blocking socket the caller made (in a
 * sandbox's network namespace ...), which the stream owns from now on,
 * whatever the outcome.  Returns -1 (errno EISCONN) only when s has a
 * socket already; fd is then closed.
 */
int
stream_connect_fd(
    struct stream *s, int fd, const struct sockaddr *sa, socklen_t len)
{
	int one = 1;

	if (s->s_state != STREAM_S_NEW || s->s_fd != -1) {
		close(fd);
		errno = EISCONN;
		return (-1);
	}
	if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6)
		(void)setsockopt(
		    fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	s->s_fd = fd;
	s->s_flags |= STREAM_F_CLOSE;
	stream_events_new(s);
	s->s_state = STREAM_S_CONNECTING;
	if (connect(fd, sa, len) != 0 && errno != EINPROGRESS) {
		stream_fail(s, STREAM_EV_ERROR, errno, 0);
		return (0);
	}
	/* Done or not, the write event says (SO_ERROR). */
	stream_update(s);
	return (0);
}

/*
 * End our side once the output has gone: shutdown(SHUT_WR), after
 * close_notify for TLS; reading goes on.  Returns -1 (errno) when the
 * stream cannot (never opened, failed, lent).
 */
int
stream_shutdown_write(struct stream *s)
{
	if (s->s_state == STREAM_S_FAILED || s->s_fd == -1 ||
	    (s->s_flags & STREAM_F_LENT)) {
		errno = ENOTCONN;
		return (-1);
	}
	s->s_flags |= STREAM_F_SHUT;
	if (s->s_state == STREAM_S_OPEN)
		stream_queue(s, STREAM_W_WRITE);
	return (0);
}

/* Run the read callback from the loop if input waits, whatever lo says. */
void
stream_trigger_read(struct stream *s)
{
	stream_queue(s, STREAM_W_NOTIFY);
}

/*
 * Make the write this pass queued now, not at its end (callbacks still
 * come from the loop).  Returns the bytes left in the output.
 */
int
stream_flush(struct stream *s)
{
	if (s->s_work & STREAM_W_WRITE) {
		s->s_work &= ~STREAM_W_WRITE;
		if (s->s_work == 0)
			TAILQ_REMOVE(&s->s_q->q_list, s, s_qentry);
		s->s_depth++;
		stream_write(s);
		s->s_depth--;
		if (s->s_notify != 0 || s->s_pending != 0)
			stream_queue(s, STREAM_W_EVENT);
	}
	return ((int)evbuffer_get_length(s->s_out));
}

/*
 * Lend the socket to splice(2) (lib/splicer.c): the stream stops all
 * I/O on it until stream_unlend.  Only a plain open stream whose output
 * is empty (the pass's queued write is made first) can; the owner moves
 * what the input holds itself.  Returns the socket, or -1 (errno EAGAIN
 * while output waits for the socket, EINVAL otherwise).
 */
int
stream_lend(struct stream *s)
{
	if (s->s_state != STREAM_S_OPEN || s->s_ssl != NULL ||
	    (s->s_flags & (STREAM_F_LENT | STREAM_F_FREED))) {
		errno = EINVAL;
		return (-1);
	}
	if (stream_flush(s) != 0) {
		errno = EAGAIN;
		return (-1);
	}
	s->s_flags |= STREAM_F_LENT;
	stream_update(s);
	return (s->s_fd);
}

/* Take the socket back from splice(2): I/O goes on as enabled. */
void
stream_unlend(struct stream *s)
{
	if (!(s->s_flags & STREAM_F_LENT))
		return;
	s->s_flags &= ~STREAM_F_LENT;
	stream_update(s);
	if (evbuffer_get_length(s->s_out) != 0)
		stream_queue(s, STREAM_W_WRITE);
}

/* The socket, or -1 before stream_connect made one. */
int
stream_getfd(const struct stream *s)
{
	return (s->s_fd);
}

/* The TLS connection, or NULL for a plain stream. */
SSL *
stream_ssl(const struct stream *s)
{
	return (s->s_ssl);
}

/* The errno of the error or timeout reported, 0 if none. */
int
stream_errno(const struct stream *s)
{
	return (s->s_errno);
}

/*
 * The OpenSSL error of the error reported (0: none, or a socket error);
 * tls_error_kind and tls_error_string describe it.
 */
unsigned long
stream_tls_error(const struct stream *s)
{
	return (s->s_tlserr);
}

/* Did a TLS peer end its side without close_notify? */
int
stream_eof_dirty(const struct stream *s)
{
	return ((s->s_flags & STREAM_F_DIRTY) != 0);
}

/*
 * Print s's state and flags for a debug log into buf ("open r- in=12
 * out=0 F_FULL|F_EOF"); returns what snprintf does.
 */
size_t
stream_state_print(const struct stream *s, char *buf, size_t len)
{
	static const struct {
		int f;
		const char *name;
	} names[] = { { STREAM_F_FULL, "full" }, { STREAM_F_EOF, "eof" },
		{ STREAM_F_DIRTY, "dirty" }, { STREAM_F_WBLOCKED, "wblocked" },
		{ STREAM_F_SHUT, "shut" }, { STREAM_F_SHUT_DONE, "shut_done" },
		{ STREAM_F_LENT, "lent" }, { STREAM_F_FREED, "freed" },
		{ STREAM_F_BULK, "bulk" }, { STREAM_F_HS_READ, "hs_read" },
		{ STREAM_F_HS_WRITE, "hs_write" },
		{ STREAM_F_RD_WANTS_W, "rd_wants_w" },
		{ STREAM_F_WR_WANTS_R, "wr_wants_r" } };
	char flags[160];
	size_t i, n = 0;
	int r;

	flags[0] = '\0';
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (!(s->s_flags & names[i].f))
			continue;
		r = snprintf(flags + n, sizeof flags - n, "%s%s",
		    n != 0 ? "|" : "", names[i].name);
		if (r < 0 || (size_t)r >= sizeof flags - n)
			break;
		n += (size_t)r;
	}
	r = snprintf(buf, len,
	    "%s%s fd=%d %c%c in=%zu out=%zu ev=%s%s work=%#x%s%s",
	    stream_state_names[s->s_state], s->s_ssl != NULL ? "/tls" : "",
	    s->s_fd, (s->s_enabled & EV_READ) ? 'r' : '-',
	    (s->s_enabled & EV_WRITE) ? 'w' : '-', evbuffer_get_length(s->s_in),
	    evbuffer_get_length(s->s_out), s->s_ron ? "R" : "",
	    s->s_won ? "W" : "", s->s_work, flags[0] != '\0' ? " " : "", flags);
	return (r < 0 ? 0 : (size_t)r);
}

/*
 * Free s, handing its socket (returned) and TLS connection (*ssl, NULL
 * for a plain stream) to the caller, who owns them from now on; what the
 * buffers hold goes with s, so the caller moves it first.  Works inside
 * s's callbacks too (the memory goes when they return, as stream_free's).
 * Only on an open stream not lent; -1 (EINVAL) otherwise.
 */
int
stream_take_socket(struct stream *s, struct ssl_st **ssl)
{
	int fd = s->s_fd;

	if (s->s_state != STREAM_S_OPEN ||
	    (s->s_flags & (STREAM_F_FREED | STREAM_F_LENT))) {
		errno = EINVAL;
		return (-1);
	}
	*ssl = s->s_ssl;
	s->s_ssl = NULL;
	s->s_flags &= ~(STREAM_F_CLOSE | STREAM_F_FLUSH);
	s->s_enabled = 0;
	stream_unqueue(s);
	stream_free(s);
	return (fd);
}
