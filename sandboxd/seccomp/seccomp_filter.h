/* The seccomp filter installed in each child before exec.
 *
 * (Not named seccomp.h: sandboxd/ is on the include path, and that name
 * would hide libseccomp's <seccomp.h>.) */
#ifndef SANDBOXD_SECCOMP_FILTER_H
#define SANDBOXD_SECCOMP_FILTER_H

#include "sandboxd/rpc/sandboxd.h"

struct seccomp_prog;

/* Builds the BPF program for MODE in the parent (allocation happens here,
 * not in the child). *OUT is NULL for SANDBOXD_SECCOMP_OFF. */
int seccomp_prog_build(enum sandboxd_seccomp mode, struct seccomp_prog **out);
/* Loads PROG into the calling process; async-signal-safe (for a forked
 * child): only prctl and seccomp syscalls. PROG NULL is a no-op. */
int seccomp_prog_load(const struct seccomp_prog *prog);
void seccomp_prog_free(struct seccomp_prog *prog);

#endif
