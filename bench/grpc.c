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

struct stream {
	uint8_t		*body;
	size_t		 len;
	size_t		 size;
	size_t		 off;
	int		 post;
};

struct conn {
	int		 fd;
	nghttp2_session	*session;
	/* What nghttp2 gave us that the socket did not take yet. */
	uint8_t		*out;
	size_t		 outlen;
	size_t		 outsize;
};

struct worker {
	pthread_t	 thread;
	int		 listenfd;
	int		 epfd;
	uint8_t		 scratch[GRPC_SCRATCH];
};

static volatile sig_atomic_t stopping;
static struct sockaddr_in listen_sin;

static void
usage(FILE *f)
{
	fprintf(f, "usage: akbench-grpc --listen 127.0.0.1:PORT [--threads N]\n");
}

static void
on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static void *
xrealloc(void *p, size_t n)
{
	void	*q;

	if ((q = realloc(p, n)) == NULL) {
		fprintf(stderr, "akbench-grpc: out of memory\n");
		exit(1);
	}
	return (q);
}

static int
on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *arg)
{
	struct stream	*st;

	(void)arg;
	if (frame->hd.type != NGHTTP2_HEADERS ||
	    frame->headers.cat != NGHTTP2_HCAT_REQUEST)
		return (0);
	st = xrealloc(NULL, sizeof *st);
	memset(st, 0, sizeof *st);
	nghttp2_session_set_stream_user_data(s, frame->hd.stream_id, st);
	return (0);
}

static int
on_header(nghttp2_session *s, const nghttp2_frame *frame,
    const uint8_t *name, size_t namelen, const uint8_t *value, size_t valuelen,
    uint8_t flags, void *arg)
{
	struct stream	*st;

	(void)flags;
	(void)arg;
	if (frame->hd.type != NGHTTP2_HEADERS)
		return (0);
	st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
	if (st == NULL)
		return (0);
	if (namelen == 7 && memcmp(name, ":method", 7) == 0 &&
	    valuelen == 4 && memcmp(value, "POST", 4) == 0)
		st->post = 1;
	return (0);
}

static int
on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data,
    size_t len, void *arg)
{
	struct stream	*st;

	(void)flags;
	(void)arg;
	st = nghttp2_session_get_stream_user_data(s, id);
	if (st == NULL)
		return (0);
	if (st->len + len > GRPC_MAX_BODY) {
		nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id,
		    NGHTTP2_REFUSED_STREAM);
		return (0);
	}
	if (st->len + len > st->size) {
		st->size = st->len + len < 1024 ? 1024 : (st->len + len) * 2;
		st->body = xrealloc(st->body, st->size);
	}
	memcpy(st->body + st->len, data, len);
	st->len += len;
	return (0);
}

static ssize_t
read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
    uint32_t *flags, nghttp2_data_source *src, void *arg)
{
	struct stream	*st = src->ptr;
	size_t		 n;
	nghttp2_nv	 trailer[] = {
		{ (uint8_t *)"grpc-status", (uint8_t *)"0", 11, 1,
		    NGHTTP2_NV_FLAG_NONE },
	};

	(void)arg;
	n = st->len - st->off;
	if (n > len)
		n = len;
	memcpy(buf, st->body + st->off, n);
	st->off += n;
	if (st->off == st->len) {
		*flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
		if (nghttp2_submit_trailer(s, id, trailer, 1) != 0)
			return (NGHTTP2_ERR_CALLBACK_FAILURE);
	}
	return ((ssize_t)n);
}

static int
respond(nghttp2_session *s, int32_t id, struct stream *st)
{
	nghttp2_data_provider	 dp;
	nghttp2_nv		 ok[] = {
		{ (uint8_t *)":status", (uint8_t *)"200", 7, 3,
		    NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"content-type", (uint8_t *)"application/grpc", 12,
		    16, NGHTTP2_NV_FLAG_NONE },
	};
	nghttp2_nv		 bad[] = {
		{ (uint8_t *)":status", (uint8_t *)"405", 7, 3,
		    NGHTTP2_NV_FLAG_NONE },
		{ (uint8_t *)"grpc-status", (uint8_t *)"12", 11, 2,
		    NGHTTP2_NV_FLAG_NONE },
	};

	if (!st->post)
		return (nghttp2_submit_response(s, id, bad, 2, NULL));
	dp.source.ptr = st;
	dp.read_callback = read_body;
	return (nghttp2_submit_response(s, id, ok, 2, &dp));
}

static int
on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *arg)
{
	struct stream	*st;

	(void)arg;
	if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
		return (0);
	if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0)
		return (0);
	st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
	if (st == NULL)
		return (0);
	if (respond(s, frame->hd.stream_id, st) != 0)
		return (NGHTTP2_ERR_CALLBACK_FAILURE);
	return (0);
}

static int
on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *arg)
{
	struct stream	*st;

	(void)code;
	(void)arg;
	st = nghttp2_session_get_stream_user_data(s, id);
	if (st != NULL) {
		nghttp2_session_set_stream_user_data(s, id, NULL);
		free(st->body);
		free(st);
	}
	return (0);
}

static nghttp2_session_callbacks *callbacks;

static void
conn_free(struct worker *w, struct conn *c)
{
	epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	nghttp2_session_del(c->session);
	free(c->out);
	free(c);
}

