/*
 * Routing: which sandbox and port a request is for.  The host form is
 * "{port}-{id}.{domain}" or AKernel's "{id}-{port}.{domain}"; the id in a
 * host is a safe id, compared without regard to case because host names
 * are case-insensitive.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "addr.h"
#include "alloc.h"
#include "gw.h"

/* Does c belong in a safe id written in a host name? */
static int
route_host_char(char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || c == '-');
}

/* Parse n bytes of digits as a port, 1-65535 with no leading zero; or -1. */
static int
route_port(const char *p, size_t n)
{
	long v = 0;
	size_t i;

	if (n == 0 || n > 5 || *p == '0')
		return (-1);
	for (i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return (-1);
		v = v * 10 + (p[i] - '0');
	}
	return (v <= 65535 ? (int)v : -1);
}

/* Are the n bytes at p a safe id as a host name writes it? */
static int
route_host_id(const char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (!route_host_char(p[i]))
			return (0);
	}
	return (n > 0);
}

/* Add a reading (port, id of n bytes) to rh. */
static void
route_host_add(struct route_host *rh, int port, const char *id, size_t n)
{
	rh->rh_port[rh->rh_n] = port;
	rh->rh_id[rh->rh_n] = xstrndup(id, n);
	rh->rh_n++;
}

/* Free the ids of rh's readings. */
void
route_host_clear(struct route_host *rh)
{
	size_t i;

	for (i = 0; i < rh->rh_n; i++)
		free(rh->rh_id[i]);
	memset(rh, 0, sizeof *rh);
}

/*
 * Parse a Host value against the configured domains (the longest that
 * matches; formats[i], or auto when formats is NULL, says how domain i's
 * label reads).  The label next to the domain is "{port}-{id}" (E2B and
 * Daytona style) or "{id}-{port}" (AKernel's), either under auto.
 * Returns ROUTE_OK with rh holding one or two readings, port-first first
 * (xmalloc'd ids: route_host_clear); ROUTE_BAD when the name is under a
 * domain and reads as an attempt at a port URL (it starts with digits, or
 * ends with "-" and digits) but is malformed; ROUTE_NONE for everything
 * else (an IP, the bare domain, another name), which the path form may
 * still route.
 */
enum route_result
route_parse_host(const char *host, size_t len, char *const *domains,
    const enum route_host_format *formats, size_t ndomains,
    struct route_host *rh)
{
	const char *label, *dash, *p, *colon;
	size_t i, dlen, llen, best = 0;
	enum route_host_format fmt = ROUTE_HF_AUTO;
	int port, attempt;

	memset(rh, 0, sizeof *rh);
	if (len == 0 || *host == '[')
		return (ROUTE_NONE);
	/* Drop a :port suffix. */
	if ((colon = memchr(host, ':', len)) != NULL) {
		for (p = colon + 1; p < host + len; p++) {
			if (*p < '0' || *p > '9')
				return (ROUTE_BAD);
		}
		len = (size_t)(colon - host);
	}
	if (len > 0 && host[len - 1] == '.')
		len--; /* a fully qualified name */
	for (i = 0; i < ndomains; i++) {
		dlen = strlen(domains[i]);
		if (len >= dlen + 2 && host[len - dlen - 1] == '.' &&
		    strncasecmp(host + len - dlen, domains[i], dlen) == 0 &&
		    dlen > best) {
			best = dlen;
			fmt = formats != NULL ? formats[i] : ROUTE_HF_AUTO;
		}
	}
	if (best == 0)
		return (ROUTE_NONE);
	llen = len - best - 1;
	/* The label next to the domain is the port URL. */
	label = host + llen;
	while (label > host && label[-1] != '.')
		label--;
	llen -= (size_t)(label - host);
	if (llen == 0)
		return (ROUTE_NONE);
	/* Does the label look like a port URL in an order the domain reads? */
	attempt = 0;
	if (fmt != ROUTE_HF_ID_PORT && *label >= '0' && *label <= '9')
		attempt = 1;
	if (fmt != ROUTE_HF_PORT_ID && label[llen - 1] >= '0' &&
	    label[llen - 1] <= '9' && memchr(label, '-', llen) != NULL)
		attempt = 1;
	if (!attempt)
		return (ROUTE_NONE);
	if (label != host)
		return (ROUTE_BAD); /* deeper names are not port URLs */
	/* {port}-{id}: the first dash ends the port. */
	dash = memchr(label, '-', llen);
	if (fmt != ROUTE_HF_ID_PORT && dash != NULL &&
	    (port = route_port(label, (size_t)(dash - label))) != -1 &&
	    route_host_id(dash + 1, (size_t)(label + llen - dash - 1)))
		route_host_add(
		    rh, port, dash + 1, (size_t)(label + llen - dash - 1));
	/* {id}-{port}: the last dash starts the port. */
	for (dash = label + llen; dash > label && dash[-1] != '-'; dash--)
		;
	if (fmt != ROUTE_HF_PORT_ID && dash > label + 1 &&
	    (port = route_port(dash, (size_t)(label + llen - dash))) != -1 &&
	    route_host_id(label, (size_t)(dash - 1 - label)))
		route_host_add(rh, port, label, (size_t)(dash - 1 - label));
	return (rh->rh_n > 0 ? ROUTE_OK : ROUTE_BAD);
}

/* May c appear in a sandbox id written in a path? */
static int
route_id_char(char c)
{
	return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || strchr("-._~@:+=", c) != NULL);
}

