/* File RPCs. Every path goes through resolve.h; all are blocking (they run
 * on the worker pool). */
#ifndef SANDBOXD_FILES_H
#define SANDBOXD_FILES_H

#include "rpc.h"

int rpc_file_stat(struct rpc_call *c);
int rpc_file_read(struct rpc_call *c);
int rpc_file_write(struct rpc_call *c);
int rpc_file_list(struct rpc_call *c);
int rpc_file_mkdir(struct rpc_call *c);
int rpc_file_remove(struct rpc_call *c);
int rpc_file_rename(struct rpc_call *c);
int rpc_file_chmod(struct rpc_call *c);
int rpc_file_chown(struct rpc_call *c);
int rpc_file_exists(struct rpc_call *c);

/* Patch (patch_rpc.c): all or nothing over every file of the patch. */
int rpc_patch_apply(struct rpc_call *c);

/* Users (users.c): create missing groups and users, root only. */
int rpc_users_ensure(struct rpc_call *c);

#endif
