#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "cleanup.h"
#include "lifecycle.h"
#include "log.h"
#include "path.h"
#include "runner.h"

static void usage_main(FILE *f) {
  fprintf(f,
          "usage: sbx [--log-level LEVEL] COMMAND [ARGS]\n"
          "\n"
          "Runs LLM agents inside sandboxes.\n"
          "\n"
          "Commands:\n"
          "  run AGENT.json PROMPT   run an agent on a task in a fresh sandbox "
          "and print\n"
          "                          its answer (see sbx run --help)\n"
          "  sandbox SUBCOMMAND      create and drive sandboxes that outlive "
          "a run\n"
          "                          (see sbx sandbox --help)\n"
          "\n"
          "Options:\n"
          "  --log-level LEVEL       error | warn | info | debug (default "
          "warn)\n"
          "  --version               print the version and exit\n"
          "  --help                  print this help and exit\n"
          "\n"
          "Environment: OPENAI_API_KEY, OPENAI_BASE_URL (default "
          "https://api.openai.com/v1),\n"
          "OPENAI_DEFAULT_MODEL, SBX_SANDBOXD (path of the sandboxd "
          "binary).\n");
}

static void usage_run(FILE *f) {
  fprintf(f,
          "usage: sbx run [options] AGENT.json PROMPT\n"
          "\n"
          "Runs the agent defined in AGENT.json on PROMPT inside a fresh "
          "sandbox and\n"
          "prints its final output. The sandbox is removed when the run "
          "ends.\n"
          "\n"
          "  --stream             print events as JSON lines on stdout "
          "instead of\n"
          "                       only the final output\n"
          "  --max-turns N        stop with an error after N model calls "
          "(default: the\n"
          "                       agent's max_turns, else 10)\n"
          "  --model NAME         use this model for every agent\n"
          "  --record FILE        append every model request and response to "
          "FILE\n"
          "  --replay FILE        answer model calls from a recording; fails "
          "when the\n"
          "                       run diverges from it\n"
          "  --cwd DIR            the run's working directory, relative to "
          "the workspace\n"
          "                       root (must exist; it does not confine)\n"
          "  --backend NAME       sandbox backend: local (default) or "
          "docker\n"
          "  --image IMG          docker: the container image (default: "
          "sbx-debian:latest)\n"
          "  --network none       docker: no network but loopback (default: "
          "the engine's)\n"
          "  --seccomp MODE       default | no-network | off, for the "
          "sandbox's processes\n"
          "  --sandbox ID         run the agent in the developer-owned "
          "sandbox ID (from\n"
          "                       sbx sandbox create) and leave it running\n"
          "  --state-dir DIR      where developer-owned sandboxes are "
          "recorded (default\n"
          "                       $XDG_STATE_HOME/sbx or "
          "~/.local/state/sbx)\n"
          "  --base-dir DIR       local_file/local_dir sources are relative "
          "to DIR and must\n"
          "                       lie beneath it or a grant (default: the "
          "agent file's\n"
          "                       directory)\n"
          "  --concurrency SPEC   manifest_entries=N,local_dir_files=N "
          "(default 4 and 4;\n"
          "                       0 is unlimited, at most 64 threads)\n"
          "  --expose PORT        a port the sandbox exposes (repeatable); "
          "reported in\n"
          "                       the sandbox_created event\n"
          "  --help               print this help and exit\n"
          "\n"
          "Exit status: 0 done, 1 the run failed (model or tool error), 2 "
          "usage or\n"
          "configuration error.\n");
}

/* Parses a positive integer option. */
static int parse_pos(const char *s, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || !*s || *end || v < 1 || v > 1000000)
    return -EINVAL;
  *out = v;
  return 0;
}

