/*
 * Credentials for private ports.  A request's access token may come in
 * Authorization: Bearer, X-Access-Token, the access_token query parameter
 * or the gateway's cookie; this file finds it, checks it, and tells the
 * caller whether to forward, redirect (to turn a query token into a
 * cookie) or refuse.  The cookie is the one credential a browser attaches
 * by itself, so it counts only for requests from the port URL's own
 * origin (Origin, Sec-Fetch-Site), and not at all on path-form URLs,
 * which every sandbox shares one origin with, unless
 * auth.path_form_cookies says every sandbox trusts every other; see
 * docs/security.md.  Credentials never travel further than the gateway:
 * the caller drops the headers auth_is_credential_header names, forwards
 * the Cookie header auth_strip_cookie returns and the target in ar_target.
 * Nothing here logs, and no message repeats a token.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "gw.h"
#include "token.h"

const struct gw_error gw_err_unauthorized[] = { { 401, "unauthorized" } };
const struct gw_error gw_err_forbidden[] = { { 403, "forbidden" } };
const struct gw_error gw_err_credentials_need_tls[] = { { 403,
    "credentials_need_tls" } };
const struct gw_error gw_err_cross_origin_credential[] = { { 403,
    "cross_origin_credential" } };
const struct gw_error gw_err_host_form_required[] = { { 403,
    "host_form_required" } };

/* The query parameter that carries a token. */
#define AUTH_QUERY_PARAM "access_token"
#define AUTH_QUERY_PARAM_LEN (sizeof AUTH_QUERY_PARAM - 1)

/*
 * The prefixes a cookie name may carry: __Host- (HTTPS, host form: the
 * browser keeps it to this host, Path=/ and Secure, and no sibling name
 * can set it) and __Secure- (HTTPS, path form, whose Path is the prefix).
 */
#define AUTH_COOKIE_HOST "__Host-"
#define AUTH_COOKIE_SECURE "__Secure-"

/* Where a token came from, in the order the sources are consulted. */
enum auth_source {
	AUTH_SRC_BEARER = 0,
	AUTH_SRC_HEADER, /* X-Access-Token */
	AUTH_SRC_QUERY,
	AUTH_SRC_COOKIE,
};

/* One token found in a request; at_token is xmalloc'd and wiped. */
struct auth_token {
	enum auth_source at_source;
	char *at_token;
	size_t at_len;
};

/* Every token of ours a request carries, in source order. */
struct auth_found {
	struct auth_token *af_tokens;
	size_t af_count;
	size_t af_size;
	char *af_target; /* target without access_token, or NULL */
};

/* Add a copy of a token (len bytes) from source to f. */
static void
auth_found_add(
    struct auth_found *f, enum auth_source source, const char *s, size_t len)
{
	struct auth_token *at;

	if (f->af_count == f->af_size) {
		f->af_size = f->af_size == 0 ? 4 : f->af_size * 2;
		f->af_tokens = xreallocarray(
		    f->af_tokens, f->af_size, sizeof *f->af_tokens);
	}
	at = &f->af_tokens[f->af_count++];
	at->at_source = source;
	at->at_token = xstrndup(s, len);
	at->at_len = strlen(at->at_token); /* what was allocated */
}

/* Wipe and free what auth_collect found. */
static void
auth_found_free(struct auth_found *f)
{
	size_t i;

	for (i = 0; i < f->af_count; i++) {
		explicit_bzero(
		    f->af_tokens[i].at_token, f->af_tokens[i].at_len);
		free(f->af_tokens[i].at_token);
	}
	free(f->af_tokens);
	free(f->af_target);
	memset(f, 0, sizeof *f);
}

/*
 * If h is "Authorization: Bearer akt1...." (scheme case-insensitive), set
 * *tok and *len to the token and return 1; an application's own
 * Authorization gives 0.
 */
