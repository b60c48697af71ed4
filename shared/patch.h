/* The apply_patch engine: parses a "*** Begin Patch" text and computes new
 * file contents. Pure code: no I/O. sandboxd reads the files, calls these,
 * and writes the results all or nothing.
 *
 * Format (Codex's apply_patch, as the Agents SDK uses it):
 *   *** Begin Patch
 *   *** Add File: <path>        then lines starting with '+'
 *   *** Delete File: <path>
 *   *** Update File: <path>
 *   [*** Move to: <path>]
 *   @@ [anchor]                 hunks of ' ', '-', '+' lines
 *   [*** End of File]
 *   *** End Patch
 *
 * Matching of context lines tries, in order: exact; ignoring trailing
 * whitespace; ignoring surrounding whitespace (Unicode's White_Space
 * included, as Rust's trim() in Codex); then with Unicode dashes, quotes
 * and spaces folded to ASCII (as Codex does). CRLF files stay CRLF. Where
 * the SDKs disagree, Codex's behaviour is followed: Add File replaces an
 * existing file and writes each '+' line followed by "\n"; an updated file
 * ends with a newline. The Agents SDK's own operations (create_file,
 * update_file) ask for its line ends instead (SBX_PATCH_EOL_SDK).
 *
 * Thread-safe: no global state. */
#ifndef SBX_PATCH_H
#define SBX_PATCH_H

#include <stddef.h>

#include "shared/errors.h"

enum sbx_patch_kind {
  SBX_PATCH_ADD = 1,
  SBX_PATCH_DELETE = 2,
  SBX_PATCH_UPDATE = 3,
};

struct sbx_patch_hunk; /* private to the engine: patch_internal.h */

/* Whose line ends a patch gets. */
enum sbx_patch_eol {
  SBX_PATCH_EOL_CODEX = 0, /* every line of the result ends with "\n" */
  SBX_PATCH_EOL_SDK = 1,   /* applyDiff's: an added file has no final
                              newline, an updated one keeps its lack of one */
};

struct sbx_patch_op {
  enum sbx_patch_kind kind;
  char *path;    /* as written in the patch, trimmed; not validated here */
  char *move_to; /* UPDATE only, NULL when absent */
  char *content; /* ADD only: the new file's bytes */
  size_t content_len;
  struct sbx_patch_hunk *hunks; /* UPDATE only */
  size_t nhunks;
  size_t line; /* 1-based line of the op's header in the patch text */
};

struct sbx_patch {
  struct sbx_patch_op *ops;
  size_t nops;
};

/* Limits on what a patch may hold; the parser refuses more with -E2BIG.
 * MAX_HUNKS (all ops together) was added with the parser: it keeps the
 * parsed form of a MAX_BYTES patch of tiny hunks within a few MiB. */
#define SBX_PATCH_MAX_BYTES (16u << 20)
#define SBX_PATCH_MAX_OPS 1024
#define SBX_PATCH_MAX_LINE (1u << 20)
#define SBX_PATCH_MAX_HUNKS 65536

/* Parses TEXT (LEN bytes, need not be NUL-terminated; NUL bytes refused).
 * On success *OUT is new (free with sbx_patch_free); it keeps its own copy
 * of the text, which the ops' hunks point into, so an op is valid while its
 * patch is. Surrounding whitespace and a shell heredoc wrapper
 * ("<<'EOF'" ... "EOF", as Codex accepts) are tolerated. On failure E says
 * what and where ("line N: ..."), with code INVALID_ARGUMENT or
 * LIMIT_EXCEEDED. */
int sbx_patch_parse(const char *text, size_t len, struct sbx_patch **out,
                    struct sbx_error *e);

/* Frees P; accepts NULL; returns NULL. */
struct sbx_patch *sbx_patch_free(struct sbx_patch *p);

/* Applies the UPDATE op OP to the file contents IN (INLEN bytes) and returns
 * the new contents in *OUT (new, malloc'd, NUL-terminated; *OUTLEN bytes).
 * A file whose first line ends in "\r\n" is written back with "\r\n" on
 * every line; with EOL SBX_PATCH_EOL_SDK a file without a final newline
 * stays without one, with SBX_PATCH_EOL_CODEX it gets one. An op with no
 * hunks (a pure rename) returns IN unchanged. On a mismatch E names the
 * file (op->path), the hunk (1-based) and the patch line it could not
 * match, and the code is INVALID_ARGUMENT. */
int sbx_patch_apply_update(const struct sbx_patch_op *op, const char *in,
                           size_t inlen, enum sbx_patch_eol eol, char **out,
                           size_t *outlen, struct sbx_error *e);

#endif
