/*
 * libFuzzer harness for lib/wsframe.c and lib/wsconn.c.  The input is the
 * byte stream a peer sends after the handshake.  First the parser alone
 * (the one every received stream goes through) reads it whole, in pieces
 * and a byte at a time, and must find the same messages, control frames
 * and verdict every way.  Then it goes, in pieces, through a socketpair
 * into a wsconn on a stream (server or client, chosen by the first
 * byte), whose owner echoes messages, may close or free itself from a
 * callback, and the loop runs until nothing is left to do.  What the
 * wsconn sends back is parsed as strictly as a peer would: whole frames,
 * masked only by a client, lengths in the fewest bytes, nothing after the
 * close frame, and each echo the message it answers.  Then everything is
 * freed; LeakSanitizer checks that nothing stays.
 */
#include <sys/types.h>
#include <sys/socket.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/util.h>

#include "stream.h"
#include "wsconn.h"
#include "wsframe.h"

/* Abort with the failed condition, so libFuzzer saves the input. */
#define FUZZ_ASSERT(c) fuzz_assert((c) != 0, #c, __LINE__)

/* Small, so the 1009 path is reached; we allocate at most this. */
#define FUZZ_MAX_MESSAGE 4096

/* Mode bits from the first input byte. */
#define FUZZ_M_CLIENT 0x01 /* our side is the client */
#define FUZZ_M_ECHO 0x02 /* echo every message */
#define FUZZ_M_FREE_MSG 0x04 /* free from inside the 3rd on_message */
#define FUZZ_M_CLOSE_MSG 0x08 /* wsconn_close from the 2nd on_message */
#define FUZZ_M_EOF 0x10 /* the peer hangs up after sending */
#define FUZZ_M_FREE_CLOSE 0x20 /* free from inside on_close */
#define FUZZ_M_BUF 0x40 /* messages as evbuffers (also sets the step) */

/* What the owner of the wsconn saw. */
struct fuzz_owner {
	struct wsconn *fo_ws;
	int fo_mode;
	int fo_nmsg;
	int fo_closed;
	uint16_t fo_code;
	struct evbuffer *fo_echoed; /* payloads echoed, not yet seen back */
	struct evbuffer *fo_back; /* bytes sent back, not yet parsed */
	int fo_back_closed; /* a close frame came back */
};

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static struct event_base *fuzz_base;

/* Abort, naming the condition, unless ok. */
static void
fuzz_assert(int ok, const char *what, int line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_wsconn.c:%d: %s\n", line, what);
	abort();
}

/* A message: check it, echo it, close or free as the mode says. */
static void
fuzz_on_message(void *arg, int is_binary, const uint8_t *data, size_t len)
{
	struct fuzz_owner *fo = arg;

	FUZZ_ASSERT(fo->fo_ws != NULL && fo->fo_closed == 0);
	FUZZ_ASSERT(data != NULL && len <= FUZZ_MAX_MESSAGE);
	FUZZ_ASSERT(is_binary == 0 || is_binary == 1);
	fo->fo_nmsg++;
	if (fo->fo_mode & FUZZ_M_ECHO) {
		FUZZ_ASSERT(wsconn_send(fo->fo_ws, is_binary, data, len) == 0);
		/* Opcode, then payload, for fuzz_check_back. */
		evbuffer_add(fo->fo_echoed, is_binary ? "\x82" : "\x81", 1);
		evbuffer_add(fo->fo_echoed, data, len);
	}
	if ((fo->fo_mode & FUZZ_M_CLOSE_MSG) && fo->fo_nmsg == 2) {
		FUZZ_ASSERT(wsconn_close(fo->fo_ws, 4000, "fuzz") == 0);
		FUZZ_ASSERT(wsconn_send(fo->fo_ws, 0, data, len) == -1);
	}
	if ((fo->fo_mode & FUZZ_M_FREE_MSG) && fo->fo_nmsg == 3) {
		wsconn_free(fo->fo_ws);
		fo->fo_ws = NULL;
	}
}

/* The end: exactly once, with a code a peer or we could have meant. */
static void
fuzz_on_close(void *arg, uint16_t code, const char *reason)
{
	struct fuzz_owner *fo = arg;

	FUZZ_ASSERT(fo->fo_ws != NULL && fo->fo_closed == 0);
	FUZZ_ASSERT(reason != NULL && strlen(reason) <= WS_CLOSE_REASON_MAX);
	FUZZ_ASSERT(code >= 1000 && code <= 4999);
	FUZZ_ASSERT(wsconn_queued(fo->fo_ws) == 0);
	FUZZ_ASSERT(wsconn_send(fo->fo_ws, 0, NULL, 0) == -1);
	fo->fo_closed++;
	fo->fo_code = code;
	if (fo->fo_mode & FUZZ_M_FREE_CLOSE) {
		wsconn_free(fo->fo_ws);
		fo->fo_ws = NULL;
	}
}

