/* What the files of controller/snapshot/ share: progress meters, the
 * excludes of a spec, the export reader (snapshot_export.c), and the two
 * stores, a local directory (snapshot_local.c) and HTTP
 * (snapshot_remote.c), that snapshot_save.c and snapshot_restore.c use.
 * Not an API: only the files of this folder include it. Errors as in
 * snapshot.h: 0 or a negative errno, with E filled for a person. */
#ifndef SBX_SNAPSHOT_INTERNAL_H
#define SBX_SNAPSHOT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controller/snapshot/snapshot.h"
#include "shared/client.h"
#include "shared/clock.h"
#include "shared/sha256.h"

#define SNAPSHOT_CHUNK_BYTES (4u << 20) /* export reads and import writes */
#define SNAPSHOT_PROGRESS_EVERY_NS 250000000 /* at most 4 calls a second */

/* A new string A B C; NULL when out of memory. */
char *snapshot_join3(const char *a, const char *b, const char *c);

/* ---- progress ---- */

/* A phase's progress: reports at most every SNAPSHOT_PROGRESS_EVERY_NS,
 * and once when the phase is finished. Inline: called for each chunk. */
struct snapshot_meter {
  snapshot_progress_fn fn;
  void *arg;
  const char *phase;
  uint64_t start_ns, last_ns;
  uint64_t total;
};

/* Starts PHASE of TOTAL bytes (0: not known yet); FN may be NULL. */
static inline void snapshot_meter_begin(struct snapshot_meter *p,
                                        snapshot_progress_fn fn, void *arg,
                                        const char *phase, uint64_t total) {
  *p = (struct snapshot_meter){
      .fn = fn, .arg = arg, .phase = phase, .total = total};
  p->start_ns = p->last_ns = sbx_now_ns();
}

/* DONE bytes and FILES members so far; FINISHED for the last call. */
static inline void snapshot_meter_report(struct snapshot_meter *p,
                                         uint64_t done, uint64_t files,
                                         bool finished) {
  if (!p->fn)
    return;
  uint64_t now = sbx_now_ns();
  if (!finished && now - p->last_ns < SNAPSHOT_PROGRESS_EVERY_NS)
    return;
  p->last_ns = now;
  double secs = (double)(now - p->start_ns) / 1e9;
  struct snapshot_progress sp = {
      .phase = p->phase,
      .bytes_done = done,
      .bytes_total = p->total,
      .files_done = files,
      .rate = secs > 0 ? (double)done / secs : 0,
      .finished = finished,
  };
  p->fn(p->arg, &sp);
}

/* ---- limits (snapshot.c) ---- */

/* LIMITS (may be NULL) with the default for each 0 field. */
struct snapshot_limits
snapshot_limits_or_defaults(const struct snapshot_limits *limits);
/* L as sandboxd's ArchiveLimits (nothing allocated). */
Sbx__V1__ArchiveLimits snapshot_limits_proto(const struct snapshot_limits *l);

/* ---- excludes (snapshot.c) ---- */

struct snapshot_excludes {
  char **v; /* normalized ("." for everything), NULL-terminated */
  size_t n;
};

void snapshot_excludes_free(struct snapshot_excludes *x);
/* Adds the paths of LIST (NULL-terminated, may be NULL), normalized. */
int snapshot_excludes_add(struct snapshot_excludes *x, const char *const *list,
                          struct sbx_error *e);
/* SPEC's excludes (SPEC may be NULL) and EXTRA into *OUT, new. */
int snapshot_excludes_make(const struct snapshot_spec *spec,
                           const char *const *extra,
                           struct snapshot_excludes *out, struct sbx_error *e);

/* ---- export from sandboxd (snapshot_export.c) ---- */

/* A reader thread fetches the next chunks while the caller hashes and
 * writes the current one: sandboxd's reads and our writes overlap. */
#define SNAPSHOT_PREFETCH 2 /* chunks queued ahead */

