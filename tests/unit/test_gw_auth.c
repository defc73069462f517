/*
 * Credentials for private ports: every token source, every refusal with its
 * status, code and sentence, the query-to-cookie redirect, stripping of the
 * query parameter and the cookie, credentials on plaintext, the cookie
 * only from the port's own origin, and browsers' credentials on the path
 * form.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alloc.h"
#include "gw.h"
#include "token.h"

#define SECRET "0123456789abcdef0123456789abcdef"
#define NOW 1700000000ULL
#define LATER (NOW + 3600)

#define CONF_HEAD \
	"listen:\n" \
	"  - address: 127.0.0.1:18080\n"
#define CONF_SANDBOXES \
	"sandboxes:\n" \
	"  - id: alice@box.one\n" \
	"    address: 127.0.0.1\n" \
	"    ports:\n" \
	"      - port: 8080\n" \
	"        access: private\n" \
	"      - port: 3000\n" \
	"        access: public\n" \
	"  - id: other\n" \
	"    address: 127.0.0.1\n" \
	"    ports:\n" \
	"      - port: 8080\n" \
	"        access: private\n"

static const char conf_plain[] = CONF_HEAD "auth:\n"
					   "  secret: " SECRET
					   "\n" CONF_SANDBOXES;
static const char conf_tls[] = CONF_HEAD
    "auth:\n"
    "  secret: " SECRET "\n"
    "  cookie: sbx_auth\n"
    "  require_tls_for_credentials: true\n" CONF_SANDBOXES;

/* While secrets rotate: NEW_SECRET signs, SECRET still verifies. */
#define NEW_SECRET "fedcba9876543210fedcba9876543210"
static const char conf_rotating[] = CONF_HEAD "auth:\n"
					      "  secrets:\n"
					      "    - " NEW_SECRET "\n"
					      "    - " SECRET
					      "\n" CONF_SANDBOXES;

static const char conf_path_cookies[] = CONF_HEAD
    "auth:\n"
    "  secret: " SECRET "\n"
    "  path_form_cookies: true\n" CONF_SANDBOXES;

/* Per-test state: a configuration and the sandboxes in it. */
struct fixture {
	struct gw_config *cf;
	const struct gw_sandbox *sb; /* alice@box.one */
	const struct gw_port_rule *priv; /* 8080 */
	const struct gw_port_rule *pub; /* 3000 */
};

/* A request head built from "Name: value" strings. */
struct req {
	struct head msg;
	struct hfield h[16];
};

/* Load text into f. */
static void
fixture_load(struct fixture *f, const char *text)
{
	char *cause = NULL;

	f->cf = conf_load_string("t.yaml", text, &cause);
	if (f->cf == NULL)
		fail_msg("config refused: %s", cause);
	f->sb = f->cf->cf_sandboxes[0];
	f->priv = &f->sb->sb_ports[0];
	f->pub = &f->sb->sb_ports[1];
	assert_true(f->priv->pr_private);
	assert_false(f->pub->pr_private);
}

static int
setup_plain(void **state)
{
	struct fixture *f = xcalloc(1, sizeof *f);

	fixture_load(f, conf_plain);
	*state = f;
	return (0);
}

static int
setup_tls(void **state)
{
	struct fixture *f = xcalloc(1, sizeof *f);

	fixture_load(f, conf_tls);
	*state = f;
	return (0);
}

static int
setup_path_cookies(void **state)
{
	struct fixture *f = xcalloc(1, sizeof *f);

	fixture_load(f, conf_path_cookies);
	*state = f;
	return (0);
}

static int
setup_rotating(void **state)
{
	struct fixture *f = xcalloc(1, sizeof *f);

	fixture_load(f, conf_rotating);
	*state = f;
	return (0);
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	conf_free(f->cf);
	free(f);
	return (0);
}

/* Fill r with the header lines, NULL-terminated ("Name: value"). */
static void
req_build(struct req *r, const char *const *lines)
{
	const char *colon;
	size_t i;

	memset(r, 0, sizeof *r);
	for (i = 0; lines != NULL && lines[i] != NULL; i++) {
		assert_true(i < 16);
		colon = strchr(lines[i], ':');
		assert_non_null(colon);
		r->h[i].name = lines[i];
		r->h[i].name_len = (size_t)(colon - lines[i]);
		r->h[i].value = colon + 2;
		r->h[i].value_len = strlen(colon + 2);
	}
	r->msg.h_fields = r->h;
	r->msg.h_nfields = i;
}

/* A token for sandbox id with scope, valid until LATER; freed by the test. */
static char *
mint(const char *id, const char *scope)
{
	char *t = token_mint(SECRET, strlen(SECRET), id, scope, LATER);

	assert_non_null(t);
	return (t);
}

/* The Host of port 8080's host-form address in these tests. */
#define HOST "8080-alice-at-box-one.localhost:18080"

/*
 * Run auth_check for port 8080 or 3000 of alice@box.one at host (NULL:
 * none) and, for the path form, prefix.
 */
static int
check_at(const struct fixture *f, int port, const char *const *lines,
    const char *target, const char *host, const char *prefix, int tls, int nav,
    struct auth_result *res)
{
	struct auth_req aq;
	struct req r;

	req_build(&r, lines);
	memset(&aq, 0, sizeof aq);
	aq.aq_head = &r.msg;
	aq.aq_target = target;
	aq.aq_host = host;
	aq.aq_prefix = prefix;
	aq.aq_now = NOW;
	aq.aq_flags = (tls ? AUTH_F_TLS : 0) | (nav ? AUTH_F_NAVIGATION : 0);
	return (auth_check(
	    f->cf, f->sb, port, port == 8080 ? f->priv : f->pub, &aq, res));
}

/* Run auth_check for port 8080 or 3000 at its host-form address. */
static int
check(const struct fixture *f, int port, const char *const *lines,
    const char *target, int tls, int nav, struct auth_result *res)
{
	return (check_at(f, port, lines, target, HOST, NULL, tls, nav, res));
}

