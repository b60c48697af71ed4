/* The Docker Engine API over a unix socket with libcurl: one easy handle per
 * engine, so the connection is kept between requests. */
#include "backends/docker/engine.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "shared/cleanup.h"
#include "shared/log.h"

#define DEFAULT_TIMEOUT_MS 60000u
#define DEFAULT_MAX_BYTES (8u << 20)
#define MESSAGE_MAX 300

struct docker_engine {
  CURL *curl;
  char *host;   /* as given */
  char *socket; /* its path */
  char version[16];
  char libpod[16]; /* Podman's own API version; "" for Docker */
  char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void) {
  curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct docker_engine *docker_engine_free(struct docker_engine *en) {
  if (!en)
    return NULL;
  if (en->curl)
    curl_easy_cleanup(en->curl);
  free(en->host);
  free(en->socket);
  free(en);
  return NULL;
}

const char *docker_engine_host(const struct docker_engine *en) {
  return en->host;
}

const char *docker_engine_version(const struct docker_engine *en) {
  return en->version;
}

const char *docker_engine_libpod(const struct docker_engine *en) {
  return en->libpod[0] ? en->libpod : NULL;
}

char *docker_engine_escape(const char *s, bool path) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(s);
  if (n > (SIZE_MAX - 1) / 3)
    return NULL;
  char *out = malloc(3 * n + 1);
  if (!out)
    return NULL;
  char *o = out;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
        (*p >= '0' && *p <= '9') || *p == '-' || *p == '.' || *p == '_' ||
        *p == '~' || (path && (*p == '/' || *p == ':' || *p == '@'))) {
      *o++ = (char)*p;
    } else {
      *o++ = '%';
      *o++ = hex[*p >> 4];
      *o++ = hex[*p & 15];
    }
  }
  *o = '\0';
  return out;
}

struct sink {
  struct sbx_buf *buf;
  bool keep_tail;
  bool too_big;
  char api_version[16]; /* the Api-Version header, when sent */
  char libpod[16];      /* the Libpod-Api-Version header: Podman's */
};

/* Copies the value of header NAME ("name:", lower case) into OUT when the
 * header line DATA (N bytes) is that header and the value fits. */
static void header_value(const char *data, size_t n, const char *name,
                         char out[16]) {
  size_t nl = strlen(name);
  if (n <= nl || strncasecmp(data, name, nl) != 0)
    return;
  const char *v = data + nl;
  const char *end = data + n;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
    end--;
  size_t len = (size_t)(end - v);
  if (len < 16) {
    memcpy(out, v, len);
    out[len] = '\0';
  }
}

/* Picks the API version headers out of the reply's headers. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *arg) {
  struct sink *k = arg;
  size_t n = size * nmemb;
  header_value(data, n, "api-version:", k->api_version);
  header_value(data, n, "libpod-api-version:", k->libpod);
  return n;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
  struct sink *k = arg;
  size_t n = size * nmemb;
  if (k->buf->len + n > k->buf->max) {
    if (!k->keep_tail) {
      k->too_big = true;
      return 0; /* aborts the transfer */
    }
    if (n >= k->buf->max) {
      data += n - k->buf->max;
      n = k->buf->max;
    }
    sbx_buf_consume(k->buf, k->buf->len + n - k->buf->max);
  }
  return sbx_buf_append(k->buf, data, n) < 0 ? 0 : size * nmemb;
}

/* Copies the printable part of S (at most MESSAGE_MAX bytes, no control
 * characters) into OUT: engine messages are shown to a person. */
static void clean_message(const char *s, char *out, size_t out_size) {
  size_t o = 0;
  for (; s && *s && o + 1 < out_size && o < MESSAGE_MAX; s++)
    out[o++] = (unsigned char)*s < 0x20 || *s == 0x7f ? ' ' : *s;
  while (o > 0 && out[o - 1] == ' ')
    o--;
  out[o] = '\0';
}

static int status_errno(long status) {
  switch (status) {
  case 400:
    return EINVAL;
  case 401:
  case 403:
    return EACCES;
  case 404:
    return ENOENT;
  case 409:
    return EBUSY;
  default:
    return EIO;
  }
}

/* The error for a reply with STATUS, with the engine's message when BODY is
 * its JSON error ({"message": ...}). */
static int engine_status_error(struct docker_engine *en,
                               const struct docker_request *req, long status,
                               const struct sbx_buf *body,
                               struct sbx_error *e) {
  char msg[MESSAGE_MAX + 1] = "";
  json_error_t je;
  _cleanup_json_ json_t *j =
      body->len ? json_loadb(body->data, body->len, JSON_DECODE_ANY, &je)
                : NULL;
  const char *m = json_is_object(j)
                      ? json_string_value(json_object_get(j, "message"))
                      : NULL;
  clean_message(m ? m : (body->len ? body->data : NULL), msg, sizeof(msg));
  char path[96];
  clean_message(req->path, path, sizeof(path));
  char *q = strchr(path, '?');
  if (q)
    *q = '\0';
  int err = status_errno(status);
  return sbx_error_set(e, status >= 500 ? SBX_UNAVAILABLE : SBX_OK, err,
                       "container engine: %s (HTTP %ld from %s %s)",
                       msg[0] ? msg : "no message", status, req->method, path);
}

