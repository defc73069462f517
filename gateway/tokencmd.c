/*
 * "akgateway token": mint an access token for a private port, every port of
 * a sandbox, or its tunnel, signed with the configuration's auth.secret (or
 * the first of auth.secrets, the one that signs while secrets rotate).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "config.h"
#include "gw.h"
#include "token.h"

/* The longest TTL a token may have. */
#define TOKENCMD_MAX_TTL_MS (365ULL * 86400 * 1000)

/* Print the subcommand's usage to f. */
void
tokencmd_usage(FILE *f)
{
	fprintf(f,
	    "usage: akgateway token --sandbox ID (--port N | --all-ports | "
	    "--tunnel)\n"
	    "                       --ttl DURATION [-c FILE]\n"
	    "\n"
	    "Mint an access token for a sandbox and print it.\n"
	    "\n"
	    "  -c, --config FILE  read the sandboxes and the secret to sign "
	    "with\n"
	    "                     (auth.secret, or the first of auth.secrets) "
	    "from FILE;\n"
	    "                     without it the built-in default is used\n"
	    "      --sandbox ID   the sandbox, by id or safe id\n"
	    "      --port N       grant port N (1-65535)\n"
	    "      --all-ports    grant every port of the sandbox\n"
	    "      --tunnel       grant the sandbox's reverse tunnel\n"
	    "      --ttl DURATION how long the token lasts: 30m, 1h, 7d "
	    "(at most 365d)\n"
	    "  -h, --help         print this help and exit\n"
	    "\n"
	    "Send the token as Authorization: Bearer TOKEN, X-Access-Token: "
	    "TOKEN,\n"
	    "or ?access_token=TOKEN in a browser.\n");
}

/* Parse a port number 1-65535 written as plain decimal; -1 if it is not. */
static int
tokencmd_parse_port(const char *s)
{
	char *end;
	long v;

	if (*s < '1' || *s > '9')
		return (-1);
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < 1 || v > 65535)
		return (-1);
	return ((int)v);
}

/* The configured sandbox whose id or safe id is id, or NULL. */
static const struct gw_sandbox *
tokencmd_find_sandbox(const struct gw_config *cf, const char *id)
{
	size_t i;

	for (i = 0; i < cf->cf_nsandboxes; i++) {
		if (strcmp(cf->cf_sandboxes[i]->sb_id, id) == 0 ||
		    strcmp(cf->cf_sandboxes[i]->sb_safe_id, id) == 0)
			return (cf->cf_sandboxes[i]);
	}
	return (NULL);
}

/* Warn when a port token would not be needed or could not be used. */
static void
tokencmd_check_port(const struct gw_sandbox *sb, int port, const char *file)
{
	size_t i;

	for (i = 0; i < sb->sb_nports; i++) {
		if (port < sb->sb_ports[i].pr_lo ||
		    port > sb->sb_ports[i].pr_hi)
			continue;
		if (!sb->sb_ports[i].pr_private)
			fprintf(stderr,
			    "akgateway token: warning: port %d of "
			    "sandbox '%s' is public in %s; it needs no token\n",
			    port, sb->sb_id, file);
		return;
	}
	fprintf(stderr,
	    "akgateway token: warning: sandbox '%s' does not "
	    "publish port %d in %s\n",
	    sb->sb_id, port, file);
}

/*
 * Run "akgateway token"; argv[0] is "token".  Prints the token and a
 * newline to stdout.  Returns the exit status: 0, 1 on an error, 2 on a
 * usage error.
 */
