/*
 * Logging.  One line per message, either "time level message" text or a
 * JSON object.
 *
 * Once log_open has run, a line is never written by the thread that logs
 * it: it is copied into that thread's bounded buffer and a writer thread
 * drains every buffer to the log.  An event loop therefore never waits for
 * its log: when stderr is a pipe nobody reads, or a disk stalls, the
 * buffer fills and further lines are dropped and counted (log_dropped),
 * and the writer says how many once the output moves again.  The writer is
 * the only thread that writes the log, so lines never interleave.
 *
 * Before log_open (and in unit tests that never call it) a line is written
 * at once with write(2), as a one-shot tool would.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
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

/* Bytes of lines one thread may have waiting for the writer. */
#define LOG_BUF_SIZE (256 * 1024)
/* Threads with a buffer of their own; any more share the last one. */
#define LOG_MAX_BUFS 512
/* A buffer this full wakes a napping writer (log_writer_nap). */
#define LOG_BUF_HIGH (LOG_BUF_SIZE / 4)
/*
 * The writer's nap after a pass that wrote lines, in milliseconds: short
 * after a pass that wrote little, so that a quiet gateway's lines appear at
 * once (tests and operators wait on them), long after one that wrote at
 * least LOG_NAP_BUSY bytes, so that a busy one writes in large batches.
 */
#define LOG_NAP_MS 10
#define LOG_NAP_QUIET_MS 1
#define LOG_NAP_BUSY 4096
/* How long exit waits for the writer to drain, in milliseconds. */
#define LOG_EXIT_WAIT_MS 2000

/* One thread's lines not yet taken by the writer. */
struct log_buf {
	pthread_mutex_t lb_lock;
	char *lb_data; /* LOG_BUF_SIZE bytes */
	size_t lb_len; /* atomic for the crash handler */
};

static enum log_level log_min = LOG_LVL_INFO;
static enum log_format log_fmt = LOG_FMT_TEXT;
static int log_fd = 2; /* the writer's, once it runs */
static char *log_path; /* the file, or NULL for stderr */

/*
 * The writer thread and what it shares with the threads that log, under
 * log_lock.  log_flags is changed and read with sequentially consistent
 * atomics (LOG_SET, LOG_CLR, LOG_HAS): a thread that logs sets LOG_F_WORK
 * without the lock and takes it only to wake a writer that went idle.
 * log_bufs only grows while the writer runs.
 */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_wake; /* the writer waits here */
static pthread_cond_t log_idle; /* log_flush and log_close wait here */
static pthread_t log_thread;
static int log_flags;
#define LOG_F_RUNNING 0x01 /* the writer thread was started */
#define LOG_F_WORK 0x02 /* a buffer got lines since the writer looked */
#define LOG_F_STOP 0x04 /* drain everything and leave */
#define LOG_F_DONE 0x08 /* the writer has left */
#define LOG_F_IDLE 0x10 /* the writer waits with nothing to write */
#define LOG_F_STUCK 0x20 /* the writer did not leave in time: drop */
#define LOG_F_NAP 0x40 /* the writer naps between two passes */
#define LOG_F_HURRY 0x80 /* a buffer passed LOG_BUF_HIGH: no nap */
#define LOG_SET(f) __atomic_or_fetch(&log_flags, (f), __ATOMIC_SEQ_CST)
#define LOG_CLR(f) __atomic_and_fetch(&log_flags, ~(f), __ATOMIC_SEQ_CST)
#define LOG_HAS(f) (__atomic_load_n(&log_flags, __ATOMIC_SEQ_CST) & (f))
static int log_flushers; /* threads in log_flush: the writer does not nap */
static int log_hooked; /* atexit and crash handlers installed */
static int log_newfd = -1; /* handed over by log_reopen */
static struct log_buf *log_bufs[LOG_MAX_BUFS];
static size_t log_nbufs; /* atomic: the crash handler reads it */
static char *log_spare; /* the writer's buffer, swapped with a full one */
static uint64_t log_ndropped; /* atomic */
static uint64_t log_ntold; /* drops the writer has reported */
static uint64_t log_gen; /* writer starts: a thread's log_self is stale */
static __thread struct log_buf *log_self;
static __thread uint64_t log_self_gen;

static const int log_crash_sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL,
	SIGABRT };
static struct sigaction
    log_crash_old[sizeof log_crash_sigs / sizeof log_crash_sigs[0]];

