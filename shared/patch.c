/* The apply_patch engine (see patch.h): a parser for the "*** Begin Patch"
 * format and the code that applies an Update File op to a file's bytes.
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
#include "shared/patch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/buf.h"
#include "shared/cleanup.h"

SBX_DEFINE_CLEANUP(struct sbx_patch *, sbx_patch_free)

#define NOT_FOUND SIZE_MAX
/* How many bytes of a patch or file line an error message quotes. */
#define QUOTE_MAX 200

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

/* What sbx_patch_parse allocates: the public struct first, so a pointer to
 * it converts back to the whole, and the text the hunks point into. */
struct patch_impl {
  struct sbx_patch pub;
  char *text;
};

/* ---- small text helpers ------------------------------------------------ */

/* ASCII whitespace, what trimming removes (Unicode spaces are folded to ' '
 * by the last matching tier and trimmed there). */
static bool is_ws(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

/* S without trailing whitespace. */
static struct span span_rtrim(struct span s) {
  while (s.n > 0 && is_ws((unsigned char)s.s[s.n - 1]))
    s.n--;
  return s;
}

/* S without leading and trailing whitespace. */
static struct span span_trim(struct span s) {
  while (s.n > 0 && is_ws((unsigned char)s.s[0])) {
    s.s++;
    s.n--;
  }
  return span_rtrim(s);
}

/* Whether S is exactly the string LIT. */
static bool span_is(struct span s, const char *lit) {
  size_t n = strlen(lit);
  return s.n == n && memcmp(s.s, lit, n) == 0;
}

/* Whether S starts with LIT; if so and REST is given, *REST is what
 * follows it. */
static bool span_starts(struct span s, const char *lit, struct span *rest) {
  size_t n = strlen(lit);
  if (s.n < n || memcmp(s.s, lit, n) != 0)
    return false;
  if (rest)
    *rest = (struct span){s.s + n, s.n - n};
  return true;
}

/* The line that starts at P (P < END): its text without "\n" or "\r\n".
 * *NEXT is where the following line starts (END after the last line). */
static struct span next_line(const char *p, const char *end,
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

/* Writes S into DST (size N >= 8) as a double-quoted string for an error
 * message: at most QUOTE_MAX bytes of it, cut on a UTF-8 character boundary
 * with "..." when longer; '"', '\\' and control bytes escaped, so that the
 * quote is one readable line whatever the input. Returns DST. */
static const char *quote(char *dst, size_t n, struct span s) {
  size_t limit = n - 6; /* room for both quotes, "..." and the NUL */
  if (limit > QUOTE_MAX)
    limit = QUOTE_MAX;
  size_t o = 0, boundary = 0;
  bool cut = false;
  dst[o++] = '"';
  for (size_t i = 0; i < s.n; i++) {
    unsigned char c = (unsigned char)s.s[i];
    char esc[5];
    size_t k;
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      k = 2;
    } else if (c < 0x20 || c == 0x7f) {
      static const char hex[] = "0123456789abcdef";
      esc[0] = '\\';
      esc[1] = 'x';
      esc[2] = hex[c >> 4];
      esc[3] = hex[c & 15];
      k = 4;
    } else {
      esc[0] = (char)c;
      k = 1;
    }
    if ((c & 0xC0) != 0x80)
      boundary = o; /* a character starts here */
    if (o + k > limit + 1) {
      /* Drop a partly written multi-byte character. */
      if ((c & 0xC0) == 0x80)
        o = boundary;
      cut = true;
      break;
    }
    memcpy(dst + o, esc, k);
    o += k;
  }
  if (cut) {
    memcpy(dst + o, "...", 3);
    o += 3;
  }
  dst[o++] = '"';
  dst[o] = '\0';
  return dst;
}

/* Fills E with "line LINE: <message>" and returns the negative errno of
 * CODE (INVALID_ARGUMENT or LIMIT_EXCEEDED). */
__attribute__((format(printf, 4, 5))) static int
line_error(struct sbx_error *e, enum sbx_code code, size_t line,
           const char *fmt, ...) {
  char msg[SBX_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return sbx_error_set(e, code, code == SBX_LIMIT_EXCEEDED ? E2BIG : EINVAL,
                       "line %zu: %s", line, msg);
}

static int oom(struct sbx_error *e) {
  return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
}

/* ---- parsing ----------------------------------------------------------- */

/* Walks the lines between "*** Begin Patch" and "*** End Patch". */
struct parser {
  const char *p;   /* start of the current line */
  const char *end; /* start of the "*** End Patch" line */
  size_t no;       /* 1-based number of the current line */
  size_t end_no;   /* number of the "*** End Patch" line */
  size_t nhunks;   /* hunks in the whole patch so far */
  struct sbx_error *e;
};

static bool ps_done(const struct parser *ps) {
  return ps->p >= ps->end;
}

/* The current line. */
static struct span ps_line(const struct parser *ps) {
  const char *next;
  return next_line(ps->p, ps->end, &next);
}

/* Moves to the next line. */
static void ps_next(struct parser *ps) {
  (void)next_line(ps->p, ps->end, &ps->p);
  ps->no++;
}

/* If LINE is a file operation header, its kind (and *PATH the trimmed path,
 * possibly empty); else 0. Surrounding whitespace is tolerated (Codex). */
static enum sbx_patch_kind header_kind(struct span line, struct span *path) {
  static const struct {
    const char *prefix;
    enum sbx_patch_kind kind;
  } hs[] = {
      {"*** Add File:", SBX_PATCH_ADD},
      {"*** Delete File:", SBX_PATCH_DELETE},
      {"*** Update File:", SBX_PATCH_UPDATE},
  };
  struct span t = span_trim(line), rest;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(hs); i++) {
    if (span_starts(t, hs[i].prefix, &rest)) {
      if (path)
        *path = span_trim(rest);
      return hs[i].kind;
    }
  }
  return 0;
}

/* Whether LINE opens a hunk: exactly "@@" (trailing blanks allowed) or
 * "@@ " followed by an anchor. */
static bool is_anchor_line(struct span line) {
  return span_is(span_rtrim(line), "@@") || span_starts(line, "@@ ", NULL) ||
         span_starts(line, "@@\t", NULL);
}

/* The anchor text of an "@@" line; empty when it only opens a hunk. The
 * text keeps its leading whitespace: the exact tier may need it. */
static struct span anchor_text(struct span line) {
  struct span t = span_rtrim(line);
  if (t.n <= 3)
    return (struct span){line.s, 0};
  t.s += 3;
  t.n -= 3;
  return span_trim(t).n ? t : (struct span){line.s, 0};
}

/* Whether LINE is the "*** End of File" marker. */
static bool is_eof_marker(struct span line) {
  return span_is(span_trim(line), "*** End of File");
}

/* Whether LINE is a body line of a hunk: ' ', '-', '+' or empty. */
static bool is_body_line(struct span line) {
  return line.n == 0 || line.s[0] == ' ' || line.s[0] == '-' ||
         line.s[0] == '+';
}

/* Copies S as a new C string into *OUT. */
static int dup_span(struct span s, char **out, struct sbx_error *e) {
  char *p = malloc(s.n + 1);
  if (!p)
    return oom(e);
  memcpy(p, s.s, s.n);
  p[s.n] = '\0';
  *out = p;
  return 0;
}

/* Parses the '+' lines of an Add File op into OP's content. The body ends
 * at the next header or the end; a blank line is allowed only just before
 * those, as a separator. */
static int parse_add(struct parser *ps, struct sbx_patch_op *op) {
  _cleanup_buf_ struct sbx_buf content;
  char q[QUOTE_MAX + 8];
  int r;

  sbx_buf_init(&content, SBX_PATCH_MAX_BYTES);
  while (!ps_done(ps)) {
    struct span l = ps_line(ps);
    if (l.n > 0 && l.s[0] == '+') {
      r = sbx_buf_append(&content, l.s + 1, l.n - 1);
      if (r == 0)
        r = sbx_buf_append(&content, "\n", 1);
      if (r < 0)
        return r == -ENOMEM ? oom(ps->e)
                            : line_error(ps->e, SBX_LIMIT_EXCEEDED, ps->no,
                                         "Add File content too large");
      ps_next(ps);
      continue;
    }
    if (header_kind(l, NULL))
      break;
    if (span_trim(l).n == 0) {
      struct parser look = *ps;
      while (!ps_done(&look) && span_trim(ps_line(&look)).n == 0)
        ps_next(&look);
      if (ps_done(&look) || header_kind(ps_line(&look), NULL))
        break;
      return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->no,
                        "expected an Add File line starting with '+', got "
                        "an empty line (write \"+\" for an empty line)");
    }
    return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->no,
                      "expected an Add File line starting with '+', got %s",
                      quote(q, sizeof(q), l));
  }
  /* Appending nothing makes an empty buffer a NUL-terminated "". */
  if (sbx_buf_append(&content, "", 0) < 0)
    return oom(ps->e);
  op->content = sbx_buf_steal(&content, &op->content_len);
  return op->content ? 0 : oom(ps->e);
}

