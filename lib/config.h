/*
 * YAML configuration documents: a small tree built with libyaml that keeps
 * the line and column of every node, and typed accessors whose errors read
 * "file:line:column: message".
 */
#ifndef AK_CONFIG_H
#define AK_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum cfg_type {
	CFG_SCALAR,
	CFG_MAP,
	CFG_SEQ,
};

struct cfg_node {
	enum cfg_type n_type;
	char *n_value; /* scalars */
	int n_plain; /* unquoted scalar */
	int n_line; /* 1-based */
	int n_col; /* 1-based */
	char *n_pointer; /* from JSON (n_line 0): its JSON pointer, or NULL */
	struct cfg_node **n_items; /* seq items; map key, value... */
	size_t n_count; /* entries in n_items */
};

struct cfg_doc {
	char *d_file;
	struct cfg_node *d_root; /* NULL for an empty document */
};

struct cfg_doc *cfg_parse_file(const char *path, char **cause);
struct cfg_doc *
cfg_parse_string(const char *name, const char *text, size_t len, char **cause);
void cfg_doc_free(struct cfg_doc *);
void cfg_node_add(struct cfg_node *, struct cfg_node *child);
void cfg_node_free(struct cfg_node *);

int cfg_error(const struct cfg_doc *, const struct cfg_node *, char **cause,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
const char *cfg_type_name(enum cfg_type);

int cfg_check_map(const struct cfg_doc *, const struct cfg_node *,
    const char *what, const char *const *keys, char **cause);
int cfg_check_seq(const struct cfg_doc *, const struct cfg_node *,
    const char *what, char **cause);
struct cfg_node *cfg_map_get(const struct cfg_node *, const char *key);
size_t cfg_map_size(const struct cfg_node *);
struct cfg_node *cfg_map_key(const struct cfg_node *, size_t);
struct cfg_node *cfg_map_value(const struct cfg_node *, size_t);

int cfg_get_string(const struct cfg_doc *, const struct cfg_node *,
    const char *what, char **out, char **cause);
int cfg_get_bool(const struct cfg_doc *, const struct cfg_node *,
    const char *what, int *out, char **cause);
int
cfg_get_int(const struct cfg_doc *, const struct cfg_node *, const char *what,
    long long min, long long max, long long *out, char **cause);
int cfg_get_duration(const struct cfg_doc *, const struct cfg_node *,
    const char *what, uint64_t min_ms, uint64_t max_ms, uint64_t *out_ms,
    char **cause);
int cfg_get_size(const struct cfg_doc *, const struct cfg_node *,
    const char *what, uint64_t min, uint64_t max, uint64_t *out, char **cause);
int cfg_get_enum(const struct cfg_doc *, const struct cfg_node *,
    const char *what, const char *const *names, int *out, char **cause);

int cfg_parse_duration(const char *, uint64_t *ms);
int cfg_parse_size(const char *, uint64_t *);

/* config_json.c */
struct json_t;
struct cfg_doc *
cfg_from_json(const char *name, const struct json_t *, char **cause);

#endif
