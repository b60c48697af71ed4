/* Host-side trees and tar archives for the sandboxd archive RPCs: the fast
 * path of local_dir and git_repo materialization and of `sbx sandbox cp`.
 *
 * A host tree is scanned beneath an open directory fd without following
 * symlinks; each file is opened again beneath that fd (RESOLVE_BENEATH,
 * no symlinks) and its device and inode re-checked, so a tree swapped
 * while it is copied is an error, never a read outside it.
 *
 * Nothing here is thread-safe on one object; distinct objects may be used
 * from distinct threads. */
#ifndef SBX_TARBALL_H
#define SBX_TARBALL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "shared/client.h"
#include "shared/errors.h"

#define TARBALL_MAX_ITEMS 1000000
#define TARBALL_CHUNK (4u << 20) /* bytes per archive or file RPC */

struct host_item {
  char *src;  /* path beneath the tree's root fd */
  char *name; /* the member name ("" never: a tree's root is not an item) */
  struct stat st;
  char *link; /* symlink target */
};

struct host_tree {
  int root_fd;             /* borrowed */
  struct host_item *items; /* parents before children */
  size_t n, cap;
};

enum {
  HOST_TREE_REFUSE_SYMLINKS = 1 << 0, /* local_dir: a symlink is an error */
  HOST_TREE_SKIP_OTHER = 1 << 1,      /* skip fifos, sockets, devices */
  HOST_TREE_SKIP_GIT = 1 << 2,        /* leave out a top-level ".git" */
};

/* Scans the directory SRC beneath ROOT_FD ("." for ROOT_FD itself) into T,
 * naming members PREFIX/<relative path> (PREFIX "" for none). WHAT names
 * the source in messages. */
int host_tree_scan(struct host_tree *t, int root_fd, const char *src,
                   const char *prefix, unsigned flags, const char *what,
                   struct sbx_error *e);
/* Adds the single file, directory or symlink SRC beneath ROOT_FD as member
 * NAME (a directory is added alone, without its contents). */
int host_tree_add(struct host_tree *t, int root_fd, const char *src,
                  const char *name, struct sbx_error *e);
void host_tree_free(struct host_tree *t);

/* Opens IT's file for reading, checking it is still the file scanned. */
int host_item_open(const struct host_tree *t, const struct host_item *it,
                   const char *what, struct sbx_error *e);

/* Writes T as a pax tar into a new unlinked temp file: members owned by
 * UID:GID, modes as on the host (without setuid/setgid). *FD is new. */
int tarball_build(const struct host_tree *t, uint32_t uid, uint32_t gid,
                  const char *what, int *fd, uint64_t *size,
                  struct sbx_error *e);

/* Sends the archive in FD (SIZE bytes) to sandboxd and extracts it into the
 * sandbox directory DEST (created if missing); the transfer is closed at
 * the end, done or not. Names are written as their bytes (pax hdrcharset
 * BINARY), whatever the locale. */
struct progress_meter;
/* PROGRESS (may be NULL) hears of the bytes sent or received. */
int tarball_push(struct sbx_client *c, int fd, uint64_t size, const char *dest,
                 struct progress_meter *progress, struct sbx_error *e);

/* Exports the sandbox directory SRC and extracts its contents into the host
 * directory HOST_DEST (which must exist), keeping modes, times and
 * symlinks, not owners. Member names, types and sizes are checked first:
 * the sandbox is not trusted. *FILES counts regular files (may be NULL). */
int tarball_pull(struct sbx_client *c, const char *src, const char *host_dest,
                 struct progress_meter *progress, uint64_t *files,
                 struct sbx_error *e);

/* True when E says sandboxd does not serve the archive RPCs. */
bool tarball_unsupported(int r, const struct sbx_error *e);

#endif
