/*
 * The HTTP/1 server engine: one struct h1s per client connection, over a
 * transport (struct h1x: a stream (lib/stream.c), memory in the unit tests).
 *
 * It owns what every HTTP/1 server loop needs: the parse loop, request
 * bodies de-framed for the owner with flow control (h1s_body_read pulls),
 * one exchange at a time (a pipelined head is parsed only after the
 * response before it ended and the output drained below its low
 * watermark; until then its bytes wait in the input and reading stops
 * when the input is full, so the loop never spins), keep-alive, the
 * whole-head deadline, the idle, write and linger timers, 100-continue
 * when the owner starts reading the body, its own refusals of bad heads,
 * the response sink (HTTP/1 wire bytes; h1sink.c writes heads) and the
 * one close path.  The owner gets hooks (struct h1s_hooks) and answers
 * through h1s_sink; it may close the engine in any hook: the engine is
 * freed from the loop, never inside a callback of its own.
 */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "evb.h"
#include "gw.h"
#include "tq.h"

/* The sink is full at this much output unless the owner says. */
#define H1S_OUT_HIGH (256 * 1024)
/* Output left to drain after the end, unless the owner says. */
#define H1S_WRITE_MS (30 * 1000)
/* A response up to this size may wait for its body (HEAD_F_BODY_NOW). */
#define H1S_STAGE_MAX (12 * 1024)
/* Most body bytes one h1s_body_read moves (evb_take counts in int). */
#define H1S_READ_MAX ((size_t)1 << 30)
/*
 * Request states a thread keeps for reuse.  Under ASan there are none, so
 * that a use after the exchange ended is caught.
 */
#ifdef __SANITIZE_ADDRESS__
#define H1S_POOL_MAX 0
#else
#define H1S_POOL_MAX 32
#endif

/*
 * What one request needs from its first byte to the end of its exchange:
 * made then and given back then (to the thread's pool), so that an idle
 * keep-alive connection holds none of it.
 */
struct h1s_req {
	struct http1_msg r_msg;
	struct head r_head; /* r_msg's, while an exchange has it */
	struct http1_chunked r_chunked;
	uint64_t r_left; /* Content-Length body bytes still to come */
	uint64_t r_started_us; /* the head's first byte, monotonic */
	enum h1_frame r_frame; /* the response body's framing */
	int r_status; /* final status sent */
	uint64_t r_resp_left; /* H1_FRAME_LENGTH: body bytes still to send */
	struct evbuffer *r_stage; /* a small response put together, or NULL */
	struct h1s_req *r_next; /* in the pool */
};

struct h1s {
	struct h1x *hs_x; /* NULL once released */
	const struct h1s_conf *hs_conf;
	const struct h1s_hooks *hs_hooks;
	void *hs_arg;
	uint64_t hs_id;
	const char *hs_peer; /* the owner's, for as long as h lives */
	enum h1s_state hs_state;
	int hs_flags;
#define H1S_F_KEEPALIVE 0x0001 /* another request may follow this one */
#define H1S_F_HTTP10 0x0002 /* the request is HTTP/1.0 */
#define H1S_F_HEAD_REQ 0x0004 /* the request is HEAD: no body answered */
#define H1S_F_BODY_DONE 0x0008 /* the request body was read in full */
#define H1S_F_CONTINUE 0x0010 /* 100 Continue owed when the body is read */
#define H1S_F_RESP_STARTED 0x0020 /* the final head was sent */
#define H1S_F_RESP_DONE 0x0040 /* ... and the end */
#define H1S_F_TRAILERS 0x0080 /* the last chunk and trailers were sent */
#define H1S_F_EOF 0x0100 /* the peer ended its stream */
#define H1S_F_XCHG 0x0200 /* the owner has an exchange going */
#define H1S_F_RELEASED 0x0400 /* the connection went to another owner */
#define H1S_F_REFUSED 0x0800 /* the engine answered this request itself */
#define H1S_F_DEADLINE 0x1000 /* the idle timer is the head's deadline */
#define H1S_F_STAGED 0x2000 /* the response waits in r_stage (BODY_NOW) */
#define H1S_F_DRAIN 0x4000 /* the server is going: no request after this */
	struct tq *hs_tq; /* this loop's timer queue */
	struct tq_timer hs_timer; /* idle, head, body, write or linger */
	struct event *hs_kick; /* parse a waiting head, from the loop */
	struct h1s_req *hs_r; /* from the request's first byte, or NULL */
	uint64_t hs_body_in; /* request body bytes handed to the owner */
	struct sink hs_sink;
	uint64_t hs_body_out; /* response body bytes sent */
	unsigned hs_nreq; /* requests parsed */
	struct evbuffer_cb_entry *hs_sent_cb; /* h1s_count_sent's, or NULL */
	uint64_t hs_sent; /* output bytes the transport took */
};

