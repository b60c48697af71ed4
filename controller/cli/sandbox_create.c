/* sbx sandbox create: a developer-owned sandbox for a manifest or an
 * agent file's default_manifest. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/registry.h"
#include "controller/cli/backend_flags.h"
#include "controller/cli/cli_internal.h"
#include "controller/config/agent.h"
#include "controller/sandbox/meta.h"
#include "controller/sandbox/progress.h"
#include "shared/cleanup.h"

/* What the command line says, and what the command holds until it ends
 * (create_cmd_clear releases it). */
struct create_cmd {
  struct cli_common *c;
  const char *manifest_path, *agent_path, *backend;
  struct lifecycle_options lo;
  struct cli_backend_flags flags;
  uint16_t ports[LIFECYCLE_MAX_PORTS];
  char base[4096]; /* local sources are relative to it */
  const char *name;
  unsigned ttl_s, idle_s;
  struct sandbox_label labelv[META_LABELS_MAX]; /* borrowed from labels */
  /* Owned. */
  json_t *labels;           /* --label's, an object */
  struct agent_set *agents; /* --agent's */
  void *own;                /* lo.backend's own options */
  struct manifest *m;
};

static void create_cmd_clear(struct create_cmd *x) {
  if (x->lo.backend)
    backend_options_free(x->lo.backend, x->own);
  manifest_free(x->m);
  agent_set_free(x->agents);
  json_decref(x->labels);
}

enum {
  O_MANIFEST = 256,
  O_AGENT,
  O_BASE,
  O_BACKEND,
  O_SECCOMP,
  O_EXPOSE,
  O_CONC,
  O_NAME,
  O_LABEL,
  O_TTL,
  O_IDLE,
};

static const struct option create_opts[] = {
    {"manifest", required_argument, NULL, O_MANIFEST},
    {"agent", required_argument, NULL, O_AGENT},
    {"base-dir", required_argument, NULL, O_BASE},
    {"backend", required_argument, NULL, O_BACKEND},
    {"seccomp", required_argument, NULL, O_SECCOMP},
    {"expose", required_argument, NULL, O_EXPOSE},
    {"concurrency", required_argument, NULL, O_CONC},
    {"name", required_argument, NULL, O_NAME},
    {"label", required_argument, NULL, O_LABEL},
    {"ttl", required_argument, NULL, O_TTL},
    {"idle-timeout", required_argument, NULL, O_IDLE},
    {"state-dir", required_argument, NULL, 'S'},
    {"json", no_argument, NULL, 'J'},
    {"help", no_argument, NULL, 'h'},
    {0},
};

/* One option: -1 when parsing goes on, else the exit code. */
static int take_option(struct create_cmd *x, int ch, const char *arg) {
  struct cli_common *c = x->c;
  struct sbx_error e = {0};
  if (cli_backend_flags_take(&x->flags, ch, arg))
    return -1;
  switch (ch) {
  case O_MANIFEST:
    x->manifest_path = arg;
    return -1;
  case O_AGENT:
    x->agent_path = arg;
    return -1;
  case O_BASE:
    x->lo.mo.base_dir = arg;
    return -1;
  case O_BACKEND:
    x->backend = arg;
    return -1;
  case O_SECCOMP:
    if (strcmp(arg, "default") && strcmp(arg, "no-network") &&
        strcmp(arg, "off"))
      return cli_usage_error(c, "create",
                             "--seccomp \"%s\": expected default, no-network "
                             "or off",
                             arg);
    x->lo.bo.seccomp = arg;
    return -1;
  case O_EXPOSE:
    if (x->lo.bo.nports == LIFECYCLE_MAX_PORTS)
      return cli_usage_error(c, "create", "--expose: at most %d ports",
                             LIFECYCLE_MAX_PORTS);
    if (lifecycle_parse_port(arg, &x->ports[x->lo.bo.nports], &e) < 0)
      return cli_usage_error(c, "create", "--expose: %s", e.msg);
    x->lo.bo.ports = x->ports;
    x->lo.bo.nports++;
    return -1;
  case O_CONC:
    if (materialize_parse_limits(arg, &x->lo.mo.limits, &e) < 0)
      return cli_usage_error(c, "create", "--%s", e.msg);
    return -1;
  case O_NAME:
    if (meta_check_name(arg, &e) < 0)
      return cli_usage_error(c, "create", "--name: %s", e.msg);
    x->name = arg;
    return -1;
  case O_LABEL:
    if (!x->labels && !(x->labels = json_object()))
      return cli_fail(c, &e, -ENOMEM);
    if (meta_add_label(x->labels, arg, &e) < 0)
      return cli_usage_error(c, "create", "--label: %s", e.msg);
    return -1;
  case O_TTL:
  case O_IDLE:
    if (meta_parse_duration(arg, ch == O_TTL ? &x->ttl_s : &x->idle_s, &e) < 0)
      return cli_usage_error(c, "create", "--%s: %s",
                             ch == O_TTL ? "ttl" : "idle-timeout", e.msg);
    return -1;
  default:
    return cli_common_option(c, "create", ch);
  }
}

