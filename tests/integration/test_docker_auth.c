/* The docker backend's channel against a real engine (DOCKER_HOST, from
 * scripts/containers.sh): whatever answers at a sandbox's socket gets the
 * token only when it is the container's sandboxd and proves that it holds
 * the token. An impostor that took the socket's place records what it
 * receives, and receives no token; sbx says which socket failed. */
#include <criterion/criterion.h>
#include <glob.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd.pb-c.h"
#include "shared/auth.h"
#include "tests/support/sbxrun.h"

/* An nng REP socket that appends every request it gets, raw, to a file
 * and answers each with a Hello reply holding a proof it made up. */
struct impostor {
  nng_socket sock;
  pthread_t thread;
  FILE *log;
  atomic_uint requests;
};

/* The impostor's loop, until its socket is closed. */
static void *impostor_main(void *arg) {
  struct impostor *im = arg;
  for (;;) {
    nng_msg *m = NULL;
    if (nng_recvmsg(im->sock, &m, 0) != 0)
      return NULL;
    im->requests++;
    (void)fwrite(nng_msg_body(m), 1, nng_msg_len(m), im->log);
    (void)fflush(im->log);
    Sbx__V1__Request *req =
        sbx__v1__request__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
    nng_msg_free(m);
    static uint8_t made_up[SBX_HELLO_PROOF_BYTES];
    memset(made_up, 0x55, sizeof(made_up));
    Sbx__V1__HelloReply h = SBX__V1__HELLO_REPLY__INIT;
    h.version = 1;
    h.root = "/workspace";
    h.proof.data = made_up;
    h.proof.len = sizeof(made_up);
    Sbx__V1__Response r = SBX__V1__RESPONSE__INIT;
    r.version = 1;
    r.id = req ? req->id : "";
    r.body_case = SBX__V1__RESPONSE__BODY_HELLO;
    r.hello = &h;
    uint8_t buf[512];
    size_t n = sbx__v1__response__pack(&r, buf);
    if (req)
      sbx__v1__request__free_unpacked(req, NULL);
    (void)nng_send(im->sock, buf, n, 0);
  }
}

/* Whether the file at PATH holds the LEN bytes of NEEDLE anywhere. */
static bool file_holds(const char *path, const char *needle) {
  FILE *f = fopen(path, "re");
  cr_assert_not_null(f, "%s", path);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  return memmem(buf, n, needle, strlen(needle)) != NULL;
}

/* A command inside cannot put its own server on the socket's path; a
 * server put there all the same (from the host) is refused by sbx's next
 * exec, which names the socket, and has been sent no token. */
Test(docker_auth, an_impostor_on_the_socket_gets_no_token, .timeout = 240) {
  if (!getenv("DOCKER_HOST"))
    cr_assert_fail("DOCKER_HOST is unset: these tests need a container "
                   "engine; run `bash scripts/containers.sh start` and export "
                   "the DOCKER_HOST it prints (`make check` does both)");
  char dir[64] = "/tmp/sbx-auth-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char state[128], tmp[128];
  (void)snprintf(state, sizeof(state), "%s/state", dir);
  (void)snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  cr_assert_eq(mkdir(tmp, 0700), 0);
  setenv("TMPDIR", tmp, 1); /* the runtime directory is made there */
  /* This build's sandboxd, whatever the image may carry. */
  char agent[160];
  (void)snprintf(agent, sizeof(agent), "%s",
                 test_write_file(dir, "agent.json",
                                 "{\"name\": \"A\", \"run_config\": "
                                 "{\"backend\": \"docker\", \"sandboxd\": "
                                 "\"inject\"}}"));
  const char *create[] = {"create", "--agent", agent, NULL};
  char *id = sbx_sandbox_line(state, create);

  /* From inside, a copy of sandboxd with a token it made up tries the
   * socket's path, and so do mv and ln: the path is not theirs. */
  struct sbx_run_out r;
  const char *inside[] = {
      "exec",
      id,
      "--",
      "sh",
      "-c",
      "echo made-up-token-0123456789 > /tmp/t; "
      "/usr/local/bin/sandboxd --listen ipc:///run/sbx/sandboxd.sock "
      "--root /tmp --token-file /tmp/t; echo \"impostor: $?\"; "
      "mv /tmp/t /run/sbx/sandboxd.sock || ln -sf /tmp/t /run/sbx/x.sock || "
      "echo refused",
      NULL};
  sbx_sandbox_run(&r, state, inside);
  cr_expect(strstr(r.out, "impostor: 1") && strstr(r.out, "refused"),
            "out: %s\nerr: %s", r.out, r.err);
  sbx_run_free(&r);

  /* On the host, an impostor put where the socket is: what a workload
   * that could write the runtime directory would do. */
  char pattern[160];
  (void)snprintf(pattern, sizeof(pattern), "%s/sbx-docker-*", tmp);
  glob_t g;
  cr_assert_eq(glob(pattern, 0, NULL, &g), 0, "no runtime directory");
  char sock[256], fake[256], real[256], url[300], got[128], tokf[256];
  (void)snprintf(sock, sizeof(sock), "%s/sandboxd.sock", g.gl_pathv[0]);
  (void)snprintf(fake, sizeof(fake), "%s/impostor.sock", g.gl_pathv[0]);
  (void)snprintf(real, sizeof(real), "%s/real.sock", g.gl_pathv[0]);
  globfree(&g);
  (void)snprintf(url, sizeof(url), "ipc://%s", fake);
  (void)snprintf(got, sizeof(got), "%s/impostor.got", dir);
  struct impostor im = {.log = fopen(got, "we")};
  cr_assert_not_null(im.log);
  cr_assert_eq(nng_rep0_open(&im.sock), 0);
  cr_assert_eq(nng_listen(im.sock, url, NULL, 0), 0);
  cr_assert_eq(pthread_create(&im.thread, NULL, impostor_main, &im), 0);
  /* A second name keeps the real socket reachable for the end. */
  cr_assert_eq(link(sock, real), 0);
  cr_assert_eq(rename(fake, sock), 0);

  const char *exec[] = {"exec", id, "--", "true", NULL};
  sbx_sandbox_run(&r, state, exec);
  cr_expect_neq(r.status, 0, "exec through the impostor succeeded");
  cr_expect(strstr(r.err, "did not prove it holds the sandbox's secret") &&
                strstr(r.err, sock),
            "%s", r.err);
  sbx_run_free(&r);
  (void)nng_close(im.sock);
  (void)pthread_join(im.thread, NULL);
  fclose(im.log);

  (void)snprintf(tokf, sizeof(tokf), "%s/sandboxes/%s.token", state, id);
  FILE *t = fopen(tokf, "re");
  cr_assert_not_null(t, "%s", tokf);
  char token[128] = {0};
  cr_assert_not_null(fgets(token, sizeof(token), t));
  fclose(t);
  token[strcspn(token, "\n")] = '\0';
  cr_expect(!file_holds(got, token), "the impostor received the token");
  /* sbx knows the container's pid: the impostor is not even spoken to. */
  cr_expect_eq(im.requests, 0, "the impostor got %u requests",
               (unsigned)im.requests);

  /* The real sandboxd back in its place: served again, and removable. */
  cr_assert_eq(rename(real, sock), 0);
  sbx_sandbox_run(&r, state, exec);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  sbx_sandbox_remove_all(state);
  free(id);
  (void)test_rm_rf(dir);
}
