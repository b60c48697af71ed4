/* "input_guardrails" and "output_guardrails": the SDK's guardrails, each a
 * check that may stop the run (its tripwire), written as
 *
 *   {"name": "no_pii", "agent": "guards/pii.json"}
 *   {"name": "policy", "command": ["./check-output"], "timeout_s": 10}
 *
 * A guard agent is loaded with the set (agent.c follows "agent" as it
 * follows handoffs); a command is a program on the controller's host, as a
 * command tool's is. The runner (controller/run/guardrails.c) runs them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/agent_internal.h"
#include "shared/cleanup.h"

#define GUARDRAIL_DEFAULT_TIMEOUT_S 60

static int parse_one(const struct agent_ctx *c, struct agent_guardrail *g,
                     const char *key, json_t *v) {
  char k[KEY_MAX];
  const char *sub;
  json_t *item;
  if (!json_is_object(v))
    return agent_wrong_type(c, key, "an object", v);
  g->timeout_s = GUARDRAIL_DEFAULT_TIMEOUT_S;
  json_object_foreach(v, sub, item) {
    agent_key_path(k, "%s.%.64s", key, sub);
    if (json_is_null(item))
      continue;
    int r = 0;
    if (strcmp(sub, "name") == 0) {
      if (!json_is_string(item) ||
          !agent_valid_tool_name(json_string_value(item)))
        return agent_invalid(c,
                             "\"%s\" must be a name of 1 to 64 letters, "
                             "digits, \"_\" or \"-\"",
                             k);
      free(g->name);
      r = (g->name = strdup(json_string_value(item))) ? 0 : agent_nomem(c);
    } else if (strcmp(sub, "agent") == 0) {
      if (!json_is_string(item) || json_string_length(item) == 0)
        return agent_wrong_type(c, k, "a path string", item);
      free(g->agent_path);
      g->agent_path = strdup(json_string_value(item));
      r = g->agent_path ? 0 : agent_nomem(c);
    } else if (strcmp(sub, "command") == 0) {
      r = agent_get_program(c, k, item, &g->argv, &g->dir);
    } else if (strcmp(sub, "timeout_s") == 0) {
      r = agent_get_timeout(c, k, item, &g->timeout_s);
    } else {
      return agent_invalid(c,
                           "unknown key \"%s\" (a guardrail has \"name\", "
                           "and \"agent\" or \"command\" with "
                           "\"timeout_s\")",
                           k);
    }
    if (r < 0)
      return r;
  }
  if (!g->name)
    return agent_invalid(c, "missing required key \"%s.name\"", key);
  if (!g->agent_path == !g->argv)
    return agent_invalid(c,
                         "\"%s\" must have either \"agent\" (a guard agent "
                         "file) or \"command\" (a program), not %s",
                         key, g->argv ? "both" : "neither");
  json_t *t = json_object_get(v, "timeout_s");
  if (g->agent_path && t && !json_is_null(t))
    return agent_invalid(c,
                         "\"%s.timeout_s\" is not supported for a guard "
                         "agent: it is a command's; a guard agent's run is "
                         "bounded by its max_turns",
                         key);
  return 0;
}

int agent_parse_guardrails(const struct agent_ctx *c, struct agent *a,
                           const char *key, json_t *v) {
  bool input = strcmp(key, "input_guardrails") == 0;
  struct agent_guardrail **list =
      input ? &a->input_guardrails : &a->output_guardrails;
  size_t *n = input ? &a->ninput_guardrails : &a->noutput_guardrails;
  char k[KEY_MAX];
  if (!json_is_array(v))
    return agent_wrong_type(c, key, "an array of guardrail objects", v);
  if (json_array_size(v) > AGENT_MAX_LIST)
    return agent_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "\"%s\" has more than %d entries", key, AGENT_MAX_LIST);
  if (json_array_size(v) == 0)
    return 0;
  *list = calloc(json_array_size(v), sizeof(**list));
  if (!*list)
    return agent_nomem(c);
  size_t i;
  json_t *item;
  json_array_foreach(v, i, item) {
    agent_key_path(k, "%s[%zu]", key, i);
    struct agent_guardrail *g = &(*list)[(*n)++];
    int r = parse_one(c, g, k, item);
    if (r < 0)
      return r;
    for (size_t j = 0; j < i; j++)
      if (strcmp((*list)[j].name, g->name) == 0)
        return agent_invalid(c, "\"%s.name\" repeats \"%s\" of \"%s[%zu]\"", k,
                             g->name, key, j);
  }
  return 0;
}

static void free_list(struct agent_guardrail *l, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(l[i].name);
    free(l[i].agent_path);
    agent_strv_free(l[i].argv);
    free(l[i].dir);
  }
  free(l);
}

void agent_guardrails_free(struct agent *a) {
  free_list(a->input_guardrails, a->ninput_guardrails);
  free_list(a->output_guardrails, a->noutput_guardrails);
}