/* Expect a refusal with status, code and exact message. */
static void
expect_refusal(const struct fixture *f, int port, const char *const *lines,
    const char *target, int tls, int status, const char *code,
    const char *message)
{
	struct auth_result res;

	assert_int_equal(check(f, port, lines, target, tls, 0, &res), -1);
	assert_non_null(res.ar_err);
	assert_int_equal(res.ar_err->e_status, status);
	assert_string_equal(res.ar_err->e_code, code);
	assert_non_null(res.ar_message);
	if (message != NULL)
		assert_string_equal(res.ar_message, message);
	assert_null(res.ar_location);
	assert_null(res.ar_set_cookie);
	assert_null(res.ar_target);
	auth_result_free(&res);
}

/* Expect the request to be forwarded with target want (NULL: unchanged). */
static void
expect_allowed(const struct fixture *f, int port, const char *const *lines,
    const char *target, int tls, const char *want)
{
	struct auth_result res;

	if (check(f, port, lines, target, tls, 0, &res) != 0)
		fail_msg("refused %s: %s", target,
		    res.ar_message != NULL ? res.ar_message : "(no message)");
	assert_null(res.ar_err);
	assert_null(res.ar_message);
	assert_null(res.ar_location);
	assert_null(res.ar_set_cookie);
	if (want == NULL)
		assert_null(res.ar_target);
	else {
		assert_non_null(res.ar_target);
		assert_string_equal(res.ar_target, want);
	}
	auth_result_free(&res);
}

static void
test_no_credential(void **state)
{
	struct fixture *f = *state;
	const char *app_auth[] = { "Authorization: Basic dXNlcjpwYXNz",
		"Cookie: session=1; akgw_token2=x", NULL };
	const char *app_bearer[] = { "Authorization: Bearer eyJhbGciOi.e30.x",
		NULL };
	const char *want = "Port 8080 of sandbox 'alice@box.one' is private: "
			   "send a token in Authorization: Bearer, "
			   "X-Access-Token, or ?access_token=.";

	expect_refusal(f, 8080, NULL, "/", 1, 401, "unauthorized", want);
	expect_refusal(f, 8080, app_auth, "/x?xaccess_token=1", 1, 401,
	    "unauthorized", want);
	expect_refusal(f, 8080, app_bearer, "/?access_token_x=1", 0, 401,
	    "unauthorized", want);
}

static void
test_bearer(void **state)
{
	struct fixture *f = *state;
	char *t = mint("alice@box.one", "port:8080"), *h1, *h2, *h3;
	const char *lines[3] = { NULL, NULL, NULL };

	xasprintf(&h1, "Authorization: Bearer %s", t);
	xasprintf(&h2, "authorization: bEARER   %s", t);
	xasprintf(&h3, "Authorization: Bearer\t%s", t);
	lines[0] = h1;
	expect_allowed(f, 8080, lines, "/app?x=1", 1, NULL);
	expect_allowed(f, 8080, lines, "/app?x=1", 0, NULL);
	lines[0] = h2;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	lines[0] = h3;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	/* The application's own Authorization first, ours second. */
	lines[0] = "Authorization: Basic dXNlcjpwYXNz";
	lines[1] = h1;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	free(h1);
	free(h2);
	free(h3);
	free(t);
}

static void
test_x_access_token(void **state)
{
	struct fixture *f = *state;
	char *t = mint("alice@box.one", "port:8080"), *h;
	const char *lines[] = { NULL, NULL };

	xasprintf(&h, "x-ACCESS-token: %s", t);
	lines[0] = h;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	free(h);
	lines[0] = "X-Access-Token: nonsense";
	expect_refusal(f, 8080, lines, "/", 1, 401, "unauthorized",
	    token_err_string(TOKEN_MALFORMED));
	free(t);
}

static void
test_query(void **state)
{
	struct fixture *f = *state;
	char *t = mint("alice-at-box-one", "port:8080"), *target, *want;

	xasprintf(&target, "/app/page?a=1&access_token=%s&b=%%20", t);
	expect_allowed(f, 8080, NULL, target, 1, "/app/page?a=1&b=%20");
	free(target);
	/* Percent-encoded token characters are decoded. */
	xasprintf(&target, "/?access_token=%%61%s", t + 1);
	expect_allowed(f, 8080, NULL, target, 1, "/");
	free(target);
	xasprintf(&target, "/x?access_token=%s", t);
	xasprintf(&want, "/x");
	expect_allowed(f, 8080, NULL, target, 1, want);
	free(want);
	free(target);
	free(t);
}

static void
test_redirect(void **state)
{
	struct fixture *f = *state;
	struct auth_result res;
	char *t = mint("alice@box.one", "port:8080"), *target, *want;

	xasprintf(&target, "/app?access_token=%s&tab=2", t);
	assert_int_equal(check(f, 8080, NULL, target, 0, 1, &res), 1);
	assert_null(res.ar_err);
	assert_null(res.ar_message);
	assert_null(res.ar_target);
	assert_string_equal(res.ar_location, "/app?tab=2");
	xasprintf(&want,
	    "akgw_token=%s; Path=/; HttpOnly; SameSite=Lax; "
	    "Max-Age=3600",
	    t);
	assert_string_equal(res.ar_set_cookie, want);
	assert_null(strstr(res.ar_set_cookie, "Domain"));
	free(want);
	assert_false(res.ar_flags & AUTH_R_F_PAGE);
	auth_result_free(&res);
	assert_null(res.ar_set_cookie);
	assert_null(res.ar_location);

	assert_false(res.ar_flags & AUTH_R_F_PAGE);

	/* Secure and __Host- only over TLS. */
	assert_int_equal(check(f, 8080, NULL, target, 1, 1, &res), 1);
	xasprintf(&want,
	    "__Host-akgw_token=%s; Path=/; HttpOnly; SameSite=Lax; "
	    "Max-Age=3600; Secure",
	    t);
	assert_string_equal(res.ar_set_cookie, want);
	free(want);
	auth_result_free(&res);
	free(target);

	/* Alone in the query, with and without a path. */
	xasprintf(&target, "/deep/path/?access_token=%s", t);
	assert_int_equal(check(f, 8080, NULL, target, 1, 1, &res), 1);
	assert_string_equal(res.ar_location, "/deep/path/");
	auth_result_free(&res);
	free(target);
	xasprintf(&target, "?access_token=%s", t);
	assert_int_equal(check(f, 8080, NULL, target, 1, 1, &res), 1);
	assert_string_equal(res.ar_location, "/");
	auth_result_free(&res);
	free(target);
	xasprintf(&target, "?x=1&access_token=%s", t);
	assert_int_equal(check(f, 8080, NULL, target, 1, 1, &res), 1);
	assert_string_equal(res.ar_location, "/?x=1");
	auth_result_free(&res);
	free(target);

	/* A token from a header never redirects, even on a navigation. */
	xasprintf(&want, "X-Access-Token: %s", t);
	{
		const char *lines[] = { want, NULL };

		assert_int_equal(check(f, 8080, lines, "/", 1, 1, &res), 0);
		assert_null(res.ar_location);
		auth_result_free(&res);
	}
	free(want);

	/* An invalid query token on a navigation is refused, not set. */
	assert_int_equal(
	    check(f, 8080, NULL, "/?access_token=akt1.x.y", 1, 1, &res), -1);
	assert_int_equal(res.ar_err->e_status, 401);
	assert_null(res.ar_set_cookie);
	auth_result_free(&res);
	free(t);
}

