/* `sbx sandbox ...`: the operator CLI for developer-owned sandboxes; this
 * file holds the subcommand table, the usage texts and what every
 * subcommand shares (cli_internal.h). The subcommands live in
 * sandbox_*.c.
 *
 * Every subcommand takes --state-dir DIR, --json (for scripts) and --help;
 * usage errors exit 2, failures 1, exec and shell exit with the command's
 * status (128+N when killed by signal N). */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/cli/backend_flags.h"
#include "controller/cli/cli_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/json.h"

static void usage_sandbox(FILE *f) {
  fprintf(
      f,
      "usage: sbx sandbox [--state-dir DIR] SUBCOMMAND [options] [ARGS]\n"
      "\n"
      "Developer-owned sandboxes: they live until `sbx sandbox rm`, any sbx "
      "process\n"
      "can attach to them, and `sbx run --sandbox ID` runs an agent in one.\n"
      "\n"
      "Subcommands:\n"
      "  create [--manifest M] [--agent A]   create one; prints its id\n"
      "         [--name N] [--label K=V] [--ttl D] [--idle-timeout D]\n"
      "  ls [--filter F]                     list them (a table)\n"
      "  info ID                             what is known of one\n"
      "  stats ID                            CPU, memory, processes, disk\n"
      "  exec ID [options] -- CMD [ARG...]   run a command; its output "
      "streams and\n"
      "                                      its exit status is sbx's\n"
      "  shell ID [options]                  an interactive shell on your "
      "terminal\n"
      "  ps ID                               its processes, running or "
      "finished\n"
      "  logs ID [EXEC] [-f]                 the output a process has kept\n"
      "  kill ID EXEC [-s SIG]               a signal to a process (default "
      "KILL)\n"
      "  cp SRC DST                          copy files in or out; one side "
      "is ID:PATH\n"
      "  apply-patch ID [--dir D] < PATCH    apply a *** Begin Patch text "
      "atomically\n"
      "  port ID PORT                        where an exposed port is "
      "reachable\n"
      "  stop ID                             stop its processes and sandboxd, "
      "keep files\n"
      "  start ID                            start a stopped one again\n"
      "  rm ID [ID...]                       stop it and remove its "
      "workspace\n"
      "  prune [--filter F] [--force]        rm every stopped and expired "
      "one\n"
      "  save ID [options]                   snapshot it; prints its session "
      "state\n"
      "  resume STATE.json [options]         reconnect to a saved one, or "
      "restore it\n"
      "\n"
      "Common options: --state-dir DIR (default $XDG_STATE_HOME/sbx or\n"
      "~/.local/state/sbx), --json (machine-readable output; errors too, as\n"
      "{\"error\": {\"code\", \"message\"}} on stdout), --help. Options go "
      "before\n"
      "or after the ID (exec's before its command). Where an ID goes, a "
      "name (create\n"
      "--name) does too; IDs may be shortened to a unique prefix. Exit "
      "status: 0 done, 1 failed, 2 usage error; exec and "
      "shell\n"
      "exit with the command's status.\n");
}

/* The subcommands: their handlers and the usage --help prints (save and
 * resume print their own). */
