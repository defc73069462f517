/*
 * libFuzzer harness for the configuration loader: any input either loads
 * or is refused with a "name:line:column: " message; nothing leaks.  A
 * loaded one keeps the invariants the rest of the gateway relies on.
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
	size_t i;

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
		/* auth.secrets: 0 to 8 of them, each at least 16 bytes. */
		if (cf->cf_nauth_secrets > GW_AUTH_SECRETS_MAX ||
		    (cf->cf_nauth_secrets == 0) !=
			(conf_signing_key(cf) == NULL))
			abort();
		for (i = 0; i < cf->cf_nauth_secrets; i++) {
			if (cf->cf_auth_secrets[i].tk_len < 16 ||
			    strlen(cf->cf_auth_secrets[i].tk_key) !=
				cf->cf_auth_secrets[i].tk_len)
				abort();
		}
		conf_free(cf);
	}
	free(text);
	return (0);
}
