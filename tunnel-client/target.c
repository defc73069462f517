/*
 * Requests toward the target (tunnel-protocol.md §9): the URL join, the
 * request header rules, the request head, and a pool of HTTP/1.1
 * connections (at most --target-connections, idle ones kept alive) over
 * TCP or verified TLS. A connection carries one exchange at a time; the
 * exchange (xchg.c) writes the request and reads the response through the
 * functions here, and is told of connection events by xchg_target_*.
 *
 * To an https:// target ALPN offers h2 (--target-http2 auto). When the
 * target picks it, the connection becomes an HTTP/2 connection
 * (target_h2.c) and each exchange gets a struct tun_target that is one
 * stream on it, used through the same functions. Until the first handshake
 * says which protocol the target speaks, exchanges wait for that one dial
 * (t_probe) rather than each opening a connection of its own.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "evb.h"
#include "stream.h"
#include "strbuf.h"
#include "tls.h"
#include "tun.h"

/* Why a TLS handshake with a target failed when it answered in plain text. */
static const char target_not_tls[] =
    "it does not speak TLS: use http:// in --target";

static void target_connect_next(struct tun_target *);
static void target_dispatch(struct tun *);

/* What ALPN offers an https:// target, by --target-http2. */
static const char *const target_alpn_h2[] = { "h2", "http/1.1" };
static const char *const target_alpn_h1[] = { "http/1.1" };

/* Request headers never forwarded (§9.2), besides Connection-named ones. */
static const char *const target_dropped[] = { "connection", "keep-alive",
	"proxy-authenticate", "proxy-authorization", "proxy-connection", "te",
	"trailer", "transfer-encoding", "upgrade", "host", "content-length",
	"expect", NULL };

/*
 * Remove "." and ".." segments from an absolute path in place (RFC 3986
 * section 5.2.4); the result still starts with "/".
 */
static void
target_remove_dots(char *path)
{
	char *in = path, *out = path, *seg;

	while (*in != '\0') {
		if (strncmp(in, "../", 3) == 0)
			in += 3;
		else if (strncmp(in, "./", 2) == 0)
			in += 2;
		else if (strncmp(in, "/./", 3) == 0)
			in += 2;
		else if (strcmp(in, "/.") == 0)
			in[1] = '\0';
		else if (strncmp(in, "/../", 4) == 0 ||
		    strcmp(in, "/..") == 0) {
			if (in[3] == '/')
				in += 3;
			else {
				in += 2;
				*in = '/';
			}
			/* Drop the last segment of the output. */
			while (out > path && *--out != '/')
				/* nothing */;
		} else if (strcmp(in, ".") == 0 || strcmp(in, "..") == 0)
			in += strlen(in);
		else {
			seg = in;
			if (*in == '/')
				in++;
			while (*in != '\0' && *in != '/')
				in++;
			memmove(out, seg, (size_t)(in - seg));
			out += in - seg;
		}
	}
	*out = '\0';
	if (*path == '\0')
		strcpy(path, "/");
}

/*
 * Join the target's base path ("" or "/api", no trailing "/") with the
 * origin-form path of a frame (§9.1): the frame's leading slashes go, the
 * rest is resolved against base + "/" (dot segments removed from the path,
 * the query kept as is). Returns the request target, or NULL with *cause
 * when the path holds a byte that cannot stand in a request line.
 */
char *
target_join_path(const char *base, const char *path, char **cause)
{
	const char *p, *query;
	char *merged, *out;
	size_t plen;

	for (p = path; *p != '\0'; p++) {
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f ||
		    *p == '#') {
			xasprintf(cause,
			    "invalid request path: byte 0x%02x is not allowed",
			    (unsigned char)*p);
			return (NULL);
		}
	}
	while (*path == '/')
		path++;
	query = strchr(path, '?');
	plen = query != NULL ? (size_t)(query - path) : strlen(path);
	xasprintf(&merged, "%s/%.*s", base, (int)plen, path);
	target_remove_dots(merged);
	if (query != NULL) {
		xasprintf(&out, "%s%s", merged, query);
		free(merged);
		return (out);
	}
	return (merged);
}

/* Does the comma-separated list value name the header name? */
static int
target_list_names(const char *value, const char *name)
{
	const char *p = value, *start, *end;
	size_t len = strlen(name);

	while (*p != '\0') {
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		start = p;
		while (*p != '\0' && *p != ',')
			p++;
		end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if ((size_t)(end - start) == len &&
		    strncasecmp(start, name, len) == 0)
			return (1);
	}
	return (0);
}

/*
 * Is header i of the n in h left out of the request to the target (§9.2):
 * hop-by-hop, named in any Connection header, Host, Content-Length or
 * Expect?
 */
