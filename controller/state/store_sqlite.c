/* The SQLite store: one connection per store under a mutex, in WAL mode so
 * that readers never wait for the writer, and writes in BEGIN IMMEDIATE
 * transactions retried a few times when another connection (or another
 * process) holds the database past the busy timeout. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "controller/state/store_internal.h"
#include "shared/cleanup.h"

#define SQ_BUSY_MS 5000 /* sqlite3_busy_timeout: how long a lock is awaited */
#define SQ_TRIES 5      /* attempts of a transaction that found it busy */
#define SQ_SEQ "INTEGER PRIMARY KEY AUTOINCREMENT"

#define SQ_CACHE 48 /* prepared statements kept, by their SQL's address */

struct sq_store {
  struct store base;
  sqlite3 *db;
  pthread_mutex_t mu; /* one call at a time on db, and the cache */
  /* Statements prepared once and reset after each use: their SQL is one
   * of this file's literals, so its address names it. */
  struct {
    const char *sql;
    sqlite3_stmt *st;
  } cache[SQ_CACHE];
  size_t ncache;
};

static struct sq_store *sq(struct store *s) {
  return (struct sq_store *)s;
}

static int sq_errno(int rc) {
  switch (rc) {
  case SQLITE_CONSTRAINT_PRIMARYKEY:
  case SQLITE_CONSTRAINT_UNIQUE:
    return EEXIST;
  case SQLITE_CONSTRAINT_FOREIGNKEY:
    return ENOENT;
  case SQLITE_TOOBIG:
    return EFBIG;
  case SQLITE_NOMEM:
    return ENOMEM;
  default:
    return EIO;
  }
}

static bool sq_busy(int rc) {
  return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
}

/* Fills E with the connection's message for RC. */
static int sq_fail(struct sq_store *q, int rc, struct sbx_error *e) {
  return sbx_error_set(e, SBX_OK, sq_errno(rc), "%s: %s", q->base.where,
                       sqlite3_errmsg(q->db));
}

static int sq_plain(struct sq_store *q, const char *sql, struct sbx_error *e) {
  int rc = sqlite3_exec(q->db, sql, NULL, NULL, NULL);
  if (rc != SQLITE_OK)
    (void)sq_fail(q, rc, e);
  return rc;
}

static const char *sq_text(const struct store_row *r, int col, size_t *len) {
  *len = 0;
  if (sqlite3_column_type(r->res, col) == SQLITE_NULL)
    return NULL;
  const char *t = (const char *)sqlite3_column_text(r->res, col);
  *len = (size_t)sqlite3_column_bytes(r->res, col);
  return t;
}

static int64_t sq_integer(const struct store_row *r, int col) {
  return sqlite3_column_int64(r->res, col);
}

static int sq_bind(sqlite3_stmt *st, int i, const struct store_arg *a) {
  if (a->is_int)
    return sqlite3_bind_int64(st, i, a->integer);
  if (!a->text)
    return sqlite3_bind_null(st, i);
  return sqlite3_bind_text64(st, i, a->text, a->len, SQLITE_STATIC,
                             SQLITE_UTF8);
}

/* A statement with its parameters and what takes its rows. */
struct sq_call {
  const char *sql;
  const struct store_arg *args;
  size_t n;
  store_row_fn fn;
  void *arg;
  bool write;       /* in a BEGIN IMMEDIATE transaction */
  int64_t *changed; /* may be NULL */
  int cb;           /* a row callback's error */
};

/* The statement of SQL (a literal of this file), prepared once: SQLite's
 * code, with *ST borrowed from the cache (or new when it is full: *OWN). */
