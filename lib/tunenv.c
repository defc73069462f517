/*
 * Reverse-tunnel protocol v2: what is not JSON (tunnel-protocol.md §3.2,
 * §4.1): UUIDs in their canonical text form, random ones, and the binary
 * data envelope that carries body and WebSocket bytes.  The JSON control
 * messages are lib/tunproto.c's.
 */
#include <sys/types.h>
#include <sys/random.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "tunproto.h"

/* Value of one hex digit, or -1 (lowercase only, as canonical text is). */
static int
tunproto_hex(char c)
{
	if (c >= '0' && c <= '9')
		return (c - '0');
	if (c >= 'a' && c <= 'f')
		return (c - 'a' + 10);
	return (-1);
}

/*
 * Parse canonical lowercase UUID text into 16 bytes (out may be NULL to
 * validate only). Returns 0, or -1 if s is not exactly that form.
 */
int
tunproto_uuid_parse(const char *s, uint8_t *out)
{
	uint8_t b[16];
	size_t i, n = 0;
	int hi, lo;

	if (s == NULL)
		return (-1);
	for (i = 0; i < TUNPROTO_UUID_LEN; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return (-1);
			continue;
		}
		if ((hi = tunproto_hex(s[i])) == -1 ||
		    (lo = tunproto_hex(s[i + 1])) == -1)
			return (-1);
		b[n++] = (uint8_t)(hi << 4 | lo);
		i++;
	}
	if (s[TUNPROTO_UUID_LEN] != '\0')
		return (-1);
	if (out != NULL)
		memcpy(out, b, sizeof b);
	return (0);
}

/* Is s canonical lowercase UUID text? */
int
tunproto_uuid_valid(const char *s)
{
	return (tunproto_uuid_parse(s, NULL) == 0);
}

/* Render 16 bytes as canonical lowercase UUID text into out[37]. */
void
tunproto_uuid_format(const uint8_t *in, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i, o = 0;

	for (i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			out[o++] = '-';
		out[o++] = hex[in[i] >> 4];
		out[o++] = hex[in[i] & 0x0f];
	}
	out[o] = '\0';
}

/*
 * Random bytes for ids, taken from the kernel 512 at a time: one
 * getrandom(2) per request was a tenth of the gateway's system calls on a
 * tunnel. Per thread, so loops never share; nothing forks without exec.
 */
#define TUNPROTO_RAND_POOL 512

/* Fill b with n (at most TUNPROTO_RAND_POOL) random bytes; 0 or -1. */
static int
tunproto_random(uint8_t *b, size_t n)
{
	static __thread uint8_t pool[TUNPROTO_RAND_POOL];
	static __thread size_t left;
	size_t got = 0;
	ssize_t r;

	if (left < n) {
		while (got < sizeof pool) {
			r = getrandom(pool + got, sizeof pool - got, 0);
			if (r < 0) {
				if (errno == EINTR)
					continue;
				return (-1);
			}
			got += (size_t)r;
		}
		left = sizeof pool;
	}
	memcpy(b, pool + sizeof pool - left, n);
	/* Used bytes are not kept. */
	memset(pool + sizeof pool - left, 0, n);
	left -= n;
	return (0);
}

/* Write a random version 4 UUID into out[37]. Returns 0, or -1 on failure. */
int
tunproto_uuid_random(char *out)
{
	uint8_t b[16];

	if (tunproto_random(b, sizeof b) != 0)
		return (-1);
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	tunproto_uuid_format(b, out);
	return (0);
}

/* Store v big-endian in n bytes at p. */
static void
tunproto_put_be(uint8_t *p, uint64_t v, size_t n)
{
	while (n-- > 0) {
		p[n] = (uint8_t)v;
		v >>= 8;
	}
}

/* Read an n-byte big-endian number at p. */
static uint64_t
tunproto_get_be(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	while (n-- > 0)
		v = v << 8 | *p++;
	return (v);
}

/* Bytes the encoded envelope takes: header, offset if any, payload. */
size_t
tunproto_env_size(const struct tunproto_env *env)
{
	return (TUNPROTO_ENV_HEADER_SIZE +
	    ((env->e_flags & TUNPROTO_ENV_F_OFFSET) ? TUNPROTO_ENV_OFFSET_SIZE
						    : 0) +
	    env->e_len);
}