/* Parses one hunk of an Update op: "@@" lines, then body lines, then an
 * optional "*** End of File". FIRST: the op's first hunk, which may omit
 * "@@" (Codex). */
static int parse_hunk(struct parser *ps, struct sbx_patch_hunk *h, bool first,
                      size_t number) {
  char q[QUOTE_MAX + 8];

  *h = (struct sbx_patch_hunk){0};
  while (!ps_done(ps) && is_anchor_line(ps_line(ps))) {
    if (!h->anchors) {
      h->anchors = ps->p;
      h->anchor_line = ps->no;
    }
    ps_next(ps);
  }
  if (!h->anchors && !first)
    return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->no,
                      "expected a line starting with ' ', '-', '+' or \"@@\" "
                      "(to start hunk %zu), got %s",
                      number, quote(q, sizeof(q), ps_line(ps)));
  h->body = ps->p;
  h->body_line = ps->no;
  while (!ps_done(ps)) {
    struct span l = ps_line(ps);
    if (is_eof_marker(l)) {
      if (h->nbody == 0)
        break;
      h->end = ps->p;
      h->eof = true;
      ps_next(ps);
      return 0;
    }
    if (!is_body_line(l))
      break;
    h->nbody++;
    ps_next(ps);
  }
  if (h->nbody == 0) {
    struct span l = ps_done(ps) ? (struct span){"*** End Patch", 13}
                                : span_rtrim(ps_line(ps));
    return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->no,
                      "hunk %zu has no lines; expected lines starting with "
                      "' ', '-' or '+', got %s",
                      number, quote(q, sizeof(q), l));
  }
  h->end = ps->p;
  return 0;
}

