/* Agent definition files.
 *
 * An agent is a JSON object with the Python Agents SDK's snake_case names:
 *
 *   name               string, required
 *   model              string
 *   instructions       string
 *   base_instructions  string (replaces the default sandbox instructions)
 *   default_manifest   object (kept as JSON; the manifest module parses it)
 *   capabilities       array of "filesystem" | "shell" | "compaction" |
 *                      {"type": "skills", ...} (skills.h) | "memory" |
 *                      {"type": "memory", "layout", "read", "generate"}
 *                      (struct agent_memory), in order, no repeats;
 *                      default ["filesystem", "shell", "compaction"]
 *   run_as             string, or {"name": string}: a user name
 *   model_settings     the Python SDK's ModelSettings (docs/
 *                      sdk-compatibility.md): temperature, top_p,
 *                      frequency_penalty, presence_penalty, tool_choice,
 *                      parallel_tool_calls, truncation, max_tokens,
 *                      reasoning {effort, summary}, verbosity, metadata,
 *                      store, prompt_cache_retention, include_usage,
 *                      response_include, top_logprobs, extra_query,
 *                      extra_body, extra_headers; a key the agent's "api"
 *                      cannot carry is refused. Absent: the SDK's defaults
 *                      for the model (model_default_settings)
 *   output_type        object (a JSON schema for the final output)
 *   prompt             {"id", "version"?, "variables"?: {name: string or
 *                       input content}}: the Responses API's reusable
 *                      prompt; refused with "api": "chat_completions"
 *   max_turns          integer >= 1: the turn limit of a run this agent
 *                      starts (the first file, an agent used as a tool, a
 *                      guard agent); refused on one reached only by
 *                      handoff, where it would do nothing
 *   handoffs           array of paths to agent files
 *   tools              array of {"type": "agent_as_tool", "agent": path,
 *                       "name"?: [A-Za-z0-9_-]{1,64}, "description"?: string,
 *                       "max_turns"?: integer >= 1,
 *                       "run_config"?: {"sandbox": "parent"}: the nested
 *                       run works in the calling agent's sandbox; the
 *                       calling agent must have one (the filesystem or
 *                       shell capability, or a manifest), the agent used
 *                       must have the filesystem or shell capability, and
 *                       neither it nor an agent it hands off to a
 *                       default_manifest}
 *                      or {"type": "command", "name", "description"?,
 *                       "parameters"?: a JSON schema object,
 *                       "command": [argv...], "timeout_s"?: 1..3600}
 *   mcp_servers        array of {"name", "type": "stdio", "command",
 *                       "args"?, "env"?, "cwd"?, ...} or {"name", "type":
 *                       "streamable_http", "url", "headers"?, ...} where
 *                       ... is "allowed_tools"?, "blocked_tools"?,
 *                       "require_approval"?,
 *                       "client_session_timeout_seconds"?,
 *                       "use_structured_content"? (agent_tools.c)
 *   api                "responses" (default) | "chat_completions"
 *   base_url           "http://..." or "https://..."
 *   api_key_env        the name of the environment variable that holds this
 *                      agent's API key (default OPENAI_API_KEY)
 *   approvals          {<tool name>: "always" | "never" | [command prefix...]};
 *                      a name that is none of the agent's tools (its MCP
 *                      servers' included) fails its first turn as a
 *                      configuration error (run/request.c)
 *   input_guardrails   array of {"name": [A-Za-z0-9_-]{1,64}, and either
 *   output_guardrails   "agent": path (a guard agent whose output_type
 *                       gives a boolean "tripwire_triggered" and optionally
 *                       "output_info") or "command": [argv...] with
 *                       "timeout_s"?: 1..3600 (a program on the
 *                       controller's host)} (agent_guardrails.c)
 *   run_config         {"backend": name, "exposed_ports": [port...],
 *                      ...that backend's options}: the defaults of
 *                      `sbx run` and `sbx sandbox create --agent`; the
 *                      ports are every backend's (as --expose), the rest
 *                      is checked by the backend
 *                      ("sandbox" belongs in an agent_as_tool entry's)
 *   version            1 (optional)
 *
 * Keys are optional unless marked required; null is the same as leaving an
 * optional key out. Unknown keys are errors.
 *
 * Relative paths are relative to the directory of the file that names them.
 * Handoff and tool files are loaded too, each file once (by device and inode),
 * so handoffs may form cycles: agents point at each other. A cycle that goes
 * through an agent_as_tool reference is refused, since each such call nests a
 * new run without end.
 *
 * Every error names the file and, where there is one, the key:
 *   agents/a.json: unknown key "modle"
 *   agents/a.json: "max_turns" must be an integer (got string)
 *   agents/a.json: "model_settings.temperature" must be between 0 and 2 ...
 *
 * Not thread-safe while loading; a loaded set is read-only and may be shared
 * between threads. */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/errors.h"

