/*
 * A hashed index from string ids to pointers: open addressing, linear
 * probing, SipHash-2-4 under a random key of the map's own, so a peer that
 * chooses the ids we look up cannot aim them at one probe chain.  Keys are
 * borrowed: each stays valid, unchanged, for as long as it is in the map
 * (an object's own id field).  The map owns no entries and keeps no order;
 * a caller that needs order (oldest first) keeps a list beside it.
 */
#ifndef AK_IDMAP_H
#define AK_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "siphash.h"

/* One slot: empty while is_key is NULL. */
struct idmap_slot {
	uint64_t is_hash;
	const char *is_key;
	void *is_val;
};

struct idmap {
	struct idmap_slot *im_slots; /* NULL while the map is empty */
	size_t im_mask; /* slots - 1 */
	size_t im_count;
	struct sipkey im_key;
	int im_flags;
#define IDMAP_F_FOLD 0x01 /* keys compare ASCII case-insensitively */
#define IDMAP_F_KEYED 0x02 /* im_key has been drawn */
};

/* Fewest slots of a table that holds anything. */
#define IDMAP_MIN_SLOTS 8

void idmap_init(struct idmap *, int flags);
void idmap_free(struct idmap *);
void *idmap_find(const struct idmap *, const char *key);
int idmap_put(struct idmap *, const char *key, void *val);
void *idmap_del(struct idmap *, const char *key);
size_t idmap_count(const struct idmap *);
size_t idmap_slots(const struct idmap *);
int idmap_next(const struct idmap *, size_t *pos, const char **key, void **val);

#endif
