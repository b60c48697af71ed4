/* The sbx command line. cli_main parses argv and returns the exit code:
 * 0 done, 1 the run failed (model or tool error), 2 usage or configuration
 * error. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

int cli_main(int argc, char **argv);

#endif