static int
auth_bearer(const struct hfield *h, const char **tok, size_t *len)
{
	const char *v = h->value, *end = h->value + h->value_len;

	if (h->name_len != 13 || strncasecmp(h->name, "authorization", 13) != 0)
		return (0);
	if (h->value_len < 7 || strncasecmp(v, "bearer", 6) != 0 ||
	    (v[6] != ' ' && v[6] != '\t'))
		return (0);
	for (v += 6; v < end && (*v == ' ' || *v == '\t'); v++)
		;
	if (!token_looks_like(v, (size_t)(end - v)))
		return (0);
	*tok = v;
	*len = (size_t)(end - v);
	return (1);
}

/* Is h an X-Access-Token field? */
static int
auth_is_access_header(const struct hfield *h)
{
	return (h->name_len == 14 &&
	    strncasecmp(h->name, "x-access-token", 14) == 0);
}

/* Value of a hex digit, or -1. */
static int
auth_hex(char ch)
{
	if (ch >= '0' && ch <= '9')
		return (ch - '0');
	if (ch >= 'a' && ch <= 'f')
		return (ch - 'a' + 10);
	if (ch >= 'A' && ch <= 'F')
		return (ch - 'A' + 10);
	return (-1);
}

/*
 * Percent-decode a query value in place and return its new length; a
 * malformed escape is kept as it is (the token check refuses it).
 */
