/* The decisions on tool calls that need a person (approvals.h says
 * which): sbx approve and sbx reject record them in the run state, or
 * with --approve-ask the terminal is asked; a rejected call is answered
 * with the reason, and a call still undecided pauses the run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/run/approvals.h"
#include "controller/run/run_internal.h"
#include "shared/cleanup.h"

/* The decision recorded for CALL_ID by sbx approve / sbx reject, or NULL. */
static const char *decision_for(struct run *run, const char *call_id,
                                const char **reason) {
  json_t *d = json_object_get(json_object_get(run->sh->rs, "decisions"),
                              call_id ? call_id : "");
  *reason = json_string_value(json_object_get(d, "reason"));
  return json_string_value(json_object_get(d, "decision"));
}

/* Records DECISION (and REASON, or NULL) for CALL_ID in the run state,
 * as sbx approve / sbx reject do. -ENOMEM. */
static int record_decision(struct run *run, const char *call_id,
                           const char *decision, const char *reason) {
  json_t *ds = json_object_get(run->sh->rs, "decisions");
  if (!json_is_object(ds)) {
    ds = json_object();
    if (json_object_set_new(run->sh->rs, "decisions", ds) < 0)
      return -ENOMEM;
  }
  if (json_object_set_new(
          ds, call_id,
          json_pack("{s:s, s:s?}", "decision", decision, "reason", reason)) < 0)
    return -ENOMEM;
  return 0;
}

/* Asks on the terminal whether the call may run; records the answer.
 * -ENOMEM. */
static int ask_approval(struct run *run, const char *tool, const char *args,
                        const char *call_id) {
  FILE *tty = run->sh->o->ask_tty;
  fprintf(tty, "sbx: %s wants to run %s %s\nApprove? [y/N] ",
          run->sh->o->agents->agents[0]->name, tool, args ? args : "");
  fflush(tty);
  char line[512];
  bool yes =
      fgets(line, sizeof(line), tty) && (line[0] == 'y' || line[0] == 'Y');
  char reason[512] = "";
  if (!yes) {
    fprintf(tty, "Reason (optional): ");
    fflush(tty);
    if (fgets(reason, sizeof(reason), tty))
      reason[strcspn(reason, "\n")] = '\0';
  }
  return record_decision(run, call_id, yes ? "approved" : "rejected",
                         reason[0] ? reason : NULL);
}

/* The output item that answers ITEM with a rejection (new; NULL on
 * OOM). */
static json_t *rejected_output(json_t *item, const char *reason) {
  const char *type = json_string_value(json_object_get(item, "type"));
  const char *call_id = json_string_value(json_object_get(item, "call_id"));
  _cleanup_free_ char *text = approvals_rejection_text(reason);
  if (!text)
    return NULL;
  if (type && strcmp(type, "apply_patch_call") == 0)
    return json_pack("{s:s, s:s, s:s, s:s}", "type", "apply_patch_call_output",
                     "call_id", call_id ? call_id : "", "status", "failed",
                     "output", text);
  return json_pack("{s:s, s:s, s:s, s:s}", "type", "function_call_output",
                   "call_id", call_id ? call_id : "", "output", text, "status",
                   "completed");
}

/* Decides on the N calls of JOBS that need a person, at W: an approved
 * call runs, a rejected one is answered with the reason (skip), any other
 * is asked on the terminal (--approve-ask) or counted in *AWAITING, for
 * the run to pause. */
int run_decide_calls(struct run *run, const struct agent *a,
                     const struct events_where *w, struct call_job *jobs,
                     size_t n, size_t *awaiting) {
  struct shared *sh = run->sh;
  const struct run_options *o = sh->o;
  *awaiting = 0;
  for (size_t m = 0; m < n; m++) {
    if (jobs[m].skip)
      continue; /* answered already: recorded before a kill */
    json_t *it = jobs[m].item;
    const char *cid = json_string_value(json_object_get(it, "call_id"));
    const char *tool, *args;
    _cleanup_free_ char *owned = NULL;
    int r = run_call_args(it, &tool, &args, &owned);
    if (r < 0)
      return r;
    /* The agent's "approvals" by tool name, else the require_approval of
     * the MCP server that has the tool. */
    bool needed =
        tool && (agent_find_approval(a, tool)
                     ? approvals_needed(a, tool, args)
                     : mcp_set_needs_approval(run->states[a->index].mcp, tool));
    if (!needed)
      continue;
    const char *reason = NULL;
    const char *dec = sh->rs ? decision_for(run, cid, &reason) : NULL;
    if (!dec && o->approve_ask && o->ask_tty && sh->rs && cid) {
      events_approval_requested(sh->ev, w, tool, cid, args, NULL);
      r = ask_approval(run, tool, args, cid);
      if (r < 0)
        return r;
      dec = decision_for(run, cid, &reason);
    }
    if (dec && strcmp(dec, "approved") == 0)
      continue;
    if (dec && strcmp(dec, "rejected") == 0) {
      jobs[m].output = rejected_output(it, reason);
      if (!jobs[m].output)
        return -ENOMEM;
      jobs[m].skip = true;
      continue;
    }
    (*awaiting)++;
    events_approval_requested(sh->ev, w, tool, cid, args,
                              sh->rs ? sh->rs_path : NULL);
  }
  return 0;
}
