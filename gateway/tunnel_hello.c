/*
 * Reverse tunnels: a link's hello (tunnel-protocol.md §4.3, §8).  V2 is
 * negotiated, a session a newer client replaced is refused, the newest
 * link takes the tunnel over (§8.2), and exchanges are bound to the
 * client's session: the same resumable session resumes them (replay,
 * §8.4-8.6), any other fails or replays them and is remembered as
 * replaced.  tunnel.c accepts links and routes their messages here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "clock.h"
#include "gw.h"
#include "wsconn.h"

/*
 * Refuse link l, whose hello named a session a newer client replaced: it
 * may not take the tunnel back (newest wins, always).  The link is closed
 * with 4409 tunnel_session_replaced; the tunnel's client stays.
 */
static void
tunnel_link_refuse(struct tunnel_link *l)
{
	static const char msg[] = "A newer client took over this tunnel while "
				  "this one was away.";
	struct tunnel *t = l->l_tunnel;
	char reason[WS_CLOSE_REASON_MAX + 1];
	json_t *f;

	GW_ADD(t->t_gw->g_metrics.m_tunnel_refused, 1);
	log_warn("tunnel %s:%d: client %s (generation %llu) refused: its "
		 "session was replaced by a newer client, which keeps the "
		 "tunnel",
	    t->t_name, t->t_port, l->l_peer, (unsigned long long)l->l_gen);
	if (log_enabled(LOG_LVL_INFO)) {
		f = json_object();
		json_object_set_new(f, "sandbox", json_string(t->t_name));
		json_object_set_new(f, "listen_port", json_integer(t->t_port));
		json_object_set_new(f, "client", json_string(l->l_peer));
		json_object_set_new(
		    f, "generation", json_integer((json_int_t)l->l_gen));
		json_object_set_new(
		    f, "status", json_integer(TUNPROTO_CLOSE_SESSION_REPLACED));
		json_object_set_new(
		    f, "code", json_string(TUNPROTO_SESSION_REPLACED));
		json_object_set_new(f, "message", json_string(msg));
		log_event(LOG_LVL_INFO, "tunnel_refused", f);
	}
	snprintf(
	    reason, sizeof reason, "%s: %s", TUNPROTO_SESSION_REPLACED, msg);
	tunnel_link_drop(l, TUNPROTO_CLOSE_SESSION_REPLACED, reason);
}

/*
 * Link l takes the tunnel over from the client that had it, which is
 * closed with 1012 "replaced" (§8.2).
 */
static void
tunnel_link_take(struct tunnel_link *l)
{
	struct tunnel *t = l->l_tunnel;

	if (t->t_link == l)
		return;
	if (t->t_link != NULL)
		tunnel_link_drop(
		    t->t_link, TUNPROTO_CLOSE_REPLACED, "replaced");
	t->t_link = l;
}

/*
 * A hello on link l (§4.3): negotiate V2, refuse a replaced session that
 * came back, take the tunnel over, then bind the session.  The same
 * resumable session resumes its exchanges (replay, §8.4-8.6); any other
 * client fails the previous session's exchanges, and that session is
 * remembered as replaced.  Held requests go out.
 */
