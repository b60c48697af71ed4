/* `sbx sandbox ...`: the operator CLI for developer-owned sandboxes.
 *
 * Every subcommand takes --state-dir DIR, --json (for scripts) and --help;
 * usage errors exit 2, failures 1, exec and shell exit with the command's
 * status (128+N when killed by signal N). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "backends/docker/docker.h"
#include "backends/local/local.h"
#include "backends/registry.h"
#include "controller/cli/cli.h"
#include "controller/config/agent.h"
#include "controller/sandbox/lifecycle.h"
#include "controller/sandbox/progress.h"
#include "controller/sandbox/tarball.h"
#include "controller/snapshot/snapshot.h"
#include "controller/telemetry/trace.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/path.h"

#define CLI_PATCH_MAX (64u << 20)
#define CLI_JSON_OUTPUT_MAX (16u << 20)
#define CLI_MAX_ENV 256

struct common {
  const char *state_dir;
  bool json;
  const char *prog; /* "sbx sandbox create" */
};

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
      "  ls                                  list them (a table)\n"
      "  info ID                             what is known of one\n"
      "  exec ID [options] -- CMD [ARG...]   run a command; its output "
      "streams and\n"
      "                                      its exit status is sbx's\n"
      "  shell ID [options]                  an interactive shell on your "
      "terminal\n"
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
      "\n"
      "Common options: --state-dir DIR (default $XDG_STATE_HOME/sbx or\n"
      "~/.local/state/sbx), --json (machine-readable output), --help.\n"
      "IDs may be shortened to a unique prefix. Exit status: 0 done, 1 "
      "failed,\n"
      "2 usage error; exec and shell exit with the command's status.\n");
}

static const struct {
  const char *name, *usage;
} helps[] = {
    {"create",
     "usage: sbx sandbox create [--manifest M.json] [--agent AGENT.json] "
     "[options]\n"
     "\n"
     "Creates a developer-owned sandbox holding the manifest M (or AGENT's\n"
     "default_manifest; with both, M plus AGENT's run_as user) and prints "
     "its id.\n"
     "\n"
     "  --manifest FILE      a manifest (JSON)\n"
     "  --agent FILE         an agent file: its default_manifest and run_as\n"
     "  --base-dir DIR       local sources are relative to DIR and must lie "
     "beneath\n"
     "                       it or a grant (default: the directory of M, "
     "else of\n"
     "                       AGENT)\n"
     "  --backend NAME       sandbox backend: local (default) or docker\n"
     "  --image IMAGE        docker: the image (default: sbx's Debian image)\n"
     "  --network none       docker: no network but loopback\n"
     "  --seccomp MODE       default | no-network | off\n"
     "  --expose PORT        a port the sandbox exposes (repeatable)\n"
     "  --concurrency SPEC   manifest_entries=N,local_dir_files=N (default "
     "4,4;\n"
     "                       0 is unlimited, at most 64 threads)\n"},
    {"ls", "usage: sbx sandbox ls [--json]\n"
           "\n"
           "Lists developer-owned sandboxes: id, backend, status (running, "
           "stopped),\n"
           "creation time and workspace.\n"},
    {"info", "usage: sbx sandbox info [--json] ID\n"
             "\n"
             "Shows a sandbox's record: backend, status, workspace, socket, "
             "owner,\n"
             "exposed ports, users, entries and environment names. The auth "
             "token is\n"
             "never shown.\n"},
    {"exec",
     "usage: sbx sandbox exec [options] ID -- CMD [ARG...]\n"
     "\n"
     "Runs CMD in the sandbox. Its stdout and stderr stream to ours; sbx "
     "exits with\n"
     "its status (128+N when killed by signal N). Ctrl-C and SIGTERM are "
     "passed on\n"
     "to its process group.\n"
     "\n"
     "  -i, --interactive    pass our stdin to it\n"
     "  -t, --tty            run it on a terminal (stdout and stderr "
     "merged)\n"
     "  -w, --workdir DIR    working directory, relative to the root\n"
     "  -u, --user USER      run as USER (sandboxd must be root)\n"
     "  -e, --env NAME=VAL   add to its environment (repeatable)\n"
     "  --timeout MS         kill it after MS milliseconds\n"
     "  --json               collect the output and print {exit_code, "
     "signal,\n"
     "                       stdout, stderr} at the end\n"},
    {"shell",
     "usage: sbx sandbox shell [options] ID\n"
     "\n"
     "Attaches an interactive login shell (bash, else sh) on a terminal to "
     "yours:\n"
     "raw mode, resized when your window is, restored when it exits. Ctrl-C "
     "goes\n"
     "to the shell. sbx exits with the shell's status. Not available with "
     "--json.\n"
     "\n"
     "  -w, --workdir DIR    working directory, relative to the root\n"
     "  -u, --user USER      run as USER\n"
     "  --shell PATH         the shell to run instead\n"},
    {"cp",
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
    {"apply-patch",
     "usage: sbx sandbox apply-patch [--json] [--dir D] ID < PATCH\n"
     "\n"
     "Applies the patch on stdin (\"*** Begin Patch\" ... \"*** End "
     "Patch\") in the\n"
     "sandbox: all files or none. Paths in it are relative to D (default "
     "the root).\n"
     "Prints one line per file.\n"},
    {"port", "usage: sbx sandbox port [--json] ID PORT\n"
             "\n"
             "Prints HOST:PORT where the sandbox's exposed PORT is reachable "
             "(the local\n"
             "backend: 127.0.0.1:PORT). PORT must be one given with create "
             "--expose.\n"},
    {"stop", "usage: sbx sandbox stop [--json] ID\n"
             "\n"
             "Kills the sandbox's processes and stops its sandboxd; the "
             "workspace stays.\n"
             "Stopping a stopped sandbox does nothing.\n"},
    {"start", "usage: sbx sandbox start [--json] ID\n"
              "\n"
              "Starts a stopped sandbox's sandboxd again on the same "
              "workspace. Starting a\n"
              "running sandbox does nothing.\n"},
    {"rm", "usage: sbx sandbox rm [--json] [--force] ID [ID...]\n"
           "\n"
           "Stops each sandbox, removes its workspace and its record. With "
           "--force a\n"
           "record that cannot be attached to is removed anyway.\n"},
};

static void usage_sub(FILE *f, const char *name) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(helps); i++)
    if (strcmp(helps[i].name, name) == 0) {
      fputs(helps[i].usage, f);
      fputs("\nCommon options: --state-dir DIR, --json, --help.\n", f);
    }
}

/* Whether cp shows its progress (stderr is a terminal, not --json). */
static bool arg_progress;

static int usage_error(const struct common *c, const char *sub, const char *fmt,
                       ...) __attribute__((format(printf, 3, 4)));
static int usage_error(const struct common *c, const char *sub, const char *fmt,
                       ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", c->prog);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fprintf(stderr, "(see sbx sandbox %s --help)\n", sub);
  return 2;
}

static int fail_msg(const struct common *c, const struct sbx_error *e, int r) {
  fprintf(stderr, "%s: %s\n", c->prog,
          e->msg[0] ? e->msg : strerror(r < 0 ? -r : EIO));
  return 1;
}

static void print_json(json_t *j) {
  char *s = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
  if (s) {
    puts(s);
    free(s);
  }
}

/* Lets go of an attached sandbox (the sandbox lives on) and its record;
 * CODE, or 1 when stdout could not be written out. */
