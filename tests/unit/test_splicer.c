/*
 * Unit tests for lib/splicer.c: moves over socketpairs and loopback TCP in
 * one event loop.  The test writes the source itself and reads the
 * destination itself, and compares every byte with a pseudo-random pattern
 * keyed by its offset in the stream.
 */
#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>
#include <linux/sockios.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include <event2/event.h>
#include <event2/util.h>

#include "clock.h"
#include "splicer.h"

/* How long any one run of the loop may take before the test fails (ms). */
#define TEST_WAIT 5000
/* Bytes the test writes or reads per system call. */
#define TEST_CHUNK (64 * 1024)
/* What lib/splicer.c asks for a pipe; the kernel gives that or less. */
#define TEST_PIPE_MAX (256 * 1024)
#define MIB (1024 * 1024)

enum kind {
	KIND_UNIX, /* two AF_UNIX socketpairs */
	KIND_TCP /* two loopback TCP connections */
};

/* What the feeder does once it has written everything. */
enum feed_end {
	FEED_KEEP, /* nothing: the source stays open */
	FEED_SHUT, /* shutdown(SHUT_WR) */
	FEED_CLOSE, /* close */
	FEED_RESET /* close with SO_LINGER 0: a TCP reset */
};

/*
 * One move: feed -> in (splicer) out -> sink.  The test owns feed and sink;
 * the splicer gets in and out.
 */
struct move {
	struct event_base *m_base;
	struct splice_pool *m_pool;
	struct splicer *m_spl;
	enum kind m_kind;
	int m_feed;
	int m_in;
	int m_out;
	int m_sink;

	struct event *m_fev; /* feed writable */
	struct event *m_trickle; /* timed feeder */
	struct event *m_sev; /* sink readable, or the slow reader's tick */
	struct event *m_limit; /* ends a run that took too long */

	uint64_t m_feed_total; /* bytes to write into feed */
	uint64_t m_fed;
	enum feed_end m_feed_end;
	int m_feed_done;
	size_t m_trickle_bytes; /* timed feeder: bytes per tick */
	uint64_t m_trickle_every; /* timed feeder: ms between ticks */
	uint64_t m_trickle_ms; /* timed feeder: last write */

	int m_read; /* read the sink at all */
	size_t m_slow_chunk; /* slow reader: bytes per tick, 0: not slow */
	uint64_t m_slow_at; /* slow reader: first read, monotonic ms */
	uint64_t m_slow_progress; /* progress when the slow reader began */
	uint64_t m_close_sink_at; /* close the sink after this many bytes */
	uint64_t m_got; /* bytes read from sink */
	uint64_t m_bad; /* offset of the first wrong byte + 1, or 0 */
	int m_sink_eof;

	uint64_t m_progress; /* sum of progress */
	size_t m_nprogress;
	int64_t m_excess; /* most progress beyond what buffers explain */
	int64_t m_held; /* most bytes read from in but not yet written */
	int m_bound; /* measure m_excess and m_held */

	int m_done; /* done calls */
	int m_error;
	uint64_t m_left; /* splicer_left when done was called */
	uint64_t m_done_ms;
	int m_free_in_done; /* splicer_free from done */
	int m_wait_feed; /* the run ends only once the feeder is done */
	int m_timedout;
};

/* Byte off of the stream: splitmix64 of the 8-byte block, one byte of it. */
static uint8_t
pattern_byte(uint64_t off)
{
	uint64_t x;

	x = (off >> 3) + 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return ((uint8_t)(x >> ((off & 7) * 8)));
}

/* Fill buf with the pattern from offset off. */
static void
pattern_fill(uint8_t *buf, size_t len, uint64_t off)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = pattern_byte(off + i);
}

/* Offset of the first byte of buf that is not the pattern from off, or -1. */
static int64_t
pattern_check(const uint8_t *buf, size_t len, uint64_t off)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (buf[i] != pattern_byte(off + i))
			return ((int64_t)(off + i));
	return (-1);
}

/* Descriptors open in this process. */
static int
count_fds(void)
{
	DIR *d;
	struct dirent *de;
	int n = 0;

	d = opendir("/proc/self/fd");
	assert_non_null(d);
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return (n);
}

