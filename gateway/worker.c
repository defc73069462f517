/*
 * Worker threads: one event loop per usable CPU (workers: in the
 * configuration), each with its own SO_REUSEPORT listeners, connections,
 * upstream pool and counters, so the request path takes no lock.
 *
 * The main loop (worker 0) also owns what exists once per process: the
 * admin API, signals, and terminate-mode tunnels with their Port B
 * listeners.  A worker that parses a tunnel WebSocket request hands it to
 * the main loop over a socketpair and relays the bytes (gw_handoff).
 *
 * What the workers share lives in struct gw_shared: the published
 * directory (a worker takes a reference when the generation moves), the
 * TLS contexts, and atomic connection counts.  The main loop talks to a
 * worker through its channel: a mutex-protected word of commands and an
 * eventfd that wakes the loop.
 */
#include <sys/eventfd.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "gw.h"
#include "splicer.h"
#include "tls.h"

/* More loops than this gain nothing on any machine we run on. */
#define GW_MAX_WORKERS 256

/* A connection on its way to the main loop. */
struct gw_handoff {
	TAILQ_ENTRY(gw_handoff) h_entry;
	struct conn *h_conn; /* the request, moved out of the worker's */
	int h_fd; /* the main loop's end of the socketpair */
	int h_listen_port;
};

/* How another thread reaches a loop. */
struct gw_chan {
	pthread_mutex_t ch_lock;
	int ch_cmds; /* GW_CMD_* not yet run */
	TAILQ_HEAD(, gw_handoff) ch_handoffs; /* the main loop only */
	int ch_fd; /* eventfd */
	struct event *ch_ev;
};

/* The usable CPUs (the affinity mask, so taskset is honoured). */
size_t
gw_default_workers(void)
{
	cpu_set_t set;
	long n;

	if (sched_getaffinity(0, sizeof set, &set) == 0 &&
	    (n = CPU_COUNT(&set)) > 0)
		return (n > GW_MAX_WORKERS ? GW_MAX_WORKERS : (size_t)n);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n < 1)
		return (1);
	return (n > GW_MAX_WORKERS ? GW_MAX_WORKERS : (size_t)n);
}

/* Wake a loop. */
static void
chan_wake(struct gw_chan *ch)
{
	uint64_t one = 1;

	while (write(ch->ch_fd, &one, sizeof one) == -1 && errno == EINTR)
		/* nothing */;
}

/* The main loop takes the connections workers handed over. */
static void
chan_handoffs(struct gw *g, struct gw_chan *ch)
{
	TAILQ_HEAD(, gw_handoff) q;
	struct gw_handoff *h;

	TAILQ_INIT(&q);
	pthread_mutex_lock(&ch->ch_lock);
	TAILQ_CONCAT(&q, &ch->ch_handoffs, h_entry);
	pthread_mutex_unlock(&ch->ch_lock);
	while ((h = TAILQ_FIRST(&q)) != NULL) {
		TAILQ_REMOVE(&q, h, h_entry);
		conn_adopt(g, h->h_conn, h->h_fd, h->h_listen_port);
		free(h);
	}
}

/* A worker leaves: close everything; the deferred frees run, then exit. */
static void
worker_stop(struct gw *g)
{
	drain_stop(g);
	listener_stop(g);
	conn_close_all(g);
	upstream_pool_flush(g);
	event_del(g->g_chan->ch_ev);
	event_base_loopexit(g->g_base, NULL);
}

/* The channel's eventfd is readable: run the commands, adopt handoffs. */
static void
chan_cb(evutil_socket_t fd, short events, void *arg)
{
	struct gw *g = arg;
	struct gw_chan *ch = g->g_chan;
	uint64_t n;
	int cmds;

	(void)events;
	while (read(fd, &n, sizeof n) == -1 && errno == EINTR)
		/* nothing */;
	pthread_mutex_lock(&ch->ch_lock);
	cmds = ch->ch_cmds;
	ch->ch_cmds = 0;
	pthread_mutex_unlock(&ch->ch_lock);
	if (g->g_index == 0) {
		chan_handoffs(g, ch);
		return;
	}
	if (cmds & GW_CMD_STOP) {
		worker_stop(g);
		return;
	}
	if (cmds & GW_CMD_CONF)
		gw_conf_take(g);
	if (cmds & GW_CMD_DIR)
		(void)gw_dir(g);
	if (cmds & GW_CMD_DRAIN)
		drain_loop_start(g);
}

