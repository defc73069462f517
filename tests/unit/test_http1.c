/* Unit tests for lib/http1.c: one test per parsing rule. */
#include <sys/types.h>

#include <event2/buffer.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http1.h"

static const struct http1_limits test_limits = {
	.max_head = 8192,
	.max_line = 1024,
	.max_headers = 32,
};

/* Result of one parse, with the bytes left in the input buffer. */
struct test_parse {
	struct http1_msg msg;
	enum http1_err err;
	int rv;
	size_t left;
};

/* Parse len bytes of s as a request (or a response) in one piece. */
static int
test_parse_len(struct test_parse *t, const char *s, size_t len, int request,
    int head_request, const struct http1_limits *lim)
{
	struct evbuffer *in;

	memset(t, 0, sizeof *t);
	in = evbuffer_new();
	assert_non_null(in);
	evbuffer_add(in, s, len);
	if (request)
		t->rv = http1_parse_request(in, lim, &t->msg, &t->err);
	else
		t->rv = http1_parse_response(
		    in, lim, head_request, &t->msg, &t->err);
	t->left = evbuffer_get_length(in);
	evbuffer_free(in);
	return (t->rv);
}

/* Parse the string s as a request with the default limits. */
static int
test_req(struct test_parse *t, const char *s)
{
	return (test_parse_len(t, s, strlen(s), 1, 0, &test_limits));
}

/* Parse the string s as a response with the default limits. */
static int
test_resp(struct test_parse *t, const char *s, int head_request)
{
	return (test_parse_len(t, s, strlen(s), 0, head_request, &test_limits));
}

/* Assert that request s is refused with error e. */
static void
test_req_fails(const char *s, enum http1_err e)
{
	struct test_parse t;

	assert_int_equal(test_req(&t, s), -1);
	assert_int_equal(t.err, e);
	assert_null(t.msg.m_buf);
	assert_null(t.msg.m_headers);
	http1_msg_reset(&t.msg);
}

/* Assert that response s is refused with error e. */
static void
test_resp_fails(const char *s, enum http1_err e)
{
	struct test_parse t;

	assert_int_equal(test_resp(&t, s, 0), -1);
	assert_int_equal(t.err, e);
	http1_msg_reset(&t.msg);
}

/* Assert that request s parses with body kind body and length cl. */
static void
test_req_body(const char *s, enum http1_body body, uint64_t cl)
{
	struct test_parse t;

	assert_int_equal(test_req(&t, s), 1);
	assert_int_equal(t.err, HTTP1_E_NONE);
	assert_int_equal(t.msg.m_body, body);
	assert_int_equal(t.msg.m_content_length, cl);
	http1_msg_reset(&t.msg);
}

/* A plain request: every parsed field, trimmed values, head drained. */
static void
test_request_simple(void **state)
{
	struct test_parse t;
	const char *s = "GET /a?b=c HTTP/1.1\r\n"
			"Host: example.com\r\n"
			"X-Pad:  \t  spaced value \t \r\n"
			"X-Empty:\r\n"
			"\r\n";

	(void)state;
	assert_int_equal(test_req(&t, s), 1);
	assert_int_equal(t.err, HTTP1_E_NONE);
	assert_int_equal(t.left, 0);
	assert_int_equal(t.msg.m_head_len, strlen(s));
	assert_string_equal(t.msg.m_method, "GET");
	assert_int_equal(t.msg.m_method_len, 3);
	assert_string_equal(t.msg.m_target, "/a?b=c");
	assert_int_equal(t.msg.m_target_len, 6);
	assert_int_equal(t.msg.m_minor, 1);
	assert_int_equal(t.msg.m_nheaders, 3);
	assert_string_equal(t.msg.m_headers[0].name, "Host");
	assert_int_equal(t.msg.m_headers[0].name_len, 4);
	assert_string_equal(t.msg.m_headers[0].value, "example.com");
	assert_int_equal(t.msg.m_headers[0].value_len, 11);
	assert_string_equal(t.msg.m_headers[1].value, "spaced value");
	assert_int_equal(t.msg.m_headers[1].value_len, 12);
	assert_string_equal(t.msg.m_headers[2].name, "X-Empty");
	assert_string_equal(t.msg.m_headers[2].value, "");
	assert_int_equal(t.msg.m_headers[2].value_len, 0);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_NONE);
	assert_int_equal(t.msg.m_flags, 0);
	http1_msg_reset(&t.msg);
	assert_null(t.msg.m_buf);
	assert_int_equal(t.msg.m_nheaders, 0);
}

/* An incomplete head returns 0 and leaves the input untouched. */
static void
test_request_incomplete(void **state)
{
	struct http1_msg m;
	struct evbuffer *in;
	enum http1_err err;
	const char *a = "GET / HTTP/1.1\r\nHost: a\r\n";

	(void)state;
	memset(&m, 0, sizeof m);
	in = evbuffer_new();
	evbuffer_add(in, a, strlen(a));
	assert_int_equal(http1_parse_request(in, &test_limits, &m, &err), 0);
	assert_int_equal(err, HTTP1_E_NONE);
	assert_int_equal(evbuffer_get_length(in), strlen(a));
	assert_int_equal(m.m_scan, strlen(a));
	assert_null(m.m_buf);
	evbuffer_add(in, "\r", 1);
	assert_int_equal(http1_parse_request(in, &test_limits, &m, &err), 0);
	evbuffer_add(in, "\nBODY", 5);
	assert_int_equal(http1_parse_request(in, &test_limits, &m, &err), 1);
	assert_int_equal(m.m_head_len, strlen(a) + 2);
	assert_int_equal(evbuffer_get_length(in), 4);
	http1_msg_reset(&m);
	evbuffer_free(in);
}

