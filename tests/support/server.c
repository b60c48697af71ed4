#include "tests/support/server.h"

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/buf.h"
#include "tests/support/sbxrun.h"

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

char *test_server_token(struct test_server *s, const char *name,
                        const char *scopes) {
  struct sbx_run_out r;
  const char *argv[] = {"token", "create", name,          "--scopes", scopes,
                        "--db",  s->db,    "--state-dir", s->state,   NULL};
  sbx_run(&r, NULL, argv);
  cr_assert_eq(r.status, 0, "sbx token create: %s", r.err);
  size_t n = strcspn(r.out, "\n");
  char *t = strndup(r.out, n);
  sbx_run_free(&r);
  return t;
}

void test_server_init(struct test_server *s, const char *db,
                      const char *model_url) {
  memset(s, 0, sizeof(*s));
  (void)snprintf(s->dir, sizeof(s->dir), "/tmp/sbx-serve-XXXXXX");
  cr_assert_not_null(mkdtemp(s->dir));
  (void)snprintf(s->state, sizeof(s->state), "%s/state", s->dir);
  (void)snprintf(s->log, sizeof(s->log), "%s/serve.log", s->dir);
  if (db)
    (void)snprintf(s->db, sizeof(s->db), "%s", db);
  else
    (void)snprintf(s->db, sizeof(s->db), "sqlite:%s/sbx.db", s->state);
  (void)snprintf(s->model_url, sizeof(s->model_url), "%s",
                 model_url ? model_url : "");
  char *t = test_server_token(s, "admin", "admin");
  (void)snprintf(s->token, sizeof(s->token), "%s", t);
  free(t);
}

/* The URL in the server's "listening on URL" line, once it is there. */
static bool listening(struct test_server *s) {
  FILE *f = fopen(s->log, "r");
  if (!f)
    return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof(line), f)) {
    const char *p = strstr(line, "listening on ");
    if (p) {
      p += strlen("listening on ");
      (void)snprintf(s->url, sizeof(s->url), "%.*s", (int)strcspn(p, " \n"), p);
      found = true;
    }
  }
  fclose(f);
  return found;
}

void test_server_start(struct test_server *s, const char *const *extra) {
  const char *args[48] = {"--log-level", "info",        "serve",
                          "--listen",    "127.0.0.1:0", "--db",
                          s->db,         "--state-dir", s->state};
  size_t n = 9;
  for (size_t i = 0; extra && extra[i] && n < 47; i++)
    args[n++] = extra[i];
  args[n] = NULL;
  (void)unlink(s->log);
  s->url[0] = '\0';
  s->pid = fork();
  cr_assert_geq(s->pid, 0);
  if (s->pid == 0) {
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = open("/dev/null", O_RDWR);
    int err = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(err, 2);
    const char *argv[50];
    argv[0] = test_sbx_path();
    for (size_t i = 0; i <= n; i++)
      argv[i + 1] = args[i];
    if (s->model_url[0])
      setenv("OPENAI_BASE_URL", s->model_url, 1);
    setenv("OPENAI_API_KEY", "test-key", 1);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  long t0 = now_ms();
  while (!listening(s)) {
    int st;
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
      s->pid = 0;
      char *log = NULL;
      size_t len = 0;
      FILE *f = fopen(s->log, "r");
      if (f) {
        log = calloc(1, 8192);
        len = fread(log, 1, 8191, f);
        fclose(f);
      }
      cr_assert_fail("sbx serve exited (%d): %.*s", st, (int)len,
                     log ? log : "");
    }
    cr_assert_lt(now_ms() - t0, 20000, "sbx serve did not listen");
    usleep(20000);
  }
}

long test_server_kill(struct test_server *s, int sig) {
  if (s->pid <= 0)
    return 0;
  kill(s->pid, sig);
  int st;
  long t0 = now_ms();
  while (waitpid(s->pid, &st, WNOHANG) == 0) {
    if (now_ms() - t0 > 60000) {
      kill(s->pid, SIGKILL);
      (void)waitpid(s->pid, &st, 0);
      cr_expect_fail("sbx serve did not stop on signal %d in 60 s", sig);
      break;
    }
    usleep(10000);
  }
  s->pid = 0;
  return now_ms() - t0;
}

unsigned test_server_port(const struct test_server *s) {
  const char *colon = strrchr(s->url, ':');
  cr_assert_not_null(colon, "no port in \"%s\"", s->url);
  return (unsigned)strtoul(colon + 1, NULL, 10);
}

