#include "controller/net/sse.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "shared/buf.h"

static const unsigned char bom[3] = {0xef, 0xbb, 0xbf};

struct sse_parser {
  size_t max;
  sse_event_fn fn;
  void *userdata;
  struct sbx_buf line; /* a line split across chunks */
  struct sbx_buf data; /* data lines, each followed by \n */
  struct sbx_buf type;
  struct sbx_buf id;
  int64_t retry_ms;
  unsigned bom_matched; /* leading bytes that matched the BOM so far */
  bool bom_done;        /* past the point where a BOM may appear */
  bool after_cr;        /* the last byte was \r: a \n now ends nothing */
  int failed;           /* negative errno once failed */
};

int sse_parser_new(size_t max_event_bytes, sse_event_fn fn, void *userdata,
                   struct sse_parser **out) {
  struct sse_parser *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  p->max = max_event_bytes ? max_event_bytes : SSE_DEFAULT_MAX_EVENT_BYTES;
  p->fn = fn;
  p->userdata = userdata;
  sbx_buf_init(&p->line, p->max);
  sbx_buf_init(&p->data, p->max);
  sbx_buf_init(&p->type, p->max);
  sbx_buf_init(&p->id, p->max);
  p->retry_ms = -1;
  *out = p;
  return 0;
}

struct sse_parser *sse_parser_free(struct sse_parser *p) {
  if (!p)
    return NULL;
  sbx_buf_free(&p->line);
  sbx_buf_free(&p->data);
  sbx_buf_free(&p->type);
  sbx_buf_free(&p->id);
  free(p);
  return NULL;
}

int64_t sse_retry_ms(const struct sse_parser *p) {
  return p->retry_ms;
}

static int fail(struct sse_parser *p, int r, struct sbx_error *e) {
  p->failed = r;
  if (r == -E2BIG)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "server-sent event larger than %zu bytes", p->max);
  if (r == -ENOMEM)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ENOMEM,
                         "out of memory parsing server-sent events");
  return sbx_error_set(e, SBX_OK, -r, "server-sent event handler failed: %s",
                       strerror(-r));
}

/* Ends the event being built: hands it to the callback if it has data. */
static int dispatch(struct sse_parser *p) {
  int r = 0;
  if (p->data.len > 0) {
    /* Drop the \n that followed the last data line. */
    p->data.data[--p->data.len] = '\0';
    struct sse_event ev = {
        .type = p->type.len ? p->type.data : "message",
        .type_len = p->type.len ? p->type.len : strlen("message"),
        .data = p->data.data,
        .data_len = p->data.len,
        .id = p->id.data ? p->id.data : "",
        .id_len = p->id.len,
    };
    r = p->fn(&ev, p->userdata);
    if (r > 0)
      r = 0;
  }
  sbx_buf_reset(&p->data);
  sbx_buf_reset(&p->type);
  return r;
}

static bool field_is(const char *f, size_t n, const char *name) {
  return n == strlen(name) && memcmp(f, name, n) == 0;
}

/* Sets the retry time when VALUE is a non-empty run of ASCII digits that
 * fits; ignores it otherwise. */
static void set_retry(struct sse_parser *p, const char *v, size_t n) {
  int64_t ms = 0;
  if (n == 0)
    return;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9')
      return;
    if (ms > (INT64_MAX - 9) / 10)
      return;
    ms = ms * 10 + (v[i] - '0');
  }
  p->retry_ms = ms;
}

/* Interprets one complete line (without its line end). The caller has
 * checked that the line, the data and the type together fit the limit, which
 * bounds what this adds. */
static int process_line(struct sse_parser *p, const char *s, size_t n) {
  if (n == 0)
    return dispatch(p);
  if (s[0] == ':')
    return 0;

  const char *colon = memchr(s, ':', n);
  size_t flen = colon ? (size_t)(colon - s) : n;
  const char *v = colon ? colon + 1 : s + n;
  size_t vlen = colon ? n - flen - 1 : 0;
  if (vlen > 0 && v[0] == ' ') {
    v++;
    vlen--;
  }

  int r = 0;
  if (field_is(s, flen, "data")) {
    if ((r = sbx_buf_append(&p->data, v, vlen)) == 0)
      r = sbx_buf_append(&p->data, "\n", 1);
  } else if (field_is(s, flen, "event")) {
    sbx_buf_reset(&p->type);
    r = sbx_buf_append(&p->type, v, vlen);
  } else if (field_is(s, flen, "id")) {
    if (!memchr(v, '\0', vlen)) {
      sbx_buf_reset(&p->id);
      r = sbx_buf_append(&p->id, v, vlen);
    }
  } else if (field_is(s, flen, "retry")) {
    set_retry(p, v, vlen);
  }
  return r;
}

/* True when a line of N bytes still fits with the event built so far. */
static bool fits(const struct sse_parser *p, size_t n) {
  size_t used = p->data.len + p->type.len;
  return used <= p->max && n <= p->max - used;
}

static int feed_bytes(struct sse_parser *p, const char *s, size_t n) {
  while (n > 0) {
    if (p->after_cr) {
      p->after_cr = false;
      if (s[0] == '\n') {
        s++;
        n--;
        continue;
      }
    }
    size_t k = 0;
    while (k < n && s[k] != '\n' && s[k] != '\r')
      k++;
    if (!fits(p, p->line.len) || !fits(p, p->line.len + k))
      return -E2BIG;
    int r;
    if (k == n)
      return sbx_buf_append(&p->line, s, k);
    if (p->line.len == 0) {
      r = process_line(p, s, k);
    } else {
      r = sbx_buf_append(&p->line, s, k);
      if (r == 0)
        r = process_line(p, p->line.data, p->line.len);
      sbx_buf_reset(&p->line);
    }
    if (r < 0)
      return r;
    p->after_cr = s[k] == '\r';
    s += k + 1;
    n -= k + 1;
  }
  return 0;
}

int sse_feed(struct sse_parser *p, const void *bytes, size_t len,
             struct sbx_error *e) {
  const unsigned char *s = bytes;
  int r;

  if (p->failed)
    return sbx_error_set(e, SBX_OK, -p->failed,
                         "server-sent event stream failed earlier");
  /* One BOM may open the stream; a partial match is ordinary text. */
  while (!p->bom_done && len > 0) {
    if (s[0] == bom[p->bom_matched]) {
      s++;
      len--;
      if (++p->bom_matched == sizeof(bom))
        p->bom_done = true;
      continue;
    }
    p->bom_done = true;
    r = feed_bytes(p, (const char *)bom, p->bom_matched);
    if (r < 0)
      return fail(p, r, e);
  }
  r = feed_bytes(p, (const char *)s, len);
  if (r < 0)
    return fail(p, r, e);
  return 0;
}

int sse_finish(struct sse_parser *p) {
  bool discarded = p->line.len > 0 || p->data.len > 0 || p->type.len > 0 ||
                   (!p->bom_done && p->bom_matched > 0);
  sbx_buf_reset(&p->line);
  sbx_buf_reset(&p->data);
  sbx_buf_reset(&p->type);
  p->bom_matched = 0;
  p->bom_done = false;
  p->after_cr = false;
  p->failed = 0;
  return discarded;
}
