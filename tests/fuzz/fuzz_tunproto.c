/*
 * libFuzzer harness for lib/tunproto.c and lib/tunenv.c. Every input is decoded as a binary
 * envelope (with the default chunk limit and a small one derived from the
 * data) and as a control message. Whatever decodes must satisfy the
 * documented invariants and re-encode: an envelope to exactly the input
 * bytes, a message to text that decodes to the same message and encodes to
 * the same text again. A hello is also negotiated in both roles. A
 * message decodes the same with its base64 body lifted out for the base64
 * decoder (tunproto_lift) as when jansson reads it all. Nothing may be
 * left allocated.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tunproto.h"

/* Abort with the failed condition, so libFuzzer saves the input. */
#define FUZZ_ASSERT(c) fuzz_assert((c) != 0, #c, __LINE__)

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Abort, naming the condition, unless ok. */
static void
fuzz_assert(int ok, const char *what, int line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_tunproto.c:%d: %s\n", line, what);
	abort();
}

/* Decode data as an envelope with max_chunk and check the result. */
static void
fuzz_env(const uint8_t *data, size_t size, size_t max_chunk)
{
	struct tunproto_env e, pe;
	uint8_t *buf, hdr[TUNPROTO_ENV_PREFIX_MAX];
	size_t n, hlen;
	char *err = NULL;
	int prefix_rv;

	/* The header alone decides, from a copy of no more than it. */
	n = size < sizeof hdr ? size : sizeof hdr;
	buf = malloc(n + 1);
	FUZZ_ASSERT(buf != NULL);
	memcpy(buf, data, n);
	prefix_rv = tunproto_env_decode_prefix(
	    buf, size, max_chunk, &pe, &hlen, NULL);
	free(buf);
	if (tunproto_env_decode(data, size, max_chunk, &e, &err) != 0) {
		FUZZ_ASSERT(err != NULL && *err != '\0');
		free(err);
		FUZZ_ASSERT(
		    tunproto_env_decode(data, size, max_chunk, &e, NULL) == -1);
		FUZZ_ASSERT(prefix_rv == -1);
		return;
	}
	FUZZ_ASSERT(prefix_rv == 0 && pe.e_payload == NULL);
	FUZZ_ASSERT(hlen + pe.e_len == size && pe.e_len == e.e_len);
	FUZZ_ASSERT(e.e_payload == data + hlen && pe.e_kind == e.e_kind &&
	    pe.e_flags == e.e_flags && pe.e_offset == e.e_offset &&
	    strcmp(pe.e_id, e.e_id) == 0);
	FUZZ_ASSERT(err == NULL);
	FUZZ_ASSERT(size >= TUNPROTO_ENV_HEADER_SIZE);
	FUZZ_ASSERT(e.e_kind >= TUNPROTO_ENV_HTTP_REQUEST_DATA &&
	    e.e_kind <= TUNPROTO_ENV_WS_BINARY_DATA);
	FUZZ_ASSERT(
	    (e.e_flags & ~(TUNPROTO_ENV_F_END | TUNPROTO_ENV_F_OFFSET)) == 0);
	FUZZ_ASSERT(tunproto_uuid_valid(e.e_id));
	FUZZ_ASSERT(e.e_len <= max_chunk);
	FUZZ_ASSERT(
	    e.e_payload >= data && e.e_payload + e.e_len == data + size);
	FUZZ_ASSERT(tunproto_env_size(&e) == size);

	/* Strict decoding leaves one encoding: the input itself. */
	buf = tunproto_env_encode_alloc(&e, max_chunk, &n, &err);
	FUZZ_ASSERT(buf != NULL && err == NULL);
	FUZZ_ASSERT(n == size && memcmp(buf, data, size) == 0);
	free(buf);
	FUZZ_ASSERT(
	    tunproto_env_encode_header(&e, max_chunk, hdr, &hlen, NULL) == 0);
	FUZZ_ASSERT(hlen + e.e_len == size && memcmp(hdr, data, hlen) == 0);
}

/* Two strings (either may be NULL) must match. */
static void
fuzz_same_str(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		FUZZ_ASSERT(a == b);
	else
		FUZZ_ASSERT(strcmp(a, b) == 0);
}

