/*
 * Unit tests for lib/tunproto.c and lib/tunenv.c: the binary envelope with the §3.2 test
 * vectors and every decoder error, each control message both ways, header
 * shapes, base64, null handling, hello negotiation and the YR_TUNNEL_*
 * limits. Conformance scenarios of tunnel-protocol.md §13 that are pure
 * codec or negotiation are named in a comment above their test.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tunproto.h"

#define TEST_ID "00112233-4455-6677-8899-aabbccddeeff"
#define TEST_SESSION "2f6c3c52-8a8e-4a31-9a0e-0c1b6d9d2f10"

/* §3.2 vector 1: kind 1, no flags, payload "payload". */
static const uint8_t test_vec1[] = { 0x59, 0x44, 0x01, 0x01, 0x10, 0x00, 0x11,
	0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
	0xee, 0xff, 0x00, 0x00, 0x00, 0x00, 0x07, 0x70, 0x61, 0x79, 0x6c, 0x6f,
	0x61, 0x64 };

/* §3.2 vector 2: kind 2, HAS_OFFSET, offset 123, payload "chunk". */
static const uint8_t test_vec2[] = { 0x59, 0x44, 0x01, 0x02, 0x10, 0x00, 0x11,
	0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
	0xee, 0xff, 0x02, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x7b, 0x63, 0x68, 0x75, 0x6e, 0x6b };

/* §3.2 vector 3: kind 3, END_OF_BODY, empty payload. */
static const uint8_t test_vec3[] = { 0x59, 0x44, 0x01, 0x03, 0x10, 0x00, 0x11,
	0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
	0xee, 0xff, 0x01, 0x00, 0x00, 0x00, 0x00 };

/* Name/value pairs standing in for the environment. */
struct test_env {
	const char *const *vars; /* name, value, ..., NULL */
};

/* Look name up in a struct test_env. */
static const char *
test_getenv(const char *name, void *arg)
{
	const struct test_env *e = arg;
	const char *const *v;

	for (v = e->vars; *v != NULL; v += 2) {
		if (strcmp(v[0], name) == 0)
			return (v[1]);
	}
	return (NULL);
}

/* Fill an envelope description. */
static void
test_env_set(struct tunproto_env *e, uint8_t kind, uint8_t flags,
    uint64_t offset, const char *payload)
{
	memset(e, 0, sizeof *e);
	e->e_kind = kind;
	e->e_flags = flags;
	snprintf(e->e_id, sizeof e->e_id, "%s", TEST_ID);
	e->e_offset = offset;
	e->e_payload = (const uint8_t *)payload;
	e->e_len = strlen(payload);
}

/* Encode e with max_chunk and require exactly the len bytes at want. */
static void
test_env_encodes_to(const struct tunproto_env *e, size_t max_chunk,
    const uint8_t *want, size_t len)
{
	uint8_t buf[128], *p;
	size_t n = 0;
	char *err = NULL;

	assert_int_equal(tunproto_env_size(e), len);
	assert_int_equal(
	    tunproto_env_encode(e, max_chunk, buf, sizeof buf, &n, &err), 0);
	assert_null(err);
	assert_int_equal(n, len);
	assert_memory_equal(buf, want, len);

	p = tunproto_env_encode_alloc(e, max_chunk, &n, &err);
	assert_non_null(p);
	assert_int_equal(n, len);
	assert_memory_equal(p, want, len);
	free(p);
}

/*
 * Decode from a copy of only the first bytes tunproto_env_decode_prefix
 * may read (so a read past them is caught by ASan), with the same result
 * as tunproto_env_decode: want is NULL for success.
 */
static void
test_prefix_fails(
    const uint8_t *buf, size_t len, size_t max_chunk, const char *want)
{
	struct tunproto_env e, full;
	size_t n = len < TUNPROTO_ENV_PREFIX_MAX ? len
						 : TUNPROTO_ENV_PREFIX_MAX;
	size_t hlen = 0;
	uint8_t *head = malloc(n + 1);
	char *err = NULL;

	assert_non_null(head);
	memcpy(head, buf, n);
	if (want != NULL) {
		assert_int_equal(tunproto_env_decode_prefix(
				     head, len, max_chunk, &e, &hlen, &err),
		    -1);
		assert_non_null(err);
		assert_string_equal(err, want);
		free(err);
	} else {
		assert_int_equal(tunproto_env_decode_prefix(
				     head, len, max_chunk, &e, &hlen, NULL),
		    0);
		assert_int_equal(
		    tunproto_env_decode(buf, len, max_chunk, &full, NULL), 0);
		assert_null(e.e_payload);
		assert_ptr_equal(full.e_payload, buf + hlen);
		assert_int_equal(e.e_len, full.e_len);
		assert_int_equal(hlen + e.e_len, len);
		assert_int_equal(e.e_kind, full.e_kind);
		assert_int_equal(e.e_flags, full.e_flags);
		assert_int_equal(e.e_offset, full.e_offset);
		assert_string_equal(e.e_id, full.e_id);
	}
	free(head);
}

/* Decode len bytes with max_chunk and require the error message want. */
static void
test_env_fails(
    const uint8_t *buf, size_t len, size_t max_chunk, const char *want)
{
	struct tunproto_env e;
	char *err = NULL;

	assert_int_equal(
	    tunproto_env_decode(buf, len, max_chunk, &e, &err), -1);
	assert_non_null(err);
	assert_string_equal(err, want);
	free(err);
	/* No error text wanted: still refused, nothing allocated. */
	assert_int_equal(
	    tunproto_env_decode(buf, len, max_chunk, &e, NULL), -1);
	test_prefix_fails(buf, len, max_chunk, want);
}

/* Scenario 1: vector 1 encodes exactly and decodes back. */
static void
test_env_vector1(void **state)
{
	struct tunproto_env e, d;
	char *err = NULL;

	(void)state;
	test_env_set(&e, TUNPROTO_ENV_HTTP_REQUEST_DATA, 0, 0, "payload");
	test_env_encodes_to(&e, 65536, test_vec1, sizeof test_vec1);
	assert_int_equal(sizeof test_vec1, 33);

	assert_int_equal(
	    tunproto_env_decode(test_vec1, sizeof test_vec1, 65536, &d, &err),
	    0);
	assert_null(err);
	assert_int_equal(d.e_kind, TUNPROTO_ENV_HTTP_REQUEST_DATA);
	assert_int_equal(d.e_flags, 0);
	assert_string_equal(d.e_id, TEST_ID);
	assert_int_equal(d.e_len, 7);
	assert_memory_equal(d.e_payload, "payload", 7);
	assert_ptr_equal(d.e_payload, test_vec1 + 26);
	test_prefix_fails(test_vec1, sizeof test_vec1, 65536, NULL);
}

/* Scenario 5: vector 2, and the offset does not use the payload allowance. */
static void
test_env_vector2(void **state)
{
	struct tunproto_env e, d;

	(void)state;
	test_env_set(&e, TUNPROTO_ENV_HTTP_RESPONSE_DATA, TUNPROTO_ENV_F_OFFSET,
	    123, "chunk");
	test_env_encodes_to(&e, 65536, test_vec2, sizeof test_vec2);
	/* Max payload 5 with a 5-byte payload plus offset still round-trips. */
	test_env_encodes_to(&e, 5, test_vec2, sizeof test_vec2);
	assert_int_equal(sizeof test_vec2, 39);

	assert_int_equal(
	    tunproto_env_decode(test_vec2, sizeof test_vec2, 5, &d, NULL), 0);
	assert_int_equal(d.e_kind, TUNPROTO_ENV_HTTP_RESPONSE_DATA);
	assert_int_equal(d.e_flags, TUNPROTO_ENV_F_OFFSET);
	assert_int_equal(d.e_offset, 123);
	assert_string_equal(d.e_id, TEST_ID);
	assert_int_equal(d.e_len, 5);
	assert_memory_equal(d.e_payload, "chunk", 5);
	test_prefix_fails(test_vec2, sizeof test_vec2, 5, NULL);
}

/* Vector 3, and scenario 2: the END flag survives a round trip. */
static void
test_env_vector3(void **state)
{
	struct tunproto_env e, d;
	uint8_t *p;
	size_t n;

	(void)state;
	test_env_set(
	    &e, TUNPROTO_ENV_WS_BINARY_DATA, TUNPROTO_ENV_F_END, 0, "");
	test_env_encodes_to(&e, 65536, test_vec3, sizeof test_vec3);
	assert_int_equal(
	    tunproto_env_decode(test_vec3, sizeof test_vec3, 65536, &d, NULL),
	    0);
	assert_int_equal(d.e_kind, TUNPROTO_ENV_WS_BINARY_DATA);
	assert_int_equal(d.e_flags, TUNPROTO_ENV_F_END);
	assert_int_equal(d.e_len, 0);
	test_prefix_fails(test_vec3, sizeof test_vec3, 65536, NULL);

	/* Scenario 2: kind 2, END_OF_BODY, payload "last". */
	test_env_set(
	    &e, TUNPROTO_ENV_HTTP_RESPONSE_DATA, TUNPROTO_ENV_F_END, 0, "last");
	p = tunproto_env_encode_alloc(&e, 65536, &n, NULL);
	assert_non_null(p);
	assert_int_equal(tunproto_env_decode(p, n, 65536, &d, NULL), 0);
	assert_int_equal(d.e_kind, TUNPROTO_ENV_HTTP_RESPONSE_DATA);
	assert_true(d.e_flags & TUNPROTO_ENV_F_END);
	assert_int_equal(d.e_len, 4);
	assert_memory_equal(d.e_payload, "last", 4);
	free(p);
}

/* Scenario 3 and every §3.2 decoder error, with its exact message. */
static void
test_env_decode_errors(void **state)
{
	uint8_t b[64];

	(void)state;
	/* 1. First 25 bytes only. */
	test_env_fails(
	    test_vec1, 25, 65536, "binary envelope is shorter than its header");
	test_env_fails(
	    test_vec1, 0, 65536, "binary envelope is shorter than its header");
	/* 2. Magic replaced by "NO". */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[0] = 'N';
	b[1] = 'O';
	test_env_fails(
	    b, sizeof test_vec1, 65536, "invalid binary envelope magic");
	/* 3. Version 2. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[2] = 2;
	test_env_fails(b, sizeof test_vec1, 65536,
	    "unsupported binary envelope version: 2");
	/* 4. Id length 0x0f. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[4] = 0x0f;
	test_env_fails(b, sizeof test_vec1, 65536,
	    "invalid binary envelope UUID length: 15");
	/* 5. Kind 0xff, and kind 0. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[3] = 0xff;
	test_env_fails(
	    b, sizeof test_vec1, 65536, "unknown binary envelope kind: 255");
	b[3] = 0;
	test_env_fails(
	    b, sizeof test_vec1, 65536, "unknown binary envelope kind: 0");
	/* 6. An unknown flag bit. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[21] = 0x04;
	test_env_fails(
	    b, sizeof test_vec1, 65536, "unknown binary envelope flags: 0x4");
	b[21] = 0x83;
	test_env_fails(
	    b, sizeof test_vec1, 65536, "unknown binary envelope flags: 0x83");
	/* 7. Wire length over the chunk limit (+8 with an offset). */
	test_env_fails(test_vec1, sizeof test_vec1, 6,
	    "binary payload exceeds negotiated chunk limit: 7 > 6");
	test_env_fails(test_vec2, sizeof test_vec2, 4,
	    "binary payload exceeds negotiated chunk limit: 13 > 12");
	/* 8. A valid frame minus its last byte, or with one byte more. */
	test_env_fails(test_vec1, sizeof test_vec1 - 1, 65536,
	    "binary payload length mismatch: 6 != 7");
	memcpy(b, test_vec1, sizeof test_vec1);
	b[sizeof test_vec1] = 'x';
	test_env_fails(b, sizeof test_vec1 + 1, 65536,
	    "binary payload length mismatch: 8 != 7");
	/* 9. HAS_OFFSET with fewer than 8 bytes. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[21] = TUNPROTO_ENV_F_OFFSET;
	test_env_fails(b, sizeof test_vec1, 65536,
	    "offset binary envelope payload is too short");
	/*
	 * 10. The payload check after the offset cannot fail once check 7
	 * passed (wire <= max + 8 leaves payload <= max); it is there only
	 * because the reference has it.
	 */
}

