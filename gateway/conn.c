/*
 * Client connections on the public listeners.  One struct conn per
 * connection with an explicit state; callbacks are swapped per phase; one
 * close path logs the reason and frees from the loop, never from inside a
 * callback of the object being freed.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <openssl/ssl.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "stream.h"
#include "tls.h"
#include "token.h"

/* How long a closing connection drains input after its answer. */
#define CONN_LINGER_MS 2000
/* Output low watermark: the relay resumes below this. */
#define CONN_LOW (64 * 1024)

static void conn_read_cb(struct stream *, void *);
static void conn_timer_cb(evutil_socket_t, short, void *);
static void conn_write_cb(struct stream *, void *);
static void conn_event_cb(struct stream *, short, void *);
static const struct h1s_hooks conn_hooks;
static const struct xchg_ops conn_xops;

/* Name of a state, for debug logs. */
const char *
conn_state_name(enum conn_state s)
{
	switch (s) {
	case CONN_S_HEAD:
		return ("head");
	case CONN_S_SNIFF:
		return ("sniff");
	case CONN_S_UPGRADED:
		return ("upgraded");
	case CONN_S_ERROR:
		return ("closing");
	case CONN_S_DEAD:
		return ("dead");
	}
	return ("?");
}

/* Arm the connection timer (the relay's idle, the linger) for ms. */
void
conn_timer_set(struct conn *c, uint64_t ms)
{
	struct timeval tv;

	/* Made on first use: a connection the engine keeps needs none. */
	if (c->c_timer == NULL)
		c->c_timer = evtimer_new(c->c_gw->g_base, conn_timer_cb, c);
	clock_msec_to_tv(ms, &tv);
	evtimer_add(c->c_timer, &tv);
}

/* The exchange of c, made when its first use needs it. */
static struct gw_xchg *
conn_xchg(struct conn *c)
{
	if (c->c_x == NULL)
		c->c_x = xchg_new(c, &conn_xops, NULL,
		    c->c_h1 != NULL ? h1s_sink(c->c_h1) : NULL,
		    c->c_h1 != NULL ? h1s_started_us(c->c_h1) : 0);
	return (c->c_x);
}

/* Free the exchange of c, if any: what belongs to the current request. */
static void
conn_reset_exchange(struct conn *c)
{
	struct gw_xchg *x = c->c_x;

	c->c_x = NULL;
	xchg_free(x);
}

/*
 * The client's address without its port (what c_peer holds before the
 * last ':', without the brackets of an IPv6 one), in buf; returns buf.
 */
const char *
conn_peer_ip(const struct conn *c, char *buf, size_t len)
{
	const char *p = c->c_peer, *end;
	size_t n;

	if (*p == '[') {
		p++;
		end = strchr(p, ']');
	} else
		end = strrchr(p, ':');
	n = end != NULL ? (size_t)(end - p) : strlen(p);
	if (n >= len)
		n = len - 1;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return (buf);
}

/* Print c's state, flags and exchange into buf, for debug logs. */
void
conn_print(const struct conn *c, char *buf, size_t len)
{
	char eng[160], xs[160];

	if (c->c_h1 != NULL)
		h1s_print(c->c_h1, eng, sizeof eng);
	else if (c->c_h2 != NULL)
		h2s_print(c->c_h2, eng, sizeof eng);
	else if (c->c_state == CONN_S_SNIFF)
		snprintf(eng, sizeof eng, "sniffing");
	else
		snprintf(eng, sizeof eng, "released");
	xchg_print(c->c_x, xs, sizeof xs);
	snprintf(buf, len, "conn %llu %s state=%s flags=%#x relay=%#x [%s] "
	    "xchg=%s",
	    (unsigned long long)c->c_id, c->c_peer, conn_state_name(c->c_state),
	    (unsigned)c->c_flags, (unsigned)c->c_relay, eng, xs);
}

