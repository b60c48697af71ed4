/* Expected strings were produced by the Agents SDK's truncateOutput (0.20.0)
 * under Node 20, or are the examples in agents-sdk-sandbox.md section 1.4. */
#include <criterion/criterion.h>
#include <errno.h>
#include <regex.h>
#include <string.h>

#include "controller/tools/output.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/utf8.h"

/* Truncates S to TOKENS and checks the text and the original token count. */
static void expect_truncated(const char *s, int64_t tokens, const char *want,
                             size_t want_tokens) {
  _cleanup_buf_ struct sbx_buf b;
  size_t orig = 12345;
  sbx_buf_init(&b, 1 << 20);
  int r = output_truncate(s, strlen(s), tokens, &b, &orig);
  cr_assert_geq(r, 0, "output_truncate failed: %d", r);
  cr_expect_eq(r, want_tokens > 0, "return for %s", s);
  cr_expect_eq(b.len, strlen(want), "length for tokens=%lld",
               (long long)tokens);
  cr_expect_str_eq(b.data ? b.data : "", want);
  cr_expect_eq(orig, want_tokens);
  if (b.len > 0 && tokens >= 0)
    cr_expect_leq(b.len, (size_t)tokens * 4, "over the byte budget");
}

Test(output, estimate_tokens_is_ceil_bytes_over_4) {
  cr_expect_eq(output_estimate_tokens(0), 0);
  cr_expect_eq(output_estimate_tokens(1), 1);
  cr_expect_eq(output_estimate_tokens(4), 1);
  cr_expect_eq(output_estimate_tokens(5), 2);
  cr_expect_eq(output_estimate_tokens(8893), 2224);
  cr_expect_eq(output_estimate_tokens(SIZE_MAX), SIZE_MAX / 4 + 1);
}

Test(output, unchanged_without_limit_or_when_it_fits) {
  expect_truncated("hello\n", OUTPUT_TOKENS_UNLIMITED, "hello\n", 0);
  expect_truncated("12345678", 2, "12345678", 0);
  expect_truncated("", 0, "", 0);
  expect_truncated("", 1, "", 0);
  /* A huge budget does not overflow into a small one. */
  expect_truncated("abc", INT64_MAX, "abc", 0);
}

Test(output, one_token_gives_the_marker_cut_to_four_bytes) {
  /* Reference: "max_output_tokens:1 gives ...7". */
  expect_truncated("hello world, this is output\n", 1, "...7", 7);
  expect_truncated("0123456789abcdef", 2, "...4 tok", 4);
  /* Zero is a budget of zero bytes, as in the SDK. */
  expect_truncated("a", 0, "", 1);
  expect_truncated("a\n\nb\r\n\r\nc\r", 0, "", 3);
}

Test(output, seq_1_2000_counts_2001_lines_and_keeps_head_and_tail) {
  _cleanup_buf_ struct sbx_buf in;
  sbx_buf_init(&in, 1 << 20);
  for (int i = 1; i <= 2000; i++)
    cr_assert_eq(sbx_buf_printf(&in, "%d\n", i), 0);
  cr_assert_eq(in.len, 8893);
  expect_truncated(in.data, 20,
                   "Total output lines: 2001\n\n1\n2\n3\n4\n5\n6\n7"
                   "...2217 tokens truncated...998\n1999\n2000\n",
                   2224);
}

Test(output, line_count_splits_on_crlf_cr_and_lf) {
  char s[211];
  memcpy(s, "a\n\nb\r\n\r\nc\r", 10);
  memset(s + 10, 'z', 200);
  s[210] = '\0';
  expect_truncated(s, 30,
                   "Total output lines: 6\n\na\n\nb\r\n\r\nc\r"
                   "zzzzzzzzzzzzzzzzzzzzzzzzzz...35 tokens truncated..."
                   "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
                   53);
}

Test(output, prefix_dropped_when_prefix_and_marker_do_not_fit) {
  char s[102];
  memset(s, 'x', 100);
  s[100] = '\n';
  s[101] = '\0';
  /* 48 bytes: prefix 23 + marker 25 fit exactly, no body. */
  expect_truncated(s, 12, "Total output lines: 2\n\n...26 tokens truncated...",
                   26);
  /* 44 bytes: the prefix goes, the marker stays, the body gets 19 bytes. */
  expect_truncated(s, 11, "xxxxxxxxx...21 tokens truncated...xxxxxxxxx\n", 26);
}

Test(output, keeps_the_rolling_buffer_notice) {
  static const char long_body[] =
      "[...1200 characters truncated from process output...]\n"
      "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxy"
      "z";
  expect_truncated(long_body, 30,
                   "Total output lines: 2\n\n"
                   "[...1200 characters truncated from process output...]\n"
                   "012345678...14 tokens truncated...rstuvwxyz",
                   32);
  /* Notice plus a marker cut short: the prefix is gone. */
  expect_truncated(long_body, 14,
                   "[...1200 characters truncated from process output...]\n..",
                   32);
  expect_truncated("[...5 characters truncated from process output...]\n" //
                   "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghij",
                   20,
                   "[...5 characters truncated from process output...]\n"
                   "ab...12 tokens truncated...ij",
                   26);
  /* Not a notice (two dots): it is ordinary body text. */
  expect_truncated("[..5 characters truncated from process output...]\n"
                   "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghij",
                   20,
                   "Total output lines: 2\n\n[..5 characters "
                   "...17 tokens truncated...efghijabcdefghij",
                   25);
}

