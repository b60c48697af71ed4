/* HMAC-SHA256 (RFC 2104, FIPS 198-1) over shared/sha256.h, and a
 * comparison of secrets that takes the same time wherever they differ.
 *
 * Used for Hello's proof (shared/auth.h): sandboxd shows that it holds the
 * sandbox's secret without sending it. A context holds key material: it is
 * wiped by sbx_hmac_sha256_final, and a caller that abandons one midway
 * wipes it with explicit_bzero.
 *
 * Never fails. Thread-safety: as sha256.h (a context per thread). */
#ifndef SBX_HMAC_H
#define SBX_HMAC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/sha256.h"

#define SBX_HMAC_SHA256_BYTES SBX_SHA256_BYTES

struct sbx_hmac_sha256 {
  struct sbx_sha256 inner;
  uint8_t opad[64]; /* the key XOR 0x5c, for the outer hash */
};

/* Starts a MAC in H under KEY (KEY_LEN bytes; any length, a longer one
 * than the 64-byte block is hashed first, as RFC 2104 says). */
void sbx_hmac_sha256_init(struct sbx_hmac_sha256 *h, const void *key,
                          size_t key_len);
/* Adds LEN bytes of DATA. */
void sbx_hmac_sha256_update(struct sbx_hmac_sha256 *h, const void *data,
                            size_t len);
/* Writes the MAC to OUT and wipes H. */
void sbx_hmac_sha256_final(struct sbx_hmac_sha256 *h,
                           uint8_t out[SBX_HMAC_SHA256_BYTES]);
/* One-shot MAC of DATA under KEY. */
void sbx_hmac_sha256(const void *key, size_t key_len, const void *data,
                     size_t len, uint8_t out[SBX_HMAC_SHA256_BYTES]);

/* True when the N bytes at A and B are equal, in a time that depends on N
 * only: for comparing a MAC or a token with the one expected. */
bool sbx_equal_ct(const void *a, const void *b, size_t n);

#endif
