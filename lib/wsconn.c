/*
 * WebSocket connections: a connection object that glues wslay's event API
 * to a bufferevent.  The HTTP/1.1 handshake checks are in wshandshake.c.
 *
 * Data frames (text, binary, continuation) we parse, unmask, reassemble and
 * write ourselves, a machine word at a time: wslay unmasks and masks byte
 * by byte and copies every message twice, which was nearly half the
 * gateway's CPU in a tunnel download.  Control frames (close, ping, pong),
 * and any frame we would refuse, go to wslay whole and on their own, so
 * wslay answers pings, runs the closing handshake and picks the close code
 * of an error as before.  Both write whole frames into the bufferevent's
 * output, so what we queue lives in one place and wsconn_queued is exact
 * enough for credits.
 *
 * The bufferevent's callbacks only note what happened and activate one work
 * event; every callback into the owner runs from that event (or the free
 * from event_base_once), never from inside wsconn_send, wsconn_close or a
 * bufferevent callback, so an owner may send, close or free from any of its
 * callbacks.
 */
#include <sys/types.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/util.h>

#include <openssl/rand.h>

#include <wslay/wslay.h>

#include "alloc.h"
#include "evb.h"
#include "http1.h"
#include "log.h"
#include "wsconn.h"
#include "wthru.h"

/* Where a connection is in its life. */
enum wsconn_state {
	WSCONN_S_OPEN = 0, /* messages flow both ways */
	WSCONN_S_CLOSING, /* a close frame went out or came in, or we failed */
	WSCONN_S_CLOSED, /* transport closed, on_close called */
};

/* Where a byte stream is in its frames, for wsconn_close_fixup. */
struct ws_scan {
	uint8_t sc_hdr[14];
	uint8_t sc_hlen; /* header bytes collected */
	uint8_t sc_close; /* the current frame is a close */
	uint64_t sc_left; /* payload bytes of the current frame to come */
	uint64_t sc_off; /* payload bytes of it seen */
};

struct wsconn {
	struct event_base *ws_base;
	struct bufferevent *ws_bev; /* NULL once the transport is closed */
	wslay_event_context_ptr ws_ctx;
	struct wsconn_cbs ws_cbs;
	void *ws_arg;
	int ws_client;
	enum wsconn_state ws_state;
	int ws_flags;
#define WSCONN_F_DEAD 0x01 /* wsconn_free was called; free pending */
#define WSCONN_F_PAUSED 0x02 /* reading paused: too much queued */
#define WSCONN_F_ABOVE_LOW 0x04 /* queue was above WSCONN_LOWAT */
#define WSCONN_F_FAILED 0x08 /* we failed the connection: no reply awaited */
#define WSCONN_F_HAVE_CODE 0x10 /* ws_code and ws_reason are final */
#define WSCONN_F_IN_RECV 0x20 /* inside wsconn_parse */
#define WSCONN_F_IN_SEND 0x40 /* inside wslay_event_send */
#define WSCONN_F_TLS 0x80 /* the bufferevent is TLS: see wsconn_gather */

/* A TLS link's output chain for small frames (wsconn_gather). */
#define WSCONN_TLS_GATHER (16 * 1024)
/* A payload from an evbuffer at least this long is shared, not copied. */
#define WSCONN_SHARE_MIN (8 * 1024)
	int ws_work; /* what ws_ev_work has to do */
#define WSCONN_W_READ 0x01 /* parse the input */
#define WSCONN_W_WRITE 0x02 /* output drained to its low watermark */
#define WSCONN_W_EOF 0x04 /* transport ended (ws_bev_what says how) */
#define WSCONN_W_FINISH 0x08 /* close the transport, call on_close */
	short ws_bev_what; /* BEV_EVENT_* of the end of the transport */
	int ws_depth; /* our callbacks on the stack */
	uint16_t ws_code; /* close code for on_close */
	struct ws_scan ws_in; /* frame boundaries of what wslay reads */
	struct ws_scan ws_out; /* and of what it writes */
	/*
	 * What one wslay_event_send produces, moved to the bufferevent in
	 * one piece: a frame comes from wslay in pieces (header, payload),
	 * and each add to a bufferevent's output runs its callbacks.
	 */
	struct evbuffer *ws_stage;
	int ws_in_mapped; /* a received close code was lifted into 40xx */
	/*
	 * The data frames we parse ourselves (wsconn_parse).  Input bytes
	 * that are wslay's (a control frame, or everything from a frame we
	 * refuse on) are counted in ws_feed; wsconn_recv_cb hands out no
	 * more, so wslay never holds a data frame's bytes.
	 */
	size_t ws_feed; /* input bytes wslay may take (SIZE_MAX: all) */
	size_t ws_max; /* longest message we take */
	uint64_t ws_rleft; /* payload of the current data frame to come */
	uint8_t *ws_rbuf; /* the message so far, unmasked */
	size_t ws_rlen; /* bytes of the message so far */
	size_t ws_rcap; /* bytes allocated for ws_rbuf */
	uint32_t ws_rutf8; /* ws_utf8_check state of a text message */
	uint8_t ws_rop; /* WSLAY_TEXT_FRAME or _BINARY_FRAME; 0: none */
	uint8_t ws_rfin; /* the current frame ends the message */
	uint8_t ws_rmasked; /* the current frame is masked ... */
	uint8_t ws_rkoff; /* ... and its next byte uses key byte ws_rkoff */
	uint8_t ws_rkey[4];
	/*
	 * The message for on_message_buf: frames move here from the input
	 * chain by chain (evb_take), masked ones unmasked where they lie.
	 * ws_rbuf is for on_message only.
	 */
	struct evbuffer *ws_rmsg;
	char ws_reason[WS_CLOSE_REASON_MAX + 1];
	struct event *ws_ev_work; /* runs everything that calls the owner */
	struct event *ws_ev_timer; /* closing handshake deadline */
};

static void wsconn_kick(struct wsconn *, int);
static void wsconn_flush(struct wsconn *);
static void wsconn_set_code(struct wsconn *, uint16_t, const char *, size_t);

/* Fill buf with len random bytes; returns 0, or -1 if OpenSSL fails. */
static int
ws_random(uint8_t *buf, size_t len)
{
	if (len > INT32_MAX || RAND_bytes(buf, (int)len) != 1)
		return (-1);
	return (0);
}

/*
 * A masking key for a client frame. OpenSSL's RAND_bytes costs a getpid(2)
 * and a DRBG call each time, once per frame; keys come from a per-thread
 * pool of 64 filled in one call instead. Returns 0 or -1.
 */
static int
ws_mask_key(uint8_t key[4])
{
	static __thread uint8_t pool[256];
	static __thread size_t left;

	if (left < 4) {
		if (ws_random(pool, sizeof pool) != 0)
			return (-1);
		left = sizeof pool;
	}
	memcpy(key, pool + sizeof pool - left, 4);
	memset(pool + sizeof pool - left, 0, 4);
	left -= 4;
	return (0);
}

/* Name of a state, for debug logs. */
static const char *
wsconn_state_name(enum wsconn_state state)
{
	switch (state) {
	case WSCONN_S_OPEN:
		return ("open");
	case WSCONN_S_CLOSING:
		return ("closing");
	case WSCONN_S_CLOSED:
		return ("closed");
	}
	return ("?");
}

