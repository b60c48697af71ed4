/* Running the daemon: options, setup, the serve loop and teardown. Kept out
 * of main.c so tests and fuzzers can build a daemon context too. */
#ifndef SANDBOXD_DAEMON_H
#define SANDBOXD_DAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include "sandboxd/rpc/sandboxd.h"
#include "shared/errors.h"

#define DAEMON_MAX_GRANTS 64

struct daemon_options {
  const char *listen;
  const char *root;
  const char *token_file;
  int token_fd; /* -1: none */
  const char *tls_cert, *tls_key, *tls_ca;
  bool insecure;
  int ready_fd;                          /* -1: none */
  const char *grants[DAEMON_MAX_GRANTS]; /* "PATH" or "PATH:ro" */
  size_t ngrants;
  enum sandboxd_seccomp seccomp;
  struct sandboxd_limits limits;
  /* Connection limits (server.h's server_config). */
  uint32_t max_connections;
  uint32_t max_unauthenticated;
  unsigned handshake_timeout_ms;
  /* Isolated (isolate.h): commands get a reduced capability set. */
  bool isolated;
  int listen_dir_fd; /* -1, or an fd to close once listening */
  int gate_fd;       /* -1, or readable once the limits and network are set */
  /* Stopping by itself: at this Unix time, or after this long without
   * activity (0: never). */
  int64_t expires_at;
  unsigned idle_timeout_s;
  /* The limits isolation set, reported by Stats (0: none). */
  uint64_t memory_limit, pids_limit;
};

void daemon_options_init(struct daemon_options *o);

/* Reads a token from FD (closing it) or FILE: at most 4096 bytes, trailing
 * whitespace stripped, at least 16 bytes left. *OUT is new; the caller
 * wipes and frees it. */
int daemon_read_token(const char *file, int fd, char **out, size_t *len,
                      struct sbx_error *e);

/* Opens the root and the grants into D (d->root, root_fd, grants). */
int daemon_open_roots(struct sandboxd *d, const char *root,
                      const char *const *grants, size_t ngrants,
                      struct sbx_error *e);
/* Closes and frees what daemon_open_roots opened. */
void daemon_close_roots(struct sandboxd *d);

/* Sets up everything, serves until Shutdown, SIGTERM, SIGINT, the time
 * to live's end or the idle timeout, tears down. A time to live that has
 * already ended is refused (SBX_CONFLICT). Returns 0 or a negative errno with E
 * filled. */
int daemon_run(const struct daemon_options *o, struct sbx_error *e);

#endif