/*
 * Drop a reference to c: the engine holds one until it is freed, the
 * open connection one until it is closed (tmux's client style), so that
 * neither frees c under the other after a release.
 */
void
conn_unref(struct conn *c)
{
	if (--c->c_refcnt > 0)
		return;
	conn_reset_exchange(c);
	if (c->c_timer != NULL)
		event_free(c->c_timer);
	free(c);
}

/* A relayed connection closed: from the loop, its socket goes. */
static void
conn_free_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)events;
	stream_free(c->c_stream);
	c->c_stream = NULL;
	conn_unref(c);
}

/*
 * The connection closes, for reason: its access line if a request was cut
 * short, its upstream, its counters.  Run once, from conn_close or from
 * the engine's close (conn_on_close).
 */
void
conn_closed(struct conn *c, const char *reason)
{
	struct gw *g = c->c_gw;
	struct gw_xchg *x = c->c_x;
	char buf[384];

	if (c->c_flags & CONN_F_CLOSED)
		return;
	c->c_flags |= CONN_F_CLOSED;
	if (log_enabled(LOG_LVL_DEBUG)) {
		conn_print(c, buf, sizeof buf);
		log_debug("%s: closed: %s", buf, reason);
	}
	if ((c->c_flags & (CONN_F_UPGRADED | CONN_F_HANDED)) == CONN_F_UPGRADED)
		GW_ADD(g->g_metrics.m_ws_active, -1);
	/*
	 * A request cut short (a client gone mid-body, an upstream gone
	 * mid-response) or a WebSocket ending gets its line here.
	 */
	if (x != NULL && x->x_method != NULL && !(x->x_flags & XCHG_F_LOGGED) &&
	    !(c->c_flags & CONN_F_HANDED))
		xchg_log_access(x, reason);
	c->c_flags &= ~CONN_F_UPGRADED;
	relay_end(c);
	if (x != NULL && x->x_up != NULL)
		upstream_close(x->x_up, "client connection closed");
	c->c_state = CONN_S_DEAD;
	if (c->c_timer != NULL)
		evtimer_del(c->c_timer);
	TAILQ_REMOVE(&g->g_conns, c, c_entry);
	g->g_nconns--;
	if (g->g_shared != NULL && !(c->c_flags & CONN_F_ADOPTED))
		__atomic_sub_fetch(&g->g_shared->s_nconns, 1, __ATOMIC_RELAXED);
}

/*
 * Close a connection, logging why: through the engine while it has the
 * socket (it calls conn_on_close, then conn_on_free from the loop), else
 * here; it is freed from the loop.
 */
void
conn_close(struct conn *c, const char *reason)
{
	struct timeval tv = { 0, 0 };

	if (c->c_state == CONN_S_DEAD)
		return;
	if (c->c_h1 != NULL) {
		h1s_close(c->c_h1, reason);
		return;
	}
	if (c->c_h2 != NULL) {
		h2s_close(c->c_h2, reason);
		return;
	}
	conn_closed(c, reason);
	if (c->c_stream != NULL)
		stream_disable(c->c_stream, EV_READ | EV_WRITE);
	event_base_once(c->c_gw->g_base, -1, EV_TIMEOUT, conn_free_cb, c, &tv);
}

/*
 * Finish with a relayed connection (after a 101): once the output has
 * drained, shut down our side and drain the client's input for a moment,
 * so the last bytes are not destroyed by a reset.  While the engine has
 * the socket, it finishes the connection itself: closing it ends it.
 */
void
conn_finish(struct conn *c)
{
	if (c->c_x != NULL && c->c_x->x_up != NULL)
		upstream_close(c->c_x->x_up, "client connection finishing");
	if (c->c_h1 != NULL) {
		sink_abort(h1s_sink(c->c_h1), "finishing");
		return;
	}
	c->c_state = CONN_S_ERROR;
	stream_setwatermark(c->c_stream, EV_WRITE, 0, 0);
	stream_enable(c->c_stream, EV_WRITE);
	stream_disable(c->c_stream, EV_READ);
	if (evbuffer_get_length(stream_output(c->c_stream)) == 0)
		conn_write_cb(c->c_stream, c);
}

