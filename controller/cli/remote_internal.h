/* The commands as clients of sbx serve (remote.c, remote_sandbox.c). */
#ifndef SBX_CLI_REMOTE_INTERNAL_H
#define SBX_CLI_REMOTE_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#define URL_MAX 4096

struct http_client;

struct remote {
  const char *server; /* the base URL, without a trailing / */
  char auth[512];     /* "Authorization: Bearer TOKEN" or "" */
  struct http_client *http;
};

/* A JSON request to the server: 0 with the status and body (*OUT new, may
 * be NULL for a body that is not JSON), or -1 after saying why. */
int remote_call(struct remote *rm, const char *method, const char *path,
                json_t *body, long *status, json_t **out);
/* Sends REQ (its URL whole): 0 with the status and body as remote_call
 * gives them, or -1 after saying why after PROG. */
struct http_request;
int remote_send(struct remote *rm, const struct http_request *req,
                const char *prog, long *status, json_t **out);
/* The server's message for a failed call, or a stand-in. */
const char *remote_message(json_t *body, long status);
/* Reports a status other than WANT (WHAT names the command): true when it
 * was WANT. */
bool remote_expect(json_t *body, long status, long want, const char *what);
/* Prints the usage line TEXT; returns 2. */
int remote_usage(const char *text);

/* sbx --server URL sandbox create|ls|info|rm|exec|shell|cp. */
int remote_sandbox(struct remote *rm, int argc, char **argv);
/* Copies the output of exec X of sandbox SID to stdout and stderr by
 * offset as it comes, until it ended and both streams are drained: its
 * exit code (128 + the signal that killed it), or 1 after saying why. */
int remote_copy_all(struct remote *rm, const char *sid, const char *x);
/* Starts the exec BODY in SID and copies its output (remote_copy_all);
 * with FEED this process's stdin goes to the command's until its end, with
 * RAW on a terminal that is put in raw mode meanwhile. The exit code. */
int remote_attached(struct remote *rm, const char *sid, json_t *body, bool feed,
                    bool raw);
/* sbx --server URL sandbox shell [-w DIR] ID, and cp SRC DST. */
int remote_shell(struct remote *rm, int argc, char **argv);
int remote_cp(struct remote *rm, int argc, char **argv);
/* sbx --server URL sandbox apply-patch [--json] ID < PATCH. */
int remote_apply_patch(struct remote *rm, int argc, char **argv);

#endif
