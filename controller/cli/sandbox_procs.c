/* sbx sandbox ps, kill and logs: the processes sandboxd keeps for a
 * sandbox (running, or finished and not yet released), a signal to one,
 * and the output one has kept (sandboxd's retention: its head and tail). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "controller/cli/cli_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/json.h"

#define LOGS_JSON_MAX (16u << 20)

SBX_DEFINE_CLEANUP(Sbx__V1__Response *, sbx_client_reply_free)

/* An exec id as ps shows it (decimal): 0, or -EINVAL. */
static int parse_exec_id(const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end || s[0] == '-' || s[0] == '+')
    return -EINVAL;
  *out = v;
  return 0;
}

/* A signal by name (KILL, SIGKILL, kill) or number: 0, or -EINVAL. */
static int parse_signal(const char *s, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (!errno && end != s && !*end) {
    if (v <= 0 || v >= NSIG)
      return -EINVAL;
    *out = (int)v;
    return 0;
  }
  const char *name = strncasecmp(s, "SIG", 3) == 0 ? s + 3 : s;
  for (int i = 1; i < NSIG; i++) {
    const char *abbrev = sigabbrev_np(i);
    if (abbrev && strcasecmp(abbrev, name) == 0) {
      *out = i;
      return 0;
    }
  }
  return -EINVAL;
}

/* "running", "exited 3" or "killed (TERM)" into OUT. */
static void exec_status(const Sbx__V1__ExecInfo *x, char *out, size_t n) {
  const char *abbrev = x->signal ? sigabbrev_np(x->signal) : NULL;
  if (x->running)
    (void)snprintf(out, n, "running");
  else if (x->signal)
    (void)snprintf(out, n, "killed (%s)", abbrev ? abbrev : "?");
  else
    (void)snprintf(out, n, "exited %d", x->exit_code);
}

/* The time MS (Unix, milliseconds) as RFC 3339 in UTC into OUT. */
static void utc_time(uint64_t ms, char *out, size_t n) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  if (!gmtime_r(&t, &tm) || strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    (void)snprintf(out, n, "-");
}

/* The processes' list as ps --json prints it (new), or NULL. */
static json_t *ps_json(const Sbx__V1__ExecListReply *l) {
  _cleanup_json_ json_t *arr = json_array();
  for (size_t i = 0; arr && i < l->n_execs; i++) {
    const Sbx__V1__ExecInfo *x = l->execs[i];
    char id[24], started[32];
    (void)snprintf(id, sizeof(id), "%" PRIu64, x->exec_id);
    utc_time(x->started_unix_ms, started, sizeof(started));
    json_t *o = json_pack(
        "{s:s, s:i, s:b, s:b, s:o, s:o, s:I, s:I, s:s, s:o}", "exec_id", id,
        "pid", (int)x->pid, "running", x->running, "tty", x->tty, "exit_code",
        x->running ? json_null() : json_integer(x->exit_code), "signal",
        x->running || !x->signal ? json_null() : json_integer(x->signal),
        "stdout_bytes", (json_int_t)x->stdout_bytes, "stderr_bytes",
        (json_int_t)x->stderr_bytes, "started_at", started, "command",
        sbx_json_stringn_utf8(x->summary ? x->summary : "",
                              strlen(x->summary ? x->summary : "")));
    if (json_array_append_new(arr, o) < 0)
      return NULL;
  }
  return TAKE_PTR(arr);
}

/* sbx sandbox ps ID: the processes sandboxd keeps, a table or --json. */
int cli_sandbox_ps(struct cli_common *c, int argc, char **argv) {
  int u = cli_parse_ids(c, "ps", argc, argv, 1, NULL);
  if (u >= 0)
    return u;
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  int k = cli_attach_for(c, "ps", argv[optind], &rec, &sb);
  if (k)
    return k;
  _cleanup_(sbx_client_reply_freep) Sbx__V1__Response *resp = NULL;
  struct sbx_error e = {0};
  int r = sbx_exec_list(sb->client, &resp, &e);
  if (r < 0)
    return cli_detach_done(sb, &rec, cli_fail(c, &e, r));
  const Sbx__V1__ExecListReply *l = resp->exec_list;
  if (c->json) {
    _cleanup_json_ json_t *j = ps_json(l);
    return cli_detach_done(sb, &rec, cli_print_json(c, j));
  }
  printf("%-20s  %-7s  %-14s  %-20s  %s\n", "EXEC", "PID", "STATUS", "STARTED",
         "COMMAND");
  for (size_t i = 0; i < l->n_execs; i++) {
    const Sbx__V1__ExecInfo *x = l->execs[i];
    char status[32], started[32];
    exec_status(x, status, sizeof(status));
    utc_time(x->started_unix_ms, started, sizeof(started));
    printf("%-20" PRIu64 "  %-7d  %-14s  %-20s  %s\n", x->exec_id, (int)x->pid,
           status, started, x->summary ? x->summary : "");
  }
  return cli_detach_done(sb, &rec, 0);
}

