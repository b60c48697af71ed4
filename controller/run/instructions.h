/* System prompt assembly, in the SDK's order, joined with blank lines:
 * base instructions (the agent's base_instructions or sbx's default,
 * trimmed), "# Agent instructions" (as written), "# Sandbox capability
 * instructions" (the shell's and memory's fragments in the order of the
 * agent's capabilities), the remote
 * mount policy (only with mounts), and "# Filesystem" with the manifest
 * tree (depth 3, at most 120 lines and 12000 characters). */
#ifndef SBX_INSTRUCTIONS_H
#define SBX_INSTRUCTIONS_H

#include <stdbool.h>

#include "controller/config/manifest.h"

/* sbx's default sandbox prompt. */
extern const char instructions_default_base[];
/* The shell capability's fragment. */
extern const char instructions_shell_fragment[];

#define INSTRUCTIONS_MAX_FRAGMENTS 8

struct instructions_input {
  const char *base;  /* NULL: the default */
  const char *agent; /* NULL or "": no agent section */
  /* The capabilities' fragments, in the agent's capability order (the
   * shell's, the skills', the memory's); none: no capability section. */
  const char *fragments[INSTRUCTIONS_MAX_FRAGMENTS];
  size_t nfragments;
  const struct manifest *manifest; /* may be NULL */
  const char *root;                /* the workspace root commands see */
  const char *cwd;                 /* workspace-relative run cwd, or NULL */
};

/* New string. */
char *instructions_build(const struct instructions_input *in);

#endif
