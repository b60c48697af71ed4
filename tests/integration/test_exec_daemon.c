/* Exec and PTY through the real daemon: the dispatch table, the worker pool,
 * parked long-polls completed from the process thread, and the wire. */
#include <criterion/criterion.h>
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"
#include "tests/support/daemon.h"

TestSuite(exec_daemon, .timeout = 60);

/* Starts CMD; HOLD_MS holds its output for a reader that reads within it. */
static uint64_t start_with(struct sbx_client *c, const char *cmd, bool tty,
                           unsigned timeout_ms, unsigned hold_ms) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = (char *)cmd;
  st.tty = tty;
  st.timeout_ms = timeout_ms;
  st.hold_ms = hold_ms;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_start(c, &st, &r, &e), 0, "start: %s", e.msg);
  uint64_t id = r->exec_start->exec_id;
  sbx_client_reply_free(r);
  return id;
}

static uint64_t start_cmd(struct sbx_client *c, const char *cmd, bool tty,
                          unsigned timeout_ms) {
  return start_with(c, cmd, tty, timeout_ms, 0);
}

struct chunk {
  uint64_t offset, next, gap, end;
  bool eof, exited, timed_out;
  int code, sig;
};

/* One read; appends its data to *ACC (of *LEN bytes). */
static struct chunk read_once(struct sbx_client *c, uint64_t id, int stream,
                              uint64_t off, uint32_t max, uint32_t wait_ms,
                              bool until_exit, char **acc, size_t *len) {
  Sbx__V1__ExecRead rq = SBX__V1__EXEC_READ__INIT;
  rq.exec_id = id;
  rq.stream = stream ? SBX__V1__STREAM__STDERR : SBX__V1__STREAM__STDOUT;
  rq.offset = off;
  rq.max_bytes = max;
  rq.wait_ms = wait_ms;
  rq.until_exit = until_exit;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_read(c, &rq, &r, &e), 0, "read: %s", e.msg);
  Sbx__V1__ExecReadReply *x = r->exec_read;
  if (acc) {
    *acc = realloc(*acc, *len + x->data.len + 1);
    if (x->data.len)
      memcpy(*acc + *len, x->data.data, x->data.len);
    *len += x->data.len;
    (*acc)[*len] = '\0';
  }
  struct chunk k = {x->offset,     x->next_offset, x->gap,
                    x->end_offset, x->eof,         x->exited,
                    x->timed_out,  x->exit_code,   x->signal};
  sbx_client_reply_free(r);
  return k;
}

/* Reads STREAM until eof and exit; returns the text (new). */
static char *read_all(struct sbx_client *c, uint64_t id, int stream,
                      struct chunk *last) {
  char *acc = calloc(1, 1);
  size_t len = 0;
  uint64_t off = 0;
  for (;;) {
    struct chunk k = read_once(c, id, stream, off, 0, 20000, true, &acc, &len);
    cr_assert_eq(k.gap, 0);
    off = k.next;
    if (k.eof && k.exited) {
      if (last)
        *last = k;
      return acc;
    }
  }
}

static char *read_until(struct sbx_client *c, uint64_t id, const char *want) {
  char *acc = calloc(1, 1);
  size_t len = 0;
  uint64_t off = 0, end = sbx_now_ms() + 10000;
  while (!strstr(acc, want) && sbx_now_ms() < end) {
    struct chunk k = read_once(c, id, 0, off, 0, 2000, false, &acc, &len);
    off = k.next;
    if (k.eof)
      break;
  }
  return acc;
}

static bool pid_gone(pid_t pid) {
  if (kill(pid, 0) < 0 && errno == ESRCH)
    return true;
  char path[64], buf[256];
  (void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return true;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')');
  return rp && (rp[2] == 'Z' || rp[2] == 'X');
}

