/*
 * Write-through for plain-socket bufferevents; see wthru.h.
 *
 * The invariant: while wt_held is set the output is empty and the
 * bufferevent's EV_WRITE is off (or was turned on by its owner with
 * nothing to write), and the first byte added to the output turns
 * EV_WRITE back on (wthru_added), so libevent writes whatever a caller
 * queues even without a queue or a wthru_flush.  With the epoll
 * changelist (evio_base_new) the write event libevent adds when bytes are
 * queued and the one the pass's write removes cancel out before any
 * system call.
 */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>

#include <sys/ioctl.h>
#include <sys/uio.h>

#include <errno.h>

#include <stddef.h>
#include <stdlib.h>

#include "tls.h"
#include "wthru.h"

/* What libevent 2.1 reads per read event at most (EVBUFFER_MAX_READ). */
#define EVIO_LIBEVENT_READ 4096
/* The largest TLS record's payload. */
#define EVIO_TLS_RECORD 16384

/*
 * The writes one pass of the loop asks for.  A pass runs the callbacks of
 * every event one epoll_wait found; wq_ev is made active when the first
 * write is queued, so it runs after all of them (and after the callbacks
 * they deferred before it), and makes the writes together.  The processes
 * at the other ends are woken once per pass rather than once per write: a
 * process asleep in epoll_wait on another CPU costs the writer an
 * inter-processor interrupt, and every write that finds it awake again
 * costs it a context switch more.
 */
struct wthru_q {
	struct event *wq_ev;
	TAILQ_HEAD(, wthru) wq_list;
};

static void wthru_queue(struct wthru *);

/*
 * Bytes were queued while EV_WRITE was held off: give it back, and with a
 * queue write them at the end of the pass, whoever queued them.
 */
static void
wthru_added(
    struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct wthru *wt = arg;

	(void)buf;
	if (info->n_added == 0 || !wt->wt_held)
		return;
	wt->wt_held = 0;
	bufferevent_enable(wt->wt_bev, EV_WRITE);
	if (wt->wt_q != NULL)
		wthru_queue(wt);
}

/*
 * Write the output now.  When the socket takes all of it, EV_WRITE stays
 * off and (with notify) the write callback runs from the loop, as if
 * libevent had written; otherwise libevent writes the rest (and reports
 * any error).
 */
static void
wthru_write(struct wthru *wt, int notify)
{
	struct bufferevent *bev = wt->wt_bev;
	struct evbuffer *out;
	evutil_socket_t fd;

	if (wt->wt_held)
		return;
	out = bufferevent_get_output(bev);
	if (evbuffer_get_length(out) == 0 ||
	    !(bufferevent_get_enabled(bev) & EV_WRITE) ||
	    (fd = bufferevent_getfd(bev)) == -1)
		return;
	bufferevent_disable(bev, EV_WRITE);
	/* A socket bufferevent keeps its output's start frozen between writes. */
	evbuffer_unfreeze(out, 1);
	(void)evbuffer_write(out, fd);
	evbuffer_freeze(out, 1);
	if (evbuffer_get_length(out) != 0) {
		bufferevent_enable(bev, EV_WRITE);
		return;
	}
	wt->wt_held = 1;
	if (notify)
		bufferevent_trigger(bev, EV_WRITE, BEV_TRIG_DEFER_CALLBACKS);
}

/* Take wt off its queue and make its write now. */
static void
wthru_unqueue_write(struct wthru *wt, int notify)
{
	TAILQ_REMOVE(&wt->wt_q->wq_list, wt, wt_entry);
	wt->wt_queued = 0;
	wthru_write(wt, notify);
}

/* The end of a pass: make the writes it queued. */
static void
wthru_q_run(evutil_socket_t fd, short what, void *arg)
{
	struct wthru_q *q = arg;
	struct wthru *wt;

	(void)fd;
	(void)what;
	while ((wt = TAILQ_FIRST(&q->wq_list)) != NULL)
		wthru_unqueue_write(wt, 1);
}

/* A queue for the writes of base's passes; NULL when out of memory. */
struct wthru_q *
wthru_q_new(struct event_base *base)
{
	struct wthru_q *q;

	if ((q = calloc(1, sizeof *q)) == NULL)
		return (NULL);
	TAILQ_INIT(&q->wq_list);
	if ((q->wq_ev = event_new(base, -1, 0, wthru_q_run, q)) == NULL) {
		free(q);
		return (NULL);
	}
	return (q);
}

