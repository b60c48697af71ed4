/* See pblift.h. Wire format: each field is a varint key (number << 3 | wire
 * type) followed by a varint (type 0), 8 bytes (1), a varint length and that
 * many bytes (2) or 4 bytes (5); types 3 and 4 are groups. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "shared/pblift.h"

/* Reads a varint at *POS below END; false when malformed or cut short. */
static bool varint(const uint8_t *p, size_t end, size_t *pos, uint64_t *v) {
  uint64_t r = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (*pos >= end)
      return false;
    uint8_t b = p[(*pos)++];
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return true;
    }
  }
  return false;
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7)
    n++;
  return n;
}

static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7)
    p[n++] = (uint8_t)(v | 0x80);
  p[n++] = (uint8_t)v;
  return n;
}

/* One length-delimited field NUMBER in P[start, end): its key's offset in
 * *KEY, its length's in *LENAT, its payload in [*BODY, *BODY + *BLEN). Returns
 * 1 when it is there exactly once with wire type 2, 0 when absent, repeated, of
 * another type or when anything in the range is malformed or a group. */
static int find_once(const uint8_t *p, size_t start, size_t end,
                     uint32_t number, size_t *key, size_t *lenat, size_t *body,
                     size_t *blen) {
  int found = 0;
  size_t pos = start;
  while (pos < end) {
    size_t at = pos;
    uint64_t k, v;
    if (!varint(p, end, &pos, &k) || (k >> 3) == 0)
      return 0;
    unsigned type = (unsigned)(k & 7);
    if (type == 0) {
      if (!varint(p, end, &pos, &v))
        return 0;
    } else if (type == 1 || type == 5) {
      size_t w = type == 1 ? 8 : 4;
      if (end - pos < w)
        return 0;
      pos += w;
    } else if (type == 2) {
      size_t la = pos;
      if (!varint(p, end, &pos, &v) || v > end - pos)
        return 0;
      if ((k >> 3) == number) {
        if (found++)
          return 0;
        *key = at;
        *lenat = la;
        *body = pos;
        *blen = (size_t)v;
      }
      pos += (size_t)v;
      continue;
    } else {
      return 0;
    }
    if ((k >> 3) == number)
      return 0; /* the field with a wire type it cannot have */
  }
  return found;
}

int sbx_pb_lift(const uint8_t *buf, size_t len, uint32_t outer, uint32_t inner,
                struct sbx_pb_lift *l) {
  memset(l, 0, sizeof(*l));
  size_t okey, olen_at, obody, olen, ikey, ilen_at, ibody, ilen;
  if (find_once(buf, 0, len, outer, &okey, &olen_at, &obody, &olen) != 1 ||
      find_once(buf, obody, obody + olen, inner, &ikey, &ilen_at, &ibody,
                &ilen) != 1 ||
      ilen < SBX_PB_LIFT_MIN)
    return 0;
  size_t field = ibody + ilen - ikey; /* key, length and bytes */
  size_t nlen = olen - field;
  size_t cap = len - field + varint_len(nlen);
  uint8_t *out = malloc(cap);
  if (!out)
    return -ENOMEM;
  size_t n = 0;
  memcpy(out, buf, olen_at);
  n = olen_at;
  n += put_varint(out + n, nlen);
  memcpy(out + n, buf + obody, ikey - obody);
  n += ikey - obody;
  size_t after = ibody + ilen;
  memcpy(out + n, buf + after, len - after);
  n += len - after;
  l->rest = out;
  l->rest_len = n;
  l->data_off = ibody;
  l->data_len = ilen;
  return 1;
}
