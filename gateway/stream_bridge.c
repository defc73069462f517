/*
 * BRIDGE, to delete when the gateway's HTTP sockets are streams (branch
 * i18-io, conn_steal_stream): stream_from_bev turns the bufferevent an
 * HTTP connection hands to a tunnel link or an application WebSocket
 * into a stream (lib/stream.h), the transport wsconn runs on.  Its
 * callers are the three hand-over points: tunnel_link_upgrade
 * (tunnel.c), tsrv_head_cb (tunnelsrv.c) and tunnel_ws_accept
 * (tunnel_ws.c).  It is the one place the gateway makes OpenSSL calls
 * outside lib/tls.c, because it undoes what libevent's OpenSSL
 * bufferevent would do at its free.
 */
#include <sys/types.h>

#include <stdlib.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include "gw.h"
#include "stream.h"

static BIO_METHOD *bridge_bio_meth;

/* Write through to the socket BIO below, with its retry flags. */
static int
bridge_bio_write(BIO *b, const char *buf, int len)
{
	int r;

	BIO_clear_retry_flags(b);
	r = BIO_write(BIO_next(b), buf, len);
	BIO_copy_next_retry(b);
	return (r);
}

/* Read through (OpenSSL reads from the read BIO; this is for symmetry). */
static int
bridge_bio_read(BIO *b, char *buf, int len)
{
	int r;

	BIO_clear_retry_flags(b);
	r = BIO_read(BIO_next(b), buf, len);
	BIO_copy_next_retry(b);
	return (r);
}

/* Everything goes to the socket BIO, except that it has no socket. */
static long
bridge_bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
	if (cmd == BIO_C_GET_FD)
		return (-1);
	return (BIO_ctrl(BIO_next(b), cmd, num, ptr));
}

/* A new filter is ready at once. */
static int
bridge_bio_create(BIO *b)
{
	BIO_set_init(b, 1);
	return (1);
}

/*
 * Put a filter BIO that hides the socket in front of ssl's write BIO.
 * libevent frees an OpenSSL bufferevent from the loop, later, and then
 * closes whatever socket SSL_get_wbio(ssl) names and frees ssl: with the
 * filter it closes nothing, and a reference we took keeps ssl.  Returns
 * 0, or -1 when OpenSSL cannot allocate.
 */
static int
bridge_hide_fd(SSL *ssl)
{
	BIO *f, *sock = SSL_get_wbio(ssl);

	if (bridge_bio_meth == NULL) {
		bridge_bio_meth = BIO_meth_new(
		    BIO_get_new_index() | BIO_TYPE_FILTER, "stream bridge");
		if (bridge_bio_meth == NULL ||
		    !BIO_meth_set_write(bridge_bio_meth, bridge_bio_write) ||
		    !BIO_meth_set_read(bridge_bio_meth, bridge_bio_read) ||
		    !BIO_meth_set_ctrl(bridge_bio_meth, bridge_bio_ctrl) ||
		    !BIO_meth_set_create(bridge_bio_meth, bridge_bio_create))
			return (-1);
	}
	if (sock == NULL || (f = BIO_new(bridge_bio_meth)) == NULL)
		return (-1);
	BIO_up_ref(sock);
	BIO_push(f, sock);
	SSL_set0_wbio(ssl, f);
	return (0);
}

/*
 * Copy what src holds to dst.  A bufferevent's user may not drain its
 * output (libevent freezes its start), so nothing is moved: a few bytes
 * at most (the 101, a request pipelined behind the upgrade), freed with
 * the bufferevent.  Returns 0 or -1.
 */
static int
bridge_copy(struct evbuffer *dst, struct evbuffer *src)
{
	size_t n = evbuffer_get_length(src);

	if (n == 0)
		return (0);
	return (evbuffer_add(dst, evbuffer_pullup(src, -1), n));
}

/*
 * A stream on bev's socket (and TLS connection), with what bev had read
 * and not yet written; bev is freed without closing either.  Aborts when
 * OpenSSL cannot allocate, as xmalloc.
 */
struct stream *
stream_from_bev(struct bufferevent *bev)
{
	struct event_base *base = bufferevent_get_base(bev);
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer *out = bufferevent_get_output(bev);
	struct stream *s;
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	int fd = bufferevent_getfd(bev);

	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	bufferevent_disable(bev, EV_READ | EV_WRITE);
	if (ssl == NULL)
		bufferevent_setfd(bev, -1); /* its free closes nothing */
	else
		SSL_up_ref(ssl); /* ... and its SSL_free keeps ssl */
	/* Its handshake is over: the stream's ends at once (tls.c). */
	s = stream_new(base, fd, ssl, STREAM_O_CLOSE | STREAM_O_ACCEPT);
	if (s == NULL || (ssl != NULL && bridge_hide_fd(ssl) != 0) ||
	    bridge_copy(stream_input(s), in) != 0 ||
	    bridge_copy(stream_output(s), out) != 0)
		abort(); /* allocation failure, as with xmalloc */
	bufferevent_free(bev);
	return (s);
}