static int detach_done(struct sandbox *sb, struct lifecycle_record *rec,
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

/* ---- create ---------------------------------------------------------------
 */

static int load_json_file(const char *path, json_t **out, struct sbx_error *e) {
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

static void dir_of(const char *path, char *out, size_t n) {
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
static int attach_for(struct common *c, const char *sub, const char *id,
                      struct lifecycle_record *rec, struct sandbox **sb) {
  struct sbx_error e = {0};
  int k = cli_attach(c->state_dir, id, rec, sb, &e);
  if (k == 0)
    return 0;
  return k == 2 ? usage_error(c, sub, "%s", e.msg) : fail_msg(c, &e, -1);
}

/* The options every subcommand takes (--state-dir, --json, --help) and
 * the answer to an unknown one: -1 when parsing goes on, else the exit
 * status (0 after --help). */
static int common_option(struct common *c, const char *sub, int ch) {
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
    return usage_error(c, sub, "unknown option");
  }
}

static int cmd_create(struct common *c, int argc, char **argv) {
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
        return usage_error(c, "create",
                           "--seccomp \"%s\": expected default, no-network "
                           "or off",
                           optarg);
      lo.bo.seccomp = optarg;
      break;
    case O_EXPOSE:
      if (lo.nports == LIFECYCLE_MAX_PORTS)
        return usage_error(c, "create", "--expose: at most %d ports",
                           LIFECYCLE_MAX_PORTS);
      if (lifecycle_parse_port(optarg, &ports[lo.nports], &e) < 0)
        return usage_error(c, "create", "--expose: %s", e.msg);
      lo.nports++;
      break;
    case O_CONC:
      if (materialize_parse_limits(optarg, &lo.mo.limits, &e) < 0)
        return usage_error(c, "create", "--%s", e.msg);
      break;
    case O_IMAGE:
      lo.bo.docker.image = optarg;
      break;
    case O_NETWORK:
      if (strcmp(optarg, "none") != 0)
        return usage_error(c, "create",
                           "--network \"%s\": only none is supported "
                           "(without it: the engine's default network)",
                           optarg);
      lo.bo.docker.network_mode = optarg;
      break;
    default: {
      int r = common_option(c, "create", ch);
      if (r >= 0)
        return r;
    }
    }
  }
  if (optind != argc)
    return usage_error(c, "create", "unexpected argument \"%s\"", argv[optind]);
  lo.ports = ports;
  lo.backend = backend_find(backend);
  if (!lo.backend)
    return usage_error(c, "create", "unknown backend \"%s\"", backend);
  if (lo.backend != &backend_docker &&
      (lo.bo.docker.image || lo.bo.docker.network_mode))
    return usage_error(c, "create",
                       "--image and --network need --backend "
                       "docker");
  char dir[4096], base[4096];
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return usage_error(c, "create", "%s", e.msg);
  struct agent_set *agents = NULL;
  struct manifest *m = NULL;
  int r = 0;
  if (agent_path && agent_load(agent_path, &agents, &e) < 0) {
    fprintf(stderr, "%s: %s\n", c->prog, e.msg);
    return 2;
  }
  if (manifest_path) {
    json_t *j = NULL;
    r = load_json_file(manifest_path, &j, &e);
    if (r == 0)
      r = manifest_parse(j, manifest_path, &m, &e);
    json_decref(j);
    if (r == 0 && agents && agents->agents[0]->run_as)
      r = manifest_add_user(m, agents->agents[0]->run_as);
    dir_of(manifest_path, base, sizeof(base));
  } else if (agents) {
    r = lifecycle_agent_manifest(agents->agents[0], &m, &e);
    dir_of(agent_path, base, sizeof(base));
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
    return fail_msg(c, &e, r ? r : -ENAMETOOLONG);
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
    return fail_msg(c, &e, r);
  }
  if (c->json) {
    json_t *j = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "session_id",
                          sb->session_id, "backend", sb->backend->name, "root",
                          sb->root);
    print_json(j);
    json_decref(j);
  } else {
    printf("%s\n", id);
  }
  sb->backend->detach(sb);
  manifest_free(m);
  return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- ls, info
 * ---------------------------------------------------------------- */

/* The record of REC as shown: status filled in, no secrets. */
static json_t *shown(json_t *rec, bool running) {
  json_t *j = json_deep_copy(rec);
  if (!j)
    return NULL;
  json_object_set_new(j, "status",
                      json_string(running ? "running" : "stopped"));
  return j;
}

static bool probe(const char *dir, const char *id) {
  struct lifecycle_record rec;
  struct sbx_error e = {0};
  if (lifecycle_load(dir, id, &rec, &e) < 0)
    return false;
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  bool running = false;
  if (lifecycle_attach(&rec, &bo, &sb, &e) == 0) {
    running = sb->client && sb->backend->running(sb);
    sb->backend->detach(sb);
  }
  lifecycle_record_clear(&rec);
  return running;
}

static int parse_common_only(struct common *c, const char *sub, int argc,
                             char **argv, bool *force) {
  static const struct option opts[] = {
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"force", no_argument, NULL, 'f'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+hf", opts, NULL)) != -1) {
    switch (ch) {
    case 'f':
      if (!force)
        return usage_error(c, sub, "unknown option \"--force\"");
      *force = true;
      break;
    default: {
      int r = common_option(c, sub, ch);
      if (r >= 0)
        return r;
    }
    }
  }
  return -1;
}

static int cmd_ls(struct common *c, int argc, char **argv) {
  int u = parse_common_only(c, "ls", argc, argv, NULL);
  if (u >= 0)
    return u;
  if (optind != argc)
    return usage_error(c, "ls", "unexpected argument \"%s\"", argv[optind]);
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return usage_error(c, "ls", "%s", e.msg);
  json_t *list = NULL;
  int r = state_list(dir, &list, &e);
  if (r < 0)
    return fail_msg(c, &e, r);
  json_t *out = json_array();
  size_t i;
  json_t *rec;
  json_array_foreach(list, i, rec) {
    const char *id = json_string_value(json_object_get(rec, "id"));
    json_array_append_new(out, shown(rec, id && probe(dir, id)));
  }
  json_decref(list);
  if (c->json) {
    print_json(out);
  } else {
    printf("%-12s  %-8s  %-8s  %-20s  %s\n", "ID", "BACKEND", "STATUS",
           "CREATED", "WORKSPACE");
    json_array_foreach(out, i, rec) {
      const char *s[5] = {
          json_string_value(json_object_get(rec, "id")),
          json_string_value(json_object_get(rec, "backend")),
          json_string_value(json_object_get(rec, "status")),
          json_string_value(json_object_get(rec, "created_at")),
          json_string_value(json_object_get(rec, "root")),
      };
      for (int k = 0; k < 5; k++)
        if (!s[k])
          s[k] = "-";
      printf("%-12s  %-8s  %-8s  %-20s  %s\n", s[0], s[1], s[2], s[3], s[4]);
    }
  }
  json_decref(out);
  return fflush(stdout) == 0 ? 0 : 1;
}

/* Parses the common options and exactly NARGS positional arguments. */
static int parse_ids(struct common *c, const char *sub, int argc, char **argv,
                     int nargs, bool *force) {
  int u = parse_common_only(c, sub, argc, argv, force);
  if (u >= 0)
    return u;
  if (nargs > 0 && argc - optind != nargs)
    return usage_error(c, sub, "expected %s", nargs == 1 ? "ID" : "ID PORT");
  if (nargs < 0 && argc - optind < 1)
    return usage_error(c, sub, "expected at least one ID");
  return -1;
}

