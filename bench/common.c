/*
 * Helpers shared by the benchmark tools: buffers, strict HTTP/1.1 parsing
 * over plain memory, the chunked decoder, loopback URLs, WebSocket frames,
 * latency histograms and option parsing.
 */
#include <sys/types.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "addr.h"
#include "alloc.h"
#include "strbuf.h"
#include "wsconn.h"

#include "common.h"

/* Smallest allocation of a buffer. */
#define BUF_MIN 4096

/* Make room for n more bytes at the end of b. */
void
buf_reserve(struct buf *b, size_t n)
{
	size_t have = BUF_LEN(b), cap;

	if (b->b_cap - b->b_len >= n)
		return;
	if (b->b_off > 0) {
		memmove(b->b_data, b->b_data + b->b_off, have);
		b->b_off = 0;
		b->b_len = have;
		if (b->b_cap - b->b_len >= n)
			return;
	}
	cap = b->b_cap == 0 ? BUF_MIN : b->b_cap;
	while (cap - have < n) {
		if (cap > SIZE_MAX / 2) {
			fprintf(
			    stderr, "fatal: buffer of %zu bytes\n", have + n);
			abort();
		}
		cap *= 2;
	}
	b->b_data = xrealloc(b->b_data, cap);
	b->b_cap = cap;
}

/* Append n bytes to b. */
void
buf_append(struct buf *b, const void *p, size_t n)
{
	if (n == 0)
		return;
	buf_reserve(b, n);
	memcpy(b->b_data + b->b_len, p, n);
	b->b_len += n;
}

/* Append a string to b. */
void
buf_append_str(struct buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

/* Append the decimal digits of v to b. */
void
buf_append_u64(struct buf *b, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof tmp;

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	buf_append(b, tmp + i, sizeof tmp - i);
}

/* Drop n bytes from the front of b. */
void
buf_consume(struct buf *b, size_t n)
{
	b->b_off += n;
	if (b->b_off >= b->b_len)
		b->b_off = b->b_len = 0;
}

/* Free what b holds and empty it. */
void
buf_free(struct buf *b)
{
	free(b->b_data);
	memset(b, 0, sizeof *b);
}

/*
 * Write what b holds to a nonblocking socket.  Returns 1 when b is empty,
 * 0 when the socket is full (a short write counts: the next EPOLLOUT edge
 * says when to go on), -1 on error with errno set.
 */
int
buf_write(struct buf *b, int fd)
{
	ssize_t n;
	size_t want;

	while ((want = BUF_LEN(b)) > 0) {
		n = send(fd, BUF_PTR(b), want, MSG_NOSIGNAL);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return (0);
			return (-1);
		}
		buf_consume(b, (size_t)n);
		if ((size_t)n < want)
			return (0);
	}
	return (1);
}

/* Is c an RFC 9110 tchar, a byte of a token? */
static int
http_tchar(uint8_t c)
{
	static const char sym[] = "!#$%&'*+-.^_`|~";

	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') ||
	    (c != '\0' && memchr(sym, c, sizeof sym - 1) != NULL));
}

/* Is p[0 .. n) a token (one or more tchar)? */
int
http_is_token(const char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (!http_tchar((uint8_t)p[i]))
			return (0);
	}
	return (n > 0);
}

/* Is c a byte allowed in a field value (VCHAR, obs-text, SP, HTAB)? */
static int
http_value_byte(uint8_t c)
{
	return ((c >= 0x20 && c != 0x7f) || c == '\t');
}

/*
 * Find the end of a head at the front of p[0 .. n): every line must end in
 * CRLF.  Returns 1 with *len set to the head's size (the empty line
 * included), 0 when more bytes are needed, -1 on a bare LF.
 */
int
http_head_end(const char *p, size_t n, size_t *len)
{
	const char *line = p, *end = p + n, *nl;

	while ((nl = memchr(line, '\n', (size_t)(end - line))) != NULL) {
		if (nl == p || nl[-1] != '\r')
			return (-1);
		if (nl - line == 1) {
			*len = (size_t)(nl + 1 - p);
			return (1);
		}
		line = nl + 1;
	}
	return (0);
}

/*
 * Parse the header lines of a head, p[0 .. n) being everything after the
 * start line up to and including the empty line.  Fills at most max fields
 * pointing into p.  Returns 0, or -1 with *why set to a static sentence.
 */
