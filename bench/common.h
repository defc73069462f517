/*
 * Helpers shared by the benchmark tools in bench/ (akbench-backend,
 * akbench-ws, akbench-idle): byte buffers, strict HTTP/1.1 head and chunked
 * parsing over plain memory, loopback URLs, WebSocket frames, latency
 * histograms and option parsing.
 *
 * The tools are plain epoll programs, not libevent ones, so that they never
 * become the bottleneck of what they measure; the WebSocket handshake
 * helpers, addresses, UUIDs, the clock and allocation come from lib/.
 */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <sys/types.h>
#include <sys/socket.h>

#include <stddef.h>
#include <stdint.h>

#ifndef AK_VERSION
#define AK_VERSION "unknown"
#endif

/* Largest request or response head, start line and CRLFs included. */
#define BENCH_HEAD_MAX (16 * 1024)
/* Most header fields in one head. */
#define BENCH_FIELDS_MAX 100

/* A growable byte buffer: data lives in b_data[b_off .. b_len). */
struct buf {
	uint8_t *b_data;
	size_t b_off; /* first byte not consumed yet */
	size_t b_len; /* end of the data */
	size_t b_cap;
};

/* Bytes held in a buffer. */
#define BUF_LEN(b) ((b)->b_len - (b)->b_off)
/* First byte held in a buffer. */
#define BUF_PTR(b) ((b)->b_data + (b)->b_off)

/* common.c: buffers */
void buf_reserve(struct buf *, size_t);
void buf_append(struct buf *, const void *, size_t);
void buf_append_str(struct buf *, const char *);
void buf_append_u64(struct buf *, uint64_t);
void buf_consume(struct buf *, size_t);
void buf_free(struct buf *);
int buf_write(struct buf *, int fd);

/* One header field; name and value point into the parsed head. */
struct http_field {
	const char *f_name;
	size_t f_namelen;
	const char *f_value; /* without leading and trailing whitespace */
	size_t f_valuelen;
};

/* common.c: HTTP/1.1 heads */
int http_head_end(const char *, size_t, size_t *);
int http_parse_fields(
    const char *, size_t, struct http_field *, size_t, size_t *, const char **);
int http_is_token(const char *, size_t);
int http_field_is(const struct http_field *, const char *);
int http_list_has(const char *, size_t, const char *);
int http_parse_length(const char *, size_t, uint64_t *);

/* A parsed response head (clients). */
struct http_resp {
	int r_status;
	int r_minor; /* HTTP/1.r_minor */
	struct http_field r_fields[BENCH_FIELDS_MAX];
	size_t r_nfields;
	int r_flags;
#define HTTP_RESP_F_LENGTH 0x01 /* Content-Length was given */
#define HTTP_RESP_F_CHUNKED 0x02 /* Transfer-Encoding: chunked */
#define HTTP_RESP_F_CLOSE 0x04 /* Connection: close, or HTTP/1.0 */
	uint64_t r_length;
};

int
http_parse_response(const char *, size_t, struct http_resp *, const char **);
const struct http_field *http_resp_find(const struct http_resp *, const char *);

/* Incremental decoder for the chunked transfer coding (RFC 9112 7.1). */
struct chunked {
	int ch_state;
	int ch_digits; /* hex digits of the current chunk size */
	uint64_t ch_left; /* data bytes left in the current chunk */
	size_t ch_line; /* bytes of the current extension or trailer line */
	size_t ch_trailer; /* bytes of the trailer section */
};

/* Largest chunk size accepted: 15 hex digits. */
#define CHUNKED_MAX_DIGITS 15
/* Longest chunk-size line extension. */
#define CHUNKED_MAX_EXT 4096
/* Largest trailer section. */
#define CHUNKED_MAX_TRAILER 16384

void chunked_init(struct chunked *);
ssize_t chunked_feed(struct chunked *, const uint8_t *, size_t, uint64_t *,
    int *, const char **);

/* A ws:// or http:// URL on a loopback address. */
struct url {
	char *u_authority; /* host[:port] as written: the Host header */
	char *u_path; /* origin form, path and query; may hold %d */
	struct sockaddr_storage u_addr;
	socklen_t u_addrlen;
};

#define URL_HTTP 0x01 /* http:// is accepted */
#define URL_WS 0x02 /* ws:// is accepted */

int url_parse(const char *, int, struct url *, char **);
char *url_path_expand(const char *, unsigned int);
void url_free(struct url *);
int addr_is_loopback(const struct sockaddr *);

