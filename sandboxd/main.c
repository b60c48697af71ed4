/* sandboxd: the daemon inside every sandbox. Parses options, reads the
 * token, opens the workspace root and serves until Shutdown or a signal. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/daemon/daemon.h"
#include "sandboxd/isolate/isolate.h"
#include "sandboxd/rpc/version.h"
#include "sandboxd/server/server.h"
#include "shared/cleanup.h"
#include "shared/log.h"

/* The --help text, into F. */
static void usage(FILE *f) {
  fprintf(f,
          "usage: sandboxd --listen URL --root DIR (--token-file FILE | "
          "--token-fd N) [options]\n"
          "\n"
          "Serves exec, PTY, file, patch and archive RPCs for one sandbox.\n"
          "\n"
          "  --listen URL          ipc://PATH, tls+tcp://HOST:PORT, or "
          "tcp://HOST:PORT\n"
          "                        (plain tcp:// only with --insecure)\n"
          "  --root DIR            the workspace root (must exist)\n"
          "  --token-file FILE     read the auth token from FILE\n"
          "  --token-fd N          read the auth token from fd N, then close "
          "it\n"
          "  --tls-cert FILE       server certificate (PEM) for tls+tcp://\n"
          "  --tls-key FILE        its private key (PEM)\n"
          "  --tls-ca FILE         CA that client certificates must chain "
          "to\n"
          "  --insecure            allow plain tcp:// (unencrypted)\n"
          "  --ready-fd N          write one line to fd N once serving, then "
          "close it\n"
          "  --grant PATH[:ro]     allow absolute PATH outside the root "
          "(repeatable)\n"
          "  --seccomp MODE        default | no-network | off (default: "
          "default)\n"
          "  --max-processes N     live process records (default 64)\n"
          "  --retention BYTES     tail bytes kept per output stream "
          "(default 1048576;\n"
          "                        at least 8388608 for output held for "
          "its reader)\n"
          "  --max-inflight N      requests served at once (default 256)\n"
          "  --archive-max-members N\n"
          "                        entries in one archive, either way (default "
          "1000000)\n"
          "  --archive-max-bytes BYTES\n"
          "                        bytes of one archive (default 16 GiB)\n"
          "  --archive-max-extracted-bytes BYTES\n"
          "                        data an import writes, an export reads "
          "(default 64 GiB)\n"
          "  --max-connections N   connections at once, with or without a "
          "valid token\n"
          "                        (default %d)\n"
          "  --max-unauthenticated N\n"
          "                        of those, connections that have not sent "
          "a valid token\n"
          "                        yet (default %d; as many again may be in "
          "their TLS or\n"
          "                        SP handshake); past either limit the "
          "oldest of them is\n"
          "                        closed, and a connection is refused only "
          "when all have\n"
          "                        the token\n"
          "  --handshake-timeout SECONDS\n"
          "                        close a connection that sends no valid "
          "token within\n"
          "                        SECONDS of connecting (default %d)\n"
          "  --expires-at SECONDS  stop (processes killed, sandboxd exits) at "
          "this Unix\n"
          "                        time; refuses to start after it\n"
          "  --idle-timeout SECONDS\n"
          "                        stop after SECONDS without a request "
          "(Hello and\n"
          "                        Stats do not count; one in progress "
          "does)\n"
          "  --log-level LEVEL     error | warn | info | debug (default "
          "warn)\n"
          "  --version             print the version and exit\n"
          "  --install PATH        copy this sandboxd to PATH (0755) and "
          "exit: an image\n"
          "                        without sandboxd gets it from an init "
          "container\n"
          "  --help                print this help and exit\n"
          "\n"
          "Signals: SIGTERM and SIGINT stop sandboxd; SIGHUP reads the TLS "
          "files again\n"
          "with tls+tcp:// (connections reopen under them), else stops it.\n"
          "\n"
          "Isolation (Linux namespaces, cgroups and pasta):\n",
          SERVER_MAX_CONNECTIONS, SERVER_MAX_UNAUTHENTICATED,
          SERVER_HANDSHAKE_TIMEOUT_MS / 1000);
  for (size_t i = 0; i < isolate_nflags; i++) {
    char flag[64];
    (void)snprintf(flag, sizeof(flag), "%s%s%s", isolate_flags[i].name,
                   isolate_flags[i].metavar ? " " : "",
                   isolate_flags[i].metavar ? isolate_flags[i].metavar : "");
    if (strlen(flag) < 20)
      fprintf(f, "  --%-20s%s\n", flag, isolate_flags[i].help);
    else
      fprintf(f, "  --%s\n%24s%s\n", flag, "", isolate_flags[i].help);
  }
}

