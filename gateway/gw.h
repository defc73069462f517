/*
 * akgateway: the public entry for sandbox port URLs.  One private header for
 * the whole program, prototypes grouped by file.
 */
#ifndef AK_GW_H
#define AK_GW_H

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <event2/event.h>

#include "http1.h"
#include "idmap.h"
#include "log.h"
#include "strbuf.h"
#include "token.h"
#include "tombs.h"
#include "evio.h"
#include "stream.h"
#include "tunproto.h"

struct evconnlistener;
struct evbuffer;
struct cfg_doc;
struct cfg_node;
struct splice_pool;
struct splicer;
struct memtrim;
struct ws_track;

/* How the gateway speaks to a sandbox port (ports[].protocol). */
enum gw_port_proto {
	GW_PROTO_HTTP1 = 0, /* HTTP/1.1, one exchange per connection */
	GW_PROTO_H2C, /* cleartext HTTP/2, many streams per connection */
	GW_PROTO_AUTO, /* native gRPC over h2c, the rest over HTTP/1.1 */
};

/* One rule of a sandbox's published ports: a port or an inclusive range. */
struct gw_port_rule {
	uint16_t pr_lo;
	uint16_t pr_hi;
	int pr_private; /* access: private */
	enum gw_port_proto pr_protocol;
	char *pr_host_rewrite; /* "localhost:${port}" or NULL */
};

enum gw_tunnel_mode {
	GW_TUNNEL_TERMINATE = 0,
	GW_TUNNEL_FORWARD,
};

/*
 * A sandbox in the directory.  Immutable once published and reference
 * counted: a request in flight keeps the version it was routed with while
 * the admin API replaces it.
 */
struct gw_sandbox {
	int sb_refcnt;
	uint64_t sb_generation; /* unique per published version */
	uint64_t sb_nconns; /* client connections routed to it now */
	char *sb_id;
	char *sb_safe_id;
	char *sb_address; /* literal IP as written, or NULL with netns */
	char *sb_netns; /* network namespace path, or NULL */
	struct sockaddr_storage sb_addr; /* port 0 */
	socklen_t sb_addrlen;
	struct gw_port_rule *sb_ports;
	size_t sb_nports;
	uint16_t *sb_tunnel_ports; /* listen ports */
	size_t sb_ntunnel_ports;
	enum gw_tunnel_mode sb_tunnel_mode;
	char *sb_tunnel_token; /* accepted on the tunnel route, or NULL */
	uint64_t sb_tunnel_client_wait; /* ms a request waits for a client */
	uint64_t sb_tunnel_http_timeout; /* ms for response metadata */
	uint64_t sb_tunnel_silence; /* ms of client silence that drop a link */
	uint64_t sb_tunnel_max_queued; /* requests waiting for a slot/client */
	uint64_t sb_max_connections; /* 0: limits.max_connections_per_sandbox */
	int sb_flags;
#define SB_F_API 0x01 /* put through the admin API, not from the file */
};

/* The set of sandboxes new requests are routed with; swapped whole. */
struct gw_directory {
	int d_refcnt;
	uint64_t d_generation;
	struct gw_sandbox **d_sandboxes;
	size_t d_count;
	/*
	 * Hashed indexes (open addressing, linear probing) by raw id and by
	 * safe id without regard to case: slot holds an index + 1, 0 is
	 * empty; d_mask + 1 slots, at least twice d_count.
	 */
	uint32_t *d_by_id;
	uint32_t *d_by_safe;
	size_t d_mask;
};

/* A certificate served for the names a client asks for (SNI). */
struct gw_sni {
	char **sn_names; /* exact names or "*.suffix" */
	size_t sn_count;
	char *sn_cert;
	char *sn_key;
};

/* A listener. */
struct gw_listen {
	char *l_address;
	struct sockaddr_storage l_ss;
	socklen_t l_sslen;
	char *l_cert; /* TLS when set */
	char *l_key;
	struct gw_sni *l_sni;
	size_t l_nsni;
	int l_http2; /* HTTP/2: ALPN h2 on TLS, prior knowledge on plain */
};

/* How a domain's host-form label reads (domains: host_format). */
enum route_host_format {
	ROUTE_HF_AUTO = 0, /* either order; ambiguous when both route */
	ROUTE_HF_PORT_ID, /* {port}-{id} */
	ROUTE_HF_ID_PORT, /* {id}-{port}, as AKernel writes it */
};

/* Where sandbox network namespaces are unless netns_dir says otherwise. */
#define GW_NETNS_DIR "/run/netns"

/*
 * The whole configuration; immutable once loaded and reference counted: a
 * reload publishes a new one and each loop lets go of the old when it
 * takes it.
 */
struct gw_config {
	int cf_refcnt;
	char *cf_file;
	enum log_level cf_log_level;
	enum log_format cf_log_format;
	char *cf_log_file;

	struct gw_listen *cf_listen;
	size_t cf_nlisten;
	struct gw_listen cf_admin;
	char *cf_admin_token;

	char **cf_domains;
	enum route_host_format *cf_domain_formats; /* per domain */
	size_t cf_ndomains;

	uint64_t cf_header_timeout; /* ms, whole head */
	uint64_t cf_connect_timeout; /* ms */
	uint64_t cf_keepalive_timeout; /* ms, idle client */
	uint64_t cf_upstream_idle; /* ms, pooled */
	uint64_t cf_response_timeout; /* ms, 0 = none */
	uint64_t cf_idle_timeout; /* ms, body transfer */

	uint64_t cf_max_connections;
	uint64_t cf_max_header_size;
	uint64_t cf_max_headers;
	uint64_t cf_max_body_size; /* 0 = no limit */

	uint64_t cf_max_connections_per_sandbox; /* 0 = no limit */
	uint64_t cf_h2_max_streams; /* HTTP/2 streams open at once */
	uint64_t cf_h2_max_requests; /* ... per connection's lifetime */
	uint64_t cf_h2_window; /* an HTTP/2 stream's receive window */
	uint64_t cf_h2_upstream_streams; /* streams per h2c upstream connection */
	uint64_t cf_max_idle_upstreams; /* per event loop; 0: no pool */
	uint64_t cf_workers; /* event loops; 0 = one per usable CPU */
	uint64_t cf_ws_idle_timeout; /* ms, upgraded connections */
	uint64_t cf_ws_fin_timeout; /* ms, once one side has ended */
	uint64_t cf_drain_timeout; /* ms, SIGTERM's drain; 0: none */

	struct token_key *cf_auth_secrets; /* [0] signs tokens, all verify */
	size_t cf_nauth_secrets; /* 0: no secret, so no private ports */
#define GW_AUTH_SECRETS_MAX 8 /* auth.secrets entries at most */
	char *cf_auth_cookie; /* cookie name carrying a token */
	int cf_require_tls_creds; /* refuse credentials on plain HTTP */
	int cf_path_form_cookies; /* browsers' credentials on the path form */

	char *cf_netns_dir; /* sandbox namespaces must be in it */

	struct gw_sandbox **cf_sandboxes; /* the initial directory */
	size_t cf_nsandboxes;
};

/* Error responses the gateway itself sends. */
struct gw_error {
	int e_status;
	const char *e_code;
};

extern const struct gw_error gw_err_no_route[];
extern const struct gw_error gw_err_tunnel_needs_http1[];
extern const struct gw_error gw_err_bad_host[];
extern const struct gw_error gw_err_ambiguous_host[];
extern const struct gw_error gw_err_sandbox_not_found[];
extern const struct gw_error gw_err_port_not_published[];
extern const struct gw_error gw_err_port_not_listening[];
extern const struct gw_error gw_err_upstream_timeout[];
extern const struct gw_error gw_err_upstream_closed[];
extern const struct gw_error gw_err_bad_response[];
extern const struct gw_error gw_err_too_many_connections[];
extern const struct gw_error gw_err_body_too_large[];
extern const struct gw_error gw_err_request_timeout[];
extern const struct gw_error gw_err_bad_target[];
extern const struct gw_error gw_err_bad_path[];
extern const struct gw_error gw_err_sandbox_unreachable[];
extern const struct gw_error gw_err_upstream_unreachable[];
extern const struct gw_error gw_err_tunnel_not_configured[];
extern const struct gw_error gw_err_no_resources[];
extern const struct gw_error gw_err_upstream_reset[];
extern const struct gw_error gw_err_grpc_needs_http2[];
extern const struct gw_error gw_err_unsupported_protocol[];

/* Upper bounds (seconds) of the request-duration histogram buckets. */
#define GW_DURATION_BUCKETS 10
/* Distinct error codes counted in metrics. */
#define GW_METRIC_CODES 48

/*
 * Counters for /metrics; one set per worker, summed when scraped.  Only
 * its own worker writes a set (with GW_ADD, a plain store another thread
 * may read at any time), so counting takes no lock.
 */
#define GW_ADD(field, n) \
	__atomic_store_n(&(field), (field) + (uint64_t)(n), __ATOMIC_RELAXED)
