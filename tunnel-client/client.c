/*
 * The tunnel client role (tunnel-protocol.md §2, §4, §7, §8.1): one
 * WebSocket connection to the gateway at a time, dialled again until
 * aktunnel stops. A struct tun_conn lives from the lookup of the gateway
 * to its close; the session (the struct tun, its exchanges, cache and
 * tombstones) outlives every connection.
 *
 * Dialling: DNS (lib/dns.c), TCP, TLS for wss (verified unless told
 * otherwise), the upgrade request with X-Auth, and on 101 the WebSocket
 * (lib/wsconn.c). The hello goes out at once, then the JSON heartbeat
 * starts. Every way a connection ends goes through conn_close, which
 * picks the delay before the next attempt (tun_backoff).
 */
#include <sys/socket.h>
#include <sys/time.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "stream.h"
#include "tls.h"
#include "tun.h"
#include "wsconn.h"

static void client_connect(struct tun *);
static void conn_close(struct tun_conn *, enum tun_end, int, const char *);
static void conn_try_next(struct tun_conn *);
static void client_retry_cb(evutil_socket_t, short, void *);
static void conn_announce(struct tun_conn *, const struct tunproto_msg *);

/* Name of a connection state, for debug logs. */
static const char *
conn_state_name(enum tun_conn_state s)
{
	switch (s) {
	case TC_S_RESOLVING:
		return ("resolving");
	case TC_S_CONNECTING:
		return ("connecting");
	case TC_S_UPGRADING:
		return ("upgrading");
	case TC_S_OPEN:
		return ("open");
	case TC_S_CLOSING:
		return ("closing");
	case TC_S_DEAD:
		return ("dead");
	}
	return ("?");
}

/*
 * Count a failed connection and return the seconds to wait before the next
 * attempt (§8.1). A network failure after a connection that lived at least
 * reset_ms resets the count first; network failures wait min(failures, 30)
 * seconds, a gateway that said it restarts (1012) none (its new process is
 * already listening), everything else 1 second.
 */
unsigned int
tun_backoff(
    unsigned int *failures, int end, uint64_t lived_ms, uint64_t reset_ms)
{
	if (end == TUN_END_RESTART) {
		*failures = 0;
		return (0);
	}
	if (end == TUN_END_NETWORK) {
		if (lived_ms != 0 && lived_ms >= reset_ms)
			*failures = 0;
		if (*failures < UINT32_MAX)
			(*failures)++;
		return (
		    *failures < TUN_BACKOFF_CAP ? *failures : TUN_BACKOFF_CAP);
	}
	if (*failures < UINT32_MAX)
		(*failures)++;
	return (TUN_RETRY_QUICK);
}

/*
 * Jitter for a network-failure delay of delay_s seconds: up to a quarter of
 * it more, in milliseconds, from r (any random value).  Clients cut off
 * together by a gateway restart then spread out instead of dialling in the
 * same second; the reference schedule stays the lower bound.
 */
unsigned int
tun_jitter_ms(unsigned int delay_s, uint32_t r)
{
	uint32_t span = delay_s * 250;

	return (span == 0 ? 0 : r % span);
}

/* Is the n-th 404 in a row logged as a warning (5th, then every 10th)? */
int
tun_route_miss_warns(unsigned int n)
{
	return (n == 5 || (n >= 10 && n % 10 == 0));
}

/* Is the n-th network failure logged as a warning (1st, every 10th)? */
int
tun_network_warns(unsigned int n)
{
	return (n == 1 || n % 10 == 0);
}

/* Is a tunnel connection open? */
int
tun_connected(const struct tun *t)
{
	return (t->t_conn != NULL && t->t_conn->c_state == TC_S_OPEN);
}

/* Number of the open connection, or 0. */
uint64_t
tun_conn_gen(const struct tun *t)
{
	return (tun_connected(t) ? t->t_conn->c_gen : 0);
}

/*
 * The limits in force: the last negotiated ones, or ours while the session
 * has never negotiated V2 (it speaks V1). A sandbox that spoke V2 speaks it
 * again after a reconnect, so exchanges keep their protocol across one.
 */
const struct tunproto_limits *
tun_limits(const struct tun *t)
{
	return (t->t_v2 ? &t->t_neg : &t->t_local);
}

/* Percent-encode s for a query value (RFC 3986 unreserved kept). */
static char *
client_pct(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out, *p;

	out = p = xmalloc(strlen(s) * 3 + 1);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '~')
			*p++ = (char)c;
		else {
			*p++ = '%';
			*p++ = hex[c >> 4];
			*p++ = hex[c & 15];
		}
	}
	*p = '\0';
	return (out);
}

/*
 * The path (and query) of the upgrade request: the route, and the token
 * as a query parameter when YR_TUNNEL_TOKEN_QUERY_FALLBACK asks (§2.5).
 */
static char *
client_request_path(const struct tun_options *o)
{
	char *route, *s, *tok;

	if (o->tunnel_path != NULL)
		route = xstrdup(o->tunnel_path);
	else if (o->listen_port == TUN_LISTEN_PORT_DEFAULT)
		xasprintf(&route, "/tunnel/%s", o->safe_id);
	else
		xasprintf(
		    &route, "/tunnel/%s/%d", o->safe_id, o->listen_port - 1);
	if (o->token == NULL || !o->token_query_fallback)
		return (route);
	tok = client_pct(o->token);
	xasprintf(&s, "%s%stoken=%s", route,
	    strchr(route, '?') != NULL ? "&" : "?", tok);
	explicit_bzero(tok, strlen(tok));
	free(tok);
	free(route);
	return (s);
}

/*
 * Make the client for opts: resolver, TLS contexts (built once, §8.1) and
 * the session id. Returns NULL with *cause on a setup error (a CA file that
 * does not load, mutual TLS asked for).
 */
