/* sbx serve, set up and torn down: the store, the workers, the HTTP
 * server, and the wait for a signal to stop. */
#include "controller/server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/server/server_internal.h"
#include "shared/log.h"
#include "shared/rand.h"

/* Whether HOST is a loopback address, where plain HTTP stays on the
 * machine. */
static bool loopback(const char *host) {
  struct in_addr a4;
  struct in6_addr a6;
  if (inet_pton(AF_INET, host, &a4) == 1)
    return (ntohl(a4.s_addr) >> 24) == 127;
  return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

static int check_config(const struct server_config *c, struct sbx_error *e) {
  const char *host = c->host ? c->host : "127.0.0.1";
  if (!c->tls_cert && !c->insecure && !loopback(host))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "plain HTTP on %s would send tokens in the clear: "
                         "give --tls-cert and --tls-key, or --insecure",
                         host);
  if (c->insecure && c->tls_cert)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "--insecure allows plain HTTP, but with --tls-cert "
                         "the server speaks HTTPS: give one of them");
  if (c->workers > SERVER_MAX_WORKERS)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "at most %d workers",
                         SERVER_MAX_WORKERS);
  if (!c->db || !c->state_dir)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the server needs a database and a state "
                         "directory");
  return 0;
}

static int server_init(struct server *srv, const struct server_config *c,
                       struct sbx_error *e) {
  srv->cfg = c;
  srv->lease_ms = c->lease_ms > 0 ? c->lease_ms : SERVER_DEFAULT_LEASE_MS;
  srv->started_ms = store_now_ms();
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0 ||
      pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
      pthread_cond_init(&srv->events_cv, &ca) != 0 ||
      pthread_cond_init(&srv->work_cv, &ca) != 0 ||
      pthread_mutex_init(&srv->mu, NULL) != 0 ||
      pthread_mutex_init(&srv->att_mu, NULL) != 0)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM,
                         "cannot make the server's locks");
  (void)pthread_condattr_destroy(&ca);
  char host[256] = "";
  (void)gethostname(host, sizeof(host) - 1);
  char rnd[9];
  if (sbx_random_hex(rnd, 4) < 0)
    return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot make a random id");
  (void)snprintf(srv->owner, sizeof(srv->owner), "%.40s:%ld:%s", host,
                 (long)getpid(), rnd);
  return store_open(c->db, &srv->store, e);
}

static void server_fini(struct server *srv) {
  srv->http = httpd_stop(srv->http);
  attached_free_all(srv);
  executor_stop(srv);
  srv->store = store_close(srv->store);
  (void)pthread_cond_destroy(&srv->events_cv);
  (void)pthread_cond_destroy(&srv->work_cv);
  (void)pthread_mutex_destroy(&srv->mu);
  (void)pthread_mutex_destroy(&srv->att_mu);
}

static void announce(const struct server *srv) {
  const char *host = srv->cfg->host ? srv->cfg->host : "127.0.0.1";
  bool v6 = strchr(host, ':') != NULL;
  char url[128];
  (void)snprintf(url, sizeof(url), "%s://%s%s%s:%u",
                 httpd_tls(srv->http) ? "https" : "http", v6 ? "[" : "", host,
                 v6 ? "]" : "", httpd_port(srv->http));
  log_info("listening on %s (store: %s, %u workers)", url,
           store_kind(srv->store), srv->nworkers);
  if (srv->cfg->ready_fd >= 0) {
    char line[160];
    int n = snprintf(line, sizeof(line), "sbx serve: listening on %s\n", url);
    if (n > 0 && write(srv->cfg->ready_fd, line, (size_t)n) < 0)
      log_debug("announcing the address: %s", strerror(errno));
  }
}

int server_start(const struct server_config *c, bool workers,
                 struct server **out, struct sbx_error *e) {
  *out = NULL;
  int r = check_config(c, e);
  if (r < 0)
    return r;
  struct server *srv = calloc(1, sizeof(*srv));
  if (!srv)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  r = server_init(srv, c, e);
  if (r == 0 && workers)
    r = executor_start(srv, e);
  struct httpd_config hc = {
      .host = c->host,
      .port = c->port,
      .tls_cert = c->tls_cert,
      .tls_key = c->tls_key,
      .tls_client_ca = c->tls_client_ca,
      .max_body = c->max_body,
  };
  if (r == 0)
    r = httpd_start(&hc, api_dispatch, srv, &srv->http, e);
  if (r < 0) {
    (void)server_stop(srv);
    return r;
  }
  *out = srv;
  return 0;
}

struct server *server_stop(struct server *srv) {
  if (!srv)
    return NULL;
  server_fini(srv);
  free(srv);
  return NULL;
}

int server_serve(const struct server_config *c, const sigset_t *stop,
                 struct sbx_error *e) {
  struct server *srv = NULL;
  int r = server_start(c, true, &srv, e);
  if (r < 0)
    return r;
  announce(srv);
  int sig;
  while ((sig = sigwaitinfo(stop, NULL)) < 0 && errno == EINTR)
    ;
  log_info("signal %d: stopping; unfinished runs go on at the next start", sig);
  (void)server_stop(srv);
  return 0;
}
