/*
 * Access tokens signed with HMAC-SHA256 over sandbox, scope and expiry.
 *
 * Nothing in a token is trusted before its signature has been checked in
 * constant time against the one this secret (or, while secrets rotate, one of
 * these secrets) makes; only then is the payload decoded.  The encodings are strict (canonical base64url, decimal without
 * leading zeros) so each claim has exactly one spelling.
 */
#include <sys/types.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "alloc.h"
#include "token.h"

/* Bytes of an HMAC-SHA256 and of its base64url form. */
#define TOKEN_MAC_LEN 32
#define TOKEN_SIG_LEN 43

/* The three claims of a decoded payload; pointers into the decoded text. */
struct token_claims {
	const char *tc_sandbox;
	size_t tc_sandbox_len;
	const char *tc_scope;
	size_t tc_scope_len;
	uint64_t tc_expiry;
};

static const char token_b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Value of a base64url character, or -1. */
static int
token_b64_value(unsigned char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return (ch - 'A');
	if (ch >= 'a' && ch <= 'z')
		return (ch - 'a' + 26);
	if (ch >= '0' && ch <= '9')
		return (ch - '0' + 52);
	if (ch == '-')
		return (62);
	if (ch == '_')
		return (63);
	return (-1);
}

/* Length of the unpadded base64url form of n bytes. */
static size_t
token_b64_len(size_t n)
{
	return ((n / 3) * 4 + (n % 3 != 0 ? n % 3 + 1 : 0));
}

/* Encode n bytes as unpadded base64url into out, which gets a NUL. */
static void
token_b64_encode(const unsigned char *in, size_t n, char *out)
{
	uint32_t v;
	size_t i, o = 0;

	for (i = 0; i + 3 <= n; i += 3) {
		v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 |
		    in[i + 2];
		out[o++] = token_b64[(v >> 18) & 63];
		out[o++] = token_b64[(v >> 12) & 63];
		out[o++] = token_b64[(v >> 6) & 63];
		out[o++] = token_b64[v & 63];
	}
	if (n - i == 1) {
		v = (uint32_t)in[i] << 16;
		out[o++] = token_b64[(v >> 18) & 63];
		out[o++] = token_b64[(v >> 12) & 63];
	} else if (n - i == 2) {
		v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
		out[o++] = token_b64[(v >> 18) & 63];
		out[o++] = token_b64[(v >> 12) & 63];
		out[o++] = token_b64[(v >> 6) & 63];
	}
	out[o] = '\0';
}

/*
 * Decode canonical unpadded base64url: no padding, no other bytes, and the
 * unused low bits of the last character zero.  out has room for len * 3 / 4
 * bytes.  Returns the decoded length, or -1.
 */
static ssize_t
token_b64_decode(const char *in, size_t len, unsigned char *out)
{
	uint32_t v = 0;
	size_t i, o = 0, bits = 0;
	int d;

	if (len % 4 == 1)
		return (-1);
	for (i = 0; i < len; i++) {
		if ((d = token_b64_value((unsigned char)in[i])) == -1)
			return (-1);
		v = (v << 6) | (uint32_t)d;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (unsigned char)(v >> bits);
			v &= (1U << bits) - 1;
		}
	}
	if (v != 0)
		return (-1);
	return ((ssize_t)o);
}

