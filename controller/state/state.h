/* The state directory: records of developer-owned sandboxes, so that any
 * sbx process can attach to one.
 *
 *   $XDG_STATE_HOME/sbx (default ~/.local/state/sbx), or --state-dir
 *     sandboxes/ID.json    the record (0600, written atomically)
 *     sandboxes/ID.token   the sandbox's auth token (0600; never printed)
 *     sandboxes/ID.log     its sandboxd's output
 *
 * Directories are 0700. IDs are 12 lowercase hex digits; a unique prefix
 * names one on the command line, as docker's do. */
#ifndef SBX_STATE_H
#define SBX_STATE_H

#include <jansson.h>
#include <stddef.h>

#include "shared/errors.h"

#define STATE_ID_LEN 12
#define STATE_MAX_BYTES (64u << 20) /* one record */
#define STATE_MAX_SANDBOXES 4096    /* records listed */

/* The state directory: GIVEN, else $XDG_STATE_HOME/sbx, else
 * $HOME/.local/state/sbx. */
int state_dir_resolve(const char *given, char *out, size_t n,
                      struct sbx_error *e);
/* Creates DIR/sandboxes (0700) when missing. */
int state_dir_ensure(const char *dir, struct sbx_error *e);

/* A fresh id. */
int state_new_id(char out[STATE_ID_LEN + 1]);

/* DIR/sandboxes/ID.<EXT> ("json", "token", "log"). */
int state_path(const char *dir, const char *id, const char *ext, char *out,
               size_t n);

/* Writes the record of ID (0600, atomically). */
int state_write(const char *dir, const char *id, json_t *rec,
                struct sbx_error *e);
/* Finds the record WANT names, as docker does: the one whose id is WANT,
 * else whose "name" is WANT, else whose id starts with WANT. *OUT is new,
 * ID the full id. "no sandbox ..." (-ENOENT) or "... is ambiguous"
 * (-EINVAL). */
int state_read(const char *dir, const char *want, json_t **out,
               char id[STATE_ID_LEN + 1], struct sbx_error *e);
/* The id of the record whose "name" is NAME into ID: 1 when there is one,
 * 0 when none, or a negative errno. */
int state_find_name(const char *dir, const char *name,
                    char id[STATE_ID_LEN + 1], struct sbx_error *e);
/* Takes the state directory's lock (DIR/sandboxes/.lock, which must
 * exist as a directory), waiting for it: an fd to close to let go, or a
 * negative errno. Held while a name is checked and taken. */
int state_lock(const char *dir, struct sbx_error *e);
/* Every record, sorted by creation time then id. New array. A missing
 * directory is an empty list. */
int state_list(const char *dir, json_t **out, struct sbx_error *e);
/* Removes ID's record, token and log. */
void state_remove(const char *dir, const char *id);

/* The current time as RFC 3339 UTC text. */
void state_now(char out[32]);

#endif
