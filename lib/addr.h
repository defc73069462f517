/* Socket address parsing and printing. */
#ifndef AK_ADDR_H
#define AK_ADDR_H

#include <sys/socket.h>

int addr_parse_hostport(
    const char *, struct sockaddr_storage *, socklen_t *, char **cause);
int
addr_parse_ip(const char *, int port, struct sockaddr_storage *, socklen_t *);
int addr_port(const struct sockaddr *);
void addr_set_port(struct sockaddr_storage *, int);
int addr_is_loopback_or_any(const struct sockaddr *);
void addr_format(const struct sockaddr *, char *, size_t);
void addr_format_ip(const struct sockaddr *, char *, size_t);

#define ADDR_STRLEN 64

#endif