/*
 * Take the client's socket from the engine, once the answer is queued in
 * its output: for the relay after a 101 (conn_upgrade), the main loop's
 * channel, the tunnel.  The connection is ours from now on.
 */
static struct stream *
conn_release(struct conn *c)
{
	struct stream *s;

	c->c_flags |= CONN_F_RELEASING;
	s = h1s_release(c->c_h1);
	c->c_flags &= ~CONN_F_RELEASING;
	c->c_h1 = NULL;
	/* The head was the engine's. */
	if (c->c_x != NULL) {
		c->c_x->x_req = NULL;
		memset(&c->c_x->x_head, 0, sizeof c->c_x->x_head);
	}
	return (s);
}

/*
 * Hand the client's stream to another owner (the tunnel) and close the
 * connection object around it: bytes the client sent after its request
 * are still in its input.  The caller has written what the client needed
 * (the 101) into its output.
 */
struct stream *
conn_steal_stream(struct conn *c)
{
	struct stream *s;

	c->c_x->x_status = 101;
	xchg_log_access(c->c_x, "tunnel");
	s = conn_release(c);
	c->c_stream = NULL;
	conn_close(c, "handed to the tunnel");
	return (s);
}

/*
 * Relay the client's socket from now on (a 101 was queued): the engine
 * lets go of it, and it gets our callbacks.
 */
void
conn_upgrade(struct conn *c)
{
	c->c_stream = conn_release(c);
	stream_setcb(
	    c->c_stream, conn_read_cb, conn_write_cb, conn_event_cb, c);
	stream_enable(c->c_stream, EV_READ | EV_WRITE);
}

/*
 * A worker found a terminate-mode tunnel request; tunnels live on the main
 * loop.  Pass the request on to a new connection of the main loop, joined
 * to this one by a socketpair, which reads it as any other and answers
 * 101 and runs the tunnel; this loop relays the bytes and keeps the
 * client (and its TLS).
 */
void
conn_handoff(struct conn *c, int listen_port)
{
	struct conn *nc;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		sv) == -1) {
		h1s_no_keep(c->c_h1);
		xchg_fail(c->c_x, gw_err_no_resources,
		    "The gateway cannot open a channel to its main loop "
		    "(%s); try again shortly.",
		    strerror(errno));
		return;
	}
	nc = xcalloc(1, sizeof *nc);
	nc->c_id = c->c_id;
	nc->c_flags = c->c_flags & CONN_F_TLS;
	memcpy(nc->c_peer, c->c_peer, sizeof nc->c_peer);
	nc->c_local_port = c->c_local_port;
	c->c_flags |= CONN_F_HANDED;
	c->c_x->x_up = upstream_pipe(
	    c->c_gw, c->c_x->x_sandbox, sv[0], &proxy_owner, c->c_x);
	/* The request as it came; what the client sent after it follows. */
	h1_request_put(stream_output(c->c_x->x_up->u_stream), &c->c_x->x_head);
	c->c_x->x_flags |= XCHG_F_RESP_STARTED;
	conn_upgrade(c);
	gw_handoff(c->c_gw, nc, sv[1], listen_port);
	relay_start(c);
}

/* The engine parsed a request head: its exchange starts, routed. */
static void
conn_on_head(struct h1s *h, void *arg, const struct head *head,
    const struct http1_msg *m)
{
	struct conn *c = arg;

	(void)h;
	conn_reset_exchange(c); /* none should be left; to be sure */
	xchg_start(conn_xchg(c), head, m, m->m_body, m->m_content_length);
}

