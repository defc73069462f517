/*
 * Access tokens: the exact format (checked against an independent HMAC and
 * base64url here), every refusal, tampering, expiry boundaries, scopes,
 * safe ids, strict base64url and the size bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "alloc.h"
#include "token.h"

#define SECRET "0123456789abcdef0123456789abcdef"
#define SECRET_LEN (sizeof SECRET - 1)
#define NOW 1700000000ULL
#define LATER (NOW + 3600)

/* Unpadded base64url of n bytes, xmalloc'd; written apart from token.c. */
static char *
b64url(const void *in, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				  "abcdefghijklmnopqrstuvwxyz0123456789-_";
	const unsigned char *p = in;
	char *out = xmalloc(n * 4 / 3 + 4), *o = out;
	size_t i;
	unsigned bits = 0, nbits = 0;

	for (i = 0; i < n; i++) {
		bits = (bits << 8) | p[i];
		nbits += 8;
		while (nbits >= 6) {
			nbits -= 6;
			*o++ = tab[(bits >> nbits) & 63];
		}
	}
	if (nbits > 0)
		*o++ = tab[(bits << (6 - nbits)) & 63];
	*o = '\0';
	return (out);
}

/* Sign "akt1.<payload>" with secret and return the whole token. */
static char *
sign_payload(const char *secret, const char *payload)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	char *signed_part, *sig, *token;

	xasprintf(&signed_part, "akt1.%s", payload);
	assert_non_null(HMAC(EVP_sha256(), secret, (int)strlen(secret),
	    (const unsigned char *)signed_part, strlen(signed_part), mac,
	    &len));
	assert_int_equal(len, 32);
	sig = b64url(mac, len);
	xasprintf(&token, "%s.%s", signed_part, sig);
	free(signed_part);
	free(sig);
	return (token);
}

/* A correctly signed token whose payload is the n bytes of text. */
static char *
sign_text(const char *secret, const char *text, size_t n)
{
	char *payload = b64url(text, n), *token;

	token = sign_payload(secret, payload);
	free(payload);
	return (token);
}

/* Verify a NUL-terminated token for sandbox "sbx1" and port 8080. */
static enum token_err
verify(const char *token, uint64_t now)
{
	return (token_verify(SECRET, SECRET_LEN, token, strlen(token), "sbx1",
	    NULL, "port:8080", now));
}

static void
test_format_matches_oracle(void **state)
{
	const char *text = "sbx1\nport:8080\n1700003600";
	char *mine, *want;

	(void)state;
	mine = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8080", LATER);
	want = sign_text(SECRET, text, strlen(text));
	assert_non_null(mine);
	assert_string_equal(mine, want);
	assert_true(strncmp(mine, "akt1.", 5) == 0);
	assert_int_equal(strlen(strrchr(mine, '.') + 1), 43);
	free(mine);
	free(want);
}

static void
test_round_trip(void **state)
{
	char *t;

	(void)state;
	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8080", LATER);
	assert_int_equal(verify(t, NOW), TOKEN_OK);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx1",
			     "sbx1", "port:8080", NOW),
	    TOKEN_OK);
	free(t);

	t = token_mint(SECRET, SECRET_LEN, "sbx1", "tunnel", LATER);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx1",
			     NULL, "tunnel", NOW),
	    TOKEN_OK);
	free(t);
}

static void
test_token_len_not_nul(void **state)
{
	char *t, *buf;
	size_t len;

	(void)state;
	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8080", LATER);
	len = strlen(t);
	xasprintf(&buf, "%s&other=1", t);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, buf, len, "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_OK);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, buf, len + 1, "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_MALFORMED);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, buf, len - 1, "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_MALFORMED);
	free(buf);
	free(t);
}

