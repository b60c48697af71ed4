/* The docker backend's options: merging a run's over a client's, checking
 * them before anything is created, the container they describe, and
 * reading them from JSON (run_config, the CLI's flags, the API). */
#include "backends/docker/options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shared/cleanup.h"

#define LABEL_KEY_MAX 256
#define LABEL_VALUE_MAX 4096

void docker_options_merge(const struct docker_options *client,
                          const struct docker_options *run,
                          struct docker_options *out) {
  static const struct docker_options none = {0};
  const struct docker_options *c = client ? client : &none;
  const struct docker_options *r = run ? run : &none;
  *out = *c;
#define TAKE(f)                                                                \
  do {                                                                         \
    if (r->f)                                                                  \
      out->f = r->f;                                                           \
  } while (0)
#define TAKE_ARRAY(f, n)                                                       \
  do {                                                                         \
    if (r->n) {                                                                \
      out->f = r->f;                                                           \
      out->n = r->n;                                                           \
    }                                                                          \
  } while (0)
  TAKE(host);
  TAKE(image);
  TAKE(sandboxd_mode);
  TAKE(sandboxd_static);
  TAKE(root);
  TAKE(network_mode);
  TAKE_ARRAY(exposed_ports, n_exposed_ports);
  TAKE_ARRAY(labels, n_labels);
  TAKE_ARRAY(env, n_env);
  TAKE(user);
  TAKE(userns);
  TAKE(memory_bytes);
  TAKE(cpus);
  TAKE(pids_limit);
  TAKE_ARRAY(mounts, n_mounts);
  TAKE(read_only_rootfs);
  TAKE(never_pull);
#undef TAKE
#undef TAKE_ARRAY
}

static bool printable(const char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f)
      return false;
  return true;
}

/* An absolute container path other than "/", without "." or ".." parts. */
static bool good_container_path(const char *p) {
  if (!p || p[0] != '/' || strcmp(p, "/") == 0 || strlen(p) > 1024 ||
      !printable(p))
    return false;
  for (const char *s = p; *s;) {
    while (*s == '/')
      s++;
    const char *end = strchrnul(s, '/');
    size_t n = (size_t)(end - s);
    if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
      return false;
    s = end;
  }
  return true;
}

/* True when P is DIR or beneath it (both absolute, P clean). */
static bool at_or_under(const char *p, const char *dir) {
  size_t n = strlen(dir);
  return strncmp(p, dir, n) == 0 && (p[n] == '\0' || p[n] == '/');
}

static bool good_env_name(const char *s, size_t n) {
  if (n == 0 || (s[0] >= '0' && s[0] <= '9'))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
          (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
      return false;
  return true;
}

static bool all_digits(const char *s, size_t n) {
  if (n == 0 || n > 10)
    return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] < '0' || s[i] > '9')
      return false;
  return true;
}

static bool good_volume_name(const char *s) {
  if (!*s || strlen(s) > 255)
    return false;
  for (const char *p = s; *p; p++) {
    bool alnum = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                 (*p >= '0' && *p <= '9');
    if (!alnum && (p == s || (*p != '_' && *p != '.' && *p != '-')))
      return false;
  }
  return true;
}

static int check_mount(const struct docker_mount *m, size_t i, const char *root,
                       struct sbx_error *e) {
  const char *type = m->type ? m->type : "(none)";
  if (strcmp(type, "bind") && strcmp(type, "volume"))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "mounts[%zu]: type \"%s\": expected \"bind\" or "
                         "\"volume\"",
                         i, type);
  if (!good_container_path(m->target))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "mounts[%zu]: target must be an absolute path other "
                         "than \"/\", without \".\" or \"..\"",
                         i);
  if (at_or_under(m->target, DOCKER_RUN_DIR) ||
      at_or_under(DOCKER_RUN_DIR, m->target) ||
      strcmp(m->target, DOCKER_SANDBOXD_PATH) == 0 ||
      at_or_under(DOCKER_SANDBOXD_PATH, m->target))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "mounts[%zu]: target \"%s\" would cover sbx's own "
                         "%s or %s",
                         i, m->target, DOCKER_RUN_DIR, DOCKER_SANDBOXD_PATH);
  if (at_or_under(root, m->target))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "mounts[%zu]: target \"%s\" would cover the "
                         "workspace \"%s\"",
                         i, m->target, root);
  if (strcmp(type, "bind") == 0) {
    if (!m->source || m->source[0] != '/' || !printable(m->source) ||
        strchr(m->source, ','))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "mounts[%zu]: a bind mount needs an absolute host "
                           "source path",
                           i);
  } else if (m->source && !good_volume_name(m->source)) {
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "mounts[%zu]: volume name \"%s\" is not valid "
                         "([a-zA-Z0-9][a-zA-Z0-9_.-]*)",
                         i, m->source);
  }
  return 0;
}