void
tunnel_link_hello(struct tunnel_link *l, const struct tunproto_msg *m)
{
	struct tunnel *t = l->l_tunnel;
	struct gw_metrics *gm = &t->t_gw->g_metrics;
	struct tunnel_xchg **v;
	char *err = NULL;
	size_t i, n, replays = 0;
	int resumable, same;

	if (l->l_state == TLINK_S_V2) {
		log_debug("tunnel %s:%d: client %s: duplicate hello ignored",
		    t->t_name, t->t_port, l->l_peer);
		return;
	}
	if (tunproto_negotiate(&t->t_local, m, TUNPROTO_ROLE_SANDBOX, &l->l_neg,
		&resumable, &err) != 0) {
		log_warn("tunnel %s:%d: client %s: hello not accepted: %s",
		    t->t_name, t->t_port, l->l_peer, err);
		free(err);
		return;
	}
	if (resumable &&
	    tombs_has(&t->t_replaced, m->m_session_id, clock_mono_msec())) {
		tunnel_link_refuse(l);
		return;
	}
	tunnel_link_take(l);
	l->l_state = TLINK_S_V2;
	GW_ADD(gm->m_tunnel_sessions, 1);
	if (resumable)
		l->l_flags |= TLINK_F_RESUMABLE;
	else
		log_warn("tunnel %s:%d: client %s does not resume sessions "
			 "(resume:true with a session_id): its requests fail "
			 "when it disconnects",
		    t->t_name, t->t_port, l->l_peer);
	same = resumable && (t->t_flags & TUNNEL_F_RESUMABLE) &&
	    strcmp(t->t_session, m->m_session_id) == 0;
	if (t->t_flags & TUNNEL_F_EVER)
		GW_ADD(gm->m_tunnel_reconnects, 1);
	t->t_flags |= TUNNEL_F_EVER;

	v = tunnel_xchg_snapshot(t, &n);
	if (!same) {
		for (i = 0; i < n; i++) {
			if (v[i]->x_state == TX_S_DONE ||
			    !tunnel_xchg_sent(v[i]))
				continue;
			if (v[i]->x_flags & TX_F_WS)
				tunnel_ws_lost(
				    v[i], "tunnel client session was replaced");
			else if (tunnel_xchg_retryable(v[i])) {
				/* Sent again below, once the session is set. */
				v[i]->x_flags |= TX_F_RETRY;
				replays++;
			} else
				tunnel_xchg_fail(v[i], gw_err_tunnel_error,
				    NULL,
				    "The tunnel client was replaced by "
				    "another one before answering (tunnel "
				    "client session was replaced).");
		}
		if (t->t_flags & TUNNEL_F_RESUMABLE)
			tombs_add(
			    &t->t_replaced, t->t_session, clock_mono_msec());
		t->t_flags &= ~TUNNEL_F_RESUMABLE;
		t->t_session[0] = '\0';
		if (resumable) {
			t->t_flags |= TUNNEL_F_RESUMABLE;
			snprintf(t->t_session, sizeof t->t_session, "%s",
			    m->m_session_id);
		}
		for (i = 0; i < n; i++) {
			if (v[i]->x_flags & TX_F_RETRY) {
				v[i]->x_flags &= ~TX_F_RETRY;
				tunnel_xchg_resume(v[i]);
			}
		}
		GW_ADD(gm->m_tunnel_replays, replays);
	} else {
		GW_ADD(gm->m_tunnel_resumes, 1);
		for (i = 0; i < n; i++) {
			if (v[i]->x_state == TX_S_DONE ||
			    !tunnel_xchg_sent(v[i]))
				continue;
			if (v[i]->x_state == TX_S_SENT)
				replays++;
			tunnel_xchg_resume(v[i]);
		}
		GW_ADD(gm->m_tunnel_replays, replays);
	}
	log_info("tunnel %s:%d: client %s negotiated V2 (generation %llu, "
		 "chunk %llu, inflight %llu, window %llu)%s",
	    t->t_name, t->t_port, l->l_peer, (unsigned long long)l->l_gen,
	    (unsigned long long)l->l_neg.l_max_stream_chunk,
	    (unsigned long long)l->l_neg.l_max_inflight,
	    (unsigned long long)l->l_neg.l_stream_window_frames,
	    same ? ", session resumed" : "");
	if (replays > 0)
		log_info("tunnel %s:%d: replayed %zu pending request%s%s",
		    t->t_name, t->t_port, replays, replays == 1 ? "" : "s",
		    same ? "" : " (idempotent, to the new client session)");
	/* Requests that waited for a client, in arrival order. */
	for (i = 0; i < n; i++) {
		if (v[i]->x_state == TX_S_HOLD && tunnel_active(t) == l)
			tunnel_xchg_dispatch(v[i]);
	}
	free(v);
}