struct tun *
tun_new(struct event_base *base, const struct tun_options *o, char **cause)
{
	struct tun *t;

	t = xcalloc(1, sizeof *t);
	t->t_base = base;
	t->t_opts = o;
	t->t_exit = 0;
	TAILQ_INIT(&t->t_xchgs);
	TAILQ_INIT(&t->t_targets);
	TAILQ_INIT(&t->t_idle);
	TAILQ_INIT(&t->t_waiting);
	TAILQ_INIT(&t->t_probeq);
	TAILQ_INIT(&t->t_h2s);
	TAILQ_INIT(&t->t_chans);
	idmap_init(&t->t_xchg_ids, 0);
	idmap_init(&t->t_chan_ids, 0);
	cache_init(&t->t_cache, TUN_CACHE_TTL_MS, TUN_CACHE_MAX_ENTRIES,
	    TUN_CACHE_MAX_BYTES);
	tombs_init(&t->t_tombs, TUN_TOMB_MAX, TUN_TOMB_TTL_MS);

	if ((t->t_dns = dns_new(base, cause)) == NULL)
		goto fail;
	if (o->gateway.u_tls &&
	    (t->t_gw_tls = tls_client_ctx_new(
		 o->ca_file, o->verify_tls, cause)) == NULL)
		goto fail;
	if (o->target.u_tls &&
	    (t->t_target_tls = tls_client_ctx_new(
		 o->target_ca_file, !o->target_insecure, cause)) == NULL)
		goto fail;
	/* Mutual TLS: present a client certificate to the target. */
	if (t->t_target_tls != NULL && o->target_cert != NULL &&
	    tls_client_ctx_set_cert(
		t->t_target_tls, o->target_cert, o->target_key, cause) != 0)
		goto fail;
	if (tunproto_uuid_random(t->t_session_id) != 0) {
		xasprintf(cause, "cannot make a session id: no random bytes");
		goto fail;
	}

	tunproto_limits_default(&t->t_local);
	t->t_local.l_protocol_version = o->protocol_version;
	t->t_local.l_max_stream_chunk = o->stream_chunk;
	t->t_local.l_max_inflight = o->max_inflight;
	t->t_local.l_stream_window_frames = o->stream_window_frames;
	t->t_local.l_max_body_size = o->max_body_size;
	t->t_local.l_max_ws_message_size = o->max_ws_message_size;
	t->t_local.l_fast_path_body = o->fast_path_body;
	t->t_local.l_http_timeout = o->http_timeout;

	t->t_url = tun_tunnel_url(o);
	t->t_host_header = tun_host_port(
	    o->gateway.u_host, o->gateway.u_port, o->gateway.u_tls);
	t->t_request_path = client_request_path(o);
	t->t_target_url = tun_target_url(o);
	t->t_target_authority = tun_host_port(
	    o->target.u_host, o->target.u_port, o->target.u_tls);
	if ((t->t_tmp = evbuffer_new()) == NULL)
		abort();
	if ((t->t_retry = evtimer_new(base, client_retry_cb, t)) == NULL)
		abort();
	return (t);

fail:
	tun_free(t);
	return (NULL);
}

/* Free the client; only from outside the event loop's callbacks. */
void
tun_free(struct tun *t)
{
	struct tun_conn *c;

	if (t == NULL)
		return;
	if ((c = t->t_conn) != NULL) {
		t->t_conn = NULL;
		c->c_tun = NULL;
		conn_close(c, TUN_END_STOP, 0, "aktunnel stopped");
	}
	chan_free_all(t);
	xchg_free_all(t);
	target_free_all(t);
	cache_clear(&t->t_cache);
	tombs_clear(&t->t_tombs);
	if (t->t_retry != NULL)
		event_free(t->t_retry);
	dns_free(t->t_dns);
	tls_ctx_free(t->t_gw_tls);
	tls_ctx_free(t->t_target_tls);
	free(t->t_url);
	free(t->t_host_header);
	if (t->t_request_path != NULL) {
		explicit_bzero(t->t_request_path, strlen(t->t_request_path));
		free(t->t_request_path);
	}
	free(t->t_target_url);
	free(t->t_target_authority);
	free(t->t_target_warn);
	if (t->t_tmp != NULL)
		evbuffer_free(t->t_tmp);
	free(t);
}

/* Forget the frames kept until the hello. */
static void
conn_early_clear(struct tun_conn *c)
{
	size_t i;

	for (i = 0; i < c->c_nearly; i++)
		free(c->c_early[i]);
	free(c->c_early);
	free(c->c_early_len);
	c->c_early = NULL;
	c->c_early_len = NULL;
	c->c_nearly = c->c_early_bytes = 0;
}

/*
 * Keep an http_req_begin that came before the sandbox's hello: a Python
 * sandbox resuming a session replays its requests before its hello unless
 * the upgrade carried X-YR-Tunnel-Protocol: 2.  Returns -1 when too many
 * wait (TC_EARLY_MAX frames, TC_EARLY_BYTES bytes).
 */
static int
conn_early_keep(struct tun_conn *c, const uint8_t *data, size_t len)
{
	if (c->c_nearly >= TC_EARLY_MAX ||
	    c->c_early_bytes + len > TC_EARLY_BYTES)
		return (-1);
	c->c_early = xreallocarray(c->c_early, c->c_nearly + 1,
	    sizeof *c->c_early);
	c->c_early_len = xreallocarray(c->c_early_len, c->c_nearly + 1,
	    sizeof *c->c_early_len);
	c->c_early[c->c_nearly] = xmalloc(len);
	memcpy(c->c_early[c->c_nearly], data, len);
	c->c_early_len[c->c_nearly++] = len;
	c->c_early_bytes += len;
	return (0);
}

/* Free a closed connection's memory, from the loop. */
static void
conn_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_conn *c = arg;

	(void)fd;
	(void)what;
	if (c->c_open_timer != NULL)
		event_free(c->c_open_timer);
	if (c->c_ping_timer != NULL)
		event_free(c->c_ping_timer);
	if (c->c_pong_timer != NULL)
		event_free(c->c_pong_timer);
	conn_early_clear(c);
	free(c->c_addr_error);
	free(c);
}

/* The next attempt is due. */
static void
client_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	client_connect(arg);
}

/*
 * Count a 401 or 403 answer (n in a row, counting this one) and return the
 * seconds to wait before the next attempt, or 0 when aktunnel gives up: a
 * refused credential does not heal by itself, so the wait grows (1, 2, 3,
 * 4 s) and the TUN_AUTH_TRIES-th refusal in a row is the last.
 */
unsigned int
tun_auth_delay(unsigned int n)
{
	return (n >= TUN_AUTH_TRIES ? 0 : n);
}

/* Write a delay of ms milliseconds as "2 s" or "2.137 s". */
static void
client_delay_str(char *buf, size_t len, uint64_t ms)
{
	if (ms % 1000 == 0)
		snprintf(buf, len, "%llu s", (unsigned long long)(ms / 1000));
	else
		snprintf(buf, len, "%llu.%03llu s",
		    (unsigned long long)(ms / 1000),
		    (unsigned long long)(ms % 1000));
}

