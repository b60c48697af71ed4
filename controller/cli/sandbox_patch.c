/* sbx sandbox apply-patch: a "*** Begin Patch" text from stdin applied in
 * the sandbox, all files or none. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"

#define CLI_PATCH_MAX (64u << 20)

/* ---- apply-patch
 * -------------------------------------------------------------- */

/* --json's {"results": [{path, action, summary}...]}: 0, or 1 after
 * saying why not. */
static int print_results_json(struct cli_common *c,
                              const Sbx__V1__PatchApplyReply *x) {
  _cleanup_json_ json_t *arr = json_array();
  for (size_t i = 0; arr && i < x->n_results; i++)
    if (json_array_append_new(arr, json_pack("{s:s, s:s, s:s}", "path",
                                             x->results[i]->path, "action",
                                             x->results[i]->action, "summary",
                                             x->results[i]->summary)) < 0)
      return cli_print_json(c, NULL);
  _cleanup_json_ json_t *j = arr ? json_pack("{s:O}", "results", arr) : NULL;
  return cli_print_json(c, j);
}

int cli_sandbox_apply_patch(struct cli_common *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"dir", required_argument, NULL, 'd'},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  const char *dir = "";
  int ch;
  optind = 0; /* a fresh scan that permutes: options after the id too */
  while ((ch = getopt_long(argc, argv, "d:h", opts, NULL)) != -1) {
    switch (ch) {
    case 'd':
      dir = optarg;
      break;
    default: {
      int r = cli_common_option(c, "apply-patch", ch);
      if (r >= 0)
        return r;
    }
    }
  }
  if (argc - optind != 1)
    return cli_usage_error(c, "apply-patch",
                           "expected ID (and the patch on "
                           "stdin)");
  _cleanup_buf_ struct sbx_buf b = {0};
  sbx_buf_init(&b, CLI_PATCH_MAX);
  int rr = cli_read_stdin(&b);
  if (rr == -E2BIG)
    return cli_usage_error(c, "apply-patch", "the patch is larger than %u MiB",
                           CLI_PATCH_MAX >> 20);
  if (rr < 0)
    return cli_error(c, sbx_code_from_errno(-rr), 1, "cannot read stdin: %s",
                     strerror(-rr));
  if (b.len == 0 || sbx_buf_append(&b, "", 1) < 0)
    return cli_usage_error(c, "apply-patch", "no patch on stdin");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = cli_attach_for(c, "apply-patch", argv[optind], &rec, &sb);
  if (k)
    return k;
  Sbx__V1__Response *resp = NULL;
  int r = sbx_patch_apply(sb->client, b.data, dir, false, &resp, &e);
  sbx_buf_free(&b); /* now: a patch may be 64 MiB */
  int code = 0;
  if (r < 0)
    code = cli_fail(c, &e, r);
  else if (c->json)
    code = print_results_json(c, resp->patch_apply);
  else
    for (size_t i = 0; i < resp->patch_apply->n_results; i++)
      printf("%s\n", resp->patch_apply->results[i]->summary);
  sbx_client_reply_free(resp);
  return cli_detach_done(sb, &rec, code);
}
