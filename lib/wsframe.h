/*
 * WebSocket frames (RFC 6455 section 5): the one parser every received
 * byte stream goes through, the masking and UTF-8 checks, the close code
 * rule, and the header of the data frames we send.  No I/O and no
 * connection state: lib/wsconn.c owns those.
 *
 * The parser reads every frame, data and control, and enforces every rule
 * of the RFC for a connection without extensions: the mask bit for its
 * role, no RSV bits, no reserved opcode, control frames of at most 125
 * bytes and unfragmented, lengths in the fewest bytes and below 2^63,
 * continuations only inside a message and no new message inside one, a
 * message size limit, UTF-8 in text messages and close reasons, and the
 * close codes of section 7.4 with those registered since (1012-1014).
 * It unmasks a machine word at a time, in the input's own chains, so a
 * data frame's payload moves on without a copy.
 */
#ifndef AK_WSFRAME_H
#define AK_WSFRAME_H

#include <stddef.h>
#include <stdint.h>

struct evbuffer;

/* Opcodes (RFC 6455 section 5.2). */
#define WS_OP_CONT 0x0
#define WS_OP_TEXT 0x1
#define WS_OP_BINARY 0x2
#define WS_OP_CLOSE 0x8
#define WS_OP_PING 0x9
#define WS_OP_PONG 0xa

/* Close codes (RFC 6455 section 7.4.1). */
#define WS_CLOSE_NORMAL 1000
#define WS_CLOSE_GOING_AWAY 1001
#define WS_CLOSE_PROTOCOL_ERROR 1002
#define WS_CLOSE_UNSUPPORTED_DATA 1003
#define WS_CLOSE_NO_STATUS 1005 /* reported only: close frame without code */
#define WS_CLOSE_ABNORMAL 1006 /* reported only: no close frame at all */
#define WS_CLOSE_INVALID_DATA 1007
#define WS_CLOSE_POLICY 1008
#define WS_CLOSE_TOO_BIG 1009
#define WS_CLOSE_INTERNAL_ERROR 1011

/* Longest close reason a close frame can carry, in bytes. */
#define WS_CLOSE_REASON_MAX 123
/* Longest control frame payload. */
#define WS_CONTROL_MAX 125
/* Longest frame header: 2 bytes, a 64-bit length, a masking key. */
#define WS_HEADER_MAX 14

/*
 * May code travel in a close frame: 1000-1003, 1007-1014 (1012-1014 were
 * registered with IANA after RFC 6455; 1012 "service restart" is how a
 * tunnel server says "replaced") or 3000-4999?  1004-1006 and 1015 are
 * reserved, the rest unassigned.  The one rule for what we send, accept
 * and pass on.
 */
int ws_close_code_valid(unsigned int code);

/*
 * Put src XOR the masking key into dst (which may be src), len bytes, the
 * first with key byte koff.  Returns the key byte offset of the byte after.
 */
unsigned int ws_mask(uint8_t *dst, const uint8_t *src, size_t len,
    const uint8_t key[4], unsigned int koff);

/*
 * Go on checking UTF-8 (RFC 3629) with len more bytes; *state is 0
 * between characters (start with 0, and only a message that ends with 0
 * is whole).  Returns -1 at the first byte that cannot be UTF-8, else 0.
 */
int ws_utf8_check(uint32_t *state, const uint8_t *p, size_t len);

/*
 * Put the header of a whole (FIN) frame with opcode op and a payload of
 * len bytes into h, masked with key unless key is NULL.  Returns its
 * length.
 */
size_t ws_header_put(
    uint8_t h[WS_HEADER_MAX], uint8_t op, uint64_t len, const uint8_t *key);

/*
 * Put an unmasked close frame with code and reason (at most
 * WS_CLOSE_REASON_MAX bytes of it) into f: what a server puts between
 * the frames it relays when it goes away.  Returns its length.
 */
#define WS_CLOSE_FRAME_MAX (4 + 2 + WS_CLOSE_REASON_MAX)
size_t
ws_close_put(uint8_t f[WS_CLOSE_FRAME_MAX], uint16_t code, const char *reason);

/*
 * Where a stream of frames relayed untouched is, so that a frame of our
 * own can go between two of them: the header of the frame in progress
 * so far, then its payload bytes still to come.  Only the lengths are
 * read (no rule is checked: the endpoints do that), so it follows any
 * extension's frames.  Zeroed, it is at the stream's start.
 */
struct ws_track {
	uint64_t wt_left; /* payload bytes of the current frame to come */
	uint8_t wt_hdr[WS_HEADER_MAX]; /* its header so far */
	uint8_t wt_hlen; /* ... bytes of it */
};

