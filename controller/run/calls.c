/* The tool calls of a response: each in its own thread (at most
 * RUNNER_MAX_PARALLEL at once) and its own sbx.tool_call span, between
 * tool_call_started and tool_call_finished. A call is a sandbox tool, an
 * apply_patch operation, an agent used as a tool (a nested run), or a
 * host tool (a command tool or an MCP server's tool). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/skills.h"
#include "controller/run/run_internal.h"
#include "controller/telemetry/trace.h"
#include "shared/cleanup.h"
#include "shared/client.h"
#include "shared/clock.h"

#define RUNNER_MAX_PARALLEL 16

/* The tool name and the arguments text of the call ITEM: a function
 * call's name and arguments, or "apply_patch" and its operation's JSON
 * (new in *OWNED). -ENOMEM. */
int run_call_args(json_t *item, const char **tool, const char **args,
                  char **owned) {
  *owned = NULL;
  const char *type = json_string_value(json_object_get(item, "type"));
  if (strcmp(type, "apply_patch_call") != 0) {
    *tool = json_string_value(json_object_get(item, "name"));
    *args = json_string_value(json_object_get(item, "arguments"));
    return 0;
  }
  *tool = "apply_patch";
  *args = NULL;
  json_t *op = json_object_get(item, "operation");
  if (!json_is_object(op) && !json_is_array(op))
    return 0; /* no operation to show */
  *owned = json_dumps(op, JSON_COMPACT);
  *args = *owned;
  return *owned ? 0 : -ENOMEM;
}

/* Fails J for a tool NAME its agent does not have. */
static void unknown_tool(struct call_job *j, const char *name) {
  j->rc = sbx_error_set(&j->err, SBX_INTERNAL, ENOENT,
                        "the model called tool \"%s\", which agent \"%s\" "
                        "does not have",
                        name, j->agent->name);
}

/* Runs J's apply_patch operation into j->output. */
static void run_patch(struct call_job *j, const char *call_id) {
  struct agent_state *st = &j->run->states[j->agent->index];
  json_t *op = json_object_get(j->item, "operation");
  const char *status = "failed";
  _cleanup_free_ char *text = NULL;
  if (!st->ready) {
    text = strdup("apply_patch needs the filesystem capability");
    if (!text)
      j->rc = -ENOMEM;
    (void)sbx_error_set(&j->tc.failure, SBX_INVALID_ARGUMENT, EINVAL,
                        "apply_patch needs the filesystem capability");
  } else {
    j->rc = tools_apply_patch_operation(&st->tb, op, &status, &text, &j->tc);
  }
  j->output =
      json_pack("{s:s, s:s, s:s, s:s*}", "type", "apply_patch_call_output",
                "call_id", call_id, "status", status, "output", text);
  if (!j->output && j->rc == 0)
    j->rc = -ENOMEM;
}

/* Runs the agent used as tool T for J, with the "input" of J's ARGS, into
 * *OUT (new). 0, or j->rc set. */
static void run_agent_tool(struct call_job *j, const struct agent_tool *t,
                           const char *args, json_t **out) {
  json_error_t je;
  json_t *in = json_loads(args ? args : "", 0, &je);
  const char *input = json_string_value(json_object_get(in, "input"));
  char *answer = NULL;
  if (!input) {
    *out = json_string(tools_generic_error);
    (void)sbx_error_set(&j->tc.failure, SBX_INVALID_ARGUMENT, EINVAL,
                        "invalid arguments");
  } else if (t->parent_sandbox && !j->run->states[j->agent->index].ready) {
    /* The loader makes sure the caller works in a sandbox, which its
     * turn readied before asking the model: this is a safeguard. */
    static const char msg[] = "this agent has no sandbox for the agent it "
                              "uses as a tool to work in";
    *out = json_string(msg);
    (void)sbx_error_set(&j->tc.failure, SBX_INVALID_ARGUMENT, ENODEV, "%s",
                        msg);
  } else {
    j->rc = run_nested(j, t, input, &answer);
    *out = j->rc == 0 ? json_string(answer) : NULL;
  }
  free(answer);
  json_decref(in);
  if (!*out && j->rc == 0)
    j->rc = -ENOMEM;
}

