/*
 * Public listeners, and the accept back-off every listener of the program
 * uses: when the process runs out of file descriptors, accepting pauses
 * for a second instead of spinning on a listener that stays readable.
 */
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/listener.h>

#include "addr.h"
#include "alloc.h"
#include "gw.h"
#include "tls.h"

/* Accept callback: hand the socket to a new connection. */
static void
listener_accept_cb(struct evconnlistener *lev, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct gw_listener *gl = arg;

	(void)lev;
	conn_accept(gl->gl_gw, fd, sa, salen, gl);
}

/* The pause is over: accept again. */
static void
listener_resume_cb(evutil_socket_t fd, short events, void *arg)
{
	(void)fd;
	(void)events;
	evconnlistener_enable(arg);
}

/*
 * The timer that ends lev's accept pause (listener_backoff); its owner
 * frees it with the listener.
 */
struct event *
listener_pause_new(struct event_base *base, struct evconnlistener *lev)
{
	return (evtimer_new(base, listener_resume_cb, lev));
}

/*
 * accept(2) failed on lev, which fmt names in the log.  When the process
 * is out of descriptors or memory the listener would stay readable and
 * the loop spin, so accepting stops for LISTENER_PAUSE_MS: pause (from
 * listener_pause_new) turns it back on, or without one its owner does.
 * Every listener's accept errors come here.  Returns 1 when it paused.
 */
int
listener_backoff(
    struct evconnlistener *lev, struct event *pause, const char *fmt, ...)
{
	struct timeval tv = { LISTENER_PAUSE_MS / 1000,
		(LISTENER_PAUSE_MS % 1000) * 1000 };
	int e = EVUTIL_SOCKET_ERROR();
	char what[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
		log_warn("%s: %s; pausing accept for %dms", what, strerror(e),
		    LISTENER_PAUSE_MS);
		evconnlistener_disable(lev);
		if (pause != NULL)
			evtimer_add(pause, &tv);
		return (1);
	}
	log_warn("%s: accept: %s", what, strerror(e));
	return (0);
}

/* accept(2) failed on a public listener. */
static void
listener_error_cb(struct evconnlistener *lev, void *arg)
{
	struct gw_listener *gl = arg;

	listener_backoff(
	    lev, gl->gl_pause, "listener %s", gl->gl_conf->l_address);
}

/* ALPN of a listener with HTTP/2: h2 first, as clients expect. */
static const char *const listener_alpn_h2[] = { "h2", "http/1.1" };

/* Build the TLS context and SNI map of a listener. */
static int
listener_tls_load(struct gw_listen *l, SSL_CTX **ctxp, char **cause)
{
	SSL_CTX *ctx, *sctx;
	struct tls_sni *sni = NULL;
	size_t i, j;

	if ((ctx = tls_server_ctx_new(l->l_cert, l->l_key, cause)) == NULL)
		return (-1);
	if (l->l_http2)
		(void)tls_server_set_alpn(ctx, listener_alpn_h2, 2);
	if (l->l_nsni > 0) {
		sni = tls_sni_new();
		for (i = 0; i < l->l_nsni; i++) {
			sctx = tls_server_ctx_new(
			    l->l_sni[i].sn_cert, l->l_sni[i].sn_key, cause);
			if (sctx == NULL) {
				tls_sni_free(sni);
				tls_ctx_free(ctx);
				return (-1);
			}
			/* The context SNI picks is the one ALPN asks. */
			if (l->l_http2)
				(void)tls_server_set_alpn(
				    sctx, listener_alpn_h2, 2);
			for (j = 0; j < l->l_sni[i].sn_count; j++)
				tls_sni_add(sni, l->l_sni[i].sn_names[j], sctx);
			tls_ctx_free(sctx); /* the map holds references */
		}
		tls_sni_attach(ctx, sni); /* ctx owns the map now */
	}
	*ctxp = ctx;
	return (0);
}

/*
 * Reload every TLS listener's certificates (SIGHUP, the main loop).  New
 * connections get the new ones, on every worker; connections already
 * open keep theirs.  A listener whose files fail to load keeps serving
 * its old certificates.
 */
void
listener_reload_tls(struct gw *g)
{
	struct gw_shared *s = g->g_shared;
	struct gw_listener *gl;
	SSL_CTX *ctx, *old;
	char *cause;
	size_t i;

	for (i = 0; i < g->g_nlisteners; i++) {
		gl = &g->g_listeners[i];
		if (gl->gl_ctx == NULL)
			continue;
		if (listener_tls_load(gl->gl_conf, &ctx, &cause) != 0) {
			log_error("listener %s: certificates not reloaded, the "
				  "old ones stay in use: %s",
			    gl->gl_conf->l_address, cause);
			free(cause);
			continue;
		}
		/* Handshakes in progress keep the old context alive. */
		tls_ctx_free(gl->gl_ctx);
		gl->gl_ctx = ctx;
		if (s != NULL && i < s->s_nctx) {
			pthread_mutex_lock(&s->s_lock);
			old = s->s_ctx[i];
			s->s_ctx[i] = tls_ctx_ref(ctx);
			pthread_mutex_unlock(&s->s_lock);
			tls_ctx_free(old);
		}
		log_info("listener %s: certificates reloaded",
		    gl->gl_conf->l_address);
	}
	workers_post(g, GW_CMD_RELOAD_TLS);
}

