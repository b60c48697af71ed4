/* What the files of the apply_patch engine (shared/patch.h) share:
 *   patch_parse.c  the "*** Begin Patch" text into ops and hunks
 *   patch_match.c  a file's lines, and finding a hunk's lines among them
 *   patch_apply.c  an Update op's hunks located and applied to a file
 * Byte ranges and their small helpers are inline here: the matching loops
 * call them for every line.
 *
 * Behaviour follows Codex's apply-patch (parser.rs, seek_sequence.rs,
 * lib.rs), with these deliberate differences:
 *  - a file that did not end in a newline still does not after an update
 *    (Codex always adds one; the Agents SDK keeps it as it was);
 *  - a hunk of only '+' lines under an "@@ text" anchor is inserted after
 *    the anchor line (Codex appends it to the end of the file; the SDK
 *    inserts at its cursor); without an anchor it is appended, as in Codex;
 *  - several "@@" lines in a row narrow the position one after the other
 *    ("@@ class B:" then "@@   def f():"), as the SDK allows;
 *  - unchanged context lines keep the file's text (Codex writes the
 *    patch's), so whitespace-tolerant matching changes nothing by itself;
 *  - an Update with no hunks is accepted when it has a "*** Move to:";
 *  - an Add File body line that does not start with '+' is an error;
 *  - context is located with KMP over whole lines, once per matching tier,
 *    so a hostile file and patch cannot make the search quadratic.
 *
 * Pure code: no I/O, no globals; every function is reentrant. */
#ifndef SBX_PATCH_INTERNAL_H
#define SBX_PATCH_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shared/errors.h"
#include "shared/patch.h"

#define PATCH_NOT_FOUND SIZE_MAX
/* How many bytes of a patch or file line an error message quotes. */
#define PATCH_QUOTE_MAX 200

/* A byte range that is not NUL-terminated. */
struct span {
  const char *s;
  size_t n;
};

/* One hunk of an Update op. Lines point into the patch's own copy of the
 * text, so a hunk lives as long as its patch. Anchor lines ("@@ ...") and
 * body lines (' ', '-', '+' or empty) are each consecutive patch lines. */
struct sbx_patch_hunk {
  const char *anchors; /* first "@@" line; NULL when the hunk has none */
  const char *body;    /* first body line */
  const char *end;     /* just past the last body line's '\n' */
  size_t anchor_line;  /* patch line of the first "@@" line */
  size_t body_line;    /* patch line of the first body line */
  size_t nbody;
  bool eof; /* followed by "*** End of File" */
};

/* ---- small text helpers ------------------------------------------------ */

