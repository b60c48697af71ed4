/* The apply_patch parser: a "*** Begin Patch" text into struct sbx_patch,
 * each op with its path and, for Add File, its content, for Update File its
 * hunks, which point into the patch's own copy of the text. Errors name the
 * patch line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/patch_internal.h"

SBX_DEFINE_CLEANUP(struct sbx_patch *, sbx_patch_free)

/* What sbx_patch_parse allocates: the public struct first, so a pointer to
 * it converts back to the whole, and the text the hunks point into. */
struct patch_impl {
  struct sbx_patch pub;
  char *text;
};

/* Writes S into DST (size N >= 8) as a double-quoted string for an error
 * message: at most PATCH_QUOTE_MAX bytes of it, cut on a UTF-8 character
 * boundary with "..." when longer; '"', '\\' and control bytes escaped, so that
 * the quote is one readable line whatever the input. Returns DST. */
const char *sbx_patch_quote(char *dst, size_t n, struct span s) {
  size_t limit = n - 6; /* room for both quotes, "..." and the NUL */
  if (limit > PATCH_QUOTE_MAX)
    limit = PATCH_QUOTE_MAX;
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
struct span sbx_patch_anchor_text(struct span line) {
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
  char q[PATCH_QUOTE_MAX + 8];
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
                      sbx_patch_quote(q, sizeof(q), l));
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
  char q[PATCH_QUOTE_MAX + 8];

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
                      number, sbx_patch_quote(q, sizeof(q), ps_line(ps)));
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
                      number, sbx_patch_quote(q, sizeof(q), l));
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
  char q[PATCH_QUOTE_MAX + 8];
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
                        sbx_patch_quote(q, sizeof(q), l));
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
  char q[PATCH_QUOTE_MAX + 8];
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
                      sbx_patch_quote(q, sizeof(q), first));
  if (b.first == b.last || !span_is(span_trim(last), "*** End Patch"))
    return line_error(e, SBX_INVALID_ARGUMENT, b.last_no,
                      "expected \"*** End Patch\" as the last line, got %s",
                      sbx_patch_quote(q, sizeof(q), last));

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