/* One or two empty lines before the request line are ignored, not three. */
static void
test_request_leading_crlf(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(
	    test_req(&t, "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 1);
	assert_string_equal(t.msg.m_method, "GET");
	assert_int_equal(t.msg.m_head_len, 29);
	http1_msg_reset(&t.msg);
	assert_int_equal(
	    test_req(&t, "\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 1);
	assert_string_equal(t.msg.m_target, "/");
	http1_msg_reset(&t.msg);
	test_req_fails("\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	    HTTP1_E_BAD_REQUEST_LINE);
	/* Responses get no such leniency. */
	test_resp_fails("\r\nHTTP/1.1 200 OK\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
}

/* The request line is method SP target SP version with single spaces. */
static void
test_request_line_bad(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(
	    test_req(&t, "M-SEARCH! * HTTP/1.1\r\nHost: a\r\n\r\n"), 1);
	assert_string_equal(t.msg.m_method, "M-SEARCH!");
	assert_string_equal(t.msg.m_target, "*");
	http1_msg_reset(&t.msg);

	test_req_fails(
	    "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET /  HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    " GET / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET / HTTP/1.1 \r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails("GET /\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails("GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n",
	    HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET / http/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET / HTTP/1.10\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
	test_req_fails(
	    "GET / HTTP/11\r\nHost: a\r\n\r\n", HTTP1_E_BAD_REQUEST_LINE);
}

/* Only HTTP/1.0 and HTTP/1.1; other well-formed versions are a 505. */
static void
test_request_version(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(test_req(&t, "GET / HTTP/1.0\r\n\r\n"), 1);
	assert_int_equal(t.msg.m_minor, 0);
	http1_msg_reset(&t.msg);
	test_req_fails(
	    "GET / HTTP/2.0\r\nHost: a\r\n\r\n", HTTP1_E_BAD_VERSION);
	test_req_fails(
	    "GET / HTTP/1.2\r\nHost: a\r\n\r\n", HTTP1_E_BAD_VERSION);
	test_req_fails("GET / HTTP/0.9\r\n\r\n", HTTP1_E_BAD_VERSION);
	assert_int_equal(http1_err_status(HTTP1_E_BAD_VERSION), 505);
}

/* A start line over max_line is refused early, before the head ends. */
static void
test_request_line_too_long(void **state)
{
	struct http1_limits lim = test_limits;
	struct test_parse t;
	char buf[256];

	(void)state;
	lim.max_line = 20;
	/* "GET /0123456 HTTP/1.1" is 21 bytes. */
	snprintf(buf, sizeof buf, "GET /0123456 HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_int_equal(test_parse_len(&t, buf, strlen(buf), 1, 0, &lim), -1);
	assert_int_equal(t.err, HTTP1_E_LINE_TOO_LONG);
	assert_int_equal(http1_err_status(t.err), 431);
	/* Exactly max_line bytes is fine. */
	snprintf(buf, sizeof buf, "GET /012345 HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_int_equal(test_parse_len(&t, buf, strlen(buf), 1, 0, &lim), 1);
	http1_msg_reset(&t.msg);
	/* Leading empty lines do not count towards the line. */
	snprintf(
	    buf, sizeof buf, "\r\n\r\nGET /012345 HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_int_equal(test_parse_len(&t, buf, strlen(buf), 1, 0, &lim), 1);
	http1_msg_reset(&t.msg);
	/* Detected without a line end, long before max_head. */
	memset(buf, 'A', 21);
	assert_int_equal(test_parse_len(&t, buf, 21, 1, 0, &lim), -1);
	assert_int_equal(t.err, HTTP1_E_LINE_TOO_LONG);
	assert_int_equal(test_parse_len(&t, buf, 20, 1, 0, &lim), 0);
	/* Status lines too. */
	assert_int_equal(test_parse_len(&t, "HTTP/1.1 200 OK, a long reason",
			     30, 0, 0, &lim),
	    -1);
	assert_int_equal(t.err, HTTP1_E_LINE_TOO_LONG);
}

/* A head over max_head is refused, complete or not. */
static void
test_head_too_large(void **state)
{
	struct http1_limits lim = test_limits;
	struct test_parse t;
	const char *s = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
	size_t len = strlen(s);
	char big[200];

	(void)state;
	lim.max_head = len;
	assert_int_equal(test_parse_len(&t, s, len, 1, 0, &lim), 1);
	http1_msg_reset(&t.msg);
	lim.max_head = len - 1;
	assert_int_equal(test_parse_len(&t, s, len, 1, 0, &lim), -1);
	assert_int_equal(t.err, HTTP1_E_HEAD_TOO_LARGE);
	assert_int_equal(http1_err_status(t.err), 431);
	assert_string_equal(http1_err_code(t.err), "header_too_large");
	/* Incomplete: refused once the buffer passes the limit. */
	lim.max_head = 100;
	memset(big, 'a', sizeof big);
	memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
	assert_int_equal(test_parse_len(&t, big, 100, 1, 0, &lim), 0);
	assert_int_equal(test_parse_len(&t, big, 101, 1, 0, &lim), -1);
	assert_int_equal(t.err, HTTP1_E_HEAD_TOO_LARGE);
	/* Body bytes after a complete head do not count. */
	lim.max_head = len;
	memcpy(big, s, len);
	assert_int_equal(test_parse_len(&t, big, sizeof big, 1, 0, &lim), 1);
	assert_int_equal(t.left, sizeof big - len);
	http1_msg_reset(&t.msg);
}

/*
 * Parse len bytes of s as a request, added as two chains cut at cut, so
 * the scan resumes mid-run where the first chain ended.
 */
static int
test_parse_cut(struct test_parse *t, const char *s, size_t len, size_t cut,
    const struct http1_limits *lim)
{
	struct evbuffer *in;

	memset(t, 0, sizeof *t);
	in = evbuffer_new();
	assert_non_null(in);
	evbuffer_add_reference(in, s, cut, NULL, NULL);
	t->rv = http1_parse_request(in, lim, &t->msg, &t->err);
	if (t->rv == 0) {
		evbuffer_add_reference(in, s + cut, len - cut, NULL, NULL);
		t->rv = http1_parse_request(in, lim, &t->msg, &t->err);
	}
	t->left = evbuffer_get_length(in);
	http1_msg_reset(&t->msg);
	evbuffer_free(in);
	return (t->rv);
}

/*
 * The limits refuse exactly the first byte past them, whatever the run of
 * ordinary bytes around it and wherever the input is cut: every prefix of a
 * long start line and of a long field, under every small limit.
 */
static void
test_limits_exact(void **state)
{
	static const char *leads[] = { "", "\r\n", "\r\n\r\n" };
	struct http1_limits lim = test_limits;
	struct test_parse t;
	char buf[128];
	size_t lead, lim_v, k, cut;
	int rv, want;
	u_int l;

	(void)state;
	for (l = 0; l < 3; l++) {
		lead = strlen(leads[l]);
		memset(buf, 'a', sizeof buf);
		memcpy(buf, leads[l], lead);
		memcpy(buf + lead, "GET /", 5);
		for (lim_v = 6; lim_v < 60; lim_v++) {
			lim = test_limits;
			lim.max_line = lim_v;
			for (k = 1; k <= 80; k++) {
				want = k > lim_v + lead ? -1 : 0;
				for (cut = 0; cut <= k; cut += 7) {
					rv = test_parse_cut(
					    &t, buf, k, cut, &lim);
					assert_int_equal(rv, want);
					if (rv == -1)
						assert_int_equal(t.err,
						    HTTP1_E_LINE_TOO_LONG);
				}
			}
		}
	}

	/* The head limit in a field, and ahead of the line limit. */
	memset(buf, 'b', sizeof buf);
	memcpy(buf, "GET / HTTP/1.1\r\nX: ", 19);
	for (lim_v = 19; lim_v < 100; lim_v++) {
		lim = test_limits;
		lim.max_head = lim_v;
		for (k = 1; k <= sizeof buf; k++) {
			for (cut = 0; cut <= k; cut += 5) {
				rv = test_parse_cut(&t, buf, k, cut, &lim);
				assert_int_equal(rv, k > lim_v ? -1 : 0);
				if (rv == -1)
					assert_int_equal(
					    t.err, HTTP1_E_HEAD_TOO_LARGE);
			}
		}
	}
	lim = test_limits;
	lim.max_head = 10;
	lim.max_line = 10;
	assert_int_equal(
	    test_parse_len(&t, "GET /aaaaaaaa", 11, 1, 0, &lim), -1);
	assert_int_equal(t.err, HTTP1_E_HEAD_TOO_LARGE);

	/* A CR ends a run: the byte after it is checked, not skipped. */
	assert_int_equal(
	    test_parse_cut(&t, "GET /a\rbcdef HTTP/1.1", 21, 7, &test_limits),
	    -1);
	assert_int_equal(t.err, HTTP1_E_BARE_CR);
}

/* More than max_headers fields is a 431. */
static void
test_too_many_headers(void **state)
{
	struct http1_limits lim = test_limits;
	struct test_parse t;
	const char *s = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\n"
			"B: 2\r\n\r\n";

	(void)state;
	lim.max_headers = 3;
	assert_int_equal(test_parse_len(&t, s, strlen(s), 1, 0, &lim), 1);
	assert_int_equal(t.msg.m_nheaders, 3);
	http1_msg_reset(&t.msg);
	lim.max_headers = 2;
	assert_int_equal(test_parse_len(&t, s, strlen(s), 1, 0, &lim), -1);
	assert_int_equal(t.err, HTTP1_E_TOO_MANY_HEADERS);
	assert_int_equal(http1_err_status(t.err), 431);
}

/* A CR not followed by LF anywhere in the head is refused. */
static void
test_bare_cr(void **state)
{
	(void)state;
	test_req_fails("GET / HTTP/1.1\r\nHost: a\rb\r\n\r\n", HTTP1_E_BARE_CR);
	test_req_fails("GET /\r HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BARE_CR);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n", HTTP1_E_BARE_CR);
	test_req_fails("GET / HTTP/1.1\r\r\nHost: a\r\n\r\n", HTTP1_E_BARE_CR);
	test_resp_fails("HTTP/1.1 200 OK\rX\r\n\r\n", HTTP1_E_BARE_CR);
}

/* An LF without CR is refused as soon as it arrives, not at 431. */
static void
test_bare_lf(void **state)
{
	struct test_parse t;

	(void)state;
	test_req_fails("GET / HTTP/1.1\nHost: a\n\n", HTTP1_E_BARE_LF);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\n\n", HTTP1_E_BARE_LF);
	test_req_fails(
	    "GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", HTTP1_E_BARE_LF);
	test_req_fails("\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1_E_BARE_LF);
	test_resp_fails("HTTP/1.1 200 OK\n\n", HTTP1_E_BARE_LF);
	/* No head end yet, but the bare LF alone is enough. */
	assert_int_equal(test_req(&t, "GET / HTTP/1.1\n"), -1);
	assert_int_equal(t.err, HTTP1_E_BARE_LF);
}

/* A field line starting with whitespace (obs-fold) is refused. */
static void
test_obs_fold(void **state)
{
	(void)state;
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n",
	    HTTP1_E_OBS_FOLD);
	test_req_fails("GET / HTTP/1.1\r\n\tHost: a\r\n\r\n", HTTP1_E_OBS_FOLD);
	test_req_fails("GET / HTTP/1.1\r\n Host: a\r\n\r\n", HTTP1_E_OBS_FOLD);
}

/* Whitespace between a field name and its colon is refused. */
static void
test_space_before_colon(void **state)
{
	(void)state;
	test_req_fails(
	    "GET / HTTP/1.1\r\nHost : a\r\n\r\n", HTTP1_E_SPACE_BEFORE_COLON);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding\t: chunked\r\n\r\n",
	    HTTP1_E_SPACE_BEFORE_COLON);
	test_resp_fails("HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\n",
	    HTTP1_E_SPACE_BEFORE_COLON);
}

/* Field names are 1*tchar followed directly by a colon. */
static void
test_bad_header_name(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(test_req(&t,
			     "GET / HTTP/1.1\r\nHost: a\r\n"
			     "X-!#$%&'*+.^_`|~0: v\r\n\r\n"),
	    1);
	assert_string_equal(t.msg.m_headers[1].name, "X-!#$%&'*+.^_`|~0");
	http1_msg_reset(&t.msg);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n",
	    HTTP1_E_BAD_HEADER_NAME);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n",
	    HTTP1_E_BAD_HEADER_NAME);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\nX@Y: v\r\n\r\n",
	    HTTP1_E_BAD_HEADER_NAME);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\nX Y: v\r\n\r\n",
	    HTTP1_E_BAD_HEADER_NAME);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\r\nX\xc3\xa9: v\r\n\r\n",
	    HTTP1_E_BAD_HEADER_NAME);
}

/* Field values allow HTAB, SP, VCHAR and obs-text; no NUL or CTL. */
static void
test_bad_header_value(void **state)
{
	struct test_parse t;
	const char nul[] = "GET / HTTP/1.1\r\nHost: a\0b\r\n\r\n";

	(void)state;
	assert_int_equal(test_req(&t,
			     "GET / HTTP/1.1\r\nHost: a\r\n"
			     "X: caf\xc3\xa9\tand \"quotes\"\r\n\r\n"),
	    1);
	assert_string_equal(
	    t.msg.m_headers[1].value, "caf\xc3\xa9\tand \"quotes\"");
	http1_msg_reset(&t.msg);

	assert_int_equal(
	    test_parse_len(&t, nul, sizeof nul - 1, 1, 0, &test_limits), -1);
	assert_int_equal(t.err, HTTP1_E_BAD_HEADER_VALUE);
	test_req_fails(
	    "GET / HTTP/1.1\r\nHost: a\x01\r\n\r\n", HTTP1_E_BAD_HEADER_VALUE);
	test_req_fails(
	    "GET / HTTP/1.1\r\nHost: a\x7f\r\n\r\n", HTTP1_E_BAD_HEADER_VALUE);
	test_req_fails("GET / HTTP/1.1\r\nHost: a\x1b[0m\r\n\r\n",
	    HTTP1_E_BAD_HEADER_VALUE);
}

/* Content-Length is 1*DIGIT up to 2^62; 0 means no body. */
static void
test_content_length(void **state)
{
	(void)state;
	test_req_body("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 42\r\n"
		      "\r\n",
	    HTTP1_BODY_LENGTH, 42);
	test_req_body("POST / HTTP/1.1\r\nHost: a\r\ncontent-length:007 \r\n"
		      "\r\n",
	    HTTP1_BODY_LENGTH, 7);
	test_req_body("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
		      "\r\n",
	    HTTP1_BODY_NONE, 0);
	test_req_body("POST / HTTP/1.1\r\nHost: a\r\n"
		      "Content-Length: 4611686018427387904\r\n\r\n",
	    HTTP1_BODY_LENGTH, (uint64_t)1 << 62);

	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Content-Length: 4611686018427387905\r\n\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Content-Length: 99999999999999999999999\r\n\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n"
		       "\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n"
		       "\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 2\r\n"
		       "\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n"
		       "\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x5\r\n"
		       "\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n"
		       "\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
}

/* Any second Content-Length field is refused, even an identical one. */
static void
test_dup_content_length(void **state)
{
	(void)state;
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
		       "Content-Length: 5\r\n\r\n",
	    HTTP1_E_DUP_CONTENT_LENGTH);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
		       "content-length: 6\r\n\r\n",
	    HTTP1_E_DUP_CONTENT_LENGTH);
	test_resp_fails("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
			"Content-Length: 5\r\n\r\n",
	    HTTP1_E_DUP_CONTENT_LENGTH);
}

/* Content-Length with Transfer-Encoding is refused in both directions. */
static void
test_cl_and_te(void **state)
{
	(void)state;
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
		       "Transfer-Encoding: chunked\r\n\r\n",
	    HTTP1_E_CL_AND_TE);
	test_req_fails(
	    "POST / HTTP/1.1\r\nHost: a\r\n"
	    "Transfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
	    HTTP1_E_CL_AND_TE);
	test_resp_fails("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
			"Transfer-Encoding: chunked\r\n\r\n",
	    HTTP1_E_CL_AND_TE);
	assert_string_equal(http1_err_code(HTTP1_E_CL_AND_TE),
	    "content_length_and_transfer_encoding");
	assert_int_equal(http1_err_status(HTTP1_E_CL_AND_TE), 400);
}

/* A request Transfer-Encoding of exactly chunked frames a chunked body. */
static void
test_te_chunked(void **state)
{
	(void)state;
	test_req_body("POST / HTTP/1.1\r\nHost: a\r\n"
		      "Transfer-Encoding: chunked\r\n\r\n",
	    HTTP1_BODY_CHUNKED, 0);
	test_req_body("POST / HTTP/1.1\r\nHost: a\r\n"
		      "Transfer-Encoding:  CHUNKED \t\r\n\r\n",
	    HTTP1_BODY_CHUNKED, 0);
}

/* chunked not last, chunked twice, or empty elements: 400. */
static void
test_te_bad(void **state)
{
	(void)state;
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding: chunked, gzip\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding: chunked, chunked\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_req_fails(
	    "POST / HTTP/1.1\r\nHost: a\r\n"
	    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_req_fails(
	    "POST / HTTP/1.1\r\nHost: a\r\n"
	    "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding: chunked,\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding: , chunked\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding:\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding: \"chunked\"\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_resp_fails("HTTP/1.1 200 OK\r\n"
			"Transfer-Encoding: chunked, chunked\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
}

/* Codings other than chunked in a request are a 501. */
static void
test_te_unsupported(void **state)
{
	(void)state;
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding: gzip, chunked\r\n\r\n",
	    HTTP1_E_UNSUPPORTED_TE);
	test_req_fails(
	    "POST / HTTP/1.1\r\nHost: a\r\n"
	    "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
	    HTTP1_E_UNSUPPORTED_TE);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding: gzip\r\n\r\n",
	    HTTP1_E_UNSUPPORTED_TE);
	test_req_fails("POST / HTTP/1.1\r\nHost: a\r\n"
		       "Transfer-Encoding: identity\r\n\r\n",
	    HTTP1_E_UNSUPPORTED_TE);
	assert_int_equal(http1_err_status(HTTP1_E_UNSUPPORTED_TE), 501);
}

/* Transfer-Encoding in an HTTP/1.0 message is refused. */
static void
test_te_http10(void **state)
{
	(void)state;
	test_req_fails("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_resp_fails("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n"
			"\r\n",
	    HTTP1_E_BAD_TRANSFER_ENCODING);
	test_req_body("POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\n",
	    HTTP1_BODY_LENGTH, 3);
}

/* HTTP/1.1 requests need exactly one Host; HTTP/1.0 may omit it. */
static void
test_host(void **state)
{
	struct test_parse t;

	(void)state;
	test_req_fails("GET / HTTP/1.1\r\n\r\n", HTTP1_E_MISSING_HOST);
	test_req_fails("GET / HTTP/1.1\r\nX: a\r\n\r\n", HTTP1_E_MISSING_HOST);
	test_req_fails(
	    "GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", HTTP1_E_DUP_HOST);
	test_req_fails(
	    "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", HTTP1_E_DUP_HOST);
	assert_int_equal(test_req(&t, "GET / HTTP/1.0\r\n\r\n"), 1);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_req(&t, "GET / HTTP/1.1\r\nHost:\r\n\r\n"), 1);
	assert_string_equal(http1_msg_find(&t.msg, "host")->value, "");
	http1_msg_reset(&t.msg);
	/* Responses may carry anything called Host. */
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\nHost: a\r\n"
			     "Host: b\r\n\r\n",
			     0),
	    1);
	http1_msg_reset(&t.msg);
}