/* Print state and flags of a connection into buf, for debug logs. */
static const char *
wsconn_show(const struct wsconn *ws, char *buf, size_t len)
{
	int f = ws->ws_flags;

	snprintf(buf, len, "%s %s%s%s%s%s%s%s%s",
	    ws->ws_client ? "client" : "server",
	    wsconn_state_name(ws->ws_state), f & WSCONN_F_DEAD ? " DEAD" : "",
	    f & WSCONN_F_PAUSED ? " PAUSED" : "",
	    f & WSCONN_F_ABOVE_LOW ? " ABOVE_LOW" : "",
	    f & WSCONN_F_FAILED ? " FAILED" : "",
	    f & WSCONN_F_HAVE_CODE ? " HAVE_CODE" : "",
	    f & WSCONN_F_IN_RECV ? " IN_RECV" : "",
	    f & WSCONN_F_IN_SEND ? " IN_SEND" : "");
	return (buf);
}

/* Reason we give for a close code we sent because of a peer's error. */
static const char *
wsconn_code_reason(uint16_t code)
{
	switch (code) {
	case WS_CLOSE_INVALID_DATA:
		return ("invalid UTF-8 in a text message");
	case WS_CLOSE_TOO_BIG:
		return ("message too big");
	default:
		return ("protocol error");
	}
}

/* May code be sent in a close frame (RFC 6455 section 7.4)? */
static int
wsconn_code_sendable(uint16_t code)
{
	/* 1012-1014 are registered with IANA (1012: service restart). */
	return ((code >= 1000 && code <= 1014 && code != 1004 &&
		    code != WS_CLOSE_NO_STATUS && code != WS_CLOSE_ABNORMAL) ||
	    (code >= 3000 && code <= 4999));
}

/* Bytes waiting to be sent: in wslay plus in the bufferevent's output. */
size_t
wsconn_queued(const struct wsconn *ws)
{
	size_t n;

	if (ws->ws_state == WSCONN_S_CLOSED)
		return (0);
	n = wslay_event_get_queued_msg_length(ws->ws_ctx);
	if (ws->ws_bev != NULL)
		n += evbuffer_get_length(bufferevent_get_output(ws->ws_bev));
	return (n);
}

/* The header length of a frame whose first two bytes are b0 b1. */
static size_t
wsconn_hdr_len(uint8_t b1)
{
	size_t n = 2;

	if ((b1 & 0x7f) == 126)
		n += 2;
	else if ((b1 & 0x7f) == 127)
		n += 8;
	return (n + ((b1 & 0x80) ? 4 : 0));
}

/*
 * wslay 1.1 refuses to receive the close codes 1012-1014 that IANA added
 * after RFC 6455 (1012 "service restart" is how a tunnel server says
 * "replaced").  So we follow the frame boundaries of both byte streams, and
 * change the first byte of a received close code 0x03xx to 0x0fxx (private
 * codes wslay accepts), and of wslay's echo of it back.  One byte, so a
 * change never straddles two reads; XOR-ing it works masked or not.
 *
 * wsconn_scan moves sc over buf and returns the offset of the first byte of
 * a close code equal to `from` (unmasked), or n when there is none.
 */
static size_t
wsconn_scan(struct ws_scan *sc, const uint8_t *buf, size_t n, uint8_t from)
{
	size_t i = 0, take, hl, found = n;
	uint8_t key;
	uint64_t len;
	unsigned int k, end;

	while (i < n) {
		if (sc->sc_left == 0) {
			while (sc->sc_hlen < 2 && i < n)
				sc->sc_hdr[sc->sc_hlen++] = buf[i++];
			if (sc->sc_hlen < 2)
				break;
			hl = wsconn_hdr_len(sc->sc_hdr[1]);
			while (sc->sc_hlen < hl && i < n)
				sc->sc_hdr[sc->sc_hlen++] = buf[i++];
			if (sc->sc_hlen < hl)
				break;
			len = sc->sc_hdr[1] & 0x7f;
			end = len == 126 ? 4 : len == 127 ? 10 : 2;
			if (end > 2)
				len = 0;
			for (k = 2; k < end; k++)
				len = (len << 8) | sc->sc_hdr[k];
			sc->sc_close = (sc->sc_hdr[0] & 0x0f) == 0x08;
			sc->sc_left = len;
			sc->sc_off = 0;
			sc->sc_hlen = 0;
			if (len == 0)
				continue;
		}
		if (i == n)
			break;
		if (sc->sc_close && sc->sc_off == 0 && found == n) {
			key = 0;
			if (sc->sc_hdr[1] & 0x80)
				key = sc->sc_hdr[wsconn_hdr_len(sc->sc_hdr[1]) -
				    4];
			if ((uint8_t)(buf[i] ^ key) == from)
				found = i;
		}
		take = n - i;
		if (take > sc->sc_left)
			take = (size_t)sc->sc_left;
		i += take;
		sc->sc_left -= take;
		sc->sc_off += take;
	}
	return (found);
}

/*
 * Put src XOR the masking key into dst (which may be src), len bytes, the
 * first with key byte koff (RFC 6455 section 5.3).  Returns the key byte
 * offset of the byte after.  Eight bytes at a time: the key repeats every
 * four, so one 64-bit word of it, rotated by koff, fits every word.
 */
static unsigned int
ws_mask(uint8_t *dst, const uint8_t *src, size_t len, const uint8_t key[4],
    unsigned int koff)
{
	uint8_t kb[8];
	uint64_t k, w0, w1, w2, w3;
	size_t i;

	for (i = 0; i < sizeof kb; i++)
		kb[i] = key[(koff + i) & 3];
	memcpy(&k, kb, sizeof k);
	for (i = 0; i + 32 <= len; i += 32) {
		memcpy(&w0, src + i, 8);
		memcpy(&w1, src + i + 8, 8);
		memcpy(&w2, src + i + 16, 8);
		memcpy(&w3, src + i + 24, 8);
		w0 ^= k;
		w1 ^= k;
		w2 ^= k;
		w3 ^= k;
		memcpy(dst + i, &w0, 8);
		memcpy(dst + i + 8, &w1, 8);
		memcpy(dst + i + 16, &w2, 8);
		memcpy(dst + i + 24, &w3, 8);
	}
	for (; i + 8 <= len; i += 8) {
		memcpy(&w0, src + i, 8);
		w0 ^= k;
		memcpy(dst + i, &w0, 8);
	}
	for (; i < len; i++)
		dst[i] = src[i] ^ kb[i & 7];
	return ((unsigned int)((koff + len) & 3));
}

/*
 * Go on checking a text message for UTF-8 (RFC 3629: no overlong forms,
 * no surrogates, nothing past U+10FFFF; what wslay accepted) with len more
 * bytes.  *state is 0 between characters, else the continuation bytes
 * still to come and the range of the next one.  Returns -1 at the first
 * byte that cannot be UTF-8, else 0.
 */
static int
ws_utf8_check(uint32_t *state, const uint8_t *p, size_t len)
{
	unsigned int need, lo, hi, c;
	uint64_t w;
	size_t i = 0;

	need = *state & 0xff;
	lo = (*state >> 8) & 0xff;
	hi = (*state >> 16) & 0xff;
	while (i < len) {
		if (need != 0) {
			c = p[i++];
			if (c < lo || c > hi)
				return (-1);
			need--;
			lo = 0x80;
			hi = 0xbf;
			continue;
		}
		/* Text is mostly ASCII: skip it a word at a time. */
		while (i + 8 <= len) {
			memcpy(&w, p + i, sizeof w);
			if (w & 0x8080808080808080ULL)
				break;
			i += 8;
		}
		if (i == len)
			break;
		if ((c = p[i++]) < 0x80)
			continue;
		lo = 0x80;
		hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf)
			need = 1;
		else if (c >= 0xe0 && c <= 0xef) {
			need = 2;
			if (c == 0xe0)
				lo = 0xa0; /* overlong below */
			else if (c == 0xed)
				hi = 0x9f; /* surrogates above */
		} else if (c >= 0xf0 && c <= 0xf4) {
			need = 3;
			if (c == 0xf0)
				lo = 0x90; /* overlong below */
			else if (c == 0xf4)
				hi = 0x8f; /* past U+10FFFF above */
		} else
			return (-1);
	}
	*state = need == 0 ? 0 : need | lo << 8 | hi << 16;
	return (0);
}

