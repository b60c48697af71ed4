#include "tests/support/webdav.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *nginx_path(void) {
  static const char *const candidates[] = {
      "/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"};
  for (size_t i = 0; i < sizeof(candidates) / sizeof(*candidates); i++)
    if (access(candidates[i], X_OK) == 0)
      return candidates[i];
  return NULL;
}

/* A loopback port that was free a moment ago. */
static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(s, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
  close(s);
  return ntohs(a.sin_port);
}

static bool port_open(int port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    return false;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  bool ok = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
  close(s);
  return ok;
}

static void dump_log(struct test_webdav *w) {
  char p[128], line[512];
  (void)snprintf(p, sizeof(p), "%s/error.log", w->dir);
  FILE *f = fopen(p, "r");
  if (!f)
    return;
  while (fgets(line, sizeof(line), f))
    cr_log_error("nginx: %s", line);
  fclose(f);
}

void test_webdav_start(struct test_webdav *w, const char *token) {
  memset(w, 0, sizeof(*w));
  const char *nginx = nginx_path();
  if (!nginx)
    cr_skip_test("nginx is not installed (scripts/install-deps.sh)");
  (void)snprintf(w->dir, sizeof(w->dir), "/tmp/sbx-dav-XXXXXX");
  cr_assert_not_null(mkdtemp(w->dir));
  (void)snprintf(w->root, sizeof(w->root), "%s/root", w->dir);
  cr_assert_eq(mkdir(w->root, 0755), 0);
  char tmp[128], conf[128];
  (void)snprintf(tmp, sizeof(tmp), "%s/tmp", w->dir);
  cr_assert_eq(mkdir(tmp, 0700), 0);
  w->port = free_port();
  (void)snprintf(w->url, sizeof(w->url), "http://127.0.0.1:%d/snap/", w->port);

  (void)snprintf(conf, sizeof(conf), "%s/nginx.conf", w->dir);
  FILE *f = fopen(conf, "w");
  cr_assert_not_null(f);
  /* Workers run as root when we are root: they write into the temp dir. */
  if (geteuid() == 0)
    fprintf(f, "user root;\n");
  fprintf(f,
          "worker_processes 1;\n"
          "pid %1$s/nginx.pid;\n"
          "error_log %1$s/error.log;\n"
          "events { worker_connections 64; }\n"
          "http {\n"
          "  access_log off;\n"
          "  client_body_temp_path %1$s/tmp;\n"
          "  proxy_temp_path %1$s/tmp;\n"
          "  fastcgi_temp_path %1$s/tmp;\n"
          "  uwsgi_temp_path %1$s/tmp;\n"
          "  scgi_temp_path %1$s/tmp;\n"
          "  client_max_body_size 0;\n"
          "  server {\n"
          "    listen 127.0.0.1:%2$d;\n"
          "    root %3$s;\n"
          "    location /snap/ {\n"
          "      if ($http_authorization != \"Bearer %4$s\") { return 401; }\n"
          "      dav_methods PUT DELETE;\n"
          "      create_full_put_path on;\n"
          "    }\n"
          "  }\n"
          "}\n",
          w->dir, w->port, w->root, token);
  cr_assert_eq(fclose(f), 0);

  char errlog[128];
  (void)snprintf(errlog, sizeof(errlog), "%s/error.log", w->dir);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    /* nginx goes when the test process goes, even after a crash. */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
      _exit(127);
    execl(nginx, "nginx", "-p", w->dir, "-e", errlog, "-c", conf, "-g",
          "daemon off;", (char *)NULL);
    _exit(127);
  }
  w->pid = pid;
  for (int i = 0; i < 500; i++) {
    if (port_open(w->port))
      return;
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      w->pid = 0;
      dump_log(w);
      cr_assert_fail("nginx exited (status %d)", st);
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  dump_log(w);
  cr_assert_fail("nginx did not listen on port %d", w->port);
}

void test_webdav_stop(struct test_webdav *w) {
  if (w->pid > 0) {
    (void)kill(w->pid, SIGTERM);
    int st;
    for (int i = 0; i < 500; i++) {
      if (waitpid(w->pid, &st, WNOHANG) == w->pid)
        break;
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
      if (i == 499) {
        (void)kill(w->pid, SIGKILL);
        (void)waitpid(w->pid, &st, 0);
      }
    }
    w->pid = 0;
  }
  if (w->dir[0]) {
    char cmd[128];
    (void)snprintf(cmd, sizeof(cmd), "rm -rf %s", w->dir);
    (void)!system(cmd);
  }
}
