#include "controller/telemetry/trace.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "controller/net/http.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/encode.h"
#include "shared/json.h"
#include "shared/log.h"
#include "shared/rand.h"

#define TRACE_MAX_RESPONSE (64u << 10)
#define TRACE_MAX_URL 2048

/* ---- the OTLP exporter -------------------------------------------------- */

/* Shared by the tracer and the export thread; freed by whichever lets go
 * last (the tracer gives up on a thread stuck past the flush deadline). */
struct exporter {
  pthread_mutex_t mu;
  pthread_cond_t wake; /* the worker: spans waiting, or stop */
  pthread_cond_t done; /* trace_free: the worker has finished */
  json_t **ring;       /* ended spans, owned */
  size_t cap, head, count;
  size_t batch_max;
  unsigned interval_ms, timeout_ms;
  bool stop;
  bool finished;
  bool abandoned;       /* trace_free gave up waiting: log nothing more */
  uint64_t deadline_ms; /* monotonic; set with stop */
  size_t inflight;      /* spans of the request being sent */
  int refs;
  /* counters (under mu) */
  uint64_t exported, dropped, failed, failed_requests;
  bool warned;
  /* used by the worker only */
  char *url;
  char **headers; /* "Name: value", NULL-terminated */
  json_t *resource;
  struct http_client *http;
};

struct tracer {
  char *service_name;
  unsigned flush_ms;
  atomic_uint_fast64_t ended;
  /* the file exporter */
  FILE *file;
  pthread_mutex_t file_mu;
  bool file_failed;
  /* the OTLP exporter, or NULL */
  struct exporter *x;
  pthread_t thread;
};

struct trace_span {
  struct tracer *t;
  uint8_t trace_id[16];
  uint8_t span_id[8];
  uint8_t parent_id[8];
  bool has_parent;
  char *name;
  uint64_t start_unix_ns;
  uint64_t start_mono_ns;
  /* The wall and monotonic clocks read together when the trace's first
   * span here started: every span of it is timed on the monotonic clock
   * from there, so a child never starts before nor ends after its parent
   * when the wall clock is being slewed or stepped. */
  uint64_t anchor_unix_ns, anchor_mono_ns;
  json_t *attrs; /* OTLP attribute objects */
  unsigned dropped_attrs;
  char *error; /* NULL: ok */
};

static void free_lines(char **l) {
  for (size_t i = 0; l && l[i]; i++) {
    explicit_bzero(l[i], strlen(l[i])); /* they may hold credentials */
    free(l[i]);
  }
  free(l);
}

static void exporter_free(struct exporter *x) {
  if (!x)
    return;
  for (size_t i = 0; i < x->count; i++)
    json_decref(x->ring[(x->head + i) % x->cap]);
  free(x->ring);
  free(x->url);
  free_lines(x->headers);
  json_decref(x->resource);
  (void)http_client_free(x->http);
  (void)pthread_cond_destroy(&x->wake);
  (void)pthread_cond_destroy(&x->done);
  (void)pthread_mutex_destroy(&x->mu);
  free(x);
}

/* Absolute CLOCK_MONOTONIC time for MS from the monotonic epoch. */
static struct timespec abs_ms(uint64_t ms) {
  struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                        .tv_nsec = (long)(ms % 1000) * 1000000L};
  return ts;
}

/* Records a failed export of N spans; the first one is logged. */
static void export_failed(struct exporter *x, size_t n, const char *why) {
  x->failed += n;
  x->failed_requests++;
  if (!x->warned && !x->abandoned) {
    x->warned = true;
    log_warn("trace: exporting spans to \"%s\" failed: %s (later failures "
             "are counted, not logged)",
             x->url, why);
  }
}

/* Sends SPANS (an array, stolen) in one request with TIMEOUT_MS; updates
 * the counters under the lock. */
