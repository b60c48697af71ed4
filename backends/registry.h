/* The backends sbx is built with, by name. Adding a backend is a folder
 * here, one line in registry.c, and its tests. */
#ifndef SBX_BACKENDS_REGISTRY_H
#define SBX_BACKENDS_REGISTRY_H

#include "controller/backend/backend.h"

/* Looks a backend up by name ("local", "docker"); NULL (the default) is
 * "local". NULL when unknown. */
const struct backend *backend_find(const char *name);

#endif