static int sq_prepare(struct sq_store *q, const char *sql, sqlite3_stmt **st,
                      bool *own) {
  *own = false;
  for (size_t i = 0; i < q->ncache; i++)
    if (q->cache[i].sql == sql) {
      *st = q->cache[i].st;
      return SQLITE_OK;
    }
  int rc =
      sqlite3_prepare_v3(q->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
  if (rc != SQLITE_OK)
    return rc;
  if (q->ncache < SQ_CACHE) {
    q->cache[q->ncache].sql = sql;
    q->cache[q->ncache++].st = *st;
  } else {
    *own = true;
  }
  return SQLITE_OK;
}

/* Lets go of a statement of sq_prepare. */
static void sq_done(sqlite3_stmt *st, bool own) {
  if (own) {
    (void)sqlite3_finalize(st);
    return;
  }
  (void)sqlite3_reset(st);
  (void)sqlite3_clear_bindings(st);
}

/* BEGIN IMMEDIATE or COMMIT (a literal), from the cache. */
static int sq_simple(struct sq_store *q, const char *sql, struct sbx_error *e) {
  sqlite3_stmt *st = NULL;
  bool own = false;
  int rc = sq_prepare(q, sql, &st, &own);
  if (rc == SQLITE_OK)
    rc = sqlite3_step(st);
  if (rc == SQLITE_DONE)
    rc = SQLITE_OK;
  if (rc != SQLITE_OK)
    (void)sq_fail(q, rc, e);
  if (st)
    sq_done(st, own);
  return rc;
}

/* Prepares, binds and steps the statement to its end. SQLite's code:
 * SQLITE_DONE when it ran, SQLITE_ROW when a callback stopped it. */
static int sq_statement(struct sq_store *q, struct sq_call *c,
                        struct sbx_error *e) {
  sqlite3_stmt *st = NULL;
  bool own = false;
  int rc = sq_prepare(q, c->sql, &st, &own);
  for (size_t i = 0; rc == SQLITE_OK && i < c->n; i++)
    rc = sq_bind(st, (int)i + 1, &c->args[i]);
  struct store_row row = {.text = sq_text, .integer = sq_integer, .res = st};
  if (rc == SQLITE_OK)
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      if (c->fn && (c->cb = c->fn(c->arg, &row, e)) < 0)
        break;
  if (rc != SQLITE_DONE && rc != SQLITE_ROW)
    (void)sq_fail(q, rc, e);
  if (rc == SQLITE_DONE && c->changed)
    *c->changed = sqlite3_changes64(q->db);
  if (st)
    sq_done(st, own);
  return rc;
}

/* One attempt at the call, committed when it writes: SQLITE_OK or the
 * code that stopped it (rolled back). */
static int sq_attempt(struct sq_store *q, void *arg, struct sbx_error *e) {
  struct sq_call *c = arg;
  c->cb = 0;
  static const char begin[] = "BEGIN IMMEDIATE", commit[] = "COMMIT";
  int rc = c->write ? sq_simple(q, begin, e) : SQLITE_OK;
  if (rc == SQLITE_OK)
    rc = sq_statement(q, c, e);
  if (rc == SQLITE_DONE)
    rc = c->write ? sq_simple(q, commit, e) : SQLITE_OK;
  if (rc != SQLITE_OK && !sqlite3_get_autocommit(q->db))
    (void)sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
  return rc;
}

/* Runs ATTEMPT until it is not busy, SQ_TRIES times at most, with a short
 * sleep between (the busy timeout has waited already). */
static int sq_retry(struct sq_store *q,
                    int (*attempt)(struct sq_store *, void *,
                                   struct sbx_error *),
                    void *arg, struct sbx_error *e) {
  int rc;
  for (int i = 1;; i++) {
    rc = attempt(q, arg, e);
    if (!sq_busy(rc) || i == SQ_TRIES)
      return rc;
    struct timespec ts = {0, 10 * 1000 * 1000L * i};
    (void)nanosleep(&ts, NULL);
  }
}

/* Runs SQL, which must be a string literal (the statement cache knows it
 * by its address), with the N arguments A. */
static int sq_exec(struct store *s, bool write, const char *sql,
                   const struct store_arg *a, size_t n, store_row_fn fn,
                   void *arg, int64_t *changed, struct sbx_error *e) {
  int r = store_args_check(s, a, n, e);
  if (r < 0)
    return r;
  struct sq_store *q = sq(s);
  struct sq_call c = {.sql = sql,
                      .args = a,
                      .n = n,
                      .fn = fn,
                      .arg = arg,
                      .write = write,
                      .changed = changed};
  pthread_mutex_lock(&q->mu);
  int rc = sq_retry(q, sq_attempt, &c, e);
  pthread_mutex_unlock(&q->mu);
  if (c.cb < 0)
    return c.cb;
  return rc == SQLITE_OK ? 0 : -sq_errno(rc);
}

#define SQ_READ(s, sql, a, fn, arg, e)                                         \
  sq_exec(s, false, sql, a, SBX_ARRAY_SIZE(a), fn, arg, NULL, e)
#define SQ_WRITE(s, sql, a, changed, e)                                        \
  sq_exec(s, true, sql, a, SBX_ARRAY_SIZE(a), NULL, NULL, changed, e)

/* ---- open ---------------------------------------------------------------- */

/* Creates the schema where the database has none, in one transaction, and
 * reads its version into *(int64_t *)ARG. */
static int sq_schema(struct sq_store *q, void *arg, struct sbx_error *e) {
  int64_t *version = arg;
  *version = 0;
  int rc = sq_plain(q, "BEGIN IMMEDIATE; " STORE_META_TABLE, e);
  struct sq_call c = {
      .sql = STORE_META_VERSION, .fn = store_row_int64, .arg = version};
  if (rc == SQLITE_OK && (rc = sq_statement(q, &c, e)) == SQLITE_DONE)
    rc = SQLITE_OK;
  if (rc == SQLITE_OK && *version == 0) {
    rc = sq_plain(q, STORE_SCHEMA(SQ_SEQ), e);
    *version = STORE_SCHEMA_VERSION;
  }
  if (rc == SQLITE_OK)
    rc = sq_plain(q, "COMMIT", e);
  if (rc != SQLITE_OK && !sqlite3_get_autocommit(q->db))
    (void)sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
  return rc;
}

static int wal_row(void *arg, const struct store_row *row,
                   struct sbx_error *e) {
  size_t len;
  const char *mode = row->text(row, 0, &len);
  *(bool *)arg = mode && strcmp(mode, "wal") == 0;
  return 0;
}

/* Switches the database to WAL: the pragma says the mode it is in after,
 * which stays the old one while another connection is in the way. */
static int sq_wal(struct sq_store *q, void *arg, struct sbx_error *e) {
  bool *wal = arg;
  struct sq_call c = {
      .sql = "PRAGMA journal_mode = WAL", .fn = wal_row, .arg = wal};
  int rc = sq_statement(q, &c, e);
  if (rc == SQLITE_DONE && !*wal)
    return SQLITE_BUSY;
  return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* The connection set up: a new file made 0600 first (SQLite would create
 * it with the umask's mode; its -wal and -shm files take the database
 * file's), then the pragmas and the schema. An existing file is left
 * alone: closing a descriptor of it would drop the locks SQLite holds on it
 * for this process's other connections. */
static int sq_connect(struct sq_store *q, const char *path, int64_t *version,
                      struct sbx_error *e) {
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_OK, errno,
                         "cannot create the state store \"%s\": %m", path);
  if (fd >= 0)
    (void)close(fd);
  int rc = sqlite3_open_v2(path, &q->db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL);
  if (rc != SQLITE_OK)
    return q->db ? sq_fail(q, rc, e)
                 : sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  (void)sqlite3_extended_result_codes(q->db, 1);
  (void)sqlite3_busy_timeout(q->db, SQ_BUSY_MS);
  bool wal = false;
  rc = sq_retry(q, sq_wal, &wal, e);
  if (rc == SQLITE_BUSY && !wal)
    return sbx_error_set(e, SBX_UNAVAILABLE, EIO,
                         "%s: cannot switch to WAL: another connection keeps "
                         "the database in its journal mode",
                         q->base.where);
  /* A run writes some 60 KiB of WAL pages a turn (its journal and
   * events): checkpoints every 32 MiB rather than SQLite's 4 MiB keep
   * their fsyncs out of most turns. */
  if (rc == SQLITE_OK)
    rc = sq_plain(q,
                  "PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL; "
                  "PRAGMA wal_autocheckpoint = 8192",
                  e);
  if (rc == SQLITE_OK)
    rc = sq_retry(q, sq_schema, version, e);
  return rc == SQLITE_OK ? 0 : -sq_errno(rc);
}

static void sq_close(struct store *s) {
  struct sq_store *q = sq(s);
  for (size_t i = 0; i < q->ncache; i++)
    (void)sqlite3_finalize(q->cache[i].st);
  (void)sqlite3_close(q->db);
  (void)pthread_mutex_destroy(&q->mu);
  free(q);
}

static int sq_open(const char *path, const char *where, struct store **out,
                   int64_t *version, struct sbx_error *e) {
  if (!*path)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the state store URL \"sqlite:\" names no file");
  struct sq_store *q = calloc(1, sizeof(*q));
  if (!q)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  q->base.ops = &store_sqlite_ops;
  (void)snprintf(q->base.where, sizeof(q->base.where), "%s", where);
  if (pthread_mutex_init(&q->mu, NULL) != 0) {
    free(q);
    return sbx_error_set(e, SBX_OK, ENOMEM, "cannot create a mutex");
  }
  int r = sq_connect(q, path, version, e);
  if (r < 0) {
    sq_close(&q->base);
    return r;
  }
  *out = &q->base;
  return 0;
}

/* ---- tokens -------------------------------------------------------------- */

static int sq_token_add(struct store *s, const char *id, const char *name,
                        const char *hash, const char *scopes, int64_t now,
                        struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(name),
                                store_text(hash), store_text(scopes),
                                store_int(now)};
  return SQ_WRITE(s,
                  "INSERT INTO tokens (id, name, hash, scopes, created_at) "
                  "VALUES (?, ?, ?, ?, ?)",
                  a, NULL, e);
}

