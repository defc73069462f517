/*
 * akbench-ws: a WebSocket echo load generator.
 *
 * Each connection upgrades (the 101 and Sec-WebSocket-Accept are checked),
 * then keeps --depth messages of --size bytes in flight: every echo that
 * comes back is checked (length, type, and a sequence number stamped in
 * its first and last 8 bytes) and answered with a new message.  Round
 * trips go into a histogram.  Threads each run an edge-triggered epoll
 * loop over their share of the connections.  Framing is common.c's, not
 * wslay's, which could not keep up with a 64 KiB echo (TOOLS.md).
 *
 * The clock starts once every connection is up (or has failed), so
 * handshakes are not part of the rate.  One result line goes to stdout:
 *
 *   messages=N seconds=S msgs_per_s=X mbytes_per_s=Y p50_us=A p99_us=B
 *   errors=E
 */
#include <sys/types.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "clock.h"
#include "wsconn.h"

#include "common.h"

/* Bytes read per read(2). */
#define WSLOAD_SCRATCH (256 * 1024)
/* Handshakes in flight at once, over all threads. */
#define WSLOAD_HANDSHAKES 200
/* How long a handshake may take. */
#define WSLOAD_HANDSHAKE_MS 10000
/* Largest --size. */
#define WSLOAD_MAX_SIZE (16 << 20)
/* Bytes of a sequence stamp. */
#define WSLOAD_STAMP 8

/* Where a client connection is. */
enum client_state {
	CL_S_IDLE, /* not started */
	CL_S_CONNECT, /* TCP connect in progress */
	CL_S_HANDSHAKE, /* upgrade sent, waiting for the 101 */
	CL_S_OPEN, /* echoing */
	CL_S_DEAD, /* failed or closed: the loop releases it */
	CL_S_DONE, /* released */
};

struct loader;

/* One WebSocket connection. */
struct client {
	int cl_fd;
	struct loader *cl_loader;
	unsigned int cl_index; /* over all threads, for messages */
	enum client_state cl_state;
	int cl_flags;
#define CL_F_READABLE 0x01 /* unread bytes may wait in the socket */
#define CL_F_WRITABLE 0x02 /* the socket took the last write whole */
#define CL_F_RDHUP 0x04 /* the FIN is in: read up to it */
	uint64_t cl_deadline; /* handshake deadline (ms) */
	struct buf cl_in; /* the 101 head, while it comes in */
	struct buf cl_out; /* frames to write */
	char cl_key[WS_KEY_LEN + 1];
	uint64_t cl_rng; /* masking keys */
	struct wsparse cl_wp; /* the server's frames */
	uint64_t cl_moff; /* bytes of the echo being received */
	uint8_t cl_stamps[2 * WSLOAD_STAMP]; /* its first and last bytes */
	uint64_t cl_seq_sent; /* next sequence number to send */
	uint64_t cl_seq_recv; /* next sequence number expected back */
	uint64_t *cl_sent_at; /* send time of seq, at seq % depth (us) */
};

/* One thread and its share of the connections. */
struct loader {
	pthread_t ld_thread;
	int ld_ep;
	struct client *ld_clients;
	unsigned int ld_count;
	unsigned int ld_next; /* next client to connect */
	unsigned int ld_pending; /* handshakes in flight */
	unsigned int ld_max_pending;
	unsigned int ld_settled; /* clients open or failed */
	uint64_t ld_check_at; /* next look for handshake timeouts (ms) */
	uint8_t *ld_scratch;
	uint8_t *ld_payload; /* the message template */
	uint64_t ld_now; /* clock for this pass over the events (us) */
	uint64_t ld_msgs; /* echoes counted */
	uint64_t ld_errors;
	struct hist *ld_hist;
};

/* What the command line asked for. */
static struct {
	struct url url;
	struct headers headers;
	uint64_t connections;
	uint64_t size;
	uint64_t depth;
	uint64_t threads;
	uint64_t messages; /* 0: no bound */
	double duration; /* 0: no bound */
	int binary;
} opt = { .connections = 64, .size = 64, .depth = 1, .threads = 1 };

static atomic_uint wsload_settled_threads;
static atomic_int wsload_go; /* the clock runs: send */
static atomic_int wsload_stop; /* the clock stopped: count nothing more */
static atomic_uint wsload_open; /* connections open now */
static atomic_ullong wsload_count; /* echoes, with --messages */
static atomic_ullong wsload_stop_at; /* when --messages was reached (us) */
static volatile sig_atomic_t wsload_signalled;

