/* A bump allocator for one request's reply: many small allocations, one
 * free. Not thread-safe; one arena belongs to one call at a time. */
#ifndef SBX_ARENA_H
#define SBX_ARENA_H

#include <stddef.h>

struct sbx_arena_chunk;

struct sbx_arena {
  struct sbx_arena_chunk *head;
  size_t total; /* bytes handed out, for limits */
};

/* Zeroed memory for N bytes, aligned for any type; NULL on OOM. Freed with
 * the arena. */
void *sbx_arena_alloc(struct sbx_arena *a, size_t n);
/* As sbx_arena_alloc, but the memory is not zeroed (for data buffers). */
void *sbx_arena_alloc_raw(struct sbx_arena *a, size_t n);
/* Copies N bytes (plus a NUL) into the arena. */
char *sbx_arena_strndup(struct sbx_arena *a, const char *s, size_t n);
char *sbx_arena_strdup(struct sbx_arena *a, const char *s);
/* Frees everything; the arena may be used again. */
void sbx_arena_reset(struct sbx_arena *a);

#define sbx_arena_new(a, type) ((type *)sbx_arena_alloc((a), sizeof(type)))
#define sbx_arena_new_array(a, type, n)                                        \
  ((n) > ((size_t)-1) / sizeof(type)                                           \
       ? NULL                                                                  \
       : (type *)sbx_arena_alloc((a), (n) * sizeof(type)))

#endif
