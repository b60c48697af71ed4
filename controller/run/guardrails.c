/* Guardrails, as the Agents SDK runs them: an agent's input guardrails
 * check the run's input at its first turn, alongside that turn's model
 * call; its output guardrails check its final output. A guardrail whose
 * tripwire is triggered stops the run ("Input guardrail triggered: ...",
 * the SDK's words) with a guardrail_tripped event; one that cannot give a
 * verdict fails the run too ("... failed to complete: ...").
 *
 * A guardrail is a guard agent, run as a nested run whose structured
 * output has a boolean "tripwire_triggered" and an optional "output_info",
 * or a program on the controller's host that gets
 * {"guardrail", "kind", "agent", "input" | "output"} on its stdin and
 * prints such an object.
 *
 * Stricter than the SDK: no tool call of the first turn runs, and no
 * final output is given, before the input guardrails have passed. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "controller/run/run_internal.h"
#include "controller/telemetry/trace.h"
#include "shared/cleanup.h"

/* What one guardrail checks and what it said. */
struct guard_check {
  struct run *run;
  const struct agent *a; /* the agent it guards */
  const struct agent_guardrail *g;
  bool input;               /* an input guardrail, else an output one */
  json_t *subject;          /* borrowed: the input or the output */
  int turn;                 /* for its span's and event's place */
  bool tripped;             /* the verdict */
  json_t *info;             /* new, or NULL */
  struct model_usage usage; /* of a guard agent's run */
};

static const char *kind_name(bool input) {
  return input ? "input" : "output";
}

/* The verdict in V: an object with a boolean "tripwire_triggered" and,
 * optionally, "output_info" (any JSON). STRICT refuses other keys (a
 * command's answer); a guard agent's output may have others of its
 * output_type. */
static int verdict(struct guard_check *c, json_t *v, bool strict,
                   struct sbx_error *e) {
  json_t *t = json_object_get(v, "tripwire_triggered");
  if (!json_is_object(v) || !json_is_boolean(t))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "its answer is not a JSON object with a boolean "
                         "\"tripwire_triggered\"");
  const char *key;
  json_t *item;
  json_object_foreach(v, key, item) {
    if (strict && strcmp(key, "tripwire_triggered") != 0 &&
        strcmp(key, "output_info") != 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                           "its answer has the unknown key \"%.64s\" (it "
                           "may have \"tripwire_triggered\" and "
                           "\"output_info\")",
                           key);
  }
  c->tripped = json_is_true(t);
  json_t *info = json_object_get(v, "output_info");
  c->info = info && !json_is_null(info) ? json_incref(info) : NULL;
  return 0;
}

/* Runs the guardrail's program with the check on its stdin. */
static int check_command(struct guard_check *c, struct sbx_error *e) {
  _cleanup_json_ json_t *in =
      json_pack("{s:s, s:s, s:s, s:O}", "guardrail", c->g->name, "kind",
                kind_name(c->input), "agent", c->a->name,
                c->input ? "input" : "output", c->subject);
  _cleanup_free_ char *text =
      in ? json_dumps(in, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  if (!text)
    return -ENOMEM;
  _cleanup_free_ char *out = NULL;
  size_t len = 0;
  int r = tools_host_command(c->g->argv, c->g->dir, c->g->timeout_s, text,
                             strlen(text), &out, &len, e);
  if (r < 0)
    return r;
  json_error_t je;
  _cleanup_json_ json_t *v = json_loadb(out, len, JSON_REJECT_DUPLICATES, &je);
  if (!v)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "the command's output is not JSON: %s", je.text);
  return verdict(c, v, true, e);
}

/* Runs the guard agent on the subject, as a nested run. */
static int check_agent(struct guard_check *c, struct trace_span *span,
                       struct sbx_error *e) {
  _cleanup_free_ char *dumped =
      json_is_string(c->subject)
          ? NULL
          : json_dumps(c->subject, JSON_COMPACT | JSON_ENCODE_ANY);
  const char *text =
      json_is_string(c->subject) ? json_string_value(c->subject) : dumped;
  if (!text)
    return -ENOMEM;
  struct nested_spec ns = {
      .agent = c->g->agent,
      .caller = c->a,
      .span = span,
      .own_usage = true,
  };
  struct run_result res = {0};
  int r = run_nested_agent(c->run, &ns, text, &res, e);
  c->usage = res.usage;
  if (r == RUNNER_PAUSED)
    r = sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                      "the guard agent \"%s\" stopped for an approval, which "
                      "a guard agent cannot wait for",
                      c->g->agent->name);
  if (r == 0)
    r = verdict(c, res.final_json, false, e);
  run_result_clear(&res);
  return r;
}

/* Runs one guardrail in a span of its own. A failure to give a verdict
 * goes to E in the SDK's words. */
