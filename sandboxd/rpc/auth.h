/* sandboxd's side of Hello's proof (shared/auth.h): it proves that it
 * holds the sandbox's secret to a client that asks, before that client
 * sends the token. The secret is the daemon's (struct sandboxd's secret,
 * borrowed for the daemon's life); without one nothing is proved and a
 * challenge is refused like any request without the token. */
#ifndef SANDBOXD_RPC_AUTH_H
#define SANDBOXD_RPC_AUTH_H

#include <stdbool.h>

#include "sandboxd/rpc/rpc.h"

/* True when REQ is a Hello that asks for a proof: it carries a client
 * nonce of SBX_HELLO_NONCE_BYTES. Such a Hello is answered also without
 * the token (rpc_hello_challenge). */
bool rpc_hello_is_challenge(const Sbx__V1__Request *req);

/* Puts into H (a HelloReply being filled for C) the proof for C's nonce,
 * when C's request asks for one; arena memory. 0 or -ENOMEM. */
int rpc_hello_prove(struct rpc_call *c, Sbx__V1__HelloReply *h);

/* Answers a challenge from a peer that did not present the token: the
 * protocol version and the proof, nothing else it could use (no root,
 * limits, features, grants or ids). -EKEYREJECTED (UNAUTHENTICATED, as for
 * any request without the token) when the daemon has no secret. */
int rpc_hello_challenge(struct rpc_call *c);

#endif