/* Connection, Upgrade and Expect set flags; lists span several fields. */
static void
test_flags(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(
	    test_req(&t,
		"GET / HTTP/1.1\r\nHost: a\r\n"
		"Connection: Keep-Alive ,, Upgrade\r\nConnection: close\r\n"
		"Upgrade: websocket\r\nExpect: 100-Continue\r\n\r\n"),
	    1);
	assert_int_equal(t.msg.m_flags,
	    HTTP1_F_CONN_CLOSE | HTTP1_F_CONN_KEEPALIVE | HTTP1_F_CONN_UPGRADE |
		HTTP1_F_UPGRADE | HTTP1_F_EXPECT_CONTINUE);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_req(&t,
			     "GET / HTTP/1.1\r\nHost: a\r\n"
			     "Connection: closed, upgrades\r\nExpect: "
			     "100-continue2\r\n\r\n"),
	    1);
	assert_int_equal(t.msg.m_flags, 0);
	http1_msg_reset(&t.msg);
}

/* A response with Content-Length leaves its body in the buffer. */
static void
test_response_simple(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\n"
			     "Content-Length: 5\r\n\r\nhello",
			     0),
	    1);
	assert_int_equal(t.msg.m_status, 200);
	assert_string_equal(t.msg.m_reason, "OK");
	assert_int_equal(t.msg.m_minor, 1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_LENGTH);
	assert_int_equal(t.msg.m_content_length, 5);
	assert_int_equal(t.left, 5);
	assert_null(t.msg.m_method);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t,
			     "HTTP/1.0 404 Not  Found\t\xff\r\n"
			     "Content-Length: 0\r\n\r\n",
			     0),
	    1);
	assert_int_equal(t.msg.m_minor, 0);
	assert_int_equal(t.msg.m_status, 404);
	assert_string_equal(t.msg.m_reason, "Not  Found\t\xff");
	assert_int_equal(t.msg.m_body, HTTP1_BODY_NONE);
	http1_msg_reset(&t.msg);
}

