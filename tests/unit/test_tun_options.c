/*
 * aktunnel settings: safe ids, gateway and target addresses, the tunnel URL,
 * flags over environment, the YR_TUNNEL_* limits (tunnel-protocol.md §11 and
 * scenarios 24-26, 32, 64, 65) and the TLS and token rules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "safeid.h"
#include "tun.h"

#define BASE_FLAGS \
	"--gateway", "gw:8080", "--sandbox", "sbx1", "--target", \
	    "http://127.0.0.1:8000"

static const char *const env_none[] = { NULL };

/* Parse argv (after the program name, NULL-terminated) against env. */
static int
parse_v(struct tun_options *o, char **cause, const char *const *env, va_list ap)
{
	char *argv[64];
	const char *arg;
	int argc = 0;

	argv[argc++] = (char *)"aktunnel";
	while ((arg = va_arg(ap, const char *)) != NULL) {
		assert_true(argc < 63);
		argv[argc++] = (char *)arg;
	}
	argv[argc] = NULL;
	return (tun_options_parse(o, argc, argv, (char *const *)env, cause));
}

/* Parse and require success; the caller frees o. */
static void
parse_ok(struct tun_options *o, const char *const *env, ...)
{
	va_list ap;
	char *cause = NULL;
	int rc;

	va_start(ap, env);
	rc = parse_v(o, &cause, env, ap);
	va_end(ap);
	if (rc != 0)
		fail_msg("unexpected error: %s", cause);
	assert_null(cause);
}

/* Parse and require failure with exactly message msg. */
static void
parse_err(const char *const *env, const char *msg, ...)
{
	struct tun_options o;
	va_list ap;
	char *cause = NULL;
	int rc;

	va_start(ap, msg);
	rc = parse_v(&o, &cause, env, ap);
	va_end(ap);
	if (rc != -1)
		fail_msg("expected error \"%s\", parse succeeded", msg);
	assert_non_null(cause);
	assert_string_equal(cause, msg);
	free(cause);
	tun_options_free(&o);
}

/* Parse and require failure with a message containing part. */
static void
parse_err_part(const char *const *env, const char *part, ...)
{
	struct tun_options o;
	va_list ap;
	char *cause = NULL;
	int rc;

	va_start(ap, part);
	rc = parse_v(&o, &cause, env, ap);
	va_end(ap);
	assert_int_equal(rc, -1);
	assert_non_null(cause);
	if (strstr(cause, part) == NULL)
		fail_msg("\"%s\" not in \"%s\"", part, cause);
	free(cause);
	tun_options_free(&o);
}

/* Safe ids: the vectors of §2.3 and scenario 64, and the 200-byte cut. */
static void
test_safeid(void **state)
{
	char in[512], want[512], *s;

	(void)state;
	s = safeid_make("sandbox@v1/foo.bar_baz");
	assert_string_equal(s, "sandbox-at-v1-foo-bar-baz");
	free(s);
	s = safeid_make("default-rtt");
	assert_string_equal(s, "default-rtt");
	free(s);
	s = safeid_make("");
	assert_string_equal(s, "");
	free(s);
	s = safeid_make("@@");
	assert_string_equal(s, "-at--at-");
	free(s);
	s = safeid_make("A~b:c");
	assert_string_equal(s, "A~b:c");
	free(s);

	/* 250 bytes are cut to 200. */
	memset(in, 'a', 250);
	in[250] = '\0';
	s = safeid_make(in);
	assert_int_equal(strlen(s), SAFEID_MAX);
	memset(want, 'a', 200);
	want[200] = '\0';
	assert_string_equal(s, want);
	free(s);

	/* Exactly 200 stays whole. */
	in[200] = '\0';
	s = safeid_make(in);
	assert_string_equal(s, want);
	free(s);

	/* The cut falls after replacement, possibly inside "-at-". */
	memset(in, 'a', 198);
	strcpy(in + 198, "@x");
	s = safeid_make(in);
	assert_int_equal(strlen(s), 200);
	assert_string_equal(s + 198, "-a");
	free(s);

	/* A UTF-8 sequence is never split: 199 bytes then a 2-byte char. */
	memset(in, 'a', 199);
	strcpy(in + 199, "\xc3\xa9");
	s = safeid_make(in);
	assert_int_equal(strlen(s), 199);
	free(s);
}

/* Every accepted gateway form. */
static void
test_gateway_forms(void **state)
{
	static const struct {
		const char *in;
		int tls;
		const char *host;
		int port;
	} t[] = {
		{ "gw", 0, "gw", 80 },
		{ "gw:8080", 0, "gw", 8080 },
		{ "127.0.0.1:8080", 0, "127.0.0.1", 8080 },
		{ "http://gw", 0, "gw", 80 },
		{ "http://gw:81/", 0, "gw", 81 },
		{ "ws://gw:9000", 0, "gw", 9000 },
		{ "https://gw", 1, "gw", 443 },
		{ "wss://gw:8443", 1, "gw", 8443 },
		{ "HTTPS://GW.Example.COM/", 1, "gw.example.com", 443 },
		{ "WS://gw", 0, "gw", 80 },
		{ "[::1]:8080", 0, "::1", 8080 },
		{ "[::1]", 0, "::1", 80 },
		{ "wss://[2001:db8::1]", 1, "2001:db8::1", 443 },
		{ "  gw:81  ", 0, "gw", 81 },
		{ "gw:65535", 0, "gw", 65535 },
		{ "gw:1", 0, "gw", 1 },
		{ "my_gw.local", 0, "my_gw.local", 80 },
	};
	struct tun_url u;
	char *cause = NULL;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		if (tun_gateway_parse(&u, t[i].in, &cause) != 0)
			fail_msg("%s: %s", t[i].in, cause);
		assert_int_equal(u.u_tls, t[i].tls);
		assert_string_equal(u.u_host, t[i].host);
		assert_int_equal(u.u_port, t[i].port);
		tun_url_free(&u);
	}
}

