/* Private to the archive transfers (transfer.h is the contract), one concern
 * a file, each with its prefix:
 *   xfer_table.c    xfer_     the transfer record, the handle table,
 *                             ArchiveClose, and what every transfer uses
 *                             (the spool, names in messages, libarchive's
 *                             errors)
 *   export_tar.c    export_   a directory tree written as a pax tar
 *   export_links.c  export_   the files with several hard links, and the
 *                             names of those left out
 *   export_rpc.c    export_   ArchiveExportStart and ArchiveExportRead, and
 *                             the producer thread of a streamed export
 *   import_rpc.c              ArchiveImportStart, ArchiveImportWrite and
 *                             ArchiveImportFinish
 *   import_check.c  import_   reading the spool, checking every member
 *                             (pass 1)
 *   extract.c       extract_  writing the checked members (pass 2)
 *   stage.c         stage_    extracting an import while it arrives
 *
 * A transfer is used by the one call that holds it busy (xfer_table_run,
 * xfer_table_insert); the table itself is under its lock. Errors are a
 * negative errno with the sbx_error filled, as in every handler. */
#ifndef SANDBOXD_ARCHIVE_INTERNAL_H
#define SANDBOXD_ARCHIVE_INTERNAL_H

#include <archive.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd/archive/transfer.h"
#include "sandboxd/rpc/rpc.h"
#include "shared/errors.h"
#include "shared/path.h"

#define NAME_SHOWN 200 /* bytes of a name quoted in messages */
/* Member names and symlink targets of one archive, NUL-terminated: what an
 * import keeps of them (1 000 000 members of 256 bytes), and so what an
 * export may produce. */
#define NAME_POOL_MAX (256u << 20)

/* ---- export: hard links and what is left out (export_links.c) ---- */

/* A file with more than one link met in the walk, and its paths there. */
struct export_link {
  dev_t dev;
  ino_t ino;
  uint32_t seen;       /* its links met in the exported tree */
  uint32_t head, tail; /* its paths, in the order met */
};

struct export_link_path {
  uint32_t off;  /* in the pool */
  uint32_t next; /* the next path of the same file, or UINT32_MAX */
};

/* The files with more than one link, in the order they were met. */
struct export_links {
  struct export_link *v;
  size_t n, cap;
  uint32_t *ht; /* index + 1, by identity */
  size_t htcap;
  struct export_link_path *paths;
  size_t np, pathcap;
  char *pool;
  size_t plen, pcap;
};

/* Records PATH as a link of the file DEV/INO: 0, -ENOMEM, or -E2BIG past
 * NAME_POOL_MAX bytes of paths. */
int export_links_note(struct export_links *l, dev_t dev, ino_t ino,
                      const char *path);
/* K's next path after *AT (UINT32_MAX: from the first; updated), or NULL
 * after the last. Borrowed from L. */
const char *export_links_path(const struct export_links *l,
                              const struct export_link *k, uint32_t *at);
void export_links_fini(struct export_links *l);

#define EXPORT_SKIPPED_SHOWN 100         /* names reported */
#define EXPORT_SKIPPED_BYTES (64u << 10) /* and their bytes at most */

/* The paths an export left out (files with links outside the tree): the
 * first EXPORT_SKIPPED_SHOWN of them, printable, and how many in all. */
struct export_skipped {
  char **names; /* new, valid UTF-8 without control bytes */
  size_t n, cap;
  size_t bytes;
  uint64_t total;
};

/* Adds PATH (counted; named while there is room); 0 or -ENOMEM. */
int export_skipped_add(struct export_skipped *s, const char *path);
void export_skipped_fini(struct export_skipped *s);

/* ---- transfers and the table (xfer_table.c) ---- */

struct stage;   /* stage.c */
struct xstream; /* below */

enum xfer_kind { XFER_EXPORT, XFER_IMPORT };
enum xfer_state { XFER_OPEN, XFER_DONE, XFER_FAILED };

struct xfer_limits {
  uint64_t members;
  uint64_t input_bytes;
  uint64_t extracted_bytes;
};

/* The limits of a transfer into OUT: the server's L, each lowered (never
 * raised) by the client's AL (may be NULL; a 0 field keeps the server's). */
void xfer_limits_make(const struct sandboxd_limits *l,
                      const Sbx__V1__ArchiveLimits *al,
                      struct xfer_limits *out);

struct xfer {
  uint64_t handle;
  enum xfer_kind kind;
  enum xfer_state state;
  bool busy;              /* a call is using it; under the table's lock */
  uint64_t last_ms;       /* last use, for idle expiry */
  uint32_t pipe;          /* the connection of its last call (0: none) */
  uint64_t orphan_ms;     /* when that connection closed; 0: open */
  int spool_fd;           /* the unlinked archive file; -1 once finished */
  uint64_t size;          /* export: archive bytes; import: bytes received */
  struct xstream *stream; /* a streamed export; NULL otherwise */
  struct export_skipped skipped; /* export not streamed: what it left out */
  /* import only */
  int dest_fd; /* O_PATH|O_DIRECTORY of the destination */
  struct xfer_limits lim;
  Sbx__V1__Compression compression;
  struct stage *stage;         /* extraction while it arrives, or NULL */
  uint64_t members, extracted; /* the finish reply, once done */
  struct sbx_error fail;       /* why it failed, once failed */
  struct xfer *next;           /* on the graveyard list */
};

