/* The state store's front: the URL's scheme picks the store, and every
 * call is checked, timed and shaped here once, so that a store only runs
 * its SQL (store_internal.h). */
#include "controller/state/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/state/store_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/json.h"

static const struct {
  const char *prefix;
  const struct store_ops *ops;
  bool whole; /* the store is given the whole URL, not what follows */
} schemes[] = {
    {"sqlite:", &store_sqlite_ops, false},
    {"postgres://", &store_pg_ops, true},
    {"postgresql://", &store_pg_ops, true},
};

static int oom(struct sbx_error *e) {
  return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
}

static int bad_args(struct sbx_error *e, const char *fn) {
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "%s: a required argument is missing", fn);
}

static int no_such(const struct store *s, struct sbx_error *e, const char *what,
                   const char *name) {
  return sbx_error_set(e, SBX_NOT_FOUND, ENOENT, "no %s \"%s\" in %s", what,
                       name, s->where);
}

/* URL into OUT (N bytes) with the password of its user part and of a
 * password= parameter replaced by "***": messages name the store by it. */
static void redact(const char *url, char *out, size_t n) {
  const char *auth = strstr(url, "://");
  const char *at = NULL, *colon = NULL;
  if (auth) {
    auth += 3;
    size_t len = strcspn(auth, "/?#");
    at = memrchr(auth, '@', len);
    colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
  }
  const char *query = strchr(url, '?');
  size_t k = 0;
  for (const char *p = url; *p && k + 4 < n;) {
    bool param = query && p > query && (p[-1] == '?' || p[-1] == '&');
    if (colon && p == colon + 1) {
      k += (size_t)snprintf(out + k, n - k, "***");
      p = at;
    } else if (param && strncmp(p, "password=", 9) == 0) {
      k += (size_t)snprintf(out + k, n - k, "password=***");
      p += 9 + strcspn(p + 9, "&#");
    } else {
      out[k++] = *p++;
    }
  }
  out[k < n ? k : n - 1] = '\0';
}

int store_open(const char *url, struct store **out, struct sbx_error *e) {
  *out = NULL;
  if (!url)
    return bad_args(e, __func__);
  char where[STORE_WHERE_MAX];
  redact(url, where, sizeof(where));
  size_t i = 0;
  while (i < SBX_ARRAY_SIZE(schemes) &&
         strncmp(url, schemes[i].prefix, strlen(schemes[i].prefix)) != 0)
    i++;
  if (i == SBX_ARRAY_SIZE(schemes))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown state store URL \"%s\" (use sqlite:PATH or "
                         "postgres://...)",
                         where);
  const char *target = schemes[i].whole ? url : url + strlen(schemes[i].prefix);
  struct store *s = NULL;
  int64_t version = 0;
  int r = schemes[i].ops->open(target, where, &s, &version, e);
  if (r < 0)
    return r;
  if (version > STORE_SCHEMA_VERSION) {
    (void)store_close(s);
    return sbx_error_set(e, SBX_VERSION_MISMATCH, EINVAL,
                         "the state store %s has schema version %lld; this "
                         "sbx knows %d",
                         where, (long long)version, STORE_SCHEMA_VERSION);
  }
  *out = s;
  return 0;
}

struct store *store_close(struct store *s) {
  if (s)
    s->ops->close(s);
  return NULL;
}

const char *store_kind(const struct store *s) {
  return s->ops->kind;
}

int64_t store_now_ms(void) {
  return (int64_t)sbx_wall_ms();
}

int store_args_check(const struct store *s, const struct store_arg *a, size_t n,
                     struct sbx_error *e) {
  for (size_t i = 0; i < n; i++)
    if (!a[i].is_int && a[i].len > STORE_MAX_TEXT)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                           "%s: a text of %zu bytes is over the %zu a cell "
                           "holds",
                           s->where, a[i].len, STORE_MAX_TEXT);
  return 0;
}

int store_row_int64(void *arg, const struct store_row *row,
                    struct sbx_error *e) {
  *(int64_t *)arg = row->integer(row, 0);
  return 0;
}