/* Status line: version SP 3DIGIT [SP reason]; reason may be empty. */
static void
test_status_line(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(test_resp(&t, "HTTP/1.1 599 \r\n\r\n", 0), 1);
	assert_int_equal(t.msg.m_status, 599);
	assert_string_equal(t.msg.m_reason, "");
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t, "HTTP/1.1 100\r\n\r\n", 0), 1);
	assert_int_equal(t.msg.m_status, 100);
	assert_string_equal(t.msg.m_reason, "");
	http1_msg_reset(&t.msg);

	test_resp_fails("HTTP/1.1 20 OK\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/1.1 2000\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/1.1 600 X\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/1.1 099 X\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/1.1  200 OK\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/1.1 2x0 OK\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/2 200 OK\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/2.0 200 OK\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/1.1 200 O\x01K\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("HTTP/1.1 200 O\x7f\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	test_resp_fails("ICY 200 OK\r\n\r\n", HTTP1_E_BAD_STATUS_LINE);
	assert_int_equal(http1_err_status(HTTP1_E_BAD_STATUS_LINE), 502);
}

/* Responses to HEAD, 1xx, 204 and 304 have no body whatever they say. */
static void
test_response_no_body(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\n"
			     "Content-Length: 10\r\n\r\n",
			     1),
	    1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_NONE);
	assert_int_equal(t.msg.m_content_length, 0);
	assert_true(t.msg.m_flags & HTTP1_F_HEAD_REQUEST);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\n"
			     "Transfer-Encoding: chunked\r\n\r\n",
			     1),
	    1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_NONE);
	http1_msg_reset(&t.msg);
	assert_int_equal(
	    test_resp(&t, "HTTP/1.1 204 No Content\r\n\r\n", 0), 1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_NONE);
	assert_int_equal(t.msg.m_flags & HTTP1_F_HEAD_REQUEST, 0);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 304 Not Modified\r\n"
			     "Content-Length: 99\r\n\r\n",
			     0),
	    1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_NONE);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 100 Continue\r\n\r\n"
			     "HTTP/1.1 200 OK\r\n\r\n",
			     0),
	    1);
	assert_int_equal(t.msg.m_status, 100);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_NONE);
	assert_int_equal(t.left, 19);
	http1_msg_reset(&t.msg);
	assert_int_equal(
	    test_resp(&t,
		"HTTP/1.1 101 Switching Protocols\r\n"
		"Upgrade: websocket\r\nConnection: upgrade\r\n\r\n",
		0),
	    1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_NONE);
	assert_int_equal(t.msg.m_flags, HTTP1_F_UPGRADE | HTTP1_F_CONN_UPGRADE);
	http1_msg_reset(&t.msg);
	/* Framing syntax is still checked. */
	test_resp_fails("HTTP/1.1 204 No Content\r\nContent-Length: x\r\n\r\n",
	    HTTP1_E_BAD_CONTENT_LENGTH);
}

/* Response framing: chunked, other codings, or read until close. */
static void
test_response_framing(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(test_resp(&t, "HTTP/1.1 200 OK\r\n\r\nbody", 0), 1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_EOF);
	assert_int_equal(t.left, 4);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\n"
			     "Transfer-Encoding: chunked\r\n\r\n",
			     0),
	    1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_CHUNKED);
	assert_int_equal(t.msg.m_flags, 0);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\n"
			     "Transfer-Encoding: gzip, chunked\r\n\r\n",
			     0),
	    1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_CHUNKED);
	assert_int_equal(t.msg.m_flags, HTTP1_F_TE_OTHER);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\n"
			     "Transfer-Encoding: gzip\r\n\r\n",
			     0),
	    1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_EOF);
	assert_int_equal(t.msg.m_flags, HTTP1_F_TE_OTHER);
	http1_msg_reset(&t.msg);
	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\n"
			     "Transfer-Encoding: chunked, gzip\r\n\r\n",
			     0),
	    1);
	assert_int_equal(t.msg.m_body, HTTP1_BODY_EOF);
	assert_int_equal(t.msg.m_flags, HTTP1_F_TE_OTHER);
	http1_msg_reset(&t.msg);
}

