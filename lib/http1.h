/*
 * Strict, incremental HTTP/1.1 message parser (RFC 9112) over evbuffers.
 *
 * The parser reads a message head (request line or status line plus header
 * fields) from an evbuffer, validates it byte by byte, and decides how the
 * body is framed.  Bodies are not parsed here except for the chunked
 * transfer coding, which has its own incremental decoder.
 */
#ifndef AK_HTTP1_H
#define AK_HTTP1_H

#include <stddef.h>
#include <stdint.h>

#include "head.h"

struct evbuffer;

/* Why a message was refused; each maps to one status, code and sentence. */
enum http1_err {
	HTTP1_E_NONE = 0,
	HTTP1_E_HEAD_TOO_LARGE, /* 431: head over max_head */
	HTTP1_E_LINE_TOO_LONG, /* 431: request/status line too long */
	HTTP1_E_TOO_MANY_HEADERS, /* 431: more than max_headers fields */
	HTTP1_E_BAD_REQUEST_LINE, /* 400: malformed request line */
	HTTP1_E_BAD_STATUS_LINE, /* 502: malformed status line */
	HTTP1_E_BAD_VERSION, /* 505: not HTTP/1.0 or HTTP/1.1 */
	HTTP1_E_BAD_HEADER_NAME, /* 400: empty name or non-token byte */
	HTTP1_E_SPACE_BEFORE_COLON, /* 400: whitespace before ':' */
	HTTP1_E_OBS_FOLD, /* 400: line folding */
	HTTP1_E_BAD_HEADER_VALUE, /* 400: NUL, CTL or other bad byte */
	HTTP1_E_BARE_CR, /* 400: CR not followed by LF */
	HTTP1_E_BARE_LF, /* 400: LF not preceded by CR */
	HTTP1_E_BAD_CONTENT_LENGTH, /* 400: not 1*DIGIT or too large */
	HTTP1_E_DUP_CONTENT_LENGTH, /* 400: more than one Content-Length */
	HTTP1_E_CL_AND_TE, /* 400: Content-Length with T-E */
	HTTP1_E_BAD_TRANSFER_ENCODING, /* 400: chunked not last, or twice */
	HTTP1_E_UNSUPPORTED_TE, /* 501: a coding other than chunked */
	HTTP1_E_MISSING_HOST, /* 400: HTTP/1.1 request without Host */
	HTTP1_E_DUP_HOST, /* 400: more than one Host */
	HTTP1_E_BAD_CHUNK_SIZE, /* 400: chunk size not strict hex */
	HTTP1_E_CHUNK_TOO_LARGE, /* 400: chunk size over the limit */
	HTTP1_E_BAD_CHUNK, /* 400: missing CRLF after chunk data */
	HTTP1_E_BAD_TRAILER, /* 400: malformed trailer section */
	HTTP1_E__COUNT
};

/* How the body of a message is delimited. */
enum http1_body {
	HTTP1_BODY_NONE = 0, /* no body */
	HTTP1_BODY_LENGTH, /* m_content_length bytes */
	HTTP1_BODY_CHUNKED, /* chunked transfer coding */
	HTTP1_BODY_EOF, /* response read until the peer closes */
};

/* Limits applied while parsing a head. */
struct http1_limits {
	size_t max_head; /* whole head, start line + fields + CRLFs */
	size_t max_line; /* start line alone */
	size_t max_headers; /* number of header fields */
};

/*
 * A parsed message head.  Zero it (or call http1_msg_reset) before parsing
 * a new message; http1_msg_reset frees what a previous parse allocated.
 */
struct http1_msg {
	size_t m_scan; /* bytes already searched */
	size_t m_line; /* start line end, if seen */
	char *m_buf; /* owned copy of the head */
	size_t m_head_len; /* head bytes drained */

	const char *m_method; /* request only */
	size_t m_method_len;
	const char *m_target; /* request only */
	size_t m_target_len;
	int m_status; /* response only */
	const char *m_reason; /* response only, may be "" */
	int m_minor; /* HTTP/1.m_minor */

	struct hfield *m_headers; /* point into m_buf */
	size_t m_nheaders;

	enum http1_body m_body;
	uint64_t m_content_length;
	int m_flags;
#define HTTP1_F_CONN_CLOSE 0x01 /* Connection: close */
#define HTTP1_F_CONN_KEEPALIVE 0x02 /* Connection: keep-alive */
#define HTTP1_F_CONN_UPGRADE 0x04 /* Connection lists upgrade */
#define HTTP1_F_UPGRADE 0x08 /* an Upgrade field is present */
#define HTTP1_F_EXPECT_CONTINUE 0x10 /* Expect: 100-continue */
#define HTTP1_F_HEAD_REQUEST 0x20 /* response to HEAD: no body */
#define HTTP1_F_TE_OTHER 0x40 /* response T-E has a coding we keep */
};

