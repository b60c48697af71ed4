/* The text that exec_command and write_stdin show the model.
 *
 * This reproduces the Agents SDK's sandbox/shared/output.js: the token
 * estimate (ceil(bytes / 4)), truncateOutput (head and tail halves around
 * "...N tokens truncated..." with a "Total output lines: L" prefix) and
 * formatExecResponse ("Chunk ID: ...\nWall time: ...\n..."). See
 * agents-sdk-sandbox.md section 1.4.
 *
 * The SDK works on JavaScript strings, that is on text already decoded from
 * UTF-8 with invalid bytes replaced by U+FFFD. These functions work on bytes.
 * For valid UTF-8 the results are the SDK's byte for byte. Invalid bytes are
 * never a problem for them: each one counts as a character of one byte. To get
 * the SDK's result for raw process output, and valid UTF-8 to put in JSON,
 * pass the bytes through sbx_utf8_sanitize (shared/utf8.h) first.
 *
 * All output goes to a caller-owned struct sbx_buf, whose maximum bounds it;
 * a function that fails with -E2BIG or -ENOMEM leaves what it had appended so
 * far in the buffer (reset it to retry). Pure functions, thread-safe. */
#ifndef SBX_OUTPUT_H
#define SBX_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/buf.h"

/* max_output_tokens value meaning "not given": output is never truncated. */
#define OUTPUT_TOKENS_UNLIMITED (-1)

/* The SDK's token estimate: ceil(BYTES / 4); 0 for 0. */
size_t output_estimate_tokens(size_t bytes);

/* The SDK's truncateOutput: appends TEXT (LEN bytes) to OUT, shortened to at
 * most 4 * MAX_OUTPUT_TOKENS bytes. A negative MAX_OUTPUT_TOKENS
 * (OUTPUT_TOKENS_UNLIMITED) means none was given: the text is appended
 * unchanged. 0 is a budget of 0 bytes, as in the SDK.
 *
 * Text that fits is appended unchanged. Otherwise the result is
 *   ["Total output lines: L\n\n"] [notice] head "...K tokens truncated..." tail
 * where notice is a leading "[...N characters truncated from process
 * output...]\n" kept verbatim, head and tail are cut at character boundaries,
 * and K estimates the tokens left out. The line prefix goes first when the
 * budget is short; when even notice and marker do not fit, the result is the
 * notice and the marker cut to the remaining bytes ("...7" for one token).
 *
 * Returns 0 when the text was appended unchanged, 1 when it was truncated, or
 * -E2BIG / -ENOMEM from OUT. ORIGINAL_TOKENS (may be NULL) receives the
 * estimate for the whole text when it was truncated, else 0. */
int output_truncate(const char *text, size_t len, int64_t max_output_tokens,
                    struct sbx_buf *out, size_t *original_tokens);

/* What one exec_command or write_stdin call reports. */
struct output_exec {
  uint64_t wall_ns;       /* time spent in this call */
  bool running;           /* still running: report the session id */
  int64_t session_id;     /* when running */
  int exit_code;          /* when not running */
  size_t original_tokens; /* > 0: "Original token count: N" line */
  const char *text;       /* output (borrowed), already truncated */
  size_t len;
};

/* The SDK's formatExecResponse: appends to OUT
 *   Chunk ID: <6 lowercase hex digits, random>
 *   Wall time: <seconds, 4 decimals> seconds
 *   Process running with session ID <n> | Process exited with code <n>
 *   [Original token count: <n>]
 *   Output:
 *   <text>
 * joined by "\n", with nothing after the text. Wall time is rounded half up
 * to 0.1 ms (JavaScript's toFixed(4)). 0, -E2BIG or -ENOMEM. */
int output_format_exec(const struct output_exec *x, struct sbx_buf *out);

/* Both steps at once: truncates X->text to MAX_OUTPUT_TOKENS (ignoring
 * X->original_tokens) and appends the formatted response to OUT. The text is
 * taken as it is; sanitize it first if it may hold invalid UTF-8. 0, -E2BIG
 * or -ENOMEM. */
int output_exec_response(const struct output_exec *x, int64_t max_output_tokens,
                         struct sbx_buf *out);

#endif
