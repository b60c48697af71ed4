/* The run state: with a state dir, the root run's state is saved in the
 * state store after every step, so that a paused or crashed run can be
 * resumed. It is the run's state text, replaced whole when the run
 * starts, pauses or finishes, and its journal, which grows by the new
 * conversation items and a checkpoint line per step (state_io.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/run/run_internal.h"
#include "controller/state/store.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/log.h"

/* The members of the run state that change as a run goes; a checkpoint
 * line in the journal carries these. */
static const char *const rs_progress_keys[] = {
    "seq",          "status",      "agent",      "turn",
    "items_count",  "pending",     "usage",      "sandboxes",
    "final_output", "response_id", "chain_from", "used_tools",
};

/* The journal's line for a checkpoint: an object with this one member,
 * which no conversation item has. */
#define RS_CHECKPOINT "sbx.checkpoint"
/* The journal's line for the output of one call of the pending turn,
 * written as the call finishes: an object with this one member. */
#define RS_CALL_OUTPUT "sbx.call_output"
/* The journal's lines of a run nested in a call of the pending turn: an
 * object with this member (its path) and either "items" (the new
 * conversation items) and "progress" (a checkpoint's members but seq), one
 * line a step, or "call_output", the output of one of its calls. */
#define RS_NESTED "sbx.nested"

/* The most the journal may hold, and so one step's lines: what a run's
 * limits let it grow to (tool outputs and model responses are bounded far
 * below this), not a fixed buffer. */
#define RS_JOURNAL_MAX ((size_t)1 << 30)

/* Appends LEN bytes of TEXT to the journal (state_io.c). */
static int rs_append(struct shared *sh, const char *text, size_t len,
                     struct sbx_error *e) {
  return rs_io_append(sh, text, len, e);
}

/* The members of the run state that change as the run goes, as they are
 * now (new; NULL on OOM): a save's sequence number, STATUS, agent A, the
 * turn, the conversation's length, the calls PENDING, usage, and each
 * recorded sandbox's record and running exec sessions. */
static json_t *progress(struct run *run, const struct agent *a,
                        const char *status, json_t *pending) {
  struct shared *sh = run->sh;
  const struct model_usage *u = &run->res->usage;
  json_t *sbs = json_object();
  for (size_t i = 0; sbs && i < AGENT_MAX_AGENTS; i++) {
    struct agent_state *st = &run->states[i];
    if (!st->record_id[0] || !st->ready)
      continue;
    char key[16];
    (void)snprintf(key, sizeof(key), "%zu", i);
    if (json_object_set_new(
            sbs, key,
            json_pack("{s:s, s:o, s:O*}", "record", st->record_id, "tools",
                      toolbox_save(&st->tb), "snapshot", st->snapshot)) < 0) {
      json_decref(sbs);
      return NULL;
    }
  }
  /* The agents that have called tools: their tool_choice is not sent
   * again after a resume either (the SDK's reset_tool_choice). */
  json_t *used = json_array();
  for (size_t i = 0; used && i < AGENT_MAX_AGENTS; i++)
    if (run->states[i].used_tools &&
        json_array_append_new(used, json_integer((json_int_t)i)) < 0) {
      json_decref(used);
      used = NULL;
    }
  if (!sbs || !used) {
    json_decref(sbs);
    json_decref(used);
    return NULL;
  }
  json_t *p = json_pack(
      "{s:s, s:I, s:i, s:I, s:O?, s:{s:I, s:I, s:I, s:I, s:I, s:i}, s:o, "
      "s:s*, s:o}",
      "status", status, "agent", (json_int_t)a->index, "turn", run->turn,
      "items_count", (json_int_t)json_array_size(run->items), "pending",
      pending, "usage", "input_tokens", (json_int_t)u->input_tokens,
      "output_tokens", (json_int_t)u->output_tokens, "total_tokens",
      (json_int_t)u->total_tokens, "reasoning_tokens",
      (json_int_t)u->reasoning_tokens, "cached_tokens",
      (json_int_t)u->cached_tokens, "turns", run->res->turns, "sandboxes", sbs,
      "final_output", run->res->final_output, "used_tools", used);
  /* Only the root's saves are numbered (nested runs save from the calls'
   * threads), and only the root's responses are chained. */
  if (p && run->depth == 0 &&
      (json_object_set_new(p, "seq", json_integer(++sh->rs_seq)) < 0 ||
       (sh->response_id &&
        json_object_set_new(p, "response_id", json_string(sh->response_id)) <
            0) ||
       (sh->chained &&
        json_object_set_new(p, "chain_from",
                            json_integer((json_int_t)sh->chain_from)) < 0))) {
    json_decref(p);
    return NULL;
  }
  return p;
}