/* An int socket option. */
static int64_t
sock_int(int fd, int level, int name)
{
	int v = 0;
	socklen_t len = sizeof v;

	assert_int_equal(getsockopt(fd, level, name, &v, &len), 0);
	return (v);
}

/* Bytes waiting to be read on fd. */
static int64_t
sock_inq(int fd)
{
	int v = 0;

	assert_int_equal(ioctl(fd, SIOCINQ, &v), 0);
	return (v);
}

/* Bytes written on TCP socket fd and not acknowledged yet. */
static int64_t
sock_outq(int fd)
{
	int v = 0;

	assert_int_equal(ioctl(fd, SIOCOUTQ, &v), 0);
	return (v);
}

/* A connected pair of nonblocking sockets: fds[0] connects, fds[1] accepts. */
static void
sock_pair(enum kind kind, int fds[2])
{
	struct sockaddr_in sin;
	socklen_t len = sizeof sin;
	int l, c, a;

	if (kind == KIND_UNIX) {
		assert_int_equal(
		    socketpair(AF_UNIX,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds),
		    0);
		return;
	}
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(l != -1);
	assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof sin), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &len), 0);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(c != -1);
	assert_int_equal(connect(c, (struct sockaddr *)&sin, sizeof sin), 0);
	a = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	assert_true(a != -1);
	close(l);
	assert_int_equal(evutil_make_socket_nonblocking(c), 0);
	fds[0] = c;
	fds[1] = a;
}

static void move_check(struct move *);

/* Write the pattern into feed while it takes it; then end the source. */
static void
move_feed_cb(evutil_socket_t fd, short what, void *arg)
{
	struct move *m = arg;
	struct linger reset = { 1, 0 };
	uint8_t buf[TEST_CHUNK];
	size_t len;
	ssize_t n;

	(void)fd;
	(void)what;
	while (m->m_fed < m->m_feed_total) {
		len = sizeof buf;
		if (m->m_feed_total - m->m_fed < len)
			len = (size_t)(m->m_feed_total - m->m_fed);
		pattern_fill(buf, len, m->m_fed);
		n = write(m->m_feed, buf, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return;
		if (n <= 0) {
			/* The splicer stopped reading and the source broke. */
			fail_msg("feed write: %s", strerror(errno));
		}
		m->m_fed += (uint64_t)n;
	}
	event_del(m->m_fev);
	if (m->m_feed_end == FEED_SHUT)
		assert_int_equal(shutdown(m->m_feed, SHUT_WR), 0);
	else if (m->m_feed_end == FEED_CLOSE || m->m_feed_end == FEED_RESET) {
		if (m->m_feed_end == FEED_RESET)
			assert_int_equal(setsockopt(m->m_feed, SOL_SOCKET,
					     SO_LINGER, &reset, sizeof reset),
			    0);
		close(m->m_feed);
		m->m_feed = -1;
	}
	m->m_feed_done = 1;
	move_check(m);
}

/* The timed feeder: a few bytes per tick, until the total. */
static void
move_trickle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct move *m = arg;
	uint8_t buf[256];
	size_t len = m->m_trickle_bytes;

	(void)fd;
	(void)what;
	assert_true(len <= sizeof buf);
	if (m->m_feed_total - m->m_fed < len)
		len = (size_t)(m->m_feed_total - m->m_fed);
	pattern_fill(buf, len, m->m_fed);
	assert_int_equal(write(m->m_feed, buf, len), (ssize_t)len);
	m->m_fed += len;
	m->m_trickle_ms = clock_mono_msec();
	if (m->m_fed == m->m_feed_total) {
		event_del(m->m_trickle);
		m->m_feed_done = 1;
		move_check(m);
	}
}

/* Read at most max bytes from the sink and check them.  0: stop reading. */
static int
move_read(struct move *m, size_t max)
{
	uint8_t buf[TEST_CHUNK];
	int64_t bad;
	size_t len;
	ssize_t n;

	len = max < sizeof buf ? max : sizeof buf;
	if (m->m_close_sink_at != 0 && m->m_got + len > m->m_close_sink_at)
		len = (size_t)(m->m_close_sink_at - m->m_got);
	n = read(m->m_sink, buf, len);
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return (0);
	if (n == -1)
		fail_msg("sink read: %s", strerror(errno));
	if (n == 0) {
		m->m_sink_eof = 1;
		event_del(m->m_sev);
		move_check(m);
		return (0);
	}
	bad = pattern_check(buf, (size_t)n, m->m_got);
	if (bad != -1 && m->m_bad == 0)
		m->m_bad = (uint64_t)bad + 1;
	m->m_got += (uint64_t)n;
	if (m->m_close_sink_at != 0 && m->m_got == m->m_close_sink_at) {
		/* The destination goes away in the middle of the move. */
		event_del(m->m_sev);
		close(m->m_sink);
		m->m_sink = -1;
		m->m_sink_eof = 1;
		move_check(m);
		return (0);
	}
	return (1);
}

