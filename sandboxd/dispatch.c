#include "dispatch.h"

#include "archive.h"

#define B(x) SBX__V1__REQUEST__BODY_##x

static const struct rpc_entry table[] = {
    [B(HELLO)] = {rpc_hello, 0, "hello"},
    [B(SHUTDOWN)] = {rpc_shutdown, RPC_MUTATING, "shutdown"},
    /* Import writes are idempotent by offset and not cached; export reads
     * carry data and are plain reads. */
    [B(ARCHIVE_EXPORT_START)] = {rpc_archive_export_start,
                                 RPC_BLOCKING | RPC_MUTATING,
                                 "archive_export_start"},
    [B(ARCHIVE_EXPORT_READ)] = {rpc_archive_export_read, RPC_BLOCKING,
                                "archive_export_read"},
    [B(ARCHIVE_IMPORT_START)] = {rpc_archive_import_start,
                                 RPC_BLOCKING | RPC_MUTATING,
                                 "archive_import_start"},
    [B(ARCHIVE_IMPORT_WRITE)] = {rpc_archive_import_write, RPC_BLOCKING,
                                 "archive_import_write"},
    [B(ARCHIVE_IMPORT_FINISH)] = {rpc_archive_import_finish,
                                  RPC_BLOCKING | RPC_MUTATING,
                                  "archive_import_finish"},
    [B(ARCHIVE_CLOSE)] = {rpc_archive_close, RPC_MUTATING, "archive_close"},
};

const struct rpc_entry *dispatch_lookup(Sbx__V1__Request__BodyCase body) {
  if ((unsigned)body >= sizeof(table) / sizeof(table[0]))
    return NULL;
  if (!table[body].handler)
    return NULL;
  return &table[body];
}
