/* File RPCs. Every path goes through resolve.h; all are blocking (they run
 * on the worker pool). */
#ifndef SANDBOXD_FILES_H
#define SANDBOXD_FILES_H

#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/rpc/rpc.h"

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

/* Helpers the patch and archive code share with the file RPCs. */

#define FILES_MAX_DEPTH 256 /* directory levels a recursive RPC descends */

/* Fills C's error for ERR (positive) met on the client's PATH and returns
 * -ERR. WHAT names the operation ("cannot remove") or is NULL. */
int files_fail_path(struct rpc_call *c, int err, const char *what,
                    const char *path);
/* The same into E. */
int files_fail_path_e(struct sbx_error *e, int err, const char *what,
                      const char *path);
/* rm -r of the directory NAME in DIR_FD, never following a symbolic link,
 * at most FILES_MAX_DEPTH levels deep; PATH names it in errors. 0 or -errno. */
int files_remove_tree(int dir_fd, const char *name, const char *path,
                      struct sbx_error *e);
/* mkdir -p of REL beneath BASE (each level opened beneath BASE again, so
 * no symlink leads out); returns an O_PATH fd of REL. PATH names it in
 * errors. */
int files_mkdir_p(struct rpc_call *c, int base, const char *rel, mode_t mode,
                  const char *path);
/* Writes all of DATA at OFF (appending when OFF < 0); 0 or -errno. */
int files_write_all(int fd, const uint8_t *data, size_t len, int64_t off);

#endif
