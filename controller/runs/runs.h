/* A run's row in the state store, kept the same way by `sbx run` and by
 * `sbx serve`: its events recorded as the runner emits them (with the
 * approvals it asks for), its end recorded, a person's decisions and
 * cancels on it, and the view that the API and `sbx runs` show.
 *
 * Who executes a run: a run submitted to a server has the token's name as
 * its owner and is executed by whichever server leases it; a run of
 * `sbx run` has the owner "" and is executed by the sbx process that
 * started it, or continued by `sbx run --resume ID` (store_lease_claim
 * never hands it to a server).
 *
 * Thread-safety: a struct runs_rec may be fed events from any thread;
 * the other calls are thread-safe as the store is. Errors: 0 or a
 * negative errno with E saying why. */
#ifndef SBX_RUNS_H
#define SBX_RUNS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller/run/runner.h"
#include "controller/state/batcher.h"
#include "controller/state/store.h"
#include "shared/errors.h"

#define RUNS_ID_PREFIX "run_"
#define RUNS_ID_MAX 40 /* "run_" and 32 hex digits, with room */
#define RUNS_CLI_OWNER ""
#define RUNS_REASON_MAX 4096

#define RUNS_QUEUE_MAX 4096 /* events waiting for the store, at most */
#define RUNS_LINGER_MS 2    /* how long a batch gathers events */

/* One executing run's record: the runner's events go to the store. The
 * sink only queues them; a writer thread of the record records what has
 * queued up in one statement at a time, in order, so that the turn loop
 * never waits for the store (unless RUNS_QUEUE_MAX are waiting). */
struct runs_rec {
  struct store *store; /* borrowed */
  char id[RUNS_ID_MAX];
  struct batcher w; /* its lock guards PENDING and QUEUE */
  json_t *pending;  /* approvals asked for: [{call_id, tool, arguments}] */
  json_t *queue;    /* events to record: [{seq, type, data}] */
  /* Called after each batch is recorded (sbx serve wakes its streams). */
  void (*recorded)(void *arg);
  void *recorded_arg;
};

/* Whether ID has the shape of a run id ("run_" and 32 hex digits). */
bool runs_id_valid(const char *id);
/* Makes a new run id into ID. */
int runs_new_id(char id[RUNS_ID_MAX]);

/* Sets REC up for the run ID of S, its writer started. */
int runs_rec_init(struct runs_rec *rec, struct store *s, const char *id);
/* Records what is queued, then stops the writer and frees. */
void runs_rec_clear(struct runs_rec *rec);
/* Returns once every event queued so far is recorded. */
void runs_rec_flush(struct runs_rec *rec);
/* The runner's event sink (run_options.event_sink) for ARG, a runs_rec. */
void runs_sink(void *arg, uint64_t seq, const char *type, const char *line,
               size_t len);
/* Records the end of the run the runner returned R for (with RES and its
 * error RE), after its events: completed, waiting_approval, cancelled,
 * failed, or running again for an interrupted run (-EINTR); RESULT
 * (borrowed, updated) is the row's result so far. Only while the run is
 * running. */
int runs_finish(struct runs_rec *rec, json_t *result, int r,
                const struct run_result *res, const struct sbx_error *re,
                struct sbx_error *e);

/* A person's decision on CALL_ID, which the run ID waits for; the run is
 * queued again (*QUEUED) once none of its calls waits. -ENOENT no such
 * run, -ESRCH the call is not waiting (E names the run's status), -EEXIST
 * the call is decided already. */
int runs_decide(struct store *s, const char *id, const char *call_id,
                bool approve, const char *reason, bool *queued,
                struct sbx_error *e);
/* Asks the run ID to stop: one that waits goes back to the queue marked
 * so, and stops when it is taken up. -ENOENT, -EALREADY (completed or
 * cancelled already). */
int runs_cancel(struct store *s, const char *id, struct sbx_error *e);

/* A run's row as the API and `sbx runs show` show it (new). */
json_t *runs_view(json_t *row);
/* Whether the row is a run of `sbx run`. */
bool runs_of_cli(json_t *row);

#endif
