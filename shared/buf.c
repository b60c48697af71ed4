#include "shared/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sbx_buf_init(struct sbx_buf *b, size_t max) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  b->max = max;
}

void sbx_buf_free(struct sbx_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

void sbx_buf_reset(struct sbx_buf *b) {
  b->len = 0;
  if (b->data)
    b->data[0] = '\0';
}

int sbx_buf_reserve(struct sbx_buf *b, size_t n) {
  if (n > b->max || b->len > b->max - n)
    return -E2BIG;
  size_t need = b->len + n + 1;
  if (need <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need)
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  if (b->max < SIZE_MAX && cap > b->max + 1)
    cap = b->max + 1;
  char *p = realloc(b->data, cap);
  if (!p)
    return -ENOMEM;
  if (!b->data)
    p[0] = '\0';
  b->data = p;
  b->cap = cap;
  return 0;
}

int sbx_buf_append(struct sbx_buf *b, const void *p, size_t n) {
  int r = sbx_buf_reserve(b, n);
  if (r < 0)
    return r;
  if (n)
    memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

int sbx_buf_append_str(struct sbx_buf *b, const char *s) {
  return sbx_buf_append(b, s, strlen(s));
}

int sbx_buf_vprintf(struct sbx_buf *b, const char *fmt, va_list ap) {
  va_list aq;
  va_copy(aq, ap);
  int n = vsnprintf(NULL, 0, fmt, aq);
  va_end(aq);
  if (n < 0)
    return -EINVAL;
  int r = sbx_buf_reserve(b, (size_t)n);
  if (r < 0)
    return r;
  (void)vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
  return 0;
}

int sbx_buf_printf(struct sbx_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = sbx_buf_vprintf(b, fmt, ap);
  va_end(ap);
  return r;
}

void sbx_buf_consume(struct sbx_buf *b, size_t n) {
  if (n >= b->len) {
    sbx_buf_reset(b);
    return;
  }
  memmove(b->data, b->data + n, b->len - n);
  b->len -= n;
  b->data[b->len] = '\0';
}

char *sbx_buf_steal(struct sbx_buf *b, size_t *len) {
  if (!b->data) {
    b->data = malloc(1);
    if (!b->data)
      return NULL;
    b->data[0] = '\0';
  }
  char *p = b->data;
  if (len)
    *len = b->len;
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  return p;
}
