#include "sha256.h"

#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <string.h>

_Static_assert(sizeof(mbedtls_sha256_context) <=
                   sizeof(((struct sbx_sha256 *)0)->opaque),
               "struct sbx_sha256 is too small for mbedtls's context");
_Static_assert(_Alignof(mbedtls_sha256_context) <= 16,
               "struct sbx_sha256 is not aligned enough");

/* mbedtls 3 dropped the _ret suffix that 2.x used for the checked calls. */
#if MBEDTLS_VERSION_NUMBER >= 0x03000000
#define SHA_STARTS mbedtls_sha256_starts
#define SHA_UPDATE mbedtls_sha256_update
#define SHA_FINISH mbedtls_sha256_finish
#else
#define SHA_STARTS mbedtls_sha256_starts_ret
#define SHA_UPDATE mbedtls_sha256_update_ret
#define SHA_FINISH mbedtls_sha256_finish_ret
#endif

static mbedtls_sha256_context *ctx(struct sbx_sha256 *s) {
  return (mbedtls_sha256_context *)(void *)s->opaque;
}

/* The software implementation returns nothing but 0 (see sha256.h). */
void sbx_sha256_init(struct sbx_sha256 *s) {
  mbedtls_sha256_init(ctx(s));
  (void)SHA_STARTS(ctx(s), 0);
}

void sbx_sha256_update(struct sbx_sha256 *s, const void *data, size_t len) {
  if (len > 0)
    (void)SHA_UPDATE(ctx(s), data, len);
}

void sbx_sha256_final(struct sbx_sha256 *s, uint8_t out[SBX_SHA256_BYTES]) {
  (void)SHA_FINISH(ctx(s), out);
  mbedtls_sha256_free(ctx(s));
}

void sbx_sha256(const void *data, size_t len, uint8_t out[SBX_SHA256_BYTES]) {
  struct sbx_sha256 s;
  sbx_sha256_init(&s);
  sbx_sha256_update(&s, data, len);
  sbx_sha256_final(&s, out);
}

void sbx_sha256_hex(const uint8_t digest[SBX_SHA256_BYTES],
                    char out[SBX_SHA256_HEX]) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < SBX_SHA256_BYTES; i++) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  out[2 * SBX_SHA256_BYTES] = '\0';
}
