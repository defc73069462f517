/*
 * The log writer: a thread's lines go to a bounded buffer that a writer
 * thread drains, so logging never waits for a stalled output.  Lines that
 * do not fit are dropped and counted, the writer says how many once the
 * output moves again, and log_reopen moves to a fresh file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <pthread.h>

#include <cmocka.h>
#include <jansson.h>

#include "log.h"

/* Lines logged into the stalled pipe, each about 200 bytes. */
#define NLINES 12000

/* What the reader thread read from the pipe. */
struct sink {
	int s_fd;
	char *s_data;
	size_t s_len;
};

/* Read the pipe until end of file. */
static void *
sink_main(void *arg)
{
	struct sink *s = arg;
	char buf[65536];
	ssize_t n;

	while ((n = read(s->s_fd, buf, sizeof buf)) > 0) {
		s->s_data = realloc(s->s_data, s->s_len + (size_t)n + 1);
		memcpy(s->s_data + s->s_len, buf, (size_t)n);
		s->s_len += (size_t)n;
		s->s_data[s->s_len] = '\0';
	}
	return (NULL);
}

/* Milliseconds on the monotonic clock. */
static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6);
}

/* Count the lines of s that contain needle. */
static size_t
count_lines(const char *s, const char *needle)
{
	const char *p, *nl;
	size_t n = 0;

	for (p = s; p != NULL && *p != '\0'; p = nl != NULL ? nl + 1 : NULL) {
		nl = strchr(p, '\n');
		if (memmem(p, nl != NULL ? (size_t)(nl - p) : strlen(p), needle,
			strlen(needle)) != NULL)
			n++;
	}
	return (n);
}

/*
 * A pipe nobody reads: logging goes on at full speed, lines that do not
 * fit are dropped and counted; once the pipe is read, every line that was
 * kept arrives whole, followed by a line saying how many were dropped.
 */
static void
test_stalled_output(void **state)
{
	char path[64], pad[160], want[96];
	struct sink s = { 0 };
	pthread_t reader;
	uint64_t before, dropped;
	double start, took;
	char *cause = NULL;
	int p[2], i;

	(void)state;
	alarm(60); /* a blocked logger fails the test instead of hanging */
	if (pipe(p) != 0)
		fail_msg("pipe");
	snprintf(path, sizeof path, "/proc/self/fd/%d", p[1]);
	if (log_open(LOG_LVL_INFO, LOG_FMT_TEXT, path, &cause) != 0)
		fail_msg("log_open: %s", cause);
	memset(pad, 'x', sizeof pad - 1);
	pad[sizeof pad - 1] = '\0';
	before = log_dropped();
	start = now_ms();
	for (i = 0; i < NLINES; i++)
		log_info("line %d %s", i, pad);
	took = now_ms() - start;
	dropped = log_dropped() - before;
	/* 1.6 MB into a 64 KiB pipe and a 256 KiB buffer: most are dropped. */
	assert_true(dropped > NLINES / 2);
	assert_true(dropped < NLINES);
	/* Nothing waited for the pipe. */
	assert_true(took < 5000);
	assert_int_equal(log_flush(100), -1); /* the writer is stuck */

	s.s_fd = p[0];
	if (pthread_create(&reader, NULL, sink_main, &s) != 0)
		fail_msg("pthread_create");
	assert_int_equal(log_flush(10000), 0);
	log_info("after the stall");
	assert_int_equal(log_flush(10000), 0);
	log_close();
	close(p[1]);
	pthread_join(reader, NULL);
	close(p[0]);

	/* Every kept line whole and in order, then the drop notice. */
	assert_int_equal(
	    count_lines(s.s_data, " info  line "), NLINES - dropped);
	assert_int_equal(count_lines(s.s_data, pad), NLINES - dropped);
	assert_int_equal(count_lines(s.s_data, " info  line 0 "), 1);
	snprintf(want, sizeof want,
	    "warn  dropped %llu log lines: the log "
	    "output did not keep up",
	    (unsigned long long)dropped);
	assert_int_equal(count_lines(s.s_data, want), 1);
	assert_int_equal(count_lines(s.s_data, "after the stall"), 1);
	assert_true(
	    strstr(s.s_data, want) < strstr(s.s_data, "after the stall"));
	free(s.s_data);
	alarm(0);
}

