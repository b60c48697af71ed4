/* The client under test for @modelcontextprotocol/conformance's client
 * scenarios: sbx's own MCP client (controller/tools/mcp*.c) over
 * Streamable HTTP, driven as a run drives it. The framework runs
 *   mcp_conformance_client URL
 * with MCP_CONFORMANCE_SCENARIO naming the scenario: the client connects
 * (initialize, notifications/initialized, tools/list) and calls the tool
 * the scenario's server offers, as a model would ask for it. Exit status 0
 * when every step worked. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/config/agent.h"
#include "controller/tools/mcp.h"
#include "shared/cleanup.h"

/* The tool each scenario's server offers and its arguments; NULL: the
 * scenario checks the connection only. */
static const char *const calls[][3] = {
    {"initialize", NULL, NULL},
    {"tools_call", "add_numbers", "{\"a\": 5, \"b\": 3}"},
    {"sse-retry", "test_reconnection", "{}"},
};

/* Writes an agent file naming the server at URL into DIR; its path. */
static int write_agent(const char *dir, const char *url, char *path,
                       size_t cap) {
  _cleanup_json_ json_t *a = json_pack(
      "{s:s, s:[], s:[{s:s, s:s, s:s, s:i}]}", "name", "conformance",
      "capabilities", "mcp_servers", "name", "conformance", "type",
      "streamable_http", "url", url, "client_session_timeout_seconds", 20);
  (void)snprintf(path, cap, "%s/agent.json", dir);
  return a && json_dump_file(a, path, 0) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  const char *scenario = getenv("MCP_CONFORMANCE_SCENARIO");
  if (argc != 2 || !scenario) {
    fprintf(stderr, "usage: MCP_CONFORMANCE_SCENARIO=NAME %s URL\n", argv[0]);
    return 2;
  }
  size_t k = 0;
  while (k < sizeof(calls) / sizeof(calls[0]) && strcmp(calls[k][0], scenario))
    k++;
  if (k == sizeof(calls) / sizeof(calls[0])) {
    fprintf(stderr, "scenario \"%s\" is not one a tools client takes\n",
            scenario);
    return 2;
  }
  char dir[] = "/tmp/sbx-mcp-conformance-XXXXXX";
  char path[128];
  if (!mkdtemp(dir) || write_agent(dir, argv[1], path, sizeof(path)) < 0) {
    perror("agent file");
    return 1;
  }
  struct agent_set *set = NULL;
  struct mcp_set *mcp = NULL;
  struct sbx_error e = {0};
  int rc = 1;
  if (agent_load(path, &set, &e) < 0 ||
      mcp_set_start(set->agents[0], &mcp, &e) < 0) {
    fprintf(stderr, "connecting: %s\n", e.msg);
    goto out;
  }
  rc = 0;
  if (calls[k][1]) {
    json_t *output = NULL;
    struct tool_ctx ctx = {0};
    if (mcp_set_call(mcp, calls[k][1], calls[k][2], &output, &ctx) < 0 ||
        ctx.failure.code != SBX_OK) {
      fprintf(stderr, "calling %s: %s\n", calls[k][1], ctx.failure.msg);
      rc = 1;
    }
    char *text = output ? json_dumps(output, JSON_ENCODE_ANY) : NULL;
    printf("%s: %s\n", calls[k][1], text ? text : "(no output)");
    free(text);
    json_decref(output);
  }
out:
  mcp_set_free(mcp);
  agent_set_free(set);
  (void)unlink(path);
  (void)rmdir(dir);
  return rc;
}
