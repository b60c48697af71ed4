/* The memory capability in a run (the SDK's sandbox/memory): the summary
 * read into the instructions, and memory generated at the end of the run.
 *
 * Layout, relative to the workspace (the agent's layout): MEMORIES_DIR/
 * with SUMMARY_FILE (read into the instructions), MEMORY.md,
 * raw_memories/<rollout>.md, rollout_summaries/<rollout>_<slug>.md,
 * skills/, raw_memories.md, phase_two_selection.json; SESSIONS_DIR/
 * <rollout>.jsonl, one line per run. Every file is read and written
 * through sandboxd. The texts the model reads are the SDK's, word for
 * word (controller/run/memory_prompts/). */
#ifndef SBX_RUN_MEMORY_H
#define SBX_RUN_MEMORY_H

#include <stdbool.h>
#include <stddef.h>

#include "controller/backend/backend.h"
#include "controller/config/agent.h"
#include "shared/errors.h"

/* The SDK's limits. */
#define MEMORY_SUMMARY_MAX_BYTES 1000000
#define MEMORY_SUMMARY_MAX_TOKENS 15000
#define MEMORY_ROLLOUT_MAX_TOKENS 150000
#define MEMORY_TEXT_MAX_BYTES 1000000

/* The SDK's truncation by approximate tokens (4 bytes each): TEXT (LEN
 * bytes of UTF-8) kept whole when it fits, else its head and tail halves
 * of the budget around "...N tokens truncated...". New; NULL on OOM. */
char *memory_truncate_tokens(const char *text, size_t len, size_t max_tokens);

/* The "## Memory" fragment of the instructions for memory M, read from
 * SB: *OUT is new, or NULL when the summary is missing or blank (no
 * section, as in the SDK). CWD/ROOT: a run cwd makes the memory directory
 * absolute. A read that fails for another reason fails. */
int memory_read_fragment(struct sandbox *sb, const struct agent_memory *m,
                         const char *root, const char *cwd, char **out,
                         struct sbx_error *e);

/* Workspace files through sandboxd. memory_read: *OUT new (NUL-terminated,
 * *LEN bytes), NULL when the file is missing; at most MAX bytes read
 * (0: MEMORY_TEXT_MAX_BYTES without truncation, longer fails). */
int memory_read(struct sandbox *sb, const char *path, size_t max, char **out,
                size_t *len, struct sbx_error *e);
/* Replaces PATH with TEXT (LEN bytes), parents made; owned by OWNER (the
 * agent's run_as) unless NULL, so that the agent can edit it. */
int memory_write(struct sandbox *sb, const char *path, const char *text,
                 size_t len, const char *owner, struct sbx_error *e);
/* Makes the directory PATH (and its parents), owned by OWNER if given. */
int memory_mkdir(struct sandbox *sb, const char *path, const char *owner,
                 struct sbx_error *e);

/* TEXT with every FROM (not empty) replaced by TO. New; NULL on OOM. */
char *memory_replace_all(const char *text, const char *from, const char *to);

/* The SDK's templates, filled: {name} (or "{{ name }}") replaced by
 * values in order, each pair (name, value) of the NULL-ended list. New. */
char *memory_render(const char *tmpl, ...);

/* The embedded texts of memory_prompts/. */
extern const char sbx_memory_read_md[];
extern const char sbx_memory_live_update_md[];
extern const char sbx_memory_phase_one_md[];
extern const char sbx_memory_phase_one_user_md[];
extern const char sbx_memory_phase_two_md[];
extern const char sbx_memory_extra_md[];

/* The extra prompt section of EXTRA (NULL or blank: ""). New. */
char *memory_extra_section(const char *extra);

#endif
