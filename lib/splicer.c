/*
 * splice(2) between two sockets, through a pipe, on a libevent loop.  The
 * bytes never reach user space: a proxied download or WebSocket stream
 * costs the kernel's work and two system calls per pipe-full.
 *
 * Each pump moves what the source has into the pipe (at most what the
 * pipe holds and what is left of the limit), then from the pipe to the
 * destination, until one side would block; it then waits for that side.
 * The pipe is the only buffer, so memory is bounded by its size.
 *
 * A source of known length that is fast only wakes the loop once it holds
 * SPLICER_LOWAT bytes (SO_RCVLOWAT), or within SPLICER_LOWAT_MS of the
 * wait: fewer, larger moves, and fewer wake-ups for the sender to pay.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <sys/socket.h>

#include <event2/event.h>

#include "alloc.h"
#include "clock.h"
#include "splicer.h"

/* Pipe capacity asked for; the kernel may give less. */
#define SPLICER_PIPE_SIZE (256 * 1024)
/* Idle pipes a pool keeps for the next splicer. */
#define SPLICE_POOL_KEEP 64
/* Retry after this when no pipe can be made (out of descriptors). */
#define SPLICER_RETRY_MS 100
/* Pipe-fuls one pump moves before letting the loop run others. */
#define SPLICER_BUDGET 4
/*
 * A fast source of a known length wakes the loop only once it holds this
 * much (SO_RCVLOWAT): its sender then pays fewer wake-ups of our thread.
 * Kept below half the default receive buffer so that the kernel does not
 * clamp the window to it.
 */
#define SPLICER_LOWAT (32 * 1024)
/* A source short of the mark for this long is read as it is. */
#define SPLICER_LOWAT_MS 2

struct splice_pipe {
	int p_fd[2]; /* read end, write end */
	size_t p_size;
};

struct splice_pool {
	struct splice_pipe *sp_free[SPLICE_POOL_KEEP];
	size_t sp_nfree;
};

struct splicer {
	struct event_base *s_base;
	struct splice_pool *s_pool;
	int s_in;
	int s_out;
	struct splice_pipe *s_pipe; /* only while bytes are in it */
	size_t s_inpipe; /* bytes in the pipe */
	uint64_t s_left; /* still to read, or SPLICER_TO_EOF */
	int s_eof; /* the source ended */
	int s_short; /* the last read took less than asked: drained */
	int s_rarmed; /* s_rev is added (it persists) */
	int s_lowat; /* SO_RCVLOWAT of the source; 0 or 1: the default */
	int s_slow; /* the source fell short of the mark: no mark */
	uint64_t s_idle_ms;
	uint64_t s_active; /* monotonic ms of the last byte moved */
	struct event *s_rev; /* source readable; persistent */
	struct event *s_wev; /* destination writable */
	struct event *s_retry; /* later: out of pipes or of budget; lazily */
	struct event *s_lowev; /* the mark's deadline; lazily */
	struct splicer_cbs s_cbs;
	void *s_arg;
};

static void splicer_pump(struct splicer *);
static void splicer_finish(struct splicer *, int);
static void splicer_read_off(struct splicer *);
static void splicer_set_lowat(struct splicer *, int);

/* A pool of pipes for one loop. */
struct splice_pool *
splice_pool_new(void)
{
	return (xcalloc(1, sizeof(struct splice_pool)));
}

/* Close a pipe. */
static void
splice_pipe_close(struct splice_pipe *p)
{
	close(p->p_fd[0]);
	close(p->p_fd[1]);
	free(p);
}

/* Free a pool and its idle pipes. */
void
splice_pool_free(struct splice_pool *pool)
{
	if (pool == NULL)
		return;
	while (pool->sp_nfree > 0)
		splice_pipe_close(pool->sp_free[--pool->sp_nfree]);
	free(pool);
}

/* An empty pipe from the pool, or a new one; NULL when none can be made. */
static struct splice_pipe *
splice_pipe_get(struct splice_pool *pool)
{
	struct splice_pipe *p;
	int size;

	if (pool->sp_nfree > 0)
		return (pool->sp_free[--pool->sp_nfree]);
	p = xcalloc(1, sizeof *p);
	if (pipe2(p->p_fd, O_NONBLOCK | O_CLOEXEC) == -1) {
		free(p);
		return (NULL);
	}
	/* Best effort: past pipe-user-pages-soft the kernel says no. */
	size = fcntl(p->p_fd[1], F_SETPIPE_SZ, SPLICER_PIPE_SIZE);
	if (size <= 0)
		size = fcntl(p->p_fd[1], F_GETPIPE_SZ);
	p->p_size = size > 0 ? (size_t)size : 65536;
	return (p);
}

