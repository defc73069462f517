/*
 * The bodies of a Port B exchange (tunnel-protocol.md §4.5-4.8, §6, §8.6,
 * §10.3).
 *
 * Request: a streamed body goes out as data envelopes with offsets, as the
 * client's credits allow; what the client has not acknowledged stays here,
 * so after a resume it is sent again, with its original offsets, from the
 * client's ack_offset.  Response: http_resp is answered whole through the
 * engine's sink; a stream goes through it chunk by chunk (the engine frames
 * it: Content-Length when known, chunked otherwise, never both) and a
 * credit goes back for each chunk once it has been written, so a slow
 * caller slows the client.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "gw.h"

/* A streamed upload holds at most this much unacknowledged or unsent. */
#define TX_UP_BUF_MAX ((size_t)1 << 20)

/* Response fields kept on the stack; more are allocated. */
#define TX_RESP_FIELDS 32

static const struct gw_error tdc_err_bad_body[] = { { 400,
    "bad_request_body" } };

/* Arm a one-shot timer for ms milliseconds. */
static void
tx_timer_set(struct event *ev, uint64_t ms)
{
	struct timeval tv;

	clock_msec_to_tv(ms, &tv);
	evtimer_add(ev, &tv);
}

/* Is name listed in a Connection field of the response frame? */
static int
tx_resp_conn_named(const struct tunproto_msg *m, const char *name)
{
	size_t i;

	for (i = 0; i < m->m_nheaders; i++) {
		if (strcasecmp(m->m_headers[i].h_name, "connection") == 0 &&
		    http1_list_has(m->m_headers[i].h_value,
			strlen(m->m_headers[i].h_value), name))
			return (1);
	}
	return (0);
}

/* Is s an HTTP token (a valid field name)? */
static int
tx_token(const char *s)
{
	static const char tchar[] = "!#$%&'*+-.^_`|~";

	if (*s == '\0')
		return (0);
	for (; *s != '\0'; s++) {
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
			(*s >= '0' && *s <= '9') || strchr(tchar, *s) != NULL))
			return (0);
	}
	return (1);
}

/* May s be sent as a field value (no CR, LF, NUL or other controls)? */
static int
tx_value_ok(const char *s)
{
	const unsigned char *p;

	for (p = (const unsigned char *)s; *p != '\0'; p++) {
		if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
			return (0);
	}
	return (1);
}

/*
 * Are the response headers within the limits of §6.5 (200 fields, 64 KiB
 * of names and values)?
 */
static int
tx_resp_headers_ok(const struct tunproto_msg *m)
{
	size_t i, bytes = 0;

	if (m->m_nheaders > TUNPROTO_RESP_HEADERS_MAX)
		return (0);
	for (i = 0; i < m->m_nheaders; i++)
		bytes += strlen(m->m_headers[i].h_name) +
		    strlen(m->m_headers[i].h_value);
	return (bytes <= TUNPROTO_RESP_HEADER_BYTES_MAX);
}

/* The first Content-Length of the response frame that parses, or -1. */
static int
tx_resp_length(const struct tunproto_msg *m, uint64_t *len)
{
	const char *v;
	char *end;
	size_t i;

	for (i = 0; i < m->m_nheaders; i++) {
		if (strcasecmp(m->m_headers[i].h_name, "content-length") != 0)
			continue;
		v = m->m_headers[i].h_value;
		if (*v < '0' || *v > '9')
			continue;
		*len = strtoull(v, &end, 10);
		if (*end == '\0')
			return (0);
	}
	return (-1);
}

/*
 * Send the response head downstream through the engine's sink (§10.3):
 * the relayed headers minus hop-by-hop, Connection-named and
 * Content-Length fields and invalid ones; flags and len are the head's
 * (HEAD_F_LENGTH, HEAD_F_NO_BODY), and the engine adds the framing and
 * Connection (close when the request body was not read in full).
 * Returns sink_head's answer.
 */