static bool wait_gone(pid_t pid) {
  for (int i = 0; i < 300; i++) {
    if (pid_gone(pid))
      return true;
    (void)nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  return false;
}

static unsigned char pattern(uint64_t o) {
  return (unsigned char)((o * 7 + o / 251) % 253);
}

/* Starts a writer of N pattern bytes in 4 KiB chunks, SLEEP seconds apart. */
static uint64_t start_pattern(struct sbx_client *c, unsigned n,
                              const char *sleep) {
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd),
                 "python3 -c 'import sys, time\n"
                 "n = %u\n"
                 "data = bytes((i * 7 + i // 251) %% 253 for i in range(n))\n"
                 "for i in range(0, n, 4096):\n"
                 "    sys.stdout.buffer.write(data[i:i + 4096]); "
                 "sys.stdout.flush()\n"
                 "    time.sleep(%s)\n'",
                 n, sleep);
  return start_cmd(c, cmd, false, 0);
}

Test(exec_daemon, output_streams_and_exit) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  uint64_t id = start_cmd(t.client, "echo out; echo err >&2; exit 7", false, 0);
  struct chunk last;
  char *out = read_all(t.client, id, 0, &last);
  char *err = read_all(t.client, id, 1, NULL);
  cr_expect_str_eq(out, "out\n");
  cr_expect_str_eq(err, "err\n");
  cr_expect_eq(last.code, 7);
  free(out);
  free(err);
  struct sbx_error e = {0};
  cr_expect_eq(sbx_exec_release(t.client, id, &e), 0, "%s", e.msg);
  cr_expect_eq(sbx_exec_release(t.client, id, &e), -ENOENT);
  cr_expect_eq(e.code, SBX_NOT_FOUND, "%s", e.msg);
  test_daemon_stop(&t);
}

Test(exec_daemon, reader_resumes_after_disconnect_without_loss) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  const unsigned n = 400000;
  uint64_t id = start_pattern(t.client, n, "0.0005");
  uint64_t off = 0, sum = 0, want = 0;
  for (uint64_t i = 0; i < n; i++)
    want = want * 31 + pattern(i);
  /* The first reader goes away in the middle of the stream... */
  struct sbx_client *a = test_daemon_client(&t, NULL);
  while (off < n / 3) {
    char *acc = NULL;
    size_t len = 0;
    struct chunk k = read_once(a, id, 0, off, 5000, 5000, false, &acc, &len);
    cr_assert_eq(k.gap, 0);
    for (size_t i = 0; i < len; i++)
      sum = sum * 31 + (unsigned char)acc[i];
    free(acc);
    off = k.next;
  }
  sbx_client_free(a);
  /* ...and a new connection picks up at its offset. */
  struct sbx_client *b = test_daemon_client(&t, NULL);
  for (;;) {
    char *acc = NULL;
    size_t len = 0;
    struct chunk k = read_once(b, id, 0, off, 7777, 5000, false, &acc, &len);
    cr_assert_eq(k.gap, 0);
    cr_assert_eq(k.offset, off);
    for (size_t i = 0; i < len; i++)
      sum = sum * 31 + (unsigned char)acc[i];
    free(acc);
    off = k.next;
    if (k.eof)
      break;
  }
  sbx_client_free(b);
  cr_expect_eq(off, n);
  cr_expect_eq(sum, want, "every byte once, in order");
  test_daemon_stop(&t);
}

Test(exec_daemon, output_beyond_retention_reports_the_gap) {
  const char *args[] = {"--retention", "4096", NULL};
  struct test_daemon t;
  test_daemon_start(&t, args);
  const unsigned n = 200000;
  uint64_t id = start_pattern(t.client, n, "0");
  char *acc = NULL;
  size_t len = 0;
  struct chunk k = read_once(t.client, id, 0, 0, 0, 20000, true, &acc, &len);
  cr_expect(k.exited);
  cr_expect_eq(k.end, n);
  cr_assert_eq(len, 64 * 1024, "the head");
  for (size_t i = 0; i < len; i++)
    cr_assert_eq((unsigned char)acc[i], pattern(i));
  free(acc);
  acc = NULL;
  len = 0;
  k = read_once(t.client, id, 0, k.next, 0, 0, false, &acc, &len);
  cr_expect_eq(k.gap, n - 4096 - 64 * 1024);
  cr_expect_eq(k.offset, n - 4096);
  cr_expect(k.eof);
  cr_assert_eq(len, 4096, "the tail");
  for (size_t i = 0; i < len; i++)
    cr_assert_eq((unsigned char)acc[i], pattern(k.offset + i));
  free(acc);
  test_daemon_stop(&t);
}