static pthread_mutex_t wsload_reason_lock = PTHREAD_MUTEX_INITIALIZER;
static char *wsload_reason; /* the first error */

/* Remember the first error of the run. */
static void __attribute__((format(printf, 2, 3)))
client_fail(struct client *cl, const char *fmt, ...)
{
	va_list ap;
	char *s, *msg;

	if (cl->cl_state == CL_S_DEAD || cl->cl_state == CL_S_DONE)
		return;
	cl->cl_loader->ld_errors++;
	va_start(ap, fmt);
	xvasprintf(&s, fmt, ap);
	va_end(ap);
	xasprintf(&msg, "connection %u: %s", cl->cl_index, s);
	free(s);
	pthread_mutex_lock(&wsload_reason_lock);
	if (wsload_reason == NULL) {
		wsload_reason = msg;
		msg = NULL;
	}
	pthread_mutex_unlock(&wsload_reason_lock);
	free(msg);
	/* Released by the loop, which may be using it now. */
	if (cl->cl_state == CL_S_OPEN)
		atomic_fetch_sub(&wsload_open, 1);
	if (cl->cl_state == CL_S_CONNECT || cl->cl_state == CL_S_HANDSHAKE) {
		cl->cl_loader->ld_pending--;
		cl->cl_loader->ld_settled++;
	}
	cl->cl_state = CL_S_DEAD;
}

/* Release what a dead connection holds. */
static void
client_release(struct client *cl)
{
	if (cl->cl_fd != -1)
		close(cl->cl_fd);
	cl->cl_fd = -1;
	buf_free(&cl->cl_in);
	buf_free(&cl->cl_out);
	free(cl->cl_sent_at);
	cl->cl_sent_at = NULL;
	cl->cl_state = CL_S_DONE;
}

/* Put the hex digits of seq's low 32 bits in out[0 .. 8). */
static void
stamp_format(uint64_t seq, uint8_t *out)
{
	static const char hex[] = "0123456789abcdef";
	int i;

	for (i = WSLOAD_STAMP - 1; i >= 0; i--) {
		out[i] = (uint8_t)hex[seq & 0xf];
		seq >>= 4;
	}
}

/* Write seq into a message: first 8 bytes, and last 8 if they fit. */
static void
stamp_put(uint8_t *msg, size_t len, uint64_t seq)
{
	uint8_t s[WSLOAD_STAMP];

	stamp_format(seq, s);
	memcpy(msg, s, len < WSLOAD_STAMP ? len : WSLOAD_STAMP);
	if (len >= 2 * WSLOAD_STAMP)
		memcpy(msg + len - WSLOAD_STAMP, s, WSLOAD_STAMP);
}

/*
 * Keep the bytes of an echo piece p[0 .. n), at offset off of its message,
 * that fall where stamp_put puts the sequence number.
 */
static void
stamp_collect(struct client *cl, const uint8_t *p, size_t n, uint64_t off)
{
	uint64_t size = opt.size,
		 first = size < WSLOAD_STAMP ? size : WSLOAD_STAMP;
	uint64_t s, e;

	/* First stamp: message bytes [0, first). */
	if (off < first) {
		e = off + n < first ? off + n : first;
		memcpy(cl->cl_stamps + off, p, (size_t)(e - off));
	}
	/* Last stamp: message bytes [size - 8, size), for 16 bytes and up. */
	if (size < 2 * WSLOAD_STAMP || off + n <= size - WSLOAD_STAMP ||
	    off >= size)
		return;
	s = off > size - WSLOAD_STAMP ? off : size - WSLOAD_STAMP;
	e = off + n < size ? off + n : size;
	memcpy(cl->cl_stamps + WSLOAD_STAMP + (s - (size - WSLOAD_STAMP)),
	    p + (s - off), (size_t)(e - s));
}

/* Did the echo carry seq where stamp_put put it? */
static int
stamp_check(const struct client *cl, uint64_t seq)
{
	uint8_t s[WSLOAD_STAMP];
	size_t first = opt.size < WSLOAD_STAMP ? (size_t)opt.size
					       : WSLOAD_STAMP;

	stamp_format(seq, s);
	if (memcmp(cl->cl_stamps, s, first) != 0)
		return (0);
	if (opt.size >= 2 * WSLOAD_STAMP &&
	    memcmp(cl->cl_stamps + WSLOAD_STAMP, s, WSLOAD_STAMP) != 0)
		return (0);
	return (1);
}

