/* Runs the built sbx binary for end-to-end tests and captures its output. */
#ifndef SBX_TEST_SBXRUN_H
#define SBX_TEST_SBXRUN_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/types.h>

struct sbx_run_out {
  int status;  /* exit code, or 128+signal */
  char *out;   /* stdout (new) */
  char *err;   /* stderr (new) */
  double secs; /* wall time */
};

/* Runs "sbx ARGV..." (NULL-terminated, without argv[0]) with
 * OPENAI_BASE_URL=BASE_URL (when not NULL) and OPENAI_API_KEY=test-key in
 * the environment; waits at most 120 s. */
void sbx_run(struct sbx_run_out *r, const char *base_url,
             const char *const *argv);
void sbx_run_free(struct sbx_run_out *r);
/* Runs "sbx sandbox --state-dir STATE_DIR ARGS..." (no model server). */
void sbx_sandbox_run(struct sbx_run_out *r, const char *state_dir,
                     const char *const *args);
/* As sbx_sandbox_run, asserting success: the first line printed (new),
 * e.g. the id from create or resume. */
char *sbx_sandbox_line(const char *state_dir, const char *const *args);
/* Removes every sandbox recorded in STATE_DIR (sbx sandbox rm --force). */
void sbx_sandbox_remove_all(const char *state_dir);
/* Starts "sbx ARGV..." against BASE_URL (as sbx_run) without waiting;
 * its stderr goes to ERR_PATH (NULL: /dev/null). With FSIZE, no file it
 * writes may grow past FSIZE bytes (EFBIG, not SIGXFSZ). Returns its pid. */
pid_t sbx_spawn(const char *base_url, const char *err_path, rlim_t fsize,
                const char *const *argv);
/* The id of the newest run of the state store in STATE_DIR
 * (sqlite:STATE_DIR/sbx.db) that has a run state to resume (new), or
 * NULL: a completed run's kept conversation does not count. */
char *test_run_state(const char *state_dir);
/* Whether the run ID of that store has a run state. */
bool test_run_has_state(const char *state_dir, const char *id);
/* The run ID's status in that store (new), or NULL without the run. */
char *test_run_status(const char *state_dir, const char *id);
/* The run ID's state in that store, parsed (new; asserted). */
json_t *test_run_state_json(const char *state_dir, const char *id);
/* Runs SQL on that store's SQLite database, made with its schema first
 * when missing (asserted). */
void test_store_exec(const char *state_dir, const char *sql);
/* The run ID's journal in that store (new, "" when empty). */
char *test_journal_read(const char *state_dir, const char *id);
/* Replaces the run ID's journal with TEXT. */
void test_journal_write(const char *state_dir, const char *id,
                        const char *text);
/* Path of the built sbx. */
const char *test_sbx_path(void);
/* Removes the tree at PATH, never following a symbolic link; 0 (also when
 * PATH does not exist) or a negative errno. */
int test_rm_rf(const char *path);
/* Writes TEXT to DIR/NAME (DIR must exist); returns the path (static
 * buffer reused by the next call). */
const char *test_write_file(const char *dir, const char *name,
                            const char *text);

#endif
