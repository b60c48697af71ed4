#include "sandboxd/users/userdb.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/cleanup.h"

#define USERDB_LINE_MAX 4096

bool userdb_valid_name(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 32)
    return false;
  if (!(islower((unsigned char)name[0]) || name[0] == '_'))
    return false;
  for (size_t i = 1; i < n; i++) {
    unsigned char c = (unsigned char)name[i];
    if (islower(c) || isdigit(c) || c == '_' || c == '-')
      continue;
    if (c == '$' && i == n - 1)
      continue;
    return false;
  }
  return true;
}

/* Parses an all-digit SPEC into *V; false otherwise. */
static bool parse_id(const char *spec, unsigned long *v) {
  if (!*spec || strlen(spec) > 10)
    return false;
  for (const char *p = spec; *p; p++)
    if (!isdigit((unsigned char)*p))
      return false;
  *v = strtoul(spec, NULL, 10);
  return *v <= 0xfffffffeUL;
}

/* Splits LINE in place on ':' into at most MAX fields; returns the count. */
static size_t split_fields(char *line, char **f, size_t max) {
  size_t n = 0;
  char *p = line;
  while (n < max) {
    f[n++] = p;
    char *c = strchr(p, ':');
    if (!c)
      break;
    *c = '\0';
    p = c + 1;
  }
  return n;
}

static FILE *open_db(const char *etc, const char *name) {
  char path[512];
  int n = snprintf(path, sizeof(path), "%s/%s", etc ? etc : "/etc", name);
  if (n < 0 || (size_t)n >= sizeof(path))
    return NULL;
  return fopen(path, "re");
}

/* Copies S into a fixed field, refusing what does not fit. */
static int copy_field(char *dst, size_t cap, const char *s) {
  size_t n = strlen(s);
  if (n >= cap)
    return -ENAMETOOLONG;
  memcpy(dst, s, n + 1);
  return 0;
}

int userdb_group(const char *etc, const char *spec, gid_t *gid) {
  unsigned long id = 0;
  bool numeric = parse_id(spec, &id);
  if (!numeric && !userdb_valid_name(spec))
    return -EINVAL;
  _cleanup_fclose_ FILE *f = open_db(etc, "group");
  if (!f)
    return numeric ? (*gid = (gid_t)id, 0) : -ENOENT;
  char line[USERDB_LINE_MAX];
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *fl[4];
    if (split_fields(line, fl, 4) < 3)
      continue;
    unsigned long g;
    if (!parse_id(fl[2], &g))
      continue;
    if ((numeric && g == id) || (!numeric && strcmp(fl[0], spec) == 0)) {
      *gid = (gid_t)g;
      return 0;
    }
  }
  if (numeric) {
    *gid = (gid_t)id;
    return 0;
  }
  return -ENOENT;
}

/* True when the comma-separated LIST names USER. */
static bool list_has(const char *list, const char *user) {
  size_t ul = strlen(user);
  const char *p = list;
  while (*p) {
    const char *c = strchr(p, ',');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    if (n == ul && strncmp(p, user, n) == 0)
      return true;
    if (!c)
      break;
    p = c + 1;
  }
  return false;
}

static void add_groups(const char *etc, struct userdb_user *u) {
  u->groups[0] = u->gid;
  u->ngroups = 1;
  _cleanup_fclose_ FILE *f = open_db(etc, "group");
  if (!f)
    return;
  char line[USERDB_LINE_MAX];
  while (fgets(line, sizeof(line), f) && u->ngroups < USERDB_MAX_GROUPS) {
    line[strcspn(line, "\n")] = '\0';
    char *fl[4];
    if (split_fields(line, fl, 4) < 4)
      continue;
    unsigned long g;
    if (!parse_id(fl[2], &g) || (gid_t)g == u->gid)
      continue;
    if (list_has(fl[3], u->name))
      u->groups[u->ngroups++] = (gid_t)g;
  }
}

int userdb_user(const char *etc, const char *spec, struct userdb_user *out) {
  unsigned long id = 0;
  bool numeric = parse_id(spec, &id);
  if (!numeric && !userdb_valid_name(spec))
    return -EINVAL;
  memset(out, 0, sizeof(*out));
  _cleanup_fclose_ FILE *f = open_db(etc, "passwd");
  char line[USERDB_LINE_MAX];
  while (f && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char *fl[7];
    if (split_fields(line, fl, 7) < 7)
      continue;
    unsigned long uid, gid;
    if (!parse_id(fl[2], &uid) || !parse_id(fl[3], &gid))
      continue;
    if ((numeric && uid == id) || (!numeric && strcmp(fl[0], spec) == 0)) {
      if (copy_field(out->name, sizeof(out->name), fl[0]) < 0 ||
          copy_field(out->home, sizeof(out->home), fl[5]) < 0 ||
          copy_field(out->shell, sizeof(out->shell), fl[6]) < 0)
        return -ENAMETOOLONG;
      out->uid = (uid_t)uid;
      out->gid = (gid_t)gid;
      add_groups(etc, out);
      return 0;
    }
  }
  if (!numeric)
    return -ENOENT;
  (void)snprintf(out->name, sizeof(out->name), "%lu", id);
  out->uid = (uid_t)id;
  out->gid = (gid_t)id;
  (void)copy_field(out->home, sizeof(out->home), "/");
  (void)copy_field(out->shell, sizeof(out->shell), "/bin/sh");
  out->groups[0] = out->gid;
  out->ngroups = 1;
  return 0;
}
