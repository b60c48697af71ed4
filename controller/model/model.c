/* The model client: configuration, retries, streaming and the call, which
 * is recorded or replayed by replay.c; what differs between the APIs is in
 * their operations (apis.c). */
#include "controller/model/model.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "controller/model/model_internal.h"
#include "controller/net/http.h"
#include "controller/net/sse.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/log.h"
#include "shared/rand.h"

#define DEFAULT_BASE_URL "https://api.openai.com/v1"
#define DEFAULT_TIMEOUT_MS 600000u
#define DEFAULT_CONNECT_TIMEOUT_MS 10000u
#define DEFAULT_FIRST_BYTE_TIMEOUT_MS 60000u
#define DEFAULT_IDLE_TIMEOUT_MS 30000u
/* A server that times out once is likely to again: one more try only. */
#define TIMEOUT_RETRIES 1u
#define DEFAULT_MAX_RETRIES 4u
#define DEFAULT_RETRY_BASE_MS 500u
#define DEFAULT_MAX_RESPONSE ((size_t)64 << 20)
#define MAX_BACKOFF_MS 20000u
#define MAX_RETRY_AFTER_MS 60000u
#define ERROR_BODY_BYTES 200
#define SSE_MAX_EVENT_BYTES ((size_t)16 << 20)

/* The conversation text a request may carry. */
#define MODEL_MAX_INPUT_TEXT ((size_t)1 << 30)

struct model_client {
  enum model_api api;
  const struct model_api_ops *ops;
  char *url;         /* the endpoint */
  char *url_display; /* the endpoint without user:password@ */
  char *auth_header; /* "Authorization: Bearer KEY", NULL without a key */
  char *api_key;
  char *org_header;     /* "OpenAI-Organization: ...", or NULL */
  char *project_header; /* "OpenAI-Project: ...", or NULL */
  unsigned timeout_ms;
  unsigned connect_timeout_ms;
  unsigned first_byte_timeout_ms;
  unsigned idle_timeout_ms;
  const volatile bool *cancel; /* borrowed, or NULL */
  unsigned max_retries;
  unsigned retry_base_ms;
  size_t max_response_bytes;
  bool stream;
  model_delta_fn on_delta;
  void *delta_arg;
  struct http_client *http;

  struct model_recorder record;
  struct model_replay replay;

  /* The Responses API takes the whole conversation every turn: the items
   * sent last time, serialized once, for the next body (input_text). */
  struct input_cache {
    json_t **items; /* referenced; compared by identity */
    size_t *ends;   /* text.len after each item */
    size_t n, cap;
    struct sbx_buf text; /* their JSON, comma-separated */
  } in;

  pthread_mutex_t lock; /* serializes model_call */
};

enum model_api model_client_api(const struct model_client *m) {
  return m->api;
}

bool model_client_replaying(const struct model_client *m) {
  return m->replay.path != NULL;
}

json_t *model_build_body(const struct model_client *m,
                         const struct model_request *req) {
  return m->ops->build_body(req, m->stream);
}

/* ---- configuration ------------------------------------------------- */

static void erase_free(char *s) {
  if (s) {
    explicit_bzero(s, strlen(s));
    free(s);
  }
}

struct model_client *model_client_free(struct model_client *m) {
  if (!m)
    return NULL;
  http_client_free(m->http);
  free(m->url);
  free(m->url_display);
  erase_free(m->auth_header);
  erase_free(m->api_key);
  free(m->org_header);
  free(m->project_header);
  model_record_close(&m->record);
  model_replay_clear(&m->replay);
  for (size_t i = 0; i < m->in.n; i++)
    json_decref(m->in.items[i]);
  free(m->in.items);
  free(m->in.ends);
  sbx_buf_free(&m->in.text);
  (void)pthread_mutex_destroy(&m->lock);
  free(m);
  return NULL;
}

/* Sets the endpoint URL from BASE: the path of API is appended to BASE's
 * path (before any query), and the shown form loses its user:password@. */
