/*
 * The reverse-tunnel protocol's limits (tunnel-protocol.md §4.2, §4.3,
 * §11): the reference defaults, the hello that advertises them, V2
 * negotiation from the peer's hello, and the YR_TUNNEL_* environment.
 * The messages themselves are tunproto.c's; both are declared in
 * tunproto.h.
 */
#include <sys/types.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "tunproto.h"

/* Fill l with the reference defaults (§4.2, §11). */
void
tunproto_limits_default(struct tunproto_limits *l)
{
	memset(l, 0, sizeof *l);
	l->l_protocol_version = TUNPROTO_VERSION;
	l->l_max_stream_chunk = TUNPROTO_CHUNK_DEFAULT;
	l->l_max_inflight = TUNPROTO_INFLIGHT_DEFAULT;
	l->l_stream_window_frames = TUNPROTO_WINDOW_DEFAULT;
	l->l_max_body_size = TUNPROTO_MAX_BODY_DEFAULT;
	l->l_max_ws_message_size = TUNPROTO_MAX_WS_DEFAULT;
	l->l_fast_path_body = TUNPROTO_FAST_PATH_DEFAULT;
	l->l_http_timeout = TUNPROTO_HTTP_TIMEOUT_DEFAULT;
}

/*
 * Build the hello advertising l into m (§4.2): every limit, resume:true,
 * and session_id when not NULL (the client's). Refuses what the reference
 * builder refuses. Returns 0, or -1 with *err and m empty.
 */
int
tunproto_hello(const struct tunproto_limits *l, const char *session_id,
    struct tunproto_msg *m, char **err)
{
	memset(m, 0, sizeof *m);
	if (l->l_protocol_version <= 0)
		return (tunproto_fail(
		    err, "protocol_version must be greater than zero"));
	if (l->l_protocol_version > 255)
		return (
		    tunproto_fail(err, "protocol_version must be at most 255"));
	if (l->l_max_stream_chunk < TUNPROTO_CHUNK_MIN)
		return (tunproto_fail(
		    err, "max_stream_chunk must be at least 1024 bytes"));
	if (l->l_max_inflight == 0)
		return (tunproto_fail(
		    err, "max_inflight must be greater than zero"));
	if (l->l_stream_window_frames == 0)
		return (tunproto_fail(
		    err, "stream_window_frames must be greater than zero"));
	if (l->l_max_body_size == 0)
		return (tunproto_fail(
		    err, "max_body_size must be greater than zero"));
	if (l->l_max_ws_message_size == 0)
		return (tunproto_fail(
		    err, "max_ws_message_size must be greater than zero"));
	if (session_id != NULL && !tunproto_uuid_valid(session_id))
		return (tunproto_fail(
		    err, "resumable hello requires a UUID session_id"));

	m->m_type = TUNPROTO_T_HELLO;
	m->m_flags = TUNPROTO_MSG_F_RESUME | TUNPROTO_MSG_F_MAX_BODY |
	    TUNPROTO_MSG_F_MAX_WS;
	m->m_limits = *l;
	m->m_limits.l_fast_path_body = 0;
	m->m_limits.l_http_timeout = 0;
	if (session_id != NULL)
		m->m_session_id = xstrdup(session_id);
	return (0);
}

/* Smaller of two sizes. */
static uint64_t
tunproto_min(uint64_t a, uint64_t b)
{
	return (a < b ? a : b);
}

/*
 * Negotiate V2 from local limits and the peer's hello as role (§4.3).
 * Returns 0 with the negotiated limits in *out and *resumable set; or -1
 * with *err when the hello does not select V2 (the caller stays V1 and
 * still accepts a later valid hello, as the client and Rust do). As
 * sandbox, a hello with resume:true but no canonical session_id selects V2
 * without resume; the caller may log that case from the hello's flags.
 */
