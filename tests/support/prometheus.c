#include "tests/support/prometheus.h"

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
#include "shared/fileio.h"
#include "tests/support/model_server.h"
#include "tests/support/pyserver.h"
#include "tests/support/sbxrun.h"

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

bool test_have_program(const char *program) {
  const char *path = getenv("PATH");
  if (!path)
    path = "/usr/bin:/bin";
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    char full[4096];
    int k = snprintf(full, sizeof(full), "%.*s/%s", (int)n, p, program);
    if (n && k > 0 && (size_t)k < sizeof(full) && access(full, X_OK) == 0)
      return true;
    p += n;
    if (*p == ':')
      p++;
  }
  return false;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg) {
  return sbx_buf_append(arg, p, size * n) < 0 ? 0 : size * n;
}

/* GET URL: the status (0 when nothing answered), the body in *BODY (new). */
static long get(const char *url, char **body) {
  CURL *c = curl_easy_init();
  cr_assert_not_null(c);
  struct sbx_buf b;
  sbx_buf_init(&b, 16u << 20);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(c);
  (void)sbx_buf_append(&b, "", 1);
  *body = sbx_buf_steal(&b, NULL);
  return status;
}

/* Writes the config of the N JOBS into P's dir. */
static void write_config(struct test_prometheus *p,
                         const struct test_scrape *jobs, size_t n) {
  struct sbx_buf y;
  sbx_buf_init(&y, 1u << 20);
  cr_assert_eq(sbx_buf_printf(&y, "global:\n  scrape_interval: 1s\n"
                                  "  scrape_timeout: 1s\n"
                                  "scrape_configs:\n"),
               0);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(sbx_buf_printf(&y,
                                "  - job_name: \"%s\"\n"
                                "    scrape_interval: 1s\n"
                                "    metrics_path: /metrics\n"
                                "    authorization:\n"
                                "      credentials: \"%s\"\n"
                                "    static_configs:\n"
                                "      - targets: [\"%s\"]\n",
                                jobs[i].job, jobs[i].token, jobs[i].target),
                 0);
  cr_assert_eq(sbx_buf_append(&y, "", 1), 0);
  (void)test_write_file(p->dir, "prometheus.yml", y.data);
  sbx_buf_free(&y);
}

/* Runs prometheus on PORT in P's dir: its pid. */
static pid_t spawn(const struct test_prometheus *p, int port) {
  char config[128], data[128], listen[64];
  (void)snprintf(config, sizeof(config), "--config.file=%s/prometheus.yml",
                 p->dir);
  (void)snprintf(data, sizeof(data), "--storage.tsdb.path=%s/data", p->dir);
  (void)snprintf(listen, sizeof(listen), "--web.listen-address=127.0.0.1:%d",
                 port);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = open("/dev/null", O_RDWR);
    int log = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    const char *argv[] = {"prometheus", config, data, listen, NULL};
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* Waits until P answers /-/ready: whether it did before it exited. */
static bool wait_ready(struct test_prometheus *p) {
  char url[128];
  (void)snprintf(url, sizeof(url), "%s/-/ready", p->url);
  long t0 = now_ms();
  for (;;) {
    char *body = NULL;
    long status = get(url, &body);
    free(body);
    if (status == 200)
      return true;
    int st;
    if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
      p->pid = 0;
      return false;
    }
    cr_assert_lt(now_ms() - t0, 60000, "prometheus was not ready in 60 s");
    usleep(100000);
  }
}

void test_prometheus_start(struct test_prometheus *p,
                           const struct test_scrape *jobs, size_t n) {
  memset(p, 0, sizeof(*p));
  (void)snprintf(p->dir, sizeof(p->dir), "/tmp/sbx-prom-XXXXXX");
  cr_assert_not_null(mkdtemp(p->dir));
  (void)snprintf(p->log, sizeof(p->log), "%s/prometheus.log", p->dir);
  write_config(p, jobs, n);
  /* The free port is a guess another process may take: try a few. */
  for (int attempt = 0; attempt < 3; attempt++) {
    int port = test_closed_port();
    (void)snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", port);
    p->pid = spawn(p, port);
    if (wait_ready(p))
      return;
  }
  char *log = NULL;
  size_t len = 0;
  (void)sbx_read_file(p->log, 1u << 20, &log, &len);
  cr_assert_fail("prometheus exited: %s",
                 log ? log + (len > 4000 ? len - 4000 : 0) : "");
}

void test_prometheus_stop(struct test_prometheus *p) {
  test_pyserver_stop(&p->pid);
  if (p->dir[0] && !getenv("SBX_TEST_KEEP"))
    (void)test_rm_rf(p->dir);
  p->dir[0] = '\0';
}

json_t *test_prometheus_get(const struct test_prometheus *p, const char *path) {
  char url[2048];
  (void)snprintf(url, sizeof(url), "%s%s", p->url, path);
  char *body = NULL;
  long status = get(url, &body);
  json_t *j = status == 200 ? json_loads(body, 0, NULL) : NULL;
  free(body);
  const char *st = json_string_value(json_object_get(j, "status"));
  json_t *data = st && strcmp(st, "success") == 0
                     ? json_incref(json_object_get(j, "data"))
                     : NULL;
  json_decref(j);
  return data;
}

json_t *test_prometheus_query(const struct test_prometheus *p,
                              const char *query) {
  char *q = curl_easy_escape(NULL, query, 0);
  cr_assert_not_null(q);
  char path[1024];
  (void)snprintf(path, sizeof(path), "/api/v1/query?query=%s", q);
  curl_free(q);
  json_t *data = test_prometheus_get(p, path);
  json_t *result = json_incref(json_object_get(data, "result"));
  json_decref(data);
  return json_is_array(result) ? result : json_array();
}

int test_promtool_check(const char *text, char **out) {
  char dir[64];
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-promtool-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  char in[128], res[128];
  (void)snprintf(in, sizeof(in), "%s", test_write_file(dir, "metrics", text));
  (void)snprintf(res, sizeof(res), "%s/out", dir);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int i = open(in, O_RDONLY);
    int o = open(res, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(i, 0);
    dup2(o, 1);
    dup2(o, 2);
    const char *argv[] = {"promtool", "check", "metrics", NULL};
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  size_t len = 0;
  *out = NULL;
  if (sbx_read_file(res, 1u << 20, out, &len) < 0)
    *out = strdup("");
  (void)test_rm_rf(dir);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
