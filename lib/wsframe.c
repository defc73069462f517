/*
 * WebSocket frames: the parser of received byte streams, masking, UTF-8,
 * the close code rule and the header of the frames we send (wsframe.h).
 */
#include <sys/types.h>

#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>

#include "wsframe.h"

/* May code travel in a close frame (RFC 6455 section 7.4, IANA)? */
int
ws_close_code_valid(unsigned int code)
{
	return ((code >= 1000 && code <= 1003) ||
	    (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999));
}

/*
 * Put src XOR the masking key into dst (RFC 6455 section 5.3).  Eight
 * bytes at a time: the key repeats every four, so one 64-bit word of it,
 * rotated by koff, fits every word.
 */
unsigned int
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
 * Go on checking UTF-8: no overlong forms, no surrogates, nothing past
 * U+10FFFF.  *state is 0 between characters, else the continuation bytes
 * still to come and the range of the next one.
 */
int
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

/* Put the header of a whole frame into h; returns its length. */
size_t
ws_header_put(
    uint8_t h[WS_HEADER_MAX], uint8_t op, uint64_t len, const uint8_t *key)
{
	size_t hl;
	unsigned int i;

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
			h[2 + i] = (uint8_t)(len >> (56 - 8 * i));
		hl = 10;
	}
	if (key != NULL) {
		h[1] |= 0x80;
		memcpy(h + hl, key, 4);
		hl += 4;
	}
	return (hl);
}

/* An unmasked close frame with code and reason into f; its length. */
size_t
ws_close_put(uint8_t f[WS_CLOSE_FRAME_MAX], uint16_t code, const char *reason)
{
	size_t rlen = strlen(reason), hl;

	if (rlen > WS_CLOSE_REASON_MAX)
		rlen = WS_CLOSE_REASON_MAX;
	hl = ws_header_put(f, WS_OP_CLOSE, 2 + rlen, NULL);
	f[hl] = (uint8_t)(code >> 8);
	f[hl + 1] = (uint8_t)code;
	memcpy(f + hl + 2, reason, rlen);
	return (hl + 2 + rlen);
}

/* The length of the header t holds the start of; 2 until that is known. */
static size_t
ws_track_hlen(const struct ws_track *t)
{
	size_t hl = 2;

	if (t->wt_hlen < 2)
		return (hl);
	if ((t->wt_hdr[1] & 0x7f) == 126)
		hl = 4;
	else if ((t->wt_hdr[1] & 0x7f) == 127)
		hl = 10;
	return (hl + ((t->wt_hdr[1] & 0x80) ? 4 : 0));
}

/* Follow len more bytes of the stream, up to a boundary with stop. */
size_t
ws_track(struct ws_track *t, const uint8_t *p, size_t len, int stop)
{
	size_t done = 0, n, i;
	uint8_t l7;

	if (stop && ws_track_between(t))
		return (0);
	while (done < len) {
		if (t->wt_left > 0) {
			n = len - done;
			if (n > t->wt_left)
				n = (size_t)t->wt_left;
			t->wt_left -= n;
			done += n;
			if (t->wt_left == 0 && stop)
				break;
			continue;
		}
		t->wt_hdr[t->wt_hlen++] = p[done++];
		if (t->wt_hlen < ws_track_hlen(t))
			continue;
		/* The header is whole: its payload follows. */
		l7 = t->wt_hdr[1] & 0x7f;
		if (l7 < 126)
			t->wt_left = l7;
		else {
			t->wt_left = 0;
			for (i = 0; i < (l7 == 126 ? 2u : 8u); i++)
				t->wt_left = (t->wt_left << 8) |
				    t->wt_hdr[2 + i];
		}
		t->wt_hlen = 0;
		if (t->wt_left == 0 && stop)
			break;
	}
	return (done);
}

/* As ws_track, over the first len bytes of buf, chain by chain. */
size_t
ws_track_evbuffer(
    struct ws_track *t, struct evbuffer *buf, size_t len, int stop)
{
	struct evbuffer_iovec v[8];
	struct evbuffer_ptr pos;
	size_t done = 0, n, k;
	int i, nv;

