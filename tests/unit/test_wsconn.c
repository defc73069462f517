/*
 * Unit tests for lib/wsconn.c: connections over a socketpair in one event
 * loop, wsconn against wsconn or against raw bytes we write and read
 * ourselves.  The handshake is test_wshandshake.c's, the frame parser
 * test_wsframe.c's.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <signal.h>
#include <setjmp.h>
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
#include <event2/util.h>

#include "clock.h"
#include "stream.h"
#include "wsconn.h"

/* How long any one wait may take before the test fails (ms). */
#define TEST_WAIT 5000

/* One end of a connection, as its owner sees it. */
struct peer {
	struct wsconn *p_ws;
	int p_nmsg; /* messages received */
	int p_binary; /* last message was binary */
	uint8_t *p_last; /* copy of the last message */
	size_t p_last_len;
	size_t p_bytes; /* all message bytes received */
	int p_closed; /* on_close calls */
	uint16_t p_code;
	char p_reason[WS_CLOSE_REASON_MAX + 1];
	int p_writable; /* on_writable calls */
	int p_free_on_message; /* wsconn_free from on_message */
	int p_free_on_close; /* wsconn_free from on_close */
	int p_send_on_message; /* answer "ack" from on_message */
};

/* Two ends over a socketpair in one loop; either may be raw (fd only). */
struct pair {
	struct event_base *base;
	struct event *tick; /* keeps EVLOOP_ONCE from blocking forever */
	int fds[2];
	struct stream *s[2];
	struct peer srv;
	struct peer cli;
};

/* Record a message, and free or answer if the test says so. */
static void
test_on_message(void *arg, int is_binary, const uint8_t *data, size_t len)
{
	struct peer *p = arg;

	assert_non_null(data);
	p->p_nmsg++;
	p->p_binary = is_binary;
	p->p_bytes += len;
	free(p->p_last);
	p->p_last = malloc(len + 1);
	assert_non_null(p->p_last);
	memcpy(p->p_last, data, len);
	p->p_last_len = len;
	if (p->p_send_on_message)
		assert_int_equal(
		    wsconn_send(p->p_ws, 0, (const uint8_t *)"ack", 3), 0);
	if (p->p_free_on_message) {
		wsconn_free(p->p_ws);
		p->p_ws = NULL;
	}
}

/* Record how the connection ended. */
static void
test_on_close(void *arg, uint16_t code, const char *reason)
{
	struct peer *p = arg;

	assert_non_null(reason);
	p->p_closed++;
	p->p_code = code;
	snprintf(p->p_reason, sizeof p->p_reason, "%s", reason);
	if (p->p_free_on_close) {
		wsconn_free(p->p_ws);
		p->p_ws = NULL;
	}
}

/* Count drain notifications. */
static void
test_on_writable(void *arg)
{
	struct peer *p = arg;

	p->p_writable++;
}

static const struct wsconn_cbs test_cbs = {
	.on_message = test_on_message,
	.on_close = test_on_close,
	.on_writable = test_on_writable,
};

/* Set by test_setup_buf: the tests below run with test_buf_cbs. */
static int test_buf_mode;

/*
 * Record a message handed over as an evbuffer, then take part of it (as
 * an owner moving the payload would): wsconn drops the rest.
 */
static void
test_on_message_buf(void *arg, int is_binary, struct evbuffer *msg)
{
	size_t len = evbuffer_get_length(msg);
	struct evbuffer *keep;
	const uint8_t *data;

	data = evbuffer_pullup(msg, -1);
	test_on_message(
	    arg, is_binary, data != NULL ? data : (const uint8_t *)"", len);
	keep = evbuffer_new();
	assert_non_null(keep);
	assert_int_equal(
	    evbuffer_remove_buffer(msg, keep, len / 2), (int)(len / 2));
	evbuffer_free(keep);
}

static const struct wsconn_cbs test_buf_cbs = {
	.on_message = test_on_message, /* not called: the next wins */
	.on_close = test_on_close,
	.on_writable = test_on_writable,
	.on_message_buf = test_on_message_buf,
};

/* The callbacks the tests give their wsconns. */
static const struct wsconn_cbs *
test_callbacks(void)
{
	return (test_buf_mode ? &test_buf_cbs : &test_cbs);
}

/* Run a test with messages handed over as evbuffers. */
static int
test_setup_buf(void **state)
{
	(void)state;
	test_buf_mode = 1;
	return (0);
}

/* Back to plain on_message. */
static int
test_teardown_buf(void **state)
{
	(void)state;
	test_buf_mode = 0;
	return (0);
}

/* Nothing; the tick only wakes the loop. */
static void
test_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
}

/*
 * Make a socketpair and a loop; give end 0 a server wsconn unless
 * raw_srv, and end 1 a client wsconn unless raw_cli.
 */
static void
pair_open(
    struct pair *p, size_t srv_max, size_t cli_max, int raw_srv, int raw_cli)
{
	struct timeval tv = { 0, 10000 };

	memset(p, 0, sizeof *p);
	p->base = event_base_new();
	assert_non_null(p->base);
	p->tick = event_new(p->base, -1, EV_PERSIST, test_tick_cb, NULL);
	assert_non_null(p->tick);
	event_add(p->tick, &tv);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fds), 0);
	assert_int_equal(evutil_make_socket_nonblocking(p->fds[0]), 0);
	assert_int_equal(evutil_make_socket_nonblocking(p->fds[1]), 0);
	if (!raw_srv) {
		p->s[0] = stream_new(p->base, p->fds[0], NULL, STREAM_O_CLOSE);
		assert_non_null(p->s[0]);
		p->srv.p_ws = wsconn_new(
		    p->base, p->s[0], 0, test_callbacks(), &p->srv, srv_max);
		assert_non_null(p->srv.p_ws);
		p->fds[0] = -1;
	}
	if (!raw_cli) {
		p->s[1] = stream_new(p->base, p->fds[1], NULL, STREAM_O_CLOSE);
		assert_non_null(p->s[1]);
		p->cli.p_ws = wsconn_new(
		    p->base, p->s[1], 1, test_callbacks(), &p->cli, cli_max);
		assert_non_null(p->cli.p_ws);
		p->fds[1] = -1;
	}
}

/* Free both ends, the loop, and what the peers recorded. */
static void
pair_close(struct pair *p)
{
	wsconn_free(p->srv.p_ws);
	wsconn_free(p->cli.p_ws);
	/* Let deferred frees run. */
	event_base_loop(p->base, EVLOOP_NONBLOCK);
	if (p->fds[0] != -1)
		close(p->fds[0]);
	if (p->fds[1] != -1)
		close(p->fds[1]);
	event_free(p->tick);
	event_base_free(p->base);
	free(p->srv.p_last);
	free(p->cli.p_last);
}

/* Run the loop until cond holds; fail the test after TEST_WAIT ms. */
#define RUN_UNTIL(p, cond) \
	do { \
		uint64_t end_ = clock_mono_msec() + TEST_WAIT; \
		while (!(cond) && clock_mono_msec() < end_) \
			event_base_loop((p)->base, EVLOOP_ONCE); \
		assert_true(cond); \
	} while (0)