/* Parses what follows "*** Update File:": an optional "*** Move to:", then
 * hunks until the next header or the end. */
static int parse_update(struct parser *ps, struct sbx_patch_op *op) {
  size_t cap = 0;
  struct span rest;
  int r;

  if (!ps_done(ps) &&
      span_starts(span_trim(ps_line(ps)), "*** Move to:", &rest)) {
    rest = span_trim(rest);
    if (rest.n == 0)
      return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->no,
                        "missing path after \"*** Move to:\"");
    r = dup_span(rest, &op->move_to, ps->e);
    if (r < 0)
      return r;
    ps_next(ps);
  }
  while (!ps_done(ps)) {
    struct span l = ps_line(ps);
    if (span_trim(l).n == 0) { /* blank lines may separate hunks (Codex) */
      ps_next(ps);
      continue;
    }
    if (header_kind(l, NULL))
      break;
    if (span_starts(span_trim(l), "*** Move to:", NULL))
      return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->no,
                        "\"*** Move to:\" must directly follow \"*** Update "
                        "File:\"");
    if (ps->nhunks >= SBX_PATCH_MAX_HUNKS)
      return line_error(ps->e, SBX_LIMIT_EXCEEDED, ps->no,
                        "more than %u hunks in the patch",
                        (unsigned)SBX_PATCH_MAX_HUNKS);
    if (op->nhunks == cap) {
      size_t ncap = cap ? cap * 2 : 4;
      struct sbx_patch_hunk *nh =
          reallocarray(op->hunks, ncap, sizeof(*op->hunks));
      if (!nh)
        return oom(ps->e);
      op->hunks = nh;
      cap = ncap;
    }
    r = parse_hunk(ps, &op->hunks[op->nhunks], op->nhunks == 0, op->nhunks + 1);
    if (r < 0)
      return r;
    op->nhunks++;
    ps->nhunks++;
  }
  if (op->nhunks == 0 && !op->move_to)
    return line_error(ps->e, SBX_INVALID_ARGUMENT, op->line,
                      "Update File \"%.200s\" has no hunks; expected \"@@\" "
                      "and lines starting with ' ', '-' or '+'",
                      op->path);
  return 0;
}

/* Parses the file operations between the patch markers into P. */
static int parse_ops(struct parser *ps, struct sbx_patch *p) {
  size_t cap = 0;
  char q[QUOTE_MAX + 8];
  int r;

  while (!ps_done(ps)) {
    struct span l = ps_line(ps), path;
    if (span_trim(l).n == 0) {
      ps_next(ps);
      continue;
    }
    enum sbx_patch_kind kind = header_kind(l, &path);
    if (!kind)
      return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->no,
                        "expected \"*** Add File: \", \"*** Delete File: \", "
                        "\"*** Update File: \" or \"*** End Patch\", got %s",
                        quote(q, sizeof(q), l));
    if (path.n == 0)
      return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->no,
                        "missing path after %.*s", (int)(span_trim(l).n),
                        span_trim(l).s);
    if (p->nops >= SBX_PATCH_MAX_OPS)
      return line_error(ps->e, SBX_LIMIT_EXCEEDED, ps->no,
                        "more than %u file operations in the patch",
                        (unsigned)SBX_PATCH_MAX_OPS);
    if (p->nops == cap) {
      size_t ncap = cap ? cap * 2 : 4;
      struct sbx_patch_op *nops = reallocarray(p->ops, ncap, sizeof(*nops));
      if (!nops)
        return oom(ps->e);
      p->ops = nops;
      cap = ncap;
    }
    struct sbx_patch_op *op = &p->ops[p->nops++];
    *op = (struct sbx_patch_op){.kind = kind, .line = ps->no};
    r = dup_span(path, &op->path, ps->e);
    if (r < 0)
      return r;
    ps_next(ps);
    if (kind == SBX_PATCH_ADD)
      r = parse_add(ps, op);
    else if (kind == SBX_PATCH_UPDATE)
      r = parse_update(ps, op);
    if (r < 0)
      return r;
  }
  if (p->nops == 0)
    return line_error(ps->e, SBX_INVALID_ARGUMENT, ps->end_no,
                      "expected a file operation (\"*** Add File: \", "
                      "\"*** Delete File: \" or \"*** Update File: \") before "
                      "\"*** End Patch\"");
  return 0;
}

