/*
 * The sandbox directory: an immutable set of sandboxes that new requests
 * are routed with.  A change builds a new directory and swaps it in whole;
 * requests in flight keep a reference to the sandbox they were routed to,
 * so a change never disturbs them.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "gw.h"
#include "siphash.h"

/* Generations are unique across every sandbox version of this process. */
static uint64_t directory_generations;

/* Take a reference to a sandbox. */
void
sandbox_ref(struct gw_sandbox *sb)
{
	__atomic_add_fetch(&sb->sb_refcnt, 1, __ATOMIC_RELAXED);
}

/* Drop a reference to a sandbox; the last one frees it. */
void
sandbox_unref(struct gw_sandbox *sb)
{
	size_t i;

	/* Workers drop references from their own threads. */
	if (sb == NULL ||
	    __atomic_sub_fetch(&sb->sb_refcnt, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	for (i = 0; i < sb->sb_nports; i++)
		free(sb->sb_ports[i].pr_host_rewrite);
	free(sb->sb_ports);
	free(sb->sb_tunnel_ports);
	if (sb->sb_tunnel_token != NULL) {
		explicit_bzero(
		    sb->sb_tunnel_token, strlen(sb->sb_tunnel_token));
		free(sb->sb_tunnel_token);
	}
	free(sb->sb_address);
	free(sb->sb_netns);
	free(sb->sb_safe_id);
	free(sb->sb_id);
	free(sb);
}

/* Are two strings, either of which may be NULL, the same? */
static int
sandbox_same_str(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return (a == b);
	return (strcmp(a, b) == 0);
}

/*
 * Do a and b describe the same sandbox in every field a request or a tunnel
 * reads?  A reload keeps the running version of an unchanged sandbox, with
 * its generation, pooled connections and counts.
 */
int
sandbox_same(const struct gw_sandbox *a, const struct gw_sandbox *b)
{
	const struct gw_port_rule *pa, *pb;
	size_t i;

	if (strcmp(a->sb_id, b->sb_id) != 0 ||
	    !sandbox_same_str(a->sb_address, b->sb_address) ||
	    !sandbox_same_str(a->sb_netns, b->sb_netns) ||
	    a->sb_addrlen != b->sb_addrlen ||
	    memcmp(&a->sb_addr, &b->sb_addr, a->sb_addrlen) != 0 ||
	    a->sb_nports != b->sb_nports ||
	    a->sb_ntunnel_ports != b->sb_ntunnel_ports ||
	    a->sb_tunnel_mode != b->sb_tunnel_mode ||
	    !sandbox_same_str(a->sb_tunnel_token, b->sb_tunnel_token) ||
	    a->sb_tunnel_client_wait != b->sb_tunnel_client_wait ||
	    a->sb_tunnel_http_timeout != b->sb_tunnel_http_timeout ||
	    a->sb_tunnel_silence != b->sb_tunnel_silence ||
	    a->sb_tunnel_max_queued != b->sb_tunnel_max_queued ||
	    a->sb_max_connections != b->sb_max_connections ||
	    a->sb_flags != b->sb_flags)
		return (0);
	for (i = 0; i < a->sb_nports; i++) {
		pa = &a->sb_ports[i];
		pb = &b->sb_ports[i];
		if (pa->pr_lo != pb->pr_lo || pa->pr_hi != pb->pr_hi ||
		    pa->pr_private != pb->pr_private ||
		    pa->pr_protocol != pb->pr_protocol ||
		    !sandbox_same_str(pa->pr_host_rewrite, pb->pr_host_rewrite))
			return (0);
	}
	for (i = 0; i < a->sb_ntunnel_ports; i++)
		if (a->sb_tunnel_ports[i] != b->sb_tunnel_ports[i])
			return (0);
	return (1);
}

/* Give a sandbox that has none a generation. */
static void
directory_stamp(struct gw_sandbox *sb)
{
	if (sb->sb_generation == 0)
		sb->sb_generation = ++directory_generations;
}

/* The process's key for the directory's hashes, drawn once. */
static struct sipkey directory_key;
static pthread_once_t directory_key_once = PTHREAD_ONCE_INIT;

/* Draw the directory's hash key. */
static void
directory_key_init(void)
{
	sipkey_random(&directory_key);
}

/*
 * SipHash of s under the process's random key, folded to lower case when
 * fold is set (ASCII): requests choose the ids looked up.
 */
static uint64_t
directory_hash(const char *s, int fold)
{
	if (fold)
		return (siphash_fold(&directory_key, s, strlen(s)));
	return (siphash(&directory_key, s, strlen(s)));
}

/* Put index i of d under key in table tab (linear probing). */
static void
directory_slot_put(const struct gw_directory *d, uint32_t *tab, const char *key,
    int fold, size_t i)
{
	size_t s = (size_t)directory_hash(key, fold) & d->d_mask;

	while (tab[s] != 0)
		s = (s + 1) & d->d_mask;
	tab[s] = (uint32_t)(i + 1);
}

/*
 * Build d's hashed indexes once its sandboxes are in place.  A sandbox
 * earlier in the list sits earlier on its probe chain, so a lookup finds
 * what a scan in list order would.
 */
static void
directory_index_build(struct gw_directory *d)
{
	size_t i, n = 8;

	/* Before the directory is published to any thread. */
	pthread_once(&directory_key_once, directory_key_init);
	while (n < 2 * d->d_count)
		n *= 2;
	d->d_mask = n - 1;
	d->d_by_id = xcalloc(n, sizeof *d->d_by_id);
	d->d_by_safe = xcalloc(n, sizeof *d->d_by_safe);
	for (i = 0; i < d->d_count; i++) {
		directory_slot_put(
		    d, d->d_by_id, d->d_sandboxes[i]->sb_id, 0, i);
		directory_slot_put(
		    d, d->d_by_safe, d->d_sandboxes[i]->sb_safe_id, 1, i);
	}
}

/* A new directory holding a reference to each of the n sandboxes. */
struct gw_directory *
directory_new(struct gw_sandbox *const *sandboxes, size_t n)
{
	struct gw_directory *d;
	size_t i;

	d = xcalloc(1, sizeof *d);
	d->d_refcnt = 1;
	d->d_generation = ++directory_generations;
	if (n > 0)
		d->d_sandboxes = xcalloc(n, sizeof *d->d_sandboxes);
	for (i = 0; i < n; i++) {
		directory_stamp(sandboxes[i]);
		sandbox_ref(sandboxes[i]);
		d->d_sandboxes[d->d_count++] = sandboxes[i];
	}
	directory_index_build(d);
	return (d);
}

/* Take a reference to a directory. */
void
directory_ref(struct gw_directory *d)
{
	__atomic_add_fetch(&d->d_refcnt, 1, __ATOMIC_RELAXED);
}

/* Drop a reference to a directory and, with the last, its sandboxes. */
void
directory_unref(struct gw_directory *d)
{
	size_t i;

	if (d == NULL ||
	    __atomic_sub_fetch(&d->d_refcnt, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	for (i = 0; i < d->d_count; i++)
		sandbox_unref(d->d_sandboxes[i]);
	free(d->d_sandboxes);
	free(d->d_by_id);
	free(d->d_by_safe);
	free(d);
}

/*
 * Index of the sandbox with this raw id, or else of this safe id (host
 * names are case-insensitive, so safe ids compare that way); -1 if none.
 * Two probes of hashed indexes, not a scan of every sandbox.
 */
static ssize_t
directory_index(const struct gw_directory *d, const char *id)
{
	const struct gw_sandbox *sb;
	size_t s;

	if (d->d_by_id == NULL)
		return (-1);
	for (s = (size_t)directory_hash(id, 0) & d->d_mask; d->d_by_id[s] != 0;
	     s = (s + 1) & d->d_mask) {
		sb = d->d_sandboxes[d->d_by_id[s] - 1];
		if (strcmp(sb->sb_id, id) == 0)
			return ((ssize_t)d->d_by_id[s] - 1);
	}
	for (s = (size_t)directory_hash(id, 1) & d->d_mask;
	     d->d_by_safe[s] != 0; s = (s + 1) & d->d_mask) {
		sb = d->d_sandboxes[d->d_by_safe[s] - 1];
		if (strcasecmp(sb->sb_safe_id, id) == 0)
			return ((ssize_t)d->d_by_safe[s] - 1);
	}
	return (-1);
}

/* The sandbox with raw id or safe id id, or NULL.  No reference is taken. */
struct gw_sandbox *
directory_find(const struct gw_directory *d, const char *id)
{
	ssize_t i;

	if ((i = directory_index(d, id)) == -1)
		return (NULL);
	return (d->d_sandboxes[i]);
}

/*
 * A new directory: d with sb added, or replacing the sandbox with the same
 * raw id.  The caller has checked that sb's safe id is not another
 * sandbox's.  sb gets a fresh generation.
 */
struct gw_directory *
directory_put(const struct gw_directory *d, struct gw_sandbox *sb)
{
	struct gw_directory *nd;
	size_t i;
	int replaced = 0;

	nd = xcalloc(1, sizeof *nd);
	nd->d_refcnt = 1;
	nd->d_generation = ++directory_generations;
	nd->d_sandboxes = xcalloc(d->d_count + 1, sizeof *nd->d_sandboxes);
	sb->sb_generation = ++directory_generations;
	for (i = 0; i < d->d_count; i++) {
		if (strcmp(d->d_sandboxes[i]->sb_id, sb->sb_id) == 0) {
			nd->d_sandboxes[nd->d_count++] = sb;
			replaced = 1;
		} else
			nd->d_sandboxes[nd->d_count++] = d->d_sandboxes[i];
		sandbox_ref(nd->d_sandboxes[nd->d_count - 1]);
	}
	if (!replaced) {
		sandbox_ref(sb);
		nd->d_sandboxes[nd->d_count++] = sb;
	}
	directory_index_build(nd);
	return (nd);
}

/* A new directory without the sandbox id (raw or safe), or NULL if absent. */
struct gw_directory *
directory_delete(const struct gw_directory *d, const char *id)
{
	struct gw_directory *nd;
	ssize_t skip;
	size_t i;

	if ((skip = directory_index(d, id)) == -1)
		return (NULL);
	nd = xcalloc(1, sizeof *nd);
	nd->d_refcnt = 1;
	nd->d_generation = ++directory_generations;
	if (d->d_count > 1)
		nd->d_sandboxes = xcalloc(
		    d->d_count - 1, sizeof *nd->d_sandboxes);
	for (i = 0; i < d->d_count; i++) {
		if ((ssize_t)i == skip)
			continue;
		sandbox_ref(d->d_sandboxes[i]);
		nd->d_sandboxes[nd->d_count++] = d->d_sandboxes[i];
	}
	directory_index_build(nd);
	return (nd);
}
