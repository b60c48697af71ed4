/* sbx's MCP client against the client scenarios of the official MCP
 * conformance suite (@modelcontextprotocol/conformance, from npm, run by
 * the Node it needs; scripts/mcp-servers.sh installs both into the build
 * tree) that apply to a client of tools over Streamable HTTP: the
 * initialize handshake, a tool call, and a reply's event stream resumed
 * with Last-Event-ID after its retry time (SEP-1699). The client under
 * test is tests/mcp/conformance_client.c, sbx's own MCP code. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/sbxrun.h"

#define MCP_DIR SBX_BUILD_DIR "/mcp-servers"
#define NODE MCP_DIR "/node_modules/node/bin/node"
#define SUITE                                                                  \
  MCP_DIR "/node_modules/@modelcontextprotocol/conformance/dist/index.js"
#define CLIENT SBX_BUILD_DIR "/tests/mcp_conformance_client"

static char dir[64];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-mcp-conf-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  int rc = system("bash " SBX_SOURCE_DIR "/scripts/mcp-servers.sh " MCP_DIR);
  cr_assert_eq(rc, 0,
               "scripts/mcp-servers.sh could not install the conformance "
               "suite from npm (above)");
}

static void teardown(void) {
  (void)test_rm_rf(dir);
}

TestSuite(mcp_conformance, .init = setup, .fini = teardown, .timeout = 180);

/* Runs SCENARIO of the suite against the client: the suite's exit status,
 * and its report in *OUT (new). */
static int scenario(const char *name, char **out) {
  char cmd[1024], log[128];
  (void)snprintf(log, sizeof(log), "%s/%s.log", dir, name);
  (void)snprintf(cmd, sizeof(cmd),
                 "cd %s && NO_COLOR=1 timeout 120 " NODE " " SUITE
                 " client --command " CLIENT " --scenario %s > %s 2>&1",
                 dir, name, log);
  int st = system(cmd);
  FILE *f = fopen(log, "re");
  cr_assert_not_null(f);
  *out = calloc(1, 1 << 20);
  cr_assert_not_null(*out);
  size_t n = fread(*out, 1, (1 << 20) - 1, f);
  (*out)[n] = '\0';
  fclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void expect_passed(const char *name, const char *checks) {
  char *out = NULL;
  int st = scenario(name, &out);
  cr_expect_eq(st, 0, "%s: exit %d\n%s", name, st, out);
  cr_expect_not_null(strstr(out, "OVERALL: PASSED"), "%s:\n%s", name, out);
  cr_expect_not_null(strstr(out, checks), "%s: no \"%s\" in\n%s", name, checks,
                     out);
  cr_expect_null(strstr(out, "FAILURE"), "%s:\n%s", name, out);
  cr_expect_null(strstr(out, "WARNING"), "%s:\n%s", name, out);
  free(out);
}

Test(mcp_conformance, initialize) {
  expect_passed("initialize", "Passed: 1/1, 0 failed, 0 warnings");
}

Test(mcp_conformance, tools_call) {
  expect_passed("tools_call", "Passed: 1/1, 0 failed, 0 warnings");
}

Test(mcp_conformance, sse_retry) {
  expect_passed("sse-retry", "Passed: 3/3, 0 failed, 0 warnings");
}

/* The client refuses what it does not take, rather than pass by doing
 * nothing. */
Test(mcp_conformance, client_refuses_other_scenarios) {
  int st = system("MCP_CONFORMANCE_SCENARIO=auth/basic-cimd " CLIENT
                  " http://127.0.0.1:9/ 2>/dev/null");
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2);
  st = system(CLIENT " http://127.0.0.1:9/ 2>/dev/null");
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}