/* ---- rows into JSON ------------------------------------------------------ */

/* Column COL as a JSON string, null for SQL NULL (new; NULL when out of
 * memory). */
static json_t *cell_string(const struct store_row *row, int col) {
  size_t len;
  const char *t = row->text(row, col, &len);
  return t ? sbx_json_stringn_utf8(t, len) : json_null();
}

static json_t *cell_int(const struct store_row *row, int col) {
  size_t len;
  if (!row->text(row, col, &len))
    return json_null();
  return json_integer((json_int_t)row->integer(row, col));
}

/* Column COL, JSON text, parsed into *OUT (new); null for SQL NULL. */
static int cell_json(const struct store_row *row, int col, const char *what,
                     json_t **out, struct sbx_error *e) {
  size_t len;
  const char *t = row->text(row, col, &len);
  if (!t) {
    *out = json_null();
    return 0;
  }
  json_error_t je;
  *out = json_loadb(t, len, JSON_DECODE_ANY, &je);
  if (!*out)
    return sbx_error_set(e, SBX_INTERNAL, EIO, "the %s stored is not JSON: %s",
                         what, je.text);
  return 0;
}

/* Unix ms as RFC 3339 UTC text, as state_now writes it (new). */
static json_t *rfc3339(int64_t ms) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  char buf[32];
  if (!gmtime_r(&t, &tm) ||
      strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    return json_null();
  return json_string(buf);
}

typedef int (*shape_fn)(const struct store_row *row, json_t **out,
                        struct sbx_error *e);

static int token_shape(const struct store_row *row, bool hash, json_t **out,
                       struct sbx_error *e) {
  *out = json_pack("{s:o, s:o, s:o, s:o}", "id", cell_string(row, TOKEN_ID),
                   "name", cell_string(row, TOKEN_NAME), "scopes",
                   cell_string(row, TOKEN_SCOPES), "created_at",
                   rfc3339(row->integer(row, TOKEN_CREATED_AT)));
  if (*out && hash &&
      json_object_set_new(*out, "hash", cell_string(row, TOKEN_HASH)) < 0) {
    json_decref(*out);
    *out = NULL;
  }
  return *out ? 0 : oom(e);
}

static int token_full(const struct store_row *row, json_t **out,
                      struct sbx_error *e) {
  return token_shape(row, true, out, e);
}

static int token_listed(const struct store_row *row, json_t **out,
                        struct sbx_error *e) {
  return token_shape(row, false, out, e);
}

static int run_shape(const struct store_row *row, json_t **out,
                     struct sbx_error *e) {
  json_t *request = NULL, *result = NULL;
  int r = cell_json(row, RUN_REQUEST, "request of a run", &request, e);
  if (r == 0)
    r = cell_json(row, RUN_RESULT, "result of a run", &result, e);
  if (r < 0) {
    json_decref(request);
    return r;
  }
  *out = json_pack(
      "{s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:o, s:b, s:I}", "id",
      cell_string(row, RUN_ID), "status", cell_string(row, RUN_STATUS), "owner",
      cell_string(row, RUN_OWNER), "request", request, "result", result,
      "created_at", (json_int_t)row->integer(row, RUN_CREATED_AT), "updated_at",
      (json_int_t)row->integer(row, RUN_UPDATED_AT), "lease_owner",
      cell_string(row, RUN_LEASE_OWNER), "lease_until",
      cell_int(row, RUN_LEASE_UNTIL), "cancel_requested",
      row->integer(row, RUN_CANCEL_REQUESTED) != 0, "last_seq",
      (json_int_t)row->integer(row, RUN_LAST_SEQ));
  return *out ? 0 : oom(e);
}

static int event_shape(const struct store_row *row, json_t **out,
                       struct sbx_error *e) {
  *out = json_pack("{s:I, s:o, s:o}", "seq",
                   (json_int_t)row->integer(row, EVENT_SEQ), "type",
                   cell_string(row, EVENT_TYPE), "data",
                   cell_string(row, EVENT_DATA));
  return *out ? 0 : oom(e);
}