int
target_header_dropped(const struct tunproto_header *h, size_t n, size_t i)
{
	const char *const *d;
	size_t k;

	for (d = target_dropped; *d != NULL; d++) {
		if (strcasecmp(h[i].h_name, *d) == 0)
			return (1);
	}
	for (k = 0; k < n; k++) {
		if (strcasecmp(h[k].h_name, "connection") == 0 &&
		    target_list_names(h[k].h_value, h[i].h_name))
			return (1);
	}
	return (0);
}

/* Is s a token (RFC 9110 section 5.6.2)? */
static int
target_token(const char *s)
{
	if (*s == '\0')
		return (0);
	for (; *s != '\0'; s++) {
		if (!isalnum((unsigned char)*s) &&
		    strchr("!#$%&'*+-.^_`|~", *s) == NULL)
			return (0);
	}
	return (1);
}

/* May s be a field value (no CR, LF, NUL or other controls but tab)? */
static int
target_value(const char *s)
{
	for (; *s != '\0'; s++) {
		if (((unsigned char)*s < 0x20 && *s != '\t') ||
		    (unsigned char)*s == 0x7f)
			return (0);
	}
	return (1);
}

/*
 * Build the request head for the target: method, the joined request
 * target, Host (the target's authority), the headers kept by §9.2 in
 * order, then the framing: body 0 for a fast-path body of length bytes
 * (Content-Length, left out when empty unless the method carries a
 * body), 1 for a streamed body of known length, 2 for chunked. Returns a
 * new evbuffer, or NULL with *cause.
 */
struct evbuffer *
target_request_head(const struct tun *t, const char *method, const char *target,
    const struct tunproto_header *h, size_t n, int body, uint64_t length,
    char **cause)
{
	struct evbuffer *b;
	struct strbuf sb = { NULL, 0, 0 };
	size_t i;

	if (!target_token(method)) {
		xasprintf(cause, "invalid request method");
		return (NULL);
	}
	for (i = 0; i < n; i++) {
		if (!target_token(h[i].h_name)) {
			xasprintf(cause, "invalid request header name");
			return (NULL);
		}
		if (!target_value(h[i].h_value)) {
			xasprintf(cause, "invalid value in request header %s",
			    h[i].h_name);
			return (NULL);
		}
	}
	/* Built in one piece, without printf. */
	strbuf_adds(&sb, method);
	strbuf_add(&sb, " ", 1);
	strbuf_adds(&sb, target);
	strbuf_adds(&sb, " HTTP/1.1\r\n");
	strbuf_add_header(&sb, "Host", 4, t->t_target_authority,
	    strlen(t->t_target_authority));
	for (i = 0; i < n; i++) {
		if (target_header_dropped(h, n, i))
			continue;
		strbuf_add_header(&sb, h[i].h_name, strlen(h[i].h_name),
		    h[i].h_value, strlen(h[i].h_value));
	}
	if (body == 2)
		strbuf_adds(&sb, "Transfer-Encoding: chunked\r\n");
	else if (body == 1 || length != 0 || strcmp(method, "POST") == 0 ||
	    strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0) {
		strbuf_adds(&sb, "Content-Length: ");
		strbuf_add_u64(&sb, length);
		strbuf_add(&sb, "\r\n", 2);
	}
	strbuf_add(&sb, "\r\n", 2);
	if ((b = evbuffer_new()) == NULL)
		abort();
	evbuffer_add(b, sb.sb_buf, sb.sb_len);
	strbuf_free(&sb);
	return (b);
}

/* Free a target connection's memory, from the loop. */
static void
target_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_target *tt = arg;

	(void)fd;
	(void)what;
	if (tt->tt_ev != NULL)
		event_free(tt->tt_ev);
	if (tt->tt_flags & TT_F_H2)
		target_h2_free_stream(tt);
	free(tt->tt_error);
	free(tt);
}

/*
 * Close a target connection for reason: the one way each ends. The
 * exchange it carried, if any, is not told (the caller is that exchange,
 * or tells it first). Waiting exchanges may get a new connection.
 */
