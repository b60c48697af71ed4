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
  if (n < CLI_MAX_OPTIONS)
    f->opts[n++] = (struct option){
        .name = "option", .has_arg = required_argument, .val = CLI_OPTION_FLAG};
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

/* The option of some backend whose flag is FLAG: backends that share a
 * flag give it the same key and type. */
static const struct backend_option *any_by_flag(const char *flag) {
  const struct backend *b;
  for (size_t i = 0; (b = backend_at(i)); i++)
    for (const struct backend_option *o = b->options; o && o->key; o++)
      if (o->flag && strcmp(o->flag, flag) == 0)
        return o;
  return NULL;
}

/* The key the given entry at I sets, and its length. */
static const char *given_key(const struct cli_backend_flags *f, size_t i,
                             size_t *n) {
  if (!f->given[i].flag) {
    *n = strcspn(f->given[i].text, "=");
    return f->given[i].text;
  }
  const struct backend_option *o = any_by_flag(f->given[i].flag);
  *n = strlen(o->key);
  return o->key;
}

bool cli_backend_flags_take(struct cli_backend_flags *f, int ch,
                            const char *arg) {
  if (ch == CLI_HEARTBEAT_FLAG) {
    f->heartbeat = arg;
    return true;
  }
  const char *flag = NULL;
  if (ch >= CLI_BACKEND_FLAG && ch < CLI_BACKEND_FLAG + CLI_MAX_OPTIONS)
    flag = f->opts[ch - CLI_BACKEND_FLAG].name;
  else if (ch != CLI_OPTION_FLAG)
    return false;
  if (f->ngiven == CLI_MAX_GIVEN) {
    f->overflow = true;
    return true;
  }
  f->given[f->ngiven].flag = flag;
  f->given[f->ngiven].text = arg;
  /* A value for a key given before replaces it (the last wins), but the
   * members or elements of a repeatable flag add up. */
  const struct backend_option *o = flag ? any_by_flag(flag) : NULL;
  bool map = o && (o->type == BACKEND_OPTION_STRING_MAP || o->flag_element);
  size_t kn, n;
  const char *key = given_key(f, f->ngiven, &kn);
  for (size_t i = 0; i < f->ngiven;) {
    const char *k = given_key(f, i, &n);
    bool same =
        n == kn && strncmp(k, key, n) == 0 &&
        !(map && f->given[i].flag && strcmp(f->given[i].flag, flag) == 0);
    if (same) {
      memmove(&f->given[i], &f->given[i + 1],
              (f->ngiven - i) * sizeof(f->given[0]));
      f->ngiven--;
    } else {
      i++;
    }
  }
  f->ngiven++;
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

/* Checks the value V of option KEY alone, so that a refusal names the
 * flag (LABEL: "--image" or "-o") and its TEXT. */
static int check_alone(const struct backend *b, const char *label,
                       const char *text, const char *key, json_t *v,
                       struct sbx_error *e) {
  _cleanup_json_ json_t *one = json_object();
  if (!one || json_object_set(one, key, v) < 0)
    return -ENOMEM;
  void *own = NULL;
  struct sbx_error ve = {0};
  int r = backend_options_parse(b, one, NULL, &own, &ve);
  backend_options_free(b, own);
  if (r < 0)
    return text ? sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                                "%s \"%s\": %s", label, text, ve.msg)
                : sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "%s: %s",
                                label, ve.msg);
  return 0;
}

/* The value of -o TEXT ("KEY=VALUE", or "KEY" for true) for backend B:
 * KEY into KEY (of size N) and the value into *V (new). */
static int option_value(const struct backend *b, const char *text, char *key,
                        size_t n, json_t **v, struct sbx_error *e) {
  size_t k = strcspn(text, "=");
  if (k == 0 || k >= n)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "-o \"%s\": expected KEY=VALUE, KEY one of backend "
                         "%s's options",
                         text, b->name);
  memcpy(key, text, k);
  key[k] = '\0';
  const char *value = text[k] ? text + k + 1 : NULL;
  const struct backend_option *o = backend_option_find(b, key);
  if (o)
    return backend_option_text_value(o, value, v, e);
  /* Refused by the check, with the message run_config would get. */
  *v = json_string(value ? value : "");
  return *v ? 0 : -ENOMEM;
}

/* The value of flag FLAG given as TEXT, for option O of B; a repeatable
 * flag given before (in GIVEN[0..I)) adds its member or element to OBJ's
 * value. */
