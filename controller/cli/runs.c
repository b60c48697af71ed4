/* The runs of the state store without a server: sbx approve, sbx reject
 * and sbx runs ls|show|logs|cancel on the store that sbx run and sbx
 * serve share (--db, default sqlite:STATE-DIR/sbx.db). They act on runs
 * of sbx run and of servers alike, as the API does. Each first ends the
 * failed runs of sbx run kept for a retry whose keep time has passed. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/cli/cli_internal.h"
#include "controller/runs/runs.h"
#include "controller/state/state.h"
#include "shared/cleanup.h"

#define LOGS_POLL_MS 200

int cli_db_url(const char *prog, const char *db, const char *state_dir,
               char *sdir, size_t sn, char *url, size_t un) {
  struct sbx_error e = {0};
  if (state_dir_resolve(state_dir, sdir, sn, &e) < 0 ||
      state_dir_ensure(sdir, &e) < 0) {
    fprintf(stderr, "%s: %s\n", prog, e.msg);
    return -1;
  }
  int k = db ? snprintf(url, un, "%s", db)
             : snprintf(url, un, "sqlite:%s/sbx.db", sdir);
  if (k < 0 || (size_t)k >= un) {
    fprintf(stderr, "%s: the database URL is too long\n", prog);
    return -1;
  }
  return 0;
}

int cli_store_open(const char *prog, const char *db, const char *state_dir,
                   char *sdir, size_t sn, struct store **out) {
  char url[4300];
  if (cli_db_url(prog, db, state_dir, sdir, sn, url, sizeof(url)) < 0)
    return -1;
  struct sbx_error e = {0};
  if (store_open(url, out, &e) < 0) {
    fprintf(stderr, "%s: %s\n", prog, e.msg);
    return -1;
  }
  return 0;
}

void cli_print_runs(json_t *data) {
  printf("%-36s %-17s %-16s %s\n", "ID", "STATUS", "AGENT", "CREATED");
  size_t i;
  json_t *r;
  json_array_foreach(data, i, r) {
    const char *agent = json_string_value(json_object_get(r, "agent"));
    printf("%-36s %-17s %-16s %s\n",
           json_string_value(json_object_get(r, "id")),
           json_string_value(json_object_get(r, "status")), agent ? agent : "-",
           json_string_value(json_object_get(r, "created_at")));
  }
}

/* What the commands of this file take. */
struct runs_cmd {
  const char *prog;
  const char *db, *state_dir, *status, *reason;
  bool json, follow;
  const char *pos[2];
  int npos;
  struct store *store;
  char *sdir; /* the state dir */
};

static void runs_cmd_clear(struct runs_cmd *c) {
  store_close(c->store);
  free(c->sdir);
}

/* Parses ARGV with the options ALLOWED ("drsjf": --db, --reason,
 * --status, --json, --follow) and --state-dir, and NPOS positional
 * arguments; opens the store. -1 when the command goes on, else its exit
 * code after saying why (USAGE). */
