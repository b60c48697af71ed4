/* The "# Filesystem" tree of a manifest for the instructions
 * (manifest_describe). */
#include "controller/config/manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/buf.h"
#include "shared/cleanup.h"

static int cmp_entries(const void *a, const void *b) {
  const struct manifest_entry *x = *(const struct manifest_entry *const *)a;
  const struct manifest_entry *y = *(const struct manifest_entry *const *)b;
  /* Depth-first with siblings sorted: compare component by component. */
  const char *p = x->path, *q = y->path;
  for (;;) {
    size_t lp = strcspn(p, "/"), lq = strcspn(q, "/");
    size_t n = lp < lq ? lp : lq;
    int c = strncmp(p, q, n);
    if (c)
      return c;
    if (lp != lq)
      return lp < lq ? -1 : 1;
    if (!p[lp] || !q[lq])
      return p[lp] ? 1 : (q[lq] ? -1 : 0);
    p += lp + 1;
    q += lq + 1;
  }
}

char *manifest_describe(const struct manifest *m, const char *root,
                        unsigned depth, unsigned max_lines,
                        unsigned max_chars) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, (size_t)max_chars + 4096);
  if (sbx_buf_append_str(&b, root) < 0)
    return NULL;
  _cleanup_free_ const struct manifest_entry **sorted =
      calloc(m->nentries + 1, sizeof(*sorted));
  if (!sorted)
    return NULL;
  size_t n = 0;
  for (size_t i = 0; i < m->nentries; i++) {
    unsigned d = 1;
    for (const char *p = m->entries[i].path; *p; p++)
      d += *p == '/';
    if (d <= depth)
      sorted[n++] = &m->entries[i];
  }
  qsort(sorted, n, sizeof(*sorted), cmp_entries);
  unsigned lines = 1;
  size_t shown = 0;
  for (; shown < n; shown++) {
    const struct manifest_entry *en = sorted[shown];
    unsigned d = 1;
    for (const char *p = en->path; *p; p++)
      d += *p == '/';
    const char *name = strrchr(en->path, '/');
    name = name ? name + 1 : en->path;
    char line[8192];
    int l = snprintf(
        line, sizeof(line), "\n%*s%s%s # %s/%s%s%s", (int)(2 * (d - 1)), "",
        name, en->type == MANIFEST_DIR ? "/" : "",
        strcmp(root, "/") == 0 ? "" : root, en->path,
        en->description ? " - " : "", en->description ? en->description : "");
    if (l < 0)
      l = 0;
    if ((size_t)l >= sizeof(line))
      l = sizeof(line) - 1;
    if (lines >= max_lines || b.len + (size_t)l > max_chars)
      break;
    if (sbx_buf_append(&b, line, (size_t)l) < 0)
      return NULL;
    lines++;
  }
  if (shown < n) {
    char note[256];
    int l = snprintf(note, sizeof(note),
                     "\n... (truncated %zu additional paths)", n - shown);
    if (l > 0 && b.len + (size_t)l <= max_chars)
      (void)sbx_buf_append(&b, note, (size_t)l);
    static const char hint[] = "\nHint: increase depth, maxLines, or maxChars "
                               "to see more of the manifest layout.";
    if (b.len + sizeof(hint) - 1 <= max_chars)
      (void)sbx_buf_append(&b, hint, sizeof(hint) - 1);
  }
  return sbx_buf_steal(&b, NULL);
}
