/* sandboxd: the daemon inside every sandbox. Parses options, reads the
 * token, opens the workspace root and serves until Shutdown or a signal. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/daemon/daemon.h"
#include "sandboxd/rpc/version.h"
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
          "(default 1048576)\n"
          "  --max-inflight N      requests served at once (default 256)\n"
          "  --log-level LEVEL     error | warn | info | debug (default "
          "warn)\n"
          "  --version             print the version and exit\n"
          "  --help                print this help and exit\n");
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
  O_LOG,
  O_VERSION,
  O_HELP,
};

static const struct option opts[] = {
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
    {"log-level", required_argument, NULL, O_LOG},
    {"version", no_argument, NULL, O_VERSION},
    {"help", no_argument, NULL, O_HELP},
    {0},
};

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

/* Takes option OPT with its ARG (getopt's optarg) into O. Returns -1 to go
 * on, or the exit status: 0 after --version or --help, 2 for a usage
 * error (said on stderr). --log-level takes effect at once. */
static int parse_option(int opt, const char *arg, struct daemon_options *o) {
  uint64_t v = 0;
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
static int parse_args(int argc, char **argv, struct daemon_options *o) {
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    int rc = parse_option(c, optarg, o);
    if (rc >= 0)
      return rc;
  }
  if (optind < argc) {
    fprintf(stderr, "sandboxd: unexpected argument \"%s\"\n", argv[optind]);
    return 2;
  }
  return -1;
}

/* Parses the command line, then runs the daemon until it is told to stop;
 * exits 2 for a usage error (the daemon's INVALID_ARGUMENT too), 1 for
 * any other failure. */
int main(int argc, char **argv) {
  struct daemon_options o;
  daemon_options_init(&o);
  sbx_log_set_program("sandboxd");
  int rc = parse_args(argc, argv, &o);
  if (rc >= 0)
    return rc;
  struct sbx_error e = {0};
  int r = daemon_run(&o, &e);
  if (r < 0) {
    log_error("%s", e.msg[0] ? e.msg : strerror(-r));
    return e.code == SBX_INVALID_ARGUMENT ? 2 : 1;
  }
  return 0;
}
