/*
 * libFuzzer harness for the HTTP/2 client to sandbox ports
 * (gateway/upstream_h2.c): a session on one end of a socketpair with three
 * streams (a GET, a POST with a body, a HEAD), and the input as the
 * server's bytes on the other end, after a valid SETTINGS frame, in pieces
 * whose sizes the input chooses.  A trivial owner takes every body byte,
 * pauses now and then, and lets go of its stream at the end or an error.
 * Nothing may crash, each stream's owner hears exactly one end (done,
 * error, event or failure), and nothing may stay allocated (LeakSanitizer).
 */
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw.h"

#define FUZZ_ASSERT(c) fuzz_assert((c) != 0, #c, __LINE__)

static void
fuzz_assert(int ok, const char *what, int line)
{
	if (ok)
		return;
	fprintf(stderr, "fuzz_uph2.c:%d: %s\n", line, what);
	abort();
}

#define FZ_STREAMS 3

/* One stream's owner. */
struct fz_up {
	struct upstream *u;
	int ends; /* done, error, event or failure heard */
	int bodies;
};

static void
fz_end(struct upstream *up, struct fz_up *f)
{
	FUZZ_ASSERT(f->ends == 0);
	f->ends++;
	upstream_close(up, "fuzz: done");
	f->u = NULL;
}

static void
fz_ready(struct upstream *up, void *arg)
{
	(void)up;
	(void)arg;
}

static void
fz_failed(struct upstream *up, const struct gw_error *e, const char *why,
    void *arg)
{
	(void)e;
	(void)why;
	fz_end(up, arg);
}

static void
fz_event(struct upstream *up, short what, void *arg)
{
	(void)what;
	fz_end(up, arg);
}

static int
fz_head(struct upstream *up, const struct head *h, void *arg)
{
	size_t i;

	(void)up;
	(void)arg;
	FUZZ_ASSERT(h->h_status >= 100 && h->h_status <= 999);
	for (i = 0; i < h->h_nfields; i++)
		FUZZ_ASSERT(strlen(h->h_fields[i].value) ==
		    h->h_fields[i].value_len);
	return (0);
}

static int
fz_body(struct upstream *up, struct evbuffer *src, size_t n, void *arg)
{
	struct fz_up *f = arg;

	FUZZ_ASSERT(evbuffer_get_length(src) >= n);
	evbuffer_drain(src, n);
	/* A slow client now and then: the window stays closed a while. */
	if (++f->bodies % 3 == 0)
		upstream_read_pause(up);
	return (0);
}

static void
fz_trailers(struct upstream *up, const struct hfield *t, size_t n, void *arg)
{
	(void)up;
	(void)arg;
	FUZZ_ASSERT(n == 0 || t[0].name != NULL);
}

static void
fz_done(struct upstream *up, void *arg)
{
	fz_end(up, arg);
}

static void
fz_error(struct upstream *up, const struct gw_error *e, const char *why,
    void *arg)
{
	(void)e;
	FUZZ_ASSERT(why != NULL);
	fz_end(up, arg);
}

static const struct upstream_owner fz_owner = {
	.uo_ready = fz_ready,
	.uo_failed = fz_failed,
	.uo_event = fz_event,
	.uo_interim = fz_head,
	.uo_head = fz_head,
	.uo_body = fz_body,
	.uo_trailers = fz_trailers,
	.uo_done = fz_done,
	.uo_error = fz_error,
};

/* A SETTINGS frame with no settings: the server's preface. */
static const uint8_t fz_settings[] = { 0, 0, 0, 4, 0, 0, 0, 0, 0 };

/* Run the loop until nothing is left to do, reading what the client sent. */
static void
fz_run(struct event_base *base, int fd)
{
	char buf[65536];
	int i;

	for (i = 0; i < 8; i++) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		while (read(fd, buf, sizeof buf) > 0)
			;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *methods[FZ_STREAMS] = { "GET", "POST", "HEAD" };
	struct fz_up fz[FZ_STREAMS];
	struct gw_config *cf;
	struct gw g;
	struct head rh;
	struct hfield fl;
	char *cause = NULL;
	size_t i, n;
	int sv[2];

	/* The gateway ignores SIGPIPE; so must its harness. */
	signal(SIGPIPE, SIG_IGN);
	cf = conf_load_string("fuzz.yaml",
	    "listen: [{address: 127.0.0.1:1}]\n"
	    "sandboxes: [{id: s, address: 127.0.0.1, ports: "
	    "[{port: 80, protocol: h2c}]}]\n",
	    &cause);
	FUZZ_ASSERT(cf != NULL);
	memset(&g, 0, sizeof g);
	g.g_base = event_base_new();
	g.g_conf = cf;
	g.g_limits.max_head = cf->cf_max_header_size;
	g.g_limits.max_line = 8192;
	g.g_limits.max_headers = cf->cf_max_headers;
	upstream_pool_init(&g);
	FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) ==
	    0);
	upstream_h2_adopt(&g, cf->cf_sandboxes[0], 80, sv[0]);
	memset(fz, 0, sizeof fz);
	for (i = 0; i < FZ_STREAMS; i++) {
		fz[i].u = upstream_h2_get(
		    &g, cf->cf_sandboxes[0], 80, 0, &fz_owner, &fz[i]);
		FUZZ_ASSERT(fz[i].u->u_state == UP_S_ACTIVE);
		memset(&rh, 0, sizeof rh);
		rh.h_method = methods[i];
		rh.h_method_len = strlen(methods[i]);
		rh.h_target = "/f";
		rh.h_target_len = 2;
		rh.h_authority = "s";
		rh.h_authority_len = 1;
		hfield_set(&fl, "x-fuzz", "1");
		rh.h_fields = &fl;
		rh.h_nfields = 1;
		upstream_h2_request(fz[i].u, &rh, i == 1);
		upstream_read_response(fz[i].u, i == 2);
		upstream_h2_timeouts(fz[i].u, 0, 0, 0);
		if (i == 1) {
			evbuffer_add(upstream_h2_body_out(fz[i].u), "body", 4);
			upstream_h2_body_more(fz[i].u, 1);
		}
	}
	fz_run(g.g_base, sv[1]);
	(void)write(sv[1], fz_settings, sizeof fz_settings);
	/* The first byte of each piece says how long the piece is. */
	while (size > 0) {
		n = 1 + data[0] % 64;
		data++;
		size--;
		if (n > size)
			n = size;
		if (n > 0 && write(sv[1], data, n) < 0)
			break;
		data += n;
		size -= n;
		fz_run(g.g_base, sv[1]);
		for (i = 0; i < FZ_STREAMS; i++) {
			if (fz[i].u != NULL)
				upstream_read_resume(fz[i].u);
		}
	}
	fz_run(g.g_base, sv[1]);
	for (i = 0; i < FZ_STREAMS; i++) {
		if (fz[i].u != NULL)
			upstream_close(fz[i].u, "fuzz: over");
		FUZZ_ASSERT(fz[i].ends <= 1);
	}
	upstream_pool_flush(&g);
	close(sv[1]);
	fz_run(g.g_base, -1);
	event_base_free(g.g_base);
	conf_free(cf);
	return (0);
}
