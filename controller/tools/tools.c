/* The sandbox tools as one table: each tool's name, its definition as the
 * model sees it, the capability that offers it, and its handler, which
 * lives in its family's file (tools_internal.h lists them). The definitions
 * and the dispatch of a call both read the table. */
#include "controller/tools/tools.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "controller/telemetry/trace.h"
#include "controller/tools/tools_internal.h"
#include "shared/cleanup.h"

const char tools_generic_error[] =
    "An error occurred while running the tool. Please try again.";

/* ---- the table -------------------------------------------------------- */

/* What offers a tool: the agent's filesystem or shell capability, given to
 * tools_definitions as a flag each. */
enum tool_cap {
  TOOL_CAP_FILESYSTEM,
  TOOL_CAP_SHELL,
  TOOL_CAP_COUNT,
};

/* One property of a strict schema, where every property is required; a
 * nullable one may be null instead. */
struct tool_param {
  const char *key;
  const char *type; /* its JSON Schema type */
  bool nullable;
  const char *description;
};

/* One tool: what the model sees and what runs when it calls it. */
struct tool {
  const char *name;
  enum tool_cap cap;
  const char *description;
  /* Said instead where the API takes no structured tool output (the
   * SDK's text transport, Chat Completions), when it differs. */
  const char *text_description;
  /* The parameters: a strict schema of PARAMS (ended by an empty entry),
   * or else LOOSE_SCHEMA's, and the tool is not strict. */
  const struct tool_param *params;
  json_t *(*loose_schema)(void);
  /* Offered as {"type": HOSTED} instead where the API hosts the tool. */
  const char *hosted;
  const char *span; /* the sandbox.* span of a call */
  /* The handler: CALL gets the arguments as a JSON object (the call fails
   * as invalid when they are not one); CALL_TEXT gets them as sent. */
  json_t *(*call)(struct toolbox *t, json_t *args, struct tool_op *op);
  json_t *(*call_text)(struct toolbox *t, const char *args, struct tool_op *op);
};

static const struct tool_param view_image_params[] = {
    {"path", "string", false,
     "Path to an image file in the sandbox workspace or an explicitly granted "
     "sandbox path"},
    {0},
};

static const struct tool_param exec_command_params[] = {
    {"cmd", "string", false, "Shell command to execute."},
    {"workdir", "string", true,
     "Optional working directory to run the command in; defaults to the turn "
     "cwd."},
    {"shell", "string", true,
     "Shell binary to launch. Defaults to the user's default shell."},
    {"login", "boolean", false,
     "Whether to run the shell with -l/-i semantics. Defaults to true."},
    {"tty", "boolean", false,
     "Whether to allocate a TTY for the command. Defaults to false (plain "
     "pipes); set to true to open a PTY and access TTY process."},
    {"yield_time_ms", "number", false,
     "How long to wait (in milliseconds) for output before yielding."},
    {"max_output_tokens", "number", true,
     "Maximum number of tokens to return. Excess output will be truncated."},
    {0},
};

static const struct tool_param write_stdin_params[] = {
    {"session_id", "number", false,
     "Identifier of the running unified exec session."},
    {"chars", "string", false,
     "Bytes to write to stdin (may be empty to poll)."},
    {"yield_time_ms", "number", false,
     "How long to wait (in milliseconds) for output before yielding."},
    {"max_output_tokens", "number", true,
     "Maximum number of tokens to return. Excess output will be truncated."},
    {0},
};

/* The function-tool fallback's parameters for apply_patch: each shape of
 * input the handler accepts, none required, described in the SDK's words.
 * New, or NULL. */
