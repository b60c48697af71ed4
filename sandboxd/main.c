/* sandboxd: the daemon inside every sandbox. Parses options, reads the
 * token, opens the workspace root and serves until Shutdown or a signal. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/daemon/daemon.h"
#include "sandboxd/rpc/version.h"
#include "shared/cleanup.h"
#include "shared/log.h"

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

int main(int argc, char **argv) {
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
  struct daemon_options o;
  daemon_options_init(&o);
  sbx_log_set_program("sandboxd");
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case O_LISTEN:
      o.listen = optarg;
      break;
    case O_ROOT:
      o.root = optarg;
      break;
    case O_TOKEN_FILE:
      o.token_file = optarg;
      break;
    case O_TOKEN_FD:
      if (parse_u64(optarg, 0, INT32_MAX, &v) < 0) {
        fprintf(stderr, "sandboxd: --token-fd \"%s\" is not an fd\n", optarg);
        return 2;
      }
      o.token_fd = (int)v;
      break;
    case O_TLS_CERT:
      o.tls_cert = optarg;
      break;
    case O_TLS_KEY:
      o.tls_key = optarg;
      break;
    case O_TLS_CA:
      o.tls_ca = optarg;
      break;
    case O_INSECURE:
      o.insecure = true;
      break;
    case O_READY_FD:
      if (parse_u64(optarg, 0, INT32_MAX, &v) < 0) {
        fprintf(stderr, "sandboxd: --ready-fd \"%s\" is not an fd\n", optarg);
        return 2;
      }
      o.ready_fd = (int)v;
      break;
    case O_GRANT:
      if (o.ngrants >= DAEMON_MAX_GRANTS) {
        fprintf(stderr, "sandboxd: at most %d --grant options\n",
                DAEMON_MAX_GRANTS);
        return 2;
      }
      o.grants[o.ngrants++] = optarg;
      break;
    case O_SECCOMP:
      if (strcmp(optarg, "default") == 0)
        o.seccomp = SANDBOXD_SECCOMP_DEFAULT;
      else if (strcmp(optarg, "no-network") == 0)
        o.seccomp = SANDBOXD_SECCOMP_NO_NETWORK;
      else if (strcmp(optarg, "off") == 0)
        o.seccomp = SANDBOXD_SECCOMP_OFF;
      else {
        fprintf(stderr,
                "sandboxd: --seccomp \"%s\": expected default, no-network "
                "or off\n",
                optarg);
        return 2;
      }
      break;
    case O_MAX_PROC:
      if (parse_u64(optarg, 1, 65536, &v) < 0) {
        fprintf(stderr, "sandboxd: --max-processes \"%s\": expected 1..65536\n",
                optarg);
        return 2;
      }
      o.limits.max_processes = (uint32_t)v;
      break;
    case O_RETENTION:
      if (parse_u64(optarg, 4096, 1ull << 30, &v) < 0) {
        fprintf(stderr,
                "sandboxd: --retention \"%s\": expected 4096..1073741824\n",
                optarg);
        return 2;
      }
      o.limits.retention_tail = v;
      break;
    case O_INFLIGHT:
      if (parse_u64(optarg, 1, 4096, &v) < 0) {
        fprintf(stderr, "sandboxd: --max-inflight \"%s\": expected 1..4096\n",
                optarg);
        return 2;
      }
      o.limits.max_inflight = (uint32_t)v;
      break;
    case O_LOG: {
      enum sbx_log_level lvl;
      if (sbx_log_parse_level(optarg, &lvl) < 0) {
        fprintf(stderr,
                "sandboxd: --log-level \"%s\": expected error, warn, info or "
                "debug\n",
                optarg);
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
  }
  if (optind < argc) {
    fprintf(stderr, "sandboxd: unexpected argument \"%s\"\n", argv[optind]);
    return 2;
  }
  struct sbx_error e = {0};
  int r = daemon_run(&o, &e);
  if (r < 0) {
    log_error("%s", e.msg[0] ? e.msg : strerror(-r));
    return e.code == SBX_INVALID_ARGUMENT ? 2 : 1;
  }
  return 0;
}
