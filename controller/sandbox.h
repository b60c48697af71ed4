/* A sandbox session as the controller sees it: a connected sandboxd client,
 * the workspace root, the environment for commands, and the backend that
 * created it. Backends (backends/<name>/) implement struct backend. */
#ifndef SBX_SANDBOX_H
#define SBX_SANDBOX_H

#include <stdbool.h>
#include <sys/types.h>

#include "client.h"
#include "err.h"

struct backend;

struct backend_options {
  const char *sandboxd_path;  /* NULL: $SBX_SANDBOXD, next to sbx, or PATH */
  const char *workspace_base; /* NULL: $TMPDIR or /tmp */
  const char *seccomp;        /* NULL: "default"; "no-network", "off" */
  unsigned ready_timeout_ms;  /* 0: 10000 */
};

struct sandbox {
  char session_id[37];       /* UUID */
  struct sbx_client *client; /* owned */
  char *root;                /* absolute workspace root as commands see it */
  const struct backend *backend;
  void *priv; /* the backend's */
  char **env; /* "NAME=value" for commands, NULL-terminated */
  size_t nenv;
};

struct backend {
  const char *name;
  /* Creates a fresh, empty sandbox and connects to its sandboxd. */
  int (*create)(const struct backend_options *o, struct sandbox **out,
                struct sbx_error *e);
  /* Shuts sandboxd down, kills its processes and removes what the session
   * owns. Idempotent; frees S. */
  int (*close)(struct sandbox *s, struct sbx_error *e);
};

extern const struct backend backend_local;

/* Looks a backend up by name ("local"); NULL when unknown. */
const struct backend *backend_find(const char *name);

/* Adds NAME=VALUE to the sandbox's command environment (replacing). */
int sandbox_setenv(struct sandbox *s, const char *name, const char *value);

/* Frees the controller-side parts of S (client, strings); for backends. */
void sandbox_free(struct sandbox *s);

/* Locates the sandboxd binary: O's path, $SBX_SANDBOXD, the directory of
 * the running sbx, then PATH. *OUT is new. */
int sandbox_find_sandboxd(const struct backend_options *o, char **out,
                          struct sbx_error *e);

/* Removes PATH recursively without following symlinks. */
int sandbox_rm_rf(const char *path);

#endif
