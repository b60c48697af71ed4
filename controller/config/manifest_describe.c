/* The "# Filesystem" tree of a manifest for the instructions
 * (manifest_describe), drawn as the SDK's renderManifestDescription draws
 * it: an entry sits under the dir entry whose path is the longest that
 * contains its own (a dir's children, or a key "img/dot.png" beside a
 * dir "img"), else at the top; siblings are in the order of JavaScript's
 * localeCompare, shown as their key's last segment. */
#include "controller/config/manifest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/buf.h"
#include "shared/cleanup.h"

/* The primary weight of an ASCII byte in ICU's root collation, which
 * localeCompare uses: punctuation and symbols before digits before
 * letters, a letter's case left for the tertiary level. Built from
 * ORDER, the printable characters as localeCompare sorts them. */
static unsigned primary(unsigned char c) {
  static const char order[] = " _-,;:!?.'\"()[]{}@*/\\&#%`^+<=>|~$"
                              "0123456789abcdefghijklmnopqrstuvwxyz";
  if (c >= 'A' && c <= 'Z')
    c = (unsigned char)(c - 'A' + 'a');
  if (c >= 0x80)
    return 0x100 + c; /* after every ASCII character, in code point order */
  const char *p = c ? strchr(order, c) : NULL;
  return p ? 1 + (unsigned)(p - order) : 0; /* control characters first */
}

/* A and B as localeCompare orders them for ASCII: by primary weights over
 * the whole strings, then lowercase before uppercase at the first
 * difference of case, then by bytes. */
static int locale_cmp(const char *a, const char *b) {
  const unsigned char *p = (const unsigned char *)a;
  const unsigned char *q = (const unsigned char *)b;
  for (; *p && *q; p++, q++)
    if (primary(*p) != primary(*q))
      return primary(*p) < primary(*q) ? -1 : 1;
  if (*p || *q)
    return *p ? 1 : -1;
  for (p = (const unsigned char *)a, q = (const unsigned char *)b; *p; p++, q++)
    if (*p != *q) {
      bool pu = *p >= 'A' && *p <= 'Z', qu = *q >= 'A' && *q <= 'Z';
      if (pu != qu)
        return pu ? 1 : -1;
      return *p < *q ? -1 : 1;
    }
  return 0;
}

/* One entry in the tree. */
struct node {
  const struct manifest_entry *en;
  const char *key; /* its path below its parent's */
  long parent;     /* index into the nodes, -1 at the top */
  unsigned depth;  /* 1 at the top */
};

static int cmp_nodes(const void *a, const void *b) {
  const struct node *x = a, *y = b;
  if (x->parent != y->parent)
    return x->parent < y->parent ? -1 : 1;
  return locale_cmp(x->key, y->key);
}

static int cmp_paths(const void *a, const void *b) {
  const struct node *x = *(const struct node *const *)a;
  const struct node *y = *(const struct node *const *)b;
  return strcmp(x->en->path, y->en->path);
}

/* The dir among DIRS[0..N) (sorted by path) whose path is the longest
 * that contains PATH, or NULL. */
static const struct node *find_parent(const struct node *const *dirs, size_t n,
                                      const char *path) {
  char buf[4096];
  size_t len = strlen(path);
  if (len >= sizeof(buf))
    return NULL;
  memcpy(buf, path, len + 1);
  for (char *slash; (slash = strrchr(buf, '/'));) {
    *slash = '\0';
    size_t lo = 0, hi = n;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      int c = strcmp(dirs[mid]->en->path, buf);
      if (c == 0)
        return dirs[mid];
      if (c < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
  }
  return NULL;
}

/* The depth of node I, whose ancestors are PARENT's (computed once each:
 * a depth of 0 is not known yet). The chain is as long as a path has
 * components, well within the stack. */
static unsigned node_depth(struct node *nodes, const struct node **parent,
                           size_t i) {
  if (nodes[i].depth == 0)
    nodes[i].depth =
        parent[i] ? node_depth(nodes, parent, (size_t)(parent[i] - nodes)) + 1
                  : 1;
  return nodes[i].depth;
}

/* The tree of M's entries into NODES (M->nentries of them), sorted by
 * parent then key, with parents and depths set. -ENOMEM. */
static int build_tree(const struct manifest *m, struct node *nodes) {
  size_t n = m->nentries, ndirs = 0;
  _cleanup_free_ const struct node **dirs = calloc(n + 1, sizeof(*dirs));
  _cleanup_free_ const struct node **parent = calloc(n + 1, sizeof(*parent));
  if (!dirs || !parent)
    return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    nodes[i] = (struct node){.en = &m->entries[i], .parent = -1};
    if (m->entries[i].type == MANIFEST_DIR)
      dirs[ndirs++] = &nodes[i];
  }
  qsort(dirs, ndirs, sizeof(*dirs), cmp_paths);
  for (size_t i = 0; i < n; i++) {
    parent[i] = find_parent(dirs, ndirs, nodes[i].en->path);
    nodes[i].key = nodes[i].en->path;
    if (parent[i])
      nodes[i].key += strlen(parent[i]->en->path) + 1;
  }
  /* Before sorting, node I is entry I: parents are entry indexes. */
  for (size_t i = 0; i < n; i++) {
    nodes[i].parent = parent[i] ? (long)(parent[i] - nodes) : -1;
    nodes[i].depth = node_depth(nodes, parent, i);
  }
  qsort(nodes, n, sizeof(*nodes), cmp_nodes);
  return 0;
}