static void
test_expiry_boundary(void **state)
{
	char *t;
	uint64_t e = 0;

	(void)state;
	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8080", LATER);
	assert_int_equal(verify(t, 0), TOKEN_OK);
	assert_int_equal(verify(t, LATER - 1), TOKEN_OK);
	assert_int_equal(verify(t, LATER), TOKEN_EXPIRED);
	assert_int_equal(verify(t, LATER + 1), TOKEN_EXPIRED);
	assert_int_equal(verify(t, UINT64_MAX), TOKEN_EXPIRED);
	assert_int_equal(token_expiry(t, strlen(t), &e), 0);
	assert_int_equal(e, LATER);
	assert_int_equal(token_expiry("akt1.x", 6, &e), -1);
	free(t);

	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8080", 0);
	assert_int_equal(verify(t, 0), TOKEN_EXPIRED);
	free(t);
	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8080", UINT64_MAX);
	assert_int_equal(verify(t, UINT64_MAX - 1), TOKEN_OK);
	free(t);
}

static void
test_wrong_secret(void **state)
{
	char *t;

	(void)state;
	t = token_mint(
	    "another secret of 32 bytes......", 32, "sbx1", "port:8080", LATER);
	assert_int_equal(verify(t, NOW), TOKEN_BAD_SIGNATURE);
	/* A prefix of the right secret is another secret. */
	assert_int_equal(token_verify(SECRET, SECRET_LEN - 1, t, strlen(t),
			     "sbx1", NULL, "port:8080", NOW),
	    TOKEN_BAD_SIGNATURE);
	assert_int_equal(
	    token_verify(NULL, 0, t, strlen(t), "sbx1", NULL, "port:8080", NOW),
	    TOKEN_BAD_SIGNATURE);
	assert_int_equal(token_verify(SECRET, 0, t, strlen(t), "sbx1", NULL,
			     "port:8080", NOW),
	    TOKEN_BAD_SIGNATURE);
	free(t);
}

static void
test_tampered(void **state)
{
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				       "abcdefghijklmnopqrstuvwxyz0123456789-_";
	char *t, *copy, *dot;
	size_t i, len;

	(void)state;
	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8080", LATER);
	len = strlen(t);
	dot = strrchr(t, '.');
	/* Change every byte of payload and signature in turn. */
	for (i = 5; i < len; i++) {
		if (t + i == dot)
			continue;
		copy = xstrdup(t);
		copy[i] = copy[i] == 'A' ? 'B' : 'A';
		assert_int_equal(verify(copy, NOW), TOKEN_BAD_SIGNATURE);
		free(copy);
	}
	/* The last character's two unused bits: same bytes, other text. */
	copy = xstrdup(t);
	copy[len - 1] =
	    alphabet[(strchr(alphabet, copy[len - 1]) - alphabet) ^ 1];
	assert_int_equal(verify(copy, NOW), TOKEN_BAD_SIGNATURE);
	free(copy);
	/* A signature from another token. */
	copy = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8081", LATER);
	memcpy(strrchr(copy, '.'), dot, 44);
	assert_int_equal(verify(copy, NOW), TOKEN_BAD_SIGNATURE);
	free(copy);
	free(t);
}

static void
test_malformed_shape(void **state)
{
	static const char *const bad[] = {
		"",
		"akt1",
		"akt1.",
		"akt1..",
		"akt2.c2J4MQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"AKT1.c2J4MQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"akt1.c2J4MQ",
		"akt1..AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"akt1.c2J4MQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"akt1.c2J4MQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"akt1.c2J4MQ==.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"akt1.c2J4+Q.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"akt1.c2J4/Q.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"akt1.c2J 4Q.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"akt1.c2J4MQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
		"akt1.c2J4.MQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		" akt1.c2J4MQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (verify(bad[i], NOW) != TOKEN_MALFORMED)
			fail_msg("accepted shape: '%s'", bad[i]);
	}
	assert_int_equal(token_verify(SECRET, SECRET_LEN, NULL, 0, "sbx1", NULL,
			     "port:8080", NOW),
	    TOKEN_MALFORMED);
	/* A NUL inside the given length. */
	assert_int_equal(
	    token_verify(SECRET, SECRET_LEN,
		"akt1.c2J4\0MQ.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 56,
		"sbx1", NULL, "port:8080", NOW),
	    TOKEN_MALFORMED);
}

