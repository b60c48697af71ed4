/* Private to controller/cli/: the commands cli.c dispatches to, and what
 * the `sbx sandbox` subcommands (sandbox*.c) share. Exit codes follow
 * cli.h: 0 done, 1 failed, 2 usage or configuration error. */
#ifndef SBX_CLI_INTERNAL_H
#define SBX_CLI_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "controller/cli/cli.h"
#include "controller/run/runner.h"
#include "controller/runs/runs.h"
#include "controller/sandbox/lifecycle.h"
#include "shared/errors.h"

/* How long sandboxd holds an attached exec's output for its reader (the
 * command waits on a full pipe rather than lose bytes) when the reader
 * stops reading, as when sbx was killed: then the retention rules. */
#define CLI_EXEC_HOLD_S 60

/* sbx run (run.c), sbx approve, sbx reject and sbx runs on the state
 * store (runs.c) and sbx sandbox (sandbox.c). ARGV[0] is the command's
 * name. */
int cli_run(int argc, char **argv);
int cli_decide(int argc, char **argv);
int cli_runs(int argc, char **argv);
int cli_sandbox_main(int argc, char **argv);

/* The state store's URL: DB, else sqlite:STATE-DIR/sbx.db with the state
 * dir (STATE_DIR, else the default) made when missing, into SDIR and URL.
 * 0, or -1 after saying why after PROG. */
int cli_db_url(const char *prog, const char *db, const char *state_dir,
               char *sdir, size_t sn, char *url, size_t un);
/* cli_db_url, and the store opened into *OUT (new). */
int cli_store_open(const char *prog, const char *db, const char *state_dir,
                   char *sdir, size_t sn, struct store **out);
/* The table of runs (runs_view objects in DATA) on stdout. */
void cli_print_runs(json_t *data);

/* sbx run's run in the state store (run_store.c). */
struct cli_run_store {
  struct store *store;
  char id[RUNS_ID_MAX]; /* "" until the run has a row */
  uint64_t last_seq;    /* the resumed run's last event */
  json_t *result;       /* the row's result so far */
  struct runs_rec rec;
  /* --continue: the completed run's conversation (new), its last response
   * id (new, or NULL) and its row's request (new). */
  json_t *history;
  char *response_id;
  json_t *prev_request;
  volatile bool cancel; /* asked in the store: the runner stops */
  bool watching, stop;
  char *sdir;  /* the state directory (new) */
  int lock_fd; /* runs/ID.lock of the state dir, flocked while locked */
  bool locked;
  char lock_path[4200];
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};
/* Opens the store (DB, else in STATE_DIR) and ends the failed runs kept
 * there whose keep time passed (cli_runs_sweep); with RESUME, checks that
 * it is a run of sbx run that may go on and reads what started it (new);
 * with CONT, checks that it is a completed run of sbx run and reads its
 * agent file (new) and conversation. -1 when the run goes on, else the
 * exit code after saying why. */
int cli_run_store_open(struct cli_run_store *rs, const char *db,
                       const char *state_dir, const char *resume,
                       const char *cont, char **agent_path, char **prompt);
/* Gives the run its row (a new one, or the resumed one running again)
 * and points O's store, id, events and cancel at it. */
int cli_run_store_start(struct cli_run_store *rs, struct run_options *o,
                        struct sbx_error *e);
/* Records how the run ended (runs_finish); a failed run kept for a retry
 * until KEPT_UNTIL_MS (unix ms; 0: not kept) says so in its result. */
void cli_run_store_finish(struct cli_run_store *rs, int r,
                          const struct run_result *res,
                          const struct sbx_error *re, int64_t kept_until_ms);

/* What sbx run keeps of its ended runs (run_kept.c). */
/* Parses a keep time: "0", or a positive number with s, m, h or d (at
 * most a year) into *MS. -EINVAL, -ERANGE. */
int cli_parse_keep(const char *s, int64_t *ms);
/* Ends the failed runs of sbx run in S kept for a retry whose keep time
 * has passed, or that were asked to stop: their sandboxes (recorded in
 * STATE_DIR) closed, their state removed, "retry_expired_ms" in their
 * result. Failures are warned about; the next sweep tries again. */
void cli_runs_sweep(struct store *s, const char *state_dir);
void cli_run_store_close(struct cli_run_store *rs);
/* The commands as clients of the server at SERVER (remote.c). */
int cli_remote(const char *server, int argc, char **argv);
/* sbx serve and sbx token (serve.c). */
int cli_serve(int argc, char **argv);
int cli_token(int argc, char **argv);
/* sbx ca (ca.c). */
int cli_ca(int argc, char **argv);

/* What every `sbx sandbox` subcommand takes. */
struct cli_common {
  const char *state_dir;
  bool json;
  const char *prog; /* "sbx sandbox create" */
};

