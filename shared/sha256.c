#include "shared/sha256.h"

/* The one-shot SHA256_* calls are deprecated in OpenSSL 3 in favour of EVP,
 * which allocates its context; they run the same SHA-NI/AVX2 code. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
#include <string.h>

_Static_assert(sizeof(SHA256_CTX) <= sizeof(((struct sbx_sha256 *)0)->opaque),
               "struct sbx_sha256 is too small for OpenSSL's context");
_Static_assert(_Alignof(SHA256_CTX) <= 16,
               "struct sbx_sha256 is not aligned enough");

static SHA256_CTX *ctx(struct sbx_sha256 *s) {
  return (SHA256_CTX *)(void *)s->opaque;
}

/* OpenSSL's SHA256_* return 1 always (they only check for NULL). */
void sbx_sha256_init(struct sbx_sha256 *s) {
  (void)SHA256_Init(ctx(s));
}

void sbx_sha256_update(struct sbx_sha256 *s, const void *data, size_t len) {
  if (len > 0)
    (void)SHA256_Update(ctx(s), data, len);
}

void sbx_sha256_final(struct sbx_sha256 *s, uint8_t out[SBX_SHA256_BYTES]) {
  (void)SHA256_Final(out, ctx(s));
}

void sbx_sha256_final_hex(struct sbx_sha256 *s, char out[SBX_SHA256_HEX]) {
  uint8_t d[SBX_SHA256_BYTES];
  sbx_sha256_final(s, d);
  sbx_sha256_hex(d, out);
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