	while (done < len) {
		if (evbuffer_ptr_set(buf, &pos, done, EVBUFFER_PTR_SET) != 0)
			break;
		nv = evbuffer_peek(buf, (ev_ssize_t)(len - done), &pos, v, 8);
		if (nv <= 0)
			break;
		if (nv > 8)
			nv = 8;
		for (i = 0; i < nv && done < len; i++) {
			n = v[i].iov_len < len - done ? v[i].iov_len
						      : len - done;
			k = ws_track(t, v[i].iov_base, n, stop);
			done += k;
			if (k < n)
				return (done); /* at a boundary */
		}
	}
	return (done);
}

/* Start parsing a stream received by a server or by a client. */
void
wsframe_rx_init(struct wsframe_rx *rx, int is_server, size_t max)
{
	memset(rx, 0, sizeof *rx);
	rx->rx_flags = is_server ? WSFRAME_RX_F_SERVER : 0;
	rx->rx_max = max;
}

/* Has the stream ended? */
int
wsframe_rx_ended(const struct wsframe_rx *rx)
{
	return (rx->rx_state == WSFRAME_RX_END);
}

/* The stream broke a rule: end it, and report code and why. */
static enum wsframe_ev
wsframe_rx_fail(struct wsframe_rx *rx, struct wsframe_event *ev, uint16_t code,
    const char *why)
{
	rx->rx_state = WSFRAME_RX_END;
	memset(ev, 0, sizeof *ev);
	ev->e_type = WSFRAME_EV_ERROR;
	ev->e_code = code;
	ev->e_why = why;
	return (WSFRAME_EV_ERROR);
}

/*
 * Take the frame header at the front of in.  Returns 1 when taken (the
 * state says what follows), 0 when in holds only part of it, or -1 with
 * *why and *code set when the frame is refused.  Each rule is judged as
 * soon as the bytes it needs are in, not once the whole header is.
 */
static int
wsframe_rx_head(struct wsframe_rx *rx, struct evbuffer *in, const char **why,
    uint16_t *code)
{
	uint8_t h[WS_HEADER_MAX], op;
	size_t avail, hl, ext;
	uint64_t len;
	unsigned int i;
	int masked, fin;

	*code = WS_CLOSE_PROTOCOL_ERROR;
	if ((avail = evbuffer_get_length(in)) < 2)
		return (0);
	evbuffer_copyout(in, h, avail < sizeof h ? avail : sizeof h);
	fin = (h[0] & 0x80) != 0;
	op = h[0] & 0x0f;
	masked = (h[1] & 0x80) != 0;
	len = h[1] & 0x7f;
	if ((h[0] & 0x70) != 0)
		*why = "a frame with reserved bits set";
	else if ((op > WS_OP_BINARY && op < WS_OP_CLOSE) || op > WS_OP_PONG)
		*why = "a frame with a reserved opcode";
	else if (masked != ((rx->rx_flags & WSFRAME_RX_F_SERVER) != 0))
		*why = masked ? "a masked frame from a server"
			      : "an unmasked frame from a client";
	else if ((op & 0x08) && !fin)
		*why = "a fragmented control frame";
	else if ((op & 0x08) && len > WS_CONTROL_MAX)
		*why = "a control frame longer than 125 bytes";
	else if (op == WS_OP_CONT && rx->rx_mop == 0)
		*why = "a continuation frame outside a message";
	else if (op != WS_OP_CONT && !(op & 0x08) && rx->rx_mop != 0)
		*why = "a new message inside a fragmented one";
	else
		*why = NULL;
	if (*why != NULL)
		return (-1);
	ext = len == 126 ? 2 : len == 127 ? 8 : 0;
	if (avail < 2 + ext)
		return (0);
	if (ext != 0) {
		for (len = 0, i = 0; i < ext; i++)
			len = (len << 8) | h[2 + i];
		if (len < (ext == 2 ? 126 : 65536)) {
			*why = "a frame length in more bytes than needed";
			return (-1);
		}
		if ((len >> 63) != 0) {
			*why = "a frame length of 2^63 or more";
			return (-1);
		}
	}
	if (!(op & 0x08) && len > rx->rx_max - (rx->rx_mop ? rx->rx_mlen : 0)) {
		*code = WS_CLOSE_TOO_BIG;
		*why = "message too big";
		return (-1);
	}
	hl = 2 + ext + (masked ? 4 : 0);
	if (avail < hl)
		return (0);
	evbuffer_drain(in, hl);
	rx->rx_op = op;
	rx->rx_left = len;
	rx->rx_koff = 0;
	rx->rx_flags &= ~(WSFRAME_RX_F_FIN | WSFRAME_RX_F_MASKED);
	if (fin)
		rx->rx_flags |= WSFRAME_RX_F_FIN;
	if (masked) {
		rx->rx_flags |= WSFRAME_RX_F_MASKED;
		memcpy(rx->rx_key, h + hl - 4, 4);
	}
	if (op & 0x08) {
		rx->rx_clen = 0;
		rx->rx_state = WSFRAME_RX_CONTROL;
		return (1);
	}
	if (op != WS_OP_CONT) {
		rx->rx_mop = op;
		rx->rx_mlen = 0;
		rx->rx_utf8 = 0;
	}
	rx->rx_mlen += len;
	rx->rx_state = WSFRAME_RX_DATA;
	return (1);
}