/* Appends LINE (a JSON object) to the journal as one line; WHAT names it
 * in the message of a failure. */
static int rs_append_json(struct shared *sh, json_t *line, const char *what,
                          struct sbx_error *e) {
  _cleanup_free_ char *text =
      line ? json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, RS_JOURNAL_MAX);
  int r = text ? sbx_buf_printf(&b, "%s\n", text) : -ENOMEM;
  if (r < 0)
    return sbx_error_set(e, SBX_INTERNAL, -r,
                         "cannot record %s in the run journal of \"%s\": %s",
                         what, sh->rs_path, strerror(-r));
  return rs_append(sh, b.data, b.len, e);
}

/* run_state_save for a nested run: one line with the items new since its
 * last save and its progress, in one write, so that a kill leaves all of a
 * step or none of it. */
static int nested_save(struct run *run, const struct agent *a,
                       const char *status, json_t *pending,
                       struct sbx_error *e) {
  if (!run->journaled)
    return 0;
  json_t *items = json_array();
  for (size_t i = run->rs_items; items && i < json_array_size(run->items); i++)
    if (json_array_append(items, json_array_get(run->items, i)) < 0) {
      json_decref(items);
      items = NULL;
    }
  _cleanup_json_ json_t *line =
      items ? json_pack("{s:s, s:o, s:o}", RS_NESTED, run->path, "items", items,
                        "progress", progress(run, a, status, pending))
            : NULL;
  int r = rs_append_json(run->sh, line, "a step of an agent used as a tool", e);
  if (r == 0)
    run->rs_items = json_array_size(run->items);
  return r;
}

/* Appends to J the journal lines of a save: the conversation items not
 * yet in the journal, then with CHECKPOINT a checkpoint line with the
 * run state's progress members. */
static int journal_lines(struct shared *sh, json_t *items, bool checkpoint,
                         struct sbx_buf *j) {
  int r = 0;
  for (size_t i = sh->rs_items; i < json_array_size(items) && r == 0; i++) {
    _cleanup_free_ char *line =
        json_dumps(json_array_get(items, i), JSON_COMPACT | JSON_ENSURE_ASCII);
    r = line ? sbx_buf_printf(j, "%s\n", line) : -ENOMEM;
  }
  if (r < 0 || !checkpoint)
    return r;
  json_t *body = json_object();
  _cleanup_json_ json_t *cp = json_pack("{s:o}", RS_CHECKPOINT, body);
  if (!cp)
    return -ENOMEM;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(rs_progress_keys); i++) {
    json_t *v = json_object_get(sh->rs, rs_progress_keys[i]);
    if (v && json_object_set(body, rs_progress_keys[i], v) < 0)
      return -ENOMEM;
  }
  _cleanup_free_ char *line = json_dumps(cp, JSON_COMPACT | JSON_ENSURE_ASCII);
  return line ? sbx_buf_printf(j, "%s\n", line) : -ENOMEM;
}

/* Saves the root run's state: the conversation, the current agent, the
 * calls of the last response still to run (PENDING, the response's output
 * items), usage, and each sandbox's record and running exec sessions. A
 * no-op without a state dir.
 *
 * The conversation goes to an append-only journal beside the state, one
 * item a line, so a save costs the new items, not the whole run. A save
 * while the run goes on ("running") appends a checkpoint line with the
 * rest of what changed, in the same append as its items; the state itself
 * is replaced only when the run starts, pauses or finishes. Both carry a
 * sequence number; a resume takes the newer. */
