/*
 * The id index (idmap.h).  The table holds at most three quarters of its
 * slots, doubles past that and halves below an eighth, and is freed when
 * the last key goes, so an idle owner keeps no table.  A slot stores its
 * key's hash: a probe compares 64-bit hashes and calls strcmp only on a
 * match, and a resize moves slots without hashing again.  Deletion shifts
 * the rest of the probe chain back instead of leaving markers, so lookups
 * never walk over dead slots.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "idmap.h"

/* Make an empty map; its key is drawn with its first table. */
void
idmap_init(struct idmap *m, int flags)
{
	memset(m, 0, sizeof *m);
	m->im_flags = flags & IDMAP_F_FOLD;
}

/* Free the table; the entries are the caller's.  The map stays usable. */
void
idmap_free(struct idmap *m)
{
	free(m->im_slots);
	m->im_slots = NULL;
	m->im_mask = 0;
	m->im_count = 0;
}

/* The hash of key under the map's key. */
static uint64_t
idmap_hash(const struct idmap *m, const char *key)
{
	if (m->im_flags & IDMAP_F_FOLD)
		return (siphash_fold(&m->im_key, key, strlen(key)));
	return (siphash(&m->im_key, key, strlen(key)));
}

/* Do two keys name the same id? */
static int
idmap_same(const struct idmap *m, const char *a, const char *b)
{
	if (m->im_flags & IDMAP_F_FOLD)
		return (strcasecmp(a, b) == 0);
	return (strcmp(a, b) == 0);
}

/* Put slot s into table tab of mask+1 slots, at its first free place. */
static void
idmap_place(struct idmap_slot *tab, size_t mask, const struct idmap_slot *s)
{
	size_t i = (size_t)s->is_hash & mask;

	while (tab[i].is_key != NULL)
		i = (i + 1) & mask;
	tab[i] = *s;
}

/* Move every key into a table of n slots (a power of two). */
static void
idmap_resize(struct idmap *m, size_t n)
{
	struct idmap_slot *tab;
	size_t i;

	tab = xcalloc(n, sizeof *tab);
	if (m->im_slots != NULL) {
		for (i = 0; i <= m->im_mask; i++) {
			if (m->im_slots[i].is_key != NULL)
				idmap_place(tab, n - 1, &m->im_slots[i]);
		}
		free(m->im_slots);
	}
	m->im_slots = tab;
	m->im_mask = n - 1;
}

/* Index of key's slot, or -1 (as size_t) when it is not in the map. */
static size_t
idmap_lookup(const struct idmap *m, const char *key, uint64_t h)
{
	size_t i;

	for (i = (size_t)h & m->im_mask; m->im_slots[i].is_key != NULL;
	     i = (i + 1) & m->im_mask) {
		if (m->im_slots[i].is_hash == h &&
		    idmap_same(m, m->im_slots[i].is_key, key))
			return (i);
	}
	return ((size_t)-1);
}

/* The value of key, or NULL. */
void *
idmap_find(const struct idmap *m, const char *key)
{
	size_t i;

	if (m->im_count == 0 || key == NULL)
		return (NULL);
	i = idmap_lookup(m, key, idmap_hash(m, key));
	return (i == (size_t)-1 ? NULL : m->im_slots[i].is_val);
}

/*
 * Add key with value val (not NULL).  Returns 0, or -1 when the key is
 * already there: the first value stays, so a map built in list order
 * answers what a scan in that order would.
 */
int
idmap_put(struct idmap *m, const char *key, void *val)
{
	struct idmap_slot s;

	if (!(m->im_flags & IDMAP_F_KEYED)) {
		sipkey_random(&m->im_key);
		m->im_flags |= IDMAP_F_KEYED;
	}
	s.is_hash = idmap_hash(m, key);
	s.is_key = key;
	s.is_val = val;
	if (m->im_slots == NULL)
		idmap_resize(m, IDMAP_MIN_SLOTS);
	else if (idmap_lookup(m, key, s.is_hash) != (size_t)-1)
		return (-1);
	else if ((m->im_count + 1) * 4 > (m->im_mask + 1) * 3)
		idmap_resize(m, (m->im_mask + 1) * 2);
	idmap_place(m->im_slots, m->im_mask, &s);
	m->im_count++;
	return (0);
}

/* Remove key; returns its value, or NULL if it was not there. */
void *
idmap_del(struct idmap *m, const char *key)
{
	size_t i, j, home, mask = m->im_mask;
	void *val;

	if (m->im_count == 0 || key == NULL)
		return (NULL);
	if ((i = idmap_lookup(m, key, idmap_hash(m, key))) == (size_t)-1)
		return (NULL);
	val = m->im_slots[i].is_val;
	if (--m->im_count == 0) {
		idmap_free(m);
		return (val);
	}
	/*
	 * Backward shift: a later slot of the chain moves into the hole when
	 * its home is not between the hole and itself.
	 */
	for (j = (i + 1) & mask; m->im_slots[j].is_key != NULL;
	     j = (j + 1) & mask) {
		home = (size_t)m->im_slots[j].is_hash & mask;
		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->im_slots[i] = m->im_slots[j];
			i = j;
		}
	}
	m->im_slots[i].is_key = NULL;
	m->im_slots[i].is_val = NULL;
	if (mask + 1 > IDMAP_MIN_SLOTS && m->im_count * 8 < mask + 1)
		idmap_resize(m, (mask + 1) / 2);
	return (val);
}

/* Keys in the map. */
size_t
idmap_count(const struct idmap *m)
{
	return (m->im_count);
}

/* Slots of its table (0 without one), for tests and the admin API. */
size_t
idmap_slots(const struct idmap *m)
{
	return (m->im_slots != NULL ? m->im_mask + 1 : 0);
}

/*
 * Walk the map in no particular order: start with *pos = 0; each call
 * gives the next key and value and returns 1, then 0 at the end.  The map
 * must not change during a walk.
 */
int
idmap_next(const struct idmap *m, size_t *pos, const char **key, void **val)
{
	if (m->im_slots == NULL)
		return (0);
	for (; *pos <= m->im_mask; (*pos)++) {
		if (m->im_slots[*pos].is_key != NULL) {
			if (key != NULL)
				*key = m->im_slots[*pos].is_key;
			if (val != NULL)
				*val = m->im_slots[*pos].is_val;
			(*pos)++;
			return (1);
		}
	}
	return (0);
}