/* Each check runs before the next: a frame with two faults reports the first. */
static void
test_env_decode_order(void **state)
{
	uint8_t b[64];

	(void)state;
	/* Magic before version. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[0] = 0;
	b[2] = 9;
	test_env_fails(
	    b, sizeof test_vec1, 65536, "invalid binary envelope magic");
	/* Version before id length. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[2] = 9;
	b[4] = 1;
	test_env_fails(b, sizeof test_vec1, 65536,
	    "unsupported binary envelope version: 9");
	/* Id length before kind (the §3.2 order; Rust checks kind first). */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[3] = 7;
	b[4] = 1;
	test_env_fails(b, sizeof test_vec1, 65536,
	    "invalid binary envelope UUID length: 1");
	/* Kind before flags. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[3] = 7;
	b[21] = 0x10;
	test_env_fails(
	    b, sizeof test_vec1, 65536, "unknown binary envelope kind: 7");
	/* Flags before the chunk limit. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[21] = 0x10;
	test_env_fails(
	    b, sizeof test_vec1, 1, "unknown binary envelope flags: 0x10");
	/* Chunk limit before the length match (wire length 0xffffffff). */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[22] = b[23] = b[24] = b[25] = 0xff;
	test_env_fails(b, sizeof test_vec1, 65536,
	    "binary payload exceeds negotiated chunk limit: 4294967295 > "
	    "65536");
	/* Length match before the offset check. */
	memcpy(b, test_vec1, sizeof test_vec1);
	b[21] = TUNPROTO_ENV_F_OFFSET;
	test_env_fails(b, sizeof test_vec1 - 1, 65536,
	    "binary payload length mismatch: 6 != 7");
}

/* Scenario 4 and the encoder's own refusals. */
static void
test_env_encode_errors(void **state)
{
	struct tunproto_env e, d;
	uint8_t buf[64];
	size_t n;
	char *err = NULL;
	static const uint8_t four[] = { 0x59, 0x44, 0x01, 0x01, 0x10, 0x00,
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
		0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00, 0x00, 0x00, 0x00, 0x04, 'a',
		'b', 'c', 'd' };

	(void)state;
	/* Scenario 4: decode max 3 of a 4-byte payload; encode likewise. */
	test_env_fails(four, sizeof four, 3,
	    "binary payload exceeds negotiated chunk limit: 4 > 3");
	assert_int_equal(
	    tunproto_env_decode(four, sizeof four, 4, &d, NULL), 0);
	test_env_set(&e, TUNPROTO_ENV_HTTP_REQUEST_DATA, 0, 0, "abcd");
	assert_int_equal(
	    tunproto_env_encode(&e, 3, buf, sizeof buf, &n, &err), -1);
	assert_string_equal(
	    err, "binary payload exceeds negotiated chunk limit: 4 > 3");
	free(err);
	err = NULL;
	assert_null(tunproto_env_encode_alloc(&e, 3, &n, NULL));

	/* The id must be canonical UUID text. */
	test_env_set(&e, TUNPROTO_ENV_HTTP_REQUEST_DATA, 0, 0, "x");
	snprintf(e.e_id, sizeof e.e_id, "request-1");
	assert_int_equal(
	    tunproto_env_encode(&e, 64, buf, sizeof buf, &n, &err), -1);
	assert_string_equal(err, "binary envelope id must be a UUID");
	free(err);
	err = NULL;

	/* Kind, flags, buffer size. */
	test_env_set(&e, 4, 0, 0, "x");
	assert_int_equal(
	    tunproto_env_encode(&e, 64, buf, sizeof buf, &n, &err), -1);
	assert_string_equal(err, "unknown binary envelope kind: 4");
	free(err);
	err = NULL;
	test_env_set(&e, TUNPROTO_ENV_WS_BINARY_DATA, 0x08, 0, "x");
	assert_int_equal(
	    tunproto_env_encode(&e, 64, buf, sizeof buf, &n, &err), -1);
	assert_string_equal(err, "unknown binary envelope flags: 0x8");
	free(err);
	err = NULL;
	test_env_set(&e, TUNPROTO_ENV_HTTP_RESPONSE_DATA, TUNPROTO_ENV_F_OFFSET,
	    0, "chunk");
	assert_int_equal(tunproto_env_encode(&e, 64, buf, 38, &n, &err), -1);
	assert_string_equal(
	    err, "binary envelope needs 39 bytes, buffer has 38");
	free(err);
	err = NULL;
	assert_int_equal(tunproto_env_encode(&e, 64, buf, 39, &n, &err), 0);
	assert_int_equal(n, 39);
}

