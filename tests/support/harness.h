/* Calls sandboxd RPC handlers directly, without nng: a temporary workspace,
 * a struct sandboxd around it, and a synchronous call that waits for
 * handlers returning RPC_PENDING. For unit tests of handler modules;
 * integration tests start the real daemon instead (tests/support/daemon.h). */
#ifndef SBX_TEST_HARNESS_H
#define SBX_TEST_HARNESS_H

#include <pthread.h>
#include <stdbool.h>

#include "sandboxd/rpc/rpc.h"

struct harness {
  struct sandboxd d;
  char dir[64];  /* temp dir holding ws/ (the root) and anything else */
  char root[96]; /* dir/ws */
};

/* Creates DIR/ws as the root with default limits; asserts on failure. */
void harness_init(struct harness *h);
/* Closes fds and removes the temp dir. */
void harness_fini(struct harness *h);

/* A finished call: its return value and response (valid until
 * harness_call_free). */
struct harness_call {
  int rc;
  struct rpc_call call;
  Sbx__V1__Response resp;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
};

/* Runs HANDLER on REQ (its body set by the caller) and waits for it, also
 * when it returns RPC_PENDING. Returns the call; free with harness_call_free.
 */
struct harness_call *harness_call(struct harness *h, Sbx__V1__Request *req,
                                  int (*handler)(struct rpc_call *));
void harness_call_free(struct harness_call *hc);

/* Writes a file beneath the root (relative path), creating parents. */
void harness_write(struct harness *h, const char *rel, const char *content);
/* Reads a file beneath the root into a new string; NULL if missing. */
char *harness_read(struct harness *h, const char *rel);

#endif