void
target_close(struct tun_target *tt, const char *reason)
{
	struct tun *t = tt->tt_tun;

	if (tt->tt_state == TT_S_DEAD)
		return;
	log_debug("target connection %p closed: %s", (void *)tt, reason);
	if (tt->tt_state == TT_S_IDLE) {
		TAILQ_REMOVE(&t->t_idle, tt, tt_idle_entry);
		t->t_nidle--;
	}
	tt->tt_state = TT_S_DEAD;
	if (tt->tt_query != NULL) {
		dns_cancel(tt->tt_query);
		tt->tt_query = NULL;
	}
	if (tt->tt_ev != NULL)
		event_del(tt->tt_ev);
	if (tt->tt_flags & TT_F_H2)
		target_h2_detach(tt);
	/* From the stream's own callback too: it goes when that returns. */
	stream_free(tt->tt_s);
	tt->tt_s = NULL;
	if (tt->tt_x != NULL && tt->tt_x->x_tt == tt)
		tt->tt_x->x_tt = NULL;
	tt->tt_x = NULL;
	TAILQ_REMOVE(&t->t_targets, tt, tt_entry);
	t->t_ntargets--;
	if (event_base_once(
		t->t_base, -1, EV_TIMEOUT, target_free_cb, tt, NULL) != 0)
		target_free_cb(-1, 0, tt);
	/* The dial ended before its handshake: another one learns. */
	if (t->t_probe == tt) {
		t->t_probe = NULL;
		target_probe_done(t, NULL);
	}
	target_dispatch(t);
}

/* Arm the read and write timeouts (YR_TUNNEL_HTTP_TIMEOUT) again. */
static void
target_touch(struct tun_target *tt)
{
	struct timeval tv;

	if (tt->tt_s == NULL)
		return;

	clock_msec_to_tv(
	    (uint64_t)(tt->tt_tun->t_opts->http_timeout * 1000), &tv);
	stream_set_timeouts(tt->tt_s, &tv, &tv);
}

/*
 * The exchange may take input again.  Nothing to do: the stream stopped
 * reading by itself at TUN_TARGET_READ_HIWAT and reads again as soon as
 * the exchange drains the input below it (stream.h), so a download out
 * of credits no longer runs a read callback on every loop pass.
 */
void
target_read_resume(struct tun_target *tt)
{
	(void)tt;
}

/* Data arrived for the exchange. */
static void
target_read_cb(struct stream *s, void *arg)
{
	struct tun_target *tt = arg;

	(void)s;
	if (tt->tt_state == TT_S_BUSY && tt->tt_x != NULL)
		xchg_target_readable(tt->tt_x);
}

/* The output drained below TUN_TARGET_WRITE_LOWAT. */
static void
target_write_cb(struct stream *s, void *arg)
{
	struct tun_target *tt = arg;

	(void)s;
	if (tt->tt_state == TT_S_BUSY && tt->tt_x != NULL)
		xchg_target_writable(tt->tt_x);
}

/*
 * The TLS part of why a connect or TLS handshake on ssl to who failed,
 * given e, the oldest OpenSSL error: the certificate check or the TLS
 * error, with not_tls appended in brackets when the peer does not speak
 * TLS at all.  NULL when TLS is not to blame (a socket error).  The
 * caller frees.
 */
char *
tun_tls_describe(
    SSL *ssl, unsigned long e, const char *who, const char *not_tls)
{
	char buf[256], *s = NULL;
	const char *v;
	int kind;

	if ((v = tls_verify_error(ssl)) != NULL && strcmp(v, "ok") != 0)
		xasprintf(&s, "TLS certificate verification of %s failed: %s",
		    who, v);
	else if (e != 0 && (kind = tls_error_kind(e)) != TLS_ERR_SYSCALL) {
		tls_error_string(e, buf, sizeof buf);
		xasprintf(&s, "TLS handshake with %s failed: %s%s%s%s", who,
		    buf, kind == TLS_ERR_NOT_TLS ? " (" : "",
		    kind == TLS_ERR_NOT_TLS ? not_tls : "",
		    kind == TLS_ERR_NOT_TLS ? ")" : "");
	}
	return (s);
}

/*
 * The sentence for a failed connect or TLS handshake to who ("the target
 * host:port"), for the sandbox's caller: a timeout, tls (the TLS
 * sentence, taken over; NULL when TLS is not to blame), or the socket
 * error err.  The caller frees the sentence.
 */
char *
tun_connect_error(int timeout, char *tls, int err, const char *who)
{
	char *s;

	if (timeout) {
		free(tls);
		xasprintf(&s, "timed out connecting to %s", who);
	} else if (tls != NULL)
		s = tls;
	else if (err != 0)
		xasprintf(&s, "cannot connect to %s: %s", who,
		    evutil_socket_error_to_string(err));
	else
		xasprintf(&s, "cannot connect to %s: connection closed", who);
	return (s);
}

/*
 * tun_tls_describe for stream s, which failed (what, its event) while
 * connecting or in the TLS handshake: NULL for a plain stream or a
 * timeout.
 */
char *
tun_stream_tls_error(
    struct stream *s, short what, const char *who, const char *not_tls)
{
	if (stream_ssl(s) == NULL || (what & STREAM_EV_TIMEOUT))
		return (NULL);
	return (tun_tls_describe(
	    stream_ssl(s), stream_tls_error(s), who, not_tls));
}

