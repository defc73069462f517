/*
 * The admin API's pieces that need no sockets: JSON bodies turned into
 * configuration trees and checked by the sandbox schema (with the exact
 * messages a client sees), the sandbox JSON the API returns, its round
 * trip back through PUT, percent-decoding of ids and the token check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The file under test, for its static functions. */
#include "admin.c"

/* Parse JSON text; the test fails if it is not valid JSON. */
static json_t *
load(const char *text)
{
	json_error_t jerr;
	json_t *v;

	v = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (v == NULL)
		fail_msg("bad test JSON: %s", jerr.text);
	return (v);
}

/* Check a sandbox given as JSON text the way PUT does; NULL with *cause. */
static struct gw_sandbox *
parse_sandbox(const struct gw_config *cf, const char *text, char **cause)
{
	struct gw_sandbox *sb;
	struct cfg_doc *doc;
	json_t *v;

	v = load(text);
	doc = cfg_from_json("request body", v, cause);
	json_decref(v);
	if (doc == NULL)
		return (NULL);
	sb = conf_sandbox_parse(cf, doc, doc->d_root, cause);
	cfg_doc_free(doc);
	return (sb);
}

/* Expect a sandbox body to be refused with exactly want. */
static void
expect_refused(const struct gw_config *cf, const char *text, const char *want)
{
	struct gw_sandbox *sb;
	char *cause = NULL;

	sb = parse_sandbox(cf, text, &cause);
	if (sb != NULL)
		fail_msg("accepted, expected: %s", want);
	assert_non_null(cause);
	assert_string_equal(cause, want);
	free(cause);
}

/* Expect a sandbox body to be accepted. */
static struct gw_sandbox *
expect_accepted(const struct gw_config *cf, const char *text)
{
	struct gw_sandbox *sb;
	char *cause = NULL;

	sb = parse_sandbox(cf, text, &cause);
	if (sb == NULL)
		fail_msg("refused: %s", cause);
	return (sb);
}

/* Each JSON type becomes the node the YAML loader would make. */
static void
test_from_json_types(void **state)
{
	struct cfg_doc *doc;
	struct cfg_node *r, *n;
	char *cause = NULL;
	json_t *v;

	(void)state;
	v = load("{\"s\": \"8080\", \"i\": 8080, \"r\": 1.5, \"t\": true, "
		 "\"f\": false, \"n\": null, \"a\": [1, \"x\"], \"o\": {}}");
	doc = cfg_from_json("request body", v, &cause);
	json_decref(v);
	assert_non_null(doc);
	assert_string_equal(doc->d_file, "request body");
	r = doc->d_root;
	assert_int_equal(r->n_type, CFG_MAP);
	assert_int_equal(cfg_map_size(r), 8);
	assert_int_equal(r->n_line, 0);
	/* Keys keep the order they were written in. */
	assert_string_equal(cfg_map_key(r, 0)->n_value, "s");
	assert_string_equal(cfg_map_key(r, 7)->n_value, "o");
	n = cfg_map_get(r, "s");
	assert_int_equal(n->n_type, CFG_SCALAR);
	assert_string_equal(n->n_value, "8080");
	assert_int_equal(n->n_plain, 0);
	n = cfg_map_get(r, "i");
	assert_string_equal(n->n_value, "8080");
	assert_int_equal(n->n_plain, 1);
	assert_int_equal(n->n_line, 0);
	assert_int_equal(n->n_col, 0);
	n = cfg_map_get(r, "r");
	assert_string_equal(n->n_value, "1.5");
	assert_int_equal(n->n_plain, 1);
	n = cfg_map_get(r, "t");
	assert_string_equal(n->n_value, "true");
	assert_int_equal(n->n_plain, 1);
	assert_string_equal(cfg_map_get(r, "f")->n_value, "false");
	n = cfg_map_get(r, "n");
	assert_string_equal(n->n_value, "");
	assert_int_equal(n->n_plain, 1);
	n = cfg_map_get(r, "a");
	assert_int_equal(n->n_type, CFG_SEQ);
	assert_int_equal(n->n_count, 2);
	assert_string_equal(n->n_items[0]->n_value, "1");
	assert_int_equal(n->n_items[0]->n_plain, 1);
	assert_string_equal(n->n_items[1]->n_value, "x");
	assert_int_equal(n->n_items[1]->n_plain, 0);
	n = cfg_map_get(r, "o");
	assert_int_equal(n->n_type, CFG_MAP);
	assert_int_equal(n->n_count, 0);
	cfg_doc_free(doc);

	/* A bare scalar stays a scalar root. */
	v = json_null();
	doc = cfg_from_json("x", v, &cause);
	assert_non_null(doc);
	assert_int_equal(doc->d_root->n_type, CFG_SCALAR);
	cfg_doc_free(doc);
}

