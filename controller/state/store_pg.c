/* The PostgreSQL store: one libpq connection per store under a mutex,
 * parameterized statements only (texts sent as they are, with their
 * length), a connection found broken reset once and a statement that may
 * run twice sent again. Several controllers share one database: the schema
 * is made under an advisory lock and leases are taken with FOR UPDATE SKIP
 * LOCKED. */
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/state/store_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"

#define PG_MAX_ARGS 8
#define PG_INT8_OID 20 /* pg_type.oid of bigint and of text */
#define PG_TEXT_OID 25
#define PG_SEQ "BIGSERIAL PRIMARY KEY"
#define PG_CONNECT_TIMEOUT "10" /* seconds, unless the URL says */

struct pg_store {
  struct store base;
  PGconn *conn;
  pthread_mutex_t mu; /* one call at a time on conn */
};

/* Whether a statement may be sent again after the connection broke: it
 * may have run already, so only where running it twice changes nothing. */
enum pg_retry { PG_ONCE, PG_SAFE };

static struct pg_store *pg(struct store *s) {
  return (struct pg_store *)s;
}

/* The SQLSTATEs that mean one of store.h's errors; any other is -EIO. */
static const struct {
  const char *sqlstate;
  int err;
} pg_errors[] = {
    {"23505", EEXIST}, /* unique_violation */
    {"23503", ENOENT}, /* foreign_key_violation: no such run */
    {"54000", EFBIG},  /* program_limit_exceeded */
    {"53200", ENOMEM}, /* out_of_memory */
};

/* The length of libpq's message MSG without its trailing newline. */
static int trimmed(const char *msg) {
  size_t n = strlen(msg);
  while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
    n--;
  return (int)n;
}

static int pg_fail(struct pg_store *p, const PGresult *res,
                   struct sbx_error *e) {
  const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
  int err = EIO;
  for (size_t i = 0; state && i < SBX_ARRAY_SIZE(pg_errors); i++)
    if (strcmp(state, pg_errors[i].sqlstate) == 0)
      err = pg_errors[i].err;
  const char *msg = res ? PQresultErrorMessage(res) : "";
  if (!*msg)
    msg = PQerrorMessage(p->conn);
  return sbx_error_set(e, SBX_OK, err, "%s: %.*s", p->base.where, trimmed(msg),
                       msg);
}

static const char *pg_text(const struct store_row *r, int col, size_t *len) {
  *len = 0;
  if (PQgetisnull(r->res, r->i, col))
    return NULL;
  *len = (size_t)PQgetlength(r->res, r->i, col);
  return PQgetvalue(r->res, r->i, col);
}

static int64_t pg_integer(const struct store_row *r, int col) {
  return strtoll(PQgetvalue(r->res, r->i, col), NULL, 10);
}

/* Checks RES (which may be NULL) and hands its rows to FN. */
static int pg_rows(struct pg_store *p, PGresult *res, store_row_fn fn,
                   void *arg, int64_t *changed, struct sbx_error *e) {
  ExecStatusType st = PQresultStatus(res);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    return pg_fail(p, res, e);
  if (changed)
    *changed = strtoll(PQcmdTuples(res), NULL, 10);
  struct store_row row = {.text = pg_text, .integer = pg_integer, .res = res};
  for (row.i = 0; fn && row.i < PQntuples(res); row.i++) {
    int r = fn(arg, &row, e);
    if (r < 0)
      return r;
  }
  return 0;
}

/* Sends SQL with A: integers as text, texts in binary form (their bytes and
 * length as they are), each typed so that "$1 IS NULL" needs no cast. */
static PGresult *pg_send(struct pg_store *p, const char *sql,
                         const struct store_arg *a, size_t n) {
  Oid types[PG_MAX_ARGS];
  const char *values[PG_MAX_ARGS];
  int lengths[PG_MAX_ARGS], formats[PG_MAX_ARGS];
  char num[PG_MAX_ARGS][24];
  for (size_t i = 0; i < n; i++) {
    if (a[i].is_int)
      (void)snprintf(num[i], sizeof(num[i]), "%" PRId64, a[i].integer);
    types[i] = a[i].is_int ? PG_INT8_OID : PG_TEXT_OID;
    values[i] = a[i].is_int ? num[i] : a[i].text;
    lengths[i] = a[i].is_int ? 0 : (int)a[i].len;
    formats[i] = a[i].is_int ? 0 : 1;
  }
  return PQexecParams(p->conn, sql, (int)n, types, values, lengths, formats, 0);
}