Test(output, notice_over_budget_is_dropped_but_not_counted_as_body) {
  static const char s[] =
      "[...5 characters truncated from process output...]\nabc";
  expect_truncated(s, 5, "...14 tokens truncat", 14);
  expect_truncated(s, 12, "Total output lines: 2\n\n...14 tokens truncated...",
                   14);
  expect_truncated(s, 11, "abc...13 tokens truncated...", 14);
}

Test(output, cuts_only_at_utf8_character_boundaries) {
  expect_truncated("héllo wörld 😀 ünïcödé ñ 日本語テキスト 😀😀 end\r\n"
                   "line2\rline3\n",
                   20,
                   "Total output lines: 4\n\nhéllo wörld "
                   "...13 tokens truncated...nd\r\nline2\rline3\n",
                   21);
  expect_truncated("😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀", 15,
                   "Total output lines: 1\n\n😀...28 tokens truncated...😀", 30);
  expect_truncated(
      "日本語日本語日本語日本語日本語日本語日本語日本語日本語日本語"
      "日本語日本語日本語日本語日本語日本語日本語日本語日本語日本語",
      20,
      "Total output lines: 1\n\n日本語日本...38 tokens truncated...本語日本語",
      45);
}

Test(output, invalid_utf8_is_cut_bytewise_without_harm) {
  /* Lone continuation bytes, a truncated sequence and 0xff: each invalid
   * byte is one character, a valid sequence is never split. */
  char s[300];
  for (size_t i = 0; i < sizeof(s); i++)
    s[i] = (char)(i % 3 == 0 ? 0xff : i % 3 == 1 ? 0x80 : 0xe2);
  memcpy(s + 40, "\xe2\x82\xac", 3); /* a euro sign across the head cut */
  _cleanup_buf_ struct sbx_buf b;
  size_t orig = 0;
  sbx_buf_init(&b, 4096);
  cr_assert_eq(output_truncate(s, sizeof(s), 25, &b, &orig), 1);
  cr_expect_eq(orig, 75);
  cr_expect_leq(b.len, 100);
  /* No prefix (no newline: 1 line), budget 100-23-25 = 52, head 26. */
  cr_expect_eq(memcmp(b.data, "Total output lines: 1\n\n", 23), 0);
  cr_expect_eq(memcmp(b.data + 23, s, 26), 0);
  cr_expect_eq(memcmp(b.data + 49, "...", 3), 0);

  /* A euro sign at 40..42: budget 136-23-25 = 88, head 44, the sign fits. */
  sbx_buf_reset(&b);
  cr_assert_eq(output_truncate(s, sizeof(s), 34, &b, &orig), 1);
  cr_expect_eq(memcmp(b.data + 23, s, 44), 0);
  sbx_buf_reset(&b);
  /* budget 124-23-25 = 76: head 38, before the sign. */
  cr_assert_eq(output_truncate(s, sizeof(s), 31, &b, &orig), 1);
  cr_expect_eq(memcmp(b.data + 23, s, 38), 0);
  cr_expect_eq(memcmp(b.data + 23 + 38, "...", 3), 0);
  sbx_buf_reset(&b);
  /* budget 84, head 42: 40..42 would end at 43 > 42, so the head is 40. */
  cr_assert_eq(output_truncate(s, sizeof(s), 33, &b, &orig), 1);
  cr_expect_eq(memcmp(b.data + 23, s, 40), 0);
  cr_expect_eq(memcmp(b.data + 63, "...", 3), 0);
}

Test(output, sanitize_replaces_maximal_invalid_subparts) {
  /* Expected output from Node's TextDecoder. */
  static const unsigned char in[] = {0x61, 0xe2, 0x82, 0x41, 0xf0, 0x9f, 0x98,
                                     0xed, 0xa0, 0x80, 0xc0, 0xaf, 0xf4, 0x90,
                                     0x80, 0x80, 0xe0, 0x80, 0xf0, 0x9f, 0x98,
                                     0x80, 0xff, 0x62, 0xe2, 0x82};
#define R "\xef\xbf\xbd"
  static const char want[] =
      "a" R "A" R R R R R R R R R R R R "\xf0\x9f\x98\x80" R "b" R;
#undef R
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 1024);
  cr_assert_eq(sbx_utf8_sanitize((const char *)in, sizeof(in), &b), 0);
  cr_expect_eq(b.len, sizeof(want) - 1);
  cr_expect_eq(memcmp(b.data, want, b.len), 0);

  sbx_buf_reset(&b);
  static const char ok[] = "plain ascii, é, 日本, 😀, \x7f";
  cr_assert_eq(sbx_utf8_sanitize(ok, sizeof(ok) - 1, &b), 0);
  cr_expect_str_eq(b.data, ok);
}

