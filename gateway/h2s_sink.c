/*
 * The response sink of an HTTP/2 stream (h2s.c): a head becomes HEADERS
 * (interim ones non-final), body bytes wait in the stream's buffer until
 * nghttp2's data provider frames them (the payload moved into the
 * transport's output without a copy, h2s_send_data_cb), trailer fields
 * become a trailing HEADERS, the end END_STREAM after what is buffered,
 * an abort RST_STREAM.  A stream's buffer is bounded: the sink is full at
 * hc_out_high (or when every stream together holds hc_conn_out_high) and
 * the owner hears on_drain once it has room again.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "gw.h"
#include "h2s_int.h"

/* Fields HTTP/2 forbids in a message (RFC 9113 section 8.2.2). */
static int
h2s_field_forbidden(const struct hfield *f)
{
	static const char *const names[] = { "connection", "keep-alive",
		"proxy-connection", "transfer-encoding", "upgrade" };
	size_t i;

	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (f->name_len == strlen(names[i]) &&
		    strncasecmp(f->name, names[i], f->name_len) == 0)
			return (1);
	}
	/* TE may only say "trailers". */
	if (f->name_len == 2 && strncasecmp(f->name, "te", 2) == 0)
		return (f->value_len != 8 ||
		    strncasecmp(f->value, "trailers", 8) != 0);
	/* The length is said from the head's own (HEAD_F_LENGTH). */
	if (f->name_len == 14 && strncasecmp(f->name, "content-length", 14) == 0)
		return (1);
	return (0);
}

/*
 * The fields f as nghttp2 name/value pairs, names lower-cased, after
 * first (the pseudo-headers, nfirst of them); one allocation holds the
 * array and the names (and with copy the values too: fields the caller
 * keeps only for the call), which nghttp2 copies when the frame is
 * submitted.  *np says how many.
 */
nghttp2_nv *
h2s_nv(const nghttp2_nv *first, size_t nfirst, const struct hfield *f,
    size_t n, int copy, size_t *np)
{
	nghttp2_nv *nv;
	size_t i, j, bytes = 0, k = 0;
	uint8_t *p;

	for (i = 0; i < n; i++)
		bytes += f[i].name_len + (copy ? f[i].value_len : 0);
	nv = xmalloc((nfirst + n) * sizeof *nv + bytes + 1);
	p = (uint8_t *)(nv + nfirst + n);
	for (i = 0; i < nfirst; i++)
		nv[k++] = first[i];
	for (i = 0; i < n; i++) {
		if (h2s_field_forbidden(&f[i]))
			continue;
		for (j = 0; j < f[i].name_len; j++)
			p[j] = (uint8_t)tolower((unsigned char)f[i].name[j]);
		nv[k].name = p;
		nv[k].namelen = f[i].name_len;
		p += f[i].name_len;
		if (copy) {
			memcpy(p, f[i].value, f[i].value_len);
			nv[k].value = p;
			p += f[i].value_len;
		} else
			nv[k].value = (uint8_t *)(uintptr_t)f[i].value;
		nv[k].valuelen = f[i].value_len;
		nv[k].flags = NGHTTP2_NV_FLAG_NONE;
		k++;
	}
	*np = k;
	return (nv);
}

/* Can the stream still be answered? */
static int
h2s_sink_live(const struct h2s_stream *st)
{
	return (st->st_h->h_state < H2S_S_CLOSING &&
	    !(st->st_flags & (ST_F_CLOSED | ST_F_OURRST | ST_F_END |
		ST_F_ABORT)));
}

/*
 * nghttp2 asks for DATA: as much of the buffer as it may send, by
 * reference (NO_COPY: h2s_send_data_cb moves the bytes); at the end of
 * what the owner ended, END_STREAM, or the trailers instead.
 */
static ssize_t
h2s_read_data_cb(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
    uint32_t *flags, nghttp2_data_source *src, void *arg)
{
	struct h2s_stream *st = src->ptr;
	size_t n = evbuffer_get_length(st->st_out);

	(void)buf;
	(void)arg;
	if (n > length)
		n = length;
	if (n == evbuffer_get_length(st->st_out) && (st->st_flags & ST_F_END)) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		if (st->st_flags & ST_F_TRAILERS) {
			*flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
			if (nghttp2_submit_trailer(ng, id, st->st_tr, st->st_ntr) !=
			    0)
				*flags &= ~NGHTTP2_DATA_FLAG_NO_END_STREAM;
		}
	} else if (n == 0)
		return (NGHTTP2_ERR_DEFERRED);
	if (n > 0)
		*flags |= NGHTTP2_DATA_FLAG_NO_COPY;
	return ((ssize_t)n);
}

