/* sbx run: an agent on a task in a fresh (or a developer-owned) sandbox. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/docker/docker.h"
#include "backends/registry.h"
#include "controller/cli/cli_internal.h"
#include "controller/config/agent.h"
#include "controller/run/runner.h"
#include "controller/telemetry/trace.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/path.h"

static void usage_run(FILE *f) {
  fprintf(
      f,
      "usage: sbx run [options] AGENT.json PROMPT\n"
      "\n"
      "Runs the agent defined in AGENT.json on PROMPT inside a fresh "
      "sandbox and\n"
      "prints its final output. The sandbox is removed when the run "
      "ends.\n"
      "\n"
      "  --stream             print events as JSON lines on stdout "
      "instead of\n"
      "                       only the final output (docs/events.md)\n"
      "  --trace FILE         append the run's OpenTelemetry spans to "
      "FILE, one\n"
      "                       JSON span per line (docs/tracing.md)\n"
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
      "  --session STATE      run in the sandbox of a saved session state "
      "(sbx sandbox\n"
      "                       save): the live one, or its snapshot "
      "restored\n"
      "  --resume STATE       continue the paused or interrupted run saved in "
      "STATE\n"
      "                       (its agent file and prompt come from it)\n"
      "  --approve MODE       stop (default): a call that needs approval "
      "pauses the run\n"
      "                       (exit 3); ask: ask on the terminal\n"
      "  --help               print this help and exit\n"
      "\n"
      "Exit status: 0 done, 1 the run failed (model or tool error), 2 "
      "usage or\n"
      "configuration error, 3 waiting for approval (the run state path "
      "is printed).\n"
      "The run's state is written to STATE-DIR/runs/RUN-ID.json after "
      "every step and\n"
      "removed when the run finishes.\n"
      "\n"
      "Tracing environment (OTLP/HTTP with JSON bodies; export never "
      "fails the run,\n"
      "and at most 2 s are spent flushing at exit):\n"
      "  OTEL_EXPORTER_OTLP_ENDPOINT         send spans to "
      "ENDPOINT/v1/traces\n"
      "  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  the full traces URL "
      "instead\n"
      "  OTEL_EXPORTER_OTLP_HEADERS          request headers, "
      "k=v,k2=v2 (URL-encoded)\n"
      "  OTEL_EXPORTER_OTLP_TIMEOUT          one export request, ms "
      "(default 10000)\n"
      "  OTEL_SERVICE_NAME                   service.name (default "
      "sbx)\n"
      "  OTEL_BSP_MAX_QUEUE_SIZE             spans queued before drops "
      "(default 2048)\n"
      "  OTEL_BSP_MAX_EXPORT_BATCH_SIZE      spans per request (default "
      "256)\n"
      "  OTEL_BSP_SCHEDULE_DELAY             ms between exports (default "
      "1000)\n"
      "  OTEL_SDK_DISABLED=true              no OTLP export\n");
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

/* Reads the agent file and prompt a run state was started with. */
static int cli_read_run_state(const char *path, char **agent_path,
                              char **prompt, struct sbx_error *e) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = sbx_read_file(path, 256u << 20, &text, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot read run state \"%s\": %s",
                         path, strerror(-r));
  json_error_t je;
  _cleanup_json_ json_t *rs = json_loadb(text, len, 0, &je);
  const char *ap = json_string_value(json_object_get(rs, "agent_path"));
  const char *pr = json_string_value(json_object_get(rs, "prompt"));
  if (!ap || !pr)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a run state (%s)", path,
                         rs ? "no agent_path or prompt" : je.text);
  *agent_path = strdup(ap);
  *prompt = strdup(pr);
  return *agent_path && *prompt ? 0 : -ENOMEM;
}

