/*
 * The service manager is told where the gateway is (libsystemd's
 * sd_notify, Type=notify units): ready, reloading, stopping, and a
 * watchdog ping from the main loop while it turns.  Outside systemd
 * (no NOTIFY_SOCKET) every call is a no-op.
 */
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include <systemd/sd-daemon.h>

#include "clock.h"
#include "gw.h"

/* Ready: serving on every listener (MAINPID: this process). */
void
sdnotify_ready(void)
{
	(void)sd_notifyf(0, "READY=1\nMAINPID=%lu\nSTATUS=serving",
	    (unsigned long)getpid());
}

/*
 * A reload begins: RELOADING=1 with the monotonic time systemd wants to
 * pair it with (Type=notify-reload reads it; Type=notify ignores it).
 */
void
sdnotify_reloading(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	(void)sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu\n"
			    "STATUS=reloading",
	    (unsigned long long)ts.tv_sec * 1000000ULL +
		(unsigned long long)ts.tv_nsec / 1000);
}

/* The reload is done (or refused): serving again. */
void
sdnotify_reloaded(void)
{
	(void)sd_notify(0, "READY=1\nSTATUS=serving");
}

/* Stopping: the service manager waits for the exit, not a crash. */
void
sdnotify_stopping(void)
{
	(void)sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}

/* The watchdog's ping: the main loop still turns. */
static void
sdnotify_watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	(void)sd_notify(0, "WATCHDOG=1");
}

/*
 * With WatchdogSec= (WATCHDOG_USEC for this process), ping at half the
 * interval from g's loop, so a stuck loop is restarted by systemd.
 */
void
sdnotify_watchdog_start(struct gw *g)
{
	struct timeval tv;
	uint64_t usec;

	if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
		return;
	usec /= 2;
	tv.tv_sec = (time_t)(usec / 1000000);
	tv.tv_usec = (suseconds_t)(usec % 1000000);
	g->g_watchdog = event_new(g->g_base, -1, EV_PERSIST,
	    sdnotify_watchdog_cb, NULL);
	event_add(g->g_watchdog, &tv);
	(void)sd_notify(0, "WATCHDOG=1");
	log_info("systemd watchdog: a ping every %llums",
	    (unsigned long long)(usec / 1000));
}

/* Stop the watchdog's pings (the gateway is stopping). */
void
sdnotify_watchdog_stop(struct gw *g)
{
	if (g->g_watchdog == NULL)
		return;
	event_free(g->g_watchdog);
	g->g_watchdog = NULL;
}
