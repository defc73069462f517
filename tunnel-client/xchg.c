/*
 * HTTP exchanges (tunnel-protocol.md §4.4–§4.9, §6, §8.5–§8.8, §9.6,
 * §9.7): one struct tun_xchg per sandbox request id, from the request frame
 * to the last acknowledged response byte. Exchanges belong to the session,
 * not to a connection: a reconnect pauses them and the sandbox's replayed
 * frames and windows resume them.
 *
 * Request side: the fast path (http_req) carries the whole body; a streamed
 * request (http_req_begin) gets `window` credits, its chunks wait in a
 * queue of at most `window` chunks and each one handed to the target gives
 * one credit back, so a slow target slows the sandbox's reader.
 *
 * Response side: a known Content-Length up to the fast-path limit in reply
 * to http_req gives one http_resp; everything else is http_resp_begin, data
 * envelopes with offsets (one per credit, read from the target only while
 * credits remain) and http_resp_end. Sent chunks are kept until the sandbox
 * acknowledges them, so a reconnect replays from its ack_offset.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "tun.h"

static void xchg_pump(struct tun_xchg *);
static void xchg_feed(struct tun_xchg *);

/* The exchange with id, or NULL. */
static struct tun_xchg *
xchg_find(struct tun *t, const char *id)
{
	return (idmap_find(&t->t_xchg_ids, id));
}

/* Free an exchange's memory; it is off every list. */
static void
xchg_free(struct tun_xchg *x)
{
	if (x->x_head != NULL)
		evbuffer_free(x->x_head);
	if (x->x_body != NULL)
		evbuffer_free(x->x_body);
	if (x->x_fast != NULL)
		evbuffer_free(x->x_fast);
	chunks_free(&x->x_reqq);
	chunks_free(&x->x_kept);
	http1_msg_reset(&x->x_resp);
	if (x->x_timer != NULL)
		event_free(x->x_timer);
	free(x->x_begin);
	free(x->x_method);
	free(x->x_path);
	free(x->x_id);
	free(x);
}

/* Deferred free, from the loop. */
static void
xchg_free_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	xchg_free(arg);
}

/* Stop counting x toward max_inflight. */
static void
xchg_not_running(struct tun_xchg *x)
{
	if (x->x_flags & TX_F_RUNNING) {
		x->x_flags &= ~TX_F_RUNNING;
		x->x_tun->t_running--;
	}
}

/*
 * End an exchange for reason: the one way each ends. Its target connection
 * (if it still has one) is closed, a tombstone absorbs late data when tomb
 * is set, and the memory goes from the loop.
 */
static void
xchg_close(struct tun_xchg *x, int tomb, const char *reason)
{
	struct tun *t = x->x_tun;
	struct tun_target *tt;

	if (x->x_state == TX_S_DEAD)
		return;
	log_debug("exchange %s closed: %s", x->x_id, reason);
	if (x->x_state == TX_S_FINISHED)
		t->t_nfinished--;
	x->x_state = TX_S_DEAD;
	xchg_not_running(x);
	if (x->x_flags & TX_F_POOLQ) {
		TAILQ_REMOVE(&t->t_waiting, x, x_wait);
		x->x_flags &= ~TX_F_POOLQ;
	}
	if (x->x_flags & TX_F_PROBEQ) {
		TAILQ_REMOVE(&t->t_probeq, x, x_wait);
		x->x_flags &= ~TX_F_PROBEQ;
	}
	evtimer_del(x->x_timer);
	TAILQ_REMOVE(&t->t_xchgs, x, x_entry);
	idmap_del(&t->t_xchg_ids, x->x_id);
	if (tomb)
		tombs_add(&t->t_tombs, x->x_id, clock_mono_msec());
	if ((tt = x->x_tt) != NULL) {
		x->x_tt = NULL;
		tt->tt_x = NULL;
		target_close(tt, reason);
	}
	if (event_base_once(t->t_base, -1, EV_TIMEOUT, xchg_free_cb, x, NULL) !=
	    0)
		xchg_free(x);
}

/*
 * Log an exchange's outcome with -v at level lvl: method, path without
 * query, result.
 */
static void __attribute__((format(printf, 3, 4)))
xchg_log(const struct tun_xchg *x, enum log_level lvl, const char *fmt, ...)
{
	va_list ap;
	char *what;

	if (!x->x_tun->t_opts->verbose)
		return;
	va_start(ap, fmt);
	xvasprintf(&what, fmt, ap);
	va_end(ap);
	log_msg(lvl, "%s %.*s %s (%llu bytes up, %llu bytes down, %llu ms)",
	    x->x_method, (int)strcspn(x->x_path, "?"), x->x_path, what,
	    (unsigned long long)(x->x_req_received + x->x_body_len),
	    (unsigned long long)x->x_resp_bytes,
	    (unsigned long long)(clock_mono_msec() - x->x_started));
	free(what);
}

/*
 * Deliver a fast-path outcome (http_resp or error) for id: sent now if a
 * connection is open, and kept in the completed-response cache for
 * replays and for the next connection (§8.5).
 */
