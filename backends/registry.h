/* The backends sbx is built with, by name. Adding a backend is a folder
 * here, one line in registry.c, and its tests. */
#ifndef SBX_BACKENDS_REGISTRY_H
#define SBX_BACKENDS_REGISTRY_H

#include <stddef.h>

#include "controller/backend/backend.h"

/* The backend called NAME; NULL names the default ("local"). NULL when
 * there is none of that name. */
const struct backend *backend_find(const char *name);

/* The I-th backend (0 is the default), or NULL past the last: for lists of
 * every backend's options. */
const struct backend *backend_at(size_t i);

/* The backends' names for a message, each in QUOTE, the last after LAST:
 * ("\"", " or ") gives "\"local\" or \"docker\""; ("", ", ") gives
 * "local, docker". Written into OUT (N bytes, cut to fit); returns OUT. */
const char *backend_names(char *out, size_t n, const char *quote,
                          const char *last);

#endif
