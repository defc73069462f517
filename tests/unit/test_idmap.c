/*
 * Unit tests for lib/siphash.c and lib/idmap.c: SipHash-2-4 against the
 * paper's vectors and OpenSSL's, case folding, insert/find/delete, growth
 * and shrink, keys crowded onto one probe chain, a random key per map and
 * per process, and a bounded micro-benchmark of the lookup (printed).
 */
#include <sys/queue.h>
#include <sys/wait.h>

#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "clock.h"
#include "idmap.h"
#include "siphash.h"
#include "tunproto.h"

/* The paper's key: bytes 00 01 ... 0f. */
static void
paper_key(struct sipkey *k, uint8_t raw[16])
{
	int i;

	for (i = 0; i < 16; i++)
		raw[i] = (uint8_t)i;
	sipkey_from_bytes(k, raw);
}

/* SipHash-2-4 of p through OpenSSL's EVP_MAC "SIPHASH", 8-byte output. */
static uint64_t
ossl_siphash(EVP_MAC *mac, const uint8_t key[16], const void *p, size_t len)
{
	EVP_MAC_CTX *ctx;
	OSSL_PARAM params[2];
	unsigned int size = 8;
	uint8_t out[8];
	size_t outl = 0;
	uint64_t v = 0;
	int i;

	params[0] = OSSL_PARAM_construct_uint(OSSL_MAC_PARAM_SIZE, &size);
	params[1] = OSSL_PARAM_construct_end();
	assert_non_null(ctx = EVP_MAC_CTX_new(mac));
	assert_int_equal(EVP_MAC_init(ctx, key, 16, params), 1);
	assert_int_equal(EVP_MAC_update(ctx, p, len), 1);
	assert_int_equal(EVP_MAC_final(ctx, out, &outl, sizeof out), 1);
	assert_int_equal(outl, 8);
	EVP_MAC_CTX_free(ctx);
	for (i = 7; i >= 0; i--)
		v = (v << 8) | out[i];
	return (v);
}

/* The paper's vectors (appendix A and the reference table), and OpenSSL. */
static void
test_siphash_vectors(void **state)
{
	struct sipkey k;
	uint8_t raw[16], msg[64];
	EVP_MAC *mac;
	size_t i;

	(void)state;
	paper_key(&k, raw);
	for (i = 0; i < sizeof msg; i++)
		msg[i] = (uint8_t)i;
	assert_true(siphash(&k, msg, 0) == 0x726fdb47dd0e0e31ULL);
	assert_true(siphash(&k, msg, 15) == 0xa129ca6149be45e5ULL);
	assert_non_null(mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL));
	for (i = 0; i <= sizeof msg; i++)
		assert_true(
		    siphash(&k, msg, i) == ossl_siphash(mac, raw, msg, i));
	/* Another key, odd bytes. */
	for (i = 0; i < 16; i++)
		raw[i] = (uint8_t)(0xa5 ^ (i * 37));
	sipkey_from_bytes(&k, raw);
	for (i = 0; i < sizeof msg; i++)
		msg[i] = (uint8_t)(0xff - i * 7);
	for (i = 0; i <= sizeof msg; i++)
		assert_true(
		    siphash(&k, msg, i) == ossl_siphash(mac, raw, msg, i));
	EVP_MAC_free(mac);
}

/* siphash_fold is siphash of the ASCII lower-case copy, for every byte. */
static void
test_siphash_fold(void **state)
{
	struct sipkey k;
	uint8_t raw[16], in[40], low[40];
	size_t len, i;
	int c;

	(void)state;
	paper_key(&k, raw);
	for (c = 0; c < 256; c++) {
		for (len = 0; len <= sizeof in; len++) {
			for (i = 0; i < len; i++) {
				in[i] = (uint8_t)(c + i * 13);
				low[i] = (in[i] >= 'A' && in[i] <= 'Z')
				    ? (uint8_t)(in[i] + 32)
				    : in[i];
			}
			assert_true(
			    siphash_fold(&k, in, len) == siphash(&k, low, len));
		}
	}
}