/* The first and last non-blank lines of a text, found while checking it. */
struct bounds {
  const char *first, *last;
  size_t first_no, last_no;
};

/* Refuses NUL bytes and over-long lines, and finds the first and last
 * non-blank lines of TEXT. */
static int scan_text(const char *text, size_t len, struct bounds *b,
                     struct sbx_error *e) {
  const char *end = text + len, *p = text;
  const char *nul = memchr(text, '\0', len);
  size_t no = 1;

  if (nul) {
    for (const char *c = text; c < nul; c++)
      no += *c == '\n';
    return line_error(e, SBX_INVALID_ARGUMENT, no, "NUL byte; a patch is text");
  }
  *b = (struct bounds){0};
  for (; p < end; no++) {
    const char *next;
    struct span l = next_line(p, end, &next);
    if (l.n > SBX_PATCH_MAX_LINE)
      return line_error(e, SBX_LIMIT_EXCEEDED, no,
                        "line of %zu bytes, more than the limit of %u", l.n,
                        (unsigned)SBX_PATCH_MAX_LINE);
    if (span_trim(l).n) {
      if (!b->first) {
        b->first = p;
        b->first_no = no;
      }
      b->last = p;
      b->last_no = no;
    }
    p = next;
  }
  return 0;
}

/* The first non-blank line strictly after the line at P (number *NO)
 * and before END; NULL when none. Updates *NO. */
static const char *next_nonblank(const char *p, const char *end, size_t *no) {
  const char *next;
  (void)next_line(p, end, &next);
  for (p = next, (*no)++; p < end; (*no)++) {
    if (span_trim(next_line(p, end, &next)).n)
      return p;
    p = next;
  }
  return NULL;
}

/* The last non-blank line that starts after FIRST and before LAST, and its
 * number in *NO; NULL when none. */
static const char *prev_nonblank(const char *first, size_t first_no,
                                 const char *last, size_t *no) {
  const char *found = NULL, *p = first, *next;
  size_t n = first_no;
  (void)next_line(p, last, &next);
  for (p = next, n++; p < last; n++) {
    if (span_trim(next_line(p, last, &next)).n) {
      found = p;
      *no = n;
    }
    p = next;
  }
  return found;
}

/* Codex's lenient mode: a patch wrapped in a shell heredoc, as in
 * "<<'EOF'\n*** Begin Patch\n...\n*** End Patch\nEOF", is unwrapped. */
static void unwrap_heredoc(struct bounds *b, const char *end) {
  struct span first = span_trim(next_line(b->first, end, &(const char *){0}));
  struct span last = span_trim(next_line(b->last, end, &(const char *){0}));
  struct bounds in = *b;

  if (b->first == b->last ||
      !(span_is(first, "<<EOF") || span_is(first, "<<'EOF'") ||
        span_is(first, "<<\"EOF\"")) ||
      last.n < 3 || memcmp(last.s + last.n - 3, "EOF", 3) != 0)
    return;
  in.first = next_nonblank(b->first, b->last, &in.first_no);
  if (!in.first)
    return;
  in.last = prev_nonblank(in.first, in.first_no, b->last, &in.last_no);
  if (!in.last) {
    in.last = in.first;
    in.last_no = in.first_no;
  }
  *b = in;
}

int sbx_patch_parse(const char *text, size_t len, struct sbx_patch **out,
                    struct sbx_error *e) {
  struct bounds b = {0};
  char q[QUOTE_MAX + 8];
  int r;

  if (out)
    *out = NULL;
  if (!out || (!text && len))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "sbx_patch_parse: no text or no result pointer");
  if (len > SBX_PATCH_MAX_BYTES)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "patch of %zu bytes, more than the limit of %u", len,
                         (unsigned)SBX_PATCH_MAX_BYTES);

  struct patch_impl *impl = calloc(1, sizeof(*impl));
  if (!impl)
    return oom(e);
  _cleanup_(sbx_patch_freep) struct sbx_patch *p = &impl->pub;
  impl->text = malloc(len + 1);
  if (!impl->text)
    return oom(e);
  if (len)
    memcpy(impl->text, text, len);
  impl->text[len] = '\0';
  const char *t = impl->text, *end = impl->text + len;

  r = scan_text(t, len, &b, e);
  if (r < 0)
    return r;
  if (!b.first)
    return line_error(e, SBX_INVALID_ARGUMENT, 1,
                      "empty patch; expected \"*** Begin Patch\"");
  if (!span_is(span_trim(next_line(b.first, end, &(const char *){0})),
               "*** Begin Patch"))
    unwrap_heredoc(&b, end);

  struct span first = next_line(b.first, end, &(const char *){0});
  struct span last = next_line(b.last, end, &(const char *){0});
  if (!span_is(span_trim(first), "*** Begin Patch"))
    return line_error(e, SBX_INVALID_ARGUMENT, b.first_no,
                      "expected \"*** Begin Patch\", got %s",
                      quote(q, sizeof(q), first));
  if (b.first == b.last || !span_is(span_trim(last), "*** End Patch"))
    return line_error(e, SBX_INVALID_ARGUMENT, b.last_no,
                      "expected \"*** End Patch\" as the last line, got %s",
                      quote(q, sizeof(q), last));

  struct parser ps = {.end = b.last, .end_no = b.last_no, .e = e};
  (void)next_line(b.first, end, &ps.p);
  ps.no = b.first_no + 1;
  r = parse_ops(&ps, p);
  if (r < 0)
    return r;
  *out = TAKE_PTR(p);
  return 0;
}

