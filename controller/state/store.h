/* The state store: what runs need to be resumed, watched and decided on,
 * behind one interface with two stores.
 *
 *   sqlite:PATH          embedded SQLite (the default: STATE-DIR/sbx.db),
 *                        WAL, a busy timeout and retried commits; the file
 *                        is created 0600
 *   postgres://...       PostgreSQL through libpq (postgresql:// too; the
 *                        URL is libpq's), for several controllers sharing
 *                        one database
 *
 * The schema is created on open when missing (on PostgreSQL under an
 * advisory lock, so two servers starting together do not race) and
 * carries a version; a database of a newer version is refused.
 *
 * Tables (the same on both stores):
 *   tokens      id, name (unique), hash (hex SHA-256 of the secret),
 *               scopes ("run,approve,read,admin"), created_at
 *   runs        n (a sequence: list order and cursor), id, status, owner
 *               (the token name, "" for the CLI), request (JSON), result
 *               (JSON), state (the runner's run state, JSON text),
 *               created_at, updated_at (unix ms), lease_owner, lease_until
 *               (unix ms), cancel_requested
 *   journal     run id, n, text: the run's journal as appended chunks
 *   events      run id, seq (unique per run), type, data (JSON text)
 *   decisions   run id, call id (unique per run), decision, reason
 *   idempotency token name, key (unique together), status, body
 *   sandboxes   id, owner, record (JSON), created_at
 *
 * Thread-safety: one store may be used from any number of threads at once
 * (each call takes a connection of its own or serializes on one).
 *
 * Errors: 0 or a negative errno with E saying what, and which store:
 *   -ENOENT   no such row
 *   -EEXIST   the row exists already (a unique key)
 *   -ESTALE   a conditional update found the row changed (lease, status)
 *   -EINVAL   bad URL or argument
 *   -EIO      the database failed (message from SQLite / libpq)
 *   -ENOMEM
 * Strings given are copied; JSON given is borrowed unless said; JSON
 * returned is new. */
#ifndef SBX_STORE_H
#define SBX_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/errors.h"

struct store;

#define STORE_SCHEMA_VERSION 1
/* The most one text cell may hold (a run state, a journal chunk, an event,
 * a record): over it is -EFBIG. */
#define STORE_MAX_TEXT ((size_t)256 << 20)
#define STORE_LIST_MAX 1000 /* rows one list call returns at most */

/* Opens the store URL names into *OUT (new). */
int store_open(const char *url, struct store **out, struct sbx_error *e);
/* Closes; accepts NULL; returns NULL. */
struct store *store_close(struct store *s);
/* "sqlite" or "postgres". */
const char *store_kind(const struct store *s);
/* The current time in unix milliseconds as the stores write it. */
int64_t store_now_ms(void);

/* --- tokens --- */
/* Adds a token. -EEXIST when NAME or ID is taken. */
int store_token_add(struct store *s, const char *id, const char *name,
                    const char *hash_hex, const char *scopes,
                    struct sbx_error *e);
/* The token ID: {"id","name","hash","scopes","created_at"} (created_at
 * RFC 3339). -ENOENT. */
int store_token_get(struct store *s, const char *id, json_t **out,
                    struct sbx_error *e);
/* Every token as above but without "hash", sorted by name. */
int store_token_list(struct store *s, json_t **out, struct sbx_error *e);
/* -ENOENT when no token has NAME. */
int store_token_remove(struct store *s, const char *name, struct sbx_error *e);

/* --- runs --- */
/* A new run ID with STATUS, OWNER and REQUEST (any JSON object). -EEXIST. */
int store_run_insert(struct store *s, const char *id, const char *owner,
                     const char *status, json_t *request, struct sbx_error *e);
/* The run ID: {"id","status","owner","request","result" (null until set),
 * "created_at","updated_at" (unix ms),"lease_owner" (null or text),
 * "lease_until","cancel_requested" (bool),"last_seq" (the highest event
 * seq, 0 for none)}. The state and journal are read separately. -ENOENT. */
int store_run_get(struct store *s, const char *id, json_t **out,
                  struct sbx_error *e);
/* Up to LIMIT (1..STORE_LIST_MAX) runs, newest first, as store_run_get
 * gives them, with STATUS (NULL: any) and owner OWNER (NULL: any), older
 * than the cursor BEFORE (0: from the newest). *NEXT is the cursor of the
 * next page, 0 when this was the last. */
int store_run_list(struct store *s, const char *status, const char *owner,
                   int64_t before, size_t limit, json_t **out, int64_t *next,
                   struct sbx_error *e);
/* Sets the run's STATUS (NULL: keep) and RESULT (NULL: keep) and
 * updated_at. When FROM is not NULL, only while the status is one of the
 * NULL-terminated FROM, else -ESTALE. -ENOENT. */
int store_run_update(struct store *s, const char *id, const char *const *from,
                     const char *status, json_t *result, struct sbx_error *e);