static int set_url(struct model_client *m, const char *base,
                   struct sbx_error *e) {
  if (strncasecmp(base, "http://", 7) != 0 &&
      strncasecmp(base, "https://", 8) != 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "base URL must start with http:// or https:// "
                         "(got \"%.100s\")",
                         base);
  const char *path = m->ops->path;
  size_t n = strcspn(base, "?#");
  size_t trimmed = n;
  while (trimmed > 0 && base[trimmed - 1] == '/')
    trimmed--;
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 8192);
  if (sbx_buf_append(&b, base, trimmed) < 0 ||
      sbx_buf_append_str(&b, path) < 0 || sbx_buf_append_str(&b, base + n) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, E2BIG,
                         "base URL is too long");
  m->url = sbx_buf_steal(&b, NULL);
  if (!m->url)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");

  /* scheme://user:password@host/... → scheme://host/... */
  const char *host = strstr(m->url, "://") + 3;
  size_t authority = strcspn(host, "/?#");
  const char *at = memrchr(host, '@', authority);
  sbx_buf_reset(&b);
  if (at) {
    if (sbx_buf_append(&b, m->url, (size_t)(host - m->url)) < 0 ||
        sbx_buf_append_str(&b, at + 1) < 0)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    m->url_display = sbx_buf_steal(&b, NULL);
  } else {
    m->url_display = strdup(m->url);
  }
  if (!m->url_display)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  return 0;
}

static int set_key(struct model_client *m, const char *key,
                   struct sbx_error *e) {
  if (!key || !key[0])
    return 0;
  for (const char *p = key; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "the API key contains a control character");
  m->api_key = strdup(key);
  size_t n = strlen(key) + sizeof("Authorization: Bearer ");
  m->auth_header = malloc(n);
  if (!m->api_key || !m->auth_header)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  (void)snprintf(m->auth_header, n, "Authorization: Bearer %s", key);
  return 0;
}

/* *OUT = "NAME: VALUE" (new) for VALUE from the environment variable ENV,
 * as the openai client sends OPENAI_ORG_ID and OPENAI_PROJECT_ID; nothing
 * when it is unset or empty. */