/* ASCII whitespace; trimming also removes Unicode's (ws_len). */
static inline bool is_ws(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

/* The length of the UTF-8 encoded Unicode White_Space character (what
 * Rust's trim() removes, so Codex's) at the start of the N bytes at P, or
 * 0: ASCII whitespace, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
 * U+2029, U+202F, U+205F, U+3000. */
static inline size_t ws_len(const unsigned char *p, size_t n) {
  if (n >= 1 && is_ws(p[0]))
    return 1;
  if (n >= 2 && p[0] == 0xC2 && (p[1] == 0x85 || p[1] == 0xA0))
    return 2;
  if (n < 3)
    return 0;
  if ((p[0] == 0xE1 && p[1] == 0x9A && p[2] == 0x80) ||
      (p[0] == 0xE3 && p[1] == 0x80 && p[2] == 0x80))
    return 3;
  if (p[0] == 0xE2 && p[1] == 0x80 &&
      (p[2] <= 0x8A || p[2] == 0xA8 || p[2] == 0xA9 || p[2] == 0xAF))
    return 3;
  return p[0] == 0xE2 && p[1] == 0x81 && p[2] == 0x9F ? 3 : 0;
}

/* The length of the White_Space character that ends S, or 0. */
static inline size_t ws_len_end(struct span s) {
  const unsigned char *u = (const unsigned char *)s.s;
  for (size_t k = 1; k <= 3 && k <= s.n; k++)
    if (ws_len(u + s.n - k, k) == k)
      return k;
  return 0;
}

/* S without trailing whitespace, Unicode's included. */
static inline struct span span_rtrim(struct span s) {
  for (size_t k; (k = ws_len_end(s)) > 0;)
    s.n -= k;
  return s;
}

/* S without leading and trailing whitespace, Unicode's included. */
static inline struct span span_trim(struct span s) {
  for (size_t k; (k = ws_len((const unsigned char *)s.s, s.n)) > 0;) {
    s.s += k;
    s.n -= k;
  }
  return span_rtrim(s);
}

/* Whether S is exactly the string LIT. */
static inline bool span_is(struct span s, const char *lit) {
  size_t n = strlen(lit);
  return s.n == n && memcmp(s.s, lit, n) == 0;
}

/* Whether S starts with LIT; if so and REST is given, *REST is what
 * follows it. */
static inline bool span_starts(struct span s, const char *lit,
                               struct span *rest) {
  size_t n = strlen(lit);
  if (s.n < n || memcmp(s.s, lit, n) != 0)
    return false;
  if (rest)
    *rest = (struct span){s.s + n, s.n - n};
  return true;
}

/* The line that starts at P (P < END): its text without "\n" or "\r\n".
 * *NEXT is where the following line starts (END after the last line). */
static inline struct span next_line(const char *p, const char *end,
                                    const char **next) {
  const char *q = memchr(p, '\n', (size_t)(end - p));
  if (!q) {
    *next = end;
    return (struct span){p, (size_t)(end - p)};
  }
  *next = q + 1;
  if (q > p && q[-1] == '\r')
    q--;
  return (struct span){p, (size_t)(q - p)};
}

/* Fills E for an allocation that failed; returns -ENOMEM. */
static inline int oom(struct sbx_error *e) {
  return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
}

/* ---- patch_parse.c ----------------------------------------------------- */

/* Writes S into DST (size N >= 8) as a double-quoted string for an error
 * message: at most PATCH_QUOTE_MAX bytes of it, cut on a UTF-8 character
 * boundary with "..." when longer; '"', '\\' and control bytes escaped, so
 * that the quote is one readable line whatever the input. Returns DST. */
const char *sbx_patch_quote(char *dst, size_t n, struct span s);

/* The anchor text of an "@@" line; empty when it only opens a hunk. The
 * text keeps its leading whitespace: the exact tier may need it. */
struct span sbx_patch_anchor_text(struct span line);

/* ---- patch_match.c ----------------------------------------------------- */

/* The lines of the file being updated. Line i is [starts[i], starts[i+1]-1)
 * less a '\r' before the '\n' in a CRLF file; starts[n] is one past the
 * last line's terminator (inlen + 1 when the file lacks a final newline). */
struct file {
  const char *s;
  size_t *starts;
  size_t n;
  bool crlf;     /* the first line ended in "\r\n": write "\r\n" throughout */
  bool final_nl; /* the file ended with a newline (or was empty) */
};

/* Line I of F, without its line ending. */
static inline struct span file_line(const struct file *f, size_t i) {
  size_t a = f->starts[i], b = f->starts[i + 1] - 1;
  if (f->crlf && b > a && f->s[b - 1] == '\r')
    b--;
  return (struct span){f->s + a, b - a};
}

/* Splits IN (LEN bytes, borrowed: F points into it) into F's lines; free
 * F->starts when done. */
int sbx_patch_file_split(struct file *f, const char *in, size_t len,
                         struct sbx_error *e);

/* Matching tiers, strictest first (Codex's seek_sequence). */
enum tier {
  TIER_EXACT,
  TIER_RTRIM,   /* ignoring trailing whitespace */
  TIER_TRIM,    /* ignoring surrounding whitespace */
  TIER_UNICODE, /* also folding Unicode dashes, quotes and spaces */
  TIER_COUNT,
};

/* Where the longest prefix of a pattern was seen, for error messages. */
struct partial {
  size_t len; /* lines of the pattern matched */
  size_t at;  /* file line where they start */
};

/* The first file line >= FROM where the M lines of PAT match in TIER, or
 * PATCH_NOT_FOUND. KMP over lines: O(lines) comparisons whatever the input.
 * FAIL has room for M entries. BEST, when given, gets the longest prefix
 * seen. */
size_t sbx_patch_kmp_search(const struct file *f, const struct span *pat,
                            size_t m, size_t from, enum tier tier, size_t *fail,
                            struct partial *best);

/* Codex's seek_sequence: the first file line >= FROM where PAT (M lines)
 * matches, trying each tier over the whole range before the next. EOF pins
 * the match to the last M lines. An empty pattern matches at FROM (at the
 * end with EOF). FAIL has room for M entries. */
size_t sbx_patch_seek(const struct file *f, const struct span *pat, size_t m,
                      size_t from, bool eof, size_t *fail);

#endif