/* Run the loop for ms milliseconds. */
static void
run_for(struct pair *p, unsigned ms)
{
	uint64_t end = clock_mono_msec() + ms;

	while (clock_mono_msec() < end)
		event_base_loop(p->base, EVLOOP_ONCE);
}

/* Write all of len bytes to a raw nonblocking fd. */
static void
raw_write(int fd, const void *buf, size_t len)
{
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
}

/*
 * Read from a raw fd while running the loop, until want bytes or EOF.
 * Returns the bytes read; *eof tells whether the peer closed.
 */
static size_t
raw_read(struct pair *p, int fd, uint8_t *buf, size_t want, int *eof)
{
	uint64_t end = clock_mono_msec() + TEST_WAIT;
	size_t got = 0;
	ssize_t n;

	*eof = 0;
	while (got < want && clock_mono_msec() < end) {
		n = read(fd, buf + got, want - got);
		if (n == 0) {
			*eof = 1;
			break;
		}
		if (n > 0) {
			got += n;
			continue;
		}
		assert_true(errno == EAGAIN || errno == EWOULDBLOCK);
		event_base_loop(p->base, EVLOOP_ONCE);
	}
	return (got);
}

/* Wait for EOF on a raw fd, discarding what comes first. */
static void
raw_wait_eof(struct pair *p, int fd)
{
	uint8_t buf[256];
	int eof = 0;

	while (!eof)
		raw_read(p, fd, buf, sizeof buf, &eof);
}

/* Fill len bytes with a pattern that shows misplaced bytes. */
static uint8_t *
pattern(size_t len, unsigned seed)
{
	uint8_t *b = malloc(len != 0 ? len : 1);
	size_t i;

	assert_non_null(b);
	for (i = 0; i < len; i++)
		b[i] = (uint8_t)((i * 31 + seed) ^ (i >> 8));
	return (b);
}

/* Messages of every kind and size arrive whole, both ways. */
static void
test_roundtrip(void **state)
{
	struct pair p;
	const size_t big = (size_t)1 << 20;
	uint8_t *blob;

	(void)state;
	pair_open(&p, 0, 0, 0, 0);

	assert_int_equal(
	    wsconn_send(p.cli.p_ws, 0, (const uint8_t *)"hello", 5), 0);
	RUN_UNTIL(&p, p.srv.p_nmsg == 1);
	assert_false(p.srv.p_binary);
	assert_int_equal(p.srv.p_last_len, 5);
	assert_memory_equal(p.srv.p_last, "hello", 5);

	assert_int_equal(
	    wsconn_send(p.srv.p_ws, 1, (const uint8_t *)"\0\1\2\377", 4), 0);
	RUN_UNTIL(&p, p.cli.p_nmsg == 1);
	assert_true(p.cli.p_binary);
	assert_int_equal(p.cli.p_last_len, 4);
	assert_memory_equal(p.cli.p_last, "\0\1\2\377", 4);

	/* 1 MiB both ways; queued until the loop writes it. */
	blob = pattern(big, 7);
	assert_int_equal(wsconn_send(p.cli.p_ws, 1, blob, big), 0);
	assert_true(wsconn_queued(p.cli.p_ws) >= big);
	RUN_UNTIL(&p, p.srv.p_nmsg == 2);
	assert_true(p.srv.p_binary);
	assert_int_equal(p.srv.p_last_len, big);
	assert_memory_equal(p.srv.p_last, blob, big);
	RUN_UNTIL(&p, wsconn_queued(p.cli.p_ws) == 0);
	free(blob);

	blob = pattern(big, 99);
	assert_int_equal(wsconn_send(p.srv.p_ws, 1, blob, big), 0);
	RUN_UNTIL(&p, p.cli.p_nmsg == 2);
	assert_int_equal(p.cli.p_last_len, big);
	assert_memory_equal(p.cli.p_last, blob, big);
	free(blob);

	/* Empty text and empty binary messages. */
	assert_int_equal(wsconn_send(p.cli.p_ws, 0, NULL, 0), 0);
	RUN_UNTIL(&p, p.srv.p_nmsg == 3);
	assert_false(p.srv.p_binary);
	assert_int_equal(p.srv.p_last_len, 0);
	assert_int_equal(wsconn_send(p.srv.p_ws, 1, (const uint8_t *)"", 0), 0);
	RUN_UNTIL(&p, p.cli.p_nmsg == 3);
	assert_true(p.cli.p_binary);
	assert_int_equal(p.cli.p_last_len, 0);

	/* Many small messages keep their order. */
	for (unsigned i = 0; i < 100; i++) {
		uint8_t b = (uint8_t)i;

		assert_int_equal(wsconn_send(p.cli.p_ws, 1, &b, 1), 0);
	}
	RUN_UNTIL(&p, p.srv.p_nmsg == 103);
	assert_int_equal(p.srv.p_last[0], 99);

	/* A send from inside on_message. */
	p.srv.p_send_on_message = 1;
	assert_int_equal(
	    wsconn_send(p.cli.p_ws, 0, (const uint8_t *)"question", 8), 0);
	RUN_UNTIL(&p, p.cli.p_nmsg == 4);
	assert_memory_equal(p.cli.p_last, "ack", 3);

	assert_int_equal(p.srv.p_closed + p.cli.p_closed, 0);
	pair_close(&p);
}

/* A message over the limit closes with 1009 on both sides. */
static void
test_too_big(void **state)
{
	struct pair p;
	uint8_t *blob;

	(void)state;
	pair_open(&p, 1024, 0, 0, 0);
	blob = pattern(1024, 1);
	assert_int_equal(wsconn_send(p.cli.p_ws, 1, blob, 1024), 0);
	RUN_UNTIL(&p, p.srv.p_nmsg == 1);
	free(blob);

	blob = pattern(2000, 1);
	assert_int_equal(wsconn_send(p.cli.p_ws, 1, blob, 2000), 0);
	free(blob);
	RUN_UNTIL(&p, p.srv.p_closed && p.cli.p_closed);
	assert_int_equal(p.srv.p_nmsg, 1);
	assert_int_equal(p.srv.p_code, WS_CLOSE_TOO_BIG);
	assert_string_equal(p.srv.p_reason, "message too big");
	assert_int_equal(p.cli.p_code, WS_CLOSE_TOO_BIG);
	assert_string_equal(p.cli.p_reason, "");
	/* Closed: nothing more goes out. */
	assert_int_equal(
	    wsconn_send(p.srv.p_ws, 0, (const uint8_t *)"x", 1), -1);
	assert_int_equal(wsconn_close(p.srv.p_ws, 1000, NULL), -1);
	assert_int_equal(wsconn_queued(p.srv.p_ws), 0);
	pair_close(&p);
}