static int sq_token_get(struct store *s, const char *id, store_row_fn fn,
                        void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return SQ_READ(s, "SELECT " STORE_TOKEN_COLUMNS " FROM tokens WHERE id = ?",
                 a, fn, arg, e);
}

static int sq_token_list(struct store *s, store_row_fn fn, void *arg,
                         struct sbx_error *e) {
  return sq_exec(s, false,
                 "SELECT " STORE_TOKEN_COLUMNS " FROM tokens ORDER BY name",
                 NULL, 0, fn, arg, NULL, e);
}

static int sq_token_remove(struct store *s, const char *name, int64_t *changed,
                           struct sbx_error *e) {
  const struct store_arg a[] = {store_text(name)};
  return SQ_WRITE(s, "DELETE FROM tokens WHERE name = ?", a, changed, e);
}

/* ---- runs ---------------------------------------------------------------- */

static int sq_run_insert(struct store *s, const char *id, const char *owner,
                         const char *status, const char *request, int64_t now,
                         struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id),    store_text(status),
                                store_text(owner), store_text(request),
                                store_int(now),    store_int(now)};
  return SQ_WRITE(s,
                  "INSERT INTO runs (id, status, owner, request, created_at, "
                  "updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                  a, NULL, e);
}

static int sq_run_get(struct store *s, const char *id, store_row_fn fn,
                      void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return SQ_READ(s, "SELECT " STORE_RUN_COLUMNS " FROM runs WHERE id = ?", a,
                 fn, arg, e);
}