/* Is s (len bytes) a scope: "port:<1-65535>", "port:*" or "tunnel"? */
static int
token_scope_valid(const char *s, size_t len)
{
	unsigned long v = 0;
	size_t i;

	if (len == 6 && memcmp(s, "tunnel", 6) == 0)
		return (1);
	if (len < 6 || memcmp(s, "port:", 5) != 0)
		return (0);
	if (len == 6 && s[5] == '*')
		return (1);
	if (len > 10 || s[5] == '0')
		return (0);
	for (i = 5; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return (0);
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	return (v >= 1 && v <= 65535);
}

/* Is s (len bytes) a sandbox id a token may carry: no space or control? */
static int
token_sandbox_valid(const char *s, size_t len)
{
	size_t i;

	if (len == 0)
		return (0);
	for (i = 0; i < len; i++) {
		if ((unsigned char)s[i] <= ' ' || s[i] == 0x7f)
			return (0);
	}
	return (1);
}

/* Parse strict decimal (no sign, no leading zero) into *out; -1 if not. */
static int
token_parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
		return (-1);
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return (-1);
		if (v > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
			return (-1);
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return (0);
}

/*
 * Check the outer shape "akt1.<payload>.<sig>": bounded length, base64url
 * characters only, one dot between payload and a 43-character signature.
 * Sets *payload_len; -1 if the shape is wrong.
 */
static int
token_split(const char *token, size_t len, size_t *payload_len)
{
	const char *p, *dot;
	size_t i;

	if (token == NULL || len > TOKEN_MAX || !token_looks_like(token, len))
		return (-1);
	p = token + TOKEN_PREFIX_LEN;
	len -= TOKEN_PREFIX_LEN;
	if ((dot = memchr(p, '.', len)) == NULL)
		return (-1);
	*payload_len = (size_t)(dot - p);
	if (*payload_len == 0 || len - *payload_len - 1 != TOKEN_SIG_LEN)
		return (-1);
	for (i = 0; i < len; i++) {
		if (i != *payload_len &&
		    token_b64_value((unsigned char)p[i]) == -1)
			return (-1);
	}
	return (0);
}

/*
 * Write the base64url signature of data (len bytes) with secret into sig
 * (TOKEN_SIG_LEN + 1 bytes).  Returns -1 if the secret is unusable.
 */
static int
token_sign(const char *secret, size_t secret_len, const char *data, size_t len,
    char *sig)
{
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	int rc = -1;

	if (secret == NULL || secret_len == 0 || secret_len > INT_MAX)
		return (-1);
	if (HMAC(EVP_sha256(), secret, (int)secret_len,
		(const unsigned char *)data, len, mac, &mac_len) != NULL &&
	    mac_len == TOKEN_MAC_LEN) {
		token_b64_encode(mac, TOKEN_MAC_LEN, sig);
		rc = 0;
	}
	explicit_bzero(mac, sizeof mac);
	return (rc);
}

/*
 * Decode and parse the payload of a token whose shape token_split
 * accepted.  *text is xmalloc'd (the caller frees it) and holds the claims.
 * Returns -1 if the payload is not "<sandbox>\n<scope>\n<expiry>".
 */
static int
token_claims_parse(
    const char *payload, size_t len, char **text, struct token_claims *tc)
{
	const char *s, *nl1, *nl2, *end;
	ssize_t n;

	*text = xmalloc(len * 3 / 4 + 1);
	if ((n = token_b64_decode(payload, len, (unsigned char *)*text)) < 0)
		return (-1);
	s = *text;
	end = s + n;
	if ((nl1 = memchr(s, '\n', (size_t)n)) == NULL)
		return (-1);
	if ((nl2 = memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1))) == NULL)
		return (-1);
	tc->tc_sandbox = s;
	tc->tc_sandbox_len = (size_t)(nl1 - s);
	tc->tc_scope = nl1 + 1;
	tc->tc_scope_len = (size_t)(nl2 - nl1 - 1);
	if (!token_sandbox_valid(tc->tc_sandbox, tc->tc_sandbox_len) ||
	    !token_scope_valid(tc->tc_scope, tc->tc_scope_len))
		return (-1);
	return (
	    token_parse_u64(nl2 + 1, (size_t)(end - nl2 - 1), &tc->tc_expiry));
}

/* Does the n-byte string s equal the C string want (NULL never does)? */
static int
token_equal(const char *s, size_t n, const char *want)
{
	return (want != NULL && strlen(want) == n && memcmp(s, want, n) == 0);
}

