/*
 * Logging: levels, text or JSON lines, to stderr or a file, written by a
 * thread of their own so that no event loop waits for its log.
 */
#ifndef AK_LOG_H
#define AK_LOG_H

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

enum log_level {
	LOG_LVL_DEBUG = 0,
	LOG_LVL_INFO,
	LOG_LVL_WARN,
	LOG_LVL_ERROR,
};

enum log_format {
	LOG_FMT_TEXT = 0,
	LOG_FMT_JSON,
};

int log_open(enum log_level, enum log_format, const char *path, char **cause);
void log_close(void);
int log_reopen(char **cause);
void log_set_fd(int);
int log_flush(int wait_ms);
uint64_t log_dropped(void);
int log_enabled(enum log_level);
int log_level_parse(const char *, enum log_level *);
int log_format_parse(const char *, enum log_format *);
void log_msg(enum log_level, const char *, ...)
    __attribute__((format(printf, 2, 3)));
struct json_t;
void log_event(enum log_level, const char *, struct json_t *);

/*
 * One field of a line logged with log_fields: a key and a value of one of
 * a few kinds.  The strings are the caller's and only read during the call.
 */
enum log_ftype {
	LOG_FT_NULL = 0, /* no value: "-" in text, null in JSON */
	LOG_FT_STR, /* a string as it is; NULL is no value */
	LOG_FT_INT, /* a signed integer */
	LOG_FT_MS, /* microseconds, logged as milliseconds (3 decimals) */
};

struct log_field {
	const char *lf_key;
	uint32_t lf_klen; /* strlen(lf_key) */
	uint32_t lf_len; /* strlen(lf_str), 0 for NULL */
	enum log_ftype lf_type;
	union {
		const char *lf_str;
		int64_t lf_int;
		uint64_t lf_usec;
	};
};

void log_fields(enum log_level, const char *, const struct log_field *, size_t);

/*
 * Make fields for log_fields.  Inlined, the length of a literal key costs
 * nothing, and a string's length is taken once.
 */
static inline struct log_field
log_fnull(const char *key)
{
	struct log_field f = { .lf_key = key, .lf_type = LOG_FT_NULL };

	f.lf_klen = (uint32_t)strlen(key);

	return (f);
}
static inline struct log_field
log_fstr(const char *key, const char *s)
{
	struct log_field f = { .lf_key = key, .lf_type = LOG_FT_STR };

	f.lf_klen = (uint32_t)strlen(key);
	f.lf_len = s != NULL ? (uint32_t)strlen(s) : 0;
	f.lf_str = s;
	return (f);
}
static inline struct log_field
log_fint(const char *key, int64_t v)
{
	struct log_field f = { .lf_key = key, .lf_type = LOG_FT_INT };

	f.lf_klen = (uint32_t)strlen(key);
	f.lf_int = v;
	return (f);
}
static inline struct log_field
log_fms(const char *key, uint64_t usec)
{
	struct log_field f = { .lf_key = key, .lf_type = LOG_FT_MS };

	f.lf_klen = (uint32_t)strlen(key);
	f.lf_usec = usec;
	return (f);
}
void log_vmsg(enum log_level, const char *, va_list)
    __attribute__((format(printf, 2, 0)));

#define log_debug(...) \
	do { \
		if (log_enabled(LOG_LVL_DEBUG)) \
			log_msg(LOG_LVL_DEBUG, __VA_ARGS__); \
	} while (0)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)

#endif