/*
 * Parse a request head from the front of in.  Returns 1 when a complete
 * head was parsed and drained from in, 0 when more bytes are needed (in is
 * untouched), -1 on a malformed or oversize head with *err set.
 */
int http1_parse_request(struct evbuffer *in, const struct http1_limits *,
    struct http1_msg *, enum http1_err *err);

/*
 * Parse a response head, as http1_parse_request.  head_request is non-zero
 * when the request was HEAD, so the response has no body.  Interim 1xx
 * responses are returned like any other; the caller loops.
 */
int http1_parse_response(struct evbuffer *in, const struct http1_limits *,
    int head_request, struct http1_msg *, enum http1_err *err);

/*
 * The protocol-neutral view of a parsed message, pointing into m (which
 * must outlive it): what the core reads.  h_authority is Host.
 */
void http1_msg_head(const struct http1_msg *, struct head *);

/* Free what a parse allocated and zero the message for reuse. */
void http1_msg_reset(struct http1_msg *);

/* First header field named name (case-insensitive), or NULL. */
const struct hfield *http1_msg_find(const struct http1_msg *, const char *name);

/*
 * Does the comma-separated list value contain token (case-insensitive,
 * OWS around elements ignored)?
 */
int http1_list_has(const char *value, size_t len, const char *token);

/* Status, machine-readable code and sentence for an error. */
int http1_err_status(enum http1_err);
const char *http1_err_code(enum http1_err);
const char *http1_err_message(enum http1_err);

/*
 * The registered reason phrase of a status code (RFC 9110 section 15 and
 * the IANA registry), or "" for a code without one: a status line may end
 * after the code's space.
 */
const char *http1_reason(int status);

/*
 * Trailer fields a chunked decoder keeps for its caller, who owns this
 * and points ck_keep at it.  While the section arrives, tr_buf collects
 * the field lines allowed as trailers; once the decoder returned 1,
 * tr_fields (tr_nfields of them) point into it, names and values
 * NUL-terminated.  http1_trailers_reset frees both and zeroes it.
 */
struct http1_trailers {
	char *tr_buf;
	size_t tr_len; /* bytes of tr_buf used */
	size_t tr_size; /* bytes of tr_buf allocated */
	struct hfield *tr_fields;
	size_t tr_nfields; /* fields kept so far */
};

/* Incremental decoder for the chunked transfer coding. */
struct http1_chunked {
	int ck_state;
	uint64_t ck_left; /* data bytes left in this chunk */
	size_t ck_len; /* bytes of the current line */
	size_t ck_trailer; /* trailer section bytes */
	struct http1_trailers *ck_keep; /* NULL: trailers are discarded */
};

/* Largest chunk size accepted (bytes). */
#define HTTP1_MAX_CHUNK ((uint64_t)1 << 40)
/* Longest chunk-size line, extensions included. */
#define HTTP1_MAX_CHUNK_LINE 4096
/* Largest trailer section. */
#define HTTP1_MAX_TRAILER 16384
/* Most trailer fields kept (ck_keep): more is HTTP1_E_BAD_TRAILER. */
#define HTTP1_MAX_TRAILER_FIELDS 64

/*
 * Decode chunked data from in, appending at most max data bytes to out
 * (moved without copying where possible) and draining the framing.
 * Trailer fields are validated as head fields are, then discarded, or
 * with ck_keep kept there (but those http1_trailer_forbidden names).
 * Returns 1 once the last chunk and trailer section are consumed (bytes
 * after it stay in in), 0 when more input or more room is needed, -1 on
 * error with *err set.  *moved gets the number of data bytes appended.
 */
int http1_chunked_decode(struct http1_chunked *, struct evbuffer *in,
    struct evbuffer *out, size_t max, size_t *moved, enum http1_err *err);

/*
 * Is a field of this name never passed on as a trailer?  Framing,
 * routing, connection, authentication, cookies, request controls and
 * response controls a recipient may only take from a head (RFC 9110
 * section 6.5.1): a trailer must not change how a message was framed,
 * routed or authorised.
 */
int http1_trailer_forbidden(const char *name, size_t len);

/* Free what a decoder kept in t and zero it for reuse. */
void http1_trailers_reset(struct http1_trailers *t);

/* Append a chunk-size line for n data bytes (n > 0). */
void http1_chunk_header(struct evbuffer *out, size_t n);
/* Append the CRLF that ends a chunk's data. */
void http1_chunk_trailer(struct evbuffer *out);
/* Append the last chunk and an empty trailer section. */
void http1_chunk_last(struct evbuffer *out);

#endif
