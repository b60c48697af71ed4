/* sbx --server URL (or SBX_SERVER, with the token in SBX_TOKEN): the
 * commands as clients of sbx serve (docs/api.md). `sbx run` submits the
 * agent file's JSON and follows the run's events to its answer, coming
 * back with Last-Event-ID when the connection drops; `sbx approve` and
 * `sbx reject` decide on a call of a run waiting for approval; `sbx runs
 * ls|show|cancel|logs` read and stop runs. Exit codes are sbx run's: 0
 * answered, 1 failed, 2 bad usage, 3 waiting for approval. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "controller/cli/remote_internal.h"
#include "controller/net/http.h"
#include "controller/net/sse.h"
#include "shared/buf.h"
#include "shared/cleanup.h"

#define RECONNECTS 20

/* A JSON request to the server: 0 with the status and body (*OUT new, may
 * be NULL for a body that is not JSON), or -1 after saying why. */
int remote_call(struct remote *rm, const char *method, const char *path,
                json_t *body, long *status, json_t **out) {
  char url[URL_MAX];
  (void)snprintf(url, sizeof(url), "%s%s", rm->server, path);
  _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  const char *headers[] = {rm->auth[0] ? rm->auth : "Accept: */*",
                           "Content-Type: application/json", NULL};
  struct http_request req = {
      .url = url,
      .method = method,
      .body = text ? text : "",
      .body_len = text ? strlen(text) : 0,
      .headers = headers,
      .timeout_ms = 120000,
      .connect_timeout_ms = 10000,
  };
  return remote_send(rm, &req, "sbx", status, out);
}

int remote_send(struct remote *rm, const struct http_request *req,
                const char *prog, long *status, json_t **out) {
  struct http_response resp;
  struct sbx_error e = {0};
  if (http_send(rm->http, req, &resp, &e) < 0) {
    fprintf(stderr, "%s: %s\n", prog, e.msg);
    return -1;
  }
  *status = resp.status;
  json_error_t je;
  *out = json_loadb(resp.body, resp.body_len, 0, &je);
  http_response_clear(&resp);
  return 0;
}

/* The server's message for a failed call, or a stand-in. */
const char *remote_message(json_t *body, long status) {
  const char *m = json_string_value(
      json_object_get(json_object_get(body, "error"), "message"));
  static char buf[64];
  if (m)
    return m;
  (void)snprintf(buf, sizeof(buf), "the server answered %ld", status);
  return buf;
}

/* Reports a status other than WANT: true when it was WANT. */
bool remote_expect(json_t *body, long status, long want, const char *what) {
  if (status == want)
    return true;
  fprintf(stderr, "sbx %s: %s\n", what, remote_message(body, status));
  return false;
}

/* ---- following a run's events ------------------------------------------ */

struct follow {
  bool print;         /* each event's JSON on stdout (--stream, logs) */
  bool stop_at_pause; /* sbx run: a pause ends what the client waits for */
  long last;          /* the last seq seen */
  char *type;         /* the last event's type (new) */
  json_t *last_data;  /* and its data (new) */
  int fail;
};

static int on_event(const struct sse_event *ev, void *arg) {
  struct follow *f = arg;
  if (ev->id_len)
    f->last = strtol(ev->id, NULL, 10);
  json_error_t je;
  json_t *d = json_loadb(ev->data, ev->data_len, 0, &je);
  if (!d)
    return 0;
  if (f->print) {
    fwrite(ev->data, 1, ev->data_len, stdout);
    fputc('\n', stdout);
    (void)fflush(stdout);
  }
  free(f->type);
  f->type = strndup(ev->type, ev->type_len);
  json_decref(f->last_data);
  f->last_data = d;
  /* A paused run's stream stays open: sbx run stops here. */
  return f->stop_at_pause && strcmp(f->type ? f->type : "", "run_paused") == 0
             ? -ECANCELED
             : 0;
}

static int on_bytes(void *arg, const char *data, size_t len) {
  return sse_feed(arg, data, len, NULL);
}

static bool final_type(const struct follow *f) {
  const char *t = f->type;
  return t && (strcmp(t, "run_finished") == 0 || strcmp(t, "run_failed") == 0 ||
               strcmp(t, "run_cancelled") == 0 ||
               (f->stop_at_pause && strcmp(t, "run_paused") == 0));
}

/* Reads the events of run ID after F->last until a last event (or, when
 * !FOLLOW, the last recorded), reconnecting when the connection drops. 0,
 * or -1 after saying why. */
