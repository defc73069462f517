/*
 * aktunnel's settings: command line flags, then the environment (AKernel's
 * AKERNEL_* and openYuanRong's YR_* variables), then defaults. Nothing here
 * touches the network or the file system; everything is checked up front so
 * that main can print one precise sentence.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "alloc.h"
#include "safeid.h"
#include "tun.h"

/* Flag values as given, before the environment is consulted. */
struct options_args {
	const char *gateway;
	const char *sandbox;
	const char *target;
	const char *token;
	const char *ca_file;
	const char *listen_port;
	const char *tunnel_path;
	const char *target_ca_file;
	const char *target_cert;
	const char *target_key;
	const char *target_connections;
	int verify; /* -1 unset, 0 or 1 */
	int log_level_set;
};

enum {
	OPT_GATEWAY = 256,
	OPT_SANDBOX,
	OPT_TARGET,
	OPT_LISTEN_PORT,
	OPT_TOKEN,
	OPT_ALLOW_PLAINTEXT_TOKEN,
	OPT_TUNNEL_PATH,
	OPT_CA_FILE,
	OPT_VERIFY_TLS,
	OPT_NO_VERIFY_TLS,
	OPT_TARGET_CA_FILE,
	OPT_TARGET_INSECURE,
	OPT_TARGET_CERT,
	OPT_TARGET_KEY,
	OPT_TARGET_CONNECTIONS,
	OPT_TARGET_HTTP2,
	OPT_LOG_LEVEL,
	OPT_LOG_FORMAT,
	OPT_PING_INTERVAL,
	OPT_PING_TIMEOUT,
};

static const struct option options_long[] = { { "gateway", required_argument,
						  NULL, OPT_GATEWAY },
	{ "sandbox", required_argument, NULL, OPT_SANDBOX },
	{ "target", required_argument, NULL, OPT_TARGET },
	{ "listen-port", required_argument, NULL, OPT_LISTEN_PORT },
	{ "token", required_argument, NULL, OPT_TOKEN },
	{ "allow-plaintext-token", no_argument, NULL,
	    OPT_ALLOW_PLAINTEXT_TOKEN },
	{ "tunnel-path", required_argument, NULL, OPT_TUNNEL_PATH },
	{ "ca-file", required_argument, NULL, OPT_CA_FILE },
	{ "verify-tls", no_argument, NULL, OPT_VERIFY_TLS },
	{ "no-verify-tls", no_argument, NULL, OPT_NO_VERIFY_TLS },
	{ "target-ca-file", required_argument, NULL, OPT_TARGET_CA_FILE },
	{ "target-insecure", no_argument, NULL, OPT_TARGET_INSECURE },
	{ "target-cert", required_argument, NULL, OPT_TARGET_CERT },
	{ "target-key", required_argument, NULL, OPT_TARGET_KEY },
	{ "target-connections", required_argument, NULL,
	    OPT_TARGET_CONNECTIONS },
	{ "target-http2", required_argument, NULL, OPT_TARGET_HTTP2 },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "log-format", required_argument, NULL, OPT_LOG_FORMAT },
	{ "ping-interval", required_argument, NULL, OPT_PING_INTERVAL },
	{ "ping-timeout", required_argument, NULL, OPT_PING_TIMEOUT },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 } };

/* Leading "+": stop at the first operand; ":": report missing arguments. */
static const char options_short[] = "+:hVv";

static const char *const options_true[] = { "1", "true", "yes", "on", NULL };
static const char *const options_false[] = { "0", "false", "no", "off", NULL };
static const char *const options_yr_false[] = { "0", "false", "no", NULL };
static const char *const options_yr_true[] = { "1", "true", "yes", NULL };

/* Find name in an environment block; returns the value or NULL if unset. */
static const char *
options_getenv(char *const *envp, const char *name)
{
	size_t len = strlen(name);

	for (; *envp != NULL; envp++) {
		if (strncmp(*envp, name, len) == 0 && (*envp)[len] == '=')
			return (*envp + len + 1);
	}
	return (NULL);
}

/* Return the trimmed value of a variable, or NULL if it is unset or blank. */
static char *
options_getenv_trimmed(char *const *envp, const char *name)
{
	const char *v;
	char *t;

	if ((v = options_getenv(envp, name)) == NULL)
		return (NULL);
	t = xstrtrim(v);
	if (*t == '\0') {
		free(t);
		return (NULL);
	}
	return (t);
}

/* Is s, trimmed and in any case, one of words? */
static int
options_word(const char *s, const char *const *words)
{
	char *t;
	int found = 0;

	t = xstrtrim(s);
	for (; *words != NULL; words++) {
		if (strcasecmp(t, *words) == 0) {
			found = 1;
			break;
		}
	}
	free(t);
	return (found);
}

