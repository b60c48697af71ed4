#include "shared/hmac.h"

#include <string.h>

#define BLOCK 64

/* HMAC(K, m) = H((K' ^ opad) || H((K' ^ ipad) || m)), K' the key padded
 * to the block (or its digest, when longer than the block). */
void sbx_hmac_sha256_init(struct sbx_hmac_sha256 *h, const void *key,
                          size_t key_len) {
  uint8_t k[BLOCK] = {0};
  if (key_len > BLOCK)
    sbx_sha256(key, key_len, k);
  else if (key_len > 0)
    memcpy(k, key, key_len);
  uint8_t ipad[BLOCK];
  for (size_t i = 0; i < BLOCK; i++) {
    ipad[i] = k[i] ^ 0x36;
    h->opad[i] = k[i] ^ 0x5c;
  }
  sbx_sha256_init(&h->inner);
  sbx_sha256_update(&h->inner, ipad, BLOCK);
  explicit_bzero(k, sizeof(k));
  explicit_bzero(ipad, sizeof(ipad));
}

/* Adds DATA to the inner hash. */
void sbx_hmac_sha256_update(struct sbx_hmac_sha256 *h, const void *data,
                            size_t len) {
  sbx_sha256_update(&h->inner, data, len);
}

/* The outer hash over the inner digest; the context is wiped after, as
 * it holds the padded key. */
void sbx_hmac_sha256_final(struct sbx_hmac_sha256 *h,
                           uint8_t out[SBX_HMAC_SHA256_BYTES]) {
  uint8_t inner[SBX_SHA256_BYTES];
  sbx_sha256_final(&h->inner, inner);
  struct sbx_sha256 outer;
  sbx_sha256_init(&outer);
  sbx_sha256_update(&outer, h->opad, BLOCK);
  sbx_sha256_update(&outer, inner, sizeof(inner));
  sbx_sha256_final(&outer, out);
  explicit_bzero(inner, sizeof(inner));
  explicit_bzero(&outer, sizeof(outer));
  explicit_bzero(h, sizeof(*h));
}

/* The three steps at once, for a message held in one piece. */
void sbx_hmac_sha256(const void *key, size_t key_len, const void *data,
                     size_t len, uint8_t out[SBX_HMAC_SHA256_BYTES]) {
  struct sbx_hmac_sha256 h;
  sbx_hmac_sha256_init(&h, key, key_len);
  sbx_hmac_sha256_update(&h, data, len);
  sbx_hmac_sha256_final(&h, out);
}

/* Every byte is looked at and the differences are ORed together, so the
 * time does not tell where the first difference is. */
bool sbx_equal_ct(const void *a, const void *b, size_t n) {
  const volatile uint8_t *x = a, *y = b;
  uint8_t diff = 0;
  for (size_t i = 0; i < n; i++)
    diff |= (uint8_t)(x[i] ^ y[i]);
  return diff == 0;
}
