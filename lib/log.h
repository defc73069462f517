/*
 * Logging: levels, text or JSON lines, to stderr or a file, written by a
 * thread of their own so that no event loop waits for its log.
 */
#ifndef AK_LOG_H
#define AK_LOG_H

#include <stdarg.h>
#include <stdint.h>

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
