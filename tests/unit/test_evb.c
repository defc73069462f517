/*
 * Unit tests for lib/evb.c.
 *
 * evb_take moves bytes in order and loses none; whole chains move without
 * a copy; a big part of a chain is shared, not copied, in turn again for
 * the rest, and the memory lives until the last part is freed (ASan and
 * LeakSanitizer check that in `make check`); a small part is copied; a
 * frozen end or front is refused with nothing moved.  evb_share adds a
 * range to another buffer without a copy and leaves src as it was, and the
 * bytes outlive src's draining them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/buffer.h>

#include "evb.h"

/* The byte at stream position i. */
static uint8_t
pat(size_t i)
{
	return ((uint8_t)(i * 31 + (i >> 8) * 7 + 1));
}

/* Append len pattern bytes from position from to b as one chain of its own. */
static void
add_chain(struct evbuffer *b, size_t from, size_t len)
{
	struct evbuffer *one = evbuffer_new();
	uint8_t *p = malloc(len);
	size_t i;

	assert_non_null(one);
	assert_non_null(p);
	for (i = 0; i < len; i++)
		p[i] = pat(from + i);
	assert_int_equal(evbuffer_add(one, p, len), 0);
	free(p);
	assert_int_equal(evbuffer_add_buffer(b, one), 0);
	evbuffer_free(one);
}

/*
 * Append len pattern bytes from position from to b as a socket read does:
 * into the room b's last chain has, then into new chains.
 */
static void
add_reserved(struct evbuffer *b, size_t from, size_t len)
{
	struct evbuffer_iovec v[2];
	uint8_t *p;
	size_t i, k;
	int n, j;

	n = evbuffer_reserve_space(b, (ev_ssize_t)len, v, 2);
	assert_true(n >= 1);
	for (j = 0, k = 0; j < n && k < len; j++) {
		p = v[j].iov_base;
		if (v[j].iov_len > len - k)
			v[j].iov_len = len - k;
		for (i = 0; i < v[j].iov_len; i++)
			p[i] = pat(from + k + i);
		k += v[j].iov_len;
	}
	assert_int_equal(k, len);
	assert_int_equal(evbuffer_commit_space(b, v, j), 0);
}

/* Where the first chain of b begins. */
static uint8_t *
first(struct evbuffer *b)
{
	struct evbuffer_iovec v;

	assert_true(evbuffer_peek(b, -1, NULL, &v, 1) >= 1);
	return (v.iov_base);
}

/* b holds exactly the pattern from position from on, len bytes. */
static void
expect(struct evbuffer *b, size_t from, size_t len)
{
	uint8_t *p;
	size_t i;

	assert_int_equal(evbuffer_get_length(b), len);
	if (len == 0)
		return;
	p = malloc(len);
	assert_non_null(p);
	assert_int_equal(evbuffer_copyout(b, p, len), (ev_ssize_t)len);
	for (i = 0; i < len; i++) {
		if (p[i] != pat(from + i))
			fail_msg("byte %zu of %zu: %u, not %u", i, len, p[i],
			    pat(from + i));
	}
	free(p);
}

static void
test_whole_chains(void **state)
{
	struct evbuffer *src = evbuffer_new(), *dst = evbuffer_new();
	uint8_t *a;

	(void)state;
	add_chain(src, 0, 10000);
	a = first(src);
	add_chain(src, 10000, 20000);
	assert_int_equal(evb_take(src, dst, 10000), 10000);
	assert_ptr_equal(first(dst), a);
	expect(dst, 0, 10000);
	expect(src, 10000, 20000);
	assert_int_equal(evb_take(src, dst, 20000), 20000);
	assert_ptr_equal(first(dst), a);
	expect(dst, 0, 30000);
	assert_int_equal(evbuffer_get_length(src), 0);
	evbuffer_free(src);
	evbuffer_free(dst);
}

static void
test_split_shares(void **state)
{
	struct evbuffer *src = evbuffer_new(), *d1 = evbuffer_new(),
			*d2 = evbuffer_new();
	uint8_t *a;

	(void)state;
	add_chain(src, 0, 100000);
	a = first(src);
	assert_int_equal(evb_take(src, d1, 60000), 60000);
	assert_ptr_equal(first(d1), a);
	assert_ptr_equal(first(src), a + 60000);
	expect(d1, 0, 60000);
	expect(src, 60000, 40000);
	/* The rest is shared again. */
	assert_int_equal(evb_take(src, d2, 30000), 30000);
	assert_ptr_equal(first(d2), a + 60000);
	assert_ptr_equal(first(src), a + 90000);
	/* Freed in any order, the others stay whole. */
	evbuffer_free(d1);
	expect(d2, 60000, 30000);
	expect(src, 90000, 10000);
	evbuffer_free(src);
	expect(d2, 60000, 30000);
	evbuffer_free(d2);
}

static void
test_small_part_copied(void **state)
{
	struct evbuffer *src = evbuffer_new(), *dst = evbuffer_new();
	uint8_t *a;

	(void)state;
	add_chain(src, 0, 100000);
	a = first(src);
	assert_int_equal(evb_take(src, dst, EVB_COPY_MAX), EVB_COPY_MAX);
	assert_ptr_not_equal(first(dst), a);
	assert_ptr_equal(first(src), a + EVB_COPY_MAX);
	expect(dst, 0, EVB_COPY_MAX);
	expect(src, EVB_COPY_MAX, 100000 - EVB_COPY_MAX);
	evbuffer_free(src);
	evbuffer_free(dst);
}