int run_state_save(struct run *run, const struct agent *a, const char *status,
                   json_t *pending, struct sbx_error *e) {
  struct shared *sh = run->sh;
  if (!sh->rs)
    return 0;
  if (run->depth != 0)
    return nested_save(run, a, status, pending, e);
  _cleanup_json_ json_t *now = progress(run, a, status, pending);
  if (!now || json_object_update(sh->rs, now) < 0)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM,
                         "cannot save the run state: out of memory");
  bool checkpoint = sh->rs_written && strcmp(status, "running") == 0;
  _cleanup_buf_ struct sbx_buf j;
  sbx_buf_init(&j, RS_JOURNAL_MAX);
  int r = journal_lines(sh, run->items, checkpoint, &j);
  if (r < 0)
    return sbx_error_set(e, SBX_INTERNAL, -r,
                         "cannot record the step in the run journal of "
                         "\"%s\": %s",
                         sh->rs_path, strerror(-r));
  if (j.len && (r = rs_append(sh, j.data, j.len, e)) < 0)
    return r;
  sh->rs_items = json_array_size(run->items);
  if (checkpoint)
    return 0;
  _cleanup_free_ char *text = json_dumps(sh->rs, JSON_COMPACT);
  if (!text)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM,
                         "cannot save the run state: out of memory");
  r = rs_io_put(sh, text, strlen(text), e);
  if (r < 0)
    return r;
  sh->rs_written = true;
  return 0;
}

int run_state_sync(struct run *run, struct sbx_error *e) {
  return run->sh->rs ? rs_io_sync(run->sh, e) : 0;
}

int run_state_call_done(struct run *run, json_t *output, struct sbx_error *e) {
  struct shared *sh = run->sh;
  if (!sh->rs || (run->depth != 0 && !run->journaled))
    return 0;
  _cleanup_json_ json_t *line =
      run->depth == 0 ? json_pack("{s:O}", RS_CALL_OUTPUT, output)
                      : json_pack("{s:s, s:O}", RS_NESTED, run->path,
                                  "call_output", output);
  return rs_append_json(sh, line, "a call's output", e);
}

/* Starts a new run state under the state dir. */
int run_state_begin(struct run *run, struct sbx_error *e) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  int r = state_dir_ensure(o->state_dir, e);
  if (r == 0)
    r = rs_io_begin(sh, e);
  if (r < 0)
    return r;
  char abs[4096];
  const char *path = o->agents->agents[0]->path;
  if (!realpath(path, abs))
    (void)snprintf(abs, sizeof(abs), "%s", path);
  char created[32];
  state_now(created);
  sh->rs = json_pack("{s:i, s:s, s:s, s:s, s:s, s:s, s:{}, s:s*}", "version", 1,
                     "run_id", sh->run_id, "agent_path", abs, "prompt",
                     o->prompt, "created_at", created, "status", "running",
                     "decisions", "continues", o->continues);
  return sh->rs ? run_snapshots_settle(run, e) : -ENOMEM;
}

/* Takes the nested run's journal line IT (of path PATH) into NESTED: a
 * step extends its items and replaces its progress (the outputs of its
 * earlier turn's calls are in the items now), a call's output joins its
 * done calls. -1 for a line that is neither. */
static int nested_line(json_t *nested, const char *path, json_t *it) {
  json_t *st = json_object_get(nested, path);
  if (!st) {
    st = json_pack("{s:[], s:{}}", "items", "done");
    if (!st || json_object_set_new(nested, path, st) < 0)
      return -1;
  }
  json_t *items = json_object_get(it, "items");
  json_t *prog = json_object_get(it, "progress");
  /* A step without items (a pause) leaves its turn's calls done. */
  if (json_is_array(items) && json_is_object(prog))
    return json_array_extend(json_object_get(st, "items"), items) < 0 ||
                   json_object_set(st, "progress", prog) < 0 ||
                   (json_array_size(items) > 0 &&
                    json_object_set_new(st, "done", json_object()) < 0)
               ? -1
               : 0;
  json_t *out = json_object_get(it, "call_output");
  const char *cid = json_string_value(json_object_get(out, "call_id"));
  return cid && json_object_set(json_object_get(st, "done"), cid, out) == 0
             ? 0
             : -1;
}

