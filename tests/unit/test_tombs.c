/*
 * Unit tests for lib/tombs.c: the cap evicts the oldest first and counts
 * it, the TTL expires ids to the millisecond, an id added again starts
 * over as the newest, and an empty set keeps no table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tombs.h"

/* The cap: the oldest goes first, each eviction counted, order kept. */
static void
test_cap(void **state)
{
	struct tombs tm;
	char id[40];
	int i;

	(void)state;
	tombs_init(&tm, 3, 60000);
	assert_false(tombs_has(&tm, "a", 0));
	assert_int_equal(idmap_slots(&tm.tm_map), 0);
	tombs_add(&tm, "a", 1);
	tombs_add(&tm, "b", 2);
	tombs_add(&tm, "c", 3);
	assert_int_equal(tm.tm_count, 3);
	assert_int_equal(tm.tm_evicted, 0);
	tombs_add(&tm, "d", 4);
	assert_int_equal(tm.tm_count, 3);
	assert_int_equal(tm.tm_evicted, 1);
	assert_false(tombs_has(&tm, "a", 5));
	assert_true(tombs_has(&tm, "b", 5));
	/* b added again is the newest: c goes next, then d. */
	tombs_add(&tm, "b", 6);
	assert_int_equal(tm.tm_evicted, 1);
	tombs_add(&tm, "e", 7);
	assert_false(tombs_has(&tm, "c", 8));
	assert_true(tombs_has(&tm, "b", 8));
	tombs_add(&tm, "f", 9);
	assert_false(tombs_has(&tm, "d", 10));
	assert_true(tombs_has(&tm, "b", 10));
	assert_true(tombs_has(&tm, "e", 10));
	assert_true(tombs_has(&tm, "f", 10));
	assert_int_equal(tm.tm_evicted, 3);
	assert_string_equal(TAILQ_FIRST(&tm.tm_list)->tb_id, "b");
	tombs_clear(&tm);
	assert_int_equal(tm.tm_count, 0);
	assert_int_equal(idmap_slots(&tm.tm_map), 0);

	/* Many more ids than the cap: exactly the newest cap remain. */
	tombs_init(&tm, 1024, 60000);
	for (i = 0; i < 5000; i++) {
		snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", i);
		tombs_add(&tm, id, 100);
		assert_true(tm.tm_count <= 1024);
	}
	assert_int_equal(tm.tm_count, 1024);
	assert_int_equal(tm.tm_evicted, 5000 - 1024);
	assert_int_equal(idmap_count(&tm.tm_map), 1024);
	assert_true(idmap_slots(&tm.tm_map) <= 2048);
	for (i = 0; i < 5000; i++) {
		snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", i);
		assert_true(tombs_has(&tm, id, 100) == (i >= 5000 - 1024));
	}
	tombs_clear(&tm);
}

/* The TTL, to the millisecond; expiry empties the table. */
static void
test_ttl(void **state)
{
	struct tombs tm;

	(void)state;
	tombs_init(&tm, 16, 1000);
	tombs_add(&tm, "a", 5000);
	tombs_add(&tm, "b", 5500);
	assert_true(tombs_has(&tm, "a", 5999));
	assert_false(tombs_has(&tm, "a", 6000));
	assert_true(tombs_has(&tm, "b", 6000));
	assert_int_equal(tm.tm_count, 1);
	assert_int_equal(tm.tm_evicted, 0); /* expired, not evicted */
	/* Expiry without a lookup (the owner's tick). */
	tombs_expire(&tm, 6499);
	assert_int_equal(tm.tm_count, 1);
	tombs_expire(&tm, 6500);
	assert_int_equal(tm.tm_count, 0);
	assert_int_equal(idmap_slots(&tm.tm_map), 0);
	/* Added again after expiry: remembered anew. */
	tombs_add(&tm, "a", 7000);
	assert_true(tombs_has(&tm, "a", 7999));
	/* Re-adding restarts the TTL. */
	tombs_add(&tm, "a", 7900);
	assert_true(tombs_has(&tm, "a", 8899));
	assert_false(tombs_has(&tm, "a", 8900));
	tombs_clear(&tm);

	/* TTL 0 remembers nothing past the moment; cap 0 nothing at all. */
	tombs_init(&tm, 2, 0);
	tombs_add(&tm, "a", 1);
	assert_false(tombs_has(&tm, "a", 1));
	tombs_clear(&tm);
	tombs_init(&tm, 0, 60000);
	tombs_add(&tm, "a", 1);
	assert_false(tombs_has(&tm, "a", 1));
	assert_int_equal(tm.tm_count, 0);
	tombs_clear(&tm);
}

/* Ids of any length (V1 ids are any string), the empty one too. */
static void
test_lengths(void **state)
{
	struct tombs tm;
	char big[2048];

	(void)state;
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	tombs_init(&tm, 4, 60000);
	tombs_add(&tm, big, 1);
	tombs_add(&tm, "", 1);
	assert_true(tombs_has(&tm, big, 2));
	assert_true(tombs_has(&tm, "", 2));
	big[100] = '\0';
	assert_false(tombs_has(&tm, big, 2));
	tombs_clear(&tm);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_ttl),
		cmocka_unit_test(test_lengths),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
