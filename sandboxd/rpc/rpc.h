/* The contract between the server loop (server.c) and the RPC handlers
 * (files.c, proc.c, patch_rpc.c, archive.c, users.c, ...).
 *
 * A handler gets a struct rpc_call: the decoded request (borrowed), a
 * response to fill and an arena for everything the response points to. It
 * returns:
 *   0            the response body is set; the server sends it;
 *   < 0          a negative errno; c->err says why (when c->err.code is OK
 *                the server derives the code from the errno);
 *   RPC_PENDING  the handler kept C (a long-poll) and will finish it with
 *                rpc_complete() later, from any thread, exactly once.
 *
 * Handlers flagged RPC_BLOCKING run on the worker pool and may do file I/O;
 * the others run on an nng callback thread and must not block. */
#ifndef SANDBOXD_RPC_H
#define SANDBOXD_RPC_H

#include <errno.h>

#include "sandboxd.pb-c.h"
#include "sandboxd/rpc/sandboxd.h"
#include "shared/arena.h"
#include "shared/errors.h"

#define RPC_PENDING 1

/* A mutating request's reply is kept for retries when it packs to at most
 * this; a larger one is not, and a retry runs the request again. */
#define RPC_CACHE_REPLY_MAX (256u << 10)

/* A reply's bytes field read from a file only when the reply is packed,
 * straight into the message that is sent (no copy through the arena). A
 * handler may set it when c->bulk_ok; the server then owns FD and closes it.
 * On a short read (the file shrank) the field holds what was read and *EOF
 * is set, as if the handler had read it. */
struct rpc_bulk {
  ProtobufCBinaryData *field; /* len: the bytes to read; data: NULL */
  int fd;                     /* -1: none */
  uint64_t offset;
  protobuf_c_boolean *eof;
};

struct rpc_call {
  struct sandboxd *d;
  const Sbx__V1__Request *req; /* borrowed until the reply is sent */
  Sbx__V1__Response *resp;     /* set resp->body_case and the body */
  struct sbx_arena arena;      /* reply allocations, freed after sending */
  struct sbx_error err;
  /* Set by the server (or a test): finishes a pending call. */
  void (*complete)(struct rpc_call *c, int r);
  void *server_data; /* the server's; handlers leave it alone */
  uint32_t pipe;     /* the connection the request came on (nng's pipe id;
                        0: none, as from a test) */
  bool bulk_ok;      /* set by the server: it packs c->bulk */
  struct rpc_bulk bulk;
};

/* Finishes a call a handler returned RPC_PENDING for. R as a handler's
 * return value (0 or a negative errno, never RPC_PENDING). Thread-safe;
 * C must not be touched afterwards. */
static inline void rpc_complete(struct rpc_call *c, int r) {
  c->complete(c, r);
}

/* Fills c->err and returns the negative errno, for one-line error returns. */
#define rpc_fail(c, code, errno_, ...)                                         \
  sbx_error_set(&(c)->err, (code), (errno_), __VA_ARGS__)

/* C's request body, the one-of member FIELD, when the body is of CASE;
 * else NULL (a request built without one reaches a handler only from a
 * test or a fuzzer: the server dispatches on the body case). */
#define RPC_BODY(c, CASE, field)                                               \
  ((c)->req->body_case == SBX__V1__REQUEST__BODY_##CASE ? (c)->req->field      \
                                                        : NULL)

/* The failure for a request without the handler's body. */
static inline int rpc_no_body(struct rpc_call *c) {
  return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "missing request body");
}

/* An empty body for RPCs that reply with Empty; returns 0 or -ENOMEM. */
int rpc_reply_empty(struct rpc_call *c, Sbx__V1__Response__BodyCase which);

#endif
