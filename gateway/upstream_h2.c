/*
 * HTTP/2 to sandbox ports: ports[].protocol h2c (every request) or auto
 * (native gRPC).  A connection speaks cleartext HTTP/2 with prior
 * knowledge (RFC 9113 section 3.3) on nghttp2 and carries the streams of
 * many exchanges, up to limits.h2_upstream_streams or the server's
 * SETTINGS_MAX_CONCURRENT_STREAMS, whichever is lower; past that a new
 * connection opens.  Connections are pooled per event loop by the same
 * identity as HTTP/1 ones (sandbox version and port: g_h2pool).
 *
 * Each stream is a struct upstream of its own (UP_F_H2) and tells its
 * owner what an HTTP/1 connection does (struct upstream_owner), so the
 * exchange relays it with the same code.  The connection's own struct
 * upstream (UP_F_H2_CONN) does the connecting, retries and namespace
 * entry as upstream.c does for HTTP/1.
 *
 * Flow control follows the owner: nghttp2 does not send WINDOW_UPDATE by
 * itself (no_auto_window_update); DATA is consumed only as the owner takes
 * it, so a paused owner (a slow client) holds the server after one stream
 * window instead of growing a buffer here.  A request body waits in the
 * stream's s_out, which the owner fills up to its own high mark, and goes
 * out as DATA without a copy (send_data_callback).
 *
 * nghttp2's callbacks only record what happened and note the stream; once
 * the input is processed, each noted stream's owner is told from outside
 * nghttp2 (uph2_tell), so an owner may end its stream from there.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <nghttp2/nghttp2.h>

#include "addr.h"
#include "alloc.h"
#include "clock.h"
#include "evb.h"
#include "gw.h"
#include "h2s_int.h"
#include "stream.h"

/* What a stream may hold unread, and the whole connection. */
#define UPH2_STREAM_WINDOW (256 * 1024)
#define UPH2_CONN_WINDOW (16 * 1024 * 1024)
/* Frames are written while the socket's output holds less than this. */
#define UPH2_OUT_HIGH (64 * 1024)
/* The owner hears uo_drained when a request body's buffer is below this. */
#define UPH2_BODY_LOW (64 * 1024)
/* Most body bytes handed to the owner at once. */
#define UPH2_STEP (256 * 1024)
/* Stream ids past this: the connection takes no new streams. */
#define UPH2_LAST_ID (1U << 30)

enum uph2_state {
	UPH2_S_CONNECTING = 0, /* the socket connects; streams wait */
	UPH2_S_HANDSHAKE, /* connected, the server's SETTINGS awaited */
	UPH2_S_READY, /* streams come and go */
	UPH2_S_DRAINING, /* GOAWAY, ids used up, or flushed: no new stream */
	UPH2_S_DEAD, /* closed; freed from the loop */
};

/* The fields of a head as nghttp2 gave them, by reference. */
struct uph2_fields {
	nghttp2_rcbuf **f_rc; /* name, value, name, value... */
	size_t f_n; /* fields */
	size_t f_cap;
	size_t f_bytes; /* names and values, for the cap */
};

/* One HTTP/2 connection to a sandbox port. */
struct uph2 {
	TAILQ_ENTRY(uph2) h_all; /* g_h2all */
	struct gw *h_gw;
	struct upstream *h_conn; /* the connection (UP_F_H2_CONN) */
	nghttp2_session *h_ng; /* NULL until connected */
	enum uph2_state h_state;
	int h_flags;
#define UPH2_F_POOLED 0x01 /* in g_h2pool: new streams may find it */
#define UPH2_F_USED 0x02 /* a stream was answered on it */
#define UPH2_F_SETTINGS 0x04 /* the server's SETTINGS came */
	TAILQ_HEAD(, uph2_stream) h_streams; /* waiting and open */
	TAILQ_HEAD(, uph2_stream) h_notes; /* to tell their owners */
	size_t h_nstreams;
	uint64_t h_served; /* streams begun on it */
	struct event *h_kick; /* tell and send, from the loop */
	struct event *h_idle; /* no stream for timeouts.upstream_idle;
				 HANDSHAKE: the SETTINGS deadline */
};

/* One stream: an exchange's request and response. */
struct uph2_stream {
	TAILQ_ENTRY(uph2_stream) s_entry; /* h_streams */
	TAILQ_ENTRY(uph2_stream) s_note; /* h_notes */
	struct uph2 *s_h; /* NULL once unlinked */
	struct upstream *s_up;
	int32_t s_id; /* 0 until submitted */
	int s_flags;
#define S_F_NOTED 0x0001 /* on h_notes */
#define S_F_READY 0x0002 /* the owner is to hear uo_ready */
#define S_F_HEAD 0x0004 /* a head waits in s_head */
#define S_F_FINAL 0x0008 /* ... the final one */
#define S_F_HEAD_TOLD 0x0010 /* the owner has the final head */
#define S_F_TRAILERS 0x0020 /* trailer fields wait in s_trl */
#define S_F_END 0x0040 /* END_STREAM came: the response is whole */
#define S_F_END_HEAD 0x0080 /* ... on the final head: no body */
#define S_F_CLOSED 0x0100 /* nghttp2 closed the stream */
#define S_F_REQ_END 0x0200 /* the owner ended the request body */
#define S_F_DEFERRED 0x0400 /* the data provider waits for bytes */
#define S_F_DRAINED 0x0800 /* the owner is to hear uo_drained */
#define S_F_TOLD_END 0x1000 /* the owner heard the end or the failure */
#define S_F_LOST 0x2000 /* the connection went before the end */
#define S_F_BIG 0x4000 /* a head past the gateway's limits */
	uint32_t s_code; /* the RST_STREAM code it closed with */
	int s_status; /* :status of the head in s_head */
	struct uph2_fields s_head;
	struct uph2_fields s_trl;
	struct evbuffer *s_in; /* DATA not yet taken by the owner */
	struct evbuffer *s_out; /* request body not yet framed */
	uint64_t s_active; /* mono ms: the last frame either way */
	uint64_t s_idle_ms; /* no frame this long: uo_event timeout */
	uint64_t s_resp_by; /* mono ms: the head by then, or uo_timeout */
	uint64_t s_deadline; /* mono ms: uo_deadline (grpc-timeout) */
	char *s_why; /* LOST: what happened to the connection */
};

static void uph2_kick(struct uph2 *);
static void uph2_close(struct uph2 *, const char *);
static void uph2_stream_arm(struct uph2_stream *);
static struct uph2 *uph2_find(struct gw *, const struct gw_sandbox *, int, int);
static struct uph2 *uph2_new(struct gw *, struct gw_sandbox *, int);
static void uph2_link(struct uph2 *, struct uph2_stream *);

