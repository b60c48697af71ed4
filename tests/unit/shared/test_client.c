/* The client's checks of replies, against a scripted peer on ipc:// in this
 * process: what an older sandboxd sends (fields it does not know left out)
 * is accepted, what a lying one sends is refused before the caller sees it,
 * and a peer that cannot prove it holds the client's secret never gets the
 * token. A real sandboxd cannot be made to lie or to be old, hence the
 * peer. */
#include <criterion/criterion.h>
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/auth.h"
#include "shared/client.h"
#include "shared/clock.h"
#include "shared/path.h"

/* Fills the reply to one request: the body and whatever it points to must
 * live until the peer has packed it (static storage in the tests). */
typedef void (*answer_fn)(const Sbx__V1__Request *req, Sbx__V1__Response *r);

/* How the peer answers a Hello that asks it to prove itself. */
enum prove {
  PROVE_RIGHT,   /* with the proof under SECRET, as sandboxd does */
  PROVE_ERROR,   /* UNAUTHENTICATED, as a sandboxd before proofs does */
  PROVE_NOTHING, /* a HelloReply without a proof */
};

struct peer {
  nng_socket sock;
  pthread_t thread;
  answer_fn answer;
  enum prove prove;
  const char *secret; /* what it proves with; "token" is the client's */
  atomic_uint requests;
  atomic_uint tokens; /* requests that carried a token */
  char url[96];
  char dir[64];
};

static Sbx__V1__HelloReply proof_reply;
static Sbx__V1__Error proof_error;
static uint8_t proof_bytes[SBX_HELLO_PROOF_BYTES];

/* Answers REQ when it is a challenge (a Hello with a nonce and no token)
 * as P is told to; false when it is not one. */
static bool answer_challenge(struct peer *p, const Sbx__V1__Request *req,
                             Sbx__V1__Response *r) {
  if (req->body_case != SBX__V1__REQUEST__BODY_HELLO || req->token.len ||
      req->hello->client_nonce.len != SBX_HELLO_NONCE_BYTES)
    return false;
  sbx__v1__hello_reply__init(&proof_reply);
  proof_reply.version = 1;
  if (p->prove == PROVE_ERROR) {
    sbx__v1__error__init(&proof_error);
    proof_error.code = SBX__V1__CODE__UNAUTHENTICATED;
    proof_error.message = "wrong or missing token";
    r->error = &proof_error;
    return true;
  }
  if (p->prove == PROVE_RIGHT) {
    sbx_hello_proof((const uint8_t *)p->secret, strlen(p->secret),
                    req->hello->client_nonce.data, proof_bytes);
    proof_reply.proof.data = proof_bytes;
    proof_reply.proof.len = sizeof(proof_bytes);
  }
  r->body_case = SBX__V1__RESPONSE__BODY_HELLO;
  r->hello = &proof_reply;
  return true;
}

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
    p->requests++;
    if (req->token.len)
      p->tokens++;
    Sbx__V1__Response r = SBX__V1__RESPONSE__INIT;
    r.version = SBX__V1__PROTOCOL_VERSION__PROTOCOL_VERSION_1;
    r.id = req->id;
    if (!answer_challenge(p, req, &r))
      p->answer(req, &r);
    size_t n = sbx__v1__response__get_packed_size(&r);
    uint8_t *buf = malloc(n ? n : 1);
    sbx__v1__response__pack(&r, buf);
    sbx__v1__request__free_unpacked(req, NULL);
    (void)nng_send(p->sock, buf, n, 0);
    free(buf);
  }
}

/* Starts P in DIR (NULL: a new temporary one) answering with ANSWER and
 * proving itself with SECRET. */
static void peer_listen(struct peer *p, const char *dir, answer_fn answer,
                        const char *secret) {
  memset(p, 0, sizeof(*p));
  (void)snprintf(p->dir, sizeof(p->dir), "%s",
                 dir ? dir : "/tmp/sbx-test-client-XXXXXX");
  cr_assert(dir || mkdtemp(p->dir));
  (void)snprintf(p->url, sizeof(p->url), "ipc://%s/sock", p->dir);
  p->answer = answer;
  p->secret = secret;
  cr_assert_eq(nng_rep0_open(&p->sock), 0);
  cr_assert_eq(nng_listen(p->sock, p->url, NULL, 0), 0);
  cr_assert_eq(pthread_create(&p->thread, NULL, peer_main, p), 0);
}

/* A peer that holds the client's secret, in a new directory. */
static void peer_start(struct peer *p, answer_fn answer) {
  peer_listen(p, NULL, answer, "token");
}

