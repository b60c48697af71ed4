/* A skill's SKILL.md front matter, read as the SDK reads it
 * (parseSkillFrontmatter): root keys only, plain values folded over their
 * continuation lines, single-line quotes, "|" and ">" block scalars. It is
 * not a YAML loader. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/skills.h"
#include "shared/buf.h"
#include "shared/cleanup.h"

struct line {
  const char *s;
  size_t n;
};

static bool is_ws(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' ||
         ch == '\v';
}

/* The leading spaces (tabs are content). */
static size_t indent_of(struct line l) {
  size_t i = 0;
  while (i < l.n && l.s[i] == ' ')
    i++;
  return i;
}

static struct line trim(struct line l) {
  while (l.n && is_ws(l.s[0]))
    l.s++, l.n--;
  while (l.n && is_ws(l.s[l.n - 1]))
    l.n--;
  return l;
}

static bool line_is(struct line l, const char *w) {
  l = trim(l);
  return l.n == strlen(w) && memcmp(l.s, w, l.n) == 0;
}

/* A block scalar header: ">" or "|", an optional indent digit and
 * chomping sign in either order, an optional comment. *EXPLICIT is the
 * digit or 0. */
static bool block_header(struct line v, char *style, unsigned *explicit_) {
  if (v.n == 0 || (v.s[0] != '>' && v.s[0] != '|'))
    return false;
  size_t i = 1;
  *explicit_ = 0;
  if (i < v.n && v.s[i] >= '1' && v.s[i] <= '9') {
    *explicit_ = (unsigned)(v.s[i++] - '0');
    if (i < v.n && (v.s[i] == '+' || v.s[i] == '-'))
      i++;
  } else if (i < v.n && (v.s[i] == '+' || v.s[i] == '-')) {
    i++;
    if (i < v.n && v.s[i] >= '1' && v.s[i] <= '9')
      *explicit_ = (unsigned)(v.s[i++] - '0');
  }
  if (i < v.n) {
    size_t j = i;
    while (j < v.n && (v.s[j] == ' ' || v.s[j] == '\t'))
      j++;
    if (j == i || j >= v.n || v.s[j] != '#')
      return false;
  }
  *style = v.s[0];
  return true;
}

/* The SDK's foldFrontmatterLines. */
static int fold(struct sbx_buf *b, const struct line *ls, size_t n) {
  struct line prev = {"", 0};
  size_t blank = 0;
  bool any = false;
  int r = 0;
  for (size_t i = 0; i < n && r == 0; i++) {
    if (ls[i].n == 0) {
      blank++;
      continue;
    }
    if (any) {
      bool more = (prev.n && (prev.s[0] == ' ' || prev.s[0] == '\t')) ||
                  ls[i].s[0] == ' ' || ls[i].s[0] == '\t';
      size_t nl = more ? blank + 1 : blank;
      for (size_t k = 0; k < nl && r == 0; k++)
        r = sbx_buf_append(b, "\n", 1);
      if (r == 0 && nl == 0)
        r = sbx_buf_append(b, " ", 1);
    }
    if (r == 0)
      r = sbx_buf_append(b, ls[i].s, ls[i].n);
    any = true;
    prev = ls[i];
    blank = 0;
  }
  return r;
}

/* B's text trimmed, as a new string. */
static char *take_trimmed(struct sbx_buf *b) {
  size_t n = 0;
  char *s = sbx_buf_steal(b, &n);
  if (!s)
    return NULL;
  struct line t = trim((struct line){s, n});
  memmove(s, t.s, t.n);
  s[t.n] = '\0';
  return s;
}

/* The value of the key whose line is LS[*I - 1] with VALUE after its colon;
 * consumes its body lines up to END. New string, or NULL on OOM. */