static int sandbox_shape(const struct store_row *row, json_t **out,
                         struct sbx_error *e) {
  json_t *record = NULL;
  int r = cell_json(row, SANDBOX_RECORD, "sandbox record", &record, e);
  if (r < 0)
    return r;
  *out = json_pack("{s:o, s:o, s:o, s:I}", "id", cell_string(row, SANDBOX_ID),
                   "owner", cell_string(row, SANDBOX_OWNER), "record", record,
                   "created_at",
                   (json_int_t)row->integer(row, SANDBOX_CREATED_AT));
  return *out ? 0 : oom(e);
}

/* Rows shaped into the array ROWS (borrowed), LIMIT of them at most (0:
 * any number); a row past them sets MORE. LAST is the CURSOR column (-1:
 * none) of the last row kept. */
struct collect {
  shape_fn shape;
  json_t *rows;
  size_t limit;
  int cursor;
  bool more;
  int64_t last;
};

static int collect_row(void *arg, const struct store_row *row,
                       struct sbx_error *e) {
  struct collect *c = arg;
  if (c->limit && json_array_size(c->rows) == c->limit) {
    c->more = true;
    return 0;
  }
  json_t *j = NULL;
  int r = c->shape(row, &j, e);
  if (r < 0)
    return r;
  if (json_array_append_new(c->rows, j) < 0)
    return oom(e);
  if (c->cursor >= 0)
    c->last = row->integer(row, c->cursor);
  return 0;
}

/* The one row a read found (new) from its result R; -ENOENT naming WHAT
 * NAME when there was none. */
static int first_row(const struct store *s, int r, json_t *rows,
                     const char *what, const char *name, json_t **out,
                     struct sbx_error *e) {
  if (r < 0)
    return r;
  if (json_array_size(rows) == 0)
    return no_such(s, e, what, name);
  *out = json_incref(json_array_get(rows, 0));
  return 0;
}

static int check_limit(size_t limit, struct sbx_error *e) {
  if (limit < 1 || limit > STORE_LIST_MAX)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a limit of %zu rows (1 to %d)", limit,
                         STORE_LIST_MAX);
  return 0;
}

/* J as compact JSON text (new). */
static int dump(const json_t *j, const char *what, char **out,
                struct sbx_error *e) {
  *out = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
  if (!*out)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the %s cannot be written as JSON", what);
  return 0;
}

/* The NULL-terminated LIST of statuses (1 to STORE_LIST_MAX texts) as a
 * JSON array (new text), the form both stores take it in. */
static int status_list(const char *const *list, char **out,
                       struct sbx_error *e) {
  _cleanup_json_ json_t *a = json_array();
  if (!a)
    return oom(e);
  size_t i = 0;
  for (; list[i] && i < STORE_LIST_MAX; i++)
    if (json_array_append_new(a, json_string(list[i])) < 0)
      break;
  if (i == 0 || list[i])
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a list of statuses must hold 1 to %d texts",
                         STORE_LIST_MAX);
  return dump(a, "list of statuses", out, e);
}

/* 0 when run ID exists, else -ENOENT (or the read's error). */
static int run_exists(struct store *s, const char *id, struct sbx_error *e) {
  _cleanup_json_ json_t *rows = json_array();
  struct collect c = {.shape = run_shape, .rows = rows, .cursor = -1};
  if (!rows)
    return oom(e);
  int r = s->ops->run_get(s, id, collect_row, &c, e);
  if (r == 0 && json_array_size(rows) == 0)
    r = no_such(s, e, "run", id);
  return r;
}

/* ---- tokens -------------------------------------------------------------- */

int store_token_add(struct store *s, const char *id, const char *name,
                    const char *hash_hex, const char *scopes,
                    struct sbx_error *e) {
  if (!id || !name || !hash_hex || !scopes)
    return bad_args(e, __func__);
  int r = s->ops->token_add(s, id, name, hash_hex, scopes, store_now_ms(), e);
  if (r == -EEXIST)
    return sbx_error_set(e, SBX_ALREADY_EXISTS, EEXIST,
                         "a token named \"%s\" or with id \"%s\" exists "
                         "already in %s",
                         name, id, s->where);
  return r;
}

