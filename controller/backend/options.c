/* Backend options as JSON: the checks every backend's options_parse starts
 * with (known keys, their types), and a CLI flag's text as an option's
 * value, and the heartbeat a backend records with a sandbox. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "controller/backend/backend.h"
#include "shared/cleanup.h"
#include "shared/json.h"
#include "shared/peer.h"

static const char *type_name(enum backend_option_type t) {
  static const char *const names[] = {
      [BACKEND_OPTION_STRING] = "a string",
      [BACKEND_OPTION_INTEGER] = "an integer",
      [BACKEND_OPTION_NUMBER] = "a number",
      [BACKEND_OPTION_BOOLEAN] = "true or false",
      [BACKEND_OPTION_JSON] = "an array or an object",
      [BACKEND_OPTION_STRING_MAP] = "an object of strings",
  };
  return names[t];
}

static bool of_type(enum backend_option_type t, json_t *v) {
  switch (t) {
  case BACKEND_OPTION_STRING:
    return json_is_string(v);
  case BACKEND_OPTION_INTEGER:
    return json_is_integer(v);
  case BACKEND_OPTION_NUMBER:
    return json_is_number(v);
  case BACKEND_OPTION_BOOLEAN:
    return json_is_boolean(v);
  case BACKEND_OPTION_JSON:
    return json_is_array(v) || json_is_object(v);
  case BACKEND_OPTION_STRING_MAP:
    return json_is_object(v);
  }
  return false;
}

const struct backend_option *backend_option_find(const struct backend *b,
                                                 const char *key) {
  for (const struct backend_option *o = b->options; o && o->key; o++)
    if (strcmp(o->key, key) == 0)
      return o;
  return NULL;
}

int backend_options_check(const struct backend *b, json_t *obj,
                          const char *where, struct sbx_error *e) {
  const char *dot = where ? "." : "";
  where = where ? where : "";
  if (!obj)
    return 0;
  if (!json_is_object(obj))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the options of backend %s must be an object",
                         b->name);
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    const struct backend_option *o = backend_option_find(b, k);
    if (!o)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "\"%s%s%s\": backend %s has no such option", where,
                           dot, k, b->name);
    if (!of_type(o->type, v))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "\"%s%s%s\" must be %s (got %s)", where, dot, k,
                           type_name(o->type), sbx_json_kind(v, false));
  }
  return 0;
}

/* Whether the string V is one of ALLOWED's '|'-separated values. */
static bool api_allows(const char *allowed, json_t *v) {
  const char *s = json_string_value(v);
  size_t n = s ? strlen(s) : 0;
  for (const char *p = allowed; s && *p;) {
    const char *end = strchr(p, '|');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, s, n) == 0)
      return true;
    p = end ? end + 1 : p + len;
  }
  return false;
}

int backend_options_check_api(const struct backend *b, json_t *obj,
                              const char *where, struct sbx_error *e) {
  const char *k;
  json_t *v;
  const char *dot = *where ? "." : "";
  json_object_foreach(obj, k, v) {
    const struct backend_option *o = backend_option_find(b, k);
    if (!o || !o->api)
      continue;
    if (!*o->api)
      return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                           "\"%s%s%s\" reaches the server's own host; only "
                           "its operator's configuration may set it, not a "
                           "request",
                           where, dot, k);
    if (!api_allows(o->api, v))
      return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                           "\"%s%s%s\" may be only %s in a request to the "
                           "server",
                           where, dot, k, o->api);
  }
  return 0;
}

int backend_option_value(const struct backend_option *opt, const char *text,
                         json_t **out, struct sbx_error *e) {
  char *end = NULL;
  errno = 0;
  switch (opt->type) {
  case BACKEND_OPTION_STRING:
    *out = json_string(text);
    break;
  case BACKEND_OPTION_INTEGER: {
    long long v = strtoll(text, &end, 10);
    if (errno || !*text || *end)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "--%s \"%s\": expected an integer", opt->flag, text);
    *out = json_integer(v);
    break;
  }
  case BACKEND_OPTION_NUMBER: {
    double v = strtod(text, &end);
    if (errno || !*text || *end || !isfinite(v))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "--%s \"%s\": expected a number", opt->flag, text);
    *out = json_real(v);
    break;
  }
  case BACKEND_OPTION_BOOLEAN:
    *out = json_true();
    break;
  case BACKEND_OPTION_JSON: {
    if (!opt->flag_element)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "option \"%s\" has no command-line flag", opt->key);
    json_t *el = NULL;
    struct sbx_error fe = {0};
    if (opt->flag_element(text, &el, &fe) < 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "--%s \"%s\": %s",
                           opt->flag, text, fe.msg);
    *out = json_array();
    if (!*out || json_array_append_new(*out, el) < 0) {
      json_decref(*out);
      *out = NULL;
    }
    break;
  }
  case BACKEND_OPTION_STRING_MAP: {
    const char *eq = strchr(text, '=');
    if (!eq || eq == text)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "--%s \"%s\": expected NAME=VALUE", opt->flag, text);
    *out = json_object();
    _cleanup_free_ char *name = strndup(text, (size_t)(eq - text));
    json_t *s = json_string(eq + 1);
    if (!*out || !name || !s || json_object_set_new(*out, name, s) < 0) {
      json_decref(*out);
      *out = NULL;
    }
    break;
  }
  }
  if (!*out)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--%s: the value must be UTF-8", opt->flag);
  return 0;
}

int backend_option_text_value(const struct backend_option *opt,
                              const char *value, json_t **out,
                              struct sbx_error *e) {
  *out = NULL;
  if (opt->type == BACKEND_OPTION_BOOLEAN) {
    if (!value || strcmp(value, "true") == 0)
      *out = json_true();
    else if (strcmp(value, "false") == 0)
      *out = json_false();
    else
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "-o %s=%s: expected true or false", opt->key, value);
    return 0;
  }
  if (!value)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "-o %s: expected %s=VALUE", opt->key, opt->key);
  if (opt->type != BACKEND_OPTION_STRING) {
    json_error_t je;
    *out = json_loads(value, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!*out && (value[0] == '{' || value[0] == '['))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "-o %s: the value is not JSON: %s", opt->key,
                           je.text);
  }
  if (!*out)
    *out = json_string(value);
  if (!*out)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "-o %s: the value must be UTF-8", opt->key);
  return 0;
}

int backend_options_parse(const struct backend *b, json_t *obj,
                          const char *where, void **own, struct sbx_error *e) {
  *own = NULL;
  int r = backend_options_check(b, obj, where, e);
  if (r < 0 || !b->options_parse)
    return r;
  return b->options_parse(obj, where, own, e);
}

void backend_options_free(const struct backend *b, void *own) {
  if (own && b->options_free)
    b->options_free(own);
}

unsigned backend_heartbeat(const struct backend_options *bo, json_t *saved) {
  if (bo && bo->heartbeat_ms)
    return bo->heartbeat_ms;
  json_int_t v = json_integer_value(json_object_get(saved, "heartbeat_ms"));
  return v > 0 && v <= SBX_PEER_HEARTBEAT_MAX_MS ? (unsigned)v : 0;
}

int backend_heartbeat_save(unsigned heartbeat_ms, json_t *saved) {
  if (!heartbeat_ms)
    return 0;
  return json_object_set_new(saved, "heartbeat_ms",
                             json_integer(heartbeat_ms)) < 0
             ? -ENOMEM
             : 0;
}

int backend_option_bad(struct sbx_error *e, const char *where, const char *key,
                       const char *fmt, ...) {
  char msg[700];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "%s%s%s: %s",
                       where ? where : "", where ? "." : "", key, msg);
}
