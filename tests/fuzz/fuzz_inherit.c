/*
 * libFuzzer harness for AKGW_INHERIT, what an upgrading process tells the
 * new one about the sockets it passes (gateway/upgrade.c).  Every item
 * taken must be exactly what a writer of "fd kind[ key]" would have
 * written, and a tunnel key built from any name and place must keep its
 * three parts apart.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gw.h"

#define FUZZ_ASSERT(c) fuzz_assert((c) != 0, #c, __LINE__)

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

/* Abort, naming the condition, unless ok. */
static void
fuzz_assert(int ok, const char *what, int line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_inherit.c:%d: %s\n", line, what);
	abort();
}

/* One item: taken ones must print back to themselves. */
static void
fuzz_item(const char *item)
{
	const char *key;
	char kind, *again;
	int fd;

	if (upgrade_parse_item(item, &fd, &kind, &key) != 0)
		return;
	FUZZ_ASSERT(fd >= 3);
	FUZZ_ASSERT(kind == 'L' || kind == 'A' || kind == 'T');
	FUZZ_ASSERT((kind == 'T') == (key != NULL));
	if (key != NULL)
		xasprintf(&again, "%d %c %s", fd, kind, key);
	else
		xasprintf(&again, "%d %c", fd, kind);
	FUZZ_ASSERT(strcmp(again, item) == 0);
	free(again);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s, *item, *save = NULL, *name, *place, *key, *sp;
	size_t n;

	s = xstrndup((const char *)data, size);
	/* As the environment variable: items split at ';'. */
	for (item = strtok_r(s, ";", &save); item != NULL;
	     item = strtok_r(NULL, ";", &save))
		fuzz_item(item);
	free(s);

	/* A tunnel key from a name and a place split at the first NUL. */
	name = xstrndup((const char *)data, size);
	n = strlen(name);
	place = n < size ? xstrndup((const char *)data + n + 1, size - n - 1)
			 : xstrdup("");
	key = upgrade_tunnel_key(name, 8766, place);
	FUZZ_ASSERT(strchr(key, ';') == NULL);
	FUZZ_ASSERT((sp = strchr(key, ' ')) != NULL);
	FUZZ_ASSERT((sp = strchr(sp + 1, ' ')) != NULL);
	FUZZ_ASSERT(strchr(sp + 1, ' ') == NULL);
	FUZZ_ASSERT(strncmp(key, "8766 ", 5) == 0);
	xasprintf(&s, "3 T %s", key);
	fuzz_item(s);
	free(s);
	free(key);
	free(name);
	free(place);
	return (0);
}
