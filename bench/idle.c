/*
 * akbench-idle: open many idle connections through a proxy, to measure
 * what each costs it.
 *
 *   http	GET the URL with keep-alive, read the whole response, stay
 *   ws		upgrade to WebSocket, stay (pings are answered)
 *   tunnel	upgrade, send a reverse-tunnel V2 client hello, stay (JSON
 *		pings are answered with JSON pongs, WebSocket pings with
 *		pongs)
 *
 * "%d" in the URL becomes the connection's index, so each connection can
 * be a different sandbox.  At most IDLE_HANDSHAKES connections are being
 * set up at once, so the proxy's accept queue is never overrun.  Once all
 * are up, "ready N" goes to stdout; they are held for --hold seconds (or
 * until SIGTERM or SIGINT), then closed, and "closed_by_peer=K" goes to
 * stdout.  Exits 1 if any connection failed or was closed by the server.
 */
#include <sys/types.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "alloc.h"
#include "clock.h"
#include "tunproto.h"
#include "wsconn.h"

#include "common.h"

/* Connections being set up at once. */
#define IDLE_HANDSHAKES 200
/* How long setting up one connection may take. */
#define IDLE_HANDSHAKE_MS 30000
/* Bytes read per read(2). */
#define IDLE_SCRATCH (64 * 1024)
/* Largest text message kept to look for a JSON ping. */
#define IDLE_TEXT_MAX (1 << 20)
/* Largest message accepted from the server. */
#define IDLE_MESSAGE_MAX ((uint64_t)64 << 20)
/* Descriptors kept for anything but the connections. */
#define IDLE_FD_SPARE 32

/* What the connections do once set up. */
enum idle_mode {
	MODE_HTTP,
	MODE_WS,
	MODE_TUNNEL,
};

/* Where a connection is. */
enum idle_state {
	IC_S_NEW, /* not started */
	IC_S_CONNECT, /* TCP connect in progress */
	IC_S_HEAD, /* request sent, reading the response head */
	IC_S_BODY, /* http: reading the response body */
	IC_S_READY, /* set up and idle */
	IC_S_DEAD, /* failed, or closed by the server */
};

/* One idle connection. */
struct idle_conn {
	int ic_fd;
	unsigned int ic_index;
	enum idle_state ic_state;
	int ic_flags;
#define IC_F_READABLE 0x01 /* unread bytes may wait in the socket */
#define IC_F_WRITABLE 0x02 /* the socket took the last write whole */
#define IC_F_RDHUP 0x04 /* the FIN is in: read up to it */
#define IC_F_CHUNKED 0x08 /* http: the body is chunked */
#define IC_F_TEXT_SKIP 0x10 /* the text message is too long to keep */
	uint64_t ic_deadline; /* set-up deadline (ms) */
	struct buf ic_in; /* the response head while it comes in */
	struct buf ic_out;
	char ic_key[WS_KEY_LEN + 1];
	uint64_t ic_rng; /* masking keys */
	uint64_t ic_body_left; /* http: Content-Length bytes to read */
	struct chunked *ic_chunked; /* http: chunked body */
	struct wsparse *ic_wp; /* ws and tunnel: the server's frames */
	struct buf ic_text; /* a text message being put together */
};

/* The command line. */
static struct {
	struct url url;
	struct headers headers;
	enum idle_mode mode;
	uint64_t connections;
	double hold;
} opt = { .mode = MODE_HTTP, .hold = 60 };

static struct idle_conn *idle_conns;
static int idle_ep = -1;
static unsigned int idle_next; /* next connection to start */
static unsigned int idle_pending; /* being set up */
static unsigned int idle_ready;
static unsigned int idle_failed;
static unsigned int idle_closed_by_peer;
static int idle_holding; /* all are up: closes are the server's doing */
static char *idle_reason; /* why the first connection failed */
static uint8_t idle_scratch[IDLE_SCRATCH];
static volatile sig_atomic_t idle_signalled;

/*
 * A connection ended before we ended it: while setting up that is a
 * failure, while holding a close by the server.  The socket is closed at
 * once; the struct stays in the array.
 */
