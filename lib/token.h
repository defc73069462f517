/*
 * Access tokens: "akt1.<payload>.<sig>", where payload is the base64url (no
 * padding) of "<sandbox>\n<scope>\n<expiry>" and sig is the base64url of
 * HMAC-SHA256(secret, "akt1.<payload>").  Scope is "port:<N>", "port:*" or
 * "tunnel"; expiry is in Unix seconds and the token is valid while
 * now < expiry.
 */
#ifndef AK_TOKEN_H
#define AK_TOKEN_H

#include <stddef.h>
#include <stdint.h>

/* What every token starts with. */
#define TOKEN_PREFIX "akt1."
#define TOKEN_PREFIX_LEN 5
/* The longest token accepted or minted, in bytes. */
#define TOKEN_MAX 4096

/* Why a token was refused. */
enum token_err {
	TOKEN_OK = 0,
	TOKEN_MALFORMED, /* not akt1.<payload>.<sig>, or a bad payload */
	TOKEN_BAD_SIGNATURE, /* not signed with this secret */
	TOKEN_EXPIRED, /* now >= expiry */
	TOKEN_WRONG_SANDBOX, /* signed for another sandbox */
	TOKEN_WRONG_SCOPE, /* signed for another port or use */
};

/* An HMAC secret: tk_len bytes at tk_key. */
struct token_key {
	char *tk_key;
	size_t tk_len;
};

char *token_mint(const char *secret, size_t secret_len, const char *sandbox,
    const char *scope, uint64_t expiry);
enum token_err token_verify(const char *secret, size_t secret_len,
    const char *token, size_t token_len, const char *sandbox_id,
    const char *sandbox_safe_id, const char *scope_needed, uint64_t now);
enum token_err token_verify_any(const struct token_key *keys, size_t nkeys,
    const char *token, size_t token_len, const char *sandbox_id,
    const char *sandbox_safe_id, const char *scope_needed, uint64_t now);
int token_expiry(const char *token, size_t token_len, uint64_t *expiry);
const char *token_err_string(enum token_err);
int token_looks_like(const char *s, size_t len);
int token_secret_equal(
    const char *given, size_t given_len, const char *want, size_t want_len);

#endif