/* Free a queue: after every wthru on it is detached, before its base. */
void
wthru_q_free(struct wthru_q *q)
{
	if (q == NULL)
		return;
	event_free(q->wq_ev);
	free(q);
}

/*
 * Watch bev's output (a TLS bufferevent is left alone).  With q, what is
 * added to the output is written at the end of the pass that added it,
 * without a wthru_flush; without, wthru_flush writes at once.
 */
void
wthru_attach(struct wthru *wt, struct bufferevent *bev, struct wthru_q *q)
{
	struct evbuffer *out;

	wt->wt_bev = NULL;
	wt->wt_cb = NULL;
	wt->wt_q = q;
	wt->wt_held = 0;
	wt->wt_queued = 0;
	if (bev == NULL || bufferevent_openssl_get_ssl(bev) != NULL)
		return;
	out = bufferevent_get_output(bev);
	if ((wt->wt_cb = evbuffer_add_cb(out, wthru_added, wt)) == NULL)
		return;
	wt->wt_bev = bev;
	/*
	 * Held from the start, so that the first bytes are queued too.
	 * EV_WRITE is the caller's to turn on or not: on with an empty
	 * output it only costs libevent's write callback once.
	 */
	wt->wt_held = q != NULL && evbuffer_get_length(out) == 0;
}

/*
 * Stop watching (before the bufferevent changes hands or is freed).  A
 * write still queued is made now: the caller may be about to close.
 */
void
wthru_detach(struct wthru *wt)
{
	if (wt->wt_bev == NULL)
		return;
	if (wt->wt_queued)
		wthru_unqueue_write(wt, 0);
	evbuffer_remove_cb_entry(bufferevent_get_output(wt->wt_bev), wt->wt_cb);
	if (wt->wt_held)
		bufferevent_enable(wt->wt_bev, EV_WRITE);
	wt->wt_bev = NULL;
	wt->wt_cb = NULL;
	wt->wt_held = 0;
}

/* Write wt's output at the end of this pass. */
static void
wthru_queue(struct wthru *wt)
{
	struct wthru_q *q = wt->wt_q;

	if (wt->wt_queued)
		return;
	if (TAILQ_EMPTY(&q->wq_list))
		event_active(q->wq_ev, 0, 0);
	TAILQ_INSERT_TAIL(&q->wq_list, wt, wt_entry);
	wt->wt_queued = 1;
}

/*
 * Write the output without waiting for the loop to say the socket is
 * writable: at the end of this pass with a queue, else at once.  With a
 * queue, bytes added to an empty output are queued without being asked
 * (wthru_added); this is for output that was not empty.
 */
void
wthru_flush(struct wthru *wt)
{
	if (wt->wt_bev == NULL || wt->wt_held)
		return;
	if (wt->wt_q == NULL)
		wthru_write(wt, 1);
	else
		wthru_queue(wt);
}

/*
 * Make a queued write now: for an owner about to hand the socket to
 * splice(2), which may start only once the output is empty.
 */
void
wthru_write_now(struct wthru *wt)
{
	if (wt->wt_bev != NULL && wt->wt_queued)
		wthru_unqueue_write(wt, 1);
}

/* Let bulk transfers move up to EVIO_MAX_IO per system call. */
void
evio_tune(struct bufferevent *bev)
{
	if (bev == NULL)
		return;
	bufferevent_set_max_single_read(bev, EVIO_MAX_IO);
	bufferevent_set_max_single_write(bev, EVIO_MAX_IO);
}

/* Does bev's socket hold bytes not read yet? */
static int
evio_socket_waiting(struct bufferevent *bev)
{
	int fd, avail = 0;

	return ((fd = bufferevent_getfd(bev)) != -1 &&
	    ioctl(fd, FIONREAD, &avail) == 0 && avail > 0);
}