/* Feed wslay from the bufferevent's input; would-block when none or paused. */
static ssize_t
wsconn_recv_cb(
    wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *arg)
{
	struct wsconn *ws = arg;
	struct evbuffer *in;
	size_t i;
	int n;

	(void)flags;
	/*
	 * Stop in the middle of the input once our owner's answers pile up
	 * past the high watermark: a peer that sends but does not read
	 * must not make us buffer without bound.
	 */
	if ((ws->ws_flags & WSCONN_F_DEAD) || ws->ws_bev == NULL ||
	    (ws->ws_state == WSCONN_S_OPEN &&
		wsconn_queued(ws) > WSCONN_HIWAT)) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return (-1);
	}
	/* Only what wsconn_parse gave wslay: it must not read ahead. */
	if (len > ws->ws_feed)
		len = ws->ws_feed;
	if (len > INT32_MAX)
		len = INT32_MAX;
	in = bufferevent_get_input(ws->ws_bev);
	if (len == 0 || (n = evbuffer_remove(in, buf, len)) <= 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return (-1);
	}
	if (ws->ws_feed != SIZE_MAX)
		ws->ws_feed -= (size_t)n;
	i = wsconn_scan(&ws->ws_in, buf, (size_t)n, 0x03);
	if (i < (size_t)n) {
		buf[i] ^= 0x03 ^ 0x0f;
		ws->ws_in_mapped = 1;
	}
	return (n);
}

/*
 * Move frame bytes from wslay into the bufferevent's output.  wslay sends
 * only control frames, always whole (we take all it gives), and our data
 * frames go between its sends, so ws_out sees a stream of whole frames
 * although it does not see ours.
 */
static ssize_t
wsconn_send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len,
    int flags, void *arg)
{
	struct wsconn *ws = arg;
	struct evbuffer *out;
	size_t i;
	uint8_t b;

	(void)flags;
	if (ws->ws_bev == NULL) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return (-1);
	}
	out = ws->ws_stage;
	i = wsconn_scan(&ws->ws_out, data, len, 0x0f);
	if (!ws->ws_in_mapped || i == len) {
		if (evbuffer_add(out, data, len) != 0)
			goto fail;
		return ((ssize_t)len);
	}
	/* wslay's echo of a close code wsconn_recv_cb lifted: put it back. */
	b = data[i] ^ 0x0f ^ 0x03;
	if (evbuffer_add(out, data, i) != 0 || evbuffer_add(out, &b, 1) != 0 ||
	    evbuffer_add(out, data + i + 1, len - i - 1) != 0)
		goto fail;
	return ((ssize_t)len);
fail:
	wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
	return (-1);
}

/* Give wslay a masking key for a client frame. */
static int
wsconn_genmask_cb(
    wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *arg)
{
	(void)arg;
	if ((len == 4 ? ws_mask_key(buf) : ws_random(buf, len)) != 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return (-1);
	}
	return (0);
}

/* Enter the closing state and start the deadline for the handshake. */
static void
wsconn_enter_closing(struct wsconn *ws)
{
	struct timeval tv = { WSCONN_CLOSE_TIMEOUT, 0 };

	if (ws->ws_state != WSCONN_S_OPEN)
		return;
	ws->ws_state = WSCONN_S_CLOSING;
	evtimer_add(ws->ws_ev_timer, &tv);
}

/*
 * Give the owner the whole message (opcode op) in ws_rmsg, then send its
 * answers.  ws_rmsg is empty afterwards.
 */
static void
wsconn_deliver_rmsg(struct wsconn *ws, uint8_t op)
{
	/* After our close frame, messages have nowhere to go. */
	if (ws->ws_state == WSCONN_S_OPEN && !(ws->ws_flags & WSCONN_F_DEAD))
		ws->ws_cbs.on_message_buf(
		    ws->ws_arg, op == WSLAY_BINARY_FRAME, ws->ws_rmsg);
	evbuffer_drain(ws->ws_rmsg, evbuffer_get_length(ws->ws_rmsg));
	if (!(ws->ws_flags & WSCONN_F_DEAD))
		wsconn_flush(ws);
}

/* Give the owner one whole message (opcode op), then send its answers. */
static void
wsconn_deliver(struct wsconn *ws, uint8_t op, const uint8_t *data, size_t len)
{
	/* After our close frame, messages have nowhere to go. */
	if (ws->ws_state != WSCONN_S_OPEN)
		return;
	if (ws->ws_cbs.on_message_buf != NULL) {
		if (len != 0 && evbuffer_add(ws->ws_rmsg, data, len) != 0) {
			log_error("wsconn: cannot queue a message");
			abort();
		}
		wsconn_deliver_rmsg(ws, op);
		return;
	}
	if (ws->ws_cbs.on_message == NULL)
		return;
	if (data == NULL)
		data = (const uint8_t *)"";
	ws->ws_cbs.on_message(ws->ws_arg, op == WSLAY_BINARY_FRAME, data, len);
	if (!(ws->ws_flags & WSCONN_F_DEAD))
		wsconn_flush(ws);
}

/*
 * Does the payload of the current frame move to ws_rmsg from the input,
 * unmasked where it lies?
 */
static int
wsconn_moves(const struct wsconn *ws)
{
	return (ws->ws_cbs.on_message_buf != NULL);
}

/*
 * Unmask the first len bytes of the input where they lie, from key byte
 * ws_rkoff on: the bytes were just read, so they are in the cache, and
 * unmasked they move on without a copy (evb_take).
 */
static void
wsconn_unmask_in(struct wsconn *ws, struct evbuffer *in, size_t len)
{
	struct evbuffer_iovec v[8];
	struct evbuffer_ptr ptr;
	size_t m, before;
	int i, n;

	if (evbuffer_ptr_set(in, &ptr, 0, EVBUFFER_PTR_SET) != 0)
		return;
	for (before = 0; len > 0 && len != before;) {
		before = len;
		if ((n = evbuffer_peek(in, (ev_ssize_t)len, &ptr, v, 8)) <= 0)
			return;
		for (i = 0; i < n && i < 8 && len > 0; i++) {
			m = v[i].iov_len < len ? v[i].iov_len : len;
			ws->ws_rkoff = (uint8_t)ws_mask(v[i].iov_base,
			    v[i].iov_base, m, ws->ws_rkey, ws->ws_rkoff);
			len -= m;
			if (evbuffer_ptr_set(in, &ptr, m, EVBUFFER_PTR_ADD) !=
				0 &&
			    len > 0)
				return;
		}
	}
}