/* The header alone can be written for a payload sent from elsewhere. */
static void
test_env_header_only(void **state)
{
	struct tunproto_env e;
	uint8_t hdr[TUNPROTO_ENV_PREFIX_MAX];
	size_t n;

	(void)state;
	test_env_set(&e, TUNPROTO_ENV_HTTP_RESPONSE_DATA, TUNPROTO_ENV_F_OFFSET,
	    123, "chunk");
	assert_int_equal(
	    tunproto_env_encode_header(&e, 65536, hdr, &n, NULL), 0);
	assert_int_equal(n, 34);
	assert_memory_equal(hdr, test_vec2, 34);
	/* Large offsets keep all 64 bits. */
	e.e_offset = 0x0102030405060708ULL;
	assert_int_equal(
	    tunproto_env_encode_header(&e, 65536, hdr, &n, NULL), 0);
	assert_memory_equal(hdr + 26, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
	/* The largest envelope: 26 + 8 + 65536 (§3.2). */
	assert_int_equal(TUNPROTO_ENV_PREFIX_MAX + TUNPROTO_CHUNK_CAP, 65570);
}

/* Canonical UUID text only; random ids are version 4. */
static void
test_uuid(void **state)
{
	uint8_t b[16];
	char s[TUNPROTO_UUID_LEN + 1], t[TUNPROTO_UUID_LEN + 1];

	(void)state;
	assert_int_equal(tunproto_uuid_parse(TEST_ID, b), 0);
	assert_memory_equal(b,
	    "\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\xdd\xee\xff",
	    16);
	tunproto_uuid_format(b, s);
	assert_string_equal(s, TEST_ID);

	assert_true(tunproto_uuid_valid(TEST_ID));
	assert_false(tunproto_uuid_valid(NULL));
	assert_false(tunproto_uuid_valid(""));
	assert_false(
	    tunproto_uuid_valid("00112233-4455-6677-8899-AABBCCDDEEFF"));
	assert_false(tunproto_uuid_valid("00112233445566778899aabbccddeeff"));
	assert_false(
	    tunproto_uuid_valid("0011223-34455-6677-8899-aabbccddeeff"));
	assert_false(
	    tunproto_uuid_valid("00112233-4455-6677-8899-aabbccddeef"));
	assert_false(
	    tunproto_uuid_valid("00112233-4455-6677-8899-aabbccddeeff0"));
	assert_false(
	    tunproto_uuid_valid("{00112233-4455-6677-8899-aabbccddeef}"));
	assert_false(
	    tunproto_uuid_valid("00112233-4455-6677-8899-aabbccddeeg0"));
	assert_false(tunproto_uuid_valid("request-1"));

	assert_int_equal(tunproto_uuid_random(s), 0);
	assert_int_equal(tunproto_uuid_random(t), 0);
	assert_true(tunproto_uuid_valid(s));
	assert_string_not_equal(s, t);
	assert_int_equal(s[14], '4');
	assert_non_null(strchr("89ab", s[19]));
}

/* Decode json and require result want; the message is freed. */
static void
test_decode_rv(const char *json, int want)
{
	struct tunproto_msg m;
	char *err = NULL;
	int rv;

	rv = tunproto_msg_decode(json, strlen(json), &m, &err);
	if (rv != want)
		fail_msg("%s: got %d (%s), want %d", json, rv,
		    err == NULL ? "no error" : err, want);
	if (want == TUNPROTO_DEC_OK)
		assert_null(err);
	else
		assert_non_null(err);
	free(err);
	if (want != TUNPROTO_DEC_MALFORMED && want != TUNPROTO_DEC_UNKNOWN)
		tunproto_msg_free(&m);
	else
		assert_int_equal(m.m_type, TUNPROTO_T_NONE);
}

/* Decode json, which must be well-formed, into m. */
static void
test_decode(const char *json, struct tunproto_msg *m)
{
	char *err = NULL;
	int rv;

	rv = tunproto_msg_decode(json, strlen(json), m, &err);
	if (rv != TUNPROTO_DEC_OK)
		fail_msg("%s: %d (%s)", json, rv, err == NULL ? "?" : err);
	assert_null(err);
}

/* Do two strings (either may be NULL) match? */
static void
test_same_str(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		assert_ptr_equal(a, b);
	else
		assert_string_equal(a, b);
}

/* Two messages must hold the same values. */
static void
test_same_msg(const struct tunproto_msg *a, const struct tunproto_msg *b)
{
	size_t i;

	assert_int_equal(a->m_type, b->m_type);
	assert_int_equal(a->m_flags, b->m_flags);
	test_same_str(a->m_id, b->m_id);
	test_same_str(a->m_method, b->m_method);
	test_same_str(a->m_path, b->m_path);
	assert_int_equal(a->m_nheaders, b->m_nheaders);
	for (i = 0; i < a->m_nheaders; i++) {
		assert_string_equal(
		    a->m_headers[i].h_name, b->m_headers[i].h_name);
		assert_string_equal(
		    a->m_headers[i].h_value, b->m_headers[i].h_value);
	}
	assert_int_equal(a->m_body_len, b->m_body_len);
	if (a->m_body_len != 0)
		assert_memory_equal(a->m_body, b->m_body, a->m_body_len);
	assert_int_equal(a->m_status, b->m_status);
	assert_int_equal(a->m_content_length, b->m_content_length);
	assert_int_equal(
	    a->m_limits.l_protocol_version, b->m_limits.l_protocol_version);
	assert_int_equal(
	    a->m_limits.l_max_stream_chunk, b->m_limits.l_max_stream_chunk);
	assert_int_equal(
	    a->m_limits.l_max_inflight, b->m_limits.l_max_inflight);
	assert_int_equal(a->m_limits.l_stream_window_frames,
	    b->m_limits.l_stream_window_frames);
	assert_int_equal(
	    a->m_limits.l_max_body_size, b->m_limits.l_max_body_size);
	assert_int_equal(a->m_limits.l_max_ws_message_size,
	    b->m_limits.l_max_ws_message_size);
	test_same_str(a->m_session_id, b->m_session_id);
	assert_int_equal(a->m_credits, b->m_credits);
	assert_int_equal(a->m_ack_offset, b->m_ack_offset);
	test_same_str(a->m_message, b->m_message);
	assert_int_equal(a->m_code, b->m_code);
	if (a->m_type == TUNPROTO_T_PING || a->m_type == TUNPROTO_T_PONG) {
		assert_true(a->m_timestamp == b->m_timestamp);
		assert_int_equal(a->m_timestamp_int, b->m_timestamp_int);
	}
}

/*
 * Encode m, require the text want (if not NULL), decode it back, compare,
 * and require decoding want to give the same message again. Frees m.
 */
static void
test_roundtrip(struct tunproto_msg *m, const char *want)
{
	struct tunproto_msg d, e;
	char *s, *s2;
	size_t len;

	s = tunproto_msg_encode(m, &len);
	assert_non_null(s);
	assert_int_equal(strlen(s), len);
	if (want != NULL)
		assert_string_equal(s, want);
	test_decode(s, &d);
	/* Fields the wire does not carry for this type read as defaults. */
	if (m->m_type == TUNPROTO_T_WS_CLOSE && m->m_reason == NULL)
		assert_string_equal(d.m_reason, "");
	else
		test_same_str(m->m_reason, d.m_reason);
	test_same_msg(m, &d);
	s2 = tunproto_msg_encode(&d, NULL);
	assert_string_equal(s, s2);
	test_decode(s2, &e);
	test_same_msg(&d, &e);
	free(s);
	free(s2);
	tunproto_msg_free(&d);
	tunproto_msg_free(&e);
	tunproto_msg_free(m);
}

/* Start a message of type t with id TEST_ID. */
static void
test_msg(struct tunproto_msg *m, enum tunproto_type t)
{
	memset(m, 0, sizeof *m);
	m->m_type = t;
	m->m_id = strdup(TEST_ID);
}

/* Every message type encodes to the §4 shape and decodes back. */
static void
test_msg_roundtrip_http(void **state)
{
	struct tunproto_msg m;

	(void)state;
	test_msg(&m, TUNPROTO_T_HTTP_REQ);
	m.m_method = strdup("POST");
	m.m_path = strdup("/chat?room=one");
	tunproto_msg_add_header(&m, "X-Tag", "one");
	tunproto_msg_add_header(&m, "X-Tag", "two");
	tunproto_msg_set_body(&m, "ok", 2);
	test_roundtrip(&m,
	    "{\"type\":\"http_req\",\"id\":\"" TEST_ID "\",\"method\":\"POST\","
	    "\"path\":\"/chat?room=one\",\"headers\":[[\"X-Tag\",\"one\"],"
	    "[\"X-Tag\",\"two\"]],\"body\":\"b2s=\"}");

	/* An empty body is "" and no headers is []. */
	test_msg(&m, TUNPROTO_T_HTTP_REQ);
	m.m_method = strdup("GET");
	m.m_path = strdup("/");
	test_roundtrip(&m,
	    "{\"type\":\"http_req\",\"id\":\"" TEST_ID "\",\"method\":\"GET\","
	    "\"path\":\"/\",\"headers\":[],\"body\":\"\"}");

	test_msg(&m, TUNPROTO_T_HTTP_RESP);
	m.m_status = 200;
	tunproto_msg_add_header(&m, "Set-Cookie", "a=1");
	tunproto_msg_add_header(&m, "Set-Cookie", "b=2");
	tunproto_msg_set_body(&m, "pong", 4);
	test_roundtrip(&m,
	    "{\"type\":\"http_resp\",\"id\":\"" TEST_ID "\",\"status\":200,"
	    "\"headers\":[[\"Set-Cookie\",\"a=1\"],[\"Set-Cookie\",\"b=2\"]],"
	    "\"body\":\"cG9uZw==\"}");

	test_msg(&m, TUNPROTO_T_HTTP_REQ_BEGIN);
	m.m_method = strdup("POST");
	m.m_path = strdup("/stream");
	m.m_flags = TUNPROTO_MSG_F_CONTENT_LENGTH;
	m.m_content_length = 100000;
	tunproto_msg_add_header(&m, "Content-Type", "application/octet-stream");
	test_roundtrip(&m,
	    "{\"type\":\"http_req_begin\",\"id\":\"" TEST_ID "\","
	    "\"method\":\"POST\",\"path\":\"/stream\",\"headers\":"
	    "[[\"Content-Type\",\"application/octet-stream\"]],"
	    "\"content_length\":100000}");

	/* Scenario 13: unknown length goes out as content_length null. */
	test_msg(&m, TUNPROTO_T_HTTP_RESP_BEGIN);
	m.m_status = 200;
	tunproto_msg_add_header(&m, "Content-Type", "text/event-stream");
	test_roundtrip(&m,
	    "{\"type\":\"http_resp_begin\",\"id\":\"" TEST_ID "\","
	    "\"status\":200,\"headers\":[[\"Content-Type\","
	    "\"text/event-stream\"]],\"content_length\":null}");

	/* Scenario 14: a HEAD answer announces its length. */
	test_msg(&m, TUNPROTO_T_HTTP_RESP_BEGIN);
	m.m_status = 200;
	m.m_flags = TUNPROTO_MSG_F_CONTENT_LENGTH;
	m.m_content_length = 100000;
	test_roundtrip(&m,
	    "{\"type\":\"http_resp_begin\",\"id\":\"" TEST_ID "\","
	    "\"status\":200,\"headers\":[],\"content_length\":100000}");

	test_msg(&m, TUNPROTO_T_HTTP_REQ_END);
	test_roundtrip(
	    &m, "{\"type\":\"http_req_end\",\"id\":\"" TEST_ID "\"}");
	test_msg(&m, TUNPROTO_T_HTTP_RESP_END);
	test_roundtrip(
	    &m, "{\"type\":\"http_resp_end\",\"id\":\"" TEST_ID "\"}");
}

/* Window, error, ws_* and ping/pong messages both ways. */
static void
test_msg_roundtrip_other(void **state)
{
	struct tunproto_msg m;

	(void)state;
	test_msg(&m, TUNPROTO_T_WINDOW);
	m.m_credits = 16;
	m.m_flags = TUNPROTO_MSG_F_ACK_OFFSET;
	test_roundtrip(&m,
	    "{\"type\":\"window\",\"id\":\"" TEST_ID "\",\"credits\":16,"
	    "\"ack_offset\":0}");
	test_msg(&m, TUNPROTO_T_WINDOW);
	m.m_flags = TUNPROTO_MSG_F_ACK_OFFSET | TUNPROTO_MSG_F_COMPLETE;
	m.m_ack_offset = 2;
	test_roundtrip(&m,
	    "{\"type\":\"window\",\"id\":\"" TEST_ID "\",\"credits\":0,"
	    "\"ack_offset\":2,\"complete\":true}");
	test_msg(&m, TUNPROTO_T_WINDOW);
	m.m_credits = 1;
	test_roundtrip(
	    &m, "{\"type\":\"window\",\"id\":\"" TEST_ID "\",\"credits\":1}");

	test_msg(&m, TUNPROTO_T_ERROR);
	m.m_message = strdup("upstream unreachable");
	test_roundtrip(&m,
	    "{\"type\":\"error\",\"id\":\"" TEST_ID "\","
	    "\"message\":\"upstream unreachable\"}");

	/* ws_connect headers are an object (§3.4). */
	test_msg(&m, TUNPROTO_T_WS_CONNECT);
	m.m_path = strdup("/chat?room=one");
	tunproto_msg_add_header(&m, "Origin", "http://example.com");
	tunproto_msg_add_header(&m, "Sec-WebSocket-Protocol", "chat.v1");
	test_roundtrip(&m,
	    "{\"type\":\"ws_connect\",\"id\":\"" TEST_ID "\","
	    "\"path\":\"/chat?room=one\",\"headers\":{\"Origin\":"
	    "\"http://example.com\",\"Sec-WebSocket-Protocol\":\"chat.v1\"}}");

	test_msg(&m, TUNPROTO_T_WS_CONNECTED);
	test_roundtrip(
	    &m, "{\"type\":\"ws_connected\",\"id\":\"" TEST_ID "\"}");

	test_msg(&m, TUNPROTO_T_WS_MESSAGE);
	tunproto_msg_set_body(&m, "hello", 5);
	test_roundtrip(&m,
	    "{\"type\":\"ws_message\",\"id\":\"" TEST_ID "\","
	    "\"data\":\"hello\",\"binary\":false}");
	/* Scenario 33's binary 00 01 ff travels as base64 in V1. */
	test_msg(&m, TUNPROTO_T_WS_MESSAGE);
	m.m_flags = TUNPROTO_MSG_F_BINARY;
	tunproto_msg_set_body(&m, "\x00\x01\xff", 3);
	test_roundtrip(&m,
	    "{\"type\":\"ws_message\",\"id\":\"" TEST_ID "\","
	    "\"data\":\"AAH/\",\"binary\":true}");
	/* Text may carry U+0000. */
	test_msg(&m, TUNPROTO_T_WS_MESSAGE);
	tunproto_msg_set_body(&m, "a\0b", 3);
	test_roundtrip(&m,
	    "{\"type\":\"ws_message\",\"id\":\"" TEST_ID "\","
	    "\"data\":\"a\\u0000b\",\"binary\":false}");

	test_msg(&m, TUNPROTO_T_WS_CLOSE);
	m.m_code = 1000;
	m.m_reason = strdup("done");
	test_roundtrip(&m,
	    "{\"type\":\"ws_close\",\"id\":\"" TEST_ID "\",\"code\":1000,"
	    "\"reason\":\"done\"}");
	test_msg(&m, TUNPROTO_T_WS_CLOSE);
	m.m_code = 4001;
	test_roundtrip(&m,
	    "{\"type\":\"ws_close\",\"id\":\"" TEST_ID "\",\"code\":4001,"
	    "\"reason\":\"\"}");

	/* Scenario 22: the client's integer millisecond timestamp. */
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_PING;
	m.m_id = strdup("0123456789abcdef0123456789abcdef");
	m.m_flags = TUNPROTO_MSG_F_TS_INT;
	m.m_timestamp_int = 1700000000123LL;
	m.m_timestamp = 1700000000123.0;
	test_roundtrip(&m,
	    "{\"type\":\"ping\",\"id\":\"0123456789abcdef0123456789abcdef\","
	    "\"timestamp\":1700000000123}");
	/* Scenario 49: pong{p1, 1.5}. */
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_PONG;
	m.m_id = strdup("p1");
	m.m_timestamp = 1.5;
	test_roundtrip(
	    &m, "{\"type\":\"pong\",\"id\":\"p1\",\"timestamp\":1.5}");
}

/* Scenario 49: a ping is echoed as a pong with the same id and timestamp. */
static void
test_ping_echo(void **state)
{
	struct tunproto_msg m;
	char *s;

	(void)state;
	test_decode("{\"type\":\"ping\",\"id\":\"p1\",\"timestamp\":1.5}", &m);
	assert_int_equal(m.m_type, TUNPROTO_T_PING);
	m.m_type = TUNPROTO_T_PONG;
	s = tunproto_msg_encode(&m, NULL);
	assert_string_equal(
	    s, "{\"type\":\"pong\",\"id\":\"p1\",\"timestamp\":1.5}");
	free(s);
	tunproto_msg_free(&m);

	test_decode(
	    "{\"type\":\"ping\",\"id\":\"x\",\"timestamp\":1700000000000}", &m);
	m.m_type = TUNPROTO_T_PONG;
	s = tunproto_msg_encode(&m, NULL);
	assert_string_equal(
	    s, "{\"type\":\"pong\",\"id\":\"x\",\"timestamp\":1700000000000}");
	free(s);
	tunproto_msg_free(&m);

	/* Rust requires both fields; id and timestamp types are strict. */
	test_decode_rv(
	    "{\"type\":\"ping\",\"id\":\"x\"}", TUNPROTO_DEC_MALFORMED);
	test_decode_rv(
	    "{\"type\":\"ping\",\"timestamp\":1}", TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"pong\",\"id\":\"x\",\"timestamp\":\"1\"}",
	    TUNPROTO_DEC_MALFORMED);
}

/* HTTP headers: pair arrays, header_items, the legacy object; order kept. */
static void
test_header_forms(void **state)
{
	struct tunproto_msg m;

	(void)state;
	test_decode("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		    "\"headers\":[[\"Set-Cookie\",\"a=1\"],[\"X-B\",\"\"],"
		    "[\"Set-Cookie\",\"b=2\"]]}",
	    &m);
	assert_int_equal(m.m_nheaders, 3);
	assert_string_equal(m.m_headers[0].h_name, "Set-Cookie");
	assert_string_equal(m.m_headers[0].h_value, "a=1");
	assert_string_equal(m.m_headers[1].h_name, "X-B");
	assert_string_equal(m.m_headers[1].h_value, "");
	assert_string_equal(m.m_headers[2].h_value, "b=2");
	tunproto_msg_free(&m);

	/* agent-dx V1: object headers plus header_items; the pairs win. */
	test_decode(
	    "{\"type\":\"http_req\",\"id\":\"r\",\"method\":\"GET\","
	    "\"path\":\"/\",\"headers\":{\"X-Tag\":\"two\"},"
	    "\"header_items\":[[\"X-Tag\",\"one\"],[\"X-Tag\",\"two\"]]}",
	    &m);
	assert_int_equal(m.m_nheaders, 2);
	assert_string_equal(m.m_headers[0].h_value, "one");
	assert_string_equal(m.m_headers[1].h_value, "two");
	tunproto_msg_free(&m);

	/* header_items alone satisfies a required headers member. */
	test_decode("{\"type\":\"http_req\",\"id\":\"r\",\"method\":\"GET\","
		    "\"path\":\"/\",\"header_items\":[[\"A\",\"1\"]]}",
	    &m);
	assert_int_equal(m.m_nheaders, 1);
	tunproto_msg_free(&m);

	/* A pair-array "headers" wins over header_items. */
	test_decode("{\"type\":\"http_req\",\"id\":\"r\",\"method\":\"GET\","
		    "\"path\":\"/\",\"headers\":[[\"A\",\"1\"]],"
		    "\"header_items\":[[\"B\",\"2\"],[\"C\",\"3\"]]}",
	    &m);
	assert_int_equal(m.m_nheaders, 1);
	assert_string_equal(m.m_headers[0].h_name, "A");
	tunproto_msg_free(&m);

	/* The legacy object, in its order. */
	test_decode("{\"type\":\"http_resp_begin\",\"id\":\"r\",\"status\":204,"
		    "\"headers\":{\"X-Legacy\":\"value\",\"A\":\"b\"}}",
	    &m);
	assert_int_equal(m.m_nheaders, 2);
	assert_string_equal(m.m_headers[0].h_name, "X-Legacy");
	assert_string_equal(m.m_headers[0].h_value, "value");
	assert_string_equal(m.m_headers[1].h_name, "A");
	tunproto_msg_free(&m);

	/* Bad items: the whole frame is malformed. */
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"headers\":[[\"A\"]]}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"headers\":[[\"A\",\"1\",\"2\"]]}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"headers\":[[\"A\",1]]}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"headers\":[\"A: 1\"]}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"headers\":{\"X-Bad\":42}}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"headers\":\"A: 1\"}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"header_items\":{\"A\":\"1\"}}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"headers\":[[\"A\",\"x\\u0000y\"]]}",
	    TUNPROTO_DEC_MALFORMED);
	/* Requests need headers (Rust); responses default to none. */
	test_decode_rv("{\"type\":\"http_req\",\"id\":\"r\",\"method\":\"GET\","
		       "\"path\":\"/\"}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_req_begin\",\"id\":\"r\","
		       "\"method\":\"GET\",\"path\":\"/\"}",
	    TUNPROTO_DEC_MALFORMED);

	/* ws_connect: an object is required; duplicates collapse. */
	test_decode("{\"type\":\"ws_connect\",\"id\":\"c\",\"path\":\"/\","
		    "\"headers\":{\"X-Test\":\"1\",\"X-Test\":\"2\"}}",
	    &m);
	assert_int_equal(m.m_nheaders, 1);
	assert_string_equal(m.m_headers[0].h_value, "2");
	tunproto_msg_free(&m);
	test_decode_rv("{\"type\":\"ws_connect\",\"id\":\"c\",\"path\":\"/\","
		       "\"headers\":[[\"X-Test\",\"1\"]]}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"ws_connect\",\"id\":\"c\",\"path\":\"/\"}",
	    TUNPROTO_DEC_MALFORMED);
}

