/* sbx approve and sbx reject: a person's decision on a call that a paused
 * run waits for, recorded in its run state. */
#include <stdio.h>
#include <string.h>

#include "controller/cli/cli_internal.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

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
  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = sbx_read_file(pos[0], 256u << 20, &text, &len);
  if (r < 0) {
    fprintf(stderr, "sbx %s: cannot read \"%s\": %s\n", verb, pos[0],
            strerror(-r));
    return 2;
  }
  json_error_t je;
  _cleanup_json_ json_t *rs = json_loadb(text, len, 0, &je);
  const char *status = json_string_value(json_object_get(rs, "status"));
  if (!status || !json_is_integer(json_object_get(rs, "items_count"))) {
    fprintf(stderr, "sbx %s: \"%s\" is not a run state\n", verb, pos[0]);
    return 2;
  }
  bool known = false;
  size_t i;
  json_t *it;
  json_array_foreach(json_object_get(rs, "pending"), i, it) {
    const char *cid = json_string_value(json_object_get(it, "call_id"));
    known |= cid && strcmp(cid, pos[1]) == 0;
  }
  if (!known) {
    fprintf(stderr, "sbx %s: the run in \"%s\" has no pending call \"%s\"\n",
            verb, pos[0], pos[1]);
    return 1;
  }
  json_t *ds = json_object_get(rs, "decisions");
  if (!json_is_object(ds) &&
      json_object_set_new(rs, "decisions", ds = json_object()) < 0)
    ds = NULL;
  r = ds ? json_object_set_new(
               ds, pos[1],
               json_pack("{s:s, s:s?}", "decision",
                         strcmp(verb, "approve") == 0 ? "approved" : "rejected",
                         "reason", reason))
         : -1;
  _cleanup_free_ char *out = r == 0 ? json_dumps(rs, JSON_COMPACT) : NULL;
  if (!out || sbx_write_file_atomic(pos[0], out, strlen(out), 0600) < 0) {
    fprintf(stderr, "sbx %s: cannot write \"%s\"\n", verb, pos[0]);
    return 1;
  }
  printf("%s %s\n", strcmp(verb, "approve") == 0 ? "approved" : "rejected",
         pos[1]);
  return 0;
}