/* One whole message or control frame from wslay. */
static void
wsconn_msg_cb(wslay_event_context_ptr ctx,
    const struct wslay_event_on_msg_recv_arg *m, void *arg)
{
	struct wsconn *ws = arg;
	uint16_t code;

	(void)ctx;
	if (ws->ws_flags & WSCONN_F_DEAD)
		return;
	switch (m->opcode) {
	case WSLAY_TEXT_FRAME:
	case WSLAY_BINARY_FRAME:
		/* Not reached: wslay gets no data frame it would take. */
		wsconn_deliver(ws, m->opcode, m->msg, m->msg_length);
		break;
	case WSLAY_CONNECTION_CLOSE:
		code = m->status_code;
		if (code == 0)
			wsconn_set_code(ws, WS_CLOSE_NO_STATUS, "", 0);
		else if (ws->ws_in_mapped &&
		    !wsconn_code_sendable(code -= 3072))
			wsconn_set_code(ws, WS_CLOSE_PROTOCOL_ERROR,
			    "invalid close code", 18);
		else
			wsconn_set_code(ws, code, (const char *)m->msg + 2,
			    m->msg_length - 2);
		wsconn_enter_closing(ws);
		break;
	default:
		/* Pings are answered by wslay; pongs we never asked for. */
		break;
	}
}

/* Record the code and reason on_close will report, unless already set. */
static void
wsconn_set_code(
    struct wsconn *ws, uint16_t code, const char *reason, size_t len)
{
	if (ws->ws_flags & WSCONN_F_HAVE_CODE)
		return;
	if (len > WS_CLOSE_REASON_MAX)
		len = WS_CLOSE_REASON_MAX;
	ws->ws_code = code;
	memcpy(ws->ws_reason, reason, len);
	ws->ws_reason[len] = '\0';
	ws->ws_flags |= WSCONN_F_HAVE_CODE;
}

/* Fail the connection at once with code and reason. */
static void
wsconn_fail(struct wsconn *ws, uint16_t code, const char *reason)
{
	if (ws->ws_state == WSCONN_S_CLOSED)
		return;
	wsconn_set_code(ws, code, reason, strlen(reason));
	ws->ws_flags |= WSCONN_F_FAILED;
	ws->ws_state = WSCONN_S_CLOSING;
	wsconn_kick(ws, WSCONN_W_FINISH);
}

/* Let wslay write what it has queued into the bufferevent's output. */
static void
wsconn_flush(struct wsconn *ws)
{
	int rv;

	/*
	 * A nested call leaves the work to the outer one.  Inside
	 * wslay_event_recv we do send, so what the owner answered to a
	 * message goes out before a close frame that follows it.
	 */
	if ((ws->ws_flags & WSCONN_F_IN_SEND) || ws->ws_bev == NULL ||
	    !wslay_event_want_write(ws->ws_ctx))
		return;
	ws->ws_flags |= WSCONN_F_IN_SEND;
	rv = wslay_event_send(ws->ws_ctx);
	ws->ws_flags &= ~WSCONN_F_IN_SEND;
	if (evbuffer_get_length(ws->ws_stage) != 0 &&
	    evbuffer_add_buffer(
		bufferevent_get_output(ws->ws_bev), ws->ws_stage) != 0)
		rv = -1;
	if (rv != 0)
		wsconn_fail(ws, WS_CLOSE_ABNORMAL, "cannot queue frames");
}

/* Pause or resume reading as the queue crosses the watermarks. */
static void
wsconn_flow(struct wsconn *ws)
{
	char buf[128];
	size_t q;

	if (ws->ws_bev == NULL)
		return;
	q = wsconn_queued(ws);
	if (q > WSCONN_LOWAT)
		ws->ws_flags |= WSCONN_F_ABOVE_LOW;
	if (!(ws->ws_flags & WSCONN_F_PAUSED) &&
	    ws->ws_state == WSCONN_S_OPEN && q > WSCONN_HIWAT) {
		ws->ws_flags |= WSCONN_F_PAUSED;
		bufferevent_disable(ws->ws_bev, EV_READ);
		log_debug("wsconn %p: %s: %zu bytes queued, reading paused",
		    (void *)ws, wsconn_show(ws, buf, sizeof buf), q);
	} else if ((ws->ws_flags & WSCONN_F_PAUSED) &&
	    (q <= WSCONN_LOWAT || ws->ws_state != WSCONN_S_OPEN)) {
		ws->ws_flags &= ~WSCONN_F_PAUSED;
		bufferevent_enable(ws->ws_bev, EV_READ);
		wsconn_kick(ws, WSCONN_W_READ);
		log_debug("wsconn %p: %s: %zu bytes queued, reading resumed",
		    (void *)ws, wsconn_show(ws, buf, sizeof buf), q);
	}
}

/* Once closing and everything is written, finish the connection. */
static void
wsconn_check_done(struct wsconn *ws)
{
	if (ws->ws_state != WSCONN_S_CLOSING || ws->ws_bev == NULL)
		return;
	if (!wslay_event_get_close_received(ws->ws_ctx) &&
	    !(ws->ws_flags & WSCONN_F_FAILED))
		return;
	if (wslay_event_want_write(ws->ws_ctx) ||
	    evbuffer_get_length(bufferevent_get_output(ws->ws_bev)) != 0)
		return;
	wsconn_kick(ws, WSCONN_W_FINISH);
}

/*
 * Refuse the peer's frames as wslay does: read no more and queue a close
 * frame with code (unless one is queued already).  wsconn_read then fails
 * the connection as for an error wslay found.
 */
static void
wsconn_refuse(struct wsconn *ws, uint16_t code)
{
	wslay_event_shutdown_read(ws->ws_ctx);
	(void)wslay_event_queue_close(ws->ws_ctx, code, NULL, 0);
	if (ws->ws_rmsg != NULL)
		evbuffer_drain(ws->ws_rmsg, evbuffer_get_length(ws->ws_rmsg));
}

/* The current data frame is complete: deliver the message it ended. */
static void
wsconn_frame_end(struct wsconn *ws)
{
	size_t len;
	uint8_t op;

	if (!ws->ws_rfin)
		return;
	if (ws->ws_rop == WSLAY_TEXT_FRAME && ws->ws_rutf8 != 0) {
		/* A character cut off by the end of the message. */
		wsconn_refuse(ws, WS_CLOSE_INVALID_DATA);
		return;
	}
	op = ws->ws_rop;
	len = ws->ws_rlen;
	ws->ws_rop = 0;
	ws->ws_rlen = 0;
	if (ws->ws_cbs.on_message_buf == NULL) {
		wsconn_deliver(ws, op, ws->ws_rbuf, len);
		return;
	}
	/* The message's frames are in ws_rmsg already. */
	wsconn_deliver_rmsg(ws, op);
}

/*
 * Take the header of the frame at the front of the input: a data frame we
 * parse ourselves, or another frame for wslay.  Returns 1 on progress, 0
 * if more input is needed, -1 if memory ran out.
 */
