/*
 * WebSocket connections: a connection object over a stream (lib/stream.c,
 * plain or TLS).  The
 * HTTP/1.1 handshake checks are in wshandshake.c, the frame codec in
 * wsframe.c.
 *
 * Each direction has one owner.  Every received byte goes through one
 * parser, wsframe.c's: it reads every frame header, data and control,
 * enforces RFC 6455, unmasks a machine word at a time in the input's own
 * chains, and hands data to us to pass on (moved, or copied once) and
 * control frames to the state machine here.  wslay's byte-at-a-time
 * unmasking and double copy of every message were nearly half the
 * gateway's CPU in a tunnel download, and its receive side refuses the
 * close codes 1012-1014 registered after RFC 6455, which the tunnel uses.
 * What we send: data frames we frame and mask ourselves, straight into
 * the stream's output (wsconn_put); control frames (pong, close) go
 * through wslay's event API, which queues them, frames and masks them,
 * and keeps the closing handshake's send side (nothing after our close
 * frame).  One writer orders them: wslay's queue is flushed into the
 * output before each data frame, and both write whole frames, so what we
 * queue lives in one place and wsconn_queued is exact enough for credits.
 *
 * The stream's callbacks only note what happened and activate one work
 * event; every callback into the owner runs from that event (or the free
 * from event_base_once), never from inside wsconn_send, wsconn_close or a
 * stream callback, so an owner may send, close or free from any of its
 * callbacks.  What is appended to the output in one loop pass is written
 * at the end of the pass, the stream's batching (stream.h), so the frames
 * of a pass leave in one write (TLS: in records of up to 16 KiB).
 */
#include <sys/types.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/util.h>

#include <openssl/rand.h>

#include <wslay/wslay.h>

#include "alloc.h"
#include "evb.h"
#include "http1.h"
#include "log.h"
#include "stream.h"
#include "wsconn.h"

/* Where a connection is in its life. */
enum wsconn_state {
	WSCONN_S_OPEN = 0, /* messages flow both ways */
	WSCONN_S_CLOSING, /* a close frame went out or came in, or we failed */
	WSCONN_S_CLOSED, /* transport closed, on_close called */
};

struct wsconn {
	struct event_base *ws_base;
	struct stream *ws_s; /* NULL once the transport is closed */
	wslay_event_context_ptr ws_ctx; /* NULL until a control frame */
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
#define WSCONN_F_TLS 0x80 /* the stream is TLS: payloads are copied */
#define WSCONN_F_CLOSE_RCVD 0x100 /* the peer's close frame came */
#define WSCONN_F_WSLAY 0x200 /* wslay may hold a control frame to send */
/* A payload from an evbuffer at least this long is shared, not copied. */
#define WSCONN_SHARE_MIN (8 * 1024)
	int ws_work; /* what ws_ev_work has to do */
#define WSCONN_W_READ 0x01 /* parse the input */
#define WSCONN_W_WRITE 0x02 /* output drained to its low watermark */
#define WSCONN_W_EOF 0x04 /* transport ended (ws_s_what says how) */
#define WSCONN_W_FINISH 0x08 /* close the transport, call on_close */
	short ws_s_what; /* STREAM_EV_* of the end of the transport */
	int ws_depth; /* our callbacks on the stack */
	uint16_t ws_code; /* close code for on_close */
	/*
	 * What one wslay_event_send produces (NULL with ws_ctx), moved to
	 * the stream in one
	 * piece: a frame comes from wslay in pieces (header, payload), and
	 * the output's length must only ever count whole frames.
	 */
	struct evbuffer *ws_stage;
	struct wsframe_rx ws_rx; /* the one parser of what we receive */
	size_t ws_max; /* longest message we take */
	/*
	 * A message for on_message: in ws_rbuf unless it came whole in
	 * one read.  For on_message_buf it moves to ws_rmsg instead, chain
	 * by chain (evb_take), unmasked where it was read.
	 */
	uint8_t *ws_rbuf;
	size_t ws_rlen; /* bytes of the message so far */
	size_t ws_rcap; /* bytes allocated for ws_rbuf */
	struct evbuffer *ws_rmsg;
	char ws_reason[WS_CLOSE_REASON_MAX + 1];
	struct event *ws_ev_work; /* runs everything that calls the owner */
	struct event *ws_ev_timer; /* closing handshake deadline, or NULL */
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