static void __attribute__((format(printf, 2, 3)))
idle_conn_lost(struct idle_conn *ic, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (ic->ic_state == IC_S_DEAD)
		return;
	va_start(ap, fmt);
	xvasprintf(&s, fmt, ap);
	va_end(ap);
	if (idle_holding) {
		idle_closed_by_peer++;
		fprintf(stderr, "akbench-idle: connection %u: %s\n",
		    ic->ic_index, s);
		free(s);
	} else {
		idle_failed++;
		if (idle_reason == NULL)
			xasprintf(
			    &idle_reason, "connection %u: %s", ic->ic_index, s);
		free(s);
	}
	if (ic->ic_state == IC_S_READY)
		idle_ready--;
	else if (ic->ic_state != IC_S_NEW)
		idle_pending--;
	ic->ic_state = IC_S_DEAD;
	if (ic->ic_fd != -1)
		close(ic->ic_fd);
	ic->ic_fd = -1;
	buf_free(&ic->ic_in);
	buf_free(&ic->ic_out);
	buf_free(&ic->ic_text);
	free(ic->ic_chunked);
	ic->ic_chunked = NULL;
	free(ic->ic_wp);
	ic->ic_wp = NULL;
}

/* A connection is set up. */
static void
idle_conn_ready(struct idle_conn *ic)
{
	ic->ic_state = IC_S_READY;
	idle_pending--;
	idle_ready++;
	buf_free(&ic->ic_in);
	free(ic->ic_chunked);
	ic->ic_chunked = NULL;
}

