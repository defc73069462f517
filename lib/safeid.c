/*
 * Safe sandbox ids, as the openYuanRong router's SanitizeID and both SDKs
 * make them: "@" becomes "-at-"; "/", "." and "_" become "-"; the result is
 * cut to at most SAFEID_MAX bytes. No other byte is changed.
 */
#include <string.h>

#include "alloc.h"
#include "safeid.h"

/*
 * Return the safe form of id, xmalloc'd; the caller frees it. The cut never
 * splits a UTF-8 sequence, so the result stays valid UTF-8 when id is.
 */
char *
safeid_make(const char *id)
{
	const char *p;
	char *out;
	size_t len, n;

	len = 0;
	for (p = id; *p != '\0'; p++)
		len += (*p == '@') ? 4 : 1;
	out = xmalloc(len + 1);

	n = 0;
	for (p = id; *p != '\0'; p++) {
		switch (*p) {
		case '@':
			memcpy(out + n, "-at-", 4);
			n += 4;
			break;
		case '/':
		case '.':
		case '_':
			out[n++] = '-';
			break;
		default:
			out[n++] = *p;
			break;
		}
	}
	if (n > SAFEID_MAX) {
		n = SAFEID_MAX;
		/* Back up over continuation bytes of a cut sequence. */
		while (n > 0 && ((unsigned char)out[n] & 0xc0) == 0x80)
			n--;
	}
	out[n] = '\0';
	return (out);
}