static void h1s_kick_cb(evutil_socket_t, short, void *);
static void h1s_refuse(struct h1s *, int status, const char *code,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Name of a state, for debug logs. */
const char *
h1s_state_name(enum h1s_state s)
{
	switch (s) {
	case H1S_S_IDLE:
		return ("idle");
	case H1S_S_HEAD:
		return ("head");
	case H1S_S_XCHG:
		return ("exchange");
	case H1S_S_NEXT:
		return ("next");
	case H1S_S_CLOSING:
		return ("closing");
	case H1S_S_LINGER:
		return ("linger");
	case H1S_S_DEAD:
		return ("dead");
	}
	return ("?");
}

/* The state of h. */
enum h1s_state
h1s_state(const struct h1s *h)
{
	return (h->hs_state);
}

/* Print h's state, flags and counts into buf, for debug logs. */
char *
h1s_print(const struct h1s *h, char *buf, size_t len)
{
	static const struct {
		int f;
		const char *name;
	} names[] = { { H1S_F_KEEPALIVE, "keepalive" },
		{ H1S_F_HTTP10, "http10" }, { H1S_F_HEAD_REQ, "head_req" },
		{ H1S_F_BODY_DONE, "body_done" },
		{ H1S_F_CONTINUE, "continue" },
		{ H1S_F_RESP_STARTED, "resp_started" },
		{ H1S_F_RESP_DONE, "resp_done" },
		{ H1S_F_TRAILERS, "trailers" }, { H1S_F_EOF, "eof" },
		{ H1S_F_XCHG, "xchg" }, { H1S_F_RELEASED, "released" },
		{ H1S_F_REFUSED, "refused" }, { H1S_F_DEADLINE, "deadline" },
		{ H1S_F_DRAIN, "drain" } };
	char fl[160];
	size_t i, n = 0;

	fl[0] = '\0';
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		if ((h->hs_flags & names[i].f) && n < sizeof fl)
			n += (size_t)snprintf(fl + n, sizeof fl - n, "%s%s",
			    n > 0 ? "|" : "", names[i].name);
	}
	snprintf(buf, len, "state=%s flags=%s requests=%u in=%llu out=%llu",
	    h1s_state_name(h->hs_state), n > 0 ? fl : "-", h->hs_nreq,
	    (unsigned long long)h->hs_body_in,
	    (unsigned long long)h->hs_body_out);
	return (buf);
}

/* Arm the timer for ms milliseconds. */
static void
h1s_timer_set(struct h1s *h, uint64_t ms)
{
	tq_timer_set(h->hs_tq, &h->hs_timer, ms);
}

/* Output bytes not written yet. */
static size_t
h1s_outlen(const struct h1s *h)
{
	return (evbuffer_get_length(h->hs_x->hx_out));
}

/* This thread's spare request states, and how many. */
static const unsigned h1s_pool_max = H1S_POOL_MAX;
static __thread struct h1s_req *h1s_pool;
static __thread unsigned h1s_npool;
static pthread_key_t h1s_pool_key;
static pthread_once_t h1s_pool_once = PTHREAD_ONCE_INIT;

/* Free a request state. */
static void
h1s_req_free(struct h1s_req *r)
{
	http1_msg_reset(&r->r_msg);
	if (r->r_stage != NULL)
		evbuffer_free(r->r_stage);
	free(r);
}

/* A thread ends: free its pool (arg is only a marker). */
static void
h1s_pool_free_cb(void *arg)
{
	struct h1s_req *r;

	(void)arg;
	while ((r = h1s_pool) != NULL) {
		h1s_pool = r->r_next;
		h1s_req_free(r);
	}
	h1s_npool = 0;
}

/* Make the key whose destructor frees a thread's pool. */
static void
h1s_pool_init(void)
{
	/* Only PTHREAD_KEYS_MAX keys exist: none left is a bug. */
	if (pthread_key_create(&h1s_pool_key, h1s_pool_free_cb) != 0)
		abort();
}

/* The request state of h, made (or taken from the pool) on first use. */
static struct h1s_req *
h1s_req(struct h1s *h)
{
	struct h1s_req *r;

	if (h->hs_r != NULL)
		return (h->hs_r);
	if ((r = h1s_pool) != NULL) {
		h1s_pool = r->r_next;
		h1s_npool--;
		r->r_next = NULL;
	} else
		r = xcalloc(1, sizeof *r);
	h->hs_r = r;
	return (r);
}

/* Give h's request state back: to the pool, or free when it is full. */
static void
h1s_req_put(struct h1s *h)
{
	struct h1s_req *r = h->hs_r;
	struct evbuffer *stage;

	if (r == NULL)
		return;
	h->hs_r = NULL;
	if (h1s_npool >= h1s_pool_max) {
		h1s_req_free(r);
		return;
	}
	if (h1s_npool == 0) {
		pthread_once(&h1s_pool_once, h1s_pool_init);
		pthread_setspecific(h1s_pool_key, &h1s_pool_once);
	}
	http1_msg_reset(&r->r_msg);
	/* The staging buffer is empty between responses: kept with it. */
	stage = r->r_stage;
	if (stage != NULL)
		evbuffer_drain(stage, evbuffer_get_length(stage));
	memset(r, 0, sizeof *r);
	r->r_stage = stage;
	r->r_next = h1s_pool;
	h1s_pool = r;
	h1s_npool++;
}

/* Forget the request; its head is no longer the owner's. */
static void
h1s_reset_request(struct h1s *h)
{
	h1s_req_put(h);
	h->hs_flags &= ~(H1S_F_KEEPALIVE | H1S_F_HTTP10 | H1S_F_HEAD_REQ |
	    H1S_F_BODY_DONE | H1S_F_CONTINUE | H1S_F_RESP_STARTED |
	    H1S_F_RESP_DONE | H1S_F_TRAILERS | H1S_F_XCHG | H1S_F_REFUSED |
	    H1S_F_DEADLINE);
}

/* Free an engine; from the loop, after h1s_close. */
static void
h1s_free_cb(evutil_socket_t fd, short events, void *arg)
{
	struct h1s *h = arg;

	(void)fd;
	(void)events;
	if (h->hs_hooks->on_free != NULL)
		h->hs_hooks->on_free(h->hs_arg);
	if (h->hs_x != NULL)
		h->hs_x->hx_ops->xo_free(h->hs_x);
	h1s_req_put(h);
	tq_timer_stop(&h->hs_timer);
	tq_put(h->hs_tq);
	if (h->hs_kick != NULL)
		event_free(h->hs_kick);
	free(h);
}

/*
 * Close the connection, logging why: the one close path.  The owner hears
 * on_close now and on_free from the loop, where the engine is freed with
 * its transport (unless h1s_release took it).
 */