static uint64_t start_held(struct sbx_client *c, const char *cmd, bool tty,
                           unsigned hold_ms) {
  return start_with(c, cmd, tty, 0, hold_ms);
}

static void sleep_ms(unsigned ms) {
  (void)nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000},
                  NULL);
}

/* The ring of a held stream is at least this (PROC_HOLD_WINDOW), whatever
 * the retention: the process runs on while a read is in flight. */
#define HOLD_WINDOW (8u << 20)

/* Held output: the process waits on a full pipe while its reader is slow,
 * and the reader gets every byte, far beyond the retention and the window,
 * in reads larger than the default 1 MiB ring. */
Test(exec_daemon, held_output_reaches_a_slow_reader_whole) {
  const char *args[] = {"--retention", "4096", NULL};
  struct test_daemon t;
  test_daemon_start(&t, args);
  /* Beyond what the ring, the head and the pipe (1 MiB) take. */
  const unsigned n = HOLD_WINDOW + (2u << 20);
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd),
                 "python3 -c 'import sys\n"
                 "n = %u\n"
                 "sys.stdout.buffer.write(bytes((i * 7 + i // 251) %% 253 "
                 "for i in range(n)))'",
                 n);
  uint64_t id = start_held(t.client, cmd, false, 10000);
  struct chunk k;
  uint64_t deadline = sbx_now_ms() + 10000;
  do { /* until the writer is stopped by the full window */
    sleep_ms(200);
    k = read_once(t.client, id, 1, 0, 1, 0, false, NULL, NULL);
    k = read_once(t.client, id, 0, 0, 1, 0, false, NULL, NULL);
  } while (k.end < HOLD_WINDOW && sbx_now_ms() < deadline);
  sleep_ms(200);
  k = read_once(t.client, id, 0, 0, 1, 0, false, NULL, NULL);
  cr_expect(!k.exited, "the writer waits for its reader");
  cr_expect_leq(k.end, 64 * 1024 + HOLD_WINDOW,
                "read no further than kept: %llu", (unsigned long long)k.end);
  char *acc = calloc(1, 1);
  size_t len = 0, biggest = 0;
  uint64_t off = 0;
  for (int i = 0;; i++) {
    size_t before = len;
    k = read_once(t.client, id, 0, off, i % 2 ? 3000 : 0, 5000, false, &acc,
                  &len);
    cr_assert_eq(k.gap, 0, "no byte dropped (at %llu)",
                 (unsigned long long)off);
    if (len - before > biggest)
      biggest = len - before;
    off = k.next;
    if (k.eof && k.exited)
      break;
    if (i % 20 == 0)
      sleep_ms(20);
  }
  cr_expect_gt(biggest, 1u << 20, "a read took %zu bytes at most", biggest);
  cr_assert_eq(len, n);
  for (size_t i = 0; i < len; i++)
    cr_assert_eq((unsigned char)acc[i], pattern(i), "byte %zu", i);
  cr_expect_eq(k.code, 0);
  free(acc);
  test_daemon_stop(&t);
}

/* A reader that stops reading for the hold lets the process go on: what
 * the buffer could not keep is dropped and reported, as without holding. */
