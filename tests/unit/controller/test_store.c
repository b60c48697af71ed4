/* The state store (controller/state/store.h) on both of its stores: every
 * behaviour is one body run as Test(store_sqlite, ...) on a fresh file and
 * as Test(store_pg, ...) on a private PostgreSQL (tests/support/postgres.h,
 * skipped where PostgreSQL is not installed). */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controller/state/store.h"
#include "tests/support/postgres.h"

static char dir[64];      /* the sqlite tests' directory */
static struct test_pg pg; /* the postgres tests' server */
static char url[256];     /* the store of the running test */

static void sqlite_setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-store-test-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(url, sizeof(url), "sqlite:%s/sbx.db", dir);
}

static void sqlite_teardown(void) {
  char cmd[128];
  (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  (void)!system(cmd);
}

static void pg_teardown(void) {
  test_pg_stop(&pg);
}

TestSuite(store_sqlite, .init = sqlite_setup, .fini = sqlite_teardown,
          .timeout = 120);
TestSuite(store_pg, .fini = pg_teardown, .timeout = 120);
TestSuite(store, .timeout = 60);

static void pg_begin(void) {
  test_pg_start(&pg);
  (void)snprintf(url, sizeof(url), "%s", pg.url);
}

/* BOTH(name) { body }: the body, reading the store from url, run as
 * store_sqlite/name and store_pg/name. */
#define BOTH(name)                                                             \
  static void both_##name(void);                                               \
  Test(store_sqlite, name) {                                                   \
    both_##name();                                                             \
  }                                                                            \
  Test(store_pg, name) {                                                       \
    pg_begin();                                                                \
    both_##name();                                                             \
  }                                                                            \
  static void both_##name(void)

static bool is_sqlite(void) {
  return strncmp(url, "sqlite:", 7) == 0;
}

static struct store *open_store(void) {
  struct store *s = NULL;
  struct sbx_error e = {0};
  int r = store_open(url, &s, &e);
  cr_assert_eq(r, 0, "store_open(%s): %d %s", url, r, e.msg);
  return s;
}

/* SQL run on the store's database behind its back. */
static void raw_sql(const char *sql) {
  if (is_sqlite()) {
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(url + 7, &db), SQLITE_OK);
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, err);
    sqlite3_close(db);
    return;
  }
  PGconn *c = PQconnectdb(url);
  cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
  PGresult *res = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(res);
  cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
            PQresultErrorMessage(res));
  PQclear(res);
  PQfinish(c);
}

static const char *str(json_t *o, const char *key) {
  const char *v = json_string_value(json_object_get(o, key));
  return v ? v : "<not a string>";
}

static json_int_t num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  cr_assert(json_is_integer(v), "\"%s\" is not an integer", key);
  return json_integer_value(v);
}

static void insert_run(struct store *s, const char *id, const char *owner,
                       const char *status) {
  struct sbx_error e = {0};
  json_t *req = json_pack("{s:s}", "input", id);
  int r = store_run_insert(s, id, owner, status, req, &e);
  json_decref(req);
  cr_assert_eq(r, 0, "insert %s: %s", id, e.msg);
}

static json_t *get_run(struct store *s, const char *id) {
  json_t *run = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(store_run_get(s, id, &run, &e), 0, "get %s: %s", id, e.msg);
  return run;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- opening ------------------------------------------------------------- */

Test(store, open_refuses_an_unknown_scheme) {
  struct store *s = (struct store *)1;
  struct sbx_error e = {0};
  cr_expect_eq(store_open("mysql://sbx:hunter2@db/sbx", &s, &e), -EINVAL);
  cr_expect_null(s);
  cr_expect(strstr(e.msg, "unknown state store URL \"mysql://sbx:***@db/sbx\""),
            "%s", e.msg);
  cr_expect_null(strstr(e.msg, "hunter2"), "%s", e.msg);
  cr_expect_eq(store_open("/var/lib/sbx.db", &s, &e), -EINVAL);
  cr_expect(strstr(e.msg, "(use sqlite:PATH or postgres://...)"), "%s", e.msg);
  cr_expect_eq(store_open("sqlite:", &s, &e), -EINVAL);
}

Test(store, open_postgres_unreachable) {
  struct store *s = NULL;
  struct sbx_error e = {0};
  int r = store_open("postgresql://sbx:hunter2@/sbx?host=/nonexistent-dir&"
                     "password=hunter3",
                     &s, &e);
  cr_expect_eq(r, -EIO, "%d %s", r, e.msg);
  cr_expect_null(s);
  cr_expect(strstr(e.msg, "cannot connect to the state store "
                          "postgresql://sbx:***@/sbx?host=/nonexistent-dir&"
                          "password=***: "),
            "%s", e.msg);
  cr_expect(strstr(e.msg, "/nonexistent-dir/.s.PGSQL.5432"), "%s", e.msg);
  cr_expect_null(strstr(e.msg, "hunter"), "%s", e.msg);
  cr_expect_neq(e.msg[strlen(e.msg) - 1], '\n');
}

Test(store_sqlite, open_in_a_missing_directory) {
  char u[128];
  (void)snprintf(u, sizeof(u), "sqlite:%s/missing/sbx.db", dir);
  struct store *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(store_open(u, &s, &e), -ENOENT);
  cr_expect_null(s);
  cr_expect(strstr(e.msg, "cannot create the state store"), "%s", e.msg);
  cr_expect(strstr(e.msg, "/missing/sbx.db"), "%s", e.msg);
}

Test(store_sqlite, open_a_file_that_is_not_a_database) {
  char p[96];
  (void)snprintf(p, sizeof(p), "%s/sbx.db", dir);
  FILE *f = fopen(p, "we");
  cr_assert_not_null(f);
  fputs("this is not an SQLite database, not at all, no no no\n", f);
  fclose(f);
  struct store *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(store_open(url, &s, &e), -EIO);
  cr_expect(strstr(e.msg, "file is not a database"), "%s", e.msg);
}

Test(store_sqlite, the_files_are_0600) {
  (void)umask(0);
  struct store *s = open_store();
  insert_run(s, "r1", "amy", "queued");
  const char *suffixes[] = {"", "-wal", "-shm"};
  for (size_t i = 0; i < 3; i++) {
    char p[96];
    (void)snprintf(p, sizeof(p), "%s/sbx.db%s", dir, suffixes[i]);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0, "%s: %s", p, strerror(errno));
    cr_expect_eq(st.st_mode & 07777, 0600, "%s is %o", p, st.st_mode & 07777);
  }
  store_close(s);
}