int store_token_get(struct store *s, const char *id, json_t **out,
                    struct sbx_error *e) {
  *out = NULL;
  _cleanup_json_ json_t *rows = json_array();
  struct collect c = {.shape = token_full, .rows = rows, .cursor = -1};
  if (!id)
    return bad_args(e, __func__);
  int r = rows ? s->ops->token_get(s, id, collect_row, &c, e) : oom(e);
  return first_row(s, r, rows, "token", id, out, e);
}

int store_token_list(struct store *s, json_t **out, struct sbx_error *e) {
  *out = NULL;
  _cleanup_json_ json_t *rows = json_array();
  struct collect c = {.shape = token_listed, .rows = rows, .cursor = -1};
  int r = rows ? s->ops->token_list(s, collect_row, &c, e) : oom(e);
  if (r == 0)
    *out = TAKE_PTR(rows);
  return r;
}

int store_token_remove(struct store *s, const char *name, struct sbx_error *e) {
  if (!name)
    return bad_args(e, __func__);
  int64_t changed = 0;
  int r = s->ops->token_remove(s, name, &changed, e);
  if (r == 0 && changed == 0)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "no token named \"%s\" in %s", name, s->where);
  return r;
}

/* ---- runs ---------------------------------------------------------------- */

int store_run_insert(struct store *s, const char *id, const char *owner,
                     const char *status, json_t *request, struct sbx_error *e) {
  if (!id || !owner || !status || !json_is_object(request))
    return bad_args(e, __func__);
  _cleanup_free_ char *text = NULL;
  int r = dump(request, "request", &text, e);
  if (r == 0)
    r = s->ops->run_insert(s, id, owner, status, text, store_now_ms(), e);
  if (r == -EEXIST)
    return sbx_error_set(e, SBX_ALREADY_EXISTS, EEXIST,
                         "a run \"%s\" exists already in %s", id, s->where);
  return r;
}

int store_run_get(struct store *s, const char *id, json_t **out,
                  struct sbx_error *e) {
  *out = NULL;
  _cleanup_json_ json_t *rows = json_array();
  struct collect c = {.shape = run_shape, .rows = rows, .cursor = -1};
  if (!id)
    return bad_args(e, __func__);
  int r = rows ? s->ops->run_get(s, id, collect_row, &c, e) : oom(e);
  return first_row(s, r, rows, "run", id, out, e);
}