/* Forget a head's fields. */
static void
uph2_fields_clear(struct uph2_fields *f)
{
	size_t i;

	for (i = 0; i < 2 * f->f_n; i++)
		nghttp2_rcbuf_decref(f->f_rc[i]);
	f->f_n = 0;
	f->f_bytes = 0;
}

/*
 * The fields as hfields into hf (f_n of them), pointing into nghttp2's
 * buffers, which end in a NUL.
 */
static void
uph2_fields_get(const struct uph2_fields *f, struct hfield *hf)
{
	nghttp2_vec v;
	size_t i;

	for (i = 0; i < f->f_n; i++) {
		v = nghttp2_rcbuf_get_buf(f->f_rc[2 * i]);
		hf[i].name = (const char *)v.base;
		hf[i].name_len = v.len;
		v = nghttp2_rcbuf_get_buf(f->f_rc[2 * i + 1]);
		hf[i].value = (const char *)v.base;
		hf[i].value_len = v.len;
	}
}

/* Tell s's owner from the loop, outside nghttp2. */
static void
uph2_note(struct uph2_stream *s)
{
	struct uph2 *h = s->s_h;

	if (h == NULL || (s->s_flags & S_F_NOTED))
		return;
	s->s_flags |= S_F_NOTED;
	TAILQ_INSERT_TAIL(&h->h_notes, s, s_note);
	uph2_kick(h);
}

/*
 * How many streams h may carry at once: ours and the server's limit, or
 * before its SETTINGS came, what a sibling learned (0: none did).
 */
