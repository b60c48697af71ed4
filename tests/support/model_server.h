/* Runs tests/support/model_server.py, the scripted model server, for a
 * test: the script (JSON text, see the .py file for its format) goes to a
 * temp file, the server listens on an ephemeral 127.0.0.1 port, and every
 * request it receives is logged for test_model_server_requests.
 *
 * The server is killed with SIGTERM by test_model_server_stop, and with
 * SIGKILL by the kernel when the test process dies first (PDEATHSIG), so no
 * server outlives its test. */
#ifndef SBX_TEST_MODEL_SERVER_H
#define SBX_TEST_MODEL_SERVER_H

#include <jansson.h>
#include <sys/types.h>

struct test_model_server {
  pid_t pid;
  int port;
  char dir[64];           /* temp dir holding the two files */
  char script_path[96];   /* dir/script.json */
  char requests_path[96]; /* dir/requests.jsonl */
  char base_url[64];      /* "http://127.0.0.1:PORT/v1" */
};

/* Starts the server on SCRIPT. With API_KEY set, requests without
 * "Authorization: Bearer API_KEY" get a 401 that echoes the key they sent.
 * Asserts that the server came up. */
void test_model_server_start(struct test_model_server *s, const char *script,
                             const char *api_key);
/* Stops the server and removes its files. Accepts a stopped server. */
void test_model_server_stop(struct test_model_server *s);
/* The requests received so far (new): an array of {"n", "method", "path",
 * "headers", "authorization", "body"} objects in arrival order. */
json_t *test_model_server_requests(const struct test_model_server *s);
/* The output text of the function call CALL_ID in request N of REQS
 * (test_model_server_requests'), or with N < 0 in the last request that
 * has one; NULL when none has, "(not a string)" for an output that is not
 * text (an image's parts). Borrowed from REQS. */
const char *test_call_output(json_t *reqs, long n, const char *call_id);
/* A loopback TCP port that nothing listens on (just bound and closed). */
int test_closed_port(void);
/* Path of model_server.py. */
const char *test_model_server_path(void);

#endif
