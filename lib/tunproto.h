/*
 * Reverse-tunnel protocol v2 codec shared by both roles (the gateway as
 * the sandbox, aktunnel as the client): UUIDs, the binary data envelope,
 * the JSON control messages, hello negotiation and the YR_TUNNEL_* limits.
 * Nothing here touches a socket, an event loop or WebSocket framing.
 * Section numbers refer to tunnel-protocol.md.
 */
#ifndef AK_TUNPROTO_H
#define AK_TUNPROTO_H

#include <stddef.h>
#include <stdint.h>

/* Roles, for negotiation (§1). */
#define TUNPROTO_ROLE_CLIENT 1
#define TUNPROTO_ROLE_SANDBOX 2

/* Protocol versions (§4.2, §12). */
#define TUNPROTO_VERSION 2
#define TUNPROTO_VERSION_V1 1

/* Binary envelope (§3.2). */
#define TUNPROTO_ENV_MAGIC0 0x59 /* 'Y' */
#define TUNPROTO_ENV_MAGIC1 0x44 /* 'D' */
#define TUNPROTO_ENV_VERSION 0x01
#define TUNPROTO_ENV_HTTP_REQUEST_DATA 0x01 /* sandbox -> client */
#define TUNPROTO_ENV_HTTP_RESPONSE_DATA 0x02 /* client -> sandbox */
#define TUNPROTO_ENV_WS_BINARY_DATA 0x03 /* both directions */
#define TUNPROTO_ENV_F_END 0x01 /* END_OF_BODY */
#define TUNPROTO_ENV_F_OFFSET 0x02 /* HAS_OFFSET: e_offset is valid */
#define TUNPROTO_ENV_ID_LEN 16
#define TUNPROTO_ENV_HEADER_SIZE 26
#define TUNPROTO_ENV_OFFSET_SIZE 8
/* Header plus offset: the most tunproto_env_encode_header writes. */
#define TUNPROTO_ENV_PREFIX_MAX \
	(TUNPROTO_ENV_HEADER_SIZE + TUNPROTO_ENV_OFFSET_SIZE)

/* Default limits and their bounds (§4.2, §6.5, §11). */
#define TUNPROTO_CHUNK_DEFAULT 65536
#define TUNPROTO_CHUNK_MIN 1024
#define TUNPROTO_CHUNK_CAP 65536
/*
 * The largest chunk whose whole frame (envelope with offset, WebSocket
 * header with mask) fits 64 KiB: over TLS such a frame is four full
 * records, where a 64 KiB chunk took a fifth record and write(2) for its
 * 44 bytes of headers.
 */
#define TUNPROTO_CHUNK_TLS (65536 - TUNPROTO_ENV_PREFIX_MAX - 14)
#define TUNPROTO_INFLIGHT_DEFAULT 16
#define TUNPROTO_INFLIGHT_CAP 1024
#define TUNPROTO_WINDOW_DEFAULT 16
#define TUNPROTO_WINDOW_CAP 1024
#define TUNPROTO_MAX_BODY_DEFAULT (512ULL * 1024 * 1024)
#define TUNPROTO_MAX_BODY_CAP (1024ULL * 1024 * 1024)
#define TUNPROTO_MAX_WS_DEFAULT (8ULL * 1024 * 1024)
#define TUNPROTO_MAX_WS_CAP (8ULL * 1024 * 1024)
#define TUNPROTO_FAST_PATH_DEFAULT 65536
#define TUNPROTO_V1_BODY_MAX (5ULL * 1024 * 1024) /* also fast-path cap */
#define TUNPROTO_CONTROL_MAX (8 * 1024 * 1024) /* one JSON text frame */
#define TUNPROTO_HTTP_TIMEOUT_DEFAULT 600.0 /* seconds */

/* Outbound queue budget that bounds the credit window (§6.3). */
#define TUNPROTO_OUTBOUND_QUEUE 512
#define TUNPROTO_CONTROL_RESERVE 32
#define TUNPROTO_DATA_BUDGET \
	(TUNPROTO_OUTBOUND_QUEUE - TUNPROTO_CONTROL_RESERVE)

/*
 * WebSocket close codes on the tunnel link.  1012 "replaced" closes the
 * link a newer client took over (§8.2, Python V2 sandbox).  4409 (private
 * use, RFC 6455 §7.4.2) refuses a client whose session a newer client
 * replaced while it was away: it may not take the tunnel back.  Its reason
 * starts with the machine-readable code, then a colon and a sentence.
 */