/* Record a warning for main to log once logging is open. */
static void __attribute__((format(printf, 2, 3)))
options_warn(struct tun_options *o, const char *fmt, ...)
{
	va_list ap;

	o->warnings = xreallocarray(
	    o->warnings, o->nwarnings + 1, sizeof *o->warnings);
	va_start(ap, fmt);
	xvasprintf(&o->warnings[o->nwarnings], fmt, ap);
	va_end(ap);
	o->nwarnings++;
}

/* Replace *dst with a copy of src (or NULL). */
static void
options_set(char **dst, const char *src)
{
	free(*dst);
	*dst = (src == NULL) ? NULL : xstrdup(src);
}

/* Fill o with the defaults of every setting. */
static void
options_defaults(struct tun_options *o)
{
	memset(o, 0, sizeof *o);
	o->verify_tls = 1;
	o->listen_port = TUN_LISTEN_PORT_DEFAULT;
	o->protocol_version = TUNPROTO_VERSION;
	o->max_body_size = TUNPROTO_MAX_BODY_DEFAULT;
	o->max_ws_message_size = TUNPROTO_MAX_WS_DEFAULT;
	o->stream_chunk = TUNPROTO_CHUNK_DEFAULT;
	o->max_inflight = TUNPROTO_INFLIGHT_DEFAULT;
	o->stream_window_frames = TUNPROTO_WINDOW_DEFAULT;
	o->fast_path_body = TUNPROTO_FAST_PATH_DEFAULT;
	o->http_timeout = TUNPROTO_HTTP_TIMEOUT_DEFAULT;
	o->target_http2 = 1;
	o->ping_interval = TUN_PING_INTERVAL_DEFAULT;
	o->ping_timeout = TUN_PING_TIMEOUT_DEFAULT;
	o->log_level = LOG_LVL_INFO;
	o->log_format = LOG_FMT_TEXT;
}

/*
 * Parse a port number: decimal digits only, 1 to 65535. Returns the port or
 * -1.
 */
static int
options_port(const char *s)
{
	size_t len = strlen(s);
	long v;

	if (len == 0 || len > 5 || strspn(s, "0123456789") != len)
		return (-1);
	v = strtol(s, NULL, 10);
	if (v < 1 || v > 65535)
		return (-1);
	return ((int)v);
}

/* Describe byte c for a message: itself if printable, else \xNN. */
static void
options_char(char *buf, size_t size, unsigned char c)
{
	if (c > 0x20 && c < 0x7f)
		snprintf(buf, size, "%c", c);
	else
		snprintf(buf, size, "\\x%02x", c);
}

/* Is c allowed in a host name or IPv4 address? */
static int
options_host_char(unsigned char c)
{
	return (isalnum(c) || c == '-' || c == '.' || c == '_');
}

/*
 * Split an optional "scheme://" off s. Returns the scheme in lower case,
 * xmalloc'd, or NULL if there is none; *rest is where the authority starts.
 */
static char *
options_url_scheme(const char *s, const char **rest)
{
	char *scheme;
	size_t i;

	*rest = s;
	if (!isalpha((unsigned char)s[0]))
		return (NULL);
	/* ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) */
	i = 1;
	while (isalnum((unsigned char)s[i]) || s[i] == '+' || s[i] == '-' ||
	    s[i] == '.')
		i++;
	if (strncmp(s + i, "://", 3) != 0)
		return (NULL);
	*rest = s + i + 3;
	scheme = xstrndup(s, i);
	for (i = 0; scheme[i] != '\0'; i++)
		scheme[i] = tolower((unsigned char)scheme[i]);
	return (scheme);
}

/*
 * Parse an authority, "host[:port]" or "[IPv6][:port]", into u->u_host and
 * u->u_port; u->u_tls picks the default port. Returns -1 with *cause set.
 */
static int
options_url_authority(struct tun_url *u, const char *auth, char **cause)
{
	struct in6_addr in6;
	const char *port, *end;
	char c[8];
	size_t i;

	if (strchr(auth, '@') != NULL) {
		xasprintf(cause, "user info ('user@') is not allowed");
		return (-1);
	}
	if (auth[0] == '[') {
		if ((end = strchr(auth, ']')) == NULL) {
			xasprintf(cause,
			    "unterminated IPv6 address (missing "
			    "']')");
			return (-1);
		}
		u->u_host = xstrndup(auth + 1, (size_t)(end - auth - 1));
		if (inet_pton(AF_INET6, u->u_host, &in6) != 1) {
			xasprintf(cause, "bad IPv6 address '[%s]'", u->u_host);
			return (-1);
		}
		port = end + 1;
		if (*port != '\0' && *port != ':') {
			xasprintf(cause, "unexpected text after ']'");
			return (-1);
		}
	} else {
		port = strchr(auth, ':');
		if (port != NULL && strchr(port + 1, ':') != NULL) {
			xasprintf(cause,
			    "an IPv6 address must be in brackets, "
			    "as in [::1]:8080");
			return (-1);
		}
		if (port == NULL)
			port = auth + strlen(auth);
		u->u_host = xstrndup(auth, (size_t)(port - auth));
		for (i = 0; u->u_host[i] != '\0'; i++) {
			if (options_host_char((unsigned char)u->u_host[i]))
				continue;
			options_char(c, sizeof c, u->u_host[i]);
			xasprintf(cause, "bad character '%s' in host", c);
			return (-1);
		}
	}
	if (*u->u_host == '\0') {
		xasprintf(cause, "no host");
		return (-1);
	}
	for (i = 0; u->u_host[i] != '\0'; i++)
		u->u_host[i] = tolower((unsigned char)u->u_host[i]);

	if (*port != ':')
		u->u_port = u->u_tls ? 443 : 80;
	else if ((u->u_port = options_port(port + 1)) == -1) {
		xasprintf(cause, "bad port '%s' (use 1 to 65535)", port + 1);
		return (-1);
	}
	return (0);
}

