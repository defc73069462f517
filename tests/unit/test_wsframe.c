/*
 * Unit tests for lib/wsframe.c, in memory: the parser against every rule
 * of RFC 6455 it enforces, each input fed whole, split in two at every
 * byte and one byte at a time (each piece its own chain), with the same
 * result every way; the close code rule over all 65536 codes; masking and
 * UTF-8 against slow references; the header of frames we send.
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

#include "wsframe.h"

/* The masking key of the frames below: not zero, no byte the same. */
static const uint8_t test_mask[4] = { 0x5a, 0xc3, 0x17, 0xe8 };

/* Messages may be this long unless a case says otherwise. */
#define TEST_MAX ((size_t)1 << 20)

/*
 * Append a frame to out: first byte b0, the shortest length field, and
 * masked with test_mask if masked.
 */
static void
frame_add(struct evbuffer *out, uint8_t b0, const void *payload, size_t len,
    int masked)
{
	uint8_t h[WS_HEADER_MAX], *p;
	size_t hl, i;

	hl = ws_header_put(h, 0, len, masked ? test_mask : NULL);
	h[0] = b0;
	p = malloc(len + 1);
	assert_non_null(p);
	for (i = 0; i < len; i++)
		p[i] = ((const uint8_t *)payload)[i] ^
		    (masked ? test_mask[i & 3] : 0);
	assert_int_equal(evbuffer_add(out, h, hl), 0);
	assert_int_equal(evbuffer_add(out, p, len), 0);
	free(p);
}

/* Append len bytes of p to a transcript, escaping what is not printable. */
static void
put_escaped(struct evbuffer *t, const uint8_t *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\')
			evbuffer_add(t, p + i, 1);
		else
			evbuffer_add_printf(t, "\\x%02x", p[i]);
	}
}

/*
 * Feed the len bytes at bytes to a parser (server or client role,
 * messages up to max), in pieces ending at the ncut offsets in cuts (each
 * piece its own chain), and return what it found as a string the caller
 * frees: "T:payload;" a text message, "B:" binary, "P:" a ping, "O:" a
 * pong, "X1000:reason;" a close, "E1002;" an error.  Checks the parser's
 * contract on the way.
 */
static char *
rx_run(const uint8_t *bytes, size_t len, int server, size_t max,
    const size_t *cuts, size_t ncut)
{
	struct wsframe_rx rx;
	struct wsframe_event ev;
	struct evbuffer *in, *piece, *msg, *t;
	size_t off = 0, end, i, n;
	enum wsframe_ev e;
	char *s;
	int done = 0;

	wsframe_rx_init(&rx, server, max);
	in = evbuffer_new();
	msg = evbuffer_new();
	t = evbuffer_new();
	assert_true(in != NULL && msg != NULL && t != NULL);
	for (i = 0; i <= ncut; i++) {
		end = i < ncut ? cuts[i] : len;
		piece = evbuffer_new();
		assert_non_null(piece);
		assert_int_equal(
		    evbuffer_add(piece, bytes + off, end - off), 0);
		assert_int_equal(evbuffer_add_buffer(in, piece), 0);
		evbuffer_free(piece);
		off = end;
		while (!done &&
		    (e = wsframe_rx_next(&rx, in, &ev)) != WSFRAME_EV_MORE) {
			assert_int_equal(e, ev.e_type);
			switch (e) {
			case WSFRAME_EV_DATA:
				assert_true(ev.e_op == WS_OP_TEXT ||
				    ev.e_op == WS_OP_BINARY);
				assert_true(
				    ev.e_len <= evbuffer_get_length(in));
				assert_true(ev.e_len != 0 || ev.e_fin);
				evbuffer_remove_buffer(in, msg, ev.e_len);
				assert_true(evbuffer_get_length(msg) <= max);
				if (!ev.e_fin)
					break;
				n = evbuffer_get_length(msg);
				evbuffer_add_printf(t,
				    "%c:", ev.e_op == WS_OP_TEXT ? 'T' : 'B');
				put_escaped(t, evbuffer_pullup(msg, -1), n);
				evbuffer_add(t, ";", 1);
				evbuffer_drain(msg, n);
				break;
			case WSFRAME_EV_CONTROL:
				assert_true(ev.e_len <= WS_CONTROL_MAX);
				if (ev.e_op == WS_OP_CLOSE) {
					evbuffer_add_printf(
					    t, "X%u:", ev.e_code);
					put_escaped(t,
					    (const uint8_t *)ev.e_reason,
					    ev.e_reason_len);
					assert_true(wsframe_rx_ended(&rx));
					done = 1;
				} else {
					evbuffer_add(t,
					    ev.e_op == WS_OP_PING ? "P:" : "O:",
					    2);
					put_escaped(t, ev.e_data, ev.e_len);
				}
				evbuffer_add(t, ";", 1);
				break;
			case WSFRAME_EV_ERROR:
				assert_non_null(ev.e_why);
				assert_true(ev.e_op == 0 && ev.e_len == 0);
				assert_true(wsframe_rx_ended(&rx));
				evbuffer_add_printf(t, "E%u;", ev.e_code);
				done = 1;
				break;
			case WSFRAME_EV_MORE:
				break;
			}
		}
	}
	/* Once ended it stays ended, whatever comes. */
	if (done) {
		evbuffer_add(in, "\x81\x00", 2);
		assert_int_equal(
		    wsframe_rx_next(&rx, in, &ev), WSFRAME_EV_MORE);
	}
	n = evbuffer_get_length(t);
	s = malloc(n + 1);
	assert_non_null(s);
	evbuffer_remove(t, s, n);
	s[n] = '\0';
	evbuffer_free(in);
	evbuffer_free(msg);
	evbuffer_free(t);
	return (s);
}

