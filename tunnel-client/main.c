/*
 * aktunnel: carries a sandbox's reverse tunnel to a service on this machine.
 * Exit status: 0 for --help, --version and a stop by SIGINT or SIGTERM, 1
 * for a setup error (a trust file that does not load, ...), 2 for bad usage
 * (flags or environment), 3 when another client took the tunnel over, 4
 * when the gateway refused the credential TUN_AUTH_TRIES times in a row.
 * Other connection problems are never fatal: aktunnel dials again until it
 * is stopped.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "alloc.h"
#include "evio.h"
#include "log.h"
#include "stream.h"
#include "tun.h"

/* Print the usage text: every flag and every environment variable. */
void
main_usage(FILE *f)
{
	fprintf(f,
	    "usage: aktunnel --gateway ADDR --sandbox ID --target URL "
	    "[options]\n"
	    "\n"
	    "Carries the reverse tunnel of sandbox ID through the gateway at "
	    "ADDR, so\n"
	    "that code in the sandbox calling http://127.0.0.1:LISTEN_PORT "
	    "reaches URL.\n"
	    "\n"
	    "  --gateway ADDR          gateway address: host[:port] or ws://, "
	    "http://\n"
	    "                          (plain) or wss://, https:// (TLS); the "
	    "port\n"
	    "                          defaults to 80 or 443; IPv6 as "
	    "[::1]:8080\n"
	    "  --sandbox ID            sandbox id (its safe form goes in the "
	    "URL)\n"
	    "  --target URL            http:// or https:// service to reach, "
	    "with an\n"
	    "                          optional port and base path (no scheme: "
	    "http)\n"
	    "  --listen-port N         the sandbox's loopback listener "
	    "(default %d);\n"
	    "                          another port selects /tunnel/ID/(N-1)\n"
	    "  --tunnel-path PATH      tunnel route on the gateway instead of\n"
	    "                          /tunnel/SAFE_ID\n"
	    "  --token TOKEN           credential sent as X-Auth (prefer "
	    "AKERNEL_TOKEN:\n"
	    "                          the command line is visible to other "
	    "users)\n"
	    "  --allow-plaintext-token send the token over a plain ws:// "
	    "gateway too\n"
	    "  --ca-file FILE          trust file for the gateway; turns "
	    "verification on\n"
	    "  --verify-tls            verify the gateway's certificate (the "
	    "default)\n"
	    "  --no-verify-tls         do not verify the gateway's "
	    "certificate\n"
	    "  --target-ca-file FILE   trust file for an https:// target\n"
	    "  --target-insecure       do not verify the target's certificate "
	    "(unsafe)\n"
	    "  --target-cert FILE      client certificate for the target "
	    "(with\n"
	    "  --target-key FILE       --target-key) for mutual TLS\n"
	    "  --target-connections N  most connections to the target "
	    "(default: as\n"
	    "                          many as requests in flight, "
	    "YR_TUNNEL_MAX_INFLIGHT)\n"
	    "  --target-http2 MODE     auto: offer HTTP/2 to an https:// "
	    "target and use\n"
	    "                          it when chosen (the default); off: "
	    "HTTP/1.1 only\n"
	    "  --log-level LEVEL       debug, info, warn or error (default "
	    "info)\n"
	    "  --log-format FORMAT     text or json (default text)\n"
	    "  --ping-interval SECONDS heartbeat ping interval (default 20)\n"
	    "  --ping-timeout SECONDS  wait this long for a pong (default 10)\n"
	    "  -v, --verbose           log each request; twice: debug logging\n"
	    "  -h, --help              print this help and exit\n"
	    "  -V, --version           print the version and exit\n"
	    "\n"
	    "Environment (flags win over it):\n"
	    "  AKERNEL_GATEWAY_ADDRESS         gateway address, as --gateway\n"
	    "  YR_GATEWAY_ADDRESS              gateway address if the above is "
	    "unset\n"
	    "  AKERNEL_TOKEN                   token, as --token\n"
	    "  AKERNEL_VERIFY_TLS              1/true/yes/on or "
	    "0/false/no/off: verify\n"
	    "                                  the gateway's certificate\n"
	    "  SSL_CERT_FILE                   trust file for the gateway if "
	    "no other\n"
	    "  AKTUNNEL_SANDBOX                sandbox id, as --sandbox\n"
	    "  AKTUNNEL_TARGET                 target URL, as --target\n"
	    "  YR_TUNNEL_SSL_VERIFY            0/false/no: do not verify the "
	    "gateway\n"
	    "                                  (AKERNEL_VERIFY_TLS wins if "
	    "both are set)\n"
	    "  YR_TUNNEL_CA_BUNDLE             trust file for the gateway\n"
	    "  YR_TUNNEL_TOKEN_QUERY_FALLBACK  1/true/yes: also send ?token= "
	    "in the URL\n"
	    "  YR_TUNNEL_PROTOCOL_VERSION      highest protocol version "
	    "(default 2)\n"
	    "  YR_TUNNEL_MAX_BODY_SIZE         body limit (default 512 MiB, "
	    "cap 1 GiB)\n"
	    "  YR_TUNNEL_MAX_WS_MESSAGE_SIZE   WebSocket message limit "
	    "(default and\n"
	    "                                  cap 8 MiB)\n"
	    "  YR_TUNNEL_STREAM_CHUNK_BYTES    data chunk size (64 KiB; 1 "
	    "KiB..64 KiB)\n"
	    "  YR_TUNNEL_MAX_INFLIGHT          concurrent requests (16, cap "
	    "1024)\n"
	    "  YR_TUNNEL_STREAM_WINDOW_FRAMES  credit window (16, cap 1024)\n"
	    "  YR_TUNNEL_FAST_PATH_BODY_BYTES  one-frame body threshold (64 "
	    "KiB, cap\n"
	    "                                  5 MiB and the body limit)\n"
	    "  YR_TUNNEL_HTTP_TIMEOUT          target timeout in seconds "
	    "(default 600)\n"
	    "\n"
	    "Exit status:\n"
	    "  0  stopped by SIGINT or SIGTERM, or --help, --version\n"
	    "  1  setup error (a trust file that does not load, ...)\n"
	    "  2  bad flags or environment\n"
	    "  %d  another client took over the sandbox's tunnel (close 1012 "
	    "replaced,\n"
	    "     or 4409 tunnel_session_replaced)\n"
	    "  %d  the gateway refused the credential (HTTP 401 or 403) %d "
	    "times in a\n"
	    "     row: check --token or AKERNEL_TOKEN\n"
	    "Lost connections, 404s and other refusals are dialled again.\n",
	    TUN_LISTEN_PORT_DEFAULT, TUN_EXIT_REPLACED, TUN_EXIT_AUTH,
	    TUN_AUTH_TRIES);
}

