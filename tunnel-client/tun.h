/* aktunnel: the developer's end of a reverse tunnel. */
#ifndef AK_TUN_H
#define AK_TUN_H

#include <sys/queue.h>
#include <sys/socket.h>

#include <stdint.h>
#include <stdio.h>

#include "dns.h"
#include "http1.h"
#include "idmap.h"
#include "log.h"
#include "tombs.h"
#include "tunproto.h"

struct stream;
struct strbuf;
struct nghttp2_session;
struct ssl_st;
struct event;
struct event_base;
struct evbuffer;
struct wsconn;
typedef struct ssl_ctx_st SSL_CTX;

/* Defaults and bounds (tunnel-protocol.md §2.1, §11). */
#define TUN_LISTEN_PORT_DEFAULT 8766

/* Heartbeat (§7), seconds; the flags may change them. */
#define TUN_PING_INTERVAL_DEFAULT 20.0
#define TUN_PING_TIMEOUT_DEFAULT 10.0
#define TUN_PING_MIN 0.01
#define TUN_PING_MAX 3600.0

/* Reconnect loop (§8.1). */
#define TARGET_WARN_MS 10000 /* one warning per target failure reason */
#define TUN_EXIT_REPLACED 3 /* exit status when another client took over */
#define TUN_EXIT_AUTH 4 /* exit status when the credential is refused */
#define TUN_AUTH_TRIES 5 /* 401/403 answers in a row before exiting */
#define TUN_BACKOFF_CAP 30 /* seconds */
#define TUN_RETRY_QUICK 1 /* seconds after an HTTP status or protocol error */
#define TUN_RESTART_SPREAD_MS 250 /* after a 1012: 0 to this many ms */
#define TUN_OPEN_TIMEOUT 10 /* seconds for DNS, TCP, TLS and the upgrade */
#define TUN_STOP_TIMEOUT 2 /* seconds for our close frame on SIGINT */
#define TUN_ANNOUNCE_WAIT 1 /* seconds the "reconnected" line waits for a hello */

/* Completed-response cache and tombstones (§8.5, §8.8). */
#define TUN_CACHE_TTL_MS (300 * 1000)
#define TUN_CACHE_MAX_ENTRIES 1024
#define TUN_CACHE_MAX_BYTES (16 * 1024 * 1024)
#define TUN_TOMB_TTL_MS (300 * 1000)
#define TUN_TOMB_MAX 1024

/*
 * Target connection pool (§6.4, §9.4): --target-connections, by default as
 * many as requests may be in flight, each kept alive when idle. (The
 * reference client's pool is 10, 5 kept alive.)
 */
#define TUN_POOL_LIMIT 1024 /* highest --target-connections */
#define TUN_POOL_IDLE_TIMEOUT 60 /* seconds an idle connection is kept */

/*
 * HTTP/2 to an https:// target (target_h2.c): one connection carries up to
 * the server's SETTINGS_MAX_CONCURRENT_STREAMS streams (at most
 * TUN_H2_STREAMS_MAX); beyond that a second connection opens. A stream's
 * receive window is what aktunnel holds of its response unread, as
 * TUN_TARGET_READ_HIWAT bounds an HTTP/1.1 connection's input; the
 * connection's window covers every stream's.
 */
#define TUN_H2_STREAMS_MAX 100
#define TUN_H2_STREAM_WINDOW (256 * 1024)
#define TUN_H2_CONN_WINDOW (TUN_H2_STREAMS_MAX * TUN_H2_STREAM_WINDOW)
#define TUN_H2_OUT_HIWAT (256 * 1024) /* frames waiting for the socket */

/* Buffers: every one is bounded. */
#define TUN_TARGET_READ_HIWAT (256 * 1024) /* target input */
#define TUN_TARGET_WRITE_LOWAT (64 * 1024) /* feed the target below this */
#define TUN_WS_DATA_HIWAT (2 * 1024 * 1024) /* stop sending data above */
#define TUN_HEAD_MAX (96 * 1024) /* target response head */
#define TUN_HEAD_LINE_MAX (8 * 1024)
#define TUN_HEAD_FIELDS_MAX 256

/* A parsed gateway address or target URL. */
struct tun_url {
	int u_tls; /* https:// or wss:// */
	char *u_host; /* IPv6 literals without brackets */
	int u_port;
	char *u_path; /* target base path: "" or "/api" */
};