int
http_parse_fields(const char *p, size_t n, struct http_field *fields,
    size_t max, size_t *count, const char **why)
{
	const char *line = p, *end = p + n, *nl, *le, *q, *colon, *v, *ve;

	*count = 0;
	for (;;) {
		nl = memchr(line, '\n', (size_t)(end - line));
		if (nl == NULL || nl == line || nl[-1] != '\r') {
			*why = "header lines must end in CRLF";
			return (-1);
		}
		le = nl - 1;
		if (le == line)
			return (0);
		if (*line == ' ' || *line == '\t') {
			*why = "obsolete line folding";
			return (-1);
		}
		for (q = line; q < le && http_tchar((uint8_t)*q); q++)
			;
		if (q == line || q == le || *q != ':') {
			*why = "malformed header name";
			return (-1);
		}
		colon = q;
		for (v = q + 1; v < le && (*v == ' ' || *v == '\t'); v++)
			;
		for (ve = le; ve > v && (ve[-1] == ' ' || ve[-1] == '\t'); ve--)
			;
		for (q = v; q < ve; q++) {
			if (!http_value_byte((uint8_t)*q)) {
				*why = "control byte in a header value";
				return (-1);
			}
		}
		if (*count == max) {
			*why = "too many header fields";
			return (-1);
		}
		fields[*count].f_name = line;
		fields[*count].f_namelen = (size_t)(colon - line);
		fields[*count].f_value = v;
		fields[*count].f_valuelen = (size_t)(ve - v);
		(*count)++;
		line = nl + 1;
	}
}

/* Is the field named name (case-insensitive)? */
int
http_field_is(const struct http_field *f, const char *name)
{
	return (strlen(name) == f->f_namelen &&
	    strncasecmp(f->f_name, name, f->f_namelen) == 0);
}

/* Does the comma-separated list v[0 .. n) hold token (case-insensitive)? */
int
http_list_has(const char *v, size_t n, const char *token)
{
	const char *end = v + n, *s, *e;
	size_t tlen = strlen(token);

	while (v < end) {
		for (s = v; s < end && (*s == ' ' || *s == '\t'); s++)
			;
		for (e = s; e < end && *e != ','; e++)
			;
		v = e < end ? e + 1 : end;
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if ((size_t)(e - s) == tlen && strncasecmp(s, token, tlen) == 0)
			return (1);
	}
	return (0);
}

/* Parse a Content-Length value: 1 to 18 digits.  Returns 0 or -1. */
int
http_parse_length(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (n == 0 || n > 18)
		return (-1);
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return (-1);
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return (0);
}

/*
 * Parse a response head p[0 .. n) as found by http_head_end: status line,
 * fields and how the body is framed.  Returns 0, or -1 with *why set to a
 * static sentence.
 */
int
http_parse_response(
    const char *p, size_t n, struct http_resp *r, const char **why)
{
	const struct http_field *f;
	const char *nl;
	uint64_t len;
	size_t i;

	memset(r, 0, sizeof *r);
	nl = memchr(p, '\n', n);
	if (nl == NULL || nl - p < 13 || strncmp(p, "HTTP/1.", 7) != 0 ||
	    (p[7] != '0' && p[7] != '1') || p[8] != ' ' || p[9] < '1' ||
	    p[9] > '5' || p[10] < '0' || p[10] > '9' || p[11] < '0' ||
	    p[11] > '9' || (p[12] != ' ' && p[12] != '\r')) {
		*why = "malformed status line";
		return (-1);
	}
	r->r_minor = p[7] - '0';
	r->r_status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	nl++;
	if (http_parse_fields(nl, n - (size_t)(nl - p), r->r_fields,
		BENCH_FIELDS_MAX, &r->r_nfields, why) != 0)
		return (-1);
	if (r->r_minor == 0)
		r->r_flags |= HTTP_RESP_F_CLOSE;
	for (i = 0; i < r->r_nfields; i++) {
		f = &r->r_fields[i];
		if (http_field_is(f, "content-length")) {
			if (http_parse_length(
				f->f_value, f->f_valuelen, &len) != 0 ||
			    ((r->r_flags & HTTP_RESP_F_LENGTH) &&
				len != r->r_length)) {
				*why = "bad Content-Length";
				return (-1);
			}
			r->r_length = len;
			r->r_flags |= HTTP_RESP_F_LENGTH;
		} else if (http_field_is(f, "transfer-encoding")) {
			if (f->f_valuelen != 7 ||
			    strncasecmp(f->f_value, "chunked", 7) != 0) {
				*why = "a transfer coding other than chunked";
				return (-1);
			}
			r->r_flags |= HTTP_RESP_F_CHUNKED;
		} else if (http_field_is(f, "connection")) {
			if (http_list_has(f->f_value, f->f_valuelen, "close"))
				r->r_flags |= HTTP_RESP_F_CLOSE;
			else if (http_list_has(
				     f->f_value, f->f_valuelen, "keep-alive"))
				r->r_flags &= ~HTTP_RESP_F_CLOSE;
		}
	}
	if ((r->r_flags & HTTP_RESP_F_CHUNKED) &&
	    (r->r_flags & HTTP_RESP_F_LENGTH)) {
		*why = "both Content-Length and Transfer-Encoding";
		return (-1);
	}
	return (0);
}