/* A close handshake started by the client, and by the server. */
static void
test_clean_close(void **state)
{
	struct pair p;
	int from_client;

	(void)state;
	for (from_client = 0; from_client <= 1; from_client++) {
		struct peer *us, *them;

		pair_open(&p, 0, 0, 0, 0);
		us = from_client ? &p.cli : &p.srv;
		them = from_client ? &p.srv : &p.cli;
		assert_int_equal(
		    wsconn_send(us->p_ws, 0, (const uint8_t *)"last", 4), 0);
		assert_int_equal(wsconn_close(us->p_ws, 4000, "bye"), 0);
		/* Closing: no more sends, no second close. */
		assert_int_equal(
		    wsconn_send(us->p_ws, 0, (const uint8_t *)"x", 1), -1);
		assert_int_equal(wsconn_close(us->p_ws, 1000, NULL), -1);
		RUN_UNTIL(&p, us->p_closed && them->p_closed);
		assert_int_equal(them->p_nmsg, 1);
		assert_int_equal(them->p_code, 4000);
		assert_string_equal(them->p_reason, "bye");
		assert_int_equal(us->p_code, 4000);
		assert_string_equal(us->p_reason, "bye");
		run_for(&p, 20);
		assert_int_equal(us->p_closed, 1);
		assert_int_equal(them->p_closed, 1);
		pair_close(&p);
	}
}

/* A close without a code reads as 1005; bad codes are refused. */
static void
test_close_codes(void **state)
{
	struct pair p;
	char reason[401];
	size_t i;

	(void)state;
	pair_open(&p, 0, 0, 0, 0);
	assert_int_equal(wsconn_close(p.srv.p_ws, 1005, NULL), -1);
	assert_int_equal(wsconn_close(p.srv.p_ws, 1006, NULL), -1);
	assert_int_equal(wsconn_close(p.srv.p_ws, 1004, NULL), -1);
	assert_int_equal(wsconn_close(p.srv.p_ws, 999, NULL), -1);
	assert_int_equal(wsconn_close(p.srv.p_ws, 1016, NULL), -1);
	assert_int_equal(wsconn_close(p.srv.p_ws, 1015, NULL), -1);
	assert_int_equal(wsconn_close(p.srv.p_ws, 5000, NULL), -1);
	assert_int_equal(wsconn_close(p.srv.p_ws, 0, "ignored"), 0);
	RUN_UNTIL(&p, p.srv.p_closed && p.cli.p_closed);
	assert_int_equal(p.cli.p_code, WS_CLOSE_NO_STATUS);
	assert_string_equal(p.cli.p_reason, "");
	assert_int_equal(p.srv.p_code, WS_CLOSE_NO_STATUS);
	pair_close(&p);

	/* A long reason is cut at a character boundary. */
	pair_open(&p, 0, 0, 0, 0);
	for (i = 0; i < 200; i++)
		memcpy(reason + 2 * i, "\xc3\xa9", 2);
	reason[400] = '\0';
	assert_int_equal(wsconn_close(p.cli.p_ws, 1001, reason), 0);
	RUN_UNTIL(&p, p.srv.p_closed && p.cli.p_closed);
	assert_int_equal(p.srv.p_code, 1001);
	assert_int_equal(strlen(p.srv.p_reason), 122);
	assert_memory_equal(p.srv.p_reason, reason, 122);
	pair_close(&p);
}

/* The peer going away without a close frame gives 1006. */
static void
test_eof(void **state)
{
	struct pair p;

	(void)state;
	pair_open(&p, 0, 0, 0, 0);
	assert_int_equal(
	    wsconn_send(p.srv.p_ws, 0, (const uint8_t *)"hi", 2), 0);
	RUN_UNTIL(&p, p.cli.p_nmsg == 1);
	/* Freed from outside its callbacks: at once, fd closed, no on_close. */
	wsconn_free(p.cli.p_ws);
	p.cli.p_ws = NULL;
	RUN_UNTIL(&p, p.srv.p_closed);
	assert_int_equal(p.srv.p_code, WS_CLOSE_ABNORMAL);
	assert_string_equal(p.srv.p_reason, "the peer closed the connection");
	assert_int_equal(p.cli.p_closed, 0);
	pair_close(&p);
}

/* An unmasked frame to a server is a protocol error: close 1002. */
static void
test_unmasked_to_server(void **state)
{
	struct pair p;
	uint8_t buf[16];
	int eof;

	(void)state;
	pair_open(&p, 0, 0, 0, 1);
	raw_write(p.fds[1], "\x81\x05hello", 7);
	RUN_UNTIL(&p, p.srv.p_closed);
	assert_int_equal(p.srv.p_nmsg, 0);
	assert_int_equal(p.srv.p_code, WS_CLOSE_PROTOCOL_ERROR);
	assert_string_equal(p.srv.p_reason, "an unmasked frame from a client");
	/* The server sent close 1002 (0x03ea), unmasked, then hung up. */
	assert_int_equal(raw_read(&p, p.fds[1], buf, 4, &eof), 4);
	assert_memory_equal(buf, "\x88\x02\x03\xea", 4);
	raw_wait_eof(&p, p.fds[1]);
	pair_close(&p);
}

/* A masked frame to a client is a protocol error too. */
static void
test_masked_to_client(void **state)
{
	struct pair p;

	(void)state;
	pair_open(&p, 0, 0, 1, 0);
	raw_write(p.fds[0], "\x81\x82\0\0\0\0hi", 8);
	RUN_UNTIL(&p, p.cli.p_closed);
	assert_int_equal(p.cli.p_nmsg, 0);
	assert_int_equal(p.cli.p_code, WS_CLOSE_PROTOCOL_ERROR);
	raw_wait_eof(&p, p.fds[0]);
	pair_close(&p);
}

/* Raw frames reach the server; pings get pongs; bad UTF-8 gives 1007. */
static void
test_raw_frames(void **state)
{
	struct pair p;
	uint8_t buf[16];
	int eof;

	(void)state;
	pair_open(&p, 0, 0, 0, 1);
	/* Masked with key 0, so the payload reads as is. */
	raw_write(p.fds[1], "\x81\x82\0\0\0\0hi", 8);
	RUN_UNTIL(&p, p.srv.p_nmsg == 1);
	assert_memory_equal(p.srv.p_last, "hi", 2);

	/* A message in two fragments arrives as one. */
	raw_write(p.fds[1], "\x02\x82\0\0\0\0ab\x80\x81\0\0\0\0c", 15);
	RUN_UNTIL(&p, p.srv.p_nmsg == 2);
	assert_true(p.srv.p_binary);
	assert_int_equal(p.srv.p_last_len, 3);
	assert_memory_equal(p.srv.p_last, "abc", 3);

	raw_write(p.fds[1], "\x89\x82\0\0\0\0pp", 8);
	assert_int_equal(raw_read(&p, p.fds[1], buf, 4, &eof), 4);
	assert_memory_equal(buf, "\x8a\x02pp", 4);

	raw_write(p.fds[1], "\x81\x82\0\0\0\0\xff\xfe", 8);
	RUN_UNTIL(&p, p.srv.p_closed);
	assert_int_equal(p.srv.p_nmsg, 2);
	assert_int_equal(p.srv.p_code, WS_CLOSE_INVALID_DATA);
	assert_int_equal(raw_read(&p, p.fds[1], buf, 4, &eof), 4);
	assert_memory_equal(buf, "\x88\x02\x03\xef", 4);
	pair_close(&p);
}

