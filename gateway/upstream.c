/*
 * Connections to sandbox ports, and the pool of idle keep-alive ones.  A
 * pooled connection is keyed by the sandbox version it was made for and
 * the port it reaches, so a connection is never reused for another
 * sandbox even when two sandboxes share an address.  An upstream tells
 * its owner what happens through a struct upstream_owner and never looks
 * into it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "gw.h"
#include "netns.h"
#include "splicer.h"
#include "stream.h"

/* Connection attempts before a port counts as not listening. */
#define UP_ATTEMPTS 5
/* Most body bytes handed to the owner at once, so one cannot starve others. */
#define UP_STEP (256 * 1024)
/* Interim (1xx) responses read for one request, at most. */
#define UP_INTERIM_MAX 1024
#define UP_INTERIM_BYTES (1024 * 1024)

static void upstream_connect(struct upstream *);
static void upstream_connect_error(struct upstream *, int);
static void upstream_idle_read_cb(struct stream *, void *);
static void upstream_idle_event_cb(struct stream *, short, void *);
static void upstream_event_cb(struct stream *, short, void *);

/* The name of an upstream state, for logs. */
const char *
upstream_state_name(enum upstream_state s)
{
	switch (s) {
	case UP_S_CONNECTING:
		return ("connecting");
	case UP_S_ACTIVE:
		return ("active");
	case UP_S_IDLE:
		return ("idle");
	case UP_S_DEAD:
		return ("dead");
	}
	return ("?");
}

/* Print up's state and flags into buf, for debug logs. */
void
upstream_print(const struct upstream *up, char *buf, size_t len)
{
	snprintf(buf, len,
	    "upstream %s state=%s flags=%s%s%s%s%s attempt=%d "
	    "owner=%s",
	    up->u_key, upstream_state_name(up->u_state),
	    (up->u_flags & UP_F_SENT) ? "S" : "-",
	    (up->u_flags & UP_F_REUSED) ? "R" : "-",
	    (up->u_flags & UP_F_NO_REUSE) ? "N" : "-",
	    (up->u_flags & UP_F_GOT_BYTES) ? "B" : "-",
	    (up->u_flags & UP_F_NETNS_ERR) ? "E" : "-", up->u_attempt,
	    up->u_owner != NULL ? "yes" : "none");
}

/* Tell up's owner it has lost up, once, and forget the owner. */
static void
upstream_detach(struct upstream *up)
{
	const struct upstream_owner *o = up->u_owner;
	void *arg = up->u_owner_arg;

	up->u_owner = NULL;
	up->u_owner_arg = NULL;
	if (o != NULL && o->uo_detach != NULL)
		o->uo_detach(up, arg);
}

/* Tell up's owner that connecting failed for good. */
static void
upstream_failed(struct upstream *up, const struct gw_error *e, const char *why)
{
	const struct upstream_owner *o = up->u_owner;
	void *arg = up->u_owner_arg;

	if (o != NULL && o->uo_failed != NULL)
		o->uo_failed(up, e, why, arg);
	else
		upstream_close(up, why);
}

static int upstream_read_event(struct upstream *, short);
static void upstream_write_cb(struct stream *, void *);

/* Forget the response read, if any. */
static void
upstream_resp_free(struct upstream *up)
{
	struct upstream_resp *r = up->u_r;

	if (r == NULL)
		return;
	http1_msg_reset(&r->r_resp);
	http1_trailers_reset(&r->r_trailers);
	free(r);
	up->u_r = NULL;
}

/* Free an upstream; only from outside its own callbacks' use of it. */
static void
upstream_free(struct upstream *up)
{
	if (up->u_h2s != NULL)
		upstream_h2_stream_free(up);
	splicer_free(up->u_spl);
	if (up->u_chunks != NULL)
		evbuffer_free(up->u_chunks);
	stream_free(up->u_stream);
	if (up->u_timer != NULL)
		event_free(up->u_timer);
	upstream_resp_free(up);
	sandbox_unref(up->u_sandbox);
	free(up->u_key);
	free(up);
}

/* Deferred free, run from the event loop. */
static void
upstream_free_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd;
	(void)events;
	upstream_free(arg);
}