BOTH(open_twice_and_kind) {
  struct store *a = open_store();
  insert_run(a, "r1", "", "queued");
  /* PostgreSQL's URL is libpq's: postgres:// as well as postgresql://. */
  if (!is_sqlite())
    (void)snprintf(url, sizeof(url), "postgres://%s",
                   pg.url + strlen("postgresql://"));
  struct store *b = open_store();
  json_t *run = get_run(b, "r1");
  cr_expect_str_eq(str(run, "status"), "queued");
  cr_expect_str_eq(store_kind(b), is_sqlite() ? "sqlite" : "postgres");
  json_decref(run);
  cr_expect_null(store_close(a));
  store_close(b);
  cr_expect_null(store_close(NULL));
}

BOTH(schema_version_refused) {
  store_close(open_store());
  raw_sql("UPDATE meta SET value = 99 WHERE key = 'version'");
  struct store *s = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(store_open(url, &s, &e), -EINVAL);
  cr_expect_null(s);
  cr_expect(strstr(e.msg, "has schema version 99; this sbx knows 1"), "%s",
            e.msg);
  raw_sql("UPDATE meta SET value = 1 WHERE key = 'version'");
  store_close(open_store());
}

struct opener {
  pthread_barrier_t *start;
  int r;
  char msg[SBX_ERROR_MSG_MAX];
};

static void *opener(void *arg) {
  struct opener *o = arg;
  struct sbx_error e = {0};
  struct store *s = NULL;
  (void)pthread_barrier_wait(o->start);
  o->r = store_open(url, &s, &e);
  memcpy(o->msg, e.msg, sizeof(o->msg));
  store_close(s);
  return NULL;
}

/* Servers starting together on a new database: one makes the schema, the
 * others wait for it rather than fail on tables half made. */
BOTH(concurrent_opens_of_a_new_store) {
  struct opener o[4];
  pthread_t t[4];
  pthread_barrier_t start;
  cr_assert_eq(pthread_barrier_init(&start, NULL, 4), 0);
  for (int i = 0; i < 4; i++) {
    o[i] = (struct opener){.start = &start};
    cr_assert_eq(pthread_create(&t[i], NULL, opener, &o[i]), 0);
  }
  for (int i = 0; i < 4; i++)
    cr_assert_eq(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < 4; i++)
    cr_expect_eq(o[i].r, 0, "open %d: %s", i, o[i].msg);
  (void)pthread_barrier_destroy(&start);
  struct store *s = open_store();
  insert_run(s, "r1", "amy", "queued");
  store_close(s);
}

/* ---- tokens -------------------------------------------------------------- */

BOTH(tokens) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  cr_assert_eq(store_token_add(s, "t2", "zed", "ab12", "read", &e), 0, "%s",
               e.msg);
  cr_assert_eq(store_token_add(s, "t1", "amy", "cd34", "run,approve", &e), 0);
  cr_expect_eq(store_token_add(s, "t3", "amy", "ef56", "read", &e), -EEXIST);
  cr_expect(strstr(e.msg, "\"amy\""), "%s", e.msg);
  cr_expect_eq(store_token_add(s, "t1", "bob", "ef56", "read", &e), -EEXIST);

  json_t *t = NULL;
  cr_assert_eq(store_token_get(s, "t1", &t, &e), 0, "%s", e.msg);
  cr_expect_str_eq(str(t, "id"), "t1");
  cr_expect_str_eq(str(t, "name"), "amy");
  cr_expect_str_eq(str(t, "hash"), "cd34");
  cr_expect_str_eq(str(t, "scopes"), "run,approve");
  const char *at = str(t, "created_at");
  cr_expect_eq(strlen(at), 20, "%s", at);
  cr_expect(at[4] == '-' && at[10] == 'T' && at[19] == 'Z', "%s", at);
  json_decref(t);
  cr_expect_eq(store_token_get(s, "t9", &t, &e), -ENOENT);
  cr_expect_null(t);

  json_t *all = NULL;
  cr_assert_eq(store_token_list(s, &all, &e), 0);
  cr_assert_eq(json_array_size(all), 2);
  cr_expect_str_eq(str(json_array_get(all, 0), "name"), "amy");
  cr_expect_str_eq(str(json_array_get(all, 1), "name"), "zed");
  cr_expect_str_eq(str(json_array_get(all, 1), "scopes"), "read");
  cr_expect_null(json_object_get(json_array_get(all, 0), "hash"));
  cr_expect_null(json_object_get(json_array_get(all, 1), "hash"));
  json_decref(all);

  cr_expect_eq(store_token_remove(s, "amy", &e), 0);
  cr_expect_eq(store_token_remove(s, "amy", &e), -ENOENT);
  cr_expect(strstr(e.msg, "no token named \"amy\""), "%s", e.msg);
  cr_expect_eq(store_token_get(s, "t1", &t, &e), -ENOENT);
  cr_assert_eq(store_token_list(s, &all, &e), 0);
  cr_expect_eq(json_array_size(all), 1);
  json_decref(all);
  store_close(s);
}

/* ---- runs ---------------------------------------------------------------- */

