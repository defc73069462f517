/*
 * Configuration trees from JSON.  The admin API takes sandboxes as JSON in
 * the same shape as the YAML configuration; converting the JSON value into
 * the tree the YAML loader builds lets the same schema code check both.
 * Nodes built here have no position (n_line == 0), so errors read
 * "name: message".
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "alloc.h"
#include "config.h"

/* Deepest nesting accepted, as for YAML documents. */
#define CFG_JSON_MAX_DEPTH 32

static int
cfg_json_node(const char *, const json_t *, int, struct cfg_node **, char **);

/* Allocate a node without a position. */
static struct cfg_node *
cfg_json_new(enum cfg_type type)
{
	struct cfg_node *n;

	n = xcalloc(1, sizeof *n);
	n->n_type = type;
	return (n);
}

/* Append a child to a map or list node. */
static void
cfg_json_add(struct cfg_node *n, struct cfg_node *child)
{
	n->n_items = xreallocarray(
	    n->n_items, n->n_count + 1, sizeof *n->n_items);
	n->n_items[n->n_count++] = child;
}

/* Free a node and its children. */
static void
cfg_json_free(struct cfg_node *n)
{
	size_t i;

	if (n == NULL)
		return;
	for (i = 0; i < n->n_count; i++)
		cfg_json_free(n->n_items[i]);
	free(n->n_items);
	free(n->n_value);
	free(n);
}

/* A scalar node holding len bytes of s. */
static struct cfg_node *
cfg_json_scalar(const char *s, size_t len, int plain)
{
	struct cfg_node *n;

	n = cfg_json_new(CFG_SCALAR);
	n->n_value = xstrndup(s, len);
	n->n_plain = plain;
	return (n);
}

/*
 * Convert a number or a boolean to a plain scalar with its JSON text, so
 * 8080 reads as "8080" and 1.5 as "1.5", exactly as YAML would give them.
 */
static int
cfg_json_literal(
    const char *name, const json_t *v, struct cfg_node **out, char **cause)
{
	char *text;

	if ((text = json_dumps(v, JSON_ENCODE_ANY)) == NULL) {
		xasprintf(cause, "%s: a number cannot be represented", name);
		return (-1);
	}
	*out = cfg_json_scalar(text, strlen(text), 1);
	free(text);
	return (0);
}

/* Convert an object to a mapping node with scalar keys. */
static int
cfg_json_object(const char *name, const json_t *v, int depth,
    struct cfg_node **out, char **cause)
{
	struct cfg_node *n, *child;
	const char *key;
	json_t *item;

	n = cfg_json_new(CFG_MAP);
	/* Cast: jansson's iteration macro takes a non-const object. */
	json_object_foreach((json_t *)v, key, item)
	{
		cfg_json_add(n, cfg_json_scalar(key, strlen(key), 0));
		if (cfg_json_node(name, item, depth + 1, &child, cause) != 0) {
			cfg_json_free(n);
			return (-1);
		}
		cfg_json_add(n, child);
	}
	*out = n;
	return (0);
}

/* Convert an array to a list node. */
static int
cfg_json_array(const char *name, const json_t *v, int depth,
    struct cfg_node **out, char **cause)
{
	struct cfg_node *n, *child;
	size_t i;

	n = cfg_json_new(CFG_SEQ);
	for (i = 0; i < json_array_size(v); i++) {
		if (cfg_json_node(name, json_array_get(v, i), depth + 1, &child,
			cause) != 0) {
			cfg_json_free(n);
			return (-1);
		}
		cfg_json_add(n, child);
	}
	*out = n;
	return (0);
}

/* Convert one JSON value at nesting depth; -1 with *cause on error. */
static int
cfg_json_node(const char *name, const json_t *v, int depth,
    struct cfg_node **out, char **cause)
{
	const char *s;
	size_t len;

	if (depth > CFG_JSON_MAX_DEPTH) {
		xasprintf(cause, "%s: nested too deeply", name);
		return (-1);
	}
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return (cfg_json_object(name, v, depth, out, cause));
	case JSON_ARRAY:
		return (cfg_json_array(name, v, depth, out, cause));
	case JSON_STRING:
		s = json_string_value(v);
		len = json_string_length(v);
		if (memchr(s, '\0', len) != NULL) {
			xasprintf(cause, "%s: NUL byte in a value", name);
			return (-1);
		}
		*out = cfg_json_scalar(s, len, 0);
		return (0);
	case JSON_INTEGER:
	case JSON_REAL:
	case JSON_TRUE:
	case JSON_FALSE:
		return (cfg_json_literal(name, v, out, cause));
	case JSON_NULL:
		*out = cfg_json_scalar("", 0, 1);
		return (0);
	}
	xasprintf(cause, "%s: unexpected JSON value", name);
	return (-1);
}

/*
 * Convert a JSON value into a configuration document named name (used in
 * messages).  Returns a document the caller frees with cfg_doc_free, or
 * NULL with *cause set.  The value is not modified or kept.
 */
struct cfg_doc *
cfg_from_json(const char *name, const json_t *value, char **cause)
{
	struct cfg_doc *doc;
	struct cfg_node *root;

	if (value == NULL) {
		xasprintf(cause, "%s: no JSON value", name);
		return (NULL);
	}
	if (cfg_json_node(name, value, 0, &root, cause) != 0)
		return (NULL);
	doc = xcalloc(1, sizeof *doc);
	doc->d_file = xstrdup(name);
	doc->d_root = root;
	return (doc);
}
