/*
 * Moving bytes between evbuffers without copying them.
 *
 * evbuffer_remove_buffer moves whole chains, but copies the part of a
 * chain it takes only in part.  A socket read fills a chain with
 * whatever arrived, so the end of a WebSocket frame or of a tunnel chunk
 * almost never falls on a chain's end: in a tunnel's bulk transfer most
 * of every 64 KiB frame was copied that way, at each end.
 *
 * A shared part keeps the memory of the chain it came from until it is
 * freed.  Our reads size a chain to what arrived (lib/stream.c), so that
 * holds at most about twice the bytes shared.
 */
#ifndef AK_EVB_H
#define AK_EVB_H

#include <stddef.h>

struct evbuffer;

/* A part of a chain this small is copied: sharing it costs more. */
#define EVB_COPY_MAX 2048

int evb_take(struct evbuffer *src, struct evbuffer *dst, size_t len);
int evb_share(struct evbuffer *src, size_t pos, size_t len, struct evbuffer *);

#endif