/* Parses a decimal unsigned number within [MIN, MAX]. */
static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  if (!s || !*s)
    return -EINVAL;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || s[0] == '-' || v < min || v > max)
    return -EINVAL;
  *out = v;
  return 0;
}

enum {
  O_LISTEN = 256,
  O_ROOT,
  O_TOKEN_FILE,
  O_TOKEN_FD,
  O_TLS_CERT,
  O_TLS_KEY,
  O_TLS_CA,
  O_INSECURE,
  O_READY_FD,
  O_GRANT,
  O_SECCOMP,
  O_MAX_PROC,
  O_RETENTION,
  O_INFLIGHT,
  O_ARCHIVE_MEMBERS,
  O_ARCHIVE_BYTES,
  O_ARCHIVE_EXTRACTED,
  O_MAX_CONN,
  O_MAX_UNAUTH,
  O_HANDSHAKE,
  O_EXPIRES,
  O_IDLE,
  O_LOG,
  O_VERSION,
  O_INSTALL,
  O_HELP,
  O_ISOLATE_FIRST = 512, /* + the index in isolate_flags */
};

static const struct option base_opts[] = {
    {"listen", required_argument, NULL, O_LISTEN},
    {"root", required_argument, NULL, O_ROOT},
    {"token-file", required_argument, NULL, O_TOKEN_FILE},
    {"token-fd", required_argument, NULL, O_TOKEN_FD},
    {"tls-cert", required_argument, NULL, O_TLS_CERT},
    {"tls-key", required_argument, NULL, O_TLS_KEY},
    {"tls-ca", required_argument, NULL, O_TLS_CA},
    {"insecure", no_argument, NULL, O_INSECURE},
    {"ready-fd", required_argument, NULL, O_READY_FD},
    {"grant", required_argument, NULL, O_GRANT},
    {"seccomp", required_argument, NULL, O_SECCOMP},
    {"max-processes", required_argument, NULL, O_MAX_PROC},
    {"retention", required_argument, NULL, O_RETENTION},
    {"max-inflight", required_argument, NULL, O_INFLIGHT},
    {"archive-max-members", required_argument, NULL, O_ARCHIVE_MEMBERS},
    {"archive-max-bytes", required_argument, NULL, O_ARCHIVE_BYTES},
    {"archive-max-extracted-bytes", required_argument, NULL,
     O_ARCHIVE_EXTRACTED},
    {"max-connections", required_argument, NULL, O_MAX_CONN},
    {"max-unauthenticated", required_argument, NULL, O_MAX_UNAUTH},
    {"handshake-timeout", required_argument, NULL, O_HANDSHAKE},
    {"expires-at", required_argument, NULL, O_EXPIRES},
    {"idle-timeout", required_argument, NULL, O_IDLE},
    {"log-level", required_argument, NULL, O_LOG},
    {"version", no_argument, NULL, O_VERSION},
    {"install", required_argument, NULL, O_INSTALL},
    {"help", no_argument, NULL, O_HELP},
};

/* The options getopt sees: the daemon's and isolation's. */
static struct option opts[SBX_ARRAY_SIZE(base_opts) + 32];

static void options_table(void) {
  size_t n = 0;
  for (; n < SBX_ARRAY_SIZE(base_opts); n++)
    opts[n] = base_opts[n];
  for (size_t i = 0; i < isolate_nflags && n + 1 < SBX_ARRAY_SIZE(opts); i++)
    opts[n++] = (struct option){isolate_flags[i].name,
                                isolate_flags[i].metavar ? required_argument
                                                         : no_argument,
                                NULL, O_ISOLATE_FIRST + (int)i};
  opts[n] = (struct option){0};
}

/* The numeric options: their range, and what is said of a value outside
 * it, after the option and the value. */
