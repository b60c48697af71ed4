/* The examples that `make demo` runs, offline: each replays its recorded
 * model answers against a real sandbox, and what the tools did there is
 * checked from the run's --stream events, not from the transcript. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/sbxrun.h"

TestSuite(demo, .timeout = 180);

struct demo_out {
  int status;
  char *out;
  char *err;
};

/* Reads PATH whole (new). */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  char *buf = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&buf, &n);
  char chunk[4096];
  size_t k;
  while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0)
    fwrite(chunk, 1, k, m);
  fclose(f);
  fclose(m);
  return buf;
}

/* Runs examples/NAME/run.sh with the build tree's sbx and --stream,
 * without OPENAI_API_KEY, from the source tree. */
static void run_example(const char *name, struct demo_out *o) {
  char tmp[] = "/tmp/sbx-demo-test-XXXXXX";
  cr_assert_not_null(mkdtemp(tmp));
  char cmd[2048];
  (void)snprintf(cmd, sizeof(cmd),
                 "cd '%s' && env -u OPENAI_API_KEY XDG_STATE_HOME='%s' bash "
                 "examples/%s/run.sh '%s' --stream >'%s/out' 2>'%s/err'",
                 SBX_SOURCE_DIR, tmp, name, SBX_BUILD_DIR, tmp, tmp);
  int st = system(cmd);
  o->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/out", tmp);
  o->out = slurp(p);
  (void)snprintf(p, sizeof(p), "%s/err", tmp);
  o->err = slurp(p);
  (void)test_rm_rf(tmp);
}

/* The output of the tool call CALL_ID in the events of OUT (borrowed
 * from *EVENTS, new), or NULL. */
static const char *call_output(const char *out, const char *call_id,
                               json_t **events) {
  *events = json_array();
  const char *line = out;
  const char *found = NULL;
  while (line && *line) {
    const char *nl = strchr(line, '\n');
    size_t n = nl ? (size_t)(nl - line) : strlen(line);
    json_t *ev = json_loadb(line, n, 0, NULL);
    if (ev) {
      json_array_append_new(*events, ev);
      const char *t = json_string_value(json_object_get(ev, "type"));
      const char *c = json_string_value(json_object_get(ev, "call_id"));
      if (t && c && strcmp(t, "tool_call_finished") == 0 &&
          strcmp(c, call_id) == 0)
        found = json_string_value(json_object_get(ev, "output"));
    }
    line = nl ? nl + 1 : NULL;
  }
  return found;
}

Test(demo, coding_task_fixes_the_test_in_the_sandbox) {
  struct demo_out o = {0};
  run_example("coding-task", &o);
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect(strstr(o.err, "replayed 6 recorded model responses") != NULL, "%s",
            o.err);
  cr_expect(strstr(o.err, "no model API was called") != NULL, "%s", o.err);
  json_t *events = NULL;
  /* The test failed in the sandbox before the patch... */
  const char *before = call_output(o.out, "call_read", &events);
  cr_assert_not_null(before, "%s", o.out);
  cr_expect(strstr(before, "Process exited with code 1\n") != NULL, "%s",
            before);
  cr_expect(strstr(before, "FAIL credit_note 2500 50: got 1250, want -1250") !=
                NULL,
            "%s", before);
  json_decref(events);
  /* ...the skill was loaded into the workspace... */
  const char *skill = call_output(o.out, "call_skill", &events);
  cr_expect_str_eq(skill, "{\"status\":\"loaded\",\"skill_name\":\"credit-"
                          "note-fixer\",\"path\":\".agents/credit-note-"
                          "fixer\"}");
  json_decref(events);
  /* ...and after it the test passes there. */
  const char *after = call_output(o.out, "call_test", &events);
  cr_assert_not_null(after, "%s", o.out);
  cr_expect(strstr(after, "Process exited with code 0\nOutput:\nok   "
                          "credit_note 2500 50 = -1250\n") != NULL,
            "%s", after);
  cr_expect(strstr(after, "\nall tests passed\n") != NULL, "%s", after);
  json_decref(events);
  free(o.out);
  free(o.err);
}

Test(demo, renewal_packet_replays) {
  struct demo_out o = {0};
  run_example("renewal-packet", &o);
  cr_expect_eq(o.status, 0, "%s", o.err);
  cr_expect(strstr(o.err, "no model API was called") != NULL, "%s", o.err);
  cr_expect(strstr(o.out, "\"type\":\"run_finished\"") != NULL, "%s", o.out);
  free(o.out);
  free(o.err);
}
