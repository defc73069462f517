/*
 * Unit tests for lib/wthru.c.
 *
 * evio_own_reads: a plain socket bufferevent that reads its socket without
 * libevent's ioctl(FIONREAD) must still deliver every byte in order, stop
 * at its read high watermark, and report the end of the stream, an error
 * and a read timeout the way libevent does.
 *
 * wthru_q: the writes asked for in one loop pass, and bytes added to an
 * empty output without asking, are made at the end of it, all of them, in
 * order, with the write callback after; a write still queued when its
 * bufferevent is detached is made then; without a queue a write is made
 * at once.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>

#include "wthru.h"

/* How long one wait for the loop may take before the test fails (ms). */
#define TEST_WAIT 5000

struct rd {
	struct event_base *base;
	struct bufferevent *bev;
	int peer; /* the other end, written by the test */
	unsigned char *got; /* everything the read callback took */
	size_t ngot, cap;
	size_t most; /* largest input the read callback saw */
	int drain; /* the read callback takes the input */
	short what; /* the event callback's, 0 until it runs */
	int err; /* errno when it ran */
	int reads; /* read callbacks */
};

static void
rd_read_cb(struct bufferevent *bev, void *arg)
{
	struct rd *r = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t n = evbuffer_get_length(in);

	r->reads++;
	if (n > r->most)
		r->most = n;
	if (!r->drain)
		return;
	if (r->ngot + n > r->cap) {
		r->cap = (r->ngot + n) * 2;
		r->got = realloc(r->got, r->cap);
		assert_non_null(r->got);
	}
	assert_int_equal(evbuffer_remove(in, r->got + r->ngot, n), (int)n);
	r->ngot += n;
}

static void
rd_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct rd *r = arg;

	(void)bev;
	r->err = errno;
	r->what = what;
	event_base_loopbreak(r->base);
}

/* Run the loop until done() or TEST_WAIT. */
static void
rd_wait(struct rd *r, int (*done)(struct rd *, size_t), size_t arg)
{
	struct timeval tv = { 0, 10 * 1000 };
	int i;

	for (i = 0; i < TEST_WAIT / 10 && !done(r, arg); i++) {
		event_base_loopexit(r->base, &tv);
		event_base_dispatch(r->base);
	}
	assert_true(done(r, arg));
}

static int
rd_has(struct rd *r, size_t n)
{
	return (r->ngot >= n);
}

static int
rd_read_once(struct rd *r, size_t n)
{
	(void)n;
	return (r->reads > 0);
}

static int
rd_event(struct rd *r, size_t n)
{
	(void)n;
	return (r->what != 0);
}

/* A bufferevent with evio_own_reads on fd, the test holding peer. */
static void
rd_setup(struct rd *r, int fd, int peer)
{
	event_callback_fn libevent_cb;

	memset(r, 0, sizeof *r);
	r->base = event_base_new();
	assert_non_null(r->base);
	r->peer = peer;
	r->drain = 1;
	evutil_make_socket_nonblocking(fd);
	r->bev = bufferevent_socket_new(r->base, fd, BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(r->bev);
	bufferevent_setcb(r->bev, rd_read_cb, NULL, rd_event_cb, r);
	libevent_cb = event_get_callback(&r->bev->ev_read);
	evio_own_reads(r->bev);
	/* The read event is ours now, and setting it twice changes nothing. */
	assert_true(event_get_callback(&r->bev->ev_read) != libevent_cb);
	evio_own_reads(r->bev);
	bufferevent_enable(r->bev, EV_READ);
}

static void
rd_teardown(struct rd *r)
{
	if (r->bev != NULL)
		bufferevent_free(r->bev);
	if (r->peer != -1)
		close(r->peer);
	event_base_free(r->base);
	free(r->got);
}

static void
rd_pair(struct rd *r)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	rd_setup(r, sv[0], sv[1]);
}

/* Write all of buf to the peer (blocking). */
static void
rd_feed(struct rd *r, const unsigned char *buf, size_t len)
{
	ssize_t n;

	while (len > 0) {
		n = write(r->peer, buf, len);
		assert_true(n > 0);
		buf += n;
		len -= (size_t)n;
	}
}

