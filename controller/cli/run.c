/* sbx run: an agent on a task in a fresh (or a developer-owned) sandbox. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/registry.h"
#include "controller/cli/backend_flags.h"
#include "controller/cli/cli_internal.h"
#include "controller/config/agent.h"
#include "controller/run/runner.h"
#include "controller/state/store.h"
#include "controller/telemetry/events.h"
#include "controller/telemetry/trace.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/path.h"

static void usage_tracing_env(FILE *f);

static void usage_run(FILE *f) {
  fprintf(f,
          "usage: sbx run [options] AGENT.json PROMPT\n"
          "       sbx run [options] --resume RUN_ID\n"
          "       sbx run [options] --continue RUN_ID PROMPT\n"
          "\n"
          "Runs the agent defined in AGENT.json on PROMPT inside a fresh "
          "sandbox and\n"
          "prints its final output. The sandbox is removed when the run "
          "ends (that of\n"
          "a failed run is kept for a retry: --keep-failed).\n"
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
          "                       root (must exist; it does not confine)\n");
  cli_backend_flags_help(f);
  fprintf(
      f,
      "  --seccomp MODE       default | no-network | off, for the "
      "sandbox's processes\n"
      "  --sandbox ID         run the agent in the developer-owned "
      "sandbox ID (from\n"
      "                       sbx sandbox create) and leave it running; "
      "the flags\n"
      "                       that make sandboxes then apply to other "
      "agents' own\n"
      "                       sandboxes, and are refused when there are "
      "none\n"
      "  --state-dir DIR      where sandboxes and the state store are "
      "kept (default\n"
      "                       $XDG_STATE_HOME/sbx or "
      "~/.local/state/sbx)\n"
      "  --db URL             the state store the run is kept in: "
      "sqlite:PATH or\n"
      "                       postgres://... (default "
      "sqlite:STATE-DIR/sbx.db, which\n"
      "                       sbx serve uses too)\n"
      "  --base-dir DIR       local_file/local_dir sources are relative "
      "to DIR and must\n"
      "                       lie beneath it or a grant (default: the "
      "agent file's\n"
      "                       directory); recorded with the run, so a "
      "resume that\n"
      "                       restores a sandbox reads them there again "
      "unless given\n"
      "  --concurrency SPEC   manifest_entries=N,local_dir_files=N "
      "(default 4 and 4;\n"
      "                       0 is unlimited, at most 64 threads)\n"
      "  --model-timeouts SPEC  connect=S,first_byte=S,idle=S,total=S: "
      "how long a model\n"
      "                       call may wait to connect (default 10), for the "
      "first byte\n"
      "                       of the response (60), between bytes of it (30), "
      "and in all\n"
      "                       (600); a timed-out call is retried once\n"
      "  --expose PORT        a port the sandbox exposes (repeatable; "
      "replaces the\n"
      "                       agent file's run_config.exposed_ports), "
      "published on\n"
      "                       127.0.0.1 and reported in the sandbox_created "
      "event\n"
      "  --session STATE      run in the sandbox of a saved session state "
      "(sbx sandbox\n"
      "                       save): the live one, or its snapshot "
      "restored (not\n"
      "                       with --sandbox or --resume)\n"
      "  --resume RUN_ID      continue the paused, interrupted or "
      "failed run RUN_ID of\n"
      "                       sbx run from its last step (its agent file, "
      "prompt and\n"
      "                       sandboxes come from it; no tool call that "
      "finished runs\n"
      "                       again; not with --sandbox or --session)\n"
      "  --keep-failed TIME   keep the state and sandboxes of a run that "
      "fails (not one\n"
      "                       cancelled) for TIME (30m, 24h, 7d; 0: do "
      "not keep;\n"
      "                       default 24h), so that --resume retries it; "
      "then the\n"
      "                       next sbx run or sbx runs closes them\n"
      "  --continue RUN_ID    with PROMPT alone: a new run of the agent "
      "file of the\n"
      "                       completed run RUN_ID, on its whole "
      "conversation and\n"
      "                       PROMPT, in a new sandbox (or --sandbox, "
      "--session); with\n"
      "                       model_settings.store true on the Responses "
      "API, PROMPT\n"
      "                       and the last response's previous_response_id "
      "instead\n"
      "  --snapshot MODE      local (default): when the run pauses, "
      "snapshot each of\n"
      "                       its sandboxes (not a --sandbox one, which "
      "outlives it),\n"
      "                       so that a resume whose sandbox is gone goes "
      "on in one\n"
      "                       restored from it; none: no snapshots. A "
      "resume keeps\n"
      "                       the run's unless given; a run that ends "
      "removes its\n"
      "                       snapshots; not with --approve ask (no "
      "pauses)\n"
      "  --snapshot-dir DIR   where the run's snapshots go (default "
      "STATE-DIR/snapshots)\n"
      "  --approve MODE       stop (default): a call that needs approval "
      "pauses the run\n"
      "                       (exit 3); ask: ask on the terminal\n"
      "  --help               print this help and exit\n"
      "\n"
      "Exit status: 0 done, 1 the run failed (model or tool error), 2 "
      "usage or\n"
      "configuration error, 3 waiting for approval (the run id "
      "is printed).\n"
      "The run is a row of the state store, which sbx runs ls|show|logs "
      "lists and a\n"
      "server on the same store shows too; its state is written there "
      "after every\n"
      "step. A completed run keeps its conversation there (for --continue), "
      "a failed\n"
      "one its state for --keep-failed's time, a cancelled one nothing.\n"
      "\n");
  usage_tracing_env(f);
}

/* The tracing environment's part of sbx run --help. */
static void usage_tracing_env(FILE *f) {
  fprintf(f,
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

/* How long a failed run is kept for a retry by default. */
#define KEEP_FAILED_MS (24LL * 3600 * 1000)

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

/* What the command line and the agent files say, and what the command
 * holds until it ends (run_cmd_clear releases it). */
struct run_cmd {
  struct run_options o;
  struct trace_options to;
  struct cli_backend_flags flags;
  const char *backend; /* --backend, else the agent's run_config */
  const char *sandbox_id, *state_dir, *resume, *session, *db, *cont;
  int64_t keep_ms; /* --keep-failed */
  bool ask;
  uint16_t ports[LIFECYCLE_MAX_PORTS];
  char cwd[SBX_PATH_MAX];
  char sdir[4096];
  char snapdir[4096]; /* --snapshot-dir, absolute */
  /* --base-dir made absolute, or a resumed run's recorded one. */
  char basedir[4096];
  char session_id[STATE_ID_LEN + 1];
  /* Owned. */
  char *agent_path, *prompt; /* --resume: from the run state */
  FILE *tty;                 /* --approve ask */
  struct agent_set *agents;
  void *own; /* o.backend's own options */
  struct lifecycle_record rec;
  struct run_result res;
  struct cli_run_store store;
};

static void run_cmd_clear(struct run_cmd *c) {
  cli_run_store_close(&c->store);
  if (c->o.sandbox)
    c->o.sandbox->backend->detach(c->o.sandbox);
  lifecycle_record_clear(&c->rec);
  run_result_clear(&c->res);
  agent_set_free(c->agents);
  if (c->o.backend)
    backend_options_free(c->o.backend, c->own);
  if (c->tty)
    (void)fclose(c->tty);
  free(c->agent_path);
  free(c->prompt);
  /* Last, after the output: flushing the spans may take TRACE_FLUSH_MS. */
  (void)trace_free(c->o.tracer);
}

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
  O_MODEL_TIMEOUTS,
  O_EXPOSE,
  O_TRACE,
  O_RESUME,
  O_APPROVE,
  O_SNAPSHOT,
  O_SNAPSHOT_DIR,
  O_DB,
  O_KEEP_FAILED,
  O_CONTINUE,
  O_HELP
};

static const struct option run_opts[] = {
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
    {"model-timeouts", required_argument, NULL, O_MODEL_TIMEOUTS},
    {"expose", required_argument, NULL, O_EXPOSE},
    {"trace", required_argument, NULL, O_TRACE},
    {"resume", required_argument, NULL, O_RESUME},
    {"approve", required_argument, NULL, O_APPROVE},
    {"snapshot", required_argument, NULL, O_SNAPSHOT},
    {"snapshot-dir", required_argument, NULL, O_SNAPSHOT_DIR},
    {"db", required_argument, NULL, O_DB},
    {"keep-failed", required_argument, NULL, O_KEEP_FAILED},
    {"continue", required_argument, NULL, O_CONTINUE},
    {"help", no_argument, NULL, O_HELP},
    {0},
};

/* One of the options that take a value and need checking: -1 when it is
 * good, else the exit code after saying why. */
static int take_checked(struct run_cmd *c, int ch, const char *arg) {
  struct sbx_error oe = {0};
  switch (ch) {
  case O_MAX_TURNS:
    if (parse_pos(arg, &c->o.max_turns) < 0) {
      fprintf(stderr,
              "sbx run: --max-turns \"%s\" must be a positive "
              "integer\n",
              arg);
      return 2;
    }
    return -1;
  case O_CWD:
    if (sbx_path_normalize_rel(arg, strlen(arg), c->cwd, sizeof(c->cwd),
                               SBX_PATH_NO_DOTDOT, &oe) < 0 ||
        strcmp(c->cwd, ".") == 0) {
      fprintf(stderr,
              "sbx run: --cwd \"%s\" must be a workspace-relative "
              "directory other than the root, without \"..\"\n",
              arg);
      return 2;
    }
    c->o.cwd = c->cwd;
    return -1;
  case O_SECCOMP:
    if (strcmp(arg, "default") && strcmp(arg, "no-network") &&
        strcmp(arg, "off")) {
      fprintf(stderr,
              "sbx run: --seccomp \"%s\": expected default, "
              "no-network or off\n",
              arg);
      return 2;
    }
    c->o.backend_opts.seccomp = arg;
    return -1;
  case O_APPROVE:
    if (strcmp(arg, "ask") != 0 && strcmp(arg, "stop") != 0) {
      fprintf(stderr, "sbx run: --approve \"%s\": expected ask or stop\n", arg);
      return 2;
    }
    c->ask = strcmp(arg, "ask") == 0;
    return -1;
  case O_SNAPSHOT:
    if (strcmp(arg, "local") != 0 && strcmp(arg, "none") != 0) {
      fprintf(stderr,
              "sbx run: --snapshot \"%s\": a run's snapshots are local or "
              "none%s\n",
              arg,
              strcmp(arg, "remote") == 0
                  ? " (remote snapshots are for sbx sandbox save)"
                  : "");
      return 2;
    }
    c->o.snapshot = arg;
    return -1;
  case O_KEEP_FAILED: {
    int r = cli_parse_keep(arg, &c->keep_ms);
    if (r < 0) {
      fprintf(stderr, "sbx run: --keep-failed \"%s\": %s\n", arg,
              r == -ERANGE ? "at most a year (366d)"
                           : "expected 0 or a number with s, m, h or d "
                             "(30m, 24h, 7d)");
      return 2;
    }
    return -1;
  }
  case O_CONCURRENCY:
    if (materialize_parse_limits(arg, &c->o.materialize.limits, &oe) < 0) {
      fprintf(stderr, "sbx run: --%s\n", oe.msg);
      return 2;
    }
    return -1;
  case O_MODEL_TIMEOUTS:
    if (model_parse_timeouts(arg, &c->o.model_cfg, &oe) < 0) {
      fprintf(stderr, "sbx run: --%s\n", oe.msg);
      return 2;
    }
    return -1;
  case O_EXPOSE:
    if (c->o.n_exposed_ports == LIFECYCLE_MAX_PORTS ||
        lifecycle_parse_port(arg, &c->ports[c->o.n_exposed_ports], &oe) < 0) {
      fprintf(stderr, "sbx run: --expose: %s\n",
              oe.msg[0] ? oe.msg : "too many ports");
      return 2;
    }
    c->o.exposed_ports = c->ports;
    c->o.n_exposed_ports++;
    return -1;
  }
  return -1;
}

/* One option: -1 when parsing goes on, else the exit code. */
static int take_option(struct run_cmd *c, int ch, const char *arg) {
  if (cli_backend_flags_take(&c->flags, ch, arg))
    return -1;
  switch (ch) {
  case O_STREAM:
    c->o.events = stdout;
    c->o.model_cfg.stream = true;
    return -1;
  case O_MODEL:
    c->o.model = arg;
    return -1;
  case O_RECORD:
    c->o.model_cfg.record_path = arg;
    return -1;
  case O_REPLAY:
    c->o.model_cfg.replay_path = arg;
    return -1;
  case O_BACKEND:
    c->backend = arg;
    return -1;
  case O_SANDBOX:
    c->sandbox_id = arg;
    return -1;
  case O_RESUME:
    c->resume = arg;
    return -1;
  case O_CONTINUE:
    c->cont = arg;
    return -1;
  case O_SESSION:
    c->session = arg;
    return -1;
  case O_STATE_DIR:
    c->state_dir = arg;
    return -1;
  case O_DB:
    c->db = arg;
    return -1;
  case O_SNAPSHOT_DIR: {
    /* Absolute: the run state keeps it for a resume from elsewhere. */
    char cwd[2048];
    int n = arg[0] == '/' || !getcwd(cwd, sizeof(cwd))
                ? snprintf(c->snapdir, sizeof(c->snapdir), "%s", arg)
                : snprintf(c->snapdir, sizeof(c->snapdir), "%s/%s", cwd, arg);
    if (!arg[0] || n < 0 || (size_t)n >= sizeof(c->snapdir)) {
      fprintf(stderr, "sbx run: --snapshot-dir \"%s\": %s\n", arg,
              arg[0] ? "the path is too long" : "an empty path");
      return 2;
    }
    c->o.snapshot_dir = c->snapdir;
    return -1;
  }
  case O_BASE_DIR:
    /* Absolute: the run state keeps it for a restore from elsewhere (one
     * that does not resolve is left for the sandbox's creation to name). */
    c->o.materialize.base_dir =
        realpath(arg, c->basedir) && strlen(c->basedir) < sizeof(c->basedir)
            ? c->basedir
            : arg;
    return -1;
  case O_TRACE:
    c->to.file = arg;
    return -1;
  case O_MAX_TURNS:
  case O_KEEP_FAILED:
  case O_CWD:
  case O_SECCOMP:
  case O_APPROVE:
  case O_SNAPSHOT:
  case O_CONCURRENCY:
  case O_MODEL_TIMEOUTS:
  case O_EXPOSE:
    return take_checked(c, ch, arg);
  case O_HELP:
    usage_run(stdout);
    return 0;
  default:
    usage_run(stderr);
    return 2;
  }
}

/* The command line: -1 when the run goes on, else the exit code. */
static int parse_args(struct run_cmd *c, int argc, char **argv) {
  cli_backend_flags_init(&c->flags, run_opts);
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+o:", c->flags.opts, NULL)) != -1) {
    int k = take_option(c, ch, optarg);
    if (k >= 0)
      return k;
  }
  if (c->resume && c->cont) {
    fprintf(stderr, "sbx run: --resume goes on with a run, --continue "
                    "starts a new one: not both\n");
    return 2;
  }
  int want = c->resume ? 0 : c->cont ? 1 : 2;
  if (argc - optind != want) {
    fprintf(stderr, "sbx run: %s\n",
            c->resume ? "--resume takes no AGENT.json or PROMPT"
            : c->cont ? "--continue RUN_ID takes a PROMPT and no "
                        "AGENT.json (the run's agent file is used)"
                      : "expected AGENT.json and PROMPT");
    usage_run(stderr);
    return 2;
  }
  if (c->o.model_cfg.record_path && c->o.model_cfg.replay_path) {
    fprintf(stderr, "sbx run: --record and --replay cannot be combined\n");
    return 2;
  }
  /* A resumed run goes on in the sandboxes its state recorded, and
   * --sandbox names the live one the run starts in: the other would be
   * left unused. */
  if ((c->session && (c->sandbox_id || c->resume)) ||
      (c->sandbox_id && c->resume)) {
    fprintf(stderr, "sbx run: --%s cannot be combined with --%s: %s\n",
            c->session ? "session" : "sandbox",
            c->resume ? "resume" : "sandbox",
            c->resume ? "a resumed run goes on in the sandboxes it recorded"
                      : "the run starts in one sandbox");
    return 2;
  }
  if (c->ask && (c->o.snapshot || c->o.snapshot_dir)) {
    fprintf(stderr,
            "sbx run: --%s: a run with --approve ask never pauses, "
            "so it takes no snapshots\n",
            c->o.snapshot ? "snapshot" : "snapshot-dir");
    return 2;
  }
  /* A flag given replaces the agent file's run_config (choose_backend),
   * but an unknown backend is refused before any file is read. */
  if (c->backend && !backend_find(c->backend)) {
    char names[256];
    fprintf(stderr, "sbx run: unknown backend \"%s\" (available: %s)\n",
            c->backend, backend_names(names, sizeof(names), "", ", "));
    return 2;
  }
  return -1;
}

