/*
 * Sockets created inside a network namespace.  A socket belongs to the
 * namespace its creating thread was in, so the thread enters the target
 * namespace with setns(2), creates the socket and returns at once; the
 * socket stays in that namespace for its whole life.
 *
 * A namespace path comes from the admin API, so it is opened without
 * following a symbolic link and must be a network namespace file (nsfs):
 * neither a link planted in the namespace directory nor a FIFO or device
 * that would block or do something on open is ever entered or read.
 */
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <linux/magic.h>
#include <linux/nsfs.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "netns.h"

/*
 * Open the network namespace file at path for setns(2).  The file itself
 * is first opened as O_PATH without following a link, so nothing but an
 * nsfs file is ever opened for reading.  Returns the descriptor, or -1
 * with *cause set and *missing set when nothing is at path.
 */
static int
netns_open(const char *path, int *missing, char **cause)
{
	char proc[64];
	struct statfs sfs;
	struct stat st;
	int pfd, fd, type;

	*missing = 0;
	if ((pfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC)) == -1) {
		*missing = errno == ENOENT;
		xasprintf(cause, "cannot open network namespace %s: %s", path,
		    strerror(errno));
		return (-1);
	}
	if (fstat(pfd, &st) == 0 && S_ISLNK(st.st_mode)) {
		xasprintf(cause,
		    "network namespace %s is a symbolic link, which is "
		    "not followed",
		    path);
		goto fail;
	}
	if (fstatfs(pfd, &sfs) != 0 || sfs.f_type != NSFS_MAGIC) {
		xasprintf(cause, "%s is not a network namespace file", path);
		goto fail;
	}
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", pfd);
	if ((fd = open(proc, O_RDONLY | O_CLOEXEC)) == -1) {
		xasprintf(cause, "cannot open network namespace %s: %s", path,
		    strerror(errno));
		goto fail;
	}
	close(pfd);
	if ((type = ioctl(fd, NS_GET_NSTYPE)) != CLONE_NEWNET) {
		xasprintf(cause,
		    "%s is a namespace but not a network namespace", path);
		close(fd);
		return (-1);
	}
	return (fd);
fail:
	close(pfd);
	return (-1);
}

/*
 * Check the namespace path of a sandbox against dir, the directory
 * namespaces are allowed in (netns_dir, normalised: absolute, no "." or
 * ".." and no trailing slash).  path must be dir, a slash and one plain
 * name; if something is there it must be a network namespace file.  A name
 * with nothing there yet passes: the namespace may be made after the
 * sandbox is declared, and netns_socket checks again on every use.
 * Returns 0, or -1 with *cause set.
 */
int
netns_check(const char *dir, const char *path, char **cause)
{
	size_t dlen = strlen(dir);
	const char *name;
	int fd, missing;

	if (dlen > 0 && dir[dlen - 1] == '/')
		dlen--; /* dir is "/" */
	if (strncmp(path, dir, dlen) != 0 || path[dlen] != '/') {
		xasprintf(cause,
		    "netns must be a path in %s (netns_dir), such as "
		    "%s/NAME, not '%s'",
		    dir, dlen > 0 ? dir : "", path);
		return (-1);
	}
	name = path + dlen + 1;
	if (*name == '\0' || strchr(name, '/') != NULL ||
	    strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
	    strlen(name) > NAME_MAX) {
		xasprintf(cause,
		    "netns must name a namespace directly in %s "
		    "(netns_dir), as %s/NAME with no '/', '.' or '..' in "
		    "NAME, not '%s'",
		    dir, dlen > 0 ? dir : "", path);
		return (-1);
	}
	if ((fd = netns_open(path, &missing, cause)) == -1) {
		if (!missing)
			return (-1);
		free(*cause);
		*cause = NULL;
		return (0);
	}
	close(fd);
	return (0);
}

/*
 * Create a socket in the namespace at path (e.g. /run/netns/NAME).  Returns
 * the socket, or -1 with *cause set.  The calling thread is back in its own
 * namespace on return; if it cannot get back the process aborts, since
 * every later socket would land in the wrong namespace.
 */
int
netns_socket(const char *path, int domain, int type, int protocol, char **cause)
{
	int self, target, fd, saved, missing;

	if ((self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) ==
	    -1) {
		xasprintf(cause,
		    "cannot open this thread's network namespace: "
		    "%s",
		    strerror(errno));
		return (-1);
	}
	if ((target = netns_open(path, &missing, cause)) == -1) {
		close(self);
		return (-1);
	}
	if (setns(target, CLONE_NEWNET) == -1) {
		xasprintf(cause, "cannot enter network namespace %s: %s", path,
		    strerror(errno));
		close(target);
		close(self);
		return (-1);
	}
	fd = socket(domain, type, protocol);
	saved = errno;
	if (setns(self, CLONE_NEWNET) == -1)
		abort();
	close(target);
	close(self);
	if (fd == -1) {
		xasprintf(cause,
		    "cannot create a socket in network namespace "
		    "%s: %s",
		    path, strerror(saved));
		return (-1);
	}
	return (fd);
}