/* Nesting past 32 levels and NUL bytes are refused. */
static void
test_from_json_limits(void **state)
{
	struct cfg_doc *doc;
	char *cause = NULL;
	json_t *v, *inner;
	int i;

	(void)state;
	v = json_array();
	for (i = 0; i < 32; i++) {
		inner = json_array();
		json_array_append_new(inner, v);
		v = inner;
	}
	/* 33 levels: depths 0 to 32 are accepted. */
	doc = cfg_from_json("request body", v, &cause);
	assert_non_null(doc);
	cfg_doc_free(doc);
	inner = json_array();
	json_array_append_new(inner, v);
	v = inner;
	doc = cfg_from_json("request body", v, &cause);
	assert_null(doc);
	/* The error names where: 33 levels of the first item. */
	assert_string_equal(cause,
	    "request body at /0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0"
	    "/0/0/0/0/0/0/0/0/0: nested too deeply");
	free(cause);
	json_decref(v);

	v = json_pack("{s:s#}", "id", "a\0b", (size_t)3);
	assert_non_null(v);
	doc = cfg_from_json("request body", v, &cause);
	assert_null(doc);
	assert_string_equal(cause, "request body at /id: NUL byte in a value");
	free(cause);
	json_decref(v);

	assert_null(cfg_from_json("request body", NULL, &cause));
	free(cause);
}

/* A good sandbox, with ports as integers and as ranges. */
static void
test_sandbox_good(void **state)
{
	struct gw_sandbox *sb;

	(void)state;
	sb = expect_accepted(NULL,
	    "{\"id\": \"sbx@v1/one\", \"address\": \"127.0.0.1\", "
	    "\"max_connections\": 7, \"ports\": [{\"port\": 8000, "
	    "\"access\": \"public\"}, {\"port\": \"3000-3999\", "
	    "\"host_rewrite\": \"localhost:${port}\"}, {\"port\": \"9000\"}],"
	    " \"tunnel\": {\"listen_port\": 8766, \"mode\": \"forward\"}}");
	assert_string_equal(sb->sb_id, "sbx@v1/one");
	assert_string_equal(sb->sb_safe_id, "sbx-at-v1-one");
	assert_string_equal(sb->sb_address, "127.0.0.1");
	assert_null(sb->sb_netns);
	assert_int_equal(sb->sb_max_connections, 7);
	assert_int_equal(sb->sb_nports, 3);
	assert_int_equal(sb->sb_ports[0].pr_lo, 8000);
	assert_int_equal(sb->sb_ports[0].pr_hi, 8000);
	assert_int_equal(sb->sb_ports[0].pr_private, 0);
	assert_null(sb->sb_ports[0].pr_host_rewrite);
	assert_int_equal(sb->sb_ports[1].pr_lo, 3000);
	assert_int_equal(sb->sb_ports[1].pr_hi, 3999);
	assert_string_equal(
	    sb->sb_ports[1].pr_host_rewrite, "localhost:${port}");
	assert_int_equal(sb->sb_ports[2].pr_lo, 9000);
	assert_int_equal(sb->sb_ntunnel_ports, 1);
	assert_int_equal(sb->sb_tunnel_ports[0], 8766);
	assert_int_equal(sb->sb_tunnel_mode, GW_TUNNEL_FORWARD);
	sandbox_unref(sb);

	sb = expect_accepted(NULL,
	    "{\"id\": 42, \"netns\": \"/run/netns/sbx\", \"ports\": [], "
	    "\"tunnel\": {\"listen_port\": [8766, 9766]}}");
	assert_string_equal(sb->sb_id, "42");
	assert_string_equal(sb->sb_netns, "/run/netns/sbx");
	assert_null(sb->sb_address);
	assert_int_equal(sb->sb_nports, 0);
	assert_int_equal(sb->sb_ntunnel_ports, 2);
	assert_int_equal(sb->sb_tunnel_ports[1], 9766);
	assert_int_equal(sb->sb_tunnel_mode, GW_TUNNEL_TERMINATE);
	sandbox_unref(sb);
}