static void
test_redirect_max_age(void **state)
{
	struct fixture *f = *state;
	struct auth_req aq;
	struct auth_result res;
	struct req r;
	char *t, *target;

	t = token_mint(
	    SECRET, strlen(SECRET), "alice@box.one", "port:*", NOW + 1);
	xasprintf(&target, "/?access_token=%s", t);
	req_build(&r, NULL);
	memset(&aq, 0, sizeof aq);
	aq.aq_head = &r.msg;
	aq.aq_target = target;
	aq.aq_host = HOST;
	aq.aq_now = NOW;
	aq.aq_flags = AUTH_F_TLS | AUTH_F_NAVIGATION;
	assert_int_equal(auth_check(f->cf, f->sb, 8080, f->priv, &aq, &res), 1);
	assert_non_null(strstr(res.ar_set_cookie, "; Max-Age=1; Secure"));
	auth_result_free(&res);
	aq.aq_now = NOW + 1;
	assert_int_equal(
	    auth_check(f->cf, f->sb, 8080, f->priv, &aq, &res), -1);
	assert_string_equal(res.ar_message, "The access token expired.");
	auth_result_free(&res);
	free(target);
	free(t);
}

static void
test_cookie(void **state)
{
	struct fixture *f = *state;
	char *t = mint("alice@box.one", "port:8080");
	char *stale = mint("other", "port:8080"), *h1, *h2, *h3;
	const char *lines[] = { NULL, NULL, NULL };

	xasprintf(&h1, "Cookie: a=1; akgw_token=%s; b=2", t);
	lines[0] = h1;
	expect_allowed(f, 8080, lines, "/", 0, NULL);
	free(h1);
	xasprintf(&h1, "Cookie: akgw_token=\"%s\"", t);
	lines[0] = h1;
	expect_allowed(f, 8080, lines, "/", 0, NULL);
	free(h1);

	/* Two of our cookies (set for other paths): any valid one counts. */
	xasprintf(&h1, "Cookie: akgw_token=%s;akgw_token=%s", stale, t);
	lines[0] = h1;
	expect_allowed(f, 8080, lines, "/", 0, NULL);
	free(h1);
	xasprintf(&h2, "Cookie: akgw_token=%s", stale);
	xasprintf(&h3, "Cookie: x=1; akgw_token=%s", t);
	lines[0] = h2;
	lines[1] = h3;
	expect_allowed(f, 8080, lines, "/", 0, NULL);
	lines[1] = NULL;
	expect_refusal(f, 8080, lines, "/", 0, 403, "forbidden", NULL);
	free(h2);
	free(h3);

	/*
	 * Over TLS only __Host-akgw_token counts: a bare one (which a
	 * sibling host may have set) or __Secure- (the path form's) does not.
	 */
	xasprintf(&h1, "Cookie: __Host-akgw_token=%s", t);
	lines[0] = h1;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	expect_refusal(f, 8080, lines, "/", 0, 401, "unauthorized", NULL);
	free(h1);
	xasprintf(&h1,
	    "Cookie: akgw_token=%s; __Secure-akgw_token=%s; "
	    "__host-akgw_token=%s",
	    t, t, t);
	lines[0] = h1;
	expect_refusal(f, 8080, lines, "/", 1, 401, "unauthorized", NULL);
	free(h1);

	/* Another cookie's name is not ours. */
	xasprintf(&h1, "Cookie: xakgw_token=%s; akgw_token2=%s", t, t);
	lines[0] = h1;
	expect_refusal(f, 8080, lines, "/", 0, 401, "unauthorized", NULL);
	free(h1);
	free(stale);
	free(t);
}

static void
test_source_order(void **state)
{
	struct fixture *f = *state;
	char *good = mint("alice@box.one", "port:8080");
	char *bad = mint("other", "port:8080"), *h1, *h2, *target;
	const char *lines[] = { NULL, NULL, NULL };

	/* An explicit Bearer token decides even when the cookie is valid. */
	xasprintf(&h1, "Authorization: Bearer %s", bad);
	xasprintf(&h2, "Cookie: akgw_token=%s", good);
	lines[0] = h1;
	lines[1] = h2;
	expect_refusal(f, 8080, lines, "/", 1, 403, "forbidden", NULL);
	free(h1);
	free(h2);

	/* X-Access-Token comes before the query; the query is stripped. */
	xasprintf(&h1, "X-Access-Token: %s", good);
	xasprintf(&target, "/p?access_token=%s&z", bad);
	lines[0] = h1;
	lines[1] = NULL;
	expect_allowed(f, 8080, lines, target, 1, "/p?z");
	free(target);
	free(h1);

	/* The query comes before the cookie. */
	xasprintf(&h2, "Cookie: akgw_token=%s", good);
	xasprintf(&target, "/p?access_token=%s", bad);
	lines[0] = h2;
	expect_refusal(f, 8080, lines, target, 1, 403, "forbidden", NULL);
	free(target);
	free(h2);
	free(good);
	free(bad);
}

