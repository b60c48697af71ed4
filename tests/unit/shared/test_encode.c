/* Hex digits and the printable copy of a child's output. */
#include <criterion/criterion.h>
#include <string.h>

#include "shared/encode.h"

Test(encode, hex_value_takes_either_case) {
  cr_expect_eq(sbx_hex_value('0'), 0);
  cr_expect_eq(sbx_hex_value('9'), 9);
  cr_expect_eq(sbx_hex_value('a'), 10);
  cr_expect_eq(sbx_hex_value('F'), 15);
  cr_expect_eq(sbx_hex_value('g'), -1);
  cr_expect_eq(sbx_hex_value('%'), -1);
  unsigned char out[2];
  cr_expect_eq(sbx_hex_decode("aB0f", 4, out), 0);
  cr_expect(out[0] == 0xab && out[1] == 0x0f);
  cr_expect_lt(sbx_hex_decode("a", 1, out), 0, "odd length");
}

Test(encode, append_printable_masks_controls_and_stops_at_the_end) {
  char out[8];
  size_t n = sbx_append_printable(out, 0, sizeof(out), "a\tb\n", 4);
  cr_expect_eq(n, 4);
  cr_expect_str_eq(out, "a?b\n");
  /* UTF-8 stays; DEL and ESC do not. */
  n = sbx_append_printable(out, n, sizeof(out), "\xc3\xa9\x7f\x1b", 4);
  cr_expect_eq(n, 7, "room for 7 bytes and the NUL");
  cr_expect_str_eq(out, "a?b\n\xc3\xa9?");
  n = sbx_append_printable(out, n, sizeof(out), "more", 4);
  cr_expect_eq(n, 7, "a full buffer takes no more");
  cr_expect_eq(out[7], '\0');
}