/* Small and large writes arrive whole and in order. */
static void
test_bytes_in_order(void **state)
{
	static const size_t sizes[] = { 1, 5, EVIO_OWN_READ - 1, EVIO_OWN_READ,
		EVIO_OWN_READ + 1, 70000, 4096, 100000 };
	unsigned char *buf;
	size_t i, j, total = 0, off = 0;
	struct rd r;

	(void)state;
	rd_pair(&r);
	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		total += sizes[i];
	buf = malloc(total);
	assert_non_null(buf);
	for (j = 0; j < total; j++)
		buf[j] = (unsigned char)(j * 7 + j / 251);
	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		rd_feed(&r, buf + off, sizes[i]);
		off += sizes[i];
		rd_wait(&r, rd_has, off);
	}
	assert_int_equal(r.ngot, total);
	assert_memory_equal(r.got, buf, total);
	assert_int_equal(r.what, 0);
	free(buf);
	rd_teardown(&r);
}

/* Input stops at the read high watermark, and goes on once taken. */
static void
test_high_watermark(void **state)
{
	unsigned char buf[20000];
	struct rd r;

	(void)state;
	memset(buf, 'w', sizeof buf);
	rd_pair(&r);
	r.drain = 0;
	bufferevent_setwatermark(r.bev, EV_READ, 0, 3000);
	rd_feed(&r, buf, sizeof buf);
	rd_wait(&r, rd_read_once, 0);
	assert_true(r.most <= 3000);
	assert_int_equal(
	    evbuffer_get_length(bufferevent_get_input(r.bev)), 3000);
	r.drain = 1;
	evbuffer_drain(bufferevent_get_input(r.bev), 3000);
	r.ngot = 3000;
	rd_wait(&r, rd_has, sizeof buf);
	assert_int_equal(r.ngot, sizeof buf);
	assert_true(r.most <= 3000);
	rd_teardown(&r);
}

/* The end of the stream, after the bytes before it. */
static void
test_eof(void **state)
{
	struct rd r;

	(void)state;
	rd_pair(&r);
	rd_feed(&r, (const unsigned char *)"last", 4);
	shutdown(r.peer, SHUT_WR);
	rd_wait(&r, rd_event, 0);
	assert_int_equal(r.what, BEV_EVENT_READING | BEV_EVENT_EOF);
	assert_int_equal(r.ngot, 4);
	assert_memory_equal(r.got, "last", 4);
	assert_false(bufferevent_get_enabled(r.bev) & EV_READ);
	rd_teardown(&r);
}

/* A TCP reset is an error while reading, with its errno. */
static void
test_reset(void **state)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof sin;
	struct linger lg = { 1, 0 };
	int l, c, a;
	struct rd r;

	(void)state;
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true((l = socket(AF_INET, SOCK_STREAM, 0)) != -1);
	assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof sin), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &len), 0);
	assert_true((c = socket(AF_INET, SOCK_STREAM, 0)) != -1);
	assert_int_equal(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
	assert_true((a = accept(l, NULL, NULL)) != -1);
	close(l);
	rd_setup(&r, a, c);
	assert_int_equal(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
	close(c);
	r.peer = -1;
	rd_wait(&r, rd_event, 0);
	assert_int_equal(r.what, BEV_EVENT_READING | BEV_EVENT_ERROR);
	assert_int_equal(r.err, ECONNRESET);
	rd_teardown(&r);
}

/* A read timeout still fires (libevent's callback handles it). */
static void
test_timeout(void **state)
{
	struct timeval tv = { 0, 50 * 1000 };
	struct rd r;

	(void)state;
	rd_pair(&r);
	bufferevent_set_timeouts(r.bev, &tv, NULL);
	rd_wait(&r, rd_event, 0);
	assert_int_equal(r.what, BEV_EVENT_READING | BEV_EVENT_TIMEOUT);
	rd_teardown(&r);
}

/* Two plain socket bufferevents writing through a wthru_q. */
struct wq {
	struct event_base *base;
	struct wthru_q *q;
	struct bufferevent *bev[2];
	struct wthru wt[2];
	int peer[2];
	int writecbs[2];
	int early[2]; /* bytes a peer had before the pass ended */
	int step;
};

static void
wq_write_cb(struct bufferevent *bev, void *arg)
{
	struct wq *w = arg;

	w->writecbs[bev == w->bev[0] ? 0 : 1]++;
}

/* How many bytes wait at the peer, without taking them. */
static int
wq_waiting(int fd)
{
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);

	return (n < 0 ? 0 : (int)n);
}