/* Insert, find, refuse a duplicate, delete; a table only while not empty. */
static void
test_basic(void **state)
{
	struct idmap m;
	int a, b;

	(void)state;
	idmap_init(&m, 0);
	assert_null(idmap_find(&m, "a"));
	assert_null(idmap_find(&m, NULL));
	assert_null(idmap_del(&m, "a"));
	assert_int_equal(idmap_slots(&m), 0);
	assert_int_equal(idmap_put(&m, "a", &a), 0);
	assert_int_equal(idmap_put(&m, "b", &b), 0);
	assert_int_equal(idmap_put(&m, "a", &b), -1); /* the first stays */
	assert_ptr_equal(idmap_find(&m, "a"), &a);
	assert_ptr_equal(idmap_find(&m, "b"), &b);
	assert_null(idmap_find(&m, "A"));
	assert_null(idmap_find(&m, ""));
	assert_int_equal(idmap_count(&m), 2);
	assert_int_equal(idmap_slots(&m), IDMAP_MIN_SLOTS);
	assert_ptr_equal(idmap_del(&m, "a"), &a);
	assert_null(idmap_del(&m, "a"));
	assert_null(idmap_find(&m, "a"));
	assert_ptr_equal(idmap_del(&m, "b"), &b);
	assert_int_equal(idmap_count(&m), 0);
	assert_int_equal(idmap_slots(&m), 0); /* freed with the last key */
	assert_int_equal(idmap_put(&m, "", &a), 0);
	assert_ptr_equal(idmap_find(&m, ""), &a);
	idmap_free(&m);
	assert_null(idmap_find(&m, ""));

	/* Case-insensitive keys. */
	idmap_init(&m, IDMAP_F_FOLD);
	assert_int_equal(idmap_put(&m, "Sbx-One", &a), 0);
	assert_ptr_equal(idmap_find(&m, "sbx-one"), &a);
	assert_ptr_equal(idmap_find(&m, "SBX-ONE"), &a);
	assert_int_equal(idmap_put(&m, "SBX-one", &b), -1);
	assert_ptr_equal(idmap_del(&m, "sBX-oNE"), &a);
	idmap_free(&m);
}

/*
 * Many keys: load stays at most three quarters while growing, every key
 * found, misses not; deleting shrinks the table back.
 */
static void
test_grow_shrink(void **state)
{
	static char keys[10000][TUNPROTO_UUID_LEN + 1];
	char miss[TUNPROTO_UUID_LEN + 1];
	struct idmap m;
	size_t i, n = sizeof keys / sizeof *keys, maxslots;

	(void)state;
	idmap_init(&m, 0);
	for (i = 0; i < n; i++) {
		assert_int_equal(tunproto_uuid_random(keys[i]), 0);
		assert_int_equal(idmap_put(&m, keys[i], keys[i]), 0);
		assert_true(idmap_count(&m) * 4 <= idmap_slots(&m) * 3);
	}
	maxslots = idmap_slots(&m);
	assert_int_equal(maxslots, 16384);
	for (i = 0; i < n; i++)
		assert_ptr_equal(idmap_find(&m, keys[i]), keys[i]);
	for (i = 0; i < 1000; i++) {
		assert_int_equal(tunproto_uuid_random(miss), 0);
		assert_null(idmap_find(&m, miss));
	}
	/* Delete every other key; the rest are still found. */
	for (i = 0; i < n; i += 2)
		assert_ptr_equal(idmap_del(&m, keys[i]), keys[i]);
	for (i = 0; i < n; i++)
		assert_true((idmap_find(&m, keys[i]) != NULL) == (i % 2 == 1));
	for (i = 1; i < n; i += 2) {
		assert_ptr_equal(idmap_del(&m, keys[i]), keys[i]);
		assert_true(idmap_slots(&m) == 0 ||
		    idmap_count(&m) * 8 >= idmap_slots(&m) ||
		    idmap_slots(&m) == IDMAP_MIN_SLOTS);
		if (i == n - 1001)
			assert_true(idmap_slots(&m) <= maxslots / 8);
	}
	assert_int_equal(idmap_count(&m), 0);
	assert_int_equal(idmap_slots(&m), 0);
	idmap_free(&m);
}

/* Every key, once each, by idmap_next. */
static void
test_walk(void **state)
{
	char keys[100][16];
	int seen[100], i, n = 0;
	struct idmap m;
	size_t pos = 0;
	const char *k;
	void *v;

	(void)state;
	idmap_init(&m, 0);
	assert_int_equal(idmap_next(&m, &pos, &k, &v), 0);
	for (i = 0; i < 100; i++) {
		snprintf(keys[i], sizeof keys[i], "k%d", i);
		idmap_put(&m, keys[i], &seen[i]);
		seen[i] = 0;
	}
	pos = 0;
	while (idmap_next(&m, &pos, &k, &v)) {
		i = atoi(k + 1);
		assert_ptr_equal(v, &seen[i]);
		assert_ptr_equal(k, keys[i]);
		seen[i]++;
		n++;
	}
	assert_int_equal(n, 100);
	for (i = 0; i < 100; i++)
		assert_int_equal(seen[i], 1);
	idmap_free(&m);
}

