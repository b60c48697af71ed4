/* sbx sandbox ls, info and port: what is known of developer-owned
 * sandboxes, and where their exposed ports are reachable. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "controller/cli/cli_internal.h"

/* ---- ls, info
 * ---------------------------------------------------------------- */

/* The record of REC as shown: status filled in, no secrets. */
static json_t *shown(json_t *rec, bool running) {
  json_t *j = json_deep_copy(rec);
  if (!j)
    return NULL;
  json_object_set_new(j, "status",
                      json_string(running ? "running" : "stopped"));
  return j;
}

static bool probe(const char *dir, const char *id) {
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
  json_t *list = NULL;
  int r = state_list(dir, &list, &e);
  if (r < 0)
    return cli_fail(c, &e, r);
  json_t *out = json_array();
  size_t i;
  json_t *rec;
  json_array_foreach(list, i, rec) {
    const char *id = json_string_value(json_object_get(rec, "id"));
    json_array_append_new(out, shown(rec, id && probe(dir, id)));
  }
  json_decref(list);
  if (c->json) {
    cli_print_json(out);
  } else {
    printf("%-12s  %-8s  %-8s  %-20s  %s\n", "ID", "BACKEND", "STATUS",
           "CREATED", "WORKSPACE");
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
  json_decref(out);
  return fflush(stdout) == 0 ? 0 : 1;
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
  json_t *hello = NULL;
  if (lifecycle_attach(&rec, &bo, &sb, &e) == 0) {
    running = sb->client && sb->backend->running(sb);
    Sbx__V1__Response *resp = NULL;
    if (running && sbx_hello(sb->client, &resp, &e) == 0) {
      hello = json_pack("{s:s, s:i, s:i}", "server_version",
                        resp->hello->server_version, "uid",
                        (int)resp->hello->uid, "gid", (int)resp->hello->gid);
      sbx_client_reply_free(resp);
    }
  }
  json_t *j = shown(rec.rec, running);
  if (hello)
    json_object_set_new(j, "sandboxd", hello);
  json_t *eps = json_object();
  for (size_t i = 0; sb && i < rec.nports; i++) {
    char ep[300], key[8];
    if (lifecycle_resolve_port(sb, rec.ports, rec.nports, rec.ports[i], ep,
                               sizeof(ep), NULL) == 0) {
      (void)snprintf(key, sizeof(key), "%u", (unsigned)rec.ports[i]);
      json_object_set_new(eps, key, json_string(ep));
    }
  }
  json_object_set_new(j, "endpoints", eps);
  if (c->json) {
    cli_print_json(j);
  } else {
    const struct manifest *m = rec.manifest;
    json_t *b =
        json_object_get(j, json_string_value(json_object_get(j, "backend")));
    printf("id:          %s\n", rec.id);
    printf("session:     %s\n",
           json_string_value(json_object_get(j, "session_id")));
    printf("backend:     %s\n",
           json_string_value(json_object_get(j, "backend")));
    printf("status:      %s\n", running ? "running" : "stopped");
    printf("created:     %s by pid %lld\n",
           json_string_value(json_object_get(j, "created_at")),
           (long long)json_integer_value(json_object_get(j, "owner_pid")));
    printf("workspace:   %s\n", json_string_value(json_object_get(j, "root")));
    printf("root:        %s\n", m->root);
    if (json_is_object(b)) {
      printf("pid:         %lld\n",
             (long long)json_integer_value(json_object_get(b, "pid")));
      printf("socket:      %s\n",
             json_string_value(json_object_get(b, "socket")));
      printf("token file:  %s\n",
             json_string_value(json_object_get(b, "token_file")));
      printf("log file:    %s\n",
             json_string_value(json_object_get(b, "log_file")));
    }
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
  json_decref(j);
  return cli_detach_done(sb, &rec, 0);
}

/* ---- port, start, stop, rm
 * ----------------------------------------------------- */

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
    json_t *j = json_pack("{s:i, s:s}", "port", port, "endpoint", ep);
    cli_print_json(j);
    json_decref(j);
  } else {
    printf("%s\n", ep);
  }
  return cli_detach_done(sb, &rec, code);
}
