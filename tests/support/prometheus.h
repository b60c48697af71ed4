/* A real Prometheus for a test: prometheus(1) on a free loopback port,
 * scraping the jobs it is given every second, in a temp dir of its own
 * (its config, its storage and its log), and promtool(1) to check a
 * metrics page. Both are found on PATH; a test without them skips.
 *
 * The server is stopped by test_prometheus_stop, and killed by the kernel
 * when the test process dies first (PDEATHSIG). */
#ifndef SBX_TEST_PROMETHEUS_H
#define SBX_TEST_PROMETHEUS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct test_prometheus {
  pid_t pid;
  char dir[64]; /* temp dir: prometheus.yml, data/, prometheus.log */
  char url[64]; /* "http://127.0.0.1:PORT" */
  char log[96]; /* its output */
};

/* One scrape job: JOB's name, TARGET "HOST:PORT" (plain HTTP) and the
 * bearer TOKEN Prometheus shows it. */
struct test_scrape {
  const char *job, *target, *token;
};

/* Whether PROGRAM is an executable on PATH. */
bool test_have_program(const char *program);

/* Starts Prometheus scraping the N JOBS every second and waits until it is
 * ready (asserts it came up). */
void test_prometheus_start(struct test_prometheus *p,
                           const struct test_scrape *jobs, size_t n);
/* Stops it (SIGTERM, then SIGKILL after 10 s) and removes its dir.
 * Accepts a stopped one. */
void test_prometheus_stop(struct test_prometheus *p);
/* GET PATH (with its query) from the HTTP API: the "data" member of the
 * answer (new), or NULL when it did not answer with success. */
json_t *test_prometheus_get(const struct test_prometheus *p, const char *path);
/* The instant vector of the PromQL QUERY (new; an empty array when the
 * query failed). */
json_t *test_prometheus_query(const struct test_prometheus *p,
                              const char *query);

/* Runs "promtool check metrics" on TEXT (a /metrics page): its exit code,
 * with what it printed in *OUT (new). */
int test_promtool_check(const char *text, char **out);

#endif
