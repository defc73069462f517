/* TLS contexts and connections; the only module that calls OpenSSL. */
#ifndef AK_TLS_H
#define AK_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

void tls_init(void);
SSL_CTX *tls_server_ctx_new(const char *, const char *, char **);
int tls_server_set_alpn(SSL_CTX *, const char *const *, size_t);
SSL_CTX *tls_client_ctx_new(const char *, int, char **);
SSL *tls_client_ssl_new(SSL_CTX *, const char *, char **);
int tls_client_set_alpn(SSL *, const char *const *, size_t);
int tls_alpn_is(SSL *, const char *);
int tls_client_ctx_set_cert(SSL_CTX *, const char *, const char *, char **);
void tls_ctx_free(SSL_CTX *);
SSL_CTX *tls_ctx_ref(SSL_CTX *);
int tls_read_more(SSL *, void *, size_t);
int tls_write_now(SSL *, const void *, size_t);
size_t tls_pending(SSL *);
int tls_shutdown_write(SSL *);
const char *tls_last_error(void);
const char *tls_verify_error(SSL *);
SSL *tls_server_ssl_new(SSL_CTX *);
void tls_error_string(unsigned long, char *, size_t);
int tls_error_kind(unsigned long);
#define TLS_ERR_SYSCALL 0 /* a socket error, not a TLS one */
#define TLS_ERR_NOT_TLS 1 /* the peer does not speak TLS */
#define TLS_ERR_OTHER 2

/* A stream's TLS I/O (lib/stream.c). */
#define TLS_STREAM_READ_BUF (64 * 1024) /* what OpenSSL reads ahead at most */
#define TLS_IO_EOF 0 /* close_notify */
#define TLS_IO_ERROR (-1)
#define TLS_IO_WANT_READ (-2)
#define TLS_IO_WANT_WRITE (-3)
#define TLS_IO_DIRTY_EOF (-4) /* closed without close_notify */
int tls_stream_attach(SSL *, int, int);
int tls_io_handshake(SSL *, unsigned long *);
int tls_io_read(SSL *, void *, size_t, unsigned long *);
int tls_io_write(SSL *, const void *, size_t, unsigned long *);
int tls_io_close_notify(SSL *, unsigned long *);
int tls_has_pending(SSL *);
void tls_ssl_free(SSL *);

struct tls_sni;
struct tls_sni *tls_sni_new(void);
void tls_sni_add(struct tls_sni *, const char *, SSL_CTX *);
void tls_sni_free(struct tls_sni *);
void tls_sni_attach(SSL_CTX *, struct tls_sni *);

#endif