int docker_options_check(const struct docker_options *o, struct sbx_error *e) {
  static const struct docker_options none = {0};
  if (!o)
    o = &none;
  if (o->image && (!*o->image || !printable(o->image) ||
                   strpbrk(o->image, " \t") || strlen(o->image) > 512))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "image \"%s\" is not an image reference", o->image);
  if (o->sandboxd_mode != DOCKER_SANDBOXD_AUTO &&
      o->sandboxd_mode != DOCKER_SANDBOXD_BAKED &&
      o->sandboxd_mode != DOCKER_SANDBOXD_INJECT)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown sandboxd mode %d", (int)o->sandboxd_mode);
  const char *root = o->root ? o->root : DOCKER_DEFAULT_ROOT;
  if (!good_container_path(root) || at_or_under(root, DOCKER_RUN_DIR) ||
      at_or_under(DOCKER_RUN_DIR, root))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "root \"%s\" must be an absolute path other than "
                         "\"/\" and outside %s",
                         root, DOCKER_RUN_DIR);
  if (o->network_mode && strcmp(o->network_mode, "none") != 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "network_mode \"%s\" is not supported: use \"none\" "
                         "or leave it unset for the engine's default network",
                         o->network_mode);
  if (o->n_exposed_ports && !o->exposed_ports)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "exposed_ports is missing its array");
  for (size_t i = 0; i < o->n_exposed_ports; i++) {
    if (o->exposed_ports[i] == 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "Exposed ports must be integers between 1 and "
                           "65535.");
    for (size_t j = 0; j < i; j++)
      if (o->exposed_ports[j] == o->exposed_ports[i])
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                             "exposed port %u is listed twice",
                             o->exposed_ports[i]);
  }
  if (o->network_mode && o->n_exposed_ports)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "network_mode \"none\" cannot be combined with "
                         "exposed_ports (port %u): a container without a "
                         "network publishes nothing",
                         o->exposed_ports[0]);
  if (o->n_labels && !o->labels)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "labels is missing its array");
  for (size_t i = 0; i < o->n_labels; i++) {
    const char *k = o->labels[i].key, *v = o->labels[i].value;
    if (!k || !*k || !printable(k) || strlen(k) > LABEL_KEY_MAX)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "labels[%zu]: a label key must be a non-empty "
                           "printable string of at most %d bytes",
                           i, LABEL_KEY_MAX);
    if (strcmp(k, "sbx") == 0 || strncmp(k, "sbx.", 4) == 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "label \"%s\" is reserved: sbx.* labels are set "
                           "by sbx itself",
                           k);
    if (!v || !printable(v) || strlen(v) > LABEL_VALUE_MAX)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "label \"%s\": its value must be a printable "
                           "string of at most %d bytes",
                           k, LABEL_VALUE_MAX);
    for (size_t j = 0; j < i; j++)
      if (strcmp(o->labels[j].key, k) == 0)
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                             "label \"%s\" is given twice", k);
  }
  if (o->n_env && !o->env)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "env is missing its array");
  for (size_t i = 0; i < o->n_env; i++) {
    const char *kv = o->env[i];
    const char *eq = kv ? strchr(kv, '=') : NULL;
    if (!eq || !good_env_name(kv, (size_t)(eq - kv)))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "env[%zu]: expected NAME=value with NAME made of "
                           "letters, digits and _",
                           i);
  }
  if (o->user) {
    const char *colon = strchr(o->user, ':');
    size_t ul = colon ? (size_t)(colon - o->user) : strlen(o->user);
    if (!all_digits(o->user, ul) ||
        (colon && !all_digits(colon + 1, strlen(colon + 1))))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "user \"%s\": expected a numeric uid or uid:gid "
                           "(sandboxd's token file is handed to it)",
                           o->user);
  }
  if (o->userns != DOCKER_USERNS_DEFAULT && o->userns != DOCKER_USERNS_AUTO &&
      o->userns != DOCKER_USERNS_HOST)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown userns mode %d", (int)o->userns);
  if (o->memory_bytes < 0 && o->memory_bytes != DOCKER_NO_LIMIT)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "memory must not be negative");
  if (o->cpus < 0 || !isfinite(o->cpus) || o->cpus > 4096)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "cpus must be a number from 0 (no limit) to 4096");
  if (o->pids_limit < 0 && o->pids_limit != DOCKER_NO_LIMIT)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "pids_limit must not be negative");
  if (o->n_mounts && !o->mounts)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "mounts is missing its array");
  for (size_t i = 0; i < o->n_mounts; i++) {
    int r = check_mount(&o->mounts[i], i, root, e);
    if (r < 0)
      return r;
  }
  return 0;
}

