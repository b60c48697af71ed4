/* Error codes shared by sandboxd and the controller.
 *
 * Functions return 0 or a negative errno. Where a person needs context, they
 * also fill an optional struct sbx_error. sbx_code names the protocol's error
 * classes; sbx_code_from_errno maps an errno to one. */
#ifndef SBX_ERR_H
#define SBX_ERR_H

#include <stdarg.h>
#include <stddef.h>

enum sbx_code {
  SBX_OK = 0,
  SBX_NOT_FOUND = 1,
  SBX_PERMISSION_DENIED = 2,
  SBX_INVALID_ARGUMENT = 3,
  SBX_LIMIT_EXCEEDED = 4,
  SBX_CONFLICT = 5,
  SBX_UNAVAILABLE = 6,
  SBX_INTERNAL = 7,
  SBX_UNAUTHENTICATED = 8,
  SBX_ALREADY_EXISTS = 9,
  SBX_NOT_SUPPORTED = 10,
  SBX_TIMED_OUT = 11,
  SBX_VERSION_MISMATCH = 12,
};
#define SBX_CODE_MAX SBX_VERSION_MISMATCH

#define SBX_ERROR_MSG_MAX 512

/* An error for a person: a class, the errno behind it and a message. */
struct sbx_error {
  enum sbx_code code;
  int err; /* positive errno, 0 when none */
  char msg[SBX_ERROR_MSG_MAX];
};

/* The protocol code for a (positive or negative) errno. */
enum sbx_code sbx_code_from_errno(int err);
/* A negative errno that stands for CODE (for C callers that only keep ints). */
int sbx_errno_from_code(enum sbx_code code);
/* The protocol name of CODE, e.g. "NOT_FOUND"; "UNKNOWN" when out of range. */
const char *sbx_code_name(enum sbx_code code);

/* Fills E (which may be NULL) and returns -abs(err), or -EIO when err is 0.
 * The code comes from err unless CODE is not SBX_OK. */
int sbx_error_set(struct sbx_error *e, enum sbx_code code, int err,
                  const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int sbx_error_setv(struct sbx_error *e, enum sbx_code code, int err,
                   const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
void sbx_error_clear(struct sbx_error *e);
/* strerror(ERR) into BUF (N bytes), lowercased as a message goes on after
 * a colon ("permission denied"); returns BUF. Thread-safe. */
const char *sbx_strerror_lc(int err, char *buf, size_t n);

#endif
