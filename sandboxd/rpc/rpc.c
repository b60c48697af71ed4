/* The parts of the handler contract (rpc.h) that are code. */
#include "sandboxd/rpc/rpc.h"

int rpc_reply_empty(struct rpc_call *c, Sbx__V1__Response__BodyCase which) {
  Sbx__V1__Empty *em = sbx_arena_new(&c->arena, Sbx__V1__Empty);
  if (!em)
    return -ENOMEM;
  sbx__v1__empty__init(em);
  c->resp->body_case = which;
  c->resp->shutdown = em; /* every Empty member shares the union slot */
  return 0;
}
