/*
 * The completed-response cache (§8.5): a list in age order, bounded in
 * age, count and bytes, the oldest evicted first, with an idmap of its ids
 * (every request looks it up, and the sandbox chooses the ids).  The
 * tombstones (§8.8) are lib/tombs.c.  Times are monotonic milliseconds
 * passed in by the caller, so the rules can be tested without waiting.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "tun.h"

/* Make an empty cache with its limits. */
void
cache_init(
    struct tun_cache *c, uint64_t ttl_ms, size_t max_entries, size_t max_bytes)
{
	memset(c, 0, sizeof *c);
	TAILQ_INIT(&c->tc_list);
	c->tc_ttl_ms = ttl_ms;
	c->tc_max_entries = max_entries;
	c->tc_max_bytes = max_bytes;
	idmap_init(&c->tc_ids, 0);
}

/* Unlink and free one entry. */
static void
cache_drop(struct tun_cache *c, struct tun_cache_entry *e)
{
	idmap_del(&c->tc_ids, e->ce_id);
	TAILQ_REMOVE(&c->tc_list, e, ce_entry);
	c->tc_count--;
	c->tc_bytes -= e->ce_len;
	free(e->ce_frame);
	free(e->ce_id);
	free(e);
}

/* Free every entry. */
void
cache_clear(struct tun_cache *c)
{
	struct tun_cache_entry *e;

	while ((e = TAILQ_FIRST(&c->tc_list)) != NULL)
		cache_drop(c, e);
	idmap_free(&c->tc_ids);
}

/* Drop the entries older than the TTL at now. */
void
cache_expire(struct tun_cache *c, uint64_t now)
{
	struct tun_cache_entry *e;

	while ((e = TAILQ_FIRST(&c->tc_list)) != NULL &&
	    now - e->ce_at >= c->tc_ttl_ms)
		cache_drop(c, e);
}

/* The entry for id, or NULL. */
struct tun_cache_entry *
cache_find(struct tun_cache *c, const char *id)
{
	return (idmap_find(&c->tc_ids, id));
}

/* Forget the entry for id, if any. */
void
cache_remove(struct tun_cache *c, const char *id)
{
	struct tun_cache_entry *e;

	if ((e = cache_find(c, id)) != NULL)
		cache_drop(c, e);
}

/*
 * Store the encoded outcome frame (len bytes, taken over) for id at now,
 * replacing an older one and evicting the oldest entries until the limits
 * hold. A frame larger than the byte limit on its own is not kept (NULL
 * is returned and the frame freed). Returns the entry.
 */
struct tun_cache_entry *
cache_put(
    struct tun_cache *c, const char *id, char *frame, size_t len, uint64_t now)
{
	struct tun_cache_entry *e;

	cache_remove(c, id);
	if (len > c->tc_max_bytes || c->tc_max_entries == 0) {
		free(frame);
		return (NULL);
	}
	while (c->tc_count >= c->tc_max_entries ||
	    c->tc_bytes + len > c->tc_max_bytes)
		cache_drop(c, TAILQ_FIRST(&c->tc_list));
	e = xcalloc(1, sizeof *e);
	e->ce_id = xstrdup(id);
	e->ce_frame = frame;
	e->ce_len = len;
	e->ce_at = now;
	TAILQ_INSERT_TAIL(&c->tc_list, e, ce_entry);
	idmap_put(&c->tc_ids, e->ce_id, e);
	c->tc_count++;
	c->tc_bytes += len;
	return (e);
}
