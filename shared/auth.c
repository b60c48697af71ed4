#include "shared/auth.h"

#include <string.h>

/* HMAC-SHA256(secret, context || nonce): the nonce has a fixed size, so
 * the concatenation is unambiguous. */
void sbx_hello_proof(const uint8_t *secret, size_t len,
                     const uint8_t nonce[SBX_HELLO_NONCE_BYTES],
                     uint8_t out[SBX_HELLO_PROOF_BYTES]) {
  struct sbx_hmac_sha256 h;
  sbx_hmac_sha256_init(&h, secret, len);
  sbx_hmac_sha256_update(&h, SBX_HELLO_CONTEXT, strlen(SBX_HELLO_CONTEXT));
  sbx_hmac_sha256_update(&h, nonce, SBX_HELLO_NONCE_BYTES);
  sbx_hmac_sha256_final(&h, out);
}

/* A proof of another length is refused before any byte is compared; its
 * length is no secret. */
bool sbx_hello_proof_ok(const uint8_t *secret, size_t len,
                        const uint8_t nonce[SBX_HELLO_NONCE_BYTES],
                        const uint8_t *proof, size_t proof_len) {
  if (!proof || proof_len != SBX_HELLO_PROOF_BYTES)
    return false;
  uint8_t want[SBX_HELLO_PROOF_BYTES];
  sbx_hello_proof(secret, len, nonce, want);
  bool ok = sbx_equal_ct(want, proof, sizeof(want));
  explicit_bzero(want, sizeof(want));
  return ok;
}
