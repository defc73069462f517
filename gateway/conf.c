/*
 * The gateway's configuration: the YAML schema on top of lib/config.c.
 * Every key is known, typed and range-checked; anything else is refused with
 * file:line:column.  docs/configuration.md documents each key.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "addr.h"
#include "alloc.h"
#include "config.h"
#include "gw.h"
#include "netns.h"
#include "safeid.h"
#include "tls.h"

/* The built-in default: for trying the gateway on one machine. */
const char conf_builtin[] =
    "# built-in default configuration (see config/gateway.yaml)\n"
    "listen:\n"
    "  - address: 127.0.0.1:8080\n"
    "admin:\n"
    "  address: 127.0.0.1:9090\n"
    "domains: [localhost]\n"
    "sandboxes:\n"
    "  - id: local\n"
    "    address: 127.0.0.1\n"
    "    ports:\n"
    "      - port: 1-65535\n"
    "        access: public\n"
    "    tunnel:\n"
    "      listen_port: 8766\n";

#define DAY_MS (86400ULL * 1000)

static const char *const top_keys[] = { "log", "listen", "admin", "domains",
	"workers", "timeouts", "limits", "auth", "netns_dir", "sandboxes",
	NULL };
static const char *const auth_keys[] = { "secret", "secrets", "cookie",
	"require_tls_for_credentials", "path_form_cookies", NULL };
static const char *const log_keys[] = { "level", "format", "file", NULL };
static const char *const listen_keys[] = { "address", "tls", "http2",
	NULL };
static const char *const tls_keys[] = { "cert", "key", "sni", NULL };
static const char *const sni_keys[] = { "names", "cert", "key", NULL };
static const char *const admin_keys[] = { "address", "token", NULL };
static const char *const timeout_keys[] = { "request_header", "connect",
	"keepalive", "upstream_idle", "upstream_response", "idle",
	"websocket_idle", "websocket_fin", "drain", NULL };
static const char *const limit_keys[] = { "max_connections",
	"max_connections_per_sandbox", "max_header_size", "max_headers",
	"max_body_size", "max_idle_upstreams", "h2_max_concurrent_streams",
	"h2_max_requests", "h2_window", "h2_upstream_streams", NULL };
static const char *const sandbox_keys[] = { "id", "address", "netns",
	"max_connections", "ports", "tunnel", NULL };
static const char *const port_keys[] = { "port", "access", "host_rewrite",
	"protocol", NULL };
static const char *const tunnel_keys[] = { "listen_port", "mode", "token",
	"client_wait", "http_timeout", "silence_timeout", "max_queued", NULL };
static const char *const level_names[] = { "debug", "info", "warn", "error",
	NULL };
static const char *const format_names[] = { "text", "json", NULL };
static const char *const access_names[] = { "public", "private", NULL };
/* In the order of enum gw_port_proto. */
static const char *const proto_names[] = { "http1", "h2c", "auto", NULL };
static const char *const mode_names[] = { "terminate", "forward", NULL };

/* Set the defaults every configuration starts from. */
static void
conf_defaults(struct gw_config *cf)
{
	cf->cf_log_level = LOG_LVL_INFO;
	cf->cf_log_format = LOG_FMT_TEXT;
	cf->cf_header_timeout = 10 * 1000;
	cf->cf_connect_timeout = 5 * 1000;
	cf->cf_keepalive_timeout = 75 * 1000;
	cf->cf_upstream_idle = 5 * 1000;
	cf->cf_response_timeout = 0;
	cf->cf_idle_timeout = 300 * 1000;
	cf->cf_max_connections = 10000;
	cf->cf_max_header_size = 32 * 1024;
	cf->cf_max_headers = 100;
	cf->cf_max_body_size = 0;
	cf->cf_max_connections_per_sandbox = 0;
	cf->cf_max_idle_upstreams = 1024;
	cf->cf_h2_max_streams = 128;
	cf->cf_h2_max_requests = 10000;
	cf->cf_h2_window = 256 * 1024;
	cf->cf_h2_upstream_streams = 100;
	cf->cf_ws_idle_timeout = 3600 * 1000;
	cf->cf_ws_fin_timeout = 30 * 1000;
	cf->cf_drain_timeout = 30 * 1000;
	cf->cf_auth_cookie = xstrdup("akgw_token");
	cf->cf_netns_dir = xstrdup(GW_NETNS_DIR);
}

/* Parse one listener address node. */
static int
conf_address(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, struct gw_listen *l, char **cause)
{
	char *why;

	if (cfg_get_string(doc, n, what, &l->l_address, cause) != 0)
		return (-1);
	if (addr_parse_hostport(l->l_address, &l->l_ss, &l->l_sslen, &why) !=
	    0) {
		cfg_error(doc, n, cause, "%s: %s", what, why);
		free(why);
		return (-1);
	}
	return (0);
}

