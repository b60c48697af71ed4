/* A growable byte buffer with a hard maximum (curl's dynbuf with toobig).
 *
 * Not thread-safe. data is always NUL-terminated (the NUL is not counted in
 * len), so text can be used as a C string. */
#ifndef SBX_BUF_H
#define SBX_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct sbx_buf {
  char *data;
  size_t len;
  size_t cap;
  size_t max; /* len may never exceed this */
};

/* Initialises an empty buffer that may hold at most MAX bytes. */
void sbx_buf_init(struct sbx_buf *b, size_t max);
/* Frees the storage and resets to empty; accepts a zeroed buffer. */
void sbx_buf_free(struct sbx_buf *b);
/* Empties the buffer, keeping its storage. */
void sbx_buf_reset(struct sbx_buf *b);
/* Makes room for N more bytes. -E2BIG past max, -ENOMEM on allocation. */
int sbx_buf_reserve(struct sbx_buf *b, size_t n);
int sbx_buf_append(struct sbx_buf *b, const void *p, size_t n);
int sbx_buf_append_str(struct sbx_buf *b, const char *s);
int sbx_buf_printf(struct sbx_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int sbx_buf_vprintf(struct sbx_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Drops the first N bytes. */
void sbx_buf_consume(struct sbx_buf *b, size_t n);
/* Hands the storage to the caller (new; free() it); the buffer is emptied.
 * Returns an empty allocated string for an empty buffer, NULL on OOM. */
char *sbx_buf_steal(struct sbx_buf *b, size_t *len);

static inline void sbx_buf_freep(struct sbx_buf *b) {
  sbx_buf_free(b);
}
#define _cleanup_buf_ __attribute__((cleanup(sbx_buf_freep)))

#endif