#define GW_LOAD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)
struct gw_metrics {
	uint64_t m_conns_accepted;
	uint64_t m_requests[6]; /* by status class: [1] 1xx .. [5] 5xx */
	uint64_t m_requests_proto[2]; /* by protocol: [0] HTTP/1, [1] HTTP/2 */
	uint64_t m_h2_conns; /* connections that spoke HTTP/2 */
	const char *m_codes[GW_METRIC_CODES]; /* gateway error codes seen */
	uint64_t m_code_counts[GW_METRIC_CODES];
	uint64_t m_upstream_connect_failures;
	uint64_t m_upstream_retries;
	uint64_t m_upstream_idle; /* pooled connections now */
	uint64_t m_upstream_evicted; /* pooled ones closed at the pool's cap */
	uint64_t m_upstream_h2_conns; /* HTTP/2 connections to sandbox ports */
	uint64_t m_upstream_h2_streams; /* ... and the streams on them */
	uint64_t m_bytes_in; /* from clients */
	uint64_t m_bytes_out; /* to clients */
	uint64_t m_ws_active;
	uint64_t m_relay_half_closed; /* relays with one direction ended */
	uint64_t m_duration_buckets[GW_DURATION_BUCKETS + 1]; /* last: +Inf */
	uint64_t m_duration_sum_us;
	uint64_t m_duration_count;
	/* Reverse tunnels (tunnel*.c). */
	uint64_t m_tunnel_sessions; /* tunnels with a negotiated client now */
	uint64_t m_tunnel_links; /* tunnel WebSockets accepted */
	uint64_t m_tunnel_reconnects; /* links after a tunnel's first */
	uint64_t m_tunnel_resumes; /* hellos that resumed a session */
	uint64_t m_tunnel_replays; /* requests re-sent after a resume */
	uint64_t m_tunnel_requests; /* Port B requests answered */
	uint64_t m_tunnel_errors; /* exchanges failed, protocol errors */
	uint64_t m_tunnel_refused; /* replaced sessions refused on return */
	/* Draining (drain.c). */
	uint64_t m_drain_cut; /* connections cut at a drain's deadline */
	uint64_t m_drain_ws_closed; /* WebSockets closed with 1001 at it */
};

struct gw_chan;

/*
 * What every worker of the process shares (worker.c).  The directory is
 * published here and each worker takes a reference to it when the
 * generation moves; counters are atomic.
 */
struct gw_shared {
	pthread_mutex_t s_lock; /* s_dir, s_conf and s_ctx */
	struct gw_config *s_conf; /* published; holds one reference */
	uint64_t s_conf_gen; /* bumped by every publish */
	size_t s_conf_taken; /* workers that took s_conf_gen */
	pthread_cond_t s_conf_cond; /* ... signalled as each takes it */
	struct gw_directory *s_dir; /* published; holds one reference */
	uint64_t s_dir_gen; /* atomic: bumped by every publish */
	uint64_t s_nconns; /* atomic: client connections, every worker */
	uint64_t s_nconns_peak; /* atomic: highest s_nconns lately (memtrim.c) */
	uint64_t s_conn_ids; /* atomic */
	struct ssl_ctx_st *
	    *s_ctx; /* per s_conf listener: TLS context or NULL */
	size_t s_nctx;
	struct gw **s_workers; /* [0] is the main loop */
	size_t s_nworkers;
	uint64_t s_drain_at; /* atomic: draining until then (mono ms); 0: not */
	uint64_t s_drain_idle; /* atomic: workers with nothing left to drain */
};

struct upstream;
TAILQ_HEAD(upstream_list, upstream);

/*
 * Idle upstreams of one event loop, hashed by identity (sandbox version
 * and port) and listed oldest last for the cap and the flushes.
 */
struct upstream_pool {
	struct upstream_list p_idle; /* newest first */
	struct upstream_list *p_buckets; /* p_mask + 1, or NULL: empty */
	size_t p_mask;
	size_t p_count;
};

/* Exchanges (struct gw_xchg, below) in a list. */
struct gw_xchg;
TAILQ_HEAD(gw_xchgs, gw_xchg);

/*
 * One event loop: the main one (worker 0, which also runs the admin API,
 * signals and terminate-mode tunnels) or a worker thread.  Each has its
 * own listeners (SO_REUSEPORT), connections, pool and counters.
 */
struct gw {
	struct event_base *g_base;
	struct gw_config *g_conf;
	struct gw_shared *g_shared; /* NULL in tunnel-server */
	size_t g_index; /* 0: the main loop */
	pthread_t g_thread;
	struct gw_chan *g_chan; /* commands and handed-over connections */
	struct gw_directory *g_dir; /* current directory; see gw_dir() */
	uint64_t g_conf_gen; /* s_conf_gen g_conf was taken at */
	uint64_t g_dir_gen; /* s_dir_gen g_dir was taken at */
	struct http1_limits g_limits;
	struct event *g_sigint;
	struct event *g_sigterm;
	struct event *g_sigquit; /* drains as SIGTERM does */
	struct event *g_sighup;
	struct event *g_sigusr1; /* reopen the log file */
	struct event *g_sigusr2; /* upgrade the binary (upgrade.c) */
	struct gw_listener *g_listeners;
	size_t g_nlisteners;
	uint64_t g_nconns;
	uint64_t g_conn_ids;
	TAILQ_HEAD(, conn) g_conns;
	struct upstream_pool g_pool; /* idle upstreams (upstream.c) */
	struct upstream_pool g_h2pool; /* HTTP/2 connections with room */
	TAILQ_HEAD(uph2_list, uph2) g_h2all; /* ... and every one of them */
	struct gw_metrics g_metrics;
	struct admin *g_admin; /* admin listener */
	struct tunnel_set *g_tunnels; /* terminate-mode tunnels (tunnel.c) */
	struct strbuf g_head; /* scratch for message heads (proxy.c) */
	struct splice_pool *g_splice; /* pipes for splice(2), or NULL: off */
	struct memtrim *g_memtrim; /* main loop: memory back after load */
	struct h1s_conf *g_h1conf; /* how port URLs are served (conn.c) */
	struct h2s_conf *g_h2conf; /* ... over HTTP/2 (conn_h2.c) */
	struct gw_xchgs g_xdead; /* exchanges done, freed from the loop */
	struct event *g_xreap; /* ... by this event, made active */
	struct event *g_watchdog; /* main loop: systemd's watchdog ping */
	/* Main loop: file sandboxes the admin API deleted (reload.c). */
	char **g_deleted;
	size_t g_ndeleted;
	uint64_t g_reloads; /* configuration reloads done */
	uint64_t g_reload_failures; /* ... and refused */
	uint64_t g_reload_time; /* Unix time the running one was loaded */
	int g_reload_failed; /* the last reload was refused */
	uint64_t g_drain_at; /* draining: the deadline (mono ms); 0: not */
	int g_drain; /* how far this loop's drain is (drain.c) */
#define DRAIN_L_CUT 0x01 /* the deadline passed: what was left was closed */
#define DRAIN_L_IDLE 0x02 /* nothing left (a worker: in s_drain_idle) */
#define DRAIN_L_OVER 0x04 /* the process stops: the drain's timer is idle */
};

/* A listening socket. */
struct gw_listener {
	struct ssl_ctx_st *gl_ctx; /* TLS context, or NULL for plain HTTP */
	struct gw *gl_gw;
	struct gw_listen *gl_conf;
	size_t gl_index; /* of gl_conf in its configuration's listen: */
	struct evconnlistener *gl_lev;
	struct event *gl_pause; /* EMFILE back-off */
	int gl_port;
};

enum conn_state {
	CONN_S_HEAD = 0, /* the engine serves it (HTTP/1 or HTTP/2) */
	CONN_S_SNIFF, /* which engine: ALPN, or an HTTP/2 preface */
	CONN_S_UPGRADED, /* relaying raw bytes after 101 */
	CONN_S_ERROR, /* writing a gateway error, then closing */
	CONN_S_DEAD, /* closed; freed from the loop */
};

/* Framing state of a body being relayed. */
struct gw_body {
	enum http1_body b_kind;
	uint64_t b_left; /* LENGTH: bytes still to come */
	uint64_t b_total; /* bytes relayed */
	struct http1_chunked b_chunked;
	int b_out_chunked; /* re-encode as chunked */
	int b_done;
};

enum xchg_state {
	XCHG_S_ROUTE = 0, /* routing, auth: no upstream yet */
	XCHG_S_BODY, /* relaying the request body */
	XCHG_S_WAIT, /* request sent, waiting for the response */
	XCHG_S_DONE, /* answered or cut short; freed from the loop */
};

/*
 * What an exchange asks of the transport that carries its request: the
 * HTTP/1 engine of a connection (conn.c) or a stream of an HTTP/2 session
 * (conn_h2.c).  The answer goes through x_sink.
 */
struct xchg_ops {
	const char *xo_proto; /* "h1", "h2": the access line, metrics */
	/* Request body bytes, de-framed, into dst; -1 at an error (*err). */
	ssize_t (*xo_body_read)(
	    struct gw_xchg *, struct evbuffer *, size_t max, enum http1_err *);
	int (*xo_body_done)(const struct gw_xchg *); /* all of it was read */
	/* Body bytes splice(2) may move from the client's socket; 0: none. */
	uint64_t (*xo_body_left)(const struct gw_xchg *);
	void (*xo_body_skip)(struct gw_xchg *, uint64_t); /* spliced in */
	int (*xo_splice_fd)(struct gw_xchg *); /* response splice; -1: none */
	void (*xo_body_sent)(struct gw_xchg *, uint64_t); /* spliced out */
	int (*xo_keeps)(const struct gw_xchg *); /* the transport goes on */
	void (*xo_no_keep)(struct gw_xchg *); /* ... or closes after it */
	/* The client must keep sending (reading) and receiving (writing). */
	void (*xo_timeouts)(struct gw_xchg *, int reading, int writing);
	/* Cut the exchange short (HTTP/1: close; HTTP/2: reset the stream). */
	void (*xo_abort)(struct gw_xchg *, const char *why);
	/* The exchange is done: the transport lets go of it. */
	void (*xo_done)(struct gw_xchg *);
};

/*
 * One request and its response: the route, the credentials' outcome, both
 * bodies, the upstream and what the access line says.  Made when a
 * request head begins (on an HTTP/2 stream: its head) and done when its
 * response ends, so an idle kept-alive connection holds none; freed from
 * the loop, so a callback chain that ends it can still read it.
 */
