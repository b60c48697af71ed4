/* The model clients of a run: one per API and base URL its agents use,
 * shared with the runs nested in it, and the model call of a turn. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "controller/run/run_internal.h"
#include "controller/telemetry/trace.h"

/* A streamed text delta of the call in flight on the slot ARG. */
static void on_delta(void *arg, const char *text, size_t len) {
  struct client_slot *c = arg;
  events_text_delta(c->sh->ev, &c->where, text, len);
}

/* The model API agent A talks to. */
enum model_api run_agent_api(const struct agent *a) {
  static const enum model_api apis[] = {
      [AGENT_API_RESPONSES] = MODEL_API_RESPONSES,
      [AGENT_API_CHAT_COMPLETIONS] = MODEL_API_CHAT,
  };
  return apis[a->api];
}

/* The model for agent A: --model, the agent's, $OPENAI_DEFAULT_MODEL, or
 * the default. */
const char *run_model_for(const struct run_options *o, const struct agent *a) {
  const char *model = o->model ? o->model : a->model;
  if (!model)
    model = getenv("OPENAI_DEFAULT_MODEL");
  return model ? model : "gpt-5.6-luna";
}

/* Whether two optional strings are the same. */
static bool same_opt(const char *x, const char *y) {
  return (!x && !y) || (x && y && strcmp(x, y) == 0);
}

/* Makes slot C's client for agent A's API, base URL and key. */
static int slot_open(struct shared *sh, struct client_slot *c,
                     const struct agent *a, enum model_api api,
                     struct sbx_error *e) {
  struct model_config cfg = sh->o->model_cfg;
  cfg.api = api;
  cfg.cancel = sh->o->cancel;
  if (a->base_url)
    cfg.base_url = a->base_url;
  if (a->api_key_env) {
    /* A key the agent asks for by name must be there, whatever the
     * endpoint: said before any request, not by the server's 401. */
    cfg.api_key = getenv(a->api_key_env);
    if ((!cfg.api_key || !cfg.api_key[0]) && !cfg.replay_path)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "agent \"%s\": its api_key_env %s is not set",
                           a->name, a->api_key_env);
    if (!(c->key_env = strdup(a->api_key_env)))
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  if (sh->ev) {
    cfg.on_delta = on_delta;
    cfg.delta_arg = c;
  }
  int r = a->base_url && !(c->base_url = strdup(a->base_url))
              ? sbx_error_set(e, SBX_OK, ENOMEM, "out of memory")
              : model_client_new(&cfg, &c->client, e);
  if (r < 0) {
    free(c->base_url);
    free(c->key_env);
    c->base_url = c->key_env = NULL;
    return r;
  }
  c->api = api;
  c->sh = sh;
  (void)pthread_mutex_init(&c->call_mu, NULL);
  return 0;
}

/* The client for A's API and base URL, made on first use: at most
 * RUNNER_MAX_CLIENTS, and only one with --record or --replay. */
int run_get_client(struct shared *sh, const struct agent *a,
                   struct client_slot **out, struct sbx_error *e) {
  enum model_api api = run_agent_api(a);
  const char *url = a->base_url;
  pthread_mutex_lock(&sh->mu);
  for (size_t i = 0; i < sh->nclients; i++) {
    struct client_slot *c = &sh->clients[i];
    if (c->api == api && same_opt(c->base_url, url) &&
        same_opt(c->key_env, a->api_key_env)) {
      *out = c;
      pthread_mutex_unlock(&sh->mu);
      return 0;
    }
  }
  int r = 0;
  const struct model_config *base = &sh->o->model_cfg;
  if (sh->nclients > 0 && (base->record_path || base->replay_path)) {
    r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                      "--record and --replay need every agent on the same "
                      "API and base_url (agent \"%s\" differs)",
                      a->name);
  } else if (sh->nclients == RUNNER_MAX_CLIENTS) {
    r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                      "agents use more than %d model endpoints",
                      RUNNER_MAX_CLIENTS);
  } else {
    struct client_slot *c = &sh->clients[sh->nclients];
    r = slot_open(sh, c, a, api, e);
    if (r == 0) {
      sh->nclients++;
      *out = c;
    }
  }
  pthread_mutex_unlock(&sh->mu);
  return r;
}

/* One model call in an sbx.model_call span. The slot's lock keeps the
 * call's text deltas attributed to this agent and turn. */
int run_call_model(struct run *run, struct client_slot *c,
                   const struct agent *a, const struct model_request *req,
                   struct model_response *resp, struct sbx_error *e) {
  struct trace_span *sp = trace_child(run->turn_span, TRACE_MODEL_CALL);
  trace_set_str(sp, "gen_ai.system", "openai");
  trace_set_str(sp, "gen_ai.operation.name", "chat");
  trace_set_str(sp, "gen_ai.request.model", req->model);
  trace_set_str(sp, "sbx.model.api", model_api_features(c->api)->trace_name);
  pthread_mutex_lock(&c->call_mu);
  c->where = (struct events_where){a->name, (int)run->depth, run->turn};
  int r = model_call(c->client, req, resp, e);
  pthread_mutex_unlock(&c->call_mu);
  if (r < 0) {
    trace_set_error(sp, "%s", e && e->msg[0] ? e->msg : strerror(-r));
  } else {
    trace_set_str(sp, "gen_ai.response.id", resp->id);
    run_trace_usage(sp, &resp->usage);
  }
  trace_end(sp);
  return r;
}

/* Frees SH's clients, at the end of the root run. */
void run_clients_free(struct shared *sh) {
  for (size_t i = 0; i < sh->nclients; i++) {
    model_client_free(sh->clients[i].client);
    free(sh->clients[i].base_url);
    free(sh->clients[i].key_env);
    pthread_mutex_destroy(&sh->clients[i].call_mu);
  }
  sh->nclients = 0;
}
