/* The apply_patch tool, in both forms the model may call it: as a function
 * tool, whose input is a "*** Begin Patch" text or JSON holding one or more
 * SDK operations, and as the hosted tool, one operation per call. Either way
 * the patch goes to sandboxd, which applies it all or nothing. */
#include <errno.h>
#include <string.h>

#include "controller/telemetry/trace.h"
#include "controller/tools/tools_internal.h"
#include "shared/cleanup.h"

/* Builds a "*** Begin Patch" text from one SDK operation object. */
static int operation_to_patch(json_t *op, struct sbx_buf *b, const char **why) {
  const char *type = json_string_value(json_object_get(op, "type"));
  const char *path = json_string_value(json_object_get(op, "path"));
  const char *diff = json_string_value(json_object_get(op, "diff"));
  json_t *mv = json_object_get(op, "move_to");
  if (!mv)
    mv = json_object_get(op, "moveTo");
  const char *move_to = json_is_string(mv) ? json_string_value(mv) : NULL;
  if (!type || !path || !*path) {
    *why = "an operation needs \"type\" and \"path\"";
    return -EINVAL;
  }
  int r;
  if (strcmp(type, "create_file") == 0) {
    if (!diff) {
      *why = "create_file needs \"diff\"";
      return -EINVAL;
    }
    r = sbx_buf_printf(b, "*** Add File: %s\n", path);
    /* The hosted tool's create diff is "+line" lines; plain text is taken
     * as the content. */
    const char *p = diff;
    while (r == 0 && *p) {
      const char *nl = strchr(p, '\n');
      size_t n = nl ? (size_t)(nl - p) : strlen(p);
      if (n == 0 && !nl)
        break;
      r = sbx_buf_printf(b, "%s%.*s\n", p[0] == '+' ? "" : "+", (int)n, p);
      p += n + (nl ? 1 : 0);
    }
  } else if (strcmp(type, "update_file") == 0) {
    r = sbx_buf_printf(b, "*** Update File: %s\n", path);
    if (r == 0 && move_to)
      r = sbx_buf_printf(b, "*** Move to: %s\n", move_to);
    if (r == 0 && diff && *diff) {
      r = sbx_buf_append_str(b, diff);
      if (r == 0 && diff[strlen(diff) - 1] != '\n')
        r = sbx_buf_append_str(b, "\n");
    }
  } else if (strcmp(type, "delete_file") == 0) {
    r = sbx_buf_printf(b, "*** Delete File: %s\n", path);
  } else {
    *why = "unknown operation type";
    return -EINVAL;
  }
  return r;
}

/* Applies PATCH atomically, with the SDK's line ends when it was made from
 * SDK operations (SDK_OPS), Codex's for a "*** Begin Patch" text; fills
 * OUT with the SDK's "Patch applied." for each file operation, joined by
 * newlines, or the error. Returns 0 when applied. */
static int apply_patch_text(struct toolbox *t, const char *patch, bool sdk_ops,
                            struct sbx_buf *out, struct tool_op *op) {
  struct sbx_error e = {0};
  Sbx__V1__Response *r = NULL;
  const char *dir = t->cwd ? t->cwd : "";
  int ret = sdk_ops ? sbx_patch_apply_sdk(t->sb->client, patch, dir, &r, &e)
                    : sbx_patch_apply(t->sb->client, patch, dir, false, &r, &e);
  if (ret < 0) {
    (void)sbx_buf_append_str(out, e.msg);
    (void)tools_op_fail(op, NULL, "%s", e.msg);
    return ret;
  }
  Sbx__V1__PatchApplyReply *x = r->patch_apply;
  trace_set_int(op->sp, "sandbox.apply_patch.files", (int64_t)x->n_results);
  for (size_t i = 0; i < x->n_results; i++) {
    if (i)
      (void)sbx_buf_append_str(out, "\n");
    (void)sbx_buf_append_str(out, "Patch applied.");
  }
  sbx_client_reply_free(r);
  return 0;
}

