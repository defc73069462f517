/*
 * Tombstones: ids that finished recently (tunnel-protocol.md §8.8), so a
 * frame that arrives late for one is absorbed instead of being taken for
 * a protocol error.  At most tm_cap ids, each for tm_ttl_ms: a list keeps
 * them oldest first for expiry and eviction, an idmap finds them.
 */
#ifndef AK_TOMBS_H
#define AK_TOMBS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "idmap.h"

struct tomb {
	TAILQ_ENTRY(tomb) tb_entry;
	uint64_t tb_at; /* monotonic ms when added */
	char tb_id[]; /* the key of its idmap slot */
};
TAILQ_HEAD(tomb_list, tomb);

struct tombs {
	struct tomb_list tm_list; /* oldest first */
	struct idmap tm_map; /* by id */
	size_t tm_count;
	size_t tm_cap; /* 0: remember nothing */
	uint64_t tm_ttl_ms;
	uint64_t tm_evicted; /* dropped at the cap before their TTL */
};

void tombs_init(struct tombs *, size_t cap, uint64_t ttl_ms);
void tombs_clear(struct tombs *);
void tombs_expire(struct tombs *, uint64_t now);
void tombs_add(struct tombs *, const char *id, uint64_t now);
int tombs_has(struct tombs *, const char *id, uint64_t now);

#endif