static size_t
uph2_max_streams(const struct uph2 *h, size_t learned)
{
	size_t ours = (size_t)h->h_gw->g_conf->cf_h2_upstream_streams;
	size_t peer = learned != 0 ? learned : ours;

	if (h->h_flags & UPH2_F_SETTINGS)
		peer = nghttp2_session_get_remote_settings(
		    h->h_ng, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
	return (peer < ours ? peer : ours);
}

/* Take h out of the pool: no new stream finds it. */
static void
uph2_unpool(struct uph2 *h)
{
	if (!(h->h_flags & UPH2_F_POOLED))
		return;
	h->h_flags &= ~UPH2_F_POOLED;
	upstream_pool_del(&h->h_gw->g_h2pool, h->h_conn);
}

/* Should h, without streams, close rather than wait in the pool? */
static int
uph2_idle_closes(const struct uph2 *h)
{
	const struct gw_config *cf = h->h_gw->g_conf;

	return (h->h_state == UPH2_S_DRAINING || cf->cf_upstream_idle == 0 ||
	    cf->cf_max_idle_upstreams == 0);
}

/*
 * A stream left h: with none left, h waits timeouts.upstream_idle for
 * another, or closes from the loop (draining, or without a pool).
 */
static void
uph2_idle_check(struct uph2 *h)
{
	struct timeval tv;

	if (h->h_nstreams != 0 || h->h_state == UPH2_S_DEAD ||
	    h->h_state < UPH2_S_READY)
		return;
	if (uph2_idle_closes(h)) {
		uph2_kick(h);
		return;
	}
	clock_msec_to_tv(h->h_gw->g_conf->cf_upstream_idle, &tv);
	evtimer_add(h->h_idle, &tv);
}

/*
 * h takes no new streams; it closes once those it has are done (from the
 * loop: this may run inside nghttp2).
 */
static void
uph2_drain(struct uph2 *h, const char *why)
{
	if (h->h_state >= UPH2_S_DRAINING)
		return;
	log_debug("upstream %s: h2 connection draining: %s",
	    h->h_conn->u_key, why);
	h->h_state = UPH2_S_DRAINING;
	uph2_unpool(h);
	uph2_idle_check(h);
}

/* Take s off its connection (its stream, if open, is reset). */
static void
uph2_unlink(struct uph2_stream *s)
{
	struct uph2 *h = s->s_h;
	size_t unread;

	if (h == NULL)
		return;
	if (s->s_flags & S_F_NOTED) {
		TAILQ_REMOVE(&h->h_notes, s, s_note);
		s->s_flags &= ~S_F_NOTED;
	}
	if (h->h_ng != NULL && s->s_id > 0) {
		nghttp2_session_set_stream_user_data(h->h_ng, s->s_id, NULL);
		/* What the owner never took is the connection's again. */
		unread = evbuffer_get_length(s->s_in);
		if (unread > 0)
			nghttp2_session_consume_connection(h->h_ng, unread);
		if (!(s->s_flags & S_F_CLOSED) && h->h_state != UPH2_S_DEAD)
			nghttp2_submit_rst_stream(h->h_ng, NGHTTP2_FLAG_NONE,
			    s->s_id, NGHTTP2_CANCEL);
		uph2_kick(h);
	}
	TAILQ_REMOVE(&h->h_streams, s, s_entry);
	h->h_nstreams--;
	s->s_h = NULL;
	uph2_idle_check(h);
}

/* The stream of a struct upstream leaves (upstream_close). */
void
upstream_h2_stream_close(struct upstream *up)
{
	if (up->u_h2s != NULL)
		uph2_unlink(up->u_h2s);
}

/* Free the stream of a struct upstream (upstream_free). */
void
upstream_h2_stream_free(struct upstream *up)
{
	struct uph2_stream *s = up->u_h2s;

	uph2_unlink(s);
	uph2_fields_clear(&s->s_head);
	uph2_fields_clear(&s->s_trl);
	free(s->s_head.f_rc);
	free(s->s_trl.f_rc);
	evbuffer_free(s->s_in);
	evbuffer_free(s->s_out);
	free(s->s_why);
	free(s);
	up->u_h2s = NULL;
}

/*
 * The owner's response head from s_head: its fields (pseudo-headers were
 * not kept), and what its body is.
 */
static int
uph2_tell_head(struct uph2_stream *s, int final)
{
	struct upstream *up = s->s_up;
	struct hfield inline_f[32], *f;
	struct head hd;
	const struct hfield *cl;
	int r;

	f = s->s_head.f_n <= 32 ? inline_f
				: xcalloc(s->s_head.f_n, sizeof *f);
	uph2_fields_get(&s->s_head, f);
	memset(&hd, 0, sizeof hd);
	hd.h_status = s->s_status;
	hd.h_version = 20;
	hd.h_fields = f;
	hd.h_nfields = s->s_head.f_n;
	if (final) {
		if ((up->u_flags & UP_F_HEAD_REQ) ||
		    (s->s_flags & S_F_END_HEAD) || s->s_status == 204 ||
		    s->s_status == 304)
			hd.h_flags |= HEAD_F_NO_BODY;
		else if ((cl = head_find(&hd, "content-length")) != NULL) {
			/* nghttp2 checked it is digits, and that DATA match. */
			hd.h_flags |= HEAD_F_LENGTH;
			hd.h_length = strtoull(cl->value, NULL, 10);
		}
		r = up->u_owner->uo_head(up, &hd, up->u_owner_arg);
	} else
		r = up->u_owner->uo_interim(up, &hd, up->u_owner_arg);
	if (f != inline_f)
		free(f);
	uph2_fields_clear(&s->s_head);
	return (r);
}

/* Hand s's owner what it may take now of the response. */
static void
uph2_deliver(struct uph2_stream *s)
{
	struct upstream *up = s->s_up;
	struct hfield inline_f[16], *f;
	size_t n;
	char why[256];

	if (up->u_state != UP_S_ACTIVE || up->u_owner == NULL ||
	    !(up->u_flags & UP_F_READING) || (s->s_flags & S_F_TOLD_END))
		return;
	if ((s->s_flags & (S_F_HEAD | S_F_FINAL)) == S_F_HEAD) {
		s->s_flags &= ~S_F_HEAD;
		if (uph2_tell_head(s, 0) != 0 || up->u_state != UP_S_ACTIVE)
			return;
	}
	if ((s->s_flags & S_F_HEAD) && !(s->s_flags & S_F_HEAD_TOLD)) {
		s->s_flags &= ~S_F_HEAD;
		s->s_flags |= S_F_HEAD_TOLD;
		up->u_flags |= UP_F_HEAD_DONE;
		uph2_stream_arm(s);
		if (uph2_tell_head(s, 1) != 0 || up->u_state != UP_S_ACTIVE)
			return;
	}
	while ((s->s_flags & S_F_HEAD_TOLD) && !(up->u_flags & UP_F_PAUSED) &&
	    (n = evbuffer_get_length(s->s_in)) > 0) {
		if (n > UPH2_STEP)
			n = UPH2_STEP;
		if (up->u_owner->uo_body(up, s->s_in, n, up->u_owner_arg) != 0 ||
		    up->u_state != UP_S_ACTIVE)
			return;
		/* Taken: the window opens that much again. */
		if (s->s_h != NULL && s->s_h->h_ng != NULL) {
			nghttp2_session_consume_connection(s->s_h->h_ng, n);
			if (!(s->s_flags & S_F_CLOSED))
				nghttp2_session_consume_stream(
				    s->s_h->h_ng, s->s_id, n);
			uph2_kick(s->s_h);
		}
	}
	if ((s->s_flags & (S_F_END | S_F_HEAD_TOLD)) ==
		(S_F_END | S_F_HEAD_TOLD) &&
	    evbuffer_get_length(s->s_in) == 0) {
		s->s_flags |= S_F_TOLD_END;
		up->u_flags &= ~UP_F_READING;
		if ((s->s_flags & S_F_TRAILERS) && s->s_trl.f_n > 0 &&
		    up->u_owner->uo_trailers != NULL) {
			f = s->s_trl.f_n <= 16
			    ? inline_f
			    : xcalloc(s->s_trl.f_n, sizeof *f);
			uph2_fields_get(&s->s_trl, f);
			up->u_owner->uo_trailers(
			    up, f, s->s_trl.f_n, up->u_owner_arg);
			if (f != inline_f)
				free(f);
			if (up->u_state != UP_S_ACTIVE)
				return;
		}
		up->u_owner->uo_done(up, up->u_owner_arg);
		return;
	}
	if (!(s->s_flags & (S_F_CLOSED | S_F_LOST)) || (s->s_flags & S_F_END))
		return;
	/* The stream ended without its response. */
	s->s_flags |= S_F_TOLD_END;
	up->u_flags &= ~UP_F_READING;
	up->u_flags |= UP_F_NO_REUSE;
	if (s->s_flags & S_F_HEAD_TOLD) {
		snprintf(why, sizeof why, "%s",
		    s->s_flags & S_F_LOST ? s->s_why
					  : nghttp2_http2_strerror(s->s_code));
		up->u_owner->uo_error(up, NULL, why, up->u_owner_arg);
	} else if (s->s_flags & S_F_BIG) {
		snprintf(why, sizeof why,
		    "Sandbox '%s' port %d sent a response head larger than "
		    "the %zu bytes this gateway reads.",
		    up->u_sandbox->sb_id, up->u_port,
		    up->u_gw->g_limits.max_head);
		up->u_owner->uo_error(
		    up, gw_err_bad_response, why, up->u_owner_arg);
	} else if ((s->s_flags & S_F_LOST) ||
	    s->s_code == NGHTTP2_REFUSED_STREAM) {
		/*
		 * Refused (GOAWAY, or the server's stream limit): never
		 * processed, so the owner may try again elsewhere.
		 */
		if (s->s_code == NGHTTP2_REFUSED_STREAM)
			up->u_flags |= UP_F_REUSED;
		up->u_owner->uo_event(up,
		    STREAM_EV_EOF | STREAM_EV_READING, up->u_owner_arg);
	} else {
		snprintf(why, sizeof why,
		    "Sandbox '%s' port %d reset the stream (%s) without "
		    "answering.",
		    up->u_sandbox->sb_id, up->u_port,
		    nghttp2_http2_strerror(s->s_code));
		up->u_owner->uo_error(
		    up, gw_err_upstream_reset, why, up->u_owner_arg);
	}
}

/*
 * Move stream s, whose request has not gone yet, to another connection
 * with room (or a new one): h has no room for it.
 */
static void
uph2_move(struct uph2_stream *s)
{
	struct uph2 *h = s->s_h, *to;
	struct upstream *conn = h->h_conn;

	uph2_unlink(s);
	if ((to = uph2_find(h->h_gw, conn->u_sandbox, conn->u_port, 0)) ==
	    NULL)
		to = uph2_new(h->h_gw, conn->u_sandbox, conn->u_port);
	uph2_link(to, s);
	if (to->h_state == UPH2_S_READY) {
		s->s_flags |= S_F_READY;
		uph2_note(s);
	}
}

/*
 * The server's SETTINGS came: h is ready.  As many waiting streams as
 * the server's limit allows start; the rest move to other connections.
 */
static void
uph2_settle(struct uph2 *h)
{
	struct uph2_stream *s, *next;
	size_t max, n = 0;

	if (h->h_state != UPH2_S_HANDSHAKE ||
	    !(h->h_flags & UPH2_F_SETTINGS))
		return;
	h->h_state = UPH2_S_READY;
	evtimer_del(h->h_idle);
	max = uph2_max_streams(h, 0);
	for (s = TAILQ_FIRST(&h->h_streams); s != NULL; s = next) {
		next = TAILQ_NEXT(s, s_entry);
		if (++n > max) {
			uph2_move(s);
			continue;
		}
		s->s_flags |= S_F_READY;
		uph2_note(s);
	}
	uph2_idle_check(h);
}

/* Tell each noted stream's owner what happened. */
static void
uph2_tell(struct uph2 *h)
{
	struct uph2_stream *s;
	struct upstream *up;

	uph2_settle(h);
	while ((s = TAILQ_FIRST(&h->h_notes)) != NULL) {
		TAILQ_REMOVE(&h->h_notes, s, s_note);
		s->s_flags &= ~S_F_NOTED;
		up = s->s_up;
		if (up->u_state == UP_S_DEAD || up->u_owner == NULL)
			continue;
		if (s->s_flags & S_F_READY) {
			s->s_flags &= ~S_F_READY;
			up->u_state = UP_S_ACTIVE;
			up->u_owner->uo_ready(up, up->u_owner_arg);
			if (up->u_state != UP_S_ACTIVE || s->s_h == NULL)
				continue;
		}
		if ((s->s_flags & S_F_DRAINED) &&
		    !(s->s_flags & (S_F_CLOSED | S_F_LOST))) {
			s->s_flags &= ~S_F_DRAINED;
			if (up->u_owner->uo_drained != NULL)
				up->u_owner->uo_drained(up, up->u_owner_arg);
			if (up->u_state != UP_S_ACTIVE)
				continue;
		}
		uph2_deliver(s);
	}
}

/* The owner can take more of the response: hand it what waits. */
void
upstream_h2_resume(struct upstream *up)
{
	struct uph2_stream *s = up->u_h2s;

	s->s_active = clock_mono_msec();
	uph2_deliver(s);
}

/* Response body bytes received and not yet taken by the owner. */
size_t
upstream_h2_buffered(const struct upstream *up)
{
	return (evbuffer_get_length(up->u_h2s->s_in));
}

/*
 * Arm s's timer for the first of its deadlines: the request's own, the
 * response head's, the idle one (counted from the last frame).
 */
static void
uph2_stream_arm(struct uph2_stream *s)
{
	struct upstream *up = s->s_up;
	uint64_t now = clock_mono_msec(), next = 0, t;
	struct timeval tv;

	if (s->s_deadline != 0)
		next = s->s_deadline;
	if (s->s_resp_by != 0 && !(s->s_flags & S_F_HEAD_TOLD) &&
	    (next == 0 || s->s_resp_by < next))
		next = s->s_resp_by;
	if (s->s_idle_ms != 0) {
		t = s->s_active + s->s_idle_ms;
		if (next == 0 || t < next)
			next = t;
	}
	if (next == 0) {
		evtimer_del(up->u_timer);
		return;
	}
	clock_msec_to_tv(next > now ? next - now : 1, &tv);
	evtimer_add(up->u_timer, &tv);
}

/* A stream's timer: which deadline passed, if any, else wait on. */
static void
uph2_stream_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upstream *up = arg;
	struct uph2_stream *s = up->u_h2s;
	const struct upstream_owner *o = up->u_owner;
	uint64_t now = clock_mono_msec();

	(void)fd;
	(void)what;
	if (up->u_state != UP_S_ACTIVE || o == NULL)
		return;
	if (s->s_deadline != 0 && now >= s->s_deadline) {
		s->s_deadline = 0;
		if (o->uo_deadline != NULL) {
			o->uo_deadline(up, up->u_owner_arg);
			return;
		}
	}
	if (s->s_resp_by != 0 && !(s->s_flags & S_F_HEAD_TOLD) &&
	    now >= s->s_resp_by) {
		s->s_resp_by = 0;
		if (o->uo_timeout != NULL) {
			o->uo_timeout(up, up->u_owner_arg);
			if (up->u_state != UP_S_ACTIVE)
				return;
		}
	}
	/* A paused owner (a slow client) is not the server's silence. */
	if (up->u_flags & UP_F_PAUSED)
		s->s_active = now;
	if (s->s_idle_ms != 0 && now >= s->s_active + s->s_idle_ms) {
		o->uo_event(up, STREAM_EV_TIMEOUT | STREAM_EV_READING,
		    up->u_owner_arg);
		return;
	}
	uph2_stream_arm(s);
}

