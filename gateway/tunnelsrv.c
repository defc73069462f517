/*
 * "akgateway tunnel-server": the sandbox role as a standalone process, as
 * AKernel's in-sandbox tunnel server runs it (tunnel-protocol.md §2.1):
 * the tunnel WebSocket on Port A (any path, §2.2), requests on Port B.
 * The tunnel core is tunnel.c's; this file only accepts the WebSocket
 * upgrade and checks the optional token.  Forward mode proxies to it.
 */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/crypto.h>

#include "addr.h"
#include "alloc.h"
#include "config.h"
#include "gw.h"
#include "stream.h"
#include "wsconn.h"

/* Handshake limits on Port A. */
#define TSRV_HEAD_MAX (16 * 1024)
#define TSRV_LINE_MAX (8 * 1024)
#define TSRV_HEADERS_MAX 100
/* The upgrade request must arrive within this, from the accept. */
#define TSRV_HEAD_TIMEOUT_MS (10 * 1000)
/* How long a refused connection drains input after its answer. */
#define TSRV_LINGER_MS 2000
/* Handshakes in progress at once. */
#define TSRV_MAX_PENDING 256

/* The running server. */
struct tsrv {
	struct gw ts_gw;
	struct tunnel *ts_tunnel;
	struct evconnlistener *ts_lev;
	struct event *ts_pause; /* EMFILE back-off (listener_backoff) */
	struct event *ts_sigint;
	struct event *ts_sigterm;
	char *ts_token; /* X-Auth / Bearer value, or NULL */
	size_t ts_npending;
	uint64_t ts_ids;
};

/*
 * A Port A connection until its upgrade is accepted; the HTTP/1 engine
 * (h1s.c) runs it.
 */
struct tsrv_conn {
	struct tsrv *sc_srv;
	struct h1s *sc_h1s;
	char sc_peer[64];
};

static const struct http1_limits tsrv_limits = { TSRV_HEAD_MAX, TSRV_LINE_MAX,
	TSRV_HEADERS_MAX };

/* One request per connection: an upgrade, or a refusal and the close. */
static const struct h1s_conf tsrv_h1conf = {
	.hc_name = "tunnel-server",
	.hc_limits = &tsrv_limits,
	.hc_head_ms = TSRV_HEAD_TIMEOUT_MS,
	.hc_idle_ms = TSRV_HEAD_TIMEOUT_MS,
	.hc_linger_ms = TSRV_LINGER_MS,
	.hc_max_requests = 1,
	.hc_flags = H1S_C_FIRST_DEADLINE,
};

/* Print the subcommand's usage to f. */
void
tsrv_usage(FILE *f)
{
	fprintf(f,
	    "usage: akgateway tunnel-server [--ws ADDR] [--listen ADDR] "
	    "[--token T]\n"
	    "                               [--client-wait D] "
	    "[--http-timeout D] [-v]\n"
	    "\n"
	    "Run the reverse tunnel's sandbox role: accept the tunnel "
	    "client's\n"
	    "WebSocket on --ws (any path) and serve requests from code in the\n"
	    "sandbox on --listen, carried over the tunnel.\n"
	    "\n"
	    "  --ws ADDR          tunnel WebSocket (default 0.0.0.0:8765)\n"
	    "  --listen ADDR      requests (default 127.0.0.1:8766)\n"
	    "  --token T          require X-Auth: T or Authorization: Bearer "
	    "T\n"
	    "  --client-wait D    hold a request this long for a client "
	    "(default 10s)\n"
	    "  --http-timeout D   wait this long for a response (default\n"
	    "                     YR_TUNNEL_HTTP_TIMEOUT or 600s)\n"
	    "  -v, --verbose      log at debug level\n"
	    "  -h, --help         print this help and exit\n");
}