static int
tx_resp_head(struct tunnel_xchg *x, int status, const struct tunproto_msg *m,
    int flags, uint64_t len)
{
	struct tunnel_dconn *d = x->x_dconn;
	const struct tunproto_header *th;
	struct hfield fs[TX_RESP_FIELDS], *f = fs;
	struct head h;
	size_t i, n = 0;
	int rv;

	x->x_status = status;
	if (m->m_nheaders > TX_RESP_FIELDS)
		f = xcalloc(m->m_nheaders, sizeof *f);
	for (i = 0; i < m->m_nheaders; i++) {
		th = &m->m_headers[i];
		if (tunnel_hop_field(th->h_name) ||
		    tx_resp_conn_named(m, th->h_name) ||
		    strcasecmp(th->h_name, "content-length") == 0 ||
		    !tx_token(th->h_name) || !tx_value_ok(th->h_value))
			continue;
		hfield_set(&f[n++], th->h_name, th->h_value);
	}
	memset(&h, 0, sizeof h);
	h.h_status = status;
	h.h_version = 11;
	h.h_fields = f;
	h.h_nfields = n;
	h.h_flags = flags;
	h.h_length = len;
	if (!h1s_body_done(d->d_h1s) || (x->x_flags & TX_F_UP_STOPPED))
		h.h_flags |= HEAD_F_CLOSE;
	rv = sink_head(h1s_sink(d->d_h1s), &h);
	if (f != fs)
		free(f);
	return (rv);
}

/*
 * Read request body bytes from the caller into x_body, as much as fits:
 * all of a fast-path body, or up to TX_UP_BUF_MAX not yet acknowledged.
 * The engine de-frames it (h1s_body_read); what is left waits in the
 * caller's socket, whose reading stops when its input is full.  Returns
 * the bytes read, or -1 after failing the exchange.
 */
int64_t
tunnel_xchg_read_body(struct tunnel_xchg *x)
{
	struct tunnel_dconn *d = x->x_dconn;
	struct tunnel *t = x->x_tunnel;
	enum http1_err err;
	size_t room, have;
	ssize_t moved;
	uint64_t max;

	if (d == NULL || (x->x_flags & (TX_F_UP_DONE | TX_F_UP_STOPPED)))
		return (0);
	/* A held stream waits in the socket, not here: memory stays small. */
	if ((x->x_flags & TX_F_STREAM_REQ) && x->x_state != TX_S_SENT)
		return (0);
	have = evbuffer_get_length(x->x_body);
	room = have < TX_UP_BUF_MAX ? TX_UP_BUF_MAX - have : 0;
	/* A probe reads one byte past the fast path, no more (§10.2). */
	if ((x->x_flags & TX_F_UP_PROBE) &&
	    room > t->t_local.l_fast_path_body + 1 - have)
		room = (size_t)(t->t_local.l_fast_path_body + 1 - have);
	if (room == 0)
		return (0);
	if ((moved = h1s_body_read(d->d_h1s, x->x_body, room, &err)) < 0) {
		if (err == HTTP1_E_NONE)
			return (-1); /* the connection is gone */
		h1s_no_keep(d->d_h1s);
		tunnel_xchg_fail(x, tdc_err_bad_body,
		    "downstream request closed",
		    "The request body is malformed: %s",
		    http1_err_message(err));
		return (-1);
	}
	if (h1s_body_done(d->d_h1s))
		x->x_flags |= TX_F_UP_DONE;
	x->x_up_read += (uint64_t)moved;
	t->t_bytes_in += (uint64_t)moved;
	max = tunnel_xchg_limits(t)->l_max_body_size;
	if (x->x_up_read > max) {
		h1s_no_keep(d->d_h1s);
		tunnel_xchg_fail(x, gw_err_body_too_large,
		    "request body exceeds tunnel limit",
		    "The request body exceeds the tunnel's limit of %llu "
		    "bytes.",
		    (unsigned long long)max);
		return (-1);
	}
	return ((int64_t)moved);
}

/* Remember the end of a chunk sent and not yet acknowledged. */
static void
tx_up_push(struct tunnel_xchg *x, uint64_t end)
{
	if (x->x_up_nends == x->x_up_cap) {
		x->x_up_cap = x->x_up_cap == 0 ? 16 : x->x_up_cap * 2;
		x->x_up_ends = xreallocarray(
		    x->x_up_ends, x->x_up_cap, sizeof *x->x_up_ends);
	}
	x->x_up_ends[x->x_up_nends++] = end;
}

/*
 * Send what the client's credits allow of a streamed request body (§4.6,
 * §6.1): first the chunks a resume must resend, with their original
 * offsets and lengths (§8.6), then new ones; then http_req_end.  Chunk
 * data stays in x_body until the client acknowledges it.
 */