static void
xchg_result(struct tun *t, const char *id, const struct tunproto_msg *m)
{
	struct tun_cache_entry *e;
	uint64_t gen = tun_conn_gen(t);
	size_t len;
	char *frame;
	int sent = 0;

	if ((frame = tunproto_msg_encode(m, &len)) == NULL) {
		log_error("exchange %s: cannot encode the %s", id,
		    tunproto_type_name(m->m_type));
		return;
	}
	if (gen != 0)
		sent = tun_send_text(t, frame, len) == 0;
	e = cache_put(&t->t_cache, id, frame, len, clock_mono_msec());
	if (e != NULL && sent)
		e->ce_sent_gen = gen;
}

/* An error outcome for id, as xchg_result. */
static void
xchg_error(struct tun *t, const char *id, const char *message)
{
	struct tunproto_msg m;

	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_ERROR;
	m.m_id = (char *)(uintptr_t)id;
	m.m_message = (char *)(uintptr_t)message;
	xchg_result(t, id, &m);
}

/* The exchange failed: the sandbox gets an error with why (§9.6). */
static void
xchg_fail(struct tun_xchg *x, const char *why)
{
	struct tun *t = x->x_tun;

	t->t_stats.st_failed++;
	/* The one line about a failure; target_warn is quiet with -v. */
	xchg_log(x, LOG_LVL_WARN, "failed: %s", why);
	if (!x->x_tun->t_opts->verbose)
		log_debug("exchange %s failed: %s", x->x_id, why);
	xchg_error(t, x->x_id, why);
	xchg_close(x, 1, why);
}

/* The timer of an exchange: pool wait, resume wait or ack wait ran out. */
static void
xchg_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tun_xchg *x = arg;

	(void)fd;
	(void)what;
	if (x->x_flags & (TX_F_POOLQ | TX_F_PROBEQ))
		xchg_fail(
		    x, "timed out waiting for a free connection to the target");
	else if (x->x_state == TX_S_FINISHED)
		xchg_close(x, 1, "the sandbox never confirmed the response");
	else if (x->x_flags & TX_F_REWIND)
		xchg_fail(x, "the sandbox did not resume the response stream");
}

/* Arm the exchange's timer for secs seconds. */
static void
xchg_timer(struct tun_xchg *x, double secs)
{
	struct timeval tv;

	clock_msec_to_tv((uint64_t)(secs * 1000), &tv);
	evtimer_add(x->x_timer, &tv);
}

/* A new exchange for the request frame m. */
static struct tun_xchg *
xchg_new(struct tun *t, const struct tunproto_msg *m, int stream)
{
	struct tun_xchg *x;

	x = xcalloc(1, sizeof *x);
	x->x_tun = t;
	x->x_id = xstrdup(m->m_id);
	x->x_method = xstrdup(m->m_method);
	x->x_path = xstrdup(m->m_path);
	x->x_state = TX_S_WAITING;
	x->x_flags = TX_F_RUNNING | (stream ? TX_F_STREAM_REQ : 0);
	if (strcmp(m->m_method, "HEAD") == 0)
		x->x_flags |= TX_F_HEAD;
	x->x_started = clock_mono_msec();
	if ((x->x_timer = evtimer_new(t->t_base, xchg_timer_cb, x)) == NULL)
		abort();
	t->t_running++;
	TAILQ_INSERT_TAIL(&t->t_xchgs, x, x_entry);
	/* Callers found no exchange with this id. */
	idmap_put(&t->t_xchg_ids, x->x_id, x);
	return (x);
}

/* Send the request to the target: get a connection first. */
static void
xchg_start(struct tun_xchg *x)
{
	struct tun *t = x->x_tun;

	t->t_stats.st_requests++;
	target_acquire(t, x);
	if (x->x_flags & (TX_F_POOLQ | TX_F_PROBEQ))
		xchg_timer(x, t->t_opts->http_timeout);
}

/*
 * Resend the stored outcome for id, as the reference client does for every
 * duplicate request (§4.4 step 2). Returns 1 if id had one.
 */
static int
xchg_replay_cached(struct tun *t, const char *id)
{
	struct tun_cache_entry *e;
	uint64_t gen = tun_conn_gen(t);

	if ((e = cache_find(&t->t_cache, id)) == NULL)
		return (0);
	t->t_stats.st_replays++;
	if (gen != 0 && tun_send_text(t, e->ce_frame, e->ce_len) == 0)
		e->ce_sent_gen = gen;
	return (1);
}

/* Send (or resend) the stored http_resp_begin on the open connection. */
static void
xchg_send_begin(struct tun_xchg *x)
{
	struct tun *t = x->x_tun;
	uint64_t gen = tun_conn_gen(t);

	if (gen == 0 || x->x_begin == NULL)
		return;
	if (tun_send_text(t, x->x_begin, strlen(x->x_begin)) == 0)
		x->x_begin_gen = gen;
}

/*
 * An http_req (§4.4): answer a duplicate from state, refuse over
 * max_inflight, or perform it. bad_body is set when only its base64 body
 * failed to decode.
 */
