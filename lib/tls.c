/*
 * TLS: server and client contexts, client connections with name checks,
 * and readable OpenSSL errors. Every OpenSSL call in the tree lives here.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "alloc.h"
#include "tls.h"

/*
 * TLS 1.2 suites offered by a server: forward secret key exchange and AEAD
 * ciphers only. TLS 1.3 suites keep the OpenSSL defaults.
 */
#define TLS_SERVER_CIPHERS \
	"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" \
	"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" \
	"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"

/* Session id context: a cached session resumes only where it was made. */
#define TLS_SESSION_ID_CTX "akgateway"

/* A server's ALPN preference list in wire format, kept in the context. */
struct tls_alpn {
	size_t ta_len;
	unsigned char ta_wire[];
};

static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_alpn_idx = -1;
static int tls_sni_idx = -1;
static void
tls_sni_free_cb(void *, void *, CRYPTO_EX_DATA *, int, long, void *);

/* Free a context's ALPN list along with the context. */
static void
tls_alpn_free_cb(
    void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	(void)parent;
	(void)ad;
	(void)idx;
	(void)argl;
	(void)argp;
	free(ptr);
}

/* Initialise OpenSSL and our context slot; run once. */
static void
tls_init_once(void)
{
	OPENSSL_init_ssl(
	    OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS,
	    NULL);
	tls_alpn_idx = SSL_CTX_get_ex_new_index(
	    0, NULL, NULL, NULL, tls_alpn_free_cb);
	tls_sni_idx = SSL_CTX_get_ex_new_index(
	    0, NULL, NULL, NULL, tls_sni_free_cb);
	if (tls_alpn_idx < 0 || tls_sni_idx < 0) {
		fprintf(stderr, "fatal: cannot allocate TLS context slot\n");
		abort();
	}
}

/* Initialise the TLS library; safe to call more than once, from any thread. */
void
tls_init(void)
{
	pthread_once(&tls_once, tls_init_once);
}

/*
 * Describe the oldest entry of this thread's OpenSSL error queue, then clear
 * the queue. The oldest entry is the cause; later ones only wrap it ("system
 * lib", "PEM lib"). The string lives in a thread-local buffer that the next
 * call overwrites.
 */
const char *
tls_last_error(void)
{
	static __thread char buf[256];
	const char *reason, *data;
	unsigned long e;
	int flags;

	/* The data string belongs to the queue: copy it before clearing. */
	if ((e = ERR_get_error_all(NULL, NULL, NULL, &data, &flags)) == 0)
		return ("unknown TLS error");
	if (ERR_SYSTEM_ERROR(e))
		snprintf(buf, sizeof buf, "%s", strerror(ERR_GET_REASON(e)));
	else if ((reason = ERR_reason_error_string(e)) == NULL)
		ERR_error_string_n(e, buf, sizeof buf);
	else if ((flags & ERR_TXT_STRING) && data != NULL && *data != '\0')
		snprintf(buf, sizeof buf, "%s (%s)", reason, data);
	else
		snprintf(buf, sizeof buf, "%s", reason);
	ERR_clear_error();
	return (buf);
}

/* Fill cause with a formatted message, a colon and the OpenSSL reason. */
static void __attribute__((format(printf, 2, 3)))
tls_cause(char **cause, const char *fmt, ...)
{
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	xasprintf(cause, "%s: %s", msg, tls_last_error());
	free(msg);
}

/* Refuse to prompt for a key passphrase; encrypted keys are not supported. */
static int
tls_no_passwd_cb(char *buf, int size, int rwflag, void *arg)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)arg;
	return (0);
}

/* Pick the first protocol of the server's list that the client offers. */
static int
tls_alpn_select_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen,
    const unsigned char *in, unsigned int inlen, void *arg)
{
	struct tls_alpn *ta = arg;

	(void)ssl;
	if (ta == NULL ||
	    SSL_select_next_proto((unsigned char **)out, outlen, ta->ta_wire,
		(unsigned int)ta->ta_len, in, inlen) != OPENSSL_NPN_NEGOTIATED)
		return (SSL_TLSEXT_ERR_NOACK);
	return (SSL_TLSEXT_ERR_OK);
}

