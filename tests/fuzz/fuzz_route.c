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
	static const enum route_host_format formats[] = { ROUTE_HF_AUTO,
		ROUTE_HF_ID_PORT };
	struct route_host rh;
	char *text, *safe;
	enum route_result r;
	size_t i;

	r = route_parse_host(
	    (const char *)data, size, domains, formats, 2, &rh);
	if (r == ROUTE_OK) {
		if (rh.rh_n < 1 || rh.rh_n > 2)
			abort();
		for (i = 0; i < rh.rh_n; i++) {
			if (rh.rh_id[i] == NULL || *rh.rh_id[i] == '\0' ||
			    rh.rh_port[i] < 1 || rh.rh_port[i] > 65535 ||
			    strlen(rh.rh_id[i]) >= size)
				abort();
		}
		route_host_clear(&rh);
	} else if (rh.rh_n != 0)
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