static int set_env_header(char **out, const char *name, const char *env,
                          struct sbx_error *e) {
  const char *v = getenv(env);
  if (!v || !v[0])
    return 0;
  for (const char *p = v; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s contains a control character", env);
  size_t n = strlen(name) + strlen(v) + 3;
  if (!(*out = malloc(n)))
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  (void)snprintf(*out, n, "%s: %s", name, v);
  return 0;
}

/* Whether URL is OpenAI's own API, which answers nothing without a key
 * (a local or other OpenAI-compatible server may need none). */
static bool needs_key(const char *url) {
  const char *host = strstr(url, "://");
  host = host ? host + 3 : url;
  const char *at = strchr(host, '@');
  const char *slash = strchr(host, '/');
  if (at && (!slash || at < slash))
    host = at + 1;
  size_t n = strcspn(host, ":/");
  static const char suffix[] = ".openai.com";
  size_t sn = sizeof(suffix) - 1;
  return (n == sn - 1 && strncasecmp(host, suffix + 1, n) == 0) ||
         (n > sn && strncasecmp(host + n - sn, suffix, sn) == 0);
}

int model_client_new(const struct model_config *cfg, struct model_client **out,
                     struct sbx_error *e) {
  *out = NULL;
  const struct model_api_ops *ops = model_api_ops(cfg->api);
  if (!ops)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown model API %d", (int)cfg->api);
  struct model_client *m = calloc(1, sizeof(*m));
  if (m)
    sbx_buf_init(&m->in.text, MODEL_MAX_INPUT_TEXT);
  if (!m)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  m->record.fd = -1;
  if (pthread_mutex_init(&m->lock, NULL) != 0) {
    free(m);
    return sbx_error_set(e, SBX_OK, ENOMEM, "cannot create a mutex");
  }
  m->api = cfg->api;
  m->ops = ops;
  m->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : DEFAULT_TIMEOUT_MS;
  m->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms
                                                  : DEFAULT_CONNECT_TIMEOUT_MS;
  m->first_byte_timeout_ms = cfg->first_byte_timeout_ms
                                 ? cfg->first_byte_timeout_ms
                                 : DEFAULT_FIRST_BYTE_TIMEOUT_MS;
  m->cancel = cfg->cancel;
  m->idle_timeout_ms =
      cfg->idle_timeout_ms ? cfg->idle_timeout_ms : DEFAULT_IDLE_TIMEOUT_MS;
  m->max_retries = cfg->no_retries    ? 0
                   : cfg->max_retries ? cfg->max_retries
                                      : DEFAULT_MAX_RETRIES;
  m->retry_base_ms =
      cfg->retry_base_ms ? cfg->retry_base_ms : DEFAULT_RETRY_BASE_MS;
  m->max_response_bytes =
      cfg->max_response_bytes ? cfg->max_response_bytes : DEFAULT_MAX_RESPONSE;
  m->stream = cfg->stream;
  m->on_delta = cfg->on_delta;
  m->delta_arg = cfg->delta_arg;

  const char *base = cfg->base_url;
  if (!base || !base[0])
    base = getenv("OPENAI_BASE_URL");
  if (!base || !base[0])
    base = DEFAULT_BASE_URL;
  const char *key = cfg->api_key ? cfg->api_key : getenv("OPENAI_API_KEY");
  int r = set_url(m, base, e);
  if (r == 0)
    r = set_key(m, key, e);
  if (r == 0 && !m->api_key && !cfg->replay_path && needs_key(m->url))
    r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                      "no API key for %s: set OPENAI_API_KEY (or the "
                      "agent's api_key_env)",
                      m->url_display);
  if (r == 0)
    r = set_env_header(&m->org_header, "OpenAI-Organization", "OPENAI_ORG_ID",
                       e);
  if (r == 0)
    r = set_env_header(&m->project_header, "OpenAI-Project",
                       "OPENAI_PROJECT_ID", e);
  if (r == 0)
    r = http_client_new(&m->http, e);
  if (r == 0 && cfg->replay_path)
    r = model_replay_load(&m->replay, cfg->replay_path, e);
  if (r == 0 && cfg->record_path)
    r = model_record_open(&m->record, cfg->record_path, e);
  if (r < 0) {
    model_client_free(m);
    return r;
  }
  *out = m;
  return 0;
}

/* ---- errors -------------------------------------------------------- */

/* Keys shorter than this are not redacted: no real key is that short, and
 * masking one would mangle the text it occurs in (the key "x" in
 * "exist"). */
#define REDACT_MIN_KEY 8
#define REDACT_MASK "[redacted]"

/* The LEN bytes at S with each whole occurrence of KEY replaced by
 * "[redacted]" (new, NUL-terminated, its length in *OUT_LEN); a KEY shorter
 * than REDACT_MIN_KEY is left as it is. NULL when out of memory. */
static char *redact_dup(const char *key, const char *s, size_t len,
                        size_t *out_len) {
  if (!s) {
    s = "";
    len = 0;
  }
  size_t klen = key ? strlen(key) : 0;
  size_t hits = 0;
  const char *p = s, *end = s + len, *hit;
  if (klen >= REDACT_MIN_KEY)
    for (; (hit = memmem(p, (size_t)(end - p), key, klen)); p = hit + klen)
      hits++;
  size_t grow = sizeof(REDACT_MASK) > klen ? sizeof(REDACT_MASK) - klen : 0;
  char *out = malloc(len + hits * grow + 1);
  if (!out)
    return NULL;
  size_t n = 0;
  for (p = s; hits && (hit = memmem(p, (size_t)(end - p), key, klen));
       p = hit + klen) {
    memcpy(out + n, p, (size_t)(hit - p));
    n += (size_t)(hit - p);
    memcpy(out + n, REDACT_MASK, sizeof(REDACT_MASK) - 1);
    n += sizeof(REDACT_MASK) - 1;
  }
  memcpy(out + n, p, (size_t)(end - p));
  n += (size_t)(end - p);
  out[n] = '\0';
  *out_len = n;
  return out;
}

