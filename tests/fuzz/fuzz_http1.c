/*
 * libFuzzer harness for lib/http1.c.  Every input is parsed as a request
 * head, a response head and a chunked body, once in one piece, once split
 * at a point derived from the data and, for small inputs, one byte at a
 * time; the body both discarding its trailer fields and keeping them.
 * The results must agree, satisfy the documented invariants and leave
 * nothing allocated.
 */
#include <sys/types.h>

#include <event2/buffer.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http1.h"
#include "head.h"

/* Abort with the failed condition, so libFuzzer saves the input. */
#define FUZZ_ASSERT(c) fuzz_assert((c) != 0, #c, __LINE__)

/* Small limits so the 431 paths are reached. */
static const struct http1_limits fuzz_limits = {
	.max_head = 2048,
	.max_line = 512,
	.max_headers = 24,
};

/* Outcome of parsing one head. */
struct fuzz_head {
	struct http1_msg msg;
	enum http1_err err;
	int rv;
	size_t left;
};

/* Outcome of decoding one chunked body. */
struct fuzz_body {
	struct evbuffer *out;
	enum http1_err err;
	int rv;
	size_t left;
	int keep; /* trailer fields kept in tr */
	struct http1_trailers tr;
};

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Abort, naming the condition, unless ok. */
static void
fuzz_assert(int ok, const char *what, int line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_http1.c:%d: %s\n", line, what);
	abort();
}

/* Does p point into the size bytes at buf? */
static int
fuzz_inside(const char *p, const char *buf, size_t size)
{
	return (p >= buf && p < buf + size);
}

/* Check what a parse returned against the header's contract. */
static void
fuzz_check_head(const struct fuzz_head *h, size_t size, int request)
{
	const struct http1_msg *m = &h->msg;
	const struct hfield *hd;
	size_t i;

	FUZZ_ASSERT(h->rv >= -1 && h->rv <= 1);
	if (h->rv != -1)
		FUZZ_ASSERT(h->err == HTTP1_E_NONE);
	if (h->rv == -1) {
		FUZZ_ASSERT(h->err > HTTP1_E_NONE && h->err < HTTP1_E__COUNT);
		FUZZ_ASSERT(http1_err_status(h->err) >= 400);
		FUZZ_ASSERT(http1_err_code(h->err) != NULL);
		FUZZ_ASSERT(http1_err_message(h->err) != NULL);
		FUZZ_ASSERT(m->m_buf == NULL && m->m_headers == NULL);
		FUZZ_ASSERT(h->left == size);
		return;
	}
	if (h->rv == 0) {
		FUZZ_ASSERT(h->left == size);
		FUZZ_ASSERT(size <= fuzz_limits.max_head);
		FUZZ_ASSERT(m->m_buf == NULL);
		return;
	}

	FUZZ_ASSERT(m->m_head_len >= 4 && m->m_head_len <= size);
	FUZZ_ASSERT(m->m_head_len <= fuzz_limits.max_head);
	FUZZ_ASSERT(h->left == size - m->m_head_len);
	FUZZ_ASSERT(m->m_buf != NULL);
	FUZZ_ASSERT(m->m_minor == 0 || m->m_minor == 1);
	FUZZ_ASSERT(m->m_nheaders <= fuzz_limits.max_headers);
	FUZZ_ASSERT(m->m_nheaders == 0 || m->m_headers != NULL);
	if (request) {
		FUZZ_ASSERT(fuzz_inside(m->m_method, m->m_buf, m->m_head_len));
		FUZZ_ASSERT(fuzz_inside(m->m_target, m->m_buf, m->m_head_len));
		FUZZ_ASSERT(strlen(m->m_method) == m->m_method_len);
		FUZZ_ASSERT(strlen(m->m_target) == m->m_target_len);
		FUZZ_ASSERT(m->m_method_len > 0 && m->m_target_len > 0);
		FUZZ_ASSERT(m->m_body != HTTP1_BODY_EOF);
		FUZZ_ASSERT(m->m_reason == NULL);
	} else {
		FUZZ_ASSERT(m->m_status >= 100 && m->m_status <= 599);
		FUZZ_ASSERT(fuzz_inside(m->m_reason, m->m_buf, m->m_head_len));
		FUZZ_ASSERT(m->m_method == NULL && m->m_target == NULL);
	}
	for (i = 0; i < m->m_nheaders; i++) {
		hd = &m->m_headers[i];
		FUZZ_ASSERT(fuzz_inside(hd->name, m->m_buf, m->m_head_len));
		FUZZ_ASSERT(fuzz_inside(hd->value, m->m_buf, m->m_head_len));
		FUZZ_ASSERT(hd->name_len > 0);
		FUZZ_ASSERT(strlen(hd->name) == hd->name_len);
		FUZZ_ASSERT(strlen(hd->value) == hd->value_len);
		FUZZ_ASSERT(http1_msg_find(m, hd->name) != NULL);
		(void)http1_list_has(hd->value, hd->value_len, "close");
	}
	/* Framing: only the kinds the header lists, consistent with fields. */
	if (m->m_body == HTTP1_BODY_NONE)
		FUZZ_ASSERT(m->m_content_length == 0);
	else if (m->m_body == HTTP1_BODY_LENGTH) {
		FUZZ_ASSERT(m->m_content_length > 0);
		FUZZ_ASSERT(m->m_content_length <= (uint64_t)1 << 62);
	} else if (m->m_body == HTTP1_BODY_CHUNKED)
		FUZZ_ASSERT(http1_msg_find(m, "transfer-encoding") != NULL);
	else
		FUZZ_ASSERT(m->m_body == HTTP1_BODY_EOF && !request);
	if (request && m->m_minor == 1)
		FUZZ_ASSERT(http1_msg_find(m, "host") != NULL);
}

