/* nginx as a WebDAV-style object store on loopback for snapshot tests:
 * PUT/DELETE/GET/HEAD under /snap/, each request checked for
 * "Authorization: Bearer <token>" (401 otherwise). Everything (config,
 * objects, temp bodies, pid, logs) lives in one temp dir, removed at stop. */
#ifndef SBX_TEST_WEBDAV_H
#define SBX_TEST_WEBDAV_H

#include <sys/types.h>

struct test_webdav {
  pid_t pid;
  int port;
  char dir[64];  /* temp dir */
  char root[96]; /* dir/root: objects are root/snap/... */
  char url[96];  /* http://127.0.0.1:PORT/snap/ */
};

/* Skips the calling test when nginx is not installed; asserts that it came
 * up. */
void test_webdav_start(struct test_webdav *w, const char *token);
/* Stops nginx (SIGTERM, then SIGKILL after 5 s) and removes the dir. */
void test_webdav_stop(struct test_webdav *w);

#endif
