/*
 * YAML configuration documents.  libyaml's event parser builds a small tree
 * that remembers where every node was written, so each later check can say
 * "file:line:column: message".  Anchors and aliases, tags and multiple
 * documents are refused: a configuration file is plain data.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <yaml.h>

#include "alloc.h"
#include "config.h"

/* Deepest nesting accepted; deeper documents are refused, not recursed. */
#define CFG_MAX_DEPTH 32

struct cfg_parse {
	yaml_parser_t p_parser;
	const char *p_file;
	char **p_cause;
};

static struct cfg_node *cfg_parse_node(struct cfg_parse *, yaml_event_t *, int);
static void cfg_mark_error(struct cfg_parse *, const yaml_mark_t *,
    const char *, ...) __attribute__((format(printf, 3, 4)));

/* Name of a node type, for messages. */
const char *
cfg_type_name(enum cfg_type t)
{
	switch (t) {
	case CFG_SCALAR:
		return ("a scalar");
	case CFG_MAP:
		return ("a mapping");
	case CFG_SEQ:
		return ("a list");
	}
	return ("?");
}

/* Set *cause to "file:line:column: message" for a libyaml mark. */
static void
cfg_mark_error(struct cfg_parse *cp, const yaml_mark_t *m, const char *fmt, ...)
{
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	xasprintf(cp->p_cause, "%s:%zu:%zu: %s", cp->p_file, m->line + 1,
	    m->column + 1, msg);
	free(msg);
}

/* Report libyaml's own syntax error. */
static void
cfg_parser_error(struct cfg_parse *cp)
{
	yaml_parser_t *p = &cp->p_parser;
	const char *problem = p->problem ? p->problem : "syntax error";

	if (p->context != NULL)
		cfg_mark_error(
		    cp, &p->problem_mark, "%s %s", problem, p->context);
	else
		cfg_mark_error(cp, &p->problem_mark, "%s", problem);
}

/* Fetch the next event; returns -1 with *cause set on a syntax error. */
static int
cfg_next(struct cfg_parse *cp, yaml_event_t *ev)
{
	if (!yaml_parser_parse(&cp->p_parser, ev)) {
		cfg_parser_error(cp);
		return (-1);
	}
	return (0);
}

/* Allocate a node at the position of an event. */
static struct cfg_node *
cfg_node_new(enum cfg_type type, const yaml_event_t *ev)
{
	struct cfg_node *n;

	n = xcalloc(1, sizeof *n);
	n->n_type = type;
	n->n_line = (int)ev->start_mark.line + 1;
	n->n_col = (int)ev->start_mark.column + 1;
	return (n);
}

/* Append a child to a map or list node. */
void
cfg_node_add(struct cfg_node *n, struct cfg_node *child)
{
	n->n_items = xreallocarray(
	    n->n_items, n->n_count + 1, sizeof *n->n_items);
	n->n_items[n->n_count++] = child;
}

/* Free a node and its children. */
void
cfg_node_free(struct cfg_node *n)
{
	size_t i;

	if (n == NULL)
		return;
	for (i = 0; i < n->n_count; i++)
		cfg_node_free(n->n_items[i]);
	free(n->n_items);
	free(n->n_value);
	free(n->n_pointer);
	free(n);
}

/* Build a scalar node. */
static struct cfg_node *
cfg_parse_scalar(struct cfg_parse *cp, yaml_event_t *ev)
{
	struct cfg_node *n;
	const char *v = (const char *)ev->data.scalar.value;
	size_t len = ev->data.scalar.length;

	if (memchr(v, '\0', len) != NULL) {
		cfg_mark_error(cp, &ev->start_mark, "NUL byte in a value");
		return (NULL);
	}
	n = cfg_node_new(CFG_SCALAR, ev);
	n->n_value = xstrndup(v, len);
	n->n_plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
	return (n);
}