/* Every setting of aktunnel, from flags, then environment, then defaults. */
struct tun_options {
	/* The gateway and the tunnel WebSocket. */
	struct tun_url gateway;
	char *tunnel_path; /* route, or NULL */
	char *sandbox; /* the id as given */
	char *safe_id;
	char *token; /* or NULL; never logged */
	const char *token_from; /* "--token" or "AKERNEL_TOKEN", or NULL */
	int yr_token_set; /* YR_TOKEN is set (aktunnel does not read it) */
	int allow_plaintext_token;
	int token_query_fallback;
	int verify_tls; /* verify the gateway */
	char *ca_file; /* trust file, or NULL */
	const char *ca_file_from; /* flag or variable */

	/* The target, on the developer's side. */
	struct tun_url target;
	char *target_ca_file;
	int target_insecure;
	char *target_cert;
	char *target_key;

	/* The loopback listener inside the sandbox. */
	int listen_port;

	/* Tunnel limits, YR_TUNNEL_* (advertised in the hello). */
	int protocol_version;
	uint64_t max_body_size;
	uint64_t max_ws_message_size;
	uint32_t stream_chunk;
	uint32_t max_inflight;
	uint32_t stream_window_frames;
	uint64_t fast_path_body;
	double http_timeout; /* seconds, to the target */
	uint32_t target_connections; /* pool size; 0 until parsed: inflight */
	int target_http2; /* --target-http2: 1 auto, 0 off */

	/* Heartbeat, seconds (--ping-interval, --ping-timeout). */
	double ping_interval;
	double ping_timeout;

	/* Output. */
	enum log_level log_level;
	enum log_format log_format;
	int verbose; /* -v: log each request */

	/* What main should do instead of running. */
	int help;
	int version;

	/* Problems that do not stop aktunnel, for main to log. */
	char **warnings;
	unsigned int nwarnings;
};

/*
 * A queue of body chunks with their offsets: the bytes in one evbuffer and
 * the chunk lengths in a ring. Used for request chunks waiting for the
 * target and for response chunks kept until the sandbox acknowledges them.
 */
struct tun_chunks {
	struct evbuffer *cq_buf;
	uint32_t *cq_len; /* ring of cq_cap lengths */
	size_t cq_cap;
	size_t cq_head;
	size_t cq_count;
	uint64_t cq_base; /* body offset of the first byte in cq_buf */
};

/* One entry of the completed-response cache (§8.5). */
struct tun_cache_entry {
	char *ce_id; /* V1 ids may be any string */
	char *ce_frame; /* the encoded http_resp or error */
	size_t ce_len;
	uint64_t ce_at; /* monotonic ms when stored */
	uint64_t ce_sent_gen; /* connection it last went out on, 0 never */
	TAILQ_ENTRY(tun_cache_entry) ce_entry;
};
TAILQ_HEAD(tun_cache_list, tun_cache_entry);

/* Fast-path outcomes by id: bounded in age, count and bytes. */
struct tun_cache {
	struct tun_cache_list tc_list; /* oldest first */
	struct idmap tc_ids; /* entries by id */
	size_t tc_count;
	size_t tc_bytes;
	uint64_t tc_ttl_ms;
	size_t tc_max_entries;
	size_t tc_max_bytes;
};

/* Where the tunnel connection is (one struct tun_conn per attempt). */
enum tun_conn_state {
	TC_S_RESOLVING = 0, /* looking the gateway up */
	TC_S_CONNECTING, /* TCP connect and, for wss, the TLS handshake */
	TC_S_UPGRADING, /* upgrade request sent, waiting for 101 */
	TC_S_OPEN, /* WebSocket open, hello sent */
	TC_S_CLOSING, /* our close frame is out */
	TC_S_DEAD, /* closed; freed from the loop */
};

/* Why a tunnel connection ended: picks the delay before the next (§8.1). */
enum tun_end {
	TUN_END_NETWORK = 0, /* DNS, TCP, TLS, timeout, close, heartbeat */
	TUN_END_STATUS, /* the handshake was answered with an HTTP status */
	TUN_END_PROTOCOL, /* the peer broke the protocol */
	TUN_END_STOP, /* we are stopping */
	TUN_END_RESTART, /* the gateway restarts or hands over (close 1012) */
};