/* Nothing to do: draining happens in the loop below. */
static void
fuzz_on_writable(void *arg)
{
	(void)arg;
}

static const struct wsconn_cbs fuzz_cbs = {
	.on_message = fuzz_on_message,
	.on_close = fuzz_on_close,
	.on_writable = fuzz_on_writable,
};

/* A message as an evbuffer: as above, then move half of it away. */
static void
fuzz_on_message_buf(void *arg, int is_binary, struct evbuffer *msg)
{
	size_t len = evbuffer_get_length(msg);
	const uint8_t *data = evbuffer_pullup(msg, -1);
	struct evbuffer *keep = evbuffer_new();

	FUZZ_ASSERT(keep != NULL);
	fuzz_on_message(
	    arg, is_binary, data != NULL ? data : (const uint8_t *)"", len);
	FUZZ_ASSERT(evbuffer_get_length(msg) == len);
	FUZZ_ASSERT(
	    evbuffer_remove_buffer(msg, keep, len / 2) == (int)(len / 2));
	evbuffer_free(keep);
}

static const struct wsconn_cbs fuzz_buf_cbs = {
	.on_close = fuzz_on_close,
	.on_writable = fuzz_on_writable,
	.on_message_buf = fuzz_on_message_buf,
};

/*
 * Parse the whole frames the wsconn sent back so far as its peer would,
 * and match data frames against the messages echoed.
 */
static void
fuzz_check_back(struct fuzz_owner *fo, int client)
{
	uint8_t h[14], want[FUZZ_MAX_MESSAGE + 1], *p;
	size_t avail, hl, i;
	uint64_t len;

	while ((avail = evbuffer_get_length(fo->fo_back)) >= 2) {
		evbuffer_copyout(fo->fo_back, h, avail < 14 ? avail : 14);
		hl = 2 + ((h[1] & 0x7f) == 126 ? 2 : 0) +
		    ((h[1] & 0x7f) == 127 ? 8 : 0) + (client ? 4 : 0);
		if (avail < hl)
			return;
		FUZZ_ASSERT(!fo->fo_back_closed);
		FUZZ_ASSERT((h[0] & 0xf0) == 0x80);
		FUZZ_ASSERT(((h[1] & 0x80) != 0) == client);
		len = h[1] & 0x7f;
		if (len >= 126) {
			for (len = 0, i = 2; i < hl - (client ? 4 : 0); i++)
				len = len << 8 | h[i];
			FUZZ_ASSERT(
			    len >= ((h[1] & 0x7f) == 126 ? 126 : 65536));
		}
		FUZZ_ASSERT(len <= FUZZ_MAX_MESSAGE);
		if (avail < hl + len)
			return;
		p = evbuffer_pullup(fo->fo_back, (ev_ssize_t)(hl + len)) + hl;
		for (i = 0; client && i < len; i++)
			p[i] ^= h[hl - 4 + (i & 3)];
		switch (h[0] & 0x0f) {
		case 0x1:
		case 0x2:
			FUZZ_ASSERT(evbuffer_remove(fo->fo_echoed, want,
					1 + len) == (int)(1 + len));
			FUZZ_ASSERT(want[0] == h[0]);
			FUZZ_ASSERT(memcmp(want + 1, p, len) == 0);
			break;
		case 0x8:
			fo->fo_back_closed = 1;
			/* FALLTHROUGH */
		case 0x9:
		case 0xa:
			FUZZ_ASSERT(len <= 125);
			break;
		default:
			FUZZ_ASSERT(!"an opcode we never send");
		}
		evbuffer_drain(fo->fo_back, hl + len);
	}
}

/*
 * Parse size bytes at data as a server or client would, fed in pieces of
 * step bytes, each its own chain, and append what was found to out: each
 * message whole ('M', opcode, length, payload), each control frame ('C',
 * opcode, code, length, payload), an error ('E', code).
 */
