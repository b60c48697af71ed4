#include "sandboxd/server/dispatch.h"

#include "sandboxd/archive/transfer.h"
#include "sandboxd/fs/files.h"
#include "sandboxd/patch/patch_rpc.h"
#include "sandboxd/proc/proc.h"
#include "sandboxd/stats/stats.h"
#include "sandboxd/users/users.h"

#define B(x) SBX__V1__REQUEST__BODY_##x

static const struct rpc_entry table[] = {
    /* Hello and Stats are what `sbx sandbox ls`, info and stats send:
     * looking at a sandbox does not keep it from being idle. */
    [B(HELLO)] = {rpc_hello, RPC_QUIET, "hello"},
    [B(SHUTDOWN)] = {rpc_shutdown, RPC_MUTATING, "shutdown"},

    /* A retried start, write, signal or release must not happen twice:
     * cached. Reads, resize and list are safe to repeat. Reads may park. */
    [B(EXEC_START)] = {rpc_exec_start, RPC_BLOCKING | RPC_MUTATING,
                       "exec_start"},
    [B(EXEC_READ)] = {rpc_exec_read, 0, "exec_read"},
    [B(EXEC_WRITE)] = {rpc_exec_write, RPC_MUTATING, "exec_write"},
    [B(EXEC_SIGNAL)] = {rpc_exec_signal, RPC_MUTATING, "exec_signal"},
    [B(EXEC_RESIZE)] = {rpc_exec_resize, 0, "exec_resize"},
    [B(EXEC_LIST)] = {rpc_exec_list, 0, "exec_list"},
    [B(EXEC_RELEASE)] = {rpc_exec_release, RPC_MUTATING, "exec_release"},

    [B(FILE_STAT)] = {rpc_file_stat, RPC_BLOCKING, "file_stat"},
    [B(FILE_READ)] = {rpc_file_read, RPC_BLOCKING, "file_read"},
    [B(FILE_WRITE)] = {rpc_file_write, RPC_BLOCKING | RPC_MUTATING,
                       "file_write"},
    [B(FILE_LIST)] = {rpc_file_list, RPC_BLOCKING, "file_list"},
    [B(FILE_MKDIR)] = {rpc_file_mkdir, RPC_BLOCKING | RPC_MUTATING,
                       "file_mkdir"},
    [B(FILE_REMOVE)] = {rpc_file_remove, RPC_BLOCKING | RPC_MUTATING,
                        "file_remove"},
    [B(FILE_RENAME)] = {rpc_file_rename, RPC_BLOCKING | RPC_MUTATING,
                        "file_rename"},
    [B(FILE_CHMOD)] = {rpc_file_chmod, RPC_BLOCKING | RPC_MUTATING,
                       "file_chmod"},
    [B(FILE_CHOWN)] = {rpc_file_chown, RPC_BLOCKING | RPC_MUTATING,
                       "file_chown"},
    [B(FILE_EXISTS)] = {rpc_file_exists, RPC_BLOCKING, "file_exists"},

    [B(PATCH_APPLY)] = {rpc_patch_apply, RPC_BLOCKING | RPC_MUTATING,
                        "patch_apply"},

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

    [B(USERS_ENSURE)] = {rpc_users_ensure, RPC_BLOCKING | RPC_MUTATING,
                         "users_ensure"},

    /* Reads cgroup and /proc files, walks the workspace. */
    [B(STATS)] = {rpc_stats, RPC_BLOCKING | RPC_QUIET, "stats"},
};

const struct rpc_entry *dispatch_lookup(Sbx__V1__Request__BodyCase body) {
  if ((unsigned)body >= sizeof(table) / sizeof(table[0]))
    return NULL;
  if (!table[body].handler)
    return NULL;
  return &table[body];
}

void dispatch_worker_init(struct sandboxd *d) {
  proc_thread_init(d->procs);
}