/*
 * The ALPN wire format of protos (n names, most preferred first, each 1 to
 * 255 bytes): a new struct tls_alpn, or NULL for a bad list.
 */
static struct tls_alpn *
tls_alpn_wire(const char *const *protos, size_t n)
{
	struct tls_alpn *ta;
	size_t i, len, total;

	if (n == 0)
		return (NULL);
	total = 0;
	for (i = 0; i < n; i++) {
		len = strlen(protos[i]);
		if (len == 0 || len > 255)
			return (NULL);
		total += 1 + len;
		if (total > 0xffff)
			return (NULL);
	}

	ta = xmalloc(sizeof *ta + total);
	ta->ta_len = total;
	total = 0;
	for (i = 0; i < n; i++) {
		len = strlen(protos[i]);
		ta->ta_wire[total++] = (unsigned char)len;
		memcpy(ta->ta_wire + total, protos[i], len);
		total += len;
	}
	return (ta);
}

/*
 * Set the protocols a server context negotiates with ALPN, most preferred
 * first. Each name must be 1 to 255 bytes. Returns 0, or -1 for a bad list
 * (the context keeps its previous list).
 */
int
tls_server_set_alpn(SSL_CTX *ctx, const char *const *protos, size_t n)
{
	struct tls_alpn *ta, *old;

	tls_init();
	if ((ta = tls_alpn_wire(protos, n)) == NULL)
		return (-1);
	old = SSL_CTX_get_ex_data(ctx, tls_alpn_idx);
	if (!SSL_CTX_set_ex_data(ctx, tls_alpn_idx, ta)) {
		ERR_clear_error();
		free(ta);
		return (-1);
	}
	SSL_CTX_set_alpn_select_cb(ctx, tls_alpn_select_cb, ta);
	free(old);
	return (0);
}

/*
 * Offer the ALPN protocols protos (most preferred first) on one client
 * connection, before its handshake. Returns 0, or -1 for a bad list.
 */
int
tls_client_set_alpn(SSL *ssl, const char *const *protos, size_t n)
{
	struct tls_alpn *ta;
	int rv;

	if ((ta = tls_alpn_wire(protos, n)) == NULL)
		return (-1);
	/* This one call returns 0 on success. */
	rv = SSL_set_alpn_protos(ssl, ta->ta_wire, (unsigned int)ta->ta_len);
	free(ta);
	if (rv != 0) {
		ERR_clear_error();
		return (-1);
	}
	return (0);
}

/* Did the handshake on ssl select the ALPN protocol name? */
int
tls_alpn_is(SSL *ssl, const char *name)
{
	const unsigned char *p;
	unsigned int len;

	SSL_get0_alpn_selected(ssl, &p, &len);
	return (p != NULL && len == strlen(name) && memcmp(p, name, len) == 0);
}

/*
 * Make a server context from a PEM certificate chain file (leaf first) and
 * a PEM key file: TLS 1.2 or later, ECDHE with AEAD for TLS 1.2, session
 * cache on, ALPN selecting http/1.1. Returns NULL and fills cause on error;
 * free the context with tls_ctx_free.
 */
SSL_CTX *
tls_server_ctx_new(const char *cert_file, const char *key_file, char **cause)
{
	static const char *const alpn[] = { "http/1.1" };
	SSL_CTX *ctx;
	unsigned long e;

	tls_init();
	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
		tls_cause(cause, "cannot create TLS server context");
		return (NULL);
	}
	if (!SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) ||
	    !SSL_CTX_set_cipher_list(ctx, TLS_SERVER_CIPHERS) ||
	    !SSL_CTX_set_session_id_context(ctx,
		(const unsigned char *)TLS_SESSION_ID_CTX,
		sizeof TLS_SESSION_ID_CTX - 1)) {
		tls_cause(cause, "cannot configure TLS server context");
		goto fail;
	}
	/*
	 * Most clients close without close_notify; HTTP framing, not TLS,
	 * tells whether a message is whole, so such a close is a plain EOF.
	 */
	SSL_CTX_set_options(ctx,
	    SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE |
		SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
	SSL_CTX_set_default_passwd_cb(ctx, tls_no_passwd_cb);

	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
		tls_cause(cause, "cannot load certificate %s", cert_file);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
		e = ERR_peek_error();
		if (ERR_GET_LIB(e) == ERR_LIB_X509 &&
		    (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH ||
			ERR_GET_REASON(e) == X509_R_KEY_TYPE_MISMATCH)) {
			ERR_clear_error();
			xasprintf(cause, "key %s does not match certificate %s",
			    key_file, cert_file);
		} else
			tls_cause(cause, "cannot load key %s", key_file);
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		ERR_clear_error();
		xasprintf(cause, "key %s does not match certificate %s",
		    key_file, cert_file);
		goto fail;
	}
	if (tls_server_set_alpn(ctx, alpn, 1) != 0) {
		xasprintf(cause, "cannot set ALPN protocols");
		goto fail;
	}
	return (ctx);