/* The command line: -1 when the sandbox can be made, else the exit
 * code. */
static int parse_args(struct create_cmd *x, int argc, char **argv) {
  cli_backend_flags_init(&x->flags, create_opts);
  int ch;
  optind = 0; /* a fresh scan */
  while ((ch = getopt_long(argc, argv, "+ho:", x->flags.opts, NULL)) != -1) {
    int k = take_option(x, ch, optarg);
    if (k >= 0)
      return k;
  }
  if (optind != argc)
    return cli_usage_error(x->c, "create", "unexpected argument \"%s\"",
                           argv[optind]);
  if (x->backend && !backend_find(x->backend))
    return cli_usage_error(x->c, "create", "unknown backend \"%s\"",
                           x->backend);
  return -1;
}

/* The backend and its options: --backend and the backends' flags over
 * --agent's run_config. -1, or the exit code after saying why. */
static int choose_backend(struct create_cmd *x) {
  struct sbx_error e = {0};
  if (cli_backend_heartbeat(&x->flags, &x->lo.bo, &e) < 0 ||
      cli_backend_choose(&x->flags, x->backend, x->agents, &x->lo.backend,
                         &x->own, &e) < 0)
    return cli_usage_error(x->c, "create", "%s",
                           e.msg[0] ? e.msg : strerror(ENOMEM));
  x->lo.bo.own = x->own;
  /* --expose replaces the agent file's run_config.exposed_ports. */
  const struct agent *first = x->agents ? x->agents->agents[0] : NULL;
  if (!x->lo.bo.nports && first && first->n_run_ports) {
    x->lo.bo.ports = first->run_ports;
    x->lo.bo.nports = first->n_run_ports;
  }
  return -1;
}

/* The manifest the sandbox holds: --manifest (plus --agent's run_as),
 * --agent's default_manifest, or an empty one; and the directory its
 * local sources are relative to. -1, or the exit code after saying why. */
static int load_manifest(struct create_cmd *x) {
  struct sbx_error e = {0};
  if (x->agent_path && agent_load(x->agent_path, &x->agents, &e) < 0)
    return cli_fail_status(x->c, &e, -EINVAL, 2);
  const struct agent_set *agents = x->agents;
  int r = 0;
  if (x->manifest_path) {
    _cleanup_json_ json_t *j = NULL;
    r = cli_load_json_file(x->manifest_path, &j, &e);
    if (r == 0)
      r = manifest_parse(j, x->manifest_path, &x->m, &e);
    if (r == 0 && agents && agents->agents[0]->run_as)
      r = manifest_add_user(x->m, agents->agents[0]->run_as);
    cli_dir_of(x->manifest_path, x->base, sizeof(x->base));
  } else if (agents) {
    r = lifecycle_agent_manifest(agents->agents[0], &x->m, &e);
    cli_dir_of(x->agent_path, x->base, sizeof(x->base));
  } else {
    _cleanup_json_ json_t *j = json_object();
    r = j ? manifest_parse(j, "manifest", &x->m, &e) : -ENOMEM;
    (void)snprintf(x->base, sizeof(x->base), ".");
  }
  if (r < 0)
    return cli_fail_status(x->c, &e, r, 2);
  if (!x->lo.mo.base_dir)
    x->lo.mo.base_dir = x->base;
  return -1;
}

/* -1 when no sandbox of DIR is named NAME, else the exit status after
 * saying which is. */
static int name_free(struct cli_common *c, const char *dir, const char *name) {
  struct sbx_error e = {0};
  char other[STATE_ID_LEN + 1];
  int r = state_find_name(dir, name, other, &e);
  if (r < 0)
    return cli_fail(c, &e, r);
  if (r > 0)
    return cli_error(c, SBX_ALREADY_EXISTS, 1,
                     "the name \"%s\" is already used by sandbox %s", name,
                     other);
  return -1;
}

/* Creates the sandbox in state directory DIR and records it; prints its
 * id (or --json's object). */
