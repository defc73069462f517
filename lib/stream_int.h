/*
 * The inside of a stream, shared by lib/stream.c (the loop, the queue,
 * plain sockets, the API) and lib/stream_tls.c (OpenSSL's part); no one
 * else includes it.
 */
#ifndef AK_STREAM_INT_H
#define AK_STREAM_INT_H

#include <sys/types.h>
#include <sys/queue.h>
#include <sys/time.h>

#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "stream.h"

struct event;
struct evbuffer;
struct evbuffer_cb_entry;
struct stream_q;

/* The largest TLS record's payload: what one SSL_write sends. */
#define STREAM_TLS_RECORD 16384
/* What a TLS read reserves after the first EVIO_OWN_READ. */
#define STREAM_TLS_MORE (65536 - 64)

enum stream_state {
	STREAM_S_NEW = 0, /* no socket yet: stream_connect makes one */
	STREAM_S_CONNECTING, /* connect(2) under way */
	STREAM_S_HANDSHAKE, /* TLS handshake */
	STREAM_S_OPEN,
	STREAM_S_FAILED, /* an error or timeout was reported: no more I/O */
};

struct stream_q;

struct stream {
	struct event_base *s_base;
	struct stream_q *s_q;
	int s_fd;
	int s_errno;
	SSL *s_ssl;
	enum stream_state s_state;
	int s_flags;
#define STREAM_F_CLOSE 0x0001 /* close s_fd with the stream */
#define STREAM_F_ACCEPT 0x0002 /* TLS: the server's side */
#define STREAM_F_FULL 0x0004 /* input at the read high watermark */
#define STREAM_F_EOF 0x0008 /* the peer ended its side */
#define STREAM_F_DIRTY 0x0010 /* ... TLS without close_notify */
#define STREAM_F_WBLOCKED 0x0020 /* output waits for EV_WRITE */
#define STREAM_F_SHUT 0x0040 /* stream_shutdown_write was asked */
#define STREAM_F_SHUT_DONE 0x0080 /* ... and it is done */
#define STREAM_F_LENT 0x0100 /* the socket is lent (stream_lend) */
#define STREAM_F_FREED 0x0200 /* stream_free ran inside a callback */
#define STREAM_F_BULK 0x0400 /* the last read filled what it offered */
#define STREAM_F_HS_READ 0x0800 /* the handshake waits for readable */
#define STREAM_F_HS_WRITE 0x1000 /* the handshake waits for writable */
#define STREAM_F_RD_WANTS_W 0x2000 /* SSL_read waits for writable */
#define STREAM_F_WR_WANTS_R 0x4000 /* SSL_write waits for readable */
#define STREAM_F_RTV 0x8000 /* s_rto_ms is set */
#define STREAM_F_WTV 0x10000 /* s_wto_ms is set */
#define STREAM_F_FLUSH 0x20000 /* freed with a write queued: make it */
	short s_enabled; /* the owner's EV_READ | EV_WRITE */
	short s_pending; /* STREAM_EV_* to tell the event callback */
	unsigned char s_notify;
#define STREAM_N_READ 0x01 /* run the read callback */
#define STREAM_N_READ_ANY 0x02 /* ... whatever the low watermark */
#define STREAM_N_WRITE 0x04 /* run the write callback */
	unsigned char s_work; /* STREAM_W_*: on s_q while non-zero */
#define STREAM_W_READ 0x01 /* read: OpenSSL may hold records */
#define STREAM_W_WRITE 0x02 /* write the output */
#define STREAM_W_NOTIFY 0x04 /* stream_trigger_read */
#define STREAM_W_EVENT 0x08 /* only tell what is pending */
#define STREAM_W_HANDSHAKE 0x10 /* start the TLS handshake */
	unsigned char s_ron; /* s_rev is added */
	unsigned char s_won; /* s_wev is added */
	unsigned int s_depth; /* entry points running for this stream */
	unsigned int s_qgen; /* q_gen when it was queued */
	TAILQ_ENTRY(stream) s_qentry;
	struct event *s_rev;
	struct event *s_wev; /* made when a write first waits */
	uint32_t s_rto_ms; /* the read timeout, while STREAM_F_RTV */
	uint32_t s_wto_ms; /* the write timeout, while STREAM_F_WTV */
	struct evbuffer *s_in;
	struct evbuffer *s_out;
	struct evbuffer_cb_entry *s_incb; /* only while STREAM_F_FULL */
	struct evbuffer_cb_entry *s_outcb;
	size_t s_rlo;
	size_t s_rhi; /* 0: none */
	size_t s_wlo;
	size_t s_tls_wlen; /* an SSL_write to offer again, this long */
	unsigned long s_tlserr;
	stream_data_cb s_readcb;
	stream_data_cb s_writecb;
	stream_event_cb s_eventcb;
	void *s_arg;
};

/* stream.c */
void stream_update(struct stream *);
void stream_fail(struct stream *, short, int, unsigned long);
void stream_eof(struct stream *, int);
size_t stream_read_room(struct stream *);
void stream_open(struct stream *);
void stream_read(struct stream *);

/* stream_tls.c */
void stream_read_tls(struct stream *, size_t);
ssize_t stream_write_tls(struct stream *);
int stream_close_notify(struct stream *);
void stream_handshake(struct stream *);

#endif