static int pg_exec(struct store *s, enum pg_retry retry, const char *sql,
                   const struct store_arg *a, size_t n, store_row_fn fn,
                   void *arg, int64_t *changed, struct sbx_error *e) {
  int r = store_args_check(s, a, n, e);
  if (r < 0)
    return r;
  if (n > PG_MAX_ARGS)
    return sbx_error_set(e, SBX_INTERNAL, EINVAL, "%zu parameters", n);
  struct pg_store *p = pg(s);
  pthread_mutex_lock(&p->mu);
  if (PQstatus(p->conn) == CONNECTION_BAD)
    PQreset(p->conn);
  PGresult *res = pg_send(p, sql, a, n);
  ExecStatusType st = PQresultStatus(res);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK &&
      PQstatus(p->conn) == CONNECTION_BAD && retry == PG_SAFE) {
    PQclear(res);
    PQreset(p->conn);
    res = pg_send(p, sql, a, n);
  }
  r = pg_rows(p, res, fn, arg, changed, e);
  PQclear(res);
  pthread_mutex_unlock(&p->mu);
  return r;
}

#define PG_READ(s, sql, a, fn, arg, e)                                         \
  pg_exec(s, PG_SAFE, sql, a, SBX_ARRAY_SIZE(a), fn, arg, NULL, e)
#define PG_WRITE(s, retry, sql, a, changed, e)                                 \
  pg_exec(s, retry, sql, a, SBX_ARRAY_SIZE(a), NULL, NULL, changed, e)

/* ---- open ---------------------------------------------------------------- */

/* A statement without parameters (the schema's, a transaction's). */
static int pg_plain(struct pg_store *p, const char *sql, store_row_fn fn,
                    void *arg, struct sbx_error *e) {
  PGresult *res = PQexec(p->conn, sql);
  int r = pg_rows(p, res, fn, arg, NULL, e);
  PQclear(res);
  return r;
}

/* Creates the schema where the database has none and reads its version,
 * in one transaction under an advisory lock: servers started together
 * wait for the first instead of racing it. */
static int pg_schema(struct pg_store *p, int64_t *version,
                     struct sbx_error *e) {
  *version = 0;
  int r = pg_plain(p, "BEGIN", NULL, NULL, e);
  if (r == 0)
    r = pg_plain(p, "SELECT pg_advisory_xact_lock(hashtext('sbx state store'))",
                 NULL, NULL, e);
  if (r == 0)
    r = pg_plain(p, STORE_META_TABLE, NULL, NULL, e);
  if (r == 0)
    r = pg_plain(p, STORE_META_VERSION, store_row_int64, version, e);
  if (r == 0 && *version == 0) {
    r = pg_plain(p, STORE_SCHEMA(PG_SEQ), NULL, NULL, e);
    *version = STORE_SCHEMA_VERSION;
  }
  if (r == 0)
    r = pg_plain(p, "COMMIT", NULL, NULL, e);
  if (r < 0)
    (void)pg_plain(p, "ROLLBACK", NULL, NULL, NULL);
  return r;
}

/* The server's notices ("relation ... already exists, skipping") go to the
 * debug log, not to stderr as libpq would have them. */
static void pg_notice(void *arg, const char *msg) {
  log_debug("state store: %.*s", trimmed(msg), msg);
}

static void pg_close(struct store *s) {
  struct pg_store *p = pg(s);
  PQfinish(p->conn);
  (void)pthread_mutex_destroy(&p->mu);
  free(p);
}

/* Connects to URL as libpq reads it; a connect_timeout in it wins over
 * ours, which comes first for that reason. */
static int pg_open(const char *url, const char *where, struct store **out,
                   int64_t *version, struct sbx_error *e) {
  struct pg_store *p = calloc(1, sizeof(*p));
  if (!p)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  p->base.ops = &store_pg_ops;
  (void)snprintf(p->base.where, sizeof(p->base.where), "%s", where);
  if (pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p);
    return sbx_error_set(e, SBX_OK, ENOMEM, "cannot create a mutex");
  }
  static const char *const keys[] = {
      "connect_timeout", "fallback_application_name", "dbname", NULL};
  const char *const values[] = {PG_CONNECT_TIMEOUT, "sbx", url, NULL};
  p->conn = PQconnectdbParams(keys, values, 1);
  int r;
  if (!p->conn)
    r = sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  else if (PQstatus(p->conn) != CONNECTION_OK)
    r = sbx_error_set(
        e, SBX_UNAVAILABLE, EIO, "cannot connect to the state store %s: %.*s",
        where, trimmed(PQerrorMessage(p->conn)), PQerrorMessage(p->conn));
  else {
    (void)PQsetNoticeProcessor(p->conn, pg_notice, NULL);
    r = pg_schema(p, version, e);
  }
  if (r < 0) {
    pg_close(&p->base);
    return r;
  }
  *out = &p->base;
  return 0;
}