/* The backend of the run and its own options (backend_flags.h): -1, or
 * the exit code after saying why. */
static int choose_backend(struct run_cmd *c) {
  struct sbx_error e = {0};
  if (cli_backend_heartbeat(&c->flags, &c->o.backend_opts, &e) < 0 ||
      cli_backend_choose(&c->flags, c->backend, c->agents, &c->o.backend,
                         &c->own, &e) < 0) {
    fprintf(stderr, "sbx run: %s\n", e.msg[0] ? e.msg : strerror(ENOMEM));
    return 2;
  }
  c->o.backend_opts.own = c->own;
  /* --expose replaces the agent file's run_config.exposed_ports. */
  const struct agent *first = c->agents->agents[0];
  if (!c->o.n_exposed_ports && first->n_run_ports) {
    c->o.exposed_ports = first->run_ports;
    c->o.n_exposed_ports = first->n_run_ports;
  }
  return -1;
}

/* --session and --sandbox: the live sandbox the run starts in. -1, or the
 * exit code after saying why. */
static int attach_sandbox(struct run_cmd *c) {
  struct sbx_error e = {0};
  /* The SDK's order: an injected live sandbox (--sandbox), the run
   * state's sandboxes (--resume), an explicit session state (--session),
   * else a new sandbox. */
  if (c->session && !c->sandbox_id && !c->resume) {
    bool reconnected = false;
    if (cli_session_resume(c->state_dir, c->session, NULL,
                           c->o.materialize.base_dir, NULL, isatty(2),
                           c->session_id, &reconnected, &e) < 0) {
      fprintf(stderr, "sbx run: %s\n", e.msg);
      return e.code == SBX_INVALID_ARGUMENT ? 2 : 1;
    }
    c->sandbox_id = c->session_id;
  }
  if (c->sandbox_id) {
    int k = cli_attach(c->state_dir, c->sandbox_id, &c->rec, &c->o.sandbox, &e);
    if (k != 0) {
      fprintf(stderr, "sbx run: %s\n", e.msg);
      return k;
    }
    c->o.sandbox_manifest = c->rec.manifest;
    c->o.sandbox_record = &c->rec;
  }
  return -1;
}

