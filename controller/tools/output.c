#include "controller/tools/output.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "shared/rand.h"
#include "shared/utf8.h"

#define BYTES_PER_TOKEN 4

static const char notice_head[] = "[...";
static const char notice_tail[] =
    " characters truncated from process output...]\n";

size_t output_estimate_tokens(size_t bytes) {
  return bytes / BYTES_PER_TOKEN + (bytes % BYTES_PER_TOKEN != 0);
}

/* The length of the character at S for cutting: a valid sequence, or one
 * invalid byte. */
static size_t char_len(const unsigned char *s, size_t n) {
  if (s[0] < 0x80)
    return 1;
  bool valid;
  size_t k = sbx_utf8_scan(s, n, &valid);
  return valid ? k : 1;
}

/* Pieces after splitting on \r\n, \r or \n; 0 for empty text. */
static size_t count_lines(const char *s, size_t n) {
  if (n == 0)
    return 0;
  size_t lines = 1;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\n') {
      lines++;
    } else if (s[i] == '\r') {
      lines++;
      if (i + 1 < n && s[i + 1] == '\n')
        i++;
    }
  }
  return lines;
}

/* The length of a leading "[...<digits> characters truncated from process
 * output...]\n", or 0. */
static size_t leading_notice_len(const char *s, size_t n) {
  size_t h = sizeof(notice_head) - 1, t = sizeof(notice_tail) - 1;
  if (n < h || memcmp(s, notice_head, h) != 0)
    return 0;
  size_t i = h;
  while (i < n && s[i] >= '0' && s[i] <= '9')
    i++;
  if (i == h || n - i < t || memcmp(s + i, notice_tail, t) != 0)
    return 0;
  return i + t;
}

/* Splits BODY (N bytes) around a BUDGET of bytes: the longest head of at most
 * BUDGET/2 bytes and the shortest tail of at least BUDGET - BUDGET/2 bytes
 * that start and end at character boundaries, never overlapping. */
static void split_head_tail(const char *body, size_t n, size_t budget,
                            size_t *head_end, size_t *tail_start) {
  const unsigned char *s = (const unsigned char *)body;
  size_t left = budget / 2;
  size_t right = budget - left;
  size_t tail_target = n > right ? n - right : 0;
  size_t pos = 0;

  *head_end = 0;
  *tail_start = n;
  while (pos < n) {
    size_t end = pos + char_len(s + pos, n - pos);
    if (end <= left) {
      *head_end = end;
    } else if (pos >= tail_target) {
      *tail_start = pos;
      break;
    }
    pos = end;
  }
  if (*tail_start < *head_end)
    *tail_start = *head_end;
}

int output_truncate(const char *text, size_t len, int64_t max_output_tokens,
                    struct sbx_buf *out, size_t *original_tokens) {
  if (original_tokens)
    *original_tokens = 0;
  if (max_output_tokens < 0 ||
      (uint64_t)max_output_tokens > SIZE_MAX / BYTES_PER_TOKEN ||
      len <= (size_t)max_output_tokens * BYTES_PER_TOKEN)
    return sbx_buf_append(out, text, len);

  size_t max = (size_t)max_output_tokens * BYTES_PER_TOKEN;
  size_t original = output_estimate_tokens(len);
  char marker[64], prefix[64];
  int m =
      snprintf(marker, sizeof(marker), "...%zu tokens truncated...", original);
  int p = snprintf(prefix, sizeof(prefix), "Total output lines: %zu\n\n",
                   count_lines(text, len));
  if (m < 0 || p < 0)
    return -EINVAL;
  size_t marker_len = (size_t)m, prefix_len = (size_t)p;

  /* The body never holds the notice, even when the notice is dropped. */
  size_t notice_len = leading_notice_len(text, len);
  const char *body = text + notice_len;
  size_t body_len = len - notice_len;
  if (notice_len > max)
    notice_len = 0;
  if (prefix_len + notice_len + marker_len > max)
    prefix_len = 0;

  int r;
  size_t pre = prefix_len + notice_len;
  if (original_tokens)
    *original_tokens = original;
  if ((r = sbx_buf_append(out, prefix, prefix_len)) < 0 ||
      (r = sbx_buf_append(out, text, notice_len)) < 0)
    return r;
  if (pre + marker_len > max) {
    /* The marker is ASCII: any cut is a character boundary. */
    r = sbx_buf_append(out, marker, max - pre);
    return r < 0 ? r : 1;
  }

  size_t head_end, tail_start;
  split_head_tail(body, body_len, max - pre - marker_len, &head_end,
                  &tail_start);
  size_t retained = notice_len + head_end + (body_len - tail_start);
  m = snprintf(marker, sizeof(marker), "...%zu tokens truncated...",
               output_estimate_tokens(len - retained));
  if (m < 0)
    return -EINVAL;
  if ((r = sbx_buf_append(out, body, head_end)) < 0 ||
      (r = sbx_buf_append(out, marker, (size_t)m)) < 0 ||
      (r = sbx_buf_append(out, body + tail_start, body_len - tail_start)) < 0)
    return r;
  return 1;
}

int output_format_exec(const struct output_exec *x, struct sbx_buf *out) {
  /* toFixed(4), rounding half up, in units of 0.1 ms. */
  uint64_t units = x->wall_ns / 100000 + (x->wall_ns % 100000 >= 50000);
  unsigned chunk = (unsigned)(sbx_random_u64() & 0xffffff);
  int r = sbx_buf_printf(
      out, "Chunk ID: %06x\nWall time: %" PRIu64 ".%04" PRIu64 " seconds\n",
      chunk, units / 10000, units % 10000);
  if (r < 0)
    return r;
  if (x->running)
    r = sbx_buf_printf(out, "Process running with session ID %" PRId64 "\n",
                       x->session_id);
  else
    r = sbx_buf_printf(out, "Process exited with code %d\n", x->exit_code);
  if (r < 0)
    return r;
  if (x->original_tokens > 0 &&
      (r = sbx_buf_printf(out, "Original token count: %zu\n",
                          x->original_tokens)) < 0)
    return r;
  if ((r = sbx_buf_append_str(out, "Output:\n")) < 0)
    return r;
  return sbx_buf_append(out, x->text, x->len);
}

int output_exec_response(const struct output_exec *x, int64_t max_output_tokens,
                         struct sbx_buf *out) {
  _cleanup_buf_ struct sbx_buf text;
  struct output_exec y = *x;

  /* The text can never be longer than the whole response. */
  sbx_buf_init(&text, out->max);
  int r = output_truncate(x->text, x->len, max_output_tokens, &text,
                          &y.original_tokens);
  if (r < 0)
    return r;
  y.text = text.data ? text.data : "";
  y.len = text.len;
  return output_format_exec(&y, out);
}