/* Read exactly len bytes from fd (blocking) and compare them. */
static void
wq_expect(int fd, const char *want)
{
	char buf[256];
	size_t len = strlen(want), got = 0;
	ssize_t n;

	while (got < len) {
		n = read(fd, buf + got, len - got);
		assert_true(n > 0);
		got += (size_t)n;
	}
	assert_memory_equal(buf, want, len);
	assert_int_equal(wq_waiting(fd), 0);
}

static void
wq_setup(struct wq *w, int queue)
{
	int sv[2], i;

	memset(w, 0, sizeof *w);
	w->base = event_base_new();
	assert_non_null(w->base);
	if (queue) {
		w->q = wthru_q_new(w->base);
		assert_non_null(w->q);
	}
	for (i = 0; i < 2; i++) {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
		evutil_make_socket_nonblocking(sv[0]);
		w->peer[i] = sv[1];
		w->bev[i] = bufferevent_socket_new(
		    w->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
		assert_non_null(w->bev[i]);
		bufferevent_setcb(w->bev[i], NULL, wq_write_cb, NULL, w);
		wthru_attach(&w->wt[i], w->bev[i], w->q);
	}
}

static void
wq_teardown(struct wq *w)
{
	int i;

	for (i = 0; i < 2; i++) {
		wthru_detach(&w->wt[i]);
		bufferevent_free(w->bev[i]);
		close(w->peer[i]);
	}
	wthru_q_free(w->q);
	event_base_free(w->base);
}

/*
 * Turn writing on, as a connection does when it starts: libevent adds its
 * write event, which the pass's end removes again once the output is
 * written, before epoll hears of either (the changelist).
 */
static void
wq_enable(struct wq *w)
{
	bufferevent_enable(w->bev[0], EV_WRITE);
	bufferevent_enable(w->bev[1], EV_WRITE);
}

/* Queue "a", "b" and "c" for two sockets; nothing goes out yet. */
static void
wq_pass_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wq *w = arg;

	(void)fd;
	(void)what;
	wq_enable(w);
	bufferevent_write(w->bev[0], "a", 1);
	wthru_flush(&w->wt[0]);
	bufferevent_write(w->bev[1], "b", 1);
	wthru_flush(&w->wt[1]);
	bufferevent_write(w->bev[0], "c", 1);
	wthru_flush(&w->wt[0]);
	w->early[0] = wq_waiting(w->peer[0]);
	w->early[1] = wq_waiting(w->peer[1]);
}

/* Run cb as one event of a loop pass, and the rest of that pass. */
static void
wq_run_pass(struct wq *w, event_callback_fn cb)
{
	struct event *ev = event_new(w->base, -1, 0, cb, w);
	int i;

	assert_non_null(ev);
	event_active(ev, 0, 0);
	/* The pass, then the deferred write callbacks. */
	for (i = 0; i < 3; i++)
		event_base_loop(w->base, EVLOOP_NONBLOCK);
	event_free(ev);
}

/* The pass's writes are made when it ends, each socket's in order. */
static void
test_queue_pass(void **state)
{
	struct wq w;

	(void)state;
	wq_setup(&w, 1);
	wq_run_pass(&w, wq_pass_cb);
	assert_int_equal(w.early[0], 0);
	assert_int_equal(w.early[1], 0);
	wq_expect(w.peer[0], "ac");
	wq_expect(w.peer[1], "b");
	/* Written whole: EV_WRITE is off, and each write callback ran once. */
	assert_false(bufferevent_get_enabled(w.bev[0]) & EV_WRITE);
	assert_int_equal(w.writecbs[0], 1);
	assert_int_equal(w.writecbs[1], 1);
	/* A second pass queues again. */
	wq_run_pass(&w, wq_pass_cb);
	wq_expect(w.peer[0], "ac");
	wq_expect(w.peer[1], "b");
	wq_teardown(&w);
}

