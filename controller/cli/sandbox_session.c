/* sbx sandbox save and resume: session states (the SDK's fields, a
 * snapshot of the workspace, no secrets), and resuming one into the live
 * sandbox or a new one restored from the snapshot. */
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/registry.h"
#include "controller/cli/cli_internal.h"
#include "controller/sandbox/progress.h"
#include "controller/snapshot/snapshot.h"
#include "controller/telemetry/trace.h"
#include "shared/cleanup.h"
#include "shared/log.h"

/* The --snapshot-max-* flags: a snapshot's archive limits, applied by the
 * save (a snapshot the restore would refuse is refused then) and by the
 * restore. */
static const struct {
  const char *flag;
  size_t off; /* of the field in struct snapshot_limits */
} limit_flags[] = {
    {"--snapshot-max-members", offsetof(struct snapshot_limits, max_members)},
    {"--snapshot-max-bytes", offsetof(struct snapshot_limits, max_input_bytes)},
    {"--snapshot-max-extracted-bytes",
     offsetof(struct snapshot_limits, max_extracted_bytes)},
};

/* Reads a --snapshot-max-* flag OPT with its value VAL (a positive decimal)
 * into LIM: 0, -EINVAL for a bad value, -ENOENT for another flag. */
static int parse_limit_opt(const char *opt, const char *val,
                           struct snapshot_limits *lim) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(limit_flags); i++) {
    if (strcmp(opt, limit_flags[i].flag) != 0)
      continue;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(val, &end, 10);
    if (errno || end == val || *end || val[0] == '-' || v == 0)
      return -EINVAL;
    memcpy((char *)lim + limit_flags[i].off, &(uint64_t){v}, sizeof(uint64_t));
    return 0;
  }
  return -ENOENT;
}

/* Reads --snapshot TYPE, --snapshot-dir DIR, --snapshot-url URL and the
 * --snapshot-max-* limits. */
static int parse_snapshot_opt(const char *opt, const char *val,
                              struct snapshot_spec *spec) {
  if (strcmp(opt, "--snapshot") == 0)
    return snapshot_type_parse(val, &spec->type);
  if (strcmp(opt, "--snapshot-dir") == 0) {
    spec->base_dir = val;
    return 0;
  }
  if (strcmp(opt, "--snapshot-url") == 0) {
    spec->url = val;
    return 0;
  }
  return parse_limit_opt(opt, val, &spec->limits);
}

/* Takes --json, --state-dir DIR and --state-dir=DIR at ARGV[*I] (the
 * options every subcommand takes, here parsed by hand): true when it was
 * one, *I then at its last word. */
static bool common_arg(struct cli_common *c, int argc, char **argv, int *i) {
  const char *s = argv[*i];
  if (strcmp(s, "--json") == 0)
    c->json = true;
  else if (strncmp(s, "--state-dir=", 12) == 0)
    c->state_dir = s + 12;
  else if (strcmp(s, "--state-dir") == 0 && *i + 1 < argc)
    c->state_dir = argv[++*i];
  else
    return false;
  return true;
}

/* The session state of SB (recorded as REC) with snapshot SNAP: the SDK's
 * fields and the backend's. New, or NULL when out of memory. */
static json_t *session_state(const struct sandbox *sb,
                             const struct lifecycle_record *rec,
                             const struct snapshot_record *snap) {
  json_t *ports = json_array();
  for (size_t i = 0; ports && i < rec->nports; i++)
    if (json_array_append_new(ports, json_integer(rec->ports[i])) < 0) {
      json_decref(ports);
      ports = NULL;
    }
  _cleanup_json_ json_t *st = json_pack(
      "{s:i, s:s, s:s, s:s, s:o, s:{s:s, s:s?, s:s, s:I}, s:s, s:s, s:b, "
      "s:o}",
      "version", 1, "type", sb->backend->name, "session_id", sb->session_id,
      "sandbox_id", rec->id, "manifest", manifest_to_json(rec->manifest),
      "snapshot", "type", snapshot_type_name(snap->type), "location",
      snap->location, "sha256", snap->sha256, "size", (json_int_t)snap->size,
      "snapshot_fingerprint", snap->sha256, "snapshot_fingerprint_version",
      snap->version, "workspace_root_ready", 1, "exposed_ports", ports);
  /* Backend fields, as the Python SDK's session states have them. */
  if (st && sb->backend->session_fields &&
      sb->backend->session_fields(json_object_get(rec->rec, sb->backend->name),
                                  st) < 0)
    return NULL;
  return TAKE_PTR(st);
}

