/* Small helpers for the controller's JSON (jansson). Header-only, so that
 * sandboxd, which has no jansson, links nothing of them; include
 * <jansson.h> first. */
#ifndef SBX_JSON_H
#define SBX_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "shared/buf.h"
#include "shared/utf8.h"

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

/* A JSON string of the LEN bytes at S, with invalid UTF-8 replaced by
 * U+FFFD (jansson refuses invalid UTF-8, and a child's output or a model's
 * text may hold it). New; NULL only when out of memory. */
static inline json_t *sbx_json_stringn_utf8(const char *s, size_t len) {
  json_t *j = json_stringn(s, len);
  if (j)
    return j;
  struct sbx_buf b;
  sbx_buf_init(&b, len * 3 + 16);
  if (sbx_utf8_sanitize(s, len, &b) == 0)
    j = json_stringn(b.data ? b.data : "", b.len);
  sbx_buf_free(&b);
  return j;
}

#endif