static int runs_parse(struct runs_cmd *c, int argc, char **argv,
                      const char *allowed, int npos, const char *usage) {
  static const struct option opts[] = {
      {"db", required_argument, NULL, 'd'},
      {"state-dir", required_argument, NULL, 'S'},
      {"reason", required_argument, NULL, 'r'},
      {"status", required_argument, NULL, 's'},
      {"json", no_argument, NULL, 'j'},
      {"follow", no_argument, NULL, 'f'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  optind = 1;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    if (ch == 'h') {
      printf("usage: %s\n", usage);
      return 0;
    }
    if (ch == 'S') {
      c->state_dir = optarg;
      continue;
    }
    if (ch == '?' || ch == ':' || !strchr(allowed, ch)) {
      fprintf(stderr, "%s: %s \"%s\"\nusage: %s\n", c->prog,
              ch == ':' ? "a value is missing after" : "unknown option",
              argv[optind - 1], usage);
      return 2;
    }
    if (ch == 'd')
      c->db = optarg;
    else if (ch == 'r')
      c->reason = optarg;
    else if (ch == 's')
      c->status = optarg;
    else if (ch == 'j')
      c->json = true;
    else
      c->follow = true;
  }
  if (argc - optind != npos) {
    fprintf(stderr, "usage: %s\n", usage);
    return 2;
  }
  for (int i = 0; i < npos; i++)
    c->pos[c->npos++] = argv[optind + i];
  if (c->reason && strlen(c->reason) > RUNS_REASON_MAX) {
    fprintf(stderr, "%s: --reason may hold at most %d bytes\n", c->prog,
            RUNS_REASON_MAX);
    return 2;
  }
  char sdir[4096];
  if (cli_store_open(c->prog, c->db, c->state_dir, sdir, sizeof(sdir),
                     &c->store) < 0)
    return 2;
  c->sdir = strdup(sdir);
  if (!c->sdir) {
    fprintf(stderr, "%s: out of memory\n", c->prog);
    return 1;
  }
  cli_runs_sweep(c->store, sdir);
  return -1;
}

/* The run ID of the store into *ROW (new): 0, or the exit code after
 * saying why. */
static int runs_load(struct runs_cmd *c, const char *id, json_t **row) {
  struct sbx_error e = {0};
  int r = runs_id_valid(id) ? store_run_get(c->store, id, row, &e) : -ENOENT;
  if (r == -ENOENT) {
    fprintf(stderr, "%s: no run \"%s\" (sbx runs ls lists them)\n", c->prog,
            id);
    return 2;
  }
  if (r < 0) {
    fprintf(stderr, "%s: %s\n", c->prog, e.msg);
    return 1;
  }
  return 0;
}

int cli_decide(int argc, char **argv) {
  bool reject = strcmp(argv[0], "reject") == 0;
  _cleanup_(runs_cmd_clear) struct runs_cmd c = {
      .prog = reject ? "sbx reject" : "sbx approve"};
  int k = runs_parse(&c, argc, argv, reject ? "dr" : "d", 2,
                     reject ? "sbx reject RUN_ID CALL_ID [--reason TEXT] "
                              "[--db URL] [--state-dir DIR]\n\nRecords that "
                              "the call CALL_ID of the paused run RUN_ID is "
                              "rejected; the model sees the reason."
                            : "sbx approve RUN_ID CALL_ID [--db URL] "
                              "[--state-dir DIR]\n\nRecords that the call "
                              "CALL_ID of the paused run RUN_ID is approved.");
  if (k >= 0)
    return k;
  _cleanup_json_ json_t *row = NULL;
  if ((k = runs_load(&c, c.pos[0], &row)) != 0)
    return k;
  struct sbx_error e = {0};
  bool queued = false;
  int r =
      runs_decide(c.store, c.pos[0], c.pos[1], !reject, c.reason, &queued, &e);
  if (r < 0) {
    fprintf(stderr, "%s: %s\n", c.prog, e.msg);
    return 1;
  }
  printf("%s %s\n", reject ? "rejected" : "approved", c.pos[1]);
  if (queued && runs_of_cli(row))
    fprintf(stderr,
            "sbx: no call of run %s waits any more: continue it with "
            "`sbx run --resume %s`\n",
            c.pos[0], c.pos[0]);
  return fflush(stdout) != 0;
}

static int runs_ls(int argc, char **argv) {
  _cleanup_(runs_cmd_clear) struct runs_cmd c = {.prog = "sbx runs ls"};
  int k = runs_parse(&c, argc, argv, "dsj", 0,
                     "sbx runs ls [--status STATUS] [--json] [--db URL] "
                     "[--state-dir DIR]");
  if (k >= 0)
    return k;
  static const char *const statuses[] = {
      "queued",    "running", "waiting_approval", "completed", "failed",
      "cancelled", NULL};
  size_t s = 0;
  while (c.status && statuses[s] && strcmp(statuses[s], c.status) != 0)
    s++;
  if (c.status && !statuses[s]) {
    fprintf(stderr,
            "%s: unknown status \"%s\" (queued, running, waiting_approval, "
            "completed, failed, cancelled)\n",
            c.prog, c.status);
    return 2;
  }
  _cleanup_json_ json_t *all = json_array();
  int64_t before = 0;
  do {
    _cleanup_json_ json_t *rows = NULL;
    struct sbx_error e = {0};
    if (store_run_list(c.store, c.status, NULL, before, STORE_LIST_MAX, &rows,
                       &before, &e) < 0) {
      fprintf(stderr, "%s: %s\n", c.prog, e.msg);
      return 1;
    }
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) {
      (void)json_array_append_new(all, runs_view(row));
    }
  } while (before);
  if (c.json) {
    (void)json_dumpf(all, stdout, JSON_INDENT(2));
    printf("\n");
  } else {
    cli_print_runs(all);
  }
  return fflush(stdout) != 0;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  (void)nanosleep(&ts, NULL);
}