/* A resumed run given no --base-dir takes the one it recorded (the
 * runner's snapshots.c keeps it in the run state): a sandbox restored
 * from the run's snapshot reads its manifest's local sources where the
 * run first did, whatever the current directory. */
static void recorded_base_dir(struct run_cmd *c) {
  if (!c->resume || c->o.materialize.base_dir)
    return;
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  struct sbx_error e = {0};
  if (store_state_get(c->store.store, c->store.id, &text, &len, &e) < 0)
    return; /* cli_run_store_open read it: not to be had now */
  _cleanup_json_ json_t *rs = json_loadb(text, len, 0, NULL);
  const char *b = json_string_value(
      json_object_get(json_object_get(rs, "snapshots"), "base_dir"));
  if (b && strlen(b) < sizeof(c->basedir)) {
    (void)snprintf(c->basedir, sizeof(c->basedir), "%s", b);
    c->o.materialize.base_dir = c->basedir;
  }
}

/* --continue: the new run starts from the completed run's conversation
 * with its agent file's starting agent; a conversation the model server
 * keeps (model_settings.store on the Responses API) is chained by its last
 * response id instead of sent again. */
static void continue_conversation(struct run_cmd *c) {
  const struct agent *a = c->agents->agents[0];
  c->o.continues = c->cont;
  c->o.history = c->store.history;
  if (a->api == AGENT_API_RESPONSES &&
      json_is_true(json_object_get(a->model_settings, "store")))
    c->o.previous_response_id = c->store.response_id;
  if (c->sandbox_id || c->session)
    return;
  /* A developer-owned sandbox (--sandbox, --session) outlives its runs:
   * the continuation goes on in it while it is there. */
  const char *prev =
      json_string_value(json_object_get(c->store.prev_request, "sandbox"));
  struct lifecycle_record rec = {0};
  struct sbx_error e = {0};
  if (prev && lifecycle_load(c->sdir, prev, &rec, &e) == 0) {
    lifecycle_record_clear(&rec);
    c->sandbox_id = prev;
    fprintf(stderr, "sbx: continuing run %s in sandbox %s, where it ran\n",
            c->cont, prev);
    return;
  }
  if (prev)
    fprintf(stderr,
            "sbx: run %s ran in sandbox %s, which is gone: the conversation "
            "goes on in a new sandbox (its workspace is lost)\n",
            c->cont, prev);
  else
    fprintf(stderr,
            "sbx: run %s's sandbox was removed when it completed: the "
            "conversation goes on in a new sandbox (its workspace is not "
            "carried over; --sandbox ID or --session STATE give it one)\n",
            c->cont);
}

