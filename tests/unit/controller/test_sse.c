#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller/net/sse.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/errors.h"

#define MAX_EVENTS 32

/* What a callback saw: each event as "type|id|data" (data may hold NULs, so
 * the length is kept). */
struct seen {
  char *ev[MAX_EVENTS];
  size_t len[MAX_EVENTS];
  size_t n;
  int fail_at; /* return -ECANCELED on this event (1-based); 0: never */
};

static void seen_clear(struct seen *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->ev[i]);
  s->n = 0;
}

static int collect(const struct sse_event *ev, void *userdata) {
  struct seen *s = userdata;
  cr_assert_lt(s->n, MAX_EVENTS);
  cr_assert_eq(ev->type[ev->type_len], '\0');
  cr_assert_eq(ev->data[ev->data_len], '\0');
  cr_assert_eq(ev->id[ev->id_len], '\0');
  struct sbx_buf b;
  sbx_buf_init(&b, 1 << 20);
  cr_assert_eq(sbx_buf_append(&b, ev->type, ev->type_len), 0);
  cr_assert_eq(sbx_buf_append(&b, "|", 1), 0);
  cr_assert_eq(sbx_buf_append(&b, ev->id, ev->id_len), 0);
  cr_assert_eq(sbx_buf_append(&b, "|", 1), 0);
  cr_assert_eq(sbx_buf_append(&b, ev->data, ev->data_len), 0);
  s->len[s->n] = b.len;
  s->ev[s->n++] = sbx_buf_steal(&b, NULL);
  if (s->fail_at > 0 && (size_t)s->fail_at == s->n)
    return -ECANCELED;
  return 0;
}

static void expect_events(const struct seen *s, const char *const *want,
                          size_t nwant, const char *what) {
  cr_expect_eq(s->n, nwant, "%s: %zu events, want %zu", what, s->n, nwant);
  for (size_t i = 0; i < s->n && i < nwant; i++)
    cr_expect(s->len[i] == strlen(want[i]) &&
                  memcmp(s->ev[i], want[i], s->len[i]) == 0,
              "%s: event %zu is \"%s\", want \"%s\"", what, i, s->ev[i],
              want[i]);
}

/* Feeds a NUL-terminated string. */
static int feed(struct sse_parser *p, const char *s, struct sbx_error *e) {
  return sse_feed(p, s, strlen(s), e);
}

/* Parses STREAM in pieces: first CUT bytes, then the rest in chunks of STEP
 * (0: in one piece). Returns the parser's result; events land in S. */
static int parse_split(const char *stream, size_t len, size_t cut, size_t step,
                       struct seen *s) {
  struct sse_parser *p = NULL;
  cr_assert_eq(sse_parser_new(0, collect, s, &p), 0);
  int r = sse_feed(p, stream, cut, NULL);
  for (size_t i = cut; r == 0 && i < len; i += step ? step : len) {
    size_t n = step && len - i > step ? step : len - i;
    r = sse_feed(p, stream + i, n, NULL);
  }
  if (r == 0)
    cr_expect_eq(sse_finish(p), 0, "nothing left over at the end");
  sse_parser_free(p);
  return r;
}

/* A Responses API stream as the server sends it, with a comment, an id, a
 * retry and a two-line data field added to exercise the rules. */
static const char responses_stream[] =
    "event: response.created\n"
    "data: "
    "{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{"
    "\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\"}}\n"
    "\n"
    "event: response.output_item.added\n"
    "data: "
    "{\"type\":\"response.output_item.added\",\"sequence_number\":1,"
    "\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\","
    "\"role\":\"assistant\",\"content\":[]}}\n"
    "\n"
    ": keep-alive\n"
    "event: response.output_text.delta\n"
    "data: "
    "{\"type\":\"response.output_text.delta\",\"sequence_number\":2,"
    "\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,"
    "\"delta\":\"Hel\"}\n"
    "\n"
    "event: response.output_text.delta\n"
    "data: "
    "{\"type\":\"response.output_text.delta\",\"sequence_number\":3,"
    "\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,"
    "\"delta\":\"lo, w\xc3\xb6rld \xf0\x9f\x98\x80\"}\n"
    "\n"
    "data: first line\n"
    "data:second line\n"
    "\n"
    "id: 42\n"
    "retry: 2500\n"
    "event: response.completed\n"
    "data: "
    "{\"type\":\"response.completed\",\"sequence_number\":4,\"response\":{"
    "\"id\":\"resp_1\",\"status\":\"completed\"}}\n"
    "\n";