json_t *tools_apply_patch_call(struct toolbox *t, const char *raw,
                               struct tool_op *op) {
  _cleanup_buf_ struct sbx_buf patch;
  sbx_buf_init(&patch, 32u << 20);
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, 1u << 20);
  const char *s = raw;
  bool sdk_ops = false;
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
    s++;
  if (strncmp(s, "*** Begin Patch", 15) == 0) {
    if (sbx_buf_append_str(&patch, raw) < 0)
      return NULL;
  } else {
    json_error_t je;
    _cleanup_json_ json_t *in = json_loads(raw, JSON_DECODE_ANY, &je);
    if (!in) {
      (void)sbx_buf_printf(&out, "Invalid apply_patch JSON: %s", je.text);
      return tools_op_fail(op, tools_text_output(&out), "%s", out.data);
    }
    json_t *ops = NULL;
    json_t *one = NULL;
    const char *text = NULL;
    if (json_is_string(in)) {
      text = json_string_value(in);
    } else if (json_is_array(in)) {
      ops = in;
    } else if (!json_is_object(in)) {
      return tools_op_fail(
          op, json_string("apply_patch input must be an object or array."),
          "apply_patch input must be an object or array.");
    } else if (json_is_string(json_object_get(in, "patch"))) {
      text = json_string_value(json_object_get(in, "patch"));
    } else if (json_is_array(json_object_get(in, "command")) &&
               json_array_size(json_object_get(in, "command")) == 2 &&
               json_is_string(
                   json_array_get(json_object_get(in, "command"), 1))) {
      text =
          json_string_value(json_array_get(json_object_get(in, "command"), 1));
    } else if (json_is_array(json_object_get(in, "operations"))) {
      ops = json_object_get(in, "operations");
    } else if (json_is_object(json_object_get(in, "operation"))) {
      one = json_object_get(in, "operation");
    } else {
      one = in;
    }
    if (text) {
      if (sbx_buf_append_str(&patch, text) < 0)
        return NULL;
    } else {
      size_t n = ops ? json_array_size(ops) : 1;
      if (n == 0)
        return tools_op_fail(
            op, json_string("apply_patch input must include an operation."),
            "apply_patch input must include an operation.");
      sdk_ops = true;
      (void)sbx_buf_append_str(&patch, "*** Begin Patch\n");
      for (size_t i = 0; i < n; i++) {
        json_t *item = ops ? json_array_get(ops, i) : one;
        const char *why = NULL;
        if (!json_is_object(item) ||
            operation_to_patch(item, &patch, &why) < 0) {
          (void)sbx_buf_printf(&out, "Invalid apply_patch operation: %s",
                               why ? why : "not an object");
          return tools_op_fail(op, tools_text_output(&out), "%s", out.data);
        }
      }
      (void)sbx_buf_append_str(&patch, "*** End Patch\n");
    }
  }
  _cleanup_buf_ struct sbx_buf res;
  sbx_buf_init(&res, 1u << 20);
  if (apply_patch_text(t, patch.data, sdk_ops, &res, op) < 0)
    (void)sbx_buf_printf(&out, "Failed to apply patch: %s",
                         res.data ? res.data : "");
  else
    (void)sbx_buf_append(&out, res.data ? res.data : "", res.len);
  return tools_text_output(&out);
}

int tools_apply_patch_operation(struct toolbox *t, json_t *operation,
                                const char **status, char **output,
                                struct tool_ctx *ctx) {
  struct sbx_error scratch;
  struct tool_op op;
  tools_op_begin(&op, ctx, &scratch, TRACE_SANDBOX_APPLY_PATCH, t);
  _cleanup_buf_ struct sbx_buf patch;
  sbx_buf_init(&patch, 32u << 20);
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, 1u << 20);
  const char *why = NULL;
  *output = NULL;
  *status = "failed";
  (void)sbx_buf_append_str(&patch, "*** Begin Patch\n");
  if (!json_is_object(operation) ||
      operation_to_patch(operation, &patch, &why) < 0) {
    (void)sbx_buf_printf(&out, "Invalid apply_patch operation: %s",
                         why ? why : "not an object");
    (void)tools_op_fail(&op, NULL, "%s", out.data);
  } else {
    (void)sbx_buf_append_str(&patch, "*** End Patch\n");
    if (apply_patch_text(t, patch.data, true, &out, &op) == 0)
      *status = "completed";
  }
  if (strcmp(*status, "failed") == 0)
    *output = sbx_buf_steal(&out, NULL);
  tools_op_end(&op);
  return 0;
}