/* A signed token made of raw payload text must be refused as malformed. */
static void
expect_bad_text(const char *text, size_t n)
{
	char *t = sign_text(SECRET, text, n);

	if (verify(t, NOW) != TOKEN_MALFORMED)
		fail_msg("accepted payload text: '%.*s'", (int)n, text);
	free(t);
}

/* A signed token made of payload text must verify as want. */
static void
expect_text(const char *text, enum token_err want)
{
	char *t = sign_text(SECRET, text, strlen(text));

	if (verify(t, NOW) != want)
		fail_msg("payload text '%s': got %d, want %d", text,
		    verify(t, NOW), want);
	free(t);
}

static void
test_malformed_payload(void **state)
{
	static const char *const bad[] = {
		"",
		"sbx1",
		"sbx1\nport:8080",
		"sbx1\nport:8080\n",
		"sbx1\nport:8080\n1700003600\n",
		"sbx1\nport:8080\n1700003600\nx",
		"\nport:8080\n1700003600",
		"sb x1\nport:8080\n1700003600",
		"sbx1\r\nport:8080\n1700003600",
		"sbx1\nport:0\n1700003600",
		"sbx1\nport:65536\n1700003600",
		"sbx1\nport:08080\n1700003600",
		"sbx1\nport:\n1700003600",
		"sbx1\nport:8080x\n1700003600",
		"sbx1\nport:-1\n1700003600",
		"sbx1\nport:**\n1700003600",
		"sbx1\nports:8080\n1700003600",
		"sbx1\nPORT:8080\n1700003600",
		"sbx1\nTunnel\n1700003600",
		"sbx1\n\n1700003600",
		"sbx1\nport:8080\n01700003600",
		"sbx1\nport:8080\n+1700003600",
		"sbx1\nport:8080\n1700003600 ",
		"sbx1\nport:8080\n1.5",
		"sbx1\nport:8080\n18446744073709551616",
		"sbx1\nport:8080\n99999999999999999999",
		"sbx1\nport:8080\n100000000000000000000",
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_bad_text(bad[i], strlen(bad[i]));
	expect_bad_text("sbx1\0\nport:8080\n1700003600", 26);
	expect_bad_text("sbx1\nport:8080\n1700003600\0", 26);
	expect_text("sbx1\nport:8080\n18446744073709551615", TOKEN_OK);
	expect_text("sbx1\nport:8080\n0", TOKEN_EXPIRED);
	expect_text("sbx1\nport:65535\n1700003600", TOKEN_WRONG_SCOPE);
}

static void
test_base64url_strict(void **state)
{
	static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				       "abcdefghijklmnopqrstuvwxyz0123456789-_";
	/* 25 bytes end in 4 unused bits, 26 bytes in 2. */
	static const char *const texts[] = { "sbx1\nport:8080\n1700003600",
		"sbx12\nport:8080\n1700003600" };
	static const size_t want_len[] = { 34, 35 };
	char *payload, *t, *id;
	size_t i, len, bit;

	(void)state;
	for (i = 0; i < 2; i++) {
		payload = b64url(texts[i], strlen(texts[i]));
		len = strlen(payload);
		assert_int_equal(len, want_len[i]);
		id = xstrndup(texts[i], strcspn(texts[i], "\n"));
		t = sign_payload(SECRET, payload);
		assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t),
				     id, NULL, "port:8080", NOW),
		    TOKEN_OK);
		free(t);
		free(id);

		/* Non-zero unused bits decode to the same bytes: refused. */
		for (bit = 1; bit < (i == 0 ? 16U : 4U); bit <<= 1) {
			t = xstrdup(payload);
			t[len - 1] =
			    alphabet[(size_t)(strchr(alphabet, t[len - 1]) -
					 alphabet) ^
				bit];
			id = sign_payload(SECRET, t);
			assert_int_equal(verify(id, NOW), TOKEN_MALFORMED);
			free(id);
			free(t);
		}

		/* A length of 1 mod 4 cannot be base64url. */
		payload[33] = '\0';
		t = sign_payload(SECRET, payload);
		assert_int_equal(verify(t, NOW), TOKEN_MALFORMED);
		free(t);
		free(payload);
	}
	t = sign_payload(SECRET, "A");
	assert_int_equal(verify(t, NOW), TOKEN_MALFORMED);
	free(t);
}