static int
wsconn_take_header(struct wsconn *ws, struct evbuffer *in)
{
	uint8_t h[14], op, *p;
	size_t avail, hl, need, cap;
	uint64_t len;
	unsigned int i;
	int masked, unordered, moves;

	if ((avail = evbuffer_get_length(in)) < 2)
		return (0);
	evbuffer_copyout(in, h, avail < sizeof h ? avail : sizeof h);
	op = h[0] & 0x0f;
	masked = (h[1] & 0x80) != 0;
	hl = wsconn_hdr_len(h[1]);
	len = h[1] & 0x7f;
	if (op & 0x08) {
		/* Control frames are wslay's, one at a time. */
		ws->ws_feed = len <= 125 ? hl + (size_t)len : SIZE_MAX;
		return (1);
	}
	/*
	 * RSV bits, a reserved opcode or the wrong mask bit for our role:
	 * wslay refuses the frame with the close code it always gave, and
	 * reads nothing after it.
	 */
	if ((h[0] & 0x70) != 0 || op > WSLAY_BINARY_FRAME ||
	    masked == ws->ws_client) {
		ws->ws_feed = SIZE_MAX;
		return (1);
	}
	if (len >= 126) {
		need = len == 126 ? 2 : 8;
		if (avail < 2 + need)
			return (0);
		for (len = 0, i = 0; i < need; i++)
			len = (len << 8) | h[2 + i];
		/*
		 * A length in more bytes than needed, or past 2^63: wslay
		 * fails the connection as soon as it has read it.
		 */
		if (len < (need == 2 ? 126 : 65536) || (len >> 63) != 0) {
			ws->ws_feed = SIZE_MAX;
			return (1);
		}
	}
	if (avail < hl)
		return (0);
	/*
	 * A continuation needs a message to go on, a start none, and the
	 * message must fit.  wslay judged a frame once it had a payload
	 * byte: so do we, for the same close codes at the same time.
	 */
	unordered = (op == 0) != (ws->ws_rop != 0);
	if (unordered || len > ws->ws_max - ws->ws_rlen) {
		if (avail < hl + (len != 0))
			return (0);
		wsconn_refuse(
		    ws, unordered ? WS_CLOSE_PROTOCOL_ERROR : WS_CLOSE_TOO_BIG);
		return (1);
	}
	evbuffer_drain(in, hl);
	avail -= hl;
	if (op != 0) {
		ws->ws_rop = op;
		ws->ws_rlen = 0;
		ws->ws_rutf8 = 0;
	}
	ws->ws_rfin = (h[0] & 0x80) != 0;
	ws->ws_rmasked = masked;
	ws->ws_rkoff = 0;
	if (masked)
		memcpy(ws->ws_rkey, h + hl - 4, 4);
	ws->ws_rleft = len;

	/*
	 * A whole message already in the input goes to the owner from
	 * where it lies: unmasked there first, if it is masked and the
	 * owner takes it as an evbuffer.
	 */
	moves = ws->ws_cbs.on_message_buf != NULL &&
	    ws->ws_state == WSCONN_S_OPEN;
	if ((!masked || moves) && ws->ws_rfin && op != 0 && len != 0 &&
	    avail >= len) {
		if (masked)
			wsconn_unmask_in(ws, in, (size_t)len);
		p = NULL;
		if ((op == WSLAY_TEXT_FRAME || !moves) &&
		    (p = evbuffer_pullup(in, (ev_ssize_t)len)) == NULL)
			return (-1);
		ws->ws_rleft = 0;
		ws->ws_rop = 0;
		if (op == WSLAY_TEXT_FRAME &&
		    (ws_utf8_check(&ws->ws_rutf8, p, (size_t)len) != 0 ||
			ws->ws_rutf8 != 0)) {
			wsconn_refuse(ws, WS_CLOSE_INVALID_DATA);
			return (1);
		}
		if (moves) {
			/* Whole chains move; a chain's part is shared. */
			if (evb_take(in, ws->ws_rmsg, (size_t)len) != (int)len)
				return (-1);
			wsconn_deliver_rmsg(ws, op);
			return (1);
		}
		wsconn_deliver(ws, op, p, (size_t)len);
		if (!(ws->ws_flags & WSCONN_F_DEAD))
			evbuffer_drain(in, (size_t)len);
		return (1);
	}

	/*
	 * Room for the frame now, as wslay made it: ws_max bounds it.  It
	 * at least doubles, so many small fragments cost no more than one
	 * copy.
	 */
	if (!wsconn_moves(ws) &&
	    (need = ws->ws_rlen + (size_t)len) > ws->ws_rcap) {
		cap = ws->ws_rcap > ws->ws_max / 2 ? ws->ws_max
						   : ws->ws_rcap * 2;
		if (cap < need)
			cap = need;
		ws->ws_rbuf = xrealloc(ws->ws_rbuf, cap);
		ws->ws_rcap = cap;
	}
	if (len == 0)
		wsconn_frame_end(ws);
	return (1);
}

/*
 * Take what the input has of the current data frame's payload, unmasked
 * into ws_rbuf in one pass.  Returns 1 on progress, 0 if there was none.
 */
static int
wsconn_take_payload(struct wsconn *ws, struct evbuffer *in)
{
	struct evbuffer_iovec v[8];
	uint8_t *dst;
	size_t want, done, m;
	int i, n;

	if ((want = evbuffer_get_length(in)) == 0)
		return (0);
	if (want > ws->ws_rleft)
		want = (size_t)ws->ws_rleft;
	if (wsconn_moves(ws)) {
		/* Chains move; a text frame is checked where it lies. */
		if (ws->ws_rmasked)
			wsconn_unmask_in(ws, in, want);
		if (ws->ws_rop == WSLAY_TEXT_FRAME) {
			if ((dst = evbuffer_pullup(in, (ev_ssize_t)want)) ==
			    NULL)
				return (-1);
			if (ws_utf8_check(&ws->ws_rutf8, dst, want) != 0) {
				wsconn_refuse(ws, WS_CLOSE_INVALID_DATA);
				return (1);
			}
		}
		if (evb_take(in, ws->ws_rmsg, want) != (int)want)
			return (-1);
		done = want;
		goto taken;
	}
	dst = ws->ws_rbuf + ws->ws_rlen;
	n = evbuffer_peek(in, (ev_ssize_t)want, NULL, v, 8);
	for (i = 0, done = 0; i < n && i < 8 && done < want; i++) {
		m = v[i].iov_len < want - done ? v[i].iov_len : want - done;
		if (ws->ws_rmasked)
			ws->ws_rkoff = (uint8_t)ws_mask(dst + done,
			    v[i].iov_base, m, ws->ws_rkey, ws->ws_rkoff);
		else
			memcpy(dst + done, v[i].iov_base, m);
		done += m;
	}
	if (done == 0)
		return (0);
	evbuffer_drain(in, done);
	if (ws->ws_rop == WSLAY_TEXT_FRAME &&
	    ws_utf8_check(&ws->ws_rutf8, dst, done) != 0) {
		wsconn_refuse(ws, WS_CLOSE_INVALID_DATA);
		return (1);
	}
taken:
	ws->ws_rlen += done;
	ws->ws_rleft -= done;
	if (ws->ws_rleft == 0)
		wsconn_frame_end(ws);
	return (1);
}

/*
 * Parse the input: data frames here, control frames by wslay.  Stops when
 * the input runs out, the owner's answers pile up past WSCONN_HIWAT (a
 * peer that sends but does not read must not make us buffer without
 * bound), or reading ends.  Returns 0, or -1 if wslay failed or memory ran
 * out.
 */
static int
wsconn_parse(struct wsconn *ws, struct evbuffer *in)
{
	size_t before;
	int rv;

	for (;;) {
		if ((ws->ws_flags & WSCONN_F_DEAD) ||
		    !wslay_event_want_read(ws->ws_ctx) ||
		    (ws->ws_state == WSCONN_S_OPEN &&
			wsconn_queued(ws) > WSCONN_HIWAT))
			return (0);
		if (ws->ws_feed != 0) {
			before = evbuffer_get_length(in);
			if (wslay_event_recv(ws->ws_ctx) != 0)
				return (-1);
			if (evbuffer_get_length(in) == before)
				return (0);
			continue;
		}
		if (ws->ws_rleft != 0)
			rv = wsconn_take_payload(ws, in);
		else
			rv = wsconn_take_header(ws, in);
		if (rv <= 0)
			return (rv);
	}
}

