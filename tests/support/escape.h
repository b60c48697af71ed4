/* The escape suite's probes: what a hostile command inside a sandbox tries,
 * each asserting that nothing leaked and nothing outside changed. The same
 * probes run against every backend (test_escape.c, test_escape_docker.c):
 * a context names the state directory, a scratch directory on the host
 * and the create options of the backend under test. */
#ifndef SBX_TEST_ESCAPE_H
#define SBX_TEST_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>

struct escape_ctx {
  char dir[64];    /* the host's scratch directory (0700) */
  char state[128]; /* sbx's state directory, inside DIR */
  char secret[64]; /* in sbx's environment as SBX_ESCAPE_SECRET */
  const char *const *create_args; /* the backend's "create" options */
  bool docker;
};

/* Makes the scratch and state directories and the secret; the secret is
 * put into our environment, which sbx inherits. */
void escape_setup(struct escape_ctx *c, const char *const *create_args,
                  bool docker);
/* Removes every sandbox and the scratch directory. */
void escape_teardown(struct escape_ctx *c);

/* A new sandbox with the context's options and EXTRA (NULL-terminated or
 * NULL); its id (new). */
char *escape_create(struct escape_ctx *c, const char *const *extra);
/* Runs SCRIPT with sh -c in sandbox ID; the exit status, *OUT its stdout
 * and stderr together (new). */
int escape_sh(struct escape_ctx *c, const char *id, const char *script,
              char **out);

void escape_probe_secrets(struct escape_ctx *c, const char *id);
void escape_probe_host_files(struct escape_ctx *c, const char *id);
void escape_probe_writes(struct escape_ctx *c, const char *id);
void escape_probe_neighbour(struct escape_ctx *c, const char *id);
/* A sibling sandbox's token and socket (and the probing sandbox's own
 * token file) are neither readable nor reachable from inside. */
void escape_probe_sibling(struct escape_ctx *c, const char *id);
void escape_probe_processes(struct escape_ctx *c, const char *id);
void escape_probe_loopback(struct escape_ctx *c, const char *id);
void escape_probe_privileges(struct escape_ctx *c, const char *id);
/* A fork bomb and a memory hog in a sandbox created with LIMIT_ARGS
 * (pids and memory limits) end inside it; the sandbox still answers. */
void escape_probe_limits(struct escape_ctx *c, const char *const *limit_args);

/* The probes as Criterion tests of SUITE (declared with TestSuite), each
 * in a fresh sandbox of CTX, and the limits with the backend's flags. */
#define ESCAPE_TESTS(suite, ctx)                                               \
  ESCAPE_TEST(suite, ctx, secrets)                                             \
  ESCAPE_TEST(suite, ctx, host_files)                                          \
  ESCAPE_TEST(suite, ctx, writes)                                              \
  ESCAPE_TEST(suite, ctx, neighbour)                                           \
  ESCAPE_TEST(suite, ctx, sibling)                                             \
  ESCAPE_TEST(suite, ctx, processes)                                           \
  ESCAPE_TEST(suite, ctx, loopback)                                            \
  ESCAPE_TEST(suite, ctx, privileges)                                          \
  Test(suite, limits) {                                                        \
    escape_probe_limits(&(ctx), (const char *const[]){"--pids-limit", "64",    \
                                                      "--memory-bytes",        \
                                                      "67108864", NULL});      \
  }
#define ESCAPE_TEST(suite, ctx, name)                                          \
  Test(suite, name) {                                                          \
    char *id = escape_create(&(ctx), NULL);                                    \
    escape_probe_##name(&(ctx), id);                                           \
    free(id);                                                                  \
  }

#endif