BOTH(run_insert_and_get) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  int64_t t0 = store_now_ms();
  json_t *req = json_pack("{s:s, s:[i, i]}", "input", "hi", "n", 1, 2);
  cr_assert_eq(store_run_insert(s, "r1", "amy", "queued", req, &e), 0, "%s",
               e.msg);
  int64_t t1 = store_now_ms();
  cr_expect_eq(store_run_insert(s, "r1", "bob", "running", req, &e), -EEXIST);
  cr_expect(strstr(e.msg, "run \"r1\" exists already"), "%s", e.msg);
  json_t *arr = json_array();
  cr_expect_eq(store_run_insert(s, "r2", "amy", "queued", arr, &e), -EINVAL);
  json_decref(arr);

  json_t *run = get_run(s, "r1");
  cr_expect_str_eq(str(run, "id"), "r1");
  cr_expect_str_eq(str(run, "status"), "queued");
  cr_expect_str_eq(str(run, "owner"), "amy");
  cr_expect(json_equal(json_object_get(run, "request"), req));
  cr_expect(json_is_null(json_object_get(run, "result")));
  cr_expect(num(run, "created_at") >= t0 && num(run, "created_at") <= t1);
  cr_expect_eq(num(run, "updated_at"), num(run, "created_at"));
  cr_expect(json_is_null(json_object_get(run, "lease_owner")));
  cr_expect(json_is_null(json_object_get(run, "lease_until")));
  cr_expect(json_is_false(json_object_get(run, "cancel_requested")));
  cr_expect_eq(num(run, "last_seq"), 0);
  cr_expect_eq(json_object_size(run), 11, "%s", json_dumps(run, 0));
  json_decref(run);
  json_decref(req);

  run = (json_t *)1;
  cr_expect_eq(store_run_get(s, "r9", &run, &e), -ENOENT);
  cr_expect_null(run);
  cr_expect(strstr(e.msg, "no run \"r9\""), "%s", e.msg);
  store_close(s);
}

/* The ids of a list's runs, joined by spaces. */
static void ids_of(json_t *runs, char *out, size_t n) {
  size_t k = 0;
  out[0] = '\0';
  size_t i;
  json_t *r;
  json_array_foreach(runs, i, r) {
    k += (size_t)snprintf(out + k, n - k, "%s%s", i ? " " : "", str(r, "id"));
  }
}

static void list(struct store *s, const char *status, const char *owner,
                 int64_t before, size_t limit, const char *want,
                 int64_t *next) {
  json_t *runs = NULL;
  struct sbx_error e = {0};
  int r = store_run_list(s, status, owner, before, limit, &runs, next, &e);
  cr_assert_eq(r, 0, "%s", e.msg);
  char got[256];
  ids_of(runs, got, sizeof(got));
  cr_expect_str_eq(got, want);
  json_decref(runs);
}

BOTH(run_list_filters_and_pages) {
  struct store *s = open_store();
  const char *status[] = {"queued", "running", "done"};
  for (int i = 0; i < 7; i++) {
    char id[8];
    (void)snprintf(id, sizeof(id), "r%d", i);
    insert_run(s, id, i % 2 ? "amy" : "", status[i % 3]);
  }
  int64_t next = -1;
  list(s, NULL, NULL, 0, 3, "r6 r5 r4", &next);
  cr_assert_gt(next, 0);
  list(s, NULL, NULL, next, 3, "r3 r2 r1", &next);
  cr_assert_gt(next, 0);
  list(s, NULL, NULL, next, 3, "r0", &next);
  cr_expect_eq(next, 0);
  list(s, NULL, NULL, 0, 7, "r6 r5 r4 r3 r2 r1 r0", &next);
  cr_expect_eq(next, 0);
  list(s, "queued", NULL, 0, 10, "r6 r3 r0", &next);
  list(s, NULL, "amy", 0, 10, "r5 r3 r1", &next);
  list(s, NULL, "", 0, 10, "r6 r4 r2 r0", &next);
  list(s, "queued", "amy", 0, 10, "r3", &next);
  list(s, "running", NULL, 0, 1, "r4", &next);
  cr_assert_gt(next, 0);
  list(s, "running", NULL, next, 1, "r1", &next);
  cr_expect_eq(next, 0);
  list(s, "paused", NULL, 0, 10, "", &next);
  cr_expect_eq(next, 0);

  json_t *runs = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(store_run_list(s, NULL, NULL, 0, 0, &runs, &next, &e), -EINVAL);
  cr_expect_eq(
      store_run_list(s, NULL, NULL, 0, STORE_LIST_MAX + 1, &runs, &next, &e),
      -EINVAL);
  cr_expect_null(runs);
  store_close(s);
}

BOTH(run_update_from) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  insert_run(s, "r1", "amy", "queued");
  json_t *before = get_run(s, "r1");
  sleep_ms(3);

  const char *const queued[] = {"queued", "paused", NULL};
  cr_assert_eq(store_run_update(s, "r1", queued, "running", NULL, &e), 0, "%s",
               e.msg);
  json_t *run = get_run(s, "r1");
  cr_expect_str_eq(str(run, "status"), "running");
  cr_expect(json_is_null(json_object_get(run, "result")));
  cr_expect_gt(num(run, "updated_at"), num(before, "updated_at"));
  cr_expect_eq(num(run, "created_at"), num(before, "created_at"));
  json_decref(run);

  /* Not queued any more: the second runner loses. */
  cr_expect_eq(store_run_update(s, "r1", queued, "running", NULL, &e), -ESTALE);
  cr_expect(strstr(e.msg, "r1"), "%s", e.msg);
  json_t *res = json_pack("{s:s}", "output", "42");
  const char *const running[] = {"running", NULL};
  cr_expect_eq(store_run_update(s, "r1", running, "done", res, &e), 0);
  run = get_run(s, "r1");
  cr_expect_str_eq(str(run, "status"), "done");
  cr_expect(json_equal(json_object_get(run, "result"), res));
  json_decref(run);

  /* Without FROM any status goes; NULL keeps what was there. */
  cr_expect_eq(store_run_update(s, "r1", NULL, NULL, NULL, &e), 0);
  cr_expect_eq(store_run_update(s, "r1", NULL, "archived", NULL, &e), 0);
  run = get_run(s, "r1");
  cr_expect_str_eq(str(run, "status"), "archived");
  cr_expect(json_equal(json_object_get(run, "result"), res));
  json_decref(run);

  cr_expect_eq(store_run_update(s, "r9", queued, "running", NULL, &e), -ENOENT);
  cr_expect_eq(store_run_update(s, "r9", NULL, "running", NULL, &e), -ENOENT);
  const char *const none[] = {NULL};
  cr_expect_eq(store_run_update(s, "r1", none, "running", NULL, &e), -EINVAL);
  json_decref(res);
  json_decref(before);
  store_close(s);
}