struct sbx_patch *sbx_patch_free(struct sbx_patch *p) {
  if (!p)
    return NULL;
  struct patch_impl *impl = (struct patch_impl *)p;
  for (size_t i = 0; i < p->nops; i++) {
    free(p->ops[i].path);
    free(p->ops[i].move_to);
    free(p->ops[i].content);
    free(p->ops[i].hunks);
  }
  free(p->ops);
  free(impl->text);
  free(impl);
  return NULL;
}

/* ---- matching ---------------------------------------------------------- */

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

static struct span file_line(const struct file *f, size_t i) {
  size_t a = f->starts[i], b = f->starts[i + 1] - 1;
  if (f->crlf && b > a && f->s[b - 1] == '\r')
    b--;
  return (struct span){f->s + a, b - a};
}

/* Splits IN into lines. */
static int file_split(struct file *f, const char *in, size_t len,
                      struct sbx_error *e) {
  size_t nl = 0;
  const char *first_nl = memchr(in ? in : "", '\n', len);

  *f = (struct file){.s = in ? in : "", .final_nl = true};
  if (len == 0) {
    f->starts = calloc(1, sizeof(size_t));
    return f->starts ? 0 : oom(e);
  }
  for (const char *p = first_nl; p;
       p = memchr(p + 1, '\n', (size_t)(in + len - p - 1)))
    nl++;
  f->final_nl = in[len - 1] == '\n';
  f->crlf = first_nl && first_nl > in && first_nl[-1] == '\r';
  f->n = f->final_nl ? nl : nl + 1;
  f->starts = reallocarray(NULL, f->n + 1, sizeof(size_t));
  if (!f->starts)
    return oom(e);
  size_t i = 0, off = 0;
  while (i < f->n) {
    f->starts[i++] = off;
    const char *q = memchr(in + off, '\n', len - off);
    off = q ? (size_t)(q - in) + 1 : len + 1;
  }
  f->starts[f->n] = off;
  return 0;
}

/* Matching tiers, strictest first (Codex's seek_sequence). */
enum tier {
  TIER_EXACT,
  TIER_RTRIM,   /* ignoring trailing whitespace */
  TIER_TRIM,    /* ignoring surrounding whitespace */
  TIER_UNICODE, /* also folding Unicode dashes, quotes and spaces */
  TIER_COUNT,
};

/* The ASCII character Unicode code point CP folds to, or 0. */
static int fold_cp(uint32_t cp) {
  if ((cp >= 0x2010 && cp <= 0x2015) || cp == 0x2212)
    return '-';
  if (cp >= 0x2018 && cp <= 0x201B)
    return '\'';
  if (cp >= 0x201C && cp <= 0x201F)
    return '"';
  if (cp == 0x00A0 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x202F ||
      cp == 0x205F || cp == 0x3000)
    return ' ';
  return 0;
}

/* The character of S at *I, with the characters fold_cp knows replaced by
 * ASCII; advances *I. Any other byte, valid UTF-8 or not, stands for
 * itself, so equal results mean equal folded texts. */
static int fold_next(struct span s, size_t *i) {
  const unsigned char *u = (const unsigned char *)s.s + *i;
  size_t left = s.n - *i;
  if (left >= 2 && u[0] == 0xC2 && u[1] == 0xA0) {
    *i += 2;
    return ' ';
  }
  if (left >= 3 && (u[0] == 0xE2 || u[0] == 0xE3) && (u[1] & 0xC0) == 0x80 &&
      (u[2] & 0xC0) == 0x80) {
    uint32_t cp = ((uint32_t)(u[0] & 0x0F) << 12) |
                  ((uint32_t)(u[1] & 0x3F) << 6) | (uint32_t)(u[2] & 0x3F);
    int c = fold_cp(cp);
    if (c) {
      *i += 3;
      return c;
    }
  }
  *i += 1;
  return u[0];
}

