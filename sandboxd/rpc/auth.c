#include "sandboxd/rpc/auth.h"

#include "shared/auth.h"

/* Only a nonce of the size the proof is defined for asks for one. */
bool rpc_hello_is_challenge(const Sbx__V1__Request *req) {
  return req->body_case == SBX__V1__REQUEST__BODY_HELLO && req->hello &&
         req->hello->client_nonce.len == SBX_HELLO_NONCE_BYTES;
}

/* The proof lives in the call's arena, like the rest of the reply. */
int rpc_hello_prove(struct rpc_call *c, Sbx__V1__HelloReply *h) {
  if (!rpc_hello_is_challenge(c->req) || !c->d->secret)
    return 0;
  uint8_t *p = sbx_arena_alloc_raw(&c->arena, SBX_HELLO_PROOF_BYTES);
  if (!p)
    return -ENOMEM;
  sbx_hello_proof(c->d->secret, c->d->secret_len,
                  c->req->hello->client_nonce.data, p);
  h->proof.data = p;
  h->proof.len = SBX_HELLO_PROOF_BYTES;
  return 0;
}

/* A stranger learns that a sandboxd of protocol 1 is there, which it
 * could tell from the refusal anyway, and a MAC it cannot forge. */
int rpc_hello_challenge(struct rpc_call *c) {
  if (!c->d->secret)
    return rpc_fail(c, SBX_UNAUTHENTICATED, EKEYREJECTED,
                    "wrong or missing token");
  Sbx__V1__HelloReply *h = sbx_arena_new(&c->arena, Sbx__V1__HelloReply);
  if (!h)
    return -ENOMEM;
  sbx__v1__hello_reply__init(h);
  h->version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  int r = rpc_hello_prove(c, h);
  if (r < 0)
    return r;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_HELLO;
  c->resp->hello = h;
  return 0;
}
