/* sbx sandbox ls, info and port: what is known of developer-owned
 * sandboxes, and where their exposed ports are reachable. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "controller/cli/cli_internal.h"
#include "controller/sandbox/meta.h"
#include "shared/cleanup.h"

/* The record of REC as shown: status and time left filled in, no
 * secrets. New, or NULL when out of memory. */
static json_t *shown(json_t *rec, bool running) {
  json_t *j = json_deep_copy(rec);
  if (j && meta_show(j, running, (int64_t)time(NULL)) < 0) {
    json_decref(j);
    return NULL;
  }
  return j;
}

/* What the EXPIRES column says of REC as shown: "-" without a time to
 * live, "in 5m3s" before it ends, "expired" once over. */
static void expires_text(json_t *rec, char *out, size_t n) {
  json_t *left = json_object_get(rec, "expires_in_seconds");
  if (!left) {
    (void)snprintf(out, n, "-");
    return;
  }
  json_int_t s = json_integer_value(left);
  if (s <= 0) {
    (void)snprintf(out, n, "expired");
    return;
  }
  char d[40];
  meta_format_duration((uint64_t)s, d, sizeof(d));
  (void)snprintf(out, n, "in %s", d);
}

/* The table ls prints of OUT (the records as shown). */
static void print_table(json_t *out) {
  printf("%-12s  %-16s  %-10s  %-8s  %-12s  %-20s  %s\n", "ID", "NAME",
         "BACKEND", "STATUS", "EXPIRES", "CREATED", "WORKSPACE");
  size_t i;
  json_t *rec;
  json_array_foreach(out, i, rec) {
    const char *s[6] = {
        json_string_value(json_object_get(rec, "id")),
        json_string_value(json_object_get(rec, "name")),
        json_string_value(json_object_get(rec, "backend")),
        json_string_value(json_object_get(rec, "status")),
        json_string_value(json_object_get(rec, "created_at")),
        json_string_value(json_object_get(rec, "root")),
    };
    for (int k = 0; k < 6; k++)
      if (!s[k])
        s[k] = "-";
    char ex[48];
    expires_text(rec, ex, sizeof(ex));
    printf("%-12s  %-16s  %-10s  %-8s  %-12s  %-20s  %s\n", s[0], s[1], s[2],
           s[3], ex, s[4], s[5]);
  }
}

int cli_sandbox_select(struct cli_common *c, const char *sub,
                       const struct meta_filters *fs, json_t **out) {
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return cli_usage_error(c, sub, "%s", e.msg);
  _cleanup_json_ json_t *list = NULL;
  int r = state_list(dir, &list, &e);
  if (r < 0)
    return cli_fail(c, &e, r);
  _cleanup_json_ json_t *sel = json_array();
  if (!sel)
    return cli_fail(c, &e, -ENOMEM);
  size_t i;
  json_t *rec;
  json_array_foreach(list, i, rec) {
    const char *id = json_string_value(json_object_get(rec, "id"));
    json_t *j = shown(rec, id && lifecycle_running(dir, id));
    if (!j || json_array_append_new(sel, j) < 0)
      return cli_fail(c, &e, -ENOMEM);
    if (!meta_filter_match(fs, j))
      (void)json_array_remove(sel, json_array_size(sel) - 1);
  }
  *out = TAKE_PTR(sel);
  return -1;
}

/* Takes --filter SPEC into FS: -1, or the exit status after saying why
 * not. */
int cli_take_filter(struct cli_common *c, const char *sub,
                    struct meta_filters *fs, const char *spec) {
  struct sbx_error e = {0};
  if (meta_filter_add(fs, spec, &e) < 0)
    return cli_usage_error(c, sub, "--filter: %s", e.msg);
  return -1;
}

