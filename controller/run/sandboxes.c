#include "controller/run/sandboxes.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "controller/sandbox/lifecycle.h"

static bool is_config_error(const struct sbx_error *e) {
  return e->code == SBX_INVALID_ARGUMENT || e->code == SBX_NOT_SUPPORTED ||
         e->code == SBX_PERMISSION_DENIED || e->code == SBX_NOT_FOUND;
}

int run_agent_sandbox(const struct run_options *o, const struct agent *a,
                      bool starting, const char *persist_dir,
                      char record_id[STATE_ID_LEN + 1], struct sandbox **sb,
                      struct manifest **m, bool *borrowed, bool *config_error,
                      struct sbx_error *e) {
  if (record_id)
    record_id[0] = '\0';
  struct sbx_error le = {0};
  struct lifecycle_options lo = {
      .backend = o->backend,
      .bo = o->backend_opts,
      .mo = o->materialize,
  };
  lo.bo.ports = o->exposed_ports;
  lo.bo.nports = o->n_exposed_ports;
  char base[4096];
  if (!lo.mo.base_dir) {
    const char *slash = strrchr(a->path, '/');
    if (!slash)
      (void)snprintf(base, sizeof(base), ".");
    else if (slash == a->path)
      (void)snprintf(base, sizeof(base), "/");
    else
      (void)snprintf(base, sizeof(base), "%.*s", (int)(slash - a->path),
                     a->path);
    lo.mo.base_dir = base;
  }
  int r;
  *borrowed = false;
  if (starting && o->sandbox) {
    r = lifecycle_apply_to_live(&lo, o->sandbox, o->sandbox_manifest, a,
                                o->sandbox_record, m, &le);
    if (r == 0) {
      *sb = o->sandbox;
      *borrowed = true;
    }
  } else {
    r = lifecycle_agent_manifest(a, m, &le);
    if (r == 0 && persist_dir) {
      /* A sandbox that outlives this process until the run ends, so that a
       * paused or crashed run can be resumed in it: recorded in the state
       * directory like a developer-owned one. */
      char tok[4200], logp[4200], created[32];
      r = state_dir_ensure(persist_dir, &le);
      if (r == 0 &&
          ((r = state_new_id(record_id)) < 0 ||
           state_path(persist_dir, record_id, "token", tok, sizeof(tok)) < 0 ||
           state_path(persist_dir, record_id, "log", logp, sizeof(logp)) < 0))
        r = r < 0 ? r : -ENAMETOOLONG;
      if (r == 0)
        r = lifecycle_create(&lo, *m, true, tok, logp, sb, &le);
      if (r == 0) {
        state_now(created);
        r = lifecycle_save(persist_dir, record_id, *sb, *m, lo.bo.ports, lo.bo.nports,
                           created, (long)getpid(), &le);
        if (r < 0) {
          struct sbx_error ce = {0};
          (void)(*sb)->backend->close(*sb, &ce);
          *sb = NULL;
        }
      }
      if (r < 0 && record_id[0])
        state_remove(persist_dir, record_id);
    } else if (r == 0) {
      r = lifecycle_create(&lo, *m, false, NULL, NULL, sb, &le);
    }
  }
  if (r == 0 && o->cwd)
    r = lifecycle_check_cwd(*sb, o->cwd, a->run_as, &le);
  if (r < 0) {
    *config_error = is_config_error(&le);
    if (e)
      *e = le;
  }
  return r;
}