void
xchg_http_req(struct tun *t, struct tunproto_msg *m, int bad_body)
{
	const struct tunproto_limits *l = tun_limits(t);
	struct tun_xchg *x;
	struct evbuffer *head;
	char *path, *cause = NULL;
	uint64_t limit;

	cache_expire(&t->t_cache, clock_mono_msec());
	if (m->m_id == NULL || *m->m_id == '\0') {
		log_warn("tunnel: http_req without an id dropped");
		return;
	}
	x = xchg_find(t, m->m_id);
	if (x != NULL && (x->x_flags & TX_F_RESP_STREAM)) {
		t->t_stats.st_replays++;
		if (x->x_begin_gen != tun_conn_gen(t))
			xchg_send_begin(x);
		return;
	}
	if (xchg_replay_cached(t, m->m_id))
		return;
	if (x != NULL) {
		t->t_stats.st_replays++;
		log_debug(
		    "exchange %s: duplicate request, already running", m->m_id);
		return;
	}
	if (t->t_running >= l->l_max_inflight) {
		tun_send_error(t, m->m_id, "tunnel max_inflight limit reached");
		return;
	}
	if (bad_body) {
		xchg_error(t, m->m_id, "http_req body is not valid base64");
		return;
	}
	limit = l->l_max_body_size < TUNPROTO_V1_BODY_MAX
	    ? l->l_max_body_size
	    : TUNPROTO_V1_BODY_MAX;
	if (m->m_body_len > limit) {
		xchg_error(t, m->m_id, "request body exceeds tunnel limit");
		return;
	}
	if ((path = target_join_path(
		 t->t_opts->target.u_path, m->m_path, &cause)) == NULL) {
		xchg_error(t, m->m_id, cause);
		free(cause);
		return;
	}
	head = target_request_head(t, m->m_method, path, m->m_headers,
	    m->m_nheaders, 0, m->m_body_len, &cause);
	free(path);
	if (head == NULL) {
		xchg_error(t, m->m_id, cause);
		free(cause);
		return;
	}
	x = xchg_new(t, m, 0);
	x->x_head = head;
	if ((x->x_body = evbuffer_new()) == NULL)
		abort();
	if (m->m_body_len != 0)
		evbuffer_add(x->x_body, m->m_body, m->m_body_len);
	x->x_body_len = m->m_body_len;
	t->t_stats.st_bytes_up += m->m_body_len;
	xchg_start(x);
}

/* Refuse a streamed request for id: error, and absorb what follows. */
static void
xchg_refuse_stream(struct tun *t, const char *id, const char *why)
{
	tun_send_error(t, id, why);
	tombs_add(&t->t_tombs, id, clock_mono_msec());
}

/* The window answering a replayed http_req_begin (§4.6 step 3). */
static void
xchg_replay_window(struct tun_xchg *x)
{
	const struct tunproto_limits *l = tun_limits(x->x_tun);
	uint64_t window = l->l_stream_window_frames, queued;

	queued = x->x_reqq.cq_count;
	tun_send_window(x->x_tun, x->x_id,
	    window > queued ? window - queued : 0, x->x_req_consumed);
}

/* An http_req_begin (§4.6), from a V2 connection with a UUID id. */
void
xchg_req_begin(struct tun *t, struct tunproto_msg *m)
{
	const struct tunproto_limits *l = tun_limits(t);
	struct tun_xchg *x;
	struct evbuffer *head;
	char *path, *cause = NULL;
	int known = (m->m_flags & TUNPROTO_MSG_F_CONTENT_LENGTH) != 0;

	if ((x = xchg_find(t, m->m_id)) != NULL) {
		t->t_stats.st_replays++;
		if ((x->x_flags & TX_F_STREAM_REQ) &&
		    !(x->x_flags & TX_F_REQ_DONE))
			xchg_replay_window(x);
		else if (x->x_flags & TX_F_RESP_STREAM) {
			if (x->x_begin_gen != tun_conn_gen(t))
				xchg_send_begin(x);
		} else if (x->x_flags & TX_F_STREAM_REQ)
			xchg_replay_window(x);
		return;
	}
	if (xchg_replay_cached(t, m->m_id))
		return;
	if (known && m->m_content_length > l->l_max_body_size) {
		xchg_refuse_stream(
		    t, m->m_id, "request body exceeds tunnel limit");
		return;
	}
	if (t->t_running >= l->l_max_inflight) {
		xchg_refuse_stream(
		    t, m->m_id, "tunnel max_inflight limit reached");
		return;
	}
	if ((path = target_join_path(
		 t->t_opts->target.u_path, m->m_path, &cause)) == NULL) {
		xchg_refuse_stream(t, m->m_id, cause);
		free(cause);
		return;
	}
	head = target_request_head(t, m->m_method, path, m->m_headers,
	    m->m_nheaders, known ? 1 : 2, m->m_content_length, &cause);
	free(path);
	if (head == NULL) {
		xchg_refuse_stream(t, m->m_id, cause);
		free(cause);
		return;
	}
	x = xchg_new(t, m, 1);
	x->x_head = head;
	if (known) {
		x->x_flags |= TX_F_REQ_CL;
		x->x_req_cl = m->m_content_length;
	} else
		x->x_flags |= TX_F_REQ_CHUNKED;
	chunks_init(&x->x_reqq, l->l_stream_window_frames);
	tun_send_window(t, x->x_id, l->l_stream_window_frames, 0);
	xchg_start(x);
}

/* The whole request body arrived; check its length (§4.6). */
static void
xchg_req_ended(struct tun_xchg *x)
{
	if ((x->x_flags & TX_F_REQ_CL) && x->x_req_received != x->x_req_cl) {
		xchg_fail(x, "request content length mismatch");
		return;
	}
	x->x_flags |= TX_F_REQ_ENDED;
	xchg_feed(x);
}

