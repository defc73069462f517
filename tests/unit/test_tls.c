/*
 * Unit tests for lib/tls.c: contexts, error messages, and handshakes between
 * a server and a client pumped through memory BIOs (no sockets). The
 * certificates come from certs/mkcerts.sh, in $CERTS_DIR or build/certs.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tls.h"

/* The protocols a browser offers, in ALPN wire format. */
static const unsigned char alpn_h2_h1[] = "\x02h2\x08http/1.1";
static const unsigned char alpn_h1_h2[] = "\x08http/1.1\x02h2";
static const unsigned char alpn_h2[] = "\x02h2";

static const char *certs_dir;

/* One handshake: what to set up, and what came of it. */
struct hs {
	SSL_CTX *h_sctx;
	SSL_CTX *h_cctx;
	const char *h_host;
	const unsigned char *h_alpn; /* client offer, wire format */
	size_t h_alpn_len;
	const char *const *h_protos; /* offer by tls_client_set_alpn */
	size_t h_nprotos;
	int h_client_cert; /* present client.crt */
	SSL_SESSION *h_session; /* client session to resume */

	int h_ok;
	long h_verify;
	char h_verify_str[128];
	char h_alpn_sel[32];
	int h_is_h2; /* tls_alpn_is(client, "h2") */
	char h_sni[256];
	char h_cipher[64];
	int h_reused;
	SSL_SESSION *h_new_session; /* owned by the caller */
};

/* Return the path of a file in the certificate directory (ring of buffers). */
static const char *
cert(const char *name)
{
	static char bufs[8][PATH_MAX];
	static int next;
	char *p;

	p = bufs[next++ % 8];
	snprintf(p, PATH_MAX, "%s/%s", certs_dir, name);
	return (p);
}

/* Make a server context from the named certificate and key, or fail. */
static SSL_CTX *
server_ctx(const char *crt, const char *key)
{
	SSL_CTX *ctx;
	char *cause = NULL;

	ctx = tls_server_ctx_new(cert(crt), cert(key), &cause);
	if (ctx == NULL)
		fail_msg("server context: %s", cause);
	assert_null(cause);
	return (ctx);
}

/* Make a client context, or fail. */
static SSL_CTX *
client_ctx(const char *ca, int verify)
{
	SSL_CTX *ctx;
	char *cause = NULL;

	ctx = tls_client_ctx_new(ca == NULL ? NULL : cert(ca), verify, &cause);
	if (ctx == NULL)
		fail_msg("client context: %s", cause);
	assert_null(cause);
	return (ctx);
}

/* Move everything written to one memory BIO into another. */
static int
pump(BIO *from, BIO *to)
{
	char buf[4096];
	int n, moved = 0;

	while ((n = BIO_read(from, buf, sizeof buf)) > 0) {
		assert_int_equal(BIO_write(to, buf, n), n);
		moved += n;
	}
	return (moved);
}

/* Advance one side's handshake; returns -1 if it failed. */
static int
step(SSL *ssl, int *done)
{
	int r, e;

	if (*done)
		return (0);
	if ((r = SSL_do_handshake(ssl)) == 1) {
		*done = 1;
		return (0);
	}
	e = SSL_get_error(ssl, r);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return (0);
	return (-1);
}

