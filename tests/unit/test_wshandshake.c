/*
 * Unit tests for lib/wshandshake.c: the WebSocket opening handshake, a
 * server's checks of an upgrade request and its 101 answer, a client's
 * request and its checks of the answer, each refusal with its reason.
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

#include "http1.h"
#include "wsconn.h"

/* The example key of RFC 6455 section 1.3. */
#define TEST_KEY "dGhlIHNhbXBsZSBub25jZQ=="
#define TEST_ACCEPT "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="

static const struct http1_limits test_limits = {
	.max_head = 8192,
	.max_line = 1024,
	.max_headers = 32,
};

/* Parse s as a request head; fails the test unless it parses. */
static void
parse_request(const char *s, struct http1_msg *m)
{
	struct evbuffer *in;
	enum http1_err err;

	memset(m, 0, sizeof *m);
	in = evbuffer_new();
	evbuffer_add(in, s, strlen(s));
	assert_int_equal(http1_parse_request(in, &test_limits, m, &err), 1);
	evbuffer_free(in);
}

/* Parse len bytes of s as a response head. */
static void
parse_response(const char *s, size_t len, struct http1_msg *m)
{
	struct evbuffer *in;
	enum http1_err err;

	memset(m, 0, sizeof *m);
	in = evbuffer_new();
	evbuffer_add(in, s, len);
	assert_int_equal(http1_parse_response(in, &test_limits, 0, m, &err), 1);
	evbuffer_free(in);
}

/* The example of RFC 6455 section 1.3. */
static void
test_accept_key(void **state)
{
	char out[WS_ACCEPT_LEN + 1];

	(void)state;
	assert_int_equal(ws_accept_key(TEST_KEY, out), 0);
	assert_string_equal(out, TEST_ACCEPT);
}

/* Random keys are 24 characters of padded base64 and differ. */
static void
test_random_key(void **state)
{
	char a[WS_KEY_LEN + 1], b[WS_KEY_LEN + 1];

	(void)state;
	ws_random_key(a);
	ws_random_key(b);
	assert_int_equal(strlen(a), WS_KEY_LEN);
	assert_int_equal(strlen(b), WS_KEY_LEN);
	assert_string_equal(a + 22, "==");
	assert_string_not_equal(a, b);
}

/* Our own client request passes our own server check. */
static void
test_client_request_accepted(void **state)
{
	const char *extra[] = { "X-Auth: token", "X-YR-Tunnel-Protocol: 2",
		NULL };
	const struct hfield *h;
	struct http1_msg m;
	char key[WS_KEY_LEN + 1], *req, *why = NULL;
	const char *got;

	(void)state;
	ws_random_key(key);
	req = ws_client_request("gw.example:8080", "/tunnel/sbx1", key, extra);
	assert_non_null(req);
	parse_request(req, &m);
	assert_int_equal(ws_check_upgrade_request(&m, &got, &why), 0);
	assert_null(why);
	assert_string_equal(got, key);
	assert_string_equal(m.m_target, "/tunnel/sbx1");
	h = http1_msg_find(&m, "host");
	assert_non_null(h);
	assert_string_equal(h->value, "gw.example:8080");
	h = http1_msg_find(&m, "x-auth");
	assert_non_null(h);
	assert_string_equal(h->value, "token");
	http1_msg_reset(&m);
	free(req);

	req = ws_client_request("h", "/", key, NULL);
	assert_non_null(req);
	free(req);
}

/* Inputs that would break the request head are refused. */
static void
test_client_request_unsafe(void **state)
{
	const char *crlf[] = { "X-Auth: a\r\nX-Evil: 1", NULL };
	const char *nocolon[] = { "X-Auth", NULL };
	const char *spacename[] = { "X Auth: a", NULL };

	(void)state;
	assert_null(ws_client_request("a b", "/", TEST_KEY, NULL));
	assert_null(ws_client_request("", "/", TEST_KEY, NULL));
	assert_null(ws_client_request("h", "x", TEST_KEY, NULL));
	assert_null(ws_client_request("h", "/a b", TEST_KEY, NULL));
	assert_null(ws_client_request("h", "/a\r\nX: 1", TEST_KEY, NULL));
	assert_null(ws_client_request("h", "/", "short", NULL));
	assert_null(ws_client_request("h", "/", TEST_KEY, crlf));
	assert_null(ws_client_request("h", "/", TEST_KEY, nocolon));
	assert_null(ws_client_request("h", "/", TEST_KEY, spacename));
}

/* A request head and the reason its check must give (NULL: accepted). */
struct upgrade_case {
	const char *uc_head;
	const char *uc_why;
};

#define UC_VERSION "Sec-WebSocket-Version: 13\r\n"
#define UC_KEY "Sec-WebSocket-Key: " TEST_KEY "\r\n"
#define UC_UPGRADE "Connection: Upgrade\r\nUpgrade: websocket\r\n"

