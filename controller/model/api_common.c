/* What both model APIs read and write alike: the tool_choice keywords,
 * API error objects, integers of a reply, and the model_response they
 * fill. Used by responses.c, chat.c and model.c; it depends on neither
 * API. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "controller/model/model_internal.h"

bool model_tool_choice_is_keyword(const char *s) {
  return strcmp(s, "auto") == 0 || strcmp(s, "required") == 0 ||
         strcmp(s, "none") == 0;
}

/* "error from URL: <message>" for the API error object J. */
int model_error_from(json_t *j, const char *url, struct sbx_error *e) {
  const char *msg = model_error_message(j);
  return sbx_error_set(e, SBX_UNAVAILABLE, EIO, "error from %s: %s", url,
                       msg ? msg : "no message given");
}

int model_reply_check(json_t *reply, const char *url, struct sbx_error *e) {
  if (!json_is_object(reply))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "unexpected reply from %s: not a JSON object", url);
  json_t *err = json_object_get(reply, "error");
  if (err && !json_is_null(err))
    return model_error_from(reply, url, e);
  return 0;
}

const char *model_error_message(json_t *j) {
  json_t *err = json_object_get(j, "error");
  const char *m = json_string_value(json_object_get(err, "message"));
  if (m && m[0])
    return m;
  if (json_is_string(err) && json_string_length(err))
    return json_string_value(err);
  m = json_string_value(json_object_get(j, "message"));
  if (m && m[0])
    return m;
  m = json_string_value(json_object_get(j, "detail"));
  return m && m[0] ? m : NULL;
}

long long model_json_int(json_t *j, const char *key) {
  json_t *v = json_object_get(j, key);
  if (json_is_integer(v))
    return json_integer_value(v);
  if (json_is_real(v)) {
    /* A model server's number may be any double: past the range of long
     * long the cast is undefined, so it is clamped. */
    double d = json_real_value(v);
    if (d >= (double)LLONG_MAX)
      return LLONG_MAX;
    if (d <= (double)LLONG_MIN)
      return LLONG_MIN;
    return d == d ? (long long)d : 0;
  }
  return 0;
}

long long model_json_count(json_t *j, const char *key) {
  long long n = model_json_int(j, key);
  return n < 0 ? 0 : n > MODEL_COUNT_MAX ? MODEL_COUNT_MAX : n;
}

void model_response_clear(struct model_response *r) {
  if (!r)
    return;
  json_decref(r->output);
  free(r->id);
  memset(r, 0, sizeof(*r));
}
