/*
 * Chunk queues: body bytes in one evbuffer plus the length of each chunk,
 * so that credits (one per chunk, §6.1) and offsets (§6.2) can be counted
 * without copying. The ring holds at most the capacity given at init,
 * which the credit window bounds.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "alloc.h"
#include "evb.h"
#include "tun.h"

/* Make an empty queue for at most cap chunks starting at offset 0. */
void
chunks_init(struct tun_chunks *cq, size_t cap)
{
	memset(cq, 0, sizeof *cq);
	if (cap == 0)
		cap = 1;
	if ((cq->cq_buf = evbuffer_new()) == NULL)
		abort();
	cq->cq_len = xcalloc(cap, sizeof *cq->cq_len);
	cq->cq_cap = cap;
}

/* Free what a queue holds; an unused (zeroed) queue is fine. */
void
chunks_free(struct tun_chunks *cq)
{
	if (cq->cq_buf != NULL)
		evbuffer_free(cq->cq_buf);
	free(cq->cq_len);
	memset(cq, 0, sizeof *cq);
}

/* Grow the ring to hold at least one more chunk. */
static void
chunks_grow(struct tun_chunks *cq)
{
	uint32_t *len;
	size_t i, cap;

	cap = cq->cq_cap * 2;
	len = xcalloc(cap, sizeof *len);
	for (i = 0; i < cq->cq_count; i++)
		len[i] = cq->cq_len[(cq->cq_head + i) % cq->cq_cap];
	free(cq->cq_len);
	cq->cq_len = len;
	cq->cq_cap = cap;
	cq->cq_head = 0;
}

/*
 * Append n bytes moved from the front of src (or zero-copy from an
 * evbuffer) as one chunk. Callers check the count against their window
 * first; the ring grows only for retained response chunks.
 */
void
chunks_push(struct tun_chunks *cq, struct evbuffer *src, size_t n)
{
	if (cq->cq_count == cq->cq_cap)
		chunks_grow(cq);
	evb_take(src, cq->cq_buf, n);
	cq->cq_len[(cq->cq_head + cq->cq_count) % cq->cq_cap] = (uint32_t)n;
	cq->cq_count++;
}

/* Append a copy of the n bytes at p as one chunk. */
void
chunks_add(struct tun_chunks *cq, const void *p, size_t n)
{
	if (cq->cq_count == cq->cq_cap)
		chunks_grow(cq);
	if (evbuffer_add(cq->cq_buf, p, n) != 0)
		abort();
	cq->cq_len[(cq->cq_head + cq->cq_count) % cq->cq_cap] = (uint32_t)n;
	cq->cq_count++;
}

/*
 * Move the first chunk to the end of dst (NULL drops it). Returns its
 * length, or 0 if the queue is empty.
 */
size_t
chunks_pop(struct tun_chunks *cq, struct evbuffer *dst)
{
	size_t n;

	if (cq->cq_count == 0)
		return (0);
	n = cq->cq_len[cq->cq_head];
	if (dst != NULL)
		evb_take(cq->cq_buf, dst, n);
	else
		evbuffer_drain(cq->cq_buf, n);
	cq->cq_head = (cq->cq_head + 1) % cq->cq_cap;
	cq->cq_count--;
	cq->cq_base += n;
	return (n);
}

/* Length of chunk i (0 is the oldest). */
uint32_t
chunks_len(const struct tun_chunks *cq, size_t i)
{
	return (cq->cq_len[(cq->cq_head + i) % cq->cq_cap]);
}

/* Body offset of chunk i. */
uint64_t
chunks_offset(const struct tun_chunks *cq, size_t i)
{
	uint64_t off = cq->cq_base;
	size_t k;

	for (k = 0; k < i; k++)
		off += chunks_len(cq, k);
	return (off);
}

/* Body offset just past the last chunk. */
uint64_t
chunks_end(const struct tun_chunks *cq)
{
	return (cq->cq_base + evbuffer_get_length(cq->cq_buf));
}

/*
 * Drop whole chunks that end at or before off (an acknowledgement).
 * Returns how many were dropped.
 */
size_t
chunks_drop_below(struct tun_chunks *cq, uint64_t off)
{
	size_t n = 0;

	while (cq->cq_count > 0 && cq->cq_base + chunks_len(cq, 0) <= off) {
		chunks_pop(cq, NULL);
		n++;
	}
	return (n);
}

/*
 * Index of the chunk starting at off, cq_count if off is the end, or
 * SIZE_MAX if off is not a chunk boundary inside the queue.
 */
size_t
chunks_index_of(const struct tun_chunks *cq, uint64_t off)
{
	uint64_t at = cq->cq_base;
	size_t i;

	for (i = 0; i <= cq->cq_count; i++) {
		if (at == off)
			return (i);
		if (i < cq->cq_count)
			at += chunks_len(cq, i);
	}
	return (SIZE_MAX);
}