/*
 * Parse "[scheme://]host[:port][/path]" into u. target selects the target
 * rules (http or https, a base path) over the gateway rules (ws, wss, http
 * or https, no path). Returns -1 with *cause a reason, without the value.
 */
static int
options_url(struct tun_url *u, const char *s, int target, char **cause)
{
	char *t, *scheme = NULL, *auth = NULL, c[8];
	const char *p, *rest;
	size_t i, len;

	memset(u, 0, sizeof *u);
	t = xstrtrim(s);
	if (*t == '\0') {
		xasprintf(cause, "the address is empty");
		goto fail;
	}

	scheme = options_url_scheme(t, &p);
	if (scheme == NULL || strcmp(scheme, "http") == 0 ||
	    (!target && strcmp(scheme, "ws") == 0))
		u->u_tls = 0;
	else if (strcmp(scheme, "https") == 0 ||
	    (!target && strcmp(scheme, "wss") == 0))
		u->u_tls = 1;
	else if (target) {
		xasprintf(cause,
		    "unsupported scheme '%s' (use http:// or "
		    "https://)",
		    scheme);
		goto fail;
	} else {
		xasprintf(cause,
		    "unsupported scheme '%s' (use ws://, wss://, "
		    "http:// or https://, or no scheme for plain ws)",
		    scheme);
		goto fail;
	}

	/* The authority runs to the first "/", "?" or "#". */
	len = strcspn(p, "/?#");
	auth = xstrndup(p, len);
	rest = p + len;
	if (options_url_authority(u, auth, cause) != 0)
		goto fail;

	if (strpbrk(rest, "?#") != NULL) {
		xasprintf(cause, "a query or fragment is not allowed");
		goto fail;
	}
	if (!target) {
		if (*rest != '\0' && strcmp(rest, "/") != 0) {
			xasprintf(cause,
			    "a path is not allowed (give "
			    "[scheme://]host[:port]; --tunnel-path sets the "
			    "route)");
			goto fail;
		}
		u->u_path = xstrdup("");
	} else {
		for (i = 0; rest[i] != '\0'; i++) {
			if ((unsigned char)rest[i] > 0x20 &&
			    (unsigned char)rest[i] != 0x7f)
				continue;
			options_char(c, sizeof c, rest[i]);
			xasprintf(cause, "bad character '%s' in path", c);
			goto fail;
		}
		len = strlen(rest);
		while (len > 0 && rest[len - 1] == '/')
			len--;
		u->u_path = xstrndup(rest, len);
	}

	free(auth);
	free(scheme);
	free(t);
	return (0);

fail:
	free(auth);
	free(scheme);
	free(t);
	tun_url_free(u);
	return (-1);
}

/*
 * Parse a gateway address by AKernel's rules: no scheme, http:// or ws://
 * mean plain WebSocket, https:// or wss:// mean TLS; the port defaults to 80
 * or 443; an IPv6 literal is written in brackets; no path. Returns -1 with
 * *cause a reason (without the address itself).
 */
int
tun_gateway_parse(struct tun_url *u, const char *s, char **cause)
{
	return (options_url(u, s, 0, cause));
}

/*
 * Parse a target URL: http:// or https:// (no scheme means http://), a host,
 * an optional port and an optional base path, kept without trailing "/".
 * Returns -1 with *cause a reason.
 */
int
tun_target_parse(struct tun_url *u, const char *s, char **cause)
{
	return (options_url(u, s, 1, cause));
}

/* Free what a parsed URL holds. */
void
tun_url_free(struct tun_url *u)
{
	free(u->u_host);
	free(u->u_path);
	memset(u, 0, sizeof *u);
}

/* Return host, bracketed if it is an IPv6 address, xmalloc'd. */
static char *
options_host(const char *host)
{
	char *s;

	if (strchr(host, ':') != NULL)
		xasprintf(&s, "[%s]", host);
	else
		s = xstrdup(host);
	return (s);
}