/*
 * The bytes in src must parse to want fed whole, split in two at every
 * byte, and (when short enough) one byte at a time.  For long inputs only
 * the first and last 40 splits and every 4093rd are tried.
 */
static void
rx_check(const char *what, struct evbuffer *src, int server, size_t max,
    const char *want)
{
	size_t len = evbuffer_get_length(src), k, *cuts;
	const uint8_t *bytes = evbuffer_pullup(src, -1);
	char *got;

	got = rx_run(bytes, len, server, max, NULL, 0);
	if (strcmp(got, want) != 0)
		fail_msg("%s: whole: got \"%s\", want \"%s\"", what, got, want);
	free(got);
	for (k = 1; k < len; k++) {
		if (len > 200 && k > 40 && k + 40 < len && k % 4093 != 0)
			continue;
		got = rx_run(bytes, len, server, max, &k, 1);
		if (strcmp(got, want) != 0)
			fail_msg("%s: split at %zu: got \"%s\", want \"%s\"",
			    what, k, got, want);
		free(got);
	}
	if (len < 2 || len > 4096)
		return;
	cuts = malloc(len * sizeof *cuts);
	assert_non_null(cuts);
	for (k = 1; k < len; k++)
		cuts[k - 1] = k;
	got = rx_run(bytes, len, server, max, cuts, len - 1);
	if (strcmp(got, want) != 0)
		fail_msg(
		    "%s: bytewise: got \"%s\", want \"%s\"", what, got, want);
	free(got);
	free(cuts);
}

/* One frame of a case: first byte, payload (len SIZE_MAX: strlen). */
struct frame_spec {
	uint8_t fs_b0;
	const char *fs_payload;
	size_t fs_len;
};

/* A stream and what the parser must make of it. */
struct rx_case {
	const char *c_what;
	int c_client; /* parse as a client: frames unmasked */
	size_t c_max; /* 0: TEST_MAX */
	struct frame_spec c_frames[5]; /* masked for a server */
	const char *c_raw; /* then these bytes as they are */
	size_t c_rawlen;
	const char *c_want;
};

#define F(b0, s) \
	{ \
		b0, s, sizeof s - 1 \
	}
#define RAW(s) s, sizeof s - 1