/* Whether agent I of SET gets a sandbox of its own in a run that starts
 * in a live one (--sandbox, --session): it is not the first, works in a
 * sandbox, and is not only an agent used as a tool in its caller's. */
static bool makes_sandbox(const struct agent_set *set, size_t i) {
  const struct agent *a = set->agents[i];
  bool works = a->default_manifest;
  for (size_t k = 0; k < a->ncapabilities; k++)
    works = works || a->capabilities[k] == AGENT_CAP_FILESYSTEM ||
            a->capabilities[k] == AGENT_CAP_SHELL;
  if (i == 0 || !works)
    return false;
  for (size_t j = 0; j < set->n; j++) {
    const struct agent *b = set->agents[j];
    for (size_t k = 0; k < b->nhandoffs; k++)
      if (b->handoffs[k] == a)
        return true;
    for (size_t k = 0; k < b->ntools; k++)
      if (b->tools[k].agent == a && !b->tools[k].parent_sandbox)
        return true;
    for (size_t k = 0; k < b->ninput_guardrails; k++)
      if (b->input_guardrails[k].agent == a)
        return true;
    for (size_t k = 0; k < b->noutput_guardrails; k++)
      if (b->output_guardrails[k].agent == a)
        return true;
  }
  return false;
}

/* Refuses the flags that make sandboxes (--backend, its options,
 * --seccomp) in a run that starts in a live sandbox when no
 * agent of the run makes one: they would do nothing. -1, or the exit
 * code after saying why. */
