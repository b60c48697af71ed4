/* What the files of controller/tools/ share, internal to the folder: one
 * tool invocation (its sandbox.* span and how it ended), the readers of a
 * call's JSON arguments, the toolbox's exec session table, and each tool
 * family's handler:
 *   tools.c       the table of tools: definitions and dispatch
 *   exec.c        exec_command and write_stdin (the shell tools)
 *   view_image.c  view_image
 *   apply_patch.c apply_patch, as a function tool and as the hosted tool
 *   toolbox.c     the toolbox and its running exec sessions
 *   args.c        reading a call's arguments
 * and the host tools, which run on the controller's host (tools.h, mcp.h):
 *   command.c     command tools
 *   host_proc.c   starting and stopping their programs (host_proc.h)
 *   mcp_client.c  MCP servers: the protocol and an agent's set of servers
 *   mcp_stdio.c   the stdio transport (mcp_internal.h)
 *   mcp_http.c    the Streamable HTTP transport */
#ifndef SBX_TOOLS_INTERNAL_H
#define SBX_TOOLS_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller/tools/tools.h"
#include "shared/buf.h"
#include "shared/errors.h"

struct trace_span;

/* One tool invocation: the sandbox.* span around it and how it ended. */
struct tool_op {
  struct trace_span *sp;     /* may be NULL */
  struct sbx_error *failure; /* never NULL; the first failure is kept */
};

/* ---- tools.c ----------------------------------------------------------- */

/* Starts the span of one tool invocation under CTX's span; SCRATCH holds
 * the failure when CTX is NULL. */
void tools_op_begin(struct tool_op *op, struct tool_ctx *ctx,
                    struct sbx_error *scratch, const char *span_name,
                    const struct toolbox *t);
/* Ends the span, marked with the failure if there was one. */
void tools_op_end(struct tool_op *op);
/* Records that the tool failed (its output tells the model why) and
 * returns OUT. */
__attribute__((format(printf, 3, 4))) json_t *
tools_op_fail(struct tool_op *op, json_t *out, const char *fmt, ...);
/* The SDK's answer to invalid arguments (new), recorded as a failure. */
json_t *tools_op_invalid(struct tool_op *op);

/* ---- args.c ------------------------------------------------------------ */

/* Reads an optional integer ≥ MIN; absent or null gives DEF. False when the
 * value is present but not a whole number ≥ MIN. */
bool tools_opt_int(json_t *args, const char *key, int64_t min, int64_t def,
                   int64_t *out);
/* Reads an optional boolean; absent or null gives DEF. False when the value
 * is present but not a boolean. */
bool tools_opt_bool(json_t *args, const char *key, bool def, bool *out);
/* Reads an optional string (borrowed); absent or null gives NULL. False
 * when the value is present but not a string. */
bool tools_opt_str(json_t *args, const char *key, const char **out);
/* Anchors a model path to the run's cwd as the SDK does: relative paths
 * join the cwd, empty is the cwd, absolute stays. New string, or NULL when
 * out of memory. */
char *tools_anchor(const struct toolbox *t, const char *p);

/* The text in B as a JSON string (new), or NULL when out of memory. */
static inline json_t *tools_text_output(struct sbx_buf *b) {
  return json_stringn(b->data ? b->data : "", b->len);
}

/* ---- toolbox.c --------------------------------------------------------- */

/* Remembers a running process; prunes the least recently used when full.
 * Returns the model's session id for it. */
int tools_session_add(struct toolbox *t, uint64_t exec_id, uint64_t offset,
                      bool tty);
/* Copies session ID into *OUT and marks it used; false when there is none. */
bool tools_session_get(struct toolbox *t, int64_t id,
                       struct tool_exec_session *out);
/* After a read of session ID up to OFFSET: forgets it when the process
 * EXITED, else remembers where the next read starts. */
void tools_session_update(struct toolbox *t, int64_t id, uint64_t offset,
                          bool exited);

/* ---- the handlers ------------------------------------------------------ */

/* Each runs one call with ARGS (a JSON object, borrowed) and returns its
 * output (new), or NULL when out of memory; a tool failure is in the output
 * and recorded in OP. */
json_t *tools_exec_command(struct toolbox *t, json_t *args, struct tool_op *op);
json_t *tools_write_stdin(struct toolbox *t, json_t *args, struct tool_op *op);
json_t *tools_view_image(struct toolbox *t, json_t *args, struct tool_op *op);

/* apply_patch as a function tool: RAW is the call's arguments as the model
 * sent them, a freeform patch or JSON. Output new, NULL when out of
 * memory. */
json_t *tools_apply_patch_call(struct toolbox *t, const char *raw,
                               struct tool_op *op);

#endif
