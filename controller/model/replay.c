/* Record and replay of model calls: each successful call appended to a
 * file as one JSON line, and a run served from such a file instead of the
 * network, checked call by call against what the run would send. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/model/model_internal.h"
#include "controller/net/http.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

#define REPLAY_MAX_BYTES ((size_t)256 << 20)
#define REPLAY_MAX_CALLS 100000u

/* ---- recording ----------------------------------------------------- */

int model_record_open(struct model_recorder *m, const char *path,
                      struct sbx_error *e) {
  m->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (m->fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot open recording %s: %m",
                         path);
  m->path = strdup(path);
  if (!m->path)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  return 0;
}

void model_record_close(struct model_recorder *m) {
  if (m->fd >= 0)
    (void)close(m->fd);
  m->fd = -1;
  free(m->path);
  m->path = NULL;
}

int model_record_write(struct model_recorder *m,
                       const struct model_api_ops *api, json_t *body,
                       json_t *reply, struct sbx_error *e) {
  _cleanup_json_ json_t *line =
      json_pack("{s:i, s:s, s:O, s:O}", "version", 1, "api", api->name,
                "request", body, "response", reply);
  _cleanup_free_ char *text = line ? json_dumps(line, JSON_COMPACT) : NULL;
  if (!text)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  size_t n = strlen(text);
  _cleanup_free_ char *buf = malloc(n + 1);
  if (!buf)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  memcpy(buf, text, n);
  buf[n++] = '\n';
  /* One write per line, so concurrent writers never interleave lines. */
  int r = sbx_write_all(m->fd, buf, n);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot write recording %s: %s",
                         m->path, strerror(-r));
  return 0;
}

/* ---- replay -------------------------------------------------------- */

/* Reads the whole of PATH (at most MAX bytes) into B. */
static int read_file(const char *path, size_t max, struct sbx_buf *b,
                     struct sbx_error *e) {
  _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot open replay file %s: %m",
                         path);
  struct stat st;
  if (fstat(fd, &st) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot stat replay file %s: %m",
                         path);
  if (!S_ISREG(st.st_mode))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "replay file %s is not a regular file", path);
  char sz[32];
  http_format_size(max, sz, sizeof(sz));
  sbx_buf_init(b, max);
  for (;;) {
    if (sbx_buf_reserve(b, 65536) < 0 && sbx_buf_reserve(b, 1) < 0)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "replay file %s exceeds %s", path, sz);
    ssize_t n = read(fd, b->data + b->len, b->cap - b->len - 1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return sbx_error_set(e, SBX_OK, errno, "cannot read replay file %s: %m",
                           path);
    if (n == 0)
      break;
    b->len += (size_t)n;
    b->data[b->len] = '\0';
  }
  return 0;
}

int model_replay_load(struct model_replay *m, const char *path,
                      struct sbx_error *e) {
  _cleanup_buf_ struct sbx_buf b = {0};
  int r = read_file(path, REPLAY_MAX_BYTES, &b, e);
  if (r < 0)
    return r;
  m->calls = json_array();
  if (!m->calls)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  size_t lineno = 0;
  for (size_t off = 0; off < b.len;) {
    const char *line = b.data + off;
    const char *nl = memchr(line, '\n', b.len - off);
    size_t len = nl ? (size_t)(nl - line) : b.len - off;
    off += len + (nl ? 1 : 0);
    lineno++;
    size_t k = 0;
    while (k < len && isspace((unsigned char)line[k]))
      k++;
    if (k == len)
      continue;
    if (json_array_size(m->calls) >= REPLAY_MAX_CALLS)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "replay file %s has more than %u model calls", path,
                           REPLAY_MAX_CALLS);
    json_error_t jerr;
    _cleanup_json_ json_t *j = json_loadb(line, len, 0, &jerr);
    if (!j)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                           "replay file %s line %zu: invalid JSON: %s", path,
                           lineno, jerr.text);
    const char *api = json_string_value(json_object_get(j, "api"));
    if (model_json_int(j, "version") != 1)
      return sbx_error_set(e, SBX_VERSION_MISMATCH, EPROTO,
                           "replay file %s line %zu: unsupported version "
                           "(expected 1)",
                           path, lineno);
    if (!model_api_named(api) ||
        !json_is_object(json_object_get(j, "request")) ||
        !json_is_object(json_object_get(j, "response")))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                           "replay file %s line %zu: expected {\"version\": "
                           "1, \"api\", \"request\", \"response\"}",
                           path, lineno);
    if (json_array_append(m->calls, j) < 0)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  m->path = strdup(path);
  if (!m->path)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  return 0;
}

