/* The sandbox tools as the model sees them and the dispatch of its calls
 * to their handlers (tools_internal.h lists the files of each family). */
#include "controller/tools/tools.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "controller/telemetry/trace.h"
#include "controller/tools/tools_internal.h"
#include "shared/cleanup.h"

const char tools_generic_error[] =
    "An error occurred while running the tool. Please try again.";

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

/* ---- schemas ----------------------------------------------------------- */

static json_t *nullable(const char *type, const char *description) {
  return json_pack("{s:s, s:[{s:s}, {s:s}]}", "description", description,
                   "anyOf", "type", type, "type", "null");
}

static json_t *function_tool(const char *name, const char *description,
                             json_t *parameters, bool strict) {
  return json_pack("{s:s, s:s, s:s, s:o, s:b}", "type", "function", "name",
                   name, "description", description, "parameters", parameters,
                   "strict", strict);
}

static json_t *strict_object(json_t *props, const char *const *required) {
  json_t *req = json_array();
  for (size_t i = 0; required[i]; i++)
    json_array_append_new(req, json_string(required[i]));
  return json_pack("{s:s, s:o, s:o, s:b, s:s}", "type", "object", "properties",
                   props, "required", req, "additionalProperties", 0, "$schema",
                   "http://json-schema.org/draft-07/schema#");
}

json_t *tools_definitions(bool filesystem, bool shell, bool hosted_patch) {
  json_t *tools = json_array();
  if (!tools)
    return NULL;
  if (filesystem) {
    static const char *const vreq[] = {"path", NULL};
    json_t *vp = json_pack(
        "{s:{s:s, s:s}}", "path", "type", "string", "description",
        "Path to an image file in the sandbox workspace or an explicitly "
        "granted sandbox path");
    json_array_append_new(
        tools,
        function_tool("view_image",
                      "Returns an image output from a path in the sandbox "
                      "workspace or an explicitly granted sandbox path.",
                      strict_object(vp, vreq), true));
    if (hosted_patch) {
      json_array_append_new(tools, json_pack("{s:s}", "type", "apply_patch"));
    } else {
      json_t *pp = json_pack(
          "{s:{s:s, s:s}, s:{s:s}, s:{s:s, s:{s:s}}, s:{s:s}, s:{s:s, "
          "s:[s,s,s]},"
          " s:{s:s}, s:{s:s}, s:{s:s}}",
          "patch", "type", "string", "description",
          "A freeform apply_patch payload wrapped in *** Begin Patch and *** "
          "End Patch.",
          "operation", "type", "object", "operations", "type", "array", "items",
          "type", "object", "command", "type", "array", "type", "type",
          "string", "enum", "create_file", "update_file", "delete_file", "path",
          "type", "string", "diff", "type", "string", "moveTo", "type",
          "string");
      json_t *params =
          json_pack("{s:s, s:o, s:[], s:b}", "type", "object", "properties", pp,
                    "required", "additionalProperties", 1);
      json_array_append_new(
          tools,
          function_tool("apply_patch",
                        "Applies a create, update, move, or delete file patch "
                        "in the sandbox workspace. Accepts a freeform "
                        "apply_patch payload or structured apply_patch "
                        "operations.",
                        params, false));
    }
  }
  if (shell) {
    static const char *const ereq[] = {
        "cmd",           "workdir",           "shell", "login", "tty",
        "yield_time_ms", "max_output_tokens", NULL};
    json_t *ep = json_object();
    json_object_set_new(ep, "cmd",
                        json_pack("{s:s, s:s}", "type", "string", "description",
                                  "Shell command to execute."));
    json_object_set_new(
        ep, "workdir",
        nullable("string", "Optional working directory to run the command "
                           "in; defaults to the turn cwd."));
    json_object_set_new(ep, "shell",
                        nullable("string", "Shell binary to launch. Defaults "
                                           "to the user's default shell."));
    json_object_set_new(ep, "login",
                        nullable("boolean", "Whether to run the shell with "
                                            "-l/-i semantics. Defaults to "
                                            "true."));
    json_object_set_new(
        ep, "tty",
        nullable("boolean",
                 "Whether to allocate a TTY for the command. Defaults to "
                 "false (plain pipes); set to true to open a PTY and access "
                 "TTY process."));
    json_object_set_new(ep, "yield_time_ms",
                        nullable("number", "How long to wait (in "
                                           "milliseconds) for output before "
                                           "yielding."));
    json_object_set_new(ep, "max_output_tokens",
                        nullable("number", "Maximum number of tokens to "
                                           "return. Excess output will be "
                                           "truncated."));
    json_array_append_new(
        tools, function_tool("exec_command",
                             "Runs a command in a PTY, returning output or a "
                             "session ID for ongoing interaction.",
                             strict_object(ep, ereq), true));
    static const char *const wreq[] = {"session_id", "chars", "yield_time_ms",
                                       "max_output_tokens", NULL};
    json_t *wp = json_object();
    json_object_set_new(wp, "session_id",
                        json_pack("{s:s, s:s}", "type", "number", "description",
                                  "Identifier of the running unified exec "
                                  "session."));
    json_object_set_new(wp, "chars",
                        nullable("string", "Bytes to write to stdin (may be "
                                           "empty to poll)."));
    json_object_set_new(wp, "yield_time_ms",
                        nullable("number", "How long to wait (in "
                                           "milliseconds) for output before "
                                           "yielding."));
    json_object_set_new(wp, "max_output_tokens",
                        nullable("number", "Maximum number of tokens to "
                                           "return. Excess output will be "
                                           "truncated."));
    json_array_append_new(
        tools, function_tool("write_stdin",
                             "Writes characters to an existing unified exec "
                             "session and returns recent output.",
                             strict_object(wp, wreq), true));
  }
  return tools;
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
  json_t *(*fn)(struct toolbox *, json_t *, struct tool_op *) = NULL;
  const char *span_name = TRACE_SANDBOX_APPLY_PATCH;
  if (strcmp(name, "apply_patch") == 0) {
    fn = NULL;
  } else if (strcmp(name, "exec_command") == 0) {
    fn = tools_exec_command;
    span_name = TRACE_SANDBOX_EXEC;
  } else if (strcmp(name, "write_stdin") == 0) {
    fn = tools_write_stdin;
    span_name = TRACE_SANDBOX_WRITE_STDIN;
  } else if (strcmp(name, "view_image") == 0) {
    fn = tools_view_image;
    span_name = TRACE_SANDBOX_VIEW_IMAGE;
  } else {
    return -ENOENT;
  }
  struct sbx_error scratch;
  struct tool_op op;
  tools_op_begin(&op, ctx, &scratch, span_name, t);
  if (!fn) {
    *output = tools_apply_patch_call(t, args ? args : "", &op);
  } else {
    json_error_t je;
    _cleanup_json_ json_t *a = json_loads(args ? args : "", 0, &je);
    *output = json_is_object(a) ? fn(t, a, &op) : tools_op_invalid(&op);
  }
  if (!*output)
    (void)tools_op_fail(&op, NULL, "out of memory");
  tools_op_end(&op);
  return *output ? 0 : -ENOMEM;
}
