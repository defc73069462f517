/*
 * Sockets created inside a network namespace.  A socket belongs to the
 * namespace its creating thread was in, so the thread enters the target
 * namespace with setns(2), creates the socket and returns at once; the
 * socket stays in that namespace for its whole life.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "alloc.h"
#include "netns.h"

/*
 * Create a socket in the namespace at path (e.g. /run/netns/NAME).  Returns
 * the socket, or -1 with *cause set.  The calling thread is back in its own
 * namespace on return; if it cannot get back the process aborts, since
 * every later socket would land in the wrong namespace.
 */
int
netns_socket(const char *path, int domain, int type, int protocol, char **cause)
{
	int self, target, fd, saved;

	if ((self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) ==
	    -1) {
		xasprintf(cause,
		    "cannot open this thread's network namespace: "
		    "%s",
		    strerror(errno));
		return (-1);
	}
	if ((target = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		xasprintf(cause, "cannot open network namespace %s: %s", path,
		    strerror(errno));
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
