/* sbx ca: the certificate authority of remote sandboxes (controller/ca/ca.h):
 * init, show, issue-server, issue-client, revoke, crl. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "controller/ca/ca.h"
#include "controller/cli/cli_internal.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/rand.h"

static void usage_ca(FILE *f) {
  fprintf(f,
          "usage: sbx ca [--state-dir DIR | --ca-dir DIR] SUBCOMMAND\n"
          "\n"
          "sbx's own certificate authority, for the mutual TLS of the "
          "remote backend.\n"
          "It lives in STATE-DIR/ca and is made on first use (its key "
          "0600).\n"
          "\n"
          "Subcommands:\n"
          "  init                        make the CA unless it exists\n"
          "  show [--json]               the CA and the certificates it "
          "issued\n"
          "  issue-server NAME --out DIR [--days N]\n"
          "                              what a sandboxd host named NAME "
          "needs, into DIR:\n"
          "                              server.crt, server.key, ca.pem "
          "(the CA and its\n"
          "                              revocation list, for --tls-ca) and "
          "token; sbx\n"
          "                              keeps the token as "
          "ca/servers/NAME.token\n"
          "  issue-client NAME [--out DIR] [--days N]\n"
          "                              a controller's client certificate: "
          "client.crt,\n"
          "                              client.key and ca.pem in DIR "
          "(default:\n"
          "                              ca/clients/NAME.crt and .key)\n"
          "  revoke NAME|SERIAL          revoke client certificates; copy "
          "the new ca.pem\n"
          "                              to every sandboxd host and reload "
          "sandboxd (SIGHUP)\n"
          "  crl --out FILE              write ca.pem (the CA and a fresh "
          "revocation list)\n"
          "\n"
          "NAME: 1 to %d of a-z, 0-9, '.' and '-'. --days: validity "
          "(default %d).\n",
          CA_NAME_MAX, CA_DEFAULT_DAYS);
}

struct ca_args {
  const char *out;
  long days;
  bool json;
};

/* Parses a subcommand's options from ARGV (ARGV[0] the subcommand). */
static int parse_sub(int argc, char **argv, struct ca_args *a) {
  static const struct option opts[] = {
      {"out", required_argument, NULL, 'o'},
      {"days", required_argument, NULL, 'd'},
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  *a = (struct ca_args){.days = CA_DEFAULT_DAYS};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    char *end = NULL;
    switch (c) {
    case 'o':
      a->out = optarg;
      break;
    case 'd':
      errno = 0;
      a->days = strtol(optarg, &end, 10);
      if (errno || !end || *end || a->days < 1 || a->days > 3650) {
        fprintf(stderr, "sbx ca: --days expects 1 to 3650, not \"%s\"\n",
                optarg);
        return -1;
      }
      break;
    case 'j':
      a->json = true;
      break;
    case 'h':
      usage_ca(stdout);
      return 1;
    default:
      fprintf(stderr, "sbx ca %s: unknown or incomplete option \"%s\"\n",
              argv[0], argv[optind - 1]);
      return -1;
    }
  }
  return 0;
}

static int fail(const struct sbx_error *e) {
  fprintf(stderr, "sbx ca: %s\n", e->msg);
  return e->code == SBX_INVALID_ARGUMENT || e->code == SBX_NOT_FOUND ? 2 : 1;
}

static int show(const char *dir, bool as_json) {
  struct sbx_error e = {0};
  _cleanup_json_ json_t *o = NULL;
  if (ca_show(dir, &o, &e) < 0) {
    if (e.code == SBX_NOT_FOUND)
      fprintf(stderr, "sbx ca: no CA in \"%s\" (sbx ca init makes one)\n", dir);
    else
      fprintf(stderr, "sbx ca: %s\n", e.msg);
    return 2;
  }
  if (as_json) {
    json_dumpf(o, stdout, JSON_INDENT(2));
    printf("\n");
    return 0;
  }
  printf("CA       %s\nsubject  %s\nsha256   %s\n\n",
         json_string_value(json_object_get(o, "dir")),
         json_string_value(json_object_get(o, "subject")),
         json_string_value(json_object_get(o, "sha256")));
  printf("%-32s %-6s %-24s %s\n", "SERIAL", "KIND", "NAME", "STATUS");
  size_t i;
  json_t *v;
  json_array_foreach(json_object_get(o, "issued"), i, v) {
    json_int_t na = json_integer_value(json_object_get(v, "not_after"));
    const char *st = json_object_get(v, "revoked_at") ? "revoked"
                     : na < (json_int_t)time(NULL)    ? "expired"
                                                      : "valid";
    printf("%-32s %-6s %-24s %s\n",
           json_string_value(json_object_get(v, "serial")),
           json_string_value(json_object_get(v, "kind")),
           json_string_value(json_object_get(v, "name")), st);
  }
  return 0;
}

/* DIR/NAME into OUT. */
static int join(char *out, size_t n, const char *dir, const char *name) {
  if ((size_t)snprintf(out, n, "%s/%s", dir, name) >= n) {
    fprintf(stderr, "sbx ca: the path \"%s\" is too long\n", dir);
    return -1;
  }
  return 0;
}

