/*
 * libFuzzer harness for lib/token.c and gateway/auth.c.  Every input is
 * verified as a token, used as a sandbox id for a mint/verify round trip
 * (and a tampered copy), as a request target whose access_token parameters
 * are stripped, as credential headers on a private port, and as a Cookie
 * value to strip.  Results must keep their contracts and nothing may leak.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gw.h"
#include "token.h"

/* Abort with the failed condition, so libFuzzer saves the input. */
#define FUZZ_ASSERT(c) fuzz_assert((c) != 0, #c, __LINE__)

#define FUZZ_SECRET "0123456789abcdef0123456789abcdef"

static const char fuzz_conf[] = "listen:\n"
				"  - address: 127.0.0.1:18080\n"
				"auth:\n"
				"  secret: " FUZZ_SECRET "\n"
				"sandboxes:\n"
				"  - id: sbx@one\n"
				"    address: 127.0.0.1\n"
				"    ports:\n"
				"      - port: 8080\n"
				"        access: private\n"
				"      - port: 3000\n"
				"        access: public\n";

/* auth.secrets while rotating: another secret signs, FUZZ_SECRET verifies. */
static char fuzz_new[] = "another secret, the one that signs";
static char fuzz_old[] = FUZZ_SECRET;
static const struct token_key fuzz_keys[] = {
	{ fuzz_new, sizeof fuzz_new - 1 },
	{ fuzz_old, sizeof fuzz_old - 1 },
};

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Abort, naming the condition, unless ok. */
static void
fuzz_assert(int ok, const char *what, int line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_token.c:%d: %s\n", line, what);
	abort();
}

/* The configuration every input is checked against; loaded once. */
static struct gw_config *
fuzz_config(void)
{
	static struct gw_config *cf;
	char *cause = NULL;

	if (cf == NULL &&
	    (cf = conf_load_string("fuzz", fuzz_conf, &cause)) == NULL) {
		fprintf(stderr, "fuzz_token.c: %s\n", cause);
		abort();
	}
	return (cf);
}

/* Number of non-empty query parameters of target that are not ours. */
static size_t
fuzz_count_params(const char *target, int *ours)
{
	const char *p = strchr(target, '?'), *end;
	size_t n = 0, len;

	*ours = 0;
	if (p == NULL)
		return (0);
	for (p++; *p != '\0'; p = *end == '\0' ? end : end + 1) {
		len = strcspn(p, "&");
		end = p + len;
		if (len == 0)
			continue;
		if ((len == 12 || (len > 12 && p[12] == '=')) &&
		    memcmp(p, "access_token", 12) == 0)
			(*ours)++;
		else
			n++;
	}
	return (n);
}

/* Verify the raw input as a token; only a forged signature could pass. */
static void
fuzz_verify(const uint8_t *data, size_t size)
{
	enum token_err e;
	uint64_t expiry;

	e = token_verify(FUZZ_SECRET, sizeof FUZZ_SECRET - 1,
	    (const char *)data, size, "sbx@one", "sbx-at-one", "port:8080", 0);
	FUZZ_ASSERT(e >= TOKEN_OK && e <= TOKEN_WRONG_SCOPE);
	FUZZ_ASSERT(token_err_string(e) != NULL);
	/* One more secret that never signed it changes nothing. */
	FUZZ_ASSERT(token_verify_any(fuzz_keys, 2, (const char *)data, size,
			"sbx@one", "sbx-at-one", "port:8080", 0) == e);
	if (size > TOKEN_MAX || !token_looks_like((const char *)data, size))
		FUZZ_ASSERT(e == TOKEN_MALFORMED);
	if (e != TOKEN_MALFORMED && e != TOKEN_BAD_SIGNATURE)
		FUZZ_ASSERT(
		    token_expiry((const char *)data, size, &expiry) == 0);
}

