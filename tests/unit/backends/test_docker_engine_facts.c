/* The docker backend's engine facts: a Podman socket of root's is a
 * rootful engine's, told without GET /info; any other is asked. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "backends/docker/docker_internal.h"

/* A listening unix socket at DIR/NAME, its URL in URL; the fd. */
static int make_socket(const char *dir, const char *name, char *url, size_t n) {
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  (void)snprintf(a.sun_path, sizeof(a.sun_path), "%s/%s", dir, name);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  (void)snprintf(url, n, "unix://%s", a.sun_path);
  return fd;
}

Test(docker_engine_facts, only_a_socket_of_roots_is_rootful) {
  if (geteuid() != 0)
    cr_skip_test("needs root to give a socket to another user");
  char dir[] = "/tmp/sbx-facts-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char root_url[256], user_url[256], file_url[256];
  int a = make_socket(dir, "root.sock", root_url, sizeof(root_url));
  int b = make_socket(dir, "user.sock", user_url, sizeof(user_url));
  cr_assert_eq(chown(user_url + 7, 1000, 1000), 0);
  cr_expect(engine_socket_root_owned(root_url));
  cr_expect(!engine_socket_root_owned(user_url), "a user's socket is asked");
  /* Not a socket, missing, not unix://, none. */
  (void)snprintf(file_url, sizeof(file_url), "unix://%s/file", dir);
  FILE *f = fopen(file_url + 7, "w");
  cr_assert_not_null(f);
  fclose(f);
  cr_expect(!engine_socket_root_owned(file_url));
  char missing[300];
  (void)snprintf(missing, sizeof(missing), "unix://%s/none.sock", dir);
  cr_expect(!engine_socket_root_owned(missing));
  cr_expect(!engine_socket_root_owned("tcp://127.0.0.1:2375"));
  cr_expect(!engine_socket_root_owned(NULL));
  close(a);
  close(b);
  char cmd[128];
  (void)snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}