/*
 * Where the credential came from, for a 401 or 403 (never the token
 * itself): which flag or variable carries it, or how to give one.
 */
static void
client_token_hint(const struct tun_options *o, char *buf, size_t len)
{
	if (o->token != NULL)
		snprintf(buf, len,
		    "the gateway refused the token from %s: check that it "
		    "is valid and allowed to open the tunnel of sandbox %s",
		    o->token_from != NULL ? o->token_from : "--token",
		    o->sandbox);
	else
		snprintf(buf, len,
		    "no token was sent: set AKERNEL_TOKEN or pass --token%s",
		    o->yr_token_set ? " (YR_TOKEN is set, but aktunnel "
				      "reads AKERNEL_TOKEN)"
				    : "");
}

/* A 401 or 403: say it is the credential; back off, or give up. */
static void
client_refused(struct tun *t, const char *reason, char *when, size_t len)
{
	char hint[256];
	unsigned int delay;

	client_token_hint(t->t_opts, hint, sizeof hint);
	t->t_auth_refusals++;
	if ((delay = tun_auth_delay(t->t_auth_refusals)) == 0) {
		log_error("tunnel handshake rejected %u times in a row (%s): "
			  "%s; exiting with status %d",
		    t->t_auth_refusals, reason, hint, TUN_EXIT_AUTH);
		t->t_exit = TUN_EXIT_AUTH;
		t->t_state = TUN_S_STOPPED;
		event_base_loopexit(t->t_base, NULL);
		*when = '\0';
		return;
	}
	client_delay_str(when, len, (uint64_t)delay * 1000);
	log_warn("tunnel handshake rejected: %s: %s; retrying in %s "
		 "(refusal %u of %d before aktunnel exits)",
	    reason, hint, when, t->t_auth_refusals, TUN_AUTH_TRIES);
}

/* A 404: the route is not there (yet); quiet, with the URL and a hint. */
static void
client_route_missing(struct tun *t)
{
	enum log_level lvl;
	unsigned int n = ++t->t_route_misses;

	lvl = n == 1 ? LOG_LVL_INFO
		     : (tun_route_miss_warns(n) ? LOG_LVL_WARN
						: LOG_LVL_DEBUG);
	if (!log_enabled(lvl))
		return;
	log_msg(lvl,
	    "tunnel route unavailable (HTTP 404, %u in a row) at %s: the "
	    "sandbox may not be ready yet; if this lasts, check --sandbox "
	    "(%s) and --gateway (the gateway's HTTP listener, not its "
	    "admin API); retrying every %d s",
	    n, t->t_url, t->t_opts->sandbox, TUN_RETRY_QUICK);
}

/* Log why a connection ended and schedule the next attempt. */
static void
client_lost(struct tun *t, struct tun_conn *c, enum tun_end end, int status,
    const char *reason)
{
	struct timeval tv = { 0, 0 };
	uint64_t lived = 0, reset_ms, ms;
	unsigned int delay;
	char when[32];
	enum log_level lvl;

	if (c->c_opened_at != 0) {
		lived = clock_mono_msec() - c->c_opened_at;
		if (lived == 0)
			lived = 1;
		chan_drop_all(t);
		xchg_disconnected(t);
	}
	if (t->t_state == TUN_S_STOPPING || end == TUN_END_STOP) {
		t->t_state = TUN_S_STOPPED;
		event_base_loopexit(t->t_base, NULL);
		return;
	}

	reset_ms = (uint64_t)(t->t_opts->ping_interval * 1000);
	delay = tun_backoff(&t->t_failures, end, lived, reset_ms);
	ms = (uint64_t)delay * 1000;
	/* Network failures get jitter; the line shows the delay used. */
	if (end == TUN_END_NETWORK)
		ms += tun_jitter_ms(delay, arc4random());
	/* Clients of a restarting gateway spread over a quarter second. */
	if (end == TUN_END_RESTART)
		ms = arc4random() % TUN_RESTART_SPREAD_MS;
	client_delay_str(when, sizeof when, ms);
	if (end != TUN_END_STATUS || status != 404)
		t->t_route_misses = 0;
	if (end == TUN_END_STATUS && status != 401 && status != 403)
		t->t_auth_refusals = 0;
	switch (end) {
	case TUN_END_STATUS:
		if (status == 404)
			client_route_missing(t);
		else if (status == 401 || status == 403) {
			client_refused(t, reason, when, sizeof when);
			if (t->t_state == TUN_S_STOPPED)
				return;
			ms = (uint64_t)tun_auth_delay(t->t_auth_refusals) *
			    1000;
		} else
			log_warn("tunnel handshake rejected: %s; retrying in "
				 "%s",
			    reason, when);
		break;
	case TUN_END_PROTOCOL:
		log_warn("tunnel protocol error: %s; reconnecting in %s",
		    reason, when);
		break;
	case TUN_END_RESTART:
		log_info("%s; reconnecting in %s", reason, when);
		break;
	default:
		lvl = tun_network_warns(t->t_failures) ? LOG_LVL_WARN
						       : LOG_LVL_INFO;
		if (c->c_opened_at != 0)
			log_msg(lvl,
			    "tunnel connection lost: %s; reconnecting in %s",
			    reason, when);
		else
			log_msg(lvl,
			    "cannot connect to the gateway: %s; retrying in %s "
			    "(attempt %u)",
			    reason, when, t->t_failures + 1);
		break;
	}
	t->t_state = TUN_S_WAITING;
	clock_msec_to_tv(ms, &tv);
	evtimer_add(t->t_retry, &tv);
}

/*
 * Close a connection for reason: the one way every connection ends. Its
 * resources go now (the WebSocket and stream free themselves safely
 * from inside their callbacks), its memory from the loop; the client then
 * schedules the next attempt, or stops.
 */
static void
conn_close(struct tun_conn *c, enum tun_end end, int status, const char *reason)
{
	struct tun *t = c->c_tun;

	if (c->c_state == TC_S_DEAD)
		return;
	log_debug("tunnel attempt %llu closed (%s): %s",
	    (unsigned long long)c->c_gen, conn_state_name(c->c_state), reason);
	c->c_state = TC_S_DEAD;
	if (c->c_query != NULL) {
		dns_cancel(c->c_query);
		c->c_query = NULL;
	}
	if (c->c_open_timer != NULL)
		evtimer_del(c->c_open_timer);
	if (c->c_ping_timer != NULL)
		evtimer_del(c->c_ping_timer);
	if (c->c_pong_timer != NULL)
		evtimer_del(c->c_pong_timer);
	if (c->c_ws != NULL) {
		wsconn_free(c->c_ws);
		c->c_ws = NULL;
	}
	if (c->c_s != NULL) {
		stream_free(c->c_s);
		c->c_s = NULL;
	}
	http1_msg_reset(&c->c_resp);
	if (t != NULL && t->t_conn == c) {
		t->t_conn = NULL;
		client_lost(t, c, end, status, reason);
	}
	if (t == NULL ||
	    event_base_once(t->t_base, -1, EV_TIMEOUT, conn_free_cb, c, NULL) !=
		0)
		conn_free_cb(-1, 0, c);
}