/* Queue a write, then detach before the pass ends: it goes out at once. */
static void
wq_detach_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wq *w = arg;

	(void)fd;
	(void)what;
	wq_enable(w);
	bufferevent_write(w->bev[0], "last", 4);
	wthru_flush(&w->wt[0]);
	bufferevent_write(w->bev[1], "kept", 4);
	wthru_flush(&w->wt[1]);
	wthru_detach(&w->wt[0]);
	w->early[0] = wq_waiting(w->peer[0]);
	w->early[1] = wq_waiting(w->peer[1]);
}

static void
test_queue_detach(void **state)
{
	struct wq w;

	(void)state;
	wq_setup(&w, 1);
	wq_run_pass(&w, wq_detach_cb);
	assert_int_equal(w.early[0], 4);
	assert_int_equal(w.early[1], 0);
	wq_expect(w.peer[0], "last");
	wq_expect(w.peer[1], "kept");
	wq_teardown(&w);
}

/* wthru_write_now makes a queued write at once, and only once. */
static void
wq_now_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wq *w = arg;

	(void)fd;
	(void)what;
	bufferevent_write(w->bev[0], "now", 3);
	bufferevent_write(w->bev[1], "kept", 4);
	wthru_write_now(&w->wt[0]);
	w->early[0] = wq_waiting(w->peer[0]);
	w->early[1] = wq_waiting(w->peer[1]);
}

static void
test_queue_write_now(void **state)
{
	struct wq w;

	(void)state;
	wq_setup(&w, 1);
	wq_run_pass(&w, wq_now_cb);
	assert_int_equal(w.early[0], 3);
	assert_int_equal(w.early[1], 0);
	wq_expect(w.peer[0], "now");
	wq_expect(w.peer[1], "kept");
	assert_int_equal(w.writecbs[0], 1);
	assert_int_equal(w.writecbs[1], 1);
	wq_teardown(&w);
}

/* Bytes added with no wthru_flush go out at the pass's end too. */
static void
wq_auto_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wq *w = arg;

	(void)fd;
	(void)what;
	bufferevent_write(w->bev[0], "no", 2);
	bufferevent_write(w->bev[0], " flush", 6);
	w->early[0] = wq_waiting(w->peer[0]);
}

static void
test_queue_auto(void **state)
{
	struct wq w;

	(void)state;
	wq_setup(&w, 1);
	wq_run_pass(&w, wq_auto_cb);
	assert_int_equal(w.early[0], 0);
	wq_expect(w.peer[0], "no flush");
	assert_false(bufferevent_get_enabled(w.bev[0]) & EV_WRITE);
	assert_int_equal(w.writecbs[0], 1);
	wq_run_pass(&w, wq_auto_cb);
	wq_expect(w.peer[0], "no flush");
	assert_int_equal(w.writecbs[0], 2);
	wq_teardown(&w);
}

/* Without a queue, wthru_flush writes at once. */
static void
test_no_queue(void **state)
{
	struct wq w;

	(void)state;
	wq_setup(&w, 0);
	wq_run_pass(&w, wq_pass_cb);
	assert_int_equal(w.early[0], 2);
	assert_int_equal(w.early[1], 1);
	wq_expect(w.peer[0], "ac");
	wq_expect(w.peer[1], "b");
	wq_teardown(&w);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes_in_order),
		cmocka_unit_test(test_high_watermark),
		cmocka_unit_test(test_eof),
		cmocka_unit_test(test_reset),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_queue_pass),
		cmocka_unit_test(test_queue_detach),
		cmocka_unit_test(test_queue_auto),
		cmocka_unit_test(test_queue_write_now),
		cmocka_unit_test(test_no_queue),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