/* The outputs of the pending turn's calls recorded after the journal's
 * first CUT bytes of TEXT (LEN): the call_output lines that follow it,
 * into DONE by call_id, and the lines of the runs nested in those calls
 * into NESTED by path. Returns the end of the last one, where the journal
 * is cut. */
static size_t rs_done_calls(const char *text, size_t len, size_t cut,
                            json_t *done, json_t *nested) {
  for (const char *p = text + cut, *end = text + len; p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
      break;
    json_error_t je;
    _cleanup_json_ json_t *it = json_loadb(p, (size_t)(nl - p), 0, &je);
    const char *path = json_string_value(json_object_get(it, RS_NESTED));
    json_t *out = json_object_get(it, RS_CALL_OUTPUT);
    const char *cid = json_string_value(json_object_get(out, "call_id"));
    /* The checkpoint of the pending turn that a pause's state replaced:
     * its calls' outputs follow it. */
    bool stale = json_is_object(json_object_get(it, RS_CHECKPOINT));
    if (!stale && (path ? nested_line(nested, path, it) < 0
                        : !cid || json_object_set(done, cid, out) < 0))
      break;
    p = nl + 1;
    cut = (size_t)(p - text);
  }
  return cut;
}

/* Reads the journal TEXT (LEN) of the run state RS: the conversation
 * into *ITEMS (new reference), the outputs of the pending calls that were
 * done into *DONE (new), the state of the runs nested in them into
 * *NESTED (new), and RS brought up to the newest checkpoint that is newer
 * than the state, and *CUT_OUT, where to cut the journal after what
 * counts: a kill can leave items without their checkpoint, or half a line.
 * Fails (-EINVAL) when items the state counts are missing. */
int run_state_load_journal(const char *text, size_t len, json_t *rs,
                           json_t **items_out, json_t **done_out,
                           json_t **nested_out, size_t *cut_out) {
  *items_out = NULL;
  *done_out = NULL;
  *nested_out = NULL;
  json_int_t seq = json_integer_value(json_object_get(rs, "seq"));
  json_t *cnt = json_object_get(rs, "items_count");
  if (!json_is_integer(cnt) || json_integer_value(cnt) < 1)
    return -EINVAL;
  size_t want = (size_t)json_integer_value(cnt);
  _cleanup_json_ json_t *items = json_array();
  _cleanup_json_ json_t *done = json_object();
  _cleanup_json_ json_t *nested = json_object();
  _cleanup_json_ json_t *best = NULL; /* the newest good checkpoint */
  size_t best_end = 0, want_end = 0;
  bool have_want = false;
  for (const char *p = text, *end = text + len; items && p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
      break;
    json_error_t je;
    json_t *it = json_loadb(p, (size_t)(nl - p), 0, &je);
    if (!json_is_object(it)) {
      json_decref(it);
      break;
    }
    size_t line_end = (size_t)(nl + 1 - text);
    p = nl + 1;
    if (json_object_get(it, RS_CALL_OUTPUT) || json_object_get(it, RS_NESTED)) {
      json_decref(it); /* read after the cut, below */
      continue;
    }
    json_t *cp = json_object_get(it, RS_CHECKPOINT);
    if (cp) {
      json_t *cs = json_object_get(cp, "seq");
      json_t *cn = json_object_get(cp, "items_count");
      /* Its items come before it, in the same write. */
      if (json_is_object(cp) && json_is_integer(cs) &&
          json_integer_value(cs) > seq && json_is_integer(cn) &&
          (size_t)json_integer_value(cn) == json_array_size(items) &&
          (!best || json_integer_value(cs) >
                        json_integer_value(json_object_get(best, "seq")))) {
        json_decref(best);
        best = json_incref(cp);
        best_end = line_end;
      }
      json_decref(it);
      continue;
    }
    if (json_array_append_new(items, it) < 0)
      return -ENOMEM;
    if (json_array_size(items) == want && !have_want) {
      have_want = true;
      want_end = line_end;
    }
  }
  if (!items || !done || !nested)
    return -ENOMEM;
  size_t cut = want_end;
  if (best) {
    if (json_object_update(rs, best) < 0)
      return -ENOMEM;
    want = (size_t)json_integer_value(json_object_get(best, "items_count"));
    cut = best_end;
  } else if (!have_want) {
    return -EINVAL;
  }
  /* Removing an array's last item cannot fail. */
  while (json_array_size(items) > want)
    (void)json_array_remove(items, json_array_size(items) - 1);
  *cut_out = rs_done_calls(text, len, cut, done, nested);
  *items_out = TAKE_PTR(items);
  *done_out = TAKE_PTR(done);
  *nested_out = TAKE_PTR(nested);
  return 0;
}

