#include "controller/run/approvals.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/cleanup.h"

/* True when CMD starts with PREFIX followed by the end or a blank. */
static bool has_prefix(const char *cmd, const char *prefix) {
  size_t n = strlen(prefix);
  while (n > 0 && (prefix[n - 1] == ' ' || prefix[n - 1] == '\t'))
    n--;
  if (n == 0 || strncmp(cmd, prefix, n) != 0)
    return false;
  return cmd[n] == '\0' || cmd[n] == ' ' || cmd[n] == '\t';
}

static bool chains_commands(const char *cmd) {
  return strpbrk(cmd, ";&|`<>\n\r") != NULL || strstr(cmd, "$(") != NULL;
}

bool approvals_needed(const struct agent *a, const char *tool,
                      const char *args) {
  const struct agent_approval *ap = agent_find_approval(a, tool);
  if (!ap)
    return false;
  switch (ap->mode) {
  case AGENT_APPROVAL_ALWAYS:
    return true;
  case AGENT_APPROVAL_NEVER:
    return false;
  case AGENT_APPROVAL_PREFIXES:
    break;
  }
  json_error_t je;
  _cleanup_json_ json_t *j = json_loads(args ? args : "", 0, &je);
  const char *cmd = json_string_value(json_object_get(j, "cmd"));
  if (!cmd)
    return true;
  while (*cmd == ' ' || *cmd == '\t')
    cmd++;
  if (chains_commands(cmd))
    return true;
  for (size_t i = 0; i < ap->nprefixes; i++)
    if (has_prefix(cmd, ap->prefixes[i]))
      return false;
  return true;
}

char *approvals_rejection_text(const char *reason) {
  const char *r = reason && *reason ? reason : "no reason given";
  size_t n = strlen(r) + 64;
  char *s = malloc(n);
  if (s)
    (void)snprintf(s, n, "The user rejected this tool call: %s", r);
  return s;
}
