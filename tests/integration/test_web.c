/* The web page in a real browser: tests/web/ui.mjs drives Debian's
 * chromium (headless, through puppeteer-core, which
 * scripts/web-test-deps.sh installs into the build tree) against the real
 * sbx serve and the scripted model server started here. The script asks
 * for the server's restart mid-run on its stdout; this test does it on
 * the same port and answers on its stdin. Screenshots of the main views
 * go to BUILD/web-screenshots/ for a person to look at. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shared/port.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

#define CHROMIUM "/usr/bin/chromium"
#define WEB_NODE SBX_BUILD_DIR "/web-node"
#define SHOTS SBX_BUILD_DIR "/web-screenshots"
#define SCRIPT SBX_SOURCE_DIR "/tests/web/ui.mjs"
#define REASON "not in this directory, please"

static struct test_model_server ms;
static struct test_server srv;

static void stop_all(void) {
  test_server_fini(&srv);
  test_model_server_stop(&ms);
}

TestSuite(web, .fini = stop_all, .timeout = 420);

/* Every run: an exec_command call, then (its output or a rejection in
 * the request) the answer, slow enough for a restart to fall inside. */
static const char *const script =
    "{\"by_turn\": true, \"steps\": ["
    "{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c1\", "
    "\"arguments\": {\"cmd\": \"echo hi > f; cat f\"}}]},"
    " {\"delay_ms\": 3000, \"text\": \"done: hi\"}]}";

/* Runs node on the script with ENV; restarts the server with EXTRA when it
 * asks. The script's exit status. */
static int run_script(char *const *env, const char *const *extra,
                      const char *log) {
  int in[2], out[2];
  cr_assert_eq(pipe2(in, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    int err = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || err < 0 ||
        dup2(err, 2) < 0)
      _exit(127);
    execle("/usr/bin/node", "node", SCRIPT, (char *)NULL, env);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  FILE *from = fdopen(out[0], "r");
  cr_assert_not_null(from);
  char line[256];
  while (fgets(line, sizeof(line), from)) {
    if (strcmp(line, "restart\n") != 0)
      continue;
    test_server_kill(&srv, SIGTERM);
    test_server_start(&srv, extra);
    cr_assert_eq(write(in[1], "restarted\n", 10), 10);
  }
  (void)fclose(from);
  close(in[1]);
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The last N bytes of file PATH (new). */
static char *tail_of(const char *path, long n) {
  char *buf = calloc(1, (size_t)n + 1);
  FILE *f = fopen(path, "r");
  if (f) {
    if (fseek(f, -n, SEEK_END) != 0)
      rewind(f);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    (void)fclose(f);
  }
  return buf;
}

Test(web, the_page_in_a_browser) {
  cr_assert_eq(access(CHROMIUM, X_OK), 0,
               "chromium is not installed (" CHROMIUM
               "): the web page cannot be tested. scripts/install-deps.sh "
               "installs it (Debian package chromium)");
  cr_assert_eq(access("/usr/bin/node", X_OK), 0,
               "node is not installed (Debian package nodejs)");
  int rc = system("bash " SBX_SOURCE_DIR "/scripts/web-test-deps.sh " WEB_NODE);
  cr_assert_eq(rc, 0,
               "scripts/web-test-deps.sh could not install puppeteer-core "
               "from npm (above)");
  cr_assert(mkdir(SHOTS, 0755) == 0 || errno == EEXIST, SHOTS);

  uint16_t port = 0;
  cr_assert_eq(sbx_free_tcp_port(&port), 0);
  char listen[64];
  (void)snprintf(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)port);
  const char *extra[] = {"--listen", listen, NULL};
  test_model_server_start(&ms, script, NULL);
  test_server_init(&srv, NULL, ms.base_url);
  test_server_start(&srv, extra);
  char *ops = test_server_token(&srv, "ops", "read,run,approve");
  char *reader = test_server_token(&srv, "reader", "read");

  char e_url[128], e_tok[160], e_read[160], e_reason[128];
  (void)snprintf(e_url, sizeof(e_url), "SBX_URL=%s", srv.url);
  (void)snprintf(e_tok, sizeof(e_tok), "SBX_TOKEN=%s", ops);
  (void)snprintf(e_read, sizeof(e_read), "SBX_READER=%s", reader);
  (void)snprintf(e_reason, sizeof(e_reason), "SBX_REASON=%s", REASON);
  char *env[] = {e_url,
                 e_tok,
                 e_read,
                 e_reason,
                 "SBX_SHOTS=" SHOTS,
                 "SBX_WEB_NODE=" WEB_NODE,
                 "SBX_CHROMIUM=" CHROMIUM,
                 "HOME=/tmp",
                 "PATH=/usr/bin:/bin",
                 NULL};
  const char *log = SHOTS "/ui.log";
  rc = run_script(env, extra, log);
  char *said = tail_of(log, 3000);
  cr_expect_eq(rc, 0, "tests/web/ui.mjs failed (%d; " SHOTS "/ui.log):\n%s", rc,
               said);
  free(said);

  /* The reason typed in the page reached the model as the call's output. */
  json_t *reqs = test_model_server_requests(&ms);
  bool found = false;
  for (long n = 0; n < (long)json_array_size(reqs) && !found; n++) {
    const char *out = test_call_output(reqs, n, "c1");
    found = out && strstr(out, REASON);
  }
  cr_expect(found, "no request to the model carried the rejection's reason");
  json_decref(reqs);
  free(ops);
  free(reader);
}