/* First field of a response named name, or NULL. */
const struct http_field *
http_resp_find(const struct http_resp *r, const char *name)
{
	size_t i;

	for (i = 0; i < r->r_nfields; i++) {
		if (http_field_is(&r->r_fields[i], name))
			return (&r->r_fields[i]);
	}
	return (NULL);
}

/* States of the chunked decoder. */
enum chunked_state {
	CH_SIZE, /* chunk-size hex digits */
	CH_EXT, /* chunk extensions, up to CR */
	CH_SIZE_LF, /* LF after the chunk-size line */
	CH_DATA, /* chunk data */
	CH_DATA_CR, /* CR after chunk data */
	CH_DATA_LF, /* LF after chunk data */
	CH_TRAILER, /* start of a trailer line, or the final CRLF */
	CH_TRAILER_NAME, /* trailer field name */
	CH_TRAILER_VALUE, /* trailer field value, up to CR */
	CH_TRAILER_LF, /* LF after a trailer line */
	CH_END_LF, /* LF of the final CRLF */
	CH_DONE,
};

/* Start decoding a new chunked body. */
void
chunked_init(struct chunked *ch)
{
	memset(ch, 0, sizeof *ch);
	ch->ch_state = CH_SIZE;
}


/*
 * Decode chunked framing from p[0 .. n): chunk sizes are hex digits only
 * (no sign, no 0x, at most CHUNKED_MAX_DIGITS), extensions and trailers
 * are checked and skipped, data bytes are counted into *data and skipped.
 * Returns the bytes consumed; *done is set once the message ends (the
 * bytes after it are not consumed).  Returns -1 with *why on bad framing.
 */
ssize_t
chunked_feed(struct chunked *ch, const uint8_t *p, size_t n, uint64_t *data,
    int *done, const char **why)
{
	size_t i = 0, k;
	uint8_t c;
	int d;

	*done = 0;
	while (i < n) {
		if (ch->ch_state == CH_DATA) {
			k = n - i;
			if (k > ch->ch_left)
				k = (size_t)ch->ch_left;
			*data += k;
			ch->ch_left -= k;
			i += k;
			if (ch->ch_left == 0)
				ch->ch_state = CH_DATA_CR;
			continue;
		}
		c = p[i++];
		switch (ch->ch_state) {
		case CH_SIZE:
			if ((d = hex_value(c)) >= 0) {
				if (++ch->ch_digits > CHUNKED_MAX_DIGITS)
					goto toolarge;
				ch->ch_left = ch->ch_left << 4 | (uint64_t)d;
				break;
			}
			if (ch->ch_digits == 0)
				goto badsize;
			if (c == '\r')
				ch->ch_state = CH_SIZE_LF;
			else if (c == ';' || c == ' ' || c == '\t') {
				ch->ch_line = 0;
				ch->ch_state = CH_EXT;
			} else
				goto badsize;
			break;
		case CH_EXT:
			if (c == '\r')
				ch->ch_state = CH_SIZE_LF;
			else if (!http_value_byte(c) ||
			    ++ch->ch_line > CHUNKED_MAX_EXT)
				goto badsize;
			break;
		case CH_SIZE_LF:
			if (c != '\n')
				goto badsize;
			ch->ch_digits = 0;
			if (ch->ch_left == 0) {
				ch->ch_trailer = 0;
				ch->ch_state = CH_TRAILER;
			} else
				ch->ch_state = CH_DATA;
			break;
		case CH_DATA_CR:
			if (c != '\r')
				goto baddata;
			ch->ch_state = CH_DATA_LF;
			break;
		case CH_DATA_LF:
			if (c != '\n')
				goto baddata;
			ch->ch_state = CH_SIZE;
			break;
		case CH_TRAILER:
			if (c == '\r') {
				ch->ch_state = CH_END_LF;
				break;
			}
			if (!http_tchar(c))
				goto badtrailer;
			ch->ch_state = CH_TRAILER_NAME;
			break;
		case CH_TRAILER_NAME:
			if (c == ':')
				ch->ch_state = CH_TRAILER_VALUE;
			else if (!http_tchar(c))
				goto badtrailer;
			break;
		case CH_TRAILER_VALUE:
			if (c == '\r')
				ch->ch_state = CH_TRAILER_LF;
			else if (!http_value_byte(c))
				goto badtrailer;
			break;
		case CH_TRAILER_LF:
			if (c != '\n')
				goto badtrailer;
			ch->ch_state = CH_TRAILER;
			break;
		case CH_END_LF:
			if (c != '\n')
				goto badtrailer;
			ch->ch_state = CH_DONE;
			*done = 1;
			return ((ssize_t)i);
		default:
			*why = "chunked body already complete";
			return (-1);
		}
		if (ch->ch_state >= CH_TRAILER &&
		    ++ch->ch_trailer > CHUNKED_MAX_TRAILER)
			goto badtrailer;
	}
	return ((ssize_t)i);

toolarge:
	*why = "chunk size too large";
	return (-1);
badsize:
	*why = "malformed chunk-size line";
	return (-1);
baddata:
	*why = "chunk data not followed by CRLF";
	return (-1);
badtrailer:
	*why = "malformed trailer section";
	return (-1);
}