/* Parse the log section. */
static int
conf_log(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	struct cfg_node *v;
	int i;

	if (cfg_check_map(doc, n, "log", log_keys, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "level")) != NULL) {
		if (cfg_get_enum(doc, v, "log.level", level_names, &i, cause) !=
		    0)
			return (-1);
		cf->cf_log_level = (enum log_level)i;
	}
	if ((v = cfg_map_get(n, "format")) != NULL) {
		if (cfg_get_enum(
			doc, v, "log.format", format_names, &i, cause) != 0)
			return (-1);
		cf->cf_log_format = (enum log_format)i;
	}
	if ((v = cfg_map_get(n, "file")) != NULL &&
	    cfg_get_string(doc, v, "log.file", &cf->cf_log_file, cause) != 0)
		return (-1);
	return (0);
}

/*
 * Read a certificate and key pair, loading them once so that --check
 * catches a missing file, a bad PEM or a key that does not match.
 */
static int
conf_cert_pair(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, char **cert, char **key, char **cause)
{
	struct cfg_node *c, *k;
	SSL_CTX *ctx;
	char *why = NULL, *w;

	if ((c = cfg_map_get(n, "cert")) == NULL ||
	    (k = cfg_map_get(n, "key")) == NULL)
		return (
		    cfg_error(doc, n, cause, "%s needs cert and key", what));
	xasprintf(&w, "%s.cert", what);
	if (cfg_get_string(doc, c, w, cert, cause) != 0) {
		free(w);
		return (-1);
	}
	free(w);
	xasprintf(&w, "%s.key", what);
	if (cfg_get_string(doc, k, w, key, cause) != 0) {
		free(w);
		return (-1);
	}
	free(w);
	if ((ctx = tls_server_ctx_new(*cert, *key, &why)) == NULL) {
		cfg_error(doc, c, cause, "%s", why);
		free(why);
		return (-1);
	}
	tls_ctx_free(ctx);
	return (0);
}

/* Parse a listener's tls section: a default certificate and an SNI map. */
static int
conf_tls(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_listen *l, char **cause)
{
	struct cfg_node *sni, *item, *names;
	struct gw_sni *sn;
	size_t i, j;

	if (cfg_check_map(doc, n, "listen.tls", tls_keys, cause) != 0 ||
	    conf_cert_pair(
		doc, n, "listen.tls", &l->l_cert, &l->l_key, cause) != 0)
		return (-1);
	if ((sni = cfg_map_get(n, "sni")) == NULL)
		return (0);
	if (cfg_check_seq(doc, sni, "listen.tls.sni", cause) != 0)
		return (-1);
	if (sni->n_count > 0)
		l->l_sni = xcalloc(sni->n_count, sizeof *l->l_sni);
	for (i = 0; i < sni->n_count; i++) {
		item = sni->n_items[i];
		sn = &l->l_sni[i];
		if (cfg_check_map(doc, item, "an sni entry", sni_keys, cause) !=
		    0)
			return (-1);
		l->l_nsni++;
		if ((names = cfg_map_get(item, "names")) == NULL ||
		    names->n_type != CFG_SEQ || names->n_count == 0)
			return (
			    cfg_error(doc, names != NULL ? names : item, cause,
				"an sni entry needs names: a list of host "
				"names"));
		sn->sn_names = xcalloc(names->n_count, sizeof *sn->sn_names);
		for (j = 0; j < names->n_count; j++) {
			if (cfg_get_string(doc, names->n_items[j],
				"an sni name", &sn->sn_names[j], cause) != 0)
				return (-1);
			sn->sn_count++;
		}
		if (conf_cert_pair(doc, item, "listen.tls.sni", &sn->sn_cert,
			&sn->sn_key, cause) != 0)
			return (-1);
	}
	return (0);
}

/* Parse the listen list. */
static int
conf_listen(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	struct cfg_node *item, *v;
	size_t i, j;

	if (cfg_check_seq(doc, n, "listen", cause) != 0)
		return (-1);
	if (n->n_count == 0)
		return (cfg_error(doc, n, cause,
		    "listen needs at least one "
		    "listener"));
	cf->cf_listen = xcalloc(n->n_count, sizeof *cf->cf_listen);
	for (i = 0; i < n->n_count; i++) {
		item = n->n_items[i];
		if (cfg_check_map(
			doc, item, "a listener", listen_keys, cause) != 0)
			return (-1);
		if ((v = cfg_map_get(item, "address")) == NULL)
			return (cfg_error(
			    doc, item, cause, "a listener needs an address"));
		cf->cf_nlisten++;
		if (conf_address(doc, v, "listen.address", &cf->cf_listen[i],
			cause) != 0)
			return (-1);
		if ((v = cfg_map_get(item, "tls")) != NULL &&
		    conf_tls(doc, v, &cf->cf_listen[i], cause) != 0)
			return (-1);
		cf->cf_listen[i].l_http2 = 1;
		if ((v = cfg_map_get(item, "http2")) != NULL &&
		    cfg_get_bool(doc, v, "listen.http2",
			&cf->cf_listen[i].l_http2, cause) != 0)
			return (-1);
		v = cfg_map_get(item, "address");
		for (j = 0; j < i; j++) {
			if (strcmp(cf->cf_listen[j].l_address,
				cf->cf_listen[i].l_address) == 0)
				return (cfg_error(doc, v, cause,
				    "listener %s is declared twice",
				    cf->cf_listen[i].l_address));
		}
	}
	return (0);
}