/* The owner's deadlines for the exchange, in ms from now (0: none). */
void
upstream_h2_timeouts(struct upstream *up, uint64_t idle_ms,
    uint64_t response_ms, uint64_t deadline_ms)
{
	struct uph2_stream *s = up->u_h2s;
	uint64_t now = clock_mono_msec();

	s->s_active = now;
	s->s_idle_ms = idle_ms;
	s->s_resp_by = response_ms != 0 ? now + response_ms : 0;
	s->s_deadline = deadline_ms != 0 ? now + deadline_ms : 0;
	uph2_stream_arm(s);
}

/*
 * nghttp2 asks for request body: as much of s_out as it may send, by
 * reference (uph2_send_data_cb moves it); END_STREAM after the end.
 */
static ssize_t
uph2_body_cb(nghttp2_session *ng, int32_t id, uint8_t *buf, size_t length,
    uint32_t *flags, nghttp2_data_source *src, void *arg)
{
	struct uph2_stream *s = src->ptr;
	size_t n = evbuffer_get_length(s->s_out);

	(void)ng;
	(void)id;
	(void)buf;
	(void)arg;
	if (n > length)
		n = length;
	if (n == evbuffer_get_length(s->s_out) && (s->s_flags & S_F_REQ_END))
		*flags |= NGHTTP2_DATA_FLAG_EOF;
	else if (n == 0) {
		s->s_flags |= S_F_DEFERRED | S_F_DRAINED;
		uph2_note(s);
		return (NGHTTP2_ERR_DEFERRED);
	}
	if (n > 0)
		*flags |= NGHTTP2_DATA_FLAG_NO_COPY;
	return ((ssize_t)n);
}

/* Send a DATA frame: its header, then the payload moved from s_out. */
static int
uph2_send_data_cb(nghttp2_session *ng, nghttp2_frame *fr,
    const uint8_t *framehd, size_t length, nghttp2_data_source *src,
    void *arg)
{
	struct uph2 *h = arg;
	struct uph2_stream *s = src->ptr;
	struct evbuffer *out = stream_output(h->h_conn->u_stream);
	size_t before = evbuffer_get_length(s->s_out);

	(void)ng;
	(void)fr;
	if (evbuffer_get_length(out) >= UPH2_OUT_HIGH)
		return (NGHTTP2_ERR_WOULDBLOCK);
	evbuffer_add(out, framehd, 9);
	if (length > 0)
		evb_take(s->s_out, out, length);
	s->s_active = clock_mono_msec();
	if (before >= UPH2_BODY_LOW && before - length < UPH2_BODY_LOW &&
	    !(s->s_flags & S_F_REQ_END)) {
		s->s_flags |= S_F_DRAINED;
		uph2_note(s);
	}
	return (0);
}