fail:
	SSL_CTX_free(ctx);
	return (NULL);
}

/*
 * Make a client context, TLS 1.2 or later. With verify set, peers are
 * verified against ca_file, or the system store when ca_file is NULL; with
 * verify 0 nothing is verified and the caller must say so in its log. A
 * given ca_file is loaded either way, so a wrong path is always an error.
 * Returns NULL and fills cause on error; free with tls_ctx_free.
 */
SSL_CTX *
tls_client_ctx_new(const char *ca_file, int verify, char **cause)
{
	SSL_CTX *ctx;

	tls_init();
	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		tls_cause(cause, "cannot create TLS client context");
		return (NULL);
	}
	if (!SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION)) {
		tls_cause(cause, "cannot configure TLS client context");
		goto fail;
	}
	SSL_CTX_set_options(
	    ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);

	if (ca_file != NULL) {
		if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
			tls_cause(cause, "cannot load CA file %s", ca_file);
			goto fail;
		}
	} else if (verify && SSL_CTX_set_default_verify_paths(ctx) != 1) {
		tls_cause(cause, "cannot load the system CA certificates");
		goto fail;
	}
	SSL_CTX_set_verify(
	    ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
	return (ctx);

fail:
	SSL_CTX_free(ctx);
	return (NULL);
}

/*
 * Make a client connection to host, a DNS name or an IP literal (v4 or v6,
 * without brackets). Names are sent as SNI; when the context verifies, the
 * certificate must match the name or address. Returns NULL and fills cause
 * on error; the caller owns the SSL (usually handed to a stream).
 */