struct snapshot_exporter {
  struct sbx_client *client;
  uint64_t handle;
  uint64_t total; /* the size given at start; 0 when streamed */
  uint64_t max;   /* the most archive bytes accepted */
  uint64_t off;   /* bytes handed to the caller's chunks so far */
  bool open;
  /* the chunk being handed out */
  Sbx__V1__Response *reply;
  const uint8_t *data;
  size_t len, pos;
  /* the reader thread and its queue, under mu */
  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  Sbx__V1__Response *q[SNAPSHOT_PREFETCH];
  size_t qhead, qcount;
  uint64_t fetched; /* archive bytes fetched by the reader */
  bool eof;         /* the reader has fetched the whole archive */
  /* the eof reply's paths sandboxd left out: new, and how many in all */
  char **skipped;
  size_t nskipped;
  uint64_t skipped_total;
  bool done; /* the reader has stopped: end, error or stop */
  bool stop; /* the caller gave up */
  int err;
  struct sbx_error rerr;
};

/* Starts the export of SB's workspace without EX, in COMP, and its
 * reader. LIM (defaults filled in; NULL: none but sandboxd's own) are the
 * limits a restore applies: sandboxd refuses an export beyond them, and
 * the reader more than LIM->max_input_bytes of archive. STREAM: sandboxd
 * produces the archive while it is read (its size is then unknown until
 * the end). Close X whatever the result. */
int snapshot_export_open(struct snapshot_exporter *x, struct sandbox *sb,
                         const struct snapshot_excludes *ex,
                         enum snapshot_compression comp,
                         const struct snapshot_limits *lim, bool stream,
                         struct sbx_error *e);
/* The next piece of the archive, at most MAX bytes, into *DATA and *LEN;
 * *LEN is 0 at the end. The bytes stay valid until the next call. */
int snapshot_export_next(struct snapshot_exporter *x, size_t max,
                         const uint8_t **data, size_t *len,
                         struct sbx_error *e);
/* Stops the reader and closes the export; X may be half open. */
void snapshot_export_close(struct snapshot_exporter *x);

/* ---- the stores ---- */

/* A save in progress: the export, hashed and reported as it is stored. */
struct snapshot_saver {
  struct snapshot_exporter ex;
  struct sbx_sha256 sha;
  struct snapshot_meter prog;
  struct sbx_error err; /* why the upload callback failed */
};

/* Stores the export of S as <base>/FILE: a temporary file, fsynced and
 * renamed over the previous one; OUT->location is the path. */
int snapshot_local_save(const struct snapshot_spec *spec,
                        struct snapshot_saver *s, const char *file,
                        struct snapshot_record *out, struct sbx_error *e);
/* Opens REC's local archive; the fd. */
int snapshot_local_open(const struct snapshot_record *rec, struct sbx_error *e);
/* Whether REC's local archive is a regular file. */
int snapshot_local_exists(const struct snapshot_record *rec, bool *exists,
                          struct sbx_error *e);

/* PUTs the export of S to SPEC's URL (FILE appended to a prefix);
 * OUT->location is the URL without credentials. */
int snapshot_remote_save(const struct snapshot_spec *spec,
                         struct snapshot_saver *s, const char *file,
                         struct snapshot_record *out, struct sbx_error *e);
/* GETs REC's archive into an unlinked temporary file, at most MAX_INPUT
 * bytes, hashed into SHA on the way; the fd, positioned at 0. */
int snapshot_remote_download(const struct snapshot_spec *spec,
                             const struct snapshot_record *rec,
                             uint64_t max_input, struct sbx_sha256 *sha,
                             struct snapshot_meter *prog, struct sbx_error *e);
/* HEAD of REC's archive: *EXISTS on a 2xx, false on a 404. */
int snapshot_remote_exists(const struct snapshot_spec *spec,
                           const struct snapshot_record *rec, bool *exists,
                           struct sbx_error *e);

#endif
