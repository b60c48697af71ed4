/* YAML (a kubeconfig) into JSON with libyaml: a kubeconfig is YAML, and a
 * correct YAML parser is not something to write by hand. Every scalar
 * becomes a string; the reader decides what a string means. */
#include <errno.h>
#include <string.h>
#include <yaml.h>

#include "backends/kubernetes/kube_internal.h"
#include "shared/cleanup.h"

#define MAX_DEPTH 64

struct builder {
  json_t *stack[MAX_DEPTH + 1]; /* open containers (borrowed from root) */
  char *key[MAX_DEPTH + 1];     /* a mapping's pending key, or NULL */
  size_t depth;
  json_t *root; /* new */
};

static int bad(struct sbx_error *e, const yaml_mark_t *m, const char *what) {
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "line %zu column %zu: %s", m->line + 1, m->column + 1,
                       what);
}

static json_t *scalar(const yaml_event_t *ev) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
      (n == 0 || (n == 1 && v[0] == '~') || (n == 4 && !memcmp(v, "null", 4))))
    return json_null();
  return json_stringn(v, n);
}

/* Adds V (stolen) where the builder stands: the root, an array's next
 * element, a mapping's pending key's value, or (a string) a mapping's
 * next key. */
static int add(struct builder *b, json_t *v, bool is_key_candidate,
               const yaml_mark_t *m, struct sbx_error *e) {
  if (!v)
    return bad(e, m, "not UTF-8, or out of memory");
  if (b->depth == 0) {
    if (b->root) {
      json_decref(v);
      return bad(e, m, "more than one document");
    }
    b->root = v;
    return 0;
  }
  json_t *top = b->stack[b->depth - 1];
  if (json_is_array(top))
    return json_array_append_new(top, v) < 0 ? -ENOMEM : 0;
  char **key = &b->key[b->depth - 1];
  if (!*key) {
    if (!is_key_candidate || !json_is_string(v)) {
      json_decref(v);
      return bad(e, m, "a mapping's key must be a string");
    }
    *key = strdup(json_string_value(v));
    json_decref(v);
    return *key ? 0 : -ENOMEM;
  }
  if (json_object_get(top, *key)) {
    json_decref(v);
    char msg[160];
    (void)snprintf(msg, sizeof(msg), "duplicate key \"%.100s\"", *key);
    return bad(e, m, msg);
  }
  int r = json_object_set_new(top, *key, v) < 0 ? -ENOMEM : 0;
  free(*key);
  *key = NULL;
  return r;
}

static int open_container(struct builder *b, json_t *c, const yaml_mark_t *m,
                          struct sbx_error *e) {
  if (b->depth == MAX_DEPTH) {
    json_decref(c);
    return bad(e, m, "nested too deeply");
  }
  if (!c)
    return -ENOMEM;
  int r = add(b, json_incref(c), false, m, e);
  if (r < 0) {
    json_decref(c);
    return r;
  }
  b->stack[b->depth] = c;
  b->key[b->depth] = NULL;
  b->depth++;
  json_decref(c); /* the parent (or root) holds it */
  return 0;
}

/* One event into the builder: 1 at the stream's end. */
static int take(struct builder *b, const yaml_event_t *ev,
                struct sbx_error *e) {
  const yaml_mark_t *m = &ev->start_mark;
  switch (ev->type) {
  case YAML_ALIAS_EVENT:
    return bad(e, m, "aliases (*name) are not supported");
  case YAML_SCALAR_EVENT:
    if (ev->data.scalar.anchor)
      return bad(e, m, "anchors (&name) are not supported");
    return add(b, scalar(ev), true, m, e);
  case YAML_SEQUENCE_START_EVENT:
    if (ev->data.sequence_start.anchor)
      return bad(e, m, "anchors (&name) are not supported");
    return open_container(b, json_array(), m, e);
  case YAML_MAPPING_START_EVENT:
    if (ev->data.mapping_start.anchor)
      return bad(e, m, "anchors (&name) are not supported");
    return open_container(b, json_object(), m, e);
  case YAML_SEQUENCE_END_EVENT:
  case YAML_MAPPING_END_EVENT:
    if (b->depth == 0)
      return bad(e, m, "unbalanced end");
    b->depth--;
    free(b->key[b->depth]);
    b->key[b->depth] = NULL;
    return 0;
  case YAML_STREAM_END_EVENT:
    return 1;
  default:
    return 0;
  }
}

int kube_yaml_to_json(const char *text, size_t len, json_t **out,
                      struct sbx_error *e) {
  *out = NULL;
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p))
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  struct builder b = {0};
  int r = 0;
  while (r == 0) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "line %zu column %zu: %s", p.problem_mark.line + 1,
                        p.problem_mark.column + 1,
                        p.problem ? p.problem : "not YAML");
      break;
    }
    r = take(&b, &ev, e);
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  for (size_t i = 0; i <= MAX_DEPTH; i++)
    free(b.key[i]);
  if (r == -ENOMEM)
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  if (r < 0) {
    json_decref(b.root);
    return r;
  }
  *out = b.root ? b.root : json_null();
  return 0;
}