static const char *const responses_events[] = {
    "response.created||"
    "{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{"
    "\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\"}}",
    "response.output_item.added||"
    "{\"type\":\"response.output_item.added\",\"sequence_number\":1,"
    "\"output_index\":0,\"item\":{\"id\":\"msg_1\",\"type\":\"message\","
    "\"role\":\"assistant\",\"content\":[]}}",
    "response.output_text.delta||"
    "{\"type\":\"response.output_text.delta\",\"sequence_number\":2,"
    "\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,"
    "\"delta\":\"Hel\"}",
    "response.output_text.delta||"
    "{\"type\":\"response.output_text.delta\",\"sequence_number\":3,"
    "\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,"
    "\"delta\":\"lo, w\xc3\xb6rld \xf0\x9f\x98\x80\"}",
    "message||first line\nsecond line",
    "response.completed|42|"
    "{\"type\":\"response.completed\",\"sequence_number\":4,\"response\":{"
    "\"id\":\"resp_1\",\"status\":\"completed\"}}",
};

/* STREAM with every \n replaced by EOL, into OUT. */
static void with_line_ends(const char *stream, const char *eol,
                           struct sbx_buf *out) {
  for (const char *c = stream; *c; c++) {
    if (*c == '\n')
      cr_assert_eq(sbx_buf_append_str(out, eol), 0);
    else
      cr_assert_eq(sbx_buf_append(out, c, 1), 0);
  }
}

/* Parses STREAM whole, split in two at every byte, and byte by byte, and
 * expects the same events each time. */
static void expect_everywhere(const char *stream, size_t len,
                              const char *const *want, size_t nwant,
                              const char *name) {
  struct seen s = {0};
  char what[96];
  cr_expect_eq(parse_split(stream, len, len, 0, &s), 0);
  expect_events(&s, want, nwant, name);
  seen_clear(&s);
  for (size_t cut = 0; cut <= len; cut++) {
    snprintf(what, sizeof(what), "%s cut at %zu", name, cut);
    cr_expect_eq(parse_split(stream, len, cut, 0, &s), 0, "%s", what);
    expect_events(&s, want, nwant, what);
    seen_clear(&s);
  }
  snprintf(what, sizeof(what), "%s in 1-byte chunks", name);
  cr_expect_eq(parse_split(stream, len, 0, 1, &s), 0, "%s", what);
  expect_events(&s, want, nwant, what);
  seen_clear(&s);
  snprintf(what, sizeof(what), "%s in 7-byte chunks", name);
  cr_expect_eq(parse_split(stream, len, 3, 7, &s), 0, "%s", what);
  expect_events(&s, want, nwant, what);
  seen_clear(&s);
}

Test(sse, responses_stream_same_events_at_every_split) {
  expect_everywhere(responses_stream, strlen(responses_stream),
                    responses_events, SBX_ARRAY_SIZE(responses_events), "lf");
}

Test(sse, crlf_and_cr_line_ends_at_every_split) {
  static const char *const eols[] = {"\r\n", "\r"};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(eols); i++) {
    _cleanup_buf_ struct sbx_buf b;
    sbx_buf_init(&b, 1 << 20);
    with_line_ends(responses_stream, eols[i], &b);
    expect_everywhere(b.data, b.len, responses_events,
                      SBX_ARRAY_SIZE(responses_events), i ? "cr" : "crlf");
  }
}

Test(sse, leading_bom_ignored_at_every_split) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 1 << 20);
  cr_assert_eq(sbx_buf_append_str(&b, "\xef\xbb\xbf"), 0);
  cr_assert_eq(sbx_buf_append_str(&b, responses_stream), 0);
  expect_everywhere(b.data, b.len, responses_events,
                    SBX_ARRAY_SIZE(responses_events), "bom");
}

