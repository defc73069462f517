/*
 * What proxy.c decides from a request head alone: whether it is native
 * gRPC, the deadline its grpc-timeout says, and which protocol its port
 * gets it in.  The file is included to reach its static functions.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../../gateway/proxy.c"

/* A request head with one field. */
static struct head *
head1(struct head *h, struct hfield *f, const char *name, const char *value)
{
	memset(h, 0, sizeof *h);
	h->h_method = "POST";
	h->h_method_len = 4;
	hfield_set(f, name, value);
	h->h_fields = f;
	h->h_nfields = 1;
	return (h);
}

/* A request head with a gRPC content type and a grpc-timeout. */
static struct head *
head_grpc(struct head *h, struct hfield *f, const char *timeout)
{
	memset(h, 0, sizeof *h);
	hfield_set(&f[0], "content-type", "application/grpc");
	hfield_set(&f[1], "grpc-timeout", timeout);
	h->h_fields = f;
	h->h_nfields = 2;
	return (h);
}

static void
test_is_grpc(void **state)
{
	struct head h;
	struct hfield f;

	(void)state;
	assert_true(proxy_is_grpc(
	    head1(&h, &f, "content-type", "application/grpc")));
	assert_true(proxy_is_grpc(
	    head1(&h, &f, "Content-Type", "application/grpc+proto")));
	assert_true(proxy_is_grpc(
	    head1(&h, &f, "content-type", "application/grpc;charset=x")));
	assert_true(proxy_is_grpc(
	    head1(&h, &f, "content-type", "Application/GRPC")));
	assert_false(proxy_is_grpc(
	    head1(&h, &f, "content-type", "application/grpc-web")));
	assert_false(proxy_is_grpc(
	    head1(&h, &f, "content-type", "application/grpc-web+proto")));
	assert_false(proxy_is_grpc(
	    head1(&h, &f, "content-type", "application/json")));
	assert_false(proxy_is_grpc(
	    head1(&h, &f, "content-type", "application/grp")));
	assert_false(proxy_is_grpc(head1(&h, &f, "accept", "application/grpc")));
}

static void
test_grpc_timeout(void **state)
{
	struct head h;
	struct hfield f[2];

	(void)state;
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "1H")), 3600000);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "2M")), 120000);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "3S")), 3000);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "250m")), 250);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "1500u")), 2);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "1n")), 1);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "0m")), 1);
	assert_int_equal(
	    proxy_grpc_timeout(head_grpc(&h, f, "99999999S")), 99999999000ULL);
	/* Malformed: no deadline at all, as gRPC servers read it. */
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "100")), 0);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "m")), 0);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "10s")), 0);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, "-1S")), 0);
	assert_int_equal(proxy_grpc_timeout(head_grpc(&h, f, " 1S")), 0);
	assert_int_equal(
	    proxy_grpc_timeout(head_grpc(&h, f, "123456789S")), 0);
	/* Not gRPC: its grpc-timeout is not ours to honour. */
	hfield_set(&f[0], "content-type", "application/json");
	assert_int_equal(proxy_grpc_timeout(&h), 0);
}

static void
test_wants_h2(void **state)
{
	struct gw_port_rule pr;
	struct gw_xchg x;
	struct hfield f;

	(void)state;
	memset(&pr, 0, sizeof pr);
	memset(&x, 0, sizeof x);
	x.x_rule = &pr;
	head1(&x.x_head, &f, "content-type", "application/grpc");
	assert_false(proxy_wants_h2(&x));
	pr.pr_protocol = GW_PROTO_AUTO;
	assert_true(proxy_wants_h2(&x));
	pr.pr_protocol = GW_PROTO_H2C;
	assert_true(proxy_wants_h2(&x));
	head1(&x.x_head, &f, "content-type", "text/plain");
	assert_true(proxy_wants_h2(&x));
	pr.pr_protocol = GW_PROTO_AUTO;
	assert_false(proxy_wants_h2(&x));
	/* WebSockets upgrade over HTTP/1.1 whatever the port says. */
	pr.pr_protocol = GW_PROTO_H2C;
	x.x_flags |= XCHG_F_WS_REQ;
	assert_false(proxy_wants_h2(&x));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_is_grpc),
		cmocka_unit_test(test_grpc_timeout),
		cmocka_unit_test(test_wants_h2),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