/* S without the leading and trailing characters that fold to whitespace. */
static struct span fold_trim(struct span s) {
  size_t i = 0, start, last_end;
  while (i < s.n) {
    size_t j = i;
    if (!is_ws((unsigned char)fold_next(s, &j)))
      break;
    i = j;
  }
  start = last_end = i;
  while (i < s.n) {
    if (!is_ws((unsigned char)fold_next(s, &i)))
      last_end = i;
  }
  return (struct span){s.s + start, last_end - start};
}

/* Whether A and B are equal after folding. */
static bool fold_eq(struct span a, struct span b) {
  size_t i = 0, j = 0;
  a = fold_trim(a);
  b = fold_trim(b);
  while (i < a.n && j < b.n) {
    if (fold_next(a, &i) != fold_next(b, &j))
      return false;
  }
  return i == a.n && j == b.n;
}

/* Whether lines A and B match in TIER. Each tier compares canonical forms,
 * so it is an equivalence, which KMP needs. */
static bool line_eq(struct span a, struct span b, enum tier tier) {
  switch (tier) {
  case TIER_EXACT:
    break;
  case TIER_RTRIM:
    a = span_rtrim(a);
    b = span_rtrim(b);
    break;
  case TIER_TRIM:
    a = span_trim(a);
    b = span_trim(b);
    break;
  default:
    return fold_eq(a, b);
  }
  return a.n == b.n && (a.n == 0 || memcmp(a.s, b.s, a.n) == 0);
}

/* Where the longest prefix of a pattern was seen, for error messages. */
struct partial {
  size_t len; /* lines of the pattern matched */
  size_t at;  /* file line where they start */
};

/* The first file line >= FROM where the M lines of PAT match in TIER, or
 * NOT_FOUND. KMP over lines: O(lines) comparisons whatever the input.
 * FAIL has room for M entries. BEST, when given, gets the longest prefix
 * seen. */
static size_t kmp_search(const struct file *f, const struct span *pat, size_t m,
                         size_t from, enum tier tier, size_t *fail,
                         struct partial *best) {
  size_t k = 0, q = 0;
  fail[0] = 0;
  for (size_t i = 1; i < m; i++) {
    while (k > 0 && !line_eq(pat[i], pat[k], tier))
      k = fail[k - 1];
    if (line_eq(pat[i], pat[k], tier))
      k++;
    fail[i] = k;
  }
  if (best)
    *best = (struct partial){0, from};
  for (size_t i = from; i < f->n; i++) {
    struct span l = file_line(f, i);
    while (q > 0 && !line_eq(l, pat[q], tier))
      q = fail[q - 1];
    if (line_eq(l, pat[q], tier))
      q++;
    if (best && q > best->len)
      *best = (struct partial){q, i + 1 - q};
    if (q == m)
      return i + 1 - m;
  }
  return NOT_FOUND;
}

/* Codex's seek_sequence: the first file line >= FROM where PAT (M lines)
 * matches, trying each tier over the whole range before the next. EOF pins
 * the match to the last M lines. An empty pattern matches at FROM (at the
 * end with EOF). */
static size_t seek(const struct file *f, const struct span *pat, size_t m,
                   size_t from, bool eof, size_t *fail) {
  if (m == 0)
    return eof ? f->n : from;
  if (m > f->n || from > f->n - m)
    return NOT_FOUND;
  for (int t = 0; t < TIER_COUNT; t++) {
    if (eof) {
      size_t at = f->n - m, j = 0;
      while (j < m && line_eq(file_line(f, at + j), pat[j], t))
        j++;
      if (j == m)
        return at;
      continue;
    }
    size_t at = kmp_search(f, pat, m, from, t, fail, NULL);
    if (at != NOT_FOUND)
      return at;
  }
  return NOT_FOUND;
}

/* ---- applying ---------------------------------------------------------- */

/* A hunk's body line: its kind (' ', '-' or '+'; an empty line is context)
 * and its text. */
static char body_kind(struct span l, struct span *text) {
  if (l.n == 0) {
    *text = l;
    return ' ';
  }
  *text = (struct span){l.s + 1, l.n - 1};
  return l.s[0];
}

/* A located hunk: replace NOLD file lines at START with the hunk's new
 * lines (less the last one when DROP_LAST). */
struct repl {
  size_t start, nold;
  const struct sbx_patch_hunk *h;
  bool drop_last;
};

/* Scratch space for one apply call, sized for the longest hunk. */
struct work {
  struct span *old;   /* the hunk's old lines (context and '-') */
  size_t *old_no;     /* their patch line numbers */
  size_t *fail;       /* KMP table */
  struct repl *repls; /* one per hunk */
};

static void work_free(struct work *w) {
  free(w->old);
  free(w->old_no);
  free(w->fail);
  free(w->repls);
}

