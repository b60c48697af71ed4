/* The sandboxes of a run: which sandbox each agent works in, made on the
 * agent's first turn, re-attached when a run resumes, and closed (or left
 * running for a paused run) at its end. This is the one file of the run
 * that uses the run's backend and its options. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "controller/config/manifest.h"
#include "controller/config/skills.h"
#include "controller/run/run_internal.h"
#include "controller/sandbox/lifecycle.h"
#include "controller/telemetry/trace.h"
#include "shared/cleanup.h"
#include "shared/log.h"

/* Whether a sandbox failed for its configuration (exit 2), not at run
 * time. */
static bool is_config_error(const struct sbx_error *e) {
  return e->code == SBX_INVALID_ARGUMENT || e->code == SBX_NOT_SUPPORTED ||
         e->code == SBX_PERMISSION_DENIED || e->code == SBX_NOT_FOUND;
}

/* The sandbox of agent A in a run with options O. The
 * starting agent of a --sandbox run (STARTING and o->sandbox) gets that
 * live sandbox with A's manifest applied (*BORROWED true); any other agent
 * gets a fresh one holding A's manifest, with local sources relative to
 * o->materialize.base_dir or A's file's directory. Then the run cwd is
 * checked for A's run_as. *CONFIG_ERROR tells a configuration error (exit
 * 2) from a failure (exit 1). On failure *SB may be set: the caller closes
 * it unless borrowed. With PERSIST_DIR, a new sandbox is created detached
 * and recorded there under RECORD_ID (a run's sandbox that survives pauses
 * and crashes). */
static int run_agent_sandbox(const struct run_options *o, const struct agent *a,
                             bool starting, const char *persist_dir,
                             char record_id[STATE_ID_LEN + 1],
                             struct sandbox **sb, struct manifest **m,
                             bool *borrowed, bool *config_error,
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
  if (!lo.bo.state_dir)
    lo.bo.state_dir = o->state_dir;
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
        r = lifecycle_save(persist_dir, record_id, *sb, *m, lo.bo.ports,
                           lo.bo.nports, created, (long)getpid(), &le);
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

/* The backend's name, for the run's span and run_started. */
const char *run_backend_name(const struct run_options *o) {
  return o->backend->name;
}

/* Whether agent A works in a sandbox: it has the filesystem, shell or skills
 * capability, or a manifest. */
static bool uses_sandbox(const struct agent *a) {
  return run_has_cap(a, AGENT_CAP_FILESYSTEM) ||
         run_has_cap(a, AGENT_CAP_SHELL) || a->skills ||
         a->default_manifest != NULL;
}

/* Readies agent A's tools in its sandbox st->sb; a tool's image output is
 * text where the agent's API takes only text. */
static void start_toolbox(struct agent_state *st, const struct run_options *o,
                          const struct agent *a) {
  bool images = model_api_features(run_agent_api(a))->tool_images;
  toolbox_init(&st->tb, st->sb, o->cwd, a->run_as, !images);
  st->ready = true;
}

/* The address of each of the run's exposed ports in SB, by port number
 * (new), for sandbox_created; a port that does not resolve is left out.
 * NULL on OOM. */
static json_t *exposed_ports(const struct run_options *o,
                             const struct sandbox *sb) {
  _cleanup_json_ json_t *ports = json_object();
  for (size_t i = 0; ports && i < o->n_exposed_ports; i++) {
    char ep[300], key[8];
    if (lifecycle_resolve_port(sb, o->exposed_ports, o->n_exposed_ports,
                               o->exposed_ports[i], ep, sizeof(ep), NULL) < 0)
      continue;
    (void)snprintf(key, sizeof(key), "%u", (unsigned)o->exposed_ports[i]);
    if (json_object_set_new(ports, key, json_string(ep)) < 0)
      return NULL;
  }
  return TAKE_PTR(ports);
}

/* Agent A of a run nested with "sandbox": "parent" works in its caller's
 * live sandbox (run->host): borrowed, never closed or snapshotted by this
 * run, with a copy of the caller's manifest (for its instructions) and
 * A's own run_as, which must be one of that manifest's users. */
static int host_state(struct run *run, const struct agent *a,
                      struct sbx_error *e) {
  struct agent_state *st = &run->states[a->index];
  const struct agent_state *h = run->host;
  if (!h->ready || !h->sb || !h->manifest)
    return sbx_error_set(e, SBX_INTERNAL, ENODEV,
                         "agent \"%s\" is to work in its caller's sandbox, "
                         "which is not there",
                         a->name);
  bool found = !a->run_as;
  for (size_t i = 0; !found && i < h->manifest->nusers; i++)
    found = strcmp(h->manifest->users[i], a->run_as) == 0;
  if (!found) {
    run->res->config_error = true;
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "run_as \"%s\" of agent \"%s\" is not a user of "
                         "its caller's sandbox, which it works in "
                         "(\"sandbox\": \"parent\"): list the user in the "
                         "caller's manifest",
                         a->run_as, a->name);
  }
  _cleanup_json_ json_t *mj = manifest_to_json(h->manifest);
  if (!mj)
    return -ENOMEM;
  int r = manifest_parse(mj, "the caller's sandbox manifest", &st->manifest, e);
  const struct run_options *o = run->sh->o;
  if (r == 0 && o->cwd)
    r = lifecycle_check_cwd(h->sb, o->cwd, a->run_as, e);
  if (r < 0) {
    run->res->config_error = e && is_config_error(e);
    return r;
  }
  st->sb = h->sb;
  st->borrowed = true;
  _cleanup_json_ json_t *ports = exposed_ports(o, st->sb);
  if (!ports)
    return -ENOMEM;
  events_sandbox_created(
      run->sh->ev, &(struct events_where){a->name, (int)run->depth, run->turn},
      st->sb->session_id, st->sb->backend->name, true, ports);
  start_toolbox(st, o, a);
  return 0;
}

