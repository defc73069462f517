/*
 * Message heads as the gateway's core reads them, whatever protocol
 * carried them: routing, auth, the upstream head rewrite, error pages and
 * the access log take a struct head, never HTTP/1 wire bytes.  HTTP/1's
 * parser gives one for each message it parses (http1_msg_head); HTTP/2's
 * header callbacks fill one from pseudo-header fields.
 */
#ifndef AK_HEAD_H
#define AK_HEAD_H

#include <stddef.h>
#include <stdint.h>

/* One header field, NUL-terminated name and value (value without OWS). */
struct hfield {
	const char *name;
	size_t name_len;
	const char *value;
	size_t value_len;
};

/*
 * A request or response head.  Every pointer points into storage its
 * maker keeps (the parser's copy of the head, an h2 stream's fields) for
 * as long as the head is used.
 */
struct head {
	const char *h_method; /* request: "GET"; NULL in a response */
	size_t h_method_len;
	const char *h_target; /* request: as sent (origin-, absolute-form...) */
	size_t h_target_len;
	const char *h_authority; /* request: Host or :authority, or NULL */
	size_t h_authority_len;
	const char *h_protocol; /* extended CONNECT's :protocol, or NULL */
	int h_status; /* response: 100..999; 0 in a request */
	const char
	    *h_reason; /* response: HTTP/1's phrase, or NULL: registered */
	int h_version; /* 10 HTTP/1.0, 11 HTTP/1.1, 20 HTTP/2 */
	const struct hfield *h_fields;
	size_t h_nfields;
	uint64_t h_length; /* with HEAD_F_LENGTH: the body's length */
	int h_flags;
#define HEAD_F_LENGTH 0x01 /* the body's length is known: h_length */
#define HEAD_F_CLOSE 0x02 /* the sender closes after this message */
#define HEAD_F_UPGRADE 0x04 /* asks for (or grants) a protocol switch */
#define HEAD_F_CONTINUE 0x08 /* request: Expect: 100-continue */
#define HEAD_F_NO_BODY 0x10 /* no body follows (HEAD's answer, 204, 304) */
#define HEAD_F_BODY_NOW 0x20 /* response: all of a small body follows at once */
};

/* First field named name (case-insensitive) among n fields, or NULL. */
const struct hfield *
hfield_find(const struct hfield *, size_t n, const char *name);
/* First field of h named name (case-insensitive), or NULL. */
const struct hfield *head_find(const struct head *, const char *name);
/* Is h's method m (exact, as methods are case-sensitive)? */
int head_method_is(const struct head *, const char *m);

#endif