/* Parse the admin section. */
static int
conf_admin(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	struct cfg_node *v;

	if (cfg_check_map(doc, n, "admin", admin_keys, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "address")) != NULL) {
		free(cf->cf_admin.l_address);
		cf->cf_admin.l_address = NULL;
		if (conf_address(
			doc, v, "admin.address", &cf->cf_admin, cause) != 0)
			return (-1);
	}
	if ((v = cfg_map_get(n, "token")) != NULL &&
	    cfg_get_string(doc, v, "admin.token", &cf->cf_admin_token, cause) !=
		0)
		return (-1);
	return (0);
}

/*
 * Read one token secret from n into *key (xstrdup'd), naming it what in
 * errors.  Secrets are at least 16 bytes.
 */
static int
conf_auth_key(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, struct token_key *key, char **cause)
{
	if (cfg_get_string(doc, n, what, &key->tk_key, cause) != 0)
		return (-1);
	key->tk_len = strlen(key->tk_key);
	if (key->tk_len < 16)
		return (cfg_error(doc, n, cause,
		    "%s must be at least 16 bytes; make one with: openssl rand "
		    "-hex 32",
		    what));
	return (0);
}

/*
 * Parse the token secrets: auth.secret (one), or auth.secrets (a list whose
 * first entry signs and whose every entry verifies, for rotating without
 * invalidating every token at once).
 */
static int
conf_auth_secrets(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	struct cfg_node *one = NULL, *list = NULL, *item, *later = NULL;
	struct token_key *k;
	char what[64];
	size_t i, j;

	for (i = 0; i < cfg_map_size(n); i++) {
		if (strcmp(cfg_map_key(n, i)->n_value, "secret") == 0)
			one = cfg_map_value(n, i);
		else if (strcmp(cfg_map_key(n, i)->n_value, "secrets") == 0)
			list = cfg_map_value(n, i);
		else
			continue;
		if (one != NULL && list != NULL)
			later = cfg_map_key(n, i);
	}
	if (later != NULL)
		return (cfg_error(doc, later, cause,
		    "auth.secret and auth.secrets are both set; keep one "
		    "(auth.secret: X is auth.secrets: [X])"));
	if (one != NULL) {
		cf->cf_auth_secrets = xcalloc(1, sizeof *cf->cf_auth_secrets);
		cf->cf_nauth_secrets = 1;
		return (conf_auth_key(
		    doc, one, "auth.secret", &cf->cf_auth_secrets[0], cause));
	}
	if (list == NULL)
		return (0);
	if (cfg_check_seq(doc, list, "auth.secrets", cause) != 0)
		return (-1);
	if (list->n_count == 0)
		return (cfg_error(doc, list, cause,
		    "auth.secrets is empty; list at least one secret (make one "
		    "with: openssl rand -hex 32)"));
	if (list->n_count > GW_AUTH_SECRETS_MAX)
		return (
		    cfg_error(doc, list->n_items[GW_AUTH_SECRETS_MAX], cause,
			"auth.secrets has %zu entries; at most %d are allowed "
			"(each one is tried on every token)",
			list->n_count, GW_AUTH_SECRETS_MAX));
	cf->cf_auth_secrets = xcalloc(
	    list->n_count, sizeof *cf->cf_auth_secrets);
	for (i = 0; i < list->n_count; i++) {
		item = list->n_items[i];
		k = &cf->cf_auth_secrets[i];
		cf->cf_nauth_secrets++;
		snprintf(what, sizeof what, "auth.secrets entry %zu", i + 1);
		if (conf_auth_key(doc, item, what, k, cause) != 0)
			return (-1);
		for (j = 0; j < i; j++) {
			if (cf->cf_auth_secrets[j].tk_len == k->tk_len &&
			    memcmp(cf->cf_auth_secrets[j].tk_key, k->tk_key,
				k->tk_len) == 0)
				return (cfg_error(doc, item, cause,
				    "%s repeats entry %zu", what, j + 1));
		}
	}
	return (0);
}

/* Parse the auth section: the token secrets and how credentials travel. */
static int
conf_auth(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	struct cfg_node *v;
	const char *p;

	if (cfg_check_map(doc, n, "auth", auth_keys, cause) != 0)
		return (-1);
	if (conf_auth_secrets(doc, n, cf, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "cookie")) != NULL) {
		free(cf->cf_auth_cookie);
		if (cfg_get_string(
			doc, v, "auth.cookie", &cf->cf_auth_cookie, cause) != 0)
			return (-1);
		for (p = cf->cf_auth_cookie; *p != '\0'; p++) {
			if (!isalnum((unsigned char)*p) && *p != '_' &&
			    *p != '-')
				break;
		}
		if (*cf->cf_auth_cookie == '\0' || *p != '\0')
			return (cfg_error(doc, v, cause,
			    "auth.cookie must be "
			    "letters, digits, '_' and '-', not '%s'",
			    cf->cf_auth_cookie));
		if (strncasecmp(cf->cf_auth_cookie, "__host-", 7) == 0 ||
		    strncasecmp(cf->cf_auth_cookie, "__secure-", 9) == 0)
			return (cfg_error(doc, v, cause,
			    "auth.cookie '%s' "
			    "must not carry a __Host- or __Secure- prefix: the "
			    "gateway adds the right one over HTTPS",
			    cf->cf_auth_cookie));
	}
	if ((v = cfg_map_get(n, "require_tls_for_credentials")) != NULL &&
	    cfg_get_bool(doc, v, "auth.require_tls_for_credentials",
		&cf->cf_require_tls_creds, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "path_form_cookies")) != NULL &&
	    cfg_get_bool(doc, v, "auth.path_form_cookies",
		&cf->cf_path_form_cookies, cause) != 0)
		return (-1);
	return (0);
}

