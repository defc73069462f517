/*
 * akbench-grpc: a gRPC unary echo server for workload 10 of bench/run.bash.
 *
 * It speaks HTTP/2 with prior knowledge (h2c) only, on nghttp2, with one
 * edge-triggered epoll loop per thread (each thread has its own
 * SO_REUSEPORT listener).  Every POST gets 200 with content-type
 * application/grpc, its request body echoed back (a gRPC message echoes as
 * the same message) and the trailer grpc-status: 0.  Any other method gets
 * 405 and grpc-status 12 (unimplemented).  It checks nothing of the
 * protobuf payload: it only has to be fast.
 */
#include <sys/types.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define GRPC_VERSION "akbench-grpc 1"
/* Bytes read per read(2). */
#define GRPC_SCRATCH (64 * 1024)
/* Largest request body kept for the echo; past it the stream is reset. */
#define GRPC_MAX_BODY (4 * 1024 * 1024)
/* Streams a client may open at once. */
#define GRPC_MAX_STREAMS 1000
#define GRPC_EVENTS 256

/* A request stream: its body, kept for the echo. */
struct stream {
	uint8_t *st_body;
	size_t st_len;
	size_t st_size;
	size_t st_off; /* how much of the echo is sent */
	int st_post; /* the method is POST */
};

/* A client connection and its HTTP/2 session. */
struct conn {
	int c_fd;
	nghttp2_session *c_session;
	/* What nghttp2 gave us that the socket did not take yet. */
	uint8_t *c_out;
	size_t c_outlen;
	size_t c_outsize;
};

/* A thread: its listener, its epoll loop and its read buffer. */
struct worker {
	pthread_t w_thread;
	int w_listenfd;
	int w_epfd;
	uint8_t w_scratch[GRPC_SCRATCH];
};

static volatile sig_atomic_t stopping;
static struct sockaddr_in listen_sin;

/* Print the usage line. */
static void
grpc_usage(FILE *f)
{
	fprintf(
	    f, "usage: akbench-grpc --listen 127.0.0.1:PORT [--threads N]\n");
}

/* SIGTERM and SIGINT: the loops stop within 200 ms. */
static void
grpc_signal_cb(int sig)
{
	(void)sig;
	stopping = 1;
}

/* realloc(3) that exits on failure. */
static void *
grpc_xrealloc(void *p, size_t n)
{
	void *q;

	if ((q = realloc(p, n)) == NULL) {
		fprintf(stderr, "akbench-grpc: out of memory\n");
		exit(1);
	}
	return (q);
}

