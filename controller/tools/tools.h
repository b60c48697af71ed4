/* The sandbox tools the model calls: exec_command, write_stdin,
 * apply_patch and view_image, with the SDK's schemas, defaults, clamps,
 * output text and error strings, bound to one sandbox session through the
 * sandboxd client.
 *
 * Thread-safety: the functions may run concurrently for one toolbox (the
 * runner runs a response's calls in parallel); the exec session table is
 * locked inside. */
#ifndef SBX_TOOLS_H
#define SBX_TOOLS_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller/backend/backend.h"
#include "shared/errors.h"

struct trace_span;

#define TOOLS_MAX_EXEC_SESSIONS 64
#define TOOLS_VIEW_IMAGE_MAX (10u << 20)

struct tool_exec_session {
  int id;           /* the model's session id, from 1 */
  uint64_t exec_id; /* sandboxd's */
  uint64_t offset;  /* next byte to report */
  bool tty;
  uint64_t last_used;
};

struct toolbox {
  struct sandbox *sb; /* borrowed */
  const char *cwd;    /* workspace-relative run cwd, or NULL */
  const char *run_as; /* or NULL */
  bool text_images;   /* view_image returns the data URL as text (chat) */
  pthread_mutex_t mu;
  struct tool_exec_session sessions[TOOLS_MAX_EXEC_SESSIONS];
  size_t nsessions;
  int next_id;
};

void toolbox_init(struct toolbox *t, struct sandbox *sb, const char *cwd,
                  const char *run_as, bool text_images);
/* Kills and releases every process still running (for close). */
void toolbox_fini(struct toolbox *t);
/* Forgets the running sessions without killing them (for a pause). */
void toolbox_detach(struct toolbox *t);

/* The running exec sessions as JSON (new): {"next_id", "sessions":
 * [{"id", "exec_id", "offset", "tty"}]}, so a resumed run picks each process
 * up by its exec id and output offset. NULL when out of memory. */
json_t *toolbox_save(struct toolbox *t);
/* Restores what toolbox_save wrote; unknown or malformed entries are
 * skipped. */
void toolbox_load(struct toolbox *t, json_t *j);

/* The function tool definitions, in the SDK's order (view_image,
 * apply_patch, exec_command, write_stdin), Responses format: FILESYSTEM
 * offers view_image and apply_patch, SHELL exec_command and write_stdin.
 * With HOSTED_PATCH apply_patch is {"type":"apply_patch"}; otherwise the
 * function-tool fallback, and view_image is described as the SDK's text
 * transport describes it (a data URL). New array, or NULL on OOM. */
json_t *tools_definitions(bool filesystem, bool shell, bool hosted_patch);

/* One tool call's context (may be NULL where nobody asks): the span the
 * call's sandbox.* span goes under, and how the call ended. */
struct tool_ctx {
  struct trace_span *span;  /* in, borrowed, may be NULL */
  struct sbx_error failure; /* out: code SBX_OK, or the tool failed and
                               msg says why (the output tells the model) */
};

/* Runs the function tool NAME with the JSON ARGS string. *OUTPUT is new:
 * a string, or for view_image an array [{"type":"input_image",...}].
 * Returns 0; a tool failure is reported in *OUTPUT as the SDK reports it
 * (the generic message for invalid input) and in CTX->failure. -ENOENT
 * when NAME is not a sandbox tool. The call is traced as sandbox.exec,
 * sandbox.write_stdin, sandbox.view_image or sandbox.apply_patch. */
int tools_call(struct toolbox *t, const char *name, const char *args,
               json_t **output, struct tool_ctx *ctx);

/* Applies a hosted apply_patch operation ({"type":"create_file"|
 * "update_file"|"delete_file", path, diff, move_to}). *STATUS is
 * "completed" or "failed"; *OUTPUT is new text (may be NULL on success).
 * Traced as sandbox.apply_patch; a failure is also in CTX->failure. */
int tools_apply_patch_operation(struct toolbox *t, json_t *operation,
                                const char **status, char **output,
                                struct tool_ctx *ctx);

/* The generic message for a tool that failed. */
extern const char tools_generic_error[];

/* ---- host tools: command.c -------------------------------------------- */

struct agent_command;

/* The Python SDK's words for a host tool that failed
 * (default_tool_error_function): "An error occurred while running the
 * tool. Please try again. Error: " and, for arguments that are not JSON,
 * "An error occurred while parsing tool arguments. Please try again with
 * valid JSON. Error: ". */
extern const char tools_error_prefix[];
extern const char tools_args_error_prefix[];

/* The output (new) of a host tool that failed: PREFIX and the message,
 * which also goes to CTX->failure (CTX may be NULL). NULL on OOM. */
__attribute__((format(printf, 3, 4))) json_t *
tools_host_failure(struct tool_ctx *ctx, const char *prefix, const char *fmt,
                   ...);

/* Runs the command tool T with ARGS, the model's arguments text: the
 * program gets them on stdin and its stdout is *OUTPUT (new string). A
 * failure (bad JSON, timeout, output over 1 MiB, a non-zero exit) is
 * reported in *OUTPUT and CTX->failure. 0, or -ENOMEM. */
int tools_command_call(const struct agent_command *t, const char *args,
                       json_t **output, struct tool_ctx *ctx);

/* Runs ARGV (a command tool's or a guardrail's) on the controller's host
 * in DIR with IN on its stdin, for at most TIMEOUT_S seconds: its stdout
 * (new, NUL-terminated, at most 1 MiB, not checked for UTF-8) in *OUT and
 * its length in *LEN. A failure to start, a timeout (its process group is
 * killed), output over 1 MiB or a non-zero exit is a negative errno with E
 * saying so ("the command exited with status 3: <its last stderr
 * line>"). Thread-safe. */
int tools_host_command(char *const argv[], const char *dir, int64_t timeout_s,
                       const char *in, size_t inlen, char **out, size_t *len,
                       struct sbx_error *e);

#endif