static const struct subcommand {
  const char *name;
  int (*fn)(struct cli_common *c, int argc, char **argv);
  const char *usage;
  /* When set, --backend and the backends' flags go between the two. */
  const char *usage_after_backend;
} subcommands[] = {
    {"create", cli_sandbox_create,
     "usage: sbx sandbox create [--manifest M.json] [--agent AGENT.json] "
     "[options]\n"
     "\n"
     "Creates a developer-owned sandbox holding the manifest M (or AGENT's\n"
     "default_manifest; with both, M plus AGENT's run_as user) and prints "
     "its id.\n"
     "\n"
     "  --manifest FILE      a manifest (JSON)\n"
     "  --agent FILE         an agent file: its default_manifest, run_as and\n"
     "                       run_config\n"
     "  --base-dir DIR       local sources are relative to DIR and must lie "
     "beneath\n"
     "                       it or a grant (default: the directory of M, "
     "else of\n"
     "                       AGENT); recorded, for a restore of the "
     "sandbox's session\n"
     "  --name NAME          a name other commands take for its id: "
     "[a-zA-Z0-9][a-zA-Z0-9_.-]*,\n"
     "                       at most 64 characters, unused in the state "
     "directory\n"
     "  --label KEY=VALUE    a label, shown and filtered by ls (repeatable; "
     "at most\n"
     "                       64; sbx.* is reserved); on a container too\n"
     "  --ttl DURATION       time to live (90s, 5m, 1h30m, 2d): then its "
     "sandboxd\n"
     "                       kills its processes and stops; it shows as "
     "expired,\n"
     "                       cannot be started again and prune removes it\n"
     "  --idle-timeout DURATION\n"
     "                       stop it after DURATION without a request (exec, "
     "files,\n"
     "                       shell, cp, a run's tools; ls, info and stats "
     "do not\n"
     "                       count); start starts it again\n",
     /* the backends' flags (backend_flags.h) go here */
     "  --seccomp MODE       default | no-network | off\n"
     "  --expose PORT        a port the sandbox exposes, published on "
     "127.0.0.1\n"
     "                       (repeatable; replaces AGENT's "
     "run_config.exposed_ports)\n"
     "  --concurrency SPEC   manifest_entries=N,local_dir_files=N (default "
     "4,4;\n"
     "                       0 is unlimited, at most 64 threads)\n"},
    {"ls", cli_sandbox_ls,
     "usage: sbx sandbox ls [--json] [--filter KEY=VALUE]...\n"
     "\n"
     "Lists developer-owned sandboxes: id, name, backend, status (running, "
     "stopped,\n"
     "expired), when its time to live ends, creation time and workspace. "
     "--json adds\n"
     "labels, ttl_seconds, expires_at, expires_in_seconds and "
     "idle_timeout_seconds.\n"
     "\n"
     "  --filter KEY=VALUE   only those that match (repeatable; as docker: "
     "different\n"
     "                       keys must all match, one key's values are "
     "alternatives,\n"
     "                       every label must match):\n"
     "                         name=TEXT       the name contains TEXT\n"
     "                         status=S        running, stopped or expired\n"
     "                         label=KEY       has label KEY\n"
     "                         label=KEY=VAL   has label KEY with value VAL\n"
     "                         id=PREFIX       the id starts with PREFIX\n"},
    {"info", cli_sandbox_info,
     "usage: sbx sandbox info [--json] ID\n"
     "\n"
     "Shows a sandbox's record: name, backend, status, time to live, idle "
     "timeout,\n"
     "labels, workspace, socket, owner, exposed ports, users, entries and "
     "environment\n"
     "names. The auth token is never shown.\n"},
    {"stats", cli_sandbox_stats,
     "usage: sbx sandbox stats [--json] ID\n"
     "\n"
     "What a running sandbox uses, as its sandboxd reads it: CPU time, "
     "memory (now,\n"
     "peak, limit), pids (now, limit), the workspace's disk blocks, and how "
     "long it\n"
     "has been idle. From the sandbox's own cgroup where sandboxd can tell "
     "it is its\n"
     "own (a container's; pids then counts threads too), else summed over "
     "sandboxd\n"
     "and its processes in /proc (then the peak is not known and the limits "
     "are\n"
     "those sbx set). --json gives null for what is not known.\n"},
    {"exec", cli_sandbox_exec,
     "usage: sbx sandbox exec [options] ID [options] -- CMD [ARG...]\n"
     "\n"
     "Runs CMD in the sandbox. Its stdout and stderr stream to ours; sbx "
     "exits with\n"
     "its status (128+N when killed by signal N), as soon as its output has "
     "ended.\n"
     "Ctrl-C, SIGTERM and SIGHUP are passed on to its process group. "
     "Options go\n"
     "before or after ID; CMD follows \"--\" (or is the first word after ID "
     "that is\n"
     "no option).\n"
     "\n"
     "  -i, --interactive    pass our stdin to it (closed at its end)\n"
     "  -t, --tty            run it on a terminal (stdout and stderr "
     "merged)\n"
     "  -w, --workdir DIR    working directory, relative to the root\n"
     "  -u, --user USER      run as USER (sandboxd must be root)\n"
     "  -e, --env NAME=VAL   add to its environment (repeatable)\n"
     "  --timeout MS         kill it after MS milliseconds\n"
     "  --json               collect the output and print {exit_code, "
     "signal,\n"
     "                       stdout, stderr} at the end\n"},
    {"shell", cli_sandbox_shell,
     "usage: sbx sandbox shell [options] ID\n"
     "\n"
     "Attaches an interactive login shell (bash, else sh) on a terminal to "
     "yours:\n"
     "raw mode, resized when your window is, restored when it exits. Ctrl-C "
     "goes\n"
     "to the shell. sbx exits with the shell's status. Not available with "
     "--json.\n"
     "When stdin is no terminal (echo pwd | sbx sandbox shell ID), the "
     "shell reads it\n"
     "as a script without a terminal and ends at its end; its stdout and "
     "stderr stay\n"
     "apart.\n"
     "\n"
     "  -w, --workdir DIR    working directory, relative to the root\n"
     "  -u, --user USER      run as USER\n"
     "  --shell PATH         the shell to run instead\n"},
    {"ps", cli_sandbox_ps,
     "usage: sbx sandbox ps [--json] ID\n"
     "\n"
     "Lists the processes sandboxd keeps for the sandbox: running ones, "
     "and finished\n"
     "ones not yet released (exec and shell release theirs when they end; "
     "a run's\n"
     "and the API's stay). EXEC is the id logs and kill take; STATUS is "
     "running,\n"
     "exited N or killed (SIG). --json adds pid, tty and the bytes each "
     "stream wrote.\n"},
    {"logs", cli_sandbox_logs,
     "usage: sbx sandbox logs [--json] [-f] ID [EXEC]\n"
     "\n"
     "Prints the output sandboxd has kept of process EXEC (default: the one "
     "started\n"
     "last): its stdout on stdout, its stderr on stderr. sandboxd keeps the "
     "start and\n"
     "the end of a long output; what it dropped between is said on stderr "
     "(--json:\n"
     "{exec_id, stdout, stderr, stdout_dropped_bytes, "
     "stderr_dropped_bytes}).\n"
     "\n"
     "  -f, --follow         go on printing until the process has ended\n"},
    {"kill", cli_sandbox_kill,
     "usage: sbx sandbox kill [--json] ID EXEC [-s SIG]\n"
     "\n"
     "Sends a signal to process EXEC's group (as Ctrl-C on exec does), "
     "and prints\n"
     "EXEC. Killing a process that has ended fails.\n"
     "\n"
     "  -s, --signal SIG     the signal: a name (TERM, SIGINT) or number "
     "(default KILL)\n"},
    {"cp", cli_sandbox_cp,
     "usage: sbx sandbox cp [--json] SRC DST\n"
     "\n"
     "Copies files and directories between the host and a sandbox, as "
     "docker cp\n"
     "does: one of SRC and DST is ID:PATH (PATH relative to the root, or "
     "absolute\n"
     "under it or a grant). A directory is copied with its contents; SRC/. "
     "copies\n"
     "only its contents. A DST that is an existing directory receives SRC "
     "by its\n"
     "name. Modes, times and symbolic links are kept; ownership is not "
     "(files\n"
     "copied in belong to sandboxd's user, files copied out to you).\n"},
    {"apply-patch", cli_sandbox_apply_patch,
     "usage: sbx sandbox apply-patch [--json] [--dir D] ID < PATCH\n"
     "\n"
     "Applies the patch on stdin (\"*** Begin Patch\" ... \"*** End "
     "Patch\") in the\n"
     "sandbox: all files or none. Paths in it are relative to D (default "
     "the root).\n"
     "Prints one line per file.\n"},
    {"port", cli_sandbox_port,
     "usage: sbx sandbox port [--json] ID PORT\n"
     "\n"
     "Prints HOST:PORT where the sandbox's exposed PORT is reachable "
     "(the local\n"
     "backend: 127.0.0.1:PORT). PORT must be one given with create "
     "--expose.\n"},
    {"stop", cli_sandbox_stop,
     "usage: sbx sandbox stop [--json] ID\n"
     "\n"
     "Kills the sandbox's processes and stops its sandboxd; the "
     "workspace stays.\n"
     "Stopping a stopped sandbox does nothing.\n"},
    {"start", cli_sandbox_start,
     "usage: sbx sandbox start [--json] ID\n"
     "\n"
     "Starts a stopped sandbox's sandboxd again on the same "
     "workspace. Starting a\n"
     "running sandbox does nothing.\n"},
    {"rm", cli_sandbox_rm,
     "usage: sbx sandbox rm [--json] [--force] ID [ID...]\n"
     "\n"
     "Stops each sandbox, removes its workspace and its record. With "
     "--force a\n"
     "record that cannot be attached to is removed anyway.\n"},
    {"prune", cli_sandbox_prune,
     "usage: sbx sandbox prune [--json] [--force] [--filter KEY=VALUE]...\n"
     "\n"
     "Removes every stopped and expired sandbox (its workspace and record) "
     "that\n"
     "passes the filters (those of ls), and prints the id (and name) of "
     "each. As\n"
     "docker's prune, it first asks on stderr and reads the answer from "
     "stdin, a\n"
     "terminal or not: only y or yes goes on; otherwise nothing is removed "
     "and it\n"
     "exits 1.\n"
     "\n"
     "  -f, --force          do not ask\n"},
    {"save", cli_sandbox_save, NULL},
    {"resume", cli_sandbox_resume, NULL},
};