struct gw_xchg {
	TAILQ_ENTRY(gw_xchg) x_entry; /* its session's, then the dead list */
	struct conn *x_conn; /* the client connection carrying it */
	const struct xchg_ops *x_ops;
	void *x_tr; /* the transport's: the HTTP/2 stream, or NULL */
	struct sink *x_sink; /* where the answer goes */
	const struct http1_msg *x_req; /* HTTP/1: as parsed, else NULL */
	struct head x_head; /* the request as the core reads it */
	enum xchg_state x_state;
	enum http1_body x_req_kind; /* how the request body is framed */
	uint64_t x_req_length; /* ... its length with HTTP1_BODY_LENGTH */
	uint32_t x_stream; /* the HTTP/2 stream id, 0 for HTTP/1 */
	int x_flags;
#define XCHG_F_RESP_STARTED 0x002 /* response head sent to the client */
#define XCHG_F_HEAD_REQ 0x004 /* the request is HEAD */
#define XCHG_F_RESP_DONE 0x008 /* response fully relayed */
#define XCHG_F_RETRIED 0x010 /* retried on a fresh upstream */
#define XCHG_F_COUNTED 0x020 /* counted in x_sandbox->sb_nconns */
#define XCHG_F_WS_REQ 0x040 /* the request asks for a WebSocket upgrade */
#define XCHG_F_REQ_WHOLE 0x080 /* the request, body included, was read */
#define XCHG_F_LOGGED 0x100 /* the access line is written */
#define XCHG_F_NO_SLASH 0x200 /* path form without "/" after the port */
#define XCHG_F_UPGRADED 0x400 /* relays bytes after the upstream's 101 */
#define XCHG_F_H2_WS 0x800 /* an RFC 8441 WebSocket (extended CONNECT) */
	struct gw_body x_req_body;
	struct gw_body x_resp_body;
	struct upstream *x_up;
	/* What the upstream tells the exchange; NULL: proxy_owner. */
	const struct upstream_owner *x_uo;
	struct ws_h2 *x_ws; /* an RFC 8441 WebSocket's (ws_h2.c), or NULL */
	struct gw_sandbox *x_sandbox; /* referenced while routed */
	const struct gw_port_rule *x_rule;
	int x_port;
	char *x_target; /* origin-form, for upstream */
	char *x_host; /* Host as the client sent it */
	char *x_prefix; /* path-form prefix "/{id}/{port}", or NULL */
	char x_request_id[40]; /* X-Request-Id sent upstream */
	uint64_t x_start_us;
	uint64_t x_up_start_us; /* upstream asked for, for upstream_ms */
	int x_status; /* status sent, for the log */
	const char *x_err_code; /* gateway error code sent, or NULL */
	char *x_method;
	char *x_path; /* without the query */
};
/*
 * A client connection on a public listener: the HTTP/1 engine (h1s.c)
 * over its socket, and after a 101 the relay's two ends.
 */
/* "[" ip6 "]:" port and a NUL: the longest addr_format writes. */
#define CONN_PEER_LEN 56

struct conn {
	TAILQ_ENTRY(conn) c_entry;
	struct gw *c_gw;
	uint64_t c_id;
	struct h1s *c_h1; /* the engine, or NULL once released (relay) */
	struct stream *c_stream; /* the client's: the engine's, then ours */
	int c_refcnt; /* the engine's and the open connection's (conn_unref) */
	enum conn_state c_state;
	int c_flags;
#define CONN_F_CLIENT_EOF 0x04 /* client shut its side */
#define CONN_F_LINGER 0x40 /* shut down, draining input */
#define CONN_F_UPGRADED 0x200 /* relaying raw bytes after 101 */
#define CONN_F_TLS 0x400 /* the client connection is TLS */
#define CONN_F_RELEASING 0x800 /* the engine lets go of the socket */
#define CONN_F_HANDED 0x2000 /* relaying for the main loop (worker.c) */
#define CONN_F_ADOPTED 0x4000 /* handed over by a worker, counted there */
#define CONN_F_CLOSED 0x8000 /* conn_closed ran */
#define CONN_F_FULL 0x10000 /* accepted past limits.max_connections */
#define CONN_F_H2 0x20000 /* the listener takes HTTP/2 */
#define CONN_F_DRAIN_WS 0x40000 /* a close 1001 goes at the next boundary */
	int c_local_port;
	int c_relay; /* half-close of an upgraded connection (relay.c) */
#define RELAY_F_UP_EOF 0x01 /* the client ended its stream */
#define RELAY_F_UP_SHUT 0x02 /* ... passed on: upstream's write side shut */
#define RELAY_F_DOWN_EOF 0x04 /* the upstream ended its stream */
#define RELAY_F_DOWN_SHUT 0x08 /* ... passed on: client's write side shut */
#define RELAY_F_CLIENT_FIRST 0x10 /* the client ended first, for the log */
	struct event *c_timer; /* header deadline, idle */
	struct gw_xchg *c_x; /* HTTP/1: the exchange in progress, or NULL */
	struct h2s *c_h2; /* HTTP/2: the session, or NULL */
	struct gw_xchgs c_xchgs; /* HTTP/2: the exchanges of its streams */
	uint64_t c_active_ms; /* last byte moved, upgraded connections */
	/* splice(2) moves: [0] client to upstream, [1] upstream to client. */
	struct splicer *c_spl[2];
	/* A WebSocket's frames from the upstream, followed; NULL: not. */
	struct ws_track *c_wst;
	char c_peer[CONN_PEER_LEN]; /* ip:port or [ip6]:port (conn_peer_ip) */
};

enum upstream_state {
	UP_S_CONNECTING = 0,
	UP_S_ACTIVE, /* an owner's */
	UP_S_IDLE, /* in the pool */
	UP_S_DEAD,
};

struct upstream;

/*
 * What an upstream tells its owner (the exchange using it), h2o's
 * httpclient style: the upstream never reaches into its owner, and each
 * callback runs from the loop, never from inside a call the owner made.
 * Any may be NULL.
 */
struct upstream_owner {
	/* Connected, or taken from the pool: the request may be written. */
	void (*uo_ready)(struct upstream *, void *arg);
	/* Connecting failed for good, with the error to answer and why. */
	void (*uo_failed)(struct upstream *, const struct gw_error *,
	    const char *why, void *arg);
	/* EOF, an error or a timeout (BEV_EVENT_*) while the owner's. */
	void (*uo_event)(struct upstream *, short what, void *arg);
	/* The request's output drained below its low watermark. */
	void (*uo_drained)(struct upstream *, void *arg);
	/* The response-head deadline (timeouts.response) passed. */
	void (*uo_timeout)(struct upstream *, void *arg);
	/* The request's own deadline (gRPC's grpc-timeout) passed. */
	void (*uo_deadline)(struct upstream *, void *arg);
	/*
	 * The upstream leaves its owner (closed, or back to the pool):
	 * the owner forgets it and stops using its socket (splice(2)).
	 */
	void (*uo_detach)(struct upstream *, void *arg);
	/*
	 * The response (upstream_read_response): an interim (1xx, not 101)
	 * head, valid for the call; 0 reads on, -1 when the owner has
	 * finished with up.
	 */
	int (*uo_interim)(struct upstream *, const struct head *, void *);
	/*
	 * The final head: 0 reads the body, 1 stops reading (101: the
	 * owner relays the socket from now on), -1 as for uo_interim.  Its
	 * body: HEAD_F_NO_BODY none, HEAD_F_LENGTH h_length bytes, else
	 * until the upstream ends it.
	 */
	int (*uo_head)(struct upstream *, const struct head *, void *);
	/*
	 * n bytes of the body, without its framing, at the front of src:
	 * the owner takes all of them (and may upstream_read_pause).  0
	 * reads on, -1 as for uo_interim.
	 */
	int (*uo_body)(struct upstream *, struct evbuffer *src, size_t n,
	    void *arg);
	/*
	 * A chunked body's trailer fields, those a trailer may carry
	 * (http1_trailer_forbidden), just before uo_done: valid for the
	 * call only.  Not called when there are none.
	 */
	void (*uo_trailers)(
	    struct upstream *, const struct hfield *, size_t n, void *arg);
	/* The body ended: its length, its last chunk, or the close. */
	void (*uo_done)(struct upstream *, void *arg);
	/*
	 * The response cannot be read on: e (502 bad_upstream_response)
	 * with a sentence, or e NULL when the body broke off (closed,
	 * idle, malformed) after its head.
	 */
	void (*uo_error)(struct upstream *, const struct gw_error *,
	    const char *why, void *arg);
};

/* A connection to a sandbox port. */
struct upstream {
	TAILQ_ENTRY(upstream) u_entry; /* pool: oldest idle last */
	TAILQ_ENTRY(upstream) u_hentry; /* pool: its hash bucket */
	struct gw *u_gw;
	struct stream *u_stream;
	enum upstream_state u_state;
	int u_flags;
#define UP_F_SENT 0x01 /* a byte of a request was written */
#define UP_F_REUSED 0x02 /* taken from the pool */
#define UP_F_NO_REUSE 0x04 /* close after this exchange */
#define UP_F_GOT_BYTES 0x08 /* a response byte arrived */
#define UP_F_NETNS_ERR 0x20 /* the last attempt could not enter the netns */
#define UP_F_READING 0x40 /* reading a response (upstream_read_response) */
#define UP_F_HEAD_DONE 0x80 /* ... its final head came: now the body */
#define UP_F_HEAD_REQ 0x100 /* ... to a HEAD request: no body */
#define UP_F_PAUSED 0x200 /* the owner cannot take more now */
#define UP_F_EOF 0x400 /* the close that ends a close-delimited body came */
#define UP_F_H2 0x800 /* a stream of an HTTP/2 connection (u_h2s) */
#define UP_F_H2_CONN 0x1000 /* the connection of an HTTP/2 session (u_h2) */
	char *u_key; /* identity, for the log */
	int u_port;
	struct gw_sandbox *u_sandbox; /* referenced */
	int u_attempt;
	struct event *u_timer; /* retry, idle, response */
	const struct upstream_owner *u_owner; /* NULL: none (pooled, dead) */
	void *u_owner_arg;
	struct upstream_resp *u_r; /* from upstream_read_response to release */
	struct evbuffer *u_chunks; /* a chunked body's data, de-framed */
	struct splicer *u_spl; /* the body moving to the owner by splice(2) */
	uint64_t u_spliced; /* body bytes moved so */
	struct uph2 *u_h2; /* UP_F_H2_CONN: the session on it */
	struct uph2_stream *u_h2s; /* UP_F_H2: the stream */
};

