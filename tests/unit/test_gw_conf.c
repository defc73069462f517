/*
 * The configuration loader: good files load with the right values, bad
 * ones are refused with the exact file:line:column message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc.h"
#include "config.h"
#include "gw.h"

/* Load text and expect it to fail with exactly want. */
static void
expect_error(const char *text, const char *want)
{
	struct gw_config *cf;
	char *cause = NULL;

	cf = conf_load_string("t.yaml", text, &cause);
	if (cf != NULL)
		fail_msg("loaded, expected: %s", want);
	assert_non_null(cause);
	assert_string_equal(cause, want);
	free(cause);
}

/* Load text that must be valid. */
static struct gw_config *
expect_ok(const char *text)
{
	struct gw_config *cf;
	char *cause = NULL;

	cf = conf_load_string("t.yaml", text, &cause);
	if (cf == NULL)
		fail_msg("refused: %s", cause);
	return (cf);
}

static void
test_builtin(void **state)
{
	struct gw_config *cf;

	(void)state;
	cf = expect_ok(conf_builtin);
	assert_int_equal(cf->cf_nlisten, 1);
	assert_string_equal(cf->cf_listen[0].l_address, "127.0.0.1:8080");
	assert_string_equal(cf->cf_admin.l_address, "127.0.0.1:9090");
	assert_int_equal(cf->cf_ndomains, 1);
	assert_string_equal(cf->cf_domains[0], "localhost");
	assert_int_equal(cf->cf_nsandboxes, 1);
	assert_string_equal(cf->cf_sandboxes[0]->sb_id, "local");
	assert_string_equal(cf->cf_sandboxes[0]->sb_address, "127.0.0.1");
	assert_int_equal(cf->cf_sandboxes[0]->sb_ports[0].pr_lo, 1);
	assert_int_equal(cf->cf_sandboxes[0]->sb_ports[0].pr_hi, 65535);
	assert_int_equal(cf->cf_sandboxes[0]->sb_tunnel_ports[0], 8766);
	assert_int_equal(cf->cf_header_timeout, 10000);
	assert_int_equal(cf->cf_connect_timeout, 5000);
	assert_int_equal(cf->cf_keepalive_timeout, 75000);
	assert_int_equal(cf->cf_upstream_idle, 5000);
	assert_int_equal(cf->cf_ws_idle_timeout, 3600000);
	assert_int_equal(cf->cf_ws_fin_timeout, 30000);
	assert_int_equal(cf->cf_drain_timeout, 30000);
	assert_string_equal(cf->cf_auth_cookie, "akgw_token");
	assert_null(cf->cf_auth_secrets);
	assert_int_equal(cf->cf_nauth_secrets, 0);
	assert_null(conf_signing_key(cf));
	assert_false(cf->cf_path_form_cookies);
	conf_free(cf);
}

