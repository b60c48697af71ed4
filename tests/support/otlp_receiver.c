#include "tests/support/otlp_receiver.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/pyserver.h"

static const char *receiver_path(void) {
  return SBX_SOURCE_DIR "/tests/support/otlp_receiver.py";
}

void test_otlp_receiver_start(struct test_otlp_receiver *r, bool hang) {
  memset(r, 0, sizeof(*r));
  (void)snprintf(r->dir, sizeof(r->dir), "/tmp/sbx-otlp-XXXXXX");
  cr_assert_not_null(mkdtemp(r->dir));
  (void)snprintf(r->requests_path, sizeof(r->requests_path),
                 "%s/requests.jsonl", r->dir);
  int fd =
      open(r->requests_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "open %s: %s", r->requests_path, strerror(errno));
  close(fd);

  const char *argv[] = {"python3", receiver_path(), r->requests_path,
                        hang ? "--hang" : NULL, NULL};
  int port = test_pyserver_start(argv, "OTLP receiver", &r->pid);
  r->port = port;
  (void)snprintf(r->endpoint, sizeof(r->endpoint), "http://127.0.0.1:%d", port);
}

void test_otlp_receiver_stop(struct test_otlp_receiver *r) {
  test_pyserver_stop(&r->pid);
  if (r->dir[0]) {
    (void)unlink(r->requests_path);
    (void)rmdir(r->dir);
    r->dir[0] = '\0';
  }
}

json_t *test_otlp_receiver_requests(const struct test_otlp_receiver *r) {
  return test_jsonl_read(r->requests_path);
}

json_t *test_otlp_spans(json_t *requests) {
  json_t *out = json_array();
  size_t i, k, m, n;
  json_t *req, *rs, *ss, *span;
  json_array_foreach(requests, i, req) {
    json_t *body = json_object_get(req, "body");
    json_array_foreach(json_object_get(body, "resourceSpans"), k, rs) {
      json_t *resource = json_object_get(rs, "resource");
      json_array_foreach(json_object_get(rs, "scopeSpans"), m, ss) {
        json_array_foreach(json_object_get(ss, "spans"), n, span) {
          json_t *copy = json_deep_copy(span);
          json_object_set(copy, "resource", resource);
          json_array_append_new(out, copy);
        }
      }
    }
  }
  return out;
}

json_t *test_otlp_attr(json_t *obj, const char *key) {
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(obj, "attributes"), i, a) {
    const char *k = json_string_value(json_object_get(a, "key"));
    if (k && strcmp(k, key) == 0)
      return json_object_get(a, "value");
  }
  return NULL;
}