/* Frames nghttp2 made: into the socket's output, while it has room. */
static ssize_t
uph2_send_cb(nghttp2_session *ng, const uint8_t *data, size_t len, int flags,
    void *arg)
{
	struct uph2 *h = arg;
	struct evbuffer *out = stream_output(h->h_conn->u_stream);

	(void)ng;
	(void)flags;
	if (evbuffer_get_length(out) >= UPH2_OUT_HIGH)
		return (NGHTTP2_ERR_WOULDBLOCK);
	evbuffer_add(out, data, len);
	return ((ssize_t)len);
}

/* Write what nghttp2 has queued, while the output has room. */
static void
uph2_send(struct uph2 *h)
{
	int rv;

	if (h->h_state == UPH2_S_DEAD || h->h_ng == NULL)
		return;
	if ((rv = nghttp2_session_send(h->h_ng)) != 0) {
		uph2_close(h, nghttp2_strerror(rv));
		return;
	}
	if (!nghttp2_session_want_read(h->h_ng) &&
	    !nghttp2_session_want_write(h->h_ng))
		uph2_close(h, "the session ended");
}

/* Tell owners and send, from the loop. */
static void
uph2_kick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct uph2 *h = arg;

	(void)fd;
	(void)what;
	if (h->h_state == UPH2_S_DEAD)
		return;
	uph2_tell(h);
	if (h->h_state == UPH2_S_DEAD)
		return;
	if (h->h_nstreams == 0 && h->h_state >= UPH2_S_READY &&
	    uph2_idle_closes(h)) {
		uph2_close(h, "no streams left");
		return;
	}
	uph2_send(h);
}

/* Have uph2_kick_cb run. */
static void
uph2_kick(struct uph2 *h)
{
	if (h->h_state != UPH2_S_DEAD)
		event_active(h->h_kick, EV_TIMEOUT, 0);
}

/* The stream of a frame, if it is still an owner's. */
static struct uph2_stream *
uph2_stream_of(nghttp2_session *ng, int32_t id)
{
	return (id > 0 ? nghttp2_session_get_stream_user_data(ng, id) : NULL);
}

/* A response HEADERS frame begins: a new set of fields. */
static int
uph2_begin_headers_cb(
    nghttp2_session *ng, const nghttp2_frame *fr, void *arg)
{
	struct uph2_stream *s = uph2_stream_of(ng, fr->hd.stream_id);

	(void)arg;
	if (s == NULL)
		return (0);
	s->s_up->u_flags |= UP_F_GOT_BYTES;
	s->s_active = clock_mono_msec();
	/* A head after the final one carries the trailers. */
	if (s->s_flags & (S_F_FINAL | S_F_HEAD_TOLD))
		uph2_fields_clear(&s->s_trl);
	else {
		/* An interim head not yet told gives way to this one. */
		uph2_fields_clear(&s->s_head);
		s->s_status = 0;
		s->s_flags &= ~S_F_HEAD;
	}
	return (0);
}

/* A response field: kept by reference, up to the head limits. */
static int
uph2_header_cb(nghttp2_session *ng, const nghttp2_frame *fr,
    nghttp2_rcbuf *name, nghttp2_rcbuf *value, uint8_t flags, void *arg)
{
	struct uph2_stream *s = uph2_stream_of(ng, fr->hd.stream_id);
	struct uph2 *h = arg;
	struct uph2_fields *f;
	nghttp2_vec n, v;

	(void)flags;
	if (s == NULL || fr->hd.type != NGHTTP2_HEADERS)
		return (0);
	n = nghttp2_rcbuf_get_buf(name);
	v = nghttp2_rcbuf_get_buf(value);
	f = (s->s_flags & (S_F_FINAL | S_F_HEAD_TOLD)) ? &s->s_trl
						       : &s->s_head;
	f->f_bytes += n.len + v.len + 4;
	if (f->f_bytes > h->h_gw->g_limits.max_head ||
	    f->f_n >= h->h_gw->g_limits.max_headers) {
		s->s_flags |= S_F_BIG;
		return (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE);
	}
	if (n.len > 0 && n.base[0] == ':') {
		/* nghttp2 checked the pseudo-headers a response may have. */
		if (n.len == 7 && memcmp(n.base, ":status", 7) == 0)
			s->s_status = atoi((const char *)v.base);
		return (0);
	}
	if (f->f_n == f->f_cap) {
		f->f_cap = f->f_cap == 0 ? 16 : 2 * f->f_cap;
		f->f_rc = xreallocarray(f->f_rc, 2 * f->f_cap, sizeof *f->f_rc);
	}
	nghttp2_rcbuf_incref(name);
	nghttp2_rcbuf_incref(value);
	f->f_rc[2 * f->f_n] = name;
	f->f_rc[2 * f->f_n + 1] = value;
	f->f_n++;
	return (0);
}