/* Creates A's sandbox (lifecycle.h), or for the starting agent of a
 * --sandbox run applies its manifest to that live sandbox. */
static int create_state(struct run *run, const struct agent *a,
                        struct sbx_error *e) {
  struct agent_state *st = &run->states[a->index];
  if (run->host)
    return host_state(run, a, e);
  /* The sandboxes of the root run and of the runs nested in it that are
   * journaled are recorded, so that the run can be resumed. */
  const char *persist = run->sh->rs && (run->depth == 0 || run->journaled)
                            ? run->sh->o->state_dir
                            : NULL;
  int r = run_agent_sandbox(run->sh->o, a, run->depth == 0 && a->index == 0,
                            persist, st->record_id, &st->sb, &st->manifest,
                            &st->borrowed, &run->res->config_error, e);
  if (r < 0)
    return r;
  const struct run_options *o = run->sh->o;
  _cleanup_json_ json_t *ports = exposed_ports(o, st->sb);
  if (!ports)
    return -ENOMEM;
  events_sandbox_created(
      run->sh->ev, &(struct events_where){a->name, (int)run->depth, run->turn},
      st->sb->session_id, st->sb->backend->name, st->borrowed, ports);
  start_toolbox(st, o, a);
  return 0;
}

/* Gets A's sandbox ready on first use, traced as sandbox.create_session
 * (sandbox.start for the live sandbox of a --sandbox run). */
int run_ensure_sandbox(struct run *run, const struct agent *a,
                       struct sbx_error *e) {
  struct agent_state *st = &run->states[a->index];
  if (st->ready || !uses_sandbox(a))
    return 0;
  bool attach =
      (run->sh->o->sandbox && run->depth == 0 && a->index == 0) || run->host;
  struct trace_span *sp =
      trace_child(run->turn_span,
                  attach ? TRACE_SANDBOX_START : TRACE_SANDBOX_CREATE_SESSION);
  trace_set_str(sp, "gen_ai.agent.name", a->name);
  trace_set_str(sp, "sandbox.backend", run_backend_name(run->sh->o));
  int r = create_state(run, a, e);
  if (st->sb) {
    trace_set_str(sp, "sandbox.backend", st->sb->backend->name);
    trace_set_str(sp, "sandbox.session_id", st->sb->session_id);
  }
  if (r < 0)
    trace_set_error(sp, "%s", e && e->msg[0] ? e->msg : strerror(-r));
  trace_end(sp);
  return r;
}

/* Fails the resume of RUN with the reason LE that agent A's sandbox
 * RECORD_ID cannot be had, and the remedy. */