static const char *log_names[] = { "debug", "info", "warn", "error" };

/* Open path for appending, or return 2 for stderr; -1 with *cause. */
static int
log_open_fd(const char *path, char **cause)
{
	int fd;

	if (path == NULL)
		return (2);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
	if (fd == -1)
		xasprintf(cause, "cannot open log file %s: %s", path,
		    strerror(errno));
	return (fd);
}

/* Is path one of the names for stderr ("", "-", "stderr" or NULL)? */
static int
log_is_stderr(const char *path)
{
	return (path == NULL || *path == '\0' || strcmp(path, "-") == 0 ||
	    strcmp(path, "stderr") == 0);
}

/*
 * Write a whole buffer to fd, retrying on short writes, EINTR and EAGAIN
 * (a descriptor another process made non-blocking).  Only the writer
 * thread, or a thread logging before the writer runs, calls this.
 */
static void
log_write_fd(int fd, const char *buf, size_t len)
{
	struct pollfd pfd;
	ssize_t n;

	while (len > 0) {
		n = write(fd, buf, len);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				pfd.fd = fd;
				pfd.events = POLLOUT;
				(void)poll(&pfd, 1, -1);
				continue;
			}
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

/* A condition variable on the monotonic clock. */
static void
log_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &attr);
	pthread_condattr_destroy(&attr);
}

/* The monotonic time ms milliseconds from now. */
static struct timespec
log_deadline(int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return (ts);
}

/* This thread's buffer, made on its first line. */
static struct log_buf *
log_buf_get(void)
{
	struct log_buf *lb;

	if (log_self != NULL && log_self_gen == log_gen)
		return (log_self);
	pthread_mutex_lock(&log_lock);
	if (log_nbufs < LOG_MAX_BUFS) {
		lb = xcalloc(1, sizeof *lb);
		pthread_mutex_init(&lb->lb_lock, NULL);
		lb->lb_data = xmalloc(LOG_BUF_SIZE);
		log_bufs[log_nbufs] = lb;
		__atomic_store_n(&log_nbufs, log_nbufs + 1, __ATOMIC_RELEASE);
	} else
		lb = log_bufs[LOG_MAX_BUFS - 1];
	log_self_gen = log_gen;
	pthread_mutex_unlock(&log_lock);
	log_self = lb;
	return (lb);
}

/*
 * Room for a line of at most size bytes at the end of this thread's
 * buffer, with the buffer locked: the caller writes the line there and
 * calls log_commit.  NULL when the line is dropped (counted), or with
 * *direct set when the writer does not run and the caller should write
 * the line itself (log_write_fd).  Never waits for I/O.
 */
static char *
log_reserve(size_t size, struct log_buf **lbp, int *direct)
{
	struct log_buf *lb;
	int flags;

	*direct = 0;
	flags = LOG_HAS(~0);
	if (!(flags & LOG_F_RUNNING)) {
		*direct = 1;
		return (NULL);
	}
	if (flags & (LOG_F_DONE | LOG_F_STUCK)) {
		__atomic_add_fetch(&log_ndropped, 1, __ATOMIC_RELAXED);
		return (NULL);
	}
	lb = log_buf_get();
	pthread_mutex_lock(&lb->lb_lock);
	if (size > LOG_BUF_SIZE - lb->lb_len) {
		pthread_mutex_unlock(&lb->lb_lock);
		__atomic_add_fetch(&log_ndropped, 1, __ATOMIC_RELAXED);
		return (NULL);
	}
	*lbp = lb;
	return (lb->lb_data + lb->lb_len);
}

/*
 * The line of len bytes the caller wrote at log_reserve's pointer is
 * queued: unlock the buffer and tell the writer if it needs telling.
 */