void
tunnel_xchg_pump(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;
	const struct tunnel_link *l;
	struct tunproto_msg m;
	uint64_t len, chunk, before = x->x_up_sent;
	size_t i;
	int fresh;

	if (x->x_state != TX_S_SENT || !(x->x_flags & TX_F_STREAM_REQ) ||
	    (x->x_flags & TX_F_UP_STOPPED))
		return;
	if (tunnel_xchg_read_body(x) < 0)
		return;
	if (!(x->x_flags & TX_F_UP_WINDOW) || (l = tunnel_active(t)) == NULL)
		return;
	chunk = l->l_neg.l_max_stream_chunk;
	if (chunk > TUNPROTO_CHUNK_CAP)
		chunk = TUNPROTO_CHUNK_CAP;
	if ((l->l_flags & TLINK_F_TLS) && chunk > TUNPROTO_CHUNK_TLS)
		chunk = TUNPROTO_CHUNK_TLS;
	while (x->x_up_credits > 0 && tunnel_data_ok(t)) {
		fresh = 1;
		len = 0;
		for (i = 0; i < x->x_up_nends; i++) {
			if (x->x_up_ends[i] > x->x_up_sent) {
				len = x->x_up_ends[i] - x->x_up_sent;
				fresh = 0;
				break;
			}
		}
		if (fresh) {
			len = x->x_up_read - x->x_up_sent;
			if (len == 0)
				break;
			if (len > chunk)
				len = chunk;
			/*
			 * With frames in flight, wait for a whole chunk: the
			 * window counts frames, so small ones starve a bulk
			 * upload.  With every credit back, or the body read,
			 * a small piece goes at once.
			 */
			else if (len < chunk &&
			    !(x->x_flags & TX_F_UP_DONE) &&
			    x->x_up_credits < l->l_neg.l_stream_window_frames)
				break;
		}
		if (x->x_up_sent - x->x_up_acked + len >
		    evbuffer_get_length(x->x_body)) {
			tunnel_xchg_fail(x, gw_err_tunnel_error,
			    "downstream request closed",
			    "Tunnel request stream lost (bytes %llu-%llu are "
			    "no longer held; %zu from %llu are).",
			    (unsigned long long)x->x_up_sent,
			    (unsigned long long)(x->x_up_sent + len),
			    evbuffer_get_length(x->x_body),
			    (unsigned long long)x->x_up_acked);
			return;
		}
		/* Straight from x_body into the WebSocket's output. */
		if (tunnel_send_data_ev(t, TUNPROTO_ENV_HTTP_REQUEST_DATA,
			x->x_id, TUNPROTO_ENV_F_OFFSET, x->x_up_sent, x->x_body,
			(size_t)(x->x_up_sent - x->x_up_acked),
			(size_t)len) != 0)
			return;
		if (fresh)
			tx_up_push(x, x->x_up_sent + len);
		x->x_up_sent += len;
		x->x_up_credits--;
	}
	if ((x->x_flags & TX_F_UP_DONE) && x->x_up_sent == x->x_up_read &&
	    !(x->x_flags & TX_F_UP_END_SENT)) {
		memset(&m, 0, sizeof m);
		m.m_type = TUNPROTO_T_HTTP_REQ_END;
		m.m_id = x->x_id;
		if (tunnel_send_msg(t, &m) == 0) {
			x->x_flags |= TX_F_UP_END_SENT;
			before = UINT64_MAX;
		}
	}
	/* The response timeout counts from the last request byte sent. */
	if (x->x_up_sent != before)
		tx_timer_set(x->x_timer, t->t_http_timeout);
}

/*
 * A window from the client for a streamed request (§4.8): take its
 * credits (at most a window's worth) and drop what its ack_offset
 * covers.  The first window on a link (new stream, or the answer to a
 * replayed http_req_begin) rewinds sending to that offset (§8.6).
 */