int store_run_list(struct store *s, const char *status, const char *owner,
                   int64_t before, size_t limit, json_t **out, int64_t *next,
                   struct sbx_error *e) {
  *out = NULL;
  *next = 0;
  int r = check_limit(limit, e);
  if (r < 0)
    return r;
  if (before < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a negative cursor (%lld)", (long long)before);
  _cleanup_json_ json_t *rows = json_array();
  struct collect c = {
      .shape = run_shape, .rows = rows, .limit = limit, .cursor = RUN_N};
  /* One row more than asked says whether there is a next page. */
  r = rows ? s->ops->run_list(s, status, owner, before, (int64_t)limit + 1,
                              collect_row, &c, e)
           : oom(e);
  if (r < 0)
    return r;
  *next = c.more ? c.last : 0;
  *out = TAKE_PTR(rows);
  return 0;
}

int store_run_update(struct store *s, const char *id, const char *const *from,
                     const char *status, json_t *result, struct sbx_error *e) {
  if (!id)
    return bad_args(e, __func__);
  _cleanup_free_ char *from_text = NULL, *result_text = NULL;
  int r = from ? status_list(from, &from_text, e) : 0;
  if (r == 0 && result)
    r = dump(result, "result", &result_text, e);
  int64_t changed = 0;
  if (r == 0)
    r = s->ops->run_update(s, id, from_text, status, result_text,
                           store_now_ms(), &changed, e);
  if (r < 0 || changed > 0)
    return r;
  r = run_exists(s, id, e);
  if (r < 0)
    return r;
  return sbx_error_set(e, SBX_CONFLICT, ESTALE,
                       "run \"%s\" is no longer in a status of %s", id,
                       from_text);
}

int store_run_cancel_request(struct store *s, const char *id,
                             struct sbx_error *e) {
  if (!id)
    return bad_args(e, __func__);
  int64_t changed = 0;
  int r = s->ops->run_cancel_request(s, id, store_now_ms(), &changed, e);
  if (r == 0 && changed == 0)
    return no_such(s, e, "run", id);
  return r;
}

static int count_row(void *arg, const struct store_row *row,
                     struct sbx_error *e) {
  size_t len;
  const char *status = row->text(row, 0, &len);
  json_t *n = json_integer((json_int_t)row->integer(row, 1));
  if (!status || json_object_setn_new(arg, status, len, n) < 0)
    return oom(e);
  return 0;
}

int store_run_counts(struct store *s, json_t **out, struct sbx_error *e) {
  *out = NULL;
  _cleanup_json_ json_t *counts = json_object();
  int r = counts ? s->ops->run_counts(s, count_row, counts, e) : oom(e);
  if (r == 0)
    *out = TAKE_PTR(counts);
  return r;
}

/* ---- leases -------------------------------------------------------------- */

struct claim {
  char *id;
  size_t size;
  bool found;
};

static int claim_row(void *arg, const struct store_row *row,
                     struct sbx_error *e) {
  struct claim *c = arg;
  size_t len;
  const char *id = row->text(row, 0, &len);
  if (!id || len >= c->size)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "the id of the run taken does not fit %zu bytes",
                         c->size);
  memcpy(c->id, id, len + 1);
  c->found = true;
  return 0;
}

static int check_ttl(int64_t ttl_ms, struct sbx_error *e) {
  if (ttl_ms <= 0 || ttl_ms > INT64_MAX / 2)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "a lease of %lld ms",
                         (long long)ttl_ms);
  return 0;
}

int store_lease_claim(struct store *s, const char *owner,
                      const char *const *statuses, int64_t ttl_ms, char *id,
                      size_t id_size, struct sbx_error *e) {
  if (!owner || !statuses || !id || id_size == 0)
    return bad_args(e, __func__);
  _cleanup_free_ char *list = NULL;
  int r = check_ttl(ttl_ms, e);
  if (r == 0)
    r = status_list(statuses, &list, e);
  if (r < 0)
    return r;
  struct claim c = {.id = id, .size = id_size};
  int64_t now = store_now_ms();
  r = s->ops->lease_claim(s, owner, list, now, now + ttl_ms, claim_row, &c, e);
  if (r == 0 && !c.found)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "no run of %s free to take in %s", list, s->where);
  return r;
}

int store_lease_renew(struct store *s, const char *id, const char *owner,
                      int64_t ttl_ms, struct sbx_error *e) {
  if (!id || !owner)
    return bad_args(e, __func__);
  int r = check_ttl(ttl_ms, e);
  int64_t changed = 0;
  if (r == 0)
    r = s->ops->lease_renew(s, id, owner, store_now_ms() + ttl_ms, &changed, e);
  if (r < 0 || changed > 0)
    return r;
  r = run_exists(s, id, e);
  if (r < 0)
    return r;
  return sbx_error_set(e, SBX_CONFLICT, ESTALE,
                       "the lease of run \"%s\" is no longer held by \"%s\"",
                       id, owner);
}

int store_lease_release(struct store *s, const char *id, const char *owner,
                        struct sbx_error *e) {
  if (!id || !owner)
    return bad_args(e, __func__);
  return s->ops->lease_release(s, id, owner, e);
}

/* ---- the runner's state and journal -------------------------------------- */