/*
 * Return "host:port" for a Host header or a log, IPv6 in brackets. With
 * tls 0 or 1 the default port of http or https is left out; with -1 the
 * port is always there. The caller frees it.
 */
char *
tun_host_port(const char *host, int port, int tls)
{
	char *h, *s;

	h = options_host(host);
	if ((tls == 0 && port == 80) || (tls == 1 && port == 443))
		return (h);
	xasprintf(&s, "%s:%d", h, port);
	free(h);
	return (s);
}

/*
 * Return the gateway as a WebSocket origin, "ws://host:port" or
 * "wss://host:port", always with the port as the openYuanRong SDK writes it.
 * The caller frees it.
 */
char *
tun_gateway_url(const struct tun_options *o)
{
	char *host, *s;

	host = options_host(o->gateway.u_host);
	xasprintf(&s, "%s://%s:%d", o->gateway.u_tls ? "wss" : "ws", host,
	    o->gateway.u_port);
	free(host);
	return (s);
}

/*
 * Return the tunnel WebSocket URL: the gateway origin plus --tunnel-path, or
 * else "/tunnel/{safeID}", with "/{listen_port - 1}" appended when the
 * listen port is not the default 8766 so the gateway picks that tunnel. The
 * token is never part of it. The caller frees it.
 */
char *
tun_tunnel_url(const struct tun_options *o)
{
	char *base, *s;

	base = tun_gateway_url(o);
	if (o->tunnel_path != NULL)
		xasprintf(&s, "%s%s", base, o->tunnel_path);
	else if (o->listen_port == TUN_LISTEN_PORT_DEFAULT)
		xasprintf(&s, "%s/tunnel/%s", base, o->safe_id);
	else {
		xasprintf(&s, "%s/tunnel/%s/%d", base, o->safe_id,
		    o->listen_port - 1);
	}
	free(base);
	return (s);
}

/*
 * Return the target as a URL, the default port left out and the base path
 * kept. The caller frees it.
 */
char *
tun_target_url(const struct tun_options *o)
{
	const struct tun_url *u = &o->target;
	char *host, *s;

	host = options_host(u->u_host);
	if (u->u_port == (u->u_tls ? 443 : 80)) {
		xasprintf(&s, "%s://%s%s", u->u_tls ? "https" : "http", host,
		    u->u_path);
	} else {
		xasprintf(&s, "%s://%s:%d%s", u->u_tls ? "https" : "http", host,
		    u->u_port, u->u_path);
	}
	free(host);
	return (s);
}

/* Return the long name of option val, for messages. */
static const char *
options_name(int val)
{
	const struct option *opt;

	for (opt = options_long; opt->name != NULL; opt++) {
		if (opt->val == val)
			return (opt->name);
	}
	return ("?");
}

/* Explain an unknown long option, listing the names it abbreviates. */
static void
options_unknown(const char *arg, char **cause)
{
	const struct option *opt;
	char *list = NULL, *tmp;
	size_t len;
	unsigned int n = 0;

	if (strncmp(arg, "--", 2) != 0) {
		xasprintf(cause, "unknown option '%s'", arg);
		return;
	}
	len = strcspn(arg + 2, "=");
	for (opt = options_long; opt->name != NULL; opt++) {
		if (strncmp(opt->name, arg + 2, len) != 0)
			continue;
		if (list == NULL)
			xasprintf(&tmp, "--%s", opt->name);
		else
			xasprintf(&tmp, "%s, --%s", list, opt->name);
		free(list);
		list = tmp;
		n++;
	}
	if (n > 1) {
		xasprintf(cause, "ambiguous option '%.*s' (could be %s)",
		    (int)len + 2, arg, list);
	} else
		xasprintf(cause, "unknown option '%s'", arg);
	free(list);
}

/*
 * Parse a heartbeat duration: decimal seconds, fractions allowed, from
 * TUN_PING_MIN to TUN_PING_MAX. Returns 0 with *out set, or -1.
 */
static int
options_seconds(const char *s, double *out)
{
	char *end;
	double v;

	if (*s == '\0' || strspn(s, "0123456789.") != strlen(s))
		return (-1);
	v = strtod(s, &end);
	if (end == s || *end != '\0' || !isfinite(v) || v < TUN_PING_MIN ||
	    v > TUN_PING_MAX)
		return (-1);
	*out = v;
	return (0);
}

