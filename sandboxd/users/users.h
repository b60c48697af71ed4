/* Users and groups for UsersEnsure.
 *
 * rpc_users_ensure needs sandboxd to be root. It uses shadow's groupadd,
 * useradd and usermod when all three are installed, and otherwise edits
 * /etc/passwd, /etc/group (and /etc/shadow, /etc/gshadow when present)
 * itself: under the shadow lock (.pwd.lock), each file rewritten through a
 * temporary file, fsync and rename that keep its mode and owner. */
#ifndef SANDBOXD_USERS_H
#define SANDBOXD_USERS_H

#include "sandboxd/rpc/rpc.h"

#define USERS_MAX_ENTRIES 256 /* groups, users and members per request */
#define USERS_ID_MIN 1000     /* ids allocated from here... */
#define USERS_ID_MAX 59999    /* ...to here */

/* UsersEnsure: creates the groups and users of the request that are missing;
 * root only. Blocking: runs on the worker pool. */
int rpc_users_ensure(struct rpc_call *c);

/* UsersEnsure by editing the files in the directory ETC directly, never
 * running a tool; for systems without shadow's tools and for tests (which
 * pass a temporary directory). The caller has checked sandboxd may do it.
 * Thread-safe (an OFD lock on ETC/.pwd.lock). */
int users_ensure_files(struct rpc_call *c, const char *etc);

#endif