static void
tx_window(struct tunnel_xchg *x, const struct tunproto_msg *m)
{
	const struct tunnel_link *l = tunnel_active(x->x_tunnel);
	uint64_t ack, top, window;
	size_t i;

	if (l == NULL || x->x_state != TX_S_SENT ||
	    !(x->x_flags & TX_F_STREAM_REQ) || (x->x_flags & TX_F_UP_STOPPED))
		return;
	if (tunproto_window_check(m, NULL) != 0) {
		log_warn("tunnel %s:%d: window for %s without credits or "
			 "ack_offset dropped",
		    x->x_tunnel->t_name, x->x_tunnel->t_port, x->x_id);
		return;
	}
	if (m->m_flags & TUNPROTO_MSG_F_ACK_OFFSET) {
		ack = m->m_ack_offset;
		top = x->x_up_nends > 0 ? x->x_up_ends[x->x_up_nends - 1]
					: x->x_up_acked;
		if (ack > top) {
			log_warn(
			    "tunnel %s:%d: window for %s acknowledges %llu "
			    "bytes, more than the %llu sent; ignored",
			    x->x_tunnel->t_name, x->x_tunnel->t_port, x->x_id,
			    (unsigned long long)ack, (unsigned long long)top);
		} else if (ack > x->x_up_acked) {
			evbuffer_drain(
			    x->x_body, (size_t)(ack - x->x_up_acked));
			x->x_up_acked = ack;
			for (i = 0; i < x->x_up_nends && x->x_up_ends[i] <= ack;
			     i++)
				;
			memmove(x->x_up_ends, x->x_up_ends + i,
			    (x->x_up_nends - i) * sizeof *x->x_up_ends);
			x->x_up_nends -= i;
			/* A duplicate's ack: it holds these, skip them. */
			if (x->x_up_sent < ack)
				x->x_up_sent = ack;
		} else if (ack < x->x_up_acked &&
		    !(x->x_flags & TX_F_UP_WINDOW)) {
			/* It lost what it had acknowledged: cannot resend. */
			tunnel_xchg_fail(x, gw_err_tunnel_error,
			    "downstream request closed",
			    "Tunnel request stream lost: the client resumed "
			    "at byte %llu after acknowledging %llu.",
			    (unsigned long long)ack,
			    (unsigned long long)x->x_up_acked);
			return;
		}
	}
	if (!(x->x_flags & TX_F_UP_WINDOW)) {
		x->x_flags |= TX_F_UP_WINDOW;
		if (x->x_up_sent != x->x_up_acked)
			log_debug(
			    "tunnel %s:%d: upload %s resumes at byte %llu "
			    "(%llu were sent)",
			    x->x_tunnel->t_name, x->x_tunnel->t_port, x->x_id,
			    (unsigned long long)x->x_up_acked,
			    (unsigned long long)x->x_up_sent);
		x->x_up_sent = x->x_up_acked;
	}
	window = l->l_neg.l_stream_window_frames;
	x->x_up_credits += m->m_credits;
	if (x->x_up_credits > window)
		x->x_up_credits = window;
	tunnel_xchg_pump(x);
}

/* Is the status one whose response has no body (§9.6)? */
static int
tx_no_body_status(int status)
{
	return (status < 200 || status == 204 || status == 304);
}

/* Is the status acceptable from the client? */
static int
tx_status_ok(int status)
{
	return (status >= 200 && status <= 599);
}

/* Stop a streamed upload: the response began (§4.7, Rust). */
static void
tx_stop_upload(struct tunnel_xchg *x)
{
	if (!(x->x_flags & TX_F_UP_DONE)) {
		x->x_flags |= TX_F_UP_STOPPED;
		if (x->x_dconn != NULL)
			h1s_no_keep(x->x_dconn->d_h1s);
	}
	evbuffer_drain(x->x_body, evbuffer_get_length(x->x_body));
	x->x_up_nends = 0;
	x->x_up_credits = 0;
	free(x->x_frame);
	x->x_frame = NULL;
}

/* Is the request on d HEAD (its answer has no body)? */
static int
tx_head_req(const struct tunnel_dconn *d)
{
	return (d->d_head != NULL && head_method_is(d->d_head, "HEAD"));
}