/* Replaces each whole occurrence of the API key in E's message by
 * "[redacted]" (bodies are redacted before they are cut to fit, see
 * status_error), and a start of the key (4 bytes or more) that the
 * message's own limit cut off at its end. */
static void redact(const struct model_client *m, struct sbx_error *e) {
  if (!e || !m->api_key || strlen(m->api_key) < REDACT_MIN_KEY)
    return;
  size_t n = 0;
  _cleanup_free_ char *r = redact_dup(m->api_key, e->msg, strlen(e->msg), &n);
  if (!r) {
    (void)snprintf(e->msg, sizeof(e->msg),
                   "%s (details withheld: out of "
                   "memory while hiding the API key)",
                   sbx_code_name(e->code));
    return;
  }
  (void)snprintf(e->msg, sizeof(e->msg), "%s", r);
  n = strlen(e->msg);
  for (size_t k = strlen(m->api_key) - 1; k >= 4; k--)
    if (n >= k && memcmp(e->msg + n - k, m->api_key, k) == 0) {
      (void)snprintf(e->msg + n - k, sizeof(e->msg) - (n - k), "%s",
                     REDACT_MASK);
      break;
    }
}

/* The first bytes of a body as printable ASCII, for a message. */
static void sanitize(const char *body, size_t len, char *out, size_t size) {
  size_t n = 0;
  bool space = false;
  for (size_t i = 0; i < len && n + 4 < size && i < ERROR_BODY_BYTES; i++) {
    unsigned char c = (unsigned char)body[i];
    if (isspace(c) || c < 0x20 || c == 0x7f) {
      if (!space && n > 0)
        out[n++] = ' ';
      space = true;
      continue;
    }
    space = false;
    out[n++] = c < 0x80 ? (char)c : '?';
  }
  while (n > 0 && out[n - 1] == ' ')
    n--;
  if (len > ERROR_BODY_BYTES && n + 3 < size) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
}

static enum sbx_code status_code(long status, int *err) {
  switch (status) {
  case 400:
  case 422:
    *err = EINVAL;
    return SBX_INVALID_ARGUMENT;
  case 401:
    *err = EKEYREJECTED;
    return SBX_UNAUTHENTICATED;
  case 403:
    *err = EACCES;
    return SBX_PERMISSION_DENIED;
  case 404:
    *err = ENOENT;
    return SBX_NOT_FOUND;
  case 408:
  case 504:
    *err = ETIMEDOUT;
    return SBX_TIMED_OUT;
  case 409:
    *err = EBUSY;
    return SBX_CONFLICT;
  case 413:
    *err = E2BIG;
    return SBX_LIMIT_EXCEEDED;
  case 429:
    *err = EAGAIN;
    return SBX_LIMIT_EXCEEDED;
  default:
    *err = status >= 500 ? EAGAIN : EIO;
    return status >= 500 ? SBX_UNAVAILABLE : SBX_INTERNAL;
  }
}

/* "401 from URL: message" for a reply with an error status. */
static int status_error(const struct model_client *m,
                        const struct http_response *resp, unsigned retries,
                        struct sbx_error *e) {
  char what[ERROR_BODY_BYTES + 8];
  json_error_t jerr;
  _cleanup_json_ json_t *j = json_loadb(resp->body, resp->body_len, 0, &jerr);
  const char *msg = j ? model_error_message(j) : NULL;
  const char *text = msg ? msg : resp->body;
  size_t len = msg ? strlen(msg) : resp->body_len;
  /* The key goes before the text is cut, so no start of it is left. */
  size_t rlen = 0;
  _cleanup_free_ char *red = redact_dup(m->api_key, text, len, &rlen);
  if (red)
    sanitize(red, rlen, what, sizeof(what));
  else
    (void)snprintf(what, sizeof(what), "(not shown: out of memory)");
  char after[48] = "";
  if (retries)
    (void)snprintf(after, sizeof(after), " (after %u %s)", retries,
                   retries == 1 ? "retry" : "retries");
  int err;
  enum sbx_code code = status_code(resp->status, &err);
  return sbx_error_set(e, code, err, "%ld from %s: %s%s", resp->status,
                       m->url_display, what[0] ? what : "(empty body)", after);
}