/*
 * Send a DATA frame nghttp2 framed: its header, then the payload moved
 * from the stream's buffer into the transport's output (no copy for whole
 * chains), padding if any.
 */
int
h2s_send_data_cb(nghttp2_session *ng, nghttp2_frame *fr,
    const uint8_t *framehd, size_t length, nghttp2_data_source *src,
    void *arg)
{
	struct h2s *h = arg;
	struct h2s_stream *st = src->ptr;
	struct evbuffer *out = h->h_x->hx_out;
	size_t pad = fr->data.padlen;
	uint8_t zero[256];

	(void)ng;
	if (h->h_state < H2S_S_CLOSING && h2s_out_blocked(h))
		return (NGHTTP2_ERR_WOULDBLOCK);
	evbuffer_add(out, framehd, 9);
	if (pad > 0) {
		zero[0] = (uint8_t)(pad - 1);
		evbuffer_add(out, zero, 1);
	}
	if (length > 0) {
		evb_take(st->st_out, out, length);
		h->h_out -= length;
	}
	if (pad > 1) {
		memset(zero, 0, sizeof zero);
		evbuffer_add(out, zero, pad - 1);
	}
	h2s_stream_touch(st);
	return (0);
}

/* A response head: interim (1xx but 101) or final. */
static int
h2s_sink_head(struct sink *sk, const struct head *hd)
{
	struct h2s_stream *st = sk->sk_arg;
	struct h2s *h = st->st_h;
	nghttp2_data_provider dp;
	nghttp2_nv first[2], *nv;
	char status[4], len[24];
	size_t n, nfirst = 0;
	int rv, nobody;

	if (!h2s_sink_live(st) || (st->st_flags & ST_F_RESP))
		return (-1);
	if (hd->h_status < 100 || hd->h_status > 999 || hd->h_status == 101)
		return (-1);
	snprintf(status, sizeof status, "%d", hd->h_status);
	first[nfirst].name = (uint8_t *)(uintptr_t)":status";
	first[nfirst].namelen = 7;
	first[nfirst].value = (uint8_t *)status;
	first[nfirst].valuelen = strlen(status);
	first[nfirst++].flags = NGHTTP2_NV_FLAG_NONE;
	if (hd->h_status >= 200 && (hd->h_flags & HEAD_F_LENGTH) &&
	    hd->h_status != 204) {
		snprintf(len, sizeof len, "%llu",
		    (unsigned long long)hd->h_length);
		first[nfirst].name = (uint8_t *)(uintptr_t)"content-length";
		first[nfirst].namelen = 14;
		first[nfirst].value = (uint8_t *)len;
		first[nfirst].valuelen = strlen(len);
		first[nfirst++].flags = NGHTTP2_NV_FLAG_NONE;
	}
	nv = h2s_nv(first, nfirst, hd->h_fields, hd->h_nfields, 0, &n);
	if (hd->h_status < 200) {
		rv = nghttp2_submit_headers(h->h_ng, NGHTTP2_FLAG_NONE,
		    st->st_id, NULL, nv, n, NULL);
	} else {
		nobody = (hd->h_flags & HEAD_F_NO_BODY) ||
		    (st->st_flags & ST_F_HEAD_REQ) || hd->h_status == 204 ||
		    hd->h_status == 304;
		st->st_flags |= ST_F_RESP;
		if (nobody) {
			rv = nghttp2_submit_response(
			    h->h_ng, st->st_id, nv, n, NULL);
		} else {
			st->st_flags |= ST_F_DATA;
			dp.source.ptr = st;
			dp.read_callback = h2s_read_data_cb;
			rv = nghttp2_submit_response(
			    h->h_ng, st->st_id, nv, n, &dp);
		}
	}
	free(nv);
	if (rv != 0) {
		log_debug("h2 stream %d: cannot submit a head: %s",
		    (int)st->st_id, nghttp2_strerror(rv));
		return (-1);
	}
	h2s_stream_touch(st);
	h2s_kick(h);
	return (0);
}

