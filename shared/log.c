#include "shared/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum sbx_log_level sbx_log_threshold = SBX_LOG_WARN;
static const char *log_program = "sbx";
static int log_fd = 2;

int sbx_log_parse_level(const char *s, enum sbx_log_level *out) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  for (unsigned i = 0; i < 4; i++)
    if (s && strcmp(s, names[i]) == 0) {
      *out = (enum sbx_log_level)i;
      return 0;
    }
  return -EINVAL;
}

void sbx_log_set_level(enum sbx_log_level level) {
  sbx_log_threshold = level;
}

void sbx_log_set_program(const char *prog) {
  log_program = prog;
}

void sbx_log_set_fd(int fd) {
  log_fd = fd;
}

void sbx_log_write(enum sbx_log_level level, const char *fmt, ...) {
  static const char *const tags[] = {"error", "warning", "info", "debug"};
  char line[2048];
  int saved = errno;
  int n = snprintf(line, sizeof(line), "%s: %s: ", log_program,
                   tags[level <= SBX_LOG_DEBUG ? level : SBX_LOG_DEBUG]);
  if (n < 0)
    n = 0;
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(line) - 2)
    len = sizeof(line) - 2;
  line[len++] = '\n';
  (void)!write(log_fd, line, len);
  errno = saved;
}
