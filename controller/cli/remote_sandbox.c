/* sbx --server URL sandbox create|ls|info|rm|exec: the server's sandboxes
 * (docs/api.md, "Sandboxes"). exec starts the command and copies its
 * output to this process's stdout and stderr by offset as it comes, then
 * exits with its exit code (128 + the signal that killed it); shell and cp
 * are in remote_session.c. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"
#include "controller/cli/cli_internal.h"
#include "controller/cli/remote_internal.h"
#include "controller/net/http.h"
#include "shared/cleanup.h"

#define ENV_MAX 256

/* -o KEY=VALUE given to create, as the request's "options" of backend B
 * (the server's default when NULL): each VALUE read by the option's type
 * as sbx sandbox create reads it; the server checks them all, and refuses
 * what its request may not set. -EINVAL after saying why. */
static int request_options(const char *backend, const char *const *texts,
                           size_t n, json_t *body) {
  const struct backend *b = backend_find(backend);
  if (!n || !b)
    return 0; /* an unknown backend is the server's to name */
  json_t *opts = json_object();
  if (!opts || json_object_set_new(body, "options", opts) < 0)
    return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    char key[128];
    size_t k = strcspn(texts[i], "=");
    if (k == 0 || k >= sizeof(key)) {
      fprintf(stderr, "sbx sandbox create: -o \"%s\": expected KEY=VALUE\n",
              texts[i]);
      return -EINVAL;
    }
    (void)snprintf(key, sizeof(key), "%.*s", (int)k, texts[i]);
    const char *value = texts[i][k] ? texts[i] + k + 1 : NULL;
    const struct backend_option *o = backend_option_find(b, key);
    json_t *v = NULL;
    struct sbx_error e = {0};
    if (o && backend_option_text_value(o, value, &v, &e) < 0) {
      fprintf(stderr, "sbx sandbox create: %s\n", e.msg);
      return -EINVAL;
    }
    if (!o)
      v = json_string(value ? value : "");
    if (!v || json_object_set_new(opts, key, v) < 0)
      return -ENOMEM;
  }
  return 0;
}

static int sb_create(struct remote *rm, int argc, char **argv) {
  const char *manifest = NULL, *backend = NULL;
  const char *texts[64];
  size_t ntexts = 0;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--manifest") == 0 && i + 1 < argc)
      manifest = argv[++i];
    else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
      backend = argv[++i];
    else if ((strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--option") == 0) &&
             i + 1 < argc && ntexts < SBX_ARRAY_SIZE(texts))
      texts[ntexts++] = argv[++i];
    else if (strcmp(argv[i], "--json") == 0)
      json = true;
    else
      return remote_usage("sbx --server URL sandbox create [--manifest FILE] "
                          "[--backend NAME] [-o KEY=VALUE]... [--json] (the "
                          "server decides the rest)");
  }
  _cleanup_json_ json_t *body = json_object();
  struct sbx_error e = {0};
  json_t *m = NULL;
  if (manifest && cli_load_json_file(manifest, &m, &e) < 0) {
    fprintf(stderr, "sbx sandbox create: %s\n", e.msg);
    return 2;
  }
  if (m)
    (void)json_object_set_new(body, "manifest", m);
  if (backend)
    (void)json_object_set_new(body, "backend", json_string(backend));
  int r = request_options(backend, texts, ntexts, body);
  if (r < 0)
    return r == -EINVAL ? 2 : 1;
  long status = 0;
  _cleanup_json_ json_t *out = NULL;
  if (remote_call(rm, "POST", "/v1/sandboxes", body, &status, &out) < 0)
    return 1;
  if (!remote_expect(out, status, 201, "sandbox create"))
    return status == 422 || status == 400 || status == 403 ? 2 : 1;
  if (json)
    (void)json_dumpf(out, stdout, JSON_INDENT(2));
  else
    fputs(json_string_value(json_object_get(out, "id")), stdout);
  printf("\n");
  return fflush(stdout) != 0;
}

static int sb_ls(struct remote *rm, int argc, char **argv) {
  bool json = argc == 2 && strcmp(argv[1], "--json") == 0;
  if (argc > 2 || (argc == 2 && !json))
    return remote_usage("sbx --server URL sandbox ls [--json]");
  long status = 0;
  _cleanup_json_ json_t *out = NULL;
  if (remote_call(rm, "GET", "/v1/sandboxes", NULL, &status, &out) < 0)
    return 1;
  if (!remote_expect(out, status, 200, "sandbox ls"))
    return 1;
  json_t *data = json_object_get(out, "data");
  if (json) {
    (void)json_dumpf(data, stdout, JSON_INDENT(2));
    printf("\n");
    return fflush(stdout) != 0;
  }
  printf("%-14s %-8s %-16s %s\n", "ID", "BACKEND", "OWNER", "CREATED");
  size_t i;
  json_t *s;
  json_array_foreach(data, i, s) {
    printf("%-14s %-8s %-16s %s\n", json_string_value(json_object_get(s, "id")),
           json_string_value(json_object_get(s, "backend")),
           json_string_value(json_object_get(s, "owner")),
           json_string_value(json_object_get(s, "created_at")));
  }
  return fflush(stdout) != 0;
}

