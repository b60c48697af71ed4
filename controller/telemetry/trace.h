/* Tracing: OpenTelemetry spans for runs, turns, model calls, tool calls
 * and sandbox operations (docs/tracing.md lists them with their
 * attributes).
 *
 * A span has a trace id (16 random bytes, shared by the spans of one run),
 * a span id (8 random bytes), an optional parent, a name, start and end
 * times (Unix nanoseconds), attributes and a status (ok, or error with a
 * message). Ended spans go to up to two exporters:
 *
 *  - a file (sbx run --trace FILE): one span per line, appended, written
 *    and flushed when the span ends. Each line is an OTLP JSON span object:
 *      {"traceId":"<32 hex>","spanId":"<16 hex>","parentSpanId":"<16 hex>",
 *       "name":"sbx.turn","kind":1,"startTimeUnixNano":"<decimal>",
 *       "endTimeUnixNano":"<decimal>","attributes":[{"key":"...","value":
 *       {"stringValue":"..."}}],"status":{"code":1}}
 *    (parentSpanId absent on a root span; status {"code":2,"message":...}
 *    on error; intValue is a decimal string, as in OTLP's JSON encoding).
 *
 *  - OTLP/HTTP with JSON bodies: POST {endpoint}/v1/traces with
 *    {"resourceSpans":[{"resource":{"attributes":[service.name,
 *    service.version]},"scopeSpans":[{"scope":{"name":"sbx","version":...},
 *    "spans":[...]}]}]} from a background thread. Ending a span only puts
 *    it on a bounded queue (TRACE_QUEUE_MAX); when the queue is full the
 *    span is dropped and counted. Batches go out every interval or when
 *    TRACE_BATCH_MAX spans wait. A failed export (no connection, a timeout,
 *    a non-2xx reply) is counted and logged once at warn; it never fails or
 *    slows the run. trace_free flushes what is queued within the flush
 *    deadline (TRACE_FLUSH_MS) and then gives up, logging at warn how many
 *    spans were not exported.
 *
 * Spans are passed down explicitly: a root span from trace_start, children
 * from trace_child. Every function accepts a NULL tracer or span and then
 * does nothing, so code that traces needs no "is tracing on" checks.
 *
 * Thread-safety: a tracer may be used from any number of threads. One span
 * is changed by one thread at a time, but children may be started from a
 * parent in several threads at once (they only read its ids). */
#ifndef SBX_TRACE_H
#define SBX_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/errors.h"

#define TRACE_QUEUE_MAX 2048   /* spans waiting for export */
#define TRACE_BATCH_MAX 256    /* spans per export request */
#define TRACE_INTERVAL_MS 1000 /* longest wait before a batch goes out */
#define TRACE_TIMEOUT_MS 10000 /* one export request */
#define TRACE_FLUSH_MS 2000    /* trace_free's flush deadline */
#define TRACE_MAX_ATTRIBUTES 64
#define TRACE_MAX_VALUE 4096 /* bytes of one string attribute */
#define TRACE_MAX_HEADERS 32 /* OTEL_EXPORTER_OTLP_HEADERS entries */

/* Span names. sbx's own, then the Agents SDK's sandbox span names, then
 * sandbox operations the SDK does not trace. */
#define TRACE_RUN "sbx.run"
#define TRACE_TURN "sbx.turn"
#define TRACE_MODEL_CALL "sbx.model_call"
#define TRACE_TOOL_CALL "sbx.tool_call"
#define TRACE_GUARDRAIL "sbx.guardrail"
#define TRACE_SANDBOX_CREATE_SESSION "sandbox.create_session"
#define TRACE_SANDBOX_START "sandbox.start"
#define TRACE_SANDBOX_EXEC "sandbox.exec"
#define TRACE_SANDBOX_WRITE_STDIN "sandbox.write_stdin"
#define TRACE_SANDBOX_VIEW_IMAGE "sandbox.view_image"
#define TRACE_SANDBOX_CLEANUP "sandbox.cleanup"
#define TRACE_MEMORY_FLUSH "sandbox.memory.flush"
#define TRACE_SANDBOX_SHUTDOWN "sandbox.shutdown"
#define TRACE_SANDBOX_APPLY_PATCH "sandbox.apply_patch"
#define TRACE_SANDBOX_SNAPSHOT "sandbox.snapshot"

