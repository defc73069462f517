/*
 * Logging.  One line per message, either "time level message" text or a
 * JSON object, written with a single write(2) so lines from several threads
 * never interleave.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "alloc.h"
#include "log.h"

static enum log_level log_min = LOG_LVL_INFO;
static enum log_format log_fmt = LOG_FMT_TEXT;
static int log_fd = 2;

static const char *log_names[] = { "debug", "info", "warn", "error" };

/* Open the log: level, format and a file path (NULL or "" for stderr). */
int
log_open(
    enum log_level level, enum log_format fmt, const char *path, char **cause)
{
	int fd = 2;

	if (path != NULL && *path != '\0' && strcmp(path, "-") != 0 &&
	    strcmp(path, "stderr") != 0) {
		fd = open(
		    path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		if (fd == -1) {
			xasprintf(cause, "cannot open log file %s: %s", path,
			    strerror(errno));
			return (-1);
		}
	}
	log_close();
	log_min = level;
	log_fmt = fmt;
	log_fd = fd;
	return (0);
}

/* Close a log file and fall back to stderr. */
void
log_close(void)
{
	if (log_fd > 2)
		close(log_fd);
	log_fd = 2;
}

/* Would a message at this level be written? */
int
log_enabled(enum log_level level)
{
	return (level >= log_min);
}

/* Parse a level name; returns -1 if unknown. */
int
log_level_parse(const char *s, enum log_level *out)
{
	size_t i;

	for (i = 0; i < sizeof log_names / sizeof log_names[0]; i++) {
		if (strcasecmp(s, log_names[i]) == 0) {
			*out = (enum log_level)i;
			return (0);
		}
	}
	if (strcasecmp(s, "warning") == 0) {
		*out = LOG_LVL_WARN;
		return (0);
	}
	return (-1);
}

/* Parse a format name ("text" or "json"); returns -1 if unknown. */
int
log_format_parse(const char *s, enum log_format *out)
{
	if (strcasecmp(s, "text") == 0)
		*out = LOG_FMT_TEXT;
	else if (strcasecmp(s, "json") == 0)
		*out = LOG_FMT_JSON;
	else
		return (-1);
	return (0);
}

/* Write a whole buffer, retrying on short writes and EINTR. */
static void
log_write(const char *buf, size_t len)
{
	ssize_t n;

	while (len > 0) {
		n = write(log_fd, buf, len);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

/* Format the current wall-clock time as an ISO 8601 UTC timestamp. */
static void
log_time(char *ts, size_t len)
{
	struct timeval tv;
	struct tm tm;
	int n;

	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = (int)strftime(ts, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + n, len - (size_t)n, ".%03dZ", (int)(tv.tv_usec / 1000));
}

/*
 * Write one line: "time level msg key=value ..." as text, or one JSON
 * object with time, level, msg and the fields.  fields may be NULL; its
 * reference is consumed.
 */
static void
log_line(enum log_level level, const char *msg, json_t *fields)
{
	char ts[64], *line, *js, *v;
	const char *key;
	json_t *obj, *val;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int n;

	log_time(ts, sizeof ts);
	if (log_fmt == LOG_FMT_JSON) {
		/* Never lose a message because it is not valid UTF-8. */
		obj = json_object();
		json_object_set_new(obj, "time", json_string(ts));
		json_object_set_new(
		    obj, "level", json_string(log_names[level]));
		json_object_set_new(obj, "msg", json_string_nocheck(msg));
		if (fields != NULL)
			json_object_update(obj, fields);
		json_decref(fields);
		js = json_dumps(obj,
		    JSON_COMPACT | JSON_PRESERVE_ORDER |
			JSON_REAL_PRECISION(6));
		if (js != NULL) {
			n = xasprintf(&line, "%s\n", js);
			free(js);
		} else
			n = xasprintf(&line, "{\"msg\":\"unencodable\"}\n");
		json_decref(obj);
		log_write(line, (size_t)n);
		free(line);
		return;
	}
	if ((f = open_memstream(&buf, &len)) == NULL)
		abort();
	fprintf(f, "%s %-5s %s", ts, log_names[level], msg);
	json_object_foreach(fields, key, val)
	{
		if (json_is_string(val))
			fprintf(f, " %s=%s", key, json_string_value(val));
		else if (json_is_null(val))
			fprintf(f, " %s=-", key);
		else if (json_is_real(val))
			fprintf(f, " %s=%.3f", key, json_real_value(val));
		else {
			v = json_dumps(val, JSON_ENCODE_ANY | JSON_COMPACT);
			fprintf(f, " %s=%s", key, v != NULL ? v : "?");
			free(v);
		}
	}
	fputc('\n', f);
	fclose(f);
	log_write(buf, len);
	free(buf);
	json_decref(fields);
}

/* Log a message with structured fields (consumes the fields reference). */
void
log_event(enum log_level level, const char *msg, json_t *fields)
{
	if (!log_enabled(level)) {
		json_decref(fields);
		return;
	}
	log_line(level, msg, fields);
}

/* Log a message with a va_list. */
void
log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
	char *msg;

	if (!log_enabled(level))
		return;
	xvasprintf(&msg, fmt, ap);
	log_line(level, msg, NULL);
	free(msg);
}

/* Log a message. */
void
log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}
