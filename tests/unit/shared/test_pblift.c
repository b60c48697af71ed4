#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd.pb-c.h"
#include "shared/pblift.h"

/* A packed FileWrite request with DLEN bytes of data (new). */
static uint8_t *packed_write(size_t dlen, size_t *len, uint8_t **data) {
  *data = malloc(dlen);
  cr_assert_not_null(*data);
  for (size_t i = 0; i < dlen; i++)
    (*data)[i] = (uint8_t)(i * 31 + (i >> 9));
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = "dir/file.bin";
  w.data.data = *data;
  w.data.len = dlen;
  w.offset = 12345;
  w.mode = SBX__V1__WRITE_MODE__WRITE_AT;
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.id = "req-1";
  req.version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_WRITE;
  req.file_write = &w;
  *len = sbx__v1__request__get_packed_size(&req);
  uint8_t *buf = malloc(*len);
  cr_assert_not_null(buf);
  (void)sbx__v1__request__pack(&req, buf);
  return buf;
}

Test(pblift, lifts_the_data_and_keeps_every_other_field) {
  size_t len;
  uint8_t *data;
  uint8_t *buf = packed_write(300000, &len, &data);
  struct sbx_pb_lift l;
  cr_assert_eq(sbx_pb_lift(buf, len, SBX__V1__REQUEST__BODY_FILE_WRITE, 2, &l),
               1);
  cr_expect_eq(l.data_len, 300000);
  cr_expect(memcmp(buf + l.data_off, data, 300000) == 0);
  cr_expect_lt(l.rest_len, 100);
  Sbx__V1__Request *r = sbx__v1__request__unpack(NULL, l.rest_len, l.rest);
  cr_assert_not_null(r);
  cr_expect_str_eq(r->id, "req-1");
  cr_assert_eq(r->body_case, SBX__V1__REQUEST__BODY_FILE_WRITE);
  cr_expect_str_eq(r->file_write->path, "dir/file.bin");
  cr_expect_eq(r->file_write->offset, 12345);
  cr_expect_eq(r->file_write->mode, SBX__V1__WRITE_MODE__WRITE_AT);
  cr_expect_eq(r->file_write->data.len, 0);
  sbx__v1__request__free_unpacked(r, NULL);
  free(l.rest);
  free(buf);
  free(data);
}

Test(pblift, leaves_small_absent_and_other_bodies_alone) {
  size_t len;
  uint8_t *data;
  uint8_t *buf = packed_write(SBX_PB_LIFT_MIN - 1, &len, &data);
  struct sbx_pb_lift l;
  cr_expect_eq(sbx_pb_lift(buf, len, SBX__V1__REQUEST__BODY_FILE_WRITE, 2, &l),
               0, "too small to be worth it");
  free(buf);
  free(data);
  buf = packed_write(SBX_PB_LIFT_MIN, &len, &data);
  cr_expect_eq(sbx_pb_lift(buf, len, SBX__V1__REQUEST__BODY_FILE_WRITE, 2, &l),
               1, "exactly the least size");
  free(l.rest);
  cr_expect_eq(sbx_pb_lift(buf, len, SBX__V1__REQUEST__BODY_FILE_READ, 2, &l),
               0, "another body");
  cr_expect_eq(sbx_pb_lift(buf, len, SBX__V1__REQUEST__BODY_FILE_WRITE, 1, &l),
               0, "a field that is not there");
  free(buf);
  free(data);
}

/* Hostile shapes are left to the full decoder: a truncated message, the
 * body twice (the decoder merges them), a bad varint. */
Test(pblift, refuses_what_it_cannot_lift_plainly) {
  size_t len;
  uint8_t *data;
  uint8_t *buf = packed_write(70000, &len, &data);
  struct sbx_pb_lift l;
  for (size_t cut = 1; cut < len; cut += len / 97 + 1)
    cr_expect_eq(
        sbx_pb_lift(buf, len - cut, SBX__V1__REQUEST__BODY_FILE_WRITE, 2, &l),
        0, "cut %zu", cut);
  uint8_t *twice = malloc(2 * len);
  memcpy(twice, buf, len);
  memcpy(twice + len, buf, len);
  cr_expect_eq(
      sbx_pb_lift(twice, 2 * len, SBX__V1__REQUEST__BODY_FILE_WRITE, 2, &l), 0);
  free(twice);
  uint8_t bad[12];
  memset(bad, 0xff, sizeof(bad));
  cr_expect_eq(sbx_pb_lift(bad, sizeof(bad), 42, 2, &l), 0);
  free(buf);
  free(data);
}

/* A length written in more bytes than it needs is still valid protobuf:
 * the lifted rest decodes all the same. */
Test(pblift, handles_a_length_in_a_long_varint) {
  uint8_t data[SBX_PB_LIFT_MIN];
  memset(data, 'x', sizeof(data));
  /* FileWrite { path = "p" (field 1), data (field 2) }, its length in a
   * 4-byte varint; inside Request field 42. */
  uint8_t inner[16 + sizeof(data)];
  size_t n = 0;
  inner[n++] = 0x0a;
  inner[n++] = 1;
  inner[n++] = 'p';
  inner[n++] = 0x12;
  inner[n++] = 0x80 | (sizeof(data) & 0x7f);
  inner[n++] = 0x80 | ((sizeof(data) >> 7) & 0x7f);
  inner[n++] = 0x80;
  inner[n++] = 0x00;
  memcpy(inner + n, data, sizeof(data));
  n += sizeof(data);
  uint8_t msg[32 + sizeof(inner)];
  size_t m = 0;
  msg[m++] = 0xd2; /* field 42, type 2 */
  msg[m++] = 0x02;
  msg[m++] = (uint8_t)(0x80 | (n & 0x7f));
  msg[m++] = (uint8_t)(0x80 | ((n >> 7) & 0x7f));
  msg[m++] = (uint8_t)(0x80 | ((n >> 14) & 0x7f));
  msg[m++] = 0x00;
  memcpy(msg + m, inner, n);
  m += n;
  struct sbx_pb_lift l;
  cr_assert_eq(sbx_pb_lift(msg, m, 42, 2, &l), 1);
  cr_expect_eq(l.data_len, sizeof(data));
  cr_expect_eq(l.data_off, m - sizeof(data));
  Sbx__V1__Request *r = sbx__v1__request__unpack(NULL, l.rest_len, l.rest);
  cr_assert_not_null(r);
  cr_assert_eq(r->body_case, SBX__V1__REQUEST__BODY_FILE_WRITE);
  cr_expect_str_eq(r->file_write->path, "p");
  sbx__v1__request__free_unpacked(r, NULL);
  free(l.rest);
}