/* Sets K on OBJ to V (stolen); false when V is NULL or OBJ refuses. */
static bool put(json_t *obj, const char *k, json_t *v) {
  return v && json_object_set_new(obj, k, v) == 0;
}

static bool push(json_t *arr, json_t *v) {
  return v && json_array_append_new(arr, v) == 0;
}

static json_t *mount_json(const char *type, const char *source,
                          const char *target, bool read_only) {
  json_t *m = json_object();
  if (!m)
    return NULL;
  bool ok = put(m, "Type", json_string(type)) &&
            (!source || put(m, "Source", json_string(source))) &&
            put(m, "Target", json_string(target)) &&
            put(m, "ReadOnly", json_boolean(read_only));
  if (!ok) {
    json_decref(m);
    return NULL;
  }
  return m;
}

static json_t *string_array(const char *const *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (!push(a, json_string(v[i]))) {
      json_decref(a);
      return NULL;
    }
  return a;
}

/* The names of O's env ("A,B"), for the label that lets a later attach
 * give commands the same environment. New, or NULL when out of memory. */
static char *env_names(const struct docker_options *o) {
  size_t n = 1;
  for (size_t i = 0; i < o->n_env; i++)
    n += strcspn(o->env[i], "=") + 1;
  char *s = malloc(n), *p = s;
  for (size_t i = 0; s && i < o->n_env; i++) {
    size_t k = strcspn(o->env[i], "=");
    if (i)
      *p++ = ',';
    memcpy(p, o->env[i], k);
    p += k;
  }
  if (s)
    *p = '\0';
  return s;
}

/* What a root workload needs inside its own container, and no more: files
 * of any owner (CHOWN, DAC_OVERRIDE, FOWNER, FSETID), its own processes
 * (KILL), switching users as sandboxd's run_as, su and package scripts do
 * (SETUID, SETGID), dropping capabilities from a child's bounding set as
 * sandboxd does (SETPCAP), low ports (NET_BIND_SERVICE) and chroot, which
 * package tools use (SYS_CHROOT). Left out of Podman's defaults: SETFCAP
 * (file capabilities; no-new-privileges voids them anyway); of Docker's
 * also MKNOD, NET_RAW and AUDIT_WRITE. */
static const char *const kept_caps[] = {
    "CHOWN",  "DAC_OVERRIDE", "FOWNER",           "FSETID",     "KILL",
    "SETGID", "SETUID",       "NET_BIND_SERVICE", "SYS_CHROOT", "SETPCAP",
};

