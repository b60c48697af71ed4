#include "tests/support/model_server.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/support/pyserver.h"

const char *test_model_server_path(void) {
  return SBX_SOURCE_DIR "/tests/support/model_server.py";
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
  size_t n = strlen(text);
  cr_assert_eq(write(fd, text, n), (ssize_t)n);
  close(fd);
}

void test_model_server_start(struct test_model_server *s, const char *script,
                             const char *api_key) {
  memset(s, 0, sizeof(*s));
  (void)snprintf(s->dir, sizeof(s->dir), "/tmp/sbx-model-XXXXXX");
  cr_assert_not_null(mkdtemp(s->dir));
  (void)snprintf(s->script_path, sizeof(s->script_path), "%s/script.json",
                 s->dir);
  (void)snprintf(s->requests_path, sizeof(s->requests_path),
                 "%s/requests.jsonl", s->dir);
  write_file(s->script_path, script);
  write_file(s->requests_path, "");

  const char *argv[8];
  size_t n = 0;
  argv[n++] = "python3";
  argv[n++] = test_model_server_path();
  argv[n++] = s->script_path;
  argv[n++] = s->requests_path;
  if (api_key) {
    argv[n++] = "--api-key";
    argv[n++] = api_key;
  }
  argv[n] = NULL;
  int port = test_pyserver_start(argv, "model server", &s->pid);
  s->port = port;
  (void)snprintf(s->base_url, sizeof(s->base_url), "http://127.0.0.1:%d/v1",
                 port);
}

void test_model_server_stop(struct test_model_server *s) {
  test_pyserver_stop(&s->pid);
  if (s->dir[0]) {
    (void)unlink(s->script_path);
    (void)unlink(s->requests_path);
    (void)rmdir(s->dir);
    s->dir[0] = '\0';
  }
}

json_t *test_model_server_requests(const struct test_model_server *s) {
  return test_jsonl_read(s->requests_path);
}

int test_closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* The output of CALL_ID among the items of request R, or NULL. */
static const char *output_in(json_t *r, const char *call_id) {
  json_t *input = json_object_get(json_object_get(r, "body"), "input");
  size_t i;
  json_t *it;
  json_array_foreach(input, i, it) {
    const char *c = json_string_value(json_object_get(it, "call_id"));
    const char *t = json_string_value(json_object_get(it, "type"));
    if (c && t && strcmp(c, call_id) == 0 &&
        strcmp(t, "function_call_output") == 0) {
      json_t *o = json_object_get(it, "output");
      return json_is_string(o) ? json_string_value(o) : "(not a string)";
    }
  }
  return NULL;
}

const char *test_call_output(json_t *reqs, long n, const char *call_id) {
  if (n >= 0)
    return output_in(json_array_get(reqs, (size_t)n), call_id);
  for (size_t k = json_array_size(reqs); k-- > 0;) {
    const char *o = output_in(json_array_get(reqs, k), call_id);
    if (o)
      return o;
  }
  return NULL;
}
