/*
 * aktunnel toward the target: the URL join of tunnel-protocol.md §9.1,
 * the request header rules of §9.2 (scenario 8) and the request head.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "tun.h"

/* Join base and path and compare with want (NULL: must be refused). */
static void
join_is(const char *base, const char *path, const char *want)
{
	char *got, *cause = NULL;

	got = target_join_path(base, path, &cause);
	if (want == NULL) {
		assert_null(got);
		assert_non_null(cause);
		free(cause);
		return;
	}
	if (got == NULL)
		fail_msg("join(%s, %s) refused: %s", base, path, cause);
	assert_string_equal(got, want);
	free(got);
}

/* The request target: base path kept, query kept, dots resolved. */
static void
test_join(void **state)
{
	(void)state;
	join_is("", "/", "/");
	join_is("", "/echo", "/echo");
	join_is("", "/chat?room=one", "/chat?room=one");
	join_is("", "//evil.example/x", "/evil.example/x");
	join_is("/api", "/v1/x?q=1", "/api/v1/x?q=1");
	join_is("/api", "/", "/api/");
	join_is("/api", "", "/api/");
	join_is("/api", "/?q=1", "/api/?q=1");
	join_is("/api/v2", "/a/b/", "/api/v2/a/b/");
	join_is("", "/a/./b/../c", "/a/c");
	join_is("/api", "/../x", "/x");
	join_is("", "/../../x", "/x");
	join_is("/api", "/..", "/");
	join_is("", "/a/b/..", "/a/");
	join_is("", "/a?x=../y", "/a?x=../y");
	join_is("", "/foo:bar", "/foo:bar");
	join_is("", "/a b", NULL);
	join_is("", "/a\r\nX: y", NULL);
	join_is("", "/a#frag", NULL);
	join_is("", "/caf\xc3\xa9", NULL);
}

/* Whether each header of a list is dropped, as a string of 0 and 1. */
static void
dropped_is(const struct tunproto_header *h, size_t n, const char *want)
{
	char got[64];
	size_t i;

	assert_true(n < sizeof got);
	for (i = 0; i < n; i++)
		got[i] = target_header_dropped(h, n, i) ? '1' : '0';
	got[n] = '\0';
	assert_string_equal(got, want);
}

/* Scenario 8: hop-by-hop, Connection-named, Host, length and Expect go. */
static void
test_headers(void **state)
{
	struct tunproto_header h[] = {
		{ (char *)"Connection", (char *)"close, X-First-Hop" },
		{ (char *)"Connection", (char *)"X-Second-Hop" },
		{ (char *)"X-First-Hop", (char *)"1" },
		{ (char *)"x-second-hop", (char *)"2" },
		{ (char *)"Transfer-Encoding", (char *)"chunked" },
		{ (char *)"Content-Length", (char *)"999" },
		{ (char *)"X-Tag", (char *)"a" },
		{ (char *)"X-Tag", (char *)"b" },
		{ (char *)"Authorization", (char *)"Bearer t" },
		{ (char *)"Content-Type", (char *)"text/plain" },
		{ (char *)"Host", (char *)"sandbox" },
		{ (char *)"Expect", (char *)"100-continue" },
		{ (char *)"Keep-Alive", (char *)"5" },
		{ (char *)"Proxy-Authorization", (char *)"Basic x" },
		{ (char *)"Proxy-Connection", (char *)"keep-alive" },
		{ (char *)"TE", (char *)"trailers" },
		{ (char *)"Trailer", (char *)"X" },
		{ (char *)"Upgrade", (char *)"h2c" },
		{ (char *)"Proxy-Authenticate", (char *)"Basic" },
		{ (char *)"Cookie", (char *)"caller=explicit" },
		{ (char *)"close", (char *)"a header named close" },
	};

	(void)state;
	dropped_is(h, sizeof h / sizeof h[0], "111111000011111111101");
}