static int follow_events(struct remote *rm, const char *id, bool follow,
                         struct follow *f) {
  for (int attempt = 0; attempt <= RECONNECTS; attempt++) {
    char url[URL_MAX], last[64];
    (void)snprintf(url, sizeof(url), "%s/v1/runs/%s/events%s", rm->server, id,
                   follow ? "" : "?follow=false");
    (void)snprintf(last, sizeof(last), "Last-Event-ID: %ld", f->last);
    const char *headers[] = {rm->auth[0] ? rm->auth : "Accept: */*", last,
                             NULL};
    struct sse_parser *p = NULL;
    if (sse_parser_new(0, on_event, f, &p) < 0)
      return -1;
    struct http_request req = {.url = url,
                               .method = "GET",
                               .headers = headers,
                               .connect_timeout_ms = 10000,
                               .idle_timeout_ms = 60000,
                               .on_data = on_bytes,
                               .data_arg = p};
    struct http_response resp;
    struct sbx_error e = {0};
    int r = http_send(rm->http, &req, &resp, &e);
    sse_parser_free(p);
    if (r == 0 && !resp.streamed) {
      json_error_t je;
      _cleanup_json_ json_t *b = json_loadb(resp.body, resp.body_len, 0, &je);
      fprintf(stderr, "sbx: %s\n", remote_message(b, resp.status));
      http_response_clear(&resp);
      return -1;
    }
    if (r == 0)
      http_response_clear(&resp);
    if (final_type(f) || (r == 0 && !follow))
      return 0;
    if (r < 0 && r != -ECANCELED && attempt == RECONNECTS) {
      fprintf(stderr, "sbx: the event stream of %s: %s\n", id, e.msg);
      return -1;
    }
    usleep(200000u * (unsigned)(attempt < 5 ? attempt + 1 : 5));
  }
  return 0;
}

/* What a followed run came to: the exit code after printing it. */
static int outcome(struct remote *rm, const char *id, struct follow *f,
                   bool streamed) {
  const char *t = f->type ? f->type : "";
  json_t *d = f->last_data;
  if (strcmp(t, "run_finished") == 0) {
    const char *out = json_string_value(json_object_get(d, "final_output"));
    if (!streamed && out) {
      fputs(out, stdout);
      if (*out && out[strlen(out) - 1] != '\n')
        fputc('\n', stdout);
    }
    return fflush(stdout) == 0 ? 0 : 1;
  }
  if (strcmp(t, "run_paused") == 0) {
    fprintf(stderr,
            "sbx: the run is waiting for approval: %s\n"
            "sbx: decide with `sbx --server %s approve %s CALL_ID` or "
            "`sbx --server %s reject %s CALL_ID --reason TEXT`\n"
            "sbx: (`sbx --server %s runs show %s` lists the calls)\n",
            id, rm->server, id, rm->server, id, rm->server, id);
    return 3;
  }
  if (strcmp(t, "run_cancelled") == 0) {
    fprintf(stderr, "sbx: run %s was cancelled\n", id);
    return 1;
  }
  const char *err = json_string_value(json_object_get(d, "error"));
  fprintf(stderr, "sbx: %s\n", err ? err : "the run failed");
  json_t *code = json_object_get(d, "exit_code");
  return json_is_integer(code) ? (int)json_integer_value(code) : 1;
}

static void follow_clear(struct follow *f) {
  free(f->type);
  json_decref(f->last_data);
}

/* ---- the commands -------------------------------------------------------- */

int remote_usage(const char *text) {
  fprintf(stderr, "usage: %s\n", text);
  return 2;
}

/* sbx --server URL run AGENT.json PROMPT [--max-turns N] [--stream]
 * [--detach]. */