Test(exec_daemon, held_output_is_let_go_when_the_reader_stops) {
  const char *args[] = {"--retention", "4096", NULL};
  struct test_daemon t;
  test_daemon_start(&t, args);
  const unsigned n = HOLD_WINDOW + 300000;
  char cmd[64];
  (void)snprintf(cmd, sizeof(cmd), "head -c %u /dev/zero", n);
  uint64_t id = start_held(t.client, cmd, false, 300);
  uint64_t deadline = sbx_now_ms() + 10000;
  struct chunk k;
  /* Watched through stderr, whose reads do not hold stdout. */
  do {
    sleep_ms(100);
    k = read_once(t.client, id, 1, 0, 1, 0, false, NULL, NULL);
  } while (!k.exited && sbx_now_ms() < deadline);
  cr_assert(k.exited, "the process ended once the hold was over");
  /* What was left in the pipe at the exit is read on, as long as no read
   * of stdout holds it again. */
  sleep_ms(300);
  k = read_once(t.client, id, 0, 0, 1, 0, false, NULL, NULL);
  cr_expect_eq(k.end, n);
  k = read_once(t.client, id, 0, 64 * 1024, 0, 0, false, NULL, NULL);
  cr_expect_eq(k.gap, n - 64 * 1024 - HOLD_WINDOW, "the gap is reported");
  test_daemon_stop(&t);
}

/* A daemon shutting down does not wait for the reader of a held process
 * (the suite's timeout catches a hang). */
Test(exec_daemon, shutdown_does_not_wait_for_held_output) {
  const char *args[] = {"--retention", "4096", NULL};
  struct test_daemon t;
  test_daemon_start(&t, args);
  uint64_t id = start_held(t.client, "head -c 10000000 /dev/zero; sleep 600",
                           false, 600000);
  sleep_ms(300);
  struct chunk k = read_once(t.client, id, 1, 0, 1, 0, false, NULL, NULL);
  cr_expect(!k.exited);
  test_daemon_stop(&t);
}

/* A terminal's output is held the same way, and its input still flows. */
Test(exec_daemon, held_terminal_output_and_input) {
  const char *args[] = {"--retention", "4096", NULL};
  struct test_daemon t;
  test_daemon_start(&t, args);
  uint64_t id =
      start_held(t.client, "seq 1 50000; read x; echo got $x", true, 10000);
  sleep_ms(300);
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_write(t.client, id, "yes\n", 4, false, &e), 0, "%s",
               e.msg);
  char *acc = calloc(1, 1);
  size_t len = 0;
  uint64_t off = 0;
  struct chunk k;
  do {
    k = read_once(t.client, id, 0, off, 2000, 5000, false, &acc, &len);
    cr_assert_eq(k.gap, 0, "no byte dropped");
    off = k.next;
  } while (!(k.eof && k.exited));
  cr_expect_not_null(strstr(acc, "\r\n49999\r\n50000\r\n"));
  cr_expect_not_null(strstr(acc, "got yes"));
  free(acc);
  test_daemon_stop(&t);
}

Test(exec_daemon, pty_echo_resize_and_ctrl_c) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  struct sbx_error e = {0};
  uint64_t id = start_cmd(t.client, "stty size; cat", true, 0);
  char *out = read_until(t.client, id, "24 80\r\n");
  cr_expect_str_eq(out, "24 80\r\n");
  free(out);
  cr_assert_eq(sbx_exec_write(t.client, id, "hi\n", 3, false, &e), 0, "%s",
               e.msg);
  out = read_until(t.client, id, "hi\r\nhi\r\n");
  cr_expect(strstr(out, "hi\r\nhi\r\n"), "%s", out);
  free(out);
  cr_assert_eq(sbx_exec_write(t.client, id, "\x03", 1, false, &e), 0);
  struct chunk last;
  free(read_all(t.client, id, 0, &last));
  cr_expect(last.sig == SIGINT || last.code == 130, "sig %d code %d", last.sig,
            last.code);

  id = start_cmd(t.client, "read x; stty size", true, 0);
  cr_assert_eq(sbx_exec_resize(t.client, id, 40, 100, &e), 0, "%s", e.msg);
  cr_assert_eq(sbx_exec_write(t.client, id, "\n", 1, false, &e), 0);
  out = read_all(t.client, id, 0, NULL);
  cr_expect(strstr(out, "40 100\r\n"), "%s", out);
  free(out);
  test_daemon_stop(&t);
}