/* HostConfig's confinement and limits: the capabilities above, no
 * privilege gained through exec (setuid binaries, file capabilities), the
 * engine's default seccomp profile (nothing said), never privileged, the
 * user namespace SP chose, and O's limits or the defaults. */
static bool put_confinement(json_t *host, const struct docker_options *o,
                            const struct docker_spec *sp) {
  json_t *drop, *secopt;
  int64_t mem = o->memory_bytes ? o->memory_bytes : DOCKER_DEFAULT_MEMORY;
  int64_t pids = o->pids_limit ? o->pids_limit : DOCKER_DEFAULT_PIDS;
  return put(host, "Privileged", json_false()) &&
         put(host, "CapDrop", drop = json_array()) &&
         push(drop, json_string("ALL")) &&
         put(host, "CapAdd",
             string_array(kept_caps, SBX_ARRAY_SIZE(kept_caps))) &&
         put(host, "SecurityOpt", secopt = json_array()) &&
         push(secopt, json_string("no-new-privileges")) &&
         (!sp->userns || put(host, "UsernsMode", json_string(sp->userns))) &&
         (mem == DOCKER_NO_LIMIT || put(host, "Memory", json_integer(mem))) &&
         /* The engines read PidsLimit 0 as their own default; -1 is none. */
         put(host, "PidsLimit", json_integer(pids)) &&
         (o->cpus <= 0 || put(host, "NanoCpus",
                              json_integer((json_int_t)(o->cpus * 1e9 + 0.5))));
}