/* Bad sandboxes get the schema's message, without a position. */
static void
test_sandbox_refused(void **state)
{
	(void)state;
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"x\": 1}",
	    "request body at /x: unknown key 'x' in a sandbox (expected one "
	    "of: "
	    "id, address, netns, max_connections, ports, tunnel)");
	/* RFC 6901: '~' and '/' in a key are escaped in its pointer. */
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"ports\": [{\"port\": 80}, {\"a/b~c\": 1}]}",
	    "request body at /ports/1/a~1b~0c: unknown key 'a/b~c' in a port "
	    "(expected one of: port, access, host_rewrite, protocol)");
	expect_refused(NULL, "[1, 2]",
	    "request body: a sandbox must be a mapping, not a list");
	expect_refused(NULL, "{\"address\": \"127.0.0.1\"}",
	    "request body: a sandbox needs an id");
	expect_refused(NULL, "{\"id\": \"a\"}",
	    "request body: sandbox 'a' needs exactly one of address and "
	    "netns");
	expect_refused(NULL, "{\"id\": \"a\", \"address\": \"localhost\"}",
	    "request body at /address: address must be a literal IPv4 or IPv6 "
	    "address, "
	    "not 'localhost'");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"netns\": "
	    "\"/run/netns/../../proc/1/ns/net\"}",
	    "request body at /netns: netns must name a namespace directly in "
	    "/run/netns (netns_dir), as /run/netns/NAME with no '/', '.' or "
	    "'..' in NAME, not '/run/netns/../../proc/1/ns/net'");
	expect_refused(NULL, "{\"id\": \"a\", \"netns\": \"/proc/1/ns/net\"}",
	    "request body at /netns: netns must be a path in /run/netns "
	    "(netns_dir), such as /run/netns/NAME, not '/proc/1/ns/net'");
	expect_refused(NULL, "{\"id\": \"a b\", \"address\": \"127.0.0.1\"}",
	    "request body at /id: a sandbox id must not contain spaces or "
	    "control "
	    "characters");
	expect_refused(NULL, "{\"id\": [\"a\"], \"address\": \"127.0.0.1\"}",
	    "request body at /id: sandbox id must be a single value, not a "
	    "list");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"ports\": {\"port\": 80}}",
	    "request body at /ports: ports must be a list, not a mapping");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"max_connections\": \"many\"}",
	    "request body at /max_connections: max_connections must be an "
	    "integer, not 'many'");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"max_connections\": true}",
	    "request body at /max_connections: max_connections must be an "
	    "integer, not 'true'");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"ports\": [{\"port\": 1.5}]}",
	    "request body at /ports/0/port: port must be a port (1-65535) or a "
	    "range such as "
	    "3000-3999, not '1.5'");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"ports\": [{\"port\": 70000}]}",
	    "request body at /ports/0/port: port must be a port (1-65535) or a "
	    "range such as "
	    "3000-3999, not '70000'");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"ports\": [{\"port\": \"4000-3000\"}]}",
	    "request body at /ports/0/port: port must be a port (1-65535) or a "
	    "range such as "
	    "3000-3999, not '4000-3000'");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"ports\": [{\"port\": 80, \"access\": null}]}",
	    "request body at /ports/0/access: access must be public or "
	    "private, not ''");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"ports\": [{\"port\": 80, \"access\": "
	    "\"private\"}]}",
	    "request body at /ports/0/access: access: private needs "
	    "auth.secret (or auth.secrets) to check tokens with");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"tunnel\": {\"mode\": \"terminate\"}}",
	    "request body at /tunnel: tunnel needs listen_port");
	expect_refused(NULL,
	    "{\"id\": \"a\", \"address\": \"127.0.0.1\", "
	    "\"tunnel\": {\"listen_port\": \"x\"}}",
	    "request body at /tunnel/listen_port: tunnel.listen_port must be "
	    "an integer, not 'x'");
}