/* http_req_begin frames kept until the sandbox's hello, at most. */
#define TC_EARLY_MAX 1024
#define TC_EARLY_BYTES ((size_t)8 << 20)

/* One WebSocket connection to the gateway, from lookup to close. */
struct tun_conn {
	struct tun *c_tun;
	enum tun_conn_state c_state;
	int c_flags;
#define TC_F_V2 0x01 /* the peer's hello selected V2 */
#define TC_F_PING_OUT 0x02 /* a ping waits for its pong */
#define TC_F_HELLO 0x04 /* the peer's hello came (V2 or not) */
#define TC_F_ANNOUNCE 0x08 /* the "reconnected" line waits for the hello */
	uint64_t c_gen; /* attempt number: 1 for the first, then +1 */
	struct dns_query *c_query;
	struct sockaddr_storage c_addrs[DNS_MAX_ADDRS];
	size_t c_naddrs;
	size_t c_next; /* next address to try */
	char *c_addr_error; /* why the last address failed */
	struct stream *c_s; /* until the WebSocket takes it */
	struct wsconn *c_ws;
	char c_key[32]; /* Sec-WebSocket-Key */
	struct http1_msg c_resp; /* the upgrade response */
	struct event *c_open_timer; /* TUN_OPEN_TIMEOUT, then stop timer */
	struct event *c_ping_timer; /* next ping */
	struct event *c_pong_timer; /* ping_timeout */
	char c_ping_id[40];
	uint64_t c_opened_at; /* monotonic ms when the WebSocket opened */
	struct tunproto_limits c_limits; /* negotiated, or ours before */
	/* http_req_begin frames that came before the hello (replays). */
	char **c_early;
	size_t *c_early_len;
	size_t c_nearly;
	size_t c_early_bytes;
};

/* The state of the whole client. */
enum tun_state {
	TUN_S_CONNECTING = 0, /* a connection attempt is running */
	TUN_S_OPEN, /* connected */
	TUN_S_WAITING, /* waiting for the next attempt */
	TUN_S_STOPPING, /* SIGINT: closing */
	TUN_S_STOPPED, /* the loop may end */
};

TAILQ_HEAD(tun_xchg_list, tun_xchg);
TAILQ_HEAD(tun_target_list, tun_target);
TAILQ_HEAD(tun_chan_list, tun_chan);
TAILQ_HEAD(tun_h2_list, tun_h2);

/* What the target speaks, as far as aktunnel knows (ALPN, target.c). */
enum tun_target_proto {
	TUN_PROTO_UNKNOWN = 0, /* no TLS handshake finished yet */
	TUN_PROTO_H1, /* plain http://, h2 off, or ALPN did not pick h2 */
	TUN_PROTO_H2, /* the last handshake picked h2 */
};

/* Counters for the summary printed on exit. */
struct tun_stats {
	uint64_t st_requests; /* exchanges started against the target */
	uint64_t st_failed; /* exchanges answered with error */
	uint64_t st_bytes_up; /* request body bytes to the target */
	uint64_t st_bytes_down; /* response body bytes from the target */
	uint64_t st_connects; /* tunnel connections opened */
	uint64_t st_replays; /* duplicate requests answered from state */
};

/* aktunnel: one process, one session, many connections over time. */
struct tun {
	struct event_base *t_base;
	const struct tun_options *t_opts;
	struct dns *t_dns;
	SSL_CTX *t_gw_tls; /* NULL for ws:// */
	SSL_CTX *t_target_tls; /* NULL for an http:// target */
	char t_session_id[TUNPROTO_UUID_LEN + 1];
	char *t_url; /* tunnel URL for logs */
	char *t_host_header; /* Host of the upgrade request */
	char *t_request_path; /* path (+query) of the upgrade request */
	char *t_target_url; /* target for logs */
	char *t_target_authority; /* Host header for the target */
	struct tunproto_limits t_local; /* what we advertise */
	struct tunproto_limits t_neg; /* last negotiated (V2) */
	int t_v2; /* a hello selected V2: the session speaks V2 */
	enum tun_state t_state;
	int t_flags;
#define TUN_F_READY_ONCE 0x01 /* the ready line was printed */
	struct tun_conn *t_conn; /* current attempt or connection */
	uint64_t t_gen; /* connections started */
	unsigned int t_failures; /* shared failure counter (§8.1) */
	unsigned int t_route_misses; /* consecutive 404 answers (§2.6) */
	unsigned int t_auth_refusals; /* consecutive 401/403 answers */
	struct event *t_retry; /* the next attempt */
	struct event *t_sigint;
	struct event *t_sigterm;
	int t_exit; /* exit status */
	char *t_target_warn; /* the last target failure warned about */
	uint64_t t_target_warn_at;