/* Give an empty pipe back. */
static void
splice_pipe_put(struct splice_pool *pool, struct splice_pipe *p)
{
	if (pool->sp_nfree < SPLICE_POOL_KEEP)
		pool->sp_free[pool->sp_nfree++] = p;
	else
		splice_pipe_close(p);
}

/* An event on the source or destination, or the retry timer. */
static void
splicer_event_cb(evutil_socket_t fd, short what, void *arg)
{
	struct splicer *s = arg;
	struct timeval tv;
	uint64_t now, idle;

	if (fd == s->s_in && s->s_lowev != NULL)
		event_del(s->s_lowev);
	/* fd is -1 for the retry timer, which has no deadline of its own. */
	if ((what & EV_TIMEOUT) && s->s_idle_ms != 0 && fd != -1) {
		now = clock_mono_msec();
		idle = now - s->s_active;
		if (idle >= s->s_idle_ms) {
			splicer_finish(s, ETIMEDOUT);
			return;
		}
		/* Something moved since this wait began: wait the rest. */
		clock_msec_to_tv(s->s_idle_ms - idle, &tv);
		event_add(fd == s->s_in ? s->s_rev : s->s_wev, &tv);
		return;
	}
	splicer_pump(s);
}

/*
 * The source stayed short of its mark: read what it has, and wait for no
 * mark until it is fast again.
 */
static void
splicer_lowat_cb(evutil_socket_t fd, short what, void *arg)
{
	struct splicer *s = arg;

	(void)fd;
	(void)what;
	s->s_slow = 1;
	splicer_set_lowat(s, 1);
	splicer_pump(s);
}

/*
 * A splicer moving limit bytes (or SPLICER_TO_EOF) from socket in to
 * socket out, with pipes from pool.  Nothing moves until splicer_start.
 * idle_ms (0: none) ends a move that moves nothing for that long.
 */
struct splicer *
splicer_new(struct event_base *base, struct splice_pool *pool, int in,
    int out, uint64_t limit, uint64_t idle_ms, const struct splicer_cbs *cbs,
    void *arg)
{
	struct splicer *s;

	s = xcalloc(1, sizeof *s);
	s->s_base = base;
	s->s_pool = pool;
	s->s_in = in;
	s->s_out = out;
	s->s_left = limit;
	s->s_idle_ms = idle_ms;
	s->s_cbs = *cbs;
	s->s_arg = arg;
	/* Persistent: waiting for the next message costs no epoll_ctl. */
	s->s_rev = event_new(base, in, EV_READ | EV_PERSIST, splicer_event_cb, s);
	s->s_wev = event_new(base, out, EV_WRITE, splicer_event_cb, s);
	return (s);
}

/* Start moving. */
void
splicer_start(struct splicer *s)
{
	s->s_active = clock_mono_msec();
	splicer_pump(s);
}

/* Bytes of the limit not read yet. */
uint64_t
splicer_left(const struct splicer *s)
{
	return (s->s_left);
}

/*
 * Stop and free; bytes still in the pipe are dropped with it.  The source
 * gets its default low-water mark back, so free before closing it.
 */
void
splicer_free(struct splicer *s)
{
	if (s == NULL)
		return;
	event_free(s->s_rev);
	event_free(s->s_wev);
	if (s->s_retry != NULL)
		event_free(s->s_retry);
	if (s->s_lowev != NULL)
		event_free(s->s_lowev);
	splicer_set_lowat(s, 1);
	if (s->s_pipe != NULL) {
		if (s->s_inpipe == 0)
			splice_pipe_put(s->s_pool, s->s_pipe);
		else
			splice_pipe_close(s->s_pipe);
	}
	free(s);
}

/* Wait for ev, with the idle deadline when there is one. */
static void
splicer_wait(struct splicer *s, struct event *ev)
{
	struct timeval tv;

	if (s->s_idle_ms == 0) {
		event_add(ev, NULL);
		return;
	}
	clock_msec_to_tv(s->s_idle_ms, &tv);
	event_add(ev, &tv);
}

/*
 * The move ended: nothing fires for it any more, then the owner hears it
 * (and may free the splicer).
 */
static void
splicer_finish(struct splicer *s, int error)
{
	splicer_read_off(s);
	event_del(s->s_wev);
	if (s->s_retry != NULL)
		event_del(s->s_retry);
	/* The socket goes back to its owner as it came. */
	splicer_set_lowat(s, 1);
	s->s_cbs.done(s->s_arg, error);
}

/* Set the source's SO_RCVLOWAT to n (best effort), if it is not n. */
static void
splicer_set_lowat(struct splicer *s, int n)
{
	if (s->s_lowat == n || (s->s_lowat == 0 && n == 1))
		return;
	setsockopt(s->s_in, SOL_SOCKET, SO_RCVLOWAT, &n, sizeof n);
	s->s_lowat = n;
}