void test_server_fini(struct test_server *s) {
  test_server_kill(s, SIGTERM);
  if (!s->dir[0])
    return; /* never started */
  sbx_sandbox_remove_all(s->state);
  if (!getenv("SBX_TEST_KEEP"))
    (void)test_rm_rf(s->dir);
}

static size_t on_body(char *p, size_t size, size_t n, void *arg) {
  return sbx_buf_append(arg, p, size * n) < 0 ? 0 : size * n;
}

/* The server's TLS files for the request C. */
static void tls_options(CURL *c, const struct test_server *s) {
  if (s->tls_ca[0])
    curl_easy_setopt(c, CURLOPT_CAINFO, s->tls_ca);
  if (s->tls_cert[0]) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, s->tls_cert);
    curl_easy_setopt(c, CURLOPT_SSLKEY, s->tls_key);
  }
}

/* The request, with LEN bytes of BODY (NULL: none) of type CTYPE: 0 or
 * libcurl's code, OUT->error saying why. */
static int http_send(struct test_http *out, const struct test_server *s,
                     const char *method, const char *path, const char *token,
                     const void *body, size_t len, const char *ctype,
                     const char *const *headers) {
  memset(out, 0, sizeof(*out));
  CURL *c = curl_easy_init();
  cr_assert_not_null(c);
  char url[8192], auth[256], ct[128], err[CURL_ERROR_SIZE] = "";
  (void)snprintf(url, sizeof(url), "%s%s", s->url, path);
  struct curl_slist *hl = NULL;
  if (token) {
    (void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
    hl = curl_slist_append(hl, auth);
  }
  if (body) {
    (void)snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
    hl = curl_slist_append(hl, ct);
  }
  for (size_t i = 0; headers && headers[i]; i++)
    hl = curl_slist_append(hl, headers[i]);
  struct sbx_buf b, h;
  sbx_buf_init(&b, 64u << 20);
  sbx_buf_init(&h, 1u << 20);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
  if (body) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
  } else if (strcmp(method, "POST") == 0) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
  tls_options(c, s);
  CURLcode rc = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
  curl_easy_cleanup(c);
  curl_slist_free_all(hl);
  out->len = b.len;
  (void)sbx_buf_append(&b, "", 1);
  (void)sbx_buf_append(&h, "", 1);
  out->body = sbx_buf_steal(&b, NULL);
  out->headers = sbx_buf_steal(&h, NULL);
  out->json = json_loads(out->body, 0, NULL);
  if (rc != CURLE_OK)
    (void)snprintf(out->error, sizeof(out->error), "%.8s %.160s: %.300s",
                   method, url, err[0] ? err : curl_easy_strerror(rc));
  return (int)rc;
}

int test_http_try(struct test_http *out, const struct test_server *s,
                  const char *method, const char *path, const char *token,
                  const char *body, const char *const *headers) {
  return http_send(out, s, method, path, token, body, body ? strlen(body) : 0,
                   "application/json", headers);
}

void test_http(struct test_http *out, const struct test_server *s,
               const char *method, const char *path, const char *token,
               const char *body, const char *const *headers) {
  int rc = test_http_try(out, s, method, path, token, body, headers);
  cr_assert_eq(rc, CURLE_OK, "%s", out->error);
}

void test_http_bytes(struct test_http *out, const struct test_server *s,
                     const char *method, const char *path, const char *token,
                     const void *body, size_t len, const char *ctype,
                     const char *const *headers) {
  int rc = http_send(out, s, method, path, token, body, len, ctype, headers);
  cr_assert_eq(rc, CURLE_OK, "%s", out->error);
}

void test_http_free(struct test_http *h) {
  free(h->body);
  free(h->headers);
  json_decref(h->json);
  memset(h, 0, sizeof(*h));
}

char *test_http_header(const struct test_http *h, const char *name) {
  size_t n = strlen(name);
  for (const char *p = h->headers; p && *p;) {
    const char *end = strchr(p, '\n');
    if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
      const char *v = p + n + 1;
      while (*v == ' ')
        v++;
      size_t len = strcspn(v, "\r\n");
      return strndup(v, len);
    }
    p = end ? end + 1 : NULL;
  }
  return NULL;
}

struct sse_read {
  struct sbx_buf line;
  json_t *events;
  json_t *cur; /* the event being read */
  size_t max;
  long deadline;
};