static int check_live_sandbox_flags(struct run_cmd *c) {
  if (!c->sandbox_id && !c->session)
    return -1;
  /* --expose still says which of the live sandbox's ports its
   * sandbox_created event reports. */
  const char *flag = cli_backend_flags_any(&c->flags) ? "a backend option"
                     : c->backend                     ? "--backend"
                     : c->o.backend_opts.seccomp      ? "--seccomp"
                                                      : NULL;
  if (!flag)
    return -1;
  for (size_t i = 0; i < c->agents->n; i++)
    if (makes_sandbox(c->agents, i))
      return -1;
  fprintf(stderr,
          "sbx run: %s would do nothing: the run works in the live sandbox "
          "of --%s, made with its own options, and no other agent of it "
          "makes a sandbox (give them to sbx sandbox create)\n",
          flag, c->sandbox_id ? "sandbox" : "session");
  return 2;
}

/* Everything before the run: -1 when it can start, else the exit code. */
static int prepare(struct run_cmd *c, int argc, char **argv) {
  int k = parse_args(c, argc, argv);
  if (k >= 0)
    return k;
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, c->sdir, sizeof(c->sdir), &e) < 0) {
    fprintf(stderr, "sbx run: %s\n", e.msg);
    return 2;
  }
  c->o.state_dir = c->sdir;
  c->o.resume_path = c->resume;
  k = cli_run_store_open(&c->store, c->db, c->sdir, c->resume, c->cont,
                         &c->agent_path, &c->prompt);
  if (k >= 0)
    return k;
  recorded_base_dir(c);
  c->o.keep_failed = c->keep_ms > 0;
  c->o.keep_completed = true;
  if (c->ask) {
    c->tty = fopen("/dev/tty", "r+e");
    if (!c->tty || !isatty(fileno(c->tty))) {
      fprintf(stderr, "sbx run: --approve ask needs a terminal\n");
      return 2;
    }
    c->o.approve_ask = true;
    c->o.ask_tty = c->tty;
  }
  if (agent_load(c->resume || c->cont ? c->agent_path : argv[optind],
                 &c->agents, &e) < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg);
    return 2;
  }
  c->o.agents = c->agents;
  c->o.prompt = c->resume ? c->prompt
                : c->cont ? argv[optind]
                          : argv[optind + 1];
  if (c->cont)
    continue_conversation(c);
  k = check_live_sandbox_flags(c);
  if (k >= 0)
    return k;
  k = choose_backend(c);
  if (k >= 0)
    return k;
  trace_options_from_env(&c->to);
  if (trace_new(&c->to, &c->o.tracer, &e) < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg);
    return 2;
  }
  return attach_sandbox(c);
}