void
h1s_close(struct h1s *h, const char *reason)
{
	struct timeval tv = { 0, 0 };
	char st[160];

	if (h->hs_state == H1S_S_DEAD)
		return;
	log_debug("%s %llu %s: closed, %s: %s", h->hs_conf->hc_name,
	    (unsigned long long)h->hs_id, h->hs_peer,
	    h1s_print(h, st, sizeof st), reason);
	h->hs_state = H1S_S_DEAD;
	tq_timer_stop(&h->hs_timer);
	if (h->hs_kick != NULL)
		event_del(h->hs_kick);
	if (h->hs_x != NULL)
		h->hs_x->hx_ops->xo_read(h->hs_x, 0);
	if (h->hs_hooks->on_close != NULL)
		h->hs_hooks->on_close(h, h->hs_arg, reason);
	event_base_once(tq_base(h->hs_tq), -1, EV_TIMEOUT, h1s_free_cb, h, &tv);
}

/* The exchange ended without the owner's end: tell it once. */
static void
h1s_lost(struct h1s *h, const char *why)
{
	if (!(h->hs_flags & H1S_F_XCHG))
		return;
	h->hs_flags &= ~H1S_F_XCHG;
	if (h->hs_hooks->on_error != NULL)
		h->hs_hooks->on_error(h, h->hs_arg, why);
}

/*
 * Refuse the request with status, code and a sentence, then close: the
 * owner logs and counts it (on_log), gives up its exchange if it has one
 * (on_error), and the page goes through the sink, JSON or HTML by the
 * request's Accept.  Once a response began, the connection is cut.
 */
static void
h1s_refuse(struct h1s *h, int status, const char *code, const char *fmt, ...)
{
	struct h1s_refusal r;
	struct errpage ep;
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	memset(&r, 0, sizeof r);
	r.hr_status = status;
	r.hr_code = code;
	r.hr_message = msg;
	r.hr_head = h1s_head(h);
	h->hs_flags &= ~H1S_F_KEEPALIVE;
	h->hs_flags |= H1S_F_REFUSED;
	if (h->hs_hooks->on_log != NULL)
		h->hs_hooks->on_log(h, h->hs_arg, &r);
	if (h->hs_state != H1S_S_DEAD)
		h1s_lost(h, code);
	if (h->hs_state == H1S_S_DEAD) {
		free(msg);
		return;
	}
	if (h->hs_flags & H1S_F_RESP_STARTED) {
		h1s_close(h, code);
		free(msg);
		return;
	}
	memset(&ep, 0, sizeof ep);
	ep.ep_status = status;
	ep.ep_code = code;
	ep.ep_message = msg;
	ep.ep_flags = errpage_wants_html(r.hr_head) ? ERRPAGE_F_HTML : 0;
	errpage_send(&h->hs_sink, &ep);
	free(msg);
}

/* Take the next request: the idle timer runs; a waiting head is parsed. */
static void
h1s_next(struct h1s *h)
{
	h1s_reset_request(h);
	h->hs_state = H1S_S_IDLE;
	h1s_timer_set(h, h->hs_conf->hc_idle_ms);
	h->hs_x->hx_ops->xo_unhold(h->hs_x);
	/* From the loop: the owner may be inside a hook still. */
	if (evbuffer_get_length(h->hs_x->hx_in) != 0) {
		/* Made on first use: most connections never pipeline. */
		if (h->hs_kick == NULL)
			h->hs_kick = event_new(
			    tq_base(h->hs_tq), -1, 0, h1s_kick_cb, h);
		event_active(h->hs_kick, EV_TIMEOUT, 1);
	}
}

/*
 * The output drained: close now when the peer has ended or sent nothing
 * more than its whole request (a FIN, then, cannot destroy the answer),
 * else shut our side and drain what the peer still sends for a moment.
 */
static void
h1s_shut(struct h1s *h)
{
	struct h1x *x = h->hs_x;

	if (h->hs_flags & H1S_F_EOF) {
		h1s_close(h, "done");
		return;
	}
	if ((h->hs_flags & H1S_F_BODY_DONE) && x->hx_ops->xo_quiet(x)) {
		h1s_close(h, "done");
		return;
	}
	if (x->hx_ops->xo_shutdown(x) != 0) {
		h1s_close(h, "done");
		return;
	}
	h->hs_state = H1S_S_LINGER;
	evbuffer_drain(x->hx_in, evbuffer_get_length(x->hx_in));
	x->hx_ops->xo_read(x, 1);
	h1s_timer_set(h, h->hs_conf->hc_linger_ms);
}

/* No more requests: the output drains, then h1s_shut. */
static void
h1s_finish(struct h1s *h)
{
	h->hs_state = H1S_S_CLOSING;
	h->hs_x->hx_ops->xo_read(h->hs_x, 0);
	h1s_timer_set(h,
	    h->hs_conf->hc_write_ms != 0 ? h->hs_conf->hc_write_ms
					 : H1S_WRITE_MS);
	h->hs_x->hx_ops->xo_flush(h->hs_x);
	if (h1s_outlen(h) == 0)
		h1s_shut(h);
}

/*
 * The response ended: the next request once the output is low, or the
 * close when the connection cannot be kept (a body left unread, the
 * peer's end, a close either side asked for).
 */
static void
h1s_response_end(struct h1s *h)
{
	h->hs_flags |= H1S_F_RESP_DONE;
	h->hs_flags &= ~H1S_F_XCHG;
	if (!(h->hs_flags & H1S_F_BODY_DONE) || (h->hs_flags & H1S_F_EOF))
		h->hs_flags &= ~H1S_F_KEEPALIVE;
	if (!(h->hs_flags & H1S_F_KEEPALIVE)) {
		h1s_finish(h);
		return;
	}
	h->hs_state = H1S_S_NEXT;
	if (h1s_outlen(h) <= h->hs_x->hx_out_low) {
		h1s_next(h);
		return;
	}
	h1s_timer_set(h,
	    h->hs_conf->hc_write_ms != 0 ? h->hs_conf->hc_write_ms
					 : H1S_WRITE_MS);
}