/* Marks the run as asked to stop. -ENOENT. */
int store_run_cancel_request(struct store *s, const char *id,
                             struct sbx_error *e);
/* The number of runs of each status: {"running": 2, ...} (new). */
int store_run_counts(struct store *s, json_t **out, struct sbx_error *e);

/* --- leases: which controller executes a run --- */
/* Takes one run whose status is one of the NULL-terminated STATUSES and
 * whose lease is free or expired, oldest first, for OWNER until now +
 * TTL_MS; its id into ID. -ENOENT when there is none. Two controllers
 * never take the same run (PostgreSQL: FOR UPDATE SKIP LOCKED), and none
 * takes a run of the CLI (owner ""): its sbx process executes it. */
int store_lease_claim(struct store *s, const char *owner,
                      const char *const *statuses, int64_t ttl_ms, char *id,
                      size_t id_size, struct sbx_error *e);
/* Extends OWNER's lease of ID to now + TTL_MS. -ESTALE when OWNER no
 * longer holds it. */
int store_lease_renew(struct store *s, const char *id, const char *owner,
                      int64_t ttl_ms, struct sbx_error *e);
/* Gives the lease up (no-op when OWNER does not hold it). */
int store_lease_release(struct store *s, const char *id, const char *owner,
                        struct sbx_error *e);

/* --- the runner's state and journal --- */
/* Replaces the run's state text. -ENOENT without the run. */
int store_state_put(struct store *s, const char *id, const char *text,
                    size_t len, struct sbx_error *e);
/* The run's state text (new, NUL-terminated) and its length; -ENOENT when
 * the run has none. */
int store_state_get(struct store *s, const char *id, char **text, size_t *len,
                    struct sbx_error *e);
/* Removes the run's state and journal (a run that ended, or one starting
 * again from nothing). */
int store_state_clear(struct store *s, const char *id, struct sbx_error *e);
/* Appends LEN bytes to the run's journal. */
int store_journal_append(struct store *s, const char *id, const char *text,
                         size_t len, struct sbx_error *e);
/* Keeps the first KEEP bytes of the run's journal: the chunks after them
 * are removed in one statement (a cut inside a chunk, which the runner
 * never makes, puts that chunk's first bytes back after). */
int store_journal_cut(struct store *s, const char *id, size_t keep,
                      struct sbx_error *e);
/* The whole journal (new, NUL-terminated; "" when empty), up to MAX bytes
 * (-EFBIG over it). */
int store_journal_read(struct store *s, const char *id, size_t max, char **text,
                       size_t *len, struct sbx_error *e);

/* --- events --- */
/* Records event SEQ of the run. -EEXIST when SEQ is recorded already. */
int store_event_add(struct store *s, const char *id, int64_t seq,
                    const char *type, const char *data, struct sbx_error *e);
/* Records EVENTS (borrowed: [{"seq","type","data"}], at least one) of the
 * run in one statement: all or none. -EEXIST when one is recorded
 * already (the message names the first of the batch). */
int store_events_add(struct store *s, const char *id, json_t *events,
                     struct sbx_error *e);
/* Up to LIMIT (1..STORE_LIST_MAX) events after seq AFTER, in order:
 * [{"seq","type","data" (the JSON text)}]. */
int store_events_after(struct store *s, const char *id, int64_t after,
                       size_t limit, json_t **out, struct sbx_error *e);

/* --- a person's decisions on calls waiting for approval --- */
/* Records DECISION ("approve" or "reject") with REASON (may be NULL) for
 * CALL_ID. -EEXIST when that call is decided already. */
int store_decision_add(struct store *s, const char *id, const char *call_id,
                       const char *decision, const char *reason,
                       struct sbx_error *e);
/* {"CALL_ID": {"decision","reason" (null when none)}} (new). */
int store_decisions_get(struct store *s, const char *id, json_t **out,
                        struct sbx_error *e);

/* --- idempotency keys --- */
/* The first answer given for (OWNER, KEY): its STATUS and BODY (new).
 * -ENOENT when none. */
int store_idem_get(struct store *s, const char *owner, const char *key,
                   int *status, char **body, struct sbx_error *e);
/* Records the answer; -EEXIST when one is recorded (the caller then
 * answers with that one). */
int store_idem_put(struct store *s, const char *owner, const char *key,
                   int status, const char *body, struct sbx_error *e);

/* --- sandbox records --- */
int store_sandbox_put(struct store *s, const char *id, const char *owner,
                      json_t *record, struct sbx_error *e);
/* {"id","owner","record","created_at"} (new). -ENOENT. */
int store_sandbox_get(struct store *s, const char *id, json_t **out,
                      struct sbx_error *e);
/* Every record of OWNER (NULL: all), oldest first, as above. */
int store_sandbox_list(struct store *s, const char *owner, json_t **out,
                       struct sbx_error *e);
/* -ENOENT. */
int store_sandbox_remove(struct store *s, const char *id, struct sbx_error *e);

#endif