struct archive_table {
  pthread_mutex_t mu;
  struct xfer **slots;
  uint32_t nslots;
  uint64_t idle_ms;
  struct xfer *graveyard; /* closed, freed by the next blocking call */
  unsigned waiting;       /* reads waiting for a streamed export */
  bool stopping;          /* archive_table_stop was called */
};

/* Frees X and what it holds (its producer or staging thread is stopped and
 * joined first). Accepts NULL; returns NULL. */
struct xfer *xfer_free(struct xfer *x);
/* The table for one call; errors (CONFLICT, NOT_FOUND, LIMIT_EXCEEDED) are
 * filled into C. check: the daemon has a table. insert: adds X (busy, the
 * caller's) under a new random handle. release: X is no longer busy.
 * remove: takes X (held busy) out and frees it. */
int xfer_table_check(struct rpc_call *c);
int xfer_table_insert(struct rpc_call *c, struct xfer *x);
void xfer_table_release(struct rpc_call *c, struct xfer *x);
void xfer_table_remove(struct rpc_call *c, struct xfer *x);
/* A call's work on the transfer X it holds busy; RQ is its request. */
typedef int (*xfer_fn)(struct rpc_call *c, struct xfer *x, const void *rq);
/* Finds HANDLE of KIND and holds it busy while FN works on it for C:
 * FN's result. */
int xfer_table_run(struct rpc_call *c, uint64_t handle, enum xfer_kind kind,
                   xfer_fn fn, const void *rq);

/* NAME for a message, in OUT: at most NAME_SHOWN bytes, control and
 * non-ASCII bytes as '?'. Returns OUT. */
const char *xfer_shown(const char *name, char out[NAME_SHOWN + 4]);
/* An unlinked temporary file for a spool (new fd), or -errno with E set. */
int xfer_spool_open(struct sbx_error *e);
/* libarchive's error on A, WHAT first, into E: INVALID_ARGUMENT for the
 * archive's faults, the errno for the system's. Returns -errno. */
int xfer_la_fail(struct sbx_error *e, struct archive *a, const char *what);
/* P grown to hold NEED items of SIZE bytes (*CAP updated), doubling from
 * 64; NULL on OOM, P then unchanged. */
void *xfer_grow(void *p, size_t *cap, size_t need, size_t size);

/* ---- export (export_tar.c, export_rpc.c) ---- */

/* A streamed export: a producer thread writes the archive into the spool
 * while reads serve what it has written. */
struct xstream {
  pthread_t thread;
  bool started; /* the thread runs or ran: join it */
  bool cancel;  /* atomic: stop producing (close, expiry, shutdown) */
  /* the producer's job; its own until it is done */
  struct xfer_limits lim;
  int dir_fd;
  int spool_fd; /* borrowed from the transfer */
  char *excl_pool;
  char **excl;
  size_t nexcl;
  int level;
  /* under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t produced; /* bytes in the spool */
  uint64_t wake_at;  /* a waiting read wants this many */
  bool waiting;
  bool done;                     /* the producer has finished */
  int err;                       /* its result, once done */
  struct sbx_error fail;         /* why it failed */
  struct export_skipped skipped; /* the producer's; read once done */
};

/* Writes the archive of DIR_FD, less the NEXCL excluded paths EXCL, into
 * OUT_FD (zstd at ZSTD_LEVEL when > 0) within the limits L, which are an
 * import's (members, names, data, archive bytes): what it writes, an import
 * with L accepts. Files whose other hard links lie outside the tree are
 * left out and named in SKIPPED. Its size in *TOTAL. With STREAM, publishes
 * progress there and stops on its cancel. */
int export_tree(const struct xfer_limits *l, struct sbx_error *e, int dir_fd,
                int out_fd, char **excl, size_t nexcl, int zstd_level,
                struct xstream *stream, struct export_skipped *skipped,
                uint64_t *total);
/* Tells S's producer to stop at its next write; does not wait. */
void export_stream_cancel(struct xstream *s);
/* Stops and joins S's producer, frees S. Accepts NULL; returns NULL. */
struct xstream *export_stream_free(struct xstream *s);

/* ---- import: checking (import_check.c) ---- */

enum mtype { M_SELF, M_DIR, M_REG, M_SYMLINK, M_HARDLINK };

