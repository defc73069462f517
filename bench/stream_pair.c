/*
 * akbench-stream: lib/stream.c against libevent's bufferevents, both ends
 * of loopback TCP connections in one process, a thread (and an event
 * base with the epoll changelist) per end.
 *
 * Contenders, each plain and TLS:
 *   bev     bufferevents as designed (with 256 KiB read and write limits);
 *   stream  lib/stream.c, what both programs run on.
 * (The third contender of the first measurements, lib/wthru.c's
 * workarounds on bufferevents, went with wthru.c: docs/performance.md.)
 * Workloads:
 *   bulk    one connection, the client sends MIB MiB, the server drains;
 *   pp      CONNS connections, each ROUNDS round trips of a 1 KiB request
 *           and a 1 KiB response.
 * Contenders alternate, RUNS times; each line gives the rate and the CPU
 * seconds of each end (RUSAGE_THREAD), and the load average comes first
 * so that a busy machine shows.
 *
 * usage: akbench-stream [-m MIB] [-c CONNS] [-r ROUNDS] [-n RUNS] [-t]
 *        [-w bulk|pp] [-k bev,stream]   (-t: TLS only; -T: plain only)
 */
#include <sys/types.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "stream.h"
#include "evio.h"
#include "tls.h"

#define PP_SIZE 1024

enum kind {
	K_BEV,
	K_STREAM
};
static const char *const kind_names[] = { "bev", "stream" };
#define NKINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

enum work {
	W_BULK,
	W_PP
};

struct side;

/* One end of one connection, whatever carries it. */
struct end {
	struct side *e_side;
	struct bufferevent *e_bev;
	struct stream *e_s;
	uint64_t e_left; /* bulk client: bytes still to queue */
	uint64_t e_got;
	int e_rounds;
	int e_done;
};

/* One thread's ends: the client or the server of every connection. */
struct side {
	enum kind sd_kind;
	enum work sd_work;
	int sd_client;
	int sd_tls;
	int sd_n;
	int *sd_fds;
	SSL_CTX *sd_ctx;
	struct event_base *sd_base;
	struct end *sd_ends;
	int sd_ndone;
	int sd_rounds;
	uint64_t sd_bytes;
	double sd_cpu;
	uint64_t sd_t0, sd_t1; /* the client's first write, last answer */
};

static unsigned char chunk[65536];

/* CPU-seconds of this thread. */
static double
thread_cpu(void)
{
	struct rusage r;

	getrusage(RUSAGE_THREAD, &r);
	return ((double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
	    (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6);
}

static struct evbuffer *
end_in(struct end *e)
{
	return (e->e_s != NULL ? stream_input(e->e_s)
			       : bufferevent_get_input(e->e_bev));
}

static struct evbuffer *
end_out(struct end *e)
{
	return (e->e_s != NULL ? stream_output(e->e_s)
			       : bufferevent_get_output(e->e_bev));
}

/* This end is finished; the last one stops the thread's loop. */
static void
end_finish(struct end *e)
{
	struct side *sd = e->e_side;

	if (e->e_done)
		return;
	e->e_done = 1;
	if (++sd->sd_ndone == sd->sd_n) {
		sd->sd_t1 = clock_mono_usec();
		event_base_loopbreak(sd->sd_base);
	}
}

/* Keep a bulk sender's output fed. */
static void
end_feed(struct end *e)
{
	struct evbuffer *out = end_out(e);
	size_t n;

	/* A bufferevent calls its write callback on any writable socket. */
	if (!e->e_side->sd_client)
		return;
	while (e->e_left != 0 && evbuffer_get_length(out) < 1024 * 1024) {
		n = e->e_left < sizeof chunk ? (size_t)e->e_left : sizeof chunk;
		evbuffer_add(out, chunk, n);
		e->e_left -= n;
	}
	if (e->e_left == 0 && evbuffer_get_length(out) == 0)
		end_finish(e);
}

/* Input arrived at e. */
static void
end_read(struct end *e)
{
	struct side *sd = e->e_side;
	struct evbuffer *in = end_in(e);
	size_t n;

	if (sd->sd_work == W_BULK) {
		n = evbuffer_get_length(in);
		e->e_got += n;
		evbuffer_drain(in, n);
		return;
	}
	while (evbuffer_get_length(in) >= PP_SIZE) {
		evbuffer_drain(in, PP_SIZE);
		if (!sd->sd_client) {
			evbuffer_add(end_out(e), chunk, PP_SIZE);
			continue;
		}
		if (++e->e_rounds == sd->sd_rounds) {
			end_finish(e);
			return;
		}
		evbuffer_add(end_out(e), chunk, PP_SIZE);
	}
}

static void
end_event(struct end *e, short what)
{
	(void)what;
	end_finish(e);
}

static void
bev_read_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	end_read(arg);
}

static void
bev_write_cb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	if (((struct end *)arg)->e_side->sd_work == W_BULK)
		end_feed(arg);
}

static void
bev_event_cb(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & BEV_EVENT_CONNECTED)
		return;
	end_event(arg, what);
}