/* Refuse the handshake with status, code and a sentence, then close. */
static void
tsrv_refuse(struct tsrv_conn *sc, int status, const char *code, const char *msg)
{
	struct errpage ep;

	log_info("tunnel-server: %s: refused %d %s: %s", sc->sc_peer, status,
	    code, msg);
	memset(&ep, 0, sizeof ep);
	ep.ep_status = status;
	ep.ep_code = code;
	ep.ep_message = msg;
	errpage_send(h1s_sink(sc->sc_h1s), &ep);
}

/*
 * Does the request carry the token in X-Auth or Authorization: Bearer?
 * Returns 1, 0 when none is given, -1 when a wrong one is.
 */
static int
tsrv_token_ok(const struct tsrv *srv, const struct http1_msg *m)
{
	const struct hfield *h;
	const char *tok = NULL;
	size_t len = 0, want = strlen(srv->ts_token);
	int diff;

	if ((h = http1_msg_find(m, "x-auth")) != NULL) {
		tok = h->value;
		len = h->value_len;
	} else if ((h = http1_msg_find(m, "authorization")) != NULL &&
	    h->value_len > 7 && strncasecmp(h->value, "bearer ", 7) == 0) {
		tok = h->value + 7;
		len = h->value_len - 7;
	}
	if (tok == NULL)
		return (0);
	/* Constant time for a given length; a wrong length says nothing. */
	diff = CRYPTO_memcmp(
	    srv->ts_token, len == want ? tok : srv->ts_token, want);
	return (len == want && diff == 0 ? 1 : -1);
}

/*
 * The upgrade request, on any path (§2.2): check the token and the
 * handshake, answer 101 through the sink and hand the connection to the
 * tunnel.
 */
static void
tsrv_head_cb(
    struct h1s *h, void *arg, const struct head *req, const struct http1_msg *m)
{
	struct tsrv_conn *sc = arg;
	struct tsrv *srv = sc->sc_srv;
	const struct hfield *f;
	struct hfield rf[2];
	struct head rh;
	struct stream *s;
	const char *key;
	char *why, accept[WS_ACCEPT_LEN + 1], peer[64];
	char session[TUNPROTO_UUID_LEN + 1];
	int r;

	(void)req;
	if (srv->ts_token != NULL && (r = tsrv_token_ok(srv, m)) != 1) {
		if (r == 0)
			tsrv_refuse(sc, 401, "unauthorized",
			    "The tunnel needs a token in X-Auth or "
			    "Authorization: Bearer.");
		else
			tsrv_refuse(sc, 403, "forbidden",
			    "The token does not open this tunnel.");
		return;
	}
	if (ws_check_upgrade_request(m, &key, &why) != 0) {
		f = http1_msg_find(m, "sec-websocket-version");
		if (f != NULL && strcmp(f->value, "13") != 0)
			tsrv_refuse(sc, 426, "websocket_version", why);
		else
			tsrv_refuse(sc, 400, "bad_websocket_upgrade", why);
		free(why);
		return;
	}
	if (ws_accept_key(key, accept) != 0) {
		tsrv_refuse(sc, 500, "internal_error",
		    "Cannot compute Sec-WebSocket-Accept.");
		return;
	}
	memset(&rh, 0, sizeof rh);
	hfield_set(&rf[0], "Upgrade", "websocket");
	hfield_set(&rf[1], "Sec-WebSocket-Accept", accept);
	rh.h_status = 101;
	rh.h_version = 11;
	rh.h_fields = rf;
	rh.h_nfields = 2;
	rh.h_flags = HEAD_F_UPGRADE;
	f = http1_msg_find(m, TUNPROTO_SESSION_HEADER);
	snprintf(session, sizeof session, "%s", f != NULL ? f->value : "");
	snprintf(peer, sizeof peer, "%s", sc->sc_peer);
	if (sink_head(h1s_sink(h), &rh) != 0 ||
	    (s = h1s_release(h)) == NULL)
		return;
	tunnel_link_accept(srv->ts_tunnel, s, peer,
	    *session != '\0' ? session : NULL);
}