/* The sink is readable: read all it has. */
static void
move_sink_cb(evutil_socket_t fd, short what, void *arg)
{
	struct move *m = arg;

	(void)fd;
	(void)what;
	while (move_read(m, TEST_CHUNK))
		;
}

/* The slow reader's tick: after a delay, one small read per tick. */
static void
move_slow_cb(evutil_socket_t fd, short what, void *arg)
{
	struct move *m = arg;

	(void)fd;
	(void)what;
	if (clock_mono_msec() < m->m_slow_at)
		return;
	if (m->m_slow_progress == UINT64_MAX)
		m->m_slow_progress = m->m_progress;
	move_read(m, m->m_slow_chunk);
}

/* The run took too long, or a run_for is over. */
static void
move_limit_cb(evutil_socket_t fd, short what, void *arg)
{
	struct move *m = arg;

	(void)fd;
	(void)what;
	m->m_timedout = 1;
	event_base_loopbreak(m->m_base);
}

/* End the run once the splicer is done and both test ends are finished. */
static void
move_check(struct move *m)
{
	if (m->m_done == 0)
		return;
	if (m->m_wait_feed && !m->m_feed_done)
		return;
	if (m->m_read && !m->m_sink_eof)
		return;
	event_base_loopbreak(m->m_base);
}

/* Count progress, and how far it runs ahead of the reader. */
static void
move_progress(void *arg, size_t n)
{
	struct move *m = arg;
	int64_t v;

	assert_true(n > 0);
	assert_int_equal(m->m_done, 0);
	m->m_progress += n;
	m->m_nprogress++;
	if (!m->m_bound)
		return;
	/* Written but not read: all of it sits in out's and sink's buffers. */
	v = (int64_t)(m->m_progress - m->m_got) -
	    sock_int(m->m_out, SOL_SOCKET, SO_SNDBUF) -
	    sock_int(m->m_sink, SOL_SOCKET, SO_RCVBUF);
	if (v > m->m_excess)
		m->m_excess = v;
	/*
	 * Read from in but not written: in the splicer's pipe.  Bytes fed
	 * and still in flight towards in count as read by the splicer, so
	 * this is at least the truth, never more.
	 */
	v = (int64_t)m->m_fed - sock_inq(m->m_in) - (int64_t)m->m_progress;
	if (m->m_kind == KIND_TCP)
		v -= sock_outq(m->m_feed);
	if (v > m->m_held)
		m->m_held = v;
}

/* Record how the move ended; free the splicer if the test says so. */
static void
move_done(void *arg, int error)
{
	struct move *m = arg;

	m->m_done++;
	m->m_error = error;
	m->m_left = splicer_left(m->m_spl);
	m->m_done_ms = clock_mono_msec();
	if (m->m_free_in_done) {
		splicer_free(m->m_spl);
		m->m_spl = NULL;
	}
	/* The sink sees the end of the stream after the last byte. */
	if (m->m_out != -1)
		shutdown(m->m_out, SHUT_WR);
	move_check(m);
}

static const struct splicer_cbs move_cbs = { move_progress, move_done };

/* Sockets and events for a move on base with pool; nothing runs yet. */
static void
move_open(struct move *m, struct event_base *base, struct splice_pool *pool,
    enum kind kind)
{
	int fds[2];

	memset(m, 0, sizeof *m);
	m->m_base = base;
	m->m_pool = pool;
	m->m_kind = kind;
	sock_pair(kind, fds);
	m->m_feed = fds[0];
	m->m_in = fds[1];
	sock_pair(kind, fds);
	m->m_out = fds[0];
	m->m_sink = fds[1];
	m->m_read = 1;
	m->m_wait_feed = 1;
	m->m_slow_progress = UINT64_MAX;
	m->m_fev = event_new(
	    base, m->m_feed, EV_WRITE | EV_PERSIST, move_feed_cb, m);
	m->m_trickle = event_new(base, -1, EV_PERSIST, move_trickle_cb, m);
	m->m_limit = evtimer_new(base, move_limit_cb, m);
	assert_non_null(m->m_fev);
	assert_non_null(m->m_trickle);
	assert_non_null(m->m_limit);
}