/*
 * Mint a token for sandbox with scope, valid until expiry (Unix seconds).
 * Returns the token, xmalloc'd (the caller wipes and frees it), or NULL if
 * the secret is empty, the sandbox id has a space or control character, the
 * scope is not one of the three forms, or the token would pass TOKEN_MAX.
 */
char *
token_mint(const char *secret, size_t secret_len, const char *sandbox,
    const char *scope, uint64_t expiry)
{
	char *text, *token, sig[TOKEN_SIG_LEN + 1];
	size_t slen, plen, tlen;
	int n;

	if (sandbox == NULL || scope == NULL)
		return (NULL);
	slen = strlen(sandbox);
	if (slen > TOKEN_MAX || !token_sandbox_valid(sandbox, slen) ||
	    !token_scope_valid(scope, strlen(scope)))
		return (NULL);
	n = xasprintf(
	    &text, "%s\n%s\n%llu", sandbox, scope, (unsigned long long)expiry);
	plen = token_b64_len((size_t)n);
	tlen = TOKEN_PREFIX_LEN + plen + 1 + TOKEN_SIG_LEN;
	if (tlen > TOKEN_MAX) {
		free(text);
		return (NULL);
	}
	token = xmalloc(tlen + 1);
	memcpy(token, TOKEN_PREFIX, TOKEN_PREFIX_LEN);
	token_b64_encode(
	    (unsigned char *)text, (size_t)n, token + TOKEN_PREFIX_LEN);
	free(text);
	if (token_sign(
		secret, secret_len, token, TOKEN_PREFIX_LEN + plen, sig) != 0) {
		free(token);
		return (NULL);
	}
	token[TOKEN_PREFIX_LEN + plen] = '.';
	memcpy(token + TOKEN_PREFIX_LEN + plen + 1, sig, TOKEN_SIG_LEN + 1);
	explicit_bzero(sig, sizeof sig);
	return (token);
}

/*
 * Does the signature of token (payload plen bytes, its shape checked by
 * token_split) match the one secret makes?  Compared in constant time; an
 * unusable secret never matches.
 */
static int
token_sig_matches(
    const char *secret, size_t secret_len, const char *token, size_t plen)
{
	char sig[TOKEN_SIG_LEN + 1];
	int same;

	if (token_sign(
		secret, secret_len, token, TOKEN_PREFIX_LEN + plen, sig) != 0)
		return (0);
	same = CRYPTO_memcmp(sig, token + TOKEN_PREFIX_LEN + plen + 1,
		   TOKEN_SIG_LEN) == 0;
	explicit_bzero(sig, sizeof sig);
	return (same);
}

/*
 * Check the claims of a token whose signature matched: expiry, sandbox
 * (its id or safe id) and scope.
 */
static enum token_err
token_claims_check(const char *token, size_t plen, const char *sandbox_id,
    const char *sandbox_safe_id, const char *scope_needed, uint64_t now)
{
	struct token_claims tc;
	char *text = NULL;
	enum token_err err;

	if (token_claims_parse(token + TOKEN_PREFIX_LEN, plen, &text, &tc) != 0)
		err = TOKEN_MALFORMED;
	else if (now >= tc.tc_expiry)
		err = TOKEN_EXPIRED;
	else if (!token_equal(tc.tc_sandbox, tc.tc_sandbox_len, sandbox_id) &&
	    !token_equal(tc.tc_sandbox, tc.tc_sandbox_len, sandbox_safe_id))
		err = TOKEN_WRONG_SANDBOX;
	else if (scope_needed == NULL)
		err = TOKEN_WRONG_SCOPE;
	else if (token_equal(tc.tc_scope, tc.tc_scope_len, scope_needed) ||
	    (token_equal(tc.tc_scope, tc.tc_scope_len, "port:*") &&
		strncmp(scope_needed, "port:", 5) == 0))
		err = TOKEN_OK;
	else
		err = TOKEN_WRONG_SCOPE;
	free(text);
	return (err);
}

