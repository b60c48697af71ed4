/* What is done inside an API sandbox: processes started, their state, their
 * output read by byte offset as sandboxd keeps it (a client that comes
 * back asks from the offset it had), their stdin written; files put, got
 * and removed; patches applied, all files or none. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sandbox/lifecycle.h"
#include "controller/server/server_internal.h"
#include "shared/cleanup.h"
#include "shared/client.h"
#include "shared/rand.h"

#define ENV_MAX 256
#define WAIT_MAX_MS 30000
#define CHUNK ((size_t)4 << 20)
#define TIMEOUT_MAX_S 86400
#define HOLD_MAX_S 3600 /* an exec's output held for its reader */

/* An exec id of the path (its second parameter): 0, or a reply sent. */
static int exec_id(struct api *a, uint64_t *id) {
  const char *s = a->param[1];
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v == 0)
    return api_error(a, 404, "not_found", "no exec \"%s\"", s);
  *id = v;
  return 0;
}

/* ExecStart's argv or command, cwd, env, tty and timeout from BODY (whose
 * strings it borrows; ENV holds the variables). 0, or a reply sent. */
static int exec_request(struct api *a, json_t *body, Sbx__V1__ExecStart *x,
                        Sbx__V1__EnvVar *env, Sbx__V1__EnvVar **envp,
                        char **argv) {
  static const char *const keys[] = {"cmd",   "command", "cwd",
                                     "env",   "tty",     "timeout_s",
                                     "stdin", "hold_s",  NULL};
  if (api_known_members(a, body, "an exec", keys) < 0)
    return -1;
  json_t *cmd = json_object_get(body, "cmd");
  const char *command = json_string_value(json_object_get(body, "command"));
  if (!cmd == !command ||
      (cmd && (!json_is_array(cmd) || json_array_size(cmd) == 0 ||
               json_array_size(cmd) > ENV_MAX)))
    return api_error(a, 400, "invalid_request",
                     "give either \"cmd\" (a non-empty array of strings) "
                     "or \"command\" (a shell command line)");
  for (size_t i = 0; cmd && i < json_array_size(cmd); i++) {
    argv[i] = (char *)json_string_value(json_array_get(cmd, i));
    if (!argv[i])
      return api_error(a, 400, "invalid_request",
                       "\"cmd\" must hold strings only");
  }
  x->n_argv = cmd ? json_array_size(cmd) : 0;
  x->argv = x->n_argv ? argv : NULL;
  x->command = (char *)(command ? command : "");
  json_t *cwd = json_object_get(body, "cwd");
  json_t *envj = json_object_get(body, "env");
  json_t *tty = json_object_get(body, "tty");
  json_t *to = json_object_get(body, "timeout_s");
  json_t *in = json_object_get(body, "stdin");
  if ((cwd && !json_is_string(cwd)) || (tty && !json_is_boolean(tty)) ||
      (in && !json_is_boolean(in)) ||
      (envj && (!json_is_object(envj) || json_object_size(envj) > ENV_MAX)))
    return api_error(a, 400, "invalid_request",
                     "\"cwd\" is a string, \"tty\" and \"stdin\" booleans, "
                     "\"env\" an object of at most %d strings",
                     ENV_MAX);
  if (to && (!json_is_integer(to) || json_integer_value(to) < 1 ||
             json_integer_value(to) > TIMEOUT_MAX_S))
    return api_error(a, 400, "invalid_request",
                     "\"timeout_s\" is a whole number from 1 to %d",
                     TIMEOUT_MAX_S);
  json_t *hold = json_object_get(body, "hold_s");
  if (hold && (!json_is_integer(hold) || json_integer_value(hold) < 0 ||
               json_integer_value(hold) > HOLD_MAX_S))
    return api_error(a, 400, "invalid_request",
                     "\"hold_s\" is a whole number from 0 to %d", HOLD_MAX_S);
  x->hold_ms = hold ? (uint32_t)json_integer_value(hold) * 1000u : 0;
  size_t n = 0;
  const char *k;
  json_t *v;
  json_object_foreach(envj, k, v) {
    if (!json_is_string(v))
      return api_error(a, 400, "invalid_request",
                       "\"env\": \"%s\" must be a string", k);
    sbx__v1__env_var__init(&env[n]);
    env[n].name = (char *)k;
    env[n].value = (char *)json_string_value(v);
    envp[n] = &env[n];
    n++;
  }
  x->n_env = n;
  x->env = n ? envp : NULL;
  x->cwd = (char *)(cwd ? json_string_value(cwd) : "");
  x->tty = json_is_true(tty);
  x->no_stdin = in && !json_is_true(in);
  x->timeout_ms = to ? (uint32_t)json_integer_value(to) * 1000u : 0;
  return 0;
}

void api_execs_start(struct api *a) {
  _cleanup_json_ json_t *body = NULL;
  if (api_body_object(a, &body) < 0)
    return;
  Sbx__V1__ExecStart x;
  sbx__v1__exec_start__init(&x);
  Sbx__V1__EnvVar env[ENV_MAX], *envp[ENV_MAX];
  char *argv[ENV_MAX + 1];
  if (exec_request(a, body, &x, env, envp, argv) < 0)
    return;
  struct sb_use u;
  if (api_sandbox_attach(a, &u) < 0)
    return;
  Sbx__V1__Response *resp = NULL;
  struct sbx_error e = {0};
  int r = sbx_exec_start(u.sb->client, &x, &resp, &e);
  if (r < 0) {
    (void)api_fail(a, &e, r);
  } else {
    char id[32];
    (void)snprintf(id, sizeof(id), "%" PRIu64, resp->exec_start->exec_id);
    (void)api_reply(a, 201,
                    json_pack("{s:s, s:i}", "exec_id", id, "pid",
                              (int)resp->exec_start->pid));
  }
  sbx_client_reply_free(resp);
  attached_put(&u, r);
}

