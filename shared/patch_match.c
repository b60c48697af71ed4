/* Finding lines in the file being updated: the file split into lines, the
 * matching tiers (exact, then ever looser, as Codex's seek_sequence), and
 * KMP over whole lines, so that no file and patch make a search
 * quadratic. */
#include <stdlib.h>

#include "shared/patch_internal.h"

/* Splits IN into lines. */
int sbx_patch_file_split(struct file *f, const char *in, size_t len,
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
  s = span_trim(s);
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

/* The first file line >= FROM where the M lines of PAT match in TIER, or
 * PATCH_NOT_FOUND. KMP over lines: O(lines) comparisons whatever the input.
 * FAIL has room for M entries. BEST, when given, gets the longest prefix
 * seen. */
size_t sbx_patch_kmp_search(const struct file *f, const struct span *pat,
                            size_t m, size_t from, enum tier tier, size_t *fail,
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
  return PATCH_NOT_FOUND;
}

/* Codex's seek_sequence: the first file line >= FROM where PAT (M lines)
 * matches, trying each tier over the whole range before the next. EOF pins
 * the match to the last M lines. An empty pattern matches at FROM (at the
 * end with EOF). */
size_t sbx_patch_seek(const struct file *f, const struct span *pat, size_t m,
                      size_t from, bool eof, size_t *fail) {
  if (m == 0)
    return eof ? f->n : from;
  if (m > f->n || from > f->n - m)
    return PATCH_NOT_FOUND;
  for (int t = 0; t < TIER_COUNT; t++) {
    if (eof) {
      size_t at = f->n - m, j = 0;
      while (j < m && line_eq(file_line(f, at + j), pat[j], t))
        j++;
      if (j == m)
        return at;
      continue;
    }
    size_t at = sbx_patch_kmp_search(f, pat, m, from, t, fail, NULL);
    if (at != PATCH_NOT_FOUND)
      return at;
  }
  return PATCH_NOT_FOUND;
}