/*
 * Unmask the first len bytes of in where they lie (if the frame is
 * masked) and check them as UTF-8 (if the message is text), extent by
 * extent: the bytes were just read, so each is in the cache for both.
 * Returns 0, or -1 at bytes that cannot be UTF-8.
 */
static int
wsframe_rx_payload(struct wsframe_rx *rx, struct evbuffer *in, size_t len)
{
	struct evbuffer_iovec v[8];
	struct evbuffer_ptr ptr;
	uint8_t *p;
	size_t m;
	int i, n;

	if (!(rx->rx_flags & WSFRAME_RX_F_MASKED) && rx->rx_mop != WS_OP_TEXT)
		return (0);
	if (evbuffer_ptr_set(in, &ptr, 0, EVBUFFER_PTR_SET) != 0)
		return (-1);
	while (len > 0) {
		if ((n = evbuffer_peek(in, (ev_ssize_t)len, &ptr, v, 8)) <= 0)
			return (-1);
		for (i = 0; i < n && i < 8 && len > 0; i++) {
			p = v[i].iov_base;
			m = v[i].iov_len < len ? v[i].iov_len : len;
			if (rx->rx_flags & WSFRAME_RX_F_MASKED)
				rx->rx_koff = (uint8_t)ws_mask(
				    p, p, m, rx->rx_key, rx->rx_koff);
			if (rx->rx_mop == WS_OP_TEXT &&
			    ws_utf8_check(&rx->rx_utf8, p, m) != 0)
				return (-1);
			len -= m;
			if (len > 0 &&
			    evbuffer_ptr_set(in, &ptr, m, EVBUFFER_PTR_ADD) !=
				0)
				return (-1);
		}
	}
	return (0);
}

