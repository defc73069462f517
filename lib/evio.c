/*
 * The event base both programs run on, and the allocator's tuning for
 * their I/O buffers (lib/evio.h).
 */
#include <malloc.h>
#include <stddef.h>

#include <event2/event.h>

#include "evio.h"

/*
 * Keep I/O buffers on the heap.  glibc gives an allocation over 128 KiB its
 * own mmap and returns it at free, and gives the heap's top back past
 * 128 KiB too, so every 256 KiB read buffer of a bulk transfer cost fresh
 * zeroed pages: page faults were a quarter of the gateway's CPU in a 1 GiB
 * download.  Buffers up to 1 MiB now come from the heap, and up to 16 MiB
 * of freed heap is kept for the next ones.
 */
void
evio_malloc_tune(void)
{
	mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 16 * 1024 * 1024);
}

/*
 * An event base with the epoll changelist: an event added and removed in
 * the same loop iteration costs no system call.
 */
struct event_base *
evio_base_new(void)
{
	struct event_config *cfg;
	struct event_base *base;

	if ((cfg = event_config_new()) == NULL)
		return (NULL);
	event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return (base);
}
