/*
 * aktunnel session state: the completed-response cache (tunnel-protocol.md
 * §8.5: 300 s, 1024 entries, 16 MiB, oldest first), the tombstones (§8.8:
 * 300 s, 1024) and the chunk queues that count credits and offsets (§6).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "alloc.h"
#include "tun.h"

/* Store a frame of len bytes for id at now. */
static struct tun_cache_entry *
put(struct tun_cache *c, const char *id, size_t len, uint64_t now)
{
	char *f = xmalloc(len + 1);

	memset(f, 'x', len);
	f[len] = '\0';
	return (cache_put(c, id, f, len, now));
}

/* Found, replaced, removed; the TTL expires entries. */
static void
test_cache_basic(void **state)
{
	struct tun_cache c;
	struct tun_cache_entry *e;

	(void)state;
	cache_init(
	    &c, TUN_CACHE_TTL_MS, TUN_CACHE_MAX_ENTRIES, TUN_CACHE_MAX_BYTES);
	assert_null(cache_find(&c, "a"));
	e = put(&c, "a", 10, 1000);
	assert_non_null(e);
	assert_int_equal(e->ce_sent_gen, 0);
	assert_ptr_equal(cache_find(&c, "a"), e);
	put(&c, "b", 20, 2000);
	assert_int_equal(c.tc_count, 2);
	assert_int_equal(c.tc_bytes, 30);
	/* A new outcome for an id replaces the old one. */
	e = put(&c, "a", 5, 3000);
	assert_int_equal(e->ce_len, 5);
	assert_int_equal(c.tc_count, 2);
	assert_int_equal(c.tc_bytes, 25);
	cache_remove(&c, "b");
	assert_null(cache_find(&c, "b"));
	cache_remove(&c, "nothing");
	assert_int_equal(c.tc_count, 1);

	/* 300 s after it was stored an entry is gone, not a moment before. */
	cache_expire(&c, 3000 + TUN_CACHE_TTL_MS - 1);
	assert_non_null(cache_find(&c, "a"));
	cache_expire(&c, 3000 + TUN_CACHE_TTL_MS);
	assert_null(cache_find(&c, "a"));
	assert_int_equal(c.tc_count, 0);
	assert_int_equal(c.tc_bytes, 0);
	cache_clear(&c);
}

/* 1024 entries at most: the oldest goes first. */
static void
test_cache_entries(void **state)
{
	struct tun_cache c;
	char id[32];
	int i;

	(void)state;
	cache_init(
	    &c, TUN_CACHE_TTL_MS, TUN_CACHE_MAX_ENTRIES, TUN_CACHE_MAX_BYTES);
	for (i = 0; i < TUN_CACHE_MAX_ENTRIES + 5; i++) {
		snprintf(id, sizeof id, "id-%d", i);
		put(&c, id, 1, (uint64_t)i);
	}
	assert_int_equal(c.tc_count, TUN_CACHE_MAX_ENTRIES);
	for (i = 0; i < 5; i++) {
		snprintf(id, sizeof id, "id-%d", i);
		assert_null(cache_find(&c, id));
	}
	snprintf(id, sizeof id, "id-%d", 5);
	assert_non_null(cache_find(&c, id));
	snprintf(id, sizeof id, "id-%d", TUN_CACHE_MAX_ENTRIES + 4);
	assert_non_null(cache_find(&c, id));
	cache_clear(&c);
	assert_int_equal(c.tc_count, 0);
}

/* 16 MiB at most, oldest first; a frame bigger than that is not kept. */
static void
test_cache_bytes(void **state)
{
	struct tun_cache c;
	size_t mib = 1024 * 1024;

	(void)state;
	cache_init(
	    &c, TUN_CACHE_TTL_MS, TUN_CACHE_MAX_ENTRIES, TUN_CACHE_MAX_BYTES);
	put(&c, "a", 6 * mib, 1);
	put(&c, "b", 6 * mib, 2);
	assert_int_equal(c.tc_bytes, 12 * mib);
	put(&c, "c", 6 * mib, 3);
	assert_null(cache_find(&c, "a"));
	assert_non_null(cache_find(&c, "b"));
	assert_non_null(cache_find(&c, "c"));
	assert_int_equal(c.tc_bytes, 12 * mib);
	/* Exactly the limit fits after evicting everything else. */
	put(&c, "d", TUN_CACHE_MAX_BYTES, 4);
	assert_int_equal(c.tc_count, 1);
	assert_int_equal(c.tc_bytes, TUN_CACHE_MAX_BYTES);
	assert_null(put(&c, "e", TUN_CACHE_MAX_BYTES + 1, 5));
	assert_null(cache_find(&c, "e"));
	cache_clear(&c);
}

/* Tombstones: 300 s, 1024, oldest evicted, re-adding refreshes. */
static void
test_tombs(void **state)
{
	struct tombs t;
	char id[32];
	int i;

	(void)state;
	tombs_init(&t, TUN_TOMB_MAX, TUN_TOMB_TTL_MS);
	assert_false(tombs_has(&t, "a", 0));
	tombs_add(&t, "a", 1000);
	assert_true(tombs_has(&t, "a", 1000 + TUN_TOMB_TTL_MS - 1));
	assert_false(tombs_has(&t, "a", 1000 + TUN_TOMB_TTL_MS));
	assert_int_equal(t.tm_count, 0);

	tombs_add(&t, "a", 10);
	tombs_add(&t, "b", 20);
	tombs_add(&t, "a", 30); /* refreshed: now newer than b */
	assert_int_equal(t.tm_count, 2);
	assert_true(tombs_has(&t, "a", 20 + TUN_TOMB_TTL_MS));
	assert_false(tombs_has(&t, "b", 20 + TUN_TOMB_TTL_MS));
	tombs_clear(&t);

	for (i = 0; i < TUN_TOMB_MAX + 3; i++) {
		snprintf(id, sizeof id, "t-%d", i);
		tombs_add(&t, id, 100);
	}
	assert_int_equal(t.tm_count, TUN_TOMB_MAX);
	assert_false(tombs_has(&t, "t-0", 100));
	assert_false(tombs_has(&t, "t-2", 100));
	assert_true(tombs_has(&t, "t-3", 100));
	tombs_clear(&t);
}