/* Every gateway rejection, with the exact message. */
static void
test_gateway_rejects(void **state)
{
	static const struct {
		const char *in;
		const char *msg;
	} t[] = {
		{ "ftp://gw",
		    "invalid --gateway 'ftp://gw': unsupported "
		    "scheme 'ftp' (use ws://, wss://, http:// or https://, or "
		    "no scheme for plain ws)" },
		{ "unix://gw",
		    "invalid --gateway 'unix://gw': unsupported "
		    "scheme 'unix' (use ws://, wss://, http:// or https://, or "
		    "no scheme for plain ws)" },
		{ "", "invalid --gateway '': the address is empty" },
		{ "   ", "invalid --gateway '   ': the address is empty" },
		{ "http://", "invalid --gateway 'http://': no host" },
		{ "http://:8080", "invalid --gateway 'http://:8080': no host" },
		{ ":8080", "invalid --gateway ':8080': no host" },
		{ "gw:0",
		    "invalid --gateway 'gw:0': bad port '0' (use 1 to "
		    "65535)" },
		{ "gw:65536",
		    "invalid --gateway 'gw:65536': bad port '65536' "
		    "(use 1 to 65535)" },
		{ "gw:http",
		    "invalid --gateway 'gw:http': bad port 'http' "
		    "(use 1 to 65535)" },
		{ "gw:",
		    "invalid --gateway 'gw:': bad port '' (use 1 to "
		    "65535)" },
		{ "gw:+80",
		    "invalid --gateway 'gw:+80': bad port '+80' (use 1 "
		    "to 65535)" },
		{ "http://gw/tunnel/x",
		    "invalid --gateway "
		    "'http://gw/tunnel/x': a path is not allowed (give "
		    "[scheme://]host[:port]; --tunnel-path sets the route)" },
		{ "gw?x=1",
		    "invalid --gateway 'gw?x=1': a query or fragment "
		    "is not allowed" },
		{ "gw/#top",
		    "invalid --gateway 'gw/#top': a query or "
		    "fragment is not allowed" },
		{ "user:pw@gw",
		    "invalid --gateway 'user:pw@gw': user info "
		    "('user@') is not allowed" },
		{ "::1",
		    "invalid --gateway '::1': an IPv6 address must be in "
		    "brackets, as in [::1]:8080" },
		{ "[::1",
		    "invalid --gateway '[::1': unterminated IPv6 address "
		    "(missing ']')" },
		{ "[zz::1]:80",
		    "invalid --gateway '[zz::1]:80': bad IPv6 "
		    "address '[zz::1]'" },
		{ "[::1]x",
		    "invalid --gateway '[::1]x': unexpected text after "
		    "']'" },
		{ "g w",
		    "invalid --gateway 'g w': bad character '\\x20' in "
		    "host" },
		{ "g%41",
		    "invalid --gateway 'g%41': bad character '%' in "
		    "host" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		parse_err(env_none, t[i].msg, "--gateway", t[i].in, "--sandbox",
		    "s", "--target", "http://x", NULL);
	}

	/* The variable that supplied a bad value is named. */
	{
		static const char *const env[] = {
			"AKERNEL_GATEWAY_ADDRESS=ftp://gw", NULL
		};

		parse_err(env,
		    "invalid AKERNEL_GATEWAY_ADDRESS 'ftp://gw': "
		    "unsupported scheme 'ftp' (use ws://, wss://, http:// or "
		    "https://, or no scheme for plain ws)",
		    "--sandbox", "s", "--target", "http://x", NULL);
	}
}

/* Target URLs: accepted forms and rejections. */
static void
test_target(void **state)
{
	static const struct {
		const char *in;
		int tls;
		const char *host;
		int port;
		const char *path;
		const char *url;
	} t[] = {
		{ "http://127.0.0.1:8000", 0, "127.0.0.1", 8000, "",
		    "http://127.0.0.1:8000" },
		{ "https://api.example.com", 1, "api.example.com", 443, "",
		    "https://api.example.com" },
		{ "https://svc.example/api/", 1, "svc.example", 443, "/api",
		    "https://svc.example/api" },
		{ "http://svc:80/a/b//", 0, "svc", 80, "/a/b",
		    "http://svc/a/b" },
		{ "127.0.0.1:9000", 0, "127.0.0.1", 9000, "",
		    "http://127.0.0.1:9000" },
		{ "localhost", 0, "localhost", 80, "", "http://localhost" },
		{ "https://[::1]:8443/x", 1, "::1", 8443, "/x",
		    "https://[::1]:8443/x" },
	};
	struct tun_options o;
	char *s;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		parse_ok(&o, env_none, "--gateway", "gw", "--sandbox", "s",
		    "--target", t[i].in, NULL);
		assert_int_equal(o.target.u_tls, t[i].tls);
		assert_string_equal(o.target.u_host, t[i].host);
		assert_int_equal(o.target.u_port, t[i].port);
		assert_string_equal(o.target.u_path, t[i].path);
		s = tun_target_url(&o);
		assert_string_equal(s, t[i].url);
		free(s);
		tun_options_free(&o);
	}

	parse_err(env_none,
	    "invalid --target 'ws://x': unsupported scheme "
	    "'ws' (use http:// or https://)",
	    "--gateway", "gw", "--sandbox", "s", "--target", "ws://x", NULL);
	parse_err(env_none,
	    "invalid --target 'ftp://x/y': unsupported scheme "
	    "'ftp' (use http:// or https://)",
	    "--gateway", "gw", "--sandbox", "s", "--target", "ftp://x/y", NULL);
	parse_err(env_none, "invalid --target 'https://': no host", "--gateway",
	    "gw", "--sandbox", "s", "--target", "https://", NULL);
	parse_err(env_none,
	    "invalid --target 'http://x:99999': bad port "
	    "'99999' (use 1 to 65535)",
	    "--gateway", "gw", "--sandbox", "s", "--target", "http://x:99999",
	    NULL);
	parse_err(env_none,
	    "invalid --target 'http://x/a?b=1': a query or "
	    "fragment is not allowed",
	    "--gateway", "gw", "--sandbox", "s", "--target", "http://x/a?b=1",
	    NULL);
	parse_err(env_none,
	    "invalid --target 'http://x/a b': bad character "
	    "'\\x20' in path",
	    "--gateway", "gw", "--sandbox", "s", "--target", "http://x/a b",
	    NULL);
	parse_err(env_none, "invalid --target '': the address is empty",
	    "--gateway", "gw", "--sandbox", "s", "--target", "", NULL);
}