Test(sse, only_the_first_bom_is_skipped) {
  static const char *const one[] = {"message||a"};
  static const char s1[] = "\xef\xbb\xbf"
                           "data: a\n\n";
  expect_everywhere(s1, strlen(s1), one, 1, "one bom");
  /* A second BOM is part of the field name, so the line is ignored. */
  static const char s2[] = "\xef\xbb\xbf\xef\xbb\xbf"
                           "data: a\n\ndata: b\n\n";
  static const char *const second[] = {"message||b"};
  expect_everywhere(s2, strlen(s2), second, 1, "two boms");
  /* Half a BOM is ordinary bytes. */
  static const char s3[] = "\xef\xbb"
                           "data: a\n\ndata: c\n\n";
  static const char *const half[] = {"message||c"};
  expect_everywhere(s3, strlen(s3), half, 1, "half a bom");
}

Test(sse, cr_at_chunk_end_then_lf_is_one_line_end) {
  struct seen s = {0};
  struct sse_parser *p = NULL;
  cr_assert_eq(sse_parser_new(0, collect, &s, &p), 0);
  cr_expect_eq(feed(p, "data: a\r", NULL), 0);
  cr_expect_eq(feed(p, "\ndata: b\r", NULL), 0);
  cr_expect_eq(feed(p, "\n", NULL), 0);
  cr_expect_eq(s.n, 0, "no empty line yet");
  cr_expect_eq(feed(p, "\r", NULL), 0);
  static const char *const want[] = {"message||a\nb"};
  expect_events(&s, want, 1, "cr then lf");
  /* A \r\r is two line ends: an empty line dispatches. */
  cr_expect_eq(feed(p, "\ndata: c\r\r", NULL), 0);
  static const char *const want2[] = {"message||a\nb", "message||c"};
  expect_events(&s, want2, 2, "cr cr");
  sse_parser_free(p);
  seen_clear(&s);
}

Test(sse, field_rules) {
  static const char s[] =
      "data\n\n"            /* no colon: empty data, still an event */
      "data:x\n\n"          /* no space after the colon */
      "data:  two\n\n"      /* only one space is stripped */
      "event: lonely\n\n"   /* no data: nothing dispatched */
      "event:\ndata: m\n\n" /* empty type is "message" */
      "event: a\nevent: b\ndata: last type wins\n\n"
      "foo: bar\ndata: unknown fields ignored\n\n"
      "id: 7\ndata: with id\n\n"
      "data: id persists\n\n"
      "id\ndata: id cleared\n\n"
      "id: x\0y\ndata: id with NUL ignored\n\n"
      "data: a\0b\n\n" /* NUL in data is kept */
      ":comment\n: another\ndata: after comments\n\n"
      "Data: wrong case\n\n" /* field names are case-sensitive */
      "data : space before colon\n\n"
      "data: trailing\n"; /* no empty line: discarded */
  static const char *const want[] = {
      "message||",           "message||x",
      "message|| two",       "message||m",
      "b||last type wins",   "message||unknown fields ignored",
      "message|7|with id",   "message|7|id persists",
      "message||id cleared", "message||id with NUL ignored",
      "message||a\0b",       "message||after comments",
  };
  struct seen got = {0};
  struct sse_parser *p = NULL;
  cr_assert_eq(sse_parser_new(0, collect, &got, &p), 0);
  cr_assert_eq(sse_feed(p, s, sizeof(s) - 1, NULL), 0);
  cr_expect_eq(sse_finish(p), 1, "an unfinished event was discarded");
  cr_expect_eq(sse_finish(p), 0);
  cr_expect_eq(got.n, SBX_ARRAY_SIZE(want));
  for (size_t i = 0; i < got.n && i < SBX_ARRAY_SIZE(want); i++) {
    size_t wl = strlen(want[i]);
    if (i == 10)
      wl = strlen("message||a") + 2; /* "a\0b" */
    cr_expect(got.len[i] == wl && memcmp(got.ev[i], want[i], wl) == 0,
              "event %zu is \"%s\"", i, got.ev[i]);
  }
  sse_parser_free(p);
  seen_clear(&got);
}