int cli_run(int argc, char **argv) {
  _cleanup_(run_cmd_clear) struct run_cmd c = {.keep_ms = KEEP_FAILED_MS};
  c.o.materialize.limits = materialize_default_limits();
  int k = prepare(&c, argc, argv);
  if (k >= 0)
    return k;
  c.o.materialize.progress = isatty(2) != 0;
  struct sbx_error e = {0};
  if (cli_run_store_start(&c.store, &c.o, &e) < 0) {
    fprintf(stderr, "sbx run: %s\n", e.msg);
    return 1;
  }
  int r = runner_run(&c.o, &c.res, &e);
  /* The runner kept the failed run's state (keep_failed). */
  bool kept = r < 0 && c.res.state_path[0];
  int64_t until = kept ? store_now_ms() + c.keep_ms : 0;
  cli_run_store_finish(&c.store, r, &c.res, &e, until);
  const char *id = c.store.id;
  if (r == RUNNER_PAUSED) {
    fprintf(stderr,
            "sbx: run %s is waiting for approval\n"
            "sbx: decide with `sbx approve %s CALL_ID` or `sbx reject %s "
            "CALL_ID --reason TEXT`,\n"
            "sbx: then continue with `sbx run --resume %s`\n",
            id, id, id, id);
    return 3;
  }
  if (r < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg[0] ? e.msg : strerror(-r));
    if (kept) {
      char ts[32];
      events_format_timestamp((uint64_t)until, ts);
      fprintf(stderr,
              "sbx: run %s failed; its state and sandboxes are kept until "
              "%s (--keep-failed)\n"
              "sbx: retry it from its last step with `sbx run --resume %s`\n",
              id, ts, id);
    }
    return c.res.config_error ? 2 : 1;
  }
  const char *out = c.res.final_output;
  if (!c.o.events) {
    fputs(out ? out : "", stdout);
    if (out && *out && out[strlen(out) - 1] != '\n')
      fputc('\n', stdout);
  }
  if (c.o.model_cfg.replay_path)
    fprintf(stderr,
            "sbx: replayed %d recorded model response%s from \"%s\"; no "
            "model API was called\n",
            c.res.turns, c.res.turns == 1 ? "" : "s",
            c.o.model_cfg.replay_path);
  return fflush(stdout) == 0 ? 0 : 1;
}