/* A worker takes the TLS contexts the main loop published. */
void
listener_take_tls(struct gw *g)
{
	struct gw_shared *s = g->g_shared;
	struct gw_listener *gl;
	SSL_CTX *old;
	size_t i;

	for (i = 0; i < g->g_nlisteners && i < s->s_nctx; i++) {
		gl = &g->g_listeners[i];
		if (gl->gl_ctx == NULL)
			continue;
		old = gl->gl_ctx;
		pthread_mutex_lock(&s->s_lock);
		gl->gl_ctx = tls_ctx_ref(s->s_ctx[i]);
		pthread_mutex_unlock(&s->s_lock);
		tls_ctx_free(old);
	}
}

/*
 * Several loops share a port through SO_REUSEPORT, which would as gladly
 * share it with another process of the same user.  Bind it once without
 * the option first, so a port in use is still an error.
 */
static int
listener_probe(const struct gw_listen *l)
{
	int fd, one = 1, e;

	fd = socket(l->l_ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return (-1);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (const struct sockaddr *)&l->l_ss, l->l_sslen) == -1) {
		e = errno;
		close(fd);
		errno = e;
		return (-1);
	}
	close(fd);
	return (0);
}

/*
 * Open every configured listener of loop g; -1 with *cause if one cannot
 * bind.  The main loop loads the TLS contexts; workers share them.
 */
int
listener_start(struct gw *g, char **cause)
{
	struct gw_config *cf = g->g_conf;
	struct gw_shared *s = g->g_shared;
	struct gw_listener *gl;
	unsigned flags;
	size_t i;
	int many = s != NULL && s->s_nworkers > 1, one;

	flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
	    LEV_OPT_CLOSE_ON_EXEC;
	if (many)
		flags |= LEV_OPT_REUSEABLE_PORT;
	g->g_listeners = xcalloc(cf->cf_nlisten, sizeof *g->g_listeners);
	if (s != NULL && g->g_index == 0) {
		s->s_ctx = xcalloc(cf->cf_nlisten, sizeof *s->s_ctx);
		s->s_nctx = cf->cf_nlisten;
	}
	for (i = 0; i < cf->cf_nlisten; i++) {
		gl = &g->g_listeners[i];
		gl->gl_gw = g;
		gl->gl_conf = &cf->cf_listen[i];
		gl->gl_port = addr_port((struct sockaddr *)&gl->gl_conf->l_ss);
		if (gl->gl_conf->l_cert != NULL && s != NULL &&
		    g->g_index != 0) {
			pthread_mutex_lock(&s->s_lock);
			gl->gl_ctx = tls_ctx_ref(s->s_ctx[i]);
			pthread_mutex_unlock(&s->s_lock);
		} else if (gl->gl_conf->l_cert != NULL) {
			if (listener_tls_load(gl->gl_conf, &gl->gl_ctx,
				cause) != 0)
				return (-1);
			if (s != NULL)
				s->s_ctx[i] = tls_ctx_ref(gl->gl_ctx);
		}
		if (many && g->g_index == 0 &&
		    listener_probe(gl->gl_conf) != 0) {
			xasprintf(cause, "cannot listen on %s: %s",
			    gl->gl_conf->l_address, strerror(errno));
			return (-1);
		}
		gl->gl_lev = evconnlistener_new_bind(g->g_base,
		    listener_accept_cb, gl, flags, 1024,
		    (struct sockaddr *)&gl->gl_conf->l_ss,
		    (int)gl->gl_conf->l_sslen);
		if (gl->gl_lev == NULL) {
			xasprintf(cause, "cannot listen on %s: %s",
			    gl->gl_conf->l_address, strerror(errno));
			return (-1);
		}
		g->g_nlisteners++;
		/* Accepted sockets inherit it: no setsockopt per connection. */
		one = 1;
		setsockopt(evconnlistener_get_fd(gl->gl_lev), IPPROTO_TCP,
		    TCP_NODELAY, &one, sizeof one);
		evconnlistener_set_error_cb(gl->gl_lev, listener_error_cb);
		gl->gl_pause = listener_pause_new(g->g_base, gl->gl_lev);
		if (g->g_index == 0)
			log_info("listening on %s://%s%s",
			    gl->gl_ctx != NULL ? "https" : "http",
			    gl->gl_conf->l_address,
			    many ? " (SO_REUSEPORT)" : "");
	}
	return (0);
}

/* Close every listener. */
void
listener_stop(struct gw *g)
{
	size_t i;

	for (i = 0; i < g->g_nlisteners; i++) {
		evconnlistener_free(g->g_listeners[i].gl_lev);
		event_free(g->g_listeners[i].gl_pause);
		tls_ctx_free(g->g_listeners[i].gl_ctx);
	}
	free(g->g_listeners);
	g->g_listeners = NULL;
	g->g_nlisteners = 0;
}