static void
log_commit(struct log_buf *lb, size_t len)
{
	int was_empty, high;

	was_empty = lb->lb_len == 0;
	high = lb->lb_len < LOG_BUF_HIGH && lb->lb_len + len >= LOG_BUF_HIGH;
	__atomic_store_n(&lb->lb_len, lb->lb_len + len, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&lb->lb_lock);
	/*
	 * A buffer that had lines already told the writer.  Otherwise say
	 * there is work, and wake the writer only if it went idle: a busy
	 * writer sees LOG_F_WORK before it waits (log_writer_main).
	 */
	if (was_empty) {
		LOG_SET(LOG_F_WORK);
		if (LOG_HAS(LOG_F_IDLE)) {
			pthread_mutex_lock(&log_lock);
			pthread_cond_signal(&log_wake);
			pthread_mutex_unlock(&log_lock);
		}
	}
	/*
	 * A buffer past its high-water mark cuts the writer's nap short, as
	 * nginx writes a full buffer at once: the nap saves wake-ups, never
	 * lines.
	 */
	if (high) {
		LOG_SET(LOG_F_HURRY);
		if (LOG_HAS(LOG_F_NAP)) {
			pthread_mutex_lock(&log_lock);
			pthread_cond_signal(&log_wake);
			pthread_mutex_unlock(&log_lock);
		}
	}
}

/*
 * Queue one formatted line (with its newline) for the writer, or drop and
 * count it when this thread's buffer has no room.  Never waits for I/O.
 */
static void
log_emit(const char *line, size_t len)
{
	struct log_buf *lb;
	char *p;
	int direct;

	if ((p = log_reserve(len, &lb, &direct)) == NULL) {
		if (direct)
			log_write_fd(log_fd, line, len);
		return;
	}
	memcpy(p, line, len);
	log_commit(lb, len);
}

/* "2026-12-02T16:01:20.647Z" and its NUL. */
#define LOG_TIME_SIZE 32

/*
 * This thread's last second, formatted: strftime and gmtime_r cost more
 * than the rest of a short line, and a busy thread logs many lines a
 * second.
 */
static __thread time_t log_tsec = -1;
static __thread char log_tstr[LOG_TIME_SIZE];
static __thread size_t log_tlen;

/*
 * Format the current wall-clock time as an ISO 8601 UTC timestamp with
 * milliseconds into ts (LOG_TIME_SIZE bytes); return its length.
 */
static size_t
log_time(char *ts)
{
	struct timeval tv;
	struct tm tm;
	size_t n;
	int ms;

	gettimeofday(&tv, NULL);
	if (tv.tv_sec != log_tsec) {
		gmtime_r(&tv.tv_sec, &tm);
		log_tlen = strftime(
		    log_tstr, LOG_TIME_SIZE - 6, "%Y-%m-%dT%H:%M:%S", &tm);
		log_tsec = tv.tv_sec;
	}
	n = log_tlen;
	memcpy(ts, log_tstr, n);
	ms = (int)(tv.tv_usec / 1000);
	ts[n++] = '.';
	ts[n++] = (char)('0' + ms / 100);
	ts[n++] = (char)('0' + ms / 10 % 10);
	ts[n++] = (char)('0' + ms % 10);
	ts[n++] = 'Z';
	ts[n] = '\0';
	return (n);
}

/*
 * Format one line: "time level msg key=value ..." as text, or one JSON
 * object with time, level, msg and the fields.  fields may be NULL; its
 * reference is consumed.  Returns the line, which the caller frees, and
 * its length in *lenp.
 */
static char *
log_format(enum log_level level, const char *msg, json_t *fields, size_t *lenp)
{
	char ts[LOG_TIME_SIZE], *line, *js, *v;
	const char *key;
	json_t *obj, *val;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int n;

	(void)log_time(ts);
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
		*lenp = (size_t)n;
		return (line);
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
	json_decref(fields);
	*lenp = len;
	return (buf);
}

/*
 * The writer takes every buffer's lines and writes them to the log.
 * Returns the bytes it wrote.
 */
static size_t
log_drain(void)
{
	struct log_buf *lb;
	size_t i, n, len, total = 0;
	char *data;

	pthread_mutex_lock(&log_lock);
	n = log_nbufs;
	pthread_mutex_unlock(&log_lock);
	for (i = 0; i < n; i++) {
		lb = log_bufs[i];
		pthread_mutex_lock(&lb->lb_lock);
		data = lb->lb_data;
		len = lb->lb_len;
		if (len > 0) {
			/* Swap buffers: the thread logs on at once. */
			lb->lb_data = log_spare;
			__atomic_store_n(&lb->lb_len, 0, __ATOMIC_RELEASE);
			log_spare = data;
		}
		pthread_mutex_unlock(&lb->lb_lock);
		if (len == 0)
			continue;
		log_write_fd(log_fd, data, len);
		total += len;
	}
	return (total);
}