/*
 * Describe a failed connect or TLS handshake to who (see
 * tun_connect_error): what stream s's event said, or with s NULL the
 * errno err of a connect that could not start.
 */
char *
tun_stream_error(struct stream *s, short what, int err, const char *who)
{
	char *tls = NULL;

	if (s != NULL) {
		err = stream_errno(s);
		tls = tun_stream_tls_error(s, what, who, target_not_tls);
	}
	return (tun_connect_error(
	    (what & STREAM_EV_TIMEOUT) != 0, tls, err, who));
}

/*
 * Describe a failed connect or TLS handshake to the target: what the
 * stream's event said, or with s NULL the errno err of a connect that
 * could not start.
 */
static char *
target_stream_error(
    struct tun_target *tt, struct stream *s, short what, int err)
{
	const struct tun_url *u = &tt->tt_tun->t_opts->target;
	char *hp, *who, *msg;

	hp = tun_host_port(u->u_host, u->u_port, -1);
	xasprintf(&who, "the target %s", hp);
	msg = tun_stream_error(s, what, err, who);
	free(who);
	free(hp);
	return (msg);
}

/*
 * Tell the person running aktunnel that the target cannot be reached (the
 * caller in the sandbox gets 502 with the same sentence): a warning, but
 * the same sentence at most once per TARGET_WARN_MS.  With -v the failed
 * request's own line says it, so this one is only for debugging.
 */
static void
target_warn(struct tun *t, const char *why)
{
	uint64_t now = clock_mono_msec();

	if (t->t_opts->verbose) {
		log_debug("%s", why);
		return;
	}

	if (t->t_target_warn != NULL && strcmp(t->t_target_warn, why) == 0 &&
	    now - t->t_target_warn_at < TARGET_WARN_MS)
		return;
	free(t->t_target_warn);
	t->t_target_warn = xstrdup(why);
	t->t_target_warn_at = now;
	log_warn("%s", why);
}

/* Connect, TLS, end of stream, error or timeout on a target connection. */
static void
target_event_cb(struct stream *s, short what, void *arg)
{
	struct tun_target *tt = arg;
	struct tun_xchg *x = tt->tt_x;
	char why[256];

	if (what & STREAM_EV_CONNECTED) {
		if (tt->tt_state != TT_S_CONNECTING)
			return;
		/* stream_connect set TCP_NODELAY. */
		tt->tt_state = TT_S_BUSY;
		/* An h2 probe ends with the server's SETTINGS (target_h2.c). */
		if (stream_ssl(s) != NULL && tt->tt_tun->t_opts->target_http2 &&
		    tls_alpn_is(stream_ssl(s), "h2")) {
			tt->tt_tun->t_target_proto = TUN_PROTO_H2;
			target_h2_adopt(tt);
			return;
		}
		if (tt->tt_tun->t_probe == tt)
			tt->tt_tun->t_probe = NULL;
		tt->tt_tun->t_target_proto = TUN_PROTO_H1;
		target_probe_done(tt->tt_tun, NULL);
		stream_enable(tt->tt_s, EV_READ);
		if (x != NULL)
			xchg_target_ready(x);
		else
			target_release(tt, 1);
		return;
	}
	if (tt->tt_state == TT_S_CONNECTING) {
		free(tt->tt_error);
		tt->tt_error = target_stream_error(tt, s, what, 0);
		target_warn(tt->tt_tun, tt->tt_error);
		stream_free(tt->tt_s);
		tt->tt_s = NULL;
		target_connect_next(tt);
		return;
	}
	if (tt->tt_state == TT_S_IDLE) {
		target_close(tt, "closed while idle");
		return;
	}
	if (tt->tt_state != TT_S_BUSY || x == NULL)
		return;
	if (what & STREAM_EV_EOF) {
		tt->tt_flags |= TT_F_EOF;
		stream_disable(tt->tt_s, EV_READ);
		xchg_target_readable(x);
		return;
	}
	if (what & STREAM_EV_TIMEOUT)
		snprintf(why, sizeof why,
		    "timed out waiting for the target (%g s)",
		    tt->tt_tun->t_opts->http_timeout);
	else
		snprintf(why, sizeof why, "target connection failed: %s",
		    evutil_socket_error_to_string(stream_errno(s)));
	xchg_target_failed(x, why);
}

/* Idle expiry, or a deferred "ready" for a reused connection. */
static void
target_ev_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_target *tt = arg;

	(void)fd;
	(void)what;
	if (tt->tt_state == TT_S_IDLE)
		target_close(tt, "idle timeout");
	else if (tt->tt_state == TT_S_BUSY && tt->tt_x != NULL)
		xchg_target_ready(tt->tt_x);
}

