/*
 * Unit tests for lib/stream.c, on a real event base over socketpairs and
 * TCP loopback, plain and TLS (certificates from certs/mkcerts.sh, in
 * $CERTS_DIR or build/certs).
 *
 * Every byte arrives in order (a pattern that depends on its offset is
 * checked at the receiver); a reader that does not consume holds at most
 * the read high watermark and the loop sleeps meanwhile; reading starts
 * again by itself once the input drains; the writes of one pass go out
 * at its end, together; the write callback runs at the low watermark;
 * EOF, half-close, close_notify, refused connects and failed handshakes
 * are reported from the loop, never from inside a stream_* call; a stream
 * may be freed inside its callbacks; a socket lent to splice(2) and taken
 * back loses and reorders nothing.
 *
 * STREAM_TEST_MIB sets the size of the bulk transfers (64 by default).
 */
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "clock.h"
#include "splicer.h"
#include "stream.h"
#include "tls.h"

/* How long one wait for the loop may take before the test fails (ms). */
#define TEST_WAIT 20000

static const char *certs_dir;
static size_t bulk_bytes;

/* The byte at offset off of every test transfer. */
static unsigned char
pat(uint64_t off)
{
	return ((unsigned char)(off * 131 + (off >> 11) + (off >> 19)));
}

/* Fill buf with the pattern from offset off. */
static void
pat_fill(unsigned char *buf, uint64_t off, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		buf[i] = pat(off + i);
}

/* What a test knows of one stream: counts, and what its callbacks do. */
struct tp {
	struct event_base *base;
	struct stream *s;
	int reads; /* read callbacks */
	int writes; /* write callbacks */
	short events; /* every event seen, or'ed */
	int nevents;
	int during_api; /* set while the test is inside a stream_* call */
	int cb_in_api; /* a callback ran inside one */
	int drain; /* the read callback checks and drains the input */
	int echo; /* the read callback moves input to output */
	int free_in_read; /* the read callback frees the stream */
	int free_in_event;
	struct tp *free_other; /* the read callback frees this one's stream */
	uint64_t got; /* bytes drained (checked against the pattern) */
	int bad; /* a byte did not match */
	size_t most_in; /* the largest input a read callback saw */
	size_t out_at_write; /* output length at the last write callback */
	/* A sender: keep the output fed up to total bytes of the pattern. */
	uint64_t total;
	uint64_t sent;
	char text[256]; /* the drained bytes, for short text tests */
	size_t ntext;
};

/* Check and drain what s's input holds. */
static void
tp_drain(struct tp *p, struct evbuffer *in)
{
	struct evbuffer_iovec v[64];
	size_t k, total;
	unsigned char *b;
	int n, i;

	while (evbuffer_get_length(in) != 0) {
		n = evbuffer_peek(in, -1, NULL, v, 64);
		if (n > 64)
			n = 64;
		for (i = 0, total = 0; i < n; i++) {
			b = v[i].iov_base;
			for (k = 0; k < v[i].iov_len; k++) {
				if (p->ntext < sizeof p->text - 1)
					p->text[p->ntext++] = (char)b[k];
				if (b[k] != pat(p->got + k))
					p->bad++;
			}
			p->got += v[i].iov_len;
			total += v[i].iov_len;
		}
		evbuffer_drain(in, total);
	}
	p->text[p->ntext] = '\0';
}

/* Feed the sender's output up to 1 MiB ahead, until total. */
static void
tp_feed(struct tp *p)
{
	static unsigned char chunk[65536];
	struct evbuffer *out = stream_output(p->s);
	size_t n;

	while (p->sent < p->total && evbuffer_get_length(out) < 1024 * 1024) {
		n = p->total - p->sent < sizeof chunk ? p->total - p->sent
						      : sizeof chunk;
		pat_fill(chunk, p->sent, n);
		evbuffer_add(out, chunk, n);
		p->sent += n;
	}
}

static void
tp_read_cb(struct stream *s, void *arg)
{
	struct tp *p = arg;
	struct evbuffer *in = stream_input(s);

	if (p->during_api)
		p->cb_in_api++;
	p->reads++;
	if (evbuffer_get_length(in) > p->most_in)
		p->most_in = evbuffer_get_length(in);
	if (p->free_other != NULL && p->free_other->s != NULL) {
		stream_free(p->free_other->s);
		p->free_other->s = NULL;
	}
	if (p->free_in_read) {
		stream_free(s);
		p->s = NULL;
		return;
	}
	if (p->echo)
		evbuffer_add_buffer(stream_output(s), in);
	else if (p->drain)
		tp_drain(p, in);
}

static void
tp_write_cb(struct stream *s, void *arg)
{
	struct tp *p = arg;

	if (p->during_api)
		p->cb_in_api++;
	p->writes++;
	p->out_at_write = evbuffer_get_length(stream_output(s));
	if (p->total != 0)
		tp_feed(p);
}

static void
tp_event_cb(struct stream *s, short what, void *arg)
{
	struct tp *p = arg;

	if (p->during_api)
		p->cb_in_api++;
	p->events |= what;
	p->nevents++;
	if (p->free_in_event) {
		stream_free(s);
		p->s = NULL;
	}
}

/* Give p the stream s with the test's callbacks. */
static void
tp_set(struct tp *p, struct event_base *base, struct stream *s)
{
	memset(p, 0, sizeof *p);
	p->base = base;
	p->s = s;
	assert_non_null(s);
	stream_setcb(s, tp_read_cb, tp_write_cb, tp_event_cb, p);
}