/* Read a whole small file into a string the caller frees. */
static char *
slurp(const char *path)
{
	char *data = NULL;
	size_t len = 0;
	FILE *f;
	int c;

	if ((f = fopen(path, "r")) == NULL)
		fail_msg("fopen %s", path);
	while ((c = fgetc(f)) != EOF) {
		data = realloc(data, len + 2);
		data[len++] = (char)c;
	}
	fclose(f);
	if (data == NULL)
		data = calloc(1, 1);
	data[len] = '\0';
	return (data);
}

/* log_reopen after the file was moved: new lines go to a fresh file. */
static void
test_reopen(void **state)
{
	char dir[] = "/tmp/akgw-log.XXXXXX", path[64], moved[64], *cause = NULL;
	char *a, *b;

	(void)state;
	if (mkdtemp(dir) == NULL)
		fail_msg("mkdtemp");
	snprintf(path, sizeof path, "%s/gw.log", dir);
	snprintf(moved, sizeof moved, "%s/gw.log.1", dir);
	if (log_open(LOG_LVL_INFO, LOG_FMT_JSON, path, &cause) != 0)
		fail_msg("log_open: %s", cause);
	log_info("before the move");
	assert_int_equal(log_flush(10000), 0);
	if (rename(path, moved) != 0)
		fail_msg("rename");
	log_info("moved, not reopened");
	assert_int_equal(log_flush(10000), 0);
	assert_int_equal(log_reopen(&cause), 0);
	log_info("after the reopen");
	assert_int_equal(log_flush(10000), 0);
	log_close();

	a = slurp(moved);
	b = slurp(path);
	assert_int_equal(count_lines(a, "\"msg\":\"before the move\""), 1);
	assert_int_equal(count_lines(a, "moved, not reopened"), 1);
	assert_int_equal(count_lines(a, "after the reopen"), 0);
	assert_int_equal(count_lines(b,
			     "\"level\":\"info\",\"msg\":\"after "
			     "the reopen\""),
	    1);
	assert_int_equal(count_lines(b, "before"), 0);
	free(a);
	free(b);
	unlink(moved);
	unlink(path);
	rmdir(dir);

	/* stderr has no file to reopen. */
	if (log_open(LOG_LVL_INFO, LOG_FMT_TEXT, "", &cause) != 0)
		fail_msg("log_open: %s", cause);
	assert_int_equal(log_reopen(&cause), 1);
	log_close();
}

/* A file that cannot be opened is refused with the reason. */
static void
test_open_error(void **state)
{
	char *cause = NULL;

	(void)state;
	assert_int_equal(
	    log_open(LOG_LVL_INFO, LOG_FMT_TEXT, "/nonexistent/x.log", &cause),
	    -1);
	assert_string_equal(cause,
	    "cannot open log file /nonexistent/x.log: "
	    "No such file or directory");
	free(cause);
}

/* The same fields as log_event takes them, made the way callers did. */
static json_t *
fields_json(const struct log_field *f, size_t n)
{
	json_t *obj, *v;
	size_t i;

	obj = json_object();
	for (i = 0; i < n; i++) {
		if (f[i].lf_type == LOG_FT_STR && f[i].lf_str != NULL)
			v = json_string(f[i].lf_str);
		else if (f[i].lf_type == LOG_FT_INT)
			v = json_integer((json_int_t)f[i].lf_int);
		else if (f[i].lf_type == LOG_FT_MS)
			v = json_real((double)f[i].lf_usec / 1000);
		else
			v = json_null();
		json_object_set_new(obj, f[i].lf_key, v);
	}
	return (obj);
}

/*
 * Compare the lines of a log file two by two: each pair must be the same
 * bytes once the timestamps are blanked.  Returns the number of pairs.
 */
