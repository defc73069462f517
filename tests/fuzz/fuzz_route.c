/*
 * libFuzzer harness for the host-form route parser and the safe-id rule:
 * results must be consistent with the input, and nothing leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gw.h"
#include "safeid.h"

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char d1[] = "localhost", d2[] = "gw.example.com";
	char *domains[] = { d1, d2 };
	char *id = NULL, *text, *safe;
	int port = 0;
	enum route_result r;
	size_t i;

	r = route_parse_host((const char *)data, size, domains, 2, &port, &id);
	if (r == ROUTE_OK) {
		if (id == NULL || *id == '\0' || port < 1 || port > 65535 ||
		    strlen(id) >= size)
			abort();
		free(id);
	} else if (id != NULL)
		abort();

	text = xmalloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0';
	safe = safeid_make(text);
	if (strlen(safe) > SAFEID_MAX)
		abort();
	for (i = 0; safe[i] != '\0'; i++) {
		if (safe[i] == '@' || safe[i] == '/' || safe[i] == '.' ||
		    safe[i] == '_')
			abort();
	}
	free(safe);
	free(text);
	return (0);
}