/*
 * Say the tunnel is back, once per reconnection: which connection this is
 * (connections that opened, not attempts) and whether the gateway resumed
 * the session, as its hello m says (session_resumed, given in answer to
 * our TUNPROTO_SESSION_HEADER).  A hello without it, or none (m NULL),
 * says nothing about the session, and neither does this line.
 */
static void
conn_announce(struct tun_conn *c, const struct tunproto_msg *m)
{
	struct tun *t = c->c_tun;
	const char *how = "";

	if (!(c->c_flags & TC_F_ANNOUNCE))
		return;
	c->c_flags &= ~TC_F_ANNOUNCE;
	if (c->c_state == TC_S_OPEN)
		evtimer_del(c->c_open_timer);
	if (m != NULL && (m->m_flags & TUNPROTO_MSG_F_SESSION_TOLD))
		how = (m->m_flags & TUNPROTO_MSG_F_SESSION_RESUMED)
		    ? ", session resumed"
		    : ", new session: the gateway did not have this "
		      "client's session, so requests that were in flight "
		      "are lost";
	log_info("tunnel %s reconnected (connection %llu%s)",
	    t->t_opts->sandbox, (unsigned long long)t->t_stats.st_connects,
	    how);
}

/* The open (or stop) deadline passed, or the hello did not come. */
static void
conn_open_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_conn *c = arg;

	(void)fd;
	(void)what;
	if (c->c_state == TC_S_OPEN) {
		/* A sandbox that sends no hello (V1) says nothing more. */
		conn_announce(c, NULL);
		return;
	}
	if (c->c_state == TC_S_CLOSING)
		conn_close(c, TUN_END_STOP, 0, "the close handshake timed out");
	else
		conn_close(c, TUN_END_NETWORK, 0,
		    "timed out opening the tunnel WebSocket");
}

/*
 * Describe why a connect or TLS handshake on stream st failed (what, its
 * event).
 */
static char *
conn_stream_error(struct stream *st, short what, const char *what_host)
{
	char *s;
	int err = stream_errno(st);

	if ((s = tun_stream_tls_error(st, what, what_host,
		 "the gateway does not speak TLS on this port: use "
		 "ws:// or http:// in --gateway")) != NULL)
		return (s);
	if (what & STREAM_EV_TIMEOUT)
		xasprintf(&s, "%s: connection timed out", what_host);
	else if (err != 0)
		xasprintf(&s, "%s: %s", what_host,
		    evutil_socket_error_to_string(err));
	else
		xasprintf(&s, "%s: connection closed", what_host);
	return (s);
}

/* Send the ping the heartbeat is due, and start waiting for its pong. */
static void
conn_ping_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_conn *c = arg;
	struct tun *t = c->c_tun;
	struct tunproto_msg m;
	struct timespec ts;
	struct timeval tv;
	char uuid[TUNPROTO_UUID_LEN + 1];
	size_t i, j;

	(void)fd;
	(void)what;
	if (c->c_state != TC_S_OPEN)
		return;
	if (tunproto_uuid_random(uuid) != 0)
		abort();
	for (i = j = 0; uuid[i] != '\0'; i++) {
		if (uuid[i] != '-')
			c->c_ping_id[j++] = uuid[i];
	}
	c->c_ping_id[j] = '\0';
	clock_gettime(CLOCK_REALTIME, &ts);
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_PING;
	m.m_id = c->c_ping_id;
	m.m_flags = TUNPROTO_MSG_F_TS_INT;
	m.m_timestamp_int = (int64_t)ts.tv_sec * 1000 +
	    (int64_t)ts.tv_nsec / 1000000;
	c->c_flags |= TC_F_PING_OUT;
	clock_msec_to_tv((uint64_t)(t->t_opts->ping_timeout * 1000), &tv);
	evtimer_add(c->c_pong_timer, &tv);
	tun_send_msg(t, &m);
}

/* No pong in time: the connection is dead (§7). */
static void
conn_pong_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_conn *c = arg;
	char why[128];

	(void)fd;
	(void)what;
	snprintf(why, sizeof why, "heartbeat timeout: no pong within %g s",
	    c->c_tun->t_opts->ping_timeout);
	conn_close(c, TUN_END_NETWORK, 0, why);
}

/* Arm the timer for the next ping. */
static void
conn_ping_schedule(struct tun_conn *c)
{
	struct timeval tv;

	clock_msec_to_tv(
	    (uint64_t)(c->c_tun->t_opts->ping_interval * 1000), &tv);
	evtimer_add(c->c_ping_timer, &tv);
}

/* A pong: if it answers our ping, the connection lives (§7). */
static void
conn_pong(struct tun_conn *c, const struct tunproto_msg *m)
{
	if (!(c->c_flags & TC_F_PING_OUT) || m->m_id == NULL ||
	    strcmp(m->m_id, c->c_ping_id) != 0) {
		log_debug("tunnel: pong with unexpected id ignored");
		return;
	}
	c->c_flags &= ~TC_F_PING_OUT;
	evtimer_del(c->c_pong_timer);
	conn_ping_schedule(c);
}

/* A hello from the sandbox: negotiate V2 once per connection (§4.3). */
static void
conn_hello(struct tun_conn *c, const struct tunproto_msg *m)
{
	struct tun *t = c->c_tun;
	struct tunproto_limits neg;
	char *err = NULL;
	int resumable;

	if (c->c_flags & TC_F_V2) {
		log_debug("tunnel: duplicate hello ignored");
		return;
	}
	c->c_flags |= TC_F_HELLO;
	conn_announce(c, m);
	if (tunproto_negotiate(&t->t_local, m, TUNPROTO_ROLE_CLIENT, &neg,
		&resumable, &err) != 0) {
		log_warn("tunnel: the sandbox's hello does not select "
			 "protocol V2 (%s); speaking V1",
		    err);
		free(err);
		return;
	}
	c->c_limits = neg;
	c->c_flags |= TC_F_V2;
	t->t_neg = neg;
	t->t_v2 = 1;
	log_debug("tunnel: V2 negotiated: chunk %llu, inflight %llu, window "
		  "%llu, max body %llu, max ws message %llu, fast path %llu",
	    (unsigned long long)neg.l_max_stream_chunk,
	    (unsigned long long)neg.l_max_inflight,
	    (unsigned long long)neg.l_stream_window_frames,
	    (unsigned long long)neg.l_max_body_size,
	    (unsigned long long)neg.l_max_ws_message_size,
	    (unsigned long long)neg.l_fast_path_body);
}

