/*
 * Upgrading the binary without dropping a connection (SIGUSR2), and the
 * listening sockets a process starts with.
 *
 * SIGUSR2: the running process (the old one) starts its own binary again,
 * the path it was started from and the same arguments, with every
 * listening socket inherited: the public listeners of every loop (all the
 * sockets of each SO_REUSEPORT group, so nothing queued in one is lost),
 * the admin listener, and the tunnels' Port B listeners inside sandbox
 * namespaces.  AKGW_INHERIT tells the new process which descriptor is
 * which:
 *
 *	AKGW_INHERIT=fd kind key;fd kind key;...
 *
 * where kind is L (public listener), A (admin) or T (Port B, key
 * "port netns-or-address name", percent-encoded).  The new process takes
 * the sockets instead of binding (its configuration may differ: what it
 * does not declare is closed, what is new is bound), starts, and writes
 * one byte on the pipe AKGW_UPGRADE_FD names once it serves.  Then the
 * old process tells systemd the new MAINPID and drains as on SIGTERM, but
 * quietly: its copies of the sockets close and the new process goes on
 * accepting from the same sockets, so no connection is refused in
 * between.  If the new process exits before it is ready, the old one
 * logs why and goes on serving.
 *
 * A process started by systemd socket activation (LISTEN_FDS) takes those
 * sockets the same way, matched to listen: and admin: by address.
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <event2/listener.h>

#include <systemd/sd-daemon.h>

#include "addr.h"
#include "alloc.h"
#include "gw.h"

extern char **environ;

/* A socket this process was given. */
struct upgrade_sock {
	int us_fd;
	char us_kind; /* 'L', 'A', 'T', or 'S': systemd's, L or A by address */
	char *us_key; /* T: "port place name" */
	struct sockaddr_storage us_ss;
	socklen_t us_sslen;
	int us_taken;
};

/* What the process was started as, its inheritance, an upgrade under way. */
static struct {
	char *exe; /* the binary's path when we started */
	char **argv;
	struct upgrade_sock *socks;
	size_t nsocks;
	int ready_fd; /* new process: tell the old one here; -1: none */
	pid_t parent; /* new process: the old one; 0: none */
	pid_t child; /* old process: the new one, while it starts */
	int child_fd; /* ... and the pipe it says ready on */
	struct event *child_ev;
	struct event *sigchld;
	void (*drain)(struct gw *); /* hand over: main.c drains */
} up = { .ready_fd = -1, .child_fd = -1 };

/* Percent-encode s (spaces, ';', '%' and control bytes) onto f. */
static void
upgrade_escape(FILE *f, const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == ' ' || *s == ';' || *s == '%' ||
		    (unsigned char)*s < 0x21 || (unsigned char)*s >= 0x7f)
			fprintf(f, "%%%02X", (unsigned char)*s);
		else
			fputc(*s, f);
	}
}

/* A stream into *s (freed by the caller); no memory aborts, as xmalloc. */
static FILE *
upgrade_memstream(char **s, size_t *len)
{
	FILE *f;

	if ((f = open_memstream(s, len)) == NULL)
		abort();
	return (f);
}

/*
 * The key of tunnel name's Port B listener on port at place (its namespace
 * or address), as AKGW_INHERIT carries it: "port place name", each part
 * percent-encoded so it has no space or ';'.
 */
char *
upgrade_tunnel_key(const char *name, int port, const char *place)
{
	char *s = NULL;
	size_t len;
	FILE *f;

	f = upgrade_memstream(&s, &len);
	fprintf(f, "%d ", port);
	upgrade_escape(f, place);
	fputc(' ', f);
	upgrade_escape(f, name);
	fclose(f);
	return (s);
}

/* Is fd a listening TCP socket?  Its address into ss. */
static int
upgrade_is_listener(int fd, struct sockaddr_storage *ss, socklen_t *len)
{
	int v = 0;
	socklen_t vl = sizeof v;

	*len = sizeof *ss;
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl) == -1 || !v)
		return (0);
	if (getsockname(fd, (struct sockaddr *)ss, len) == -1)
		return (0);
	return (ss->ss_family == AF_INET || ss->ss_family == AF_INET6);
}