/* SIGINT or SIGTERM: stop cleanly. */
static void
main_signal_cb(evutil_socket_t sig, short what, void *arg)
{
	(void)what;
	tun_stop(arg, sig == SIGINT ? "SIGINT" : "SIGTERM");
}

/* Log the settings in one line, without the token. */
static void
main_log_config(const struct tun_options *o)
{
	char *gw, *tunnel, *target;

	gw = tun_gateway_url(o);
	tunnel = tun_tunnel_url(o);
	target = tun_target_url(o);
	log_info("aktunnel %s: gateway %s (%s), tunnel %s, sandbox %s, "
		 "target %s, listen port %d, token: %s",
	    AK_VERSION, gw,
	    !o->gateway.u_tls
		? "plain"
		: (o->verify_tls ? "TLS verified" : "TLS unverified"),
	    tunnel, o->sandbox, target, o->listen_port,
	    o->token != NULL ? "set" : "unset");
	log_debug("tunnel limits: protocol %d, max body %llu, max ws message "
		  "%llu, chunk %u, inflight %u, window %u, fast path %llu, "
		  "http timeout %gs, ping every %gs (timeout %gs)",
	    o->protocol_version, (unsigned long long)o->max_body_size,
	    (unsigned long long)o->max_ws_message_size, o->stream_chunk,
	    o->max_inflight, o->stream_window_frames,
	    (unsigned long long)o->fast_path_body, o->http_timeout,
	    o->ping_interval, o->ping_timeout);
	if (o->gateway.u_tls && o->ca_file != NULL) {
		log_debug("gateway trust file %s (from %s)", o->ca_file,
		    o->ca_file_from);
	}
	free(target);
	free(tunnel);
	free(gw);
}

