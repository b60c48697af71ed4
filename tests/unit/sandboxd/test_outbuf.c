#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/proc/outbuf.h"

/* The byte a stream has at offset O in these tests. */
static unsigned char pattern(uint64_t o) {
  return (unsigned char)((o * 7 + o / 251) % 253);
}

static void append_pattern(struct outbuf *b, uint64_t n) {
  unsigned char chunk[1000];
  while (n > 0) {
    size_t k = n < sizeof(chunk) ? (size_t)n : sizeof(chunk);
    for (size_t i = 0; i < k; i++)
      chunk[i] = pattern(b->total + i);
    outbuf_append(b, chunk, k);
    n -= k;
  }
}

/* Checks every offset of B against what HEAD/TAIL retention must keep. */
static void check_all(const struct outbuf *b, uint64_t head, uint64_t tail) {
  uint64_t total = b->total;
  uint64_t tail_from = total > head + tail ? total - tail : head;
  for (uint64_t off = 0; off <= total; off++) {
    uint64_t start;
    uint64_t avail = outbuf_avail(b, off, &start);
    bool dropped = off >= head && off < tail_from;
    uint64_t want_start = dropped ? tail_from : off;
    cr_assert_eq(start, want_start, "offset %lu: start %lu, want %lu",
                 (unsigned long)off, (unsigned long)start,
                 (unsigned long)want_start);
    uint64_t want_avail;
    if (start < head && tail_from > head)
      want_avail = (head < total ? head : total) - start;
    else
      want_avail = total - start;
    cr_assert_eq(avail, want_avail, "offset %lu: avail %lu, want %lu",
                 (unsigned long)off, (unsigned long)avail,
                 (unsigned long)want_avail);
    if (avail > 0 && (off % 37 == 0 || avail < 50)) {
      unsigned char *got = malloc((size_t)avail);
      cr_assert_not_null(got);
      outbuf_copy(b, start, got, (size_t)avail);
      for (uint64_t i = 0; i < avail; i++)
        cr_assert_eq(got[i], pattern(start + i), "byte %lu",
                     (unsigned long)(start + i));
      free(got);
    }
  }
}

Test(outbuf, empty) {
  struct outbuf b;
  outbuf_init(&b, 16, 16);
  uint64_t start = 99;
  cr_expect_eq(outbuf_avail(&b, 0, &start), 0);
  cr_expect_eq(start, 0);
  outbuf_free(&b);
}

Test(outbuf, fits_without_gap) {
  struct outbuf b;
  outbuf_init(&b, 100, 300);
  append_pattern(&b, 399);
  check_all(&b, 100, 300);
  outbuf_free(&b);
}

Test(outbuf, gap_between_head_and_tail) {
  struct outbuf b;
  outbuf_init(&b, 1024, 4096);
  append_pattern(&b, 100 * 1024);
  uint64_t start;
  cr_expect_eq(outbuf_avail(&b, 0, &start), 1024);
  cr_expect_eq(start, 0);
  cr_expect_eq(outbuf_avail(&b, 1024, &start), 4096);
  cr_expect_eq(start, 100 * 1024 - 4096);
  check_all(&b, 1024, 4096);
  outbuf_free(&b);
}

Test(outbuf, ring_wraps_in_odd_chunks) {
  struct outbuf b;
  outbuf_init(&b, 10, 20);
  unsigned char chunk[64];
  srand(7);
  for (int round = 0; round < 300; round++) {
    size_t k = (size_t)(rand() % 63) + 1;
    for (size_t i = 0; i < k; i++)
      chunk[i] = pattern(b.total + i);
    outbuf_append(&b, chunk, k);
    check_all(&b, 10, 20);
  }
  outbuf_free(&b);
}

Test(outbuf, chunk_larger_than_ring) {
  struct outbuf b;
  outbuf_init(&b, 5, 8);
  append_pattern(&b, 3);
  unsigned char big[100];
  for (size_t i = 0; i < sizeof(big); i++)
    big[i] = pattern(b.total + i);
  outbuf_append(&b, big, sizeof(big));
  check_all(&b, 5, 8);
  outbuf_free(&b);
}

Test(outbuf, no_tail_keeps_head_only) {
  struct outbuf b;
  outbuf_init(&b, 8, 0);
  append_pattern(&b, 100);
  uint64_t start;
  cr_expect_eq(outbuf_avail(&b, 3, &start), 5);
  cr_expect_eq(start, 3);
  cr_expect_eq(outbuf_avail(&b, 8, &start), 0);
  cr_expect_eq(start, 100);
  outbuf_free(&b);
}

Test(outbuf, no_head_keeps_tail_only) {
  struct outbuf b;
  outbuf_init(&b, 0, 16);
  append_pattern(&b, 5000);
  check_all(&b, 0, 16);
  outbuf_free(&b);
}