static bool status_retryable(const struct http_response *resp) {
  if (resp->should_retry >= 0)
    return resp->should_retry == 1;
  switch (resp->status) {
  case 408:
  case 409:
  case 429:
  case 500:
  case 502:
  case 503:
  case 504:
    return true;
  default:
    return false;
  }
}

/* ---- streaming ----------------------------------------------------- */

struct stream_ctx {
  const struct model_client *m;
  struct sse_parser *sse;
  struct model_stream *s; /* the API's assembler */
  struct sbx_error err;
};

/* One server-sent event: its data goes to the API's assembler. */
static int on_event(const struct sse_event *ev, void *arg) {
  struct stream_ctx *c = arg;
  return c->m->ops->stream_event(c->s, ev->data, ev->data_len,
                                 c->m->url_display, &c->err);
}

/* Streamed body bytes from http_post. */
static int on_data(void *arg, const char *data, size_t len) {
  struct stream_ctx *c = arg;
  struct sbx_error pe = {0};
  int r = sse_feed(c->sse, data, len, &pe);
  if (r < 0 && !c->err.msg[0]) {
    /* The parser's own failure (an event too large, OOM), not ours. */
    char sz[32];
    http_format_size(SSE_MAX_EVENT_BYTES, sz, sizeof(sz));
    r = r == -E2BIG ? sbx_error_set(&c->err, SBX_LIMIT_EXCEEDED, E2BIG,
                                    "an event from %s exceeds %s",
                                    c->m->url_display, sz)
                    : sbx_error_set(&c->err, pe.code, -r,
                                    "cannot read the event stream from %s: "
                                    "%s",
                                    c->m->url_display, pe.msg);
  }
  return r;
}

static int stream_ctx_init(struct stream_ctx *c, const struct model_client *m) {
  memset(c, 0, sizeof(*c));
  c->m = m;
  if (!m->stream)
    return 0;
  if (sse_parser_new(SSE_MAX_EVENT_BYTES, on_event, c, &c->sse) < 0)
    return -ENOMEM;
  c->s = m->ops->stream_new(m->on_delta, m->delta_arg, m->max_response_bytes);
  return c->s ? 0 : -ENOMEM;
}

static void stream_ctx_clear(struct stream_ctx *c) {
  c->sse = sse_parser_free(c->sse);
  c->s = c->m->ops->stream_free(c->s);
}

static bool stream_delivered(const struct stream_ctx *c) {
  return c->s && c->m->ops->stream_delivered(c->s);
}

/* Hands the final text of OUTPUT to the delta callback, for replies that
 * were not streamed although streaming was asked for. */
static void deliver_text(const struct model_client *m, json_t *output) {
  if (!m->on_delta)
    return;
  size_t i, k;
  json_t *item, *part;
  json_array_foreach(output, i, item) {
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!type || strcmp(type, "message") != 0)
      continue;
    json_array_foreach(json_object_get(item, "content"), k, part) {
      const char *pt = json_string_value(json_object_get(part, "type"));
      json_t *text = json_object_get(part, "text");
      if (pt && strcmp(pt, "output_text") == 0 && json_string_length(text))
        m->on_delta(m->delta_arg, json_string_value(text),
                    json_string_length(text));
    }
  }
}

/* ---- one live call ------------------------------------------------- */

/* Waits MS, in slices of at most 100 ms so that a cancel (CANCEL, may be
 * NULL) ends the wait. */
static void sleep_ms(unsigned long long ms, const volatile bool *cancel) {
  while (ms && !(cancel && *cancel)) {
    unsigned long long d = ms < 100 ? ms : 100;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)d * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
      ;
    ms -= d;
  }
}

