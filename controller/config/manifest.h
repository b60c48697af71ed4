/* Manifests: a sandbox's starting workspace (JSON, the Python SDK's
 * snake_case names). Parsed strictly: unknown keys and wrong types are
 * errors that name the key and the entry.
 *
 *   version            1
 *   root               absolute POSIX path, default "/workspace"
 *   entries            {relative path: entry}
 *   environment        {NAME: "value" | {value, description?, ephemeral?}}
 *   users              ["name" | {"name": ...}]
 *   groups             [{"name": ..., "users"?: ["name" | {"name"}]}]
 *   extra_path_grants  [{"path": absolute, "read_only"?, "description"?,
 *                        "host_path"?}]
 *
 * Entries, each with description?, ephemeral?, group?, permissions?:
 *   file        content (text) or content_base64
 *   dir         children?: {name: entry}
 *   local_file  src (a host file under the base directory or a grant),
 *               sha256? (the content's expected digest, hex)
 *   local_dir   src (a host directory, likewise)
 *   git_repo    repo ("owner/name" on host, default github.com, or a URL),
 *               or url (any git remote, file:// included); ref?; subpath?
 *   mount       source (absolute host path), mount_path? (only the
 *               entry's own path: the key is where it is mounted),
 *               read_only (default true), mount_strategy "local_bind" (or
 *               {"type": "local_bind"}); no group, permissions or provider
 *               (refused: a bind mount keeps its source's owner and mode);
 *               "local_bind" is the same entry
 *   s3_mount, gcs_mount, r2_mount, azure_blob_mount, box_mount,
 *   s3_files_mount: cloud mounts, checked here, carried out by no backend
 *               yet (lifecycle_check_manifest refuses them).
 *
 * permissions: {owner, group, other: 0..7, directory?, sticky?} (missing
 * bits: owner 7, group 0, other 0), a mode string like "rwxr-x---" or
 * "drwxr-xr-x", or an integer mode. Absent: 0755, the SDK's default.
 *
 * Paths (entry keys, children names) are relative POSIX paths; absolute
 * paths, "..", empty paths, "\" and Windows drives are refused with the
 * entry's name in the message.
 *
 * A parsed manifest is read-only and may be shared between threads. */
#ifndef SBX_MANIFEST_H
#define SBX_MANIFEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "shared/errors.h"

#define MANIFEST_MAX_ENTRIES 100000
#define MANIFEST_MAX_LIST 256 /* users, groups, members, grants, env */

enum manifest_entry_type {
  MANIFEST_FILE = 1,
  MANIFEST_DIR,
  MANIFEST_LOCAL_FILE,
  MANIFEST_LOCAL_DIR,
  MANIFEST_GIT_REPO,
  MANIFEST_MOUNT,       /* a local bind mount */
  MANIFEST_CLOUD_MOUNT, /* s3_mount, ...: type_name says which */
};

struct manifest_entry {
  char *path; /* normalized, relative to the root */
  enum manifest_entry_type type;
  char *type_name; /* as written: "file", "s3_mount", ... */
  char *description;
  bool ephemeral;
  char *group; /* chown group (a group or user name), or NULL */
  int mode;    /* permission bits, -1 for the SDK default (0755) */
  /* file */
  char *content;
  size_t content_len;
  /* local_file, local_dir */
  char *src;
  char *sha256; /* lowercase hex, or NULL */
  /* git_repo */
  char *url; /* resolved remote URL */
  char *ref;
  char *subpath;
  /* mount */
  char *source;
  bool read_only;
  /* the entry object as written, for the persisted form (owned) */
  json_t *json;
};

struct manifest_env {
  char *name;
  char *value;
  char *description;
  bool ephemeral;
};

struct manifest_group {
  char *name;
  char **users;
  size_t nusers;
};

struct manifest_grant {
  char *path; /* absolute, normalized, not "/" */
  char *host_path;
  bool read_only;
  char *description;
};

struct manifest {
  char *root; /* default "/workspace" */
  int version;
  struct manifest_entry *entries; /* flattened: parents before children */
  size_t nentries;
  struct manifest_env *env;
  size_t nenv;
  char **users;
  size_t nusers;
  struct manifest_group *groups;
  size_t ngroups;
  struct manifest_grant *grants;
  size_t ngrants;
};

/* Parses J (borrowed). WHERE names the source in messages, e.g.
 * "agents/a.json: default_manifest". *OUT is new. */
int manifest_parse(json_t *j, const char *where, struct manifest **out,
                   struct sbx_error *e);
struct manifest *manifest_free(struct manifest *m);

/* Adds user NAME unless the manifest has it (the agent's run_as). */
int manifest_add_user(struct manifest *m, const char *name);

/* The persisted form: what a second process needs, without ephemeral
 * entries, ephemeral environment values or grant host paths. New. */
json_t *manifest_to_json(const struct manifest *m);

/* Checks that NEXT only adds compatible entries to LIVE (the SDK's rule for
 * a live sandbox): same root, environment, users, groups and grants; no
 * entry removed or retyped; no mount added. On success *ADDED (new, may be
 * empty) lists the indices of NEXT's entries that LIVE lacks. The message
 * names the rule that was broken. */
int manifest_delta(const struct manifest *live, const struct manifest *next,
                   size_t **added, size_t *nadded, struct sbx_error *e);

/* The value of environment NAME, or NULL. */
const char *manifest_getenv(const struct manifest *m, const char *name);

/* The "# Filesystem" tree: first line ROOT, then entries depth-first,
 * siblings sorted, "<indent><name>[/] # <abs path>[ - <description>]",
 * at most DEPTH levels, MAX_LINES lines and MAX_CHARS characters, with the
 * SDK's truncation notice. New string. */
char *manifest_describe(const struct manifest *m, const char *root,
                        unsigned depth, unsigned max_lines, unsigned max_chars);

#endif