static void
test_full(void **state)
{
	struct gw_config *cf;

	(void)state;
	cf = expect_ok("log:\n"
		       "  level: debug\n"
		       "  format: json\n"
		       "  file: /tmp/x.log\n"
		       "listen:\n"
		       "  - address: 0.0.0.0:80\n"
		       "  - address: \"[::1]:8081\"\n"
		       "admin:\n"
		       "  address: 127.0.0.1:9999\n"
		       "  token: s3cret\n"
		       "domains: [gw.example, localhost]\n"
		       "timeouts:\n"
		       "  request_header: 2s\n"
		       "  connect: 500ms\n"
		       "  keepalive: 1m\n"
		       "  upstream_idle: 0\n"
		       "  upstream_response: 1h\n"
		       "  drain: 2m\n"
		       "limits:\n"
		       "  max_connections: 100\n"
		       "  max_header_size: 16KiB\n"
		       "  max_headers: 50\n"
		       "  max_body_size: 1MiB\n"
		       "  max_connections_per_sandbox: 7\n"
		       "auth:\n"
		       "  secret: 0123456789abcdef0123\n"
		       "  cookie: tok\n"
		       "  require_tls_for_credentials: yes\n"
		       "  path_form_cookies: true\n"
		       "sandboxes:\n"
		       "  - id: sandbox@v1/foo.bar_baz\n"
		       "    address: \"::1\"\n"
		       "    ports:\n"
		       "      - port: 3000-3999\n"
		       "      - port: 8000\n"
		       "        access: public\n"
		       "        host_rewrite: \"localhost:${port}\"\n"
		       "      - port: 9000\n"
		       "        access: private\n"
		       "    tunnel:\n"
		       "      listen_port: [8766, 9000]\n"
		       "      mode: forward\n"
		       "  - id: ns\n"
		       "    netns: /run/netns/ns1\n"
		       "    max_connections: 3\n");
	assert_int_equal(cf->cf_log_level, LOG_LVL_DEBUG);
	assert_int_equal(cf->cf_log_format, LOG_FMT_JSON);
	assert_string_equal(cf->cf_log_file, "/tmp/x.log");
	assert_int_equal(cf->cf_nlisten, 2);
	assert_string_equal(cf->cf_admin_token, "s3cret");
	assert_string_equal(cf->cf_domains[0], "gw.example");
	assert_int_equal(cf->cf_header_timeout, 2000);
	assert_int_equal(cf->cf_connect_timeout, 500);
	assert_int_equal(cf->cf_keepalive_timeout, 60000);
	assert_int_equal(cf->cf_upstream_idle, 0);
	assert_int_equal(cf->cf_response_timeout, 3600000);
	assert_int_equal(cf->cf_drain_timeout, 120000);
	assert_int_equal(cf->cf_max_connections, 100);
	assert_int_equal(cf->cf_max_header_size, 16384);
	assert_int_equal(cf->cf_max_headers, 50);
	assert_int_equal(cf->cf_max_body_size, 1048576);
	assert_string_equal(
	    cf->cf_sandboxes[0]->sb_safe_id, "sandbox-at-v1-foo-bar-baz");
	assert_int_equal(cf->cf_sandboxes[0]->sb_nports, 3);
	assert_true(cf->cf_sandboxes[0]->sb_ports[2].pr_private);
	assert_false(cf->cf_sandboxes[0]->sb_ports[1].pr_private);
	assert_int_equal(cf->cf_max_connections_per_sandbox, 7);
	assert_int_equal(cf->cf_nauth_secrets, 1);
	assert_string_equal(
	    cf->cf_auth_secrets[0].tk_key, "0123456789abcdef0123");
	assert_int_equal(cf->cf_auth_secrets[0].tk_len, 20);
	assert_string_equal(cf->cf_auth_cookie, "tok");
	assert_true(cf->cf_require_tls_creds);
	assert_true(cf->cf_path_form_cookies);
	assert_int_equal(cf->cf_nsandboxes, 2);
	assert_string_equal(cf->cf_sandboxes[1]->sb_netns, "/run/netns/ns1");
	assert_null(cf->cf_sandboxes[1]->sb_address);
	assert_int_equal(cf->cf_sandboxes[1]->sb_max_connections, 3);
	assert_int_equal(cf->cf_sandboxes[0]->sb_ports[0].pr_lo, 3000);
	assert_int_equal(cf->cf_sandboxes[0]->sb_ports[0].pr_hi, 3999);
	assert_string_equal(cf->cf_sandboxes[0]->sb_ports[1].pr_host_rewrite,
	    "localhost:${port}");
	assert_int_equal(cf->cf_sandboxes[0]->sb_ntunnel_ports, 2);
	assert_int_equal(cf->cf_sandboxes[0]->sb_tunnel_ports[1], 9000);
	assert_int_equal(
	    cf->cf_sandboxes[0]->sb_tunnel_mode, GW_TUNNEL_FORWARD);
	conf_free(cf);
}

