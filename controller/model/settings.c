/* What model settings mean beyond one API's body: the SDK's defaults per
 * model (defaultModel.js in @openai/agents-core 0.20.0), and the request
 * URL and headers that extra_query and extra_headers add. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/model/model_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"

/* True when NAME is BASE, or with ANY_DATE BASE-YYYY-MM-DD. */
static bool name_is(const char *name, const char *base, bool any_date) {
  size_t n = strlen(base);
  if (strncmp(name, base, n) != 0)
    return false;
  const char *d = name + n;
  if (!*d)
    return true;
  if (!any_date || strlen(d) != 11)
    return false;
  static const char shape[] = "-dddd-dd-dd";
  for (size_t i = 0; i < 11; i++)
    if (shape[i] == 'd' ? !(d[i] >= '0' && d[i] <= '9') : d[i] != '-')
      return false;
  return true;
}

/* The SDK's chat aliases, which take no reasoning settings. */
static bool chat_alias(const char *model) {
  static const char *const aliases[] = {
      "gpt-5-chat-latest", "gpt-5.1-chat-latest", "gpt-5.2-chat-latest",
      "gpt-5.3-chat-latest"};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(aliases); i++)
    if (strcmp(model, aliases[i]) == 0)
      return true;
  return false;
}

/* GPT-5 and newer, the SDK's "reasoning family": gpt-N[.M] with N >= 5,
 * followed by "-" or nothing, chat aliases excepted. */
static bool reasoning_family(const char *model) {
  if (strncmp(model, "gpt-", 4) != 0 || chat_alias(model))
    return false;
  const char *p = model + 4;
  unsigned long v = 0;
  size_t digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 6; p++, digits++)
    v = v * 10 + (unsigned long)(*p - '0');
  if (!digits)
    return false;
  if (*p == '.') {
    const char *q = ++p;
    while (*p >= '0' && *p <= '9')
      p++;
    if (p == q)
      return false;
  }
  return (*p == '\0' || *p == '-') && v >= 5;
}

json_t *model_default_settings(const char *model) {
  static const struct {
    const char *name;
    bool any_date; /* also NAME-YYYY-MM-DD */
    const char *effort;
  } efforts[] = {
      {"gpt-6-astra", false, "low"},    {"gpt-5", true, "low"},
      {"gpt-5.1", true, "none"},        {"gpt-5.2", true, "none"},
      {"gpt-5.2-pro", true, "medium"},  {"gpt-5.2-codex", false, "low"},
      {"gpt-5.3-codex", false, "none"}, {"gpt-5.4", true, "none"},
      {"gpt-5.4-pro", true, "medium"},  {"gpt-5.4-mini", true, "none"},
      {"gpt-5.4-nano", true, "none"},   {"gpt-5.5", true, "none"},
      {"gpt-5.6", false, "none"},       {"gpt-5.6-sol", true, "none"},
      {"gpt-5.6-terra", true, "none"},  {"gpt-5.6-luna", true, "none"},
  };
  if (!model || !reasoning_family(model))
    return json_object();
  for (size_t i = 0; i < SBX_ARRAY_SIZE(efforts); i++)
    if (name_is(model, efforts[i].name, efforts[i].any_date))
      return json_pack("{s:{s:s}, s:s}", "reasoning", "effort",
                       efforts[i].effort, "verbosity", "low");
  /* The family's verbosity, without an effort not known to be taken. */
  return json_pack("{s:s}", "verbosity", "low");
}

/* Appends S to B percent-encoded as a query component (RFC 3986
 * unreserved characters kept). */
static int append_encoded(struct sbx_buf *b, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char enc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
    bool keep = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                (*p >= '0' && *p <= '9') || strchr("-._~", *p);
    int r = keep ? sbx_buf_append(b, (const char *)p, 1)
                 : sbx_buf_append(b, enc, 3);
    if (r < 0)
      return r;
  }
  return 0;
}

char *model_settings_url(const char *url, json_t *settings) {
  json_t *q = json_object_get(settings, "extra_query");
  /* An agent file allows 256 members of 256-byte names and 4096-byte
   * values, three bytes each when encoded: well under 8 MiB. */
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 8u << 20);
  if (sbx_buf_append_str(&b, url) < 0)
    return NULL;
  bool first = !strchr(url, '?');
  const char *k;
  json_t *v;
  json_object_foreach(q, k, v) {
    char num[64];
    const char *s = json_string_value(v);
    if (json_is_boolean(v)) {
      s = json_is_true(v) ? "true" : "false";
    } else if (json_is_integer(v)) {
      (void)snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
                     json_integer_value(v));
      s = num;
    } else if (json_is_real(v)) {
      (void)snprintf(num, sizeof(num), "%.17g", json_real_value(v));
      s = num;
    }
    if (!s)
      continue; /* the agent loader lets nothing else through */
    if (sbx_buf_append(&b, first ? "?" : "&", 1) < 0 ||
        append_encoded(&b, k) < 0 || sbx_buf_append(&b, "=", 1) < 0 ||
        append_encoded(&b, s) < 0)
      return NULL;
    first = false;
  }
  return sbx_buf_steal(&b, NULL);
}

int model_settings_headers(json_t *settings, char **out, size_t max,
                           size_t *n) {
  *n = 0;
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(settings, "extra_headers"), k, v) {
    const char *s = json_string_value(v);
    if (!s)
      continue;
    if (*n == max)
      return -E2BIG;
    size_t len = strlen(k) + strlen(s) + 3;
    char *line = malloc(len);
    if (!line)
      return -ENOMEM;
    (void)snprintf(line, len, "%s: %s", k, s);
    out[(*n)++] = line;
  }
  return 0;
}
