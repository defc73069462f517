/*
 * What an upgrading process tells the new one about its sockets
 * (AKGW_INHERIT, gateway/upgrade.c): each item read back exactly, anything
 * malformed refused, and tunnel keys that cannot be split wrongly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw.h"

/* Good items: the descriptor, the kind, the key. */
static void
test_parse_good(void **state)
{
	const char *key;
	char kind;
	int fd;

	(void)state;
	assert_int_equal(upgrade_parse_item("3 L", &fd, &kind, &key), 0);
	assert_int_equal(fd, 3);
	assert_int_equal(kind, 'L');
	assert_null(key);
	assert_int_equal(upgrade_parse_item("17 A", &fd, &kind, &key), 0);
	assert_int_equal(fd, 17);
	assert_int_equal(kind, 'A');
	assert_int_equal(
	    upgrade_parse_item("9 T 8766 /run/netns/x sbx", &fd, &kind, &key),
	    0);
	assert_int_equal(fd, 9);
	assert_int_equal(kind, 'T');
	assert_string_equal(key, "8766 /run/netns/x sbx");
	assert_int_equal(
	    upgrade_parse_item("2147483647 L", &fd, &kind, &key), 0);
	assert_int_equal(fd, 2147483647);
}

/* Malformed items are refused. */
static void
test_parse_bad(void **state)
{
	static const char *bad[] = { "", "L", "3", "3 ", "3 X", "3L", "2 L",
		"0 A", "-3 L", "3 L extra", "3 A key", "3 T", "3 T ",
		"2147483648 L", "99999999999999999999 L", " 3 L", "3  L",
		"3 l", "03 L", "+3 L" };
	const char *key;
	char kind;
	size_t i;
	int fd;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		if (upgrade_parse_item(bad[i], &fd, &kind, &key) != -1)
			fail_msg("'%s' was taken", bad[i]);
}

/* Tunnel keys: spaces, ';' and '%' in ids and paths are encoded. */
static void
test_tunnel_key(void **state)
{
	char *k;

	(void)state;
	k = upgrade_tunnel_key("sbx", 8766, "/run/netns/sbx");
	assert_string_equal(k, "8766 /run/netns/sbx sbx");
	free(k);
	k = upgrade_tunnel_key("a b;c%d\n", 1, "127.0.0.1:1");
	assert_string_equal(k, "1 127.0.0.1:1 a%20b%3Bc%25d%0A");
	free(k);
	/* Two different tunnels never get one key. */
	k = upgrade_tunnel_key("x y", 1, "p");
	assert_string_not_equal(k, "1 p x y");
	free(k);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_good),
		cmocka_unit_test(test_parse_bad),
		cmocka_unit_test(test_tunnel_key),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
