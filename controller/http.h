/* HTTP POST of JSON bodies over libcurl, for the model clients.
 *
 * One http_client wraps one curl easy handle, so connections are kept alive
 * between calls. Responses are bounded: the body (buffered or streamed) may
 * not exceed max_response_bytes, and the transfer is aborted past it.
 * Redirects are not followed; only http:// and https:// are allowed.
 *
 * http_post returns 0 whenever the server answered with a status, whatever
 * the status; the caller decides what a 4xx or 5xx means. Transport failures
 * are negative errnos with a message for a person that names the URL
 * (CURLcode never leaves this module):
 *   -ECONNREFUSED  "cannot connect to URL: <curl message>" (also DNS)
 *   -ETIMEDOUT     "request to URL timed out: <curl message>"
 *   -ECONNRESET    "connection to URL failed: <curl message>" (send/receive
 *                  errors, an empty or cut-off reply); worth a retry
 *   -E2BIG         "response from URL exceeds 64 MiB"
 *   -EIO           other curl failures (TLS, bad URL, ...), not worth a retry
 *   the on_data callback's own negative value, with E untouched
 * Messages never contain request headers (the API key lives there).
 *
 * Thread-safety: an http_client is used by one thread at a time. */
#ifndef SBX_HTTP_H
#define SBX_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"

/* Receives streamed body bytes. Return 0 to go on, a negative errno to abort
 * the transfer (http_post then returns that value). */
typedef int (*http_data_fn)(void *arg, const char *data, size_t len);

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

/* Formats a byte count for messages: "64 MiB", "4 KiB" or "1000 bytes". */
void http_format_size(size_t n, char *out, size_t out_size);

#endif