/* Parse the frames in the input and act on what wslay and we found. */
static void
wsconn_read(struct wsconn *ws)
{
	struct evbuffer *in;
	uint16_t code;
	int rv, failed;

	if (ws->ws_bev == NULL || ws->ws_state == WSCONN_S_CLOSED ||
	    (ws->ws_flags & (WSCONN_F_DEAD | WSCONN_F_PAUSED)))
		return;
	in = bufferevent_get_input(ws->ws_bev);
	if (!wslay_event_want_read(ws->ws_ctx)) {
		/* After a close frame or an error, input is discarded. */
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}

	ws->ws_flags |= WSCONN_F_IN_RECV;
	rv = wsconn_parse(ws, in);
	ws->ws_flags &= ~WSCONN_F_IN_RECV;
	if (ws->ws_flags & WSCONN_F_DEAD)
		return;
	/* Between messages, an idle connection holds no buffer. */
	if (ws->ws_rop == 0 && ws->ws_rbuf != NULL) {
		free(ws->ws_rbuf);
		ws->ws_rbuf = NULL;
		ws->ws_rcap = 0;
	}
	if (rv != 0) {
		wsconn_fail(ws, WS_CLOSE_ABNORMAL, "cannot parse frames");
		return;
	}
	/*
	 * wslay stops reading and queues a close frame on a bad frame, and
	 * so does wsconn_refuse.
	 */
	failed = !wslay_event_get_read_enabled(ws->ws_ctx) &&
	    !wslay_event_get_close_received(ws->ws_ctx) &&
	    !(ws->ws_flags & WSCONN_F_FAILED);
	wsconn_flush(ws);
	if (failed && ws->ws_state != WSCONN_S_CLOSED) {
		code = WS_CLOSE_PROTOCOL_ERROR;
		if (ws->ws_state == WSCONN_S_OPEN &&
		    wslay_event_get_close_sent(ws->ws_ctx))
			code = wslay_event_get_status_code_sent(ws->ws_ctx);
		wsconn_set_code(ws, code, wsconn_code_reason(code),
		    strlen(wsconn_code_reason(code)));
		ws->ws_flags |= WSCONN_F_FAILED;
		wsconn_enter_closing(ws);
		evbuffer_drain(in, evbuffer_get_length(in));
	}
	wsconn_flow(ws);
	wsconn_check_done(ws);
}

/* The output drained to the low watermark: resume, tell the owner. */
static void
wsconn_written(struct wsconn *ws)
{
	if (ws->ws_bev == NULL)
		return;
	wsconn_flow(ws);
	if ((ws->ws_flags & WSCONN_F_ABOVE_LOW) &&
	    wsconn_queued(ws) <= WSCONN_LOWAT) {
		ws->ws_flags &= ~WSCONN_F_ABOVE_LOW;
		if (ws->ws_state == WSCONN_S_OPEN &&
		    ws->ws_cbs.on_writable != NULL) {
			ws->ws_cbs.on_writable(ws->ws_arg);
			if (ws->ws_flags & WSCONN_F_DEAD)
				return;
		}
	}
	wsconn_check_done(ws);
}

/* Close the transport and tell the owner how the connection ended. */
static void
wsconn_finish(struct wsconn *ws)
{
	char buf[128];

	if (ws->ws_state == WSCONN_S_CLOSED)
		return;
	if (!(ws->ws_flags & WSCONN_F_HAVE_CODE)) {
		const char *r = "the connection ended without a close frame";

		wsconn_set_code(ws, WS_CLOSE_ABNORMAL, r, strlen(r));
	}
	evtimer_del(ws->ws_ev_timer);
	if (ws->ws_bev != NULL) {
		bufferevent_free(ws->ws_bev);
		ws->ws_bev = NULL;
	}
	ws->ws_state = WSCONN_S_CLOSED;
	ws->ws_flags &= ~WSCONN_F_PAUSED;
	log_debug("wsconn %p: %s: code %u (%s)", (void *)ws,
	    wsconn_show(ws, buf, sizeof buf), ws->ws_code, ws->ws_reason);
	if (ws->ws_cbs.on_close != NULL)
		ws->ws_cbs.on_close(ws->ws_arg, ws->ws_code, ws->ws_reason);
}

/* The transport ended: parse what is left, then finish. */
static void
wsconn_eof(struct wsconn *ws)
{
	const char *r;

	wsconn_read(ws);
	if (ws->ws_flags & WSCONN_F_DEAD || ws->ws_state == WSCONN_S_CLOSED)
		return;
	if (ws->ws_bev_what & BEV_EVENT_EOF)
		r = "the peer closed the connection";
	else if (ws->ws_bev_what & BEV_EVENT_TIMEOUT)
		r = "the transport timed out";
	else
		r = "transport error";
	wsconn_set_code(ws, WS_CLOSE_ABNORMAL, r, strlen(r));
	wsconn_finish(ws);
}

/* Do the work the bufferevent callbacks and timers asked for. */
static void
wsconn_work_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wsconn *ws = arg;
	int work;

	(void)fd;
	(void)what;
	if (ws->ws_flags & WSCONN_F_DEAD)
		return;
	ws->ws_depth++;
	work = ws->ws_work;
	ws->ws_work = 0;
	if (work & WSCONN_W_READ)
		wsconn_read(ws);
	if ((work & WSCONN_W_WRITE) && !(ws->ws_flags & WSCONN_F_DEAD))
		wsconn_written(ws);
	if ((work & WSCONN_W_EOF) && !(ws->ws_flags & WSCONN_F_DEAD))
		wsconn_eof(ws);
	if ((work & WSCONN_W_FINISH) && !(ws->ws_flags & WSCONN_F_DEAD))
		wsconn_finish(ws);
	ws->ws_depth--;
	/* Work added meanwhile runs on the next pass, not in this one. */
	if (ws->ws_work != 0 && !(ws->ws_flags & WSCONN_F_DEAD) &&
	    ws->ws_state != WSCONN_S_CLOSED)
		event_active(ws->ws_ev_work, EV_TIMEOUT, 0);
}

/* Ask the work event to do work from the loop. */
static void
wsconn_kick(struct wsconn *ws, int work)
{
	if (ws->ws_flags & WSCONN_F_DEAD || ws->ws_state == WSCONN_S_CLOSED)
		return;
	ws->ws_work |= work;
	if (ws->ws_depth == 0)
		event_active(ws->ws_ev_work, EV_TIMEOUT, 0);
}

/* Bytes arrived on the transport. */
static void
wsconn_readcb(struct bufferevent *bev, void *arg)
{
	evio_read_more(bev);
	wsconn_kick(arg, WSCONN_W_READ);
}

/* The transport's output drained to its low watermark. */
static void
wsconn_writecb(struct bufferevent *bev, void *arg)
{
	(void)bev;
	wsconn_kick(arg, WSCONN_W_WRITE);
}

/* The transport hit EOF, an error or a timeout. */
static void
wsconn_eventcb(struct bufferevent *bev, short what, void *arg)
{
	struct wsconn *ws = arg;

	(void)bev;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)))
		return;
	if (ws->ws_bev_what == 0)
		ws->ws_bev_what = what;
	bufferevent_disable(ws->ws_bev, EV_READ | EV_WRITE);
	wsconn_kick(ws, WSCONN_W_EOF);
}

/* The closing handshake took too long: drop the transport. */
static void
wsconn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wsconn *ws = arg;
	const char *r = "the closing handshake timed out";

	(void)fd;
	(void)what;
	wsconn_set_code(ws, WS_CLOSE_ABNORMAL, r, strlen(r));
	wsconn_kick(ws, WSCONN_W_FINISH);
}