/* ---- tokens -------------------------------------------------------------- */

static int pg_token_add(struct store *s, const char *id, const char *name,
                        const char *hash, const char *scopes, int64_t now,
                        struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(name),
                                store_text(hash), store_text(scopes),
                                store_int(now)};
  return PG_WRITE(s, PG_ONCE,
                  "INSERT INTO tokens (id, name, hash, scopes, created_at) "
                  "VALUES ($1, $2, $3, $4, $5)",
                  a, NULL, e);
}

static int pg_token_get(struct store *s, const char *id, store_row_fn fn,
                        void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return PG_READ(s, "SELECT " STORE_TOKEN_COLUMNS " FROM tokens WHERE id = $1",
                 a, fn, arg, e);
}

static int pg_token_list(struct store *s, store_row_fn fn, void *arg,
                         struct sbx_error *e) {
  return pg_exec(s, PG_SAFE,
                 "SELECT " STORE_TOKEN_COLUMNS " FROM tokens ORDER BY name",
                 NULL, 0, fn, arg, NULL, e);
}

static int pg_token_remove(struct store *s, const char *name, int64_t *changed,
                           struct sbx_error *e) {
  const struct store_arg a[] = {store_text(name)};
  return PG_WRITE(s, PG_ONCE, "DELETE FROM tokens WHERE name = $1", a, changed,
                  e);
}

/* ---- runs ---------------------------------------------------------------- */

static int pg_run_insert(struct store *s, const char *id, const char *owner,
                         const char *status, const char *request, int64_t now,
                         struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(status),
                                store_text(owner), store_text(request),
                                store_int(now)};
  return PG_WRITE(s, PG_ONCE,
                  "INSERT INTO runs (id, status, owner, request, created_at, "
                  "updated_at) VALUES ($1, $2, $3, $4, $5, $5)",
                  a, NULL, e);
}

static int pg_run_get(struct store *s, const char *id, store_row_fn fn,
                      void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return PG_READ(s, "SELECT " STORE_RUN_COLUMNS " FROM runs WHERE id = $1", a,
                 fn, arg, e);
}

static int pg_run_list(struct store *s, const char *status, const char *owner,
                       int64_t before, int64_t limit, store_row_fn fn,
                       void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(status), store_text(owner),
                                store_int(before), store_int(limit)};
  return PG_READ(s,
                 "SELECT " STORE_RUN_COLUMNS " FROM runs "
                 "WHERE ($1 IS NULL OR status = $1) "
                 "AND ($2 IS NULL OR owner = $2) AND ($3 = 0 OR n < $3) "
                 "ORDER BY n DESC LIMIT $4",
                 a, fn, arg, e);
}

static int pg_run_update(struct store *s, const char *id, const char *from,
                         const char *status, const char *result, int64_t now,
                         int64_t *changed, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(status), store_text(result),
                                store_int(now), store_text(id),
                                store_text(from)};
  /* Sent again after it ran, a conditional update would find its own
   * status and say -ESTALE. */
  return PG_WRITE(s, from ? PG_ONCE : PG_SAFE,
                  "UPDATE runs SET status = COALESCE($1, status), "
                  "result = COALESCE($2, result), updated_at = $3 "
                  "WHERE id = $4 AND ($5 IS NULL OR status IN "
                  "(SELECT jsonb_array_elements_text($5::jsonb)))",
                  a, changed, e);
}

static int pg_run_cancel_request(struct store *s, const char *id, int64_t now,
                                 int64_t *changed, struct sbx_error *e) {
  const struct store_arg a[] = {store_int(now), store_text(id)};
  return PG_WRITE(s, PG_SAFE,
                  "UPDATE runs SET cancel_requested = 1, updated_at = $1 "
                  "WHERE id = $2",
                  a, changed, e);
}

static int pg_run_counts(struct store *s, store_row_fn fn, void *arg,
                         struct sbx_error *e) {
  return pg_exec(s, PG_SAFE,
                 "SELECT status, COUNT(*) FROM runs GROUP BY status", NULL, 0,
                 fn, arg, NULL, e);
}

