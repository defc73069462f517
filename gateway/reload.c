/*
 * Reloading the configuration (SIGHUP, POST /v1/reload): the whole file is
 * read again with the code --check runs, and applied only if all of it is
 * valid and every new listener binds; otherwise the running configuration
 * stays and the error, with file:line:column, is logged and answered.
 *
 * What a reload changes, in the main loop and then in every worker (which
 * takes the published configuration when its channel wakes it):
 * listeners (kept addresses keep their sockets; new ones are bound;
 * removed ones close and their connections go on), TLS certificates, the
 * admin listener, domains, limits, timeouts, auth secrets, log settings,
 * sandboxes and, through the directory, tunnels.  workers: needs a new
 * process (SIGUSR2).
 *
 * Sandboxes from the file and from the admin API combine so that a reload
 * never undoes an admin API change:
 *  - a sandbox PUT through the API stays as it was put, whatever the file
 *    says about its id; a file entry with that id waits until the API
 *    deletes it;
 *  - a file sandbox DELETEd through the API stays deleted while the file
 *    declares it (the file is the thing to change);
 *  - every other sandbox is the file's: added, changed or removed as the
 *    file now says.  One that did not change keeps its running version
 *    (generation, pooled connections, tunnels) untouched.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/listener.h>

#include "alloc.h"
#include "gw.h"
#include "tls.h"

/* Is id among the file sandboxes the admin API deleted? */
static ssize_t
reload_deleted_index(const struct gw *g, const char *id)
{
	size_t i;

	for (i = 0; i < g->g_ndeleted; i++)
		if (strcmp(g->g_deleted[i], id) == 0)
			return ((ssize_t)i);
	return (-1);
}

/* Does configuration cf declare sandbox id? */
static const struct gw_sandbox *
reload_file_has(const struct gw_config *cf, const char *id)
{
	size_t i;

	for (i = 0; i < cf->cf_nsandboxes; i++)
		if (strcmp(cf->cf_sandboxes[i]->sb_id, id) == 0)
			return (cf->cf_sandboxes[i]);
	return (NULL);
}

/*
 * The admin API deletes sb: when it is the file's sandbox, remember its id,
 * so that a reload does not bring it back.  Deleting the API's own
 * version of a file sandbox lets the file's apply again at the next reload.
 */
void
reload_deleted(struct gw *g, const struct gw_sandbox *sb)
{
	if ((sb->sb_flags & SB_F_API) ||
	    reload_file_has(g->g_conf, sb->sb_id) == NULL ||
	    reload_deleted_index(g, sb->sb_id) != -1)
		return;
	g->g_deleted = xreallocarray(
	    g->g_deleted, g->g_ndeleted + 1, sizeof *g->g_deleted);
	g->g_deleted[g->g_ndeleted++] = xstrdup(sb->sb_id);
}

/* The admin API puts sandbox id: it is no longer a deleted one. */
void
reload_put(struct gw *g, const char *id)
{
	ssize_t i;

	if ((i = reload_deleted_index(g, id)) == -1)
		return;
	free(g->g_deleted[i]);
	g->g_deleted[i] = g->g_deleted[--g->g_ndeleted];
}

/* Free what the main loop keeps for reloads. */
void
reload_free(struct gw *g)
{
	size_t i;

	for (i = 0; i < g->g_ndeleted; i++)
		free(g->g_deleted[i]);
	free(g->g_deleted);
	g->g_deleted = NULL;
	g->g_ndeleted = 0;
}

/* Forget deleted ids the new file cf no longer declares. */
static void
reload_prune_deleted(struct gw *g, const struct gw_config *cf)
{
	size_t i = 0;

	while (i < g->g_ndeleted) {
		if (reload_file_has(cf, g->g_deleted[i]) != NULL) {
			i++;
			continue;
		}
		free(g->g_deleted[i]);
		g->g_deleted[i] = g->g_deleted[--g->g_ndeleted];
	}
}

/* Is there a sandbox in v[0..n) with id, or (case aside) safe id? */
static const struct gw_sandbox *
reload_clash(struct gw_sandbox *const *v, size_t n, const struct gw_sandbox *sb)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(v[i]->sb_id, sb->sb_id) == 0 ||
		    strcasecmp(v[i]->sb_safe_id, sb->sb_safe_id) == 0)
			return (v[i]);
	return (NULL);
}

/*
 * The directory configuration cf makes from the running one cur (see the
 * rules at the top of this file), counting what changed into rc.
 */
struct gw_directory *
reload_directory(struct gw *g, const struct gw_directory *cur,
    const struct gw_config *cf, struct reload_count *rc)
{
	struct gw_directory *nd;
	struct gw_sandbox **v, *sb, *old;
	const struct gw_sandbox *other;
	size_t i, n = 0;

	memset(rc, 0, sizeof *rc);
	reload_prune_deleted(g, cf);
	v = xcalloc(cur->d_count + cf->cf_nsandboxes + 1, sizeof *v);
	for (i = 0; i < cur->d_count; i++) {
		if (cur->d_sandboxes[i]->sb_flags & SB_F_API) {
			v[n++] = cur->d_sandboxes[i];
			rc->rc_api++;
		}
	}
	for (i = 0; i < cf->cf_nsandboxes; i++) {
		sb = cf->cf_sandboxes[i];
		if (reload_deleted_index(g, sb->sb_id) != -1)
			continue;
		if ((other = reload_clash(v, n, sb)) != NULL) {
			log_warn("reload: sandbox '%s' of the file is not "
				 "applied: the admin API's sandbox '%s' has "
				 "its id in URLs; delete that one through the "
				 "API to use the file's",
			    sb->sb_id, other->sb_id);
			continue;
		}
		old = directory_find(cur, sb->sb_id);
		if (old != NULL && strcmp(old->sb_id, sb->sb_id) == 0 &&
		    sandbox_same(old, sb)) {
			v[n++] = old;
			rc->rc_kept++;
		} else {
			v[n++] = sb;
			if (old != NULL && strcmp(old->sb_id, sb->sb_id) == 0)
				rc->rc_changed++;
			else
				rc->rc_added++;
		}
	}
	for (i = 0; i < cur->d_count; i++) {
		old = cur->d_sandboxes[i];
		other = reload_clash(v, n, old);
		if (!(old->sb_flags & SB_F_API) &&
		    (other == NULL || strcmp(other->sb_id, old->sb_id) != 0))
			rc->rc_removed++;
	}
	nd = directory_new(v, n);
	free(v);
	return (nd);
}

