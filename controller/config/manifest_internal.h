/* What the files of the manifest parser share (manifest.c, manifest_entry.c,
 * manifest_env.c, manifest_users.c, manifest_grants.c, and manifest_delta.c
 * for its messages): the error messages that name the key and the entry,
 * and the parsers of each top-level key. Not an API: only
 * controller/config/manifest*.c include it.
 *
 * Every parser fills E with a message for a person and returns 0 or a
 * negative errno; on failure what it added to M is freed with M. */
#ifndef SBX_MANIFEST_INTERNAL_H
#define SBX_MANIFEST_INTERNAL_H

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "controller/config/manifest.h"
#include "shared/errors.h"

/* ---- messages (manifest.c) ---- */

/* An SBX_INVALID_ARGUMENT error with a formatted message; -EINVAL. */
int manifest_invalid(struct sbx_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "WHERE: "KEY" must be WANT, not <GOT's type>"; -EINVAL. */
int manifest_type_error(struct sbx_error *e, const char *where, const char *key,
                        const char *want, json_t *got);
/* An unknown key K in WHAT (may be NULL), with a hint for camelCase. */
int manifest_unknown_key(struct sbx_error *e, const char *where, const char *k,
                         const char *what);
/* Checks that V (key K) is an array of at most MANIFEST_MAX_LIST items. */
int manifest_check_list(json_t *v, const char *where, const char *k,
                        struct sbx_error *e);

/* A copy of the string V (borrowed) into *OUT (new); -ENOMEM. */
static inline int manifest_dup_str(json_t *v, char **out) {
  *out = strndup(json_string_value(v), json_string_length(v));
  return *out ? 0 : -ENOMEM;
}

/* ---- entries (manifest_entry.c) ---- */

/* Frees EN's fields and zeroes it. */
void manifest_entry_clear(struct manifest_entry *en);
/* Parses the entries object OBJ beneath PARENT ("." for the root) into M,
 * parents before children; DEPTH counts the nesting, *CAP is M->entries'
 * capacity. */
int manifest_parse_entries(struct manifest *m, json_t *obj, const char *parent,
                           const char *where, unsigned depth, size_t *cap,
                           struct sbx_error *e);

/* ---- users and groups (manifest_users.c) ---- */

/* A user or group name: a string, or {"name": string} when ALLOW_OBJECT;
 * trimmed and checked; *OUT is new. WHAT is "user" or "group". */
int manifest_parse_name(json_t *v, const char *where, const char *what,
                        bool allow_object, char **out, struct sbx_error *e);
int manifest_parse_users(struct manifest *m, json_t *v, const char *where,
                         struct sbx_error *e);
int manifest_parse_groups(struct manifest *m, json_t *v, const char *where,
                          struct sbx_error *e);

/* ---- environment and grants ---- */

/* ENV is an object (checked by the caller). */
int manifest_parse_environment(struct manifest *m, json_t *env,
                               const char *where, struct sbx_error *e);
int manifest_parse_grants(struct manifest *m, json_t *v, const char *where,
                          struct sbx_error *e);

#endif