static int cmd_info(struct common *c, int argc, char **argv) {
  int u = parse_ids(c, "info", argc, argv, 1, NULL);
  if (u >= 0)
    return u;
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return usage_error(c, "info", "%s", e.msg);
  struct lifecycle_record rec;
  int r = lifecycle_load(dir, argv[optind], &rec, &e);
  if (r < 0)
    return fail_msg(c, &e, r);
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  bool running = false;
  json_t *hello = NULL;
  if (lifecycle_attach(&rec, &bo, &sb, &e) == 0) {
    running = sb->client && sb->backend->running(sb);
    Sbx__V1__Response *resp = NULL;
    if (running && sbx_hello(sb->client, &resp, &e) == 0) {
      hello = json_pack("{s:s, s:i, s:i}", "server_version",
                        resp->hello->server_version, "uid",
                        (int)resp->hello->uid, "gid", (int)resp->hello->gid);
      sbx_client_reply_free(resp);
    }
  }
  json_t *j = shown(rec.rec, running);
  if (hello)
    json_object_set_new(j, "sandboxd", hello);
  json_t *eps = json_object();
  for (size_t i = 0; sb && i < rec.nports; i++) {
    char ep[300], key[8];
    if (lifecycle_resolve_port(sb, rec.ports, rec.nports, rec.ports[i], ep,
                               sizeof(ep), NULL) == 0) {
      (void)snprintf(key, sizeof(key), "%u", (unsigned)rec.ports[i]);
      json_object_set_new(eps, key, json_string(ep));
    }
  }
  json_object_set_new(j, "endpoints", eps);
  if (c->json) {
    print_json(j);
  } else {
    const struct manifest *m = rec.manifest;
    json_t *b =
        json_object_get(j, json_string_value(json_object_get(j, "backend")));
    printf("id:          %s\n", rec.id);
    printf("session:     %s\n",
           json_string_value(json_object_get(j, "session_id")));
    printf("backend:     %s\n",
           json_string_value(json_object_get(j, "backend")));
    printf("status:      %s\n", running ? "running" : "stopped");
    printf("created:     %s by pid %lld\n",
           json_string_value(json_object_get(j, "created_at")),
           (long long)json_integer_value(json_object_get(j, "owner_pid")));
    printf("workspace:   %s\n", json_string_value(json_object_get(j, "root")));
    printf("root:        %s\n", m->root);
    if (json_is_object(b)) {
      printf("pid:         %lld\n",
             (long long)json_integer_value(json_object_get(b, "pid")));
      printf("socket:      %s\n",
             json_string_value(json_object_get(b, "socket")));
      printf("token file:  %s\n",
             json_string_value(json_object_get(b, "token_file")));
      printf("log file:    %s\n",
             json_string_value(json_object_get(b, "log_file")));
    }
    printf("entries:     %zu\n", m->nentries);
    for (size_t i = 0; i < m->nentries; i++)
      printf("  %s (%s)\n", m->entries[i].path, m->entries[i].type_name);
    printf("users:      ");
    for (size_t i = 0; i < m->nusers; i++)
      printf(" %s", m->users[i]);
    printf("%s\nenvironment:", m->nusers ? "" : " -");
    for (size_t i = 0; i < m->nenv; i++)
      printf(" %s", m->env[i].name);
    printf("%s\nports:      ", m->nenv ? "" : " -");
    const char *k;
    json_t *v;
    json_object_foreach(eps, k, v) printf(" %s -> %s", k, json_string_value(v));
    printf("%s\n", json_object_size(eps) ? "" : " -");
  }
  json_decref(j);
  return detach_done(sb, &rec, 0);
}

/* ---- exec ------------------------------------------------------------------
 */

struct reader {
  struct sbx_client *client;
  uint64_t exec_id;
  Sbx__V1__Stream stream;
  int fd;              /* where the output goes; -1 to collect */
  struct sbx_buf *buf; /* collected output (--json) */
  atomic_bool *done;
  bool exited;
  int code, sig;
  int rc;
  struct sbx_error e;
};

static void *reader_main(void *arg) {
  struct reader *rd = arg;
  uint64_t off = 0;
  for (;;) {
    Sbx__V1__ExecRead a = SBX__V1__EXEC_READ__INIT;
    a.exec_id = rd->exec_id;
    a.stream = rd->stream;
    a.offset = off;
    a.wait_ms = 1000;
    Sbx__V1__Response *resp = NULL;
    rd->rc = sbx_exec_read(rd->client, &a, &resp, &rd->e);
    if (rd->rc < 0)
      break;
    Sbx__V1__ExecReadReply *x = resp->exec_read;
    if (x->gap && rd->fd >= 0) {
      char note[96];
      int n = snprintf(note, sizeof(note),
                       "\n[sbx: %llu bytes of output were dropped]\n",
                       (unsigned long long)x->gap);
      (void)sbx_write_all(2, note, (size_t)n);
    }
    if (x->data.len) {
      if (rd->fd >= 0)
        (void)sbx_write_all(rd->fd, x->data.data, x->data.len);
      else
        (void)sbx_buf_append(rd->buf, x->data.data, x->data.len);
    }
    off = x->next_offset;
    bool end = x->eof && x->exited;
    if (x->exited) {
      rd->exited = true;
      rd->code = x->exit_code;
      rd->sig = x->signal;
    }
    sbx_client_reply_free(resp);
    if (end)
      break;
  }
  atomic_store(rd->done, true);
  return NULL;
}

struct writer {
  struct sbx_client *client;
  uint64_t exec_id;
  atomic_bool *done;
  bool close_at_eof;
};

static void *writer_main(void *arg) {
  struct writer *w = arg;
  char buf[16384];
  while (!atomic_load(w->done)) {
    struct pollfd p = {.fd = 0, .events = POLLIN};
    int pr = poll(&p, 1, 100);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      continue;
    ssize_t k = read(0, buf, sizeof(buf));
    if (k < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    struct sbx_error e = {0};
    if (k <= 0) {
      if (w->close_at_eof)
        (void)sbx_exec_write(w->client, w->exec_id, NULL, 0, true, &e);
      break;
    }
    if (sbx_exec_write(w->client, w->exec_id, buf, (size_t)k, false, &e) < 0)
      break;
  }
  return NULL;
}

static int start_exec(struct sandbox *sb, char **argv, size_t argc,
                      const char *cwd, const char *user, bool tty,
                      bool stdin_open, char **extra_env, size_t nextra,
                      unsigned timeout_ms, uint64_t *id, struct sbx_error *e) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = argc;
  st.cwd = (char *)(cwd ? cwd : "");
  st.run_as = (char *)(user ? user : "");
  st.tty = tty;
  st.no_stdin = !stdin_open;
  st.timeout_ms = timeout_ms;
  struct winsize ws;
  if (tty && ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
    st.rows = ws.ws_row;
    st.cols = ws.ws_col;
  }
  size_t n = sb->nenv + nextra + 1;
  _cleanup_free_ Sbx__V1__EnvVar *vars = calloc(n, sizeof(*vars));
  _cleanup_free_ Sbx__V1__EnvVar **vp = calloc(n, sizeof(*vp));
  _cleanup_free_ char *names = calloc(n, 512);
  if (!vars || !vp || !names)
    return -ENOMEM;
  size_t k = 0;
  const char *term = getenv("TERM");
  char termkv[256];
  char *all[CLI_MAX_ENV + 2 + 4096];
  size_t na = 0;
  for (size_t i = 0; i < sb->nenv && na < SBX_ARRAY_SIZE(all) - 2; i++)
    all[na++] = sb->env[i];
  for (size_t i = 0; i < nextra; i++)
    all[na++] = extra_env[i];
  if (tty && term && strlen(term) < 200) {
    (void)snprintf(termkv, sizeof(termkv), "TERM=%s", term);
    all[na++] = termkv;
  }
  for (size_t i = 0; i < na && k < n; i++) {
    const char *eq = strchr(all[i], '=');
    if (!eq || eq == all[i] || (size_t)(eq - all[i]) >= 512)
      continue;
    char *nm = names + k * 512;
    memcpy(nm, all[i], (size_t)(eq - all[i]));
    nm[eq - all[i]] = '\0';
    sbx__v1__env_var__init(&vars[k]);
    vars[k].name = nm;
    vars[k].value = (char *)(eq + 1);
    vp[k] = &vars[k];
    k++;
  }
  st.env = vp;
  st.n_env = k;
  Sbx__V1__Response *resp = NULL;
  int r = sbx_exec_start(sb->client, &st, &resp, e);
  if (r < 0)
    return r;
  *id = resp->exec_start->exec_id;
  sbx_client_reply_free(resp);
  return 0;
}

static int status_code(const struct reader *rd) {
  if (rd->sig)
    return 128 + rd->sig;
  return rd->code;
}