/* Header values are Latin-1 text on the wire: one code point per octet. */
static void
test_header_latin1(void **state)
{
	struct tunproto_msg m;
	char *s;

	(void)state;
	test_msg(&m, TUNPROTO_T_HTTP_RESP);
	m.m_status = 200;
	tunproto_msg_add_header(&m, "X-Name", "caf\xe9");
	s = tunproto_msg_encode(&m, NULL);
	assert_non_null(s);
	assert_non_null(strstr(s, "[\"X-Name\",\"caf\xc3\xa9\"]"));
	free(s);
	test_roundtrip(&m, NULL);

	/* An escaped U+00E9 and a code point above U+00FF. */
	test_decode("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		    "\"headers\":[[\"A\",\"\\u00e9\"],[\"B\",\"\\u20ac\"]]}",
	    &m);
	assert_string_equal(m.m_headers[0].h_value, "\xe9");
	assert_string_equal(m.m_headers[1].h_value, "\xe2\x82\xac");
	tunproto_msg_free(&m);
}

/* Bodies are standard base64 with padding; bad base64 is its own result. */
static void
test_base64(void **state)
{
	static const struct {
		const char *raw, *b64;
	} v[] = { { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" },
		{ "foo", "Zm9v" }, { "foob", "Zm9vYg==" },
		{ "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" } };
	static const char *const bad[] = { "Zg", "Zg=", "Zm8",
		"Z===", "Zh==", "Zm9=", "Zm 9v", "Zm9v\\n", "Zm=v", "=Zm9",
		"Zm9v====", "Zg==Zg==", "Zm9-", "Zm9_", "Zm9v=" };
	struct tunproto_msg m;
	char json[256], *s, *err;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof v / sizeof v[0]; i++) {
		test_msg(&m, TUNPROTO_T_HTTP_RESP);
		m.m_status = 200;
		tunproto_msg_set_body(&m, v[i].raw, strlen(v[i].raw));
		s = tunproto_msg_encode(&m, NULL);
		snprintf(json, sizeof json,
		    "{\"type\":\"http_resp\",\"id\":\"" TEST_ID "\","
		    "\"status\":200,\"headers\":[],\"body\":\"%s\"}",
		    v[i].b64);
		assert_string_equal(s, json);
		free(s);
		tunproto_msg_free(&m);

		test_decode(json, &m);
		assert_int_equal(m.m_body_len, strlen(v[i].raw));
		if (m.m_body_len != 0)
			assert_string_equal((char *)m.m_body, v[i].raw);
		tunproto_msg_free(&m);
	}

	/* Strict decoding: padding required, no white space, zero bits. */
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(json, sizeof json,
		    "{\"type\":\"http_req\",\"id\":\"r\",\"method\":\"POST\","
		    "\"path\":\"/\",\"headers\":[],\"body\":\"%s\"}",
		    bad[i]);
		err = NULL;
		if (tunproto_msg_decode(json, strlen(json), &m, &err) !=
		    TUNPROTO_DEC_BAD_BASE64)
			fail_msg("\"%s\" was accepted as base64", bad[i]);
		/* Everything else is there, so the exchange can be failed. */
		assert_int_equal(m.m_type, TUNPROTO_T_HTTP_REQ);
		assert_string_equal(m.m_id, "r");
		assert_null(m.m_body);
		assert_int_equal(m.m_body_len, 0);
		assert_string_equal(
		    err, "http_req: \"body\" is not valid base64");
		free(err);
		tunproto_msg_free(&m);
	}
	test_decode_rv("{\"type\":\"ws_message\",\"id\":\"c\",\"data\":\"AAH\","
		       "\"binary\":true}",
	    TUNPROTO_DEC_BAD_BASE64);
	/* Text data is not base64 at all. */
	test_decode(
	    "{\"type\":\"ws_message\",\"id\":\"c\",\"data\":\"AAH\"}", &m);
	assert_int_equal(m.m_body_len, 3);
	assert_string_equal((char *)m.m_body, "AAH");
	tunproto_msg_free(&m);
	/* A body that is not a string is malformed, not bad base64. */
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		       "\"body\":5}",
	    TUNPROTO_DEC_MALFORMED);
}

/*
 * Decode json with the body lifted out (tunproto_lift) and with jansson
 * reading it whole: the result, the error and the message must match.
 * Returns the result.
 */
static int
test_lift_same(const char *json)
{
	struct tunproto_msg a, b;
	char *ea = NULL, *eb = NULL;
	int ra, rb;

	ra = tunproto_msg_decode(json, strlen(json), &a, &ea);
	tunproto_lift_min = SIZE_MAX;
	rb = tunproto_msg_decode(json, strlen(json), &b, &eb);
	tunproto_lift_min = 256;
	if (ra != rb)
		fail_msg("lifted %d (%s), whole %d (%s): %.120s", ra,
		    ea == NULL ? "-" : ea, rb, eb == NULL ? "-" : eb, json);
	test_same_str(ea, eb);
	if (ra == TUNPROTO_DEC_OK || ra == TUNPROTO_DEC_BAD_BASE64) {
		test_same_msg(&a, &b);
		tunproto_msg_free(&a);
		tunproto_msg_free(&b);
	}
	free(ea);
	free(eb);
	return (ra);
}

/* Write tmpl into out with its one "%s" replaced by b64. */
static void
test_fill(char *out, size_t size, const char *tmpl, const char *b64)
{
	const char *p = strstr(tmpl, "%s");

	assert_non_null(p);
	assert_true(strlen(tmpl) + strlen(b64) < size);
	memcpy(out, tmpl, (size_t)(p - tmpl));
	strcpy(out + (p - tmpl), b64);
	strcat(out, p + 2);
}