/* Is s a valid lowercase DNS name for the host form? */
static int
conf_valid_domain(const char *s)
{
	size_t len = strlen(s), label = 0;

	if (len == 0 || len > 253 || *s == '.' || s[len - 1] == '.')
		return (0);
	for (; *s != '\0'; s++) {
		if (*s == '.') {
			if (label == 0)
				return (0);
			label = 0;
			continue;
		}
		if (!islower((unsigned char)*s) &&
		    !isdigit((unsigned char)*s) && *s != '-')
			return (0);
		if (++label > 63)
			return (0);
	}
	return (1);
}

/* Parse the domains list: names, or {name, host_format} maps. */
static int
conf_domains(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	static const char *const keys[] = { "name", "host_format", NULL };
	static const char *const formats[] = { "auto", "port-id", "id-port",
		NULL };
	const struct cfg_node *item, *v;
	size_t i;
	char *d;
	int f;

	if (cfg_check_seq(doc, n, "domains", cause) != 0)
		return (-1);
	cf->cf_domains = xcalloc(n->n_count + 1, sizeof *cf->cf_domains);
	cf->cf_domain_formats = xcalloc(
	    n->n_count + 1, sizeof *cf->cf_domain_formats);
	for (i = 0; i < n->n_count; i++) {
		item = n->n_items[i];
		f = ROUTE_HF_AUTO;
		if (item->n_type == CFG_MAP) {
			if (cfg_check_map(doc, item, "a domain", keys, cause) !=
			    0)
				return (-1);
			if ((v = cfg_map_get(item, "name")) == NULL)
				return (cfg_error(
				    doc, item, cause, "a domain needs a name"));
			if ((item = cfg_map_get(
				 n->n_items[i], "host_format")) != NULL &&
			    cfg_get_enum(doc, item, "host_format", formats, &f,
				cause) != 0)
				return (-1);
			item = v;
		}
		if (cfg_get_string(doc, item, "a domain", &d, cause) != 0)
			return (-1);
		cf->cf_domain_formats[cf->cf_ndomains] =
		    (enum route_host_format)f;
		cf->cf_domains[cf->cf_ndomains++] = d;
		if (!conf_valid_domain(d))
			return (cfg_error(doc, item, cause,
			    "'%s' is not a valid lowercase domain name", d));
	}
	return (0);
}

/* Parse the timeouts section. */
static int
conf_timeouts(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	static const struct {
		const char *key;
		size_t off;
		uint64_t min;
	} t[] = {
		{ "request_header",
		    offsetof(struct gw_config, cf_header_timeout), 100 },
		{ "connect", offsetof(struct gw_config, cf_connect_timeout),
		    100 },
		{ "keepalive", offsetof(struct gw_config, cf_keepalive_timeout),
		    100 },
		{ "upstream_idle", offsetof(struct gw_config, cf_upstream_idle),
		    0 },
		{ "upstream_response",
		    offsetof(struct gw_config, cf_response_timeout), 0 },
		{ "idle", offsetof(struct gw_config, cf_idle_timeout), 100 },
		{ "websocket_idle",
		    offsetof(struct gw_config, cf_ws_idle_timeout), 100 },
		{ "websocket_fin",
		    offsetof(struct gw_config, cf_ws_fin_timeout), 100 },
		{ "drain", offsetof(struct gw_config, cf_drain_timeout), 0 },
	};
	struct cfg_node *v;
	char what[64];
	size_t i;

	if (cfg_check_map(doc, n, "timeouts", timeout_keys, cause) != 0)
		return (-1);
	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		if ((v = cfg_map_get(n, t[i].key)) == NULL)
			continue;
		snprintf(what, sizeof what, "timeouts.%s", t[i].key);
		if (cfg_get_duration(doc, v, what, t[i].min, DAY_MS,
			(uint64_t *)((char *)cf + t[i].off), cause) != 0)
			return (-1);
	}
	return (0);
}