/* Is an address on the loopback network (127.0.0.0/8 or ::1)? */
int
addr_is_loopback(const struct sockaddr *sa)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

	if (sa->sa_family == AF_INET)
		return ((ntohl(sin->sin_addr.s_addr) >> 24) == 127);
	if (sa->sa_family == AF_INET6)
		return (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr) ||
		    (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr) &&
			sin6->sin6_addr.s6_addr[12] == 127));
	return (0);
}

/*
 * Parse a URL whose scheme is allowed by the URL_* mask: host a literal
 * loopback address or localhost, optional port (default 80), path and
 * query (default "/"); a fragment is dropped.  Returns 0, or -1 with
 * *cause set to a sentence the caller frees.
 */
int
url_parse(const char *s, int allow, struct url *u, char **cause)
{
	const char *rest, *q;
	char *auth = NULL, *host = NULL, *colon;
	long port = 80;
	size_t n;

	memset(u, 0, sizeof *u);
	if ((allow & URL_WS) && strncasecmp(s, "ws://", 5) == 0)
		rest = s + 5;
	else if ((allow & URL_HTTP) && strncasecmp(s, "http://", 7) == 0)
		rest = s + 7;
	else if (strncasecmp(s, "wss://", 6) == 0 ||
	    strncasecmp(s, "https://", 8) == 0) {
		xasprintf(cause, "'%s': TLS is not supported, use %s", s,
		    (allow & URL_WS) ? "ws://" : "http://");
		return (-1);
	} else {
		xasprintf(cause, "'%s' is not a %s URL", s,
		    allow == URL_WS ? "ws://" : "ws:// or http://");
		return (-1);
	}
	n = strcspn(rest, "/?#");
	auth = xstrndup(rest, n);
	rest += n;
	if (*auth == '\0' || strchr(auth, '@') != NULL) {
		xasprintf(cause, "'%s' has no host, or has user info", s);
		goto fail;
	}
	if (*auth == '[') {
		if ((q = strchr(auth, ']')) == NULL ||
		    (q[1] != '\0' && q[1] != ':')) {
			xasprintf(cause, "'%s' has a malformed [IPv6] host", s);
			goto fail;
		}
		host = xstrndup(auth + 1, (size_t)(q - auth - 1));
		colon = q[1] == ':' ? (char *)q + 1 : NULL;
	} else {
		colon = strchr(auth, ':');
		if (colon != NULL && strrchr(auth, ':') != colon) {
			xasprintf(cause, "'%s': write IPv6 hosts as [::1]", s);
			goto fail;
		}
		host = xstrndup(auth,
		    colon != NULL ? (size_t)(colon - auth) : strlen(auth));
	}
	if (colon != NULL) {
		port = 0;
		for (q = colon + 1; *q >= '0' && *q <= '9' && port <= 65535;
		     q++)
			port = port * 10 + (*q - '0');
		if (q == colon + 1 || *q != '\0' || port < 1 || port > 65535) {
			xasprintf(cause, "'%s' has no valid port (1-65535)", s);
			goto fail;
		}
	}
	if (strcasecmp(host, "localhost") == 0) {
		free(host);
		host = xstrdup("127.0.0.1");
	}
	if (addr_parse_ip(host, (int)port, &u->u_addr, &u->u_addrlen) != 0) {
		xasprintf(cause,
		    "'%s' is not localhost or a literal IP address", host);
		goto fail;
	}
	if (!addr_is_loopback((struct sockaddr *)&u->u_addr)) {
		xasprintf(cause,
		    "'%s' is not a loopback address: the benchmark tools only "
		    "connect to 127.0.0.0/8, ::1 or localhost",
		    host);
		goto fail;
	}
	n = strcspn(rest, "#");
	if (n == 0)
		u->u_path = xstrdup("/");
	else if (*rest == '?')
		xasprintf(&u->u_path, "/%.*s", (int)n, rest);
	else
		u->u_path = xstrndup(rest, n);
	for (q = u->u_path; *q != '\0'; q++) {
		if ((uint8_t)*q <= 0x20 || *q == 0x7f) {
			xasprintf(cause,
			    "'%s' has a space or control byte in "
			    "its path",
			    s);
			goto fail;
		}
	}
	u->u_authority = auth;
	free(host);
	return (0);

fail:
	free(u->u_path);
	u->u_path = NULL;
	free(host);
	free(auth);
	return (-1);
}