Test(exec_daemon, timeout_kills_the_process_tree) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  uint64_t id =
      start_cmd(t.client, "sleep 100 & echo $!; sleep 100", false, 300);
  struct chunk last;
  char *out = read_all(t.client, id, 0, &last);
  cr_expect(last.timed_out);
  cr_expect_eq(last.sig, SIGTERM);
  pid_t grandchild = (pid_t)strtol(out, NULL, 10);
  cr_assert_gt(grandchild, 1, "%s", out);
  cr_expect(wait_gone(grandchild), "grandchild %d survived", (int)grandchild);
  free(out);
  test_daemon_stop(&t);
}

Test(exec_daemon, run_as_another_user) {
  if (geteuid() != 0)
    cr_skip("run_as needs sandboxd to run as root");
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "id -u";
  st.run_as = "nobody";
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_start(t.client, &st, &r, &e), 0, "%s", e.msg);
  uint64_t id = r->exec_start->exec_id;
  sbx_client_reply_free(r);
  char *out = read_all(t.client, id, 0, NULL);
  cr_expect_str_eq(out, "65534\n");
  free(out);
  test_daemon_stop(&t);
}

/* Children started by the worker pool inherit the filter their worker
 * carries: it must be the same filter, with the same side effects. */
Test(exec_daemon, children_of_the_pool_are_filtered) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  for (int i = 0; i < 8; i++) { /* more starts than workers */
    uint64_t id = start_cmd(t.client,
                            "grep -E '^(Seccomp|NoNewPrivs|CapBnd):' "
                            "/proc/self/status; unshare -U true 2>&1",
                            false, 0);
    struct chunk k;
    char *out = read_all(t.client, id, 0, &k);
    cr_expect(strstr(out, "Seccomp:\t2\n"), "%s", out);
    cr_expect(strstr(out, "NoNewPrivs:\t1\n"), "%s", out);
    cr_expect(strstr(out, "Operation not permitted"), "%s", out);
    cr_expect_neq(k.code, 0);
    const char *bnd = strstr(out, "CapBnd:");
    cr_assert_not_null(bnd, "%s", out);
    if (geteuid() == 0)
      cr_expect_eq(strtoull(bnd + 7, NULL, 16) & (1ull << 19), 0, "%s", out);
    free(out);
  }
  static const char *const off[] = {"--seccomp", "off", NULL};
  struct test_daemon u;
  test_daemon_start(&u, off);
  uint64_t id =
      start_cmd(u.client, "grep '^Seccomp:' /proc/self/status", false, 0);
  char *out = read_all(u.client, id, 0, NULL);
  cr_expect_str_eq(out, "Seccomp:\t0\n");
  free(out);
  test_daemon_stop(&u);
  test_daemon_stop(&t);
}

Test(exec_daemon, exec_errors_reach_the_client) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {"no-such-program-sbx"};
  st.argv = argv;
  st.n_argv = 1;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(sbx_exec_start(t.client, &st, &r, &e), -ENOENT);
  cr_expect_eq(e.code, SBX_NOT_FOUND);
  cr_expect_str_eq(e.msg,
                   "exec \"no-such-program-sbx\": No such file or directory");
  test_daemon_stop(&t);
}

struct parked_read {
  struct sbx_client *c;
  uint64_t id;
  struct chunk k;
};

static void *parked_main(void *arg) {
  struct parked_read *p = arg;
  p->k = read_once(p->c, p->id, 0, 0, 0, 30000, true, NULL, NULL);
  return NULL;
}

static int daemon_threads(pid_t pid) {
  char path[64], line[256];
  (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  int n = -1;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, "Threads:", 8) == 0)
      n = (int)strtol(line + 8, NULL, 10);
  fclose(f);
  return n;
}

struct last_read {
  struct sbx_client *c;
  uint64_t id;
  int rc;
  bool exited;
  struct sbx_error e;
};