/* Parse the limits section. */
static int
conf_limits(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	struct cfg_node *v;
	long long ll;

	if (cfg_check_map(doc, n, "limits", limit_keys, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "max_connections")) != NULL) {
		if (cfg_get_int(doc, v, "limits.max_connections", 1, 1000000,
			&ll, cause) != 0)
			return (-1);
		cf->cf_max_connections = (uint64_t)ll;
	}
	if ((v = cfg_map_get(n, "max_connections_per_sandbox")) != NULL) {
		if (cfg_get_int(doc, v, "limits.max_connections_per_sandbox", 1,
			1000000, &ll, cause) != 0)
			return (-1);
		cf->cf_max_connections_per_sandbox = (uint64_t)ll;
	}
	if ((v = cfg_map_get(n, "max_idle_upstreams")) != NULL) {
		if (cfg_get_int(doc, v, "limits.max_idle_upstreams", 0,
			UPSTREAM_POOL_MAX, &ll, cause) != 0)
			return (-1);
		cf->cf_max_idle_upstreams = (uint64_t)ll;
	}
	if ((v = cfg_map_get(n, "max_header_size")) != NULL &&
	    cfg_get_size(doc, v, "limits.max_header_size", 1024, 1024 * 1024,
		&cf->cf_max_header_size, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "max_headers")) != NULL) {
		if (cfg_get_int(
			doc, v, "limits.max_headers", 1, 1000, &ll, cause) != 0)
			return (-1);
		cf->cf_max_headers = (uint64_t)ll;
	}
	if ((v = cfg_map_get(n, "max_body_size")) != NULL &&
	    cfg_get_size(doc, v, "limits.max_body_size", 0, (uint64_t)1 << 50,
		&cf->cf_max_body_size, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "h2_max_concurrent_streams")) != NULL) {
		if (cfg_get_int(doc, v, "limits.h2_max_concurrent_streams", 1,
			10000, &ll, cause) != 0)
			return (-1);
		cf->cf_h2_max_streams = (uint64_t)ll;
	}
	if ((v = cfg_map_get(n, "h2_max_requests")) != NULL) {
		if (cfg_get_int(doc, v, "limits.h2_max_requests", 1,
			100000000, &ll, cause) != 0)
			return (-1);
		cf->cf_h2_max_requests = (uint64_t)ll;
	}
	if ((v = cfg_map_get(n, "h2_window")) != NULL &&
	    cfg_get_size(doc, v, "limits.h2_window", 16 * 1024,
		(1U << 31) - 1, &cf->cf_h2_window, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "h2_upstream_streams")) != NULL) {
		if (cfg_get_int(doc, v, "limits.h2_upstream_streams", 1, 10000,
			&ll, cause) != 0)
			return (-1);
		cf->cf_h2_upstream_streams = (uint64_t)ll;
	}
	return (0);
}

/* Parse a port or "lo-hi" range into a rule. */
static int
conf_port_range(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_port_rule *pr, char **cause)
{
	const char *s = n->n_value;
	unsigned long lo, hi;
	char *end;

	if (n->n_type != CFG_SCALAR || *s < '0' || *s > '9')
		goto bad;
	lo = strtoul(s, &end, 10);
	hi = lo;
	if (*end == '-') {
		s = end + 1;
		if (*s < '0' || *s > '9')
			goto bad;
		hi = strtoul(s, &end, 10);
	}
	if (*end != '\0' || lo < 1 || hi > 65535 || lo > hi)
		goto bad;
	pr->pr_lo = (uint16_t)lo;
	pr->pr_hi = (uint16_t)hi;
	return (0);
bad:
	return (cfg_error(doc, n, cause,
	    "port must be a port (1-65535) or a "
	    "range such as 3000-3999, not '%s'",
	    n->n_type == CFG_SCALAR ? n->n_value : cfg_type_name(n->n_type)));
}

/* Parse a sandbox's ports list. */
static int
conf_ports(const struct gw_config *cf, const struct cfg_doc *doc,
    const struct cfg_node *n, struct gw_sandbox *sb, char **cause)
{
	struct gw_port_rule *pr;
	struct cfg_node *item, *v;
	size_t i;
	int access, proto;

	if (cfg_check_seq(doc, n, "ports", cause) != 0)
		return (-1);
	if (n->n_count == 0)
		return (0);
	sb->sb_ports = xcalloc(n->n_count, sizeof *sb->sb_ports);
	for (i = 0; i < n->n_count; i++) {
		item = n->n_items[i];
		pr = &sb->sb_ports[i];
		if (cfg_check_map(doc, item, "a port", port_keys, cause) != 0)
			return (-1);
		sb->sb_nports++;
		if ((v = cfg_map_get(item, "port")) == NULL)
			return (cfg_error(
			    doc, item, cause, "a port entry needs port"));
		if (conf_port_range(doc, v, pr, cause) != 0)
			return (-1);
		if ((v = cfg_map_get(item, "access")) != NULL) {
			if (cfg_get_enum(doc, v, "access", access_names,
				&access, cause) != 0)
				return (-1);
			pr->pr_private = access == 1;
			if (pr->pr_private &&
			    (cf == NULL || cf->cf_nauth_secrets == 0))
				return (cfg_error(doc, v, cause,
				    "access: "
				    "private needs auth.secret (or "
				    "auth.secrets) to check tokens with"));
		}
		if ((v = cfg_map_get(item, "protocol")) != NULL) {
			if (cfg_get_enum(doc, v, "protocol", proto_names,
				&proto, cause) != 0)
				return (-1);
			pr->pr_protocol = (enum gw_port_proto)proto;
		}
		if ((v = cfg_map_get(item, "host_rewrite")) != NULL) {
			if (cfg_get_string(doc, v, "host_rewrite",
				&pr->pr_host_rewrite, cause) != 0)
				return (-1);
			if (*pr->pr_host_rewrite == '\0' ||
			    strpbrk(pr->pr_host_rewrite, " \t\r\n") != NULL)
				return (cfg_error(doc, v, cause,
				    "host_rewrite "
				    "must be a host such as "
				    "\"localhost:${port}\""));
		}
	}
	return (0);
}

