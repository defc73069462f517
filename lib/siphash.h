/*
 * SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
 * 2012): a keyed hash for tables whose keys a peer chooses, so that it
 * cannot aim its keys at one bucket without knowing the key.
 */
#ifndef AK_SIPHASH_H
#define AK_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* A 128-bit SipHash key, as two little-endian words. */
struct sipkey {
	uint64_t sk_k0;
	uint64_t sk_k1;
};

void sipkey_random(struct sipkey *);
void sipkey_from_bytes(struct sipkey *, const uint8_t[16]);
uint64_t siphash(const struct sipkey *, const void *, size_t);
uint64_t siphash_fold(const struct sipkey *, const void *, size_t);

#endif