/* Explains why hunk NUMBER of OP (old lines W->old, M of them) was not
 * found at or after file line FROM, naming the patch line to fix. */
static int mismatch(const struct sbx_patch_op *op, const struct file *f,
                    struct work *w, size_t m, size_t from, size_t number,
                    size_t hunk_line, struct sbx_error *e) {
  char q[QUOTE_MAX + 8];
  struct partial best;
  size_t at;

  at = kmp_search(f, w->old, m, from, TIER_UNICODE, w->fail, &best);
  if (at != NOT_FOUND) /* only possible with eof */
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%.200s: hunk %zu (patch line %zu): context found at "
                         "line %zu, but \"*** End of File\" requires it to "
                         "end the file (%zu lines)",
                         op->path, number, hunk_line, at + 1, f->n);
  if (from > 0) {
    at = kmp_search(f, w->old, m, 0, TIER_UNICODE, w->fail, NULL);
    if (at != NOT_FOUND)
      return sbx_error_set(
          e, SBX_INVALID_ARGUMENT, EINVAL,
          "%.200s: hunk %zu (patch line %zu): context found at line %zu, "
          "before line %zu where the previous hunk or \"@@\" anchor left "
          "off; hunks must follow the file's order",
          op->path, number, hunk_line, at + 1, from + 1);
  }
  if (best.len == 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%.200s: hunk %zu (patch line %zu): could not find "
                         "context line %s",
                         op->path, number, w->old_no[0],
                         quote(q, sizeof(q), w->old[0]));
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "%.200s: hunk %zu (patch line %zu): could not find "
                       "context line %s (the %zu line%s before it match at "
                       "line %zu)",
                       op->path, number, w->old_no[best.len],
                       quote(q, sizeof(q), w->old[best.len]), best.len,
                       best.len == 1 ? "" : "s", best.at + 1);
}

/* Locates hunk NUMBER (H) of OP at or after *CURSOR and fills R; moves
 * *CURSOR past it. */
static int locate(const struct sbx_patch_op *op, const struct file *f,
                  struct work *w, const struct sbx_patch_hunk *h, size_t number,
                  size_t *cursor, struct repl *r, struct sbx_error *e) {
  const char *p, *next;
  bool anchored = false, last_new_empty = false;
  size_t m = 0, no;
  char q[QUOTE_MAX + 8];

  no = h->anchor_line;
  for (p = h->anchors; p && p < h->body; p = next, no++) {
    struct span a = anchor_text(next_line(p, h->body, &next));
    if (a.n == 0)
      continue;
    size_t at = seek(f, &a, 1, *cursor, false, w->fail);
    if (at == NOT_FOUND)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%.200s: hunk %zu (patch line %zu): could not "
                           "find anchor line %s",
                           op->path, number, no, quote(q, sizeof(q), a));
    *cursor = at + 1;
    anchored = true;
  }

  no = h->body_line;
  for (p = h->body; p < h->end; p = next, no++) {
    struct span text;
    char k = body_kind(next_line(p, h->end, &next), &text);
    if (k == ' ' || k == '-') {
      w->old[m] = text;
      w->old_no[m++] = no;
    }
    if (k == ' ' || k == '+')
      last_new_empty = text.n == 0;
  }

  *r = (struct repl){.h = h};
  if (m == 0) {
    r->start = anchored && !h->eof ? *cursor : f->n;
    return 0;
  }
  size_t at = seek(f, w->old, m, *cursor, h->eof, w->fail);
  if (at == NOT_FOUND && w->old[m - 1].n == 0) {
    /* A trailing empty context line often stands for the file's final
     * newline; retry without it (Codex). */
    m--;
    r->drop_last = last_new_empty;
    at = seek(f, w->old, m, *cursor, h->eof, w->fail);
  }
  if (at == NOT_FOUND)
    return mismatch(op, f, w, m, *cursor, number,
                    h->anchors ? h->anchor_line : h->body_line, e);
  r->start = at;
  r->nold = m;
  *cursor = at + m;
  return 0;
}

/* Appends LINE and the file's line ending to OUT. */
static int emit(struct sbx_buf *out, struct span line, const struct file *f) {
  int r = sbx_buf_append(out, line.s, line.n);
  if (r == 0)
    r = sbx_buf_append(out, f->crlf ? "\r\n" : "\n", f->crlf ? 2 : 1);
  return r;
}

/* Appends the new lines of R's hunk to OUT; counts them in *COUNT. A
 * context line is written as the file has it, not as the patch quotes it,
 * so that loose matching never rewrites whitespace or punctuation the patch
 * did not mean to change (the SDK does the same; Codex writes the patch's
 * text). */