/* A head was parsed: set the request's flags and start its exchange. */
static void
h1s_start(struct h1s *h)
{
	struct h1s_req *rq = h->hs_r;
	struct http1_msg *m = &rq->r_msg;
	struct h1x *x = h->hs_x;

	http1_msg_head(m, &rq->r_head);
	if (m->m_minor == 1) {
		if (!(m->m_flags & HTTP1_F_CONN_CLOSE))
			h->hs_flags |= H1S_F_KEEPALIVE;
	} else {
		h->hs_flags |= H1S_F_HTTP10;
		if (m->m_flags & HTTP1_F_CONN_KEEPALIVE)
			h->hs_flags |= H1S_F_KEEPALIVE;
	}
	if (m->m_method_len == 4 && memcmp(m->m_method, "HEAD", 4) == 0)
		h->hs_flags |= H1S_F_HEAD_REQ;
	if (m->m_body == HTTP1_BODY_NONE ||
	    (m->m_body == HTTP1_BODY_LENGTH && m->m_content_length == 0))
		h->hs_flags |= H1S_F_BODY_DONE;
	rq->r_left = m->m_body == HTTP1_BODY_LENGTH ? m->m_content_length : 0;
	if ((m->m_flags & HTTP1_F_EXPECT_CONTINUE) && m->m_minor == 1 &&
	    !(h->hs_flags & H1S_F_BODY_DONE) &&
	    !(h->hs_conf->hc_flags & H1S_C_RELAY_CONTINUE))
		h->hs_flags |= H1S_F_CONTINUE;
	if (++h->hs_nreq == h->hs_conf->hc_max_requests ||
	    (h->hs_flags & H1S_F_DRAIN))
		h->hs_flags &= ~H1S_F_KEEPALIVE;
	h->hs_state = H1S_S_XCHG;
	h->hs_flags |= H1S_F_XCHG;
	if (h->hs_conf->hc_body_ms != 0 && !(h->hs_flags & H1S_F_BODY_DONE))
		h1s_timer_set(h, h->hs_conf->hc_body_ms);
	h->hs_hooks->on_head(h, h->hs_arg, &rq->r_head, m);
	if (h->hs_state == H1S_S_XCHG && !(h->hs_flags & H1S_F_BODY_DONE) &&
	    evbuffer_get_length(x->hx_in) != 0 && h->hs_hooks->on_body != NULL)
		h->hs_hooks->on_body(h, h->hs_arg);
}

/* Parse a request head from the input, then start its exchange. */
static void
h1s_read_head(struct h1s *h)
{
	struct evbuffer *in = h->hs_x->hx_in;
	enum http1_err err = HTTP1_E_NONE;
	struct h1s_req *rq;
	int r;

	if (evbuffer_get_length(in) == 0)
		return;
	rq = h1s_req(h);
	if (h->hs_state == H1S_S_IDLE) {
		/* A whole-head deadline from the first byte, not an idle timer. */
		h->hs_state = H1S_S_HEAD;
		rq->r_started_us = clock_mono_usec();
		if (!(h->hs_flags & H1S_F_DEADLINE))
			h1s_timer_set(h, h->hs_conf->hc_head_ms);
	}
	r = http1_parse_request(in, h->hs_conf->hc_limits, &rq->r_msg, &err);
	if (r == 0)
		return;
	tq_timer_stop(&h->hs_timer);
	h->hs_flags &= ~H1S_F_DEADLINE;
	if (r < 0) {
		http1_msg_reset(&rq->r_msg);
		h1s_refuse(h, http1_err_status(err), http1_err_code(err), "%s",
		    http1_err_message(err));
		return;
	}
	h1s_start(h);
}

/*
 * Input from the peer, by state.  Input that cannot move on (a pipelined
 * head while an exchange runs, a body the owner does not take yet) stops
 * reading once it fills the input, or libevent would call back on every
 * loop pass (evio_read_hold).
 */
static void
h1s_read_cb(void *arg)
{
	struct h1s *h = arg;
	struct h1x *x = h->hs_x;

	switch (h->hs_state) {
	case H1S_S_IDLE:
	case H1S_S_HEAD:
		h1s_read_head(h);
		break;
	case H1S_S_XCHG:
		if (!(h->hs_flags & H1S_F_BODY_DONE) &&
		    h->hs_hooks->on_body != NULL)
			h->hs_hooks->on_body(h, h->hs_arg);
		break;
	case H1S_S_LINGER:
		evbuffer_drain(x->hx_in, evbuffer_get_length(x->hx_in));
		return;
	case H1S_S_NEXT:
	case H1S_S_CLOSING:
	case H1S_S_DEAD:
		break;
	}
	/* A hook may have closed h or released its transport. */
	if (h->hs_state == H1S_S_DEAD || (x = h->hs_x) == NULL)
		return;
	if (h->hs_state != H1S_S_CLOSING)
		x->hx_ops->xo_hold(x);
	x->hx_ops->xo_flush(x);
}

/* A waiting head, from the loop (h1s_next). */
static void
h1s_kick_cb(evutil_socket_t fd, short events, void *arg)
{
	struct h1s *h = arg;

	(void)fd;
	(void)events;
	if (h->hs_state == H1S_S_IDLE)
		h1s_read_cb(h);
}

/* The output drained to its low watermark. */
static void
h1s_write_cb(void *arg)
{
	struct h1s *h = arg;

	switch (h->hs_state) {
	case H1S_S_XCHG:
		if ((h->hs_flags & H1S_F_RESP_STARTED) &&
		    h->hs_hooks->on_drain != NULL)
			h->hs_hooks->on_drain(h, h->hs_arg);
		break;
	case H1S_S_NEXT:
		if (h1s_outlen(h) <= h->hs_x->hx_out_low)
			h1s_next(h);
		break;
	case H1S_S_CLOSING:
		if (h1s_outlen(h) == 0)
			h1s_shut(h);
		break;
	default:
		break;
	}
}

/*
 * Is the whole Content-Length body in the input already?  Then the
 * peer's end is a half-close after its request, not a request cut short.
 */
