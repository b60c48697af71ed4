/* sbx serve: the control-plane server (controller/server/server.h), and
 * sbx token: the tokens its clients show, kept in the same store. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "controller/server/server.h"
#include "controller/state/state.h"
#include "controller/state/store.h"
#include "shared/cleanup.h"

#define DB_URL_MAX 4300

static void usage_serve(FILE *f) {
  fprintf(
      f,
      "usage: sbx serve [OPTIONS]\n"
      "\n"
      "Serves the sbx HTTP API (docs/api.md): runs submitted over HTTP are\n"
      "executed here, their events streamed, their approvals taken. Runs\n"
      "left unfinished (a crash, a stop) go on when a server starts again\n"
      "on the same database.\n"
      "\n"
      "Options:\n"
      "  --listen ADDR:PORT   where to listen (default 127.0.0.1:8080; "
      "[::1]:PORT\n"
      "                       for IPv6; port 0 picks a free one)\n"
      "  --db URL             the state store: sqlite:PATH or postgres://... "
      "(default\n"
      "                       sqlite:STATE-DIR/sbx.db)\n"
      "  --state-dir DIR      runs' state files and sandbox records (default\n"
      "                       $XDG_STATE_HOME/sbx or ~/.local/state/sbx)\n"
      "  --workers N          runs executed at once, 1 to %d (default %d)\n"
      "  --lease-seconds N    how long a run stays with a server that stopped\n"
      "                       answering before another takes it, 3 to 3600 "
      "(default %d)\n"
      "  --max-runs N         unfinished runs one token may have (0: no "
      "limit, the\n"
      "                       default); over it a submit gets 429\n"
      "  --max-sandboxes N    sandboxes one token may have (0: no limit, "
      "the default)\n"
      "  --max-body BYTES     the largest request body (default 16 MiB)\n"
      "  --tls-cert FILE      serve HTTPS with this PEM certificate ...\n"
      "  --tls-key FILE       ... and its PEM key\n"
      "  --tls-client-ca FILE require client certificates signed by this "
      "PEM CA\n"
      "  --insecure           allow plain HTTP on an address other than "
      "loopback\n"
      "\n"
      "The model API comes from the environment as for sbx run "
      "(OPENAI_API_KEY,\n"
      "OPENAI_BASE_URL). Tokens: sbx token create NAME --scopes LIST.\n",
      SERVER_MAX_WORKERS, SERVER_DEFAULT_WORKERS,
      SERVER_DEFAULT_LEASE_MS / 1000);
}

/* A whole number in [MIN, MAX] from TEXT, or -1 after saying why. */
static long long number(const char *prog, const char *flag, const char *text,
                        long long min, long long max) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || *end || v < min || v > max) {
    fprintf(stderr,
            "%s: %s takes a whole number from %lld to %lld, not "
            "\"%s\"\n",
            prog, flag, min, max, text);
    return -1;
  }
  return v;
}

/* ADDR:PORT or [ADDR]:PORT into HOST (N bytes) and *PORT. */
static int parse_listen(const char *text, char *host, size_t n,
                        uint16_t *port) {
  const char *colon = strrchr(text, ':');
  if (!colon || colon == text)
    return -EINVAL;
  const char *h = text;
  size_t hl = (size_t)(colon - text);
  if (h[0] == '[') {
    if (hl < 3 || h[hl - 1] != ']')
      return -EINVAL;
    h++;
    hl -= 2;
  }
  if (hl >= n)
    return -EINVAL;
  memcpy(host, h, hl);
  host[hl] = '\0';
  char *end = NULL;
  errno = 0;
  unsigned long p = strtoul(colon + 1, &end, 10);
  if (errno || end == colon + 1 || *end || p > 65535)
    return -EINVAL;
  *port = (uint16_t)p;
  return 0;
}

enum {
  O_LISTEN = 1,
  O_DB,
  O_STATE_DIR,
  O_WORKERS,
  O_LEASE,
  O_MAX_RUNS,
  O_MAX_SANDBOXES,
  O_MAX_BODY,
  O_TLS_CERT,
  O_TLS_KEY,
  O_TLS_CA,
  O_INSECURE,
  O_HELP,
  O_SCOPES,
  O_JSON,
};

struct serve_args {
  struct server_config c;
  const char *listen, *db, *state_dir;
  char host[64];
};

