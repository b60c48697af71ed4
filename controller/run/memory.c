/* The memory capability's read path and its helpers: the summary read
 * into the instructions within the SDK's limits, the SDK's templates and
 * truncation, and workspace files through sandboxd. */
#include "controller/run/memory.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/client.h"
#include "shared/utf8.h"

#define MEMORY_CHUNK (1u << 20)

/* The byte length of the UTF-8 sequence led by C (1 for a stray byte). */
static size_t char_len(unsigned char c) {
  if (c >= 0xf0 && c < 0xf8)
    return 4;
  if (c >= 0xe0)
    return c < 0xf0 ? 3 : 1;
  if (c >= 0xc0)
    return 2;
  return 1;
}

char *memory_truncate_tokens(const char *text, size_t len, size_t max_tokens) {
  size_t max = max_tokens * 4;
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, len + 64);
  if (len <= max) {
    if (sbx_buf_append(&b, text, len) < 0 || sbx_buf_append(&b, "", 1) < 0)
      return NULL;
    return sbx_buf_steal(&b, NULL);
  }
  /* The halves end and start on whole characters. */
  size_t left = max / 2, tail_start = len - (max - left);
  size_t prefix_end = 0, suffix_start = len, i = 0;
  bool in_suffix = false;
  while (i < len) {
    size_t end = i + char_len((unsigned char)text[i]);
    if (end > len)
      end = len;
    if (end <= left)
      prefix_end = end;
    else if (i >= tail_start && !in_suffix) {
      suffix_start = i;
      in_suffix = true;
    }
    i = end;
  }
  if (suffix_start < prefix_end)
    suffix_start = prefix_end;
  size_t removed = (len - max + 3) / 4;
  if (sbx_buf_append(&b, text, prefix_end) < 0 ||
      sbx_buf_printf(&b, "...%zu tokens truncated...", removed) < 0 ||
      sbx_buf_append(&b, text + suffix_start, len - suffix_start) < 0 ||
      sbx_buf_append(&b, "", 1) < 0)
    return NULL;
  return sbx_buf_steal(&b, NULL);
}

char *memory_replace_all(const char *text, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to);
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 64u << 20);
  const char *p = text;
  for (const char *q; (q = strstr(p, from)); p = q + fl)
    if (sbx_buf_append(&b, p, (size_t)(q - p)) < 0 ||
        sbx_buf_append(&b, to, tl) < 0)
      return NULL;
  if (sbx_buf_append(&b, p, strlen(p) + 1) < 0)
    return NULL;
  return sbx_buf_steal(&b, NULL);
}

char *memory_render(const char *tmpl, ...) {
  _cleanup_free_ char *cur = strdup(tmpl);
  va_list ap;
  va_start(ap, tmpl);
  for (const char *name; cur && (name = va_arg(ap, const char *));) {
    const char *value = va_arg(ap, const char *);
    char ph[80];
    (void)snprintf(ph, sizeof(ph), name[0] == '{' ? "%s" : "{%s}", name);
    char *next = memory_replace_all(cur, ph, value);
    free(cur);
    cur = next;
  }
  va_end(ap);
  return TAKE_PTR(cur);
}

char *memory_extra_section(const char *extra) {
  const char *s = extra ? extra : "";
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
    s++;
  size_t n = strlen(s);
  while (n > 0 && strchr(" \n\t\r", s[n - 1]))
    n--;
  if (n == 0)
    return strdup("");
  _cleanup_free_ char *trimmed = strndup(s, n);
  if (!trimmed)
    return NULL;
  _cleanup_free_ char *body =
      memory_render(sbx_memory_extra_md, "extra_prompt", trimmed, NULL);
  if (!body)
    return NULL;
  char *out = NULL;
  return asprintf(&out, "\n%s", body) < 0 ? NULL : out;
}