	struct tun_xchg_list t_xchgs; /* every HTTP exchange */
	struct idmap t_xchg_ids; /* t_xchgs by id */
	unsigned int t_running; /* exchanges counting toward max_inflight */
	struct tun_cache t_cache;
	struct tombs t_tombs; /* failed or finished streams (§8.8) */

	struct tun_target_list t_targets; /* every target connection */
	struct tun_target_list t_idle; /* idle keep-alive connections */
	struct tun_xchg_list t_waiting; /* exchanges waiting for one */
	enum tun_target_proto t_target_proto;
	struct tun_target *t_probe; /* the dial that may bring h2, or NULL */
	struct tun_xchg_list t_probeq; /* exchanges waiting for t_probe */
	struct tun_h2_list t_h2s; /* HTTP/2 connections to the target */
	unsigned int t_nh2;
	struct tun_chan_list t_chans; /* application WebSockets */
	struct idmap t_chan_ids; /* t_chans by id */
	unsigned int t_nchans;
	unsigned int t_ntargets;
	unsigned int t_nidle;

	struct evbuffer *t_tmp; /* one chunk, read from a target */
	unsigned int t_nfinished; /* streams waiting only for their ack */
	struct tun_stats t_stats;
};

/* The parts of an exchange's life (one struct tun_xchg per id). */
enum tun_xchg_state {
	TX_S_WAITING = 0, /* waiting for a target connection */
	TX_S_REQUEST, /* request going out, response head awaited */
	TX_S_RESPONSE, /* relaying the response body */
	TX_S_FINISHED, /* target done; streamed data waits for its ack */
	TX_S_DEAD, /* freed from the loop */
};

/* One HTTP exchange: a sandbox request performed against the target. */
struct tun_xchg {
	struct tun *x_tun;
	char *x_id; /* a UUID in V2; V1 ids may be any string */
	enum tun_xchg_state x_state;
	int x_flags;
#define TX_F_STREAM_REQ 0x0001 /* began with http_req_begin */
#define TX_F_REQ_CL 0x0002 /* x_req_cl is known */
#define TX_F_REQ_ENDED 0x0004 /* the whole request body arrived */
#define TX_F_REQ_CHUNKED 0x0008 /* the body goes chunked to the target */
#define TX_F_REQ_DONE 0x0010 /* the whole request went to the target */
#define TX_F_RESP_STREAM 0x0020 /* answered with http_resp_begin */
#define TX_F_RESP_CL 0x0040 /* x_resp_cl is known */
#define TX_F_BODY 0x0080 /* a response body is expected (§9.6) */
#define TX_F_REWIND 0x0100 /* paused: the next window rewinds */
#define TX_F_RESP_ENDED 0x0200 /* the target's body is complete */
#define TX_F_END_SENT 0x0400 /* http_resp_end went out on this connection */
#define TX_F_RUNNING 0x0800 /* counts toward max_inflight */
#define TX_F_HEAD 0x1000 /* HEAD request */
#define TX_F_REUSED 0x2000 /* runs on a reused keep-alive connection */
#define TX_F_RETRIED 0x4000 /* already retried on a fresh connection */
#define TX_F_POOLQ 0x8000 /* in t_waiting for a target connection */
#define TX_F_REQ_DISCARD 0x10000 /* target gone: request data is dropped */
#define TX_F_PROBEQ 0x20000 /* in t_probeq: learning if the target has h2 */
	char *x_method;
	char *x_path; /* as the sandbox sent it, for logs */
	struct evbuffer *x_head; /* request head for the target */
	struct evbuffer *x_body; /* fast path: the request body */
	uint64_t x_body_len;

	/* Streamed request body (§4.6). */
	uint64_t x_req_cl;
	uint64_t x_req_received; /* bytes accepted from the sandbox */
	uint64_t x_req_consumed; /* bytes handed to the target */
	struct tun_chunks x_reqq; /* received, not yet handed on */

