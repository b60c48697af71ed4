/* The run's snapshots: when a run with a state dir pauses (for approval),
 * the workspace of each of its recorded sandboxes is saved as a local
 * snapshot (controller/snapshot/), and the run state records it beside the
 * sandbox. A resume whose sandbox is gone (removed, its container deleted,
 * its workspace lost) goes on in a new sandbox restored from that snapshot
 * (sandboxes.c); a run that ends removes its snapshots. As the SDK does at
 * the end of every run, but only where a run can be resumed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/config/manifest.h"
#include "controller/run/run_internal.h"
#include "controller/sandbox/lifecycle.h"
#include "controller/snapshot/snapshot.h"
#include "shared/cleanup.h"
#include "shared/log.h"

/* The run state's member with the run's snapshot settings. */
#define RS_SNAPSHOTS "snapshots"

int run_snapshots_settle(struct run *run, struct sbx_error *e) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  json_t *was = json_object_get(sh->rs, RS_SNAPSHOTS);
  const char *type = o->snapshot;
  const char *dir = o->snapshot_dir;
  if (!type)
    type = json_string_value(json_object_get(was, "type"));
  if (!dir)
    dir = json_string_value(json_object_get(was, "dir"));
  if (!type)
    type = "local";
  sh->snap_off = strcmp(type, "none") == 0;
  int n = dir ? snprintf(sh->snap_dir, sizeof(sh->snap_dir), "%s", dir)
              : snprintf(sh->snap_dir, sizeof(sh->snap_dir), "%s/snapshots",
                         o->state_dir);
  const char *why = NULL;
  if (!sh->snap_off && strcmp(type, "local") != 0)
    why = "a run's snapshots are \"local\" or \"none\"";
  else if (sh->snap_off && o->snapshot_dir)
    why = "--snapshot-dir: the run takes no snapshots (--snapshot none)";
  else if (n < 0 || (size_t)n >= sizeof(sh->snap_dir))
    why = "the snapshot directory's path is too long";
  if (why) {
    run->res->config_error = true; /* the command line's (exit 2) */
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "%s", why);
  }
  /* With them the base directory of the manifests' local sources, when
   * --base-dir gave one (absolute): a restore reads them there too (sbx
   * run --resume takes it back). Else each agent file's directory is. */
  if (json_object_set_new(sh->rs, RS_SNAPSHOTS,
                          json_pack("{s:s, s:s, s:s*}", "type", type, "dir",
                                    sh->snap_dir, "base_dir",
                                    o->materialize.base_dir)) < 0)
    return -ENOMEM;
  return 0;
}

/* Removes the local snapshot file SNAP (a run state's record) names. */
static void remove_snapshot(json_t *snap) {
  const char *loc = json_string_value(json_object_get(snap, "location"));
  if (loc && unlink(loc) < 0 && errno != ENOENT)
    log_warn("cannot remove the snapshot \"%s\": %s", loc, strerror(errno));
}

/* Snapshots ST's sandbox (agent NAME's) into the run's snapshot dir,
 * recording the turn: ST's snapshot record is replaced on success. */
static int snapshot_one(struct run *run, struct agent_state *st,
                        const char *name, struct sbx_error *e) {
  struct shared *sh = run->sh;
  if (mkdir(sh->snap_dir, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %s",
                         sh->snap_dir, strerror(errno));
  _cleanup_free_ const char **excludes =
      lifecycle_snapshot_excludes(st->manifest);
  if (!excludes)
    return -ENOMEM;
  struct snapshot_spec spec = {.type = SNAPSHOT_LOCAL,
                               .base_dir = sh->snap_dir};
  _cleanup_(snapshot_record_clear) struct snapshot_record rec = {0};
  int r = snapshot_save(&spec, st->sb, st->sb->session_id,
                        excludes[0] ? excludes : NULL, &rec, NULL, NULL, e);
  if (r < 0)
    return r;
  for (size_t i = 0; i < rec.nskipped; i++)
    log_warn("\"%s\" of agent \"%s\" is not in the run's snapshot: it has "
             "hard links outside the workspace",
             rec.skipped[i], name);
  json_t *now = json_pack("{s:s, s:s, s:s, s:I, s:i}", "type", "local",
                          "location", rec.location, "sha256", rec.sha256,
                          "size", (json_int_t)rec.size, "turn", run->turn);
  if (!now)
    return -ENOMEM;
  /* A sandbox restored on resume is a new session: its snapshot has
   * another name, and the one it was restored from is no longer needed. */
  const char *old =
      json_string_value(json_object_get(st->snapshot, "location"));
  if (old && strcmp(old, rec.location) != 0)
    remove_snapshot(st->snapshot);
  json_decref(st->snapshot);
  st->snapshot = now;
  return 0;
}

void run_snapshot_pause(struct run *run) {
  struct shared *sh = run->sh;
  if (!sh->rs || run->depth != 0 || sh->snap_off)
    return;
  for (size_t i = 0; i < AGENT_MAX_AGENTS; i++) {
    struct agent_state *st = &run->states[i];
    if (!st->record_id[0] || !st->sb || !st->ready || !st->manifest)
      continue;
    const char *name = sh->o->agents->agents[i]->name;
    struct sbx_error e = {0};
    int r = snapshot_one(run, st, name, &e);
    if (r < 0)
      log_warn("cannot snapshot the sandbox %s of agent \"%s\" for the "
               "paused run (%s): a resume needs the sandbox itself%s",
               st->record_id, name, e.msg[0] ? e.msg : strerror(-r),
               st->snapshot ? ", or goes back to its earlier snapshot" : "");
  }
  unsigned removed = 0;
  struct sbx_error pe = {0};
  (void)snapshot_prune(sh->snap_dir, 0, &removed, &pe);
}

int run_snapshot_restore(json_t *snap, struct sandbox *sb,
                         const struct manifest *m, struct sbx_error *e) {
  const char *loc = json_string_value(json_object_get(snap, "location"));
  const char *sha = json_string_value(json_object_get(snap, "sha256"));
  json_t *size = json_object_get(snap, "size");
  if (!loc || !sha || strlen(sha) != 64 || !json_is_integer(size) ||
      json_integer_value(size) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the run state's snapshot record is malformed");
  struct snapshot_record rec = {
      .type = SNAPSHOT_LOCAL,
      .location = (char *)loc,
      .size = (uint64_t)json_integer_value(size),
  };
  memcpy(rec.sha256, sha, 65);
  (void)snprintf(rec.version, sizeof(rec.version), "%s",
                 SNAPSHOT_FINGERPRINT_VERSION);
  _cleanup_free_ const char **keep = lifecycle_snapshot_excludes(m);
  if (!keep)
    return -ENOMEM;
  struct snapshot_spec spec = {.type = SNAPSHOT_LOCAL,
                               .excludes = keep[0] ? keep : NULL};
  return snapshot_restore(&spec, &rec, sb, NULL, NULL, NULL, NULL, NULL, e);
}

void run_snapshot_discard(struct agent_state *st) {
  if (st->snapshot)
    remove_snapshot(st->snapshot);
  json_decref(st->snapshot);
  st->snapshot = NULL;
}