/* The tunnel URL: scenario 65, safe ids, listen ports, --tunnel-path. */
static void
test_tunnel_url(void **state)
{
	static const struct {
		const char *gateway;
		const char *sandbox;
		const char *listen;
		const char *path;
		const char *url;
	} t[] = {
		{ "router:8080", "sandbox-demo", NULL, NULL,
		    "ws://router:8080/tunnel/sandbox-demo" },
		{ "gw", "sandbox@v1/foo.bar_baz", NULL, NULL,
		    "ws://gw:80/tunnel/sandbox-at-v1-foo-bar-baz" },
		{ "https://gw.example", "sbx1", NULL, NULL,
		    "wss://gw.example:443/tunnel/sbx1" },
		{ "wss://[::1]:9443", "sbx1", NULL, NULL,
		    "wss://[::1]:9443/tunnel/sbx1" },
		{ "gw:8080", "sbx1", "8766", NULL, "ws://gw:8080/tunnel/sbx1" },
		{ "gw:8080", "sbx1", "9001", NULL,
		    "ws://gw:8080/tunnel/sbx1/9000" },
		{ "gw:8080", "sbx1", NULL, "/tunnel/frontend-returned",
		    "ws://gw:8080/tunnel/frontend-returned" },
		{ "gw:8080", "sbx1", NULL, "sbx1/8765",
		    "ws://gw:8080/sbx1/8765" },
		{ "gw:8080", "sbx1", "1", "http://other:1/t/x?a=1",
		    "ws://gw:8080/t/x?a=1" },
	};
	struct tun_options o;
	char *argv[16], *cause, *s;
	int argc;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		argc = 0;
		argv[argc++] = (char *)"aktunnel";
		argv[argc++] = (char *)"--gateway";
		argv[argc++] = (char *)t[i].gateway;
		argv[argc++] = (char *)"--sandbox";
		argv[argc++] = (char *)t[i].sandbox;
		argv[argc++] = (char *)"--target";
		argv[argc++] = (char *)"http://127.0.0.1:8000";
		if (t[i].listen != NULL) {
			argv[argc++] = (char *)"--listen-port";
			argv[argc++] = (char *)t[i].listen;
		}
		if (t[i].path != NULL) {
			argv[argc++] = (char *)"--tunnel-path";
			argv[argc++] = (char *)t[i].path;
		}
		argv[argc] = NULL;
		cause = NULL;
		if (tun_options_parse(
			&o, argc, argv, (char *const *)env_none, &cause) != 0)
			fail_msg("%zu: %s", i, cause);
		s = tun_tunnel_url(&o);
		assert_string_equal(s, t[i].url);
		free(s);
		tun_options_free(&o);
	}

	parse_ok(&o, env_none, BASE_FLAGS, NULL);
	s = tun_gateway_url(&o);
	assert_string_equal(s, "ws://gw:8080");
	free(s);
	assert_string_equal(o.sandbox, "sbx1");
	assert_string_equal(o.safe_id, "sbx1");
	tun_options_free(&o);

	parse_err(env_none,
	    "--listen-port 1 leaves no tunnel port "
	    "(listen_port - 1); give --tunnel-path",
	    BASE_FLAGS, "--listen-port", "1", NULL);
	parse_err(env_none, "invalid --tunnel-path 'http://gw': no path",
	    BASE_FLAGS, "--tunnel-path", "http://gw", NULL);
	parse_err(env_none, "invalid --tunnel-path '/a#b': bad character '#'",
	    BASE_FLAGS, "--tunnel-path", "/a#b", NULL);
	parse_err(env_none,
	    "invalid --sandbox 'a b': the sandbox id has a "
	    "character that cannot stand in a URL path: '\\x20'",
	    "--gateway", "gw", "--sandbox", "a b", "--target", "http://x",
	    NULL);
	parse_err(env_none, "invalid --sandbox '': the sandbox id is empty",
	    "--gateway", "gw", "--sandbox", "", "--target", "http://x", NULL);
}

