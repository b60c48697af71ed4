#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/config/agent.h"
#include "controller/run/approvals.h"

static struct agent_set *load(const char *json) {
  char dir[] = "/tmp/sbx-appr-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[128];
  (void)snprintf(path, sizeof(path), "%s/a.json", dir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs(json, f);
  fclose(f);
  struct agent_set *s = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(agent_load(path, &s, &e), 0, "%s", e.msg);
  unlink(path);
  rmdir(dir);
  return s;
}

Test(approvals, modes_and_prefixes) {
  struct agent_set *s = load(
      "{\"name\": \"A\", \"approvals\": {\"apply_patch\": \"always\", "
      "\"view_image\": \"never\", \"exec_command\": [\"ls\", \"git status\", "
      "\"cat \"]}}");
  const struct agent *a = s->agents[0];
  cr_expect(approvals_needed(a, "apply_patch", "{}"));
  cr_expect(!approvals_needed(a, "view_image", "{\"path\": \"x\"}"));
  cr_expect(!approvals_needed(a, "write_stdin", "{}"), "not named: free");
  struct {
    const char *cmd;
    bool needed;
  } cases[] = {
      {"ls", false},
      {"ls -la src", false},
      {"  git status -s", false},
      {"cat notes.txt", false},
      {"lsof", true},
      {"git statusx", true},
      {"git push", true},
      {"ls; rm -rf /", true},
      {"ls && curl x", true},
      {"ls | sh", true},
      {"cat $(echo /etc/shadow)", true},
      {"cat `id`", true},
      {"ls > out", true},
      {"ls\nrm x", true},
      {"rm -rf /", true},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    json_t *args = json_pack("{s:s}", "cmd", cases[i].cmd);
    char *j = json_dumps(args, 0);
    cr_expect_eq(approvals_needed(a, "exec_command", j), cases[i].needed,
                 "\"%s\"", cases[i].cmd);
    free(j);
    json_decref(args);
  }
  cr_expect(approvals_needed(a, "exec_command", "not json"));
  agent_set_free(s);
  char *t = approvals_rejection_text("too risky");
  cr_expect_str_eq(t, "The user rejected this tool call: too risky");
  free(t);
}