/* Parse a sandbox's tunnel section (listen ports only, for now). */
static int
conf_tunnel(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_sandbox *sb, char **cause)
{
	struct cfg_node *v, *p;
	size_t i, count;
	long long port;
	int mode;

	if (cfg_check_map(doc, n, "tunnel", tunnel_keys, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "mode")) != NULL) {
		if (cfg_get_enum(
			doc, v, "tunnel.mode", mode_names, &mode, cause) != 0)
			return (-1);
		sb->sb_tunnel_mode = (enum gw_tunnel_mode)mode;
	}
	sb->sb_tunnel_client_wait = 10 * 1000;
	sb->sb_tunnel_http_timeout = 600 * 1000;
	sb->sb_tunnel_silence = 60 * 1000;
	sb->sb_tunnel_max_queued = 256;
	if ((v = cfg_map_get(n, "token")) != NULL) {
		if (cfg_get_string(doc, v, "tunnel.token", &sb->sb_tunnel_token,
			cause) != 0)
			return (-1);
		if (strlen(sb->sb_tunnel_token) < 16)
			return (cfg_error(doc, v, cause,
			    "tunnel.token must be at "
			    "least 16 bytes"));
	}
	if ((v = cfg_map_get(n, "client_wait")) != NULL &&
	    cfg_get_duration(doc, v, "tunnel.client_wait", 0, DAY_MS,
		&sb->sb_tunnel_client_wait, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "http_timeout")) != NULL &&
	    cfg_get_duration(doc, v, "tunnel.http_timeout", 100, DAY_MS,
		&sb->sb_tunnel_http_timeout, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "silence_timeout")) != NULL &&
	    cfg_get_duration(doc, v, "tunnel.silence_timeout", 1000, DAY_MS,
		&sb->sb_tunnel_silence, cause) != 0)
		return (-1);
	if ((v = cfg_map_get(n, "max_queued")) != NULL) {
		if (cfg_get_int(doc, v, "tunnel.max_queued", 0, 1024, &port,
			cause) != 0)
			return (-1);
		sb->sb_tunnel_max_queued = (uint64_t)port;
	}
	if ((v = cfg_map_get(n, "listen_port")) == NULL)
		return (cfg_error(doc, n, cause, "tunnel needs listen_port"));
	count = v->n_type == CFG_SEQ ? v->n_count : 1;
	if (count == 0)
		return (cfg_error(doc, v, cause,
		    "tunnel.listen_port needs at "
		    "least one port"));
	sb->sb_tunnel_ports = xcalloc(count, sizeof *sb->sb_tunnel_ports);
	for (i = 0; i < count; i++) {
		p = v->n_type == CFG_SEQ ? v->n_items[i] : v;
		if (cfg_get_int(doc, p, "tunnel.listen_port", 2, 65535, &port,
			cause) != 0)
			return (-1);
		sb->sb_tunnel_ports[sb->sb_ntunnel_ports++] = (uint16_t)port;
	}
	return (0);
}

/* Check a sandbox id: 1 to 200 bytes, no spaces or control characters. */
static int
conf_sandbox_id(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *id, char **cause)
{
	size_t i;

	if (*id == '\0' || strlen(id) > SAFEID_MAX)
		return (cfg_error(
		    doc, n, cause, "a sandbox id must be 1 to 200 bytes"));
	for (i = 0; id[i] != '\0'; i++) {
		if ((unsigned char)id[i] <= ' ' || id[i] == 0x7f)
			return (cfg_error(doc, n, cause,
			    "a sandbox id must "
			    "not contain spaces or control characters"));
	}
	return (0);
}

/*
 * Parse one sandbox entry into a new sandbox with one reference; the
 * caller checks that its id and safe id are unique.
 */
