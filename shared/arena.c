#include "shared/arena.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_CHUNK 8192

struct sbx_arena_chunk {
  struct sbx_arena_chunk *next;
  size_t used;
  size_t cap;
  alignas(max_align_t) unsigned char data[];
};

void *sbx_arena_alloc_raw(struct sbx_arena *a, size_t n) {
  const size_t al = alignof(max_align_t);
  if (n > SIZE_MAX - al)
    return NULL;
  n = (n + al - 1) & ~(al - 1);
  if (n == 0)
    n = al;
  struct sbx_arena_chunk *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > ARENA_CHUNK / 2 ? n : ARENA_CHUNK;
    c = malloc(sizeof(*c) + cap);
    if (!c)
      return NULL;
    c->used = 0;
    c->cap = cap;
    /* Big chunks go behind the head so the head keeps its free space. */
    if (cap > ARENA_CHUNK && a->head) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = c->data + c->used;
  c->used += n;
  a->total += n;
  return p;
}

void *sbx_arena_alloc(struct sbx_arena *a, size_t n) {
  void *p = sbx_arena_alloc_raw(a, n);
  if (p)
    memset(p, 0, n);
  return p;
}

char *sbx_arena_strndup(struct sbx_arena *a, const char *s, size_t n) {
  if (n == SIZE_MAX)
    return NULL;
  char *p = sbx_arena_alloc_raw(a, n + 1);
  if (!p)
    return NULL;
  if (n)
    memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

char *sbx_arena_strdup(struct sbx_arena *a, const char *s) {
  return sbx_arena_strndup(a, s, strlen(s));
}

void sbx_arena_reset(struct sbx_arena *a) {
  struct sbx_arena_chunk *c = a->head;
  while (c) {
    struct sbx_arena_chunk *n = c->next;
    free(c);
    c = n;
  }
  a->head = NULL;
  a->total = 0;
}