/* Answer a ping at once, echoing id and timestamp (§4.11). */
static void
conn_ping_reply(struct tun *t, struct tunproto_msg *m)
{
	m->m_type = TUNPROTO_T_PONG;
	tun_send_msg(t, m);
}

static void conn_text(struct tun_conn *, const uint8_t *, size_t);

/* The hello came: handle the frames kept before it, in order. */
static void
conn_early_run(struct tun_conn *c)
{
	char **v = c->c_early;
	size_t *lens = c->c_early_len, i, n = c->c_nearly;

	if (n == 0)
		return;
	log_info("tunnel: %zu streaming request%s came before the "
		 "sandbox's hello; handled after it",
	    n, n == 1 ? "" : "s");
	c->c_early = NULL;
	c->c_early_len = NULL;
	c->c_nearly = c->c_early_bytes = 0;
	for (i = 0; i < n; i++) {
		if (c->c_state == TC_S_OPEN)
			conn_text(c, (const uint8_t *)v[i], lens[i]);
		free(v[i]);
	}
	free(v);
	free(lens);
}

/* One text frame: decode it and hand it to whoever owns its id. */
static void
conn_text(struct tun_conn *c, const uint8_t *data, size_t len)
{
	struct tun *t = c->c_tun;
	struct tunproto_msg m;
	char *err = NULL;
	int rv;

	rv = tunproto_msg_decode((const char *)data, len, &m, &err);
	if (rv == TUNPROTO_DEC_MALFORMED || rv == TUNPROTO_DEC_UNKNOWN) {
		/* Dropped and logged, as the issue's §14 choices say. */
		log_warn("tunnel: control frame dropped: %s", err);
		free(err);
		return;
	}
	if (rv == TUNPROTO_DEC_BAD_BASE64 && m.m_type != TUNPROTO_T_HTTP_REQ &&
	    m.m_type != TUNPROTO_T_WS_MESSAGE) {
		log_warn("tunnel: control frame dropped: %s", err);
		free(err);
		tunproto_msg_free(&m);
		return;
	}
	free(err);
	err = NULL;
	/* Anything before a hello: the sandbox will not say more. */
	if (m.m_type != TUNPROTO_T_HELLO)
		conn_announce(c, NULL);

	switch (m.m_type) {
	case TUNPROTO_T_HELLO:
		conn_hello(c, &m);
		conn_early_run(c);
		break;
	case TUNPROTO_T_HTTP_REQ:
		xchg_http_req(t, &m, rv == TUNPROTO_DEC_BAD_BASE64);
		break;
	case TUNPROTO_T_HTTP_REQ_BEGIN:
		if (!(c->c_flags & TC_F_V2) && !(c->c_flags & TC_F_HELLO) &&
		    conn_early_keep(c, data, len) == 0)
			log_debug("tunnel: streaming request before the "
				  "sandbox's hello kept until it comes");
		else if (!(c->c_flags & TC_F_V2))
			tun_protocol_error(t,
			    "received streaming request before V2 "
			    "negotiation");
		else if (!tunproto_uuid_valid(m.m_id))
			tun_protocol_error(
			    t, "streaming request id must be a UUID string");
		else
			xchg_req_begin(t, &m);
		break;
	case TUNPROTO_T_HTTP_REQ_END:
		xchg_req_end(t, &m);
		break;
	case TUNPROTO_T_WINDOW:
		if (tunproto_window_check(&m, &err) != 0) {
			tun_protocol_error(t, "%s", err);
			free(err);
			break;
		}
		xchg_window(t, &m);
		break;
	case TUNPROTO_T_ERROR:
		if (!chan_peer_error(t, &m))
			xchg_peer_error(t, &m);
		break;
	case TUNPROTO_T_PING:
		conn_ping_reply(t, &m);
		break;
	case TUNPROTO_T_PONG:
		conn_pong(c, &m);
		break;
	case TUNPROTO_T_WS_CONNECT:
		chan_connect(t, &m);
		break;
	case TUNPROTO_T_WS_MESSAGE:
		chan_message(t, &m, rv == TUNPROTO_DEC_BAD_BASE64);
		break;
	case TUNPROTO_T_WS_CLOSE:
		chan_close_msg(t, &m);
		break;
	default:
		log_warn("tunnel: %s from the sandbox dropped (wrong "
			 "direction)",
		    tunproto_type_name(m.m_type));
		break;
	}
	tunproto_msg_free(&m);
}

/*
 * One binary frame, all of msg: a data envelope (§3.2).  Request data
 * moves on from msg without a copy.
 */
static void
conn_binary(struct tun_conn *c, struct evbuffer *msg)
{
	struct tun *t = c->c_tun;
	struct tunproto_env env;
	const uint8_t *data;
	size_t len = evbuffer_get_length(msg), hlen;
	char *err = NULL;

	/* The header only: the payload stays in its chains. */
	hlen = len < TUNPROTO_ENV_PREFIX_MAX ? len : TUNPROTO_ENV_PREFIX_MAX;
	if ((data = evbuffer_pullup(msg, (ev_ssize_t)hlen)) == NULL)
		data = (const uint8_t *)"";
	if (tunproto_env_decode_prefix(data, len,
		c->c_limits.l_max_stream_chunk, &env, &hlen, &err) != 0) {
		tun_protocol_error(t, "%s", err);
		free(err);
		return;
	}
	evbuffer_drain(msg, hlen);
	switch (env.e_kind) {
	case TUNPROTO_ENV_HTTP_REQUEST_DATA:
		xchg_req_data(t, &env, msg);
		break;
	case TUNPROTO_ENV_WS_BINARY_DATA:
		if ((data = evbuffer_pullup(msg, -1)) == NULL)
			data = (const uint8_t *)"";
		env.e_payload = data;
		chan_data(t, &env);
		break;
	default:
		tun_protocol_error(
		    t, "unexpected binary frame kind: %u", env.e_kind);
		break;
	}
}