/* Sets RUN's first turn and usage from the saved progress P: the pending
 * calls belong to the saved turn; a turn that finished starts the next
 * one. */
static void progress_load(struct run *run, json_t *p) {
  json_t *turn = json_object_get(p, "turn");
  int saved = json_is_integer(turn) ? (int)json_integer_value(turn) : 1;
  run->first_turn = saved < 1 ? 1 : saved;
  /* Turn 0: saved before any turn finished (a failed run kept). */
  json_t *pending = json_object_get(p, "pending");
  if (saved >= 1 && !(json_is_array(pending) && json_array_size(pending) > 0) &&
      json_array_size(run->items) > 1)
    run->first_turn++;
  json_t *u = json_object_get(p, "usage");
  struct model_usage *mu = &run->res->usage;
  mu->input_tokens = json_integer_value(json_object_get(u, "input_tokens"));
  mu->output_tokens = json_integer_value(json_object_get(u, "output_tokens"));
  mu->total_tokens = json_integer_value(json_object_get(u, "total_tokens"));
  mu->reasoning_tokens =
      json_integer_value(json_object_get(u, "reasoning_tokens"));
  mu->cached_tokens = json_integer_value(json_object_get(u, "cached_tokens"));
  run->res->turns = (int)json_integer_value(json_object_get(u, "turns"));
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(p, "used_tools"), i, v) {
    json_int_t k = json_integer_value(v);
    if (json_is_integer(v) && k >= 0 && k < AGENT_MAX_AGENTS)
      run->states[k].used_tools = true;
  }
}

void run_close_recorded_all(const struct run_options *o, json_t *sbs) {
  const char *key;
  json_t *sbj;
  json_object_foreach(sbs, key, sbj) {
    const char *rid = json_string_value(json_object_get(sbj, "record"));
    if (rid)
      run_close_recorded(o, rid);
  }
}

/* Re-attaches each agent's sandbox recorded in SBS (a progress's
 * "sandboxes"). */
static int reattach_all(struct run *run, json_t *sbs, struct sbx_error *e) {
  const struct run_options *o = run->sh->o;
  const char *key;
  json_t *sbj;
  json_object_foreach(sbs, key, sbj) {
    char *end = NULL;
    unsigned long idx = strtoul(key, &end, 10);
    const char *rid = json_string_value(json_object_get(sbj, "record"));
    if (!end || *end || idx >= o->agents->n || !rid)
      continue;
    int r = run_reattach_sandbox(run, idx, rid, json_object_get(sbj, "tools"),
                                 json_object_get(sbj, "snapshot"), e);
    if (r < 0)
      return r;
  }
  return 0;
}

/* With the state in the store, the decisions a person made there (sbx
 * serve's approvals) join the run state's, in its words. */