/* Build a mapping node from the events after MAPPING_START. */
static struct cfg_node *
cfg_parse_map(struct cfg_parse *cp, yaml_event_t *start, int depth)
{
	struct cfg_node *n, *k, *v;
	yaml_event_t ev;
	size_t i;

	n = cfg_node_new(CFG_MAP, start);
	for (;;) {
		if (cfg_next(cp, &ev) != 0)
			goto fail;
		if (ev.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&ev);
			return (n);
		}
		if (ev.type != YAML_SCALAR_EVENT) {
			cfg_mark_error(cp, &ev.start_mark,
			    "a mapping key must be a plain string");
			yaml_event_delete(&ev);
			goto fail;
		}
		k = cfg_parse_scalar(cp, &ev);
		yaml_event_delete(&ev);
		if (k == NULL)
			goto fail;
		for (i = 0; i < n->n_count; i += 2) {
			if (strcmp(n->n_items[i]->n_value, k->n_value) != 0)
				continue;
			xasprintf(cp->p_cause,
			    "%s:%d:%d: duplicate key '%s' "
			    "(first at line %d)",
			    cp->p_file, k->n_line, k->n_col, k->n_value,
			    n->n_items[i]->n_line);
			cfg_node_free(k);
			goto fail;
		}
		cfg_node_add(n, k);
		if (cfg_next(cp, &ev) != 0)
			goto fail;
		v = cfg_parse_node(cp, &ev, depth + 1);
		yaml_event_delete(&ev);
		if (v == NULL)
			goto fail;
		cfg_node_add(n, v);
	}
fail:
	cfg_node_free(n);
	return (NULL);
}

/* Build a list node from the events after SEQUENCE_START. */
static struct cfg_node *
cfg_parse_seq(struct cfg_parse *cp, yaml_event_t *start, int depth)
{
	struct cfg_node *n, *v;
	yaml_event_t ev;

	n = cfg_node_new(CFG_SEQ, start);
	for (;;) {
		if (cfg_next(cp, &ev) != 0)
			goto fail;
		if (ev.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&ev);
			return (n);
		}
		v = cfg_parse_node(cp, &ev, depth + 1);
		yaml_event_delete(&ev);
		if (v == NULL)
			goto fail;
		cfg_node_add(n, v);
	}
fail:
	cfg_node_free(n);
	return (NULL);
}

/* Build the node that starts with event ev. */
static struct cfg_node *
cfg_parse_node(struct cfg_parse *cp, yaml_event_t *ev, int depth)
{
	if (depth > CFG_MAX_DEPTH) {
		cfg_mark_error(cp, &ev->start_mark, "nested too deeply");
		return (NULL);
	}
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		if (ev->data.scalar.anchor != NULL)
			break;
		return (cfg_parse_scalar(cp, ev));
	case YAML_MAPPING_START_EVENT:
		if (ev->data.mapping_start.anchor != NULL)
			break;
		return (cfg_parse_map(cp, ev, depth));
	case YAML_SEQUENCE_START_EVENT:
		if (ev->data.sequence_start.anchor != NULL)
			break;
		return (cfg_parse_seq(cp, ev, depth));
	case YAML_ALIAS_EVENT:
		cfg_mark_error(
		    cp, &ev->start_mark, "aliases are not supported");
		return (NULL);
	default:
		cfg_mark_error(cp, &ev->start_mark, "unexpected YAML event");
		return (NULL);
	}
	cfg_mark_error(cp, &ev->start_mark, "anchors are not supported");
	return (NULL);
}