/* Two results of parsing the same bytes must be identical. */
static void
fuzz_same_head(const struct fuzz_head *a, const struct fuzz_head *b)
{
	const struct http1_msg *x = &a->msg, *y = &b->msg;
	size_t i;

	FUZZ_ASSERT(a->rv == b->rv);
	FUZZ_ASSERT(a->err == b->err);
	FUZZ_ASSERT(a->left == b->left);
	if (a->rv != 1)
		return;
	FUZZ_ASSERT(x->m_head_len == y->m_head_len);
	FUZZ_ASSERT(memcmp(x->m_buf, y->m_buf, x->m_head_len) == 0);
	FUZZ_ASSERT(x->m_status == y->m_status);
	FUZZ_ASSERT(x->m_minor == y->m_minor);
	FUZZ_ASSERT(x->m_body == y->m_body);
	FUZZ_ASSERT(x->m_content_length == y->m_content_length);
	FUZZ_ASSERT(x->m_flags == y->m_flags);
	FUZZ_ASSERT(x->m_nheaders == y->m_nheaders);
	for (i = 0; i < x->m_nheaders; i++) {
		FUZZ_ASSERT(x->m_headers[i].name - x->m_buf ==
		    y->m_headers[i].name - y->m_buf);
		FUZZ_ASSERT(
		    x->m_headers[i].value_len == y->m_headers[i].value_len);
	}
}

/*
 * Parse a head from data, adding first bytes then step bytes at a time
 * and calling the parser after each addition.  Leaves the rest of the
 * input in *inp when inp is not NULL.
 */
static void
fuzz_head(struct fuzz_head *h, const uint8_t *data, size_t size, size_t first,
    size_t step, int request, int head_request, struct evbuffer **inp)
{
	struct evbuffer *in;
	size_t fed, n;

	memset(h, 0, sizeof *h);
	in = evbuffer_new();
	FUZZ_ASSERT(in != NULL);
	fed = 0;
	n = first;
	for (;;) {
		if (n > size - fed)
			n = size - fed;
		/* One chain per piece, so scans cross chain ends. */
		if (n != 0)
			evbuffer_add_reference(in, data + fed, n, NULL, NULL);
		fed += n;
		if (request)
			h->rv = http1_parse_request(
			    in, &fuzz_limits, &h->msg, &h->err);
		else
			h->rv = http1_parse_response(
			    in, &fuzz_limits, head_request, &h->msg, &h->err);
		if (h->rv != 0 || fed == size)
			break;
		FUZZ_ASSERT(evbuffer_get_length(in) == fed);
		n = step;
	}
	/* What was never fed counts as left in the input too. */
	if (fed < size)
		evbuffer_add(in, data + fed, size - fed);
	h->left = evbuffer_get_length(in);
	if (inp != NULL)
		*inp = in;
	else
		evbuffer_free(in);
}

/*
 * Kept trailer fields: within the bounds, cut in tr_buf, none of them a
 * forbidden name.
 */