static int
h1s_body_buffered(const struct h1s *h)
{
	const struct h1s_req *r = h->hs_r;

	return (r != NULL && r->r_msg.m_body == HTTP1_BODY_LENGTH &&
	    evbuffer_get_length(h->hs_x->hx_in) >= r->r_left);
}

/* The peer ended its stream, or the connection failed. */
static void
h1s_event_cb(void *arg, int what, const char *why)
{
	struct h1s *h = arg;
	char tlswhy[160];

	if (h->hs_state == H1S_S_DEAD)
		return;
	if (what == H1X_EV_TLS_FAILED) {
		log_info("%s %llu %s: TLS handshake failed: %s",
		    h->hs_conf->hc_name, (unsigned long long)h->hs_id,
		    h->hs_peer, why);
		snprintf(tlswhy, sizeof tlswhy, "TLS error: %s", why);
		why = tlswhy;
		what = H1X_EV_ERROR;
	}
	if (what == H1X_EV_ERROR) {
		h1s_lost(h, why);
		h1s_close(h, why);
		return;
	}
	h->hs_flags |= H1S_F_EOF;
	switch (h->hs_state) {
	case H1S_S_IDLE:
		h1s_close(h, "client closed");
		break;
	case H1S_S_HEAD:
		h1s_close(h, "client closed mid-head");
		break;
	case H1S_S_XCHG:
		if (!(h->hs_flags & H1S_F_BODY_DONE) && !h1s_body_buffered(h)) {
			h1s_lost(h, "client closed mid-body");
			h1s_close(h, "client closed mid-body");
		} else if (h->hs_conf->hc_flags & H1S_C_EOF_ABORTS) {
			h1s_lost(h, "client closed");
			h1s_close(h, "client closed");
		}
		/* Else a half-close: the answer still goes, then the close. */
		break;
	case H1S_S_NEXT:
		h1s_finish(h);
		break;
	case H1S_S_LINGER:
		h1s_close(h, "done");
		break;
	case H1S_S_CLOSING:
	case H1S_S_DEAD:
		break;
	}
}

/* The idle, head, body, write or linger timer fired. */
static void
h1s_timer_cb(void *arg)
{
	struct h1s *h = arg;

	switch (h->hs_state) {
	case H1S_S_IDLE:
		if (!(h->hs_flags & H1S_F_DEADLINE)) {
			h1s_close(h, "keep-alive idle timeout");
			break;
		}
		/* FALLTHROUGH */
	case H1S_S_HEAD:
		h->hs_flags &= ~H1S_F_DEADLINE;
		h1s_refuse(h, 408, "request_timeout",
		    "The request head did not arrive within %llums.",
		    (unsigned long long)h->hs_conf->hc_head_ms);
		break;
	case H1S_S_XCHG:
		h1s_refuse(h, 408, "request_timeout",
		    "The request body did not arrive within %llums.",
		    (unsigned long long)h->hs_conf->hc_body_ms);
		break;
	case H1S_S_NEXT:
	case H1S_S_CLOSING:
		h1s_close(h, "timeout writing the response");
		break;
	case H1S_S_LINGER:
		h1s_close(h, "linger timeout");
		break;
	case H1S_S_DEAD:
		break;
	}
}

/* The sink's engine, while its connection is here to write to. */
static struct h1s *
h1s_of(const struct sink *s)
{
	struct h1s *h = s->sk_arg;

	if (h->hs_state == H1S_S_DEAD || h->hs_x == NULL)
		return (NULL);
	return (h);
}

/*
 * Sink: a response head.  An interim one (1xx but 101) goes to an
 * HTTP/1.1 peer only.  A final one chooses the framing: none for HEAD,
 * 204, 304 and 101; Content-Length when known; else chunked for HTTP/1.1
 * and the close for HTTP/1.0; and Connection as the engine decided.
 */
static int
h1s_sink_head(struct sink *s, const struct head *rh)
{
	struct h1s *h = h1s_of(s);
	struct h1s_req *r;
	enum h1_frame fr;
	int conn, nobody;

	if (h == NULL || (h->hs_flags & H1S_F_RESP_STARTED))
		return (-1);
	if (rh->h_status < 200 && rh->h_status != 101) {
		if (!(h->hs_flags & H1S_F_HTTP10)) {
			h1_head_put(
			    h->hs_x->hx_out, rh, H1_FRAME_NONE, H1_CONN_KEEP);
			h->hs_x->hx_ops->xo_flush(h->hs_x);
		}
		return (0);
	}
	/* A refusal before any request byte has its state made here. */
	r = h1s_req(h);
	/* Answered before the body was asked for: it will not come. */
	if (h->hs_flags & H1S_F_CONTINUE)
		h->hs_flags &= ~(H1S_F_CONTINUE | H1S_F_KEEPALIVE);
	nobody = (h->hs_flags & H1S_F_HEAD_REQ) || rh->h_status == 204 ||
	    rh->h_status == 304 || rh->h_status == 101 ||
	    (rh->h_flags & HEAD_F_NO_BODY);
	if (nobody)
		fr = H1_FRAME_NONE;
	else if (rh->h_flags & HEAD_F_LENGTH) {
		fr = H1_FRAME_LENGTH;
		r->r_resp_left = rh->h_length;
	} else if (!(h->hs_flags & H1S_F_HTTP10))
		fr = H1_FRAME_CHUNKED;
	else
		fr = H1_FRAME_EOF;
	if (fr == H1_FRAME_EOF || (rh->h_flags & HEAD_F_CLOSE) ||
	    (h->hs_flags & H1S_F_EOF))
		h->hs_flags &= ~H1S_F_KEEPALIVE;
	if (rh->h_status == 101)
		conn = H1_CONN_UPGRADE;
	else if (!(h->hs_flags & H1S_F_KEEPALIVE))
		conn = H1_CONN_CLOSE;
	else if (h->hs_flags & H1S_F_HTTP10)
		conn = H1_CONN_KEEPALIVE;
	else
		conn = H1_CONN_KEEP;
	r->r_frame = fr;
	r->r_status = rh->h_status;
	h->hs_flags |= H1S_F_RESP_STARTED;
	/*
	 * All of a small body follows at once: over TLS the head waits for
	 * it, so that both go as one record in one write (xo_write_now).
	 */
	if ((rh->h_flags & HEAD_F_BODY_NOW) &&
	    h->hs_x->hx_ops->xo_write_now != NULL && h1s_outlen(h) == 0 &&
	    (fr == H1_FRAME_NONE ||
		(fr == H1_FRAME_LENGTH && r->r_resp_left <= H1S_STAGE_MAX))) {
		if (r->r_stage == NULL)
			r->r_stage = evbuffer_new();
		h->hs_flags |= H1S_F_STAGED;
		h1_head_put(r->r_stage, rh, fr, conn);
		return (0);
	}
	h1_head_put(h->hs_x->hx_out, rh, fr, conn);
	h->hs_x->hx_ops->xo_flush(h->hs_x);
	return (0);
}