/*
 * Validate env against max_chunk and write its header (and offset) into
 * hdr, which holds TUNPROTO_ENV_PREFIX_MAX bytes; *hlen is what was
 * written. The payload itself is not copied. Returns 0 or -1 with *err.
 */
int
tunproto_env_encode_header(const struct tunproto_env *env, size_t max_chunk,
    uint8_t *hdr, size_t *hlen, char **err)
{
	uint8_t id[16];
	size_t wire;

	/* Checks in the order of the reference encoder, then ours. */
	if (env->e_len > max_chunk)
		return (tunproto_fail(err,
		    "binary payload exceeds negotiated chunk limit: %zu > %zu",
		    env->e_len, max_chunk));
	if (tunproto_uuid_parse(env->e_id, id) != 0)
		return (
		    tunproto_fail(err, "binary envelope id must be a UUID"));
	if (env->e_kind < TUNPROTO_ENV_HTTP_REQUEST_DATA ||
	    env->e_kind > TUNPROTO_ENV_WS_BINARY_DATA)
		return (tunproto_fail(
		    err, "unknown binary envelope kind: %u", env->e_kind));
	if (env->e_flags & ~(TUNPROTO_ENV_F_END | TUNPROTO_ENV_F_OFFSET))
		return (tunproto_fail(
		    err, "unknown binary envelope flags: 0x%x", env->e_flags));
	wire = env->e_len;
	if (env->e_flags & TUNPROTO_ENV_F_OFFSET)
		wire += TUNPROTO_ENV_OFFSET_SIZE;
	if (env->e_len > UINT32_MAX - TUNPROTO_ENV_OFFSET_SIZE)
		return (tunproto_fail(err, "binary payload size overflow"));

	hdr[0] = TUNPROTO_ENV_MAGIC0;
	hdr[1] = TUNPROTO_ENV_MAGIC1;
	hdr[2] = TUNPROTO_ENV_VERSION;
	hdr[3] = env->e_kind;
	hdr[4] = TUNPROTO_ENV_ID_LEN;
	memcpy(hdr + 5, id, sizeof id);
	hdr[21] = env->e_flags;
	tunproto_put_be(hdr + 22, wire, 4);
	*hlen = TUNPROTO_ENV_HEADER_SIZE;
	if (env->e_flags & TUNPROTO_ENV_F_OFFSET) {
		tunproto_put_be(hdr + *hlen, env->e_offset, 8);
		*hlen += TUNPROTO_ENV_OFFSET_SIZE;
	}
	return (0);
}

/*
 * Encode env into the size bytes at buf; *outlen is the length written.
 * Returns 0, or -1 with *err (also when buf is too small).
 */
int
tunproto_env_encode(const struct tunproto_env *env, size_t max_chunk,
    uint8_t *buf, size_t size, size_t *outlen, char **err)
{
	uint8_t hdr[TUNPROTO_ENV_PREFIX_MAX];
	size_t hlen;

	if (tunproto_env_encode_header(env, max_chunk, hdr, &hlen, err) != 0)
		return (-1);
	if (size < hlen || size - hlen < env->e_len)
		return (tunproto_fail(err,
		    "binary envelope needs %zu bytes, buffer has %zu",
		    hlen + env->e_len, size));
	memcpy(buf, hdr, hlen);
	if (env->e_len != 0)
		memcpy(buf + hlen, env->e_payload, env->e_len);
	*outlen = hlen + env->e_len;
	return (0);
}

/*
 * Encode env into a new buffer (free with free); *outlen is its length.
 * Returns NULL with *err if env is invalid.
 */
uint8_t *
tunproto_env_encode_alloc(const struct tunproto_env *env, size_t max_chunk,
    size_t *outlen, char **err)
{
	uint8_t hdr[TUNPROTO_ENV_PREFIX_MAX], *buf;
	size_t hlen;

	if (tunproto_env_encode_header(env, max_chunk, hdr, &hlen, err) != 0)
		return (NULL);
	buf = xmalloc(hlen + env->e_len);
	memcpy(buf, hdr, hlen);
	if (env->e_len != 0)
		memcpy(buf + hlen, env->e_payload, env->e_len);
	*outlen = hlen + env->e_len;
	return (buf);
}