int docker_spec_json(const struct docker_options *o,
                     const struct docker_spec *sp, json_t **out,
                     struct sbx_error *e) {
  *out = NULL;
  char listen[64], token[64], listen_dir[PATH_MAX];
  (void)snprintf(listen, sizeof(listen), "ipc://%s/%s/sandboxd.sock",
                 DOCKER_RUN_DIR, DOCKER_LISTEN_DIR);
  int n = snprintf(listen_dir, sizeof(listen_dir), "%s/%s", sp->rundir,
                   DOCKER_LISTEN_DIR);
  if (n < 0 || (size_t)n >= sizeof(listen_dir))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "runtime directory path is too long");
  (void)snprintf(token, sizeof(token), "%s/%s/token", DOCKER_RUN_DIR,
                 DOCKER_LISTEN_DIR);
  char expires[32], idle[32];
  (void)snprintf(expires, sizeof(expires), "%lld", (long long)sp->expires_at);
  (void)snprintf(idle, sizeof(idle), "%u", sp->idle_timeout_s);
  const char *cmd[12] = {"--listen",     listen, "--root",    sp->root,
                         "--token-file", token,  "--seccomp", sp->seccomp};
  size_t ncmd = 8;
  if (sp->expires_at > 0) {
    cmd[ncmd++] = "--expires-at";
    cmd[ncmd++] = expires;
  }
  if (sp->idle_timeout_s > 0) {
    cmd[ncmd++] = "--idle-timeout";
    cmd[ncmd++] = idle;
  }

  _cleanup_json_ json_t *c = json_object();
  json_t *host, *labels, *mounts, *entry;
  /* Each value is made as it is put, so a failure leaks nothing. */
  if (!c || !put(c, "HostConfig", host = json_object()) ||
      !put(c, "Labels", labels = json_object()) ||
      !put(host, "Mounts", mounts = json_array()))
    goto oom;
  if (!put(c, "Entrypoint", entry = json_array()) ||
      !push(entry, json_string(sp->sandboxd)))
    goto oom;
  if (!put(c, "Image", json_string(sp->image)) ||
      !put(c, "Cmd", string_array(cmd, ncmd)) ||
      !put(c, "WorkingDir", json_string(sp->root)) ||
      !put(c, "Env", string_array(o->env, o->n_env)) ||
      (o->user && !put(c, "User", json_string(o->user))) ||
      !put(c, "StopTimeout", json_integer(2)))
    goto oom;

  for (size_t i = 0; i < o->n_labels; i++)
    if (!put(labels, o->labels[i].key, json_string(o->labels[i].value)))
      goto oom;
  for (size_t i = 0; i < sp->nlabels; i++)
    if (strcmp(sp->labels[i].key, "sbx") &&
        strncmp(sp->labels[i].key, "sbx.", 4) &&
        !put(labels, sp->labels[i].key, json_string(sp->labels[i].value)))
      goto oom;
  if (!put(labels, DOCKER_LABEL_SESSION, json_string(sp->session_id)) ||
      !put(labels, DOCKER_LABEL_MANAGED, json_string("true")) ||
      !put(labels, DOCKER_LABEL_ROOT, json_string(sp->root)))
    goto oom;
  if (o->n_env) {
    _cleanup_free_ char *names = env_names(o);
    if (!names || !put(labels, DOCKER_LABEL_ENV, json_string(names)))
      goto oom;
  }

  /* Read-only but for the one directory sandboxd listens in (rundir.c). */
  char listen_target[64];
  (void)snprintf(listen_target, sizeof(listen_target), "%s/%s", DOCKER_RUN_DIR,
                 DOCKER_LISTEN_DIR);
  if (!push(mounts, mount_json("bind", sp->rundir, DOCKER_RUN_DIR, true)) ||
      !push(mounts, mount_json("bind", listen_dir, listen_target, false)))
    goto oom;
  if (sp->inject &&
      !push(mounts, mount_json("bind", sp->inject, sp->sandboxd, true)))
    goto oom;
  /* A read-only root filesystem still needs a writable workspace. */
  if ((o->read_only_rootfs || sp->workspace_volume) &&
      !push(mounts, mount_json("volume", NULL, sp->root, false)))
    goto oom;
  for (size_t i = 0; i < o->n_mounts; i++) {
    const struct docker_mount *m = &o->mounts[i];
    if (!push(mounts, mount_json(m->type, m->source, m->target, m->read_only)))
      goto oom;
  }

  if (o->network_mode && !put(host, "NetworkMode", json_string("none")))
    goto oom;
  if (o->n_exposed_ports) {
    json_t *exposed, *bindings;
    if (!put(c, "ExposedPorts", exposed = json_object()) ||
        !put(host, "PortBindings", bindings = json_object()))
      goto oom;
    for (size_t i = 0; i < o->n_exposed_ports; i++) {
      char key[16];
      (void)snprintf(key, sizeof(key), "%u/tcp", o->exposed_ports[i]);
      json_t *list, *b;
      if (!put(exposed, key, json_object()) ||
          !put(bindings, key, list = json_array()) ||
          !push(list, b = json_object()) ||
          !put(b, "HostIp", json_string("127.0.0.1")) ||
          !put(b, "HostPort", json_string("")))
        goto oom;
    }
  }
  if (!put_confinement(host, o, sp) ||
      (o->read_only_rootfs && !put(host, "ReadonlyRootfs", json_true())))
    goto oom;
  *out = TAKE_PTR(c);
  return 0;
oom:
  return sbx_error_set(e, SBX_INTERNAL, ENOMEM,
                       "cannot build the container's description: out of "
                       "memory");
}

/* ---- from JSON: run_config, the CLI's flags, the API -------------------- */

/* --mount's text, as docker run's --mount names its fields
 * ("type=bind,source=/srv,target=/srv,readonly"), as one element of
 * mounts: {"type", "source", "target", "read_only"}. */
