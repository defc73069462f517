/*
 * Strict, incremental HTTP/1.1 parser (RFC 9112): message heads and the
 * chunked transfer coding.  We sit in front of other servers, so any byte
 * two implementations could read differently is refused, never repaired.
 */
#include <sys/types.h>

#include <event2/buffer.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "evb.h"
#include "http1.h"
#include "strbuf.h"

/* Largest Content-Length accepted. */
#define HTTP1_MAX_LENGTH ((uint64_t)1 << 62)
/* Most hex digits in a chunk size. */
#define HTTP1_MAX_HEXDIG 16
/* Most bytes moved by one evbuffer_remove_buffer call (it returns int). */
#define HTTP1_MAX_MOVE ((size_t)1 << 30)

/* Chunked decoder states, kept in ck_state. */
enum http1_ck_state {
	HTTP1_CK_SIZE = 0, /* reading a chunk-size line */
	HTTP1_CK_DATA, /* moving chunk data */
	HTTP1_CK_DATA_CRLF, /* expecting the CRLF after chunk data */
	HTTP1_CK_TRAILER, /* reading trailer fields */
	HTTP1_CK_DONE, /* last chunk and trailer section consumed */
};

/* What the header fields of one head say about framing. */
struct http1_fields {
	int f_ncl; /* Content-Length fields seen */
	uint64_t f_cl; /* its value */
	int f_nhost; /* Host fields seen */
	int f_te; /* Transfer-Encoding present */
	int f_chunked; /* times chunked was listed */
	int f_last_chunked; /* the last coding is chunked */
	int f_other; /* a coding other than chunked */
};

/* Status, code and sentence for each error, indexed by enum http1_err. */
static const struct {
	int status;
	const char *code;
	const char *message;
} http1_errors[] = {
	[HTTP1_E_NONE] = { 200, "none",
	    "The message was parsed without error." },
	[HTTP1_E_HEAD_TOO_LARGE] = { 431, "header_too_large",
	    "The header section is larger than the configured limit." },
	[HTTP1_E_LINE_TOO_LONG] = { 431, "line_too_long",
	    "The request line or status line is longer than the configured "
	    "limit." },
	[HTTP1_E_TOO_MANY_HEADERS] = { 431, "too_many_headers",
	    "The message has more header fields than the configured limit." },
	[HTTP1_E_BAD_REQUEST_LINE] = { 400, "bad_request_line",
	    "The request line is not 'method SP target SP HTTP-version' with "
	    "single spaces and valid characters." },
	[HTTP1_E_BAD_STATUS_LINE] = { 502, "bad_status_line",
	    "The upstream server sent a malformed status line." },
	[HTTP1_E_BAD_VERSION] = { 505, "http_version_not_supported",
	    "Only HTTP/1.0 and HTTP/1.1 are supported on this connection." },
	[HTTP1_E_BAD_HEADER_NAME] = { 400, "bad_header_name",
	    "A header field name is empty, lacks a colon or contains a "
	    "character that is not allowed in a token." },
	[HTTP1_E_SPACE_BEFORE_COLON] = { 400, "space_before_colon",
	    "A header field has whitespace between its name and the colon, "
	    "which is refused to prevent request smuggling." },
	[HTTP1_E_OBS_FOLD] = { 400, "obsolete_line_folding",
	    "A header field line starts with whitespace (obsolete line "
	    "folding), which is not accepted." },
	[HTTP1_E_BAD_HEADER_VALUE] = { 400, "bad_header_value",
	    "A header field value contains NUL or another control "
	    "character." },
	[HTTP1_E_BARE_CR] = { 400, "bare_cr",
	    "The header section contains a carriage return that is not "
	    "followed by a line feed." },
	[HTTP1_E_BARE_LF] = { 400, "bare_lf",
	    "The header section contains a line feed that is not preceded "
	    "by a carriage return." },
	[HTTP1_E_BAD_CONTENT_LENGTH] = { 400, "bad_content_length",
	    "The Content-Length value is not a plain decimal number within "
	    "the accepted range." },
	[HTTP1_E_DUP_CONTENT_LENGTH] = { 400, "duplicate_content_length",
	    "The message has more than one Content-Length field, which is "
	    "refused to prevent request smuggling." },
	[HTTP1_E_CL_AND_TE] = { 400, "content_length_and_transfer_encoding",
	    "The request sent both Content-Length and Transfer-Encoding, "
	    "which is refused to prevent request smuggling." },
	[HTTP1_E_BAD_TRANSFER_ENCODING] = { 400, "bad_transfer_encoding",
	    "The Transfer-Encoding field is malformed, lists chunked twice "
	    "or not last, or appears in an HTTP/1.0 message." },
	[HTTP1_E_UNSUPPORTED_TE] = { 501, "unsupported_transfer_encoding",
	    "The request uses a transfer coding other than chunked, which is "
	    "not supported." },
	[HTTP1_E_MISSING_HOST] = { 400, "missing_host",
	    "The HTTP/1.1 request has no Host field." },
	[HTTP1_E_DUP_HOST] = { 400, "duplicate_host",
	    "The request has more than one Host field." },
	[HTTP1_E_BAD_CHUNK_SIZE] = { 400, "bad_chunk_size",
	    "A chunk-size line is not strict hexadecimal with valid "
	    "extensions, or is too long." },
	[HTTP1_E_CHUNK_TOO_LARGE] = { 400, "chunk_too_large",
	    "A chunk is larger than the accepted maximum." },
	[HTTP1_E_BAD_CHUNK] = { 400, "bad_chunk",
	    "Chunk data is not followed by exactly CRLF." },
	[HTTP1_E_BAD_TRAILER] = { 400, "bad_trailer",
	    "The trailer section of the chunked body is malformed or too "
	    "large." },
};
_Static_assert(sizeof http1_errors / sizeof http1_errors[0] == HTTP1_E__COUNT,
    "http1_errors must cover every enum http1_err");