/* Data or EOF on an idle connection: it cannot be reused. */
static void
target_idle_read_cb(struct stream *s, void *arg)
{
	(void)s;
	target_close(arg, "unexpected data while idle");
}

/* Dial the next address of the target, or fail the exchange. */
static void
target_connect_next(struct tun_target *tt)
{
	struct tun *t = tt->tt_tun;
	struct sockaddr_storage *ss;
	struct tun_xchg *x;
	const char *why;
	char *cause = NULL;
	SSL *ssl = NULL;

	for (;;) {
		if (tt->tt_next >= tt->tt_naddrs) {
			x = tt->tt_x;
			why = tt->tt_error != NULL
			    ? tt->tt_error
			    : "cannot connect to the target";
			/* Those waiting to learn the protocol fail alike. */
			if (t->t_probe == tt) {
				t->t_probe = NULL;
				target_probe_done(t, why);
			}
			if (x != NULL)
				xchg_target_failed(x, why);
			target_close(tt, "no address left");
			return;
		}
		ss = &tt->tt_addrs[tt->tt_next++];
		if (t->t_target_tls != NULL) {
			ssl = tls_client_ssl_new(
			    t->t_target_tls, t->t_opts->target.u_host, &cause);
			if (ssl == NULL) {
				free(tt->tt_error);
				tt->tt_error = cause;
				tt->tt_next = tt->tt_naddrs;
				continue;
			}
			/* Only this pool offers h2: never a WebSocket's dial. */
			if (t->t_opts->target_http2
				? tls_client_set_alpn(ssl, target_alpn_h2, 2)
				: tls_client_set_alpn(ssl, target_alpn_h1, 1)) {
				tls_ssl_free(ssl);
				free(tt->tt_error);
				tt->tt_error = xstrdup(
				    "cannot set ALPN protocols");
				tt->tt_next = tt->tt_naddrs;
				continue;
			}
		}
		tt->tt_s = stream_new(t->t_base, -1, ssl, 0);
		stream_setcb(tt->tt_s, target_read_cb, target_write_cb,
		    target_event_cb, tt);
		stream_setwatermark(
		    tt->tt_s, EV_READ, 0, TUN_TARGET_READ_HIWAT);
		stream_setwatermark(
		    tt->tt_s, EV_WRITE, TUN_TARGET_WRITE_LOWAT, 0);
		target_touch(tt);
		if (stream_connect(tt->tt_s, (struct sockaddr *)ss,
			ss->ss_family == AF_INET6
			    ? sizeof(struct sockaddr_in6)
			    : sizeof(struct sockaddr_in)) == 0)
			return;
		free(tt->tt_error);
		tt->tt_error = target_stream_error(tt, NULL, 0, errno);
		stream_free(tt->tt_s);
		tt->tt_s = NULL;
	}
}

/* The target's addresses are known (or not). */
static void
target_resolved_cb(
    const struct sockaddr_storage *addrs, size_t n, const char *err, void *arg)
{
	struct tun_target *tt = arg;

	tt->tt_query = NULL;
	if (err != NULL) {
		free(tt->tt_error);
		xasprintf(&tt->tt_error, "target %s", err);
		tt->tt_naddrs = 0;
	} else {
		memcpy(tt->tt_addrs, addrs, n * sizeof *addrs);
		tt->tt_naddrs = n;
	}
	tt->tt_state = TT_S_CONNECTING;
	target_connect_next(tt);
}

/*
 * A new struct tun_target for x, counted in the pool: a connection about
 * to dial, or (target_h2.c) a stream.
 */
struct tun_target *
target_new(struct tun *t, struct tun_xchg *x)
{
	struct tun_target *tt;

	tt = xcalloc(1, sizeof *tt);
	tt->tt_tun = t;
	tt->tt_state = TT_S_RESOLVING;
	tt->tt_x = x;
	if ((tt->tt_ev = event_new(t->t_base, -1, 0, target_ev_cb, tt)) == NULL)
		abort();
	TAILQ_INSERT_TAIL(&t->t_targets, tt, tt_entry);
	t->t_ntargets++;
	x->x_tt = tt;
	x->x_flags &= ~TX_F_REUSED;
	return (tt);
}

/* "Ready" for tt's exchange, from the loop. */
void
target_ready_later(struct tun_target *tt)
{
	event_active(tt->tt_ev, EV_TIMEOUT, 0);
}