static int mount_flag(const char *text, json_t **out, struct sbx_error *e) {
  static const struct {
    const char *name, *key;
    bool boolean; /* read_only: true or false, or alone for true */
  } fields[] = {
      {"type", "type", false},         {"source", "source", false},
      {"src", "source", false},        {"target", "target", false},
      {"dst", "target", false},        {"destination", "target", false},
      {"readonly", "read_only", true}, {"ro", "read_only", true},
  };
  _cleanup_json_ json_t *m = json_object();
  if (!m)
    return -ENOMEM;
  for (const char *p = text; *p;) {
    size_t n = strcspn(p, ","), k = strcspn(p, "=");
    if (k > n)
      k = n;
    const char *key = NULL;
    bool boolean = false;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(fields) && !key; i++)
      if (strlen(fields[i].name) == k && strncmp(p, fields[i].name, k) == 0) {
        key = fields[i].key;
        boolean = fields[i].boolean;
      }
    if (!key)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "unknown field \"%.*s\" (expected type, source, "
                           "target and readonly)",
                           (int)k, p);
    const char *val = k < n ? p + k + 1 : NULL;
    size_t vn = val ? n - k - 1 : 0;
    json_t *v;
    if (boolean) {
      bool yes = !val || (vn == 4 && strncmp(val, "true", 4) == 0) ||
                 (vn == 1 && val[0] == '1');
      if (!yes && !(vn == 5 && strncmp(val, "false", 5) == 0) &&
          !(vn == 1 && val[0] == '0'))
        return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                             "readonly takes true or false");
      v = json_boolean(yes);
    } else if (!val) {
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s needs a value (%s=...)", key, key);
    } else {
      v = json_stringn(val, vn);
    }
    if (json_object_get(m, key)) {
      json_decref(v);
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "%s is given twice",
                           key);
    }
    if (!v || json_object_set_new(m, key, v) < 0)
      return -ENOMEM;
    p += n;
    p += *p == ',';
  }
  *out = TAKE_PTR(m);
  return 0;
}

const struct backend_option docker_option_table[] = {
    {"image", "image", "IMG",
     "the container image (default: sbx-debian:latest)", BACKEND_OPTION_STRING},
    {"network_mode", "network", "none",
     "no network but loopback (default: the engine's)", BACKEND_OPTION_STRING},
    {"host", NULL, "URL",
     "the engine's API (default: $DOCKER_HOST, else "
     "unix:///var/run/docker.sock)",
     BACKEND_OPTION_STRING, ""},
    {"sandboxd", NULL, "auto|baked|inject",
     "sandboxd from the image (baked), sbx's static build bind-mounted "
     "(inject), or baked when the image says it has one (auto)",
     BACKEND_OPTION_STRING},
    {"sandboxd_static", NULL, "PATH",
     "the static sandboxd to inject (default: $SBX_SANDBOXD_STATIC, then "
     "sandboxd-static beside sbx)",
     BACKEND_OPTION_STRING, ""},
    {"root", NULL, "PATH",
     "the workspace in the container (default: the manifest's root, "
     "/workspace unless it names one; refused when it names another)",
     BACKEND_OPTION_STRING},
    {"labels", NULL, "{KEY: VALUE}", "the container's labels (not sbx.*)",
     BACKEND_OPTION_STRING_MAP},
    {"env", "env", "NAME=VALUE",
     "environment of the container and its commands (repeatable)",
     BACKEND_OPTION_STRING_MAP},
    {"user", "user", "UID[:GID]",
     "the user sandboxd runs as (default: the "
     "image's)",
     BACKEND_OPTION_STRING},
    {"userns", "userns", "auto|host",
     "auto: a user namespace of the container's own (Podman's, or Docker's "
     "userns-remap; an error where the engine has none), in which host files "
     "of bind mounts belong to nobody; host: none (default: auto where the "
     "engine can, else none)",
     BACKEND_OPTION_STRING, "auto"},
    {"memory_bytes", "memory-bytes", "N",
     "memory limit in bytes (default: 2 GiB; 0: none)", BACKEND_OPTION_INTEGER},
    {"cpus", "cpus", "N", "CPU limit in CPUs (default and 0: none)",
     BACKEND_OPTION_NUMBER},
    {"pids_limit", "pids-limit", "N", "process limit (default: 4096; 0: none)",
     BACKEND_OPTION_INTEGER},
    {"mounts", "mount", "type=bind|volume,source=S,target=T[,readonly]",
     "a bind mount from an absolute host path, or a volume (named, or "
     "anonymous without source: removed with the sandbox); repeatable",
     BACKEND_OPTION_JSON, "", mount_flag},
    {"read_only_rootfs", "read-only-rootfs", NULL,
     "a read-only root filesystem (the workspace is a volume)",
     BACKEND_OPTION_BOOLEAN},
    {"never_pull", "never-pull", NULL,
     "a missing image is an error, not pulled", BACKEND_OPTION_BOOLEAN},
    {0},
};

