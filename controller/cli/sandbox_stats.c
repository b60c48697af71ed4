/* sbx sandbox stats: what a running sandbox uses, as its sandboxd reads
 * it (the Stats RPC): CPU time, memory, processes and workspace disk. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "controller/cli/cli_internal.h"
#include "controller/sandbox/meta.h"
#include "shared/cleanup.h"

/* V bytes as "12.3 MiB" into OUT. */
static void human_bytes(uint64_t v, char *out, size_t n) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double d = (double)v;
  size_t u = 0;
  while (d >= 1024 && u + 1 < SBX_ARRAY_SIZE(units)) {
    d /= 1024;
    u++;
  }
  (void)snprintf(out, n, u ? "%.1f %s" : "%.0f %s", d, units[u]);
}

/* The reply as --json prints it: unknown numbers (0 where the protocol
 * says "not known") are null. New, or NULL when out of memory. */
static json_t *stats_json(const char *id, const Sbx__V1__StatsReply *s) {
  json_t *j = json_pack(
      "{s:s, s:s, s:I, s:I, s:I, s:i, s:I, s:I, s:b, s:I}", "id", id, "source",
      s->source, "cpu_usec", (json_int_t)s->cpu_usec, "memory_bytes",
      (json_int_t)s->memory_bytes, "memory_peak_bytes",
      (json_int_t)s->memory_peak_bytes, "pids", (int)s->pids, "disk_bytes",
      (json_int_t)s->disk_bytes, "disk_entries", (json_int_t)s->disk_entries,
      "disk_truncated", s->disk_truncated, "idle_ms", (json_int_t)s->idle_ms);
  if (!j)
    return NULL;
  struct {
    const char *key;
    uint64_t v;
  } opt[] = {{"memory_peak_bytes", s->memory_peak_bytes},
             {"memory_limit_bytes", s->memory_limit_bytes},
             {"pids_limit", s->pids_limit}};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(opt); i++)
    if (json_object_set_new(j, opt[i].key,
                            opt[i].v ? json_integer((json_int_t)opt[i].v)
                                     : json_null()) < 0) {
      json_decref(j);
      return NULL;
    }
  return j;
}

static void print_stats(const char *id, const Sbx__V1__StatsReply *s) {
  char a[32], b[32], c[32];
  printf("id:          %s\n", id);
  printf("source:      %s\n", s->source);
  printf("cpu:         %.2f s\n", (double)s->cpu_usec / 1e6);
  human_bytes(s->memory_bytes, a, sizeof(a));
  human_bytes(s->memory_peak_bytes, b, sizeof(b));
  human_bytes(s->memory_limit_bytes, c, sizeof(c));
  printf("memory:      %s (peak %s, limit %s)\n", a,
         s->memory_peak_bytes ? b : "-", s->memory_limit_bytes ? c : "-");
  if (s->pids_limit)
    printf("pids:        %u (limit %u)\n", s->pids, s->pids_limit);
  else
    printf("pids:        %u (limit -)\n", s->pids);
  human_bytes(s->disk_bytes, a, sizeof(a));
  printf("disk:        %s in %llu entries of the workspace%s\n", a,
         (unsigned long long)s->disk_entries,
         s->disk_truncated ? " (stopped counting there)" : "");
  char idle[40];
  meta_format_duration(s->idle_ms / 1000, idle, sizeof(idle));
  printf("idle:        %s\n", s->idle_ms ? idle : "-");
}

int cli_sandbox_stats(struct cli_common *c, int argc, char **argv) {
  int u = cli_parse_ids(c, "stats", argc, argv, 1, NULL);
  if (u >= 0)
    return u;
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  int k = cli_attach_for(c, "stats", argv[optind], &rec, &sb);
  if (k)
    return k;
  Sbx__V1__Response *resp = NULL;
  struct sbx_error e = {0};
  int r = sbx_stats(sb->client, true, &resp, &e);
  if (r < 0)
    return cli_detach_done(sb, &rec, cli_fail(c, &e, r));
  int code = 0;
  if (c->json) {
    _cleanup_json_ json_t *j = stats_json(rec.id, resp->stats);
    code = cli_print_json(c, j);
  } else {
    print_stats(rec.id, resp->stats);
  }
  sbx_client_reply_free(resp);
  return cli_detach_done(sb, &rec, code);
}
