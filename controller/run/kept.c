/* What an ended run keeps in the state store, and its end: the
 * conversation of a completed run, which a later run continues
 * (runner_history), and the state and sandboxes of a failed run kept for
 * a retry, ended when its keep time has passed (runner_discard). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/run/run_internal.h"
#include "controller/state/store.h"
#include "shared/cleanup.h"

/* The run ID's state (new, parsed) and its journal read into it: *ITEMS
 * (new) and *NESTED (new). -ENOENT when the run kept no state. */
static int load_kept(struct store *s, const char *id, json_t **rs,
                     json_t **items, json_t **nested, struct sbx_error *e) {
  *rs = *items = *nested = NULL;
  _cleanup_free_ char *text = NULL, *jtext = NULL;
  size_t len = 0, jlen = 0, cut = 0;
  int r = store_state_get(s, id, &text, &len, e);
  if (r == 0 && len == 0)
    r = -ENOENT;
  if (r == -ENOENT)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT, "run %s kept no state", id);
  if (r < 0)
    return r;
  r = store_journal_read(s, id, STORE_MAX_TEXT, &jtext, &jlen, e);
  if (r < 0)
    return r;
  json_error_t je;
  _cleanup_json_ json_t *st = json_loadb(text, len, 0, &je);
  _cleanup_json_ json_t *done = NULL;
  if (!json_is_object(st) ||
      run_state_load_journal(jtext, jlen, st, items, &done, nested, &cut) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the state that run %s kept is not one sbx can read",
                         id);
  *rs = TAKE_PTR(st);
  return 0;
}

int runner_history(struct store *store, const char *id, json_t **items,
                   char **response_id, struct sbx_error *e) {
  *items = NULL;
  *response_id = NULL;
  _cleanup_json_ json_t *rs = NULL, *its = NULL, *nested = NULL;
  int r = load_kept(store, id, &rs, &its, &nested, e);
  if (r < 0)
    return r;
  const char *status = json_string_value(json_object_get(rs, "status"));
  if (!status || strcmp(status, "finished") != 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "run %s did not finish: its state is %s", id,
                         status ? status : "without a status");
  const char *rid = json_string_value(json_object_get(rs, "response_id"));
  if (rid && !(*response_id = strdup(rid)))
    return -ENOMEM;
  *items = TAKE_PTR(its);
  return 0;
}

int runner_discard(const struct run_options *o, const char *id,
                   struct sbx_error *e) {
  _cleanup_json_ json_t *rs = NULL, *items = NULL, *nested = NULL;
  int r = load_kept(o->store, id, &rs, &items, &nested, e);
  if (r == -ENOENT)
    return 0;
  if (r < 0 && r != -EINVAL)
    return r;
  /* A state that cannot be read records no sandbox sbx could close. */
  json_t *sbs = json_object_get(rs, "sandboxes");
  run_close_recorded_all(o, sbs);
  const char *key;
  json_t *v;
  json_object_foreach(sbs, key, v) {
    struct agent_state st = {.snapshot =
                                 json_incref(json_object_get(v, "snapshot"))};
    run_snapshot_discard(&st);
  }
  json_object_foreach(nested, key, v) {
    run_close_recorded_all(
        o, json_object_get(json_object_get(v, "progress"), "sandboxes"));
  }
  return store_state_clear(o->store, id, e);
}
