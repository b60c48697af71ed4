/* An agent file's "model_settings": the Python SDK's ModelSettings, each
 * key checked by its entry in one table that also says which model APIs
 * can carry it. A key the agent's API cannot carry is refused saying so,
 * so that nothing is accepted that does nothing; SDK keys sbx does not
 * offer are refused with what to use instead. The wire names each key
 * becomes are the model clients' business (controller/model/). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/agent_internal.h"
#include "shared/cleanup.h"
#include "shared/json.h"

#define TOOL_NAME_MAX 64
#define SETTING_STRING_MAX 4096 /* a header, query or metadata value */

enum {
  ON_RESPONSES = 1u << AGENT_API_RESPONSES,
  ON_CHAT = 1u << AGENT_API_CHAT_COMPLETIONS,
  ON_BOTH = ON_RESPONSES | ON_CHAT,
};

typedef int (*check_fn)(const struct agent_ctx *c, const char *key, json_t *v);

/* A number within [LO, HI]. */
static int check_range(const struct agent_ctx *c, const char *key, json_t *v,
                       double lo, double hi) {
  if (!json_is_number(v))
    return agent_wrong_type(c, key, "a number", v);
  double d = json_number_value(v);
  if (!(d >= lo && d <= hi))
    return agent_invalid(c, "\"%s\" must be between %g and %g (got %g)", key,
                         lo, hi, d);
  return 0;
}

static int check_temperature(const struct agent_ctx *c, const char *key,
                             json_t *v) {
  return check_range(c, key, v, 0, 2);
}

static int check_top_p(const struct agent_ctx *c, const char *key, json_t *v) {
  return check_range(c, key, v, 0, 1);
}

static int check_penalty(const struct agent_ctx *c, const char *key,
                         json_t *v) {
  return check_range(c, key, v, -2, 2);
}

static int check_bool(const struct agent_ctx *c, const char *key, json_t *v) {
  return json_is_boolean(v) ? 0 : agent_wrong_type(c, key, "a boolean", v);
}

/* An integer within [LO, HI]. */
static int check_int(const struct agent_ctx *c, const char *key, json_t *v,
                     json_int_t lo, json_int_t hi) {
  if (!json_is_integer(v))
    return agent_wrong_type(c, key, "an integer", v);
  json_int_t n = json_integer_value(v);
  if (n < lo || n > hi)
    return agent_invalid(c,
                         "\"%s\" must be between %" JSON_INTEGER_FORMAT
                         " and %" JSON_INTEGER_FORMAT
                         " (got %" JSON_INTEGER_FORMAT ")",
                         key, lo, hi, n);
  return 0;
}

static int check_max_tokens(const struct agent_ctx *c, const char *key,
                            json_t *v) {
  return check_int(c, key, v, 1, INT32_MAX);
}

static int check_top_logprobs(const struct agent_ctx *c, const char *key,
                              json_t *v) {
  return check_int(c, key, v, 0, 20);
}

/* A string among CHOICES (NULL-terminated), said as WORDS. */
static int check_enum(const struct agent_ctx *c, const char *key, json_t *v,
                      const char *const *choices, const char *words) {
  if (!json_is_string(v))
    return agent_wrong_type(c, key, words, v);
  for (const char *const *p = choices; *p; p++)
    if (strcmp(json_string_value(v), *p) == 0)
      return 0;
  return agent_invalid(c, "\"%s\" must be %s (got \"%.64s\")", key, words,
                       json_string_value(v));
}

static int check_truncation(const struct agent_ctx *c, const char *key,
                            json_t *v) {
  static const char *const ch[] = {"auto", "disabled", NULL};
  return check_enum(c, key, v, ch, "\"auto\" or \"disabled\"");
}

static int check_verbosity(const struct agent_ctx *c, const char *key,
                           json_t *v) {
  static const char *const ch[] = {"low", "medium", "high", NULL};
  return check_enum(c, key, v, ch, "\"low\", \"medium\" or \"high\"");
}

static int check_retention(const struct agent_ctx *c, const char *key,
                           json_t *v) {
  static const char *const ch[] = {"in_memory", "24h", NULL};
  return check_enum(c, key, v, ch, "\"in_memory\" or \"24h\"");
}

static int check_tool_choice(const struct agent_ctx *c, const char *key,
                             json_t *v) {
  if (!json_is_string(v))
    return agent_wrong_type(
        c, key, "\"auto\", \"required\", \"none\" or a tool name", v);
  if (!agent_valid_tool_name(json_string_value(v)))
    return agent_invalid(
        c,
        "\"%s\" must be \"auto\", \"required\", \"none\" or a tool name of "
        "at most %d letters, digits, \"_\" or \"-\" (got \"%.64s\")",
        key, TOOL_NAME_MAX, json_string_value(v));
  return 0;
}

