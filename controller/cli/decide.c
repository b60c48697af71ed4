/* sbx approve and sbx reject: a person's decision on a call that a paused
 * run waits for, recorded in its run state. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controller/cli/cli_internal.h"
#include "controller/run/runner.h"
#include "shared/cleanup.h"

/* sbx approve RUNSTATE CALL_ID / sbx reject RUNSTATE CALL_ID --reason R:
 * records a person's decision on a call the run is waiting for. */
int cli_decide(int argc, char **argv) {
  const char *verb = argv[0];
  const char *reason = NULL;
  const char *pos[2];
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0) {
      printf("usage: sbx %s RUNSTATE CALL_ID%s\n\nRecords that the call "
             "CALL_ID of the paused run in RUNSTATE is %s.\nContinue the "
             "run with sbx run --resume RUNSTATE.\n",
             verb, strcmp(verb, "reject") == 0 ? " [--reason TEXT]" : "",
             strcmp(verb, "reject") == 0 ? "rejected (the model sees the "
                                           "reason)"
                                         : "approved");
      return 0;
    }
    if (strcmp(verb, "reject") == 0 && strcmp(argv[i], "--reason") == 0 &&
        i + 1 < argc) {
      reason = argv[++i];
      continue;
    }
    if (argv[i][0] == '-' || npos == 2) {
      fprintf(stderr, "sbx %s: unexpected argument \"%s\"\n", verb, argv[i]);
      return 2;
    }
    pos[npos++] = argv[i];
  }
  if (npos != 2) {
    fprintf(stderr, "usage: sbx %s RUNSTATE CALL_ID%s\n", verb,
            strcmp(verb, "reject") == 0 ? " [--reason TEXT]" : "");
    return 2;
  }
  struct sbx_error e = {0};
  int r =
      runner_decide(pos[0], pos[1], strcmp(verb, "approve") == 0, reason, &e);
  if (r < 0) {
    fprintf(stderr, "sbx %s: %s\n", verb, e.msg);
    return r == -EINVAL ? 2 : 1;
  }
  printf("%s %s\n", strcmp(verb, "approve") == 0 ? "approved" : "rejected",
         pos[1]);
  return 0;
}