SSL *
tls_client_ssl_new(SSL_CTX *ctx, const char *host, char **cause)
{
	struct in_addr a4;
	struct in6_addr a6;
	SSL *ssl;
	int is_ip;

	if (host == NULL || *host == '\0') {
		xasprintf(cause, "empty TLS host name");
		return (NULL);
	}
	is_ip = inet_pton(AF_INET, host, &a4) == 1 ||
	    inet_pton(AF_INET6, host, &a6) == 1;

	ERR_clear_error();
	if ((ssl = SSL_new(ctx)) == NULL) {
		tls_cause(cause, "cannot create TLS connection");
		return (NULL);
	}
	SSL_set_connect_state(ssl);
	if (!is_ip && SSL_set_tlsext_host_name(ssl, host) != 1) {
		tls_cause(cause, "cannot set TLS server name %s", host);
		goto fail;
	}
	if (SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER) {
		if (is_ip) {
			if (X509_VERIFY_PARAM_set1_ip_asc(
				SSL_get0_param(ssl), host) != 1) {
				tls_cause(
				    cause, "cannot verify address %s", host);
				goto fail;
			}
		} else {
			SSL_set_hostflags(
			    ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
			if (SSL_set1_host(ssl, host) != 1) {
				tls_cause(
				    cause, "cannot verify host name %s", host);
				goto fail;
			}
		}
	}
	return (ssl);

fail:
	SSL_free(ssl);
	return (NULL);
}

/* Free a context made by this module; NULL is ignored. */
void
tls_ctx_free(SSL_CTX *ctx)
{
	SSL_CTX_free(ctx);
}

/*
 * Read what the connection has for us now into buf, at most len bytes: >0
 * bytes, or 0 when it would block, ended or failed (the owner's next read
 * sees why).  The error queue is left clean.
 */
int
tls_read_more(SSL *ssl, void *buf, size_t len)
{
	int r;

	if (len > INT_MAX)
		len = INT_MAX;
	if ((r = SSL_read(ssl, buf, (int)len)) > 0)
		return (r);
	ERR_clear_error();
	return (0);
}

/*
 * Write buf now: the bytes written (all of them, as one record up to 16
 * KiB), or 0 when it would block or failed.  Then the same bytes must be
 * offered again first (OpenSSL holds the record), which a TLS bufferevent
 * does with what is at the front of its output.
 */
int
tls_write_now(SSL *ssl, const void *buf, size_t len)
{
	int r;

	if (len == 0 || len > INT_MAX)
		return (0);
	r = SSL_write(ssl, buf, (int)len);
	return (r > 0 ? r : 0);
}

/*
 * Close the write side of a TLS connection: send close_notify and keep
 * reading (TLS 1.3 half-close, RFC 8446 6.1).  Returns 0 when the alert
 * went to the socket, -1 when it could not be written whole.
 */
int
tls_shutdown_write(SSL *ssl)
{
	int r;

	if (SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN)
		return (0);
	r = SSL_shutdown(ssl);
	ERR_clear_error();
	return (r >= 0 ? 0 : -1);
}

/* Decrypted bytes of the current record not read yet. */
size_t
tls_pending(SSL *ssl)
{
	int n = SSL_pending(ssl);

	return (n > 0 ? (size_t)n : 0);
}

/* Another reference to ctx (a worker's listener sharing it), or NULL. */
SSL_CTX *
tls_ctx_ref(SSL_CTX *ctx)
{
	if (ctx != NULL)
		SSL_CTX_up_ref(ctx);
	return (ctx);
}

/* Describe the result of verifying the peer's certificate, "ok" if none. */
const char *
tls_verify_error(SSL *ssl)
{
	return (X509_verify_cert_error_string(SSL_get_verify_result(ssl)));
}

/* A new server-side connection on ctx, to hand to a stream. */
SSL *
tls_server_ssl_new(SSL_CTX *ctx)
{
	SSL *ssl;

	if ((ssl = SSL_new(ctx)) == NULL)
		abort(); /* allocation failure, as with xmalloc */
	return (ssl);
}

/* Text of an OpenSSL error code, for logs. */
void
tls_error_string(unsigned long e, char *buf, size_t len)
{
	const char *reason;

	if (e == 0) {
		snprintf(buf, len, "connection closed during the handshake");
		return;
	}
	if ((reason = ERR_reason_error_string(e)) != NULL)
		snprintf(buf, len, "%s", reason);
	else
		ERR_error_string_n(e, buf, len);
}

/*
 * What OpenSSL error e (from stream_tls_error) is about:
 * TLS_ERR_SYSCALL when it is no library error at all but libevent's
 * stand-in for a socket error (SSL_ERROR_SYSCALL), TLS_ERR_NOT_TLS when
 * the peer answered a ClientHello with something that is not TLS (plain
 * HTTP, say: a plaintext port), TLS_ERR_OTHER for the rest.
 */
int
tls_error_kind(unsigned long e)
{
	int r = ERR_GET_REASON(e);

	if (ERR_GET_LIB(e) == 0)
		return (TLS_ERR_SYSCALL);
	if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
	    (r == SSL_R_WRONG_VERSION_NUMBER ||
		r == SSL_R_PACKET_LENGTH_TOO_LONG ||
		r == SSL_R_UNKNOWN_PROTOCOL))
		return (TLS_ERR_NOT_TLS);
	return (TLS_ERR_OTHER);
}

/* One entry of an SNI map: a host name (or "*.suffix") and its context. */
struct tls_sni_entry {
	char *se_name;
	SSL_CTX *se_ctx;
};

/* Certificates chosen by the name a client asks for (SNI). */
struct tls_sni {
	struct tls_sni_entry *ts_entries;
	size_t ts_count;
};

/* A new, empty SNI map. */
struct tls_sni *
tls_sni_new(void)
{
	return (xcalloc(1, sizeof(struct tls_sni)));
}

/* Add name (exact, or "*.example.com" for one label) served by ctx. */
void
tls_sni_add(struct tls_sni *ts, const char *name, SSL_CTX *ctx)
{
	ts->ts_entries = xreallocarray(
	    ts->ts_entries, ts->ts_count + 1, sizeof *ts->ts_entries);
	ts->ts_entries[ts->ts_count].se_name = xstrdup(name);
	ts->ts_entries[ts->ts_count].se_ctx = ctx;
	SSL_CTX_up_ref(ctx);
	ts->ts_count++;
}