static void
fuzz_check_trailers(const struct http1_trailers *t)
{
	const struct hfield *f;
	size_t i;

	FUZZ_ASSERT(t->tr_len <= HTTP1_MAX_TRAILER);
	FUZZ_ASSERT(t->tr_nfields <= HTTP1_MAX_TRAILER_FIELDS);
	FUZZ_ASSERT((t->tr_nfields == 0) == (t->tr_fields == NULL));
	for (i = 0; i < t->tr_nfields; i++) {
		f = &t->tr_fields[i];
		FUZZ_ASSERT(fuzz_inside(f->name, t->tr_buf, t->tr_len));
		FUZZ_ASSERT(fuzz_inside(f->value, t->tr_buf, t->tr_len));
		FUZZ_ASSERT(f->name_len > 0 && strlen(f->name) == f->name_len);
		FUZZ_ASSERT(strlen(f->value) == f->value_len);
		FUZZ_ASSERT(!http1_trailer_forbidden(f->name, f->name_len));
	}
}

/*
 * Decode a chunked body from data, adding first bytes then step bytes at a
 * time, moving at most max data bytes per call; keep: keeping its trailer
 * fields in b->tr.
 */
static void
fuzz_body(struct fuzz_body *b, const uint8_t *data, size_t size, size_t first,
    size_t step, size_t max, int keep)
{
	struct http1_chunked ck;
	struct evbuffer *in;
	size_t fed, n, moved, before, out_before;

	memset(b, 0, sizeof *b);
	memset(&ck, 0, sizeof ck);
	b->keep = keep;
	if (keep)
		ck.ck_keep = &b->tr;
	in = evbuffer_new();
	b->out = evbuffer_new();
	FUZZ_ASSERT(in != NULL && b->out != NULL);
	fed = 0;
	n = first;
	for (;;) {
		before = evbuffer_get_length(in);
		out_before = evbuffer_get_length(b->out);
		b->rv = http1_chunked_decode(
		    &ck, in, b->out, max, &moved, &b->err);
		FUZZ_ASSERT(b->rv >= -1 && b->rv <= 1);
		FUZZ_ASSERT(moved <= max);
		FUZZ_ASSERT(evbuffer_get_length(b->out) == out_before + moved);
		if (b->rv == -1) {
			FUZZ_ASSERT(b->err == HTTP1_E_BAD_CHUNK_SIZE ||
			    b->err == HTTP1_E_CHUNK_TOO_LARGE ||
			    b->err == HTTP1_E_BAD_CHUNK ||
			    b->err == HTTP1_E_BAD_TRAILER);
			break;
		}
		FUZZ_ASSERT(b->err == HTTP1_E_NONE);
		if (b->rv == 1) {
			fuzz_check_trailers(&b->tr);
			break;
		}
		if (moved != 0 || evbuffer_get_length(in) != before)
			continue;
		if (fed == size)
			break;
		if (n > size - fed)
			n = size - fed;
		if (n != 0)
			evbuffer_add_reference(in, data + fed, n, NULL, NULL);
		fed += n;
		n = step;
	}
	b->left = evbuffer_get_length(in) + (size - fed);
	if (!keep)
		FUZZ_ASSERT(b->tr.tr_buf == NULL && b->tr.tr_nfields == 0);
	evbuffer_free(in);
}

/* Free what a decode left. */
static void
fuzz_body_free(struct fuzz_body *b)
{
	evbuffer_free(b->out);
	http1_trailers_reset(&b->tr);
	FUZZ_ASSERT(b->tr.tr_buf == NULL && b->tr.tr_fields == NULL);
}

/* Two decodes of the same bytes must give the same data and result. */
static void
fuzz_same_body(struct fuzz_body *a, struct fuzz_body *b)
{
	size_t len;

	size_t i;

	FUZZ_ASSERT(a->rv == b->rv);
	FUZZ_ASSERT(a->err == b->err);
	FUZZ_ASSERT(a->left == b->left);
	len = evbuffer_get_length(a->out);
	FUZZ_ASSERT(len == evbuffer_get_length(b->out));
	if (len != 0)
		FUZZ_ASSERT(memcmp(evbuffer_pullup(a->out, len),
				evbuffer_pullup(b->out, len), len) == 0);
	if (a->rv != 1 || !a->keep || !b->keep)
		return;
	FUZZ_ASSERT(a->tr.tr_nfields == b->tr.tr_nfields);
	for (i = 0; i < a->tr.tr_nfields; i++) {
		FUZZ_ASSERT(strcmp(a->tr.tr_fields[i].name,
				b->tr.tr_fields[i].name) == 0);
		FUZZ_ASSERT(strcmp(a->tr.tr_fields[i].value,
				b->tr.tr_fields[i].value) == 0);
	}
}

