/* Backend options on the command line (sbx run, sbx sandbox create): every
 * registered backend's options that have a flag (backend.h's option
 * tables) become getopt_long entries after the command's own, and any
 * option of the chosen backend can be given as `-o KEY=VALUE` (--option);
 * the values given are kept as text, and the chosen backend's options are
 * made of an agent file's run_config with those flags laid over it, in
 * the order given. */
#ifndef SBX_CLI_BACKEND_FLAGS_H
#define SBX_CLI_BACKEND_FLAGS_H

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

#include "controller/backend/backend.h"
#include "shared/errors.h"

#define CLI_MAX_OPTIONS 64 /* a command's own options and the backends' */
#define CLI_MAX_GIVEN 256  /* backend flags given on one command line */

/* getopt_long's value for a backend flag: this plus its index in opts. */
#define CLI_BACKEND_FLAG 0x10000
/* getopt_long's value for --heartbeat SECONDS, which every backend takes:
 * how long the connection to sandboxd may stay down before a waiting call
 * fails (backend_options.heartbeat_ms). */
#define CLI_HEARTBEAT_FLAG 0x20000
#define CLI_HEARTBEAT_MAX_S 3600
/* getopt_long's value for -o KEY=VALUE (--option): any backend option.
 * A command's short options must include "o:". */
#define CLI_OPTION_FLAG 'o'

struct cli_backend_flags {
  struct option opts[CLI_MAX_OPTIONS + 1]; /* for getopt_long; {0} last */
  struct {
    const char *flag; /* borrowed from the option table; NULL for -o */
    const char *text; /* borrowed from argv; NULL for a boolean flag */
  } given[CLI_MAX_GIVEN];
  size_t ngiven;
  bool overflow;         /* more than CLI_MAX_GIVEN were given */
  const char *heartbeat; /* --heartbeat's text, or NULL */
};

/* Fills F's opts with OWN (ended by {0}) and then every backend's flags. */
void cli_backend_flags_init(struct cli_backend_flags *f,
                            const struct option *own);

/* For getopt_long's answer CH with ARG: true when it was a backend flag or
 * -o, now recorded (a repeated flag, or -o with the same KEY, replaces the
 * earlier value; a repeated flag of a string map adds a member). */
bool cli_backend_flags_take(struct cli_backend_flags *f, int ch,
                            const char *arg);

/* --heartbeat into BO->heartbeat_ms (left alone when not given): -EINVAL
 * with E's message for a value that is not a whole number of seconds from
 * 1 to CLI_HEARTBEAT_MAX_S. */
int cli_backend_heartbeat(const struct cli_backend_flags *f,
                          struct backend_options *bo, struct sbx_error *e);

/* True when a backend flag was given. */
bool cli_backend_flags_any(const struct cli_backend_flags *f);

/* B's own options (*OWN new, free with backend_options_free; NULL for a
 * backend without options) made of RUN_CONFIG (the backend's part of an
 * agent file's run_config, or NULL; WHERE names it in errors) with F's
 * flags laid over it. A flag B does not have, or a value B refuses, is a
 * usage error naming the flag. -EINVAL with E's message. */
int cli_backend_options(const struct cli_backend_flags *f,
                        const struct backend *b, json_t *run_config,
                        const char *where, void **own, struct sbx_error *e);

struct agent_set;

/* The backend of a command (*OUT) and its own options (*OWN, new; free
 * with backend_options_free): the backend NAME (--backend; NULL: the
 * starting agent's run_config, else the default) with F's flags laid over
 * that agent's run_config options. AGENTS may be NULL (no agent file). The
 * other agents' run_config is checked too, and must be none or the
 * starting agent's. -EINVAL with a message naming the flag, or the file
 * and the key. */
int cli_backend_choose(const struct cli_backend_flags *f, const char *name,
                       const struct agent_set *agents,
                       const struct backend **out, void **own,
                       struct sbx_error *e);

/* The help lines of --backend and every backend's flags. */
void cli_backend_flags_help(FILE *out);

#endif