/* issue-server and issue-client. */
static int issue(const char *dir, enum ca_kind kind, const char *name,
                 const struct ca_args *a) {
  struct sbx_error e = {0};
  if (ca_name_check(name, &e) < 0)
    return fail(&e);
  char crt[PATH_MAX], key[PATH_MAX], pem[PATH_MAX] = "", tok[PATH_MAX];
  const char *base = kind == CA_SERVER ? "server" : "client";
  if (a->out) {
    if (mkdir(a->out, 0700) < 0 && errno != EEXIST) {
      fprintf(stderr, "sbx ca: cannot create \"%s\": %m\n", a->out);
      return 1;
    }
    char f[64];
    (void)snprintf(f, sizeof(f), "%s.crt", base);
    if (join(crt, sizeof(crt), a->out, f) < 0)
      return 2;
    (void)snprintf(f, sizeof(f), "%s.key", base);
    if (join(key, sizeof(key), a->out, f) < 0 ||
        join(pem, sizeof(pem), a->out, "ca.pem") < 0 ||
        join(tok, sizeof(tok), a->out, "token") < 0)
      return 2;
  } else if ((size_t)snprintf(crt, sizeof(crt), "%s/clients/%s.crt", dir,
                              name) >= sizeof(crt) ||
             (size_t)snprintf(key, sizeof(key), "%s/clients/%s.key", dir,
                              name) >= sizeof(key)) {
    fprintf(stderr, "sbx ca: the path \"%s\" is too long\n", dir);
    return 2;
  }
  int64_t now = (int64_t)time(NULL);
  char serial[41];
  if (ca_issue(dir, kind, name, now - 300, now + a->days * 86400, crt, key,
               serial, &e) < 0)
    return fail(&e);
  if (pem[0] && ca_write_bundle(dir, pem, &e) < 0)
    return fail(&e);
  if (kind == CA_SERVER) {
    char t[SBX_TOKEN_HEX + 8];
    int r = ca_server_token(dir, name, true, t, sizeof(t), &e);
    if (r == 0 && (r = sbx_write_file_atomic(tok, t, strlen(t), 0600)) < 0)
      (void)sbx_error_set(&e, SBX_OK, -r, "cannot write \"%s\": %s", tok,
                          strerror(-r));
    explicit_bzero(t, sizeof(t));
    if (r < 0)
      return fail(&e);
  }
  printf("%s certificate %s for \"%s\": %s\n", base, serial, name, crt);
  return 0;
}

int cli_ca(int argc, char **argv) {
  const char *state_dir = NULL, *ca_dir = NULL;
  int i = 1;
  for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
    if (strcmp(argv[i], "--state-dir") == 0)
      state_dir = argv[i + 1];
    else if (strcmp(argv[i], "--ca-dir") == 0)
      ca_dir = argv[i + 1];
    else
      break;
  }
  if (i < argc &&
      (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)) {
    usage_ca(stdout);
    return 0;
  }
  if (i >= argc || argv[i][0] == '-') {
    if (i < argc)
      fprintf(stderr, "sbx ca: unknown or incomplete option \"%s\"\n", argv[i]);
    usage_ca(stderr);
    return 2;
  }
  char dir[PATH_MAX];
  struct sbx_error e = {0};
  if (ca_dir_resolve(ca_dir, state_dir, dir, sizeof(dir), &e) < 0)
    return fail(&e);
  const char *sub = argv[i];
  struct ca_args a;
  int p = parse_sub(argc - i, argv + i, &a);
  if (p != 0)
    return p < 0 ? 2 : 0;
  int rest = argc - i - optind;
  char **args = argv + i + optind;
  bool needs_name = strcmp(sub, "issue-server") == 0 ||
                    strcmp(sub, "issue-client") == 0 ||
                    strcmp(sub, "revoke") == 0;
  if (rest != (needs_name ? 1 : 0)) {
    fprintf(stderr, "sbx ca %s: expected %s\n", sub,
            needs_name ? "one NAME" : "no arguments");
    return 2;
  }
  if (strcmp(sub, "init") == 0) {
    bool made = false;
    if (ca_init(dir, &made, &e) < 0)
      return fail(&e);
    printf("%s the CA in %s\n", made ? "made" : "kept", dir);
    return 0;
  }
  if (strcmp(sub, "show") == 0)
    return show(dir, a.json);
  if (strcmp(sub, "issue-server") == 0) {
    if (!a.out) {
      fprintf(stderr, "sbx ca issue-server: --out DIR is required\n");
      return 2;
    }
    return issue(dir, CA_SERVER, args[0], &a);
  }
  if (strcmp(sub, "issue-client") == 0)
    return issue(dir, CA_CLIENT, args[0], &a);
  if (strcmp(sub, "revoke") == 0) {
    size_t n = 0;
    if (ca_revoke(dir, args[0], &n, &e) < 0)
      return fail(&e);
    printf("revoked %zu certificate%s; copy %s/ca.pem to every sandboxd "
           "host's --tls-ca and reload sandboxd (SIGHUP)\n",
           n, n == 1 ? "" : "s", dir);
    return 0;
  }
  if (strcmp(sub, "crl") == 0) {
    if (!a.out) {
      fprintf(stderr, "sbx ca crl: --out FILE is required\n");
      return 2;
    }
    return ca_write_bundle(dir, a.out, &e) < 0 ? fail(&e) : 0;
  }
  fprintf(stderr, "sbx ca: unknown subcommand \"%s\" (see sbx ca --help)\n",
          sub);
  return 2;
}