/* Chunk queues: lengths, offsets, acks at chunk boundaries, growth. */
static void
test_chunks(void **state)
{
	struct tun_chunks q;
	struct evbuffer *out;
	char buf[16];
	int i;

	(void)state;
	chunks_init(&q, 2);
	out = evbuffer_new();
	chunks_add(&q, "abc", 3);
	chunks_add(&q, "defg", 4);
	chunks_add(&q, "hi", 2); /* past the initial capacity: grows */
	assert_int_equal(q.cq_count, 3);
	assert_int_equal(chunks_len(&q, 1), 4);
	assert_int_equal(chunks_offset(&q, 2), 7);
	assert_int_equal(chunks_end(&q), 9);
	assert_int_equal(chunks_index_of(&q, 0), 0);
	assert_int_equal(chunks_index_of(&q, 3), 1);
	assert_int_equal(chunks_index_of(&q, 9), 3);
	assert_int_equal(chunks_index_of(&q, 4), SIZE_MAX);
	assert_int_equal(chunks_index_of(&q, 10), SIZE_MAX);

	/* An ack in the middle of a chunk keeps that chunk. */
	assert_int_equal(chunks_drop_below(&q, 5), 1);
	assert_int_equal(q.cq_base, 3);
	assert_int_equal(chunks_index_of(&q, 0), SIZE_MAX);
	assert_int_equal(chunks_pop(&q, out), 4);
	assert_int_equal(evbuffer_remove(out, buf, sizeof buf), 4);
	assert_memory_equal(buf, "defg", 4);
	assert_int_equal(q.cq_base, 7);

	for (i = 0; i < 40; i++)
		chunks_add(&q, "z", 1);
	assert_int_equal(q.cq_count, 41);
	assert_int_equal(chunks_end(&q), 9 + 40);
	assert_int_equal(chunks_drop_below(&q, 49), 41);
	assert_int_equal(q.cq_count, 0);
	assert_int_equal(chunks_pop(&q, NULL), 0);
	evbuffer_free(out);
	chunks_free(&q);
}

/*
 * Many ids, so buckets hold several: each found while kept, gone once
 * evicted, removed or expired, from the cache and the tombstones alike;
 * both are usable again after a clear.
 */
static void
test_many_ids(void **state)
{
	struct tun_cache c;
	struct tombs t;
	char id[32];
	int i, round;

	(void)state;
	cache_init(&c, TUN_CACHE_TTL_MS, 1024, TUN_CACHE_MAX_BYTES);
	tombs_init(&t, 1024, TUN_TOMB_TTL_MS);
	for (round = 0; round < 2; round++) {
		for (i = 0; i < 3000; i++) {
			snprintf(id, sizeof id, "id-%d", i);
			assert_non_null(put(&c, id, 1, 1000 + (uint64_t)i));
			tombs_add(&t, id, 1000 + (uint64_t)i);
		}
		assert_int_equal(c.tc_count, 1024);
		assert_int_equal(t.tm_count, 1024);
		for (i = 0; i < 3000; i++) {
			snprintf(id, sizeof id, "id-%d", i);
			if (i < 3000 - 1024) {
				assert_null(cache_find(&c, id));
				assert_false(tombs_has(&t, id, 5000));
			} else {
				assert_non_null(cache_find(&c, id));
				assert_string_equal(
				    cache_find(&c, id)->ce_id, id);
				assert_true(tombs_has(&t, id, 5000));
			}
		}
		/* Every other one removed; the rest still found. */
		for (i = 3000 - 1024; i < 3000; i += 2) {
			snprintf(id, sizeof id, "id-%d", i);
			cache_remove(&c, id);
		}
		for (i = 3000 - 1024; i < 3000; i++) {
			snprintf(id, sizeof id, "id-%d", i);
			assert_true((cache_find(&c, id) != NULL) == (i % 2));
		}
		/* A tombstone added again moves to the young end. */
		tombs_add(&t, "id-1976", 4000);
		tombs_add(&t, "new", 4001);
		assert_true(tombs_has(&t, "id-1976", 4002));
		assert_false(tombs_has(&t, "id-1977", 4002));
		/* Expiry empties both. */
		cache_expire(&c, 4001 + TUN_CACHE_TTL_MS);
		assert_int_equal(c.tc_count, 0);
		assert_null(cache_find(&c, "id-2999"));
		assert_false(tombs_has(&t, "new", 4001 + TUN_TOMB_TTL_MS));
		assert_int_equal(t.tm_count, 0);
		cache_clear(&c);
		tombs_clear(&t);
		assert_null(cache_find(&c, "id-2999"));
		assert_false(tombs_has(&t, "id-2999", 0));
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cache_basic),
		cmocka_unit_test(test_cache_entries),
		cmocka_unit_test(test_cache_bytes),
		cmocka_unit_test(test_tombs),
		cmocka_unit_test(test_chunks),
		cmocka_unit_test(test_many_ids),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