BOTH(run_cancel_request_and_counts) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  insert_run(s, "r1", "amy", "queued");
  insert_run(s, "r2", "amy", "running");
  insert_run(s, "r3", "amy", "queued");
  cr_expect_eq(store_run_cancel_request(s, "r2", &e), 0);
  json_t *run = get_run(s, "r2");
  cr_expect(json_is_true(json_object_get(run, "cancel_requested")));
  json_decref(run);
  run = get_run(s, "r1");
  cr_expect(json_is_false(json_object_get(run, "cancel_requested")));
  json_decref(run);
  cr_expect_eq(store_run_cancel_request(s, "r9", &e), -ENOENT);

  json_t *counts = NULL;
  cr_assert_eq(store_run_counts(s, &counts, &e), 0, "%s", e.msg);
  json_t *want = json_pack("{s:i, s:i}", "queued", 2, "running", 1);
  cr_expect(json_equal(counts, want), "%s", json_dumps(counts, 0));
  json_decref(want);
  json_decref(counts);
  store_close(s);
}

/* ---- leases -------------------------------------------------------------- */

static const char *const queued_only[] = {"queued", NULL};

static int claim(struct store *s, const char *owner, int64_t ttl, char *id) {
  struct sbx_error e = {0};
  int r = store_lease_claim(s, owner, queued_only, ttl, id, 64, &e);
  cr_assert(r == 0 || r == -ENOENT, "claim: %d %s", r, e.msg);
  return r;
}

BOTH(lease_claim_takes_the_oldest) {
  struct store *s = open_store();
  /* The oldest, but a run of the CLI (owner ""): its sbx executes it,
   * never a server. */
  insert_run(s, "cli", "", "queued");
  insert_run(s, "a", "amy", "queued");
  insert_run(s, "b", "amy", "running");
  insert_run(s, "c", "amy", "queued");
  insert_run(s, "d", "amy", "queued");
  char id[64];
  int64_t t0 = store_now_ms();
  cr_assert_eq(claim(s, "w1", 60000, id), 0);
  int64_t t1 = store_now_ms();
  cr_expect_str_eq(id, "a");
  json_t *run = get_run(s, "a");
  cr_expect_str_eq(str(run, "lease_owner"), "w1");
  cr_expect(num(run, "lease_until") >= t0 + 60000 &&
            num(run, "lease_until") <= t1 + 60000);
  json_decref(run);
  cr_assert_eq(claim(s, "w2", 60000, id), 0);
  cr_expect_str_eq(id, "c");
  cr_assert_eq(claim(s, "w1", 60000, id), 0);
  cr_expect_str_eq(id, "d");
  struct sbx_error e = {0};
  cr_expect_eq(store_lease_claim(s, "w1", queued_only, 60000, id, 64, &e),
               -ENOENT);
  cr_expect(strstr(e.msg, "no run of [\"queued\"] free to take"), "%s", e.msg);

  const char *const both[] = {"running", "queued", NULL};
  cr_assert_eq(store_lease_claim(s, "w3", both, 60000, id, 64, &e), 0);
  cr_expect_str_eq(id, "b");
  const char *const none[] = {NULL};
  cr_expect_eq(store_lease_claim(s, "w3", none, 60000, id, 64, &e), -EINVAL);
  cr_expect_eq(store_lease_claim(s, "w3", both, 0, id, 64, &e), -EINVAL);
  store_close(s);
}

BOTH(lease_expired_is_taken_by_another) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  insert_run(s, "a", "amy", "queued");
  char id[64];
  cr_assert_eq(claim(s, "w1", 60000, id), 0);
  cr_expect_eq(claim(s, "w2", 60000, id), -ENOENT);
  /* w1 keeps it while it renews, even past the first lease's end. */
  cr_expect_eq(store_lease_renew(s, "a", "w1", 1, &e), 0, "%s", e.msg);
  sleep_ms(5);
  cr_expect_eq(store_lease_renew(s, "a", "w1", 1, &e), 0, "%s", e.msg);
  sleep_ms(5);
  cr_assert_eq(claim(s, "w2", 60000, id), 0);
  cr_expect_str_eq(id, "a");
  cr_expect_eq(store_lease_renew(s, "a", "w1", 60000, &e), -ESTALE);
  cr_expect(strstr(e.msg, "no longer held by \"w1\""), "%s", e.msg);
  cr_expect_eq(store_lease_renew(s, "a", "w2", 60000, &e), 0);
  cr_expect_eq(store_lease_renew(s, "zz", "w2", 60000, &e), -ENOENT);
  json_t *run = get_run(s, "a");
  cr_expect_str_eq(str(run, "lease_owner"), "w2");
  json_decref(run);
  store_close(s);
}

BOTH(lease_release) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  insert_run(s, "a", "amy", "queued");
  char id[64];
  cr_assert_eq(claim(s, "w1", 60000, id), 0);
  cr_expect_eq(store_lease_release(s, "a", "w2", &e), 0);
  json_t *run = get_run(s, "a");
  cr_expect_str_eq(str(run, "lease_owner"), "w1");
  json_decref(run);
  cr_expect_eq(claim(s, "w2", 60000, id), -ENOENT);
  cr_expect_eq(store_lease_release(s, "a", "w1", &e), 0);
  run = get_run(s, "a");
  cr_expect(json_is_null(json_object_get(run, "lease_owner")));
  cr_expect(json_is_null(json_object_get(run, "lease_until")));
  json_decref(run);
  cr_expect_eq(store_lease_renew(s, "a", "w1", 60000, &e), -ESTALE);
  cr_assert_eq(claim(s, "w2", 60000, id), 0);
  cr_expect_str_eq(id, "a");
  store_close(s);
}

#define CLAIM_RUNS 200
#define CLAIMERS 4

struct claimer {
  struct store *s;          /* NULL: opens its own */
  pthread_barrier_t *start; /* waited on once open, when not NULL */
  char owner[16];
  char ids[CLAIM_RUNS + 1][16];
  int n;
  int error;
};