	/* The target's response. */
	struct tun_target *x_tt;
	struct http1_msg x_resp;
	int x_status;
	uint64_t x_resp_cl; /* announced Content-Length */
	struct evbuffer *x_fast; /* fast-path response body */
	char *x_begin; /* encoded http_resp_begin, kept for resends */
	uint64_t x_begin_gen; /* connection it went out on, 0 never */
	struct tun_chunks x_kept; /* response chunks not yet acknowledged */
	size_t x_unsent; /* index in x_kept of the first chunk to send */
	uint64_t x_resp_bytes; /* body bytes read from the target */
	uint64_t x_credits; /* response data envelopes we may send */

	uint64_t x_started; /* monotonic ms */
	struct event *x_timer; /* pool wait or ack wait deadline */
	TAILQ_ENTRY(tun_xchg) x_entry; /* t_xchgs */
	TAILQ_ENTRY(tun_xchg) x_wait; /* t_waiting */
};

/* Where a connection to the target is. */
enum tun_target_state {
	TT_S_RESOLVING = 0,
	TT_S_CONNECTING, /* TCP, then TLS */
	TT_S_BUSY, /* carries one exchange (an HTTP/2 stream: always) */
	TT_S_IDLE, /* in the keep-alive pool */
	TT_S_DEAD, /* freed from the loop */
};

/*
 * One HTTP/1.1 connection to the target, or one HTTP/2 stream (TT_F_H2):
 * the exchange sees both through the same target_* functions.
 */
struct tun_target {
	struct tun *tt_tun;
	enum tun_target_state tt_state;
	int tt_flags;
#define TT_F_EOF 0x01 /* the target closed its side */
#define TT_F_BODY 0x02 /* a response body is being read */
#define TT_F_BODY_DONE 0x04 /* ... and it is complete */
#define TT_F_H2 0x08 /* an HTTP/2 stream on tt_h2 */
#define TT_F_H2_HEAD 0x10 /* the final response head arrived */
#define TT_F_H2_END 0x20 /* the target ended the stream (END_STREAM) */
#define TT_F_H2_REQ_END 0x40 /* the request body is complete */
#define TT_F_H2_CLOSED 0x80 /* nghttp2 closed the stream */
#define TT_F_H2_NOTE 0x100 /* in tt_h2's list of streams to tell */
#define TT_F_H2_REFUSED 0x200 /* the target did not process it: retryable */
#define TT_F_H2_BODY 0x400 /* the request has a body (a data provider) */
	struct dns_query *tt_query;
	struct sockaddr_storage tt_addrs[DNS_MAX_ADDRS];
	size_t tt_naddrs;
	size_t tt_next;
	char *tt_error; /* why the last address failed */
	struct stream *tt_s; /* stops reading at the high watermark */
	struct tun_xchg *tt_x; /* the exchange it carries */
	enum http1_body tt_framing; /* of the response body */
	uint64_t tt_left; /* HTTP1_BODY_LENGTH: bytes still to read */
	struct http1_chunked tt_ck;
	unsigned int tt_uses; /* requests carried */
	struct event *tt_ev; /* deferred "ready" and idle expiry */
	TAILQ_ENTRY(tun_target) tt_entry; /* t_targets */
	TAILQ_ENTRY(tun_target) tt_idle_entry; /* t_idle */

	/* HTTP/2 streams only (target_h2.c). */
	struct tun_h2 *tt_h2; /* NULL once the connection is gone */
	int32_t tt_sid; /* stream id, 0 until submitted */
	struct evbuffer *tt_in; /* response body received, not yet read */
	struct evbuffer *tt_out; /* request body not yet in DATA frames */
	struct strbuf *tt_fields; /* response head: "name\0value\0"... */
	size_t tt_nfields;
	int tt_status;
	char *tt_why; /* why the stream failed, or NULL */
	struct event *tt_timer; /* YR_TUNNEL_HTTP_TIMEOUT without progress */
	TAILQ_ENTRY(tun_target) tt_h2_entry; /* h_streams */
	TAILQ_ENTRY(tun_target) tt_note_entry; /* h_notes */
};

/* Where an HTTP/2 connection to the target is. */
enum tun_h2_state {
	H2_S_OPEN = 0, /* takes new streams */
	H2_S_DRAINING, /* GOAWAY either way, or out of ids: no new streams */
	H2_S_DEAD, /* freed from the loop */
};

