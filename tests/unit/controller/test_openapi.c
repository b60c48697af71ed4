/* The OpenAPI document served at /v1/openapi.json against the server's
 * route table: every route is documented with its method, and every
 * documented operation is a route. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "controller/server/server_internal.h"

/* PATTERN as OpenAPI writes it: a rest-of-path "{name*}" is "{name}". */
static const char *as_openapi(const char *pattern) {
  static char out[256];
  size_t n = 0;
  for (const char *p = pattern; *p && n < sizeof(out) - 1; p++)
    if (!(*p == '*' && p[1] == '}'))
      out[n++] = *p;
  out[n] = '\0';
  return out;
}

static json_t *doc(void) {
  json_error_t je;
  json_t *d = json_loads(server_openapi_text(), 0, &je);
  cr_assert_not_null(d, "openapi.json: %s at line %d", je.text, je.line);
  return d;
}

Test(openapi, is_openapi_3_1) {
  json_t *d = doc();
  cr_expect_str_eq(json_string_value(json_object_get(d, "openapi")), "3.1.0");
  cr_expect(json_is_object(json_object_get(d, "paths")));
  json_decref(d);
}

Test(openapi, documents_every_route) {
  json_t *d = doc();
  json_t *paths = json_object_get(d, "paths");
  const char *method;
  const char *pattern;
  size_t n = 0;
  for (size_t i = 0; (pattern = api_route_at(i, &method)); i++, n++) {
    json_t *p = json_object_get(paths, as_openapi(pattern));
    cr_expect_not_null(p, "%s is not in openapi.json", pattern);
    char lower[16];
    size_t k = 0;
    for (; method[k] && k < sizeof(lower) - 1; k++)
      lower[k] = (char)(method[k] | 0x20);
    lower[k] = '\0';
    cr_expect_not_null(json_object_get(p, lower), "%s %s is not documented",
                       method, pattern);
  }
  cr_expect_gt(n, 5);
  json_decref(d);
}

Test(openapi, documents_only_routes) {
  json_t *d = doc();
  json_t *paths = json_object_get(d, "paths");
  const char *path;
  json_t *ops;
  json_object_foreach(paths, path, ops) {
    const char *op;
    json_t *v;
    json_object_foreach(ops, op, v) {
      bool found = false;
      const char *method, *pattern;
      for (size_t i = 0; !found && (pattern = api_route_at(i, &method)); i++)
        found = strcmp(as_openapi(pattern), path) == 0 &&
                strcasecmp(method, op) == 0;
      cr_expect(found, "openapi.json documents %s %s, which is no route", op,
                path);
    }
  }
  json_decref(d);
}