/* The TCP connect finished: send the request. */
static void
idle_conn_connected(struct idle_conn *ic)
{
	const char *host;
	char *path, *req;
	socklen_t len = sizeof(int);
	size_t i;
	int err = 0;

	if (getsockopt(ic->ic_fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
	    err != 0) {
		idle_conn_lost(
		    ic, "connect: %s", strerror(err != 0 ? err : errno));
		return;
	}
	host = opt.headers.h_host != NULL ? opt.headers.h_host
					  : opt.url.u_authority;
	path = url_path_expand(opt.url.u_path, ic->ic_index);
	if (opt.mode == MODE_HTTP) {
		buf_append_str(&ic->ic_out, "GET ");
		buf_append_str(&ic->ic_out, path);
		buf_append_str(&ic->ic_out, " HTTP/1.1\r\nHost: ");
		buf_append_str(&ic->ic_out, host);
		buf_append_str(&ic->ic_out, "\r\nConnection: keep-alive\r\n");
		for (i = 0; i < opt.headers.h_count; i++) {
			buf_append_str(&ic->ic_out, opt.headers.h_list[i]);
			buf_append_str(&ic->ic_out, "\r\n");
		}
		buf_append_str(&ic->ic_out, "\r\n");
	} else {
		ws_random_key(ic->ic_key);
		req = ws_client_request(host, path, ic->ic_key,
		    (const char *const *)opt.headers.h_list);
		if (req == NULL) {
			free(path);
			idle_conn_lost(ic, "cannot build the upgrade request");
			return;
		}
		buf_append_str(&ic->ic_out, req);
		free(req);
	}
	free(path);
	ic->ic_state = IC_S_HEAD;
}

/* Send the reverse-tunnel V2 client hello with a fresh session id. */
static void
idle_conn_hello(struct idle_conn *ic)
{
	char uuid[37], *hello;
	int len;

	if (tunproto_uuid_random(uuid) != 0) {
		idle_conn_lost(ic, "no random bytes for a session id");
		return;
	}
	len = xasprintf(&hello,
	    "{\"type\":\"hello\",\"protocol_version\":2,"
	    "\"max_stream_chunk\":65536,\"max_inflight\":16,"
	    "\"stream_window_frames\":16,\"max_body_size\":536870912,"
	    "\"max_ws_message_size\":8388608,\"resume\":true,"
	    "\"session_id\":\"%s\"}",
	    uuid);
	ws_frame_append(&ic->ic_out, 1, WS_OP_TEXT, (const uint8_t *)hello,
	    (size_t)len, &ic->ic_rng);
	free(hello);
}

/*
 * A whole text message in tunnel mode: answer a JSON ping with a pong of
 * the same id and timestamp, as aktunnel does; the gateway drops (and
 * logs) a pong without a timestamp.
 */
static void
idle_conn_text(struct idle_conn *ic)
{
	json_t *m, *type, *id, *ts, *pong;
	json_error_t err;
	char *s;

	m = json_loadb((const char *)BUF_PTR(&ic->ic_text),
	    BUF_LEN(&ic->ic_text), 0, &err);
	if (m == NULL)
		return;
	type = json_object_get(m, "type");
	id = json_object_get(m, "id");
	ts = json_object_get(m, "timestamp");
	if (json_is_string(type) &&
	    strcmp(json_string_value(type), "ping") == 0 && id != NULL) {
		pong = json_object();
		json_object_set_new(pong, "type", json_string("pong"));
		json_object_set(pong, "id", id);
		if (ts != NULL)
			json_object_set(pong, "timestamp", ts);
		if ((s = json_dumps(pong, JSON_COMPACT)) != NULL) {
			ws_frame_append(&ic->ic_out, 1, WS_OP_TEXT,
			    (const uint8_t *)s, strlen(s), &ic->ic_rng);
			free(s);
		}
		json_decref(pong);
	}
	json_decref(m);
}

/* Frames from the server: answer pings, notice a close. */
static void
idle_conn_frames(struct idle_conn *ic, const uint8_t *p, size_t n)
{
	struct wsparse *wp = ic->ic_wp;
	const uint8_t *d = NULL;
	size_t dl = 0;
	unsigned int code;

	while (ic->ic_state == IC_S_READY) {
		switch (ws_parse(wp, &p, &n, &d, &dl)) {
		case WS_EV_NEED:
			return;
		case WS_EV_ERROR:
			idle_conn_lost(
			    ic, "bad frame from the server: %s", wp->wp_why);
			return;
		case WS_EV_HEADER:
			if (wp->wp_op == WS_OP_TEXT ||
			    wp->wp_op == WS_OP_BINARY) {
				buf_free(&ic->ic_text);
				ic->ic_flags &= ~IC_F_TEXT_SKIP;
			}
			break;
		case WS_EV_DATA:
			if (opt.mode != MODE_TUNNEL ||
			    wp->wp_msg_op != WS_OP_TEXT ||
			    (ic->ic_flags & IC_F_TEXT_SKIP))
				break;
			if (BUF_LEN(&ic->ic_text) + dl > IDLE_TEXT_MAX) {
				ic->ic_flags |= IC_F_TEXT_SKIP;
				buf_free(&ic->ic_text);
				break;
			}
			buf_append(&ic->ic_text, d, dl);
			break;
		case WS_EV_END:
			if (wp->wp_op == WS_OP_PING)
				ws_frame_append(&ic->ic_out, 1, WS_OP_PONG,
				    wp->wp_ctl, (size_t)wp->wp_len,
				    &ic->ic_rng);
			else if (wp->wp_op == WS_OP_CLOSE) {
				code = wp->wp_len >= 2
				    ? (unsigned int)(wp->wp_ctl[0] << 8 |
					  wp->wp_ctl[1])
				    : WS_CLOSE_NO_STATUS;
				idle_conn_lost(ic,
				    "WebSocket closed by the "
				    "server (%u)",
				    code);
				return;
			} else if (!(wp->wp_op & 0x08) && wp->wp_fin &&
			    wp->wp_msg_op == WS_OP_TEXT &&
			    opt.mode == MODE_TUNNEL &&
			    !(ic->ic_flags & IC_F_TEXT_SKIP)) {
				idle_conn_text(ic);
				buf_free(&ic->ic_text);
			}
			break;
		}
	}
}

/* Read and drop body bytes of the http response. */
static void
idle_conn_body(struct idle_conn *ic, const uint8_t *p, size_t n)
{
	const char *why;
	uint64_t data = 0;
	ssize_t r;
	int done;

	if (ic->ic_chunked != NULL) {
		r = chunked_feed(ic->ic_chunked, p, n, &data, &done, &why);
		if (r < 0)
			idle_conn_lost(ic, "response body: %s", why);
		else if (done)
			idle_conn_ready(ic);
		return;
	}
	if (n > ic->ic_body_left)
		n = (size_t)ic->ic_body_left;
	ic->ic_body_left -= n;
	if (ic->ic_body_left == 0)
		idle_conn_ready(ic);
}

/* The http response head came in whole: check it. */
static void
idle_conn_http_head(struct idle_conn *ic, size_t head)
{
	struct http_resp *r;
	struct buf rest;
	const char *why;

	r = xmalloc(sizeof *r);
	if (http_parse_response(
		(const char *)BUF_PTR(&ic->ic_in), head, r, &why) != 0) {
		idle_conn_lost(ic, "response: %s", why);
		goto out;
	}
	if (r->r_status < 200 || r->r_status > 299) {
		idle_conn_lost(ic, "answered with HTTP %d", r->r_status);
		goto out;
	}
	if (r->r_flags & HTTP_RESP_F_CLOSE) {
		idle_conn_lost(ic, "the response closes the connection");
		goto out;
	}
	if (!(r->r_flags & (HTTP_RESP_F_LENGTH | HTTP_RESP_F_CHUNKED))) {
		idle_conn_lost(ic, "the response has no Content-Length");
		goto out;
	}
	/* What came after the head is body: take it out of ic_in. */
	buf_consume(&ic->ic_in, head);
	rest = ic->ic_in;
	memset(&ic->ic_in, 0, sizeof ic->ic_in);
	if (r->r_flags & HTTP_RESP_F_CHUNKED) {
		ic->ic_chunked = xmalloc(sizeof *ic->ic_chunked);
		chunked_init(ic->ic_chunked);
		ic->ic_state = IC_S_BODY;
	} else if ((ic->ic_body_left = r->r_length) == 0)
		idle_conn_ready(ic);
	else
		ic->ic_state = IC_S_BODY;
	if (ic->ic_state == IC_S_BODY && BUF_LEN(&rest) > 0)
		idle_conn_body(ic, BUF_PTR(&rest), BUF_LEN(&rest));
	buf_free(&rest);
out:
	free(r);
}

/* Bytes of the response head came in. */
static void
idle_conn_head(struct idle_conn *ic, const uint8_t *p, size_t n)
{
	struct buf rest;
	char *why = NULL;
	size_t head;
	int r;

	buf_append(&ic->ic_in, p, n);
	if (opt.mode == MODE_HTTP) {
		r = http_head_end((const char *)BUF_PTR(&ic->ic_in),
		    BUF_LEN(&ic->ic_in), &head);
		if (r == 0 && BUF_LEN(&ic->ic_in) <= BENCH_HEAD_MAX)
			return;
		if (r != 1 || head > BENCH_HEAD_MAX) {
			idle_conn_lost(ic, "bad or oversized response head");
			return;
		}
		idle_conn_http_head(ic, head);
		return;
	}
	r = ws_client_response(
	    BUF_PTR(&ic->ic_in), BUF_LEN(&ic->ic_in), ic->ic_key, &head, &why);
	if (r == 0)
		return;
	if (r < 0) {
		idle_conn_lost(ic, "%s", why);
		free(why);
		return;
	}
	/* Frames may follow the 101 (the gateway's tunnel hello). */
	buf_consume(&ic->ic_in, head);
	rest = ic->ic_in;
	memset(&ic->ic_in, 0, sizeof ic->ic_in);
	ic->ic_wp = xmalloc(sizeof *ic->ic_wp);
	ws_parse_init(ic->ic_wp, 0, IDLE_MESSAGE_MAX);
	if (opt.mode == MODE_TUNNEL)
		idle_conn_hello(ic);
	idle_conn_ready(ic);
	if (BUF_LEN(&rest) > 0)
		idle_conn_frames(ic, BUF_PTR(&rest), BUF_LEN(&rest));
	buf_free(&rest);
}

/* Give bytes read to whatever the connection is waiting for. */
static void
idle_conn_input(struct idle_conn *ic, const uint8_t *p, size_t n)
{
	switch (ic->ic_state) {
	case IC_S_HEAD:
		idle_conn_head(ic, p, n);
		break;
	case IC_S_BODY:
		idle_conn_body(ic, p, n);
		break;
	case IC_S_READY:
		if (ic->ic_wp != NULL)
			idle_conn_frames(ic, p, n);
		/* Bytes on an idle http connection are ignored. */
		break;
	default:
		break;
	}
}

/* Move a connection along as far as its socket allows. */
static void
idle_conn_run(struct idle_conn *ic)
{
	ssize_t n;
	int r;

	if (ic->ic_state == IC_S_CONNECT) {
		if (!(ic->ic_flags & IC_F_WRITABLE))
			return;
		idle_conn_connected(ic);
	}
	while (ic->ic_state != IC_S_DEAD && ic->ic_state != IC_S_NEW) {
		if (BUF_LEN(&ic->ic_out) > 0 &&
		    (ic->ic_flags & IC_F_WRITABLE)) {
			r = buf_write(&ic->ic_out, ic->ic_fd);
			if (r == -1) {
				idle_conn_lost(
				    ic, "write: %s", strerror(errno));
				return;
			}
			if (r == 0)
				ic->ic_flags &= ~IC_F_WRITABLE;
			else
				buf_free(&ic->ic_out);
		}
		if (!(ic->ic_flags & IC_F_READABLE))
			return;
		n = read(ic->ic_fd, idle_scratch, sizeof idle_scratch);
		if (n > 0) {
			if ((size_t)n < sizeof idle_scratch &&
			    !(ic->ic_flags & IC_F_RDHUP))
				ic->ic_flags &= ~IC_F_READABLE;
			idle_conn_input(ic, idle_scratch, (size_t)n);
		} else if (n == 0)
			idle_conn_lost(ic, "closed by the server");
		else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			ic->ic_flags &= ~IC_F_READABLE;
			return;
		} else if (errno != EINTR)
			idle_conn_lost(ic, "read: %s", strerror(errno));
	}
}