/* One HTTP/2 connection to the target, shared by concurrent exchanges. */
struct tun_h2 {
	struct tun *h_tun;
	enum tun_h2_state h_state;
	int h_flags;
#define H2_F_SETTINGS 0x01 /* the server's first SETTINGS arrived */
#define H2_F_SETTLED 0x02 /* ... and the probe's waiting exchanges moved */
	uint64_t h_serial; /* for logs */
	struct stream *h_s;
	struct nghttp2_session *h_sess;
	struct tun_target_list h_streams;
	unsigned int h_nstreams;
	struct tun_target_list h_notes; /* streams whose exchange is told */
	char *h_goaway; /* the target's GOAWAY, as a sentence, or NULL */
	struct event *h_send; /* deferred send */
	struct event *h_idle; /* idle expiry */
	TAILQ_ENTRY(tun_h2) h_entry; /* t_h2s */
};

/* Where an application WebSocket channel is. */
enum tun_chan_state {
	CH_S_RESOLVING = 0,
	CH_S_CONNECTING, /* TCP, then TLS */
	CH_S_UPGRADING, /* upgrade request sent */
	CH_S_OPEN, /* ws_connected sent; messages flow */
	CH_S_DEAD, /* freed from the loop */
};

/* One application WebSocket: the sandbox's channel to a target socket. */
struct tun_chan {
	struct tun *ch_tun;
	char *ch_id;
	char *ch_path; /* for logs */
	enum tun_chan_state ch_state;
	int ch_flags;
#define CH_F_CLOSE_SENT 0x01 /* the sandbox's ws_close went to the target */
	struct dns_query *ch_query;
	struct sockaddr_storage ch_addrs[DNS_MAX_ADDRS];
	size_t ch_naddrs;
	size_t ch_next;
	char *ch_error; /* why the last address failed */
	struct stream *ch_s; /* until the WebSocket takes it */
	struct wsconn *ch_ws;
	char ch_key[32];
	char *ch_request; /* the upgrade request */
	char *ch_protocols; /* offered Sec-WebSocket-Protocol, or NULL */
	struct http1_msg ch_resp;
	struct evbuffer *ch_msg; /* binary message being reassembled */
	struct event *ch_timer; /* open deadline */
	TAILQ_ENTRY(tun_chan) ch_entry;
};

/* options.c */
int
tun_options_parse(struct tun_options *, int, char **, char *const *, char **);
void tun_options_free(struct tun_options *);
int tun_gateway_parse(struct tun_url *, const char *, char **);
int tun_target_parse(struct tun_url *, const char *, char **);
void tun_url_free(struct tun_url *);
char *tun_gateway_url(const struct tun_options *);
char *tun_target_url(const struct tun_options *);
char *tun_tunnel_url(const struct tun_options *);
char *tun_host_port(const char *, int, int);

/* main.c */
void main_usage(FILE *);

/* client.c */
struct tun *tun_new(struct event_base *, const struct tun_options *, char **);
void tun_free(struct tun *);
void tun_start(struct tun *);
void tun_stop(struct tun *, const char *);
unsigned int tun_backoff(unsigned int *, int, uint64_t, uint64_t);
unsigned int tun_jitter_ms(unsigned int, uint32_t);
unsigned int tun_auth_delay(unsigned int);
int tun_route_miss_warns(unsigned int);
int tun_network_warns(unsigned int);
int tun_connected(const struct tun *);
size_t tun_queued(const struct tun *);
char *tun_stream_tls_error(
    struct stream *, short, const char *, const char *);
char *tun_stream_error(struct stream *, short, int, const char *);
char *tun_tls_describe(
    struct ssl_st *, unsigned long, const char *, const char *);
char *tun_connect_error(int, char *, int, const char *);
uint64_t tun_conn_gen(const struct tun *);
const struct tunproto_limits *tun_limits(const struct tun *);
int tun_send_msg(struct tun *, const struct tunproto_msg *);
int tun_send_text(struct tun *, const char *, size_t);
int tun_send_data(struct tun *, uint8_t, const char *, uint64_t, uint8_t,
    struct evbuffer *, size_t, size_t);
int tun_send_room(const struct tun *);
void tun_protocol_error(struct tun *, const char *, ...)
    __attribute__((format(printf, 2, 3)));
void tun_send_window(struct tun *, const char *, uint64_t, uint64_t);
void tun_send_error(struct tun *, const char *, const char *);