/* A whole frame arrived. */
static int
uph2_frame_recv_cb(nghttp2_session *ng, const nghttp2_frame *fr, void *arg)
{
	struct uph2 *h = arg;
	struct uph2_stream *s = uph2_stream_of(ng, fr->hd.stream_id);

	if (fr->hd.type == NGHTTP2_SETTINGS &&
	    !(fr->hd.flags & NGHTTP2_FLAG_ACK)) {
		h->h_flags |= UPH2_F_SETTINGS;
		return (0);
	}
	if (fr->hd.type == NGHTTP2_GOAWAY) {
		/* Streams past its last id are closed as REFUSED_STREAM. */
		uph2_drain(h, "the server sent GOAWAY");
		return (0);
	}
	if (s == NULL)
		return (0);
	if (fr->hd.type == NGHTTP2_HEADERS) {
		if (s->s_flags & (S_F_FINAL | S_F_HEAD_TOLD))
			s->s_flags |= S_F_TRAILERS;
		else {
			s->s_flags |= S_F_HEAD;
			if (s->s_status >= 200) {
				s->s_flags |= S_F_FINAL;
				if (fr->hd.flags & NGHTTP2_FLAG_END_STREAM)
					s->s_flags |= S_F_END_HEAD;
			}
		}
		uph2_note(s);
	}
	if ((fr->hd.type == NGHTTP2_HEADERS || fr->hd.type == NGHTTP2_DATA) &&
	    (fr->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
		s->s_flags |= S_F_END;
		uph2_note(s);
	}
	return (0);
}

/* Response body bytes: kept until the owner takes them. */
static int
uph2_data_cb(nghttp2_session *ng, uint8_t flags, int32_t id,
    const uint8_t *data, size_t len, void *arg)
{
	struct uph2_stream *s = uph2_stream_of(ng, id);

	(void)flags;
	(void)arg;
	if (s == NULL) {
		/* Nobody reads it: the window opens again at once. */
		nghttp2_session_consume_connection(ng, len);
		return (0);
	}
	evbuffer_add(s->s_in, data, len);
	s->s_active = clock_mono_msec();
	s->s_up->u_flags |= UP_F_GOT_BYTES;
	uph2_note(s);
	return (0);
}

/* nghttp2 closed a stream: an end, or a reset. */
static int
uph2_close_cb(nghttp2_session *ng, int32_t id, uint32_t code, void *arg)
{
	struct uph2_stream *s = uph2_stream_of(ng, id);

	(void)arg;
	if (s == NULL)
		return (0);
	nghttp2_session_set_stream_user_data(ng, id, NULL);
	s->s_flags |= S_F_CLOSED;
	s->s_code = code;
	if (code != NGHTTP2_NO_ERROR && !(s->s_flags & S_F_END))
		log_debug("upstream %s: h2 stream %d closed: %s",
		    s->s_up->u_key, (int)id, nghttp2_http2_strerror(code));
	uph2_note(s);
	return (0);
}

/*
 * Every stream h still has loses its connection: each owner hears it
 * (from the loop: uph2_close runs from h's own callbacks).
 */
static void
uph2_lose_streams(struct uph2 *h, const char *why)
{
	struct uph2_stream *s;

	TAILQ_FOREACH (s, &h->h_streams, s_entry) {
		if (s->s_flags & S_F_LOST)
			continue;
		s->s_flags |= S_F_LOST;
		free(s->s_why);
		s->s_why = xstrdup(why);
		if (!(s->s_flags & S_F_NOTED)) {
			s->s_flags |= S_F_NOTED;
			TAILQ_INSERT_TAIL(&h->h_notes, s, s_note);
		}
	}
}

/*
 * The streams of h whose owners were never told uo_ready fail: with e and
 * why (uo_failed), or with e NULL as a connection lost before a byte of
 * theirs went (uo_event: the owner may try again).
 */
static void
uph2_fail_waiting(struct uph2 *h, const struct gw_error *e, const char *why)
{
	struct uph2_stream *s, *next;
	struct upstream *up;

	for (s = TAILQ_FIRST(&h->h_streams); s != NULL; s = next) {
		next = TAILQ_NEXT(s, s_entry);
		up = s->s_up;
		if (up->u_state != UP_S_CONNECTING)
			continue;
		uph2_unlink(s);
		if (e != NULL && up->u_owner != NULL &&
		    up->u_owner->uo_failed != NULL)
			up->u_owner->uo_failed(up, e, why, up->u_owner_arg);
		else if (e == NULL && up->u_owner != NULL &&
		    up->u_owner->uo_event != NULL)
			up->u_owner->uo_event(
			    up, STREAM_EV_EOF, up->u_owner_arg);
		else
			upstream_close(up, why);
		/* An owner may have closed others: start over. */
		next = s->s_h == NULL ? TAILQ_FIRST(&h->h_streams) : next;
	}
}

/* Free h, from the loop. */
static void
uph2_free_cb(evutil_socket_t fd, short what, void *arg)
{
	struct uph2 *h = arg;

	(void)fd;
	(void)what;
	if (h->h_ng != NULL)
		nghttp2_session_del(h->h_ng);
	event_free(h->h_kick);
	event_free(h->h_idle);
	free(h);
}

/*
 * Close h: its streams' owners hear it now (the caller is one of h's own
 * callbacks, or a flush), its connection goes, and it is freed from the
 * loop.
 */
static void
uph2_close(struct uph2 *h, const char *why)
{
	struct uph2_stream *s;
	struct timeval tv = { 0, 0 };
	enum uph2_state was;
	char msg[320];

	if (h->h_state == UPH2_S_DEAD)
		return;
	log_debug("upstream %s: h2 connection closed: %s", h->h_conn->u_key,
	    why);
	uph2_unpool(h);
	if (h->h_ng != NULL && h->h_nstreams == 0) {
		/* A courtesy: the server hears why we go. */
		nghttp2_session_terminate_session(h->h_ng, NGHTTP2_NO_ERROR);
		(void)nghttp2_session_send(h->h_ng);
		(void)stream_flush(h->h_conn->u_stream);
	}
	was = h->h_state;
	h->h_state = UPH2_S_DRAINING; /* owners may still close streams */
	if (was >= UPH2_S_READY)
		uph2_fail_waiting(h, NULL, why);
	else if (!TAILQ_EMPTY(&h->h_streams)) {
		/* Streams that never started: the port is not h2c, maybe. */
		snprintf(msg, sizeof msg,
		    "Sandbox '%s' port %d did not speak HTTP/2 with prior "
		    "knowledge (%s); is it an h2c server, as its protocol: "
		    "says?",
		    h->h_conn->u_sandbox->sb_id, h->h_conn->u_port, why);
		uph2_fail_waiting(h, gw_err_bad_response, msg);
	}
	uph2_lose_streams(h, why);
	uph2_tell(h);
	h->h_state = UPH2_S_DEAD;
	/* Owners that kept a stream lose it now. */
	while ((s = TAILQ_FIRST(&h->h_streams)) != NULL)
		uph2_unlink(s);
	evtimer_del(h->h_idle);
	TAILQ_REMOVE(&h->h_gw->g_h2all, h, h_all);
	h->h_conn->u_h2 = NULL;
	upstream_close(h->h_conn, why);
	event_base_once(h->h_gw->g_base, -1, EV_TIMEOUT, uph2_free_cb, h, &tv);
}

/* The server's bytes: to nghttp2, then the owners hear, then we send. */
static void
uph2_read_cb(struct stream *st, void *arg)
{
	struct uph2 *h = arg;
	struct evbuffer *in = stream_input(st);
	struct evbuffer_iovec v;
	ssize_t rv;
	char why[160];

	while (h->h_state != UPH2_S_DEAD && evbuffer_get_length(in) > 0) {
		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		rv = nghttp2_session_mem_recv(h->h_ng, v.iov_base, v.iov_len);
		if (rv < 0) {
			snprintf(why, sizeof why,
			    "the server broke the HTTP/2 protocol: %s",
			    nghttp2_strerror((int)rv));
			uph2_close(h, why);
			return;
		}
		evbuffer_drain(in, v.iov_len);
	}
	if (h->h_state == UPH2_S_DEAD)
		return;
	uph2_tell(h);
	uph2_send(h);
}

/* The output drained: more frames may go. */
static void
uph2_write_cb(struct stream *st, void *arg)
{
	struct uph2 *h = arg;

	(void)st;
	uph2_tell(h);
	uph2_send(h);
}

/* The connection ended or failed. */
static void
uph2_event_cb(struct stream *st, short what, void *arg)
{
	struct uph2 *h = arg;

	(void)st;
	uph2_close(h, (what & STREAM_EV_EOF) ? "the server closed the connection"
					     : "the connection failed");
}

/* No stream for timeouts.upstream_idle: close. */
static void
uph2_idle_cb(evutil_socket_t fd, short what, void *arg)
{
	struct uph2 *h = arg;

	(void)fd;
	(void)what;
	if (h->h_state == UPH2_S_HANDSHAKE)
		uph2_close(h, "the server sent no HTTP/2 SETTINGS within "
			      "timeouts.connect");
	else if (h->h_nstreams == 0)
		uph2_close(h, "idle timeout");
}

static nghttp2_session_callbacks *uph2_cbs;

/* Make the session callbacks, once for the process. */
static void
uph2_callbacks_init(void)
{
	nghttp2_session_callbacks *cb;

	if (nghttp2_session_callbacks_new(&cb) != 0)
		abort();
	nghttp2_session_callbacks_set_send_callback(cb, uph2_send_cb);
	nghttp2_session_callbacks_set_send_data_callback(cb, uph2_send_data_cb);
	nghttp2_session_callbacks_set_on_begin_headers_callback(
	    cb, uph2_begin_headers_cb);
	nghttp2_session_callbacks_set_on_header_callback2(cb, uph2_header_cb);
	nghttp2_session_callbacks_set_on_frame_recv_callback(
	    cb, uph2_frame_recv_cb);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
	    cb, uph2_data_cb);
	nghttp2_session_callbacks_set_on_stream_close_callback(
	    cb, uph2_close_cb);
	uph2_cbs = cb;
}