static void
stream_read_bench_cb(struct stream *s, void *arg)
{
	(void)s;
	end_read(arg);
}

static void
stream_write_bench_cb(struct stream *s, void *arg)
{
	(void)s;
	if (((struct end *)arg)->e_side->sd_work == W_BULK)
		end_feed(arg);
}

static void
stream_event_bench_cb(struct stream *s, short what, void *arg)
{
	(void)s;
	if (what & STREAM_EV_CONNECTED)
		return;
	end_event(arg, what);
}

/* Make end i of sd on its socket. */
static void
end_open(struct side *sd, int i)
{
	struct end *e = &sd->sd_ends[i];
	char *cause = NULL;
	SSL *ssl = NULL;
	int fd = sd->sd_fds[i];

	e->e_side = sd;
	if (sd->sd_tls) {
		ssl = sd->sd_client
		    ? tls_client_ssl_new(sd->sd_ctx, "localhost", &cause)
		    : tls_server_ssl_new(sd->sd_ctx);
		if (ssl == NULL)
			abort();
	}
	if (sd->sd_kind == K_STREAM) {
		e->e_s = stream_new(sd->sd_base, fd, ssl,
		    STREAM_O_CLOSE | (sd->sd_client ? 0 : STREAM_O_ACCEPT));
		stream_setcb(e->e_s, stream_read_bench_cb,
		    stream_write_bench_cb, stream_event_bench_cb, e);
		stream_setwatermark(e->e_s, EV_WRITE, 512 * 1024, 0);
		stream_enable(e->e_s, EV_READ | EV_WRITE);
		return;
	}
	if (ssl != NULL) {
		e->e_bev = bufferevent_openssl_socket_new(sd->sd_base, fd, ssl,
		    sd->sd_client ? BUFFEREVENT_SSL_CONNECTING
				  : BUFFEREVENT_SSL_ACCEPTING,
		    BEV_OPT_CLOSE_ON_FREE);
		bufferevent_openssl_set_allow_dirty_shutdown(e->e_bev, 1);
	} else
		e->e_bev = bufferevent_socket_new(
		    sd->sd_base, fd, BEV_OPT_CLOSE_ON_FREE);
	/* What one read or write may move: 256 KiB, as the stream's. */
	bufferevent_set_max_single_read(e->e_bev, 256 * 1024);
	bufferevent_set_max_single_write(e->e_bev, 256 * 1024);
	bufferevent_setcb(e->e_bev, bev_read_cb, bev_write_cb, bev_event_cb, e);
	bufferevent_setwatermark(e->e_bev, EV_WRITE, 512 * 1024, 0);
	bufferevent_enable(e->e_bev, EV_READ | EV_WRITE);
}

/* Free an end. */
static void
end_close(struct end *e)
{
	if (e->e_s != NULL)
		stream_free(e->e_s);
	if (e->e_bev != NULL)
		bufferevent_free(e->e_bev);
	e->e_s = NULL;
	e->e_bev = NULL;
}

/* A thread: open its ends, start the clients' work, run to the end. */
static void *
side_run(void *arg)
{
	struct side *sd = arg;
	double cpu0;
	int i;

	cpu0 = thread_cpu();
	sd->sd_base = evio_base_new();
	sd->sd_ends = xcalloc((size_t)sd->sd_n, sizeof *sd->sd_ends);
	for (i = 0; i < sd->sd_n; i++)
		end_open(sd, i);
	sd->sd_t0 = clock_mono_usec();
	for (i = 0; sd->sd_client && i < sd->sd_n; i++) {
		if (sd->sd_work == W_BULK) {
			sd->sd_ends[i].e_left = sd->sd_bytes;
			end_feed(&sd->sd_ends[i]);
		} else
			evbuffer_add(end_out(&sd->sd_ends[i]), chunk, PP_SIZE);
	}
	event_base_dispatch(sd->sd_base);
	/* The client ends; the server sees the EOFs and ends too. */
	for (i = 0; i < sd->sd_n; i++)
		end_close(&sd->sd_ends[i]);
	sd->sd_cpu = thread_cpu() - cpu0;
	event_base_free(sd->sd_base);
	free(sd->sd_ends);
	return (NULL);
}