/* Mint a token for text as a sandbox id and check it round-trips. */
static void
fuzz_round_trip(const char *text, uint64_t expiry)
{
	char *t;
	size_t len, i;

	if ((t = token_mint(FUZZ_SECRET, sizeof FUZZ_SECRET - 1, text, "port:*",
		 expiry)) == NULL)
		return;
	len = strlen(t);
	FUZZ_ASSERT(len <= TOKEN_MAX && token_looks_like(t, len));
	FUZZ_ASSERT(token_verify(FUZZ_SECRET, sizeof FUZZ_SECRET - 1, t, len,
			text, NULL, "port:443",
			0) == (expiry == 0 ? TOKEN_EXPIRED : TOKEN_OK));
	if (expiry > 0)
		FUZZ_ASSERT(
		    token_verify(FUZZ_SECRET, sizeof FUZZ_SECRET - 1, t, len,
			"\x01", NULL, "port:443", 0) == TOKEN_WRONG_SANDBOX);
	FUZZ_ASSERT(token_verify("another secret", 14, t, len, text, NULL,
			"port:443", 0) == TOKEN_BAD_SIGNATURE);
	FUZZ_ASSERT(
	    token_verify_any(fuzz_keys, 2, t, len, text, NULL, "port:443", 0) ==
	    (expiry == 0 ? TOKEN_EXPIRED : TOKEN_OK));
	FUZZ_ASSERT(token_verify_any(fuzz_keys, 1, t, len, text, NULL,
			"port:443", 0) == TOKEN_BAD_SIGNATURE);
	/* Any single change after the prefix breaks the signature. */
	i = TOKEN_PREFIX_LEN + (size_t)expiry % (len - TOKEN_PREFIX_LEN);
	if (t[i] != '.') {
		t[i] = t[i] == 'A' ? 'B' : 'A';
		FUZZ_ASSERT(
		    token_verify(FUZZ_SECRET, sizeof FUZZ_SECRET - 1, t, len,
			text, NULL, "port:443", 0) == TOKEN_BAD_SIGNATURE);
	}
	free(t);
}

/* auth_check for a host-form request with flags (AUTH_F_*). */
static int
fuzz_auth(const struct gw_config *cf, const struct gw_sandbox *sb, int port,
    const struct gw_port_rule *rule, const struct head *m, const char *target,
    int flags, struct auth_result *res)
{
	struct auth_req aq;

	memset(&aq, 0, sizeof aq);
	aq.aq_head = m;
	aq.aq_target = target;
	aq.aq_host = "8080-sbx.localhost";
	aq.aq_flags = flags | AUTH_F_NAVIGATION;
	return (auth_check(cf, sb, port, rule, &aq, res));
}

/* Strip access_token from "/" + text on a public port. */
static void
fuzz_target(const struct gw_config *cf, const char *text)
{
	const struct gw_sandbox *sb = cf->cf_sandboxes[0];
	struct auth_result res;
	struct head m;
	char *target;
	size_t before, after;
	int ours_before, ours_after, rc;

	memset(&m, 0, sizeof m);
	xasprintf(&target, "/%s", text);
	rc = fuzz_auth(cf, sb, 3000, &sb->sb_ports[1], &m, target, 0, &res);
	FUZZ_ASSERT(rc == 0 && res.ar_err == NULL && res.ar_location == NULL);
	before = fuzz_count_params(target, &ours_before);
	if (res.ar_target == NULL)
		FUZZ_ASSERT(ours_before == 0);
	else {
		FUZZ_ASSERT(ours_before > 0);
		after = fuzz_count_params(res.ar_target, &ours_after);
		FUZZ_ASSERT(ours_after == 0 && after == before);
		FUZZ_ASSERT(strlen(res.ar_target) < strlen(target));
		FUZZ_ASSERT(
		    strncmp(res.ar_target, target, strcspn(target, "?")) == 0);
	}
	auth_result_free(&res);

	/* The same target on the private port, with no other credential. */
	rc = fuzz_auth(
	    cf, sb, 8080, &sb->sb_ports[0], &m, target, AUTH_F_TLS, &res);
	if (rc == -1)
		FUZZ_ASSERT(res.ar_err != NULL && res.ar_message != NULL &&
		    (res.ar_err->e_status == 401 ||
			res.ar_err->e_status == 403));
	else
		FUZZ_ASSERT(ours_before > 0);
	auth_result_free(&res);
	free(target);
}