/*
 * Request data (kind 0x01) for a streamed request (§4.6); its payload is
 * all of payload, and moves from there into the request queue.
 */
void
xchg_req_data(struct tun *t, const struct tunproto_env *env,
    struct evbuffer *payload)
{
	const struct tunproto_limits *l = tun_limits(t);
	struct tun_xchg *x;
	uint64_t off = env->e_offset, len = env->e_len, received;

	x = xchg_find(t, env->e_id);
	if (x == NULL || !(x->x_flags & TX_F_STREAM_REQ)) {
		if (tombs_has(&t->t_tombs, env->e_id, clock_mono_msec()))
			return;
		tun_protocol_error(
		    t, "request data for unknown stream %s", env->e_id);
		return;
	}
	if (!(env->e_flags & TUNPROTO_ENV_F_OFFSET)) {
		tun_protocol_error(
		    t, "resumable request chunk is missing offset");
		return;
	}
	received = x->x_req_received;
	if (len != 0 && off + len <= received) {
		tun_send_window(t, x->x_id, 0, received);
		return;
	}
	if (off < received) {
		tun_protocol_error(t, "overlapping request chunk");
		return;
	}
	if (off > received) {
		tun_protocol_error(t, "request chunk gap");
		return;
	}
	if (x->x_flags & TX_F_REQ_ENDED)
		return;
	if (off + len > l->l_max_body_size) {
		xchg_fail(x, "request body exceeds tunnel limit");
		return;
	}
	if ((x->x_flags & TX_F_REQ_CL) && off + len > x->x_req_cl) {
		xchg_fail(x, "request content length mismatch");
		return;
	}
	if (len != 0) {
		if (x->x_reqq.cq_count >= l->l_stream_window_frames) {
			xchg_fail(
			    x, "request stream exceeded advertised window");
			return;
		}
		chunks_push(&x->x_reqq, payload, (size_t)len);
		x->x_req_received += len;
		t->t_stats.st_bytes_up += len;
	} else if (!(env->e_flags & TUNPROTO_ENV_F_END)) {
		/* An empty chunk took a credit and holds nothing: return it. */
		tun_send_window(t, x->x_id, 1, x->x_req_consumed);
		return;
	}
	if (env->e_flags & TUNPROTO_ENV_F_END)
		xchg_req_ended(x);
	else
		xchg_feed(x);
}

/* An http_req_end (§4.6). */
void
xchg_req_end(struct tun *t, const struct tunproto_msg *m)
{
	struct tun_xchg *x;

	x = xchg_find(t, m->m_id);
	if (x == NULL || !(x->x_flags & TX_F_STREAM_REQ)) {
		if (!tombs_has(&t->t_tombs, m->m_id, clock_mono_msec()))
			tun_protocol_error(
			    t, "http_req_end for unknown stream %s", m->m_id);
		return;
	}
	if (x->x_flags & TX_F_REQ_ENDED)
		return;
	xchg_req_ended(x);
}

/*
 * Hand queued request chunks to the target while its output is below
 * TUN_TARGET_WRITE_LOWAT; one credit goes back per chunk (§9.7). Once the
 * target is gone (the response ended first), chunks are dropped and
 * credited so the sandbox can finish.
 */
static void
xchg_feed(struct tun_xchg *x)
{
	struct tun *t = x->x_tun;
	struct evbuffer *out;
	size_t n;
	int chunked;

	if (!(x->x_flags & TX_F_STREAM_REQ) || (x->x_flags & TX_F_REQ_DONE) ||
	    x->x_state == TX_S_DEAD)
		return;
	if (x->x_flags & TX_F_REQ_DISCARD) {
		while ((n = chunks_pop(&x->x_reqq, NULL)) != 0) {
			x->x_req_consumed += n;
			tun_send_window(t, x->x_id, 1, x->x_req_consumed);
		}
		if (x->x_flags & TX_F_REQ_ENDED)
			x->x_flags |= TX_F_REQ_DONE;
		return;
	}
	if (x->x_tt == NULL || x->x_state == TX_S_WAITING)
		return;
	/* HTTP/2 frames the body itself. */
	chunked = (x->x_flags & TX_F_REQ_CHUNKED) && !target_is_h2(x->x_tt);
	while (x->x_reqq.cq_count != 0 &&
	    target_output(x->x_tt) < TUN_TARGET_WRITE_LOWAT) {
		out = target_outbuf(x->x_tt);
		n = chunks_len(&x->x_reqq, 0);
		if (chunked)
			http1_chunk_header(out, n);
		chunks_pop(&x->x_reqq, out);
		if (chunked)
			http1_chunk_trailer(out);
		x->x_req_consumed += n;
		tun_send_window(t, x->x_id, 1, x->x_req_consumed);
		if (x->x_state == TX_S_DEAD || x->x_tt == NULL)
			return;
	}
	if ((x->x_flags & TX_F_REQ_ENDED) && x->x_reqq.cq_count == 0) {
		if (chunked)
			http1_chunk_last(target_outbuf(x->x_tt));
		x->x_flags |= TX_F_REQ_DONE;
		target_request_end(x->x_tt);
	}
}