/* One option of sbx serve: 0, or the exit code after saying why. */
static int serve_option(struct serve_args *s, int ch, const char *arg) {
  long long v;
  switch (ch) {
  case O_LISTEN:
    s->listen = arg;
    return 0;
  case O_DB:
    s->db = arg;
    return 0;
  case O_STATE_DIR:
    s->state_dir = arg;
    return 0;
  case O_WORKERS:
    v = number("sbx serve", "--workers", arg, 1, SERVER_MAX_WORKERS);
    s->c.workers = (unsigned)v;
    return v < 0 ? 2 : 0;
  case O_LEASE:
    v = number("sbx serve", "--lease-seconds", arg, 3, 3600);
    s->c.lease_ms = v * 1000;
    return v < 0 ? 2 : 0;
  case O_MAX_RUNS:
    v = number("sbx serve", "--max-runs", arg, 0, 1000000);
    s->c.max_runs = (unsigned)v;
    return v < 0 ? 2 : 0;
  case O_MAX_SANDBOXES:
    v = number("sbx serve", "--max-sandboxes", arg, 0, 1000000);
    s->c.max_sandboxes = (unsigned)v;
    return v < 0 ? 2 : 0;
  case O_MAX_BODY:
    v = number("sbx serve", "--max-body", arg, 1024, (long long)1 << 30);
    s->c.max_body = (size_t)v;
    return v < 0 ? 2 : 0;
  case O_TLS_CERT:
    s->c.tls_cert = arg;
    return 0;
  case O_TLS_KEY:
    s->c.tls_key = arg;
    return 0;
  case O_TLS_CA:
    s->c.tls_client_ca = arg;
    return 0;
  case O_INSECURE:
    s->c.insecure = true;
    return 0;
  default:
    usage_serve(stderr);
    return 2;
  }
}

int cli_serve(int argc, char **argv) {
  static const struct option opts[] = {
      {"listen", required_argument, NULL, O_LISTEN},
      {"db", required_argument, NULL, O_DB},
      {"state-dir", required_argument, NULL, O_STATE_DIR},
      {"workers", required_argument, NULL, O_WORKERS},
      {"lease-seconds", required_argument, NULL, O_LEASE},
      {"max-runs", required_argument, NULL, O_MAX_RUNS},
      {"max-sandboxes", required_argument, NULL, O_MAX_SANDBOXES},
      {"max-body", required_argument, NULL, O_MAX_BODY},
      {"tls-cert", required_argument, NULL, O_TLS_CERT},
      {"tls-key", required_argument, NULL, O_TLS_KEY},
      {"tls-client-ca", required_argument, NULL, O_TLS_CA},
      {"insecure", no_argument, NULL, O_INSECURE},
      {"help", no_argument, NULL, O_HELP},
      {0},
  };
  struct serve_args s = {.c = {.port = SERVER_DEFAULT_PORT, .ready_fd = 2}};
  optind = 1;
  opterr = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
    if (ch == O_HELP) {
      usage_serve(stdout);
      return 0;
    }
    int k = serve_option(&s, ch, optarg);
    if (k)
      return k;
  }
  if (optind < argc) {
    fprintf(stderr, "sbx serve: unexpected argument \"%s\"\n", argv[optind]);
    return 2;
  }
  if (s.listen &&
      parse_listen(s.listen, s.host, sizeof(s.host), &s.c.port) < 0) {
    fprintf(stderr,
            "sbx serve: --listen takes ADDR:PORT or [ADDR]:PORT, "
            "not \"%s\"\n",
            s.listen);
    return 2;
  }
  s.c.host = s.listen ? s.host : NULL;
  char sdir[4096], url[DB_URL_MAX];
  if (cli_db_url("sbx serve", s.db, s.state_dir, sdir, sizeof(sdir), url,
                 sizeof(url)) < 0)
    return 2;
  s.c.db = url;
  s.c.state_dir = sdir;
  /* The stop signals are taken by sigwaitinfo, in no thread's handler. */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  (void)pthread_sigmask(SIG_BLOCK, &stop, NULL);
  (void)signal(SIGPIPE, SIG_IGN);
  struct sbx_error e = {0};
  if (server_serve(&s.c, &stop, &e) < 0) {
    fprintf(stderr, "sbx serve: %s\n", e.msg);
    return e.code == SBX_INVALID_ARGUMENT ? 2 : 1;
  }
  return 0;
}