/* Close an upstream connection, logging why; it is freed from the loop. */
void
upstream_close(struct upstream *up, const char *reason)
{
	struct timeval tv = { 0, 0 };

	if (up->u_state == UP_S_DEAD)
		return;
	log_debug("upstream %s closed: %s", up->u_key, reason);
	if (up->u_state == UP_S_IDLE) {
		upstream_pool_del(&up->u_gw->g_pool, up);
		GW_ADD(up->u_gw->g_metrics.m_upstream_idle, -1);
	}
	up->u_state = UP_S_DEAD;
	/* No splice(2) may outlive the descriptor it moves bytes to. */
	splicer_free(up->u_spl);
	up->u_spl = NULL;
	upstream_detach(up);
	if (up->u_flags & UP_F_H2)
		upstream_h2_stream_close(up);
	if (up->u_stream != NULL)
		stream_disable(up->u_stream, EV_READ | EV_WRITE);
	if (up->u_timer != NULL)
		event_del(up->u_timer);
	event_base_once(
	    up->u_gw->g_base, -1, EV_TIMEOUT, upstream_free_cb, up, &tv);
}

/* The retry or idle timer fired. */
static void
upstream_timer_cb(evutil_socket_t fd, short events, void *arg)
{
	struct upstream *up = arg;

	(void)fd;
	(void)events;
	if (up->u_state == UP_S_DEAD)
		return;
	if (up->u_state == UP_S_IDLE) {
		upstream_close(up, "idle timeout");
		return;
	}
	if (up->u_state == UP_S_CONNECTING)
		upstream_connect(up);
	else if (up->u_owner != NULL && up->u_owner->uo_timeout != NULL)
		up->u_owner->uo_timeout(up, up->u_owner_arg);
}

/*
 * A connection attempt failed: retry after 100, 200, 400, 400 ms to ride
 * over a port that is just starting, then give up.
 */
static void
upstream_attempt_failed(struct upstream *up, const char *why)
{
	struct timeval tv;
	uint64_t delay;

	stream_free(up->u_stream);
	up->u_stream = NULL;
	GW_ADD(up->u_gw->g_metrics.m_upstream_connect_failures, 1);
	if (up->u_attempt >= UP_ATTEMPTS) {
		upstream_failed(up,
		    (up->u_flags & UP_F_NETNS_ERR) ? gw_err_sandbox_unreachable
						   : gw_err_port_not_listening,
		    why);
		return;
	}
	delay = 100u << (up->u_attempt - 1);
	if (delay > 400)
		delay = 400;
	log_debug("upstream %s: attempt %d failed (%s), retry in %llums",
	    up->u_key, up->u_attempt, why, (unsigned long long)delay);
	GW_ADD(up->u_gw->g_metrics.m_upstream_retries, 1);
	clock_msec_to_tv(delay, &tv);
	evtimer_add(up->u_timer, &tv);
}

/*
 * A connection attempt failed with errno err.  No route, or a host that
 * does not answer, fails at once: retrying would only make the client wait
 * longer for the same answer.  Anything else (refused) is retried.
 */
static void
upstream_connect_error(struct upstream *up, int err)
{
	char why[128];

	snprintf(why, sizeof why, "%s", strerror(err));
	if (err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN ||
	    err == ENETDOWN) {
		GW_ADD(up->u_gw->g_metrics.m_upstream_connect_failures, 1);
		upstream_failed(up, gw_err_upstream_unreachable, why);
		return;
	}
	upstream_attempt_failed(up, why);
}

/*
 * The address up connects to: its sandbox's with its port (kept there,
 * not in each connection).  ss_family is AF_UNSPEC without a sandbox.
 */
static socklen_t
upstream_addr(const struct upstream *up, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (up->u_sandbox == NULL)
		return (0);
	memcpy(ss, &up->u_sandbox->sb_addr, up->u_sandbox->sb_addrlen);
	addr_set_port(ss, up->u_port);
	return (up->u_sandbox->sb_addrlen);
}

/* Print the address up connects to (ip:port), for the log. */
void
upstream_addr_format(const struct upstream *up, char *buf, size_t len)
{
	struct sockaddr_storage ss;

	(void)upstream_addr(up, &ss);
	addr_format((struct sockaddr *)&ss, buf, len);
}

/* Start a connection attempt; runs from the timer, never from the caller. */
static void
upstream_connect(struct upstream *up)
{
	struct gw *g = up->u_gw;
	struct sockaddr_storage ss;
	struct timeval tv;
	socklen_t sslen;
	int fd = -1;
	char *cause;

	up->u_attempt++;
	sslen = upstream_addr(up, &ss);
	if (up->u_sandbox->sb_netns != NULL) {
		fd = netns_socket(up->u_sandbox->sb_netns, ss.ss_family,
		    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, &cause);
		if (fd == -1) {
			log_warn("upstream %s: %s", up->u_key, cause);
			free(cause);
			up->u_flags |= UP_F_NETNS_ERR;
			upstream_attempt_failed(up,
			    "its network namespace "
			    "cannot be entered");
			return;
		}
		up->u_flags &= ~UP_F_NETNS_ERR;
	}
	up->u_stream = stream_new(g->g_base, -1, NULL, 0);
	stream_setcb(up->u_stream, NULL, NULL, upstream_event_cb, up);
	clock_msec_to_tv(g->g_conf->cf_connect_timeout, &tv);
	stream_set_timeouts(up->u_stream, NULL, &tv);
	/*
	 * A connect that fails at once (ENETUNREACH) is told from the loop,
	 * as one that fails later; only a socket that cannot be made fails
	 * here.
	 */
	if ((fd != -1 ? stream_connect_fd(
			    up->u_stream, fd, (struct sockaddr *)&ss, sslen)
		      : stream_connect(up->u_stream, (struct sockaddr *)&ss,
			    sslen)) != 0) {
		upstream_attempt_failed(up, strerror(errno));
		return;
	}
}

