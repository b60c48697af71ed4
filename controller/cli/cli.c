#include "controller/cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/cli/cli_internal.h"
#include "shared/cleanup.h"
#include "shared/log.h"

static void usage_main(FILE *f) {
  fprintf(f,
          "usage: sbx [--log-level LEVEL] COMMAND [ARGS]\n"
          "\n"
          "Runs LLM agents inside sandboxes.\n"
          "\n"
          "Commands:\n"
          "  run AGENT.json PROMPT   run an agent on a task in a fresh sandbox "
          "and print\n"
          "                          its answer (see sbx run --help)\n"
          "  sandbox SUBCOMMAND      create and drive sandboxes that outlive "
          "a run\n"
          "                          (see sbx sandbox --help)\n"
          "  approve RUN_ID CALL_ID  approve a call a paused run waits for\n"
          "  reject RUN_ID CALL_ID [--reason TEXT]\n"
          "                          reject it; the model sees the reason\n"
          "  serve                   serve the HTTP API: runs submitted, "
          "watched and\n"
          "                          approved over the network (see sbx "
          "serve --help)\n"
          "  token SUBCOMMAND        the server's bearer tokens: create, ls, "
          "rm\n"
          "  runs SUBCOMMAND         the runs of the state store, of sbx "
          "run and of\n"
          "                          servers alike: ls, show, cancel, logs "
          "(see sbx\n"
          "                          runs --help)\n"
          "  ca SUBCOMMAND           the certificates of remote sandboxes: "
          "init, show,\n"
          "                          issue-server, issue-client, revoke, crl "
          "(see sbx\n"
          "                          ca --help)\n"
          "\n"
          "Options:\n"
          "  --log-level LEVEL       error | warn | info | debug (default "
          "warn)\n"
          "  --server URL            be a client of sbx serve at URL: run, "
          "approve,\n"
          "                          reject, runs and sandbox go there\n"
          "  --version               print the version and exit\n"
          "  --help                  print this help and exit\n"
          "\n"
          "Environment: OPENAI_API_KEY, OPENAI_BASE_URL (default "
          "https://api.openai.com/v1),\n"
          "OPENAI_DEFAULT_MODEL, SBX_SANDBOXD (path of the sandboxd "
          "binary),\n"
          "SBX_SERVER (as --server), SBX_TOKEN (the bearer token for "
          "--server).\n");
}

int cli_main(int argc, char **argv) {
  sbx_log_set_program("sbx");
  const char *server = getenv("SBX_SERVER");
  int i = 1;
  for (; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage_main(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("sbx %s\n", SBX_VERSION);
      return 0;
    }
    if (strcmp(argv[i], "--server") == 0 && i + 1 < argc) {
      server = argv[++i];
      continue;
    }
    if (strcmp(argv[i], "--log-level") == 0) {
      enum sbx_log_level lvl;
      if (i + 1 >= argc || sbx_log_parse_level(argv[i + 1], &lvl) < 0) {
        fprintf(stderr, "sbx: --log-level expects error, warn, info or "
                        "debug\n");
        return 2;
      }
      sbx_log_set_level(lvl);
      i++;
      continue;
    }
    break;
  }
  if (i >= argc) {
    usage_main(stderr);
    return 2;
  }
  /* serve and token work on the server's own store, never through it. */
  if (server && *server && strcmp(argv[i], "serve") != 0 &&
      strcmp(argv[i], "token") != 0)
    return cli_remote(server, argc - i, argv + i);
  static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
  } commands[] = {
      {"run", cli_run},       {"approve", cli_decide},
      {"reject", cli_decide}, {"sandbox", cli_sandbox_main},
      {"serve", cli_serve},   {"token", cli_token},
      {"runs", cli_runs},     {"ca", cli_ca},
  };
  for (size_t k = 0; k < SBX_ARRAY_SIZE(commands); k++)
    if (strcmp(argv[i], commands[k].name) == 0)
      return commands[k].fn(argc - i, argv + i);
  fprintf(stderr, "sbx: unknown command \"%s\" (see sbx --help)\n", argv[i]);
  return 2;
}
