#include "controller/cli/backend_flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"
#include "controller/config/agent.h"
#include "shared/cleanup.h"
#include "shared/peer.h"

void cli_backend_flags_init(struct cli_backend_flags *f,
                            const struct option *own) {
  memset(f, 0, sizeof(*f));
  size_t n = 0;
  for (; own[n].name && n < CLI_MAX_OPTIONS; n++)
    f->opts[n] = own[n];
  if (n < CLI_MAX_OPTIONS)
    f->opts[n++] = (struct option){.name = "heartbeat",
                                   .has_arg = required_argument,
                                   .val = CLI_HEARTBEAT_FLAG};
  const struct backend *b;
  for (size_t i = 0; (b = backend_at(i)); i++)
    for (const struct backend_option *o = b->options; o && o->key; o++) {
      if (!o->flag)
        continue;
      bool seen = false;
      for (size_t k = 0; k < n && !seen; k++)
        seen = strcmp(f->opts[k].name, o->flag) == 0;
      if (seen || n == CLI_MAX_OPTIONS)
        continue;
      f->opts[n] = (struct option){
          .name = o->flag,
          .has_arg = o->type == BACKEND_OPTION_BOOLEAN ? no_argument
                                                       : required_argument,
          .val = CLI_BACKEND_FLAG + (int)n,
      };
      n++;
    }
  f->opts[n] = (struct option){0};
}

bool cli_backend_flags_take(struct cli_backend_flags *f, int ch,
                            const char *arg) {
  if (ch == CLI_HEARTBEAT_FLAG) {
    f->heartbeat = arg;
    return true;
  }
  if (ch < CLI_BACKEND_FLAG || ch >= CLI_BACKEND_FLAG + CLI_MAX_OPTIONS)
    return false;
  const char *flag = f->opts[ch - CLI_BACKEND_FLAG].name;
  size_t i = 0;
  while (i < f->ngiven && strcmp(f->given[i].flag, flag) != 0)
    i++;
  if (i == f->ngiven)
    f->ngiven++;
  f->given[i].flag = flag;
  f->given[i].text = arg;
  return true;
}

int cli_backend_heartbeat(const struct cli_backend_flags *f,
                          struct backend_options *bo, struct sbx_error *e) {
  if (!f->heartbeat)
    return 0;
  const char *s = f->heartbeat;
  char *end = NULL;
  errno = 0;
  long v = *s >= '0' && *s <= '9' ? strtol(s, &end, 10) : 0;
  if (errno || !end || *end || v < 1 || v > CLI_HEARTBEAT_MAX_S)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--heartbeat \"%s\": expected a whole number of "
                         "seconds from 1 to %d",
                         s, CLI_HEARTBEAT_MAX_S);
  bo->heartbeat_ms = (unsigned)v * 1000u;
  return 0;
}

bool cli_backend_flags_any(const struct cli_backend_flags *f) {
  return f->ngiven > 0;
}

/* B's option whose flag is FLAG, or NULL. */
static const struct backend_option *by_flag(const struct backend *b,
                                            const char *flag) {
  for (const struct backend_option *o = b->options; o && o->key; o++)
    if (o->flag && strcmp(o->flag, flag) == 0)
      return o;
  return NULL;
}

/* The error for FLAG, which backend B lacks: which backend has it. */
static int not_ours(const struct backend *b, const char *flag,
                    struct sbx_error *e) {
  const struct backend *x;
  for (size_t i = 0; (x = backend_at(i)); i++)
    if (by_flag(x, flag))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "--%s needs --backend %s (this is backend %s)", flag,
                           x->name, b->name);
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "--%s is no option of backend %s", flag, b->name);
}

/* Checks the flag's value alone, so that a refusal names the flag. */
static int check_alone(const struct backend *b, const char *flag,
                       const char *text, const struct backend_option *o,
                       json_t *v, struct sbx_error *e) {
  _cleanup_json_ json_t *one = json_object();
  if (!one || json_object_set(one, o->key, v) < 0)
    return -ENOMEM;
  void *own = NULL;
  struct sbx_error ve = {0};
  int r = backend_options_parse(b, one, NULL, &own, &ve);
  backend_options_free(b, own);
  if (r < 0)
    return text ? sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                                "--%s \"%s\": %s", flag, text, ve.msg)
                : sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "--%s: %s",
                                flag, ve.msg);
  return 0;
}

int cli_backend_options(const struct cli_backend_flags *f,
                        const struct backend *b, json_t *run_config,
                        const char *where, void **own, struct sbx_error *e) {
  *own = NULL;
  _cleanup_json_ json_t *obj =
      run_config ? json_deep_copy(run_config) : json_object();
  if (!obj)
    return -ENOMEM;
  for (size_t i = 0; i < f->ngiven; i++) {
    const char *flag = f->given[i].flag, *text = f->given[i].text;
    const struct backend_option *o = by_flag(b, flag);
    if (!o)
      return not_ours(b, flag, e);
    _cleanup_json_ json_t *v = NULL;
    int r = backend_option_value(o, text, &v, e);
    if (r == 0)
      r = check_alone(b, flag, text, o, v, e);
    if (r == 0 && json_object_set(obj, o->key, v) < 0)
      r = -ENOMEM;
    if (r < 0)
      return r;
  }
  return backend_options_parse(b, json_object_size(obj) ? obj : NULL,
                               run_config ? where : NULL, own, e);
}