static void
test_errors(void **state)
{
	(void)state;
	expect_error("listen:\n  - address: 127.0.0.1:80\nbogus: 1\n",
	    "t.yaml:3:1: unknown key 'bogus' in the configuration (expected "
	    "one of: log, listen, admin, domains, workers, timeouts, limits, auth, "
	    "netns_dir, sandboxes)");
	expect_error("listen:\n  - address: 127.0.0.1:80\n    proto: x\n",
	    "t.yaml:3:5: unknown key 'proto' in a listener (expected one of: "
	    "address, tls, http2)");
	expect_error("listen:\n  - address: 127.0.0.1:80\n    tls: x\n",
	    "t.yaml:3:10: listen.tls must be a mapping, not a scalar");
	expect_error("listen:\n  - address: 127.0.0.1:80\n"
		     "    tls: {cert: /nonexistent.crt}\n",
	    "t.yaml:3:10: listen.tls needs cert and key");
	expect_error(
	    "listen:\n  - address: 127.0.0.1:80\n"
	    "    tls: {cert: /nonexistent.crt, key: /nonexistent.key}\n",
	    "t.yaml:3:17: cannot load certificate /nonexistent.crt: No such "
	    "file or directory");
	expect_error("log: {level: loud}\nlisten: [{address: 127.0.0.1:1}]\n",
	    "t.yaml:1:14: log.level must be debug, info, warn or error, not "
	    "'loud'");
	expect_error("listen:\n  - address: localhost:80\n",
	    "t.yaml:2:14: listen.address: 'localhost' is not a literal IPv4 "
	    "or IPv6 address");
	expect_error("listen:\n  - address: 127.0.0.1:99999\n",
	    "t.yaml:2:14: listen.address: '127.0.0.1:99999' has no valid port "
	    "(1-65535)");
	expect_error("listen:\n  - address: 127.0.0.1:80\n"
		     "  - address: 127.0.0.1:80\n",
	    "t.yaml:3:14: listener 127.0.0.1:80 is declared twice");
	expect_error("domains: [localhost]\n",
	    "t.yaml:1:1: the configuration needs a listen section");
	expect_error("listen: {address: 127.0.0.1:80}\n",
	    "t.yaml:1:9: listen must be a list, not a mapping");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "timeouts:\n  connect: 5 seconds\n",
	    "t.yaml:3:12: timeouts.connect must be a duration such as 500ms, "
	    "10s, 5m or 1h, not '5 seconds'");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "timeouts:\n  keepalive: 2d\n",
	    "t.yaml:3:14: timeouts.keepalive must be between 100ms and "
	    "86400s, not 2d");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "timeouts:\n  drain: 2d\n",
	    "t.yaml:3:10: timeouts.drain must be between 0s and 86400s, "
	    "not 2d");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "limits:\n  max_headers: 0\n",
	    "t.yaml:3:16: limits.max_headers must be between 1 and 1000, "
	    "not 0");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "limits:\n  max_connections: lots\n",
	    "t.yaml:3:20: limits.max_connections must be an integer, not "
	    "'lots'");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "limits:\n  max_header_size: 10 MB\n",
	    "t.yaml:3:20: limits.max_header_size must be a size such as "
	    "4096, 16KiB or 1MiB, not '10 MB'");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "domains: [Example.COM]\n",
	    "t.yaml:2:11: 'Example.COM' is not a valid lowercase domain name");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "sandboxes:\n  - address: 127.0.0.1\n",
	    "t.yaml:3:5: a sandbox needs an id");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "sandboxes:\n  - id: a\n    address: sandbox.example\n",
	    "t.yaml:4:14: address must be a literal IPv4 or IPv6 address, "
	    "not 'sandbox.example'");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "sandboxes:\n  - id: a.b\n    address: 127.0.0.1\n"
		     "  - id: a_b\n    address: 127.0.0.1\n",
	    "t.yaml:5:9: sandbox 'a_b' has the same id or safe id as sandbox "
	    "'a.b'");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "sandboxes:\n  - id: a\n    address: 127.0.0.1\n"
		     "    ports:\n      - port: 9000-80\n",
	    "t.yaml:6:15: port must be a port (1-65535) or a range such as "
	    "3000-3999, not '9000-80'");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "sandboxes:\n  - id: a\n    address: 127.0.0.1\n"
		     "    ports:\n      - port: 80\n        access: secret\n",
	    "t.yaml:7:17: access must be public or private, not 'secret'");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "auth:\n  cookie: __Host-tok\n",
	    "t.yaml:3:11: auth.cookie '__Host-tok' must not carry a __Host- or "
	    "__Secure- prefix: the gateway adds the right one over HTTPS");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "auth:\n  path_form_cookies: sometimes\n",
	    "t.yaml:3:22: auth.path_form_cookies must be true or false, not "
	    "'sometimes'");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "sandboxes:\n  - id: a\n    address: 127.0.0.1\n"
		     "    tunnel:\n      listen_port: 1\n",
	    "t.yaml:6:20: tunnel.listen_port must be between 2 and 65535, "
	    "not 1");
	expect_error("listen: [{address: 127.0.0.1:80}]\n"
		     "listen: [{address: 127.0.0.1:81}]\n",
	    "t.yaml:2:1: duplicate key 'listen' (first at line 1)");
	expect_error("listen: [{address: 127.0.0.1:80}\n",
	    "t.yaml:2:1: did not find expected ',' or ']' while parsing a "
	    "flow sequence");
	expect_error("a: &x 1\nb: *x\n",
	    "t.yaml:1:4: anchors are not "
	    "supported");
	expect_error("listen: [{address: 127.0.0.1:80}]\n---\nx: 1\n",
	    "t.yaml:2:1: only one YAML document is allowed");
}