static int cmd_exec(struct common *c, int argc, char **argv) {
  enum { O_TIMEOUT = 256 };
  static const struct option opts[] = {
      {"interactive", no_argument, NULL, 'i'},
      {"tty", no_argument, NULL, 't'},
      {"workdir", required_argument, NULL, 'w'},
      {"user", required_argument, NULL, 'u'},
      {"env", required_argument, NULL, 'e'},
      {"timeout", required_argument, NULL, O_TIMEOUT},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  bool interactive = false, tty = false;
  const char *cwd = NULL, *user = NULL;
  char *env[CLI_MAX_ENV];
  size_t nenv = 0;
  unsigned timeout = 0;
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+itw:u:e:h", opts, NULL)) != -1) {
    switch (ch) {
    case 'i':
      interactive = true;
      break;
    case 't':
      tty = true;
      break;
    case 'w':
      cwd = optarg;
      break;
    case 'u':
      user = optarg;
      break;
    case 'e':
      if (nenv == CLI_MAX_ENV || !strchr(optarg, '=') || optarg[0] == '=')
        return usage_error(c, "exec", "--env \"%s\": expected NAME=VALUE",
                           optarg);
      env[nenv++] = optarg;
      break;
    case O_TIMEOUT: {
      char *end = NULL;
      errno = 0;
      long v = strtol(optarg, &end, 10);
      if (errno || !*optarg || *end || v < 1 || v > 86400000)
        return usage_error(c, "exec",
                           "--timeout \"%s\": milliseconds, 1 or "
                           "more",
                           optarg);
      timeout = (unsigned)v;
      break;
    }
    default: {
      int r = common_option(c, "exec", ch);
      if (r >= 0)
        return r;
    }
    }
  }
  if (argc - optind < 1)
    return usage_error(c, "exec", "expected ID -- CMD [ARG...]");
  const char *id = argv[optind++];
  if (optind < argc && strcmp(argv[optind], "--") == 0)
    optind++;
  if (optind >= argc)
    return usage_error(c, "exec", "expected a command after the ID");
  if (c->json && (tty || interactive))
    return usage_error(c, "exec", "--json cannot be combined with -t or -i");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = attach_for(c, "exec", id, &rec, &sb);
  if (k)
    return k;
  uint64_t exec_id = 0;
  int r = start_exec(sb, argv + optind, (size_t)(argc - optind), cwd, user, tty,
                     interactive, env, nenv, timeout, &exec_id, &e);
  int code = 1;
  if (r < 0) {
    fail_msg(c, &e, r);
    goto out;
  }
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  atomic_bool done;
  atomic_init(&done, false);
  atomic_bool done_err;
  atomic_init(&done_err, false);
  struct sbx_buf bo, be;
  sbx_buf_init(&bo, CLI_JSON_OUTPUT_MAX);
  sbx_buf_init(&be, CLI_JSON_OUTPUT_MAX);
  struct reader ro = {.client = sb->client,
                      .exec_id = exec_id,
                      .stream = SBX__V1__STREAM__STDOUT,
                      .fd = c->json ? -1 : 1,
                      .buf = &bo,
                      .done = &done};
  struct reader re = ro;
  re.stream = SBX__V1__STREAM__STDERR;
  re.fd = c->json ? -1 : 2;
  re.buf = &be;
  re.done = &done_err;
  struct writer w = {.client = sb->client,
                     .exec_id = exec_id,
                     .done = &done,
                     .close_at_eof = true};
  pthread_t t1, t2, t3;
  bool have_err = !tty, have_w = interactive;
  if (pthread_create(&t1, NULL, reader_main, &ro) != 0) {
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fprintf(stderr, "%s: cannot start a thread\n", c->prog);
    goto out;
  }
  if (have_err && pthread_create(&t2, NULL, reader_main, &re) != 0)
    have_err = false;
  if (have_w && pthread_create(&t3, NULL, writer_main, &w) != 0)
    have_w = false;
  while (!atomic_load(&done)) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    int sig = sigtimedwait(&set, NULL, &ts);
    if (sig > 0) {
      struct sbx_error se = {0};
      (void)sbx_exec_signal(sb->client, exec_id, sig, true, &se);
    }
  }
  pthread_join(t1, NULL);
  if (have_err)
    pthread_join(t2, NULL);
  if (have_w)
    pthread_join(t3, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  {
    struct sbx_error ie = {0};
    (void)sbx_exec_release(sb->client, exec_id, &ie);
  }
  if (ro.rc < 0) {
    fail_msg(c, &ro.e, ro.rc);
  } else if (c->json) {
    json_t *j = json_pack("{s:i, s:i, s:s%, s:s%}", "exit_code", ro.code,
                          "signal", ro.sig, "stdout", bo.data ? bo.data : "",
                          bo.len, "stderr", be.data ? be.data : "", be.len);
    if (j)
      print_json(j);
    else
      fprintf(stderr, "%s: the output is not valid UTF-8 for --json\n",
              c->prog);
    json_decref(j);
    code = status_code(&ro);
  } else {
    code = status_code(&ro);
  }
  sbx_buf_free(&bo);
  sbx_buf_free(&be);
out:
  sb->backend->detach(sb);
  lifecycle_record_clear(&rec);
  (void)fflush(stdout);
  return code;
}

/* ---- shell ------------------------------------------------------------------
 */

static struct termios saved_tio;
static bool tio_saved;

static void restore_tty(void) {
  if (tio_saved) {
    (void)tcsetattr(0, TCSADRAIN, &saved_tio);
    tio_saved = false;
  }
}

static int cmd_shell(struct common *c, int argc, char **argv) {
  enum { O_SHELL = 256 };
  static const struct option opts[] = {
      {"workdir", required_argument, NULL, 'w'},
      {"user", required_argument, NULL, 'u'},
      {"shell", required_argument, NULL, O_SHELL},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  const char *cwd = NULL, *user = NULL, *shell = NULL;
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+w:u:h", opts, NULL)) != -1) {
    switch (ch) {
    case 'w':
      cwd = optarg;
      break;
    case 'u':
      user = optarg;
      break;
    case O_SHELL:
      shell = optarg;
      break;
    case 'J':
      return usage_error(c, "shell",
                         "shell is interactive: --json is not "
                         "available (use exec --json)");
    default: {
      int r = common_option(c, "shell", ch);
      if (r >= 0)
        return r;
    }
    }
  }
  if (argc - optind != 1)
    return usage_error(c, "shell", "expected ID");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = attach_for(c, "shell", argv[optind], &rec, &sb);
  if (k)
    return k;
  char *sh_argv[4];
  size_t sh_argc;
  if (shell) {
    sh_argv[0] = (char *)shell;
    sh_argv[1] = "-l";
    sh_argc = 2;
  } else {
    sh_argv[0] = "/bin/sh";
    sh_argv[1] = "-c";
    sh_argv[2] = "if command -v bash >/dev/null 2>&1; then exec bash -l; "
                 "else exec sh -l; fi";
    sh_argc = 3;
  }
  sh_argv[sh_argc] = NULL;
  uint64_t exec_id = 0;
  int code = 1;
  int r = start_exec(sb, sh_argv, sh_argc, cwd, user, true, true, NULL, 0, 0,
                     &exec_id, &e);
  if (r < 0) {
    fail_msg(c, &e, r);
    goto out;
  }
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGWINCH);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  if (isatty(0) && tcgetattr(0, &saved_tio) == 0) {
    struct termios raw = saved_tio;
    cfmakeraw(&raw);
    if (tcsetattr(0, TCSADRAIN, &raw) == 0) {
      tio_saved = true;
      (void)atexit(restore_tty);
    }
  }
  atomic_bool done;
  atomic_init(&done, false);
  struct reader ro = {.client = sb->client,
                      .exec_id = exec_id,
                      .stream = SBX__V1__STREAM__STDOUT,
                      .fd = 1,
                      .done = &done};
  struct writer w = {.client = sb->client, .exec_id = exec_id, .done = &done};
  pthread_t t1, t2;
  bool have_w = true;
  if (pthread_create(&t1, NULL, reader_main, &ro) != 0) {
    restore_tty();
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fprintf(stderr, "%s: cannot start a thread\n", c->prog);
    goto out;
  }
  if (pthread_create(&t2, NULL, writer_main, &w) != 0)
    have_w = false;
  while (!atomic_load(&done)) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    int sig = sigtimedwait(&set, NULL, &ts);
    struct sbx_error se = {0};
    if (sig == SIGWINCH) {
      struct winsize ws;
      if (ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
        (void)sbx_exec_resize(sb->client, exec_id, ws.ws_row, ws.ws_col, &se);
    } else if (sig == SIGINT) {
      /* Not in raw mode (stdin is no terminal): pass it on. */
      (void)sbx_exec_signal(sb->client, exec_id, SIGINT, true, &se);
    } else if (sig > 0) {
      (void)sbx_exec_signal(sb->client, exec_id, SIGHUP, true, &se);
    }
  }
  pthread_join(t1, NULL);
  if (have_w)
    pthread_join(t2, NULL);
  restore_tty();
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  {
    struct sbx_error ie = {0};
    (void)sbx_exec_release(sb->client, exec_id, &ie);
  }
  if (ro.rc < 0)
    fail_msg(c, &ro.e, ro.rc);
  else
    code = status_code(&ro);