static void *last_read_main(void *arg) {
  struct last_read *p = arg;
  Sbx__V1__ExecRead rq = SBX__V1__EXEC_READ__INIT;
  rq.exec_id = p->id;
  rq.wait_ms = 5000;
  rq.until_exit = true;
  Sbx__V1__Response *r = NULL;
  p->rc = sbx_exec_read(p->c, &rq, &r, &p->e);
  if (p->rc == 0)
    p->exited = r->exec_read->exited;
  sbx_client_reply_free(r);
  p->c = sbx_client_free(p->c);
  return NULL;
}

/* The replies sent as the daemon ends (Shutdown's, and the parked reads it
 * answers when it kills their processes) reach their clients. A client that
 * sees the hang-up together with a reply's bytes drops them (nng stops
 * reading at the hang-up), so the daemon waits for its clients to go; the
 * race is rare (about one sbx run in a hundred lost its Shutdown reply when
 * the daemon closed at once), so this checks the outcome, not the race. */
Test(exec_daemon, last_replies_reach_their_clients) {
  for (int i = 0; i < 5; i++) {
    struct test_daemon t;
    test_daemon_start(&t, NULL);
    struct last_read p = {.c = test_daemon_client(&t, NULL), .rc = 1};
    p.id = start_cmd(t.client, "sleep 100", false, 0);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, last_read_main, &p), 0);
    (void)nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    struct sbx_error e = {0};
    cr_expect_eq(sbx_shutdown(t.client, 100, &e), 0, "run %d: %s", i, e.msg);
    t.client = sbx_client_free(t.client);
    pthread_join(th, NULL);
    cr_expect_eq(p.rc, 0, "run %d: parked read: %s", i, p.e.msg);
    cr_expect(p.exited, "run %d: the read saw the exit", i);
    int st = test_daemon_stop(&t);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  }
}

Test(exec_daemon, many_parked_reads_need_no_threads) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  uint64_t id = start_cmd(t.client, "read x; echo done", false, 0);
  enum { N = 48 };
  struct parked_read p[N];
  pthread_t th[N];
  for (int i = 0; i < N; i++) {
    p[i] = (struct parked_read){.c = t.client, .id = id};
    cr_assert_eq(pthread_create(&th[i], NULL, parked_main, &p[i]), 0);
  }
  (void)nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
  int threads = daemon_threads(t.pid);
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_write(t.client, id, "\n", 1, false, &e), 0, "%s",
               e.msg);
  for (int i = 0; i < N; i++) {
    pthread_join(th[i], NULL);
    cr_expect(p[i].k.exited && p[i].k.eof);
    cr_expect_eq(p[i].k.next, 5);
  }
  cr_expect_lt(threads, N / 2, "%d threads for %d parked reads", threads, N);
  test_daemon_stop(&t);
}

Test(exec_daemon, retried_start_runs_once) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "echo x >> count";
  req.body_case = SBX__V1__REQUEST__BODY_EXEC_START;
  req.exec_start = &st;
  Sbx__V1__Response *a, *b;
  test_daemon_send_twice(&t, &req, "start-1", &a, &b);
  cr_assert_eq(a->body_case, SBX__V1__RESPONSE__BODY_EXEC_START);
  cr_assert_eq(b->body_case, SBX__V1__RESPONSE__BODY_EXEC_START);
  cr_expect_eq(a->exec_start->exec_id, b->exec_start->exec_id);
  cr_expect_eq(a->exec_start->pid, b->exec_start->pid);
  free(read_all(t.client, a->exec_start->exec_id, 0, NULL));
  sbx__v1__response__free_unpacked(a, NULL);
  sbx__v1__response__free_unpacked(b, NULL);
  Sbx__V1__Response *l = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_list(t.client, &l, &e), 0, "%s", e.msg);
  cr_expect_eq(l->exec_list->n_execs, 1, "one process for two requests");
  sbx_client_reply_free(l);
  test_daemon_stop(&t);
}

