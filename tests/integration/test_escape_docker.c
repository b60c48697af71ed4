/* The escape suite on the docker backend (a real engine from
 * scripts/containers.sh, DOCKER_HOST): the same probes as on the local
 * backend (tests/support/escape.c). */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "tests/support/escape.h"

static struct escape_ctx ctx;
static const char *const docker_args[] = {"--backend", "docker", NULL};

static void setup(void) {
  if (!getenv("DOCKER_HOST"))
    cr_assert_fail("DOCKER_HOST is unset: these tests need a container "
                   "engine; run `bash scripts/containers.sh start` and export "
                   "the DOCKER_HOST it prints (`make check` does both)");
  escape_setup(&ctx, docker_args, true);
}
static void teardown(void) {
  escape_teardown(&ctx);
}

TestSuite(escape_docker, .init = setup, .fini = teardown, .timeout = 300);

ESCAPE_TESTS(escape_docker, ctx)