/* Copy a path with every "%d" replaced by idx; the caller frees. */
char *
url_path_expand(const char *path, unsigned int idx)
{
	struct buf b;
	const char *p;
	char *s;

	memset(&b, 0, sizeof b);
	for (p = path; *p != '\0'; p++) {
		if (p[0] == '%' && p[1] == 'd') {
			buf_append_u64(&b, idx);
			p++;
		} else
			buf_append(&b, p, 1);
	}
	buf_append(&b, "", 1);
	s = xstrdup((const char *)BUF_PTR(&b));
	buf_free(&b);
	return (s);
}

/* Free what a parsed URL holds. */
void
url_free(struct url *u)
{
	free(u->u_authority);
	free(u->u_path);
	memset(u, 0, sizeof *u);
}

/*
 * Add a --header argument "Name: value": the name must be a token, the
 * value free of control bytes.  The fields the tools write themselves are
 * refused, except Host, which replaces the URL's authority.  Returns 0, or
 * -1 with *cause set.
 */
int
headers_add(struct headers *h, const char *arg, char **cause)
{
	static const char *const own[] = { "connection", "upgrade",
		"sec-websocket-key", "sec-websocket-version", "content-length",
		"transfer-encoding", NULL };
	const char *p, *v;
	size_t i, nlen;

	for (p = arg; http_tchar((uint8_t)*p); p++)
		;
	if (p == arg || *p != ':') {
		xasprintf(cause, "--header '%s' is not 'Name: value'", arg);
		return (-1);
	}
	nlen = (size_t)(p - arg);
	for (v = p + 1; *v == ' ' || *v == '\t'; v++)
		;
	for (p = v; *p != '\0'; p++) {
		if (!http_value_byte((uint8_t)*p)) {
			xasprintf(
			    cause, "--header '%s' has a control byte", arg);
			return (-1);
		}
	}
	for (i = 0; own[i] != NULL; i++) {
		if (strlen(own[i]) == nlen &&
		    strncasecmp(arg, own[i], nlen) == 0) {
			xasprintf(cause, "--header: the tool sets %.*s itself",
			    (int)nlen, arg);
			return (-1);
		}
	}
	if (nlen == 4 && strncasecmp(arg, "host", 4) == 0) {
		if (*v == '\0' || strpbrk(v, " \t") != NULL) {
			xasprintf(cause, "--header '%s': bad Host", arg);
			return (-1);
		}
		free(h->h_host);
		h->h_host = xstrdup(v);
		return (0);
	}
	h->h_list = xreallocarray(h->h_list, h->h_count + 2, sizeof *h->h_list);
	xasprintf(&h->h_list[h->h_count++], "%.*s: %s", (int)nlen, arg, v);
	h->h_list[h->h_count] = NULL;
	return (0);
}

/* Free the header list. */
void
headers_free(struct headers *h)
{
	size_t i;

	for (i = 0; i < h->h_count; i++)
		free(h->h_list[i]);
	free(h->h_list);
	free(h->h_host);
	memset(h, 0, sizeof *h);
}

/* States of the frame parser. */
enum {
	WP_S_HEADER, /* collecting a header */
	WP_S_PAYLOAD, /* in a payload */
	WP_S_DONE, /* payload complete: WS_EV_END is next */
	WP_S_ERROR,
};

/*
 * Start parsing frames.  server: the frames come from a client and must be
 * masked; max: the largest data message accepted (1009 beyond).
 */
void
ws_parse_init(struct wsparse *wp, int server, uint64_t max)
{
	memset(wp, 0, sizeof *wp);
	wp->wp_state = WP_S_HEADER;
	wp->wp_server = server;
	wp->wp_max = max;
}

/* Fail the parse with a close code; returns WS_EV_ERROR. */
static enum ws_event
ws_parse_fail(struct wsparse *wp, uint16_t code, const char *why)
{
	wp->wp_state = WP_S_ERROR;
	wp->wp_code = code;
	wp->wp_why = why;
	return (WS_EV_ERROR);
}

/* Bytes of a header whose first have bytes are in h. */
static size_t
ws_header_len(const uint8_t *h, size_t have)
{
	size_t len = 2;

	if (have < 2)
		return (2);
	if ((h[1] & 0x7f) == 126)
		len += 2;
	else if ((h[1] & 0x7f) == 127)
		len += 8;
	if (h[1] & 0x80)
		len += 4;
	return (len);
}

