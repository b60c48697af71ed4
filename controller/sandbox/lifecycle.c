#include "controller/sandbox/lifecycle.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/registry.h"
#include "controller/config/skills.h"
#include "controller/sandbox/meta.h"
#include "shared/cleanup.h"
#include "shared/log.h"

int lifecycle_parse_port(const char *s, uint16_t *out, struct sbx_error *e) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || !*s || *end || v < 1 || v > 65535)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "port \"%.32s\": Exposed ports must be integers "
                         "between 1 and 65535.",
                         s);
  *out = (uint16_t)v;
  return 0;
}

int lifecycle_check_manifest(const struct manifest *m, const struct backend *b,
                             struct sbx_error *e) {
  for (size_t i = 0; i < m->nentries; i++) {
    const struct manifest_entry *en = &m->entries[i];
    if (en->type == MANIFEST_CLOUD_MOUNT)
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "entry \"%s\": %s is not supported by backend %s",
                           en->path, en->type_name, b->name);
    if (en->type == MANIFEST_MOUNT && !(b->features & BACKEND_LOCAL_BIND))
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "entry \"%s\": local_bind mounts are not supported "
                           "by backend %s",
                           en->path, b->name);
    if (en->type == MANIFEST_MOUNT && en->read_only &&
        !(b->features & BACKEND_READ_ONLY_BIND))
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "entry \"%s\": backend %s cannot enforce a "
                           "read-only local_bind mount (commands could still "
                           "write); set \"read_only\": false",
                           en->path, b->name);
  }
  for (size_t i = 0; i < m->ngrants; i++)
    if (m->grants[i].host_path && !(b->features & BACKEND_HOST_PATH_GRANTS))
      return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                           "extra_path_grants[%zu] \"%s\": \"host_path\" is "
                           "not supported by backend %s (the sandbox path "
                           "is the host path)",
                           i, m->grants[i].path, b->name);
  return 0;
}

int lifecycle_create(const struct lifecycle_options *o,
                     const struct manifest *m, bool detached,
                     const char *token_path, const char *log_path,
                     struct sandbox **out, struct sbx_error *e) {
  int r = lifecycle_check_manifest(m, o->backend, e);
  if (r < 0)
    return r;
  _cleanup_free_ struct sandbox_grant *grants =
      calloc(m->ngrants + 1, sizeof(*grants));
  _cleanup_free_ struct sandbox_bind *binds =
      calloc(m->nentries + 1, sizeof(*binds));
  if (!grants || !binds)
    return -ENOMEM;
  struct sandbox_spec spec = {.root = m->root,
                              .grants = grants,
                              .binds = binds,
                              .detached = detached,
                              .token_path = token_path,
                              .log_path = log_path,
                              .labels = o->labels,
                              .nlabels = o->nlabels,
                              .expires_at = o->expires_at,
                              .idle_timeout_s = o->idle_timeout_s};
  for (size_t i = 0; i < m->ngrants; i++)
    grants[spec.ngrants++] =
        (struct sandbox_grant){m->grants[i].path, m->grants[i].read_only};
  for (size_t i = 0; i < m->nentries; i++)
    if (m->entries[i].type == MANIFEST_MOUNT)
      binds[spec.nbinds++] = (struct sandbox_bind){
          m->entries[i].path, m->entries[i].source, m->entries[i].read_only};
  struct sandbox *sb = NULL;
  r = o->backend->create(&o->bo, &spec, &sb, e);
  if (r < 0)
    return r;
  r = materialize_manifest(sb, m, &o->mo, e);
  if (r < 0) {
    struct sbx_error ce = {0};
    if (sb->backend->close(sb, &ce) < 0)
      log_warn("closing the half-built sandbox: %s", ce.msg);
    return r;
  }
  *out = sb;
  return 0;
}

/* The exposed PORTS as a JSON array (new), or NULL when out of memory. */
static json_t *ports_json(const uint16_t *ports, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_integer(ports[i])) < 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

const char **lifecycle_snapshot_excludes(const struct manifest *m) {
  const char **keep = calloc(m->nentries + 1, sizeof(char *));
  for (size_t i = 0, n = 0; keep && i < m->nentries; i++)
    if (m->entries[i].ephemeral || m->entries[i].type == MANIFEST_MOUNT ||
        m->entries[i].type == MANIFEST_CLOUD_MOUNT)
      keep[n++] = m->entries[i].path;
  return keep;
}

/* lifecycle_snapshot_excludes as a JSON array (new), or NULL when out of
 * memory. */
