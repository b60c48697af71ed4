#include "dispatch.h"

#define B(x) SBX__V1__REQUEST__BODY_##x

static const struct rpc_entry table[] = {
    [B(HELLO)] = {rpc_hello, 0, "hello"},
    [B(SHUTDOWN)] = {rpc_shutdown, RPC_MUTATING, "shutdown"},
};

const struct rpc_entry *dispatch_lookup(Sbx__V1__Request__BodyCase body) {
  if ((unsigned)body >= sizeof(table) / sizeof(table[0]))
    return NULL;
  if (!table[body].handler)
    return NULL;
  return &table[body];
}