/* Request body bytes wait in the engine's input. */
static void
conn_on_body(struct h1s *h, void *arg)
{
	struct conn *c = arg;
	struct gw_xchg *x = c->c_x;

	(void)h;
	if (x != NULL && x->x_state == XCHG_S_BODY) {
		proxy_request_body(x);
		if (x->x_state == XCHG_S_BODY)
			proxy_request_splice_try(x);
	}
}

/* The client's output drained to its low watermark: read on upstream. */
static void
conn_on_drain(struct h1s *h, void *arg)
{
	struct conn *c = arg;

	(void)h;
	if (c->c_x != NULL)
		proxy_client_drained(c->c_x);
}

/*
 * The exchange ended without its answer's end: the client went away or
 * timed out; its line says why (conn_closed, as the engine closes).
 */
static void
conn_on_error(struct h1s *h, void *arg, const char *why)
{
	struct conn *c = arg;

	(void)h;
	if (c->c_x != NULL && c->c_x->x_up != NULL)
		upstream_close(c->c_x->x_up, why);
}

/* The engine refused a request itself (a bad head, 408): its line. */
static void
conn_on_log(struct h1s *h, void *arg, const struct h1s_refusal *r)
{
	struct conn *c = arg;
	struct gw_xchg *x;
	char ip[INET6_ADDRSTRLEN];

	(void)h;
	x = conn_xchg(c);
	if (x->x_flags & XCHG_F_LOGGED)
		return;
	x->x_status = r->hr_status;
	x->x_err_code = r->hr_code;
	log_debug("conn %llu %s: refused %d %s: %s",
	    (unsigned long long)c->c_id, conn_peer_ip(c, ip, sizeof ip),
	    r->hr_status, r->hr_code, r->hr_message);
	xchg_log_access(x, "close");
}

/* The engine closes the connection (unless it lets go of the socket). */
static void
conn_on_close(struct h1s *h, void *arg, const char *reason)
{
	struct conn *c = arg;

	(void)h;
	if (c->c_flags & CONN_F_RELEASING)
		return;
	c->c_stream = NULL; /* the engine's transport frees it */
	conn_closed(c, reason);
	conn_unref(c); /* the open connection's */
}

/* The engine is freed: so is the connection, unless the relay has it. */
static void
conn_on_free(void *arg)
{
	struct conn *c = arg;

	c->c_h1 = NULL;
	conn_unref(c); /* the engine's */
}

/*
 * The exchange's side of the HTTP/1 engine: one exchange at a time, in
 * c_x, carried by the connection's engine.
 */
static ssize_t
conn_x_body_read(struct gw_xchg *x, struct evbuffer *dst, size_t max,
    enum http1_err *err)
{
	return (h1s_body_read(x->x_conn->c_h1, dst, max, err));
}

static int
conn_x_body_done(const struct gw_xchg *x)
{
	return (x->x_conn->c_h1 != NULL && h1s_body_done(x->x_conn->c_h1));
}

static uint64_t
conn_x_body_left(const struct gw_xchg *x)
{
	const struct conn *c = x->x_conn;

	if (c->c_h1 == NULL || (c->c_flags & CONN_F_TLS))
		return (0);
	return (h1s_body_left(c->c_h1));
}

static void
conn_x_body_skip(struct gw_xchg *x, uint64_t n)
{
	if (x->x_conn->c_h1 != NULL)
		h1s_body_skip(x->x_conn->c_h1, n);
}

static int
conn_x_splice_fd(struct gw_xchg *x)
{
	const struct conn *c = x->x_conn;

	if (c->c_h1 == NULL || (c->c_flags & CONN_F_TLS))
		return (-1);
	return (h1s_splice_fd(c->c_h1));
}

static void
conn_x_body_sent(struct gw_xchg *x, uint64_t n)
{
	if (x->x_conn->c_h1 != NULL)
		h1s_body_sent(x->x_conn->c_h1, n);
}