static void *claimer(void *arg) {
  struct claimer *c = arg;
  struct sbx_error e = {0};
  struct store *own = NULL;
  int r = c->s ? 0 : store_open(url, &own, &e);
  if (c->start)
    (void)pthread_barrier_wait(c->start);
  if (r < 0) {
    c->error = r;
    return NULL;
  }
  struct store *s = c->s ? c->s : own;
  /* One more slot than runs: a run taken twice shows as a claim too many. */
  while ((r = store_lease_claim(s, c->owner, queued_only, 60000, c->ids[c->n],
                                sizeof(c->ids[0]), &e)) == 0) {
    if (++c->n == CLAIM_RUNS + 1)
      break;
    /* A while at the run, as a controller would be: the others get in. */
    struct timespec ts = {0, 300 * 1000};
    nanosleep(&ts, NULL);
  }
  if (r != -ENOENT && !c->error)
    c->error = r;
  store_close(own);
  return NULL;
}

/* CLAIMERS threads claim until none is left: every run exactly once. */
static void claim_concurrently(bool shared) {
  struct store *s = open_store();
  for (int i = 0; i < CLAIM_RUNS; i++) {
    char id[16];
    (void)snprintf(id, sizeof(id), "run%03d", i);
    insert_run(s, id, "amy", "queued");
  }
  static struct claimer c[CLAIMERS];
  pthread_t t[CLAIMERS];
  pthread_barrier_t start;
  cr_assert_eq(pthread_barrier_init(&start, NULL, CLAIMERS), 0);
  for (int i = 0; i < CLAIMERS; i++) {
    memset(&c[i], 0, sizeof(c[i]));
    c[i].s = shared ? s : NULL;
    c[i].start = &start;
    (void)snprintf(c[i].owner, sizeof(c[i].owner), "w%d", i);
    cr_assert_eq(pthread_create(&t[i], NULL, claimer, &c[i]), 0);
  }
  int seen[CLAIM_RUNS] = {0};
  int total = 0;
  for (int i = 0; i < CLAIMERS; i++)
    cr_assert_eq(pthread_join(t[i], NULL), 0);
  (void)pthread_barrier_destroy(&start);
  for (int i = 0; i < CLAIMERS; i++) {
    cr_expect_eq(c[i].error, 0, "claimer %d: %d", i, c[i].error);
    for (int k = 0; k < c[i].n; k++) {
      int n = -1;
      cr_assert_eq(sscanf(c[i].ids[k], "run%d", &n), 1);
      seen[n]++;
      json_t *run = get_run(s, c[i].ids[k]);
      cr_expect_str_eq(str(run, "lease_owner"), c[i].owner);
      json_decref(run);
    }
    total += c[i].n;
  }
  cr_expect_eq(total, CLAIM_RUNS);
  for (int i = 0; i < CLAIM_RUNS; i++)
    cr_expect_eq(seen[i], 1, "run%03d was taken %d times", i, seen[i]);
  store_close(s);
}

BOTH(concurrent_claims_on_own_connections) {
  claim_concurrently(false);
}

BOTH(concurrent_claims_on_one_store) {
  claim_concurrently(true);
}

/* ---- the runner's state and journal -------------------------------------- */

BOTH(state) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  const char text[] = "{\"turn\": 3, \"text\": \"h\\u00e9\"}";
  cr_expect_eq(store_state_put(s, "r1", text, sizeof(text) - 1, &e), -ENOENT);
  insert_run(s, "r1", "amy", "running");
  char *got = (char *)1;
  size_t len = 7;
  cr_expect_eq(store_state_get(s, "r1", &got, &len, &e), -ENOENT);
  cr_expect_null(got);
  cr_expect(strstr(e.msg, "run \"r1\" has no state"), "%s", e.msg);
  cr_expect_eq(store_state_get(s, "r9", &got, &len, &e), -ENOENT);

  cr_assert_eq(store_state_put(s, "r1", text, sizeof(text) - 1, &e), 0, "%s",
               e.msg);
  cr_assert_eq(store_state_get(s, "r1", &got, &len, &e), 0);
  cr_expect_eq(len, sizeof(text) - 1);
  cr_expect_str_eq(got, text);
  free(got);
  /* Replaced, and only the LEN bytes given. */
  cr_assert_eq(store_state_put(s, "r1", "{}xyz", 2, &e), 0);
  cr_assert_eq(store_state_get(s, "r1", &got, &len, &e), 0);
  cr_expect_eq(len, 2);
  cr_expect_str_eq(got, "{}");
  free(got);
  cr_assert_eq(store_state_put(s, "r1", "", 0, &e), 0);
  cr_assert_eq(store_state_get(s, "r1", &got, &len, &e), 0);
  cr_expect_eq(len, 0);
  cr_expect_str_eq(got, "");
  free(got);

  /* Over the limit of a cell: refused before a byte of it is read. */
  char *big = malloc(STORE_MAX_TEXT + 1);
  cr_assert_not_null(big);
  cr_expect_eq(store_state_put(s, "r1", big, STORE_MAX_TEXT + 1, &e), -EFBIG);
  cr_expect_eq(store_journal_append(s, "r1", big, STORE_MAX_TEXT + 1, &e),
               -EFBIG);
  free(big);
  store_close(s);
}

BOTH(journal) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  cr_expect_eq(store_journal_append(s, "r1", "x", 1, &e), -ENOENT);
  insert_run(s, "r1", "amy", "running");
  insert_run(s, "r2", "amy", "running");
  char *got = NULL;
  size_t len = 9;
  cr_assert_eq(store_journal_read(s, "r1", 1024, &got, &len, &e), 0);
  cr_expect_str_eq(got, "");
  cr_expect_eq(len, 0);
  free(got);

  char want[4096] = "";
  size_t wlen = 0;
  for (int i = 0; i < 100; i++) {
    char chunk[32];
    int n = snprintf(chunk, sizeof(chunk), "{\"step\":%d}\n", i);
    cr_assert_eq(store_journal_append(s, "r1", chunk, (size_t)n, &e), 0, "%s",
                 e.msg);
    memcpy(want + wlen, chunk, (size_t)n);
    wlen += (size_t)n;
    if (i % 10 == 0)
      cr_assert_eq(store_journal_append(s, "r2", "other\n", 6, &e), 0);
  }
  cr_assert_eq(store_journal_append(s, "r1", "tail-not-this", 4, &e), 0);
  memcpy(want + wlen, "tail", 4);
  wlen += 4;
  want[wlen] = '\0';

  cr_assert_eq(store_journal_read(s, "r1", wlen, &got, &len, &e), 0, "%s",
               e.msg);
  cr_expect_eq(len, wlen);
  cr_expect_str_eq(got, want);
  free(got);
  got = (char *)1;
  cr_expect_eq(store_journal_read(s, "r1", wlen - 1, &got, &len, &e), -EFBIG);
  cr_expect_null(got);
  cr_expect(strstr(e.msg, "journal of run \"r1\" is over"), "%s", e.msg);
  cr_assert_eq(store_journal_read(s, "r2", 1024, &got, &len, &e), 0);
  cr_expect_eq(len, 60);
  free(got);
  store_close(s);
}