/* Tells the person on stderr which files SNAP left out (they have hard
 * links outside the workspace), so that a restore missing them is no
 * surprise. The names come from sandboxd, checked printable by the
 * client. */
static void warn_skipped(const struct cli_common *c,
                         const struct snapshot_record *snap) {
  for (size_t i = 0; i < snap->nskipped; i++)
    fprintf(stderr,
            "%s: warning: \"%s\" is not in the snapshot: it has hard links "
            "outside the workspace\n",
            c->prog, snap->skipped[i]);
  if (snap->skipped_total > snap->nskipped)
    fprintf(stderr,
            "%s: warning: and %llu more files with hard links outside the "
            "workspace are not in the snapshot\n",
            c->prog,
            (unsigned long long)(snap->skipped_total - snap->nskipped));
}

/* Snapshots the attached SB (recorded as REC) by SPEC, traced as
 * sandbox.snapshot when OTEL_EXPORTER_OTLP_* asks for it, and prints its
 * session state; then prunes old local snapshots. The exit status. */
static int save_attached(struct cli_common *c, const struct snapshot_spec *spec,
                         struct sandbox *sb,
                         const struct lifecycle_record *rec) {
  struct trace_options to = {0};
  trace_options_from_env(&to);
  struct tracer *tracer = NULL;
  struct sbx_error te = {0};
  if (trace_new(&to, &tracer, &te) < 0)
    log_warn("tracing is off: %s", te.msg);
  struct trace_span *sp = trace_start(tracer, TRACE_SANDBOX_SNAPSHOT);
  trace_set_str(sp, "sandbox.session_id", sb->session_id);
  trace_set_str(sp, "sandbox.backend", sb->backend->name);
  trace_set_str(sp, "sandbox.snapshot.type", snapshot_type_name(spec->type));
  /* Ephemeral entries and mounts stay out of the snapshot. */
  json_t *skip = json_object_get(rec->rec, "snapshot_excludes");
  size_t nskip = json_array_size(skip);
  _cleanup_free_ const char **excludes = calloc(nskip + 1, sizeof(char *));
  for (size_t i = 0; excludes && i < nskip; i++)
    excludes[i] = json_string_value(json_array_get(skip, i));
  _cleanup_(snapshot_record_clear) struct snapshot_record snap = {0};
  struct sbx_error e = {0};
  int r = snapshot_save(
      spec, sb, sb->session_id, excludes && nskip ? excludes : NULL, &snap,
      progress_enabled(c->json) ? progress_snapshot : NULL, NULL, &e);
  if (r < 0)
    trace_set_error(sp, "%s", e.msg);
  else
    trace_set_int(sp, "sandbox.snapshot.bytes", (int64_t)snap.size);
  trace_end(sp);
  (void)trace_free(tracer);
  if (r < 0)
    return cli_fail(c, &e, r);
  warn_skipped(c, &snap);
  _cleanup_json_ json_t *st = session_state(sb, rec, &snap);
  if (cli_print_json(c, st))
    return 1;
  if (spec->type == SNAPSHOT_LOCAL) {
    /* Local snapshots older than 30 days go, as the SDK prunes its own. */
    _cleanup_free_ char *base = NULL;
    unsigned removed = 0;
    struct sbx_error pe = {0};
    if (spec->base_dir || snapshot_default_base_dir(&base, &pe) == 0)
      (void)snapshot_prune(spec->base_dir ? spec->base_dir : base, 0, &removed,
                           &pe);
  }
  return 0;
}

/* sbx sandbox save ID: snapshots the workspace and prints the session
 * state (the SDK's fields; no token, no host paths, no credentials). */