/* The subcommands (ARGV[0] is the subcommand's name). */
int cli_sandbox_create(struct cli_common *c, int argc, char **argv);
int cli_sandbox_ls(struct cli_common *c, int argc, char **argv);
int cli_sandbox_info(struct cli_common *c, int argc, char **argv);
int cli_sandbox_port(struct cli_common *c, int argc, char **argv);
int cli_sandbox_exec(struct cli_common *c, int argc, char **argv);
int cli_sandbox_shell(struct cli_common *c, int argc, char **argv);
int cli_sandbox_cp(struct cli_common *c, int argc, char **argv);
int cli_sandbox_apply_patch(struct cli_common *c, int argc, char **argv);
int cli_sandbox_start(struct cli_common *c, int argc, char **argv);
int cli_sandbox_stop(struct cli_common *c, int argc, char **argv);
int cli_sandbox_rm(struct cli_common *c, int argc, char **argv);
int cli_sandbox_save(struct cli_common *c, int argc, char **argv);
int cli_sandbox_resume(struct cli_common *c, int argc, char **argv);
int cli_sandbox_ps(struct cli_common *c, int argc, char **argv);
int cli_sandbox_kill(struct cli_common *c, int argc, char **argv);
int cli_sandbox_logs(struct cli_common *c, int argc, char **argv);
int cli_sandbox_stats(struct cli_common *c, int argc, char **argv);
int cli_sandbox_prune(struct cli_common *c, int argc, char **argv);

/* The records of the state directory that pass FS, as shown (status and
 * time left): *OUT is a new array. -1, or the exit status for SUB after
 * saying why not (sandbox_inspect.c). */
struct meta_filters;
int cli_sandbox_select(struct cli_common *c, const char *sub,
                       const struct meta_filters *fs, json_t **out);
/* Takes --filter SPEC into FS: -1, or the exit status (2) after saying
 * why not. */
int cli_take_filter(struct cli_common *c, const char *sub,
                    struct meta_filters *fs, const char *spec);

/* Prints "PROG: MESSAGE" and where to read the subcommand SUB's usage on
 * stderr; returns 2. */
int cli_usage_error(const struct cli_common *c, const char *sub,
                    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Under --json, each of these prints {"error": {"code", "message"}} on
 * stdout instead (code "usage" for usage errors, else the lowercase name of
 * the sbx_code: "not_found", "unavailable", ...). */
/* Prints E's message (else R's strerror) after PROG on stderr; returns 1. */
int cli_fail(const struct cli_common *c, const struct sbx_error *e, int r);
/* As cli_fail, returning STATUS. */
int cli_fail_status(const struct cli_common *c, const struct sbx_error *e,
                    int r, int status);
/* Prints the message after PROG on stderr as a failure of class CODE;
 * returns STATUS. */
int cli_error(const struct cli_common *c, enum sbx_code code, int status,
              const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Prints J (borrowed) indented, keys sorted, on stdout: 0, or 1 after
 * saying so when J is NULL or cannot be printed (out of memory). */
int cli_print_json(const struct cli_common *c, json_t *j);
/* Lets go of an attached sandbox (the sandbox lives on) and its record;
 * CODE, or 1 when stdout could not be written out. SB may be NULL. */
int cli_detach_done(struct sandbox *sb, struct lifecycle_record *rec, int code);
/* Reads the JSON file PATH (at most 64 MiB) into *OUT (new). */
int cli_load_json_file(const char *path, json_t **out, struct sbx_error *e);
/* Appends all of stdin to B (whose maximum bounds it): 0, -E2BIG past
 * the maximum, or the negative errno of a failed read. */
struct sbx_buf;
int cli_read_stdin(struct sbx_buf *b);
/* The directory part of PATH ("." for none) into OUT. */
void cli_dir_of(const char *path, char *out, size_t n);
/* Attaches to the recorded sandbox ID for SUB: 0, or the exit status after
 * saying why not (2 for a usage error such as an unknown ID). */
int cli_attach_for(struct cli_common *c, const char *sub, const char *id,
                   struct lifecycle_record *rec, struct sandbox **sb);
/* The options every subcommand takes (--state-dir, --json, --help; getopt
 * codes 'S', 'J' and 'h') and the answer to an unknown one: -1 when parsing
 * goes on, else the exit status (0 after --help). */
int cli_common_option(struct cli_common *c, const char *sub, int ch);
/* Parses only the common options (and --force when FORCE is given). */
int cli_parse_common_only(struct cli_common *c, const char *sub, int argc,
                          char **argv, bool *force);
/* Parses the common options and exactly NARGS positional arguments (NARGS
 * < 0: at least one). */
int cli_parse_ids(struct cli_common *c, const char *sub, int argc, char **argv,
                  int nargs, bool *force);

#endif