/* Compare two successfully parsed messages field by field. */
static void
test_same_msg(const struct http1_msg *a, const struct http1_msg *b)
{
	size_t i;

	assert_int_equal(a->m_head_len, b->m_head_len);
	assert_int_equal(a->m_status, b->m_status);
	assert_int_equal(a->m_minor, b->m_minor);
	assert_int_equal(a->m_body, b->m_body);
	assert_int_equal(a->m_content_length, b->m_content_length);
	assert_int_equal(a->m_flags, b->m_flags);
	assert_int_equal(a->m_method_len, b->m_method_len);
	if (a->m_method != NULL)
		assert_string_equal(a->m_method, b->m_method);
	if (a->m_target != NULL)
		assert_string_equal(a->m_target, b->m_target);
	if (a->m_reason != NULL)
		assert_string_equal(a->m_reason, b->m_reason);
	assert_int_equal(a->m_nheaders, b->m_nheaders);
	for (i = 0; i < a->m_nheaders; i++) {
		assert_string_equal(a->m_headers[i].name, b->m_headers[i].name);
		assert_string_equal(
		    a->m_headers[i].value, b->m_headers[i].value);
	}
}

/* Feed s one byte at a time and check the result matches one piece. */
static void
test_bytewise_one(const char *s, int request)
{
	struct test_parse t;
	struct http1_msg m;
	struct evbuffer *in;
	enum http1_err err;
	size_t i, len = strlen(s);
	int rv = 0;

	test_parse_len(&t, s, len, request, 0, &test_limits);
	memset(&m, 0, sizeof m);
	in = evbuffer_new();
	for (i = 0; i < len; i++) {
		/* A chain per byte, so the scan crosses chain ends. */
		evbuffer_add_reference(in, s + i, 1, NULL, NULL);
		if (request)
			rv = http1_parse_request(in, &test_limits, &m, &err);
		else
			rv = http1_parse_response(
			    in, &test_limits, 0, &m, &err);
		if (rv != 0)
			break;
		assert_int_equal(evbuffer_get_length(in), i + 1);
	}
	assert_int_equal(rv, t.rv);
	if (rv == -1)
		assert_int_equal(err, t.err);
	else {
		assert_int_equal(rv, 1);
		test_same_msg(&m, &t.msg);
	}
	http1_msg_reset(&m);
	http1_msg_reset(&t.msg);
	evbuffer_free(in);
}