static void
test_across_chains(void **state)
{
	struct evbuffer *src = evbuffer_new(), *dst = evbuffer_new();

	(void)state;
	add_chain(src, 0, 5000);
	add_chain(src, 5000, 50000);
	/* All of the first chain and 40000 of the second. */
	assert_int_equal(evb_take(src, dst, 45000), 45000);
	expect(dst, 0, 45000);
	expect(src, 45000, 10000);
	/* More than src has: all of it. */
	assert_int_equal(evb_take(src, dst, 1 << 20), 10000);
	expect(dst, 0, 55000);
	assert_int_equal(evb_take(src, dst, 10), 0);
	evbuffer_free(src);
	evbuffer_free(dst);
}

static void
test_frozen(void **state)
{
	struct evbuffer *src = evbuffer_new(), *dst = evbuffer_new();

	(void)state;
	add_chain(src, 0, 100000);
	evbuffer_freeze(dst, 0);
	assert_int_equal(evb_take(src, dst, 60000), -1);
	expect(src, 0, 100000);
	assert_int_equal(evbuffer_get_length(dst), 0);
	evbuffer_unfreeze(dst, 0);
	evbuffer_freeze(src, 1);
	assert_int_equal(evb_take(src, dst, 60000), -1);
	evbuffer_unfreeze(src, 1);
	expect(src, 0, 100000);
	assert_int_equal(evbuffer_get_length(dst), 0);
	/* A socket bufferevent's input has its end frozen: that is fine. */
	evbuffer_freeze(src, 0);
	assert_int_equal(evb_take(src, dst, 60000), 60000);
	assert_int_equal(evb_take(src, dst, 40000), 40000);
	expect(dst, 0, 100000);
	evbuffer_free(src);
	evbuffer_free(dst);
}

/*
 * Random chain sizes, random takes, the taken bytes drained now and then
 * and more appended: the stream stays whole and in order.
 */
static void
test_random(void **state)
{
	struct evbuffer *src = evbuffer_new(), *dst = evbuffer_new();
	size_t added = 0, taken = 0, drained = 0, n, want;
	uint32_t seed = 12345;
	int i, r;

	(void)state;
	for (i = 0; i < 2000; i++) {
		seed = seed * 1103515245u + 12345u;
		if (evbuffer_get_length(src) < 300000) {
			n = 1 + (seed >> 8) % 90000;
			if (i % 3 == 0)
				add_chain(src, added, n);
			else
				add_reserved(src, added, n);
			added += n;
		}
		seed = seed * 1103515245u + 12345u;
		want = (seed >> 8) % 70000;
		r = evb_take(src, dst, want);
		assert_true(r >= 0);
		assert_int_equal(
		    (size_t)r, want < added - taken ? want : added - taken);
		taken += (size_t)r;
		if ((seed >> 4) % 3 == 0) {
			expect(dst, drained, taken - drained);
			n = (seed >> 12) % (taken - drained + 1);
			evbuffer_drain(dst, n);
			drained += n;
		}
	}
	expect(dst, drained, taken - drained);
	expect(src, taken, added - taken);
	evbuffer_free(src);
	evbuffer_free(dst);
}

/* A range shared stays in src, and outlives src's letting it go. */
static void
test_share(void **state)
{
	struct evbuffer *src = evbuffer_new(), *d1 = evbuffer_new(),
			*d2 = evbuffer_new();
	uint8_t *a;

	(void)state;
	add_chain(src, 0, 100000);
	a = first(src);
	add_chain(src, 100000, 50000);
	/* The middle: cut at both ends, shared, put back. */
	assert_int_equal(evb_share(src, 30000, 90000, d1), 0);
	expect(d1, 30000, 90000);
	expect(src, 0, 150000);
	assert_ptr_equal(first(d1), a + 30000);
	assert_ptr_equal(first(src), a);
	/* The same bytes again (a resend), and a range past the end. */
	assert_int_equal(evb_share(src, 30000, 90000, d2), 0);
	expect(d2, 30000, 90000);
	assert_int_equal(evb_share(src, 100000, 50001, d2), -1);
	expect(d2, 30000, 90000);
	expect(src, 0, 150000);
	/* libevent shares no whole chain that is shared already: refused. */
	assert_int_equal(evb_share(d1, 0, 90000, d2), -1);
	expect(d1, 30000, 90000);
	expect(d2, 30000, 90000);
	/* src lets the bytes go (an acknowledgement): d1 and d2 keep them. */
	evbuffer_drain(src, 120000);
	expect(src, 120000, 30000);
	expect(d1, 30000, 90000);
	evbuffer_free(src);
	expect(d2, 30000, 90000);
	evbuffer_free(d2);
	expect(d1, 30000, 90000);
	evbuffer_free(d1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_chains),
		cmocka_unit_test(test_split_shares),
		cmocka_unit_test(test_small_part_copied),
		cmocka_unit_test(test_across_chains),
		cmocka_unit_test(test_frozen),
		cmocka_unit_test(test_random),
		cmocka_unit_test(test_share),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
