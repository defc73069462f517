/*
 * The event base both programs run on (the epoll changelist), and the
 * allocator's tuning for their I/O buffers.
 */
#ifndef AK_EVIO_H
#define AK_EVIO_H

struct event_base;

struct event_base *evio_base_new(void);
void evio_malloc_tune(void);

#endif