#define AGENT_MAX_FILE_BYTES (4u << 20) /* one agent file */
#define AGENT_MAX_AGENTS 64             /* files in one set */
#define AGENT_MAX_DEPTH 16              /* references from the first file */
#define AGENT_MAX_LIST 256 /* entries in one array or approvals object */
#define AGENT_MAX_PORTS 64 /* run_config.exposed_ports */

enum agent_capability {
  AGENT_CAP_FILESYSTEM,
  AGENT_CAP_SHELL,
  AGENT_CAP_COMPACTION,
  AGENT_CAP_SKILLS,
  AGENT_CAP_MEMORY,
  AGENT_CAP_COUNT
};

enum agent_api {
  AGENT_API_RESPONSES,
  AGENT_API_CHAT_COMPLETIONS,
};

enum agent_approval_mode {
  AGENT_APPROVAL_ALWAYS,
  AGENT_APPROVAL_NEVER,
  AGENT_APPROVAL_PREFIXES, /* prefixes: the approvals module decides */
};

struct agent_approval {
  char *tool;
  enum agent_approval_mode mode;
  char **prefixes; /* non-empty strings */
  size_t nprefixes;
};

struct agent;

/* The memory capability ("memory", or {"type": "memory", ...} with the
 * Python SDK's Memory fields): what is read into the instructions and
 * what is generated at the end of a run. Strings are owned. */
struct agent_memory {
  bool read;                  /* "read" not null/false */
  bool live_update;           /* read.live_update (default true) */
  bool generate;              /* "generate" not null/false */
  char *memories_dir;         /* layout.memories_dir, normalized ("memories") */
  char *sessions_dir;         /* layout.sessions_dir ("sessions") */
  char *summary_file;         /* layout.summary_file ("memory_summary.md") */
  int64_t max_raw_memories;   /* 1..4096 (256) */
  char *phase_one_model;      /* ("gpt-5.4-mini") */
  char *phase_two_model;      /* ("gpt-5.4") */
  json_t *phase_one_settings; /* checked model_settings (owned) */
  json_t *phase_two_settings;
  int64_t phase_two_max_turns; /* (500) */
  char *extra_prompt;          /* or NULL */
};

/* {"type": "agent_as_tool", ...}. */
struct agent_tool {
  char *agent_path;    /* as written in the file */
  struct agent *agent; /* borrowed from the set */
  char *name;          /* NULL: derive one from the agent's name */
  char *description;   /* NULL when not given */
  int64_t max_turns;   /* 0 when not given */
  /* "run_config": {"sandbox": "parent"}: the nested run works in the
   * calling agent's live sandbox instead of one of its own. */
  bool parent_sandbox;
};

/* {"type": "command", ...}: a tool whose handler is a program run on the
 * controller's host (trusted configuration), with the call's arguments as
 * JSON on its stdin and its stdout as the output. */
struct agent_command {
  char *name;
  char *description;  /* "" when not given */
  json_t *parameters; /* a JSON schema object, owned */
  char **argv;        /* NULL-terminated; argv[0] resolved against the
                         file's directory when it is a relative path with a
                         slash, else looked up in PATH */
  char *dir;          /* the agent file's directory: the command's cwd */
  int64_t timeout_s;
};

/* One of "input_guardrails" or "output_guardrails": a check of the run's
 * input or of the agent's final output that may stop the run (its
 * tripwire). Exactly one of AGENT (a guard agent, run as a nested run) and
 * ARGV (a program on the controller's host) is set. */
struct agent_guardrail {
  char *name;
  char *agent_path;    /* as written, or NULL */
  struct agent *agent; /* borrowed from the set, or NULL */
  char **argv;         /* NULL-terminated, or NULL; argv[0] resolved as a
                          command tool's */
  char *dir;           /* the agent file's directory: the command's cwd */
  int64_t timeout_s;
};

enum agent_mcp_type {
  AGENT_MCP_STDIO,
  AGENT_MCP_STREAMABLE_HTTP,
};

/* One of "require_approval"'s per-tool settings. */
struct agent_mcp_approval {
  char *tool;
  bool always;
};

/* One of "mcp_servers": an MCP server the controller starts on its host
 * (stdio) or connects to (streamable_http), whose tools the agent
 * offers. */