static int remote_run(struct remote *rm, int argc, char **argv) {
  static const struct option opts[] = {
      {"max-turns", required_argument, NULL, 't'},
      {"stream", no_argument, NULL, 's'},
      {"detach", no_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  const char *max_turns = NULL;
  bool stream = false, detach = false;
  optind = 1;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
    if (ch == 't')
      max_turns = optarg;
    else if (ch == 's')
      stream = true;
    else if (ch == 'd')
      detach = true;
    else if (ch == 'h')
      return printf("usage: sbx --server URL run AGENT.json PROMPT "
                    "[--max-turns N] [--stream] [--detach]\n\nSubmits the "
                    "run to the server and follows it to its answer "
                    "(--detach: prints its id and returns).\n") < 0;
    else {
      fprintf(stderr,
              "sbx run: \"%s\" is not supported with --server (it "
              "takes --max-turns, --stream and --detach; the "
              "server's configuration decides the rest)\n",
              argv[optind - 1]);
      return 2;
    }
  }
  if (argc - optind != 2)
    return remote_usage(
        "sbx --server URL run AGENT.json PROMPT [--max-turns N] "
        "[--stream] [--detach]");
  struct sbx_error e = {0};
  _cleanup_json_ json_t *agent = NULL;
  if (cli_load_json_file(argv[optind], &agent, &e) < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg);
    return 2;
  }
  _cleanup_json_ json_t *body =
      json_pack("{s:O, s:s}", "agent", agent, "input", argv[optind + 1]);
  if (max_turns) {
    char *end = NULL;
    long long n = strtoll(max_turns, &end, 10);
    if (!*max_turns || *end || n < 1 || n > 1000)
      return remote_usage("--max-turns takes a whole number from 1 to 1000");
    (void)json_object_set_new(body, "max_turns", json_integer(n));
  }
  long status = 0;
  _cleanup_json_ json_t *run = NULL;
  if (remote_call(rm, "POST", "/v1/runs", body, &status, &run) < 0)
    return 1;
  if (!remote_expect(run, status, 201, "run"))
    return status == 422 || status == 400 ? 2 : 1;
  const char *id = json_string_value(json_object_get(run, "id"));
  if (detach)
    return printf("%s\n", id) < 0 || fflush(stdout) != 0;
  struct follow f = {.print = stream, .stop_at_pause = true};
  int k = follow_events(rm, id, true, &f);
  k = k < 0 ? 1 : outcome(rm, id, &f, stream);
  follow_clear(&f);
  return k;
}

/* sbx --server URL approve RUN_ID CALL_ID / reject ... [--reason TEXT]. */
static int remote_decide(struct remote *rm, int argc, char **argv) {
  bool reject = strcmp(argv[0], "reject") == 0;
  const char *reason = NULL, *pos[2];
  int n = 0;
  for (int i = 1; i < argc; i++) {
    if (reject && strcmp(argv[i], "--reason") == 0 && i + 1 < argc)
      reason = argv[++i];
    else if (argv[i][0] == '-' || n == 2)
      return remote_usage(reject ? "sbx --server URL reject RUN_ID CALL_ID "
                                   "[--reason TEXT]"
                                 : "sbx --server URL approve RUN_ID CALL_ID");
    else
      pos[n++] = argv[i];
  }
  if (n != 2)
    return remote_usage(reject ? "sbx --server URL reject RUN_ID CALL_ID "
                                 "[--reason TEXT]"
                               : "sbx --server URL approve RUN_ID CALL_ID");
  char path[1024];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s/approvals/%s", pos[0],
                 pos[1]);
  _cleanup_json_ json_t *body =
      json_pack("{s:s, s:s?}", "decision", reject ? "reject" : "approve",
                "reason", reason);
  long status = 0;
  _cleanup_json_ json_t *out = NULL;
  if (remote_call(rm, "POST", path, body, &status, &out) < 0)
    return 1;
  if (!remote_expect(out, status, 200, argv[0]))
    return 1;
  printf("%s %s\n", reject ? "rejected" : "approved", pos[1]);
  return fflush(stdout) != 0;
}

/* sbx --server URL runs ls [--status S] [--json]. */
static int runs_ls(struct remote *rm, int argc, char **argv) {
  const char *st = NULL;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--status") == 0 && i + 1 < argc)
      st = argv[++i];
    else if (strcmp(argv[i], "--json") == 0)
      json = true;
    else
      return remote_usage(
          "sbx --server URL runs ls [--status STATUS] [--json]");
  }
  _cleanup_json_ json_t *all = json_array();
  char cursor[32] = "";
  do {
    char path[256];
    (void)snprintf(path, sizeof(path), "/v1/runs?limit=1000%s%s%s%s",
                   st ? "&status=" : "", st ? st : "",
                   cursor[0] ? "&cursor=" : "", cursor);
    long status = 0;
    _cleanup_json_ json_t *page = NULL;
    if (remote_call(rm, "GET", path, NULL, &status, &page) < 0)
      return 1;
    if (!remote_expect(page, status, 200, "runs ls"))
      return status == 400 ? 2 : 1;
    (void)json_array_extend(all, json_object_get(page, "data"));
    const char *next = json_string_value(json_object_get(page, "next_cursor"));
    (void)snprintf(cursor, sizeof(cursor), "%s", next ? next : "");
  } while (cursor[0]);
  if (json) {
    (void)json_dumpf(all, stdout, JSON_INDENT(2));
    printf("\n");
  } else {
    cli_print_runs(all);
  }
  return fflush(stdout) != 0;
}

