/* Small helpers for the controller's JSON (jansson). Header-only, so that
 * sandboxd, which has no jansson, links nothing of them; include
 * <jansson.h> first. */
#ifndef SBX_JSON_H
#define SBX_JSON_H

#include <stdbool.h>

/* The kind of V for a message: "integer" ("an integer" with ARTICLE), and
 * "null" for JSON null. */
static inline const char *sbx_json_kind(const json_t *v, bool article) {
  static const char *const kinds[][2] = {
      [JSON_OBJECT] = {"object", "an object"},
      [JSON_ARRAY] = {"array", "an array"},
      [JSON_STRING] = {"string", "a string"},
      [JSON_INTEGER] = {"integer", "an integer"},
      [JSON_REAL] = {"number", "a number"},
      [JSON_TRUE] = {"boolean", "a boolean"},
      [JSON_FALSE] = {"boolean", "a boolean"},
      [JSON_NULL] = {"null", "null"},
  };
  unsigned t = v ? (unsigned)json_typeof(v) : (unsigned)JSON_NULL;
  if (t >= sizeof(kinds) / sizeof(kinds[0]) || !kinds[t][0])
    return "unknown";
  return kinds[t][article];
}

#endif