static int sq_run_list(struct store *s, const char *status, const char *owner,
                       int64_t before, int64_t limit, store_row_fn fn,
                       void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(status), store_text(owner),
                                store_int(before), store_int(limit)};
  return SQ_READ(s,
                 "SELECT " STORE_RUN_COLUMNS " FROM runs "
                 "WHERE (?1 IS NULL OR status = ?1) "
                 "AND (?2 IS NULL OR owner = ?2) AND (?3 = 0 OR n < ?3) "
                 "ORDER BY n DESC LIMIT ?4",
                 a, fn, arg, e);
}

static int sq_run_update(struct store *s, const char *id, const char *from,
                         const char *status, const char *result, int64_t now,
                         int64_t *changed, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(status), store_text(result),
                                store_int(now), store_text(id),
                                store_text(from)};
  return SQ_WRITE(s,
                  "UPDATE runs SET status = COALESCE(?1, status), "
                  "result = COALESCE(?2, result), updated_at = ?3 "
                  "WHERE id = ?4 AND (?5 IS NULL OR "
                  "status IN (SELECT value FROM json_each(?5)))",
                  a, changed, e);
}

static int sq_run_cancel_request(struct store *s, const char *id, int64_t now,
                                 int64_t *changed, struct sbx_error *e) {
  const struct store_arg a[] = {store_int(now), store_text(id)};
  return SQ_WRITE(s,
                  "UPDATE runs SET cancel_requested = 1, updated_at = ? "
                  "WHERE id = ?",
                  a, changed, e);
}

