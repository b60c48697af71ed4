#include "sandboxd/proc/outbuf.h"

#include <stdlib.h>
#include <string.h>

#define OUTBUF_MIN_ALLOC 4096

void outbuf_init(struct outbuf *b, uint64_t head_max, uint64_t tail_max) {
  *b = (struct outbuf){.head_max = head_max, .tail_max = tail_max};
}

void outbuf_free(struct outbuf *b) {
  free(b->head);
  free(b->ring);
  outbuf_init(b, b->head_max, b->tail_max);
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

/* Grows *BUF (of *CAP bytes) to hold at least NEED bytes, doubling, at most
 * MAX. Returns the capacity it ends up with (the old one on failure). */
static size_t grow(unsigned char **buf, size_t *cap, uint64_t need,
                   uint64_t max) {
  if (need <= *cap)
    return *cap;
  uint64_t n = *cap ? *cap : OUTBUF_MIN_ALLOC;
  while (n < need)
    n *= 2;
  n = min_u64(n, max);
  if (n > SIZE_MAX)
    return *cap;
  unsigned char *p = realloc(*buf, (size_t)n);
  if (!p)
    return *cap;
  *buf = p;
  *cap = (size_t)n;
  return *cap;
}

void outbuf_append(struct outbuf *b, const void *p, size_t n) {
  const unsigned char *src = p;
  /* The head fills first; the ring is only used once the head is full, so
   * shrinking head_max on failure cannot move bytes already in the ring. */
  if (b->total < b->head_max && n > 0) {
    uint64_t want = min_u64(b->head_max, b->total + n);
    if (grow(&b->head, &b->head_cap, want, b->head_max) < want)
      b->head_max = b->head_cap < b->total ? b->total : b->head_cap;
    size_t k = (size_t)min_u64(n, b->head_max - b->total);
    if (k > 0) {
      memcpy(b->head + b->total, src, k);
      b->total += k;
      src += k;
      n -= k;
    }
  }
  if (n == 0)
    return;
  /* The ring grows linearly until it reaches tail_max, and only wraps at
   * that size, so growing never has to unwrap it. */
  uint64_t in_tail = b->total - b->head_max; /* bytes that went past the head */
  if (b->ring_cap < b->tail_max) {
    uint64_t want = min_u64(b->tail_max, in_tail + n);
    if (grow(&b->ring, &b->ring_cap, want, b->tail_max) < want) {
      /* Cannot grow: keep what is allocated as the ring. If the bytes so far
       * fit in it, it has not wrapped yet and the mapping still holds;
       * otherwise stop retaining the tail at all. */
      b->tail_max = in_tail <= b->ring_cap ? b->ring_cap : 0;
      if (b->tail_max == 0) {
        free(b->ring);
        b->ring = NULL;
        b->ring_cap = 0;
      }
    }
  }
  if (b->ring_cap == 0 || b->tail_max == 0) {
    b->total += n;
    return;
  }
  /* Only the last ring_cap bytes of this chunk can survive. */
  if (n > b->ring_cap) {
    size_t skip = n - b->ring_cap;
    src += skip;
    b->total += skip;
    n = b->ring_cap;
  }
  size_t pos = (size_t)((b->total - b->head_max) % b->ring_cap);
  size_t first = n < b->ring_cap - pos ? n : b->ring_cap - pos;
  memcpy(b->ring + pos, src, first);
  memcpy(b->ring, src + first, n - first);
  b->total += n;
}

/* The first byte the ring still holds. */
static uint64_t tail_start(const struct outbuf *b) {
  if (b->total <= b->head_max)
    return b->total;
  uint64_t kept = min_u64(b->tail_max, b->ring_cap);
  uint64_t s = b->total - min_u64(kept, b->total - b->head_max);
  return s;
}

uint64_t outbuf_avail(const struct outbuf *b, uint64_t offset,
                      uint64_t *start) {
  uint64_t head_end = min_u64(b->total, b->head_max);
  uint64_t ts = tail_start(b);
  if (offset < head_end) {
    *start = offset;
    return ts == head_end ? b->total - offset : head_end - offset;
  }
  if (offset < ts) {
    *start = ts;
    return b->total - ts;
  }
  *start = offset;
  return offset < b->total ? b->total - offset : 0;
}

void outbuf_copy(const struct outbuf *b, uint64_t start, void *dst, size_t n) {
  unsigned char *out = dst;
  if (start < b->head_max && n > 0) {
    size_t k = (size_t)min_u64(n, b->head_max - start);
    memcpy(out, b->head + start, k);
    out += k;
    start += k;
    n -= k;
  }
  if (n == 0)
    return;
  size_t pos = (size_t)((start - b->head_max) % b->ring_cap);
  size_t first = n < b->ring_cap - pos ? n : b->ring_cap - pos;
  memcpy(out, b->ring + pos, first);
  memcpy(out + first, b->ring, n - first);
}