/* A client that sends a close frame and then nothing: we answer and go. */
static void
test_raw_close(void **state)
{
	struct pair p;
	uint8_t buf[16];
	int eof;

	(void)state;
	pair_open(&p, 0, 0, 0, 1);
	/* Close 1000 "ok", masked with key 0. */
	raw_write(p.fds[1], "\x88\x84\0\0\0\0\x03\xe8ok", 10);
	RUN_UNTIL(&p, p.srv.p_closed);
	assert_int_equal(p.srv.p_code, 1000);
	assert_string_equal(p.srv.p_reason, "ok");
	assert_int_equal(raw_read(&p, p.fds[1], buf, 6, &eof), 6);
	assert_memory_equal(buf, "\x88\x04\x03\xe8ok", 6);
	raw_wait_eof(&p, p.fds[1]);
	pair_close(&p);

	/* An answer to a message just before the close goes out first. */
	pair_open(&p, 0, 0, 0, 1);
	p.srv.p_send_on_message = 1;
	raw_write(p.fds[1], "\x81\x81\0\0\0\0q\x88\x82\0\0\0\0\x03\xe8", 15);
	RUN_UNTIL(&p, p.srv.p_closed);
	assert_int_equal(p.srv.p_nmsg, 1);
	assert_int_equal(p.srv.p_code, 1000);
	assert_int_equal(raw_read(&p, p.fds[1], buf, 9, &eof), 9);
	assert_memory_equal(buf,
	    "\x81\x03"
	    "ack"
	    "\x88\x02\x03\xe8",
	    9);
	raw_wait_eof(&p, p.fds[1]);
	pair_close(&p);
}

/*
 * Close codes are received and echoed as sent, 1012-1014 (registered
 * after RFC 6455, refused by wslay's receive side) too, whatever the
 * masking key and however the frame is cut; reserved and unassigned
 * ones are refused with 1002.
 */
static void
test_raw_close_codes(void **state)
{
	static const uint16_t taken[] = { 1000, 1001, 1002, 1003, 1007, 1008,
		1009, 1010, 1011, 1012, 1013, 1014, 3000, 4000, 4999 };
	static const uint16_t refused[] = { 0, 999, 1004, 1005, 1006, 1015,
		1016, 2999, 5000, 65535 };
	struct pair p;
	uint8_t buf[16], f[8] = { 0x88, 0x82, 0, 0, 0, 0 };
	size_t i;
	int eof;

	(void)state;
	for (i = 0; i < sizeof taken / sizeof taken[0]; i++) {
		pair_open(&p, 0, 0, 0, 1);
		f[6] = (uint8_t)(taken[i] >> 8);
		f[7] = (uint8_t)taken[i];
		raw_write(p.fds[1], f, 8);
		RUN_UNTIL(&p, p.srv.p_closed);
		assert_int_equal(p.srv.p_code, taken[i]);
		assert_int_equal(raw_read(&p, p.fds[1], buf, 4, &eof), 4);
		assert_memory_equal(buf, "\x88\x02", 2);
		assert_memory_equal(buf + 2, f + 6, 2);
		raw_wait_eof(&p, p.fds[1]);
		pair_close(&p);
	}
	for (i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		pair_open(&p, 0, 0, 0, 1);
		f[6] = (uint8_t)(refused[i] >> 8);
		f[7] = (uint8_t)refused[i];
		raw_write(p.fds[1], f, 8);
		RUN_UNTIL(&p, p.srv.p_closed);
		assert_int_equal(p.srv.p_code, WS_CLOSE_PROTOCOL_ERROR);
		assert_string_equal(p.srv.p_reason, "an invalid close code");
		assert_int_equal(raw_read(&p, p.fds[1], buf, 4, &eof), 4);
		assert_memory_equal(buf, "\x88\x02\x03\xea", 4);
		raw_wait_eof(&p, p.fds[1]);
		pair_close(&p);
	}

	/* 1012 "replaced", masked with a key that is not zero. */
	pair_open(&p, 0, 0, 0, 1);
	raw_write(p.fds[1],
	    "\x88\x8a\x11\x22\x33\x44"
	    "\x12\xd6\x41\x21\x61\x4e\x52\x27\x74\x46",
	    16);
	RUN_UNTIL(&p, p.srv.p_closed);
	assert_int_equal(p.srv.p_code, 1012);
	assert_string_equal(p.srv.p_reason, "replaced");
	assert_int_equal(raw_read(&p, p.fds[1], buf, 12, &eof), 12);
	assert_memory_equal(buf, "\x88\x0a\x03\xf4replaced", 12);
	pair_close(&p);

	/* 1014, with the header and the payload in two reads. */
	pair_open(&p, 0, 0, 0, 1);
	raw_write(p.fds[1], "\x88\x82\0\0", 4);
	run_for(&p, 50);
	raw_write(p.fds[1], "\0\0\x03\xf6", 4);
	RUN_UNTIL(&p, p.srv.p_closed);
	assert_int_equal(p.srv.p_code, 1014);
	pair_close(&p);

	/* Nothing after the close frame is read, whatever it looks like. */
	pair_open(&p, 0, 0, 0, 1);
	raw_write(p.fds[1],
	    "\x88\x82\0\0\0\0\x0f\xa0"
	    "\x88\x82\0\0\0\0\x03\xf4",
	    16);
	RUN_UNTIL(&p, p.srv.p_closed);
	assert_int_equal(p.srv.p_code, 4000);
	assert_int_equal(raw_read(&p, p.fds[1], buf, 4, &eof), 4);
	assert_memory_equal(buf, "\x88\x02\x0f\xa0", 4);
	pair_close(&p);
}

/* We close, the peer never answers: the transport goes after the timeout. */
static void
test_close_timeout(void **state)
{
	struct pair p;
	uint64_t start;

	(void)state;
	pair_open(&p, 0, 0, 0, 1);
	start = clock_mono_msec();
	assert_int_equal(wsconn_close(p.srv.p_ws, 1000, NULL), 0);
	run_for(&p, 100);
	assert_int_equal(p.srv.p_closed, 0);
	{
		uint64_t end = clock_mono_msec() + WSCONN_CLOSE_TIMEOUT * 1000 +
		    TEST_WAIT;

		while (!p.srv.p_closed && clock_mono_msec() < end)
			event_base_loop(p.base, EVLOOP_ONCE);
	}
	assert_int_equal(p.srv.p_closed, 1);
	/* libevent measures from its cached time: allow a little early. */
	assert_true(
	    clock_mono_msec() - start >= WSCONN_CLOSE_TIMEOUT * 1000 - 100);
	assert_int_equal(p.srv.p_code, WS_CLOSE_ABNORMAL);
	assert_string_equal(p.srv.p_reason, "the closing handshake timed out");
	pair_close(&p);
}