static void export_batch(struct exporter *x, json_t *spans,
                         unsigned timeout_ms) {
  size_t n = json_array_size(spans);
  json_t *body =
      json_pack("{s:[{s:O, s:[{s:{s:s, s:s}, s:o}]}]}", "resourceSpans",
                "resource", x->resource, "scopeSpans", "scope", "name", "sbx",
                "version", SBX_VERSION, "spans", spans);
  char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  if (!text) {
    pthread_mutex_lock(&x->mu);
    export_failed(x, n, "out of memory");
    pthread_mutex_unlock(&x->mu);
    return;
  }
  struct http_request req = {
      .url = x->url,
      .body = text,
      .body_len = strlen(text),
      .headers = (const char *const *)x->headers,
      .timeout_ms = timeout_ms ? timeout_ms : 1,
      .connect_timeout_ms = timeout_ms ? timeout_ms : 1,
      .max_response_bytes = TRACE_MAX_RESPONSE,
  };
  struct http_response resp = {0};
  struct sbx_error e = {0};
  int r = http_post(x->http, &req, &resp, &e);
  free(text);
  char why[SBX_ERROR_MSG_MAX + 64];
  uint64_t rejected = 0;
  if (r < 0) {
    (void)snprintf(why, sizeof(why), "%s", e.msg[0] ? e.msg : strerror(-r));
  } else if (resp.status < 200 || resp.status > 299) {
    (void)snprintf(why, sizeof(why), "HTTP %ld: %.200s", resp.status,
                   resp.body ? resp.body : "");
    r = -EIO;
  } else {
    /* OTLP partial success: {"partialSuccess":{"rejectedSpans":N,...}} */
    json_error_t je;
    json_t *reply = json_loadb(resp.body, resp.body_len, 0, &je);
    json_t *ps = json_object_get(reply, "partialSuccess");
    json_t *rs = json_object_get(ps, "rejectedSpans");
    if (json_is_integer(rs) && json_integer_value(rs) > 0)
      rejected = (uint64_t)json_integer_value(rs);
    else if (json_is_string(rs))
      rejected = strtoull(json_string_value(rs), NULL, 10);
    if (rejected > n)
      rejected = n;
    const char *msg = json_string_value(json_object_get(ps, "errorMessage"));
    (void)snprintf(why, sizeof(why), "%llu spans rejected: %.200s",
                   (unsigned long long)rejected, msg ? msg : "");
    json_decref(reply);
  }
  http_response_clear(&resp);
  pthread_mutex_lock(&x->mu);
  if (r < 0) {
    export_failed(x, n, why);
  } else {
    x->exported += n - rejected;
    if (rejected)
      export_failed(x, (size_t)rejected, why);
  }
  pthread_mutex_unlock(&x->mu);
}

/* The export thread: batches spans off the queue until stopped, then
 * drains it until empty or the flush deadline. */
static void *export_main(void *arg) {
  struct exporter *x = arg;
  pthread_mutex_lock(&x->mu);
  uint64_t next = sbx_now_ms() + x->interval_ms;
  for (;;) {
    while (!x->stop && x->count < x->batch_max && sbx_now_ms() < next) {
      struct timespec ts = abs_ms(next);
      (void)pthread_cond_timedwait(&x->wake, &x->mu, &ts);
    }
    uint64_t now = sbx_now_ms();
    if (x->count == 0) {
      if (x->stop)
        break;
      next = now + x->interval_ms;
      continue;
    }
    unsigned timeout = x->timeout_ms;
    if (x->stop) {
      if (now >= x->deadline_ms)
        break;
      if (x->deadline_ms - now < timeout)
        timeout = (unsigned)(x->deadline_ms - now);
    }
    size_t n = x->count < x->batch_max ? x->count : x->batch_max;
    json_t *spans = json_array();
    for (size_t i = 0; i < n; i++) {
      json_t *s = x->ring[x->head];
      x->head = (x->head + 1) % x->cap;
      x->count--;
      if (!spans || json_array_append_new(spans, s) < 0)
        x->failed++;
    }
    x->inflight = n;
    pthread_mutex_unlock(&x->mu);
    if (spans)
      export_batch(x, spans, timeout);
    pthread_mutex_lock(&x->mu);
    x->inflight = 0;
    if (x->count < x->batch_max)
      next = sbx_now_ms() + x->interval_ms;
  }
  x->finished = true;
  (void)pthread_cond_broadcast(&x->done);
  bool last = --x->refs == 0;
  pthread_mutex_unlock(&x->mu);
  if (last)
    exporter_free(x);
  return NULL;
}