int
tunproto_negotiate(const struct tunproto_limits *local,
    const struct tunproto_msg *peer, int role, struct tunproto_limits *out,
    int *resumable, char **err)
{
	const struct tunproto_limits *p;
	uint64_t body, ws, budget;

	if (resumable != NULL)
		*resumable = 0;
	if (peer == NULL || peer->m_type != TUNPROTO_T_HELLO)
		return (tunproto_fail(err, "not a hello"));
	if (role != TUNPROTO_ROLE_CLIENT && role != TUNPROTO_ROLE_SANDBOX)
		return (tunproto_fail(err, "unknown tunnel role %d", role));
	p = &peer->m_limits;
	if (local->l_protocol_version < TUNPROTO_VERSION)
		return (tunproto_fail(err,
		    "tunnel protocol V2 is disabled locally "
		    "(protocol_version %d)",
		    local->l_protocol_version));
	if (local->l_max_stream_chunk < TUNPROTO_CHUNK_MIN ||
	    local->l_max_inflight == 0 || local->l_stream_window_frames == 0 ||
	    local->l_max_body_size == 0 || local->l_max_ws_message_size == 0)
		return (tunproto_fail(err, "invalid local tunnel limits"));
	if (p->l_protocol_version < TUNPROTO_VERSION)
		return (tunproto_fail(err,
		    "peer advertised tunnel protocol version %d",
		    p->l_protocol_version));

	/* Optional on receive: absent means the receiver's own (§4.2). */
	body = (peer->m_flags & TUNPROTO_MSG_F_MAX_BODY)
	    ? p->l_max_body_size
	    : local->l_max_body_size;
	ws = (peer->m_flags & TUNPROTO_MSG_F_MAX_WS)
	    ? p->l_max_ws_message_size
	    : local->l_max_ws_message_size;
	if (p->l_max_stream_chunk < TUNPROTO_CHUNK_MIN ||
	    p->l_max_inflight == 0 || p->l_stream_window_frames == 0 ||
	    body == 0 || ws == 0)
		return (tunproto_fail(
		    err, "invalid tunnel V2 capability advertisement"));
	if (role == TUNPROTO_ROLE_CLIENT &&
	    !(peer->m_flags & TUNPROTO_MSG_F_RESUME))
		return (tunproto_fail(
		    err, "tunnel V2 peer must support resumable sessions"));

	*out = *local;
	out->l_protocol_version = TUNPROTO_VERSION;
	out->l_max_stream_chunk = tunproto_min(
	    local->l_max_stream_chunk, p->l_max_stream_chunk);
	out->l_max_inflight = tunproto_min(
	    local->l_max_inflight, p->l_max_inflight);
	/* All windows together fit the 480-frame data budget (§6.3, §14.9). */
	budget = TUNPROTO_DATA_BUDGET / out->l_max_inflight;
	if (budget < 1)
		budget = 1;
	out->l_stream_window_frames = tunproto_min(
	    tunproto_min(
		local->l_stream_window_frames, p->l_stream_window_frames),
	    budget);
	out->l_max_body_size = tunproto_min(local->l_max_body_size, body);
	out->l_max_ws_message_size = tunproto_min(
	    local->l_max_ws_message_size, ws);
	out->l_fast_path_body = tunproto_min(local->l_fast_path_body,
	    tunproto_min(out->l_max_body_size, TUNPROTO_V1_BODY_MAX));

	if (resumable != NULL) {
		if (role == TUNPROTO_ROLE_CLIENT)
			*resumable = 1;
		else
			*resumable = (peer->m_flags & TUNPROTO_MSG_F_RESUME) &&
			    tunproto_uuid_valid(peer->m_session_id);
	}
	return (0);
}

/* Look a variable up in the process environment. */
static const char *
tunproto_getenv(const char *name, void *arg)
{
	(void)arg;
	return (getenv(name));
}

/* Append one sentence to the "; "-separated list *problems. */
static void __attribute__((format(printf, 2, 3)))
tunproto_problem(char **problems, const char *fmt, ...)
{
	va_list ap;
	char *s, *joined;

	va_start(ap, fmt);
	xvasprintf(&s, fmt, ap);
	va_end(ap);
	if (*problems == NULL) {
		*problems = s;
		return;
	}
	xasprintf(&joined, "%s; %s", *problems, s);
	free(*problems);
	free(s);
	*problems = joined;
}

/*
 * Read a positive integer variable as the reference client does: unset
 * gives def; otherwise an optionally signed decimal integer (white space
 * around it allowed) that is at least 1. The result is capped at max.
 * An invalid value gives def (capped) and a sentence in *problems; -1.
 */
static int
tunproto_env_uint(const char *(*get)(const char *, void *), void *arg,
    const char *name, uint64_t def, uint64_t max, uint64_t *out,
    char **problems)
{
	const char *raw;
	char *t, *p;
	uint64_t v = 0;
	int neg = 0;

	*out = def < max ? def : max;
	if ((raw = get(name, arg)) == NULL)
		return (0);
	t = xstrtrim(raw);
	p = t;
	if (*p == '+' || *p == '-')
		neg = (*p++ == '-');
	if (*p == '\0' || strspn(p, "0123456789") != strlen(p)) {
		tunproto_problem(problems,
		    "%s must be a positive integer (got '%.64s')", name, raw);
		free(t);
		return (-1);
	}
	for (; *p != '\0'; p++) {
		if (v > (UINT64_MAX - 9) / 10) {
			v = UINT64_MAX; /* the cap applies below */
			break;
		}
		v = v * 10 + (uint64_t)(*p - '0');
	}
	free(t);
	if (neg || v == 0) {
		tunproto_problem(problems,
		    "%s must be greater than zero (got '%.64s')", name, raw);
		return (-1);
	}
	*out = v < max ? v : max;
	return (0);
}