/* Connection events while connecting or active. */
static void
upstream_event_cb(struct stream *s, short what, void *arg)
{
	struct upstream *up = arg;
	int err = stream_errno(s);

	if (up->u_state == UP_S_DEAD)
		return;
	if (up->u_state != UP_S_CONNECTING) {
		if (up->u_state == UP_S_ACTIVE &&
		    (up->u_flags & UP_F_READING) &&
		    upstream_read_event(up, what))
			return;
		if (up->u_owner != NULL && up->u_owner->uo_event != NULL)
			up->u_owner->uo_event(up, what, up->u_owner_arg);
		else
			upstream_close(up, "event without an owner");
		return;
	}
	if (what & STREAM_EV_CONNECTED) {
		up->u_state = UP_S_ACTIVE;
		stream_set_timeouts(up->u_stream, NULL, NULL);
		if (up->u_owner != NULL && up->u_owner->uo_ready != NULL)
			up->u_owner->uo_ready(up, up->u_owner_arg);
		else
			upstream_close(up, "connected without an owner");
		return;
	}
	/* The SYN was never answered: the address is as good as unroutable. */
	if (what & STREAM_EV_TIMEOUT) {
		upstream_failed(
		    up, gw_err_upstream_unreachable, UPSTREAM_WHY_TIMEOUT);
		return;
	}
	upstream_connect_error(up, err);
}

/* The bucket of the pool for identity (sb, port). */
struct upstream_list *
upstream_pool_bucket(
    const struct upstream_pool *p, const struct gw_sandbox *sb, int port)
{
	uint64_t h;

	/* splitmix64's finaliser: generations are ours, not a client's. */
	h = sb->sb_generation * 0x9e3779b97f4a7c15ULL + (uint64_t)port;
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
	h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return (&p->p_buckets[h & p->p_mask]);
}

/* Empty pool for g, before its first use. */
void
upstream_pool_init(struct gw *g)
{
	struct upstream_pool *p = &g->g_pool;

	memset(p, 0, sizeof *p);
	TAILQ_INIT(&p->p_idle);
	p = &g->g_h2pool;
	memset(p, 0, sizeof *p);
	TAILQ_INIT(&p->p_idle);
	TAILQ_INIT(&g->g_h2all);
}

/*
 * Rehash p into 2^bits buckets: it keeps at least one bucket per two
 * idle connections, so a lookup looks at very few.
 */
static void
upstream_pool_rehash(struct upstream_pool *p, size_t nbuckets)
{
	struct upstream *up;
	size_t i;

	free(p->p_buckets);
	p->p_buckets = xcalloc(nbuckets, sizeof *p->p_buckets);
	p->p_mask = nbuckets - 1;
	for (i = 0; i < nbuckets; i++)
		TAILQ_INIT(&p->p_buckets[i]);
	TAILQ_FOREACH (up, &p->p_idle, u_entry)
		TAILQ_INSERT_TAIL(
		    upstream_pool_bucket(p, up->u_sandbox, up->u_port), up,
		    u_hentry);
}

/* Put up in p, newest first. */
void
upstream_pool_add(struct upstream_pool *p, struct upstream *up)
{
	TAILQ_INSERT_HEAD(&p->p_idle, up, u_entry);
	p->p_count++;
	if (p->p_buckets == NULL || p->p_count > (p->p_mask + 1) * 2) {
		upstream_pool_rehash(
		    p, p->p_buckets == NULL ? 16 : (p->p_mask + 1) * 4);
		return;
	}
	TAILQ_INSERT_HEAD(
	    upstream_pool_bucket(p, up->u_sandbox, up->u_port), up, u_hentry);
}

/* Take up out of p. */
void
upstream_pool_del(struct upstream_pool *p, struct upstream *up)
{
	TAILQ_REMOVE(&p->p_idle, up, u_entry);
	TAILQ_REMOVE(
	    upstream_pool_bucket(p, up->u_sandbox, up->u_port), up, u_hentry);
	p->p_count--;
}