/*
 * Write what is pending, then what nghttp2 has; keep the rest for the next
 * EPOLLOUT.  Returns -1 when the connection is to be closed.
 */
static int
conn_flush(struct conn *c)
{
	const uint8_t	*data;
	ssize_t		 n, w;

	for (;;) {
		while (c->outlen > 0) {
			w = write(c->fd, c->out, c->outlen);
			if (w == -1 && errno == EINTR)
				continue;
			if (w == -1 && errno == EAGAIN)
				return (0);
			if (w <= 0)
				return (-1);
			memmove(c->out, c->out + w, c->outlen - (size_t)w);
			c->outlen -= (size_t)w;
		}
		n = nghttp2_session_mem_send(c->session, &data);
		if (n < 0)
			return (-1);
		if (n == 0)
			break;
		if ((size_t)n > c->outsize) {
			c->outsize = (size_t)n;
			c->out = xrealloc(c->out, c->outsize);
		}
		memcpy(c->out, data, (size_t)n);
		c->outlen = (size_t)n;
	}
	if (!nghttp2_session_want_read(c->session) &&
	    !nghttp2_session_want_write(c->session))
		return (-1);
	return (0);
}

static int
conn_read(struct worker *w, struct conn *c)
{
	ssize_t	n;

	for (;;) {
		n = read(c->fd, w->scratch, sizeof w->scratch);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return (0);
		if (n <= 0)
			return (-1);
		if (nghttp2_session_mem_recv(c->session, w->scratch,
		    (size_t)n) < 0)
			return (-1);
		if (conn_flush(c) == -1)
			return (-1);
	}
}

static void
conn_accept(struct worker *w)
{
	struct epoll_event		 ev;
	struct conn			*c;
	nghttp2_settings_entry		 set[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, GRPC_MAX_STREAMS },
	};
	int				 fd, one = 1;

	for (;;) {
		fd = accept4(w->listenfd, NULL, NULL, SOCK_NONBLOCK);
		if (fd == -1)
			return;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		c = xrealloc(NULL, sizeof *c);
		memset(c, 0, sizeof *c);
		c->fd = fd;
		if (nghttp2_session_server_new(&c->session, callbacks, c) != 0) {
			close(fd);
			free(c);
			continue;
		}
		nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, set, 1);
		ev.events = EPOLLIN | EPOLLOUT | EPOLLET;
		ev.data.ptr = c;
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) == -1 ||
		    conn_flush(c) == -1)
			conn_free(w, c);
	}
}

static void *
worker_main(void *arg)
{
	struct worker		*w = arg;
	struct epoll_event	 evs[GRPC_EVENTS];
	struct conn		*c;
	int			 i, n;

	while (!stopping) {
		n = epoll_wait(w->epfd, evs, GRPC_EVENTS, 200);
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

static int
worker_init(struct worker *w)
{
	struct epoll_event	ev;
	int			one = 1;

	w->listenfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (w->listenfd == -1)
		return (-1);
	setsockopt(w->listenfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	setsockopt(w->listenfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
	if (bind(w->listenfd, (struct sockaddr *)&listen_sin,
	    sizeof listen_sin) == -1 || listen(w->listenfd, 4096) == -1)
		return (-1);
	if ((w->epfd = epoll_create1(0)) == -1)
		return (-1);
	ev.events = EPOLLIN | EPOLLET;
	ev.data.ptr = NULL;
	return (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->listenfd, &ev));
}

static int
parse_listen(const char *s)
{
	char		 host[64];
	const char	*colon;
	char		*end;
	long		 port;

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
	static const struct option	 opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct worker			*ws;
	const char			*listen_arg = NULL;
	char				*end;
	long				 nthreads = 1;
	int				 ch, i;

	while ((ch = getopt_long(argc, argv, "l:t:Vh", opts, NULL)) != -1) {
		switch (ch) {
		case 'l':
			listen_arg = optarg;
			break;
		case 't':
			nthreads = strtol(optarg, &end, 10);
			if (*end != '\0' || nthreads < 1 || nthreads > 256) {
				fprintf(stderr, "akbench-grpc: bad --threads\n");
				return (1);
			}
			break;
		case 'V':
			printf("%s (nghttp2 %s)\n", GRPC_VERSION,
			    nghttp2_version(0)->version_str);
			return (0);
		case 'h':
			usage(stdout);
			return (0);
		default:
			usage(stderr);
			return (1);
		}
	}
	if (listen_arg == NULL || optind != argc) {
		usage(stderr);
		return (1);
	}
	if (parse_listen(listen_arg) == -1) {
		fprintf(stderr, "akbench-grpc: --listen wants 127.x.x.x:PORT\n");
		return (1);
	}

	signal(SIGPIPE, SIG_IGN);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);

	nghttp2_session_callbacks_new(&callbacks);
	nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks,
	    on_begin_headers);
	nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks,
	    on_data);
	nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks,
	    on_frame_recv);
	nghttp2_session_callbacks_set_on_stream_close_callback(callbacks,
	    on_stream_close);

	ws = xrealloc(NULL, sizeof *ws * (size_t)nthreads);
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
		if (pthread_create(&ws[i].thread, NULL, worker_main,
		    &ws[i]) != 0) {
			fprintf(stderr, "akbench-grpc: pthread_create failed\n");
			return (1);
		}
	}
	for (i = 0; i < nthreads; i++)
		pthread_join(ws[i].thread, NULL);
	return (0);
}