/* Freeing from inside on_message and on_close is deferred and safe. */
static void
test_free_in_callbacks(void **state)
{
	struct pair p;

	(void)state;
	pair_open(&p, 0, 0, 0, 0);
	p.srv.p_free_on_message = 1;
	/* Two messages in one read: the second must not reach a freed one. */
	assert_int_equal(
	    wsconn_send(p.cli.p_ws, 0, (const uint8_t *)"a", 1), 0);
	assert_int_equal(
	    wsconn_send(p.cli.p_ws, 0, (const uint8_t *)"b", 1), 0);
	RUN_UNTIL(&p, p.srv.p_ws == NULL);
	RUN_UNTIL(&p, p.cli.p_closed);
	assert_int_equal(p.srv.p_nmsg, 1);
	assert_int_equal(p.srv.p_closed, 0);
	assert_int_equal(p.cli.p_code, WS_CLOSE_ABNORMAL);
	pair_close(&p);

	pair_open(&p, 0, 0, 0, 0);
	p.srv.p_free_on_close = 1;
	p.cli.p_free_on_close = 1;
	assert_int_equal(wsconn_close(p.cli.p_ws, 1000, "done"), 0);
	RUN_UNTIL(&p, p.srv.p_ws == NULL && p.cli.p_ws == NULL);
	assert_int_equal(p.srv.p_code, 1000);
	assert_int_equal(p.cli.p_code, 1000);
	pair_close(&p);
}

/*
 * A peer that does not read: our queue passes the high watermark, we stop
 * reading its messages, the send limit holds, and when it reads again we
 * hear on_writable and read again.
 */
static void
test_backpressure(void **state)
{
	struct pair p;
	const size_t mib = (size_t)1 << 20;
	uint8_t *blob;
	int sent = 0;

	(void)state;
	pair_open(&p, 0, 0, 0, 0);
	stream_disable(p.s[1], EV_READ);
	blob = pattern(mib, 3);
	while (wsconn_queued(p.srv.p_ws) <= WSCONN_HIWAT + mib) {
		assert_int_equal(wsconn_send(p.srv.p_ws, 1, blob, mib), 0);
		sent++;
	}
	run_for(&p, 50);
	assert_true(wsconn_queued(p.srv.p_ws) > WSCONN_HIWAT);

	/* The client's message waits while the server is over its mark. */
	assert_int_equal(
	    wsconn_send(p.cli.p_ws, 0, (const uint8_t *)"ping", 4), 0);
	run_for(&p, 200);
	assert_int_equal(p.srv.p_nmsg, 0);
	assert_int_equal(p.srv.p_writable, 0);

	/* The send limit turns a runaway producer into an error. */
	while (wsconn_send(p.srv.p_ws, 1, blob, mib) == 0)
		sent++;
	assert_true(wsconn_queued(p.srv.p_ws) <= WSCONN_QUEUE_LIMIT);
	assert_true(wsconn_queued(p.srv.p_ws) + mib > WSCONN_QUEUE_LIMIT);
	free(blob);

	stream_enable(p.s[1], EV_READ);
	RUN_UNTIL(&p, p.cli.p_nmsg == sent && p.srv.p_nmsg == 1);
	assert_int_equal(p.cli.p_bytes, (size_t)sent * mib);
	assert_memory_equal(p.srv.p_last, "ping", 4);
	RUN_UNTIL(&p, p.srv.p_writable >= 1);
	RUN_UNTIL(&p, wsconn_queued(p.srv.p_ws) == 0);
	assert_int_equal(p.srv.p_closed + p.cli.p_closed, 0);
	pair_close(&p);
}

/* Frames already in the input when the wsconn starts are not lost. */
static void
test_early_input(void **state)
{
	struct pair p;
	struct stream *s;

	(void)state;
	pair_open(&p, 0, 0, 1, 1);
	s = stream_new(p.base, p.fds[0], NULL, STREAM_O_CLOSE);
	assert_non_null(s);
	p.fds[0] = -1;
	/* As if read together with the upgrade request. */
	raw_write(p.fds[1], "\x81\x82\0\0\0\0hi", 8);
	stream_enable(s, EV_READ);
	RUN_UNTIL(&p, evbuffer_get_length(stream_input(s)) == 8);
	stream_disable(s, EV_READ);
	p.srv.p_ws = wsconn_new(p.base, s, 0, test_callbacks(), &p.srv, 0);
	assert_non_null(p.srv.p_ws);
	RUN_UNTIL(&p, p.srv.p_nmsg == 1);
	assert_memory_equal(p.srv.p_last, "hi", 2);
	pair_close(&p);
}

/* The masking key of the raw frames below: not zero, no byte the same. */
static const uint8_t test_mask[4] = { 0x5a, 0xc3, 0x17, 0xe8 };

/*
 * Put a frame into out (room for len + 14) with the shortest length
 * field, masked with key unless key is NULL; b0 is FIN, RSV and opcode.
 * Returns the frame's length.
 */
static size_t
mkframe(uint8_t *out, uint8_t b0, const void *payload, size_t len,
    const uint8_t *key)
{
	const uint8_t *p = payload;
	size_t hl, i;

	out[0] = b0;
	if (len < 126) {
		out[1] = (uint8_t)len;
		hl = 2;
	} else if (len < 65536) {
		out[1] = 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
		hl = 4;
	} else {
		out[1] = 127;
		for (i = 0; i < 8; i++)
			out[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
		hl = 10;
	}
	if (key != NULL) {
		out[1] |= 0x80;
		memcpy(out + hl, key, 4);
		hl += 4;
	}
	for (i = 0; i < len; i++)
		out[hl + i] = p[i] ^ (key != NULL ? key[i & 3] : 0);
	return (hl + len);
}

/* Let the loop read and handle what was written, without blocking. */
static void
spin(struct pair *p)
{
	int i;

	for (i = 0; i < 8; i++)
		event_base_loop(p->base, EVLOOP_NONBLOCK);
}

/* Read one frame from a raw fd: its first byte, payload unmasked. */
static uint8_t *
raw_frame(struct pair *p, int fd, uint8_t *b0, int *masked, size_t *len,
    uint8_t key[4])
{
	uint8_t h[8], *buf;
	size_t i, n;
	int eof;

	assert_int_equal(raw_read(p, fd, h, 2, &eof), 2);
	*b0 = h[0];
	*masked = (h[1] & 0x80) != 0;
	n = h[1] & 0x7f;
	if (n == 126) {
		assert_int_equal(raw_read(p, fd, h, 2, &eof), 2);
		n = (size_t)h[0] << 8 | h[1];
		assert_true(n >= 126);
	} else if (n == 127) {
		assert_int_equal(raw_read(p, fd, h, 8, &eof), 8);
		for (n = 0, i = 0; i < 8; i++)
			n = n << 8 | h[i];
		assert_true(n >= 65536);
	}
	memset(key, 0, 4);
	if (*masked)
		assert_int_equal(raw_read(p, fd, key, 4, &eof), 4);
	buf = malloc(n + 1);
	assert_non_null(buf);
	assert_int_equal(raw_read(p, fd, buf, n, &eof), n);
	for (i = 0; i < n; i++)
		buf[i] ^= key[i & 3];
	*len = n;
	return (buf);
}

/*
 * A frame split between two reads at every byte, header and payload: a
 * masked one to the server (64-bit length, too), an unmasked one to the
 * client.
 */
static void
test_split_everywhere(void **state)
{
	static const size_t sizes[] = { 5, 130, 65536 + 3 };
	struct pair p;
	uint8_t *msg, *frame;
	size_t i, k, n, flen, nmsg;
	int to_client;

	(void)state;
	for (to_client = 0; to_client <= 1; to_client++) {
		pair_open(&p, 0, 0, to_client, !to_client);
		struct peer *us = to_client ? &p.cli : &p.srv;
		int fd = p.fds[to_client ? 0 : 1];

		nmsg = 0;
		for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			n = sizes[i];
			msg = pattern(n, (unsigned)i);
			frame = malloc(n + 14);
			assert_non_null(frame);
			flen = mkframe(
			    frame, 0x82, msg, n, to_client ? NULL : test_mask);
			for (k = 1; k < flen; k++) {
				/* Long payloads: the header and a few. */
				if (n > 200 && k > 20 && k != flen - 1 &&
				    k % 4093 != 0)
					continue;
				raw_write(fd, frame, k);
				spin(&p);
				raw_write(fd, frame + k, flen - k);
				nmsg++;
				RUN_UNTIL(&p, us->p_nmsg == (int)nmsg);
				assert_true(us->p_binary);
				assert_int_equal(us->p_last_len, n);
				assert_memory_equal(us->p_last, msg, n);
			}
			free(frame);
			free(msg);
		}
		assert_int_equal(us->p_closed, 0);
		pair_close(&p);
	}
}