/*
 * Wait for the source (it stays armed until a write blocks).  A fast
 * source of known length wakes us at the mark, or at most the bytes left,
 * with a deadline so that a slowing one is not held back for long.
 */
static void
splicer_read_on(struct splicer *s)
{
	struct timeval tv;
	int mark = 1;

	if (!s->s_slow && s->s_left != SPLICER_TO_EOF)
		mark = s->s_left < SPLICER_LOWAT ? (int)s->s_left
						 : SPLICER_LOWAT;
	splicer_set_lowat(s, mark);
	if (mark > 1) {
		if (s->s_lowev == NULL)
			s->s_lowev = evtimer_new(s->s_base, splicer_lowat_cb, s);
		clock_msec_to_tv(SPLICER_LOWAT_MS, &tv);
		evtimer_add(s->s_lowev, &tv);
	}
	if (!s->s_rarmed) {
		splicer_wait(s, s->s_rev);
		s->s_rarmed = 1;
	}
}

/* Stop watching the source: it is level-triggered and would spin. */
static void
splicer_read_off(struct splicer *s)
{
	if (s->s_rarmed) {
		event_del(s->s_rev);
		s->s_rarmed = 0;
	}
	if (s->s_lowev != NULL)
		event_del(s->s_lowev);
}

/*
 * The timer that brings a pump back later; made on first use, since most
 * splicers of idle connections never need it.
 */
static struct event *
splicer_retry(struct splicer *s)
{
	if (s->s_retry == NULL)
		s->s_retry = evtimer_new(s->s_base, splicer_event_cb, s);
	return (s->s_retry);
}

/* Write what the pipe holds.  0: empty now; 1: would block; -1: error. */
static int
splicer_drain(struct splicer *s)
{
	ssize_t n;

	while (s->s_inpipe > 0) {
		n = splice(s->s_pipe->p_fd[0], NULL, s->s_out, NULL,
		    s->s_inpipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			s->s_inpipe -= (size_t)n;
			s->s_active = clock_mono_msec();
			s->s_cbs.progress(s->s_arg, (size_t)n);
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return (1);
		if (n == 0)
			errno = EPIPE;
		return (-1);
	}
	/* Empty: other splicers may use the pipe while this one waits. */
	splice_pipe_put(s->s_pool, s->s_pipe);
	s->s_pipe = NULL;
	return (0);
}

/* Move until a side would block, the move ends or fails. */
static void
splicer_pump(struct splicer *s)
{
	struct timeval tv;
	size_t want;
	ssize_t n;
	int r, budget = SPLICER_BUDGET;

	for (;;) {
		if (s->s_pipe != NULL) {
			if ((r = splicer_drain(s)) < 0) {
				splicer_finish(s, errno);
				return;
			}
			if (r == 1) {
				splicer_read_off(s);
				splicer_wait(s, s->s_wev);
				return;
			}
		}
		if (s->s_eof || s->s_left == 0) {
			splicer_finish(s,
			    s->s_eof && s->s_left != SPLICER_TO_EOF &&
				    s->s_left != 0
				? EPIPE
				: 0);
			return;
		}
		if (s->s_short) {
			/* The source had no more a moment ago: wait for it. */
			s->s_short = 0;
			splicer_read_on(s);
			return;
		}
		if (budget-- == 0) {
			/* Fairness: come back after the loop's other events. */
			splicer_read_off(s);
			event_active(splicer_retry(s), EV_TIMEOUT, 0);
			return;
		}
		if ((s->s_pipe = splice_pipe_get(s->s_pool)) == NULL) {
			/* Out of descriptors still ends an idle move. */
			if (s->s_idle_ms != 0 &&
			    clock_mono_msec() - s->s_active >= s->s_idle_ms) {
				splicer_finish(s, ETIMEDOUT);
				return;
			}
			/* The bytes wait in the socket; nothing is lost. */
			splicer_read_off(s);
			clock_msec_to_tv(SPLICER_RETRY_MS, &tv);
			evtimer_add(splicer_retry(s), &tv);
			return;
		}
		want = s->s_pipe->p_size;
		if (s->s_left != SPLICER_TO_EOF && s->s_left < want)
			want = (size_t)s->s_left;
		n = splice(s->s_in, NULL, s->s_pipe->p_fd[1], NULL, want,
		    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			s->s_inpipe = (size_t)n;
			s->s_short = (size_t)n < want;
			if (n >= SPLICER_LOWAT)
				s->s_slow = 0;
			if (s->s_left != SPLICER_TO_EOF)
				s->s_left -= (uint64_t)n;
			continue;
		}
		if (n == 0) {
			s->s_eof = 1;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			splice_pipe_put(s->s_pool, s->s_pipe);
			s->s_pipe = NULL;
			splicer_read_on(s);
			return;
		}
		splicer_finish(s, errno);
		return;
	}
}