BOTH(state_clear) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  insert_run(s, "r1", "amy", "running");
  insert_run(s, "r2", "amy", "running");
  cr_assert_eq(store_state_put(s, "r1", "{\"a\":1}", 7, &e), 0, "%s", e.msg);
  cr_assert_eq(store_state_put(s, "r2", "{\"b\":2}", 7, &e), 0, "%s", e.msg);
  cr_assert_eq(store_journal_append(s, "r1", "one\n", 4, &e), 0);
  cr_assert_eq(store_journal_append(s, "r2", "two\n", 4, &e), 0);
  cr_assert_eq(store_state_clear(s, "r1", &e), 0, "%s", e.msg);
  char *got = NULL;
  size_t len = 0;
  cr_expect_eq(store_state_get(s, "r1", &got, &len, &e), -ENOENT);
  cr_assert_eq(store_journal_read(s, "r1", 1024, &got, &len, &e), 0);
  cr_expect_str_eq(got, "");
  free(got);
  /* The other run keeps both. */
  cr_assert_eq(store_state_get(s, "r2", &got, &len, &e), 0);
  cr_expect_str_eq(got, "{\"b\":2}");
  free(got);
  cr_assert_eq(store_journal_read(s, "r2", 1024, &got, &len, &e), 0);
  cr_expect_str_eq(got, "two\n");
  free(got);
  /* The run's row stays: a state can be put again. */
  cr_expect_eq(store_state_put(s, "r1", "{}", 2, &e), 0, "%s", e.msg);
  store_close(s);
}

BOTH(journal_cut) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  insert_run(s, "r1", "amy", "running");
  insert_run(s, "r2", "amy", "running");
  const char *chunks[] = {"aa\n", "bbb\n", "cccc\n", "dd\n"};
  for (size_t i = 0; i < 4; i++)
    cr_assert_eq(
        store_journal_append(s, "r1", chunks[i], strlen(chunks[i]), &e), 0);
  cr_assert_eq(store_journal_append(s, "r2", "keep\n", 5, &e), 0);
  /* At a chunk's end: the chunks after it go. */
  cr_assert_eq(store_journal_cut(s, "r1", 7, &e), 0, "%s", e.msg);
  char *got = NULL;
  size_t len = 0;
  cr_assert_eq(store_journal_read(s, "r1", 1024, &got, &len, &e), 0);
  cr_expect_str_eq(got, "aa\nbbb\n");
  free(got);
  /* Appends go on after the cut. */
  cr_assert_eq(store_journal_append(s, "r1", "e\n", 2, &e), 0);
  /* Inside a chunk: its first bytes stay. */
  cr_assert_eq(store_journal_cut(s, "r1", 5, &e), 0, "%s", e.msg);
  cr_assert_eq(store_journal_read(s, "r1", 1024, &got, &len, &e), 0);
  cr_expect_str_eq(got, "aa\nbb");
  free(got);
  /* Past the end: nothing changes. */
  cr_assert_eq(store_journal_cut(s, "r1", 100, &e), 0);
  cr_assert_eq(store_journal_read(s, "r1", 1024, &got, &len, &e), 0);
  cr_expect_str_eq(got, "aa\nbb");
  free(got);
  cr_assert_eq(store_journal_read(s, "r2", 1024, &got, &len, &e), 0);
  cr_expect_str_eq(got, "keep\n", "another run's journal is not cut");
  free(got);
  store_close(s);
}

/* ---- events -------------------------------------------------------------- */

static void events(struct store *s, int64_t after, size_t limit,
                   const char *want) {
  json_t *ev = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(store_events_after(s, "r1", after, limit, &ev, &e), 0, "%s",
               e.msg);
  char got[256] = "";
  size_t k = 0, i;
  json_t *v;
  json_array_foreach(ev, i, v) {
    k += (size_t)snprintf(got + k, sizeof(got) - k, "%s%lld:%s:%s",
                          i ? " " : "", (long long)num(v, "seq"),
                          str(v, "type"), str(v, "data"));
  }
  cr_expect_str_eq(got, want);
  json_decref(ev);
}

/* Several events in one statement: all of them, or none when one of them
 * is recorded already. */
BOTH(events_in_a_batch) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  insert_run(s, "r1", "amy", "running");
  json_t *batch = json_pack(
      "[{s:i, s:s, s:s}, {s:i, s:s, s:s}, {s:i, s:s, s:s}]", "seq", 1, "type",
      "turn", "data", "{\"n\":1}", "seq", 2, "type", "call", "data",
      "{\"s\":\"\\u00fc \\\"q\\\"\"}", "seq", 3, "type", "turn", "data", "{}");
  cr_assert_eq(store_events_add(s, "r1", batch, &e), 0, "%s", e.msg);
  json_decref(batch);
  events(s, 0, 10,
         "1:turn:{\"n\":1} 2:call:{\"s\":\"\\u00fc \\\"q\\\"\"} 3:turn:{}");
  batch =
      json_pack("[{s:i, s:s, s:s}, {s:i, s:s, s:s}]", "seq", 4, "type", "turn",
                "data", "{}", "seq", 3, "type", "turn", "data", "{}");
  cr_expect_eq(store_events_add(s, "r1", batch, &e), -EEXIST);
  cr_expect(strstr(e.msg, "is recorded already"), "%s", e.msg);
  json_decref(batch);
  events(s, 3, 10, ""); /* event 4 was not recorded either */
  json_t *empty = json_array();
  cr_expect_eq(store_events_add(s, "r1", empty, &e), -EINVAL);
  json_decref(empty);
  json_t *bad = json_pack("[{s:s, s:s}]", "type", "turn", "data", "{}");
  cr_expect_eq(store_events_add(s, "r1", bad, &e), -EINVAL);
  json_decref(bad);
  store_close(s);
}