/* ---- leases -------------------------------------------------------------- */

/* The run is chosen and locked by the inner SELECT ... FOR UPDATE SKIP
 * LOCKED and leased by the UPDATE, in the one transaction of the
 * statement: a run another controller is taking at the same moment is
 * skipped, not waited for, and never taken twice. */
static int pg_lease_claim(struct store *s, const char *owner,
                          const char *statuses, int64_t now, int64_t until,
                          store_row_fn fn, void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(owner), store_int(until),
                                store_text(statuses), store_int(now)};
  return pg_exec(s, PG_ONCE,
                 "UPDATE runs SET lease_owner = $1, lease_until = $2 "
                 "WHERE n = (SELECT n FROM runs WHERE status IN "
                 "(SELECT jsonb_array_elements_text($3::jsonb)) AND "
                 "owner <> '' AND (lease_owner IS NULL OR lease_until < $4) "
                 "ORDER BY n LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id",
                 a, SBX_ARRAY_SIZE(a), fn, arg, NULL, e);
}

static int pg_lease_renew(struct store *s, const char *id, const char *owner,
                          int64_t until, int64_t *changed,
                          struct sbx_error *e) {
  const struct store_arg a[] = {store_int(until), store_text(id),
                                store_text(owner)};
  return PG_WRITE(s, PG_SAFE,
                  "UPDATE runs SET lease_until = $1 "
                  "WHERE id = $2 AND lease_owner = $3",
                  a, changed, e);
}

static int pg_lease_release(struct store *s, const char *id, const char *owner,
                            struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(owner)};
  return PG_WRITE(s, PG_SAFE,
                  "UPDATE runs SET lease_owner = NULL, lease_until = NULL "
                  "WHERE id = $1 AND lease_owner = $2",
                  a, NULL, e);
}

/* ---- the runner's state and journal -------------------------------------- */

static int pg_state_put(struct store *s, const char *id, const char *text,
                        size_t len, int64_t *changed, struct sbx_error *e) {
  const struct store_arg a[] = {store_textn(text, len), store_text(id)};
  return PG_WRITE(s, PG_SAFE, "UPDATE runs SET state = $1 WHERE id = $2", a,
                  changed, e);
}

static int pg_state_get(struct store *s, const char *id, store_row_fn fn,
                        void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return PG_READ(s, "SELECT state FROM runs WHERE id = $1", a, fn, arg, e);
}

static int pg_journal_append(struct store *s, const char *id, const char *text,
                             size_t len, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_textn(text, len)};
  return PG_WRITE(s, PG_ONCE,
                  "INSERT INTO journal (run_id, text) VALUES ($1, $2)", a, NULL,
                  e);
}

static int pg_journal_keep(struct store *s, const char *id, int64_t nchunks,
                           struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_int(nchunks)};
  return PG_WRITE(s, PG_SAFE,
                  "DELETE FROM journal WHERE run_id = $1 AND n NOT IN "
                  "(SELECT n FROM journal WHERE run_id = $1 ORDER BY n "
                  "LIMIT $2)",
                  a, NULL, e);
}

static int pg_state_clear(struct store *s, const char *id,
                          struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  int r =
      PG_WRITE(s, PG_SAFE, "DELETE FROM journal WHERE run_id = $1", a, NULL, e);
  if (r == 0)
    r = PG_WRITE(s, PG_SAFE, "UPDATE runs SET state = NULL WHERE id = $1", a,
                 NULL, e);
  return r;
}

static int pg_journal_read(struct store *s, const char *id, store_row_fn fn,
                           void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return PG_READ(s, "SELECT text FROM journal WHERE run_id = $1 ORDER BY n", a,
                 fn, arg, e);
}

/* ---- events and decisions ------------------------------------------------ */

static int pg_events_add(struct store *s, const char *id, const char *batch,
                         struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(batch)};
  return PG_WRITE(s, PG_ONCE,
                  "INSERT INTO events (run_id, seq, type, data) "
                  "SELECT $1, (x->>0)::bigint, x->>1, x->>2 "
                  "FROM jsonb_array_elements($2::jsonb) AS x",
                  a, NULL, e);
}