/* Free an SNI map and its references. */
void
tls_sni_free(struct tls_sni *ts)
{
	size_t i;

	if (ts == NULL)
		return;
	for (i = 0; i < ts->ts_count; i++) {
		free(ts->ts_entries[i].se_name);
		SSL_CTX_free(ts->ts_entries[i].se_ctx);
	}
	free(ts->ts_entries);
	free(ts);
}

/* Does name match pattern (exact, or a "*." wildcard for one label)? */
static int
tls_sni_match(const char *pattern, const char *name)
{
	const char *dot;

	if (strcasecmp(pattern, name) == 0)
		return (1);
	if (strncmp(pattern, "*.", 2) != 0 ||
	    (dot = strchr(name, '.')) == NULL || dot == name)
		return (0);
	return (strcasecmp(pattern + 1, dot) == 0);
}

/* The servername callback: switch to the context serving the name. */
static int
tls_sni_cb(SSL *ssl, int *alert, void *arg)
{
	struct tls_sni *ts = arg;
	const char *name;
	size_t i;

	(void)alert;
	name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
	if (name == NULL)
		return (SSL_TLSEXT_ERR_NOACK);
	for (i = 0; i < ts->ts_count; i++) {
		if (tls_sni_match(ts->ts_entries[i].se_name, name)) {
			SSL_set_SSL_CTX(ssl, ts->ts_entries[i].se_ctx);
			return (SSL_TLSEXT_ERR_OK);
		}
	}
	/* Unknown names get the default certificate. */
	return (SSL_TLSEXT_ERR_OK);
}

/* Free the SNI map a context owns, with the context. */
static void
tls_sni_free_cb(
    void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
	(void)parent;
	(void)ad;
	(void)idx;
	(void)argl;
	(void)argp;
	tls_sni_free(ptr);
}

/*
 * Let the default context dflt hand names in ts to their contexts.  dflt
 * takes ts over: the map lives as long as the context, which connections
 * still in their handshake keep alive after a reload.
 */
void
tls_sni_attach(SSL_CTX *dflt, struct tls_sni *ts)
{
	if (!SSL_CTX_set_ex_data(dflt, tls_sni_idx, ts))
		abort();
	SSL_CTX_set_tlsext_servername_callback(dflt, tls_sni_cb);
	SSL_CTX_set_tlsext_servername_arg(dflt, ts);
}

/*
 * Give a client context a certificate chain and key to present (mutual
 * TLS).  Returns 0, or -1 with *cause naming the file and the reason.
 */
int
tls_client_ctx_set_cert(
    SSL_CTX *ctx, const char *cert_file, const char *key_file, char **cause)
{
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
		xasprintf(cause, "cannot load client certificate %s: %s",
		    cert_file, tls_last_error());
		return (-1);
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
		xasprintf(cause, "cannot load client key %s: %s", key_file,
		    tls_last_error());
		return (-1);
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		xasprintf(cause, "client key %s does not match certificate %s",
		    key_file, cert_file);
		return (-1);
	}
	return (0);
}

/*
 * Make ssl ready for a stream (lib/stream.c) on socket fd, as a server
 * when accept is non-zero: writes may be partial and move (the bytes come
 * from an evbuffer), and OpenSSL reads ahead, so that a record costs one
 * read(2) rather than a header and a body, and several small ones arrive
 * with one.  Verification stays as ssl's owner set it.  An ssl whose
 * handshake is over (taken from another transport) keeps its role and
 * state: the stream's handshake step then ends at once.  Returns 0, or -1
 * when OpenSSL cannot take the socket.
 */
