/* The Kubernetes REST API over libcurl: https only, the server verified
 * against the kubeconfig's CA (or the system's), a bearer token or a
 * client certificate, every reply bounded, and a Status object turned into
 * an error a person can read. One easy handle per client, so the
 * connection is kept between calls. */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/kubernetes/kube_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/log.h"

#define MAX_REPLY (8u << 20)
#define MAX_EVENT (4u << 20)
#define CALL_TIMEOUT_MS 30000L
#define MESSAGE_MAX 300

struct kube_api {
  CURL *curl;
  struct kube_config cfg;
  char *auth; /* "Authorization: Bearer ..." or NULL */
  char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void) {
  curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct kube_api *kube_api_free(struct kube_api *a) {
  if (!a)
    return NULL;
  if (a->curl)
    curl_easy_cleanup(a->curl);
  kube_config_clear(&a->cfg);
  if (a->auth)
    explicit_bzero(a->auth, strlen(a->auth));
  free(a->auth);
  free(a);
  return NULL;
}

const struct kube_config *kube_api_config(const struct kube_api *a) {
  return &a->cfg;
}

static char *dup_n(const char *s, size_t n) {
  if (!s)
    return NULL;
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

int kube_api_open(const struct kube_config *c, struct kube_api **out,
                  struct sbx_error *e) {
  *out = NULL;
  (void)pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot initialise libcurl");
  struct kube_api *a = calloc(1, sizeof(*a));
  if (!a)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  a->cfg.server = c->server ? strdup(c->server) : NULL;
  a->cfg.ca_pem = dup_n(c->ca_pem, c->ca_len);
  a->cfg.ca_len = c->ca_len;
  a->cfg.cert_pem = dup_n(c->cert_pem, c->cert_len);
  a->cfg.cert_len = c->cert_len;
  a->cfg.key_pem = dup_n(c->key_pem, c->key_len);
  a->cfg.key_len = c->key_len;
  a->cfg.token = c->token ? strdup(c->token) : NULL;
  a->cfg.ns = c->ns ? strdup(c->ns) : NULL;
  a->cfg.path = c->path ? strdup(c->path) : NULL;
  a->cfg.context = c->context ? strdup(c->context) : NULL;
  a->curl = curl_easy_init();
  bool ok = a->curl && a->cfg.server && (!c->ca_pem || a->cfg.ca_pem) &&
            (!c->cert_pem || a->cfg.cert_pem) &&
            (!c->key_pem || a->cfg.key_pem) && (!c->token || a->cfg.token) &&
            (!c->ns || a->cfg.ns) && (!c->path || a->cfg.path) &&
            (!c->context || a->cfg.context);
  if (ok && c->token &&
      asprintf(&a->auth, "Authorization: Bearer %s", c->token) < 0) {
    a->auth = NULL;
    ok = false;
  }
  if (!ok) {
    kube_api_free(a);
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  }
  *out = a;
  return 0;
}

char *kube_escape(const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = strlen(s);
  char *out = malloc(3 * n + 1), *o = out;
  for (const unsigned char *p = (const unsigned char *)s; out && *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
        (*p >= '0' && *p <= '9') || strchr("-._~", *p)) {
      *o++ = (char)*p;
    } else {
      *o++ = '%';
      *o++ = hex[*p >> 4];
      *o++ = hex[*p & 15];
    }
  }
  if (out)
    *o = '\0';
  return out;
}

/* Where a reply goes: buffered whole, or (a watch with a 2xx status) cut
 * into lines, each an event for FN. */
struct sink {
  struct kube_api *a;
  struct sbx_buf buf;
  bool too_big;
  kube_event_fn fn; /* NULL: buffer */
  void *arg;
  int fn_rc; /* FN's answer that stopped the transfer */
  struct sbx_error *e;
};

static int one_line(struct sink *k, const char *line, size_t n) {
  while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
    n--;
  if (n == 0)
    return 0;
  json_error_t je;
  _cleanup_json_ json_t *ev = json_loadb(line, n, 0, &je);
  if (!json_is_object(ev))
    return sbx_error_set(k->e, SBX_UNAVAILABLE, EPROTO,
                         "kubernetes: a watch event is not a JSON object: %s",
                         je.text);
  const char *type = json_string_value(json_object_get(ev, "type"));
  json_t *obj = json_object_get(ev, "object");
  if (type && strcmp(type, "ERROR") == 0) {
    json_int_t code = json_integer_value(json_object_get(obj, "code"));
    const char *msg = json_string_value(json_object_get(obj, "message"));
    return sbx_error_set(k->e, SBX_UNAVAILABLE, code == 410 ? ESTALE : EIO,
                         "kubernetes: watch: %.300s (code %lld)",
                         msg ? msg : "error", (long long)code);
  }
  return k->fn(k->arg, ev, k->e);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
  struct sink *k = arg;
  size_t n = size * nmemb;
  long status = 0;
  (void)curl_easy_getinfo(k->a->curl, CURLINFO_RESPONSE_CODE, &status);
  bool stream = k->fn && status >= 200 && status < 300;
  if (k->buf.len + n > k->buf.max) {
    k->too_big = true;
    return 0;
  }
  if (sbx_buf_append(&k->buf, data, n) < 0)
    return 0;
  while (stream) {
    char *nl = memchr(k->buf.data, '\n', k->buf.len);
    if (!nl)
      break;
    size_t len = (size_t)(nl - k->buf.data);
    int r = one_line(k, k->buf.data, len);
    sbx_buf_consume(&k->buf, len + 1);
    if (r != 0) {
      k->fn_rc = r;
      return 0;
    }
  }
  return n;
}

/* The message of a reply that is not 2xx: its Status object's, else its
 * text, cleaned for a person. */
static int status_error(long status, const char *method, const char *path,
                        const struct sbx_buf *body, struct sbx_error *e) {
  json_error_t je;
  _cleanup_json_ json_t *j =
      body->len ? json_loadb(body->data, body->len, 0, &je) : NULL;
  const char *m = json_string_value(json_object_get(j, "message"));
  const char *reason = json_string_value(json_object_get(j, "reason"));
  char msg[MESSAGE_MAX + 1] = "";
  size_t o = 0;
  const char *src = m ? m : body->len ? body->data : "no message";
  for (; *src && o < MESSAGE_MAX; src++)
    msg[o++] = (unsigned char)*src < 0x20 ? ' ' : *src;
  msg[o] = '\0';
  char where[128];
  (void)snprintf(where, sizeof(where), "%s", path);
  where[strcspn(where, "?")] = '\0';
  int err = status == 404                    ? ENOENT
            : status == 401 || status == 403 ? EACCES
            : status == 409 && reason && !strcmp(reason, "AlreadyExists")
                ? EEXIST
            : status == 409                  ? EBUSY
            : status == 410                  ? ESTALE
            : status == 400 || status == 422 ? EINVAL
                                             : EIO;
  enum sbx_code code = status == 401   ? SBX_UNAUTHENTICATED
                       : status == 403 ? SBX_PERMISSION_DENIED
                       : status == 409 ? SBX_CONFLICT
                       : status >= 500 ? SBX_UNAVAILABLE
                                       : SBX_OK;
  return sbx_error_set(e, code, err, "kubernetes: %s (HTTP %ld from %s %s)",
                       msg, status, method, where);
}

static int transport_error(struct kube_api *a, CURLcode rc,
                           struct sbx_error *e) {
  const char *detail = a->errbuf[0] ? a->errbuf : curl_easy_strerror(rc);
  if (rc == CURLE_OPERATION_TIMEDOUT)
    return sbx_error_set(e, SBX_TIMED_OUT, ETIMEDOUT,
                         "kubernetes: %s did not answer in time: %s",
                         a->cfg.server, detail);
  if (rc == CURLE_OUT_OF_MEMORY)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  return sbx_error_set(
      e, SBX_UNAVAILABLE, rc == CURLE_COULDNT_CONNECT ? ECONNREFUSED : EIO,
      "kubernetes: cannot reach the API server %s: %s", a->cfg.server, detail);
}

/* The TLS and authentication options of every request. */
static bool set_tls(struct kube_api *a) {
  CURL *c = a->curl;
  bool ok = curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https") == CURLE_OK &&
            curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK &&
            curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK;
  if (ok && a->cfg.ca_pem) {
    struct curl_blob b = {a->cfg.ca_pem, a->cfg.ca_len, CURL_BLOB_COPY};
    ok = curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &b) == CURLE_OK;
  }
  if (ok && a->cfg.cert_pem) {
    struct curl_blob cb = {a->cfg.cert_pem, a->cfg.cert_len, CURL_BLOB_COPY};
    struct curl_blob kb = {a->cfg.key_pem, a->cfg.key_len, CURL_BLOB_COPY};
    ok = curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM") == CURLE_OK &&
         curl_easy_setopt(c, CURLOPT_SSLCERT_BLOB, &cb) == CURLE_OK &&
         curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM") == CURLE_OK &&
         curl_easy_setopt(c, CURLOPT_SSLKEY_BLOB, &kb) == CURLE_OK;
  }
  return ok;
}

