#include "controller/server/httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/json.h"
#include "shared/log.h"

#define PEM_MAX ((size_t)1 << 20)

struct httpd {
  struct MHD_Daemon *d;
  httpd_handler_fn fn;
  void *arg;
  size_t max_body;
  uint16_t port;
  bool tls, verify_clients;
  volatile bool stopping;
  char *cert, *key, *ca; /* PEM text, kept while the daemon runs */
};

struct header {
  struct header *next;
  char *name, *value;
};

struct http_req {
  struct httpd *h;
  struct MHD_Connection *conn;
  const char *method, *path;
  struct sbx_buf body;
  bool too_big, replied;
  unsigned status;
  struct header *headers;
};

struct http_stream {
  struct httpd *h;
  int fd; /* the connection's socket, -1 when unknown */
  http_stream_fn fn;
  void *arg;
  void (*free_fn)(void *);
};

const char *http_req_method(const struct http_req *r) {
  return r->method;
}
unsigned http_req_status(const struct http_req *r) {
  return r->status;
}
const char *http_req_path(const struct http_req *r) {
  return r->path;
}

const char *http_req_query(const struct http_req *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_req_header(const struct http_req *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *http_req_cookie(const struct http_req *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, name);
}

const char *http_req_body(const struct http_req *r, size_t *len) {
  if (len)
    *len = r->body.len;
  return r->body.data ? r->body.data : "";
}

/* The socket of CONN, or -1. */
static int conn_fd(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? ci->connect_fd : -1;
}

/* Whether the peer of socket FD has closed its side: a poll for a hang-up
 * (TLS records or pipelined requests may be readable; those are no sign). */
static bool peer_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return fd >= 0 && poll(&p, 1, 0) > 0 &&
         (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool http_stream_over(const struct http_stream *st) {
  return st->h->stopping || peer_gone(st->fd);
}

int http_add_header(struct http_req *r, const char *name, const char *value) {
  struct header *x = calloc(1, sizeof(*x));
  if (!x)
    return -ENOMEM;
  x->name = strdup(name);
  x->value = strdup(value);
  if (!x->name || !x->value) {
    free(x->name);
    free(x->value);
    free(x);
    return -ENOMEM;
  }
  x->next = r->headers;
  r->headers = x;
  return 0;
}

static void headers_free(struct http_req *r) {
  while (r->headers) {
    struct header *x = r->headers;
    r->headers = x->next;
    free(x->name);
    free(x->value);
    free(x);
  }
}

/* Queues RESP (consumed) with the headers added so far. */
static int queue(struct http_req *r, unsigned status, const char *ctype,
                 struct MHD_Response *resp) {
  if (!resp)
    return -ENOMEM;
  if (r->replied) {
    MHD_destroy_response(resp);
    log_warn("http: a second reply to %s %s ignored", r->method, r->path);
    return -EALREADY;
  }
  r->replied = true;
  r->status = status;
  if (ctype)
    (void)MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
  (void)MHD_add_response_header(resp, "Cache-Control", "no-store");
  (void)MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  for (struct header *x = r->headers; x; x = x->next)
    (void)MHD_add_response_header(resp, x->name, x->value);
  enum MHD_Result ok = MHD_queue_response(r->conn, status, resp);
  MHD_destroy_response(resp);
  return ok == MHD_YES ? 0 : -EIO;
}

int http_reply(struct http_req *r, unsigned status, const char *ctype,
               const void *body, size_t len) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      len, (void *)(len ? body : ""), MHD_RESPMEM_MUST_COPY);
  return queue(r, status, ctype, resp);
}

