/* Workspace snapshots: records and their types, the excludes of a spec,
 * and snapshot_exists over the two stores. See snapshot.h for the
 * contract; saving, restoring, the export from sandboxd and each store
 * have their own files (snapshot_internal.h). */
#include "controller/snapshot/snapshot.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller/snapshot/snapshot_internal.h"
#include "shared/path.h"

#define EXCLUDES_MAX 10000

void snapshot_record_clear(struct snapshot_record *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->nskipped; i++)
    free(r->skipped[i]);
  free(r->skipped);
  free(r->location);
  memset(r, 0, sizeof(*r));
}

int snapshot_type_parse(const char *s, enum snapshot_type *out) {
  if (strcmp(s, "local") == 0)
    *out = SNAPSHOT_LOCAL;
  else if (strcmp(s, "remote") == 0)
    *out = SNAPSHOT_REMOTE;
  else if (strcmp(s, "none") == 0 || strcmp(s, "noop") == 0)
    *out = SNAPSHOT_NONE;
  else
    return -EINVAL;
  return 0;
}

const char *snapshot_type_name(enum snapshot_type t) {
  switch (t) {
  case SNAPSHOT_LOCAL:
    return "local";
  case SNAPSHOT_REMOTE:
    return "remote";
  case SNAPSHOT_NONE:
    return "none";
  }
  return "unknown";
}

char *snapshot_join3(const char *a, const char *b, const char *c) {
  size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
  char *s = malloc(la + lb + lc + 1);
  if (!s)
    return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb);
  memcpy(s + la + lb, c, lc + 1);
  return s;
}

/* ---- limits ---- */

/* LIMITS with the defaults filled in: the limits a save and a restore of
 * the same snapshot both apply. */
struct snapshot_limits
snapshot_limits_or_defaults(const struct snapshot_limits *limits) {
  struct snapshot_limits lim = {
      .max_input_bytes = SNAPSHOT_MAX_INPUT_BYTES,
      .max_extracted_bytes = SNAPSHOT_MAX_EXTRACTED_BYTES,
      .max_members = SNAPSHOT_MAX_MEMBERS,
  };
  if (limits && limits->max_input_bytes)
    lim.max_input_bytes = limits->max_input_bytes;
  if (limits && limits->max_extracted_bytes)
    lim.max_extracted_bytes = limits->max_extracted_bytes;
  if (limits && limits->max_members)
    lim.max_members = limits->max_members;
  return lim;
}

/* L as the ArchiveLimits of an export or import request. */
Sbx__V1__ArchiveLimits snapshot_limits_proto(const struct snapshot_limits *l) {
  Sbx__V1__ArchiveLimits al = SBX__V1__ARCHIVE_LIMITS__INIT;
  al.max_input_bytes = l->max_input_bytes;
  al.max_extracted_bytes = l->max_extracted_bytes;
  al.max_members = l->max_members;
  return al;
}

/* ---- excludes ---- */

void snapshot_excludes_free(struct snapshot_excludes *x) {
  for (size_t i = 0; i < x->n; i++)
    free(x->v[i]);
  free(x->v);
  x->v = NULL;
  x->n = 0;
}

int snapshot_excludes_add(struct snapshot_excludes *x, const char *const *list,
                          struct sbx_error *e) {
  for (size_t i = 0; list && list[i]; i++) {
    if (x->n >= EXCLUDES_MAX)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "more than %d snapshot excludes", EXCLUDES_MAX);
    size_t len = strlen(list[i]);
    char *norm = malloc(len + 2);
    if (!norm)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    struct sbx_error pe = {0};
    int r = sbx_path_normalize_rel(list[i], len, norm, len + 2,
                                   SBX_PATH_NO_DOTDOT | SBX_PATH_EMPTY_IS_ROOT,
                                   &pe);
    if (r < 0) {
      free(norm);
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, -r,
                           "snapshot exclude \"%s\": %s", list[i], pe.msg);
    }
    char **v = realloc(x->v, (x->n + 2) * sizeof(*v));
    if (!v) {
      free(norm);
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    }
    x->v = v;
    x->v[x->n++] = norm;
    x->v[x->n] = NULL;
  }
  return 0;
}

int snapshot_excludes_make(const struct snapshot_spec *spec,
                           const char *const *extra,
                           struct snapshot_excludes *out, struct sbx_error *e) {
  *out = (struct snapshot_excludes){0};
  int r = snapshot_excludes_add(out, spec ? spec->excludes : NULL, e);
  if (r == 0)
    r = snapshot_excludes_add(out, extra, e);
  if (r < 0)
    snapshot_excludes_free(out);
  return r;
}

int snapshot_exists(const struct snapshot_spec *spec,
                    const struct snapshot_record *rec, bool *exists,
                    struct sbx_error *e) {
  *exists = false;
  if (rec->type == SNAPSHOT_NONE)
    return 0;
  if (rec->type == SNAPSHOT_LOCAL)
    return snapshot_local_exists(rec, exists, e);
  return snapshot_remote_exists(spec, rec, exists, e);
}
