/*
 * Moving bytes between evbuffers without copying them; see evb.h.
 *
 * A chain taken in part is shared instead of copied: the chain moves
 * whole into an evbuffer of its own (struct evb_hold), and two reference
 * chains into its memory, the part taken and the rest, go to dst and back
 * to the front of src.  The chain is freed when both are.  The rest can
 * be shared again in turn: its reference chain then moves into a hold of
 * its own, which keeps the first alive until it is freed.
 */
#include <event2/buffer.h>

#include <stdint.h>
#include <stdlib.h>

#include "alloc.h"
#include "evb.h"

/* Chains looked at per evbuffer_peek. */
#define EVB_VECS 16

struct evb_hold {
	struct evbuffer *h_keep; /* the shared chain, alone */
	unsigned int h_refs; /* reference chains into it */
};

static void
evb_unref(const void *data, size_t len, void *arg)
{
	struct evb_hold *h = arg;

	(void)data;
	(void)len;
	if (--h->h_refs == 0) {
		evbuffer_free(h->h_keep);
		free(h);
	}
}

/*
 * Move the first take bytes of src's first chain, which holds len > take
 * bytes at p, to dst by reference.  Returns 0, or -1 with nothing moved.
 */
static int
evb_split(struct evbuffer *src, struct evbuffer *dst, uint8_t *p, size_t len,
    size_t take)
{
	struct evbuffer *rest;
	struct evb_hold *h;

	if ((rest = evbuffer_new()) == NULL)
		return (-1);
	h = xmalloc(sizeof *h);
	h->h_refs = 0;
	if ((h->h_keep = evbuffer_new()) == NULL) {
		free(h);
		evbuffer_free(rest);
		return (-1);
	}
	/* The whole chain moves: p stays where it is. */
	if (evbuffer_remove_buffer(src, h->h_keep, len) != (int)len)
		goto fail;
	if (evbuffer_add_reference(dst, p, take, evb_unref, h) != 0) {
		(void)evbuffer_prepend_buffer(src, h->h_keep);
		goto fail;
	}
	h->h_refs++;
	if (evbuffer_add_reference(rest, p + take, len - take, evb_unref, h) ==
	    0) {
		h->h_refs++;
		(void)evbuffer_prepend_buffer(src, rest);
	} else if (evbuffer_prepend(src, p + take, len - take) != 0) {
		/* dst has the bytes: nothing can give src back the rest. */
		abort();
	}
	evbuffer_free(rest);
	return (0);

fail:
	evbuffer_free(h->h_keep);
	free(h);
	evbuffer_free(rest);
	return (-1);
}

/*
 * Move the first len bytes of src (all of them if it has fewer) to the
 * end of dst.  Whole chains move as evbuffer_remove_buffer moves them; of
 * a chain taken in part, up to EVB_COPY_MAX bytes are copied and more
 * are shared.  Returns the bytes moved, or -1 if src's front or dst's end
 * is frozen.
 */
int
evb_take(struct evbuffer *src, struct evbuffer *dst, size_t len)
{
	struct evbuffer_iovec v[EVB_VECS];
	size_t have = evbuffer_get_length(src), moved = 0, take, whole;
	int i, n, r;

	if (len > have)
		len = have;
	if (len > INT32_MAX)
		len = INT32_MAX;
	while (moved < len) {
		take = len - moved;
		n = evbuffer_peek(src, (ev_ssize_t)take, NULL, v, EVB_VECS);
		if (n <= 0)
			break;
		for (i = 0, whole = 0;
		     i < n && i < EVB_VECS && v[i].iov_len <= take - whole; i++)
			whole += v[i].iov_len;
		if (whole == 0) {
			/* The first chain holds more than is taken. */
			if (take > EVB_COPY_MAX && v[0].iov_len > take &&
			    evb_split(src, dst, v[0].iov_base, v[0].iov_len,
				take) == 0)
				return ((int)(moved + take));
			whole = take;
		}
		if ((r = evbuffer_remove_buffer(src, dst, whole)) <= 0)
			return (moved == 0 ? -1 : (int)moved);
		moved += (size_t)r;
	}
	return ((int)moved);
}

/*
 * Add the len bytes at position pos of src to the end of dst without a
 * copy, src keeping them: the range is cut out of src (evb_take), added
 * to dst as libevent's reference chains (evbuffer_add_buffer_reference,
 * which keeps a chain's memory until both have let it go), and put back.
 * libevent refuses a range holding such reference chains itself.
 * Returns 0, or -1 with dst unchanged and src as it was.
 */
int
evb_share(struct evbuffer *src, size_t pos, size_t len, struct evbuffer *dst)
{
	struct evbuffer *pre, *mid;
	size_t have = evbuffer_get_length(src);
	int rv = -1;

	if (pos > have || len > have - pos || len > INT32_MAX ||
	    pos > INT32_MAX)
		return (-1);
	if ((pre = evbuffer_new()) == NULL)
		return (-1);
	if ((mid = evbuffer_new()) == NULL) {
		evbuffer_free(pre);
		return (-1);
	}
	if ((pos == 0 || evb_take(src, pre, pos) == (int)pos) &&
	    (len == 0 || evb_take(src, mid, len) == (int)len))
		rv = evbuffer_add_buffer_reference(dst, mid);
	/* Back where they were, whatever happened. */
	if (evbuffer_prepend_buffer(src, mid) != 0 ||
	    evbuffer_prepend_buffer(src, pre) != 0)
		abort();
	evbuffer_free(mid);
	evbuffer_free(pre);
	return (rv == 0 ? 0 : -1);
}
