/* Scope-bound cleanup for C, in systemd's manner.
 *
 * Every variable declared with a _cleanup_*_ attribute must be initialised
 * where it is declared. TAKE_PTR/TAKE_FD hand ownership out of the scope. */
#ifndef SBX_CLEANUP_H
#define SBX_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

static inline void sbx_freep(void *p) {
  free(*(void **)p);
}
static inline void sbx_closep(int *fd) {
  if (*fd >= 0) {
    int saved = errno;
    (void)close(*fd);
    errno = saved;
  }
}
static inline void sbx_fclosep(FILE **f) {
  if (*f)
    (void)fclose(*f);
}

#define _cleanup_free_ _cleanup_(sbx_freep)
#define _cleanup_close_ _cleanup_(sbx_closep)
#define _cleanup_fclose_ _cleanup_(sbx_fclosep)

/* Declares a cleanup function NAME##p for a type with destructor FUNC(T),
 * which must accept NULL. */
#define SBX_DEFINE_CLEANUP(type, func)                                         \
  static inline void func##p(type *p) {                                        \
    if (*p)                                                                    \
      func(*p);                                                                \
  }

#define TAKE_PTR(p)                                                            \
  ({                                                                           \
    __typeof__(p) _tp = (p);                                                   \
    (p) = NULL;                                                                \
    _tp;                                                                       \
  })
#define TAKE_FD(fd)                                                            \
  ({                                                                           \
    int _tf = (fd);                                                            \
    (fd) = -1;                                                                 \
    _tf;                                                                       \
  })

/* jansson and nng cleanups, available where those headers are included. */
#ifdef JANSSON_H
static inline void sbx_json_decrefp(json_t **j) {
  json_decref(*j);
}
#define _cleanup_json_ _cleanup_(sbx_json_decrefp)
#endif

#ifdef NNG_H
static inline void sbx_nng_msg_freep(nng_msg **m) {
  if (*m)
    nng_msg_free(*m);
}
#define _cleanup_nng_msg_ _cleanup_(sbx_nng_msg_freep)
#endif

#define SBX_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