/* Parse a whole stream with one document. */
static struct cfg_doc *
cfg_parse_stream(struct cfg_parse *cp)
{
	struct cfg_doc *doc;
	yaml_event_t ev;
	int done = 0, ndocs = 0;

	doc = xcalloc(1, sizeof *doc);
	doc->d_file = xstrdup(cp->p_file);
	while (!done) {
		if (cfg_next(cp, &ev) != 0)
			goto fail;
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (++ndocs > 1) {
				cfg_mark_error(cp, &ev.start_mark,
				    "only one YAML document is allowed");
				yaml_event_delete(&ev);
				goto fail;
			}
			break;
		case YAML_SCALAR_EVENT:
		case YAML_MAPPING_START_EVENT:
		case YAML_SEQUENCE_START_EVENT:
		case YAML_ALIAS_EVENT:
			doc->d_root = cfg_parse_node(cp, &ev, 0);
			if (doc->d_root == NULL) {
				yaml_event_delete(&ev);
				goto fail;
			}
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	/* An empty document ("" or "---") is an empty mapping. */
	if (doc->d_root != NULL && doc->d_root->n_type == CFG_SCALAR &&
	    doc->d_root->n_plain && *doc->d_root->n_value == '\0') {
		cfg_node_free(doc->d_root);
		doc->d_root = NULL;
	}
	return (doc);
fail:
	cfg_doc_free(doc);
	return (NULL);
}

/* Parse YAML text; name is used in messages. */
struct cfg_doc *
cfg_parse_string(const char *name, const char *text, size_t len, char **cause)
{
	struct cfg_parse cp;
	struct cfg_doc *doc;

	memset(&cp, 0, sizeof cp);
	cp.p_file = name;
	cp.p_cause = cause;
	if (!yaml_parser_initialize(&cp.p_parser)) {
		xasprintf(cause, "%s: cannot initialise the YAML parser", name);
		return (NULL);
	}
	yaml_parser_set_input_string(
	    &cp.p_parser, (const unsigned char *)text, len);
	doc = cfg_parse_stream(&cp);
	yaml_parser_delete(&cp.p_parser);
	return (doc);
}

/* Parse a YAML file. */
struct cfg_doc *
cfg_parse_file(const char *path, char **cause)
{
	struct cfg_parse cp;
	struct cfg_doc *doc;
	FILE *f;

	if ((f = fopen(path, "rb")) == NULL) {
		xasprintf(cause, "%s: %s", path, strerror(errno));
		return (NULL);
	}
	memset(&cp, 0, sizeof cp);
	cp.p_file = path;
	cp.p_cause = cause;
	if (!yaml_parser_initialize(&cp.p_parser)) {
		fclose(f);
		xasprintf(cause, "%s: cannot initialise the YAML parser", path);
		return (NULL);
	}
	yaml_parser_set_input_file(&cp.p_parser, f);
	doc = cfg_parse_stream(&cp);
	yaml_parser_delete(&cp.p_parser);
	fclose(f);
	return (doc);
}

/* Free a document. */
void
cfg_doc_free(struct cfg_doc *doc)
{
	if (doc == NULL)
		return;
	cfg_node_free(doc->d_root);
	free(doc->d_file);
	free(doc);
}

/* Set *cause to "file:line:column: message" at node n; returns -1. */
int
cfg_error(const struct cfg_doc *doc, const struct cfg_node *n, char **cause,
    const char *fmt, ...)
{
	va_list ap;
	char *msg;

	va_start(ap, fmt);
	xvasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n != NULL && n->n_line > 0)
		xasprintf(cause, "%s:%d:%d: %s", doc->d_file, n->n_line,
		    n->n_col, msg);
	else if (n != NULL && n->n_pointer != NULL && *n->n_pointer != '\0')
		/* A tree built from JSON: its JSON pointer instead. */
		xasprintf(
		    cause, "%s at %s: %s", doc->d_file, n->n_pointer, msg);
	else if (n != NULL)
		xasprintf(cause, "%s: %s", doc->d_file, msg);
	else
		xasprintf(cause, "%s:1:1: %s", doc->d_file, msg);
	free(msg);
	return (-1);
}

/*
 * Check that n is a mapping whose keys are all in the NULL-terminated list
 * keys.  A NULL node (absent) passes.
 */
int
cfg_check_map(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, const char *const *keys, char **cause)
{
	size_t i, j, len;
	char *list;

	if (n == NULL)
		return (0);
	if (n->n_type != CFG_MAP)
		return (cfg_error(doc, n, cause, "%s must be a mapping, not %s",
		    what, cfg_type_name(n->n_type)));
	for (i = 0; i < n->n_count; i += 2) {
		for (j = 0; keys[j] != NULL; j++) {
			if (strcmp(n->n_items[i]->n_value, keys[j]) == 0)
				break;
		}
		if (keys[j] != NULL)
			continue;
		len = 1;
		for (j = 0; keys[j] != NULL; j++)
			len += strlen(keys[j]) + 2;
		list = xcalloc(1, len);
		for (j = 0; keys[j] != NULL; j++) {
			if (j > 0)
				strcat(list, ", ");
			strcat(list, keys[j]);
		}
		cfg_error(doc, n->n_items[i], cause,
		    "unknown key '%s' in %s (expected one of: %s)",
		    n->n_items[i]->n_value, what, list);
		free(list);
		return (-1);
	}
	return (0);
}