void model_replay_clear(struct model_replay *m) {
  free(m->path);
  json_decref(m->calls);
  memset(m, 0, sizeof(*m));
}

static bool str_eq(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool shape_eq(const struct model_shape *a, const struct model_shape *b) {
  return str_eq(a->type, b->type) && str_eq(a->role, b->role) &&
         str_eq(a->name, b->name) && str_eq(a->call_id, b->call_id);
}

/* "function_call_output for call_ab", "message (user)", ... */
static void shape_text(const struct model_shape *s, char *out, size_t size) {
  (void)snprintf(out, size, "%s%s%s%s%s%s", s->type ? s->type : "untyped",
                 s->role ? " (" : "", s->role ? s->role : "",
                 s->role ? ")" : "", s->name ? " " : "",
                 s->name ? s->name : "");
  if (s->call_id) {
    size_t n = strlen(out);
    (void)snprintf(out + n, size - n, " for %s", s->call_id);
  }
}

/* The tool names of a body, comma-separated, into OUT. */
static void tool_names(const struct model_api_ops *api, json_t *body, char *out,
                       size_t size) {
  size_t n = 0, i;
  json_t *t;
  out[0] = '\0';
  json_array_foreach(json_object_get(body, "tools"), i, t) {
    const char *name = api->tool_name(t);
    if (!name)
      name = json_string_value(json_object_get(t, "type"));
    int w =
        snprintf(out + n, size - n, "%s%s", i ? ", " : "", name ? name : "?");
    if (w < 0 || (size_t)w >= size - n)
      return;
    n += (size_t)w;
  }
}

/* Up to 48 bytes of TEXT from OFF on, as a message may show them: control
 * bytes as '?' (the text is the run's or the recording's, not a model's
 * reply, but a line of it must not break the message). */
static void excerpt(const char *text, size_t off, char *out, size_t size) {
  size_t len = strlen(text), n = 0;
  if (off > len)
    off = len;
  for (size_t i = off; i < len && i < off + 48 && n + 4 < size; i++)
    out[n++] = (unsigned char)text[i] < 0x20 ? '?' : text[i];
  if (off + 48 < len && n + 4 < size)
    n += (size_t)snprintf(out + n, size - n, "...");
  out[n] = '\0';
}

/* The first byte where A and B differ. */
static size_t first_difference(const char *a, const char *b) {
  size_t i = 0;
  while (a[i] && a[i] == b[i])
    i++;
  return i;
}

/* Refuses a replay at call 1 because WHAT differs (PLURAL: differ): the
 * run has A, the recording R (both shown from their first difference). */
static int refuse_first(struct sbx_error *e, const char *what, bool plural,
                        const char *a, const char *r) {
  size_t off = first_difference(a, r);
  char xa[64], xr[64];
  excerpt(a, off, xa, sizeof(xa));
  excerpt(r, off, xr, sizeof(xr));
  return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                       "replay refused: %s differ%s from the recording's "
                       "first request at byte %zu: the run has \"%s\", the "
                       "recording \"%s\" (replay the run with the agent, "
                       "prompt and tools it was recorded with)",
                       what, plural ? "" : "s", off, xa, xr);
}

/* A JSON value as text (new; NULL when out of memory): a string as it
 * is, anything else compact, "" for none. */
static char *compact(json_t *v) {
  if (json_is_string(v))
    return strdup(json_string_value(v));
  char *s = v ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY |
                                  JSON_ENSURE_ASCII)
              : NULL;
  return s ? s : strdup("");
}

/* The first request of a replay is the run's own, not only its shape: the
 * instructions, every system, developer and user message (the prompt)
 * and the tools' definitions must be the recording's, so that a recording
 * is never replayed for another agent, prompt or set of tools. Later calls
 * hold tool outputs (times, ids) and are checked by shape only. */
