/*
 * Routing: the host-form parser, sandbox lookup by raw and safe id, the
 * published-port rules, and the safe-id rule.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw.h"
#include "safeid.h"

static char d_local[] = "localhost", d_example[] = "gw.example.com";
static char *domains[] = { d_local, d_example };

/* Parse host and expect ROUTE_OK with port and id. */
static void
expect_host(const char *host, int want_port, const char *want_id)
{
	char *id = NULL;
	int port = 0;

	assert_int_equal(
	    route_parse_host(host, strlen(host), domains, 2, &port, &id),
	    ROUTE_OK);
	assert_int_equal(port, want_port);
	assert_string_equal(id, want_id);
	free(id);
}

/* Parse host and expect result r. */
static void
expect_result(const char *host, enum route_result r)
{
	char *id = NULL;
	int port = 0;

	assert_int_equal(
	    route_parse_host(host, strlen(host), domains, 2, &port, &id), r);
	assert_null(id);
}

static void
test_host_form(void **state)
{
	(void)state;
	expect_host("8000-local.localhost", 8000, "local");
	expect_host("8000-local.localhost:8080", 8000, "local");
	expect_host("8000-local.localhost.", 8000, "local");
	expect_host("1-a.localhost", 1, "a");
	expect_host("65535-sandbox-at-v1-foo.gw.example.com", 65535,
	    "sandbox-at-v1-foo");
	expect_host("3000-SBX.GW.Example.Com:443", 3000, "SBX");
	expect_host("80-a-b-c.localhost", 80, "a-b-c");
}

static void
test_host_none(void **state)
{
	(void)state;
	expect_result("localhost", ROUTE_NONE);
	expect_result("localhost:8080", ROUTE_NONE);
	expect_result("127.0.0.1:8080", ROUTE_NONE);
	expect_result("[::1]:8080", ROUTE_NONE);
	expect_result("example.org", ROUTE_NONE);
	expect_result("8000-x.notlocalhost", ROUTE_NONE);
	expect_result("8000-x.example.com", ROUTE_NONE);
	expect_result("", ROUTE_NONE);
}

static void
test_host_bad(void **state)
{
	(void)state;
	expect_result("www.localhost", ROUTE_BAD);
	expect_result("8000.localhost", ROUTE_BAD);
	expect_result("8000-.localhost", ROUTE_BAD);
	expect_result("-x.localhost", ROUTE_BAD);
	expect_result("0-x.localhost", ROUTE_BAD);
	expect_result("08000-x.localhost", ROUTE_BAD);
	expect_result("65536-x.localhost", ROUTE_BAD);
	expect_result("123456-x.localhost", ROUTE_BAD);
	expect_result("80a-x.localhost", ROUTE_BAD);
	expect_result("a.8000-x.localhost", ROUTE_BAD);
	expect_result("8000-x_y.localhost", ROUTE_BAD);
	expect_result("8000-x.localhost:80x", ROUTE_BAD);
}

static void
test_safeid(void **state)
{
	char *s, long_id[300];

	(void)state;
	s = safeid_make("sandbox@v1/foo.bar_baz");
	assert_string_equal(s, "sandbox-at-v1-foo-bar-baz");
	free(s);
	s = safeid_make("default-rtt");
	assert_string_equal(s, "default-rtt");
	free(s);
	memset(long_id, 'a', sizeof long_id - 1);
	long_id[sizeof long_id - 1] = '\0';
	s = safeid_make(long_id);
	assert_int_equal(strlen(s), SAFEID_MAX);
	free(s);
}

/* A configuration with two sandboxes on one address. */
static struct gw_config *
load(void)
{
	struct gw_config *cf;
	char *cause = NULL;

	cf = conf_load_string("t.yaml",
	    "listen: [{address: 127.0.0.1:8080}]\n"
	    "admin: {address: 127.0.0.1:9090}\n"
	    "sandboxes:\n"
	    "  - id: sandbox@v1/foo.bar_baz\n"
	    "    address: 127.0.0.1\n"
	    "    ports: [{port: 1-65535}]\n"
	    "    tunnel: {listen_port: 8766}\n"
	    "  - id: remote\n"
	    "    address: 10.1.2.3\n"
	    "    ports: [{port: 8080}, {port: 3000-3001}]\n",
	    &cause);
	if (cf == NULL)
		fail_msg("%s", cause);
	return (cf);
}

static void
test_find_sandbox(void **state)
{
	struct gw_config *cf = load();

	(void)state;
	assert_ptr_equal(route_find_sandbox(cf, "sandbox@v1/foo.bar_baz"),
	    &cf->cf_sandboxes[0]);
	assert_ptr_equal(route_find_sandbox(cf, "sandbox-at-v1-foo-bar-baz"),
	    &cf->cf_sandboxes[0]);
	assert_ptr_equal(route_find_sandbox(cf, "SANDBOX-at-v1-foo-bar-baz"),
	    &cf->cf_sandboxes[0]);
	assert_ptr_equal(
	    route_find_sandbox(cf, "remote"), &cf->cf_sandboxes[1]);
	assert_null(route_find_sandbox(cf, "nosuch"));
	assert_null(route_find_sandbox(cf, "sandbox"));
	conf_free(cf);
}

static void
test_find_port(void **state)
{
	struct gw_config *cf = load();
	struct gw g;
	const struct gw_sandbox *loc = &cf->cf_sandboxes[0];
	const struct gw_sandbox *rem = &cf->cf_sandboxes[1];

	(void)state;
	memset(&g, 0, sizeof g);
	g.g_conf = cf;
	assert_non_null(route_find_port(&g, loc, 8000));
	assert_non_null(route_find_port(&g, loc, 1));
	/* The gateway's own listeners are never reachable through it. */
	assert_null(route_find_port(&g, loc, 8080));
	assert_null(route_find_port(&g, loc, 9090));
	/* Nor are the tunnel's listen and reverse ports. */
	assert_null(route_find_port(&g, loc, 8766));
	assert_null(route_find_port(&g, loc, 8765));
	/* Another address may use the same port numbers. */
	assert_non_null(route_find_port(&g, rem, 8080));
	assert_non_null(route_find_port(&g, rem, 3001));
	assert_null(route_find_port(&g, rem, 3002));
	assert_null(route_find_port(&g, rem, 8000));
	conf_free(cf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_form),
		cmocka_unit_test(test_host_none),
		cmocka_unit_test(test_host_bad),
		cmocka_unit_test(test_safeid),
		cmocka_unit_test(test_find_sandbox),
		cmocka_unit_test(test_find_port),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
