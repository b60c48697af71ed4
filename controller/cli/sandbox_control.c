/* sbx sandbox stop, start and rm. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>

#include "controller/cli/cli_internal.h"
#include "shared/cleanup.h"

static int start_stop(struct cli_common *c, int argc, char **argv, bool start) {
  const char *sub = start ? "start" : "stop";
  int u = cli_parse_ids(c, sub, argc, argv, 1, NULL);
  if (u >= 0)
    return u;
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return cli_usage_error(c, sub, "%s", e.msg);
  struct lifecycle_record rec;
  int r = lifecycle_load(dir, argv[optind], &rec, &e);
  if (r < 0)
    return cli_fail(c, &e, r);
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  r = lifecycle_attach(&rec, &bo, &sb, &e);
  if (r == 0) {
    if (start && !sb->backend->start)
      r = sbx_error_set(&e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                        "backend %s cannot start a sandbox again",
                        sb->backend->name);
    else
      r = start ? sb->backend->start(sb, &e) : sb->backend->stop(sb, &e);
    if (r == 0)
      r = lifecycle_resave(&rec, sb, NULL, &e);
  }
  int code = 0;
  if (r < 0)
    code = cli_fail(c, &e, r);
  else if (c->json) {
    _cleanup_json_ json_t *j = json_pack("{s:s, s:s}", "id", rec.id, "status",
                                         start ? "running" : "stopped");
    code = cli_print_json(c, j);
  } else {
    printf("%s\n", rec.id);
  }
  return cli_detach_done(sb, &rec, code);
}

int cli_sandbox_start(struct cli_common *c, int argc, char **argv) {
  return start_stop(c, argc, argv, true);
}

int cli_sandbox_stop(struct cli_common *c, int argc, char **argv) {
  return start_stop(c, argc, argv, false);
}

int cli_sandbox_rm(struct cli_common *c, int argc, char **argv) {
  bool force = false;
  int u = cli_parse_ids(c, "rm", argc, argv, -1, &force);
  if (u >= 0)
    return u;
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return cli_usage_error(c, "rm", "%s", e.msg);
  int code = 0;
  _cleanup_json_ json_t *removed = json_array();
  if (!removed)
    return cli_fail(c, &e, -ENOMEM);
  for (int i = optind; i < argc; i++) {
    struct lifecycle_record rec;
    int r = lifecycle_load(dir, argv[i], &rec, &e);
    if (r < 0) {
      code = cli_fail(c, &e, r);
      continue;
    }
    struct sandbox *sb = NULL;
    struct backend_options bo = {0};
    r = lifecycle_attach(&rec, &bo, &sb, &e);
    if (r == 0)
      r = sb->backend->close(sb, &e);
    if (r == 0 || force) {
      state_remove(dir, rec.id);
      if (json_array_append_new(removed, json_string(rec.id)) < 0)
        code = cli_fail(c, &e, -ENOMEM);
      if (!c->json)
        printf("%s\n", rec.id);
    }
    if (r < 0)
      code = cli_fail(c, &e, r);
    lifecycle_record_clear(&rec);
  }
  if (c->json && cli_print_json(c, removed))
    code = 1;
  return code ? code : (fflush(stdout) == 0 ? 0 : 1);
}