/* Read the command line into a and the simple settings of o. */
static int
options_flags(struct tun_options *o, struct options_args *a, int argc,
    char **argv, char **cause)
{
	int ch;

	a->verify = -1;
	optind = 0; /* glibc: start afresh, so parse may run again */
	opterr = 0;
	while ((ch = getopt_long(
		    argc, argv, options_short, options_long, NULL)) != -1) {
		switch (ch) {
		case 'h':
			o->help = 1;
			return (0);
		case 'V':
			o->version = 1;
			return (0);
		case 'v':
			o->verbose++;
			break;
		case OPT_GATEWAY:
			a->gateway = optarg;
			break;
		case OPT_SANDBOX:
			a->sandbox = optarg;
			break;
		case OPT_TARGET:
			a->target = optarg;
			break;
		case OPT_LISTEN_PORT:
			a->listen_port = optarg;
			break;
		case OPT_TOKEN:
			a->token = optarg;
			break;
		case OPT_ALLOW_PLAINTEXT_TOKEN:
			o->allow_plaintext_token = 1;
			break;
		case OPT_TUNNEL_PATH:
			a->tunnel_path = optarg;
			break;
		case OPT_CA_FILE:
			a->ca_file = optarg;
			break;
		case OPT_VERIFY_TLS:
			a->verify = 1;
			break;
		case OPT_NO_VERIFY_TLS:
			a->verify = 0;
			break;
		case OPT_TARGET_CA_FILE:
			a->target_ca_file = optarg;
			break;
		case OPT_TARGET_INSECURE:
			o->target_insecure = 1;
			break;
		case OPT_TARGET_CERT:
			a->target_cert = optarg;
			break;
		case OPT_TARGET_KEY:
			a->target_key = optarg;
			break;
		case OPT_TARGET_CONNECTIONS:
			a->target_connections = optarg;
			break;
		case OPT_TARGET_HTTP2:
			if (strcmp(optarg, "auto") == 0)
				o->target_http2 = 1;
			else if (strcmp(optarg, "off") == 0)
				o->target_http2 = 0;
			else {
				xasprintf(cause,
				    "invalid --target-http2 '%s' "
				    "(use auto or off)",
				    optarg);
				return (-1);
			}
			break;
		case OPT_LOG_LEVEL:
			if (log_level_parse(optarg, &o->log_level) != 0) {
				xasprintf(cause,
				    "invalid --log-level '%s' "
				    "(use debug, info, warn or error)",
				    optarg);
				return (-1);
			}
			a->log_level_set = 1;
			break;
		case OPT_LOG_FORMAT:
			if (log_format_parse(optarg, &o->log_format) != 0) {
				xasprintf(cause,
				    "invalid --log-format '%s' "
				    "(use text or json)",
				    optarg);
				return (-1);
			}
			break;
		case OPT_PING_INTERVAL:
		case OPT_PING_TIMEOUT:
			if (options_seconds(optarg,
				ch == OPT_PING_INTERVAL
				    ? &o->ping_interval
				    : &o->ping_timeout) != 0) {
				xasprintf(cause,
				    "invalid --%s '%s' (use seconds from "
				    "%g to %g)",
				    options_name(ch), optarg, TUN_PING_MIN,
				    TUN_PING_MAX);
				return (-1);
			}
			break;
		case ':':
			if (optopt >= 256) {
				xasprintf(cause, "option '--%s' needs a value",
				    options_name(optopt));
			} else
				xasprintf(cause, "option '-%c' needs a value",
				    optopt);
			return (-1);
		default:
			if (optopt >= 256 || optopt == 'h' || optopt == 'V' ||
			    (optopt == 'v' &&
				strncmp(argv[optind - 1], "--", 2) == 0)) {
				xasprintf(cause, "option '--%s' takes no value",
				    options_name(optopt));
			} else if (optopt > 0 && optopt < 256 &&
			    isprint(optopt)) {
				xasprintf(
				    cause, "unknown option '-%c'", optopt);
			} else
				options_unknown(argv[optind - 1], cause);
			return (-1);
		}
	}
	if (optind < argc) {
		xasprintf(cause, "unexpected argument '%s'", argv[optind]);
		return (-1);
	}
	if (o->verbose >= 2 && !a->log_level_set)
		o->log_level = LOG_LVL_DEBUG;
	return (0);
}

/* The environment lookup tunproto_limits_from_env calls: envp's. */
static const char *
options_env_get(const char *name, void *arg)
{
	return (options_getenv(arg, name));
}

/*
 * Read the YR_TUNNEL_* limits of §11 with their caps and clamps (the rules
 * are lib/tunproto.c's, shared with the gateway): an invalid integer stops
 * us, as it stops the reference client; an unusable HTTP timeout is a
 * warning and 600 s.
 */
static int
options_limits(struct tun_options *o, char *const *envp, char **cause)
{
	struct tunproto_limits l;
	char *err = NULL;
	int rv;

	rv = tunproto_limits_from_env(
	    &l, options_env_get, (void *)(uintptr_t)envp, &err);
	if (rv < 0) {
		*cause = err;
		return (-1);
	}
	if (rv > 0) {
		options_warn(o, "%s", err);
		free(err);
	}
	o->protocol_version = l.l_protocol_version;
	o->max_body_size = l.l_max_body_size;
	o->max_ws_message_size = l.l_max_ws_message_size;
	o->stream_chunk = (uint32_t)l.l_max_stream_chunk;
	o->max_inflight = (uint32_t)l.l_max_inflight;
	o->stream_window_frames = (uint32_t)l.l_stream_window_frames;
	o->fast_path_body = l.l_fast_path_body;
	o->http_timeout = l.l_http_timeout;
	return (0);
}