static int transport_error(struct docker_engine *en, CURLcode rc,
                           struct sbx_error *e) {
  const char *detail = en->errbuf[0] ? en->errbuf : curl_easy_strerror(rc);
  switch (rc) {
  case CURLE_COULDNT_CONNECT: {
    /* Tell a missing socket from a refused or forbidden one. */
    int err = ECONNREFUSED;
    if (access(en->socket, F_OK) < 0)
      err = ENOENT;
    else if (access(en->socket, R_OK | W_OK) < 0)
      err = EACCES;
    return sbx_error_set(
        e, SBX_UNAVAILABLE, err,
        "cannot reach the container engine at %s: %s (is it running? set "
        "DOCKER_HOST to its socket)",
        en->host,
        err == ENOENT   ? "no such socket"
        : err == EACCES ? "permission denied"
                        : "connection refused");
  }
  case CURLE_OPERATION_TIMEDOUT:
    return sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                         "the container engine at %s did not answer in time: "
                         "%s",
                         en->host, detail);
  case CURLE_OUT_OF_MEMORY:
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  default:
    return sbx_error_set(e, SBX_UNAVAILABLE, EIO,
                         "request to the container engine at %s failed: %s",
                         en->host, detail);
  }
}

/* Sends REQ under PREFIX ("" or "/v1.41") and returns the HTTP status in
 * *STATUS, the body in BODY. Transport failures are errors; statuses are
 * not (the callers decide). */
static int engine_send(struct docker_engine *en, const char *prefix,
                       const struct docker_request *req, struct sbx_buf *body,
                       long *status, char api_version[16],
                       struct sbx_error *e) {
  CURL *c = en->curl;
  char url[2048];
  int n = snprintf(url, sizeof(url), "http://docker%s%s", prefix, req->path);
  if (n < 0 || (size_t)n >= sizeof(url))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "container engine request path is too long");
  _cleanup_free_ char *text = NULL;
  if (req->body) {
    text = json_dumps(req->body, JSON_COMPACT);
    if (!text)
      return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  struct curl_slist *headers = NULL, *h;
  if (text) {
    h = curl_slist_append(headers, "Content-Type: application/json");
    if (h)
      headers = h;
  }
  h = curl_slist_append(headers, "Expect:");
  if (h)
    headers = h;

  struct sink k = {.buf = body, .keep_tail = req->keep_tail};
  curl_easy_reset(c);
  en->errbuf[0] = '\0';
  bool ok =
      curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, en->socket) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_ERRORBUFFER, en->errbuf) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
      curl_easy_setopt(
          c, CURLOPT_TIMEOUT_MS,
          (long)(req->timeout_ms ? req->timeout_ms : DEFAULT_TIMEOUT_MS)) ==
          CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_WRITEDATA, &k) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_HEADERDATA, &k) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http") == CURLE_OK;
  if (ok && strcmp(req->method, "POST") == 0)
    ok =
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, text ? text : "") == CURLE_OK &&
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE,
                         (long)(text ? strlen(text) : 0)) == CURLE_OK;
  else if (ok && strcmp(req->method, "GET") != 0)
    ok = curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method) == CURLE_OK;
  if (!ok) {
    curl_slist_free_all(headers);
    return sbx_error_set(e, SBX_INTERNAL, EIO,
                         "cannot set up a request to the container engine");
  }
  log_debug("container engine: %s %s", req->method, url);
  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  (void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
  if (k.too_big)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "the container engine's reply to %s exceeds %zu "
                         "bytes",
                         req->method, body->max);
  if (rc != CURLE_OK)
    return transport_error(en, rc, e);
  if (curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status) != CURLE_OK)
    *status = 0;
  if (api_version)
    memcpy(api_version, k.api_version, sizeof(k.api_version));
  if (k.libpod[0] && strspn(k.libpod, "0123456789.") == strlen(k.libpod))
    memcpy(en->libpod, k.libpod, sizeof(en->libpod));
  return 0;
}

static bool status_ok(long status) {
  return (status >= 200 && status < 300) || status == 304;
}

int docker_engine_raw(struct docker_engine *en,
                      const struct docker_request *req, struct sbx_buf *body,
                      struct sbx_error *e) {
  char prefix[40];
  if (req->libpod && !en->libpod[0])
    return sbx_error_set(e, SBX_NOT_SUPPORTED, ENOTSUP,
                         "the container engine at %s is not Podman: it has "
                         "no libpod API",
                         en->host);
  if (req->libpod)
    (void)snprintf(prefix, sizeof(prefix), "/v%s/libpod", en->libpod);
  else
    (void)snprintf(prefix, sizeof(prefix), "/v%s", en->version);
  long status = 0;
  int r = engine_send(en, prefix, req, body, &status, NULL, e);
  if (r < 0)
    return r;
  if (!status_ok(status))
    return engine_status_error(en, req, status, body, e);
  return 0;
}