/* The writer reports lines dropped since it last did. */
static void
log_tell_drops(void)
{
	uint64_t n;
	size_t len;
	char *msg, *line;

	n = __atomic_load_n(&log_ndropped, __ATOMIC_RELAXED);
	if (n == log_ntold || !log_enabled(LOG_LVL_WARN))
		return;
	xasprintf(&msg,
	    "dropped %llu log line%s: the log output did not keep up "
	    "(%llu dropped since start)",
	    (unsigned long long)(n - log_ntold), n - log_ntold == 1 ? "" : "s",
	    (unsigned long long)n);
	log_ntold = n;
	line = log_format(LOG_LVL_WARN, msg, NULL, &len);
	log_write_fd(log_fd, line, len);
	free(line);
	free(msg);
}

/*
 * The writer waits, under log_lock, until there is work: lines, a new file
 * or a stop.  It says it is idle before it looks for work a last time, so
 * a thread that sets LOG_F_WORK either is seen here or sees LOG_F_IDLE and
 * signals.
 */
static void
log_writer_wait(void)
{
	const int work = LOG_F_WORK | LOG_F_STOP;

	while (!LOG_HAS(work) && log_newfd == -1) {
		LOG_SET(LOG_F_IDLE);
		if (LOG_HAS(work))
			break;
		pthread_cond_broadcast(&log_idle);
		pthread_cond_wait(&log_wake, &log_lock);
	}
	LOG_CLR(LOG_F_IDLE | LOG_F_WORK);
}

/*
 * The writer naps, under log_lock, for ms or until a buffer passes
 * its high-water mark, log_flush or log_close waits for the lines, or a new
 * file is handed over.  An emitter sets LOG_F_HURRY before it looks for
 * LOG_F_NAP, and the writer sets LOG_F_NAP before it looks for
 * LOG_F_HURRY, so one of them sees the other.
 */
static void
log_writer_nap(int ms)
{
	struct timespec ts;

	ts = log_deadline(ms);
	LOG_SET(LOG_F_NAP);
	while (!LOG_HAS(LOG_F_HURRY | LOG_F_STOP) && log_newfd == -1 &&
	    log_flushers == 0) {
		if (pthread_cond_timedwait(&log_wake, &log_lock, &ts) ==
		    ETIMEDOUT)
			break;
	}
	LOG_CLR(LOG_F_NAP | LOG_F_HURRY);
}

/*
 * The writer thread: drain the buffers whenever one gets lines.  After a
 * pass that wrote something it naps (log_writer_nap) before the next, so
 * that under load lines go out in writes of up to LOG_BUF_HIGH a buffer,
 * about one a nap, and the threads that log seldom wake it: only when a
 * buffer passes LOG_BUF_HIGH, or gets a line while the writer is idle.
 */
static void *
log_writer_main(void *arg)
{
	size_t wrote;
	int stop;

	(void)arg;
	pthread_mutex_lock(&log_lock);
	for (;;) {
		log_writer_wait();
		stop = LOG_HAS(LOG_F_STOP);
		if (log_newfd != -1) {
			/* log_reopen: lines not yet written go to the new file. */
			if (log_fd > 2)
				close(log_fd);
			log_fd = log_newfd;
			log_newfd = -1;
		}
		pthread_mutex_unlock(&log_lock);
		wrote = log_drain();
		log_tell_drops();
		pthread_mutex_lock(&log_lock);
		if (wrote > 0 && !stop)
			log_writer_nap(wrote >= LOG_NAP_BUSY ? LOG_NAP_MS
							     : LOG_NAP_QUIET_MS);
		if (stop && wrote == 0 && !LOG_HAS(LOG_F_WORK))
			break;
		if (wrote > 0)
			LOG_SET(LOG_F_WORK); /* look again after the nap */
	}
	LOG_SET(LOG_F_DONE);
	pthread_cond_broadcast(&log_idle);
	pthread_mutex_unlock(&log_lock);
	return (NULL);
}

/*
 * Write what the buffers hold, from a fatal signal: best effort, without
 * locks, and each write waits at most 100 ms for a stalled output, so a
 * crash never hangs on its log.
 */
