/*
 * Reverse-tunnel protocol v2 codec (tunnel-protocol.md §3, §4, §6, §11):
 * the JSON control messages, type names and base64 (UUIDs and the binary
 * envelope are lib/tunenv.c's).
 *
 * Decoding follows the Rust sandbox's schema (strict types, unknown members
 * ignored) with null read as absent, as §3.1 requires; encoding produces the
 * field names and shapes of §4 exactly. The project's choices where the
 * references disagree (§14) are noted where they apply.
 */
#include <sys/types.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "alloc.h"
#include "tunproto.h"

/* Wire names, indexed by enum tunproto_type. */
static const char *const tunproto_type_names[TUNPROTO_T__COUNT] = {
	[TUNPROTO_T_NONE] = NULL,
	[TUNPROTO_T_HELLO] = "hello",
	[TUNPROTO_T_HTTP_REQ] = "http_req",
	[TUNPROTO_T_HTTP_RESP] = "http_resp",
	[TUNPROTO_T_HTTP_REQ_BEGIN] = "http_req_begin",
	[TUNPROTO_T_HTTP_REQ_END] = "http_req_end",
	[TUNPROTO_T_HTTP_RESP_BEGIN] = "http_resp_begin",
	[TUNPROTO_T_HTTP_RESP_END] = "http_resp_end",
	[TUNPROTO_T_WINDOW] = "window",
	[TUNPROTO_T_ERROR] = "error",
	[TUNPROTO_T_WS_CONNECT] = "ws_connect",
	[TUNPROTO_T_WS_CONNECTED] = "ws_connected",
	[TUNPROTO_T_WS_MESSAGE] = "ws_message",
	[TUNPROTO_T_WS_CLOSE] = "ws_close",
	[TUNPROTO_T_PING] = "ping",
	[TUNPROTO_T_PONG] = "pong",
};

static const char tunproto_b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/*
 * Set *err (if err is not NULL) to a formatted message for the caller to
 * free; returns -1. Callers set *err at most once per call.
 */
int __attribute__((format(printf, 2, 3)))
tunproto_fail(char **err, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return (-1);
	va_start(ap, fmt);
	xvasprintf(err, fmt, ap);
	va_end(ap);
	return (-1);
}

/* Wire name of a message type, or NULL. */
const char *
tunproto_type_name(enum tunproto_type t)
{
	if (t <= TUNPROTO_T_NONE || t >= TUNPROTO_T__COUNT)
		return (NULL);
	return (tunproto_type_names[t]);
}

/* Message type for a wire name of len bytes, or TUNPROTO_T_NONE. */
enum tunproto_type
tunproto_type_lookup(const char *name, size_t len)
{
	int t;

	for (t = TUNPROTO_T_NONE + 1; t < TUNPROTO_T__COUNT; t++) {
		if (strlen(tunproto_type_names[t]) == len &&
		    memcmp(tunproto_type_names[t], name, len) == 0)
			return ((enum tunproto_type)t);
	}
	return (TUNPROTO_T_NONE);
}

/* Value of each byte as a base64 character, or -1. */
/* clang-format off */
static const signed char tunproto_b64_table[256] = {
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 62, -1, -1, -1, 63,
	52, 53, 54, 55, 56, 57, 58, 59, 60, 61, -1, -1, -1, -1, -1, -1,
	-1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
	15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, -1, -1, -1, -1, -1,
	-1, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
	41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
	-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
};
/* clang-format on */

/* Length of the padded base64 form of n bytes, or SIZE_MAX if too long. */
static size_t
tunproto_b64_len(size_t n)
{
	if (n / 3 >= SIZE_MAX / 4 - 1)
		return (SIZE_MAX);
	return ((n + 2) / 3 * 4);
}

/* Encode n bytes as standard base64 with padding into out (NUL-ended). */
static void
tunproto_b64_encode(const uint8_t *in, size_t n, char *out)
{
	uint32_t v;
	size_t i, o = 0;

	for (i = 0; i + 2 < n; i += 3) {
		v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 |
		    in[i + 2];
		out[o++] = tunproto_b64_alphabet[v >> 18];
		out[o++] = tunproto_b64_alphabet[(v >> 12) & 63];
		out[o++] = tunproto_b64_alphabet[(v >> 6) & 63];
		out[o++] = tunproto_b64_alphabet[v & 63];
	}
	if (i < n) {
		v = (uint32_t)in[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)in[i + 1] << 8;
		out[o++] = tunproto_b64_alphabet[v >> 18];
		out[o++] = tunproto_b64_alphabet[(v >> 12) & 63];
		out[o++] = (i + 1 < n) ? tunproto_b64_alphabet[(v >> 6) & 63]
				       : '=';
		out[o++] = '=';
	}
	out[o] = '\0';
}

/*
 * Decode strict base64: the standard alphabet, padding required, no
 * white space, zero trailing bits (the Rust sandbox's STANDARD engine).
 * Sets *out (NUL-terminated, NULL when empty) and *outlen; returns 0/-1.
 */
