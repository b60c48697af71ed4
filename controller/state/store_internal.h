/* What store.c shares with the stores behind it (store_sqlite.c,
 * store_pg.c): the table of operations each store fills, the parameters
 * and rows they pass, and the schema they create.
 *
 * store.c checks the arguments, keeps the clock, turns JSON into text and
 * rows back into JSON; a store only runs its SQL. Reads hand each row to a
 * store_row_fn while the store's lock is held, so a callback never calls
 * the store. */
#ifndef SBX_STORE_INTERNAL_H
#define SBX_STORE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "controller/state/store.h"

#define STORE_WHERE_MAX 256

/* One statement parameter: an integer, a text of LEN bytes, or SQL NULL
 * (text NULL). */
struct store_arg {
  const char *text;
  size_t len;
  int64_t integer;
  bool is_int;
};

static inline struct store_arg store_textn(const char *s, size_t len) {
  return (struct store_arg){.text = s, .len = len};
}
static inline struct store_arg store_text(const char *s) {
  return store_textn(s, s ? strlen(s) : 0);
}
static inline struct store_arg store_int(int64_t v) {
  return (struct store_arg){.integer = v, .is_int = true};
}

/* One result row, read by column (0-based). text is NULL for SQL NULL and
 * valid until the callback returns. */
struct store_row {
  const char *(*text)(const struct store_row *r, int col, size_t *len);
  int64_t (*integer)(const struct store_row *r, int col);
  void *res; /* the store's statement or result */
  int i;     /* the row in res, where the store needs it */
};

/* Called for each row; a negative errno stops the statement. The row
 * callback of a write may run again when its transaction is retried. */
typedef int (*store_row_fn)(void *arg, const struct store_row *row,
                            struct sbx_error *e);

/* One store's operations. Texts are given as they are stored (JSON
 * dumped), times in unix ms; CHANGED gets the number of rows changed.
 * Errors are store.h's, with the database's message; store.c words
 * -ENOENT and -EEXIST for the caller. */
struct store_ops {
  const char *kind;
  /* Connects to TARGET (the path, or the whole postgres:// URL), creates
   * the schema when missing and says its version. WHERE names the store in
   * messages. */
  int (*open)(const char *target, const char *where, struct store **out,
              int64_t *version, struct sbx_error *e);
  void (*close)(struct store *s);

  int (*token_add)(struct store *s, const char *id, const char *name,
                   const char *hash, const char *scopes, int64_t now,
                   struct sbx_error *e);
  int (*token_get)(struct store *s, const char *id, store_row_fn fn, void *arg,
                   struct sbx_error *e);
  int (*token_list)(struct store *s, store_row_fn fn, void *arg,
                    struct sbx_error *e);
  int (*token_remove)(struct store *s, const char *name, int64_t *changed,
                      struct sbx_error *e);

  int (*run_insert)(struct store *s, const char *id, const char *owner,
                    const char *status, const char *request, int64_t now,
                    struct sbx_error *e);
  int (*run_get)(struct store *s, const char *id, store_row_fn fn, void *arg,
                 struct sbx_error *e);
  /* LIMIT rows at most; BEFORE 0 is from the newest. */
  int (*run_list)(struct store *s, const char *status, const char *owner,
                  int64_t before, int64_t limit, store_row_fn fn, void *arg,
                  struct sbx_error *e);
  /* FROM is a JSON array of statuses, or NULL for any. */
  int (*run_update)(struct store *s, const char *id, const char *from,
                    const char *status, const char *result, int64_t now,
                    int64_t *changed, struct sbx_error *e);
  int (*run_cancel_request)(struct store *s, const char *id, int64_t now,
                            int64_t *changed, struct sbx_error *e);
  int (*run_counts)(struct store *s, store_row_fn fn, void *arg,
                    struct sbx_error *e);

  /* STATUSES is a JSON array; the row is the claimed run's id. */
  int (*lease_claim)(struct store *s, const char *owner, const char *statuses,
                     int64_t now, int64_t until, store_row_fn fn, void *arg,
                     struct sbx_error *e);
  int (*lease_renew)(struct store *s, const char *id, const char *owner,
                     int64_t until, int64_t *changed, struct sbx_error *e);
  int (*lease_release)(struct store *s, const char *id, const char *owner,
                       struct sbx_error *e);