/* n connected TCP pairs on loopback: cli[i] connected to srv[i]. */
static void
tcp_pairs(int n, int *cli, int *srv)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof sin;
	int lfd, i, one = 1;

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof sin) != 0 ||
	    listen(lfd, 1024) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&sin, &len) != 0) {
		perror("listen");
		exit(1);
	}
	for (i = 0; i < n; i++) {
		cli[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(cli[i], (struct sockaddr *)&sin, sizeof sin) != 0 ||
		    (srv[i] = accept(lfd, NULL, NULL)) < 0) {
			perror("connect");
			exit(1);
		}
		setsockopt(cli[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		setsockopt(srv[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		fcntl(cli[i], F_SETFL, O_NONBLOCK);
		fcntl(srv[i], F_SETFL, O_NONBLOCK);
	}
	close(lfd);
}

/* One run of one contender: prints a line. */
static void
run(enum kind k, int tls, enum work w, int conns, int rounds, uint64_t bytes,
    SSL_CTX *sctx, SSL_CTX *cctx)
{
	struct side c, s;
	pthread_t tc, ts;
	int *cfd, *sfd;
	double secs;

	if (w == W_BULK)
		conns = 1;
	cfd = xcalloc((size_t)conns, sizeof *cfd);
	sfd = xcalloc((size_t)conns, sizeof *sfd);
	tcp_pairs(conns, cfd, sfd);
	memset(&c, 0, sizeof c);
	c.sd_kind = k;
	c.sd_work = w;
	c.sd_tls = tls;
	c.sd_n = conns;
	c.sd_rounds = rounds;
	c.sd_bytes = bytes;
	s = c;
	c.sd_client = 1;
	c.sd_fds = cfd;
	c.sd_ctx = cctx;
	s.sd_fds = sfd;
	s.sd_ctx = sctx;
	pthread_create(&ts, NULL, side_run, &s);
	pthread_create(&tc, NULL, side_run, &c);
	pthread_join(tc, NULL);
	pthread_join(ts, NULL);
	/* Bulk: until the server saw the end; round trips: the client. */
	secs = (double)((w == W_BULK ? s.sd_t1 : c.sd_t1) - c.sd_t0) / 1e6;
	if (w == W_BULK)
		printf("%-6s %-5s bulk %4llu MiB: %8.1f MB/s   CPU-s client "
		       "%.3f server %.3f\n",
		    kind_names[k], tls ? "tls" : "plain",
		    (unsigned long long)(bytes >> 20),
		    (double)bytes / secs / 1e6, c.sd_cpu, s.sd_cpu);
	else
		printf("%-6s %-5s pp 1 KiB x %d x %d: %9.0f round trips/s   "
		       "CPU-s client %.3f server %.3f (%.0f per server "
		       "CPU-s)\n",
		    kind_names[k], tls ? "tls" : "plain", conns, rounds,
		    (double)conns * rounds / secs, c.sd_cpu, s.sd_cpu,
		    (double)conns * rounds / s.sd_cpu);
	fflush(stdout);
	free(cfd);
	free(sfd);
}

int
main(int argc, char **argv)
{
	const char *certs = getenv("CERTS_DIR"), *kinds = "bev,stream";
	char crt[512], key[512], ca[512], *cause = NULL, load[64] = "";
	int conns = 64, rounds = 2000, runs = 3, only = -1, ch, i, t, k;
	int works = 3;
	uint64_t mib = 256;
	SSL_CTX *sctx, *cctx;
	FILE *f;

	while ((ch = getopt(argc, argv, "m:c:r:n:tTw:k:")) != -1) {
		switch (ch) {
		case 'm':
			mib = strtoull(optarg, NULL, 10);
			break;
		case 'c':
			conns = atoi(optarg);
			break;
		case 'r':
			rounds = atoi(optarg);
			break;
		case 'n':
			runs = atoi(optarg);
			break;
		case 't':
			only = 1;
			break;
		case 'T':
			only = 0;
			break;
		case 'w':
			works = strcmp(optarg, "bulk") == 0 ? 1 : 2;
			break;
		case 'k':
			kinds = optarg;
			break;
		default:
			fprintf(stderr,
			    "usage: akbench-stream [-m MIB] [-c "
			    "CONNS] [-r ROUNDS] [-n RUNS] [-t|-T] "
			    "[-w bulk|pp] [-k bev,stream]\n");
			return (2);
		}
	}
	signal(SIGPIPE, SIG_IGN);
	evio_malloc_tune();
	if (certs == NULL || *certs == '\0')
		certs = "build/certs";
	snprintf(crt, sizeof crt, "%s/server.crt", certs);
	snprintf(key, sizeof key, "%s/server.key", certs);
	snprintf(ca, sizeof ca, "%s/ca.crt", certs);
	if ((sctx = tls_server_ctx_new(crt, key, &cause)) == NULL ||
	    (cctx = tls_client_ctx_new(ca, 1, &cause)) == NULL) {
		fprintf(stderr, "akbench-stream: %s\n", cause);
		return (1);
	}
	if ((f = fopen("/proc/loadavg", "r")) != NULL) {
		if (fgets(load, sizeof load, f) == NULL)
			load[0] = '\0';
		fclose(f);
	}
	printf("load average before: %s", load);
	for (i = 0; i < runs; i++) {
		for (t = 0; t < 2; t++) {
			if (only != -1 && t != only)
				continue;
			for (k = 0; k < NKINDS; k++) {
				if (strstr(kinds, kind_names[k]) == NULL)
					continue;
				if (works & 1)
					run(k, t, W_BULK, 1, 0, mib << 20, sctx,
					    cctx);
				if (works & 2)
					run(k, t, W_PP, conns, rounds, 0, sctx,
					    cctx);
			}
		}
	}
	tls_ctx_free(sctx);
	tls_ctx_free(cctx);
	return (0);
}
