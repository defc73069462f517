/*
 * HTTP/2 to an https:// target that picked h2 in ALPN (RFC 9113), on
 * nghttp2. One connection (struct tun_h2) carries the streams of many
 * exchanges, each a struct tun_target with TT_F_H2 that target.c hands to
 * the exchange like an HTTP/1.1 connection: a request head submitted with
 * a deferred data provider fed from tt_out, a response head collected into
 * an http1_msg, and a body read from tt_in.
 *
 * Flow control follows the tunnel's credits. nghttp2 does not send
 * WINDOW_UPDATE by itself (nghttp2_option_set_no_auto_window_update):
 * received body bytes are consumed only as the exchange reads them to send
 * them on to the gateway, so a slow sandbox stops the target after one
 * stream window (TUN_H2_STREAM_WINDOW) instead of growing a buffer here.
 *
 * nghttp2's callbacks only record what happened on the stream and put it
 * on h_notes; once the input is processed (or the frames are sent) each
 * noted exchange is told, outside nghttp2, so an exchange may end its
 * stream from there.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <nghttp2/nghttp2.h>

#include "alloc.h"
#include "clock.h"
#include "evb.h"
#include "stream.h"
#include "strbuf.h"
#include "tun.h"

static void target_h2_send(struct tun_h2 *);
static void target_h2_fail(struct tun_h2 *, const char *);

/* Connections opened, for logs. */
static uint64_t target_h2_serial;

/* Send what nghttp2 has queued, from the loop. */
static void
target_h2_kick(struct tun_h2 *h)
{
	if (h->h_state != H2_S_DEAD)
		event_active(h->h_send, EV_TIMEOUT, 0);
}

/* Tell tt's exchange about its stream once nghttp2 has returned. */
static void
target_h2_note(struct tun_target *tt)
{
	struct tun_h2 *h = tt->tt_h2;

	if (h == NULL || (tt->tt_flags & TT_F_H2_NOTE))
		return;
	tt->tt_flags |= TT_F_H2_NOTE;
	TAILQ_INSERT_TAIL(&h->h_notes, tt, tt_note_entry);
}

/*
 * Arm tt's timer while it waits for the target (YR_TUNNEL_HTTP_TIMEOUT
 * without a byte, as an HTTP/1.1 connection's read timeout), stop it while
 * the wait is the sandbox's (body bytes not read yet) or the stream ended.
 */
static void
target_h2_progress(struct tun_target *tt)
{
	struct timeval tv;

	if (tt->tt_timer == NULL)
		return;
	if ((tt->tt_flags & TT_F_H2_END) || tt->tt_why != NULL ||
	    evbuffer_get_length(tt->tt_in) != 0 || tt->tt_x == NULL) {
		evtimer_del(tt->tt_timer);
		return;
	}
	clock_msec_to_tv(
	    (uint64_t)(tt->tt_tun->t_opts->http_timeout * 1000), &tv);
	evtimer_add(tt->tt_timer, &tv);
}

/* Tell each noted stream's exchange: failed, or readable and writable. */
static void
target_h2_tell(struct tun_h2 *h)
{
	struct tun_target *tt;
	struct tun_xchg *x;

	while ((tt = TAILQ_FIRST(&h->h_notes)) != NULL) {
		TAILQ_REMOVE(&h->h_notes, tt, tt_note_entry);
		tt->tt_flags &= ~TT_F_H2_NOTE;
		if ((x = tt->tt_x) == NULL || tt->tt_state != TT_S_BUSY)
			continue;
		if (tt->tt_why != NULL) {
			/* Only a refused stream is safe to try again. */
			if (tt->tt_flags & TT_F_H2_REFUSED)
				x->x_flags |= TX_F_REUSED;
			else
				x->x_flags &= ~TX_F_REUSED;
			xchg_target_failed(x, tt->tt_why);
			continue;
		}
		xchg_target_writable(x);
		if (tt->tt_x == x && tt->tt_state == TT_S_BUSY)
			xchg_target_readable(x);
	}
}

/* The stream of tt failed for a reason the formatted sentence says. */
static void __attribute__((format(printf, 2, 3)))
target_h2_stream_failed(struct tun_target *tt, const char *fmt, ...)
{
	va_list ap;

	if (tt->tt_why != NULL)
		return;
	va_start(ap, fmt);
	xvasprintf(&tt->tt_why, fmt, ap);
	va_end(ap);
	target_h2_note(tt);
}