static void
fuzz_rx(const uint8_t *data, size_t size, int server, size_t step,
    struct evbuffer *out)
{
	struct wsframe_rx rx;
	struct wsframe_event ev;
	struct evbuffer *in, *piece, *msg;
	size_t off, n, len;
	uint8_t rec[11];
	enum wsframe_ev e;

	wsframe_rx_init(&rx, server, FUZZ_MAX_MESSAGE);
	in = evbuffer_new();
	msg = evbuffer_new();
	FUZZ_ASSERT(in != NULL && msg != NULL);
	for (off = 0; off < size; off += n) {
		n = size - off < step ? size - off : step;
		piece = evbuffer_new();
		FUZZ_ASSERT(piece != NULL);
		evbuffer_add(piece, data + off, n);
		evbuffer_add_buffer(in, piece);
		evbuffer_free(piece);
		while ((e = wsframe_rx_next(&rx, in, &ev)) != WSFRAME_EV_MORE) {
			FUZZ_ASSERT(e == ev.e_type);
			memset(rec, 0, sizeof rec);
			rec[1] = ev.e_op;
			rec[2] = (uint8_t)(ev.e_code >> 8);
			rec[3] = (uint8_t)ev.e_code;
			switch (e) {
			case WSFRAME_EV_DATA:
				FUZZ_ASSERT(
				    ev.e_len <= evbuffer_get_length(in));
				FUZZ_ASSERT(ev.e_len != 0 || ev.e_fin);
				evbuffer_remove_buffer(in, msg, ev.e_len);
				len = evbuffer_get_length(msg);
				FUZZ_ASSERT(len <= FUZZ_MAX_MESSAGE);
				if (!ev.e_fin)
					break;
				rec[0] = 'M';
				rec[4] = (uint8_t)(len >> 8);
				rec[5] = (uint8_t)len;
				evbuffer_add(out, rec, sizeof rec);
				evbuffer_add_buffer(out, msg);
				break;
			case WSFRAME_EV_CONTROL:
				FUZZ_ASSERT(ev.e_len <= WS_CONTROL_MAX);
				FUZZ_ASSERT(ev.e_op != WS_OP_CLOSE ||
				    (wsframe_rx_ended(&rx) &&
					(ev.e_code == WS_CLOSE_NO_STATUS ||
					    ws_close_code_valid(ev.e_code))));
				rec[0] = 'C';
				rec[4] = (uint8_t)ev.e_len;
				evbuffer_add(out, rec, sizeof rec);
				evbuffer_add(out, ev.e_data, ev.e_len);
				break;
			case WSFRAME_EV_ERROR:
				FUZZ_ASSERT(wsframe_rx_ended(&rx));
				FUZZ_ASSERT(
				    ev.e_code == WS_CLOSE_PROTOCOL_ERROR ||
				    ev.e_code == WS_CLOSE_INVALID_DATA ||
				    ev.e_code == WS_CLOSE_TOO_BIG);
				rec[0] = 'E';
				evbuffer_add(out, rec, sizeof rec);
				break;
			case WSFRAME_EV_MORE:
				break;
			}
		}
	}
	evbuffer_free(in);
	evbuffer_free(msg);
}

/* The parser finds the same in data however it is split. */
static void
fuzz_rx_splits(const uint8_t *data, size_t size, int server, size_t step)
{
	struct evbuffer *a = evbuffer_new(), *b = evbuffer_new();
	struct evbuffer *c = evbuffer_new();
	size_t n;

	FUZZ_ASSERT(a != NULL && b != NULL && c != NULL);
	fuzz_rx(data, size, server, size + 1, a);
	fuzz_rx(data, size, server, step, b);
	fuzz_rx(data, size, server, 1, c);
	n = evbuffer_get_length(a);
	FUZZ_ASSERT(evbuffer_get_length(b) == n);
	FUZZ_ASSERT(evbuffer_get_length(c) == n);
	FUZZ_ASSERT(n == 0 ||
	    (memcmp(evbuffer_pullup(a, -1), evbuffer_pullup(b, -1), n) == 0 &&
		memcmp(evbuffer_pullup(a, -1), evbuffer_pullup(c, -1), n) ==
		    0));
	evbuffer_free(a);
	evbuffer_free(b);
	evbuffer_free(c);
}

/* Run the loop without blocking until it has nothing active. */
static void
fuzz_run(void)
{
	int i;

	for (i = 0; i < 64; i++) {
		if (event_base_loop(fuzz_base, EVLOOP_NONBLOCK) != 0)
			break;
	}
}

