/* The backend interface: what sbx asks of a place that runs sandboxes
 * (backends/<name>/ implement struct backend; backends/registry.c lists
 * them), and a sandbox session as the controller sees it: a connected
 * sandboxd client, the workspace root, the environment for commands, and
 * the backend that created it. Nothing here names a particular backend. */
#ifndef SBX_BACKEND_H
#define SBX_BACKEND_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/client.h"
#include "shared/errors.h"

struct backend;

/* A backend's own option, as the agent file's run_config, the CLI and the
 * API give it. Each backend lists its options in a table (struct backend's
 * options); the CLI makes its flags from the tables and turns a flag's text
 * into the option's JSON value by TYPE, and the backend's options_parse
 * checks the JSON and makes its options of it. */
enum backend_option_type {
  BACKEND_OPTION_STRING,  /* a string */
  BACKEND_OPTION_INTEGER, /* an integer; a flag's text in decimal */
  BACKEND_OPTION_NUMBER,  /* a number */
  BACKEND_OPTION_BOOLEAN, /* true or false; a flag takes no value: true */
  BACKEND_OPTION_JSON,    /* an array or an object; a flag only with
                             flag_element */
  /* An object of strings; its flag is repeatable, each NAME=VALUE one
   * member, and together they are the option's value. */
  BACKEND_OPTION_STRING_MAP,
};

struct backend_option {
  const char *key;     /* in run_config and the API: "network_mode" */
  const char *flag;    /* the CLI's, without "--" ("network"), or NULL */
  const char *metavar; /* the flag's value in --help ("none", "IMG") */
  const char *help;    /* one line for --help */
  enum backend_option_type type;
  /* What a request to sbx serve may set, where the server's operator is
   * not the one asking: NULL any value; "" none (the option reaches the
   * server's host: its files, its engine, its processes); else the values
   * allowed, '|'-separated. */
  const char *api;
  /* For a BACKEND_OPTION_JSON option with a flag: one flag's TEXT as one
   * element of the option's array (*OUT new); the flag is repeatable and
   * its elements add up. -EINVAL with E's message. NULL: no flag. */
  int (*flag_element)(const char *text, json_t **out, struct sbx_error *e);
};

/* What a backend can do with a manifest beyond files and directories;
 * lifecycle.c refuses a manifest that asks for more. */
enum backend_feature {
  BACKEND_LOCAL_BIND = 1u << 0,       /* local_bind mounts */
  BACKEND_READ_ONLY_BIND = 1u << 1,   /* ...that commands cannot write */
  BACKEND_HOST_PATH_GRANTS = 1u << 2, /* grants with a host_path */
};

