/*
 * Host name lookups with c-ares, driven by libevent: c-ares tells us which
 * sockets it wants watched (the socket state callback) and when it next
 * needs to run (ares_timeout); we watch them with one event each and one
 * timer.  Answers are copied into the query and handed to the owner from a
 * per-query event, so an owner never sees its callback run inside
 * dns_lookup and may start another lookup or free things from it.
 */
#include <sys/queue.h>
#include <sys/types.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ares.h>
#include <event2/event.h>

#include "alloc.h"
#include "dns.h"
#include "log.h"

/* Per-try timeout and tries: a dead server costs at most ~6 s. */
#define DNS_TIMEOUT_MS 2000
#define DNS_TRIES 3

/* One socket c-ares asked us to watch. */
struct dns_sock {
	ares_socket_t ds_fd;
	short ds_what; /* EV_READ | EV_WRITE being watched */
	struct event *ds_ev;
};

/* A lookup from start to the owner's callback. */
struct dns_query {
	struct dns *q_dns;
	char *q_host;
	int q_port;
	dns_cb q_cb;
	void *q_arg;
	int q_flags;
#define DNS_Q_F_ARES 0x01 /* c-ares still owes us an answer */
#define DNS_Q_F_CANCELLED 0x02 /* the owner no longer wants the answer */
#define DNS_Q_F_DONE 0x04 /* answer stored; q_ev is active */
	struct event *q_ev; /* delivers the answer from the loop */
	struct sockaddr_storage q_addrs[DNS_MAX_ADDRS];
	size_t q_naddrs;
	char *q_err;
	TAILQ_ENTRY(dns_query) q_entry;
};

/* A resolver: one c-ares channel on one event loop. */
struct dns {
	struct event_base *d_base;
	ares_channel d_channel;
	struct event *d_timer;
	struct dns_sock *d_socks;
	size_t d_nsocks;
	TAILQ_HEAD(, dns_query) d_queries;
};

static void dns_timer_update(struct dns *);

/* Is host an IPv4 or IPv6 address literal (IPv6 without brackets)? */
int
dns_is_literal(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	return (inet_pton(AF_INET, host, &a4) == 1 ||
	    inet_pton(AF_INET6, host, &a6) == 1);
}

/* Fill ss with the literal host and port; returns 0 or -1. */
static int
dns_literal(const char *host, int port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		return (0);
	}
	if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		return (0);
	}
	return (-1);
}

/* Free a query that is out of c-ares and off the loop. */
static void
dns_query_free(struct dns_query *q)
{
	TAILQ_REMOVE(&q->q_dns->d_queries, q, q_entry);
	if (q->q_ev != NULL)
		event_free(q->q_ev);
	free(q->q_err);
	free(q->q_host);
	free(q);
}

/* Deliver a stored answer to the owner, then free the query. */
static void
dns_deliver_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns_query *q = arg;

	(void)fd;
	(void)what;
	if (!(q->q_flags & DNS_Q_F_CANCELLED))
		q->q_cb(q->q_addrs, q->q_naddrs, q->q_err, q->q_arg);
	dns_query_free(q);
}

/* Mark a query answered and schedule the delivery. */
static void
dns_query_done(struct dns_query *q)
{
	q->q_flags |= DNS_Q_F_DONE;
	event_active(q->q_ev, EV_TIMEOUT, 0);
}

/* c-ares finished a lookup: copy the addresses out. */
static void
dns_ares_cb(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
	struct dns_query *q = arg;
	struct ares_addrinfo_node *n;
	struct sockaddr_storage *ss;

	(void)timeouts;
	q->q_flags &= ~DNS_Q_F_ARES;
	if (status == ARES_EDESTRUCTION) {
		/* dns_free: nobody is told; the query goes with the channel. */
		if (res != NULL)
			ares_freeaddrinfo(res);
		dns_query_free(q);
		return;
	}
	if (status == ARES_SUCCESS && res != NULL) {
		for (n = res->nodes; n != NULL && q->q_naddrs < DNS_MAX_ADDRS;
		     n = n->ai_next) {
			if ((n->ai_family != AF_INET &&
				n->ai_family != AF_INET6) ||
			    n->ai_addrlen > sizeof *ss)
				continue;
			ss = &q->q_addrs[q->q_naddrs++];
			memset(ss, 0, sizeof *ss);
			memcpy(ss, n->ai_addr, n->ai_addrlen);
			if (n->ai_family == AF_INET) {
				((struct sockaddr_in *)ss)->sin_port = htons(
				    (uint16_t)q->q_port);
			} else {
				((struct sockaddr_in6 *)ss)->sin6_port = htons(
				    (uint16_t)q->q_port);
			}
		}
	}
	if (res != NULL)
		ares_freeaddrinfo(res);
	if (q->q_naddrs == 0) {
		xasprintf(&q->q_err, "cannot resolve %s: %s", q->q_host,
		    status == ARES_SUCCESS ? "no IPv4 or IPv6 address"
					   : ares_strerror(status));
	}
	dns_query_done(q);
}

/* Find the watch entry for fd, or NULL. */
static struct dns_sock *
dns_sock_find(struct dns *d, ares_socket_t fd)
{
	size_t i;

	for (i = 0; i < d->d_nsocks; i++) {
		if (d->d_socks[i].ds_fd == fd)
			return (&d->d_socks[i]);
	}
	return (NULL);
}

/* A watched socket is ready: let c-ares read or write it. */
static void
dns_sock_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns *d = arg;

	ares_process_fd(d->d_channel,
	    (what & EV_READ) ? (ares_socket_t)fd : ARES_SOCKET_BAD,
	    (what & EV_WRITE) ? (ares_socket_t)fd : ARES_SOCKET_BAD);
	dns_timer_update(d);
}