/* Is c a token character (RFC 9110 section 5.6.2)? */
static int
http1_is_tchar(u_char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	    (c >= 'A' && c <= 'Z'))
		return (1);
	return (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Is c optional whitespace, SP or HTAB? */
static int
http1_is_ows(u_char c)
{
	return (c == ' ' || c == '\t');
}

/* Is c allowed in a field value or reason phrase (HTAB, SP, VCHAR, obs)? */
static int
http1_is_text(u_char c)
{
	return (c == '\t' || c == ' ' || (c >= 0x21 && c != 0x7f));
}

/* Is c a decimal digit? */
static int
http1_is_digit(u_char c)
{
	return (c >= '0' && c <= '9');
}

/* Do the len bytes at s equal the lower-case literal lit, ignoring case? */
static int
http1_case_equal(const char *s, size_t len, const char *lit)
{
	size_t i;
	u_char c;

	for (i = 0; i < len; i++) {
		if (lit[i] == '\0')
			return (0);
		c = (u_char)s[i];
		if (c >= 'A' && c <= 'Z')
			c += 'a' - 'A';
		if (c != (u_char)lit[i])
			return (0);
	}
	return (lit[len] == '\0');
}

/*
 * Step through a comma-separated list: put the next element, OWS trimmed
 * and possibly empty, in *elem and *elen and return 1, or return 0 when the
 * list is exhausted (*pp is NULL).  n commas give n + 1 elements.
 */
static int
http1_list_next(
    const char **pp, const char *end, const char **elem, size_t *elen)
{
	const char *s, *e;

	if ((s = *pp) == NULL)
		return (0);
	if ((e = memchr(s, ',', end - s)) == NULL) {
		*pp = NULL;
		e = end;
	} else
		*pp = e + 1;
	while (s < e && http1_is_ows(*s))
		s++;
	while (e > s && http1_is_ows(e[-1]))
		e--;
	*elem = s;
	*elen = e - s;
	return (1);
}

/* Does the comma-separated list value contain token, ignoring case? */
int
http1_list_has(const char *value, size_t len, const char *token)
{
	const char *p, *elem;
	size_t elen;

	if (value == NULL)
		return (0);
	p = value;
	/* Both sides compare without case: token may be a field name. */
	while (http1_list_next(&p, value + len, &elem, &elen)) {
		if (elen != 0 && elen == strlen(token) &&
		    strncasecmp(elem, token, elen) == 0)
			return (1);
	}
	return (0);
}

/* Copy n bytes at offset off of in to out; returns the bytes copied. */
static size_t
http1_copyout_at(struct evbuffer *in, size_t off, u_char *out, size_t n)
{
	struct evbuffer_ptr ptr;
	ev_ssize_t got;

	if (evbuffer_ptr_set(in, &ptr, off, EVBUFFER_PTR_SET) != 0)
		return (0);
	got = evbuffer_copyout_from(in, &ptr, out, n);
	return (got < 0 ? 0 : (size_t)got);
}

/*
 * Scan the bytes of in not searched before (from m_scan) for the empty line
 * that ends a head, checking every line ending, the start line length and
 * the head size on the way, so oversize or malformed heads fail as soon as
 * the offending byte arrives.  The state is re-derived from the two bytes
 * before m_scan and m_line, so splitting the input anywhere gives the same
 * answer.  Returns 1 with *head_len set, 0 if more bytes are needed, -1
 * with *err set.
 */
static int
http1_scan(struct evbuffer *in, const struct http1_limits *lim, int request,
    struct http1_msg *m, size_t *head_len, enum http1_err *err)
{
	struct evbuffer_ptr ptr;
	struct evbuffer_iovec v;
	const u_char *p;
	u_char b[4];
	size_t len, off, lead, i, j, n, safe, stop;
	int c, c1, c2;
	enum http1_err e, bad_line;

	len = evbuffer_get_length(in);
	off = m->m_scan;
	if (off >= len)
		return (0);
	e = HTTP1_E_NONE;
	if (request)
		bad_line = HTTP1_E_BAD_REQUEST_LINE;
	else
		bad_line = HTTP1_E_BAD_STATUS_LINE;

	/* Up to two empty lines before a request line are ignored. */
	lead = 0;
	if (request) {
		n = http1_copyout_at(in, 0, b, 4);
		if (n >= 2 && b[0] == '\r' && b[1] == '\n') {
			lead = 2;
			if (n == 4 && b[2] == '\r' && b[3] == '\n')
				lead = 4;
		}
	}

	/* c1 and c2 are the bytes one and two before off, or -1. */
	c1 = c2 = -1;
	if (off >= 2) {
		if (http1_copyout_at(in, off - 2, b, 2) != 2)
			return (0);
		c2 = b[0];
		c1 = b[1];
	} else if (off == 1) {
		if (http1_copyout_at(in, 0, b, 1) != 1)
			return (0);
		c1 = b[0];
	}

	if (evbuffer_ptr_set(in, &ptr, off, EVBUFFER_PTR_SET) != 0)
		return (0);
	while (off < len) {
		if (evbuffer_peek(in, len - off, &ptr, &v, 1) < 1)
			break;
		p = v.iov_base;
		n = v.iov_len;
		if (n > len - off)
			n = len - off;
		if (n == 0)
			break;
		for (i = 0; i < n; i++, off++) {
			/*
			 * A run of bytes above CR (no CR or LF among them)
			 * after anything but a CR can fail only a limit, so
			 * it is skipped up to the first byte that a limit
			 * refuses, which the checks below then see.
			 */
			if (c1 != '\r' && p[i] > '\r') {
				safe = lim->max_head;
				if (m->m_line == 0 &&
				    lim->max_line <= SIZE_MAX - lead &&
				    lim->max_line + lead < safe)
					safe = lim->max_line + lead;
				stop = n;
				if (off >= safe)
					stop = i;
				else if (safe - off < n - i)
					stop = i + (safe - off);
				for (j = i; j < stop && p[j] > '\r'; j++)
					/* nothing */;
				if (j != i) {
					c2 = j - i >= 2 ? p[j - 2] : c1;
					c1 = p[j - 1];
					off += j - i;
					i = j;
					if (i == n)
						break;
				}
			}
			c = p[i];
			if (off >= lim->max_head)
				e = HTTP1_E_HEAD_TOO_LARGE;
			else if (c1 == '\r' && c != '\n')
				e = HTTP1_E_BARE_CR;
			else if (c == '\n' && c1 != '\r')
				e = HTTP1_E_BARE_LF;
			else if (c == '\n' && (off == 1 || c2 == '\n')) {
				/* An empty line: the end, or before a request. */
				if (m->m_line != 0) {
					m->m_scan = off + 1;
					*head_len = off + 1;
					return (1);
				}
				if (!request || off > 3)
					e = bad_line;
			} else if (c == '\n' && m->m_line == 0)
				m->m_line = off + 1;
			else if (c != '\r' && c != '\n' && m->m_line == 0 &&
			    off + 1 - lead > lim->max_line)
				e = HTTP1_E_LINE_TOO_LONG;
			if (e != HTTP1_E_NONE) {
				*err = e;
				return (-1);
			}
			c2 = c1;
			c1 = c;
		}
		if (off < len &&
		    evbuffer_ptr_set(in, &ptr, n, EVBUFFER_PTR_ADD) != 0)
			break;
	}
	m->m_scan = off;
	return (0);
}

/*
 * Check an HTTP-version of len bytes.  Returns 0 for HTTP/1.0 or HTTP/1.1
 * with *minor set, 1 for another well-formed HTTP/d.d, -1 otherwise.
 */
static int
http1_parse_version(const char *s, size_t len, int *minor)
{
	if (len != 8 || memcmp(s, "HTTP/", 5) != 0 || !http1_is_digit(s[5]) ||
	    s[6] != '.' || !http1_is_digit(s[7]))
		return (-1);
	if (s[5] != '1' || (s[7] != '0' && s[7] != '1'))
		return (1);
	*minor = s[7] - '0';
	return (0);
}

/*
 * Parse a request line of len bytes (NUL-terminated in m_buf), cutting the
 * method and target into strings in place.
 */
static enum http1_err
http1_parse_request_line(struct http1_msg *m, char *line, size_t len)
{
	char *p, *end, *target;
	int rv;

	end = line + len;
	for (p = line; p < end && http1_is_tchar(*p); p++)
		/* nothing */;
	if (p == line || p == end || *p != ' ')
		return (HTTP1_E_BAD_REQUEST_LINE);
	m->m_method = line;
	m->m_method_len = p - line;
	*p++ = '\0';

	target = p;
	for (; p < end && (u_char)*p >= 0x21 && (u_char)*p <= 0x7e; p++)
		/* nothing */;
	if (p == target || p == end || *p != ' ')
		return (HTTP1_E_BAD_REQUEST_LINE);
	m->m_target = target;
	m->m_target_len = p - target;
	*p++ = '\0';

	rv = http1_parse_version(p, end - p, &m->m_minor);
	if (rv == 1)
		return (HTTP1_E_BAD_VERSION);
	if (rv != 0)
		return (HTTP1_E_BAD_REQUEST_LINE);
	return (HTTP1_E_NONE);
}

/* Parse a status line of len bytes (NUL-terminated in m_buf). */
static enum http1_err
http1_parse_status_line(struct http1_msg *m, char *line, size_t len)
{
	size_t i;

	if (len < 12 || http1_parse_version(line, 8, &m->m_minor) != 0 ||
	    line[8] != ' ' || line[9] < '1' || line[9] > '5' ||
	    !http1_is_digit(line[10]) || !http1_is_digit(line[11]))
		return (HTTP1_E_BAD_STATUS_LINE);
	m->m_status = (line[9] - '0') * 100 + (line[10] - '0') * 10 +
	    (line[11] - '0');
	if (len == 12) {
		m->m_reason = line + 12;
		return (HTTP1_E_NONE);
	}
	if (line[12] != ' ')
		return (HTTP1_E_BAD_STATUS_LINE);
	for (i = 13; i < len; i++) {
		if (!http1_is_text(line[i]))
			return (HTTP1_E_BAD_STATUS_LINE);
	}
	m->m_reason = line + 13;
	return (HTTP1_E_NONE);
}

/*
 * Check a field line of len bytes, CRLF excluded: name ":" OWS value OWS.
 * Shared by header and trailer sections.
 */
static enum http1_err
http1_check_field(const u_char *line, size_t len)
{
	const u_char *p, *q, *end;

	end = line + len;
	if (len > 0 && http1_is_ows(line[0]))
		return (HTTP1_E_OBS_FOLD);
	for (p = line; p < end && http1_is_tchar(*p); p++)
		/* nothing */;
	if (p != end && *p != ':' && p != line && http1_is_ows(*p)) {
		for (q = p; q < end && http1_is_ows(*q); q++)
			/* nothing */;
		if (q < end && *q == ':')
			return (HTTP1_E_SPACE_BEFORE_COLON);
	}
	if (p == line || p == end || *p != ':')
		return (HTTP1_E_BAD_HEADER_NAME);
	for (p++; p < end; p++) {
		if (!http1_is_text(*p))
			return (HTTP1_E_BAD_HEADER_VALUE);
	}
	return (HTTP1_E_NONE);
}

/*
 * Cut a checked field line of len bytes in m_buf into a NUL-terminated name
 * and OWS-trimmed value.
 */
static void
http1_cut_field(char *line, size_t len, struct hfield *h)
{
	char *colon, *v, *e;

	colon = memchr(line, ':', len);
	h->name = line;
	h->name_len = colon - line;
	*colon = '\0';
	e = line + len;
	for (v = colon + 1; v < e && http1_is_ows(*v); v++)
		/* nothing */;
	while (e > v && http1_is_ows(e[-1]))
		e--;
	*e = '\0';
	h->value = v;
	h->value_len = e - v;
}

/* Parse a Content-Length value: 1*DIGIT, at most HTTP1_MAX_LENGTH. */
static int
http1_parse_length(const char *s, size_t len, uint64_t *out)
{
	uint64_t v;
	size_t i;
	u_int d;

	if (len == 0)
		return (-1);
	v = 0;
	for (i = 0; i < len; i++) {
		if (!http1_is_digit(s[i]))
			return (-1);
		d = s[i] - '0';
		if (v > (HTTP1_MAX_LENGTH - d) / 10)
			return (-1);
		v = v * 10 + d;
	}
	*out = v;
	return (0);
}

/* Add the codings listed in one Transfer-Encoding field. */
static enum http1_err
http1_add_te(struct http1_fields *f, const char *value, size_t len)
{
	const char *p, *elem;
	size_t elen, i;

	f->f_te = 1;
	p = value;
	while (http1_list_next(&p, value + len, &elem, &elen)) {
		if (elen == 0)
			return (HTTP1_E_BAD_TRANSFER_ENCODING);
		for (i = 0; i < elen; i++) {
			if (!http1_is_tchar(elem[i]))
				return (HTTP1_E_BAD_TRANSFER_ENCODING);
		}
		if (http1_case_equal(elem, elen, "chunked")) {
			if (f->f_chunked++ != 0)
				return (HTTP1_E_BAD_TRANSFER_ENCODING);
			f->f_last_chunked = 1;
		} else {
			f->f_other = 1;
			f->f_last_chunked = 0;
		}
	}
	return (HTTP1_E_NONE);
}

/* Note what one header field means for framing and flags. */
static enum http1_err
http1_apply_field(struct http1_msg *m, struct http1_fields *f,
    const struct hfield *h, int request)
{
	const char *name = h->name, *value = h->value;
	size_t nlen = h->name_len, vlen = h->value_len;

	if (http1_case_equal(name, nlen, "content-length")) {
		if (f->f_ncl++ != 0)
			return (HTTP1_E_DUP_CONTENT_LENGTH);
		if (http1_parse_length(value, vlen, &f->f_cl) != 0)
			return (HTTP1_E_BAD_CONTENT_LENGTH);
	} else if (http1_case_equal(name, nlen, "transfer-encoding"))
		return (http1_add_te(f, value, vlen));
	else if (http1_case_equal(name, nlen, "host")) {
		if (request && f->f_nhost++ != 0)
			return (HTTP1_E_DUP_HOST);
	} else if (http1_case_equal(name, nlen, "connection")) {
		if (http1_list_has(value, vlen, "close"))
			m->m_flags |= HTTP1_F_CONN_CLOSE;
		if (http1_list_has(value, vlen, "keep-alive"))
			m->m_flags |= HTTP1_F_CONN_KEEPALIVE;
		if (http1_list_has(value, vlen, "upgrade"))
			m->m_flags |= HTTP1_F_CONN_UPGRADE;
	} else if (http1_case_equal(name, nlen, "upgrade"))
		m->m_flags |= HTTP1_F_UPGRADE;
	else if (http1_case_equal(name, nlen, "expect")) {
		if (http1_case_equal(value, vlen, "100-continue"))
			m->m_flags |= HTTP1_F_EXPECT_CONTINUE;
	}
	return (HTTP1_E_NONE);
}

/* Decide how a request body is framed (RFC 9112 section 6.3). */
static enum http1_err
http1_frame_request(struct http1_msg *m, const struct http1_fields *f)
{
	if (f->f_te) {
		if (f->f_ncl != 0)
			return (HTTP1_E_CL_AND_TE);
		if (m->m_minor == 0)
			return (HTTP1_E_BAD_TRANSFER_ENCODING);
		if (f->f_chunked && !f->f_last_chunked)
			return (HTTP1_E_BAD_TRANSFER_ENCODING);
		if (!f->f_chunked || f->f_other)
			return (HTTP1_E_UNSUPPORTED_TE);
		m->m_body = HTTP1_BODY_CHUNKED;
	} else if (f->f_ncl != 0) {
		m->m_content_length = f->f_cl;
		if (f->f_cl != 0)
			m->m_body = HTTP1_BODY_LENGTH;
		else
			m->m_body = HTTP1_BODY_NONE;
	} else
		m->m_body = HTTP1_BODY_NONE;
	if (m->m_minor == 1 && f->f_nhost == 0)
		return (HTTP1_E_MISSING_HOST);
	return (HTTP1_E_NONE);
}

/* Decide how a response body is framed (RFC 9112 section 6.3). */
static enum http1_err
http1_frame_response(
    struct http1_msg *m, const struct http1_fields *f, int head_request)
{
	if (f->f_te) {
		if (f->f_ncl != 0)
			return (HTTP1_E_CL_AND_TE);
		if (m->m_minor == 0)
			return (HTTP1_E_BAD_TRANSFER_ENCODING);
		if (f->f_last_chunked) {
			m->m_body = HTTP1_BODY_CHUNKED;
			if (f->f_other)
				m->m_flags |= HTTP1_F_TE_OTHER;
		} else {
			m->m_body = HTTP1_BODY_EOF;
			m->m_flags |= HTTP1_F_TE_OTHER;
		}
	} else if (f->f_ncl != 0) {
		m->m_content_length = f->f_cl;
		if (f->f_cl != 0)
			m->m_body = HTTP1_BODY_LENGTH;
		else
			m->m_body = HTTP1_BODY_NONE;
	} else
		m->m_body = HTTP1_BODY_EOF;

	if (head_request)
		m->m_flags |= HTTP1_F_HEAD_REQUEST;
	if (head_request || m->m_status < 200 || m->m_status == 204 ||
	    m->m_status == 304) {
		m->m_body = HTTP1_BODY_NONE;
		m->m_content_length = 0;
	}
	return (HTTP1_E_NONE);
}

/* The line feeds in the first len bytes of in. */
static size_t
http1_count_lf(struct evbuffer *in, size_t len)
{
	struct evbuffer_ptr ptr;
	struct evbuffer_iovec v;
	const char *p, *q;
	size_t n, count = 0;

	if (evbuffer_ptr_set(in, &ptr, 0, EVBUFFER_PTR_SET) != 0)
		return (0);
	while (len > 0 && evbuffer_peek(in, len, &ptr, &v, 1) >= 1) {
		if ((n = v.iov_len < len ? v.iov_len : len) == 0)
			break;
		for (p = v.iov_base; (q = memchr(p, '\n',
			 n - (size_t)(p - (const char *)v.iov_base))) != NULL;
		     p = q + 1)
			count++;
		len -= n;
		if (evbuffer_ptr_set(in, &ptr, n, EVBUFFER_PTR_ADD) != 0)
			break;
	}
	return (count);
}

/*
 * Parse a head, request or response.  On success the head is drained from
 * in and copied once into m_buf, which the start line and fields point
 * into.  On error the message is reset, so nothing is left to free.
 */
static int
http1_parse_head(struct evbuffer *in, const struct http1_limits *lim,
    int request, int head_request, struct http1_msg *m, enum http1_err *err)
{
	struct http1_fields f;
	struct hfield *h;
	char *p, *lf, *end;
	size_t head_len, nfields, nlf, boff;
	enum http1_err e;
	int rv;

	*err = HTTP1_E_NONE;
	if (m->m_buf != NULL)
		http1_msg_reset(m);
	rv = http1_scan(in, lim, request, m, &head_len, &e);
	if (rv == 0)
		return (0);
	if (rv == -1)
		goto fail;

	/*
	 * One allocation for the copy and the fields that point into it: as
	 * many slots as the head has line ends (a few more than its fields).
	 */
	nlf = http1_count_lf(in, head_len);
	if (nlf > lim->max_headers + 4)
		nlf = lim->max_headers + 4;
	boff = (head_len + 1 + _Alignof(struct hfield) - 1) &
	    ~(_Alignof(struct hfield) - 1);
	m->m_buf = xmalloc(boff + nlf * sizeof *m->m_headers);
	evbuffer_copyout(in, m->m_buf, head_len);
	m->m_buf[head_len] = '\0';
	end = m->m_buf + head_len - 2;

	/* The scan allowed only CRLF pairs before the start line. */
	for (p = m->m_buf; *p == '\r'; p += 2)
		/* nothing */;
	lf = m->m_buf + m->m_line - 1;
	lf[-1] = '\0';
	if (request)
		e = http1_parse_request_line(m, p, lf - 1 - p);
	else
		e = http1_parse_status_line(m, p, lf - 1 - p);
	if (e != HTTP1_E_NONE)
		goto fail;

	/* Every field line ends in CRLF, so count the LFs. */
	nfields = 0;
	for (p = lf + 1; p < end; p = lf + 1) {
		lf = memchr(p, '\n', end + 2 - p);
		nfields++;
	}
	if (nfields > lim->max_headers || nfields > nlf) {
		e = HTTP1_E_TOO_MANY_HEADERS;
		goto fail;
	}
	if (nfields != 0)
		m->m_headers = (struct hfield *)(void *)(m->m_buf + boff);

	memset(&f, 0, sizeof f);
	for (p = m->m_buf + m->m_line; p < end; p = lf + 1) {
		lf = memchr(p, '\n', end + 2 - p);
		lf[-1] = '\0';
		e = http1_check_field((u_char *)p, lf - 1 - p);
		if (e != HTTP1_E_NONE)
			goto fail;
		h = &m->m_headers[m->m_nheaders++];
		http1_cut_field(p, lf - 1 - p, h);
		if ((e = http1_apply_field(m, &f, h, request)) != HTTP1_E_NONE)
			goto fail;
	}

	if (request)
		e = http1_frame_request(m, &f);
	else
		e = http1_frame_response(m, &f, head_request);
	if (e != HTTP1_E_NONE)
		goto fail;

	evbuffer_drain(in, head_len);
	m->m_head_len = head_len;
	return (1);

fail:
	http1_msg_reset(m);
	*err = e;
	return (-1);
}

/* Parse a request head from the front of in. */
int
http1_parse_request(struct evbuffer *in, const struct http1_limits *lim,
    struct http1_msg *m, enum http1_err *err)
{
	return (http1_parse_head(in, lim, 1, 0, m, err));
}

/* Parse a response head from the front of in. */
int
http1_parse_response(struct evbuffer *in, const struct http1_limits *lim,
    int head_request, struct http1_msg *m, enum http1_err *err)
{
	return (http1_parse_head(in, lim, 0, head_request, m, err));
}

/* Free what a parse allocated (m_headers lives in m_buf's block) and zero. */
void
http1_msg_reset(struct http1_msg *m)
{
	free(m->m_buf);
	memset(m, 0, sizeof *m);
}

/* First header field named name, ignoring case, or NULL. */
const struct hfield *
http1_msg_find(const struct http1_msg *m, const char *name)
{
	return (hfield_find(m->m_headers, m->m_nheaders, name));
}

/* The protocol-neutral view of a parsed message. */
void
http1_msg_head(const struct http1_msg *m, struct head *h)
{
	const struct hfield *host;

	memset(h, 0, sizeof *h);
	h->h_method = m->m_method;
	h->h_method_len = m->m_method_len;
	h->h_target = m->m_target;
	h->h_target_len = m->m_target_len;
	if (m->m_method != NULL && (host = http1_msg_find(m, "host")) != NULL) {
		h->h_authority = host->value;
		h->h_authority_len = host->value_len;
	}
	h->h_status = m->m_status;
	h->h_reason = m->m_reason;
	h->h_version = 10 + m->m_minor;
	h->h_fields = m->m_headers;
	h->h_nfields = m->m_nheaders;
	if (m->m_body == HTTP1_BODY_LENGTH) {
		h->h_flags |= HEAD_F_LENGTH;
		h->h_length = m->m_content_length;
	} else if (m->m_body == HTTP1_BODY_NONE) {
		/* A request without a body has length 0; a response none. */
		h->h_flags |= m->m_method != NULL ? HEAD_F_LENGTH
						  : HEAD_F_NO_BODY;
	}
	if (m->m_flags & HTTP1_F_CONN_CLOSE)
		h->h_flags |= HEAD_F_CLOSE;
	if ((m->m_flags & HTTP1_F_CONN_UPGRADE) &&
	    (m->m_flags & HTTP1_F_UPGRADE))
		h->h_flags |= HEAD_F_UPGRADE;
	if (m->m_flags & HTTP1_F_EXPECT_CONTINUE)
		h->h_flags |= HEAD_F_CONTINUE;
}

/* HTTP status for an error. */
int
http1_err_status(enum http1_err e)
{
	if ((u_int)e >= HTTP1_E__COUNT)
		return (500);
	return (http1_errors[e].status);
}

/* Machine-readable code for an error. */
const char *
http1_err_code(enum http1_err e)
{
	if ((u_int)e >= HTTP1_E__COUNT)
		return ("unknown_error");
	return (http1_errors[e].code);
}

/* Registered reason phrases, by status code. */
static const struct {
	int status;
	const char *reason;
} http1_reasons[] = {
	{ 100, "Continue" },
	{ 101, "Switching Protocols" },
	{ 102, "Processing" },
	{ 103, "Early Hints" },
	{ 200, "OK" },
	{ 201, "Created" },
	{ 202, "Accepted" },
	{ 203, "Non-Authoritative Information" },
	{ 204, "No Content" },
	{ 205, "Reset Content" },
	{ 206, "Partial Content" },
	{ 207, "Multi-Status" },
	{ 208, "Already Reported" },
	{ 226, "IM Used" },
	{ 300, "Multiple Choices" },
	{ 301, "Moved Permanently" },
	{ 302, "Found" },
	{ 303, "See Other" },
	{ 304, "Not Modified" },
	{ 305, "Use Proxy" },
	{ 307, "Temporary Redirect" },
	{ 308, "Permanent Redirect" },
	{ 400, "Bad Request" },
	{ 401, "Unauthorized" },
	{ 402, "Payment Required" },
	{ 403, "Forbidden" },
	{ 404, "Not Found" },
	{ 405, "Method Not Allowed" },
	{ 406, "Not Acceptable" },
	{ 407, "Proxy Authentication Required" },
	{ 408, "Request Timeout" },
	{ 409, "Conflict" },
	{ 410, "Gone" },
	{ 411, "Length Required" },
	{ 412, "Precondition Failed" },
	{ 413, "Content Too Large" },
	{ 414, "URI Too Long" },
	{ 415, "Unsupported Media Type" },
	{ 416, "Range Not Satisfiable" },
	{ 417, "Expectation Failed" },
	{ 421, "Misdirected Request" },
	{ 422, "Unprocessable Content" },
	{ 423, "Locked" },
	{ 424, "Failed Dependency" },
	{ 425, "Too Early" },
	{ 426, "Upgrade Required" },
	{ 428, "Precondition Required" },
	{ 429, "Too Many Requests" },
	{ 431, "Request Header Fields Too Large" },
	{ 451, "Unavailable For Legal Reasons" },
	{ 500, "Internal Server Error" },
	{ 501, "Not Implemented" },
	{ 502, "Bad Gateway" },
	{ 503, "Service Unavailable" },
	{ 504, "Gateway Timeout" },
	{ 505, "HTTP Version Not Supported" },
	{ 506, "Variant Also Negotiates" },
	{ 507, "Insufficient Storage" },
	{ 508, "Loop Detected" },
	{ 511, "Network Authentication Required" },
};

/* The registered reason phrase of status, or "" (binary search). */
const char *
http1_reason(int status)
{
	size_t lo = 0, hi = sizeof http1_reasons / sizeof http1_reasons[0], mid;

	while (lo < hi) {
		mid = (lo + hi) / 2;
		if (http1_reasons[mid].status == status)
			return (http1_reasons[mid].reason);
		if (http1_reasons[mid].status < status)
			lo = mid + 1;
		else
			hi = mid;
	}
	return ("");
}

/* One English sentence describing an error. */
const char *
http1_err_message(enum http1_err e)
{
	if ((u_int)e >= HTTP1_E__COUNT)
		return ("The message could not be parsed.");
	return (http1_errors[e].message);
}

/*
 * Find the end of the line at the front of in, searching only bytes not
 * searched before (ck_len).  Returns 1 with *n set to the line length with
 * its CRLF, 0 if the line is incomplete, -1 if it ends in a bare LF or has
 * more than limit bytes before its CRLF.
 */
static int
http1_chunk_line(
    struct http1_chunked *ck, struct evbuffer *in, size_t limit, size_t *n)
{
	struct evbuffer_ptr ptr;
	size_t len, pos;
	u_char c;

	len = evbuffer_get_length(in);
	if (ck->ck_len >= len)
		return (len > limit + 1 ? -1 : 0);
	if (evbuffer_ptr_set(in, &ptr, ck->ck_len, EVBUFFER_PTR_SET) != 0)
		return (-1);
	ptr = evbuffer_search(in, "\n", 1, &ptr);
	if (ptr.pos == -1) {
		ck->ck_len = len;
		return (len > limit + 1 ? -1 : 0);
	}
	pos = ptr.pos;
	if (pos == 0 || pos - 1 > limit)
		return (-1);
	if (http1_copyout_at(in, pos - 1, &c, 1) != 1 || c != '\r')
		return (-1);
	ck->ck_len = 0;
	*n = pos + 1;
	return (1);
}

/*
 * Check chunk extensions after the size:
 * *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ).
 */
static int
http1_check_chunk_ext(const u_char *p, const u_char *end)
{
	const u_char *s;

	while (p != end) {
		while (p < end && http1_is_ows(*p))
			p++;
		if (p == end || *p++ != ';')
			return (-1);
		while (p < end && http1_is_ows(*p))
			p++;
		for (s = p; p < end && http1_is_tchar(*p); p++)
			/* nothing */;
		if (p == s)
			return (-1);
		for (s = p; p < end && http1_is_ows(*p); p++)
			/* nothing */;
		if (p == end || *p != '=') {
			/* No value: the whitespace must lead to a ';'. */
			p = s;
			continue;
		}
		for (p++; p < end && http1_is_ows(*p); p++)
			/* nothing */;
		if (p < end && *p == '"') {
			for (p++; p < end && *p != '"'; p++) {
				if (*p == '\\' && ++p == end)
					return (-1);
				if (*p == 0x7f || (*p < 0x20 && *p != '\t'))
					return (-1);
			}
			if (p++ == end)
				return (-1);
		} else {
			for (s = p; p < end && http1_is_tchar(*p); p++)
				/* nothing */;
			if (p == s)
				return (-1);
		}
	}
	return (0);
}

/* Parse a chunk-size line of len bytes, CRLF excluded. */
static enum http1_err
http1_parse_chunk_size(const u_char *line, size_t len, uint64_t *size)
{
	uint64_t v;
	size_t i;
	int d;

	v = 0;
	for (i = 0; i < len; i++) {
		if ((d = hex_value(line[i])) == -1)
			break;
		if (i == HTTP1_MAX_HEXDIG)
			return (HTTP1_E_BAD_CHUNK_SIZE);
		v = (v << 4) | (uint64_t)d;
	}
	if (i == 0 || http1_check_chunk_ext(line + i, line + len) != 0)
		return (HTTP1_E_BAD_CHUNK_SIZE);
	if (v > HTTP1_MAX_CHUNK)
		return (HTTP1_E_CHUNK_TOO_LARGE);
	*size = v;
	return (HTTP1_E_NONE);
}

/* Never passed on as trailers: see http1.h. */
static const char *const http1_no_trailer[] = {
	"age",
	"authentication-info",
	"authorization",
	"cache-control",
	"connection",
	"content-encoding",
	"content-length",
	"content-range",
	"content-type",
	"cookie",
	"date",
	"expect",
	"expires",
	"host",
	"keep-alive",
	"location",
	"max-forwards",
	"pragma",
	"proxy-authenticate",
	"proxy-authentication-info",
	"proxy-authorization",
	"proxy-connection",
	"range",
	"retry-after",
	"set-cookie",
	"te",
	"trailer",
	"transfer-encoding",
	"upgrade",
	"vary",
	"www-authenticate",
};

/* Is name never a trailer? */
int
http1_trailer_forbidden(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof http1_no_trailer / sizeof http1_no_trailer[0];
	     i++) {
		if (strlen(http1_no_trailer[i]) == len &&
		    http1_case_equal(name, len, http1_no_trailer[i]))
			return (1);
	}
	return (0);
}