static int sandbox_gone(struct run *run, const struct agent *a,
                        const char *record_id, const struct sbx_error *le,
                        int r, struct sbx_error *e) {
  return sbx_error_set(e, SBX_UNAVAILABLE, r < 0 ? -r : EIO,
                       "cannot resume run %s at turn %d: the sandbox %s of "
                       "agent \"%s\" is gone (%s) and the run has no "
                       "snapshot of it; its work cannot be recovered: remove "
                       "it with `sbx sandbox rm -f %s` and run the prompt "
                       "again",
                       run->sh->run_id, run->first_turn, record_id, a->name,
                       le->msg[0] ? le->msg : strerror(r < 0 ? -r : EIO),
                       record_id);
}

/* Attaches to the sandbox of REC for agent A of RUN into *SB. A sandbox
 * whose sandboxd is gone (killed with the controller, or the host
 * rebooted) is started again over its workspace, which the backend kept;
 * its exec sessions ended with it (*RESTARTED). LE says why it cannot be
 * had. */
static int attach_or_start(struct run *run, const struct agent *a,
                           struct lifecycle_record *rec, struct sandbox **sb,
                           bool *restarted, struct sbx_error *le) {
  const struct run_options *o = run->sh->o;
  *restarted = false;
  int r = lifecycle_attach(rec, &o->backend_opts, sb, le);
  if (r < 0 || (*sb)->client)
    return r;
  if (!(*sb)->backend->start)
    r = sbx_error_set(le, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                      "its sandboxd has exited and backend %s cannot start "
                      "it again",
                      (*sb)->backend->name);
  else
    r = (*sb)->backend->start(*sb, le);
  if (r == 0)
    r = lifecycle_resave(rec, *sb, NULL, le);
  if (r < 0) {
    (*sb)->backend->detach(*sb);
    *sb = NULL;
    return r;
  }
  log_warn("sandbox %s of agent \"%s\" was not running; started it again "
           "over its workspace (its running commands ended with it)",
           rec->id, a->name);
  *restarted = true;
  return 0;
}

/* Agent A's sandbox OLD_ID is gone (WHY): the run goes on in a new sandbox
 * holding A's manifest, restored from SNAP, the run state's snapshot of
 * the old one (snapshots.c). KEPT: the old sandbox's record is still
 * there. */
static int restore_from_snapshot(struct run *run, const struct agent *a,
                                 const char *old_id, const char *why, bool kept,
                                 json_t *snap, struct sbx_error *e) {
  const struct run_options *o = run->sh->o;
  struct agent_state *st = &run->states[a->index];
  bool borrowed = false, config_error = false;
  struct sbx_error le = {0};
  int r = run_agent_sandbox(o, a, false, o->state_dir, st->record_id, &st->sb,
                            &st->manifest, &borrowed, &config_error, &le);
  if (r == 0)
    r = run_snapshot_restore(snap, st->sb, st->manifest, &le);
  if (r < 0) {
    if (st->sb) {
      struct sbx_error ce = {0};
      (void)st->sb->backend->close(st->sb, &ce);
      st->sb = NULL;
    }
    if (st->record_id[0])
      state_remove(o->state_dir, st->record_id);
    st->record_id[0] = '\0';
    manifest_free(st->manifest);
    st->manifest = NULL;
    return sbx_error_set(e, SBX_UNAVAILABLE, r < 0 ? -r : EIO,
                         "cannot resume run %s at turn %d: the sandbox %s of "
                         "agent \"%s\" is gone (%s), and a new one from its "
                         "snapshot could not be made: %s",
                         run->sh->run_id, run->first_turn, old_id, a->name, why,
                         le.msg[0] ? le.msg : strerror(-r));
  }
  st->snapshot = json_incref(snap);
  log_warn("the sandbox %s of agent \"%s\" is gone (%s); going on in sandbox "
           "%s, restored from the run's snapshot of turn %lld: what changed "
           "in the workspace after that is lost, and its running commands "
           "ended%s%s%s",
           old_id, a->name, why, st->record_id,
           (long long)json_integer_value(json_object_get(snap, "turn")),
           kept ? " (`sbx sandbox rm -f " : "", kept ? old_id : "",
           kept ? "` removes what is left of the old one)" : "");
  start_toolbox(st, o, a);
  return 0;
}