/* Start connecting the next connections, IDLE_HANDSHAKES at a time. */
static void
idle_fill(void)
{
	struct idle_conn *ic;
	struct epoll_event ev;
	char *cause = NULL;

	while (idle_next < opt.connections && idle_pending < IDLE_HANDSHAKES) {
		ic = &idle_conns[idle_next++];
		ic->ic_state = IC_S_CONNECT;
		idle_pending++;
		ic->ic_deadline = clock_mono_msec() + IDLE_HANDSHAKE_MS;
		ic->ic_fd = sock_connect((struct sockaddr *)&opt.url.u_addr,
		    opt.url.u_addrlen, &cause);
		if (ic->ic_fd == -1) {
			idle_conn_lost(ic, "%s", cause);
			free(cause);
			cause = NULL;
			continue;
		}
		memset(&ev, 0, sizeof ev);
		ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		ev.data.ptr = ic;
		if (epoll_ctl(idle_ep, EPOLL_CTL_ADD, ic->ic_fd, &ev) != 0)
			idle_conn_lost(ic, "epoll_ctl: %s", strerror(errno));
	}
}

/* Fail set-ups past their deadline; looks ten times a second. */
static void
idle_timeouts(void)
{
	static uint64_t check_at;
	uint64_t now = clock_mono_msec();
	unsigned int i;

	if (now < check_at)
		return;
	check_at = now + 100;

	for (i = 0; i < idle_next; i++) {
		if (idle_conns[i].ic_state != IC_S_READY &&
		    idle_conns[i].ic_state != IC_S_DEAD &&
		    now >= idle_conns[i].ic_deadline)
			idle_conn_lost(&idle_conns[i], "set-up timed out");
	}
}

