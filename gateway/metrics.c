/*
 * Counters for the admin listener's /metrics, in the Prometheus text
 * exposition format.  Counting is a few additions on the request path;
 * rendering happens only when scraped.
 */
#include <string.h>

#include <event2/buffer.h>

#include "gw.h"

/* Histogram bucket bounds in seconds, ascending. */
static const double metrics_bounds[GW_DURATION_BUCKETS] = { 0.005, 0.01, 0.025,
	0.05, 0.1, 0.25, 0.5, 1, 5, 30 };

/* Count one answer of the gateway's own by its error code (NULL: none). */
void
metrics_code(struct gw *g, const char *code)
{
	struct gw_metrics *m = &g->g_metrics;
	size_t i;

	if (code == NULL)
		return;
	for (i = 0; i < GW_METRIC_CODES; i++) {
		/* The main loop may read the table while we write. */
		if (m->m_codes[i] == NULL)
			__atomic_store_n(
			    &m->m_codes[i], code, __ATOMIC_RELEASE);
		if (m->m_codes[i] == code || strcmp(m->m_codes[i], code) == 0) {
			GW_ADD(m->m_code_counts[i], 1);
			break;
		}
	}
}

/*
 * Count a finished request: its status class, the gateway error code that
 * answered it (NULL when the upstream did), and its duration.
 */
void
metrics_request(
    struct gw *g, int status, const char *code, uint64_t duration_us, int h2)
{
	struct gw_metrics *m = &g->g_metrics;
	size_t i;

	if (status >= 100 && status < 600)
		GW_ADD(m->m_requests[status / 100], 1);
	GW_ADD(m->m_requests_proto[h2 != 0], 1);
	metrics_code(g, code);
	for (i = 0; i < GW_DURATION_BUCKETS; i++) {
		if ((double)duration_us / 1e6 <= metrics_bounds[i])
			break;
	}
	GW_ADD(m->m_duration_buckets[i], 1);
	GW_ADD(m->m_duration_sum_us, duration_us);
	GW_ADD(m->m_duration_count, 1);
}