/* AKERNEL_GATEWAY_ADDRESS over YR_GATEWAY_ADDRESS; flags over both. */
static void
test_env_fallbacks(void **state)
{
	static const char *const both[] = { "YR_GATEWAY_ADDRESS=yr:1",
		"AKERNEL_GATEWAY_ADDRESS=ak:2", "AKTUNNEL_SANDBOX=env-sbx",
		"AKTUNNEL_TARGET=http://env:3", NULL };
	static const char *const yr[] = { "YR_GATEWAY_ADDRESS=yr:1",
		"AKTUNNEL_SANDBOX=s", "AKTUNNEL_TARGET=http://t", NULL };
	static const char *const blank[] = { "AKERNEL_GATEWAY_ADDRESS=  ",
		"YR_GATEWAY_ADDRESS=yr:1", "AKTUNNEL_SANDBOX=s",
		"AKTUNNEL_TARGET=http://t", NULL };
	static const char *const prefix[] = {
		"AKERNEL_GATEWAY_ADDRESS_X=nope:1",
		"XAKERNEL_GATEWAY_ADDRESS=x", "YR_GATEWAY_ADDRESS=yr:1",
		"AKTUNNEL_SANDBOX=s", "AKTUNNEL_TARGET=http://t", NULL
	};
	struct tun_options o;

	(void)state;
	parse_ok(&o, both, NULL);
	assert_string_equal(o.gateway.u_host, "ak");
	assert_int_equal(o.gateway.u_port, 2);
	assert_string_equal(o.sandbox, "env-sbx");
	assert_string_equal(o.target.u_host, "env");
	tun_options_free(&o);

	parse_ok(&o, yr, NULL);
	assert_string_equal(o.gateway.u_host, "yr");
	tun_options_free(&o);

	parse_ok(&o, blank, NULL);
	assert_string_equal(o.gateway.u_host, "yr");
	tun_options_free(&o);

	parse_ok(&o, prefix, NULL);
	assert_string_equal(o.gateway.u_host, "yr");
	tun_options_free(&o);

	parse_ok(&o, both, "--gateway", "flag:9", "--sandbox", "flag-sbx",
	    "--target", "https://flag", NULL);
	assert_string_equal(o.gateway.u_host, "flag");
	assert_int_equal(o.gateway.u_port, 9);
	assert_string_equal(o.sandbox, "flag-sbx");
	assert_string_equal(o.target.u_host, "flag");
	assert_int_equal(o.target.u_tls, 1);
	tun_options_free(&o);

	/* A later flag wins over an earlier one. */
	parse_ok(&o, env_none, BASE_FLAGS, "--gateway", "second", NULL);
	assert_string_equal(o.gateway.u_host, "second");
	tun_options_free(&o);
}

/* Missing required settings name the flag and the variable. */
static void
test_missing(void **state)
{
	(void)state;
	parse_err(env_none,
	    "missing --gateway ADDR (or "
	    "AKERNEL_GATEWAY_ADDRESS or YR_GATEWAY_ADDRESS), --sandbox ID (or "
	    "AKTUNNEL_SANDBOX) and --target URL (or AKTUNNEL_TARGET)",
	    NULL);
	parse_err(env_none, "missing --target URL (or AKTUNNEL_TARGET)",
	    "--gateway", "gw", "--sandbox", "s", NULL);
	parse_err(env_none, "missing --sandbox ID (or AKTUNNEL_SANDBOX)",
	    "--gateway", "gw", "--target", "http://t", NULL);
	parse_err(env_none,
	    "missing --gateway ADDR (or "
	    "AKERNEL_GATEWAY_ADDRESS or YR_GATEWAY_ADDRESS) and --target URL "
	    "(or AKTUNNEL_TARGET)",
	    "--sandbox", "s", NULL);
}

/* Defaults of every setting when nothing is set. */
static void
test_defaults(void **state)
{
	struct tun_options o;

	(void)state;
	parse_ok(&o, env_none, BASE_FLAGS, NULL);
	assert_int_equal(o.listen_port, 8766);
	assert_int_equal(o.protocol_version, 2);
	assert_true(o.max_body_size == 536870912ULL);
	assert_true(o.max_ws_message_size == 8388608ULL);
	assert_int_equal(o.stream_chunk, 65536);
	assert_int_equal(o.max_inflight, 16);
	assert_int_equal(o.stream_window_frames, 16);
	assert_true(o.fast_path_body == 65536ULL);
	assert_true(o.http_timeout == 600.0);
	assert_int_equal(o.verify_tls, 1);
	assert_null(o.ca_file);
	assert_null(o.token);
	assert_int_equal(o.token_query_fallback, 0);
	assert_int_equal(o.allow_plaintext_token, 0);
	assert_int_equal(o.log_level, LOG_LVL_INFO);
	assert_int_equal(o.log_format, LOG_FMT_TEXT);
	assert_int_equal(o.verbose, 0);
	assert_int_equal(o.nwarnings, 0);
	assert_int_equal(o.help, 0);
	assert_int_equal(o.version, 0);
	tun_options_free(&o);
}

/* Scenario 24: every limit over its cap is capped. */
static void
test_limits_capped(void **state)
{
	static const char *const env[] = { "YR_TUNNEL_PROTOCOL_VERSION=99",
		"YR_TUNNEL_MAX_BODY_SIZE=2147483648",
		"YR_TUNNEL_MAX_WS_MESSAGE_SIZE=67108864",
		"YR_TUNNEL_STREAM_CHUNK_BYTES=2097152",
		"YR_TUNNEL_MAX_INFLIGHT=2048",
		"YR_TUNNEL_STREAM_WINDOW_FRAMES=2048",
		"YR_TUNNEL_FAST_PATH_BODY_BYTES=2147483648", NULL };
	struct tun_options o;

	(void)state;
	parse_ok(&o, env, BASE_FLAGS, NULL);
	assert_int_equal(o.protocol_version, 2);
	assert_true(o.max_body_size == 1024ULL * 1024 * 1024);
	assert_true(o.max_ws_message_size == 8ULL * 1024 * 1024);
	assert_int_equal(o.stream_chunk, 64 * 1024);
	assert_int_equal(o.max_inflight, 1024);
	assert_int_equal(o.stream_window_frames, 1024);
	assert_true(o.fast_path_body == 5ULL * 1024 * 1024);
	tun_options_free(&o);
}

