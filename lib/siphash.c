/*
 * SipHash-2-4, written from the paper's description: two compression
 * rounds per 8-byte word, four finalisation rounds.  siphash_fold hashes
 * the ASCII lower-case form of its input without copying it, for keys that
 * compare case-insensitively (host names).
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log.h"
#include "siphash.h"

#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

/* One SipRound over the state v0..v3. */
#define SIP_ROUND(v0, v1, v2, v3) \
	do { \
		v0 += v1; \
		v1 = SIP_ROTL(v1, 13); \
		v1 ^= v0; \
		v0 = SIP_ROTL(v0, 32); \
		v2 += v3; \
		v3 = SIP_ROTL(v3, 16); \
		v3 ^= v2; \
		v0 += v3; \
		v3 = SIP_ROTL(v3, 21); \
		v3 ^= v0; \
		v2 += v1; \
		v1 = SIP_ROTL(v1, 17); \
		v1 ^= v2; \
		v2 = SIP_ROTL(v2, 32); \
	} while (0)

/* Draw a key from the kernel's random pool; without one we cannot run. */
void
sipkey_random(struct sipkey *k)
{
	uint8_t b[16];
	size_t got = 0;
	ssize_t r;

	while (got < sizeof b) {
		r = getrandom(b + got, sizeof b - got, 0);
		if (r <= 0) {
			log_error("siphash: no random bytes for a hash key");
			abort();
		}
		got += (size_t)r;
	}
	sipkey_from_bytes(k, b);
	explicit_bzero(b, sizeof b);
}

/* The key made of 16 bytes, as the paper reads them (little-endian). */
void
sipkey_from_bytes(struct sipkey *k, const uint8_t b[16])
{
	uint64_t w;

	memcpy(&w, b, 8);
	k->sk_k0 = le64toh(w);
	memcpy(&w, b + 8, 8);
	k->sk_k1 = le64toh(w);
}

/* Eight ASCII letters at once to lower case; other bytes unchanged. */
static uint64_t
sip_lower(uint64_t w)
{
	const uint64_t hi = 0x8080808080808080ULL;
	const uint64_t lo7 = 0x7f7f7f7f7f7f7f7fULL;
	uint64_t h = w & lo7;
	/* High bit of each byte: >= 'A', and > 'Z' (seven-bit values). */
	uint64_t ge_a = h + 0x3f3f3f3f3f3f3f3fULL;
	uint64_t gt_z = h + 0x2525252525252525ULL;
	uint64_t upper = (ge_a ^ gt_z) & ~w & hi;

	return (w | (upper >> 2));
}

/* SipHash-2-4 of len bytes at p, folded to lower case when fold is set. */
static uint64_t
sip_hash(const struct sipkey *k, const uint8_t *p, size_t len, int fold)
{
	uint64_t v0 = k->sk_k0 ^ 0x736f6d6570736575ULL;
	uint64_t v1 = k->sk_k1 ^ 0x646f72616e646f6dULL;
	uint64_t v2 = k->sk_k0 ^ 0x6c7967656e657261ULL;
	uint64_t v3 = k->sk_k1 ^ 0x7465646279746573ULL;
	uint64_t m, b = (uint64_t)len << 56;
	const uint8_t *end = p + (len & ~(size_t)7);
	uint8_t tail[8];

	for (; p != end; p += 8) {
		memcpy(&m, p, 8);
		m = le64toh(m);
		if (fold)
			m = sip_lower(m);
		v3 ^= m;
		SIP_ROUND(v0, v1, v2, v3);
		SIP_ROUND(v0, v1, v2, v3);
		v0 ^= m;
	}
	memset(tail, 0, sizeof tail);
	memcpy(tail, p, len & 7);
	memcpy(&m, tail, 8);
	m = le64toh(m);
	if (fold)
		m = sip_lower(m);
	b |= m;
	v3 ^= b;
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	v0 ^= b;
	v2 ^= 0xff;
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	SIP_ROUND(v0, v1, v2, v3);
	return (v0 ^ v1 ^ v2 ^ v3);
}

/* SipHash-2-4 of len bytes at p under key k. */
uint64_t
siphash(const struct sipkey *k, const void *p, size_t len)
{
	return (sip_hash(k, p, len, 0));
}

/* SipHash-2-4 of the ASCII lower-case form of len bytes at p. */
uint64_t
siphash_fold(const struct sipkey *k, const void *p, size_t len)
{
	return (sip_hash(k, p, len, 1));
}