static const struct rx_case rx_cases[] = {
	{ "a text message", 0, 0, { F(0x81, "hello") }, NULL, 0, "T:hello;" },
	{ "a binary message", 0, 0, { F(0x82, "\x00\x01\xff") }, NULL, 0,
	    "B:\\x00\\x01\\xff;" },
	{ "empty messages", 0, 0, { F(0x81, ""), F(0x82, "") }, NULL, 0,
	    "T:;B:;" },
	{ "a message in fragments", 0, 0,
	    { F(0x01, "Hel"), F(0x00, "lo"), F(0x80, " w") }, NULL, 0,
	    "T:Hello w;" },
	{ "empty fragments", 0, 0, { F(0x02, ""), F(0x00, ""), F(0x80, "x") },
	    NULL, 0, "B:x;" },
	{ "control frames between fragments", 0, 0,
	    { F(0x01, "a"), F(0x89, "p"), F(0x8a, ""), F(0x80, "b") }, NULL, 0,
	    "P:p;O:;T:ab;" },
	{ "a client reads unmasked frames", 1, 0,
	    { F(0x81, "hi"), F(0x89, "") }, NULL, 0, "T:hi;P:;" },
	{ "an unmasked frame to a server", 0, 0, { F(0x81, "ok") },
	    RAW("\x81\x01x"), "T:ok;E1002;" },
	{ "an unmasked ping to a server", 0, 0, { { 0 } }, RAW("\x89\x00"),
	    "E1002;" },
	{ "a masked frame to a client", 1, 0, { { 0 } },
	    RAW("\x81\x81\0\0\0\0x"), "E1002;" },
	{ "RSV1", 0, 0, { F(0xc1, "a") }, NULL, 0, "E1002;" },
	{ "RSV2", 0, 0, { F(0xa1, "a") }, NULL, 0, "E1002;" },
	{ "RSV3 on a continuation", 0, 0, { F(0x01, "a"), F(0x90, "b") }, NULL,
	    0, "E1002;" },
	{ "RSV1 on a ping", 0, 0, { F(0xc9, "") }, NULL, 0, "E1002;" },
	{ "a fragmented ping", 0, 0, { F(0x09, "") }, NULL, 0, "E1002;" },
	{ "a fragmented close", 0, 0, { F(0x08, "\x03\xe8") }, NULL, 0,
	    "E1002;" },
	{ "a 126-byte ping", 0, 0, { { 0 } }, RAW("\x89\xfe\x00\x7e"),
	    "E1002;" },
	{ "a continuation outside a message", 0, 0, { F(0x80, "a") }, NULL, 0,
	    "E1002;" },
	{ "a text start inside a message", 0, 0, { F(0x01, "a"), F(0x81, "b") },
	    NULL, 0, "E1002;" },
	{ "a binary start inside a message", 0, 0,
	    { F(0x81, "x"), F(0x01, "a"), F(0x82, "b") }, NULL, 0,
	    "T:x;E1002;" },
	{ "a 16-bit length below 126", 1, 0, { { 0 } }, RAW("\x82\x7e\x00\x7d"),
	    "E1002;" },
	{ "a 64-bit length below 65536", 1, 0, { { 0 } },
	    RAW("\x82\x7f\0\0\0\0\0\0\xff\xff"), "E1002;" },
	{ "a 64-bit length of 2^63", 1, 0, { { 0 } },
	    RAW("\x82\x7f\x80\0\0\0\0\0\0\0"), "E1002;" },
	{ "a 64-bit length of 2^63, before the key", 0, 0, { { 0 } },
	    RAW("\x82\xff\xff\0\0\0\0\0\0\0"), "E1002;" },
	{ "too big, before the key", 0, 5, { { 0 } }, RAW("\x82\x86"),
	    "E1009;" },
	{ "as big as allowed", 0, 5, { F(0x82, "abcde") }, NULL, 0,
	    "B:abcde;" },
	{ "too big in one frame", 0, 5, { F(0x82, "abcdef") }, NULL, 0,
	    "E1009;" },
	{ "as big as allowed in fragments", 0, 5,
	    { F(0x02, "abc"), F(0x80, "de") }, NULL, 0, "B:abcde;" },
	{ "too big in fragments", 0, 5, { F(0x02, "abc"), F(0x80, "def") },
	    NULL, 0, "E1009;" },
	{ "control frames do not count", 0, 5,
	    { F(0x02, "abc"), F(0x89, "123456"), F(0x80, "de") }, NULL, 0,
	    "P:123456;B:abcde;" },
	{ "bad UTF-8", 0, 0, { F(0x81, "ok\xff") }, NULL, 0, "E1007;" },
	{ "a surrogate", 0, 0, { F(0x81, "\xed\xa0\x80") }, NULL, 0, "E1007;" },
	{ "a character across fragments", 0, 0,
	    { F(0x01, "\xc3"), F(0x89, ""), F(0x80, "\xa9") }, NULL, 0,
	    "P:;T:\\xc3\\xa9;" },
	{ "a character cut off by the end", 0, 0, { F(0x81, "\xe2\x82") }, NULL,
	    0, "E1007;" },
	{ "a character cut off by the last fragment", 0, 0,
	    { F(0x01, "a"), F(0x80, "\xe2") }, NULL, 0, "E1007;" },
	{ "binary is not UTF-8", 0, 0, { F(0x82, "\xff") }, NULL, 0,
	    "B:\\xff;" },
	{ "a close without a code", 0, 0, { F(0x88, "") }, NULL, 0, "X1005:;" },
	{ "a close with code and reason", 0, 0, { F(0x88, "\x03\xe8ok") }, NULL,
	    0, "X1000:ok;" },
	{ "a close 1012 replaced", 0, 0, { F(0x88, "\x03\xf4replaced") }, NULL,
	    0, "X1012:replaced;" },
	{ "a close with one byte", 0, 0, { F(0x88, "\x03") }, NULL, 0,
	    "E1002;" },
	{ "a close reason that is not UTF-8", 0, 0, { F(0x88, "\x03\xe8\xff") },
	    NULL, 0, "E1007;" },
	{ "a close reason cut inside a character", 0, 0,
	    { F(0x88, "\x03\xe8\xc3") }, NULL, 0, "E1007;" },
	{ "a close mid-message ends it", 0, 0,
	    { F(0x01, "a"), F(0x88, "\x03\xe9"), F(0x80, "b") }, NULL, 0,
	    "X1001:;" },
	{ "nothing after an error", 0, 0, { F(0xc1, "a"), F(0x81, "b") }, NULL,
	    0, "E1002;" },
	{ "an error after an empty fragment", 0, 0,
	    { F(0x02, ""), F(0x80, ""), F(0x02, ""), F(0xc0, "") }, NULL, 0,
	    "B:;E1002;" },
};

