/* Agents sent over the API. An agent file on the command line is the
 * operator's own configuration; one in a request comes from whoever holds
 * a token, so it may not reach the server's files: no other agent files
 * (handoffs and agents as tools name them by path), no manifest entries
 * copied or mounted from the host (local_file, local_dir, mount), no
 * git_repo (cloned by the host), no skills capability (its sources are
 * such entries), no grants of host paths, no command tools, command
 * guardrails or guard agents, and no stdio MCP servers (programs run on
 * the server's host); and, unless
 * the token is the operator's (admin), no base_url (the server's API key
 * would go there), no api_key_env (it would read the server's
 * environment), no streamable_http MCP servers (the server would connect
 * where the request says) and no backend option that reaches the host (the
 * option tables' api rules). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/registry.h"
#include "controller/config/agent.h"
#include "controller/config/manifest.h"
#include "controller/server/server_internal.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

#define AGENT_NAME "agent.json"

/* Replaces the temporary file's path at the start of E's message with
 * "agent", the request's member the message is about. */
static void tidy_message(struct sbx_error *e, const char *path) {
  size_t n = strlen(path);
  if (n < 5 || strncmp(e->msg, path, n) != 0)
    return;
  memmove(e->msg + 5, e->msg + n, strlen(e->msg + n) + 1);
  memcpy(e->msg, "agent", 5);
}

int server_manifest_check(const struct manifest *m, const char *where,
                          struct sbx_error *e) {
  for (size_t i = 0; i < m->nentries; i++) {
    const struct manifest_entry *me = &m->entries[i];
    if (me->type == MANIFEST_LOCAL_FILE || me->type == MANIFEST_LOCAL_DIR ||
        me->type == MANIFEST_MOUNT || me->type == MANIFEST_GIT_REPO)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s: entry \"%s\" is a %s, which reads the "
                           "server's own files or network; one sent over "
                           "the API may have file and dir entries only",
                           where, me->path, me->type_name);
  }
  if (m->ngrants)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s: grants name host paths, which one sent over "
                         "the API may not",
                         where);
  return 0;
}

static int refuse_host_paths(const struct agent *a, struct sbx_error *e) {
  if (!a->default_manifest)
    return 0;
  struct manifest *m = NULL;
  int r = manifest_parse(a->default_manifest, "agent: default_manifest", &m, e);
  if (r == 0)
    r = server_manifest_check(m, "agent: default_manifest", e);
  manifest_free(m);
  return r;
}

static int refuse_other_files(struct sbx_error *e) {
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "agent: handoffs and agents as tools name other agent "
                       "files, which an agent sent over the API may not");
}

/* Refuses command tools and stdio MCP servers: each runs a program on the
 * server's host. */
static int refuse_programs(json_t *agent, struct sbx_error *e) {
  static const struct {
    const char *member, *type, *what;
  } programs[] = {
      {"tools", "command", "command tools run"},
      {"mcp_servers", "stdio", "stdio MCP servers are"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(programs); i++) {
    json_t *list = json_object_get(agent, programs[i].member);
    for (size_t j = 0; j < json_array_size(list); j++) {
      const char *type =
          json_string_value(json_object_get(json_array_get(list, j), "type"));
      if (type && strcmp(type, programs[i].type) == 0)
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                             "agent: \"%s[%zu]\": %s programs on the "
                             "server's host, which an agent sent over the API "
                             "may not name",
                             programs[i].member, j, programs[i].what);
    }
  }
  return 0;
}

/* Refuses guardrails that are commands (programs on the server's host)
 * or guard agents (other agent files). */
static int refuse_guardrails(json_t *agent, struct sbx_error *e) {
  static const char *const members[] = {"input_guardrails",
                                        "output_guardrails"};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(members); i++) {
    json_t *list = json_object_get(agent, members[i]);
    for (size_t j = 0; j < json_array_size(list); j++) {
      json_t *g = json_array_get(list, j);
      if (json_object_get(g, "command"))
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                             "agent: \"%s[%zu]\": command guardrails run "
                             "programs on the server's host, which an agent "
                             "sent over the API may not name",
                             members[i], j);
      if (json_object_get(g, "agent"))
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                             "agent: \"%s[%zu]\": guard agents are other "
                             "agent files, which an agent sent over the API "
                             "may not name",
                             members[i], j);
    }
  }
  return 0;
}

