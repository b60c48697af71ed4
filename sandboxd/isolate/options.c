/* sandboxd's isolation flags: one table for --help and getopt, one parser
 * per value kind. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandboxd/isolate/isolate.h"
#include "shared/cleanup.h"

enum flag_id {
  F_ISOLATE,
  F_ROOT_AT,
  F_HOSTNAME,
  F_ETC_DIR,
  F_CGROUP,
  F_UID_MAP,
  F_GID_MAP,
  F_NETWORK,
  F_FORWARD,
  F_BIND,
  F_MEMORY,
  F_PIDS,
  F_CPUS,
  F_WORKSPACE_BYTES,
};

const struct isolate_flag isolate_flags[] = {
    [F_ISOLATE] = {"isolate", NULL,
                   "run in new namespaces with a root of its own"},
    [F_ROOT_AT] = {"root-at", "PATH",
                   "where --root appears inside (default /workspace)"},
    [F_HOSTNAME] = {"hostname", "NAME", "the sandbox's host name (sandbox)"},
    [F_ETC_DIR] = {"etc-dir", "DIR",
                   "host directory keeping /etc's changes (default: memory)"},
    [F_CGROUP] = {"cgroup-name", "NAME", "the sandbox's cgroup (sandboxd-PID)"},
    [F_UID_MAP] = {"uid-map", "HOST:COUNT",
                   "host uids of the sandbox's 0..COUNT-1"},
    [F_GID_MAP] = {"gid-map", "HOST:COUNT",
                   "host gids of the sandbox's 0..COUNT-1"},
    [F_NETWORK] = {"network", "user|none",
                   "user-mode network without the host's loopback, or lo "
                   "only (default user)"},
    [F_FORWARD] = {"forward", "HOSTPORT:PORT",
                   "forward the host's 127.0.0.1:HOSTPORT to PORT inside"},
    [F_BIND] = {"bind", "SRC:DST[:ro]",
                "bind host directory SRC at DST inside (repeatable)"},
    [F_MEMORY] = {"memory-bytes", "N", "memory limit (0: none)"},
    [F_PIDS] = {"pids-limit", "N", "process limit (0: none)"},
    [F_CPUS] = {"cpus", "N", "CPU limit in CPUs (0: none)"},
    [F_WORKSPACE_BYTES] = {"workspace-bytes", "N",
                           "the workspace in memory, at most N bytes, "
                           "instead of --root (0: --root)"},
};
const size_t isolate_nflags = SBX_ARRAY_SIZE(isolate_flags);

static int bad(struct sbx_error *e, size_t i, const char *arg,
               const char *want) {
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "--%s \"%s\": %s",
                       isolate_flags[i].name, arg, want);
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (!*s || s[0] == '-' || errno || *end || v > max)
    return -EINVAL;
  *out = v;
  return 0;
}

/* "A:B" with both numbers at most MAX. */
static int parse_pair(const char *s, uint64_t max, uint64_t *a, uint64_t *b) {
  char buf[64];
  const char *colon = strchr(s, ':');
  if (!colon || (size_t)(colon - s) >= sizeof(buf))
    return -EINVAL;
  memcpy(buf, s, (size_t)(colon - s));
  buf[colon - s] = '\0';
  return parse_u64(buf, max, a) < 0 ? -EINVAL : parse_u64(colon + 1, max, b);
}

static bool good_path(const char *p) {
  return p[0] == '/' && strcmp(p, "/") != 0 && !strstr(p, "/../") &&
         strlen(p) < 1024;
}

/* SRC:DST[:ro] into a bind; ARG is borrowed for the process's life. */
static int parse_bind(const char *arg, struct isolate_bind *b) {
  static char store[ISOLATE_MAX_BINDS][2048];
  static size_t used;
  if (used >= ISOLATE_MAX_BINDS || strlen(arg) >= sizeof(store[0]))
    return -E2BIG;
  char *s = store[used];
  memcpy(s, arg, strlen(arg) + 1);
  size_t n = strlen(s);
  b->read_only = n > 3 && strcmp(s + n - 3, ":ro") == 0;
  if (b->read_only)
    s[n - 3] = '\0';
  char *colon = strchr(s, ':');
  if (!colon)
    return -EINVAL;
  *colon = '\0';
  b->source = s;
  b->target = colon + 1;
  if (!good_path(b->source) || !good_path(b->target))
    return -EINVAL;
  used++;
  return 0;
}