static void
loop_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	*(int *)arg = 1;
}

/*
 * Run base until done(arg) holds; fail after TEST_WAIT ms.  Returns the
 * loop passes it took.
 */
static int
loop_until(struct event_base *base, int (*done)(void *), void *arg)
{
	struct event *ev;
	struct timeval tv;
	int timedout = 0, passes = 0;

	ev = evtimer_new(base, loop_timeout_cb, &timedout);
	clock_msec_to_tv(TEST_WAIT, &tv);
	evtimer_add(ev, &tv);
	while (!done(arg) && !timedout) {
		event_base_loop(base, EVLOOP_ONCE);
		passes++;
	}
	event_free(ev);
	assert_false(timedout);
	return (passes);
}

/* Run base for ms; returns the loop passes it made meanwhile. */
static int
loop_for(struct event_base *base, uint64_t ms)
{
	struct event *ev;
	struct timeval tv;
	int timedout = 0, passes = 0;

	ev = evtimer_new(base, loop_timeout_cb, &timedout);
	clock_msec_to_tv(ms, &tv);
	evtimer_add(ev, &tv);
	while (!timedout) {
		event_base_loop(base, EVLOOP_ONCE);
		passes++;
	}
	event_free(ev);
	return (passes);
}

/* A non-blocking socketpair of type. */
static void
pair(int type, int fds[2])
{
	assert_int_equal(
	    socketpair(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds),
	    0);
}

/* A listening TCP socket on 127.0.0.1, its address in sin. */
static int
tcp_listener(struct sockaddr_in *sin)
{
	socklen_t len = sizeof *sin;
	int fd;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	memset(sin, 0, sizeof *sin);
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)sin, sizeof *sin), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)sin, &len), 0);
	return (fd);
}

/* The path of certificate file name. */
static const char *
cert(const char *name)
{
	static char p[4][PATH_MAX];
	static int i;

	i = (i + 1) % 4;
	snprintf(p[i], sizeof p[i], "%s/%s", certs_dir, name);
	return (p[i]);
}

/* TLS contexts: a server with crt ("server" or "other"), a verifying client. */
struct tls_pair {
	SSL_CTX *srv;
	SSL_CTX *cli;
};

static void
tls_pair_new(struct tls_pair *t, const char *crt)
{
	char *cause = NULL, a[64], b[64];

	snprintf(a, sizeof a, "%s.crt", crt);
	snprintf(b, sizeof b, "%s.key", crt);
	t->srv = tls_server_ctx_new(cert(a), cert(b), &cause);
	assert_non_null(t->srv);
	t->cli = tls_client_ctx_new(cert("ca.crt"), 1, &cause);
	assert_non_null(t->cli);
}

static void
tls_pair_free(struct tls_pair *t)
{
	tls_ctx_free(t->srv);
	tls_ctx_free(t->cli);
}

/*
 * Two streams connected over TCP loopback: c made by stream_connect
 * (TLS to "localhost" when t is given), a on the accepted socket.
 */
static void
tcp_streams(
    struct event_base *base, struct tls_pair *t, struct tp *c, struct tp *a)
{
	struct sockaddr_in sin;
	char *cause = NULL;
	SSL *ssl = NULL;
	int lfd, afd;

	lfd = tcp_listener(&sin);
	if (t != NULL) {
		ssl = tls_client_ssl_new(t->cli, "localhost", &cause);
		assert_non_null(ssl);
	}
	tp_set(c, base, stream_new(base, -1, ssl, 0));
	c->during_api = 1;
	assert_int_equal(
	    stream_connect(c->s, (struct sockaddr *)&sin, sizeof sin), 0);
	c->during_api = 0;
	afd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	assert_true(afd >= 0);
	close(lfd);
	tp_set(a, base,
	    stream_new(base, afd, t != NULL ? tls_server_ssl_new(t->srv) : NULL,
		STREAM_O_CLOSE | STREAM_O_ACCEPT));
}

static int
tp_connected(void *arg)
{
	struct tp *p = arg;

	return ((p->events & (STREAM_EV_CONNECTED | STREAM_EV_ERROR)) != 0);
}

static int
tp_has_text(void *arg)
{
	struct tp *p = arg;

	return (p->ntext >= 5 || (p->events & ~STREAM_EV_CONNECTED) != 0);
}

/* Bytes echo through a stream on a socketpair, in order. */
static void
test_echo(void **state)
{
	struct event_base *base = event_base_new();
	struct tp e, c;
	int fds[2];

	(void)state;
	pair(SOCK_STREAM, fds);
	tp_set(&e, base, stream_new(base, fds[0], NULL, STREAM_O_CLOSE));
	tp_set(&c, base, stream_new(base, fds[1], NULL, STREAM_O_CLOSE));
	e.echo = 1;
	c.drain = 1;
	stream_enable(e.s, EV_READ);
	stream_enable(c.s, EV_READ);
	c.during_api = 1;
	evbuffer_add(stream_output(c.s), "\x00\x83\x06\x89\x0c", 5);
	c.during_api = 0;
	loop_until(base, tp_has_text, &c);
	assert_int_equal(c.got, 5);
	assert_int_equal(c.bad, 0);
	assert_int_equal(c.cb_in_api, 0);
	stream_free(e.s);
	stream_free(c.s);
	event_base_free(base);
}