/*
 * Take a pooled connection to port of sandbox sb, or NULL.  The identity
 * is the sandbox version itself (a pooled connection holds a reference,
 * so the pointer cannot be reused) and the port: a connection never
 * serves another sandbox, version, namespace or address.  The newest
 * is taken: it is the least likely to have been closed by the server.
 */
static struct upstream *
upstream_pool_take(struct gw *g, const struct gw_sandbox *sb, int port)
{
	struct upstream_pool *p = &g->g_pool;
	struct upstream *up;

	if (p->p_count == 0)
		return (NULL);
	TAILQ_FOREACH (up, upstream_pool_bucket(p, sb, port), u_hentry) {
		if (up->u_sandbox != sb || up->u_port != port)
			continue;
		upstream_pool_del(p, up);
		GW_ADD(g->g_metrics.m_upstream_idle, -1);
		event_del(up->u_timer);
		up->u_state = UP_S_ACTIVE;
		up->u_flags = UP_F_REUSED;
		return (up);
	}
	return (NULL);
}

/*
 * An upstream connection to port on sandbox sb for an owner: a pooled
 * one, already UP_S_ACTIVE, or a new one in UP_S_CONNECTING that will
 * call the owner's uo_ready or uo_failed.
 */
struct upstream *
upstream_get(struct gw *g, struct gw_sandbox *sb, int port, int fresh,
    const struct upstream_owner *owner, void *arg)
{
	struct upstream *up;
	struct sockaddr_storage ss;
	struct timeval tv;
	char addr[ADDR_STRLEN], *key;

	if (!fresh && (up = upstream_pool_take(g, sb, port)) != NULL) {
		up->u_owner = owner;
		up->u_owner_arg = arg;
		stream_setcb(up->u_stream, NULL, NULL, upstream_event_cb, up);
		return (up);
	}
	memcpy(&ss, &sb->sb_addr, sb->sb_addrlen);
	addr_set_port(&ss, port);
	addr_format((struct sockaddr *)&ss, addr, sizeof addr);
	/* For the log: the full identity. */
	xasprintf(&key, "%s|%llu|%s|%s", sb->sb_id,
	    (unsigned long long)sb->sb_generation,
	    sb->sb_netns != NULL ? sb->sb_netns : "-", addr);
	up = xcalloc(1, sizeof *up);
	up->u_gw = g;
	up->u_key = key;
	up->u_port = port;
	up->u_owner = owner;
	up->u_owner_arg = arg;
	up->u_state = UP_S_CONNECTING;
	up->u_sandbox = sb;
	sandbox_ref(sb);
	up->u_timer = evtimer_new(g->g_base, upstream_timer_cb, up);
	/* Connect from the loop so the caller never sees a callback. */
	tv.tv_sec = tv.tv_usec = 0;
	evtimer_add(up->u_timer, &tv);
	return (up);
}

/* A pooled connection became readable: the server closed it or misbehaved. */
static void
upstream_idle_read_cb(struct stream *s, void *arg)
{
	(void)s;
	upstream_close(arg, "unexpected data on an idle connection");
}

/* A pooled connection had an event: it is gone. */
static void
upstream_idle_event_cb(struct stream *s, short what, void *arg)
{
	(void)s;
	(void)what;
	upstream_close(arg, "closed while idle");
}

/* Done with an exchange: pool the connection if reusable, else close it. */
void
upstream_release(struct upstream *up, int reusable)
{
	struct gw *g = up->u_gw;
	struct upstream_pool *p = &g->g_pool;
	struct timeval tv;

	if (up->u_state != UP_S_ACTIVE)
		return;
	if (up->u_flags & UP_F_H2) {
		/* A stream is not pooled: its connection is, all along. */
		upstream_close(up, "stream done");
		return;
	}
	upstream_detach(up);
	splicer_free(up->u_spl);
	up->u_spl = NULL;
	upstream_resp_free(up);
	if (!reusable || (up->u_flags & UP_F_NO_REUSE) ||
	    g->g_conf->cf_upstream_idle == 0 ||
	    g->g_conf->cf_max_idle_upstreams == 0 ||
	    evbuffer_get_length(stream_input(up->u_stream)) != 0) {
		upstream_close(up, "not reusable");
		return;
	}
	/* At the cap, the oldest idle connection makes room. */
	if (p->p_count >= g->g_conf->cf_max_idle_upstreams) {
		GW_ADD(g->g_metrics.m_upstream_evicted, 1);
		upstream_close(TAILQ_LAST(&p->p_idle, upstream_list),
		    "the pool is full (oldest idle connection closed)");
	}
	up->u_state = UP_S_IDLE;
	up->u_flags = 0;
	stream_setwatermark(up->u_stream, EV_WRITE, 0, 0);
	stream_setcb(up->u_stream, upstream_idle_read_cb, NULL,
	    upstream_idle_event_cb, up);
	stream_set_timeouts(up->u_stream, NULL, NULL);
	stream_enable(up->u_stream, EV_READ);
	clock_msec_to_tv(g->g_conf->cf_upstream_idle, &tv);
	evtimer_add(up->u_timer, &tv);
	upstream_pool_add(p, up);
	GW_ADD(g->g_metrics.m_upstream_idle, 1);
}