int store_state_put(struct store *s, const char *id, const char *text,
                    size_t len, struct sbx_error *e) {
  if (!id || !text)
    return bad_args(e, __func__);
  int64_t changed = 0;
  int r = s->ops->state_put(s, id, text, len, &changed, e);
  if (r == 0 && changed == 0)
    return no_such(s, e, "run", id);
  return r;
}

/* A text cell copied (new, NUL-terminated); left NULL for SQL NULL. */
struct text_cell {
  char *text;
  size_t len;
};

static int copy_cell(const struct store_row *row, int col, struct text_cell *c,
                     struct sbx_error *e) {
  size_t len;
  const char *t = row->text(row, col, &len);
  if (!t)
    return 0;
  char *copy = malloc(len + 1);
  if (!copy)
    return oom(e);
  memcpy(copy, t, len);
  copy[len] = '\0';
  free(c->text);
  c->text = copy;
  c->len = len;
  return 0;
}

static int text_row(void *arg, const struct store_row *row,
                    struct sbx_error *e) {
  return copy_cell(row, 0, arg, e);
}

int store_state_get(struct store *s, const char *id, char **text, size_t *len,
                    struct sbx_error *e) {
  *text = NULL;
  *len = 0;
  if (!id)
    return bad_args(e, __func__);
  struct text_cell c = {0};
  int r = s->ops->state_get(s, id, text_row, &c, e);
  if (r == 0 && !c.text)
    r = sbx_error_set(e, SBX_NOT_FOUND, ENOENT, "run \"%s\" has no state in %s",
                      id, s->where);
  if (r < 0) {
    free(c.text);
    return r;
  }
  *text = c.text;
  *len = c.len;
  return 0;
}

int store_state_clear(struct store *s, const char *id, struct sbx_error *e) {
  if (!id)
    return bad_args(e, __func__);
  return s->ops->state_clear(s, id, e);
}

int store_journal_append(struct store *s, const char *id, const char *text,
                         size_t len, struct sbx_error *e) {
  if (!id || !text)
    return bad_args(e, __func__);
  int r = s->ops->journal_append(s, id, text, len, e);
  if (r == -ENOENT)
    return no_such(s, e, "run", id);
  return r;
}

struct journal {
  struct sbx_buf *b;
  const char *id;
};

static int journal_row(void *arg, const struct store_row *row,
                       struct sbx_error *e) {
  struct journal *j = arg;
  size_t len;
  const char *t = row->text(row, 0, &len);
  int r = sbx_buf_append(j->b, t ? t : "", len);
  if (r == -E2BIG)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "the journal of run \"%s\" is over %zu bytes", j->id,
                         j->b->max);
  return r < 0 ? oom(e) : 0;
}

int store_journal_read(struct store *s, const char *id, size_t max, char **text,
                       size_t *len, struct sbx_error *e) {
  *text = NULL;
  *len = 0;
  if (!id)
    return bad_args(e, __func__);
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, max);
  struct journal j = {.b = &b, .id = id};
  int r = s->ops->journal_read(s, id, journal_row, &j, e);
  if (r < 0)
    return r;
  *text = sbx_buf_steal(&b, len);
  return *text ? 0 : oom(e);
}

struct chunks {
  size_t keep;   /* the bytes to keep */
  size_t total;  /* of the chunks seen */
  int64_t whole; /* chunks that end at or before KEEP */
  bool inside;   /* KEEP falls inside a chunk */
  char *part;    /* that chunk's first bytes (new) */
  size_t part_len;
};

static int chunk_row(void *arg, const struct store_row *row,
                     struct sbx_error *e) {
  struct chunks *c = arg;
  size_t len;
  const char *t = row->text(row, 0, &len);
  if (c->total + len <= c->keep) {
    c->whole++;
  } else if (c->total < c->keep && !c->part) {
    c->part_len = c->keep - c->total;
    c->part = malloc(c->part_len);
    if (!c->part)
      return oom(e);
    memcpy(c->part, t, c->part_len);
  }
  c->total += len;
  return 0;
}

