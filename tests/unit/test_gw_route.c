/*
 * Routing: the host-form parser, sandbox lookup by raw and safe id, the
 * published-port rules, and the safe-id rule.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw.h"
#include "safeid.h"

static char d_local[] = "localhost", d_example[] = "gw.example.com";
static char d_gw[] = "gw.localhost", d_apps[] = "apps.gw.example.com";
static char *domains[] = { d_local, d_example, d_gw, d_apps };

/* Parse host and expect ROUTE_OK with port and id as its first reading. */
static void
expect_host(const char *host, int want_port, const char *want_id)
{
	struct route_host rh;

	assert_int_equal(
	    route_parse_host(host, strlen(host), domains, NULL, 4, &rh),
	    ROUTE_OK);
	assert_true(rh.rh_n >= 1);
	assert_int_equal(rh.rh_port[0], want_port);
	assert_string_equal(rh.rh_id[0], want_id);
	route_host_clear(&rh);
}

/*
 * Parse host under formats and expect n readings: (p1, id1) and, when n
 * is 2, (p2, id2).
 */
static void
expect_readings(const char *host, const enum route_host_format *formats,
    size_t n, int p1, const char *id1, int p2, const char *id2)
{
	struct route_host rh;

	assert_int_equal(
	    route_parse_host(host, strlen(host), domains, formats, 4, &rh),
	    ROUTE_OK);
	assert_int_equal(rh.rh_n, n);
	assert_int_equal(rh.rh_port[0], p1);
	assert_string_equal(rh.rh_id[0], id1);
	if (n == 2) {
		assert_int_equal(rh.rh_port[1], p2);
		assert_string_equal(rh.rh_id[1], id2);
	}
	route_host_clear(&rh);
}

/* Parse host and expect result r. */
static void
expect_result(const char *host, enum route_result r)
{
	struct route_host rh;

	assert_int_equal(
	    route_parse_host(host, strlen(host), domains, NULL, 4, &rh), r);
	assert_int_equal(rh.rh_n, 0);
}

/* AKernel's {id}-{port} order, both orders at once, and host_format. */
static void
test_host_id_port(void **state)
{
	static const enum route_host_format pin_port[4] = { ROUTE_HF_PORT_ID,
		ROUTE_HF_PORT_ID, ROUTE_HF_PORT_ID, ROUTE_HF_PORT_ID };
	static const enum route_host_format pin_id[4] = { ROUTE_HF_ID_PORT,
		ROUTE_HF_ID_PORT, ROUTE_HF_ID_PORT, ROUTE_HF_ID_PORT };
	char label[64 + 16];
	struct route_host rh;

	(void)state;
	/* AKernel's e2e test: Host: {sandbox_id}-{port}.{domain}. */
	expect_readings("sbx1-abc123-18081.localhost", NULL, 1, 18081,
	    "sbx1-abc123", 0, NULL);
	expect_readings(
	    "local-8000.localhost:8080", NULL, 1, 8000, "local", 0, NULL);
	/* Both orders read: port-first first. */
	expect_readings(
	    "8000-9000.localhost", NULL, 2, 8000, "9000", 9000, "8000");
	expect_readings(
	    "8000-a-1.localhost", NULL, 2, 8000, "a-1", 1, "8000-a");
	/* A pinned order reads one way only. */
	expect_readings(
	    "8000-9000.localhost", pin_port, 1, 8000, "9000", 0, NULL);
	expect_readings(
	    "8000-9000.localhost", pin_id, 1, 9000, "8000", 0, NULL);
	assert_int_equal(
	    route_parse_host("sbx-1.localhost", 15, domains, pin_port, 4, &rh),
	    ROUTE_NONE);
	assert_int_equal(
	    route_parse_host("8000-sbx.localhost", 18, domains, pin_id, 4, &rh),
	    ROUTE_NONE);
	/* A 63-byte label (the DNS limit AKernel checks) reads whole. */
	memset(label, 'a', 57);
	memcpy(label + 57, "-18081.localhost", 17);
	assert_int_equal(strchr(label, '.') - label, 63);
	expect_readings(label, NULL, 1, 18081,
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaa",
	    0, NULL);
	/* Malformed in the id-first order. */
	expect_result("sbx-0.localhost", ROUTE_BAD);
	expect_result("sbx-65536.localhost", ROUTE_BAD);
	expect_result("sbx-08000.localhost", ROUTE_BAD);
	expect_result("-8000.localhost", ROUTE_BAD);
	expect_result("a_b-8000.localhost", ROUTE_BAD);
	expect_result("a.sbx-8000.localhost", ROUTE_BAD);
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
	/* The longest matching domain wins. */
	expect_host("8000-local.gw.localhost", 8000, "local");
	expect_host("8000-local.apps.gw.example.com", 8000, "local");
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
	expect_result("8000.localhost", ROUTE_BAD);
	expect_result("8000-.localhost", ROUTE_BAD);
	expect_result("0-x.localhost", ROUTE_BAD);
	expect_result("08000-x.localhost", ROUTE_BAD);
	expect_result("65536-x.localhost", ROUTE_BAD);
	expect_result("123456-x.localhost", ROUTE_BAD);
	expect_result("80a-x.localhost", ROUTE_BAD);
	expect_result("a.8000-x.localhost", ROUTE_BAD);
	expect_result("8000-x_y.localhost", ROUTE_BAD);
	expect_result("8000-x.localhost:80x", ROUTE_BAD);
	/* Names that read as neither order are not port URLs. */
	expect_result("www.localhost", ROUTE_NONE);
	expect_result("-x.localhost", ROUTE_NONE);
	expect_result("abc-sbx.localhost", ROUTE_NONE);
	expect_result("a.b.localhost", ROUTE_NONE);
	expect_result("web1.localhost", ROUTE_NONE);
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
	struct gw_directory *d;

	(void)state;
	d = directory_new(cf->cf_sandboxes, cf->cf_nsandboxes);
	assert_int_equal(cf->cf_sandboxes[0]->sb_refcnt, 2);
	assert_ptr_equal(
	    directory_find(d, "sandbox@v1/foo.bar_baz"), cf->cf_sandboxes[0]);
	assert_ptr_equal(directory_find(d, "sandbox-at-v1-foo-bar-baz"),
	    cf->cf_sandboxes[0]);
	assert_ptr_equal(directory_find(d, "SANDBOX-at-v1-foo-bar-baz"),
	    cf->cf_sandboxes[0]);
	assert_ptr_equal(directory_find(d, "remote"), cf->cf_sandboxes[1]);
	assert_null(directory_find(d, "nosuch"));
	assert_null(directory_find(d, "sandbox"));
	directory_unref(d);
	assert_int_equal(cf->cf_sandboxes[0]->sb_refcnt, 1);
	conf_free(cf);
}