/* A header is complete: decode and check it. */
static enum ws_event
ws_parse_header(struct wsparse *wp)
{
	const uint8_t *h = wp->wp_hdr;
	size_t i, pos = 2;
	uint64_t len = h[1] & 0x7f;

	wp->wp_hlen = 0;
	wp->wp_fin = (h[0] & 0x80) != 0;
	wp->wp_op = h[0] & 0x0f;
	wp->wp_masked = (h[1] & 0x80) != 0;
	if (len == 126) {
		len = (uint64_t)h[2] << 8 | h[3];
		pos = 4;
	} else if (len == 127) {
		for (len = 0, i = 2; i < 10; i++)
			len = len << 8 | h[i];
		pos = 10;
	}
	if (wp->wp_masked)
		memcpy(wp->wp_mask, h + pos, 4);
	wp->wp_len = len;
	wp->wp_off = 0;
	if (h[0] & 0x70)
		return (ws_parse_fail(
		    wp, WS_CLOSE_PROTOCOL_ERROR, "reserved bits set"));
	if (wp->wp_masked != wp->wp_server)
		return (ws_parse_fail(wp, WS_CLOSE_PROTOCOL_ERROR,
		    wp->wp_server ? "unmasked client frame"
				  : "masked server frame"));
	if (len >> 63)
		return (ws_parse_fail(
		    wp, WS_CLOSE_PROTOCOL_ERROR, "frame length over 2^63"));
	switch (wp->wp_op) {
	case WS_OP_TEXT:
	case WS_OP_BINARY:
		if (wp->wp_frag)
			return (ws_parse_fail(wp, WS_CLOSE_PROTOCOL_ERROR,
			    "new message inside a fragmented one"));
		wp->wp_msg_op = wp->wp_op;
		wp->wp_msglen = 0;
		wp->wp_frag = !wp->wp_fin;
		break;
	case WS_OP_CONT:
		if (!wp->wp_frag)
			return (ws_parse_fail(wp, WS_CLOSE_PROTOCOL_ERROR,
			    "continuation without a message"));
		wp->wp_frag = !wp->wp_fin;
		break;
	case WS_OP_CLOSE:
	case WS_OP_PING:
	case WS_OP_PONG:
		if (!wp->wp_fin || len > WS_CONTROL_MAX ||
		    (wp->wp_op == WS_OP_CLOSE && len == 1))
			return (ws_parse_fail(wp, WS_CLOSE_PROTOCOL_ERROR,
			    "malformed control frame"));
		break;
	default:
		return (ws_parse_fail(
		    wp, WS_CLOSE_PROTOCOL_ERROR, "unknown opcode"));
	}
	if (!(wp->wp_op & 0x08)) {
		if (len > wp->wp_max - wp->wp_msglen)
			return (ws_parse_fail(
			    wp, WS_CLOSE_TOO_BIG, "message too big"));
		wp->wp_msglen += len;
	}
	wp->wp_state = len == 0 ? WP_S_DONE : WP_S_PAYLOAD;
	return (WS_EV_HEADER);
}

/*
 * Parse frames from *p (*n bytes), advancing both, up to the next event.
 * WS_EV_DATA sets *data and *len to a piece of payload inside the input.
 */
enum ws_event
ws_parse(struct wsparse *wp, const uint8_t **p, size_t *n, const uint8_t **data,
    size_t *len)
{
	size_t k, need;

	for (;;) {
		switch (wp->wp_state) {
		case WP_S_ERROR:
			return (WS_EV_ERROR);
		case WP_S_DONE:
			wp->wp_state = WP_S_HEADER;
			return (WS_EV_END);
		case WP_S_HEADER:
			if (*n == 0)
				return (WS_EV_NEED);
			need = ws_header_len(wp->wp_hdr, wp->wp_hlen);
			k = need - wp->wp_hlen < *n ? need - wp->wp_hlen : *n;
			memcpy(wp->wp_hdr + wp->wp_hlen, *p, k);
			wp->wp_hlen += k;
			*p += k;
			*n -= k;
			if (wp->wp_hlen <
			    ws_header_len(wp->wp_hdr, wp->wp_hlen))
				break;
			return (ws_parse_header(wp));
		case WP_S_PAYLOAD:
			if (*n == 0)
				return (WS_EV_NEED);
			k = wp->wp_len - wp->wp_off < *n
			    ? (size_t)(wp->wp_len - wp->wp_off)
			    : *n;
			wp->wp_chunk_off = wp->wp_off;
			wp->wp_off += k;
			if (wp->wp_off == wp->wp_len)
				wp->wp_state = WP_S_DONE;
			if (wp->wp_op & 0x08) {
				/* Control payloads are kept, unmasked. */
				if (wp->wp_masked)
					ws_unmask(wp->wp_ctl + wp->wp_chunk_off,
					    *p, k, wp->wp_mask,
					    wp->wp_chunk_off);
				else
					memcpy(wp->wp_ctl + wp->wp_chunk_off,
					    *p, k);
				*p += k;
				*n -= k;
				break;
			}
			*data = *p;
			*len = k;
			*p += k;
			*n -= k;
			return (WS_EV_DATA);
		}
	}
}

/*
 * Write a frame header into out (WS_HEADER_MAX bytes) for a payload of
 * len bytes, masked with mask if it is not NULL; returns its length.
 */