/* sbx --server URL runs show|cancel|logs RUN_ID [--follow]. */
static int runs_one(struct remote *rm, int argc, char **argv) {
  const char *sub = argv[0];
  bool logs = strcmp(sub, "logs") == 0, follow = false;
  const char *id = NULL;
  for (int i = 1; i < argc; i++) {
    if (logs && strcmp(argv[i], "--follow") == 0)
      follow = true;
    else if (argv[i][0] != '-' && !id)
      id = argv[i];
    else
      id = NULL, i = argc;
  }
  if (!id)
    return remote_usage(logs ? "sbx --server URL runs logs RUN_ID [--follow]"
                             : "sbx --server URL runs show|cancel RUN_ID");
  if (logs) {
    struct follow f = {.print = true};
    int k = follow_events(rm, id, follow, &f);
    follow_clear(&f);
    return k < 0 ? 1 : fflush(stdout) != 0;
  }
  bool cancel = strcmp(sub, "cancel") == 0;
  char path[512];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s%s", id,
                 cancel ? "/cancel" : "");
  long status = 0;
  _cleanup_json_ json_t *out = NULL;
  if (remote_call(rm, cancel ? "POST" : "GET", path, NULL, &status, &out) < 0)
    return 1;
  if (!remote_expect(out, status, cancel ? 202 : 200, sub))
    return 1;
  if (cancel)
    printf("%s\n", id);
  else {
    (void)json_dumpf(out, stdout, JSON_INDENT(2));
    printf("\n");
  }
  return fflush(stdout) != 0;
}

static int remote_runs(struct remote *rm, int argc, char **argv) {
  const char *sub = argc > 1 ? argv[1] : "";
  if (strcmp(sub, "ls") == 0)
    return runs_ls(rm, argc - 1, argv + 1);
  if (strcmp(sub, "show") == 0 || strcmp(sub, "cancel") == 0 ||
      strcmp(sub, "logs") == 0)
    return runs_one(rm, argc - 1, argv + 1);
  if (strcmp(sub, "--help") == 0) {
    printf("usage: sbx --server URL runs ls [--status STATUS] [--json]\n"
           "       sbx --server URL runs show RUN_ID\n"
           "       sbx --server URL runs cancel RUN_ID\n"
           "       sbx --server URL runs logs RUN_ID [--follow]\n");
    return 0;
  }
  return remote_usage("sbx --server URL runs ls|show|cancel|logs ... (see sbx "
                      "--server URL runs --help)");
}

int cli_remote(const char *server, int argc, char **argv) {
  struct remote rm = {.server = server};
  size_t n = strlen(server);
  if (strncmp(server, "http://", 7) != 0 &&
      strncmp(server, "https://", 8) != 0) {
    fprintf(stderr,
            "sbx: --server takes an http:// or https:// URL, not "
            "\"%s\"\n",
            server);
    return 2;
  }
  char base[URL_MAX];
  (void)snprintf(base, sizeof(base), "%.*s",
                 (int)(n && server[n - 1] == '/' ? n - 1 : n), server);
  rm.server = base;
  const char *token = getenv("SBX_TOKEN");
  if (token && *token)
    (void)snprintf(rm.auth, sizeof(rm.auth), "Authorization: Bearer %s", token);
  struct sbx_error e = {0};
  if (http_client_new(&rm.http, &e) < 0) {
    fprintf(stderr, "sbx: %s\n", e.msg);
    return 1;
  }
  static const struct {
    const char *name;
    int (*fn)(struct remote *rm, int argc, char **argv);
  } commands[] = {
      {"run", remote_run},         {"approve", remote_decide},
      {"reject", remote_decide},   {"runs", remote_runs},
      {"sandbox", remote_sandbox},
  };
  int k = -1;
  for (size_t i = 0; k < 0 && i < SBX_ARRAY_SIZE(commands); i++)
    if (strcmp(argv[0], commands[i].name) == 0)
      k = commands[i].fn(&rm, argc, argv);
  if (k < 0) {
    fprintf(stderr,
            "sbx: \"%s\" is not supported with --server (it takes "
            "run, approve, reject and runs)\n",
            argv[0]);
    k = 2;
  }
  explicit_bzero(rm.auth, sizeof(rm.auth));
  http_client_free(rm.http);
  return k;
}