/* Write the staged response: as one record if it can, then the output. */
static void
h1s_unstage(struct h1s *h)
{
	if (!(h->hs_flags & H1S_F_STAGED))
		return;
	h->hs_flags &= ~H1S_F_STAGED;
	h->hs_x->hx_ops->xo_write_now(h->hs_x, h->hs_r->r_stage);
	evbuffer_add_buffer(h->hs_x->hx_out, h->hs_r->r_stage);
}

/* Sink: body bytes, framed as the head said; none for a bodiless answer. */
static int
h1s_sink_body(struct sink *s, struct evbuffer *buf, size_t len)
{
	struct h1s *h = h1s_of(s);
	struct h1s_req *r;
	struct evbuffer *out;
	size_t have = evbuffer_get_length(buf), n;

	if (h == NULL || !(h->hs_flags & H1S_F_RESP_STARTED) ||
	    (h->hs_flags & H1S_F_RESP_DONE))
		return (-1);
	r = h->hs_r; /* made by h1s_sink_head */
	out = (h->hs_flags & H1S_F_STAGED) ? r->r_stage : h->hs_x->hx_out;
	if (len > have)
		len = have;
	n = len;
	switch (r->r_frame) {
	case H1_FRAME_NONE:
		n = 0;
		break;
	case H1_FRAME_LENGTH:
		if (n > r->r_resp_left)
			n = (size_t)r->r_resp_left;
		r->r_resp_left -= n;
		break;
	case H1_FRAME_CHUNKED:
	case H1_FRAME_EOF:
		break;
	}
	while (n > 0) {
		size_t piece = n > H1S_READ_MAX ? H1S_READ_MAX : n;

		if (r->r_frame == H1_FRAME_CHUNKED)
			http1_chunk_header(out, piece);
		evb_take(buf, out, piece);
		if (r->r_frame == H1_FRAME_CHUNKED)
			http1_chunk_trailer(out);
		h->hs_body_out += piece;
		n -= piece;
		len -= piece;
	}
	/* Past the declared length, or for no body: dropped. */
	evbuffer_drain(buf, len);
	if ((h->hs_flags & H1S_F_STAGED) && r->r_resp_left == 0)
		h1s_unstage(h);
	h->hs_x->hx_ops->xo_flush(h->hs_x);
	return (0);
}

/* Sink: trailer fields, with the last chunk; other framings drop them. */
static int
h1s_sink_trailers(struct sink *s, const struct hfield *f, size_t n)
{
	struct h1s *h = h1s_of(s);

	if (h == NULL || !(h->hs_flags & H1S_F_RESP_STARTED) ||
	    (h->hs_flags & (H1S_F_RESP_DONE | H1S_F_TRAILERS)))
		return (-1);
	if (h->hs_r->r_frame != H1_FRAME_CHUNKED)
		return (0);
	h1_trailers_put(h->hs_x->hx_out, f, n);
	h->hs_flags |= H1S_F_TRAILERS;
	return (0);
}

/*
 * Sink: the end.  A body shorter than its Content-Length can only end by
 * the close.  After a 101 the owner takes the connection (h1s_release).
 */
static int
h1s_sink_end(struct sink *s)
{
	struct h1s *h = h1s_of(s);
	struct h1s_req *r;

	if (h == NULL || !(h->hs_flags & H1S_F_RESP_STARTED) ||
	    (h->hs_flags & H1S_F_RESP_DONE))
		return (-1);
	h1s_unstage(h);
	r = h->hs_r; /* made by h1s_sink_head */
	if (r->r_status == 101) {
		h->hs_flags |= H1S_F_RESP_DONE;
		return (0);
	}
	if (r->r_frame == H1_FRAME_CHUNKED && !(h->hs_flags & H1S_F_TRAILERS))
		http1_chunk_last(h->hs_x->hx_out);
	if (r->r_frame == H1_FRAME_LENGTH && r->r_resp_left > 0)
		h->hs_flags &= ~H1S_F_KEEPALIVE;
	h->hs_x->hx_ops->xo_flush(h->hs_x);
	h1s_response_end(h);
	return (0);
}

/* Sink: body bytes it takes before the output is at its high mark. */
static size_t
h1s_sink_room(const struct sink *s)
{
	struct h1s *h = h1s_of(s);
	size_t high, len;

	if (h == NULL)
		return (0);
	high = h->hs_conf->hc_out_high != 0 ? h->hs_conf->hc_out_high
					    : H1S_OUT_HIGH;
	len = h1s_outlen(h);
	return (len >= high ? 0 : high - len);
}

/* Sink: the response cannot be completed; HTTP/1 says so by the close. */
static void
h1s_sink_abort(struct sink *s, const char *why)
{
	struct h1s *h = h1s_of(s);

	if (h == NULL)
		return;
	h->hs_flags &= ~H1S_F_XCHG;
	h1s_unstage(h);
	h1s_close(h, why);
}