	snprintf(buf, len, "%s %s%s%s%s%s%s%s%s%s",
	    ws->ws_client ? "client" : "server",
	    wsconn_state_name(ws->ws_state), f & WSCONN_F_DEAD ? " DEAD" : "",
	    f & WSCONN_F_PAUSED ? " PAUSED" : "",
	    f & WSCONN_F_ABOVE_LOW ? " ABOVE_LOW" : "",
	    f & WSCONN_F_FAILED ? " FAILED" : "",
	    f & WSCONN_F_HAVE_CODE ? " HAVE_CODE" : "",
	    f & WSCONN_F_IN_RECV ? " IN_RECV" : "",
	    f & WSCONN_F_IN_SEND ? " IN_SEND" : "",
	    f & WSCONN_F_CLOSE_RCVD ? " CLOSE_RCVD" : "");
	return (buf);
}

/* Bytes waiting to be sent: in wslay plus in the stream's output. */
size_t
wsconn_queued(const struct wsconn *ws)
{
	size_t n;

	if (ws->ws_state == WSCONN_S_CLOSED)
		return (0);
	/* Messages pass by wslay only now and then: ask it only then. */
	n = 0;
	if (ws->ws_flags & WSCONN_F_WSLAY)
		n = wslay_event_get_queued_msg_length(ws->ws_ctx);
	if (ws->ws_s != NULL)
		n += evbuffer_get_length(stream_output(ws->ws_s));
	return (n);
}

/*
 * Stage the bytes of wslay's control frames; wsconn_flush moves what one
 * wslay_event_send made to the stream's output in one piece.
 */
static ssize_t
wsconn_send_cb(wslay_event_context_ptr ctx, const uint8_t *data, size_t len,
    int flags, void *arg)
{
	struct wsconn *ws = arg;

	(void)flags;
	if (ws->ws_s == NULL || evbuffer_add(ws->ws_stage, data, len) != 0) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return (-1);
	}
	return ((ssize_t)len);
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

static void wsconn_timer_cb(evutil_socket_t, short, void *);

/*
 * wslay's context, made the first time a control frame is to be sent:
 * it holds 9 KiB of buffers, and most connections never send one (the
 * tunnel's heartbeat is JSON).  NULL if wslay cannot allocate.
 */
static wslay_event_context_ptr
wsconn_wslay(struct wsconn *ws)
{
	/* wslay only sends: wsframe.c parses what we receive. */
	struct wslay_event_callbacks wcb = {
		.send_callback = wsconn_send_cb,
		.genmask_callback = ws->ws_client ? wsconn_genmask_cb : NULL,
	};
	int rv;

	if (ws->ws_ctx != NULL)
		return (ws->ws_ctx);
	if (ws->ws_stage == NULL && (ws->ws_stage = evbuffer_new()) == NULL)
		return (NULL);
	if (ws->ws_client)
		rv = wslay_event_context_client_init(&ws->ws_ctx, &wcb, ws);
	else
		rv = wslay_event_context_server_init(&ws->ws_ctx, &wcb, ws);
	if (rv != 0)
		ws->ws_ctx = NULL;
	return (ws->ws_ctx);
}

/* Enter the closing state and start the deadline for the handshake. */
static void
wsconn_enter_closing(struct wsconn *ws)
{
	struct timeval tv = { WSCONN_CLOSE_TIMEOUT, 0 };

	if (ws->ws_state != WSCONN_S_OPEN)
		return;
	ws->ws_state = WSCONN_S_CLOSING;
	if (ws->ws_ev_timer == NULL &&
	    (ws->ws_ev_timer = evtimer_new(ws->ws_base, wsconn_timer_cb, ws)) ==
		NULL)
		abort(); /* allocation failure, as with xmalloc */
	evtimer_add(ws->ws_ev_timer, &tv);
}

/*
 * Give the owner the whole message (opcode op) in ws_rmsg, then send its
 * answers.  ws_rmsg is empty afterwards.
 */
