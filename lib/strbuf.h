/*
 * A growable byte buffer for building message heads without printf: the
 * hot path appends names, values and numbers, then hands the bytes to an
 * evbuffer in one piece.
 */
#ifndef AK_STRBUF_H
#define AK_STRBUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct strbuf {
	char *sb_buf;
	size_t sb_len;
	size_t sb_cap;
};

void strbuf_grow(struct strbuf *, size_t);
void strbuf_free(struct strbuf *);
void strbuf_add_u64(struct strbuf *, uint64_t);
void strbuf_add_hex(struct strbuf *, uint64_t);
void
strbuf_add_header(struct strbuf *, const char *, size_t, const char *, size_t);
size_t fmt_hex(char *, uint64_t);
size_t fmt_u64(char *, uint64_t);

static inline void
strbuf_reset(struct strbuf *sb)
{
	sb->sb_len = 0;
}

static inline void
strbuf_add(struct strbuf *sb, const void *p, size_t n)
{
	if (sb->sb_cap - sb->sb_len < n)
		strbuf_grow(sb, n);
	memcpy(sb->sb_buf + sb->sb_len, p, n);
	sb->sb_len += n;
}

/* The value of the hex digit c, or -1. */
static inline int
hex_value(int c)
{
	if (c >= '0' && c <= '9')
		return (c - '0');
	if (c >= 'a' && c <= 'f')
		return (c - 'a' + 10);
	if (c >= 'A' && c <= 'F')
		return (c - 'A' + 10);
	return (-1);
}

/* Append a C string. */
static inline void
strbuf_adds(struct strbuf *sb, const char *s)
{
	strbuf_add(sb, s, strlen(s));
}

#endif