/* A response header field (or pseudo-header) arrived. */
static int
target_h2_header_cb(nghttp2_session *sess, const nghttp2_frame *frame,
    const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen,
    uint8_t flags, void *arg)
{
	struct tun_target *tt;
	struct strbuf *sb;
	size_t i;

	(void)flags;
	(void)arg;
	if (frame->hd.type != NGHTTP2_HEADERS)
		return (0);
	tt = nghttp2_session_get_stream_user_data(sess, frame->hd.stream_id);
	/* Trailers: the tunnel protocol has no place for them. */
	if (tt == NULL || (tt->tt_flags & TT_F_H2_HEAD) || tt->tt_why != NULL)
		return (0);
	if (nlen == 7 && memcmp(name, ":status", 7) == 0) {
		/* nghttp2 checked: three digits. */
		tt->tt_status = 0;
		for (i = 0; i < vlen; i++)
			tt->tt_status = tt->tt_status * 10 + (value[i] - '0');
		return (0);
	}
	if (nlen != 0 && name[0] == ':')
		return (0);
	sb = tt->tt_fields;
	if (sb->sb_len + nlen + vlen + 2 > TUN_HEAD_MAX ||
	    tt->tt_nfields >= TUN_HEAD_FIELDS_MAX) {
		target_h2_stream_failed(tt,
		    "malformed response from the target: the HTTP/2 "
		    "response head is too large");
		return (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE);
	}
	strbuf_add(sb, name, nlen);
	strbuf_add(sb, "", 1);
	strbuf_add(sb, value, vlen);
	strbuf_add(sb, "", 1);
	tt->tt_nfields++;
	return (0);
}

/* A whole frame arrived: heads, ends of streams, GOAWAY, RST_STREAM. */
static int
target_h2_frame_cb(nghttp2_session *sess, const nghttp2_frame *frame, void *arg)
{
	struct tun_h2 *h = arg;
	struct tun_target *tt = NULL;
	uint32_t code;

	if (frame->hd.stream_id != 0)
		tt = nghttp2_session_get_stream_user_data(
		    sess, frame->hd.stream_id);
	switch (frame->hd.type) {
	case NGHTTP2_HEADERS:
		if (tt == NULL)
			break;
		if (!(tt->tt_flags & TT_F_H2_HEAD)) {
			if (tt->tt_status >= 100 && tt->tt_status < 200) {
				/* Interim: the final head follows. */
				strbuf_reset(tt->tt_fields);
				tt->tt_nfields = 0;
				tt->tt_status = 0;
				break;
			}
			tt->tt_flags |= TT_F_H2_HEAD;
		}
		if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
			tt->tt_flags |= TT_F_H2_END;
		target_h2_progress(tt);
		target_h2_note(tt);
		break;
	case NGHTTP2_DATA:
		if (tt != NULL && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
			tt->tt_flags |= TT_F_H2_END;
			target_h2_progress(tt);
			target_h2_note(tt);
		}
		break;
	case NGHTTP2_RST_STREAM:
		code = frame->rst_stream.error_code;
		if (tt != NULL && !(tt->tt_flags & TT_F_H2_END)) {
			if (code == NGHTTP2_REFUSED_STREAM)
				tt->tt_flags |= TT_F_H2_REFUSED;
			target_h2_stream_failed(tt,
			    "the target reset the HTTP/2 stream: %s (0x%x)",
			    nghttp2_http2_strerror(code), code);
		}
		break;
	case NGHTTP2_SETTINGS:
		if (!(frame->hd.flags & NGHTTP2_FLAG_ACK))
			h->h_flags |= H2_F_SETTINGS;
		break;
	case NGHTTP2_GOAWAY:
		if (h->h_state == H2_S_OPEN)
			h->h_state = H2_S_DRAINING;
		code = frame->goaway.error_code;
		if (code != NGHTTP2_NO_ERROR && h->h_goaway == NULL)
			xasprintf(&h->h_goaway,
			    "the target sent HTTP/2 GOAWAY: %s (0x%x)",
			    nghttp2_http2_strerror(code), code);
		log_debug("target HTTP/2 connection %llu: GOAWAY %s, last "
			  "stream %d",
		    (unsigned long long)h->h_serial,
		    nghttp2_http2_strerror(code), frame->goaway.last_stream_id);
		break;
	default:
		break;
	}
	return (0);
}

/*
 * Response body bytes: kept in tt_in, the window still closed over them
 * until the exchange reads them. Bytes for a stream nobody wants any more
 * give their window back at once.
 */