static void
test_refusals(void **state)
{
	struct fixture *f = *state;
	char *t, *h;
	const char *lines[] = { NULL, NULL };

	t = token_mint("a different secret, 32 bytes....", 32, "alice@box.one",
	    "port:8080", LATER);
	xasprintf(&h, "X-Access-Token: %s", t);
	lines[0] = h;
	expect_refusal(f, 8080, lines, "/", 1, 401, "unauthorized",
	    token_err_string(TOKEN_BAD_SIGNATURE));
	free(h);
	free(t);

	lines[0] = "Authorization: Bearer akt1.garbage";
	expect_refusal(f, 8080, lines, "/", 1, 401, "unauthorized",
	    token_err_string(TOKEN_MALFORMED));

	t = token_mint(
	    SECRET, strlen(SECRET), "alice@box.one", "port:8080", NOW);
	xasprintf(&h, "X-Access-Token: %s", t);
	lines[0] = h;
	expect_refusal(f, 8080, lines, "/", 1, 401, "unauthorized",
	    "The access token expired.");
	free(h);
	free(t);

	t = mint("other", "port:8080");
	xasprintf(&h, "X-Access-Token: %s", t);
	lines[0] = h;
	expect_refusal(f, 8080, lines, "/", 1, 403, "forbidden",
	    "The access token is for another sandbox. It does not grant "
	    "sandbox 'alice@box.one'.");
	free(h);
	free(t);

	t = mint("alice@box.one", "port:8081");
	xasprintf(&h, "X-Access-Token: %s", t);
	lines[0] = h;
	expect_refusal(f, 8080, lines, "/", 1, 403, "forbidden",
	    "The access token's scope does not cover this request. It does "
	    "not grant port 8080 of sandbox 'alice@box.one'.");
	free(h);
	free(t);

	t = mint("alice@box.one", "tunnel");
	xasprintf(&h, "X-Access-Token: %s", t);
	lines[0] = h;
	expect_refusal(f, 8080, lines, "/", 1, 403, "forbidden", NULL);
	free(h);
	free(t);

	t = mint("alice@box.one", "port:*");
	xasprintf(&h, "X-Access-Token: %s", t);
	lines[0] = h;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	free(h);
	free(t);
}

static void
test_no_rule_is_private(void **state)
{
	struct fixture *f = *state;
	struct auth_req aq;
	struct auth_result res;
	struct req r;

	req_build(&r, NULL);
	memset(&aq, 0, sizeof aq);
	aq.aq_head = &r.msg;
	aq.aq_target = "/";
	aq.aq_flags = AUTH_F_TLS;
	assert_int_equal(auth_check(f->cf, f->sb, 8080, NULL, &aq, &res), -1);
	assert_int_equal(res.ar_err->e_status, 401);
	auth_result_free(&res);
}

static void
test_public_port(void **state)
{
	struct fixture *f = *state;
	const char *lines[] = { "Authorization: Bearer akt1.anything",
		"Cookie: akgw_token=whatever", NULL };

	/* Anything goes; the query parameter is removed all the same. */
	expect_allowed(f, 3000, NULL, "/", 0, NULL);
	expect_allowed(f, 3000, lines, "/a?b=1", 0, NULL);
	expect_allowed(f, 3000, lines, "/a?access_token=junk&b=1", 0, "/a?b=1");
	expect_allowed(f, 3000, NULL, "/a?access_token", 1, "/a");
}

static void
test_query_stripping(void **state)
{
	static const struct {
		const char *in, *out; /* out NULL: unchanged */
	} cases[] = {
		{ "/", NULL },
		{ "/p", NULL },
		{ "/p?", NULL },
		{ "/p?a=1&b=2", NULL },
		{ "/p?xaccess_token=1&access_token_x=2&access_tokens=3", NULL },
		{ "/p?Access_Token=1", NULL },
		{ "/p?access%5Ftoken=1", NULL },
		{ "/p?access_token=T", "/p" },
		{ "/p?access_token=", "/p" },
		{ "/p?access_token", "/p" },
		{ "/p?access_token=T&a=1&b=2", "/p?a=1&b=2" },
		{ "/p?a=1&access_token=T&b=2", "/p?a=1&b=2" },
		{ "/p?a=1&b=2&access_token=T", "/p?a=1&b=2" },
		{ "/p?access_token=T&access_token=U", "/p" },
		{ "/p?access_token=T&a=1&access_token=U&b", "/p?a=1&b" },
		{ "/p?a=%26x%3D&access_token=T&c=d=e&=f&g==",
		    "/p?a=%26x%3D&c=d=e&=f&g==" },
		{ "/p?a=1&&access_token=T&&b=2&", "/p?a=1&b=2" },
		{ "/p?xaccess_token=1&access_token=T&access_token_x=2",
		    "/p?xaccess_token=1&access_token_x=2" },
		{ "/p?access_token=T#frag", "/p" },
		{ "/p;x=1?q=%zz&access_token=T", "/p;x=1?q=%zz" },
		{ "?access_token=T", "/" },
		{ "?a&access_token=T", "/?a" },
		{ "/a/b/c/?z=9&y=8&access_token=T&x=7", "/a/b/c/?z=9&y=8&x=7" },
	};
	struct fixture *f = *state;
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
		expect_allowed(f, 3000, NULL, cases[i].in, 1, cases[i].out);
}