#define TUNPROTO_CLOSE_REPLACED 1012
/*
 * The same code, 1012 "service restart", with this reason: the gateway
 * is going away (it drains before a restart or an upgrade); reconnect.
 */
#define TUNPROTO_RESTART_REASON "service restart"
#define TUNPROTO_CLOSE_SESSION_REPLACED 4409
#define TUNPROTO_SESSION_REPLACED "tunnel_session_replaced"

/*
 * An akgateway extension: the client names its session in the upgrade
 * request, and the sandbox's hello (sent before the client's) answers
 * with "session_resumed": true when it holds that session and will resume
 * it, false when it does not.  Peers that know neither ignore both.
 */
#define TUNPROTO_SESSION_HEADER "X-AK-Tunnel-Session"

/* Heartbeat (§7), milliseconds. */
#define TUNPROTO_PING_INTERVAL_MS 20000
#define TUNPROTO_PING_TIMEOUT_MS 10000

/* Response header limits applied by the sandbox (§6.5). */
#define TUNPROTO_RESP_HEADERS_MAX 200
#define TUNPROTO_RESP_HEADER_BYTES_MAX (64 * 1024)

/* Canonical UUID text: 8-4-4-4-12 lowercase hex digits. */
#define TUNPROTO_UUID_LEN 36

/* Result of tunproto_msg_decode. */
enum tunproto_dec {
	TUNPROTO_DEC_OK = 0,
	TUNPROTO_DEC_MALFORMED = -1, /* not JSON, bad shape or field: drop */
	TUNPROTO_DEC_UNKNOWN = -2, /* well-formed, unknown "type": drop */
	TUNPROTO_DEC_BAD_BASE64 = -3, /* all fields fine except base64 body */
};

/* Control message types (§4.1). */
enum tunproto_type {
	TUNPROTO_T_NONE = 0,
	TUNPROTO_T_HELLO,
	TUNPROTO_T_HTTP_REQ,
	TUNPROTO_T_HTTP_RESP,
	TUNPROTO_T_HTTP_REQ_BEGIN,
	TUNPROTO_T_HTTP_REQ_END,
	TUNPROTO_T_HTTP_RESP_BEGIN,
	TUNPROTO_T_HTTP_RESP_END,
	TUNPROTO_T_WINDOW,
	TUNPROTO_T_ERROR,
	TUNPROTO_T_WS_CONNECT,
	TUNPROTO_T_WS_CONNECTED,
	TUNPROTO_T_WS_MESSAGE,
	TUNPROTO_T_WS_CLOSE,
	TUNPROTO_T_PING,
	TUNPROTO_T_PONG,
	TUNPROTO_T__COUNT
};

/* The limits one side configures, advertises or negotiated (§4.2, §11). */
struct tunproto_limits {
	int l_protocol_version;
	uint64_t l_max_stream_chunk;
	uint64_t l_max_inflight;
	uint64_t l_stream_window_frames;
	uint64_t l_max_body_size;
	uint64_t l_max_ws_message_size;
	uint64_t l_fast_path_body; /* local only, never advertised */
	double l_http_timeout; /* local only, seconds */
};

/* One decoded binary envelope; e_payload points into the decoded buffer. */
struct tunproto_env {
	uint8_t e_kind; /* TUNPROTO_ENV_HTTP_REQUEST_DATA ... */
	uint8_t e_flags; /* TUNPROTO_ENV_F_END | TUNPROTO_ENV_F_OFFSET */
	char e_id[TUNPROTO_UUID_LEN + 1];
	uint64_t e_offset; /* valid with TUNPROTO_ENV_F_OFFSET */
	const uint8_t *e_payload;
	size_t e_len;
};

/*
 * One HTTP header. Values travel as Latin-1 text (§3.4): here they are the
 * raw octets, mapped byte for byte to and from U+0000..U+00FF on the wire.
 */
struct tunproto_header {
	char *h_name;
	char *h_value;
};

/*
 * One control message. Every pointer member is owned (free with
 * tunproto_msg_free); which members a type uses follows §4.
 */