/* Close the pooled connections of sandbox id (it was deleted or replaced). */
void
upstream_pool_flush_sandbox(struct gw *g, const char *id)
{
	struct upstream *up, *next;

	for (up = TAILQ_FIRST(&g->g_pool.p_idle); up != NULL; up = next) {
		next = TAILQ_NEXT(up, u_entry);
		if (strcmp(up->u_sandbox->sb_id, id) == 0)
			upstream_close(
			    up, "sandbox removed from the directory");
	}
	upstream_h2_flush(g, id, 0);
}

/*
 * Close the pooled connections whose sandbox the directory no longer has
 * as it was (a worker saw a new directory published).
 */
void
upstream_pool_flush_stale(struct gw *g)
{
	struct upstream *up, *next;

	for (up = TAILQ_FIRST(&g->g_pool.p_idle); up != NULL; up = next) {
		next = TAILQ_NEXT(up, u_entry);
		if (directory_find(g->g_dir, up->u_sandbox->sb_id) !=
		    up->u_sandbox)
			upstream_close(
			    up, "sandbox removed from the directory");
	}
	upstream_h2_flush(g, NULL, 1);
}

/*
 * The "upstream" of a connection a worker hands to the main loop: the
 * worker's end of their socketpair, relayed like an upgraded connection.
 */
struct upstream *
upstream_pipe(struct gw *g, struct gw_sandbox *sb, int fd,
    const struct upstream_owner *owner, void *arg)
{
	struct upstream *up;

	up = xcalloc(1, sizeof *up);
	up->u_gw = g;
	up->u_key = xstrdup("main loop");
	up->u_owner = owner;
	up->u_owner_arg = arg;
	up->u_state = UP_S_ACTIVE;
	up->u_flags = UP_F_NO_REUSE;
	up->u_sandbox = sb;
	sandbox_ref(up->u_sandbox);
	up->u_timer = evtimer_new(g->g_base, upstream_timer_cb, up);
	up->u_stream = stream_new(g->g_base, fd, NULL, STREAM_O_CLOSE);
	stream_enable(up->u_stream, EV_READ | EV_WRITE);
	return (up);
}

/* Close every pooled connection and free the index (shutdown). */
void
upstream_pool_flush(struct gw *g)
{
	struct upstream *up;

	while ((up = TAILQ_FIRST(&g->g_pool.p_idle)) != NULL)
		upstream_close(up, "pool flushed");
	upstream_h2_flush(g, NULL, 0);
	free(g->g_h2pool.p_buckets);
	g->g_h2pool.p_buckets = NULL;
	g->g_h2pool.p_mask = 0;
	free(g->g_pool.p_buckets);
	g->g_pool.p_buckets = NULL;
	g->g_pool.p_mask = 0;
}

/*
 * The response reader: an HTTP/1 response head (after any interim ones),
 * then its body without its framing, told to the owner as uo_interim,
 * uo_head, uo_body and uo_done; uo_error when it cannot be read.
 */

/* Tell the owner the response cannot be read on (e NULL: mid-body). */
static void
upstream_read_error(
    struct upstream *up, const struct gw_error *e, const char *why)
{
	up->u_flags &= ~UP_F_READING;
	up->u_flags |= UP_F_NO_REUSE;
	if (up->u_owner != NULL && up->u_owner->uo_error != NULL)
		up->u_owner->uo_error(up, e, why, up->u_owner_arg);
	else
		upstream_close(up, why);
}

/* The body ended: the owner has all of it, trailer fields first. */
static void
upstream_read_done(struct upstream *up)
{
	struct http1_trailers *t = &up->u_r->r_trailers;

	up->u_flags &= ~UP_F_READING;
	up->u_r->r_body.b_done = 1;
	evtimer_del(up->u_timer);
	if (t->tr_nfields > 0 && up->u_owner != NULL &&
	    up->u_owner->uo_trailers != NULL)
		up->u_owner->uo_trailers(
		    up, t->tr_fields, t->tr_nfields, up->u_owner_arg);
	http1_trailers_reset(t);
	if (up->u_owner != NULL && up->u_owner->uo_done != NULL)
		up->u_owner->uo_done(up, up->u_owner_arg);
}

