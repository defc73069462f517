/*
 * The gateway's tunnel sandbox role, pieces that need no client: request
 * header filtering for frames (§9.2, §10.1), the downstream response head
 * (§10.3) through the HTTP/1 engine's sink over its in-memory transport,
 * response limits, tombstones (§8.8) and the bounded set of replaced
 * sessions, and the credit bookkeeping of a streamed response (§4.8).
 * The end-to-end behaviour is covered by tests/regress/tunnel_gw_*.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/event.h>

/* The files under test, for their static functions. */
#include "tunnel_body.c"
#include "tunnel_req.c"

/* Parse a request head from text into m. */
static void
parse_head(const char *text, struct http1_msg *m)
{
	static const struct http1_limits lim = { 65536, 8192, 200 };
	struct evbuffer *b = evbuffer_new();
	enum http1_err err = HTTP1_E_NONE;

	evbuffer_add(b, text, strlen(text));
	memset(m, 0, sizeof *m);
	assert_int_equal(http1_parse_request(b, &lim, m, &err), 1);
	evbuffer_free(b);
}

/* The headers a frame carries drop hop-by-hop and framing fields. */
static void
test_req_headers(void **state)
{
	struct http1_msg req;
	struct tunproto_msg m;

	(void)state;
	parse_head("POST /x?q=1 HTTP/1.1\r\n"
		   "Host: sandbox\r\n"
		   "Connection: close, X-First-Hop\r\n"
		   "Connection: x-second-hop\r\n"
		   "X-First-Hop: 1\r\n"
		   "X-Second-Hop: 2\r\n"
		   "Keep-Alive: timeout=5\r\n"
		   "X-Tag: a\r\n"
		   "X-Tag: b\r\n"
		   "Expect: 100-continue\r\n"
		   "Authorization: Bearer t\r\n"
		   "Content-Type: text/plain\r\n"
		   "Proxy-Authorization: secret\r\n"
		   "TE: trailers\r\n"
		   "Content-Length: 12\r\n\r\n",
	    &req);
	memset(&m, 0, sizeof m);
	tx_req_headers(&req, &m);
	assert_int_equal(m.m_nheaders, 4);
	assert_string_equal(m.m_headers[0].h_name, "X-Tag");
	assert_string_equal(m.m_headers[0].h_value, "a");
	assert_string_equal(m.m_headers[1].h_name, "X-Tag");
	assert_string_equal(m.m_headers[1].h_value, "b");
	assert_string_equal(m.m_headers[2].h_name, "Authorization");
	assert_string_equal(m.m_headers[3].h_name, "Content-Type");
	tunproto_msg_free(&m);
	http1_msg_reset(&req);
	assert_true(tunnel_hop_field("Transfer-Encoding"));
	assert_true(tunnel_hop_field("UPGRADE"));
	assert_false(tunnel_hop_field("Content-Type"));
}

/*
 * A tunnel, a Port B connection run by the HTTP/1 engine over the
 * in-memory transport, and an exchange on it.
 */
struct fixture {
	struct event_base *base;
	struct h1x_mem *peer;
	struct gw g;
	struct tunnel t;
	struct tunnel_dconn d;
	struct tunnel_xchg x;
	int closed;
};

/* The test's engine owner: it keeps the request head for the exchange. */
static void
fx_head_cb(
    struct h1s *h, void *arg, const struct head *req, const struct http1_msg *m)
{
	struct fixture *f = arg;

	(void)h;
	f->d.d_head = req;
	f->d.d_req = m;
}

static void
fx_close_cb(struct h1s *h, void *arg, const char *reason)
{
	(void)h;
	(void)reason;
	((struct fixture *)arg)->closed = 1;
}

static void
fx_free_cb(void *arg)
{
	(void)arg;
}

static const struct h1s_hooks fx_hooks = {
	.on_head = fx_head_cb,
	.on_close = fx_close_cb,
	.on_free = fx_free_cb,
};

static const struct h1s_conf fx_conf = {
	.hc_name = "test",
	.hc_limits = &tdc_limits,
	.hc_head_ms = 5000,
	.hc_idle_ms = 5000,
	.hc_linger_ms = 50,
};

/* Run the loop a few passes, without waiting. */
static void
fx_spin(struct fixture *f)
{
	int i;

	for (i = 0; i < 10; i++)
		event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof *f);

	f->base = event_base_new();
	f->g.g_base = f->base;
	f->t.t_gw = &f->g;
	f->t.t_name = (char *)"sbx";
	tombs_init(&f->t.t_tombs, 1024, 30000);
	TAILQ_INIT(&f->t.t_xchgs);
	TAILQ_INIT(&f->t.t_links);
	TAILQ_INIT(&f->t.t_dconns);
	f->d.d_tunnel = &f->t;
	/* What the engine writes stays in its output until the test reads. */
	f->d.d_h1s = h1s_new(f->base, h1x_mem_new(f->base, 0, 0, &f->peer),
	    &fx_conf, &fx_hooks, f, 1, "test");
	h1s_count_sent(f->d.d_h1s);
	f->x.x_tunnel = &f->t;
	f->x.x_dconn = &f->d;
	f->d.d_x = &f->x;
	*state = f;
	return (0);
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	h1s_close(f->d.d_h1s, "test over");
	fx_spin(f);
	h1x_mem_free(f->peer);
	event_base_free(f->base);
	tombs_clear(&f->t.t_tombs);
	free(f->x.x_resp_q);
	free(f->x.x_resp_qack);
	free(f);
	return (0);
}

