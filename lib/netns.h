/* Sockets created inside a Linux network namespace. */
#ifndef AK_NETNS_H
#define AK_NETNS_H

int netns_socket(
    const char *path, int domain, int type, int protocol, char **cause);

#endif
