/* Monotonic time for timeouts and durations; never the wall clock. */
#include <time.h>

#include "clock.h"

/* Microseconds on the monotonic clock. */
uint64_t
clock_mono_usec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ((uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000);
}

/* Milliseconds on the monotonic clock. */
uint64_t
clock_mono_msec(void)
{
	return (clock_mono_usec() / 1000);
}

/* Fill a timeval with a duration in milliseconds. */
void
clock_msec_to_tv(uint64_t ms, struct timeval *tv)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)((ms % 1000) * 1000);
}