static json_t *snapshot_excludes(const struct manifest *m) {
  _cleanup_free_ const char **keep = lifecycle_snapshot_excludes(m);
  json_t *a = keep ? json_array() : NULL;
  for (size_t i = 0; a && keep[i]; i++)
    if (json_array_append_new(a, json_string(keep[i])) < 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

int lifecycle_save(const char *dir, const char *id, const struct sandbox *sb,
                   const struct manifest *m, const uint16_t *ports,
                   size_t nports, const char *created_at, long owner_pid,
                   struct sbx_error *e) {
  return lifecycle_save_extra(dir, id, sb, m, ports, nports, created_at,
                              owner_pid, NULL, e);
}

int lifecycle_save_extra(const char *dir, const char *id,
                         const struct sandbox *sb, const struct manifest *m,
                         const uint16_t *ports, size_t nports,
                         const char *created_at, long owner_pid, json_t *extra,
                         struct sbx_error *e) {
  if (!sb->backend->save)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "backend %s cannot save a sandbox", sb->backend->name);
  _cleanup_json_ json_t *rec =
      json_pack("{s:i, s:s, s:s, s:s, s:s, s:I, s:s, s:o, s:o, s:o, s:{}}",
                "version", 1, "id", id, "session_id", sb->session_id, "backend",
                sb->backend->name, "created_at", created_at, "owner_pid",
                (json_int_t)owner_pid, "root", sb->root, "manifest",
                manifest_to_json(m), "exposed_ports", ports_json(ports, nports),
                "snapshot_excludes", snapshot_excludes(m), sb->backend->name);
  if (!rec || (extra && json_object_update(rec, extra) < 0))
    return -ENOMEM;
  int r = sb->backend->save(sb, json_object_get(rec, sb->backend->name));
  if (r < 0)
    return r;
  return state_write(dir, id, rec, e);
}

void lifecycle_record_clear(struct lifecycle_record *r) {
  json_decref(r->rec);
  manifest_free(r->manifest);
  memset(r, 0, sizeof(*r));
}

int lifecycle_load(const char *dir, const char *want,
                   struct lifecycle_record *r, struct sbx_error *e) {
  memset(r, 0, sizeof(*r));
  (void)snprintf(r->dir, sizeof(r->dir), "%s", dir);
  int k = state_read(dir, want, &r->rec, r->id, e);
  if (k < 0)
    return k;
  json_t *m = json_object_get(r->rec, "manifest");
  char where[256];
  (void)snprintf(where, sizeof(where), "sandbox %s: manifest", r->id);
  _cleanup_json_ json_t *empty = json_object();
  k = manifest_parse(m ? m : empty, where, &r->manifest, e);
  if (k < 0) {
    lifecycle_record_clear(r);
    return k;
  }
  size_t i;
  json_t *p;
  json_array_foreach(json_object_get(r->rec, "exposed_ports"), i, p) {
    if (r->nports < LIFECYCLE_MAX_PORTS && json_is_integer(p))
      r->ports[r->nports++] = (uint16_t)json_integer_value(p);
  }
  return 0;
}

int lifecycle_attach(const struct lifecycle_record *r,
                     const struct backend_options *bo, struct sandbox **out,
                     struct sbx_error *e) {
  const char *name = json_string_value(json_object_get(r->rec, "backend"));
  const struct backend *b = backend_find(name ? name : "");
  if (!b || !b->attach)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "sandbox %s: backend \"%s\" cannot attach", r->id,
                         name ? name : "?");
  json_t *obj = json_object_get(r->rec, b->name);
  if (!json_is_object(obj))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "sandbox %s: the record lacks \"%s\"", r->id, b->name);
  struct sandbox *sb = NULL;
  int k = b->attach(bo, obj, &sb, e);
  if (k < 0)
    return k;
  const char *sid = json_string_value(json_object_get(r->rec, "session_id"));
  if (sid)
    (void)snprintf(sb->session_id, sizeof(sb->session_id), "%s", sid);
  for (size_t i = 0; i < r->manifest->nenv && k == 0; i++)
    k = sandbox_setenv(sb, r->manifest->env[i].name, r->manifest->env[i].value);
  if (k < 0) {
    b->detach(sb);
    return k;
  }
  *out = sb;
  return 0;
}

bool lifecycle_running(const char *dir, const char *id) {
  struct lifecycle_record rec;
  struct sbx_error e = {0};
  if (lifecycle_load(dir, id, &rec, &e) < 0)
    return false;
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  bool running = false;
  if (lifecycle_attach(&rec, &bo, &sb, &e) == 0) {
    running = sb->client && sb->backend->running(sb);
    sb->backend->detach(sb);
  }
  lifecycle_record_clear(&rec);
  return running;
}