static int
target_h2_data_cb(nghttp2_session *sess, uint8_t flags, int32_t sid,
    const uint8_t *data, size_t len, void *arg)
{
	struct tun_target *tt;

	(void)flags;
	(void)arg;
	tt = nghttp2_session_get_stream_user_data(sess, sid);
	if (tt == NULL) {
		nghttp2_session_consume(sess, sid, len);
		return (0);
	}
	evbuffer_add(tt->tt_in, data, len);
	target_h2_progress(tt);
	target_h2_note(tt);
	return (0);
}

/* nghttp2 closed a stream: fine after its end, else a failure. */
static int
target_h2_close_cb(nghttp2_session *sess, int32_t sid, uint32_t code, void *arg)
{
	struct tun_target *tt;

	(void)arg;
	tt = nghttp2_session_get_stream_user_data(sess, sid);
	if (tt == NULL)
		return (0);
	tt->tt_flags |= TT_F_H2_CLOSED;
	if (tt->tt_flags & TT_F_H2_END) {
		target_h2_note(tt);
		return (0);
	}
	if (code == NGHTTP2_REFUSED_STREAM) {
		/* Above a GOAWAY's last stream: the target never saw it. */
		tt->tt_flags |= TT_F_H2_REFUSED;
		target_h2_stream_failed(tt,
		    "the target refused the HTTP/2 stream: %s (0x%x)",
		    nghttp2_http2_strerror(code), code);
	} else if (code != NGHTTP2_NO_ERROR)
		target_h2_stream_failed(tt,
		    "the HTTP/2 stream to the target failed: %s (0x%x)",
		    nghttp2_http2_strerror(code), code);
	else
		target_h2_stream_failed(tt,
		    "the target closed the HTTP/2 stream without a complete "
		    "response");
	return (0);
}

/*
 * nghttp2 wants request body bytes for a stream: what tt_out holds, the
 * end once the exchange said so, or "later" (resumed when bytes come).
 */
static ssize_t
target_h2_body_cb(nghttp2_session *sess, int32_t sid, uint8_t *buf,
    size_t length, uint32_t *data_flags, nghttp2_data_source *src, void *arg)
{
	struct tun_target *tt;
	size_t before, n;

	(void)src;
	(void)arg;
	tt = nghttp2_session_get_stream_user_data(sess, sid);
	if (tt == NULL)
		return (NGHTTP2_ERR_DEFERRED);
	before = evbuffer_get_length(tt->tt_out);
	n = before < length ? before : length;
	if (n != 0)
		evbuffer_remove(tt->tt_out, buf, n);
	if (before == n && (tt->tt_flags & TT_F_H2_REQ_END))
		*data_flags |= NGHTTP2_DATA_FLAG_EOF;
	else if (n == 0)
		return (NGHTTP2_ERR_DEFERRED);
	/* The window moved: the target is reading. */
	target_h2_progress(tt);
	if (before >= TUN_TARGET_WRITE_LOWAT &&
	    before - n < TUN_TARGET_WRITE_LOWAT)
		target_h2_note(tt);
	return ((ssize_t)n);
}

/* The exchange added request body bytes: let nghttp2 take them. */
static void
target_h2_out_cb(
    struct evbuffer *b, const struct evbuffer_cb_info *info, void *arg)
{
	struct tun_target *tt = arg;

	(void)b;
	if (info->n_added == 0 || tt->tt_h2 == NULL || tt->tt_sid <= 0 ||
	    (tt->tt_flags & TT_F_H2_CLOSED))
		return;
	nghttp2_session_resume_data(tt->tt_h2->h_sess, tt->tt_sid);
	target_h2_kick(tt->tt_h2);
}

/* No progress on the stream for YR_TUNNEL_HTTP_TIMEOUT. */
static void
target_h2_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_target *tt = arg;
	char why[128];

	(void)fd;
	(void)what;
	if (tt->tt_state != TT_S_BUSY || tt->tt_x == NULL)
		return;
	snprintf(why, sizeof why, "timed out waiting for the target (%g s)",
	    tt->tt_tun->t_opts->http_timeout);
	xchg_target_failed(tt->tt_x, why);
}

/* Make tt a stream on h. */
static void
target_h2_stream_init(struct tun_target *tt, struct tun_h2 *h)
{
	tt->tt_flags |= TT_F_H2;
	tt->tt_state = TT_S_BUSY;
	tt->tt_h2 = h;
	if ((tt->tt_in = evbuffer_new()) == NULL ||
	    (tt->tt_out = evbuffer_new()) == NULL)
		abort();
	evbuffer_add_cb(tt->tt_out, target_h2_out_cb, tt);
	tt->tt_fields = xcalloc(1, sizeof *tt->tt_fields);
	if ((tt->tt_timer = evtimer_new(
		 tt->tt_tun->t_base, target_h2_timer_cb, tt)) == NULL)
		abort();
	TAILQ_INSERT_TAIL(&h->h_streams, tt, tt_h2_entry);
	h->h_nstreams++;
	evtimer_del(h->h_idle);
}