static int
tunproto_b64_decode(const char *s, size_t len, uint8_t **out, size_t *outlen)
{
	const signed char *tab = tunproto_b64_table;
	const unsigned char *u = (const unsigned char *)s;
	uint8_t *buf;
	size_t i, o = 0;
	int v[4], k, pad, bad;

	*out = NULL;
	*outlen = 0;
	if (len == 0)
		return (0);
	if (len % 4 != 0)
		return (-1);
	buf = xmalloc(len / 4 * 3 + 1);
	/* Every quad but the last: no padding allowed. */
	for (i = 0; i + 4 < len; i += 4) {
		v[0] = tab[u[i]];
		v[1] = tab[u[i + 1]];
		v[2] = tab[u[i + 2]];
		v[3] = tab[u[i + 3]];
		if ((v[0] | v[1] | v[2] | v[3]) < 0)
			goto fail;
		buf[o++] = (uint8_t)(v[0] << 2 | v[1] >> 4);
		buf[o++] = (uint8_t)((v[1] & 0x0f) << 4 | v[2] >> 2);
		buf[o++] = (uint8_t)((v[2] & 0x03) << 6 | v[3]);
	}
	/* The last quad: "xx==" or "xxx=" padding, zero trailing bits. */
	pad = 0;
	bad = 0;
	for (k = 0; k < 4; k++) {
		if (u[i + k] == '=' && k >= 2) {
			pad++;
			v[k] = 0;
			continue;
		}
		if (pad != 0 || (v[k] = tab[u[i + k]]) < 0)
			bad = 1;
	}
	if (bad || (pad == 2 && (v[1] & 0x0f) != 0) ||
	    (pad == 1 && (v[2] & 0x03) != 0))
		goto fail;
	buf[o++] = (uint8_t)(v[0] << 2 | v[1] >> 4);
	if (pad < 2)
		buf[o++] = (uint8_t)((v[1] & 0x0f) << 4 | v[2] >> 2);
	if (pad < 1)
		buf[o++] = (uint8_t)((v[2] & 0x03) << 6 | v[3]);
	buf[o] = '\0';
	*out = buf;
	*outlen = o;
	return (0);

fail:
	free(buf);
	return (-1);
}

/*
 * Turn a JSON string (valid UTF-8) into header octets: code points up to
 * U+00FF become one byte each (Latin-1, §3.4); anything above keeps its
 * UTF-8 bytes. Returns NULL for a NUL character.
 */
static char *
tunproto_latin1_decode(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	char *out;
	size_t i, o = 0;

	out = xmalloc(len + 1);
	for (i = 0; i < len; i++) {
		if (p[i] == 0) {
			free(out);
			return (NULL);
		}
		if ((p[i] == 0xc2 || p[i] == 0xc3) && i + 1 < len) {
			out[o++] = (char)((p[i] & 0x1f) << 6 |
			    (p[i + 1] & 0x3f));
			i++;
		} else
			out[o++] = (char)p[i];
	}
	out[o] = '\0';
	return (out);
}

/* Map header octets to a JSON string, one code point per byte (§3.4). */
static json_t *
tunproto_latin1_string(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	json_t *j;
	char *buf;
	size_t i, o = 0, len = strlen(s);

	buf = xmalloc(len * 2 + 1);
	for (i = 0; i < len; i++) {
		if (p[i] < 0x80)
			buf[o++] = (char)p[i];
		else {
			buf[o++] = (char)(0xc0 | p[i] >> 6);
			buf[o++] = (char)(0x80 | (p[i] & 0x3f));
		}
	}
	j = json_stringn_nocheck(buf, o);
	free(buf);
	return (j);
}

/* Member key of object o, or NULL if it is absent or null (§3.1). */
static json_t *
tunproto_member(json_t *o, const char *key)
{
	json_t *v;

	v = json_object_get(o, key);
	if (v == NULL || json_is_null(v))
		return (NULL);
	return (v);
}

/*
 * Read string member key into *out (NULL if absent and optional). Strings
 * with a NUL character are refused. Returns 0 or -1 with *err.
 */
static int
tunproto_get_string(json_t *o, const char *type, const char *key, int required,
    char **out, char **err)
{
	json_t *v;

	*out = NULL;
	if ((v = tunproto_member(o, key)) == NULL) {
		if (required)
			return (tunproto_fail(
			    err, "%s: \"%s\" is missing", type, key));
		return (0);
	}
	if (!json_is_string(v))
		return (tunproto_fail(
		    err, "%s: \"%s\" must be a string", type, key));
	if (strlen(json_string_value(v)) != json_string_length(v))
		return (tunproto_fail(
		    err, "%s: \"%s\" contains a NUL character", type, key));
	*out = xstrndup(json_string_value(v), json_string_length(v));
	return (0);
}

/*
 * Read an integer member in 0..max into *out; *present says whether it was
 * there (absent leaves *out alone). Returns 0 or -1 with *err.
 */
static int
tunproto_get_uint(json_t *o, const char *type, const char *key, int required,
    uint64_t max, uint64_t *out, int *present, char **err)
{
	json_int_t i;
	json_t *v;

	if (present != NULL)
		*present = 0;
	if ((v = tunproto_member(o, key)) == NULL) {
		if (required)
			return (tunproto_fail(
			    err, "%s: \"%s\" is missing", type, key));
		return (0);
	}
	if (!json_is_integer(v) || (i = json_integer_value(v)) < 0)
		return (tunproto_fail(err,
		    "%s: \"%s\" must be a non-negative integer", type, key));
	if ((uint64_t)i > max)
		return (tunproto_fail(err, "%s: \"%s\" must be at most %llu",
		    type, key, (unsigned long long)max));
	*out = (uint64_t)i;
	if (present != NULL)
		*present = 1;
	return (0);
}

/* Read an optional boolean member into *out. Returns 0 or -1 with *err. */
static int
tunproto_get_bool(
    json_t *o, const char *type, const char *key, int *out, char **err)
{
	json_t *v;

	*out = 0;
	if ((v = tunproto_member(o, key)) == NULL)
		return (0);
	if (!json_is_boolean(v))
		return (tunproto_fail(
		    err, "%s: \"%s\" must be a boolean", type, key));
	*out = json_is_true(v);
	return (0);
}