/* A request begins: give its stream a struct stream. */
static int
grpc_begin_headers_cb(nghttp2_session *s, const nghttp2_frame *frame, void *arg)
{
	struct stream *st;

	(void)arg;
	if (frame->hd.type != NGHTTP2_HEADERS ||
	    frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return (0);
	st = grpc_xrealloc(NULL, sizeof *st);
	memset(st, 0, sizeof *st);
	nghttp2_session_set_stream_user_data(s, frame->hd.stream_id, st);
	return (0);
}

/* Note whether the request is a POST; every other field is ignored. */
static int
grpc_header_cb(nghttp2_session *s, const nghttp2_frame *frame,
    const uint8_t *name, size_t namelen, const uint8_t *value, size_t valuelen,
    uint8_t flags, void *arg)
{
	struct stream *st;

	(void)flags;
	(void)arg;
	if (frame->hd.type != NGHTTP2_HEADERS)
		return (0);
	st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
	if (st == NULL)
		return (0);
	if (namelen == 7 && memcmp(name, ":method", 7) == 0 && valuelen == 4 &&
	    memcmp(value, "POST", 4) == 0)
		st->st_post = 1;
	return (0);
}

/* Keep the request body for the echo, up to GRPC_MAX_BODY. */
static int
grpc_data_cb(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
    size_t len, void *arg)
{
	struct stream *st;

	(void)flags;
	(void)arg;
	st = nghttp2_session_get_stream_user_data(s, id);
	if (st == NULL)
		return (0);
	if (st->st_len + len > GRPC_MAX_BODY) {
		nghttp2_submit_rst_stream(
		    s, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
		return (0);
	}
	if (st->st_len + len > st->st_size) {
		st->st_size = st->st_len + len < 1024 ? 1024
						      : (st->st_len + len) * 2;
		st->st_body = grpc_xrealloc(st->st_body, st->st_size);
	}
	memcpy(st->st_body + st->st_len, data, len);
	st->st_len += len;
	return (0);
}

/*
 * Hand nghttp2 the next piece of the echo; after the last one, the trailer
 * grpc-status: 0 ends the stream.
 */
static ssize_t
grpc_read_body_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
    uint32_t *flags, nghttp2_data_source *src, void *arg)
{
	struct stream *st = src->ptr;
	size_t n;
	nghttp2_nv trailer[] = {
		{ (uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1,
		    NGHTTP2_NV_FLAG_NONE },
	};

	(void)arg;
	n = st->st_len - st->st_off;
	if (n > len)
		n = len;
	memcpy(buf, st->st_body + st->st_off, n);
	st->st_off += n;
	if (st->st_off == st->st_len) {
		*flags |= NGHTTP2_DATA_FLAG_EOF |
		    NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (nghttp2_submit_trailer(s, id, trailer, 1) != 0)
			return (NGHTTP2_ERR_CALLBACK_FAILURE);
	}
	return ((ssize_t)n);
}

/* Answer a complete request: the echo, or 405 for anything but POST. */
static int
grpc_respond(nghttp2_session *s, int32_t id, struct stream *st)
{
	nghttp2_data_provider dp;
	nghttp2_nv ok[] = {
		{ (uint8_t *)":status", (uint8_t *)"200", 7, 3,
		    NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12,
		    16, NGHTTP2_NV_FLAG_NONE },
	};
	nghttp2_nv bad[] = {
		{ (uint8_t *)":status", (uint8_t *)"405", 7, 3,
		    NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"grpc-status", (uint8_t *)"12", 11, 2,
		    NGHTTP2_NV_FLAG_NONE },
	};

	if (!st->st_post)
		return (nghttp2_submit_response(s, id, bad, 2, NULL));
	dp.source.ptr = st;
	dp.read_callback = grpc_read_body_cb;
	return (nghttp2_submit_response(s, id, ok, 2, &dp));
}

/* A request is complete once a frame with END_STREAM arrives. */
static int
grpc_frame_recv_cb(nghttp2_session *s, const nghttp2_frame *frame, void *arg)
{
	struct stream *st;

	(void)arg;
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return (0);
	if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
		return (0);
	st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
	if (st == NULL)
		return (0);
	if (grpc_respond(s, frame->hd.stream_id, st) != 0)
		return (NGHTTP2_ERR_CALLBACK_FAILURE);
	return (0);
}

/* Free a stream's state when nghttp2 is done with it. */
static int
grpc_stream_close_cb(nghttp2_session *s, int32_t id, uint32_t code, void *arg)
{
	struct stream *st;

	(void)code;
	(void)arg;
	st = nghttp2_session_get_stream_user_data(s, id);
	if (st != NULL) {
		nghttp2_session_set_stream_user_data(s, id, NULL);
		free(st->st_body);
		free(st);
	}
	return (0);
}

/* The callbacks of every session (nghttp2 only reads them). */
static nghttp2_session_callbacks *callbacks;

/* Close a connection and free it (from the loop, never from nghttp2). */
static void
conn_free(struct worker *w, struct conn *c)
{
	epoll_ctl(w->w_epfd, EPOLL_CTL_DEL, c->c_fd, NULL);
	close(c->c_fd);
	nghttp2_session_del(c->c_session);
	free(c->c_out);
	free(c);
}

/*
 * Write what is pending, then what nghttp2 has; keep the rest for the next
 * EPOLLOUT.  Returns -1 when the connection is to be closed.
 */
static int
conn_flush(struct conn *c)
{
	const uint8_t *data;
	ssize_t n, w;

	for (;;) {
		while (c->c_outlen > 0) {
			w = write(c->c_fd, c->c_out, c->c_outlen);
			if (w == -1 && errno == EINTR)
				continue;
			if (w == -1 && errno == EAGAIN)
				return (0);
			if (w <= 0)
				return (-1);
			memmove(
			    c->c_out, c->c_out + w, c->c_outlen - (size_t)w);
			c->c_outlen -= (size_t)w;
		}
		n = nghttp2_session_mem_send(c->c_session, &data);
		if (n < 0)
			return (-1);
		if (n == 0)
			break;
		if ((size_t)n > c->c_outsize) {
			c->c_outsize = (size_t)n;
			c->c_out = grpc_xrealloc(c->c_out, c->c_outsize);
		}
		memcpy(c->c_out, data, (size_t)n);
		c->c_outlen = (size_t)n;
	}
	if (!nghttp2_session_want_read(c->c_session) &&
	    !nghttp2_session_want_write(c->c_session))
		return (-1);
	return (0);
}

/* Read until EAGAIN, feeding nghttp2; -1 when the connection is to close. */
static int
conn_read(struct worker *w, struct conn *c)
{
	ssize_t n;

	for (;;) {
		n = read(c->c_fd, w->w_scratch, sizeof w->w_scratch);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return (0);
		if (n <= 0)
			return (-1);
		if (nghttp2_session_mem_recv(
			c->c_session, w->w_scratch, (size_t)n) < 0)
			return (-1);
		if (conn_flush(c) == -1)
			return (-1);
	}
}

/* Accept every pending connection and start its HTTP/2 session. */
static void
conn_accept(struct worker *w)
{
	struct epoll_event ev;
	struct conn *c;
	nghttp2_settings_entry set[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS },
	};
	int fd, one = 1;

	for (;;) {
		fd = accept4(w->w_listenfd, NULL, NULL, SOCK_NONBLOCK);
		if (fd == -1)
			return;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		c = grpc_xrealloc(NULL, sizeof *c);
		memset(c, 0, sizeof *c);
		c->c_fd = fd;
		if (nghttp2_session_server_new(&c->c_session, callbacks, c) !=
		    0) {
			close(fd);
			free(c);
			continue;
		}
		nghttp2_submit_settings(
		    c->c_session, NGHTTP2_FLAG_NONE, set, 1);
		ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
		ev.data.ptr = c;
		if (epoll_ctl(w->w_epfd, EPOLL_CTL_ADD, fd, &ev) == -1 ||
		    conn_flush(c) == -1)
			conn_free(w, c);
	}
}

/* A thread's epoll loop, until a signal stops it. */
static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct epoll_event evs[GRPC_EVENTS];
	struct conn *c;
	int i, n;

	while (!stopping) {
		n = epoll_wait(w->w_epfd, evs, GRPC_EVENTS, 200);
		for (i = 0; i < n; i++) {
			if (evs[i].data.ptr == NULL) {
				conn_accept(w);
				continue;
			}
			c = evs[i].data.ptr;
			if (conn_read(w, c) == -1 || conn_flush(c) == -1)
				conn_free(w, c);
		}
	}
	return (NULL);
}

