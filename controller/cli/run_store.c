/* sbx run's run in the state store: a new row for it (owner "", so that
 * no server takes it; with --continue, recorded as continuing a completed
 * run whose conversation it reads), or the row of the run --resume
 * continues; its events recorded there as they happen; a cancel asked of
 * it (sbx runs cancel, or a server's API) noticed while it runs; its end
 * recorded, with until when a failed run is kept for a retry. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "controller/telemetry/events.h"
#include "shared/cleanup.h"
#include "shared/log.h"

#define WATCH_MS 1000 /* how often a cancel is looked for */

/* Reads the agent file and prompt the run ID's state was started with. */
static int read_started(struct store *s, const char *id, char **agent_path,
                        char **prompt, struct sbx_error *e) {
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = store_state_get(s, id, &text, &len, e);
  if (r == -ENOENT || (r == 0 && len == 0))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                         "run %s has no state to continue from (it failed "
                         "before its first step, or with --keep-failed 0)",
                         id);
  if (r < 0)
    return r;
  json_error_t je;
  _cleanup_json_ json_t *rs = json_loadb(text, len, 0, &je);
  const char *ap = json_string_value(json_object_get(rs, "agent_path"));
  const char *pr = json_string_value(json_object_get(rs, "prompt"));
  if (!ap || !pr)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the state of run %s is not one sbx can resume (%s)",
                         id, rs ? "no agent_path or prompt" : je.text);
  *agent_path = strdup(ap);
  *prompt = strdup(pr);
  return *agent_path && *prompt ? 0 : -ENOMEM;
}

/* A failed run is resumed only while it is kept (--keep-failed). */
static int check_kept(json_t *row, const char *id, struct sbx_error *e) {
  json_t *res = json_object_get(row, "result");
  json_t *until = json_object_get(res, "retry_until_ms");
  json_t *expired = json_object_get(res, "retry_expired_ms");
  if (!json_is_integer(expired) &&
      !(json_is_integer(until) && json_integer_value(until) <= store_now_ms()))
    return 0;
  char ts[32];
  events_format_timestamp(
      (uint64_t)json_integer_value(json_is_integer(expired) ? expired : until),
      ts);
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, ETIMEDOUT,
                       "run %s failed and was kept for a retry until %s; "
                       "that time has passed, so its sandboxes were closed "
                       "and its state removed: it cannot be resumed "
                       "(run it again, with a longer --keep-failed)",
                       id, ts);
}

/* The row (new) of run ID, which FLAG (--resume, --continue) names: an
 * error when ID is no run id or names no run of the store, or the run
 * is a server's, which sbx run goes on with only by WHAT. */
static int cli_run_row(struct cli_run_store *rs, const char *flag,
                       const char *id, const char *what, json_t **row,
                       struct sbx_error *e) {
  if (!runs_id_valid(id))
    return sbx_error_set(
        e, SBX_INVALID_ARGUMENT, EINVAL,
        "%s takes a run id (run_ and 32 hex digits, as sbx runs ls "
        "shows), not \"%s\"%s",
        flag, id,
        strchr(id, '/') || strstr(id, ".json")
            ? ": run states are kept in the state store, not in files"
            : "");
  int r = store_run_get(rs->store, id, row, e);
  if (r == -ENOENT)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                         "no run \"%s\" in the state store (sbx runs ls "
                         "lists them)",
                         id);
  if (r < 0)
    return r;
  if (!runs_of_cli(*row))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EPERM,
                         "run %s was submitted to a server%s", id, what);
  return 0;
}

/* Whether FD is still the file at PATH: the holder of a run's lock
 * removes the file when it is done, and a lock taken on a removed file
 * locks nothing. */
static bool still_there(int fd, const char *path) {
  struct stat a, b;
  return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

/* Takes run ID's lock, runs/ID.lock in the state directory: an flock
 * this process holds while it goes on with the run, so that two sbx never
 * run one run at once (a --resume of a run that is going on, or two
 * resumes). The holder's pid is in the file, for the message; the holder
 * removes the file when it lets go (cli_run_store_close). */
static int lock_run(struct cli_run_store *rs, const char *id,
                    struct sbx_error *e) {
  char *path = rs->lock_path;
  (void)snprintf(path, sizeof(rs->lock_path), "%s/runs", rs->sdir);
  if (mkdir(path, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_INTERNAL, errno, "cannot make %s: %s", path,
                         strerror(errno));
  (void)snprintf(path, sizeof(rs->lock_path), "%s/runs/%s.lock", rs->sdir, id);
  int fd = -1;
  for (int tries = 0; tries < 8; tries++) {
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || still_there(fd, path))
      break;
    (void)close(fd); /* removed by the holder that just let go */
    fd = -1;
    errno = EAGAIN;
  }
  if (fd < 0)
    return sbx_error_set(e, SBX_INTERNAL, errno, "cannot open %s: %s", path,
                         strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
    int err = errno;
    char pid[24] = "";
    ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
    pid[n > 0 ? n : 0] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    (void)close(fd);
    if (err != EWOULDBLOCK)
      return sbx_error_set(e, SBX_INTERNAL, err, "cannot lock %s: %s", path,
                           strerror(err));
    return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                         "run %s is going on in another sbx (pid %s): wait "
                         "for it to end, or stop it with sbx runs cancel %s",
                         id, pid[0] ? pid : "unknown", id);
  }
  char pid[24];
  int k = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)k, 0) != k)
    log_debug("run %s: cannot write its lock's pid", id);
  rs->lock_fd = fd;
  rs->locked = true;
  return 0;
}

