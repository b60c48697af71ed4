/* SHA-256 (FIPS 180-4), for checking local_file contents. Not constant
 * time; not for secrets. */
#ifndef SBX_SHA256_H
#define SBX_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
  uint32_t h[8];
  uint64_t len;
  uint8_t buf[64];
  size_t nbuf;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
/* Writes the digest as 64 lowercase hex digits and a NUL. */
void sha256_final_hex(struct sha256 *s, char out[65]);

#endif