static void
log_crash_flush(void)
{
	struct pollfd pfd;
	struct log_buf *lb;
	size_t i, n, len, off, chunk;
	ssize_t w;
	int tries = 20;

	n = __atomic_load_n(&log_nbufs, __ATOMIC_ACQUIRE);
	pfd.fd = log_fd;
	pfd.events = POLLOUT;
	for (i = 0; i < n && tries > 0; i++) {
		lb = log_bufs[i];
		len = __atomic_load_n(&lb->lb_len, __ATOMIC_ACQUIRE);
		for (off = 0; off < len && tries > 0;) {
			if (poll(&pfd, 1, 100) != 1) {
				tries--;
				continue;
			}
			chunk = len - off > 4096 ? 4096 : len - off;
			w = write(log_fd, lb->lb_data + off, chunk);
			if (w <= 0) {
				tries--;
				continue;
			}
			off += (size_t)w;
		}
	}
}

/*
 * A fatal signal: flush what the buffers hold, then let the signal do what
 * it did before (a core dump, or a sanitizer's report).  A fault the
 * program caused happens again on return; one sent by kill is raised.
 */
static void
log_crash_cb(int sig, siginfo_t *si, void *ctx)
{
	size_t i;

	(void)ctx;
	log_crash_flush();
	for (i = 0; i < sizeof log_crash_sigs / sizeof log_crash_sigs[0]; i++) {
		if (log_crash_sigs[i] == sig)
			sigaction(sig, &log_crash_old[i], NULL);
	}
	if (si->si_code <= 0 || sig == SIGABRT)
		raise(sig);
}

/* At exit: give the writer a moment to write what is queued. */
static void
log_atexit_cb(void)
{
	(void)log_flush(LOG_EXIT_WAIT_MS);
}

/* Install the exit and crash hooks, once per process. */
static void
log_hooks(void)
{
	struct sigaction sa;
	size_t i;

	if (log_hooked)
		return;
	log_hooked = 1;
	atexit(log_atexit_cb);
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = log_crash_cb;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof log_crash_sigs / sizeof log_crash_sigs[0]; i++)
		sigaction(log_crash_sigs[i], &sa, &log_crash_old[i]);
}