/* Apply the log settings of cf when they changed. */
static void
reload_log(const struct gw_config *old, const struct gw_config *cf)
{
	char *cause = NULL;
	const char *a = old->cf_log_file, *b = cf->cf_log_file;

	if (old->cf_log_level == cf->cf_log_level &&
	    old->cf_log_format == cf->cf_log_format &&
	    (a == b || (a != NULL && b != NULL && strcmp(a, b) == 0)))
		return;
	if (log_open(cf->cf_log_level, cf->cf_log_format, cf->cf_log_file,
		&cause) != 0) {
		log_error("reload: %s; the log stays as it was", cause);
		free(cause);
	}
}

/* Sandboxes of d whose version is not in nd: their pools are closed. */
static void
reload_flush_gone(
    struct gw *g, const struct gw_directory *d, const struct gw_directory *nd)
{
	const struct gw_sandbox *sb;
	size_t i;

	for (i = 0; i < d->d_count; i++) {
		sb = d->d_sandboxes[i];
		if (directory_find(nd, sb->sb_id) != sb)
			upstream_pool_flush_sandbox(g, sb->sb_id);
	}
}

/*
 * Read the configuration file again and apply it (the main loop); why
 * names what asked, for the log.  -1 with *cause (file:line:column: ...)
 * when the file is refused; then nothing changed.
 */
int
reload_run(struct gw *g, const char *why, char **cause)
{
	struct gw_config *old = g->g_conf, *cf;
	struct gw_directory *nd, *od;
	struct evconnlistener *alev = NULL;
	struct reload_count rc;
	SSL_CTX **ctx = NULL;
	size_t late;

	if (gw_draining(g)) {
		xasprintf(cause, "the gateway is draining to stop or hand over; "
				 "a reload would open what the drain closed");
		g->g_reload_failures++;
		g->g_reload_failed = 1;
		log_warn("%s: configuration not reloaded: %s", why, *cause);
		return (-1);
	}
	log_info("%s: reloading the configuration from %s", why, old->cf_file);
	sdnotify_reloading();
	if (strcmp(old->cf_file, CONF_BUILTIN_NAME) == 0)
		cf = conf_load_string(CONF_BUILTIN_NAME, conf_builtin, cause);
	else
		cf = conf_load(old->cf_file, cause);
	if (cf == NULL)
		goto refused;
	if ((ctx = listener_load_tls(cf, cause)) == NULL)
		goto refused;
	if (admin_reload_prepare(g, cf, &alev, cause) != 0)
		goto refused;
	if (listener_sync(g, cf, ctx, cause) != 0) {
		if (alev != NULL)
			evconnlistener_free(alev);
		goto refused;
	}

	/* Everything that can fail has succeeded: switch. */
	if (cf->cf_workers != old->cf_workers)
		log_warn("reload: workers changed from %llu to %llu; that "
			 "takes a new process (SIGUSR2 or a restart)",
		    (unsigned long long)old->cf_workers,
		    (unsigned long long)cf->cf_workers);
	reload_log(old, cf);
	g->g_conf = cf;
	gw_conf_apply(g);
	admin_reload_commit(g, alev);
	conf_ref(cf);
	if ((late = gw_conf_publish(g, cf, ctx)) != 0) /* the workers follow */
		log_warn("reload: %zu worker%s did not take the configuration "
			 "within 2s; %s will when %s loop turns",
		    late, late == 1 ? "" : "s", late == 1 ? "it" : "they",
		    late == 1 ? "its" : "their");
	od = g->g_dir;
	directory_ref(od);
	nd = reload_directory(g, od, cf, &rc);
	gw_dir_publish(g, nd);
	tunnel_sync(g); /* Port B listeners follow the directory */
	reload_flush_gone(g, od, g->g_dir);
	directory_unref(od);
	conf_free(old);
	g->g_reloads++;
	g->g_reload_failed = 0;
	g->g_reload_time = (uint64_t)time(NULL);
	log_info("configuration reloaded from %s: %zu listener%s, %zu "
		 "sandboxes (%zu added, %zu changed, %zu removed, %zu "
		 "unchanged, %zu from the admin API kept)",
	    cf->cf_file, cf->cf_nlisten, cf->cf_nlisten == 1 ? "" : "s",
	    g->g_dir->d_count, rc.rc_added, rc.rc_changed, rc.rc_removed,
	    rc.rc_kept, rc.rc_api);
	sdnotify_reloaded();
	return (0);

refused:
	if (ctx != NULL)
		listener_free_tls(ctx, cf->cf_nlisten);
	conf_free(cf);
	g->g_reload_failures++;
	g->g_reload_failed = 1;
	log_error("%s: configuration not reloaded, the running one stays: %s",
	    why, *cause);
	sdnotify_reloaded();
	return (-1);
}