/* Sends one request; K receives the reply. *STATUS its HTTP status. */
static int send_request(struct kube_api *a, const char *method,
                        const char *path, const char *body, const char *ctype,
                        long timeout_ms, struct sink *k, long *status,
                        struct sbx_error *e) {
  CURL *c = a->curl;
  char url[4096];
  int n = snprintf(url, sizeof(url), "%s%s", a->cfg.server, path);
  if (n < 0 || (size_t)n >= sizeof(url))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "kubernetes: request path too long");
  struct curl_slist *h = NULL, *t;
  char ct[96];
  (void)snprintf(ct, sizeof(ct), "Content-Type: %s",
                 ctype ? ctype : "application/json");
  const char *lines[] = {"Accept: application/json", body ? ct : NULL, a->auth};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(lines); i++)
    if (lines[i] && (t = curl_slist_append(h, lines[i])))
      h = t;
  curl_easy_reset(c);
  a->errbuf[0] = '\0';
  bool ok =
      set_tls(a) && curl_easy_setopt(c, CURLOPT_URL, url) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_ERRORBUFFER, a->errbuf) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 10000L) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_WRITEDATA, k) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_HTTPHEADER, h) == CURLE_OK &&
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method) == CURLE_OK;
  if (ok && body)
    ok = curl_easy_setopt(c, CURLOPT_POSTFIELDS, body) == CURLE_OK &&
         curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body)) ==
             CURLE_OK;
  if (!ok) {
    curl_slist_free_all(h);
    return sbx_error_set(e, SBX_INTERNAL, EIO,
                         "kubernetes: cannot set up a request");
  }
  log_debug("kubernetes: %s %s", method, path);
  CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(h);
  (void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
  if (k->fn_rc)
    return k->fn_rc;
  if (k->too_big)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "kubernetes: the reply to %s %s exceeds %zu bytes",
                         method, path, k->buf.max);
  if (rc != CURLE_OK)
    return transport_error(a, rc, e);
  if (curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status) != CURLE_OK)
    *status = 0;
  return 0;
}