Test(sse, retry_takes_only_digits) {
  struct seen got = {0};
  struct sse_parser *p = NULL;
  cr_assert_eq(sse_parser_new(0, collect, &got, &p), 0);
  cr_expect_eq(sse_retry_ms(p), -1);
  cr_assert_eq(feed(p, "retry: 1500\n", NULL), 0);
  cr_expect_eq(sse_retry_ms(p), 1500);
  cr_assert_eq(feed(p, "retry: 15s\nretry: -1\nretry:\nretry:  2\n", NULL), 0);
  cr_expect_eq(sse_retry_ms(p), 1500, "invalid values are ignored");
  cr_assert_eq(feed(p, "retry:99999999999999999999999\n", NULL), 0);
  cr_expect_eq(sse_retry_ms(p), 1500, "an overflowing value is ignored");
  cr_assert_eq(feed(p, "retry:0\n", NULL), 0);
  cr_expect_eq(sse_retry_ms(p), 0);
  cr_expect_eq(got.n, 0);
  sse_parser_free(p);
}

Test(sse, event_size_limit_is_a_clear_error) {
  struct seen got = {0};
  struct sse_parser *p = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sse_parser_new(64, collect, &got, &p), 0);
  /* 58 bytes of data and type fit. */
  cr_expect_eq(feed(p,
                    "event: t\ndata: 0123456789012345678901234567890"
                    "12345678901234567890\n\n",
                    &e),
               0, "%s", e.msg);
  cr_expect_eq(got.n, 1);
  /* Lines that each fit but add up to more than 64 bytes do not. */
  int r = 0;
  for (int i = 0; i < 10 && r == 0; i++)
    r = feed(p, "data: 0123456789\n", &e);
  cr_expect_eq(r, -E2BIG);
  cr_expect_eq(e.code, SBX_LIMIT_EXCEEDED);
  cr_expect_str_eq(e.msg, "server-sent event larger than 64 bytes");
  /* The parser stays failed. */
  sbx_error_clear(&e);
  cr_expect_eq(feed(p, "\n", &e), -E2BIG);
  cr_expect_str_eq(e.msg, "server-sent event stream failed earlier");
  cr_expect_eq(got.n, 1);
  /* finish makes it usable for a new stream. */
  cr_expect_eq(sse_finish(p), 1);
  cr_expect_eq(feed(p, "data: ok\n\n", &e), 0);
  cr_expect_eq(got.n, 2);
  sse_parser_free(p);
  seen_clear(&got);
}

Test(sse, endless_line_fails_before_it_is_buffered_whole) {
  struct seen got = {0};
  struct sse_parser *p = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sse_parser_new(1000, collect, &got, &p), 0);
  char chunk[100];
  memset(chunk, 'x', sizeof(chunk));
  int r = 0;
  size_t fed = 0;
  while (r == 0 && fed < 100000) {
    r = sse_feed(p, chunk, sizeof(chunk), &e);
    fed += sizeof(chunk);
  }
  cr_expect_eq(r, -E2BIG);
  cr_expect_leq(fed, 1100, "failed after %zu bytes", fed);
  sse_parser_free(p);
}

Test(sse, callback_error_stops_the_stream) {
  struct seen got = {.fail_at = 1};
  struct sse_parser *p = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sse_parser_new(0, collect, &got, &p), 0);
  cr_expect_eq(feed(p, "data: 1\n\ndata: 2\n\n", &e), -ECANCELED);
  cr_expect_eq(got.n, 1, "no event after the failing one");
  cr_expect_neq(e.msg[0], '\0');
  cr_expect_eq(feed(p, "data: 3\n\n", NULL), -ECANCELED);
  cr_expect_eq(got.n, 1);
  sse_parser_free(p);
  seen_clear(&got);
}

Test(sse, free_accepts_null) {
  cr_expect_null(sse_parser_free(NULL));
}