static int
conn_x_keeps(const struct gw_xchg *x)
{
	return (x->x_conn->c_h1 != NULL && h1s_keeps(x->x_conn->c_h1));
}

static void
conn_x_no_keep(struct gw_xchg *x)
{
	if (x->x_conn->c_h1 != NULL)
		h1s_no_keep(x->x_conn->c_h1);
}

/* The client must keep sending (its body) and reading (the answer). */
static void
conn_x_timeouts(struct gw_xchg *x, int reading, int writing)
{
	struct conn *c = x->x_conn;
	struct timeval tv;

	if (c->c_stream == NULL || c->c_h1 == NULL)
		return;
	clock_msec_to_tv(c->c_gw->g_conf->cf_idle_timeout, &tv);
	stream_set_timeouts(
	    c->c_stream, reading ? &tv : NULL, writing ? &tv : NULL);
}

static void
conn_x_abort(struct gw_xchg *x, const char *why)
{
	conn_close(x->x_conn, why);
}

/* The exchange is done: the engine has the connection again. */
static void
conn_x_done(struct gw_xchg *x)
{
	struct conn *c = x->x_conn;

	if (c->c_x == x)
		c->c_x = NULL;
	if (c->c_state != CONN_S_DEAD)
		c->c_state = CONN_S_HEAD;
}

static const struct xchg_ops conn_xops = {
	.xo_proto = "h1",
	.xo_body_read = conn_x_body_read,
	.xo_body_done = conn_x_body_done,
	.xo_body_left = conn_x_body_left,
	.xo_body_skip = conn_x_body_skip,
	.xo_splice_fd = conn_x_splice_fd,
	.xo_body_sent = conn_x_body_sent,
	.xo_keeps = conn_x_keeps,
	.xo_no_keep = conn_x_no_keep,
	.xo_timeouts = conn_x_timeouts,
	.xo_abort = conn_x_abort,
	.xo_done = conn_x_done,
};

static const struct h1s_hooks conn_hooks = {
	.on_head = conn_on_head,
	.on_body = conn_on_body,
	.on_drain = conn_on_drain,
	.on_error = conn_on_error,
	.on_log = conn_on_log,
	.on_close = conn_on_close,
	.on_free = conn_on_free,
};

/* Bytes from the client of a relayed connection. */
static void
conn_read_cb(struct stream *s, void *arg)
{
	struct conn *c = arg;

	switch (c->c_state) {
	case CONN_S_UPGRADED:
		relay_client_read(c);
		break;
	case CONN_S_ERROR:
		/* Lingering: discard what the client still sends. */
		evbuffer_drain(
		    stream_input(s), evbuffer_get_length(stream_input(s)));
		return;
	default:
		return;
	}
	if (c->c_state == CONN_S_UPGRADED)
		relay_splice_try(c);
}

/* The relayed client's output drained below the low watermark. */
static void
conn_write_cb(struct stream *s, void *arg)
{
	struct conn *c = arg;

	if (c->c_state == CONN_S_DEAD)
		return;
	if (c->c_state == CONN_S_UPGRADED) {
		relay_client_drained(c);
		return;
	}
	if (c->c_state != CONN_S_ERROR ||
	    evbuffer_get_length(stream_output(s)) != 0 ||
	    (c->c_flags & CONN_F_LINGER))
		return;
	c->c_flags |= CONN_F_LINGER;
	if ((c->c_flags & (CONN_F_CLIENT_EOF | CONN_F_TLS)) ||
	    shutdown(stream_getfd(s), SHUT_WR) != 0) {
		/* A raw shutdown would cut a TLS stream; just close. */
		conn_close(c, "done");
		return;
	}
	stream_enable(s, EV_READ);
	conn_timer_set(c, CONN_LINGER_MS);
}