/* A fast-path response (§4.5): answer the caller with it whole. */
static void
tx_http_resp(struct tunnel_xchg *x, const struct tunproto_msg *m)
{
	struct tunnel *t = x->x_tunnel;
	struct tunnel_dconn *d = x->x_dconn;
	uint64_t len = m->m_body_len;
	int flags = HEAD_F_LENGTH, head_req;
	struct h1s *h;

	if (x->x_state != TX_S_SENT || d == NULL)
		return;
	if (x->x_flags & TX_F_STREAM_REQ) {
		tunnel_xchg_fail(x, gw_err_tunnel_error, NULL,
		    "Invalid legacy tunnel response: a streamed request was "
		    "answered with http_resp.");
		return;
	}
	if (!tx_status_ok(m->m_status)) {
		tunnel_xchg_fail(x, gw_err_tunnel_error, NULL,
		    "The tunnel client answered with status %d.", m->m_status);
		return;
	}
	if (!tx_resp_headers_ok(m)) {
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "response headers exceed tunnel limit",
		    "The response headers exceed the tunnel limit.");
		return;
	}
	if (len > tunnel_xchg_limits(t)->l_max_body_size) {
		tunnel_xchg_fail(x, gw_err_tunnel_error, NULL,
		    "Tunnel response body exceeds limit.");
		return;
	}
	head_req = tx_head_req(d);
	if (head_req) {
		if (tx_resp_length(m, &len) != 0)
			flags = 0;
	} else if (tx_no_body_status(m->m_status))
		flags = HEAD_F_NO_BODY;
	evtimer_del(x->x_timer);
	h = d->d_h1s;
	if (tx_resp_head(x, m->m_status, m, flags, len) != 0)
		return;
	if (flags == HEAD_F_LENGTH && !head_req) {
		/* A copy: the message is freed once this returns. */
		evbuffer_drain(x->x_body, evbuffer_get_length(x->x_body));
		evbuffer_add(x->x_body, m->m_body, m->m_body_len);
		sink_body(h1s_sink(h), x->x_body, m->m_body_len);
		x->x_resp_received = m->m_body_len;
		t->t_bytes_out += m->m_body_len;
	}
	/* The exchange ends first: the engine may go on within sink_end. */
	tunnel_xchg_end(x, "done");
	sink_end(h1s_sink(h));
}

/*
 * Response metadata of a stream (§4.7): write the head with our framing
 * and open the window.  A repeated begin gets window{0, received}.
 */
static void
tx_resp_begin(struct tunnel_xchg *x, const struct tunproto_msg *m)
{
	struct tunnel *t = x->x_tunnel;
	struct tunnel_dconn *d = x->x_dconn;
	const struct tunnel_link *l = tunnel_active(t);
	uint64_t len = m->m_content_length;
	int has_len = (m->m_flags & TUNPROTO_MSG_F_CONTENT_LENGTH) != 0;
	int flags = 0;

	if (x->x_state == TX_S_STREAM) {
		tunnel_send_window(t, x->x_id, 0, 1, x->x_resp_received, 0);
		return;
	}
	if (x->x_state != TX_S_SENT || l == NULL || d == NULL)
		return;
	if (!tx_status_ok(m->m_status)) {
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "downstream request closed",
		    "The tunnel client answered with status %d.", m->m_status);
		return;
	}
	if (!tx_resp_headers_ok(m)) {
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "response headers exceed tunnel limit",
		    "The response headers exceed the tunnel limit.");
		return;
	}
	if (tx_head_req(d)) {
		x->x_flags |= TX_F_RESP_NOBODY;
		if (!has_len)
			has_len = tx_resp_length(m, &len) == 0;
		flags = has_len ? HEAD_F_LENGTH : 0;
	} else if (tx_no_body_status(m->m_status)) {
		x->x_flags |= TX_F_RESP_NOBODY;
		has_len = 0;
		flags = HEAD_F_NO_BODY;
	} else if (has_len && len > l->l_neg.l_max_body_size) {
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "response body exceeds negotiated limit",
		    "The response body of %llu bytes exceeds the tunnel's "
		    "limit.",
		    (unsigned long long)len);
		return;
	} else if (has_len)
		flags = HEAD_F_LENGTH;
	/* Else the engine's framing: chunked, or the close for HTTP/1.0. */
	if (has_len && !(x->x_flags & TX_F_RESP_NOBODY)) {
		x->x_flags |= TX_F_RESP_LENGTH;
		x->x_resp_len = len;
	}
	if (x->x_flags & TX_F_STREAM_REQ)
		tx_stop_upload(x);
	free(x->x_frame);
	x->x_frame = NULL;
	evtimer_del(x->x_timer);
	x->x_state = TX_S_STREAM;
	if (tx_resp_head(x, m->m_status, m, flags, len) != 0)
		return;
	tunnel_send_window(
	    t, x->x_id, l->l_neg.l_stream_window_frames, 1, 0, 0);
}