/* Start a WebSocket connection over a bufferevent after the handshake. */
struct wsconn *
wsconn_new(struct event_base *base, struct bufferevent *bev, int is_client,
    const struct wsconn_cbs *cbs, void *arg, size_t max_message)
{
	struct wslay_event_callbacks wcb = {
		.recv_callback = wsconn_recv_cb,
		.send_callback = wsconn_send_cb,
		.genmask_callback = is_client ? wsconn_genmask_cb : NULL,
		.on_msg_recv_callback = wsconn_msg_cb,
	};
	struct wsconn *ws;
	int rv;

	ws = xcalloc(1, sizeof *ws);
	ws->ws_base = base;
	ws->ws_client = is_client != 0;
	if (cbs != NULL)
		ws->ws_cbs = *cbs;
	ws->ws_arg = arg;
	if (is_client)
		rv = wslay_event_context_client_init(&ws->ws_ctx, &wcb, ws);
	else
		rv = wslay_event_context_server_init(&ws->ws_ctx, &wcb, ws);
	if (rv != 0)
		goto fail;
	wslay_event_config_set_no_buffering(ws->ws_ctx, 0);
	wslay_event_config_set_allowed_rsv_bits(ws->ws_ctx, WSLAY_RSV_NONE);
	if ((ws->ws_max = max_message) == 0)
		ws->ws_max = WSCONN_MAX_MESSAGE_DEFAULT;
	wslay_event_config_set_max_recv_msg_length(ws->ws_ctx, ws->ws_max);

	ws->ws_ev_work = event_new(base, -1, 0, wsconn_work_cb, ws);
	ws->ws_ev_timer = evtimer_new(base, wsconn_timer_cb, ws);
	ws->ws_stage = evbuffer_new();
	if (ws->ws_cbs.on_message_buf != NULL &&
	    (ws->ws_rmsg = evbuffer_new()) == NULL)
		goto fail;
	if (ws->ws_ev_work == NULL || ws->ws_ev_timer == NULL ||
	    ws->ws_stage == NULL)
		goto fail;

	ws->ws_bev = bev;
	if (bufferevent_openssl_get_ssl(bev) != NULL)
		ws->ws_flags |= WSCONN_F_TLS;
	bufferevent_setcb(
	    bev, wsconn_readcb, wsconn_writecb, wsconn_eventcb, ws);
	/* Input stays small: wslay takes it as it comes, or we pause. */
	bufferevent_setwatermark(bev, EV_READ, 0, WSCONN_READ_HIWAT);
	bufferevent_setwatermark(bev, EV_WRITE, WSCONN_LOWAT, 0);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	if (evbuffer_get_length(bufferevent_get_input(bev)) != 0)
		wsconn_kick(ws, WSCONN_W_READ);
	return (ws);

fail:
	if (ws->ws_rmsg != NULL)
		evbuffer_free(ws->ws_rmsg);
	if (ws->ws_stage != NULL)
		evbuffer_free(ws->ws_stage);
	if (ws->ws_ev_timer != NULL)
		event_free(ws->ws_ev_timer);
	if (ws->ws_ev_work != NULL)
		event_free(ws->ws_ev_work);
	if (ws->ws_ctx != NULL)
		wslay_event_context_free(ws->ws_ctx);
	free(ws);
	return (NULL);
}

/* Where wsconn_put writes next: extent c_i of the space reserved, c_off in. */
struct ws_cursor {
	struct evbuffer_iovec *c_v;
	int c_i;
	size_t c_off;
};

/*
 * Copy len bytes of src to the cursor, which has room for them; masked
 * with key from key byte *koff on, unless key is NULL.
 */
static void
ws_cursor_put(struct ws_cursor *c, const uint8_t *src, size_t len,
    const uint8_t *key, unsigned int *koff)
{
	uint8_t *dst;
	size_t m;

	while (len > 0) {
		if ((m = c->c_v[c->c_i].iov_len - c->c_off) == 0) {
			c->c_i++;
			c->c_off = 0;
			continue;
		}
		if (m > len)
			m = len;
		dst = (uint8_t *)c->c_v[c->c_i].iov_base + c->c_off;
		if (key != NULL)
			*koff = ws_mask(dst, src, m, key, *koff);
		else
			memcpy(dst, src, m);
		c->c_off += m;
		src += m;
		len -= m;
	}
}

/*
 * Make room for a small frame of need bytes at the end of a TLS output,
 * in a chain of WSCONN_TLS_GATHER bytes when the last has too little.
 * libevent's TLS bufferevent encrypts each chain of its output as its
 * own record and writes each record with its own write(2): frames in
 * chains of their own (libevent sizes a new chain to what it must hold)
 * made every small message on a busy tunnel link a record, a write and
 * two reads at the peer.
 */
static void
wsconn_gather(struct evbuffer *out, size_t need)
{
	struct evbuffer_iovec v;

	if (evbuffer_get_length(out) != 0 &&
	    evbuffer_reserve_space(out, 1, &v, 1) == 1 && v.iov_len >= need)
		return;
	(void)evbuffer_expand(out, WSCONN_TLS_GATHER);
}

/*
 * Append a frame whose header is the hl bytes at h, and whose payload is
 * the plen bytes at pre and then len bytes at position pos of src, shared
 * with src rather than copied (evb_share): an unmasked frame on a plain
 * socket, the gateway's side of a tunnel upload.  (A TLS bufferevent
 * encrypts each chain as a record of its own, so there the payload is
 * copied into records it fills.)  Returns 0, or -1 with nothing added.
 */
static int
wsconn_put_shared(struct wsconn *ws, const uint8_t *h, size_t hl,
    const uint8_t *pre, size_t plen, struct evbuffer *src, size_t pos,
    size_t len)
{
	struct evbuffer *out = bufferevent_get_output(ws->ws_bev);
	struct evbuffer *tmp;
	int rv = -1;

	if ((tmp = evbuffer_new()) == NULL)
		return (-1);
	if (evbuffer_add(tmp, h, hl) == 0 &&
	    (plen == 0 || evbuffer_add(tmp, pre, plen) == 0) &&
	    evb_share(src, pos, len, tmp) == 0)
		rv = evbuffer_add_buffer(out, tmp);
	evbuffer_free(tmp);
	return (rv);
}

/*
 * Append one whole data frame (FIN, opcode op) to the bufferevent's
 * output, its payload the plen bytes at pre and then the len bytes at
 * data, or (with src) at position pos of src: a client's masked with a
 * fresh key as it is copied, so the payload is touched once.  Returns 0,
 * or -1 if there is no random key, no memory, or src is too short.
 */