static int replay_check_first(const struct model_api_ops *api, json_t *req,
                              json_t *body, struct sbx_error *e) {
  const char *ins = json_string_value(json_object_get(body, "instructions"));
  const char *rins = json_string_value(json_object_get(req, "instructions"));
  if (!str_eq(ins, rins))
    return refuse_first(e, "the instructions", true, ins ? ins : "",
                        rins ? rins : "");
  json_t *in = json_object_get(body, api->input_key);
  json_t *rin = json_object_get(req, api->input_key);
  for (size_t i = 0; i < json_array_size(in) && i < json_array_size(rin); i++) {
    json_t *x = json_array_get(in, i), *y = json_array_get(rin, i);
    const char *role = json_string_value(json_object_get(x, "role"));
    if (!role ||
        !(strcmp(role, "user") == 0 || strcmp(role, "system") == 0 ||
          strcmp(role, "developer") == 0) ||
        json_equal(x, y))
      continue;
    _cleanup_free_ char *a = compact(json_object_get(x, "content"));
    _cleanup_free_ char *b = compact(json_object_get(y, "content"));
    char what[96];
    (void)snprintf(what, sizeof(what), "the %s message (%s %zu)", role,
                   api->entry_name, i + 1);
    return refuse_first(e, what, false, a ? a : "", b ? b : "");
  }
  json_t *tl = json_object_get(body, "tools");
  json_t *rtl = json_object_get(req, "tools");
  for (size_t i = 0; i < json_array_size(tl) && i < json_array_size(rtl); i++)
    if (!json_equal(json_array_get(tl, i), json_array_get(rtl, i))) {
      _cleanup_free_ char *a = compact(json_array_get(tl, i));
      _cleanup_free_ char *b = compact(json_array_get(rtl, i));
      const char *name = api->tool_name(json_array_get(tl, i));
      char what[160];
      (void)snprintf(what, sizeof(what), "the tool %s's definition",
                     name ? name : "?");
      return refuse_first(e, what, false, a ? a : "", b ? b : "");
    }
  return 0;
}

/* Checks that BODY, what this run would send, matches the recorded
 * request REC at model call CALL (1-based). */
static int replay_check(const struct model_api_ops *api, size_t call,
                        json_t *rec, json_t *body, struct sbx_error *e) {
  const char *rapi = json_string_value(json_object_get(rec, "api"));
  if (strcmp(rapi, api->name) != 0)
    return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                         "replay diverged at model call %zu: the run uses "
                         "the %s API, the recording has %s",
                         call, api->name, rapi);
  json_t *req = json_object_get(rec, "request");
  const char *model = json_string_value(json_object_get(body, "model"));
  const char *rmodel = json_string_value(json_object_get(req, "model"));
  if (!str_eq(model, rmodel))
    return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                         "replay diverged at model call %zu: the model is "
                         "%s, the recording has %s",
                         call, model ? model : "(none)",
                         rmodel ? rmodel : "(none)");
  char a[160], b[160];
  tool_names(api, body, a, sizeof(a));
  tool_names(api, req, b, sizeof(b));
  if (strcmp(a, b) != 0)
    return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                         "replay diverged at model call %zu: the tools are "
                         "[%s], the recording has [%s]",
                         call, a, b);
  const char *key = api->input_key;
  json_t *in = json_object_get(body, key);
  json_t *rin = json_object_get(req, key);
  size_t n = json_array_size(in), rn = json_array_size(rin);
  for (size_t i = 0; i < n && i < rn; i++) {
    struct model_shape x, y;
    api->shape_of(json_array_get(in, i), &x);
    api->shape_of(json_array_get(rin, i), &y);
    if (!shape_eq(&x, &y)) {
      shape_text(&x, a, sizeof(a));
      shape_text(&y, b, sizeof(b));
      return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                           "replay diverged at model call %zu: %s %zu is "
                           "%s, the recording has %s",
                           call, api->entry_name, i + 1, a, b);
    }
  }
  if (n != rn)
    return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                         "replay diverged at model call %zu: the run has %zu "
                         "%s, the recording has %zu",
                         call, n, api->entries_name, rn);
  return call == 1 ? replay_check_first(api, req, body, e) : 0;
}

int model_replay_next(struct model_replay *m, const struct model_api_ops *api,
                      json_t *body, json_t **reply, struct sbx_error *e) {
  size_t total = json_array_size(m->calls);
  if (m->next >= total)
    return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                         "replay has only %zu recorded model call%s", total,
                         total == 1 ? "" : "s");
  size_t call = ++m->next;
  json_t *rec = json_array_get(m->calls, call - 1);
  int r = replay_check(api, call, rec, body, e);
  if (r < 0)
    return r;
  *reply = json_deep_copy(json_object_get(rec, "response"));
  if (!*reply)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  return 0;
}