/* What docker_options_parse makes: the options, and what they point to. */
struct docker_parsed {
  struct docker_options o; /* first: the pointer handed out is this */
  json_t *json;            /* the strings point into it */
  struct docker_label *labels;
  char **env; /* "NAME=value", owned */
  size_t nenv;
  struct docker_mount *mounts;
};

void docker_options_free(void *own) {
  struct docker_parsed *p = own;
  if (!p)
    return;
  for (size_t i = 0; i < p->nenv; i++)
    free(p->env[i]);
  free(p->env);
  free(p->labels);
  free(p->mounts);
  json_decref(p->json);
  free(p);
}

static int bad(struct sbx_error *e, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(struct sbx_error *e, const char *where, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL, "%s%s%s",
                       where ? where : "", where ? ": " : "", msg);
}

static int parse_labels(struct docker_parsed *p, json_t *v, const char *where,
                        struct sbx_error *e) {
  if (!json_is_object(v))
    return bad(e, where, "labels must be an object of strings");
  p->labels = calloc(json_object_size(v) + 1, sizeof(*p->labels));
  if (!p->labels)
    return -ENOMEM;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (!json_is_string(x))
      return bad(e, where, "label \"%s\": its value must be a string", k);
    p->labels[p->o.n_labels++] =
        (struct docker_label){.key = k, .value = json_string_value(x)};
  }
  p->o.labels = p->labels;
  return 0;
}

static int parse_env(struct docker_parsed *p, json_t *v, const char *where,
                     struct sbx_error *e) {
  if (!json_is_object(v))
    return bad(e, where, "env must be an object of strings");
  p->env = calloc(json_object_size(v) + 1, sizeof(*p->env));
  if (!p->env)
    return -ENOMEM;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x) {
    if (!json_is_string(x))
      return bad(e, where, "env \"%s\": its value must be a string", k);
    if (asprintf(&p->env[p->nenv], "%s=%s", k, json_string_value(x)) < 0) {
      p->env[p->nenv] = NULL;
      return -ENOMEM;
    }
    p->nenv++;
  }
  p->o.env = (const char *const *)p->env;
  p->o.n_env = p->nenv;
  return 0;
}

static int parse_mounts(struct docker_parsed *p, json_t *v, const char *where,
                        struct sbx_error *e) {
  static const char *const keys[] = {"type", "source", "target", "read_only"};
  if (!json_is_array(v))
    return bad(e, where, "mounts must be an array of objects");
  p->mounts = calloc(json_array_size(v) + 1, sizeof(*p->mounts));
  if (!p->mounts)
    return -ENOMEM;
  size_t i;
  json_t *m;
  json_array_foreach(v, i, m) {
    if (!json_is_object(m))
      return bad(e, where, "mounts[%zu] must be an object", i);
    const char *k;
    json_t *x;
    json_object_foreach(m, k, x) {
      bool known = false;
      for (size_t j = 0; j < SBX_ARRAY_SIZE(keys); j++)
        known |= strcmp(k, keys[j]) == 0;
      if (!known)
        return bad(e, where, "mounts[%zu]: unknown key \"%s\"", i, k);
      if (strcmp(k, "read_only") == 0 ? !json_is_boolean(x)
                                      : !json_is_string(x))
        return bad(e, where, "mounts[%zu]: \"%s\" must be %s", i, k,
                   strcmp(k, "read_only") == 0 ? "true or false" : "a string");
    }
    p->mounts[i] = (struct docker_mount){
        .type = json_string_value(json_object_get(m, "type")),
        .source = json_string_value(json_object_get(m, "source")),
        .target = json_string_value(json_object_get(m, "target")),
        .read_only = json_is_true(json_object_get(m, "read_only")),
    };
  }
  p->o.mounts = p->mounts;
  p->o.n_mounts = json_array_size(v);
  return 0;
}