/* Check that n is a list; a NULL node passes. */
int
cfg_check_seq(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, char **cause)
{
	if (n == NULL || n->n_type == CFG_SEQ)
		return (0);
	return (cfg_error(doc, n, cause, "%s must be a list, not %s", what,
	    cfg_type_name(n->n_type)));
}

/* Value of key in mapping n, or NULL. */
struct cfg_node *
cfg_map_get(const struct cfg_node *n, const char *key)
{
	size_t i;

	if (n == NULL || n->n_type != CFG_MAP)
		return (NULL);
	for (i = 0; i < n->n_count; i += 2) {
		if (strcmp(n->n_items[i]->n_value, key) == 0)
			return (n->n_items[i + 1]);
	}
	return (NULL);
}

/* Number of entries in a mapping. */
size_t
cfg_map_size(const struct cfg_node *n)
{
	return (n == NULL ? 0 : n->n_count / 2);
}

/* Key node of mapping entry i. */
struct cfg_node *
cfg_map_key(const struct cfg_node *n, size_t i)
{
	return (n->n_items[i * 2]);
}

/* Value node of mapping entry i. */
struct cfg_node *
cfg_map_value(const struct cfg_node *n, size_t i)
{
	return (n->n_items[i * 2 + 1]);
}

/* Is a scalar YAML's null (empty, "~" or "null", unquoted)? */
static int
cfg_is_null(const struct cfg_node *n)
{
	return (n->n_plain &&
	    (*n->n_value == '\0' || strcmp(n->n_value, "~") == 0 ||
		strcmp(n->n_value, "null") == 0));
}

/* Require a scalar node. */
static int
cfg_need_scalar(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, char **cause)
{
	if (n->n_type == CFG_SCALAR)
		return (0);
	return (cfg_error(doc, n, cause, "%s must be a single value, not %s",
	    what, cfg_type_name(n->n_type)));
}

/* Read a string; null reads as "".  *out is xstrdup'd. */
int
cfg_get_string(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, char **out, char **cause)
{
	if (cfg_need_scalar(doc, n, what, cause) != 0)
		return (-1);
	*out = xstrdup(cfg_is_null(n) ? "" : n->n_value);
	return (0);
}

/* Read a boolean: true/false, yes/no, on/off. */
int
cfg_get_bool(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, int *out, char **cause)
{
	static const char *yes[] = { "true", "yes", "on", NULL };
	static const char *no[] = { "false", "no", "off", NULL };
	size_t i;

	if (cfg_need_scalar(doc, n, what, cause) != 0)
		return (-1);
	for (i = 0; yes[i] != NULL; i++) {
		if (strcasecmp(n->n_value, yes[i]) == 0) {
			*out = 1;
			return (0);
		}
		if (strcasecmp(n->n_value, no[i]) == 0) {
			*out = 0;
			return (0);
		}
	}
	return (cfg_error(doc, n, cause, "%s must be true or false, not '%s'",
	    what, n->n_value));
}

/* Read a decimal integer in [min, max]. */
int
cfg_get_int(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, long long min, long long max, long long *out,
    char **cause)
{
	const char *s;
	char *end;
	long long v;

	if (cfg_need_scalar(doc, n, what, cause) != 0)
		return (-1);
	s = n->n_value;
	if (*s == '\0' || !(*s == '-' || (*s >= '0' && *s <= '9')))
		goto bad;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0')
		goto bad;
	if (errno == ERANGE || v < min || v > max)
		return (cfg_error(doc, n, cause,
		    "%s must be between %lld and %lld, not %s", what, min, max,
		    s));
	*out = v;
	return (0);
bad:
	return (cfg_error(
	    doc, n, cause, "%s must be an integer, not '%s'", what, s));
}

/*
 * Parse a duration: a number with an optional unit ms, s, m, h or d (a bare
 * number is seconds).  Returns -1 if malformed or too large.
 */
int
cfg_parse_duration(const char *s, uint64_t *ms)
{
	unsigned long long v;
	uint64_t mult;
	char *end;

	if (*s < '0' || *s > '9')
		return (-1);
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return (-1);
	if (*end == '\0' || strcmp(end, "s") == 0)
		mult = 1000;
	else if (strcmp(end, "ms") == 0)
		mult = 1;
	else if (strcmp(end, "m") == 0)
		mult = 60 * 1000;
	else if (strcmp(end, "h") == 0)
		mult = 3600 * 1000;
	else if (strcmp(end, "d") == 0)
		mult = 86400 * 1000;
	else
		return (-1);
	if (v > UINT64_MAX / mult)
		return (-1);
	*ms = v * mult;
	return (0);
}