/* Byte-at-a-time parsing gives the same result as one-shot parsing. */
static void
test_bytewise(void **state)
{
	(void)state;
	test_bytewise_one(
	    "\r\nPOST /x HTTP/1.1\r\nHost: a\r\n"
	    "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
	    1);
	test_bytewise_one("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", 0);
	test_bytewise_one("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 1);
	test_bytewise_one("GET / HTTP/1.1\r\nHost: a\r\n\n", 1);
	test_bytewise_one("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 1);
	test_bytewise_one("\r\n\r\n\r\n", 1);
}

/* A parse drains exactly one head; the next request stays buffered. */
static void
test_pipelined(void **state)
{
	struct http1_msg m;
	struct evbuffer *in;
	enum http1_err err;
	const char *s = "POST /1 HTTP/1.1\r\nHost: a\r\n"
			"Content-Length: 3\r\n\r\nabc"
			"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n";
	char body[3];

	(void)state;
	memset(&m, 0, sizeof m);
	in = evbuffer_new();
	evbuffer_add(in, s, strlen(s));
	assert_int_equal(http1_parse_request(in, &test_limits, &m, &err), 1);
	assert_string_equal(m.m_target, "/1");
	assert_int_equal(m.m_body, HTTP1_BODY_LENGTH);
	assert_int_equal(evbuffer_get_length(in), strlen(s) - m.m_head_len);
	assert_int_equal(evbuffer_remove(in, body, 3), 3);
	assert_memory_equal(body, "abc", 3);
	/* Reuse without an explicit reset frees the previous head. */
	assert_int_equal(http1_parse_request(in, &test_limits, &m, &err), 1);
	assert_string_equal(m.m_target, "/2");
	assert_int_equal(evbuffer_get_length(in), 0);
	http1_msg_reset(&m);
	evbuffer_free(in);
}

/* http1_msg_find ignores case; http1_list_has matches whole elements. */
static void
test_find_and_list(void **state)
{
	struct test_parse t;

	(void)state;
	assert_int_equal(test_req(&t,
			     "GET / HTTP/1.1\r\nHost: a\r\n"
			     "X-Thing: 1\r\nx-thing: 2\r\n\r\n"),
	    1);
	assert_string_equal(http1_msg_find(&t.msg, "X-THING")->value, "1");
	assert_null(http1_msg_find(&t.msg, "X-Thin"));
	assert_null(http1_msg_find(&t.msg, "X-Things"));
	http1_msg_reset(&t.msg);

	assert_true(http1_list_has("a, B ,c", 7, "b"));
	assert_true(http1_list_has(" ,\tc\t", 5, "c"));
	assert_true(http1_list_has("close", 5, "close"));
	assert_false(http1_list_has("closed", 6, "close"));
	/* A token with capitals (a field name) matches too. */
	assert_true(http1_list_has("foo, bar", 8, "Bar"));
	assert_true(http1_list_has("X-Hop", 5, "x-hop"));
	assert_false(http1_list_has("foo", 3, "Foo2"));
	assert_false(http1_list_has("clos", 4, "close"));
	assert_false(http1_list_has("close", 4, "close"));
	assert_false(http1_list_has("", 0, "close"));
	assert_false(http1_list_has("a b", 3, "a"));
}

/* Every error has a status, a snake_case code and a sentence. */
static void
test_err_tables(void **state)
{
	const char *code, *msg, *p;
	int e, status;

	(void)state;
	for (e = 1; e < HTTP1_E__COUNT; e++) {
		status = http1_err_status(e);
		assert_true(status >= 400 && status <= 599);
		code = http1_err_code(e);
		assert_non_null(code);
		assert_true(strlen(code) > 0);
		for (p = code; *p != '\0'; p++)
			assert_true((*p >= 'a' && *p <= 'z') || *p == '_');
		msg = http1_err_message(e);
		assert_non_null(msg);
		assert_true(msg[0] >= 'A' && msg[0] <= 'Z');
		assert_int_equal(msg[strlen(msg) - 1], '.');
	}
	assert_int_equal(http1_err_status(HTTP1_E_BAD_REQUEST_LINE), 400);
	assert_string_equal(
	    http1_err_code(HTTP1_E_BAD_REQUEST_LINE), "bad_request_line");
	assert_int_equal(http1_err_status(HTTP1_E__COUNT), 500);
	assert_non_null(http1_err_code(HTTP1_E__COUNT));
	assert_non_null(http1_err_message(HTTP1_E__COUNT));
}

/* Result of decoding a chunked body. */
struct test_chunked {
	struct http1_chunked ck;
	enum http1_err err;
	int rv;
	size_t moved;
	char out[256];
	size_t out_len;
	size_t left;
};

/* Decode len bytes of s as a chunked body in one call. */
static int
test_chunked_len(struct test_chunked *t, const char *s, size_t len, size_t max)
{
	struct evbuffer *in, *out;

	memset(t, 0, sizeof *t);
	in = evbuffer_new();
	out = evbuffer_new();
	evbuffer_add(in, s, len);
	t->rv = http1_chunked_decode(&t->ck, in, out, max, &t->moved, &t->err);
	t->out_len = evbuffer_get_length(out);
	assert_true(t->out_len < sizeof t->out);
	evbuffer_remove(out, t->out, t->out_len);
	t->left = evbuffer_get_length(in);
	evbuffer_free(out);
	evbuffer_free(in);
	return (t->rv);
}

/* Decode the string s as a chunked body with no output limit. */
static int
test_chunked(struct test_chunked *t, const char *s)
{
	return (test_chunked_len(t, s, strlen(s), SIZE_MAX));
}

/* Assert that chunked body s is refused with error e. */
static void
test_chunked_fails(const char *s, enum http1_err e)
{
	struct test_chunked t;

	assert_int_equal(test_chunked(&t, s), -1);
	assert_int_equal(t.err, e);
}

/* A simple chunked body decodes to its data. */
static void
test_chunked_simple(void **state)
{
	struct test_chunked t;

	(void)state;
	assert_int_equal(test_chunked(&t,
			     "5\r\nhello\r\nA\r\n, world!!!\r\n"
			     "0\r\n\r\n"),
	    1);
	assert_int_equal(t.err, HTTP1_E_NONE);
	assert_int_equal(t.moved, 15);
	assert_int_equal(t.out_len, 15);
	assert_memory_equal(t.out, "hello, world!!!", 15);
	assert_int_equal(t.left, 0);
	assert_int_equal(test_chunked(&t, "0\r\n\r\n"), 1);
	assert_int_equal(t.moved, 0);
	assert_int_equal(test_chunked(&t, "5\r\nhel"), 0);
	assert_int_equal(t.moved, 3);
	assert_int_equal(t.left, 0);
}

/* Chunk sizes are 1..16 hex digits, nothing else, within the limit. */
static void
test_chunked_size_strict(void **state)
{
	struct test_chunked t;

	(void)state;
	assert_int_equal(test_chunked(&t, "00000000000000aB\r\n"), 0);
	assert_int_equal(t.ck.ck_left, 0xab);
	assert_int_equal(test_chunked(&t, "10000000000\r\n"), 0);
	assert_int_equal(t.ck.ck_left, HTTP1_MAX_CHUNK);

	test_chunked_fails("0x10\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("+a\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("-1\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails(" a\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("a \r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("a\t\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("g\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("0000000000000000a\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("10000000001\r\n", HTTP1_E_CHUNK_TOO_LARGE);
	test_chunked_fails("ffffffffffffffff\r\n", HTTP1_E_CHUNK_TOO_LARGE);
}

/* Chunk extensions are checked and discarded. */
static void
test_chunked_extensions(void **state)
{
	struct test_chunked t;

	(void)state;
	assert_int_equal(test_chunked(&t,
			     "5;foo=bar\r\nhello\r\n"
			     "0 ; last ;q = \"a \\\"b\\\\\" ; z\r\n\r\n"),
	    1);
	assert_int_equal(t.out_len, 5);
	assert_memory_equal(t.out, "hello", 5);

	test_chunked_fails("5;\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5;=x\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5;a=\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5;a=\"x\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5;a=b c\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5;a=b \r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5;a\x01\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5;a=\"\x01\"\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5 x\r\n", HTTP1_E_BAD_CHUNK_SIZE);
}

/* A size line longer than HTTP1_MAX_CHUNK_LINE is refused early. */
static void
test_chunked_line_too_long(void **state)
{
	struct test_chunked t;
	char *s;
	size_t len = HTTP1_MAX_CHUNK_LINE + 2;

	(void)state;
	s = malloc(len + 1);
	assert_non_null(s);
	memset(s, 'x', len);
	memcpy(s, "1;", 2);
	memcpy(s + len - 2, "\r\n", 2);
	/* Exactly HTTP1_MAX_CHUNK_LINE bytes before CRLF is fine. */
	assert_int_equal(test_chunked_len(&t, s, len, SIZE_MAX), 0);
	assert_int_equal(t.ck.ck_left, 1);
	s[len - 2] = 'x';
	s[len - 1] = 'x';
	assert_int_equal(test_chunked_len(&t, s, len, SIZE_MAX), -1);
	assert_int_equal(t.err, HTTP1_E_BAD_CHUNK_SIZE);
	free(s);
}

/* Trailer fields are checked like header fields and discarded. */
static void
test_chunked_trailers(void **state)
{
	struct test_chunked t;
	char *s;
	size_t len;

	(void)state;
	assert_int_equal(test_chunked(&t,
			     "3\r\nabc\r\n0\r\nX-Sum: 1\r\n"
			     "Y:\t2 \r\n\r\n"),
	    1);
	assert_int_equal(t.out_len, 3);
	assert_int_equal(t.left, 0);
	assert_int_equal(t.ck.ck_trailer, 19);

	test_chunked_fails("0\r\nBad Name: x\r\n\r\n", HTTP1_E_BAD_TRAILER);
	test_chunked_fails("0\r\nX: 1\r\n folded\r\n\r\n", HTTP1_E_BAD_TRAILER);
	test_chunked_fails("0\r\nX : 1\r\n\r\n", HTTP1_E_BAD_TRAILER);
	test_chunked_fails("0\r\nX: \x01\r\n\r\n", HTTP1_E_BAD_TRAILER);
	test_chunked_fails("0\r\nnocolon\r\n\r\n", HTTP1_E_BAD_TRAILER);
	test_chunked_fails("0\r\nX: 1\n\r\n", HTTP1_E_BAD_TRAILER);
	test_chunked_fails("0\r\nX: 1\r\n\n", HTTP1_E_BAD_TRAILER);
	test_chunked_fails("0\r\nX: a\rb\r\n\r\n", HTTP1_E_BAD_TRAILER);

	/* The trailer section, final CRLF included, is bounded. */
	len = 3 + HTTP1_MAX_TRAILER;
	s = malloc(len + 1);
	assert_non_null(s);
	memset(s, 'v', len);
	memcpy(s, "0\r\nX: ", 6);
	memcpy(s + len - 4, "\r\n\r\n", 4);
	assert_int_equal(test_chunked_len(&t, s, len, SIZE_MAX), 1);
	assert_int_equal(t.ck.ck_trailer, HTTP1_MAX_TRAILER);
	memcpy(s + len - 4, "v\r\n\r", 4);
	s[len] = '\n';
	assert_int_equal(test_chunked_len(&t, s, len + 1, SIZE_MAX), -1);
	assert_int_equal(t.err, HTTP1_E_BAD_TRAILER);
	/* No line end at all: refused once over the limit. */
	memset(s + 3, 'v', len - 3);
	assert_int_equal(test_chunked_len(&t, s, len, SIZE_MAX), -1);
	assert_int_equal(t.err, HTTP1_E_BAD_TRAILER);
	free(s);
}

/* Decode s with a trailer keeper fed one byte at a time: the result. */
static int
test_chunked_keep(const char *s, struct http1_trailers *tr, enum http1_err *err)
{
	struct http1_chunked ck;
	struct evbuffer *in, *out;
	size_t i, moved;
	int rv = 0;

	memset(&ck, 0, sizeof ck);
	memset(tr, 0, sizeof *tr);
	ck.ck_keep = tr;
	in = evbuffer_new();
	out = evbuffer_new();
	for (i = 0; s[i] != '\0' && rv == 0; i++) {
		evbuffer_add(in, s + i, 1);
		rv = http1_chunked_decode(&ck, in, out, SIZE_MAX, &moved, err);
	}
	evbuffer_free(out);
	evbuffer_free(in);
	return (rv);
}

/*
 * With ck_keep, trailer fields reach the caller, cut as head fields are;
 * framing, routing and authentication fields are dropped; too many is an
 * error, as is a section over HTTP1_MAX_TRAILER.
 */
static void
test_chunked_trailers_kept(void **state)
{
	struct http1_trailers tr;
	enum http1_err err;
	char *s, *p;
	size_t i, len;

	(void)state;
	assert_int_equal(test_chunked_keep("3\r\nabc\r\n0\r\n"
					   "grpc-status: 0\r\n"
					   "Content-Length: 5\r\n"
					   "X-Checksum:\t ab12 \r\n"
					   "transfer-encoding: chunked\r\n"
					   "HOST: evil\r\n"
					   "Authorization: x\r\n"
					   "Trailer: x\r\n"
					   "Connection: close\r\n"
					   "Set-Cookie: a=b\r\n"
					   "grpc-message: \r\n\r\n",
			     &tr, &err),
	    1);
	assert_int_equal(tr.tr_nfields, 3);
	assert_string_equal(tr.tr_fields[0].name, "grpc-status");
	assert_int_equal(tr.tr_fields[0].name_len, 11);
	assert_string_equal(tr.tr_fields[0].value, "0");
	assert_int_equal(tr.tr_fields[0].value_len, 1);
	assert_string_equal(tr.tr_fields[1].name, "X-Checksum");
	assert_string_equal(tr.tr_fields[1].value, "ab12");
	assert_int_equal(tr.tr_fields[1].value_len, 4);
	assert_string_equal(tr.tr_fields[2].name, "grpc-message");
	assert_int_equal(tr.tr_fields[2].value_len, 0);
	http1_trailers_reset(&tr);
	assert_null(tr.tr_buf);

	/* None sent, or only forbidden ones: nothing kept, nothing made. */
	assert_int_equal(test_chunked_keep("0\r\n\r\n", &tr, &err), 1);
	assert_int_equal(tr.tr_nfields, 0);
	assert_null(tr.tr_fields);
	http1_trailers_reset(&tr);
	assert_int_equal(
	    test_chunked_keep("0\r\nContent-Length: 1\r\n\r\n", &tr, &err), 1);
	assert_int_equal(tr.tr_nfields, 0);
	assert_null(tr.tr_fields);
	http1_trailers_reset(&tr);

	/* Malformed fields are refused as without a keeper. */
	assert_int_equal(
	    test_chunked_keep("0\r\nBad Name: x\r\n\r\n", &tr, &err), -1);
	assert_int_equal(err, HTTP1_E_BAD_TRAILER);
	http1_trailers_reset(&tr);

	/* HTTP1_MAX_TRAILER_FIELDS fields pass; one more does not. */
	len = 8 + (HTTP1_MAX_TRAILER_FIELDS + 1) * 8;
	s = malloc(len);
	assert_non_null(s);
	p = s + sprintf(s, "0\r\n");
	for (i = 0; i < HTTP1_MAX_TRAILER_FIELDS; i++)
		p += sprintf(p, "x%02zu: v\r\n", i);
	sprintf(p, "\r\n");
	assert_int_equal(test_chunked_keep(s, &tr, &err), 1);
	assert_int_equal(tr.tr_nfields, HTTP1_MAX_TRAILER_FIELDS);
	assert_string_equal(
	    tr.tr_fields[HTTP1_MAX_TRAILER_FIELDS - 1].name, "x63");
	http1_trailers_reset(&tr);
	sprintf(p, "y: v\r\n\r\n");
	assert_int_equal(test_chunked_keep(s, &tr, &err), -1);
	assert_int_equal(err, HTTP1_E_BAD_TRAILER);
	http1_trailers_reset(&tr);
	free(s);

	/* The section is bounded by HTTP1_MAX_TRAILER with a keeper too. */
	len = 3 + HTTP1_MAX_TRAILER + 1;
	s = malloc(len + 1);
	assert_non_null(s);
	memset(s, 'v', len);
	memcpy(s, "0\r\nX: ", 6);
	memcpy(s + len - 4, "\r\n\r\n", 4);
	s[len] = '\0';
	assert_int_equal(test_chunked_keep(s, &tr, &err), -1);
	assert_int_equal(err, HTTP1_E_BAD_TRAILER);
	http1_trailers_reset(&tr);
	/* One byte less fits, and is kept. */
	memcpy(s + len - 5, "\r\n\r\n", 5);
	s[len - 1] = '\0';
	assert_int_equal(test_chunked_keep(s, &tr, &err), 1);
	assert_int_equal(tr.tr_nfields, 1);
	assert_int_equal(tr.tr_fields[0].value_len, HTTP1_MAX_TRAILER - 7);
	http1_trailers_reset(&tr);
	free(s);

	assert_true(http1_trailer_forbidden("CONTENT-length", 14));
	assert_false(http1_trailer_forbidden("content-lengthx", 15));
	assert_false(http1_trailer_forbidden("content-lengt", 13));
	assert_false(http1_trailer_forbidden("grpc-status", 11));
}

/* Feeding a chunked body one byte at a time gives the same data. */
static void
test_chunked_bytewise(void **state)
{
	struct http1_chunked ck;
	struct evbuffer *in, *out;
	enum http1_err err;
	const char *s = "4;x=\"y\"\r\nWiki\r\n5\r\npedia\r\n"
			"E\r\n in\r\n\r\nchunks.\r\n0\r\nT: v\r\n\r\nNEXT";
	size_t i, moved, total = 0;
	char buf[64];
	int rv = 0;

	(void)state;
	memset(&ck, 0, sizeof ck);
	in = evbuffer_new();
	out = evbuffer_new();
	for (i = 0; i < strlen(s); i++) {
		evbuffer_add_reference(in, s + i, 1, NULL, NULL);
		rv = http1_chunked_decode(&ck, in, out, SIZE_MAX, &moved, &err);
		assert_int_not_equal(rv, -1);
		total += moved;
		if (rv == 1)
			break;
	}
	assert_int_equal(rv, 1);
	assert_int_equal(total, 23);
	assert_int_equal(evbuffer_remove(out, buf, sizeof buf), 23);
	assert_memory_equal(buf, "Wikipedia in\r\n\r\nchunks.", 23);
	/* Called again after the end, it stays done and moves nothing. */
	evbuffer_add(in, "NEXT", 4);
	assert_int_equal(
	    http1_chunked_decode(&ck, in, out, SIZE_MAX, &moved, &err), 1);
	assert_int_equal(moved, 0);
	assert_int_equal(evbuffer_get_length(in), 4);
	evbuffer_free(out);
	evbuffer_free(in);
}

/* Chunk data must be followed by exactly CRLF. */
static void
test_chunked_missing_crlf(void **state)
{
	struct test_chunked t;

	(void)state;
	test_chunked_fails("5\r\nhelloX\r\n0\r\n\r\n", HTTP1_E_BAD_CHUNK);
	test_chunked_fails("5\r\nhello\rX0\r\n\r\n", HTTP1_E_BAD_CHUNK);
	test_chunked_fails("5\r\nhello\n0\r\n\r\n", HTTP1_E_BAD_CHUNK);
	test_chunked_fails("5\r\nhello0\r\n\r\n", HTTP1_E_BAD_CHUNK);
	/* A wrong first byte is refused without waiting for the second. */
	assert_int_equal(test_chunked(&t, "5\r\nhelloX"), -1);
	assert_int_equal(t.err, HTTP1_E_BAD_CHUNK);
	assert_int_equal(test_chunked(&t, "5\r\nhello\r"), 0);
}

/* Bare LF or CR in a chunk-size line is refused. */
static void
test_chunked_bare(void **state)
{
	(void)state;
	test_chunked_fails("5\nhello\r\n0\r\n\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5\r\nhello\r\n0\n\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails("5\r\r\nhello\r\n0\r\n\r\n", HTTP1_E_BAD_CHUNK_SIZE);
	test_chunked_fails(
	    "5;a\rb\r\nhello\r\n0\r\n\r\n", HTTP1_E_BAD_CHUNK_SIZE);
}

/* Bytes after the last chunk (the next message) stay in the input. */
static void
test_chunked_next_message(void **state)
{
	struct test_chunked t;

	(void)state;
	assert_int_equal(test_chunked(&t,
			     "2\r\nhi\r\n0\r\n\r\n"
			     "GET / HTTP/1.1\r\n"),
	    1);
	assert_int_equal(t.out_len, 2);
	assert_int_equal(t.left, 16);
}

/* At most max data bytes move per call; framing still advances. */
static void
test_chunked_max(void **state)
{
	struct http1_chunked ck;
	struct evbuffer *in, *out;
	enum http1_err err;
	const char *s = "5\r\nhello\r\n2\r\nhi\r\n0\r\n\r\n";
	size_t moved;

	(void)state;
	memset(&ck, 0, sizeof ck);
	in = evbuffer_new();
	out = evbuffer_new();
	evbuffer_add(in, s, strlen(s));
	assert_int_equal(
	    http1_chunked_decode(&ck, in, out, 3, &moved, &err), 0);
	assert_int_equal(moved, 3);
	assert_int_equal(evbuffer_get_length(out), 3);
	assert_int_equal(
	    http1_chunked_decode(&ck, in, out, 0, &moved, &err), 0);
	assert_int_equal(moved, 0);
	assert_int_equal(evbuffer_get_length(out), 3);
	assert_int_equal(
	    http1_chunked_decode(&ck, in, out, 3, &moved, &err), 0);
	assert_int_equal(moved, 3);
	assert_int_equal(
	    http1_chunked_decode(&ck, in, out, 3, &moved, &err), 1);
	assert_int_equal(moved, 1);
	assert_int_equal(evbuffer_get_length(out), 7);
	assert_int_equal(evbuffer_get_length(in), 0);
	evbuffer_free(out);
	evbuffer_free(in);
}

/* The encoder writes size lines, data CRLFs and the last chunk. */
static void
test_chunk_writers(void **state)
{
	struct http1_chunked ck;
	struct evbuffer *buf, *out;
	enum http1_err err;
	size_t moved;
	char s[64];
	size_t len;

	(void)state;
	buf = evbuffer_new();
	out = evbuffer_new();
	http1_chunk_header(buf, 0x1f);
	http1_chunk_trailer(buf);
	http1_chunk_last(buf);
	len = evbuffer_get_length(buf);
	assert_int_equal(len, 11);
	evbuffer_copyout(buf, s, len);
	assert_memory_equal(s, "1f\r\n\r\n0\r\n\r\n", 11);
	evbuffer_drain(buf, len);

	/* Round trip through the decoder. */
	http1_chunk_header(buf, 3);
	evbuffer_add(buf, "abc", 3);
	http1_chunk_trailer(buf);
	http1_chunk_last(buf);
	memset(&ck, 0, sizeof ck);
	assert_int_equal(
	    http1_chunked_decode(&ck, buf, out, SIZE_MAX, &moved, &err), 1);
	assert_int_equal(moved, 3);
	evbuffer_free(out);
	evbuffer_free(buf);
}

/* Run every test. */
/* Reason phrases: the registered ones, "" for the rest, for every code. */
static void
test_reason(void **state)
{
	int st, n;

	(void)state;
	assert_string_equal(http1_reason(200), "OK");
	assert_string_equal(http1_reason(100), "Continue");
	assert_string_equal(http1_reason(102), "Processing");
	assert_string_equal(http1_reason(103), "Early Hints");
	assert_string_equal(http1_reason(308), "Permanent Redirect");
	assert_string_equal(http1_reason(413), "Content Too Large");
	assert_string_equal(
	    http1_reason(511), "Network Authentication Required");
	assert_string_equal(http1_reason(299), "");
	assert_string_equal(http1_reason(0), "");
	assert_string_equal(http1_reason(999), "");
	/*
	 * The binary search finds every one of the 60 registered codes: a
	 * table out of order would lose some.
	 */
	for (st = 100, n = 0; st < 600; st++)
		n += http1_reason(st)[0] != '\0';
	assert_int_equal(n, 60);
}

/* The neutral view of a request and of responses: fields, authority, framing. */
static void
test_msg_head(void **state)
{
	struct test_parse t;
	struct head h;

	(void)state;
	assert_int_equal(test_req(&t,
			     "POST /a?b HTTP/1.1\r\nHost: x.example\r\n"
			     "Content-Length: 5\r\nExpect: 100-continue\r\n"
			     "Connection: close\r\n\r\n"),
	    1);
	http1_msg_head(&t.msg, &h);
	assert_true(head_method_is(&h, "POST"));
	assert_false(head_method_is(&h, "post"));
	assert_memory_equal(h.h_target, "/a?b", 4);
	assert_int_equal(h.h_target_len, 4);
	assert_int_equal(h.h_authority_len, 9);
	assert_memory_equal(h.h_authority, "x.example", 9);
	assert_int_equal(h.h_version, 11);
	assert_int_equal(h.h_status, 0);
	assert_int_equal(h.h_nfields, 4);
	assert_int_equal(
	    h.h_flags, HEAD_F_LENGTH | HEAD_F_CONTINUE | HEAD_F_CLOSE);
	assert_int_equal(h.h_length, 5);
	assert_string_equal(head_find(&h, "EXPECT")->value, "100-continue");
	assert_null(head_find(&h, "upgrade"));
	http1_msg_reset(&t.msg);

	assert_int_equal(test_req(&t,
			     "GET / HTTP/1.0\r\nConnection: upgrade\r\n"
			     "Upgrade: websocket\r\n\r\n"),
	    1);
	http1_msg_head(&t.msg, &h);
	assert_null(h.h_authority);
	assert_int_equal(h.h_version, 10);
	assert_int_equal(h.h_flags, HEAD_F_LENGTH | HEAD_F_UPGRADE);
	assert_int_equal(h.h_length, 0);
	http1_msg_reset(&t.msg);

	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 204 No Content\r\n"
			     "Host: not-an-authority\r\n\r\n",
			     0),
	    1);
	http1_msg_head(&t.msg, &h);
	assert_null(h.h_method);
	assert_null(h.h_authority);
	assert_int_equal(h.h_status, 204);
	assert_int_equal(h.h_flags, HEAD_F_NO_BODY);
	http1_msg_reset(&t.msg);

	assert_int_equal(test_resp(&t,
			     "HTTP/1.1 200 OK\r\n"
			     "Transfer-Encoding: chunked\r\n\r\n",
			     0),
	    1);
	http1_msg_head(&t.msg, &h);
	assert_int_equal(h.h_flags, 0);
	http1_msg_reset(&t.msg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_simple),
		cmocka_unit_test(test_request_incomplete),
		cmocka_unit_test(test_request_leading_crlf),
		cmocka_unit_test(test_request_line_bad),
		cmocka_unit_test(test_request_version),
		cmocka_unit_test(test_request_line_too_long),
		cmocka_unit_test(test_head_too_large),
		cmocka_unit_test(test_limits_exact),
		cmocka_unit_test(test_too_many_headers),
		cmocka_unit_test(test_bare_cr),
		cmocka_unit_test(test_bare_lf),
		cmocka_unit_test(test_obs_fold),
		cmocka_unit_test(test_space_before_colon),
		cmocka_unit_test(test_bad_header_name),
		cmocka_unit_test(test_bad_header_value),
		cmocka_unit_test(test_content_length),
		cmocka_unit_test(test_dup_content_length),
		cmocka_unit_test(test_cl_and_te),
		cmocka_unit_test(test_te_chunked),
		cmocka_unit_test(test_te_bad),
		cmocka_unit_test(test_te_unsupported),
		cmocka_unit_test(test_te_http10),
		cmocka_unit_test(test_host),
		cmocka_unit_test(test_flags),
		cmocka_unit_test(test_response_simple),
		cmocka_unit_test(test_status_line),
		cmocka_unit_test(test_response_no_body),
		cmocka_unit_test(test_response_framing),
		cmocka_unit_test(test_bytewise),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_find_and_list),
		cmocka_unit_test(test_err_tables),
		cmocka_unit_test(test_chunked_simple),
		cmocka_unit_test(test_chunked_size_strict),
		cmocka_unit_test(test_chunked_extensions),
		cmocka_unit_test(test_chunked_line_too_long),
		cmocka_unit_test(test_chunked_trailers),
		cmocka_unit_test(test_chunked_trailers_kept),
		cmocka_unit_test(test_chunked_bytewise),
		cmocka_unit_test(test_chunked_missing_crlf),
		cmocka_unit_test(test_chunked_bare),
		cmocka_unit_test(test_chunked_next_message),
		cmocka_unit_test(test_chunked_max),
		cmocka_unit_test(test_chunk_writers),
		cmocka_unit_test(test_reason),
		cmocka_unit_test(test_msg_head),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