int cli_sandbox_ls(struct cli_common *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"filter", required_argument, NULL, 'f'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  struct meta_filters fs = {0};
  int ch;
  optind = 0;
  while ((ch = getopt_long(argc, argv, "hf:", opts, NULL)) != -1) {
    int k = ch == 'f' ? cli_take_filter(c, "ls", &fs, optarg)
                      : cli_common_option(c, "ls", ch);
    if (k >= 0)
      return k;
  }
  if (optind != argc)
    return cli_usage_error(c, "ls", "unexpected argument \"%s\"", argv[optind]);
  _cleanup_json_ json_t *out = NULL;
  int k = cli_sandbox_select(c, "ls", &fs, &out);
  if (k >= 0)
    return k;
  if (c->json && cli_print_json(c, out))
    return 1;
  if (!c->json)
    print_table(out);
  return fflush(stdout) == 0 ? 0 : 1;
}

/* What info shows of the backend's part of a record, where it has it. */
static void print_backend_fields(json_t *b) {
  static const struct {
    const char *key, *label;
  } fields[] = {
      {"pid", "pid:         "},       {"socket", "socket:      "},
      {"container", "container:   "}, {"token_file", "token file:  "},
      {"log_file", "log file:    "},
  };
  for (size_t i = 0; i < SBX_ARRAY_SIZE(fields); i++) {
    json_t *v = json_object_get(b, fields[i].key);
    if (json_is_integer(v))
      printf("%s%lld\n", fields[i].label, (long long)json_integer_value(v));
    else if (json_is_string(v))
      printf("%s%s\n", fields[i].label, json_string_value(v));
  }
}

/* What info shows of the operator's labels, time to live and idle
 * timeout in J, where it has them. */
static void print_meta(json_t *j) {
  json_t *ttl = json_object_get(j, "ttl_seconds");
  char d[40], ex[48];
  if (ttl) {
    meta_format_duration((uint64_t)json_integer_value(ttl), d, sizeof(d));
    expires_text(j, ex, sizeof(ex));
    printf("ttl:         %s, ends %s (%s)\n", d,
           json_string_value(json_object_get(j, "expires_at")), ex);
  }
  json_t *idle = json_object_get(j, "idle_timeout_seconds");
  if (idle) {
    meta_format_duration((uint64_t)json_integer_value(idle), d, sizeof(d));
    printf("idle stop:   after %s without a request\n", d);
  }
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(j, "labels"), k, v) {
    printf("label:       %s=%s\n", k, json_string_value(v));
  }
}

/* info's text for record REC shown as J (with its endpoints EPS). */
static void print_info(const struct lifecycle_record *rec, json_t *j,
                       json_t *eps, bool running) {
  const struct manifest *m = rec->manifest;
  printf("id:          %s\n", rec->id);
  json_t *name = json_object_get(j, "name");
  if (name)
    printf("name:        %s\n", json_string_value(name));
  printf("session:     %s\n",
         json_string_value(json_object_get(j, "session_id")));
  printf("backend:     %s\n", json_string_value(json_object_get(j, "backend")));
  printf("status:      %s\n", json_string_value(json_object_get(j, "status")));
  print_meta(j);
  printf("created:     %s by pid %lld\n",
         json_string_value(json_object_get(j, "created_at")),
         (long long)json_integer_value(json_object_get(j, "owner_pid")));
  printf("workspace:   %s\n", json_string_value(json_object_get(j, "root")));
  printf("root:        %s\n", m->root);
  print_backend_fields(
      json_object_get(j, json_string_value(json_object_get(j, "backend"))));
  printf("entries:     %zu\n", m->nentries);
  for (size_t i = 0; i < m->nentries; i++)
    printf("  %s (%s)\n", m->entries[i].path, m->entries[i].type_name);
  printf("users:      ");
  for (size_t i = 0; i < m->nusers; i++)
    printf(" %s", m->users[i]);
  printf("%s\nenvironment:", m->nusers ? "" : " -");
  for (size_t i = 0; i < m->nenv; i++)
    printf(" %s", m->env[i].name);
  printf("%s\nports:      ", m->nenv ? "" : " -");
  const char *k;
  json_t *v;
  json_object_foreach(eps, k, v) printf(" %s -> %s", k, json_string_value(v));
  printf("%s\n", json_object_size(eps) ? "" : " -");
}