static int create_and_record(struct create_cmd *x, const char *dir) {
  struct cli_common *c = x->c;
  struct sbx_error e = {0};
  char id[STATE_ID_LEN + 1], tok[4200], logp[4200], created[32];
  int r;
  if ((r = state_dir_ensure(dir, &e)) < 0 || (r = state_new_id(id)) < 0 ||
      state_path(dir, id, "token", tok, sizeof(tok)) < 0 ||
      state_path(dir, id, "log", logp, sizeof(logp)) < 0)
    return cli_fail(c, &e, r ? r : -ENAMETOOLONG);
  state_now(created);
  /* Rounded up: a time to live is never cut short by the clock's
   * fraction of a second. */
  struct timespec ts;
  (void)clock_gettime(CLOCK_REALTIME, &ts);
  int64_t now = (int64_t)ts.tv_sec + (ts.tv_nsec > 0);
  _cleanup_json_ json_t *extra =
      meta_record(x->name, x->labels, x->ttl_s, x->idle_s, now);
  if (!extra)
    return cli_fail(c, &e, -ENOMEM);
  x->lo.expires_at = meta_expires_at(extra);
  x->lo.idle_timeout_s = x->idle_s;
  const char *k;
  json_t *v;
  json_object_foreach(x->labels, k, v) {
    x->labelv[x->lo.nlabels++] =
        (struct sandbox_label){k, json_string_value(v)};
  }
  x->lo.labels = x->labelv;
  x->lo.bo.state_dir = dir;
  if (x->name && (r = name_free(c, dir, x->name)) >= 0)
    return r;
  struct sandbox *sb = NULL;
  r = lifecycle_create(&x->lo, x->m, true, tok, logp, &sb, &e);
  if (r < 0) {
    bool config = e.code == SBX_INVALID_ARGUMENT ||
                  e.code == SBX_NOT_SUPPORTED ||
                  e.code == SBX_PERMISSION_DENIED;
    state_remove(dir, id);
    return cli_fail_status(c, &e, r, config ? 2 : 1);
  }
  /* The name is checked again and taken under the lock: two creates of
   * one name at once leave one sandbox with it. */
  _cleanup_close_ int lock = state_lock(dir, &e);
  r = lock < 0 ? lock : 0;
  if (r == 0 && x->name) {
    char other[STATE_ID_LEN + 1];
    r = state_find_name(dir, x->name, other, &e);
    if (r > 0)
      r = sbx_error_set(&e, SBX_ALREADY_EXISTS, EEXIST,
                        "the name \"%s\" is already used by sandbox %s",
                        x->name, other);
  }
  /* A restore of its session resolves local sources where these were: the
   * base directory goes into the same record, one durable write. */
  _cleanup_json_ json_t *saved = json_copy(extra);
  char base[PATH_MAX];
  if (r == 0 && !saved)
    r = sbx_error_set(&e, SBX_OK, ENOMEM, "out of memory");
  if (r == 0 && !realpath(x->lo.mo.base_dir, base))
    r = sbx_error_set(&e, SBX_INVALID_ARGUMENT, errno,
                      "cannot resolve the base directory \"%s\": %s",
                      x->lo.mo.base_dir, strerror(errno));
  if (r == 0 && json_object_set_new(saved, "base_dir", json_string(base)) < 0)
    r = sbx_error_set(&e, SBX_OK, ENOMEM, "out of memory");
  if (r == 0)
    r = lifecycle_save_extra(dir, id, sb, x->m, x->lo.bo.ports, x->lo.bo.nports,
                             created, (long)getpid(), saved, &e);
  if (r < 0) {
    struct sbx_error ce = {0};
    (void)sb->backend->close(sb, &ce);
    state_remove(dir, id);
    return cli_fail(c, &e, r);
  }
  int code = 0;
  if (c->json) {
    _cleanup_json_ json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s}", "id", id, "session_id", sb->session_id,
        "backend", sb->backend->name, "root", sb->root);
    if (j && json_object_update(j, extra) < 0)
      j = (json_decref(j), NULL);
    code = cli_print_json(c, j);
  } else {
    printf("%s\n", id);
  }
  sb->backend->detach(sb);
  return code ? code : (fflush(stdout) == 0 ? 0 : 1);
}

int cli_sandbox_create(struct cli_common *c, int argc, char **argv) {
  _cleanup_(create_cmd_clear) struct create_cmd x = {.c = c};
  x.lo.mo.limits = materialize_default_limits();
  int k = parse_args(&x, argc, argv);
  if (k >= 0)
    return k;
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return cli_usage_error(c, "create", "%s", e.msg);
  k = load_manifest(&x);
  if (k >= 0)
    return k;
  k = choose_backend(&x);
  if (k >= 0)
    return k;
  x.lo.mo.progress = progress_enabled(c->json);
  return create_and_record(&x, dir);
}
