/* The local backend's options read from JSON (run_config, the CLI's flags,
 * the API): the defaults, every key reaching its field, and every refusal
 * naming what it refuses. Nothing is created. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#include "backends/local/local.h"
#include "backends/local/local_internal.h"
#include "shared/cleanup.h"

/* Parses TEXT (NULL: no options) through the backend's table and parser:
 * the options (free with backend_options_free), or NULL with MSG set. */
static struct local_options *parse(const char *text, char *msg, size_t n) {
  _cleanup_json_ json_t *j = text ? json_loads(text, 0, NULL) : NULL;
  cr_assert(!text || j, "%s", text);
  void *own = NULL;
  struct sbx_error e = {0};
  int r = backend_options_parse(&backend_local, j, "run_config", &own, &e);
  (void)snprintf(msg, n, "%s", e.msg);
  cr_expect_eq(r < 0, own == NULL, "%s", text ? text : "(none)");
  return own;
}

Test(local_options, the_defaults_isolate_with_network_and_limits) {
  char msg[600];
  struct local_options *o = parse("{}", msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  cr_expect(o->isolate && o->network);
  cr_expect_eq(o->memory_bytes, 2ull << 30);
  cr_expect_eq(o->pids, 4096);
  cr_expect_eq(o->cpus, 0);
  cr_expect_eq(o->workspace_bytes, 0);
  backend_options_free(&backend_local, o);
}

Test(local_options, every_key_reaches_its_field) {
  char msg[600];
  struct local_options *o =
      parse("{\"isolation\": \"namespaces\", \"network_mode\": \"none\", "
            "\"memory_bytes\": 67108864, \"pids_limit\": 0, \"cpus\": 1.5, "
            "\"workspace_bytes\": 1048576}",
            msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  cr_expect(o->isolate && !o->network);
  cr_expect_eq(o->memory_bytes, 64u << 20);
  cr_expect_eq(o->pids, 0);
  cr_expect_eq(o->cpus, 1.5);
  cr_expect_eq(o->workspace_bytes, 1u << 20);
  backend_options_free(&backend_local, o);
  o = parse("{\"isolation\": \"none\"}", msg, sizeof(msg));
  cr_assert_not_null(o, "%s", msg);
  cr_expect(!o->isolate);
  backend_options_free(&backend_local, o);
}

Test(local_options, refusals_name_the_key) {
  static const char *const cases[][2] = {
      {"{\"isolation\": \"chroot\"}",
       "run_config.isolation: expected \"namespaces\" or \"none\""},
      {"{\"network_mode\": \"bridge\"}",
       "run_config.network_mode: expected \"none\""},
      {"{\"memory_bytes\": 1000}",
       "run_config.memory_bytes: expected 0 or at least 1048576"},
      {"{\"memory_bytes\": -1}", "run_config.memory_bytes"},
      {"{\"pids_limit\": -5}", "run_config.pids_limit: expected 0 to"},
      {"{\"cpus\": 2000}", "run_config.cpus: expected 0 to 1024"},
      {"{\"cpus\": -1}", "run_config.cpus: expected 0 to 1024"},
      {"{\"workspace_bytes\": 100}",
       "run_config.workspace_bytes: expected 0 or at least 4096"},
      {"{\"isolation\": \"none\", \"pids_limit\": 10}",
       "run_config.isolation: \"none\" cannot limit"},
      {"{\"isolation\": \"none\", \"network_mode\": \"none\"}",
       "cannot limit or cut off the network"},
      {"{\"cpus\": \"2\"}", "\"run_config.cpus\" must be a number"},
      {"{\"image\": \"x\"}", "backend local has no such option"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char msg[600];
    struct local_options *o = parse(cases[i][0], msg, sizeof(msg));
    cr_expect_null(o, "%s is refused", cases[i][0]);
    cr_expect(strstr(msg, cases[i][1]), "%s: %s", cases[i][0], msg);
    backend_options_free(&backend_local, o);
  }
}