static const struct {
  int opt;
  const char *name;
  uint64_t min, max;
  const char *bad;
} numeric[] = {
    {O_TOKEN_FD, "--token-fd", 0, INT32_MAX, " is not an fd"},
    {O_READY_FD, "--ready-fd", 0, INT32_MAX, " is not an fd"},
    {O_MAX_PROC, "--max-processes", 1, 65536, ": expected 1..65536"},
    {O_RETENTION, "--retention", 4096, 1ull << 30,
     ": expected 4096..1073741824"},
    {O_INFLIGHT, "--max-inflight", 1, 4096, ": expected 1..4096"},
    {O_ARCHIVE_MEMBERS, "--archive-max-members", 1, 100000000,
     ": expected 1..100000000"},
    {O_ARCHIVE_BYTES, "--archive-max-bytes", 4096, 1ull << 50,
     ": expected 4096..2^50"},
    {O_ARCHIVE_EXTRACTED, "--archive-max-extracted-bytes", 1, 1ull << 50,
     ": expected 1..2^50"},
    {O_MAX_CONN, "--max-connections", 1, 65536, ": expected 1..65536"},
    {O_MAX_UNAUTH, "--max-unauthenticated", 1, 65536, ": expected 1..65536"},
    {O_HANDSHAKE, "--handshake-timeout", 1, 3600, ": expected 1..3600 seconds"},
    {O_EXPIRES, "--expires-at", 1, 1ull << 40, ": expected Unix seconds"},
    {O_IDLE, "--idle-timeout", 1, 1u << 30, ": expected 1..2^30 seconds"},
};

/* The --seccomp modes. */
static const struct {
  const char *name;
  enum sandboxd_seccomp mode;
} seccomp_modes[] = {
    {"default", SANDBOXD_SECCOMP_DEFAULT},
    {"no-network", SANDBOXD_SECCOMP_NO_NETWORK},
    {"off", SANDBOXD_SECCOMP_OFF},
};

/* Checks a numeric option's ARG into *V; 0, or 2 (the exit status) after
 * saying why. Other options pass. */
static int parse_numeric(int opt, const char *arg, uint64_t *v) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(numeric); i++)
    if (numeric[i].opt == opt) {
      if (parse_u64(arg, numeric[i].min, numeric[i].max, v) == 0)
        return 0;
      fprintf(stderr, "sandboxd: %s \"%s\"%s\n", numeric[i].name, arg,
              numeric[i].bad);
      return 2;
    }
  return 0;
}

/* The --seccomp mode ARG into *OUT; 0, or 2 after saying why. */
static int parse_seccomp(const char *arg, enum sandboxd_seccomp *out) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(seccomp_modes); i++)
    if (strcmp(arg, seccomp_modes[i].name) == 0) {
      *out = seccomp_modes[i].mode;
      return 0;
    }
  fprintf(stderr,
          "sandboxd: --seccomp \"%s\": expected default, no-network "
          "or off\n",
          arg);
  return 2;
}

/* --install PATH: copies this binary to PATH (0755), whole or not at all
 * (a temporary file beside it, renamed), for an image without sandboxd:
 * the kubernetes backend's init container runs the static sandboxd of
 * its own image with it into a volume the sandbox's container runs it
 * from. The exit status. */
static int install_self(const char *path) {
  char tmp[4096];
  if (!*path ||
      snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp)) {
    fprintf(stderr, "sandboxd: --install \"%s\": expected a file path\n", path);
    return 2;
  }
  int in = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  int out = in < 0 ? -1 : mkostemp(tmp, O_CLOEXEC);
  struct stat st;
  int err = in < 0 || out < 0 || fstat(in, &st) < 0 ? errno : 0;
  for (off_t off = 0; !err && off < st.st_size;) {
    ssize_t k = sendfile(out, in, &off, (size_t)(st.st_size - off));
    err = k < 0 ? errno : k == 0 ? EIO : 0;
  }
  if (!err && (fchmod(out, 0755) < 0 || fsync(out) < 0))
    err = errno;
  if (out >= 0 && close(out) < 0 && !err)
    err = errno;
  if (!err && rename(tmp, path) < 0)
    err = errno;
  if (in >= 0)
    close(in);
  if (err) {
    if (out >= 0)
      (void)unlink(tmp);
    fprintf(stderr, "sandboxd: --install \"%s\": %s\n", path, strerror(err));
    return 1;
  }
  return 0;
}

