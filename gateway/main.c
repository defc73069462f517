/*
 * akgateway: options, configuration, signals and the event loop.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "alloc.h"
#include "gw.h"
#include "splicer.h"
#include "tls.h"

/* Print the usage of akgateway and of its subcommands to f. */
static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: akgateway [-c FILE] [--check] [--version] [--help]\n"
	    "       akgateway token --sandbox ID (--port N | --all-ports | "
	    "--tunnel)\n"
	    "                       --ttl DURATION [-c FILE]\n"
	    "       akgateway tunnel-server [--ws ADDR] [--listen ADDR] "
	    "[--token T]\n"
	    "                               [--client-wait D] "
	    "[--http-timeout D] [-v]\n"
	    "\n"
	    "The public entry for sandbox port URLs.\n"
	    "\n"
	    "  -c, --config FILE  read the configuration from FILE; without\n"
	    "                     it a built-in default serves 127.0.0.1:8080\n"
	    "                     for a sandbox 'local' at 127.0.0.1\n"
	    "      --check        check the configuration, print any error\n"
	    "                     as file:line:column, and exit\n"
	    "  -V, --version      print the version and exit\n"
	    "  -h, --help         print this help and exit\n"
	    "\n"
	    "Try: make run, then curl http://8000-local.localhost:8080/\n");
	if (f != stdout)
		return;
	/* The whole help: each subcommand's own text, written once. */
	fprintf(f, "\n");
	tokencmd_usage(f);
	fprintf(f, "\n");
	tsrv_usage(f);
}

/*
 * SIGHUP: read the configuration file again and apply all of it without
 * dropping a connection (reload.c); a file with an error is refused and
 * the running configuration stays.
 */
static void
main_sighup_cb(evutil_socket_t sig, short events, void *arg)
{
	char *cause = NULL;

	(void)sig;
	(void)events;
	if (reload_run(arg, "SIGHUP", &cause) != 0)
		free(cause); /* reload_run logged it */
}

/* SIGUSR1: open the log file again under its name (logrotate). */
static void
main_sigusr1_cb(evutil_socket_t sig, short events, void *arg)
{
	char *cause = NULL;

	(void)sig;
	(void)events;
	(void)arg;
	switch (log_reopen(&cause)) {
	case 0:
		log_info("received SIGUSR1, reopened the log file");
		break;
	case 1:
		log_info("received SIGUSR1; the log goes to stderr, there is "
			 "no file to reopen");
		break;
	default:
		log_error("received SIGUSR1: %s; still writing to the old "
			  "file",
		    cause);
		free(cause);
		break;
	}
}

/* SIGUSR2: start the new binary with the listening sockets (upgrade.c). */
static void
main_sigusr2_cb(evutil_socket_t sig, short events, void *arg)
{
	(void)sig;
	(void)events;
	upgrade_start(arg);
}

/*
 * Stop now: close everything, tell the workers, leave the loop.  A stop
 * says STOPPING=1 to systemd itself; a hand-over (upgrade) does not.
 */
static void
main_stop(struct gw *g)
{
	sdnotify_watchdog_stop(g);
	drain_stop(g);
	listener_stop(g);
	admin_stop(g);
	tunnel_shutdown(g); /* tunnel.c */
	conn_close_all(g);
	upstream_pool_flush(g);
	workers_post(g, GW_CMD_STOP); /* joined once this loop is left */
	event_del(g->g_sigint);
	event_del(g->g_sigterm);
	event_del(g->g_sigquit);
	event_del(g->g_sighup);
	event_del(g->g_sigusr1);
	event_del(g->g_sigusr2);
	/* Let the deferred frees run, then leave. */
	event_base_loopexit(g->g_base, NULL);
}

/* The name of a stopping signal, for the log. */
static const char *
main_signame(int sig)
{
	switch (sig) {
	case SIGINT:
		return ("SIGINT");
	case SIGQUIT:
		return ("SIGQUIT");
	default:
		return ("SIGTERM");
	}
}

/*
 * SIGTERM (or SIGQUIT): drain (drain.c), for up to timeouts.drain; a
 * second one, or SIGINT, stops at once.
 */
static void
main_signal_cb(evutil_socket_t sig, short events, void *arg)
{
	struct gw *g = arg;
	uint64_t ms = g->g_conf->cf_drain_timeout;
	const char *name = main_signame(sig);

	(void)events;
	if (gw_draining(g)) {
		log_info("received %s while draining, stopping now", name);
		sdnotify_stopping();
		main_stop(g);
		return;
	}
	if (sig == SIGINT || ms == 0) {
		log_info("received %s, stopping", name);
		sdnotify_stopping();
		main_stop(g);
		return;
	}
	log_info("received %s, draining (up to %llu%s)", name,
	    (unsigned long long)(ms % 1000 == 0 ? ms / 1000 : ms),
	    ms % 1000 == 0 ? "s" : "ms");
	sdnotify_stopping();
	drain_start(g, ms, 0, main_stop);
}

/*
 * The new process serves (upgrade.c): this one drains as on SIGTERM, its
 * copies of the listening sockets closed (the new process accepts on
 * them), without STOPPING=1: the service goes on.
 */