struct gw_sandbox *
conf_sandbox_parse(const struct gw_config *cf, const struct cfg_doc *doc,
    const struct cfg_node *n, char **cause)
{
	struct gw_sandbox *sb;
	struct cfg_node *v, *netns;
	long long ll;
	char *why;

	if (cfg_check_map(doc, n, "a sandbox", sandbox_keys, cause) != 0)
		return (NULL);
	sb = xcalloc(1, sizeof *sb);
	sb->sb_refcnt = 1;
	if ((v = cfg_map_get(n, "id")) == NULL) {
		cfg_error(doc, n, cause, "a sandbox needs an id");
		goto fail;
	}
	if (cfg_get_string(doc, v, "sandbox id", &sb->sb_id, cause) != 0 ||
	    conf_sandbox_id(doc, v, sb->sb_id, cause) != 0)
		goto fail;
	sb->sb_safe_id = safeid_make(sb->sb_id);

	v = cfg_map_get(n, "address");
	netns = cfg_map_get(n, "netns");
	if ((v == NULL) == (netns == NULL)) {
		cfg_error(doc, v != NULL ? netns : n, cause,
		    "sandbox '%s' "
		    "needs exactly one of address and netns",
		    sb->sb_id);
		goto fail;
	}
	if (v != NULL) {
		if (cfg_get_string(doc, v, "address", &sb->sb_address, cause) !=
		    0)
			goto fail;
		if (addr_parse_ip(sb->sb_address, 0, &sb->sb_addr,
			&sb->sb_addrlen) != 0) {
			cfg_error(doc, v, cause,
			    "address must be a literal "
			    "IPv4 or IPv6 address, not '%s'",
			    sb->sb_address);
			goto fail;
		}
	} else {
		if (cfg_get_string(doc, netns, "netns", &sb->sb_netns, cause) !=
		    0)
			goto fail;
		if (netns_check(cf != NULL ? cf->cf_netns_dir : GW_NETNS_DIR,
			sb->sb_netns, &why) != 0) {
			cfg_error(doc, netns, cause, "%s", why);
			free(why);
			goto fail;
		}
		/* Inside its namespace the sandbox's ports are on loopback. */
		addr_parse_ip("127.0.0.1", 0, &sb->sb_addr, &sb->sb_addrlen);
	}
	if ((v = cfg_map_get(n, "max_connections")) != NULL) {
		if (cfg_get_int(
			doc, v, "max_connections", 1, 1000000, &ll, cause) != 0)
			goto fail;
		sb->sb_max_connections = (uint64_t)ll;
	}
	if ((v = cfg_map_get(n, "ports")) != NULL &&
	    conf_ports(cf, doc, v, sb, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(n, "tunnel")) != NULL &&
	    conf_tunnel(doc, v, sb, cause) != 0)
		goto fail;
	return (sb);
fail:
	sandbox_unref(sb);
	return (NULL);
}

/* Parse the sandboxes list; ids and safe ids must be unique. */
static int
conf_sandboxes(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	struct gw_sandbox *sb, *other;
	size_t i, j;

	if (cfg_check_seq(doc, n, "sandboxes", cause) != 0)
		return (-1);
	if (n->n_count > 0)
		cf->cf_sandboxes = xcalloc(
		    n->n_count, sizeof *cf->cf_sandboxes);
	for (i = 0; i < n->n_count; i++) {
		sb = conf_sandbox_parse(cf, doc, n->n_items[i], cause);
		if (sb == NULL)
			return (-1);
		cf->cf_sandboxes[cf->cf_nsandboxes++] = sb;
		for (j = 0; j + 1 < cf->cf_nsandboxes; j++) {
			other = cf->cf_sandboxes[j];
			if (strcmp(other->sb_id, sb->sb_id) != 0 &&
			    strcmp(other->sb_safe_id, sb->sb_safe_id) != 0)
				continue;
			return (cfg_error(doc, cfg_map_get(n->n_items[i], "id"),
			    cause,
			    "sandbox '%s' has the same id or safe id "
			    "as sandbox '%s'",
			    sb->sb_id, other->sb_id));
		}
	}
	return (0);
}

/* Is path absolute, with no empty, "." or ".." component? */
static int
conf_path_clean(const char *path)
{
	const char *p, *end;
	size_t len;

	if (*path != '/')
		return (0);
	for (p = path + 1; *p != '\0'; p = end + 1) {
		if ((end = strchr(p, '/')) == NULL)
			end = p + strlen(p);
		len = (size_t)(end - p);
		if (len == 0 || (len == 1 && p[0] == '.') ||
		    (len == 2 && p[0] == '.' && p[1] == '.'))
			return (0);
		if (*end == '\0')
			break;
	}
	return (1);
}

/*
 * netns_dir: the one directory sandbox namespaces may be in.  A trailing
 * slash is dropped; the rest must be a clean absolute path.
 */
static int
conf_netns_dir(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	char *dir;
	size_t len;

	if (cfg_get_string(doc, n, "netns_dir", &dir, cause) != 0)
		return (-1);
	len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		dir[--len] = '\0';
	if (!conf_path_clean(dir)) {
		cfg_error(doc, n, cause,
		    "netns_dir must be an absolute path without '.', '..' "
		    "or '//', such as /run/netns, not '%s'",
		    dir);
		free(dir);
		return (-1);
	}
	free(cf->cf_netns_dir);
	cf->cf_netns_dir = dir;
	return (0);
}

/* workers: "auto" (one per usable CPU) or a count. */
static int
conf_workers(const struct cfg_doc *doc, const struct cfg_node *n,
    struct gw_config *cf, char **cause)
{
	long long ll;

	if (n->n_type == CFG_SCALAR && n->n_value != NULL &&
	    strcmp(n->n_value, "auto") == 0) {
		cf->cf_workers = 0;
		return (0);
	}
	if (n->n_type == CFG_SCALAR && n->n_value != NULL &&
	    strspn(n->n_value, "0123456789") != strlen(n->n_value))
		return (cfg_error(doc, n, cause,
		    "workers must be auto or a count, not '%s'", n->n_value));
	if (cfg_get_int(doc, n, "workers", 1, 256, &ll, cause) != 0)
		return (-1);
	cf->cf_workers = (uint64_t)ll;
	return (0);
}