static int sq_run_counts(struct store *s, store_row_fn fn, void *arg,
                         struct sbx_error *e) {
  return sq_exec(s, false, "SELECT status, COUNT(*) FROM runs GROUP BY status",
                 NULL, 0, fn, arg, NULL, e);
}

/* ---- leases -------------------------------------------------------------- */

/* One statement in a write transaction: no other connection can take the
 * same run between the choice and the update. */
static int sq_lease_claim(struct store *s, const char *owner,
                          const char *statuses, int64_t now, int64_t until,
                          store_row_fn fn, void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(owner), store_int(until),
                                store_text(statuses), store_int(now)};
  return sq_exec(s, true,
                 "UPDATE runs SET lease_owner = ?1, lease_until = ?2 "
                 "WHERE n = (SELECT n FROM runs WHERE status IN "
                 "(SELECT value FROM json_each(?3)) AND "
                 "owner <> '' AND (lease_owner IS NULL OR lease_until < ?4) "
                 "ORDER BY n LIMIT 1) RETURNING id",
                 a, SBX_ARRAY_SIZE(a), fn, arg, NULL, e);
}

static int sq_lease_renew(struct store *s, const char *id, const char *owner,
                          int64_t until, int64_t *changed,
                          struct sbx_error *e) {
  const struct store_arg a[] = {store_int(until), store_text(id),
                                store_text(owner)};
  return SQ_WRITE(s,
                  "UPDATE runs SET lease_until = ? "
                  "WHERE id = ? AND lease_owner = ?",
                  a, changed, e);
}

static int sq_lease_release(struct store *s, const char *id, const char *owner,
                            struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(owner)};
  return SQ_WRITE(s,
                  "UPDATE runs SET lease_owner = NULL, lease_until = NULL "
                  "WHERE id = ? AND lease_owner = ?",
                  a, NULL, e);
}

/* ---- the runner's state and journal -------------------------------------- */

static int sq_state_put(struct store *s, const char *id, const char *text,
                        size_t len, int64_t *changed, struct sbx_error *e) {
  const struct store_arg a[] = {store_textn(text, len), store_text(id)};
  return SQ_WRITE(s, "UPDATE runs SET state = ? WHERE id = ?", a, changed, e);
}

static int sq_state_get(struct store *s, const char *id, store_row_fn fn,
                        void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return SQ_READ(s, "SELECT state FROM runs WHERE id = ?", a, fn, arg, e);
}

static int sq_journal_append(struct store *s, const char *id, const char *text,
                             size_t len, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_textn(text, len)};
  return SQ_WRITE(s, "INSERT INTO journal (run_id, text) VALUES (?, ?)", a,
                  NULL, e);
}

static int sq_journal_keep(struct store *s, const char *id, int64_t nchunks,
                           struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_int(nchunks)};
  return SQ_WRITE(s,
                  "DELETE FROM journal WHERE run_id = ?1 AND n NOT IN "
                  "(SELECT n FROM journal WHERE run_id = ?1 ORDER BY n "
                  "LIMIT ?2)",
                  a, NULL, e);
}

static int sq_state_clear(struct store *s, const char *id,
                          struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  int r = SQ_WRITE(s, "DELETE FROM journal WHERE run_id = ?", a, NULL, e);
  if (r == 0)
    r = SQ_WRITE(s, "UPDATE runs SET state = NULL WHERE id = ?", a, NULL, e);
  return r;
}

static int sq_journal_read(struct store *s, const char *id, store_row_fn fn,
                           void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return SQ_READ(s, "SELECT text FROM journal WHERE run_id = ? ORDER BY n", a,
                 fn, arg, e);
}

/* ---- events and decisions ------------------------------------------------ */

static int sq_events_add(struct store *s, const char *id, const char *batch,
                         struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(batch)};
  return SQ_WRITE(s,
                  "INSERT INTO events (run_id, seq, type, data) "
                  "SELECT ?1, json_extract(value, '$[0]'), "
                  "json_extract(value, '$[1]'), json_extract(value, '$[2]') "
                  "FROM json_each(?2)",
                  a, NULL, e);
}

