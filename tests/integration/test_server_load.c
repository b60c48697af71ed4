/* sbx serve under load: 200 runs submitted at once, each a tool call in a
 * sandbox of its own and an answer, all completed with the right answer,
 * their events whole, and the server answering throughout. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/model_server.h"
#include "tests/support/server.h"

#define RUNS 200
#define SUBMITTERS 8

static struct test_model_server ms;
static struct test_server srv;
static char *ids[RUNS];

static void stop_all(void) {
  test_server_fini(&srv);
  test_model_server_stop(&ms);
  for (size_t i = 0; i < RUNS; i++)
    free(ids[i]);
}

TestSuite(server_load, .fini = stop_all, .timeout = 600);

static void *submit(void *arg) {
  size_t k = (size_t)(uintptr_t)arg;
  for (size_t i = k; i < RUNS; i += SUBMITTERS) {
    char input[32];
    (void)snprintf(input, sizeof(input), "run %zu", i);
    ids[i] =
        test_server_submit(&srv, "{\"name\": \"A\", \"model\": \"m1\"}", input);
  }
  return NULL;
}

Test(server_load, two_hundred_runs_at_once_all_complete) {
  /* by_turn: each run's first request gets the tool call, its second (with
   * the call's output) the answer, however the runs interleave. */
  test_model_server_start(
      &ms,
      "{\"by_turn\": true, \"steps\": [{\"tool_calls\": [{\"name\": "
      "\"exec_command\", \"arguments\": {\"cmd\": \"echo ran\"}}]}, "
      "{\"text\": \"done\"}]}",
      NULL);
  test_server_init(&srv, NULL, ms.base_url);
  const char *extra[] = {"--workers", "32", NULL};
  test_server_start(&srv, extra);
  pthread_t t[SUBMITTERS];
  for (size_t k = 0; k < SUBMITTERS; k++)
    cr_assert_eq(pthread_create(&t[k], NULL, submit, (void *)(uintptr_t)k), 0);
  for (size_t k = 0; k < SUBMITTERS; k++)
    pthread_join(t[k], NULL);
  for (size_t i = 0; i < RUNS; i++) {
    cr_assert_not_null(ids[i], "run %zu was not submitted", i);
    json_t *run = test_server_wait(&srv, ids[i], "completed", 300000);
    cr_expect_str_eq(json_string_value(json_object_get(run, "final_output")),
                     "done", "%s", ids[i]);
    json_decref(run);
  }
  /* Every run asked the model twice: 400 requests, no more. */
  json_t *reqs = test_model_server_requests(&ms);
  cr_expect_eq(json_array_size(reqs), 2 * RUNS);
  json_decref(reqs);
  /* A sample of the runs' streams: whole and in order. */
  for (size_t i = 0; i < RUNS; i += 37) {
    bool ended = false;
    json_t *evs = test_sse(&srv, srv.token, ids[i], -1, 0, 10000, &ended);
    cr_expect(ended);
    size_t n = json_array_size(evs);
    for (size_t k = 0; k < n; k++)
      cr_expect_eq(
          json_integer_value(json_object_get(json_array_get(evs, k), "id")),
          (json_int_t)k + 1);
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_array_get(evs, n ? n - 1 : 0), "event")),
                     "run_finished");
    json_decref(evs);
  }
  struct test_http h;
  test_http(&h, &srv, "GET", "/metrics", srv.token, NULL, NULL);
  cr_expect(strstr(h.body, "sbx_runs{status=\"completed\"} 200\n"), "%s",
            h.body);
  cr_expect(strstr(h.body, "sbx_runs_executing 0\n"), "%s", h.body);
  test_http_free(&h);
}