/*
 * A large base64 body skips jansson's string reader; every frame shape
 * around it decodes exactly as when jansson reads the whole frame.
 */
static void
test_lift(void **state)
{
	static const struct {
		const char *fmt;
		int want;
	} v[] = {
		/* The plain case, and white space around the colon. */
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"headers\":[[\"a\",\"b\"]],\"body\":\"%s\"}",
		    TUNPROTO_DEC_OK },
		{ "{\"type\":\"http_req\",\"id\":\"r\",\"method\":\"POST\","
		  "\"path\":\"/\",\"headers\":[], \"body\" :\n \"%s\" }",
		    TUNPROTO_DEC_OK },
		/* The body first; a "body" inside headers or a value. */
		{ "{\"body\":\"%s\",\"type\":\"http_resp\",\"id\":\"r\","
		  "\"status\":200,\"headers\":[[\"body\",\"x\"]]}",
		    TUNPROTO_DEC_OK },
		{ "{\"type\":\"http_resp\",\"id\":\"body\",\"status\":200,"
		  "\"x\":{\"body\":\"QQ==\"},\"body\":\"%s\"}",
		    TUNPROTO_DEC_OK },
		/* Two bodies: the last one wins in both readings. */
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"QUJD\",\"body\":\"%s\"}",
		    TUNPROTO_DEC_OK },
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"%s\",\"body\":\"QUJD\"}",
		    TUNPROTO_DEC_OK },
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"b\\u006fdy\":\"QUJD\",\"body\":\"%s\"}",
		    TUNPROTO_DEC_OK },
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"%s\",\"b\\u006fdy\":\"\"}",
		    TUNPROTO_DEC_OK },
		/* An escaped slash: jansson reads it (invalid after all). */
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"\\/%s\"}",
		    TUNPROTO_DEC_BAD_BASE64 },
		/* Bad base64, lifted or not, fails only the exchange. */
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"%s=\"}",
		    TUNPROTO_DEC_BAD_BASE64 },
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"A%s\"}",
		    TUNPROTO_DEC_BAD_BASE64 },
		/* Broken JSON elsewhere stays broken. */
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"%s\",}",
		    TUNPROTO_DEC_MALFORMED },
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200 "
		  "\"body\":\"%s\"}",
		    TUNPROTO_DEC_MALFORMED },
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"%s\"",
		    TUNPROTO_DEC_MALFORMED },
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"%s\"}}",
		    TUNPROTO_DEC_MALFORMED },
		{ "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":\"200\","
		  "\"body\":\"%s\"}",
		    TUNPROTO_DEC_MALFORMED },
		{ "[{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		  "\"body\":\"%s\"}]",
		    TUNPROTO_DEC_MALFORMED },
		/* Types without a body ignore it either way. */
		{ "{\"type\":\"http_resp_begin\",\"id\":\"" TEST_ID "\","
		  "\"status\":200,\"body\":\"%s\"}",
		    TUNPROTO_DEC_OK },
		{ "{\"type\":\"error\",\"id\":\"r\",\"message\":\"m\","
		  "\"body\":\"%s=\"}",
		    TUNPROTO_DEC_OK },
	};
	struct tunproto_msg m;
	uint8_t raw[1024];
	char *b64, *json, *s;
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof raw; i++)
		raw[i] = (uint8_t)(i * 7 + 3);
	/* The base64 text of raw, from an encoded frame. */
	test_msg(&m, TUNPROTO_T_HTTP_RESP);
	m.m_status = 200;
	tunproto_msg_set_body(&m, raw, sizeof raw);
	s = tunproto_msg_encode(&m, &n);
	assert_non_null(s);
	b64 = strstr(s, "\"body\":\"") + 8;
	assert_int_equal(strlen(b64), 1368 + 2);
	assert_string_equal(b64 + 1368, "\"}");
	b64[1368] = '\0';
	tunproto_msg_free(&m);

	json = malloc(4096);
	for (i = 0; i < sizeof v / sizeof v[0]; i++) {
		test_fill(json, 4096, v[i].fmt, b64);
		if (test_lift_same(json) != v[i].want)
			fail_msg("case %zu: not %d", i, v[i].want);
	}
	/* The plain case really carries the bytes. */
	test_fill(json, 4096, v[0].fmt, b64);
	test_decode(json, &m);
	assert_int_equal(m.m_body_len, sizeof raw);
	assert_memory_equal(m.m_body, raw, sizeof raw);
	tunproto_msg_free(&m);
	/* Every truncation of a frame, too. */
	test_fill(json, 4096, v[0].fmt, b64);
	for (n = strlen(json); n > 0; n -= 7) {
		json[n] = '\0';
		test_lift_same(json);
		test_fill(json, 4096, v[0].fmt, b64);
		if (n < 7)
			break;
	}
	free(json);
	free(s);
}

/* Null reads as absent: defaults for optional members, missing otherwise. */
static void
test_null_as_absent(void **state)
{
	struct tunproto_msg m;

	(void)state;
	test_decode("{\"type\":\"http_resp_begin\",\"id\":\"r\",\"status\":200,"
		    "\"headers\":null,\"content_length\":null}",
	    &m);
	assert_int_equal(m.m_nheaders, 0);
	assert_false(m.m_flags & TUNPROTO_MSG_F_CONTENT_LENGTH);
	tunproto_msg_free(&m);

	test_decode("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200,"
		    "\"body\":null}",
	    &m);
	assert_int_equal(m.m_body_len, 0);
	tunproto_msg_free(&m);

	test_decode("{\"type\":\"window\",\"id\":\"w\",\"credits\":1,"
		    "\"ack_offset\":null,\"complete\":null}",
	    &m);
	assert_int_equal(m.m_flags, 0);
	tunproto_msg_free(&m);

	/* The Rust sandbox's hello: "session_id": null. */
	test_decode("{\"type\":\"hello\",\"protocol_version\":2,"
		    "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		    "\"stream_window_frames\":16,\"max_body_size\":null,"
		    "\"max_ws_message_size\":null,\"resume\":null,"
		    "\"session_id\":null}",
	    &m);
	assert_null(m.m_session_id);
	assert_int_equal(m.m_flags, 0);
	tunproto_msg_free(&m);

	test_decode("{\"type\":\"ws_close\",\"id\":\"c\",\"code\":null,"
		    "\"reason\":null}",
	    &m);
	assert_int_equal(m.m_code, 1000);
	assert_null(m.m_reason);
	tunproto_msg_free(&m);

	/* A required member given as null is missing. */
	test_decode_rv("{\"type\":\"error\",\"id\":null,\"message\":\"x\"}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_resp\",\"id\":\"r\",\"status\":null}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"window\",\"id\":\"w\",\"credits\":null}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":null}", TUNPROTO_DEC_MALFORMED);
}

/* Unknown types are dropped apart from malformed frames; members ignored. */
static void
test_unknown_vs_malformed(void **state)
{
	static const char unknown[] = "{\"type\":\"checkpoint\",\"id\":1}";
	struct tunproto_msg m;
	char *err = NULL;

	(void)state;
	test_decode_rv("{\"type\":\"bogus\"}", TUNPROTO_DEC_UNKNOWN);
	test_decode_rv("{\"type\":\"HELLO\"}", TUNPROTO_DEC_UNKNOWN);
	test_decode_rv("{\"type\":\"\"}", TUNPROTO_DEC_UNKNOWN);
	test_decode_rv(
	    "{\"type\":\"ping\\u0000x\",\"id\":\"a\",\"timestamp\":1}",
	    TUNPROTO_DEC_UNKNOWN);
	assert_int_equal(
	    tunproto_msg_decode(unknown, strlen(unknown), &m, &err),
	    TUNPROTO_DEC_UNKNOWN);
	assert_string_equal(err, "unknown control message type \"checkpoint\"");
	free(err);

	test_decode_rv("", TUNPROTO_DEC_MALFORMED);
	test_decode_rv("not json", TUNPROTO_DEC_MALFORMED);
	test_decode_rv("[]", TUNPROTO_DEC_MALFORMED);
	test_decode_rv("\"ping\"", TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{}", TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":5}", TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"ping\",\"id\":\"a\",\"timestamp\":1} x",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"ping\",\"id\":\"a\",\"timestamp\":1",
	    TUNPROTO_DEC_MALFORMED);
	/* Known type, bad fields: malformed (the Rust sandbox drops it). */
	test_decode_rv(
	    "{\"type\":\"http_resp\",\"id\":\"r\"}", TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"window\",\"id\":\"w\",\"credits\":-1}",
	    TUNPROTO_DEC_MALFORMED);
	test_decode_rv("{\"type\":\"http_req_end\"}", TUNPROTO_DEC_MALFORMED);
	test_decode_rv(
	    "{\"type\":\"http_req_end\",\"id\":7}", TUNPROTO_DEC_MALFORMED);

	/* Unknown members are ignored. */
	test_decode("{\"x\":[1,{\"y\":null}],\"type\":\"ws_connected\","
		    "\"id\":\"c\",\"extra\":true}",
	    &m);
	assert_int_equal(m.m_type, TUNPROTO_T_WS_CONNECTED);
	assert_string_equal(m.m_id, "c");
	tunproto_msg_free(&m);
}

/* Member types are as strict as the Rust sandbox's schema. */
static void
test_strict_types(void **state)
{
	static const char *const bad[] = {
		"{\"type\":\"http_resp\",\"id\":\"r\",\"status\":\"200\"}",
		"{\"type\":\"http_resp\",\"id\":\"r\",\"status\":200.0}",
		"{\"type\":\"http_resp\",\"id\":\"r\",\"status\":65536}",
		"{\"type\":\"http_resp\",\"id\":\"r\",\"status\":-1}",
		"{\"type\":\"window\",\"id\":\"w\",\"credits\":1.0}",
		"{\"type\":\"window\",\"id\":\"w\",\"credits\":true}",
		"{\"type\":\"window\",\"id\":\"w\",\"credits\":1,"
		"\"ack_offset\":-5}",
		"{\"type\":\"window\",\"id\":\"w\",\"credits\":1,"
		"\"complete\":1}",
		"{\"type\":\"http_req_begin\",\"id\":\"r\",\"method\":\"P\","
		"\"path\":\"/\",\"headers\":[],\"content_length\":-1}",
		"{\"type\":\"http_req_begin\",\"id\":\"r\",\"method\":\"P\","
		"\"path\":\"/\",\"headers\":[],\"content_length\":\"5\"}",
		"{\"type\":\"http_req\",\"id\":\"r\",\"method\":1,"
		"\"path\":\"/\",\"headers\":[]}",
		"{\"type\":\"http_req\",\"id\":\"r\\u0000\",\"method\":\"GET\","
		"\"path\":\"/\",\"headers\":[]}",
		"{\"type\":\"ws_close\",\"id\":\"c\",\"code\":70000}",
		"{\"type\":\"ws_close\",\"id\":\"c\",\"reason\":1}",
		"{\"type\":\"ws_message\",\"id\":\"c\",\"data\":\"x\","
		"\"binary\":\"no\"}",
		"{\"type\":\"ws_message\",\"id\":\"c\"}",
		"{\"type\":\"error\",\"id\":\"e\"}",
		"{\"type\":\"hello\",\"protocol_version\":256,"
		"\"max_stream_chunk\":65536,\"max_inflight\":16,"
		"\"stream_window_frames\":16}",
		"{\"type\":\"hello\",\"protocol_version\":\"2\","
		"\"max_stream_chunk\":65536,\"max_inflight\":16,"
		"\"stream_window_frames\":16}",
		"{\"type\":\"hello\",\"protocol_version\":2,"
		"\"max_stream_chunk\":65536,\"max_inflight\":16}",
		"{\"type\":\"hello\",\"protocol_version\":2,"
		"\"max_stream_chunk\":65536,\"max_inflight\":16,"
		"\"stream_window_frames\":16,\"resume\":\"true\"}",
		"{\"type\":\"hello\",\"protocol_version\":2,"
		"\"max_stream_chunk\":65536,\"max_inflight\":16,"
		"\"stream_window_frames\":16,\"session_id\":5}",
	};
	struct tunproto_msg m;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		test_decode_rv(bad[i], TUNPROTO_DEC_MALFORMED);

	/* Edges that are allowed. */
	test_decode(
	    "{\"type\":\"http_resp\",\"id\":\"r\",\"status\":65535}", &m);
	assert_int_equal(m.m_status, 65535);
	tunproto_msg_free(&m);
	test_decode("{\"type\":\"window\",\"id\":\"w\",\"credits\":0,"
		    "\"ack_offset\":9223372036854775807}",
	    &m);
	assert_int_equal(m.m_ack_offset, INT64_MAX);
	tunproto_msg_free(&m);
	test_decode("{\"type\":\"ws_close\",\"id\":\"c\",\"code\":0}", &m);
	assert_int_equal(m.m_code, 0);
	tunproto_msg_free(&m);
}

