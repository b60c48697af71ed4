/* PatchApply: a "*** Begin Patch" text (shared/patch.h parses and plans it)
 * applied to the workspace all or nothing over every file of the patch.
 * Blocking (file I/O): runs on the worker pool. */
#ifndef SANDBOXD_PATCH_RPC_H
#define SANDBOXD_PATCH_RPC_H

#include "sandboxd/rpc/rpc.h"

int rpc_patch_apply(struct rpc_call *c);

#endif