/* The session callbacks. */
static nghttp2_session_callbacks *
uph2_callbacks(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, uph2_callbacks_init);
	return (uph2_cbs);
}

/* The connection is up: start the session, and the waiting streams. */
static void
uph2_conn_ready(struct upstream *conn, void *arg)
{
	struct uph2 *h = arg;
	nghttp2_option *opt;
	struct timeval tv;
	nghttp2_settings_entry iv[3] = {
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, UPH2_STREAM_WINDOW },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 0 },
	};

	iv[2].value = (uint32_t)h->h_gw->g_limits.max_head;
	if (nghttp2_option_new(&opt) != 0)
		abort();
	nghttp2_option_set_no_auto_window_update(opt, 1);
	/* A server's header block is bounded as a client's is. */
	nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
	if (nghttp2_session_client_new2(&h->h_ng, uph2_callbacks(), h, opt) !=
	    0)
		abort();
	nghttp2_option_del(opt);
	(void)nghttp2_submit_settings(h->h_ng, NGHTTP2_FLAG_NONE, iv, 3);
	(void)nghttp2_session_set_local_window_size(
	    h->h_ng, NGHTTP2_FLAG_NONE, 0, UPH2_CONN_WINDOW);
	/*
	 * Streams wait for the server's SETTINGS: sent before, they would
	 * not know its stream limit, and a strict server refuses those
	 * past it (uph2_settle).
	 */
	h->h_state = UPH2_S_HANDSHAKE;
	clock_msec_to_tv(h->h_gw->g_conf->cf_connect_timeout, &tv);
	evtimer_add(h->h_idle, &tv);
	stream_setcb(
	    conn->u_stream, uph2_read_cb, uph2_write_cb, uph2_event_cb, h);
	stream_setwatermark(conn->u_stream, EV_WRITE, UPH2_OUT_HIGH / 2, 0);
	stream_set_timeouts(conn->u_stream, NULL, NULL);
	stream_enable(conn->u_stream, EV_READ | EV_WRITE);
	uph2_kick(h);
}

/* Connecting failed for good: every waiting stream's owner hears why. */
static void
uph2_conn_failed(struct upstream *conn, const struct gw_error *e,
    const char *why, void *arg)
{
	struct uph2 *h = arg;

	(void)conn;
	uph2_unpool(h);
	h->h_state = UPH2_S_DRAINING;
	uph2_fail_waiting(h, e, why);
	uph2_close(h, why);
}

/* What the connection's struct upstream tells its session. */
static const struct upstream_owner uph2_conn_owner = {
	.uo_ready = uph2_conn_ready,
	.uo_failed = uph2_conn_failed,
};

/* A session not yet on a connection. */
static struct uph2 *
uph2_alloc(struct gw *g)
{
	struct uph2 *h;

	h = xcalloc(1, sizeof *h);
	h->h_gw = g;
	TAILQ_INIT(&h->h_streams);
	TAILQ_INIT(&h->h_notes);
	h->h_kick = event_new(g->g_base, -1, 0, uph2_kick_cb, h);
	h->h_idle = evtimer_new(g->g_base, uph2_idle_cb, h);
	return (h);
}

/* h runs on connection conn, and new streams may find it in the pool. */
static void
uph2_attach(struct uph2 *h, struct upstream *conn)
{
	struct gw *g = h->h_gw;

	h->h_conn = conn;
	conn->u_flags |= UP_F_H2_CONN;
	conn->u_h2 = h;
	h->h_flags |= UPH2_F_POOLED;
	upstream_pool_add(&g->g_h2pool, conn);
	TAILQ_INSERT_TAIL(&g->g_h2all, h, h_all);
	GW_ADD(g->g_metrics.m_upstream_h2_conns, 1);
}

/* A new connection to port of sb, connecting. */
static struct uph2 *
uph2_new(struct gw *g, struct gw_sandbox *sb, int port)
{
	struct uph2 *h;

	h = uph2_alloc(g);
	uph2_attach(h, upstream_get(g, sb, port, 1, &uph2_conn_owner, h));
	return (h);
}

/*
 * A session on fd, already connected (one end of a socketpair): the unit
 * tests and the fuzz harness drive the whole client through it.
 */
void
upstream_h2_adopt(struct gw *g, struct gw_sandbox *sb, int port, int fd)
{
	struct uph2 *h = uph2_alloc(g);
	struct upstream *conn;

	conn = upstream_pipe(g, sb, fd, &uph2_conn_owner, h);
	conn->u_port = port;
	uph2_attach(h, conn);
	uph2_conn_ready(conn, h);
}

/* Stream s goes on connection h. */
static void
uph2_link(struct uph2 *h, struct uph2_stream *s)
{
	s->s_h = h;
	TAILQ_INSERT_TAIL(&h->h_streams, s, s_entry);
	h->h_nstreams++;
	h->h_served++;
	if (h->h_state == UPH2_S_READY)
		evtimer_del(h->h_idle); /* not the SETTINGS deadline */
}

/*
 * A pooled connection to port of sb with room for a stream, or NULL.  A
 * connection whose server has not said its stream limit yet is held to
 * the one a sibling learned, so that a burst does not pile onto it.
 * fresh: only one that has not started yet (a retry after a failure).
 */
