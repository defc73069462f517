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
listener_tls_load(const struct gw_listen *l, SSL_CTX **ctxp, char **cause)
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
 * The TLS contexts of cf's listeners, one per listener (NULL for plain
 * HTTP), loaded by the main loop; NULL with *cause when a certificate or
 * key cannot be loaded.
 */
SSL_CTX **
listener_load_tls(const struct gw_config *cf, char **cause)
{
	SSL_CTX **ctx;
	char *why;
	size_t i;

	ctx = xcalloc(cf->cf_nlisten + 1, sizeof *ctx);
	for (i = 0; i < cf->cf_nlisten; i++) {
		if (cf->cf_listen[i].l_cert == NULL)
			continue;
		if (listener_tls_load(&cf->cf_listen[i], &ctx[i], &why) != 0) {
			xasprintf(cause, "listener %s: %s",
			    cf->cf_listen[i].l_address, why);
			free(why);
			listener_free_tls(ctx, i);
			return (NULL);
		}
	}
	return (ctx);
}

/* Free n contexts from listener_load_tls, and the array. */
void
listener_free_tls(SSL_CTX **ctx, size_t n)
{
	size_t i;

	if (ctx == NULL)
		return;
	for (i = 0; i < n; i++)
		tls_ctx_free(ctx[i]);
	free(ctx);
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

/* Do a and b listen on the same address? */
static int
listener_same(const struct gw_listen *a, const struct gw_listen *b)
{
	return (a->l_sslen == b->l_sslen &&
	    memcmp(&a->l_ss, &b->l_ss, a->l_sslen) == 0);
}

/* Set up gw_listener gl of loop g for listener i of cf (no socket yet). */
static void
listener_init(struct gw *g, struct gw_listener *gl, struct gw_config *cf,
    size_t i)
{
	memset(gl, 0, sizeof *gl);
	gl->gl_gw = g;
	gl->gl_conf = &cf->cf_listen[i];
	gl->gl_index = i;
	gl->gl_port = addr_port((const struct sockaddr *)&gl->gl_conf->l_ss);
}

/*
 * A listener on fd, a socket already listening (inherited, or bound by the
 * caller), calling cb with arg; it owns fd.  NULL (fd closed) on failure.
 */
struct evconnlistener *
listener_wrap(struct event_base *base, evconnlistener_cb cb, void *arg, int fd)
{
	struct evconnlistener *lev;

	(void)evutil_make_socket_nonblocking(fd);
	(void)evutil_make_socket_closeonexec(fd);
	lev = evconnlistener_new(
	    base, cb, arg, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
	if (lev == NULL)
		close(fd);
	return (lev);
}

/* Accept on fd, a listening socket, for gl in loop g. */
static void
listener_attach(struct gw *g, struct gw_listener *gl, int fd)
{
	int one = 1;

	gl->gl_lev = listener_wrap(g->g_base, listener_accept_cb, gl, fd);
	if (gl->gl_lev == NULL)
		return;
	/* Accepted sockets inherit it: no setsockopt per connection. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	evconnlistener_set_error_cb(gl->gl_lev, listener_error_cb);
	gl->gl_pause = listener_pause_new(g->g_base, gl->gl_lev);
}

/*
 * Open gl's socket in loop g: one inherited from an old process or from
 * systemd (upgrade.c), else a new one; -1 with *cause if it cannot bind.
 */
static int
listener_open(struct gw *g, struct gw_listener *gl, char **cause)
{
	const struct gw_listen *l = gl->gl_conf;
	struct gw_shared *s = g->g_shared;
	int many = s != NULL && s->s_nworkers > 1, fd, one = 1, e;

	if ((fd = upgrade_take_listen(&l->l_ss, l->l_sslen)) != -1) {
		listener_attach(g, gl, fd);
		if (gl->gl_lev != NULL && g->g_index == 0)
			log_info("listening on %s (inherited)", l->l_address);
		if (gl->gl_lev != NULL)
			return (0);
	}
	if (many && g->g_index == 0 && listener_probe(l) != 0)
		goto fail;
	fd = socket(l->l_ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		goto fail;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (many)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
	if (bind(fd, (const struct sockaddr *)&l->l_ss, l->l_sslen) == -1 ||
	    listen(fd, 1024) == -1) {
		e = errno;
		close(fd);
		errno = e;
		goto fail;
	}
	listener_attach(g, gl, fd);
	if (gl->gl_lev == NULL)
		goto fail;
	if (g->g_index == 0)
		log_info("listening on %s://%s%s",
		    l->l_cert != NULL ? "https" : "http", l->l_address,
		    many ? " (SO_REUSEPORT)" : "");
	return (0);
fail:
	xasprintf(cause, "cannot listen on %s: %s", l->l_address,
	    strerror(errno));
	return (-1);
}

/* Close gl's socket. */
static void
listener_close(struct gw_listener *gl)
{
	if (gl->gl_lev != NULL)
		evconnlistener_free(gl->gl_lev);
	if (gl->gl_pause != NULL)
		event_free(gl->gl_pause);
	gl->gl_lev = NULL;
	gl->gl_pause = NULL;
}

/* g's listeners moved in memory: point their callbacks at them again. */
static void
listener_repoint(struct gw *g)
{
	size_t i;

	for (i = 0; i < g->g_nlisteners; i++)
		evconnlistener_set_cb(g->g_listeners[i].gl_lev,
		    listener_accept_cb, &g->g_listeners[i]);
}

/*
 * Make loop g's listeners those of configuration cf, whose TLS contexts are
 * ctx (listener_load_tls; references are taken).  The sockets of an
 * address listened on before are kept, so nothing queued on them is lost;
 * a new address is bound; one cf no longer has is closed, and the
 * connections it accepted go on.  In the main loop a new address that
 * cannot be bound is an error (-1 with *cause) and nothing changes; a
 * worker logs it and goes on without, as the main loop serves it.
 */
int
listener_sync(struct gw *g, struct gw_config *cf, SSL_CTX **ctx, char **cause)
{
	struct gw_shared *s = g->g_shared;
	struct gw_listener *nl, *gl, *old = g->g_listeners;
	size_t i, j, n = 0, nold = g->g_nlisteners;
	size_t *kept;
	char *why = NULL;
	int found;

	nl = xcalloc(cf->cf_nlisten + nold + 1, sizeof *nl);
	kept = xcalloc(nold + 1, sizeof *kept); /* config index + 1 */
	for (i = 0; i < cf->cf_nlisten; i++) {
		for (j = 0, found = 0; j < nold; j++) {
			if (kept[j] == 0 && old[j].gl_lev != NULL &&
			    listener_same(old[j].gl_conf, &cf->cf_listen[i])) {
				kept[j] = i + 1;
				found = 1;
			}
		}
		if (found)
			continue;
		gl = &nl[n];
		listener_init(g, gl, cf, i);
		if (listener_open(g, gl, &why) == 0) {
			n++;
			continue;
		}
		if (g->g_index != 0) {
			log_warn("worker %zu: %s; the main loop serves it",
			    g->g_index, why);
			free(why);
			why = NULL;
			continue;
		}
		*cause = why;
		while (n-- > 0)
			listener_close(&nl[n]);
		free(nl);
		free(kept);
		return (-1);
	}
	/* upgrade_start reads the workers' sockets under the lock. */
	if (s != NULL && g->g_index != 0)
		pthread_mutex_lock(&s->s_lock);
	for (j = 0; j < nold; j++) {
		if (kept[j] != 0) {
			gl = &nl[n++];
			listener_init(g, gl, cf, kept[j] - 1);
			gl->gl_lev = old[j].gl_lev;
			gl->gl_pause = old[j].gl_pause;
			old[j].gl_lev = NULL;
			old[j].gl_pause = NULL;
		} else if (old[j].gl_lev != NULL && g->g_index == 0)
			log_info("no longer listening on %s; the connections "
				 "it accepted go on",
			    old[j].gl_conf->l_address);
		listener_close(&old[j]);
		tls_ctx_free(old[j].gl_ctx);
	}
	for (i = 0; i < n; i++)
		if (ctx[nl[i].gl_index] != NULL)
			nl[i].gl_ctx = tls_ctx_ref(ctx[nl[i].gl_index]);
	free(old);
	g->g_listeners = nl;
	g->g_nlisteners = n;
	listener_repoint(g);
	if (s != NULL && g->g_index != 0)
		pthread_mutex_unlock(&s->s_lock);
	free(kept);
	return (0);
}

/*
 * Accept on fd too, an inherited socket left over (upgrade_started): the
 * old process had more loops than this one.  -1 when no listener of the
 * main loop g has its address (the caller closes it).
 */
int
listener_adopt(struct gw *g, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	struct gw_listener *gl;
	size_t i;

	if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1)
		return (-1);
	for (i = 0; i < g->g_conf->cf_nlisten; i++) {
		if (g->g_conf->cf_listen[i].l_sslen != len ||
		    memcmp(&g->g_conf->cf_listen[i].l_ss, &ss, len) != 0)
			continue;
		g->g_listeners = xreallocarray(g->g_listeners,
		    g->g_nlisteners + 1, sizeof *g->g_listeners);
		gl = &g->g_listeners[g->g_nlisteners];
		listener_init(g, gl, g->g_conf, i);
		listener_attach(g, gl, fd);
		if (gl->gl_lev == NULL)
			return (0); /* closed */
		if (g->g_shared != NULL && i < g->g_shared->s_nctx &&
		    g->g_shared->s_ctx[i] != NULL)
			gl->gl_ctx = tls_ctx_ref(g->g_shared->s_ctx[i]);
		g->g_nlisteners++;
		listener_repoint(g);
		log_info("listening on %s with one more inherited socket",
		    gl->gl_conf->l_address);
		return (0);
	}
	return (-1);
}

/*
 * Open every listener of loop g's configuration; -1 with *cause if one
 * cannot bind.  The main loop loads the TLS contexts and publishes them;
 * workers take the published ones.
 */
int
listener_start(struct gw *g, char **cause)
{
	struct gw_shared *s = g->g_shared;
	SSL_CTX **ctx;
	int rv;

	if (s != NULL && g->g_index != 0)
		return (listener_sync(g, g->g_conf, s->s_ctx, cause));
	if ((ctx = listener_load_tls(g->g_conf, cause)) == NULL)
		return (-1);
	rv = listener_sync(g, g->g_conf, ctx, cause);
	if (s != NULL && rv == 0) {
		s->s_ctx = ctx;
		s->s_nctx = g->g_conf->cf_nlisten;
	} else
		listener_free_tls(ctx, g->g_conf->cf_nlisten);
	return (rv);
}

/* Close every listener. */
void
listener_stop(struct gw *g)
{
	size_t i;

	for (i = 0; i < g->g_nlisteners; i++) {
		listener_close(&g->g_listeners[i]);
		tls_ctx_free(g->g_listeners[i].gl_ctx);
	}
	free(g->g_listeners);
	g->g_listeners = NULL;
	g->g_nlisteners = 0;
}