/* A target connection is ready for x: write the request. */
void
xchg_target_ready(struct tun_xchg *x)
{
	size_t len;
	char *err = NULL;

	if (x->x_state != TX_S_WAITING || x->x_tt == NULL)
		return;
	evtimer_del(x->x_timer);
	/* Copies: a stale keep-alive connection means one retry. */
	if (target_send_head(x->x_tt, x->x_head,
		(x->x_flags & TX_F_STREAM_REQ) ||
		    evbuffer_get_length(x->x_body) != 0,
		&err) != 0) {
		xchg_fail(x, err);
		free(err);
		return;
	}
	if (!(x->x_flags & TX_F_STREAM_REQ)) {
		if ((len = evbuffer_get_length(x->x_body)) != 0)
			evbuffer_add(target_outbuf(x->x_tt),
			    evbuffer_pullup(x->x_body, -1), len);
		x->x_flags |= TX_F_REQ_DONE;
		target_request_end(x->x_tt);
	}
	x->x_state = TX_S_REQUEST;
	xchg_feed(x);
	if (x->x_state != TX_S_DEAD)
		xchg_pump(x);
}

/* The target's output drained: more request body. */
void
xchg_target_writable(struct tun_xchg *x)
{
	xchg_feed(x);
}

/* Response bytes (or EOF) from the target. */
void
xchg_target_readable(struct tun_xchg *x)
{
	xchg_pump(x);
}

/*
 * The target connection failed. A fast-path request that got no answer on
 * a reused keep-alive connection is tried once more on a new one (the
 * target may have closed it while idle); anything else fails.
 */
void
xchg_target_failed(struct tun_xchg *x, const char *why)
{
	struct tun_target *tt;

	if (x->x_state == TX_S_DEAD)
		return;
	if (!(x->x_flags & TX_F_STREAM_REQ) && x->x_state == TX_S_REQUEST &&
	    (x->x_flags & TX_F_REUSED) && !(x->x_flags & TX_F_RETRIED)) {
		log_debug("exchange %s: %s on a reused connection; retrying",
		    x->x_id, why);
		if ((tt = x->x_tt) != NULL) {
			x->x_tt = NULL;
			tt->tt_x = NULL;
			target_close(tt, why);
		}
		http1_msg_reset(&x->x_resp);
		x->x_flags = (x->x_flags | TX_F_RETRIED) &
		    ~(TX_F_REUSED | TX_F_REQ_DONE);
		x->x_state = TX_S_WAITING;
		target_acquire(x->x_tun, x);
		if (x->x_flags & (TX_F_POOLQ | TX_F_PROBEQ))
			xchg_timer(x, x->x_tun->t_opts->http_timeout);
		return;
	}
	xchg_fail(x, why);
}

/* Parse the first Content-Length of a response head, if it is a number. */
static int
xchg_content_length(const struct http1_msg *m, uint64_t *out)
{
	const struct hfield *h;
	uint64_t v = 0;
	size_t i;

	if ((h = http1_msg_find(m, "content-length")) == NULL ||
	    h->value_len == 0 || h->value_len > 18)
		return (0);
	for (i = 0; i < h->value_len; i++) {
		if (h->value[i] < '0' || h->value[i] > '9')
			return (0);
		v = v * 10 + (uint64_t)(h->value[i] - '0');
	}
	*out = v;
	return (1);
}

/* Copy the target's response head into m: status and raw headers. */
static void
xchg_resp_headers(const struct tun_xchg *x, struct tunproto_msg *m)
{
	size_t i;

	m->m_status = x->x_resp.m_status;
	for (i = 0; i < x->x_resp.m_nheaders; i++)
		tunproto_msg_add_header(m, x->x_resp.m_headers[i].name,
		    x->x_resp.m_headers[i].value);
}

/*
 * The response head arrived (§4.7, §9.6): choose the fast path or a
 * stream, and for a stream send http_resp_begin. Returns -1 if x ended.
 */
static int
xchg_head(struct tun_xchg *x)
{
	struct tun *t = x->x_tun;
	const struct tunproto_limits *l = tun_limits(t);
	struct tunproto_msg m;
	int st = x->x_resp.m_status, fast;

	x->x_status = st;
	if (!(x->x_flags & TX_F_HEAD) && st >= 200 && st != 204 && st != 304)
		x->x_flags |= TX_F_BODY;
	if (xchg_content_length(&x->x_resp, &x->x_resp_cl))
		x->x_flags |= TX_F_RESP_CL;
	if (x->x_head != NULL) {
		evbuffer_free(x->x_head);
		x->x_head = NULL;
	}
	if (x->x_body != NULL) {
		evbuffer_free(x->x_body);
		x->x_body = NULL;
	}

	/*
	 * Envelopes carry only UUIDs: a request with another id (a V1-style
	 * peer) gets one http_resp, as in V1 (§3.3).
	 */
	fast = !t->t_v2 || !tunproto_uuid_valid(x->x_id) ||
	    (!(x->x_flags & TX_F_STREAM_REQ) && (x->x_flags & TX_F_RESP_CL) &&
		x->x_resp_cl <= l->l_fast_path_body);
	x->x_state = TX_S_RESPONSE;
	if (fast) {
		if ((x->x_flags & TX_F_BODY) && (x->x_flags & TX_F_RESP_CL) &&
		    x->x_resp_cl > l->l_max_body_size) {
			xchg_fail(x, "response body exceeds tunnel limit");
			return (-1);
		}
		if ((x->x_fast = evbuffer_new()) == NULL)
			abort();
		return (0);
	}
	if ((x->x_flags & TX_F_BODY) && (x->x_flags & TX_F_RESP_CL) &&
	    x->x_resp_cl > l->l_max_body_size) {
		xchg_fail(x, "response body exceeds tunnel limit");
		return (-1);
	}
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_HTTP_RESP_BEGIN;
	m.m_id = x->x_id;
	xchg_resp_headers(x, &m);
	if (x->x_flags & TX_F_RESP_CL) {
		m.m_flags |= TUNPROTO_MSG_F_CONTENT_LENGTH;
		m.m_content_length = x->x_resp_cl;
	}
	x->x_begin = tunproto_msg_encode(&m, NULL);
	m.m_id = NULL;
	tunproto_msg_free(&m);
	if (x->x_begin == NULL) {
		xchg_fail(x,
		    "response headers cannot be sent through the "
		    "tunnel");
		return (-1);
	}
	x->x_flags |= TX_F_RESP_STREAM;
	chunks_init(&x->x_kept, l->l_stream_window_frames);
	xchg_send_begin(x);
	return (x->x_state == TX_S_DEAD ? -1 : 0);
}

