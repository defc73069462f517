/*
 * Asynchronous host name lookups (c-ares) on a libevent loop: a small
 * getaddrinfo for TCP connections.  IP literals are answered without a
 * lookup; every answer, success or failure, is delivered from the event
 * loop, never from inside dns_lookup.
 */
#ifndef AK_DNS_H
#define AK_DNS_H

#include <stddef.h>

#include <sys/socket.h>

struct event_base;
struct dns;
struct dns_query;

/* Most addresses one answer carries; the rest are dropped. */
#define DNS_MAX_ADDRS 8

/*
 * The answer to one lookup.  On success err is NULL and addrs holds naddrs
 * (at least one) addresses with the port filled in, in the resolver's
 * order; on failure err is a sentence and naddrs is 0.  Everything is
 * valid only during the call.  The query is freed after the callback.
 */
typedef void (*dns_cb)(const struct sockaddr_storage *addrs, size_t naddrs,
    const char *err, void *arg);

struct dns *dns_new(struct event_base *, char **cause);
void dns_free(struct dns *);
struct dns_query *
dns_lookup(struct dns *, const char *host, int port, dns_cb cb, void *arg);
void dns_cancel(struct dns_query *);
int dns_is_literal(const char *host);

#endif
