/* File RPCs through the real daemon: the dispatch table, the worker pool and
 * the wire, for a write/read round trip, an escape and an absent path; and
 * bulk data, which neither side copies out of its message (a FileWrite's
 * data, a FileRead's reply read into the message as it is packed). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/daemon.h"

Test(files_daemon, write_read_escape_exists) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  char link[160];
  (void)snprintf(link, sizeof(link), "%s/x", t.root);
  cr_assert_eq(symlink("/", link), 0);
  struct sbx_error e = {0};
  Sbx__V1__Response *r = NULL;

  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = "d/hello.txt";
  w.data.data = (uint8_t *)"hello";
  w.data.len = 5;
  w.atomic = true;
  w.parents = true;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_WRITE;
  req.file_write = &w;
  cr_assert_eq(sbx_client_call(t.client, &req,
                               SBX__V1__RESPONSE__BODY_FILE_WRITE, 0, &r, &e),
               0, "%s", e.msg);
  cr_expect_eq(r->file_write->size, 5);
  sbx_client_reply_free(r);

  Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
  rd.path = "d/hello.txt";
  req = (Sbx__V1__Request)SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_READ;
  req.file_read = &rd;
  cr_assert_eq(sbx_client_call(t.client, &req,
                               SBX__V1__RESPONSE__BODY_FILE_READ, 0, &r, &e),
               0, "%s", e.msg);
  cr_expect_eq(r->file_read->data.len, 5);
  cr_expect(memcmp(r->file_read->data.data, "hello", 5) == 0);
  cr_expect(r->file_read->eof);
  sbx_client_reply_free(r);

  rd.path = "x/etc/passwd";
  r = NULL;
  cr_expect_lt(sbx_client_call(t.client, &req,
                               SBX__V1__RESPONSE__BODY_FILE_READ, 0, &r, &e),
               0, "reading through ln -s / must fail");
  cr_expect_eq(e.code, SBX_PERMISSION_DENIED, "%s", e.msg);
  cr_expect(strstr(e.msg, "escapes") != NULL, "%s", e.msg);
  sbx_client_reply_free(r);

  Sbx__V1__FileExists ex = SBX__V1__FILE_EXISTS__INIT;
  ex.path = "d/nope";
  req = (Sbx__V1__Request)SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_EXISTS;
  req.file_exists = &ex;
  cr_assert_eq(sbx_client_call(t.client, &req,
                               SBX__V1__RESPONSE__BODY_FILE_EXISTS, 0, &r, &e),
               0, "%s", e.msg);
  cr_expect_eq(r->file_exists->existence, SBX__V1__EXISTENCE__ABSENT);
  sbx_client_reply_free(r);
  test_daemon_stop(&t);
}

#define MAX_READ (4u << 20)  /* the daemon's max_read_bytes */
#define BULK_MIN (64u << 10) /* FILES_BULK_MIN */

static unsigned char pattern(uint64_t o) {
  return (unsigned char)(o * 7 + o / 4099);
}

static void write_at(struct sbx_client *c, const char *path,
                     const unsigned char *data, size_t n, uint64_t off) {
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = (char *)path;
  w.mode = SBX__V1__WRITE_MODE__WRITE_AT;
  w.offset = off;
  w.data.data = (uint8_t *)data;
  w.data.len = n;
  w.parents = true;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_file_write(c, &w, NULL, &e), 0, "write at %llu: %s",
               (unsigned long long)off, e.msg);
}

/* Reads LEN bytes (0: up to the limit) at OFF; checks them against the
 * pattern and returns how many came, *EOF its flag. */
static size_t read_check(struct sbx_client *c, const char *path, uint64_t off,
                         uint64_t len, bool *eof) {
  Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
  rd.path = (char *)path;
  rd.offset = off;
  rd.length = len;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_file_read(c, &rd, &r, &e), 0, "read at %llu: %s",
               (unsigned long long)off, e.msg);
  size_t n = r->file_read->data.len;
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(r->file_read->data.data[i], pattern(off + i), "byte %llu",
                 (unsigned long long)(off + i));
  *eof = r->file_read->eof;
  sbx_client_reply_free(r);
  return n;
}

/* Writes at exactly the read limit and across it, then reads back at and
 * around the limit and the bulk threshold: every byte where it belongs. */
Test(files_daemon, bulk_reads_and_writes_at_their_boundaries) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  const size_t total = 2 * MAX_READ + 12345;
  unsigned char *data = malloc(total);
  cr_assert_not_null(data);
  for (size_t i = 0; i < total; i++)
    data[i] = pattern(i);
  /* Chunks of exactly MAX_READ, the last one short. */
  for (size_t off = 0; off < total; off += MAX_READ)
    write_at(t.client, "big/f.bin", data + off,
             total - off < MAX_READ ? total - off : MAX_READ, off);
  bool eof = false;
  cr_expect_eq(read_check(t.client, "big/f.bin", 0, 0, &eof), MAX_READ,
               "an unbounded read stops at the limit");
  cr_expect(!eof);
  cr_expect_eq(read_check(t.client, "big/f.bin", 1, 3 * MAX_READ, &eof),
               MAX_READ, "a read larger than the limit gets the limit");
  cr_expect(!eof);
  cr_expect_eq(read_check(t.client, "big/f.bin", MAX_READ, MAX_READ, &eof),
               MAX_READ);
  cr_expect(!eof);
  cr_expect_eq(read_check(t.client, "big/f.bin", 2 * MAX_READ, 0, &eof), 12345,
               "the tail");
  cr_expect(eof);
  cr_expect_eq(
      read_check(t.client, "big/f.bin", total - BULK_MIN, BULK_MIN, &eof),
      BULK_MIN, "exactly the bulk threshold, to the end");
  cr_expect(eof);
  cr_expect_eq(read_check(t.client, "big/f.bin", 7, BULK_MIN - 1, &eof),
               BULK_MIN - 1, "just under it");
  cr_expect(!eof);
  cr_expect_eq(read_check(t.client, "big/f.bin", total, 0, &eof), 0);
  cr_expect(eof);
  /* The whole file, chunk by chunk, as sbx cp reads it. */
  uint64_t off = 0;
  do
    off += read_check(t.client, "big/f.bin", off, 0, &eof);
  while (!eof);
  cr_expect_eq(off, total);
  /* The same bytes on disk. */
  char path[256];
  (void)snprintf(path, sizeof(path), "%s/big/f.bin", t.root);
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f);
  unsigned char *back = malloc(total + 1);
  cr_assert_not_null(back);
  cr_expect_eq(fread(back, 1, total + 1, f), total);
  (void)fclose(f);
  cr_expect(memcmp(back, data, total) == 0);
  free(back);
  free(data);
  test_daemon_stop(&t);
}