/*
 * Hand the owner what the input holds of the body, de-framed, in steps,
 * until it is all read, the input is empty or the owner pauses.  Returns
 * -1 when the owner or an error ended the response.
 */
static int
upstream_read_body(struct upstream *up)
{
	struct evbuffer *in = stream_input(up->u_stream);
	struct upstream_resp *resp = up->u_r;
	struct gw_body *b = &resp->r_body;
	enum http1_err err = HTTP1_E_NONE;
	size_t n, moved;
	char why[160];
	int r;

	while (!b->b_done && !(up->u_flags & UP_F_PAUSED)) {
		switch (b->b_kind) {
		case HTTP1_BODY_NONE:
			upstream_read_done(up);
			return (0);
		case HTTP1_BODY_LENGTH:
		case HTTP1_BODY_EOF:
			if (b->b_kind == HTTP1_BODY_LENGTH && b->b_left == 0) {
				upstream_read_done(up);
				return (0);
			}
			n = evbuffer_get_length(in);
			if (b->b_kind == HTTP1_BODY_LENGTH && n > b->b_left)
				n = (size_t)b->b_left;
			if (n > UP_STEP)
				n = UP_STEP;
			if (n == 0) {
				/* The close that ends it came, and all before it. */
				if (up->u_flags & UP_F_EOF)
					upstream_read_done(up);
				return (0);
			}
			if (b->b_kind == HTTP1_BODY_LENGTH)
				b->b_left -= n;
			b->b_total += n;
			if (up->u_owner->uo_body(up, in, n, up->u_owner_arg) !=
				0 ||
			    up->u_r != resp)
				return (-1); /* the owner ended it (released) */
			if (b->b_kind == HTTP1_BODY_LENGTH && b->b_left == 0) {
				upstream_read_done(up);
				return (0);
			}
			break;
		case HTTP1_BODY_CHUNKED:
			if (up->u_chunks == NULL)
				up->u_chunks = evbuffer_new();
			n = evbuffer_get_length(in);
			r = http1_chunked_decode(&b->b_chunked, in,
			    up->u_chunks, UP_STEP, &moved, &err);
			if (r < 0) {
				snprintf(why, sizeof why,
				    "a malformed chunked body: %s",
				    http1_err_message(err));
				upstream_read_error(up, NULL, why);
				return (-1);
			}
			b->b_total += moved;
			if (moved > 0 &&
			    (up->u_owner->uo_body(up, up->u_chunks, moved,
				 up->u_owner_arg) != 0 ||
				up->u_r != resp))
				return (-1); /* the owner ended it (released) */
			if (r == 1) {
				upstream_read_done(up);
				return (0);
			}
			if (evbuffer_get_length(in) == n)
				return (0); /* needs more input */
			break;
		}
	}
	return (0);
}

/*
 * Read response heads: interim ones, then the final one.  Returns -1 when
 * the owner or an error ended the response, 1 when the owner took the
 * socket (101), 0 to go on to the body (or wait for more).
 */