/* The engine refused the handshake itself (a bad head, 408). */
static void
tsrv_log_cb(struct h1s *h, void *arg, const struct h1s_refusal *r)
{
	struct tsrv_conn *sc = arg;

	(void)h;
	log_info("tunnel-server: %s: refused %d %s: %s", sc->sc_peer,
	    r->hr_status, r->hr_code, r->hr_message);
}

/* The connection is closing, or was handed to the tunnel. */
static void
tsrv_close_cb(struct h1s *h, void *arg, const char *reason)
{
	struct tsrv_conn *sc = arg;

	(void)h;
	(void)reason;
	sc->sc_srv->ts_npending--;
}

static const struct h1s_hooks tsrv_hooks = {
	.on_head = tsrv_head_cb,
	.on_log = tsrv_log_cb,
	.on_close = tsrv_close_cb,
	.on_free = free,
};

/* A new connection on Port A. */
static void
tsrv_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct tsrv *srv = arg;
	struct tsrv_conn *sc;
	struct h1x *x;
	int one = 1;

	(void)lev;
	(void)salen;
	if (srv->ts_npending >= TSRV_MAX_PENDING) {
		log_warn("tunnel-server: %d handshakes in progress; closing a "
			 "new connection",
		    TSRV_MAX_PENDING);
		evutil_closesocket(fd);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	sc = xcalloc(1, sizeof *sc);
	sc->sc_srv = srv;
	addr_format(sa, sc->sc_peer, sizeof sc->sc_peer);
	x = h1x_stream_new(
	    stream_new(srv->ts_gw.g_base, fd, NULL, STREAM_O_CLOSE),
	    TSRV_HEAD_MAX + 1024, 0);
	srv->ts_npending++;
	sc->sc_h1s = h1s_new(srv->ts_gw.g_base, x, &tsrv_h1conf, &tsrv_hooks,
	    sc, ++srv->ts_ids, sc->sc_peer);
}

/* accept(2) failed: pause for a second when out of descriptors. */
static void
tsrv_accept_error_cb(struct evconnlistener *lev, void *arg)
{
	struct tsrv *srv = arg;

	listener_backoff(lev, srv->ts_pause, "tunnel-server");
}

/* SIGINT or SIGTERM: stop. */
static void
tsrv_signal_cb(evutil_socket_t sig, short events, void *arg)
{
	struct tsrv *srv = arg;

	(void)events;
	log_info("tunnel-server: received %s, stopping",
	    sig == SIGINT ? "SIGINT" : "SIGTERM");
	evconnlistener_disable(srv->ts_lev);
	tunnel_shutdown(&srv->ts_gw);
	event_del(srv->ts_sigint);
	event_del(srv->ts_sigterm);
	event_base_loopexit(srv->ts_gw.g_base, NULL);
}

/* Parse a duration option, or print why not and return -1. */
static int
tsrv_duration(const char *opt, const char *s, uint64_t *ms)
{
	if (cfg_parse_duration(s, ms) == 0)
		return (0);
	fprintf(stderr,
	    "akgateway tunnel-server: %s must be a duration such as 10s "
	    "or 500ms, not '%s'\n",
	    opt, s);
	return (-1);
}