/* Runs J's call into j->output, or fails the run with j->rc and j->err. */
static void run_call(struct call_job *j) {
  struct run *run = j->run;
  const struct agent *a = j->agent;
  struct agent_state *st = &run->states[a->index];
  const char *type = json_string_value(json_object_get(j->item, "type"));
  const char *call_id = json_string_value(json_object_get(j->item, "call_id"));
  if (!call_id)
    call_id = "";
  if (strcmp(type, "apply_patch_call") == 0) {
    run_patch(j, call_id);
    return;
  }
  const char *name = json_string_value(json_object_get(j->item, "name"));
  const char *args = json_string_value(json_object_get(j->item, "arguments"));
  if (!name)
    name = "";
  json_t *out = NULL;
  for (size_t i = 0; i < a->ntools && !out; i++) {
    char tn[128];
    run_tool_agent_name(&a->tools[i], tn, sizeof(tn));
    if (strcmp(tn, name) != 0)
      continue;
    run_agent_tool(j, &a->tools[i], args, &out);
    if (j->rc != 0)
      return; /* failed, or paused inside (RUNNER_PAUSED) */
  }
  const struct agent_command *cmd = out ? NULL : agent_find_command(a, name);
  if (cmd) {
    int r = tools_command_call(cmd, args, &out, &j->tc);
    if (r < 0) {
      j->rc = r;
      return;
    }
  }
  if (!out && st->mcp) {
    int r = mcp_set_call(st->mcp, name, args, &out, &j->tc);
    if (r < 0 && r != -ENOENT) {
      j->rc = r;
      return;
    }
  }
  if (!out && st->ready && a->skills && a->skills->lazy_src &&
      strcmp(name, "load_skill") == 0) {
    int r = run_load_skill(run, a, args, &out, &j->tc);
    if (r < 0) {
      j->rc = r;
      return;
    }
  }
  if (!out) {
    if (!st->ready) {
      unknown_tool(j, name);
      return;
    }
    int r = tools_call(&st->tb, name, args, &out, &j->tc);
    if (r == -ENOENT) {
      unknown_tool(j, name);
      return;
    }
    if (r < 0) {
      j->rc = r;
      return;
    }
  }
  /* Every output item says "completed", as the SDK's do. */
  j->output =
      json_pack("{s:s, s:s, s:o, s:s}", "type", "function_call_output",
                "call_id", call_id, "output", out, "status", "completed");
  if (!j->output)
    j->rc = -ENOMEM;
}

/* One tool call of a response, in its own thread: tool_call_started, the
 * call in an sbx.tool_call span, tool_call_finished. */
static void *call_main(void *arg) {
  struct call_job *j = arg;
  struct run *run = j->run;
  struct events *ev = run->sh->ev;
  struct events_where w = {j->agent->name, (int)run->depth, run->turn};
  const char *call_id = json_string_value(json_object_get(j->item, "call_id"));
  const char *name, *args;
  char *owned;
  j->rc = run_call_args(j->item, &name, &args, &owned);
  if (j->rc < 0)
    return NULL;
  events_tool_call_started(ev, &w, name, call_id, args);
  free(owned);
  j->tc.span = trace_child(run->turn_span, TRACE_TOOL_CALL);
  trace_set_str(j->tc.span, "gen_ai.tool.name", name);
  trace_set_str(j->tc.span, "gen_ai.tool.call.id", call_id);
  trace_set_str(j->tc.span, "gen_ai.agent.name", j->agent->name);
  uint64_t t0 = sbx_now_ns();
  /* Mutating sandbox requests get ids derived from the run and the call:
   * a resumed run that repeats this call is answered from sandboxd's reply
   * cache instead of doing the work twice. */
  char tag[64];
  (void)snprintf(tag, sizeof(tag), "%.12s-%u-%.40s", run->sh->run_id,
                 run->depth, call_id ? call_id : "");
  sbx_client_set_tag(tag);
  run_call(j);
  sbx_client_set_tag(NULL);
  if (j->rc == 0 && j->output)
    j->rc = run_state_call_done(run, j->output, &j->err);
  const char *error = NULL;
  if (j->rc < 0)
    error = j->err.msg[0] ? j->err.msg : strerror(-j->rc);
  else if (j->tc.failure.code != SBX_OK)
    error = j->tc.failure.msg;
  const char *status = j->rc == RUNNER_PAUSED ? "paused"
                       : error                ? "failed"
                                              : "completed";
  events_tool_call_finished(ev, &w, name, call_id, status,
                            json_object_get(j->output, "output"), error,
                            (int64_t)((sbx_now_ns() - t0) / 1000000));
  trace_set_str(j->tc.span, "sbx.tool.status", status);
  if (error)
    trace_set_error(j->tc.span, "%s", error);
  trace_end(j->tc.span);
  j->tc.span = NULL;
  return NULL;
}

/* Runs the calls of JOBS that are not skipped concurrently, at most
 * RUNNER_MAX_PARALLEL at once; a lone call, or one whose thread cannot be
 * started, runs in this thread. */
void run_calls(struct call_job *jobs, size_t nj) {
  for (size_t k = 0; k < nj; k += RUNNER_MAX_PARALLEL) {
    size_t end = k + RUNNER_MAX_PARALLEL < nj ? k + RUNNER_MAX_PARALLEL : nj;
    for (size_t m = k; m < end; m++) {
      if (jobs[m].skip)
        continue;
      if (nj == 1 ||
          pthread_create(&jobs[m].thread, NULL, call_main, &jobs[m]) != 0)
        call_main(&jobs[m]);
      else
        jobs[m].started = true;
    }
    for (size_t m = k; m < end; m++)
      if (jobs[m].started)
        (void)pthread_join(jobs[m].thread, NULL);
  }
}