/*
 * An HTTP/2 connection with room for one more stream: open, below the
 * server's SETTINGS_MAX_CONCURRENT_STREAMS and TUN_H2_STREAMS_MAX.
 */
struct tun_h2 *
target_h2_room(struct tun *t)
{
	struct tun_h2 *h;
	uint32_t max;

	TAILQ_FOREACH (h, &t->t_h2s, h_entry) {
		if (h->h_state != H2_S_OPEN || !(h->h_flags & H2_F_SETTLED))
			continue;
		max = nghttp2_session_get_remote_settings(
		    h->h_sess, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
		if (max > TUN_H2_STREAMS_MAX)
			max = TUN_H2_STREAMS_MAX;
		if (h->h_nstreams < max)
			return (h);
	}
	return (NULL);
}

/* A stream on h for x; x hears "ready" from the loop. */
void
target_h2_attach(struct tun_h2 *h, struct tun_xchg *x)
{
	struct tun_target *tt;

	tt = target_new(h->h_tun, x);
	target_h2_stream_init(tt, h);
	target_ready_later(tt);
}

/*
 * The exchange is done with stream tt (target_close): reset it if it is
 * still open, give back the window of what it left unread, and leave the
 * connection to the others (idle when it was the last).
 */
void
target_h2_detach(struct tun_target *tt)
{
	struct tun_h2 *h = tt->tt_h2;
	struct timeval tv = { TUN_POOL_IDLE_TIMEOUT, 0 };
	size_t left = evbuffer_get_length(tt->tt_in);

	if (tt->tt_timer != NULL)
		evtimer_del(tt->tt_timer);
	if (h == NULL)
		return;
	tt->tt_h2 = NULL;
	if (tt->tt_flags & TT_F_H2_NOTE) {
		TAILQ_REMOVE(&h->h_notes, tt, tt_note_entry);
		tt->tt_flags &= ~TT_F_H2_NOTE;
	}
	TAILQ_REMOVE(&h->h_streams, tt, tt_h2_entry);
	h->h_nstreams--;
	if (h->h_state == H2_S_DEAD)
		return;
	if (tt->tt_sid > 0 && !(tt->tt_flags & TT_F_H2_CLOSED)) {
		nghttp2_session_set_stream_user_data(
		    h->h_sess, tt->tt_sid, NULL);
		nghttp2_submit_rst_stream(h->h_sess, NGHTTP2_FLAG_NONE,
		    tt->tt_sid,
		    (tt->tt_flags & TT_F_H2_END) ? NGHTTP2_NO_ERROR
						 : NGHTTP2_CANCEL);
		if (left != 0)
			nghttp2_session_consume(h->h_sess, tt->tt_sid, left);
	} else if (left != 0)
		nghttp2_session_consume_connection(h->h_sess, left);
	evbuffer_drain(tt->tt_in, left);
	if (h->h_nstreams == 0 && h->h_state == H2_S_OPEN)
		evtimer_add(h->h_idle, &tv);
	target_h2_kick(h);
}

/* Free what a stream holds besides the struct (target.c frees that). */
void
target_h2_free_stream(struct tun_target *tt)
{
	if (tt->tt_in != NULL)
		evbuffer_free(tt->tt_in);
	if (tt->tt_out != NULL)
		evbuffer_free(tt->tt_out);
	if (tt->tt_fields != NULL) {
		strbuf_free(tt->tt_fields);
		free(tt->tt_fields);
	}
	if (tt->tt_timer != NULL)
		event_free(tt->tt_timer);
	free(tt->tt_why);
}

/* Is the header field name one HTTP/2 leaves out (RFC 9113 8.2.2)? */
static int
target_h2_dropped(const char *name, const char *value)
{
	static const char *const dropped[] = { "host", "connection",
		"keep-alive", "proxy-connection", "transfer-encoding",
		"upgrade", NULL };
	const char *const *d;

	for (d = dropped; *d != NULL; d++) {
		if (strcmp(name, *d) == 0)
			return (1);
	}
	return (strcmp(name, "te") == 0 && strcasecmp(value, "trailers") != 0);
}

/* Point nv at name and value. */
static void
target_h2_nv(nghttp2_nv *nv, const char *name, size_t nlen, const char *value,
    size_t vlen)
{
	nv->name = (uint8_t *)(uintptr_t)name;
	nv->namelen = nlen;
	nv->value = (uint8_t *)(uintptr_t)value;
	nv->valuelen = vlen;
	nv->flags = NGHTTP2_NV_FLAG_NONE;
}

/*
 * Submit the request of head (target_request_head's HTTP/1.1 head, built
 * and checked by us) as an HTTP/2 HEADERS frame on tt: :method, :scheme,
 * :authority from Host, :path, the other fields with lowercase names but
 * the connection-specific ones. With body, DATA follows from tt_out.
 * Returns -1 with *err when the connection cannot take it.
 */
int
target_h2_submit(
    struct tun_target *tt, struct evbuffer *head, int body, char **err)
{
	struct tun_h2 *h = tt->tt_h2;
	nghttp2_data_provider prd;
	nghttp2_nv *nv;
	size_t len = evbuffer_get_length(head), nnv = 4, max, vlen;
	char *buf, *line, *next, *sp, *colon, *value, *end, *p;
	int32_t sid;

	if (h == NULL || h->h_state == H2_S_DEAD) {
		xasprintf(err, "the HTTP/2 connection to the target is gone");
		return (-1);
	}
	buf = xmalloc(len + 1);
	memcpy(buf, evbuffer_pullup(head, -1), len);
	buf[len] = '\0';
	max = 4;
	for (p = buf; (p = strstr(p, "\r\n")) != NULL; p += 2)
		max++;
	nv = xcalloc(max, sizeof *nv);

	/* The request line: METHOD SP target SP HTTP/1.1. */
	line = buf;
	next = strstr(line, "\r\n");
	*next = '\0';
	sp = strchr(line, ' ');
	*sp = '\0';
	end = strchr(sp + 1, ' ');
	*end = '\0';
	target_h2_nv(&nv[0], ":method", 7, line, strlen(line));
	target_h2_nv(&nv[1], ":scheme", 7, "https", 5);
	target_h2_nv(&nv[2], ":authority", 10, "", 0);
	target_h2_nv(&nv[3], ":path", 5, sp + 1, strlen(sp + 1));
	for (line = next + 2; *line != '\0'; line = next + 2) {
		next = strstr(line, "\r\n");
		*next = '\0';
		if (*line == '\0')
			break;
		colon = strchr(line, ':');
		*colon = '\0';
		for (p = line; *p != '\0'; p++) {
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		}
		/* No whitespace around a value in HTTP/2 (8.2.1). */
		value = colon + 1;
		while (*value == ' ' || *value == '\t')
			value++;
		vlen = strlen(value);
		while (vlen > 0 &&
		    (value[vlen - 1] == ' ' || value[vlen - 1] == '\t'))
			value[--vlen] = '\0';
		if (strcmp(line, "host") == 0) {
			target_h2_nv(&nv[2], ":authority", 10, value, vlen);
			continue;
		}
		if (target_h2_dropped(line, value))
			continue;
		target_h2_nv(&nv[nnv++], line, strlen(line), value, vlen);
	}

	memset(&prd, 0, sizeof prd);
	prd.source.ptr = tt;
	prd.read_callback = target_h2_body_cb;
	if (body)
		tt->tt_flags |= TT_F_H2_BODY;
	sid = nghttp2_submit_request(
	    h->h_sess, NULL, nv, nnv, body ? &prd : NULL, tt);
	free(nv);
	free(buf);
	if (sid < 0) {
		if (sid == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE)
			h->h_state = H2_S_DRAINING;
		xasprintf(err, "cannot send the request over HTTP/2: %s",
		    nghttp2_strerror(sid));
		return (-1);
	}
	tt->tt_sid = sid;
	target_h2_progress(tt);
	target_h2_kick(h);
	return (0);
}

/* The request body is complete: the last DATA frame carries END_STREAM. */
void
target_h2_request_end(struct tun_target *tt)
{
	tt->tt_flags |= TT_F_H2_REQ_END;
	if (tt->tt_h2 == NULL || tt->tt_sid <= 0 ||
	    !(tt->tt_flags & TT_F_H2_BODY) || (tt->tt_flags & TT_F_H2_CLOSED))
		return;
	nghttp2_session_resume_data(tt->tt_h2->h_sess, tt->tt_sid);
	target_h2_kick(tt->tt_h2);
}

/*
 * The response head, as target_read_head: 1 with m filled (lowercase
 * names, as HTTP/2 has them), 0 for more input, -1 with *err.
 */
int
target_h2_read_head(struct tun_target *tt, struct http1_msg *m, char **err)
{
	struct hfield *f;
	const char *p;
	size_t i, size, off;

	if (tt->tt_why != NULL) {
		*err = xstrdup(tt->tt_why);
		return (-1);
	}
	if (!(tt->tt_flags & TT_F_H2_HEAD)) {
		if (tt->tt_flags & (TT_F_H2_END | TT_F_H2_CLOSED)) {
			xasprintf(err,
			    "the target ended the HTTP/2 stream "
			    "without a response");
			return (-1);
		}
		return (0);
	}
	http1_msg_reset(m);
	/* The fields, then their strings, in one block m_buf. */
	off = tt->tt_nfields * sizeof *f;
	size = off + tt->tt_fields->sb_len;
	m->m_buf = xmalloc(size != 0 ? size : 1);
	if (tt->tt_fields->sb_len != 0)
		memcpy(m->m_buf + off, tt->tt_fields->sb_buf,
		    tt->tt_fields->sb_len);
	f = (struct hfield *)(void *)m->m_buf;
	p = m->m_buf + off;
	for (i = 0; i < tt->tt_nfields; i++) {
		f[i].name = p;
		f[i].name_len = strlen(p);
		p += f[i].name_len + 1;
		f[i].value = p;
		f[i].value_len = strlen(p);
		p += f[i].value_len + 1;
	}
	m->m_headers = f;
	m->m_nheaders = tt->tt_nfields;
	m->m_status = tt->tt_status;
	m->m_reason = "";
	m->m_minor = 1;
	m->m_body = HTTP1_BODY_EOF;
	strbuf_free(tt->tt_fields);
	tt->tt_nfields = 0;
	tt->tt_flags |= TT_F_BODY;
	return (1);
}

/* Fewer than want body bytes here, with more to come? */
int
target_h2_body_short(struct tun_target *tt, size_t want)
{
	if (tt->tt_why != NULL || (tt->tt_flags & TT_F_H2_END))
		return (0);
	return (evbuffer_get_length(tt->tt_in) < want);
}

/*
 * Move at most max body bytes to out, as target_read_body, and open the
 * window by as many: the target may send that much again.
 */
int
target_h2_read_body(struct tun_target *tt, struct evbuffer *out, size_t max,
    size_t *moved, char **err)
{
	struct tun_h2 *h = tt->tt_h2;
	size_t n = evbuffer_get_length(tt->tt_in);

	*moved = 0;
	if (tt->tt_flags & TT_F_BODY_DONE)
		return (1);
	if (tt->tt_why != NULL) {
		*err = xstrdup(tt->tt_why);
		return (-1);
	}
	if (n > max)
		n = max;
	if (n != 0) {
		evb_take(tt->tt_in, out, n);
		*moved = n;
		if (h != NULL && h->h_state != H2_S_DEAD) {
			if (tt->tt_flags & TT_F_H2_CLOSED)
				nghttp2_session_consume_connection(
				    h->h_sess, n);
			else
				nghttp2_session_consume(
				    h->h_sess, tt->tt_sid, n);
			target_h2_kick(h);
		}
	}
	if ((tt->tt_flags & TT_F_H2_END) &&
	    evbuffer_get_length(tt->tt_in) == 0) {
		tt->tt_flags |= TT_F_BODY_DONE;
		return (1);
	}
	/* A stream closed before its end has tt_why (target_h2_close_cb). */
	target_h2_progress(tt);
	return (0);
}

/* Free a dead connection's memory, from the loop. */
static void
target_h2_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_h2 *h = arg;

	(void)fd;
	(void)what;
	event_free(h->h_send);
	event_free(h->h_idle);
	free(h->h_goaway);
	free(h);
}