/* Adds BASE (absolute) to the record ID of DIR as "base_dir". */
static int put_base_dir(const char *dir, const char *id, const char *abs,
                        struct sbx_error *e) {
  _cleanup_json_ json_t *rec = NULL;
  char got[STATE_ID_LEN + 1];
  int r = state_read(dir, id, &rec, got, e);
  if (r < 0)
    return r;
  if (json_object_set_new(rec, "base_dir", json_string(abs)) < 0)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  return state_write(dir, got, rec, e);
}

int lifecycle_resave(struct lifecycle_record *r, const struct sandbox *sb,
                     const struct manifest *m, struct sbx_error *e) {
  const char *created =
      json_string_value(json_object_get(r->rec, "created_at"));
  json_int_t owner = json_integer_value(json_object_get(r->rec, "owner_pid"));
  _cleanup_json_ json_t *extra = json_object();
  if (!extra)
    return -ENOMEM;
  for (size_t i = 0; meta_record_keys[i]; i++) {
    json_t *v = json_object_get(r->rec, meta_record_keys[i]);
    if (v && json_object_set(extra, meta_record_keys[i], v) < 0)
      return -ENOMEM;
  }
  /* And the base directory a restore resolves local sources against. */
  const char *base = lifecycle_base_dir(r);
  if (base && json_object_set_new(extra, "base_dir", json_string(base)) < 0)
    return -ENOMEM;
  return lifecycle_save_extra(r->dir, r->id, sb, m ? m : r->manifest, r->ports,
                              r->nports, created ? created : "", (long)owner,
                              extra, e);
}

int lifecycle_check_cwd(struct sandbox *sb, const char *cwd, const char *run_as,
                        struct sbx_error *e) {
  Sbx__V1__Response *resp = NULL;
  struct sbx_error ie = {0};
  int r = sbx_file_stat(sb->client, cwd, &resp, &ie);
  bool dir = r == 0 &&
             resp->file_stat->type == SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY;
  sbx_client_reply_free(resp);
  if (dir && run_as) {
    /* Can RUN_AS enter and read it? Ask a shell running as that user. */
    Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
    char *argv[] = {"/bin/sh", "-c", "test -x . && test -r .", NULL};
    st.argv = argv;
    st.n_argv = 3;
    st.cwd = (char *)cwd;
    st.run_as = (char *)run_as;
    st.timeout_ms = 10000;
    st.no_stdin = true;
    st.wait_ms = 15000; /* past the timeout: the reply says how it ended */
    r = sbx_exec_start(sb->client, &st, &resp, &ie);
    if (r < 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOTDIR,
                           "Sandbox working directory \"%s\" does not exist "
                           "or is not accessible (as user \"%s\": %s).",
                           cwd, run_as, ie.msg);
    uint64_t id = resp->exec_start->exec_id;
    bool have = resp->exec_start->output != NULL;
    if (!have) {
      /* A sandboxd that did not wait: read until the exit. */
      sbx_client_reply_free(resp);
      resp = NULL;
      Sbx__V1__ExecRead rd = SBX__V1__EXEC_READ__INIT;
      rd.exec_id = id;
      rd.wait_ms = 15000;
      rd.until_exit = true;
      have = sbx_exec_read(sb->client, &rd, &resp, &ie) == 0;
    }
    const Sbx__V1__ExecReadReply *x =
        !have ? NULL
        : resp->body_case == SBX__V1__RESPONSE__BODY_EXEC_START
            ? resp->exec_start->output
            : resp->exec_read;
    bool ok = x && x->exited && x->exit_code == 0 && x->signal == 0;
    sbx_client_reply_free(resp);
    (void)sbx_exec_release(sb->client, id, &ie);
    if (!ok)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EACCES,
                           "Sandbox working directory \"%s\" does not exist "
                           "or is not accessible (user \"%s\" cannot enter "
                           "and read it).",
                           cwd, run_as);
    return 0;
  }
  if (!dir)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOTDIR,
                         "Sandbox working directory \"%s\" does not exist or "
                         "is not accessible.",
                         cwd);
  return 0;
}

int lifecycle_resolve_port(const struct sandbox *sb, const uint16_t *ports,
                           size_t nports, unsigned port, char *out, size_t n,
                           struct sbx_error *e) {
  if (port < 1 || port > 65535)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "Exposed ports must be integers between 1 and "
                         "65535.");
  bool found = false;
  for (size_t i = 0; i < nports; i++)
    found |= ports[i] == port;
  if (!found)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s sandbox was not configured to expose port %u.",
                         sb->backend->name, port);
  if (!sb->backend->resolve_port)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, EOPNOTSUPP,
                         "backend %s cannot resolve exposed ports",
                         sb->backend->name);
  char host[256];
  unsigned hp = 0;
  int r = sb->backend->resolve_port(sb, port, host, sizeof(host), &hp, e);
  if (r < 0)
    return r;
  (void)snprintf(out, n, strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, hp);
  return 0;
}