static int cmd_run(int argc, char **argv) {
  enum {
    O_STREAM = 256,
    O_MAX_TURNS,
    O_MODEL,
    O_RECORD,
    O_REPLAY,
    O_CWD,
    O_BACKEND,
    O_SECCOMP,
    O_SANDBOX,
    O_STATE_DIR,
    O_BASE_DIR,
    O_CONCURRENCY,
    O_EXPOSE,
    O_IMAGE,
    O_NETWORK,
    O_HELP
  };
  static const struct option opts[] = {
      {"stream", no_argument, NULL, O_STREAM},
      {"max-turns", required_argument, NULL, O_MAX_TURNS},
      {"model", required_argument, NULL, O_MODEL},
      {"record", required_argument, NULL, O_RECORD},
      {"replay", required_argument, NULL, O_REPLAY},
      {"cwd", required_argument, NULL, O_CWD},
      {"backend", required_argument, NULL, O_BACKEND},
      {"seccomp", required_argument, NULL, O_SECCOMP},
      {"sandbox", required_argument, NULL, O_SANDBOX},
      {"state-dir", required_argument, NULL, O_STATE_DIR},
      {"base-dir", required_argument, NULL, O_BASE_DIR},
      {"concurrency", required_argument, NULL, O_CONCURRENCY},
      {"expose", required_argument, NULL, O_EXPOSE},
      {"image", required_argument, NULL, O_IMAGE},
      {"network", required_argument, NULL, O_NETWORK},
      {"help", no_argument, NULL, O_HELP},
      {0},
  };
  struct run_options o = {0};
  o.materialize.limits = materialize_default_limits();
  const char *backend = "local";
  const char *sandbox_id = NULL, *state_dir = NULL;
  uint16_t ports[LIFECYCLE_MAX_PORTS];
  struct sbx_error oe = {0};
  char cwd[SBX_PATH_MAX];
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
    switch (c) {
    case O_STREAM:
      o.events = stdout;
      o.model_cfg.stream = true;
      break;
    case O_MAX_TURNS:
      if (parse_pos(optarg, &o.max_turns) < 0) {
        fprintf(stderr,
                "sbx run: --max-turns \"%s\" must be a positive "
                "integer\n",
                optarg);
        return 2;
      }
      break;
    case O_MODEL:
      o.model = optarg;
      break;
    case O_RECORD:
      o.model_cfg.record_path = optarg;
      break;
    case O_REPLAY:
      o.model_cfg.replay_path = optarg;
      break;
    case O_CWD: {
      struct sbx_error pe = {0};
      if (sbx_path_normalize_rel(optarg, strlen(optarg), cwd, sizeof(cwd),
                                 SBX_PATH_NO_DOTDOT, &pe) < 0 ||
          strcmp(cwd, ".") == 0) {
        fprintf(stderr,
                "sbx run: --cwd \"%s\" must be a workspace-relative "
                "directory other than the root, without \"..\"\n",
                optarg);
        return 2;
      }
      o.cwd = cwd;
      break;
    }
    case O_BACKEND:
      backend = optarg;
      break;
    case O_SECCOMP:
      if (strcmp(optarg, "default") && strcmp(optarg, "no-network") &&
          strcmp(optarg, "off")) {
        fprintf(stderr,
                "sbx run: --seccomp \"%s\": expected default, "
                "no-network or off\n",
                optarg);
        return 2;
      }
      o.backend_opts.seccomp = optarg;
      break;
    case O_SANDBOX:
      sandbox_id = optarg;
      break;
    case O_STATE_DIR:
      state_dir = optarg;
      break;
    case O_BASE_DIR:
      o.materialize.base_dir = optarg;
      break;
    case O_CONCURRENCY:
      if (materialize_parse_limits(optarg, &o.materialize.limits, &oe) < 0) {
        fprintf(stderr, "sbx run: --%s\n", oe.msg);
        return 2;
      }
      break;
    case O_EXPOSE:
      if (o.n_exposed_ports == LIFECYCLE_MAX_PORTS ||
          lifecycle_parse_port(optarg, &ports[o.n_exposed_ports], &oe) < 0) {
        fprintf(stderr, "sbx run: --expose: %s\n",
                oe.msg[0] ? oe.msg : "too many ports");
        return 2;
      }
      o.exposed_ports = ports;
      o.n_exposed_ports++;
      break;
    case O_IMAGE:
      o.backend_opts.docker.image = optarg;
      break;
    case O_NETWORK:
      if (strcmp(optarg, "none") != 0) {
        fprintf(stderr,
                "sbx run: --network \"%s\": only \"none\" can be given "
                "(leave it out for the engine's default network)\n",
                optarg);
        return 2;
      }
      o.backend_opts.docker.network_mode = optarg;
      break;
    case O_HELP:
      usage_run(stdout);
      return 0;
    default:
      usage_run(stderr);
      return 2;
    }
  }
  if (argc - optind != 2) {
    fprintf(stderr, "sbx run: expected AGENT.json and PROMPT\n");
    usage_run(stderr);
    return 2;
  }
  if (o.model_cfg.record_path && o.model_cfg.replay_path) {
    fprintf(stderr, "sbx run: --record and --replay cannot be combined\n");
    return 2;
  }
  o.backend = backend_find(backend);
  if (!o.backend) {
    fprintf(stderr,
            "sbx run: unknown backend \"%s\" (available: local, docker)\n",
            backend);
    return 2;
  }
  if (o.backend != &backend_docker &&
      (o.backend_opts.docker.image || o.backend_opts.docker.network_mode)) {
    fprintf(stderr, "sbx run: --image and --network need --backend docker\n");
    return 2;
  }
  struct sbx_error e = {0};
  struct agent_set *agents = NULL;
  if (agent_load(argv[optind], &agents, &e) < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg);
    return 2;
  }
  o.agents = agents;
  o.prompt = argv[optind + 1];
  struct lifecycle_record rec = {0};
  if (sandbox_id) {
    int k = cli_attach(state_dir, sandbox_id, &rec, &o.sandbox, &e);
    if (k != 0) {
      fprintf(stderr, "sbx run: %s\n", e.msg);
      agent_set_free(agents);
      return k;
    }
    o.sandbox_manifest = rec.manifest;
    o.sandbox_record = &rec;
  }
  struct run_result res = {0};
  int r = runner_run(&o, &res, &e);
  agent_set_free(agents);
  if (o.sandbox)
    o.sandbox->backend->detach(o.sandbox);
  lifecycle_record_clear(&rec);
  if (r < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg[0] ? e.msg : strerror(-r));
    int code = res.config_error ? 2 : 1;
    run_result_clear(&res);
    return code;
  }
  if (!o.events) {
    fputs(res.final_output ? res.final_output : "", stdout);
    if (res.final_output && *res.final_output &&
        res.final_output[strlen(res.final_output) - 1] != '\n')
      fputc('\n', stdout);
  }
  if (o.model_cfg.replay_path)
    fprintf(stderr,
            "sbx: replayed %d recorded model response%s from \"%s\"; no "
            "model API was called\n",
            res.turns, res.turns == 1 ? "" : "s", o.model_cfg.replay_path);
  run_result_clear(&res);
  return fflush(stdout) == 0 ? 0 : 1;
}

int cli_main(int argc, char **argv) {
  sbx_log_set_program("sbx");
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage_main(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("sbx %s\n", SBX_VERSION);
      return 0;
    }
    if (strcmp(argv[i], "--log-level") == 0) {
      enum sbx_log_level lvl;
      if (i + 1 >= argc || sbx_log_parse_level(argv[i + 1], &lvl) < 0) {
        fprintf(stderr, "sbx: --log-level expects error, warn, info or "
                        "debug\n");
        return 2;
      }
      sbx_log_set_level(lvl);
      i++;
      continue;
    }
    break;
  }
  if (i >= argc) {
    usage_main(stderr);
    return 2;
  }
  if (strcmp(argv[i], "run") == 0)
    return cmd_run(argc - i, argv + i);
  if (strcmp(argv[i], "sandbox") == 0)
    return cli_sandbox_main(argc - i, argv + i);
  fprintf(stderr, "sbx: unknown command \"%s\" (see sbx --help)\n", argv[i]);
  return 2;
}