static int
upstream_read_head(struct upstream *up)
{
	struct evbuffer *in = stream_input(up->u_stream);
	struct upstream_resp *resp = up->u_r;
	struct http1_msg *m = &resp->r_resp;
	enum http1_err err = HTTP1_E_NONE;
	struct head h;
	char why[256];
	int r;

	while (!(up->u_flags & UP_F_HEAD_DONE)) {
		if (up->u_flags & UP_F_PAUSED)
			return (0);
		r = http1_parse_response(in, &up->u_gw->g_limits,
		    up->u_flags & UP_F_HEAD_REQ, m, &err);
		if (r == 0)
			return (0);
		if (r < 0) {
			snprintf(why, sizeof why,
			    "Sandbox '%s' port %d sent a malformed response: "
			    "%s",
			    up->u_sandbox->sb_id, up->u_port,
			    http1_err_message(err));
			upstream_read_error(up, gw_err_bad_response, why);
			return (-1);
		}
		up->u_flags |= UP_F_GOT_BYTES;
		if (m->m_status >= 100 && m->m_status < 200 &&
		    m->m_status != 101) {
			up->u_r->r_interim++;
			up->u_r->r_interim_bytes += m->m_head_len;
			if (up->u_r->r_interim > UP_INTERIM_MAX ||
			    up->u_r->r_interim_bytes > UP_INTERIM_BYTES) {
				log_warn(
				    "upstream %s sent %u interim responses "
				    "(%llu bytes) for one request; cut off",
				    up->u_key, up->u_r->r_interim,
				    (unsigned long long)
					up->u_r->r_interim_bytes);
				snprintf(why, sizeof why,
				    "Sandbox '%s' port %d sent more interim "
				    "(1xx) responses than the %d (or %d bytes) "
				    "the gateway relays for one request.",
				    up->u_sandbox->sb_id, up->u_port,
				    UP_INTERIM_MAX, UP_INTERIM_BYTES);
				upstream_read_error(
				    up, gw_err_bad_response, why);
				return (-1);
			}
			http1_msg_head(m, &h);
			if (up->u_owner->uo_interim(up, &h, up->u_owner_arg) !=
				0 ||
			    up->u_r != resp)
				return (-1); /* the owner ended it (released) */
			http1_msg_reset(m);
			continue;
		}
		if (m->m_status != 101 && (m->m_flags & HTTP1_F_TE_OTHER)) {
			snprintf(why, sizeof why,
			    "Sandbox '%s' port %d answered with a transfer "
			    "coding other than chunked.",
			    up->u_sandbox->sb_id, up->u_port);
			upstream_read_error(up, gw_err_bad_response, why);
			return (-1);
		}
		up->u_flags |= UP_F_HEAD_DONE;
		memset(&up->u_r->r_body, 0, sizeof up->u_r->r_body);
		up->u_r->r_body.b_kind = m->m_body;
		up->u_r->r_body.b_left = m->m_content_length;
		/* Kept for the owner, who may pass them on (uo_trailers). */
		http1_trailers_reset(&up->u_r->r_trailers);
		if (m->m_body == HTTP1_BODY_CHUNKED)
			up->u_r->r_body.b_chunked.ck_keep =
			    &up->u_r->r_trailers;
		if (m->m_flags & HTTP1_F_CONN_CLOSE || m->m_minor == 0 ||
		    m->m_body == HTTP1_BODY_EOF)
			up->u_flags |= UP_F_NO_REUSE;
		http1_msg_head(m, &h);
		if ((r = up->u_owner->uo_head(up, &h, up->u_owner_arg)) != 0) {
			if (r > 0)
				up->u_flags &= ~UP_F_READING;
			return (r);
		}
		if (up->u_r != resp)
			return (-1); /* the owner ended it (released) */
	}
	return (0);
}

/* Read what the input holds of the response. */
static void
upstream_read(struct upstream *up)
{
	if (up->u_state != UP_S_ACTIVE || !(up->u_flags & UP_F_READING) ||
	    up->u_owner == NULL || up->u_spl != NULL || up->u_r == NULL)
		return;
	if (upstream_read_head(up) != 0 || !(up->u_flags & UP_F_HEAD_DONE))
		return;
	(void)upstream_read_body(up);
}

/* Response bytes arrived. */
static void
upstream_read_cb(struct stream *s, void *arg)
{
	(void)s;
	upstream_read(arg);
}

/* The request's output drained below its low watermark: tell the owner. */
static void
upstream_write_cb(struct stream *s, void *arg)
{
	struct upstream *up = arg;

	(void)s;
	if (up->u_state == UP_S_ACTIVE && up->u_owner != NULL &&
	    up->u_owner->uo_drained != NULL)
		up->u_owner->uo_drained(up, up->u_owner_arg);
}

/*
 * An end or an error while reading the response: the close that ends a
 * close-delimited body is its end (what is buffered goes first).  Returns
 * 1 when that was it, 0 for the owner's uo_event.
 */
static int
upstream_read_event(struct upstream *up, short what)
{
	if (!(what & STREAM_EV_EOF) || !(up->u_flags & UP_F_HEAD_DONE) ||
	    up->u_r == NULL || up->u_r->r_body.b_kind != HTTP1_BODY_EOF)
		return (0);
	up->u_flags |= UP_F_EOF;
	upstream_read(up);
	return (1);
}

/*
 * The request is written (or being written): read its response from now
 * on, telling the owner.  head_request: the request was HEAD, so the
 * response has no body whatever it says.
 */
void
upstream_read_response(struct upstream *up, int head_request)
{
	up->u_flags &= ~(
	    UP_F_HEAD_DONE | UP_F_PAUSED | UP_F_HEAD_REQ | UP_F_EOF);
	up->u_flags |= UP_F_READING | (head_request ? UP_F_HEAD_REQ : 0);
	if (up->u_flags & UP_F_H2)
		return; /* the stream tells what its session reads */
	if (up->u_r == NULL)
		up->u_r = xcalloc(1, sizeof *up->u_r);
	http1_msg_reset(&up->u_r->r_resp);
	memset(&up->u_r->r_body, 0, sizeof up->u_r->r_body);
	http1_trailers_reset(&up->u_r->r_trailers);
	up->u_spliced = 0;
	stream_setcb(up->u_stream, upstream_read_cb, upstream_write_cb,
	    upstream_event_cb, up);
}