int cli_sandbox_save(struct cli_common *c, int argc, char **argv) {
  struct snapshot_spec spec = {.type = SNAPSHOT_LOCAL};
  const char *id = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      printf(
          "usage: sbx sandbox save ID [--snapshot local|remote|none] "
          "[--snapshot-dir DIR] [--snapshot-url URL]\n"
          "                        [--snapshot-max-members N] "
          "[--snapshot-max-bytes BYTES]\n"
          "                        [--snapshot-max-extracted-bytes BYTES]\n\n"
          "Snapshots the sandbox's workspace (default: local, under "
          "$XDG_STATE_HOME/sbx/snapshots)\nand prints its session state as "
          "JSON on stdout, for sbx sandbox resume. The state holds\nno "
          "token, no credentials and no host paths. A remote snapshot is "
          "PUT to the URL with\nthe bearer token from $SBX_SNAPSHOT_TOKEN. "
          "A workspace the restore would refuse is\nrefused now, with the "
          "reason: more entries than --snapshot-max-members (default\n"
          "1000000), an archive over --snapshot-max-bytes (16 GiB) or more "
          "data than\n--snapshot-max-extracted-bytes (64 GiB; a sparse "
          "file's holes do not count).\nGive resume the same limits.\n");
      return 0;
    }
    if (common_arg(c, argc, argv, &i))
      continue;
    int pr = i + 1 < argc ? parse_snapshot_opt(argv[i], argv[i + 1], &spec)
                          : -ENOENT;
    if (pr != -ENOENT) {
      if (pr < 0)
        return cli_usage_error(c, "save", "%s \"%s\" is not valid", argv[i],
                               argv[i + 1]);
      i++;
      continue;
    }
    if (argv[i][0] == '-' || id)
      return cli_usage_error(c, "save", "unexpected argument \"%s\"", argv[i]);
    id = argv[i];
  }
  if (!id)
    return cli_usage_error(c, "save", "expected a sandbox id");
  if (spec.type == SNAPSHOT_REMOTE && !spec.url)
    return cli_usage_error(c, "save", "--snapshot remote needs --snapshot-url");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = cli_attach(c->state_dir, id, &rec, &sb, &e);
  if (k != 0)
    return cli_fail_status(c, &e, -EINVAL, k);
  return cli_detach_done(sb, &rec, save_attached(c, &spec, sb, &rec));
}

/* The live sandbox SBID of session SID, when it proves its identity: our
 * token (Hello through the state dir's token file) and the same session
 * id. True with its id in ID_OUT; else false with WHY saying why not. */
static bool live_session(const char *state_dir, const char *sbid,
                         const char *sid, char id_out[STATE_ID_LEN + 1],
                         char *why, size_t whysz) {
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error le = {0};
  if (cli_attach(state_dir, sbid, &rec, &sb, &le) != 0) {
    (void)snprintf(why, whysz, "%s", le.msg);
    return false;
  }
  bool same = strcmp(sb->session_id, sid) == 0;
  if (same)
    (void)snprintf(id_out, STATE_ID_LEN + 1, "%s", rec.id);
  else
    (void)snprintf(why, whysz, "sandbox %s holds another session", rec.id);
  sb->backend->detach(sb);
  lifecycle_record_clear(&rec);
  return same;
}

/* Where the restored manifest M's local sources are: BASE_DIR
 * (--base-dir), else the directory of the trusted manifest TRUSTED, else
 * the base directory recorded with the saved sandbox SBID while its record
 * is there; never the current directory. OUT (of size N) gets it, "" when
 * M reads no local source. */
static int restore_base(const char *state_dir, const char *sbid,
                        const char *trusted, const char *base_dir,
                        const struct manifest *m, char *out, size_t n,
                        struct sbx_error *e) {
  out[0] = '\0';
  if (base_dir || trusted) {
    if (base_dir)
      (void)snprintf(out, n, "%s", base_dir);
    else
      cli_dir_of(trusted, out, n);
    return 0;
  }
  char dir[4096];
  struct lifecycle_record rec;
  struct sbx_error le = {0};
  if (sbid && state_dir_resolve(state_dir, dir, sizeof(dir), &le) == 0 &&
      lifecycle_load(dir, sbid, &rec, &le) == 0) {
    const char *b = lifecycle_base_dir(&rec);
    (void)snprintf(out, n, "%s", b ? b : "");
    lifecycle_record_clear(&rec);
  }
  if (out[0] || !lifecycle_has_local_sources(m))
    return 0;
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "the manifest has local_file or local_dir entries, "
                       "and the saved sandbox's record, which says where "
                       "their sources are, is gone: give --manifest TRUSTED "
                       "(sources relative to its directory) or --base-dir "
                       "DIR; the current directory is not assumed");
}