/* The wait before retry number ATTEMPT (0-based): Retry-After when the
 * server gave one (capped), else exponential backoff with jitter. */
static unsigned long long backoff_ms(const struct model_client *m,
                                     unsigned attempt,
                                     long long retry_after_ms) {
  if (retry_after_ms >= 0)
    return retry_after_ms > MAX_RETRY_AFTER_MS
               ? MAX_RETRY_AFTER_MS
               : (unsigned long long)retry_after_ms;
  unsigned long long d = m->retry_base_ms;
  for (unsigned i = 0; i < attempt && d < MAX_BACKOFF_MS; i++)
    d *= 2;
  if (d > MAX_BACKOFF_MS)
    d = MAX_BACKOFF_MS;
  /* Between half and all of it, so clients do not retry in step. */
  return d / 2 + sbx_random_u64() % (d / 2 + 1);
}

/* What a call adds to the client's URL and headers: the model settings'
 * extra_query and extra_headers. */
struct call_extras {
  char *url; /* the URL with the query, or NULL for the client's */
  char *headers[MODEL_MAX_EXTRA_HEADERS];
  size_t nheaders;
};

static void call_extras_clear(struct call_extras *x) {
  free(x->url);
  for (size_t i = 0; i < x->nheaders; i++)
    free(x->headers[i]);
  memset(x, 0, sizeof(*x));
}

/* Appends the header line H to HEADERS (*NH of them) unless one of X's
 * names the same header: the settings' extra_headers replace sbx's own, as
 * the SDK's replace the openai client's. */
static void add_header(const char **headers, size_t *nh,
                       const struct call_extras *x, const char *h) {
  size_t n = strcspn(h, ":");
  for (size_t i = 0; i < x->nheaders; i++)
    if (strncasecmp(x->headers[i], h, n) == 0 && x->headers[i][n] == ':')
      return;
  headers[(*nh)++] = h;
}

/* One HTTP exchange. 0 with *REPLY (new); or an error, with *RETRY telling
 * whether trying again may help, and *RETRY_AFTER_MS the server's wish. */
static int attempt_call(struct model_client *m, const struct call_extras *x,
                        const char *body, size_t body_len, unsigned retries,
                        json_t **reply, bool *streamed, bool *retry,
                        long long *retry_after_ms, struct sbx_error *e) {
  *reply = NULL;
  *streamed = false;
  *retry = false;
  *retry_after_ms = -1;
  const char *headers[8 + MODEL_MAX_EXTRA_HEADERS];
  size_t nh = 0;
  add_header(headers, &nh, x, "Content-Type: application/json");
  add_header(headers, &nh, x,
             m->stream ? "Accept: text/event-stream"
                       : "Accept: application/json");
  add_header(headers, &nh, x, "User-Agent: sbx/" SBX_VERSION);
  if (m->auth_header)
    add_header(headers, &nh, x, m->auth_header);
  if (m->org_header)
    add_header(headers, &nh, x, m->org_header);
  if (m->project_header)
    add_header(headers, &nh, x, m->project_header);
  for (size_t i = 0; i < x->nheaders; i++)
    headers[nh++] = x->headers[i];
  headers[nh] = NULL;

  struct stream_ctx sc;
  if (stream_ctx_init(&sc, m) < 0) {
    stream_ctx_clear(&sc);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  struct http_request hr = {
      .url = x->url ? x->url : m->url,
      .url_display = m->url_display,
      .body = body,
      .body_len = body_len,
      .headers = headers,
      .timeout_ms = m->timeout_ms,
      .connect_timeout_ms = m->connect_timeout_ms,
      .first_byte_timeout_ms = m->first_byte_timeout_ms,
      .idle_timeout_ms = m->idle_timeout_ms,
      .cancel = m->cancel,
      .max_response_bytes = m->max_response_bytes,
      .on_data = m->stream ? on_data : NULL,
      .data_arg = &sc,
  };
  struct http_response resp;
  int r = http_post(m->http, &hr, &resp, e);
  if (r < 0) {
    if (sc.err.msg[0] && e)
      *e = sc.err; /* the stream's own failure */
    *retry = (r == -ECONNREFUSED || r == -ETIMEDOUT || r == -ECONNRESET) &&
             !stream_delivered(&sc);
    stream_ctx_clear(&sc);
    return r;
  }
  if (resp.status < 200 || resp.status > 299) {
    *retry = status_retryable(&resp);
    *retry_after_ms = resp.retry_after_ms;
    r = status_error(m, &resp, retries, e);
  } else if (resp.streamed) {
    *streamed = true;
    r = m->ops->stream_end(sc.s, reply, m->url_display, e);
    /* A stream cut short is worth another try if nothing was shown yet. */
    *retry = r == -ECONNRESET && !stream_delivered(&sc);
  } else {
    json_error_t jerr;
    *reply = json_loadb(resp.body, resp.body_len, 0, &jerr);
    if (!*reply)
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                        "invalid JSON from %s: %s", m->url_display, jerr.text);
  }
  stream_ctx_clear(&sc);
  http_response_clear(&resp);
  return r;
}