static char *read_value(const struct line *ls, size_t *i, size_t end,
                        size_t key_indent, struct line value) {
  char style = 0;
  unsigned expl = 0;
  bool block = block_header(value, &style, &expl);
  size_t content = block && expl ? key_indent + expl : 0;
  bool have_content = block && expl;
  _cleanup_free_ struct line *body = calloc(end - *i + 2, sizeof(*body));
  size_t nb = 0;
  if (!body)
    return NULL;
  if (!block && value.n)
    body[nb++] = value;
  while (*i < end) {
    struct line next = ls[*i];
    struct line lead = next;
    while (lead.n && is_ws(lead.s[0]))
      lead.s++, lead.n--;
    if (!block && lead.n && lead.s[0] == '#') {
      (*i)++;
      continue;
    }
    if (trim(next).n) {
      size_t ind = indent_of(next);
      if (ind < (have_content ? content : key_indent + 1))
        break;
      if (block && !have_content) {
        content = ind;
        have_content = true;
      }
    }
    body[nb++] = block ? next : trim(next);
    (*i)++;
  }
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, SKILLS_MAX_SKILL_MD);
  int r = 0;
  if (block) {
    for (size_t k = 0; k < nb; k++) {
      size_t cut = content < body[k].n ? content : body[k].n;
      body[k].s += cut;
      body[k].n -= cut;
    }
    if (style == '|')
      for (size_t k = 0; k < nb && r == 0; k++)
        r = k ? sbx_buf_printf(&b, "\n%.*s", (int)body[k].n, body[k].s)
              : sbx_buf_append(&b, body[k].s, body[k].n);
    else
      r = fold(&b, body, nb);
  } else if (value.n && (value.s[0] == '"' || value.s[0] == '\'')) {
    if (value.n >= 2 && value.s[value.n - 1] == value.s[0])
      r = sbx_buf_append(&b, value.s + 1, value.n - 2);
    else
      r = sbx_buf_append(&b, value.s, value.n);
  } else if (value.n) {
    r = fold(&b, body, nb);
  }
  if (r < 0)
    return NULL;
  /* A plain or quoted value is kept as folded; a block is trimmed. */
  if (block)
    return take_trimmed(&b);
  return sbx_buf_steal(&b, NULL);
}

/* Splits MD into lines at "\n" or "\r\n". New array, *N lines. */
static struct line *split_lines(const char *md, size_t len, size_t *n) {
  size_t cap = 1;
  for (size_t i = 0; i < len; i++)
    cap += md[i] == '\n';
  struct line *ls = calloc(cap, sizeof(*ls));
  if (!ls)
    return NULL;
  size_t k = 0, start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i < len && md[i] != '\n')
      continue;
    size_t e = i;
    if (i < len && e > start && md[e - 1] == '\r')
      e--;
    ls[k++] = (struct line){md + start, e - start};
    start = i + 1;
  }
  *n = k;
  return ls;
}

int skills_frontmatter(const char *md, size_t len, char **name,
                       char **description) {
  *name = *description = NULL;
  size_t n = 0;
  _cleanup_free_ struct line *ls = split_lines(md, len, &n);
  if (!ls)
    return -ENOMEM;
  if (n == 0 || !line_is(ls[0], "---"))
    return 0;
  size_t delim = indent_of(ls[0]), end = 0;
  for (size_t i = 1; i < n && !end; i++)
    if (line_is(ls[i], "---") && indent_of(ls[i]) <= delim)
      end = i;
  if (!end)
    return 0;
  bool have_root = false;
  size_t root = 0;
  for (size_t i = 1; i < end;) {
    struct line line = ls[i++];
    struct line st = trim(line);
    const char *colon = st.n ? memchr(st.s, ':', st.n) : NULL;
    if (!st.n || st.s[0] == '#' || !colon)
      continue;
    struct line key = trim((struct line){st.s, (size_t)(colon - st.s)});
    struct line value =
        trim((struct line){colon + 1, st.n - (size_t)(colon - st.s) - 1});
    if (!key.n)
      continue;
    size_t ind = indent_of(line);
    if (!have_root) {
      root = ind;
      have_root = true;
    }
    if (ind != root)
      continue;
    char *v = read_value(ls, &i, end, ind, value);
    if (!v) {
      free(*name), free(*description);
      *name = *description = NULL;
      return -ENOMEM;
    }
    char **slot = key.n == 4 && memcmp(key.s, "name", 4) == 0 ? name
                  : key.n == 11 && memcmp(key.s, "description", 11) == 0
                      ? description
                      : NULL;
    if (slot) {
      free(*slot);
      *slot = v;
    } else {
      free(v);
    }
  }
  return 0;
}