/* An ExecStart with wait_ms: its reply carries the read. */
static Sbx__V1__Response *start_waiting(struct sbx_client *c, const char *cmd,
                                        uint32_t wait_ms, uint32_t max) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = (char *)cmd;
  st.stderr_to_stdout = true;
  st.wait_ms = wait_ms;
  st.max_bytes = max;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_exec_start(c, &st, &r, &e), 0, "start: %s", e.msg);
  cr_assert_not_null(r->exec_start->output);
  return r;
}

Test(exec_daemon, start_that_waits_brings_a_quick_commands_output) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  Sbx__V1__Response *r =
      start_waiting(t.client, "echo out; echo err >&2; exit 3", 10000, 0);
  Sbx__V1__ExecReadReply *x = r->exec_start->output;
  cr_expect_eq(x->data.len, 8);
  cr_expect_eq(memcmp(x->data.data, "out\nerr\n", 8), 0);
  cr_expect(x->exited && x->eof);
  cr_expect_eq(x->exit_code, 3);
  cr_expect_eq(x->offset, 0);
  cr_expect_eq(x->next_offset, 8);
  /* The process is there as after a plain start: readable, listed. */
  struct chunk k;
  free(read_all(t.client, r->exec_start->exec_id, 0, &k));
  cr_expect_eq(k.code, 3);
  sbx_client_reply_free(r);
  test_daemon_stop(&t);
}

Test(exec_daemon, start_that_waits_answers_at_its_deadline) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  uint64_t t0 = sbx_now_ms();
  Sbx__V1__Response *r =
      start_waiting(t.client, "echo begun; sleep 1; echo done", 300, 0);
  uint64_t took = sbx_now_ms() - t0;
  Sbx__V1__ExecReadReply *x = r->exec_start->output;
  cr_expect_geq(took, 300);
  cr_expect_lt(took, 950, "answered after %llu ms", (unsigned long long)took);
  cr_expect_not(x->exited);
  cr_expect_not(x->eof);
  cr_expect_eq(x->data.len, 6);
  cr_expect_eq(memcmp(x->data.data, "begun\n", 6), 0);
  /* The rest follows from where the start's read ended. */
  char *acc = calloc(1, 1);
  size_t len = 0;
  uint64_t off = x->next_offset;
  struct chunk k;
  do {
    k = read_once(t.client, r->exec_start->exec_id, 0, off, 0, 20000, true,
                  &acc, &len);
    off = k.next;
  } while (!(k.eof && k.exited));
  cr_expect_str_eq(acc, "done\n");
  free(acc);
  sbx_client_reply_free(r);
  test_daemon_stop(&t);
}

Test(exec_daemon, start_that_waits_keeps_its_reply_cacheable) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  /* 1 MiB of output: the start's read stops short of what a retry cache
   * keeps (256 KiB); the rest is read as usual, with no gap. */
  Sbx__V1__Response *r =
      start_waiting(t.client, "head -c 1048576 /dev/zero", 10000, 0);
  Sbx__V1__ExecReadReply *x = r->exec_start->output;
  cr_expect_gt(x->data.len, 0);
  cr_expect_lt(x->data.len, 256u << 10, "%zu bytes", x->data.len);
  uint64_t off = x->next_offset, total = x->data.len;
  struct chunk k;
  do {
    size_t len = 0;
    char *acc = NULL;
    k = read_once(t.client, r->exec_start->exec_id, 0, off, 0, 20000, true,
                  &acc, &len);
    cr_assert_eq(k.gap, 0);
    total += len;
    off = k.next;
    free(acc);
  } while (!(k.eof && k.exited));
  cr_expect_eq(total, 1048576);
  sbx_client_reply_free(r);
  /* A smaller max_bytes is honoured. */
  r = start_waiting(t.client, "head -c 5000 /dev/zero", 10000, 100);
  cr_expect_eq(r->exec_start->output->data.len, 100);
  sbx_client_reply_free(r);
  test_daemon_stop(&t);
}