/*
 * Size the target pool: --target-connections (1 to TUN_POOL_LIMIT), or as
 * many connections as requests may be in flight.
 */
static int
options_pool(struct tun_options *o, const char *arg, char **cause)
{
	size_t len;
	unsigned long v;

	if (arg == NULL) {
		o->target_connections = o->max_inflight;
		if (o->target_connections > TUN_POOL_LIMIT)
			o->target_connections = TUN_POOL_LIMIT;
		return (0);
	}
	len = strlen(arg);
	v = strtoul(arg, NULL, 10);
	if (len == 0 || len > 4 || strspn(arg, "0123456789") != len || v < 1 ||
	    v > TUN_POOL_LIMIT) {
		xasprintf(cause,
		    "invalid --target-connections '%s': use a count from 1 "
		    "to %d",
		    arg, TUN_POOL_LIMIT);
		return (-1);
	}
	o->target_connections = (uint32_t)v;
	return (0);
}

/*
 * Check a sandbox id: not empty, and only characters that may stand in a
 * URL path once "/" has become "-".
 */
static int
options_sandbox(const char *id, char **cause)
{
	const char *p;
	char c[8];

	if (*id == '\0') {
		xasprintf(cause, "the sandbox id is empty");
		return (-1);
	}
	for (p = id; *p != '\0'; p++) {
		if (isalnum((unsigned char)*p) ||
		    strchr("-._~!$&'()*+,;=:@/", *p) != NULL)
			continue;
		options_char(c, sizeof c, *p);
		xasprintf(cause,
		    "the sandbox id has a character that cannot "
		    "stand in a URL path: '%s'",
		    c);
		return (-1);
	}
	return (0);
}

/*
 * Normalise a --tunnel-path as the SDK treats the route the frontend
 * returns: of a full URL only the path and query are kept, and a leading "/"
 * is added. The result is xmalloc'd into *out.
 */
static int
options_route(const char *s, char **out, char **cause)
{
	const char *p = s, *q;
	char c[8];

	if (isalpha((unsigned char)*p)) {
		q = p + 1;
		while (isalnum((unsigned char)*q) || *q == '+' || *q == '-' ||
		    *q == '.')
			q++;
		if (strncmp(q, "://", 3) == 0) {
			p = q + 3;
			p += strcspn(p, "/?#");
		}
	}
	if (*p == '\0') {
		xasprintf(cause, "no path");
		return (-1);
	}
	for (q = p; *q != '\0'; q++) {
		if ((unsigned char)*q <= 0x20 || (unsigned char)*q == 0x7f ||
		    *q == '#') {
			options_char(c, sizeof c, *q);
			xasprintf(cause, "bad character '%s'", c);
			return (-1);
		}
	}
	if (*p == '/')
		*out = xstrdup(p);
	else
		xasprintf(out, "/%s", p);
	return (0);
}

/* Settle the gateway address: --gateway, then the AKernel variables. */
static int
options_gateway(struct tun_options *o, const struct options_args *a,
    char *const *envp, char **cause)
{
	const char *from;
	char *env = NULL, *why;
	const char *value;

	if (a->gateway != NULL) {
		from = "--gateway";
		value = a->gateway;
	} else if ((env = options_getenv_trimmed(
			envp, "AKERNEL_GATEWAY_ADDRESS")) != NULL) {
		from = "AKERNEL_GATEWAY_ADDRESS";
		value = env;
	} else if ((env = options_getenv_trimmed(envp, "YR_GATEWAY_ADDRESS")) !=
	    NULL) {
		from = "YR_GATEWAY_ADDRESS";
		value = env;
	} else
		return (0);
	if (tun_gateway_parse(&o->gateway, value, &why) != 0) {
		xasprintf(cause, "invalid %s '%s': %s", from, value, why);
		free(why);
		free(env);
		return (-1);
	}
	free(env);
	return (0);
}

