/* The manifest's extra_path_grants: host paths outside the base directory
 * that local sources may read, absolute and normalized. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/manifest_internal.h"
#include "shared/path.h"

int manifest_parse_grants(struct manifest *m, json_t *v, const char *where,
                          struct sbx_error *e) {
  int r = manifest_check_list(v, where, "extra_path_grants", e);
  if (r < 0)
    return r;
  m->grants = calloc(json_array_size(v) + 1, sizeof(*m->grants));
  if (!m->grants)
    return -ENOMEM;
  size_t i;
  json_t *g;
  json_array_foreach(v, i, g) {
    char w[400];
    (void)snprintf(w, sizeof(w), "%s: extra_path_grants[%zu]", where, i);
    if (!json_is_object(g))
      return manifest_type_error(e, w, "grant", "an object {\"path\", ...}", g);
    const char *k;
    json_t *x;
    json_object_foreach(g, k, x) {
      if (strcmp(k, "read_only") == 0) {
        if (!json_is_boolean(x))
          return manifest_type_error(e, w, k, "a boolean", x);
      } else if (strcmp(k, "path") == 0 || strcmp(k, "host_path") == 0 ||
                 strcmp(k, "description") == 0) {
        if (!json_is_string(x))
          return manifest_type_error(e, w, k, "a string", x);
      } else {
        return manifest_unknown_key(e, w, k, "a grant");
      }
    }
    struct manifest_grant *mg = &m->grants[m->ngrants];
    m->ngrants++;
    json_t *p = json_object_get(g, "path");
    if (!p)
      return manifest_invalid(e, "%s: a grant needs \"path\"", w);
    for (int pass = 0; pass < 2; pass++) {
      const char *key = pass ? "host_path" : "path";
      json_t *pv = json_object_get(g, key);
      if (!pv)
        continue;
      const char *s = json_string_value(pv);
      char norm[SBX_PATH_MAX];
      if (s[0] != '/')
        return manifest_invalid(e, "%s: \"%s\" \"%.200s\" must be absolute", w,
                                key, s);
      if (strchr(s, '\\'))
        return manifest_invalid(e, "%s: \"%s\" must use \"/\" separators", w,
                                key);
      for (const char *q = s; (q = strstr(q, "..")); q += 2)
        if (q[-1] == '/' && (q[2] == '/' || q[2] == '\0'))
          return manifest_invalid(e, "%s: \"%s\" must not contain \"..\"", w,
                                  key);
      if (sbx_path_normalize_abs(s, strlen(s), norm, sizeof(norm), NULL) < 0)
        return manifest_invalid(e, "%s: \"%s\" \"%.200s\" is not a valid path",
                                w, key, s);
      if (strcmp(norm, "/") == 0)
        return manifest_invalid(e, "%s: \"%s\" must not be \"/\"", w, key);
      char **dst = pass ? &mg->host_path : &mg->path;
      if (!(*dst = strdup(norm)))
        return -ENOMEM;
    }
    mg->read_only = json_is_true(json_object_get(g, "read_only"));
    json_t *d = json_object_get(g, "description");
    if (d && manifest_dup_str(d, &mg->description) < 0)
      return -ENOMEM;
    for (size_t j = 0; j + 1 < m->ngrants; j++)
      if (strcmp(m->grants[j].path, mg->path) == 0)
        return manifest_invalid(e, "%s: \"%s\" is granted twice", w, mg->path);
  }
  return 0;
}