/* c-ares wants fd watched for reading and/or writing, or no longer. */
static void
dns_sock_state_cb(void *arg, ares_socket_t fd, int readable, int writable)
{
	struct dns *d = arg;
	struct dns_sock *ds;
	short what;
	size_t i;

	what = (readable ? EV_READ : 0) | (writable ? EV_WRITE : 0);
	ds = dns_sock_find(d, fd);
	if (what == 0) {
		if (ds == NULL)
			return;
		event_free(ds->ds_ev);
		i = (size_t)(ds - d->d_socks);
		d->d_socks[i] = d->d_socks[--d->d_nsocks];
		return;
	}
	if (ds == NULL) {
		d->d_socks = xreallocarray(
		    d->d_socks, d->d_nsocks + 1, sizeof *d->d_socks);
		ds = &d->d_socks[d->d_nsocks++];
		ds->ds_fd = fd;
		ds->ds_ev = NULL;
	} else if (ds->ds_what == what)
		return;
	if (ds->ds_ev != NULL)
		event_free(ds->ds_ev);
	ds->ds_what = what;
	ds->ds_ev = event_new(d->d_base, fd, what | EV_PERSIST, dns_sock_cb, d);
	if (ds->ds_ev == NULL || event_add(ds->ds_ev, NULL) != 0) {
		log_error("dns: cannot watch a resolver socket");
		abort();
	}
}

/* c-ares' next deadline passed: let it retry or time queries out. */
static void
dns_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dns *d = arg;

	(void)fd;
	(void)what;
	ares_process_fd(d->d_channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
	dns_timer_update(d);
}

/* Arm the timer for c-ares' next deadline, if it has one. */
static void
dns_timer_update(struct dns *d)
{
	struct timeval tv, *tvp;

	evtimer_del(d->d_timer);
	if ((tvp = ares_timeout(d->d_channel, NULL, &tv)) != NULL)
		evtimer_add(d->d_timer, tvp);
}

/*
 * Make a resolver on base, reading the system's resolver configuration.
 * Returns NULL and fills cause on error; free with dns_free.
 */
struct dns *
dns_new(struct event_base *base, char **cause)
{
	struct ares_options opts;
	struct dns *d;
	int rv;

	if ((rv = ares_library_init(ARES_LIB_INIT_ALL)) != ARES_SUCCESS) {
		xasprintf(
		    cause, "cannot start the resolver: %s", ares_strerror(rv));
		return (NULL);
	}
	d = xcalloc(1, sizeof *d);
	d->d_base = base;
	TAILQ_INIT(&d->d_queries);
	memset(&opts, 0, sizeof opts);
	opts.sock_state_cb = dns_sock_state_cb;
	opts.sock_state_cb_data = d;
	opts.timeout = DNS_TIMEOUT_MS;
	opts.tries = DNS_TRIES;
	rv = ares_init_options(&d->d_channel, &opts,
	    ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
	if (rv != ARES_SUCCESS) {
		xasprintf(
		    cause, "cannot start the resolver: %s", ares_strerror(rv));
		free(d);
		ares_library_cleanup();
		return (NULL);
	}
	if ((d->d_timer = evtimer_new(base, dns_timer_cb, d)) == NULL) {
		xasprintf(cause, "cannot start the resolver: no timer");
		ares_destroy(d->d_channel);
		free(d);
		ares_library_cleanup();
		return (NULL);
	}
	return (d);
}

/*
 * Free a resolver. Lookups still running are dropped without calling
 * their callbacks. NULL is ignored.
 */
void
dns_free(struct dns *d)
{
	struct dns_query *q;
	size_t i;

	if (d == NULL)
		return;
	/* Queries still in c-ares are freed by dns_ares_cb. */
	ares_destroy(d->d_channel);
	while ((q = TAILQ_FIRST(&d->d_queries)) != NULL)
		dns_query_free(q);
	for (i = 0; i < d->d_nsocks; i++)
		event_free(d->d_socks[i].ds_ev);
	free(d->d_socks);
	event_free(d->d_timer);
	free(d);
	ares_library_cleanup();
}

/*
 * Look host up for a TCP connection to port. An IP literal is answered
 * without a lookup. cb runs exactly once, from the loop, unless the query
 * is cancelled or the resolver freed first. Returns the query, which is
 * valid until its callback returns or dns_cancel.
 */
struct dns_query *
dns_lookup(struct dns *d, const char *host, int port, dns_cb cb, void *arg)
{
	struct ares_addrinfo_hints hints;
	struct dns_query *q;

	q = xcalloc(1, sizeof *q);
	q->q_dns = d;
	q->q_host = xstrdup(host);
	q->q_port = port;
	q->q_cb = cb;
	q->q_arg = arg;
	q->q_ev = event_new(d->d_base, -1, 0, dns_deliver_cb, q);
	if (q->q_ev == NULL) {
		log_error("dns: cannot allocate an event");
		abort();
	}
	TAILQ_INSERT_TAIL(&d->d_queries, q, q_entry);

	if (dns_literal(host, port, &q->q_addrs[0]) == 0) {
		q->q_naddrs = 1;
		dns_query_done(q);
		return (q);
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	q->q_flags |= DNS_Q_F_ARES;
	/* The callback may run right here; it only stores the answer. */
	ares_getaddrinfo(d->d_channel, host, NULL, &hints, dns_ares_cb, q);
	dns_timer_update(d);
	return (q);
}

/* Forget a query: its callback will not run. */
void
dns_cancel(struct dns_query *q)
{
	if (q == NULL)
		return;
	q->q_flags |= DNS_Q_F_CANCELLED;
}