int
tls_stream_attach(SSL *ssl, int fd, int accept)
{
	ERR_clear_error();
	if (SSL_set_fd(ssl, fd) != 1) {
		ERR_clear_error();
		return (-1);
	}
	SSL_set_mode(ssl,
	    SSL_MODE_ENABLE_PARTIAL_WRITE |
		SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_set_read_ahead(ssl, 1);
	SSL_set_default_read_buffer_len(ssl, TLS_STREAM_READ_BUF);
	/* Setting the role again would reset a finished handshake. */
	if (SSL_is_init_finished(ssl))
		return (0);
	if (accept)
		SSL_set_accept_state(ssl);
	else
		SSL_set_connect_state(ssl);
	return (0);
}

/*
 * What the last SSL_* call on ssl, which returned r, means for its
 * caller: TLS_IO_WANT_READ or TLS_IO_WANT_WRITE, TLS_IO_EOF for
 * close_notify (or a close without it, where the context ignores that),
 * TLS_IO_DIRTY_EOF for a close without close_notify, else TLS_IO_ERROR
 * with *err the oldest OpenSSL error (0 for a socket error, errno then
 * says which).  The error queue is left clean; errno is kept.
 */
static int
tls_io_result(SSL *ssl, int r, unsigned long *err)
{
	int saved = errno, rv;
	unsigned long e;

	*err = 0;
	switch (SSL_get_error(ssl, r)) {
	case SSL_ERROR_WANT_READ:
		rv = TLS_IO_WANT_READ;
		break;
	case SSL_ERROR_WANT_WRITE:
		rv = TLS_IO_WANT_WRITE;
		break;
	case SSL_ERROR_ZERO_RETURN:
		rv = TLS_IO_EOF;
		break;
	case SSL_ERROR_SYSCALL:
		/* OpenSSL 1.1's way of saying "closed without close_notify". */
		rv = saved == 0 && ERR_peek_error() == 0 ? TLS_IO_DIRTY_EOF
							 : TLS_IO_ERROR;
		*err = ERR_peek_error();
		break;
	default:
		e = ERR_peek_error();
		if (ERR_GET_LIB(e) == ERR_LIB_SSL &&
		    ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
			rv = TLS_IO_DIRTY_EOF;
		else {
			rv = TLS_IO_ERROR;
			*err = e;
		}
		break;
	}
	ERR_clear_error();
	errno = saved;
	return (rv);
}

/* Take the handshake on as far as the socket lets: 1 when done, or TLS_IO_*. */
int
tls_io_handshake(SSL *ssl, unsigned long *err)
{
	int r;

	ERR_clear_error();
	errno = 0;
	if ((r = SSL_do_handshake(ssl)) == 1) {
		*err = 0;
		return (1);
	}
	return (tls_io_result(ssl, r, err));
}

/* Read into buf, at most len bytes: the bytes read (>0), or TLS_IO_*. */
int
tls_io_read(SSL *ssl, void *buf, size_t len, unsigned long *err)
{
	int r;

	if (len > INT_MAX)
		len = INT_MAX;
	ERR_clear_error();
	errno = 0;
	if ((r = SSL_read(ssl, buf, (int)len)) > 0)
		return (r);
	return (tls_io_result(ssl, r, err));
}

/*
 * Write buf, len bytes (at most a record's worth is best): the bytes
 * written (>0), or TLS_IO_*; after a WANT the same len must be offered
 * again, from where ever the bytes have moved.
 */
int
tls_io_write(SSL *ssl, const void *buf, size_t len, unsigned long *err)
{
	int r;

	if (len > INT_MAX)
		len = INT_MAX;
	ERR_clear_error();
	errno = 0;
	if ((r = SSL_write(ssl, buf, (int)len)) > 0)
		return (r);
	return (tls_io_result(ssl, r, err));
}

/*
 * Send close_notify, or finish sending it: 1 once it is on the socket,
 * TLS_IO_WANT_WRITE (or _READ) to be called again, TLS_IO_ERROR.  Reading
 * may go on (a half-close, RFC 8446 section 6.1).
 */
int
tls_io_close_notify(SSL *ssl, unsigned long *err)
{
	int r;

	ERR_clear_error();
	errno = 0;
	if ((r = SSL_shutdown(ssl)) >= 0) {
		*err = 0;
		return (1);
	}
	return (tls_io_result(ssl, r, err));
}

/* Does OpenSSL hold bytes of ssl not handed out yet (records read ahead)? */
int
tls_has_pending(SSL *ssl)
{
	return (SSL_has_pending(ssl));
}

/* Free a connection; NULL is ignored. */
void
tls_ssl_free(SSL *ssl)
{
	SSL_free(ssl);
}
