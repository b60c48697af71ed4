/* The typed C client of sandboxd, used by the controller and the tests.
 *
 * One client holds one nng REQ socket; every call opens its own context, so
 * calls from several threads run concurrently. Each request gets a fresh id;
 * when a call times out or the connection drops, the same request (same id)
 * is sent again up to `retries` times — safe for every RPC because sandboxd
 * answers a repeated mutating request with its first reply.
 *
 * Replies are checked before the caller sees them, because the sandbox may
 * be hostile: protocol version, echoed id, body type, data sizes against
 * what was asked, and UTF-8 where text is expected (paths, messages).
 *
 * sandboxd proves itself before it gets the token (shared/auth.h): on each
 * new connection (nng redials in the background after any drop) the first
 * thing sent is a Hello with a fresh nonce and no token, and no request
 * carrying the token goes out on that connection until its answer holds a
 * valid proof, checked in constant time. The client follows nng's pipes
 * (nng_pipe_notify): a connection that appears while a tokened request
 * waits in nng's queue is closed before anything is sent on it, and the
 * waiting requests are cancelled and retried after a challenge; nng never
 * resends by itself (NNG_OPT_REQ_RESENDTIME stays infinite). A peer that
 * fails is refused with -EKEYREJECTED (UNAUTHENTICATED), naming the URL,
 * and its connection is closed; the next call challenges again. On ipc://
 * the caller may also name the process that must serve the socket
 * (peer_pid): a connection to any other is closed when nng adds it.
 *
 * What the proof does not stop: a process that can both reach the real
 * sandboxd and put its own socket where the client dials could pass the
 * challenge on to sandboxd and its answer back (a relay). peer_pid closes
 * that on ipc://, TLS with a CA (tls_ca) on tls+tcp://; plain tcp:// has
 * no defence. A sandboxd older than the proof cannot answer the challenge
 * and is refused.
 *
 * A reply (Sbx__V1__Response) is new; free it with sbx_client_reply_free. */
#ifndef SBX_CLIENT_H
#define SBX_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandboxd.pb-c.h"
#include "shared/errors.h"

struct sbx_client;

struct sbx_client_config {
  const char *url;      /* ipc://, tls+tcp:// or tcp:// */
  const uint8_t *token; /* borrowed; copied */
  size_t token_len;
  const char *tls_ca;   /* tls+tcp://: CA that the server chains to */
  const char *tls_cert; /* our client certificate and key (PEM files) */
  const char *tls_key;
  const char *tls_server_name; /* default: the URL's host */
  unsigned timeout_ms;         /* per attempt; 0 means 30000 */
  unsigned retries;         /* extra attempts after a timeout or a drop; 0: 3 */
  size_t max_message_bytes; /* 0 means 64 MiB */
  const char *client_name;  /* for sandboxd's logs */
  /* sandboxd's process on this host, when sbx can see it (0: not known):
   * its exit fails every waiting call at once (shared/peer.h), and on
   * ipc:// a connection is refused unless this process serves it
   * (SO_PEERCRED, as this process's PID namespace sees it), or with
   * peer_child a child of it (an isolated sandboxd serves from a clone of
   * the process started). */
  pid_t peer_pid;
  bool peer_child;
  /* A connection that was up and has been down this long fails every
   * waiting call; 0 means SBX_PEER_HEARTBEAT_MS. */
  unsigned heartbeat_ms;
};

/* Opens the socket and dials (nng dials in the background and redials).
 * Does not wait for the server; the first call does, and challenges it. */
int sbx_client_new(const struct sbx_client_config *cfg, struct sbx_client **out,
                   struct sbx_error *e);
/* Closes and wipes the token; accepts NULL; returns NULL. */
struct sbx_client *sbx_client_free(struct sbx_client *c);

/* Sends REQ (body set by the caller; version, id and token are filled in)
 * and waits for the reply; first the challenge, on a new connection. TIMEOUT_MS
 * 0 means the client's default; for a long-poll pass at least its wait_ms plus
 * a margin. On success *OUT is the reply, whose body case is EXPECT. A reply
 * carrying an error is returned as that error: a negative errno with E filled
 * from the code and message. -EKEYREJECTED (UNAUTHENTICATED) when the peer did
 * not prove it holds the token: nothing carrying the token was sent to it. */
int sbx_client_call(struct sbx_client *c, Sbx__V1__Request *req,
                    Sbx__V1__Response__BodyCase expect, unsigned timeout_ms,
                    Sbx__V1__Response **out, struct sbx_error *e);

void sbx_client_reply_free(Sbx__V1__Response *r);

/* Gives the mutating requests this thread sends from now on deterministic
 * ids, "TAG-1", "TAG-2", ... (reads keep random ids), so that a caller that
 * repeats the same work after a crash — a resumed run replaying a tool
 * call — sends the same ids and sandboxd answers from its reply cache
 * instead of doing the work twice. TAG is copied, cut to 48 characters and
 * made id-safe; NULL returns to random ids. Thread-local. */
void sbx_client_set_tag(const char *tag);

/* The negative errno for a protocol error code. */
int sbx_client_errno(Sbx__V1__Code code);

/* Typed calls: each sets the body, calls and checks the reply's body. */
int sbx_hello(struct sbx_client *c, Sbx__V1__Response **out,
              struct sbx_error *e);