/* Append a header, taking ownership of name and value. */
static void
tunproto_push_header(struct tunproto_msg *m, char *name, char *value)
{
	m->m_headers = xreallocarray(
	    m->m_headers, m->m_nheaders + 1, sizeof *m->m_headers);
	m->m_headers[m->m_nheaders].h_name = name;
	m->m_headers[m->m_nheaders].h_value = value;
	m->m_nheaders++;
}

/* Append one header from two JSON strings; returns 0, or -1 for a NUL. */
static int
tunproto_add_json_header(
    struct tunproto_msg *m, const char *name, size_t name_len, json_t *value)
{
	char *n, *v;

	if ((n = tunproto_latin1_decode(name, name_len)) == NULL)
		return (-1);
	v = tunproto_latin1_decode(
	    json_string_value(value), json_string_length(value));
	if (v == NULL) {
		free(n);
		return (-1);
	}
	tunproto_push_header(m, n, v);
	return (0);
}

/* Read a pair array [["Name","value"], ...] into m's headers. */
static int
tunproto_get_pairs(json_t *a, struct tunproto_msg *m, const char *type,
    const char *key, char **err)
{
	json_t *item, *n, *v;
	size_t i;

	json_array_foreach(a, i, item)
	{
		if (!json_is_array(item) || json_array_size(item) != 2)
			return (tunproto_fail(err,
			    "%s: \"%s\" must be [name, value] pairs", type,
			    key));
		n = json_array_get(item, 0);
		v = json_array_get(item, 1);
		if (!json_is_string(n) || !json_is_string(v))
			return (tunproto_fail(err,
			    "%s: \"%s\" names and values must be strings", type,
			    key));
		if (tunproto_add_json_header(
			m, json_string_value(n), json_string_length(n), v) != 0)
			return (tunproto_fail(err,
			    "%s: \"%s\" contains a NUL character", type, key));
	}
	return (0);
}

/* Read an object {"Name": "value", ...} into m's headers, in its order. */
static int
tunproto_get_header_object(
    json_t *o, struct tunproto_msg *m, const char *type, char **err)
{
	json_t *v;
	void *it;

	for (it = json_object_iter(o); it != NULL;
	     it = json_object_iter_next(o, it)) {
		v = json_object_iter_value(it);
		if (!json_is_string(v))
			return (tunproto_fail(err,
			    "%s: \"headers\" values must be strings", type));
		if (tunproto_add_json_header(m, json_object_iter_key(it),
			json_object_iter_key_len(it), v) != 0)
			return (tunproto_fail(err,
			    "%s: \"headers\" contains a NUL character", type));
	}
	return (0);
}

/*
 * Read HTTP headers: a pair array in "headers" (current peers), else a
 * pair array in "header_items" (agent-dx V1), else the legacy object in
 * "headers" (§3.4, §14.1). Returns 0 or -1 with *err.
 */
static int
tunproto_get_http_headers(json_t *o, struct tunproto_msg *m, const char *type,
    int required, char **err)
{
	json_t *h, *items;

	h = tunproto_member(o, "headers");
	items = tunproto_member(o, "header_items");
	if (h != NULL && json_is_array(h))
		return (tunproto_get_pairs(h, m, type, "headers", err));
	if (items != NULL) {
		if (!json_is_array(items))
			return (tunproto_fail(err,
			    "%s: \"header_items\" must be [name, value] pairs",
			    type));
		return (
		    tunproto_get_pairs(items, m, type, "header_items", err));
	}
	if (h != NULL && json_is_object(h))
		return (tunproto_get_header_object(h, m, type, err));
	if (h != NULL)
		return (tunproto_fail(
		    err, "%s: \"headers\" must be [name, value] pairs", type));
	if (required)
		return (tunproto_fail(err, "%s: \"headers\" is missing", type));
	return (0);
}

/*
 * Read a base64 body member (absent means empty) into m->m_body. A string
 * that is not base64 sets *bad to key and leaves the body empty. Returns
 * 0 or -1 with *err.
 */
static int
tunproto_get_b64(json_t *o, struct tunproto_msg *m, const char *type,
    const char *key, int required, const char **bad, char **err)
{
	json_t *v;

	if ((v = tunproto_member(o, key)) == NULL) {
		if (required)
			return (tunproto_fail(
			    err, "%s: \"%s\" is missing", type, key));
		return (0);
	}
	if (!json_is_string(v))
		return (tunproto_fail(
		    err, "%s: \"%s\" must be a string", type, key));
	if (tunproto_b64_decode(json_string_value(v), json_string_length(v),
		&m->m_body, &m->m_body_len) != 0)
		*bad = key;
	return (0);
}