/* Two messages must hold the same values; headers only if with_headers. */
static void
fuzz_same_msg(const struct tunproto_msg *a, const struct tunproto_msg *b,
    int with_headers)
{
	size_t i;

	FUZZ_ASSERT(a->m_type == b->m_type);
	FUZZ_ASSERT(a->m_flags == b->m_flags);
	fuzz_same_str(a->m_id, b->m_id);
	fuzz_same_str(a->m_method, b->m_method);
	fuzz_same_str(a->m_path, b->m_path);
	if (with_headers) {
		FUZZ_ASSERT(a->m_nheaders == b->m_nheaders);
		for (i = 0; i < a->m_nheaders; i++) {
			fuzz_same_str(
			    a->m_headers[i].h_name, b->m_headers[i].h_name);
			fuzz_same_str(
			    a->m_headers[i].h_value, b->m_headers[i].h_value);
		}
	}
	FUZZ_ASSERT(a->m_body_len == b->m_body_len);
	if (a->m_body_len != 0)
		FUZZ_ASSERT(memcmp(a->m_body, b->m_body, a->m_body_len) == 0);
	FUZZ_ASSERT(a->m_status == b->m_status);
	FUZZ_ASSERT(a->m_content_length == b->m_content_length);
	FUZZ_ASSERT(
	    a->m_limits.l_protocol_version == b->m_limits.l_protocol_version);
	FUZZ_ASSERT(
	    a->m_limits.l_max_stream_chunk == b->m_limits.l_max_stream_chunk);
	FUZZ_ASSERT(a->m_limits.l_max_inflight == b->m_limits.l_max_inflight);
	FUZZ_ASSERT(a->m_limits.l_stream_window_frames ==
	    b->m_limits.l_stream_window_frames);
	FUZZ_ASSERT(a->m_limits.l_max_body_size == b->m_limits.l_max_body_size);
	FUZZ_ASSERT(a->m_limits.l_max_ws_message_size ==
	    b->m_limits.l_max_ws_message_size);
	fuzz_same_str(a->m_session_id, b->m_session_id);
	FUZZ_ASSERT(a->m_credits == b->m_credits);
	FUZZ_ASSERT(a->m_ack_offset == b->m_ack_offset);
	fuzz_same_str(a->m_message, b->m_message);
	FUZZ_ASSERT(a->m_code == b->m_code);
	fuzz_same_str(a->m_reason == NULL && a->m_type == TUNPROTO_T_WS_CLOSE
		? ""
		: a->m_reason,
	    b->m_reason);
	FUZZ_ASSERT(a->m_timestamp == b->m_timestamp);
	FUZZ_ASSERT(a->m_timestamp_int == b->m_timestamp_int);
}

/* A decoded message has every member its type requires. */
static void
fuzz_check_msg(const struct tunproto_msg *m)
{
	const char *name;
	size_t i;

	name = tunproto_type_name(m->m_type);
	FUZZ_ASSERT(name != NULL);
	FUZZ_ASSERT(tunproto_type_lookup(name, strlen(name)) == m->m_type);
	if (m->m_type == TUNPROTO_T_HELLO) {
		FUZZ_ASSERT(m->m_id == NULL);
		FUZZ_ASSERT(m->m_limits.l_protocol_version >= 0 &&
		    m->m_limits.l_protocol_version <= 255);
	} else
		FUZZ_ASSERT(m->m_id != NULL);
	if (m->m_type == TUNPROTO_T_HTTP_REQ ||
	    m->m_type == TUNPROTO_T_HTTP_REQ_BEGIN)
		FUZZ_ASSERT(m->m_method != NULL && m->m_path != NULL);
	if (m->m_type == TUNPROTO_T_HTTP_RESP ||
	    m->m_type == TUNPROTO_T_HTTP_RESP_BEGIN)
		FUZZ_ASSERT(m->m_status >= 0 && m->m_status <= 65535);
	if (m->m_type == TUNPROTO_T_ERROR)
		FUZZ_ASSERT(m->m_message != NULL);
	if (m->m_type == TUNPROTO_T_WS_CONNECT)
		FUZZ_ASSERT(m->m_path != NULL);
	if (m->m_type == TUNPROTO_T_WS_CLOSE)
		FUZZ_ASSERT(m->m_code >= 0 && m->m_code <= 65535);
	if (m->m_type == TUNPROTO_T_WINDOW)
		(void)tunproto_window_check(m, NULL);
	FUZZ_ASSERT(m->m_nheaders == 0 || m->m_headers != NULL);
	for (i = 0; i < m->m_nheaders; i++)
		FUZZ_ASSERT(m->m_headers[i].h_name != NULL &&
		    m->m_headers[i].h_value != NULL);
	FUZZ_ASSERT(m->m_body != NULL || m->m_body_len == 0);
	if (m->m_body != NULL)
		FUZZ_ASSERT(m->m_body[m->m_body_len] == '\0');
}

/* Negotiate a decoded hello in both roles and check the outcome. */
static void
fuzz_negotiate(const struct tunproto_msg *m)
{
	struct tunproto_limits local, out;
	char *err;
	int role, resumable, rv;

	tunproto_limits_default(&local);
	for (role = TUNPROTO_ROLE_CLIENT; role <= TUNPROTO_ROLE_SANDBOX;
	     role++) {
		err = NULL;
		rv = tunproto_negotiate(
		    &local, m, role, &out, &resumable, &err);
		if (rv != 0) {
			FUZZ_ASSERT(rv == -1 && err != NULL && resumable == 0);
			free(err);
			continue;
		}
		FUZZ_ASSERT(err == NULL);
		FUZZ_ASSERT(out.l_protocol_version == TUNPROTO_VERSION);
		FUZZ_ASSERT(out.l_max_stream_chunk >= TUNPROTO_CHUNK_MIN &&
		    out.l_max_stream_chunk <= local.l_max_stream_chunk);
		FUZZ_ASSERT(out.l_max_inflight >= 1 &&
		    out.l_max_inflight <= local.l_max_inflight);
		FUZZ_ASSERT(out.l_stream_window_frames >= 1 &&
		    out.l_stream_window_frames <= local.l_stream_window_frames);
		FUZZ_ASSERT(out.l_stream_window_frames == 1 ||
		    out.l_stream_window_frames * out.l_max_inflight <=
			TUNPROTO_DATA_BUDGET);
		FUZZ_ASSERT(out.l_max_body_size >= 1 &&
		    out.l_max_body_size <= local.l_max_body_size);
		FUZZ_ASSERT(out.l_max_ws_message_size >= 1 &&
		    out.l_max_ws_message_size <= local.l_max_ws_message_size);
		FUZZ_ASSERT(out.l_fast_path_body <= out.l_max_body_size);
		FUZZ_ASSERT(resumable == 0 || resumable == 1);
		if (role == TUNPROTO_ROLE_SANDBOX && resumable)
			FUZZ_ASSERT(tunproto_uuid_valid(m->m_session_id));
	}
}

