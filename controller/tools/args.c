/* Reading a tool call's arguments: optional values with the SDK's defaults,
 * and model paths anchored to the run's cwd. */
#include <stdlib.h>
#include <string.h>

#include "controller/tools/tools_internal.h"

/* Reads an optional integer ≥ MIN; absent or null gives DEF. False when the
 * value is present but not a whole number ≥ MIN. */
bool tools_opt_int(json_t *args, const char *key, int64_t min, int64_t def,
                   int64_t *out) {
  json_t *v = json_object_get(args, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return true;
  }
  double d;
  if (json_is_integer(v))
    d = (double)json_integer_value(v);
  else if (json_is_real(v))
    d = json_real_value(v);
  else
    return false;
  if (d != (double)(int64_t)d || d < (double)min || d > 9.0e15)
    return false;
  *out = (int64_t)d;
  return true;
}

/* Reads an optional boolean; absent or null gives DEF. */
bool tools_opt_bool(json_t *args, const char *key, bool def, bool *out) {
  json_t *v = json_object_get(args, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return true;
  }
  if (!json_is_boolean(v))
    return false;
  *out = json_is_true(v);
  return true;
}

/* Reads an optional string (borrowed); absent or null gives NULL. */
bool tools_opt_str(json_t *args, const char *key, const char **out) {
  json_t *v = json_object_get(args, key);
  if (!v || json_is_null(v)) {
    *out = NULL;
    return true;
  }
  if (!json_is_string(v))
    return false;
  *out = json_string_value(v);
  return true;
}

/* Anchors a model path to the run's cwd as the SDK does: relative paths
 * join the cwd, empty is the cwd, absolute stays. New string. */
char *tools_anchor(const struct toolbox *t, const char *p) {
  if (!p)
    p = "";
  if (!t->cwd || p[0] == '/')
    return strdup(p);
  if (!*p)
    return strdup(t->cwd);
  size_t a = strlen(t->cwd), b = strlen(p);
  char *s = malloc(a + b + 2);
  if (!s)
    return NULL;
  memcpy(s, t->cwd, a);
  s[a] = '/';
  memcpy(s + a + 1, p, b + 1);
  return s;
}