/* Open a new connection for x. */
static void
target_open(struct tun *t, struct tun_xchg *x)
{
	struct tun_target *tt;

	tt = target_new(t, x);
	/* While nobody knows whether the target has h2, this dial finds out. */
	if (t->t_target_tls != NULL && t->t_opts->target_http2 &&
	    t->t_target_proto != TUN_PROTO_H1 && t->t_probe == NULL)
		t->t_probe = tt;
	tt->tt_query = dns_lookup(t->t_dns, t->t_opts->target.u_host,
	    t->t_opts->target.u_port, target_resolved_cb, tt);
}

/* Give connection tt (idle or just released) to x. */
static void
target_assign(struct tun_target *tt, struct tun_xchg *x)
{
	tt->tt_state = TT_S_BUSY;
	tt->tt_x = x;
	tt->tt_flags = 0;
	x->x_tt = tt;
	x->x_flags |= TX_F_REUSED;
	stream_setcb(
	    tt->tt_s, target_read_cb, target_write_cb, target_event_cb, tt);
	stream_enable(tt->tt_s, EV_READ | EV_WRITE);
	target_touch(tt);
	evtimer_del(tt->tt_ev);
	/* "Ready" comes from the loop, as for a new connection. */
	target_ready_later(tt);
}

/*
 * Find x a connection: a stream on an HTTP/2 connection with room, a place
 * behind the dial that learns whether the target has h2, an idle
 * connection, a new one while fewer than --target-connections exist (an
 * HTTP/2 stream counts as one), or else a place in the queue (§6.4). x
 * learns of it through xchg_target_ready, from the loop.
 */
void
target_acquire(struct tun *t, struct tun_xchg *x)
{
	struct tun_target *tt;
	struct tun_h2 *h;

	if (t->t_ntargets < t->t_opts->target_connections &&
	    (h = target_h2_room(t)) != NULL) {
		target_h2_attach(h, x);
		return;
	}
	if (t->t_probe != NULL) {
		x->x_flags |= TX_F_PROBEQ;
		TAILQ_INSERT_TAIL(&t->t_probeq, x, x_wait);
		return;
	}
	if ((tt = TAILQ_FIRST(&t->t_idle)) != NULL) {
		TAILQ_REMOVE(&t->t_idle, tt, tt_idle_entry);
		t->t_nidle--;
		target_assign(tt, x);
		return;
	}
	if (t->t_ntargets < t->t_opts->target_connections) {
		target_open(t, x);
		return;
	}
	x->x_flags |= TX_F_POOLQ;
	TAILQ_INSERT_TAIL(&t->t_waiting, x, x_wait);
}

/*
 * The dial that was to say whether the target has h2 ended: with why, it
 * failed and the exchanges waiting for it fail with the same sentence;
 * without, they look for a connection again.
 */
void
target_probe_done(struct tun *t, const char *why)
{
	struct tun_xchg_list q;
	struct tun_xchg *x;
	char *copy;

	if (TAILQ_EMPTY(&t->t_probeq))
		return;
	TAILQ_INIT(&q);
	TAILQ_CONCAT(&q, &t->t_probeq, x_wait);
	copy = why != NULL ? xstrdup(why) : NULL;
	while ((x = TAILQ_FIRST(&q)) != NULL) {
		TAILQ_REMOVE(&q, x, x_wait);
		x->x_flags &= ~TX_F_PROBEQ;
		if (copy != NULL)
			xchg_target_failed(x, copy);
		else
			target_acquire(t, x);
	}
	free(copy);
}

/* Serve the queue: open connections while there is room. */
static void
target_dispatch(struct tun *t)
{
	struct tun_xchg *x;

	while (t->t_ntargets < t->t_opts->target_connections &&
	    (x = TAILQ_FIRST(&t->t_waiting)) != NULL) {
		TAILQ_REMOVE(&t->t_waiting, x, x_wait);
		x->x_flags &= ~TX_F_POOLQ;
		target_acquire(t, x);
	}
}

/*
 * The exchange is done with tt. A reusable connection (response complete,
 * nothing unread) goes to the next waiting exchange or into the idle pool;
 * any other is closed.
 */