/* A gateway with no tunnels running, for rendering. */
static struct gw render_gw;

/* Render a sandbox as the API does, as compact text the caller frees. */
static char *
render(const struct gw_sandbox *sb)
{
	json_t *o;
	char *s;

	o = admin_sandbox_json(&render_gw, sb);
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return (s);
}

/* The sandbox JSON has the documented shape. */
static void
test_sandbox_json(void **state)
{
	struct gw_sandbox *sb;
	char *s;

	(void)state;
	sb = expect_accepted(NULL,
	    "{\"id\": \"sbx@v1/one\", \"address\": \"::1\", "
	    "\"max_connections\": 7, \"ports\": [{\"port\": 8000}, {\"port\": "
	    "\"3000-3999\", \"host_rewrite\": \"localhost:${port}\"}], "
	    "\"tunnel\": {\"listen_port\": 8766}}");
	sb->sb_generation = 12;
	sb->sb_nconns = 3;
	s = render(sb);
	assert_string_equal(s,
	    "{\"id\":\"sbx@v1/one\",\"safe_id\":\"sbx-at-v1-one\","
	    "\"address\":\"::1\",\"max_connections\":7,\"generation\":12,"
	    "\"ports\":[{\"port\":8000,\"access\":\"public\"},"
	    "{\"port\":\"3000-3999\",\"access\":\"public\","
	    "\"host_rewrite\":\"localhost:${port}\"}],"
	    "\"tunnel\":{\"listen_port\":8766,\"mode\":\"terminate\","
	    "\"listeners\":[]},"
	    "\"connections\":3}");
	free(s);
	sandbox_unref(sb);

	sb = expect_accepted(NULL,
	    "{\"id\": \"n\", \"netns\": \"/run/netns/n\", \"tunnel\": "
	    "{\"listen_port\": [8766, 9766], \"mode\": \"forward\"}}");
	s = render(sb);
	assert_string_equal(s,
	    "{\"id\":\"n\",\"safe_id\":\"n\",\"netns\":\"/run/netns/n\","
	    "\"generation\":0,\"ports\":[],\"tunnel\":{\"listen_port\":[8766,"
	    "9766],\"mode\":\"forward\",\"listeners\":[]},\"connections\":0}");
	free(s);
	sandbox_unref(sb);
}

/*
 * What GET returns, without its read-only fields, is a valid PUT body
 * that gives the same sandbox back.
 */
static void
round_trip(const struct gw_config *cf, const char *text)
{
	struct gw_sandbox *sb, *again;
	struct cfg_doc *doc;
	char *cause = NULL, *first, *second;
	json_t *o;

	sb = expect_accepted(cf, text);
	o = admin_sandbox_json(&render_gw, sb);
	json_object_del(o, "safe_id");
	json_object_del(o, "generation");
	json_object_del(o, "connections");
	if (json_object_get(o, "tunnel") != NULL)
		json_object_del(json_object_get(o, "tunnel"), "listeners");
	doc = cfg_from_json("request body", o, &cause);
	json_decref(o);
	assert_non_null(doc);
	again = conf_sandbox_parse(cf, doc, doc->d_root, &cause);
	cfg_doc_free(doc);
	if (again == NULL)
		fail_msg("round trip refused: %s", cause);
	first = render(sb);
	second = render(again);
	assert_string_equal(first, second);
	assert_memory_equal(&sb->sb_addr, &again->sb_addr, sb->sb_addrlen);
	free(first);
	free(second);
	sandbox_unref(sb);
	sandbox_unref(again);
}