BOTH(events) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  cr_expect_eq(store_event_add(s, "r1", 1, "turn", "{}", &e), -ENOENT);
  insert_run(s, "r1", "amy", "running");
  insert_run(s, "r2", "amy", "running");
  for (int i = 1; i <= 5; i++) {
    char data[32];
    (void)snprintf(data, sizeof(data), "{\"n\":%d}", i);
    cr_assert_eq(store_event_add(s, "r1", i, i % 2 ? "turn" : "call", data, &e),
                 0, "%s", e.msg);
  }
  cr_assert_eq(store_event_add(s, "r2", 3, "turn", "{}", &e), 0);
  cr_expect_eq(store_event_add(s, "r1", 3, "turn", "{}", &e), -EEXIST);
  cr_expect(strstr(e.msg, "event 3 of run \"r1\" is recorded already"), "%s",
            e.msg);

  events(s, 0, 2, "1:turn:{\"n\":1} 2:call:{\"n\":2}");
  events(s, 2, 10, "3:turn:{\"n\":3} 4:call:{\"n\":4} 5:turn:{\"n\":5}");
  events(s, 4, 1, "5:turn:{\"n\":5}");
  events(s, 5, 10, "");
  json_t *run = get_run(s, "r1");
  cr_expect_eq(num(run, "last_seq"), 5);
  json_decref(run);
  run = get_run(s, "r2");
  cr_expect_eq(num(run, "last_seq"), 3);
  json_decref(run);
  json_t *ev = NULL;
  cr_expect_eq(store_events_after(s, "r1", 0, 0, &ev, &e), -EINVAL);
  cr_expect_null(ev);
  store_close(s);
}

/* ---- decisions ----------------------------------------------------------- */

BOTH(decisions) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  cr_expect_eq(store_decision_add(s, "r1", "c1", "approve", NULL, &e), -ENOENT);
  insert_run(s, "r1", "amy", "paused");
  json_t *d = NULL;
  cr_assert_eq(store_decisions_get(s, "r1", &d, &e), 0);
  cr_expect_eq(json_object_size(d), 0);
  json_decref(d);

  cr_assert_eq(store_decision_add(s, "r1", "c1", "approve", "looks fine", &e),
               0, "%s", e.msg);
  cr_assert_eq(store_decision_add(s, "r1", "c2", "reject", NULL, &e), 0);
  cr_expect_eq(store_decision_add(s, "r1", "c1", "reject", NULL, &e), -EEXIST);
  cr_expect(strstr(e.msg, "call \"c1\" of run \"r1\" is decided already"), "%s",
            e.msg);
  cr_expect_eq(store_decision_add(s, "r1", "c3", "maybe", NULL, &e), -EINVAL);
  cr_expect(strstr(e.msg, "\"maybe\""), "%s", e.msg);

  cr_assert_eq(store_decisions_get(s, "r1", &d, &e), 0);
  json_t *want =
      json_pack("{s:{s:s, s:s}, s:{s:s, s:n}}", "c1", "decision", "approve",
                "reason", "looks fine", "c2", "decision", "reject", "reason");
  cr_expect(json_equal(d, want), "%s", json_dumps(d, 0));
  json_decref(want);
  json_decref(d);
  store_close(s);
}

/* ---- idempotency keys ---------------------------------------------------- */

BOTH(idempotency) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  int status = 7;
  char *body = (char *)1;
  cr_expect_eq(store_idem_get(s, "amy", "k1", &status, &body, &e), -ENOENT);
  cr_expect_null(body);
  cr_assert_eq(store_idem_put(s, "amy", "k1", 201, "{\"id\":\"r1\"}", &e), 0,
               "%s", e.msg);
  cr_expect_eq(store_idem_put(s, "amy", "k1", 500, "{}", &e), -EEXIST);
  cr_assert_eq(store_idem_put(s, "bob", "k1", 409, "", &e), 0);
  cr_assert_eq(store_idem_get(s, "amy", "k1", &status, &body, &e), 0);
  cr_expect_eq(status, 201);
  cr_expect_str_eq(body, "{\"id\":\"r1\"}");
  free(body);
  cr_assert_eq(store_idem_get(s, "bob", "k1", &status, &body, &e), 0);
  cr_expect_eq(status, 409);
  cr_expect_str_eq(body, "");
  free(body);
  cr_expect_eq(store_idem_get(s, "amy", "k2", &status, &body, &e), -ENOENT);
  store_close(s);
}

/* ---- sandbox records ----------------------------------------------------- */

static void sandboxes(struct store *s, const char *owner, const char *want) {
  json_t *all = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(store_sandbox_list(s, owner, &all, &e), 0, "%s", e.msg);
  char got[128] = "";
  size_t k = 0, i;
  json_t *v;
  json_array_foreach(all, i, v) {
    k += (size_t)snprintf(got + k, sizeof(got) - k, "%s%s", i ? " " : "",
                          str(v, "id"));
  }
  cr_expect_str_eq(got, want);
  json_decref(all);
}

