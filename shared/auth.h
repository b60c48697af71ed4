/* Hello's proof: how sandboxd shows the controller that it holds the
 * sandbox's secret (its token) without sending it, so that a process that
 * put its own socket where sbx dials learns nothing from sbx.
 *
 * The client sends a fresh random nonce in Hello.client_nonce and no
 * token; sandboxd answers HelloReply.proof = HMAC-SHA256(secret,
 * SBX_HELLO_CONTEXT || nonce). The context string keeps the MAC from
 * meaning anything in another protocol that might use the same key. Both
 * sides call these; they never fail and are thread-safe. */
#ifndef SBX_AUTH_H
#define SBX_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/hmac.h"

#define SBX_HELLO_CONTEXT "sbx.v1 sandboxd hello proof\n"
#define SBX_HELLO_NONCE_BYTES 32
#define SBX_HELLO_PROOF_BYTES SBX_HMAC_SHA256_BYTES

/* The proof for NONCE under SECRET (LEN bytes) into OUT. */
void sbx_hello_proof(const uint8_t *secret, size_t len,
                     const uint8_t nonce[SBX_HELLO_NONCE_BYTES],
                     uint8_t out[SBX_HELLO_PROOF_BYTES]);
/* True when PROOF (PROOF_LEN bytes, as received) is the proof for NONCE
 * under SECRET; compared in constant time. */
bool sbx_hello_proof_ok(const uint8_t *secret, size_t len,
                        const uint8_t nonce[SBX_HELLO_NONCE_BYTES],
                        const uint8_t *proof, size_t proof_len);

#endif