static void
test_credentials_need_tls(void **state)
{
	struct fixture *f = *state;
	const char *want = "This gateway accepts access tokens only over "
			   "HTTPS: repeat the request at an https:// address, "
			   "and mint a new token, since this one was sent in "
			   "clear text.";
	char *t = mint("alice@box.one", "port:8080"), *h, *target;
	const char *lines[] = { NULL, NULL };

	xasprintf(&h, "Authorization: Bearer %s", t);
	lines[0] = h;
	expect_refusal(
	    f, 8080, lines, "/", 0, 403, "credentials_need_tls", want);
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	expect_refusal(
	    f, 3000, lines, "/", 0, 403, "credentials_need_tls", want);
	free(h);

	lines[0] = "X-Access-Token: x";
	expect_refusal(
	    f, 3000, lines, "/", 0, 403, "credentials_need_tls", want);
	lines[0] = "Cookie: a=b; sbx_auth=x";
	expect_refusal(
	    f, 3000, lines, "/", 0, 403, "credentials_need_tls", want);
	xasprintf(&target, "/?access_token=%s", t);
	expect_refusal(
	    f, 8080, NULL, target, 0, 403, "credentials_need_tls", want);
	free(target);

	/* Not credentials of ours: the old cookie name, an app's Bearer. */
	lines[0] = "Cookie: akgw_token=x";
	expect_allowed(f, 3000, lines, "/", 0, NULL);
	lines[0] = "Authorization: Bearer app-token";
	expect_allowed(f, 3000, lines, "/", 0, NULL);
	/* Nothing at all on a private port: 401, not a TLS complaint. */
	expect_refusal(f, 8080, NULL, "/", 0, 401, "unauthorized", NULL);

	/* The configured cookie name works over TLS, with its prefix. */
	xasprintf(&h, "Cookie: __Host-sbx_auth=%s", t);
	lines[0] = h;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	free(h);
	free(t);
}

static void
test_redirect_cookie_name(void **state)
{
	struct fixture *f = *state;
	struct auth_result res;
	char *t = mint("alice@box.one", "port:8080"), *target;

	xasprintf(&target, "/?access_token=%s", t);
	assert_int_equal(check(f, 8080, NULL, target, 1, 1, &res), 1);
	assert_true(
	    strncmp(res.ar_set_cookie, "__Host-sbx_auth=akt1.", 21) == 0);
	auth_result_free(&res);
	free(target);
	free(t);
}

static void
test_credential_header(void **state)
{
	struct fixture *f = *state;
	static const struct {
		const char *line;
		int want;
	} cases[] = {
		{ "X-Access-Token: anything", 1 },
		{ "x-access-token: ", 1 },
		{ "Authorization: Bearer akt1.abc.def", 1 },
		{ "AUTHORIZATION: bearer akt1.abc.def", 1 },
		{ "Authorization: BEARER  akt1.x", 1 },
		{ "Authorization: Bearer abc.def", 0 },
		{ "Authorization: Bearer AKT1.abc", 0 },
		{ "Authorization: Basic akt1.abc", 0 },
		{ "Authorization: Bearerakt1.abc", 0 },
		{ "Authorization: Bearer", 0 },
		{ "Proxy-Authorization: Bearer akt1.abc", 0 },
		{ "X-Access-Tokens: akt1.abc", 0 },
		{ "Cookie: akgw_token=akt1.abc", 0 },
	};
	struct req r;
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *lines[] = { cases[i].line, NULL };

		req_build(&r, lines);
		if (auth_is_credential_header(f->cf, &r.h[0]) != cases[i].want)
			fail_msg("'%s': want %d", cases[i].line, cases[i].want);
	}
}

/* Expect a refusal at host (and prefix) with status, code and message. */
static void
expect_refusal_at(const struct fixture *f, const char *const *lines,
    const char *target, const char *host, const char *prefix, int tls, int nav,
    const char *code, const char *message)
{
	struct auth_result res;

	assert_int_equal(
	    check_at(f, 8080, lines, target, host, prefix, tls, nav, &res), -1);
	assert_int_equal(res.ar_err->e_status, 403);
	assert_string_equal(res.ar_err->e_code, code);
	if (message != NULL)
		assert_string_equal(res.ar_message, message);
	assert_null(res.ar_set_cookie);
	assert_null(res.ar_location);
	auth_result_free(&res);
}

/* Expect the cookie request (lines) at host to be forwarded. */
static void
expect_allowed_at(const struct fixture *f, const char *const *lines,
    const char *host, const char *prefix, int tls)
{
	struct auth_result res;

	if (check_at(f, 8080, lines, "/", host, prefix, tls, 0, &res) != 0)
		fail_msg("refused: %s", res.ar_message);
	auth_result_free(&res);
}

