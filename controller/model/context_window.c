/* The context windows of known models, for compaction: the threshold the
 * runner asks the server to compact at is 0.9 of the window. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "controller/model/model.h"

/* Cuts a "-YYYY-MM-DD" suffix off NAME ("gpt-4o-2024-08-06"); false when
 * it has none. */
static bool cut_date(char *name) {
  static const char shape[] = "-dddd-dd-dd";
  size_t n = strlen(name), k = sizeof(shape) - 1;
  if (n <= k)
    return false;
  char *s = name + n - k;
  for (size_t i = 0; i < k; i++)
    if (shape[i] == '-' ? s[i] != '-' : s[i] < '0' || s[i] > '9')
      return false;
  *s = '\0';
  return true;
}

long long model_compaction_threshold(const char *model) {
  static const struct {
    const char *name;
    long long window;
  } table[] = {
      {"gpt-5.6", 1047576},
      {"gpt-5.6-sol", 1047576},
      {"gpt-5.6-terra", 1047576},
      {"gpt-5.6-luna", 1047576},
      {"gpt-5.4", 1047576},
      {"gpt-5.4-pro", 1047576},
      {"gpt-4.1", 1047576},
      {"gpt-4.1-mini", 1047576},
      {"gpt-4.1-nano", 1047576},
      {"gpt-5", 400000},
      {"gpt-5-codex", 400000},
      {"gpt-5-mini", 400000},
      {"gpt-5-nano", 400000},
      {"gpt-5-pro", 400000},
      {"gpt-5.1", 400000},
      {"gpt-5.1-codex", 400000},
      {"gpt-5.1-codex-max", 400000},
      {"gpt-5.1-codex-mini", 400000},
      {"gpt-5.2", 400000},
      {"gpt-5.2-codex", 400000},
      {"gpt-5.2-codex-cyber", 400000},
      {"gpt-5.2-pro", 400000},
      {"gpt-5.3-codex", 400000},
      {"gpt-5.3-codex-spark", 400000},
      {"gpt-5.4-mini", 400000},
      {"gpt-5.4-nano", 400000},
      {"o1", 200000},
      {"o1-pro", 200000},
      {"o3", 200000},
      {"o3-mini", 200000},
      {"o3-pro", 200000},
      {"o3-deep-research", 200000},
      {"o4-mini", 200000},
      {"o4-mini-deep-research", 200000},
      {"codex-mini-latest", 200000},
      {"gpt-4o", 128000},
      {"gpt-4o-mini", 128000},
      {"gpt-5-chat-latest", 128000},
      {"gpt-5.1-chat-latest", 128000},
      {"gpt-5.2-chat-latest", 128000},
      {"gpt-5.3-chat-latest", 128000},
  };
  if (!model)
    return 240000;
  const char *slash = strrchr(model, '/');
  char name[128];
  (void)snprintf(name, sizeof(name), "%s", slash ? slash + 1 : model);
  for (char *p = name; *p; p++)
    if (*p >= 'A' && *p <= 'Z')
      *p = (char)(*p + 32);
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
      if (strcmp(table[i].name, name) == 0)
        return table[i].window * 9 / 10;
    /* Then without a -YYYY-MM-DD suffix. */
    if (!cut_date(name))
      break;
  }
  return 240000;
}
