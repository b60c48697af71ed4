/* Export: the files with more than one hard link, and the names of those
 * left out. An export cannot tell, when it meets a file's first link,
 * whether its other links lie in the exported tree: it notes every such
 * file here and writes it after the walk, once all its links inside are
 * known. A file with links outside the tree (another sandbox's token, a
 * cache outside the workspace) is left out and named, because archiving it
 * would carry what is not the tree's into the archive. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/archive/archive_internal.h"
#include "shared/utf8.h"

#define NO_PATH UINT32_MAX

/* The slot hash of a file's identity. */
static uint64_t link_hash(dev_t dev, ino_t ino) {
  uint64_t h = (uint64_t)ino * 0x9e3779b97f4a7c15ull ^ (uint64_t)dev;
  return h ^ (h >> 29);
}

/* The index of DEV/INO in L->v, or -1. */
static ssize_t links_find(const struct export_links *l, dev_t dev, ino_t ino) {
  if (l->htcap == 0)
    return -1;
  for (size_t i = link_hash(dev, ino) & (l->htcap - 1);;
       i = (i + 1) & (l->htcap - 1)) {
    uint32_t v = l->ht[i];
    if (v == 0)
      return -1;
    const struct export_link *k = &l->v[v - 1];
    if (k->dev == dev && k->ino == ino)
      return (ssize_t)(v - 1);
  }
}

/* Puts file IDX into the table by identity; the table doubles at half
 * full. */
static int links_ht_put(struct export_links *l, size_t idx) {
  if ((l->n + 1) * 2 > l->htcap) {
    size_t cap = l->htcap ? l->htcap * 2 : 64;
    uint32_t *t = calloc(cap, sizeof(*t));
    if (!t)
      return -ENOMEM;
    for (size_t i = 0; i < l->htcap; i++) {
      uint32_t v = l->ht[i];
      if (!v)
        continue;
      const struct export_link *k = &l->v[v - 1];
      size_t j = link_hash(k->dev, k->ino) & (cap - 1);
      while (t[j])
        j = (j + 1) & (cap - 1);
      t[j] = v;
    }
    free(l->ht);
    l->ht = t;
    l->htcap = cap;
  }
  const struct export_link *k = &l->v[idx];
  size_t j = link_hash(k->dev, k->ino) & (l->htcap - 1);
  while (l->ht[j])
    j = (j + 1) & (l->htcap - 1);
  l->ht[j] = (uint32_t)idx + 1;
  return 0;
}

/* Records PATH as a link of the file DEV/INO, met in the walk. */
int export_links_note(struct export_links *l, dev_t dev, ino_t ino,
                      const char *path) {
  size_t len = strlen(path) + 1;
  if (l->np >= NO_PATH - 1 || l->plen + len > NAME_POOL_MAX)
    return -E2BIG;
  char *pool = xfer_grow(l->pool, &l->pcap, l->plen + len, 1);
  if (!pool)
    return -ENOMEM;
  l->pool = pool;
  struct export_link_path *paths =
      xfer_grow(l->paths, &l->pathcap, l->np + 1, sizeof(*paths));
  if (!paths)
    return -ENOMEM;
  l->paths = paths;
  ssize_t i = links_find(l, dev, ino);
  if (i < 0) {
    struct export_link *v = xfer_grow(l->v, &l->cap, l->n + 1, sizeof(*v));
    if (!v)
      return -ENOMEM;
    l->v = v;
    l->v[l->n] = (struct export_link){
        .dev = dev, .ino = ino, .head = NO_PATH, .tail = NO_PATH};
    if (links_ht_put(l, l->n) < 0)
      return -ENOMEM;
    i = (ssize_t)l->n++;
  }
  struct export_link *k = &l->v[i];
  memcpy(l->pool + l->plen, path, len);
  l->paths[l->np] =
      (struct export_link_path){.off = (uint32_t)l->plen, .next = NO_PATH};
  l->plen += len;
  if (k->tail == NO_PATH)
    k->head = (uint32_t)l->np;
  else
    l->paths[k->tail].next = (uint32_t)l->np;
  k->tail = (uint32_t)l->np++;
  k->seen++;
  return 0;
}

/* The path after PATH (an index, NO_PATH for the first) of file K, or NULL
 * after the last; its index in *AT. */
const char *export_links_path(const struct export_links *l,
                              const struct export_link *k, uint32_t *at) {
  *at = *at == NO_PATH ? k->head : l->paths[*at].next;
  return *at == NO_PATH ? NULL : l->pool + l->paths[*at].off;
}

/* Frees what L holds; for _cleanup_ too. */
void export_links_fini(struct export_links *l) {
  free(l->v);
  free(l->ht);
  free(l->paths);
  free(l->pool);
  *l = (struct export_links){0};
}

/* Adds PATH to the names S reports, as it can go into a message: valid
 * UTF-8 kept, control bytes and invalid sequences as '?'. Past
 * EXPORT_SKIPPED_SHOWN names or EXPORT_SKIPPED_BYTES only the count grows. */
int export_skipped_add(struct export_skipped *s, const char *path) {
  s->total++;
  size_t n = strlen(path);
  if (s->n >= EXPORT_SKIPPED_SHOWN || s->bytes + n + 1 > EXPORT_SKIPPED_BYTES)
    return 0;
  char **v = xfer_grow(s->names, &s->cap, s->n + 1, sizeof(*v));
  char *out = v ? malloc(n + 1) : NULL;
  if (v)
    s->names = v;
  if (!out)
    return -ENOMEM;
  const unsigned char *p = (const unsigned char *)path;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    bool valid = false;
    size_t k = sbx_utf8_scan(p + i, n - i, &valid);
    if (!valid || p[i] < 0x20 || p[i] == 0x7f) {
      out[o++] = '?';
    } else {
      memcpy(out + o, p + i, k);
      o += k;
    }
    i += k;
  }
  out[o] = '\0';
  s->names[s->n++] = out;
  s->bytes += o + 1;
  return 0;
}

/* Frees the names S holds and zeroes it; for _cleanup_ too. */
void export_skipped_fini(struct export_skipped *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->names[i]);
  free(s->names);
  *s = (struct export_skipped){0};
}