static void
test_cookie_origin(void **state)
{
	struct fixture *f = *state;
	char *t = mint("alice@box.one", "port:8080"), *cookie, *hcookie;
	const char *lines[] = { NULL, NULL, NULL, NULL };
	static const char *const own[] = {
		"Origin: http://8080-alice-at-box-one.localhost:18080",
		"Origin: HTTP://8080-Alice-AT-box-one.LOCALHOST:18080",
		"Sec-Fetch-Site: same-origin",
		"Sec-Fetch-Site: none",
		"sec-fetch-site: Same-Origin",
		NULL,
	};
	static const char *const other[] = {
		"Origin: http://8081-alice-at-box-one.localhost:18080",
		"Origin: http://8080-other.localhost:18080",
		"Origin: http://8080-alice-at-box-one.localhost:18081",
		"Origin: http://8080-alice-at-box-one.localhost",
		"Origin: https://8080-alice-at-box-one.localhost:18080",
		"Origin: http://8080-alice-at-box-one.localhost:18080/",
		"Origin: http://8080-alice-at-box-one.localhost:18080.evil",
		"Origin: http://8080-alice-at-box-one.localhost:018080x",
		"Origin: http://8080-alice-at-box-one.localhost.:18080",
		"Origin: null",
		"Origin: ",
		"Origin: http://",
		"Sec-Fetch-Site: same-site",
		"Sec-Fetch-Site: cross-site",
		"Sec-Fetch-Site: same-origin, cross-site",
		"Sec-Fetch-Site: ",
		NULL,
	};
	size_t i;

	xasprintf(&cookie, "Cookie: akgw_token=%s", t);
	xasprintf(&hcookie, "Cookie: __Host-akgw_token=%s", t);
	lines[0] = cookie;
	/* No Origin and no Sec-Fetch-Site: curl, or a navigation. */
	expect_allowed_at(f, lines, HOST, NULL, 0);
	for (i = 0; own[i] != NULL; i++) {
		lines[1] = own[i];
		expect_allowed_at(f, lines, HOST, NULL, 0);
	}
	/* Both fields, each of the page's own. */
	lines[1] = own[0];
	lines[2] = own[2];
	expect_allowed_at(f, lines, HOST, NULL, 0);
	lines[2] = NULL;
	for (i = 0; other[i] != NULL; i++) {
		lines[1] = other[i];
		expect_refusal_at(f, lines, "/", HOST, NULL, 0, 0,
		    "cross_origin_credential", NULL);
	}
	/* One bad field is enough, in any order. */
	lines[1] = own[0];
	lines[2] = "Sec-Fetch-Site: same-site";
	expect_refusal_at(
	    f, lines, "/", HOST, NULL, 0, 0, "cross_origin_credential", NULL);
	lines[1] = "Origin: null";
	lines[2] = own[2];
	expect_refusal_at(
	    f, lines, "/", HOST, NULL, 0, 0, "cross_origin_credential", NULL);
	lines[1] = own[0];
	lines[2] = "Origin: http://8080-other.localhost:18080";
	expect_refusal_at(
	    f, lines, "/", HOST, NULL, 0, 0, "cross_origin_credential", NULL);
	lines[2] = NULL;

	/* The sentences. */
	lines[1] = "Origin: http://8080-other.localhost:18080";
	expect_refusal_at(f, lines, "/", HOST, NULL, 0, 0,
	    "cross_origin_credential",
	    "The cookie for port 8080 of sandbox 'alice@box.one' counts only "
	    "on pages of http://8080-alice-at-box-one.localhost:18080, and "
	    "this request came from http://8080-other.localhost:18080: a page "
	    "of another origin cannot use it. Send the token in "
	    "Authorization: Bearer or X-Access-Token instead, or open the "
	    "port's address directly.");
	lines[1] = "Sec-Fetch-Site: same-site";
	expect_refusal_at(f, lines, "/", HOST, NULL, 0, 0,
	    "cross_origin_credential",
	    "The cookie for port 8080 of sandbox 'alice@box.one' counts only "
	    "on pages of http://8080-alice-at-box-one.localhost:18080, and "
	    "this request came from another site (Sec-Fetch-Site: same-site): "
	    "a page of another origin cannot use it. Send the token in "
	    "Authorization: Bearer or X-Access-Token instead, or open the "
	    "port's address directly.");

	/* Default ports are implied, on each side; the scheme is TLS's. */
	lines[1] = "Origin: http://8080-alice-at-box-one.localhost";
	expect_allowed_at(
	    f, lines, "8080-alice-at-box-one.localhost:80", NULL, 0);
	lines[1] = "Origin: http://8080-alice-at-box-one.localhost:80";
	expect_allowed_at(f, lines, "8080-alice-at-box-one.localhost", NULL, 0);
	lines[0] = hcookie;
	lines[1] = "Origin: https://8080-alice-at-box-one.localhost";
	expect_allowed_at(
	    f, lines, "8080-alice-at-box-one.localhost:443", NULL, 1);
	lines[1] = "Origin: https://8080-alice-at-box-one.localhost:443";
	expect_allowed_at(f, lines, "8080-alice-at-box-one.localhost", NULL, 1);
	lines[1] = "Origin: http://8080-alice-at-box-one.localhost";
	expect_refusal_at(f, lines, "/", "8080-alice-at-box-one.localhost",
	    NULL, 1, 0, "cross_origin_credential", NULL);
	/* IPv6 literals keep their brackets. */
	lines[1] = "Origin: https://[::1]:8443";
	expect_allowed_at(f, lines, "[::1]:8443", NULL, 1);
	lines[1] = "Origin: https://[::1]";
	expect_refusal_at(f, lines, "/", "[::1]:8443", NULL, 1, 0,
	    "cross_origin_credential", NULL);
	/* Without a Host, an Origin cannot be the request's own. */
	lines[1] = "Origin: https://[::1]";
	expect_refusal_at(
	    f, lines, "/", NULL, NULL, 1, 0, "cross_origin_credential", NULL);

	/* Header tokens do not care where the page is. */
	free(cookie);
	xasprintf(&cookie, "X-Access-Token: %s", t);
	lines[0] = cookie;
	lines[1] = "Origin: http://8080-other.localhost:18080";
	lines[2] = "Sec-Fetch-Site: same-site";
	expect_allowed_at(f, lines, HOST, NULL, 0);
	free(cookie);
	xasprintf(&cookie, "Authorization: Bearer %s", t);
	lines[0] = cookie;
	expect_allowed_at(f, lines, HOST, NULL, 1);
	/* Nor does a public port. */
	lines[0] = hcookie;
	{
		struct auth_result res;

		assert_int_equal(
		    check_at(f, 3000, lines, "/", HOST, NULL, 1, 0, &res), 0);
		auth_result_free(&res);
	}
	free(cookie);
	free(hcookie);
	free(t);
}