static void usage_token(FILE *f) {
  fprintf(f,
          "usage: sbx token create NAME [--scopes LIST] [--db URL] "
          "[--state-dir DIR]\n"
          "       sbx token ls [--json] [--db URL] [--state-dir DIR]\n"
          "       sbx token rm NAME [--db URL] [--state-dir DIR]\n"
          "\n"
          "Manages the bearer tokens of sbx serve, in the store it uses "
          "(the same\n"
          "--db and default). create prints the new token once on stdout; "
          "only its\n"
          "hash is kept. LIST is a comma list of %s (default read):\n"
          "  read     GET runs, events and metrics\n"
          "  run      submit, cancel and retry runs\n"
          "  approve  decide on calls runs wait for\n"
          "  admin    everything\n",
          SERVER_SCOPES);
}

/* The token subcommands on an open store: the exit code. */
static int token_do(struct store *st, const char *sub, const char *name,
                    const char *scopes, bool json) {
  struct sbx_error e = {0};
  if (strcmp(sub, "create") == 0) {
    char token[128];
    if (server_token_create(st, name, scopes ? scopes : "read", token,
                            sizeof(token), &e) < 0) {
      fprintf(stderr, "sbx token create: %s\n", e.msg);
      return e.err == EEXIST || e.code == SBX_INVALID_ARGUMENT ? 2 : 1;
    }
    printf("%s\n", token);
    explicit_bzero(token, sizeof(token));
    return 0;
  }
  if (strcmp(sub, "rm") == 0) {
    if (store_token_remove(st, name, &e) < 0) {
      fprintf(stderr, "sbx token rm: %s\n", e.msg);
      return 1;
    }
    return 0;
  }
  _cleanup_json_ json_t *list = NULL;
  if (store_token_list(st, &list, &e) < 0) {
    fprintf(stderr, "sbx token ls: %s\n", e.msg);
    return 1;
  }
  if (json) {
    (void)json_dumpf(list, stdout, JSON_INDENT(2));
    printf("\n");
    return 0;
  }
  printf("%-24s %-24s %s\n", "NAME", "SCOPES", "CREATED");
  size_t i;
  json_t *t;
  json_array_foreach(list, i, t) {
    printf("%-24s %-24s %s\n", json_string_value(json_object_get(t, "name")),
           json_string_value(json_object_get(t, "scopes")),
           json_string_value(json_object_get(t, "created_at")));
  }
  return 0;
}

int cli_token(int argc, char **argv) {
  static const struct option opts[] = {
      {"db", required_argument, NULL, O_DB},
      {"state-dir", required_argument, NULL, O_STATE_DIR},
      {"scopes", required_argument, NULL, O_SCOPES},
      {"json", no_argument, NULL, O_JSON},
      {"help", no_argument, NULL, O_HELP},
      {0},
  };
  const char *db = NULL, *state_dir = NULL, *scopes = NULL;
  bool json = false;
  optind = 1;
  opterr = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case O_DB:
      db = optarg;
      break;
    case O_STATE_DIR:
      state_dir = optarg;
      break;
    case O_SCOPES:
      scopes = optarg;
      break;
    case O_JSON:
      json = true;
      break;
    case O_HELP:
      usage_token(stdout);
      return 0;
    default:
      usage_token(stderr);
      return 2;
    }
  }
  const char *sub = optind < argc ? argv[optind] : NULL;
  bool named = sub && (strcmp(sub, "create") == 0 || strcmp(sub, "rm") == 0);
  bool ls = sub && strcmp(sub, "ls") == 0;
  if ((!named && !ls) || argc - optind != (named ? 2 : 1) ||
      (scopes && (!sub || strcmp(sub, "create") != 0)) || (json && !ls)) {
    usage_token(stderr);
    return 2;
  }
  char sdir[4096], url[DB_URL_MAX];
  if (cli_db_url("sbx token", db, state_dir, sdir, sizeof(sdir), url,
                 sizeof(url)) < 0)
    return 2;
  struct store *st = NULL;
  struct sbx_error e = {0};
  if (store_open(url, &st, &e) < 0) {
    fprintf(stderr, "sbx token: %s\n", e.msg);
    return 1;
  }
  int k = token_do(st, sub, named ? argv[optind + 1] : NULL, scopes, json);
  store_close(st);
  return k;
}