/*
 * Decode one binary envelope of len bytes, checking in the order of §3.2
 * with its messages; max_chunk is the negotiated max_stream_chunk (the
 * configured one before negotiation). env->e_payload points into buf.
 * Returns 0, or -1 with *err: a protocol error.
 */
int
tunproto_env_decode(const uint8_t *buf, size_t len, size_t max_chunk,
    struct tunproto_env *env, char **err)
{
	size_t hlen;

	if (tunproto_env_decode_prefix(buf, len, max_chunk, env, &hlen, err) !=
	    0)
		return (-1);
	env->e_payload = buf + hlen;
	return (0);
}

/*
 * Decode a binary envelope of len bytes as tunproto_env_decode, from its
 * first bytes only: buf holds at least the first TUNPROTO_ENV_PREFIX_MAX
 * of them (all of them, if there are fewer).  env->e_payload is NULL; the
 * payload is the last env->e_len of the len bytes, after *hlen bytes of
 * header.  Returns 0, or -1 with *err.
 */
int
tunproto_env_decode_prefix(const uint8_t *buf, size_t len, size_t max_chunk,
    struct tunproto_env *env, size_t *hlen, char **err)
{
	uint64_t wire;
	size_t limit, have;

	memset(env, 0, sizeof *env);
	if (len < TUNPROTO_ENV_HEADER_SIZE)
		return (tunproto_fail(
		    err, "binary envelope is shorter than its header"));
	if (buf[0] != TUNPROTO_ENV_MAGIC0 || buf[1] != TUNPROTO_ENV_MAGIC1)
		return (tunproto_fail(err, "invalid binary envelope magic"));
	if (buf[2] != TUNPROTO_ENV_VERSION)
		return (tunproto_fail(
		    err, "unsupported binary envelope version: %u", buf[2]));
	if (buf[4] != TUNPROTO_ENV_ID_LEN)
		return (tunproto_fail(
		    err, "invalid binary envelope UUID length: %u", buf[4]));
	if (buf[3] < TUNPROTO_ENV_HTTP_REQUEST_DATA ||
	    buf[3] > TUNPROTO_ENV_WS_BINARY_DATA)
		return (tunproto_fail(
		    err, "unknown binary envelope kind: %u", buf[3]));
	if (buf[21] & ~(TUNPROTO_ENV_F_END | TUNPROTO_ENV_F_OFFSET))
		return (tunproto_fail(
		    err, "unknown binary envelope flags: 0x%x", buf[21]));

	wire = tunproto_get_be(buf + 22, 4);
	limit = max_chunk;
	if (buf[21] & TUNPROTO_ENV_F_OFFSET)
		limit = (max_chunk > SIZE_MAX - TUNPROTO_ENV_OFFSET_SIZE)
		    ? SIZE_MAX
		    : max_chunk + TUNPROTO_ENV_OFFSET_SIZE;
	if (wire > limit)
		return (tunproto_fail(err,
		    "binary payload exceeds negotiated chunk limit: "
		    "%llu > %zu",
		    (unsigned long long)wire, limit));
	have = len - TUNPROTO_ENV_HEADER_SIZE;
	if (have != wire)
		return (tunproto_fail(err,
		    "binary payload length mismatch: %zu != %llu", have,
		    (unsigned long long)wire));

	env->e_kind = buf[3];
	env->e_flags = buf[21];
	tunproto_uuid_format(buf + 5, env->e_id);
	env->e_len = have;
	*hlen = TUNPROTO_ENV_HEADER_SIZE;
	if (env->e_flags & TUNPROTO_ENV_F_OFFSET) {
		if (have < TUNPROTO_ENV_OFFSET_SIZE) {
			memset(env, 0, sizeof *env);
			return (tunproto_fail(err,
			    "offset binary envelope payload is too short"));
		}
		env->e_offset = tunproto_get_be(
		    buf + TUNPROTO_ENV_HEADER_SIZE, 8);
		*hlen += TUNPROTO_ENV_OFFSET_SIZE;
		env->e_len -= TUNPROTO_ENV_OFFSET_SIZE;
	}
	/* Unreachable after check 7, kept as the reference has it. */
	if (env->e_len > max_chunk) {
		have = env->e_len;
		memset(env, 0, sizeof *env);
		return (tunproto_fail(err,
		    "binary payload exceeds negotiated chunk limit: %zu > %zu",
		    have, max_chunk));
	}
	return (0);
}