/* What info adds to the record of a running sandbox SB: sandboxd's Hello
 * and where each exposed port is reachable. 0 or -ENOMEM. */
static int add_live(struct sandbox *sb, const struct lifecycle_record *rec,
                    bool running, json_t *j, json_t *eps) {
  Sbx__V1__Response *resp = NULL;
  struct sbx_error e = {0};
  if (running && sbx_hello(sb->client, &resp, &e) == 0) {
    json_t *hello = json_pack(
        "{s:s, s:i, s:i}", "server_version", resp->hello->server_version, "uid",
        (int)resp->hello->uid, "gid", (int)resp->hello->gid);
    sbx_client_reply_free(resp);
    if (json_object_set_new(j, "sandboxd", hello) < 0)
      return -ENOMEM;
  }
  for (size_t i = 0; i < rec->nports; i++) {
    char ep[300], key[8];
    if (lifecycle_resolve_port(sb, rec->ports, rec->nports, rec->ports[i], ep,
                               sizeof(ep), NULL) < 0)
      continue;
    (void)snprintf(key, sizeof(key), "%u", (unsigned)rec->ports[i]);
    if (json_object_set_new(eps, key, json_string(ep)) < 0)
      return -ENOMEM;
  }
  return 0;
}

int cli_sandbox_info(struct cli_common *c, int argc, char **argv) {
  int u = cli_parse_ids(c, "info", argc, argv, 1, NULL);
  if (u >= 0)
    return u;
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return cli_usage_error(c, "info", "%s", e.msg);
  struct lifecycle_record rec;
  int r = lifecycle_load(dir, argv[optind], &rec, &e);
  if (r < 0)
    return cli_fail(c, &e, r);
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  bool running = false;
  if (lifecycle_attach(&rec, &bo, &sb, &e) == 0)
    running = sb->client && sb->backend->running(sb);
  else
    sb = NULL;
  _cleanup_json_ json_t *j = shown(rec.rec, running);
  json_t *eps = json_object();
  if (!j || json_object_set_new(j, "endpoints", eps) < 0 ||
      (sb && add_live(sb, &rec, running, j, eps) < 0))
    return cli_detach_done(sb, &rec, cli_fail(c, &e, -ENOMEM));
  if (c->json)
    return cli_detach_done(sb, &rec, cli_print_json(c, j));
  print_info(&rec, j, eps, running);
  return cli_detach_done(sb, &rec, 0);
}

int cli_sandbox_port(struct cli_common *c, int argc, char **argv) {
  int u = cli_parse_ids(c, "port", argc, argv, 2, NULL);
  if (u >= 0)
    return u;
  uint16_t port = 0;
  struct sbx_error e = {0};
  if (lifecycle_parse_port(argv[optind + 1], &port, &e) < 0)
    return cli_usage_error(c, "port", "%s", e.msg);
  char dir[4096];
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return cli_usage_error(c, "port", "%s", e.msg);
  struct lifecycle_record rec;
  int r = lifecycle_load(dir, argv[optind], &rec, &e);
  if (r < 0)
    return cli_fail(c, &e, r);
  struct sandbox *sb = NULL;
  struct backend_options bo = {0};
  int code = 0;
  r = lifecycle_attach(&rec, &bo, &sb, &e);
  char ep[300];
  if (r == 0)
    r = lifecycle_resolve_port(sb, rec.ports, rec.nports, port, ep, sizeof(ep),
                               &e);
  if (r < 0) {
    code = cli_fail(c, &e, r);
  } else if (c->json) {
    _cleanup_json_ json_t *j =
        json_pack("{s:i, s:s}", "port", port, "endpoint", ep);
    code = cli_print_json(c, j);
  } else {
    printf("%s\n", ep);
  }
  return cli_detach_done(sb, &rec, code);
}