  int (*state_put)(struct store *s, const char *id, const char *text,
                   size_t len, int64_t *changed, struct sbx_error *e);
  int (*state_get)(struct store *s, const char *id, store_row_fn fn, void *arg,
                   struct sbx_error *e);
  int (*journal_append)(struct store *s, const char *id, const char *text,
                        size_t len, struct sbx_error *e);
  /* The chunks in the order they were appended. */
  int (*journal_read)(struct store *s, const char *id, store_row_fn fn,
                      void *arg, struct sbx_error *e);
  /* Removes the run's journal chunks after the first NCHUNKS. */
  int (*journal_keep)(struct store *s, const char *id, int64_t nchunks,
                      struct sbx_error *e);
  /* The run's state set to NULL and its journal emptied. */
  int (*state_clear)(struct store *s, const char *id, struct sbx_error *e);

  /* BATCH: the JSON text [[seq, "type", "data"], ...], in one statement. */
  int (*events_add)(struct store *s, const char *id, const char *batch,
                    struct sbx_error *e);
  int (*events_after)(struct store *s, const char *id, int64_t after,
                      int64_t limit, store_row_fn fn, void *arg,
                      struct sbx_error *e);

  int (*decision_add)(struct store *s, const char *id, const char *call_id,
                      const char *decision, const char *reason,
                      struct sbx_error *e);
  int (*decisions_get)(struct store *s, const char *id, store_row_fn fn,
                       void *arg, struct sbx_error *e);

  int (*idem_get)(struct store *s, const char *owner, const char *key,
                  store_row_fn fn, void *arg, struct sbx_error *e);
  int (*idem_put)(struct store *s, const char *owner, const char *key,
                  int status, const char *body, int64_t now,
                  struct sbx_error *e);

  int (*sandbox_put)(struct store *s, const char *id, const char *owner,
                     const char *record, int64_t now, struct sbx_error *e);
  int (*sandbox_get)(struct store *s, const char *id, store_row_fn fn,
                     void *arg, struct sbx_error *e);
  /* OWNER NULL: all. */
  int (*sandbox_list)(struct store *s, const char *owner, store_row_fn fn,
                      void *arg, struct sbx_error *e);
  int (*sandbox_remove)(struct store *s, const char *id, int64_t *changed,
                        struct sbx_error *e);
};

/* The head of each store's own struct. */
struct store {
  const struct store_ops *ops;
  char where[STORE_WHERE_MAX]; /* the URL without its password */
};

extern const struct store_ops store_sqlite_ops;
extern const struct store_ops store_pg_ops;

/* -EFBIG when a text of A is over STORE_MAX_TEXT: every store checks its
 * parameters with it. */
int store_args_check(const struct store *s, const struct store_arg *a, size_t n,
                     struct sbx_error *e);
/* A row callback that reads column 0 as an integer into *(int64_t *)ARG. */
int store_row_int64(void *arg, const struct store_row *row,
                    struct sbx_error *e);

/* The columns each read selects, in the order store.c reads them. The
 * same SQL on both stores. */
#define STORE_TOKEN_COLUMNS "id, name, hash, scopes, created_at"
enum { TOKEN_ID, TOKEN_NAME, TOKEN_HASH, TOKEN_SCOPES, TOKEN_CREATED_AT };
#define STORE_RUN_COLUMNS                                                      \
  "id, status, owner, request, result, created_at, updated_at, "               \
  "lease_owner, lease_until, cancel_requested, "                               \
  "(SELECT COALESCE(MAX(seq), 0) FROM events WHERE events.run_id = runs.id), " \
  "n"