/* Bind a thread's SO_REUSEPORT listener and make its epoll set. */
static int
worker_init(struct worker *w)
{
	struct epoll_event ev;
	int one = 1;

	w->w_listenfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (w->w_listenfd == -1)
		return (-1);
	setsockopt(w->w_listenfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	setsockopt(w->w_listenfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
	if (bind(w->w_listenfd, (struct sockaddr *)&listen_sin,
		sizeof listen_sin) == -1 ||
	    listen(w->w_listenfd, 4096) == -1)
		return (-1);
	if ((w->w_epfd = epoll_create1(0)) == -1)
		return (-1);
	ev.events = EPOLLIN | EPOLLET;
	ev.data.ptr = NULL;
	return (epoll_ctl(w->w_epfd, EPOLL_CTL_ADD, w->w_listenfd, &ev));
}

/* Parse --listen (127.x.x.x:PORT only) into listen_sin. */
static int
grpc_parse_listen(const char *s)
{
	char host[64];
	const char *colon;
	char *end;
	long port;

	if ((colon = strrchr(s, ':')) == NULL ||
	    (size_t)(colon - s) >= sizeof host)
		return (-1);
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port < 1 || port > 65535)
		return (-1);
	memset(&listen_sin, 0, sizeof listen_sin);
	listen_sin.sin_family = AF_INET;
	listen_sin.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &listen_sin.sin_addr) != 1)
		return (-1);
	/* Loopback only, as every bench tool. */
	if ((ntohl(listen_sin.sin_addr.s_addr) >> 24) != 127)
		return (-1);
	return (0);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct worker *ws;
	const char *listen_arg = NULL;
	char *end;
	long nthreads = 1;
	int ch, i;

	while ((ch = getopt_long(argc, argv, "l:t:Vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'l':
			listen_arg = optarg;
			break;
		case 't':
			nthreads = strtol(optarg, &end, 10);
			if (*end != '\0' || nthreads < 1 || nthreads > 256) {
				fprintf(
				    stderr, "akbench-grpc: bad --threads\n");
				return (1);
			}
			break;
		case 'V':
			printf("%s (nghttp2 %s)\n", GRPC_VERSION,
			    nghttp2_version(0)->version_str);
			return (0);
		case 'h':
			grpc_usage(stdout);
			return (0);
		default:
			grpc_usage(stderr);
			return (1);
		}
	}
	if (listen_arg == NULL || optind != argc) {
		grpc_usage(stderr);
		return (1);
	}
	if (grpc_parse_listen(listen_arg) == -1) {
		fprintf(
		    stderr, "akbench-grpc: --listen wants 127.x.x.x:PORT\n");
		return (1);
	}

	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, grpc_signal_cb);
	signal(SIGINT, grpc_signal_cb);

	nghttp2_session_callbacks_new(&callbacks);
	nghttp2_session_callbacks_set_on_begin_headers_callback(
	    callbacks, grpc_begin_headers_cb);
	nghttp2_session_callbacks_set_on_header_callback(
	    callbacks, grpc_header_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
	    callbacks, grpc_data_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(
	    callbacks, grpc_frame_recv_cb);
	nghttp2_session_callbacks_set_on_stream_close_callback(
	    callbacks, grpc_stream_close_cb);

	ws = grpc_xrealloc(NULL, sizeof *ws * (size_t)nthreads);
	for (i = 0; i < nthreads; i++) {
		if (worker_init(&ws[i]) == -1) {
			fprintf(stderr, "akbench-grpc: %s: %s\n", listen_arg,
			    strerror(errno));
			return (1);
		}
	}
	printf("ready\n");
	fflush(stdout);
	for (i = 0; i < nthreads; i++) {
		if (pthread_create(
			&ws[i].w_thread, NULL, worker_main, &ws[i]) != 0) {
			fprintf(
			    stderr, "akbench-grpc: pthread_create failed\n");
			return (1);
		}
	}
	for (i = 0; i < nthreads; i++)
		pthread_join(ws[i].w_thread, NULL);
	return (0);
}
