/* Private to controller/config/agent*.c: the loader (agent.c) reads the
 * files and follows their references; the fields (agent_fields.c) check
 * and read one file's keys. Every failure names the file (struct
 * agent_ctx) and, where there is one, the key. */
#ifndef SBX_AGENT_INTERNAL_H
#define SBX_AGENT_INTERNAL_H

#include <jansson.h>

#include "controller/config/agent.h"
#include "shared/errors.h"

#define KEY_MAX 160 /* a key path in a message, e.g. "tools[3].name" */

/* The file being read: its path for messages, and where they go. */
struct agent_ctx {
  const char *path;
  struct sbx_error *e;
};

/* Fails with a message about the file: "<path>: <message>". */
int agent_fail(const struct agent_ctx *c, enum sbx_code code, int err,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* A bad key or value: -EINVAL. */
int agent_invalid(const struct agent_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* -ENOMEM, said about the file. */
int agent_nomem(const struct agent_ctx *c);
/* "\"KEY\" must be EXPECTED (got <V's kind>)": -EINVAL. */
int agent_wrong_type(const struct agent_ctx *c, const char *key,
                     const char *expected, const json_t *v);
/* Writes a key path such as "tools[2].name" for messages into K (KEY_MAX
 * bytes); a long one is cut short. */
void agent_key_path(char *k, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reads the agent object ROOT of file C into A (zeroed but for its path
 * and identity), from the defaults: every key known and checked. References
 * (handoffs, tools) are kept as paths for the loader to follow. */
int agent_parse(const struct agent_ctx *c, struct agent *a, json_t *root);

/* agent_tools.c: the tools that run on the controller's host. */

/* Reads the {"type": "command", ...} entry V of "tools" (KEY names it)
 * into T. */
int agent_parse_command(const struct agent_ctx *c, struct agent_command *t,
                        const char *key, json_t *v);
/* Reads "mcp_servers". */
int agent_parse_mcp_servers(const struct agent_ctx *c, struct agent *a,
                            const char *key, json_t *v);
/* The "command" array V (KEY names it) of a program on the controller's
 * host into *ARGV (new, NULL-terminated), with argv[0] taken from the
 * agent file's directory when it is a relative path with a slash, and
 * that directory, absolute, into *DIR (new): the program's cwd. */
int agent_get_program(const struct agent_ctx *c, const char *key, json_t *v,
                      char ***argv, char **dir);
/* A timeout of 1..3600 whole seconds. */
int agent_get_timeout(const struct agent_ctx *c, const char *key, json_t *v,
                      int64_t *out);
/* Frees a NULL-terminated vector; accepts NULL; returns NULL. */
char **agent_strv_free(char **v);

/* agent_guardrails.c: "input_guardrails" and "output_guardrails". */
int agent_parse_guardrails(const struct agent_ctx *c, struct agent *a,
                           const char *key, json_t *v);
/* Frees A's guardrails. */
void agent_guardrails_free(struct agent *a);

/* Frees A's commands and MCP servers. */
void agent_host_tools_free(struct agent *a);
/* The OpenAI function name rule: [A-Za-z0-9_-]{1,64}. */
bool agent_valid_tool_name(const char *s);

/* A {"type": "skills", ...} entry V of "capabilities" (agent_skills.c,
 * skills.h), KEY naming it: read into a->skills. */
int agent_parse_skills(const struct agent_ctx *c, struct agent *a,
                       const char *key, json_t *v);

/* Refuses a default_manifest entry of A that overlaps its skills_path
 * (the SDK's processManifest); after the whole file is read. */
int agent_check_skills(const struct agent_ctx *c, const struct agent *a);

/* "model_settings" (agent_settings.c): checks V and keeps it in A. */
int agent_parse_model_settings(const struct agent_ctx *c, struct agent *a,
                               const char *key, json_t *v);
/* Refuses a setting of A that A's API cannot carry; after the whole file
 * is read, since "api" may come after "model_settings". */
int agent_check_model_settings(const struct agent_ctx *c,
                               const struct agent *a);

/* agent_memory.c: the memory capability V of "capabilities" (KEY names
 * it): the string "memory" (NULL V: the defaults) or the object
 * {"type": "memory", ...}, into a->memory. */
int agent_parse_memory(const struct agent_ctx *c, struct agent *a,
                       const char *key, json_t *v);
/* Refuses a memory capability without the capabilities it needs, once
 * "capabilities" is read. */
int agent_check_memory(const struct agent_ctx *c, const struct agent *a);

#endif