/* Every case, fed every way. */
static void
test_rx_cases(void **state)
{
	const struct rx_case *c;
	const struct frame_spec *fs;
	struct evbuffer *src;
	size_t i, k;

	(void)state;
	for (i = 0; i < sizeof rx_cases / sizeof rx_cases[0]; i++) {
		c = &rx_cases[i];
		src = evbuffer_new();
		assert_non_null(src);
		for (k = 0; k < 5 && c->c_frames[k].fs_payload != NULL; k++) {
			fs = &c->c_frames[k];
			frame_add(src, fs->fs_b0, fs->fs_payload, fs->fs_len,
			    !c->c_client);
		}
		if (c->c_raw != NULL)
			evbuffer_add(src, c->c_raw, c->c_rawlen);
		rx_check(c->c_what, src, !c->c_client,
		    c->c_max != 0 ? c->c_max : TEST_MAX, c->c_want);
		evbuffer_free(src);
	}
}

/* The reserved opcodes 3-7 and 0xb-0xf are refused, FIN or not. */
static void
test_rx_reserved_opcodes(void **state)
{
	struct evbuffer *src;
	unsigned int op, fin;
	char what[32];

	(void)state;
	for (op = 0; op < 16; op++) {
		if (op <= WS_OP_BINARY ||
		    (op >= WS_OP_CLOSE && op <= WS_OP_PONG))
			continue;
		for (fin = 0; fin <= 1; fin++) {
			src = evbuffer_new();
			assert_non_null(src);
			frame_add(src, (uint8_t)(fin << 7 | op), "a", 1, 1);
			snprintf(
			    what, sizeof what, "opcode %u fin %u", op, fin);
			rx_check(what, src, 1, TEST_MAX, "E1002;");
			evbuffer_free(src);
		}
	}
}

/*
 * Every close code: 1000-1003, 1007-1014 and 3000-4999 are taken, with
 * a reason; 0-999, 1004-1006, 1015, 1016-2999 and 5000 on are refused.
 */