size_t
ws_frame_header(
    uint8_t *out, int fin, uint8_t op, uint64_t len, const uint8_t *mask)
{
	size_t n = 2;
	int i;

	out[0] = (uint8_t)((fin ? 0x80 : 0) | (op & 0x0f));
	if (len < 126)
		out[1] = (uint8_t)len;
	else if (len <= 0xffff) {
		out[1] = 126;
		out[2] = (uint8_t)(len >> 8);
		out[3] = (uint8_t)len;
		n = 4;
	} else {
		out[1] = 127;
		for (i = 0; i < 8; i++)
			out[2 + i] = (uint8_t)(len >> (56 - 8 * i));
		n = 10;
	}
	if (mask != NULL) {
		out[1] |= 0x80;
		memcpy(out + n, mask, 4);
		n += 4;
	}
	return (n);
}

/*
 * XOR n bytes of src into dst with a 4-byte masking key, src starting at
 * offset off of its payload; dst may be src.  Eight bytes at a time.
 */
void
ws_unmask(uint8_t *dst, const uint8_t *src, size_t n, const uint8_t *key,
    uint64_t off)
{
	uint8_t k8[8];
	uint64_t m, v;
	size_t i;

	for (i = 0; i < 8; i++)
		k8[i] = key[(off + i) & 3];
	memcpy(&m, k8, sizeof m);
	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&v, src + i, sizeof v);
		v ^= m;
		memcpy(dst + i, &v, sizeof v);
	}
	for (; i < n; i++)
		dst[i] = src[i] ^ k8[i & 7];
}

/*
 * Append a whole frame to out.  With rng (clients) it is masked with a
 * fresh key: keys only have to be unpredictable to a page in a browser,
 * which a load generator does not run, so a fast generator will do.
 */
void
ws_frame_append(struct buf *out, int fin, uint8_t op, const uint8_t *p,
    size_t len, uint64_t *rng)
{
	uint8_t h[WS_HEADER_MAX], key[4];
	uint64_t r;

	if (rng == NULL) {
		buf_append(out, h, ws_frame_header(h, fin, op, len, NULL));
		buf_append(out, p, len);
		return;
	}
	r = rng_next(rng);
	memcpy(key, &r, sizeof key);
	buf_append(out, h, ws_frame_header(h, fin, op, len, key));
	buf_reserve(out, len);
	ws_unmask(out->b_data + out->b_len, p, len, key, 0);
	out->b_len += len;
}

/* Next number of a splitmix64 generator; seeds itself when *state is 0. */
uint64_t
rng_next(uint64_t *state)
{
	uint64_t z;

	if (*state == 0 &&
	    getrandom(state, sizeof *state, 0) != (ssize_t)sizeof *state)
		*state = (uint64_t)(uintptr_t)state ^ 0x9e3779b97f4a7c15ULL;
	z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return (z ^ (z >> 31));
}

/*
 * Check the answer to our upgrade request with key, p[0 .. n) being what
 * was read so far.  Returns 1 with *head set to the size of the head when
 * it accepts the upgrade (101, Upgrade websocket, Connection upgrade, the
 * right Sec-WebSocket-Accept, no extension), 0 when more bytes are
 * needed, -1 with *why set to a sentence the caller frees.
 */
int
ws_client_response(
    const uint8_t *p, size_t n, const char *key, size_t *head, char **why)
{
	const struct http_field *f;
	struct http_resp *r;
	char want[WS_ACCEPT_LEN + 1];
	const char *err = NULL;
	int ok;

	ok = http_head_end((const char *)p, n, head);
	if (ok == 0 && n <= BENCH_HEAD_MAX)
		return (0);
	if (ok != 1 || *head > BENCH_HEAD_MAX) {
		xasprintf(why, "bad or oversized upgrade response head");
		return (-1);
	}
	r = xmalloc(sizeof *r);
	if (http_parse_response((const char *)p, *head, r, &err) != 0)
		goto fail;
	err = "wrong or missing Sec-WebSocket-Accept";
	if (r->r_status != 101) {
		xasprintf(why, "upgrade answered with HTTP %d", r->r_status);
		free(r);
		return (-1);
	}
	f = http_resp_find(r, "upgrade");
	if (f == NULL ||
	    !http_list_has(f->f_value, f->f_valuelen, "websocket")) {
		err = "101 without Upgrade: websocket";
		goto fail;
	}
	f = http_resp_find(r, "connection");
	if (f == NULL || !http_list_has(f->f_value, f->f_valuelen, "upgrade")) {
		err = "101 without Connection: upgrade";
		goto fail;
	}
	f = http_resp_find(r, "sec-websocket-accept");
	if (ws_accept_key(key, want) != 0 || f == NULL ||
	    f->f_valuelen != WS_ACCEPT_LEN ||
	    memcmp(f->f_value, want, WS_ACCEPT_LEN) != 0)
		goto fail;
	if (http_resp_find(r, "sec-websocket-extensions") != NULL) {
		err = "the server chose an extension we did not offer";
		goto fail;
	}
	free(r);
	return (1);

fail:
	xasprintf(why, "upgrade response: %s", err);
	free(r);
	return (-1);
}