/* Decode data as a control message, check it, and re-encode it. */
static void
fuzz_msg(const uint8_t *data, size_t size)
{
	struct tunproto_msg m, d, e;
	char *err = NULL, *err2 = NULL, *s1, *s2;
	size_t n1, n2;
	int rv, rv2;

	/* Lifting out any base64 body must change nothing. */
	tunproto_lift_min = SIZE_MAX;
	rv = tunproto_msg_decode((const char *)data, size, &d, &err);
	tunproto_lift_min = 0;
	rv2 = tunproto_msg_decode((const char *)data, size, &m, &err2);
	FUZZ_ASSERT(rv == rv2);
	fuzz_same_str(err, err2);
	free(err2);
	if (rv == TUNPROTO_DEC_OK || rv == TUNPROTO_DEC_BAD_BASE64) {
		/* fuzz_same_msg reads a NULL ws_close reason as "". */
		if (d.m_type == TUNPROTO_T_WS_CLOSE) {
			fuzz_same_str(d.m_id, m.m_id);
			fuzz_same_str(d.m_reason, m.m_reason);
			FUZZ_ASSERT(d.m_code == m.m_code);
		} else
			fuzz_same_msg(&d, &m, 1);
		tunproto_msg_free(&d);
	}
	if (rv == TUNPROTO_DEC_MALFORMED || rv == TUNPROTO_DEC_UNKNOWN) {
		FUZZ_ASSERT(err != NULL && *err != '\0');
		free(err);
		FUZZ_ASSERT(m.m_type == TUNPROTO_T_NONE && m.m_id == NULL &&
		    m.m_headers == NULL && m.m_body == NULL);
		return;
	}
	if (rv == TUNPROTO_DEC_BAD_BASE64) {
		FUZZ_ASSERT(err != NULL);
		free(err);
		FUZZ_ASSERT(m.m_body == NULL && m.m_body_len == 0);
	} else {
		FUZZ_ASSERT(rv == TUNPROTO_DEC_OK && err == NULL);
	}
	fuzz_check_msg(&m);
	if (m.m_type == TUNPROTO_T_HELLO)
		fuzz_negotiate(&m);

	/*
	 * Anything decoded re-encodes (it is UTF-8 and within JSON's
	 * integers); header octets may double in size as Latin-1.
	 */
	s1 = tunproto_msg_encode(&m, &n1);
	FUZZ_ASSERT(s1 != NULL && strlen(s1) == n1);
	err = NULL;
	FUZZ_ASSERT(tunproto_msg_decode(s1, n1, &d, &err) == TUNPROTO_DEC_OK);
	FUZZ_ASSERT(err == NULL);
	/* ws_connect headers are an object: octet-equal names collapse. */
	fuzz_same_msg(&m, &d, m.m_type != TUNPROTO_T_WS_CONNECT);
	if (m.m_type == TUNPROTO_T_WS_CONNECT)
		FUZZ_ASSERT(d.m_nheaders <= m.m_nheaders);

	s2 = tunproto_msg_encode(&d, &n2);
	FUZZ_ASSERT(s2 != NULL && n2 == n1 && strcmp(s1, s2) == 0);
	FUZZ_ASSERT(tunproto_msg_decode(s2, n2, &e, NULL) == TUNPROTO_DEC_OK);
	fuzz_same_msg(&d, &e, 1);

	free(s1);
	free(s2);
	tunproto_msg_free(&m);
	tunproto_msg_free(&d);
	tunproto_msg_free(&e);
	FUZZ_ASSERT(m.m_type == TUNPROTO_T_NONE && m.m_headers == NULL);
}

/* Entry point: every input goes through both decoders. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t hash;
	size_t i;

	/* A cheap hash picks a small chunk limit. */
	hash = 2166136261u;
	for (i = 0; i < size; i++)
		hash = (hash ^ data[i]) * 16777619u;

	fuzz_env(data, size, TUNPROTO_CHUNK_DEFAULT);
	fuzz_env(data, size, hash % 64);
	fuzz_msg(data, size);
	return (0);
}