/* Values inside the bounds, the chunk floor and the fast-path clamp. */
static void
test_limits_values(void **state)
{
	static const char *const env[] = { "YR_TUNNEL_PROTOCOL_VERSION=1",
		"YR_TUNNEL_MAX_BODY_SIZE=1000",
		"YR_TUNNEL_MAX_WS_MESSAGE_SIZE= 4096 ",
		"YR_TUNNEL_STREAM_CHUNK_BYTES=100", "YR_TUNNEL_MAX_INFLIGHT=+3",
		"YR_TUNNEL_STREAM_WINDOW_FRAMES=7", NULL };
	static const char *const fast[] = { "YR_TUNNEL_MAX_BODY_SIZE=4000000",
		"YR_TUNNEL_FAST_PATH_BODY_BYTES=5000000",
		"YR_TUNNEL_STREAM_CHUNK_BYTES=2048", NULL };
	static const char *const huge[] = {
		"YR_TUNNEL_MAX_INFLIGHT=99999999999999999999999999999", NULL
	};
	struct tun_options o;

	(void)state;
	parse_ok(&o, env, BASE_FLAGS, NULL);
	assert_int_equal(o.protocol_version, 1);
	assert_true(o.max_body_size == 1000);
	assert_true(o.max_ws_message_size == 4096);
	assert_int_equal(o.stream_chunk, 1024); /* raised to the floor */
	assert_int_equal(o.max_inflight, 3);
	assert_int_equal(o.stream_window_frames, 7);
	/* The default 64 KiB fast path is clamped by the body limit. */
	assert_true(o.fast_path_body == 1000);
	tun_options_free(&o);

	parse_ok(&o, fast, BASE_FLAGS, NULL);
	assert_true(o.fast_path_body == 4000000);
	assert_int_equal(o.stream_chunk, 2048);
	tun_options_free(&o);

	parse_ok(&o, huge, BASE_FLAGS, NULL);
	assert_int_equal(o.max_inflight, 1024);
	tun_options_free(&o);
}

/*
 * The target pool: as many connections as requests in flight unless
 * --target-connections says otherwise; a bad count is refused.
 */
static void
test_target_connections(void **state)
{
	static const char *const inflight[] = { "YR_TUNNEL_MAX_INFLIGHT=64",
		NULL };
	static const char *const bad[] = { "0", "1025", "-1", "+5", "x", "",
		"10x", "99999" };
	char msg[128];
	struct tun_options o;
	size_t i;

	(void)state;
	parse_ok(&o, env_none, BASE_FLAGS, NULL);
	assert_int_equal(o.target_connections, 16);
	tun_options_free(&o);
	parse_ok(&o, inflight, BASE_FLAGS, NULL);
	assert_int_equal(o.target_connections, 64);
	tun_options_free(&o);
	parse_ok(&o, inflight, BASE_FLAGS, "--target-connections", "3", NULL);
	assert_int_equal(o.target_connections, 3);
	tun_options_free(&o);
	parse_ok(
	    &o, env_none, BASE_FLAGS, "--target-connections", "1024", NULL);
	assert_int_equal(o.target_connections, 1024);
	tun_options_free(&o);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		snprintf(msg, sizeof msg,
		    "invalid --target-connections '%s': use a count from 1 "
		    "to 1024",
		    bad[i]);
		parse_err(env_none, msg, BASE_FLAGS, "--target-connections",
		    bad[i], NULL);
	}
}

/* --target-http2: auto by default, off, and nothing else. */
static void
test_target_http2(void **state)
{
	struct tun_options o;

	(void)state;
	parse_ok(&o, env_none, BASE_FLAGS, NULL);
	assert_int_equal(o.target_http2, 1);
	tun_options_free(&o);
	parse_ok(&o, env_none, BASE_FLAGS, "--target-http2", "off", NULL);
	assert_int_equal(o.target_http2, 0);
	tun_options_free(&o);
	parse_ok(&o, env_none, BASE_FLAGS, "--target-http2", "auto", NULL);
	assert_int_equal(o.target_http2, 1);
	tun_options_free(&o);
	parse_err(env_none, "invalid --target-http2 'on' (use auto or off)",
	    BASE_FLAGS, "--target-http2", "on", NULL);
}

/* Scenario 26 and the other refusals of a bad YR_TUNNEL_* integer. */
static void
test_limits_invalid(void **state)
{
	static const struct {
		const char *var;
		const char *msg;
	} t[] = {
		{ "YR_TUNNEL_MAX_BODY_SIZE=not-an-integer",
		    "YR_TUNNEL_MAX_BODY_SIZE must be a positive integer (got "
		    "'not-an-integer')" },
		{ "YR_TUNNEL_MAX_BODY_SIZE=",
		    "YR_TUNNEL_MAX_BODY_SIZE must be a positive integer (got "
		    "'')" },
		{ "YR_TUNNEL_MAX_INFLIGHT=1.5",
		    "YR_TUNNEL_MAX_INFLIGHT must be a positive integer (got "
		    "'1.5')" },
		{ "YR_TUNNEL_MAX_INFLIGHT=0x10",
		    "YR_TUNNEL_MAX_INFLIGHT must be a positive integer (got "
		    "'0x10')" },
		{ "YR_TUNNEL_STREAM_CHUNK_BYTES=-",
		    "YR_TUNNEL_STREAM_CHUNK_BYTES must be a positive integer "
		    "(got '-')" },
		{ "YR_TUNNEL_MAX_INFLIGHT=0",
		    "YR_TUNNEL_MAX_INFLIGHT must be greater than zero (got "
		    "'0')" },
		{ "YR_TUNNEL_STREAM_WINDOW_FRAMES=-5",
		    "YR_TUNNEL_STREAM_WINDOW_FRAMES must be greater than zero "
		    "(got '-5')" },
		{ "YR_TUNNEL_PROTOCOL_VERSION=-0",
		    "YR_TUNNEL_PROTOCOL_VERSION must be greater than zero (got "
		    "'-0')" },
		{ "YR_TUNNEL_MAX_WS_MESSAGE_SIZE=big",
		    "YR_TUNNEL_MAX_WS_MESSAGE_SIZE must be a positive integer "
		    "(got 'big')" },
		{ "YR_TUNNEL_FAST_PATH_BODY_BYTES=0",
		    "YR_TUNNEL_FAST_PATH_BODY_BYTES must be greater than zero "
		    "(got '0')" },
	};
	const char *env[2];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		env[0] = t[i].var;
		env[1] = NULL;
		parse_err(env, t[i].msg, BASE_FLAGS, NULL);
	}
	env[0] = "YR_TUNNEL_MAX_BODY_SIZE=not-an-integer";
	parse_err_part(env, "positive integer", BASE_FLAGS, NULL);
}

