/* The helper servers of the tests (model_server.py, otlp_receiver.py):
 * started with the test process as their parent (PDEATHSIG: none outlives
 * its test), they print "listening PORT" once they serve and log what they
 * receive as JSON lines. */
#ifndef SBX_TEST_PYSERVER_H
#define SBX_TEST_PYSERVER_H

#include <jansson.h>
#include <sys/types.h>

/* Runs ARGV (NULL-terminated; argv[0] looked up in PATH) and waits up to
 * 20 s for its "listening PORT" line: the port. *PID gets the child. WHAT
 * names the server in the failure, which stops it. */
int test_pyserver_start(const char *const *argv, const char *what, pid_t *pid);
/* SIGTERM, then SIGKILL after 5 s; sets *PID to 0. Accepts 0. */
void test_pyserver_stop(pid_t *pid);
/* The JSON lines of PATH (new array); asserts on a line that is not JSON. */
json_t *test_jsonl_read(const char *path);

#endif