/*
 * End connection h for why: the one way each ends. Its streams that have
 * not had their whole response fail with why (the target's GOAWAY if it
 * sent one); the others keep what they received.
 */
static void
target_h2_fail(struct tun_h2 *h, const char *why)
{
	struct tun *t = h->h_tun;
	struct tun_target_list q;
	struct tun_target *tt;
	struct tun_xchg *x;
	char *copy;

	if (h->h_state == H2_S_DEAD)
		return;
	log_debug("target HTTP/2 connection %llu closed: %s",
	    (unsigned long long)h->h_serial, why);
	copy = xstrdup(h->h_goaway != NULL ? h->h_goaway : why);
	h->h_state = H2_S_DEAD;
	TAILQ_REMOVE(&t->t_h2s, h, h_entry);
	t->t_nh2--;
	while ((tt = TAILQ_FIRST(&h->h_notes)) != NULL) {
		TAILQ_REMOVE(&h->h_notes, tt, tt_note_entry);
		tt->tt_flags &= ~TT_F_H2_NOTE;
	}
	TAILQ_INIT(&q);
	while ((tt = TAILQ_FIRST(&h->h_streams)) != NULL) {
		TAILQ_REMOVE(&h->h_streams, tt, tt_h2_entry);
		h->h_nstreams--;
		tt->tt_h2 = NULL;
		if (!(tt->tt_flags & TT_F_H2_END) && tt->tt_why == NULL)
			tt->tt_why = xstrdup(copy);
		TAILQ_INSERT_TAIL(&q, tt, tt_note_entry);
	}
	nghttp2_session_del(h->h_sess);
	h->h_sess = NULL;
	stream_free(h->h_s);
	h->h_s = NULL;
	event_del(h->h_send);
	event_del(h->h_idle);
	if (event_base_once(
		t->t_base, -1, EV_TIMEOUT, target_h2_free_cb, h, NULL) != 0)
		target_h2_free_cb(-1, 0, h);
	/* Streams with their whole response still deliver it. */
	while ((tt = TAILQ_FIRST(&q)) != NULL) {
		TAILQ_REMOVE(&q, tt, tt_note_entry);
		if ((x = tt->tt_x) == NULL || tt->tt_state != TT_S_BUSY)
			continue;
		if (tt->tt_why != NULL) {
			x->x_flags &= ~TX_F_REUSED;
			xchg_target_failed(x, tt->tt_why);
		} else
			xchg_target_readable(x);
	}
	free(copy);
}