static struct uph2 *
uph2_find(struct gw *g, const struct gw_sandbox *sb, int port, int fresh)
{
	struct upstream_pool *p = &g->g_h2pool;
	struct upstream_list *bucket;
	struct upstream *conn;
	struct uph2 *h;
	size_t learned = 0;

	if (p->p_count == 0)
		return (NULL);
	bucket = upstream_pool_bucket(p, sb, port);
	TAILQ_FOREACH (conn, bucket, u_hentry) {
		h = conn->u_h2;
		if (conn->u_sandbox == sb && conn->u_port == port &&
		    (h->h_flags & UPH2_F_SETTINGS)) {
			learned = uph2_max_streams(h, 0);
			break;
		}
	}
	TAILQ_FOREACH (conn, bucket, u_hentry) {
		if (conn->u_sandbox != sb || conn->u_port != port)
			continue;
		h = conn->u_h2;
		if (h->h_state <= (fresh ? UPH2_S_HANDSHAKE : UPH2_S_READY) &&
		    h->h_nstreams < uph2_max_streams(h, learned))
			return (h);
	}
	return (NULL);
}

/*
 * A stream to port of sandbox sb for an owner: on a pooled connection
 * with room (fresh: never), else on a new one.  It is UP_S_ACTIVE when
 * its connection is ready (the request may be sent now), else
 * UP_S_CONNECTING until the owner hears uo_ready or uo_failed.
 */
struct upstream *
upstream_h2_get(struct gw *g, struct gw_sandbox *sb, int port, int fresh,
    const struct upstream_owner *owner, void *arg)
{
	struct uph2 *h = NULL;
	struct uph2_stream *s;
	struct upstream *up;

	if ((h = uph2_find(g, sb, port, fresh)) == NULL)
		h = uph2_new(g, sb, port);
	up = xcalloc(1, sizeof *up);
	s = xcalloc(1, sizeof *s);
	up->u_gw = g;
	up->u_key = xstrdup(h->h_conn->u_key);
	up->u_port = port;
	up->u_sandbox = sb;
	sandbox_ref(sb);
	up->u_owner = owner;
	up->u_owner_arg = arg;
	up->u_flags = UP_F_H2 | (h->h_served > 0 ? UP_F_REUSED : 0);
	up->u_timer = evtimer_new(g->g_base, uph2_stream_timer_cb, up);
	up->u_h2s = s;
	s->s_up = up;
	s->s_in = evbuffer_new();
	s->s_out = evbuffer_new();
	uph2_link(h, s);
	up->u_state =
	    h->h_state == UPH2_S_READY ? UP_S_ACTIVE : UP_S_CONNECTING;
	GW_ADD(g->g_metrics.m_upstream_h2_streams, 1);
	return (up);
}

/*
 * Submit the request head hd (h_method, h_target as :path, h_authority,
 * fields; HEAD_F_LENGTH for a content-length) on up's stream; body says a
 * body follows (upstream_h2_body_out, upstream_h2_body_more).
 */
void
upstream_h2_request(struct upstream *up, const struct head *hd, int body)
{
	struct uph2_stream *s = up->u_h2s;
	struct uph2 *h = s->s_h;
	nghttp2_data_provider dp;
	nghttp2_nv first[5], *nv;
	char len[24], auth[ADDR_STRLEN];
	size_t n, k = 0;
	int32_t id;

#define UPH2_NV(nm, v, vl) \
	do { \
		first[k].name = (uint8_t *)(uintptr_t)(nm); \
		first[k].namelen = sizeof(nm) - 1; \
		first[k].value = (uint8_t *)(uintptr_t)(v); \
		first[k].valuelen = (vl); \
		first[k++].flags = NGHTTP2_NV_FLAG_NONE; \
	} while (0)
	UPH2_NV(":method", hd->h_method, hd->h_method_len);
	UPH2_NV(":scheme", "http", 4);
	if (hd->h_authority != NULL)
		UPH2_NV(":authority", hd->h_authority, hd->h_authority_len);
	else {
		/* An HTTP/1.0 request without Host: the port itself. */
		upstream_addr_format(up, auth, sizeof auth);
		UPH2_NV(":authority", auth, strlen(auth));
	}
	UPH2_NV(":path", hd->h_target, hd->h_target_len);
	if (hd->h_flags & HEAD_F_LENGTH) {
		snprintf(len, sizeof len, "%llu",
		    (unsigned long long)hd->h_length);
		UPH2_NV("content-length", len, strlen(len));
	}
#undef UPH2_NV
	nv = h2s_nv(first, k, hd->h_fields, hd->h_nfields, 0, &n);
	dp.source.ptr = s;
	dp.read_callback = uph2_body_cb;
	if (!body)
		s->s_flags |= S_F_REQ_END;
	id = nghttp2_submit_request(h->h_ng, NULL, nv, n, body ? &dp : NULL, s);
	free(nv);
	if (id < 0) {
		/* Out of ids or memory: the connection takes no more. */
		s->s_flags |= S_F_LOST;
		s->s_why = xstrdup(nghttp2_strerror(id));
		uph2_drain(h, s->s_why);
		uph2_note(s);
		return;
	}
	s->s_id = id;
	if ((uint32_t)id >= UPH2_LAST_ID)
		uph2_drain(h, "stream ids used up");
	uph2_kick(h);
}

/* Where the owner puts request body bytes for up's stream. */
struct evbuffer *
upstream_h2_body_out(struct upstream *up)
{
	return (up->u_h2s->s_out);
}

/* The owner put body bytes in (done: all of them): send them. */
void
upstream_h2_body_more(struct upstream *up, int done)
{
	struct uph2_stream *s = up->u_h2s;
	struct uph2 *h = s->s_h;

	if (h == NULL || h->h_ng == NULL || s->s_id <= 0 ||
	    (s->s_flags & S_F_CLOSED))
		return;
	if (done)
		s->s_flags |= S_F_REQ_END;
	if ((s->s_flags & S_F_DEFERRED) &&
	    (done || evbuffer_get_length(s->s_out) > 0)) {
		s->s_flags &= ~S_F_DEFERRED;
		(void)nghttp2_session_resume_data(h->h_ng, s->s_id);
	}
	uph2_kick(h);
}

/*
 * The connections of sandbox id (NULL: every one; stale: those the
 * directory no longer has as they were) take no new streams; idle ones
 * close now, busy ones when their streams are done.  At shutdown (id
 * NULL, not stale) all close now.
 */
void
upstream_h2_flush(struct gw *g, const char *id, int stale)
{
	struct uph2 *h, *next;
	struct gw_sandbox *sb;

	for (h = TAILQ_FIRST(&g->g_h2all); h != NULL; h = next) {
		next = TAILQ_NEXT(h, h_all);
		sb = h->h_conn->u_sandbox;
		if (id == NULL && !stale) {
			uph2_close(h, "pool flushed");
			continue;
		}
		if (stale ? directory_find(g->g_dir, sb->sb_id) == sb
			  : strcmp(sb->sb_id, id) != 0)
			continue;
		uph2_drain(h, "sandbox removed from the directory");
	}
}