int docker_engine_json(struct docker_engine *en,
                       const struct docker_request *req, json_t **out,
                       struct sbx_error *e) {
  _cleanup_buf_ struct sbx_buf body = {0};
  sbx_buf_init(&body, req->max_bytes ? req->max_bytes : DEFAULT_MAX_BYTES);
  if (out)
    *out = NULL;
  int r = docker_engine_raw(en, req, &body, e);
  if (r < 0 || !out || body.len == 0)
    return r;
  json_error_t je;
  *out = json_loadb(body.data, body.len, JSON_DECODE_ANY, &je);
  if (!*out)
    return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                         "the container engine's reply to %s is not JSON: %s",
                         req->method, je.text);
  return 0;
}

/* Parses "MAJOR.MINOR" into a comparable number; -1 when malformed. */
static long parse_version(const char *s) {
  if (!s)
    return -1;
  char *end = NULL;
  errno = 0;
  long major = strtol(s, &end, 10);
  if (errno || end == s || *end != '.' || major < 0 || major > 1000)
    return -1;
  const char *m = end + 1;
  long minor = strtol(m, &end, 10);
  if (errno || end == m || *end || minor < 0 || minor > 1000)
    return -1;
  return major * 1000 + minor;
}

/* Chooses the API version to speak: the engine's (from the Api-Version
 * header of GET /_ping, as Docker's own client does, else from GET
 * /version, which Podman answers slowly), capped at DOCKER_API_MAX. */
static int negotiate(struct docker_engine *en, struct sbx_error *e) {
  _cleanup_buf_ struct sbx_buf body = {0};
  sbx_buf_init(&body, 1u << 20);
  struct docker_request req = {
      .method = "GET", .path = "/_ping", .timeout_ms = 10000};
  char header[16] = "";
  long status = 0;
  int r = engine_send(en, "", &req, &body, &status, header, e);
  if (r < 0)
    return r;
  if (!status_ok(status))
    return engine_status_error(en, &req, status, &body, e);
  char api[16];
  memcpy(api, header, sizeof(api));
  const char *min = NULL;
  _cleanup_json_ json_t *j = NULL;
  if (parse_version(api) < 0) {
    req.path = "/version";
    sbx_buf_reset(&body);
    r = engine_send(en, "", &req, &body, &status, NULL, e);
    if (r < 0)
      return r;
    if (!status_ok(status))
      return engine_status_error(en, &req, status, &body, e);
    json_error_t je;
    j = json_loadb(body.data, body.len, 0, &je);
    const char *v = json_string_value(json_object_get(j, "ApiVersion"));
    min = json_string_value(json_object_get(j, "MinAPIVersion"));
    if (!v || strlen(v) >= sizeof(api))
      return sbx_error_set(e, SBX_UNAVAILABLE, EPROTO,
                           "%s does not look like a Docker Engine API "
                           "endpoint (no API version in GET /_ping or GET "
                           "/version)",
                           en->host);
    memcpy(api, v, strlen(v) + 1);
  }
  long v = parse_version(api);
  if (v < parse_version(DOCKER_API_MIN))
    return sbx_error_set(e, SBX_NOT_SUPPORTED, ENOTSUP,
                         "the container engine at %s speaks API %s; sbx "
                         "needs %s or newer",
                         en->host, api, DOCKER_API_MIN);
  const char *use = api;
  if (v > parse_version(DOCKER_API_MAX)) {
    use = DOCKER_API_MAX;
    if (parse_version(min) > parse_version(DOCKER_API_MAX))
      use = min;
  }
  memcpy(en->version, use, strlen(use) + 1);
  log_debug("container engine at %s: API %s (speaking %s)", en->host, api,
            en->version);
  return 0;
}

int docker_engine_open(const char *host, struct docker_engine **out,
                       struct sbx_error *e) {
  *out = NULL;
  if (!host || !*host)
    host = getenv("DOCKER_HOST");
  if (!host || !*host)
    host = DOCKER_DEFAULT_HOST;
  if (strncmp(host, "unix://", 7) != 0)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, ENOTSUP,
                         "container engine endpoint \"%s\": only unix:// "
                         "sockets are supported (set DOCKER_HOST to "
                         "unix:///path/to/docker.sock)",
                         host);
  const char *path = host + 7;
  struct sockaddr_un sun;
  if (path[0] != '/' || strlen(path) >= sizeof(sun.sun_path))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "container engine endpoint \"%s\": expected "
                         "unix:///absolute/path (under %zu bytes)",
                         host, sizeof(sun.sun_path));
  (void)pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot initialise libcurl");
  struct docker_engine *en = calloc(1, sizeof(*en));
  if (!en)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  en->host = strdup(host);
  en->socket = strdup(path);
  en->curl = curl_easy_init();
  if (!en->host || !en->socket || !en->curl) {
    docker_engine_free(en);
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM,
                         "cannot set up a container engine client");
  }
  int r = negotiate(en, e);
  if (r < 0) {
    docker_engine_free(en);
    return r;
  }
  *out = en;
  return 0;
}