/* Give loop g a channel; -1 with *cause on failure. */
static int
chan_new(struct gw *g, char **cause)
{
	struct gw_chan *ch;

	ch = xcalloc(1, sizeof *ch);
	pthread_mutex_init(&ch->ch_lock, NULL);
	TAILQ_INIT(&ch->ch_handoffs);
	if ((ch->ch_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1) {
		xasprintf(cause, "eventfd: %s", strerror(errno));
		pthread_mutex_destroy(&ch->ch_lock);
		free(ch);
		return (-1);
	}
	ch->ch_ev = event_new(g->g_base, ch->ch_fd, EV_READ | EV_PERSIST,
	    chan_cb, g);
	event_add(ch->ch_ev, NULL);
	g->g_chan = ch;
	return (0);
}

/* Free a channel, closing what is still queued on it. */
static void
chan_free(struct gw_chan *ch)
{
	struct gw_handoff *h;

	if (ch == NULL)
		return;
	while ((h = TAILQ_FIRST(&ch->ch_handoffs)) != NULL) {
		TAILQ_REMOVE(&ch->ch_handoffs, h, h_entry);
		close(h->h_fd);
		conn_adopt(NULL, h->h_conn, -1, 0); /* frees it */
		free(h);
	}
	event_free(ch->ch_ev);
	close(ch->ch_fd);
	pthread_mutex_destroy(&ch->ch_lock);
	free(ch);
}

/*
 * Set up what the main loop g shares with the workers; g->g_dir is the
 * initial directory and g->g_conf decides how many workers there are.
 */
int
gw_shared_init(struct gw *g, char **cause)
{
	struct gw_shared *s;

	s = xcalloc(1, sizeof *s);
	pthread_mutex_init(&s->s_lock, NULL);
	pthread_cond_init(&s->s_conf_cond, NULL);
	s->s_nworkers = g->g_conf->cf_workers != 0 ? g->g_conf->cf_workers
						    : gw_default_workers();
	s->s_workers = xcalloc(s->s_nworkers, sizeof *s->s_workers);
	s->s_workers[0] = g;
	s->s_dir = g->g_dir;
	directory_ref(s->s_dir);
	s->s_conf = g->g_conf;
	conf_ref(s->s_conf);
	s->s_dir_gen = 1;
	g->g_dir_gen = 1;
	g->g_shared = s;
	g->g_index = 0;
	return (chan_new(g, cause));
}

/* A worker thread: run its loop until told to stop. */
static void *
worker_main(void *arg)
{
	struct gw *g = arg;

	event_base_dispatch(g->g_base);
	/* Run the deferred frees queued while stopping. */
	event_base_loop(g->g_base, EVLOOP_NONBLOCK);
	return (NULL);
}

/* Free a worker's loop once its thread has returned. */
static void
worker_free(struct gw *w)
{
	chan_free(w->g_chan);
	xchg_reap_stop(w);
	event_base_free(w->g_base);
	strbuf_free(&w->g_head);
	directory_unref(w->g_dir);
	splice_pool_free(w->g_splice);
	free(w->g_h1conf);
	free(w->g_h2conf);
	conf_free(w->g_conf);
	free(w);
}

/*
 * Start workers 1..n-1, each with its own listeners on the same ports.
 * Signals stay with the main thread.  -1 with *cause when one cannot
 * start; those already running are stopped by workers_join.
 */
int
workers_start(struct gw *g, char **cause)
{
	struct gw_shared *s = g->g_shared;
	struct gw *w;
	sigset_t all, old;
	size_t i;
	int rv = 0;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (i = 1; i < s->s_nworkers; i++) {
		w = xcalloc(1, sizeof *w);
		w->g_conf = g->g_conf;
		conf_ref(w->g_conf);
		w->g_shared = s;
		w->g_index = i;
		w->g_limits = g->g_limits;
		TAILQ_INIT(&w->g_conns);
		upstream_pool_init(w);
		w->g_splice = relay_splice_pool();
		if ((w->g_base = evio_base_new()) == NULL) {
			xasprintf(cause, "worker %zu: cannot create the event "
					 "loop", i);
			if (w->g_base != NULL)
				event_base_free(w->g_base);
			splice_pool_free(w->g_splice);
			free(w);
			rv = -1;
			break;
		}
		xchg_reap_start(w);
		if (chan_new(w, cause) != 0 || listener_start(w, cause) != 0) {
			listener_stop(w);
			worker_free(w);
			rv = -1;
			break;
		}
		if ((errno = pthread_create(&w->g_thread, NULL, worker_main,
			 w)) != 0) {
			xasprintf(cause, "worker %zu: pthread_create: %s", i,
			    strerror(errno));
			listener_stop(w);
			worker_free(w);
			rv = -1;
			break;
		}
		s->s_workers[i] = w;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return (rv);
}

/* Ask every worker (not the main loop) to run cmd. */
void
workers_post(struct gw *g, int cmd)
{
	struct gw_shared *s = g->g_shared;
	struct gw_chan *ch;
	size_t i;

	for (i = 1; s != NULL && i < s->s_nworkers; i++) {
		if (s->s_workers[i] == NULL)
			continue;
		ch = s->s_workers[i]->g_chan;
		pthread_mutex_lock(&ch->ch_lock);
		ch->ch_cmds |= cmd;
		pthread_mutex_unlock(&ch->ch_lock);
		chan_wake(ch);
	}
}

/* Stop every worker and wait for its thread (shutdown). */
void
workers_join(struct gw *g)
{
	struct gw_shared *s = g->g_shared;
	size_t i;

	workers_post(g, GW_CMD_STOP);
	for (i = 1; i < s->s_nworkers; i++) {
		if (s->s_workers[i] == NULL)
			continue;
		pthread_join(s->s_workers[i]->g_thread, NULL);
		worker_free(s->s_workers[i]);
		s->s_workers[i] = NULL;
	}
}

/* Free the shared state once every worker has been joined. */
void
gw_shared_free(struct gw *g)
{
	struct gw_shared *s = g->g_shared;

	if (s == NULL)
		return;
	chan_free(g->g_chan);
	g->g_chan = NULL;
	listener_free_tls(s->s_ctx, s->s_nctx);
	conf_free(s->s_conf);
	directory_unref(s->s_dir);
	free(s->s_workers);
	pthread_mutex_destroy(&s->s_lock);
	pthread_cond_destroy(&s->s_conf_cond);
	free(s);
	g->g_shared = NULL;
}

/*
 * The published directory moved on: take a reference to the new one and
 * close pooled connections to sandboxes it no longer has as they were.
 */
void
gw_dir_refresh(struct gw *g)
{
	struct gw_shared *s = g->g_shared;
	struct gw_directory *old = g->g_dir;

	pthread_mutex_lock(&s->s_lock);
	g->g_dir = s->s_dir;
	directory_ref(g->g_dir);
	g->g_dir_gen = s->s_dir_gen;
	pthread_mutex_unlock(&s->s_lock);
	directory_unref(old);
	upstream_pool_flush_stale(g);
}

/*
 * Publish directory nd (the main loop; its reference is consumed).  The
 * main loop routes with it at once, the workers at their next request or
 * when their channel wakes them.
 */
void
gw_dir_publish(struct gw *g, struct gw_directory *nd)
{
	struct gw_shared *s = g->g_shared;
	struct gw_directory *old = g->g_dir, *sold = NULL;

	g->g_dir = nd;
	if (s != NULL) {
		directory_ref(nd);
		pthread_mutex_lock(&s->s_lock);
		sold = s->s_dir;
		s->s_dir = nd;
		g->g_dir_gen = s->s_dir_gen + 1;
		__atomic_store_n(&s->s_dir_gen, g->g_dir_gen, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&s->s_lock);
	}
	directory_unref(sold);
	directory_unref(old);
	workers_post(g, GW_CMD_DIR);
}

/* How long a publish waits for the workers to take the configuration. */
#define GW_CONF_WAIT_MS 2000

/*
 * Publish configuration cf with its listeners' TLS contexts ctx (the main
 * loop, which has taken it itself; both references are consumed).  Each
 * worker takes it when its channel wakes it (gw_conf_take); the main loop
 * waits for that (a moment), so that when a reload is answered every loop
 * serves the new configuration.  Returns the workers that did not take it
 * in GW_CONF_WAIT_MS (they do later).
 */
size_t
gw_conf_publish(struct gw *g, struct gw_config *cf, SSL_CTX **ctx)
{
	struct gw_shared *s = g->g_shared;
	struct gw_config *old;
	struct timespec until;
	SSL_CTX **octx;
	size_t on, want = 0, i, late;

	for (i = 1; i < s->s_nworkers; i++)
		if (s->s_workers[i] != NULL)
			want++;
	pthread_mutex_lock(&s->s_lock);
	old = s->s_conf;
	octx = s->s_ctx;
	on = s->s_nctx;
	s->s_conf = cf;
	s->s_ctx = ctx;
	s->s_nctx = cf->cf_nlisten;
	s->s_conf_gen++;
	s->s_conf_taken = 0;
	g->g_conf_gen = s->s_conf_gen;
	pthread_mutex_unlock(&s->s_lock);
	listener_free_tls(octx, on);
	conf_free(old);
	workers_post(g, GW_CMD_CONF);

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += GW_CONF_WAIT_MS / 1000;
	until.tv_nsec += (GW_CONF_WAIT_MS % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&s->s_lock);
	while (s->s_conf_taken < want &&
	    pthread_cond_timedwait(&s->s_conf_cond, &s->s_lock, &until) == 0)
		/* nothing */;
	late = want - s->s_conf_taken;
	pthread_mutex_unlock(&s->s_lock);
	return (late);
}

/*
 * A worker takes the published configuration: its listeners, limits and
 * timers follow it, and it lets go of the one it had.  Connections open
 * keep working; new ones and new requests see the new values.
 */
void
gw_conf_take(struct gw *g)
{
	struct gw_shared *s = g->g_shared;
	struct gw_config *cf, *old = g->g_conf;
	SSL_CTX **ctx;
	size_t i, n;
	uint64_t gen;
	char *cause = NULL;

	pthread_mutex_lock(&s->s_lock);
	cf = s->s_conf;
	gen = s->s_conf_gen;
	conf_ref(cf);
	n = s->s_nctx;
	ctx = xcalloc(n + 1, sizeof *ctx);
	for (i = 0; i < n; i++)
		ctx[i] = s->s_ctx[i] != NULL ? tls_ctx_ref(s->s_ctx[i]) : NULL;
	pthread_mutex_unlock(&s->s_lock);
	if (cf != old) {
		/* A worker's never fails: the main loop serves what it misses. */
		(void)listener_sync(g, cf, ctx, &cause);
		g->g_conf = cf;
		gw_conf_apply(g);
	}
	listener_free_tls(ctx, n);
	conf_free(old);
	/* The main loop waits for every worker (gw_conf_publish). */
	pthread_mutex_lock(&s->s_lock);
	if (g->g_conf_gen != gen && gen == s->s_conf_gen) {
		s->s_conf_taken++;
		pthread_cond_broadcast(&s->s_conf_cond);
	}
	g->g_conf_gen = gen;
	pthread_mutex_unlock(&s->s_lock);
}

/*
 * Queue conn c (moved out of a worker's connection) for the main loop,
 * with fd its end of the socketpair the worker relays through.
 */
void
gw_handoff(struct gw *g, struct conn *c, int fd, int listen_port)
{
	struct gw_chan *ch = g->g_shared->s_workers[0]->g_chan;
	struct gw_handoff *h;

	h = xcalloc(1, sizeof *h);
	h->h_conn = c;
	h->h_fd = fd;
	h->h_listen_port = listen_port;
	pthread_mutex_lock(&ch->ch_lock);
	TAILQ_INSERT_TAIL(&ch->ch_handoffs, h, h_entry);
	pthread_mutex_unlock(&ch->ch_lock);
	chan_wake(ch);
}

/* Add one worker's counters to sum. */
static void
metrics_add(struct gw_metrics *sum, const struct gw_metrics *m)
{
	const char *code;
	size_t i, j;

	sum->m_conns_accepted += GW_LOAD(m->m_conns_accepted);
	for (i = 0; i < 6; i++)
		sum->m_requests[i] += GW_LOAD(m->m_requests[i]);
	for (i = 0; i < 2; i++)
		sum->m_requests_proto[i] += GW_LOAD(m->m_requests_proto[i]);
	sum->m_h2_conns += GW_LOAD(m->m_h2_conns);
	for (i = 0; i < GW_METRIC_CODES; i++) {
		if ((code = __atomic_load_n(&m->m_codes[i],
			 __ATOMIC_ACQUIRE)) == NULL)
			break;
		for (j = 0; j < GW_METRIC_CODES; j++) {
			if (sum->m_codes[j] == NULL)
				sum->m_codes[j] = code;
			if (strcmp(sum->m_codes[j], code) == 0) {
				sum->m_code_counts[j] +=
				    GW_LOAD(m->m_code_counts[i]);
				break;
			}
		}
	}
	sum->m_upstream_connect_failures +=
	    GW_LOAD(m->m_upstream_connect_failures);
	sum->m_upstream_retries += GW_LOAD(m->m_upstream_retries);
	sum->m_upstream_idle += GW_LOAD(m->m_upstream_idle);
	sum->m_upstream_evicted += GW_LOAD(m->m_upstream_evicted);
	sum->m_upstream_h2_conns += GW_LOAD(m->m_upstream_h2_conns);
	sum->m_upstream_h2_streams += GW_LOAD(m->m_upstream_h2_streams);
	sum->m_bytes_in += GW_LOAD(m->m_bytes_in);
	sum->m_bytes_out += GW_LOAD(m->m_bytes_out);
	sum->m_ws_active += GW_LOAD(m->m_ws_active);
	sum->m_relay_half_closed += GW_LOAD(m->m_relay_half_closed);
	for (i = 0; i <= GW_DURATION_BUCKETS; i++)
		sum->m_duration_buckets[i] += GW_LOAD(m->m_duration_buckets[i]);
	sum->m_duration_sum_us += GW_LOAD(m->m_duration_sum_us);
	sum->m_duration_count += GW_LOAD(m->m_duration_count);
	sum->m_tunnel_sessions += GW_LOAD(m->m_tunnel_sessions);
	sum->m_tunnel_links += GW_LOAD(m->m_tunnel_links);
	sum->m_tunnel_reconnects += GW_LOAD(m->m_tunnel_reconnects);
	sum->m_tunnel_resumes += GW_LOAD(m->m_tunnel_resumes);
	sum->m_tunnel_replays += GW_LOAD(m->m_tunnel_replays);
	sum->m_tunnel_requests += GW_LOAD(m->m_tunnel_requests);
	sum->m_tunnel_errors += GW_LOAD(m->m_tunnel_errors);
	sum->m_tunnel_refused += GW_LOAD(m->m_tunnel_refused);
	sum->m_drain_cut += GW_LOAD(m->m_drain_cut);
	sum->m_drain_ws_closed += GW_LOAD(m->m_drain_ws_closed);
}

/* Every worker's counters added up, and the connections open now. */
void
gw_metrics_sum(const struct gw *g, struct gw_metrics *sum, uint64_t *nconns)
{
	const struct gw_shared *s = g->g_shared;
	size_t i;

	memset(sum, 0, sizeof *sum);
	if (s == NULL) {
		metrics_add(sum, &g->g_metrics);
		*nconns = g->g_nconns;
		return;
	}
	/* Workers are only added and freed by the main loop, which is here. */
	for (i = 0; i < s->s_nworkers; i++) {
		if (s->s_workers[i] != NULL)
			metrics_add(sum, &s->s_workers[i]->g_metrics);
	}
	*nconns = __atomic_load_n(&s->s_nconns, __ATOMIC_RELAXED);
}