struct agent_mcp_server {
  char *name;
  enum agent_mcp_type type;
  /* stdio: */
  char **argv; /* "command" then "args", NULL-terminated */
  char **env;  /* "KEY=VALUE", NULL-terminated, or NULL */
  char *cwd;   /* resolved against the file's directory */
  /* streamable_http: */
  char *url;
  char **headers; /* "Name: value", NULL-terminated, or NULL */
  /* both: */
  char **allowed;       /* NULL-terminated, or NULL: every tool */
  char **blocked;       /* NULL-terminated, or NULL */
  bool approval_always; /* the default of "require_approval" */
  struct agent_mcp_approval *approvals; /* per tool */
  size_t napprovals;
  int64_t timeout_ms; /* client_session_timeout_seconds */
  bool use_structured_content;
};

/* One loaded file. Strings are NUL-terminated and NULL when not given. */
struct agent {
  size_t index; /* position in agent_set.agents */
  char *path;   /* the path it was opened by */
  dev_t dev;    /* identity of the file */
  ino_t ino;

  char *name;
  char *model;
  char *instructions;
  char *base_instructions;
  json_t *default_manifest; /* object, owned reference, or NULL */
  enum agent_capability capabilities[AGENT_CAP_COUNT];
  size_t ncapabilities;
  struct agent_skills *skills; /* the skills capability's, or NULL */
  char *run_as;                /* trimmed */
  json_t *model_settings;      /* the checked object without nulls (owned), or
                                  NULL when the file gives none */
  json_t *output_type;         /* object, owned reference, or NULL */
  json_t *prompt;       /* the reusable prompt {id, version, variables} (owned),
                           or NULL */
  int64_t max_turns;    /* 0 when not given: the runner's default applies */
  char **handoff_paths; /* as written, parallel to handoffs */
  struct agent **handoffs; /* borrowed from the set, no repeats */
  size_t nhandoffs;
  struct agent_tool *tools; /* the agent_as_tool entries of "tools" */
  size_t ntools;
  struct agent_command *commands; /* the command entries of "tools" */
  size_t ncommands;
  struct agent_mcp_server *mcp_servers;
  size_t nmcp_servers;
  struct agent_guardrail *input_guardrails; /* in file order */
  size_t ninput_guardrails;
  struct agent_guardrail *output_guardrails;
  size_t noutput_guardrails;
  enum agent_api api;
  char *base_url;
  char *api_key_env; /* an environment variable's name, or NULL */
  /* "run_config": defaults for `sbx run` that its flags replace. */
  char *run_backend;   /* the backend's name, or NULL */
  json_t *run_options; /* the backend's options (an object, owned), or
                          NULL when none is given */
  uint16_t run_ports[AGENT_MAX_PORTS]; /* "exposed_ports", 1..65535 */
  size_t n_run_ports;
  struct agent_approval *approvals; /* in file order */
  size_t napprovals;
  struct agent_memory *memory; /* with the memory capability, else NULL */
};

/* Every agent reachable from one file. agents[0] is that file; agents[i]
 * has index i. The set owns the agents and everything they hold. */
struct agent_set {
  struct agent *agents[AGENT_MAX_AGENTS];
  size_t n;
};

/* Loads the agent file PATH and every file it references into *OUT (new;
 * free with agent_set_free). Returns 0, or a negative errno with E (may be
 * NULL) saying what and where:
 *   -ENOENT, -EACCES, ...  a file cannot be opened or read
 *   -EINVAL                not a regular file; bad JSON; a bad key or value;
 *                          a cycle through agent_as_tool
 *   -EFBIG                 a file over AGENT_MAX_FILE_BYTES
 *   -E2BIG                 over AGENT_MAX_AGENTS files, AGENT_MAX_DEPTH
 *                          levels or AGENT_MAX_LIST entries
 *   -ENOMEM
 * *OUT is left alone on failure. */
int agent_load(const char *path, struct agent_set **out, struct sbx_error *e);

/* Frees S and its agents; accepts NULL; returns NULL. */
struct agent_set *agent_set_free(struct agent_set *s);

/* The name used in files: "filesystem", "shell", ...; NULL if out of range. */
const char *agent_capability_name(enum agent_capability c);

/* Frees M; accepts NULL. */
void agent_memory_free(struct agent_memory *m);
/* Agent A's manifest MANIFEST (borrowed JSON, NULL for none) with the
 * memory capability's directories added as dir entries where no entry
 * overlaps them, as the SDK's processManifest does: the memories
 * directory (with live updates or generation) and the sessions directory
 * (with generation). New reference; NULL on OOM. */
json_t *agent_memory_manifest(const struct agent *a, json_t *manifest);

/* A's command tool NAME, or NULL (borrowed). */
const struct agent_command *agent_find_command(const struct agent *a,
                                               const char *name);

/* The approval entry for TOOL in A, or NULL (borrowed). */
const struct agent_approval *agent_find_approval(const struct agent *a,
                                                 const char *tool);

#endif