/* EOF or error from the client of a relayed connection. */
static void
conn_event_cb(struct stream *s, short what, void *arg)
{
	struct conn *c = arg;
	char why[160], tlserr[128];

	if (c->c_state == CONN_S_DEAD)
		return;
	if (what & STREAM_EV_ERROR) {
		if (stream_tls_error(s) != 0) {
			tls_error_string(
			    stream_tls_error(s), tlserr, sizeof tlserr);
			snprintf(why, sizeof why, "client error: %s", tlserr);
		} else
			snprintf(why, sizeof why, "client error: %s",
			    strerror(stream_errno(s)));
		conn_close(c, why);
		return;
	}
	if (what & STREAM_EV_TIMEOUT) {
		conn_close(c,
		    (what & STREAM_EV_READING)
			? "client sent nothing for the idle timeout"
			: "client read nothing for the idle timeout");
		return;
	}
	if (!(what & STREAM_EV_EOF))
		return;
	c->c_flags |= CONN_F_CLIENT_EOF;
	if (c->c_state == CONN_S_UPGRADED)
		relay_client_eof(c);
	else
		conn_close(c, "done");
}

/* The relay's idle timer or the linger fired. */
static void
conn_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	struct conn *c = arg;

	(void)fd;
	(void)events;
	switch (c->c_state) {
	case CONN_S_UPGRADED:
		relay_idle(c);
		break;
	case CONN_S_ERROR:
		conn_close(c,
		    (c->c_flags & CONN_F_LINGER) ? "linger timeout"
						 : "timeout writing an error");
		break;
	case CONN_S_SNIFF:
		conn_close(c, "client sent nothing for the keep-alive timeout");
		break;
	default:
		break;
	}
}

/* Fill hc, how the engine serves port URLs, from the configuration. */
static void
conn_h1conf_fill(struct gw *g, struct h1s_conf *hc)
{
	const struct gw_config *cf = g->g_conf;

	hc->hc_name = "conn";
	hc->hc_limits = &g->g_limits;
	hc->hc_head_ms = cf->cf_header_timeout;
	hc->hc_idle_ms = cf->cf_keepalive_timeout;
	hc->hc_write_ms = cf->cf_idle_timeout;
	hc->hc_linger_ms = CONN_LINGER_MS;
	/*
	 * The upstream answers Expect: 100-continue; its 100 is relayed.  A
	 * client that closes before its answer has gone (as nginx reads it,
	 * not as a half-close): its upstream request is cancelled rather
	 * than left to run for nobody.
	 */
	hc->hc_flags = H1S_C_RELAY_CONTINUE | H1S_C_EOF_ABORTS;
}

/* How the engine serves port URLs: the configuration's limits and timers. */
static const struct h1s_conf *
conn_h1conf(struct gw *g)
{
	if (g->g_h1conf == NULL) {
		g->g_h1conf = xcalloc(1, sizeof *g->g_h1conf);
		conn_h1conf_fill(g, g->g_h1conf);
	}
	return (g->g_h1conf);
}

/*
 * Loop g's limits and engine settings follow g->g_conf: at start, and when
 * a reload hands it a new one.  Engines read them in place, so connections
 * already open take the new timers from their next wait on.
 */
void
gw_conf_apply(struct gw *g)
{
	const struct gw_config *cf = g->g_conf;

	g->g_limits.max_head = cf->cf_max_header_size;
	g->g_limits.max_line = cf->cf_max_header_size < 8192
	    ? cf->cf_max_header_size
	    : 8192;
	g->g_limits.max_headers = cf->cf_max_headers;
	if (g->g_h1conf != NULL)
		conn_h1conf_fill(g, g->g_h1conf);
	conn_h2_conf_apply(g);
}

/* The limit every connection's input stops at: a head, or waiting body. */
static size_t
conn_in_high(const struct gw *g)
{
	size_t high = g->g_conf->cf_max_header_size + 4096;

	return (high < 64 * 1024 ? 64 * 1024 : high);
}