/*
 * Read YR_TUNNEL_HTTP_TIMEOUT: positive finite seconds, fractions allowed;
 * anything unusable gives 600 and a warning (both references fall back).
 */
static int
tunproto_env_timeout(const char *(*get)(const char *, void *), void *arg,
    double *out, char **warnings)
{
	const char *name = "YR_TUNNEL_HTTP_TIMEOUT", *raw;
	char *t, *end;
	double v = 0;

	*out = TUNPROTO_HTTP_TIMEOUT_DEFAULT;
	if ((raw = get(name, arg)) == NULL)
		return (0);
	t = xstrtrim(raw);
	end = t;
	if (*t != '\0' && strspn(t, "0123456789.eE+-") == strlen(t))
		v = strtod(t, &end);
	/* Below a nanosecond or beyond 2^64 s a timer cannot hold it. */
	if (end == t || *end != '\0' || !isfinite(v) || v < 1e-9 ||
	    v >= 18446744073709551616.0) {
		tunproto_problem(warnings,
		    "%s '%.64s' is not a positive number of seconds; using %g",
		    name, raw, TUNPROTO_HTTP_TIMEOUT_DEFAULT);
		free(t);
		return (-1);
	}
	*out = v;
	free(t);
	return (0);
}

/*
 * Fill l from the YR_TUNNEL_* variables of §11 (looked up with get, or
 * getenv when get is NULL): defaults, caps, the 1024 chunk floor and the
 * fast-path cap of min(max_body, 5 MiB). Returns 0; 1 with a warning in
 * *err (an unusable HTTP timeout, 600 s used); or -1 with *err naming each
 * invalid integer. In every case l is complete, with the default in place
 * of each invalid value: the client refuses to start on -1 (reference
 * client), the sandbox logs *err and carries on (Rust sandbox).
 */
int
tunproto_limits_from_env(struct tunproto_limits *l,
    const char *(*get)(const char *, void *), void *arg, char **err)
{
	char *errors = NULL, *warnings = NULL;
	uint64_t v;
	int rv = 0;

	if (get == NULL)
		get = tunproto_getenv;
	tunproto_limits_default(l);

	if (tunproto_env_uint(get, arg, "YR_TUNNEL_PROTOCOL_VERSION",
		TUNPROTO_VERSION, TUNPROTO_VERSION, &v, &errors) != 0)
		rv = -1;
	l->l_protocol_version = (int)v;
	if (tunproto_env_uint(get, arg, "YR_TUNNEL_MAX_BODY_SIZE",
		TUNPROTO_MAX_BODY_DEFAULT, TUNPROTO_MAX_BODY_CAP,
		&l->l_max_body_size, &errors) != 0)
		rv = -1;
	if (tunproto_env_uint(get, arg, "YR_TUNNEL_MAX_WS_MESSAGE_SIZE",
		TUNPROTO_MAX_WS_DEFAULT, TUNPROTO_MAX_WS_CAP,
		&l->l_max_ws_message_size, &errors) != 0)
		rv = -1;
	if (tunproto_env_uint(get, arg, "YR_TUNNEL_STREAM_CHUNK_BYTES",
		TUNPROTO_CHUNK_DEFAULT, TUNPROTO_CHUNK_CAP, &v, &errors) != 0)
		rv = -1;
	l->l_max_stream_chunk = v < TUNPROTO_CHUNK_MIN ? TUNPROTO_CHUNK_MIN : v;
	if (tunproto_env_uint(get, arg, "YR_TUNNEL_MAX_INFLIGHT",
		TUNPROTO_INFLIGHT_DEFAULT, TUNPROTO_INFLIGHT_CAP,
		&l->l_max_inflight, &errors) != 0)
		rv = -1;
	if (tunproto_env_uint(get, arg, "YR_TUNNEL_STREAM_WINDOW_FRAMES",
		TUNPROTO_WINDOW_DEFAULT, TUNPROTO_WINDOW_CAP,
		&l->l_stream_window_frames, &errors) != 0)
		rv = -1;
	if (tunproto_env_uint(get, arg, "YR_TUNNEL_FAST_PATH_BODY_BYTES",
		TUNPROTO_FAST_PATH_DEFAULT,
		tunproto_min(l->l_max_body_size, TUNPROTO_V1_BODY_MAX),
		&l->l_fast_path_body, &errors) != 0)
		rv = -1;
	if (tunproto_env_timeout(get, arg, &l->l_http_timeout, &warnings) !=
		0 &&
	    rv == 0)
		rv = 1;

	if (warnings != NULL && errors != NULL) {
		tunproto_problem(&errors, "%s", warnings);
		free(warnings);
		warnings = NULL;
	}
	if (err != NULL && rv != 0)
		*err = errors != NULL ? errors : warnings;
	else {
		free(errors);
		free(warnings);
	}
	return (rv);
}