static int pg_events_after(struct store *s, const char *id, int64_t after,
                           int64_t limit, store_row_fn fn, void *arg,
                           struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_int(after),
                                store_int(limit)};
  return PG_READ(s,
                 "SELECT " STORE_EVENT_COLUMNS " FROM events "
                 "WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                 a, fn, arg, e);
}

static int pg_decision_add(struct store *s, const char *id, const char *call_id,
                           const char *decision, const char *reason,
                           struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(call_id),
                                store_text(decision), store_text(reason)};
  return PG_WRITE(s, PG_ONCE,
                  "INSERT INTO decisions (run_id, call_id, decision, reason) "
                  "VALUES ($1, $2, $3, $4)",
                  a, NULL, e);
}

static int pg_decisions_get(struct store *s, const char *id, store_row_fn fn,
                            void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return PG_READ(s,
                 "SELECT " STORE_DECISION_COLUMNS " FROM decisions "
                 "WHERE run_id = $1 ORDER BY call_id",
                 a, fn, arg, e);
}

/* ---- idempotency keys and sandbox records -------------------------------- */

static int pg_idem_get(struct store *s, const char *owner, const char *key,
                       store_row_fn fn, void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(owner), store_text(key)};
  return PG_READ(s,
                 "SELECT status, body FROM idempotency "
                 "WHERE owner = $1 AND key = $2",
                 a, fn, arg, e);
}

static int pg_idem_put(struct store *s, const char *owner, const char *key,
                       int status, const char *body, int64_t now,
                       struct sbx_error *e) {
  const struct store_arg a[] = {store_text(owner), store_text(key),
                                store_int(status), store_text(body),
                                store_int(now)};
  return PG_WRITE(s, PG_ONCE,
                  "INSERT INTO idempotency (owner, key, status, body, "
                  "created_at) VALUES ($1, $2, $3, $4, $5)",
                  a, NULL, e);
}

static int pg_sandbox_put(struct store *s, const char *id, const char *owner,
                          const char *record, int64_t now,
                          struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id), store_text(owner),
                                store_text(record), store_int(now)};
  return PG_WRITE(s, PG_SAFE,
                  "INSERT INTO sandboxes (id, owner, record, created_at) "
                  "VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO UPDATE SET "
                  "owner = excluded.owner, record = excluded.record",
                  a, NULL, e);
}

static int pg_sandbox_get(struct store *s, const char *id, store_row_fn fn,
                          void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return PG_READ(
      s, "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes WHERE id = $1", a, fn,
      arg, e);
}

static int pg_sandbox_list(struct store *s, const char *owner, store_row_fn fn,
                           void *arg, struct sbx_error *e) {
  const struct store_arg a[] = {store_text(owner)};
  return PG_READ(s,
                 "SELECT " STORE_SANDBOX_COLUMNS " FROM sandboxes "
                 "WHERE $1 IS NULL OR owner = $1 ORDER BY created_at, id",
                 a, fn, arg, e);
}

static int pg_sandbox_remove(struct store *s, const char *id, int64_t *changed,
                             struct sbx_error *e) {
  const struct store_arg a[] = {store_text(id)};
  return PG_WRITE(s, PG_ONCE, "DELETE FROM sandboxes WHERE id = $1", a, changed,
                  e);
}

const struct store_ops store_pg_ops = {
    .kind = "postgres",
    .open = pg_open,
    .close = pg_close,
    .token_add = pg_token_add,
    .token_get = pg_token_get,
    .token_list = pg_token_list,
    .token_remove = pg_token_remove,
    .run_insert = pg_run_insert,
    .run_get = pg_run_get,
    .run_list = pg_run_list,
    .run_update = pg_run_update,
    .run_cancel_request = pg_run_cancel_request,
    .run_counts = pg_run_counts,
    .lease_claim = pg_lease_claim,
    .lease_renew = pg_lease_renew,
    .lease_release = pg_lease_release,
    .state_put = pg_state_put,
    .state_get = pg_state_get,
    .journal_append = pg_journal_append,
    .journal_read = pg_journal_read,
    .state_clear = pg_state_clear,
    .journal_keep = pg_journal_keep,
    .events_add = pg_events_add,
    .events_after = pg_events_after,
    .decision_add = pg_decision_add,
    .decisions_get = pg_decisions_get,
    .idem_get = pg_idem_get,
    .idem_put = pg_idem_put,
    .sandbox_put = pg_sandbox_put,
    .sandbox_get = pg_sandbox_get,
    .sandbox_list = pg_sandbox_list,
    .sandbox_remove = pg_sandbox_remove,
};
