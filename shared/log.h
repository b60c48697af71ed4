/* The one logging facility. The level is checked before anything is
 * formatted. Thread-safe: each record is written with one write(2). */
#ifndef SBX_LOG_H
#define SBX_LOG_H

enum sbx_log_level {
  SBX_LOG_ERROR = 0,
  SBX_LOG_WARN = 1,
  SBX_LOG_INFO = 2,
  SBX_LOG_DEBUG = 3,
};

extern enum sbx_log_level sbx_log_threshold;

/* Parses "error", "warn", "info", "debug"; returns 0 or -EINVAL. */
int sbx_log_parse_level(const char *s, enum sbx_log_level *out);
void sbx_log_set_level(enum sbx_log_level level);
/* Prefixes every record with PROG (borrowed, must outlive logging). */
void sbx_log_set_program(const char *prog);
/* Writes to FD instead of stderr (2). */
void sbx_log_set_fd(int fd);

void sbx_log_write(enum sbx_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define sbx_log(level, ...)                                                    \
  do {                                                                         \
    if ((level) <= sbx_log_threshold)                                          \
      sbx_log_write((level), __VA_ARGS__);                                     \
  } while (0)
#define log_error(...) sbx_log(SBX_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) sbx_log(SBX_LOG_WARN, __VA_ARGS__)
#define log_info(...) sbx_log(SBX_LOG_INFO, __VA_ARGS__)
#define log_debug(...) sbx_log(SBX_LOG_DEBUG, __VA_ARGS__)

#endif
