/* A growable byte buffer for message heads; see strbuf.h. */
#include "strbuf.h"

#include <stdlib.h>

#include "alloc.h"

/* Make room for n more bytes: at least double, at least 1 KiB. */
void
strbuf_grow(struct strbuf *sb, size_t n)
{
	size_t cap = sb->sb_cap < 1024 ? 1024 : sb->sb_cap;

	while (cap - sb->sb_len < n)
		cap *= 2;
	sb->sb_buf = xrealloc(sb->sb_buf, cap);
	sb->sb_cap = cap;
}

void
strbuf_free(struct strbuf *sb)
{
	free(sb->sb_buf);
	sb->sb_buf = NULL;
	sb->sb_len = sb->sb_cap = 0;
}

/* Write v in decimal to out (20 bytes are enough); return the length. */
size_t
fmt_u64(char *out, uint64_t v)
{
	char tmp[20];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	for (i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return (n);
}

/* Write v in lowercase hex, no leading zeros (16 bytes are enough). */
size_t
fmt_hex(char *out, uint64_t v)
{
	static const char digits[] = "0123456789abcdef";
	char tmp[16];
	size_t n = 0, i;

	do {
		tmp[n++] = digits[v & 0xf];
		v >>= 4;
	} while (v != 0);
	for (i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return (n);
}

void
strbuf_add_u64(struct strbuf *sb, uint64_t v)
{
	char tmp[20];

	strbuf_add(sb, tmp, fmt_u64(tmp, v));
}

void
strbuf_add_hex(struct strbuf *sb, uint64_t v)
{
	char tmp[16];

	strbuf_add(sb, tmp, fmt_hex(tmp, v));
}

/* Append "name: value\r\n". */
void
strbuf_add_header(struct strbuf *sb, const char *name, size_t nlen,
    const char *value, size_t vlen)
{
	if (sb->sb_cap - sb->sb_len < nlen + vlen + 4)
		strbuf_grow(sb, nlen + vlen + 4);
	memcpy(sb->sb_buf + sb->sb_len, name, nlen);
	sb->sb_len += nlen;
	sb->sb_buf[sb->sb_len++] = ':';
	sb->sb_buf[sb->sb_len++] = ' ';
	memcpy(sb->sb_buf + sb->sb_len, value, vlen);
	sb->sb_len += vlen;
	sb->sb_buf[sb->sb_len++] = '\r';
	sb->sb_buf[sb->sb_len++] = '\n';
}