int memory_read(struct sandbox *sb, const char *path, size_t max, char **out,
                size_t *len, struct sbx_error *e) {
  *out = NULL;
  *len = 0;
  size_t cap = max ? max : MEMORY_TEXT_MAX_BYTES;
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, cap + 1);
  for (;;) {
    Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
    rd.path = (char *)path;
    rd.offset = b.len;
    rd.length = MEMORY_CHUNK;
    Sbx__V1__Response *resp = NULL;
    struct sbx_error le = {0};
    int r = sbx_file_read(sb->client, &rd, &resp, &le);
    if (r < 0) {
      if (le.code == SBX_NOT_FOUND)
        return 0;
      if (e)
        *e = le;
      return r;
    }
    size_t n = resp->file_read->data.len;
    bool eof = resp->file_read->eof || n == 0;
    size_t take = b.len + n > cap ? cap - b.len : n;
    r = sbx_buf_append(&b, resp->file_read->data.data, take);
    sbx_client_reply_free(resp);
    if (r < 0)
      return r;
    if (take < n && !max)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                           "memory file \"%s\" is larger than %d bytes", path,
                           MEMORY_TEXT_MAX_BYTES);
    if (eof || b.len >= cap)
      break;
  }
  if (sbx_buf_append(&b, "", 1) < 0)
    return -ENOMEM;
  *out = sbx_buf_steal(&b, len);
  (*len)--;
  return 0;
}

int memory_write(struct sandbox *sb, const char *path, const char *text,
                 size_t len, const char *owner, struct sbx_error *e) {
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = (char *)path;
  w.data.data = (uint8_t *)text;
  w.data.len = len;
  w.mode = SBX__V1__WRITE_MODE__WRITE_TRUNCATE;
  w.perm = 0644;
  w.parents = true;
  w.atomic = true;
  w.owner = (char *)(owner ? owner : "");
  Sbx__V1__Response *resp = NULL;
  int r = sbx_file_write(sb->client, &w, &resp, e);
  sbx_client_reply_free(resp);
  return r;
}

int memory_mkdir(struct sandbox *sb, const char *path, const char *owner,
                 struct sbx_error *e) {
  int r = sbx_file_mkdir(sb->client, path, true, 0755, e);
  if (r == 0 && owner)
    r = sbx_file_chown(sb->client, path, owner, NULL, false, e);
  return r;
}

/* S without the whitespace around it, in place. */
static char *trim(char *s) {
  while (*s && strchr(" \n\t\r\f\v", *s))
    s++;
  size_t n = strlen(s);
  while (n > 0 && strchr(" \n\t\r\f\v", s[n - 1]))
    s[--n] = '\0';
  return s;
}

int memory_read_fragment(struct sandbox *sb, const struct agent_memory *m,
                         const char *root, const char *cwd, char **out,
                         struct sbx_error *e) {
  *out = NULL;
  char path[2100];
  (void)snprintf(path, sizeof(path), "%s/%s", m->memories_dir, m->summary_file);
  _cleanup_free_ char *raw = NULL;
  size_t len = 0;
  int r = memory_read(sb, path, MEMORY_SUMMARY_MAX_BYTES, &raw, &len, e);
  if (r < 0 || !raw)
    return r;
  /* Decoded as UTF-8 with replacement, as the SDK decodes it. */
  _cleanup_buf_ struct sbx_buf clean;
  sbx_buf_init(&clean, 4 * (size_t)MEMORY_SUMMARY_MAX_BYTES);
  if (sbx_utf8_sanitize(raw, len, &clean) < 0 ||
      sbx_buf_append(&clean, "", 1) < 0)
    return -ENOMEM;
  char *summary = trim(clean.data);
  if (!*summary)
    return 0;
  _cleanup_free_ char *cut = memory_truncate_tokens(summary, strlen(summary),
                                                    MEMORY_SUMMARY_MAX_TOKENS);
  char dir[2100];
  if (cwd && *cwd)
    (void)snprintf(dir, sizeof(dir), "%s/%s",
                   strcmp(root, "/") == 0 ? "" : root, m->memories_dir);
  else
    (void)snprintf(dir, sizeof(dir), "%s", m->memories_dir);
  _cleanup_free_ char *update =
      m->live_update
          ? memory_render(sbx_memory_live_update_md, "memory_dir", dir, NULL)
          : strdup("Never update memories. You can only read them.");
  if (!cut || !update)
    return -ENOMEM;
  *out = memory_render(sbx_memory_read_md, "memory_dir", dir,
                       "memory_update_instructions", update, "memory_summary",
                       cut, NULL);
  return *out ? 0 : -ENOMEM;
}
