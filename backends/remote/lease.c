/* The lease on a remote endpoint, and leaving it clean.
 *
 * Why a lease file on the endpoint: every controller that can claim an
 * endpoint talks to its sandboxd, but not every one shares a state store
 * (two laptops, a laptop and sbx serve), so the only place all of them see
 * is the endpoint itself. sandboxd's FileWrite with WRITE_CREATE is an
 * O_EXCL create: of two controllers that write the same lease file at once
 * exactly one succeeds. The file lives beside the workspace (ROOT/../lease,
 * which sandboxd must grant), not in it, so snapshots, the agent's view of
 * its workspace and the wipe at release never touch it. */
#include "backends/remote/remote_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shared/cleanup.h"

int remote_lease_take(struct sbx_client *c, const struct remote *r,
                      const char *session, struct sbx_error *e) {
  char host[256] = "";
  (void)gethostname(host, sizeof(host) - 1);
  _cleanup_json_ json_t *o =
      json_pack("{s:s, s:s, s:i, s:I}", "session", session, "host", host, "pid",
                (int)getpid(), "claimed_at", (json_int_t)time(NULL));
  _cleanup_free_ char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  if (!text)
    return -ENOMEM;
  Sbx__V1__FileWrite w = SBX__V1__FILE_WRITE__INIT;
  w.path = r->lease;
  w.data.data = (uint8_t *)text;
  w.data.len = strlen(text);
  w.mode = SBX__V1__WRITE_MODE__WRITE_CREATE;
  w.perm = 0600;
  Sbx__V1__Response *rep = NULL;
  struct sbx_error we = {0};
  int k = sbx_file_write(c, &w, &rep, &we);
  sbx_client_reply_free(rep);
  if (k == -EEXIST)
    return sbx_error_set(e, SBX_CONFLICT, EBUSY, "%s is claimed", r->ep.url);
  if (k < 0)
    return sbx_error_set(e, we.code, -k, "cannot claim %s: %s", r->ep.url,
                         we.msg);
  return 0;
}

int remote_lease_check(struct sbx_client *c, const struct remote *r,
                       const char *session, struct sbx_error *e) {
  Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
  rd.path = r->lease;
  Sbx__V1__Response *rep = NULL;
  struct sbx_error re = {0};
  int k = sbx_file_read(c, &rd, &rep, &re);
  if (k < 0)
    return sbx_error_set(e, k == -ENOENT ? SBX_NOT_FOUND : re.code, -k,
                         "%s holds no lease of this sandbox: %s", r->ep.url,
                         re.msg);
  const ProtobufCBinaryData *d = &rep->file_read->data;
  json_error_t je;
  json_t *o = json_loadb((const char *)d->data, d->len, 0, &je);
  sbx_client_reply_free(rep);
  const char *s = json_string_value(json_object_get(o, "session"));
  bool ours = s && strcmp(s, session) == 0;
  json_decref(o);
  if (!ours)
    return sbx_error_set(e, SBX_CONFLICT, EBUSY,
                         "%s is claimed by another sandbox now", r->ep.url);
  return 0;
}

int remote_lease_drop(struct sbx_client *c, const struct remote *r,
                      struct sbx_error *e) {
  return sbx_file_remove(c, r->lease, false, true, e);
}

int remote_kill_all(struct sbx_client *c, struct sbx_error *e) {
  Sbx__V1__Response *rep = NULL;
  int k = sbx_exec_list(c, &rep, e);
  if (k < 0)
    return k;
  Sbx__V1__ExecListReply *l = rep->exec_list;
  for (size_t i = 0; k == 0 && i < l->n_execs; i++) {
    if (l->execs[i]->running)
      k = sbx_exec_signal(c, l->execs[i]->exec_id, SIGKILL, true, e);
  }
  /* A process just killed may not be reaped yet: its record is refused
   * (CONFLICT) and sandboxd forgets it in its own time. */
  for (size_t i = 0; k == 0 && i < l->n_execs; i++) {
    struct sbx_error ignored = {0};
    (void)sbx_exec_release(c, l->execs[i]->exec_id, &ignored);
  }
  sbx_client_reply_free(rep);
  return k;
}

int remote_wipe(struct sbx_client *c, const char *root, struct sbx_error *e) {
  for (int round = 0; round < 64; round++) {
    Sbx__V1__FileList fl = SBX__V1__FILE_LIST__INIT;
    fl.path = (char *)root;
    fl.depth = 1;
    Sbx__V1__Response *rep = NULL;
    int k = sbx_file_list(c, &fl, &rep, e);
    if (k < 0)
      return k;
    Sbx__V1__FileListReply *l = rep->file_list;
    size_t n = l->n_entries;
    for (size_t i = 0; k == 0 && i < n; i++) {
      char p[4096];
      if ((size_t)snprintf(p, sizeof(p), "%s/%s", root, l->entries[i]->path) >=
          sizeof(p))
        k = sbx_error_set(e, SBX_INTERNAL, ENAMETOOLONG,
                          "a path in the workspace is too long");
      else
        k = sbx_file_remove(c, p, true, true, e);
    }
    bool more = l->truncated;
    sbx_client_reply_free(rep);
    if (k < 0 || !more)
      return k;
  }
  return sbx_error_set(e, SBX_INTERNAL, EIO,
                       "the workspace \"%s\" could not be emptied", root);
}