/* Remember socket fd of kind with key (or NULL). */
static void
upgrade_add(int fd, char kind, const char *key)
{
	struct upgrade_sock *us;

	up.socks = xreallocarray(up.socks, up.nsocks + 1, sizeof *up.socks);
	us = &up.socks[up.nsocks++];
	memset(us, 0, sizeof *us);
	us->us_fd = fd;
	us->us_kind = kind;
	us->us_key = key != NULL ? xstrdup(key) : NULL;
	(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (!upgrade_is_listener(fd, &us->us_ss, &us->us_sslen)) {
		log_warn("inherited descriptor %d is not a listening TCP "
			 "socket; closing it",
		    fd);
		close(fd);
		up.nsocks--;
		free(us->us_key);
	}
}

/*
 * Read one AKGW_INHERIT item, "fd kind" or "fd T key", into *fd, *kind and
 * *key (a pointer into item, or NULL): -1 when it is malformed.  A
 * descriptor is 3 or more (0-2 are never passed); only T has a key.
 */
int
upgrade_parse_item(const char *item, int *fd, char *kind, const char **key)
{
	const char *p = item;
	long v = 0;

	/* Digits as the writer prints them: no sign, no leading zero. */
	if (*p < '1' || *p > '9')
		return (-1);
	while (*p >= '0' && *p <= '9') {
		v = v * 10 + (*p++ - '0');
		if (v > INT_MAX)
			return (-1);
	}
	if (v < 3 || *p++ != ' ' || (*p != 'L' && *p != 'A' && *p != 'T'))
		return (-1);
	*kind = *p++;
	*fd = (int)v;
	*key = NULL;
	if (*kind != 'T')
		return (*p == '\0' ? 0 : -1);
	if (*p++ != ' ' || *p == '\0')
		return (-1);
	*key = p;
	return (0);
}

/* Take the sockets AKGW_INHERIT names (see the top of the file). */
static void
upgrade_parse(const char *v)
{
	char *copy, *item, *save = NULL;
	const char *key;
	char kind;
	int fd;

	copy = xstrdup(v);
	for (item = strtok_r(copy, ";", &save); item != NULL;
	     item = strtok_r(NULL, ";", &save)) {
		if (upgrade_parse_item(item, &fd, &kind, &key) != 0) {
			log_warn("AKGW_INHERIT: cannot read '%s'; ignored", item);
			continue;
		}
		upgrade_add(fd, kind, key);
	}
	free(copy);
}

/*
 * At start: remember how to start this binary again (argv) and how to hand
 * over (drain, once a new process serves), and take the sockets an old
 * process (AKGW_INHERIT) or systemd (LISTEN_FDS) passed.
 */
void
upgrade_init(int argc, char **argv, void (*drain)(struct gw *))
{
	char path[PATH_MAX], *v;
	ssize_t n;
	int i, nfds;

	up.drain = drain;
	up.argv = xcalloc((size_t)argc + 1, sizeof *up.argv);
	for (i = 0; i < argc; i++)
		up.argv[i] = xstrdup(argv[i]);
	if ((n = readlink("/proc/self/exe", path, sizeof path - 1)) > 0) {
		path[n] = '\0';
		up.exe = xstrdup(path);
	} else
		up.exe = xstrdup(argv[0]);

	if ((v = getenv("AKGW_INHERIT")) != NULL)
		upgrade_parse(v);
	if ((v = getenv("AKGW_UPGRADE_FD")) != NULL) {
		up.ready_fd = atoi(v);
		(void)fcntl(up.ready_fd, F_SETFD, FD_CLOEXEC);
	}
	if ((v = getenv("AKGW_PARENT")) != NULL) {
		up.parent = (pid_t)atol(v);
		/* systemd's watchdog follows MAINPID to us. */
		v = getenv("WATCHDOG_PID");
		if (v != NULL && (pid_t)atol(v) == up.parent) {
			snprintf(path, sizeof path, "%ld", (long)getpid());
			setenv("WATCHDOG_PID", path, 1);
		}
	}
	unsetenv("AKGW_INHERIT");
	unsetenv("AKGW_UPGRADE_FD");
	unsetenv("AKGW_PARENT");
	if ((nfds = sd_listen_fds(1)) > 0) {
		for (i = 0; i < nfds; i++)
			upgrade_add(SD_LISTEN_FDS_START + i, 'S', NULL);
	}
}

/* Take an unused socket of kind (or systemd's) on address ss; -1: none. */
static int
upgrade_take_addr(char kind, const struct sockaddr_storage *ss, socklen_t len)
{
	struct upgrade_sock *us;
	size_t i;

	for (i = 0; i < up.nsocks; i++) {
		us = &up.socks[i];
		if (us->us_taken || (us->us_kind != kind && us->us_kind != 'S'))
			continue;
		if (us->us_sslen != len || memcmp(&us->us_ss, ss, len) != 0)
			continue;
		us->us_taken = 1;
		return (us->us_fd);
	}
	return (-1);
}

/* An inherited public listener on ss, or -1: bind one. */
int
upgrade_take_listen(const struct sockaddr_storage *ss, socklen_t len)
{
	return (upgrade_take_addr('L', ss, len));
}

/* The inherited admin listener on ss, or -1. */
int
upgrade_take_admin(const struct sockaddr_storage *ss, socklen_t len)
{
	return (upgrade_take_addr('A', ss, len));
}

/* The inherited Port B listener of tunnel name:port at place, or -1. */
int
upgrade_take_tunnel(const char *name, int port, const char *place)
{
	struct upgrade_sock *us;
	char *key;
	size_t i;
	int fd = -1;

	if (up.nsocks == 0)
		return (-1);
	key = upgrade_tunnel_key(name, port, place);
	for (i = 0; i < up.nsocks; i++) {
		us = &up.socks[i];
		if (us->us_taken || us->us_kind != 'T' ||
		    strcmp(us->us_key, key) != 0)
			continue;
		us->us_taken = 1;
		fd = us->us_fd;
		break;
	}
	free(key);
	return (fd);
}

/*
 * Every loop has started: the public sockets left over (the old process
 * had more loops than this one) are accepted from by the main loop, so
 * what is queued on them is not lost; the rest this configuration does
 * not declare are closed.
 */
void
upgrade_started(struct gw *g)
{
	struct upgrade_sock *us;
	size_t i;

	for (i = 0; i < up.nsocks; i++) {
		us = &up.socks[i];
		if (us->us_taken)
			continue;
		us->us_taken = 1;
		if (us->us_kind != 'T' && us->us_kind != 'A' &&
		    listener_adopt(g, us->us_fd) == 0)
			continue;
		log_info("an inherited listening socket (descriptor %d) is "
			 "not in this configuration; closing it",
		    us->us_fd);
		close(us->us_fd);
	}
	for (i = 0; i < up.nsocks; i++)
		free(up.socks[i].us_key);
	free(up.socks);
	up.socks = NULL;
	up.nsocks = 0;
}

/* New process: it serves; tell the old one, which then drains. */
void
upgrade_ready(void)
{
	char c = 'R';

	if (up.ready_fd == -1)
		return;
	while (write(up.ready_fd, &c, 1) == -1 && errno == EINTR)
		/* nothing */;
	close(up.ready_fd);
	up.ready_fd = -1;
	log_info(
	    "took over from process %ld, which now drains", (long)up.parent);
}

/* Old process: the new one is gone; reap it and say how it ended. */
static void
upgrade_reap(void)
{
	int status;
	pid_t pid;

	if (up.child == 0)
		return;
	if ((pid = waitpid(up.child, &status, WNOHANG)) != up.child)
		return;
	if (WIFEXITED(status))
		log_error("upgrade: the new process %ld exited with status %d "
			  "before it was ready; this one goes on serving "
			  "(its log says why)",
		    (long)pid, WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		log_error("upgrade: the new process %ld was killed by signal "
			  "%d before it was ready; this one goes on serving",
		    (long)pid, WTERMSIG(status));
	up.child = 0;
}

/* Old process: the pipe the new process says ready on. */
static void
upgrade_child_cb(evutil_socket_t fd, short events, void *arg)
{
	struct gw *g = arg;
	ssize_t n;
	char c;

	(void)events;
	n = read(fd, &c, 1);
	if (n == -1 && (errno == EINTR || errno == EAGAIN))
		return;
	event_free(up.child_ev);
	up.child_ev = NULL;
	close(up.child_fd);
	up.child_fd = -1;
	if (n == 1 && c == 'R') {
		log_info("upgrade: the new process %ld serves; draining this "
			 "one",
		    (long)up.child);
		(void)sd_notifyf(
		    0, "MAINPID=%ld\nSTATUS=upgraded", (long)up.child);
		up.child = 0; /* init reaps it once we are gone */
		up.drain(g);
		return;
	}
	/* Closed without a word: it failed.  Its exit status is logged
	 * here, or by SIGCHLD when it comes a moment later. */
	upgrade_reap();
}

/*
 * SIGCHLD: reap a new process that failed (and say so), or one that took
 * over and then died while this one drains.
 */
static void
upgrade_sigchld_cb(evutil_socket_t sig, short events, void *arg)
{
	int status;

	(void)sig;
	(void)events;
	(void)arg;
	upgrade_reap();
	while (waitpid(-1, &status, WNOHANG) > 0)
		/* nothing */;
}

/* Append "fd kind key;" for socket fd to f, and fd to the list. */
static void
upgrade_list(
    FILE *f, int *fds, size_t *nfds, int fd, char kind, const char *key)
{
	if (fd < 0)
		return;
	fprintf(f, "%d %c", fd, kind);
	if (key != NULL)
		fprintf(f, " %s", key);
	fputc(';', f);
	fds[(*nfds)++] = fd;
}

/*
 * SIGUSR2 (the main loop): start the new binary with every listening
 * socket.  The sockets are collected under the shared lock, so no worker
 * swaps its listeners (a reload) meanwhile.
 */
void
upgrade_start(struct gw *g)
{
	struct gw_shared *s = g->g_shared;
	struct gw *w;
	char **env, *key, *inherit = NULL;
	int *fds, pipefd[2];
	size_t i, j, nfds = 0, maxfds = 8, nenv, len;
	pid_t pid;
	FILE *f;

	if (up.child != 0) {
		log_warn("received SIGUSR2, but process %ld is still starting "
			 "as the upgrade; ignored",
		    (long)up.child);
		return;
	}
	if (gw_draining(g)) {
		log_warn("received SIGUSR2 while draining; ignored");
		return;
	}
	log_info(
	    "received SIGUSR2, starting %s with the listening sockets", up.exe);
	for (i = 0; i < s->s_nworkers; i++)
		if ((w = s->s_workers[i]) != NULL)
			maxfds += w->g_nlisteners;
	maxfds += tunnel_count(g);
	fds = xcalloc(maxfds, sizeof *fds);
	f = upgrade_memstream(&inherit, &len);
	fputs("AKGW_INHERIT=", f);
	pthread_mutex_lock(&s->s_lock);
	for (i = 0; i < s->s_nworkers; i++) {
		if ((w = s->s_workers[i]) == NULL)
			continue;
		for (j = 0; j < w->g_nlisteners && nfds < maxfds; j++)
			if (w->g_listeners[j].gl_lev != NULL)
				upgrade_list(f, fds, &nfds,
				    evconnlistener_get_fd(
					w->g_listeners[j].gl_lev),
				    'L', NULL);
	}
	if (g->g_admin != NULL)
		upgrade_list(f, fds, &nfds, admin_fd(g), 'A', NULL);
	for (i = 0; nfds < maxfds; i++) {
		const char *name, *place;
		int port, fd;

		if ((fd = tunnel_listen_fd(g, i, &name, &port, &place)) == -2)
			break;
		if (fd == -1)
			continue;
		key = upgrade_tunnel_key(name, port, place);
		upgrade_list(f, fds, &nfds, fd, 'T', key);
		free(key);
	}
	fclose(f);
	if (pipe2(pipefd, O_CLOEXEC) == -1) {
		pthread_mutex_unlock(&s->s_lock);
		log_error("upgrade: pipe: %s", strerror(errno));
		goto out;
	}
	/* The environment, built before fork: the child only execs. */
	for (nenv = 0; environ[nenv] != NULL; nenv++)
		/* count */;
	env = xcalloc(nenv + 4, sizeof *env);
	for (i = 0, j = 0; i < nenv; i++)
		if (strncmp(environ[i], "AKGW_", 5) != 0 &&
		    strncmp(environ[i], "LISTEN_", 7) != 0)
			env[j++] = environ[i];
	env[j++] = inherit;
	xasprintf(&env[j++], "AKGW_UPGRADE_FD=%d", pipefd[1]);
	xasprintf(&env[j++], "AKGW_PARENT=%ld", (long)getpid());
	pid = fork();
	if (pid == 0) {
		for (i = 0; i < nfds; i++)
			(void)fcntl(fds[i], F_SETFD, 0);
		(void)fcntl(pipefd[1], F_SETFD, 0);
		execve(up.exe, up.argv, env);
		_exit(127);
	}
	pthread_mutex_unlock(&s->s_lock);
	close(pipefd[1]);
	free(env[j - 1]);
	free(env[j - 2]);
	free(env);
	if (pid == -1) {
		log_error("upgrade: fork: %s", strerror(errno));
		close(pipefd[0]);
		goto out;
	}
	up.child = pid;
	up.child_fd = pipefd[0];
	up.child_ev = event_new(
	    g->g_base, pipefd[0], EV_READ | EV_PERSIST, upgrade_child_cb, g);
	event_add(up.child_ev, NULL);
	if (up.sigchld == NULL) {
		up.sigchld = evsignal_new(
		    g->g_base, SIGCHLD, upgrade_sigchld_cb, NULL);
		evsignal_add(up.sigchld, NULL);
	}
	log_info("upgrade: started process %ld with %zu listening sockets; "
		 "it takes over once it serves",
	    (long)pid, nfds);
out:
	free(inherit);
	free(fds);
}

/* Free what upgrade_init kept (at exit). */
void
upgrade_free(void)
{
	size_t i;

	if (up.child_ev != NULL)
		event_free(up.child_ev);
	if (up.sigchld != NULL)
		event_free(up.sigchld);
	if (up.child_fd != -1)
		close(up.child_fd);
	for (i = 0; up.argv != NULL && up.argv[i] != NULL; i++)
		free(up.argv[i]);
	free(up.argv);
	free(up.exe);
	for (i = 0; i < up.nsocks; i++) {
		close(up.socks[i].us_fd);
		free(up.socks[i].us_key);
	}
	free(up.socks);
	memset(&up, 0, sizeof up);
	up.ready_fd = up.child_fd = -1;
}