/*
 * A masked 64 KiB text message in reads of odd sizes: the key offset and
 * characters of several bytes cross reads.
 */
static void
test_masked_reads(void **state)
{
	static const size_t steps[] = { 1, 2, 3, 5, 7, 4093, 11, 8191 };
	static const char word[] =
	    "h\xc3\xa9llo \xe2\x98\x83 \xf0\x9d\x84\x9e ";
	const size_t n = 65536;
	struct pair p;
	uint8_t *msg, *frame;
	size_t i, off, flen, step;

	(void)state;
	msg = malloc(n);
	assert_non_null(msg);
	for (i = 0; i < n; i++)
		msg[i] = (uint8_t)word[i % (sizeof word - 1)];
	/* Cut at a character boundary. */
	i = n;
	while ((msg[i - 1] & 0xc0) == 0x80 || msg[i - 1] >= 0xc0)
		i--;
	memset(msg + i, '.', n - i);
	frame = malloc(n + 14);
	assert_non_null(frame);
	flen = mkframe(frame, 0x81, msg, n, test_mask);

	pair_open(&p, 0, 0, 0, 1);
	for (off = 0, i = 0; off < flen; off += step, i++) {
		step = steps[i % (sizeof steps / sizeof steps[0])];
		if (step > flen - off)
			step = flen - off;
		raw_write(p.fds[1], frame + off, step);
		spin(&p);
	}
	RUN_UNTIL(&p, p.srv.p_nmsg == 1);
	assert_false(p.srv.p_binary);
	assert_int_equal(p.srv.p_last_len, n);
	assert_memory_equal(p.srv.p_last, msg, n);
	assert_int_equal(p.srv.p_closed, 0);
	pair_close(&p);
	free(frame);
	free(msg);
}

/*
 * Fragments with control frames between them make one message; the ping
 * is answered at once, and before what the owner sends next.
 */
static void
test_fragments_and_ping(void **state)
{
	uint8_t buf[256], b0, key[4], *got;
	struct pair p;
	size_t n, len;
	int eof, masked;

	(void)state;
	pair_open(&p, 0, 0, 0, 1);
	/* "Hello w\xc3\xb6rld" in three fragments, the o-umlaut cut. */
	n = mkframe(buf, 0x01, "Hel", 3, test_mask);
	raw_write(p.fds[1], buf, n);
	n = mkframe(buf, 0x89, "p1", 2, test_mask);
	raw_write(p.fds[1], buf, n);
	assert_int_equal(raw_read(&p, p.fds[1], buf, 4, &eof), 4);
	assert_memory_equal(buf, "\x8a\x02p1", 4);
	n = mkframe(buf, 0x00, "lo w\xc3", 5, test_mask);
	raw_write(p.fds[1], buf, n);
	spin(&p);
	/* An unasked-for pong is ignored, even mid-message. */
	n = mkframe(buf, 0x8a, "", 0, test_mask);
	raw_write(p.fds[1], buf, n);
	n = mkframe(buf, 0x80, "\xb6rld", 4, test_mask);
	raw_write(p.fds[1], buf, n);
	RUN_UNTIL(&p, p.srv.p_nmsg == 1);
	assert_false(p.srv.p_binary);
	assert_int_equal(p.srv.p_last_len, 12);
	assert_memory_equal(p.srv.p_last, "Hello w\xc3\xb6rld", 12);

	/* A ping and a message in one read: the pong goes before "ack". */
	p.srv.p_send_on_message = 1;
	n = mkframe(buf, 0x89, "p2", 2, test_mask);
	n += mkframe(buf + n, 0x82, "q", 1, test_mask);
	raw_write(p.fds[1], buf, n);
	got = raw_frame(&p, p.fds[1], &b0, &masked, &len, key);
	assert_int_equal(b0, 0x8a);
	assert_false(masked);
	assert_int_equal(len, 2);
	assert_memory_equal(got, "p2", 2);
	free(got);
	got = raw_frame(&p, p.fds[1], &b0, &masked, &len, key);
	assert_int_equal(b0, 0x81);
	assert_int_equal(len, 3);
	assert_memory_equal(got, "ack", 3);
	free(got);
	assert_int_equal(p.srv.p_nmsg, 2);
	assert_int_equal(p.srv.p_closed, 0);
	pair_close(&p);
}

/* Raw bytes a server must refuse, and the close code it answers with. */
struct refuse_case {
	const char *rc_what;
	const char *rc_bytes; /* frames, masked with key 0 */
	size_t rc_len;
	size_t rc_max; /* the server's max_message (0: default) */
	uint16_t rc_code;
	int rc_nmsg; /* messages that arrive first */
};

#define RC(s) s, sizeof s - 1