static void
test_missing_file(void **state)
{
	char *cause = NULL;

	(void)state;
	assert_null(conf_load("/nonexistent/gw.yaml", &cause));
	assert_string_equal(
	    cause, "/nonexistent/gw.yaml: No such file or directory");
	free(cause);
}

static void
test_workers(void **state)
{
	struct gw_config *cf;

	(void)state;
	cf = expect_ok("listen:\n  - address: 127.0.0.1:80\n");
	assert_int_equal(cf->cf_workers, 0); /* auto */
	conf_free(cf);
	cf = expect_ok("workers: auto\nlisten:\n  - address: 127.0.0.1:80\n");
	assert_int_equal(cf->cf_workers, 0);
	conf_free(cf);
	cf = expect_ok("workers: 3\nlisten:\n  - address: 127.0.0.1:80\n");
	assert_int_equal(cf->cf_workers, 3);
	conf_free(cf);
	expect_error("listen:\n  - address: 127.0.0.1:80\nworkers: 0\n",
	    "t.yaml:3:10: workers must be between 1 and 256, not 0");
	expect_error("workers: 257\nlisten:\n  - address: 127.0.0.1:80\n",
	    "t.yaml:1:10: workers must be between 1 and 256, not 257");
	expect_error("workers: many\nlisten:\n  - address: 127.0.0.1:80\n",
	    "t.yaml:1:10: workers must be auto or a count, not 'many'");
	expect_error("workers: -2\nlisten:\n  - address: 127.0.0.1:80\n",
	    "t.yaml:1:10: workers must be auto or a count, not '-2'");
}

/* A configuration with netns_dir dir and one sandbox at netns path. */
static char *
netns_conf(const char *dir, const char *path)
{
	char *text;

	if (asprintf(&text,
		"listen: [{address: 127.0.0.1:80}]\n"
		"%s%s%s"
		"sandboxes:\n"
		"  - id: s\n"
		"    netns: %s\n",
		dir != NULL ? "netns_dir: " : "", dir != NULL ? dir : "",
		dir != NULL ? "\n" : "", path) == -1)
		fail_msg("asprintf");
	return (text);
}

/* Expect a sandbox at netns path (under netns_dir dir) refused with want. */
static void
expect_netns_error(const char *dir, const char *path, const char *want)
{
	char *text = netns_conf(dir, path);

	expect_error(text, want);
	free(text);
}

/*
 * netns paths: only a plain name in netns_dir, never "..", a symbolic
 * link or a file that is not a network namespace; a name with nothing
 * there yet is accepted (the namespace may come later).
 */
