/* What a live sandbox's manifest may gain (manifest_delta): the SDK's rule
 * that a running session only adds compatible entries. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/manifest_internal.h"

static const struct manifest_entry *find_entry(const struct manifest *m,
                                               const char *path) {
  for (size_t i = 0; i < m->nentries; i++)
    if (strcmp(m->entries[i].path, path) == 0)
      return &m->entries[i];
  return NULL;
}

static bool same_str(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

int manifest_delta(const struct manifest *live, const struct manifest *next,
                   size_t **added, size_t *nadded, struct sbx_error *e) {
  static const char pre[] = "Live sandbox sessions cannot change";
  if (strcmp(live->root, next->root) != 0)
    return manifest_invalid(e, "%s the root (\"%s\" is not \"%s\")", pre,
                            next->root, live->root);
  /* Ephemeral values are never recorded: the trusted manifest brings them
   * again each time, so only the recorded ones must match. */
  size_t nl = 0, nn = 0;
  for (size_t i = 0; i < live->nenv; i++)
    nl += !live->env[i].ephemeral;
  for (size_t i = 0; i < next->nenv; i++)
    nn += !next->env[i].ephemeral;
  bool env_same = nl == nn;
  for (size_t i = 0; env_same && i < next->nenv; i++)
    env_same =
        next->env[i].ephemeral ||
        same_str(manifest_getenv(live, next->env[i].name), next->env[i].value);
  if (!env_same)
    return manifest_invalid(e, "%s the environment", pre);
  bool users_same = live->nusers == next->nusers;
  for (size_t i = 0; users_same && i < next->nusers; i++) {
    bool found = false;
    for (size_t k = 0; k < live->nusers && !found; k++)
      found = strcmp(live->users[k], next->users[i]) == 0;
    users_same = found;
  }
  if (!users_same)
    return manifest_invalid(e, "%s users", pre);
  bool groups_same = live->ngroups == next->ngroups;
  for (size_t i = 0; groups_same && i < next->ngroups; i++) {
    bool found = false;
    for (size_t k = 0; k < live->ngroups && !found; k++) {
      const struct manifest_group *a = &live->groups[k], *b = &next->groups[i];
      found = strcmp(a->name, b->name) == 0 && a->nusers == b->nusers;
      for (size_t u = 0; found && u < b->nusers; u++)
        found = strcmp(a->users[u], b->users[u]) == 0;
    }
    groups_same = found;
  }
  if (!groups_same)
    return manifest_invalid(e, "%s groups", pre);
  bool grants_same = live->ngrants == next->ngrants;
  for (size_t i = 0; grants_same && i < next->ngrants; i++)
    grants_same = strcmp(live->grants[i].path, next->grants[i].path) == 0 &&
                  live->grants[i].read_only == next->grants[i].read_only;
  if (!grants_same)
    return manifest_invalid(e, "%s extra_path_grants", pre);
  for (size_t i = 0; i < live->nentries; i++) {
    const struct manifest_entry *a = &live->entries[i];
    if (a->ephemeral)
      continue;
    const struct manifest_entry *b = find_entry(next, a->path);
    if (!b)
      return manifest_invalid(e, "%s entries: \"%s\" would be removed", pre,
                              a->path);
    if (a->type != b->type || strcmp(a->type_name, b->type_name) != 0)
      return manifest_invalid(e,
                              "%s entries: \"%s\" would change from %s to %s",
                              pre, a->path, a->type_name, b->type_name);
    if (a->type == MANIFEST_MOUNT || a->type == MANIFEST_CLOUD_MOUNT) {
      if (!json_equal(a->json, b->json))
        return manifest_invalid(e, "%s mounts: \"%s\" would change", pre,
                                a->path);
    } else if (!json_equal(a->json, b->json)) {
      return manifest_invalid(e, "%s entries: \"%s\" would change", pre,
                              a->path);
    }
  }
  size_t *v = calloc(next->nentries + 1, sizeof(*v));
  if (!v)
    return -ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < next->nentries; i++) {
    const struct manifest_entry *b = &next->entries[i];
    if (find_entry(live, b->path))
      continue;
    if (b->type == MANIFEST_MOUNT || b->type == MANIFEST_CLOUD_MOUNT) {
      free(v);
      return manifest_invalid(e, "%s mounts: \"%s\" would be added", pre,
                              b->path);
    }
    v[n++] = i;
  }
  *added = v;
  *nadded = n;
  return 0;
}
