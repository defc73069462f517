/*
 * Moving bytes from one socket to another inside the kernel: splice(2)
 * through a pipe, driven by libevent events.  One splicer moves one
 * direction, up to a limit or to the end of the stream.
 *
 * A splicer holds a pipe only while bytes are in it: pipes come from a
 * per-loop pool, so an idle connection costs no descriptors.
 */
#ifndef AK_SPLICER_H
#define AK_SPLICER_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct splicer;
struct splice_pool;

/* No limit: move until the source ends. */
#define SPLICER_TO_EOF UINT64_MAX

struct splicer_cbs {
	/* n bytes reached the destination. */
	void (*progress)(void *arg, size_t n);
	/*
	 * The move ended: 0 when the limit was reached (or the source ended,
	 * with SPLICER_TO_EOF) and everything was written, else an errno:
	 * ETIMEDOUT after idle_ms without a byte, EPIPE when a limited
	 * source ended early, or what splice(2) said.  The callback may free
	 * the splicer.
	 */
	void (*done)(void *arg, int error);
};

struct splice_pool *splice_pool_new(void);
void splice_pool_free(struct splice_pool *);

struct splicer *splicer_new(struct event_base *, struct splice_pool *,
    int in, int out, uint64_t limit, uint64_t idle_ms,
    const struct splicer_cbs *, void *arg);
void splicer_start(struct splicer *);
uint64_t splicer_left(const struct splicer *);
void splicer_free(struct splicer *);

#endif