int store_journal_cut(struct store *s, const char *id, size_t keep,
                      struct sbx_error *e) {
  if (!id)
    return bad_args(e, __func__);
  struct chunks c = {.keep = keep};
  int r = s->ops->journal_read(s, id, chunk_row, &c, e);
  if (r == 0 && c.total > keep)
    r = s->ops->journal_keep(s, id, c.whole, e);
  /* A cut inside a chunk (the runner cuts after whole steps, so only a
   * journal that was not the runner's): its first bytes go back. */
  if (r == 0 && c.part)
    r = s->ops->journal_append(s, id, c.part, c.part_len, e);
  free(c.part);
  return r;
}

/* ---- events -------------------------------------------------------------- */

int store_events_add(struct store *s, const char *id, json_t *events,
                     struct sbx_error *e) {
  size_t n = json_array_size(events);
  if (!id || !n)
    return bad_args(e, __func__);
  _cleanup_json_ json_t *rows = json_array();
  size_t i;
  json_t *ev;
  json_array_foreach(events, i, ev) {
    json_t *seq = json_object_get(ev, "seq");
    const char *type = json_string_value(json_object_get(ev, "type"));
    const char *data = json_string_value(json_object_get(ev, "data"));
    if (!json_is_integer(seq) || !type || !data)
      return bad_args(e, __func__);
    if (!rows || json_array_append_new(
                     rows, json_pack("[O, s, s]", seq, type, data)) < 0)
      return oom(e);
  }
  _cleanup_free_ char *batch = json_dumps(rows, JSON_COMPACT);
  if (!batch)
    return oom(e);
  int r = s->ops->events_add(s, id, batch, e);
  if (r == -EEXIST)
    return sbx_error_set(e, SBX_ALREADY_EXISTS, EEXIST,
                         "event %lld of run \"%s\" is recorded already in %s",
                         (long long)json_integer_value(
                             json_object_get(json_array_get(events, 0), "seq")),
                         id, s->where);
  if (r == -ENOENT)
    return no_such(s, e, "run", id);
  return r;
}

int store_event_add(struct store *s, const char *id, int64_t seq,
                    const char *type, const char *data, struct sbx_error *e) {
  if (!id || !type || !data)
    return bad_args(e, __func__);
  _cleanup_json_ json_t *one = json_pack(
      "[{s:I, s:s, s:s}]", "seq", (json_int_t)seq, "type", type, "data", data);
  return one ? store_events_add(s, id, one, e) : oom(e);
}

int store_events_after(struct store *s, const char *id, int64_t after,
                       size_t limit, json_t **out, struct sbx_error *e) {
  *out = NULL;
  if (!id)
    return bad_args(e, __func__);
  int r = check_limit(limit, e);
  _cleanup_json_ json_t *rows = json_array();
  struct collect c = {.shape = event_shape, .rows = rows, .cursor = -1};
  if (r == 0)
    r = rows ? s->ops->events_after(s, id, after, (int64_t)limit, collect_row,
                                    &c, e)
             : oom(e);
  if (r == 0)
    *out = TAKE_PTR(rows);
  return r;
}

/* ---- decisions ----------------------------------------------------------- */

int store_decision_add(struct store *s, const char *id, const char *call_id,
                       const char *decision, const char *reason,
                       struct sbx_error *e) {
  if (!id || !call_id || !decision)
    return bad_args(e, __func__);
  if (strcmp(decision, "approve") != 0 && strcmp(decision, "reject") != 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a decision is \"approve\" or \"reject\", not "
                         "\"%.64s\"",
                         decision);
  int r = s->ops->decision_add(s, id, call_id, decision, reason, e);
  if (r == -EEXIST)
    return sbx_error_set(e, SBX_ALREADY_EXISTS, EEXIST,
                         "call \"%s\" of run \"%s\" is decided already in %s",
                         call_id, id, s->where);
  if (r == -ENOENT)
    return no_such(s, e, "run", id);
  return r;
}