/*
 * Parse the path form "/{id}/{port}[/rest][?query]" of an origin-form
 * target.  Returns ROUTE_OK with *id, *port and *rest (the target the
 * upstream sees: "/rest?query", at least "/") set, all xmalloc'd;
 * ROUTE_RESERVED for the /tunnel/ and /direct/ routes; ROUTE_NONE when the
 * path has no two segments; ROUTE_BAD when the port or id is malformed.
 */
enum route_result
route_parse_path(const char *target, char **id, int *port, char **rest)
{
	const char *seg, *end, *p, *tail;
	size_t idlen, n;
	long v = 0;

	if (*target != '/')
		return (ROUTE_NONE);
	seg = target + 1;
	idlen = strcspn(seg, "/?");
	if (idlen == 0)
		return (ROUTE_NONE);
	if ((idlen == 6 && strncmp(seg, "tunnel", 6) == 0) ||
	    (idlen == 6 && strncmp(seg, "direct", 6) == 0))
		return (ROUTE_RESERVED);
	if (seg[idlen] != '/')
		return (ROUTE_NONE);
	p = seg + idlen + 1;
	end = p + strcspn(p, "/?");
	if (end == p)
		return (ROUTE_NONE);
	for (; p < end; p++) {
		if (*p < '0' || *p > '9' || v > 65535)
			return (ROUTE_BAD);
		v = v * 10 + (*p - '0');
	}
	p = seg + idlen + 1;
	if (*p == '0' || v < 1 || v > 65535)
		return (ROUTE_BAD);
	for (p = seg; p < seg + idlen; p++) {
		if (!route_id_char(*p))
			return (ROUTE_BAD);
	}
	tail = end;
	*port = (int)v;
	*id = xstrndup(seg, idlen);
	if (*tail == '/')
		*rest = xstrdup(tail);
	else {
		/* "" or "?query": the upstream's path is "/" then that. */
		n = strlen(tail);
		*rest = xmalloc(n + 2);
		(*rest)[0] = '/';
		memcpy(*rest + 1, tail, n + 1);
	}
	return (ROUTE_OK);
}

/*
 * Parse the tunnel alias "/tunnel/{id}[/{ws_port}][/tail]".  Returns
 * ROUTE_OK with *id (xmalloc'd) and *ws_port (0 when absent: the default
 * tunnel), or ROUTE_NONE when the path is not under /tunnel/, or ROUTE_BAD
 * when the id is missing or malformed.  A second segment that is not a
 * port belongs to the tail (tunnel-protocol.md section 2.2).
 */
enum route_result
route_parse_tunnel(const char *target, char **id, int *ws_port)
{
	const char *seg, *p, *end;
	size_t idlen;
	long v = 0;

	if (strncmp(target, "/tunnel/", 8) != 0)
		return (strcmp(target, "/tunnel") == 0 ||
			    strncmp(target, "/tunnel?", 8) == 0
			? ROUTE_BAD
			: ROUTE_NONE);
	seg = target + 8;
	idlen = strcspn(seg, "/?");
	if (idlen == 0)
		return (ROUTE_BAD);
	for (p = seg; p < seg + idlen; p++) {
		if (!route_id_char(*p))
			return (ROUTE_BAD);
	}
	*ws_port = 0;
	if (seg[idlen] == '/') {
		p = seg + idlen + 1;
		end = p + strcspn(p, "/?");
		if (end > p && end - p <= 5 && *p != '0') {
			for (; p < end && *p >= '0' && *p <= '9'; p++)
				v = v * 10 + (*p - '0');
			if (p == end && v >= 1 && v <= 65535)
				*ws_port = (int)v;
		}
	}
	*id = xstrndup(seg, idlen);
	return (ROUTE_OK);
}

/* Could a connection to sandbox address sb at port reach listener l? */
static int
route_hits_listener(
    const struct gw_sandbox *sb, const struct gw_listen *l, int port)
{
	const struct sockaddr *la = (const struct sockaddr *)&l->l_ss;
	const struct sockaddr *sa = (const struct sockaddr *)&sb->sb_addr;
	char a[ADDR_STRLEN], b[ADDR_STRLEN];

	if (l->l_address == NULL || addr_port(la) != port)
		return (0);
	/*
	 * A loopback sandbox reaches loopback and wildcard listeners; any
	 * other sandbox address reaches a listener bound to that address.
	 */
	if (addr_is_loopback_or_any(sa))
		return (addr_is_loopback_or_any(la));
	addr_format_ip(la, a, sizeof a);
	addr_format_ip(sa, b, sizeof b);
	return (strcmp(a, b) == 0);
}

/*
 * The rule publishing port on sandbox sb, or NULL.  The gateway's own
 * listeners and the sandbox's tunnel ports are never published, so a
 * request cannot loop back into the gateway or reach the admin API.
 */
const struct gw_port_rule *
route_find_port(const struct gw *g, const struct gw_sandbox *sb, int port)
{
	const struct gw_config *cf = g->g_conf;
	size_t i;

	for (i = 0; i < sb->sb_ntunnel_ports; i++) {
		if (port == sb->sb_tunnel_ports[i] ||
		    port == sb->sb_tunnel_ports[i] - 1)
			return (NULL);
	}
	for (i = 0; i < cf->cf_nlisten; i++) {
		if (route_hits_listener(sb, &cf->cf_listen[i], port))
			return (NULL);
	}
	if (route_hits_listener(sb, &cf->cf_admin, port))
		return (NULL);
	for (i = 0; i < sb->sb_nports; i++) {
		if (port >= sb->sb_ports[i].pr_lo &&
		    port <= sb->sb_ports[i].pr_hi)
			return (&sb->sb_ports[i]);
	}
	return (NULL);
}