/* Scenario 25 and the fallback of every unusable timeout to 600 s. */
static void
test_http_timeout(void **state)
{
	static const struct {
		const char *var;
		double want;
		unsigned int warnings;
	} t[] = {
		{ NULL, 600.0, 0 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=7200", 7200.0, 0 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=invalid", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=0.25", 0.25, 0 },
		{ "YR_TUNNEL_HTTP_TIMEOUT= 30 ", 30.0, 0 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=1e3", 1000.0, 0 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=0", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=-5", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=nan", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=inf", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=1e400", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=1e-12", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=0x10", 600.0, 1 },
		{ "YR_TUNNEL_HTTP_TIMEOUT=10s", 600.0, 1 },
	};
	struct tun_options o;
	const char *env[2];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		env[0] = t[i].var;
		env[1] = NULL;
		parse_ok(&o, env, BASE_FLAGS, NULL);
		if (o.http_timeout != t[i].want) {
			fail_msg("%s: got %g",
			    t[i].var == NULL ? "unset" : t[i].var,
			    o.http_timeout);
		}
		assert_int_equal(o.nwarnings, t[i].warnings);
		if (t[i].warnings != 0) {
			assert_non_null(
			    strstr(o.warnings[0], "YR_TUNNEL_HTTP_TIMEOUT"));
		}
		tun_options_free(&o);
	}
}

/* The token goes only over TLS unless --allow-plaintext-token. */
static void
test_token(void **state)
{
	static const char *const env_token[] = { "AKERNEL_TOKEN=env-secret",
		NULL };
	struct tun_options o;

	(void)state;
	parse_err(env_none,
	    "refusing to send the token over plain "
	    "ws://gw:8080: use a TLS gateway address (https:// or wss://), or "
	    "pass --allow-plaintext-token to send it unencrypted",
	    BASE_FLAGS, "--token", "secret", NULL);
	parse_err(env_token,
	    "refusing to send the token over plain "
	    "ws://gw:8080: use a TLS gateway address (https:// or wss://), or "
	    "pass --allow-plaintext-token to send it unencrypted",
	    BASE_FLAGS, NULL);

	parse_ok(&o, env_none, BASE_FLAGS, "--token", "secret",
	    "--allow-plaintext-token", NULL);
	assert_string_equal(o.token, "secret");
	assert_int_equal(o.allow_plaintext_token, 1);
	tun_options_free(&o);

	parse_ok(&o, env_token, "--gateway", "https://gw", "--sandbox", "s",
	    "--target", "http://t", NULL);
	assert_string_equal(o.token, "env-secret");
	tun_options_free(&o);

	parse_ok(&o, env_token, "--gateway", "wss://gw", "--sandbox", "s",
	    "--target", "http://t", "--token", "flag-secret", NULL);
	assert_string_equal(o.token, "flag-secret");
	tun_options_free(&o);

	/* An empty --token clears the variable's. */
	parse_ok(&o, env_token, BASE_FLAGS, "--token", "", NULL);
	assert_null(o.token);
	tun_options_free(&o);

	parse_err(env_none, "the token contains a control character",
	    "--gateway", "https://gw", "--sandbox", "s", "--target", "http://t",
	    "--token", "a\r\nX-Evil: 1", NULL);
}

/* YR_TUNNEL_TOKEN_QUERY_FALLBACK accepts 1, true and yes only. */
static void
test_token_query_fallback(void **state)
{
	static const struct {
		const char *var;
		int want;
	} t[] = {
		{ "YR_TUNNEL_TOKEN_QUERY_FALLBACK=1", 1 },
		{ "YR_TUNNEL_TOKEN_QUERY_FALLBACK= TRUE", 1 },
		{ "YR_TUNNEL_TOKEN_QUERY_FALLBACK=yes", 1 },
		{ "YR_TUNNEL_TOKEN_QUERY_FALLBACK=on", 0 },
		{ "YR_TUNNEL_TOKEN_QUERY_FALLBACK=0", 0 },
	};
	struct tun_options o;
	const char *env[2];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		env[0] = t[i].var;
		env[1] = NULL;
		parse_ok(&o, env, BASE_FLAGS, NULL);
		assert_int_equal(o.token_query_fallback, t[i].want);
		tun_options_free(&o);
	}
}

