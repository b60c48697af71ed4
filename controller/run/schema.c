#include "controller/run/schema.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define SCHEMA_MAX_DEPTH 64

static bool type_matches(const char *t, json_t *v) {
  if (strcmp(t, "object") == 0)
    return json_is_object(v);
  if (strcmp(t, "array") == 0)
    return json_is_array(v);
  if (strcmp(t, "string") == 0)
    return json_is_string(v);
  if (strcmp(t, "integer") == 0)
    return json_is_integer(v) ||
           (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
  if (strcmp(t, "number") == 0)
    return json_is_number(v);
  if (strcmp(t, "boolean") == 0)
    return json_is_boolean(v);
  if (strcmp(t, "null") == 0)
    return json_is_null(v);
  return false;
}

static int fail(struct sbx_error *e, const char *ptr, const char *what) {
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "%s: %s",
                       *ptr ? ptr : "/", what);
}

static int validate(json_t *s, json_t *v, char *ptr, size_t cap, unsigned depth,
                    struct sbx_error *e) {
  if (depth > SCHEMA_MAX_DEPTH)
    return fail(e, ptr, "value nests too deeply");
  if (json_is_true(s))
    return 0;
  if (json_is_false(s))
    return fail(e, ptr, "no value is allowed here");
  if (!json_is_object(s))
    return 0;
  json_t *t = json_object_get(s, "type");
  if (json_is_string(t) && !type_matches(json_string_value(t), v)) {
    char m[96];
    (void)snprintf(m, sizeof(m), "expected %s", json_string_value(t));
    return fail(e, ptr, m);
  }
  if (json_is_array(t)) {
    bool any = false;
    size_t i;
    json_t *x;
    json_array_foreach(t, i, x) any |=
        json_is_string(x) && type_matches(json_string_value(x), v);
    if (!any)
      return fail(e, ptr, "value has none of the allowed types");
  }
  json_t *en = json_object_get(s, "enum");
  if (json_is_array(en)) {
    bool any = false;
    size_t i;
    json_t *x;
    json_array_foreach(en, i, x) any |= json_equal(x, v);
    if (!any)
      return fail(e, ptr, "value is not one of the enum values");
  }
  json_t *cn = json_object_get(s, "const");
  if (cn && !json_equal(cn, v))
    return fail(e, ptr, "value differs from the schema's const");
  json_t *any_of = json_object_get(s, "anyOf");
  if (json_is_array(any_of)) {
    bool ok = false;
    size_t i;
    json_t *x;
    json_array_foreach(any_of, i, x) {
      if (validate(x, v, ptr, cap, depth + 1, NULL) == 0) {
        ok = true;
        break;
      }
    }
    if (!ok)
      return fail(e, ptr, "value matches none of anyOf");
  }
  if (json_is_number(v)) {
    double d = json_number_value(v);
    json_t *mn = json_object_get(s, "minimum"),
           *mx = json_object_get(s, "maximum");
    if (json_is_number(mn) && d < json_number_value(mn))
      return fail(e, ptr, "value is below the minimum");
    if (json_is_number(mx) && d > json_number_value(mx))
      return fail(e, ptr, "value is above the maximum");
  }
  if (json_is_string(v)) {
    json_t *mn = json_object_get(s, "minLength"),
           *mx = json_object_get(s, "maxLength");
    size_t chars = 0;
    for (const unsigned char *p = (const unsigned char *)json_string_value(v);
         *p; p++)
      chars += (*p & 0xc0) != 0x80;
    if (json_is_integer(mn) && (json_int_t)chars < json_integer_value(mn))
      return fail(e, ptr, "string is shorter than minLength");
    if (json_is_integer(mx) && (json_int_t)chars > json_integer_value(mx))
      return fail(e, ptr, "string is longer than maxLength");
  }
  size_t base = strlen(ptr);
  if (json_is_object(v)) {
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    size_t i;
    json_t *x;
    json_array_foreach(req, i, x) {
      if (json_is_string(x) && !json_object_get(v, json_string_value(x))) {
        char m[300];
        (void)snprintf(m, sizeof(m), "missing required property \"%.200s\"",
                       json_string_value(x));
        return fail(e, ptr, m);
      }
    }
    const char *k;
    json_object_foreach(v, k, x) {
      json_t *ps = json_is_object(props) ? json_object_get(props, k) : NULL;
      (void)snprintf(ptr + base, cap - base, "/%s", k);
      int r = 0;
      if (ps)
        r = validate(ps, x, ptr, cap, depth + 1, e);
      else if (json_is_false(addl))
        r = fail(e, ptr, "property is not allowed");
      else if (json_is_object(addl))
        r = validate(addl, x, ptr, cap, depth + 1, e);
      ptr[base] = '\0';
      if (r < 0)
        return r;
    }
  }
  if (json_is_array(v)) {
    json_t *items = json_object_get(s, "items");
    json_t *mn = json_object_get(s, "minItems"),
           *mx = json_object_get(s, "maxItems");
    if (json_is_integer(mn) &&
        (json_int_t)json_array_size(v) < json_integer_value(mn))
      return fail(e, ptr, "array has fewer items than minItems");
    if (json_is_integer(mx) &&
        (json_int_t)json_array_size(v) > json_integer_value(mx))
      return fail(e, ptr, "array has more items than maxItems");
    if (items) {
      size_t i;
      json_t *x;
      json_array_foreach(v, i, x) {
        (void)snprintf(ptr + base, cap - base, "/%zu", i);
        int r = validate(items, x, ptr, cap, depth + 1, e);
        ptr[base] = '\0';
        if (r < 0)
          return r;
      }
    }
  }
  return 0;
}

int schema_validate(json_t *schema, json_t *value, struct sbx_error *e) {
  char ptr[1024] = "";
  return validate(schema, value, ptr, sizeof(ptr), 0, e);
}

bool schema_output_wrapped(json_t *output_type) {
  const char *type = json_string_value(json_object_get(output_type, "type"));
  return !type || strcmp(type, "object") != 0;
}

json_t *schema_output_for_model(json_t *output_type) {
  if (!schema_output_wrapped(output_type))
    return json_incref(output_type);
  return json_pack("{s:s, s:{s:O}, s:[s], s:b}", "type", "object", "properties",
                   SCHEMA_OUTPUT_KEY, output_type, "required",
                   SCHEMA_OUTPUT_KEY, "additionalProperties", 0);
}