static const struct upgrade_case upgrade_cases[] = {
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION UC_KEY "\r\n",
	    NULL },
	{ "GET /t HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, upgrade\r\n"
	  "Upgrade: WebSocket\r\n" UC_VERSION UC_KEY "Content-Length: 0\r\n"
	  "\r\n",
	    NULL },
	{ "POST /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION UC_KEY "\r\n",
	    "a WebSocket upgrade must use GET" },
	{ "get /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION UC_KEY "\r\n",
	    "a WebSocket upgrade must use GET" },
	{ "GET /t HTTP/1.0\r\n" UC_UPGRADE UC_VERSION UC_KEY "\r\n",
	    "a WebSocket upgrade needs HTTP/1.1" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION UC_KEY
	  "Content-Length: 3\r\n\r\n",
	    "a WebSocket upgrade request must not have a body" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION UC_KEY
	  "Transfer-Encoding: chunked\r\n\r\n",
	    "a WebSocket upgrade request must not have a body" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n" UC_VERSION
		UC_KEY "\r\n",
	    "Connection does not list upgrade" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n"
	  "Upgrade: websocket\r\n" UC_VERSION UC_KEY "\r\n",
	    "Connection does not list upgrade" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n" UC_VERSION
		UC_KEY "\r\n",
	    "Upgrade does not list websocket" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\n"
	  "Upgrade: h2c\r\n" UC_VERSION UC_KEY "\r\n",
	    "Upgrade does not list websocket" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_KEY "\r\n",
	    "Sec-WebSocket-Version is missing" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION UC_VERSION
		UC_KEY "\r\n",
	    "Sec-WebSocket-Version appears more than once" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE
	  "Sec-WebSocket-Version: 8\r\n" UC_KEY "\r\n",
	    "Sec-WebSocket-Version 8 is not supported (only 13)" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION "\r\n",
	    "Sec-WebSocket-Key is missing" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION UC_KEY UC_KEY
	  "\r\n",
	    "Sec-WebSocket-Key appears more than once" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION
	  "Sec-WebSocket-Key: abc\r\n\r\n",
	    "Sec-WebSocket-Key is not 16 bytes in base64" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION
	  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ\r\n\r\n",
	    "Sec-WebSocket-Key is not 16 bytes in base64" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION
	  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25j!Q==\r\n\r\n",
	    "Sec-WebSocket-Key is not 16 bytes in base64" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION
	  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==dGhl\r\n\r\n",
	    "Sec-WebSocket-Key is not 16 bytes in base64" },
	{ "GET /t HTTP/1.1\r\nHost: h\r\n" UC_UPGRADE UC_VERSION
	  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=a\r\n\r\n",
	    "Sec-WebSocket-Key is not 16 bytes in base64" },
};

/* Every refusal of an upgrade request has its own reason. */
static void
test_upgrade_request_checks(void **state)
{
	struct http1_msg m;
	const char *key;
	char *why;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof upgrade_cases / sizeof upgrade_cases[0]; i++) {
		const struct upgrade_case *uc = &upgrade_cases[i];

		parse_request(uc->uc_head, &m);
		why = NULL;
		key = "unset";
		if (uc->uc_why == NULL) {
			assert_int_equal(
			    ws_check_upgrade_request(&m, &key, &why), 0);
			assert_null(why);
			assert_string_equal(key, TEST_KEY);
		} else {
			assert_int_equal(
			    ws_check_upgrade_request(&m, &key, &why), -1);
			assert_null(key);
			assert_non_null(why);
			if (strcmp(why, uc->uc_why) != 0)
				fail_msg("case %zu: \"%s\", want \"%s\"", i,
				    why, uc->uc_why);
			free(why);
		}
		http1_msg_reset(&m);
	}
}

/* Our own 101 passes our own client check, extra headers and all. */
static void
test_accept_response_accepted(void **state)
{
	struct evbuffer *b;
	struct http1_msg m;
	char accept[WS_ACCEPT_LEN + 1], *why = NULL;
	size_t len;

	(void)state;
	b = evbuffer_new();
	assert_int_equal(ws_accept_key(TEST_KEY, accept), 0);
	ws_write_accept_response(b, accept, "X-Gateway: akgw\r\n");
	len = evbuffer_get_length(b);
	parse_response((const char *)evbuffer_pullup(b, len), len, &m);
	assert_int_equal(m.m_status, 101);
	assert_non_null(http1_msg_find(&m, "x-gateway"));
	assert_int_equal(ws_check_accept_response(&m, TEST_KEY, &why), 0);
	assert_null(why);
	http1_msg_reset(&m);
	evbuffer_free(b);

	b = evbuffer_new();
	ws_write_accept_response(b, accept, NULL);
	len = evbuffer_get_length(b);
	parse_response((const char *)evbuffer_pullup(b, len), len, &m);
	assert_int_equal(ws_check_accept_response(&m, TEST_KEY, &why), 0);
	http1_msg_reset(&m);
	evbuffer_free(b);
}