/* Is the target connection worth keeping after this exchange? */
static int
xchg_reusable(const struct tun_xchg *x)
{
	return (x->x_tt != NULL && (x->x_flags & TX_F_REQ_DONE) &&
	    target_keepalive(x->x_tt, &x->x_resp));
}

/* Give the target connection back (to the pool if it can be reused). */
static void
xchg_release_target(struct tun_xchg *x)
{
	struct tun_target *tt = x->x_tt;
	int reusable = xchg_reusable(x);

	if (tt == NULL)
		return;
	if (!(x->x_flags & TX_F_REQ_DONE))
		x->x_flags |= TX_F_REQ_DISCARD;
	x->x_tt = NULL;
	target_release(tt, reusable);
}

/* Read a fast-path response body; once whole, send http_resp. */
static void
xchg_fast(struct tun_xchg *x)
{
	struct tun *t = x->x_tun;
	const struct tunproto_limits *l = tun_limits(t);
	struct tunproto_msg m;
	uint64_t limit;
	size_t moved, have;
	char *err = NULL;
	int rv;

	if (t->t_v2 && (x->x_flags & TX_F_RESP_CL) &&
	    x->x_resp_cl <= l->l_fast_path_body)
		limit = x->x_resp_cl;
	else
		limit = l->l_max_body_size < TUNPROTO_V1_BODY_MAX
		    ? l->l_max_body_size
		    : TUNPROTO_V1_BODY_MAX;
	for (;;) {
		if (x->x_tt == NULL)
			return;
		have = evbuffer_get_length(x->x_fast);
		rv = target_read_body(
		    x->x_tt, x->x_fast, limit + 1 - have, &moved, &err);
		if (rv < 0) {
			xchg_fail(x, err);
			free(err);
			return;
		}
		x->x_resp_bytes += moved;
		t->t_stats.st_bytes_down += moved;
		if (evbuffer_get_length(x->x_fast) > limit) {
			xchg_fail(x,
			    t->t_v2 ? "response body exceeds tunnel "
				      "limit"
				    : "response body requires tunnel "
				      "protocol V2");
			return;
		}
		if (rv == 1)
			break;
		if (moved == 0)
			return;
	}

	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_HTTP_RESP;
	m.m_id = x->x_id;
	xchg_resp_headers(x, &m);
	have = evbuffer_get_length(x->x_fast);
	tunproto_msg_set_body(&m, evbuffer_pullup(x->x_fast, -1), have);
	xchg_result(t, x->x_id, &m);
	m.m_id = NULL;
	tunproto_msg_free(&m);
	xchg_log(x, LOG_LVL_INFO, "-> %d", x->x_status);
	xchg_release_target(x);
	xchg_close(x, 0, "answered");
}

/* The target's body is complete: free the connection, stop counting. */
static void
xchg_resp_ended(struct tun_xchg *x)
{
	struct tun *t = x->x_tun;
	struct tun_xchg *old;

	x->x_flags |= TX_F_RESP_ENDED;
	x->x_state = TX_S_FINISHED;
	t->t_nfinished++;
	xchg_not_running(x);
	xchg_release_target(x);
	xchg_feed(x);
	xchg_timer(x, t->t_opts->http_timeout);
	xchg_log(x, LOG_LVL_INFO, "-> %d", x->x_status);
	/* Streams waiting only for acks are bounded like tombstones. */
	while (t->t_nfinished > TUN_TOMB_MAX) {
		TAILQ_FOREACH (old, &t->t_xchgs, x_entry) {
			if (old->x_state == TX_S_FINISHED)
				break;
		}
		if (old == NULL)
			break;
		xchg_close(old, 1, "too many finished streams");
	}
}