int cli_session_resume(const char *state_dir, const char *path,
                       const char *trusted, const char *base_dir,
                       const struct snapshot_limits *limits, bool progress,
                       char id_out[STATE_ID_LEN + 1], bool *reconnected,
                       struct sbx_error *e) {
  struct snapshot_spec spec = {.type = SNAPSHOT_LOCAL};
  if (limits)
    spec.limits = *limits;
  *reconnected = false;
  _cleanup_json_ json_t *st = NULL;
  if (cli_load_json_file(path, &st, e) < 0)
    return -EINVAL;
  const char *sid = json_string_value(json_object_get(st, "session_id"));
  const char *sbid = json_string_value(json_object_get(st, "sandbox_id"));
  json_t *snapj = json_object_get(st, "snapshot");
  json_t *manj = json_object_get(st, "manifest");
  if (!sid || !json_is_object(manj))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a session state", path);
  char why_live[600] = "no sandbox id in the state";
  if (sbid &&
      live_session(state_dir, sbid, sid, id_out, why_live, sizeof(why_live))) {
    *reconnected = true;
    return 0;
  }
  /* 2. A new sandbox from the trusted manifest, with the snapshot. */
  struct snapshot_record snap = {0};
  const char *stype = json_string_value(json_object_get(snapj, "type"));
  const char *loc = json_string_value(json_object_get(snapj, "location"));
  const char *sha = json_string_value(json_object_get(snapj, "sha256"));
  if (!stype || snapshot_type_parse(stype, &snap.type) < 0 ||
      snap.type == SNAPSHOT_NONE || !loc || !sha || strlen(sha) != 64)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "cannot resume: the live sandbox is gone (%s) and the "
                         "state has no restorable snapshot",
                         why_live);
  spec.type = snap.type;
  snap.location = (char *)loc;
  memcpy(snap.sha256, sha, 65);
  snap.size = (uint64_t)json_integer_value(json_object_get(snapj, "size"));
  (void)snprintf(snap.version, sizeof(snap.version), "%s",
                 SNAPSHOT_FINGERPRINT_VERSION);
  _cleanup_json_ json_t *tj = NULL;
  if (trusted && cli_load_json_file(trusted, &tj, e) < 0)
    return -EINVAL;
  struct manifest *m = NULL;
  char where[600];
  (void)snprintf(where, sizeof(where), "%s: manifest",
                 trusted ? trusted : path);
  int r = manifest_parse(tj ? tj : manj, where, &m, e);
  if (r < 0)
    return r;
  char base[4096];
  r = restore_base(state_dir, sbid, trusted, base_dir, m, base, sizeof(base),
                   e);
  if (r < 0) {
    manifest_free(m);
    return r;
  }
  char dir[4096], tok[4200], logp[4200], created[32];
  char id[STATE_ID_LEN + 1] = "";
  r = state_dir_resolve(state_dir, dir, sizeof(dir), e);
  if (r == 0 &&
      ((r = state_dir_ensure(dir, e)) < 0 || (r = state_new_id(id)) < 0 ||
       state_path(dir, id, "token", tok, sizeof(tok)) < 0 ||
       state_path(dir, id, "log", logp, sizeof(logp)) < 0))
    r = r < 0 ? r : -ENAMETOOLONG;
  struct sbx_error ie = {0};
  const char *type = json_string_value(json_object_get(st, "type"));
  struct lifecycle_options lo = {.backend = backend_find(type),
                                 .mo.base_dir = base[0] ? base : NULL};
  if (!lo.backend && r == 0)
    r = sbx_error_set(&ie, SBX_INVALID_ARGUMENT, EINVAL,
                      "the state's backend \"%.64s\" is not one of this sbx",
                      type);
  struct sandbox *sb = NULL;
  if (r == 0)
    r = lifecycle_create(&lo, m, true, tok, logp, &sb, &ie);
  /* What the trusted manifest made ephemeral or mounted is kept, not
   * replaced by the snapshot. */
  _cleanup_free_ const char **keep = lifecycle_snapshot_excludes(m);
  spec.excludes = keep && keep[0] ? keep : NULL;
  struct snapshot_restore_result rr = {0};
  if (r == 0)
    r = snapshot_restore(&spec, &snap, sb, NULL, NULL, &rr,
                         progress ? progress_snapshot : NULL, NULL, &ie);
  if (r == 0) {
    state_now(created);
    r = lifecycle_save(dir, id, sb, m, NULL, 0, created, (long)getpid(), &ie);
    if (r == 0 && base[0])
      r = lifecycle_save_base_dir(dir, id, base, &ie);
  }
  manifest_free(m);
  if (r < 0) {
    if (sb) {
      struct sbx_error ce = {0};
      (void)sb->backend->close(sb, &ce);
    }
    if (id[0])
      state_remove(dir, id);
    return sbx_error_set(e, ie.code ? ie.code : SBX_INTERNAL, -r,
                         "cannot resume: the live sandbox is gone (%s), and "
                         "restoring the snapshot failed: %s",
                         why_live, ie.msg);
  }
  sb->backend->detach(sb);
  (void)snprintf(id_out, STATE_ID_LEN + 1, "%s", id);
  return 0;
}

