/* Where the root run's state is kept (run_state.c decides what): a state
 * file STATE-DIR/runs/ID.json with its journal ID.json.items beside it, or,
 * with run_options.store (sbx serve), the run's row of the state store and
 * its journal chunks there, so that any server on the same database can
 * go on with the run. A journal append is one write (a file) or one row
 * (the store): a kill leaves at most a partial last line of a file, and
 * none in the store. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/run/run_internal.h"
#include "controller/state/store.h"
#include "shared/fileio.h"

#define JOURNAL_PATH_MAX 4300

/* The journal's path beside the state file PATH. */
static void journal_path(const char *path, char out[JOURNAL_PATH_MAX]) {
  (void)snprintf(out, JOURNAL_PATH_MAX, "%s.items", path);
}

int rs_io_begin(struct shared *sh, struct sbx_error *e) {
  const struct run_options *o = sh->o;
  if (o->store) {
    (void)snprintf(sh->rs_path, sizeof(sh->rs_path), "run_%s", sh->run_id);
    /* A run that starts again from nothing (one that was stopped before
     * its first step was saved) drops what its first try appended. */
    return store_state_clear(o->store, sh->rs_path, e);
  }
  char dir[4200];
  int n = snprintf(dir, sizeof(dir), "%s/runs", o->state_dir);
  if (n < 0 || (size_t)n >= sizeof(dir))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "state directory path too long");
  if (mkdir(dir, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %s", dir,
                         strerror(errno));
  n = snprintf(sh->rs_path, sizeof(sh->rs_path), "%s/%s.json", dir, sh->run_id);
  if (n < 0 || (size_t)n >= sizeof(sh->rs_path))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "state directory path too long");
  return 0;
}

int rs_io_append(struct shared *sh, const char *text, size_t len,
                 struct sbx_error *e) {
  if (sh->o->store)
    return store_journal_append(sh->o->store, sh->rs_path, text, len, e);
  char jpath[JOURNAL_PATH_MAX];
  journal_path(sh->rs_path, jpath);
  pthread_mutex_lock(&sh->rs_mu);
  int r = 0;
  if (sh->rs_jfd < 0) {
    sh->rs_jfd = open(jpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (sh->rs_jfd < 0)
      r = -errno;
  }
  if (r == 0)
    r = sbx_write_all(sh->rs_jfd, text, len);
  pthread_mutex_unlock(&sh->rs_mu);
  if (r < 0)
    return sbx_error_set(e, SBX_INTERNAL, -r,
                         "cannot write the run journal \"%s\": %s", jpath,
                         strerror(-r));
  return 0;
}

int rs_io_put(struct shared *sh, const char *text, size_t len,
              struct sbx_error *e) {
  if (sh->o->store)
    return store_state_put(sh->o->store, sh->rs_path, text, len, e);
  int r = sbx_write_file_replace(sh->rs_path, text, len, 0600);
  if (r < 0)
    return sbx_error_set(e, SBX_INTERNAL, -r,
                         "cannot write the run state \"%s\": %s", sh->rs_path,
                         strerror(-r));
  return 0;
}

int rs_io_read(struct shared *sh, const char *where, size_t max, char **state,
               size_t *slen, char **journal, size_t *jlen,
               struct sbx_error *e) {
  *state = *journal = NULL;
  *slen = *jlen = 0;
  (void)snprintf(sh->rs_path, sizeof(sh->rs_path), "%s", where);
  struct store *st = sh->o->store;
  if (st) {
    int r = store_state_get(st, where, state, slen, e);
    if (r == 0 && *slen == 0)
      r = sbx_error_set(e, SBX_NOT_FOUND, ENOENT, "run %s has no state", where);
    if (r == 0)
      r = store_journal_read(st, where, max, journal, jlen, e);
    return r;
  }
  int r = sbx_read_file(where, max, state, slen);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read run state \"%s\": %s",
                         where, strerror(-r));
  char jpath[JOURNAL_PATH_MAX];
  journal_path(where, jpath);
  r = sbx_read_file(jpath, max, journal, jlen);
  if (r == -ENOENT) {
    *journal = strdup("");
    r = *journal ? 0 : -ENOMEM;
  }
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r,
                         "cannot read the run journal "
                         "\"%s\": %s",
                         jpath, strerror(-r));
  return 0;
}

int rs_io_cut(struct shared *sh, size_t keep, struct sbx_error *e) {
  if (sh->o->store)
    return store_journal_cut(sh->o->store, sh->rs_path, keep, e);
  char jpath[JOURNAL_PATH_MAX];
  journal_path(sh->rs_path, jpath);
  if (truncate(jpath, (off_t)keep) < 0 && errno != ENOENT)
    return sbx_error_set(e, SBX_INTERNAL, errno,
                         "cannot cut the run journal \"%s\": %s", jpath,
                         strerror(errno));
  return 0;
}

void rs_io_close(struct shared *sh) {
  if (sh->rs_jfd >= 0)
    (void)close(sh->rs_jfd);
  sh->rs_jfd = -1;
}

void rs_io_remove(struct shared *sh) {
  rs_io_close(sh);
  if (sh->o->store) {
    struct sbx_error e = {0};
    (void)store_state_clear(sh->o->store, sh->rs_path, &e);
    return;
  }
  (void)unlink(sh->rs_path);
  char jpath[JOURNAL_PATH_MAX];
  journal_path(sh->rs_path, jpath);
  (void)unlink(jpath);
}
