/* Manifests: a sandbox's starting workspace (JSON, the Python SDK's
 * snake_case names). Parsed strictly: unknown keys and wrong types are
 * errors that name the key and where it is.
 *
 * Entry types supported so far: "file" (content or content_base64) and
 * "dir" (children). Other SDK entry types are recognised and refused with
 * a message saying they are not supported yet. */
#ifndef SBX_MANIFEST_H
#define SBX_MANIFEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "sandbox.h"

enum manifest_entry_type {
  MANIFEST_FILE = 1,
  MANIFEST_DIR = 2,
};

struct manifest_entry {
  char *path; /* normalized, relative to the root */
  enum manifest_entry_type type;
  char *content; /* file bytes */
  size_t content_len;
  char *description;
  bool ephemeral;
  int mode; /* permission bits, -1 for the SDK default (0755) */
};

struct manifest {
  char *root; /* default "/workspace" */
  int version;
  struct manifest_entry *entries; /* flattened: parents before children */
  size_t nentries;
  char **env_names; /* environment, plain values */
  char **env_values;
  size_t nenv;
};

/* Parses J (borrowed). WHERE names the source in messages, e.g.
 * "agents/a.json: default_manifest". *OUT is new. */
int manifest_parse(json_t *j, const char *where, struct manifest **out,
                   struct sbx_error *e);
struct manifest *manifest_free(struct manifest *m);

/* Writes every entry into the sandbox through sandboxd, then sets the
 * environment. A failure names the entry. */
int manifest_materialize(const struct manifest *m, struct sandbox *sb,
                         struct sbx_error *e);

/* The "# Filesystem" tree: first line ROOT, then entries depth-first,
 * siblings sorted, "<indent><name>[/] # <abs path>[ - <description>]",
 * at most DEPTH levels, MAX_LINES lines and MAX_CHARS characters, with the
 * SDK's truncation notice. New string. */
char *manifest_describe(const struct manifest *m, const char *root,
                        unsigned depth, unsigned max_lines, unsigned max_chars);

#endif
