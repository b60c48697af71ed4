/* User and group lookup from /etc/passwd and /etc/group, without NSS (so it
 * works the same in the static binary). Thread-safe: every call reads the
 * files afresh. */
#ifndef SANDBOXD_USERDB_H
#define SANDBOXD_USERDB_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define USERDB_NAME_MAX 64
#define USERDB_MAX_GROUPS 64

struct userdb_user {
  char name[USERDB_NAME_MAX];
  uid_t uid;
  gid_t gid;
  char home[256];
  char shell[256];
  gid_t groups[USERDB_MAX_GROUPS]; /* supplementary, incl. the primary */
  size_t ngroups;
};

/* Looks up a user by name, or by number when SPEC is all digits (then a
 * uid without a passwd entry is accepted with gid = uid and home "/").
 * -ENOENT when unknown, -EINVAL for a malformed spec. Fills groups from
 * /etc/group memberships. ETC is the directory holding passwd and group
 * (NULL means "/etc"); tests pass their own. */
int userdb_user(const char *etc, const char *spec, struct userdb_user *out);

/* Looks up a group by name or number; fills *GID. */
int userdb_group(const char *etc, const char *spec, gid_t *gid);

/* True when NAME is a valid user or group name: [a-z_][a-z0-9_-]{0,31}
 * (and an optional trailing '$'). */
bool userdb_valid_name(const char *name);

#endif
