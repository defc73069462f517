/*
 * The HTTP/2 server engine's own structures, shared by h2s.c (the session,
 * input, defences, the close path) and h2s_sink.c (each stream's response
 * sink and the DATA it sends).  Nothing outside those two files reads it.
 */
#ifndef AK_H2S_INT_H
#define AK_H2S_INT_H

#include <sys/queue.h>

#include <nghttp2/nghttp2.h>

#include "evb.h"
#include "head.h"
#include "tq.h"

/* Frames are written while the transport's output holds less than this. */
#define H2S_OUT_MARK (64 * 1024)
/* Input handed to nghttp2 at a time, so output gets its turn. */
#define H2S_IN_PIECE (16 * 1024)
/* A closing connection's output drains for at most this long. */
#define H2S_LINGER_MS 2000
/* Resets a peer sends or provokes: a burst, refilled at a rate a second. */
#define H2S_RST_BURST 200
#define H2S_RST_RATE 50
/* PINGs a peer sends: the same kind of bucket. */
#define H2S_PING_BURST 500
#define H2S_PING_RATE 20
/* CONTINUATION frames one header block may have. */
#define H2S_MAX_CONTINUATIONS 8
/* DATA frames without a byte or END_STREAM a connection may send. */
#define H2S_EMPTY_DATA_MAX 100
/* PING and SETTINGS acks queued, unread by the peer, before GOAWAY. */
#define H2S_MAX_OUTBOUND_ACK 1000
/* Entries one SETTINGS frame may carry. */
#define H2S_MAX_SETTINGS 32
/* Windows and buffers when the configuration says 0. */
#define H2S_STREAM_WINDOW (256 * 1024)
#define H2S_CONN_WINDOW (1024 * 1024)
#define H2S_MAX_STREAMS 128
#define H2S_MAX_TOTAL 10000
#define H2S_OUT_HIGH (256 * 1024)
#define H2S_CONN_OUT_HIGH (4 * 1024 * 1024)
/*
 * A response that ends before its request: the rest of a body of known
 * length up to this is read and dropped for at most H2S_DISCARD_MS, so a
 * client sees its stream end rather than reset (RFC 9113 section 8.1
 * allows either; some clients take the reset for an error).
 */
#define H2S_DISCARD_MAX (64 * 1024)
#define H2S_DISCARD_MS 1000
/* Body bytes one h2s_stream_body_read moves at most. */
#define H2S_READ_MAX (256 * 1024)

/* The pseudo-header fields a request stream keeps. */
#define H2S_PS_METHOD 0
#define H2S_PS_PATH 1
#define H2S_PS_AUTHORITY 2
#define H2S_PS_PROTOCOL 3
#define H2S_PS_SCHEME 4
#define H2S_PS_MAX 5

/* A session's states, in order: a later one never goes back. */
#define H2S_S_OPEN 0 /* streams come and go */
#define H2S_S_DRAIN 1 /* GOAWAY sent: the streams in flight finish */
#define H2S_S_CLOSING 2 /* closed: output drains, then the free */
#define H2S_S_DEAD 3 /* freed from the loop */

struct h2s_stream {
	TAILQ_ENTRY(h2s_stream) st_entry; /* h_streams, then h_reap */
	struct h2s *st_h;
	int32_t st_id;
	int st_flags;
#define ST_F_HEAD 0x0001 /* st_head is made */
#define ST_F_OWNED 0x0002 /* the owner has it (hooks go to it) */
#define ST_F_IN_END 0x0004 /* the request's END_STREAM arrived */
#define ST_F_CLOSED 0x0008 /* nghttp2 closed the stream */
#define ST_F_REAP 0x0010 /* off the list, freed from the loop */
#define ST_F_FULL 0x0020 /* the sink said full: on_drain when it is not */
#define ST_F_OURRST 0x0040 /* we reset it */
#define ST_F_TOOBIG 0x0080 /* the header list passed the limits */
#define ST_F_CONNECT 0x0100 /* an extended CONNECT (:protocol) */
#define ST_F_HEAD_REQ 0x0200 /* the request is HEAD */
#define ST_F_REFUSED 0x0400 /* answered by the engine itself */
#define ST_F_END 0x0800 /* the owner ended the response */
#define ST_F_ABORT 0x1000 /* the owner cut the response */
#define ST_F_OUT_DONE 0x2000 /* our END_STREAM went out */
#define ST_F_RESP 0x4000 /* the final response head was submitted */
#define ST_F_DATA 0x8000 /* ... with a body to come (data provider) */
#define ST_F_TRAILERS 0x10000 /* trailer fields wait in st_tr */
#define ST_F_DISCARD 0x20000 /* answered: a small body's rest is dropped */
	struct evbuffer *st_in; /* request body not yet taken */
	struct evbuffer *st_out; /* response body not yet framed */
	struct sink st_sink;
	void *st_arg; /* the owner's */
	uint64_t st_started_us;
	uint64_t st_in_total; /* request body bytes received */
	struct tq_timer st_timer; /* stream idle; ST_F_DISCARD: its bound */
	uint64_t st_idle_ms; /* its idle timeout; 0: hc_stream_idle_ms */
	/* The request's header block, kept by reference. */
	nghttp2_rcbuf *st_ps[H2S_PS_MAX];
	nghttp2_rcbuf **st_rc; /* name, value, name, value ... */
	size_t st_nrc;
	size_t st_rccap;
	size_t st_hsize; /* the header list's size as RFC 9113 counts it */
	struct hfield *st_fields;
	struct head st_head;
	nghttp2_nv *st_tr; /* trailer fields, one allocation */
	size_t st_ntr;
};
TAILQ_HEAD(h2s_streams, h2s_stream);