/* One line of the stream (without its newline). */
static void sse_line(struct sse_read *r, const char *l, size_t n) {
  if (!r->cur)
    r->cur = json_object();
  if (n == 0) {
    if (json_object_get(r->cur, "event"))
      json_array_append(r->events, r->cur);
    json_decref(r->cur);
    r->cur = NULL;
  } else if (n > 4 && strncmp(l, "id: ", 4) == 0) {
    json_object_set_new(r->cur, "id", json_integer(strtoll(l + 4, NULL, 10)));
  } else if (n > 7 && strncmp(l, "event: ", 7) == 0) {
    json_object_set_new(r->cur, "event", json_stringn(l + 7, n - 7));
  } else if (n > 6 && strncmp(l, "data: ", 6) == 0) {
    json_t *d = json_loadb(l + 6, n - 6, 0, NULL);
    cr_expect_not_null(d, "an event's data is not JSON: %.*s", (int)n, l);
    json_object_set_new(r->cur, "data", d ? d : json_null());
  }
}

static size_t on_sse(char *p, size_t size, size_t n, void *arg) {
  struct sse_read *r = arg;
  for (size_t i = 0; i < size * n; i++) {
    if (p[i] == '\n') {
      sse_line(r, r->line.data ? r->line.data : "", r->line.len);
      sbx_buf_reset(&r->line);
    } else {
      (void)sbx_buf_append(&r->line, p + i, 1);
    }
  }
  if (r->max && json_array_size(r->events) >= r->max)
    return 0; /* enough: break the connection */
  return size * n;
}

static int on_sse_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c,
                           curl_off_t d) {
  (void)a, (void)b, (void)c, (void)d;
  struct sse_read *r = arg;
  return now_ms() > r->deadline;
}

json_t *test_sse(const struct test_server *s, const char *token, const char *id,
                 long after, size_t max, long timeout_ms, bool *ended) {
  CURL *c = curl_easy_init();
  cr_assert_not_null(c);
  char url[1024], auth[256], last[64];
  (void)snprintf(url, sizeof(url), "%s/v1/runs/%s/events", s->url, id);
  (void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
  struct curl_slist *hl = curl_slist_append(NULL, auth);
  if (after >= 0) {
    (void)snprintf(last, sizeof(last), "Last-Event-ID: %ld", after);
    hl = curl_slist_append(hl, last);
  }
  struct sse_read r = {
      .events = json_array(), .max = max, .deadline = now_ms() + timeout_ms};
  sbx_buf_init(&r.line, 64u << 20);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_sse);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_sse_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, &r);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  tls_options(c, s);
  CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  cr_expect_eq(status, 200, "GET %s: %ld", url, status);
  *ended = rc == CURLE_OK;
  curl_easy_cleanup(c);
  curl_slist_free_all(hl);
  sbx_buf_free(&r.line);
  json_decref(r.cur);
  return r.events;
}

json_t *test_server_wait(const struct test_server *s, const char *id,
                         const char *status, long timeout_ms) {
  char path[256];
  (void)snprintf(path, sizeof(path), "/v1/runs/%s", id);
  long t0 = now_ms();
  for (;;) {
    struct test_http h;
    test_http(&h, s, "GET", path, s->token, NULL, NULL);
    cr_assert_eq(h.status, 200, "%s", h.body);
    const char *st = json_string_value(json_object_get(h.json, "status"));
    if ((st && strcmp(st, status) == 0) || now_ms() - t0 > timeout_ms) {
      cr_expect_str_eq(st, status, "run %s: %s", id, h.body);
      json_t *j = json_incref(h.json);
      test_http_free(&h);
      return j;
    }
    test_http_free(&h);
    usleep(50000);
  }
}

char *test_server_submit(const struct test_server *s, const char *agent,
                         const char *input) {
  json_error_t je;
  json_t *a = json_loads(agent, 0, &je);
  cr_assert_not_null(a, "agent: %s", je.text);
  json_t *req = json_pack("{s:o, s:s}", "agent", a, "input", input);
  char *body = json_dumps(req, JSON_COMPACT);
  json_decref(req);
  struct test_http h;
  test_http(&h, s, "POST", "/v1/runs", s->token, body, NULL);
  free(body);
  cr_assert_eq(h.status, 201, "POST /v1/runs: %ld %s", h.status, h.body);
  char *id = strdup(json_string_value(json_object_get(h.json, "id")));
  test_http_free(&h);
  return id;
}