/* Is the stream's sink full? Then it says so until it is not. */
static int
h2s_sink_full(struct h2s_stream *st)
{
	struct h2s *h = st->st_h;

	if (evbuffer_get_length(st->st_out) < h2s_out_high(h) &&
	    h->h_out < h2s_conn_high(h))
		return (0);
	if (!(st->st_flags & ST_F_FULL)) {
		st->st_flags |= ST_F_FULL;
		h->h_nfull++;
	}
	return (1);
}

/* len body bytes from the front of buf into the stream's buffer. */
static int
h2s_sink_body(struct sink *sk, struct evbuffer *buf, size_t len)
{
	struct h2s_stream *st = sk->sk_arg;
	struct h2s *h = st->st_h;

	if (!h2s_sink_live(st) || !(st->st_flags & ST_F_RESP)) {
		evbuffer_drain(buf, len);
		return (-1);
	}
	if (!(st->st_flags & ST_F_DATA)) {
		evbuffer_drain(buf, len); /* HEAD's answer, 204, 304 */
		return (0);
	}
	if (len == 0)
		return (0);
	evb_take(buf, st->st_out, len);
	h->h_out += len;
	(void)h2s_sink_full(st);
	nghttp2_session_resume_data(h->h_ng, st->st_id);
	h2s_kick(h);
	return (0);
}

/* Trailer fields: a HEADERS frame after the last DATA. */
static int
h2s_sink_trailers(struct sink *sk, const struct hfield *f, size_t n)
{
	struct h2s_stream *st = sk->sk_arg;
	nghttp2_nv *nv;
	size_t k;

	if (!h2s_sink_live(st) || !(st->st_flags & ST_F_DATA) ||
	    (st->st_flags & ST_F_TRAILERS) || n == 0)
		return (h2s_sink_live(st) ? 0 : -1);
	/* Names and values: the fields are the caller's for this call. */
	nv = h2s_nv(NULL, 0, f, n, 1, &k);
	st->st_tr = nv;
	st->st_ntr = k;
	st->st_flags |= ST_F_TRAILERS;
	return (0);
}

/* The response is complete: END_STREAM after what is buffered. */
static int
h2s_sink_end(struct sink *sk)
{
	struct h2s_stream *st = sk->sk_arg;
	struct h2s *h = st->st_h;

	if (!h2s_sink_live(st))
		return (-1);
	st->st_flags |= ST_F_END;
	if (st->st_flags & ST_F_DATA)
		nghttp2_session_resume_data(h->h_ng, st->st_id);
	h2s_kick(h);
	return (0);
}

/*
 * Body bytes the stream takes before it is full.  A 0 is a promise as
 * the sink contract has it: the stream is marked full, so that its owner
 * hears on_drain when it has room again, even when it is full only
 * because other streams filled the connection.
 */
static size_t
h2s_sink_room(const struct sink *sk)
{
	struct h2s_stream *st = sk->sk_arg;
	struct h2s *h = st->st_h;
	size_t b = evbuffer_get_length(st->st_out), hi = h2s_out_high(h);

	if (!h2s_sink_live(st) || h2s_sink_full(st))
		return (0);
	return (hi - b);
}

/* The response cannot be completed: reset the stream. */
static void
h2s_sink_abort(struct sink *sk, const char *why)
{
	struct h2s_stream *st = sk->sk_arg;

	if (st->st_flags & ST_F_ABORT)
		return;
	log_debug("h2 stream %d: response cut: %s", (int)st->st_id, why);
	st->st_flags |= ST_F_ABORT;
	if (st->st_h->h_state < H2S_S_CLOSING)
		h2s_stream_reset(st, NGHTTP2_INTERNAL_ERROR);
}

const struct sink_ops h2s_sink_ops = {
	.so_head = h2s_sink_head,
	.so_body = h2s_sink_body,
	.so_trailers = h2s_sink_trailers,
	.so_end = h2s_sink_end,
	.so_room = h2s_sink_room,
	.so_abort = h2s_sink_abort,
};
