/*
 * Write-through for plain-socket bufferevents: what lib/wsconn.c and the
 * tunnel client still run on until they move to lib/stream.h (the event
 * base moved to lib/evio.h, included here for them).
 *
 * A socket bufferevent writes only when the loop says the socket is
 * writable: every response costs an epoll_ctl to ask, an epoll_wait to
 * hear, and an epoll_ctl to stop asking.  wthru_flush writes the output
 * without that round trip instead; only what the socket does not take
 * waits for the loop.
 *
 * With a wthru_q, the writes asked for in one pass of the loop are made
 * together at the end of it, after every event that pass found (see
 * wthru.c).  Without one, wthru_flush writes at once.
 */
#ifndef AK_WTHRU_H
#define AK_WTHRU_H

#include <sys/queue.h>

#include "evio.h"
#include "stream.h"

struct bufferevent;
struct event_base;
struct evbuffer_cb_entry;
struct wthru_q;

struct wthru {
	struct bufferevent *wt_bev; /* NULL: not attached, or TLS */
	struct evbuffer_cb_entry *wt_cb;
	struct wthru_q *wt_q; /* NULL: write at once */
	TAILQ_ENTRY(wthru) wt_entry; /* on wt_q while wt_queued */
	unsigned char wt_held; /* EV_WRITE off because the output is empty */
	unsigned char wt_queued;
};

struct wthru_q *wthru_q_new(struct event_base *);
void wthru_q_free(struct wthru_q *);
void wthru_attach(struct wthru *, struct bufferevent *, struct wthru_q *);
void wthru_detach(struct wthru *);
void wthru_flush(struct wthru *);
void wthru_write_now(struct wthru *);
void evio_tune(struct bufferevent *);
void evio_read_more(struct bufferevent *);
void evio_own_reads(struct bufferevent *);

/* EVIO_MAX_IO and EVIO_OWN_READ are stream.h's. */

#endif
