/* Which tool calls need a person's approval, from the agent file's
 * "approvals" object: per tool "always", "never", or (exec_command only) a
 * list of command prefixes that pass without asking. */
#ifndef SBX_APPROVALS_H
#define SBX_APPROVALS_H

#include <stdbool.h>

#include "controller/config/agent.h"

/* True when the call of TOOL with the JSON ARGS needs approval under A's
 * rules. A tool the agent names nowhere needs none. A prefix list passes a
 * command only when it starts with one of the prefixes at a word boundary
 * and chains nothing else: no ; & | ` $( < > or newline (so "ls; rm -rf /"
 * does not pass as "ls"). */
bool approvals_needed(const struct agent *a, const char *tool,
                      const char *args);

/* The text the model sees for a rejected call. New string. */
char *approvals_rejection_text(const char *reason);

#endif