/* Queue the next message of a connection. */
static void
client_send(struct client *cl)
{
	struct loader *ld = cl->cl_loader;
	uint64_t seq = cl->cl_seq_sent++;

	stamp_put(ld->ld_payload, (size_t)opt.size, seq);
	cl->cl_sent_at[seq % opt.depth] = ld->ld_now;
	ws_frame_append(&cl->cl_out, 1, opt.binary ? WS_OP_BINARY : WS_OP_TEXT,
	    ld->ld_payload, (size_t)opt.size, &cl->cl_rng);
}

/* Has --messages been reached?  Counts one echo towards it. */
static int
wsload_count_one(uint64_t now)
{
	unsigned long long n, zero = 0;

	n = atomic_fetch_add(&wsload_count, 1) + 1;
	if (n < opt.messages)
		return (0);
	if (n == opt.messages) {
		atomic_compare_exchange_strong(&wsload_stop_at, &zero, now);
		atomic_store(&wsload_stop, 1);
	}
	return (n == opt.messages ? 0 : 1);
}

/* A whole echo came back: check it, time it, send the next. */
static void
client_echo(struct client *cl)
{
	struct loader *ld = cl->cl_loader;
	uint8_t want = opt.binary ? WS_OP_BINARY : WS_OP_TEXT;
	uint64_t seq = cl->cl_seq_recv++;

	if (cl->cl_wp.wp_msg_op != want || cl->cl_moff != opt.size ||
	    seq >= cl->cl_seq_sent || !stamp_check(cl, seq)) {
		client_fail(cl,
		    "echo %llu is wrong (%s message of %llu bytes, want %s of "
		    "%llu with its sequence number)",
		    (unsigned long long)seq,
		    cl->cl_wp.wp_msg_op == WS_OP_TEXT ? "text" : "binary",
		    (unsigned long long)cl->cl_moff,
		    opt.binary ? "binary" : "text",
		    (unsigned long long)opt.size);
		return;
	}
	if (atomic_load_explicit(&wsload_stop, memory_order_relaxed))
		return;
	if (opt.messages != 0 && wsload_count_one(ld->ld_now))
		return;
	hist_add(ld->ld_hist, ld->ld_now - cl->cl_sent_at[seq % opt.depth]);
	ld->ld_msgs++;
	if (!atomic_load_explicit(&wsload_stop, memory_order_relaxed))
		client_send(cl);
}

/* Frames from the server: echoes, pings, a close. */
static void
client_frames(struct client *cl, const uint8_t *p, size_t n)
{
	struct wsparse *wp = &cl->cl_wp;
	const uint8_t *d = NULL;
	size_t dl = 0;

	while (cl->cl_state == CL_S_OPEN) {
		switch (ws_parse(wp, &p, &n, &d, &dl)) {
		case WS_EV_NEED:
			return;
		case WS_EV_ERROR:
			client_fail(
			    cl, "bad frame from the server: %s", wp->wp_why);
			return;
		case WS_EV_HEADER:
			if (wp->wp_op == WS_OP_TEXT ||
			    wp->wp_op == WS_OP_BINARY)
				cl->cl_moff = 0;
			break;
		case WS_EV_DATA:
			stamp_collect(cl, d, dl, cl->cl_moff);
			cl->cl_moff += dl;
			break;
		case WS_EV_END:
			if (wp->wp_op == WS_OP_PING)
				ws_frame_append(&cl->cl_out, 1, WS_OP_PONG,
				    wp->wp_ctl, (size_t)wp->wp_len,
				    &cl->cl_rng);
			else if (wp->wp_op == WS_OP_CLOSE)
				client_fail(cl,
				    "the server closed the "
				    "WebSocket (%u)",
				    wp->wp_len >= 2
					? (unsigned int)(wp->wp_ctl[0] << 8 |
					      wp->wp_ctl[1])
					: WS_CLOSE_NO_STATUS);
			else if (!(wp->wp_op & 0x08) && wp->wp_fin)
				client_echo(cl);
			break;
		}
	}
}