/* Stops P and removes its socket; its directory stays when KEEP_DIR. */
static void peer_close(struct peer *p, bool keep_dir) {
  (void)nng_close(p->sock);
  (void)pthread_join(p->thread, NULL);
  char sock[128];
  (void)snprintf(sock, sizeof(sock), "%s/sock", p->dir);
  (void)unlink(sock);
  if (!keep_dir)
    (void)rmdir(p->dir);
}

/* Stops P and removes its directory. */
static void peer_stop(struct peer *p) {
  peer_close(p, false);
}

/* A client of URL with the token "token" that expects the socket served
 * by PID (0: by anyone) or, with CHILD, by a child of PID. */
static struct sbx_client *client_to(const char *url, pid_t pid, bool child) {
  struct sbx_client_config cfg = {
      .url = url,
      .token = (const uint8_t *)"token",
      .token_len = 5,
      .timeout_ms = 2000,
      .retries = 1,
      .peer_pid = pid,
      .peer_child = child,
  };
  struct sbx_client *c = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_client_new(&cfg, &c, &e), 0, "%s", e.msg);
  return c;
}

/* A client of P that does not check the serving pid. */
static struct sbx_client *client_of(struct peer *p) {
  return client_to(p->url, 0, false);
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

/* ---- the handshake ---- */

/* An empty process list, for calls that only need an answer. */
static void answer_list(const Sbx__V1__Request *req, Sbx__V1__Response *r) {
  static Sbx__V1__ExecListReply list = SBX__V1__EXEC_LIST_REPLY__INIT;
  (void)req;
  r->body_case = SBX__V1__RESPONSE__BODY_EXEC_LIST;
  r->exec_list = &list;
}

/* Expects a call on C to be refused as a peer without the secret, naming
 * URL, and the peer P to have been asked something but given no token. */
static void expect_refused(struct sbx_client *c, struct peer *p,
                           const char *what) {
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(sbx_exec_list(c, &r, &e), -EKEYREJECTED, "%s: %s", what, e.msg);
  cr_expect_null(r, "%s", what);
  cr_expect_eq(e.code, SBX_UNAUTHENTICATED, "%s", what);
  cr_expect(strstr(e.msg, "did not prove it holds the sandbox's secret") &&
                strstr(e.msg, p->url),
            "%s: %s", what, e.msg);
  cr_expect_gt(p->requests, 0, "%s: the peer was never asked", what);
  cr_expect_eq(p->tokens, 0,
               "%s: the token went to a peer that did not "
               "prove it holds it",
               what);
}

/* An impostor on the socket (one with another secret, an older sandboxd,
 * a peer that sends no proof) is refused before the token is sent. */
Test(client, a_peer_that_cannot_prove_gets_no_token) {
  static const struct {
    enum prove prove;
    const char *secret, *what;
  } peers[] = {
      {PROVE_RIGHT, "another secret", "another secret"},
      {PROVE_ERROR, "token", "an UNAUTHENTICATED answer"},
      {PROVE_NOTHING, "token", "a reply without a proof"},
  };
  for (size_t i = 0; i < sizeof(peers) / sizeof(peers[0]); i++) {
    struct peer p;
    peer_listen(&p, NULL, answer_list, peers[i].secret);
    p.prove = peers[i].prove;
    struct sbx_client *c = client_of(&p);
    expect_refused(c, &p, peers[i].what);
    sbx_client_free(c);
    peer_stop(&p);
  }
}

/* A client that verified sandboxd verifies again after a redial: an
 * impostor that took the socket's place meanwhile gets no token. */
Test(client, a_new_connection_is_verified_again) {
  struct peer p;
  peer_start(&p, answer_list);
  struct sbx_client *c = client_of(&p);
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_list(c, &r, &e), 0, "%s", e.msg);
  sbx_client_reply_free(r);
  cr_expect_gt(p.tokens, 0, "the right peer gets the token");
  char dir[64];
  (void)snprintf(dir, sizeof(dir), "%s", p.dir);
  peer_close(&p, true);

  struct peer impostor;
  peer_listen(&impostor, dir, answer_list, "another secret");
  expect_refused(c, &impostor, "after a redial");
  sbx_client_free(c);
  peer_stop(&impostor);
}

/* With the serving pid known, a socket served by another process is
 * refused at once, before anything at all is sent to it. */