/* Bucket of a value. */
static size_t
hist_index(uint64_t v)
{
	int e;

	if (v < HIST_EXACT)
		return ((size_t)v);
	e = 63 - __builtin_clzll(v);
	if (e >= 9 + HIST_OCTAVES)
		return (HIST_BUCKETS - 1);
	return (HIST_EXACT + (size_t)(e - 9) * HIST_SUB +
	    (size_t)((v >> (e - 8)) - HIST_SUB));
}

/* Middle of a bucket's range. */
static uint64_t
hist_value(size_t i)
{
	size_t k, sub;
	int shift;

	if (i < HIST_EXACT)
		return (i);
	k = (i - HIST_EXACT) / HIST_SUB;
	sub = (i - HIST_EXACT) % HIST_SUB;
	shift = (int)k + 1;
	return (((uint64_t)(HIST_SUB + sub) << shift) +
	    (((uint64_t)1 << shift) >> 1));
}

/* Count one sample. */
void
hist_add(struct hist *h, uint64_t v)
{
	h->h_count[hist_index(v)]++;
	h->h_total++;
}

/* Add the samples of src to dst. */
void
hist_merge(struct hist *dst, const struct hist *src)
{
	size_t i;

	for (i = 0; i < HIST_BUCKETS; i++)
		dst->h_count[i] += src->h_count[i];
	dst->h_total += src->h_total;
}

/* The value at quantile q (0 < q <= 1); 0 without samples. */
uint64_t
hist_quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0;
	size_t i;

	if (h->h_total == 0)
		return (0);
	rank = (uint64_t)ceil(q * (double)h->h_total);
	if (rank < 1)
		rank = 1;
	for (i = 0; i < HIST_BUCKETS; i++) {
		seen += h->h_count[i];
		if (seen >= rank)
			return (hist_value(i));
	}
	return (hist_value(HIST_BUCKETS - 1));
}

/*
 * Parse the value s of option opt as a whole decimal number from min to
 * max.  Returns 0, or -1 with *cause set.
 */
int
opt_u64(const char *opt, const char *s, uint64_t min, uint64_t max,
    uint64_t *out, char **cause)
{
	uint64_t v = 0;
	const char *p;

	for (p = s; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			break;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (p == s || *p != '\0' || v < min || v > max) {
		xasprintf(cause,
		    "%s: '%s' is not a whole number from %llu to "
		    "%llu",
		    opt, s, (unsigned long long)min, (unsigned long long)max);
		return (-1);
	}
	*out = v;
	return (0);
}

/* Parse a duration in seconds (decimal, fraction allowed, over 0). */
int
opt_seconds(const char *opt, const char *s, double *out, char **cause)
{
	const char *p;
	char *end;
	double v;
	int dots = 0;

	for (p = s; *p != '\0'; p++) {
		if (*p == '.')
			dots++;
		else if (*p < '0' || *p > '9')
			break;
	}
	errno = 0;
	v = strtod(s, &end);
	if (p == s || *p != '\0' || dots > 1 || end != p || errno != 0 ||
	    !isfinite(v) || v <= 0 || v > 1e7) {
		xasprintf(cause, "%s: '%s' is not a number of seconds", opt, s);
		return (-1);
	}
	*out = v;
	return (0);
}

/*
 * Raise the soft file descriptor limit to the hard one; -1 with *cause
 * set if want descriptors still do not fit.
 */
int
nofile_raise(uint64_t want, char **cause)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
		xasprintf(cause, "getrlimit: %s", strerror(errno));
		return (-1);
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
			xasprintf(cause, "setrlimit: %s", strerror(errno));
			return (-1);
		}
	}
	if (rl.rlim_cur != RLIM_INFINITY && want > (uint64_t)rl.rlim_cur) {
		xasprintf(cause,
		    "%llu file descriptors are needed but RLIMIT_NOFILE is "
		    "%llu (raise the hard limit, e.g. ulimit -Hn)",
		    (unsigned long long)want, (unsigned long long)rl.rlim_cur);
		return (-1);
	}
	return (0);
}

/* Turn off Nagle: requests and echoes are small and latency counts. */
void
sock_nodelay(int fd)
{
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/*
 * Start a nonblocking connect.  Returns the socket (the connect may still
 * be in progress: wait for EPOLLOUT and check SO_ERROR), or -1 with *cause
 * set.
 */
int
sock_connect(const struct sockaddr *sa, socklen_t len, char **cause)
{
	int fd;

	fd = socket(
	    sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1) {
		xasprintf(cause, "socket: %s", strerror(errno));
		return (-1);
	}
	sock_nodelay(fd);
	if (connect(fd, sa, len) != 0 && errno != EINPROGRESS) {
		xasprintf(cause, "connect: %s", strerror(errno));
		close(fd);
		return (-1);
	}
	return (fd);
}