int sbx_shutdown(struct sbx_client *c, unsigned grace_ms, struct sbx_error *e);
int sbx_exec_start(struct sbx_client *c, Sbx__V1__ExecStart *a,
                   Sbx__V1__Response **out, struct sbx_error *e);
/* Long-poll: waits up to a->wait_ms (plus the client's timeout). */
int sbx_exec_read(struct sbx_client *c, Sbx__V1__ExecRead *a,
                  Sbx__V1__Response **out, struct sbx_error *e);
int sbx_exec_write(struct sbx_client *c, uint64_t exec_id, const void *data,
                   size_t len, bool close_stdin, struct sbx_error *e);
int sbx_exec_signal(struct sbx_client *c, uint64_t exec_id, int sig, bool group,
                    struct sbx_error *e);
int sbx_exec_resize(struct sbx_client *c, uint64_t exec_id, unsigned rows,
                    unsigned cols, struct sbx_error *e);
int sbx_exec_list(struct sbx_client *c, Sbx__V1__Response **out,
                  struct sbx_error *e);
int sbx_exec_release(struct sbx_client *c, uint64_t exec_id,
                     struct sbx_error *e);
/* What the sandbox uses; DISK walks its workspace too. The reply's source
 * is checked to be "cgroup" or "proc" (EPROTO otherwise). A sandboxd
 * without Stats answers NOT_SUPPORTED. */
int sbx_stats(struct sbx_client *c, bool disk, Sbx__V1__Response **out,
              struct sbx_error *e);

int sbx_file_stat(struct sbx_client *c, const char *path,
                  Sbx__V1__Response **out, struct sbx_error *e);
int sbx_file_read(struct sbx_client *c, Sbx__V1__FileRead *a,
                  Sbx__V1__Response **out, struct sbx_error *e);
int sbx_file_write(struct sbx_client *c, Sbx__V1__FileWrite *a,
                   Sbx__V1__Response **out, struct sbx_error *e);
int sbx_file_list(struct sbx_client *c, Sbx__V1__FileList *a,
                  Sbx__V1__Response **out, struct sbx_error *e);
int sbx_file_mkdir(struct sbx_client *c, const char *path, bool parents,
                   unsigned mode, struct sbx_error *e);
int sbx_file_remove(struct sbx_client *c, const char *path, bool recursive,
                    bool missing_ok, struct sbx_error *e);
int sbx_file_rename(struct sbx_client *c, const char *from, const char *to,
                    bool overwrite, struct sbx_error *e);
int sbx_file_chmod(struct sbx_client *c, const char *path, unsigned mode,
                   bool recursive, struct sbx_error *e);
int sbx_file_chown(struct sbx_client *c, const char *path, const char *user,
                   const char *group, bool recursive, struct sbx_error *e);
/* *EXISTS is true or false; an error is never reported as absent. */
int sbx_file_exists(struct sbx_client *c, const char *path, bool *exists,
                    Sbx__V1__FileType *type, struct sbx_error *e);

/* Codex's line ends (PatchApply.sdk_line_ends false). */
int sbx_patch_apply(struct sbx_client *c, const char *patch, const char *dir,
                    bool dry_run, Sbx__V1__Response **out, struct sbx_error *e);
/* As sbx_patch_apply, with the Agents SDK's line ends, for its
 * create_file/update_file operations (PatchApply.sdk_line_ends). */
int sbx_patch_apply_sdk(struct sbx_client *c, const char *patch,
                        const char *dir, Sbx__V1__Response **out,
                        struct sbx_error *e);

int sbx_archive_export_start(struct sbx_client *c,
                             Sbx__V1__ArchiveExportStart *a,
                             Sbx__V1__Response **out, struct sbx_error *e);
/* A chunk at OFFSET of at most MAX_BYTES (0: the server's maximum). With a
 * streamed export (a.stream, total_bytes 0 in the reply) the chunk may be
 * shorter or empty while the archive is produced; read until eof. The eof
 * reply's skipped paths are checked: at most 100, each a printable UTF-8
 * path shorter than SBX_PATH_MAX, fit to quote in a message. */
int sbx_archive_export_read(struct sbx_client *c, uint64_t handle,
                            uint64_t offset, uint32_t max_bytes,
                            Sbx__V1__Response **out, struct sbx_error *e);
/* With a.stage, the reply's staging_path (empty when sandboxd does not
 * stage) is a directory the client must leave alone until the finish. */
int sbx_archive_import_start(struct sbx_client *c,
                             Sbx__V1__ArchiveImportStart *a,
                             Sbx__V1__Response **out, struct sbx_error *e);
int sbx_archive_import_write(struct sbx_client *c, uint64_t handle,
                             uint64_t offset, const void *data, size_t len,
                             uint64_t *received, struct sbx_error *e);
int sbx_archive_import_finish(struct sbx_client *c, uint64_t handle,
                              Sbx__V1__Response **out, struct sbx_error *e);
int sbx_archive_close(struct sbx_client *c, uint64_t handle,
                      struct sbx_error *e);

int sbx_users_ensure(struct sbx_client *c, Sbx__V1__UsersEnsure *a,
                     Sbx__V1__Response **out, struct sbx_error *e);

/* True when S (LEN bytes) is valid UTF-8. */
bool sbx_utf8_valid(const char *s, size_t len);

#endif
