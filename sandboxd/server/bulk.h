/* A reply with a bulk field (rpc.h), packed by the server. */
#ifndef SANDBOXD_SERVER_BULK_H
#define SANDBOXD_SERVER_BULK_H

#include <nng/nng.h>

#include "sandboxd/rpc/rpc.h"

/* Packs RESP, whose CALL->bulk field is to be read, into *OUT, a new
 * message of N bytes (RESP's packed size): 0. After a short read (the file
 * shrank) the field holds what was read, copied to CALL's arena, and its
 * eof is set; after a failed read RESP is the error (in ERROR and CALL's
 * err): 1, pack again without the bulk. -ENOMEM. Closes nothing: the fd
 * stays CALL's until the call is reset. */
int server_pack_bulk(Sbx__V1__Response *resp, Sbx__V1__Error *error,
                     struct rpc_call *call, size_t n, nng_msg **out);

#endif