/* Free what a decoder kept and zero t. */
void
http1_trailers_reset(struct http1_trailers *t)
{
	free(t->tr_buf);
	free(t->tr_fields);
	memset(t, 0, sizeof *t);
}

/*
 * Keep a checked trailer field line of n bytes (CRLF included) unless its
 * name is forbidden.  Returns -1 past HTTP1_MAX_TRAILER_FIELDS.  The
 * section as a whole is bounded by HTTP1_MAX_TRAILER already.
 */
static int
http1_trailer_keep(struct http1_trailers *t, const u_char *line, size_t n)
{
	const u_char *colon = memchr(line, ':', n);
	size_t size;

	if (colon == NULL ||
	    http1_trailer_forbidden((const char *)line, (size_t)(colon - line)))
		return (0);
	if (t->tr_nfields == HTTP1_MAX_TRAILER_FIELDS)
		return (-1);
	if (t->tr_size - t->tr_len < n) {
		size = t->tr_size != 0 ? t->tr_size : 256;
		while (size - t->tr_len < n)
			size *= 2;
		t->tr_buf = xrealloc(t->tr_buf, size);
		t->tr_size = size;
	}
	memcpy(t->tr_buf + t->tr_len, line, n);
	t->tr_len += n;
	t->tr_nfields++;
	return (0);
}