struct member {
  uint32_t path;   /* offset of the normalized path in the pool */
  uint32_t plen;   /* its length */
  uint32_t link;   /* symlink target (as given) or hardlink target
                      (normalized), offset in the pool */
  uint32_t target; /* hardlink: index of the regular file it links to */
  uint8_t type;
  bool has_mtime;
  mode_t mode;
  uint32_t uid, gid;
  int64_t mtime;
  long mtime_ns;
  uint64_t size;
};

/* One import's members as they are checked, then extracted. */
struct importer {
  struct xfer *x;
  int base; /* where members are made: the destination or a staging dir */
  struct sandboxd *d;
  struct sbx_error *e;
  struct member *m;
  size_t n, cap;
  char *pool;
  size_t plen, pcap;
  uint32_t *ht; /* member index + 1, by path */
  size_t htcap;
  const void *map; /* the spool, mapped read-only; NULL: read it with read(2) */
  size_t maplen;
  bool fresh;     /* the destination was empty: nothing to replace */
  uint64_t total; /* sum of sizes in the headers */
  /* pass 2 */
  char parent[SBX_PATH_MAX]; /* the directory cached in pfd */
  int pfd;
  uint64_t written;
};

/* Member I's normalized path (borrowed from the pool). */
static inline const char *import_path(const struct importer *im, size_t i) {
  return im->pool + im->m[i].path;
}

/* The member whose path is S (N bytes), or -1. */
ssize_t import_lookup(const struct importer *im, const char *s, size_t n);
/* Normalizes a member's name (or a hardlink's target) RAW into OUT
 * (SBX_PATH_MAX bytes): relative, no "..", "" for the archive's root. WHAT
 * and WHO name the member for messages. */
int import_norm(struct importer *im, const char *raw, char *out,
                const char *what, const char *who);
/* Maps the spool read-only into im->map when it can. */
void import_map(struct importer *im);
/* Frees what IM holds (the mapping, the members, their names). */
void import_fini(struct importer *im);
/* A reader of the formats and filters allowed, not open yet. */
int import_archive(struct importer *im, struct archive **out);
/* import_archive, opened on the spool (the mapping, else the fd). */
int import_reader(struct importer *im, struct archive **out);
/* The next header from A into *ENT: 1, or 0 at the end. */
int import_next(struct importer *im, struct archive *a,
                struct archive_entry **ent);
/* The next block of member I's data from A: 1 and the block (BUF, LEN
 * bytes at OFF), 0 at its end. *END is where the member's blocks so far
 * end (0 before its first): a block outside the member's size, or one
 * that starts before *END (a sparse map whose regions overlap or go
 * backwards, which libarchive hands out as they are), is refused. */
int import_data_block(struct importer *im, struct archive *a, size_t i,
                      const void **buf, size_t *len, uint64_t *off,
                      uint64_t *end);
/* Checks the header ENT just read from A against the limits and records
 * it as member im->n - 1. */
int import_take(struct importer *im, struct archive *a,
                struct archive_entry *ent);
/* The check that needs every member: nothing beneath a symlink or a
 * file. */
int import_check_tree(struct importer *im);
/* Whether the directory DIR_FD has no entries; 0 or -errno. */
int import_dir_is_empty(int dir_fd, bool *empty);
/* Pass 1: reads every header and file's data blocks, and refuses the
 * archive unless all are fine. */
int import_check(struct importer *im);

/* ---- import: extracting (extract.c) ---- */

/* The parent directory of member I (borrowed, in *PFD; made as needed)
 * and the member's last component in *NAME. */
int extract_parent(struct importer *im, size_t i, int *pfd, const char **name);
/* Writes member I, a regular file NAME in PFD, as its data are read from
 * A. */
int extract_file(struct importer *im, struct archive *a, size_t i, int pfd,
                 const char *name);
/* Creates member I, a directory or a link, in its parent. */
int extract_make(struct importer *im, size_t i);
/* Creates every symbolic and hard link member, in the archive's order. */
int extract_links(struct importer *im);
/* Applies directory members' modes, owners and times, deepest first. */
int extract_dir_meta(struct importer *im);
/* Pass 2: extracts the members pass 1 checked. */
int extract_all(struct importer *im);

/* ---- import: extraction while it arrives (stage.c) ---- */

/* Starts extracting X while it arrives when its destination (the client's
 * PATH) is empty; names the staging directory in *STAGING_PATH (in C's
 * arena). On any failure X is left to the two passes. */
void stage_start(struct rpc_call *c, struct xfer *x, const char *path,
                 char **staging_path);
/* Tells the thread that the spool holds SIZE bytes. */
void stage_feed(struct stage *s, uint64_t size);
/* Tells the thread to stop at its next read; does not wait. */
void stage_cancel(struct stage *s);
/* The finish: 1 done (the counts in the transfer), 0 when the two passes
 * must decide, or the failure of the last step. */
int stage_finish(struct stage *s, struct rpc_call *c);
/* Stops the thread, removes the staging directory, frees S. Accepts NULL;
 * returns NULL. */
struct stage *stage_free(struct stage *s);

#endif