static size_t
compare_pairs(char *data, enum log_format fmt)
{
	char *p, *a, *b, *nl;
	size_t off = fmt == LOG_FMT_JSON ? 9 : 0, n = 0;

	for (p = data; *p != '\0';) {
		a = p;
		if ((nl = strchr(a, '\n')) == NULL)
			fail_msg("a line without its newline");
		*nl = '\0';
		b = nl + 1;
		if ((nl = strchr(b, '\n')) == NULL)
			fail_msg("an odd line: %s", a);
		*nl = '\0';
		p = nl + 1;
		assert_true(strlen(a) > off + 24 && strlen(b) > off + 24);
		assert_true(a[off + 23] == 'Z' && b[off + 23] == 'Z');
		memset(a + off, 'T', 24);
		memset(b + off, 'T', 24);
		assert_string_equal(a, b);
		n++;
	}
	return (n);
}

/*
 * log_fields writes the same bytes, in text and in JSON, as log_event does
 * for the same fields as a JSON object: strings, no values, negative and
 * large integers, durations in milliseconds, and a line longer than the
 * formatter's stack buffer.
 */
static void
test_fields_same_bytes(void **state)
{
	static const enum log_format fmts[] = { LOG_FMT_TEXT, LOG_FMT_JSON };
	static const char *keys[] = { "m0", "m1", "m2", "m3", "m4", "m5", "m6",
		"m7", "m8", "m9", "m10", "m11" };
	char dir[] = "/tmp/akgw-log.XXXXXX", path[64], *cause = NULL;
	char *data, *big;
	struct log_field f[12];
	uint64_t us, seed = 88172645463325252ULL;
	size_t i, j, k, pairs;

	(void)state;
	if (mkdtemp(dir) == NULL)
		fail_msg("mkdtemp");
	snprintf(path, sizeof path, "%s/gw.log", dir);
	big = malloc(5001);
	memset(big, 'p', 5000);
	big[5000] = '\0';
	for (k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
		if (log_open(LOG_LVL_INFO, fmts[k], path, &cause) != 0)
			fail_msg("log_open: %s", cause);
		pairs = 0;
		f[0] = log_fint("conn", 1);
		f[1] = log_fstr("client", "127.0.0.1");
		f[2] = log_fstr("request_id", NULL);
		f[3] = log_fnull("port");
		f[4] = log_fint("neg", -42);
		f[5] = log_fint("min", INT64_MIN);
		f[6] = log_fint("max", INT64_MAX);
		f[7] = log_fms("ms", 0);
		f[8] = log_fstr("path", big);
		f[9] = log_fstr("close", "keep-alive");
		log_fields(LOG_LVL_INFO, "access", f, 10);
		log_event(LOG_LVL_INFO, "access", fields_json(f, 10));
		pairs++;
		log_fields(LOG_LVL_INFO, "access", f, 0);
		log_event(LOG_LVL_INFO, "access", NULL);
		pairs++;
		/*
		 * Durations: small ones all, then up to 2^50 us (35 years) at
		 * random.  Past 2^42 ms a double has no third decimal left, and
		 * the integer formatting is the exact one.
		 */
		for (i = 0; i < 400; i++) {
			for (j = 0; j < 12; j++) {
				if (i < 200)
					us = i * 12 + j;
				else {
					seed ^= seed << 13;
					seed ^= seed >> 7;
					seed ^= seed << 17;
					us = seed >> (i % 30 + 14);
				}
				f[j] = log_fms(keys[j], us);
			}
			log_fields(LOG_LVL_INFO, "access", f, 12);
			log_event(LOG_LVL_INFO, "access", fields_json(f, 12));
			pairs++;
			if (i % 50 == 0)
				assert_int_equal(log_flush(10000), 0);
		}
		/* A level not logged writes nothing. */
		log_fields(LOG_LVL_DEBUG, "access", f, 12);
		assert_int_equal(log_flush(10000), 0);
		log_close();
		data = slurp(path);
		assert_int_equal(compare_pairs(data, fmts[k]), pairs);
		free(data);
		unlink(path);
	}
	free(big);
	rmdir(dir);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stalled_output),
		cmocka_unit_test(test_reopen),
		cmocka_unit_test(test_open_error),
		cmocka_unit_test(test_fields_same_bytes),
	};

	return (cmocka_run_group_tests(tests, NULL, NULL));
}