/* The section ended: cut the kept lines into fields. */
static void
http1_trailers_cut(struct http1_trailers *t)
{
	char *p, *end, *eol;
	size_t i;

	if (t->tr_nfields == 0)
		return;
	p = t->tr_buf;
	end = t->tr_buf + t->tr_len;
	t->tr_fields = xcalloc(t->tr_nfields, sizeof *t->tr_fields);
	for (i = 0; i < t->tr_nfields && p < end; i++) {
		/* Each kept line ends in CRLF (http1_chunk_line). */
		eol = memchr(p, '\r', (size_t)(end - p));
		http1_cut_field(p, (size_t)(eol - p), &t->tr_fields[i]);
		p = eol + 2;
	}
	t->tr_nfields = i;
}

/* Decode chunked data from in into out; see http1.h for the contract. */
int
http1_chunked_decode(struct http1_chunked *ck, struct evbuffer *in,
    struct evbuffer *out, size_t max, size_t *moved, enum http1_err *err)
{
	const u_char *line;
	u_char crlf[2];
	uint64_t size;
	size_t n, len, limit;
	ev_ssize_t got;
	enum http1_err e;
	int rv;

	*moved = 0;
	*err = HTTP1_E_NONE;
	for (;;) {
		switch (ck->ck_state) {
		case HTTP1_CK_SIZE:
			rv = http1_chunk_line(ck, in, HTTP1_MAX_CHUNK_LINE, &n);
			if (rv == 0)
				return (0);
			if (rv == -1) {
				e = HTTP1_E_BAD_CHUNK_SIZE;
				goto fail;
			}
			line = evbuffer_pullup(in, n);
			e = http1_parse_chunk_size(line, n - 2, &size);
			if (e != HTTP1_E_NONE)
				goto fail;
			evbuffer_drain(in, n);
			if (size == 0) {
				ck->ck_trailer = 0;
				ck->ck_state = HTTP1_CK_TRAILER;
			} else {
				ck->ck_left = size;
				ck->ck_state = HTTP1_CK_DATA;
			}
			break;
		case HTTP1_CK_DATA:
			len = evbuffer_get_length(in);
			n = max - *moved;
			if (n > ck->ck_left)
				n = ck->ck_left;
			if (n > len)
				n = len;
			if (n > HTTP1_MAX_MOVE)
				n = HTTP1_MAX_MOVE;
			if (n == 0)
				return (0);
			if (evb_take(in, out, n) != (int)n) {
				e = HTTP1_E_BAD_CHUNK;
				goto fail;
			}
			*moved += n;
			ck->ck_left -= n;
			if (ck->ck_left == 0)
				ck->ck_state = HTTP1_CK_DATA_CRLF;
			break;
		case HTTP1_CK_DATA_CRLF:
			got = evbuffer_copyout(in, crlf, 2);
			if ((got >= 1 && crlf[0] != '\r') ||
			    (got == 2 && crlf[1] != '\n')) {
				e = HTTP1_E_BAD_CHUNK;
				goto fail;
			}
			if (got != 2)
				return (0);
			evbuffer_drain(in, 2);
			ck->ck_state = HTTP1_CK_SIZE;
			break;
		case HTTP1_CK_TRAILER:
			if (HTTP1_MAX_TRAILER - ck->ck_trailer < 2) {
				e = HTTP1_E_BAD_TRAILER;
				goto fail;
			}
			limit = HTTP1_MAX_TRAILER - ck->ck_trailer - 2;
			rv = http1_chunk_line(ck, in, limit, &n);
			if (rv == 0)
				return (0);
			if (rv == -1) {
				e = HTTP1_E_BAD_TRAILER;
				goto fail;
			}
			ck->ck_trailer += n;
			if (n == 2) {
				evbuffer_drain(in, 2);
				ck->ck_state = HTTP1_CK_DONE;
				if (ck->ck_keep != NULL)
					http1_trailers_cut(ck->ck_keep);
				return (1);
			}
			line = evbuffer_pullup(in, n);
			if (http1_check_field(line, n - 2) != HTTP1_E_NONE ||
			    (ck->ck_keep != NULL &&
				http1_trailer_keep(ck->ck_keep, line, n) !=
				    0)) {
				e = HTTP1_E_BAD_TRAILER;
				goto fail;
			}
			evbuffer_drain(in, n);
			break;
		case HTTP1_CK_DONE:
			/* Idempotent: the caller may ask again. */
			return (1);
		default:
			/* Not a state this decoder sets: refuse. */
			e = HTTP1_E_BAD_CHUNK;
			goto fail;
		}
	}

fail:
	*err = e;
	return (-1);
}

/* Append a chunk-size line for n data bytes. */
void
http1_chunk_header(struct evbuffer *out, size_t n)
{
	char buf[18];
	size_t len = fmt_hex(buf, n);

	buf[len++] = '\r';
	buf[len++] = '\n';
	evbuffer_add(out, buf, len);
}

/* Append the CRLF that ends a chunk's data. */
void
http1_chunk_trailer(struct evbuffer *out)
{
	evbuffer_add(out, "\r\n", 2);
}

/* Append the last chunk and an empty trailer section. */
void
http1_chunk_last(struct evbuffer *out)
{
	evbuffer_add(out, "0\r\n\r\n", 5);
}
