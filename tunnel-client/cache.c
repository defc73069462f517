/*
 * The completed-response cache (§8.5) and the tombstones (§8.8): two
 * lists in age order, bounded in age, count and (for the cache) bytes, the
 * oldest evicted first, each with a hash of its ids: every request looks
 * them up, and a list of a thousand is a thousand string compares. Times
 * are monotonic milliseconds passed in by the caller, so the rules can be
 * tested without waiting.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "tun.h"

/* Most hash buckets of a cache or a tombstone list. */
#define CACHE_HASH_MAX 65536

/* The FNV-1a hash of id. */
static size_t
cache_hash(const char *id)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *id != '\0'; id++) {
		h ^= (unsigned char)*id;
		h *= 1099511628211ULL;
	}
	return ((size_t)(h ^ (h >> 32)));
}

/* Buckets for up to max ids: a power of two, at least 16. */
static size_t
cache_buckets(size_t max)
{
	size_t n = 16;

	while (n < max && n < CACHE_HASH_MAX)
		n *= 2;
	return (n);
}

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
	struct tun_cache_entry **pp;

	pp = &c->tc_hash[cache_hash(e->ce_id) & c->tc_hmask];
	while (*pp != e)
		pp = &(*pp)->ce_hnext;
	*pp = e->ce_hnext;
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
	free(c->tc_hash);
	c->tc_hash = NULL;
	c->tc_hmask = 0;
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

	if (c->tc_hash == NULL)
		return (NULL);
	for (e = c->tc_hash[cache_hash(id) & c->tc_hmask]; e != NULL;
	     e = e->ce_hnext) {
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
	struct tun_cache_entry *e, **pp;

	cache_remove(c, id);
	if (len > c->tc_max_bytes || c->tc_max_entries == 0) {
		free(frame);
		return (NULL);
	}
	while (c->tc_count >= c->tc_max_entries ||
	    c->tc_bytes + len > c->tc_max_bytes)
		cache_drop(c, TAILQ_FIRST(&c->tc_list));
	if (c->tc_hash == NULL) {
		c->tc_hmask = cache_buckets(c->tc_max_entries) - 1;
		c->tc_hash = xcalloc(c->tc_hmask + 1, sizeof *c->tc_hash);
	}
	e = xcalloc(1, sizeof *e);
	e->ce_id = xstrdup(id);
	e->ce_frame = frame;
	e->ce_len = len;
	e->ce_at = now;
	TAILQ_INSERT_TAIL(&c->tc_list, e, ce_entry);
	pp = &c->tc_hash[cache_hash(id) & c->tc_hmask];
	e->ce_hnext = *pp;
	*pp = e;
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
	struct tun_tomb **pp;

	pp = &t->tt_hash[cache_hash(tb->tb_id) & t->tt_hmask];
	while (*pp != tb)
		pp = &(*pp)->tb_hnext;
	*pp = tb->tb_hnext;
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
	free(t->tt_hash);
	t->tt_hash = NULL;
	t->tt_hmask = 0;
}

/* The tombstone for id, or NULL. */
static struct tun_tomb *
tombs_find(struct tun_tombs *t, const char *id)
{
	struct tun_tomb *tb;

	if (t->tt_hash == NULL)
		return (NULL);
	for (tb = t->tt_hash[cache_hash(id) & t->tt_hmask]; tb != NULL;
	     tb = tb->tb_hnext) {
		if (strcmp(tb->tb_id, id) == 0)
			return (tb);
	}
	return (NULL);
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
	struct tun_tomb *tb, **pp;

	if (t->tt_max == 0)
		return;
	tombs_expire(t, now);
	if ((tb = tombs_find(t, id)) != NULL)
		tombs_drop(t, tb);
	while (t->tt_count >= t->tt_max)
		tombs_drop(t, TAILQ_FIRST(&t->tt_list));
	if (t->tt_hash == NULL) {
		t->tt_hmask = cache_buckets(t->tt_max) - 1;
		t->tt_hash = xcalloc(t->tt_hmask + 1, sizeof *t->tt_hash);
	}
	tb = xcalloc(1, sizeof *tb);
	tb->tb_id = xstrdup(id);
	tb->tb_at = now;
	TAILQ_INSERT_TAIL(&t->tt_list, tb, tb_entry);
	pp = &t->tt_hash[cache_hash(id) & t->tt_hmask];
	tb->tb_hnext = *pp;
	*pp = tb;
	t->tt_count++;
}

/* Was id terminated within the TTL before now? */
int
tombs_has(struct tun_tombs *t, const char *id, uint64_t now)
{
	tombs_expire(t, now);
	return (tombs_find(t, id) != NULL);
}