out:
  sb->backend->detach(sb);
  lifecycle_record_clear(&rec);
  return code;
}

/* ---- cp
 * ---------------------------------------------------------------------- */

/* Splits "ID:PATH": true when S names a sandbox (an id before a colon,
 * not a path with a slash before it). */
static bool split_remote(const char *s, char *id, size_t idn,
                         const char **path) {
  const char *colon = strchr(s, ':');
  if (!colon || colon == s || memchr(s, '/', (size_t)(colon - s)) ||
      (size_t)(colon - s) >= idn)
    return false;
  memcpy(id, s, (size_t)(colon - s));
  id[colon - s] = '\0';
  *path = colon + 1;
  return true;
}

/* A sandbox path as sandboxd takes it: relative to the root; absolute under
 * the workspace or the manifest root becomes relative; other absolute
 * paths go as they are (grants). */
static int sandbox_path(const struct sandbox *sb, const struct manifest *m,
                        const char *in, char *out, size_t n) {
  const char *roots[2] = {sb->root, m->root};
  if (in[0] == '/') {
    char abs[SBX_PATH_MAX];
    if (sbx_path_normalize_abs(in, strlen(in), abs, sizeof(abs), NULL) < 0)
      return -EINVAL;
    for (int i = 0; i < 2; i++) {
      if (!roots[i] || !sbx_path_is_under(roots[i], abs))
        continue;
      size_t l = strlen(roots[i]);
      const char *r = abs + (l == 1 ? 1 : l);
      if (*r == '/')
        r++;
      (void)snprintf(out, n, "%s", *r ? r : ".");
      return 0;
    }
    (void)snprintf(out, n, "%s", abs);
    return 0;
  }
  return sbx_path_normalize_rel(in, strlen(in), out, n, SBX_PATH_EMPTY_IS_ROOT,
                                NULL) < 0
             ? -EINVAL
             : 0;
}

static bool ends_with_dot(const char *p) {
  size_t n = strlen(p);
  return (n == 1 && p[0] == '.') ||
         (n >= 2 && p[n - 1] == '.' && p[n - 2] == '/');
}

static bool ends_with_slash(const char *p) {
  size_t n = strlen(p);
  return n > 0 && p[n - 1] == '/';
}

static const char *base_name(const char *p, char *buf, size_t n) {
  size_t l = strlen(p);
  while (l > 1 && p[l - 1] == '/')
    l--;
  const char *s = p;
  for (size_t i = 0; i < l; i++)
    if (p[i] == '/')
      s = p + i + 1;
  (void)snprintf(buf, n, "%.*s", (int)(l - (size_t)(s - p)), s);
  return buf;
}

static void parent_of(const char *p, char *out, size_t n) {
  char tmp[SBX_PATH_MAX];
  (void)snprintf(tmp, sizeof(tmp), "%s", p);
  size_t l = strlen(tmp);
  while (l > 1 && tmp[l - 1] == '/')
    tmp[--l] = '\0';
  char *s = strrchr(tmp, '/');
  if (!s)
    (void)snprintf(out, n, ".");
  else if (s == tmp)
    (void)snprintf(out, n, "/");
  else {
    *s = '\0';
    (void)snprintf(out, n, "%s", tmp);
  }
}

static int remote_type(struct sandbox *sb, const char *path,
                       Sbx__V1__FileType *type, struct sbx_error *e) {
  bool exists = false;
  int r = sbx_file_exists(sb->client, path, &exists, type, e);
  if (r < 0)
    return r;
  if (!exists)
    *type = SBX__V1__FILE_TYPE__FILE_TYPE_UNKNOWN;
  return 0;
}

static int cp_in(struct sandbox *sb, const struct manifest *m, const char *src,
                 const char *dst_in, uint64_t *count, struct sbx_error *e) {
  struct stat st;
  if (lstat(src, &st) < 0)
    return sbx_error_set(e, SBX_NOT_FOUND, errno, "cannot stat \"%s\": %m",
                         src);
  char dst[SBX_PATH_MAX];
  if (sandbox_path(sb, m, dst_in, dst, sizeof(dst)) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a valid sandbox path", dst_in);
  Sbx__V1__FileType dt;
  int r = remote_type(sb, dst, &dt, e);
  if (r < 0)
    return r;
  bool dst_dir = dt == SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY;
  bool dst_missing = dt == SBX__V1__FILE_TYPE__FILE_TYPE_UNKNOWN;
  Sbx__V1__Response *resp = NULL;
  r = sbx_hello(sb->client, &resp, e);
  if (r < 0)
    return r;
  uint32_t uid = resp->hello->uid, gid = resp->hello->gid;
  sbx_client_reply_free(resp);
  struct host_tree t = {0};
  char dest[SBX_PATH_MAX], name[SBX_NAME_MAX + 1], parent[SBX_PATH_MAX];
  _cleanup_close_ int root = -1;
  if (S_ISDIR(st.st_mode)) {
    if (!dst_missing && !dst_dir)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOTDIR,
                           "cannot copy a directory to a file: \"%s\"", dst_in);
    if (dst_dir && !ends_with_dot(src))
      (void)sbx_path_join(dst, base_name(src, name, sizeof(name)), dest,
                          sizeof(dest));
    else
      (void)snprintf(dest, sizeof(dest), "%s", dst);
    root = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
      return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", src);
    r = host_tree_scan(&t, root, ".", "", HOST_TREE_SKIP_OTHER, src, e);
  } else {
    if (ends_with_slash(dst_in) && !dst_dir)
      return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                           "destination directory \"%s\" does not exist",
                           dst_in);
    if (dst_dir) {
      (void)snprintf(dest, sizeof(dest), "%s", dst);
      base_name(src, name, sizeof(name));
    } else {
      parent_of(dst, dest, sizeof(dest));
      base_name(dst, name, sizeof(name));
      Sbx__V1__FileType pt;
      r = remote_type(sb, dest, &pt, e);
      if (r < 0)
        return r;
      if (pt != SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY)
        return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                             "destination directory \"%s\" does not exist",
                             dest);
    }
    parent_of(src, parent, sizeof(parent));
    char sname[SBX_NAME_MAX + 1];
    root = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
      return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", parent);
    r = host_tree_add(&t, root, base_name(src, sname, sizeof(sname)), name, e);
  }
  if (r == 0) {
    _cleanup_close_ int fd = -1;
    uint64_t size = 0;
    r = tarball_build(&t, uid, gid, src, &fd, &size, e);
    if (r == 0) {
      struct progress_meter pm;
      progress_meter_start(&pm, arg_progress ? progress_snapshot : NULL, NULL,
                           "copying in");
      r = tarball_push(sb->client, fd, size, dest, &pm, e);
    }
    for (size_t i = 0; i < t.n; i++)
      *count += S_ISREG(t.items[i].st.st_mode);
  }
  host_tree_free(&t);
  return r;
}

static int cp_out_file(struct sandbox *sb, const char *src, const char *target,
                       unsigned mode, struct sbx_error *e) {
  char tmp[SBX_PATH_MAX * 2 + 32];
  int tl = snprintf(tmp, sizeof(tmp), "%s.sbx-cp-XXXXXX", target);
  if (tl < 0 || (size_t)tl >= sizeof(tmp))
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ENAMETOOLONG,
                         "path too long: \"%s\"", target);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", tmp);
  uint64_t off = 0;
  int r = 0;
  for (;;) {
    Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
    rd.path = (char *)src;
    rd.offset = off;
    rd.length = TARBALL_CHUNK;
    Sbx__V1__Response *resp = NULL;
    r = sbx_file_read(sb->client, &rd, &resp, e);
    if (r < 0)
      break;
    size_t n = resp->file_read->data.len;
    bool eof = resp->file_read->eof;
    r = sbx_write_all(fd, resp->file_read->data.data, n);
    sbx_client_reply_free(resp);
    if (r < 0) {
      r = sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\"", tmp);
      break;
    }
    off += n;
    if (eof || n == 0)
      break;
  }
  if (r == 0 && fchmod(fd, mode & 01777) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot chmod \"%s\": %m", tmp);
  close(fd);
  if (r == 0 && rename(tmp, target) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot write \"%s\": %m", target);
  if (r < 0)
    (void)unlink(tmp);
  return r;
}