/* Remember a chunk queued downstream, to credit once it is written. */
static void
tx_resp_push(struct tunnel_xchg *x, uint64_t out_end, uint64_t ack)
{
	if (x->x_resp_nq == x->x_resp_cap) {
		x->x_resp_cap = x->x_resp_cap == 0 ? 16 : x->x_resp_cap * 2;
		x->x_resp_q = xreallocarray(
		    x->x_resp_q, x->x_resp_cap, sizeof *x->x_resp_q);
		x->x_resp_qack = xreallocarray(
		    x->x_resp_qack, x->x_resp_cap, sizeof *x->x_resp_qack);
	}
	x->x_resp_q[x->x_resp_nq] = out_end;
	x->x_resp_qack[x->x_resp_nq++] = ack;
}

/*
 * Give back a credit for each chunk the caller has now been sent, with
 * the offset it reached (§4.8): a slow caller slows the client.
 */
void
tunnel_xchg_credit(struct tunnel_xchg *x)
{
	struct tunnel_dconn *d = x->x_dconn;
	uint64_t written, ack = 0;
	size_t n = 0;

	if (d == NULL || x->x_resp_nq == 0)
		return;
	written = h1s_sent(d->d_h1s);
	while (n < x->x_resp_nq && x->x_resp_q[n] <= written)
		ack = x->x_resp_qack[n++];
	if (n == 0)
		return;
	memmove(x->x_resp_q, x->x_resp_q + n,
	    (x->x_resp_nq - n) * sizeof *x->x_resp_q);
	memmove(x->x_resp_qack, x->x_resp_qack + n,
	    (x->x_resp_nq - n) * sizeof *x->x_resp_qack);
	x->x_resp_nq -= n;
	if (!(x->x_flags & TX_F_PAUSED))
		tunnel_send_window(x->x_tunnel, x->x_id, n, 1, ack, 0);
}

/*
 * A response data envelope (§4.7): drop duplicates, refuse gaps,
 * overlaps and overruns, and queue the bytes downstream.  The payload,
 * env->e_len bytes, is all of payload, and moves from it (whole chains,
 * without a copy) to the caller's output.
 */
void
tunnel_xchg_data(struct tunnel_xchg *x, const struct tunproto_env *env,
    struct evbuffer *payload)
{
	struct tunnel *t = x->x_tunnel;
	struct tunnel_dconn *d = x->x_dconn;
	const struct tunnel_link *l = tunnel_active(t);
	uint64_t off, len = env->e_len;
	char why[128];

	if (x->x_state != TX_S_STREAM || l == NULL || d == NULL) {
		log_debug("tunnel %s:%d: response data for %s in state %s "
			  "dropped",
		    t->t_name, t->t_port, x->x_id, tx_state_name(x->x_state));
		return;
	}
	if (!(env->e_flags & TUNPROTO_ENV_F_OFFSET) &&
	    (l->l_flags & TLINK_F_RESUMABLE)) {
		tunnel_protocol_error(t,
		    "resumable response chunk is missing "
		    "offset");
		return;
	}
	off = (env->e_flags & TUNPROTO_ENV_F_OFFSET) ? env->e_offset
						     : x->x_resp_received;
	if (len == 0 && off == x->x_resp_received)
		return;
	if (off + len <= x->x_resp_received) {
		tunnel_send_window(t, x->x_id, 0, 1, x->x_resp_received, 0);
		return;
	}
	if (off != x->x_resp_received) {
		snprintf(why, sizeof why, "response chunk %s for %s",
		    off < x->x_resp_received ? "overlap" : "gap", x->x_id);
		tunnel_protocol_error(t, why);
		return;
	}
	if (x->x_resp_received + len > l->l_neg.l_max_body_size ||
	    ((x->x_flags & TX_F_RESP_LENGTH) &&
		x->x_resp_received + len > x->x_resp_len)) {
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "response body exceeds advertised or negotiated limit",
		    "The response body exceeds its announced length or the "
		    "tunnel's limit.");
		return;
	}
	if (x->x_resp_nq >= l->l_neg.l_stream_window_frames) {
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "downstream response closed",
		    "The tunnel client sent more than its window.");
		return;
	}
	if (x->x_flags & TX_F_RESP_NOBODY) {
		x->x_resp_received += len;
		tunnel_send_window(t, x->x_id, 1, 1, x->x_resp_received, 0);
		return;
	}
	if (sink_body(h1s_sink(d->d_h1s), payload, (size_t)len) != 0) {
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "downstream response closed",
		    "The caller's connection is gone.");
		return;
	}
	x->x_resp_received += len;
	t->t_bytes_out += len;
	/* Credited once the output written passes where the chunk ends. */
	tx_resp_push(x, h1s_sent(d->d_h1s) + h1s_queued(d->d_h1s),
	    x->x_resp_received);
}

