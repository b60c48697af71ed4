/* Output retention for one process stream.
 *
 * Bytes are addressed by their offset from the start of the stream. The
 * buffer keeps the first HEAD_MAX bytes and a ring of the last TAIL_MAX
 * bytes; everything in between is dropped (only counted). A reader asking
 * for a dropped offset is moved to the first retained byte after it, so gaps
 * are visible, never silent.
 *
 * Storage grows with the output (a short stream costs little), up to the
 * two maxima. When memory runs out the buffer keeps less rather than fail:
 * the retention shrinks to what is allocated, and the dropped bytes show up
 * as gaps like any others. Not thread-safe; the caller locks. */
#ifndef SANDBOXD_OUTBUF_H
#define SANDBOXD_OUTBUF_H

#include <stddef.h>
#include <stdint.h>

struct outbuf {
  uint64_t head_max; /* bytes kept from the start */
  uint64_t tail_max; /* bytes kept from the end */
  uint64_t total;    /* bytes appended so far: the end offset */
  unsigned char *head;
  size_t head_cap;
  unsigned char
      *ring; /* stream offset o >= head_max at (o-head_max)%ring_cap */
  size_t ring_cap;
};

/* An empty buffer keeping HEAD_MAX + TAIL_MAX bytes at most. Allocates
 * nothing yet. */
void outbuf_init(struct outbuf *b, uint64_t head_max, uint64_t tail_max);
/* Frees the storage; the buffer is empty afterwards. Accepts a zeroed one. */
void outbuf_free(struct outbuf *b);

/* Appends N bytes. Never fails: on allocation failure the retention shrinks
 * (see above) and total still counts every byte. */
void outbuf_append(struct outbuf *b, const void *p, size_t n);

/* Where a read at OFFSET (<= total) lands: *START is the first retained byte
 * at or after OFFSET (START - OFFSET bytes were dropped). Returns how many
 * retained bytes follow START without a gap; START plus that is below total
 * when more bytes exist after a gap. */
uint64_t outbuf_avail(const struct outbuf *b, uint64_t offset, uint64_t *start);

/* Copies N bytes from START into DST; [START, START+N) must lie within one
 * range outbuf_avail reported. */
void outbuf_copy(const struct outbuf *b, uint64_t start, void *dst, size_t n);

#endif