/* Connection tokens are trimmed, case-insensitive and comma-separated. */
static void
test_headers_connection_list(void **state)
{
	struct tunproto_header h[] = {
		{ (char *)"Connection", (char *)" ,X-A ,\tx-b,, " },
		{ (char *)"X-A", (char *)"1" },
		{ (char *)"X-B", (char *)"2" },
		{ (char *)"X-AB", (char *)"3" },
		{ (char *)"X", (char *)"4" },
	};

	(void)state;
	dropped_is(h, 5, "11100");
}

/* Render a head built for the target as a string. */
static char *
head_string(const char *method, const char *path,
    const struct tunproto_header *h, size_t n, int body, uint64_t len)
{
	struct tun t;
	struct evbuffer *b;
	char *cause = NULL, *s;
	size_t l;

	memset(&t, 0, sizeof t);
	t.t_target_authority = (char *)"svc.example:8443";
	b = target_request_head(&t, method, path, h, n, body, len, &cause);
	if (b == NULL)
		return (cause);
	l = evbuffer_get_length(b);
	s = malloc(l + 1);
	evbuffer_remove(b, s, l);
	s[l] = '\0';
	evbuffer_free(b);
	return (s);
}

/* The head: Host from the target, headers in order, then the framing. */
static void
test_request_head(void **state)
{
	struct tunproto_header h[] = {
		{ (char *)"X-Tag", (char *)"a" },
		{ (char *)"Host", (char *)"sandbox" },
		{ (char *)"X-Tag", (char *)"b" },
		{ (char *)"Content-Length", (char *)"999" },
	};
	struct tunproto_header bad[] = { { (char *)"X Y", (char *)"1" } };
	struct tunproto_header badv[] = { { (char *)"X", (char *)"a\r\nb" } };
	char *s;

	(void)state;
	s = head_string("POST", "/api/x", h, 4, 0, 12);
	assert_string_equal(s,
	    "POST /api/x HTTP/1.1\r\nHost: svc.example:8443\r\n"
	    "X-Tag: a\r\nX-Tag: b\r\nContent-Length: 12\r\n\r\n");
	free(s);
	s = head_string("GET", "/", NULL, 0, 0, 0);
	assert_string_equal(
	    s, "GET / HTTP/1.1\r\nHost: svc.example:8443\r\n\r\n");
	free(s);
	s = head_string("POST", "/", NULL, 0, 0, 0);
	assert_string_equal(s,
	    "POST / HTTP/1.1\r\nHost: svc.example:8443\r\n"
	    "Content-Length: 0\r\n\r\n");
	free(s);
	s = head_string("PUT", "/u", NULL, 0, 1, 100000);
	assert_string_equal(s,
	    "PUT /u HTTP/1.1\r\nHost: svc.example:8443\r\n"
	    "Content-Length: 100000\r\n\r\n");
	free(s);
	s = head_string("POST", "/u", NULL, 0, 2, 0);
	assert_string_equal(s,
	    "POST /u HTTP/1.1\r\nHost: svc.example:8443\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n");
	free(s);
	s = head_string("G T", "/", NULL, 0, 0, 0);
	assert_string_equal(s, "invalid request method");
	free(s);
	s = head_string("GET", "/", bad, 1, 0, 0);
	assert_string_equal(s, "invalid request header name");
	free(s);
	s = head_string("GET", "/", badv, 1, 0, 0);
	assert_string_equal(s, "invalid value in request header X");
	free(s);
}

/* tun_host_port: default ports left out, IPv6 in brackets. */
static void
test_host_port(void **state)
{
	char *s;

	(void)state;
	s = tun_host_port("svc.example", 443, 1);
	assert_string_equal(s, "svc.example");
	free(s);
	s = tun_host_port("svc.example", 80, 1);
	assert_string_equal(s, "svc.example:80");
	free(s);
	s = tun_host_port("::1", 8080, 0);
	assert_string_equal(s, "[::1]:8080");
	free(s);
	s = tun_host_port("127.0.0.1", 80, -1);
	assert_string_equal(s, "127.0.0.1:80");
	free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_join),
		cmocka_unit_test(test_headers),
		cmocka_unit_test(test_headers_connection_list),
		cmocka_unit_test(test_request_head),
		cmocka_unit_test(test_host_port),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