/* Run a handshake as h describes and record the outcome in h. */
static void
handshake(struct hs *h)
{
	SSL *s, *c;
	BIO *s_in, *s_out, *c_in, *c_out;
	const char *sni;
	const unsigned char *sel;
	unsigned int sel_len;
	char *cause = NULL;
	int i, s_done = 0, c_done = 0, failed = 0;

	s = SSL_new(h->h_sctx);
	assert_non_null(s);
	SSL_set_accept_state(s);
	c = tls_client_ssl_new(h->h_cctx, h->h_host, &cause);
	if (c == NULL)
		fail_msg("client connection: %s", cause);
	if (h->h_alpn != NULL)
		assert_int_equal(SSL_set_alpn_protos(
				     c, h->h_alpn, (unsigned int)h->h_alpn_len),
		    0);
	if (h->h_protos != NULL)
		assert_int_equal(
		    tls_client_set_alpn(c, h->h_protos, h->h_nprotos), 0);
	if (h->h_client_cert) {
		assert_int_equal(SSL_use_certificate_file(
				     c, cert("client.crt"), SSL_FILETYPE_PEM),
		    1);
		assert_int_equal(SSL_use_PrivateKey_file(
				     c, cert("client.key"), SSL_FILETYPE_PEM),
		    1);
	}
	if (h->h_session != NULL)
		assert_int_equal(SSL_set_session(c, h->h_session), 1);

	s_in = BIO_new(BIO_s_mem());
	s_out = BIO_new(BIO_s_mem());
	c_in = BIO_new(BIO_s_mem());
	c_out = BIO_new(BIO_s_mem());
	assert_true(s_in && s_out && c_in && c_out);
	SSL_set_bio(s, s_in, s_out);
	SSL_set_bio(c, c_in, c_out);

	for (i = 0; i < 50 && !failed && !(s_done && c_done); i++) {
		if (step(c, &c_done) == -1 || step(s, &s_done) == -1)
			failed = 1;
		/* Pump even after a failure so the alert reaches the peer. */
		pump(c_out, s_in);
		pump(s_out, c_in);
	}
	ERR_clear_error();

	h->h_ok = !failed && s_done && c_done;
	h->h_verify = SSL_get_verify_result(c);
	snprintf(
	    h->h_verify_str, sizeof h->h_verify_str, "%s", tls_verify_error(c));
	SSL_get0_alpn_selected(c, &sel, &sel_len);
	snprintf(h->h_alpn_sel, sizeof h->h_alpn_sel, "%.*s", (int)sel_len,
	    (const char *)sel);
	h->h_is_h2 = tls_alpn_is(c, "h2");
	sni = SSL_get_servername(s, TLSEXT_NAMETYPE_host_name);
	snprintf(h->h_sni, sizeof h->h_sni, "%s", sni == NULL ? "" : sni);
	snprintf(h->h_cipher, sizeof h->h_cipher, "%s", SSL_get_cipher_name(c));
	h->h_reused = SSL_session_reused(c);
	h->h_new_session = h->h_ok ? SSL_get1_session(c) : NULL;

	/*
	 * Mark a good connection as closed cleanly: freeing one that was not
	 * would drop its session from the caches.
	 */
	if (h->h_ok) {
		SSL_set_shutdown(c, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
		SSL_set_shutdown(s, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
	}
	SSL_free(c);
	SSL_free(s);
}

/* Handshake between the given contexts for host; return h_ok. */
static int
handshake_host(SSL_CTX *sctx, SSL_CTX *cctx, const char *host, struct hs *h)
{
	memset(h, 0, sizeof *h);
	h->h_sctx = sctx;
	h->h_cctx = cctx;
	h->h_host = host;
	handshake(h);
	SSL_SESSION_free(h->h_new_session);
	h->h_new_session = NULL;
	return (h->h_ok);
}

/* The development certificate and key load. */
static void
test_server_ctx_loads(void **state)
{
	(void)state;
	tls_init();
	tls_init();
	tls_ctx_free(server_ctx("server.crt", "server.key"));
	tls_ctx_free(server_ctx("other.crt", "other.key"));
	tls_ctx_free(NULL);
}

/* A missing certificate file is refused with a cause naming it. */
static void
test_server_ctx_missing_cert(void **state)
{
	char *cause = NULL, *path;

	(void)state;
	path = strdup(cert("missing.crt"));
	assert_null(tls_server_ctx_new(path, cert("server.key"), &cause));
	assert_non_null(cause);
	assert_non_null(strstr(cause, "cannot load certificate"));
	assert_non_null(strstr(cause, path));
	assert_non_null(strstr(cause, "No such file or directory"));
	assert_int_equal(ERR_peek_error(), 0);
	free(cause);
	free(path);
}

/* A missing key file is refused with a cause naming it. */
static void
test_server_ctx_missing_key(void **state)
{
	char *cause = NULL, *path;

	(void)state;
	path = strdup(cert("missing.key"));
	assert_null(tls_server_ctx_new(cert("server.crt"), path, &cause));
	assert_non_null(cause);
	assert_non_null(strstr(cause, "cannot load key"));
	assert_non_null(strstr(cause, path));
	free(cause);
	free(path);
}

/* A file that is not a certificate is refused with OpenSSL's reason. */
static void
test_server_ctx_not_a_cert(void **state)
{
	char *cause = NULL;

	(void)state;
	assert_null(
	    tls_server_ctx_new(cert("server.key"), cert("server.key"), &cause));
	assert_non_null(cause);
	assert_non_null(strstr(cause, "cannot load certificate"));
	assert_non_null(strstr(cause, "no start line"));
	free(cause);
}

/* A key that belongs to another certificate is refused. */
static void
test_server_ctx_key_mismatch(void **state)
{
	char *cause = NULL;

	(void)state;
	assert_null(
	    tls_server_ctx_new(cert("server.crt"), cert("other.key"), &cause));
	assert_non_null(cause);
	assert_non_null(strstr(cause, "does not match"));
	assert_non_null(strstr(cause, "other.key"));
	assert_non_null(strstr(cause, "server.crt"));
	assert_int_equal(ERR_peek_error(), 0);
	free(cause);
}

/* A missing CA file is refused with a cause naming it. */
static void
test_client_ctx_missing_ca(void **state)
{
	char *cause = NULL, *path;

	(void)state;
	path = strdup(cert("missing-ca.crt"));
	assert_null(tls_client_ctx_new(path, 1, &cause));
	assert_non_null(cause);
	assert_non_null(strstr(cause, "cannot load CA file"));
	assert_non_null(strstr(cause, path));
	free(cause);
	free(path);
}

/* A connection needs a host name. */
static void
test_client_ssl_empty_host(void **state)
{
	SSL_CTX *cctx;
	char *cause = NULL;

	(void)state;
	cctx = client_ctx("ca.crt", 1);
	assert_null(tls_client_ssl_new(cctx, "", &cause));
	assert_non_null(cause);
	free(cause);
	cause = NULL;
	assert_null(tls_client_ssl_new(cctx, NULL, &cause));
	assert_non_null(cause);
	free(cause);
	tls_ctx_free(cctx);
}

/*
 * The dev CA verifies localhost, gw.localhost and the host-form names under
 * it (config/gateway-https.yaml), and both loopback addresses.
 */
static void
test_handshake_verified(void **state)
{
	static const struct {
		const char *host;
		const char *sni;
	} cases[] = {
		{ "localhost", "localhost" },
		{ "gw.localhost", "gw.localhost" },
		{ "8000-local.gw.localhost", "8000-local.gw.localhost" },
		{ "127.0.0.1", "" },
		{ "::1", "" },
	};
	SSL_CTX *sctx, *cctx;
	struct hs h;
	size_t i;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (!handshake_host(sctx, cctx, cases[i].host, &h))
			fail_msg("%s: %s", cases[i].host, h.h_verify_str);
		assert_int_equal(h.h_verify, X509_V_OK);
		assert_string_equal(h.h_verify_str, "ok");
		/* SNI carries names only, never an address. */
		assert_string_equal(h.h_sni, cases[i].sni);
	}
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/*
 * A *.localhost wildcard would never match: OpenSSL (and Chromium)
 * require two labels after a wildcard (no "*.com"), and localhost has one,
 * so the certificate has none and host-form names live under gw.localhost.
 * Pin that here so nobody builds on such a wildcard.
 */
static void
test_handshake_localhost_wildcard(void **state)
{
	SSL_CTX *sctx, *cctx;
	struct hs h;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);
	assert_false(handshake_host(sctx, cctx, "foo.localhost", &h));
	assert_int_equal(h.h_verify, X509_V_ERR_HOSTNAME_MISMATCH);
	assert_string_equal(h.h_sni, "foo.localhost");
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* Names and addresses outside the certificate fail verification. */
static void
test_handshake_wrong_host(void **state)
{
	static const char *const hosts[] = {
		"example.com",
		"a.b.localhost",
		"127.0.0.2",
		"::2",
	};
	SSL_CTX *sctx, *cctx;
	struct hs h;
	size_t i;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);
	for (i = 0; i < sizeof hosts / sizeof hosts[0]; i++) {
		if (handshake_host(sctx, cctx, hosts[i], &h))
			fail_msg("%s: handshake succeeded", hosts[i]);
		if (hosts[i][0] == ':' || hosts[i][0] == '1')
			assert_int_equal(
			    h.h_verify, X509_V_ERR_IP_ADDRESS_MISMATCH);
		else {
			assert_int_equal(
			    h.h_verify, X509_V_ERR_HOSTNAME_MISMATCH);
			assert_string_equal(
			    h.h_verify_str, "hostname mismatch");
		}
	}
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* The second certificate serves other.localhost and nothing else. */
static void
test_handshake_other_cert(void **state)
{
	SSL_CTX *sctx, *cctx;
	struct hs h;

	(void)state;
	sctx = server_ctx("other.crt", "other.key");
	cctx = client_ctx("ca.crt", 1);
	assert_true(handshake_host(sctx, cctx, "other.localhost", &h));
	assert_string_equal(h.h_sni, "other.localhost");
	assert_false(handshake_host(sctx, cctx, "localhost", &h));
	assert_int_equal(h.h_verify, X509_V_ERR_HOSTNAME_MISMATCH);
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* The system store does not trust the development CA. */
static void
test_handshake_system_store(void **state)
{
	SSL_CTX *sctx, *cctx;
	struct hs h;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx(NULL, 1);
	assert_false(handshake_host(sctx, cctx, "localhost", &h));
	assert_int_equal(
	    h.h_verify, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
	assert_string_not_equal(h.h_verify_str, "ok");
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* With verification off any name is accepted, and SNI is still sent. */
static void
test_handshake_no_verify(void **state)
{
	SSL_CTX *sctx, *cctx;
	struct hs h;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx(NULL, 0);
	assert_true(handshake_host(sctx, cctx, "example.com", &h));
	assert_string_equal(h.h_sni, "example.com");
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* A failed handshake leaves a readable reason, and reading it clears it. */
static void
test_last_error(void **state)
{
	SSL_CTX *sctx, *cctx;
	SSL *s, *c;
	BIO *s_in, *s_out, *c_in, *c_out;
	char *cause = NULL;
	int i, s_done = 0, c_done = 0, r = 0;

	(void)state;
	ERR_clear_error();
	assert_string_equal(tls_last_error(), "unknown TLS error");

	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);
	s = SSL_new(sctx);
	SSL_set_accept_state(s);
	c = tls_client_ssl_new(cctx, "example.com", &cause);
	assert_non_null(c);
	s_in = BIO_new(BIO_s_mem());
	s_out = BIO_new(BIO_s_mem());
	c_in = BIO_new(BIO_s_mem());
	c_out = BIO_new(BIO_s_mem());
	SSL_set_bio(s, s_in, s_out);
	SSL_set_bio(c, c_in, c_out);
	/* Stop at the client's failure, before the server adds its own. */
	for (i = 0; i < 50; i++) {
		if ((r = step(c, &c_done)) == -1)
			break;
		pump(c_out, s_in);
		step(s, &s_done);
		pump(s_out, c_in);
	}
	assert_int_equal(r, -1);
	assert_string_equal(tls_last_error(), "certificate verify failed");
	assert_int_equal(ERR_peek_error(), 0);
	SSL_free(c);
	SSL_free(s);
	ERR_clear_error();
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* ALPN picks http/1.1 by default, whatever the client prefers. */
static void
test_alpn_default(void **state)
{
	SSL_CTX *sctx, *cctx;
	struct hs h;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);

	memset(&h, 0, sizeof h);
	h.h_sctx = sctx;
	h.h_cctx = cctx;
	h.h_host = "localhost";
	h.h_alpn = alpn_h2_h1;
	h.h_alpn_len = sizeof alpn_h2_h1 - 1;
	handshake(&h);
	assert_true(h.h_ok);
	assert_string_equal(h.h_alpn_sel, "http/1.1");

	/* No common protocol: the handshake goes on without ALPN. */
	h.h_alpn = alpn_h2;
	h.h_alpn_len = sizeof alpn_h2 - 1;
	SSL_SESSION_free(h.h_new_session);
	handshake(&h);
	assert_true(h.h_ok);
	assert_string_equal(h.h_alpn_sel, "");

	/* No offer at all. */
	h.h_alpn = NULL;
	SSL_SESSION_free(h.h_new_session);
	handshake(&h);
	assert_true(h.h_ok);
	assert_string_equal(h.h_alpn_sel, "");
	SSL_SESSION_free(h.h_new_session);

	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* A configured list is the server's preference order; bad lists are refused. */
static void
test_alpn_server_list(void **state)
{
	static const char *const h2_h1[] = { "h2", "http/1.1" };
	static const char *const empty[] = { "http/1.1", "" };
	SSL_CTX *sctx, *cctx;
	struct hs h;
	char long_name[257];

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);
	assert_int_equal(tls_server_set_alpn(sctx, h2_h1, 2), 0);

	memset(long_name, 'x', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	assert_int_equal(tls_server_set_alpn(sctx, h2_h1, 0), -1);
	assert_int_equal(tls_server_set_alpn(sctx, empty, 2), -1);
	{
		const char *const too_long[] = { long_name };

		assert_int_equal(tls_server_set_alpn(sctx, too_long, 1), -1);
	}

	memset(&h, 0, sizeof h);
	h.h_sctx = sctx;
	h.h_cctx = cctx;
	h.h_host = "localhost";
	h.h_alpn = alpn_h1_h2;
	h.h_alpn_len = sizeof alpn_h1_h2 - 1;
	handshake(&h);
	assert_true(h.h_ok);
	assert_string_equal(h.h_alpn_sel, "h2");
	SSL_SESSION_free(h.h_new_session);

	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/*
 * A client's offer (tls_client_set_alpn) and what was picked (tls_alpn_is):
 * h2 from a server that has it, http/1.1 from one that does not or when
 * only that is offered; bad lists are refused.
 */
static void
test_alpn_client(void **state)
{
	static const char *const h2_h1[] = { "h2", "http/1.1" };
	static const char *const h1[] = { "http/1.1" };
	static const char *const empty[] = { "" };
	SSL_CTX *sctx, *plain, *cctx;
	struct hs h;
	SSL *c;
	char *cause = NULL;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	plain = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);
	assert_int_equal(tls_server_set_alpn(sctx, h2_h1, 2), 0);

	c = tls_client_ssl_new(cctx, "localhost", &cause);
	assert_non_null(c);
	assert_int_equal(tls_client_set_alpn(c, h2_h1, 0), -1);
	assert_int_equal(tls_client_set_alpn(c, empty, 1), -1);
	assert_false(tls_alpn_is(c, "h2"));
	tls_ssl_free(c);

	memset(&h, 0, sizeof h);
	h.h_sctx = sctx;
	h.h_cctx = cctx;
	h.h_host = "localhost";
	h.h_protos = h2_h1;
	h.h_nprotos = 2;
	handshake(&h);
	assert_true(h.h_ok);
	assert_string_equal(h.h_alpn_sel, "h2");
	assert_true(h.h_is_h2);
	SSL_SESSION_free(h.h_new_session);

	h.h_protos = h1;
	h.h_nprotos = 1;
	handshake(&h);
	assert_true(h.h_ok);
	assert_string_equal(h.h_alpn_sel, "http/1.1");
	assert_false(h.h_is_h2);
	SSL_SESSION_free(h.h_new_session);

	h.h_sctx = plain;
	h.h_protos = h2_h1;
	h.h_nprotos = 2;
	handshake(&h);
	assert_true(h.h_ok);
	assert_string_equal(h.h_alpn_sel, "http/1.1");
	assert_false(h.h_is_h2);
	SSL_SESSION_free(h.h_new_session);

	tls_ctx_free(cctx);
	tls_ctx_free(plain);
	tls_ctx_free(sctx);
}

/* TLS 1.2 gets an ECDHE AEAD suite; a client without one is refused. */
static void
test_tls12_ciphers(void **state)
{
	SSL_CTX *sctx, *cctx;
	struct hs h;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);
	assert_int_equal(
	    SSL_CTX_set_max_proto_version(cctx, TLS1_2_VERSION), 1);
	assert_true(handshake_host(sctx, cctx, "localhost", &h));
	assert_int_equal(strncmp(h.h_cipher, "ECDHE-ECDSA-", 12), 0);
	assert_true(strstr(h.h_cipher, "GCM") != NULL ||
	    strstr(h.h_cipher, "CHACHA20") != NULL);

	assert_int_equal(SSL_CTX_set_cipher_list(cctx, "ECDHE+AES128+SHA"), 1);
	assert_false(handshake_host(sctx, cctx, "localhost", &h));
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* The server session cache resumes a TLS 1.2 session by id. */
static void
test_session_resume(void **state)
{
	SSL_CTX *sctx, *cctx;
	SSL_SESSION *sess;
	struct hs h;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	cctx = client_ctx("ca.crt", 1);
	SSL_CTX_set_max_proto_version(cctx, TLS1_2_VERSION);
	SSL_CTX_set_options(cctx, SSL_OP_NO_TICKET);

	memset(&h, 0, sizeof h);
	h.h_sctx = sctx;
	h.h_cctx = cctx;
	h.h_host = "localhost";
	handshake(&h);
	assert_true(h.h_ok);
	assert_false(h.h_reused);
	assert_non_null(h.h_new_session);
	sess = h.h_new_session;

	h.h_session = sess;
	handshake(&h);
	assert_true(h.h_ok);
	assert_true(h.h_reused);
	SSL_SESSION_free(h.h_new_session);
	SSL_SESSION_free(sess);
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

/* The client certificate passes a server that requires one from the CA. */
static void
test_client_cert(void **state)
{
	SSL_CTX *sctx, *cctx;
	struct hs h;

	(void)state;
	sctx = server_ctx("server.crt", "server.key");
	assert_int_equal(
	    SSL_CTX_load_verify_locations(sctx, cert("ca.crt"), NULL), 1);
	SSL_CTX_set_verify(
	    sctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	cctx = client_ctx("ca.crt", 1);

	assert_false(handshake_host(sctx, cctx, "localhost", &h));

	memset(&h, 0, sizeof h);
	h.h_sctx = sctx;
	h.h_cctx = cctx;
	h.h_host = "localhost";
	h.h_client_cert = 1;
	handshake(&h);
	assert_true(h.h_ok);
	SSL_SESSION_free(h.h_new_session);
	tls_ctx_free(cctx);
	tls_ctx_free(sctx);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_server_ctx_loads),
		cmocka_unit_test(test_server_ctx_missing_cert),
		cmocka_unit_test(test_server_ctx_missing_key),
		cmocka_unit_test(test_server_ctx_not_a_cert),
		cmocka_unit_test(test_server_ctx_key_mismatch),
		cmocka_unit_test(test_client_ctx_missing_ca),
		cmocka_unit_test(test_client_ssl_empty_host),
		cmocka_unit_test(test_handshake_verified),
		cmocka_unit_test(test_handshake_localhost_wildcard),
		cmocka_unit_test(test_handshake_wrong_host),
		cmocka_unit_test(test_handshake_other_cert),
		cmocka_unit_test(test_handshake_system_store),
		cmocka_unit_test(test_handshake_no_verify),
		cmocka_unit_test(test_last_error),
		cmocka_unit_test(test_alpn_default),
		cmocka_unit_test(test_alpn_server_list),
		cmocka_unit_test(test_alpn_client),
		cmocka_unit_test(test_tls12_ciphers),
		cmocka_unit_test(test_session_resume),
		cmocka_unit_test(test_client_cert),
	};
	char path[PATH_MAX];

	if ((certs_dir = getenv("CERTS_DIR")) == NULL || *certs_dir == '\0')
		certs_dir = "build/certs";
	snprintf(path, sizeof path, "%s/server.crt", certs_dir);
	if (access(path, R_OK) != 0) {
		fprintf(stderr,
		    "test_tls: %s missing; run make certs or set "
		    "CERTS_DIR\n",
		    path);
		return (1);
	}
	return (cmocka_run_group_tests(tests, NULL, NULL));
}