static void
test_lengths_mod3(void **state)
{
	static const char *const ids[] = { "a", "ab", "abc", "abcd", "abcde",
		"abcdef", "~!$&'()*+,;=:@[]", "\xc3\xa9t\xc3\xa9" };
	char *t;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		t = token_mint(SECRET, SECRET_LEN, ids[i], "port:1", LATER);
		assert_non_null(t);
		assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t),
				     ids[i], NULL, "port:1", NOW),
		    TOKEN_OK);
		free(t);
	}
}

static void
test_wrong_sandbox(void **state)
{
	char *t;

	(void)state;
	t = token_mint(SECRET, SECRET_LEN, "sbx2", "port:8080", LATER);
	assert_int_equal(verify(t, NOW), TOKEN_WRONG_SANDBOX);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx",
			     "sbx22", "port:8080", NOW),
	    TOKEN_WRONG_SANDBOX);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), NULL,
			     NULL, "port:8080", NOW),
	    TOKEN_WRONG_SANDBOX);
	/* Expiry is checked first: an old token says so. */
	assert_int_equal(verify(t, LATER), TOKEN_EXPIRED);
	free(t);
}

static void
test_safe_id(void **state)
{
	const char *raw = "alice@team.example/box_1", *safe;
	char *t;

	(void)state;
	safe = "alice-at-team-example-box-1";
	t = token_mint(SECRET, SECRET_LEN, raw, "port:8080", LATER);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), raw,
			     safe, "port:8080", NOW),
	    TOKEN_OK);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "x",
			     safe, "port:8080", NOW),
	    TOKEN_WRONG_SANDBOX);
	free(t);
	t = token_mint(SECRET, SECRET_LEN, safe, "port:8080", LATER);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), raw,
			     safe, "port:8080", NOW),
	    TOKEN_OK);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), raw,
			     NULL, "port:8080", NOW),
	    TOKEN_WRONG_SANDBOX);
	free(t);
}

static void
test_scopes(void **state)
{
	char *t;

	(void)state;
	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8081", LATER);
	assert_int_equal(verify(t, NOW), TOKEN_WRONG_SCOPE);
	free(t);
	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:808", LATER);
	assert_int_equal(verify(t, NOW), TOKEN_WRONG_SCOPE);
	free(t);
	t = token_mint(SECRET, SECRET_LEN, "sbx1", "tunnel", LATER);
	assert_int_equal(verify(t, NOW), TOKEN_WRONG_SCOPE);
	free(t);

	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:*", LATER);
	assert_int_equal(verify(t, NOW), TOKEN_OK);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx1",
			     NULL, "port:1", NOW),
	    TOKEN_OK);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx1",
			     NULL, "port:65535", NOW),
	    TOKEN_OK);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx1",
			     NULL, "tunnel", NOW),
	    TOKEN_WRONG_SCOPE);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx1",
			     NULL, NULL, NOW),
	    TOKEN_WRONG_SCOPE);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx2",
			     NULL, "port:1", NOW),
	    TOKEN_WRONG_SANDBOX);
	free(t);

	t = token_mint(SECRET, SECRET_LEN, "sbx1", "port:8080", LATER);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx1",
			     NULL, "port:*", NOW),
	    TOKEN_WRONG_SCOPE);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), "sbx1",
			     NULL, "tunnel", NOW),
	    TOKEN_WRONG_SCOPE);
	free(t);
}

