#include "controller/net/http.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

#define HTTP_DEFAULT_MAX_RESPONSE ((size_t)64 << 20)
#define HTTP_MAX_HEADER_LINE 8192
#define HTTP_MAX_ERROR_BODY ((size_t)64 << 10) /* kept of a non-2xx body */

struct http_client {
  CURL *curl;
};

/* One transfer's state, seen by the curl callbacks. */
struct xfer {
  const struct http_request *req;
  struct http_response *resp;
  CURL *curl;
  struct sbx_buf body;
  size_t total; /* body bytes received, buffered or streamed */
  size_t max;
  bool decided; /* stream or buffer chosen (at the first body byte) */
  bool stream;
  bool toobig;
  bool nomem;
  int cb_err;             /* on_data's or upload's failure */
  unsigned long long put; /* upload bytes handed to curl */
  bool short_upload;      /* the upload source ended early */
  uint64_t t_start;       /* sbx_now_ns() when the request began */
  uint64_t t_last;        /* ...when the last response byte came; 0: none */
  const char *gave_up;    /* the timeout that aborted it, or NULL */
  bool cancelled;         /* req->cancel stopped it */
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_OK;

static void global_init(void) {
  global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

void http_format_size(size_t n, char *out, size_t out_size) {
  if (n >= ((size_t)1 << 20) && n % ((size_t)1 << 20) == 0)
    (void)snprintf(out, out_size, "%zu MiB", n >> 20);
  else if (n >= 1024 && n % 1024 == 0)
    (void)snprintf(out, out_size, "%zu KiB", n >> 10);
  else
    (void)snprintf(out, out_size, "%zu bytes", n);
}

int http_client_new(struct http_client **out, struct sbx_error *e) {
  *out = NULL;
  (void)pthread_once(&global_once, global_init);
  if (global_rc != CURLE_OK)
    return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot initialise libcurl: %s",
                         curl_easy_strerror(global_rc));
  struct http_client *c = calloc(1, sizeof(*c));
  if (!c)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  c->curl = curl_easy_init();
  if (!c->curl) {
    free(c);
    return sbx_error_set(e, SBX_OK, ENOMEM, "cannot create a curl handle");
  }
  *out = c;
  return 0;
}

struct http_client *http_client_free(struct http_client *c) {
  if (!c)
    return NULL;
  curl_easy_cleanup(c->curl);
  free(c);
  return NULL;
}

void http_response_clear(struct http_response *r) {
  if (!r)
    return;
  free(r->body);
  free(r->content_type);
  json_decref(r->headers);
  memset(r, 0, sizeof(*r));
  r->retry_after_ms = -1;
  r->should_retry = -1;
}

/* Strips leading and trailing blanks of [*p, *p + *n). */
static void trim(const char **p, size_t *n) {
  while (*n > 0 && isspace((unsigned char)**p)) {
    (*p)++;
    (*n)--;
  }
  while (*n > 0 && isspace((unsigned char)(*p)[*n - 1]))
    (*n)--;
}

/* Parses a decimal of at most 12 digits into *OUT; false on anything else. */
static bool parse_decimal(const char *s, size_t n, long long *out) {
  if (n == 0 || n > 12)
    return false;
  long long v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

/* Retry-After is seconds or an HTTP date; the result is milliseconds from
 * now, 0 for a date in the past, -1 when it cannot be read. */
static long long parse_retry_after(const char *v, size_t n) {
  long long secs;
  if (parse_decimal(v, n, &secs))
    return secs * 1000;
  char date[128];
  if (n == 0 || n >= sizeof(date))
    return -1;
  memcpy(date, v, n);
  date[n] = '\0';
  time_t t = curl_getdate(date, NULL);
  if (t < 0)
    return -1;
  time_t now = time(NULL);
  return t > now ? (long long)(t - now) * 1000 : 0;
}

#define HTTP_MAX_CAPTURED 32

/* Keeps header NAME: VAL when the request asked for its prefix. */
static void capture(struct xfer *x, const char *name, size_t name_len,
                    const char *val, size_t val_len) {
  const char *pre = x->req->capture_prefix;
  size_t pl = pre ? strlen(pre) : 0;
  if (!pre || name_len < pl || strncasecmp(name, pre, pl) != 0 || name_len > 64)
    return;
  if (!x->resp->headers)
    x->resp->headers = json_object();
  if (!x->resp->headers ||
      json_object_size(x->resp->headers) >= HTTP_MAX_CAPTURED)
    return;
  char key[65];
  for (size_t i = 0; i < name_len; i++)
    key[i] = (char)tolower((unsigned char)name[i]);
  key[name_len] = '\0';
  (void)json_object_set_new(x->resp->headers, key, json_stringn(val, val_len));
}

static size_t on_header(char *p, size_t size, size_t nitems, void *ud) {
  struct xfer *x = ud;
  size_t len = size * nitems;
  x->t_last = sbx_now_ns();
  if (len > HTTP_MAX_HEADER_LINE)
    return len; /* too long to be one we read; ignore it */
  if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
    /* A new response (after 1xx): forget the previous one's headers. */
    free(x->resp->content_type);
    x->resp->content_type = NULL;
    x->resp->retry_after_ms = -1;
    x->resp->should_retry = -1;
    json_decref(x->resp->headers);
    x->resp->headers = NULL;
    return len;
  }
  const char *colon = memchr(p, ':', len);
  if (!colon)
    return len;
  const char *name = p;
  size_t name_len = (size_t)(colon - p);
  trim(&name, &name_len);
  const char *val = colon + 1;
  size_t val_len = len - (size_t)(val - p);
  trim(&val, &val_len);

#define IS(h) (name_len == strlen(h) && strncasecmp(name, h, name_len) == 0)
  if (IS("content-type")) {
    free(x->resp->content_type);
    x->resp->content_type = strndup(val, val_len);
  } else if (IS("retry-after-ms")) {
    long long ms;
    if (parse_decimal(val, val_len, &ms))
      x->resp->retry_after_ms = ms; /* preferred over Retry-After */
  } else if (IS("retry-after")) {
    /* retry-after-ms, when it came first, wins. */
    if (x->resp->retry_after_ms < 0)
      x->resp->retry_after_ms = parse_retry_after(val, val_len);
  } else if (IS("x-should-retry")) {
    if (val_len == 4 && strncasecmp(val, "true", 4) == 0)
      x->resp->should_retry = 1;
    else if (val_len == 5 && strncasecmp(val, "false", 5) == 0)
      x->resp->should_retry = 0;
  }
#undef IS
  capture(x, name, name_len, val, val_len);
  return len;
}

static bool is_event_stream(const char *ct) {
  return ct && strncasecmp(ct, "text/event-stream", 17) == 0;
}

static size_t on_write(char *p, size_t size, size_t nmemb, void *ud) {
  struct xfer *x = ud;
  size_t len = size * nmemb;
  x->t_last = sbx_now_ns();
  if (len > x->max - x->total) {
    x->toobig = true;
    return 0;
  }
  x->total += len;
  if (!x->decided) {
    long status = 0;
    (void)curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
    x->stream = x->req->on_data && status >= 200 && status < 300 &&
                (x->req->stream_body || is_event_stream(x->resp->content_type));
    x->decided = true;
  }
  if (!x->stream && x->req->stream_body) {
    /* An error page: keep its start for the message, drop the rest. */
    size_t room = x->body.len < HTTP_MAX_ERROR_BODY
                      ? HTTP_MAX_ERROR_BODY - x->body.len
                      : 0;
    if (len > room)
      len = room;
    if (len > 0 && sbx_buf_append(&x->body, p, len) < 0) {
      x->nomem = true;
      return 0;
    }
    return size * nmemb;
  }
  if (x->stream) {
    int r = x->req->on_data(x->req->data_arg, p, len);
    if (r < 0) {
      x->cb_err = r;
      return 0;
    }
    return len;
  }
  int r = sbx_buf_append(&x->body, p, len);
  if (r < 0) {
    if (r == -E2BIG)
      x->toobig = true;
    else
      x->nomem = true;
    return 0;
  }
  return len;
}

static size_t on_read(char *buf, size_t size, size_t nitems, void *ud) {
  struct xfer *x = ud;
  size_t max = size * nitems;
  unsigned long long left = x->req->upload_len - x->put;
  if (max > left)
    max = (size_t)left;
  if (max == 0)
    return 0;
  size_t got = 0;
  int r = x->req->upload(x->req->upload_arg, buf, max, &got);
  if (r < 0 || got > max || got == 0) {
    /* A source that ends early would leave the request short: an error. */
    x->cb_err = r < 0 ? r : -EIO;
    x->short_upload = r >= 0;
    return CURL_READFUNC_ABORT;
  }
  x->put += got;
  return got;
}

/* Sets the options of one transfer on a reset handle. */
/* Aborts a transfer that waits past its first-byte or idle timeout
 * (curl calls this at least once a second). */
static int on_progress(void *ud, curl_off_t dlt, curl_off_t dln, curl_off_t ult,
                       curl_off_t uln) {
  (void)dlt, (void)dln, (void)ult, (void)uln;
  struct xfer *x = ud;
  uint64_t now = sbx_now_ns();
  unsigned fb = x->req->first_byte_timeout_ms, idle = x->req->idle_timeout_ms;
  if (!x->t_last && fb && now - x->t_start >= (uint64_t)fb * 1000000u)
    x->gave_up = "first_byte";
  else if (x->t_last && idle && now - x->t_last >= (uint64_t)idle * 1000000u)
    x->gave_up = "idle";
  if (x->req->cancel && *x->req->cancel)
    x->cancelled = true;
  return x->gave_up || x->cancelled ? 1 : 0;
}

static int setup(struct xfer *x, const char *method, struct curl_slist *headers,
                 char *errbuf) {
  const struct http_request *req = x->req;
  CURL *h = x->curl;
  CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                          \
  do {                                                                         \
    if (rc == CURLE_OK)                                                        \
      rc = curl_easy_setopt(h, opt, val);                                      \
  } while (0)
  SET(CURLOPT_ERRORBUFFER, errbuf);
  SET(CURLOPT_URL, req->url);
  SET(CURLOPT_NOSIGNAL, 1L);
  if (strcmp(method, "POST") == 0) {
    SET(CURLOPT_POST, 1L);
    SET(CURLOPT_POSTFIELDS, req->body ? req->body : "");
    SET(CURLOPT_POSTFIELDSIZE_LARGE,
        (curl_off_t)(req->body ? req->body_len : 0));
  } else if (strcmp(method, "GET") == 0) {
    SET(CURLOPT_HTTPGET, 1L);
  } else if (strcmp(method, "HEAD") == 0) {
    SET(CURLOPT_NOBODY, 1L);
  } else if (strcmp(method, "DELETE") == 0) {
    SET(CURLOPT_CUSTOMREQUEST, "DELETE");
  } else if (strcmp(method, "PUT") == 0 && req->upload) {
    SET(CURLOPT_UPLOAD, 1L);
    SET(CURLOPT_READFUNCTION, on_read);
    SET(CURLOPT_READDATA, x);
    SET(CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->upload_len);
  } else {
    return -EINVAL;
  }
  if (req->first_byte_timeout_ms || req->idle_timeout_ms || req->cancel) {
    x->t_start = sbx_now_ns();
    SET(CURLOPT_XFERINFOFUNCTION, on_progress);
    SET(CURLOPT_XFERINFODATA, x);
    SET(CURLOPT_NOPROGRESS, 0L);
  }
  if (req->stall_timeout_ms) {
    SET(CURLOPT_LOW_SPEED_LIMIT, 1L);
    SET(CURLOPT_LOW_SPEED_TIME, (long)((req->stall_timeout_ms + 999) / 1000));
  }
  SET(CURLOPT_HTTPHEADER, headers);
  SET(CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
#else
  SET(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
  SET(CURLOPT_ACCEPT_ENCODING, "");
  SET(CURLOPT_TCP_KEEPALIVE, 1L);
  SET(CURLOPT_TIMEOUT_MS, (long)req->timeout_ms);
  if (req->connect_timeout_ms)
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)req->connect_timeout_ms);
  SET(CURLOPT_WRITEFUNCTION, on_write);
  SET(CURLOPT_WRITEDATA, x);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, x);
#undef SET
  return rc == CURLE_OK ? 0 : -EINVAL;
}