/* Brings the cache up to INPUT: keeps the items it starts with (the same
 * values, as a conversation that only grows passes them), serializes the
 * rest. The items must not change once given to the client. */
static int input_cache_update(struct input_cache *c, json_t *input) {
  size_t n = json_array_size(input), keep = 0;
  while (keep < c->n && keep < n &&
         c->items[keep] == json_array_get(input, keep))
    keep++;
  for (size_t i = keep; i < c->n; i++)
    json_decref(c->items[i]);
  c->n = keep;
  c->text.len = keep ? c->ends[keep - 1] : 0;
  if (c->text.data)
    c->text.data[c->text.len] = '\0';
  if (n > c->cap) {
    size_t cap = n < 64 ? 64 : n * 2;
    json_t **items = realloc(c->items, cap * sizeof(*items));
    if (!items)
      return -ENOMEM;
    c->items = items;
    size_t *ends = realloc(c->ends, cap * sizeof(*ends));
    if (!ends)
      return -ENOMEM;
    c->ends = ends;
    c->cap = cap;
  }
  for (size_t i = keep; i < n; i++) {
    json_t *it = json_array_get(input, i);
    _cleanup_free_ char *t = json_dumps(it, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t || (i > 0 && sbx_buf_append(&c->text, ",", 1) < 0) ||
        sbx_buf_append(&c->text, t, strlen(t)) < 0)
      return -ENOMEM;
    c->items[i] = json_incref(it);
    c->ends[i] = c->text.len;
    c->n = i + 1;
  }
  return 0;
}

/* BODY's text, as json_dumps(BODY, JSON_COMPACT) with its "input" first
 * when the API takes the items as they are: then it comes from the cache.
 * New string or NULL. */
static char *body_text(struct model_client *m, json_t *body, size_t *len) {
  json_t *input = json_object_get(body, m->ops->input_key);
  if (!m->ops->cache_input || !json_is_array(input)) {
    char *t = json_dumps(body, JSON_COMPACT);
    *len = t ? strlen(t) : 0;
    return t;
  }
  _cleanup_json_ json_t *rest = json_copy(body); /* shallow */
  if (!rest || json_object_del(rest, m->ops->input_key) < 0 ||
      input_cache_update(&m->in, input) < 0)
    return NULL;
  _cleanup_free_ char *r = json_dumps(rest, JSON_COMPACT);
  if (!r)
    return NULL;
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, m->in.text.len + strlen(r) + 16);
  bool empty = strcmp(r, "{}") == 0;
  if (sbx_buf_append(&b, "{\"input\":[", 10) < 0 ||
      sbx_buf_append(&b, m->in.text.data ? m->in.text.data : "",
                     m->in.text.len) < 0 ||
      sbx_buf_append(&b, empty ? "]}" : "],", 2) < 0 ||
      (!empty && sbx_buf_append(&b, r + 1, strlen(r + 1)) < 0))
    return NULL;
  *len = b.len;
  return sbx_buf_steal(&b, NULL);
}

