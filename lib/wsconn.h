/*
 * WebSocket connections (RFC 6455) for the reverse tunnel and anything else
 * that speaks WebSocket after an HTTP/1.1 upgrade.
 *
 * We do the handshake (helpers below, over lib/http1.c messages).  A
 * struct wsconn sits on a stream (lib/stream.h), plain or TLS, once the handshake
 * is over: every frame it receives is parsed by wsframe.c, it delivers
 * whole messages and queues outgoing ones, our data frames and wslay's
 * control frames.  No extensions (no compression), and we never send
 * pings: the tunnel's heartbeat is JSON (tunnel-protocol.md §3, §7).
 * Pings from the peer are answered with pongs.
 */
#ifndef AK_WSCONN_H
#define AK_WSCONN_H

#include <stddef.h>
#include <stdint.h>

#include "wsframe.h"

struct event_base;
struct evbuffer;
struct http1_msg;
struct stream;

/* Length of a Sec-WebSocket-Key and of a Sec-WebSocket-Accept value. */
#define WS_KEY_LEN 24
#define WS_ACCEPT_LEN 28

/* Largest message by default (the tunnel's 8 MiB control frame, §3.1). */
#define WSCONN_MAX_MESSAGE_DEFAULT ((size_t)8 << 20)
/*
 * Reading pauses while more than this much is queued for the peer: what we
 * read makes our owner answer, so a peer that sends but does not read could
 * otherwise make us buffer without bound.  Its frames wait in the kernel
 * and it feels TCP backpressure instead.
 */
#define WSCONN_HIWAT ((size_t)4 << 20)
/* ... and resumes, and on_writable is called, at or below this much. */
#define WSCONN_LOWAT ((size_t)1 << 20)
/* wsconn_send refuses what would queue more than this in all. */
#define WSCONN_QUEUE_LIMIT ((size_t)32 << 20)
/* Seconds to wait for the closing handshake before dropping the transport. */
#define WSCONN_CLOSE_TIMEOUT 5
/* Most bytes held unparsed in the stream's input. */
#define WSCONN_READ_HIWAT ((size_t)256 << 10)

/*
 * Put the Sec-WebSocket-Accept value for client_key (the key as sent, 24
 * characters for a valid one) and a NUL in out.  Returns 0, or -1 if
 * OpenSSL fails.
 */
int ws_accept_key(const char *client_key, char out[WS_ACCEPT_LEN + 1]);

/*
 * Is a parsed request head a valid WebSocket upgrade (GET, HTTP/1.1,
 * Connection lists upgrade, Upgrade lists websocket, Sec-WebSocket-Version
 * 13, one Sec-WebSocket-Key that is 16 bytes in base64, no body)?  Returns
 * 0 with *key pointing at the key inside the message, or -1 with *why set
 * to a sentence the caller frees.  Answer a refusal with 400, or with 426
 * and "Sec-WebSocket-Version: 13" when the version was wrong.
 */
int ws_check_upgrade_request(
    const struct http1_msg *, const char **key, char **why);

/*
 * Append a 101 response accepting the upgrade to out.  extra_headers is
 * NULL or whole header lines, each ending in CRLF.
 */
void ws_write_accept_response(
    struct evbuffer *out, const char *accept_key, const char *extra_headers);

/*
 * Build a client upgrade request for path (starting with '/') on
 * host_header, with key from ws_random_key and extra_headers a
 * NULL-terminated list of "Name: value" strings (or NULL).  Returns a
 * string the caller frees, or NULL if any part contains a CR, LF or NUL
 * where it would break the head (spaces in host or path, too).
 */
char *ws_client_request(const char *host_header, const char *path,
    const char *key, const char *const *extra_headers);

/*
 * Is a parsed response head the server's acceptance of our request with
 * key (101, Upgrade websocket, Connection upgrade, the right
 * Sec-WebSocket-Accept, no extension or subprotocol we did not offer)?
 * Returns 0, or -1 with *why set to a sentence the caller frees.
 */
int
ws_check_accept_response(const struct http1_msg *, const char *key, char **why);
/*
 * The same, on a response head as the gateway's core reads it, for a
 * proxy that passed another client's offers on (Sec-WebSocket-Extensions,
 * -Protocol): the extension and subprotocol the server chose are not
 * checked, the client checks them.
 */
struct head;
int ws_check_accept_relayed(const struct head *, const char *key, char **why);