static int flag_value(const struct cli_backend_flags *f, size_t i,
                      const struct backend_option *o, json_t *obj, json_t **v,
                      struct sbx_error *e) {
  const char *flag = f->given[i].flag, *text = f->given[i].text;
  int r = backend_option_value(o, text, v, e);
  bool map = o->type == BACKEND_OPTION_STRING_MAP;
  if (r < 0 || (!map && !o->flag_element))
    return r;
  json_t *sofar = json_object_get(obj, o->key);
  bool again = false;
  for (size_t j = 0; j < i && !again; j++)
    again = f->given[j].flag && strcmp(f->given[j].flag, flag) == 0;
  if (!again || !(map ? json_is_object(sofar) : json_is_array(sofar)))
    return 0;
  json_t *all = json_deep_copy(sofar);
  if (!all ||
      (map ? json_object_update(all, *v) : json_array_extend(all, *v)) < 0) {
    json_decref(all);
    return -ENOMEM;
  }
  json_decref(*v);
  *v = all;
  return 0;
}

int cli_backend_options(const struct cli_backend_flags *f,
                        const struct backend *b, json_t *run_config,
                        const char *where, void **own, struct sbx_error *e) {
  *own = NULL;
  if (f->overflow)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "more than %d backend options on the command line",
                         CLI_MAX_GIVEN);
  _cleanup_json_ json_t *obj =
      run_config ? json_deep_copy(run_config) : json_object();
  if (!obj)
    return -ENOMEM;
  for (size_t i = 0; i < f->ngiven; i++) {
    const char *flag = f->given[i].flag, *text = f->given[i].text;
    char key[128], label[136];
    _cleanup_json_ json_t *v = NULL;
    int r;
    if (flag) {
      const struct backend_option *o = by_flag(b, flag);
      if (!o)
        return not_ours(b, flag, e);
      (void)snprintf(key, sizeof(key), "%s", o->key);
      (void)snprintf(label, sizeof(label), "--%s", flag);
      r = flag_value(f, i, o, obj, &v, e);
    } else {
      (void)snprintf(label, sizeof(label), "-o");
      r = option_value(b, text, key, sizeof(key), &v, e);
    }
    if (r == 0)
      r = check_alone(b, label, text, key, v, e);
    if (r == 0 && json_object_set(obj, key, v) < 0)
      r = -ENOMEM;
    if (r < 0)
      return r;
  }
  return backend_options_parse(b, json_object_size(obj) ? obj : NULL,
                               run_config ? where : NULL, own, e);
}

/* One option's help: LHS, then TEXT wrapped at 78 columns beside it. */
static void help_line(FILE *out, const char *lhs, const char *text) {
  int col = fprintf(out, "  %-20s", lhs);
  if (col > 22)
    col = fprintf(out, "\n  %-20s", "") - 1;
  while (*text) {
    size_t n = strcspn(text, " ");
    if (col + 1 + (int)n > 78 && col > 22)
      col = fprintf(out, "\n  %-20s", "") - 1;
    col += fprintf(out, " %.*s", (int)n, text);
    text += n;
    text += strspn(text, " ");
  }
  fputc('\n', out);
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
  fprintf(out,
          "  -o, --option KEY=VALUE\n"
          "  %-20s any option of the backend, named as in run_config\n"
          "  %-20s (repeatable; a later one for the same key wins; VALUE\n"
          "  %-20s is read as JSON unless the option is a string; KEY\n"
          "  %-20s alone sets a boolean one):\n",
          "", "", "", "");
  const struct backend *b;
  for (size_t i = 0; (b = backend_at(i)); i++) {
    int col = fprintf(out, "  %-20s %s:", "", b->name);
    for (const struct backend_option *o = b->options; o && o->key; o++) {
      if (col + 1 + (int)strlen(o->key) > 78)
        col = fprintf(out, "\n  %-20s  ", "") - 1;
      col += fprintf(out, " %s", o->key);
    }
    fputc('\n', out);
  }
  for (size_t i = 0; (b = backend_at(i)); i++)
    for (const struct backend_option *o = b->options; o && o->key; o++) {
      if (!o->flag)
        continue;
      char lhs[64];
      (void)snprintf(lhs, sizeof(lhs), "--%s%s%s", o->flag,
                     o->metavar ? " " : "", o->metavar ? o->metavar : "");
      char text[1024];
      (void)snprintf(text, sizeof(text), "%s: %s", b->name, o->help);
      help_line(out, lhs, text);
    }
}

/* Whether A's run_config is none, or the same as FIRST's: the other
 * agents' sandboxes use the starting agent's backend and options, so a
 * run_config of theirs that says otherwise would not apply. */
static bool same_run_config(const struct agent *a, const struct agent *first) {
  if (!a->run_backend && !a->run_options && !a->n_run_ports)
    return true;
  if (a->n_run_ports != first->n_run_ports ||
      memcmp(a->run_ports, first->run_ports,
             a->n_run_ports * sizeof(a->run_ports[0])) != 0)
    return false;
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
    if (!same_run_config(a, first))
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