static int decisions_from_store(struct shared *sh, struct sbx_error *e) {
  _cleanup_json_ json_t *ds = NULL;
  int r = store_decisions_get(sh->o->store, sh->rs_path, &ds, e);
  if (r < 0)
    return r;
  json_t *into = json_object_get(sh->rs, "decisions");
  if (!json_is_object(into) &&
      json_object_set_new(sh->rs, "decisions", into = json_object()) < 0)
    return -ENOMEM;
  const char *call;
  json_t *d;
  json_object_foreach(ds, call, d) {
    const char *v = json_string_value(json_object_get(d, "decision"));
    json_t *x =
        json_pack("{s:s, s:O?}", "decision",
                  v && strcmp(v, "approve") == 0 ? "approved" : "rejected",
                  "reason", json_object_get(d, "reason"));
    if (!x || json_object_set_new(into, call, x) < 0)
      return -ENOMEM;
  }
  return 0;
}

/* The root run's last response id and, for a conversation the server
 * keeps, where its chain stands, from the saved state RS of a run with
 * NITEMS items. */
static int chain_load(struct shared *sh, json_t *rs, size_t nitems) {
  const char *rid = json_string_value(json_object_get(rs, "response_id"));
  json_t *from = json_object_get(rs, "chain_from");
  if (!rid)
    return 0;
  if (!(sh->response_id = strdup(rid)))
    return -ENOMEM;
  json_int_t f = json_integer_value(from);
  sh->chained = json_is_integer(from) && f >= 0 && (size_t)f <= nitems;
  sh->chain_from = sh->chained ? (size_t)f : 0;
  return 0;
}

/* Loads the run state at o->resume_path: conversation, agent, turn,
 * usage, pending calls, and re-attaches the recorded sandboxes. */
int run_state_resume(struct run *run, const struct agent **start,
                     struct sbx_error *e) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  _cleanup_free_ char *text = NULL, *jtext = NULL;
  size_t len = 0, jlen = 0, cut = 0;
  int r = rs_io_read(sh, o->resume_path, RS_JOURNAL_MAX, &text, &len, &jtext,
                     &jlen, e);
  if (r < 0) {
    run->res->config_error = true;
    return r;
  }
  json_error_t je;
  json_t *rs = json_loadb(text, len, 0, &je);
  json_t *items = NULL, *done = NULL, *nested = NULL;
  if (json_is_object(rs) &&
      run_state_load_journal(jtext, jlen, rs, &items, &done, &nested, &cut) ==
          0 &&
      (r = rs_io_cut(sh, cut, e)) < 0) {
    json_decref(items);
    json_decref(done);
    json_decref(nested);
    json_decref(rs);
    return r;
  }
  json_t *agent = json_object_get(rs, "agent");
  const char *id = json_string_value(json_object_get(rs, "run_id"));
  const char *status = json_string_value(json_object_get(rs, "status"));
  if (!json_is_object(rs) || !json_is_integer(json_object_get(rs, "version")) ||
      json_integer_value(json_object_get(rs, "version")) != 1 || !id ||
      strlen(id) != 32 || !json_is_array(items) || !json_is_integer(agent) ||
      json_integer_value(agent) < 0 ||
      (size_t)json_integer_value(agent) >= o->agents->n || !status) {
    json_decref(items);
    json_decref(done);
    json_decref(nested);
    json_decref(rs);
    run->res->config_error = true;
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a run state sbx can resume",
                         o->resume_path);
  }
  if (strcmp(status, "finished") == 0) {
    json_decref(items);
    json_decref(done);
    json_decref(nested);
    json_decref(rs);
    run->res->config_error = true;
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EALREADY,
                         "run %s already finished; nothing to resume", id);
  }
  sh->rs = rs;
  memcpy(sh->run_id, id, 33);
  if (o->store && (r = decisions_from_store(sh, e)) < 0)
    return r;
  run->items = items;
  sh->rs_done = done;
  sh->rs_nested = nested;
  sh->rs_items = json_array_size(items);
  sh->rs_written = true;
  sh->rs_seq = json_integer_value(json_object_get(rs, "seq"));
  *start = o->agents->agents[json_integer_value(agent)];
  progress_load(run, rs);
  r = chain_load(sh, rs, json_array_size(items));
  if (r == 0)
    r = run_snapshots_settle(run, e);
  if (r < 0)
    return r;
  return reattach_all(run, json_object_get(rs, "sandboxes"), e);
}