/* Refuses the members that name other agent files or host programs before
 * anything is loaded: agent_load would open and parse those files on the
 * server, and its errors would tell the client whether one exists and what
 * it begins with ("/etc/passwd:1:4: '[' or '{' expected near 'root'").
 * Every other tool is an agent as a tool. A member of the wrong type is the
 * parser's to refuse, which reads no file for it. */
static int refuse_references(json_t *agent, struct sbx_error *e) {
  int r = refuse_programs(agent, e);
  if (r == 0)
    r = refuse_guardrails(agent, e);
  if (r < 0)
    return r;
  /* A skills capability reads its skills from the host (a lazy one when
   * the file is loaded) or clones them there. */
  json_t *caps = json_object_get(agent, "capabilities");
  for (size_t i = 0; i < json_array_size(caps); i++) {
    json_t *cap = json_array_get(caps, i);
    const char *type = json_string_value(json_object_get(cap, "type"));
    if (json_is_object(cap) && type && strcmp(type, "skills") == 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "agent: \"capabilities[%zu]\": a skills capability "
                           "reads the server's own files or network, which "
                           "an agent sent over the API may not",
                           i);
  }
  static const char *const members[] = {"handoffs", "tools", NULL};
  for (size_t i = 0; members[i]; i++)
    if (json_array_size(json_object_get(agent, members[i])) > 0)
      return refuse_other_files(e);
  return 0;
}

int server_agent_load(const struct server *srv, json_t *agent, bool trusted,
                      struct agent_set **out, struct sbx_error *e) {
  *out = NULL;
  int r = refuse_references(agent, e);
  if (r < 0)
    return r;
  char dir[4200];
  int n = snprintf(dir, sizeof(dir), "%s/tmp", srv->cfg->state_dir);
  if (n < 0 || (size_t)n >= sizeof(dir) - 16)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "the state directory's path is too long");
  if (mkdir(dir, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_INTERNAL, errno, "cannot create \"%s\": %s",
                         dir, strerror(errno));
  (void)snprintf(dir + n, sizeof(dir) - (size_t)n, "/agent.XXXXXX");
  if (!mkdtemp(dir))
    return sbx_error_set(e, SBX_INTERNAL, errno,
                         "cannot make a directory in \"%s/tmp\": %s",
                         srv->cfg->state_dir, strerror(errno));
  char path[4300];
  (void)snprintf(path, sizeof(path), "%s/%s", dir, AGENT_NAME);
  _cleanup_free_ char *text = json_dumps(agent, JSON_COMPACT);
  r = text ? sbx_write_file_atomic(path, text, strlen(text), 0600) : -ENOMEM;
  if (r < 0)
    r = sbx_error_set(e, SBX_INTERNAL, -r, "cannot write \"%s\": %s", path,
                      strerror(-r));
  struct agent_set *set = NULL;
  if (r == 0 && (r = agent_load(path, &set, e)) < 0)
    tidy_message(e, path);
  (void)unlink(path);
  (void)rmdir(dir);
  if (r == 0 && set->n != 1)
    r = refuse_other_files(e);
  if (r == 0)
    r = refuse_host_paths(set->agents[0], e);
  if (r == 0 && !trusted && set->agents[0]->base_url)
    r = sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                      "agent: \"base_url\" would send the server's model API "
                      "key where a request says; the server's operator sets "
                      "where models are reached");
  if (r == 0 && !trusted && set->agents[0]->nmcp_servers)
    r = sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                      "agent: \"mcp_servers\" would have the server connect "
                      "where a request says, with the headers it says; the "
                      "server's operator sets which MCP servers are reached");
  if (r == 0 && !trusted && set->agents[0]->api_key_env)
    r = sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                      "agent: \"api_key_env\" would read the server's "
                      "environment; the server's operator sets the keys");
  if (r == 0 && set->agents[0]->n_run_ports)
    r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                      "agent: \"run_config.exposed_ports\" is not supported "
                      "by sbx serve: the sandboxes of its runs publish no "
                      "ports");
  const struct backend *b =
      r == 0 && !trusted ? backend_find(set->agents[0]->run_backend) : NULL;
  if (b)
    r = backend_options_check_api(b, set->agents[0]->run_options,
                                  "agent: run_config", e);
  if (r < 0) {
    agent_set_free(set);
    return r;
  }
  *out = set;
  return 0;
}