/* Whether an event of TYPE is a run's last (as the API's streams end). */
static bool last_event(const char *type) {
  return strcmp(type, "run_finished") == 0 || strcmp(type, "run_failed") == 0 ||
         strcmp(type, "run_cancelled") == 0;
}

/* Prints the run's events, one JSON line each; with --follow, those that
 * come later too, until its last. */
static int runs_logs(struct runs_cmd *c, const char *id) {
  int64_t after = 0;
  for (;;) {
    _cleanup_json_ json_t *evs = NULL;
    struct sbx_error e = {0};
    if (store_events_after(c->store, id, after, STORE_LIST_MAX, &evs, &e) < 0) {
      fprintf(stderr, "%s: %s\n", c->prog, e.msg);
      return 1;
    }
    bool done = false;
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev) {
      after = json_integer_value(json_object_get(ev, "seq"));
      printf("%s\n", json_string_value(json_object_get(ev, "data")));
      done |= last_event(json_string_value(json_object_get(ev, "type")));
    }
    if (fflush(stdout) != 0)
      return 1;
    if (json_array_size(evs) == STORE_LIST_MAX)
      continue;
    if (done || !c->follow)
      return 0;
    sleep_ms(LOGS_POLL_MS);
  }
}

/* sbx runs show|logs|cancel RUN_ID. */
static int runs_one(int argc, char **argv) {
  const char *sub = argv[0];
  bool logs = strcmp(sub, "logs") == 0, cancel = strcmp(sub, "cancel") == 0;
  char prog[32], usage[128];
  (void)snprintf(prog, sizeof(prog), "sbx runs %s", sub);
  (void)snprintf(usage, sizeof(usage),
                 "sbx runs %s RUN_ID%s [--db URL] [--state-dir DIR]", sub,
                 logs ? " [--follow]" : "");
  _cleanup_(runs_cmd_clear) struct runs_cmd c = {.prog = prog};
  int k = runs_parse(&c, argc, argv, logs ? "df" : "d", 1, usage);
  if (k >= 0)
    return k;
  _cleanup_json_ json_t *row = NULL;
  if ((k = runs_load(&c, c.pos[0], &row)) != 0)
    return k;
  if (logs)
    return runs_logs(&c, c.pos[0]);
  if (cancel) {
    struct sbx_error e = {0};
    int r = runs_cancel(c.store, c.pos[0], &e);
    if (r < 0) {
      fprintf(stderr, "%s: %s\n", prog, e.msg);
      return r == -EALREADY ? 2 : 1;
    }
    /* A failed run of sbx run kept for a retry ends now. */
    cli_runs_sweep(c.store, c.sdir);
    printf("%s\n", c.pos[0]);
    return fflush(stdout) != 0;
  }
  _cleanup_json_ json_t *view = runs_view(row);
  (void)json_dumpf(view, stdout, JSON_INDENT(2));
  printf("\n");
  return fflush(stdout) != 0;
}

int cli_runs(int argc, char **argv) {
  const char *sub = argc > 1 ? argv[1] : "";
  if (strcmp(sub, "ls") == 0)
    return runs_ls(argc - 1, argv + 1);
  if (strcmp(sub, "show") == 0 || strcmp(sub, "cancel") == 0 ||
      strcmp(sub, "logs") == 0)
    return runs_one(argc - 1, argv + 1);
  if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
    printf("usage: sbx runs ls [--status STATUS] [--json]\n"
           "       sbx runs show RUN_ID\n"
           "       sbx runs cancel RUN_ID\n"
           "       sbx runs logs RUN_ID [--follow]\n"
           "\n"
           "The runs of the state store that sbx run and sbx serve share: "
           "those of\n"
           "sbx run and those submitted to servers alike. Each takes --db "
           "URL\n"
           "(sqlite:PATH or postgres://...; default sqlite:STATE-DIR/sbx.db) "
           "and\n"
           "--state-dir DIR. With --server URL they ask that server "
           "instead.\n"
           "Each first ends the failed runs of sbx run kept for a retry "
           "whose time has\n"
           "passed (sbx run --keep-failed): their sandboxes are closed, "
           "their state\n"
           "removed. A cancel ends a kept failed run at once.\n");
    return 0;
  }
  fprintf(stderr, "usage: sbx runs ls|show|cancel|logs ... (see sbx runs "
                  "--help)\n");
  return 2;
}