static void
test_mint_refuses(void **state)
{
	static const char *const scopes[] = { "", "port", "port:", "port:0",
		"port:65536", "port:01", "port:1 ", "port:**", "tunnel\n",
		"tunnels", "Tunnel", "port:*\nport:1" };
	static const char *const ids[] = { "", "a b", "a\nb", "a\tb", "a\x7f",
		"\n" };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof scopes / sizeof scopes[0]; i++)
		assert_null(
		    token_mint(SECRET, SECRET_LEN, "sbx1", scopes[i], LATER));
	for (i = 0; i < sizeof ids / sizeof ids[0]; i++)
		assert_null(
		    token_mint(SECRET, SECRET_LEN, ids[i], "port:1", LATER));
	assert_null(token_mint(NULL, 0, "sbx1", "port:1", LATER));
	assert_null(token_mint(SECRET, 0, "sbx1", "port:1", LATER));
	assert_null(token_mint(SECRET, SECRET_LEN, NULL, "port:1", LATER));
	assert_null(token_mint(SECRET, SECRET_LEN, "sbx1", NULL, LATER));
}

static void
test_overlong(void **state)
{
	char *id, *t, *text;
	size_t n, fit = 0;

	(void)state;
	/* The longest sandbox id whose token still fits TOKEN_MAX. */
	id = xmalloc(TOKEN_MAX + 1);
	for (n = 3000; n < 3100; n++) {
		memset(id, 'x', n);
		id[n] = '\0';
		t = token_mint(SECRET, SECRET_LEN, id, "port:*", LATER);
		if (t == NULL)
			break;
		assert_true(strlen(t) <= TOKEN_MAX);
		assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t),
				     id, NULL, "port:9", NOW),
		    TOKEN_OK);
		fit = strlen(t);
		free(t);
	}
	assert_true(n < 3100);
	assert_true(fit > TOKEN_MAX - 4);
	/* A correctly signed token over the bound is refused unread. */
	memset(id, 'x', n + 3);
	id[n + 3] = '\0';
	xasprintf(&text, "%s\nport:*\n1700003600", id);
	t = sign_text(SECRET, text, strlen(text));
	assert_true(strlen(t) > TOKEN_MAX);
	assert_int_equal(token_verify(SECRET, SECRET_LEN, t, strlen(t), id,
			     NULL, "port:9", NOW),
	    TOKEN_MALFORMED);
	free(t);
	free(text);
	memset(id, 'x', TOKEN_MAX);
	id[TOKEN_MAX] = '\0';
	assert_null(token_mint(SECRET, SECRET_LEN, id, "port:1", LATER));
	free(id);
}

static void
test_looks_like(void **state)
{
	(void)state;
	assert_true(token_looks_like("akt1.", 5));
	assert_true(token_looks_like("akt1.abc.def", 12));
	assert_false(token_looks_like("akt1", 4));
	assert_false(token_looks_like("akt1.", 4));
	assert_false(token_looks_like("AKT1.abc", 8));
	assert_false(token_looks_like("eyJhbGciOiJIUzI1NiJ9.e30.x", 26));
	assert_false(token_looks_like("", 0));
	assert_false(token_looks_like(NULL, 0));
}

static void
test_err_strings(void **state)
{
	enum token_err e;
	const char *s;

	(void)state;
	for (e = TOKEN_OK; e <= TOKEN_WRONG_SCOPE; e++) {
		s = token_err_string(e);
		assert_non_null(s);
		assert_true(strncmp(s, "The access token", 16) == 0);
		assert_int_equal(s[strlen(s) - 1], '.');
	}
	assert_string_equal(
	    token_err_string(TOKEN_EXPIRED), "The access token expired.");
	assert_string_not_equal(token_err_string(TOKEN_MALFORMED),
	    token_err_string(TOKEN_BAD_SIGNATURE));
}

/*
 * token_verify_any: a token signed with any of the secrets verifies, in
 * whichever position; the claims are still checked; none matching, an
 * empty list or a malformed token is refused as with one secret.
 */
