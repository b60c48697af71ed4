/* HTTP over libcurl: POSTs of JSON bodies for the model clients, and
 * GET/HEAD/PUT/DELETE of whole objects (snapshots) with streamed bodies.
 *
 * One http_client wraps one curl easy handle, so connections are kept alive
 * between calls. Responses are bounded: the body (buffered or streamed) may
 * not exceed max_response_bytes, and the transfer is aborted past it.
 * Redirects are not followed; only http:// and https:// are allowed.
 *
 * http_post and http_send return 0 whenever the server answered with a
 * status, whatever the status; the caller decides what a 4xx or 5xx means.
 * Transport failures are negative errnos with a message for a person that
 * names the URL (CURLcode never leaves this module):
 *   -ECONNREFUSED  "cannot connect to URL: <curl message>" (also DNS)
 *   -ETIMEDOUT     "request to URL timed out: <curl message>"
 *   -ECONNRESET    "connection to URL failed: <curl message>" (send/receive
 *                  errors, an empty or cut-off reply); worth a retry
 *   -E2BIG         "response from URL exceeds 64 MiB"
 *   -EIO           other curl failures (TLS, bad URL, ...), not worth a retry;
 *                  also "upload to URL ended after N of M bytes"
 *   the on_data or upload callback's own negative value, with E untouched
 * Messages never contain request headers (the API key lives there).
 *
 * Thread-safety: an http_client is used by one thread at a time. */
#ifndef SBX_HTTP_H
#define SBX_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "shared/errors.h"

/* Receives streamed body bytes. Return 0 to go on, a negative errno to abort
 * the transfer (http_post then returns that value). */
typedef int (*http_data_fn)(void *arg, const char *data, size_t len);
/* Supplies upload bytes: fills BUF with up to MAX bytes and sets *GOT (0 at
 * the end). Return 0, or a negative errno to abort (returned by http_send). */
typedef int (*http_read_fn)(void *arg, char *buf, size_t max, size_t *got);

struct http_request {
  const char *url;
  const char *url_display; /* the URL as errors show it (NULL: url) */
  const char *body;        /* borrowed */
  size_t body_len;
  const char *const *headers;  /* "Name: value" lines, NULL-terminated; may
                                  be NULL */
  unsigned timeout_ms;         /* whole transfer; 0: no limit */
  unsigned connect_timeout_ms; /* 0: curl's default */
  size_t max_response_bytes;   /* 0: 64 MiB */
  /* When set, a 2xx reply with Content-Type text/event-stream is passed to
   * on_data as it arrives instead of being buffered. Other replies (errors,
   * JSON) are still buffered into the response body. */
  http_data_fn on_data;
  void *data_arg;
  /* http_send only. */
  const char *method;  /* "GET", "HEAD", "PUT", "DELETE" or "POST" */
  bool stream_body;    /* any 2xx body goes to on_data, not only SSE; other
                          bodies are buffered up to 64 KiB, the rest dropped */
  http_read_fn upload; /* PUT: the body, upload_len bytes (exactly) */
  void *upload_arg;
  unsigned long long upload_len;
  unsigned stall_timeout_ms; /* abort when under 1 byte/s for this long
                                (-ETIMEDOUT); 0: never */
  /* -ETIMEDOUT when nothing of the response (status line, headers or
   * body) came this long after the request started, or nothing more came
   * for idle_timeout_ms once it had begun; 0: no limit. Checked about
   * once a second. */
  unsigned first_byte_timeout_ms;
  unsigned idle_timeout_ms;
  /* When set, the transfer stops within about a second once *cancel turns
   * true: -ECANCELED. */
  const volatile bool *cancel;
  /* Response headers whose names begin with this (case-insensitive, e.g.
   * "sbx-") are kept in http_response.headers; NULL: none. */
  const char *capture_prefix;
};

struct http_response {
  long status; /* HTTP status, e.g. 200 */
  char *body;  /* new, NUL-terminated; "" when streamed or empty */
  size_t body_len;
  bool streamed;            /* the body went to on_data */
  char *content_type;       /* new, may be NULL */
  long long retry_after_ms; /* from retry-after-ms or Retry-After (seconds
                               or an HTTP date); -1 when absent */
  int should_retry;         /* x-should-retry: 1 true, 0 false, -1 absent */
  json_t *headers; /* new: the captured headers, lower-case name: value (at
                      most 32), or NULL */
};

struct http_client;

/* Makes a client into *OUT (new). 0, or -ENOMEM with a message. */
int http_client_new(struct http_client **out, struct sbx_error *e);
/* Frees; accepts NULL; returns NULL. */
struct http_client *http_client_free(struct http_client *c);

/* POSTs REQ. On 0, OUT holds the status and new values (free with
 * http_response_clear); on failure OUT is cleared. */
int http_post(struct http_client *c, const struct http_request *req,
              struct http_response *out, struct sbx_error *e);
void http_response_clear(struct http_response *r);

/* Like http_post with REQ->method (required). A HEAD reply has no body. */
int http_send(struct http_client *c, const struct http_request *req,
              struct http_response *out, struct sbx_error *e);

/* URL without user, password, query and fragment, for messages and for
 * state that must not hold credentials (presigned URLs sign in the query).
 * *OUT is new. -EINVAL when URL is not an absolute http(s) URL, -ENOMEM. */
int http_url_redact(const char *url, char **out);

/* Formats a byte count for messages: "64 MiB", "4 KiB" or "1000 bytes". */
void http_format_size(size_t n, char *out, size_t out_size);

#endif