/* Parse the settings, then run the tunnel until SIGINT or SIGTERM. */
int
main(int argc, char **argv)
{
	struct tun_options o;
	struct event_base *base;
	struct event *sigint, *sigterm;
	struct tun *t;
	char *cause;
	unsigned int i;
	int rv;

	if (tun_options_parse(&o, argc, argv, NULL, &cause) != 0) {
		fprintf(
		    stderr, "aktunnel: %s\nTry 'aktunnel --help'.\n", cause);
		free(cause);
		tun_options_free(&o);
		return (2);
	}
	if (o.help) {
		main_usage(stdout);
		tun_options_free(&o);
		return (0);
	}
	if (o.version) {
		printf("aktunnel %s\n", AK_VERSION);
		tun_options_free(&o);
		return (0);
	}

	if (log_open(o.log_level, o.log_format, NULL, &cause) != 0) {
		fprintf(stderr, "aktunnel: %s\n", cause);
		free(cause);
		tun_options_free(&o);
		return (1);
	}
	signal(SIGPIPE, SIG_IGN);
	evio_malloc_tune();
	if ((base = evio_base_new()) == NULL) {
		fprintf(stderr, "aktunnel: cannot start the event loop\n");
		tun_options_free(&o);
		return (1);
	}
	if ((t = tun_new(base, &o, &cause)) == NULL) {
		fprintf(stderr, "aktunnel: %s\n", cause);
		free(cause);
		event_base_free(base);
		log_close();
		tun_options_free(&o);
		return (1);
	}
	sigint = evsignal_new(base, SIGINT, main_signal_cb, t);
	sigterm = evsignal_new(base, SIGTERM, main_signal_cb, t);
	if (sigint == NULL || sigterm == NULL || evsignal_add(sigint, NULL) ||
	    evsignal_add(sigterm, NULL)) {
		fprintf(stderr, "aktunnel: cannot catch signals\n");
		abort();
	}
	/* Logged once signals are caught: a test may stop us on this line. */
	for (i = 0; i < o.nwarnings; i++)
		log_warn("%s", o.warnings[i]);
	main_log_config(&o);

	tun_start(t);
	event_base_dispatch(base);

	log_info("aktunnel stopped: %llu requests (%llu failed), %llu bytes "
		 "up, %llu bytes down, %llu tunnel connections, %llu replays, "
		 "%llu tombstones evicted before their TTL",
	    (unsigned long long)t->t_stats.st_requests,
	    (unsigned long long)t->t_stats.st_failed,
	    (unsigned long long)t->t_stats.st_bytes_up,
	    (unsigned long long)t->t_stats.st_bytes_down,
	    (unsigned long long)t->t_stats.st_connects,
	    (unsigned long long)t->t_stats.st_replays,
	    (unsigned long long)t->t_tombs.tm_evicted);
	rv = t->t_exit;
	event_free(sigint);
	event_free(sigterm);
	tun_free(t);
	/* Let deferred frees run before the loop goes. */
	for (i = 0; i < 4; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	event_base_free(base);
	log_close();
	tun_options_free(&o);
	return (rv);
}
