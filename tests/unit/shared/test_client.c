/* The client's checks of replies, against a scripted peer on ipc:// in this
 * process: what an older sandboxd sends (fields it does not know left out)
 * is accepted, what a lying one sends is refused before the caller sees it.
 * A real sandboxd cannot be made to lie or to be old, hence the peer. */
#include <criterion/criterion.h>
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared/client.h"
#include "shared/path.h"

/* Fills the reply to one request: the body and whatever it points to must
 * live until the peer has packed it (static storage in the tests). */
typedef void (*answer_fn)(const Sbx__V1__Request *req, Sbx__V1__Response *r);

struct peer {
  nng_socket sock;
  pthread_t thread;
  answer_fn answer;
  char url[96];
  char dir[64];
};

static void *peer_main(void *arg) {
  struct peer *p = arg;
  for (;;) {
    nng_msg *m = NULL;
    if (nng_recvmsg(p->sock, &m, 0) != 0)
      return NULL;
    Sbx__V1__Request *req =
        sbx__v1__request__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    if (!req)
      continue;
    Sbx__V1__Response r = SBX__V1__RESPONSE__INIT;
    r.version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    r.id = req->id;
    p->answer(req, &r);
    size_t n = sbx__v1__response__get_packed_size(&r);
    uint8_t *buf = malloc(n ? n : 1);
    sbx__v1__response__pack(&r, buf);
    sbx__v1__request__free_unpacked(req, NULL);
    (void)nng_send(p->sock, buf, n, 0);
    free(buf);
  }
}

static void peer_start(struct peer *p, answer_fn answer) {
  (void)snprintf(p->dir, sizeof(p->dir), "/tmp/sbx-test-client-XXXXXX");
  cr_assert_not_null(mkdtemp(p->dir));
  (void)snprintf(p->url, sizeof(p->url), "ipc://%s/sock", p->dir);
  p->answer = answer;
  cr_assert_eq(nng_rep0_open(&p->sock), 0);
  cr_assert_eq(nng_listen(p->sock, p->url, NULL, 0), 0);
  cr_assert_eq(pthread_create(&p->thread, NULL, peer_main, p), 0);
}

static void peer_stop(struct peer *p) {
  (void)nng_close(p->sock);
  (void)pthread_join(p->thread, NULL);
  char sock[128];
  (void)snprintf(sock, sizeof(sock), "%s/sock", p->dir);
  (void)unlink(sock);
  (void)rmdir(p->dir);
}

static struct sbx_client *client_of(struct peer *p) {
  struct sbx_client_config cfg = {
      .url = p->url,
      .token = (const uint8_t *)"token",
      .token_len = 5,
      .timeout_ms = 2000,
      .retries = 1,
  };
  struct sbx_client *c = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_client_new(&cfg, &c, &e), 0, "%s", e.msg);
  return c;
}

/* ---- scripted answers ---- */

static Sbx__V1__ExecStartReply start_reply;
static Sbx__V1__ExecReadReply read_reply;

static void answer_start(const Sbx__V1__Request *req, Sbx__V1__Response *r) {
  (void)req;
  r->body_case = SBX__V1__RESPONSE__BODY_EXEC_START;
  r->exec_start = &start_reply;
}

static void answer_read(const Sbx__V1__Request *req, Sbx__V1__Response *r) {
  (void)req;
  r->body_case = SBX__V1__RESPONSE__BODY_EXEC_READ;
  r->exec_read = &read_reply;
}

static void set_read(Sbx__V1__ExecReadReply *x, const char *data,
                     uint64_t offset, uint64_t next, uint64_t gap,
                     uint64_t end) {
  sbx__v1__exec_read_reply__init(x);
  x->data.data = (uint8_t *)data;
  x->data.len = strlen(data);
  x->offset = offset;
  x->next_offset = next;
  x->gap = gap;
  x->end_offset = end;
}

static int start(struct sbx_client *c, uint32_t wait_ms, uint32_t max,
                 Sbx__V1__Response **r, struct sbx_error *e) {
  static char *argv[] = {"/bin/true"};
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 1;
  st.wait_ms = wait_ms;
  st.max_bytes = max;
  return sbx_exec_start(c, &st, r, e);
}

/* An older sandboxd ignores wait_ms: its reply has no output, and that is
 * not an error; the caller reads as after a plain start. */
Test(client, start_that_waits_accepts_a_sandboxd_that_did_not) {
  sbx__v1__exec_start_reply__init(&start_reply);
  start_reply.exec_id = 7;
  start_reply.pid = 1234;
  struct peer p;
  peer_start(&p, answer_start);
  struct sbx_client *c = client_of(&p);
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(start(c, 1000, 0, &r, &e), 0, "%s", e.msg);
  cr_expect_eq(r->exec_start->exec_id, 7);
  cr_expect_null(r->exec_start->output);
  sbx_client_reply_free(r);
  sbx_client_free(c);
  peer_stop(&p);
}

