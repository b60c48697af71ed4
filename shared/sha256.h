/* SHA-256 (FIPS 180-4), for archive fingerprints.
 *
 * A thin wrapper over OpenSSL's libcrypto, which every controller build
 * already loads (libcurl's OpenSSL flavour links it) and which uses the
 * CPU's SHA extensions: about 6 times mbedtls's speed here, and hashing is
 * on the path of every snapshot byte. Callers need no OpenSSL header, and
 * the implementation can change in one place. The context lives wherever
 * the caller puts it (no allocation); it holds no secret worth wiping.
 *
 * Never fails.
 *
 * Thread-safety: a context is used by one thread at a time; distinct
 * contexts are independent. */
#ifndef SBX_SHA256_H
#define SBX_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SBX_SHA256_BYTES 32
#define SBX_SHA256_HEX 65 /* 64 hex digits and a NUL */

struct sbx_sha256 {
  _Alignas(16) unsigned char opaque[256];
};

/* Starts a hash in S. */
void sbx_sha256_init(struct sbx_sha256 *s);
/* Adds LEN bytes of DATA (LEN may be 0, DATA then NULL). */
void sbx_sha256_update(struct sbx_sha256 *s, const void *data, size_t len);
/* Writes the digest to OUT and ends S (init it again to reuse it). */
void sbx_sha256_final(struct sbx_sha256 *s, uint8_t out[SBX_SHA256_BYTES]);
/* Ends S like sbx_sha256_final, writing the digest as hex into OUT. */
void sbx_sha256_final_hex(struct sbx_sha256 *s, char out[SBX_SHA256_HEX]);
/* One-shot digest of DATA. */
void sbx_sha256(const void *data, size_t len, uint8_t out[SBX_SHA256_BYTES]);
/* Lowercase hex of a digest into OUT (NUL-terminated). */
void sbx_sha256_hex(const uint8_t digest[SBX_SHA256_BYTES],
                    char out[SBX_SHA256_HEX]);

#endif