/* A whole WebSocket message from the gateway. */
static void
conn_message_cb(void *arg, int is_binary, struct evbuffer *msg)
{
	struct tun_conn *c = arg;
	const uint8_t *data;

	if (c->c_state != TC_S_OPEN)
		return;
	if (is_binary)
		conn_binary(c, msg);
	else {
		if ((data = evbuffer_pullup(msg, -1)) == NULL)
			data = (const uint8_t *)"";
		conn_text(c, data, evbuffer_get_length(msg));
	}
}

/* The WebSocket closed. */
static void
conn_ws_close_cb(void *arg, uint16_t code, const char *reason)
{
	struct tun_conn *c = arg;
	char why[256];

	if (c->c_state == TC_S_CLOSING) {
		conn_close(c, TUN_END_STOP, 0, "closed");
		return;
	}
	if (code == TUNPROTO_CLOSE_REPLACED &&
	    strcmp(reason, "replaced") == 0) {
		/*
		 * The newest client of a sandbox wins (§8.2): dialling again
		 * would take the tunnel back, and the two would take turns.
		 */
		log_error("another client took over the tunnel of sandbox "
			  "%s (the gateway closed this connection with 1012 "
			  "replaced); exiting",
		    c->c_tun->t_opts->sandbox);
		c->c_tun->t_exit = TUN_EXIT_REPLACED;
		conn_close(c, TUN_END_STOP, 0, "replaced by another client");
		return;
	}
	if (code == TUNPROTO_CLOSE_SESSION_REPLACED) {
		/*
		 * We were cut off while a newer client took over, so the 1012
		 * never reached us: the gateway refuses our session instead.
		 */
		log_error("a newer client took over the tunnel of sandbox %s "
			  "while this one was disconnected: the gateway "
			  "refused this client's session (close %u %s); "
			  "exiting",
		    c->c_tun->t_opts->sandbox, code,
		    *reason != '\0' ? reason : TUNPROTO_SESSION_REPLACED);
		c->c_tun->t_exit = TUN_EXIT_REPLACED;
		conn_close(
		    c, TUN_END_STOP, 0, "session replaced by another client");
		return;
	}
	if (code == TUNPROTO_CLOSE_REPLACED) {
		/* Any other 1012: the gateway restarts or hands over to a new
		 * process once our exchanges are done; that one listens. */
		snprintf(why, sizeof why,
		    "the gateway is restarting (close 1012%s%s)",
		    *reason != '\0' ? ": " : "", reason);
		conn_close(c, TUN_END_RESTART, 0, why);
		return;
	}
	if (code == WS_CLOSE_ABNORMAL)
		snprintf(why, sizeof why, "%s", reason);
	else
		snprintf(why, sizeof why,
		    "the gateway closed the tunnel (code %u%s%s)", code,
		    *reason != '\0' ? ": " : "", reason);
	conn_close(c, TUN_END_NETWORK, 0, why);
}

/* The WebSocket's queue drained: send more data. */
static void
conn_ws_writable_cb(void *arg)
{
	struct tun_conn *c = arg;

	if (c->c_state == TC_S_OPEN)
		xchg_pump_all(c->c_tun);
}

/* The upgrade succeeded: run the WebSocket, say hello, start pinging. */
static void
conn_open(struct tun_conn *c)
{
	static const struct wsconn_cbs cbs = {
		.on_message_buf = conn_message_cb,
		.on_close = conn_ws_close_cb,
		.on_writable = conn_ws_writable_cb,
	};
	struct tun *t = c->c_tun;
	const struct tun_options *o = t->t_opts;
	struct timeval announce_tv = { TUN_ANNOUNCE_WAIT, 0 };
	struct tunproto_msg hello;
	char *err = NULL;

	evtimer_del(c->c_open_timer);
	http1_msg_reset(&c->c_resp);
	c->c_ws = wsconn_new(t->t_base, c->c_s, 1, &cbs, c, 0);
	if (c->c_ws == NULL) {
		conn_close(c, TUN_END_NETWORK, 0, "cannot start the WebSocket");
		return;
	}
	c->c_s = NULL;
	c->c_state = TC_S_OPEN;
	c->c_opened_at = clock_mono_msec();
	t->t_state = TUN_S_OPEN;
	t->t_route_misses = 0;
	t->t_auth_refusals = 0;
	t->t_stats.st_connects++;

	/* The hello goes first, before anything is read (§4.2). */
	if (tunproto_hello(&t->t_local, t->t_session_id, &hello, &err) != 0) {
		conn_close(c, TUN_END_PROTOCOL, 0, err);
		free(err);
		return;
	}
	tun_send_msg(t, &hello);
	tunproto_msg_free(&hello);
	if (c->c_state != TC_S_OPEN)
		return;
	conn_ping_schedule(c);

	if (!(t->t_flags & TUN_F_READY_ONCE)) {
		t->t_flags |= TUN_F_READY_ONCE;
		log_info("tunnel %s ready: sandbox http://127.0.0.1:%d -> %s",
		    o->sandbox, o->listen_port, t->t_target_url);
	} else {
		/* Said once the sandbox's hello tells about the session. */
		c->c_flags |= TC_F_ANNOUNCE;
		evtimer_add(c->c_open_timer, &announce_tv);
	}
	log_debug("tunnel attempt %llu open to %s, session %s",
	    (unsigned long long)c->c_gen, t->t_url, t->t_session_id);
	xchg_connected(t);
}

/* Bytes of the upgrade response arrived. */
static void
conn_read_cb(struct stream *s, void *arg)
{
	struct tun_conn *c = arg;
	struct http1_limits lim = { TUN_HEAD_MAX, TUN_HEAD_LINE_MAX,
		TUN_HEAD_FIELDS_MAX };
	enum http1_err herr;
	char why[256], *err = NULL;
	int rv;

	if (c->c_state != TC_S_UPGRADING)
		return;
	rv = http1_parse_response(
	    stream_input(s), &lim, 0, &c->c_resp, &herr);
	if (rv == 0)
		return;
	if (rv < 0) {
		snprintf(why, sizeof why,
		    "the gateway's answer to the upgrade is not HTTP: %s%s",
		    http1_err_message(herr),
		    c->c_tun->t_gw_tls == NULL
			? " (if this port speaks TLS, use wss:// or https:// "
			  "in --gateway)"
			: "");
		conn_close(c, TUN_END_PROTOCOL, 0, why);
		return;
	}
	if (c->c_resp.m_status != 101) {
		snprintf(why, sizeof why, "HTTP %d%s%s", c->c_resp.m_status,
		    *c->c_resp.m_reason != '\0' ? " " : "", c->c_resp.m_reason);
		conn_close(c, TUN_END_STATUS, c->c_resp.m_status, why);
		return;
	}
	if (ws_check_accept_response(&c->c_resp, c->c_key, &err) != 0) {
		snprintf(why, sizeof why, "bad WebSocket upgrade: %s", err);
		free(err);
		conn_close(c, TUN_END_PROTOCOL, 0, why);
		return;
	}
	conn_open(c);
}