static const struct refuse_case refuse_cases[] = {
	{ "continuation without a start", RC("\x80\x82\0\0\0\0ab"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "a new start mid-message", RC("\x01\x81\0\0\0\0a\x81\x81\0\0\0\0b"),
	    0, WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "a binary start mid-message",
	    RC("\x81\x81\0\0\0\0x\x02\x81\0\0\0\0a\x82\x81\0\0\0\0b"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 1 },
	{ "RSV1 set", RC("\xc1\x81\0\0\0\0a"), 0, WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "RSV3 set on a continuation",
	    RC("\x01\x81\0\0\0\0a\x90\x81\0\0\0\0b"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "RSV2 set on a ping", RC("\xa9\x80\0\0\0\0"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "reserved opcode 3", RC("\x83\x81\0\0\0\0a"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "reserved opcode 0xb", RC("\x8b\x80\0\0\0\0"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "unmasked, mid-message",
	    RC("\x02\x81\0\0\0\0a\x80\x01"
	       "b"),
	    0, WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "too big in one frame", RC("\x82\x85\0\0\0\0abcde"), 4,
	    WS_CLOSE_TOO_BIG, 0 },
	{ "too big in fragments", RC("\x02\x83\0\0\0\0abc\x00\x83\0\0\0\0def"),
	    5, WS_CLOSE_TOO_BIG, 0 },
	{ "as big as allowed, in fragments",
	    RC("\x02\x83\0\0\0\0abc\x80\x82\0\0\0\0de\x80\x80\0\0\0\0"), 5,
	    WS_CLOSE_PROTOCOL_ERROR, 1 },
	{ "invalid UTF-8 in a later fragment",
	    RC("\x01\x81\0\0\0\0a\x80\x81\0\0\0\0\xff"), 0,
	    WS_CLOSE_INVALID_DATA, 0 },
	{ "UTF-8 cut off by the end",
	    RC("\x01\x81\0\0\0\0a\x80\x81\0\0\0\0\xe2"), 0,
	    WS_CLOSE_INVALID_DATA, 0 },
	{ "a surrogate", RC("\x81\x83\0\0\0\0\xed\xa0\x80"), 0,
	    WS_CLOSE_INVALID_DATA, 0 },
	{ "a ping in fragments", RC("\x09\x80\0\0\0\0"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "a 126-byte ping", RC("\x89\xfe\x00\x7e"), 0, WS_CLOSE_PROTOCOL_ERROR,
	    0 },
	{ "a length in more bytes than needed",
	    RC("\x82\xfe\x00\x05\0\0\0\0abcde"), 0, WS_CLOSE_PROTOCOL_ERROR,
	    0 },
	{ "a 64-bit length past 2^63", RC("\x82\xff\x80\0\0\0\0\0\0\0"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "a close with a one-byte payload", RC("\x88\x81\0\0\0\0\x03"), 0,
	    WS_CLOSE_PROTOCOL_ERROR, 0 },
	{ "a close reason that is not UTF-8",
	    RC("\x81\x81\0\0\0\0x\x88\x83\0\0\0\0\x03\xe8\xff"), 0,
	    WS_CLOSE_INVALID_DATA, 1 },
};

/*
 * Frames the server refuses: the close frame it sends with 1002, 1007 or
 * 1009, the code on_close reports, then the transport closes without
 * waiting for an answer.
 */
static void
test_refused_frames(void **state)
{
	struct pair p;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof refuse_cases / sizeof refuse_cases[0]; i++) {
		const struct refuse_case *rc = &refuse_cases[i];

		pair_open(&p, rc->rc_max, 0, 0, 1);
		raw_write(p.fds[1], rc->rc_bytes, rc->rc_len);
		RUN_UNTIL(&p, p.srv.p_closed);
		if (p.srv.p_code != rc->rc_code || p.srv.p_nmsg != rc->rc_nmsg)
			fail_msg("%s: code %u after %d messages, want %u "
				 "after %d",
			    rc->rc_what, p.srv.p_code, p.srv.p_nmsg,
			    rc->rc_code, rc->rc_nmsg);
		{
			uint8_t buf[4],
			    want[4] = { 0x88, 0x02, (uint8_t)(rc->rc_code >> 8),
				    (uint8_t)rc->rc_code };
			int eof;

			assert_int_equal(
			    raw_read(&p, p.fds[1], buf, 4, &eof), 4);
			assert_memory_equal(buf, want, 4);
		}
		raw_wait_eof(&p, p.fds[1]);
		pair_close(&p);
	}
}

/*
 * What a client sends is masked, each frame with its own key, lengths in
 * the fewest bytes; what a server sends is not masked.
 */
static void
test_frames_sent(void **state)
{
	static const size_t sizes[] = { 0, 1, 125, 126, 65535, 65536 };
	uint8_t b0, key[4], keys[6][4], *msg, *got;
	struct pair p;
	size_t i, len;
	int from_client, masked;

	(void)state;
	for (from_client = 0; from_client <= 1; from_client++) {
		pair_open(&p, 0, 0, from_client, !from_client);
		struct peer *us = from_client ? &p.cli : &p.srv;
		int fd = p.fds[from_client ? 0 : 1];

		for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			msg = pattern(sizes[i], 40 + (unsigned)i);
			assert_int_equal(
			    wsconn_send(us->p_ws, (int)(i & 1), msg, sizes[i]),
			    0);
			got = raw_frame(&p, fd, &b0, &masked, &len, key);
			assert_int_equal(b0, i & 1 ? 0x82 : 0x81);
			assert_int_equal(masked, from_client);
			assert_int_equal(len, sizes[i]);
			assert_memory_equal(got, msg, len);
			memcpy(keys[i], key, 4);
			free(got);
			free(msg);
		}
		if (from_client)
			assert_memory_not_equal(keys[4], keys[5], 4);
		RUN_UNTIL(&p, wsconn_queued(us->p_ws) == 0);
		pair_close(&p);
	}
}

/* Messages of the sizes around each length field, byte-exact both ways. */
static void
test_roundtrip_sizes(void **state)
{
	static const size_t sizes[] = { 0, 1, 125, 126, 127, 65535, 65536,
		65537, (size_t)1 << 20 };
	struct pair p;
	uint8_t *msg;
	size_t i;
	int n = 0;

	(void)state;
	pair_open(&p, 0, 0, 0, 0);
	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		n++;
		msg = pattern(sizes[i], 100 + (unsigned)i);
		assert_int_equal(wsconn_send(p.cli.p_ws, 1, msg, sizes[i]), 0);
		assert_int_equal(wsconn_send(p.srv.p_ws, 1, msg, sizes[i]), 0);
		RUN_UNTIL(&p, p.srv.p_nmsg == n && p.cli.p_nmsg == n);
		assert_int_equal(p.srv.p_last_len, sizes[i]);
		assert_memory_equal(p.srv.p_last, msg, sizes[i]);
		assert_int_equal(p.cli.p_last_len, sizes[i]);
		assert_memory_equal(p.cli.p_last, msg, sizes[i]);
		free(msg);
	}
	/* Many at once, so frames share reads and cross them. */
	msg = pattern(70000, 5);
	for (i = 0; i < 64; i++) {
		size_t len = (i * 997) % 70000;

		assert_int_equal(wsconn_send(p.cli.p_ws, 1, msg + i, len), 0);
		assert_int_equal(wsconn_send(p.srv.p_ws, 1, msg + i, len), 0);
	}
	RUN_UNTIL(&p, p.srv.p_nmsg == n + 64 && p.cli.p_nmsg == n + 64);
	assert_int_equal(p.srv.p_last_len, (63 * 997) % 70000);
	assert_memory_equal(p.srv.p_last, msg + 63, p.srv.p_last_len);
	assert_memory_equal(p.cli.p_last, msg + 63, p.cli.p_last_len);
	free(msg);
	assert_int_equal(p.srv.p_closed + p.cli.p_closed, 0);
	pair_close(&p);
}

/*
 * wsconn_send_ev: a header and a range of a many-chained evbuffer arrive
 * as one message, both ways (masked by the client), the source untouched;
 * a range past the end is refused.
 */
static void
test_send_ev(void **state)
{
	static const size_t lens[] = { 0, 1, 125, 4000, 65536, 200000 };
	struct pair p;
	struct evbuffer *src;
	uint8_t *blob, *want, hdr[34];
	size_t i, j, pos, total = 300000;
	int n = 0;

	(void)state;
	pair_open(&p, 0, 0, 0, 0);
	blob = pattern(total, 3);
	src = evbuffer_new();
	assert_non_null(src);
	/* Many small chains, so a range crosses them at odd places. */
	for (i = 0; i < total; i += j) {
		j = total - i < 777 ? total - i : 777;
		assert_int_equal(evbuffer_add(src, blob, 0), 0);
		assert_int_equal(
		    evbuffer_add_reference(src, blob + i, j, NULL, NULL), 0);
	}
	for (i = 0; i < sizeof hdr; i++)
		hdr[i] = (uint8_t)(0xa0 + i);
	want = malloc(sizeof hdr + total);
	assert_non_null(want);
	for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		pos = (i * 4099) % 1000;
		memcpy(want, hdr, sizeof hdr);
		memcpy(want + sizeof hdr, blob + pos, lens[i]);
		n++;
		assert_int_equal(wsconn_send_ev(p.cli.p_ws, 1, hdr, sizeof hdr,
				     src, pos, lens[i]),
		    0);
		assert_int_equal(wsconn_send_ev(p.srv.p_ws, 1, hdr,
				     i % 2 ? 0 : 26, src, pos, lens[i]),
		    0);
		RUN_UNTIL(&p, p.srv.p_nmsg == n && p.cli.p_nmsg == n);
		assert_int_equal(p.srv.p_last_len, sizeof hdr + lens[i]);
		assert_memory_equal(p.srv.p_last, want, sizeof hdr + lens[i]);
		j = i % 2 ? 0 : 26;
		memmove(want + j, blob + pos, lens[i]);
		assert_int_equal(p.cli.p_last_len, j + lens[i]);
		assert_memory_equal(p.cli.p_last, want, j + lens[i]);
		assert_true(p.srv.p_binary && p.cli.p_binary);
	}
	assert_int_equal(evbuffer_get_length(src), total);
	/* Out of range, or no source: refused, nothing queued. */
	assert_int_equal(
	    wsconn_send_ev(p.cli.p_ws, 1, hdr, 2, src, total - 10, 11), -1);
	assert_int_equal(
	    wsconn_send_ev(p.cli.p_ws, 1, hdr, 2, src, total + 1, 0), -1);
	assert_int_equal(wsconn_send_ev(p.cli.p_ws, 1, hdr, 2, NULL, 0, 0), -1);
	assert_int_equal(wsconn_send_ev(p.cli.p_ws, 1, NULL, 2, src, 0, 0), -1);
	/* Text, with the whole source and no header. */
	evbuffer_drain(src, total);
	assert_int_equal(evbuffer_add(src, "caf\xc3\xa9", 5), 0);
	assert_int_equal(wsconn_send_ev(p.cli.p_ws, 0, NULL, 0, src, 0, 5), 0);
	RUN_UNTIL(&p, p.srv.p_nmsg == n + 1);
	assert_false(p.srv.p_binary);
	assert_memory_equal(p.srv.p_last, "caf\xc3\xa9", 5);
	assert_int_equal(wsconn_queued(p.cli.p_ws), 0);
	assert_int_equal(p.srv.p_closed + p.cli.p_closed, 0);
	evbuffer_free(src);
	free(want);
	free(blob);
	pair_close(&p);
}

/*
 * A big payload a server sends from an evbuffer is shared with it, not
 * copied: the frame still goes out whole and right after the source lets
 * the bytes go (a tunnel's acknowledgement) and is freed before the loop
 * writes it.  ASan checks the memory lives that long.
 */
static void
test_send_ev_source_gone(void **state)
{
	struct pair p;
	struct evbuffer *src, *twice;
	uint8_t *blob, *blob2, hdr[5] = { 1, 2, 3, 4, 5 }, *want;
	size_t total = 300000, len = 150000, pos = 12345, i;

	(void)state;
	pair_open(&p, 0, 0, 0, 0);
	blob = pattern(total, 7);
	want = malloc(sizeof hdr + len);
	assert_non_null(want);
	memcpy(want, hdr, sizeof hdr);
	memcpy(want + sizeof hdr, blob + pos, len);
	src = evbuffer_new();
	assert_non_null(src);
	/* Chains of our own, of odd sizes. */
	for (i = 0; i < total; i += 70001)
		assert_int_equal(evbuffer_add(src, blob + i,
				     total - i < 70001 ? total - i : 70001),
		    0);
	assert_int_equal(
	    wsconn_send_ev(p.srv.p_ws, 1, hdr, sizeof hdr, src, pos, len), 0);
	/* The source is as it was, then gone. */
	assert_int_equal(evbuffer_get_length(src), total);
	evbuffer_drain(src, pos + len);
	evbuffer_free(src);
	memset(blob, 0, total);
	RUN_UNTIL(&p, p.cli.p_nmsg == 1);
	assert_int_equal(p.cli.p_last_len, sizeof hdr + len);
	assert_memory_equal(p.cli.p_last, want, sizeof hdr + len);
	/* A source libevent will not share again is copied instead. */
	blob2 = pattern(len, 9);
	src = evbuffer_new();
	twice = evbuffer_new();
	assert_non_null(src);
	assert_non_null(twice);
	assert_int_equal(evbuffer_add(src, blob2, len), 0);
	assert_int_equal(evbuffer_add_buffer_reference(twice, src), 0);
	assert_int_equal(
	    wsconn_send_ev(p.srv.p_ws, 1, NULL, 0, twice, 0, len), 0);
	evbuffer_free(twice);
	evbuffer_free(src);
	RUN_UNTIL(&p, p.cli.p_nmsg == 2);
	assert_int_equal(p.cli.p_last_len, len);
	assert_memory_equal(p.cli.p_last, blob2, len);
	assert_int_equal(p.srv.p_closed + p.cli.p_closed, 0);
	free(blob2);
	free(want);
	free(blob);
	pair_close(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_too_big),
		cmocka_unit_test(test_clean_close),
		cmocka_unit_test(test_close_codes),
		cmocka_unit_test(test_eof),
		cmocka_unit_test(test_unmasked_to_server),
		cmocka_unit_test(test_masked_to_client),
		cmocka_unit_test(test_raw_frames),
		cmocka_unit_test(test_raw_close),
		cmocka_unit_test(test_raw_close_codes),
		cmocka_unit_test(test_close_timeout),
		cmocka_unit_test(test_free_in_callbacks),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_early_input),
		cmocka_unit_test(test_split_everywhere),
		cmocka_unit_test(test_masked_reads),
		cmocka_unit_test(test_fragments_and_ping),
		cmocka_unit_test(test_refused_frames),
		cmocka_unit_test(test_frames_sent),
		cmocka_unit_test(test_roundtrip_sizes),
		cmocka_unit_test(test_send_ev),
		cmocka_unit_test(test_send_ev_source_gone),
		/* The same again, messages handed over as evbuffers. */
		cmocka_unit_test_setup_teardown(
		    test_roundtrip, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_too_big, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_free_in_callbacks, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_backpressure, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_split_everywhere, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_masked_reads, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_fragments_and_ping, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_refused_frames, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_roundtrip_sizes, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(
		    test_send_ev, test_setup_buf, test_teardown_buf),
		cmocka_unit_test_setup_teardown(test_send_ev_source_gone,
		    test_setup_buf, test_teardown_buf),
	};

	/* Writes to a peer that has gone must fail, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	return (cmocka_run_group_tests(tests, NULL, NULL));
}