/*
 * The response an upstream reads, made per response so that a pooled
 * connection holds none of it.
 */
struct upstream_resp {
	struct http1_msg r_resp;
	struct gw_body r_body; /* the response body, as the upstream frames it */
	struct http1_trailers r_trailers; /* a chunked body's, for uo_trailers */
	unsigned r_interim; /* interim (1xx) responses this request */
	uint64_t r_interim_bytes; /* ... and their head bytes */
};

/* admin.c */
int admin_start(struct gw *, char **cause);
void admin_stop(struct gw *);
int admin_reload_prepare(struct gw *, const struct gw_config *,
    struct evconnlistener **, char **cause);
void admin_reload_commit(struct gw *, struct evconnlistener *);

/* conf.c */
extern const char conf_builtin[];
#define CONF_BUILTIN_NAME "<built-in>" /* its file name in messages */
struct gw_config *conf_load(const char *path, char **cause);
struct gw_config *
conf_load_string(const char *name, const char *text, char **cause);
void conf_ref(struct gw_config *);
void conf_free(struct gw_config *);
const struct token_key *conf_signing_key(const struct gw_config *);
struct gw_sandbox *conf_sandbox_parse(const struct gw_config *,
    const struct cfg_doc *, const struct cfg_node *, char **cause);

/* directory.c */
struct gw_directory *directory_new(struct gw_sandbox *const *, size_t);
void directory_ref(struct gw_directory *);
void directory_unref(struct gw_directory *);
struct gw_sandbox *directory_find(const struct gw_directory *, const char *id);
struct gw_directory *
directory_put(const struct gw_directory *, struct gw_sandbox *);
struct gw_directory *
directory_delete(const struct gw_directory *, const char *id);
void sandbox_ref(struct gw_sandbox *);
void sandbox_unref(struct gw_sandbox *);
int sandbox_same(const struct gw_sandbox *, const struct gw_sandbox *);

/* worker.c */
#define GW_CMD_STOP 0x01 /* close everything and leave the loop */
#define GW_CMD_CONF 0x02 /* a new configuration was published */
#define GW_CMD_DIR 0x04 /* a new directory was published */
#define GW_CMD_DRAIN 0x08 /* stop accepting, finish what is in flight */
int gw_shared_init(struct gw *, char **cause);
size_t gw_default_workers(void);
int workers_start(struct gw *, char **cause);
void workers_post(struct gw *, int cmd);
void workers_join(struct gw *);
void gw_shared_free(struct gw *);
void gw_dir_refresh(struct gw *);
void gw_dir_publish(struct gw *, struct gw_directory *);
size_t gw_conf_publish(struct gw *, struct gw_config *, struct ssl_ctx_st **);
void gw_conf_take(struct gw *);
void gw_handoff(struct gw *, struct conn *, int fd, int listen_port);
void gw_metrics_sum(const struct gw *, struct gw_metrics *, uint64_t *nconns);

/* The directory new requests are routed with. */
static inline struct gw_directory *
gw_dir(struct gw *g)
{
	if (g->g_shared != NULL &&
	    __atomic_load_n(&g->g_shared->s_dir_gen, __ATOMIC_ACQUIRE) !=
		g->g_dir_gen)
		gw_dir_refresh(g);
	return (g->g_dir);
}

/* drain.c */
#define DRAIN_F_UPGRADE 0x01 /* listeners handed on (upgrade): admin too */
/* After the deadline, the moment the close frames and GOAWAYs have. */
#define DRAIN_GRACE_MS 2000
void
drain_start(struct gw *, uint64_t ms, int flags, void (*stop)(struct gw *));
void drain_loop_start(struct gw *);
void drain_stop(struct gw *);

/* Is the loop draining (drain_start)? */
static inline int
gw_draining(const struct gw *g)
{
	return (g->g_drain_at != 0);
}

/* route.c */
enum route_result {
	ROUTE_OK = 0,
	ROUTE_NONE, /* not a port URL */
	ROUTE_BAD, /* malformed host, id or port */
	ROUTE_RESERVED, /* /tunnel/ or /direct/ */
};
/* The readings of a host-form label: port-first first, at most two. */
struct route_host {
	size_t rh_n;
	int rh_port[2];
	char *rh_id[2];
};
enum route_result route_parse_host(const char *host, size_t len,
    char *const *domains, const enum route_host_format *formats,
    size_t ndomains, struct route_host *);
void route_host_clear(struct route_host *);
enum route_result
route_parse_path(const char *target, char **id, int *port, char **rest);
enum route_result
route_parse_tunnel(const char *target, char **id, int *ws_port);
const struct gw_port_rule *
route_find_port(const struct gw *, const struct gw_sandbox *, int port);

/* listener.c */
/* How long accepting pauses when the process is out of descriptors. */
#define LISTENER_PAUSE_MS 1000
int listener_start(struct gw *, char **cause);
struct event *listener_pause_new(struct event_base *, struct evconnlistener *);
struct evconnlistener *listener_wrap(struct event_base *,
    void (*)(struct evconnlistener *, evutil_socket_t, struct sockaddr *, int,
	void *),
    void *, int fd);
