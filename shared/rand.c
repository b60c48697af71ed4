#include "shared/rand.h"

#include <errno.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

#include "shared/encode.h"

int sbx_random_bytes(void *buf, size_t n) {
  uint8_t *p = buf;
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int sbx_random_hex(char *out, size_t nbytes) {
  uint8_t b[64];
  if (nbytes > sizeof(b))
    return -EINVAL;
  int r = sbx_random_bytes(b, nbytes);
  if (r < 0)
    return r;
  sbx_hex_encode(b, nbytes, out);
  return 0;
}

int sbx_random_id(char out[33]) {
  return sbx_random_hex(out, 16);
}

int sbx_random_uuid(char out[37]) {
  uint8_t b[16];
  int r = sbx_random_bytes(b, sizeof(b));
  if (r < 0)
    return r;
  b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
  b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
  char h[33];
  sbx_hex_encode(b, 16, h);
  (void)snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16,
                 h + 20);
  return 0;
}

uint64_t sbx_random_u64(void) {
  uint64_t v;
  if (sbx_random_bytes(&v, sizeof(v)) == 0)
    return v;
  struct timespec ts;
  (void)clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_nsec * 6364136223846793005ULL ^ (uint64_t)ts.tv_sec;
}