/* A sandbox id and safe id for test_directory_many. */
static struct gw_sandbox *
many_sandbox(const char *id, const char *safe)
{
	struct gw_sandbox *sb = calloc(1, sizeof *sb);

	sb->sb_refcnt = 1;
	sb->sb_id = strdup(id);
	sb->sb_safe_id = strdup(safe);
	return (sb);
}

/*
 * Thousands of sandboxes: each is found by raw id, by safe id in any case,
 * and not once deleted; a raw id wins over another sandbox's safe id, as a
 * scan in list order would decide.
 */
static void
test_directory_many(void **state)
{
	enum {
		N = 5000
	};
	struct gw_sandbox **v, *sb;
	struct gw_directory *d, *d2, *d3;
	char id[64], safe[64], up[64];
	size_t i, j;

	(void)state;
	v = calloc(N + 1, sizeof *v);
	for (i = 0; i < N; i++) {
		snprintf(id, sizeof id, "sbx@v1/n%zu", i);
		snprintf(safe, sizeof safe, "sbx-at-v1-n%zu", i);
		v[i] = many_sandbox(id, safe);
	}
	/* Its raw id is the safe id of sandbox 7: the raw id wins. */
	v[N] = many_sandbox("sbx-at-v1-n7", "other-sbx-at-v1-n7");
	d = directory_new(v, N + 1);
	for (i = 0; i < N + 1; i++)
		sandbox_unref(v[i]);
	for (i = 0; i < N; i++) {
		snprintf(id, sizeof id, "sbx@v1/n%zu", i);
		snprintf(safe, sizeof safe, "sbx-at-v1-n%zu", i);
		for (j = 0; safe[j] != '\0'; j++)
			up[j] = (char)(safe[j] >= 'a' && safe[j] <= 'z'
				? safe[j] - 'a' + 'A'
				: safe[j]);
		up[j] = '\0';
		assert_ptr_equal(directory_find(d, id), v[i]);
		if (i != 7) {
			assert_ptr_equal(directory_find(d, safe), v[i]);
			assert_ptr_equal(directory_find(d, up), v[i]);
		}
	}
	assert_ptr_equal(directory_find(d, "sbx-at-v1-n7"), v[N]);
	assert_ptr_equal(directory_find(d, "SBX-AT-V1-N7"), v[7]);
	assert_null(directory_find(d, "sbx@v1/n5000"));
	assert_null(directory_find(d, ""));
	/* Delete one, replace another: the new directories index them. */
	d2 = directory_delete(d, "sbx@v1/n42");
	assert_non_null(d2);
	assert_null(directory_find(d2, "sbx@v1/n42"));
	assert_null(directory_find(d2, "sbx-at-v1-n42"));
	assert_ptr_equal(directory_find(d2, "sbx@v1/n43"), v[43]);
	sb = many_sandbox("sbx@v1/n99", "sbx-at-v1-n99");
	d3 = directory_put(d2, sb);
	sandbox_unref(sb);
	assert_ptr_equal(directory_find(d3, "sbx-at-v1-n99"), sb);
	assert_ptr_equal(directory_find(d2, "sbx-at-v1-n99"), v[99]);
	assert_int_equal(d3->d_count, N);
	directory_unref(d);
	directory_unref(d2);
	directory_unref(d3);
	free(v);
}

