/* Allocation helpers: every failure is fatal, so callers never check. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

static void __attribute__((noreturn)) alloc_fatal(const char *what, size_t size)
{
	fprintf(stderr, "fatal: %s of %zu bytes failed\n", what, size);
	abort();
}

/* Allocate size bytes; size 0 is refused as a bug. */
void *
xmalloc(size_t size)
{
	void *p;

	if (size == 0)
		alloc_fatal("xmalloc (zero size)", size);
	if ((p = malloc(size)) == NULL)
		alloc_fatal("xmalloc", size);
	return (p);
}

/* Allocate a zeroed array of n items of size bytes. */
void *
xcalloc(size_t n, size_t size)
{
	void *p;

	if (n == 0 || size == 0)
		alloc_fatal("xcalloc (zero size)", 0);
	if ((p = calloc(n, size)) == NULL)
		alloc_fatal("xcalloc", n * size);
	return (p);
}

/* Resize p to size bytes. */
void *
xrealloc(void *p, size_t size)
{
	return (xreallocarray(p, 1, size));
}

/* Resize p to n items of size bytes, checking the product for overflow. */
void *
xreallocarray(void *p, size_t n, size_t size)
{
	void *np;

	if (n == 0 || size == 0)
		alloc_fatal("xreallocarray (zero size)", 0);
	if (SIZE_MAX / n < size)
		alloc_fatal("xreallocarray (overflow)", SIZE_MAX);
	if ((np = realloc(p, n * size)) == NULL)
		alloc_fatal("xreallocarray", n * size);
	return (np);
}

/* Copy a string. */
char *
xstrdup(const char *s)
{
	char *p;

	if ((p = strdup(s)) == NULL)
		alloc_fatal("xstrdup", strlen(s) + 1);
	return (p);
}

/* Copy at most n bytes of a string and terminate it. */
char *
xstrndup(const char *s, size_t n)
{
	char *p;

	if ((p = strndup(s, n)) == NULL)
		alloc_fatal("xstrndup", n + 1);
	return (p);
}

/* A copy of s without leading and trailing white space. */
char *
xstrtrim(const char *s)
{
	size_t len;

	while (isspace((unsigned char)*s))
		s++;
	len = strlen(s);
	while (len > 0 && isspace((unsigned char)s[len - 1]))
		len--;
	return (xstrndup(s, len));
}

/* Format into a new string; returns its length. */
int
xvasprintf(char **ret, const char *fmt, va_list ap)
{
	int n;

	n = vasprintf(ret, fmt, ap);
	if (n == -1)
		alloc_fatal("xvasprintf", 0);
	return (n);
}

/* Format into a new string; returns its length. */
int
xasprintf(char **ret, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = xvasprintf(ret, fmt, ap);
	va_end(ap);
	return (n);
}