/* Entry point of "akgateway tunnel-server". */
int
tunnelsrv_main(int argc, char **argv)
{
	static const struct option longopts[] = { { "ws", required_argument,
						      NULL, 'w' },
		{ "listen", required_argument, NULL, 'l' },
		{ "token", required_argument, NULL, 't' },
		{ "client-wait", required_argument, NULL, 'c' },
		{ "http-timeout", required_argument, NULL, 'T' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
	struct tsrv srv;
	struct sockaddr_storage ss;
	socklen_t sslen;
	const char *ws = "0.0.0.0:8765", *listen = "127.0.0.1:8766";
	char *cause = NULL;
	uint64_t client_wait = 10 * 1000, http_timeout = 0;
	enum log_level level = LOG_LVL_INFO;
	int ch, rv = 1;

	memset(&srv, 0, sizeof srv);
	optind = 1;
	while ((ch = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'w':
			ws = optarg;
			break;
		case 'l':
			listen = optarg;
			break;
		case 't':
			srv.ts_token = optarg;
			break;
		case 'c':
			if (tsrv_duration(
				"--client-wait", optarg, &client_wait) != 0)
				return (2);
			break;
		case 'T':
			if (tsrv_duration(
				"--http-timeout", optarg, &http_timeout) != 0)
				return (2);
			break;
		case 'v':
			level = LOG_LVL_DEBUG;
			break;
		case 'h':
			tsrv_usage(stdout);
			return (0);
		default:
			tsrv_usage(stderr);
			return (2);
		}
	}
	if (optind != argc) {
		fprintf(stderr,
		    "akgateway tunnel-server: unexpected argument '%s'\n",
		    argv[optind]);
		tsrv_usage(stderr);
		return (2);
	}
	if (srv.ts_token != NULL && *srv.ts_token == '\0')
		srv.ts_token = NULL;
	if (addr_parse_hostport(ws, &ss, &sslen, &cause) != 0) {
		fprintf(stderr, "akgateway tunnel-server: --ws: %s\n", cause);
		free(cause);
		return (2);
	}
	if (log_open(level, LOG_FMT_TEXT, NULL, &cause) != 0) {
		fprintf(stderr, "akgateway tunnel-server: %s\n", cause);
		free(cause);
		return (1);
	}
	evio_malloc_tune();
	if ((srv.ts_gw.g_base = evio_base_new()) == NULL) {
		fprintf(stderr,
		    "akgateway tunnel-server: cannot create the "
		    "event loop\n");
		return (1);
	}
	TAILQ_INIT(&srv.ts_gw.g_conns);
	upstream_pool_init(&srv.ts_gw);
	xchg_reap_start(&srv.ts_gw);
	signal(SIGPIPE, SIG_IGN);
	srv.ts_tunnel = tunnel_standalone(
	    &srv.ts_gw, listen, client_wait, http_timeout, &cause);
	if (srv.ts_tunnel == NULL) {
		log_error("tunnel-server: --listen %s: %s", listen, cause);
		free(cause);
		goto out;
	}
	srv.ts_lev = evconnlistener_new_bind(srv.ts_gw.g_base, tsrv_accept_cb,
	    &srv,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    128, (struct sockaddr *)&ss, (int)sslen);
	if (srv.ts_lev == NULL) {
		log_error("tunnel-server: cannot listen on %s: %s", ws,
		    strerror(errno));
		goto out;
	}
	evconnlistener_set_error_cb(srv.ts_lev, tsrv_accept_error_cb);
	srv.ts_pause = listener_pause_new(srv.ts_gw.g_base, srv.ts_lev);
	srv.ts_sigint = evsignal_new(
	    srv.ts_gw.g_base, SIGINT, tsrv_signal_cb, &srv);
	srv.ts_sigterm = evsignal_new(
	    srv.ts_gw.g_base, SIGTERM, tsrv_signal_cb, &srv);
	evsignal_add(srv.ts_sigint, NULL);
	evsignal_add(srv.ts_sigterm, NULL);
	log_info("tunnel-server: tunnel WebSocket on %s, requests on %s%s", ws,
	    listen, srv.ts_token != NULL ? ", token required" : "");
	event_base_dispatch(srv.ts_gw.g_base);
	event_base_loop(srv.ts_gw.g_base, EVLOOP_NONBLOCK);
	rv = 0;
out:
	tunnel_shutdown(&srv.ts_gw);
	if (srv.ts_lev != NULL)
		evconnlistener_free(srv.ts_lev);
	if (srv.ts_pause != NULL)
		event_free(srv.ts_pause);
	if (srv.ts_sigint != NULL)
		event_free(srv.ts_sigint);
	if (srv.ts_sigterm != NULL)
		event_free(srv.ts_sigterm);
	xchg_reap_stop(&srv.ts_gw);
	event_base_free(srv.ts_gw.g_base);
	log_close();
	return (rv);
}