static void call_extras_clearp(struct call_extras *x) {
  call_extras_clear(x);
}

static int live_call(struct model_client *m, json_t *body, json_t *settings,
                     json_t **reply, bool *streamed, struct sbx_error *e) {
  size_t len = 0;
  _cleanup_free_ char *text = body_text(m, body, &len);
  _cleanup_(call_extras_clearp) struct call_extras x = {0};
  if (!text)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  if (json_object_get(settings, "extra_query") &&
      !(x.url = model_settings_url(m->url, settings)))
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  int hr = model_settings_headers(settings, x.headers, MODEL_MAX_EXTRA_HEADERS,
                                  &x.nheaders);
  if (hr == -E2BIG)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "more than %d extra_headers", MODEL_MAX_EXTRA_HEADERS);
  if (hr < 0)
    return sbx_error_set(e, SBX_OK, -hr, "out of memory");
  for (unsigned attempt = 0;; attempt++) {
    bool retry;
    long long retry_after;
    int r = attempt_call(m, &x, text, len, attempt, reply, streamed, &retry,
                         &retry_after, e);
    if (r == 0)
      return 0;
    unsigned limit = r == -ETIMEDOUT && m->max_retries > TIMEOUT_RETRIES
                         ? TIMEOUT_RETRIES
                         : m->max_retries;
    if (!retry || attempt >= limit) {
      if (retry && attempt > 0 && e && !strstr(e->msg, "(after ")) {
        size_t n = strlen(e->msg);
        (void)snprintf(e->msg + n, sizeof(e->msg) - n, " (after %u %s%s)",
                       attempt, attempt == 1 ? "retry" : "retries",
                       r == -ETIMEDOUT ? "; a timeout is retried once" : "");
      }
      return r;
    }
    unsigned long long wait = backoff_ms(m, attempt, retry_after);
    log_debug("model: %s; retrying in %llu ms (%u of %u)", e ? e->msg : "error",
              wait, attempt + 1, m->max_retries);
    sleep_ms(wait, m->cancel);
    if (m->cancel && *m->cancel)
      return sbx_error_set(e, SBX_OK, ECANCELED,
                           "the model call was cancelled");
  }
}

/* ---- the call ------------------------------------------------------ */

static int call_locked(struct model_client *m, const struct model_request *req,
                       struct model_response *out, struct sbx_error *e) {
  _cleanup_json_ json_t *body = model_build_body(m, req);
  if (!body)
    return sbx_error_set(e, SBX_OK, ENOMEM,
                         "out of memory building the request");
  _cleanup_json_ json_t *reply = NULL;
  bool streamed = false;
  int r = m->replay.path
              ? model_replay_next(&m->replay, m->ops, body, &reply, e)
              : live_call(m, body, req->model_settings, &reply, &streamed, e);
  if (r < 0)
    return r;
  const char *where = m->replay.path ? m->replay.path : m->url_display;
  r = m->ops->parse(reply, where, out, e);
  if (r < 0)
    return r;
  /* Deltas for --stream when none arrived: a replay, or a server that
   * answered with plain JSON. */
  if (m->stream && !streamed)
    deliver_text(m, out->output);
  if (m->record.fd >= 0) {
    r = model_record_write(&m->record, m->ops, body, reply, e);
    if (r < 0) {
      model_response_clear(out);
      return r;
    }
  }
  return 0;
}

int model_call(struct model_client *m, const struct model_request *req,
               struct model_response *out, struct sbx_error *e) {
  memset(out, 0, sizeof(*out));
  if ((!req->model || !req->model[0]) && !req->prompt)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "no model name given");
  if (req->input && !json_is_array(req->input))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "model input must be an array of items");
  (void)pthread_mutex_lock(&m->lock);
  int r = call_locked(m, req, out, e);
  (void)pthread_mutex_unlock(&m->lock);
  if (r < 0)
    redact(m, e);
  return r;
}