/* sbx sandbox kill ID EXEC [-s SIG]: a signal (default KILL, as docker
 * kill) to the process's group. */
int cli_sandbox_kill(struct cli_common *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"signal", required_argument, NULL, 's'},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  int sig = SIGKILL, ch;
  optind = 0; /* a fresh scan that permutes: options after the ids too */
  while ((ch = getopt_long(argc, argv, "s:h", opts, NULL)) != -1) {
    if (ch == 's') {
      if (parse_signal(optarg, &sig) < 0)
        return cli_usage_error(c, "kill",
                               "--signal \"%s\": expected a signal name "
                               "(TERM, SIGINT) or number",
                               optarg);
      continue;
    }
    int r = cli_common_option(c, "kill", ch);
    if (r >= 0)
      return r;
  }
  if (argc - optind != 2)
    return cli_usage_error(c, "kill", "expected ID EXEC");
  uint64_t exec_id = 0;
  if (parse_exec_id(argv[optind + 1], &exec_id) < 0)
    return cli_usage_error(c, "kill",
                           "EXEC \"%s\": expected an exec id as sbx sandbox "
                           "ps shows it",
                           argv[optind + 1]);
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  int k = cli_attach_for(c, "kill", argv[optind], &rec, &sb);
  if (k)
    return k;
  struct sbx_error e = {0};
  int r = sbx_exec_signal(sb->client, exec_id, sig, true, &e);
  if (r < 0)
    return cli_detach_done(sb, &rec, cli_fail(c, &e, r));
  if (c->json) {
    char id[24];
    (void)snprintf(id, sizeof(id), "%" PRIu64, exec_id);
    _cleanup_json_ json_t *j =
        json_pack("{s:s, s:i}", "exec_id", id, "signal", sig);
    return cli_detach_done(sb, &rec, cli_print_json(c, j));
  }
  printf("%" PRIu64 "\n", exec_id);
  return cli_detach_done(sb, &rec, 0);
}

/* One stream of an exec read for logs: to FD, or into BUF (--json). */
struct log_stream {
  struct sbx_client *client;
  uint64_t exec_id;
  Sbx__V1__Stream stream;
  bool follow; /* until the process has exited and the stream ended */
  int fd;
  struct sbx_buf *buf;
  uint64_t gap; /* bytes the retention dropped */
  int rc;
  struct sbx_error e;
};

/* Reads S from its start: what there was at the first read (a fast writer
 * is not chased), or with follow until the stream has ended. A thread's
 * body, or called directly. */
static void *log_stream_main(void *arg) {
  struct log_stream *s = arg;
  uint64_t off = 0, until = UINT64_MAX;
  for (;;) {
    Sbx__V1__ExecRead a = SBX__V1__EXEC_READ__INIT;
    a.exec_id = s->exec_id;
    a.stream = s->stream;
    a.offset = off;
    a.wait_ms = s->follow ? 1000 : 0;
    _cleanup_(sbx_client_reply_freep) Sbx__V1__Response *resp = NULL;
    s->rc = sbx_exec_read(s->client, &a, &resp, &s->e);
    if (s->rc < 0)
      break;
    const Sbx__V1__ExecReadReply *x = resp->exec_read;
    s->gap += x->gap;
    if (x->gap && s->fd >= 0) {
      char note[96];
      int n = snprintf(note, sizeof(note),
                       "[sbx: %llu bytes of output were dropped]\n",
                       (unsigned long long)x->gap);
      (void)sbx_write_all(2, note, (size_t)n);
    }
    if (x->data.len && s->fd >= 0)
      (void)sbx_write_all(s->fd, x->data.data, x->data.len);
    else if (x->data.len)
      (void)sbx_buf_append(s->buf, x->data.data, x->data.len);
    off = x->next_offset;
    if (until == UINT64_MAX)
      until = x->end_offset;
    if (x->eof || (!s->follow && off >= until))
      break;
  }
  return NULL;
}