/*
 * Write what nghttp2 has to send while the socket's output is below
 * TUN_H2_OUT_HIWAT, then tell the streams the frames moved; close the
 * connection once neither side has anything left to say.
 */
static void
target_h2_send(struct tun_h2 *h)
{
	struct evbuffer *out;
	const uint8_t *data;
	ssize_t n;
	char why[160];

	if (h->h_state == H2_S_DEAD)
		return;
	out = stream_output(h->h_s);
	while (evbuffer_get_length(out) < TUN_H2_OUT_HIWAT) {
		if ((n = nghttp2_session_mem_send(h->h_sess, &data)) < 0) {
			snprintf(why, sizeof why,
			    "the HTTP/2 connection to the target failed: %s",
			    nghttp2_strerror((int)n));
			target_h2_fail(h, why);
			return;
		}
		if (n == 0)
			break;
		evbuffer_add(out, data, (size_t)n);
	}
	target_h2_tell(h);
	if (h->h_state == H2_S_DEAD)
		return;
	if (!nghttp2_session_want_read(h->h_sess) &&
	    !nghttp2_session_want_write(h->h_sess)) {
		stream_flush(h->h_s);
		target_h2_fail(h, "the HTTP/2 connection to the target ended");
	} else if (h->h_state == H2_S_DRAINING && h->h_nstreams == 0) {
		stream_flush(h->h_s);
		target_h2_fail(h, "drained after GOAWAY");
	}
}

