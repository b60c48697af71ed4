/* The model client's timeouts from text: sbx run --model-timeouts. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller/model/model.h"

#define TIMEOUT_MAX_S 86400u

/* The timeouts a spec may set, by name, and where each goes. */
static unsigned *timeout_field(struct model_config *cfg, const char *name,
                               size_t n) {
  static const char *const names[] = {"connect", "first_byte", "idle", "total"};
  unsigned *fields[] = {&cfg->connect_timeout_ms, &cfg->first_byte_timeout_ms,
                        &cfg->idle_timeout_ms, &cfg->timeout_ms};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (strlen(names[i]) == n && strncmp(names[i], name, n) == 0)
      return fields[i];
  return NULL;
}

int model_parse_timeouts(const char *spec, struct model_config *cfg,
                         struct sbx_error *e) {
  if (!*spec)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "model-timeouts \"\": expected NAME=SECONDS");
  for (const char *p = spec; *p;) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    unsigned *f = eq ? timeout_field(cfg, p, (size_t)(eq - p)) : NULL;
    if (!f)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "model-timeouts \"%s\": expected NAME=SECONDS, "
                           "NAME one of connect, first_byte, idle, total",
                           spec);
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(eq + 1, &end, 10);
    if (errno || end == eq + 1 || end != p + len || v == 0 ||
        v > TIMEOUT_MAX_S || eq[1] == '-' || eq[1] == '+')
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "model-timeouts \"%s\": %.*s must be a whole "
                           "number of seconds from 1 to %u",
                           spec, (int)(eq - p), p, TIMEOUT_MAX_S);
    *f = (unsigned)v * 1000u;
    p += len;
    if (*p == ',' && *++p == '\0')
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "model-timeouts \"%s\": a trailing comma", spec);
  }
  return 0;
}