static json_t *apply_patch_schema(void) {
  return json_pack(
      "{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:{s:s}, s:s}, "
      "s:{s:s, s:s}, s:{s:s, s:[s,s,s], s:s}, s:{s:s, s:s}, s:{s:s, s:s}, "
      "s:{s:s, s:s}}, s:[], s:b}",
      "type", "object", "properties",
      /* */
      "patch", "type", "string", "description",
      "A freeform apply_patch payload wrapped in *** Begin Patch and *** End "
      "Patch.",
      /* */
      "operation", "type", "object", "description",
      "A single structured apply_patch operation.",
      /* */
      "operations", "type", "array", "items", "type", "object", "description",
      "Structured apply_patch operations to apply in order.",
      /* */
      "command", "type", "array", "description",
      "Optional [\"apply_patch\", patch] command tuple form.",
      /* */
      "type", "type", "string", "enum", "create_file", "update_file",
      "delete_file", "description", "The patch operation to apply.",
      /* */
      "path", "type", "string", "description",
      "The sandbox file path to patch.",
      /* */
      "diff", "type", "string", "description",
      "The V4A patch diff for create_file and update_file operations.",
      /* */
      "moveTo", "type", "string", "description",
      "Optional destination path for update_file move operations.",
      /* */
      "required", "additionalProperties", 1);
}

/* The tools in the SDK's order, which is the order the model sees. */
static const struct tool tool_table[] = {
    {
        .name = "view_image",
        .cap = TOOL_CAP_FILESYSTEM,
        .description = "Returns an image output from a path in the sandbox "
                       "workspace or an explicitly granted sandbox path.",
        .text_description = "Returns an image from a path in the sandbox "
                            "workspace or an explicitly granted sandbox path "
                            "as a data URL or reference string.",
        .params = view_image_params,
        .span = TRACE_SANDBOX_VIEW_IMAGE,
        .call = tools_view_image,
    },
    {
        .name = "apply_patch",
        .cap = TOOL_CAP_FILESYSTEM,
        .description = "Applies a create, update, move, or delete file patch "
                       "in the sandbox workspace. Accepts a freeform "
                       "patch string or structured apply_patch "
                       "operations.",
        .loose_schema = apply_patch_schema,
        .hosted = "apply_patch",
        .span = TRACE_SANDBOX_APPLY_PATCH,
        .call_text = tools_apply_patch_call,
    },
    {
        .name = "exec_command",
        .cap = TOOL_CAP_SHELL,
        .description = "Runs a command in a PTY, returning output or a "
                       "session ID for ongoing interaction.",
        .params = exec_command_params,
        .span = TRACE_SANDBOX_EXEC,
        .call = tools_exec_command,
    },
    {
        .name = "write_stdin",
        .cap = TOOL_CAP_SHELL,
        .description = "Writes characters to an existing unified exec "
                       "session and returns recent output.",
        .params = write_stdin_params,
        .span = TRACE_SANDBOX_WRITE_STDIN,
        .call = tools_write_stdin,
    },
};

/* The tool called NAME, or NULL. */
static const struct tool *tool_find(const char *name) {
  for (size_t i = 0; i < SBX_ARRAY_SIZE(tool_table); i++)
    if (strcmp(tool_table[i].name, name) == 0)
      return &tool_table[i];
  return NULL;
}

/* ---- definitions ------------------------------------------------------- */

/* P's schema (new, or NULL): {"type", "description"}, or for a nullable
 * property {"description", "anyOf": [{"type", "description"}, {"type":
 * "null"}]}, the description kept in the branch as the SDK's zod schemas
 * render it. */
static json_t *param_schema(const struct tool_param *p) {
  if (p->nullable)
    return json_pack("{s:s, s:[{s:s, s:s}, {s:s}]}", "description",
                     p->description, "anyOf", "type", p->type, "description",
                     p->description, "type", "null");
  return json_pack("{s:s, s:s}", "type", p->type, "description",
                   p->description);
}

/* The strict schema of PARAMS: an object of exactly these properties, all
 * required. New, or NULL. */
static json_t *strict_schema(const struct tool_param *params) {
  _cleanup_json_ json_t *props = json_object();
  _cleanup_json_ json_t *req = json_array();
  if (!props || !req)
    return NULL;
  for (const struct tool_param *p = params; p->key; p++)
    if (json_object_set_new(props, p->key, param_schema(p)) < 0 ||
        json_array_append_new(req, json_string(p->key)) < 0)
      return NULL;
  return json_pack("{s:s, s:O, s:O, s:b, s:s}", "type", "object", "properties",
                   props, "required", req, "additionalProperties", 0, "$schema",
                   "http://json-schema.org/draft-07/schema#");
}