/* Re-attaches agent IDX's sandbox, recorded under RECORD_ID, with the
 * exec sessions TOOLS (toolbox_save's) that were running in it; when it is
 * gone, goes on in one restored from SNAPSHOT (the run state's, or
 * NULL). */
int run_reattach_sandbox(struct run *run, size_t idx, const char *record_id,
                         json_t *tools, json_t *snapshot, struct sbx_error *e) {
  const struct run_options *o = run->sh->o;
  const struct agent *a = o->agents->agents[idx];
  struct lifecycle_record rec;
  struct sbx_error le = {0};
  struct sandbox *sb = NULL;
  bool restarted = false;
  int r = lifecycle_load(o->state_dir, record_id, &rec, &le);
  bool kept = r == 0;
  if (r == 0 && (r = attach_or_start(run, a, &rec, &sb, &restarted, &le)) < 0)
    lifecycle_record_clear(&rec);
  if (r < 0) {
    if (!snapshot)
      return sandbox_gone(run, a, record_id, &le, r, e);
    return restore_from_snapshot(run, a, record_id,
                                 le.msg[0] ? le.msg : strerror(-r), kept,
                                 snapshot, e);
  }
  struct agent_state *st = &run->states[idx];
  st->sb = sb;
  st->manifest = rec.manifest;
  rec.manifest = NULL;
  lifecycle_record_clear(&rec);
  (void)snprintf(st->record_id, sizeof(st->record_id), "%s", record_id);
  start_toolbox(st, o, a);
  if (!restarted)
    toolbox_load(&st->tb, tools);
  return 0;
}

/* Frees what ST holds and empties it (the sandbox is closed or detached
 * by the caller). */
static void state_clear(struct agent_state *st) {
  mcp_set_free(st->mcp);
  json_decref(st->snapshot);
  manifest_free(st->manifest);
  free(st->instr);
  json_decref(st->tools);
  memset(st, 0, sizeof(*st));
}

void run_close_recorded(const struct run_options *o, const char *record_id) {
  struct lifecycle_record rec;
  struct sbx_error e = {0};
  if (lifecycle_load(o->state_dir, record_id, &rec, &e) < 0)
    return; /* closed already */
  struct sandbox *sb = NULL;
  if (lifecycle_attach(&rec, &o->backend_opts, &sb, &e) < 0 ||
      sb->backend->close(sb, &e) < 0)
    log_warn("cannot close sandbox %s: %s (`sbx sandbox rm -f %s` removes "
             "it)",
             record_id, e.msg, record_id);
  else
    state_remove(o->state_dir, record_id);
  lifecycle_record_clear(&rec);
}

/* Closes the run's sandboxes: sandbox.cleanup, one sandbox.shutdown each.
 * With PAUSE, recorded sandboxes are left running for the resumed run. */
void run_close_sandboxes(struct run *run, bool pause) {
  struct trace_span *cs = trace_child(run->span, TRACE_SANDBOX_CLEANUP);
  int64_t n = 0;
  for (size_t i = 0; i < AGENT_MAX_AGENTS; i++) {
    struct agent_state *st = &run->states[i];
    if (pause && st->record_id[0] && st->sb) {
      if (st->ready)
        toolbox_detach(&st->tb);
      if (st->sb->backend->detach)
        st->sb->backend->detach(st->sb);
      else
        sandbox_free(st->sb);
      state_clear(st);
      continue;
    }
    if (st->ready)
      toolbox_fini(&st->tb);
    if (st->sb && !st->borrowed) {
      struct sbx_error e = {0};
      struct trace_span *sp = trace_child(cs, TRACE_SANDBOX_SHUTDOWN);
      trace_set_str(sp, "gen_ai.agent.name",
                    run->sh->o->agents->agents[i]->name);
      trace_set_str(sp, "sandbox.session_id", st->sb->session_id);
      if (st->sb->backend->close(st->sb, &e) < 0) {
        log_warn("closing sandbox: %s", e.msg);
        trace_set_error(sp, "%s", e.msg);
      }
      trace_end(sp);
      n++;
      if (st->record_id[0])
        state_remove(run->sh->o->state_dir, st->record_id);
    }
    /* The run ended: there is nothing to resume from its snapshots. */
    run_snapshot_discard(st);
    state_clear(st);
  }
  trace_set_int(cs, "sandbox.session_count", n);
  trace_end(cs);
}