static size_t
auth_unescape(char *s, size_t len)
{
	size_t i, o = 0;
	int hi, lo;

	for (i = 0; i < len; i++) {
		if (s[i] == '%' && i + 2 < len &&
		    (hi = auth_hex(s[i + 1])) != -1 &&
		    (lo = auth_hex(s[i + 2])) != -1) {
			s[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else
			s[o++] = s[i];
	}
	memset(s + o, 0, len - o);
	return (o);
}

/* Is the query parameter p (len bytes, "name[=value]") access_token? */
static int
auth_is_query_param(const char *p, size_t len)
{
	const char *eq = memchr(p, '=', len);
	size_t nlen = eq != NULL ? (size_t)(eq - p) : len;

	return (nlen == AUTH_QUERY_PARAM_LEN &&
	    memcmp(p, AUTH_QUERY_PARAM, AUTH_QUERY_PARAM_LEN) == 0);
}

/*
 * Find access_token parameters in the query of target.  Each value is
 * added to f (percent-decoded) and f->af_target gets the target without
 * them: the path, then the other parameters byte for byte and in order,
 * joined by '&' (empty parameters are dropped), with no '?' when none is
 * left, and "/" for an empty path.  Without an access_token parameter
 * f->af_target stays NULL.
 */
static void
auth_query(struct auth_found *f, const char *target)
{
	const char *q, *p, *end;
	char *out, *o;
	size_t len, first = f->af_count;
	int kept = 0;

	if ((q = strchr(target, '?')) == NULL)
		return;
	out = o = xmalloc(strlen(target) + 2);
	if (q == target)
		*o++ = '/'; /* "?a=1" has an empty path */
	memcpy(o, target, (size_t)(q - target));
	o += q - target;
	for (p = q + 1; *p != '\0'; p = *end == '\0' ? end : end + 1) {
		len = strcspn(p, "&");
		end = p + len;
		if (len == 0)
			continue;
		if (auth_is_query_param(p, len)) {
			p += AUTH_QUERY_PARAM_LEN;
			if (p < end)
				p++; /* '=' */
			auth_found_add(f, AUTH_SRC_QUERY, p, (size_t)(end - p));
			continue;
		}
		*o++ = kept++ == 0 ? '?' : '&';
		memcpy(o, p, len);
		o += len;
	}
	*o = '\0';
	if (f->af_count == first) {
		free(out);
		return;
	}
	for (len = first; len < f->af_count; len++) {
		f->af_tokens[len].at_len = auth_unescape(
		    f->af_tokens[len].at_token, f->af_tokens[len].at_len);
		f->af_tokens[len].at_token[f->af_tokens[len].at_len] = '\0';
	}
	f->af_target = out;
}

/*
 * Call cb for each pair of a Cookie value (len bytes): name and its length,
 * and the whole pair trimmed of surrounding whitespace.
 */
static void
auth_cookie_pairs(const char *value, size_t len,
    void (*cb)(const char *, size_t, const char *, size_t, void *), void *arg)
{
	const char *p = value, *end = value + len, *semi, *s, *e, *eq;

	while (p < end) {
		if ((semi = memchr(p, ';', (size_t)(end - p))) == NULL)
			semi = end;
		for (s = p; s < semi && (*s == ' ' || *s == '\t'); s++)
			;
		for (e = semi; e > s && (e[-1] == ' ' || e[-1] == '\t'); e--)
			;
		if (e > s) {
			if ((eq = memchr(s, '=', (size_t)(e - s))) == NULL)
				eq = e;
			cb(s, (size_t)(eq - s), s, (size_t)(e - s), arg);
		}
		p = semi + 1;
	}
}

/* State while collecting cookie tokens. */
struct auth_cookie_ctx {
	const char *cc_name;
	size_t cc_name_len;
	const char *cc_prefix; /* collecting: the prefix; stripping: NULL */
	struct auth_found *cc_found; /* collecting tokens, or NULL */
	char *cc_out; /* rebuilding a Cookie value, or NULL */
	size_t cc_out_len;
	int cc_removed;
};

/*
 * Is the cookie named name (len bytes) the gateway's token cookie?  While
 * collecting, only with the prefix the request's address uses; while
 * stripping, with any prefix (in any case), so none travels upstream.
 */
static int
auth_cookie_is_ours(
    const struct auth_cookie_ctx *cc, const char *name, size_t len)
{
	static const char *const prefixes[] = { AUTH_COOKIE_HOST,
		AUTH_COOKIE_SECURE, "" };
	size_t i, plen;

	for (i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
		if (cc->cc_prefix != NULL &&
		    strcmp(cc->cc_prefix, prefixes[i]) != 0)
			continue;
		plen = strlen(prefixes[i]);
		if (len != plen + cc->cc_name_len)
			continue;
		if ((cc->cc_prefix != NULL
			    ? memcmp(name, prefixes[i], plen)
			    : strncasecmp(name, prefixes[i], plen)) != 0)
			continue;
		if (memcmp(name + plen, cc->cc_name, cc->cc_name_len) == 0)
			return (1);
	}
	return (0);
}

/* Collect the token from a cookie pair if it is ours. */
static void
auth_cookie_collect_cb(const char *name, size_t name_len, const char *pair,
    size_t pair_len, void *arg)
{
	struct auth_cookie_ctx *cc = arg;
	const char *v;
	size_t vlen;

	if (!auth_cookie_is_ours(cc, name, name_len))
		return;
	v = pair + name_len;
	vlen = pair_len - name_len;
	if (vlen > 0) {
		v++; /* '=' */
		vlen--;
	}
	/* A cookie-value may be wrapped in double quotes (RFC 6265). */
	if (vlen >= 2 && v[0] == '"' && v[vlen - 1] == '"') {
		v++;
		vlen -= 2;
	}
	auth_found_add(cc->cc_found, AUTH_SRC_COOKIE, v, vlen);
}

/* Append a cookie pair to the rebuilt value unless it is ours. */
static void
auth_cookie_strip_cb(const char *name, size_t name_len, const char *pair,
    size_t pair_len, void *arg)
{
	struct auth_cookie_ctx *cc = arg;

	if (auth_cookie_is_ours(cc, name, name_len)) {
		cc->cc_removed = 1;
		return;
	}
	if (cc->cc_out_len != 0) {
		memcpy(cc->cc_out + cc->cc_out_len, "; ", 2);
		cc->cc_out_len += 2;
	}
	memcpy(cc->cc_out + cc->cc_out_len, pair, pair_len);
	cc->cc_out_len += pair_len;
}

/*
 * The prefix of the gateway's cookie at the request's address: __Host- on
 * the host form over TLS, __Secure- on the path form over TLS, none on
 * plain HTTP (where a browser allows neither).
 */
static const char *
auth_cookie_prefix(const struct auth_req *aq)
{
	if (!(aq->aq_flags & AUTH_F_TLS))
		return ("");
	return (aq->aq_prefix != NULL ? AUTH_COOKIE_SECURE : AUTH_COOKIE_HOST);
}

/* Find every token of ours in the request, in source order. */
static void
auth_collect(
    const struct gw_config *cf, const struct auth_req *aq, struct auth_found *f)
{
	const struct head *req = aq->aq_head;
	struct auth_cookie_ctx cc;
	const struct hfield *h;
	const char *tok;
	size_t i, len;

	memset(f, 0, sizeof *f);
	for (i = 0; i < req->h_nfields; i++) {
		if (auth_bearer(&req->h_fields[i], &tok, &len))
			auth_found_add(f, AUTH_SRC_BEARER, tok, len);
	}
	for (i = 0; i < req->h_nfields; i++) {
		h = &req->h_fields[i];
		if (auth_is_access_header(h))
			auth_found_add(
			    f, AUTH_SRC_HEADER, h->value, h->value_len);
	}
	if (aq->aq_target != NULL)
		auth_query(f, aq->aq_target);
	memset(&cc, 0, sizeof cc);
	cc.cc_name = cf->cf_auth_cookie;
	cc.cc_name_len = strlen(cf->cf_auth_cookie);
	cc.cc_prefix = auth_cookie_prefix(aq);
	cc.cc_found = f;
	for (i = 0; i < req->h_nfields; i++) {
		h = &req->h_fields[i];
		if (h->name_len == 6 && strncasecmp(h->name, "cookie", 6) == 0)
			auth_cookie_pairs(h->value, h->value_len,
			    auth_cookie_collect_cb, &cc);
	}
}

/* Fill res with a refusal; returns -1. */
static int auth_refuse(struct auth_result *res, const struct gw_error *err,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int
auth_refuse(
    struct auth_result *res, const struct gw_error *err, const char *fmt, ...)
{
	va_list ap;

	res->ar_err = err;
	va_start(ap, fmt);
	xvasprintf(&res->ar_message, fmt, ap);
	va_end(ap);
	return (-1);
}

/* Fill res with the refusal for a token token_verify refused. */
static int
auth_refuse_token(struct auth_result *res, const struct gw_sandbox *sb,
    int port, enum token_err err)
{
	switch (err) {
	case TOKEN_WRONG_SANDBOX:
		return (auth_refuse(res, gw_err_forbidden,
		    "%s It does not grant sandbox '%s'.", token_err_string(err),
		    sb->sb_id));
	case TOKEN_WRONG_SCOPE:
		return (auth_refuse(res, gw_err_forbidden,
		    "%s It does not grant port %d of sandbox '%s'.",
		    token_err_string(err), port, sb->sb_id));
	default:
		return (auth_refuse(
		    res, gw_err_unauthorized, "%s", token_err_string(err)));
	}
}

/*
 * Split an authority "host[:port]" (an IPv6 literal in brackets) of len
 * bytes into the host and its port, or defport when there is none.
 * Returns -1 when it is malformed.
 */
static int
auth_authority(const char *s, size_t len, int defport, const char **host,
    size_t *hlen, int *port)
{
	const char *end = s + len, *colon;
	long v = 0;

	if (len > 0 && *s == '[') {
		if ((colon = memchr(s, ']', len)) == NULL)
			return (-1);
		colon++;
		if (colon != end && *colon != ':')
			return (-1);
	} else if ((colon = memchr(s, ':', len)) == NULL)
		colon = end;
	*host = s;
	*hlen = (size_t)(colon - s);
	*port = defport;
	if (*hlen == 0)
		return (-1);
	if (colon == end)
		return (0);
	if (++colon == end || end - colon > 5)
		return (-1);
	for (; colon < end; colon++) {
		if (*colon < '0' || *colon > '9')
			return (-1);
		v = v * 10 + (*colon - '0');
	}
	if (v < 1 || v > 65535)
		return (-1);
	*port = (int)v;
	return (0);
}

/*
 * Is origin (len bytes, an Origin field's value) the origin the request
 * addressed: the listener's scheme and the Host as the client sent it,
 * host names compared without regard to case, default ports implied?
 * "null" and anything with a path are not.
 */
static int
auth_origin_is_own(const struct auth_req *aq, const char *origin, size_t len)
{
	const char *oh, *hh;
	size_t ohlen, hhlen, slen;
	int tls = (aq->aq_flags & AUTH_F_TLS) != 0, oport, hport;

	slen = tls ? 8 : 7;
	if (aq->aq_host == NULL || len <= slen ||
	    strncasecmp(origin, tls ? "https://" : "http://", slen) != 0)
		return (0);
	if (auth_authority(origin + slen, len - slen, tls ? 443 : 80, &oh,
		&ohlen, &oport) != 0 ||
	    auth_authority(aq->aq_host, strlen(aq->aq_host), tls ? 443 : 80,
		&hh, &hhlen, &hport) != 0)
		return (0);
	return (ohlen == hhlen && strncasecmp(oh, hh, ohlen) == 0 &&
	    oport == hport);
}

/* Is a Sec-Fetch-Site value (len bytes) one that allows the cookie? */
static int
auth_fetch_site_is_own(const char *v, size_t len)
{
	return ((len == 11 && strncasecmp(v, "same-origin", 11) == 0) ||
	    (len == 4 && strncasecmp(v, "none", 4) == 0));
}

/*
 * Did the request come from the port URL's own origin, as far as the
 * browser tells?  Every Origin field must name that origin and every
 * Sec-Fetch-Site be same-origin or none; a request with neither (curl, an
 * older browser's navigation) passes.  When it did not, *why and *why_len
 * get the field that says so, and *is_origin whether it is Origin.
 */
static int
auth_from_own_origin(const struct auth_req *aq, const char **why,
    size_t *why_len, int *is_origin)
{
	const struct hfield *h;
	size_t i;

	for (i = 0; i < aq->aq_head->h_nfields; i++) {
		h = &aq->aq_head->h_fields[i];
		if (h->name_len == 6 &&
		    strncasecmp(h->name, "origin", 6) == 0 &&
		    !auth_origin_is_own(aq, h->value, h->value_len))
			*is_origin = 1;
		else if (h->name_len == 14 &&
		    strncasecmp(h->name, "sec-fetch-site", 14) == 0 &&
		    !auth_fetch_site_is_own(h->value, h->value_len))
			*is_origin = 0;
		else
			continue;
		*why = h->value;
		*why_len = h->value_len;
		return (0);
	}
	return (1);
}

/*
 * The origin the request addressed (scheme and Host), or a description
 * when the Host is missing; xmalloc'd.
 */
static char *
auth_own_origin(const struct auth_req *aq)
{
	char *s;

	if (aq->aq_host == NULL)
		return (xstrdup("this port's own origin"));
	xasprintf(&s, "%s://%s", aq->aq_flags & AUTH_F_TLS ? "https" : "http",
	    aq->aq_host);
	return (s);
}

/* Longest part of a browser's field a message repeats. */
#define AUTH_ECHO_MAX 200

/* Refuse the cookie of a request that came from another origin. */
static int
auth_refuse_cross_origin(struct auth_result *res, const struct gw_sandbox *sb,
    int port, const struct auth_req *aq, const char *why, size_t why_len,
    int is_origin)
{
	char *own = auth_own_origin(aq);
	int len = why_len > AUTH_ECHO_MAX ? AUTH_ECHO_MAX : (int)why_len;

	auth_refuse(res, gw_err_cross_origin_credential,
	    "The cookie for port %d of sandbox '%s' counts only on pages of "
	    "%s, and this request came from %s%.*s%s: a page of another "
	    "origin cannot use it. Send the token in Authorization: Bearer "
	    "or X-Access-Token instead, or open the port's address directly.",
	    port, sb->sb_id, own,
	    is_origin ? "" : "another site (Sec-Fetch-Site: ", len, why,
	    is_origin ? "" : ")");
	free(own);
	return (-1);
}

/*
 * Refuse a browser credential (the cookie, or a query token to be turned
 * into one) at a path-form address, naming the host-form address to use.
 */
static int
auth_refuse_path_form(struct auth_result *res, const struct gw_config *cf,
    const struct gw_sandbox *sb, int port, const struct auth_req *aq)
{
	const char *h = NULL;
	size_t hlen;
	int tls = (aq->aq_flags & AUTH_F_TLS) != 0, gwport = tls ? 443 : 80;
	char portbuf[8] = "";

	if (aq->aq_host != NULL)
		(void)auth_authority(aq->aq_host, strlen(aq->aq_host), gwport,
		    &h, &hlen, &gwport);
	if (gwport != (tls ? 443 : 80))
		snprintf(portbuf, sizeof portbuf, ":%d", gwport);
	return (auth_refuse(res, gw_err_host_form_required,
	    "Browsers reach private port %d of sandbox '%s' only at its "
	    "host-form address, %s://%d-%s.%s%s/: a path-form address such "
	    "as %s/ shares its origin with every sandbox on this gateway, so "
	    "the gateway does not keep a browser's credential for it. "
	    "Programs may use the path form with Authorization: Bearer or "
	    "X-Access-Token.",
	    port, sb->sb_id, tls ? "https" : "http", port, sb->sb_safe_id,
	    cf->cf_domains[0], portbuf, aq->aq_prefix));
}

/*
 * Build the answer that turns a valid query token into a cookie that
 * lives as long as the token: HttpOnly, SameSite=Lax, no Domain, Path=/
 * (or the path-form prefix), and over TLS Secure with the __Host- (or
 * __Secure-) prefix.  The browser goes on to the target without
 * access_token, by a 303; or, when the navigation came from another site,
 * by a page of our own origin, so that the next request is same-origin
 * and the cookie counts.  Returns 1.
 */
static int
auth_redirect(const struct gw_config *cf, const struct auth_found *f,
    const struct auth_token *at, const struct auth_req *aq,
    struct auth_result *res)
{
	const char *prefix = aq->aq_prefix != NULL ? aq->aq_prefix : "";
	const char *why;
	size_t why_len;
	uint64_t now = aq->aq_now, expiry = now + 1;
	int is_origin = 0;

	/* token_verify accepted it, so the expiry is there and in the future. */
	if (token_expiry(at->at_token, at->at_len, &expiry) != 0 ||
	    expiry <= now)
		expiry = now + 1;
	xasprintf(&res->ar_location, "%s%s", prefix, f->af_target);
	xasprintf(&res->ar_set_cookie,
	    "%s%s=%s; Path=%s/; HttpOnly; SameSite=Lax; Max-Age=%llu%s",
	    auth_cookie_prefix(aq), cf->cf_auth_cookie, at->at_token, prefix,
	    (unsigned long long)(expiry - now),
	    aq->aq_flags & AUTH_F_TLS ? "; Secure" : "");
	if (!auth_from_own_origin(aq, &why, &why_len, &is_origin))
		res->ar_flags |= AUTH_R_F_PAGE;
	return (1);
}

/*
 * Decide what to do with a request for port of sandbox sb under rule;
 * aq describes the request (see struct auth_req).
 *
 * Returns 0 to forward (with ar_target instead of the target when it is
 * not NULL), 1 to answer with ar_set_cookie and send the browser on to
 * ar_location (a 303, or with AUTH_R_F_PAGE a page that goes on), or -1
 * to refuse with ar_err and ar_message.  The caller frees res with
 * auth_result_free.
 */
int
auth_check(const struct gw_config *cf, const struct gw_sandbox *sb, int port,
    const struct gw_port_rule *rule, const struct auth_req *aq,
    struct auth_result *res)
{
	struct auth_found f;
	const struct auth_token *at, *used = NULL;
	enum token_err err = TOKEN_MALFORMED, e;
	enum auth_source source;
	const char *why;
	char scope[16];
	size_t i, why_len;
	int rc, is_origin = 0, tls = (aq->aq_flags & AUTH_F_TLS) != 0;
	int browser_ok = aq->aq_prefix == NULL || cf->cf_path_form_cookies;

	memset(res, 0, sizeof *res);
	auth_collect(cf, aq, &f);

	if (f.af_count != 0 && !tls && cf->cf_require_tls_creds) {
		rc = auth_refuse(res, gw_err_credentials_need_tls,
		    "This gateway accepts access tokens only over HTTPS: "
		    "repeat the request at an https:// address, and mint a "
		    "new token, since this one was sent in clear text.");
		goto out;
	}
	if (rule != NULL && !rule->pr_private) {
		res->ar_target = f.af_target;
		f.af_target = NULL;
		rc = 0;
		goto out;
	}
	if (f.af_count == 0) {
		rc = auth_refuse(res, gw_err_unauthorized,
		    "Port %d of sandbox '%s' is private: send a token in "
		    "Authorization: Bearer, X-Access-Token, or "
		    "?access_token=.",
		    port, sb->sb_id);
		goto out;
	}

	/*
	 * The browser attaches the cookie by itself, to requests from any
	 * page: it counts only where the page is the port's own.
	 */
	source = f.af_tokens[0].at_source;
	if ((source == AUTH_SRC_COOKIE ||
		(source == AUTH_SRC_QUERY &&
		    (aq->aq_flags & AUTH_F_NAVIGATION))) &&
	    !browser_ok) {
		rc = auth_refuse_path_form(res, cf, sb, port, aq);
		goto out;
	}
	if (source == AUTH_SRC_COOKIE &&
	    !auth_from_own_origin(aq, &why, &why_len, &is_origin)) {
		rc = auth_refuse_cross_origin(
		    res, sb, port, aq, why, why_len, is_origin);
		goto out;
	}

	/*
	 * The first source present decides; among several tokens from it
	 * (two cookies set for different paths, say) any valid one will do,
	 * and otherwise the first one's error is reported.
	 */
	snprintf(scope, sizeof scope, "port:%d", port);
	for (i = 0; i < f.af_count; i++) {
		at = &f.af_tokens[i];
		if (at->at_source != source)
			break;
		e = token_verify_any(cf->cf_auth_secrets, cf->cf_nauth_secrets,
		    at->at_token, at->at_len, sb->sb_id, sb->sb_safe_id, scope,
		    aq->aq_now);
		if (i == 0)
			err = e;
		if (e == TOKEN_OK) {
			used = at;
			break;
		}
	}
	if (used == NULL) {
		rc = auth_refuse_token(res, sb, port, err);
		goto out;
	}
	if (source == AUTH_SRC_QUERY && (aq->aq_flags & AUTH_F_NAVIGATION)) {
		rc = auth_redirect(cf, &f, used, aq, res);
		goto out;
	}
	res->ar_target = f.af_target;
	f.af_target = NULL;
	rc = 0;
out:
	auth_found_free(&f);
	return (rc);
}

/* Free the strings of an auth_result, wiping the cookie that holds a token. */
void
auth_result_free(struct auth_result *res)
{
	if (res->ar_set_cookie != NULL) {
		explicit_bzero(res->ar_set_cookie, strlen(res->ar_set_cookie));
		free(res->ar_set_cookie);
	}
	free(res->ar_message);
	free(res->ar_location);
	free(res->ar_target);
	memset(res, 0, sizeof *res);
}

/*
 * Is h a credential header the gateway consumes: X-Access-Token, or
 * Authorization: Bearer with one of our tokens?  The caller drops it.
 */
int
auth_is_credential_header(const struct gw_config *cf, const struct hfield *h)
{
	const char *tok;
	size_t len;

	(void)cf;
	return (auth_is_access_header(h) || auth_bearer(h, &tok, &len));
}

/*
 * Return a Cookie value (len bytes) without the gateway's cookie: the
 * other pairs byte for byte, joined by "; ", xmalloc'd; an exact copy when
 * our cookie is absent; NULL when nothing remains.
 */
char *
auth_strip_cookie(const struct gw_config *cf, const char *value, size_t len)
{
	struct auth_cookie_ctx cc;

	memset(&cc, 0, sizeof cc);
	cc.cc_name = cf->cf_auth_cookie;
	cc.cc_name_len = strlen(cf->cf_auth_cookie);
	/* Pairs shrink or gain at most one space each: 2 * len is ample. */
	cc.cc_out = xmalloc(2 * len + 1);
	auth_cookie_pairs(value, len, auth_cookie_strip_cb, &cc);
	if (!cc.cc_removed) {
		free(cc.cc_out);
		return (xstrndup(value, len));
	}
	if (cc.cc_out_len == 0) {
		free(cc.cc_out);
		return (NULL);
	}
	cc.cc_out[cc.cc_out_len] = '\0';
	return (cc.cc_out);
}