/* Round trips for every shape of sandbox. */
static void
test_sandbox_round_trip(void **state)
{
	struct gw_config *cf;
	char *cause = NULL;

	(void)state;
	cf = conf_load_string("t.yaml",
	    "listen: [{address: 127.0.0.1:8080}]\n"
	    "auth: {secret: 0123456789abcdef0123}\n",
	    &cause);
	if (cf == NULL)
		fail_msg("%s", cause);
	round_trip(cf, "{\"id\": \"a\", \"address\": \"10.0.0.1\"}");
	round_trip(cf,
	    "{\"id\": \"sbx@v1/one\", \"address\": \"fe80::1\", "
	    "\"max_connections\": 9, \"ports\": [{\"port\": 1}, {\"port\": "
	    "\"2-65535\", \"access\": \"private\", \"host_rewrite\": "
	    "\"localhost:${port}\"}], \"tunnel\": {\"listen_port\": 8766, "
	    "\"mode\": \"terminate\"}}");
	round_trip(cf,
	    "{\"id\": \"ns\", \"netns\": \"/run/netns/ns\", \"tunnel\": "
	    "{\"listen_port\": [2, 65535], \"mode\": \"forward\"}}");
	conf_free(cf);
}

/* Sandbox ids in paths are percent-decoded; bad escapes are refused. */
static void
test_unescape(void **state)
{
	char *s;

	(void)state;
	s = admin_unescape("sbx%40v1%2Fone");
	assert_string_equal(s, "sbx@v1/one");
	free(s);
	s = admin_unescape("plain-id+x");
	assert_string_equal(s, "plain-id+x");
	free(s);
	s = admin_unescape("%e2%9C%93");
	assert_string_equal(s, "\xe2\x9c\x93");
	free(s);
	assert_null(admin_unescape("a%2"));
	assert_null(admin_unescape("a%"));
	assert_null(admin_unescape("a%zz"));
	assert_null(admin_unescape("a%00b"));
}

/* Check the Authorization header of a request against token. */
static int
authorized(const char *token, const char *auth_header)
{
	struct gw_config cf;
	struct gw g;
	struct admin a;
	struct http1_msg m;
	struct head h;
	struct evbuffer *in;
	enum http1_err err;
	int r;

	memset(&cf, 0, sizeof cf);
	memset(&g, 0, sizeof g);
	memset(&a, 0, sizeof a);
	memset(&m, 0, sizeof m);
	cf.cf_admin_token = (char *)token;
	g.g_conf = &cf;
	a.a_gw = &g;
	a.a_limits.max_head = ADMIN_MAX_HEAD;
	a.a_limits.max_line = ADMIN_MAX_LINE;
	a.a_limits.max_headers = ADMIN_MAX_HEADERS;
	in = evbuffer_new();
	evbuffer_add_printf(in, "GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n");
	if (auth_header != NULL)
		evbuffer_add_printf(in, "Authorization: %s\r\n", auth_header);
	evbuffer_add_printf(in, "\r\n");
	assert_int_equal(http1_parse_request(in, &a.a_limits, &m, &err), 1);
	http1_msg_head(&m, &h);
	r = admin_authorized(&a, &h);
	http1_msg_reset(&m);
	evbuffer_free(in);
	return (r);
}

/* The bearer token must match exactly; without a token the API is open. */
static void
test_authorized(void **state)
{
	(void)state;
	assert_true(authorized("s3cret", "Bearer s3cret"));
	assert_true(authorized("s3cret", "bearer   s3cret"));
	assert_false(authorized("s3cret", NULL));
	assert_false(authorized("s3cret", "Bearer"));
	assert_false(authorized("s3cret", "Bearer "));
	assert_false(authorized("s3cret", "Bearer s3cre"));
	assert_false(authorized("s3cret", "Bearer s3cret2"));
	assert_false(authorized("s3cret", "Bearer S3CRET"));
	assert_false(authorized("s3cret", "Basic s3cret"));
	assert_false(authorized("s3cret", "s3cret"));
	assert_true(authorized(NULL, NULL));
	assert_true(authorized("", "Bearer anything"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_from_json_types),
		cmocka_unit_test(test_from_json_limits),
		cmocka_unit_test(test_sandbox_good),
		cmocka_unit_test(test_sandbox_refused),
		cmocka_unit_test(test_sandbox_json),
		cmocka_unit_test(test_sandbox_round_trip),
		cmocka_unit_test(test_unescape),
		cmocka_unit_test(test_authorized),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