int listener_backoff(struct evconnlistener *, struct event *pause,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void listener_stop(struct gw *);
struct ssl_ctx_st **listener_load_tls(const struct gw_config *, char **cause);
void listener_free_tls(struct ssl_ctx_st **, size_t);
int listener_sync(
    struct gw *, struct gw_config *, struct ssl_ctx_st **, char **cause);

/* upgrade.c */
void upgrade_init(int argc, char **argv, void (*drain)(struct gw *));
int upgrade_parse_item(const char *, int *fd, char *kind, const char **key);
char *upgrade_tunnel_key(const char *name, int port, const char *place);
int upgrade_take_listen(const struct sockaddr_storage *, socklen_t);
int upgrade_take_admin(const struct sockaddr_storage *, socklen_t);
int upgrade_take_tunnel(const char *name, int port, const char *place);
void upgrade_started(struct gw *);
void upgrade_ready(void);
void upgrade_start(struct gw *);
void upgrade_free(void);
int listener_adopt(struct gw *, int fd);
int admin_fd(struct gw *);
size_t tunnel_count(struct gw *);
int tunnel_listen_fd(struct gw *, size_t, const char **name, int *port,
    const char **place);

/* reload.c */
/* What a reload did to the directory, for its log line. */
struct reload_count {
	size_t rc_added;
	size_t rc_changed;
	size_t rc_removed;
	size_t rc_kept; /* unchanged */
	size_t rc_api; /* the admin API's, left as they are */
};
int reload_run(struct gw *, const char *why, char **cause);
struct gw_directory *reload_directory(struct gw *,
    const struct gw_directory *, const struct gw_config *,
    struct reload_count *);
void reload_deleted(struct gw *, const struct gw_sandbox *);
void reload_put(struct gw *, const char *id);
void reload_free(struct gw *);

/* conn.c */
void
conn_accept(struct gw *, int fd, struct sockaddr *, int, struct gw_listener *);
void conn_close(struct conn *, const char *reason);
void conn_finish(struct conn *);
struct stream *conn_steal_stream(struct conn *);
void conn_close_all(struct gw *);
void gw_conf_apply(struct gw *);
void conn_adopt(struct gw *, struct conn *, int fd, int listen_port);
const char *conn_state_name(enum conn_state);
void conn_print(const struct conn *, char *, size_t);
const char *conn_peer_ip(const struct conn *, char *, size_t);
void conn_upgrade(struct conn *);
void conn_handoff(struct conn *, int listen_port);
void conn_timer_set(struct conn *, uint64_t ms);
void conn_closed(struct conn *, const char *reason);
void conn_unref(struct conn *);

/* conn_h2.c: a client connection's HTTP/2 session and its streams. */
#define H2_PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define H2_PREFACE_LEN 24
struct h1x;
void conn_h2_start(struct conn *, struct h1x *);
void conn_h2_conf_apply(struct gw *);

/* xchg.c: an exchange from its head to its end, whatever carries it. */
struct gw_xchg *xchg_new(struct conn *, const struct xchg_ops *, void *tr,
    struct sink *, uint64_t start_us);
void xchg_free(struct gw_xchg *);
void xchg_start(struct gw_xchg *, const struct head *,
    const struct http1_msg *, enum http1_body, uint64_t length);
void xchg_refuse(struct gw_xchg *, const struct gw_error *, enum http1_err,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#define xchg_fail(x, e, ...) xchg_refuse(x, e, HTTP1_E_NONE, __VA_ARGS__)
void xchg_response_done(struct gw_xchg *);
/* What one access line says (xchg_log_line). */
struct xchg_line {
	const char *xl_request_id; /* or NULL */
	const char *xl_method;
	const char *xl_path; /* without the query */
	const char *xl_sandbox; /* routed to, or NULL */
	const char *xl_err_code; /* the gateway's error code, or NULL */
	const char *xl_close; /* what the connection does next */
	const char *xl_proto; /* "h1", "h2" */
	int xl_status;
	int xl_port; /* 0: none */
	uint32_t xl_stream; /* HTTP/2 stream id; 0: HTTP/1 */
	uint64_t xl_bytes_in;
	uint64_t xl_bytes_out;
	uint64_t xl_start_us; /* monotonic: the request began */
	uint64_t xl_up_start_us; /* ... its upstream was asked for; 0: never */
};
void xchg_log_line(struct conn *, const struct xchg_line *);
void xchg_log_access(struct gw_xchg *, const char *close);
void xchg_log_end(struct gw_xchg *);
void xchg_done(struct gw_xchg *);
void xchg_abort(struct gw_xchg *, const char *why);
void xchg_lost(struct gw_xchg *, const char *why);
void xchg_print(const struct gw_xchg *, char *, size_t);
void xchg_reap_start(struct gw *);
void xchg_reap_stop(struct gw *);
char *xchg_path_of(const char *target, size_t len);
void xchg_start_refused(struct gw_xchg *, const struct head *,
    const struct gw_error *, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static inline int
xchg_is_h1(const struct gw_xchg *x)
{
	return (x->x_stream == 0);
}

/* proxy.c */
void proxy_start(struct gw_xchg *);
void proxy_request_id(struct gw_xchg *);
void proxy_request_body(struct gw_xchg *);
void proxy_client_drained(struct gw_xchg *);
extern const struct upstream_owner proxy_owner;
void proxy_request_splice_try(struct gw_xchg *);
int proxy_is_grpc(const struct head *);
int proxy_upgrade_head(struct gw_xchg *, const struct head *);

/*
 * ws_h2.c: RFC 8441 WebSockets from HTTP/2 clients, relayed to an
 * HTTP/1.1 upgrade upstream.
 */
struct ws_h2;
int ws_h2_protocol_ok(const struct head *);
void ws_h2_start(struct gw_xchg *);
void ws_h2_client_data(struct gw_xchg *);
void ws_h2_lost(struct gw_xchg *);
void ws_h2_end(struct gw_xchg *);
void ws_h2_free(struct gw_xchg *);
int ws_h2_drain_close(struct gw_xchg *);

/* relay.c */
struct splice_pool *relay_splice_pool(void);
void relay_splice_stop(struct conn *);
void relay_splice_stop_one(struct conn *, int);
void relay_splice_try(struct conn *);
void relay_start(struct conn *);
void relay_client_read(struct conn *);
void relay_client_drained(struct conn *);
void relay_client_eof(struct conn *);
void relay_idle(struct conn *);
void relay_end(struct conn *);
void relay_abort(struct conn *);
void relay_abort_stuck(struct stream *);
int relay_drain_close(struct conn *);

/* memtrim.c */
void memtrim_start(struct gw *);
void memtrim_count(struct gw *, uint64_t);
void memtrim_stop(struct gw *);

/* sdnotify.c */
void sdnotify_ready(void);
void sdnotify_reloading(void);
void sdnotify_reloaded(void);
void sdnotify_stopping(void);
void sdnotify_watchdog_start(struct gw *);
void sdnotify_watchdog_stop(struct gw *);

/* metrics.c */
void metrics_request(
    struct gw *, int status, const char *code, uint64_t duration_us, int h2);
void metrics_code(struct gw *, const char *code);
void metrics_render(const struct gw *, struct evbuffer *);

/*
 * Reverse tunnels, the sandbox role (tunnel.c: listeners, links, sessions;
 * tunnel_req.c: HTTP exchanges on Port B; tunnel_body.c: their bodies;
 * tunnel_ws.c: WebSockets on Port B).
 */

/* What a tunnel's Port B listener is doing. */
enum tunnel_state {
	TUNNEL_S_UNBOUND = 0, /* Port B could not be opened; retrying */
	TUNNEL_S_LISTENING, /* Port B is open */
	TUNNEL_S_DEAD, /* removed; freed from the loop */
};

/* One tunnel WebSocket from a client. */
enum tlink_state {
	TLINK_S_HELLO = 0, /* attached, waiting for the client's hello */
	TLINK_S_V2, /* protocol V2 negotiated: requests flow */
	TLINK_S_GONE, /* replaced, lost or failed; closing */
};

/*
 * One terminate-mode tunnel: a sandbox's listen port.  It owns Port B for
 * as long as it is configured, the newest client link, the session that
 * link resumed, and every exchange of that session.
 */
struct tunnel {
	TAILQ_ENTRY(tunnel) t_entry;
	struct gw *t_gw;
	enum tunnel_state t_state;
	int t_flags;
#define TUNNEL_F_SEEN 0x01 /* still configured (tunnel_sync) */
#define TUNNEL_F_RESUMABLE 0x02 /* t_session is a resumable session */
#define TUNNEL_F_EVER 0x04 /* a client has negotiated before */
#define TUNNEL_F_PAUSED 0x08 /* accepting paused (out of descriptors) */
#define TUNNEL_F_STANDALONE 0x10 /* akgateway tunnel-server */
#define TUNNEL_F_FREEING 0x20 /* removed and unreferenced: free queued */
	char *t_name; /* sandbox id, or "tunnel-server" */
	int t_port; /* listen port */
	char *t_netns; /* namespace path, or NULL for an address */
	struct sockaddr_storage t_addr; /* where Port B binds */
	socklen_t t_addrlen;
	char t_addr_str[64];
	uint64_t t_client_wait; /* ms a new request waits for a client */
	uint64_t t_http_timeout; /* ms for response metadata */
	uint64_t t_silence; /* ms without a frame from the client: dead */
	size_t t_max_queued; /* exchanges that may wait (TX_S_HOLD) */
	struct tunproto_limits t_local; /* what we advertise */
	struct evconnlistener *t_lev;
	uint64_t t_retry_at; /* UNBOUND or paused: next bind/accept, mono ms */
	unsigned t_bind_failures;
	char *t_bind_error;
	struct tunnel_link *t_link; /* the newest link, or NULL */
	TAILQ_HEAD(, tunnel_link) t_links; /* every link not yet freed */
	uint64_t t_generation; /* links accepted */
	char t_session[TUNPROTO_UUID_LEN + 1]; /* "" without one */
	TAILQ_HEAD(, tunnel_xchg) t_xchgs; /* exchanges, channels: oldest 1st */
	struct idmap t_xchg_ids; /* t_xchgs by x_id: every frame looks one up */
	size_t t_ninflight; /* HTTP exchanges sent to the client */
	size_t t_nheld; /* exchanges waiting (TX_S_HOLD) */
	struct event *t_kick; /* a slot freed: send the oldest waiting */
	size_t t_nchannels; /* application WebSockets */
	TAILQ_HEAD(, tunnel_dconn) t_dconns; /* Port B connections */
	size_t t_ndconns;
	struct tombs t_tombs; /* finished exchanges and channels (§8.8) */
	struct tombs t_replaced; /* sessions a newer client replaced */
	uint64_t t_ids; /* downstream connection ids */
	uint64_t t_requests; /* Port B requests answered */
	uint64_t t_errors; /* exchanges failed, protocol errors */
	uint64_t t_bytes_in; /* body bytes from Port B callers */
	uint64_t t_bytes_out; /* body bytes to Port B callers */
};

/* A tunnel WebSocket (Port A, through the gateway's tunnel route). */
struct tunnel_link {
	TAILQ_ENTRY(tunnel_link) l_entry;
	struct tunnel *l_tunnel;
	struct wsconn *l_ws;
	enum tlink_state l_state;
	int l_flags;
#define TLINK_F_RESUMABLE 0x01 /* hello with resume and a session */
#define TLINK_F_BLOCKED 0x02 /* data waits for on_writable */
#define TLINK_F_CLOSED 0x04 /* on_close came; free pending */
#define TLINK_F_TLS 0x08 /* wss: data chunks sized for TLS records */
	uint64_t l_gen; /* generation */
	char l_peer[64]; /* client ip:port */
	int64_t l_since; /* wall clock seconds, for the admin API */
	uint64_t l_last_rx; /* monotonic ms of the last message */
	uint64_t l_hello_by; /* monotonic ms: no hello by then is logged */
	struct tunproto_limits l_neg; /* negotiated (V2) */
	uint64_t l_client_pings; /* pings the client sent */
	uint64_t l_bytes_in; /* WebSocket payload bytes received */
	uint64_t l_bytes_out; /* WebSocket payload bytes sent */
};

/* Where one exchange or channel is. */
enum tx_state {
	TX_S_BODY = 0, /* reading a fast-path body before sending it */
	TX_S_HOLD, /* waiting for a client (client_wait) */
	TX_S_SENT, /* request sent; waiting for response metadata */
	TX_S_STREAM, /* response body streaming downstream */
	TX_S_WS_WAIT, /* ws_connect sent; waiting for ws_connected */
	TX_S_WS_OPEN, /* application WebSocket relaying */
	TX_S_DONE, /* finished; freed from the loop */
};

/*
 * One Port B HTTP exchange or application WebSocket channel, named by the
 * UUID we give it.  It lives in t_xchgs from the request head to the end
 * of the response; x_dconn is the caller's connection.
 */
struct tunnel_xchg {
	TAILQ_ENTRY(tunnel_xchg) x_entry;
	struct tunnel *x_tunnel;
	struct event_base *x_base; /* outlives the tunnel, for the last free */
	struct tunnel_dconn *x_dconn;
	enum tx_state x_state;
	int x_flags;
#define TX_F_WS 0x0001 /* an application WebSocket channel */
#define TX_F_STREAM_REQ 0x0002 /* body sent as http_req_begin + data */
#define TX_F_UP_LENGTH 0x0004 /* x_up_len is the declared length */
#define TX_F_UP_DONE 0x0008 /* the caller's body was read in full */
#define TX_F_UP_END_SENT 0x0010 /* http_req_end sent on this link */
#define TX_F_UP_WINDOW 0x0020 /* the client opened its window, this link */
#define TX_F_UP_STOPPED 0x0040 /* the response began: upload dropped */
#define TX_F_RESP_LENGTH 0x0080 /* x_resp_len is the declared length */
#define TX_F_RESP_NOBODY 0x0100 /* HEAD, 204 or 304: no body */
#define TX_F_PAUSED 0x0200 /* link lost; waiting for a resume */
#define TX_F_COUNTED 0x0400 /* counted in t_ninflight/t_nchannels */
#define TX_F_WS_CLOSED 0x0800 /* the caller's WebSocket has closed */
#define TX_F_RETRY 0x1000 /* re-sent to a new client session */
#define TX_F_UP_PROBE 0x2000 /* chunked: may still fit the fast path */
#define TX_F_CONN 0x4000 /* holds the caller's socket: in t_ndconns */
	char x_id[TUNPROTO_UUID_LEN + 1];
	char *x_method; /* for the frame and the log */
	char *x_target; /* origin-form, with the query */
	uint64_t x_start_us;
	struct event *x_timer; /* client_wait, http_timeout, ws_connected */
	char *x_frame; /* request frame kept for replay, or NULL */
	size_t x_frame_len;
	const struct gw_error *x_err; /* gateway error answered, or NULL */
	int x_status; /* status sent downstream */
	/* Request body. */
	struct evbuffer *x_body; /* fast path: all; stream: from x_up_acked */
	uint64_t x_up_len; /* declared, with TX_F_UP_LENGTH */
	uint64_t x_up_read; /* bytes read from the caller */
	uint64_t x_up_acked; /* the client's ack_offset */
	uint64_t x_up_sent; /* next offset to send on this link */
	uint64_t x_up_credits;
	uint64_t *x_up_ends; /* ends of chunks sent and not yet acked */
	size_t x_up_nends;
	size_t x_up_cap;
	/* Response body. */
	uint64_t x_resp_len; /* with TX_F_RESP_LENGTH */
	uint64_t x_resp_received; /* bytes accepted from the client */
	uint64_t *x_resp_q; /* per chunk queued downstream: output end */
	uint64_t *x_resp_qack; /* ... and its ack_offset */
	size_t x_resp_nq;
	size_t x_resp_cap;
	/* Application WebSocket. */
	struct wsconn *x_ws; /* to the caller, once open */
	char x_ws_accept[32]; /* Sec-WebSocket-Accept for the 101 */
	struct evbuffer *x_ws_msg; /* binary message being reassembled */
};

/*
 * A connection from code in the sandbox to Port B.  The HTTP/1 engine
 * (h1s.c) runs it; this is its owner: the exchange it carries, and its
 * place in the tunnel's list and count.
 */
struct tunnel_dconn {
	TAILQ_ENTRY(tunnel_dconn) d_entry;
	struct tunnel *d_tunnel;
	uint64_t d_id;
	struct h1s *d_h1s;
	int d_flags;
#define TDC_F_LISTED 0x01 /* on t_dconns */
#define TDC_F_RELEASED 0x02 /* handed to an application WebSocket */
#define TDC_F_READ_HIGH 0x04 /* reading raised for a streamed body */
	char d_peer[64];
	const struct head *d_head; /* the request's, while d_x runs */
	const struct http1_msg *d_req; /* ... as parsed (the engine's) */
	struct tunnel_xchg *d_x; /* the exchange in progress */
};

extern const struct gw_error gw_err_tunnel_not_connected[]; /* 503 */
extern const struct gw_error gw_err_tunnel_timeout[]; /* 504 */
extern const struct gw_error gw_err_tunnel_busy[]; /* 429 */
extern const struct gw_error gw_err_tunnel_error[]; /* 502 */
extern const struct gw_error gw_err_tunnel_gone[]; /* 503 */

/* tunnel.c */
void tunnel_attach(struct conn *, struct gw_sandbox *, int listen_port);
void tunnel_sync(struct gw *);
void tunnel_shutdown(struct gw *);
void tunnel_drain_start(struct gw *);
size_t tunnel_drain_tick(struct gw *);
size_t tunnel_drain_cut(struct gw *);
struct tunnel *tunnel_standalone(struct gw *, const char *listen,
    uint64_t client_wait, uint64_t http_timeout, char **cause);
void tunnel_link_accept(struct tunnel *, struct stream *,
    const char *peer, const char *session);
struct json_t *tunnel_admin_json(const struct gw *, const struct gw_sandbox *);
struct tunnel_link *tunnel_active(const struct tunnel *);
struct tunnel_xchg **tunnel_xchg_snapshot(const struct tunnel *, size_t *);
int tunnel_send_msg(struct tunnel *, const struct tunproto_msg *);
int tunnel_xchg_sent(const struct tunnel_xchg *);
void tunnel_link_drop(struct tunnel_link *, uint16_t, const char *);
int tunnel_send_frame(struct tunnel *, const char *, size_t);
int tunnel_send_data(struct tunnel *, uint8_t kind, const char *id, int flags,
    uint64_t offset, const uint8_t *, size_t);
int tunnel_send_data_ev(struct tunnel *, uint8_t kind, const char *id,
    int flags, uint64_t offset, struct evbuffer *, size_t pos, size_t len);
int tunnel_data_ok(const struct tunnel *);
void tunnel_send_window(struct tunnel *, const char *id, uint64_t credits,
    int ack, uint64_t ack_offset, int complete);
void tunnel_send_error(struct tunnel *, const char *id, const char *msg);
void tunnel_protocol_error(struct tunnel *, const char *why);
void tunnel_released(struct tunnel *);
const char *tx_state_name(enum tx_state);
const char *tunnel_xchg_show(const struct tunnel_xchg *, char *, size_t);

/* tunnel_hello.c */
void tunnel_link_hello(struct tunnel_link *, const struct tunproto_msg *);

/* tunnel_req.c */
void tunnel_dconn_accept(struct tunnel *, int fd, struct sockaddr *);
void tunnel_dconn_close(struct tunnel_dconn *, const char *reason);
void tunnel_dconns_retire(struct tunnel *, const char *reason);
struct stream *tunnel_dconn_release(struct tunnel_dconn *, const struct head *);
void tunnel_dconn_refuse(struct tunnel_dconn *, const struct gw_error *,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct tunnel_xchg *tunnel_xchg_new(struct tunnel_dconn *, int flags);
void tunnel_xchg_free(struct tunnel_xchg *);
void tunnel_xchg_end(struct tunnel_xchg *, const char *reason);
struct tunnel_xchg *tunnel_xchg_find(const struct tunnel *, const char *id);
void tunnel_xchg_ready(struct tunnel_xchg *);
void tunnel_xchg_dispatch(struct tunnel_xchg *);
void tunnel_queue_cb(evutil_socket_t, short, void *);
int tunnel_xchg_retryable(const struct tunnel_xchg *);
void tunnel_xchg_fail(struct tunnel_xchg *, const struct gw_error *,
    const char *tell_client, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int tunnel_hop_field(const char *);
const struct tunproto_limits *tunnel_xchg_limits(const struct tunnel *);

/* tunnel_body.c */
int64_t tunnel_xchg_read_body(struct tunnel_xchg *);
void tunnel_xchg_credit(struct tunnel_xchg *);
void tunnel_xchg_pump(struct tunnel_xchg *);
void tunnel_xchg_msg(struct tunnel_xchg *, const struct tunproto_msg *);
void tunnel_xchg_data(
    struct tunnel_xchg *, const struct tunproto_env *, struct evbuffer *);
void tunnel_xchg_pause(struct tunnel_xchg *);
void tunnel_xchg_resume(struct tunnel_xchg *);

/* tunnel_ws.c */
void tunnel_ws_start(struct tunnel_dconn *);
void tunnel_ws_dispatch(struct tunnel_xchg *);
void tunnel_ws_msg(struct tunnel_xchg *, const struct tunproto_msg *);
void tunnel_ws_data(struct tunnel_xchg *, const struct tunproto_env *);
void tunnel_ws_lost(struct tunnel_xchg *, const char *reason);
void tunnel_ws_free(struct tunnel_xchg *);

/* tunnelsrv.c */
int tunnelsrv_main(int argc, char **argv);
void tsrv_usage(FILE *);

/* upstream.c */
struct upstream *upstream_get(struct gw *, struct gw_sandbox *, int port,
    int fresh, const struct upstream_owner *, void *arg);
void upstream_pool_init(struct gw *);
void upstream_pool_flush_sandbox(struct gw *, const char *id);
void upstream_release(struct upstream *, int reusable);
void upstream_close(struct upstream *, const char *);
void upstream_addr_format(const struct upstream *, char *, size_t);
void upstream_pool_flush(struct gw *);
void upstream_pool_flush_stale(struct gw *);
struct upstream *upstream_pipe(struct gw *, struct gw_sandbox *, int fd,
    const struct upstream_owner *, void *arg);
const char *upstream_state_name(enum upstream_state);
void upstream_read_response(struct upstream *, int head_request);
void upstream_read_pause(struct upstream *);
void upstream_read_resume(struct upstream *);
void upstream_read_raw(struct upstream *);
int upstream_splice_body(struct upstream *, int fd);
size_t upstream_buffered(const struct upstream *);
void upstream_print(const struct upstream *, char *, size_t);

void upstream_pool_add(struct upstream_pool *, struct upstream *);
void upstream_pool_del(struct upstream_pool *, struct upstream *);
struct upstream_list *
upstream_pool_bucket(const struct upstream_pool *, const struct gw_sandbox *, int);

/*
 * upstream_h2.c: HTTP/2 (h2c) to sandbox ports.  Each stream is a struct
 * upstream of its own (UP_F_H2) that tells its owner what upstream.c's
 * HTTP/1 connections do; its connection (UP_F_H2_CONN) carries many.
 */
struct uph2;
struct uph2_stream;
struct upstream *upstream_h2_get(struct gw *, struct gw_sandbox *, int port,
    int fresh, const struct upstream_owner *, void *arg);
void upstream_h2_request(struct upstream *, const struct head *, int body);
struct evbuffer *upstream_h2_body_out(struct upstream *);
void upstream_h2_body_more(struct upstream *, int done);
void upstream_h2_timeouts(struct upstream *, uint64_t idle_ms,
    uint64_t response_ms, uint64_t deadline_ms);
void upstream_h2_resume(struct upstream *);
size_t upstream_h2_buffered(const struct upstream *);
void upstream_h2_stream_close(struct upstream *);
void upstream_h2_stream_free(struct upstream *);
void upstream_h2_flush(struct gw *, const char *id, int stale);
void upstream_h2_adopt(struct gw *, struct gw_sandbox *, int port, int fd);

/* Bodies with less than this left are not worth a splice(2) set-up. */
#define UPSTREAM_SPLICE_MIN (256 * 1024)
/* Largest limits.max_idle_upstreams: idle connections per event loop. */
#define UPSTREAM_POOL_MAX 65536

/* The reason upstream.c gives uo_failed for a connect timeout. */
#define UPSTREAM_WHY_TIMEOUT "connect timeout"

/*
 * Response sinks.  An exchange sends its response through one, whatever
 * carries it: a head (interim 1xx heads first, then the final one), body
 * bytes, trailer fields, the end.  The HTTP/1 engine's sink writes wire
 * bytes with watermarks (h1s.c); an HTTP/2 stream's would submit frames.
 * Flow control: sink_room says how many body bytes it takes before it is
 * full; the owner stops there and goes on when its transport says the
 * sink drained (h1s_hooks.on_drain).  Each call returns 0, or -1 when the
 * sink is gone (the connection closed): the owner stops.
 */
struct sink;
struct sink_ops {
	int (*so_head)(struct sink *, const struct head *);
	int (*so_body)(struct sink *, struct evbuffer *, size_t len);
	int (*so_trailers)(struct sink *, const struct hfield *, size_t n);
	int (*so_end)(struct sink *);
	size_t (*so_room)(const struct sink *);
	void (*so_abort)(struct sink *, const char *why);
};
struct sink {
	const struct sink_ops *sk_ops;
	void *sk_arg; /* the implementation's */
};

/* Send a response head: interim (1xx but 101) or final. */
static inline int
sink_head(struct sink *s, const struct head *h)
{
	return (s->sk_ops->so_head(s, h));
}

/* Move len body bytes from the front of buf into the sink. */
static inline int
sink_body(struct sink *s, struct evbuffer *buf, size_t len)
{
	return (s->sk_ops->so_body(s, buf, len));
}

/* Trailer fields, before sink_end; dropped where the framing has none. */
static inline int
sink_trailers(struct sink *s, const struct hfield *f, size_t n)
{
	return (s->sk_ops->so_trailers(s, f, n));
}

/* The response is complete. */
static inline int
sink_end(struct sink *s)
{
	return (s->sk_ops->so_end(s));
}

/* Body bytes the sink takes before it is full (0: wait for on_drain). */
static inline size_t
sink_room(const struct sink *s)
{
	return (s->sk_ops->so_room(s));
}

/* The response cannot be completed: cut it (the HTTP/1 sink closes). */
static inline void
sink_abort(struct sink *s, const char *why)
{
	s->sk_ops->so_abort(s, why);
}

/* h1sink.c: the HTTP/1 wire form of a response head. */
enum h1_frame {
	H1_FRAME_NONE = 0, /* no body: HEAD's answer, 1xx, 204, 304, 101 */
	H1_FRAME_LENGTH, /* Content-Length: h_length */
	H1_FRAME_CHUNKED, /* Transfer-Encoding: chunked */
	H1_FRAME_EOF, /* the body ends when the connection closes */
};
#define H1_CONN_KEEP 0 /* no Connection field */
#define H1_CONN_CLOSE 1 /* Connection: close */
#define H1_CONN_KEEPALIVE 2 /* Connection: keep-alive (an HTTP/1.0 peer) */
#define H1_CONN_UPGRADE 3 /* Connection: Upgrade (101) */
void
h1_head_put(struct evbuffer *, const struct head *, enum h1_frame, int conn);
void h1_trailers_put(struct evbuffer *, const struct hfield *, size_t);
void h1_request_put(struct evbuffer *, const struct head *);
int h1_field_is_framing(const struct hfield *);
void hfield_set(struct hfield *, const char *name, const char *value);

/*
 * h1xport.c: the byte streams the HTTP/1 engine runs over.  A transport
 * owns its connection and two evbuffers; it calls its user back
 * (hx_cb_*) when input arrived, when output drained to hx_out_low, and at
 * the peer's end of stream or an error.
 */
struct h1x;
#define H1X_EV_EOF 1 /* the peer ended its stream */
#define H1X_EV_ERROR 2 /* the connection failed; why says how */
#define H1X_EV_TLS_FAILED 3 /* the TLS handshake failed; why: OpenSSL's */
struct h1x_ops {
	void (*xo_read)(struct h1x *, int on); /* reading on or off */
	int (*xo_hold)(struct h1x *); /* input full: stop reading (1) */
	void (*xo_unhold)(struct h1x *); /* read again if xo_hold stopped */
	void (*xo_flush)(struct h1x *); /* write what the output holds */
	int (*xo_shutdown)(struct h1x *); /* end our stream; -1: cannot */
	int (*xo_quiet)(struct h1x *); /* nothing more waits from the peer */
	void *(*xo_detach)(struct h1x *); /* free, keeping the connection */
	void (*xo_free)(struct h1x *); /* free with its connection */
	void (*xo_read_high)(struct h1x *, size_t); /* input kept at most */
	/* Output waiting ms unwritten is an error (H1X_EV_ERROR); 0: never. */
	void (*xo_write_timeout)(struct h1x *, uint64_t ms);
	/*
	 * Write what is queued now; the plain socket's descriptor when the
	 * output is then empty (for splice(2)), else -1.  NULL: never.
	 */
	int (*xo_fd)(struct h1x *);
	/*
	 * Write buf now as one TLS record when nothing is queued before it,
	 * draining what went; the rest is the caller's.  NULL: not TLS.
	 */
	void (*xo_write_now)(struct h1x *, struct evbuffer *);
};
/* The why of an H1X_EV_ERROR for the write timeout. */
#define H1X_WHY_WRITE_TIMEOUT "the peer read nothing within the write timeout"
struct h1x {
	const struct h1x_ops *hx_ops;
	struct evbuffer *hx_in;
	struct evbuffer *hx_out;
	size_t hx_out_low; /* hx_cb_write when the output is at most this */
	void (*hx_cb_read)(void *);
	void (*hx_cb_write)(void *);
	void (*hx_cb_event)(void *, int what, const char *why);
	void *hx_cb_arg;
};
struct h1x *h1x_stream_new(struct stream *, size_t in_high, size_t out_low);
struct h1x_mem; /* the peer's end of an in-memory transport */
struct h1x *h1x_mem_new(
    struct event_base *, size_t in_high, size_t out_low, struct h1x_mem **peer);
void h1x_mem_send(struct h1x_mem *, const void *, size_t);
void h1x_mem_send_eof(struct h1x_mem *);
size_t h1x_mem_recv(struct h1x_mem *, struct evbuffer *, size_t max);
void h1x_mem_autorecv(struct h1x_mem *, struct evbuffer *);
size_t h1x_mem_waiting(const struct h1x_mem *);
unsigned h1x_mem_reads(const struct h1x_mem *);
int h1x_mem_state(const struct h1x_mem *);
#define H1X_MEM_SHUT 0x01 /* our side shut its stream */
#define H1X_MEM_FREED 0x02 /* the transport was freed */
#define H1X_MEM_DETACHED 0x04 /* ... and its connection handed on */
#define H1X_MEM_READING 0x08 /* the transport reads */
void h1x_mem_free(struct h1x_mem *);

/*
 * h1s.c: the HTTP/1 server engine.  One per connection: the parse loop,
 * request bodies de-framed, one exchange at a time (pipelined requests
 * wait in the input, read-stop when it is full), keep-alive, the
 * whole-head deadline, the idle and linger timers, 100-continue, its own
 * refusals of bad heads, and the one close path.  Its owner gets hooks
 * and answers through h1s_sink.
 */
struct h1s;

/* A refusal the engine made itself, for the owner's log and counters. */
struct h1s_refusal {
	int hr_status;
	const char *hr_code;
	const char *hr_message;
	const struct head *hr_head; /* the request's, or NULL before one */
};

/* What the owner is told; arg is h1s_new's.  Every hook may close h. */
struct h1s_hooks {
	/* A request head: start its exchange and answer through the sink. */
	void (*on_head)(struct h1s *, void *arg, const struct head *,
	    const struct http1_msg *);
	/* Request body bytes wait: h1s_body_read takes them. */
	void (*on_body)(struct h1s *, void *arg);
	/* The sink has room again. */
	void (*on_drain)(struct h1s *, void *arg);
	/* The exchange ended without the owner's end (peer gone, timeout). */
	void (*on_error)(struct h1s *, void *arg, const char *why);
	/* The engine refused a request itself (bad head, 408): log, count. */
	void (*on_log)(struct h1s *, void *arg, const struct h1s_refusal *);
	/* The connection is closing: unlink it; do not free yet. */
	void (*on_close)(struct h1s *, void *arg, const char *reason);
	/* From the loop, after on_close: free what arg holds. */
	void (*on_free)(void *arg);
};

/* How an engine behaves; its owner's, outliving it. */
struct h1s_conf {
	const char *hc_name; /* for the debug log: "admin", "tunnel-server" */
	const struct http1_limits *hc_limits;
	uint64_t hc_head_ms; /* the whole head, from its first byte */
	uint64_t hc_idle_ms; /* waiting for the next request */
	uint64_t hc_body_ms; /* the whole request body; 0: no deadline */
	uint64_t hc_write_ms; /* output to drain after the end; 0: 30 s */
	uint64_t hc_linger_ms; /* input drained after our side shut */
	size_t hc_out_high; /* the sink is full at this much output */
	unsigned hc_max_requests; /* per connection; 0: no limit */
	int hc_flags;
#define H1S_C_EOF_ABORTS 0x01 /* the peer's end cuts an exchange short */
#define H1S_C_FIRST_DEADLINE 0x02 /* the first head's deadline from accept */
#define H1S_C_RELAY_CONTINUE 0x04 /* the owner passes Expect on: no 100 of ours */
};

enum h1s_state {
	H1S_S_IDLE = 0, /* waiting for a request's first byte */
	H1S_S_HEAD, /* reading a head, against its deadline */
	H1S_S_XCHG, /* an exchange: body in, response out */
	H1S_S_NEXT, /* answered; the next head once the output is low */
	H1S_S_CLOSING, /* answered; output drains, then our side shuts */
	H1S_S_LINGER, /* shut; the peer's input drained for a moment */
	H1S_S_DEAD, /* closed; freed from the loop */
};

struct h1s *h1s_new(struct event_base *, struct h1x *, const struct h1s_conf *,
    const struct h1s_hooks *, void *arg, uint64_t id, const char *peer);
struct sink *h1s_sink(struct h1s *);
const struct head *h1s_head(const struct h1s *);
ssize_t
h1s_body_read(struct h1s *, struct evbuffer *, size_t max, enum http1_err *);
uint64_t h1s_body_left(const struct h1s *);
void h1s_body_skip(struct h1s *, uint64_t);
int h1s_splice_fd(struct h1s *);
void h1s_body_sent(struct h1s *, uint64_t);
uint64_t h1s_started_us(const struct h1s *);
int h1s_body_done(const struct h1s *);
int h1s_keeps(const struct h1s *);
void h1s_no_keep(struct h1s *);
int h1s_drain(struct h1s *, const char *reason);
void h1s_close(struct h1s *, const char *reason);
void *h1s_release(struct h1s *);
void h1s_read_high(struct h1s *, size_t);
void h1s_write_timeout(struct h1s *, uint64_t ms);
void h1s_count_sent(struct h1s *);
uint64_t h1s_sent(const struct h1s *);
size_t h1s_queued(const struct h1s *);
enum h1s_state h1s_state(const struct h1s *);
const char *h1s_state_name(enum h1s_state);
char *h1s_print(const struct h1s *, char *, size_t);

/*
 * h2s.c: the HTTP/2 server engine.  One nghttp2 server session per
 * connection over the same transport as the HTTP/1 engine (struct h1x),
 * many streams at once; each stream's request head goes to the owner
 * (on_head), its body is pulled (h2s_stream_body_read, the window given
 * back as it is taken), and the owner answers through the stream's sink.
 * The engine bounds what a peer can make it hold or do (floods, rapid
 * reset, header lists, streams, timeouts) and refuses it itself.
 */
struct h2s; /* an HTTP/2 server session: one per connection */
struct h2s_stream; /* one request stream of it */

/* How a session behaves; its owner's, outliving it. */
struct h2s_conf {
	const char *hc_name; /* for debug logs */
	const struct http1_limits *hc_limits; /* max_head: header list cap */
	uint32_t hc_max_streams; /* SETTINGS_MAX_CONCURRENT_STREAMS; 0: 128 */
	uint32_t hc_stream_window; /* initial stream window; 0: 256 KiB */
	uint32_t hc_conn_window; /* connection receive window; 0: 1 MiB */
	uint64_t hc_max_streams_total; /* per connection, then GOAWAY; 0: 10000 */
	uint64_t hc_head_ms; /* preface+SETTINGS, each HEADERS..END_HEADERS */
	uint64_t hc_idle_ms; /* no stream open this long: GOAWAY, close */
	uint64_t hc_stream_idle_ms; /* a stream moving nothing: reset; 0: never */
	uint64_t hc_write_ms; /* output not drained this long: close; 0: never */
	size_t hc_out_high; /* a stream's sink is full here; 0: 256 KiB */
	size_t hc_conn_out_high; /* all streams' buffered output; 0: 4 MiB */
	int hc_flags;
#define H2S_C_CONNECT_PROTOCOL 0x01 /* SETTINGS_ENABLE_CONNECT_PROTOCOL=1 */
};

/* What the engine refused itself, for the owner's log and counters. */
struct h2s_refusal {
	int hr_status; /* the HTTP status answered, or 0: reset / GOAWAY */
	const char *hr_code; /* "h2_protocol_error", "h2_rapid_reset", ... */
	const char *hr_message; /* a sentence */
	const struct head *hr_head; /* the stream's request head, or NULL */
	uint32_t hr_stream; /* stream id, 0: the connection */
};

/* What the owner is told; arg is h2s_new's, sarg h2s_stream_set_arg's. */
struct h2s_hooks {
	/* A stream's request head is complete: start its exchange. */
	void (*on_head)(struct h2s *, void *arg, struct h2s_stream *,
	    const struct head *);
	/* Request body bytes (or its end) wait: h2s_stream_body_read. */
	void (*on_body)(struct h2s_stream *, void *sarg);
	/* The stream's sink has room again. */
	void (*on_drain)(struct h2s_stream *, void *sarg);
	/* The stream ended before the owner let go of it (reset, timeout,
	 * the connection gone): the stream is not used again. */
	void (*on_error)(struct h2s_stream *, void *sarg, const char *why);
	/* The engine refused something itself: log it, count it. */
	void (*on_log)(struct h2s *, void *arg, const struct h2s_refusal *);
	/* The connection is closing: unlink it; do not free yet (on_error
	 * ran for every stream the owner still had). */
	void (*on_close)(struct h2s *, void *arg, const char *reason);
	/* From the loop, after on_close: free what arg holds. */
	void (*on_free)(void *arg);
};

struct h2s *h2s_new(struct event_base *, struct h1x *, const struct h2s_conf *,
    const struct h2s_hooks *, void *arg, uint64_t id, const char *peer);
void h2s_close(struct h2s *, const char *reason);
void h2s_shutdown(struct h2s *);
void h2s_close_now(struct h2s *, const char *reason);
char *h2s_print(const struct h2s *, char *, size_t);
size_t h2s_nstreams(const struct h2s *);
void h2s_stream_set_arg(struct h2s_stream *, void *sarg);
struct sink *h2s_stream_sink(struct h2s_stream *);
struct h2s *h2s_stream_session(struct h2s_stream *);
uint32_t h2s_stream_id(const struct h2s_stream *);
ssize_t h2s_stream_body_read(struct h2s_stream *, struct evbuffer *, size_t);
int h2s_stream_body_done(const struct h2s_stream *);
uint64_t h2s_stream_started_us(const struct h2s_stream *);
void h2s_stream_idle(struct h2s_stream *, uint64_t ms);
void h2s_stream_release(struct h2s_stream *);

/* errpage.c */
int errpage_redirect(struct sink *, const char *request_id,
    const char *location, const char *set_cookie, int page, int keepalive);
int errpage_moved(struct sink *, const char *request_id, int status,
    const char *location, int keepalive);

/* A gateway error response, for errpage_send. */
struct errpage {
	const char *ep_request_id; /* sent as X-Request-Id, or NULL */
	int ep_status;
	const char *ep_code;
	const char *ep_message; /* the sentence */
	const char *ep_sandbox; /* shown on the HTML page, or NULL */
	int ep_port; /* shown on the HTML page; 0: none */
	int ep_flags;
#define ERRPAGE_F_HTML 0x01 /* an HTML page for a browser, not JSON */
#define ERRPAGE_F_HEAD 0x02 /* HEAD: no body, but its Content-Length */
#define ERRPAGE_F_KEEPALIVE 0x04 /* the connection stays open */
#define ERRPAGE_F_GRPC 0x08 /* a gRPC client's: trailers-only, grpc-status */
	const struct hfield *ep_fields; /* more fields (Allow...), or NULL */
	size_t ep_nfields;
};
int errpage_send(struct sink *, const struct errpage *);
int errpage_grpc(struct sink *, const char *request_id, int grpc_status,
    const char *code, const char *message);
int errpage_wants_html(const struct head *);

/* auth.c */
/* A request for a port, as auth_check sees it. */
struct auth_req {
	const struct head *aq_head; /* credentials, Origin, Sec-Fetch-* */
	const char *aq_target; /* the target the upstream would see */
	const char *aq_host; /* Host as the client sent it, or NULL */
	const char *aq_prefix; /* path form: "/{id}/{port}"; host form: NULL */
	uint64_t aq_now; /* Unix seconds */
	int aq_flags;
#define AUTH_F_TLS 0x1 /* the client connection is TLS */
#define AUTH_F_NAVIGATION 0x2 /* a browser navigation */
};

/*
 * What auth_check decided: forward (ar_err NULL, maybe with ar_target),
 * send the browser on to ar_location with ar_set_cookie, or a refusal
 * (ar_err, ar_message).
 */
struct auth_result {
	const struct gw_error *ar_err; /* NULL: allowed */
	char *ar_message; /* sentence for a refusal */
	char *ar_location; /* where the browser goes on to, or NULL */
	char *ar_set_cookie; /* Set-Cookie value for the redirect, or NULL */
	char *ar_target; /* target without access_token, or NULL: unchanged */
	int ar_flags;
#define AUTH_R_F_PAGE 0x1 /* go on by a page of ours, not a 303 */
};
extern const struct gw_error gw_err_unauthorized[]; /* 401 */
extern const struct gw_error gw_err_forbidden[]; /* 403 */
extern const struct gw_error gw_err_credentials_need_tls[]; /* 403 */
extern const struct gw_error gw_err_cross_origin_credential[]; /* 403 */
extern const struct gw_error gw_err_host_form_required[]; /* 403 */
int auth_check(const struct gw_config *, const struct gw_sandbox *, int port,
    const struct gw_port_rule *, const struct auth_req *, struct auth_result *);
void auth_result_free(struct auth_result *);
int auth_is_credential_header(const struct gw_config *, const struct hfield *);
char *
auth_strip_cookie(const struct gw_config *, const char *value, size_t len);

/* tokencmd.c */
int tokencmd_main(int argc, char **argv);
void tokencmd_usage(FILE *);

#endif