/* Append one "# HELP" and "# TYPE" pair. */
static void
metrics_head(
    struct evbuffer *out, const char *name, const char *type, const char *help)
{
	evbuffer_add_printf(
	    out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Append the reverse-tunnel metrics (tunnel*.c). */
static void
metrics_tunnel(const struct gw_metrics *m, struct evbuffer *out)
{
	metrics_head(out, "akgw_tunnel_sessions", "gauge",
	    "Tunnels with a client that negotiated the protocol now.");
	evbuffer_add_printf(out, "akgw_tunnel_sessions %llu\n",
	    (unsigned long long)m->m_tunnel_sessions);
	metrics_head(out, "akgw_tunnel_links_total", "counter",
	    "Tunnel client WebSockets accepted.");
	evbuffer_add_printf(out, "akgw_tunnel_links_total %llu\n",
	    (unsigned long long)m->m_tunnel_links);
	metrics_head(out, "akgw_tunnel_reconnects_total", "counter",
	    "Tunnel clients that negotiated after an earlier client.");
	evbuffer_add_printf(out, "akgw_tunnel_reconnects_total %llu\n",
	    (unsigned long long)m->m_tunnel_reconnects);
	metrics_head(out, "akgw_tunnel_resumes_total", "counter",
	    "Tunnel sessions resumed by the same client after a lost link.");
	evbuffer_add_printf(out, "akgw_tunnel_resumes_total %llu\n",
	    (unsigned long long)m->m_tunnel_resumes);
	metrics_head(out, "akgw_tunnel_replays_total", "counter",
	    "Pending tunnel requests sent again after a resume.");
	evbuffer_add_printf(out, "akgw_tunnel_replays_total %llu\n",
	    (unsigned long long)m->m_tunnel_replays);
	metrics_head(out, "akgw_tunnel_requests_total", "counter",
	    "Requests and WebSockets on tunnel listeners, answered or ended.");
	evbuffer_add_printf(out, "akgw_tunnel_requests_total %llu\n",
	    (unsigned long long)m->m_tunnel_requests);
	metrics_head(out, "akgw_tunnel_errors_total", "counter",
	    "Tunnel exchanges that failed and client protocol errors.");
	evbuffer_add_printf(out, "akgw_tunnel_errors_total %llu\n",
	    (unsigned long long)m->m_tunnel_errors);
	metrics_head(out, "akgw_tunnel_refused_total", "counter",
	    "Tunnel clients refused because a newer client had replaced "
	    "their session.");
	evbuffer_add_printf(out, "akgw_tunnel_refused_total %llu\n",
	    (unsigned long long)m->m_tunnel_refused);
}

/* Append every metric, summed over the workers, in the Prometheus format. */
void
metrics_render(const struct gw *g, struct evbuffer *out)
{
	struct gw_metrics sum;
	const struct gw_metrics *m = &sum;
	uint64_t cum = 0, nconns;
	size_t i;

	gw_metrics_sum(g, &sum, &nconns); /* worker.c */
	metrics_head(out, "akgw_config_reloads_total", "counter",
	    "Configuration reloads (SIGHUP, POST /v1/reload), by result.");
	evbuffer_add_printf(out,
	    "akgw_config_reloads_total{result=\"ok\"} %llu\n"
	    "akgw_config_reloads_total{result=\"error\"} %llu\n",
	    (unsigned long long)g->g_reloads,
	    (unsigned long long)g->g_reload_failures);
	metrics_head(out, "akgw_config_last_reload_successful", "gauge",
	    "1 when the last reload was applied (or none was tried), 0 when "
	    "it was refused.");
	evbuffer_add_printf(out, "akgw_config_last_reload_successful %d\n",
	    g->g_reload_failed ? 0 : 1);
	metrics_head(out, "akgw_config_last_reload_success_timestamp_seconds",
	    "gauge", "When the running configuration was loaded (Unix time).");
	evbuffer_add_printf(out,
	    "akgw_config_last_reload_success_timestamp_seconds %llu\n",
	    (unsigned long long)g->g_reload_time);
	metrics_head(out, "akgw_connections_active", "gauge",
	    "Client connections open now.");
	evbuffer_add_printf(
	    out, "akgw_connections_active %llu\n", (unsigned long long)nconns);
	metrics_head(out, "akgw_connections_accepted_total", "counter",
	    "Client connections accepted.");
	evbuffer_add_printf(out, "akgw_connections_accepted_total %llu\n",
	    (unsigned long long)m->m_conns_accepted);
	metrics_head(out, "akgw_requests_total", "counter",
	    "Requests answered, by status class.");
	for (i = 1; i < 6; i++)
		evbuffer_add_printf(out,
		    "akgw_requests_total{class=\"%zuxx\"} %llu\n", i,
		    (unsigned long long)m->m_requests[i]);
	metrics_head(out, "akgw_requests_by_protocol_total", "counter",
	    "Requests answered, by the client's protocol.");
	evbuffer_add_printf(out,
	    "akgw_requests_by_protocol_total{protocol=\"http1\"} %llu\n"
	    "akgw_requests_by_protocol_total{protocol=\"h2\"} %llu\n",
	    (unsigned long long)m->m_requests_proto[0],
	    (unsigned long long)m->m_requests_proto[1]);
	metrics_head(out, "akgw_h2_connections_total", "counter",
	    "Client connections that spoke HTTP/2 (ALPN h2 or prior knowledge).");
	evbuffer_add_printf(out, "akgw_h2_connections_total %llu\n",
	    (unsigned long long)m->m_h2_conns);
	metrics_head(out, "akgw_gateway_errors_total", "counter",
	    "Requests the gateway answered itself, by error code.");
	for (i = 0; i < GW_METRIC_CODES && m->m_codes[i] != NULL; i++)
		evbuffer_add_printf(out,
		    "akgw_gateway_errors_total{code=\"%s\"} %llu\n",
		    m->m_codes[i], (unsigned long long)m->m_code_counts[i]);
	metrics_head(out, "akgw_upstream_connect_failures_total", "counter",
	    "Upstream connection attempts that failed.");
	evbuffer_add_printf(out, "akgw_upstream_connect_failures_total %llu\n",
	    (unsigned long long)m->m_upstream_connect_failures);
	metrics_head(out, "akgw_upstream_retries_total", "counter",
	    "Upstream connection attempts retried.");
	evbuffer_add_printf(out, "akgw_upstream_retries_total %llu\n",
	    (unsigned long long)m->m_upstream_retries);
	metrics_head(out, "akgw_upstream_idle", "gauge",
	    "Idle keep-alive connections to sandbox ports in the pools.");
	evbuffer_add_printf(out, "akgw_upstream_idle %llu\n",
	    (unsigned long long)m->m_upstream_idle);
	metrics_head(out, "akgw_upstream_pool_evicted_total", "counter",
	    "Idle upstream connections closed because a pool was full.");
	evbuffer_add_printf(out, "akgw_upstream_pool_evicted_total %llu\n",
	    (unsigned long long)m->m_upstream_evicted);
	metrics_head(out, "akgw_upstream_h2_connections_total", "counter",
	    "HTTP/2 (h2c) connections opened to sandbox ports.");
	evbuffer_add_printf(out, "akgw_upstream_h2_connections_total %llu\n",
	    (unsigned long long)m->m_upstream_h2_conns);
	metrics_head(out, "akgw_upstream_h2_streams_total", "counter",
	    "Requests sent to sandbox ports as HTTP/2 streams.");
	evbuffer_add_printf(out, "akgw_upstream_h2_streams_total %llu\n",
	    (unsigned long long)m->m_upstream_h2_streams);
	metrics_head(out, "akgw_bytes_in_total", "counter",
	    "Body and WebSocket bytes received from clients.");
	evbuffer_add_printf(out, "akgw_bytes_in_total %llu\n",
	    (unsigned long long)m->m_bytes_in);
	metrics_head(out, "akgw_bytes_out_total", "counter",
	    "Body and WebSocket bytes sent to clients.");
	evbuffer_add_printf(out, "akgw_bytes_out_total %llu\n",
	    (unsigned long long)m->m_bytes_out);
	metrics_head(out, "akgw_websockets_active", "gauge",
	    "Upgraded (WebSocket) connections open now.");
	evbuffer_add_printf(out, "akgw_websockets_active %llu\n",
	    (unsigned long long)m->m_ws_active);
	metrics_head(out, "akgw_websockets_half_closed", "gauge",
	    "Upgraded connections one side has ended, the other still "
	    "relaying (closed by timeouts.websocket_fin at the latest).");
	evbuffer_add_printf(out, "akgw_websockets_half_closed %llu\n",
	    (unsigned long long)m->m_relay_half_closed);
	metrics_head(out, "akgw_request_duration_seconds", "histogram",
	    "Time from the first byte of a request to its last response "
	    "byte queued.");
	for (i = 0; i < GW_DURATION_BUCKETS; i++) {
		cum += m->m_duration_buckets[i];
		evbuffer_add_printf(out,
		    "akgw_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
		    metrics_bounds[i], (unsigned long long)cum);
	}
	cum += m->m_duration_buckets[GW_DURATION_BUCKETS];
	evbuffer_add_printf(out,
	    "akgw_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
	    "akgw_request_duration_seconds_sum %.6f\n"
	    "akgw_request_duration_seconds_count %llu\n",
	    (unsigned long long)cum, (double)m->m_duration_sum_us / 1e6,
	    (unsigned long long)m->m_duration_count);
	metrics_tunnel(m, out);
	metrics_head(out, "akgw_draining", "gauge",
	    "1 while the gateway drains (SIGTERM): no new connections, the "
	    "requests in flight finish.");
	evbuffer_add_printf(out, "akgw_draining %d\n", gw_draining(g) ? 1 : 0);
	metrics_head(out, "akgw_drain_cut_total", "counter",
	    "Connections, tunnel links and Port B connections still open at "
	    "a drain's deadline and cut.");
	evbuffer_add_printf(out, "akgw_drain_cut_total %llu\n",
	    (unsigned long long)m->m_drain_cut);
	metrics_head(out, "akgw_drain_websockets_closed_total", "counter",
	    "WebSockets closed with 1001 at a drain's deadline.");
	evbuffer_add_printf(out, "akgw_drain_websockets_closed_total %llu\n",
	    (unsigned long long)m->m_drain_ws_closed);
	metrics_head(out, "akgw_log_lines_dropped_total", "counter",
	    "Log lines dropped because the log output did not keep up.");
	evbuffer_add_printf(out, "akgw_log_lines_dropped_total %llu\n",
	    (unsigned long long)log_dropped());
}