/*
 * libevent 2.1 hands a TLS connection's read callback one record per read
 * event.  An upload cost an epoll_wait, a callback and a write upstream
 * per 16 KiB, and a tunnel link carrying many small messages went through
 * the loop once per message, each answered with a record of its own.
 * Decrypt what else the socket holds now, up to EVIO_MAX_IO and the read
 * high watermark, and always the rest of a record begun (libevent would
 * wait for the socket, which has no more of it: the connection would
 * stall).  After a full record more is likely and is read at once; after
 * a short one the socket is asked first (FIONREAD), as a read that finds
 * nothing is a system call wasted.  A record only partly arrived stays
 * in OpenSSL, and its rest makes the socket readable again.
 */
static void
evio_read_more_tls(struct bufferevent *bev, SSL *ssl)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v;
	size_t len, hi = 0, room = EVIO_MAX_IO, want;
	int r, full;

	len = evbuffer_get_length(in);
	full = len >= EVIO_TLS_RECORD;
	if (bufferevent_getwatermark(bev, EV_READ, NULL, &hi) == 0 && hi != 0)
		room = len >= hi ? 0 : hi - len < room ? hi - len : room;
	for (;;) {
		want = tls_pending(ssl);
		if (want == 0) {
			if (room == 0 || (!full && !evio_socket_waiting(bev)))
				break;
			want = room < EVIO_TLS_RECORD ? room : EVIO_TLS_RECORD;
		}
		if (evbuffer_reserve_space(in, (ev_ssize_t)want, &v, 1) != 1)
			break;
		if (v.iov_len > want)
			v.iov_len = want;
		if ((r = tls_read_more(ssl, v.iov_base, v.iov_len)) <= 0)
			break;
		v.iov_len = (size_t)r;
		evbuffer_commit_space(in, &v, 1);
		room = (size_t)r >= room ? 0 : room - (size_t)r;
		full = (size_t)r >= EVIO_TLS_RECORD;
	}
}

/*
 * libevent 2.1 reads at most 4 KiB per read event, whatever the socket
 * holds, so a bulk transfer costs a callback and three system calls per
 * 4 KiB.  Called first thing in a read callback: when libevent's read may
 * have stopped at that cap, take what else the socket holds now, up to
 * EVIO_MAX_IO and the read high watermark, in one readv.  An end of stream
 * or an error is left for libevent's next read to report.
 */
void
evio_read_more(struct bufferevent *bev)
{
	struct evbuffer *in;
	struct evbuffer_iovec v[2];
	struct iovec iov[2];
	size_t len, hi = 0, room = EVIO_MAX_IO;
	ssize_t r;
	int fd, avail = 0, n, i, used;
	SSL *ssl;

	if (bev == NULL || !(bufferevent_get_enabled(bev) & EV_READ))
		return;
	if ((ssl = bufferevent_openssl_get_ssl(bev)) != NULL) {
		evio_read_more_tls(bev, ssl);
		return;
	}
	in = bufferevent_get_input(bev);
	if ((len = evbuffer_get_length(in)) < EVIO_LIBEVENT_READ ||
	    (fd = bufferevent_getfd(bev)) == -1)
		return;
	if (bufferevent_getwatermark(bev, EV_READ, NULL, &hi) == 0 && hi != 0) {
		if (len >= hi)
			return;
		if (hi - len < room)
			room = hi - len;
	}
	if (ioctl(fd, FIONREAD, &avail) == -1 || avail <= 0)
		return;
	if ((size_t)avail < room)
		room = (size_t)avail;
	/* A socket bufferevent keeps its input's end frozen between reads. */
	evbuffer_unfreeze(in, 0);
	if ((n = evbuffer_reserve_space(in, (ev_ssize_t)room, v, 2)) > 0) {
		for (i = 0; i < n; i++) {
			iov[i].iov_base = v[i].iov_base;
			iov[i].iov_len = v[i].iov_len;
		}
		r = readv(fd, iov, n);
		for (i = 0, used = 0; i < n && r > 0; i++, used++) {
			if ((size_t)r < v[i].iov_len)
				v[i].iov_len = (size_t)r;
			r -= (ssize_t)v[i].iov_len;
		}
		evbuffer_commit_space(in, v, used);
	}
	evbuffer_freeze(in, 0);
}