static int parse_userns(struct docker_parsed *p, const char *s,
                        const char *where, struct sbx_error *e) {
  static const struct {
    const char *name;
    enum docker_userns mode;
  } modes[] = {
      {"auto", DOCKER_USERNS_AUTO},
      {"host", DOCKER_USERNS_HOST},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(modes); i++)
    if (strcmp(s, modes[i].name) == 0) {
      p->o.userns = modes[i].mode;
      return 0;
    }
  return bad(e, where, "userns \"%.64s\": expected \"auto\" or \"host\"", s);
}

/* A limit KEY of OBJ into *OUT: absent leaves the default (0), 0 is
 * DOCKER_NO_LIMIT, a negative one is refused. */
static int parse_limit(json_t *obj, const char *key, const char *name,
                       int64_t *out, const char *where, struct sbx_error *e) {
  json_t *v = json_object_get(obj, key);
  if (!v)
    return 0;
  json_int_t n = json_integer_value(v);
  if (n < 0)
    return bad(e, where, "%s must not be negative", name);
  *out = n == 0 ? DOCKER_NO_LIMIT : (int64_t)n;
  return 0;
}

static int parse_sandboxd_mode(struct docker_parsed *p, const char *s,
                               const char *where, struct sbx_error *e) {
  static const struct {
    const char *name;
    enum docker_sandboxd_mode mode;
  } modes[] = {
      {"auto", DOCKER_SANDBOXD_AUTO},
      {"baked", DOCKER_SANDBOXD_BAKED},
      {"inject", DOCKER_SANDBOXD_INJECT},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(modes); i++)
    if (strcmp(s, modes[i].name) == 0) {
      p->o.sandboxd_mode = modes[i].mode;
      return 0;
    }
  return bad(e, where,
             "sandboxd \"%.64s\": expected \"auto\", \"baked\" or \"inject\"",
             s);
}

/* The value of KEY in OBJ as a string, or NULL. */
static const char *str(json_t *obj, const char *key) {
  return json_string_value(json_object_get(obj, key));
}

int docker_options_parse(json_t *obj, const char *where, void **out,
                         struct sbx_error *e) {
  *out = NULL;
  struct docker_parsed *p = calloc(1, sizeof(*p));
  if (!p)
    return -ENOMEM;
  p->json = json_incref(obj);
  struct docker_options *o = &p->o;
  o->host = str(obj, "host");
  o->image = str(obj, "image");
  o->sandboxd_static = str(obj, "sandboxd_static");
  o->root = str(obj, "root");
  o->network_mode = str(obj, "network_mode");
  o->user = str(obj, "user");
  o->cpus = json_number_value(json_object_get(obj, "cpus"));
  o->read_only_rootfs = json_is_true(json_object_get(obj, "read_only_rootfs"));
  o->never_pull = json_is_true(json_object_get(obj, "never_pull"));
  json_t *v;
  int r =
      parse_limit(obj, "memory_bytes", "memory", &o->memory_bytes, where, e);
  if (r == 0)
    r = parse_limit(obj, "pids_limit", "pids_limit", &o->pids_limit, where, e);
  if (r == 0 && str(obj, "sandboxd"))
    r = parse_sandboxd_mode(p, str(obj, "sandboxd"), where, e);
  if (r == 0 && str(obj, "userns"))
    r = parse_userns(p, str(obj, "userns"), where, e);
  if (r == 0 && (v = json_object_get(obj, "labels")))
    r = parse_labels(p, v, where, e);
  if (r == 0 && (v = json_object_get(obj, "env")))
    r = parse_env(p, v, where, e);
  if (r == 0 && (v = json_object_get(obj, "mounts")))
    r = parse_mounts(p, v, where, e);
  if (r == 0) {
    struct sbx_error ce = {0};
    r = docker_options_check(o, &ce);
    if (r < 0)
      r = bad(e, where, "%s", ce.msg);
  }
  if (r == -ENOMEM)
    r = sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  if (r < 0) {
    docker_options_free(p);
    return r;
  }
  *out = p;
  return 0;
}