/* The caller sends a request head; the engine parses it. */
static void
fixture_request(struct fixture *f, const char *head)
{
	h1x_mem_send(f->peer, head, strlen(head));
	fx_spin(f);
	assert_non_null(f->d.d_head);
}

/* What the fixture's connection has written, as a string. */
static char *
fixture_output(struct fixture *f)
{
	struct evbuffer *out = evbuffer_new();
	size_t n;
	char *s;

	h1x_mem_recv(f->peer, out, 1 << 20);
	n = evbuffer_get_length(out);
	s = calloc(1, n + 1);
	evbuffer_remove(out, s, n);
	evbuffer_free(out);
	return (s);
}

/* The response frame's headers used by the head tests. */
static void
resp_headers(struct tunproto_msg *m)
{
	memset(m, 0, sizeof *m);
	tunproto_msg_add_header(m, "Content-Length", "5");
	tunproto_msg_add_header(m, "Transfer-Encoding", "chunked");
	tunproto_msg_add_header(m, "Connection", "X-Foo");
	tunproto_msg_add_header(m, "X-Foo", "1");
	tunproto_msg_add_header(m, "Set-Cookie", "a=1");
	tunproto_msg_add_header(m, "Set-Cookie", "b=2");
	tunproto_msg_add_header(m, "Bad Name", "v");
	tunproto_msg_add_header(m, "X-Split", "a\r\nInjected: 1");
	tunproto_msg_add_header(m, "Content-Type", "text/plain");
}

/* A head without a length: relayed framing fields go, chunked comes. */
static void
test_head_chunked(void **state)
{
	struct fixture *f = *state;
	struct tunproto_msg m;
	char *s;

	fixture_request(f, "GET /c HTTP/1.1\r\nHost: x\r\n\r\n");
	resp_headers(&m);
	assert_int_equal(tx_resp_head(&f->x, 200, &m, 0, 0), 0);
	s = fixture_output(f);
	assert_string_equal(s,
	    "HTTP/1.1 200 OK\r\n"
	    "Set-Cookie: a=1\r\n"
	    "Set-Cookie: b=2\r\n"
	    "Content-Type: text/plain\r\n"
	    "Transfer-Encoding: chunked\r\n\r\n");
	assert_int_equal(h1s_sent(f->d.d_h1s), strlen(s));
	assert_int_equal(f->x.x_status, 200);
	free(s);
	tunproto_msg_free(&m);
}