/* Start connecting client cl. */
static void
client_start(struct client *cl)
{
	struct loader *ld = cl->cl_loader;
	struct epoll_event ev;
	char *cause = NULL;
	int fd;

	ld->ld_pending++;
	cl->cl_state = CL_S_CONNECT;
	cl->cl_deadline = clock_mono_msec() + WSLOAD_HANDSHAKE_MS;
	fd = sock_connect(
	    (struct sockaddr *)&opt.url.u_addr, opt.url.u_addrlen, &cause);
	if (fd == -1) {
		client_fail(cl, "%s", cause);
		free(cause);
		return;
	}
	cl->cl_fd = fd;
	memset(&ev, 0, sizeof ev);
	ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
	ev.data.ptr = cl;
	if (epoll_ctl(ld->ld_ep, EPOLL_CTL_ADD, fd, &ev) != 0)
		client_fail(cl, "epoll_ctl: %s", strerror(errno));
}

/* The TCP connect finished: send the upgrade request. */
static void
client_connected(struct client *cl)
{
	const char *host;
	char *req;
	socklen_t len = sizeof(int);
	int err = 0;

	if (getsockopt(cl->cl_fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
	    err != 0) {
		client_fail(
		    cl, "connect: %s", strerror(err != 0 ? err : errno));
		return;
	}
	ws_random_key(cl->cl_key);
	host = opt.headers.h_host != NULL ? opt.headers.h_host
					  : opt.url.u_authority;
	req = ws_client_request(host, opt.url.u_path, cl->cl_key,
	    (const char *const *)opt.headers.h_list);
	if (req == NULL) {
		client_fail(cl, "cannot build the upgrade request");
		return;
	}
	buf_append_str(&cl->cl_out, req);
	free(req);
	cl->cl_state = CL_S_HANDSHAKE;
}

/* Bytes of the 101 came in: check it once whole, then go WebSocket. */
static void
client_handshake(struct client *cl, const uint8_t *p, size_t n)
{
	struct loader *ld = cl->cl_loader;
	char *why = NULL;
	size_t head;
	int r;

	buf_append(&cl->cl_in, p, n);
	r = ws_client_response(
	    BUF_PTR(&cl->cl_in), BUF_LEN(&cl->cl_in), cl->cl_key, &head, &why);
	if (r == 0)
		return;
	if (r < 0) {
		client_fail(cl, "%s", why);
		free(why);
		return;
	}
	buf_consume(&cl->cl_in, head);
	ws_parse_init(&cl->cl_wp, 0,
	    opt.size > WS_CONTROL_MAX ? opt.size : WS_CONTROL_MAX);
	cl->cl_sent_at = xcalloc((size_t)opt.depth, sizeof *cl->cl_sent_at);
	cl->cl_state = CL_S_OPEN;
	ld->ld_pending--;
	ld->ld_settled++;
	atomic_fetch_add(&wsload_open, 1);
	/* Frames right behind the 101 (pings). */
	if (BUF_LEN(&cl->cl_in) > 0)
		client_frames(cl, BUF_PTR(&cl->cl_in), BUF_LEN(&cl->cl_in));
	buf_free(&cl->cl_in);
}

/* Give bytes read to the handshake or to the frame parser. */
static void
client_input(struct client *cl, const uint8_t *p, size_t n)
{
	if (cl->cl_state == CL_S_HANDSHAKE)
		client_handshake(cl, p, n);
	else
		client_frames(cl, p, n);
}

/* Write what is queued.  Returns -1 on error (the client failed). */
static int
client_flush(struct client *cl)
{
	int r;

	if (BUF_LEN(&cl->cl_out) == 0 || !(cl->cl_flags & CL_F_WRITABLE))
		return (0);
	r = buf_write(&cl->cl_out, cl->cl_fd);
	if (r == -1) {
		client_fail(cl, "write: %s", strerror(errno));
		return (-1);
	}
	if (r == 0)
		cl->cl_flags &= ~CL_F_WRITABLE;
	return (0);
}

/* Move a client along: connect, write, read, as the socket allows. */
static void
client_run(struct client *cl)
{
	struct loader *ld = cl->cl_loader;
	ssize_t n;

	if (cl->cl_state == CL_S_CONNECT) {
		if (!(cl->cl_flags & CL_F_WRITABLE))
			return;
		client_connected(cl);
	}
	while (cl->cl_state == CL_S_HANDSHAKE || cl->cl_state == CL_S_OPEN) {
		if (client_flush(cl) != 0)
			return;
		if (!(cl->cl_flags & CL_F_READABLE))
			return;
		n = read(cl->cl_fd, ld->ld_scratch, WSLOAD_SCRATCH);
		if (n > 0) {
			if ((size_t)n < WSLOAD_SCRATCH &&
			    !(cl->cl_flags & CL_F_RDHUP))
				cl->cl_flags &= ~CL_F_READABLE;
			ld->ld_now = clock_mono_usec();
			client_input(cl, ld->ld_scratch, (size_t)n);
		} else if (n == 0) {
			client_fail(cl, "the server closed the connection");
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			cl->cl_flags &= ~CL_F_READABLE;
			return;
		} else if (errno != EINTR)
			client_fail(cl, "read: %s", strerror(errno));
	}
}

/* Connect more clients while fewer than ld_max_pending handshakes run. */
static void
loader_fill(struct loader *ld)
{
	while (
	    ld->ld_next < ld->ld_count && ld->ld_pending < ld->ld_max_pending)
		client_start(&ld->ld_clients[ld->ld_next++]);
}

/* Release the clients that died; returns how many are still alive. */
static unsigned int
loader_reap(struct loader *ld)
{
	unsigned int i, alive = 0;

	for (i = 0; i < ld->ld_next; i++) {
		if (ld->ld_clients[i].cl_state == CL_S_DEAD)
			client_release(&ld->ld_clients[i]);
		else if (ld->ld_clients[i].cl_state != CL_S_DONE)
			alive++;
	}
	return (alive);
}

/* Fail handshakes past their deadline; looks ten times a second. */
static void
loader_timeouts(struct loader *ld)
{
	uint64_t now = clock_mono_msec();
	struct client *cl;
	unsigned int i;
	int dead = 0;

	if (now < ld->ld_check_at)
		return;
	ld->ld_check_at = now + 100;
	for (i = 0; i < ld->ld_next; i++) {
		cl = &ld->ld_clients[i];
		if ((cl->cl_state == CL_S_CONNECT ||
			cl->cl_state == CL_S_HANDSHAKE) &&
		    now >= cl->cl_deadline) {
			client_fail(cl, "handshake timed out");
			dead = 1;
		}
	}
	if (dead)
		loader_reap(ld);
}

/* Wait for events and run the clients they concern. */
static void
loader_poll(struct loader *ld, int timeout)
{
	struct epoll_event evs[256];
	struct client *cl;
	int i, n, dead = 0;

	n = epoll_wait(ld->ld_ep, evs, 256, timeout);
	if (n == -1 && errno != EINTR) {
		fprintf(
		    stderr, "akbench-ws: epoll_wait: %s\n", strerror(errno));
		exit(1);
	}
	ld->ld_now = clock_mono_usec();
	for (i = 0; i < n; i++) {
		cl = evs[i].data.ptr;
		if (evs[i].events &
		    (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			cl->cl_flags |= CL_F_READABLE;
		if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			cl->cl_flags |= CL_F_RDHUP;
		if (evs[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
			cl->cl_flags |= CL_F_WRITABLE;
		client_run(cl);
		if (cl->cl_state == CL_S_DEAD)
			dead = 1;
	}
	if (dead)
		loader_reap(ld);
}

/* A thread: connect its clients, wait for the start, echo until stop. */
static void *
loader_main(void *arg)
{
	struct loader *ld = arg;
	struct client *cl;
	unsigned int i;

	loader_fill(ld);
	while (ld->ld_settled < ld->ld_count && !atomic_load(&wsload_stop)) {
		loader_poll(ld, 100);
		loader_timeouts(ld);
		loader_fill(ld);
	}
	atomic_fetch_add(&wsload_settled_threads, 1);
	while (!atomic_load(&wsload_go) && !atomic_load(&wsload_stop))
		loader_poll(ld, 5);
	ld->ld_now = clock_mono_usec();
	for (i = 0; i < ld->ld_count && !atomic_load(&wsload_stop); i++) {
		cl = &ld->ld_clients[i];
		while (cl->cl_state == CL_S_OPEN && cl->cl_seq_sent < opt.depth)
			client_send(cl);
		client_run(cl);
	}
	loader_reap(ld);
	while (!atomic_load(&wsload_stop))
		loader_poll(ld, 100);
	for (i = 0; i < ld->ld_count; i++) {
		if (ld->ld_clients[i].cl_state != CL_S_DONE &&
		    ld->ld_clients[i].cl_state != CL_S_IDLE)
			client_release(&ld->ld_clients[i]);
	}
	return (NULL);
}

/* Free a thread's memory once it has been joined. */
static void
loader_free(struct loader *ld)
{
	close(ld->ld_ep);
	free(ld->ld_clients);
	free(ld->ld_scratch);
	free(ld->ld_payload);
	free(ld->ld_hist);
}

/* SIGINT or SIGTERM: stop and report what was measured. */
static void
wsload_signal(int sig)
{
	(void)sig;
	wsload_signalled = 1;
}

/* Print how to use the tool; exit with status. */
static void __attribute__((noreturn)) usage(int status)
{
	fprintf(status == 0 ? stdout : stderr,
	    "usage: akbench-ws --url ws://HOST:PORT/PATH [--connections C] "
	    "[--size S]\n"
	    "          [--duration SEC | --messages N] [--depth D] "
	    "[--binary]\n"
	    "          [--header 'Name: value']... [--threads T]\n"
	    "Prints one line: messages= seconds= msgs_per_s= mbytes_per_s= "
	    "p50_us= p99_us= errors=\n");
	exit(status);
}

/* Parse the command line into opt; exits on a bad one. */
static void
wsload_options(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "url", required_argument, NULL, 'u' },
		{ "connections", required_argument, NULL, 'c' },
		{ "size", required_argument, NULL, 's' },
		{ "duration", required_argument, NULL, 'd' },
		{ "messages", required_argument, NULL, 'm' },
		{ "depth", required_argument, NULL, 'D' },
		{ "binary", no_argument, NULL, 'b' },
		{ "header", required_argument, NULL, 'H' },
		{ "threads", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *url = NULL;
	char *cause = NULL;
	int ch, r = 0, has_duration = 0;

	while ((ch = getopt_long(
		    argc, argv, "u:c:s:d:m:D:bH:t:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'u':
			url = optarg;
			break;
		case 'c':
			r = opt_u64("--connections", optarg, 1, 1000000,
			    &opt.connections, &cause);
			break;
		case 's':
			r = opt_u64("--size", optarg, 1, WSLOAD_MAX_SIZE,
			    &opt.size, &cause);
			break;
		case 'd':
			r = opt_seconds(
			    "--duration", optarg, &opt.duration, &cause);
			has_duration = 1;
			break;
		case 'm':
			r = opt_u64("--messages", optarg, 1, UINT64_MAX / 2,
			    &opt.messages, &cause);
			break;
		case 'D':
			r = opt_u64(
			    "--depth", optarg, 1, 65536, &opt.depth, &cause);
			break;
		case 'b':
			opt.binary = 1;
			break;
		case 'H':
			r = headers_add(&opt.headers, optarg, &cause);
			break;
		case 't':
			r = opt_u64(
			    "--threads", optarg, 1, 256, &opt.threads, &cause);
			break;
		case 'h':
			usage(0);
		case 'V':
			printf("akbench-ws %s\n", AK_VERSION);
			exit(0);
		default:
			usage(1);
		}
		if (r != 0)
			goto fail;
	}
	if (optind != argc || url == NULL)
		usage(1);
	if (url_parse(url, URL_WS, &opt.url, &cause) != 0)
		goto fail;
	if (!has_duration && opt.messages == 0)
		opt.duration = 10;
	if (opt.threads > opt.connections)
		opt.threads = opt.connections;
	return;

fail:
	fprintf(stderr, "akbench-ws: %s\n", cause);
	exit(1);
}

/* Connect everyone, start the clock, stop it, print the result line. */
int
main(int argc, char **argv)
{
	struct sigaction sa;
	struct loader *lds, *ld;
	struct hist *all;
	uint64_t t0, t1, now, end, msgs = 0, errors = 0, per, i, j, p50, p99;
	unsigned int idx;
	double secs;
	char *cause = NULL;

	wsload_options(argc, argv);
	if (nofile_raise(opt.connections + 64, &cause) != 0) {
		fprintf(stderr, "akbench-ws: %s\n", cause);
		return (1);
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = wsload_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	lds = xcalloc((size_t)opt.threads, sizeof *lds);
	per = opt.connections / opt.threads;
	for (i = 0, idx = 0; i < opt.threads; i++) {
		ld = &lds[i];
		ld->ld_count = (unsigned int)(per +
		    (i < opt.connections % opt.threads ? 1 : 0));
		ld->ld_clients = xcalloc(ld->ld_count, sizeof *ld->ld_clients);
		for (j = 0; j < ld->ld_count; j++) {
			ld->ld_clients[j].cl_loader = ld;
			ld->ld_clients[j].cl_index = idx++;
			ld->ld_clients[j].cl_fd = -1;
		}
		ld->ld_max_pending = (unsigned int)(WSLOAD_HANDSHAKES /
		    opt.threads);
		if (ld->ld_max_pending == 0)
			ld->ld_max_pending = 1;
		ld->ld_scratch = xmalloc(WSLOAD_SCRATCH);
		ld->ld_payload = xmalloc((size_t)opt.size);
		for (j = 0; j < opt.size; j++)
			ld->ld_payload[j] = (uint8_t)('a' + j % 26);
		ld->ld_hist = xcalloc(1, sizeof *ld->ld_hist);
		if ((ld->ld_ep = epoll_create1(EPOLL_CLOEXEC)) == -1) {
			fprintf(stderr, "akbench-ws: epoll_create1: %s\n",
			    strerror(errno));
			return (1);
		}
	}
	for (i = 0; i < opt.threads; i++) {
		if ((errno = pthread_create(
			 &lds[i].ld_thread, NULL, loader_main, &lds[i])) != 0) {
			fprintf(stderr, "akbench-ws: pthread_create: %s\n",
			    strerror(errno));
			return (1);
		}
	}

	/* Everyone connected (or failed): start the clock. */
	while (atomic_load(&wsload_settled_threads) < opt.threads &&
	    !wsload_signalled)
		usleep(2000);
	if (atomic_load(&wsload_open) == 0 || wsload_signalled) {
		atomic_store(&wsload_stop, 1);
		for (i = 0; i < opt.threads; i++) {
			pthread_join(lds[i].ld_thread, NULL);
			loader_free(&lds[i]);
		}
		free(lds);
		if (wsload_signalled)
			fprintf(stderr, "akbench-ws: interrupted\n");
		else
			fprintf(stderr,
			    "akbench-ws: no connection could be established: "
			    "%s\n",
			    wsload_reason != NULL ? wsload_reason : "?");
		return (1);
	}
	t0 = clock_mono_usec();
	atomic_store(&wsload_go, 1);
	/*
	 * Wake every 10 ms at most: the threads stop themselves at
	 * --messages; we stop them at --duration, on a signal, or when no
	 * connection is left.
	 */
	end = opt.duration > 0 ? t0 + (uint64_t)(opt.duration * 1e6)
			       : UINT64_MAX;
	while (!wsload_signalled && !atomic_load(&wsload_stop) &&
	    atomic_load(&wsload_open) > 0 && (now = clock_mono_usec()) < end)
		usleep((useconds_t)(end - now < 10000 ? end - now : 10000));
	atomic_store(&wsload_stop, 1);
	t1 = atomic_load(&wsload_stop_at);
	if (t1 == 0)
		t1 = clock_mono_usec();
	all = xcalloc(1, sizeof *all);
	for (i = 0; i < opt.threads; i++) {
		pthread_join(lds[i].ld_thread, NULL);
		msgs += lds[i].ld_msgs;
		errors += lds[i].ld_errors;
		hist_merge(all, lds[i].ld_hist);
		loader_free(&lds[i]);
	}
	free(lds);
	secs = (double)(t1 - t0) / 1e6;
	p50 = hist_quantile(all, 0.50);
	p99 = hist_quantile(all, 0.99);
	free(all);
	if (secs <= 0)
		secs = 1e-6;
	printf("messages=%llu seconds=%.3f msgs_per_s=%.1f mbytes_per_s=%.3f "
	       "p50_us=%llu p99_us=%llu errors=%llu\n",
	    (unsigned long long)msgs, secs, (double)msgs / secs,
	    (double)msgs * (double)opt.size / 1e6 / secs,
	    (unsigned long long)p50, (unsigned long long)p99,
	    (unsigned long long)errors);
	fflush(stdout);
	if (errors > 0) {
		fprintf(stderr, "akbench-ws: %llu errors; the first: %s\n",
		    (unsigned long long)errors,
		    wsload_reason != NULL ? wsload_reason : "?");
		return (1);
	}
	return (0);
}