/* Wait up to timeout ms for events and run the connections. */
static void
idle_poll(int timeout)
{
	struct epoll_event evs[256];
	struct idle_conn *ic;
	int i, n;

	n = epoll_wait(idle_ep, evs, 256, timeout);
	if (n == -1 && errno != EINTR) {
		fprintf(
		    stderr, "akbench-idle: epoll_wait: %s\n", strerror(errno));
		exit(1);
	}
	for (i = 0; i < n; i++) {
		ic = evs[i].data.ptr;
		if (evs[i].events &
		    (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			ic->ic_flags |= IC_F_READABLE;
		if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
			ic->ic_flags |= IC_F_RDHUP;
		if (evs[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
			ic->ic_flags |= IC_F_WRITABLE;
		idle_conn_run(ic);
	}
}

/* Close every connection; WebSockets get a best-effort close frame. */
static void
idle_close_all(void)
{
	static const uint8_t going_away[2] = { WS_CLOSE_GOING_AWAY >> 8,
		WS_CLOSE_GOING_AWAY & 0xff };
	struct idle_conn *ic;
	unsigned int i;

	for (i = 0; i < opt.connections; i++) {
		ic = &idle_conns[i];
		if (ic->ic_fd == -1)
			continue;
		if (ic->ic_state == IC_S_READY && ic->ic_wp != NULL) {
			ws_frame_append(&ic->ic_out, 1, WS_OP_CLOSE, going_away,
			    sizeof going_away, &ic->ic_rng);
			(void)buf_write(&ic->ic_out, ic->ic_fd);
		}
		close(ic->ic_fd);
		ic->ic_fd = -1;
	}
}

/* SIGINT or SIGTERM: stop holding. */
static void
idle_signal(int sig)
{
	(void)sig;
	idle_signalled = 1;
}

/* Print how to use the tool; exit with status. */
static void __attribute__((noreturn)) usage(int status)
{
	fprintf(status == 0 ? stdout : stderr,
	    "usage: akbench-idle --url URL --connections N "
	    "[--mode http|ws|tunnel]\n"
	    "          [--hold SEC] [--header 'Name: value']...\n"
	    "URL is http:// or ws:// on loopback; %%d in it becomes the "
	    "connection index.\n"
	    "Prints \"ready N\" once all are up, \"closed_by_peer=K\" at "
	    "exit.\n");
	exit(status);
}

/* Parse the command line into opt; exits on a bad one. */
static void
idle_options(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "url", required_argument, NULL, 'u' },
		{ "connections", required_argument, NULL, 'c' },
		{ "mode", required_argument, NULL, 'm' },
		{ "hold", required_argument, NULL, 'H' },
		{ "header", required_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *url = NULL;
	char *cause = NULL;
	int ch, r = 0;

	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (ch) {
		case 'u':
			url = optarg;
			break;
		case 'c':
			r = opt_u64("--connections", optarg, 1, 10000000,
			    &opt.connections, &cause);
			break;
		case 'm':
			if (strcmp(optarg, "http") == 0)
				opt.mode = MODE_HTTP;
			else if (strcmp(optarg, "ws") == 0)
				opt.mode = MODE_WS;
			else if (strcmp(optarg, "tunnel") == 0)
				opt.mode = MODE_TUNNEL;
			else {
				xasprintf(&cause,
				    "--mode: '%s' is not http, ws "
				    "or tunnel",
				    optarg);
				r = -1;
			}
			break;
		case 'H':
			r = opt_seconds("--hold", optarg, &opt.hold, &cause);
			break;
		case 'e':
			r = headers_add(&opt.headers, optarg, &cause);
			break;
		case 'h':
			usage(0);
		case 'V':
			printf("akbench-idle %s\n", AK_VERSION);
			exit(0);
		default:
			usage(1);
		}
		if (r != 0)
			goto fail;
	}
	if (optind != argc || url == NULL || opt.connections == 0)
		usage(1);
	if (url_parse(url, URL_HTTP | URL_WS, &opt.url, &cause) != 0)
		goto fail;
	return;

fail:
	fprintf(stderr, "akbench-idle: %s\n", cause);
	exit(1);
}

/* Set up every connection, say ready, hold, close, report. */
int
main(int argc, char **argv)
{
	struct sigaction sa;
	uint64_t end, now;
	char *cause = NULL;
	unsigned int i;

	idle_options(argc, argv);
	if (nofile_raise(opt.connections + IDLE_FD_SPARE, &cause) != 0) {
		fprintf(stderr, "akbench-idle: --connections %llu: %s\n",
		    (unsigned long long)opt.connections, cause);
		return (1);
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = idle_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((idle_ep = epoll_create1(EPOLL_CLOEXEC)) == -1) {
		fprintf(stderr, "akbench-idle: epoll_create1: %s\n",
		    strerror(errno));
		return (1);
	}
	idle_conns = xcalloc((size_t)opt.connections, sizeof *idle_conns);
	for (i = 0; i < opt.connections; i++) {
		idle_conns[i].ic_fd = -1;
		idle_conns[i].ic_index = i;
	}

	/* Set up, IDLE_HANDSHAKES at a time. */
	idle_fill();
	while (idle_ready + idle_failed < opt.connections && !idle_signalled) {
		idle_poll(100);
		idle_timeouts();
		idle_fill();
	}
	if (idle_signalled) {
		idle_close_all();
		fprintf(stderr,
		    "akbench-idle: interrupted with %u of %llu "
		    "connections up\n",
		    idle_ready, (unsigned long long)opt.connections);
		return (1);
	}
	if (idle_failed > 0) {
		idle_close_all();
		fprintf(stderr, "failed %u: %s\n", idle_failed, idle_reason);
		return (1);
	}
	printf("ready %u\n", idle_ready);
	fflush(stdout);

	/* Hold, answering pings; closes now count against the server. */
	idle_holding = 1;
	end = clock_mono_msec() + (uint64_t)(opt.hold * 1000);
	while (!idle_signalled && (now = clock_mono_msec()) < end)
		idle_poll(end - now > 1000 ? 1000 : (int)(end - now));
	idle_close_all();
	printf("closed_by_peer=%u\n", idle_closed_by_peer);
	fflush(stdout);
	return (idle_closed_by_peer > 0 ? 1 : 0);
}