/* Send http_resp_end, or the length mismatch error instead (§4.7). */
static void
xchg_send_end(struct tun_xchg *x)
{
	struct tun *t = x->x_tun;
	struct tunproto_msg m;

	if ((x->x_flags & TX_F_BODY) && (x->x_flags & TX_F_RESP_CL) &&
	    x->x_resp_bytes != x->x_resp_cl) {
		xchg_fail(x, "response content length mismatch");
		return;
	}
	memset(&m, 0, sizeof m);
	m.m_type = TUNPROTO_T_HTTP_RESP_END;
	m.m_id = x->x_id;
	if (tun_send_msg(t, &m) == 0) {
		x->x_flags |= TX_F_END_SENT;
		xchg_timer(x, TUN_TOMB_TTL_MS / 1000.0);
	}
}

/*
 * Move a streamed response along: send kept chunks the sandbox has not
 * got, one per credit; then read new data from the target only while
 * credits and room remain (§6.1), so a slow sandbox leaves the target's
 * bytes in the kernel; then the end.
 */
static void
xchg_stream(struct tun_xchg *x)
{
	struct tun *t = x->x_tun;
	const struct tunproto_limits *l = tun_limits(t);
	struct tun_chunks *kq = &x->x_kept;
	uint64_t off, cap;
	size_t moved, len, chunk = (size_t)l->l_max_stream_chunk;
	char *err = NULL;
	int rv;

	cap = 2 * l->l_stream_window_frames * l->l_max_stream_chunk;
	if (t->t_gw_tls != NULL && chunk > TUNPROTO_CHUNK_TLS)
		chunk = TUNPROTO_CHUNK_TLS;
	for (;;) {
		if (x->x_state == TX_S_DEAD || (x->x_flags & TX_F_REWIND) ||
		    !tun_connected(t) || x->x_begin_gen == 0)
			return;
		while (x->x_unsent < kq->cq_count && x->x_credits > 0 &&
		    tun_send_room(t)) {
			off = chunks_offset(kq, x->x_unsent);
			len = chunks_len(kq, x->x_unsent);
			if (tun_send_data(t, TUNPROTO_ENV_HTTP_RESPONSE_DATA,
				x->x_id, off, TUNPROTO_ENV_F_OFFSET, kq->cq_buf,
				(size_t)(off - kq->cq_base), len) != 0)
				return;
			x->x_unsent++;
			x->x_credits--;
		}
		if (x->x_unsent < kq->cq_count)
			return;
		if (x->x_flags & TX_F_RESP_ENDED) {
			if (!(x->x_flags & TX_F_END_SENT))
				xchg_send_end(x);
			return;
		}
		if (x->x_tt == NULL || x->x_credits == 0 || !tun_send_room(t))
			return;
		/*
		 * With frames in flight, wait for a whole chunk: the window
		 * counts frames, so small ones starve a bulk transfer.  When
		 * every credit is back the pipe is idle and a small piece
		 * goes at once (an SSE event is not held).
		 */
		if (x->x_credits < l->l_stream_window_frames &&
		    target_body_short(x->x_tt, chunk))
			return;
		/* Kept bytes the sandbox never acknowledges are let go. */
		while (
		    evbuffer_get_length(kq->cq_buf) >= cap && x->x_unsent > 0) {
			chunks_pop(kq, NULL);
			x->x_unsent--;
		}
		rv = target_read_body(x->x_tt, t->t_tmp, chunk, &moved, &err);
		if (rv < 0) {
			evbuffer_drain(t->t_tmp, evbuffer_get_length(t->t_tmp));
			xchg_fail(x, err);
			free(err);
			return;
		}
		if (moved != 0) {
			x->x_resp_bytes += moved;
			t->t_stats.st_bytes_down += moved;
			if ((x->x_flags & TX_F_BODY) &&
			    x->x_resp_bytes > l->l_max_body_size) {
				evbuffer_drain(t->t_tmp, moved);
				xchg_fail(
				    x, "response body exceeds tunnel limit");
				return;
			}
			chunks_push(kq, t->t_tmp, moved);
		}
		if (rv == 1) {
			xchg_resp_ended(x);
			continue;
		}
		if (moved == 0)
			return;
	}
}

/* Move an exchange along after any event: response head, then body. */
static void
xchg_pump(struct tun_xchg *x)
{
	char *err = NULL;
	int rv;

	if (x->x_tt != NULL)
		target_read_resume(x->x_tt);
	if (x->x_state == TX_S_REQUEST) {
		if (x->x_tt == NULL)
			return;
		rv = target_read_head(
		    x->x_tt, &x->x_resp, (x->x_flags & TX_F_HEAD) != 0, &err);
		if (rv == 0)
			return;
		if (rv < 0) {
			xchg_target_failed(x, err);
			free(err);
			return;
		}
		if (xchg_head(x) != 0)
			return;
	}
	if (x->x_state != TX_S_RESPONSE && x->x_state != TX_S_FINISHED)
		return;
	if (x->x_flags & TX_F_RESP_STREAM)
		xchg_stream(x);
	else
		xchg_fast(x);
}

/*
 * A window for a streamed response (§4.8, §8.6): credits, the ack that
 * frees kept chunks, "complete", and after a reconnect the rewind to the
 * sandbox's ack_offset.
 */
