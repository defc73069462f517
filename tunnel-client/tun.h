/* aktunnel: the developer's end of a reverse tunnel. */
#ifndef AK_TUN_H
#define AK_TUN_H

#include <stdint.h>
#include <stdio.h>

#include "log.h"

/* Defaults and bounds (tunnel-protocol.md §2.1, §11). */
#define TUN_LISTEN_PORT_DEFAULT 8766
#define TUN_PROTOCOL_VERSION 2
#define TUN_MAX_BODY_DEFAULT (512ULL * 1024 * 1024)
#define TUN_MAX_BODY_CAP (1024ULL * 1024 * 1024)
#define TUN_MAX_WS_MESSAGE_DEFAULT (8ULL * 1024 * 1024)
#define TUN_MAX_WS_MESSAGE_CAP (8ULL * 1024 * 1024)
#define TUN_STREAM_CHUNK_DEFAULT 65536
#define TUN_STREAM_CHUNK_CAP 65536
#define TUN_STREAM_CHUNK_MIN 1024
#define TUN_MAX_INFLIGHT_DEFAULT 16
#define TUN_MAX_INFLIGHT_CAP 1024
#define TUN_WINDOW_FRAMES_DEFAULT 16
#define TUN_WINDOW_FRAMES_CAP 1024
#define TUN_FAST_PATH_DEFAULT 65536
#define TUN_FAST_PATH_CAP (5ULL * 1024 * 1024)
#define TUN_HTTP_TIMEOUT_DEFAULT 600.0

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

/* main.c */
void main_usage(FILE *);

#endif