/* Read the members of a hello (§4.2) into m. */
static int
tunproto_dec_hello(json_t *o, struct tunproto_msg *m, char **err)
{
	struct tunproto_limits *l = &m->m_limits;
	const char *t = "hello";
	json_t *v_sr;
	uint64_t v = 0;
	int present, resume;

	/* The Rust sandbox reads protocol_version as an 8-bit integer. */
	if (tunproto_get_uint(
		o, t, "protocol_version", 1, 255, &v, NULL, err) != 0)
		return (-1);
	l->l_protocol_version = (int)v;
	if (tunproto_get_uint(o, t, "max_stream_chunk", 1, INT64_MAX,
		&l->l_max_stream_chunk, NULL, err) != 0 ||
	    tunproto_get_uint(o, t, "max_inflight", 1, INT64_MAX,
		&l->l_max_inflight, NULL, err) != 0 ||
	    tunproto_get_uint(o, t, "stream_window_frames", 1, INT64_MAX,
		&l->l_stream_window_frames, NULL, err) != 0)
		return (-1);
	if (tunproto_get_uint(o, t, "max_body_size", 0, INT64_MAX,
		&l->l_max_body_size, &present, err) != 0)
		return (-1);
	if (present)
		m->m_flags |= TUNPROTO_MSG_F_MAX_BODY;
	if (tunproto_get_uint(o, t, "max_ws_message_size", 0, INT64_MAX,
		&l->l_max_ws_message_size, &present, err) != 0)
		return (-1);
	if (present)
		m->m_flags |= TUNPROTO_MSG_F_MAX_WS;
	if (tunproto_get_bool(o, t, "resume", &resume, err) != 0)
		return (-1);
	if (resume)
		m->m_flags |= TUNPROTO_MSG_F_RESUME;
	/*
	 * akgateway's answer to X-AK-Tunnel-Session: did it resume the
	 * client's session?  An extension, so a value of another type is
	 * ignored rather than refusing the hello.
	 */
	v_sr = tunproto_member(o, "session_resumed");
	if (v_sr != NULL && json_is_boolean(v_sr)) {
		m->m_flags |= TUNPROTO_MSG_F_SESSION_TOLD;
		if (json_is_true(v_sr))
			m->m_flags |= TUNPROTO_MSG_F_SESSION_RESUMED;
	}
	return (
	    tunproto_get_string(o, t, "session_id", 0, &m->m_session_id, err));
}

/* Read an optional content_length (null or absent: unknown). */
static int
tunproto_dec_content_length(
    json_t *o, struct tunproto_msg *m, const char *t, char **err)
{
	int present;

	if (tunproto_get_uint(o, t, "content_length", 0, INT64_MAX,
		&m->m_content_length, &present, err) != 0)
		return (-1);
	if (present)
		m->m_flags |= TUNPROTO_MSG_F_CONTENT_LENGTH;
	return (0);
}

/* Read a required HTTP status (a 16-bit integer, as Rust reads it). */
static int
tunproto_dec_status(
    json_t *o, struct tunproto_msg *m, const char *t, char **err)
{
	uint64_t v = 0;

	if (tunproto_get_uint(o, t, "status", 1, 65535, &v, NULL, err) != 0)
		return (-1);
	m->m_status = (int)v;
	return (0);
}

/* Read a window (§4.8); the credits-or-ack rule is tunproto_window_check. */
static int
tunproto_dec_window(json_t *o, struct tunproto_msg *m, char **err)
{
	int present, complete;

	if (tunproto_get_uint(o, "window", "credits", 1, INT64_MAX,
		&m->m_credits, NULL, err) != 0)
		return (-1);
	if (tunproto_get_uint(o, "window", "ack_offset", 0, INT64_MAX,
		&m->m_ack_offset, &present, err) != 0)
		return (-1);
	if (present)
		m->m_flags |= TUNPROTO_MSG_F_ACK_OFFSET;
	if (tunproto_get_bool(o, "window", "complete", &complete, err) != 0)
		return (-1);
	if (complete)
		m->m_flags |= TUNPROTO_MSG_F_COMPLETE;
	return (0);
}

/* Read a ws_message (§4.10): text as is, binary from base64. */
static int
tunproto_dec_ws_message(
    json_t *o, struct tunproto_msg *m, const char **bad, char **err)
{
	const char *t = "ws_message";
	json_t *v;
	int binary;

	if (tunproto_get_bool(o, t, "binary", &binary, err) != 0)
		return (-1);
	if (binary) {
		m->m_flags |= TUNPROTO_MSG_F_BINARY;
		return (tunproto_get_b64(o, m, t, "data", 1, bad, err));
	}
	if ((v = tunproto_member(o, "data")) == NULL)
		return (tunproto_fail(err, "%s: \"data\" is missing", t));
	if (!json_is_string(v))
		return (tunproto_fail(err, "%s: \"data\" must be a string", t));
	/* Text may hold U+0000; keep the length, add a NUL for convenience. */
	m->m_body_len = json_string_length(v);
	m->m_body = xmalloc(m->m_body_len + 1);
	memcpy(m->m_body, json_string_value(v), m->m_body_len);
	m->m_body[m->m_body_len] = '\0';
	return (0);
}

/* Read a ws_close (§4.10): code defaults to 1000, reason to "". */
static int
tunproto_dec_ws_close(json_t *o, struct tunproto_msg *m, char **err)
{
	uint64_t code = 1000;

	if (tunproto_get_uint(
		o, "ws_close", "code", 0, 65535, &code, NULL, err) != 0)
		return (-1);
	m->m_code = (int)code;
	return (
	    tunproto_get_string(o, "ws_close", "reason", 0, &m->m_reason, err));
}

/* Read a ping or pong timestamp: any JSON number, integer kept as such. */
static int
tunproto_dec_timestamp(json_t *o, struct tunproto_msg *m, char **err)
{
	const char *t = tunproto_type_name(m->m_type);
	json_t *v;

	if ((v = tunproto_member(o, "timestamp")) == NULL)
		return (tunproto_fail(err, "%s: \"timestamp\" is missing", t));
	if (json_is_integer(v)) {
		m->m_flags |= TUNPROTO_MSG_F_TS_INT;
		m->m_timestamp_int = json_integer_value(v);
		m->m_timestamp = (double)m->m_timestamp_int;
	} else if (json_is_real(v))
		m->m_timestamp = json_real_value(v);
	else
		return (tunproto_fail(
		    err, "%s: \"timestamp\" must be a number", t));
	return (0);
}

