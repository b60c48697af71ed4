/* TEMP stub */
#ifndef SANDBOXD_CGROUP_H
#define SANDBOXD_CGROUP_H
#include <stdint.h>
#include <sys/types.h>
#include "shared/errors.h"
struct isolate_limits { uint64_t memory_bytes; uint64_t pids; double cpus; };
struct cgroup;
int cgroup_create(const char *name, const struct isolate_limits *l, struct cgroup **out, struct sbx_error *e);
int cgroup_add(struct cgroup *cg, pid_t pid, struct sbx_error *e);
int cgroup_kill(struct cgroup *cg);
void cgroup_destroy(struct cgroup *cg);
#endif