/* Settle the sandbox and the target: flags, then AKTUNNEL_* variables. */
static int
options_ends(struct tun_options *o, const struct options_args *a,
    char *const *envp, char **cause)
{
	const char *from, *value;
	char *env, *why;

	env = NULL;
	if (a->sandbox != NULL) {
		from = "--sandbox";
		value = a->sandbox;
	} else {
		from = "AKTUNNEL_SANDBOX";
		value = env = options_getenv_trimmed(envp, from);
	}
	if (value != NULL) {
		if (options_sandbox(value, &why) != 0) {
			xasprintf(
			    cause, "invalid %s '%s': %s", from, value, why);
			free(why);
			free(env);
			return (-1);
		}
		o->sandbox = xstrdup(value);
		o->safe_id = safeid_make(value);
	}
	free(env);

	env = NULL;
	if (a->target != NULL) {
		from = "--target";
		value = a->target;
	} else {
		from = "AKTUNNEL_TARGET";
		value = env = options_getenv_trimmed(envp, from);
	}
	if (value != NULL && tun_target_parse(&o->target, value, &why) != 0) {
		xasprintf(cause, "invalid %s '%s': %s", from, value, why);
		free(why);
		free(env);
		return (-1);
	}
	free(env);
	return (0);
}

/* Name every missing required setting in one sentence. */
static int
options_required(struct tun_options *o, char **cause)
{
	const char *missing[3];
	unsigned int n = 0;

	if (o->gateway.u_host == NULL) {
		missing[n++] = "--gateway ADDR (or AKERNEL_GATEWAY_ADDRESS or "
			       "YR_GATEWAY_ADDRESS)";
	}
	if (o->sandbox == NULL)
		missing[n++] = "--sandbox ID (or AKTUNNEL_SANDBOX)";
	if (o->target.u_host == NULL)
		missing[n++] = "--target URL (or AKTUNNEL_TARGET)";
	switch (n) {
	case 0:
		return (0);
	case 1:
		xasprintf(cause, "missing %s", missing[0]);
		break;
	case 2:
		xasprintf(cause, "missing %s and %s", missing[0], missing[1]);
		break;
	default:
		xasprintf(cause, "missing %s, %s and %s", missing[0],
		    missing[1], missing[2]);
		break;
	}
	return (-1);
}

/*
 * Settle the token and TLS to the gateway. Flags win over the environment;
 * AKERNEL_VERIFY_TLS wins over YR_TUNNEL_SSL_VERIFY; the trust file comes
 * from --ca-file, YR_TUNNEL_CA_BUNDLE or SSL_CERT_FILE.
 */
static int
options_security(struct tun_options *o, const struct options_args *a,
    char *const *envp, char **cause)
{
	const char *raw, *verify_from = NULL;
	char *env, *gw;
	size_t i;

	/* The token: --token (empty means none), then AKERNEL_TOKEN. */
	if (a->token != NULL) {
		if (*a->token != '\0') {
			o->token = xstrdup(a->token);
			o->token_from = "--token";
		}
	} else if ((o->token = options_getenv_trimmed(envp, "AKERNEL_TOKEN")) !=
	    NULL)
		o->token_from = "AKERNEL_TOKEN";
	/* Only to say so when the gateway wants a token we do not have. */
	if ((raw = options_getenv(envp, "YR_TOKEN")) != NULL && *raw != '\0')
		o->yr_token_set = 1;
	if (o->token != NULL) {
		for (i = 0; o->token[i] != '\0'; i++) {
			if ((unsigned char)o->token[i] < 0x20 ||
			    (unsigned char)o->token[i] == 0x7f) {
				xasprintf(cause,
				    "the token contains a control "
				    "character");
				return (-1);
			}
		}
	}
	if ((raw = options_getenv(envp, "YR_TUNNEL_TOKEN_QUERY_FALLBACK")) !=
		NULL &&
	    options_word(raw, options_yr_true))
		o->token_query_fallback = 1;

	/* Verification: environment, then flags. */
	if ((env = options_getenv_trimmed(envp, "AKERNEL_VERIFY_TLS")) !=
	    NULL) {
		if (options_word(env, options_true))
			o->verify_tls = 1;
		else if (options_word(env, options_false))
			o->verify_tls = 0;
		else {
			xasprintf(cause,
			    "AKERNEL_VERIFY_TLS must be 1, true, "
			    "yes, on, 0, false, no or off (got '%s')",
			    env);
			free(env);
			return (-1);
		}
		free(env);
		verify_from = "AKERNEL_VERIFY_TLS";
	} else if ((raw = options_getenv(envp, "YR_TUNNEL_SSL_VERIFY")) !=
		NULL &&
	    options_word(raw, options_yr_false)) {
		o->verify_tls = 0;
		verify_from = "YR_TUNNEL_SSL_VERIFY";
	}
	if (a->ca_file != NULL) {
		if (a->verify == 0) {
			xasprintf(cause,
			    "--ca-file and --no-verify-tls "
			    "contradict each other: --ca-file turns "
			    "verification on");
			return (-1);
		}
		if (*a->ca_file == '\0') {
			xasprintf(cause, "invalid --ca-file '': no file name");
			return (-1);
		}
		o->ca_file = xstrdup(a->ca_file);
		o->ca_file_from = "--ca-file";
		o->verify_tls = 1;
	} else if ((o->ca_file = options_getenv_trimmed(
			envp, "YR_TUNNEL_CA_BUNDLE")) != NULL)
		o->ca_file_from = "YR_TUNNEL_CA_BUNDLE";
	else if ((o->ca_file = options_getenv_trimmed(envp, "SSL_CERT_FILE")) !=
	    NULL)
		o->ca_file_from = "SSL_CERT_FILE";
	if (a->verify != -1) {
		o->verify_tls = a->verify;
		verify_from = a->verify ? NULL : "--no-verify-tls";
	}

	/* The token travels only under TLS unless the user says otherwise. */
	if (o->token != NULL && !o->gateway.u_tls &&
	    !o->allow_plaintext_token) {
		gw = tun_gateway_url(o);
		xasprintf(cause,
		    "refusing to send the token over plain %s: "
		    "use a TLS gateway address (https:// or wss://), or pass "
		    "--allow-plaintext-token to send it unencrypted",
		    gw);
		free(gw);
		return (-1);
	}
	if (o->gateway.u_tls && !o->verify_tls) {
		options_warn(o,
		    "TLS certificate verification of the gateway "
		    "is explicitly disabled (%s)",
		    verify_from);
	}
	if (!o->gateway.u_tls && a->ca_file != NULL) {
		options_warn(o,
		    "--ca-file has no effect: the gateway address "
		    "is plain ws");
	}
	return (0);
}

