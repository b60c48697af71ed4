/* HMAC-SHA256 against the test cases of RFC 4231 (section 4), and the
 * constant-time comparison. */
#include <criterion/criterion.h>
#include <string.h>

#include "shared/auth.h"
#include "shared/hmac.h"

/* Expects the MAC of DATA under KEY to begin with the hex digits WANT
 * (test case 5 gives only the first 128 bits). */
static void expect_mac(const void *key, size_t key_len, const void *data,
                       size_t len, const char *want, const char *what) {
  uint8_t mac[SBX_HMAC_SHA256_BYTES];
  sbx_hmac_sha256(key, key_len, data, len, mac);
  char hex[SBX_SHA256_HEX];
  sbx_sha256_hex(mac, hex);
  hex[strlen(want)] = '\0';
  cr_expect_str_eq(hex, want, "%s", what);
}

/* The seven test cases, keys shorter and longer than the block. */
Test(hmac, rfc_4231_test_cases) {
  uint8_t k[131];
  uint8_t d[50];
  memset(k, 0x0b, 20);
  expect_mac(k, 20, "Hi There", 8,
             "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
             "test case 1");
  const char *two = "what do ya want for nothing?";
  expect_mac("Jefe", 4, two, strlen(two),
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
             "test case 2: a key shorter than the MAC");
  memset(k, 0xaa, 20);
  memset(d, 0xdd, 50);
  expect_mac(k, 20, d, 50,
             "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
             "test case 3");
  for (int i = 0; i < 25; i++)
    k[i] = (uint8_t)(i + 1);
  memset(d, 0xcd, 50);
  expect_mac(k, 25, d, 50,
             "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
             "test case 4");
  memset(k, 0x0c, 20);
  expect_mac(k, 20, "Test With Truncation", 20,
             "a3b6167473100ee06e0c796c2955552b", "test case 5 (128 bits)");
  memset(k, 0xaa, 131);
  const char *six = "Test Using Larger Than Block-Size Key - Hash Key First";
  expect_mac(k, 131, six, strlen(six),
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
             "test case 6: a key longer than the block");
  const char *seven = "This is a test using a larger than block-size key and a "
                      "larger than block-size data. The key needs to be "
                      "hashed before being used by the HMAC algorithm.";
  expect_mac(k, 131, seven, strlen(seven),
             "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
             "test case 7: key and data longer than the block");
}

/* A message fed in uneven pieces gives the one-shot MAC. */
Test(hmac, pieces_give_the_one_shot_mac) {
  const char *seven = "This is a test using a larger than block-size key and a "
                      "larger than block-size data. The key needs to be "
                      "hashed before being used by the HMAC algorithm.";
  uint8_t k[131];
  memset(k, 0xaa, sizeof(k));
  uint8_t whole[SBX_HMAC_SHA256_BYTES], pieces[SBX_HMAC_SHA256_BYTES];
  sbx_hmac_sha256(k, sizeof(k), seven, strlen(seven), whole);
  struct sbx_hmac_sha256 h;
  sbx_hmac_sha256_init(&h, k, sizeof(k));
  for (size_t i = 0, step = 1; i < strlen(seven);
       i += step, step = step % 5 + 1)
    sbx_hmac_sha256_update(&h, seven + i,
                           step < strlen(seven) - i ? step : strlen(seven) - i);
  sbx_hmac_sha256_final(&h, pieces);
  cr_expect_arr_eq(whole, pieces, sizeof(whole));
  /* The context holds the padded key: it is wiped at the end. */
  static const struct sbx_hmac_sha256 zero;
  cr_expect_arr_eq(&h, &zero, sizeof(h));
}

/* Equal is equal wherever the difference is; zero bytes are equal. */
Test(hmac, equal_ct) {
  cr_expect(sbx_equal_ct("abcd", "abcd", 4));
  cr_expect(!sbx_equal_ct("abcd", "abce", 4));
  cr_expect(!sbx_equal_ct("xbcd", "abcd", 4));
  cr_expect(sbx_equal_ct("a", "b", 0));
}

/* Hello's proof is the HMAC of the context and the nonce (computed apart
 * with Python's hmac module); any other secret, nonce or length fails. */
Test(hmac, hello_proof) {
  const uint8_t *secret = (const uint8_t *)"0123456789abcdef0123456789abcdef";
  uint8_t nonce[SBX_HELLO_NONCE_BYTES];
  for (size_t i = 0; i < sizeof(nonce); i++)
    nonce[i] = (uint8_t)i;
  uint8_t proof[SBX_HELLO_PROOF_BYTES];
  sbx_hello_proof(secret, 32, nonce, proof);
  char hex[SBX_SHA256_HEX];
  sbx_sha256_hex(proof, hex);
  cr_expect_str_eq(
      hex, "8cfc3357fed6aac395a26e42b1cc6a877bef4bac958fa8a71cd01500fc53a36c");
  cr_expect(sbx_hello_proof_ok(secret, 32, nonce, proof, sizeof(proof)));
  cr_expect(!sbx_hello_proof_ok(secret, 31, nonce, proof, sizeof(proof)));
  cr_expect(!sbx_hello_proof_ok(secret, 32, nonce, proof, sizeof(proof) - 1));
  cr_expect(!sbx_hello_proof_ok(secret, 32, nonce, NULL, 0));
  nonce[31] ^= 1;
  cr_expect(!sbx_hello_proof_ok(secret, 32, nonce, proof, sizeof(proof)));
}