/* Start a splicer of limit bytes and idle_ms, and the feeder and reader. */
static void
move_start(struct move *m, uint64_t limit, uint64_t idle_ms)
{
	struct timeval tv = { 0, 1000 };

	if (m->m_slow_chunk != 0) {
		m->m_sev = event_new(
		    m->m_base, -1, EV_PERSIST, move_slow_cb, m);
		assert_non_null(m->m_sev);
		event_add(m->m_sev, &tv);
	} else if (m->m_read) {
		m->m_sev = event_new(m->m_base, m->m_sink, EV_READ | EV_PERSIST,
		    move_sink_cb, m);
		assert_non_null(m->m_sev);
		event_add(m->m_sev, NULL);
	}
	if (m->m_trickle_bytes != 0) {
		clock_msec_to_tv(m->m_trickle_every, &tv);
		event_add(m->m_trickle, &tv);
	} else if (m->m_fed < m->m_feed_total)
		event_add(m->m_fev, NULL);
	else
		m->m_feed_done = 1;
	m->m_spl = splicer_new(m->m_base, m->m_pool, m->m_in, m->m_out, limit,
	    idle_ms, &move_cbs, m);
	assert_non_null(m->m_spl);
	splicer_start(m->m_spl);
}

/* Run the loop until the move is over; fail after TEST_WAIT ms. */
static void
move_run(struct move *m)
{
	struct timeval tv;

	clock_msec_to_tv(TEST_WAIT, &tv);
	evtimer_add(m->m_limit, &tv);
	/* Done may have come from splicer_start, before any loop. */
	m->m_timedout = 0;
	while (!m->m_timedout) {
		event_base_loop(m->m_base, EVLOOP_ONCE);
		if (m->m_done && (!m->m_wait_feed || m->m_feed_done) &&
		    (!m->m_read || m->m_sink_eof))
			break;
	}
	evtimer_del(m->m_limit);
	assert_false(m->m_timedout);
	assert_int_equal(m->m_done, 1);
	assert_int_equal(m->m_bad, 0);
	/* Unless the sink went away, all that was written was read. */
	if (m->m_close_sink_at == 0)
		assert_int_equal(m->m_progress, m->m_got);
}

/* Run the loop for ms, whatever happens. */
static void
move_run_for(struct move *m, uint64_t ms)
{
	struct timeval tv;

	clock_msec_to_tv(ms, &tv);
	evtimer_add(m->m_limit, &tv);
	m->m_timedout = 0;
	while (!m->m_timedout)
		event_base_loop(m->m_base, EVLOOP_ONCE);
	m->m_timedout = 0;
}

/* Free the splicer (unless done did), the events and the sockets. */
static void
move_close(struct move *m)
{
	splicer_free(m->m_spl);
	m->m_spl = NULL;
	if (m->m_sev != NULL)
		event_free(m->m_sev);
	event_free(m->m_fev);
	event_free(m->m_trickle);
	event_free(m->m_limit);
	if (m->m_feed != -1)
		close(m->m_feed);
	close(m->m_in);
	close(m->m_out);
	if (m->m_sink != -1)
		close(m->m_sink);
}

/* A loop and a pool for one test. */
struct fixture {
	struct event_base *f_base;
	struct splice_pool *f_pool;
};

static int
fixture_setup(void **state)
{
	struct fixture *f;

	f = calloc(1, sizeof *f);
	assert_non_null(f);
	f->f_base = event_base_new();
	assert_non_null(f->f_base);
	f->f_pool = splice_pool_new();
	assert_non_null(f->f_pool);
	*state = f;
	return (0);
}

static int
fixture_teardown(void **state)
{
	struct fixture *f = *state;

	splice_pool_free(f->f_pool);
	event_base_free(f->f_base);
	free(f);
	return (0);
}

/* The SO_RCVLOWAT of fd. */
static int
rcvlowat(int fd)
{
	socklen_t len;
	int v = -1;

	len = sizeof v;
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &len), 0);
	return (v);
}