/* Refuse the connection past limits.max_connections, on HTTP/1. */
static void
conn_refuse_full(struct conn *c)
{
	xchg_fail(conn_xchg(c), gw_err_too_many_connections,
	    "The gateway is at its limit of %llu connections; try again "
	    "shortly.",
	    (unsigned long long)c->c_gw->g_conf->cf_max_connections);
}

/*
 * Start c's engine over its stream: HTTP/2 when h2, else HTTP/1.  The
 * input stops at its high watermark: a head, or a body the upstream
 * cannot take yet.
 */
static void
conn_engine_start(struct conn *c, int h2)
{
	struct gw *g = c->c_gw;
	struct h1x *x;

	c->c_refcnt++; /* the engine's */
	c->c_state = CONN_S_HEAD;
	x = h1x_stream_new(c->c_stream, conn_in_high(g), CONN_LOW);
	if (h2) {
		conn_h2_start(c, x);
		return;
	}
	c->c_h1 = h1s_new(
	    g->g_base, x, conn_h1conf(g), &conn_hooks, c, c->c_id, c->c_peer);
	if (c->c_flags & CONN_F_FULL)
		conn_refuse_full(c);
}

/*
 * The first bytes of a connection whose listener takes HTTP/2 (or the
 * end of its TLS handshake): ALPN h2, or on a plain socket the HTTP/2
 * connection preface, starts HTTP/2; anything else HTTP/1.  The bytes
 * stay in the input for the engine.
 */
static void
conn_sniff_cb(struct stream *s, void *arg)
{
	struct conn *c = arg;
	struct evbuffer *in = stream_input(s);
	const unsigned char *alpn = NULL;
	unsigned char buf[H2_PREFACE_LEN];
	unsigned alen = 0;
	size_t n;
	int h2;

	if (stream_ssl(s) != NULL) {
		SSL_get0_alpn_selected(stream_ssl(s), &alpn, &alen);
		h2 = alen == 2 && memcmp(alpn, "h2", 2) == 0;
	} else {
		n = evbuffer_get_length(in);
		if (n > sizeof buf)
			n = sizeof buf;
		evbuffer_copyout(in, buf, n);
		h2 = memcmp(buf, H2_PREFACE, n) == 0;
		if (h2 && n < sizeof buf)
			return; /* a prefix of the preface: more to come */
	}
	if (c->c_timer != NULL)
		evtimer_del(c->c_timer);
	conn_engine_start(c, h2);
	if (evbuffer_get_length(in) != 0)
		stream_trigger_read(s); /* what came is the engine's to read */
}

/*
 * The TLS handshake is done (ALPN chose), or the client went away, or its
 * TLS failed, before a byte of HTTP.
 */
static void
conn_sniff_event_cb(struct stream *s, short what, void *arg)
{
	struct conn *c = arg;
	char why[160], tlserr[128];

	if (what & STREAM_EV_CONNECTED) {
		conn_sniff_cb(s, c);
		return;
	}
	if (stream_tls_error(s) != 0) {
		tls_error_string(stream_tls_error(s), tlserr, sizeof tlserr);
		log_info("conn %llu %s: TLS handshake failed: %s",
		    (unsigned long long)c->c_id, c->c_peer, tlserr);
		snprintf(why, sizeof why, "TLS error: %s", tlserr);
	} else if (what & STREAM_EV_ERROR)
		snprintf(why, sizeof why, "client error: %s",
		    strerror(stream_errno(s)));
	else
		snprintf(why, sizeof why, "client closed before a request");
	conn_close(c, why);
}

/*
 * Give connection c its stream and list it on loop g.  A listener that
 * takes HTTP/2 waits for the first bytes to choose the engine
 * (conn_sniff_cb); any other starts HTTP/1 at once.
 */