/* Send the upgrade request once TCP (and TLS) is up. */
static void
conn_upgrade(struct tun_conn *c)
{
	struct tun *t = c->c_tun;
	const char *extra[4];
	char *auth = NULL, *req, sess[sizeof TUNPROTO_SESSION_HEADER +
	    TUNPROTO_UUID_LEN + 2];
	size_t n = 0;

	ws_random_key(c->c_key);
	/* The Python V2 sandbox then says hello at once (§2.5). */
	if (t->t_local.l_protocol_version >= 2)
		extra[n++] = "X-YR-Tunnel-Protocol: 2";
	if (t->t_opts->token != NULL) {
		xasprintf(&auth, "X-Auth: %s", t->t_opts->token);
		extra[n++] = auth;
	}
	/* So the gateway's hello can say whether it resumes the session. */
	snprintf(sess, sizeof sess, "%s: %s", TUNPROTO_SESSION_HEADER,
	    t->t_session_id);
	extra[n++] = sess;
	extra[n] = NULL;
	req = ws_client_request(
	    t->t_host_header, t->t_request_path, c->c_key, extra);
	if (auth != NULL) {
		explicit_bzero(auth, strlen(auth));
		free(auth);
	}
	if (req == NULL) {
		conn_close(c, TUN_END_PROTOCOL, 0,
		    "cannot build the upgrade request (bad character in the "
		    "route or token)");
		return;
	}
	c->c_state = TC_S_UPGRADING;
	if (evbuffer_add(stream_output(c->c_s), req, strlen(req)) != 0)
		abort(); /* allocation failure, as with xmalloc */
	explicit_bzero(req, strlen(req));
	free(req);
	stream_enable(c->c_s, EV_READ);
}

/* Connect, TLS and transport events before the WebSocket takes over. */
static void
conn_event_cb(struct stream *s, short what, void *arg)
{
	struct tun_conn *c = arg;
	struct tun *t = c->c_tun;
	char *hp;

	/* stream_connect set TCP_NODELAY: credits are round trips. */
	if (what & STREAM_EV_CONNECTED) {
		if (c->c_state == TC_S_CONNECTING)
			conn_upgrade(c);
		return;
	}
	if (!(what & (STREAM_EV_EOF | STREAM_EV_ERROR | STREAM_EV_TIMEOUT)))
		return;
	hp = tun_host_port(
	    t->t_opts->gateway.u_host, t->t_opts->gateway.u_port, -1);
	if (c->c_state == TC_S_CONNECTING) {
		free(c->c_addr_error);
		c->c_addr_error = conn_stream_error(s, what, hp);
		free(hp);
		stream_free(c->c_s);
		c->c_s = NULL;
		conn_try_next(c);
		return;
	}
	free(hp);
	/* An answer and the close may come together: read it first. */
	conn_read_cb(s, c);
	if (c->c_state != TC_S_UPGRADING)
		return;
	conn_close(c, TUN_END_NETWORK, 0,
	    t->t_gw_tls == NULL
		? "the gateway closed the connection during the WebSocket "
		  "upgrade (if this port speaks TLS, use wss:// or https:// "
		  "in --gateway)"
		: "the gateway closed the connection during the WebSocket "
		  "upgrade");
}

/* Dial the next address of the gateway, or give up. */
static void
conn_try_next(struct tun_conn *c)
{
	struct tun *t = c->c_tun;
	struct sockaddr_storage *ss;
	char *cause = NULL, why[512];
	SSL *ssl = NULL;

	for (;;) {
		if (c->c_next >= c->c_naddrs) {
			snprintf(why, sizeof why, "%s",
			    c->c_addr_error != NULL ? c->c_addr_error
						    : "no address");
			conn_close(c, TUN_END_NETWORK, 0, why);
			return;
		}
		ss = &c->c_addrs[c->c_next++];
		if (t->t_gw_tls != NULL) {
			ssl = tls_client_ssl_new(
			    t->t_gw_tls, t->t_opts->gateway.u_host, &cause);
			if (ssl == NULL) {
				conn_close(c, TUN_END_NETWORK, 0, cause);
				free(cause);
				return;
			}
		}
		/* The handshake comes after the connect; the stream owns ssl. */
		c->c_s = stream_new(t->t_base, -1, ssl, 0);
		stream_setcb(c->c_s, conn_read_cb, NULL, conn_event_cb, c);
		if (stream_connect(c->c_s, (struct sockaddr *)ss,
			ss->ss_family == AF_INET6
			    ? sizeof(struct sockaddr_in6)
			    : sizeof(struct sockaddr_in)) == 0) {
			c->c_state = TC_S_CONNECTING;
			return;
		}
		free(c->c_addr_error);
		xasprintf(&c->c_addr_error, "cannot connect: %s",
		    evutil_socket_error_to_string(errno));
		stream_free(c->c_s);
		c->c_s = NULL;
	}
}

/* The gateway's addresses are known (or not). */
static void
conn_resolved_cb(
    const struct sockaddr_storage *addrs, size_t n, const char *err, void *arg)
{
	struct tun_conn *c = arg;

	c->c_query = NULL;
	if (err != NULL) {
		conn_close(c, TUN_END_NETWORK, 0, err);
		return;
	}
	memcpy(c->c_addrs, addrs, n * sizeof *addrs);
	c->c_naddrs = n;
	c->c_next = 0;
	conn_try_next(c);
}

