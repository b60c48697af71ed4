/* SHA-256 against the FIPS 180-4 examples (NIST CSRC "Examples with
 * intermediate values") and the one-million-'a' vector. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "shared/sha256.h"

static void expect_hex(const char *msg, size_t len, const char *want) {
  uint8_t d[SBX_SHA256_BYTES];
  char hex[SBX_SHA256_HEX];
  sbx_sha256(msg, len, d);
  sbx_sha256_hex(d, hex);
  cr_expect_str_eq(hex, want, "sha256 of %zu bytes", len);
}

Test(sha256, fips_180_4_examples) {
  expect_hex(
      "abc", 3,
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  expect_hex(
      "", 0,
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  expect_hex(
      two, strlen(two),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char *long896 =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
      "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
  expect_hex(
      long896, strlen(long896),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

Test(sha256, one_million_a_in_uneven_pieces) {
  char block[1000];
  memset(block, 'a', sizeof(block));
  struct sbx_sha256 s;
  sbx_sha256_init(&s);
  size_t done = 0, step = 1;
  while (done < 1000000) {
    size_t n = step < 1000000 - done ? step : 1000000 - done;
    if (n > sizeof(block))
      n = sizeof(block);
    sbx_sha256_update(&s, block, n);
    done += n;
    step = step * 7 % 997 + 1; /* crosses the 64-byte blocks unevenly */
  }
  char hex[SBX_SHA256_HEX];
  sbx_sha256_final_hex(&s, hex);
  cr_expect_str_eq(
      hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

Test(sha256, split_updates_equal_one_shot) {
  unsigned char msg[300];
  for (size_t i = 0; i < sizeof(msg); i++)
    msg[i] = (unsigned char)(i * 131 + 7);
  for (size_t len = 0; len <= sizeof(msg); len += 37) {
    uint8_t whole[SBX_SHA256_BYTES];
    sbx_sha256(msg, len, whole);
    for (size_t cut = 0; cut <= len; cut++) {
      struct sbx_sha256 s;
      sbx_sha256_init(&s);
      sbx_sha256_update(&s, msg, cut);
      sbx_sha256_update(&s, NULL, 0);
      sbx_sha256_update(&s, msg + cut, len - cut);
      uint8_t parts[SBX_SHA256_BYTES];
      sbx_sha256_final(&s, parts);
      cr_assert_arr_eq(parts, whole, sizeof(whole), "len %zu cut %zu", len,
                       cut);
    }
  }
}
