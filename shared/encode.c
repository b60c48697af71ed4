#include "shared/encode.h"

#include <errno.h>

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t sbx_base64_encoded_size(size_t n) {
  return (n + 2) / 3 * 4 + 1;
}

size_t sbx_base64_encode(const void *in, size_t n, char *out) {
  const uint8_t *p = in;
  size_t o = 0, i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
    out[o++] = b64[v >> 18];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = b64[(v >> 6) & 63];
    out[o++] = b64[v & 63];
  }
  if (i < n) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)p[i + 1] << 8;
    out[o++] = b64[v >> 18];
    out[o++] = b64[(v >> 12) & 63];
    out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
    out[o++] = '=';
  }
  out[o] = '\0';
  return o;
}

static int b64_value(char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+')
    return 62;
  if (c == '/')
    return 63;
  return -1;
}

long sbx_base64_decode(const char *in, size_t len, void *out) {
  uint8_t *o = out;
  size_t pad = 0;
  while (len > 0 && in[len - 1] == '=' && pad < 2) {
    len--;
    pad++;
  }
  if (len % 4 == 1)
    return -EINVAL;
  if (pad && (len + pad) % 4 != 0)
    return -EINVAL;
  uint32_t acc = 0;
  int bits = 0;
  long n = 0;
  for (size_t i = 0; i < len; i++) {
    int v = b64_value(in[i]);
    if (v < 0)
      return -EINVAL;
    acc = acc << 6 | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      o[n++] = (uint8_t)(acc >> bits);
    }
  }
  /* Leftover bits must be zero for a canonical encoding. */
  if (bits > 0 && (acc & ((1u << bits) - 1)) != 0)
    return -EINVAL;
  return n;
}

void sbx_hex_encode(const void *in, size_t n, char *out) {
  static const char d[] = "0123456789abcdef";
  const uint8_t *p = in;
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = d[p[i] >> 4];
    out[2 * i + 1] = d[p[i] & 15];
  }
  out[2 * n] = '\0';
}

int sbx_hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int sbx_hex_decode(const char *in, size_t len, void *out) {
  uint8_t *o = out;
  if (len % 2)
    return -EINVAL;
  for (size_t i = 0; i < len; i += 2) {
    int hi = sbx_hex_value(in[i]), lo = sbx_hex_value(in[i + 1]);
    if (hi < 0 || lo < 0)
      return -EINVAL;
    o[i / 2] = (uint8_t)(hi << 4 | lo);
  }
  return 0;
}

size_t sbx_append_printable(char *out, size_t n, size_t outsz, const char *b,
                            size_t k) {
  for (size_t i = 0; i < k && n + 1 < outsz; i++) {
    unsigned char ch = (unsigned char)b[i];
    out[n++] = ch == '\n' || (ch >= 0x20 && ch != 0x7f) ? (char)ch : '?';
  }
  if (outsz > 0)
    out[n] = '\0';
  return n;
}