static void
test_rx_close_codes(void **state)
{
	struct evbuffer *src;
	uint8_t p[4];
	unsigned int code;
	int valid;
	char want[32], *got;
	const uint8_t *bytes;

	(void)state;
	for (code = 0; code < 65536; code++) {
		valid = (code >= 1000 && code <= 1003) ||
		    (code >= 1007 && code <= 1014) ||
		    (code >= 3000 && code <= 4999);
		assert_int_equal(ws_close_code_valid(code), valid);
		p[0] = (uint8_t)(code >> 8);
		p[1] = (uint8_t)code;
		p[2] = 'o';
		p[3] = 'k';
		src = evbuffer_new();
		assert_non_null(src);
		frame_add(src, 0x88, p, 4, 1);
		if (valid)
			snprintf(want, sizeof want, "X%u:ok;", code);
		else
			snprintf(want, sizeof want, "E1002;");
		/* Every split only for a few: 65536 of them take long. */
		if (code % 997 == 0 || (code >= 999 && code <= 1016) ||
		    code == 2999 || code == 3000 || code == 4999 ||
		    code == 5000) {
			rx_check(want, src, 1, TEST_MAX, want);
		} else {
			bytes = evbuffer_pullup(src, -1);
			got = rx_run(bytes, evbuffer_get_length(src), 1,
			    TEST_MAX, NULL, 0);
			if (strcmp(got, want) != 0)
				fail_msg("close %u: got %s", code, got);
			free(got);
		}
		evbuffer_free(src);
	}
	assert_false(ws_close_code_valid(70000));
}

/* Control frames of 125 bytes are taken: ping, pong, close. */
static void
test_rx_control_max(void **state)
{
	struct evbuffer *src, *want;
	uint8_t p[WS_CONTROL_MAX];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof p; i++)
		p[i] = (uint8_t)('a' + i % 26);
	src = evbuffer_new();
	want = evbuffer_new();
	assert_true(src != NULL && want != NULL);
	frame_add(src, 0x89, p, sizeof p, 1);
	frame_add(src, 0x8a, p, sizeof p, 1);
	p[0] = 0x03;
	p[1] = 0xe8;
	frame_add(src, 0x88, p, sizeof p, 1);
	evbuffer_add(want, "P:", 2);
	evbuffer_add(want, "ab", 2);
	evbuffer_add(want, p + 2, sizeof p - 2);
	evbuffer_add(want, ";O:ab", 5);
	evbuffer_add(want, p + 2, sizeof p - 2);
	evbuffer_add(want, ";X1000:", 7);
	evbuffer_add(want, p + 2, sizeof p - 2);
	evbuffer_add(want, ";\0", 2);
	rx_check("125-byte control frames", src, 1, TEST_MAX,
	    (const char *)evbuffer_pullup(want, -1));
	evbuffer_free(src);
	evbuffer_free(want);
}

/*
 * Feed the frame in src to a parser in pieces of step bytes, each its own
 * chain, and check that the n-byte payload p comes out whole, unmasked,
 * its last piece marked as the end.
 */
static void
rx_pieces(
    struct evbuffer *src, int masked, size_t step, const uint8_t *p, size_t n)
{
	struct wsframe_rx rx;
	struct wsframe_event ev;
	struct evbuffer *in, *pc;
	const uint8_t *b = evbuffer_pullup(src, -1);
	size_t len = evbuffer_get_length(src), off, m, k = 0;
	uint8_t *got;

	got = malloc(n);
	in = evbuffer_new();
	assert_true(got != NULL && in != NULL);
	wsframe_rx_init(&rx, masked, n);
	for (off = 0; off < len; off += m) {
		m = len - off < step ? len - off : step;
		pc = evbuffer_new();
		assert_non_null(pc);
		evbuffer_add(pc, b + off, m);
		evbuffer_add_buffer(in, pc);
		evbuffer_free(pc);
		while (wsframe_rx_next(&rx, in, &ev) == WSFRAME_EV_DATA) {
			assert_true(k + ev.e_len <= n);
			evbuffer_remove(in, got + k, ev.e_len);
			k += ev.e_len;
			assert_int_equal(ev.e_fin, k == n);
		}
	}
	assert_int_equal(k, n);
	assert_memory_equal(got, p, n);
	assert_int_equal(evbuffer_get_length(in), 0);
	evbuffer_free(in);
	free(got);
}

/*
 * Frames around each length field, masked and not, their payload
 * unmasked right across pieces of many sizes (one byte, too).
 */