/* The exec logs shows without EXEC: the one started last. -ENOENT when
 * there is none. */
static int latest_exec(struct sbx_client *cl, uint64_t *id,
                       struct sbx_error *e) {
  _cleanup_(sbx_client_reply_freep) Sbx__V1__Response *resp = NULL;
  int r = sbx_exec_list(cl, &resp, e);
  if (r < 0)
    return r;
  const Sbx__V1__ExecListReply *l = resp->exec_list;
  if (l->n_execs == 0)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "the sandbox keeps no process (sbx sandbox ps)");
  const Sbx__V1__ExecInfo *best = l->execs[0];
  for (size_t i = 1; i < l->n_execs; i++)
    if (l->execs[i]->started_unix_ms > best->started_unix_ms ||
        (l->execs[i]->started_unix_ms == best->started_unix_ms &&
         l->execs[i]->exec_id > best->exec_id))
      best = l->execs[i];
  *id = best->exec_id;
  return 0;
}

/* Reads both streams of the exec (at once with follow, each on a thread)
 * into OUT and ERR; 0, or the first error. */
static int read_logs(struct log_stream *out, struct log_stream *err) {
  pthread_t t;
  bool threaded =
      out->follow && pthread_create(&t, NULL, log_stream_main, err) == 0;
  (void)log_stream_main(out);
  if (threaded)
    pthread_join(t, NULL);
  else
    (void)log_stream_main(err);
  if (out->rc < 0)
    return out->rc;
  return err->rc;
}

/* sbx sandbox logs ID [EXEC] [-f]: the output sandboxd kept of an exec. */
int cli_sandbox_logs(struct cli_common *c, int argc, char **argv) {
  static const struct option opts[] = {
      {"follow", no_argument, NULL, 'f'},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  bool follow = false;
  int ch;
  optind = 0; /* a fresh scan that permutes: options after the ids too */
  while ((ch = getopt_long(argc, argv, "fh", opts, NULL)) != -1) {
    if (ch == 'f') {
      follow = true;
      continue;
    }
    int r = cli_common_option(c, "logs", ch);
    if (r >= 0)
      return r;
  }
  int nargs = argc - optind;
  if (nargs < 1 || nargs > 2)
    return cli_usage_error(c, "logs", "expected ID [EXEC]");
  uint64_t exec_id = 0;
  if (nargs == 2 && parse_exec_id(argv[optind + 1], &exec_id) < 0)
    return cli_usage_error(c, "logs",
                           "EXEC \"%s\": expected an exec id as sbx sandbox "
                           "ps shows it",
                           argv[optind + 1]);
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  int k = cli_attach_for(c, "logs", argv[optind], &rec, &sb);
  if (k)
    return k;
  struct sbx_error e = {0};
  int r = nargs == 2 ? 0 : latest_exec(sb->client, &exec_id, &e);
  if (r < 0)
    return cli_detach_done(sb, &rec, cli_fail(c, &e, r));
  _cleanup_buf_ struct sbx_buf bo = {0}, be = {0};
  sbx_buf_init(&bo, LOGS_JSON_MAX);
  sbx_buf_init(&be, LOGS_JSON_MAX);
  struct log_stream so = {.client = sb->client,
                          .exec_id = exec_id,
                          .stream = SBX__V1__STREAM__STDOUT,
                          .follow = follow,
                          .fd = c->json ? -1 : 1,
                          .buf = &bo};
  struct log_stream se = so;
  se.stream = SBX__V1__STREAM__STDERR;
  se.fd = c->json ? -1 : 2;
  se.buf = &be;
  r = read_logs(&so, &se);
  if (r < 0)
    return cli_detach_done(sb, &rec, cli_fail(c, so.rc < 0 ? &so.e : &se.e, r));
  if (!c->json)
    return cli_detach_done(sb, &rec, 0);
  char id[24];
  (void)snprintf(id, sizeof(id), "%" PRIu64, exec_id);
  _cleanup_json_ json_t *j =
      json_pack("{s:s, s:o, s:o, s:I, s:I}", "exec_id", id, "stdout",
                sbx_json_stringn_utf8(bo.data ? bo.data : "", bo.len), "stderr",
                sbx_json_stringn_utf8(be.data ? be.data : "", be.len),
                "stdout_dropped_bytes", (json_int_t)so.gap,
                "stderr_dropped_bytes", (json_int_t)se.gap);
  return cli_detach_done(sb, &rec, cli_print_json(c, j));
}
