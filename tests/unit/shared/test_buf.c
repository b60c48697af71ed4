#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/encode.h"
#include "shared/errors.h"
#include "shared/rand.h"

Test(buf, grows_to_max_and_refuses_more) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 10);
  cr_expect_eq(sbx_buf_append(&b, "hello", 5), 0);
  cr_expect_eq(sbx_buf_printf(&b, "%d", 12345), 0);
  cr_expect_eq(b.len, 10);
  cr_expect_str_eq(b.data, "hello12345");
  cr_expect_eq(sbx_buf_append(&b, "x", 1), -E2BIG);
  cr_expect_eq(b.len, 10, "a refused append changes nothing");
  cr_expect_eq(sbx_buf_printf(&b, "y"), -E2BIG);
  sbx_buf_consume(&b, 5);
  cr_expect_str_eq(b.data, "12345");
  cr_expect_eq(sbx_buf_append_str(&b, "abcde"), 0);
  size_t n = 0;
  _cleanup_free_ char *s = sbx_buf_steal(&b, &n);
  cr_expect_str_eq(s, "12345abcde");
  cr_expect_eq(n, 10);
  cr_expect_eq(b.len, 0);
}

Test(buf, huge_request_does_not_overflow) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 100);
  cr_expect_eq(sbx_buf_append(&b, "a", 1), 0);
  cr_expect_eq(sbx_buf_reserve(&b, SIZE_MAX), -E2BIG);
  cr_expect_eq(sbx_buf_reserve(&b, SIZE_MAX - 1), -E2BIG);
}

Test(encode, base64_roundtrip_and_vectors) {
  static const char *const vec[][2] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (size_t i = 0; i < 7; i++) {
    char out[32];
    size_t n = sbx_base64_encode(vec[i][0], strlen(vec[i][0]), out);
    cr_expect_str_eq(out, vec[i][1]);
    cr_expect_eq(n, strlen(vec[i][1]));
    char dec[32];
    long d = sbx_base64_decode(out, n, dec);
    cr_expect_eq(d, (long)strlen(vec[i][0]));
    cr_expect(memcmp(dec, vec[i][0], (size_t)d) == 0);
  }
  char dec[16];
  cr_expect_eq(sbx_base64_decode("Zm9v!", 5, dec), -EINVAL);
  cr_expect_eq(sbx_base64_decode("Z", 1, dec), -EINVAL);
  cr_expect_eq(sbx_base64_decode("Zh==", 4, dec), -EINVAL, "non-canonical");
  cr_expect_eq(sbx_base64_decode("Zg", 2, dec), 1, "padding is optional");
}

Test(encode, hex) {
  char out[9];
  sbx_hex_encode("\x00\xff\x10\xab", 4, out);
  cr_expect_str_eq(out, "00ff10ab");
  unsigned char b[4];
  cr_expect_eq(sbx_hex_decode("00FF10ab", 8, b), 0);
  cr_expect_eq(b[1], 0xff);
  cr_expect_eq(sbx_hex_decode("0g", 2, b), -EINVAL);
  cr_expect_eq(sbx_hex_decode("abc", 3, b), -EINVAL);
}

Test(rand, ids_are_distinct_and_wellformed) {
  char a[33], b[33], u[37];
  cr_expect_eq(sbx_random_id(a), 0);
  cr_expect_eq(sbx_random_id(b), 0);
  cr_expect_eq(strlen(a), 32);
  cr_expect_str_neq(a, b);
  cr_expect_eq(sbx_random_uuid(u), 0);
  cr_expect_eq(strlen(u), 36);
  cr_expect_eq(u[14], '4');
  cr_expect(strchr("89ab", u[19]) != NULL);
}

Test(err, codes_map_both_ways) {
  cr_expect_eq(sbx_code_from_errno(-ENOENT), SBX_NOT_FOUND);
  cr_expect_eq(sbx_code_from_errno(EACCES), SBX_PERMISSION_DENIED);
  cr_expect_eq(sbx_code_from_errno(EEXIST), SBX_ALREADY_EXISTS);
  cr_expect_eq(sbx_code_from_errno(E2BIG), SBX_LIMIT_EXCEEDED);
  cr_expect_eq(sbx_code_from_errno(EIO), SBX_INTERNAL);
  for (int c = 1; c <= SBX_CODE_MAX; c++)
    cr_expect_eq(sbx_code_from_errno(sbx_errno_from_code((enum sbx_code)c)),
                 (enum sbx_code)c, "code %s", sbx_code_name((enum sbx_code)c));
  cr_expect_str_eq(sbx_code_name((enum sbx_code)99), "UNKNOWN");
  struct sbx_error e;
  cr_expect_eq(sbx_error_set(&e, SBX_OK, ENOENT, "no \"%s\"", "x"), -ENOENT);
  cr_expect_eq(e.code, SBX_NOT_FOUND);
  cr_expect_str_eq(e.msg, "no \"x\"");
  cr_expect_eq(sbx_error_set(&e, SBX_CONFLICT, 0, "busy"), -EBUSY);
  cr_expect_eq(sbx_error_set(NULL, SBX_OK, 0, "x"), -EIO);
}

Test(err, long_messages_are_cut_at_a_character_boundary) {
  char big[1200];
  /* 2-byte characters, offset by one byte so a cut would split one. */
  big[0] = 'x';
  for (size_t i = 1; i + 2 < sizeof(big); i += 2) {
    big[i] = (char)0xc3;
    big[i + 1] = (char)0xa9;
  }
  big[sizeof(big) - 1] = '\0';
  struct sbx_error e;
  sbx_error_set(&e, SBX_INVALID_ARGUMENT, EINVAL, "%s", big);
  size_t n = strlen(e.msg);
  cr_expect_lt(n, sizeof(e.msg));
  cr_expect_eq((n - 1) % 2, 0, "no half character at the end (len %zu)", n);
  cr_expect_neq((unsigned char)e.msg[n - 1], 0xc3);
}

Test(buf, unbounded_max_does_not_wrap) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, SIZE_MAX);
  for (int i = 0; i < 100; i++)
    cr_assert_eq(sbx_buf_append(&b, "0123456789", 10), 0);
  cr_expect_eq(b.len, 1000);
  cr_expect_eq(b.data[999], '9');
}