/* Queues an ended span (stolen) without ever blocking on the network. */
static void enqueue(struct exporter *x, json_t *span) {
  pthread_mutex_lock(&x->mu);
  if (x->count == x->cap || x->stop) {
    x->dropped++;
    pthread_mutex_unlock(&x->mu);
    json_decref(span);
    return;
  }
  x->ring[(x->head + x->count) % x->cap] = span;
  x->count++;
  if (x->count >= x->batch_max)
    (void)pthread_cond_signal(&x->wake);
  pthread_mutex_unlock(&x->mu);
}

/* ---- options ------------------------------------------------------------ */

static const char *env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* Reads a whole number in [MIN, MAX] from NAME into *OUT; warns and keeps
 * *OUT when it is something else. */
static void env_number(const char *name, unsigned long long min,
                       unsigned long long max, unsigned long long *out) {
  const char *v = env(name);
  if (!v)
    return;
  char *end = NULL;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || *end || v[0] == '-' || n < min || n > max) {
    log_warn("ignoring %s=\"%s\": expected a whole number from %llu to %llu",
             name, v, min, max);
    return;
  }
  *out = n;
}

void trace_options_from_env(struct trace_options *o) {
  const char *disabled = env("OTEL_SDK_DISABLED");
  if (disabled && strcasecmp(disabled, "true") == 0)
    return;
  o->endpoint = env("OTEL_EXPORTER_OTLP_ENDPOINT");
  o->traces_url = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  o->headers = env("OTEL_EXPORTER_OTLP_TRACES_HEADERS");
  if (!o->headers)
    o->headers = env("OTEL_EXPORTER_OTLP_HEADERS");
  const char *svc = env("OTEL_SERVICE_NAME");
  if (svc)
    o->service_name = svc;
  if (!o->endpoint && !o->traces_url)
    return;
  const char *proto = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
  if (!proto)
    proto = env("OTEL_EXPORTER_OTLP_PROTOCOL");
  if (proto && strcmp(proto, "http/json") != 0)
    log_warn("OTEL_EXPORTER_OTLP_PROTOCOL is \"%s\", but sbx sends "
             "http/json only",
             proto);
  unsigned long long v = o->timeout_ms;
  env_number("OTEL_EXPORTER_OTLP_TIMEOUT", 1, 600000, &v);
  env_number("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 1, 600000, &v);
  o->timeout_ms = (unsigned)v;
  v = o->queue_max;
  env_number("OTEL_BSP_MAX_QUEUE_SIZE", 1, 1u << 20, &v);
  o->queue_max = (size_t)v;
  v = o->batch_max;
  env_number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1, 1u << 20, &v);
  o->batch_max = (size_t)v;
  v = o->interval_ms;
  env_number("OTEL_BSP_SCHEDULE_DELAY", 1, 600000, &v);
  o->interval_ms = (unsigned)v;
}

static void trim(const char **p, size_t *n) {
  while (*n && (**p == ' ' || **p == '\t')) {
    (*p)++;
    (*n)--;
  }
  while (*n && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t'))
    (*n)--;
}

/* An HTTP token character (RFC 9110). */
static bool tchar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

int trace_parse_headers(const char *spec, char ***out, struct sbx_error *e) {
  *out = NULL;
  char **lines = calloc(TRACE_MAX_HEADERS + 1, sizeof(*lines));
  if (!lines)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  size_t nl = 0;
  const char *p = spec ? spec : "";
  int r = 0;
  while (*p && r == 0) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    const char *item = p;
    p += len + (comma ? 1 : 0);
    trim(&item, &len);
    if (len == 0)
      continue;
    const char *eq = memchr(item, '=', len);
    if (!eq) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "header entry %zu has no \"=\"", nl + 1);
      break;
    }
    const char *name = item;
    size_t name_len = (size_t)(eq - item);
    const char *val = eq + 1;
    size_t val_len = len - name_len - 1;
    trim(&name, &name_len);
    trim(&val, &val_len);
    bool ok = name_len > 0;
    for (size_t i = 0; ok && i < name_len; i++)
      ok = tchar(name[i]);
    if (!ok) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "header entry %zu has an empty or invalid name",
                        nl + 1);
      break;
    }
    if (nl == TRACE_MAX_HEADERS) {
      r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, EINVAL, "more than %d headers",
                        TRACE_MAX_HEADERS);
      break;
    }
    char *line = malloc(name_len + 2 + val_len + 1);
    if (!line) {
      r = sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
      break;
    }
    memcpy(line, name, name_len);
    memcpy(line + name_len, ": ", 2);
    size_t o = name_len + 2;
    for (size_t i = 0; i < val_len; i++) {
      char c = val[i];
      if (c == '%' && i + 2 < val_len && sbx_hex_value(val[i + 1]) >= 0 &&
          sbx_hex_value(val[i + 2]) >= 0) {
        c = (char)(sbx_hex_value(val[i + 1]) * 16 + sbx_hex_value(val[i + 2]));
        i += 2;
      }
      if (c == '\r' || c == '\n' || c == '\0') {
        explicit_bzero(line, o);
        free(line);
        line = NULL;
        break;
      }
      line[o++] = c;
    }
    if (!line) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                        "header entry %zu has a value with CR, LF or NUL",
                        nl + 1);
      break;
    }
    line[o] = '\0';
    lines[nl++] = line;
  }
  if (r < 0) {
    free_lines(lines);
    return r;
  }
  *out = lines;
  return 0;
}