static void usage_sub(FILE *f, const char *name) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(subcommands); i++)
    if (strcmp(subcommands[i].name, name) == 0 && subcommands[i].usage) {
      fputs(subcommands[i].usage, f);
      if (subcommands[i].usage_after_backend) {
        cli_backend_flags_help(f);
        fputs(subcommands[i].usage_after_backend, f);
      }
      fputs("\nCommon options: --state-dir DIR, --json, --help.\n", f);
    }
}

/* Says MSG: on stderr after PROG (with where SUB's usage is, when given),
 * or under --json as {"error": {"code": CODE, "message": MSG}} on stdout,
 * where a script reads the answer. */
static void print_error(const struct cli_common *c, const char *code,
                        const char *sub, const char *msg) {
  if (!c->json) {
    fprintf(stderr, "%s: %s\n", c->prog, msg);
    if (sub)
      fprintf(stderr, "(see sbx sandbox %s --help)\n", sub);
    return;
  }
  _cleanup_json_ json_t *j =
      json_pack("{s:{s:s, s:o}}", "error", "code", code, "message",
                sbx_json_stringn_utf8(msg, strlen(msg)));
  _cleanup_free_ char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
  if (s)
    puts(s);
  else
    fprintf(stderr, "%s: %s\n", c->prog, msg);
  (void)fflush(stdout);
}

