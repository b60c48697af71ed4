/* A private PostgreSQL server for one test: initdb into a fresh directory,
 * trust authentication, no TCP (its unix socket is in that directory),
 * fsync off and small buffers so that it starts in about a second. The
 * server is the test process's child and dies with it, so a test that
 * crashes leaves none behind. As root (initdb refuses root) the programs
 * run as the postgres user. initdb's and the server's output go to a log
 * in the directory, printed when the server does not start. */
#ifndef SBX_TEST_POSTGRES_H
#define SBX_TEST_POSTGRES_H

#include <sys/types.h>

struct test_pg {
  char dir[64];  /* data/, the socket, log */
  char url[160]; /* postgresql://postgres@/postgres?host=DIR */
  pid_t pid;     /* the postmaster, 0 when stopped */
};

/* Starts the server into PG. Skips the test (cr_skip_test) when
 * PostgreSQL's programs are not installed, or when running as root without
 * a postgres user to run them as. */
void test_pg_start(struct test_pg *pg);
/* Stops the server at once (SIGQUIT: immediate shutdown) and removes its
 * directory. Accepts a PG never started or stopped already. */
void test_pg_stop(struct test_pg *pg);

#endif