/* Extra request header lines from --header, validated. */
struct headers {
	char **h_list; /* "Name: value", NULL-terminated; NULL if none */
	size_t h_count;
	char *h_host; /* a Host given with --header, or NULL */
};

int headers_add(struct headers *, const char *, char **);
void headers_free(struct headers *);

/* WebSocket opcodes (RFC 6455 5.2). */
#define WS_OP_CONT 0x0
#define WS_OP_TEXT 0x1
#define WS_OP_BINARY 0x2
#define WS_OP_CLOSE 0x8
#define WS_OP_PING 0x9
#define WS_OP_PONG 0xa
/* Longest frame header: 2 bytes, 8 of length, 4 of mask. */
#define WS_HEADER_MAX 14
/* Longest control frame payload. */
#define WS_CONTROL_MAX 125

/*
 * Incremental WebSocket frame parser for either side.  wslay is not used
 * in the benchmark tools: it masks and unmasks a byte at a time, checks
 * UTF-8 a byte at a time and copies messages in 4 KiB chunks, which made
 * it the bottleneck of a 64 KiB echo (see TOOLS.md).
 *
 * ws_parse reports, for each frame: WS_EV_HEADER (wp_op, wp_fin, wp_len
 * are set), WS_EV_DATA for each piece of a data frame's payload (still
 * masked if wp_masked; it starts at payload offset wp_chunk_off), then
 * WS_EV_END (a control frame's payload is unmasked in wp_ctl).  Frames
 * are checked strictly: reserved bits, opcodes, masking by direction,
 * control frame rules, fragmentation order and the message size limit.
 */
struct wsparse {
	int wp_state;
	int wp_server; /* we are the server: frames must be masked */
	uint64_t wp_max; /* largest data message */
	uint8_t wp_hdr[WS_HEADER_MAX];
	size_t wp_hlen; /* header bytes collected */
	uint8_t wp_op; /* opcode of the current frame */
	int wp_fin;
	int wp_masked;
	uint8_t wp_mask[4];
	uint64_t wp_len; /* payload length of the current frame */
	uint64_t wp_off; /* payload bytes seen */
	uint64_t wp_chunk_off; /* WS_EV_DATA: payload offset of the piece */
	int wp_frag; /* a fragmented data message is open */
	uint8_t wp_msg_op; /* WS_OP_TEXT or WS_OP_BINARY: current message */
	uint64_t wp_msglen; /* bytes of the current data message so far */
	uint8_t wp_ctl[WS_CONTROL_MAX]; /* a control frame's payload */
	uint16_t wp_code; /* WS_EV_ERROR: the close code to send */
	const char *wp_why; /* WS_EV_ERROR: what was wrong */
};

enum ws_event {
	WS_EV_NEED, /* all input used: read more */
	WS_EV_HEADER,
	WS_EV_DATA,
	WS_EV_END,
	WS_EV_ERROR, /* wp_code and wp_why say why; sticky */
};

/* common.c: WebSocket frames and client handshakes */
void ws_parse_init(struct wsparse *, int, uint64_t);
enum ws_event ws_parse(
    struct wsparse *, const uint8_t **, size_t *, const uint8_t **, size_t *);
size_t ws_frame_header(uint8_t *, int, uint8_t, uint64_t, const uint8_t *);
void ws_unmask(uint8_t *, const uint8_t *, size_t, const uint8_t *, uint64_t);
void ws_frame_append(
    struct buf *, int, uint8_t, const uint8_t *, size_t, uint64_t *);
int
ws_client_response(const uint8_t *, size_t, const char *, size_t *, char **);
uint64_t rng_next(uint64_t *);

/*
 * Round-trip times in microseconds: exact below 512, then 256 buckets per
 * power of two (under 0.4% error) up to 2^47 us.
 */
#define HIST_EXACT 512
#define HIST_SUB 256
#define HIST_OCTAVES 39
#define HIST_BUCKETS (HIST_EXACT + HIST_OCTAVES * HIST_SUB)

struct hist {
	uint64_t h_count[HIST_BUCKETS];
	uint64_t h_total;
};

void hist_add(struct hist *, uint64_t);
void hist_merge(struct hist *, const struct hist *);
uint64_t hist_quantile(const struct hist *, double);

/* Command line helpers: each returns -1 with *cause set on a bad value. */
int
opt_u64(const char *, const char *, uint64_t, uint64_t, uint64_t *, char **);
int opt_seconds(const char *, const char *, double *, char **);
int nofile_raise(uint64_t, char **);
int sock_connect(const struct sockaddr *, socklen_t, char **);
void sock_nodelay(int);

#endif
