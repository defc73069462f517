/*
 * aktunnel's reconnect loop (tunnel-protocol.md §8.1, §2.6, scenarios 27,
 * 28): the backoff schedule, its reset after a long-lived connection, the
 * warning schedule, the heartbeat flags, and lib/dns.c lookups without a
 * name server (literals, the hosts file, cancel).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <event2/event.h>

#include "dns.h"
#include "tun.h"

/* Network failures: 1, 2, 3, ... 30, 30 s; the count is shared. */
static void
test_backoff_network(void **state)
{
	unsigned int f = 0, i;

	(void)state;
	for (i = 1; i <= 30; i++)
		assert_int_equal(tun_backoff(&f, TUN_END_NETWORK, 0, 20000), i);
	assert_int_equal(tun_backoff(&f, TUN_END_NETWORK, 0, 20000), 30);
	assert_int_equal(tun_backoff(&f, TUN_END_NETWORK, 19999, 20000), 30);
	assert_int_equal(f, 32);
	/* A connection that lived 20 s resets the count first. */
	assert_int_equal(tun_backoff(&f, TUN_END_NETWORK, 20000, 20000), 1);
	assert_int_equal(tun_backoff(&f, TUN_END_NETWORK, 0, 20000), 2);
}

/* HTTP statuses and protocol errors: 1 s, but they count. */
static void
test_backoff_other(void **state)
{
	unsigned int f = 0;

	(void)state;
	assert_int_equal(tun_backoff(&f, TUN_END_STATUS, 0, 20000), 1);
	assert_int_equal(tun_backoff(&f, TUN_END_STATUS, 0, 20000), 1);
	assert_int_equal(tun_backoff(&f, TUN_END_PROTOCOL, 500000, 20000), 1);
	assert_int_equal(f, 3);
	/* ... so a network failure after them waits 4 s. */
	assert_int_equal(tun_backoff(&f, TUN_END_NETWORK, 0, 20000), 4);
}

/* A gateway that restarts (1012): at once, and the count starts over. */
static void
test_backoff_restart(void **state)
{
	unsigned int f = 0, i;

	(void)state;
	for (i = 0; i < 5; i++)
		(void)tun_backoff(&f, TUN_END_NETWORK, 0, 20000);
	assert_int_equal(tun_backoff(&f, TUN_END_RESTART, 100, 20000), 0);
	assert_int_equal(f, 0);
	assert_int_equal(tun_backoff(&f, TUN_END_RESTART, 0, 20000), 0);
	/* A failure after it waits 1 s, not 7. */
	assert_int_equal(tun_backoff(&f, TUN_END_NETWORK, 0, 20000), 1);
}

/* Jitter: up to a quarter of the delay more, never less, in ms. */
static void
test_backoff_jitter(void **state)
{
	(void)state;
	assert_int_equal(tun_jitter_ms(0, 12345), 0);
	assert_int_equal(tun_jitter_ms(1, 0), 0);
	assert_int_equal(tun_jitter_ms(1, 249), 249);
	assert_int_equal(tun_jitter_ms(1, 250), 0);
	assert_int_equal(tun_jitter_ms(30, UINT32_MAX), UINT32_MAX % 7500);
	assert_true(tun_jitter_ms(30, 7499) < 7500);
}

/* 404: warnings at 5, 10, 20, 30; ten in a row give exactly two. */
static void
test_route_miss_warnings(void **state)
{
	unsigned int n, warns = 0;

	(void)state;
	for (n = 1; n <= 10; n++)
		warns += tun_route_miss_warns(n);
	assert_int_equal(warns, 2);
	assert_false(tun_route_miss_warns(1));
	assert_false(tun_route_miss_warns(4));
	assert_true(tun_route_miss_warns(5));
	assert_false(tun_route_miss_warns(6));
	assert_true(tun_route_miss_warns(10));
	assert_false(tun_route_miss_warns(15));
	assert_true(tun_route_miss_warns(20));
	assert_true(tun_route_miss_warns(30));
}

/* Network failures: warnings at the 1st and every 10th. */
static void
test_network_warnings(void **state)
{
	(void)state;
	assert_true(tun_network_warns(1));
	assert_false(tun_network_warns(2));
	assert_false(tun_network_warns(9));
	assert_true(tun_network_warns(10));
	assert_false(tun_network_warns(11));
	assert_true(tun_network_warns(20));
}

/* 401/403 in a row: 1, 2, 3, 4 s, and the fifth gives up. */
static void
test_auth_delays(void **state)
{
	unsigned int n;

	(void)state;
	for (n = 1; n < TUN_AUTH_TRIES; n++)
		assert_int_equal(tun_auth_delay(n), n);
	assert_int_equal(TUN_AUTH_TRIES, 5);
	assert_int_equal(tun_auth_delay(TUN_AUTH_TRIES), 0);
	assert_int_equal(tun_auth_delay(TUN_AUTH_TRIES + 1), 0);
	assert_int_not_equal(TUN_EXIT_AUTH, TUN_EXIT_REPLACED);
}

/* Parse argv and require success. */
static void
parse(struct tun_options *o, const char *a1, const char *a2)
{
	char *argv[] = { (char *)"aktunnel", (char *)"--gateway",
		(char *)"127.0.0.1:1", (char *)"--sandbox", (char *)"s",
		(char *)"--target", (char *)"http://127.0.0.1:2", (char *)a1,
		(char *)a2, NULL };
	char *const env[] = { NULL };
	char *cause = NULL;
	int argc = a1 == NULL ? 7 : 9;

	if (tun_options_parse(o, argc, argv, env, &cause) != 0)
		fail_msg("parse failed: %s", cause);
}