static void
test_redirect_page(void **state)
{
	struct fixture *f = *state;
	struct auth_result res;
	char *t = mint("alice@box.one", "port:8080"), *target;
	const char *lines[] = { NULL, NULL };

	/*
	 * A navigation from another site ends, after a 303, in a request the
	 * browser marks cross-site, which the cookie does not count for: go
	 * on by a page of ours instead.
	 */
	xasprintf(&target, "/app?access_token=%s", t);
	lines[0] = "Sec-Fetch-Site: cross-site";
	assert_int_equal(check(f, 8080, lines, target, 1, 1, &res), 1);
	assert_true(res.ar_flags & AUTH_R_F_PAGE);
	assert_string_equal(res.ar_location, "/app");
	assert_true(strncmp(res.ar_set_cookie, "__Host-akgw_token=", 18) == 0);
	auth_result_free(&res);
	lines[0] = "Sec-Fetch-Site: same-site";
	assert_int_equal(check(f, 8080, lines, target, 1, 1, &res), 1);
	assert_true(res.ar_flags & AUTH_R_F_PAGE);
	auth_result_free(&res);
	lines[0] = "Sec-Fetch-Site: none";
	assert_int_equal(check(f, 8080, lines, target, 1, 1, &res), 1);
	assert_false(res.ar_flags & AUTH_R_F_PAGE);
	auth_result_free(&res);
	lines[0] = "Sec-Fetch-Site: same-origin";
	assert_int_equal(check(f, 8080, lines, target, 1, 1, &res), 1);
	assert_false(res.ar_flags & AUTH_R_F_PAGE);
	auth_result_free(&res);
	free(target);
	free(t);
}

static void
test_path_form(void **state)
{
	struct fixture *f = *state;
	struct auth_result res;
	char *t = mint("alice@box.one", "port:8080"), *h, *target;
	const char *lines[] = { NULL, NULL };
	const char *want =
	    "Browsers reach private port 8080 of sandbox 'alice@box.one' only "
	    "at its host-form address, "
	    "http://8080-alice-at-box-one.localhost:18080/: a path-form "
	    "address such as /alice@box.one/8080/ shares its origin with every "
	    "sandbox on this gateway, so the gateway does not keep a browser's "
	    "credential for it. Programs may use the path form with "
	    "Authorization: Bearer or X-Access-Token.";

	/* The cookie, from any page, and the query-to-cookie flow: no. */
	xasprintf(&h, "Cookie: akgw_token=%s", t);
	lines[0] = h;
	expect_refusal_at(f, lines, "/", "127.0.0.1:18080",
	    "/alice@box.one/8080", 0, 0, "host_form_required", want);
	free(h);
	xasprintf(&h, "Cookie: __Secure-akgw_token=%s", t);
	lines[0] = h;
	expect_refusal_at(f, lines, "/", "gw.example", "/alice@box.one/8080", 1,
	    0, "host_form_required",
	    "Browsers reach private port 8080 of sandbox 'alice@box.one' only "
	    "at its host-form address, "
	    "https://8080-alice-at-box-one.localhost/: a path-form "
	    "address such as /alice@box.one/8080/ shares its origin with every "
	    "sandbox on this gateway, so the gateway does not keep a browser's "
	    "credential for it. Programs may use the path form with "
	    "Authorization: Bearer or X-Access-Token.");
	free(h);
	xasprintf(&target, "/app?access_token=%s", t);
	expect_refusal_at(f, NULL, target, "127.0.0.1:18080",
	    "/alice@box.one/8080", 0, 1, "host_form_required", want);

	/* A query token outside a navigation is explicit, as headers are. */
	assert_int_equal(check_at(f, 8080, NULL, target, "127.0.0.1:18080",
			     "/alice@box.one/8080", 0, 0, &res),
	    0);
	assert_string_equal(res.ar_target, "/app");
	auth_result_free(&res);
	free(target);
	xasprintf(&h, "Authorization: Bearer %s", t);
	lines[0] = h;
	expect_allowed_at(
	    f, lines, "127.0.0.1:18080", "/alice@box.one/8080", 0);
	free(h);
	xasprintf(&h, "X-Access-Token: %s", t);
	lines[0] = h;
	expect_allowed_at(
	    f, lines, "127.0.0.1:18080", "/alice@box.one/8080", 1);
	free(h);
	free(t);
}

static void
test_path_form_cookies(void **state)
{
	struct fixture *f = *state;
	struct auth_result res;
	char *t = mint("alice@box.one", "port:8080"), *h, *target, *want;
	const char *lines[] = { NULL, NULL, NULL };

	/* The redirect keeps the prefix, and a cookie of its own path. */
	xasprintf(&target, "/app?access_token=%s&x=1", t);
	assert_int_equal(check_at(f, 8080, NULL, target, "gw:8443",
			     "/alice-at-box-one/8080", 1, 1, &res),
	    1);
	assert_string_equal(res.ar_location, "/alice-at-box-one/8080/app?x=1");
	xasprintf(&want,
	    "__Secure-akgw_token=%s; Path=/alice-at-box-one/8080/; HttpOnly; "
	    "SameSite=Lax; Max-Age=3600; Secure",
	    t);
	assert_string_equal(res.ar_set_cookie, want);
	free(want);
	auth_result_free(&res);
	assert_int_equal(check_at(f, 8080, NULL, target, "gw:8080",
			     "/alice-at-box-one/8080", 0, 1, &res),
	    1);
	xasprintf(&want,
	    "akgw_token=%s; Path=/alice-at-box-one/8080/; HttpOnly; "
	    "SameSite=Lax; Max-Age=3600",
	    t);
	assert_string_equal(res.ar_set_cookie, want);
	free(want);
	auth_result_free(&res);
	free(target);

	/* The cookie counts from the gateway's own origin only. */
	xasprintf(&h, "Cookie: __Secure-akgw_token=%s", t);
	lines[0] = h;
	lines[1] = "Origin: https://gw:8443";
	expect_allowed_at(f, lines, "gw:8443", "/alice-at-box-one/8080", 1);
	lines[1] = "Origin: https://evil.example";
	expect_refusal_at(f, lines, "/", "gw:8443", "/alice-at-box-one/8080", 1,
	    0, "cross_origin_credential", NULL);
	lines[1] = NULL;
	/* __Host- is the host form's; it does not count here. */
	free(h);
	xasprintf(&h, "Cookie: __Host-akgw_token=%s", t);
	lines[0] = h;
	assert_int_equal(check_at(f, 8080, lines, "/", "gw:8443",
			     "/alice-at-box-one/8080", 1, 0, &res),
	    -1);
	assert_int_equal(res.ar_err->e_status, 401);
	auth_result_free(&res);
	free(h);
	free(t);
}