/*
 * Verify token (token_len bytes, need not be NUL-terminated) for a request
 * to sandbox sandbox_id (or its safe id, which may be NULL) that needs
 * scope_needed ("port:<N>" or "tunnel") at time now (Unix seconds).  The
 * signature is compared in constant time before the payload is decoded.
 * "port:*" grants every "port:<N>".
 */
enum token_err
token_verify(const char *secret, size_t secret_len, const char *token,
    size_t token_len, const char *sandbox_id, const char *sandbox_safe_id,
    const char *scope_needed, uint64_t now)
{
	size_t plen;

	if (token_split(token, token_len, &plen) != 0)
		return (TOKEN_MALFORMED);
	if (!token_sig_matches(secret, secret_len, token, plen))
		return (TOKEN_BAD_SIGNATURE);
	return (token_claims_check(
	    token, plen, sandbox_id, sandbox_safe_id, scope_needed, now));
}

/*
 * As token_verify, with any of nkeys secrets: the token is signed if one of
 * them made its signature.  Every secret is tried, whichever matches, so
 * the time taken depends on the number of secrets and not on which one (or
 * whether one) matched.
 */
enum token_err
token_verify_any(const struct token_key *keys, size_t nkeys, const char *token,
    size_t token_len, const char *sandbox_id, const char *sandbox_safe_id,
    const char *scope_needed, uint64_t now)
{
	size_t plen, i;
	int signed_ok = 0;

	if (token_split(token, token_len, &plen) != 0)
		return (TOKEN_MALFORMED);
	for (i = 0; i < nkeys; i++)
		signed_ok |= token_sig_matches(
		    keys[i].tk_key, keys[i].tk_len, token, plen);
	if (!signed_ok)
		return (TOKEN_BAD_SIGNATURE);
	return (token_claims_check(
	    token, plen, sandbox_id, sandbox_safe_id, scope_needed, now));
}

/*
 * Read the expiry of a token without checking its signature: call it only
 * on a token token_verify accepted.  Returns -1 if the token is malformed.
 */
int
token_expiry(const char *token, size_t token_len, uint64_t *expiry)
{
	struct token_claims tc;
	char *text = NULL;
	size_t plen;
	int rc = -1;

	if (token_split(token, token_len, &plen) != 0)
		return (-1);
	if (token_claims_parse(token + TOKEN_PREFIX_LEN, plen, &text, &tc) ==
	    0) {
		*expiry = tc.tc_expiry;
		rc = 0;
	}
	free(text);
	return (rc);
}

/* A sentence saying why a token was refused (or that it is valid). */
const char *
token_err_string(enum token_err err)
{
	switch (err) {
	case TOKEN_OK:
		return ("The access token is valid.");
	case TOKEN_MALFORMED:
		return ("The access token is malformed: it is not a token this "
			"gateway makes (akt1.<payload>.<signature>).");
	case TOKEN_BAD_SIGNATURE:
		return ("The access token's signature does not match: it was "
			"made with another secret or has been altered.");
	case TOKEN_EXPIRED:
		return ("The access token expired.");
	case TOKEN_WRONG_SANDBOX:
		return ("The access token is for another sandbox.");
	case TOKEN_WRONG_SCOPE:
		return ("The access token's scope does not cover this "
			"request.");
	}
	return ("The access token was refused.");
}

/* Does s (len bytes) look like one of our tokens: starts with "akt1."? */
int
token_looks_like(const char *s, size_t len)
{
	return (s != NULL && len >= TOKEN_PREFIX_LEN &&
	    memcmp(s, TOKEN_PREFIX, TOKEN_PREFIX_LEN) == 0);
}

/*
 * Compare a presented secret with the expected one in time that depends
 * only on the lengths: a mismatched length compares the expected value with
 * itself, so nothing about its content leaks.
 */
int
token_secret_equal(
    const char *given, size_t given_len, const char *want, size_t want_len)
{
	int same;

	if (given_len != want_len) {
		(void)CRYPTO_memcmp(want, want, want_len);
		return (0);
	}
	same = CRYPTO_memcmp(given, want, want_len) == 0;
	return (same);
}