static void
test_netns(void **state)
{
	char dir[] = "/tmp/akgw-netns.XXXXXX", path[64], *text;
	struct gw_config *cf;
	FILE *f;

	(void)state;
	cf = expect_ok("listen: [{address: 127.0.0.1:80}]\n");
	assert_string_equal(cf->cf_netns_dir, "/run/netns");
	conf_free(cf);
	text = netns_conf(NULL, "/run/netns/akgw-test-not-there");
	cf = expect_ok(text);
	free(text);
	assert_string_equal(
	    cf->cf_sandboxes[0]->sb_netns, "/run/netns/akgw-test-not-there");
	conf_free(cf);

	expect_netns_error(NULL, "/run/netns/../../proc/1/ns/net",
	    "t.yaml:4:12: netns must name a namespace directly in /run/netns "
	    "(netns_dir), as /run/netns/NAME with no '/', '.' or '..' in NAME, "
	    "not '/run/netns/../../proc/1/ns/net'");
	expect_netns_error(NULL, "/run/netns/..",
	    "t.yaml:4:12: netns must name a namespace directly in /run/netns "
	    "(netns_dir), as /run/netns/NAME with no '/', '.' or '..' in NAME, "
	    "not '/run/netns/..'");
	expect_netns_error(NULL, "/run/netns/",
	    "t.yaml:4:12: netns must name a namespace directly in /run/netns "
	    "(netns_dir), as /run/netns/NAME with no '/', '.' or '..' in NAME, "
	    "not '/run/netns/'");
	expect_netns_error(NULL, "/proc/1/ns/net",
	    "t.yaml:4:12: netns must be a path in /run/netns (netns_dir), such "
	    "as /run/netns/NAME, not '/proc/1/ns/net'");
	expect_netns_error(NULL, "/run/netnsx/a",
	    "t.yaml:4:12: netns must be a path in /run/netns (netns_dir), such "
	    "as /run/netns/NAME, not '/run/netnsx/a'");
	expect_netns_error(NULL, "run/netns/a",
	    "t.yaml:4:12: netns must be a path in /run/netns (netns_dir), such "
	    "as /run/netns/NAME, not 'run/netns/a'");

	/* A link planted in netns_dir, and a plain file there. */
	if (mkdtemp(dir) == NULL)
		fail_msg("mkdtemp");
	snprintf(path, sizeof path, "%s/link", dir);
	if (symlink("/proc/1/ns/net", path) != 0)
		fail_msg("symlink");
	text = NULL;
	if (asprintf(&text,
		"t.yaml:5:12: network namespace %s is a symbolic link, which "
		"is not followed",
		path) == -1)
		fail_msg("asprintf");
	expect_netns_error(dir, path, text);
	free(text);
	unlink(path);
	snprintf(path, sizeof path, "%s/file", dir);
	if ((f = fopen(path, "w")) == NULL)
		fail_msg("fopen");
	fclose(f);
	if (asprintf(&text, "t.yaml:5:12: %s is not a network namespace file",
		path) == -1)
		fail_msg("asprintf");
	expect_netns_error(dir, path, text);
	free(text);
	unlink(path);
	rmdir(dir);

	/* netns_dir itself must be a clean absolute path. */
	expect_netns_error("/run/../proc", "/proc/1",
	    "t.yaml:2:12: netns_dir must be an absolute path without '.', "
	    "'..' or '//', such as /run/netns, not '/run/../proc'");
	expect_netns_error("run/netns", "run/netns/a",
	    "t.yaml:2:12: netns_dir must be an absolute path without '.', "
	    "'..' or '//', such as /run/netns, not 'run/netns'");
	text = netns_conf("/var/run/netns/", "/var/run/netns/a");
	cf = expect_ok(text);
	free(text);
	assert_string_equal(cf->cf_netns_dir, "/var/run/netns");
	conf_free(cf);
}