/* Expect auth_strip_cookie(in) to give want (NULL: nothing left). */
static void
expect_cookie(const struct fixture *f, const char *in, const char *want)
{
	char *out = auth_strip_cookie(f->cf, in, strlen(in));

	if (want == NULL) {
		if (out != NULL)
			fail_msg("'%s' -> '%s', want nothing", in, out);
		return;
	}
	if (out == NULL)
		fail_msg("'%s' -> nothing, want '%s'", in, want);
	assert_string_equal(out, want);
	free(out);
}

static void
test_strip_cookie(void **state)
{
	struct fixture *f = *state;

	expect_cookie(f, "akgw_token=akt1.x.y", NULL);
	expect_cookie(f, "akgw_token=", NULL);
	expect_cookie(f, " akgw_token=a ; akgw_token=b;", NULL);
	expect_cookie(f, "akgw_token=t; a=1", "a=1");
	expect_cookie(f, "a=1; akgw_token=t; b=2", "a=1; b=2");
	expect_cookie(f, "a=1;b=2;akgw_token=t", "a=1; b=2");
	expect_cookie(f, "a=1;  akgw_token=t;\tb=\"x y\"", "a=1; b=\"x y\"");
	expect_cookie(f, "a=1; akgw_token=t; akgw_token=u; c", "a=1; c");
	/* Absent: an exact copy, odd spacing included. */
	expect_cookie(f, "a=1;b=2 ;  c=3", "a=1;b=2 ;  c=3");
	expect_cookie(f, "xakgw_token=1; akgw_token2=2; AKGW_TOKEN=3",
	    "xakgw_token=1; akgw_token2=2; AKGW_TOKEN=3");
	expect_cookie(f, "", "");
	expect_cookie(f, "a=%3B; akgw_token=t", "a=%3B");
	/* Every prefixed form goes, the prefix in any case. */
	expect_cookie(
	    f, "__Host-akgw_token=t; a=1; __Secure-akgw_token=u", "a=1");
	expect_cookie(f, "__host-akgw_token=t; __SECURE-akgw_token=u", NULL);
	expect_cookie(f, "__Host-akgw_token2=t; __Hostakgw_token=u",
	    "__Host-akgw_token2=t; __Hostakgw_token=u");
}

static void
test_strip_cookie_custom(void **state)
{
	struct fixture *f = *state;

	expect_cookie(f, "akgw_token=1; sbx_auth=2", "akgw_token=1");
	expect_cookie(f, "sbx_auth=2", NULL);
	expect_cookie(
	    f, "__Host-akgw_token=1; __Host-sbx_auth=2", "__Host-akgw_token=1");
}

static void
test_strip_cookie_len(void **state)
{
	struct fixture *f = *state;
	const char *in = "a=1; akgw_token=t; b=2XXXX";
	char *out;

	out = auth_strip_cookie(f->cf, in, strlen(in) - 4);
	assert_string_equal(out, "a=1; b=2");
	free(out);
	out = auth_strip_cookie(f->cf, in, 3);
	assert_string_equal(out, "a=1");
	free(out);
}

/*
 * auth.secrets [NEW, OLD]: tokens of either secret open the port, from any
 * source; another secret's token is refused as a bad signature, and an old
 * token's other faults are still reported as themselves.
 */
static void
test_rotation(void **state)
{
	struct fixture *f = *state;
	char *t_old, *t_new, *t_other, *t_exp, *h1, *h2;
	const char *lines[] = { NULL, NULL };

	t_old = mint("alice@box.one", "port:8080");
	t_new = token_mint(NEW_SECRET, strlen(NEW_SECRET), "alice@box.one",
	    "port:8080", LATER);
	t_other = token_mint("a different secret, 32 bytes....", 32,
	    "alice@box.one", "port:8080", LATER);
	t_exp = token_mint(
	    SECRET, strlen(SECRET), "alice@box.one", "port:8080", NOW);
	assert_string_equal(conf_signing_key(f->cf)->tk_key, NEW_SECRET);

	xasprintf(&h1, "X-Access-Token: %s", t_old);
	lines[0] = h1;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	free(h1);
	xasprintf(&h1, "Authorization: Bearer %s", t_new);
	lines[0] = h1;
	expect_allowed(f, 8080, lines, "/", 1, NULL);
	free(h1);
	/* Two cookies, another secret's first: the old one still opens. */
	xasprintf(&h1, "Cookie: akgw_token=%s; akgw_token=%s", t_other, t_old);
	lines[0] = h1;
	expect_allowed(f, 8080, lines, "/", 0, NULL);
	free(h1);

	xasprintf(&h1, "X-Access-Token: %s", t_other);
	lines[0] = h1;
	expect_refusal(f, 8080, lines, "/", 1, 401, "unauthorized",
	    token_err_string(TOKEN_BAD_SIGNATURE));
	xasprintf(&h2, "X-Access-Token: %s", t_exp);
	lines[0] = h2;
	expect_refusal(f, 8080, lines, "/", 1, 401, "unauthorized",
	    "The access token expired.");
	free(h1);
	free(h2);
	free(t_old);
	free(t_new);
	free(t_other);
	free(t_exp);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_no_credential, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_bearer, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_x_access_token, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_query, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_redirect, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_redirect_max_age, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_cookie, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_source_order, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_refusals, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_no_rule_is_private, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_public_port, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_query_stripping, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_credentials_need_tls, setup_tls, teardown),
		cmocka_unit_test_setup_teardown(
		    test_redirect_cookie_name, setup_tls, teardown),
		cmocka_unit_test_setup_teardown(
		    test_credential_header, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_strip_cookie, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_strip_cookie_custom, setup_tls, teardown),
		cmocka_unit_test_setup_teardown(
		    test_strip_cookie_len, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_cookie_origin, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_redirect_page, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_path_form, setup_plain, teardown),
		cmocka_unit_test_setup_teardown(
		    test_path_form_cookies, setup_path_cookies, teardown),
		cmocka_unit_test_setup_teardown(
		    test_rotation, setup_rotating, teardown),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