/* --ping-interval and --ping-timeout: defaults 20 and 10, bounded. */
static void
test_ping_flags(void **state)
{
	struct tun_options o;
	char *argv[] = { (char *)"aktunnel", (char *)"--ping-interval",
		(char *)"0", NULL };
	char *const env[] = { NULL };
	char *cause = NULL;

	(void)state;
	parse(&o, NULL, NULL);
	assert_true(o.ping_interval == 20.0);
	assert_true(o.ping_timeout == 10.0);
	tun_options_free(&o);
	parse(&o, "--ping-interval", "0.25");
	assert_true(o.ping_interval == 0.25);
	tun_options_free(&o);
	parse(&o, "--ping-timeout", "3");
	assert_true(o.ping_timeout == 3.0);
	tun_options_free(&o);

	assert_int_equal(tun_options_parse(&o, 3, argv, env, &cause), -1);
	assert_string_equal(cause,
	    "invalid --ping-interval '0' (use seconds from 0.01 to 3600)");
	free(cause);
	tun_options_free(&o);
	argv[2] = (char *)"-1";
	assert_int_equal(tun_options_parse(&o, 3, argv, env, &cause), -1);
	free(cause);
	tun_options_free(&o);
	argv[2] = (char *)"1e3";
	assert_int_equal(tun_options_parse(&o, 3, argv, env, &cause), -1);
	free(cause);
	tun_options_free(&o);
}

/* What one lookup answered. */
struct answer {
	int calls;
	size_t n;
	char addr[64];
	int port;
	char err[256];
};

/* Record an answer and end the loop. */
static void
answer_cb(
    const struct sockaddr_storage *addrs, size_t n, const char *err, void *arg)
{
	struct answer *a = arg;
	const struct sockaddr_in *sin = (const struct sockaddr_in *)addrs;
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)addrs;

	a->calls++;
	a->n = n;
	if (err != NULL)
		snprintf(a->err, sizeof a->err, "%s", err);
	else if (addrs[0].ss_family == AF_INET) {
		inet_ntop(AF_INET, &sin->sin_addr, a->addr, sizeof a->addr);
		a->port = ntohs(sin->sin_port);
	} else {
		inet_ntop(AF_INET6, &sin6->sin6_addr, a->addr, sizeof a->addr);
		a->port = ntohs(sin6->sin6_port);
	}
}

/* Run the loop until a->calls is set (at most ~10 s). */
static void
run_until(struct event_base *base, struct answer *a)
{
	int i;

	for (i = 0; i < 1000 && a->calls == 0; i++) {
		struct timeval tv = { 0, 10000 };

		event_base_loopexit(base, &tv);
		event_base_dispatch(base);
	}
}

/* Run a few passes of the loop. */
static void
spin(struct event_base *base)
{
	int i;

	for (i = 0; i < 5; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
}

/* Literals need no lookup but still answer from the loop. */
static void
test_dns_literal(void **state)
{
	struct event_base *base = event_base_new();
	struct answer a4, a6;
	struct dns *d;
	char *cause = NULL;

	(void)state;
	d = dns_new(base, &cause);
	assert_non_null(d);
	assert_true(dns_is_literal("127.0.0.1"));
	assert_true(dns_is_literal("::1"));
	assert_false(dns_is_literal("localhost"));
	memset(&a4, 0, sizeof a4);
	memset(&a6, 0, sizeof a6);
	dns_lookup(d, "127.0.0.1", 8080, answer_cb, &a4);
	dns_lookup(d, "::1", 443, answer_cb, &a6);
	assert_int_equal(a4.calls, 0); /* not from inside dns_lookup */
	run_until(base, &a4);
	run_until(base, &a6);
	assert_int_equal(a4.calls, 1);
	assert_int_equal(a4.n, 1);
	assert_string_equal(a4.addr, "127.0.0.1");
	assert_int_equal(a4.port, 8080);
	assert_string_equal(a6.addr, "::1");
	assert_int_equal(a6.port, 443);
	dns_free(d);
	event_base_free(base);
}

/* "localhost" comes from the hosts file; a cancelled query never answers. */
static void
test_dns_hosts_and_cancel(void **state)
{
	struct event_base *base = event_base_new();
	struct answer a, b, c;
	struct dns *d;
	char *cause = NULL;

	(void)state;
	d = dns_new(base, &cause);
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	memset(&c, 0, sizeof c);
	dns_lookup(d, "localhost", 80, answer_cb, &a);
	dns_cancel(dns_lookup(d, "127.0.0.2", 80, answer_cb, &b));
	run_until(base, &a);
	assert_int_equal(a.calls, 1);
	if (a.n == 0)
		fail_msg("localhost did not resolve: %s", a.err);
	assert_true(
	    strcmp(a.addr, "127.0.0.1") == 0 || strcmp(a.addr, "::1") == 0);
	assert_int_equal(a.port, 80);
	spin(base);
	assert_int_equal(b.calls, 0);
	/* Freed with a query pending: no callback, no leak. */
	dns_lookup(d, "127.0.0.3", 80, answer_cb, &c);
	dns_free(d);
	assert_int_equal(c.calls, 0);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backoff_network),
		cmocka_unit_test(test_backoff_other),
		cmocka_unit_test(test_backoff_restart),
		cmocka_unit_test(test_backoff_jitter),
		cmocka_unit_test(test_route_miss_warnings),
		cmocka_unit_test(test_network_warnings),
		cmocka_unit_test(test_auth_delays),
		cmocka_unit_test(test_ping_flags),
		cmocka_unit_test(test_dns_literal),
		cmocka_unit_test(test_dns_hosts_and_cancel),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