/* The walk: lines are added while they fit. */
struct walk {
  const struct manifest *m;
  const struct node *nodes;
  const char *root;
  unsigned max_depth, max_lines, max_chars;
  struct sbx_buf *b;
  unsigned lines;
  size_t shown, total;
  bool full;
  int err;
};

/* The first node whose parent is the entry PARENT (an index, or -1). */
static size_t first_child(const struct walk *w, long parent) {
  size_t lo = 0, hi = w->m->nentries;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (w->nodes[mid].parent < parent)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Adds the line of node I, when it fits. */
static void add_line(struct walk *w, const struct node *nd) {
  if (w->full || w->lines >= w->max_lines) {
    w->full = true;
    return;
  }
  const struct manifest_entry *en = nd->en;
  const char *name = strrchr(nd->key, '/');
  name = name ? name + 1 : nd->key;
  char line[8192];
  int l = snprintf(
      line, sizeof(line), "\n%*s%s%s # %s/%s%s%s", (int)(2 * (nd->depth - 1)),
      "", name, en->type == MANIFEST_DIR ? "/" : "",
      strcmp(w->root, "/") == 0 ? "" : w->root, en->path,
      en->description ? " - " : "", en->description ? en->description : "");
  if (l < 0)
    l = 0;
  if ((size_t)l >= sizeof(line))
    l = sizeof(line) - 1;
  if (w->b->len + (size_t)l > w->max_chars) {
    w->full = true;
    return;
  }
  if (sbx_buf_append(w->b, line, (size_t)l) < 0) {
    w->err = -ENOMEM;
    return;
  }
  w->lines++;
  w->shown++;
}

/* Depth first from the children of PARENT; counts what is within the
 * depth whether shown or not. */
static void walk_from(struct walk *w, long parent, unsigned depth) {
  if (depth > w->max_depth)
    return;
  for (size_t i = first_child(w, parent);
       i < w->m->nentries && w->nodes[i].parent == parent && !w->err; i++) {
    w->total++;
    add_line(w, &w->nodes[i]);
    walk_from(w, (long)(w->nodes[i].en - w->m->entries), depth + 1);
  }
}

char *manifest_describe(const struct manifest *m, const char *root,
                        unsigned depth, unsigned max_lines,
                        unsigned max_chars) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, (size_t)max_chars + 4096);
  if (sbx_buf_append_str(&b, root) < 0)
    return NULL;
  _cleanup_free_ struct node *nodes = calloc(m->nentries + 1, sizeof(*nodes));
  if (!nodes || build_tree(m, nodes) < 0)
    return NULL;
  struct walk w = {.m = m,
                   .nodes = nodes,
                   .root = root,
                   .max_depth = depth,
                   .max_lines = max_lines,
                   .max_chars = max_chars,
                   .b = &b,
                   .lines = 1};
  walk_from(&w, -1, 1);
  if (w.err)
    return NULL;
  if (w.shown < w.total) {
    char note[256];
    int l =
        snprintf(note, sizeof(note), "\n... (truncated %zu additional paths)",
                 w.total - w.shown);
    if (l > 0 && b.len + (size_t)l <= max_chars)
      (void)sbx_buf_append(&b, note, (size_t)l);
    static const char hint[] = "\nHint: increase depth, maxLines, or maxChars "
                               "to see more of the manifest layout.";
    if (b.len + sizeof(hint) - 1 <= max_chars)
      (void)sbx_buf_append(&b, hint, sizeof(hint) - 1);
  }
  return sbx_buf_steal(&b, NULL);
}
