#include "shared/utf8.h"

#include <errno.h>

size_t sbx_utf8_scan(const unsigned char *s, size_t n, bool *valid) {
  unsigned char c = s[0];
  size_t need;
  unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */

  *valid = true;
  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    need = 1;
  } else if (c >= 0xe0 && c <= 0xef) {
    need = 2;
    if (c == 0xe0)
      lo = 0xa0; /* no overlong forms */
    else if (c == 0xed)
      hi = 0x9f; /* no surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    need = 3;
    if (c == 0xf0)
      lo = 0x90;
    else if (c == 0xf4)
      hi = 0x8f; /* nothing above U+10FFFF */
  } else {
    *valid = false;
    return 1;
  }
  for (size_t i = 1; i <= need; i++) {
    if (i >= n || s[i] < lo || s[i] > hi) {
      *valid = false;
      return i;
    }
    lo = 0x80;
    hi = 0xbf;
  }
  return need + 1;
}

int sbx_utf8_sanitize(const char *text, size_t len, struct sbx_buf *out) {
  static const char replacement[] = "\xef\xbf\xbd";
  const unsigned char *s = (const unsigned char *)text;
  size_t run = 0; /* start of the pending valid run */
  size_t i = 0;

  while (i < len) {
    if (s[i] < 0x80) {
      i++;
      continue;
    }
    bool valid;
    size_t k = sbx_utf8_scan(s + i, len - i, &valid);
    if (valid) {
      i += k;
      continue;
    }
    int r = sbx_buf_append(out, s + run, i - run);
    if (r < 0)
      return r;
    r = sbx_buf_append(out, replacement, sizeof(replacement) - 1);
    if (r < 0)
      return r;
    i += k;
    run = i;
  }
  return sbx_buf_append(out, s + run, len - run);
}
