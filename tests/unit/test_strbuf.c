/* Unit tests for lib/strbuf.c: numbers, headers and growth. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "strbuf.h"

/* Decimal and hex, at the edges. */
static void
test_numbers(void **state)
{
	char buf[24];

	(void)state;
	assert_int_equal(fmt_u64(buf, 0), 1);
	assert_memory_equal(buf, "0", 1);
	assert_int_equal(fmt_u64(buf, 1024), 4);
	assert_memory_equal(buf, "1024", 4);
	assert_int_equal(fmt_u64(buf, UINT64_MAX), 20);
	assert_memory_equal(buf, "18446744073709551615", 20);
	assert_int_equal(fmt_hex(buf, 0), 1);
	assert_memory_equal(buf, "0", 1);
	assert_int_equal(fmt_hex(buf, 0x1f40), 4);
	assert_memory_equal(buf, "1f40", 4);
	assert_int_equal(fmt_hex(buf, UINT64_MAX), 16);
	assert_memory_equal(buf, "ffffffffffffffff", 16);
}

/* Hex digits back to values: both cases; anything else is -1. */
static void
test_hex_value(void **state)
{
	(void)state;
	assert_int_equal(hex_value('0'), 0);
	assert_int_equal(hex_value('9'), 9);
	assert_int_equal(hex_value('a'), 10);
	assert_int_equal(hex_value('F'), 15);
	assert_int_equal(hex_value('g'), -1);
	assert_int_equal(hex_value('/'), -1);
	assert_int_equal(hex_value(':'), -1);
	assert_int_equal(hex_value(-1), -1);
	assert_int_equal(hex_value((char)0xb0), -1);
}

/* Headers and numbers appended in order; reset keeps the memory. */
static void
test_build(void **state)
{
	struct strbuf sb = { NULL, 0, 0 };
	char *p;

	(void)state;
	strbuf_adds(&sb, "HTTP/1.1 ");
	strbuf_add_u64(&sb, 200);
	strbuf_add(&sb, " OK\r\n", 5);
	strbuf_add_header(&sb, "Content-Length", 14, "12", 2);
	strbuf_add_hex(&sb, 255);
	assert_int_equal(sb.sb_len, 39);
	assert_memory_equal(
	    sb.sb_buf, "HTTP/1.1 200 OK\r\nContent-Length: 12\r\nff", 39);
	p = sb.sb_buf;
	strbuf_reset(&sb);
	strbuf_add(&sb, "x", 1);
	assert_ptr_equal(sb.sb_buf, p);
	assert_int_equal(sb.sb_len, 1);
	strbuf_free(&sb);
	assert_null(sb.sb_buf);
}

/* Growth past the first KiB keeps every byte. */
static void
test_grow(void **state)
{
	struct strbuf sb = { NULL, 0, 0 };
	char big[3000];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof big; i++)
		big[i] = (char)('a' + i % 26);
	strbuf_add(&sb, "<", 1);
	strbuf_add(&sb, big, sizeof big);
	strbuf_add_header(&sb, "N", 1, big, sizeof big);
	assert_int_equal(sb.sb_len, 1 + 3000 + 1 + 2 + 3000 + 2);
	assert_true(sb.sb_cap >= sb.sb_len);
	assert_memory_equal(sb.sb_buf + 1, big, sizeof big);
	assert_memory_equal(sb.sb_buf + 3001, "N: ", 3);
	assert_memory_equal(sb.sb_buf + 3004, big, sizeof big);
	assert_memory_equal(sb.sb_buf + 6004, "\r\n", 2);
	strbuf_free(&sb);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_hex_value),
		cmocka_unit_test(test_build),
		cmocka_unit_test(test_grow),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