BOTH(sandboxes) {
  struct store *s = open_store();
  struct sbx_error e = {0};
  const char *ids[] = {"sb-c", "sb-a", "sb-b"};
  const char *owners[] = {"amy", "bob", "amy"};
  int64_t t0 = store_now_ms();
  for (int i = 0; i < 3; i++) {
    json_t *rec = json_pack("{s:s, s:i}", "backend", "local", "n", i);
    cr_assert_eq(store_sandbox_put(s, ids[i], owners[i], rec, &e), 0, "%s",
                 e.msg);
    json_decref(rec);
    sleep_ms(3);
  }
  json_t *sb = NULL;
  cr_assert_eq(store_sandbox_get(s, "sb-a", &sb, &e), 0);
  json_t *want = json_pack("{s:s, s:i}", "backend", "local", "n", 1);
  cr_expect_str_eq(str(sb, "id"), "sb-a");
  cr_expect_str_eq(str(sb, "owner"), "bob");
  cr_expect(json_equal(json_object_get(sb, "record"), want));
  cr_expect(num(sb, "created_at") >= t0 &&
            num(sb, "created_at") <= store_now_ms());
  json_decref(want);
  json_decref(sb);

  sandboxes(s, NULL, "sb-c sb-a sb-b");
  sandboxes(s, "amy", "sb-c sb-b");
  sandboxes(s, "carl", "");
  /* A second put replaces the record and keeps its place. */
  json_t *rec = json_pack("{s:b}", "stopped", 1);
  cr_assert_eq(store_sandbox_put(s, "sb-c", "amy", rec, &e), 0);
  cr_assert_eq(store_sandbox_get(s, "sb-c", &sb, &e), 0);
  cr_expect(json_equal(json_object_get(sb, "record"), rec));
  json_decref(sb);
  json_decref(rec);
  sandboxes(s, NULL, "sb-c sb-a sb-b");

  cr_expect_eq(store_sandbox_remove(s, "sb-a", &e), 0);
  cr_expect_eq(store_sandbox_remove(s, "sb-a", &e), -ENOENT);
  cr_expect_eq(store_sandbox_get(s, "sb-a", &sb, &e), -ENOENT);
  cr_expect_null(sb);
  sandboxes(s, NULL, "sb-c sb-b");
  store_close(s);
}

/* ---- several writers at once --------------------------------------------- */

#define WRITES 200

struct writer {
  const char *prefix;
  int error;
};

/* Its own store handle on the same file: runs, their events and journals. */
static void *writer(void *arg) {
  struct writer *w = arg;
  struct sbx_error e = {0};
  struct store *s = NULL;
  if ((w->error = store_open(url, &s, &e)) < 0)
    return NULL;
  for (int i = 0; i < WRITES && !w->error; i++) {
    char id[32];
    (void)snprintf(id, sizeof(id), "%s%03d", w->prefix, i);
    json_t *req = json_object();
    w->error = store_run_insert(s, id, w->prefix, "queued", req, &e);
    json_decref(req);
    if (!w->error)
      w->error = store_event_add(s, id, 1, "start", "{}", &e);
    if (!w->error)
      w->error = store_journal_append(s, id, "x", 1, &e);
  }
  if (w->error)
    fprintf(stderr, "writer %s: %s\n", w->prefix, e.msg);
  store_close(s);
  return NULL;
}

Test(store_sqlite, two_handles_write_at_once) {
  store_close(open_store());
  struct writer w[2] = {{.prefix = "a"}, {.prefix = "b"}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, writer, &w[i]), 0);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(pthread_join(t[i], NULL), 0);
    cr_expect_eq(w[i].error, 0);
  }
  struct store *s = open_store();
  json_t *counts = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(store_run_counts(s, &counts, &e), 0);
  cr_expect_eq(num(counts, "queued"), 2 * WRITES);
  json_decref(counts);
  json_t *run = get_run(s, "b199");
  cr_expect_eq(num(run, "last_seq"), 1);
  json_decref(run);
  store_close(s);
}

/* A second process claims from the same file while this one does: the runs
 * are shared out, none twice. */
Test(store_sqlite, two_processes_claim_at_once) {
  struct store *s = open_store();
  for (int i = 0; i < CLAIM_RUNS; i++) {
    char id[16];
    (void)snprintf(id, sizeof(id), "run%03d", i);
    insert_run(s, id, "amy", "queued");
  }
  store_close(s);
  int ids[2], ready[2];
  cr_assert_eq(pipe(ids), 0);
  cr_assert_eq(pipe(ready), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* Its own connection, opened after the fork; go once both are open. */
    struct claimer c = {.s = open_store(), .owner = "child"};
    (void)!write(ready[1], "", 1);
    claimer(&c);
    for (int i = 0; i < c.n; i++)
      (void)!write(ids[1], c.ids[i], sizeof(c.ids[i]));
    store_close(c.s);
    _exit(c.error ? 1 : 0);
  }
  close(ids[1]);
  struct claimer mine = {.s = open_store(), .owner = "parent"};
  char b;
  cr_assert_eq(read(ready[0], &b, 1), 1);
  claimer(&mine);
  int seen[CLAIM_RUNS] = {0};
  char id[16];
  int theirs = 0;
  while (read(ids[0], id, sizeof(id)) == (ssize_t)sizeof(id)) {
    int n = -1;
    cr_assert_eq(sscanf(id, "run%d", &n), 1);
    seen[n]++;
    theirs++;
  }
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cr_expect_eq(mine.error, 0);
  for (int i = 0; i < mine.n; i++) {
    int n = -1;
    cr_assert_eq(sscanf(mine.ids[i], "run%d", &n), 1);
    seen[n]++;
  }
  cr_expect_eq(mine.n + theirs, CLAIM_RUNS);
  for (int i = 0; i < CLAIM_RUNS; i++)
    cr_expect_eq(seen[i], 1, "run%03d was taken %d times", i, seen[i]);
  store_close(mine.s);
}

/* ---- PostgreSQL's connection --------------------------------------------- */

/* The server ends the store's connection (as a restart or a failover
 * would): the next read resets it and runs. */
Test(store_pg, a_broken_connection_is_reset) {
  pg_begin();
  struct store *s = open_store();
  insert_run(s, "r1", "amy", "queued");
  raw_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
          "WHERE application_name = 'sbx'");
  json_t *run = get_run(s, "r1");
  cr_expect_str_eq(str(run, "status"), "queued");
  json_decref(run);
  /* A write that may not run twice fails once, and the next one works. */
  raw_sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
          "WHERE application_name = 'sbx'");
  struct sbx_error e = {0};
  json_t *req = json_object();
  int r = store_run_insert(s, "r2", "amy", "queued", req, &e);
  cr_expect_eq(r, -EIO, "%d %s", r, e.msg);
  cr_expect(strstr(e.msg, "terminat"), "%s", e.msg);
  cr_expect_eq(store_run_insert(s, "r2", "amy", "queued", req, &e), 0, "%s",
               e.msg);
  json_decref(req);
  store_close(s);
}