/* {"effort"?, "summary"?}, the openai Reasoning type. */
static int check_reasoning(const struct agent_ctx *c, const char *key,
                           json_t *v) {
  static const char *const efforts[] = {"none", "minimal", "low", "medium",
                                        "high", "xhigh",   NULL};
  static const char *const summaries[] = {"auto", "concise", "detailed", NULL};
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  const char *sub;
  json_t *item;
  json_object_foreach(v, sub, item) {
    char k[KEY_MAX];
    (void)snprintf(k, sizeof(k), "%s.%.64s", key, sub);
    int r;
    if (json_is_null(item))
      continue;
    if (strcmp(sub, "effort") == 0)
      r = check_enum(c, k, item, efforts,
                     "\"none\", \"minimal\", \"low\", \"medium\", \"high\" or "
                     "\"xhigh\"");
    else if (strcmp(sub, "summary") == 0)
      r = check_enum(c, k, item, summaries,
                     "\"auto\", \"concise\" or \"detailed\"");
    else
      r = agent_invalid(c, "unknown key \"%s\"", k);
    if (r < 0)
      return r;
  }
  return 0;
}

/* A string without control characters, at most SETTING_STRING_MAX bytes:
 * it may end up in a header line or a URL. */
static int check_plain_string(const struct agent_ctx *c, const char *key,
                              json_t *v) {
  if (!json_is_string(v))
    return agent_wrong_type(c, key, "a string", v);
  if (json_string_length(v) > SETTING_STRING_MAX)
    return agent_invalid(c, "\"%s\" is longer than %d bytes", key,
                         SETTING_STRING_MAX);
  for (const unsigned char *p = (const unsigned char *)json_string_value(v); *p;
       p++)
    if (*p < 0x20 || *p == 0x7f)
      return agent_invalid(c, "\"%s\" must not hold control characters", key);
  return 0;
}

/* An object of at most AGENT_MAX_LIST members, each checked by EACH;
 * NAME_OK says which member names are fine (NULL: any). */
static int check_map(const struct agent_ctx *c, const char *key, json_t *v,
                     check_fn each, bool (*name_ok)(const char *),
                     const char *names) {
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  if (json_object_size(v) > AGENT_MAX_LIST)
    return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "\"%s\" has more than %d entries", key, AGENT_MAX_LIST);
  const char *sub;
  json_t *item;
  json_object_foreach(v, sub, item) {
    char k[KEY_MAX];
    (void)snprintf(k, sizeof(k), "%s.%.64s", key, sub);
    if (name_ok && !name_ok(sub))
      return agent_invalid(c, "\"%s\": the name must be %s", k, names);
    int r = each ? each(c, k, item) : 0;
    if (r < 0)
      return r;
  }
  return 0;
}

/* An HTTP header name: an RFC 9110 token. */
static bool header_name_ok(const char *s) {
  if (!*s || strlen(s) > 256)
    return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
          (*s >= '0' && *s <= '9') || strchr("!#$%&'*+-.^_`|~", *s)))
      return false;
  return true;
}

static bool query_name_ok(const char *s) {
  return *s && strlen(s) <= 256;
}

/* A query value: a plain string, a number or a boolean. */
static int check_query_value(const struct agent_ctx *c, const char *key,
                             json_t *v) {
  if (json_is_number(v) || json_is_boolean(v))
    return 0;
  return json_is_string(v)
             ? check_plain_string(c, key, v)
             : agent_wrong_type(c, key, "a string, number or boolean", v);
}

static int check_metadata(const struct agent_ctx *c, const char *key,
                          json_t *v) {
  return check_map(c, key, v, check_plain_string, NULL, NULL);
}

static int check_headers(const struct agent_ctx *c, const char *key,
                         json_t *v) {
  return check_map(c, key, v, check_plain_string, header_name_ok,
                   "an HTTP header name");
}

static int check_query(const struct agent_ctx *c, const char *key, json_t *v) {
  return check_map(c, key, v, check_query_value, query_name_ok,
                   "1 to 256 bytes");
}

static int check_body(const struct agent_ctx *c, const char *key, json_t *v) {
  return check_map(c, key, v, NULL, NULL, NULL);
}

static int check_include(const struct agent_ctx *c, const char *key,
                         json_t *v) {
  if (!json_is_array(v))
    return agent_wrong_type(c, key, "an array of strings", v);
  if (json_array_size(v) > AGENT_MAX_LIST)
    return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "\"%s\" has more than %d entries", key, AGENT_MAX_LIST);
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    char k[KEY_MAX];
    (void)snprintf(k, sizeof(k), "%s[%zu]", key, i);
    int r = check_plain_string(c, k, item);
    if (r < 0)
      return r;
  }
  return 0;
}