/* info ID, or rm ID...: one request per sandbox. */
static int sb_each(struct remote *rm, int argc, char **argv) {
  bool rm_ = strcmp(argv[0], "rm") == 0;
  if (argc < 2 || (!rm_ && argc != 2))
    return remote_usage(rm_ ? "sbx --server URL sandbox rm ID..."
                            : "sbx --server URL sandbox info ID");
  int code = 0;
  for (int i = 1; i < argc; i++) {
    char path[512];
    (void)snprintf(path, sizeof(path), "/v1/sandboxes/%s", argv[i]);
    long status = 0;
    _cleanup_json_ json_t *out = NULL;
    if (remote_call(rm, rm_ ? "DELETE" : "GET", path, NULL, &status, &out) < 0)
      return 1;
    if (!remote_expect(out, status, rm_ ? 204 : 200,
                       rm_ ? "sandbox rm" : "sandbox info")) {
      code = 1;
      continue;
    }
    if (rm_) {
      printf("%s\n", argv[i]);
    } else {
      (void)json_dumpf(out, stdout, JSON_INDENT(2));
      printf("\n");
    }
  }
  return code ? code : fflush(stdout) != 0;
}

/* Reads STREAM of exec X from *OFF, waiting up to WAIT_MS, and copies it to
 * TO. *EOF and *CODE (-1 while none) say how far it is. 0 or -1 after
 * saying why. */
static int copy_output(struct remote *rm, const char *sid, const char *x,
                       const char *stream, uint64_t *off, unsigned wait_ms,
                       FILE *to, bool *eof, int *code) {
  char url[URL_MAX];
  (void)snprintf(url, sizeof(url),
                 "%s/v1/sandboxes/%s/execs/%s/output?stream=%s&offset=%" PRIu64
                 "&wait_ms=%u",
                 rm->server, sid, x, stream, *off, wait_ms);
  const char *headers[] = {rm->auth[0] ? rm->auth : "Accept: */*", NULL};
  struct http_request req = {.url = url,
                             .method = "GET",
                             .headers = headers,
                             .timeout_ms = wait_ms + 60000,
                             .connect_timeout_ms = 10000,
                             .capture_prefix = "sbx-"};
  struct http_response resp;
  struct sbx_error e = {0};
  if (http_send(rm->http, &req, &resp, &e) < 0) {
    fprintf(stderr, "sbx sandbox exec: %s\n", e.msg);
    return -1;
  }
  int r = 0;
  if (resp.status != 200) {
    json_error_t je;
    _cleanup_json_ json_t *b = json_loadb(resp.body, resp.body_len, 0, &je);
    fprintf(stderr, "sbx sandbox exec: %s\n", remote_message(b, resp.status));
    r = -1;
  } else {
    json_t *h = resp.headers;
    const char *next = json_string_value(json_object_get(h, "sbx-next-offset"));
    const char *ec = json_string_value(json_object_get(h, "sbx-exit-code"));
    const char *sig = json_string_value(json_object_get(h, "sbx-signal"));
    const char *ef = json_string_value(json_object_get(h, "sbx-eof"));
    if (fwrite(resp.body, 1, resp.body_len, to) != resp.body_len ||
        fflush(to) != 0)
      r = -1;
    *off = next ? strtoull(next, NULL, 10) : *off + resp.body_len;
    *eof = ef && strcmp(ef, "true") == 0;
    if (ec)
      *code = (int)strtol(ec, NULL, 10);
    else if (sig)
      *code = 128 + (int)strtol(sig, NULL, 10);
  }
  http_response_clear(&resp);
  return r;
}

/* The exec request of the options before ID and the command after "--";
 * *FEED for -i. */