static int sq_events_after(struct store *s, const char *id, int64_t after,
                           int64_t limit, store_row_fn fn, void *arg,
                           struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_int(after),
                                store_int(limit)};
  return SQ_READ(s,
                 "SELECT " STORE_EVENT_COLUMNS " FROM events "
                 "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                 a, fn, arg, e);
}

static int sq_decision_add(struct store *s, const char *id, const char *call_id,
                           const char *decision, const char *reason,
                           struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(call_id),
                                store_text(decision), store_text(reason)};
  return SQ_WRITE(s,
                  "INSERT INTO decisions (run_id, call_id, decision, reason) "
                  "VALUES (?, ?, ?, ?)",
                  a, NULL, e);
}

static int sq_decisions_get(struct store *s, const char *id, store_row_fn fn,
                            void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return SQ_READ(s,
                 "SELECT " STORE_DECISION_COLUMNS " FROM decisions "
                 "WHERE run_id = ? ORDER BY call_id",
                 a, fn, arg, e);
}

/* ---- idempotency keys and sandbox records -------------------------------- */

static int sq_idem_get(struct store *s, const char *owner, const char *key,
                       store_row_fn fn, void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(owner), store_text(key)};
  return SQ_READ(s,
                 "SELECT status, body FROM idempotency "
                 "WHERE owner = ? AND key = ?",
                 a, fn, arg, e);
}

static int sq_idem_put(struct store *s, const char *owner, const char *key,
                       int status, const char *body, int64_t now,
                       struct sbx_error *e) {
  const struct store_arg a[] = {store_text(owner), store_text(key),
                                store_int(status), store_text(body),
                                store_int(now)};
  return SQ_WRITE(s,
                  "INSERT INTO idempotency (owner, key, status, body, "
                  "created_at) VALUES (?, ?, ?, ?, ?)",
                  a, NULL, e);
}

static int sq_sandbox_put(struct store *s, const char *id, const char *owner,
                          const char *record, int64_t now,
                          struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(owner),
                                store_text(record), store_int(now)};
  return SQ_WRITE(s,
                  "INSERT INTO sandboxes (id, owner, record, created_at) "
                  "VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                  "owner = excluded.owner, record = excluded.record",
                  a, NULL, e);
}

static int sq_sandbox_get(struct store *s, const char *id, store_row_fn fn,
                          void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return SQ_READ(s,
                 "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE id = ?",
                 a, fn, arg, e);
}

static int sq_sandbox_list(struct store *s, const char *owner, store_row_fn fn,
                           void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(owner)};
  return SQ_READ(s,
                 "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes "
                 "WHERE ?1 IS NULL OR owner = ?1 ORDER BY created_at, id",
                 a, fn, arg, e);
}

static int sq_sandbox_remove(struct store *s, const char *id, int64_t *changed,
                             struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return SQ_WRITE(s, "DELETE FROM sandboxes WHERE id = ?", a, changed, e);
}

const struct store_ops store_sqlite_ops = {
    .kind = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .token_add = sq_token_add,
    .token_get = sq_token_get,
    .token_list = sq_token_list,
    .token_remove = sq_token_remove,
    .run_insert = sq_run_insert,
    .run_get = sq_run_get,
    .run_list = sq_run_list,
    .run_update = sq_run_update,
    .run_cancel_request = sq_run_cancel_request,
    .run_counts = sq_run_counts,
    .lease_claim = sq_lease_claim,
    .lease_renew = sq_lease_renew,
    .lease_release = sq_lease_release,
    .state_put = sq_state_put,
    .state_get = sq_state_get,
    .journal_append = sq_journal_append,
    .journal_read = sq_journal_read,
    .state_clear = sq_state_clear,
    .journal_keep = sq_journal_keep,
    .events_add = sq_events_add,
    .events_after = sq_events_after,
    .decision_add = sq_decision_add,
    .decisions_get = sq_decisions_get,
    .idem_get = sq_idem_get,
    .idem_put = sq_idem_put,
    .sandbox_put = sq_sandbox_put,
    .sandbox_get = sq_sandbox_get,
    .sandbox_list = sq_sandbox_list,
    .sandbox_remove = sq_sandbox_remove,
};