void
target_release(struct tun_target *tt, int reusable)
{
	struct tun *t = tt->tt_tun;
	struct tun_xchg *x;
	struct timeval tv = { TUN_POOL_IDLE_TIMEOUT, 0 };

	if (tt->tt_state == TT_S_DEAD)
		return;
	if (tt->tt_x != NULL && tt->tt_x->x_tt == tt)
		tt->tt_x->x_tt = NULL;
	tt->tt_x = NULL;
	/* A stream is not reused; its connection stays for others. */
	if (tt->tt_flags & TT_F_H2) {
		target_close(tt, "stream done");
		return;
	}
	if (!reusable || tt->tt_s == NULL || (tt->tt_flags & TT_F_EOF) ||
	    evbuffer_get_length(stream_input(tt->tt_s)) != 0 ||
	    evbuffer_get_length(stream_output(tt->tt_s)) != 0) {
		target_close(tt, "not reusable");
		return;
	}
	tt->tt_uses++;
	if ((x = TAILQ_FIRST(&t->t_waiting)) != NULL) {
		TAILQ_REMOVE(&t->t_waiting, x, x_wait);
		x->x_flags &= ~TX_F_POOLQ;
		target_assign(tt, x);
		return;
	}
	if (t->t_nidle >= t->t_opts->target_connections) {
		target_close(tt, "enough idle connections");
		return;
	}
	tt->tt_state = TT_S_IDLE;
	tt->tt_flags = 0;
	stream_set_timeouts(tt->tt_s, NULL, NULL);
	stream_setcb(tt->tt_s, target_idle_read_cb, NULL, target_event_cb, tt);
	stream_enable(tt->tt_s, EV_READ);
	TAILQ_INSERT_HEAD(&t->t_idle, tt, tt_idle_entry);
	t->t_nidle++;
	evtimer_add(tt->tt_ev, &tv);
}

/* The output buffer of tt, for the exchange to append to. */
struct evbuffer *
target_outbuf(struct tun_target *tt)
{
	if (tt->tt_flags & TT_F_H2)
		return (tt->tt_out);
	target_touch(tt);
	return (stream_output(tt->tt_s));
}

/* Bytes waiting in tt's output. */
size_t
target_output(const struct tun_target *tt)
{
	if (tt->tt_flags & TT_F_H2)
		return (evbuffer_get_length(tt->tt_out));
	return (evbuffer_get_length(stream_output(tt->tt_s)));
}

/* Does tt speak HTTP/2 (no chunked framing of its own then)? */
int
target_is_h2(const struct tun_target *tt)
{
	return ((tt->tt_flags & TT_F_H2) != 0);
}

/*
 * Send the request head (target_request_head's, copied) on tt; body says
 * whether body bytes follow through target_outbuf, ended by
 * target_request_end. Returns -1 with *err when HTTP/2 cannot carry it.
 */
int
target_send_head(
    struct tun_target *tt, struct evbuffer *head, int body, char **err)
{
	size_t len = evbuffer_get_length(head);

	if (tt->tt_flags & TT_F_H2)
		return (target_h2_submit(tt, head, body, err));
	evbuffer_add(target_outbuf(tt), evbuffer_pullup(head, -1), len);
	return (0);
}

/* The whole request body was handed to tt. */
void
target_request_end(struct tun_target *tt)
{
	if (tt->tt_flags & TT_F_H2)
		target_h2_request_end(tt);
}

/*
 * Read the response head, skipping interim 1xx responses (101 is final).
 * Returns 1 with m filled, 0 for more input, -1 with *err set.
 */
int
target_read_head(
    struct tun_target *tt, struct http1_msg *m, int head_req, char **err)
{
	struct http1_limits lim = { TUN_HEAD_MAX, TUN_HEAD_LINE_MAX,
		TUN_HEAD_FIELDS_MAX };
	struct evbuffer *in;
	enum http1_err herr;
	int rv;

	if (tt->tt_flags & TT_F_H2)
		return (target_h2_read_head(tt, m, err));
	in = stream_input(tt->tt_s);
	for (;;) {
		rv = http1_parse_response(in, &lim, head_req, m, &herr);
		if (rv < 0) {
			xasprintf(err, "malformed response from the target: %s",
			    http1_err_message(herr));
			return (-1);
		}
		if (rv == 0) {
			if (tt->tt_flags & TT_F_EOF) {
				xasprintf(err,
				    "the target closed the connection "
				    "without a complete response");
				return (-1);
			}
			return (0);
		}
		if (m->m_status >= 100 && m->m_status < 200 &&
		    m->m_status != 101) {
			http1_msg_reset(m);
			continue;
		}
		break;
	}
	tt->tt_framing = m->m_status == 101 ? HTTP1_BODY_NONE : m->m_body;
	tt->tt_left = m->m_content_length;
	memset(&tt->tt_ck, 0, sizeof tt->tt_ck);
	tt->tt_flags |= TT_F_BODY;
	return (1);
}

/*
 * Are fewer than want body bytes buffered, with more to come?  Then a read
 * now makes a small frame, and every frame costs a credit whatever its
 * size.
 */
