/* Runs the real `sbx serve` for a test, and speaks HTTP to it with libcurl:
 * plain requests, and Server-Sent Events read until the stream ends, a
 * number of events came, or a time passed. */
#ifndef SBX_TEST_SERVER_H
#define SBX_TEST_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

struct test_server {
  pid_t pid;
  char dir[64];    /* temp dir: state/, the log */
  char state[96];  /* dir/state */
  char db[512];    /* the store's URL */
  char log[96];    /* the server's stderr */
  char url[64];    /* "http://127.0.0.1:PORT" */
  char token[128]; /* an admin token */
  char model_url[64];
  /* PEM files test_http shows the server when set: the CA that signed its
   * certificate, and a client certificate and its key. */
  char tls_ca[128], tls_cert[128], tls_key[128];
};

/* Makes the temp dir and an admin token in the store DB (NULL: sqlite in
 * the state dir); the server is not started. */
void test_server_init(struct test_server *s, const char *db,
                      const char *model_url);
/* Starts sbx serve on a free loopback port with EXTRA (NULL-terminated,
 * may be NULL) flags; waits until it listens. */
void test_server_start(struct test_server *s, const char *const *extra);
/* Kills the server with SIG and reaps it: the milliseconds it took to
 * exit. Accepts a stopped one (0). */
long test_server_kill(struct test_server *s, int sig);
/* The port of S->url. */
unsigned test_server_port(const struct test_server *s);
/* Stops the server, removes its sandboxes and the temp dir (kept, with the
 * server's log, when SBX_TEST_KEEP is set: for a look after a failure). */
void test_server_fini(struct test_server *s);
/* A new token NAME with SCOPES (new string). */
char *test_server_token(struct test_server *s, const char *name,
                        const char *scopes);

struct test_http {
  long status;
  char *body;      /* new, NUL-terminated */
  size_t len;      /* its length */
  char *headers;   /* new: the response's header lines */
  json_t *json;    /* new: the body parsed, or NULL */
  char error[512]; /* why the request failed (test_http_try) */
};

/* METHOD PATH on S with TOKEN (NULL: no Authorization) and BODY (NULL:
 * none); HEADERS: more "Name: value" lines, NULL-terminated, may be NULL. */
void test_http(struct test_http *out, const struct test_server *s,
               const char *method, const char *path, const char *token,
               const char *body, const char *const *headers);
/* As test_http, but a request that gets no answer (a refused TLS
 * handshake, a closed connection) is no failure: 0, or the libcurl error
 * code with OUT->error saying why. */
int test_http_try(struct test_http *out, const struct test_server *s,
                  const char *method, const char *path, const char *token,
                  const char *body, const char *const *headers);
/* As test_http with LEN bytes of BODY of type CTYPE. */
void test_http_bytes(struct test_http *out, const struct test_server *s,
                     const char *method, const char *path, const char *token,
                     const void *body, size_t len, const char *ctype,
                     const char *const *headers);
void test_http_free(struct test_http *h);
/* The value of header NAME in H (new), or NULL. */
char *test_http_header(const struct test_http *h, const char *name);

/* The events of run ID: GET /v1/runs/ID/events with Last-Event-ID AFTER
 * (-1: none), read until the stream ends, MAX events came (0: no limit) or
 * TIMEOUT_MS passed. An array of {"id", "event", "data" (parsed)} (new);
 * *ENDED says whether the server ended the stream. */
json_t *test_sse(const struct test_server *s, const char *token, const char *id,
                 long after, size_t max, long timeout_ms, bool *ended);

/* Polls GET /v1/runs/ID until its status is STATUS (or TIMEOUT_MS passes);
 * the run's JSON (new). */
json_t *test_server_wait(const struct test_server *s, const char *id,
                         const char *status, long timeout_ms);
/* POSTs a run of AGENT (JSON text) with INPUT; its id (new). */
char *test_server_submit(const struct test_server *s, const char *agent,
                         const char *input);

#endif
