/* Where the root run's state is kept (run_state.c decides what): the
 * run's row "run_<run id>" of the state store (run_options.store) and its
 * journal chunks there, for sbx run and sbx serve alike, so that any
 * process on the same database can go on with the run. A journal append
 * is one row: a kill leaves no partial line. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controller/run/run_internal.h"
#include "controller/state/store.h"

int rs_io_begin(struct shared *sh, struct sbx_error *e) {
  if (!sh->o->store)
    return sbx_error_set(e, SBX_INTERNAL, EINVAL,
                         "a run with a state dir needs the state store");
  (void)snprintf(sh->rs_path, sizeof(sh->rs_path), "run_%s", sh->run_id);
  /* A run that starts again from nothing (one that was stopped before
   * its first step was saved) drops what its first try appended. */
  return store_state_clear(sh->o->store, sh->rs_path, e);
}

/* Says which of the run's records a store error R (in E) is about. */
static int failed(struct shared *sh, const char *what, int r,
                  struct sbx_error *e) {
  char msg[sizeof(e->msg)];
  (void)snprintf(msg, sizeof(msg), "%s", e->msg);
  return sbx_error_set(e, e->code, -r, "cannot write the run %s of %s: %s",
                       what, sh->rs_path, msg);
}

int rs_io_append(struct shared *sh, const char *text, size_t len,
                 struct sbx_error *e) {
  int r = store_journal_append(sh->o->store, sh->rs_path, text, len, e);
  return r < 0 ? failed(sh, "journal", r, e) : 0;
}

int rs_io_put(struct shared *sh, const char *text, size_t len,
              struct sbx_error *e) {
  int r = store_state_put(sh->o->store, sh->rs_path, text, len, e);
  return r < 0 ? failed(sh, "state", r, e) : 0;
}

int rs_io_read(struct shared *sh, const char *where, size_t max, char **state,
               size_t *slen, char **journal, size_t *jlen,
               struct sbx_error *e) {
  *state = *journal = NULL;
  *slen = *jlen = 0;
  (void)snprintf(sh->rs_path, sizeof(sh->rs_path), "%s", where);
  struct store *st = sh->o->store;
  if (!st)
    return sbx_error_set(e, SBX_INTERNAL, EINVAL,
                         "resuming a run needs the state store");
  int r = store_state_get(st, where, state, slen, e);
  if (r == 0 && *slen == 0)
    r = sbx_error_set(e, SBX_NOT_FOUND, ENOENT, "run %s has no state", where);
  if (r == 0)
    r = store_journal_read(st, where, max, journal, jlen, e);
  return r;
}

int rs_io_cut(struct shared *sh, size_t keep, struct sbx_error *e) {
  return store_journal_cut(sh->o->store, sh->rs_path, keep, e);
}

void rs_io_remove(struct shared *sh) {
  struct sbx_error e = {0};
  (void)store_state_clear(sh->o->store, sh->rs_path, &e);
}
