#include "tests/support/harness.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void harness_init(struct harness *h) {
  memset(h, 0, sizeof(*h));
  (void)snprintf(h->dir, sizeof(h->dir), "/tmp/sbx-test-XXXXXX");
  cr_assert_not_null(mkdtemp(h->dir));
  (void)snprintf(h->root, sizeof(h->root), "%s/ws", h->dir);
  cr_assert_eq(mkdir(h->root, 0755), 0);
  h->d.root = strdup(h->root);
  h->d.root_fd = open(h->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  cr_assert_geq(h->d.root_fd, 0);
  sandboxd_limits_default(&h->d.limits);
  h->d.uid = getuid();
  h->d.gid = getgid();
  h->d.is_root = h->d.uid == 0;
  h->d.gate_fd = -1;
  h->d.reaper_fd = -1;
}

void harness_fini(struct harness *h) {
  if (h->d.root_fd >= 0)
    close(h->d.root_fd);
  for (size_t i = 0; i < h->d.ngrants; i++)
    close(h->d.grant_fds[i]);
  free(h->d.root);
  char cmd[256];
  (void)snprintf(cmd, sizeof(cmd), "chmod -R u+rwx %s 2>/dev/null; rm -rf %s",
                 h->dir, h->dir);
  (void)!system(cmd);
}

static void harness_complete(struct rpc_call *c, int r) {
  struct harness_call *hc = c->server_data;
  pthread_mutex_lock(&hc->mu);
  hc->rc = r;
  hc->done = true;
  pthread_cond_signal(&hc->cv);
  pthread_mutex_unlock(&hc->mu);
}

struct harness_call *harness_call(struct harness *h, Sbx__V1__Request *req,
                                  int (*handler)(struct rpc_call *)) {
  struct harness_call *hc = calloc(1, sizeof(*hc));
  cr_assert_not_null(hc);
  pthread_mutex_init(&hc->mu, NULL);
  pthread_cond_init(&hc->cv, NULL);
  sbx__v1__response__init(&hc->resp);
  hc->call.d = &h->d;
  hc->call.req = req;
  hc->call.resp = &hc->resp;
  hc->call.complete = harness_complete;
  hc->call.server_data = hc;
  int r = handler(&hc->call);
  if (r == RPC_PENDING) {
    pthread_mutex_lock(&hc->mu);
    while (!hc->done)
      pthread_cond_wait(&hc->cv, &hc->mu);
    pthread_mutex_unlock(&hc->mu);
  } else {
    hc->rc = r;
  }
  return hc;
}

void harness_call_free(struct harness_call *hc) {
  if (!hc)
    return;
  sbx_arena_reset(&hc->call.arena);
  pthread_mutex_destroy(&hc->mu);
  pthread_cond_destroy(&hc->cv);
  free(hc);
}

void harness_write(struct harness *h, const char *rel, const char *content) {
  char path[4200];
  (void)snprintf(path, sizeof(path), "%s/%s", h->root, rel);
  for (char *p = path + strlen(h->root) + 1; (p = strchr(p, '/')); p++) {
    *p = '\0';
    (void)mkdir(path, 0755);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "cannot write %s", path);
  fputs(content, f);
  fclose(f);
}

char *harness_read(struct harness *h, const char *rel) {
  char path[4200];
  (void)snprintf(path, sizeof(path), "%s/%s", h->root, rel);
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  char *buf = NULL;
  size_t cap = 0;
  ssize_t n = getdelim(&buf, &cap, '\0', f);
  fclose(f);
  if (n < 0) {
    free(buf);
    return strdup("");
  }
  return buf;
}
