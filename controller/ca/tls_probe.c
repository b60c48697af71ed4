/* One TLS handshake with a remote sandboxd before sbx's client dials it:
 * nng's dialer retries a refused handshake silently until its timeout, so
 * a certificate the peer refuses (or a peer whose certificate sbx refuses)
 * would read as "did not answer" after seconds. This handshake, with the
 * same files and server name, says which side refused what, at once. */
#include "controller/ca/ca.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shared/clock.h"

#define PROBE_HOST_MAX 256

/* HOST and PORT of URL "tls+tcp://HOST:PORT" ("[V6]:PORT" too). */
static int split_url(const char *url, char *host, char *port) {
  const char *p = strncmp(url, "tls+tcp://", 10) == 0 ? url + 10 : NULL;
  if (!p)
    return -EINVAL;
  const char *colon = *p == '[' ? strstr(p, "]:") : strrchr(p, ':');
  if (!colon)
    return -EINVAL;
  const char *h = *p == '[' ? p + 1 : p;
  size_t hl = (size_t)(colon - h);
  const char *pt = *p == '[' ? colon + 2 : colon + 1;
  if (hl == 0 || hl >= PROBE_HOST_MAX || !*pt || strlen(pt) > 5)
    return -EINVAL;
  memcpy(host, h, hl);
  host[hl] = '\0';
  (void)snprintf(port, 6, "%s", pt);
  return 0;
}

/* A TCP connection to HOST:PORT by DEADLINE (sbx_now_ms), non-blocking. */
static int dial(const char *host, const char *port, uint64_t deadline) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  if (getaddrinfo(host, port, &hints, &ai) != 0 || !ai)
    return -EHOSTUNREACH;
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int r = fd < 0 ? -errno : 0;
  if (r == 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 &&
      errno != EINPROGRESS)
    r = -errno;
  freeaddrinfo(ai);
  if (r == 0) {
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    uint64_t now = sbx_now_ms();
    int left = now < deadline ? (int)(deadline - now) : 0;
    int err = 0;
    socklen_t el = sizeof(err);
    if (poll(&pfd, 1, left) != 1)
      r = -ETIMEDOUT;
    else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err)
      r = -(err ? err : errno);
  }
  if (r < 0 && fd >= 0)
    (void)close(fd);
  return r < 0 ? r : fd;
}

/* The reason of the first queued OpenSSL error, or the verify result. */
static const char *why(SSL *ssl, char *buf, size_t n) {
  long v = SSL_get_verify_result(ssl);
  if (v != X509_V_OK)
    return X509_verify_cert_error_string(v);
  unsigned long err = ERR_peek_error();
  if (!err)
    return "the connection was closed";
  ERR_error_string_n(err, buf, n);
  const char *r = ERR_reason_error_string(err);
  return r ? r : buf;
}

/* Runs the handshake of SSL on non-blocking FD by DEADLINE. 0, else -1. */
static int handshake(SSL *ssl, int fd, uint64_t deadline) {
  for (;;) {
    int k = SSL_connect(ssl);
    if (k == 1)
      return 0;
    int err = SSL_get_error(ssl, k);
    short ev = err == SSL_ERROR_WANT_READ    ? POLLIN
               : err == SSL_ERROR_WANT_WRITE ? POLLOUT
                                             : 0;
    uint64_t now = sbx_now_ms();
    struct pollfd pfd = {.fd = fd, .events = ev};
    if (!ev || now >= deadline || poll(&pfd, 1, (int)(deadline - now)) != 1)
      return -1;
  }
}

/* A TLS 1.3 server refuses a client certificate after the client's side
 * of the handshake is done: its alert comes with the first read, which
 * here waits for at most a short while (sandboxd sends nothing first). */
static int first_read(SSL *ssl, int fd, uint64_t deadline) {
  if (SSL_version(ssl) < TLS1_3_VERSION)
    return 0;
  uint64_t until = sbx_now_ms() + 200;
  if (until > deadline)
    until = deadline;
  for (;;) {
    char c;
    int k = SSL_read(ssl, &c, 1);
    if (k > 0)
      return 0;
    int err = SSL_get_error(ssl, k);
    if (err != SSL_ERROR_WANT_READ)
      return -1;
    uint64_t now = sbx_now_ms();
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (now >= until || poll(&pfd, 1, (int)(until - now)) != 1)
      return 0; /* nothing: accepted */
  }
}

static SSL_CTX *context(const char *ca_pem, const char *cert, const char *key) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx)
    return NULL;
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  if (SSL_CTX_load_verify_locations(ctx, ca_pem, NULL) != 1 ||
      (cert && SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) ||
      (key && SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)) {
    SSL_CTX_free(ctx);
    return NULL;
  }
  return ctx;
}

int ca_tls_probe(const char *url, const char *server_name, const char *ca_pem,
                 const char *cert, const char *key, unsigned timeout_ms,
                 struct sbx_error *e) {
  char host[PROBE_HOST_MAX], port[6], buf[256];
  if (split_url(url, host, port) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a tls+tcp://HOST:PORT address", url);
  uint64_t deadline = sbx_now_ms() + (timeout_ms ? timeout_ms : 5000);
  int fd = dial(host, port, deadline);
  if (fd < 0)
    return sbx_error_set(e, SBX_UNAVAILABLE, -fd,
                         "sandboxd at \"%s\" cannot be reached: %s", url,
                         strerror(-fd));
  ERR_clear_error();
  SSL_CTX *ctx = context(ca_pem, cert, key);
  SSL *ssl = ctx ? SSL_new(ctx) : NULL;
  int r = 0;
  if (!ssl) {
    r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                      "cannot use the TLS files \"%s\", \"%s\": %s", ca_pem,
                      cert ? cert : "-",
                      ERR_reason_error_string(ERR_peek_error())
                          ? ERR_reason_error_string(ERR_peek_error())
                          : "unreadable");
    goto out;
  }
  struct in6_addr a6;
  struct in_addr a4;
  bool ip = inet_pton(AF_INET, server_name, &a4) == 1 ||
            inet_pton(AF_INET6, server_name, &a6) == 1;
  X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
  if (!SSL_set_fd(ssl, fd) ||
      (ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, server_name) != 1
          : SSL_set1_host(ssl, server_name) != 1 ||
                SSL_set_tlsext_host_name(ssl, server_name) != 1)) {
    r = sbx_error_set(e, SBX_INTERNAL, EIO, "cannot set up TLS (libssl)");
    goto out;
  }
  bool shook = handshake(ssl, fd, deadline) == 0;
  if (shook && first_read(ssl, fd, deadline) == 0)
    goto out;
  long v = SSL_get_verify_result(ssl);
  if (!shook && v != X509_V_OK)
    r = sbx_error_set(e, SBX_UNAVAILABLE, EKEYREJECTED,
                      "sbx refuses the certificate of sandboxd at \"%s\" as "
                      "\"%s\": %s",
                      url, server_name, X509_verify_cert_error_string(v));
  else if (sbx_now_ms() >= deadline)
    r = sbx_error_set(e, SBX_UNAVAILABLE, ETIMEDOUT,
                      "sandboxd at \"%s\" did not complete a TLS handshake "
                      "in %u ms",
                      url, timeout_ms);
  else
    r = sbx_error_set(e, SBX_UNAVAILABLE, EKEYREJECTED,
                      "sandboxd at \"%s\" refused the TLS handshake (sbx's "
                      "client certificate \"%s\"): %s",
                      url, cert ? cert : "-", why(ssl, buf, sizeof(buf)));
out:
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  (void)close(fd);
  ERR_clear_error();
  return r;
}
