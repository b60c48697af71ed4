/* For a sandboxd that is not PID 1 of its own PID namespace (an
 * unisolated sandbox): a small process that outlives it and, when it dies
 * however it dies, kills the process groups of the commands it was running,
 * so that none of them goes on under init. (PID 1 of a namespace, isolated
 * or in a container, needs none: the kernel kills the namespace.)
 *
 * A command that leaves its process group (setsid) escapes it, as it may
 * in an unisolated sandbox anyway; a group is forgotten when its leader
 * exits. Writes are one small message each, safe from any thread. */
#ifndef SANDBOXD_REAPER_H
#define SANDBOXD_REAPER_H

#include <sys/types.h>

/* Starts the reaper; call before any thread starts. *FD (-1 on failure)
 * is the end to tell it of groups. */
int reaper_start(int *fd);
/* Tells the reaper of the group PGID, or that it is gone; FD < 0 is a
 * no-op. */
void reaper_add(int fd, pid_t pgid);
void reaper_forget(int fd, pid_t pgid);

#endif