/*
 * A plain socket bufferevent's reads, without libevent's ioctl(FIONREAD)
 * before each: evio_own_reads points the bufferevent's read event here.
 * One readv takes up to EVIO_OWN_READ into the input and anything more
 * (up to EVIO_MAX_IO) into a scratch buffer copied after it, so that a
 * request or a response up to 16 KiB costs one buffer and one system
 * call.  Timeouts, and the odd case of input already at the high
 * watermark, go to libevent's own callback.
 */

/* libevent's, the same for every socket bufferevent (bufferevent_sock.c). */
static event_callback_fn evio_libevent_readcb;
static __thread unsigned char evio_scratch[64 * 1024];

static void
evio_sock_readcb(evutil_socket_t fd, short what, void *arg)
{
	struct bufferevent *bev = arg;
	struct evbuffer *in = bev->input;
	struct evbuffer_iovec v;
	struct iovec iov[2];
	size_t len, room = EVIO_MAX_IO, hi = bev->wm_read.high, first;
	event_callback_fn libevent_cb;
	ssize_t r;
	int n = 1, err;

	libevent_cb = __atomic_load_n(&evio_libevent_readcb, __ATOMIC_RELAXED);
	len = evbuffer_get_length(in);
	if (!(what & EV_READ) || (hi != 0 && len >= hi)) {
		libevent_cb(fd, what, arg);
		return;
	}
	if (hi != 0 && hi - len < room)
		room = hi - len;
	first = room < EVIO_OWN_READ ? room : EVIO_OWN_READ;
	evbuffer_unfreeze(in, 0);
	if (evbuffer_reserve_space(in, (ev_ssize_t)first, &v, 1) != 1) {
		evbuffer_freeze(in, 0);
		libevent_cb(fd, what, arg);
		return;
	}
	iov[0].iov_base = v.iov_base;
	iov[0].iov_len = v.iov_len < first ? v.iov_len : first;
	if (room > iov[0].iov_len) {
		iov[1].iov_base = evio_scratch;
		iov[1].iov_len = room - iov[0].iov_len;
		if (iov[1].iov_len > sizeof evio_scratch)
			iov[1].iov_len = sizeof evio_scratch;
		n = 2;
	}
	r = readv(fd, iov, n);
	err = errno;
	if (r > 0) {
		v.iov_len = (size_t)r < iov[0].iov_len ? (size_t)r
						       : iov[0].iov_len;
		evbuffer_commit_space(in, &v, 1);
		if ((size_t)r > v.iov_len)
			evbuffer_add(in, evio_scratch, (size_t)r - v.iov_len);
		evbuffer_freeze(in, 0);
		/* Last: the callback may free bev. */
		bufferevent_trigger(bev, EV_READ, 0);
		return;
	}
	evbuffer_freeze(in, 0);
	if (r == -1 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR))
		return;
	bufferevent_disable(bev, EV_READ);
	errno = err;
	bufferevent_trigger_event(bev,
	    BEV_EVENT_READING | (r == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR), 0);
}

/*
 * Read bev's socket with evio_sock_readcb from now on: libevent 2.1 asks
 * ioctl(FIONREAD) before every read, a third of the system calls of a
 * keep-alive request.  For a connected plain socket bufferevent; anything
 * else is left as it is.  bufferevent_setfd and bufferevent_socket_connect
 * give libevent its callback back, so a connecting one waits until it is
 * connected.
 */
void
evio_own_reads(struct bufferevent *bev)
{
	struct event *ev;
	event_callback_fn cb, known;
	int pending;

	if (bev == NULL || bufferevent_openssl_get_ssl(bev) != NULL ||
	    bufferevent_get_underlying(bev) != NULL ||
	    bufferevent_getfd(bev) == -1)
		return;
	ev = &bev->ev_read;
	if ((cb = event_get_callback(ev)) == evio_sock_readcb)
		return;
	known = __atomic_load_n(&evio_libevent_readcb, __ATOMIC_RELAXED);
	if (known == NULL)
		__atomic_store_n(&evio_libevent_readcb, cb, __ATOMIC_RELAXED);
	else if (cb != known)
		return;
	pending = event_pending(ev, EV_READ, NULL);
	event_del(ev);
	event_assign(ev, event_get_base(ev), event_get_fd(ev),
	    event_get_events(ev), evio_sock_readcb, bev);
	if (pending)
		event_add(ev,
		    evutil_timerisset(&bev->timeout_read) ? &bev->timeout_read
							  : NULL);
}