static int decision_row(void *arg, const struct store_row *row,
                        struct sbx_error *e) {
  size_t len;
  const char *call = row->text(row, DECISION_CALL_ID, &len);
  json_t *d =
      json_pack("{s:o, s:o}", "decision", cell_string(row, DECISION_DECISION),
                "reason", cell_string(row, DECISION_REASON));
  if (!call || json_object_setn_new(arg, call, len, d) < 0)
    return oom(e);
  return 0;
}

int store_decisions_get(struct store *s, const char *id, json_t **out,
                        struct sbx_error *e) {
  *out = NULL;
  if (!id)
    return bad_args(e, __func__);
  _cleanup_json_ json_t *all = json_object();
  int r = all ? s->ops->decisions_get(s, id, decision_row, all, e) : oom(e);
  if (r == 0)
    *out = TAKE_PTR(all);
  return r;
}

/* ---- idempotency keys ---------------------------------------------------- */

struct idem {
  int status;
  struct text_cell body;
  bool found;
};

static int idem_row(void *arg, const struct store_row *row,
                    struct sbx_error *e) {
  struct idem *i = arg;
  i->status = (int)row->integer(row, 0);
  i->found = true;
  return copy_cell(row, 1, &i->body, e);
}

int store_idem_get(struct store *s, const char *owner, const char *key,
                   int *status, char **body, struct sbx_error *e) {
  *status = 0;
  *body = NULL;
  if (!owner || !key)
    return bad_args(e, __func__);
  struct idem i = {0};
  int r = s->ops->idem_get(s, owner, key, idem_row, &i, e);
  if (r == 0 && !i.found)
    r = sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                      "no answer recorded for key \"%s\" of \"%s\" in %s", key,
                      owner, s->where);
  if (r < 0) {
    free(i.body.text);
    return r;
  }
  *status = i.status;
  *body = i.body.text;
  return 0;
}

int store_idem_put(struct store *s, const char *owner, const char *key,
                   int status, const char *body, struct sbx_error *e) {
  if (!owner || !key || !body)
    return bad_args(e, __func__);
  int r = s->ops->idem_put(s, owner, key, status, body, store_now_ms(), e);
  if (r == -EEXIST)
    return sbx_error_set(e, SBX_ALREADY_EXISTS, EEXIST,
                         "an answer for key \"%s\" of \"%s\" is recorded "
                         "already in %s",
                         key, owner, s->where);
  return r;
}

/* ---- sandbox records ----------------------------------------------------- */

int store_sandbox_put(struct store *s, const char *id, const char *owner,
                      json_t *record, struct sbx_error *e) {
  if (!id || !owner || !record)
    return bad_args(e, __func__);
  _cleanup_free_ char *text = NULL;
  int r = dump(record, "sandbox record", &text, e);
  if (r < 0)
    return r;
  return s->ops->sandbox_put(s, id, owner, text, store_now_ms(), e);
}

int store_sandbox_get(struct store *s, const char *id, json_t **out,
                      struct sbx_error *e) {
  *out = NULL;
  _cleanup_json_ json_t *rows = json_array();
  struct collect c = {.shape = sandbox_shape, .rows = rows, .cursor = -1};
  if (!id)
    return bad_args(e, __func__);
  int r = rows ? s->ops->sandbox_get(s, id, collect_row, &c, e) : oom(e);
  return first_row(s, r, rows, "sandbox", id, out, e);
}

int store_sandbox_list(struct store *s, const char *owner, json_t **out,
                       struct sbx_error *e) {
  *out = NULL;
  _cleanup_json_ json_t *rows = json_array();
  struct collect c = {.shape = sandbox_shape, .rows = rows, .cursor = -1};
  int r = rows ? s->ops->sandbox_list(s, owner, collect_row, &c, e) : oom(e);
  if (r == 0)
    *out = TAKE_PTR(rows);
  return r;
}

int store_sandbox_remove(struct store *s, const char *id, struct sbx_error *e) {
  if (!id)
    return bad_args(e, __func__);
  int64_t changed = 0;
  int r = s->ops->sandbox_remove(s, id, &changed, e);
  if (r == 0 && changed == 0)
    return no_such(s, e, "sandbox", id);
  return r;
}