/* Offer text in every credential header on the private port. */
static void
fuzz_headers(const struct gw_config *cf, const char *text)
{
	const struct gw_sandbox *sb = cf->cf_sandboxes[0];
	struct hfield h[5];
	struct auth_result res;
	struct head m;
	char *bearer;
	size_t ws;
	int rc;

	xasprintf(&bearer, "Bearer %s", text);
	h[0].name = "Authorization";
	h[0].name_len = 13;
	h[0].value = bearer;
	h[0].value_len = strlen(bearer);
	h[1].name = "X-Access-Token";
	h[1].name_len = 14;
	h[1].value = text;
	h[1].value_len = strlen(text);
	h[2].name = "Cookie";
	h[2].name_len = 6;
	h[2].value = text;
	h[2].value_len = strlen(text);
	/* And in the fields that say where a browser's request came from. */
	h[3].name = "Origin";
	h[3].name_len = 6;
	h[3].value = text;
	h[3].value_len = strlen(text);
	h[4].name = "Sec-Fetch-Site";
	h[4].name_len = 14;
	h[4].value = text;
	h[4].value_len = strlen(text);
	memset(&m, 0, sizeof m);
	m.h_fields = h;
	m.h_nfields = 5;
	FUZZ_ASSERT(auth_is_credential_header(cf, &h[1]));
	/* Whitespace after "Bearer" is skipped, however much there is. */
	ws = strspn(text, " \t");
	FUZZ_ASSERT(auth_is_credential_header(cf, &h[0]) ==
	    token_looks_like(text + ws, strlen(text) - ws));
	FUZZ_ASSERT(!auth_is_credential_header(cf, &h[2]));
	rc = fuzz_auth(cf, sb, 8080, &sb->sb_ports[0], &m, "/?access_token=x",
	    AUTH_F_TLS | AUTH_F_NAVIGATION, &res);
	FUZZ_ASSERT(rc >= -1 && rc <= 1);
	if (rc == -1)
		FUZZ_ASSERT(res.ar_err != NULL && res.ar_message != NULL &&
		    res.ar_set_cookie == NULL);
	auth_result_free(&res);
	free(bearer);
}

/* Strip our cookie from text and check nothing of ours is left. */
static void
fuzz_cookie(const struct gw_config *cf, const char *text)
{
	char *out, *p;
	size_t len = strlen(text), n, i;

	out = auth_strip_cookie(cf, text, len);
	if (out == NULL)
		return;
	/* Pairs only shrink; a "; " may replace a bare ';'. */
	for (n = 0, i = 0; i < len; i++)
		n += text[i] == ';';
	FUZZ_ASSERT(strlen(out) <= len + n);
	for (p = out; p != NULL && *p != '\0';) {
		p += strspn(p, " \t");
		n = strcspn(p, "=;");
		if (strstr(text, "akgw_token") != NULL)
			FUZZ_ASSERT(
			    n != 10 || memcmp(p, "akgw_token", 10) != 0);
		p = strchr(p, ';');
		if (p != NULL)
			p++;
	}
	if (strstr(text, "akgw_token") == NULL)
		FUZZ_ASSERT(strcmp(out, text) == 0);
	free(out);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct gw_config *cf = fuzz_config();
	uint64_t expiry = 0;
	char *text;
	size_t i;

	fuzz_verify(data, size);

	/* The rest works on a NUL-free string, as header values are. */
	text = xstrndup((const char *)data, size);
	for (i = 0; i < size && i < 8; i++)
		expiry = expiry << 8 | data[i];
	fuzz_round_trip(text, expiry);
	fuzz_target(cf, text);
	fuzz_headers(cf, text);
	fuzz_cookie(cf, text);
	free(text);
	return (0);
}