/*
 * Keys whose hashes share their low bits, so they crowd one probe chain
 * (and wrap around the table's end): found while in the map, gone once
 * deleted, in every deletion order the test tries.
 */
static void
test_collisions(void **state)
{
	enum {
		NK = 40
	};
	char keys[NK][24], tmp[24];
	struct idmap m;
	size_t want, i, j, l, found = 0, round;
	uint64_t h;
	int dummy;

	(void)state;
	for (round = 0; round < 3; round++) {
		idmap_init(&m, 0);
		/* Draw the map's key, then keep only keys of one low part. */
		assert_int_equal(idmap_put(&m, "seed", &dummy), 0);
		want = round == 0 ? 0 : 127; /* 127: the last slot, wraps */
		for (i = 0, found = 0; found < NK && i < 10000000; i++) {
			snprintf(tmp, sizeof tmp, "c%zu-%zu", round, i);
			h = siphash(&m.im_key, tmp, strlen(tmp));
			if ((h & 127) == want)
				memcpy(keys[found++], tmp, sizeof tmp);
		}
		assert_int_equal(found, NK);
		/* 41 keys: 128 slots at most, all on one chain. */
		for (i = 0; i < NK; i++)
			assert_int_equal(idmap_put(&m, keys[i], keys[i]), 0);
		assert_int_equal(idmap_slots(&m), 64 * (1 + (NK + 1 > 48)));
		for (i = 0; i < NK; i++)
			assert_ptr_equal(idmap_find(&m, keys[i]), keys[i]);
		assert_ptr_equal(idmap_find(&m, "seed"), &dummy);
		/* Delete from the front, the back, or the middle out. */
		for (i = 0; i < NK; i++) {
			j = round == 0   ? i
			    : round == 1 ? NK - 1 - i
					 : (i * 17) % NK;
			assert_ptr_equal(idmap_del(&m, keys[j]), keys[j]);
			assert_null(idmap_find(&m, keys[j]));
			keys[j][0] = '\0';
			for (l = 0; l < NK; l++) {
				if (keys[l][0] != '\0')
					assert_ptr_equal(
					    idmap_find(&m, keys[l]), keys[l]);
			}
		}
		assert_ptr_equal(idmap_find(&m, "seed"), &dummy);
		idmap_free(&m);
	}
}

/* Each map draws its own key, and so does each process. */
static void
test_random_key(void **state)
{
	struct idmap a, b;
	struct sipkey child;
	int fds[2], x;
	pid_t pid;

	(void)state;
	idmap_init(&a, 0);
	idmap_init(&b, 0);
	idmap_put(&a, "x", &x);
	idmap_put(&b, "x", &x);
	assert_true(a.im_key.sk_k0 != b.im_key.sk_k0 ||
	    a.im_key.sk_k1 != b.im_key.sk_k1);
	assert_true(a.im_key.sk_k0 != 0 || a.im_key.sk_k1 != 0);
	/* A key survives the table: emptied and refilled, same key. */
	child = a.im_key;
	idmap_del(&a, "x");
	idmap_put(&a, "y", &x);
	assert_true(a.im_key.sk_k0 == child.sk_k0);
	assert_int_equal(pipe(fds), 0);
	if ((pid = fork()) == 0) {
		struct idmap c;

		idmap_init(&c, 0);
		idmap_put(&c, "x", &x);
		if (write(fds[1], &c.im_key, sizeof c.im_key) !=
		    (ssize_t)sizeof c.im_key)
			_exit(1);
		_exit(0);
	}
	assert_true(pid > 0);
	assert_int_equal(read(fds[0], &child, sizeof child), sizeof child);
	waitpid(pid, NULL, 0);
	close(fds[0]);
	close(fds[1]);
	assert_true(
	    child.sk_k0 != a.im_key.sk_k0 || child.sk_k1 != a.im_key.sk_k1);
	assert_true(
	    child.sk_k0 != b.im_key.sk_k0 || child.sk_k1 != b.im_key.sk_k1);
	idmap_free(&a);
	idmap_free(&b);
}

/* An exchange as the linear lookup walked them. */
struct bench_x {
	TAILQ_ENTRY(bench_x) bx_entry;
	char bx_id[TUNPROTO_UUID_LEN + 1];
};
TAILQ_HEAD(bench_list, bench_x);

