/* sandboxd's command line for a local sandbox: the daemon's options, and
 * with isolation the namespaces' (sandboxd/isolate/options.c). */
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/local/local_internal.h"
#include "shared/cleanup.h"

/* The host range in FILE (/etc/subuid or /etc/subgid) of user "sbx" or
 * of the invoking user, as "BASE:COUNT" in OUT; false when none. */
static bool sub_range(const char *file, char *out, size_t n) {
  struct passwd *pw = getpwuid(geteuid());
  _cleanup_fclose_ FILE *f = fopen(file, "re");
  char line[256];
  while (f && fgets(line, sizeof(line), f)) {
    char *colon = strchr(line, ':');
    if (!colon)
      continue;
    *colon = '\0';
    unsigned long base, count;
    if ((strcmp(line, "sbx") == 0 || (pw && strcmp(line, pw->pw_name) == 0)) &&
        sscanf(colon + 1, "%lu:%lu", &base, &count) == 2 && count >= 1) {
      (void)snprintf(out, n, "%lu:%lu", base, count < 65536 ? count : 65536);
      return true;
    }
  }
  return false;
}

static void isolation_argv(const struct local *l, struct local_argv *as,
                           size_t *np) {
  const char **argv = as->argv;
  size_t n = *np;
  argv[n++] = "--isolate";
  argv[n++] = "--root-at";
  argv[n++] = l->inside_root;
  (void)snprintf(as->etc, sizeof(as->etc), "%s/etc", l->rundir);
  argv[n++] = "--etc-dir";
  argv[n++] = as->etc;
  argv[n++] = "--network";
  argv[n++] = l->opt.network ? "user" : "none";
  (void)snprintf(as->num[0], sizeof(as->num[0]), "%llu",
                 (unsigned long long)l->opt.memory_bytes);
  (void)snprintf(as->num[1], sizeof(as->num[1]), "%llu",
                 (unsigned long long)l->opt.pids);
  (void)snprintf(as->num[2], sizeof(as->num[2]), "%g", l->opt.cpus);
  (void)snprintf(as->num[3], sizeof(as->num[3]), "sbx-%s", l->session_id);
  argv[n++] = "--memory-bytes";
  argv[n++] = as->num[0];
  argv[n++] = "--pids-limit";
  argv[n++] = as->num[1];
  argv[n++] = "--cpus";
  argv[n++] = as->num[2];
  argv[n++] = "--cgroup-name";
  argv[n++] = as->num[3];
  (void)snprintf(as->num[6], sizeof(as->num[6]), "%llu",
                 (unsigned long long)l->opt.workspace_bytes);
  argv[n++] = "--workspace-bytes";
  argv[n++] = as->num[6];
  if (geteuid() == 0 && sub_range("/etc/subuid", as->num[4], 64) &&
      sub_range("/etc/subgid", as->num[5], 64)) {
    argv[n++] = "--uid-map";
    argv[n++] = as->num[4];
    argv[n++] = "--gid-map";
    argv[n++] = as->num[5];
  }
  for (size_t i = 0; i < l->nbinds; i++) {
    argv[n++] = "--bind";
    argv[n++] = l->binds[i];
  }
  for (size_t i = 0; i < l->nports; i++) {
    (void)snprintf(as->fwd[i], sizeof(as->fwd[i]), "%u:%u",
                   (unsigned)l->host_ports[i], (unsigned)l->ports[i]);
    argv[n++] = "--forward";
    argv[n++] = as->fwd[i];
  }
  *np = n;
}

const char **local_sandboxd_argv(const struct local *l, struct local_argv *as) {
  const char **argv = as->argv;
  size_t n = 0;
  argv[n++] = l->sandboxd;
  argv[n++] = "--listen";
  argv[n++] = l->url;
  argv[n++] = "--root";
  argv[n++] = l->workspace;
  argv[n++] = "--token-fd";
  argv[n++] = "3";
  argv[n++] = "--ready-fd";
  argv[n++] = "4";
  argv[n++] = "--seccomp";
  argv[n++] = l->seccomp;
  for (size_t i = 0; i < l->ngrants; i++) {
    argv[n++] = "--grant";
    argv[n++] = l->grants[i];
  }
  if (l->expires_at > 0) {
    (void)snprintf(as->num[8], sizeof(as->num[8]), "%lld",
                   (long long)l->expires_at);
    argv[n++] = "--expires-at";
    argv[n++] = as->num[8];
  }
  if (l->idle_timeout_s > 0) {
    (void)snprintf(as->num[9], sizeof(as->num[9]), "%u", l->idle_timeout_s);
    argv[n++] = "--idle-timeout";
    argv[n++] = as->num[9];
  }
  if (l->opt.isolate)
    isolation_argv(l, as, &n);
  argv[n] = NULL;
  return argv;
}