/* Checks that the run ID of the store is one sbx run may continue. */
static int check_resumable(struct cli_run_store *rs, const char *id,
                           struct sbx_error *e) {
  _cleanup_json_ json_t *row = NULL;
  char what[128];
  (void)snprintf(what, sizeof(what),
                 ", which executes it (sbx --server URL runs show %s)", id);
  int r = cli_run_row(rs, "--resume", id, what, &row, e);
  if (r < 0)
    return r;
  const char *status = json_string_value(json_object_get(row, "status"));
  if (strcmp(status, "completed") == 0 || strcmp(status, "cancelled") == 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EALREADY,
                         "run %s is %s; nothing to resume%s", id, status,
                         strcmp(status, "completed") == 0
                             ? " (sbx run --continue RUN_ID PROMPT goes on "
                               "with its conversation)"
                             : "");
  r = check_kept(row, id, e);
  if (r < 0)
    return r;
  rs->cancel = json_is_true(json_object_get(row, "cancel_requested"));
  rs->last_seq = (uint64_t)json_integer_value(json_object_get(row, "last_seq"));
  json_t *res = json_object_get(row, "result");
  rs->result = json_is_object(res) ? json_deep_copy(res) : json_object();
  return rs->result ? 0 : -ENOMEM;
}

/* Checks that the run ID of the store is a completed run of sbx run
 * whose conversation a new run may continue, and reads it, with the
 * agent file it ran (new). */
static int check_continuable(struct cli_run_store *rs, const char *id,
                             char **agent_path, struct sbx_error *e) {
  _cleanup_json_ json_t *row = NULL;
  int r = cli_run_row(rs, "--continue", id,
                      ": sbx run continues only its own runs", &row, e);
  if (r < 0)
    return r;
  const char *status = json_string_value(json_object_get(row, "status"));
  if (strcmp(status, "failed") == 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "run %s failed: its conversation stops in the "
                         "middle of a turn; retry it with `sbx run --resume "
                         "%s`, then continue it",
                         id, id);
  if (strcmp(status, "completed") != 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBUSY,
                         "run %s is %s: only a completed run's conversation "
                         "can be continued",
                         id, status);
  r = runner_history(rs->store, id, &rs->history, &rs->response_id, e);
  if (r == -ENOENT)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                         "run %s kept no conversation to continue", id);
  if (r < 0)
    return r;
  rs->prev_request = json_incref(json_object_get(row, "request"));
  const char *ap = json_string_value(
      json_object_get(json_object_get(rs->prev_request, "agent"), "path"));
  if (!ap)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "run %s does not say which agent file it ran", id);
  *agent_path = strdup(ap);
  return *agent_path ? 0 : -ENOMEM;
}

int cli_run_store_open(struct cli_run_store *rs, const char *db,
                       const char *state_dir, const char *resume,
                       const char *cont, char **agent_path, char **prompt) {
  char sdir[4096];
  if (cli_store_open("sbx run", db, state_dir, sdir, sizeof(sdir), &rs->store) <
      0)
    return 2;
  if (!(rs->sdir = strdup(sdir)))
    return 1;
  cli_runs_sweep(rs->store, sdir);
  if (!resume && !cont)
    return -1;
  struct sbx_error e = {0};
  int r;
  if (cont) {
    r = check_continuable(rs, cont, agent_path, &e);
  } else {
    /* Locked first: what is checked then stays true. */
    r = runs_id_valid(resume) ? lock_run(rs, resume, &e) : 0;
    if (r == 0)
      r = check_resumable(rs, resume, &e);
    if (r == 0)
      r = read_started(rs->store, resume, agent_path, prompt, &e);
  }
  if (r < 0) {
    fprintf(stderr, "sbx run: %s\n", e.msg[0] ? e.msg : strerror(-r));
    return 2;
  }
  if (resume)
    (void)snprintf(rs->id, sizeof(rs->id), "%s", resume);
  return -1;
}