static const struct sink_ops h1s_sink_ops = {
	h1s_sink_head,
	h1s_sink_body,
	h1s_sink_trailers,
	h1s_sink_end,
	h1s_sink_room,
	h1s_sink_abort,
};

/* The sink the current exchange answers through. */
struct sink *
h1s_sink(struct h1s *h)
{
	return (&h->hs_sink);
}

/* The current request's head, or NULL between requests. */
const struct head *
h1s_head(const struct h1s *h)
{
	return (h->hs_r != NULL && h->hs_r->r_msg.m_buf != NULL
		? &h->hs_r->r_head
		: NULL);
}

/*
 * Move up to max bytes of the request body, de-framed, to dst.  The
 * first call owes a 100 Continue when the request asked for it and no
 * answer began.  Returns the bytes moved (0: none waiting, or the body is
 * done: h1s_body_done), or -1 with *err set on a malformed chunked body
 * (HTTP1_E_NONE: the connection is gone); the owner refuses it.
 */
ssize_t
h1s_body_read(
    struct h1s *h, struct evbuffer *dst, size_t max, enum http1_err *err)
{
	struct h1x *x = h->hs_x;
	struct h1s_req *rq = h->hs_r;
	struct head cont;
	size_t n, have;
	int r;

	*err = HTTP1_E_NONE;
	if (h->hs_state == H1S_S_DEAD || x == NULL)
		return (-1);
	if (h->hs_state != H1S_S_XCHG || (h->hs_flags & H1S_F_BODY_DONE) ||
	    rq == NULL)
		return (0);
	if (h->hs_flags & H1S_F_CONTINUE) {
		h->hs_flags &= ~H1S_F_CONTINUE;
		memset(&cont, 0, sizeof cont);
		cont.h_status = 100;
		h1_head_put(x->hx_out, &cont, H1_FRAME_NONE, H1_CONN_KEEP);
		x->hx_ops->xo_flush(x);
	}
	if (max > H1S_READ_MAX)
		max = H1S_READ_MAX;
	if (rq->r_msg.m_body == HTTP1_BODY_CHUNKED) {
		r = http1_chunked_decode(
		    &rq->r_chunked, x->hx_in, dst, max, &n, err);
		if (r < 0)
			return (-1);
		if (r == 1)
			h->hs_flags |= H1S_F_BODY_DONE;
	} else {
		have = evbuffer_get_length(x->hx_in);
		n = have < max ? have : max;
		if (n > rq->r_left)
			n = (size_t)rq->r_left;
		if (n > 0 && evb_take(x->hx_in, dst, n) != (int)n)
			return (-1);
		rq->r_left -= n;
		if (rq->r_left == 0)
			h->hs_flags |= H1S_F_BODY_DONE;
	}
	h->hs_body_in += n;
	if ((h->hs_flags & H1S_F_BODY_DONE) && h->hs_conf->hc_body_ms != 0 &&
	    !(h->hs_flags & H1S_F_RESP_STARTED))
		tq_timer_stop(&h->hs_timer);
	if (n > 0 || (h->hs_flags & H1S_F_BODY_DONE))
		x->hx_ops->xo_unhold(x);
	return ((ssize_t)n);
}

/* Was the request body read in full? */
int
h1s_body_done(const struct h1s *h)
{
	return ((h->hs_flags & H1S_F_BODY_DONE) != 0);
}

/* Would the connection serve another request after this one? */
int
h1s_keeps(const struct h1s *h)
{
	return ((h->hs_flags & H1S_F_KEEPALIVE) && !(h->hs_flags & H1S_F_EOF) &&
	    h->hs_state != H1S_S_DEAD);
}

/* The connection closes after this exchange. */
void
h1s_no_keep(struct h1s *h)
{
	h->hs_flags &= ~H1S_F_KEEPALIVE;
}

/*
 * The server is going (a drain): no request after the one in progress.
 * Between requests the connection closes now, unless a pipelined head
 * waits in the input already; a request being read or answered is
 * answered with Connection: close when its head has not gone yet, and
 * the connection closes after it.  Returns 1 when h closed.
 */
int
h1s_drain(struct h1s *h, const char *reason)
{
	if (h->hs_state == H1S_S_DEAD || h->hs_x == NULL)
		return (h->hs_state == H1S_S_DEAD);
	h->hs_flags |= H1S_F_DRAIN;
	h->hs_flags &= ~H1S_F_KEEPALIVE;
	switch (h->hs_state) {
	case H1S_S_IDLE:
		if (evbuffer_get_length(h->hs_x->hx_in) != 0)
			break; /* a head waits: answered, then the close */
		h1s_close(h, reason);
		return (1);
	case H1S_S_NEXT:
		/* Answered and kept: the output drains, then the close. */
		h1s_finish(h);
		break;
	default:
		break;
	}
	return (h->hs_state == H1S_S_DEAD);
}

/*
 * Keep at most high bytes of input before reading stops, from now on (the
 * transport's watermark, h1x_bev_new's in_high until then): more for a
 * body that streams, so that each wakeup moves more of it.
 */
void
h1s_read_high(struct h1s *h, size_t high)
{
	struct h1x *x = h->hs_x;

	if (h->hs_state == H1S_S_DEAD || x == NULL)
		return;
	x->hx_ops->xo_read_high(x, high);
	/* Held at the old mark, the input may take more now. */
	x->hx_ops->xo_unhold(x);
}

/*
 * From now on, give the connection up when its output waits ms without a
 * byte of it written (0: never): the owner hears on_error, then the
 * close.  Between requests the engine's own write timer runs as well.
 */
void
h1s_write_timeout(struct h1s *h, uint64_t ms)
{
	struct h1x *x = h->hs_x;

	if (h->hs_state == H1S_S_DEAD || x == NULL)
		return;
	x->hx_ops->xo_write_timeout(x, ms);
}