static int cp_out(struct sandbox *sb, const struct manifest *m,
                  const char *src_in, const char *dst, uint64_t *count,
                  struct sbx_error *e) {
  char src[SBX_PATH_MAX];
  if (sandbox_path(sb, m, src_in, src, sizeof(src)) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a valid sandbox path", src_in);
  Sbx__V1__Response *resp = NULL;
  int r = sbx_file_stat(sb->client, src, &resp, e);
  if (r < 0)
    return r;
  Sbx__V1__FileType type = resp->file_stat->type;
  unsigned mode = resp->file_stat->mode;
  char link[SBX_PATH_MAX];
  (void)snprintf(link, sizeof(link), "%s",
                 resp->file_stat->link_target ? resp->file_stat->link_target
                                              : "");
  sbx_client_reply_free(resp);
  struct stat dst_st;
  bool dst_exists = lstat(dst, &dst_st) == 0;
  bool dst_dir = dst_exists && S_ISDIR(dst_st.st_mode);
  char target[SBX_PATH_MAX * 2], name[SBX_NAME_MAX + 1];
  if (type == SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY) {
    if (dst_exists && !dst_dir)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOTDIR,
                           "cannot copy a directory to a file: \"%s\"", dst);
    if (dst_dir && !ends_with_dot(src_in))
      (void)snprintf(target, sizeof(target), "%s/%s", dst,
                     base_name(src, name, sizeof(name)));
    else
      (void)snprintf(target, sizeof(target), "%s", dst);
    if (mkdir(target, 0755) < 0 && errno != EEXIST)
      return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m",
                           target);
    struct progress_meter pm;
    progress_meter_start(&pm, arg_progress ? progress_snapshot : NULL, NULL,
                         "copying out");
    return tarball_pull(sb->client, src, target, &pm, count, e);
  }
  if (ends_with_slash(dst) && !dst_dir)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "destination directory \"%s\" does not exist", dst);
  if (dst_dir)
    (void)snprintf(target, sizeof(target), "%s/%s", dst,
                   base_name(src, name, sizeof(name)));
  else
    (void)snprintf(target, sizeof(target), "%s", dst);
  if (type == SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK) {
    (void)unlink(target);
    if (symlink(link, target) < 0)
      return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m",
                           target);
    return 0;
  }
  if (type != SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a file, directory or symbolic link",
                         src_in);
  (*count)++;
  return cp_out_file(sb, src, target, mode, e);
}

static int cmd_cp(struct common *c, int argc, char **argv) {
  arg_progress = progress_enabled(c->json);
  int u = parse_common_only(c, "cp", argc, argv, NULL);
  if (u >= 0)
    return u;
  if (argc - optind != 2)
    return usage_error(c, "cp", "expected SRC and DST");
  const char *src = argv[optind], *dst = argv[optind + 1];
  char sid[64], did[64];
  const char *spath = NULL, *dpath = NULL;
  bool sr = split_remote(src, sid, sizeof(sid), &spath);
  bool dr = split_remote(dst, did, sizeof(did), &dpath);
  if (sr == dr)
    return usage_error(c, "cp",
                       "exactly one of SRC and DST must be ID:PATH (copies "
                       "go between the host and a sandbox)");
  if ((sr && !*spath) || (dr && !*dpath))
    return usage_error(c, "cp", "the path after \"ID:\" is empty");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = attach_for(c, "cp", sr ? sid : did, &rec, &sb);
  if (k)
    return k;
  uint64_t files = 0;
  int r = sr ? cp_out(sb, rec.manifest, spath, dst, &files, &e)
             : cp_in(sb, rec.manifest, src, dpath, &files, &e);
  int code = 0;
  if (r < 0)
    code = fail_msg(c, &e, r);
  else if (c->json) {
    json_t *j = json_pack("{s:s, s:s, s:I}", "source", src, "destination", dst,
                          "files", (json_int_t)files);
    print_json(j);
    json_decref(j);
  }
  return detach_done(sb, &rec, code);
}

/* ---- apply-patch
 * -------------------------------------------------------------- */

static int cmd_apply_patch(struct common *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"dir", required_argument, NULL, 'd'},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  const char *dir = "";
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+d:h", opts, NULL)) != -1) {
    switch (ch) {
    case 'd':
      dir = optarg;
      break;
    default: {
      int r = common_option(c, "apply-patch", ch);
      if (r >= 0)
        return r;
    }
    }
  }
  if (argc - optind != 1)
    return usage_error(c, "apply-patch",
                       "expected ID (and the patch on "
                       "stdin)");
  struct sbx_buf b;
  sbx_buf_init(&b, CLI_PATCH_MAX);
  char chunk[65536];
  for (;;) {
    ssize_t n = read(0, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      sbx_buf_free(&b);
      fprintf(stderr, "%s: cannot read stdin: %s\n", c->prog, strerror(errno));
      return 1;
    }
    if (n == 0)
      break;
    if (sbx_buf_append(&b, chunk, (size_t)n) < 0) {
      sbx_buf_free(&b);
      return usage_error(c, "apply-patch", "the patch is larger than %u MiB",
                         CLI_PATCH_MAX >> 20);
    }
  }
  if (b.len == 0 || sbx_buf_append(&b, "", 1) < 0) {
    sbx_buf_free(&b);
    return usage_error(c, "apply-patch", "no patch on stdin");
  }
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = attach_for(c, "apply-patch", argv[optind], &rec, &sb);
  if (k) {
    sbx_buf_free(&b);
    return k;
  }
  Sbx__V1__Response *resp = NULL;
  int r = sbx_patch_apply(sb->client, b.data, dir, false, &resp, &e);
  sbx_buf_free(&b);
  int code = 0;
  if (r < 0) {
    code = fail_msg(c, &e, r);
  } else {
    Sbx__V1__PatchApplyReply *x = resp->patch_apply;
    json_t *arr = json_array();
    for (size_t i = 0; i < x->n_results; i++) {
      if (c->json)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "path",
                                             x->results[i]->path, "action",
                                             x->results[i]->action, "summary",
                                             x->results[i]->summary));
      else
        printf("%s\n", x->results[i]->summary);
    }
    if (c->json) {
      json_t *j = json_pack("{s:o}", "results", arr);
      print_json(j);
      json_decref(j);
    } else {
      json_decref(arr);
    }
  }
  sbx_client_reply_free(resp);
  return detach_done(sb, &rec, code);
}

/* ---- port, start, stop, rm
 * ----------------------------------------------------- */

static int cmd_port(struct common *c, int argc, char **argv) {
  int u = parse_ids(c, "port", argc, argv, 2, NULL);
  if (u >= 0)
    return u;
  uint16_t port = 0;
  struct sbx_error e = {0};
  if (lifecycle_parse_port(argv[optind + 1], &port, &e) < 0)
    return usage_error(c, "port", "%s", e.msg);
  char dir[4096];
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return usage_error(c, "port", "%s", e.msg);
  struct lifecycle_record rec;
  int r = lifecycle_load(dir, argv[optind], &rec, &e);
  if (r < 0)
    return fail_msg(c, &e, r);
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  int code = 0;
  r = lifecycle_attach(&rec, &bo, &sb, &e);
  char ep[300];
  if (r == 0)
    r = lifecycle_resolve_port(sb, rec.ports, rec.nports, port, ep, sizeof(ep),
                               &e);
  if (r < 0) {
    code = fail_msg(c, &e, r);
  } else if (c->json) {
    json_t *j = json_pack("{s:i, s:s}", "port", port, "endpoint", ep);
    print_json(j);
    json_decref(j);
  } else {
    printf("%s\n", ep);
  }
  return detach_done(sb, &rec, code);
}