int cli_usage_error(const struct cli_common *c, const char *sub,
                    const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  print_error(c, "usage", sub, msg);
  return 2;
}

int cli_error(const struct cli_common *c, enum sbx_code code, int status,
              const char *fmt, ...) {
  char msg[1024], name[32];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char *n = sbx_code_name(code == SBX_OK ? SBX_INTERNAL : code);
  size_t i = 0;
  for (; n[i] && i + 1 < sizeof(name); i++)
    name[i] = (char)tolower((unsigned char)n[i]);
  name[i] = '\0';
  print_error(c, name, NULL, msg);
  return status;
}

int cli_fail_status(const struct cli_common *c, const struct sbx_error *e,
                    int r, int status) {
  int err = e->err ? e->err : (r < 0 ? -r : EIO);
  enum sbx_code code = e->code ? e->code : sbx_code_from_errno(err);
  return cli_error(c, code, status, "%s", e->msg[0] ? e->msg : strerror(err));
}

int cli_fail(const struct cli_common *c, const struct sbx_error *e, int r) {
  return cli_fail_status(c, e, r, 1);
}

int cli_print_json(const struct cli_common *c, json_t *j) {
  _cleanup_free_ char *s =
      j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
  if (!s) {
    fprintf(stderr, "%s: cannot make the JSON output: out of memory\n",
            c->prog);
    return 1;
  }
  puts(s);
  return 0;
}

/* Lets go of an attached sandbox (the sandbox lives on) and its record;
 * CODE, or 1 when stdout could not be written out. */
int cli_detach_done(struct sandbox *sb, struct lifecycle_record *rec,
                    int code) {
  if (sb)
    sb->backend->detach(sb);
  lifecycle_record_clear(rec);
  return code ? code : (fflush(stdout) == 0 ? 0 : 1);
}

int cli_attach(const char *state_dir, const char *id,
               struct lifecycle_record *rec, struct sandbox **out,
               struct sbx_error *e) {
  char dir[4096];
  memset(rec, 0, sizeof(*rec));
  int r = state_dir_resolve(state_dir, dir, sizeof(dir), e);
  if (r < 0)
    return 2;
  r = lifecycle_load(dir, id, rec, e);
  if (r < 0)
    return 1;
  struct backend_options bo = {0};
  r = lifecycle_attach(rec, &bo, out, e);
  if (r < 0) {
    lifecycle_record_clear(rec);
    return 1;
  }
  if (!(*out)->client) {
    sbx_error_set(e, SBX_UNAVAILABLE, ESRCH,
                  "sandbox %s is stopped (sbx sandbox start %s)", rec->id,
                  rec->id);
    (*out)->backend->detach(*out);
    *out = NULL;
    lifecycle_record_clear(rec);
    return 1;
  }
  return 0;
}

int cli_load_json_file(const char *path, json_t **out, struct sbx_error *e) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = sbx_read_file(path, 64u << 20, &text, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "%s: %s", path, strerror(-r));
  json_error_t je;
  *out = json_loadb(text, len, 0, &je);
  if (!*out)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s:%d:%d: invalid JSON: %s", path, je.line, je.column,
                         je.text);
  return 0;
}