static void
test_rx_lengths(void **state)
{
	static const size_t sizes[] = { 125, 126, 127, 65535, 65536, 70001 };
	struct evbuffer *src;
	uint8_t *p;
	size_t i, k, n, step;
	int masked;

	(void)state;
	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		n = sizes[i];
		p = malloc(n);
		assert_non_null(p);
		for (k = 0; k < n; k++)
			p[k] = (uint8_t)(k * 7 + k / 251);
		for (masked = 0; masked <= 1; masked++) {
			src = evbuffer_new();
			assert_non_null(src);
			frame_add(src, 0x82, p, n, masked);
			for (step = 1; step < 20000; step = step * 3 + 1)
				rx_pieces(src, masked, step, p, n);
			evbuffer_free(src);
		}
		free(p);
	}
}

/* ws_header_put: FIN, opcode, the fewest length bytes, the key. */
static void
test_header_put(void **state)
{
	static const struct {
		uint64_t len;
		size_t hl;
		const char *h;
	} cases[] = {
		{ 0, 2, "\x82\x00" },
		{ 125, 2, "\x82\x7d" },
		{ 126, 4, "\x82\x7e\x00\x7e" },
		{ 65535, 4, "\x82\x7e\xff\xff" },
		{ 65536, 10, "\x82\x7f\0\0\0\0\0\x01\0\0" },
		{ (uint64_t)1 << 40, 10, "\x82\x7f\0\0\x01\0\0\0\0\0" },
	};
	uint8_t h[WS_HEADER_MAX];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		assert_int_equal(
		    ws_header_put(h, WS_OP_BINARY, cases[i].len, NULL),
		    cases[i].hl);
		assert_memory_equal(h, cases[i].h, cases[i].hl);
		assert_int_equal(
		    ws_header_put(h, WS_OP_BINARY, cases[i].len, test_mask),
		    cases[i].hl + 4);
		assert_int_equal(h[1] & 0x80, 0x80);
		assert_int_equal(h[1] & 0x7f, cases[i].h[1] & 0x7f);
		assert_memory_equal(h + cases[i].hl, test_mask, 4);
	}
	assert_int_equal(ws_header_put(h, WS_OP_TEXT, 5, NULL), 2);
	assert_int_equal(h[0], 0x81);
}