/* Read the members of type m->m_type from o; *bad names a base64 body. */
static int
tunproto_dec_members(
    json_t *o, struct tunproto_msg *m, const char **bad, char **err)
{
	const char *t = tunproto_type_name(m->m_type);

	if (m->m_type == TUNPROTO_T_HELLO)
		return (tunproto_dec_hello(o, m, err));
	if (tunproto_get_string(o, t, "id", 1, &m->m_id, err) != 0)
		return (-1);

	switch (m->m_type) {
	case TUNPROTO_T_HTTP_REQ:
	case TUNPROTO_T_HTTP_REQ_BEGIN:
		if (tunproto_get_string(o, t, "method", 1, &m->m_method, err) !=
			0 ||
		    tunproto_get_string(o, t, "path", 1, &m->m_path, err) !=
			0 ||
		    tunproto_get_http_headers(o, m, t, 1, err) != 0)
			return (-1);
		if (m->m_type == TUNPROTO_T_HTTP_REQ_BEGIN)
			return (tunproto_dec_content_length(o, m, t, err));
		return (tunproto_get_b64(o, m, t, "body", 0, bad, err));
	case TUNPROTO_T_HTTP_RESP:
	case TUNPROTO_T_HTTP_RESP_BEGIN:
		if (tunproto_dec_status(o, m, t, err) != 0 ||
		    tunproto_get_http_headers(o, m, t, 0, err) != 0)
			return (-1);
		if (m->m_type == TUNPROTO_T_HTTP_RESP_BEGIN)
			return (tunproto_dec_content_length(o, m, t, err));
		return (tunproto_get_b64(o, m, t, "body", 0, bad, err));
	case TUNPROTO_T_WINDOW:
		return (tunproto_dec_window(o, m, err));
	case TUNPROTO_T_ERROR:
		return (tunproto_get_string(
		    o, t, "message", 1, &m->m_message, err));
	case TUNPROTO_T_WS_CONNECT:
		if (tunproto_get_string(o, t, "path", 1, &m->m_path, err) != 0)
			return (-1);
		/* A JSON object, as the Rust sandbox reads it (§3.4). */
		o = tunproto_member(o, "headers");
		if (o == NULL)
			return (tunproto_fail(
			    err, "%s: \"headers\" is missing", t));
		if (!json_is_object(o))
			return (tunproto_fail(
			    err, "%s: \"headers\" must be an object", t));
		return (tunproto_get_header_object(o, m, t, err));
	case TUNPROTO_T_WS_MESSAGE:
		return (tunproto_dec_ws_message(o, m, bad, err));
	case TUNPROTO_T_WS_CLOSE:
		return (tunproto_dec_ws_close(o, m, err));
	case TUNPROTO_T_PING:
	case TUNPROTO_T_PONG:
		return (tunproto_dec_timestamp(o, m, err));
	default:
		/* http_req_end, http_resp_end, ws_connected: the id only. */
		return (0);
	}
}

/* Shorter bodies are not worth the copy; tests set 0, or SIZE_MAX: never. */
size_t tunproto_lift_min = 256;

