/* Monotonic time. */
#ifndef AK_CLOCK_H
#define AK_CLOCK_H

#include <stdint.h>
#include <sys/time.h>

uint64_t clock_mono_usec(void);
uint64_t clock_mono_msec(void);
void clock_msec_to_tv(uint64_t, struct timeval *);

#endif