Test(exec_daemon, retried_start_that_waits_runs_once) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "echo x >> count; wc -l < count";
  st.wait_ms = 10000;
  req.body_case = SBX__V1__REQUEST__BODY_EXEC_START;
  req.exec_start = &st;
  Sbx__V1__Response *a, *b;
  test_daemon_send_twice(&t, &req, "start-wait-1", &a, &b);
  cr_assert_eq(a->body_case, SBX__V1__RESPONSE__BODY_EXEC_START);
  cr_assert_eq(b->body_case, SBX__V1__RESPONSE__BODY_EXEC_START);
  cr_assert_not_null(a->exec_start->output);
  cr_assert_not_null(b->exec_start->output);
  cr_expect_eq(a->exec_start->exec_id, b->exec_start->exec_id);
  cr_expect_eq(b->exec_start->output->data.len, 2);
  cr_expect_eq(memcmp(b->exec_start->output->data.data, "1\n", 2), 0);
  sbx__v1__response__free_unpacked(a, NULL);
  sbx__v1__response__free_unpacked(b, NULL);
  test_daemon_stop(&t);
}

Test(exec_daemon, shutdown_kills_every_process_group) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  uint64_t id = start_cmd(t.client, "sleep 100 & echo $!; sleep 100", false, 0);
  char *out = read_until(t.client, id, "\n");
  pid_t grandchild = (pid_t)strtol(out, NULL, 10);
  free(out);
  cr_assert_gt(grandchild, 1);
  /* A read parked on it must be answered, not left behind. */
  struct parked_read p = {.c = test_daemon_client(&t, NULL), .id = id};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, parked_main, &p), 0);
  (void)nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  int st = test_daemon_stop(&t);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
  cr_expect(wait_gone(grandchild), "grandchild %d survived", (int)grandchild);
  pthread_join(th, NULL);
  sbx_client_free(p.c);
}

static void *kill_later(void *arg) {
  (void)nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
  (void)kill(*(pid_t *)arg, SIGKILL);
  return NULL;
}

/* A connection that goes down and stays down fails a waiting call after
 * the client's heartbeat, not after the call's timeout, and says so: how a
 * sandboxd whose process sbx cannot watch (no peer_pid: a container's on
 * another host, a remote one) is noticed. */
Test(exec_daemon, a_lost_connection_fails_a_waiting_call_after_the_heartbeat) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  struct sbx_client_config cfg = {
      .url = t.url,
      .token = (const uint8_t *)t.token,
      .token_len = strlen(t.token),
      .timeout_ms = 30000,
      .heartbeat_ms = 500,
  };
  struct sbx_client *c = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_client_new(&cfg, &c, &e), 0, "client: %s", e.msg);
  uint64_t id = start_cmd(c, "sleep 100", false, 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, kill_later, &t.pid), 0);
  Sbx__V1__ExecRead rq = SBX__V1__EXEC_READ__INIT;
  rq.exec_id = id;
  rq.max_bytes = 4096;
  rq.wait_ms = 20000;
  rq.until_exit = true;
  Sbx__V1__Response *r = NULL;
  uint64_t t0 = sbx_now_ns();
  int rc = sbx_exec_read(c, &rq, &r, &e);
  uint64_t ms = (sbx_now_ns() - t0) / 1000000u;
  pthread_join(th, NULL);
  sbx_client_reply_free(r);
  cr_expect_eq(rc, -EPIPE, "read: %d %s", rc, e.msg);
  cr_expect(strstr(e.msg, "lost the connection") != NULL, "%s", e.msg);
  cr_expect(strstr(e.msg, "(heartbeat 500 ms)") != NULL, "%s", e.msg);
  /* The call's own timeouts are 30 s and 20 s; the kill came at 0.3 s. */
  cr_expect_lt(ms, 5000, "noticed after %llu ms", (unsigned long long)ms);
  sbx_client_free(c);
  int st;
  cr_expect_eq(waitpid(t.pid, &st, 0), t.pid);
  t.pid = 0;
  t.client = sbx_client_free(t.client);
  test_daemon_stop(&t);
}