/* Start the writer thread with every signal blocked; -1 with *cause. */
static int
log_writer_start(char **cause)
{
	sigset_t all, old;
	int error;

	log_cond_init(&log_wake);
	log_cond_init(&log_idle);
	log_gen++; /* buffers of an earlier writer are gone */
	if (log_spare == NULL)
		log_spare = xmalloc(LOG_BUF_SIZE);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	error = pthread_create(&log_thread, NULL, log_writer_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (error != 0) {
		xasprintf(
		    cause, "cannot start the log writer: %s", strerror(error));
		pthread_cond_destroy(&log_wake);
		pthread_cond_destroy(&log_idle);
		return (-1);
	}
	LOG_SET(LOG_F_RUNNING);
	log_hooks();
	return (0);
}

/*
 * Open the log: level, format and a file path (NULL, "", "-" or "stderr"
 * for stderr), and start the writer.  Called again, it switches to the
 * new file and settings.
 */
int
log_open(
    enum log_level level, enum log_format fmt, const char *path, char **cause)
{
	int fd;

	if (log_is_stderr(path))
		path = NULL;
	if ((fd = log_open_fd(path, cause)) == -1)
		return (-1);
	free(log_path);
	log_path = path != NULL ? xstrdup(path) : NULL;
	log_min = level;
	log_fmt = fmt;
	if (LOG_HAS(LOG_F_RUNNING)) {
		log_set_fd(fd);
		return (0);
	}
	if (log_fd > 2)
		close(log_fd);
	log_fd = fd;
	return (log_writer_start(cause));
}

/*
 * Write to fd from now on, closing the old log file.  With the writer
 * running, the writer makes the switch before its next write.
 */
void
log_set_fd(int fd)
{
	int old;

	if (!LOG_HAS(LOG_F_RUNNING)) {
		old = log_fd;
		log_fd = fd;
		if (old > 2 && old != fd)
			close(old);
		return;
	}
	pthread_mutex_lock(&log_lock);
	if (log_newfd > 2)
		close(log_newfd);
	log_newfd = fd;
	pthread_cond_signal(&log_wake);
	pthread_mutex_unlock(&log_lock);
}

/*
 * Open the log file again under its name (SIGUSR1, after logrotate moved
 * it).  Returns 0 when reopened, 1 when the log is stderr, -1 with *cause
 * when the file cannot be opened (the old one stays in use).
 */
int
log_reopen(char **cause)
{
	int fd;

	if (log_path == NULL)
		return (1);
	if ((fd = log_open_fd(log_path, cause)) == -1)
		return (-1);
	log_set_fd(fd);
	return (0);
}

/*
 * Wait at most wait_ms for the writer to write every line queued so far.
 * Returns 0 when it has, -1 when it had not in time (the output is stalled).
 */
int
log_flush(int wait_ms)
{
	struct timespec ts;
	int rv = 0;

	if (!LOG_HAS(LOG_F_RUNNING))
		return (0);
	ts = log_deadline(wait_ms);
	pthread_mutex_lock(&log_lock);
	LOG_CLR(LOG_F_IDLE);
	LOG_SET(LOG_F_WORK);
	log_flushers++;
	pthread_cond_signal(&log_wake);
	while (!LOG_HAS(LOG_F_IDLE | LOG_F_DONE) && rv == 0) {
		if (pthread_cond_timedwait(&log_idle, &log_lock, &ts) ==
		    ETIMEDOUT)
			rv = -1;
	}
	log_flushers--;
	pthread_mutex_unlock(&log_lock);
	return (rv);
}

/*
 * Stop the writer once it has written everything, waiting at most wait_ms;
 * then free the buffers.  If it is stuck on a stalled output it is left
 * alone (the process is about to exit) and later lines are dropped.
 */
static void
log_writer_stop(int wait_ms)
{
	struct timespec ts;
	size_t i;
	int done = 1;

	ts = log_deadline(wait_ms);
	pthread_mutex_lock(&log_lock);
	LOG_SET(LOG_F_STOP);
	pthread_cond_signal(&log_wake);
	while (!LOG_HAS(LOG_F_DONE)) {
		if (pthread_cond_timedwait(&log_idle, &log_lock, &ts) ==
		    ETIMEDOUT) {
			done = 0;
			break;
		}
	}
	if (!done)
		LOG_SET(LOG_F_STUCK);
	pthread_mutex_unlock(&log_lock);
	if (!done)
		return;
	pthread_join(log_thread, NULL);
	if (log_newfd > 2)
		close(log_newfd);
	log_newfd = -1;
	for (i = 0; i < log_nbufs; i++) {
		pthread_mutex_destroy(&log_bufs[i]->lb_lock);
		free(log_bufs[i]->lb_data);
		free(log_bufs[i]);
		log_bufs[i] = NULL;
	}
	__atomic_store_n(&log_nbufs, 0, __ATOMIC_RELEASE);
	free(log_spare);
	log_spare = NULL;
	pthread_cond_destroy(&log_wake);
	pthread_cond_destroy(&log_idle);
	/* Back to writing at once, as before log_open. */
	LOG_CLR(LOG_F_RUNNING | LOG_F_STOP | LOG_F_DONE | LOG_F_WORK |
	    LOG_F_IDLE | LOG_F_NAP | LOG_F_HURRY);
}

/*
 * Write what is queued, stop the writer, close a log file and fall back to
 * stderr.  Call it once every other thread that logs has stopped.
 */
void
log_close(void)
{
	if (LOG_HAS(LOG_F_RUNNING)) {
		log_writer_stop(LOG_EXIT_WAIT_MS);
		if (LOG_HAS(LOG_F_STUCK))
			return;
	}
	if (log_fd > 2)
		close(log_fd);
	log_fd = 2;
	free(log_path);
	log_path = NULL;
}

/* Lines dropped because a thread's buffer was full. */
uint64_t
log_dropped(void)
{
	return (__atomic_load_n(&log_ndropped, __ATOMIC_RELAXED));
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

/* Format a line and queue it (consumes the fields reference). */
static void
log_line(enum log_level level, const char *msg, json_t *fields)
{
	char *line;
	size_t len;

	line = log_format(level, msg, fields, &len);
	log_emit(line, len);
	free(line);
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

/* The level names padded to five, as the text format writes them. */
static const char *log_padded[] = { "debug", "info ", "warn ", "error" };

/* Write v in decimal at p; return the end.  Needs 20 bytes. */
static char *
log_put_u64(char *p, uint64_t v)
{
	char tmp[20];
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		*p++ = tmp[--n];
	return (p);
}

/* Append s and its length n at p; return the end. */
static char *
log_put(char *p, const char *s, size_t n)
{
	memcpy(p, s, n);
	return (p + n);
}

/*
 * Format a text line from fields straight into line (log_fields_size
 * bytes or more): the same bytes log_format makes from the same fields as
 * a JSON object.  Returns the line's length.
 */
static size_t
log_fields_text(char *line, enum log_level level, const char *msg,
    const struct log_field *f, size_t n)
{
	char *p = line;
	uint64_t u;
	size_t i;

	p += log_time(p);
	*p++ = ' ';
	p = log_put(p, log_padded[level], 5);
	*p++ = ' ';
	p = log_put(p, msg, strlen(msg));
	for (i = 0; i < n; i++) {
		*p++ = ' ';
		p = log_put(p, f[i].lf_key, f[i].lf_klen);
		*p++ = '=';
		switch (f[i].lf_type) {
		case LOG_FT_STR:
			if (f[i].lf_str != NULL) {
				p = log_put(p, f[i].lf_str, f[i].lf_len);
				break;
			}
			/* FALLTHROUGH */
		case LOG_FT_NULL:
			*p++ = '-';
			break;
		case LOG_FT_INT:
			if (f[i].lf_int < 0) {
				*p++ = '-';
				u = -(uint64_t)f[i].lf_int;
			} else
				u = (uint64_t)f[i].lf_int;
			p = log_put_u64(p, u);
			break;
		case LOG_FT_MS:
			/*
			 * What "%.3f" prints for usec / 1000.0 below 2^42 ms
			 * (139 years), where a double still has its third
			 * decimal.
			 */
			u = f[i].lf_usec % 1000;
			p = log_put_u64(p, f[i].lf_usec / 1000);
			*p++ = '.';
			*p++ = (char)('0' + u / 100);
			*p++ = (char)('0' + u / 10 % 10);
			*p++ = (char)('0' + u % 10);
			break;
		}
	}
	*p++ = '\n';
	return ((size_t)(p - line));
}

/* The most bytes log_fields_text can write for these fields. */
static size_t
log_fields_size(const char *msg, const struct log_field *f, size_t n)
{
	size_t i, len;

	len = LOG_TIME_SIZE + 7 + strlen(msg) + 1;
	for (i = 0; i < n; i++) {
		len += 2 + f[i].lf_klen;
		if (f[i].lf_type == LOG_FT_STR && f[i].lf_str != NULL)
			len += f[i].lf_len;
		else
			len += 25; /* a number: 20 digits, a sign, ".000" */
	}
	return (len);
}

/* The fields as a JSON object, as log_event takes them. */
static json_t *
log_fields_json(const struct log_field *f, size_t n)
{
	json_t *obj, *v;
	size_t i;

	obj = json_object();
	for (i = 0; i < n; i++) {
		switch (f[i].lf_type) {
		case LOG_FT_STR:
			v = f[i].lf_str != NULL
			    ? json_string_nocheck(f[i].lf_str)
			    : json_null();
			break;
		case LOG_FT_INT:
			v = json_integer((json_int_t)f[i].lf_int);
			break;
		case LOG_FT_MS:
			v = json_real((double)f[i].lf_usec / 1000);
			break;
		default:
			v = json_null();
			break;
		}
		json_object_set_new_nocheck(obj, f[i].lf_key, v);
	}
	return (obj);
}

/*
 * Log a message with fields given as an array (made with log_fnull,
 * log_fstr, log_fint and log_fms), the way log_event logs a JSON object of
 * them; but a text line is formatted in place, in this thread's buffer,
 * without jansson, printf, an allocation or a copy: the access log's path.
 */
void
log_fields(
    enum log_level level, const char *msg, const struct log_field *f, size_t n)
{
	struct log_buf *lb;
	char stack[2048], *line;
	size_t size, len;
	int direct;

	if (!log_enabled(level))
		return;
	if (log_fmt == LOG_FMT_JSON) {
		log_line(level, msg, log_fields_json(f, n));
		return;
	}
	size = log_fields_size(msg, f, n);
	/* Straight into this thread's buffer while the writer runs. */
	if ((line = log_reserve(size, &lb, &direct)) != NULL) {
		len = log_fields_text(line, level, msg, f, n);
		log_commit(lb, len);
		return;
	}
	if (!direct)
		return;
	line = size <= sizeof stack ? stack : xmalloc(size);
	len = log_fields_text(line, level, msg, f, n);
	log_write_fd(log_fd, line, len);
	if (line != stack)
		free(line);
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