/* xchg.c */
void xchg_http_req(struct tun *, struct tunproto_msg *, int);
void xchg_req_begin(struct tun *, struct tunproto_msg *);
void xchg_req_end(struct tun *, const struct tunproto_msg *);
void xchg_req_data(
    struct tun *, const struct tunproto_env *, struct evbuffer *);
void xchg_window(struct tun *, const struct tunproto_msg *);
void xchg_peer_error(struct tun *, const struct tunproto_msg *);
void xchg_connected(struct tun *);
void xchg_disconnected(struct tun *);
void xchg_pump_all(struct tun *);
void xchg_free_all(struct tun *);
void xchg_target_ready(struct tun_xchg *);
void xchg_target_readable(struct tun_xchg *);
void xchg_target_writable(struct tun_xchg *);
void xchg_target_failed(struct tun_xchg *, const char *);
void xchg_wait_timeout(struct tun_xchg *);

/* wschan.c */
void chan_connect(struct tun *, const struct tunproto_msg *);
void chan_message(struct tun *, const struct tunproto_msg *, int);
void chan_data(struct tun *, const struct tunproto_env *);
void chan_close_msg(struct tun *, const struct tunproto_msg *);
int chan_peer_error(struct tun *, const struct tunproto_msg *);
void chan_drop_all(struct tun *);
void chan_free_all(struct tun *);

/* chunks.c */
void chunks_init(struct tun_chunks *, size_t);
void chunks_free(struct tun_chunks *);
void chunks_push(struct tun_chunks *, struct evbuffer *, size_t);
void chunks_add(struct tun_chunks *, const void *, size_t);
size_t chunks_pop(struct tun_chunks *, struct evbuffer *);
uint32_t chunks_len(const struct tun_chunks *, size_t);
uint64_t chunks_offset(const struct tun_chunks *, size_t);
uint64_t chunks_end(const struct tun_chunks *);
size_t chunks_drop_below(struct tun_chunks *, uint64_t);
size_t chunks_index_of(const struct tun_chunks *, uint64_t);

/* cache.c */
void cache_init(struct tun_cache *, uint64_t, size_t, size_t);
void cache_clear(struct tun_cache *);
void cache_expire(struct tun_cache *, uint64_t);
struct tun_cache_entry *cache_find(struct tun_cache *, const char *);
struct tun_cache_entry *
cache_put(struct tun_cache *, const char *, char *, size_t, uint64_t);
void cache_remove(struct tun_cache *, const char *);

/* target.c */
char *target_join_path(const char *, const char *, char **);
int target_header_dropped(const struct tunproto_header *, size_t, size_t);
struct evbuffer *
target_request_head(const struct tun *, const char *, const char *,
    const struct tunproto_header *, size_t, int, uint64_t, char **);
void target_acquire(struct tun *, struct tun_xchg *);
void target_release(struct tun_target *, int);
void target_close(struct tun_target *, const char *);
void target_read_resume(struct tun_target *);
struct evbuffer *target_outbuf(struct tun_target *);
size_t target_output(const struct tun_target *);
int target_keepalive(const struct tun_target *, const struct http1_msg *);
int target_read_head(struct tun_target *, struct http1_msg *, int, char **);
int target_body_short(struct tun_target *, size_t);
int target_read_body(
    struct tun_target *, struct evbuffer *, size_t, size_t *, char **);
void target_free_all(struct tun *);
int target_is_h2(const struct tun_target *);
int target_send_head(struct tun_target *, struct evbuffer *, int, char **);
void target_request_end(struct tun_target *);
void target_ready_later(struct tun_target *);
void target_probe_done(struct tun *, const char *);
struct tun_target *target_new(struct tun *, struct tun_xchg *);

/* target_h2.c */
void target_h2_adopt(struct tun_target *);
struct tun_h2 *target_h2_room(struct tun *);
void target_h2_attach(struct tun_h2 *, struct tun_xchg *);
void target_h2_detach(struct tun_target *);
int target_h2_submit(struct tun_target *, struct evbuffer *, int, char **);
void target_h2_request_end(struct tun_target *);
int target_h2_read_head(struct tun_target *, struct http1_msg *, char **);
int target_h2_body_short(struct tun_target *, size_t);
int target_h2_read_body(
    struct tun_target *, struct evbuffer *, size_t, size_t *, char **);
void target_h2_free_stream(struct tun_target *);
void target_h2_free_all(struct tun *);

#endif