int isolate_flag_parse(size_t i, const char *arg, struct isolate_options *io,
                       struct sbx_error *e) {
  uint64_t a = 0, b = 0;
  if (i != F_ISOLATE && i < isolate_nflags && !io->first_flag)
    io->first_flag = isolate_flags[i].name;
  switch (i) {
  case F_ISOLATE:
    io->enabled = true;
    return 0;
  case F_ROOT_AT:
    if (!good_path(arg))
      return bad(e, i, arg, "expected an absolute path other than /");
    io->root_at = arg;
    return 0;
  case F_HOSTNAME:
    if (!*arg || strlen(arg) > 63 ||
        strspn(arg, "abcdefghijklmnopqrstuvwxyz"
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    "0123456789-.") != strlen(arg))
      return bad(e, i, arg, "expected a host name (letters, digits, - .)");
    io->hostname = arg;
    return 0;
  case F_ETC_DIR:
    if (!good_path(arg))
      return bad(e, i, arg, "expected an absolute path");
    io->etc_dir = arg;
    return 0;
  case F_CGROUP:
    io->cgroup_name = arg; /* cgroup_create checks it */
    return 0;
  case F_UID_MAP:
  case F_GID_MAP:
    if (parse_pair(arg, UINT32_MAX - 1, &a, &b) < 0 || b == 0 ||
        a + b > UINT32_MAX)
      return bad(e, i, arg, "expected HOST:COUNT, e.g. 200000000:65536");
    if (i == F_UID_MAP) {
      io->uid_base = (uint32_t)a;
      io->uid_count = (uint32_t)b;
    } else {
      io->gid_base = (uint32_t)a;
      io->gid_count = (uint32_t)b;
    }
    return 0;
  case F_NETWORK:
    if (strcmp(arg, "user") != 0 && strcmp(arg, "none") != 0)
      return bad(e, i, arg, "expected user or none");
    io->network = strcmp(arg, "user") == 0;
    return 0;
  case F_FORWARD:
    if (parse_pair(arg, 65535, &a, &b) < 0 || a == 0 || b == 0)
      return bad(e, i, arg, "expected HOSTPORT:PORT, both 1..65535");
    if (io->nforwards >= ISOLATE_MAX_FORWARDS)
      return bad(e, i, arg, "too many forwards");
    io->forwards[io->nforwards++] =
        (struct net_forward){.host_port = (uint16_t)a, .port = (uint16_t)b};
    return 0;
  case F_BIND:
    if (io->nbinds >= ISOLATE_MAX_BINDS ||
        parse_bind(arg, &io->binds[io->nbinds]) < 0)
      return bad(e, i, arg, "expected SRC:DST[:ro] with absolute paths");
    io->nbinds++;
    return 0;
  case F_MEMORY:
    if (parse_u64(arg, UINT64_MAX, &a) < 0)
      return bad(e, i, arg, "expected a number of bytes");
    io->limits.memory_bytes = a;
    return 0;
  case F_PIDS:
    if (parse_u64(arg, UINT32_MAX, &a) < 0)
      return bad(e, i, arg, "expected a number of processes");
    io->limits.pids = a;
    return 0;
  case F_WORKSPACE_BYTES:
    if (parse_u64(arg, UINT64_MAX, &a) < 0 || (a && a < 4096))
      return bad(e, i, arg, "expected 0 or a number of bytes >= 4096");
    io->workspace_bytes = a;
    return 0;
  case F_CPUS: {
    char *end = NULL;
    double v = strtod(arg, &end);
    if (!*arg || *end || !(v >= 0) || v > 1024)
      return bad(e, i, arg, "expected a number of CPUs, 0 to 1024");
    io->limits.cpus = v;
    return 0;
  }
  default:
    return sbx_error_set(e, SBX_INTERNAL, EINVAL, "unknown isolation flag");
  }
}