static int check_one(struct guard_check *c, struct sbx_error *e) {
  struct trace_span *sp = trace_child(c->run->turn_span, TRACE_GUARDRAIL);
  trace_set_str(sp, "sbx.guardrail.name", c->g->name);
  trace_set_str(sp, "sbx.guardrail.kind", kind_name(c->input));
  trace_set_str(sp, "gen_ai.agent.name", c->a->name);
  struct sbx_error le = {0};
  int r = c->g->agent ? check_agent(c, sp, &le) : check_command(c, &le);
  if (r < 0) {
    const char *why = le.msg[0] ? le.msg : strerror(-r);
    trace_set_error(sp, "%s", why);
    trace_end(sp);
    return sbx_error_set(e, le.code != SBX_OK ? le.code : SBX_INTERNAL, -r,
                         "%s guardrail failed to complete: guardrail "
                         "\"%s\" of agent \"%s\": %s",
                         c->input ? "Input" : "Output", c->g->name, c->a->name,
                         why);
  }
  trace_set_bool(sp, "sbx.guardrail.triggered", c->tripped);
  trace_end(sp);
  return 0;
}

/* Stops the run for the tripped check C: the event, the result's record
 * and the error. */
static int tripwire(struct run *run, const struct guard_check *c,
                    struct sbx_error *e) {
  struct run_result *res = run->res;
  events_guardrail_tripped(
      run->sh->ev, &(struct events_where){c->a->name, (int)run->depth, c->turn},
      c->g->name, kind_name(c->input), c->info);
  res->guardrail = c->g->name;
  res->guardrail_kind = kind_name(c->input);
  json_decref(res->guardrail_info);
  res->guardrail_info = json_incref(c->info);
  _cleanup_free_ char *info =
      c->info ? json_dumps(c->info, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  const char *K = c->input ? "Input" : "Output";
  if (info)
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                         "%s guardrail triggered: %s (guardrail \"%s\" of "
                         "agent \"%s\")",
                         K, info, c->g->name, c->a->name);
  return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                       "%s guardrail triggered. (guardrail \"%s\" of agent "
                       "\"%s\")",
                       K, c->g->name, c->a->name);
}

/* The run's input as a guardrail gets it (new): the user's text when it
 * is one message with text content (the SDK's string input), else its
 * items. */
static json_t *run_input(const struct run *run) {
  json_t *first = json_array_get(run->items, 0);
  json_t *content = json_object_get(first, "content");
  if (json_array_size(run->items) == 1 && json_is_string(content))
    return json_incref(content);
  return json_deep_copy(run->items);
}

static void *input_main(void *arg) {
  struct guard_job *g = arg;
  const struct agent *a = g->a;
  for (size_t i = 0; i < a->ninput_guardrails && g->rc == 0; i++) {
    struct guard_check c = {
        .run = g->run,
        .a = a,
        .g = &a->input_guardrails[i],
        .input = true,
        .subject = g->subject,
        .turn = g->turn,
    };
    g->rc = check_one(&c, &g->err);
    run_usage_add(&g->usage, &c.usage);
    if (g->rc == 0 && c.tripped) {
      g->tripped = c.g;
      g->info = c.info;
      return NULL;
    }
    json_decref(c.info);
  }
  return NULL;
}

int run_guardrails_input_start(struct guard_job *g, struct run *run,
                               const struct agent *a, int turn) {
  *g = (struct guard_job){.run = run, .a = a, .turn = turn};
  if (a->ninput_guardrails == 0)
    return 0;
  if (!(g->subject = run_input(run)))
    return -ENOMEM;
  int r = pthread_create(&g->thread, NULL, input_main, g);
  if (r != 0) {
    g->subject = (json_decref(g->subject), NULL);
    return -r;
  }
  g->started = true;
  return 0;
}

int run_guardrails_input_wait(struct guard_job *g, struct sbx_error *e) {
  if (!g->started)
    return 0;
  (void)pthread_join(g->thread, NULL);
  g->started = false;
  json_decref(g->subject);
  g->subject = NULL;
  struct run *run = g->run;
  run_usage_add(&run->res->usage, &g->usage);
  if (g->rc < 0) {
    if (e)
      *e = g->err;
    return g->rc;
  }
  if (!g->tripped)
    return 0;
  struct guard_check c = {.a = g->a,
                          .g = g->tripped,
                          .input = true,
                          .turn = g->turn,
                          .info = g->info};
  int r = tripwire(run, &c, e);
  json_decref(g->info);
  g->info = NULL;
  return r;
}

int run_guardrails_output(struct run *run, const struct agent *a, int turn,
                          struct sbx_error *e) {
  if (a->noutput_guardrails == 0)
    return 0;
  json_t *fj = run->res->final_json;
  _cleanup_json_ json_t *subject =
      fj ? json_incref(fj) : json_string(run->res->final_output);
  if (!subject)
    return -ENOMEM;
  for (size_t i = 0; i < a->noutput_guardrails; i++) {
    struct guard_check c = {
        .run = run,
        .a = a,
        .g = &a->output_guardrails[i],
        .subject = subject,
        .turn = turn,
    };
    int r = check_one(&c, e);
    run_usage_add(&run->res->usage, &c.usage);
    if (r == 0 && c.tripped)
      r = tripwire(run, &c, e);
    json_decref(c.info);
    if (r < 0)
      return r;
  }
  return 0;
}
