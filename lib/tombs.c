/*
 * Tombstones (tombs.h).  Times are monotonic milliseconds passed in by the
 * caller, so the rules can be tested without waiting.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "tombs.h"

/* Make an empty set that remembers at most cap ids for ttl_ms each. */
void
tombs_init(struct tombs *tm, size_t cap, uint64_t ttl_ms)
{
	memset(tm, 0, sizeof *tm);
	TAILQ_INIT(&tm->tm_list);
	idmap_init(&tm->tm_map, 0);
	tm->tm_cap = cap;
	tm->tm_ttl_ms = ttl_ms;
}

/* Unlink and free one tombstone. */
static void
tombs_drop(struct tombs *tm, struct tomb *tb)
{
	idmap_del(&tm->tm_map, tb->tb_id);
	TAILQ_REMOVE(&tm->tm_list, tb, tb_entry);
	tm->tm_count--;
	free(tb);
}

/* Forget every id. */
void
tombs_clear(struct tombs *tm)
{
	struct tomb *tb;

	while ((tb = TAILQ_FIRST(&tm->tm_list)) != NULL)
		tombs_drop(tm, tb);
	idmap_free(&tm->tm_map);
}

/* Drop the tombstones whose TTL has run out at now, oldest first. */
void
tombs_expire(struct tombs *tm, uint64_t now)
{
	struct tomb *tb;

	while ((tb = TAILQ_FIRST(&tm->tm_list)) != NULL &&
	    now - tb->tb_at >= tm->tm_ttl_ms)
		tombs_drop(tm, tb);
}

/*
 * Remember id from now on; an id already there starts again as the
 * newest.  At the cap the oldest goes first, and is counted.
 */
void
tombs_add(struct tombs *tm, const char *id, uint64_t now)
{
	struct tomb *tb;
	size_t len = strlen(id);

	if (tm->tm_cap == 0)
		return;
	tombs_expire(tm, now);
	if ((tb = idmap_find(&tm->tm_map, id)) != NULL)
		tombs_drop(tm, tb);
	while (tm->tm_count >= tm->tm_cap) {
		tombs_drop(tm, TAILQ_FIRST(&tm->tm_list));
		tm->tm_evicted++;
	}
	tb = xmalloc(sizeof *tb + len + 1);
	memcpy(tb->tb_id, id, len + 1);
	tb->tb_at = now;
	TAILQ_INSERT_TAIL(&tm->tm_list, tb, tb_entry);
	idmap_put(&tm->tm_map, tb->tb_id, tb);
	tm->tm_count++;
}

/* Was id added less than the TTL before now? */
int
tombs_has(struct tombs *tm, const char *id, uint64_t now)
{
	tombs_expire(tm, now);
	return (idmap_find(&tm->tm_map, id) != NULL);
}