/* Builds the header list: the caller's lines plus "Expect:" (no
 * 100-continue round trip). NULL on OOM. */
static struct curl_slist *make_headers(const char *const *lines) {
  struct curl_slist *l = NULL;
  for (size_t i = 0; lines && lines[i]; i++) {
    struct curl_slist *n = curl_slist_append(l, lines[i]);
    if (!n) {
      curl_slist_free_all(l);
      return NULL;
    }
    l = n;
  }
  struct curl_slist *n = curl_slist_append(l, "Expect:");
  if (!n) {
    curl_slist_free_all(l);
    return NULL;
  }
  return n;
}

/* Erases the header strings (they hold the API key) and frees the list. */
static void free_headers(struct curl_slist *l) {
  for (struct curl_slist *i = l; i; i = i->next)
    explicit_bzero(i->data, strlen(i->data));
  curl_slist_free_all(l);
}

/* One request with METHOD; see http_post and http_send. */
static int perform(struct http_client *c, const char *method,
                   const struct http_request *req, struct http_response *out,
                   struct sbx_error *e) {
  memset(out, 0, sizeof(*out));
  out->retry_after_ms = -1;
  out->should_retry = -1;
  const char *shown = req->url_display ? req->url_display : req->url;

  struct xfer x = {
      .req = req,
      .resp = out,
      .curl = c->curl,
      .max = req->max_response_bytes ? req->max_response_bytes
                                     : HTTP_DEFAULT_MAX_RESPONSE,
  };
  sbx_buf_init(&x.body, req->stream_body ? HTTP_MAX_ERROR_BODY : x.max);
  char errbuf[CURL_ERROR_SIZE] = {0};

  struct curl_slist *headers = make_headers(req->headers);
  if (!headers) {
    sbx_buf_free(&x.body);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  curl_easy_reset(c->curl);
  int r = setup(&x, method, headers, errbuf);
  CURLcode rc = CURLE_OK;
  if (r == 0)
    rc = curl_easy_perform(c->curl);
  long status = 0;
  (void)curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
  /* Forget the pointers into this frame before it goes. */
  (void)curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
  (void)curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
  free_headers(headers);

  const char *cmsg = errbuf[0] ? errbuf : curl_easy_strerror(rc);
  if (r < 0) {
    r = sbx_error_set(e, SBX_INTERNAL, EINVAL,
                      "cannot set up the %s request to %s", method, shown);
  } else if (x.toobig) {
    char sz[32];
    http_format_size(x.max, sz, sizeof(sz));
    r = sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                      "response from %s exceeds %s", shown, sz);
  } else if (x.short_upload) {
    r = sbx_error_set(e, SBX_INTERNAL, EIO,
                      "upload to %s ended after %llu of %llu bytes", shown,
                      x.put, req->upload_len);
  } else if (x.cancelled) {
    r = sbx_error_set(e, SBX_OK, ECANCELED, "the request to %s was cancelled",
                      shown);
  } else if (x.gave_up) {
    bool fb = strcmp(x.gave_up, "first_byte") == 0;
    r = sbx_error_set(
        e, SBX_TIMED_OUT, ETIMEDOUT,
        fb ? "%s sent nothing for %u ms after the request (%s timeout)"
           : "%s sent nothing more for %u ms (%s timeout)",
        shown, fb ? req->first_byte_timeout_ms : req->idle_timeout_ms,
        x.gave_up);
  } else if (x.cb_err < 0) {
    r = x.cb_err;
  } else if (x.nomem) {
    r = sbx_error_set(e, SBX_OK, ENOMEM, "out of memory reading %s", shown);
  } else {
    switch (rc) {
    case CURLE_OK:
      r = 0;
      break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      r = sbx_error_set(e, SBX_UNAVAILABLE, ECONNREFUSED,
                        "cannot connect to %s: %s", shown, cmsg);
      break;
    case CURLE_OPERATION_TIMEDOUT:
      r = sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                        "request to %s timed out: %s", shown, cmsg);
      break;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      r = sbx_error_set(e, SBX_UNAVAILABLE, ECONNRESET,
                        "connection to %s failed: %s", shown, cmsg);
      break;
    default:
      r = sbx_error_set(e, SBX_UNAVAILABLE, EIO, "request to %s failed: %s",
                        shown, cmsg);
      break;
    }
  }
  if (r < 0) {
    sbx_buf_free(&x.body);
    http_response_clear(out);
    return r;
  }
  out->status = status;
  out->streamed = x.stream;
  out->body = sbx_buf_steal(&x.body, &out->body_len);
  sbx_buf_free(&x.body);
  if (!out->body) {
    http_response_clear(out);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  log_debug("http: %s %s: %ld, %zu bytes%s", method, shown, status, x.total,
            x.stream ? " streamed" : "");
  return 0;
}