/* Passes a cancel asked of the run in the store on to the runner. */
static void *watch_main(void *arg) {
  struct cli_run_store *rs = arg;
  pthread_mutex_lock(&rs->mu);
  while (!rs->stop) {
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += WATCH_MS / 1000;
    (void)pthread_cond_timedwait(&rs->cv, &rs->mu, &ts);
    if (rs->stop)
      break;
    pthread_mutex_unlock(&rs->mu);
    _cleanup_json_ json_t *row = NULL;
    struct sbx_error e = {0};
    if (store_run_get(rs->store, rs->id, &row, &e) == 0 &&
        json_is_true(json_object_get(row, "cancel_requested")))
      rs->cancel = true;
    pthread_mutex_lock(&rs->mu);
  }
  pthread_mutex_unlock(&rs->mu);
  return NULL;
}

/* The new run's row: what started it, as a server's request says it. */
static int insert_row(struct cli_run_store *rs, const struct run_options *o,
                      struct sbx_error *e) {
  if (runs_new_id(rs->id) < 0)
    return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot make a run id");
  const struct agent *a = o->agents->agents[0];
  char abs[4096];
  if (!realpath(a->path, abs))
    (void)snprintf(abs, sizeof(abs), "%s", a->path);
  _cleanup_json_ json_t *request =
      json_pack("{s:{s:s, s:s}, s:s}", "agent", "name", a->name, "path", abs,
                "input", o->prompt);
  if (request && o->max_turns > 0)
    (void)json_object_set_new(request, "max_turns", json_integer(o->max_turns));
  /* A developer-owned sandbox, which a continuation goes on in. */
  if (request &&
      ((o->continues && json_object_set_new(request, "continues",
                                            json_string(o->continues)) < 0) ||
       (o->sandbox_record &&
        json_object_set_new(request, "sandbox",
                            json_string(o->sandbox_record->id)) < 0)))
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  rs->result = json_object();
  if (!request || !rs->result)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  return store_run_insert(rs->store, rs->id, RUNS_CLI_OWNER, "running", request,
                          e);
}

int cli_run_store_start(struct cli_run_store *rs, struct run_options *o,
                        struct sbx_error *e) {
  static const char *const resumable[] = {"waiting_approval", "queued",
                                          "failed", "running", NULL};
  int r = rs->id[0] ? store_run_update(rs->store, rs->id, resumable, "running",
                                       NULL, e)
                    : insert_row(rs, o, e);
  if (r == 0 && !rs->locked)
    r = lock_run(rs, rs->id, e); /* a new run: no one else has its id */
  if (r == -ESTALE)
    r = sbx_error_set(e, SBX_CONFLICT, ESTALE,
                      "run %s ended while it was being taken up", rs->id);
  if (r < 0)
    return r;
  if (runs_rec_init(&rs->rec, rs->store, rs->id) < 0)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  o->store = rs->store;
  o->run_id = rs->id + strlen(RUNS_ID_PREFIX);
  o->resume_path = o->resume_path ? rs->id : NULL;
  o->event_sink = runs_sink;
  o->event_arg = &rs->rec;
  o->event_seq = rs->last_seq;
  o->cancel = &rs->cancel;
  if (pthread_mutex_init(&rs->mu, NULL) != 0 ||
      pthread_cond_init(&rs->cv, NULL) != 0 ||
      pthread_create(&rs->thread, NULL, watch_main, rs) != 0)
    return sbx_error_set(e, SBX_INTERNAL, EAGAIN, "cannot start a thread");
  rs->watching = true;
  return 0;
}

void cli_run_store_finish(struct cli_run_store *rs, int r,
                          const struct run_result *res,
                          const struct sbx_error *re, int64_t kept_until_ms) {
  if (!rs->rec.pending)
    return;
  struct sbx_error e = {0};
  (void)json_object_del(rs->result, "retry_until_ms");
  if (kept_until_ms > 0 && json_object_set_new(rs->result, "retry_until_ms",
                                               json_integer(kept_until_ms)) < 0)
    log_warn("run %s: cannot record until when it is kept", rs->id);
  if (runs_finish(&rs->rec, rs->result, r, res, re, &e) < 0)
    log_warn("run %s: cannot record its end: %s", rs->id, e.msg);
}

void cli_run_store_close(struct cli_run_store *rs) {
  if (rs->watching) {
    pthread_mutex_lock(&rs->mu);
    rs->stop = true;
    (void)pthread_cond_signal(&rs->cv);
    pthread_mutex_unlock(&rs->mu);
    (void)pthread_join(rs->thread, NULL);
    (void)pthread_cond_destroy(&rs->cv);
    (void)pthread_mutex_destroy(&rs->mu);
    rs->watching = false;
  }
  runs_rec_clear(&rs->rec);
  json_decref(rs->result);
  rs->result = NULL;
  json_decref(rs->history);
  rs->history = NULL;
  json_decref(rs->prev_request);
  rs->prev_request = NULL;
  free(rs->response_id);
  rs->response_id = NULL;
  rs->store = store_close(rs->store);
  if (rs->locked) {
    (void)unlink(rs->lock_path); /* while it is held: see still_there */
    (void)close(rs->lock_fd);    /* the lock goes with it */
  }
  rs->locked = false;
  free(rs->sdir);
  rs->sdir = NULL;
}