static void
test_directory_change(void **state)
{
	struct gw_config *cf = load();
	struct gw_directory *d, *d2, *d3;
	struct gw_sandbox *old, *nsb;
	uint64_t gen;

	(void)state;
	d = directory_new(cf->cf_sandboxes, cf->cf_nsandboxes);
	old = directory_find(d, "remote");
	gen = old->sb_generation;
	assert_true(gen != 0);
	/* A request in flight holds the old version. */
	sandbox_ref(old);

	nsb = calloc(1, sizeof *nsb);
	nsb->sb_refcnt = 1;
	nsb->sb_id = strdup("remote");
	nsb->sb_safe_id = strdup("remote");
	d2 = directory_put(d, nsb);
	sandbox_unref(nsb);
	assert_int_equal(d2->d_count, 2);
	assert_ptr_equal(directory_find(d2, "remote"), nsb);
	assert_true(nsb->sb_generation > gen);
	assert_true(d2->d_generation > d->d_generation);
	/* The old directory is untouched. */
	assert_ptr_equal(directory_find(d, "remote"), old);
	directory_unref(d);
	conf_free(cf);
	assert_int_equal(old->sb_refcnt, 1);
	assert_string_equal(old->sb_id, "remote");
	sandbox_unref(old);

	d3 = directory_delete(d2, "sandbox-at-v1-foo-bar-baz");
	assert_non_null(d3);
	assert_int_equal(d3->d_count, 1);
	assert_null(directory_find(d3, "sandbox@v1/foo.bar_baz"));
	assert_null(directory_delete(d3, "nosuch"));
	directory_unref(d2);
	directory_unref(d3);
}

/* Parse target and expect ROUTE_OK with id, port and rest. */
static void
expect_path(const char *target, const char *want_id, int want_port,
    const char *want_rest)
{
	char *id = NULL, *rest = NULL;
	int port = 0;

	assert_int_equal(route_parse_path(target, &id, &port, &rest), ROUTE_OK);
	assert_string_equal(id, want_id);
	assert_int_equal(port, want_port);
	assert_string_equal(rest, want_rest);
	free(id);
	free(rest);
}

/* Parse target and expect r. */
static void
expect_path_result(const char *target, enum route_result r)
{
	char *id = NULL, *rest = NULL;
	int port = 0;

	assert_int_equal(route_parse_path(target, &id, &port, &rest), r);
	assert_null(id);
	assert_null(rest);
}

/* Parse a tunnel path and expect r, id and ws_port. */
static void
expect_tunnel(
    const char *target, enum route_result r, const char *want_id, int want_port)
{
	char *id = NULL;
	int port = -1;

	assert_int_equal(route_parse_tunnel(target, &id, &port), r);
	if (want_id == NULL) {
		assert_null(id);
		return;
	}
	assert_string_equal(id, want_id);
	assert_int_equal(port, want_port);
	free(id);
}

