/*
 * The completed-response cache (§8.5) and the tombstones (§8.8): two
 * lists in age order, bounded in age, count and (for the cache) bytes, the
 * oldest evicted first. Times are monotonic milliseconds passed in by the
 * caller, so the rules can be tested without waiting.
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
}

/* Unlink and free one entry. */
static void
cache_drop(struct tun_cache *c, struct tun_cache_entry *e)
{
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
	struct tun_cache_entry *e;

	TAILQ_FOREACH (e, &c->tc_list, ce_entry) {
		if (strcmp(e->ce_id, id) == 0)
			return (e);
	}
	return (NULL);
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
	c->tc_count++;
	c->tc_bytes += len;
	return (e);
}

/* Make an empty tombstone list with its limits. */
void
tombs_init(struct tun_tombs *t, uint64_t ttl_ms, size_t max)
{
	memset(t, 0, sizeof *t);
	TAILQ_INIT(&t->tt_list);
	t->tt_ttl_ms = ttl_ms;
	t->tt_max = max;
}

/* Unlink and free one tombstone. */
static void
tombs_drop(struct tun_tombs *t, struct tun_tomb *tb)
{
	TAILQ_REMOVE(&t->tt_list, tb, tb_entry);
	t->tt_count--;
	free(tb->tb_id);
	free(tb);
}

/* Free every tombstone. */
void
tombs_clear(struct tun_tombs *t)
{
	struct tun_tomb *tb;

	while ((tb = TAILQ_FIRST(&t->tt_list)) != NULL)
		tombs_drop(t, tb);
}

/* Drop the tombstones older than the TTL at now. */
static void
tombs_expire(struct tun_tombs *t, uint64_t now)
{
	struct tun_tomb *tb;

	while ((tb = TAILQ_FIRST(&t->tt_list)) != NULL &&
	    now - tb->tb_at >= t->tt_ttl_ms)
		tombs_drop(t, tb);
}

/* Remember id as terminated at now, evicting the oldest past the limit. */
void
tombs_add(struct tun_tombs *t, const char *id, uint64_t now)
{
	struct tun_tomb *tb;

	if (t->tt_max == 0)
		return;
	tombs_expire(t, now);
	TAILQ_FOREACH (tb, &t->tt_list, tb_entry) {
		if (strcmp(tb->tb_id, id) == 0) {
			tombs_drop(t, tb);
			break;
		}
	}
	while (t->tt_count >= t->tt_max)
		tombs_drop(t, TAILQ_FIRST(&t->tt_list));
	tb = xcalloc(1, sizeof *tb);
	tb->tb_id = xstrdup(id);
	tb->tb_at = now;
	TAILQ_INSERT_TAIL(&t->tt_list, tb, tb_entry);
	t->tt_count++;
}

/* Was id terminated within the TTL before now? */
int
tombs_has(struct tun_tombs *t, const char *id, uint64_t now)
{
	struct tun_tomb *tb;

	tombs_expire(t, now);
	TAILQ_FOREACH (tb, &t->tt_list, tb_entry) {
		if (strcmp(tb->tb_id, id) == 0)
			return (1);
	}
	return (0);
}
