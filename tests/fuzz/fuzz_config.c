/*
 * libFuzzer harness for the configuration loader: any input either loads
 * or is refused with a "name:line:column: " message; nothing leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gw.h"

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gw_config *cf;
	char *text, *cause = NULL;

	if (size > 65536)
		return (0);
	text = xmalloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0';
	cf = conf_load_string("f.yaml", text, &cause);
	if (cf == NULL) {
		if (cause == NULL || strncmp(cause, "f.yaml:", 7) != 0)
			abort();
		free(cause);
	} else {
		if (cause != NULL || cf->cf_nlisten == 0)
			abort();
		conf_free(cf);
	}
	free(text);
	return (0);
}
