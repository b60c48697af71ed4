/* sbx sandbox stop, start, rm and prune. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "controller/sandbox/meta.h"
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
  bool expired =
      strcmp(meta_status(rec.rec, false, (int64_t)time(NULL)), "expired") == 0;
  if (r == 0 && start && !sb->client && expired)
    r = sbx_error_set(
        &e, SBX_CONFLICT, ETIME,
        "sandbox %s has expired: its time to live ended at %s "
        "(remove it with sbx sandbox rm or prune)",
        rec.id, json_string_value(json_object_get(rec.rec, "expires_at")));
  else if (r == 0) {
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

/* Asks on stderr whether to remove N sandboxes and reads the answer from
 * stdin, as docker's prune does: only "y" or "yes" goes on (the end of
 * stdin is no). */
static bool confirm(size_t n) {
  fprintf(stderr,
          "This will remove %zu stopped or expired sandbox%s with %s.\n"
          "Are you sure you want to continue? [y/N] ",
          n, n == 1 ? "" : "es", n == 1 ? "its workspace" : "their workspaces");
  (void)fflush(stderr);
  char line[64] = "";
  if (!fgets(line, sizeof(line), stdin))
    return false;
  line[strcspn(line, "\r\n")] = '\0';
  return strcasecmp(line, "y") == 0 || strcasecmp(line, "yes") == 0;
}

/* Removes the stopped sandbox ID of DIR (closing it, as rm does) when it
 * is still stopped: 1 removed, 0 running again, or a negative errno. */
static int prune_one(const char *dir, const char *id, struct sbx_error *e) {
  struct lifecycle_record rec;
  int r = lifecycle_load(dir, id, &rec, e);
  if (r < 0)
    return r;
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  r = lifecycle_attach(&rec, &bo, &sb, e);
  if (r == 0 && sb->client && sb->backend->running(sb)) {
    sb->backend->detach(sb);
    lifecycle_record_clear(&rec);
    return 0;
  }
  if (r == 0)
    r = sb->backend->close(sb, e);
  if (r == 0)
    state_remove(dir, rec.id);
  lifecycle_record_clear(&rec);
  return r < 0 ? r : 1;
}

int cli_sandbox_prune(struct cli_common *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"filter", required_argument, NULL, 'F'},
      {"force", no_argument, NULL, 'f'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  struct meta_filters fs = {0};
  bool force = false;
  int ch;
  optind = 0;
  while ((ch = getopt_long(argc, argv, "hf", opts, NULL)) != -1) {
    int k = ch == 'F'   ? cli_take_filter(c, "prune", &fs, optarg)
            : ch == 'f' ? (force = true, -1)
                        : cli_common_option(c, "prune", ch);
    if (k >= 0)
      return k;
  }
  if (optind != argc)
    return cli_usage_error(c, "prune", "unexpected argument \"%s\"",
                           argv[optind]);
  _cleanup_json_ json_t *sel = NULL;
  int k = cli_sandbox_select(c, "prune", &fs, &sel);
  if (k >= 0)
    return k;
  _cleanup_json_ json_t *gone = json_array();
  if (!gone)
    return cli_error(c, SBX_INTERNAL, 1, "out of memory");
  for (size_t i = json_array_size(sel); i-- > 0;)
    if (strcmp(json_string_value(
                   json_object_get(json_array_get(sel, i), "status")),
               "running") == 0)
      (void)json_array_remove(sel, i);
  size_t n = json_array_size(sel);
  if (n > 0 && !force && !confirm(n))
    return cli_error(c, SBX_CONFLICT, 1,
                     "not confirmed: nothing removed (--force does not ask)");
  char dir[4096];
  struct sbx_error e = {0};
  (void)state_dir_resolve(c->state_dir, dir, sizeof(dir), &e);
  int code = 0;
  size_t i;
  json_t *rec;
  json_array_foreach(sel, i, rec) {
    const char *id = json_string_value(json_object_get(rec, "id"));
    int r = prune_one(dir, id, &e);
    if (r < 0) {
      code = cli_fail(c, &e, r);
      continue;
    }
    if (r == 0)
      continue;
    json_t *name = json_object_get(rec, "name");
    json_t *o = json_pack("{s:s, s:s, s:O?}", "id", id, "status",
                          json_string_value(json_object_get(rec, "status")),
                          "name", name);
    if (!o || json_array_append_new(gone, o) < 0)
      code = cli_error(c, SBX_INTERNAL, 1, "out of memory");
    if (!c->json)
      printf("%s%s%s\n", id, name ? " " : "",
             name ? json_string_value(name) : "");
  }
  if (c->json && cli_print_json(c, gone))
    code = 1;
  return code ? code : (fflush(stdout) == 0 ? 0 : 1);
}