/* A limited move leaves what follows the limit in the source. */
static void
limit_leaves_rest(struct fixture *f, enum kind kind)
{
	struct move m;
	const uint64_t limit = MIB + 7;
	uint8_t buf[256];
	ssize_t n;

	move_open(&m, f->f_base, f->f_pool, kind);
	m.m_feed_total = limit + 100;
	move_start(&m, limit, 0);
	move_run(&m);
	assert_int_equal(m.m_error, 0);
	assert_int_equal(m.m_got, limit);
	assert_int_equal(m.m_left, 0);
	assert_int_equal(splicer_left(m.m_spl), 0);
	assert_int_equal(m.m_fed, limit + 100);

	/* The 100 bytes after the limit are still there, and nothing more. */
	n = read(m.m_in, buf, sizeof buf);
	assert_int_equal(n, 100);
	assert_int_equal(pattern_check(buf, 100, limit), -1);
	n = read(m.m_in, buf, sizeof buf);
	assert_int_equal(n, -1);
	assert_int_equal(errno, EAGAIN);
	/* The source's low-water mark is back to the default. */
	assert_int_equal(rcvlowat(m.m_in), 1);
	move_close(&m);
}

static void
test_limit_unix(void **state)
{
	limit_leaves_rest(*state, KIND_UNIX);
}

static void
test_limit_tcp(void **state)
{
	limit_leaves_rest(*state, KIND_TCP);
}

/* SPLICER_TO_EOF moves everything until the source shuts down. */
static void
to_eof(struct fixture *f, enum kind kind, enum feed_end end)
{
	struct move m;
	const uint64_t total = 3 * MIB;

	move_open(&m, f->f_base, f->f_pool, kind);
	m.m_feed_total = total;
	m.m_feed_end = end;
	move_start(&m, SPLICER_TO_EOF, 0);
	move_run(&m);
	assert_int_equal(m.m_error, 0);
	assert_int_equal(m.m_got, total);
	assert_int_equal(m.m_progress, total);
	assert_true(m.m_nprogress > 0);
	assert_int_equal(m.m_left, SPLICER_TO_EOF);
	move_close(&m);
}

static void
test_to_eof_unix(void **state)
{
	to_eof(*state, KIND_UNIX, FEED_SHUT);
}

static void
test_to_eof_tcp(void **state)
{
	to_eof(*state, KIND_TCP, FEED_SHUT);
}

static void
test_to_eof_tcp_close(void **state)
{
	to_eof(*state, KIND_TCP, FEED_CLOSE);
}

/* A limited source that ends early: EPIPE, with what it had delivered. */
static void
short_source(struct fixture *f, enum kind kind)
{
	struct move m;

	move_open(&m, f->f_base, f->f_pool, kind);
	m.m_feed_total = 1000;
	m.m_feed_end = FEED_CLOSE;
	move_start(&m, 5000, 0);
	move_run(&m);
	assert_int_equal(m.m_error, EPIPE);
	assert_int_equal(m.m_got, 1000);
	assert_int_equal(m.m_left, 4000);
	move_close(&m);
}

static void
test_short_source_unix(void **state)
{
	short_source(*state, KIND_UNIX);
}

static void
test_short_source_tcp(void **state)
{
	short_source(*state, KIND_TCP);
}

/* The source resets: done with an error, having written what it read. */
static void
test_source_reset_tcp(void **state)
{
	struct fixture *f = *state;
	struct move m;

	move_open(&m, f->f_base, f->f_pool, KIND_TCP);
	m.m_feed_total = 1000;
	m.m_feed_end = FEED_RESET;
	move_start(&m, 5000, 0);
	move_run(&m);
	assert_true(m.m_error == ECONNRESET || m.m_error == EPIPE);
	assert_true(m.m_got <= 1000);
	assert_int_equal(m.m_left, 5000 - m.m_got);
	move_close(&m);
}

/* Nothing arrives: ETIMEDOUT after idle_ms, not much later. */
static void
test_idle(void **state)
{
	struct fixture *f = *state;
	struct move m;
	uint64_t start, took;

	move_open(&m, f->f_base, f->f_pool, KIND_UNIX);
	start = clock_mono_msec();
	move_start(&m, 5000, 200);
	move_run(&m);
	took = m.m_done_ms - start;
	assert_int_equal(m.m_error, ETIMEDOUT);
	assert_int_equal(m.m_got, 0);
	assert_int_equal(m.m_left, 5000);
	assert_true(took >= 200);
	assert_true(took < 2000);
	move_close(&m);
}