/* Move what the wsconn sent to the peer's end fd into back. */
static void
fuzz_read_back(int fd, struct evbuffer *back)
{
	int i;

	for (i = 0; i < 1024; i++) {
		if (evbuffer_read(back, fd, 65536) <= 0)
			break;
	}
}

/* Entry point: one connection per input. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct stream *s;
	struct fuzz_owner fo;
	size_t off, n, step;
	ssize_t w;
	int fds[2], tries;

	if (fuzz_base == NULL) {
		/* A write to a socket the wsconn closed says EPIPE, as ours do. */
		signal(SIGPIPE, SIG_IGN);
		fuzz_base = event_base_new();
		FUZZ_ASSERT(fuzz_base != NULL);
	}
	memset(&fo, 0, sizeof fo);
	fo.fo_echoed = evbuffer_new();
	fo.fo_back = evbuffer_new();
	FUZZ_ASSERT(fo.fo_echoed != NULL && fo.fo_back != NULL);
	if (size > 0) {
		fo.fo_mode = data[0];
		data++;
		size--;
	}
	step = 1 + (size_t)(fo.fo_mode >> 6) * 37;
	fuzz_rx_splits(data, size, !(fo.fo_mode & FUZZ_M_CLIENT), step);

	FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
	FUZZ_ASSERT(evutil_make_socket_nonblocking(fds[0]) == 0 &&
	    evutil_make_socket_nonblocking(fds[1]) == 0);
	s = stream_new(fuzz_base, fds[0], NULL, STREAM_O_CLOSE);
	FUZZ_ASSERT(s != NULL);
	fo.fo_ws = wsconn_new(fuzz_base, s, fo.fo_mode & FUZZ_M_CLIENT,
	    (fo.fo_mode & FUZZ_M_BUF) ? &fuzz_buf_cbs : &fuzz_cbs, &fo,
	    FUZZ_MAX_MESSAGE);
	FUZZ_ASSERT(fo.fo_ws != NULL);

	/*
	 * Pieces of a size taken from the mode, so frames cross reads; a
	 * piece the socket does not take (a paused wsconn) is dropped after
	 * a bounded number of passes.
	 */
	for (off = 0; off < size; off += n) {
		n = size - off < step ? size - off : step;
		for (tries = 0; tries < 64; tries++) {
			if ((w = write(fds[1], data + off, n)) > 0 ||
			    (w < 0 && errno != EAGAIN))
				break;
			fuzz_run();
			fuzz_read_back(fds[1], fo.fo_back);
		}
		if (w > 0)
			n = (size_t)w;
		fuzz_run();
		/* What the wsconn sends back is checked and dropped. */
		fuzz_read_back(fds[1], fo.fo_back);
		fuzz_check_back(&fo, fo.fo_mode & FUZZ_M_CLIENT);
	}
	/* The peer hangs up: the stream reads EOF. */
	if ((fo.fo_mode & FUZZ_M_EOF) && fo.fo_ws != NULL && !fo.fo_closed) {
		FUZZ_ASSERT(shutdown(fds[1], SHUT_WR) == 0);
		for (tries = 0; tries < 64 && !fo.fo_closed && fo.fo_ws != NULL;
		     tries++) {
			fuzz_run();
			fuzz_read_back(fds[1], fo.fo_back);
		}
		FUZZ_ASSERT(fo.fo_closed == 1 || fo.fo_ws == NULL);
	}
	fuzz_run();

	FUZZ_ASSERT(fo.fo_closed <= 1);
	if (fo.fo_ws != NULL) {
		/* Outside its callbacks a free is immediate. */
		FUZZ_ASSERT(wsconn_queued(fo.fo_ws) < (size_t)64 << 20);
		wsconn_free(fo.fo_ws);
	}
	fuzz_read_back(fds[1], fo.fo_back);
	fuzz_check_back(&fo, fo.fo_mode & FUZZ_M_CLIENT);
	/*
	 * Only whole frames cross the socket.  Echoes may be missing at the
	 * end: after EOF or a free nothing more is written.
	 */
	FUZZ_ASSERT(evbuffer_get_length(fo.fo_back) == 0);
	evbuffer_free(fo.fo_echoed);
	evbuffer_free(fo.fo_back);
	close(fds[1]);
	/* Deferred frees; then nothing is left. */
	fuzz_run();
	FUZZ_ASSERT(event_base_get_num_events(fuzz_base,
			EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE |
			    EVENT_BASE_COUNT_VIRTUAL) == 0);
	return (0);
}