/* The OTLP traces URL from O (new), or NULL with a warning. */
static char *traces_url(const struct trace_options *o) {
  char url[TRACE_MAX_URL];
  if (o->traces_url) {
    if (snprintf(url, sizeof(url), "%s", o->traces_url) >= (int)sizeof(url))
      url[0] = '\0';
  } else {
    size_t n = strlen(o->endpoint);
    while (n > 0 && o->endpoint[n - 1] == '/')
      n--;
    if (n + strlen("/v1/traces") >= sizeof(url))
      url[0] = '\0';
    else
      (void)snprintf(url, sizeof(url), "%.*s/v1/traces", (int)n, o->endpoint);
  }
  if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
    log_warn("trace: ignoring the OTLP endpoint \"%.200s\": expected an "
             "http:// or https:// URL",
             o->traces_url ? o->traces_url : o->endpoint);
    return NULL;
  }
  return strdup(url);
}

/* Makes the OTLP exporter and starts its thread. A bad endpoint or header
 * setting is warned about and leaves *OUT NULL with 0. */
static int exporter_start(struct tracer *t, const struct trace_options *o,
                          struct sbx_error *e) {
  char *url = traces_url(o);
  if (!url)
    return 0;
  struct exporter *x = calloc(1, sizeof(*x));
  if (!x) {
    free(url);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  x->url = url;
  x->cap = o->queue_max ? o->queue_max : TRACE_QUEUE_MAX;
  x->batch_max = o->batch_max ? o->batch_max : TRACE_BATCH_MAX;
  if (x->batch_max > x->cap)
    x->batch_max = x->cap;
  x->interval_ms = o->interval_ms ? o->interval_ms : TRACE_INTERVAL_MS;
  x->timeout_ms = o->timeout_ms ? o->timeout_ms : TRACE_TIMEOUT_MS;
  x->refs = 2;
  char **user = NULL;
  struct sbx_error he = {0};
  if (o->headers && trace_parse_headers(o->headers, &user, &he) < 0) {
    if (he.err == ENOMEM) {
      exporter_free(x);
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    }
    log_warn("trace: ignoring OTEL_EXPORTER_OTLP_HEADERS: %s", he.msg);
    user = NULL;
  }
  size_t nu = 0;
  while (user && user[nu])
    nu++;
  x->headers = calloc(nu + 2, sizeof(*x->headers));
  x->ring = calloc(x->cap, sizeof(*x->ring));
  if (x->headers)
    x->headers[0] = strdup("Content-Type: application/json");
  for (size_t i = 0; x->headers && i < nu; i++)
    x->headers[i + 1] = TAKE_PTR(user[i]);
  free_lines(user);
  x->resource =
      json_pack("{s:[{s:s, s:{s:s}}, {s:s, s:{s:s}}]}", "attributes", "key",
                "service.name", "value", "stringValue", t->service_name, "key",
                "service.version", "value", "stringValue", SBX_VERSION);
  pthread_condattr_t ca;
  bool ok = x->headers && x->headers[0] && x->ring && x->resource &&
            pthread_condattr_init(&ca) == 0;
  if (ok) {
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    ok = pthread_mutex_init(&x->mu, NULL) == 0;
    if (ok && pthread_cond_init(&x->wake, &ca) != 0) {
      (void)pthread_mutex_destroy(&x->mu);
      ok = false;
    }
    if (ok && pthread_cond_init(&x->done, &ca) != 0) {
      (void)pthread_cond_destroy(&x->wake);
      (void)pthread_mutex_destroy(&x->mu);
      ok = false;
    }
    (void)pthread_condattr_destroy(&ca);
  }
  if (!ok) {
    /* Nothing of the sync objects to destroy: free by hand. */
    free(x->ring);
    free(x->url);
    free_lines(x->headers);
    json_decref(x->resource);
    free(x);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  int r = http_client_new(&x->http, e);
  if (r < 0) {
    exporter_free(x);
    return r;
  }
  r = pthread_create(&t->thread, NULL, export_main, x);
  if (r != 0) {
    exporter_free(x);
    return sbx_error_set(e, SBX_OK, r, "cannot start the trace export thread");
  }
  t->x = x;
  return 0;
}

int trace_new(const struct trace_options *o, struct tracer **out,
              struct sbx_error *e) {
  *out = NULL;
  bool otlp = o->endpoint || o->traces_url;
  if (!o->file && !otlp)
    return 0;
  struct tracer *t = calloc(1, sizeof(*t));
  if (!t)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  t->service_name = strdup(o->service_name ? o->service_name : "sbx");
  t->flush_ms = o->flush_ms ? o->flush_ms : TRACE_FLUSH_MS;
  atomic_init(&t->ended, 0);
  if (!t->service_name || pthread_mutex_init(&t->file_mu, NULL) != 0) {
    free(t->service_name);
    free(t);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  int r = 0;
  if (o->file) {
    t->file = fopen(o->file, "ae");
    if (!t->file)
      r = sbx_error_set(e, SBX_OK, errno, "cannot open trace file \"%s\": %s",
                        o->file, strerror(errno));
  }
  if (r == 0 && otlp)
    r = exporter_start(t, o, e);
  if (r < 0 || (!t->file && !t->x)) {
    (void)trace_free(t);
    return r;
  }
  *out = t;
  return 0;
}

struct tracer *trace_free(struct tracer *t) {
  if (!t)
    return NULL;
  struct exporter *x = t->x;
  if (x) {
    pthread_mutex_lock(&x->mu);
    x->stop = true;
    x->deadline_ms = sbx_now_ms() + t->flush_ms;
    (void)pthread_cond_broadcast(&x->wake);
    while (!x->finished) {
      struct timespec ts = abs_ms(x->deadline_ms);
      if (pthread_cond_timedwait(&x->done, &x->mu, &ts) == ETIMEDOUT)
        break;
    }
    bool finished = x->finished;
    x->abandoned = !finished;
    uint64_t unsent = x->count + x->inflight;
    uint64_t ended = atomic_load(&t->ended);
    uint64_t lost = x->dropped + x->failed + unsent;
    if (lost)
      log_warn("trace: %llu of %llu spans were not exported to \"%s\" (%llu "
               "dropped from a full queue, %llu in %llu failed exports, "
               "%llu unsent at the %u ms flush deadline)",
               (unsigned long long)lost, (unsigned long long)ended, x->url,
               (unsigned long long)x->dropped, (unsigned long long)x->failed,
               (unsigned long long)x->failed_requests,
               (unsigned long long)unsent, t->flush_ms);
    bool last = --x->refs == 0;
    pthread_mutex_unlock(&x->mu);
    /* A thread stuck in a request past the deadline is left to finish on
     * its own (or to end with the process); it frees the exporter. */
    if (finished)
      (void)pthread_join(t->thread, NULL);
    else
      (void)pthread_detach(t->thread);
    if (last)
      exporter_free(x);
  }
  if (t->file)
    (void)fclose(t->file);
  (void)pthread_mutex_destroy(&t->file_mu);
  free(t->service_name);
  free(t);
  return NULL;
}

void trace_get_stats(struct tracer *t, struct trace_stats *out) {
  memset(out, 0, sizeof(*out));
  if (!t)
    return;
  out->ended = atomic_load(&t->ended);
  if (t->x) {
    pthread_mutex_lock(&t->x->mu);
    out->exported = t->x->exported;
    out->dropped = t->x->dropped;
    out->failed = t->x->failed;
    out->failed_requests = t->x->failed_requests;
    pthread_mutex_unlock(&t->x->mu);
  }
}

/* ---- spans -------------------------------------------------------------- */

static uint64_t wall_ns(void) {
  struct timespec ts;
  (void)clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* N random bytes, never all zero (OTLP's invalid id). */
static void random_id(uint8_t *p, size_t n) {
  for (;;) {
    if (sbx_random_bytes(p, n) < 0) {
      for (size_t i = 0; i < n; i += 8) {
        uint64_t v = sbx_random_u64();
        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
      }
    }
    for (size_t i = 0; i < n; i++)
      if (p[i])
        return;
  }
}

static struct trace_span *span_new(struct tracer *t, const char *name) {
  struct trace_span *s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  s->t = t;
  s->name = strdup(name ? name : "");
  s->attrs = json_array();
  if (!s->name || !s->attrs) {
    free(s->name);
    json_decref(s->attrs);
    free(s);
    return NULL;
  }
  random_id(s->span_id, sizeof(s->span_id));
  s->start_unix_ns = wall_ns();
  s->start_mono_ns = sbx_now_ns();
  s->anchor_unix_ns = s->start_unix_ns;
  s->anchor_mono_ns = s->start_mono_ns;
  return s;
}

struct trace_span *trace_start(struct tracer *t, const char *name) {
  if (!t)
    return NULL;
  struct trace_span *s = span_new(t, name);
  if (s)
    random_id(s->trace_id, sizeof(s->trace_id));
  return s;
}

struct trace_span *trace_child(struct trace_span *parent, const char *name) {
  if (!parent)
    return NULL;
  struct trace_span *s = span_new(parent->t, name);
  if (!s)
    return NULL;
  memcpy(s->trace_id, parent->trace_id, sizeof(s->trace_id));
  memcpy(s->parent_id, parent->span_id, sizeof(s->parent_id));
  s->has_parent = true;
  s->anchor_unix_ns = parent->anchor_unix_ns;
  s->anchor_mono_ns = parent->anchor_mono_ns;
  s->start_unix_ns = s->anchor_unix_ns + (s->start_mono_ns - s->anchor_mono_ns);
  return s;
}

/* Sets KEY to the OTLP AnyValue VALUE (stolen). */
static void set_value(struct trace_span *s, const char *key, json_t *value) {
  if (!s || !key || !value) {
    json_decref(value);
    return;
  }
  size_t i;
  json_t *a;
  json_array_foreach(s->attrs, i, a) {
    const char *k = json_string_value(json_object_get(a, "key"));
    if (k && strcmp(k, key) == 0) {
      /* Replacing a key of an object we made: on OOM the old value stays
       * and the new one is freed, as a dropped attribute would be. */
      (void)json_object_set_new(a, "value", value);
      return;
    }
  }
  if (json_array_size(s->attrs) >= TRACE_MAX_ATTRIBUTES) {
    s->dropped_attrs++;
    json_decref(value);
    return;
  }
  json_t *attr = json_pack("{s:s, s:o}", "key", key, "value", value);
  if (!attr || json_array_append_new(s->attrs, attr) < 0)
    s->dropped_attrs++;
}

/* A JSON string of at most TRACE_MAX_VALUE bytes of S, cut at a character
 * boundary and with invalid UTF-8 replaced. */
static json_t *bounded_string(const char *s) {
  size_t n = strlen(s);
  if (n > TRACE_MAX_VALUE) {
    n = TRACE_MAX_VALUE;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
      n--;
  }
  return sbx_json_stringn_utf8(s, n);
}

void trace_set_str(struct trace_span *s, const char *key, const char *value) {
  if (!s || !value)
    return;
  json_t *v = bounded_string(value);
  set_value(s, key, v ? json_pack("{s:o}", "stringValue", v) : NULL);
}

void trace_set_int(struct trace_span *s, const char *key, int64_t value) {
  if (!s)
    return;
  char num[24];
  (void)snprintf(num, sizeof(num), "%lld", (long long)value);
  set_value(s, key, json_pack("{s:s}", "intValue", num));
}

void trace_set_bool(struct trace_span *s, const char *key, bool value) {
  if (!s)
    return;
  set_value(s, key, json_pack("{s:b}", "boolValue", value));
}

void trace_set_double(struct trace_span *s, const char *key, double value) {
  if (!s)
    return;
  set_value(s, key, json_pack("{s:f}", "doubleValue", value));
}

void trace_set_error(struct trace_span *s, const char *fmt, ...) {
  if (!s)
    return;
  char msg[TRACE_MAX_VALUE];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  free(s->error);
  s->error = strdup(msg);
  if (!s->error)
    s->error = strdup("error");
}

void trace_trace_id(const struct trace_span *s, char out[33]) {
  if (!s) {
    out[0] = '\0';
    return;
  }
  sbx_hex_encode(s->trace_id, sizeof(s->trace_id), out);
}

/* Model API calls and sandboxd requests are client spans. */
static int span_kind(const char *name) {
  if (strcmp(name, TRACE_MODEL_CALL) == 0 || strncmp(name, "sandbox.", 8) == 0)
    return 3; /* SPAN_KIND_CLIENT */
  return 1;   /* SPAN_KIND_INTERNAL */
}

/* The OTLP JSON span object for S (new; takes S's attributes), or NULL
 * when out of memory. */
static json_t *span_json(struct trace_span *s, uint64_t end_ns) {
  char tid[33], sid[17], pid[17], start[24], end[24];
  sbx_hex_encode(s->trace_id, sizeof(s->trace_id), tid);
  sbx_hex_encode(s->span_id, sizeof(s->span_id), sid);
  (void)snprintf(start, sizeof(start), "%llu",
                 (unsigned long long)s->start_unix_ns);
  (void)snprintf(end, sizeof(end), "%llu", (unsigned long long)end_ns);
  json_t *status = s->error ? json_pack("{s:i, s:o}", "code", 2, "message",
                                        bounded_string(s->error))
                            : json_pack("{s:i}", "code", 1);
  json_t *o = json_pack(
      "{s:s, s:s, s:s, s:i, s:s, s:s, s:o, s:o}", "traceId", tid, "spanId", sid,
      "name", s->name, "kind", span_kind(s->name), "startTimeUnixNano", start,
      "endTimeUnixNano", end, "attributes", s->attrs, "status", status);
  s->attrs = NULL; /* stolen by the pack, even when it failed */
  if (!o)
    return NULL;
  if (s->has_parent) {
    sbx_hex_encode(s->parent_id, sizeof(s->parent_id), pid);
    if (json_object_set_new(o, "parentSpanId", json_string(pid)) < 0) {
      json_decref(o);
      return NULL;
    }
  }
  /* An optional count: a span without it is still whole. */
  if (s->dropped_attrs)
    (void)json_object_set_new(o, "droppedAttributesCount",
                              json_integer(s->dropped_attrs));
  return o;
}

static void write_line(struct tracer *t, json_t *span) {
  char *text = json_dumps(span, JSON_COMPACT);
  pthread_mutex_lock(&t->file_mu);
  if (text) {
    size_t n = strlen(text);
    text[n] = '\n'; /* one write per line: the NUL becomes the newline */
    if ((fwrite(text, 1, n + 1, t->file) != n + 1 || fflush(t->file) != 0) &&
        !t->file_failed) {
      t->file_failed = true;
      log_warn("trace: writing the trace file: %s", strerror(errno));
    }
  }
  pthread_mutex_unlock(&t->file_mu);
  free(text);
}

void trace_end(struct trace_span *s) {
  if (!s)
    return;
  struct tracer *t = s->t;
  uint64_t end = s->start_unix_ns + (sbx_now_ns() - s->start_mono_ns);
  json_t *o = span_json(s, end);
  atomic_fetch_add(&t->ended, 1);
  if (!o) {
    log_debug("trace: span \"%s\" lost (out of memory)", s->name);
  } else {
    if (t->file)
      write_line(t, o);
    if (t->x)
      enqueue(t->x, o); /* the export thread's from here on */
    else
      json_decref(o);
  }
  json_decref(s->attrs);
  free(s->error);
  free(s->name);
  free(s);
}