struct tunproto_msg {
	enum tunproto_type m_type;
	int m_flags;
#define TUNPROTO_MSG_F_CONTENT_LENGTH 0x001 /* m_content_length is known */
#define TUNPROTO_MSG_F_ACK_OFFSET 0x002 /* window: m_ack_offset present */
#define TUNPROTO_MSG_F_COMPLETE 0x004 /* window: complete:true */
#define TUNPROTO_MSG_F_RESUME 0x008 /* hello: resume:true */
#define TUNPROTO_MSG_F_MAX_BODY 0x010 /* hello: max_body_size present */
#define TUNPROTO_MSG_F_MAX_WS 0x020 /* hello: max_ws_message_size present */
#define TUNPROTO_MSG_F_BINARY 0x040 /* ws_message: binary:true (base64) */
#define TUNPROTO_MSG_F_TS_INT 0x080 /* ping/pong: integer timestamp */
#define TUNPROTO_MSG_F_SESSION_TOLD 0x100 /* hello: session_resumed present */
#define TUNPROTO_MSG_F_SESSION_RESUMED 0x200 /* ... and true */
	char *m_id; /* every type but hello */
	char *m_method; /* http_req, http_req_begin */
	char *m_path; /* http_req, http_req_begin, ws_connect */
	struct tunproto_header *m_headers; /* HTTP types and ws_connect */
	size_t m_nheaders;
	/*
	 * http_req/http_resp body or ws_message data, base64-decoded where the
	 * wire has base64; NULL or NUL-terminated (the NUL not counted).
	 */
	uint8_t *m_body;
	size_t m_body_len;
	int m_status; /* http_resp, http_resp_begin: 0..65535 */
	uint64_t m_content_length; /* *_begin, with F_CONTENT_LENGTH */
	struct tunproto_limits m_limits; /* hello (the first six fields) */
	char *m_session_id; /* hello, or NULL */
	uint64_t m_credits; /* window */
	uint64_t m_ack_offset; /* window, with F_ACK_OFFSET */
	char *m_message; /* error */
	int m_code; /* ws_close: 0..65535, default 1000 */
	char *m_reason; /* ws_close, or NULL for "" */
	double m_timestamp; /* ping, pong */
	int64_t m_timestamp_int; /* ping, pong, with F_TS_INT */
};

/* tunproto.c: identifiers */
int tunproto_uuid_parse(const char *, uint8_t *);
int tunproto_uuid_valid(const char *);
void tunproto_uuid_format(const uint8_t *, char *);
int tunproto_uuid_random(char *);

/* tunproto.c: binary envelope */
size_t tunproto_env_size(const struct tunproto_env *);
int tunproto_env_encode_header(
    const struct tunproto_env *, size_t, uint8_t *, size_t *, char **);
int tunproto_env_encode(
    const struct tunproto_env *, size_t, uint8_t *, size_t, size_t *, char **);
uint8_t *tunproto_env_encode_alloc(
    const struct tunproto_env *, size_t, size_t *, char **);
int tunproto_env_decode(
    const uint8_t *, size_t, size_t, struct tunproto_env *, char **);
int tunproto_env_decode_prefix(const uint8_t *, size_t, size_t,
    struct tunproto_env *, size_t *, char **);

/* tunproto.c: control messages */
const char *tunproto_type_name(enum tunproto_type);
enum tunproto_type tunproto_type_lookup(const char *, size_t);
int tunproto_msg_decode(const char *, size_t, struct tunproto_msg *, char **);
extern size_t tunproto_lift_min; /* tests: shortest body lifted */
char *tunproto_msg_encode(const struct tunproto_msg *, size_t *);
void tunproto_msg_add_header(struct tunproto_msg *, const char *, const char *);
void tunproto_msg_set_body(struct tunproto_msg *, const void *, size_t);
int tunproto_window_check(const struct tunproto_msg *, char **);
void tunproto_msg_free(struct tunproto_msg *);

/* tunproto.c and tunlimits.c: *err (if err is not NULL) set, -1 returned */
int
tunproto_fail(char **, const char *, ...) __attribute__((format(printf, 2, 3)));

/* tunlimits.c: limits and negotiation */
void tunproto_limits_default(struct tunproto_limits *);
int tunproto_hello(const struct tunproto_limits *, const char *,
    struct tunproto_msg *, char **);
int tunproto_negotiate(const struct tunproto_limits *,
    const struct tunproto_msg *, int, struct tunproto_limits *, int *, char **);
int tunproto_limits_from_env(struct tunproto_limits *,
    const char *(*)(const char *, void *), void *, char **);

#endif