int cli_read_stdin(struct sbx_buf *b) {
  char chunk[65536];
  for (;;) {
    ssize_t n = read(0, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -errno;
    if (n == 0)
      return 0;
    int r = sbx_buf_append(b, chunk, (size_t)n);
    if (r < 0)
      return r;
  }
}

void cli_dir_of(const char *path, char *out, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    (void)snprintf(out, n, ".");
  else if (slash == path)
    (void)snprintf(out, n, "/");
  else
    (void)snprintf(out, n, "%.*s", (int)(slash - path), path);
}

/* Attaches to the recorded sandbox ID for SUB: 0, or the exit status after
 * saying why not (2 for a usage error such as an unknown ID). */
int cli_attach_for(struct cli_common *c, const char *sub, const char *id,
                   struct lifecycle_record *rec, struct sandbox **sb) {
  struct sbx_error e = {0};
  int k = cli_attach(c->state_dir, id, rec, sb, &e);
  if (k == 0)
    return 0;
  return k == 2 ? cli_usage_error(c, sub, "%s", e.msg) : cli_fail(c, &e, -1);
}

/* The options every subcommand takes (--state-dir, --json, --help) and
 * the answer to an unknown one: -1 when parsing goes on, else the exit
 * status (0 after --help). */
int cli_common_option(struct cli_common *c, const char *sub, int ch) {
  switch (ch) {
  case 'S':
    c->state_dir = optarg;
    return -1;
  case 'J':
    c->json = true;
    return -1;
  case 'h':
    usage_sub(stdout, sub);
    return 0;
  default:
    return cli_usage_error(c, sub, "unknown option");
  }
}

int cli_parse_common_only(struct cli_common *c, const char *sub, int argc,
                          char **argv, bool *force) {
  static const struct option opts[] = {
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"force", no_argument, NULL, 'f'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  int ch;
  optind = 0; /* a fresh scan that permutes: options after the ids too */
  while ((ch = getopt_long(argc, argv, "hf", opts, NULL)) != -1) {
    switch (ch) {
    case 'f':
      if (!force)
        return cli_usage_error(c, sub, "unknown option \"--force\"");
      *force = true;
      break;
    default: {
      int r = cli_common_option(c, sub, ch);
      if (r >= 0)
        return r;
    }
    }
  }
  return -1;
}

/* Parses the common options and exactly NARGS positional arguments. */
int cli_parse_ids(struct cli_common *c, const char *sub, int argc, char **argv,
                  int nargs, bool *force) {
  int u = cli_parse_common_only(c, sub, argc, argv, force);
  if (u >= 0)
    return u;
  if (nargs > 0 && argc - optind != nargs)
    return cli_usage_error(c, sub, "expected %s",
                           nargs == 1 ? "ID" : "ID PORT");
  if (nargs < 0 && argc - optind < 1)
    return cli_usage_error(c, sub, "expected at least one ID");
  return -1;
}

int cli_sandbox_main(int argc, char **argv) {
  struct cli_common c = {.prog = "sbx sandbox"};
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage_sandbox(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--json") == 0) {
      c.json = true;
      continue;
    }
    if (strcmp(argv[i], "--state-dir") == 0) {
      if (i + 1 >= argc) {
        print_error(&c, "usage", NULL, "--state-dir needs a directory");
        return 2;
      }
      c.state_dir = argv[++i];
      continue;
    }
    if (strncmp(argv[i], "--state-dir=", 12) == 0) {
      c.state_dir = argv[i] + 12;
      continue;
    }
    break;
  }
  if (i >= argc) {
    if (c.json)
      print_error(&c, "usage", NULL,
                  "expected a subcommand (see sbx sandbox --help)");
    else
      usage_sandbox(stderr);
    return 2;
  }
  char prog[64];
  (void)snprintf(prog, sizeof(prog), "sbx sandbox %.32s", argv[i]);
  c.prog = prog;
  for (size_t k = 0; k < SBX_ARRAY_SIZE(subcommands); k++)
    if (strcmp(argv[i], subcommands[k].name) == 0)
      return subcommands[k].fn(&c, argc - i, argv + i);
  c.prog = "sbx sandbox";
  char msg[200];
  (void)snprintf(msg, sizeof(msg),
                 "unknown subcommand \"%.64s\" (see sbx sandbox --help)",
                 argv[i]);
  print_error(&c, "usage", NULL, msg);
  return 2;
}