/* The deferred send. */
static void
target_h2_send_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	target_h2_send(arg);
}

/* Nothing ran on the connection for TUN_POOL_IDLE_TIMEOUT: say goodbye. */
static void
target_h2_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_h2 *h = arg;

	(void)fd;
	(void)what;
	if (h->h_state != H2_S_OPEN || h->h_nstreams != 0)
		return;
	h->h_state = H2_S_DRAINING;
	nghttp2_session_terminate_session(h->h_sess, NGHTTP2_NO_ERROR);
	target_h2_send(h);
}

/*
 * Once the server's SETTINGS say how many streams it takes, the exchanges
 * that waited for the dial learning the protocol look for a stream.
 */
static void
target_h2_settled(struct tun_h2 *h)
{
	struct tun *t = h->h_tun;

	if (!(h->h_flags & H2_F_SETTINGS) || (h->h_flags & H2_F_SETTLED))
		return;
	h->h_flags |= H2_F_SETTLED;
	if (t->t_probe != NULL && t->t_probe->tt_h2 == h) {
		t->t_probe = NULL;
		target_probe_done(t, NULL);
	}
}

/* Frames from the target. */
static void
target_h2_read_cb(struct stream *s, void *arg)
{
	struct tun_h2 *h = arg;
	struct evbuffer *in = stream_input(s);
	struct evbuffer_iovec v;
	ssize_t rv;
	char why[160];

	if (h->h_state == H2_S_DEAD)
		return;
	while (evbuffer_get_length(in) != 0) {
		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		rv = nghttp2_session_mem_recv(h->h_sess, v.iov_base, v.iov_len);
		if (rv < 0) {
			snprintf(why, sizeof why,
			    "HTTP/2 protocol error from the target: %s",
			    nghttp2_strerror((int)rv));
			/* The GOAWAY nghttp2 queued may still go out. */
			target_h2_send(h);
			target_h2_fail(h, why);
			return;
		}
		evbuffer_drain(in, v.iov_len);
	}
	target_h2_settled(h);
	target_h2_send(h);
}