/* What every backend is created with. Pointers are borrowed for the call. */
struct backend_options {
  const char *sandboxd_path;  /* NULL: $SBX_SANDBOXD, next to sbx, or PATH */
  const char *workspace_base; /* NULL: $TMPDIR or /tmp */
  /* sbx's state directory (--state-dir; NULL: the default), where a
   * backend finds what it keeps across processes, such as sbx's CA. */
  const char *state_dir;
  const char *seccomp;       /* NULL: "default"; "no-network", "off" */
  unsigned ready_timeout_ms; /* 0: 10000 */
  /* How long the connection to sandboxd may stay down before a waiting
   * call fails with the sandbox counted as dead (shared/peer.h); 0: the
   * recorded value when attaching, else SBX_PEER_HEARTBEAT_MS. Recorded
   * with a sandbox, so later commands use it too. */
  unsigned heartbeat_ms;
  const uint16_t *ports; /* exposed ports, reachable from the host */
  size_t nports;
  /* The backend's own options, as its options_parse made them, or NULL
   * for its defaults. */
  const void *own;
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

/* What a sandbox is created with beyond the options (lifecycle.h fills
 * it): extra path grants, local bind mounts, and for a developer-owned
 * sandbox where its sandboxd keeps its token and log, so that it outlives
 * the process that created it. Pointers are borrowed for the call. */
struct sandbox_grant {
  const char *path; /* absolute; on the local backend a host directory */
  bool read_only;
};

struct sandbox_bind {
  const char *path;   /* relative to the root */
  const char *source; /* absolute host directory */
  bool read_only;     /* with BACKEND_READ_ONLY_BIND */
};

/* A label the operator gave a sandbox (sbx sandbox create --label): not
 * "sbx" nor "sbx.*", which are sbx's own. */
struct sandbox_label {
  const char *key, *value;
};

struct sandbox_spec {
  const char *root; /* the manifest's root, where commands see the
                     * workspace (NULL: the backend's default) */
  const struct sandbox_grant *grants;
  size_t ngrants;
  const struct sandbox_bind *binds;
  size_t nbinds;
  bool detached;          /* developer-owned: outlives this process */
  const char *token_path; /* detached: token file to write, 0600 */
  const char *log_path;   /* detached: sandboxd's output */
  /* The operator's labels; a backend that can label what it makes (a
   * container) puts them on it beside its own. */
  const struct sandbox_label *labels;
  size_t nlabels;
  /* Its sandboxd stops by itself (processes killed, sandboxd gone, the
   * sandbox stopped) at this Unix time, and after this many seconds
   * without a request (sandboxd's --expires-at and --idle-timeout), also
   * after a start; 0: never. A backend that cannot refuses them. */
  int64_t expires_at;
  unsigned idle_timeout_s;
};

struct backend {
  const char *name;
  /* Its own options, ended by an entry without a key (NULL: none), and the
   * manifest features it has. */
  const struct backend_option *options;
  unsigned features; /* enum backend_feature */
  /* Makes *OUT (new; free with options_free) of OBJ, the backend's options
   * as a JSON object that backend_options_check has passed (known keys of
   * the right types), checking the values. Errors name the option (after
   * "WHERE: " when WHERE is given). Called through backend_options_parse;
   * NULL when the backend has no options. */
  int (*options_parse)(json_t *obj, const char *where, void **out,
                       struct sbx_error *e);
  void (*options_free)(void *own);
  /* Creates a fresh, empty sandbox with SPEC's grants and bind mounts (SPEC
   * may be NULL: none) and connects to its sandboxd. Refuses what of SPEC
   * it cannot do. */
  int (*create)(const struct backend_options *o,
                const struct sandbox_spec *spec, struct sandbox **out,
                struct sbx_error *e);
  /* Shuts sandboxd down, kills its processes and removes what the session
   * owns. Idempotent; frees S. */
  int (*close)(struct sandbox *s, struct sbx_error *e);
  /* Adds what another process needs to attach to OBJ; no secrets. */
  int (*save)(const struct sandbox *s, json_t *obj);
  /* Adds to a session state (sbx sandbox save) the backend's fields the
   * SDK's session state has, from SAVED (what save() wrote); may be NULL. */
  int (*session_fields)(json_t *saved, json_t *state);
  /* Rebuilds a sandbox from save()'s fields; connected when it runs. */
  int (*attach)(const struct backend_options *o, json_t *obj,
                struct sandbox **out, struct sbx_error *e);
  /* Frees the controller side only; the sandbox runs on. Frees S. */
  void (*detach)(struct sandbox *s);
  /* Kills its processes and stops sandboxd, keeping the workspace. */
  int (*stop)(struct sandbox *s, struct sbx_error *e);
  /* Starts a stopped sandbox again and connects; no-op when running. NULL
   * when the backend cannot. */
  int (*start)(struct sandbox *s, struct sbx_error *e);
  /* Whether its sandboxd is alive. */
  bool (*running)(const struct sandbox *s);
  /* Where exposed PORT is reachable from the host. */
  int (*resolve_port)(const struct sandbox *s, unsigned port, char *host,
                      size_t hostsz, unsigned *host_port, struct sbx_error *e);
};

/* Checks OBJ against B's option table: a JSON object whose every key is one
 * of B's options, each of its type. -EINVAL with a message naming the key
 * ("WHERE.KEY", or "KEY" when WHERE is NULL); OBJ NULL is no options. */
/* Refuses in OBJ (a request's options) what the options' api rules do
 * not allow, naming WHERE and the option: -EPERM with E. */
/* Sets E to "WHERE.KEY: MESSAGE" ("KEY: MESSAGE" when WHERE is NULL), an
 * invalid option value, and returns -EINVAL: how every backend's
 * options_parse names what it refuses. */
int backend_option_bad(struct sbx_error *e, const char *where, const char *key,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

int backend_options_check_api(const struct backend *b, json_t *obj,
                              const char *where, struct sbx_error *e);
int backend_options_check(const struct backend *b, json_t *obj,
                          const char *where, struct sbx_error *e);

/* The JSON value of option OPT given as TEXT on the command line (a
 * string, a decimal integer, a number; a boolean flag has no text: true).
 * *OUT is new. -EINVAL when TEXT is not of OPT's type. */
int backend_option_value(const struct backend_option *opt, const char *text,
                         json_t **out, struct sbx_error *e);

/* The JSON value of option OPT given as VALUE in `-o KEY=VALUE` (the
 * generic flag that sets any option): the text itself for a string;
 * "true" or "false" for a boolean (NULL: true); else VALUE read as JSON,
 * or as a string when it is not JSON, which backend_options_check then
 * refuses naming the key. *OUT is new. -EINVAL with E for an array or
 * object that is not valid JSON, or a boolean that is neither. */
int backend_option_text_value(const struct backend_option *opt,
                              const char *value, json_t **out,
                              struct sbx_error *e);

/* The option of B whose key is KEY, or NULL. */
const struct backend_option *backend_option_find(const struct backend *b,
                                                 const char *key);

/* Parses OBJ (NULL: none) into B's own options: *OWN is new (NULL for a
 * backend without options, which then refuses every key); free it with
 * backend_options_free. */
int backend_options_parse(const struct backend *b, json_t *obj,
                          const char *where, void **own, struct sbx_error *e);
void backend_options_free(const struct backend *b, void *own);

/* The heartbeat a backend's client uses when it attaches: BO's when given
 * (BO may be NULL), else the one SAVED (what the backend's save() wrote)
 * records, else 0 (SBX_PEER_HEARTBEAT_MS). */
unsigned backend_heartbeat(const struct backend_options *bo, json_t *saved);
/* Records HEARTBEAT_MS in SAVED, save()'s object; 0 records nothing. */
int backend_heartbeat_save(unsigned heartbeat_ms, json_t *saved);

/* Adds NAME=VALUE to the sandbox's command environment (replacing). */
int sandbox_setenv(struct sandbox *s, const char *name, const char *value);

/* Frees the controller-side parts of S (client, strings); for backends. */
void sandbox_free(struct sandbox *s);

/* Locates the sandboxd binary: O's path, $SBX_SANDBOXD, sandboxd-static
 * or sandboxd in the directory of the running sbx, then PATH. *OUT is
 * new. */
int sandbox_find_sandboxd(const struct backend_options *o, char **out,
                          struct sbx_error *e);

/* Removes PATH recursively without following symlinks. */
int sandbox_rm_rf(const char *path);

#endif