/* sbx sandbox resume STATE.json: prints the sandbox id (see
 * cli_session_resume). */
int cli_sandbox_resume(struct cli_common *c, int argc, char **argv) {
  const char *path = NULL, *trusted = NULL, *base_dir = NULL;
  struct snapshot_limits lim = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      printf("usage: sbx sandbox resume STATE.json [--manifest M] "
             "[--base-dir DIR]\n"
             "                          [--snapshot-max-members N] "
             "[--snapshot-max-bytes BYTES]\n"
             "                          [--snapshot-max-extracted-bytes "
             "BYTES]\n\n"
             "Reconnects to the saved sandbox when it is still running and "
             "proves its identity\n(its session id, and the token this "
             "controller's state holds); otherwise creates a\nnew sandbox "
             "from the trusted manifest (--manifest, else the state's) and "
             "restores\nthe snapshot into it, within the limits (as for "
             "save). The manifest's local_file\nand local_dir sources are "
             "resolved against --base-dir, else the directory of\n"
             "--manifest, else the base directory recorded when the saved "
             "sandbox was created,\nnever the current directory. Prints the "
             "sandbox id (--json: {\"id\",\n\"reconnected\"}).\n");
      return 0;
    }
    if (common_arg(c, argc, argv, &i))
      continue;
    if (strcmp(argv[i], "--manifest") == 0 && i + 1 < argc) {
      trusted = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--base-dir") == 0 && i + 1 < argc) {
      base_dir = argv[++i];
      continue;
    }
    int pr =
        i + 1 < argc ? parse_limit_opt(argv[i], argv[i + 1], &lim) : -ENOENT;
    if (pr != -ENOENT) {
      if (pr < 0)
        return cli_usage_error(c, "resume", "%s \"%s\" is not valid", argv[i],
                               argv[i + 1]);
      i++;
      continue;
    }
    if (argv[i][0] == '-' || path)
      return cli_usage_error(c, "resume", "unexpected argument \"%s\"",
                             argv[i]);
    path = argv[i];
  }
  if (!path)
    return cli_usage_error(c, "resume", "expected a session state file");
  char id[STATE_ID_LEN + 1];
  bool reconnected = false;
  struct sbx_error e = {0};
  int r = cli_session_resume(c->state_dir, path, trusted, base_dir, &lim,
                             progress_enabled(c->json), id, &reconnected, &e);
  if (r < 0)
    return cli_fail_status(
        c, &e, r, e.code == SBX_INVALID_ARGUMENT && r == -EINVAL ? 2 : 1);
  if (c->json) {
    _cleanup_json_ json_t *j =
        json_pack("{s:s, s:b}", "id", id, "reconnected", reconnected);
    if (cli_print_json(c, j))
      return 1;
  } else {
    printf("%s\n", id);
  }
  fprintf(stderr,
          reconnected ? "%s: reconnected to the live sandbox %s\n"
                      : "%s: the saved sandbox is gone; restored its snapshot "
                        "into a new sandbox %s\n",
          c->prog, id);
  return fflush(stdout) == 0 ? 0 : 1;
}