/*
 * Bytes every 80 ms keep a 200 ms idle limit away; it strikes 200 ms after
 * the last one.
 */
static void
test_idle_from_last_byte(void **state)
{
	struct fixture *f = *state;
	struct move m;
	uint64_t start, took;

	move_open(&m, f->f_base, f->f_pool, KIND_TCP);
	m.m_feed_total = 40;
	m.m_trickle_bytes = 10;
	m.m_trickle_every = 80;
	m.m_free_in_done = 1;
	start = clock_mono_msec();
	move_start(&m, SPLICER_TO_EOF, 200);
	move_run(&m);
	took = m.m_done_ms - start;
	assert_int_equal(m.m_error, ETIMEDOUT);
	/* All four arrived: no byte was more than 200 ms after the last. */
	assert_int_equal(m.m_got, 40);
	/*
	 * libevent's timers run on a clock that may be coarser than ours:
	 * allow the ticks a little earliness, not a whole tick's.
	 */
	assert_true(took >= 4 * 80 + 200 - 40);
	assert_true(m.m_done_ms - m.m_trickle_ms >= 200);
	assert_true(m.m_done_ms - m.m_trickle_ms < 2000);
	move_close(&m);
}

/*
 * A long body sent slowly is not held back until the source holds the
 * splicer's low-water mark: ten bytes every 30 ms all arrive while the
 * move goes on, and the mark is gone once the splicer is.
 */
static void
test_slow_long_body(void **state)
{
	struct fixture *f = *state;
	struct move m;

	move_open(&m, f->f_base, f->f_pool, KIND_TCP);
	m.m_feed_total = 40;
	m.m_trickle_bytes = 10;
	m.m_trickle_every = 30;
	move_start(&m, MIB, 0);
	move_run_for(&m, 4 * 30 + 200);
	assert_int_equal(m.m_done, 0);
	assert_int_equal(m.m_got, 40);
	assert_int_equal(m.m_progress, 40);
	splicer_free(m.m_spl);
	m.m_spl = NULL;
	assert_int_equal(rcvlowat(m.m_in), 1);
	move_close(&m);
}

/*
 * A reader that waits, then reads 64 KiB per millisecond: everything
 * arrives, and the splicer never runs ahead of what the buffers and its
 * pipe can hold.
 */
static void
slow_consumer(struct fixture *f, enum kind kind)
{
	struct move m;
	const uint64_t total = 8 * MIB;

	move_open(&m, f->f_base, f->f_pool, kind);
	m.m_feed_total = total;
	m.m_feed_end = FEED_SHUT;
	m.m_slow_chunk = TEST_CHUNK;
	m.m_slow_at = clock_mono_msec() + 300;
	m.m_bound = 1;
	m.m_excess = INT64_MIN;
	move_start(&m, SPLICER_TO_EOF, 0);
	move_run(&m);
	assert_int_equal(m.m_error, 0);
	assert_int_equal(m.m_got, total);
	/* The reader's delay did hold the splicer back. */
	assert_true(m.m_slow_progress < total);
	assert_true(m.m_excess <= MIB);
	assert_true(m.m_held <= TEST_PIPE_MAX);
	print_message("  %s: %llu bytes moved before the reader began, "
		      "most ahead of buffers %lld, most held %lld\n",
	    kind == KIND_TCP ? "tcp" : "unix",
	    (unsigned long long)m.m_slow_progress, (long long)m.m_excess,
	    (long long)m.m_held);
	move_close(&m);
}

static void
test_slow_consumer_unix(void **state)
{
	slow_consumer(*state, KIND_UNIX);
}

static void
test_slow_consumer_tcp(void **state)
{
	slow_consumer(*state, KIND_TCP);
}

