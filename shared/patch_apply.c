/* Applying an Update File op: each hunk located in the file in order
 * (its "@@" anchors, then its old lines), then the file written again with
 * the hunks' new lines in place, keeping its line endings. */
#include <stdlib.h>

#include "shared/buf.h"
#include "shared/patch_internal.h"

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
  char q[PATCH_QUOTE_MAX + 8];
  struct partial best;
  size_t at;

  at = sbx_patch_kmp_search(f, w->old, m, from, TIER_UNICODE, w->fail, &best);
  if (at != PATCH_NOT_FOUND) /* only possible with eof */
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%.200s: hunk %zu (patch line %zu): context found at "
                         "line %zu, but \"*** End of File\" requires it to "
                         "end the file (%zu lines)",
                         op->path, number, hunk_line, at + 1, f->n);
  if (from > 0) {
    at = sbx_patch_kmp_search(f, w->old, m, 0, TIER_UNICODE, w->fail, NULL);
    if (at != PATCH_NOT_FOUND)
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
                         sbx_patch_quote(q, sizeof(q), w->old[0]));
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "%.200s: hunk %zu (patch line %zu): could not find "
                       "context line %s (the %zu line%s before it match at "
                       "line %zu)",
                       op->path, number, w->old_no[best.len],
                       sbx_patch_quote(q, sizeof(q), w->old[best.len]),
                       best.len, best.len == 1 ? "" : "s", best.at + 1);
}

/* Locates hunk NUMBER (H) of OP at or after *CURSOR and fills R; moves
 * *CURSOR past it. */
static int locate(const struct sbx_patch_op *op, const struct file *f,
                  struct work *w, const struct sbx_patch_hunk *h, size_t number,
                  size_t *cursor, struct repl *r, struct sbx_error *e) {
  const char *p, *next;
  bool anchored = false, last_new_empty = false;
  size_t m = 0, no;
  char q[PATCH_QUOTE_MAX + 8];

  no = h->anchor_line;
  for (p = h->anchors; p && p < h->body; p = next, no++) {
    struct span a = sbx_patch_anchor_text(next_line(p, h->body, &next));
    if (a.n == 0)
      continue;
    size_t at = sbx_patch_seek(f, &a, 1, *cursor, false, w->fail);
    if (at == PATCH_NOT_FOUND)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%.200s: hunk %zu (patch line %zu): could not "
                           "find anchor line %s",
                           op->path, number, no,
                           sbx_patch_quote(q, sizeof(q), a));
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
  size_t at = sbx_patch_seek(f, w->old, m, *cursor, h->eof, w->fail);
  if (at == PATCH_NOT_FOUND && w->old[m - 1].n == 0) {
    /* A trailing empty context line often stands for the file's final
     * newline; retry without it (Codex). */
    m--;
    r->drop_last = last_new_empty;
    at = sbx_patch_seek(f, w->old, m, *cursor, h->eof, w->fail);
  }
  if (at == PATCH_NOT_FOUND)
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
 * others were located in increasing order. Every line ends with the file's
 * line ending, but with EOL SBX_PATCH_EOL_SDK the last keeps the file's
 * lack of one. */
static int build(const struct file *f, const struct repl *repls, size_t nr,
                 enum sbx_patch_eol eol, struct sbx_buf *out) {
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
  if (count > 0 && !f->final_nl && eol == SBX_PATCH_EOL_SDK) {
    out->len -= f->crlf ? 2 : 1;
    out->data[out->len] = '\0';
  }
  return 0;
}

int sbx_patch_apply_update(const struct sbx_patch_op *op, const char *in,
                           size_t inlen, enum sbx_patch_eol eol, char **out,
                           size_t *outlen, struct sbx_error *e) {
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

  r = sbx_patch_file_split(&f, in, inlen, e);
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
  r = build(&f, w.repls, op->nhunks, eol, &b);
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