static int cmd_start_stop(struct common *c, int argc, char **argv, bool start) {
  const char *sub = start ? "start" : "stop";
  int u = parse_ids(c, sub, argc, argv, 1, NULL);
  if (u >= 0)
    return u;
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return usage_error(c, sub, "%s", e.msg);
  struct lifecycle_record rec;
  int r = lifecycle_load(dir, argv[optind], &rec, &e);
  if (r < 0)
    return fail_msg(c, &e, r);
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  r = lifecycle_attach(&rec, &bo, &sb, &e);
  if (r == 0) {
    if (start && !sb->backend->start)
      r = sbx_error_set(&e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                        "backend %s cannot start a sandbox again",
                        sb->backend->name);
    else
      r = start ? sb->backend->start(sb, &e) : sb->backend->stop(sb, &e);
    if (r == 0)
      r = lifecycle_resave(&rec, sb, NULL, &e);
  }
  int code = 0;
  if (r < 0)
    code = fail_msg(c, &e, r);
  else if (c->json) {
    json_t *j = json_pack("{s:s, s:s}", "id", rec.id, "status",
                          start ? "running" : "stopped");
    print_json(j);
    json_decref(j);
  } else {
    printf("%s\n", rec.id);
  }
  return detach_done(sb, &rec, code);
}

static int cmd_rm(struct common *c, int argc, char **argv) {
  bool force = false;
  int u = parse_ids(c, "rm", argc, argv, -1, &force);
  if (u >= 0)
    return u;
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return usage_error(c, "rm", "%s", e.msg);
  int code = 0;
  json_t *removed = json_array();
  for (int i = optind; i < argc; i++) {
    struct lifecycle_record rec;
    int r = lifecycle_load(dir, argv[i], &rec, &e);
    if (r < 0) {
      code = fail_msg(c, &e, r);
      continue;
    }
    struct sandbox *sb = NULL;
    struct backend_options bo = {0};
    r = lifecycle_attach(&rec, &bo, &sb, &e);
    if (r == 0)
      r = sb->backend->close(sb, &e);
    if (r == 0 || force) {
      state_remove(dir, rec.id);
      json_array_append_new(removed, json_string(rec.id));
      if (!c->json)
        printf("%s\n", rec.id);
    }
    if (r < 0)
      code = fail_msg(c, &e, r);
    lifecycle_record_clear(&rec);
  }
  if (c->json)
    print_json(removed);
  json_decref(removed);
  return code ? code : (fflush(stdout) == 0 ? 0 : 1);
}

/* ---- session state: save and resume ------------------------------------ */

/* Reads --snapshot TYPE, --snapshot-dir DIR and --snapshot-url URL. */
static int parse_snapshot_opt(const char *opt, const char *val,
                              struct snapshot_spec *spec) {
  if (strcmp(opt, "--snapshot") == 0)
    return snapshot_type_parse(val, &spec->type);
  if (strcmp(opt, "--snapshot-dir") == 0) {
    spec->base_dir = val;
    return 0;
  }
  if (strcmp(opt, "--snapshot-url") == 0) {
    spec->url = val;
    return 0;
  }
  return -ENOENT;
}

/* sbx sandbox save ID: snapshots the workspace and prints the session
 * state (the SDK's fields; no token, no host paths, no credentials). */
static int cmd_save(struct common *c, int argc, char **argv) {
  struct snapshot_spec spec = {.type = SNAPSHOT_LOCAL};
  const char *id = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      printf(
          "usage: sbx sandbox save ID [--snapshot local|remote|none] "
          "[--snapshot-dir DIR] [--snapshot-url URL]\n\n"
          "Snapshots the sandbox's workspace (default: local, under "
          "$XDG_STATE_HOME/sbx/snapshots)\nand prints its session state as "
          "JSON on stdout, for sbx sandbox resume. The state holds\nno "
          "token, no credentials and no host paths. A remote snapshot is "
          "PUT to the URL with\nthe bearer token from $SBX_SNAPSHOT_TOKEN.\n");
      return 0;
    }
    int pr = i + 1 < argc ? parse_snapshot_opt(argv[i], argv[i + 1], &spec)
                          : -ENOENT;
    if (pr != -ENOENT) {
      if (pr < 0)
        return usage_error(c, "save", "%s \"%s\" is not valid", argv[i],
                           argv[i + 1]);
      i++;
      continue;
    }
    if (argv[i][0] == '-' || id)
      return usage_error(c, "save", "unexpected argument \"%s\"", argv[i]);
    id = argv[i];
  }
  if (!id)
    return usage_error(c, "save", "expected a sandbox id");
  if (spec.type == SNAPSHOT_REMOTE && !spec.url)
    return usage_error(c, "save", "--snapshot remote needs --snapshot-url");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = cli_attach(c->state_dir, id, &rec, &sb, &e);
  if (k != 0) {
    fprintf(stderr, "%s: %s\n", c->prog, e.msg);
    return k;
  }
  /* Traced as sandbox.snapshot when OTEL_EXPORTER_OTLP_* asks for it. */
  struct trace_options to = {0};
  trace_options_from_env(&to);
  struct tracer *tracer = NULL;
  struct sbx_error te = {0};
  if (trace_new(&to, &tracer, &te) < 0)
    log_warn("tracing is off: %s", te.msg);
  struct trace_span *sp = trace_start(tracer, TRACE_SANDBOX_SNAPSHOT);
  trace_set_str(sp, "sandbox.session_id", sb->session_id);
  trace_set_str(sp, "sandbox.backend", sb->backend->name);
  trace_set_str(sp, "sandbox.snapshot.type", snapshot_type_name(spec.type));
  /* Ephemeral entries and mounts stay out of the snapshot. */
  json_t *skip = json_object_get(rec.rec, "snapshot_excludes");
  size_t nskip = json_array_size(skip);
  _cleanup_free_ const char **excludes = calloc(nskip + 1, sizeof(char *));
  for (size_t i = 0; excludes && i < nskip; i++)
    excludes[i] = json_string_value(json_array_get(skip, i));
  struct snapshot_record snap = {0};
  int r = snapshot_save(
      &spec, sb, sb->session_id, excludes && nskip ? excludes : NULL, &snap,
      progress_enabled(c->json) ? progress_snapshot : NULL, NULL, &e);
  if (r < 0)
    trace_set_error(sp, "%s", e.msg);
  else
    trace_set_int(sp, "sandbox.snapshot.bytes", (int64_t)snap.size);
  trace_end(sp);
  (void)trace_free(tracer);
  if (r < 0) {
    sb->backend->detach(sb);
    lifecycle_record_clear(&rec);
    return fail_msg(c, &e, r);
  }
  json_t *st = json_pack(
      "{s:i, s:s, s:s, s:s, s:o, s:{s:s, s:s?, s:s, s:I}, s:s, s:s, s:b}",
      "version", 1, "type", sb->backend->name, "session_id", sb->session_id,
      "sandbox_id", rec.id, "manifest", manifest_to_json(rec.manifest),
      "snapshot", "type", snapshot_type_name(snap.type), "location",
      snap.location, "sha256", snap.sha256, "size", (json_int_t)snap.size,
      "snapshot_fingerprint", snap.sha256, "snapshot_fingerprint_version",
      snap.version, "workspace_root_ready", 1);
  json_t *ports = json_array();
  for (size_t i = 0; i < rec.nports; i++)
    json_array_append_new(ports, json_integer(rec.ports[i]));
  json_object_set_new(st, "exposed_ports", ports);
  /* Backend fields, as the Python SDK's DockerSandboxSessionState has. */
  const char *cid = json_string_value(
      json_object_get(json_object_get(rec.rec, "docker"), "container"));
  if (cid)
    json_object_set_new(st, "container_id", json_string(cid));
  print_json(st);
  json_decref(st);
  snapshot_record_clear(&snap);
  if (spec.type == SNAPSHOT_LOCAL) {
    /* Local snapshots older than 30 days go, as the SDK prunes its own. */
    _cleanup_free_ char *base = NULL;
    unsigned removed = 0;
    struct sbx_error pe = {0};
    if (spec.base_dir || snapshot_default_base_dir(&base, &pe) == 0)
      (void)snapshot_prune(spec.base_dir ? spec.base_dir : base, 0, &removed,
                           &pe);
  }
  return detach_done(sb, &rec, 0);
}

