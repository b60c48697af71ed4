/* What sbx run keeps of its ended runs in the state store: a failed run's
 * state and sandboxes, for `sbx run --resume` to retry it, until its keep
 * time (--keep-failed) has passed; and a completed run's conversation, for
 * `sbx run --continue`. Kept failed runs whose time passed are ended by
 * the next sbx run or sbx runs on the store (cli_runs_sweep). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/cli/cli_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"

#define KEEP_MAX_MS (366LL * 24 * 3600 * 1000) /* a year, at most */

int cli_parse_keep(const char *s, int64_t *ms) {
  static const struct {
    char unit;
    int64_t ms;
  } units[] = {{'s', 1000}, {'m', 60000}, {'h', 3600000}, {'d', 86400000}};
  if (strcmp(s, "0") == 0) {
    *ms = 0;
    return 0;
  }
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || v < 1 || !end[0] || end[1] || s[0] == '+' ||
      s[0] == ' ')
    return -EINVAL;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(units); i++)
    if (units[i].unit == end[0]) {
      if (v > KEEP_MAX_MS / units[i].ms)
        return -ERANGE;
      *ms = v * units[i].ms;
      return 0;
    }
  return -EINVAL;
}

/* Ends the kept failed run ROW: its sandboxes (recorded in STATE_DIR) are
 * closed and its state removed, and its result says until when it was
 * kept; with CANCELLED (a cancel was asked of it) it ends cancelled. */
static void expire(struct store *s, const char *state_dir, json_t *row,
                   bool cancelled) {
  const char *id = json_string_value(json_object_get(row, "id"));
  _cleanup_json_ json_t *result =
      json_deep_copy(json_object_get(row, "result"));
  if (!id || !result)
    return;
  json_t *until = json_object_get(result, "retry_until_ms");
  if ((!cancelled &&
       json_object_set_new(result, "retry_expired_ms",
                           json_integer(json_integer_value(until))) < 0) ||
      json_object_del(result, "retry_until_ms") < 0)
    return;
  struct sbx_error e = {0};
  /* A cancelled one is taken from the queue first, so that no resume
   * takes it up meanwhile; an expired one no resume takes up any more. */
  static const char *const queued[] = {"queued", NULL};
  if (cancelled &&
      store_run_update(s, id, queued, "cancelled", result, &e) < 0) {
    log_debug("run %s: %s", id, e.msg);
    return;
  }
  struct run_options o = {.state_dir = state_dir, .store = s};
  if (runner_discard(&o, id, &e) < 0) {
    log_warn("run %s: cannot end what it kept for a retry: %s", id, e.msg);
    return;
  }
  static const char *const failed[] = {"failed", NULL};
  if (!cancelled && store_run_update(s, id, failed, NULL, result, &e) < 0)
    log_debug("run %s: %s", id, e.msg);
}

/* Sweeps the runs of sbx run of STATUS kept for a retry: those whose keep
 * time passed (NOW), or asked to stop. */
static void sweep_status(struct store *s, const char *state_dir,
                         const char *status, int64_t now) {
  int64_t before = 0;
  do {
    _cleanup_json_ json_t *rows = NULL;
    struct sbx_error e = {0};
    if (store_run_list(s, status, RUNS_CLI_OWNER, before, STORE_LIST_MAX, &rows,
                       &before, &e) < 0) {
      log_warn("cannot look for runs kept for a retry: %s", e.msg);
      return;
    }
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      json_t *until =
          json_object_get(json_object_get(row, "result"), "retry_until_ms");
      if (!json_is_integer(until))
        continue;
      bool cancel = json_is_true(json_object_get(row, "cancel_requested"));
      if (strcmp(status, "queued") == 0 ? cancel
                                        : json_integer_value(until) <= now)
        expire(s, state_dir, row, cancel);
    }
  } while (before);
}

void cli_runs_sweep(struct store *s, const char *state_dir) {
  int64_t now = store_now_ms();
  sweep_status(s, state_dir, "failed", now);
  /* sbx runs cancel (or a server's API) queues a failed run marked so:
   * no one else would take it up. */
  sweep_status(s, state_dir, "queued", now);
}