static int
wsconn_put(struct wsconn *ws, uint8_t op, const uint8_t *pre, size_t plen,
    const uint8_t *data, struct evbuffer *src, size_t pos, size_t len)
{
	struct evbuffer *out = bufferevent_get_output(ws->ws_bev);
	struct evbuffer_iovec v[2];
	struct evbuffer_iovec sv[16];
	struct evbuffer_ptr sp;
	struct ws_cursor c = { v, 0, 0 };
	uint8_t h[14], *key = NULL;
	unsigned int koff = 0, i;
	size_t hl, left, m;
	int n, j, sn;

	if (src != NULL && (pos > evbuffer_get_length(src) ||
			       len > evbuffer_get_length(src) - pos))
		return (-1);
	if (len > SIZE_MAX - plen)
		return (-1);
	len += plen;
	h[0] = 0x80 | op;
	if (len < 126) {
		h[1] = (uint8_t)len;
		hl = 2;
	} else if (len <= 0xffff) {
		h[1] = 126;
		h[2] = (uint8_t)(len >> 8);
		h[3] = (uint8_t)len;
		hl = 4;
	} else {
		h[1] = 127;
		for (i = 0; i < 8; i++)
			h[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
		hl = 10;
	}
	if (ws->ws_client) {
		key = h + hl;
		if (ws_mask_key(key) != 0)
			return (-1);
		h[1] |= 0x80;
		hl += 4;
	}
	/* Shared if it can be (evb_share), else copied below. */
	if (src != NULL && key == NULL && !(ws->ws_flags & WSCONN_F_TLS) &&
	    len - plen >= WSCONN_SHARE_MIN &&
	    wsconn_put_shared(ws, h, hl, pre, plen, src, pos, len - plen) == 0)
		return (0);
	if ((ws->ws_flags & WSCONN_F_TLS) && hl + len < WSCONN_TLS_GATHER)
		wsconn_gather(out, hl + len);
	/* Two extents: the room left in the last chain is used, not copied. */
	n = evbuffer_reserve_space(out, (ev_ssize_t)(hl + len), v, 2);
	if (n <= 0)
		return (-1);
	ws_cursor_put(&c, h, hl, NULL, NULL);
	ws_cursor_put(&c, pre, plen, key, &koff);
	len -= plen;
	if (src == NULL)
		ws_cursor_put(&c, data, len, key, &koff);
	else if (len != 0) {
		/* Straight from src's chains, sixteen at a time. */
		if (evbuffer_ptr_set(src, &sp, pos, EVBUFFER_PTR_SET) != 0)
			goto fail;
		for (left = len; left > 0;) {
			sn = evbuffer_peek(src, (ev_ssize_t)left, &sp, sv, 16);
			if (sn <= 0)
				goto fail;
			for (j = 0; j < sn && j < 16 && left > 0; j++) {
				m = sv[j].iov_len < left ? sv[j].iov_len : left;
				ws_cursor_put(&c, sv[j].iov_base, m, key, &koff);
				left -= m;
				if (evbuffer_ptr_set(src, &sp, m,
					EVBUFFER_PTR_ADD) != 0 && left > 0)
					goto fail;
			}
		}
	}
	v[c.c_i].iov_len = c.c_off;
	return (evbuffer_commit_space(out, v, c.c_i + 1));

fail:
	/* Nothing is committed: the reserved space is simply reused. */
	return (-1);
}

/*
 * Send one message to the peer, copying it into the output: plen bytes
 * at pre, then len bytes at data or at position pos of src.
 */
static int
wsconn_send_parts(struct wsconn *ws, int is_binary, const uint8_t *pre,
    size_t plen, const uint8_t *data, struct evbuffer *src, size_t pos,
    size_t len)
{
	if (ws->ws_state != WSCONN_S_OPEN || (ws->ws_flags & WSCONN_F_DEAD))
		return (-1);
	if ((len != 0 && data == NULL && src == NULL) ||
	    (plen != 0 && pre == NULL))
		return (-1);
	if (plen > WSCONN_QUEUE_LIMIT || len > WSCONN_QUEUE_LIMIT - plen)
		return (-1);
	len += plen;
	if (len > WSCONN_QUEUE_LIMIT ||
	    wsconn_queued(ws) > WSCONN_QUEUE_LIMIT - len)
		return (-1);
	/*
	 * A pong wslay holds goes first.  wslay writes whole frames only,
	 * so after this our frame starts at a frame boundary.
	 */
	wsconn_flush(ws);
	if (ws->ws_state != WSCONN_S_OPEN || ws->ws_bev == NULL ||
	    !wslay_event_get_write_enabled(ws->ws_ctx))
		return (-1);
	if (wsconn_put(ws, is_binary ? WSLAY_BINARY_FRAME : WSLAY_TEXT_FRAME,
		pre, plen, data, src, pos, len - plen) != 0)
		return (-1);
	wsconn_flow(ws);
	return (0);
}

/* Send one message to the peer, copying it into the output. */
int
wsconn_send(struct wsconn *ws, int is_binary, const uint8_t *data, size_t len)
{
	return (wsconn_send_parts(ws, is_binary, NULL, 0, data, NULL, 0, len));
}

/* Send hdr and a range of src as one message, copied from src's chains. */
int
wsconn_send_ev(struct wsconn *ws, int is_binary, const uint8_t *hdr,
    size_t hlen, struct evbuffer *src, size_t pos, size_t len)
{
	if (src == NULL)
		return (-1);
	return (wsconn_send_parts(ws, is_binary, hdr, hlen, NULL, src, pos, len));
}

/* Start the closing handshake with code and reason. */
int
wsconn_close(struct wsconn *ws, uint16_t code, const char *reason)
{
	size_t len = 0;

	if (ws->ws_state != WSCONN_S_OPEN || (ws->ws_flags & WSCONN_F_DEAD))
		return (-1);
	if (code != 0 && !wsconn_code_sendable(code))
		return (-1);
	if (code != 0 && reason != NULL)
		len = strlen(reason);
	else
		reason = "";
	if (len > WS_CLOSE_REASON_MAX) {
		/* Cut at a character boundary, so the rest stays UTF-8. */
		len = WS_CLOSE_REASON_MAX;
		while (len > 0 && ((unsigned char)reason[len] & 0xc0) == 0x80)
			len--;
	}
	if (wslay_event_queue_close(
		ws->ws_ctx, code, (const uint8_t *)reason, len) != 0)
		return (-1);
	wsconn_enter_closing(ws);
	wsconn_flush(ws);
	wsconn_flow(ws);
	return (0);
}

/* Free everything now; nothing of ours may be on the stack. */
static void
wsconn_destroy(struct wsconn *ws)
{
	if (ws->ws_bev != NULL)
		bufferevent_free(ws->ws_bev);
	event_free(ws->ws_ev_timer);
	event_free(ws->ws_ev_work);
	evbuffer_free(ws->ws_stage);
	wslay_event_context_free(ws->ws_ctx);
	free(ws->ws_rbuf);
	if (ws->ws_rmsg != NULL)
		evbuffer_free(ws->ws_rmsg);
	free(ws);
}

/* Free a connection whose free was deferred, from the loop. */
static void
wsconn_free_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	wsconn_destroy(arg);
}

/* Free a connection now, or from the loop if inside its callbacks. */
void
wsconn_free(struct wsconn *ws)
{
	if (ws == NULL || (ws->ws_flags & WSCONN_F_DEAD))
		return;
	if (ws->ws_depth == 0 &&
	    !(ws->ws_flags & (WSCONN_F_IN_RECV | WSCONN_F_IN_SEND))) {
		wsconn_destroy(ws);
		return;
	}
	/* Go quiet now; the memory stays until our frames have unwound. */
	ws->ws_flags |= WSCONN_F_DEAD;
	if (ws->ws_bev != NULL) {
		bufferevent_setcb(ws->ws_bev, NULL, NULL, NULL, NULL);
		bufferevent_disable(ws->ws_bev, EV_READ | EV_WRITE);
	}
	evtimer_del(ws->ws_ev_timer);
	event_del(ws->ws_ev_work);
	if (event_base_once(
		ws->ws_base, -1, EV_TIMEOUT, wsconn_free_cb, ws, NULL) != 0) {
		log_error("wsconn: cannot schedule a deferred free");
		abort();
	}
}