/* Index of the first byte at or after i that is not JSON white space. */
static size_t
tunproto_skip_ws(const char *p, size_t len, size_t i)
{
	while (i < len &&
	    (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
		i++;
	return (i);
}

/*
 * Where jansson's time goes: it reads a string one character at a time
 * through several layers, so a 1 KiB body costs more than the rest of an
 * http_resp ten times over. tunproto_lift finds the top-level "body"
 * string of a frame without decoding it, so that jansson can parse the
 * frame with that string emptied and the body goes straight to the base64
 * decoder. It is a scan for string boundaries and nesting, not a JSON
 * parser: jansson still parses and checks every other byte, and the
 * lifted bytes are checked by the base64 decoder. It gives up (and jansson
 * reads the whole frame) unless the top level is an object whose keys hold
 * no escapes, with exactly one "body" member whose value is a string of
 * base64 characters only. Removing such characters from inside a string
 * leaves a valid document valid and an invalid one invalid, and with one
 * plain "body" key no other member can stand for it.
 *
 * Sets *off and *n to where the body's text is in the len bytes at p and
 * returns 0, or returns -1: jansson reads it all.
 */
static int
tunproto_lift(const char *p, size_t len, size_t *off, size_t *n)
{
	const signed char *tab = tunproto_b64_table;
	size_t i, j, start, depth = 1;
	int esc, found = 0;

	i = tunproto_skip_ws(p, len, 0);
	if (i >= len || p[i] != '{')
		return (-1);
	for (i++; i < len && depth > 0; i++) {
		switch (p[i]) {
		case '{':
		case '[':
			depth++;
			continue;
		case '}':
		case ']':
			depth--;
			continue;
		case '"':
			break;
		default:
			continue;
		}
		/* A string: find its closing quote. */
		start = i + 1;
		esc = 0;
		for (j = start; j < len && p[j] != '"'; j++) {
			if (p[j] == '\\') {
				esc = 1;
				j++;
			}
		}
		if (j >= len)
			return (-1);
		i = j;
		j = tunproto_skip_ws(p, len, j + 1);
		if (depth != 1 || j >= len || p[j] != ':')
			continue; /* a value, or nested */
		if (esc)
			return (-1);
		if (i - start != 4 || memcmp(p + start, "body", 4) != 0)
			continue;
		j = tunproto_skip_ws(p, len, j + 1);
		if (found || j >= len || p[j] != '"')
			return (-1);
		for (i = j + 1;
		     i < len && (tab[(unsigned char)p[i]] >= 0 || p[i] == '=');
		     i++)
			;
		if (i >= len || p[i] != '"')
			return (-1);
		*off = j + 1;
		*n = i - (j + 1);
		found = 1;
	}
	return (found && *n >= tunproto_lift_min ? 0 : -1);
}

/*
 * Decode one control message (a text frame of len bytes) into m, which
 * need not be initialised. Returns TUNPROTO_DEC_OK; TUNPROTO_DEC_UNKNOWN
 * for an unknown "type" and TUNPROTO_DEC_MALFORMED for anything else
 * wrong, both to be dropped and logged with *err, m left empty; or
 * TUNPROTO_DEC_BAD_BASE64 when only a base64 body is invalid: m is filled
 * (without the body) so the caller can fail that one exchange, and *err
 * says why. *err is set only when the result is not OK; the caller frees
 * it. Free m with tunproto_msg_free after OK or BAD_BASE64.
 */
int
tunproto_msg_decode(
    const char *json, size_t len, struct tunproto_msg *m, char **err)
{
	json_error_t jerr;
	json_t *root, *type;
	const char *bad = NULL;
	char *rest;
	size_t off = 0, n = 0;
	int rv, lifted = 0;

	memset(m, 0, sizeof *m);
	if (len > TUNPROTO_CONTROL_MAX) {
		tunproto_fail(err, "control frame exceeds %d bytes",
		    TUNPROTO_CONTROL_MAX);
		return (TUNPROTO_DEC_MALFORMED);
	}
	if (tunproto_lift_min != SIZE_MAX &&
	    tunproto_lift(json, len, &off, &n) == 0) {
		/* The frame less the body's text; the body is read below. */
		rest = xmalloc(len - n);
		memcpy(rest, json, off);
		memcpy(rest + off, json + off + n, len - off - n);
		root = json_loadb(rest, len - n, JSON_ALLOW_NUL, &jerr);
		free(rest);
		lifted = 1;
	} else
		root = json_loadb(json, len, JSON_ALLOW_NUL, &jerr);
	if (root == NULL) {
		tunproto_fail(err, "invalid JSON: %s", jerr.text);
		return (TUNPROTO_DEC_MALFORMED);
	}
	if (!json_is_object(root)) {
		tunproto_fail(err, "control frame is not a JSON object");
		rv = TUNPROTO_DEC_MALFORMED;
		goto out;
	}
	type = json_object_get(root, "type");
	if (type == NULL || !json_is_string(type)) {
		tunproto_fail(err, "control frame has no string \"type\"");
		rv = TUNPROTO_DEC_MALFORMED;
		goto out;
	}
	m->m_type = tunproto_type_lookup(
	    json_string_value(type), json_string_length(type));
	if (m->m_type == TUNPROTO_T_NONE) {
		/* Bounded, printable: the name goes into a log line. */
		tunproto_fail(err, "unknown control message type \"%.64s\"",
		    json_string_value(type));
		rv = TUNPROTO_DEC_UNKNOWN;
		goto out;
	}
	if (tunproto_dec_members(root, m, &bad, err) != 0) {
		tunproto_msg_free(m);
		rv = TUNPROTO_DEC_MALFORMED;
		goto out;
	}
	if (lifted &&
	    (m->m_type == TUNPROTO_T_HTTP_REQ ||
		m->m_type == TUNPROTO_T_HTTP_RESP) &&
	    tunproto_b64_decode(json + off, n, &m->m_body, &m->m_body_len) != 0)
		bad = "body";
	rv = TUNPROTO_DEC_OK;
	if (bad != NULL) {
		tunproto_fail(err, "%s: \"%s\" is not valid base64",
		    tunproto_type_name(m->m_type), bad);
		rv = TUNPROTO_DEC_BAD_BASE64;
	}

out:
	json_decref(root);
	return (rv);
}

/* Set key to the UTF-8 text s (NULL skips); -1 if s is not UTF-8. */
static int
tunproto_put_string(json_t *o, const char *key, const char *s)
{
	if (s == NULL)
		return (0);
	return (json_object_set_new(o, key, json_string(s)));
}

/* Set key to the unsigned integer v; -1 if JSON cannot hold it. */
static int
tunproto_put_uint(json_t *o, const char *key, uint64_t v)
{
	if (v > INT64_MAX)
		return (-1);
	return (json_object_set_new(o, key, json_integer((json_int_t)v)));
}

/* Set key to base64 of the len bytes at p ("" when empty). */
static int
tunproto_put_b64(json_t *o, const char *key, const uint8_t *p, size_t len)
{
	size_t n;
	char *buf;
	int rv;

	if ((n = tunproto_b64_len(len)) > TUNPROTO_CONTROL_MAX)
		return (-1);
	buf = xmalloc(n + 1);
	tunproto_b64_encode(p, len, buf);
	rv = json_object_set_new(o, key, json_stringn_nocheck(buf, n));
	free(buf);
	return (rv);
}

/* Set "headers" to m's headers as a pair array (§3.4, §14.1). */
static int
tunproto_put_pairs(json_t *o, const struct tunproto_msg *m)
{
	json_t *a, *pair;
	size_t i;

	a = json_array();
	for (i = 0; i < m->m_nheaders; i++) {
		if (m->m_headers[i].h_name == NULL ||
		    m->m_headers[i].h_value == NULL) {
			json_decref(a);
			return (-1);
		}
		pair = json_array();
		json_array_append_new(
		    pair, tunproto_latin1_string(m->m_headers[i].h_name));
		json_array_append_new(
		    pair, tunproto_latin1_string(m->m_headers[i].h_value));
		json_array_append_new(a, pair);
	}
	return (json_object_set_new(o, "headers", a));
}

/* Set "headers" to m's headers as an object, last value wins (§3.4). */
static int
tunproto_put_header_object(json_t *o, const struct tunproto_msg *m)
{
	json_t *h, *k;
	size_t i;

	h = json_object();
	for (i = 0; i < m->m_nheaders; i++) {
		if (m->m_headers[i].h_name == NULL ||
		    m->m_headers[i].h_value == NULL) {
			json_decref(h);
			return (-1);
		}
		k = tunproto_latin1_string(m->m_headers[i].h_name);
		json_object_setn_new_nocheck(h, json_string_value(k),
		    json_string_length(k),
		    tunproto_latin1_string(m->m_headers[i].h_value));
		json_decref(k);
	}
	return (json_object_set_new(o, "headers", h));
}

/* Set "content_length" to the length, or null when unknown (§4.6, §4.7). */
static int
tunproto_put_content_length(json_t *o, const struct tunproto_msg *m)
{
	if (m->m_flags & TUNPROTO_MSG_F_CONTENT_LENGTH)
		return (tunproto_put_uint(
		    o, "content_length", m->m_content_length));
	return (json_object_set_new(o, "content_length", json_null()));
}

/* Add the members of a hello in the order of §4.2. */
static int
tunproto_enc_hello(json_t *o, const struct tunproto_msg *m)
{
	const struct tunproto_limits *l = &m->m_limits;

	if (l->l_protocol_version < 0 ||
	    tunproto_put_uint(
		o, "protocol_version", (uint64_t)l->l_protocol_version) != 0 ||
	    tunproto_put_uint(o, "max_stream_chunk", l->l_max_stream_chunk) !=
		0 ||
	    tunproto_put_uint(o, "max_inflight", l->l_max_inflight) != 0 ||
	    tunproto_put_uint(
		o, "stream_window_frames", l->l_stream_window_frames) != 0)
		return (-1);
	if ((m->m_flags & TUNPROTO_MSG_F_MAX_BODY) &&
	    tunproto_put_uint(o, "max_body_size", l->l_max_body_size) != 0)
		return (-1);
	if ((m->m_flags & TUNPROTO_MSG_F_MAX_WS) &&
	    tunproto_put_uint(
		o, "max_ws_message_size", l->l_max_ws_message_size) != 0)
		return (-1);
	if (m->m_flags & TUNPROTO_MSG_F_RESUME)
		json_object_set_new(o, "resume", json_true());
	if (m->m_flags & TUNPROTO_MSG_F_SESSION_TOLD)
		json_object_set_new(o, "session_resumed",
		    json_boolean(m->m_flags & TUNPROTO_MSG_F_SESSION_RESUMED));
	return (tunproto_put_string(o, "session_id", m->m_session_id));
}

/* Add the members of types other than hello, after "id". */
static int
tunproto_enc_members(json_t *o, const struct tunproto_msg *m)
{
	json_t *ts;

	switch (m->m_type) {
	case TUNPROTO_T_HTTP_REQ:
	case TUNPROTO_T_HTTP_REQ_BEGIN:
		if (m->m_method == NULL || m->m_path == NULL ||
		    tunproto_put_string(o, "method", m->m_method) != 0 ||
		    tunproto_put_string(o, "path", m->m_path) != 0 ||
		    tunproto_put_pairs(o, m) != 0)
			return (-1);
		if (m->m_type == TUNPROTO_T_HTTP_REQ_BEGIN)
			return (tunproto_put_content_length(o, m));
		return (0); /* the body: tunproto_msg_encode */
	case TUNPROTO_T_HTTP_RESP:
	case TUNPROTO_T_HTTP_RESP_BEGIN:
		if (m->m_status < 0 || m->m_status > 65535 ||
		    tunproto_put_uint(o, "status", (uint64_t)m->m_status) !=
			0 ||
		    tunproto_put_pairs(o, m) != 0)
			return (-1);
		if (m->m_type == TUNPROTO_T_HTTP_RESP_BEGIN)
			return (tunproto_put_content_length(o, m));
		return (0); /* the body: tunproto_msg_encode */
	case TUNPROTO_T_WINDOW:
		if (tunproto_put_uint(o, "credits", m->m_credits) != 0)
			return (-1);
		if ((m->m_flags & TUNPROTO_MSG_F_ACK_OFFSET) &&
		    tunproto_put_uint(o, "ack_offset", m->m_ack_offset) != 0)
			return (-1);
		if (m->m_flags & TUNPROTO_MSG_F_COMPLETE)
			json_object_set_new(o, "complete", json_true());
		return (0);
	case TUNPROTO_T_ERROR:
		if (m->m_message == NULL)
			return (-1);
		return (tunproto_put_string(o, "message", m->m_message));
	case TUNPROTO_T_WS_CONNECT:
		if (m->m_path == NULL ||
		    tunproto_put_string(o, "path", m->m_path) != 0)
			return (-1);
		return (tunproto_put_header_object(o, m));
	case TUNPROTO_T_WS_MESSAGE:
		if (m->m_flags & TUNPROTO_MSG_F_BINARY) {
			if (tunproto_put_b64(
				o, "data", m->m_body, m->m_body_len) != 0)
				return (-1);
		} else if (json_object_set_new(o, "data",
			       json_stringn(m->m_body == NULL
				       ? ""
				       : (const char *)m->m_body,
				   m->m_body_len)) != 0)
			return (-1);
		return (json_object_set_new(o, "binary",
		    json_boolean(m->m_flags & TUNPROTO_MSG_F_BINARY)));
	case TUNPROTO_T_WS_CLOSE:
		if (m->m_code < 0 || m->m_code > 65535 ||
		    tunproto_put_uint(o, "code", (uint64_t)m->m_code) != 0)
			return (-1);
		return (json_object_set_new(o, "reason",
		    json_string(m->m_reason == NULL ? "" : m->m_reason)));
	case TUNPROTO_T_PING:
	case TUNPROTO_T_PONG:
		if (m->m_flags & TUNPROTO_MSG_F_TS_INT)
			ts = json_integer(m->m_timestamp_int);
		else
			ts = json_real(m->m_timestamp);
		return (json_object_set_new(o, "timestamp", ts));
	default:
		return (0);
	}
}

/*
 * Append "body" (base64 of the len bytes at p) as the last member of the
 * object text s of *n bytes, which is freed. jansson would copy base64
 * text one character at a time looking for bytes to escape, and it has
 * none. Returns the new text with its length in *n, or NULL if too long.
 */
static char *
tunproto_enc_body(char *s, size_t *n, const uint8_t *p, size_t len)
{
	static const char key[] = ",\"body\":\"";
	size_t b64 = tunproto_b64_len(len), tot;
	char *out;

	if (b64 > TUNPROTO_CONTROL_MAX || *n < 2 || s[*n - 1] != '}') {
		free(s);
		return (NULL);
	}
	tot = *n - 1 + (sizeof key - 1) + b64 + 2;
	out = xmalloc(tot + 1);
	memcpy(out, s, *n - 1);
	memcpy(out + *n - 1, key, sizeof key - 1);
	tunproto_b64_encode(p, len, out + *n - 1 + sizeof key - 1);
	memcpy(out + tot - 2, "\"}", 3);
	free(s);
	*n = tot;
	return (out);
}

/*
 * Encode m as one compact JSON object with the field names and shapes of
 * §4. Returns the text (free with free) and its length in *len, or NULL
 * if m is incomplete, holds text that is not UTF-8, or would exceed the
 * 8 MiB control frame limit.
 */
char *
tunproto_msg_encode(const struct tunproto_msg *m, size_t *len)
{
	const char *name;
	json_t *o;
	char *s = NULL;
	size_t n;

	if ((name = tunproto_type_name(m->m_type)) == NULL)
		return (NULL);
	o = json_object();
	json_object_set_new(o, "type", json_string(name));
	if (m->m_type == TUNPROTO_T_HELLO) {
		if (tunproto_enc_hello(o, m) != 0)
			goto out;
	} else {
		/* Pings may go without an id; everything else needs one. */
		if (m->m_id == NULL && m->m_type != TUNPROTO_T_PING &&
		    m->m_type != TUNPROTO_T_PONG)
			goto out;
		if (json_object_set_new(o, "id",
			json_string(m->m_id == NULL ? "" : m->m_id)) != 0 ||
		    tunproto_enc_members(o, m) != 0)
			goto out;
	}
	if ((s = json_dumps(o, JSON_COMPACT)) == NULL)
		goto out;
	n = strlen(s);
	if (m->m_type == TUNPROTO_T_HTTP_REQ ||
	    m->m_type == TUNPROTO_T_HTTP_RESP)
		s = tunproto_enc_body(s, &n, m->m_body, m->m_body_len);
	if (s != NULL && n > TUNPROTO_CONTROL_MAX) {
		free(s);
		s = NULL;
	}
	if (s != NULL && len != NULL)
		*len = n;

out:
	json_decref(o);
	return (s);
}

/* Append a copy of one header to m. */
void
tunproto_msg_add_header(
    struct tunproto_msg *m, const char *name, const char *value)
{
	tunproto_push_header(m, xstrdup(name), xstrdup(value));
}

/* Replace m's body (or ws data) with a NUL-terminated copy of len bytes. */
void
tunproto_msg_set_body(struct tunproto_msg *m, const void *p, size_t len)
{
	free(m->m_body);
	m->m_body = xmalloc(len + 1);
	if (len != 0)
		memcpy(m->m_body, p, len);
	m->m_body[len] = '\0';
	m->m_body_len = len;
}

/*
 * Check the rule a window must follow beyond its types (§4.8): credits 0
 * needs an ack_offset. The reference client and Python sandbox treat a
 * violation as a protocol error; Rust does not check. Returns 0 or -1.
 */
int
tunproto_window_check(const struct tunproto_msg *m, char **err)
{
	if (m->m_type != TUNPROTO_T_WINDOW)
		return (tunproto_fail(err, "not a window"));
	if (m->m_credits == 0 && !(m->m_flags & TUNPROTO_MSG_F_ACK_OFFSET))
		return (tunproto_fail(
		    err, "window must carry credits or a valid ack_offset"));
	return (0);
}

/* Free everything m owns and leave it empty. */
void
tunproto_msg_free(struct tunproto_msg *m)
{
	size_t i;

	for (i = 0; i < m->m_nheaders; i++) {
		free(m->m_headers[i].h_name);
		free(m->m_headers[i].h_value);
	}
	free(m->m_headers);
	free(m->m_id);
	free(m->m_method);
	free(m->m_path);
	free(m->m_body);
	free(m->m_session_id);
	free(m->m_message);
	free(m->m_reason);
	memset(m, 0, sizeof *m);
}