/*
 * The end of a streamed response (§4.7): check the length, finish the
 * body, and for a resumable session send the complete window.
 */
static void
tx_resp_end(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;
	struct tunnel_dconn *d = x->x_dconn;
	const struct tunnel_link *l = tunnel_active(t);
	struct h1s *h = d != NULL ? d->d_h1s : NULL;

	if (x->x_state != TX_S_STREAM)
		return;
	if ((x->x_flags & TX_F_RESP_LENGTH) &&
	    x->x_resp_received != x->x_resp_len) {
		tunnel_xchg_fail(x, gw_err_tunnel_error,
		    "response content length mismatch",
		    "The response ended after %llu of %llu bytes "
		    "(response content length mismatch).",
		    (unsigned long long)x->x_resp_received,
		    (unsigned long long)x->x_resp_len);
		return;
	}
	if (l != NULL && (l->l_flags & TLINK_F_RESUMABLE))
		tunnel_send_window(t, x->x_id, 0, 1, x->x_resp_received, 1);
	/* The exchange ends first: the engine may go on within sink_end. */
	tunnel_xchg_end(x, "done");
	if (h != NULL)
		sink_end(h1s_sink(h));
}

/* A control message for an HTTP exchange. */
void
tunnel_xchg_msg(struct tunnel_xchg *x, const struct tunproto_msg *m)
{
	switch (m->m_type) {
	case TUNPROTO_T_HTTP_RESP:
		tx_http_resp(x, m);
		break;
	case TUNPROTO_T_HTTP_RESP_BEGIN:
		tx_resp_begin(x, m);
		break;
	case TUNPROTO_T_HTTP_RESP_END:
		tx_resp_end(x);
		break;
	case TUNPROTO_T_WINDOW:
		tx_window(x, m);
		break;
	case TUNPROTO_T_ERROR:
		/* The client's message goes to the caller (§10.4). */
		if (x->x_state == TX_S_SENT || x->x_state == TX_S_STREAM)
			tunnel_xchg_fail(
			    x, gw_err_tunnel_error, NULL, "%s", m->m_message);
		break;
	default:
		log_debug("tunnel %s:%d: %s for exchange %s dropped",
		    x->x_tunnel->t_name, x->x_tunnel->t_port,
		    tunproto_type_name(m->m_type), x->x_id);
		break;
	}
}

/*
 * The link was lost and the session is resumable: keep the exchange, stop
 * sending, and forget the credits (§8.3, §8.6).  A streaming response
 * still fails if the client does not come back within http_timeout.
 */
void
tunnel_xchg_pause(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;

	x->x_flags |= TX_F_PAUSED;
	x->x_flags &= ~(TX_F_UP_WINDOW | TX_F_UP_END_SENT);
	x->x_up_credits = 0;
	if (x->x_state == TX_S_STREAM) {
		tx_timer_set(x->x_timer, t->t_http_timeout);
	}
}

/*
 * The session resumed on a new link: replay a request still waiting for
 * its response metadata (§8.4), or tell the client where a response
 * stream stands (§8.6).
 */
void
tunnel_xchg_resume(struct tunnel_xchg *x)
{
	struct tunnel *t = x->x_tunnel;
	const struct tunnel_link *l = tunnel_active(t);
	uint64_t window;

	if (l == NULL)
		return;
	if (x->x_state == TX_S_SENT && x->x_frame != NULL) {
		tunnel_send_frame(t, x->x_frame, x->x_frame_len);
	} else if (x->x_state == TX_S_STREAM) {
		evtimer_del(x->x_timer);
		/* Chunks written meanwhile only leave the queue. */
		tunnel_xchg_credit(x);
		window = l->l_neg.l_stream_window_frames;
		tunnel_send_window(t, x->x_id,
		    window > x->x_resp_nq ? window - x->x_resp_nq : 0, 1,
		    x->x_resp_received, 0);
	}
	x->x_flags &= ~TX_F_PAUSED;
}