/* The credits-or-ack rule of §4.8. */
static void
test_window_check(void **state)
{
	struct tunproto_msg m;
	char *err = NULL;

	(void)state;
	test_decode("{\"type\":\"window\",\"id\":\"w\",\"credits\":0}", &m);
	assert_int_equal(tunproto_window_check(&m, &err), -1);
	assert_string_equal(
	    err, "window must carry credits or a valid ack_offset");
	free(err);
	tunproto_msg_free(&m);
	test_decode("{\"type\":\"window\",\"id\":\"w\",\"credits\":0,"
		    "\"ack_offset\":5}",
	    &m);
	assert_int_equal(tunproto_window_check(&m, NULL), 0);
	tunproto_msg_free(&m);
	/* Scenario 13's window{credits:16} with no ack_offset is fine. */
	test_decode("{\"type\":\"window\",\"id\":\"w\",\"credits\":16}", &m);
	assert_int_equal(tunproto_window_check(&m, NULL), 0);
	tunproto_msg_free(&m);
}

/* Messages that cannot be encoded give NULL; the 8 MiB frame limit holds. */
static void
test_encode_limits(void **state)
{
	struct tunproto_msg m;
	char *big, *err = NULL;
	size_t n;

	(void)state;
	memset(&m, 0, sizeof m);
	assert_null(tunproto_msg_encode(&m, NULL));
	m.m_type = TUNPROTO_T__COUNT;
	assert_null(tunproto_msg_encode(&m, NULL));

	/* Missing required members. */
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_ERROR;
	assert_null(tunproto_msg_encode(&m, NULL));
	m.m_id = strdup("e");
	assert_null(tunproto_msg_encode(&m, NULL));
	tunproto_msg_free(&m);
	test_msg(&m, TUNPROTO_T_HTTP_REQ);
	assert_null(tunproto_msg_encode(&m, NULL));
	tunproto_msg_free(&m);

	/* Text that is not UTF-8, and a timestamp JSON cannot hold. */
	test_msg(&m, TUNPROTO_T_ERROR);
	m.m_message = strdup("bad \xff byte");
	assert_null(tunproto_msg_encode(&m, NULL));
	tunproto_msg_free(&m);
	test_msg(&m, TUNPROTO_T_WS_MESSAGE);
	tunproto_msg_set_body(&m, "\xc3", 1);
	assert_null(tunproto_msg_encode(&m, NULL));
	tunproto_msg_free(&m);
	test_msg(&m, TUNPROTO_T_PING);
	m.m_timestamp = INFINITY;
	assert_null(tunproto_msg_encode(&m, NULL));
	tunproto_msg_free(&m);
	test_msg(&m, TUNPROTO_T_WINDOW);
	m.m_credits = (uint64_t)INT64_MAX + 1;
	assert_null(tunproto_msg_encode(&m, NULL));
	tunproto_msg_free(&m);

	/* 5 MiB of body fits one frame (V1 cap); 6.5 MiB does not. */
	n = 5 * 1024 * 1024;
	big = calloc(1, 7 * 1024 * 1024);
	assert_non_null(big);
	test_msg(&m, TUNPROTO_T_HTTP_RESP);
	m.m_status = 200;
	tunproto_msg_set_body(&m, big, n);
	free(big);
	big = tunproto_msg_encode(&m, &n);
	assert_non_null(big);
	assert_true(n <= TUNPROTO_CONTROL_MAX);
	free(big);
	big = calloc(1, 7 * 1024 * 1024);
	tunproto_msg_set_body(&m, big, 6 * 1024 * 1024 + 512 * 1024);
	free(big);
	assert_null(tunproto_msg_encode(&m, NULL));
	tunproto_msg_free(&m);

	/* The receiving side refuses frames over 8 MiB before parsing. */
	big = malloc(TUNPROTO_CONTROL_MAX + 1);
	assert_non_null(big);
	memset(big, ' ', TUNPROTO_CONTROL_MAX + 1);
	assert_int_equal(
	    tunproto_msg_decode(big, TUNPROTO_CONTROL_MAX + 1, &m, &err),
	    TUNPROTO_DEC_MALFORMED);
	assert_string_equal(err, "control frame exceeds 8388608 bytes");
	free(err);
	free(big);
}

/* Scenario 6: the default hello, exactly. */
static void
test_hello_default(void **state)
{
	struct tunproto_limits l;
	struct tunproto_msg m;
	char *s;

	(void)state;
	tunproto_limits_default(&l);
	assert_int_equal(tunproto_hello(&l, NULL, &m, NULL), 0);
	s = tunproto_msg_encode(&m, NULL);
	assert_string_equal(s,
	    "{\"type\":\"hello\",\"protocol_version\":2,"
	    "\"max_stream_chunk\":65536,\"max_inflight\":16,"
	    "\"stream_window_frames\":16,\"max_body_size\":536870912,"
	    "\"max_ws_message_size\":8388608,\"resume\":true}");
	free(s);
	test_roundtrip(&m, NULL);
}

/*
 * akgateway's session_resumed (an extension): encoded only when told,
 * decoded only as a boolean; a value of another type is ignored.
 */
static void
test_hello_session_resumed(void **state)
{
	struct tunproto_limits l;
	struct tunproto_msg m;
	char *s;

	(void)state;
	tunproto_limits_default(&l);
	assert_int_equal(tunproto_hello(&l, NULL, &m, NULL), 0);
	m.m_flags |= TUNPROTO_MSG_F_SESSION_TOLD |
	    TUNPROTO_MSG_F_SESSION_RESUMED;
	s = tunproto_msg_encode(&m, NULL);
	assert_non_null(
	    strstr(s, ",\"resume\":true,\"session_resumed\":true}"));
	free(s);
	test_roundtrip(&m, NULL);
	assert_int_equal(tunproto_hello(&l, NULL, &m, NULL), 0);
	m.m_flags |= TUNPROTO_MSG_F_SESSION_TOLD;
	s = tunproto_msg_encode(&m, NULL);
	assert_non_null(strstr(s, ",\"session_resumed\":false}"));
	free(s);
	tunproto_msg_free(&m);

	test_decode("{\"type\":\"hello\",\"protocol_version\":2,"
		    "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		    "\"stream_window_frames\":16,\"session_resumed\":false}",
	    &m);
	assert_int_equal(m.m_flags &
		(TUNPROTO_MSG_F_SESSION_TOLD | TUNPROTO_MSG_F_SESSION_RESUMED),
	    TUNPROTO_MSG_F_SESSION_TOLD);
	tunproto_msg_free(&m);
	test_decode("{\"type\":\"hello\",\"protocol_version\":2,"
		    "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		    "\"stream_window_frames\":16,\"session_resumed\":\"yes\"}",
	    &m);
	assert_int_equal(m.m_flags & TUNPROTO_MSG_F_SESSION_TOLD, 0);
	tunproto_msg_free(&m);
}

/* Require tunproto_hello(l, session) to fail with want. */
static void
test_hello_fails(
    const struct tunproto_limits *l, const char *session, const char *want)
{
	struct tunproto_msg m;
	char *err = NULL;

	assert_int_equal(tunproto_hello(l, session, &m, &err), -1);
	assert_string_equal(err, want);
	assert_int_equal(m.m_type, TUNPROTO_T_NONE);
	assert_null(m.m_session_id);
	free(err);
}

/* Scenario 7: the session hello and what the builder refuses. */
static void
test_hello_validation(void **state)
{
	struct tunproto_limits l, d;
	struct tunproto_msg m;
	char *s;

	(void)state;
	tunproto_limits_default(&d);
	assert_int_equal(tunproto_hello(&d, TEST_ID, &m, NULL), 0);
	s = tunproto_msg_encode(&m, NULL);
	assert_non_null(
	    strstr(s, ",\"resume\":true,\"session_id\":\"" TEST_ID "\"}"));
	free(s);
	test_roundtrip(&m, NULL);

	l = d;
	l.l_max_stream_chunk = 1;
	test_hello_fails(
	    &l, NULL, "max_stream_chunk must be at least 1024 bytes");
	l.l_max_stream_chunk = 1023;
	test_hello_fails(
	    &l, NULL, "max_stream_chunk must be at least 1024 bytes");
	l = d;
	l.l_max_ws_message_size = 0;
	test_hello_fails(
	    &l, NULL, "max_ws_message_size must be greater than zero");
	l = d;
	l.l_protocol_version = 0;
	test_hello_fails(
	    &l, NULL, "protocol_version must be greater than zero");
	l = d;
	l.l_max_inflight = 0;
	test_hello_fails(&l, NULL, "max_inflight must be greater than zero");
	l = d;
	l.l_stream_window_frames = 0;
	test_hello_fails(
	    &l, NULL, "stream_window_frames must be greater than zero");
	l = d;
	l.l_max_body_size = 0;
	test_hello_fails(&l, NULL, "max_body_size must be greater than zero");
	test_hello_fails(
	    &d, "not-a-uuid", "resumable hello requires a UUID session_id");

	/* protocol_version 1 is allowed (rollout fallback). */
	l = d;
	l.l_protocol_version = 1;
	l.l_max_stream_chunk = 1024;
	assert_int_equal(tunproto_hello(&l, NULL, &m, NULL), 0);
	assert_int_equal(m.m_limits.l_protocol_version, 1);
	tunproto_msg_free(&m);
}

/* Build a peer hello from a JSON text. */
static void
test_peer(const char *json, struct tunproto_msg *m)
{
	test_decode(json, m);
	assert_int_equal(m->m_type, TUNPROTO_T_HELLO);
}