static void
test_units(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(cfg_parse_duration("10", &v), 0);
	assert_int_equal(v, 10000);
	assert_int_equal(cfg_parse_duration("250ms", &v), 0);
	assert_int_equal(v, 250);
	assert_int_equal(cfg_parse_duration("2h", &v), 0);
	assert_int_equal(v, 7200000);
	assert_int_equal(cfg_parse_duration("-1s", &v), -1);
	assert_int_equal(cfg_parse_duration("1.5s", &v), -1);
	assert_int_equal(cfg_parse_duration("99999999999999999999d", &v), -1);
	assert_int_equal(cfg_parse_size("64k", &v), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(cfg_parse_size("2GiB", &v), 0);
	assert_int_equal(v, 2147483648ULL);
	assert_int_equal(cfg_parse_size("1TB", &v), -1);
	assert_int_equal(cfg_parse_size("", &v), -1);
}

/* ports[].protocol and limits.h2_upstream_streams. */
static void
test_port_protocol(void **state)
{
	struct gw_config *cf;

	(void)state;
	cf = expect_ok("listen: [{address: 127.0.0.1:1}]\n"
		       "limits: {h2_upstream_streams: 7}\n"
		       "sandboxes:\n"
		       "  - id: a\n"
		       "    address: 127.0.0.1\n"
		       "    ports:\n"
		       "      - {port: 1000}\n"
		       "      - {port: 1001, protocol: h2c}\n"
		       "      - {port: 1002-1009, protocol: auto}\n"
		       "      - {port: 1010, protocol: http1}\n");
	assert_int_equal(cf->cf_h2_upstream_streams, 7);
	assert_int_equal(cf->cf_sandboxes[0]->sb_ports[0].pr_protocol,
	    GW_PROTO_HTTP1);
	assert_int_equal(cf->cf_sandboxes[0]->sb_ports[1].pr_protocol,
	    GW_PROTO_H2C);
	assert_int_equal(cf->cf_sandboxes[0]->sb_ports[2].pr_protocol,
	    GW_PROTO_AUTO);
	assert_int_equal(cf->cf_sandboxes[0]->sb_ports[3].pr_protocol,
	    GW_PROTO_HTTP1);
	conf_free(cf);
	cf = expect_ok("listen: [{address: 127.0.0.1:1}]\n");
	assert_int_equal(cf->cf_h2_upstream_streams, 100);
	conf_free(cf);
	expect_error("listen: [{address: 127.0.0.1:1}]\n"
		     "sandboxes:\n"
		     "  - id: a\n"
		     "    address: 127.0.0.1\n"
		     "    ports:\n"
		     "      - {port: 1000, protocol: h2}\n",
	    "t.yaml:6:32: protocol must be http1, h2c or auto, not 'h2'");
	expect_error("listen: [{address: 127.0.0.1:1}]\n"
		     "limits: {h2_upstream_streams: 0}\n",
	    "t.yaml:2:31: limits.h2_upstream_streams must be between 1 and "
	    "10000, not 0");
}

#define SECRET_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SECRET_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define SECRETS_HEAD "listen: [{address: 127.0.0.1:1}]\n"

/*
 * auth.secrets: a list whose first entry signs and every entry verifies;
 * auth.secret is its one-element form.  Both keys, an empty list, a short
 * or repeated entry and too many entries are refused at their place.
 */
static void
test_auth_secrets(void **state)
{
	struct gw_config *cf;
	char *text, *p;
	size_t i;

	(void)state;
	cf = expect_ok(
	    SECRETS_HEAD "auth:\n"
			 "  secrets:\n"
			 "    - " SECRET_B "\n"
			 "    - \"" SECRET_A "\"\n"
			 "sandboxes:\n"
			 "  - id: a\n"
			 "    address: 127.0.0.1\n"
			 "    ports: [{port: 80, access: private}]\n");
	assert_int_equal(cf->cf_nauth_secrets, 2);
	assert_string_equal(cf->cf_auth_secrets[0].tk_key, SECRET_B);
	assert_int_equal(cf->cf_auth_secrets[0].tk_len, 32);
	assert_string_equal(cf->cf_auth_secrets[1].tk_key, SECRET_A);
	assert_ptr_equal(conf_signing_key(cf), &cf->cf_auth_secrets[0]);
	assert_true(cf->cf_sandboxes[0]->sb_ports[0].pr_private);
	conf_free(cf);

	/* The one-element form, both ways. */
	cf = expect_ok(SECRETS_HEAD "auth: {secret: " SECRET_A "}\n");
	assert_int_equal(cf->cf_nauth_secrets, 1);
	assert_string_equal(conf_signing_key(cf)->tk_key, SECRET_A);
	conf_free(cf);
	cf = expect_ok(SECRETS_HEAD "auth: {secrets: [" SECRET_A "]}\n");
	assert_int_equal(cf->cf_nauth_secrets, 1);
	assert_string_equal(conf_signing_key(cf)->tk_key, SECRET_A);
	conf_free(cf);

	/* Exactly GW_AUTH_SECRETS_MAX is fine. */
	text = xstrdup(SECRETS_HEAD "auth:\n  secrets:\n");
	for (i = 0; i < GW_AUTH_SECRETS_MAX; i++) {
		xasprintf(&p, "%s    - %s%zu\n", text, SECRET_A, i);
		free(text);
		text = p;
	}
	cf = expect_ok(text);
	assert_int_equal(cf->cf_nauth_secrets, GW_AUTH_SECRETS_MAX);
	assert_string_equal(cf->cf_auth_secrets[7].tk_key, SECRET_A "7");
	conf_free(cf);
	/* One more is refused at the first entry over the limit. */
	xasprintf(&p, "%s    - %s\n", text, SECRET_B);
	free(text);
	expect_error(p,
	    "t.yaml:12:7: auth.secrets has 9 entries; at most 8 are allowed "
	    "(each one is tried on every token)");
	free(p);

	/* Both keys: refused at the later one, whichever order. */
	expect_error(SECRETS_HEAD "auth:\n"
				  "  secret: " SECRET_A "\n"
				  "  secrets: [" SECRET_B "]\n",
	    "t.yaml:4:3: auth.secret and auth.secrets are both set; keep one "
	    "(auth.secret: X is auth.secrets: [X])");
	expect_error(SECRETS_HEAD "auth:\n"
				  "  cookie: c\n"
				  "  secrets: [" SECRET_B "]\n"
				  "  path_form_cookies: false\n"
				  "  secret: " SECRET_A "\n",
	    "t.yaml:6:3: auth.secret and auth.secrets are both set; keep one "
	    "(auth.secret: X is auth.secrets: [X])");

	/* Empty, not a list, or an entry that is no secret. */
	expect_error(SECRETS_HEAD "auth:\n  secrets: []\n",
	    "t.yaml:3:12: auth.secrets is empty; list at least one secret "
	    "(make one with: openssl rand -hex 32)");
	expect_error(SECRETS_HEAD "auth:\n  secrets: " SECRET_A "\n",
	    "t.yaml:3:12: auth.secrets must be a list, not a scalar");
	expect_error(SECRETS_HEAD "auth:\n  secrets:\n",
	    "t.yaml:3:11: auth.secrets must be a list, not a scalar");
	expect_error(SECRETS_HEAD "auth:\n"
				  "  secrets:\n"
				  "    - " SECRET_B "\n"
				  "    - 0123456789abcde\n"
				  "    - " SECRET_A "\n",
	    "t.yaml:5:7: auth.secrets entry 2 must be at least 16 bytes; make "
	    "one with: openssl rand -hex 32");
	expect_error(SECRETS_HEAD "auth: {secrets: [" SECRET_A ", \"\"]}\n",
	    "t.yaml:2:52: auth.secrets entry 2 must be at least 16 bytes; "
	    "make one with: openssl rand -hex 32");
	expect_error(SECRETS_HEAD "auth:\n"
				  "  secrets:\n"
				  "    - " SECRET_A "\n"
				  "    - [" SECRET_B "]\n",
	    "t.yaml:5:7: auth.secrets entry 2 must be a single value, not a "
	    "list");
	expect_error(SECRETS_HEAD "auth:\n"
				  "  secrets:\n"
				  "    - " SECRET_B "\n"
				  "    - " SECRET_A "\n"
				  "    - " SECRET_B "\n",
	    "t.yaml:6:7: auth.secrets entry 3 repeats entry 1");
	/* The single form keeps its own message. */
	expect_error(SECRETS_HEAD "auth:\n  secret: short\n",
	    "t.yaml:3:11: auth.secret must be at least 16 bytes; make one "
	    "with: openssl rand -hex 32");

	/* A private port needs one form or the other. */
	expect_error(SECRETS_HEAD "sandboxes:\n"
				  "  - id: a\n"
				  "    address: 127.0.0.1\n"
				  "    ports: [{port: 80, access: private}]\n",
	    "t.yaml:5:32: access: private needs auth.secret (or auth.secrets) "
	    "to check tokens with");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_builtin),
		cmocka_unit_test(test_full),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_workers),
		cmocka_unit_test(test_netns),
		cmocka_unit_test(test_units),
		cmocka_unit_test(test_port_protocol),
		cmocka_unit_test(test_auth_secrets),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