void api_execs_get(struct api *a) {
  uint64_t id = 0;
  struct sb_use u;
  if (exec_id(a, &id) < 0 || api_sandbox_attach(a, &u) < 0)
    return;
  Sbx__V1__Response *resp = NULL;
  struct sbx_error e = {0};
  int r = sbx_exec_list(u.sb->client, &resp, &e);
  Sbx__V1__ExecInfo *x = NULL;
  for (size_t i = 0; r == 0 && i < resp->exec_list->n_execs; i++)
    if (resp->exec_list->execs[i]->exec_id == id)
      x = resp->exec_list->execs[i];
  if (r < 0)
    (void)api_fail(a, &e, r);
  else if (!x)
    (void)api_error(a, 404, "not_found", "no exec \"%s\"", a->param[1]);
  else
    (void)api_reply(
        a, 200,
        json_pack("{s:s, s:i, s:s, s:b, s:o, s:o, s:I, s:I, s:s}", "exec_id",
                  a->param[1], "pid", (int)x->pid, "status",
                  x->running ? "running" : "exited", "tty", x->tty, "exit_code",
                  x->running || x->signal ? json_null()
                                          : json_integer(x->exit_code),
                  "signal", x->signal ? json_integer(x->signal) : json_null(),
                  "stdout_bytes", (json_int_t)x->stdout_bytes, "stderr_bytes",
                  (json_int_t)x->stderr_bytes, "command", x->summary));
  sbx_client_reply_free(resp);
  attached_put(&u, r);
}

/* A whole number query argument NAME in [0, MAX] (DEF when absent): 0,
 * or a reply sent. */
static int query_u64(struct api *a, const char *name, uint64_t max,
                     uint64_t def, uint64_t *out) {
  const char *s = http_req_query(a->r, name);
  if (!s) {
    *out = def;
    return 0;
  }
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || v > max)
    return api_error(a, 400, "invalid_request",
                     "\"%s\" must be a whole number from 0 to %" PRIu64, name,
                     max);
  *out = v;
  return 0;
}

/* Sets the headers of an output reply from X. */
static void output_headers(struct api *a, const Sbx__V1__ExecReadReply *x) {
  char v[32];
  (void)snprintf(v, sizeof(v), "%" PRIu64, x->next_offset);
  (void)http_add_header(a->r, "Sbx-Next-Offset", v);
  (void)snprintf(v, sizeof(v), "%" PRIu64, x->offset);
  (void)http_add_header(a->r, "Sbx-Offset", v);
  (void)snprintf(v, sizeof(v), "%" PRIu64, x->gap);
  (void)http_add_header(a->r, "Sbx-Gap", v);
  (void)http_add_header(a->r, "Sbx-Eof", x->eof ? "true" : "false");
  if (x->exited && !x->signal) {
    (void)snprintf(v, sizeof(v), "%d", x->exit_code);
    (void)http_add_header(a->r, "Sbx-Exit-Code", v);
  }
  if (x->exited && x->signal) {
    (void)snprintf(v, sizeof(v), "%d", x->signal);
    (void)http_add_header(a->r, "Sbx-Signal", v);
  }
}

void api_execs_output(struct api *a) {
  uint64_t id = 0, offset = 0, wait = 0;
  const char *stream = http_req_query(a->r, "stream");
  if (stream && strcmp(stream, "stdout") != 0 && strcmp(stream, "stderr") != 0)
    return (void)api_error(a, 400, "invalid_request",
                           "\"stream\" is stdout or stderr");
  struct sb_use u;
  if (exec_id(a, &id) < 0 ||
      query_u64(a, "offset", UINT64_MAX / 2, 0, &offset) < 0 ||
      query_u64(a, "wait_ms", WAIT_MAX_MS, 0, &wait) < 0 ||
      api_sandbox_attach(a, &u) < 0)
    return;
  Sbx__V1__ExecRead x;
  sbx__v1__exec_read__init(&x);
  x.exec_id = id;
  x.stream = stream && strcmp(stream, "stderr") == 0 ? SBX__V1__STREAM__STDERR
                                                     : SBX__V1__STREAM__STDOUT;
  x.offset = offset;
  x.wait_ms = (uint32_t)wait;
  Sbx__V1__Response *resp = NULL;
  struct sbx_error e = {0};
  int r = sbx_exec_read(u.sb->client, &x, &resp, &e);
  if (r < 0) {
    (void)api_fail(a, &e, r);
  } else {
    output_headers(a, resp->exec_read);
    (void)http_reply(a->r, 200, "application/octet-stream",
                     resp->exec_read->data.data, resp->exec_read->data.len);
  }
  sbx_client_reply_free(resp);
  attached_put(&u, r);
}

void api_execs_stdin(struct api *a) {
  uint64_t id = 0, close_in = 0;
  struct sb_use u;
  if (exec_id(a, &id) < 0 || query_u64(a, "close", 1, 0, &close_in) < 0 ||
      api_sandbox_attach(a, &u) < 0)
    return;
  size_t len = 0;
  const char *data = http_req_body(a->r, &len);
  struct sbx_error e = {0};
  int r = 0;
  /* In chunks a sandboxd message carries; close with the last. */
  size_t off = 0;
  do {
    size_t n = len - off < CHUNK ? len - off : CHUNK;
    r = sbx_exec_write(u.sb->client, id, data + off, n,
                       close_in && off + n == len, &e);
    off += n;
  } while (r == 0 && off < len);
  if (r < 0)
    (void)api_fail(a, &e, r);
  else
    (void)api_reply(a, 200, json_pack("{s:I}", "written", (json_int_t)len));
  attached_put(&u, r);
}