static int emit_new(struct sbx_buf *out, const struct repl *r,
                    const struct file *f, size_t *count) {
  size_t nnew = 0, done = 0, old = 0;
  const char *p, *next;
  struct span text;
  int rc;

  for (p = r->h->body; p < r->h->end; p = next) {
    char k = body_kind(next_line(p, r->h->end, &next), &text);
    nnew += k == ' ' || k == '+';
  }
  if (r->drop_last && nnew > 0)
    nnew--;
  for (p = r->h->body; p < r->h->end && done < nnew; p = next) {
    char k = body_kind(next_line(p, r->h->end, &next), &text);
    if (k == '-') {
      old++;
      continue;
    }
    if (k == ' ' && old < r->nold) /* beyond nold: the dropped last line */
      text = file_line(f, r->start + old++);
    rc = emit(out, text, f);
    if (rc < 0)
      return rc;
    done++;
  }
  *count += done;
  return 0;
}

/* Writes the file with the located hunks applied. Hunks that end up at the
 * end of the file (unanchored insertions) come last, in patch order; the
 * others were located in increasing order. */
static int build(const struct file *f, const struct repl *repls, size_t nr,
                 struct sbx_buf *out) {
  size_t pos = 0, count = 0;
  int r;

  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < nr; i++) {
      const struct repl *x = &repls[i];
      if ((x->start == f->n) != (pass == 1))
        continue;
      if (x->start < pos)
        return -EIO; /* cannot happen: hunks are located in order */
      for (; pos < x->start; pos++, count++) {
        r = emit(out, file_line(f, pos), f);
        if (r < 0)
          return r;
      }
      r = emit_new(out, x, f, &count);
      if (r < 0)
        return r;
      pos = x->start + x->nold;
    }
  }
  for (; pos < f->n; pos++, count++) {
    r = emit(out, file_line(f, pos), f);
    if (r < 0)
      return r;
  }
  if (count > 0 && !f->final_nl) {
    out->len -= f->crlf ? 2 : 1;
    out->data[out->len] = '\0';
  }
  return 0;
}

int sbx_patch_apply_update(const struct sbx_patch_op *op, const char *in,
                           size_t inlen, char **out, size_t *outlen,
                           struct sbx_error *e) {
  _cleanup_buf_ struct sbx_buf b;
  struct file f = {0};
  struct work w = {0};
  size_t longest = 1, cursor = 0, max;
  int r = 0;

  sbx_buf_init(&b, 0);
  if (out)
    *out = NULL;
  if (outlen)
    *outlen = 0;
  if (!op || op->kind != SBX_PATCH_UPDATE || !out || !outlen ||
      (!in && inlen) || (op->nhunks && !op->hunks))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "sbx_patch_apply_update: not an Update op, or no "
                         "input or result pointers");

  /* The result is at most the input, a '\r' per line, and each hunk's
   * bytes twice (a new line and its ending never exceed twice its patch
   * line with '\n'). */
  if (inlen > SIZE_MAX / 4)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG, "%.200s: too large",
                         op->path);
  max = inlen + inlen + 1;
  for (size_t i = 0; i < op->nhunks; i++) {
    const struct sbx_patch_hunk *h = &op->hunks[i];
    size_t hb = (size_t)(h->end - h->body);
    if (hb > (SIZE_MAX - max) / 2)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG, "%.200s: too large",
                           op->path);
    max += 2 * hb;
    if (h->nbody > longest)
      longest = h->nbody;
  }
  sbx_buf_init(&b, max);

  if (op->nhunks == 0) { /* a pure rename keeps the bytes as they are */
    r = sbx_buf_append(&b, in ? in : "", inlen); /* NUL-terminates */
    if (r < 0)
      return oom(e);
    *out = sbx_buf_steal(&b, outlen);
    return *out ? 0 : oom(e);
  }

  r = file_split(&f, in, inlen, e);
  if (r < 0)
    return r;
  w.old = reallocarray(NULL, longest, sizeof(*w.old));
  w.old_no = reallocarray(NULL, longest, sizeof(*w.old_no));
  w.fail = reallocarray(NULL, longest, sizeof(*w.fail));
  w.repls = reallocarray(NULL, op->nhunks, sizeof(*w.repls));
  if (!w.old || !w.old_no || !w.fail || !w.repls) {
    r = oom(e);
    goto done;
  }
  for (size_t i = 0; i < op->nhunks; i++) {
    r = locate(op, &f, &w, &op->hunks[i], i + 1, &cursor, &w.repls[i], e);
    if (r < 0)
      goto done;
  }
  r = build(&f, w.repls, op->nhunks, &b);
  if (r < 0) {
    r = r == -ENOMEM
            ? oom(e)
            : sbx_error_set(e, SBX_INTERNAL, -r,
                            "%.200s: could not assemble the result", op->path);
    goto done;
  }
  if (sbx_buf_append(&b, "", 0) < 0) { /* NUL-terminate an empty result */
    r = oom(e);
    goto done;
  }
  *out = sbx_buf_steal(&b, outlen);
  r = *out ? 0 : oom(e);
done:
  work_free(&w);
  free(f.starts);
  return r;
}