/*
 * Keeping trailers changes nothing but the field count cap: k (kept) and
 * d (discarded) agree, or k stopped at its trailers.
 */
static void
fuzz_keep_agrees(struct fuzz_body *k, struct fuzz_body *d)
{
	if (k->rv == -1 && k->err == HTTP1_E_BAD_TRAILER && d->rv != -1) {
		FUZZ_ASSERT(
		    evbuffer_get_length(k->out) == evbuffer_get_length(d->out));
		return;
	}
	fuzz_same_body(k, d);
}

/* Parse data as a head both ways and, if chunked, decode the body. */
static void
fuzz_one_head(const uint8_t *data, size_t size, size_t split, int request,
    int head_request)
{
	struct fuzz_head whole, part, bytes;
	struct fuzz_body body;
	struct http1_chunked ck;
	struct evbuffer *in, *out;
	enum http1_err err;
	size_t moved;

	fuzz_head(&whole, data, size, size, size, request, head_request, &in);
	fuzz_check_head(&whole, size, request);

	fuzz_head(&part, data, size, split, size, request, head_request, NULL);
	fuzz_check_head(&part, size, request);
	fuzz_same_head(&whole, &part);
	http1_msg_reset(&part.msg);

	if (size <= 1024) {
		fuzz_head(
		    &bytes, data, size, 1, 1, request, head_request, NULL);
		fuzz_check_head(&bytes, size, request);
		fuzz_same_head(&whole, &bytes);
		http1_msg_reset(&bytes.msg);
	}

	/* Decode the body of a chunked message from what follows. */
	if (whole.rv == 1 && whole.msg.m_body == HTTP1_BODY_CHUNKED) {
		memset(&ck, 0, sizeof ck);
		out = evbuffer_new();
		FUZZ_ASSERT(out != NULL);
		if (http1_chunked_decode(
			&ck, in, out, SIZE_MAX, &moved, &err) == -1)
			FUZZ_ASSERT(err != HTTP1_E_NONE);
		FUZZ_ASSERT(evbuffer_get_length(out) == moved);
		evbuffer_free(out);

		fuzz_body(&body, data + whole.msg.m_head_len,
		    size - whole.msg.m_head_len, split % 7 + 1, 3, 5, 1);
		fuzz_body_free(&body);
	}
	http1_msg_reset(&whole.msg);
	FUZZ_ASSERT(whole.msg.m_buf == NULL && whole.msg.m_headers == NULL);
	evbuffer_free(in);
}

/* Entry point: every input goes through every parser. */
int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_body whole, part, bytes, kept;
	uint32_t hash;
	size_t i, split, max;

	/* A cheap hash picks the split point and the per-call limit. */
	hash = 2166136261u;
	for (i = 0; i < size; i++)
		hash = (hash ^ data[i]) * 16777619u;
	split = size == 0 ? 0 : hash % (size + 1);
	max = (hash >> 16) % 64;

	fuzz_one_head(data, size, split, 1, 0);
	fuzz_one_head(data, size, split, 0, hash & 1);

	fuzz_body(&whole, data, size, size, size, SIZE_MAX, 0);
	fuzz_body(&part, data, size, split, size, max + 1, 0);
	fuzz_same_body(&whole, &part);
	fuzz_body_free(&part);
	/* Kept trailers: the same, whole or cut at split. */
	fuzz_body(&kept, data, size, size, size, SIZE_MAX, 1);
	fuzz_keep_agrees(&kept, &whole);
	fuzz_body(&part, data, size, split, size, max + 1, 1);
	fuzz_same_body(&kept, &part);
	fuzz_body_free(&part);
	if (size <= 1024) {
		fuzz_body(&bytes, data, size, 1, 1, max, hash & 2);
		/* max may be 0: then no data moves, but framing must agree. */
		if (max != 0)
			fuzz_same_body(bytes.keep ? &kept : &whole, &bytes);
		fuzz_body_free(&bytes);
	}
	fuzz_body_free(&kept);
	fuzz_body_free(&whole);
	return (0);
}