/* ws_mask matches byte-wise masking at every offset, length, alignment. */
static void
test_mask_words(void **state)
{
	uint8_t src[160], dst[160], want[160];
	unsigned int koff, k;
	size_t len, a, i;

	(void)state;
	for (i = 0; i < sizeof src; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	for (koff = 0; koff < 4; koff++) {
		for (a = 0; a < 8; a++) {
			for (len = 0; len + a < 100; len++) {
				for (i = 0; i < len; i++)
					want[i] = src[a + i] ^
					    test_mask[(koff + i) & 3];
				memset(dst, 0, sizeof dst);
				k = ws_mask(
				    dst + 1, src + a, len, test_mask, koff);
				assert_int_equal(k, (koff + len) & 3);
				assert_memory_equal(dst + 1, want, len);
				/* In place, too. */
				memcpy(dst, src + a, len);
				ws_mask(dst, dst, len, test_mask, koff);
				assert_memory_equal(dst, want, len);
			}
		}
	}
}

/* Is p[0..len) well-formed UTF-8?  Slowly, by code points. */
static int
utf8_reference(const uint8_t *p, size_t len)
{
	size_t i = 0, n, k;
	uint32_t cp, min;

	while (i < len) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		if ((p[i] & 0xe0) == 0xc0) {
			n = 1;
			cp = p[i] & 0x1f;
			min = 0x80;
		} else if ((p[i] & 0xf0) == 0xe0) {
			n = 2;
			cp = p[i] & 0x0f;
			min = 0x800;
		} else if ((p[i] & 0xf8) == 0xf0) {
			n = 3;
			cp = p[i] & 0x07;
			min = 0x10000;
		} else
			return (0);
		if (i + n >= len)
			return (0);
		for (k = 1; k <= n; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return (0);
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return (0);
		i += n + 1;
	}
	return (1);
}

/* Check p in two pieces split at cut, as two frames would bring it. */
static int
utf8_split(const uint8_t *p, size_t len, size_t cut)
{
	uint32_t st = 0;

	if (ws_utf8_check(&st, p, cut) != 0 ||
	    ws_utf8_check(&st, p + cut, len - cut) != 0)
		return (0);
	return (st == 0);
}

/*
 * ws_utf8_check accepts what a plain decoder accepts: every sequence of
 * up to three bytes, random text, and each split of it.
 */
static void
test_utf8_check(void **state)
{
	static const char *const bad[] = { "\xc0\x80", "\xc1\xbf",
		"\xe0\x9f\xbf", "\xed\xa0\x80", "\xed\xbf\xbf",
		"\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80",
		"\xff", "\x80", "plain ascii then \xc3", "\xe2\x82" };
	static const char *const good[] = { "", "hello", "\xc2\x80", "\xdf\xbf",
		"\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbf",
		"\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf",
		"h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83 \xf0\x9d\x84\x9e!" };
	uint8_t b[64];
	uint32_t x, st;
	size_t i, len, cut;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		len = strlen(bad[i]);
		for (cut = 0; cut <= len; cut++)
			assert_false(
			    utf8_split((const uint8_t *)bad[i], len, cut));
	}
	for (i = 0; i < sizeof good / sizeof good[0]; i++) {
		len = strlen(good[i]);
		for (cut = 0; cut <= len; cut++)
			assert_true(
			    utf8_split((const uint8_t *)good[i], len, cut));
	}
	/* Every sequence of one, two and three bytes. */
	for (len = 1; len <= 3; len++) {
		for (x = 0; x < (1u << (8 * len)); x++) {
			b[0] = (uint8_t)(x >> 16);
			b[1] = (uint8_t)(x >> 8);
			b[2] = (uint8_t)x;
			st = 0;
			if (ws_utf8_check(&st, b + 3 - len, len) != 0)
				st = 1;
			if ((st == 0) != utf8_reference(b + 3 - len, len))
				fail_msg("%zu bytes %06x", len, x);
		}
	}
	/* Random text of likely bytes, whole and split. */
	srandom(1);
	for (i = 0; i < 200000; i++) {
		static const uint8_t pick[] = { 'a', 0x7f, 0x80, 0x8f, 0x90,
			0x9f, 0xa0, 0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xed, 0xef,
			0xf0, 0xf4, 0xf5, 0xff };
		size_t k;

		len = 1 + (size_t)random() % 24;
		for (k = 0; k < len; k++)
			b[k] = pick[random() % sizeof pick];
		cut = (size_t)random() % (len + 1);
		if (utf8_split(b, len, cut) != utf8_reference(b, len))
			fail_msg("case %zu", i);
	}
}

/*
 * A stream of frames of every length form, masked and not, with RSV1 (a
 * compressed message), empty, control and fragmented: ws_track finds
 * each boundary, however the stream is split, and only those.
 */