#define RC_UPGRADE "Upgrade: websocket\r\nConnection: Upgrade\r\n"
#define RC_ACCEPT "Sec-WebSocket-Accept: " TEST_ACCEPT "\r\n"

static const struct upgrade_case response_cases[] = {
	{ "HTTP/1.1 101 Switching Protocols\r\n" RC_UPGRADE RC_ACCEPT "\r\n",
	    NULL },
	{ "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
	    "the server answered 404 instead of 101 Switching Protocols" },
	{ "HTTP/1.1 200 OK\r\n" RC_UPGRADE RC_ACCEPT
	  "Content-Length: 0\r\n\r\n",
	    "the server answered 200 instead of 101 Switching Protocols" },
	{ "HTTP/1.1 101 Switching Protocols\r\nConnection: "
	  "Upgrade\r\n" RC_ACCEPT "\r\n",
	    "the 101 response has no Upgrade: websocket" },
	{ "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n" RC_ACCEPT
	  "\r\n",
	    "the 101 response has no Connection: upgrade" },
	{ "HTTP/1.1 101 Switching Protocols\r\n" RC_UPGRADE "\r\n",
	    "Sec-WebSocket-Accept is missing" },
	{ "HTTP/1.1 101 Switching Protocols\r\n" RC_UPGRADE RC_ACCEPT RC_ACCEPT
	  "\r\n",
	    "Sec-WebSocket-Accept appears more than once" },
	{ "HTTP/1.1 101 Switching Protocols\r\n" RC_UPGRADE
	  "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOO=\r\n\r\n",
	    "Sec-WebSocket-Accept does not match our key" },
	{ "HTTP/1.1 101 Switching Protocols\r\n" RC_UPGRADE RC_ACCEPT
	  "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
	    "the server chose a WebSocket extension we did not offer" },
	{ "HTTP/1.1 101 Switching Protocols\r\n" RC_UPGRADE RC_ACCEPT
	  "Sec-WebSocket-Protocol: chat\r\n\r\n",
	    "the server chose a subprotocol we did not offer" },
};

/*
 * For a proxy that passed a client's offers on (a head, as the core reads
 * one): the server's extension and subprotocol are the client's to
 * check; the status, Upgrade, Connection and the accept key are ours.
 */
static void
test_accept_relayed(void **state)
{
	struct http1_msg m;
	struct head h;
	char *why;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof response_cases / sizeof response_cases[0]; i++) {
		const struct upgrade_case *rc = &response_cases[i];
		int offer = rc->uc_why != NULL &&
		    strstr(rc->uc_why, "did not offer") != NULL;

		parse_response(rc->uc_head, strlen(rc->uc_head), &m);
		http1_msg_head(&m, &h);
		why = NULL;
		if (rc->uc_why == NULL || offer) {
			assert_int_equal(
			    ws_check_accept_relayed(&h, TEST_KEY, &why), 0);
			assert_null(why);
		} else {
			assert_int_equal(
			    ws_check_accept_relayed(&h, TEST_KEY, &why), -1);
			assert_non_null(why);
			if (strcmp(why, rc->uc_why) != 0)
				fail_msg("case %zu: \"%s\", want \"%s\"", i,
				    why, rc->uc_why);
			free(why);
		}
		http1_msg_reset(&m);
	}
}

/* Every refusal of a 101 response has its own reason. */
static void
test_accept_response_checks(void **state)
{
	struct http1_msg m;
	char *why;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof response_cases / sizeof response_cases[0]; i++) {
		const struct upgrade_case *rc = &response_cases[i];

		parse_response(rc->uc_head, strlen(rc->uc_head), &m);
		why = NULL;
		if (rc->uc_why == NULL) {
			assert_int_equal(
			    ws_check_accept_response(&m, TEST_KEY, &why), 0);
			assert_null(why);
		} else {
			assert_int_equal(
			    ws_check_accept_response(&m, TEST_KEY, &why), -1);
			assert_non_null(why);
			if (strcmp(why, rc->uc_why) != 0)
				fail_msg("case %zu: \"%s\", want \"%s\"", i,
				    why, rc->uc_why);
			free(why);
		}
		http1_msg_reset(&m);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accept_key),
		cmocka_unit_test(test_random_key),
		cmocka_unit_test(test_client_request_accepted),
		cmocka_unit_test(test_client_request_unsafe),
		cmocka_unit_test(test_upgrade_request_checks),
		cmocka_unit_test(test_accept_response_accepted),
		cmocka_unit_test(test_accept_response_checks),
		cmocka_unit_test(test_accept_relayed),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