int cli_run(int argc, char **argv) {
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
    O_SESSION,
    O_STATE_DIR,
    O_BASE_DIR,
    O_CONCURRENCY,
    O_EXPOSE,
    O_IMAGE,
    O_NETWORK,
    O_TRACE,
    O_RESUME,
    O_APPROVE,
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
      {"session", required_argument, NULL, O_SESSION},
      {"state-dir", required_argument, NULL, O_STATE_DIR},
      {"base-dir", required_argument, NULL, O_BASE_DIR},
      {"concurrency", required_argument, NULL, O_CONCURRENCY},
      {"expose", required_argument, NULL, O_EXPOSE},
      {"image", required_argument, NULL, O_IMAGE},
      {"network", required_argument, NULL, O_NETWORK},
      {"trace", required_argument, NULL, O_TRACE},
      {"resume", required_argument, NULL, O_RESUME},
      {"approve", required_argument, NULL, O_APPROVE},
      {"help", no_argument, NULL, O_HELP},
      {0},
  };
  struct run_options o = {0};
  struct trace_options to = {0};
  o.materialize.limits = materialize_default_limits();
  const char *backend = NULL; /* NULL: the agent's run_config, else local */
  const char *sandbox_id = NULL, *state_dir = NULL, *resume = NULL;
  const char *session = NULL;
  char session_id[13];
  bool ask = false;
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
    case O_RESUME:
      resume = optarg;
      break;
    case O_SESSION:
      session = optarg;
      break;
    case O_APPROVE:
      if (strcmp(optarg, "ask") != 0 && strcmp(optarg, "stop") != 0) {
        fprintf(stderr, "sbx run: --approve \"%s\": expected ask or stop\n",
                optarg);
        return 2;
      }
      ask = strcmp(optarg, "ask") == 0;
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
    case O_TRACE:
      to.file = optarg;
      break;
    case O_HELP:
      usage_run(stdout);
      return 0;
    default:
      usage_run(stderr);
      return 2;
    }
  }
  if (resume ? argc - optind != 0 : argc - optind != 2) {
    fprintf(stderr, resume ? "sbx run: --resume takes no AGENT.json or PROMPT\n"
                           : "sbx run: expected AGENT.json and PROMPT\n");
    usage_run(stderr);
    return 2;
  }
  if (o.model_cfg.record_path && o.model_cfg.replay_path) {
    fprintf(stderr, "sbx run: --record and --replay cannot be combined\n");
    return 2;
  }
  /* A flag given replaces the agent file's run_config (checked below). */
  if (backend && !backend_find(backend)) {
    fprintf(stderr,
            "sbx run: unknown backend \"%s\" (available: local, docker)\n",
            backend);
    return 2;
  }
  struct sbx_error e = {0};
  char sdir[4096];
  if (state_dir_resolve(state_dir, sdir, sizeof(sdir), &e) < 0) {
    fprintf(stderr, "sbx run: %s\n", e.msg);
    return 2;
  }
  o.state_dir = sdir;
  o.resume_path = resume;
  _cleanup_free_ char *agent_path = NULL, *prompt = NULL;
  if (resume && cli_read_run_state(resume, &agent_path, &prompt, &e) < 0) {
    fprintf(stderr, "sbx run: %s\n", e.msg);
    return 2;
  }
  _cleanup_fclose_ FILE *tty = NULL;
  if (ask) {
    tty = fopen("/dev/tty", "r+e");
    if (!tty || !isatty(fileno(tty))) {
      fprintf(stderr, "sbx run: --approve ask needs a terminal\n");
      return 2;
    }
    o.approve_ask = true;
    o.ask_tty = tty;
  }
  struct agent_set *agents = NULL;
  if (agent_load(resume ? agent_path : argv[optind], &agents, &e) < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg);
    return 2;
  }
  o.agents = agents;
  o.prompt = resume ? prompt : argv[optind + 1];
  const struct agent *first = agents->agents[0];
  if (!backend)
    backend = first->run_backend ? first->run_backend : "local";
  o.backend = backend_find(backend);
  if (o.backend == &backend_docker) {
    if (!o.backend_opts.docker.image)
      o.backend_opts.docker.image = first->run_image;
    if (!o.backend_opts.docker.network_mode)
      o.backend_opts.docker.network_mode = first->run_network_mode;
  }
  if (o.backend != &backend_docker &&
      (o.backend_opts.docker.image || o.backend_opts.docker.network_mode)) {
    fprintf(stderr, "sbx run: --image and --network need --backend docker\n");
    agent_set_free(agents);
    return 2;
  }
  trace_options_from_env(&to);
  if (trace_new(&to, &o.tracer, &e) < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg);
    agent_set_free(agents);
    return 2;
  }
  struct lifecycle_record rec = {0};
  /* The SDK's order: an injected live sandbox (--sandbox), the run
   * state's sandboxes (--resume), an explicit session state (--session),
   * else a new sandbox. */
  if (session && !sandbox_id && !resume) {
    bool reconnected = false;
    if (cli_session_resume(state_dir, session, NULL, isatty(2), session_id,
                           &reconnected, &e) < 0) {
      fprintf(stderr, "sbx run: %s\n", e.msg);
      agent_set_free(agents);
      (void)trace_free(o.tracer);
      return e.code == SBX_INVALID_ARGUMENT ? 2 : 1;
    }
    sandbox_id = session_id;
  }
  if (sandbox_id) {
    int k = cli_attach(state_dir, sandbox_id, &rec, &o.sandbox, &e);
    if (k != 0) {
      fprintf(stderr, "sbx run: %s\n", e.msg);
      agent_set_free(agents);
      (void)trace_free(o.tracer);
      return k;
    }
    o.sandbox_manifest = rec.manifest;
    o.sandbox_record = &rec;
  }
  o.materialize.progress = isatty(2) != 0;
  struct run_result res = {0};
  int r = runner_run(&o, &res, &e);
  agent_set_free(agents);
  if (o.sandbox)
    o.sandbox->backend->detach(o.sandbox);
  lifecycle_record_clear(&rec);
  if (r == RUNNER_PAUSED) {
    fprintf(stderr,
            "sbx: the run is waiting for approval; its state is in %s\n"
            "sbx: decide with `sbx approve %s CALL_ID` or `sbx reject %s "
            "CALL_ID --reason TEXT`,\n"
            "sbx: then continue with `sbx run --resume %s`\n",
            res.state_path, res.state_path, res.state_path, res.state_path);
    run_result_clear(&res);
    (void)trace_free(o.tracer);
    return 3;
  }
  if (r < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg[0] ? e.msg : strerror(-r));
    int code = res.config_error ? 2 : 1;
    run_result_clear(&res);
    (void)trace_free(o.tracer); /* flushes, within TRACE_FLUSH_MS */
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
  int code = fflush(stdout) == 0 ? 0 : 1;
  (void)trace_free(o.tracer); /* after the output: flushing may take 2 s */
  return code;
}