/*
 * A stream takes over a TLS connection whose handshake someone else
 * finished (tls_io_handshake here): the role and keys stay, the
 * stream says it is connected, and bytes go both ways.
 */
static void
test_tls_established(void **state)
{
	struct event_base *base = event_base_new();
	struct tls_pair t;
	struct tp e, c;
	unsigned long err;
	char *cause = NULL;
	SSL *cssl, *sssl;
	int fds[2], i, cr = 0, sr = 0;

	(void)state;
	tls_pair_new(&t, "server");
	pair(SOCK_STREAM, fds);
	cssl = tls_client_ssl_new(t.cli, "localhost", &cause);
	sssl = tls_server_ssl_new(t.srv);
	assert_non_null(cssl);
	assert_non_null(sssl);
	assert_int_equal(tls_stream_attach(cssl, fds[1], 0), 0);
	assert_int_equal(tls_stream_attach(sssl, fds[0], 1), 0);
	for (i = 0; i < 1000 && (cr != 1 || sr != 1); i++) {
		if (cr != 1)
			cr = tls_io_handshake(cssl, &err);
		if (sr != 1)
			sr = tls_io_handshake(sssl, &err);
	}
	assert_int_equal(cr, 1);
	assert_int_equal(sr, 1);
	tp_set(&e, base,
	    stream_new(base, fds[0], sssl, STREAM_O_CLOSE | STREAM_O_ACCEPT));
	tp_set(&c, base, stream_new(base, fds[1], cssl, STREAM_O_CLOSE));
	e.echo = 1;
	c.drain = 1;
	stream_enable(e.s, EV_READ);
	stream_enable(c.s, EV_READ);
	evbuffer_add(stream_output(c.s), "\x00\x83\x06\x89\x0c", 5);
	loop_until(base, tp_has_text, &c);
	assert_true(c.events & STREAM_EV_CONNECTED);
	assert_true(e.events & STREAM_EV_CONNECTED);
	assert_int_equal(c.got, 5);
	assert_int_equal(c.bad, 0);
	assert_int_equal(c.events & ~STREAM_EV_CONNECTED, 0);
	stream_free(e.s);
	stream_free(c.s);
	tls_pair_free(&t);
	event_base_free(base);
}

static int
tp_got_total(void *arg)
{
	struct tp **p = arg;

	return (p[1]->got >= p[0]->total ||
	    (p[1]->events & ~STREAM_EV_CONNECTED) != 0 ||
	    p[0]->events & STREAM_EV_ERROR);
}

/* bulk_bytes from one stream to the other over TCP, checked byte by byte. */
static void
bulk(struct tls_pair *t)
{
	struct event_base *base = event_base_new();
	struct tp c, a, *both[2] = { &c, &a };
	struct rusage r0, r1;
	uint64_t t0, t1;
	double cpu;

	tcp_streams(base, t, &c, &a);
	loop_until(base, tp_connected, &c);
	assert_int_equal(c.events, STREAM_EV_CONNECTED);
	a.drain = 1;
	stream_enable(a.s, EV_READ);
	stream_setwatermark(a.s, EV_READ, 0, 1024 * 1024);
	stream_setwatermark(c.s, EV_WRITE, 256 * 1024, 0);
	c.total = bulk_bytes;
	getrusage(RUSAGE_SELF, &r0);
	t0 = clock_mono_usec();
	tp_feed(&c);
	loop_until(base, tp_got_total, both);
	t1 = clock_mono_usec();
	getrusage(RUSAGE_SELF, &r1);
	assert_int_equal(a.got, bulk_bytes);
	assert_int_equal(a.bad, 0);
	assert_true(a.most_in <= 1024 * 1024);
	cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec +
		  r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
	    (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec +
		r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) /
		1e6;
	print_message("%s: %zu MiB in %.3f s, %.3f CPU-s, %d read callbacks\n",
	    t != NULL ? "tls" : "plain", bulk_bytes >> 20,
	    (double)(t1 - t0) / 1e6, cpu, a.reads);
	stream_free(c.s);
	stream_free(a.s);
	event_base_free(base);
}

static void
test_bulk_plain(void **state)
{
	(void)state;
	bulk(NULL);
}

static void
test_bulk_tls(void **state)
{
	struct tls_pair t;

	(void)state;
	tls_pair_new(&t, "server");
	bulk(&t);
	tls_pair_free(&t);
}

/* A sender of the pattern on a raw socket, as fast as the socket takes. */
struct flood {
	int fd;
	uint64_t sent;
	uint64_t total;
	int blocked; /* the last write said EAGAIN */
	struct event *ev;
};

static void
flood_cb(evutil_socket_t fd, short what, void *arg)
{
	struct flood *f = arg;
	unsigned char buf[65536];
	size_t n;
	ssize_t r;

	(void)what;
	while (f->sent < f->total) {
		n = f->total - f->sent < sizeof buf ? f->total - f->sent
						    : sizeof buf;
		pat_fill(buf, f->sent, n);
		if ((r = write(fd, buf, n)) <= 0) {
			f->blocked = 1;
			return;
		}
		f->sent += (uint64_t)r;
	}
	event_del(f->ev);
	shutdown(fd, SHUT_WR);
}

static int
tp_flood_full(void *arg)
{
	struct tp *p = arg;

	return (p->most_in >= 64 * 1024);
}

static int
tp_eof(void *arg)
{
	struct tp *p = arg;

	return ((p->events & ~STREAM_EV_CONNECTED) != 0);
}