/* Build a configuration from a parsed document. */
static struct gw_config *
conf_build(const struct cfg_doc *doc, char **cause)
{
	struct gw_config *cf;
	struct cfg_node *root = doc->d_root, *v;

	cf = xcalloc(1, sizeof *cf);
	cf->cf_refcnt = 1;
	cf->cf_file = xstrdup(doc->d_file);
	conf_defaults(cf);
	if (root != NULL &&
	    cfg_check_map(doc, root, "the configuration", top_keys, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "log")) != NULL &&
	    conf_log(doc, v, cf, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "listen")) == NULL) {
		cfg_error(doc, root, cause,
		    "the configuration needs a listen "
		    "section");
		goto fail;
	}
	if (conf_listen(doc, v, cf, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "admin")) != NULL &&
	    conf_admin(doc, v, cf, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "domains")) != NULL) {
		if (conf_domains(doc, v, cf, cause) != 0)
			goto fail;
	} else {
		cf->cf_domains = xcalloc(2, sizeof *cf->cf_domains);
		cf->cf_domain_formats = xcalloc(
		    2, sizeof *cf->cf_domain_formats);
		cf->cf_domains[cf->cf_ndomains++] = xstrdup("localhost");
	}
	if ((v = cfg_map_get(root, "workers")) != NULL &&
	    conf_workers(doc, v, cf, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "timeouts")) != NULL &&
	    conf_timeouts(doc, v, cf, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "limits")) != NULL &&
	    conf_limits(doc, v, cf, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "auth")) != NULL &&
	    conf_auth(doc, v, cf, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "netns_dir")) != NULL &&
	    conf_netns_dir(doc, v, cf, cause) != 0)
		goto fail;
	if ((v = cfg_map_get(root, "sandboxes")) != NULL &&
	    conf_sandboxes(doc, v, cf, cause) != 0)
		goto fail;
	return (cf);
fail:
	conf_free(cf);
	return (NULL);
}

/* Load and check a configuration file. */
struct gw_config *
conf_load(const char *path, char **cause)
{
	struct cfg_doc *doc;
	struct gw_config *cf;

	if ((doc = cfg_parse_file(path, cause)) == NULL)
		return (NULL);
	cf = conf_build(doc, cause);
	cfg_doc_free(doc);
	return (cf);
}

/* Load and check a configuration held in a string; name is for messages. */
struct gw_config *
conf_load_string(const char *name, const char *text, char **cause)
{
	struct cfg_doc *doc;
	struct gw_config *cf;

	if ((doc = cfg_parse_string(name, text, strlen(text), cause)) == NULL)
		return (NULL);
	cf = conf_build(doc, cause);
	cfg_doc_free(doc);
	return (cf);
}

/* Free what a listener's configuration holds. */
static void
conf_listen_free(struct gw_listen *l)
{
	size_t i, j;

	for (i = 0; i < l->l_nsni; i++) {
		for (j = 0; j < l->l_sni[i].sn_count; j++)
			free(l->l_sni[i].sn_names[j]);
		free(l->l_sni[i].sn_names);
		free(l->l_sni[i].sn_cert);
		free(l->l_sni[i].sn_key);
	}
	free(l->l_sni);
	free(l->l_cert);
	free(l->l_key);
	free(l->l_address);
}

/* The secret new tokens are signed with (auth.secrets' first), or NULL. */
const struct token_key *
conf_signing_key(const struct gw_config *cf)
{
	return (cf->cf_nauth_secrets == 0 ? NULL : &cf->cf_auth_secrets[0]);
}

/* Take a reference to a configuration. */
void
conf_ref(struct gw_config *cf)
{
	__atomic_add_fetch(&cf->cf_refcnt, 1, __ATOMIC_RELAXED);
}

/* Drop a reference to a configuration; the last one frees it. */
void
conf_free(struct gw_config *cf)
{
	size_t i;

	/* Loops let go of a replaced configuration from their threads. */
	if (cf == NULL ||
	    __atomic_sub_fetch(&cf->cf_refcnt, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	for (i = 0; i < cf->cf_nsandboxes; i++)
		sandbox_unref(cf->cf_sandboxes[i]);
	free(cf->cf_sandboxes);
	for (i = 0; i < cf->cf_ndomains; i++)
		free(cf->cf_domains[i]);
	free(cf->cf_domains);
	free(cf->cf_domain_formats);
	for (i = 0; i < cf->cf_nlisten; i++)
		conf_listen_free(&cf->cf_listen[i]);
	free(cf->cf_listen);
	free(cf->cf_admin.l_address);
	free(cf->cf_admin_token);
	for (i = 0; i < cf->cf_nauth_secrets; i++) {
		if (cf->cf_auth_secrets[i].tk_key == NULL)
			continue;
		explicit_bzero(cf->cf_auth_secrets[i].tk_key,
		    cf->cf_auth_secrets[i].tk_len);
		free(cf->cf_auth_secrets[i].tk_key);
	}
	free(cf->cf_auth_secrets);
	free(cf->cf_auth_cookie);
	free(cf->cf_log_file);
	free(cf->cf_netns_dir);
	free(cf->cf_file);
	free(cf);
}