/* The old lookup: a walk of the list. */
static struct bench_x *
bench_linear(struct bench_list *l, const char *id)
{
	struct bench_x *x;

	TAILQ_FOREACH (x, l, bx_entry) {
		if (strcmp(x->bx_id, id) == 0)
			return (x);
	}
	return (NULL);
}

/*
 * A bounded micro-benchmark: lookups of existing and unknown ids with n
 * exchanges, by walking a list and by the idmap; ns per lookup printed.
 * Each cell does at most ~10^7 string compares.
 */
static void
test_bench(void **state)
{
	static const size_t sizes[] = { 10, 1000, 10000 };
	struct bench_x *v, *x;
	struct bench_list l;
	struct idmap m;
	char(*miss)[TUNPROTO_UUID_LEN + 1];
	size_t s, i, n, q, nq, hits;
	uint64_t t0, lin_ns, map_ns, sip_ns, ossl_ns;
	struct sipkey k;
	uint8_t raw[16];
	EVP_MAC *mac;

	(void)state;
	printf("# idmap bench: lookups (half hits, half unknown ids), "
	       "ns per lookup\n");
	printf("# %8s %10s %10s %10s\n", "n", "linear", "idmap", "ratio");
	for (s = 0; s < sizeof sizes / sizeof *sizes; s++) {
		n = sizes[s];
		nq = n >= 10000 ? 2000 : 20000;
		v = calloc(n, sizeof *v);
		miss = calloc(nq, sizeof *miss);
		assert_non_null(v);
		assert_non_null(miss);
		TAILQ_INIT(&l);
		idmap_init(&m, 0);
		for (i = 0; i < n; i++) {
			tunproto_uuid_random(v[i].bx_id);
			TAILQ_INSERT_TAIL(&l, &v[i], bx_entry);
			idmap_put(&m, v[i].bx_id, &v[i]);
		}
		for (i = 0; i < nq; i++)
			tunproto_uuid_random(miss[i]);
		hits = 0;
		t0 = clock_mono_usec();
		for (q = 0; q < nq; q++) {
			x = bench_linear(
			    &l, q % 2 ? miss[q] : v[(q * 7919) % n].bx_id);
			hits += x != NULL;
		}
		lin_ns = (clock_mono_usec() - t0) * 1000 / nq;
		assert_int_equal(hits, (nq + 1) / 2);
		hits = 0;
		t0 = clock_mono_usec();
		for (q = 0; q < nq; q++) {
			x = idmap_find(
			    &m, q % 2 ? miss[q] : v[(q * 7919) % n].bx_id);
			hits += x != NULL;
		}
		map_ns = (clock_mono_usec() - t0) * 1000 / nq;
		assert_int_equal(hits, (nq + 1) / 2);
		printf("  %8zu %10llu %10llu %9.1fx\n", n,
		    (unsigned long long)lin_ns, (unsigned long long)map_ns,
		    map_ns > 0 ? (double)lin_ns / (double)map_ns : 0.0);
		idmap_free(&m);
		free(v);
		free(miss);
	}
	/* The hash itself: ours against OpenSSL's EVP_MAC, a UUID's length. */
	paper_key(&k, raw);
	assert_non_null(mac = EVP_MAC_fetch(NULL, "SIPHASH", NULL));
	nq = 20000;
	t0 = clock_mono_usec();
	for (q = 0, hits = 0; q < nq; q++)
		hits += siphash(&k, "00112233-4455-6677-8899-aabbccddeeff",
			    TUNPROTO_UUID_LEN) &
		    1;
	sip_ns = (clock_mono_usec() - t0) * 1000 / nq;
	t0 = clock_mono_usec();
	for (q = 0; q < nq; q++)
		hits += ossl_siphash(mac, raw,
			    "00112233-4455-6677-8899-aabbccddeeff",
			    TUNPROTO_UUID_LEN) &
		    1;
	ossl_ns = (clock_mono_usec() - t0) * 1000 / nq;
	EVP_MAC_free(mac);
	printf("# SipHash-2-4 of 36 bytes: ours %llu ns, EVP_MAC %llu ns "
	       "(checksum %zu)\n",
	    (unsigned long long)sip_ns, (unsigned long long)ossl_ns, hits);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_siphash_vectors),
		cmocka_unit_test(test_siphash_fold),
		cmocka_unit_test(test_basic),
		cmocka_unit_test(test_grow_shrink),
		cmocka_unit_test(test_walk),
		cmocka_unit_test(test_collisions),
		cmocka_unit_test(test_random_key),
		cmocka_unit_test(test_bench),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