/* CPU-seconds this process used so far. */
static double
cpu_now(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return ((double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
	    (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6);
}

/*
 * A peer floods while the owner does not consume: the input stays at the
 * high watermark, no read callback runs, the loop sleeps; once drained,
 * reading resumes by itself and every byte arrives.  With t the flooder
 * is a TLS stream (records may wait inside OpenSSL).
 */
static void
flood(struct tls_pair *t)
{
	struct event_base *base = event_base_new();
	struct tp r, w;
	struct flood f;
	int fds[2], reads, passes, i;
	uint64_t last, now;
	double cpu;

	memset(&f, 0, sizeof f);
	memset(&w, 0, sizeof w);
	if (t == NULL) {
		pair(SOCK_STREAM, fds);
		tp_set(
		    &r, base, stream_new(base, fds[0], NULL, STREAM_O_CLOSE));
		f.fd = fds[1];
		f.total = 8 * 1024 * 1024;
		f.ev = event_new(
		    base, f.fd, EV_WRITE | EV_PERSIST, flood_cb, &f);
		event_add(f.ev, NULL);
	} else {
		tcp_streams(base, t, &w, &r);
		w.total = 8 * 1024 * 1024;
		stream_setwatermark(w.s, EV_WRITE, 256 * 1024, 0);
		tp_feed(&w);
	}
	stream_setwatermark(r.s, EV_READ, 0, 64 * 1024);
	stream_enable(r.s, EV_READ);
	loop_until(base, tp_flood_full, &r);
	/* Let the flooder fill the sockets (until it moves no more). */
	for (i = 0, last = UINT64_MAX; i < TEST_WAIT / 50; i++) {
		now = t == NULL
		    ? f.sent
		    : w.sent - evbuffer_get_length(stream_output(w.s));
		if (now == last)
			break;
		last = now;
		loop_for(base, 50);
	}
	assert_true(i < TEST_WAIT / 50);
	reads = r.reads;
	cpu = cpu_now();
	passes = loop_for(base, 300);
	cpu = cpu_now() - cpu;
	print_message("%s: %d passes, %d read callbacks, %.3f CPU-s in 300 ms; "
		      "input %zu\n",
	    t != NULL ? "tls" : "plain", passes, r.reads - reads, cpu,
	    evbuffer_get_length(stream_input(r.s)));
	assert_true(passes <= 5);
	assert_int_equal(r.reads, reads);
	assert_true(cpu < 0.1);
	assert_true(r.most_in <= 64 * 1024);
	assert_true(evbuffer_get_length(stream_input(r.s)) <= 64 * 1024);
	/* Drain: reading starts again without being asked, to the end. */
	r.drain = 1;
	tp_drain(&r, stream_input(r.s));
	if (t != NULL)
		stream_shutdown_write(w.s);
	loop_until(base, tp_eof, &r);
	assert_int_equal(
	    r.events & ~STREAM_EV_CONNECTED, STREAM_EV_EOF | STREAM_EV_READING);
	assert_int_equal(r.got, 8 * 1024 * 1024);
	assert_int_equal(r.bad, 0);
	assert_true(r.most_in <= 64 * 1024);
	stream_free(r.s);
	if (t == NULL) {
		event_free(f.ev);
		close(f.fd);
	} else
		stream_free(w.s);
	event_base_free(base);
}

static void
test_flood_plain(void **state)
{
	(void)state;
	flood(NULL);
}

static void
test_flood_tls(void **state)
{
	struct tls_pair t;

	(void)state;
	tls_pair_new(&t, "server");
	flood(&t);
	tls_pair_free(&t);
}

/* Read everything fd holds; returns the bytes. */
static size_t
slurp(int fd)
{
	unsigned char buf[65536];
	size_t n = 0;
	ssize_t r;

	while ((r = read(fd, buf, sizeof buf)) > 0)
		n += (size_t)r;
	return (n);
}

/*
 * The write callback runs once the output falls to the low watermark,
 * not before: a peer that does not read holds it back.
 */
static void
test_write_lowat(void **state)
{
	struct event_base *base = event_base_new();
	static unsigned char big[4 * 1024 * 1024];
	struct tp p;
	int fds[2];
	size_t got = 0;

	(void)state;
	pair(SOCK_STREAM, fds);
	tp_set(&p, base, stream_new(base, fds[0], NULL, STREAM_O_CLOSE));
	stream_setwatermark(p.s, EV_WRITE, 64 * 1024, 0);
	pat_fill(big, 0, sizeof big);
	evbuffer_add(stream_output(p.s), big, sizeof big);
	loop_for(base, 100);
	assert_int_equal(p.writes, 0);
	assert_true(evbuffer_get_length(stream_output(p.s)) > 64 * 1024);
	while (p.writes == 0) {
		got += slurp(fds[1]);
		loop_for(base, 5);
	}
	assert_true(p.out_at_write <= 64 * 1024);
	while (evbuffer_get_length(stream_output(p.s)) != 0) {
		got += slurp(fds[1]);
		loop_for(base, 5);
	}
	got += slurp(fds[1]);
	assert_int_equal(got, sizeof big);
	stream_free(p.s);
	close(fds[1]);
	event_base_free(base);
}

/* What the coalescing test's timer does. */
struct co {
	struct stream *s;
	int peer;
	int early; /* bytes the peer had before the pass ended */
};

static void
co_cb(evutil_socket_t fd, short what, void *arg)
{
	static const char piece[10] = "0123456789";
	struct co *co = arg;
	char buf[16];
	int i;

	(void)fd;
	(void)what;
	for (i = 0; i < 100; i++) {
		/* Each piece a chain of its own: a writev of many. */
		evbuffer_add_reference(
		    stream_output(co->s), piece, sizeof piece, NULL, NULL);
	}
	if (recv(co->peer, buf, sizeof buf, MSG_DONTWAIT) > 0)
		co->early = 1;
}

/*
 * 100 appends in one callback leave in one write, at the end of the
 * pass: over SOCK_SEQPACKET each write(2) is one record the peer counts.
 */
static void
test_coalesce(void **state)
{
	struct event_base *base = event_base_new();
	struct event *ev;
	struct co co;
	struct tp p;
	char buf[2048];
	int fds[2], records = 0;
	ssize_t r;
	size_t total = 0;

	(void)state;
	pair(SOCK_SEQPACKET, fds);
	tp_set(&p, base, stream_new(base, fds[0], NULL, STREAM_O_CLOSE));
	co.s = p.s;
	co.peer = fds[1];
	co.early = 0;
	ev = event_new(base, -1, 0, co_cb, &co);
	event_active(ev, 0, 0);
	event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
	assert_int_equal(co.early, 0);
	while ((r = recv(fds[1], buf, sizeof buf, MSG_DONTWAIT)) > 0) {
		records++;
		total += (size_t)r;
	}
	assert_int_equal(total, 1000);
	assert_int_equal(records, 1);
	event_free(ev);
	stream_free(p.s);
	close(fds[1]);
	event_base_free(base);
}

/* The peer's last bytes, then the end of the stream, in that order. */
static void
test_eof(void **state)
{
	struct event_base *base = event_base_new();
	unsigned char b[3];
	struct tp p;
	int fds[2];

	(void)state;
	pair(SOCK_STREAM, fds);
	tp_set(&p, base, stream_new(base, fds[0], NULL, STREAM_O_CLOSE));
	p.drain = 1;
	stream_enable(p.s, EV_READ);
	pat_fill(b, 0, 3);
	assert_int_equal(write(fds[1], b, 3), 3);
	close(fds[1]);
	loop_until(base, tp_eof, &p);
	assert_int_equal(p.got, 3);
	assert_int_equal(p.events, STREAM_EV_EOF | STREAM_EV_READING);
	assert_int_equal(p.nevents, 1);
	assert_false(stream_eof_dirty(p.s));
	stream_free(p.s);
	event_base_free(base);
}

static int
tp_eof_and_text(void *arg)
{
	struct tp *p = arg;

	return ((p->events & STREAM_EV_EOF) && p->ntext >= 4);
}

/* The event callback of the half-close test's second end: answer, end. */
static void
hc_event_cb(struct stream *s, short what, void *arg)
{
	struct tp *p = arg;

	p->events |= what;
	p->nevents++;
	if (what & STREAM_EV_EOF) {
		evbuffer_add(stream_output(s), "pong", 4);
		stream_shutdown_write(s);
	}
}

/*
 * Half-close: one end shuts its side down (close_notify then shutdown
 * for TLS) and keeps reading; the other sees a clean EOF, answers, and
 * ends its side too.
 */
static void
half_close(struct tls_pair *t)
{
	struct event_base *base = event_base_new();
	struct tp c, a;

	tcp_streams(base, t, &c, &a);
	stream_setcb(a.s, tp_read_cb, tp_write_cb, hc_event_cb, &a);
	loop_until(base, tp_connected, &c);
	c.drain = a.drain = 1;
	stream_enable(c.s, EV_READ);
	stream_enable(a.s, EV_READ);
	evbuffer_add(stream_output(c.s), "ping", 4);
	c.during_api = 1;
	assert_int_equal(stream_shutdown_write(c.s), 0);
	c.during_api = 0;
	loop_until(base, tp_eof_and_text, &c);
	assert_string_equal(a.text, "ping");
	assert_string_equal(c.text, "pong");
	assert_int_equal(
	    a.events & ~STREAM_EV_CONNECTED, STREAM_EV_EOF | STREAM_EV_READING);
	assert_int_equal(
	    c.events, STREAM_EV_CONNECTED | STREAM_EV_EOF | STREAM_EV_READING);
	/* close_notify came: a clean end. */
	assert_false(stream_eof_dirty(c.s));
	assert_false(stream_eof_dirty(a.s));
	assert_int_equal(c.cb_in_api, 0);
	stream_free(c.s);
	stream_free(a.s);
	event_base_free(base);
}

static void
test_half_close_plain(void **state)
{
	(void)state;
	half_close(NULL);
}

static void
test_half_close_tls(void **state)
{
	struct tls_pair t;

	(void)state;
	tls_pair_new(&t, "server");
	half_close(&t);
	tls_pair_free(&t);
}

/* A TLS peer that closes without close_notify: EOF, marked dirty. */
static void
test_tls_dirty_eof(void **state)
{
	struct event_base *base = event_base_new();
	struct tls_pair t;
	struct tp c, a;

	(void)state;
	tls_pair_new(&t, "server");
	tcp_streams(base, &t, &c, &a);
	loop_until(base, tp_connected, &c);
	stream_enable(c.s, EV_READ);
	loop_for(base, 20);
	/* The server's socket closes under OpenSSL's feet. */
	shutdown(stream_getfd(a.s), SHUT_RDWR);
	loop_until(base, tp_eof, &c);
	assert_true(c.events & STREAM_EV_EOF);
	assert_true(stream_eof_dirty(c.s));
	stream_free(c.s);
	stream_free(a.s);
	tls_pair_free(&t);
	event_base_free(base);
}

/* A refused connect is an error from the loop, with its errno. */
static void
test_connect_refused(void **state)
{
	struct event_base *base = event_base_new();
	struct sockaddr_in sin;
	struct tp p;
	int lfd;

	(void)state;
	lfd = tcp_listener(&sin);
	close(lfd); /* nothing listens on sin now */
	tp_set(&p, base, stream_new(base, -1, NULL, 0));
	p.during_api = 1;
	assert_int_equal(
	    stream_connect(p.s, (struct sockaddr *)&sin, sizeof sin), 0);
	p.during_api = 0;
	assert_int_equal(p.nevents, 0);
	loop_until(base, tp_eof, &p);
	assert_int_equal(p.events, STREAM_EV_ERROR);
	assert_int_equal(stream_errno(p.s), ECONNREFUSED);
	assert_int_equal(p.cb_in_api, 0);
	stream_free(p.s);
	event_base_free(base);
}

/*
 * Timeouts set again without one: the old timeout goes (event_add with
 * none would keep it), on an event that stays added.
 */
static void
test_timeout_cleared(void **state)
{
	struct event_base *base = event_base_new();
	struct timeval tv = { 0, 30000 };
	struct tp p;
	int fds[2];

	(void)state;
	pair(SOCK_STREAM, fds);
	tp_set(&p, base, stream_new(base, fds[0], NULL, STREAM_O_CLOSE));
	stream_enable(p.s, EV_READ);
	stream_set_timeouts(p.s, &tv, &tv);
	stream_set_timeouts(p.s, NULL, NULL);
	(void)loop_for(base, 150);
	assert_int_equal(p.nevents, 0);
	assert_true(stream_get_enabled(p.s) & EV_READ);
	/* The stale timer dropped, a new timeout still runs. */
	stream_set_timeouts(p.s, &tv, NULL);
	(void)loop_for(base, 150);
	assert_int_equal(p.nevents, 1);
	assert_int_equal(p.events, STREAM_EV_TIMEOUT | STREAM_EV_READING);
	stream_free(p.s);
	close(fds[1]);
	event_base_free(base);
}

/* A connect on the caller's socket; then the socket handed back. */
static void
test_connect_fd_take(void **state)
{
	struct event_base *base = event_base_new();
	struct sockaddr_in sin;
	struct tp p;
	SSL *ssl = (SSL *)&ssl;
	char c = 0;
	int lfd, fd, afd;

	(void)state;
	lfd = tcp_listener(&sin);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(fd != -1);
	tp_set(&p, base, stream_new(base, -1, NULL, 0));
	assert_int_equal(
	    stream_connect_fd(p.s, fd, (struct sockaddr *)&sin, sizeof sin), 0);
	assert_int_equal(stream_getfd(p.s), fd);
	loop_until(base, tp_connected, &p);
	assert_int_equal(p.events, STREAM_EV_CONNECTED);
	while ((afd = accept(lfd, NULL, NULL)) == -1 && errno == EINTR)
		;
	assert_true(afd != -1);
	assert_int_equal(stream_take_socket(p.s, &ssl), fd);
	assert_null(ssl);
	/* The socket is the caller's, open. */
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(read(afd, &c, 1), 1);
	assert_int_equal(c, 'x');
	close(fd);
	close(afd);
	close(lfd);
	event_base_free(base);
}

/* A verifying client and a server with the wrong name: error, its kind. */
static void
test_tls_verify_fails(void **state)
{
	struct event_base *base = event_base_new();
	struct tls_pair t;
	struct tp c, a;

	(void)state;
	tls_pair_new(&t, "other");
	tcp_streams(base, &t, &c, &a);
	loop_until(base, tp_connected, &c);
	assert_int_equal(c.events, STREAM_EV_ERROR);
	assert_int_not_equal(stream_tls_error(c.s), 0);
	assert_int_equal(tls_error_kind(stream_tls_error(c.s)), TLS_ERR_OTHER);
	assert_string_not_equal(tls_verify_error(stream_ssl(c.s)), "ok");
	stream_free(c.s);
	stream_free(a.s);
	tls_pair_free(&t);
	event_base_free(base);
}

/* A TLS client whose peer answers in plain HTTP: TLS_ERR_NOT_TLS. */
static void
test_tls_not_tls(void **state)
{
	static const char answer[] = "HTTP/1.1 400 Bad Request\r\n"
				     "Content-Length: 0\r\n\r\n";
	struct event_base *base = event_base_new();
	struct tls_pair t;
	struct tp c, a;

	(void)state;
	tls_pair_new(&t, "server");
	tcp_streams(base, NULL, &c, &a);
	stream_free(c.s);
	/* Again, this time a TLS client. */
	{
		struct sockaddr_in sin;
		char *cause = NULL;
		int lfd, afd;

		stream_free(a.s);
		lfd = tcp_listener(&sin);
		tp_set(&c, base,
		    stream_new(base, -1,
			tls_client_ssl_new(t.cli, "localhost", &cause), 0));
		assert_int_equal(
		    stream_connect(c.s, (struct sockaddr *)&sin, sizeof sin),
		    0);
		afd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		assert_true(afd >= 0);
		close(lfd);
		assert_int_equal(write(afd, answer, sizeof answer - 1),
		    (ssize_t)sizeof answer - 1);
		loop_until(base, tp_connected, &c);
		close(afd);
	}
	assert_int_equal(c.events, STREAM_EV_ERROR);
	assert_int_equal(
	    tls_error_kind(stream_tls_error(c.s)), TLS_ERR_NOT_TLS);
	stream_free(c.s);
	tls_pair_free(&t);
	event_base_free(base);
}

/* A read timeout: reported once, reading stops. */
static void
test_read_timeout(void **state)
{
	struct event_base *base = event_base_new();
	struct timeval tv = { 0, 50000 };
	struct tp p;
	int fds[2];

	(void)state;
	pair(SOCK_STREAM, fds);
	tp_set(&p, base, stream_new(base, fds[0], NULL, STREAM_O_CLOSE));
	stream_enable(p.s, EV_READ);
	stream_set_timeouts(p.s, &tv, NULL);
	loop_until(base, tp_eof, &p);
	assert_int_equal(p.events, STREAM_EV_TIMEOUT | STREAM_EV_READING);
	assert_false(stream_get_enabled(p.s) & EV_READ);
	stream_free(p.s);
	close(fds[1]);
	event_base_free(base);
}

static int
peer_eof(void *arg)
{
	int fd = *(int *)arg;
	char c;

	return (read(fd, &c, 1) == 0);
}

/*
 * Freed inside its own read callback, inside its event callback, and
 * (another stream, with a write queued) inside a third's: no use after
 * free (ASan, valgrind), the sockets close, the queued write is made.
 */
static void
test_free_in_callback(void **state)
{
	struct event_base *base = event_base_new();
	struct tp r, e, o;
	int f1[2], f2[2], f3[2];
	char buf[16];

	(void)state;
	pair(SOCK_STREAM, f1);
	pair(SOCK_STREAM, f2);
	pair(SOCK_STREAM, f3);
	tp_set(&r, base, stream_new(base, f1[0], NULL, STREAM_O_CLOSE));
	tp_set(&e, base, stream_new(base, f2[0], NULL, STREAM_O_CLOSE));
	tp_set(&o, base, stream_new(base, f3[0], NULL, STREAM_O_CLOSE));
	r.free_in_read = 1;
	r.free_other = &o;
	e.free_in_event = 1;
	stream_enable(r.s, EV_READ);
	stream_enable(e.s, EV_READ);
	/* o's write waits for the end of the pass when r frees it. */
	evbuffer_add(stream_output(o.s), "last", 4);
	assert_int_equal(write(f1[1], "x", 1), 1);
	close(f2[1]);
	loop_until(base, peer_eof, &f1[1]);
	loop_until(base, tp_eof, &e);
	assert_null(r.s);
	assert_null(e.s);
	assert_null(o.s);
	assert_int_equal(read(f3[1], buf, sizeof buf), 4);
	assert_int_equal(read(f3[1], buf, sizeof buf), 0);
	close(f1[1]);
	close(f3[1]);
	event_base_free(base);
}

/* The splice hand-off test: a → stream sa → owner → stream sb → b. */
struct hand {
	struct tp sa, sb;
	int a, b; /* the test's ends */
	struct splice_pool *pool;
	struct splicer *spl;
	int spliced; /* the splicer is done */
	uint64_t moved;
	size_t through; /* bytes the owner moved */
};

static void
hand_progress(void *arg, size_t n)
{
	struct hand *h = arg;

	h->moved += n;
}

static void
hand_done(void *arg, int error)
{
	struct hand *h = arg;

	assert_int_equal(error, 0);
	h->spliced = 1;
}

/*
 * The owner's bytes, then (once 100 came) both sockets lent to a
 * splicer: the write still queued for the pass's end is made first.
 */
static void
hand_read_cb(struct stream *s, void *arg)
{
	static const struct splicer_cbs cbs = { hand_progress, hand_done };
	struct hand *h = arg;
	int ia, ib;

	h->through += evbuffer_get_length(stream_input(s));
	evbuffer_add_buffer(stream_output(h->sb.s), stream_input(s));
	if (h->through != 100 || h->spl != NULL)
		return;
	assert_int_not_equal(evbuffer_get_length(stream_output(h->sb.s)), 0);
	ia = stream_lend(h->sa.s);
	ib = stream_lend(h->sb.s);
	assert_int_equal(ia, stream_getfd(h->sa.s));
	assert_int_equal(ib, stream_getfd(h->sb.s));
	assert_int_equal(evbuffer_get_length(stream_output(h->sb.s)), 0);
	h->spl = splicer_new(
	    h->sa.base, h->pool, ia, ib, 1024 * 1024, 5000, &cbs, h);
	splicer_start(h->spl);
}

static int
hand_spliced(void *arg)
{
	return (((struct hand *)arg)->spliced);
}

/* Read from fd what the pattern says comes at *off, up to want. */
static void
hand_sink(struct event_base *base, int fd, uint64_t *off, uint64_t want)
{
	unsigned char buf[65536];
	ssize_t r, i;
	int tries = 0;

	while (*off < want && tries++ < 20000) {
		r = read(fd, buf, sizeof buf);
		if (r <= 0) {
			loop_for(base, 1);
			continue;
		}
		for (i = 0; i < r; i++)
			assert_int_equal(buf[i], pat(*off + (uint64_t)i));
		*off += (uint64_t)r;
	}
	assert_int_equal(*off, want);
}

/* Read and check what fd holds now. */
static void
hand_sink_some(int fd, uint64_t *off)
{
	unsigned char buf[65536];
	ssize_t r, i;

	while ((r = read(fd, buf, sizeof buf)) > 0) {
		for (i = 0; i < r; i++)
			assert_int_equal(buf[i], pat(*off + (uint64_t)i));
		*off += (uint64_t)r;
	}
}

/*
 * The middle of a transfer goes through splice(2) on the streams'
 * sockets, lent and taken back; the owner's bytes before and after it
 * keep their place.
 */
static void
test_splice_handoff(void **state)
{
	struct event_base *base = event_base_new();
	static unsigned char buf[1024 * 1024 + 200];
	struct hand h;
	int fa[2], fb[2];
	uint64_t off = 0;
	size_t n;

	(void)state;
	memset(&h, 0, sizeof h);
	pair(SOCK_STREAM, fa);
	pair(SOCK_STREAM, fb);
	h.a = fa[1];
	h.b = fb[1];
	tp_set(&h.sa, base, stream_new(base, fa[0], NULL, STREAM_O_CLOSE));
	tp_set(&h.sb, base, stream_new(base, fb[0], NULL, STREAM_O_CLOSE));
	stream_setcb(h.sa.s, hand_read_cb, NULL, NULL, &h);
	stream_enable(h.sa.s, EV_READ);
	pat_fill(buf, 0, sizeof buf);
	h.pool = splice_pool_new();
	/* 100 bytes through the owner, then the splicer takes over. */
	assert_int_equal(write(h.a, buf, 100), 100);
	while (h.spl == NULL)
		loop_for(base, 1);
	/* 1 MiB spliced, written while the streams must not read it. */
	for (n = 0; n < 1024 * 1024;) {
		ssize_t r = write(h.a, buf + 100 + n, 1024 * 1024 - n);

		if (r > 0)
			n += (size_t)r;
		loop_for(base, 1);
		hand_sink_some(h.b, &off);
	}
	loop_until(base, hand_spliced, &h);
	splicer_free(h.spl);
	assert_int_equal(h.moved, 1024 * 1024);
	assert_int_equal(evbuffer_get_length(stream_input(h.sa.s)), 0);
	stream_unlend(h.sa.s);
	stream_unlend(h.sb.s);
	/* The last 100 through the owner again. */
	assert_int_equal(write(h.a, buf + 100 + 1024 * 1024, 100), 100);
	hand_sink(base, h.b, &off, 100 + 1024 * 1024 + 100);
	stream_free(h.sa.s);
	stream_free(h.sb.s);
	splice_pool_free(h.pool);
	close(h.a);
	close(h.b);
	event_base_free(base);
}

/* stream_state_print names the state and the flags. */
static void
test_state_print(void **state)
{
	struct event_base *base = event_base_new();
	struct stream *s;
	char buf[256];
	int fds[2];

	(void)state;
	pair(SOCK_STREAM, fds);
	s = stream_new(base, fds[0], NULL, STREAM_O_CLOSE);
	stream_enable(s, EV_READ);
	evbuffer_add(stream_output(s), "abc", 3);
	assert_true(stream_state_print(s, buf, sizeof buf) > 0);
	assert_non_null(strstr(buf, "open"));
	assert_non_null(strstr(buf, "rw"));
	assert_non_null(strstr(buf, "out=3"));
	stream_free(s);
	close(fds[1]);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo),
		cmocka_unit_test(test_bulk_plain),
		cmocka_unit_test(test_bulk_tls),
		cmocka_unit_test(test_flood_plain),
		cmocka_unit_test(test_flood_tls),
		cmocka_unit_test(test_write_lowat),
		cmocka_unit_test(test_coalesce),
		cmocka_unit_test(test_eof),
		cmocka_unit_test(test_half_close_plain),
		cmocka_unit_test(test_half_close_tls),
		cmocka_unit_test(test_tls_dirty_eof),
		cmocka_unit_test(test_tls_established),
		cmocka_unit_test(test_connect_refused),
		cmocka_unit_test(test_tls_verify_fails),
		cmocka_unit_test(test_tls_not_tls),
		cmocka_unit_test(test_read_timeout),
		cmocka_unit_test(test_timeout_cleared),
		cmocka_unit_test(test_connect_fd_take),
		cmocka_unit_test(test_free_in_callback),
		cmocka_unit_test(test_splice_handoff),
		cmocka_unit_test(test_state_print),
	};
	char path[PATH_MAX];
	const char *mib;

	signal(SIGPIPE, SIG_IGN);
	tls_init();
	if ((certs_dir = getenv("CERTS_DIR")) == NULL || *certs_dir == '\0')
		certs_dir = "build/certs";
	snprintf(path, sizeof path, "%s/server.crt", certs_dir);
	if (access(path, R_OK) != 0) {
		fprintf(stderr,
		    "test_stream: %s missing; run make certs or set "
		    "CERTS_DIR\n",
		    path);
		return (1);
	}
	mib = getenv("STREAM_TEST_MIB");
	bulk_bytes = (size_t)(mib != NULL ? atoi(mib) : 64) * 1024 * 1024;
	return (cmocka_run_group_tests(tests, NULL, NULL));
}