/* A token bucket: what a peer may do in a burst, refilled at a rate. */
struct h2s_bucket {
	uint64_t b_tokens;
	uint64_t b_at; /* last refilled, monotonic ms; 0: full, never used */
};

struct h2s {
	struct h1x *h_x;
	const struct h2s_conf *h_conf;
	const struct h2s_hooks *h_hooks;
	void *h_arg;
	uint64_t h_id;
	const char *h_peer;
	nghttp2_session *h_ng;
	int h_state;
	int h_flags;
#define H2S_F_NGDONE 0x01 /* nghttp2 sends nothing more */
#define H2S_F_GOAWAY_SENT 0x02
#define H2S_F_RSTOP 0x04 /* reading stopped: the output is full */
#define H2S_F_IN_NG 0x08 /* inside nghttp2_session_mem_recv */
#define H2S_F_SETTINGS 0x10 /* the client's first SETTINGS arrived */
#define H2S_F_LINGER 0x20 /* closing: our side shut, input drained */
#define H2S_F_EOF 0x40 /* the peer ended its stream */
	uint32_t h_code; /* the GOAWAY code of the close */
	char *h_reason;
	struct h2s_streams h_streams; /* open, or still the owner's */
	struct h2s_streams h_reap; /* to free from the loop */
	size_t h_nstreams;
	uint64_t h_total; /* streams over the connection's lifetime */
	size_t h_out; /* response bytes buffered in every stream */
	size_t h_nfull; /* streams whose sink said full */
	unsigned h_empty_data; /* DATA frames with no byte, no END_STREAM */
	struct h2s_bucket h_rst; /* resets the peer sent or provoked */
	struct h2s_bucket h_ping; /* PINGs the peer sent */
	int h_ngerr; /* nghttp2's last error, for the frame it sends */
	char h_ngmsg[128]; /* ... and its words */
	struct tq *h_tq;
	struct tq_timer h_timer; /* idle, or the close's flush */
	struct tq_timer h_htimer; /* the head deadline */
	struct event *h_kick; /* deferred work from the loop */
};

static inline uint32_t
h2s_max_streams(const struct h2s *h)
{
	return (h->h_conf->hc_max_streams != 0 ? h->h_conf->hc_max_streams
					       : H2S_MAX_STREAMS);
}

static inline uint64_t
h2s_max_total(const struct h2s *h)
{
	return (h->h_conf->hc_max_streams_total != 0
		? h->h_conf->hc_max_streams_total
		: H2S_MAX_TOTAL);
}

static inline size_t
h2s_out_high(const struct h2s *h)
{
	return (h->h_conf->hc_out_high != 0 ? h->h_conf->hc_out_high
					    : H2S_OUT_HIGH);
}

static inline size_t
h2s_conn_high(const struct h2s *h)
{
	return (h->h_conf->hc_conn_out_high != 0 ? h->h_conf->hc_conn_out_high
						 : H2S_CONN_OUT_HIGH);
}

/* h2s.c */
void h2s_log(struct h2s *, int status, const char *code, const char *msg,
    const struct h2s_stream *);
int h2s_out_blocked(const struct h2s *);
void h2s_stream_touch(struct h2s_stream *);
void h2s_stream_drop_out(struct h2s_stream *);
void h2s_stream_reset(struct h2s_stream *, uint32_t code);
void h2s_recv_error(struct h2s *, int);
void h2s_kick(struct h2s *);

/* h2s_sink.c */
extern const struct sink_ops h2s_sink_ops;
int h2s_send_data_cb(nghttp2_session *, nghttp2_frame *,
    const uint8_t *framehd, size_t length, nghttp2_data_source *, void *);
/* Also upstream_h2.c's, for request heads. */
nghttp2_nv *h2s_nv(const nghttp2_nv *first, size_t nfirst,
    const struct hfield *, size_t n, int copy, size_t *np);

#endif