Test(client, a_socket_served_by_another_process_is_refused) {
  struct peer p;
  peer_start(&p, answer_list); /* it holds the secret, but is not the pid */
  struct sbx_client *c = client_to(p.url, getppid(), false);
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  uint64_t t0 = sbx_now_ms();
  cr_expect_eq(sbx_exec_list(c, &r, &e), -EKEYREJECTED, "%s", e.msg);
  cr_expect_lt(sbx_now_ms() - t0, 1500, "refused only after a timeout");
  char want[64];
  (void)snprintf(want, sizeof(want),
                 "served by pid %d, not by sandboxd's pid %d", (int)getpid(),
                 (int)getppid());
  cr_expect(strstr(e.msg, want) && strstr(e.msg, p.url), "%s", e.msg);
  cr_expect_eq(p.requests, 0, "the peer was sent something");
  sbx_client_free(c);

  /* The right pid, or its parent with peer_child, is served. */
  c = client_to(p.url, getpid(), false);
  cr_expect_eq(sbx_exec_list(c, &r, &e), 0, "%s", e.msg);
  sbx_client_reply_free(r);
  sbx_client_free(c);
  c = client_to(p.url, getppid(), true);
  cr_expect_eq(sbx_exec_list(c, &r, &e), 0, "%s", e.msg);
  sbx_client_reply_free(r);
  sbx_client_free(c);
  peer_stop(&p);
}

/* Sleeps MS milliseconds. */
static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  (void)nanosleep(&ts, NULL);
}

struct hammer {
  struct sbx_client *c;
  atomic_bool stop;
  atomic_uint ok;
};

/* Calls until told to stop, counting the calls that succeed. */
static void *hammer_main(void *arg) {
  struct hammer *h = arg;
  while (!h->stop) {
    Sbx__V1__Response *r = NULL;
    struct sbx_error e = {0};
    if (sbx_exec_list(h->c, &r, &e) == 0)
      h->ok++;
    sbx_client_reply_free(r);
  }
  return NULL;
}

/* A peer holding the client's secret in a child process, in DIR (which
 * exists), until it is killed: a peer that dies as a process does, not
 * by nng_close (which can wait forever for nng's reaper when the clients
 * are in the same process). Returns once its socket is there. Only before
 * this process uses nng: nng does not survive a fork. */
static pid_t peer_fork(const char *dir) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    struct peer p;
    peer_listen(&p, dir, answer_list, "token");
    for (;;)
      pause();
  }
  char sock[128];
  (void)snprintf(sock, sizeof(sock), "%.63s/sock", dir);
  for (int i = 0; i < 2000 && access(sock, F_OK) != 0; i++)
    sleep_ms(1);
  cr_assert_eq(access(sock, F_OK), 0, "the peer did not start");
  return pid;
}

/* Calls from many threads while the socket changes hands: requests that
 * were queued when the verified connection dropped never go out on the
 * impostor's, which listens the moment the old one is gone. */
Test(client, requests_in_flight_never_reach_a_new_connection_unverified) {
  enum { ROUNDS = 5 };
  char dirs[ROUNDS][64];
  pid_t honest[ROUNDS];
  for (int round = 0; round < ROUNDS; round++) {
    (void)snprintf(dirs[round], sizeof(dirs[round]),
                   "/tmp/sbx-test-client-XXXXXX");
    cr_assert_not_null(mkdtemp(dirs[round]));
    honest[round] = peer_fork(dirs[round]);
  }
  for (int round = 0; round < ROUNDS; round++) {
    const char *dir = dirs[round];
    char url[96];
    (void)snprintf(url, sizeof(url), "ipc://%.63s/sock", dir);
    struct hammer h = {.c = client_to(url, 0, false)};
    pthread_t th[8];
    for (size_t i = 0; i < 8; i++)
      cr_assert_eq(pthread_create(&th[i], NULL, hammer_main, &h), 0);
    while (h.ok < 200)
      sleep_ms(1);
    cr_assert_eq(kill(honest[round], SIGKILL), 0);
    (void)waitpid(honest[round], NULL, 0);
    char sock[128];
    (void)snprintf(sock, sizeof(sock), "%.63s/sock", dir);
    (void)unlink(sock);
    struct peer impostor;
    peer_listen(&impostor, dir, answer_list, "another secret");
    /* Until the client has come to the impostor (on a loaded machine its
     * redial can take longer than a moment), and a little after. */
    for (int i = 0; i < 10000 && impostor.requests == 0; i++)
      sleep_ms(1);
    sleep_ms(100);
    h.stop = true;
    for (size_t i = 0; i < 8; i++)
      (void)pthread_join(th[i], NULL);
    cr_expect_gt(impostor.requests, 0, "round %d: never reached", round);
    cr_expect_eq(impostor.tokens, 0, "round %d: the impostor got the token",
                 round);
    sbx_client_free(h.c);
    peer_stop(&impostor);
  }
}
