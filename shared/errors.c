#include "shared/errors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum sbx_code sbx_code_from_errno(int err) {
  switch (abs(err)) {
  case 0:
    return SBX_OK;
  case ENOENT:
  case ESRCH:
  case ENXIO:
    return SBX_NOT_FOUND;
  case EACCES:
  case EPERM:
  case EROFS:
    return SBX_PERMISSION_DENIED;
  case EINVAL:
  case ENAMETOOLONG:
  case ENOTDIR:
  case EISDIR:
  case ELOOP:
  case EXDEV:
  case EBADMSG:
  case EILSEQ:
  case EDOM:
    return SBX_INVALID_ARGUMENT;
  case E2BIG:
  case EFBIG:
  case ENOSPC:
  case EMSGSIZE:
  case EMFILE:
  case ENFILE:
  case EOVERFLOW:
  case EDQUOT:
  case ENOMEM:
    return SBX_LIMIT_EXCEEDED;
  case EBUSY:
  case ENOTEMPTY:
  case ESTALE:
  case EALREADY:
    return SBX_CONFLICT;
  case EEXIST:
    return SBX_ALREADY_EXISTS;
  case EAGAIN:
  case ECONNREFUSED:
  case ECONNRESET:
  case ECANCELED:
  case ESHUTDOWN:
  case EPIPE:
    return SBX_UNAVAILABLE;
  case ETIMEDOUT:
    return SBX_TIMED_OUT;
  case EOPNOTSUPP:
  case ENOSYS:
    return SBX_NOT_SUPPORTED;
  case EKEYREJECTED:
    return SBX_UNAUTHENTICATED;
  case EPROTO:
    return SBX_VERSION_MISMATCH;
  default:
    return SBX_INTERNAL;
  }
}

int sbx_errno_from_code(enum sbx_code code) {
  static const int map[] = {
      [SBX_OK] = 0,
      [SBX_NOT_FOUND] = -ENOENT,
      [SBX_PERMISSION_DENIED] = -EACCES,
      [SBX_INVALID_ARGUMENT] = -EINVAL,
      [SBX_LIMIT_EXCEEDED] = -E2BIG,
      [SBX_CONFLICT] = -EBUSY,
      [SBX_UNAVAILABLE] = -EAGAIN,
      [SBX_INTERNAL] = -EIO,
      [SBX_UNAUTHENTICATED] = -EKEYREJECTED,
      [SBX_ALREADY_EXISTS] = -EEXIST,
      [SBX_NOT_SUPPORTED] = -EOPNOTSUPP,
      [SBX_TIMED_OUT] = -ETIMEDOUT,
      [SBX_VERSION_MISMATCH] = -EPROTO,
  };
  if ((unsigned)code > SBX_CODE_MAX)
    return -EIO;
  return map[code];
}

const char *sbx_code_name(enum sbx_code code) {
  static const char *const names[] = {
      [SBX_OK] = "OK",
      [SBX_NOT_FOUND] = "NOT_FOUND",
      [SBX_PERMISSION_DENIED] = "PERMISSION_DENIED",
      [SBX_INVALID_ARGUMENT] = "INVALID_ARGUMENT",
      [SBX_LIMIT_EXCEEDED] = "LIMIT_EXCEEDED",
      [SBX_CONFLICT] = "CONFLICT",
      [SBX_UNAVAILABLE] = "UNAVAILABLE",
      [SBX_INTERNAL] = "INTERNAL",
      [SBX_UNAUTHENTICATED] = "UNAUTHENTICATED",
      [SBX_ALREADY_EXISTS] = "ALREADY_EXISTS",
      [SBX_NOT_SUPPORTED] = "NOT_SUPPORTED",
      [SBX_TIMED_OUT] = "TIMED_OUT",
      [SBX_VERSION_MISMATCH] = "VERSION_MISMATCH",
  };
  if ((unsigned)code > SBX_CODE_MAX)
    return "UNKNOWN";
  return names[code];
}

/* A message cut by vsnprintf may end inside a UTF-8 sequence: drop the
 * partial sequence so the message stays valid text. */
static void utf8_cut(char *msg) {
  size_t n = strlen(msg);
  if (n + 1 < SBX_ERROR_MSG_MAX)
    return;
  size_t i = n;
  while (i > 0 && ((unsigned char)msg[i - 1] & 0xc0) == 0x80)
    i--;
  if (i == 0)
    return;
  unsigned char lead = (unsigned char)msg[i - 1];
  size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  if (n - (i - 1) < need)
    msg[i - 1] = '\0';
}

int sbx_error_setv(struct sbx_error *e, enum sbx_code code, int err,
                   const char *fmt, va_list ap) {
  err = abs(err);
  if (e) {
    e->err = err;
    e->code = code != SBX_OK ? code : sbx_code_from_errno(err);
    if (e->code == SBX_OK)
      e->code = SBX_INTERNAL;
    (void)vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    utf8_cut(e->msg);
  }
  if (err)
    return -err;
  return code != SBX_OK ? sbx_errno_from_code(code) : -EIO;
}

int sbx_error_set(struct sbx_error *e, enum sbx_code code, int err,
                  const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = sbx_error_setv(e, code, err, fmt, ap);
  va_end(ap);
  return r;
}

void sbx_error_clear(struct sbx_error *e) {
  if (e)
    memset(e, 0, sizeof(*e));
}

const char *sbx_strerror_lc(int err, char *buf, size_t n) {
  const char *s = strerror_r(err, buf, n);
  if (s != buf)
    (void)snprintf(buf, n, "%s", s);
  if (buf[0] >= 'A' && buf[0] <= 'Z' && buf[1] >= 'a' && buf[1] <= 'z')
    buf[0] = (char)(buf[0] - 'A' + 'a');
  return buf;
}
