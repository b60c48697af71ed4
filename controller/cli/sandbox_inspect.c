/* sbx sandbox ls, info and port: what is known of developer-owned
 * sandboxes, and where their exposed ports are reachable. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "controller/cli/cli_internal.h"
#include "shared/cleanup.h"

/* The record of REC as shown: status filled in, no secrets. New, or NULL
 * when out of memory. */
static json_t *shown(json_t *rec, bool running) {
  json_t *j = json_deep_copy(rec);
  if (j && json_object_set_new(
               j, "status", json_string(running ? "running" : "stopped")) < 0) {
    json_decref(j);
    return NULL;
  }
  return j;
}

/* The table ls prints of OUT (the records as shown). */
static void print_table(json_t *out) {
  printf("%-12s  %-8s  %-8s  %-20s  %s\n", "ID", "BACKEND", "STATUS", "CREATED",
         "WORKSPACE");
  size_t i;
  json_t *rec;
  json_array_foreach(out, i, rec) {
    const char *s[5] = {
        json_string_value(json_object_get(rec, "id")),
        json_string_value(json_object_get(rec, "backend")),
        json_string_value(json_object_get(rec, "status")),
        json_string_value(json_object_get(rec, "created_at")),
        json_string_value(json_object_get(rec, "root")),
    };
    for (int k = 0; k < 5; k++)
      if (!s[k])
        s[k] = "-";
    printf("%-12s  %-8s  %-8s  %-20s  %s\n", s[0], s[1], s[2], s[3], s[4]);
  }
}

int cli_sandbox_ls(struct cli_common *c, int argc, char **argv) {
  int u = cli_parse_common_only(c, "ls", argc, argv, NULL);
  if (u >= 0)
    return u;
  if (optind != argc)
    return cli_usage_error(c, "ls", "unexpected argument \"%s\"", argv[optind]);
  char dir[4096];
  struct sbx_error e = {0};
  if (state_dir_resolve(c->state_dir, dir, sizeof(dir), &e) < 0)
    return cli_usage_error(c, "ls", "%s", e.msg);
  _cleanup_json_ json_t *list = NULL;
  int r = state_list(dir, &list, &e);
  if (r < 0)
    return cli_fail(c, &e, r);
  _cleanup_json_ json_t *out = json_array();
  if (!out)
    return cli_fail(c, &e, -ENOMEM);
  size_t i;
  json_t *rec;
  json_array_foreach(list, i, rec) {
    const char *id = json_string_value(json_object_get(rec, "id"));
    if (json_array_append_new(out,
                              shown(rec, id && lifecycle_running(dir, id))) < 0)
      return cli_fail(c, &e, -ENOMEM);
  }
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

/* info's text for record REC shown as J (with its endpoints EPS). */
static void print_info(const struct lifecycle_record *rec, json_t *j,
                       json_t *eps, bool running) {
  const struct manifest *m = rec->manifest;
  printf("id:          %s\n", rec->id);
  printf("session:     %s\n",
         json_string_value(json_object_get(j, "session_id")));
  printf("backend:     %s\n", json_string_value(json_object_get(j, "backend")));
  printf("status:      %s\n", running ? "running" : "stopped");
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