int cli_session_resume(const char *state_dir, const char *path,
                       const char *trusted, bool progress,
                       char id_out[STATE_ID_LEN + 1], bool *reconnected,
                       struct sbx_error *e) {
  struct snapshot_spec spec = {.type = SNAPSHOT_LOCAL};
  *reconnected = false;
  _cleanup_json_ json_t *st = NULL;
  if (load_json_file(path, &st, e) < 0)
    return -EINVAL;
  const char *sid = json_string_value(json_object_get(st, "session_id"));
  const char *sbid = json_string_value(json_object_get(st, "sandbox_id"));
  json_t *snapj = json_object_get(st, "snapshot");
  json_t *manj = json_object_get(st, "manifest");
  if (!sid || !json_is_object(manj))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a session state", path);
  char why_live[600] = "no sandbox id in the state";
  /* 1. The live sandbox, when it proves its identity: our token (Hello
   * through the state dir's token file) and the same session id. */
  if (sbid) {
    struct lifecycle_record rec;
    struct sandbox *sb = NULL;
    struct sbx_error le = {0};
    if (cli_attach(state_dir, sbid, &rec, &sb, &le) == 0) {
      bool same = strcmp(sb->session_id, sid) == 0;
      if (same)
        (void)snprintf(id_out, STATE_ID_LEN + 1, "%s", rec.id);
      else
        (void)snprintf(why_live, sizeof(why_live),
                       "sandbox %s holds another session", rec.id);
      sb->backend->detach(sb);
      lifecycle_record_clear(&rec);
      if (same) {
        *reconnected = true;
        return 0;
      }
    } else {
      (void)snprintf(why_live, sizeof(why_live), "%s", le.msg);
    }
  }
  /* 2. A new sandbox from the trusted manifest, with the snapshot. */
  struct snapshot_record snap = {0};
  const char *stype = json_string_value(json_object_get(snapj, "type"));
  const char *loc = json_string_value(json_object_get(snapj, "location"));
  const char *sha = json_string_value(json_object_get(snapj, "sha256"));
  if (!stype || snapshot_type_parse(stype, &snap.type) < 0 ||
      snap.type == SNAPSHOT_NONE || !loc || !sha || strlen(sha) != 64)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "cannot resume: the live sandbox is gone (%s) and the "
                         "state has no restorable snapshot",
                         why_live);
  spec.type = snap.type;
  snap.location = (char *)loc;
  memcpy(snap.sha256, sha, 65);
  snap.size = (uint64_t)json_integer_value(json_object_get(snapj, "size"));
  (void)snprintf(snap.version, sizeof(snap.version), "%s",
                 SNAPSHOT_FINGERPRINT_VERSION);
  _cleanup_json_ json_t *tj = NULL;
  if (trusted && load_json_file(trusted, &tj, e) < 0)
    return -EINVAL;
  struct manifest *m = NULL;
  char where[600];
  (void)snprintf(where, sizeof(where), "%s: manifest",
                 trusted ? trusted : path);
  int r = manifest_parse(tj ? tj : manj, where, &m, e);
  if (r < 0)
    return r;
  char dir[4096], tok[4200], logp[4200], created[32];
  char id[STATE_ID_LEN + 1] = "";
  r = state_dir_resolve(state_dir, dir, sizeof(dir), e);
  if (r == 0 &&
      ((r = state_dir_ensure(dir, e)) < 0 || (r = state_new_id(id)) < 0 ||
       state_path(dir, id, "token", tok, sizeof(tok)) < 0 ||
       state_path(dir, id, "log", logp, sizeof(logp)) < 0))
    r = r < 0 ? r : -ENAMETOOLONG;
  struct lifecycle_options lo = {
      .backend = backend_find(json_string_value(json_object_get(st, "type")))};
  if (!lo.backend)
    lo.backend = &backend_local;
  struct sandbox *sb = NULL;
  struct sbx_error ie = {0};
  if (r == 0)
    r = lifecycle_create(&lo, m, true, tok, logp, &sb, &ie);
  /* What the trusted manifest made ephemeral or mounted is kept, not
   * replaced by the snapshot. */
  _cleanup_free_ const char **keep = calloc(m->nentries + 1, sizeof(char *));
  size_t nkeep = 0;
  for (size_t i = 0; keep && i < m->nentries; i++)
    if (m->entries[i].ephemeral || m->entries[i].type == MANIFEST_MOUNT ||
        m->entries[i].type == MANIFEST_CLOUD_MOUNT)
      keep[nkeep++] = m->entries[i].path;
  spec.excludes = nkeep ? keep : NULL;
  struct snapshot_restore_result rr = {0};
  if (r == 0)
    r = snapshot_restore(&spec, &snap, sb, NULL, NULL, &rr,
                         progress ? progress_snapshot : NULL, NULL, &ie);
  if (r == 0) {
    state_now(created);
    r = lifecycle_save(dir, id, sb, m, NULL, 0, created, (long)getpid(), &ie);
  }
  manifest_free(m);
  if (r < 0) {
    if (sb) {
      struct sbx_error ce = {0};
      (void)sb->backend->close(sb, &ce);
    }
    if (id[0])
      state_remove(dir, id);
    return sbx_error_set(e, ie.code ? ie.code : SBX_INTERNAL, -r,
                         "cannot resume: the live sandbox is gone (%s), and "
                         "restoring the snapshot failed: %s",
                         why_live, ie.msg);
  }
  sb->backend->detach(sb);
  (void)snprintf(id_out, STATE_ID_LEN + 1, "%s", id);
  return 0;
}

/* sbx sandbox resume STATE.json: prints the sandbox id (see
 * cli_session_resume). */
static int cmd_resume(struct common *c, int argc, char **argv) {
  const char *path = NULL, *trusted = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      printf("usage: sbx sandbox resume STATE.json [--manifest M]\n\n"
             "Reconnects to the saved sandbox when it is still running and "
             "proves its identity\n(its session id, and the token this "
             "controller's state holds); otherwise creates a\nnew sandbox "
             "from the trusted manifest (--manifest, else the state's) and "
             "restores\nthe snapshot into it. Prints the sandbox id.\n");
      return 0;
    }
    if (strcmp(argv[i], "--manifest") == 0 && i + 1 < argc) {
      trusted = argv[++i];
      continue;
    }
    if (argv[i][0] == '-' || path)
      return usage_error(c, "resume", "unexpected argument \"%s\"", argv[i]);
    path = argv[i];
  }
  if (!path)
    return usage_error(c, "resume", "expected a session state file");
  char id[STATE_ID_LEN + 1];
  bool reconnected = false;
  struct sbx_error e = {0};
  int r = cli_session_resume(c->state_dir, path, trusted,
                             progress_enabled(c->json), id, &reconnected, &e);
  if (r < 0) {
    fprintf(stderr, "%s: %s\n", c->prog, e.msg);
    return e.code == SBX_INVALID_ARGUMENT && r == -EINVAL ? 2 : 1;
  }
  printf("%s\n", id);
  fprintf(stderr,
          reconnected ? "%s: reconnected to the live sandbox %s\n"
                      : "%s: the saved sandbox is gone; restored its snapshot "
                        "into a new sandbox %s\n",
          c->prog, id);
  return fflush(stdout) == 0 ? 0 : 1;
}

int cli_sandbox_main(int argc, char **argv) {
  struct common c = {.prog = "sbx sandbox"};
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
        fprintf(stderr, "sbx sandbox: --state-dir needs a directory\n");
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
    usage_sandbox(stderr);
    return 2;
  }
  static const struct {
    const char *name;
    int (*fn)(struct common *, int, char **);
  } cmds[] = {
      {"create", cmd_create},
      {"ls", cmd_ls},
      {"info", cmd_info},
      {"exec", cmd_exec},
      {"shell", cmd_shell},
      {"cp", cmd_cp},
      {"apply-patch", cmd_apply_patch},
      {"port", cmd_port},
      {"rm", cmd_rm},
      {"save", cmd_save},
      {"resume", cmd_resume},
  };
  char prog[64];
  (void)snprintf(prog, sizeof(prog), "sbx sandbox %.32s", argv[i]);
  c.prog = prog;
  if (strcmp(argv[i], "start") == 0 || strcmp(argv[i], "stop") == 0)
    return cmd_start_stop(&c, argc - i, argv + i, argv[i][2] == 'a');
  for (size_t k = 0; k < SBX_ARRAY_SIZE(cmds); k++)
    if (strcmp(argv[i], cmds[k].name) == 0)
      return cmds[k].fn(&c, argc - i, argv + i);
  fprintf(stderr,
          "sbx sandbox: unknown subcommand \"%s\" (see sbx sandbox --help)\n",
          argv[i]);
  return 2;
}