static void
test_verify_any(void **state)
{
	static char old[] = SECRET, cur[] = "the new secret, also 32 bytes...",
		    other[] = "a secret nobody configured.......";
	struct token_key keys[3] = {
		{ cur, sizeof cur - 1 },
		{ old, sizeof old - 1 },
		{ other, sizeof other - 1 },
	};
	char *t_old, *t_cur, *t_none, *t_exp;

	(void)state;
	t_old = token_mint(old, sizeof old - 1, "sbx1", "port:8080", LATER);
	t_cur = token_mint(cur, sizeof cur - 1, "sbx1", "port:8080", LATER);
	t_none = token_mint(
	    "yet another secret of 32 bytes..", 32, "sbx1", "port:8080", LATER);
	t_exp = token_mint(old, sizeof old - 1, "sbx1", "port:8080", NOW);

	/* [cur, old]: both verify; the first signs new ones. */
	assert_int_equal(token_verify_any(keys, 2, t_old, strlen(t_old), "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_OK);
	assert_int_equal(token_verify_any(keys, 2, t_cur, strlen(t_cur), "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_OK);
	/* The last of three counts as much as the first. */
	assert_int_equal(token_verify_any(keys + 1, 2, t_old, strlen(t_old),
			     "sbx1", NULL, "port:8080", NOW),
	    TOKEN_OK);
	/* [cur] alone: the old token is no longer signed. */
	assert_int_equal(token_verify_any(keys, 1, t_old, strlen(t_old), "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_BAD_SIGNATURE);
	assert_int_equal(token_verify_any(keys, 3, t_none, strlen(t_none),
			     "sbx1", NULL, "port:8080", NOW),
	    TOKEN_BAD_SIGNATURE);
	assert_int_equal(token_verify_any(keys, 0, t_cur, strlen(t_cur), "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_BAD_SIGNATURE);
	assert_int_equal(token_verify_any(NULL, 0, t_cur, strlen(t_cur), "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_BAD_SIGNATURE);
	/* A matching signature still leaves the claims to check. */
	assert_int_equal(token_verify_any(keys, 3, t_exp, strlen(t_exp), "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_EXPIRED);
	assert_int_equal(token_verify_any(keys, 3, t_old, strlen(t_old), "sbx2",
			     NULL, "port:8080", NOW),
	    TOKEN_WRONG_SANDBOX);
	assert_int_equal(token_verify_any(keys, 3, t_cur, strlen(t_cur), "sbx1",
			     NULL, "port:8081", NOW),
	    TOKEN_WRONG_SCOPE);
	assert_int_equal(token_verify_any(keys, 3, "akt1.bad.sig", 12, "sbx1",
			     NULL, "port:8080", NOW),
	    TOKEN_MALFORMED);
	free(t_old);
	free(t_cur);
	free(t_none);
	free(t_exp);
}

/* token_secret_equal: equal only for the same bytes and length. */
static void
test_secret_equal(void **state)
{
	(void)state;
	assert_true(token_secret_equal("abc", 3, "abc", 3));
	assert_false(token_secret_equal("abd", 3, "abc", 3));
	assert_false(token_secret_equal("ab", 2, "abc", 3));
	assert_false(token_secret_equal("abcd", 4, "abc", 3));
	assert_false(token_secret_equal("", 0, "abc", 3));
	assert_true(token_secret_equal("", 0, "", 0));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_matches_oracle),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_token_len_not_nul),
		cmocka_unit_test(test_expiry_boundary),
		cmocka_unit_test(test_wrong_secret),
		cmocka_unit_test(test_tampered),
		cmocka_unit_test(test_malformed_shape),
		cmocka_unit_test(test_malformed_payload),
		cmocka_unit_test(test_base64url_strict),
		cmocka_unit_test(test_lengths_mod3),
		cmocka_unit_test(test_wrong_sandbox),
		cmocka_unit_test(test_safe_id),
		cmocka_unit_test(test_scopes),
		cmocka_unit_test(test_mint_refuses),
		cmocka_unit_test(test_overlong),
		cmocka_unit_test(test_looks_like),
		cmocka_unit_test(test_err_strings),
		cmocka_unit_test(test_verify_any),
		cmocka_unit_test(test_secret_equal),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