/* The owner cannot take more of the response now: stop reading it. */
void
upstream_read_pause(struct upstream *up)
{
	up->u_flags |= UP_F_PAUSED;
	if (up->u_stream != NULL)
		stream_disable(up->u_stream, EV_READ);
}

/*
 * The owner can take more: read on, handing it what is buffered before
 * this returns (its callbacks run from inside this call).
 */
void
upstream_read_resume(struct upstream *up)
{
	if (up->u_state != UP_S_ACTIVE || !(up->u_flags & UP_F_READING) ||
	    up->u_spl != NULL)
		return;
	if (up->u_flags & UP_F_H2) {
		up->u_flags &= ~UP_F_PAUSED;
		upstream_h2_resume(up);
		return;
	}
	if (up->u_flags & UP_F_PAUSED) {
		up->u_flags &= ~UP_F_PAUSED;
		stream_enable(up->u_stream, EV_READ);
	}
	upstream_read(up);
}

/*
 * The owner took a 101 and relays what follows without HTTP/1 (an RFC
 * 8441 WebSocket): from uo_head, before it returns 0, it asks for the
 * rest of the connection as a body read to the close (uo_body, uo_done
 * at the peer's end).  The connection is never pooled again.
 */
void
upstream_read_raw(struct upstream *up)
{
	up->u_flags |= UP_F_NO_REUSE;
	evtimer_del(up->u_timer);
	if (up->u_r != NULL) {
		up->u_r->r_body.b_kind = HTTP1_BODY_EOF;
		up->u_r->r_body.b_left = 0;
	}
}

/* Bytes of the body reached the owner's socket in the kernel. */
static void
upstream_splice_progress(void *arg, size_t n)
{
	struct upstream *up = arg;

	up->u_r->r_body.b_left -= n;
	up->u_r->r_body.b_total += n;
	up->u_spliced += n;
}

/* The spliced rest of the body ended. */
static void
upstream_splice_done(void *arg, int error)
{
	struct upstream *up = arg;
	char why[160];

	splicer_free(up->u_spl);
	up->u_spl = NULL;
	if (error == 0 && up->u_r->r_body.b_left == 0) {
		upstream_read_done(up);
		return;
	}
	snprintf(why, sizeof why, "the body ended %llu bytes early: %s",
	    (unsigned long long)up->u_r->r_body.b_left,
	    error == ETIMEDOUT   ? "idle timeout"
		: error == EPIPE ? "upstream closed"
				 : strerror(error));
	upstream_read_error(up, NULL, why);
}

/*
 * Move the rest of a large Content-Length body to the owner's socket fd
 * with splice(2), once nothing of it is buffered here (the owner has
 * written what it holds for fd): the bytes no longer enter user space.
 * The owner hears uo_done or uo_error as after a read.  Returns 1 when
 * the move started.
 */
int
upstream_splice_body(struct upstream *up, int fd)
{
	static const struct splicer_cbs cbs = { upstream_splice_progress,
		upstream_splice_done };
	struct gw *g = up->u_gw;
	int sfd;

	if (g->g_splice == NULL || up->u_spl != NULL ||
	    up->u_stream == NULL || (up->u_flags & UP_F_H2) ||
	    up->u_state != UP_S_ACTIVE || !(up->u_flags & UP_F_READING) ||
	    !(up->u_flags & UP_F_HEAD_DONE) || up->u_r == NULL ||
	    up->u_r->r_body.b_kind != HTTP1_BODY_LENGTH ||
	    up->u_r->r_body.b_done ||
	    up->u_r->r_body.b_left < UPSTREAM_SPLICE_MIN ||
	    evbuffer_get_length(stream_input(up->u_stream)) != 0 ||
	    (sfd = stream_getfd(up->u_stream)) == -1)
		return (0);
	/* The socket's reading only: a request body may still be written. */
	stream_disable(up->u_stream, EV_READ);
	up->u_spl = splicer_new(g->g_base, g->g_splice, sfd, fd,
	    up->u_r->r_body.b_left, g->g_conf->cf_idle_timeout, &cbs, up);
	splicer_start(up->u_spl);
	return (1);
}

/* Bytes read from the upstream and not yet handed to the owner. */
size_t
upstream_buffered(const struct upstream *up)
{
	if (up->u_flags & UP_F_H2)
		return (upstream_h2_buffered(up));
	return (up->u_stream != NULL
		? evbuffer_get_length(stream_input(up->u_stream))
		: 0);
}