/* Settle TLS to the target: trust file, client certificate, insecure. */
static int
options_target_tls(
    struct tun_options *o, const struct options_args *a, char **cause)
{
	if (a->target_ca_file != NULL && o->target_insecure) {
		xasprintf(cause,
		    "--target-ca-file and --target-insecure "
		    "contradict each other");
		return (-1);
	}
	if ((a->target_cert == NULL) != (a->target_key == NULL)) {
		xasprintf(cause,
		    "--target-cert and --target-key must be given "
		    "together");
		return (-1);
	}
	options_set(&o->target_ca_file, a->target_ca_file);
	options_set(&o->target_cert, a->target_cert);
	options_set(&o->target_key, a->target_key);
	if (o->target_insecure && o->target.u_tls) {
		options_warn(o,
		    "TLS verification of the target is DISABLED "
		    "(--target-insecure): anyone on the path can read and "
		    "change the traffic");
	}
	return (0);
}

/*
 * Parse argv, then the environment (envp, or the process environment if
 * NULL), into o. On success o->help or o->version may be set instead of a
 * complete configuration. Returns -1 with *cause set (the caller frees it);
 * o must be freed with tun_options_free either way.
 */
int
tun_options_parse(struct tun_options *o, int argc, char **argv,
    char *const *envp, char **cause)
{
	struct options_args a;
	char *why;

	options_defaults(o);
	memset(&a, 0, sizeof a);
	if (envp == NULL)
		envp = environ;
	*cause = NULL;

	if (options_flags(o, &a, argc, argv, cause) != 0)
		return (-1);
	if (o->help || o->version)
		return (0);
	if (options_limits(o, envp, cause) != 0)
		return (-1);

	if (options_pool(o, a.target_connections, cause) != 0)
		return (-1);
	if (a.listen_port != NULL &&
	    (o->listen_port = options_port(a.listen_port)) == -1) {
		xasprintf(cause,
		    "invalid --listen-port '%s': use a port "
		    "number from 1 to 65535",
		    a.listen_port);
		return (-1);
	}
	if (a.tunnel_path != NULL &&
	    options_route(a.tunnel_path, &o->tunnel_path, &why) != 0) {
		xasprintf(cause, "invalid --tunnel-path '%s': %s",
		    a.tunnel_path, why);
		free(why);
		return (-1);
	}

	if (options_gateway(o, &a, envp, cause) != 0)
		return (-1);
	if (options_ends(o, &a, envp, cause) != 0)
		return (-1);
	if (options_required(o, cause) != 0)
		return (-1);
	if (o->tunnel_path == NULL && o->listen_port == 1) {
		xasprintf(cause,
		    "--listen-port 1 leaves no tunnel port "
		    "(listen_port - 1); give --tunnel-path");
		return (-1);
	}
	if (options_security(o, &a, envp, cause) != 0)
		return (-1);
	if (options_target_tls(o, &a, cause) != 0)
		return (-1);
	return (0);
}

/* Free everything o holds, wiping the token. */
void
tun_options_free(struct tun_options *o)
{
	unsigned int i;

	tun_url_free(&o->gateway);
	tun_url_free(&o->target);
	free(o->tunnel_path);
	free(o->sandbox);
	free(o->safe_id);
	if (o->token != NULL) {
		explicit_bzero(o->token, strlen(o->token));
		free(o->token);
	}
	free(o->ca_file);
	free(o->target_ca_file);
	free(o->target_cert);
	free(o->target_key);
	for (i = 0; i < o->nwarnings; i++)
		free(o->warnings[i]);
	free(o->warnings);
	memset(o, 0, sizeof *o);
}
