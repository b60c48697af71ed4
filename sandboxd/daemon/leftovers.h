/* What a killed sandboxd leaves in the workspace, removed by the next one:
 * the staging directories of imports (".sbx-import-HANDLE") and the
 * temporary files of writes and patches (".sbx-HEX.tmp",
 * ".sbx-patch-HEX.tmp"), exactly those names, made before this sandboxd
 * started. The sweep runs in a thread of its own so that a large
 * workspace does not delay readiness; it never follows a symbolic link. */
#ifndef SANDBOXD_LEFTOVERS_H
#define SANDBOXD_LEFTOVERS_H

struct leftovers;

/* Starts the sweep of the tree at ROOT_FD (borrowed; duplicated). NULL
 * when it cannot start (logged; nothing else depends on it). */
struct leftovers *leftovers_sweep_start(int root_fd);
/* Stops the sweep where it is and frees it; accepts NULL. */
void leftovers_sweep_stop(struct leftovers *l);

#endif
