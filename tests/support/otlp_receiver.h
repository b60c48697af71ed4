/* Runs tests/support/otlp_receiver.py, a loopback OTLP/HTTP receiver that
 * records every POSTed body, for a test. It listens on an ephemeral
 * 127.0.0.1 port; with HANG it records requests and never answers them.
 *
 * The receiver is killed with SIGTERM by test_otlp_receiver_stop, and with
 * SIGKILL by the kernel when the test process dies first (PDEATHSIG). */
#ifndef SBX_TEST_OTLP_RECEIVER_H
#define SBX_TEST_OTLP_RECEIVER_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

struct test_otlp_receiver {
  pid_t pid;
  int port;
  char dir[64];           /* temp dir holding the log */
  char requests_path[96]; /* dir/requests.jsonl */
  char endpoint[64];      /* "http://127.0.0.1:PORT" */
};

/* Starts the receiver; asserts that it came up. */
void test_otlp_receiver_start(struct test_otlp_receiver *r, bool hang);
/* Stops it and removes its files. Accepts a stopped receiver. */
void test_otlp_receiver_stop(struct test_otlp_receiver *r);
/* The requests received so far (new): an array of {"n", "path",
 * "headers", "body"} objects in arrival order. */
json_t *test_otlp_receiver_requests(const struct test_otlp_receiver *r);
/* Every span of REQUESTS (as returned above; borrowed) in one new array,
 * each span object with its request's resource attributes added as
 * "resource" (for checks of service.name). */
json_t *test_otlp_spans(json_t *requests);
/* The value of attribute KEY of an OTLP span or resource object (borrowed
 * AnyValue object such as {"stringValue": "x"}), or NULL. */
json_t *test_otlp_attr(json_t *obj, const char *key);

#endif
