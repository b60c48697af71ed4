/* libFuzzer target for the Server-Sent Events parser (controller/net/sse.c),
 * which reads every streamed model reply.
 *
 * Input: three header bytes, then the stream.
 *   byte 0  the event size limit in units of 16 bytes (0: the default)
 *   byte 1  the chunk size of the second run, minus one
 *   byte 2  the event at which the callback fails with -EIO (255: never)
 *
 * The stream is parsed twice: whole, and in chunks. What the callback sees
 * (each event's type, data and id), the result, the retry time and what
 * sse_finish reports must be the same whichever way the stream was cut, since
 * chunks may split the stream anywhere. Each event's strings are NUL-terminated
 * at their lengths and within the limit; a failed parser keeps failing with the
 * same error and is ready again after sse_finish. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controller/net/sse.h"
#include "shared/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
  size_t max;         /* the parser's limit */
  unsigned fail_at;   /* the event the callback fails, or UINT_MAX */
  unsigned nevents;   /* events seen */
  struct sbx_buf log; /* what the callback saw */
  int result;         /* the first failure, or 0 */
  int finish;         /* sse_finish's answer */
  int64_t retry_ms;   /* sse_retry_ms at the end */
};

/* Appends N bytes of S to the log with their length, so that no two
 * different sequences of events log the same bytes. */
static void log_field(struct run *r, char tag, const char *s, size_t n) {
  if (sbx_buf_printf(&r->log, "%c%zu:", tag, n) < 0 ||
      sbx_buf_append(&r->log, s, n) < 0)
    abort();
}

/* The callback: checks the event's shape and logs it. */
static int on_event(const struct sse_event *ev, void *arg) {
  struct run *r = arg;
  if (!ev->type || !ev->data || !ev->id || ev->type_len == 0)
    abort();
  if (ev->type[ev->type_len] != '\0' || ev->data[ev->data_len] != '\0' ||
      ev->id[ev->id_len] != '\0')
    abort(); /* NUL-terminated at their lengths */
  if (memchr(ev->id, '\0', ev->id_len) || memchr(ev->data, '\r', ev->data_len))
    abort(); /* an id holds no NUL; line ends never reach the data */
  if (memchr(ev->type, '\n', ev->type_len) || memchr(ev->id, '\n', ev->id_len))
    abort();
  if (ev->data_len >= r->max)
    abort(); /* the event fits the limit */
  log_field(r, 'T', ev->type, ev->type_len);
  log_field(r, 'D', ev->data, ev->data_len);
  log_field(r, 'I', ev->id, ev->id_len);
  if (r->nevents++ == r->fail_at)
    return -EIO;
  return 0;
}

/* Parses S (N bytes) in chunks of CHUNK bytes (0: whole) into R. */
static void parse(struct run *r, const uint8_t *s, size_t n, size_t chunk) {
  struct sse_parser *p = NULL;
  struct sbx_error e = {0};
  if (sse_parser_new(r->max, on_event, r, &p) < 0)
    abort();
  sbx_buf_init(&r->log, SIZE_MAX / 2);
  size_t off = 0;
  do {
    size_t k = chunk && n - off > chunk ? chunk : n - off;
    r->result = sse_feed(p, s + off, k, &e);
    off += k;
  } while (r->result == 0 && off < n);
  if (r->result < 0) {
    if (r->result != -E2BIG && r->result != -EIO)
      abort();
    if (!e.msg[0] || !memchr(e.msg, '\0', sizeof(e.msg)))
      abort();
    if (sse_feed(p, "\n", 1, &e) != r->result)
      abort(); /* a failed parser stays failed */
  }
  r->finish = sse_finish(p);
  r->retry_ms = sse_retry_ms(p);
  /* Ready for a new stream: one event, whatever came before. */
  unsigned before = r->nevents;
  r->fail_at = UINT32_MAX;
  if (sse_feed(p, "data: x\n\n", 9, &e) != 0 || r->nevents != before + 1)
    abort();
  sse_parser_free(p);
}

/* Whether two runs saw the same stream. */
static bool same(const struct run *a, const struct run *b) {
  if (a->result != b->result || a->retry_ms != b->retry_ms ||
      a->log.len != b->log.len ||
      (a->log.len && memcmp(a->log.data, b->log.data, a->log.len)))
    return false;
  /* After a failure, what was left pending depends on the cuts. */
  return a->result < 0 || a->finish == b->finish;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3)
    return 0;
  size_t max = (size_t)data[0] * 16;
  size_t chunk = (size_t)data[1] + 1;
  unsigned fail_at = data[2] == 255 ? UINT32_MAX : data[2];
  const uint8_t *s = data + 3;
  size_t n = size - 3;

  struct run runs[2];
  size_t chunks[2] = {0, chunk};
  for (size_t i = 0; i < 2; i++) {
    runs[i] = (struct run){
        .max = max ? max : SSE_DEFAULT_MAX_EVENT_BYTES,
        .fail_at = fail_at,
    };
    parse(&runs[i], s, n, chunks[i]);
  }
  if (!same(&runs[0], &runs[1]))
    abort();
  for (size_t i = 0; i < 2; i++)
    sbx_buf_free(&runs[i].log);
  return 0;
}