static int exec_body(int argc, char **argv, json_t *body, int *id_at,
                     bool *feed) {
  json_t *env = json_object();
  (void)json_object_set_new(body, "env", env);
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "-i") || !strcmp(argv[i], "--interactive")) {
      *feed = true;
    } else if ((!strcmp(argv[i], "-w") || !strcmp(argv[i], "--workdir")) &&
               i + 1 < argc) {
      (void)json_object_set_new(body, "cwd", json_string(argv[++i]));
    } else if ((!strcmp(argv[i], "-e") || !strcmp(argv[i], "--env")) &&
               i + 1 < argc && strchr(argv[i + 1], '=') &&
               json_object_size(env) < ENV_MAX) {
      const char *kv = argv[++i];
      const char *eq = strchr(kv, '=');
      char name[256];
      (void)snprintf(name, sizeof(name), "%.*s", (int)(eq - kv), kv);
      (void)json_object_set_new(env, name, json_string(eq + 1));
    } else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) {
      char *end = NULL;
      long long t = strtoll(argv[++i], &end, 10);
      if (*end || t < 1 || t > 86400)
        return -1;
      (void)json_object_set_new(body, "timeout_s", json_integer(t));
    } else {
      return -1;
    }
  }
  if (i + 2 >= argc || strcmp(argv[i + 1], "--") != 0)
    return -1;
  *id_at = i;
  json_t *cmd = json_array();
  for (int k = i + 2; k < argc; k++)
    (void)json_array_append_new(cmd, json_string(argv[k]));
  (void)json_object_set_new(body, "cmd", cmd);
  (void)json_object_set_new(body, "stdin", json_boolean(*feed));
  (void)json_object_set_new(body, "hold_s", json_integer(CLI_EXEC_HOLD_S));
  return 0;
}

int remote_copy_all(struct remote *rm, const char *sid, const char *x) {
  uint64_t off[2] = {0, 0};
  bool eof[2] = {false, false};
  int code = -1;
  /* Stdout waits for output; stderr is taken as it is between. */
  while (!(eof[0] && eof[1] && code >= 0)) {
    if (copy_output(rm, sid, x, "stdout", &off[0], eof[0] ? 0 : 2000, stdout,
                    &eof[0], &code) < 0 ||
        copy_output(rm, sid, x, "stderr", &off[1], eof[0] ? 2000 : 0, stderr,
                    &eof[1], &code) < 0)
      return 1;
  }
  return code;
}

static int sb_exec(struct remote *rm, int argc, char **argv) {
  _cleanup_json_ json_t *body = json_object();
  int at = 0;
  bool feed = false;
  if (exec_body(argc, argv, body, &at, &feed) < 0)
    return remote_usage("sbx --server URL sandbox exec [-i] [-w DIR] [-e "
                        "NAME=VALUE]... [--timeout S] ID -- CMD [ARG...]");
  return remote_attached(rm, argv[at], body, feed, false);
}

int remote_sandbox(struct remote *rm, int argc, char **argv) {
  static const struct {
    const char *name;
    int (*fn)(struct remote *rm, int argc, char **argv);
  } subs[] = {
      {"create", sb_create}, {"ls", sb_ls},
      {"info", sb_each},     {"rm", sb_each},
      {"exec", sb_exec},     {"shell", remote_shell},
      {"cp", remote_cp},     {"apply-patch", remote_apply_patch},
  };
  const char *sub = argc > 1 ? argv[1] : "";
  for (size_t i = 0; i < SBX_ARRAY_SIZE(subs); i++)
    if (strcmp(sub, subs[i].name) == 0)
      return subs[i].fn(rm, argc - 1, argv + 1);
  if (strcmp(sub, "--help") == 0) {
    printf("usage: sbx --server URL sandbox create [--manifest FILE] "
           "[--backend NAME] [-o KEY=VALUE]... [--json]\n"
           "       sbx --server URL sandbox ls [--json]\n"
           "       sbx --server URL sandbox info ID\n"
           "       sbx --server URL sandbox rm ID...\n"
           "       sbx --server URL sandbox exec [-i] [-w DIR] [-e "
           "NAME=VALUE]... [--timeout S] ID -- CMD [ARG...]\n"
           "       sbx --server URL sandbox shell [-w DIR] ID\n"
           "       sbx --server URL sandbox cp SRC DST    (one of them "
           "ID:PATH; one regular file)\n"
           "       sbx --server URL sandbox apply-patch [--json] ID < PATCH\n"
           "\n"
           "create's -o sets a backend option as sbx sandbox create's does; "
           "the server\n"
           "refuses those a request may not set (the host's files, engine "
           "and processes).\n"
           "exec -i copies this stdin to the command's until its end; shell "
           "is a login\n"
           "shell on a terminal (raw mode; its size is the sandbox's "
           "default) or reads\n"
           "its commands from stdin until its end.\n");
    return 0;
  }
  fprintf(stderr,
          "sbx sandbox: \"%s\" is not supported with --server (it "
          "takes create, ls, info, rm, exec, shell, cp and apply-patch: the "
          "server's API has no other)\n",
          sub);
  return 2;
}
