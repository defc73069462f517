/*
 * The WebSocket opening handshake (RFC 6455 section 4) over our HTTP/1.1
 * parser: the server's checks of an upgrade request and its 101 answer,
 * the client's request and its checks of the answer.  The connection that
 * follows is wsconn.c's; both are declared in wsconn.h.
 */
#include <sys/types.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "alloc.h"
#include "http1.h"
#include "log.h"
#include "wsconn.h"

/* The GUID of RFC 6455 section 1.3. */
static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/* Is c a character of the base64 alphabet (padding excluded)? */
static int
ws_is_b64(int c)
{
	return ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	    (c >= '0' && c <= '9') || c == '+' || c == '/');
}

/* Is key 16 bytes in padded base64, i.e. 22 characters and "=="? */
static int
ws_key_valid(const char *key)
{
	size_t i;

	if (strlen(key) != WS_KEY_LEN)
		return (0);
	for (i = 0; i < WS_KEY_LEN - 2; i++) {
		if (!ws_is_b64((unsigned char)key[i]))
			return (0);
	}
	return (key[22] == '=' && key[23] == '=');
}

/* Compute the Sec-WebSocket-Accept value for client_key into out. */
int
ws_accept_key(const char *client_key, char out[WS_ACCEPT_LEN + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	EVP_MD_CTX *ctx;
	int ok;

	if ((ctx = EVP_MD_CTX_new()) == NULL)
		return (-1);
	ok = EVP_DigestInit_ex(ctx, EVP_sha1(), NULL) == 1 &&
	    EVP_DigestUpdate(ctx, client_key, strlen(client_key)) == 1 &&
	    EVP_DigestUpdate(ctx, ws_guid, sizeof ws_guid - 1) == 1 &&
	    EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen == 20;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return (-1);
	/* 20 bytes are 28 base64 characters; EVP_EncodeBlock adds the NUL. */
	if (EVP_EncodeBlock((unsigned char *)out, md, 20) != WS_ACCEPT_LEN)
		return (-1);
	return (0);
}

/* Put a fresh random Sec-WebSocket-Key into out. */
void
ws_random_key(char out[WS_KEY_LEN + 1])
{
	uint8_t raw[16];

	if (RAND_bytes(raw, sizeof raw) != 1) {
		log_error("wsconn: no random bytes for a WebSocket key");
		abort();
	}
	EVP_EncodeBlock((unsigned char *)out, raw, sizeof raw);
}

/* Set *why to a sentence for the caller and return -1. */
static int __attribute__((format(printf, 2, 3)))
ws_refuse(char **why, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	xvasprintf(why, fmt, ap);
	va_end(ap);
	return (-1);
}

/*
 * How many of the nf fields f are named name; *first gets the first
 * one.
 */
static size_t
ws_count(const struct hfield *f, size_t nf, const char *name,
    const struct hfield **first)
{
	size_t i, n = 0;

	*first = NULL;
	for (i = 0; i < nf; i++) {
		if (strcasecmp(f[i].name, name) != 0)
			continue;
		if (n++ == 0)
			*first = &f[i];
	}
	return (n);
}

/* Does any of the nf fields f named name list token (case-insensitive)? */
static int
ws_list_has(
    const struct hfield *f, size_t nf, const char *name, const char *token)
{
	size_t i;

	for (i = 0; i < nf; i++) {
		if (strcasecmp(f[i].name, name) == 0 &&
		    http1_list_has(f[i].value, f[i].value_len, token))
			return (1);
	}
	return (0);
}

/* Check that a request head asks for a WebSocket we can accept. */
int
ws_check_upgrade_request(
    const struct http1_msg *m, const char **key, char **why)
{
	const struct hfield *h;
	size_t n;

	*key = NULL;
	*why = NULL;
	if (m->m_method == NULL || strcmp(m->m_method, "GET") != 0)
		return (ws_refuse(why, "a WebSocket upgrade must use GET"));
	if (m->m_minor != 1)
		return (ws_refuse(why, "a WebSocket upgrade needs HTTP/1.1"));
	if (m->m_body != HTTP1_BODY_NONE)
		return (ws_refuse(
		    why, "a WebSocket upgrade request must not have a body"));
	if (!ws_list_has(m->m_headers, m->m_nheaders, "connection", "upgrade"))
		return (ws_refuse(why, "Connection does not list upgrade"));
	if (!ws_list_has(m->m_headers, m->m_nheaders, "upgrade", "websocket"))
		return (ws_refuse(why, "Upgrade does not list websocket"));

	n = ws_count(m->m_headers, m->m_nheaders, "sec-websocket-version", &h);
	if (n == 0)
		return (ws_refuse(why, "Sec-WebSocket-Version is missing"));
	if (n > 1)
		return (ws_refuse(
		    why, "Sec-WebSocket-Version appears more than once"));
	if (strcmp(h->value, "13") != 0)
		return (ws_refuse(why,
		    "Sec-WebSocket-Version %.16s is not supported (only 13)",
		    h->value));

	n = ws_count(m->m_headers, m->m_nheaders, "sec-websocket-key", &h);
	if (n == 0)
		return (ws_refuse(why, "Sec-WebSocket-Key is missing"));
	if (n > 1)
		return (
		    ws_refuse(why, "Sec-WebSocket-Key appears more than once"));
	if (!ws_key_valid(h->value))
		return (ws_refuse(
		    why, "Sec-WebSocket-Key is not 16 bytes in base64"));
	*key = h->value;
	return (0);
}

/* Append the 101 response that accepts an upgrade. */
void
ws_write_accept_response(
    struct evbuffer *out, const char *accept_key, const char *extra_headers)
{
	evbuffer_add_printf(out,
	    "HTTP/1.1 101 Switching Protocols\r\n"
	    "Upgrade: websocket\r\n"
	    "Connection: Upgrade\r\n"
	    "Sec-WebSocket-Accept: %s\r\n"
	    "%s\r\n",
	    accept_key, extra_headers != NULL ? extra_headers : "");
}

/* Is s non-empty and free of controls, spaces, DEL and non-ASCII? */
static int
ws_token_safe(const char *s)
{
	const unsigned char *p;

	if (*s == '\0')
		return (0);
	for (p = (const unsigned char *)s; *p != '\0'; p++) {
		if (*p <= 0x20 || *p >= 0x7f)
			return (0);
	}
	return (1);
}

/* Is s a "Name: value" line without CR, LF or other controls but tab? */
static int
ws_header_safe(const char *s)
{
	const unsigned char *p;
	const char *colon;

	if ((colon = strchr(s, ':')) == NULL || colon == s)
		return (0);
	for (p = (const unsigned char *)s; *p != '\0'; p++) {
		if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
			return (0);
		if ((const char *)p < colon && (*p == ' ' || *p == '\t'))
			return (0);
	}
	return (1);
}

/* Build the client's upgrade request; NULL if an input is unsafe. */
char *
ws_client_request(const char *host_header, const char *path, const char *key,
    const char *const *extra_headers)
{
	struct evbuffer *b;
	char *s;
	size_t i, len;

	if (!ws_token_safe(host_header) || !ws_token_safe(path) ||
	    path[0] != '/' || !ws_key_valid(key))
		return (NULL);
	for (i = 0; extra_headers != NULL && extra_headers[i] != NULL; i++) {
		if (!ws_header_safe(extra_headers[i]))
			return (NULL);
	}
	if ((b = evbuffer_new()) == NULL)
		return (NULL);
	evbuffer_add_printf(b,
	    "GET %s HTTP/1.1\r\n"
	    "Host: %s\r\n"
	    "Upgrade: websocket\r\n"
	    "Connection: Upgrade\r\n"
	    "Sec-WebSocket-Key: %s\r\n"
	    "Sec-WebSocket-Version: 13\r\n",
	    path, host_header, key);
	for (i = 0; extra_headers != NULL && extra_headers[i] != NULL; i++)
		evbuffer_add_printf(b, "%s\r\n", extra_headers[i]);
	evbuffer_add(b, "\r\n", 2);
	len = evbuffer_get_length(b);
	s = xmalloc(len + 1);
	evbuffer_remove(b, s, len);
	s[len] = '\0';
	evbuffer_free(b);
	return (s);
}

/*
 * Check that a response head (its status, its nf fields f) accepts the
 * upgrade asked for with key.  relayed: the request carried another
 * client's offers (a proxy), so the extension and subprotocol the server
 * chose are that client's to check.
 */
static int
ws_check_accept(int status, const struct hfield *f, size_t nf,
    const char *key, int relayed, char **why)
{
	const struct hfield *h;
	char want[WS_ACCEPT_LEN + 1];
	size_t n;

	*why = NULL;
	if (status != 101)
		return (ws_refuse(why,
		    "the server answered %d instead of 101 Switching Protocols",
		    status));
	if (!ws_list_has(f, nf, "upgrade", "websocket"))
		return (ws_refuse(why,
		    "the 101 response has no Upgrade: "
		    "websocket"));
	if (!ws_list_has(f, nf, "connection", "upgrade"))
		return (ws_refuse(why,
		    "the 101 response has no Connection: "
		    "upgrade"));
	n = ws_count(f, nf, "sec-websocket-accept", &h);
	if (n == 0)
		return (ws_refuse(why, "Sec-WebSocket-Accept is missing"));
	if (n > 1)
		return (ws_refuse(
		    why, "Sec-WebSocket-Accept appears more than once"));
	if (ws_accept_key(key, want) != 0)
		return (ws_refuse(why, "cannot compute Sec-WebSocket-Accept"));
	if (strcmp(h->value, want) != 0)
		return (ws_refuse(
		    why, "Sec-WebSocket-Accept does not match our key"));
	if (relayed)
		return (0);
	if (ws_count(f, nf, "sec-websocket-extensions", &h) != 0)
		return (ws_refuse(why,
		    "the server chose a WebSocket extension we did not offer"));
	if (ws_count(f, nf, "sec-websocket-protocol", &h) != 0)
		return (ws_refuse(
		    why, "the server chose a subprotocol we did not offer"));
	return (0);
}

/* Check that a response head accepts the upgrade we asked for with key. */
int
ws_check_accept_response(const struct http1_msg *m, const char *key, char **why)
{
	return (ws_check_accept(
	    m->m_status, m->m_headers, m->m_nheaders, key, 0, why));
}

/*
 * The same for a head (struct head) answering a request that passed on
 * another client's offers: any extension or subprotocol the server chose
 * is that client's to check.
 */
int
ws_check_accept_relayed(const struct head *h, const char *key, char **why)
{
	return (ws_check_accept(
	    h->h_status, h->h_fields, h->h_nfields, key, 1, why));
}