/* TOOL's definition, Responses format (new, or NULL): the hosted tool when
 * HOSTED_PATCH (the API takes hosted tools and structured output, as the
 * SDK's structured transport) and it has one, else the function tool. */
static json_t *definition(const struct tool *tool, bool hosted_patch) {
  const char *desc = !hosted_patch && tool->text_description
                         ? tool->text_description
                         : tool->description;
  if (hosted_patch && tool->hosted)
    return json_pack("{s:s}", "type", tool->hosted);
  _cleanup_json_ json_t *params =
      tool->params ? strict_schema(tool->params) : tool->loose_schema();
  if (!params)
    return NULL;
  return json_pack("{s:s, s:s, s:s, s:O, s:b}", "type", "function", "name",
                   tool->name, "description", desc, "parameters", params,
                   "strict", tool->params != NULL);
}

json_t *tools_definitions(bool filesystem, bool shell, bool hosted_patch) {
  const bool offered[TOOL_CAP_COUNT] = {
      [TOOL_CAP_FILESYSTEM] = filesystem,
      [TOOL_CAP_SHELL] = shell,
  };
  _cleanup_json_ json_t *tools = json_array();
  if (!tools)
    return NULL;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(tool_table); i++) {
    const struct tool *tool = &tool_table[i];
    if (offered[tool->cap] &&
        json_array_append_new(tools, definition(tool, hosted_patch)) < 0)
      return NULL;
  }
  return TAKE_PTR(tools);
}

/* ---- calls ------------------------------------------------------------- */

/* Records that the tool failed (its output tells the model why) and
 * returns OUT. */
json_t *tools_op_fail(struct tool_op *op, json_t *out, const char *fmt, ...) {
  if (op->failure->code == SBX_OK) {
    va_list ap;
    va_start(ap, fmt);
    (void)sbx_error_setv(op->failure, SBX_INTERNAL, EIO, fmt, ap);
    va_end(ap);
  }
  return out;
}

/* The generic message the SDK answers invalid arguments with. */
json_t *tools_op_invalid(struct tool_op *op) {
  return tools_op_fail(op, json_string(tools_generic_error),
                       "invalid arguments");
}

/* Starts the span of one tool invocation under CTX's span. */
void tools_op_begin(struct tool_op *op, struct tool_ctx *ctx,
                    struct sbx_error *scratch, const char *span_name,
                    const struct toolbox *t) {
  op->failure = ctx ? &ctx->failure : scratch;
  sbx_error_clear(op->failure);
  op->sp = trace_child(ctx ? ctx->span : NULL, span_name);
  trace_set_str(op->sp, "sandbox.session_id", t->sb->session_id);
}

/* Ends the span, marked as an error when the tool failed. */
void tools_op_end(struct tool_op *op) {
  if (op->failure->code != SBX_OK)
    trace_set_error(op->sp, "%s", op->failure->msg);
  trace_end(op->sp);
}

int tools_call(struct toolbox *t, const char *name, const char *args,
               json_t **output, struct tool_ctx *ctx) {
  const struct tool *tool = tool_find(name);
  if (!tool)
    return -ENOENT;
  struct sbx_error scratch;
  struct tool_op op;
  tools_op_begin(&op, ctx, &scratch, tool->span, t);
  if (tool->call_text) {
    *output = tool->call_text(t, args ? args : "", &op);
  } else {
    json_error_t je;
    _cleanup_json_ json_t *a = json_loads(args ? args : "", 0, &je);
    *output = json_is_object(a) ? tool->call(t, a, &op) : tools_op_invalid(&op);
  }
  if (!*output)
    (void)tools_op_fail(&op, NULL, "out of memory");
  tools_op_end(&op);
  return *output ? 0 : -ENOMEM;
}