int http_reply_json(struct http_req *r, unsigned status, json_t *body) {
  _cleanup_free_ char *text =
      body ? json_dumps(body, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
  json_decref(body);
  if (!text)
    return http_reply_error(r, 500, "internal", "out of memory");
  return http_reply(r, status, "application/json", text, strlen(text));
}

json_t *http_error_body(const char *code, const char *msg) {
  return json_pack("{s:{s:s, s:o}}", "error", "code", code, "message",
                   sbx_json_stringn_utf8(msg, strlen(msg)));
}

int http_reply_error(struct http_req *r, unsigned status, const char *code,
                     const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  json_t *b = http_error_body(code, msg);
  if (!b) {
    static const char oom[] =
        "{\"error\":{\"code\":\"internal\",\"message\":\"out of memory\"}}";
    return http_reply(r, 500, "application/json", oom, sizeof(oom) - 1);
  }
  _cleanup_free_ char *text = json_dumps(b, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(b);
  if (!text)
    return -ENOMEM;
  return http_reply(r, status, "application/json", text, strlen(text));
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  struct http_stream *s = cls;
  ssize_t n = s->fn(s->arg, buf, max, s);
  if (n > 0)
    return n;
  return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM
                : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls) {
  struct http_stream *s = cls;
  if (s->free_fn)
    s->free_fn(s->arg);
  free(s);
}

int http_reply_stream(struct http_req *r, unsigned status, const char *ctype,
                      http_stream_fn fn, void *arg, void (*free_fn)(void *)) {
  struct http_stream *s = calloc(1, sizeof(*s));
  if (!s) {
    if (free_fn)
      free_fn(arg);
    return -ENOMEM;
  }
  *s = (struct http_stream){.h = r->h,
                            .fd = conn_fd(r->conn),
                            .fn = fn,
                            .arg = arg,
                            .free_fn = free_fn};
  struct MHD_Response *resp = MHD_create_response_from_callback(
      MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, s, stream_free);
  if (!resp) {
    stream_free(s);
    return -ENOMEM;
  }
  return queue(r, status, ctype, resp);
}

/* With a client CA: whether the peer showed a certificate that CA signed. */
static bool client_verified(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (!ci || !ci->tls_session)
    return false;
  gnutls_session_t tls = (gnutls_session_t)ci->tls_session;
  unsigned status = 0;
  unsigned n = 0;
  if (!gnutls_certificate_get_peers(tls, &n) || n == 0)
    return false;
  return gnutls_certificate_verify_peers2(tls, &status) == 0 && status == 0;
}

/* The first call of a request: its state, and the early answers (a body
 * announced over the limit, a client without a certificate). */
static enum MHD_Result begin(struct httpd *h, struct MHD_Connection *conn,
                             const char *url, const char *method,
                             void **con_cls) {
  struct http_req *r = calloc(1, sizeof(*r));
  if (!r)
    return MHD_NO;
  r->h = h;
  r->conn = conn;
  r->method = method;
  r->path = url;
  sbx_buf_init(&r->body, h->max_body);
  *con_cls = r;
  if (h->verify_clients && !client_verified(conn)) {
    (void)http_reply_error(r, 401, "unauthenticated",
                           "this server requires a client certificate "
                           "signed by its client CA");
    return MHD_YES;
  }
  const char *cl =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
  if (cl) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(cl, &end, 10);
    if (errno || end == cl || *end || v > h->max_body) {
      r->too_big = true;
      (void)http_reply_error(r, 413, "too_large",
                             "the request body is over the limit of %zu "
                             "bytes",
                             h->max_body);
    }
  }
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  struct httpd *h = cls;
  struct http_req *r = *con_cls;
  if (!r)
    return begin(h, conn, url, method, con_cls);
  if (r->replied) { /* answered early: the body is discarded */
    *upload_size = 0;
    return MHD_YES;
  }
  if (*upload_size) {
    if (!r->too_big && sbx_buf_append(&r->body, upload, *upload_size) < 0)
      r->too_big = true;
    *upload_size = 0;
    return MHD_YES;
  }
  if (r->too_big) {
    (void)http_reply_error(r, 413, "too_large",
                           "the request body is over the limit of %zu bytes",
                           h->max_body);
    return MHD_YES;
  }
  if (sbx_buf_append(&r->body, "", 1) < 0) {
    (void)http_reply_error(r, 413, "too_large",
                           "the request body is over the limit of %zu bytes",
                           h->max_body);
    return MHD_YES;
  }
  r->body.len--;
  h->fn(h->arg, r);
  if (!r->replied)
    (void)http_reply_error(r, 500, "internal", "no reply was made");
  return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode t) {
  (void)cls, (void)conn, (void)t;
  struct http_req *r = *con_cls;
  if (!r)
    return;
  headers_free(r);
  sbx_buf_free(&r->body);
  free(r);
  *con_cls = NULL;
}

/* libmicrohttpd's messages (its own format strings). */
__attribute__((format(printf, 2, 0))) static void
on_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  char msg[512];
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  size_t n = strlen(msg);
  while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
    msg[--n] = '\0';
  log_debug("http: %s", msg);
}

static int read_pem(const char *path, const char *what, char **out,
                    struct sbx_error *e) {
  size_t len = 0;
  int r = sbx_read_file(path, PEM_MAX, out, &len);
  if (r < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, -r,
                         "cannot read the TLS %s \"%s\": %s", what, path,
                         strerror(-r));
  return 0;
}

/* The listening address: HOST (an IPv4 or IPv6 literal) and PORT. */
static int listen_addr(const char *host, uint16_t port,
                       struct sockaddr_storage *ss, bool *v6,
                       struct sbx_error *e) {
  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  *v6 = false;
  if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons(port);
    return 0;
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    *v6 = true;
    return 0;
  }
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                       "\"%s\" is not an IP address to listen on", host);
}

/* Whether PEM holds at least one certificate. */
static bool pem_has_cert(const char *pem) {
  gnutls_datum_t d = {(unsigned char *)pem, (unsigned)strlen(pem)};
  gnutls_x509_crt_t *crts = NULL;
  unsigned n = 0;
  if (gnutls_x509_crt_list_import2(&crts, &n, &d, GNUTLS_X509_FMT_PEM, 0) < 0)
    return false;
  for (unsigned i = 0; i < n; i++)
    gnutls_x509_crt_deinit(crts[i]);
  gnutls_free(crts);
  return n > 0;
}

/* The TLS files read into H, checked as GnuTLS will use them, so that a
 * wrong file is refused naming it (libmicrohttpd would only fail to
 * start, or start with a client CA that admits no one). */