struct trace_options {
  const char *file;         /* --trace FILE, or NULL */
  const char *endpoint;     /* OTLP base URL: spans go to .../v1/traces */
  const char *traces_url;   /* the full OTLP URL; wins over endpoint */
  const char *headers;      /* "k=v,k=v", values URL-encoded */
  const char *service_name; /* NULL: "sbx" */
  size_t queue_max;         /* 0: TRACE_QUEUE_MAX */
  size_t batch_max;         /* 0: TRACE_BATCH_MAX */
  unsigned interval_ms;     /* 0: TRACE_INTERVAL_MS */
  unsigned timeout_ms;      /* 0: TRACE_TIMEOUT_MS */
  unsigned flush_ms;        /* 0: TRACE_FLUSH_MS */
};

/* Fills O's OTLP fields from the environment (O's strings then borrow
 * from it): OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
 * OTEL_EXPORTER_OTLP_HEADERS (or ..._TRACES_HEADERS), OTEL_EXPORTER_OTLP_
 * TIMEOUT (or ..._TRACES_TIMEOUT, ms), OTEL_SERVICE_NAME,
 * OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
 * OTEL_BSP_SCHEDULE_DELAY (ms); OTEL_SDK_DISABLED=true turns OTLP export
 * off. A value that cannot be used is logged at warn and ignored: tracing
 * settings never stop a run. */
void trace_options_from_env(struct trace_options *o);

struct tracer;

/* Makes a tracer into *OUT (new), or NULL when O names neither a file nor
 * an endpoint (tracing off). Returns 0, or a negative errno with E:
 * -ENOENT, -EACCES, ... when the file cannot be opened for appending. An
 * endpoint that is not http:// or https:// is logged at warn and ignored. */
int trace_new(const struct trace_options *o, struct tracer **out,
              struct sbx_error *e);

/* Flushes (within the flush deadline), stops the exporter and frees;
 * accepts NULL; returns NULL. Logs at warn when spans were not exported. */
struct tracer *trace_free(struct tracer *t);

struct trace_stats {
  uint64_t ended;           /* spans ended */
  uint64_t exported;        /* accepted by the OTLP endpoint */
  uint64_t dropped;         /* queue full */
  uint64_t failed;          /* in failed or rejected exports */
  uint64_t failed_requests; /* export requests that failed */
};

/* The counters so far. */
void trace_get_stats(struct tracer *t, struct trace_stats *out);

struct trace_span;

/* Starts a root span (a new trace) named NAME (copied). NULL when T is
 * NULL or out of memory. */
struct trace_span *trace_start(struct tracer *t, const char *name);
/* Starts a child of PARENT (same trace). NULL when PARENT is NULL. */
struct trace_span *trace_child(struct trace_span *parent, const char *name);

/* Attributes; setting a key again replaces its value. Strings are cut to
 * TRACE_MAX_VALUE bytes and made valid UTF-8; a NULL string is not set.
 * Past TRACE_MAX_ATTRIBUTES keys, new keys are dropped and counted. */
void trace_set_str(struct trace_span *s, const char *key, const char *value);
void trace_set_int(struct trace_span *s, const char *key, int64_t value);
void trace_set_bool(struct trace_span *s, const char *key, bool value);
void trace_set_double(struct trace_span *s, const char *key, double value);
/* Marks S failed with a message (the status is ok otherwise). */
void trace_set_error(struct trace_span *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Ends S: hands it to the exporters and frees it. */
void trace_end(struct trace_span *s);

/* S's trace id as 32 hex digits into OUT; "" for a NULL span. */
void trace_trace_id(const struct trace_span *s, char out[33]);

/* Parses an OTEL_EXPORTER_OTLP_HEADERS value ("k=v,k2=v2", values
 * URL-decoded, blanks around names and values trimmed) into "Name: value"
 * lines: *OUT is a new NULL-terminated array (free each line and the
 * array). 0, or -EINVAL with E for an entry without "=", an empty or
 * invalid name, a value holding CR, LF or NUL, or more than
 * TRACE_MAX_HEADERS entries; -ENOMEM. */
int trace_parse_headers(const char *spec, char ***out, struct sbx_error *e);

#endif
