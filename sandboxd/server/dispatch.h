/* The table that maps a request body to its handler. */
#ifndef SANDBOXD_DISPATCH_H
#define SANDBOXD_DISPATCH_H

#include "sandboxd/rpc/rpc.h"

enum {
  RPC_BLOCKING = 1 << 0, /* run on the worker pool */
  RPC_MUTATING = 1 << 1, /* replies are cached by request id */
  RPC_QUIET = 1 << 2,    /* not activity: an idle sandbox stays idle */
};

struct rpc_entry {
  int (*handler)(struct rpc_call *c);
  unsigned flags;
  const char *name; /* for logs */
};

/* The entry for a request body, or NULL when this sandboxd does not serve
 * it. */
const struct rpc_entry *dispatch_lookup(Sbx__V1__Request__BodyCase body);

/* Prepares a worker-pool thread for the blocking handlers it will run:
 * ExecStart's children inherit the seccomp filter loaded here
 * (proc_thread_init). Called once by each worker at its start. */
void dispatch_worker_init(struct sandboxd *d);

/* Handlers that live in the server itself. */
int rpc_hello(struct rpc_call *c);
int rpc_shutdown(struct rpc_call *c);

#endif
