/* The scratch directory of a fuzz target that needs files: made once per
 * process under $TMPDIR, else /dev/shm (memory: a target that rewrites a
 * file every run would otherwise write to disk all the time), else /tmp. */
#ifndef SBX_FUZZ_TMP_H
#define SBX_FUZZ_TMP_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Makes a new directory "<base>/sbx-fuzz-NAME-XXXXXX" into DIR (SIZE
 * bytes); aborts when it cannot, as a target cannot run without it. */
static inline void fuzz_tmpdir(char *dir, size_t size, const char *name) {
  const char *base = getenv("TMPDIR");
  if (!base || !base[0])
    base = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
  int n = snprintf(dir, size, "%s/sbx-fuzz-%s-XXXXXX", base, name);
  if (n < 0 || (size_t)n >= size || !mkdtemp(dir))
    abort();
}

#endif