static void
test_tunnel_path(void **state)
{
	(void)state;
	expect_tunnel("/tunnel/sbx1", ROUTE_OK, "sbx1", 0);
	expect_tunnel("/tunnel/sbx1/", ROUTE_OK, "sbx1", 0);
	expect_tunnel("/tunnel/sbx1/8765", ROUTE_OK, "sbx1", 8765);
	expect_tunnel("/tunnel/sbx1/8765/x/y?q=1", ROUTE_OK, "sbx1", 8765);
	expect_tunnel("/tunnel/sbx1?token=x", ROUTE_OK, "sbx1", 0);
	/* A second segment that is not a port is part of the tail. */
	expect_tunnel("/tunnel/sbx1/ws", ROUTE_OK, "sbx1", 0);
	expect_tunnel("/tunnel/sbx1/0", ROUTE_OK, "sbx1", 0);
	expect_tunnel("/tunnel/sbx1/65536", ROUTE_OK, "sbx1", 0);
	expect_tunnel("/tunnel/a@b.c_d/8765", ROUTE_OK, "a@b.c_d", 8765);
	expect_tunnel("/tunnel/", ROUTE_BAD, NULL, 0);
	expect_tunnel("/tunnel", ROUTE_BAD, NULL, 0);
	expect_tunnel("/tunnel/sb x", ROUTE_BAD, NULL, 0);
	expect_tunnel("/tunnels/x", ROUTE_NONE, NULL, 0);
	expect_tunnel("/sbx1/8765", ROUTE_NONE, NULL, 0);
}

static void
test_path_form(void **state)
{
	(void)state;
	expect_path("/sbx1/8080/app?x=1", "sbx1", 8080, "/app?x=1");
	expect_path("/sbx1/8080/", "sbx1", 8080, "/");
	expect_path("/sbx1/8080", "sbx1", 8080, "/");
	expect_path("/sbx1/8080?x=1", "sbx1", 8080, "/?x=1");
	expect_path("/sbx1/8080/a/b/c", "sbx1", 8080, "/a/b/c");
	expect_path("/sandbox-at-v1-foo/1/", "sandbox-at-v1-foo", 1, "/");
	expect_path("/a@b.c_d/65535/x", "a@b.c_d", 65535, "/x");
	expect_path_result("/", ROUTE_NONE);
	expect_path_result("/index.html", ROUTE_NONE);
	expect_path_result("/sbx1", ROUTE_NONE);
	expect_path_result("/sbx1/", ROUTE_NONE);
	expect_path_result("//8080/", ROUTE_NONE);
	expect_path_result("*", ROUTE_NONE);
	expect_path_result("/tunnel/sbx1", ROUTE_RESERVED);
	expect_path_result("/tunnel", ROUTE_RESERVED);
	expect_path_result("/direct/sbx1/x", ROUTE_RESERVED);
	expect_path_result("/sbx1/http/", ROUTE_BAD);
	expect_path_result("/sbx1/0/", ROUTE_BAD);
	expect_path_result("/sbx1/08080/", ROUTE_BAD);
	expect_path_result("/sbx1/65536/", ROUTE_BAD);
	expect_path_result("/sbx1/99999999999999999999/", ROUTE_BAD);
	expect_path_result("/sb%20x/8080/", ROUTE_BAD);
	expect_path_result("/sb<x>/8080/", ROUTE_BAD);
}

static void
test_find_port(void **state)
{
	struct gw_config *cf = load();
	struct gw g;
	const struct gw_sandbox *loc = cf->cf_sandboxes[0];
	const struct gw_sandbox *rem = cf->cf_sandboxes[1];

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

/* The client's address without its port, as the access line and XFF say. */
static void
test_conn_peer_ip(void **state)
{
	static const struct {
		const char *peer, *ip;
	} cases[] = { { "127.0.0.1:8080", "127.0.0.1" }, { "[::1]:443", "::1" },
		{ "[::ffff:255.255.255.255]:65535", "::ffff:255.255.255.255" },
		{ "unknown", "unknown" } };
	struct conn c;
	char ip[48];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		memset(&c, 0, sizeof c);
		snprintf(c.c_peer, sizeof c.c_peer, "%s", cases[i].peer);
		assert_string_equal(
		    conn_peer_ip(&c, ip, sizeof ip), cases[i].ip);
	}
	/* A short buffer cuts the address, always terminated. */
	snprintf(c.c_peer, sizeof c.c_peer, "192.168.100.200:1");
	assert_string_equal(conn_peer_ip(&c, ip, 8), "192.168");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_form),
		cmocka_unit_test(test_host_none),
		cmocka_unit_test(test_host_bad),
		cmocka_unit_test(test_host_id_port),
		cmocka_unit_test(test_safeid),
		cmocka_unit_test(test_find_sandbox),
		cmocka_unit_test(test_directory_change),
		cmocka_unit_test(test_directory_many),
		cmocka_unit_test(test_path_form),
		cmocka_unit_test(test_tunnel_path),
		cmocka_unit_test(test_find_port),
		cmocka_unit_test(test_conn_peer_ip),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