/* Done may free the splicer on every path that calls it. */
static void
test_free_in_done(void **state)
{
	struct fixture *f = *state;
	struct move m;

	/* Nothing to move: done comes from inside splicer_start. */
	move_open(&m, f->f_base, f->f_pool, KIND_UNIX);
	m.m_free_in_done = 1;
	move_start(&m, 0, 0);
	assert_int_equal(m.m_done, 1);
	assert_null(m.m_spl);
	move_run(&m);
	assert_int_equal(m.m_error, 0);
	assert_int_equal(m.m_got, 0);
	move_close(&m);

	/* The limit reached, over TCP. */
	move_open(&m, f->f_base, f->f_pool, KIND_TCP);
	m.m_feed_total = 2 * MIB;
	m.m_free_in_done = 1;
	move_start(&m, 2 * MIB, 1000);
	move_run(&m);
	assert_int_equal(m.m_error, 0);
	assert_int_equal(m.m_got, 2 * MIB);
	assert_null(m.m_spl);
	move_close(&m);

	/* The source ended. */
	move_open(&m, f->f_base, f->f_pool, KIND_UNIX);
	m.m_feed_total = MIB + 1;
	m.m_feed_end = FEED_SHUT;
	m.m_free_in_done = 1;
	move_start(&m, SPLICER_TO_EOF, 1000);
	move_run(&m);
	assert_int_equal(m.m_error, 0);
	assert_int_equal(m.m_got, MIB + 1);
	move_close(&m);

	/* The source ended early. */
	move_open(&m, f->f_base, f->f_pool, KIND_TCP);
	m.m_feed_total = 3000;
	m.m_feed_end = FEED_CLOSE;
	m.m_free_in_done = 1;
	move_start(&m, 3001, 0);
	move_run(&m);
	assert_int_equal(m.m_error, EPIPE);
	assert_int_equal(m.m_got, 3000);
	move_close(&m);

	/* Idle. */
	move_open(&m, f->f_base, f->f_pool, KIND_UNIX);
	m.m_free_in_done = 1;
	move_start(&m, SPLICER_TO_EOF, 50);
	move_run(&m);
	assert_int_equal(m.m_error, ETIMEDOUT);
	move_close(&m);
}

/* The destination goes away mid-move: done with splice's error, once. */
static void
dest_gone(struct fixture *f, enum kind kind)
{
	struct move m;

	move_open(&m, f->f_base, f->f_pool, kind);
	m.m_feed_total = 8 * MIB;
	m.m_close_sink_at = 100 * 1024;
	m.m_wait_feed = 0;
	m.m_free_in_done = 1;
	move_start(&m, SPLICER_TO_EOF, 0);
	move_run(&m);
	assert_true(m.m_error == EPIPE || m.m_error == ECONNRESET);
	assert_int_equal(m.m_got, 100 * 1024);
	assert_true(m.m_progress >= m.m_got);
	assert_null(m.m_spl);
	move_close(&m);
}

static void
test_dest_gone_unix(void **state)
{
	dest_gone(*state, KIND_UNIX);
}

static void
test_dest_gone_tcp(void **state)
{
	dest_gone(*state, KIND_TCP);
}

/*
 * Out of descriptors, no pipe can be made: the splicer waits and retries,
 * and once descriptors are back the bytes that waited in the source move.
 */
static void
test_no_pipe(void **state)
{
	struct fixture *f = *state;
	struct move m;
	struct rlimit old, rl;
	int lowest;

	move_open(&m, f->f_base, f->f_pool, KIND_UNIX);
	m.m_feed_total = 700 * 1024;
	m.m_feed_end = FEED_SHUT;
	/* Every descriptor below the limit is taken: pipe2 gets EMFILE. */
	lowest = dup(m.m_in);
	assert_true(lowest != -1);
	close(lowest);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	rl = old;
	rl.rlim_cur = (rlim_t)lowest;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	move_start(&m, SPLICER_TO_EOF, 0);
	move_run_for(&m, 250);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_int_equal(m.m_done, 0);
	assert_int_equal(m.m_progress, 0);
	assert_true(m.m_fed > 0);

	move_run(&m);
	assert_int_equal(m.m_error, 0);
	assert_int_equal(m.m_got, 700 * 1024);
	move_close(&m);
}