static void
main_handover(struct gw *g)
{
	if (g->g_conf->cf_drain_timeout == 0)
		main_stop(g);
	else
		drain_start(
		    g, g->g_conf->cf_drain_timeout, DRAIN_F_UPGRADE, main_stop);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = { { "config", required_argument,
						      NULL, 'c' },
		{ "check", no_argument, NULL, 'C' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
	struct gw g;
	struct gw_config *cf;
	const char *file = NULL;
	char *cause = NULL;
	int ch, check = 0;

	if (argc > 1 && strcmp(argv[1], "token") == 0)
		return (tokencmd_main(argc - 1, argv + 1));
	if (argc > 1 && strcmp(argv[1], "tunnel-server") == 0)
		return (tunnelsrv_main(argc - 1, argv + 1)); /* tunnelsrv.c */
	while ((ch = getopt_long(argc, argv, "c:Vh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			file = optarg;
			break;
		case 'C':
			check = 1;
			break;
		case 'V':
			printf("akgateway %s\n", AK_VERSION);
			return (0);
		case 'h':
			usage(stdout);
			return (0);
		default:
			usage(stderr);
			return (2);
		}
	}
	if (optind != argc) {
		fprintf(stderr, "akgateway: unexpected argument '%s'\n",
		    argv[optind]);
		usage(stderr);
		return (2);
	}

	tls_init();
	/* Sockets passed by an old process or systemd (upgrade.c). */
	upgrade_init(argc, argv, main_handover);
	if (file != NULL)
		cf = conf_load(file, &cause);
	else
		cf = conf_load_string(CONF_BUILTIN_NAME, conf_builtin, &cause);
	if (cf == NULL) {
		fprintf(stderr, "akgateway: %s\n", cause);
		free(cause);
		return (1);
	}
	if (check) {
		printf("akgateway: %s: configuration is valid\n",
		    file != NULL ? file : "<built-in>");
		conf_free(cf);
		return (0);
	}
	if (log_open(cf->cf_log_level, cf->cf_log_format, cf->cf_log_file,
		&cause) != 0) {
		fprintf(stderr, "akgateway: %s\n", cause);
		free(cause);
		conf_free(cf);
		return (1);
	}

	memset(&g, 0, sizeof g);
	g.g_conf = cf;
	g.g_reload_time = (uint64_t)time(NULL);
	gw_conf_apply(&g);
	g.g_dir = directory_new(cf->cf_sandboxes, cf->cf_nsandboxes);
	TAILQ_INIT(&g.g_conns);
	upstream_pool_init(&g);
	g.g_splice = relay_splice_pool();
	evio_malloc_tune();
	if ((g.g_base = evio_base_new()) == NULL) {
		fprintf(stderr, "akgateway: cannot create the event loop\n");
		return (1);
	}
	xchg_reap_start(&g);
	signal(SIGPIPE, SIG_IGN);
	g.g_sigint = evsignal_new(g.g_base, SIGINT, main_signal_cb, &g);
	g.g_sigterm = evsignal_new(g.g_base, SIGTERM, main_signal_cb, &g);
	/* SIGQUIT drains too (nginx's graceful stop), rather than dumping. */
	g.g_sigquit = evsignal_new(g.g_base, SIGQUIT, main_signal_cb, &g);
	evsignal_add(g.g_sigquit, NULL);
	evsignal_add(g.g_sigint, NULL);
	evsignal_add(g.g_sigterm, NULL);
	g.g_sighup = evsignal_new(g.g_base, SIGHUP, main_sighup_cb, &g);
	evsignal_add(g.g_sighup, NULL);
	g.g_sigusr1 = evsignal_new(g.g_base, SIGUSR1, main_sigusr1_cb, &g);
	evsignal_add(g.g_sigusr1, NULL);
	g.g_sigusr2 = evsignal_new(g.g_base, SIGUSR2, main_sigusr2_cb, &g);
	evsignal_add(g.g_sigusr2, NULL);

	if (gw_shared_init(&g, &cause) != 0 ||
	    listener_start(&g, &cause) != 0) {
		log_error("%s", cause);
		free(cause);
		return (1);
	}
	if (admin_start(&g, &cause) != 0) {
		log_error("%s", cause);
		free(cause);
		return (1);
	}
	tunnel_sync(&g); /* tunnel.c: Port B listeners of terminate tunnels */
	if (workers_start(&g, &cause) != 0) {
		log_error("%s", cause);
		free(cause);
		workers_join(&g);
		return (1);
	}
	upgrade_started(&g); /* sockets left over: adopted or closed */
	memtrim_start(&g); /* memtrim.c */
	log_info("akgateway %s started with %s (%zu sandboxes, %zu worker%s, "
		 "pid %ld)",
	    AK_VERSION, file != NULL ? file : "the built-in configuration",
	    cf->cf_nsandboxes, g.g_shared->s_nworkers,
	    g.g_shared->s_nworkers == 1 ? "" : "s", (long)getpid());
	sdnotify_ready(); /* sdnotify.c: systemd's Type=notify */
	upgrade_ready(); /* an old process hands over and drains */
	sdnotify_watchdog_start(&g);
	event_base_dispatch(g.g_base);
	/* Run the deferred frees queued while stopping. */
	event_base_loop(g.g_base, EVLOOP_NONBLOCK);
	workers_join(&g);
	memtrim_stop(&g);
	sdnotify_watchdog_stop(&g);
	gw_shared_free(&g);

	event_free(g.g_sigint);
	event_free(g.g_sigterm);
	event_free(g.g_sigquit);
	event_free(g.g_sighup);
	event_free(g.g_sigusr1);
	event_free(g.g_sigusr2);
	upgrade_free();
	xchg_reap_stop(&g);
	event_base_free(g.g_base);
	strbuf_free(&g.g_head);
	splice_pool_free(g.g_splice);
	free(g.g_h1conf);
	free(g.g_h2conf);
	directory_unref(g.g_dir);
	reload_free(&g);
	conf_free(g.g_conf);
	log_info("stopped");
	log_close();
	return (0);
}
