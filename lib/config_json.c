/*
 * Configuration trees from JSON.  The admin API takes sandboxes as JSON in
 * the same shape as the YAML configuration; converting the JSON value into
 * the tree the YAML loader builds lets the same schema code check both.
 * Nodes built here have no line and column (n_line == 0) but their JSON
 * pointer (RFC 6901), so errors read "name at /ports/0/port: message".
 */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "alloc.h"
#include "config.h"

/* Deepest nesting accepted, as for YAML documents. */
#define CFG_JSON_MAX_DEPTH 32

static int cfg_json_node(const char *, const json_t *, const char *, int,
    struct cfg_node **, char **);

/* Allocate a node at JSON pointer ptr. */
static struct cfg_node *
cfg_json_new(enum cfg_type type, const char *ptr)
{
	struct cfg_node *n;

	n = xcalloc(1, sizeof *n);
	n->n_type = type;
	n->n_pointer = xstrdup(ptr);
	return (n);
}

/* The pointer of member key under ptr, with '~' and '/' escaped. */
static char *
cfg_json_member(const char *ptr, const char *key)
{
	char *out, *o;
	size_t extra = 0;
	const char *k;

	for (k = key; *k != '\0'; k++)
		extra += *k == '~' || *k == '/';
	out = xmalloc(strlen(ptr) + 1 + strlen(key) + extra + 1);
	o = out + strlen(ptr);
	memcpy(out, ptr, (size_t)(o - out));
	*o++ = '/';
	for (k = key; *k != '\0'; k++) {
		if (*k == '~' || *k == '/') {
			*o++ = '~';
			*o++ = *k == '~' ? '0' : '1';
		} else
			*o++ = *k;
	}
	*o = '\0';
	return (out);
}

/* Set *cause to "name at ptr: what" ("name: what" at the root). */
static int
cfg_json_error(
    const char *name, const char *ptr, const char *what, char **cause)
{
	if (*ptr != '\0')
		xasprintf(cause, "%s at %s: %s", name, ptr, what);
	else
		xasprintf(cause, "%s: %s", name, what);
	return (-1);
}

/* A scalar node holding len bytes of s, at JSON pointer ptr. */
static struct cfg_node *
cfg_json_scalar(const char *s, size_t len, int plain, const char *ptr)
{
	struct cfg_node *n;

	n = cfg_json_new(CFG_SCALAR, ptr);
	n->n_value = xstrndup(s, len);
	n->n_plain = plain;
	return (n);
}

/*
 * Convert a number or a boolean to a plain scalar with its JSON text, so
 * 8080 reads as "8080" and 1.5 as "1.5", exactly as YAML would give them.
 */
static int
cfg_json_literal(const char *name, const json_t *v, const char *ptr,
    struct cfg_node **out, char **cause)
{
	char *text;

	if ((text = json_dumps(v, JSON_ENCODE_ANY)) == NULL)
		return (cfg_json_error(
		    name, ptr, "a number cannot be represented", cause));
	*out = cfg_json_scalar(text, strlen(text), 1, ptr);
	free(text);
	return (0);
}

/* Convert an object to a mapping node with scalar keys. */
static int
cfg_json_object(const char *name, const json_t *v, const char *ptr, int depth,
    struct cfg_node **out, char **cause)
{
	struct cfg_node *n, *child;
	const char *key;
	json_t *item;
	char *mp;

	n = cfg_json_new(CFG_MAP, ptr);
	/* Cast: jansson's iteration macro takes a non-const object. */
	json_object_foreach((json_t *)v, key, item)
	{
		/* The key points at its member, as the member does. */
		mp = cfg_json_member(ptr, key);
		cfg_node_add(n, cfg_json_scalar(key, strlen(key), 0, mp));
		if (cfg_json_node(name, item, mp, depth + 1, &child, cause) !=
		    0) {
			free(mp);
			cfg_node_free(n);
			return (-1);
		}
		free(mp);
		cfg_node_add(n, child);
	}
	*out = n;
	return (0);
}

/* Convert an array to a list node. */
static int
cfg_json_array(const char *name, const json_t *v, const char *ptr, int depth,
    struct cfg_node **out, char **cause)
{
	struct cfg_node *n, *child;
	char *ip;
	size_t i;
	int rv;

	n = cfg_json_new(CFG_SEQ, ptr);
	for (i = 0; i < json_array_size(v); i++) {
		xasprintf(&ip, "%s/%zu", ptr, i);
		rv = cfg_json_node(
		    name, json_array_get(v, i), ip, depth + 1, &child, cause);
		free(ip);
		if (rv != 0) {
			cfg_node_free(n);
			return (-1);
		}
		cfg_node_add(n, child);
	}
	*out = n;
	return (0);
}

/*
 * Convert one JSON value at pointer ptr and nesting depth; -1 with *cause
 * on error.
 */
static int
cfg_json_node(const char *name, const json_t *v, const char *ptr, int depth,
    struct cfg_node **out, char **cause)
{
	const char *s;
	size_t len;

	if (depth > CFG_JSON_MAX_DEPTH)
		return (cfg_json_error(name, ptr, "nested too deeply", cause));
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return (cfg_json_object(name, v, ptr, depth, out, cause));
	case JSON_ARRAY:
		return (cfg_json_array(name, v, ptr, depth, out, cause));
	case JSON_STRING:
		s = json_string_value(v);
		len = json_string_length(v);
		if (memchr(s, '\0', len) != NULL)
			return (cfg_json_error(
			    name, ptr, "NUL byte in a value", cause));
		*out = cfg_json_scalar(s, len, 0, ptr);
		return (0);
	case JSON_INTEGER:
	case JSON_REAL:
	case JSON_TRUE:
	case JSON_FALSE:
		return (cfg_json_literal(name, v, ptr, out, cause));
	case JSON_NULL:
		*out = cfg_json_scalar("", 0, 1, ptr);
		return (0);
	}
	return (cfg_json_error(name, ptr, "unexpected JSON value", cause));
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
	if (cfg_json_node(name, value, "", 0, &root, cause) != 0)
		return (NULL);
	doc = xcalloc(1, sizeof *doc);
	doc->d_file = xstrdup(name);
	doc->d_root = root;
	return (doc);
}