int
target_body_short(struct tun_target *tt, size_t want)
{
	size_t avail;

	if (tt->tt_flags & TT_F_H2)
		return (target_h2_body_short(tt, want));
	avail = evbuffer_get_length(stream_input(tt->tt_s));
	if ((tt->tt_flags & (TT_F_BODY_DONE | TT_F_EOF)) || avail >= want)
		return (0);
	switch (tt->tt_framing) {
	case HTTP1_BODY_LENGTH:
		return (avail < tt->tt_left);
	case HTTP1_BODY_CHUNKED:
	case HTTP1_BODY_EOF:
		return (1);
	default:
		return (0);
	}
}

/*
 * Move at most max decoded body bytes to out (*moved says how many).
 * Returns 1 once the body is complete, 0 when more input is needed, -1
 * with *err when the target broke the framing or closed too early.
 */
int
target_read_body(struct tun_target *tt, struct evbuffer *out, size_t max,
    size_t *moved, char **err)
{
	struct evbuffer *in;
	enum http1_err herr;
	size_t n, avail;
	int rv, eof = (tt->tt_flags & TT_F_EOF) != 0;

	if (tt->tt_flags & TT_F_H2)
		return (target_h2_read_body(tt, out, max, moved, err));
	in = stream_input(tt->tt_s);
	avail = evbuffer_get_length(in);
	*moved = 0;
	if (tt->tt_flags & TT_F_BODY_DONE)
		return (1);
	switch (tt->tt_framing) {
	case HTTP1_BODY_NONE:
		rv = 1;
		break;
	case HTTP1_BODY_LENGTH:
		n = avail < max ? avail : max;
		if (n > tt->tt_left)
			n = (size_t)tt->tt_left;
		if (n != 0)
			evb_take(in, out, n);
		*moved = n;
		tt->tt_left -= n;
		rv = tt->tt_left == 0;
		if (!rv && eof && evbuffer_get_length(in) == 0) {
			xasprintf(err,
			    "the target closed the connection with %llu "
			    "body bytes missing",
			    (unsigned long long)tt->tt_left);
			return (-1);
		}
		break;
	case HTTP1_BODY_CHUNKED:
		rv = http1_chunked_decode(
		    &tt->tt_ck, in, out, max, moved, &herr);
		if (rv < 0) {
			xasprintf(err,
			    "malformed chunked body from the "
			    "target: %s",
			    http1_err_message(herr));
			return (-1);
		}
		if (rv == 0 && eof && *moved == 0 &&
		    evbuffer_get_length(in) == 0) {
			xasprintf(err,
			    "the target closed the connection in the middle "
			    "of a chunked body");
			return (-1);
		}
		break;
	default: /* HTTP1_BODY_EOF */
		n = avail < max ? avail : max;
		if (n != 0)
			evb_take(in, out, n);
		*moved = n;
		rv = eof && evbuffer_get_length(in) == 0;
		break;
	}
	if (rv == 1)
		tt->tt_flags |= TT_F_BODY_DONE;
	return (rv);
}

/* Does tt's response allow keeping the connection (HTTP/1.1, no close)? */
int
target_keepalive(const struct tun_target *tt, const struct http1_msg *m)
{
	if (tt->tt_flags & TT_F_H2)
		return (1);
	if (tt->tt_framing == HTTP1_BODY_EOF || m->m_status == 101)
		return (0);
	if (m->m_flags & HTTP1_F_CONN_CLOSE)
		return (0);
	if (m->m_minor == 0 && !(m->m_flags & HTTP1_F_CONN_KEEPALIVE))
		return (0);
	return (1);
}

/* Close every target connection now; only outside the loop's callbacks. */
void
target_free_all(struct tun *t)
{
	struct tun_target *tt;
	struct tun_xchg *x;

	while ((x = TAILQ_FIRST(&t->t_waiting)) != NULL) {
		TAILQ_REMOVE(&t->t_waiting, x, x_wait);
		x->x_flags &= ~TX_F_POOLQ;
	}
	while ((x = TAILQ_FIRST(&t->t_probeq)) != NULL) {
		TAILQ_REMOVE(&t->t_probeq, x, x_wait);
		x->x_flags &= ~TX_F_PROBEQ;
	}
	t->t_probe = NULL;
	while ((tt = TAILQ_FIRST(&t->t_targets)) != NULL) {
		if (tt->tt_state == TT_S_IDLE) {
			TAILQ_REMOVE(&t->t_idle, tt, tt_idle_entry);
			t->t_nidle--;
		}
		tt->tt_state = TT_S_DEAD;
		if (tt->tt_query != NULL)
			dns_cancel(tt->tt_query);
		stream_free(tt->tt_s);
		TAILQ_REMOVE(&t->t_targets, tt, tt_entry);
		t->t_ntargets--;
		target_free_cb(-1, 0, tt);
	}
	target_h2_free_all(t);
}
