/* Starts the real sandboxd binary for integration tests: a temp workspace,
 * a private ipc:// socket in a 0700 directory, a random token passed by fd,
 * --ready-fd to wait without polling, and a connected client. */
#ifndef SBX_TEST_DAEMON_H
#define SBX_TEST_DAEMON_H

#include <stdbool.h>
#include <sys/types.h>

#include "shared/client.h"
#include "tests/support/flood.h"

struct test_daemon {
  pid_t pid;
  char dir[64];   /* temp dir: ws/ (root), run/ (socket), out/ */
  char root[96];  /* dir/ws */
  char url[128];  /* ipc://dir/run/sock */
  char token[65]; /* hex */
  struct sbx_client *client;
};

/* Extra sandboxd arguments (NULL-terminated) may be given in ARGS. Asserts
 * that the daemon came up. */
void test_daemon_start(struct test_daemon *t, const char *const *args);
/* Stops the daemon (Shutdown, then SIGKILL after 5 s), frees the client,
 * removes the temp dir. Returns the daemon's exit status (waitpid form). */
int test_daemon_stop(struct test_daemon *t);
/* A second client to the same daemon with TOKEN (NULL: the right one). */
struct sbx_client *test_daemon_client(struct test_daemon *t, const char *token);
/* Sends BUF (LEN bytes, an encoded Request or anything else) on a fresh
 * REQ socket to URL and returns the decoded reply (new; free with
 * sbx__v1__response__free_unpacked). Asserts on transport errors. */
Sbx__V1__Response *test_daemon_raw_call(const char *url, const void *buf,
                                        size_t len);
/* Sends REQ (its body set) twice with the same ID and T's token, each on a
 * fresh REQ socket, as a client retrying after a lost reply would; *A and *B
 * get the replies (free with sbx__v1__response__free_unpacked). */
void test_daemon_send_twice(struct test_daemon *t, Sbx__V1__Request *req,
                            const char *id, Sbx__V1__Response **a,
                            Sbx__V1__Response **b);
/* Connects to URL's address (ipc:// path, or tcp:// / tls+tcp:// host:port)
 * N times and hangs up during the handshake: at once, after half an SP
 * header, or after a wrong one. */
void test_daemon_hang_ups(const char *url, unsigned n);
/* Starts a flood (flood.h) of N connections in MODE on T's URL, or skips
 * the test, T stopped, when the descriptors it needs cannot be had. Asserts
 * on any other failure. */
struct flood *test_daemon_flood(struct test_daemon *t, unsigned n,
                                enum flood_mode mode);
/* Path of the built sandboxd. */
const char *test_sandboxd_path(void);

#endif
