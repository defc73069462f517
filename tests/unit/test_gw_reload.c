/*
 * How a reload combines the file's sandboxes with the admin API's changes
 * (gateway/reload.c): the API's puts and deletes survive, the rest is the
 * file's, and an unchanged sandbox keeps its running version.
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

/* A configuration from text that must be valid. */
static struct gw_config *
load(const char *text)
{
	struct gw_config *cf;
	char *cause = NULL;

	cf = conf_load_string("t.yaml", text, &cause);
	if (cf == NULL)
		fail_msg("%s", cause);
	return (cf);
}

static const char file1[] = "listen:\n"
			    "  - address: 127.0.0.1:8080\n"
			    "sandboxes:\n"
			    "  - id: a\n"
			    "    address: 127.0.0.1\n"
			    "    ports: [{port: 8000}]\n"
			    "  - id: b\n"
			    "    address: 127.0.0.1\n"
			    "    ports: [{port: 8000}]\n"
			    "  - id: c\n"
			    "    address: 127.0.0.1\n"
			    "    ports: [{port: 8000}]\n";

/* a unchanged, b changed, c removed, d added. */
static const char file2[] = "listen:\n"
			    "  - address: 127.0.0.1:8080\n"
			    "sandboxes:\n"
			    "  - id: a\n"
			    "    address: 127.0.0.1\n"
			    "    ports: [{port: 8000}]\n"
			    "  - id: b\n"
			    "    address: 127.0.0.1\n"
			    "    ports: [{port: 9000}]\n"
			    "  - id: d\n"
			    "    address: 127.0.0.1\n"
			    "    ports: [{port: 8000}]\n";

/* The file alone: added, changed, removed, unchanged kept as it ran. */
static void
test_file_changes(void **state)
{
	struct gw_config *cf1 = load(file1), *cf2 = load(file2);
	struct gw_directory *d, *nd;
	struct reload_count rc;
	struct gw g;

	(void)state;
	memset(&g, 0, sizeof g);
	g.g_conf = cf1;
	d = directory_new(cf1->cf_sandboxes, cf1->cf_nsandboxes);
	nd = reload_directory(&g, d, cf2, &rc);
	assert_int_equal(nd->d_count, 3);
	assert_int_equal(rc.rc_kept, 1);
	assert_int_equal(rc.rc_changed, 1);
	assert_int_equal(rc.rc_added, 1);
	assert_int_equal(rc.rc_removed, 1);
	assert_int_equal(rc.rc_api, 0);
	/* a is the very sandbox that ran, generation and all. */
	assert_ptr_equal(directory_find(nd, "a"), directory_find(d, "a"));
	assert_ptr_not_equal(directory_find(nd, "b"), directory_find(d, "b"));
	assert_int_equal(directory_find(nd, "b")->sb_ports[0].pr_lo, 9000);
	assert_null(directory_find(nd, "c"));
	assert_non_null(directory_find(nd, "d"));
	directory_unref(nd);
	directory_unref(d);
	conf_free(cf1);
	conf_free(cf2);
}

/* An API sandbox like file1's b, on port p. */
static struct gw_sandbox *
api_sandbox(const char *id, int p)
{
	char text[512];
	struct gw_config *cf;
	struct gw_sandbox *sb;

	snprintf(text, sizeof text,
	    "listen:\n  - address: 127.0.0.1:8080\nsandboxes:\n"
	    "  - id: %s\n    address: 127.0.0.1\n    ports: [{port: %d}]\n",
	    id, p);
	cf = load(text);
	sb = cf->cf_sandboxes[0];
	sandbox_ref(sb);
	conf_free(cf);
	sb->sb_flags |= SB_F_API;
	return (sb);
}

/* The admin API's puts and deletes survive a reload of the file. */
static void
test_api_changes(void **state)
{
	struct gw_config *cf1 = load(file1), *cf2 = load(file2), *cf3;
	struct gw_directory *d, *d2, *nd;
	struct gw_sandbox *x, *b;
	struct reload_count rc;
	struct gw g;

	(void)state;
	memset(&g, 0, sizeof g);
	g.g_conf = cf1;
	d = directory_new(cf1->cf_sandboxes, cf1->cf_nsandboxes);
	/* PUT x (new) and b (a file sandbox, replaced); DELETE a. */
	x = api_sandbox("x", 7000);
	b = api_sandbox("b", 7001);
	reload_put(&g, "x");
	d2 = directory_put(d, x);
	directory_unref(d);
	d = directory_put(d2, b);
	directory_unref(d2);
	reload_deleted(&g, directory_find(d, "a"));
	d2 = directory_delete(d, "a");
	directory_unref(d);
	d = d2;

	nd = reload_directory(&g, d, cf2, &rc);
	assert_int_equal(rc.rc_api, 2);
	assert_ptr_equal(directory_find(nd, "x"), x);
	assert_ptr_equal(directory_find(nd, "b"), b); /* not the file's */
	assert_null(directory_find(nd, "a")); /* stays deleted */
	assert_non_null(directory_find(nd, "d"));
	assert_null(directory_find(nd, "c"));
	assert_int_equal(nd->d_count, 3);

	/* The API deletes its b: the file's b applies at the next reload. */
	reload_deleted(&g, b);
	d2 = directory_delete(nd, "b");
	directory_unref(nd);
	directory_unref(d);
	d = d2;
	nd = reload_directory(&g, d, cf2, &rc);
	assert_int_equal(directory_find(nd, "b")->sb_ports[0].pr_lo, 9000);
	assert_null(directory_find(nd, "a")); /* cf2 has a: still deleted */
	assert_int_equal(g.g_ndeleted, 1);
	/* A file without a forgets the deletion ... */
	directory_unref(d);
	d = nd;
	cf3 = load("listen:\n  - address: 127.0.0.1:8080\n");
	nd = reload_directory(&g, d, cf3, &rc);
	assert_int_equal(g.g_ndeleted, 0);
	assert_int_equal(nd->d_count, 1); /* x */
	directory_unref(d);
	d = nd;
	/* ... so a file that declares it again brings it back. */
	nd = reload_directory(&g, d, cf1, &rc);
	assert_non_null(directory_find(nd, "a"));
	assert_int_equal(rc.rc_added, 3); /* a, b, c */
	conf_free(cf3);

	directory_unref(nd);
	directory_unref(d);
	sandbox_unref(x);
	sandbox_unref(b);
	reload_free(&g);
	conf_free(cf1);
	conf_free(cf2);
}

/* sandbox_same: every field counts, the generation does not. */
static void
test_sandbox_same(void **state)
{
	struct gw_config *cf1 = load(file1), *cf1b = load(file1),
			 *cf2 = load(file2);

	(void)state;
	assert_true(sandbox_same(cf1->cf_sandboxes[0], cf1b->cf_sandboxes[0]));
	assert_false(sandbox_same(cf1->cf_sandboxes[1], cf2->cf_sandboxes[1]));
	assert_false(sandbox_same(cf1->cf_sandboxes[0], cf1->cf_sandboxes[1]));
	conf_free(cf1);
	conf_free(cf1b);
	conf_free(cf2);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_file_changes),
		cmocka_unit_test(test_api_changes),
		cmocka_unit_test(test_sandbox_same),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