/* The keys, under the Python SDK's names; APIS says where each can go
 * (controller/model/ maps them onto each API's wire names). */
static const struct setting {
  const char *key;
  check_fn check;
  unsigned apis;
} settings[] = {
    {"temperature", check_temperature, ON_BOTH},
    {"top_p", check_top_p, ON_BOTH},
    {"frequency_penalty", check_penalty, ON_CHAT},
    {"presence_penalty", check_penalty, ON_CHAT},
    {"tool_choice", check_tool_choice, ON_BOTH},
    {"parallel_tool_calls", check_bool, ON_BOTH},
    {"truncation", check_truncation, ON_RESPONSES},
    {"max_tokens", check_max_tokens, ON_BOTH},
    {"reasoning", check_reasoning, ON_BOTH},
    {"verbosity", check_verbosity, ON_BOTH},
    {"metadata", check_metadata, ON_BOTH},
    {"store", check_bool, ON_BOTH},
    {"prompt_cache_retention", check_retention, ON_BOTH},
    {"include_usage", check_bool, ON_CHAT},
    {"response_include", check_include, ON_RESPONSES},
    {"top_logprobs", check_top_logprobs, ON_BOTH},
    {"extra_query", check_query, ON_BOTH},
    {"extra_body", check_body, ON_BOTH},
    {"extra_headers", check_headers, ON_BOTH},
};

/* SDK keys sbx does not take, and what serves instead. */
static const struct {
  const char *key;
  const char *instead;
} not_offered[] = {
    {"max_output_tokens", "the SDK's name is \"max_tokens\""},
    {"reasoning_effort", "the SDK's name is \"reasoning\": {\"effort\": ...}"},
    {"extra_args", "use \"extra_body\""},
    {"retry", "sbx retries model calls itself (--model-timeouts)"},
    {"timeout", "use --model-timeouts"},
    {"context_management", "the compaction capability sets it"},
    {"prompt_cache_options", "use \"extra_body\""},
    {"preserve_raw_usage", "sbx does not keep raw usage"},
};

static const char *const api_names[] = {
    [AGENT_API_RESPONSES] = "responses",
    [AGENT_API_CHAT_COMPLETIONS] = "chat_completions",
};

int agent_parse_model_settings(const struct agent_ctx *c, struct agent *a,
                               const char *key, json_t *v) {
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  _cleanup_json_ json_t *kept = json_object();
  if (!kept)
    return agent_nomem(c);
  const char *sub;
  json_t *item;
  json_object_foreach(v, sub, item) {
    char k[KEY_MAX];
    (void)snprintf(k, sizeof(k), "%s.%.64s", key, sub);
    const struct setting *s = NULL;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(settings) && !s; i++)
      if (strcmp(sub, settings[i].key) == 0)
        s = &settings[i];
    if (!s) {
      for (size_t i = 0; i < SBX_ARRAY_SIZE(not_offered); i++)
        if (strcmp(sub, not_offered[i].key) == 0)
          return agent_invalid(c, "unknown key \"%s\" (%s)", k,
                               not_offered[i].instead);
      return agent_invalid(c, "unknown key \"%s\"", k);
    }
    if (json_is_null(item))
      continue;
    int r = s->check(c, k, item);
    if (r < 0)
      return r;
    if (json_object_set(kept, sub, item) < 0)
      return agent_nomem(c);
  }
  json_decref(a->model_settings);
  a->model_settings = TAKE_PTR(kept);
  return 0;
}

int agent_check_model_settings(const struct agent_ctx *c,
                               const struct agent *a) {
  const char *api = api_names[a->api];
  for (size_t i = 0; i < SBX_ARRAY_SIZE(settings); i++)
    if (json_object_get(a->model_settings, settings[i].key) &&
        !(settings[i].apis & (1u << a->api)))
      return agent_invalid(
          c,
          "\"model_settings.%s\" cannot be sent to the %s API (\"api\": "
          "\"%s\")",
          settings[i].key, api, api);
  if (a->prompt && a->api == AGENT_API_CHAT_COMPLETIONS)
    return agent_invalid(c,
                         "\"prompt\": reusable prompts are only supported by "
                         "the Responses API (\"api\": \"%s\")",
                         api);
  json_t *summary = json_object_get(
      json_object_get(a->model_settings, "reasoning"), "summary");
  if (summary && !json_is_null(summary) && a->api == AGENT_API_CHAT_COMPLETIONS)
    return agent_invalid(c,
                         "\"model_settings.reasoning.summary\" cannot be sent "
                         "to the %s API (\"api\": \"%s\"): it takes only "
                         "reasoning.effort",
                         api, api);
  return 0;
}
