/* Socket address parsing and printing for literal IPv4 and IPv6 addresses. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "addr.h"
#include "alloc.h"

/* Fill ss from a literal IPv4 or IPv6 address and a port; -1 if not one. */
int
addr_parse_ip(
    const char *ip, int port, struct sockaddr_storage *ss, socklen_t *len)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof *ss);
	if (inet_pton(AF_INET, ip, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
		*len = sizeof *sin;
		return (0);
	}
	if (inet_pton(AF_INET6, ip, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		*len = sizeof *sin6;
		return (0);
	}
	return (-1);
}

/*
 * Parse "ip:port" or "[ipv6]:port" with a literal address.  On error *cause
 * holds a sentence (without position).
 */
int
addr_parse_hostport(
    const char *s, struct sockaddr_storage *ss, socklen_t *len, char **cause)
{
	const char *colon, *p;
	char *host;
	long port = 0;

	if (*s == '[') {
		if ((p = strchr(s, ']')) == NULL || p[1] != ':') {
			xasprintf(cause, "'%s' is not [ipv6]:port", s);
			return (-1);
		}
		host = xstrndup(s + 1, (size_t)(p - s - 1));
		colon = p + 1;
	} else {
		if ((colon = strrchr(s, ':')) == NULL ||
		    strchr(s, ':') != colon) {
			xasprintf(cause,
			    "'%s' is not address:port (write IPv6 "
			    "addresses as [::1]:port)",
			    s);
			return (-1);
		}
		host = xstrndup(s, (size_t)(colon - s));
	}
	for (p = colon + 1; *p >= '0' && *p <= '9' && port <= 65535; p++)
		port = port * 10 + (*p - '0');
	if (p == colon + 1 || *p != '\0' || port < 1 || port > 65535) {
		xasprintf(cause, "'%s' has no valid port (1-65535)", s);
		free(host);
		return (-1);
	}
	if (addr_parse_ip(host, (int)port, ss, len) != 0) {
		xasprintf(
		    cause, "'%s' is not a literal IPv4 or IPv6 address", host);
		free(host);
		return (-1);
	}
	free(host);
	return (0);
}

/* Port of an address in host order. */
int
addr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohs(((const struct sockaddr_in *)sa)->sin_port));
	if (sa->sa_family == AF_INET6)
		return (ntohs(((const struct sockaddr_in6 *)sa)->sin6_port));
	return (0);
}

/* Set the port of an address. */
void
addr_set_port(struct sockaddr_storage *ss, int port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
	else if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
}

/* Is the address loopback or the wildcard (so it can reach local ports)? */
int
addr_is_loopback_or_any(const struct sockaddr *sa)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
	uint32_t a;

	if (sa->sa_family == AF_INET) {
		a = ntohl(sin->sin_addr.s_addr);
		return ((a >> 24) == 127 || a == 0);
	}
	if (sa->sa_family == AF_INET6)
		return (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr) ||
		    IN6_IS_ADDR_UNSPECIFIED(&sin6->sin6_addr) ||
		    (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr) &&
			sin6->sin6_addr.s6_addr[12] == 127));
	return (0);
}

/* Print the IP of an address. */
void
addr_format_ip(const struct sockaddr *sa, char *buf, size_t len)
{
	const void *a;

	if (sa->sa_family == AF_INET)
		a = &((const struct sockaddr_in *)sa)->sin_addr;
	else if (sa->sa_family == AF_INET6)
		a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
	else {
		snprintf(buf, len, "unknown");
		return;
	}
	if (inet_ntop(sa->sa_family, a, buf, (socklen_t)len) == NULL)
		snprintf(buf, len, "unknown");
}

/* Print an address as ip:port or [ip6]:port. */
void
addr_format(const struct sockaddr *sa, char *buf, size_t len)
{
	char ip[INET6_ADDRSTRLEN];

	addr_format_ip(sa, ip, sizeof ip);
	if (sa->sa_family == AF_INET6)
		snprintf(buf, len, "[%s]:%d", ip, addr_port(sa));
	else
		snprintf(buf, len, "%s:%d", ip, addr_port(sa));
}