/* The SDK's processManifest of a skills capability with "from": the
 * source becomes the entry at skills_path of M (borrowed, or NULL). *OUT
 * is new. */
static int with_skills(const struct agent *a, json_t *m, json_t **res) {
  _cleanup_json_ json_t *out = m ? json_deep_copy(m) : json_object();
  if (!out)
    return -ENOMEM;
  json_t *entries = json_object_get(out, "entries");
  if (!entries) {
    entries = json_object();
    if (json_object_set_new(out, "entries", entries) < 0)
      return -ENOMEM;
  }
  /* No entry overlaps skills_path: the agent file was checked so. */
  if (json_object_set(entries, a->skills->skills_path, a->skills->from) < 0)
    return -ENOMEM;
  *res = TAKE_PTR(out);
  return 0;
}

int lifecycle_agent_manifest(const struct agent *a, struct manifest **out,
                             struct sbx_error *e) {
  int r;
  _cleanup_json_ json_t *sk = NULL;
  json_t *src = a->default_manifest;
  if (a->skills && a->skills->from) {
    if ((r = with_skills(a, src, &sk)) < 0)
      return r;
    src = sk;
  }
  json_t *mj = agent_memory_manifest(a, src);
  if (!mj)
    return -ENOMEM;
  if (src) {
    char where[600];
    (void)snprintf(where, sizeof(where), "%s: default_manifest", a->path);
    r = manifest_parse(mj, where, out, e);
  } else {
    r = manifest_parse(mj, "manifest", out, e);
  }
  json_decref(mj);
  if (r == 0 && a->run_as && (r = manifest_add_user(*out, a->run_as)) < 0)
    *out = manifest_free(*out);
  return r;
}

int lifecycle_apply_to_live(const struct lifecycle_options *o,
                            struct sandbox *sb, const struct manifest *live,
                            const struct agent *a, struct lifecycle_record *rec,
                            struct manifest **out, struct sbx_error *e) {
  if (a->run_as) {
    bool found = false;
    for (size_t i = 0; i < live->nusers && !found; i++)
      found = strcmp(live->users[i], a->run_as) == 0;
    if (!found)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "Live sandbox sessions cannot change users: "
                           "run_as \"%s\" of agent \"%s\" is not a user of "
                           "the sandbox (create it with --agent, or list the "
                           "user in its manifest)",
                           a->run_as, a->name);
  }
  json_t *pj = manifest_to_json(live);
  if (!pj)
    return -ENOMEM;
  int r = manifest_parse(pj, "live sandbox manifest", out, e);
  json_decref(pj);
  if (r < 0)
    return r;
  if (!a->default_manifest && !(a->skills && a->skills->from))
    return 0;
  struct manifest *next = NULL;
  r = lifecycle_agent_manifest(a, &next, e);
  if (r < 0)
    goto fail;
  size_t *added = NULL, nadded = 0;
  r = manifest_delta(live, next, &added, &nadded, e);
  for (size_t i = 0; r == 0 && i < next->nenv; i++)
    if (next->env[i].ephemeral)
      r = sandbox_setenv(sb, next->env[i].name, next->env[i].value);
  if (r == 0 && nadded > 0)
    r = materialize_entries(sb, next, added, nadded, &o->mo, e);
  free(added);
  if (r == 0) {
    manifest_free(*out);
    *out = next;
    next = NULL;
    if (nadded > 0 && rec)
      r = lifecycle_resave(rec, sb, *out, e);
  }
  manifest_free(next);
  if (r < 0)
    goto fail;
  return 0;
fail:
  *out = manifest_free(*out);
  return r;
}

int lifecycle_save_base_dir(const char *dir, const char *id, const char *base,
                            struct sbx_error *e) {
  char abs[PATH_MAX];
  if (!realpath(base, abs))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, errno,
                         "cannot resolve the base directory \"%s\": %s", base,
                         strerror(errno));
  return put_base_dir(dir, id, abs, e);
}

const char *lifecycle_base_dir(const struct lifecycle_record *r) {
  return json_string_value(json_object_get(r->rec, "base_dir"));
}

bool lifecycle_has_local_sources(const struct manifest *m) {
  for (size_t i = 0; i < m->nentries; i++)
    if (m->entries[i].type == MANIFEST_LOCAL_FILE ||
        m->entries[i].type == MANIFEST_LOCAL_DIR)
      return true;
  return false;
}