/* Out of descriptors, an idle move still ends at its idle deadline. */
static void
test_idle_without_pipe(void **state)
{
	struct fixture *f = *state;
	struct move m;
	struct rlimit old, rl;
	int lowest;

	move_open(&m, f->f_base, f->f_pool, KIND_UNIX);
	lowest = dup(m.m_in); /* every descriptor below it is taken */
	assert_true(lowest != -1);
	close(lowest);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	rl = old;
	rl.rlim_cur = (rlim_t)lowest; /* pipe2 now fails with EMFILE */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	move_start(&m, SPLICER_TO_EOF, 200);
	move_run_for(&m, 1000);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_int_equal(m.m_done, 1);
	assert_int_equal(m.m_error, ETIMEDOUT);
	move_close(&m);
}

/*
 * Two moves in turn share the pool's one pipe; freeing the pool closes it.
 * The loop and pool are this test's own, so the count covers them.
 */
static void
test_pool_reuse(void **state)
{
	struct event_base *base;
	struct splice_pool *pool;
	struct move m;
	int before, with_base, i;

	(void)state;
	before = count_fds();
	base = event_base_new();
	assert_non_null(base);
	pool = splice_pool_new();
	assert_non_null(pool);
	with_base = count_fds();

	for (i = 0; i < 2; i++) {
		move_open(&m, base, pool, i == 0 ? KIND_UNIX : KIND_TCP);
		m.m_feed_total = 700 * 1024;
		m.m_feed_end = FEED_SHUT;
		move_start(&m, SPLICER_TO_EOF, 0);
		move_run(&m);
		assert_int_equal(m.m_error, 0);
		assert_int_equal(m.m_got, 700 * 1024);
		move_close(&m);
		/* One pipe, idle in the pool: the second move reused it. */
		assert_int_equal(count_fds(), with_base + 2);
	}
	splice_pool_free(pool);
	assert_int_equal(count_fds(), with_base);
	event_base_free(base);
	assert_int_equal(count_fds(), before);
}

/*
 * splicer_free while its pipe holds bytes closes the pipe instead of
 * pooling it; a later move on the pool sees none of those bytes.
 */
static void
test_free_mid_move(void **state)
{
	struct fixture *f = *state;
	struct move m;
	int before, base_fds;
	int64_t held;

	base_fds = count_fds();
	move_open(&m, f->f_base, f->f_pool, KIND_UNIX);
	before = count_fds();
	m.m_feed_total = 4 * MIB;
	m.m_read = 0;
	move_start(&m, SPLICER_TO_EOF, 0);
	move_run_for(&m, 200);
	assert_int_equal(m.m_done, 0);

	/* Stuck on a full destination, with bytes in the pipe. */
	held = (int64_t)m.m_fed - sock_inq(m.m_in) - (int64_t)m.m_progress;
	assert_true(held > 0);
	assert_true(held <= TEST_PIPE_MAX);
	assert_true(m.m_progress > 0);
	assert_int_equal(count_fds(), before + 2);
	splicer_free(m.m_spl);
	m.m_spl = NULL;
	assert_int_equal(count_fds(), before);
	move_close(&m);
	assert_int_equal(count_fds(), base_fds);

	/* The pool is empty and its next pipe is clean. */
	move_open(&m, f->f_base, f->f_pool, KIND_UNIX);
	m.m_feed_total = MIB;
	move_start(&m, MIB, 0);
	move_run(&m);
	assert_int_equal(m.m_error, 0);
	assert_int_equal(m.m_got, MIB);
	move_close(&m);
	assert_int_equal(count_fds(), base_fds + 2);
	splice_pool_free(f->f_pool);
	f->f_pool = NULL;
	assert_int_equal(count_fds(), base_fds);
}

#define T(fn) \
	cmocka_unit_test_setup_teardown(fn, fixture_setup, fixture_teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_limit_unix),
		T(test_limit_tcp),
		T(test_to_eof_unix),
		T(test_to_eof_tcp),
		T(test_to_eof_tcp_close),
		T(test_short_source_unix),
		T(test_short_source_tcp),
		T(test_source_reset_tcp),
		T(test_idle),
		T(test_idle_from_last_byte),
		T(test_slow_consumer_unix),
		T(test_slow_consumer_tcp),
		T(test_free_in_done),
		T(test_dest_gone_unix),
		T(test_dest_gone_tcp),
		T(test_no_pipe),
		T(test_idle_without_pipe),
		cmocka_unit_test(test_pool_reuse),
		T(test_slow_long_body),
		T(test_free_mid_move),
	};

	/* Splicing into a peer that has gone must fail, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	return (cmocka_run_group_tests(tests, NULL, NULL));
}
