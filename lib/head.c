/*
 * Message heads independent of their wire form; see head.h.
 */
#include <string.h>
#include <strings.h>

#include "head.h"

/* First field named name (case-insensitive) among n fields, or NULL. */
const struct hfield *
hfield_find(const struct hfield *f, size_t n, const char *name)
{
	size_t i, len;

	len = strlen(name);
	for (i = 0; i < n; i++) {
		if (f[i].name_len == len &&
		    strncasecmp(f[i].name, name, len) == 0)
			return (&f[i]);
	}
	return (NULL);
}

/* First field of h named name (case-insensitive), or NULL. */
const struct hfield *
head_find(const struct head *h, const char *name)
{
	return (hfield_find(h->h_fields, h->h_nfields, name));
}

/* Is h's method m (exact, as methods are case-sensitive)? */
int
head_method_is(const struct head *h, const char *m)
{
	size_t len = strlen(m);

	return (h->h_method != NULL && h->h_method_len == len &&
	    memcmp(h->h_method, m, len) == 0);
}