Test(client, start_replies_that_lie_about_their_output_are_refused) {
  static Sbx__V1__ExecReadReply out;
  sbx__v1__exec_start_reply__init(&start_reply);
  start_reply.exec_id = 7;
  start_reply.output = &out;
  struct peer p;
  peer_start(&p, answer_start);
  struct sbx_client *c = client_of(&p);
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  /* A consistent one passes. */
  set_read(&out, "hi\n", 0, 3, 0, 3);
  cr_assert_eq(start(c, 1000, 0, &r, &e), 0, "%s", e.msg);
  cr_expect_eq(r->exec_start->output->data.len, 3);
  sbx_client_reply_free(r);
  struct {
    const char *what;
    uint64_t offset, next, gap, end;
    uint32_t wait, max;
  } bad[] = {
      {"next_offset past the data", 0, 9, 0, 9, 1000, 0},
      {"end before the data's end", 0, 3, 0, 2, 1000, 0},
      {"a gap that does not add up", 5, 8, 1, 8, 1000, 0},
      {"more than max_bytes", 0, 3, 0, 3, 1000, 2},
      {"output nobody waited for", 0, 3, 0, 3, 0, 0},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    set_read(&out, "hi\n", bad[i].offset, bad[i].next, bad[i].gap, bad[i].end);
    e = (struct sbx_error){0};
    r = NULL;
    cr_expect_eq(start(c, bad[i].wait, bad[i].max, &r, &e), -EPROTO, "%s",
                 bad[i].what);
    cr_expect_null(r, "%s", bad[i].what);
    cr_expect(strstr(e.msg, "inconsistent exec start reply") != NULL, "%s: %s",
              bad[i].what, e.msg);
  }
  sbx_client_free(c);
  peer_stop(&p);
}

Test(client, read_replies_that_lie_are_refused) {
  struct peer p;
  peer_start(&p, answer_read);
  struct sbx_client *c = client_of(&p);
  Sbx__V1__ExecRead rd = SBX__V1__EXEC_READ__INIT;
  rd.exec_id = 7;
  rd.offset = 10;
  rd.max_bytes = 8;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  set_read(&read_reply, "abc", 12, 15, 2, 20);
  cr_assert_eq(sbx_exec_read(c, &rd, &r, &e), 0, "%s", e.msg);
  cr_expect_eq(r->exec_read->gap, 2);
  sbx_client_reply_free(r);
  /* Data from before the asked offset. */
  set_read(&read_reply, "abc", 9, 12, 0, 20);
  cr_expect_eq(sbx_exec_read(c, &rd, &r, &e), -EPROTO);
  /* More than asked for. */
  set_read(&read_reply, "0123456789", 10, 20, 0, 20);
  cr_expect_eq(sbx_exec_read(c, &rd, &r, &e), -EPROTO);
  sbx_client_free(c);
  peer_stop(&p);
}

static Sbx__V1__ArchiveStartReply import_reply;

static void answer_import(const Sbx__V1__Request *req, Sbx__V1__Response *r) {
  (void)req;
  r->body_case = SBX__V1__RESPONSE__BODY_ARCHIVE_IMPORT_START;
  r->archive_import_start = &import_reply;
}

static int import_start(struct sbx_client *c, bool stage, struct sbx_error *e) {
  Sbx__V1__ArchiveImportStart a = SBX__V1__ARCHIVE_IMPORT_START__INIT;
  a.path = (char *)"dst";
  a.stage = stage;
  Sbx__V1__Response *r = NULL;
  int rc = sbx_archive_import_start(c, &a, &r, e);
  if (rc == 0)
    sbx_client_reply_free(r);
  return rc;
}

/* The staging path names a directory the controller then leaves alone: one
 * it did not ask for, or one that is not a sane path, is refused. */
Test(client, import_staging_paths_are_checked) {
  sbx__v1__archive_start_reply__init(&import_reply);
  import_reply.handle = 9;
  struct peer p;
  peer_start(&p, answer_import);
  struct sbx_client *c = client_of(&p);
  struct sbx_error e = {0};
  import_reply.staging_path = (char *)"dst/.sbx-import-0000000000000009";
  cr_expect_eq(import_start(c, true, &e), 0, "%s", e.msg);
  import_reply.staging_path = (char *)"";
  cr_expect_eq(import_start(c, true, &e), 0, "%s", e.msg);
  cr_expect_eq(import_start(c, false, &e), 0, "%s", e.msg);

  import_reply.staging_path = (char *)"dst/.sbx-import-0000000000000009";
  cr_expect_eq(import_start(c, false, &e), -EPROTO);
  cr_expect_eq(e.code, SBX_INTERNAL);
  import_reply.staging_path = (char *)"dst/\xff\xfe";
  cr_expect_eq(import_start(c, true, &e), -EPROTO);
  static char longp[SBX_PATH_MAX + 10];
  memset(longp, 'a', sizeof(longp) - 1);
  import_reply.staging_path = longp;
  cr_expect_eq(import_start(c, true, &e), -EPROTO);
  sbx_client_free(c);
  peer_stop(&p);
}
