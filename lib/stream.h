/*
 * A non-blocking byte stream over a socket, plain or TLS, on libevent's
 * public API (struct event, evbuffer) and OpenSSL: the I/O layer of both
 * programs (docs/architecture.md, "I/O layer").
 *
 * Shaped like a bufferevent, so that converting a caller is mechanical:
 * an input and an output evbuffer, read/write/event callbacks, watermarks
 * and timeouts.  What it does that a libevent 2.1 bufferevent does not:
 *
 * - reads take what the socket holds, up to EVIO_MAX_IO and the read high
 *   watermark, with one readv and no ioctl(FIONREAD); a TLS stream
 *   decrypts every record OpenSSL holds in the same pass;
 * - at the read high watermark the stream stops polling and starts again
 *   by itself when the owner drains the input below it (no loop spin);
 * - what the owner appends during a loop pass is written at the end of
 *   the pass, the writes of every stream of the loop together, and only
 *   what the socket does not take waits for EV_WRITE;
 * - the socket can be lent to splice(2) and taken back.
 *
 * Differences a caller moving from a bufferevent must know: the write
 * callback runs only after a write that leaves the output at or below
 * the low watermark (a bufferevent's also runs on any writable socket
 * with nothing written); a read timeout runs only while the stream polls
 * for input (not at the high watermark, as a bufferevent's); a TLS close
 * without close_notify is EOF (stream_eof_dirty tells); STREAM_EV_CONNECTED
 * also comes after an accepted TLS stream's handshake.
 *
 * Callbacks run from the loop, never from inside a stream_* call.  A
 * stream may be freed from inside any callback, its own included: the
 * memory goes when the callback returns.
 */
#ifndef AK_STREAM_H
#define AK_STREAM_H

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <stddef.h>

struct event_base;
struct evbuffer;
struct stream;
struct ssl_st; /* OpenSSL's SSL */

typedef void (*stream_data_cb)(struct stream *, void *);
typedef void (*stream_event_cb)(struct stream *, short, void *);

/* What an event callback is told; the values of BEV_EVENT_*. */
#define STREAM_EV_READING 0x01 /* ... while reading */
#define STREAM_EV_WRITING 0x02 /* ... while writing */
#define STREAM_EV_EOF 0x10 /* the peer ended its side */
#define STREAM_EV_ERROR 0x20 /* stream_errno, stream_tls_error say why */
#define STREAM_EV_TIMEOUT 0x40
#define STREAM_EV_CONNECTED 0x80 /* connected, and TLS handshake done */

/* stream_new's flags. */
#define STREAM_O_CLOSE 0x01 /* close the socket with the stream */
#define STREAM_O_ACCEPT 0x02 /* TLS: the server's side of the handshake */

/*
 * Most bytes one read or write moves (a read still takes only what the
 * socket has).
 */
#define EVIO_MAX_IO (256 * 1024)

/*
 * What a read takes into the input directly, sized so that the input
 * chain is one 16 KiB allocation: a 16 KiB response arrives without a
 * copy.  More goes to a per-thread scratch buffer and is copied after it,
 * so that an idle connection holds no big buffer; after a read that
 * filled all it was offered, the next goes straight into the input.
 */
#define EVIO_OWN_READ (16384 - 64)

struct stream *
stream_new(struct event_base *, int fd, struct ssl_st *, int flags);
void stream_free(struct stream *);
void stream_setcb(struct stream *, stream_data_cb readcb,
    stream_data_cb writecb, stream_event_cb eventcb, void *arg);
void stream_enable(struct stream *, short);
void stream_disable(struct stream *, short);
short stream_get_enabled(const struct stream *);
struct evbuffer *stream_input(struct stream *);
struct evbuffer *stream_output(struct stream *);
void stream_setwatermark(struct stream *, short, size_t lo, size_t hi);
void stream_set_timeouts(
    struct stream *, const struct timeval *rd, const struct timeval *wr);
int stream_connect(struct stream *, const struct sockaddr *, socklen_t);
int stream_shutdown_write(struct stream *);
void stream_trigger_read(struct stream *);
int stream_flush(struct stream *);
int stream_lend(struct stream *);
void stream_unlend(struct stream *);
int stream_getfd(const struct stream *);
struct ssl_st *stream_ssl(const struct stream *);
int stream_errno(const struct stream *);
unsigned long stream_tls_error(const struct stream *);
int stream_eof_dirty(const struct stream *);
size_t stream_state_print(const struct stream *, char *, size_t);
struct event_base *stream_base_new(void);
void stream_malloc_tune(void);

#endif
