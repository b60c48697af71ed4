#include <stdio.h>
#include <sys/prctl.h>

#include "controller/cli/cli.h"

int main(int argc, char **argv) {
  /* No process of a sandbox may read our memory, environment or fds (the
   * model's key) through ptrace, /proc or a core dump, even one running
   * as our user (isolation "none"). */
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
    perror("sbx: cannot make itself non-dumpable");
    return 1;
  }
  return cli_main(argc, argv);
}