/* Count what the transport takes out of the output (written, or gone). */
static void
h1s_sent_cb(
    struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct h1s *h = arg;

	(void)buf;
	h->hs_sent += info->n_deleted;
}

/*
 * Count the output bytes the transport writes from now on (h1s_sent), so
 * that an owner can tell when what it queued has left: a tunnel gives a
 * credit back per chunk written.
 */
void
h1s_count_sent(struct h1s *h)
{
	if (h->hs_x == NULL || h->hs_sent_cb != NULL)
		return;
	h->hs_sent_cb = evbuffer_add_cb(h->hs_x->hx_out, h1s_sent_cb, h);
}

/* Stop counting, before x's output changes hands. */
static void
h1s_uncount_sent(struct h1s *h, struct h1x *x)
{
	if (h->hs_sent_cb == NULL)
		return;
	evbuffer_remove_cb_entry(x->hx_out, h->hs_sent_cb);
	h->hs_sent_cb = NULL;
}

/* Output bytes written since h1s_count_sent. */
uint64_t
h1s_sent(const struct h1s *h)
{
	return (h->hs_sent);
}

/* Output bytes queued and not written yet. */
size_t
h1s_queued(const struct h1s *h)
{
	if (h->hs_state == H1S_S_DEAD || h->hs_x == NULL)
		return (0);
	return (h1s_outlen(h));
}

/*
 * Give the connection to another owner (a 101's relay, a tunnel link)
 * once the answer is queued in its output: returns the transport's
 * connection (the stream, the in-memory peer), bytes the peer sent
 * after its request still in its input, and closes the engine around it.
 * NULL when the engine is closed already.
 */
void *
h1s_release(struct h1s *h)
{
	struct h1x *x = h->hs_x;
	void *conn;

	if (h->hs_state == H1S_S_DEAD || x == NULL)
		return (NULL);
	h->hs_flags |= H1S_F_RELEASED;
	h->hs_flags &= ~H1S_F_XCHG;
	h1s_uncount_sent(h, x);
	h->hs_x = NULL;
	conn = x->hx_ops->xo_detach(x);
	h1s_close(h, "released");
	return (conn);
}

/*
 * Run an HTTP/1 server on transport x, which the engine owns from now on;
 * conf, hooks and peer outlive it, arg is the owner's, id and peer name
 * it in the debug log.  Reading starts at once, with the idle timer (or with
 * H1S_C_FIRST_DEADLINE the head's deadline).
 */
struct h1s *
h1s_new(struct event_base *base, struct h1x *x, const struct h1s_conf *conf,
    const struct h1s_hooks *hooks, void *arg, uint64_t id, const char *peer)
{
	struct h1s *h;

	h = xcalloc(1, sizeof *h);
	h->hs_x = x;
	h->hs_conf = conf;
	h->hs_hooks = hooks;
	h->hs_arg = arg;
	h->hs_id = id;
	h->hs_peer = peer;
	h->hs_sink.sk_ops = &h1s_sink_ops;
	h->hs_sink.sk_arg = h;
	h->hs_tq = tq_get(base);
	tq_timer_init(&h->hs_timer, h1s_timer_cb, h);
	x->hx_cb_read = h1s_read_cb;
	x->hx_cb_write = h1s_write_cb;
	x->hx_cb_event = h1s_event_cb;
	x->hx_cb_arg = h;
	h->hs_state = H1S_S_IDLE;
	if (conf->hc_flags & H1S_C_FIRST_DEADLINE) {
		h->hs_flags |= H1S_F_DEADLINE;
		h1s_timer_set(h, conf->hc_head_ms);
	} else
		h1s_timer_set(h, conf->hc_idle_ms);
	x->hx_ops->xo_read(x, 1);
	return (h);
}

/* Content-Length request body bytes still to come (0 for other bodies). */
uint64_t
h1s_body_left(const struct h1s *h)
{
	if (h->hs_state != H1S_S_XCHG || (h->hs_flags & H1S_F_BODY_DONE) ||
	    h->hs_r == NULL || h->hs_r->r_msg.m_body != HTTP1_BODY_LENGTH)
		return (0);
	return (h->hs_r->r_left);
}

/*
 * n bytes of a Content-Length request body went past the input (splice(2)
 * from the socket): count them as read.
 */
void
h1s_body_skip(struct h1s *h, uint64_t n)
{
	struct h1s_req *r = h->hs_r;

	if (r == NULL || r->r_msg.m_body != HTTP1_BODY_LENGTH)
		return;
	if (n > r->r_left)
		n = r->r_left;
	r->r_left -= n;
	h->hs_body_in += n;
	if (r->r_left == 0)
		h->hs_flags |= H1S_F_BODY_DONE;
}

/*
 * The socket, for the owner to splice(2) the rest of a Content-Length
 * response body into, once what the output holds is written: or -1 (TLS,
 * output still waiting, other framing, an in-memory transport).
 */
int
h1s_splice_fd(struct h1s *h)
{
	struct h1x *x = h->hs_x;

	if (h->hs_state != H1S_S_XCHG || x == NULL ||
	    x->hx_ops->xo_fd == NULL || h->hs_r == NULL ||
	    h->hs_r->r_frame != H1_FRAME_LENGTH ||
	    (h->hs_flags & (H1S_F_STAGED | H1S_F_RESP_DONE)))
		return (-1);
	return (x->hx_ops->xo_fd(x));
}

/* n bytes of the response body went to the socket by splice(2). */
void
h1s_body_sent(struct h1s *h, uint64_t n)
{
	struct h1s_req *r = h->hs_r;

	if (r == NULL || r->r_frame != H1_FRAME_LENGTH)
		return;
	if (n > r->r_resp_left)
		n = r->r_resp_left;
	r->r_resp_left -= n;
	h->hs_body_out += n;
}

/* When the current request's first byte came (monotonic microseconds). */
uint64_t
h1s_started_us(const struct h1s *h)
{
	return (h->hs_r != NULL ? h->hs_r->r_started_us : 0);
}
