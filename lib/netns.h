/* Sockets created inside a Linux network namespace. */
#ifndef AK_NETNS_H
#define AK_NETNS_H

int netns_check(const char *dir, const char *path, char **cause);
int netns_socket(
    const char *path, int domain, int type, int protocol, char **cause);

#endif