int
tokencmd_main(int argc, char **argv)
{
	enum {
		OPT_SANDBOX = 256,
		OPT_PORT,
		OPT_ALL_PORTS,
		OPT_TUNNEL,
		OPT_TTL
	};
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "sandbox", required_argument, NULL, OPT_SANDBOX },
		{ "port", required_argument, NULL, OPT_PORT },
		{ "all-ports", no_argument, NULL, OPT_ALL_PORTS },
		{ "tunnel", no_argument, NULL, OPT_TUNNEL },
		{ "ttl", required_argument, NULL, OPT_TTL },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const struct gw_sandbox *sb;
	const struct token_key *key;
	struct gw_config *cf = NULL;
	const char *file = NULL, *sandbox = NULL, *ttl = NULL, *why = NULL;
	char scope[16], *cause = NULL, *token = NULL;
	uint64_t ttl_ms, expiry;
	int ch, port = 0, nscopes = 0, rc = 1;

	scope[0] = '\0';
	optind = 0; /* a full rescan, whatever ran getopt before */
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			file = optarg;
			break;
		case OPT_SANDBOX:
			sandbox = optarg;
			break;
		case OPT_PORT:
			if ((port = tokencmd_parse_port(optarg)) == -1) {
				fprintf(stderr,
				    "akgateway token: --port must be a port "
				    "from 1 to 65535, not '%s'\n",
				    optarg);
				return (2);
			}
			snprintf(scope, sizeof scope, "port:%d", port);
			nscopes++;
			break;
		case OPT_ALL_PORTS:
			snprintf(scope, sizeof scope, "port:*");
			nscopes++;
			break;
		case OPT_TUNNEL:
			snprintf(scope, sizeof scope, "tunnel");
			nscopes++;
			break;
		case OPT_TTL:
			ttl = optarg;
			break;
		case 'h':
			tokencmd_usage(stdout);
			return (0);
		default:
			fprintf(stderr,
			    "akgateway token: unknown option or missing "
			    "value: '%s'\n",
			    argv[optind - 1]);
			tokencmd_usage(stderr);
			return (2);
		}
	}
	if (optind != argc) {
		fprintf(stderr, "akgateway token: unexpected argument '%s'\n",
		    argv[optind]);
		tokencmd_usage(stderr);
		return (2);
	}
	if (sandbox == NULL)
		why = "--sandbox ID is required";
	else if (nscopes != 1)
		why = "give exactly one of --port N, --all-ports and --tunnel";
	else if (ttl == NULL)
		why = "--ttl DURATION is required";
	if (why != NULL) {
		fprintf(stderr, "akgateway token: %s\n", why);
		tokencmd_usage(stderr);
		return (2);
	}
	if (cfg_parse_duration(ttl, &ttl_ms) != 0 || ttl_ms < 1000 ||
	    ttl_ms > TOKENCMD_MAX_TTL_MS) {
		fprintf(stderr,
		    "akgateway token: --ttl must be a duration from 1s to "
		    "365d such as 30m, 1h or 7d, not '%s'\n",
		    ttl);
		return (2);
	}

	if (file != NULL)
		cf = conf_load(file, &cause);
	else
		cf = conf_load_string(CONF_BUILTIN_NAME, conf_builtin, &cause);
	if (cf == NULL) {
		fprintf(stderr, "akgateway token: %s\n", cause);
		free(cause);
		return (1);
	}
	if ((key = conf_signing_key(cf)) == NULL) {
		if (file != NULL)
			fprintf(stderr,
			    "akgateway token: the configuration has no "
			    "auth.secret (or auth.secrets); add one to %s "
			    "(make it with: openssl rand -hex 32) so the "
			    "gateway can sign and check tokens\n",
			    file);
		else
			fprintf(stderr,
			    "akgateway token: the configuration has no "
			    "auth.secret (or auth.secrets); the built-in "
			    "default has none, so write a configuration file "
			    "with one (make it with: openssl rand -hex 32) and "
			    "pass it with -c FILE\n");
		goto out;
	}
	if ((sb = tokencmd_find_sandbox(cf, sandbox)) == NULL) {
		fprintf(stderr,
		    "akgateway token: no sandbox '%s' in %s; tokens are only "
		    "minted for sandboxes the configuration declares\n",
		    sandbox, cf->cf_file);
		goto out;
	}
	if (port != 0)
		tokencmd_check_port(sb, port, cf->cf_file);
	else if (strcmp(scope, "tunnel") == 0 && sb->sb_ntunnel_ports == 0)
		fprintf(stderr,
		    "akgateway token: warning: sandbox '%s' has no tunnel in "
		    "%s; the token is of no use until one is configured\n",
		    sb->sb_id, cf->cf_file);

	expiry = (uint64_t)time(NULL) + ttl_ms / 1000;
	token = token_mint(key->tk_key, key->tk_len, sb->sb_id, scope, expiry);
	if (token == NULL) {
		fprintf(stderr,
		    "akgateway token: cannot mint a token for sandbox '%s'\n",
		    sb->sb_id);
		goto out;
	}
	if (printf("%s\n", token) < 0 || fflush(stdout) != 0) {
		fprintf(stderr, "akgateway token: cannot write the token: %s\n",
		    strerror(errno));
		goto out;
	}
	rc = 0;
out:
	if (token != NULL) {
		explicit_bzero(token, strlen(token));
		free(token);
	}
	conf_free(cf);
	return (rc);
}