void
xchg_window(struct tun *t, const struct tunproto_msg *m)
{
	const struct tunproto_limits *l = tun_limits(t);
	struct tun_xchg *x;
	struct tun_chunks *kq;
	uint64_t window = l->l_stream_window_frames, ack, sent;
	size_t dropped;
	char why[128];

	x = xchg_find(t, m->m_id);
	if (x == NULL || !(x->x_flags & TX_F_RESP_STREAM)) {
		log_debug(
		    "tunnel: window for unknown stream %s ignored", m->m_id);
		return;
	}
	kq = &x->x_kept;
	if (m->m_flags & TUNPROTO_MSG_F_COMPLETE) {
		xchg_close(x, 1, "the sandbox delivered the response");
		return;
	}
	if (x->x_flags & TX_F_REWIND) {
		ack = (m->m_flags & TUNPROTO_MSG_F_ACK_OFFSET) ? m->m_ack_offset
							       : kq->cq_base;
		if (chunks_index_of(kq, ack) == SIZE_MAX) {
			snprintf(why, sizeof why,
			    "cannot resume the response stream at offset "
			    "%llu",
			    (unsigned long long)ack);
			xchg_fail(x, why);
			return;
		}
		chunks_drop_below(kq, ack);
		x->x_unsent = 0;
		x->x_credits = m->m_credits < window ? m->m_credits : window;
		x->x_flags &= ~TX_F_REWIND;
		if (x->x_state == TX_S_FINISHED)
			xchg_timer(x, TUN_TOMB_TTL_MS / 1000.0);
		else
			evtimer_del(x->x_timer);
		log_debug("exchange %s: resuming at offset %llu", x->x_id,
		    (unsigned long long)ack);
	} else {
		if (m->m_flags & TUNPROTO_MSG_F_ACK_OFFSET) {
			sent = chunks_offset(kq, x->x_unsent);
			if (m->m_ack_offset <= sent) {
				dropped = chunks_drop_below(
				    kq, m->m_ack_offset);
				x->x_unsent -= dropped < x->x_unsent
				    ? dropped
				    : x->x_unsent;
			} else
				log_debug("exchange %s: ack beyond the sent "
					  "data ignored",
				    x->x_id);
		}
		x->x_credits += m->m_credits;
		if (x->x_credits > window)
			x->x_credits = window;
	}
	xchg_pump(x);
}

/* An error from the sandbox cancels that one exchange (§4.9). */
void
xchg_peer_error(struct tun *t, const struct tunproto_msg *m)
{
	struct tun_xchg *x;
	char why[256];

	cache_remove(&t->t_cache, m->m_id);
	if ((x = xchg_find(t, m->m_id)) == NULL)
		return;
	snprintf(why, sizeof why, "cancelled by the sandbox: %s", m->m_message);
	xchg_log(x, LOG_LVL_INFO, "%s", why);
	xchg_close(x, 1, why);
}

/*
 * A connection opened (after our hello): send what became ready while
 * there was none, results and response heads (§8.5, §8.6).
 */
void
xchg_connected(struct tun *t)
{
	struct tun_cache_entry *e;
	struct tun_xchg *x;
	uint64_t gen = tun_conn_gen(t);

	TAILQ_FOREACH (e, &t->t_cache.tc_list, ce_entry) {
		if (e->ce_sent_gen != 0)
			continue;
		if (tun_send_text(t, e->ce_frame, e->ce_len) != 0)
			return;
		e->ce_sent_gen = gen;
	}
	TAILQ_FOREACH (x, &t->t_xchgs, x_entry) {
		if ((x->x_flags & TX_F_RESP_STREAM) && x->x_begin_gen == 0)
			xchg_send_begin(x);
		if (!tun_connected(t))
			return;
	}
}

/*
 * The connection is gone: pause every streamed response until the sandbox
 * says where to resume (§8.6), for at most the HTTP timeout.
 */
void
xchg_disconnected(struct tun *t)
{
	struct tun_xchg *x;

	TAILQ_FOREACH (x, &t->t_xchgs, x_entry) {
		if (!(x->x_flags & TX_F_RESP_STREAM))
			continue;
		x->x_credits = 0;
		x->x_flags &= ~TX_F_END_SENT;
		if (x->x_begin_gen == 0)
			continue;
		x->x_flags |= TX_F_REWIND;
		xchg_timer(x, t->t_opts->http_timeout);
	}
}

/* The WebSocket can take more: move every streamed response along. */
void
xchg_pump_all(struct tun *t)
{
	struct tun_xchg *x, *next;

	for (x = TAILQ_FIRST(&t->t_xchgs); x != NULL; x = next) {
		next = TAILQ_NEXT(x, x_entry);
		if ((x->x_flags & TX_F_RESP_STREAM) &&
		    !(x->x_flags & TX_F_REWIND))
			xchg_pump(x);
		if (!tun_send_room(t))
			break;
	}
}

/* Free every exchange now; only outside the loop's callbacks. */
void
xchg_free_all(struct tun *t)
{
	struct tun_xchg *x;

	while ((x = TAILQ_FIRST(&t->t_xchgs)) != NULL) {
		TAILQ_REMOVE(&t->t_xchgs, x, x_entry);
		if (x->x_flags & TX_F_POOLQ)
			TAILQ_REMOVE(&t->t_waiting, x, x_wait);
		if (x->x_flags & TX_F_PROBEQ)
			TAILQ_REMOVE(&t->t_probeq, x, x_wait);
		if (x->x_tt != NULL)
			x->x_tt->tt_x = NULL;
		xchg_free(x);
	}
	idmap_free(&t->t_xchg_ids);
	t->t_running = 0;
	t->t_nfinished = 0;
}