Test(output, bounded_buffer_refuses_instead_of_overflowing) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 10);
  cr_expect_eq(output_truncate("0123456789abc", 13, -1, &b, NULL), -E2BIG);
  sbx_buf_reset(&b);
  cr_expect_eq(sbx_utf8_sanitize("\xff\xff\xff\xff", 4, &b), -E2BIG);
  struct output_exec x = {.text = "hi\n", .len = 3};
  sbx_buf_reset(&b);
  cr_expect_eq(output_format_exec(&x, &b), -E2BIG);
}

/* Checks that S starts with "Chunk ID: <6 lowercase hex>\n" and returns what
 * follows. */
static const char *after_chunk_id(const char *s) {
  regex_t re;
  cr_assert_eq(regcomp(&re, "^Chunk ID: [0-9a-f]{6}\n", REG_EXTENDED), 0);
  int m = regexec(&re, s, 0, NULL, 0);
  regfree(&re);
  cr_expect_eq(m, 0, "bad chunk id line in: %s", s);
  return m == 0 ? s + strlen("Chunk ID: 123456\n") : "";
}

Test(output, format_exec_matches_the_sdk_layout) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 4096);
  /* The reference's real run. */
  struct output_exec x = {
      .wall_ns = 13000000, .exit_code = 0, .text = "hi\n", .len = 3};
  cr_assert_eq(output_format_exec(&x, &b), 0);
  cr_expect_str_eq(after_chunk_id(b.data), "Wall time: 0.0130 seconds\n"
                                           "Process exited with code 0\n"
                                           "Output:\nhi\n");

  sbx_buf_reset(&b);
  struct output_exec y = {.wall_ns = 10001234567ULL,
                          .running = true,
                          .session_id = 3,
                          .original_tokens = 2224,
                          .text = "",
                          .len = 0};
  cr_assert_eq(output_format_exec(&y, &b), 0);
  cr_expect_str_eq(after_chunk_id(b.data), "Wall time: 10.0012 seconds\n"
                                           "Process running with session ID 3\n"
                                           "Original token count: 2224\n"
                                           "Output:\n");
}

Test(output, chunk_ids_differ_between_calls) {
  _cleanup_buf_ struct sbx_buf a;
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&a, 4096);
  sbx_buf_init(&b, 4096);
  struct output_exec x = {.text = "", .len = 0};
  int same = 0;
  for (int i = 0; i < 4; i++) {
    sbx_buf_reset(&a);
    sbx_buf_reset(&b);
    cr_assert_eq(output_format_exec(&x, &a), 0);
    cr_assert_eq(output_format_exec(&x, &b), 0);
    (void)after_chunk_id(a.data);
    same += memcmp(a.data, b.data, 16) == 0;
  }
  cr_expect_lt(same, 4, "four pairs of equal random chunk ids");
}

Test(output, wall_time_rounds_half_up_to_four_decimals) {
  static const struct {
    uint64_t ns;
    const char *want;
  } cases[] = {
      {0, "0.0000"},
      {49999, "0.0000"},
      {50000, "0.0001"},
      {149999, "0.0001"},
      {999950000, "1.0000"},
      {1234567890123ULL, "1234.5679"},
      {10000000000ULL, "10.0000"},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
    _cleanup_buf_ struct sbx_buf b;
    sbx_buf_init(&b, 4096);
    struct output_exec x = {.wall_ns = cases[i].ns, .exit_code = 1};
    cr_assert_eq(output_format_exec(&x, &b), 0);
    char want[128];
    snprintf(want, sizeof(want),
             "Wall time: %s seconds\nProcess exited with code 1\nOutput:\n",
             cases[i].want);
    cr_expect_str_eq(after_chunk_id(b.data), want);
  }
}

Test(output, exec_response_truncates_then_formats) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 4096);
  struct output_exec x = {.wall_ns = 250000000,
                          .exit_code = 0,
                          .original_tokens = 99, /* ignored */
                          .text = "hello world, this is output\n",
                          .len = 28};
  cr_assert_eq(output_exec_response(&x, 1, &b), 0);
  cr_expect_str_eq(after_chunk_id(b.data), "Wall time: 0.2500 seconds\n"
                                           "Process exited with code 0\n"
                                           "Original token count: 7\n"
                                           "Output:\n...7");
  sbx_buf_reset(&b);
  cr_assert_eq(output_exec_response(&x, OUTPUT_TOKENS_UNLIMITED, &b), 0);
  cr_expect_str_eq(after_chunk_id(b.data), "Wall time: 0.2500 seconds\n"
                                           "Process exited with code 0\n"
                                           "Output:\n"
                                           "hello world, this is output\n");
}