/* Takes option OPT with its ARG (getopt's optarg) into O. Returns -1 to go
 * on, or the exit status: 0 after --version or --help, 2 for a usage
 * error (said on stderr). --log-level takes effect at once. */
static int parse_option(int opt, const char *arg, struct daemon_options *o,
                        struct isolate_options *io) {
  uint64_t v = 0;
  if (opt >= O_ISOLATE_FIRST &&
      (size_t)(opt - O_ISOLATE_FIRST) < isolate_nflags) {
    struct sbx_error e = {0};
    if (isolate_flag_parse((size_t)(opt - O_ISOLATE_FIRST), arg, io, &e) < 0) {
      fprintf(stderr, "sandboxd: %s\n", e.msg);
      return 2;
    }
    return -1;
  }
  if (parse_numeric(opt, arg, &v) != 0)
    return 2;
  switch (opt) {
  case O_LISTEN:
    o->listen = arg;
    break;
  case O_ROOT:
    o->root = arg;
    break;
  case O_TOKEN_FILE:
    o->token_file = arg;
    break;
  case O_TOKEN_FD:
    o->token_fd = (int)v;
    break;
  case O_TLS_CERT:
    o->tls_cert = arg;
    break;
  case O_TLS_KEY:
    o->tls_key = arg;
    break;
  case O_TLS_CA:
    o->tls_ca = arg;
    break;
  case O_INSECURE:
    o->insecure = true;
    break;
  case O_READY_FD:
    o->ready_fd = (int)v;
    break;
  case O_GRANT:
    if (o->ngrants >= DAEMON_MAX_GRANTS) {
      fprintf(stderr, "sandboxd: at most %d --grant options\n",
              DAEMON_MAX_GRANTS);
      return 2;
    }
    o->grants[o->ngrants++] = arg;
    break;
  case O_SECCOMP:
    if (parse_seccomp(arg, &o->seccomp) != 0)
      return 2;
    break;
  case O_MAX_PROC:
    o->limits.max_processes = (uint32_t)v;
    break;
  case O_RETENTION:
    o->limits.retention_tail = v;
    break;
  case O_INFLIGHT:
    o->limits.max_inflight = (uint32_t)v;
    break;
  case O_ARCHIVE_MEMBERS:
    o->limits.archive_max_members = v;
    break;
  case O_ARCHIVE_BYTES:
    o->limits.archive_max_input_bytes = v;
    break;
  case O_ARCHIVE_EXTRACTED:
    o->limits.archive_max_extracted_bytes = v;
    break;
  case O_MAX_CONN:
    o->max_connections = (uint32_t)v;
    break;
  case O_MAX_UNAUTH:
    o->max_unauthenticated = (uint32_t)v;
    break;
  case O_HANDSHAKE:
    o->handshake_timeout_ms = (unsigned)v * 1000;
    break;
  case O_EXPIRES:
    o->expires_at = (int64_t)v;
    break;
  case O_IDLE:
    o->idle_timeout_s = (unsigned)v;
    break;
  case O_LOG: {
    enum sbx_log_level lvl;
    if (sbx_log_parse_level(arg, &lvl) < 0) {
      fprintf(stderr,
              "sandboxd: --log-level \"%s\": expected error, warn, info or "
              "debug\n",
              arg);
      return 2;
    }
    sbx_log_set_level(lvl);
    break;
  }
  case O_VERSION:
    printf("sandboxd %s\n", sandboxd_version());
    return 0;
  case O_INSTALL:
    return install_self(arg);
  case O_HELP:
    usage(stdout);
    return 0;
  default:
    usage(stderr);
    return 2;
  }
  return -1;
}

/* Parses the command line into O: -1 to run, or the exit status. */
static int parse_args(int argc, char **argv, struct daemon_options *o,
                      struct isolate_options *io) {
  int c;
  options_table();
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int rc = parse_option(c, optarg, o, io);
    if (rc >= 0)
      return rc;
  }
  if (optind < argc) {
    fprintf(stderr, "sandboxd: unexpected argument \"%s\"\n", argv[optind]);
    return 2;
  }
  return -1;
}

/* Frees a copy_args copy (a _cleanup_ function). */
static void free_args(char ***a) {
  for (size_t i = 0; *a && (*a)[i]; i++)
    free((*a)[i]);
  free(*a);
}