static void
test_track(void **state)
{
	static const size_t lens[] = { 0, 1, 2, 125, 126, 127, 1000, 65535,
		65536, 70000 };
	static const uint8_t b0s[] = { 0x81, 0x82, 0xc1, 0x01, 0x80, 0x89,
		0x8a };
	struct evbuffer *eb = evbuffer_new();
	uint8_t *buf, *payload;
	size_t bounds[64], nb = 0, i, len, pos, n, cut, step;
	struct ws_track t;

	(void)state;
	payload = calloc(1, 70000);
	assert_non_null(payload);
	for (i = 0; i < sizeof lens / sizeof lens[0]; i++) {
		/* Control frames are short; the rest take any length. */
		uint8_t b0 = b0s[i % (sizeof b0s / sizeof b0s[0])];

		if ((b0 & 0x08) && lens[i] > 125)
			b0 = 0x82;
		frame_add(eb, b0, payload, lens[i], (int)(i & 1));
		bounds[nb++] = evbuffer_get_length(eb);
	}
	len = evbuffer_get_length(eb);
	buf = evbuffer_pullup(eb, -1);

	/* Whole, or one byte at a time: between frames at the end only. */
	memset(&t, 0, sizeof t);
	assert_true(ws_track_between(&t));
	assert_int_equal(ws_track(&t, buf, len, 0), len);
	assert_true(ws_track_between(&t));
	memset(&t, 0, sizeof t);
	for (pos = 0, i = 0; pos < len; pos++) {
		assert_int_equal(ws_track(&t, buf + pos, 1, 0), 1);
		if (pos + 1 == bounds[i]) {
			assert_true(ws_track_between(&t));
			i++;
		} else
			assert_false(ws_track_between(&t));
	}

	/*
	 * With stop, in pieces of every size: each boundary in turn.  At a
	 * boundary (the start too) it follows nothing; the next frame's
	 * first byte goes without stop.
	 */
	for (step = 1; step <= 70001; step = step * 3 + 1) {
		memset(&t, 0, sizeof t);
		for (pos = 0, i = 0; pos < len; i++) {
			assert_int_equal(
			    ws_track(&t, buf + pos, len - pos, 1), 0);
			assert_int_equal(ws_track(&t, buf + pos, 1, 0), 1);
			pos++;
			while (!ws_track_between(&t)) {
				cut = len - pos < step ? len - pos : step;
				assert_true(cut > 0);
				n = ws_track(&t, buf + pos, cut, 1);
				if (!ws_track_between(&t))
					assert_int_equal(n, cut);
				pos += n;
			}
			assert_int_equal(pos, bounds[i]);
		}
		assert_int_equal(i, nb);
	}

	/* Over an evbuffer of many small chains, boundary by boundary. */
	for (step = 1; step <= 4097; step = step * 4 + 1) {
		struct evbuffer *chains = evbuffer_new();

		for (pos = 0; pos < len; pos += cut) {
			cut = len - pos < step ? len - pos : step;
			evbuffer_add_reference(
			    chains, buf + pos, cut, NULL, NULL);
		}
		memset(&t, 0, sizeof t);
		for (i = 0; evbuffer_get_length(chains) > 0; i++) {
			n = evbuffer_get_length(chains);
			assert_int_equal(
			    ws_track_evbuffer(&t, chains, n, 1), 0);
			assert_int_equal(
			    ws_track(&t, evbuffer_pullup(chains, 1), 1, 0), 1);
			evbuffer_drain(chains, 1);
			n = ws_track_evbuffer(
			    &t, chains, evbuffer_get_length(chains), 1);
			assert_true(ws_track_between(&t));
			evbuffer_drain(chains, n);
			assert_int_equal(
			    len - evbuffer_get_length(chains), bounds[i]);
		}
		assert_int_equal(i, nb);
		evbuffer_free(chains);
	}
	free(payload);
	evbuffer_free(eb);
}

/* The close frame a relay puts in: the parser reads its code and reason. */
static void
test_close_put(void **state)
{
	uint8_t f[WS_CLOSE_FRAME_MAX];
	struct evbuffer *in = evbuffer_new();
	struct wsframe_event ev;
	struct wsframe_rx rx;
	char reason[200];
	size_t n;

	(void)state;
	n = ws_close_put(f, WS_CLOSE_GOING_AWAY, "going away");
	assert_int_equal(n, 2 + 2 + 10);
	wsframe_rx_init(&rx, 0, TEST_MAX);
	evbuffer_add(in, f, n);
	assert_int_equal(wsframe_rx_next(&rx, in, &ev), WSFRAME_EV_CONTROL);
	assert_int_equal(ev.e_op, WS_OP_CLOSE);
	assert_int_equal(ev.e_code, 1001);
	assert_int_equal(ev.e_reason_len, 10);
	assert_memory_equal(ev.e_reason, "going away", 10);
	/* A reason too long is cut to what a control frame carries. */
	memset(reason, 'r', sizeof reason - 1);
	reason[sizeof reason - 1] = '\0';
	n = ws_close_put(f, 1012, reason);
	assert_int_equal(n, 2 + WS_CONTROL_MAX);
	evbuffer_free(in);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rx_cases),
		cmocka_unit_test(test_rx_reserved_opcodes),
		cmocka_unit_test(test_rx_close_codes),
		cmocka_unit_test(test_rx_control_max),
		cmocka_unit_test(test_rx_lengths),
		cmocka_unit_test(test_header_put),
		cmocka_unit_test(test_mask_words),
		cmocka_unit_test(test_utf8_check),
		cmocka_unit_test(test_track),
		cmocka_unit_test(test_close_put),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