/* Put a fresh random Sec-WebSocket-Key and a NUL in out. */
void ws_random_key(char out[WS_KEY_LEN + 1]);

/*
 * What a wsconn tells its owner.  Any member may be NULL.
 *
 * on_message gets one whole message; data is valid only during the call
 * (and is not NUL-terminated).  Text messages are valid UTF-8 (we check).
 *
 * on_message_buf, if set, is called instead of on_message: msg holds the
 * whole message and nothing else, in the chains it was read into (a
 * masked one unmasked there).  The owner may remove or move any of it
 * (evb_take moves it without copying); whatever is left is dropped when
 * the call returns.  msg is ours: do not free it or keep it.
 *
 * on_close is called exactly once, from the event loop, when the
 * connection is over and the transport has been closed: after a close
 * handshake (code and reason from the peer's close frame, 1005 if it had no
 * code), after a protocol error we detected (the code we sent, e.g. 1002,
 * 1007 or 1009), or after EOF, a transport error or the close timeout (1006).
 * It is not called once wsconn_free has been called.  After it only
 * wsconn_free is useful; calling it from on_close is fine.
 *
 * on_writable is called when what is queued for the peer drains to
 * WSCONN_LOWAT or below, after it had been above.
 */
struct wsconn_cbs {
	void (*on_message)(
	    void *arg, int is_binary, const uint8_t *data, size_t len);
	void (*on_close)(void *arg, uint16_t code, const char *reason);
	void (*on_writable)(void *arg);
	void (*on_message_buf)(void *arg, int is_binary, struct evbuffer *msg);
};

struct wsconn;

/*
 * Run a WebSocket over stream s, whose handshake is done (a TLS one may
 * still be finishing its own: what is sent waits for it); bytes already
 * in its input are the first frames, bytes in its output go first.
 * is_client picks the role (clients mask what they send and refuse masked
 * frames).  Messages over max_message bytes (0 means
 * WSCONN_MAX_MESSAGE_DEFAULT) close the connection with 1009.  The wsconn
 * owns s from now on, sets its callbacks and watermarks, and frees it when
 * the connection ends (which closes the socket if s was made with
 * STREAM_O_CLOSE).  cbs is copied.  Returns NULL (and leaves s to the
 * caller) only if wslay or libevent cannot allocate.
 */
struct wsconn *wsconn_new(struct event_base *, struct stream *s, int is_client,
    const struct wsconn_cbs *cbs, void *arg, size_t max_message);

/*
 * Queue one message, copying (and, as a client, masking) data into the
 * stream's output.  Returns 0, or -1 if the connection is
 * closing or closed, or the message would take the queue over
 * WSCONN_QUEUE_LIMIT.  Callers keep wsconn_queued below their own budget
 * and wait for on_writable; failures of the transport come as on_close.
 */
int wsconn_send(struct wsconn *, int is_binary, const uint8_t *, size_t);

/*
 * Queue one message made of the hlen bytes at hdr (hdr may be NULL when
 * hlen is 0) followed by the len bytes at position pos of src, copied
 * (and, as a client, masked) straight from src's chains into the output,
 * or, a server's of 8 KiB or more on a plain socket, shared with src
 * (evb_share; src may drain or free the bytes at once, and a range libevent
 * will not share is copied).  src keeps its bytes.  Returns 0, or -1 as
 * wsconn_send, or if src holds fewer than pos + len bytes.
 */
int wsconn_send_ev(struct wsconn *, int is_binary, const uint8_t *hdr,
    size_t hlen, struct evbuffer *src, size_t pos, size_t len);

/*
 * Start the closing handshake: send a close frame with code (0 for none)
 * and reason (NULL, or UTF-8 cut to WS_CLOSE_REASON_MAX bytes), ignore
 * further messages, and close the transport once the peer has answered and
 * our frame is written, or after WSCONN_CLOSE_TIMEOUT seconds; then
 * on_close.  Returns -1 if already closing or code may not be sent.
 */
int wsconn_close(struct wsconn *, uint16_t code, const char *reason);

/* Bytes queued for the peer: in wslay plus in the stream's output. */
size_t wsconn_queued(const struct wsconn *);

/*
 * Free the connection and its stream at once, without a close frame
 * and without on_close.  From inside one of its callbacks the free is
 * deferred to the event loop and the connection goes quiet at once.
 * NULL is ignored.
 */
void wsconn_free(struct wsconn *);

#endif