void cli_backend_flags_help(FILE *out) {
  char names[256];
  (void)backend_names(names, sizeof(names), "", " or ");
  /* "local (default) or docker": the first is the default. */
  const char *first = backend_at(0)->name;
  fprintf(out, "  %-20s sandbox backend: %s (default)%s\n", "--backend NAME",
          first, names + strlen(first));
  fprintf(out,
          "  %-20s how long the connection to the sandbox's sandboxd may "
          "stay\n"
          "  %-20s down before its calls fail (default %u; a sandboxd whose\n"
          "  %-20s process sbx can see is noticed at its exit); recorded "
          "with\n"
          "  %-20s the sandbox for later commands\n",
          "--heartbeat SECONDS", "", SBX_PEER_HEARTBEAT_MS / 1000u, "", "");
  const struct backend *b;
  for (size_t i = 0; (b = backend_at(i)); i++)
    for (const struct backend_option *o = b->options; o && o->key; o++) {
      if (!o->flag)
        continue;
      char lhs[64];
      (void)snprintf(lhs, sizeof(lhs), "--%s%s%s", o->flag,
                     o->metavar ? " " : "", o->metavar ? o->metavar : "");
      fprintf(out, "  %-20s %s: %s\n", lhs, b->name, o->help);
    }
}

/* Whether A's run_config is none, or the same as FIRST's: the other
 * agents' sandboxes use the starting agent's backend and options, so a
 * run_config of theirs that says otherwise would not apply. */
static bool same_run_config(const struct agent *a, const struct agent *first) {
  if (!a->run_backend && !a->run_options)
    return true;
  return backend_find(a->run_backend) == backend_find(first->run_backend) &&
         (a->run_options ? first->run_options &&
                               json_equal(a->run_options, first->run_options)
                         : !first->run_options);
}

/* Checks the run_config of every agent of SET but the first, which
 * cli_backend_choose applies: against its backend, and against the
 * first's. */
static int check_other_agents(const struct agent_set *set,
                              struct sbx_error *e) {
  const struct agent *first = set->agents[0];
  for (size_t i = 1; i < set->n; i++) {
    const struct agent *a = set->agents[i];
    const struct backend *b = backend_find(a->run_backend);
    void *own = NULL;
    struct sbx_error pe = {0};
    if (b &&
        backend_options_parse(b, a->run_options, "run_config", &own, &pe) < 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "%s: %s", a->path,
                           pe.msg);
    backend_options_free(b, own);
    if (b && !same_run_config(a, first))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: its run_config differs from the starting "
                           "agent's (%s): every sandbox of a run uses the "
                           "starting agent's backend and options",
                           a->path, first->path);
  }
  return 0;
}

/* The backend of AGENT's run_config ("" for none), or the message saying
 * it names none of ours. */
static int run_config_backend(const struct agent *a, const struct backend **b,
                              struct sbx_error *e) {
  *b = backend_find(a->run_backend);
  if (*b)
    return 0;
  char names[256];
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "%s: \"run_config.backend\" must be %s", a->path,
                       backend_names(names, sizeof(names), "\"", " or "));
}

int cli_backend_choose(const struct cli_backend_flags *f, const char *name,
                       const struct agent_set *agents,
                       const struct backend **out, void **own,
                       struct sbx_error *e) {
  *own = NULL;
  char names[256];
  const struct backend *b = backend_find(name);
  if (!b)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown backend \"%s\" (available: %s)", name,
                         backend_names(names, sizeof(names), "", ", "));
  const struct agent *first = agents ? agents->agents[0] : NULL;
  json_t *run_config = NULL;
  for (size_t i = 0; agents && i < agents->n; i++) {
    const struct backend *ab = NULL;
    int r = run_config_backend(agents->agents[i], &ab, e);
    if (r < 0)
      return r;
    if (i == 0 && !name)
      b = ab;
  }
  if (agents) {
    int r = check_other_agents(agents, e);
    if (r < 0)
      return r;
    run_config = first->run_options;
  }
  if (run_config && b != backend_find(first->run_backend))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--backend %s replaces the run_config of %s, whose "
                         "options are backend %s's",
                         b->name, first->path,
                         backend_find(first->run_backend)->name);
  struct sbx_error oe = {0};
  int r = cli_backend_options(f, b, run_config, "run_config", own, &oe);
  if (r < 0) {
    /* A flag's refusal names the flag; the file's names the file. */
    bool file = run_config && !cli_backend_flags_any(f);
    return sbx_error_set(e, oe.code ? oe.code : SBX_INTERNAL, -r, "%s%s%s",
                         file ? first->path : "", file ? ": " : "",
                         oe.msg[0] ? oe.msg : "out of memory");
  }
  *out = b;
  return 0;
}
