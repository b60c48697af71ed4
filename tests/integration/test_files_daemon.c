/* File RPCs through the real daemon: the dispatch table, the worker pool and
 * the wire, for a write/read round trip, an escape and an absent path. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
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