/* Scenario 32 and the TLS rules toward the gateway. */
static void
test_verify(void **state)
{
	static const struct {
		const char *var1;
		const char *var2;
		int want;
	} t[] = {
		{ NULL, NULL, 1 },
		{ "YR_TUNNEL_SSL_VERIFY=0", NULL, 0 },
		{ "YR_TUNNEL_SSL_VERIFY=false", NULL, 0 },
		{ "YR_TUNNEL_SSL_VERIFY= No ", NULL, 0 },
		{ "YR_TUNNEL_SSL_VERIFY=1", NULL, 1 },
		{ "YR_TUNNEL_SSL_VERIFY=off", NULL, 1 },
		{ "YR_TUNNEL_SSL_VERIFY=", NULL, 1 },
		{ "AKERNEL_VERIFY_TLS=false", NULL, 0 },
		{ "AKERNEL_VERIFY_TLS=0", NULL, 0 },
		{ "AKERNEL_VERIFY_TLS=OFF", NULL, 0 },
		{ "AKERNEL_VERIFY_TLS=no", NULL, 0 },
		{ "AKERNEL_VERIFY_TLS=true", NULL, 1 },
		{ "AKERNEL_VERIFY_TLS=on", NULL, 1 },
		{ "AKERNEL_VERIFY_TLS=", NULL, 1 },
		{ "AKERNEL_VERIFY_TLS=yes", "YR_TUNNEL_SSL_VERIFY=0", 1 },
		{ "AKERNEL_VERIFY_TLS=0", "YR_TUNNEL_SSL_VERIFY=1", 0 },
	};
	static const char *const off[] = { "AKERNEL_VERIFY_TLS=false", NULL };
	static const char *const yr_off[] = { "YR_TUNNEL_SSL_VERIFY=0", NULL };
	static const char *const bundle[] = {
		"YR_TUNNEL_CA_BUNDLE=/etc/bundle.pem",
		"SSL_CERT_FILE=/etc/ssl.pem", NULL
	};
	static const char *const sslfile[] = {
		"YR_TUNNEL_CA_BUNDLE=", "SSL_CERT_FILE=/etc/ssl.pem", NULL
	};
	struct tun_options o;
	const char *env[3];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		env[0] = t[i].var1;
		env[1] = t[i].var2;
		env[2] = NULL;
		parse_ok(&o, env, "--gateway", "wss://gw", "--sandbox", "s",
		    "--target", "http://t", NULL);
		if (o.verify_tls != t[i].want) {
			fail_msg("%s %s: verify %d", t[i].var1, t[i].var2,
			    o.verify_tls);
		}
		/* Turning verification off over TLS is logged loudly. */
		assert_int_equal(o.nwarnings, t[i].want ? 0 : 1);
		tun_options_free(&o);
	}

	{
		static const char *const bad[] = { "AKERNEL_VERIFY_TLS=maybe",
			NULL };

		parse_err(bad,
		    "AKERNEL_VERIFY_TLS must be 1, true, yes, on, "
		    "0, false, no or off (got 'maybe')",
		    BASE_FLAGS, NULL);
	}

	/* Flags over the environment. */
	parse_ok(&o, yr_off, "--gateway", "wss://gw", "--sandbox", "s",
	    "--target", "http://t", "--verify-tls", NULL);
	assert_int_equal(o.verify_tls, 1);
	tun_options_free(&o);
	parse_ok(&o, env_none, "--gateway", "wss://gw", "--sandbox", "s",
	    "--target", "http://t", "--no-verify-tls", NULL);
	assert_int_equal(o.verify_tls, 0);
	assert_int_equal(o.nwarnings, 1);
	assert_non_null(strstr(o.warnings[0], "explicitly disabled"));
	tun_options_free(&o);

	/* --ca-file sets the trust file and turns verification on. */
	parse_ok(&o, off, "--gateway", "wss://gw", "--sandbox", "s", "--target",
	    "http://t", "--ca-file", "/tmp/ca.pem", NULL);
	assert_int_equal(o.verify_tls, 1);
	assert_string_equal(o.ca_file, "/tmp/ca.pem");
	assert_string_equal(o.ca_file_from, "--ca-file");
	tun_options_free(&o);
	parse_err(env_none,
	    "--ca-file and --no-verify-tls contradict each "
	    "other: --ca-file turns verification on",
	    "--gateway", "wss://gw", "--sandbox", "s", "--target", "http://t",
	    "--no-verify-tls", "--ca-file", "/tmp/ca.pem", NULL);

	/* The trust file: --ca-file, YR_TUNNEL_CA_BUNDLE, SSL_CERT_FILE. */
	parse_ok(&o, bundle, "--gateway", "wss://gw", "--sandbox", "s",
	    "--target", "http://t", NULL);
	assert_string_equal(o.ca_file, "/etc/bundle.pem");
	assert_string_equal(o.ca_file_from, "YR_TUNNEL_CA_BUNDLE");
	assert_int_equal(o.verify_tls, 1);
	tun_options_free(&o);
	parse_ok(&o, sslfile, "--gateway", "wss://gw", "--sandbox", "s",
	    "--target", "http://t", NULL);
	assert_string_equal(o.ca_file, "/etc/ssl.pem");
	assert_string_equal(o.ca_file_from, "SSL_CERT_FILE");
	tun_options_free(&o);
	parse_ok(&o, bundle, "--gateway", "wss://gw", "--sandbox", "s",
	    "--target", "http://t", "--ca-file", "/x.pem", NULL);
	assert_string_equal(o.ca_file, "/x.pem");
	tun_options_free(&o);
}

/* TLS toward the target: flags and their conflicts. */
static void
test_target_tls(void **state)
{
	struct tun_options o;

	(void)state;
	parse_ok(&o, env_none, "--gateway", "gw", "--sandbox", "s", "--target",
	    "https://t", "--target-ca-file", "/ca.pem", "--target-cert",
	    "/c.pem", "--target-key", "/k.pem", NULL);
	assert_string_equal(o.target_ca_file, "/ca.pem");
	assert_string_equal(o.target_cert, "/c.pem");
	assert_string_equal(o.target_key, "/k.pem");
	assert_int_equal(o.target_insecure, 0);
	tun_options_free(&o);

	parse_ok(&o, env_none, "--gateway", "gw", "--sandbox", "s", "--target",
	    "https://t", "--target-insecure", NULL);
	assert_int_equal(o.target_insecure, 1);
	assert_int_equal(o.nwarnings, 1);
	assert_non_null(strstr(o.warnings[0], "DISABLED"));
	tun_options_free(&o);

	/* YR_TUNNEL_SSL_VERIFY is for the tunnel only (§9.5). */
	{
		static const char *const env[] = { "YR_TUNNEL_SSL_VERIFY=0",
			NULL };

		parse_ok(&o, env, "--gateway", "gw", "--sandbox", "s",
		    "--target", "https://t", NULL);
		assert_int_equal(o.target_insecure, 0);
		tun_options_free(&o);
	}

	parse_err(env_none,
	    "--target-ca-file and --target-insecure "
	    "contradict each other",
	    "--gateway", "gw", "--sandbox", "s", "--target", "https://t",
	    "--target-insecure", "--target-ca-file", "/ca.pem", NULL);
	parse_err(env_none,
	    "--target-cert and --target-key must be given "
	    "together",
	    "--gateway", "gw", "--sandbox", "s", "--target", "https://t",
	    "--target-cert", "/c.pem", NULL);
}