/* Format a duration for a message. */
static void
cfg_fmt_duration(uint64_t ms, char *buf, size_t len)
{
	if (ms % 1000 != 0)
		snprintf(buf, len, "%llums", (unsigned long long)ms);
	else
		snprintf(buf, len, "%llus", (unsigned long long)(ms / 1000));
}

/* Read a duration in [min_ms, max_ms]. */
int
cfg_get_duration(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, uint64_t min_ms, uint64_t max_ms, uint64_t *out_ms,
    char **cause)
{
	uint64_t v;
	char lo[32], hi[32];

	if (cfg_need_scalar(doc, n, what, cause) != 0)
		return (-1);
	if (cfg_parse_duration(n->n_value, &v) != 0)
		return (cfg_error(doc, n, cause,
		    "%s must be a duration such "
		    "as 500ms, 10s, 5m or 1h, not '%s'",
		    what, n->n_value));
	if (v < min_ms || v > max_ms) {
		cfg_fmt_duration(min_ms, lo, sizeof lo);
		cfg_fmt_duration(max_ms, hi, sizeof hi);
		return (cfg_error(doc, n, cause,
		    "%s must be between %s and %s, not %s", what, lo, hi,
		    n->n_value));
	}
	*out_ms = v;
	return (0);
}

/*
 * Parse a size: a number with an optional binary unit k/KiB, M/MiB or
 * G/GiB (a bare number is bytes).
 */
int
cfg_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	uint64_t mult;
	char *end;

	if (*s < '0' || *s > '9')
		return (-1);
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return (-1);
	if (*end == '\0' || strcmp(end, "B") == 0)
		mult = 1;
	else if (strcmp(end, "k") == 0 || strcmp(end, "K") == 0 ||
	    strcmp(end, "KiB") == 0)
		mult = 1024;
	else if (strcmp(end, "M") == 0 || strcmp(end, "MiB") == 0)
		mult = 1024 * 1024;
	else if (strcmp(end, "G") == 0 || strcmp(end, "GiB") == 0)
		mult = 1024 * 1024 * 1024;
	else
		return (-1);
	if (v > UINT64_MAX / mult)
		return (-1);
	*out = v * mult;
	return (0);
}

/* Read a size in [min, max] bytes. */
int
cfg_get_size(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, uint64_t min, uint64_t max, uint64_t *out, char **cause)
{
	uint64_t v;

	if (cfg_need_scalar(doc, n, what, cause) != 0)
		return (-1);
	if (cfg_parse_size(n->n_value, &v) != 0)
		return (cfg_error(doc, n, cause,
		    "%s must be a size such as "
		    "4096, 16KiB or 1MiB, not '%s'",
		    what, n->n_value));
	if (v < min || v > max)
		return (cfg_error(doc, n, cause,
		    "%s must be between %llu and "
		    "%llu bytes, not %s",
		    what, (unsigned long long)min, (unsigned long long)max,
		    n->n_value));
	*out = v;
	return (0);
}

/* Read one of a NULL-terminated list of names; *out is its index. */
int
cfg_get_enum(const struct cfg_doc *doc, const struct cfg_node *n,
    const char *what, const char *const *names, int *out, char **cause)
{
	size_t i, len = 1;
	char *list;

	if (cfg_need_scalar(doc, n, what, cause) != 0)
		return (-1);
	for (i = 0; names[i] != NULL; i++) {
		if (strcmp(n->n_value, names[i]) == 0) {
			*out = (int)i;
			return (0);
		}
		len += strlen(names[i]) + 4;
	}
	list = xcalloc(1, len);
	for (i = 0; names[i] != NULL; i++) {
		if (i > 0)
			strcat(list, names[i + 1] == NULL ? " or " : ", ");
		strcat(list, names[i]);
	}
	cfg_error(
	    doc, n, cause, "%s must be %s, not '%s'", what, list, n->n_value);
	free(list);
	return (-1);
}