int http_post(struct http_client *c, const struct http_request *req,
              struct http_response *out, struct sbx_error *e) {
  return perform(c, "POST", req, out, e);
}

int http_send(struct http_client *c, const struct http_request *req,
              struct http_response *out, struct sbx_error *e) {
  if (!req->method) {
    memset(out, 0, sizeof(*out));
    http_response_clear(out);
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "no HTTP method for %s",
                         req->url_display ? req->url_display : req->url);
  }
  return perform(c, req->method, req, out, e);
}

int http_url_redact(const char *url, char **out) {
  *out = NULL;
  CURLU *u = curl_url();
  if (!u)
    return -ENOMEM;
  int r = 0;
  char *scheme = NULL, *s = NULL;
  if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
      (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
    r = -EINVAL;
    goto out;
  }
  if (curl_url_set(u, CURLUPART_USER, NULL, 0) != CURLUE_OK ||
      curl_url_set(u, CURLUPART_PASSWORD, NULL, 0) != CURLUE_OK ||
      curl_url_set(u, CURLUPART_QUERY, NULL, 0) != CURLUE_OK ||
      curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_URL, &s, 0) != CURLUE_OK) {
    r = -ENOMEM;
    goto out;
  }
  *out = strdup(s);
  if (!*out)
    r = -ENOMEM;
out:
  curl_free(scheme);
  curl_free(s);
  curl_url_cleanup(u);
  return r;
}