static void
wsconn_deliver_rmsg(struct wsconn *ws, uint8_t op)
{
	ws->ws_cbs.on_message_buf(ws->ws_arg, op == WS_OP_BINARY, ws->ws_rmsg);
	evbuffer_drain(ws->ws_rmsg, evbuffer_get_length(ws->ws_rmsg));
	if (!(ws->ws_flags & WSCONN_F_DEAD))
		wsconn_flush(ws);
}

/* Give the owner one whole message (opcode op), then send its answers. */
static void
wsconn_deliver(struct wsconn *ws, uint8_t op, const uint8_t *data, size_t len)
{
	if (ws->ws_cbs.on_message == NULL)
		return;
	if (data == NULL)
		data = (const uint8_t *)"";
	ws->ws_cbs.on_message(ws->ws_arg, op == WS_OP_BINARY, data, len);
	if (!(ws->ws_flags & WSCONN_F_DEAD))
		wsconn_flush(ws);
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

/* Let wslay write what it has queued into the stream's output. */
static void
wsconn_flush(struct wsconn *ws)
{
	int rv;

	/*
	 * A nested call leaves the work to the outer one.  Called after
	 * each message is delivered, so what the owner answered to it
	 * goes out before a close frame that follows it.
	 */
	if ((ws->ws_flags & WSCONN_F_IN_SEND) || ws->ws_s == NULL ||
	    !(ws->ws_flags & WSCONN_F_WSLAY))
		return;
	if (!wslay_event_want_write(ws->ws_ctx)) {
		ws->ws_flags &= ~WSCONN_F_WSLAY;
		return;
	}
	ws->ws_flags |= WSCONN_F_IN_SEND;
	rv = wslay_event_send(ws->ws_ctx);
	ws->ws_flags &= ~WSCONN_F_IN_SEND;
	if (rv == 0 && !wslay_event_want_write(ws->ws_ctx))
		ws->ws_flags &= ~WSCONN_F_WSLAY;
	if (evbuffer_get_length(ws->ws_stage) != 0 &&
	    evbuffer_add_buffer(stream_output(ws->ws_s), ws->ws_stage) != 0)
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

	if (ws->ws_s == NULL)
		return;
	q = wsconn_queued(ws);
	if (q > WSCONN_LOWAT)
		ws->ws_flags |= WSCONN_F_ABOVE_LOW;
	if (!(ws->ws_flags & WSCONN_F_PAUSED) &&
	    ws->ws_state == WSCONN_S_OPEN && q > WSCONN_HIWAT) {
		ws->ws_flags |= WSCONN_F_PAUSED;
		stream_disable(ws->ws_s, EV_READ);
		log_debug("wsconn %p: %s: %zu bytes queued, reading paused",
		    (void *)ws, wsconn_show(ws, buf, sizeof buf), q);
	} else if ((ws->ws_flags & WSCONN_F_PAUSED) &&
	    (q <= WSCONN_LOWAT || ws->ws_state != WSCONN_S_OPEN)) {
		ws->ws_flags &= ~WSCONN_F_PAUSED;
		stream_enable(ws->ws_s, EV_READ);
		wsconn_kick(ws, WSCONN_W_READ);
		log_debug("wsconn %p: %s: %zu bytes queued, reading resumed",
		    (void *)ws, wsconn_show(ws, buf, sizeof buf), q);
	}
}

/* Once closing and everything is written, finish the connection. */
static void
wsconn_check_done(struct wsconn *ws)
{
	if (ws->ws_state != WSCONN_S_CLOSING || ws->ws_s == NULL)
		return;
	if (!(ws->ws_flags & (WSCONN_F_CLOSE_RCVD | WSCONN_F_FAILED)))
		return;
	if (((ws->ws_flags & WSCONN_F_WSLAY) &&
		wslay_event_want_write(ws->ws_ctx)) ||
	    evbuffer_get_length(stream_output(ws->ws_s)) != 0)
		return;
	wsconn_kick(ws, WSCONN_W_FINISH);
}

/* Drop the part of a message that will not be delivered. */
static void
wsconn_drop_message(struct wsconn *ws)
{
	ws->ws_rlen = 0;
	if (ws->ws_rmsg != NULL)
		evbuffer_drain(ws->ws_rmsg, evbuffer_get_length(ws->ws_rmsg));
}

/*
 * The peer broke a rule (why says which): queue a close frame with code,
 * unless ours went already, and close the transport once it is written,
 * without waiting for an answer (RFC 6455 section 7.1.7).
 */
static void
wsconn_refuse(struct wsconn *ws, uint16_t code, const char *why)
{
	char buf[128];

	/* Without wslay there is no close frame: the transport just ends. */
	if (wsconn_wslay(ws) != NULL) {
		(void)wslay_event_queue_close(ws->ws_ctx, code, NULL, 0);
		ws->ws_flags |= WSCONN_F_WSLAY;
	}
	wsconn_set_code(ws, code, why, strlen(why));
	ws->ws_flags |= WSCONN_F_FAILED;
	wsconn_enter_closing(ws);
	wsconn_drop_message(ws);
	log_debug("wsconn %p: %s: refused: %s (%u)", (void *)ws,
	    wsconn_show(ws, buf, sizeof buf), why, code);
}

/*
 * Take the len payload bytes at the front of in (ev) and, at the end of a
 * message, give it to the owner: for on_message_buf the bytes move to
 * ws_rmsg, chains and all; for on_message a message that came whole is
 * handed over from where it lies, the pieces of others are copied to
 * ws_rbuf.  Returns 0, or -1 if memory ran out.
 */
static int
wsconn_data(
    struct wsconn *ws, struct evbuffer *in, const struct wsframe_event *ev)
{
	size_t len = ev->e_len, need, cap;
	uint8_t *p = NULL;

	/* After our close frame, messages have nowhere to go. */
	if (ws->ws_state != WSCONN_S_OPEN) {
		evbuffer_drain(in, len);
		wsconn_drop_message(ws);
		return (0);
	}
	if (ws->ws_cbs.on_message_buf != NULL) {
		if (len != 0 && evb_take(in, ws->ws_rmsg, len) != (int)len)
			return (-1);
		if (ev->e_fin)
			wsconn_deliver_rmsg(ws, ev->e_op);
		return (0);
	}
	if (ev->e_fin && ws->ws_rlen == 0) {
		if (len != 0 &&
		    (p = evbuffer_pullup(in, (ev_ssize_t)len)) == NULL)
			return (-1);
		wsconn_deliver(ws, ev->e_op, p, len);
		if (!(ws->ws_flags & WSCONN_F_DEAD))
			evbuffer_drain(in, len);
		return (0);
	}
	/* It at least doubles: many small fragments cost one copy. */
	if ((need = ws->ws_rlen + len) > ws->ws_rcap) {
		cap = ws->ws_rcap > ws->ws_max / 2 ? ws->ws_max
						   : ws->ws_rcap * 2;
		if (cap < need)
			cap = need;
		ws->ws_rbuf = xrealloc(ws->ws_rbuf, cap);
		ws->ws_rcap = cap;
	}
	if (len != 0 &&
	    evbuffer_remove(in, ws->ws_rbuf + ws->ws_rlen, len) != (int)len)
		return (-1);
	ws->ws_rlen += len;
	if (ev->e_fin) {
		len = ws->ws_rlen;
		ws->ws_rlen = 0;
		wsconn_deliver(ws, ev->e_op, ws->ws_rbuf, len);
	}
	return (0);
}

/*
 * A control frame from the peer: a ping is answered with a pong of its
 * payload, a close with a close of its code and reason (RFC 6455 section
 * 5.5.1), both queued in wslay, which sends nothing after our own close
 * frame; an unasked-for pong is ignored.
 */
static void
wsconn_control(struct wsconn *ws, const struct wsframe_event *ev)
{
	struct wslay_event_msg pong;
	int rv;

	switch (ev->e_op) {
	case WS_OP_PING:
		pong.opcode = WSLAY_PONG;
		pong.msg = ev->e_data;
		pong.msg_length = ev->e_len;
		if (wsconn_wslay(ws) == NULL) {
			wsconn_fail(
			    ws, WS_CLOSE_ABNORMAL, "cannot queue frames");
			return;
		}
		rv = wslay_event_queue_msg(ws->ws_ctx, &pong);
		ws->ws_flags |= WSCONN_F_WSLAY;
		if (rv != 0 && rv != WSLAY_ERR_NO_MORE_MSG) {
			wsconn_fail(
			    ws, WS_CLOSE_ABNORMAL, "cannot queue frames");
			return;
		}
		wsconn_flush(ws);
		break;
	case WS_OP_CLOSE:
		ws->ws_flags |= WSCONN_F_CLOSE_RCVD;
		wsconn_set_code(ws, ev->e_code, ev->e_reason, ev->e_reason_len);
		if (wsconn_wslay(ws) == NULL) {
			wsconn_fail(
			    ws, WS_CLOSE_ABNORMAL, "cannot queue frames");
			return;
		}
		(void)wslay_event_queue_close(ws->ws_ctx,
		    ev->e_code == WS_CLOSE_NO_STATUS ? 0 : ev->e_code,
		    (const uint8_t *)ev->e_reason, ev->e_reason_len);
		ws->ws_flags |= WSCONN_F_WSLAY;
		wsconn_enter_closing(ws);
		wsconn_drop_message(ws);
		break;
	default:
		break;
	}
}

/*
 * Parse the input and act on what the parser finds.  Stops when the input
 * runs out, the owner's answers pile up past WSCONN_HIWAT (a peer that
 * sends but does not read must not make us buffer without bound), or the
 * stream ends.  Returns 0, or -1 if memory ran out.
 */
static int
wsconn_parse(struct wsconn *ws, struct evbuffer *in)
{
	struct wsframe_event ev;

	for (;;) {
		if ((ws->ws_flags & WSCONN_F_DEAD) ||
		    ws->ws_state == WSCONN_S_CLOSED ||
		    (ws->ws_state == WSCONN_S_OPEN &&
			wsconn_queued(ws) > WSCONN_HIWAT))
			return (0);
		switch (wsframe_rx_next(&ws->ws_rx, in, &ev)) {
		case WSFRAME_EV_MORE:
			return (0);
		case WSFRAME_EV_DATA:
			if (wsconn_data(ws, in, &ev) != 0)
				return (-1);
			break;
		case WSFRAME_EV_CONTROL:
			wsconn_control(ws, &ev);
			break;
		case WSFRAME_EV_ERROR:
			wsconn_refuse(ws, ev.e_code, ev.e_why);
			return (0);
		}
	}
}

/* Parse the frames in the input, then send, pause or finish as needed. */
static void
wsconn_read(struct wsconn *ws)
{
	struct evbuffer *in;
	int rv;

	if (ws->ws_s == NULL || ws->ws_state == WSCONN_S_CLOSED ||
	    (ws->ws_flags & (WSCONN_F_DEAD | WSCONN_F_PAUSED)))
		return;
	in = stream_input(ws->ws_s);
	ws->ws_flags |= WSCONN_F_IN_RECV;
	rv = wsconn_parse(ws, in);
	ws->ws_flags &= ~WSCONN_F_IN_RECV;
	if (ws->ws_flags & WSCONN_F_DEAD)
		return;
	/* Between messages, an idle connection holds no buffer. */
	if (ws->ws_rlen == 0 && ws->ws_rbuf != NULL) {
		free(ws->ws_rbuf);
		ws->ws_rbuf = NULL;
		ws->ws_rcap = 0;
	}
	if (rv != 0) {
		wsconn_fail(ws, WS_CLOSE_ABNORMAL, "cannot parse frames");
		return;
	}
	/* After a close frame or an error, input is discarded. */
	if (wsframe_rx_ended(&ws->ws_rx))
		evbuffer_drain(in, evbuffer_get_length(in));
	wsconn_flush(ws);
	wsconn_flow(ws);
	wsconn_check_done(ws);
}

/* The output drained to the low watermark: resume, tell the owner. */
static void
wsconn_written(struct wsconn *ws)
{
	if (ws->ws_s == NULL)
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
	if (ws->ws_ev_timer != NULL)
		evtimer_del(ws->ws_ev_timer);
	if (ws->ws_s != NULL) {
		stream_free(ws->ws_s);
		ws->ws_s = NULL;
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
	if (ws->ws_s_what & STREAM_EV_EOF)
		r = "the peer closed the connection";
	else if (ws->ws_s_what & STREAM_EV_TIMEOUT)
		r = "the transport timed out";
	else
		r = "transport error";
	wsconn_set_code(ws, WS_CLOSE_ABNORMAL, r, strlen(r));
	wsconn_finish(ws);
}

/* Do the work the stream callbacks and timers asked for. */
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
wsconn_readcb(struct stream *s, void *arg)
{
	(void)s;
	wsconn_kick(arg, WSCONN_W_READ);
}

/* The transport's output drained to its low watermark. */
static void
wsconn_writecb(struct stream *s, void *arg)
{
	(void)s;
	wsconn_kick(arg, WSCONN_W_WRITE);
}

/* The transport hit EOF, an error or a timeout. */
static void
wsconn_eventcb(struct stream *s, short what, void *arg)
{
	struct wsconn *ws = arg;

	(void)s;
	if (!(what & (STREAM_EV_EOF | STREAM_EV_ERROR | STREAM_EV_TIMEOUT)))
		return;
	if (ws->ws_s_what == 0)
		ws->ws_s_what = what;
	stream_disable(ws->ws_s, EV_READ | EV_WRITE);
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

/* Start a WebSocket connection over a stream after the handshake. */
struct wsconn *
wsconn_new(struct event_base *base, struct stream *s, int is_client,
    const struct wsconn_cbs *cbs, void *arg, size_t max_message)
{
	struct wsconn *ws;

	ws = xcalloc(1, sizeof *ws);
	ws->ws_base = base;
	ws->ws_client = is_client != 0;
	if (cbs != NULL)
		ws->ws_cbs = *cbs;
	ws->ws_arg = arg;
	if ((ws->ws_max = max_message) == 0)
		ws->ws_max = WSCONN_MAX_MESSAGE_DEFAULT;
	wsframe_rx_init(&ws->ws_rx, !is_client, ws->ws_max);

	ws->ws_ev_work = event_new(base, -1, 0, wsconn_work_cb, ws);
	if (ws->ws_cbs.on_message_buf != NULL &&
	    (ws->ws_rmsg = evbuffer_new()) == NULL)
		goto fail;
	if (ws->ws_ev_work == NULL)
		goto fail;

	ws->ws_s = s;
	if (stream_ssl(s) != NULL)
		ws->ws_flags |= WSCONN_F_TLS;
	stream_setcb(s, wsconn_readcb, wsconn_writecb, wsconn_eventcb, ws);
	/* Input stays small: we parse it as it comes, or we pause. */
	stream_setwatermark(s, EV_READ, 0, WSCONN_READ_HIWAT);
	stream_setwatermark(s, EV_WRITE, WSCONN_LOWAT, 0);
	stream_enable(s, EV_READ | EV_WRITE);
	if (evbuffer_get_length(stream_input(s)) != 0)
		wsconn_kick(ws, WSCONN_W_READ);
	return (ws);

fail:
	if (ws->ws_rmsg != NULL)
		evbuffer_free(ws->ws_rmsg);
	if (ws->ws_ev_work != NULL)
		event_free(ws->ws_ev_work);
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
 * Append a frame whose header is the hl bytes at h, and whose payload is
 * the plen bytes at pre and then len bytes at position pos of src, shared
 * with src rather than copied (evb_share): an unmasked frame on a plain
 * socket, the gateway's side of a tunnel upload.  (A TLS stream copies
 * the output into records anyway, so there the payload is copied once,
 * into the output.)  Returns 0, or -1 with nothing added.
 */
static int
wsconn_put_shared(struct wsconn *ws, const uint8_t *h, size_t hl,
    const uint8_t *pre, size_t plen, struct evbuffer *src, size_t pos,
    size_t len)
{
	struct evbuffer *out = stream_output(ws->ws_s);
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
 * Append one whole data frame (FIN, opcode op) to the stream's
 * output, its payload the plen bytes at pre and then the len bytes at
 * data, or (with src) at position pos of src: a client's masked with a
 * fresh key as it is copied, so the payload is touched once.  Returns 0,
 * or -1 if there is no random key, no memory, or src is too short.
 */
static int
wsconn_put(struct wsconn *ws, uint8_t op, const uint8_t *pre, size_t plen,
    const uint8_t *data, struct evbuffer *src, size_t pos, size_t len)
{
	struct evbuffer *out = stream_output(ws->ws_s);
	struct evbuffer_iovec v[2];
	struct evbuffer_iovec sv[16];
	struct evbuffer_ptr sp;
	struct ws_cursor c = { v, 0, 0 };
	uint8_t h[WS_HEADER_MAX], mkey[4], *key = NULL;
	unsigned int koff = 0;
	size_t hl, left, m;
	int n, j, sn;

	if (src != NULL &&
	    (pos > evbuffer_get_length(src) ||
		len > evbuffer_get_length(src) - pos))
		return (-1);
	if (len > SIZE_MAX - plen)
		return (-1);
	len += plen;
	if (ws->ws_client) {
		if (ws_mask_key(mkey) != 0)
			return (-1);
		key = mkey;
	}
	hl = ws_header_put(h, op, len, key);
	/* Shared if it can be (evb_share), else copied below. */
	if (src != NULL && key == NULL && !(ws->ws_flags & WSCONN_F_TLS) &&
	    len - plen >= WSCONN_SHARE_MIN &&
	    wsconn_put_shared(ws, h, hl, pre, plen, src, pos, len - plen) == 0)
		return (0);
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
				ws_cursor_put(
				    &c, sv[j].iov_base, m, key, &koff);
				left -= m;
				if (evbuffer_ptr_set(
					src, &sp, m, EVBUFFER_PTR_ADD) != 0 &&
				    left > 0)
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
	if (ws->ws_state != WSCONN_S_OPEN || ws->ws_s == NULL ||
	    (ws->ws_ctx != NULL && !wslay_event_get_write_enabled(ws->ws_ctx)))
		return (-1);
	if (wsconn_put(ws, is_binary ? WS_OP_BINARY : WS_OP_TEXT, pre, plen,
		data, src, pos, len - plen) != 0)
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
	return (
	    wsconn_send_parts(ws, is_binary, hdr, hlen, NULL, src, pos, len));
}

/* Start the closing handshake with code and reason. */
int
wsconn_close(struct wsconn *ws, uint16_t code, const char *reason)
{
	size_t len = 0;

	if (ws->ws_state != WSCONN_S_OPEN || (ws->ws_flags & WSCONN_F_DEAD))
		return (-1);
	if (code != 0 && !ws_close_code_valid(code))
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
	if (wsconn_wslay(ws) == NULL ||
	    wslay_event_queue_close(
		ws->ws_ctx, code, (const uint8_t *)reason, len) != 0)
		return (-1);
	ws->ws_flags |= WSCONN_F_WSLAY;
	wsconn_enter_closing(ws);
	wsconn_flush(ws);
	wsconn_flow(ws);
	return (0);
}

/* Free everything now; nothing of ours may be on the stack. */
static void
wsconn_destroy(struct wsconn *ws)
{
	if (ws->ws_s != NULL)
		stream_free(ws->ws_s);
	if (ws->ws_ev_timer != NULL)
		event_free(ws->ws_ev_timer);
	event_free(ws->ws_ev_work);
	if (ws->ws_stage != NULL)
		evbuffer_free(ws->ws_stage);
	if (ws->ws_ctx != NULL)
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
	if (ws->ws_s != NULL) {
		stream_setcb(ws->ws_s, NULL, NULL, NULL, NULL);
		stream_disable(ws->ws_s, EV_READ | EV_WRITE);
	}
	if (ws->ws_ev_timer != NULL)
		evtimer_del(ws->ws_ev_timer);
	event_del(ws->ws_ev_work);
	if (event_base_once(
		ws->ws_base, -1, EV_TIMEOUT, wsconn_free_cb, ws, NULL) != 0) {
		log_error("wsconn: cannot schedule a deferred free");
		abort();
	}
}