/* Report the control frame whose payload is whole in rx_ctl. */
static enum wsframe_ev
wsframe_rx_control(struct wsframe_rx *rx, struct wsframe_event *ev)
{
	uint32_t utf8 = 0;

	rx->rx_state = WSFRAME_RX_HEAD;
	ev->e_type = WSFRAME_EV_CONTROL;
	ev->e_op = rx->rx_op;
	ev->e_data = rx->rx_ctl;
	ev->e_len = rx->rx_clen;
	if (rx->rx_op != WS_OP_CLOSE)
		return (WSFRAME_EV_CONTROL);
	rx->rx_state = WSFRAME_RX_END;
	ev->e_code = WS_CLOSE_NO_STATUS;
	ev->e_reason = "";
	if (rx->rx_clen == 0)
		return (WSFRAME_EV_CONTROL);
	if (rx->rx_clen == 1)
		return (wsframe_rx_fail(rx, ev, WS_CLOSE_PROTOCOL_ERROR,
		    "a close frame with a one-byte payload"));
	ev->e_code = (uint16_t)(rx->rx_ctl[0] << 8 | rx->rx_ctl[1]);
	if (!ws_close_code_valid(ev->e_code))
		return (wsframe_rx_fail(
		    rx, ev, WS_CLOSE_PROTOCOL_ERROR, "an invalid close code"));
	if (ws_utf8_check(&utf8, rx->rx_ctl + 2, rx->rx_clen - 2u) != 0 ||
	    utf8 != 0)
		return (wsframe_rx_fail(rx, ev, WS_CLOSE_INVALID_DATA,
		    "invalid UTF-8 in a close reason"));
	ev->e_reason = (const char *)rx->rx_ctl + 2;
	ev->e_reason_len = rx->rx_clen - 2u;
	return (WSFRAME_EV_CONTROL);
}

/* Parse the front of in up to the next thing to report. */
enum wsframe_ev
wsframe_rx_next(
    struct wsframe_rx *rx, struct evbuffer *in, struct wsframe_event *ev)
{
	const char *why;
	uint16_t code;
	uint8_t op;
	size_t n;
	int rv;

	memset(ev, 0, sizeof *ev);
	for (;;) {
		switch (rx->rx_state) {
		case WSFRAME_RX_HEAD:
			if ((rv = wsframe_rx_head(rx, in, &why, &code)) < 0)
				return (wsframe_rx_fail(rx, ev, code, why));
			if (rv == 0)
				return (WSFRAME_EV_MORE);
			/* An empty frame: on at once. */
			n = 0;
			if (rx->rx_left == 0 && rx->rx_state == WSFRAME_RX_DATA)
				break;
			continue;
		case WSFRAME_RX_DATA:
			if ((n = evbuffer_get_length(in)) == 0)
				return (WSFRAME_EV_MORE);
			break;
		case WSFRAME_RX_CONTROL:
			n = evbuffer_get_length(in);
			if (n > rx->rx_left)
				n = (size_t)rx->rx_left;
			if (n != 0) {
				evbuffer_remove(
				    in, rx->rx_ctl + rx->rx_clen, n);
				if (rx->rx_flags & WSFRAME_RX_F_MASKED)
					rx->rx_koff = (uint8_t)ws_mask(
					    rx->rx_ctl + rx->rx_clen,
					    rx->rx_ctl + rx->rx_clen, n,
					    rx->rx_key, rx->rx_koff);
				rx->rx_clen += (uint8_t)n;
				rx->rx_left -= n;
			}
			if (rx->rx_left != 0)
				return (WSFRAME_EV_MORE);
			return (wsframe_rx_control(rx, ev));
		case WSFRAME_RX_END:
			return (WSFRAME_EV_MORE);
		}
		/* Payload of a data frame: n bytes are in, some may be ours. */
		if (n > rx->rx_left)
			n = (size_t)rx->rx_left;
		if (wsframe_rx_payload(rx, in, n) != 0)
			return (wsframe_rx_fail(rx, ev, WS_CLOSE_INVALID_DATA,
			    "invalid UTF-8 in a text message"));
		rx->rx_left -= n;
		op = rx->rx_mop;
		if (rx->rx_left == 0) {
			rx->rx_state = WSFRAME_RX_HEAD;
			if (rx->rx_flags & WSFRAME_RX_F_FIN) {
				if (rx->rx_mop == WS_OP_TEXT &&
				    rx->rx_utf8 != 0)
					return (wsframe_rx_fail(rx, ev,
					    WS_CLOSE_INVALID_DATA,
					    "invalid UTF-8 in a text message"));
				ev->e_fin = 1;
				rx->rx_mop = 0;
			} else if (n == 0)
				continue; /* an empty fragment: nothing to say */
		}
		ev->e_type = WSFRAME_EV_DATA;
		ev->e_op = op;
		ev->e_len = n;
		return (WSFRAME_EV_DATA);
	}
}