/* Negotiate as role; returns the result, *out and *resumable filled. */
static int
test_negotiate(const struct tunproto_limits *local, const char *peer_json,
    int role, struct tunproto_limits *out, int *resumable, char **err)
{
	struct tunproto_msg p;
	int rv;

	test_peer(peer_json, &p);
	rv = tunproto_negotiate(local, &p, role, out, resumable, err);
	tunproto_msg_free(&p);
	return (rv);
}

#define TEST_HELLO(extra) \
	"{\"type\":\"hello\",\"protocol_version\":2," \
	"\"max_stream_chunk\":65536,\"max_inflight\":16," \
	"\"stream_window_frames\":16,\"max_body_size\":536870912," \
	"\"max_ws_message_size\":8388608,\"resume\":true" extra "}"

/* §4.3 with reference peers: both roles agree on the defaults. */
static void
test_negotiate_defaults(void **state)
{
	struct tunproto_limits l, o;
	int r;

	(void)state;
	tunproto_limits_default(&l);
	/* The client meets the Rust sandbox's hello (session_id null). */
	assert_int_equal(test_negotiate(&l, TEST_HELLO(",\"session_id\":null"),
			     TUNPROTO_ROLE_CLIENT, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_protocol_version, 2);
	assert_int_equal(o.l_max_stream_chunk, 65536);
	assert_int_equal(o.l_max_inflight, 16);
	assert_int_equal(o.l_stream_window_frames, 16);
	assert_int_equal(o.l_max_body_size, 536870912);
	assert_int_equal(o.l_max_ws_message_size, 8388608);
	assert_int_equal(o.l_fast_path_body, 65536);
	assert_true(o.l_http_timeout == 600.0);
	assert_int_equal(r, 1);

	/* The sandbox meets the reference client's hello. */
	assert_int_equal(test_negotiate(&l,
			     TEST_HELLO(",\"session_id\":\"" TEST_SESSION "\""),
			     TUNPROTO_ROLE_SANDBOX, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_stream_window_frames, 16);
	assert_int_equal(r, 1);
}

/* Every limit is the smaller of the two; the window is clamped to 480/n. */
static void
test_negotiate_minimum(void **state)
{
	struct tunproto_limits l, o;
	int r;

	(void)state;
	tunproto_limits_default(&l);
	l.l_max_stream_chunk = 4096;
	l.l_max_body_size = 1000;
	assert_int_equal(
	    test_negotiate(&l,
		"{\"type\":\"hello\",\"protocol_version\":3,"
		"\"max_stream_chunk\":2048,\"max_inflight\":64,"
		"\"stream_window_frames\":1024,\"max_body_size\":5000,"
		"\"max_ws_message_size\":100,\"resume\":true}",
		TUNPROTO_ROLE_CLIENT, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_protocol_version, 2);
	assert_int_equal(o.l_max_stream_chunk, 2048);
	assert_int_equal(o.l_max_inflight, 16);
	assert_int_equal(o.l_stream_window_frames, 16);
	assert_int_equal(o.l_max_body_size, 1000);
	assert_int_equal(o.l_max_ws_message_size, 100);
	/* The fast path never exceeds the negotiated body limit. */
	assert_int_equal(o.l_fast_path_body, 1000);

	/* 480 / 64 = 7 frames per stream. */
	l.l_max_inflight = 1024;
	l.l_stream_window_frames = 1024;
	assert_int_equal(test_negotiate(&l,
			     "{\"type\":\"hello\",\"protocol_version\":2,"
			     "\"max_stream_chunk\":65536,\"max_inflight\":64,"
			     "\"stream_window_frames\":1024,\"resume\":true}",
			     TUNPROTO_ROLE_SANDBOX, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_max_inflight, 64);
	assert_int_equal(o.l_stream_window_frames, 7);
	/* 480 / 31 = 15: the clamp bites just above 30 (§14.9). */
	assert_int_equal(test_negotiate(&l,
			     "{\"type\":\"hello\",\"protocol_version\":2,"
			     "\"max_stream_chunk\":65536,\"max_inflight\":31,"
			     "\"stream_window_frames\":16,\"resume\":true}",
			     TUNPROTO_ROLE_SANDBOX, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_stream_window_frames, 15);
	/* 480 / 1024 rounds to 0; at least 1. */
	assert_int_equal(test_negotiate(&l,
			     "{\"type\":\"hello\",\"protocol_version\":2,"
			     "\"max_stream_chunk\":65536,\"max_inflight\":1024,"
			     "\"stream_window_frames\":1024,\"resume\":true}",
			     TUNPROTO_ROLE_SANDBOX, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_stream_window_frames, 1);

	/* Absent optional limits are the receiver's own (§4.2). */
	tunproto_limits_default(&l);
	l.l_max_body_size = 777;
	l.l_max_ws_message_size = 888;
	assert_int_equal(test_negotiate(&l,
			     "{\"type\":\"hello\",\"protocol_version\":2,"
			     "\"max_stream_chunk\":1024,\"max_inflight\":2,"
			     "\"stream_window_frames\":4,\"resume\":true}",
			     TUNPROTO_ROLE_CLIENT, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_max_stream_chunk, 1024);
	assert_int_equal(o.l_max_body_size, 777);
	assert_int_equal(o.l_max_ws_message_size, 888);
	assert_int_equal(o.l_stream_window_frames, 4);
}

/* Scenarios 11, 16, 17 and 46: peer limits that later checks rely on. */
static void
test_negotiate_scenarios(void **state)
{
	struct tunproto_limits l, o;
	struct tunproto_msg p;
	int r;

	(void)state;
	tunproto_limits_default(&l);
	/* 11: max_body_size 1 makes a 2-byte content_length exceed it. */
	assert_int_equal(test_negotiate(&l,
			     "{\"type\":\"hello\",\"protocol_version\":2,"
			     "\"max_stream_chunk\":65536,\"max_inflight\":16,"
			     "\"stream_window_frames\":16,\"max_body_size\":1,"
			     "\"resume\":true}",
			     TUNPROTO_ROLE_CLIENT, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_max_body_size, 1);
	assert_true(2 > o.l_max_body_size);
	/* 16: max_ws_message_size 1. */
	assert_int_equal(test_negotiate(&l,
			     "{\"type\":\"hello\",\"protocol_version\":2,"
			     "\"max_stream_chunk\":65536,\"max_inflight\":16,"
			     "\"stream_window_frames\":16,"
			     "\"max_ws_message_size\":1,\"resume\":true}",
			     TUNPROTO_ROLE_CLIENT, &o, &r, NULL),
	    0);
	assert_int_equal(o.l_max_ws_message_size, 1);
	/*
	 * 17 / 46: max_inflight 1 (window stays 16: 480 / 1). A second hello
	 * with 16 is the connection's to ignore; negotiating it afresh would
	 * give 16, which is why the caller must not.
	 */
	test_peer("{\"type\":\"hello\",\"protocol_version\":2,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":1,"
		  "\"stream_window_frames\":16,\"resume\":true,"
		  "\"session_id\":\"" TEST_SESSION "\"}",
	    &p);
	assert_int_equal(
	    tunproto_negotiate(&l, &p, TUNPROTO_ROLE_SANDBOX, &o, &r, NULL), 0);
	assert_int_equal(o.l_max_inflight, 1);
	assert_int_equal(o.l_stream_window_frames, 16);
	assert_int_equal(r, 1);
	tunproto_msg_free(&p);
}

/* Hellos that do not select V2, with the reason. */
static void
test_negotiate_refused(void **state)
{
	static const struct {
		const char *hello;
		int role;
		const char *err;
	} v[] = {
		{ "{\"type\":\"hello\",\"protocol_version\":1,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		  "\"stream_window_frames\":16,\"resume\":true}",
		    TUNPROTO_ROLE_CLIENT,
		    "peer advertised tunnel protocol version 1" },
		{ "{\"type\":\"hello\",\"protocol_version\":0,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		  "\"stream_window_frames\":16,\"resume\":true}",
		    TUNPROTO_ROLE_SANDBOX,
		    "peer advertised tunnel protocol version 0" },
		{ "{\"type\":\"hello\",\"protocol_version\":2,"
		  "\"max_stream_chunk\":1023,\"max_inflight\":16,"
		  "\"stream_window_frames\":16,\"resume\":true}",
		    TUNPROTO_ROLE_SANDBOX,
		    "invalid tunnel V2 capability advertisement" },
		{ "{\"type\":\"hello\",\"protocol_version\":2,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":0,"
		  "\"stream_window_frames\":16,\"resume\":true}",
		    TUNPROTO_ROLE_CLIENT,
		    "invalid tunnel V2 capability advertisement" },
		{ "{\"type\":\"hello\",\"protocol_version\":2,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		  "\"stream_window_frames\":0,\"resume\":true}",
		    TUNPROTO_ROLE_CLIENT,
		    "invalid tunnel V2 capability advertisement" },
		{ "{\"type\":\"hello\",\"protocol_version\":2,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		  "\"stream_window_frames\":16,\"max_body_size\":0,"
		  "\"resume\":true}",
		    TUNPROTO_ROLE_SANDBOX,
		    "invalid tunnel V2 capability advertisement" },
		{ "{\"type\":\"hello\",\"protocol_version\":2,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		  "\"stream_window_frames\":16,\"max_ws_message_size\":0,"
		  "\"resume\":true}",
		    TUNPROTO_ROLE_CLIENT,
		    "invalid tunnel V2 capability advertisement" },
		/* The client requires resume:true from the sandbox. */
		{ "{\"type\":\"hello\",\"protocol_version\":2,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		  "\"stream_window_frames\":16}",
		    TUNPROTO_ROLE_CLIENT,
		    "tunnel V2 peer must support resumable sessions" },
		{ "{\"type\":\"hello\",\"protocol_version\":2,"
		  "\"max_stream_chunk\":65536,\"max_inflight\":16,"
		  "\"stream_window_frames\":16,\"resume\":false}",
		    TUNPROTO_ROLE_CLIENT,
		    "tunnel V2 peer must support resumable sessions" },
	};
	struct tunproto_limits l, o;
	struct tunproto_msg p;
	char *err;
	size_t i;
	int r;

	(void)state;
	tunproto_limits_default(&l);
	for (i = 0; i < sizeof v / sizeof v[0]; i++) {
		err = NULL;
		r = 7;
		assert_int_equal(
		    test_negotiate(&l, v[i].hello, v[i].role, &o, &r, &err),
		    -1);
		assert_string_equal(err, v[i].err);
		assert_int_equal(r, 0);
		free(err);
	}

	/* V2 disabled locally (YR_TUNNEL_PROTOCOL_VERSION=1). */
	l.l_protocol_version = 1;
	err = NULL;
	assert_int_equal(test_negotiate(&l, TEST_HELLO(""),
			     TUNPROTO_ROLE_CLIENT, &o, &r, &err),
	    -1);
	assert_string_equal(
	    err, "tunnel protocol V2 is disabled locally (protocol_version 1)");
	free(err);

	/* Not a hello, or an unknown role. */
	tunproto_limits_default(&l);
	test_decode("{\"type\":\"ws_connected\",\"id\":\"c\"}", &p);
	assert_int_equal(
	    tunproto_negotiate(&l, &p, TUNPROTO_ROLE_CLIENT, &o, &r, NULL), -1);
	tunproto_msg_free(&p);
	test_peer(TEST_HELLO(""), &p);
	assert_int_equal(tunproto_negotiate(&l, &p, 0, &o, &r, NULL), -1);
	tunproto_msg_free(&p);
}

/* Sandbox role: resumable iff resume:true and a canonical session id. */
static void
test_negotiate_resume(void **state)
{
	static const struct {
		const char *extra;
		int resumable;
	} v[] = {
		{ ",\"session_id\":\"" TEST_SESSION "\"", 1 },
		{ "", 0 },
		{ ",\"session_id\":null", 0 },
		{ ",\"session_id\":\"not-a-uuid\"", 0 },
		{ ",\"session_id\":\"2F6C3C52-8A8E-4A31-9A0E-0C1B6D9D2F10\"",
		    0 },
	};
	struct tunproto_limits l, o;
	char json[512];
	size_t i;
	int r;

	(void)state;
	tunproto_limits_default(&l);
	for (i = 0; i < sizeof v / sizeof v[0]; i++) {
		snprintf(json, sizeof json, TEST_HELLO("%s"), v[i].extra);
		/* Still V2 either way (Rust: non-resumable V2). */
		assert_int_equal(test_negotiate(&l, json, TUNPROTO_ROLE_SANDBOX,
				     &o, &r, NULL),
		    0);
		assert_int_equal(r, v[i].resumable);
	}
	/* Without resume:true a session id does not make it resumable. */
	assert_int_equal(test_negotiate(&l,
			     "{\"type\":\"hello\",\"protocol_version\":2,"
			     "\"max_stream_chunk\":65536,\"max_inflight\":16,"
			     "\"stream_window_frames\":16,\"resume\":false,"
			     "\"session_id\":\"" TEST_SESSION "\"}",
			     TUNPROTO_ROLE_SANDBOX, &o, &r, NULL),
	    0);
	assert_int_equal(r, 0);
}

/* Read limits from the name/value list vars. */
static int
test_from_env(const char *const *vars, struct tunproto_limits *l, char **err)
{
	struct test_env e = { vars };

	*err = NULL;
	return (tunproto_limits_from_env(l, test_getenv, &e, err));
}

/* Unset variables give the defaults. */
static void
test_env_limits_defaults(void **state)
{
	static const char *const none[] = { NULL };
	struct tunproto_limits l, d;
	char *err;

	(void)state;
	tunproto_limits_default(&d);
	assert_int_equal(test_from_env(none, &l, &err), 0);
	assert_null(err);
	assert_memory_equal(&l, &d, sizeof l);
}

/* Scenario 24: values over their caps are capped. */
static void
test_env_limits_caps(void **state)
{
	static const char *const vars[] = { "YR_TUNNEL_PROTOCOL_VERSION", "99",
		"YR_TUNNEL_MAX_BODY_SIZE", "2147483648",
		"YR_TUNNEL_MAX_WS_MESSAGE_SIZE", "67108864",
		"YR_TUNNEL_STREAM_CHUNK_BYTES", "2097152",
		"YR_TUNNEL_MAX_INFLIGHT", "2048",
		"YR_TUNNEL_STREAM_WINDOW_FRAMES", "2048",
		"YR_TUNNEL_FAST_PATH_BODY_BYTES", "2147483648", NULL };
	static const char *const small[] = { "YR_TUNNEL_STREAM_CHUNK_BYTES",
		"100", "YR_TUNNEL_MAX_BODY_SIZE", " +4096 ",
		"YR_TUNNEL_PROTOCOL_VERSION", "1", "YR_TUNNEL_MAX_INFLIGHT",
		"99999999999999999999999", NULL };
	struct tunproto_limits l;
	char *err;

	(void)state;
	assert_int_equal(test_from_env(vars, &l, &err), 0);
	assert_null(err);
	assert_int_equal(l.l_protocol_version, 2);
	assert_int_equal(l.l_max_body_size, 1024ULL * 1024 * 1024);
	assert_int_equal(l.l_max_ws_message_size, 8 * 1024 * 1024);
	assert_int_equal(l.l_max_stream_chunk, 65536);
	assert_int_equal(l.l_max_inflight, 1024);
	assert_int_equal(l.l_stream_window_frames, 1024);
	assert_int_equal(l.l_fast_path_body, 5 * 1024 * 1024);

	/* The chunk floor, a small body capping the fast path, V1. */
	assert_int_equal(test_from_env(small, &l, &err), 0);
	assert_int_equal(l.l_max_stream_chunk, 1024);
	assert_int_equal(l.l_max_body_size, 4096);
	assert_int_equal(l.l_fast_path_body, 4096);
	assert_int_equal(l.l_protocol_version, 1);
	assert_int_equal(l.l_max_inflight, 1024);
}

/* Scenario 25: the HTTP timeout, unset / 7200 / invalid -> 600/7200/600. */
static void
test_env_limits_timeout(void **state)
{
	static const char *const bad[] = { "invalid", "", "0", "-1", "NaN",
		"inf", "1e500", "1e-20", "5s" };
	const char *vars[3] = { "YR_TUNNEL_HTTP_TIMEOUT", NULL, NULL };
	struct tunproto_limits l;
	char *err, want[128];
	size_t i;

	(void)state;
	vars[0] = NULL;
	assert_int_equal(test_from_env(vars, &l, &err), 0);
	assert_true(l.l_http_timeout == 600.0);

	vars[0] = "YR_TUNNEL_HTTP_TIMEOUT";
	vars[1] = "7200";
	assert_int_equal(test_from_env(vars, &l, &err), 0);
	assert_true(l.l_http_timeout == 7200.0);
	vars[1] = "0.125";
	assert_int_equal(test_from_env(vars, &l, &err), 0);
	assert_true(l.l_http_timeout == 0.125);

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		vars[1] = bad[i];
		assert_int_equal(test_from_env(vars, &l, &err), 1);
		assert_true(l.l_http_timeout == 600.0);
		snprintf(want, sizeof want,
		    "YR_TUNNEL_HTTP_TIMEOUT '%s' is not a positive number of "
		    "seconds; using 600",
		    bad[i]);
		assert_string_equal(err, want);
		free(err);
	}
}

/* Scenario 26: a non-integer is an error naming "positive integer". */
static void
test_env_limits_invalid(void **state)
{
	static const char *const word[] = { "YR_TUNNEL_MAX_BODY_SIZE",
		"not-an-integer", NULL };
	static const char *const several[] = { "YR_TUNNEL_MAX_INFLIGHT", "0",
		"YR_TUNNEL_STREAM_WINDOW_FRAMES", "-3",
		"YR_TUNNEL_STREAM_CHUNK_BYTES", "", "YR_TUNNEL_MAX_BODY_SIZE",
		"1000", "YR_TUNNEL_HTTP_TIMEOUT", "x", NULL };
	static const char *const others[] = { "1.5", "1e3", "0x10", "1_000",
		"12abc", "+", " " };
	const char *vars[3] = { "YR_TUNNEL_MAX_WS_MESSAGE_SIZE", NULL, NULL };
	struct tunproto_limits l;
	char *err;
	size_t i;

	(void)state;
	assert_int_equal(test_from_env(word, &l, &err), -1);
	assert_string_equal(err,
	    "YR_TUNNEL_MAX_BODY_SIZE must be a positive integer (got "
	    "'not-an-integer')");
	/* The sandbox keeps going with the default in its place. */
	assert_int_equal(l.l_max_body_size, TUNPROTO_MAX_BODY_DEFAULT);
	free(err);

	/* Every problem is named; the valid values are still read. */
	assert_int_equal(test_from_env(several, &l, &err), -1);
	assert_string_equal(err,
	    "YR_TUNNEL_STREAM_CHUNK_BYTES must be a positive integer (got ''); "
	    "YR_TUNNEL_MAX_INFLIGHT must be greater than zero (got '0'); "
	    "YR_TUNNEL_STREAM_WINDOW_FRAMES must be greater than zero "
	    "(got '-3'); YR_TUNNEL_HTTP_TIMEOUT 'x' is not a positive number "
	    "of seconds; using 600");
	assert_int_equal(l.l_max_inflight, 16);
	assert_int_equal(l.l_stream_window_frames, 16);
	assert_int_equal(l.l_max_stream_chunk, 65536);
	assert_int_equal(l.l_max_body_size, 1000);
	assert_int_equal(l.l_fast_path_body, 1000);
	free(err);

	for (i = 0; i < sizeof others / sizeof others[0]; i++) {
		vars[1] = others[i];
		assert_int_equal(test_from_env(vars, &l, &err), -1);
		assert_non_null(strstr(err, "must be a positive integer"));
		free(err);
	}
	/* err may be NULL. */
	{
		struct test_env e = { word };

		assert_int_equal(
		    tunproto_limits_from_env(&l, test_getenv, &e, NULL), -1);
	}
}

/* Type names map both ways. */
static void
test_type_names(void **state)
{
	int t;

	(void)state;
	for (t = TUNPROTO_T_NONE + 1; t < TUNPROTO_T__COUNT; t++)
		assert_int_equal(tunproto_type_lookup(tunproto_type_name(t),
				     strlen(tunproto_type_name(t))),
		    t);
	assert_null(tunproto_type_name(TUNPROTO_T_NONE));
	assert_null(tunproto_type_name(TUNPROTO_T__COUNT));
	assert_int_equal(tunproto_type_lookup("hell", 4), TUNPROTO_T_NONE);
	assert_int_equal(tunproto_type_lookup("hello!", 6), TUNPROTO_T_NONE);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_env_vector1),
		cmocka_unit_test(test_env_vector2),
		cmocka_unit_test(test_env_vector3),
		cmocka_unit_test(test_env_decode_errors),
		cmocka_unit_test(test_env_decode_order),
		cmocka_unit_test(test_env_encode_errors),
		cmocka_unit_test(test_env_header_only),
		cmocka_unit_test(test_uuid),
		cmocka_unit_test(test_msg_roundtrip_http),
		cmocka_unit_test(test_msg_roundtrip_other),
		cmocka_unit_test(test_ping_echo),
		cmocka_unit_test(test_header_forms),
		cmocka_unit_test(test_header_latin1),
		cmocka_unit_test(test_base64),
		cmocka_unit_test(test_lift),
		cmocka_unit_test(test_null_as_absent),
		cmocka_unit_test(test_unknown_vs_malformed),
		cmocka_unit_test(test_strict_types),
		cmocka_unit_test(test_window_check),
		cmocka_unit_test(test_encode_limits),
		cmocka_unit_test(test_hello_default),
		cmocka_unit_test(test_hello_session_resumed),
		cmocka_unit_test(test_hello_validation),
		cmocka_unit_test(test_negotiate_defaults),
		cmocka_unit_test(test_negotiate_minimum),
		cmocka_unit_test(test_negotiate_scenarios),
		cmocka_unit_test(test_negotiate_refused),
		cmocka_unit_test(test_negotiate_resume),
		cmocka_unit_test(test_env_limits_defaults),
		cmocka_unit_test(test_env_limits_caps),
		cmocka_unit_test(test_env_limits_timeout),
		cmocka_unit_test(test_env_limits_invalid),
		cmocka_unit_test(test_type_names),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