/*
 * Follow len more bytes p of the stream.  With stop, follow only up to
 * the next boundary between two frames (none when at one already).
 * Returns the bytes followed: len without stop.
 */
size_t ws_track(struct ws_track *, const uint8_t *p, size_t len, int stop);

/* As ws_track, over the first len bytes of buf (which stay in it). */
size_t ws_track_evbuffer(
    struct ws_track *, struct evbuffer *buf, size_t len, int stop);

/* Is the stream between two frames? */
static inline int
ws_track_between(const struct ws_track *t)
{
	return (t->wt_left == 0 && t->wt_hlen == 0);
}

/* What wsframe_rx_next found. */
enum wsframe_ev {
	WSFRAME_EV_MORE = 0, /* nothing until more input */
	WSFRAME_EV_DATA, /* e_len payload bytes at the front of the input */
	WSFRAME_EV_CONTROL, /* a ping, a pong or a close frame */
	WSFRAME_EV_ERROR, /* the peer broke a rule: fail with e_code */
};

/*
 * One thing the parser found.
 *
 * DATA: the next e_len bytes at the front of the input are payload of a
 * message of opcode e_op (WS_OP_TEXT or WS_OP_BINARY), unmasked where they
 * lie and, in a text message, checked.  The caller removes exactly them
 * (drain, copy out or move) before it calls wsframe_rx_next again.
 * e_fin says they end the message (a whole text message is then valid
 * UTF-8); an empty message ends with e_len 0.
 *
 * CONTROL: e_op is WS_OP_PING, WS_OP_PONG or WS_OP_CLOSE, its payload the
 * e_len bytes at e_data (inside the parser, valid until the next call).
 * For a close, e_code is its code (WS_CLOSE_NO_STATUS when it had none)
 * and e_reason, e_reason_len its reason, valid UTF-8; nothing after a
 * close frame is parsed.
 *
 * ERROR: e_code is the close code to fail the connection with (1002, 1007
 * or 1009) and e_why a sentence saying what was wrong; nothing after it
 * is parsed.
 */
struct wsframe_event {
	enum wsframe_ev e_type;
	uint8_t e_op;
	uint8_t e_fin;
	uint16_t e_code;
	size_t e_len;
	const uint8_t *e_data;
	const char *e_reason;
	size_t e_reason_len;
	const char *e_why;
};

/* Where the parser is. */
enum wsframe_rx_state {
	WSFRAME_RX_HEAD = 0, /* at a frame header */
	WSFRAME_RX_DATA, /* in a data frame's payload */
	WSFRAME_RX_CONTROL, /* in a control frame's payload */
	WSFRAME_RX_END, /* after a close frame or an error */
};

/* The state of one received byte stream. */
struct wsframe_rx {
	enum wsframe_rx_state rx_state;
	int rx_flags;
#define WSFRAME_RX_F_SERVER 0x01 /* we are the server: frames come masked */
#define WSFRAME_RX_F_FIN 0x02 /* the current frame ends its message */
#define WSFRAME_RX_F_MASKED 0x04 /* the current frame is masked */
	size_t rx_max; /* longest message */
	uint64_t rx_left; /* payload bytes of the current frame to come */
	uint64_t rx_mlen; /* payload bytes of the message so far */
	uint32_t rx_utf8; /* ws_utf8_check state of a text message */
	uint8_t rx_op; /* opcode of the current frame */
	uint8_t rx_mop; /* WS_OP_TEXT or _BINARY of the message; 0: none */
	uint8_t rx_key[4]; /* masking key of the current frame ... */
	uint8_t rx_koff; /* ... and the key byte of its next payload byte */
	uint8_t rx_clen; /* bytes of a control frame's payload so far */
	uint8_t rx_ctl[WS_CONTROL_MAX];
};

/*
 * Start parsing a stream received by a server (frames must be masked) or
 * by a client (they must not be), messages up to max bytes.
 */
void wsframe_rx_init(struct wsframe_rx *, int is_server, size_t max);

/*
 * Parse the front of in (what is left of a stream fed in order, split
 * anywhere) up to the next thing to report, and fill *ev with it.  Frame
 * headers and control frames are removed from in; DATA leaves its bytes
 * to the caller.  Returns ev->e_type: WSFRAME_EV_MORE when in holds no
 * more of it, and always once the stream has ended.
 */
enum wsframe_ev wsframe_rx_next(
    struct wsframe_rx *, struct evbuffer *in, struct wsframe_event *ev);

/* Has the stream ended (a close frame came, or an error)? */
int wsframe_rx_ended(const struct wsframe_rx *);

#endif
