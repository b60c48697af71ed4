/* sbx sandbox create: a developer-owned sandbox for a manifest or an
 * agent file's default_manifest. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/docker/docker.h"
#include "backends/registry.h"
#include "controller/cli/cli_internal.h"
#include "controller/config/agent.h"
#include "controller/sandbox/progress.h"

int cli_sandbox_create(struct cli_common *c, int argc, char **argv) {
  enum {
    O_MANIFEST = 256,
    O_AGENT,
    O_BASE,
    O_BACKEND,
    O_SECCOMP,
    O_EXPOSE,
    O_CONC,
    O_IMAGE,
    O_NETWORK
  };
  static const struct option opts[] = {
      {"image", required_argument, NULL, O_IMAGE},
      {"network", required_argument, NULL, O_NETWORK},
      {"manifest", required_argument, NULL, O_MANIFEST},
      {"agent", required_argument, NULL, O_AGENT},
      {"base-dir", required_argument, NULL, O_BASE},
      {"backend", required_argument, NULL, O_BACKEND},
      {"seccomp", required_argument, NULL, O_SECCOMP},
      {"expose", required_argument, NULL, O_EXPOSE},
      {"concurrency", required_argument, NULL, O_CONC},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  const char *manifest_path = NULL, *agent_path = NULL, *backend = "local";
  struct lifecycle_options lo = {0};
  lo.mo.limits = materialize_default_limits();
  uint16_t ports[LIFECYCLE_MAX_PORTS];
  struct sbx_error e = {0};
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    switch (ch) {
    case O_MANIFEST:
      manifest_path = optarg;
      break;
    case O_AGENT:
      agent_path = optarg;
      break;
    case O_BASE:
      lo.mo.base_dir = optarg;
      break;
    case O_BACKEND:
      backend = optarg;
      break;
    case O_SECCOMP:
      if (strcmp(optarg, "default") && strcmp(optarg, "no-network") &&
          strcmp(optarg, "off"))
        return cli_usage_error(c, "create",
                               "--seccomp \"%s\": expected default, no-network "
                               "or off",
                               optarg);
      lo.bo.seccomp = optarg;
      break;
    case O_EXPOSE:
      if (lo.nports == LIFECYCLE_MAX_PORTS)
        return cli_usage_error(c, "create", "--expose: at most %d ports",
                               LIFECYCLE_MAX_PORTS);
      if (lifecycle_parse_port(optarg, &ports[lo.nports], &e) < 0)
        return cli_usage_error(c, "create", "--expose: %s", e.msg);
      lo.nports++;
      break;
    case O_CONC:
      if (materialize_parse_limits(optarg, &lo.mo.limits, &e) < 0)
        return cli_usage_error(c, "create", "--%s", e.msg);
      break;
    case O_IMAGE:
      lo.bo.docker.image = optarg;
      break;
    case O_NETWORK:
      if (strcmp(optarg, "none") != 0)
        return cli_usage_error(c, "create",
                               "--network \"%s\": only none is supported "
                               "(without it: the engine's default network)",
                               optarg);
      lo.bo.docker.network_mode = optarg;
      break;
    default: {
      int r = cli_common_option(c, "create", ch);
      if (r >= 0)
        return r;
    }
    }
  }
  if (optind != argc)
    return cli_usage_error(c, "create", "unexpected argument \"%s\"",
                           argv[optind]);
  lo.ports = ports;
  lo.backend = backend_find(backend);
  if (!lo.backend)
    return cli_usage_error(c, "create", "unknown backend \"%s\"", backend);
  if (lo.backend != &backend_docker &&
      (lo.bo.docker.image || lo.bo.docker.network_mode))
    return cli_usage_error(c, "create",
                           "--image and --network need --backend "
                           "docker");
  char dir[4096], base[4096];
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return cli_usage_error(c, "create", "%s", e.msg);
  struct agent_set *agents = NULL;
  struct manifest *m = NULL;
  int r = 0;
  if (agent_path && agent_load(agent_path, &agents, &e) < 0) {
    fprintf(stderr, "%s: %s\n", c->prog, e.msg);
    return 2;
  }
  if (manifest_path) {
    json_t *j = NULL;
    r = cli_load_json_file(manifest_path, &j, &e);
    if (r == 0)
      r = manifest_parse(j, manifest_path, &m, &e);
    json_decref(j);
    if (r == 0 && agents && agents->agents[0]->run_as)
      r = manifest_add_user(m, agents->agents[0]->run_as);
    cli_dir_of(manifest_path, base, sizeof(base));
  } else if (agents) {
    r = lifecycle_agent_manifest(agents->agents[0], &m, &e);
    cli_dir_of(agent_path, base, sizeof(base));
  } else {
    json_t *j = json_object();
    r = manifest_parse(j, "manifest", &m, &e);
    json_decref(j);
    (void)snprintf(base, sizeof(base), ".");
  }
  agent_set_free(agents);
  if (r < 0) {
    fprintf(stderr, "%s: %s\n", c->prog, e.msg[0] ? e.msg : strerror(-r));
    manifest_free(m);
    return 2;
  }
  if (!lo.mo.base_dir)
    lo.mo.base_dir = base;
  lo.mo.progress = progress_enabled(c->json);
  char id[STATE_ID_LEN + 1], tok[4200], logp[4200], created[32];
  if ((r = state_dir_ensure(dir, &e)) < 0 || (r = state_new_id(id)) < 0 ||
      state_path(dir, id, "token", tok, sizeof(tok)) < 0 ||
      state_path(dir, id, "log", logp, sizeof(logp)) < 0) {
    manifest_free(m);
    return cli_fail(c, &e, r ? r : -ENAMETOOLONG);
  }
  state_now(created);
  struct sandbox *sb = NULL;
  r = lifecycle_create(&lo, m, true, tok, logp, &sb, &e);
  if (r < 0) {
    bool config = e.code == SBX_INVALID_ARGUMENT ||
                  e.code == SBX_NOT_SUPPORTED ||
                  e.code == SBX_PERMISSION_DENIED;
    fprintf(stderr, "%s: %s\n", c->prog, e.msg[0] ? e.msg : strerror(-r));
    state_remove(dir, id);
    manifest_free(m);
    return config ? 2 : 1;
  }
  r = lifecycle_save(dir, id, sb, m, ports, lo.nports, created, (long)getpid(),
                     &e);
  if (r < 0) {
    struct sbx_error ce = {0};
    (void)sb->backend->close(sb, &ce);
    state_remove(dir, id);
    manifest_free(m);
    return cli_fail(c, &e, r);
  }
  if (c->json) {
    json_t *j = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "session_id",
                          sb->session_id, "backend", sb->backend->name, "root",
                          sb->root);
    cli_print_json(j);
    json_decref(j);
  } else {
    printf("%s\n", id);
  }
  sb->backend->detach(sb);
  manifest_free(m);
  return fflush(stdout) == 0 ? 0 : 1;
}