enum {
  RUN_ID,
  RUN_STATUS,
  RUN_OWNER,
  RUN_REQUEST,
  RUN_RESULT,
  RUN_CREATED_AT,
  RUN_UPDATED_AT,
  RUN_LEASE_OWNER,
  RUN_LEASE_UNTIL,
  RUN_CANCEL_REQUESTED,
  RUN_LAST_SEQ,
  RUN_N,
};
#define STORE_EVENT_COLUMNS "seq, type, data"
enum { EVENT_SEQ, EVENT_TYPE, EVENT_DATA };
#define STORE_DECISION_COLUMNS "call_id, decision, reason"
enum { DECISION_CALL_ID, DECISION_DECISION, DECISION_REASON };
#define STORE_SANDBOX_COLUMNS "id, owner, record, created_at"
enum { SANDBOX_ID, SANDBOX_OWNER, SANDBOX_RECORD, SANDBOX_CREATED_AT };
/* store_run_counts: "status, COUNT(*)"; store_idem_get: "status, body";
 * state, journal and claim: one text column. */

/* The schema. The meta table is made first and holds the version; the rest
 * is created, with the version, only where it has none. SEQ is the store's
 * type of an ascending key ("INTEGER PRIMARY KEY AUTOINCREMENT" on SQLite,
 * "BIGSERIAL PRIMARY KEY" on PostgreSQL); BIGINT is an integer on both. */
#define STORE_META_TABLE                                                       \
  "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, "                    \
  "value BIGINT NOT NULL)"
#define STORE_META_VERSION "SELECT value FROM meta WHERE key = 'version'"
#define STORE_SCHEMA_STR2(x) #x
#define STORE_SCHEMA_STR(x) STORE_SCHEMA_STR2(x)
#define STORE_SCHEMA(SEQ)                                                      \
  "CREATE TABLE tokens (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, "      \
  "hash TEXT NOT NULL, scopes TEXT NOT NULL, created_at BIGINT NOT NULL);"     \
  "CREATE TABLE runs (n " SEQ ", id TEXT NOT NULL UNIQUE, "                    \
  "status TEXT NOT NULL, owner TEXT NOT NULL, request TEXT NOT NULL, "         \
  "result TEXT, state TEXT, created_at BIGINT NOT NULL, "                      \
  "updated_at BIGINT NOT NULL, lease_owner TEXT, lease_until BIGINT, "         \
  "cancel_requested BIGINT NOT NULL DEFAULT 0);"                               \
  "CREATE INDEX runs_status ON runs (status, n);"                              \
  "CREATE INDEX runs_owner ON runs (owner, n);"                                \
  "CREATE TABLE journal (n " SEQ ", run_id TEXT NOT NULL "                     \
  "REFERENCES runs (id) ON DELETE CASCADE, text TEXT NOT NULL);"               \
  "CREATE INDEX journal_run ON journal (run_id, n);"                           \
  "CREATE TABLE events (run_id TEXT NOT NULL REFERENCES runs (id) "            \
  "ON DELETE CASCADE, seq BIGINT NOT NULL, type TEXT NOT NULL, "               \
  "data TEXT NOT NULL, PRIMARY KEY (run_id, seq));"                            \
  "CREATE TABLE decisions (run_id TEXT NOT NULL REFERENCES runs (id) "         \
  "ON DELETE CASCADE, call_id TEXT NOT NULL, decision TEXT NOT NULL "          \
  "CHECK (decision IN ('approve', 'reject')), reason TEXT, "                   \
  "PRIMARY KEY (run_id, call_id));"                                            \
  "CREATE TABLE idempotency (owner TEXT NOT NULL, key TEXT NOT NULL, "         \
  "status BIGINT NOT NULL, body TEXT NOT NULL, created_at BIGINT NOT NULL, "   \
  "PRIMARY KEY (owner, key));"                                                 \
  "CREATE TABLE sandboxes (id TEXT PRIMARY KEY, owner TEXT NOT NULL, "         \
  "record TEXT NOT NULL, created_at BIGINT NOT NULL);"                         \
  "CREATE INDEX sandboxes_owner ON sandboxes (owner, created_at);"             \
  "INSERT INTO meta (key, value) VALUES ('version', " STORE_SCHEMA_STR(        \
      STORE_SCHEMA_VERSION) ")"

#endif