/* The output drained: more frames. */
static void
target_h2_write_cb(struct stream *s, void *arg)
{
	(void)s;
	target_h2_send(arg);
}

/* End of stream, error or timeout on the connection. */
static void
target_h2_event_cb(struct stream *s, short what, void *arg)
{
	struct tun_h2 *h = arg;
	char why[192];

	if (h->h_state == H2_S_DEAD)
		return;
	if (what & STREAM_EV_EOF)
		snprintf(why, sizeof why,
		    "the target closed the HTTP/2 connection without a "
		    "complete response");
	else if (what & STREAM_EV_TIMEOUT)
		snprintf(why, sizeof why,
		    "timed out waiting for the target (%g s)",
		    h->h_tun->t_opts->http_timeout);
	else
		snprintf(why, sizeof why,
		    "the HTTP/2 connection to the target failed: %s",
		    evutil_socket_error_to_string(stream_errno(s)));
	target_h2_fail(h, why);
}

/*
 * The TLS handshake of tt picked h2: its stream becomes an HTTP/2
 * connection, and tt (with its exchange, if it still has one) the first
 * stream on it.
 */
void
target_h2_adopt(struct tun_target *tt)
{
	struct tun *t = tt->tt_tun;
	nghttp2_session_callbacks *cbs;
	nghttp2_option *opt;
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, TUN_H2_STREAM_WINDOW },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, TUN_HEAD_MAX },
	};
	struct tun_h2 *h;

	h = xcalloc(1, sizeof *h);
	h->h_tun = t;
	h->h_state = H2_S_OPEN;
	h->h_serial = ++target_h2_serial;
	TAILQ_INIT(&h->h_streams);
	TAILQ_INIT(&h->h_notes);
	if ((h->h_send = event_new(t->t_base, -1, 0, target_h2_send_cb, h)) ==
		NULL ||
	    (h->h_idle = evtimer_new(t->t_base, target_h2_idle_cb, h)) == NULL)
		abort();
	h->h_s = tt->tt_s;
	tt->tt_s = NULL;
	stream_setcb(h->h_s, target_h2_read_cb, target_h2_write_cb,
	    target_h2_event_cb, h);
	/* Each stream keeps its own time (target_h2_progress). */
	stream_set_timeouts(h->h_s, NULL, NULL);
	stream_enable(h->h_s, EV_READ);

	if (nghttp2_session_callbacks_new(&cbs) != 0 ||
	    nghttp2_option_new(&opt) != 0)
		abort();
	nghttp2_session_callbacks_set_on_header_callback(
	    cbs, target_h2_header_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(
	    cbs, target_h2_frame_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
	    cbs, target_h2_data_cb);
	nghttp2_session_callbacks_set_on_stream_close_callback(
	    cbs, target_h2_close_cb);
	nghttp2_option_set_no_auto_window_update(opt, 1);
	if (nghttp2_session_client_new2(&h->h_sess, cbs, h, opt) != 0)
		abort();
	nghttp2_option_del(opt);
	nghttp2_session_callbacks_del(cbs);
	nghttp2_submit_settings(
	    h->h_sess, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
	nghttp2_session_set_local_window_size(
	    h->h_sess, NGHTTP2_FLAG_NONE, 0, TUN_H2_CONN_WINDOW);
	TAILQ_INSERT_TAIL(&t->t_h2s, h, h_entry);
	t->t_nh2++;
	log_debug("target HTTP/2 connection %llu open",
	    (unsigned long long)h->h_serial);

	target_h2_stream_init(tt, h);
	if (tt->tt_x != NULL)
		xchg_target_ready(tt->tt_x);
	else
		target_close(tt, "nobody waits for it");
	target_h2_send(h);
}

/* Free every HTTP/2 connection now (their streams are gone already). */
void
target_h2_free_all(struct tun *t)
{
	struct tun_h2 *h;

	while ((h = TAILQ_FIRST(&t->t_h2s)) != NULL) {
		TAILQ_REMOVE(&t->t_h2s, h, h_entry);
		t->t_nh2--;
		h->h_state = H2_S_DEAD;
		nghttp2_session_del(h->h_sess);
		stream_free(h->h_s);
		target_h2_free_cb(-1, 0, h);
	}
}