/* Start one connection attempt. */
static void
client_connect(struct tun *t)
{
	struct tun_conn *c;
	struct timeval tv = { TUN_OPEN_TIMEOUT, 0 };

	c = xcalloc(1, sizeof *c);
	c->c_tun = t;
	c->c_gen = ++t->t_gen;
	c->c_state = TC_S_RESOLVING;
	c->c_limits = t->t_local;
	c->c_open_timer = evtimer_new(t->t_base, conn_open_timeout_cb, c);
	c->c_ping_timer = evtimer_new(t->t_base, conn_ping_cb, c);
	c->c_pong_timer = evtimer_new(t->t_base, conn_pong_timeout_cb, c);
	if (c->c_open_timer == NULL || c->c_ping_timer == NULL ||
	    c->c_pong_timer == NULL)
		abort();
	t->t_conn = c;
	t->t_state = TUN_S_CONNECTING;
	evtimer_add(c->c_open_timer, &tv);
	log_debug("tunnel attempt %llu: dialling %s",
	    (unsigned long long)c->c_gen, t->t_url);
	c->c_query = dns_lookup(t->t_dns, t->t_opts->gateway.u_host,
	    t->t_opts->gateway.u_port, conn_resolved_cb, c);
}

/* Start the reconnect loop. */
void
tun_start(struct tun *t)
{
	log_info("tunnel %s: connecting to %s", t->t_opts->sandbox, t->t_url);
	client_connect(t);
}

/*
 * Stop: close the WebSocket with 1000 and end the loop once the gateway
 * answers (or after TUN_STOP_TIMEOUT seconds).
 */
void
tun_stop(struct tun *t, const char *why)
{
	struct tun_conn *c = t->t_conn;
	struct timeval tv = { TUN_STOP_TIMEOUT, 0 };

	if (t->t_state == TUN_S_STOPPING || t->t_state == TUN_S_STOPPED)
		return;
	log_info("received %s, stopping", why);
	t->t_state = TUN_S_STOPPING;
	evtimer_del(t->t_retry);
	if (c == NULL) {
		t->t_state = TUN_S_STOPPED;
		event_base_loopexit(t->t_base, NULL);
		return;
	}
	if (c->c_state == TC_S_OPEN && c->c_ws != NULL &&
	    wsconn_close(c->c_ws, WS_CLOSE_NORMAL, "aktunnel stopping") == 0) {
		c->c_state = TC_S_CLOSING;
		evtimer_del(c->c_ping_timer);
		evtimer_del(c->c_pong_timer);
		evtimer_add(c->c_open_timer, &tv);
		return;
	}
	conn_close(c, TUN_END_STOP, 0, "stopping");
}

/*
 * The sandbox broke the protocol: drop the connection and dial again in
 * one second (§3.2, §8.1); the exchanges survive.
 */
void
tun_protocol_error(struct tun *t, const char *fmt, ...)
{
	va_list ap;
	char *why;

	if (t->t_conn == NULL)
		return;
	va_start(ap, fmt);
	xvasprintf(&why, fmt, ap);
	va_end(ap);
	conn_close(t->t_conn, TUN_END_PROTOCOL, 0, why);
	free(why);
}

/*
 * Send one text frame if a connection is open. Returns 0, or -1 when there
 * is no connection or it cannot take the frame (it is then closed).
 */
int
tun_send_text(struct tun *t, const char *s, size_t len)
{
	if (!tun_connected(t))
		return (-1);
	if (wsconn_send(t->t_conn->c_ws, 0, (const uint8_t *)s, len) != 0) {
		conn_close(t->t_conn, TUN_END_NETWORK, 0,
		    "the tunnel cannot take more frames");
		return (-1);
	}
	return (0);
}

/* Encode and send one control message; as tun_send_text. */
int
tun_send_msg(struct tun *t, const struct tunproto_msg *m)
{
	char *s;
	size_t len;
	int rv;

	if (!tun_connected(t))
		return (-1);
	if ((s = tunproto_msg_encode(m, &len)) == NULL) {
		log_error("tunnel: cannot encode a %s message",
		    tunproto_type_name(m->m_type));
		return (-1);
	}
	rv = tun_send_text(t, s, len);
	free(s);
	return (rv);
}

/* Send a window for id (§4.8). */
void
tun_send_window(struct tun *t, const char *id, uint64_t credits, uint64_t ack)
{
	struct tunproto_msg m;

	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_WINDOW;
	m.m_id = (char *)(uintptr_t)id;
	m.m_credits = credits;
	m.m_ack_offset = ack;
	m.m_flags = TUNPROTO_MSG_F_ACK_OFFSET;
	tun_send_msg(t, &m);
}

/* Send an error for id (§4.9). */
void
tun_send_error(struct tun *t, const char *id, const char *message)
{
	struct tunproto_msg m;

	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_ERROR;
	m.m_id = (char *)(uintptr_t)id;
	m.m_message = (char *)(uintptr_t)message;
	tun_send_msg(t, &m);
}

/* Bytes queued on the tunnel WebSocket (0 without one). */
size_t
tun_queued(const struct tun *t)
{
	return (tun_connected(t) ? wsconn_queued(t->t_conn->c_ws) : 0);
}

/* May more data envelopes be queued on the WebSocket now? */
int
tun_send_room(const struct tun *t)
{
	return (tun_connected(t) &&
	    wsconn_queued(t->t_conn->c_ws) < TUN_WS_DATA_HIWAT);
}

/*
 * Send one data envelope of kind for id with flags (and offset, with
 * TUNPROTO_ENV_F_OFFSET), its payload the len bytes at position pos of
 * src, which is not drained: masked straight from src's chains into the
 * WebSocket's output. Returns 0 or -1 as tun_send_text.
 */
int
tun_send_data(struct tun *t, uint8_t kind, const char *id, uint64_t offset,
    uint8_t flags, struct evbuffer *src, size_t pos, size_t len)
{
	struct tunproto_env env;
	uint8_t hdr[TUNPROTO_ENV_PREFIX_MAX];
	size_t hlen;
	char *err = NULL;

	if (!tun_connected(t))
		return (-1);
	memset(&env, 0, sizeof env);
	env.e_kind = kind;
	env.e_flags = flags;
	snprintf(env.e_id, sizeof env.e_id, "%s", id);
	env.e_offset = offset;
	env.e_len = len;
	if (tunproto_env_encode_header(
		&env, TUNPROTO_CHUNK_CAP, hdr, &hlen, &err) != 0) {
		log_error("tunnel: cannot encode an envelope: %s", err);
		free(err);
		return (-1);
	}
	if (pos > evbuffer_get_length(src) ||
	    len > evbuffer_get_length(src) - pos)
		abort();
	if (wsconn_send_ev(t->t_conn->c_ws, 1, hdr, hlen, src, pos, len) !=
	    0) {
		conn_close(t->t_conn, TUN_END_NETWORK, 0,
		    "the tunnel cannot take more frames");
		return (-1);
	}
	return (0);
}