int kube_call(struct kube_api *a, const char *method, const char *path,
              json_t *body, const char *content_type, json_t **out,
              struct sbx_error *e) {
  if (out)
    *out = NULL;
  _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
  if (body && !text)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  struct sink k = {.a = a, .e = e};
  sbx_buf_init(&k.buf, MAX_REPLY);
  long status = 0;
  int r = send_request(a, method, path, text, content_type, CALL_TIMEOUT_MS, &k,
                       &status, e);
  if (r == 0 && (status < 200 || status >= 300))
    r = status_error(status, method, path, &k.buf, e);
  if (r == 0 && out && k.buf.len) {
    json_error_t je;
    *out = json_loadb(k.buf.data, k.buf.len, 0, &je);
    if (!*out)
      r = sbx_error_set(e, SBX_UNAVAILABLE, EPROTO,
                        "kubernetes: the reply to %s %s is not JSON: %s",
                        method, path, je.text);
  }
  sbx_buf_free(&k.buf);
  return r;
}

int kube_watch(struct kube_api *a, const char *path, unsigned timeout_ms,
               kube_event_fn fn, void *arg, struct sbx_error *e) {
  struct sink k = {.a = a, .e = e, .fn = fn, .arg = arg};
  sbx_buf_init(&k.buf, MAX_EVENT);
  long status = 0;
  int r = send_request(a, "GET", path, NULL, NULL,
                       timeout_ms ? (long)timeout_ms : 1L, &k, &status, e);
  if (r == 0 && (status < 200 || status >= 300))
    r = status_error(status, "GET", path, &k.buf, e);
  sbx_buf_free(&k.buf);
  return r;
}