/* A head with a length, on a connection the caller closes after it. */
static void
test_head_length_close(void **state)
{
	struct fixture *f = *state;
	struct tunproto_msg m;
	char *s;

	fixture_request(
	    f, "GET /l HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	resp_headers(&m);
	tx_resp_head(&f->x, 404, &m, HEAD_F_LENGTH, 5);
	s = fixture_output(f);
	assert_non_null(strstr(s, "HTTP/1.1 404 Not Found\r\n"));
	assert_non_null(strstr(s, "Content-Length: 5\r\n"));
	assert_non_null(strstr(s, "Connection: close\r\n"));
	assert_null(strstr(s, "Transfer-Encoding"));
	assert_null(strstr(s, "Injected"));
	assert_null(strstr(s, "X-Foo"));
	free(s);
	tunproto_msg_free(&m);
}

/*
 * A request body not read in full (a stopped upload): the connection
 * closes after the answer, and says so.
 */
static void
test_head_body_unread(void **state)
{
	struct fixture *f = *state;
	struct tunproto_msg m;
	char *s;

	fixture_request(
	    f, "POST /u HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
	memset(&m, 0, sizeof m);
	tx_resp_head(&f->x, 200, &m, HEAD_F_LENGTH, 0);
	s = fixture_output(f);
	assert_non_null(strstr(s, "Connection: close\r\n"));
	free(s);
}

/* No framing at all for a bodiless status; HTTP/1.0 keeps alive openly. */
static void
test_head_none(void **state)
{
	struct fixture *f = *state;
	struct tunproto_msg m;
	char *s;

	fixture_request(
	    f, "GET /n HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n");
	resp_headers(&m);
	tx_resp_head(&f->x, 304, &m, HEAD_F_NO_BODY, 0);
	s = fixture_output(f);
	assert_null(strstr(s, "Content-Length"));
	assert_null(strstr(s, "Transfer-Encoding"));
	assert_non_null(strstr(s, "Connection: keep-alive\r\n"));
	free(s);
	tunproto_msg_free(&m);
	assert_true(tx_no_body_status(204));
	assert_true(tx_no_body_status(304));
	assert_false(tx_no_body_status(200));
	assert_false(tx_status_ok(101));
	assert_false(tx_status_ok(600));
	assert_true(tx_status_ok(599));
}

/* Response header limits (200 fields, 64 KiB) and the first length. */
static void
test_resp_limits(void **state)
{
	struct tunproto_msg m;
	char *big;
	uint64_t len = 0;
	int i;

	(void)state;
	memset(&m, 0, sizeof m);
	for (i = 0; i < 200; i++)
		tunproto_msg_add_header(&m, "X-N", "1");
	assert_true(tx_resp_headers_ok(&m));
	tunproto_msg_add_header(&m, "X-N", "1");
	assert_false(tx_resp_headers_ok(&m));
	tunproto_msg_free(&m);
	big = malloc(65537);
	memset(big, 'a', 65536);
	big[65536] = '\0';
	tunproto_msg_add_header(&m, "X", big);
	assert_false(tx_resp_headers_ok(&m));
	free(big);
	tunproto_msg_free(&m);
	tunproto_msg_add_header(&m, "Content-Length", "x1");
	tunproto_msg_add_header(&m, "content-length", "42");
	tunproto_msg_add_header(&m, "Content-Length", "7");
	assert_int_equal(tx_resp_length(&m, &len), 0);
	assert_int_equal(len, 42);
	tunproto_msg_free(&m);
	assert_int_equal(tx_resp_length(&m, &len), -1);
}

/*
 * Tombstones at the tunnel's cap: remembered, the oldest forgotten first
 * and counted (lib/tombs.c has the general rules, test_tombs).
 */
static void
test_tombs(void **state)
{
	struct fixture *f = *state;
	const char *first = "00112233-4455-6677-8899-aabbccddeeff";
	char id[40];
	int i;

	assert_false(tombs_has(&f->t.t_tombs, first, 1));
	tombs_add(&f->t.t_tombs, first, 1);
	assert_true(tombs_has(&f->t.t_tombs, first, 1));
	for (i = 0; i < 1024; i++) {
		snprintf(id, sizeof id, "00000000-0000-4000-8000-%012d", i);
		tombs_add(&f->t.t_tombs, id, 2);
	}
	assert_false(tombs_has(&f->t.t_tombs, first, 2));
	assert_int_equal(f->t.t_tombs.tm_evicted, 1);
	assert_int_equal(f->t.t_tombs.tm_count, 1024);
	assert_true(tombs_has(
	    &f->t.t_tombs, "00000000-0000-4000-8000-000000001023", 2));
	assert_true(tombs_has(
	    &f->t.t_tombs, "00000000-0000-4000-8000-000000000000", 2));
}

/*
 * A credit goes back only for chunks the caller has been sent in full:
 * three chunks queued after the head, the head and the first written and
 * part of the second, one credit, two still queued.
 */
static void
test_credit(void **state)
{
	struct fixture *f = *state;
	struct evbuffer *b = evbuffer_new(), *rx = evbuffer_new();
	struct tunproto_msg m;
	struct h1s *h = f->d.d_h1s;
	char pad[100];
	size_t head;
	int i;

	memset(pad, 'x', sizeof pad);
	fixture_request(f, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
	memset(&m, 0, sizeof m);
	assert_int_equal(tx_resp_head(&f->x, 200, &m, HEAD_F_LENGTH, 300), 0);
	head = h1s_queued(h);
	f->x.x_state = TX_S_STREAM;
	for (i = 1; i <= 3; i++) {
		evbuffer_add(b, pad, sizeof pad);
		assert_int_equal(sink_body(h1s_sink(h), b, sizeof pad), 0);
		tx_resp_push(&f->x, h1s_sent(h) + h1s_queued(h),
		    (uint64_t)(90 * i));
	}
	assert_int_equal(f->x.x_resp_q[2], head + 300);
	h1x_mem_recv(f->peer, rx, head + 150); /* written: 150 of 300 */
	tunnel_xchg_credit(&f->x);
	assert_int_equal(f->x.x_resp_nq, 2);
	assert_int_equal(f->x.x_resp_q[0], head + 200);
	assert_int_equal(f->x.x_resp_qack[0], 180);
	h1x_mem_recv(f->peer, rx, 150);
	tunnel_xchg_credit(&f->x);
	assert_int_equal(f->x.x_resp_nq, 0);
	evbuffer_free(b);
	evbuffer_free(rx);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_req_headers),
		cmocka_unit_test_setup_teardown(
		    test_head_chunked, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_head_length_close, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_head_body_unread, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_head_none, setup, teardown),
		cmocka_unit_test(test_resp_limits),
		cmocka_unit_test_setup_teardown(test_tombs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_credit, setup, teardown),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
