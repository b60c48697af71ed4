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
/* The server's message for a failed call, or a stand-in. */
const char *remote_message(json_t *body, long status);
/* Reports a status other than WANT (WHAT names the command): true when it
 * was WANT. */
bool remote_expect(json_t *body, long status, long want, const char *what);
/* Prints the usage line TEXT; returns 2. */
int remote_usage(const char *text);

/* sbx --server URL sandbox create|ls|info|rm|exec. */
int remote_sandbox(struct remote *rm, int argc, char **argv);

#endif