static void
conn_setup(struct gw *g, struct conn *c, struct stream *s)
{
	c->c_gw = g;
	c->c_stream = s;
	c->c_refcnt = 1; /* the open connection's; the engine adds its own */
	TAILQ_INIT(&c->c_xchgs);
	TAILQ_INSERT_TAIL(&g->g_conns, c, c_entry);
	g->g_nconns++;
	if (!(c->c_flags & CONN_F_H2)) {
		conn_engine_start(c, 0);
		return;
	}
	c->c_state = CONN_S_SNIFF;
	stream_setcb(s, conn_sniff_cb, NULL, conn_sniff_event_cb, c);
	stream_setwatermark(s, EV_READ, 0, conn_in_high(g));
	stream_enable(s, EV_READ);
	conn_timer_set(c, g->g_conf->cf_keepalive_timeout);
}

/* A new client connection from a listener. */
void
conn_accept(struct gw *g, int fd, struct sockaddr *sa, int salen,
    struct gw_listener *gl)
{
	struct stream *s;
	struct conn *c;
	uint64_t n;
	SSL *ssl = NULL;

	/* fd has TCP_NODELAY already, from its listener (listener.c). */
	(void)salen;
	if (gl->gl_ctx != NULL) {
		/* A client that closes without close_notify is just EOF. */
		ssl = tls_server_ssl_new(gl->gl_ctx);
		s = ssl != NULL ? stream_new(g->g_base, fd, ssl,
				      STREAM_O_CLOSE | STREAM_O_ACCEPT)
				: NULL;
		if (s == NULL) {
			log_warn("cannot start TLS on an accepted connection");
			if (ssl != NULL)
				tls_ssl_free(ssl);
			close(fd);
			return;
		}
	} else
		s = stream_new(g->g_base, fd, NULL, STREAM_O_CLOSE);
	c = xcalloc(1, sizeof *c);
	c->c_id = g->g_shared != NULL
	    ? __atomic_add_fetch(&g->g_shared->s_conn_ids, 1, __ATOMIC_RELAXED)
	    : ++g->g_conn_ids;
	c->c_local_port = gl->gl_port;
	addr_format(sa, c->c_peer, sizeof c->c_peer);
	if (ssl != NULL)
		c->c_flags |= CONN_F_TLS;
	if (gl->gl_conf->l_http2)
		c->c_flags |= CONN_F_H2;
	n = g->g_shared != NULL
	    ? __atomic_add_fetch(&g->g_shared->s_nconns, 1, __ATOMIC_RELAXED)
	    : g->g_nconns + 1;
	if (n > g->g_conf->cf_max_connections)
		c->c_flags |= CONN_F_FULL; /* refused by its engine */
	GW_ADD(g->g_metrics.m_conns_accepted, 1);
	log_debug("conn %llu %s: accepted on port %d",
	    (unsigned long long)c->c_id, c->c_peer, gl->gl_port);
	memtrim_count(g, n);
	conn_setup(g, c, s);
}

/*
 * The main loop adopts c, a tunnel request a worker passed on
 * (conn_handoff), on fd, the main loop's end of the socketpair the worker
 * relays through: the request arrives on it as from a client.  With g
 * NULL (stopping) c is only freed.
 */
void
conn_adopt(struct gw *g, struct conn *c, int fd, int listen_port)
{
	(void)listen_port;
	if (g == NULL || fd == -1) {
		if (fd != -1)
			close(fd);
		free(c);
		return;
	}
	c->c_flags |= CONN_F_ADOPTED;
	conn_setup(g, c, stream_new(g->g_base, fd, NULL, STREAM_O_CLOSE));
	log_debug("conn %llu %s: handed to the main loop",
	    (unsigned long long)c->c_id, c->c_peer);
}

/* Close every connection (shutdown). */
void
conn_close_all(struct gw *g)
{
	struct conn *c;

	while ((c = TAILQ_FIRST(&g->g_conns)) != NULL) {
		relay_abort(c);
		if (c->c_h2 != NULL)
			h2s_close_now(c->c_h2, "gateway stopping");
		else
			conn_close(c, "gateway stopping");
	}
}