static int check_tls(const struct httpd *h, const struct httpd_config *c,
                     struct sbx_error *e) {
  if (!pem_has_cert(h->cert))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the TLS certificate \"%s\" holds no PEM "
                         "certificate",
                         c->tls_cert);
  if (h->ca && !pem_has_cert(h->ca))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the TLS client CA \"%s\" holds no PEM "
                         "certificate",
                         c->tls_client_ca);
  gnutls_certificate_credentials_t cred = NULL;
  if (gnutls_certificate_allocate_credentials(&cred) < 0)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  gnutls_datum_t cert = {(unsigned char *)h->cert, (unsigned)strlen(h->cert)};
  gnutls_datum_t key = {(unsigned char *)h->key, (unsigned)strlen(h->key)};
  int g = gnutls_certificate_set_x509_key_mem2(cred, &cert, &key,
                                               GNUTLS_X509_FMT_PEM, NULL, 0);
  gnutls_certificate_free_credentials(cred);
  if (g == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the TLS key \"%s\" is not the key of the "
                         "certificate \"%s\"",
                         c->tls_key, c->tls_cert);
  if (g < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the TLS key \"%s\" cannot be used (a PEM key "
                         "without a passphrase is needed): %s",
                         c->tls_key, gnutls_strerror(g));
  return 0;
}

static int load_tls(struct httpd *h, const struct httpd_config *c,
                    struct sbx_error *e) {
  if (!c->tls_cert != !c->tls_key)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "TLS needs both a certificate and its key");
  if (c->tls_client_ca && !c->tls_cert)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a client CA needs TLS (a certificate and a key)");
  if (!c->tls_cert)
    return 0;
  int r = read_pem(c->tls_cert, "certificate", &h->cert, e);
  if (r == 0)
    r = read_pem(c->tls_key, "key", &h->key, e);
  if (r == 0 && c->tls_client_ca)
    r = read_pem(c->tls_client_ca, "client CA", &h->ca, e);
  if (r == 0)
    r = check_tls(h, c, e);
  h->tls = r == 0;
  h->verify_clients = r == 0 && c->tls_client_ca;
  return r;
}

static void httpd_free(struct httpd *h) {
  if (h->key)
    explicit_bzero(h->key, strlen(h->key));
  free(h->cert);
  free(h->key);
  free(h->ca);
  free(h);
}

int httpd_start(const struct httpd_config *c, httpd_handler_fn fn, void *arg,
                struct httpd **out, struct sbx_error *e) {
  *out = NULL;
  struct httpd *h = calloc(1, sizeof(*h));
  if (!h)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  h->fn = fn;
  h->arg = arg;
  h->max_body = c->max_body ? c->max_body : (size_t)16 << 20;
  struct sockaddr_storage ss;
  bool v6;
  int r = listen_addr(c->host ? c->host : "127.0.0.1", c->port, &ss, &v6, e);
  if (r == 0)
    r = load_tls(h, c, e);
  if (r < 0) {
    httpd_free(h);
    return r;
  }
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
                   MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                   MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0) |
                   (h->tls ? MHD_USE_TLS : 0);
  struct MHD_OptionItem tls_opts[] = {
      {h->tls ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, 0, h->cert},
      {h->tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, 0, h->key},
      {h->ca ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0, h->ca},
      {MHD_OPTION_END, 0, NULL},
  };
  /* The optional ones stop the array where they are absent: put the
   * present ones first. */
  size_t k = 0;
  for (size_t i = 0; i < 3; i++)
    if (tls_opts[i].option != MHD_OPTION_END)
      tls_opts[k++] = tls_opts[i];
  for (; k < 4; k++)
    tls_opts[k] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
  h->d = MHD_start_daemon(
      flags, c->port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER,
      on_mhd_log, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
      MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)(c->max_connections ? c->max_connections : 1024),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      (size_t)(c->max_header ? c->max_header : (size_t)32 << 10),
      MHD_OPTION_CONNECTION_TIMEOUT,
      (unsigned)(c->idle_timeout_s ? c->idle_timeout_s : 60),
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_ARRAY, tls_opts,
      MHD_OPTION_END);
  if (!h->d) {
    char host[64];
    (void)snprintf(host, sizeof(host), "%s", c->host ? c->host : "127.0.0.1");
    httpd_free(h);
    return sbx_error_set(e, SBX_UNAVAILABLE, EADDRINUSE,
                         "cannot listen on %s%s%s:%u (is it in use?)",
                         v6 ? "[" : "", host, v6 ? "]" : "", c->port);
  }
  const union MHD_DaemonInfo *di =
      MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  h->port = di ? di->port : c->port;
  *out = h;
  return 0;
}

uint16_t httpd_port(const struct httpd *h) {
  return h->port;
}
bool httpd_tls(const struct httpd *h) {
  return h->tls;
}

unsigned httpd_connections(const struct httpd *h) {
  const union MHD_DaemonInfo *di =
      MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
  return di ? di->num_connections : 0;
}

struct httpd *httpd_stop(struct httpd *h) {
  if (!h)
    return NULL;
  h->stopping = true;
  MHD_stop_daemon(h->d);
  httpd_free(h);
  return NULL;
}