int run_state_nested(struct run *run, const struct run *parent,
                     const char *call_id, const struct agent **start,
                     struct sbx_error *e) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  if (!sh->rs || (parent->depth != 0 && !parent->journaled) || !call_id ||
      !call_id[0])
    return 0;
  int n =
      snprintf(run->path, sizeof(run->path), "%s/%s", parent->path, call_id);
  if (n < 0 || (size_t)n >= sizeof(run->path)) {
    log_warn("the run of agent \"%s\" for call %.64s... is not journaled: "
             "its calls nest too deep; a resume runs it again",
             (*start)->name, call_id);
    run->path[0] = '\0';
    return 0;
  }
  run->journaled = true;
  /* Runs nested in parallel calls come here from their threads. */
  pthread_mutex_lock(&sh->rs_mu);
  _cleanup_json_ json_t *st =
      json_incref(json_object_get(sh->rs_nested, run->path));
  (void)json_object_del(sh->rs_nested, run->path);
  pthread_mutex_unlock(&sh->rs_mu);
  json_t *prog = json_object_get(st, "progress");
  json_t *items = json_object_get(st, "items");
  json_t *agent = json_object_get(prog, "agent");
  if (!json_is_object(prog) || !json_is_array(items) ||
      json_array_size(items) == 0 || !json_is_integer(agent) ||
      json_integer_value(agent) < 0 ||
      (size_t)json_integer_value(agent) >= o->agents->n)
    return 0; /* not journaled before: it starts from its input */
  run->items = json_incref(items);
  run->rs_items = json_array_size(items);
  *start = o->agents->agents[json_integer_value(agent)];
  /* It had answered when the kill came, before its call's output was
   * recorded: the answer is the call's output, and no model is asked
   * again. */
  const char *status = json_string_value(json_object_get(prog, "status"));
  const char *fin = json_string_value(json_object_get(prog, "final_output"));
  if (status && strcmp(status, "finished") == 0 && fin) {
    run_close_recorded_all(o, json_object_get(prog, "sandboxes"));
    progress_load(run, prog);
    run->res->final_output = strdup(fin);
    run->res->last_agent = (*start)->name;
    return run->res->final_output ? 1 : -ENOMEM;
  }
  json_t *pending = json_object_get(prog, "pending");
  if (json_is_array(pending) && json_array_size(pending) > 0)
    run->rs_pending = json_incref(pending);
  run->rs_done = json_incref(json_object_get(st, "done"));
  progress_load(run, prog);
  return reattach_all(run, json_object_get(prog, "sandboxes"), e);
}

/* Ends the state of a run: unless KEEP (the run paused, or failed and may
 * be retried), removes its state and journal from the store;
 * res->state_path is the store's run id of a kept state. */
void run_state_end(struct run *run, bool keep) {
  struct shared *sh = run->sh;
  struct run_result *res = run->res;
  rs_io_close(sh);
  if (sh->rs) {
    (void)snprintf(res->state_path, sizeof(res->state_path), "%s", sh->rs_path);
    /* Only a kept run (or a killed one, which never gets here) leaves
     * its state behind: any other has closed its sandboxes, so there is
     * nothing to resume. */
    if (!keep) {
      /* Runs nested in calls the resume did not get to (it failed first)
       * leave no sandbox behind. */
      const char *path;
      json_t *st;
      json_object_foreach(sh->rs_nested, path, st) {
        run_close_recorded_all(
            sh->o,
            json_object_get(json_object_get(st, "progress"), "sandboxes"));
      }
      rs_io_remove(sh);
      res->state_path[0] = '\0';
    }
  }
  json_decref(sh->rs);
  sh->rs = NULL;
  json_decref(sh->rs_done);
  sh->rs_done = NULL;
  json_decref(sh->rs_nested);
  sh->rs_nested = NULL;
}
