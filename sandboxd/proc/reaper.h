/* For a sandboxd that is not PID 1 of its own PID namespace (an
 * unisolated sandbox): a small process that outlives it and, when it dies
 * however it dies, kills the process groups of the commands it was running,
 * so that none of them goes on under init. (PID 1 of a namespace, isolated
 * or in a container, needs none: the kernel kills the namespace.)
 *
 * A group is kept while it has processes, after its command exited too
 * (what it left running in the background dies with sandboxd); the reaper
 * forgets a group within a second of its emptying, however busy it is
 * (while a group has a process its id cannot name another group; after,
 * only a new group leader given the same pid within that second could be
 * mistaken for it). A command that leaves its process group (setsid)
 * escapes it, as it may in an unisolated sandbox anyway. Writes are one
 * small message each, safe from any thread. */
#ifndef SANDBOXD_REAPER_H
#define SANDBOXD_REAPER_H

#include <sys/types.h>

/* Starts the reaper; call before any thread starts. *FD (-1 on failure)
 * is the end to tell it of groups. */
int reaper_start(int *fd);
/* Tells the reaper of the group PGID; FD < 0 is a no-op. */
void reaper_add(int fd, pid_t pgid);

#endif