/* A copy of ARGV, NULL-terminated; NULL when out of memory. */
static char **copy_args(int argc, char **argv) {
  char **a = calloc((size_t)argc + 1, sizeof(*a));
  for (int i = 0; a && i < argc; i++)
    if (!(a[i] = strdup(argv[i]))) {
      free_args(&a);
      return NULL;
    }
  return a;
}

/* Overwrites the command line as /proc/PID/cmdline shows it. */
static void wipe_args(int argc, char **argv) {
  char *end = argv[argc - 1] + strlen(argv[argc - 1]);
  size_t n0 = strlen(argv[0]);
  memset(argv[0], 0, (size_t)(end - argv[0]));
  memcpy(argv[0], "sandboxd", n0 < 8 ? n0 : 8);
}

/* Isolates (isolate.h): 0 in the sandbox, with O rewritten; 1 in the
 * supervisor once the sandbox has ended (*RC its exit code); or -errno. */
static int enter_sandbox(const struct isolate_options *io,
                         struct daemon_options *o, int *rc,
                         struct sbx_error *e) {
  if (o->tls_cert || o->tls_key || o->tls_ca)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--isolate does not take --tls-* files yet: serve "
                         "on ipc://");
  if (!o->root)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "--root is required");
  struct isolate_daemon d = {
      .listen = o->listen,
      .root = o->root,
      .grants = o->grants,
      .ngrants = o->ngrants,
      .token_file = o->token_file,
      .token_fd = o->token_fd,
      .ready_fd = o->ready_fd,
      .dir_fd = -1,
      .gate_fd = -1,
  };
  int r = isolate_enter(io, &d, rc, e);
  if (r != 0)
    return r;
  o->listen = d.listen;
  o->root = d.root;
  o->token_file = d.token_file;
  o->token_fd = d.token_fd;
  o->listen_dir_fd = d.dir_fd;
  o->gate_fd = d.gate_fd;
  o->isolated = true;
  o->memory_limit = io->limits.memory_bytes;
  o->pids_limit = io->limits.pids;
  return 0;
}

/* Parses the command line, then runs the daemon until it is told to stop;
 * exits 2 for a usage error (the daemon's INVALID_ARGUMENT too), 1 for
 * any other failure. */
/* One malloc arena for all of sandboxd's threads. glibc otherwise gives
 * each worker thread an arena of its own, and each keeps a few of the
 * 4 MiB chunks it freed (a message, its unpacked copy, a reply): 41-49 MiB
 * at the peak of a 150 MiB archive's import, 21-26 MiB with one arena.
 * glibc's own mapping threshold stays: it rises to the largest block
 * freed, so that the chunks are reused, not mapped, faulted in and
 * unmapped for each call (a fixed 256 KiB threshold halved the file and
 * output throughput). */
static void malloc_bound(void) {
#ifdef M_ARENA_MAX
  (void)mallopt(M_ARENA_MAX, 1);
#endif
}

int main(int argc, char **argv) {
  malloc_bound();
  struct daemon_options o;
  struct isolate_options io;
  daemon_options_init(&o);
  isolate_options_init(&io);
  sbx_log_set_program("sandboxd");
  /* The options point into a copy: an isolated sandbox's PID 1 wipes its
   * command line (host paths) from the sandbox's view. */
  _cleanup_(free_args) char **args = copy_args(argc, argv);
  if (!args) {
    fprintf(stderr, "sandboxd: out of memory\n");
    return 1;
  }
  int rc = parse_args(argc, args, &o, &io);
  if (rc >= 0)
    return rc;
  if (io.first_flag && !io.enabled) {
    fprintf(stderr, "sandboxd: --%s needs --isolate\n", io.first_flag);
    return 2;
  }
  struct sbx_error e = {0};
  int r = io.enabled ? enter_sandbox(&io, &o, &rc, &e) : 0;
  if (r == 1)
    return rc; /* the supervisor, when the sandbox has ended */
  if (r == 0 && io.enabled)
    wipe_args(argc, argv);
  if (r == 0)
    r = daemon_run(&o, &e);
  if (r < 0) {
    log_error("%s", e.msg[0] ? e.msg : strerror(-r));
    return e.code == SBX_INVALID_ARGUMENT ? 2 : 1;
  }
  return 0;
}