/* Flag syntax errors, --listen-port, logging flags, help and version. */
static void
test_flags(void **state)
{
	struct tun_options o;

	(void)state;
	parse_err(
	    env_none, "unknown option '--bogus'", BASE_FLAGS, "--bogus", NULL);
	parse_err(env_none, "unknown option '-x'", BASE_FLAGS, "-x", NULL);
	parse_err(env_none,
	    "ambiguous option '--ver' (could be --verify-tls, "
	    "--verbose, --version)",
	    "--ver", NULL);
	parse_err(
	    env_none, "option '--gateway' needs a value", "--gateway", NULL);
	parse_err(
	    env_none, "option '--verbose' takes no value", "--verbose=2", NULL);
	parse_err(
	    env_none, "unexpected argument 'extra'", BASE_FLAGS, "extra", NULL);

	parse_err(env_none,
	    "invalid --listen-port '0': use a port number "
	    "from 1 to 65535",
	    BASE_FLAGS, "--listen-port", "0", NULL);
	parse_err(env_none,
	    "invalid --listen-port '65536': use a port number "
	    "from 1 to 65535",
	    BASE_FLAGS, "--listen-port", "65536", NULL);
	parse_err(env_none,
	    "invalid --listen-port 'abc': use a port number "
	    "from 1 to 65535",
	    BASE_FLAGS, "--listen-port", "abc", NULL);
	parse_err(env_none,
	    "invalid --listen-port '-1': use a port number "
	    "from 1 to 65535",
	    BASE_FLAGS, "--listen-port=-1", NULL);
	parse_ok(&o, env_none, BASE_FLAGS, "--listen-port", "65535", NULL);
	assert_int_equal(o.listen_port, 65535);
	tun_options_free(&o);
	parse_ok(&o, env_none, BASE_FLAGS, "--listen-port=2", NULL);
	assert_int_equal(o.listen_port, 2);
	tun_options_free(&o);

	parse_err(env_none,
	    "invalid --log-level 'loud' (use debug, info, warn "
	    "or error)",
	    BASE_FLAGS, "--log-level", "loud", NULL);
	parse_err(env_none, "invalid --log-format 'xml' (use text or json)",
	    BASE_FLAGS, "--log-format", "xml", NULL);
	parse_ok(&o, env_none, BASE_FLAGS, "--log-level", "warn",
	    "--log-format", "json", NULL);
	assert_int_equal(o.log_level, LOG_LVL_WARN);
	assert_int_equal(o.log_format, LOG_FMT_JSON);
	tun_options_free(&o);

	parse_ok(&o, env_none, BASE_FLAGS, "-v", NULL);
	assert_int_equal(o.verbose, 1);
	assert_int_equal(o.log_level, LOG_LVL_INFO);
	tun_options_free(&o);
	parse_ok(&o, env_none, BASE_FLAGS, "-vv", "--verbose", NULL);
	assert_int_equal(o.verbose, 3);
	assert_int_equal(o.log_level, LOG_LVL_DEBUG);
	tun_options_free(&o);
	parse_ok(&o, env_none, BASE_FLAGS, "-vv", "--log-level", "error", NULL);
	assert_int_equal(o.log_level, LOG_LVL_ERROR);
	tun_options_free(&o);

	/* --help and --version need nothing else and skip validation. */
	parse_ok(&o, env_none, "--help", NULL);
	assert_int_equal(o.help, 1);
	tun_options_free(&o);
	parse_ok(&o, env_none, "-h", "--gateway", "ftp://x", NULL);
	assert_int_equal(o.help, 1);
	tun_options_free(&o);
	parse_ok(&o, env_none, "--version", NULL);
	assert_int_equal(o.version, 1);
	tun_options_free(&o);
	parse_ok(&o, env_none, "-V", NULL);
	assert_int_equal(o.version, 1);
	tun_options_free(&o);
}

/* Parsing twice in one process gives the same result (getopt state). */
static void
test_reparse(void **state)
{
	struct tun_options o;
	int i;

	(void)state;
	for (i = 0; i < 3; i++) {
		parse_ok(
		    &o, env_none, BASE_FLAGS, "--listen-port", "9001", NULL);
		assert_int_equal(o.listen_port, 9001);
		tun_options_free(&o);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_safeid),
		cmocka_unit_test(test_target_connections),
		cmocka_unit_test(test_target_http2),
		cmocka_unit_test(test_gateway_forms),
		cmocka_unit_test(test_gateway_rejects),
		cmocka_unit_test(test_target),
		cmocka_unit_test(test_tunnel_url),
		cmocka_unit_test(test_env_fallbacks),
		cmocka_unit_test(test_missing),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_limits_capped),
		cmocka_unit_test(test_limits_values),
		cmocka_unit_test(test_limits_invalid),
		cmocka_unit_test(test_http_timeout),
		cmocka_unit_test(test_token),
		cmocka_unit_test(test_token_query_fallback),
		cmocka_unit_test(test_verify),
		cmocka_unit_test(test_target_tls),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_reparse),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
