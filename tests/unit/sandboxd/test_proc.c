#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandboxd/proc/proc.h"
#include "shared/clock.h"
#include "tests/support/harness.h"

static struct harness h;

static void start_table(void) {
  cr_assert_eq(proc_table_new(&h.d, &h.d.procs), 0);
}

/* Changes limits or the seccomp mode: a new table with them. */
static void restart_table(void) {
  proc_table_free(h.d.procs, 100);
  h.d.procs = NULL;
  start_table();
}

static void setup(void) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGCHLD);
  cr_assert_eq(pthread_sigmask(SIG_BLOCK, &s, NULL), 0);
  harness_init(&h);
  start_table();
}

static void teardown(void) {
  proc_table_free(h.d.procs, 100);
  h.d.procs = NULL;
  harness_fini(&h);
}

TestSuite(proc, .init = setup, .fini = teardown, .timeout = 60);
TestSuite(seccomp, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers ---------------------------------------------------------- */

static struct harness_call *call_start(Sbx__V1__ExecStart *st) {
  static Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  req.body_case = SBX__V1__REQUEST__BODY_EXEC_START;
  req.exec_start = st;
  return harness_call(&h, &req, rpc_exec_start);
}

/* Starts ST and returns its exec id; asserts success. */
static uint64_t start(Sbx__V1__ExecStart *st) {
  struct harness_call *hc = call_start(st);
  cr_assert_eq(hc->rc, 0, "exec start: %d %s", hc->rc, hc->call.err.msg);
  cr_assert_eq(hc->resp.body_case, SBX__V1__RESPONSE__BODY_EXEC_START);
  uint64_t id = hc->resp.exec_start->exec_id;
  cr_assert_gt(hc->resp.exec_start->pid, 0);
  harness_call_free(hc);
  return id;
}

/* sleep 100 without a shell, so that a signal to the pid reaches it. */
static uint64_t start_sleep(void) {
  char *argv[] = {"sleep", "100"};
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 2;
  return start(&st);
}

static uint64_t start_cmd(const char *cmd) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = (char *)cmd;
  return start(&st);
}

struct rd {
  uint64_t id;
  int stream;
  uint64_t offset;
  uint32_t max;
  uint32_t wait_ms;
  bool until_exit;
};

static struct harness_call *call_read(struct rd r) {
  Sbx__V1__ExecRead rq = SBX__V1__EXEC_READ__INIT;
  rq.exec_id = r.id;
  rq.stream = r.stream ? SBX__V1__STREAM__STDERR : SBX__V1__STREAM__STDOUT;
  rq.offset = r.offset;
  rq.max_bytes = r.max;
  rq.wait_ms = r.wait_ms;
  rq.until_exit = r.until_exit;
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_EXEC_READ;
  req.exec_read = &rq;
  return harness_call(&h, &req, rpc_exec_read);
}

/* Everything a stream produces, read until eof. */
struct output {
  char *data;
  size_t len;
  bool exited;
  int exit_code;
  int signal;
  bool timed_out;
};

static struct output read_all(uint64_t id, int stream) {
  struct output o = {0};
  uint64_t off = 0;
  for (int rounds = 0; rounds < 1000; rounds++) {
    struct harness_call *hc = call_read((struct rd){.id = id,
                                                    .stream = stream,
                                                    .offset = off,
                                                    .wait_ms = 20000,
                                                    .until_exit = true});
    cr_assert_eq(hc->rc, 0, "read: %s", hc->call.err.msg);
    Sbx__V1__ExecReadReply *r = hc->resp.exec_read;
    cr_assert_eq(r->gap, 0);
    cr_assert_eq(r->offset, off);
    o.data = realloc(o.data, o.len + r->data.len + 1);
    if (r->data.len > 0)
      memcpy(o.data + o.len, r->data.data, r->data.len);
    o.len += r->data.len;
    o.data[o.len] = '\0';
    off = r->next_offset;
    bool eof = r->eof;
    o.exited = r->exited;
    o.exit_code = r->exit_code;
    o.signal = r->signal;
    o.timed_out = r->timed_out;
    harness_call_free(hc);
    if (eof && o.exited)
      return o;
  }
  cr_assert_fail("stream never ended");
  return o;
}

/* Reads STDOUT until it contains WANT (or the stream ends); returns it. */
static char *read_until(uint64_t id, const char *want) {
  char *acc = calloc(1, 1);
  size_t len = 0;
  uint64_t off = 0;
  uint64_t end = sbx_now_ms() + 10000;
  while (!strstr(acc, want) && sbx_now_ms() < end) {
    struct harness_call *hc =
        call_read((struct rd){.id = id, .offset = off, .wait_ms = 2000});
    cr_assert_eq(hc->rc, 0, "read: %s", hc->call.err.msg);
    Sbx__V1__ExecReadReply *r = hc->resp.exec_read;
    acc = realloc(acc, len + r->data.len + 1);
    if (r->data.len > 0)
      memcpy(acc + len, r->data.data, r->data.len);
    len += r->data.len;
    acc[len] = '\0';
    off = r->next_offset;
    bool over = r->eof;
    harness_call_free(hc);
    if (over)
      break;
  }
  return acc;
}

static int call_write(uint64_t id, const void *data, size_t len, bool close_,
                      struct sbx_error *err) {
  Sbx__V1__ExecWrite rq = SBX__V1__EXEC_WRITE__INIT;
  rq.exec_id = id;
  rq.data.data = (uint8_t *)data;
  rq.data.len = len;
  rq.close = close_;
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_EXEC_WRITE;
  req.exec_write = &rq;
  struct harness_call *hc = harness_call(&h, &req, rpc_exec_write);
  int rc = hc->rc;
  if (rc == 0)
    cr_expect_eq(hc->resp.exec_write->written, len);
  if (err)
    *err = hc->call.err;
  harness_call_free(hc);
  return rc;
}

static int call_simple(uint64_t id, int what, int arg1, int arg2,
                       struct sbx_error *err) {
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  Sbx__V1__ExecSignal sig = SBX__V1__EXEC_SIGNAL__INIT;
  Sbx__V1__ExecResize rs = SBX__V1__EXEC_RESIZE__INIT;
  Sbx__V1__ExecRelease rl = SBX__V1__EXEC_RELEASE__INIT;
  int (*fn)(struct rpc_call *) = NULL;
  switch (what) {
  case 's':
    sig.exec_id = id;
    sig.signal = arg1;
    sig.group = arg2;
    req.body_case = SBX__V1__REQUEST__BODY_EXEC_SIGNAL;
    req.exec_signal = &sig;
    fn = rpc_exec_signal;
    break;
  case 'z':
    rs.exec_id = id;
    rs.rows = (uint32_t)arg1;
    rs.cols = (uint32_t)arg2;
    req.body_case = SBX__V1__REQUEST__BODY_EXEC_RESIZE;
    req.exec_resize = &rs;
    fn = rpc_exec_resize;
    break;
  default:
    rl.exec_id = id;
    req.body_case = SBX__V1__REQUEST__BODY_EXEC_RELEASE;
    req.exec_release = &rl;
    fn = rpc_exec_release;
    break;
  }
  struct harness_call *hc = harness_call(&h, &req, fn);
  int rc = hc->rc;
  if (err)
    *err = hc->call.err;
  harness_call_free(hc);
  return rc;
}

/* Starts ST expecting an error; returns its code and copies the message. */
static enum sbx_code start_fails(Sbx__V1__ExecStart *st, char *msg,
                                 size_t msgsz) {
  struct harness_call *hc = call_start(st);
  cr_assert_lt(hc->rc, 0, "exec start should fail");
  enum sbx_code code =
      hc->call.err.code ? hc->call.err.code : sbx_code_from_errno(hc->rc);
  if (msg)
    (void)snprintf(msg, msgsz, "%s", hc->call.err.msg);
  cr_expect_neq(hc->call.err.msg[0], '\0', "an error needs a message");
  harness_call_free(hc);
  return code;
}

/* True once PID is gone (or a zombie nobody here will reap). */
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

/* ---- starting --------------------------------------------------------- */

Test(proc, argv_runs_without_a_shell) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {"echo", "hello", "$HOME"};
  st.argv = argv;
  st.n_argv = 3;
  uint64_t id = start(&st);
  cr_expect_eq(id, 1, "ids start at 1");
  struct output o = read_all(id, 0);
  cr_expect_str_eq(o.data, "hello $HOME\n");
  cr_expect(o.exited);
  cr_expect_eq(o.exit_code, 0);
  free(o.data);
  cr_expect_eq(start(&st), 2, "ids increase");
}

Test(proc, command_runs_in_a_shell) {
  uint64_t id = start_cmd("echo $((1+2)); exit 3");
  struct output o = read_all(id, 0);
  cr_expect_str_eq(o.data, "3\n");
  cr_expect_eq(o.exit_code, 3);
  cr_expect_eq(o.signal, 0);
  free(o.data);
}

Test(proc, login_shell_and_given_shell) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "echo $0 $SHELL";
  st.shell = "/bin/sh";
  struct output o = read_all(start(&st), 0);
  cr_expect_str_eq(o.data, "/bin/sh /bin/sh\n");
  free(o.data);
  if (access("/bin/bash", X_OK) == 0) {
    st.shell = NULL;
    st.login = true;
    o = read_all(start(&st), 0);
    cr_expect_str_eq(o.data, "/bin/bash /bin/bash\n");
    free(o.data);
  }
}

Test(proc, killed_by_signal) {
  uint64_t id = start_cmd("kill -TERM $$; sleep 5");
  struct output o = read_all(id, 0);
  cr_expect(o.exited);
  cr_expect_eq(o.signal, SIGTERM);
  cr_expect_eq(o.exit_code, 128 + SIGTERM);
  cr_expect_not(o.timed_out);
  free(o.data);
}

Test(proc, stdout_and_stderr_are_separate) {
  uint64_t id = start_cmd("echo out; echo err >&2; echo out2");
  struct output o = read_all(id, 0);
  struct output e = read_all(id, 1);
  cr_expect_str_eq(o.data, "out\nout2\n");
  cr_expect_str_eq(e.data, "err\n");
  free(o.data);
  free(e.data);
}

Test(proc, stderr_to_stdout_interleaves) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "echo a; echo b >&2; echo c; echo d >&2";
  st.stderr_to_stdout = true;
  uint64_t id = start(&st);
  struct output o = read_all(id, 0);
  cr_expect_str_eq(o.data, "a\nb\nc\nd\n");
  free(o.data);
  struct output e = read_all(id, 1);
  cr_expect_eq(e.len, 0, "stderr is empty and closed");
  free(e.data);
}

Test(proc, stdin_write_and_close) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {"cat"};
  st.argv = argv;
  st.n_argv = 1;
  uint64_t id = start(&st);
  cr_assert_eq(call_write(id, "hello ", 6, false, NULL), 0);
  cr_assert_eq(call_write(id, "world", 5, true, NULL), 0);
  struct output o = read_all(id, 0);
  cr_expect_str_eq(o.data, "hello world");
  cr_expect_eq(o.exit_code, 0);
  free(o.data);
  struct sbx_error err;
  cr_expect_lt(call_write(id, "x", 1, false, &err), 0);
  cr_expect_eq(err.code, SBX_CONFLICT, "writing to an exited process");
}

Test(proc, stdin_larger_than_the_pipe_is_queued) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "wc -c";
  uint64_t id = start(&st);
  size_t n = 600 * 1024;
  char *big = malloc(n);
  memset(big, 'x', n);
  cr_assert_eq(call_write(id, big, n, true, NULL), 0);
  free(big);
  struct output o = read_all(id, 0);
  cr_expect_eq(strtoul(o.data, NULL, 10), n);
  free(o.data);
}

Test(proc, no_stdin_reads_eof) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "cat; echo done";
  st.no_stdin = true;
  uint64_t id = start(&st);
  struct output o = read_all(id, 0);
  cr_expect_str_eq(o.data, "done\n");
  free(o.data);
  struct sbx_error err;
  cr_expect_lt(call_write(id, "x", 1, false, &err), 0);
  cr_expect_eq(err.code, SBX_CONFLICT);
}

Test(proc, exec_failure_is_an_error) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {"no-such-program-sbx"};
  st.argv = argv;
  st.n_argv = 1;
  char msg[SBX_ERROR_MSG_MAX];
  cr_expect_eq(start_fails(&st, msg, sizeof(msg)), SBX_NOT_FOUND);
  cr_expect_str_eq(msg,
                   "exec \"no-such-program-sbx\": No such file or directory");
  /* The table still works afterwards. */
  struct output o = read_all(start_cmd("echo ok"), 0);
  cr_expect_str_eq(o.data, "ok\n");
  free(o.data);
}

Test(proc, exec_of_a_non_executable_is_denied) {
  harness_write(&h, "script.sh", "echo hi\n");
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {"./script.sh"};
  st.argv = argv;
  st.n_argv = 1;
  char msg[SBX_ERROR_MSG_MAX];
  /* Even root cannot execute a file without any x bit. */
  cr_expect_eq(start_fails(&st, msg, sizeof(msg)), SBX_PERMISSION_DENIED);
  cr_expect_str_eq(msg, "exec \"./script.sh\": Permission denied");
}

/* ---- output retention and reads --------------------------------------- */

static const char *pattern_py =
    "import sys\n"
    "n = int(sys.argv[1]); step = int(sys.argv[2])\n"
    "data = bytes((i * 7 + i // 251) % 253 for i in range(n))\n"
    "for i in range(0, n, step):\n"
    "    sys.stdout.buffer.write(data[i:i + step]); sys.stdout.flush()\n";

static unsigned char pattern(uint64_t o) {
  return (unsigned char)((o * 7 + o / 251) % 253);
}

static uint64_t start_pattern(unsigned n, unsigned step) {
  char ns[32], steps[32];
  (void)snprintf(ns, sizeof(ns), "%u", n);
  (void)snprintf(steps, sizeof(steps), "%u", step);
  char *argv[] = {"python3", "-c", (char *)pattern_py, ns, steps};
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 5;
  return start(&st);
}

Test(proc, output_beyond_retention_reports_the_gap) {
  h.d.limits.retention_head = 1024;
  h.d.limits.retention_tail = 4096;
  restart_table();
  const unsigned n = 100 * 1024;
  uint64_t id = start_pattern(n, 8192);

  /* The head, up to where bytes were dropped. */
  struct harness_call *hc =
      call_read((struct rd){.id = id, .wait_ms = 20000, .until_exit = true});
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  Sbx__V1__ExecReadReply *r = hc->resp.exec_read;
  cr_expect(r->exited);
  cr_expect_eq(r->offset, 0);
  cr_expect_eq(r->gap, 0);
  cr_assert_eq(r->data.len, 1024);
  cr_expect_eq(r->next_offset, 1024);
  cr_expect_eq(r->end_offset, n);
  cr_expect_not(r->eof);
  for (size_t i = 0; i < r->data.len; i++)
    cr_assert_eq(r->data.data[i], pattern(i), "head byte %zu", i);
  harness_call_free(hc);

  /* Then the tail, after the gap. */
  hc = call_read((struct rd){.id = id, .offset = 1024});
  cr_assert_eq(hc->rc, 0);
  r = hc->resp.exec_read;
  cr_expect_eq(r->offset, n - 4096);
  cr_expect_eq(r->gap, n - 4096 - 1024);
  cr_assert_eq(r->data.len, 4096);
  cr_expect_eq(r->next_offset, n);
  cr_expect(r->eof);
  for (size_t i = 0; i < r->data.len; i++)
    cr_assert_eq(r->data.data[i], pattern(r->offset + i), "tail byte %zu", i);
  harness_call_free(hc);

  /* A reader that stopped in the middle. */
  hc = call_read((struct rd){.id = id, .offset = 50000, .max = 100});
  cr_assert_eq(hc->rc, 0);
  r = hc->resp.exec_read;
  cr_expect_eq(r->offset, n - 4096);
  cr_expect_eq(r->gap, n - 4096 - 50000);
  cr_expect_eq(r->data.len, 100);
  cr_expect_eq(r->data.data[0], pattern(n - 4096));
  harness_call_free(hc);
}

Test(proc, small_chunk_reader_gets_every_byte_once) {
  const unsigned n = 300000;
  uint64_t id = start_pattern(n, 7001);
  uint64_t off = 0, sum = 0, want = 0;
  int reads = 0;
  for (uint64_t i = 0; i < n; i++)
    want = want * 31 + pattern(i);
  for (;;) {
    struct harness_call *hc = call_read(
        (struct rd){.id = id, .offset = off, .max = 777, .wait_ms = 10000});
    cr_assert_eq(hc->rc, 0);
    Sbx__V1__ExecReadReply *r = hc->resp.exec_read;
    cr_assert_eq(r->offset, off);
    cr_assert_eq(r->gap, 0);
    cr_assert_leq(r->data.len, 777);
    for (size_t i = 0; i < r->data.len; i++)
      sum = sum * 31 + r->data.data[i];
    off = r->next_offset;
    bool eof = r->eof;
    reads++;
    harness_call_free(hc);
    if (eof)
      break;
  }
  cr_expect_eq(off, n);
  cr_expect_eq(sum, want, "checksum of every byte in order");
  cr_expect_geq(reads, (int)(n / 777));
}

struct bg_read {
  struct rd rd;
  struct harness_call *hc;
  uint64_t ms;
};

static void *bg_read_main(void *arg) {
  struct bg_read *b = arg;
  uint64_t t0 = sbx_now_ms();
  b->hc = call_read(b->rd);
  b->ms = sbx_now_ms() - t0;
  return NULL;
}

Test(proc, long_poll_is_woken_by_data) {
  char *argv[] = {"cat"};
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 1;
  uint64_t id = start(&st);
  struct bg_read b = {.rd = {.id = id, .wait_ms = 10000}};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, bg_read_main, &b), 0);
  (void)nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
  cr_assert_eq(call_write(id, "ping\n", 5, false, NULL), 0);
  pthread_join(th, NULL);
  cr_assert_eq(b.hc->rc, 0);
  Sbx__V1__ExecReadReply *r = b.hc->resp.exec_read;
  cr_expect_eq(r->data.len, 5);
  cr_expect_eq(memcmp(r->data.data, "ping\n", 5), 0);
  cr_expect_not(r->exited);
  cr_expect_geq(b.ms, 150, "it waited (%lu ms)", (unsigned long)b.ms);
  cr_expect_lt(b.ms, 5000, "data woke it (%lu ms)", (unsigned long)b.ms);
  harness_call_free(b.hc);
}

Test(proc, until_exit_waits_for_exit_and_all_output) {
  uint64_t id = start_cmd("echo a; sleep 0.3; echo b >&2; echo c");
  uint64_t t0 = sbx_now_ms();
  struct harness_call *hc =
      call_read((struct rd){.id = id, .wait_ms = 10000, .until_exit = true});
  uint64_t ms = sbx_now_ms() - t0;
  cr_assert_eq(hc->rc, 0);
  Sbx__V1__ExecReadReply *r = hc->resp.exec_read;
  cr_expect(r->exited);
  cr_expect(r->eof);
  cr_expect_eq(r->data.len, 4);
  cr_expect_eq(memcmp(r->data.data, "a\nc\n", 4), 0);
  cr_expect_geq(ms, 250);
  harness_call_free(hc);
}

Test(proc, until_exit_returns_when_max_bytes_are_ready) {
  uint64_t id = start_cmd("echo 0123456789; sleep 100");
  struct harness_call *hc = call_read(
      (struct rd){.id = id, .max = 5, .wait_ms = 10000, .until_exit = true});
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.exec_read->data.len, 5);
  cr_expect_not(hc->resp.exec_read->exited);
  harness_call_free(hc);
}

Test(proc, wait_expires_without_data) {
  uint64_t id = start_cmd("sleep 100");
  uint64_t t0 = sbx_now_ms();
  struct harness_call *hc = call_read((struct rd){.id = id, .wait_ms = 200});
  uint64_t ms = sbx_now_ms() - t0;
  cr_assert_eq(hc->rc, 0);
  Sbx__V1__ExecReadReply *r = hc->resp.exec_read;
  cr_expect_eq(r->data.len, 0);
  cr_expect_not(r->exited);
  cr_expect_not(r->eof);
  cr_expect_eq(r->next_offset, 0);
  cr_expect_geq(ms, 190);
  cr_expect_lt(ms, 3000);
  harness_call_free(hc);
}

Test(proc, read_without_wait_answers_at_once) {
  uint64_t id = start_cmd("sleep 100");
  struct harness_call *hc = call_read((struct rd){.id = id});
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.exec_read->data.len, 0);
  cr_expect_not(hc->resp.exec_read->exited);
  harness_call_free(hc);
}

Test(proc, parked_reads_are_answered_on_kill) {
  uint64_t id = start_cmd("sleep 100");
  struct bg_read b = {.rd = {.id = id, .wait_ms = 30000, .until_exit = true}};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, bg_read_main, &b), 0);
  (void)nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  cr_assert_eq(call_simple(id, 's', SIGKILL, 1, NULL), 0);
  pthread_join(th, NULL);
  cr_assert_eq(b.hc->rc, 0);
  cr_expect(b.hc->resp.exec_read->exited);
  cr_expect_eq(b.hc->resp.exec_read->signal, SIGKILL);
  cr_expect_lt(b.ms, 5000);
  harness_call_free(b.hc);
}

/* ---- terminals -------------------------------------------------------- */

static uint64_t start_tty(const char *cmd, char **argv, size_t n) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.tty = true;
  if (cmd) {
    st.command = (char *)cmd;
  } else {
    st.argv = argv;
    st.n_argv = n;
  }
  return start(&st);
}

Test(proc, pty_echoes_input) {
  char *argv[] = {"cat"};
  uint64_t id = start_tty(NULL, argv, 1);
  cr_assert_eq(call_write(id, "hello\n", 6, false, NULL), 0);
  char *out = read_until(id, "hello\r\nhello\r\n");
  cr_expect_str_eq(out, "hello\r\nhello\r\n");
  free(out);
  cr_assert_eq(call_write(id, "\x04", 1, false, NULL), 0); /* Ctrl-D */
  struct output o = read_all(id, 0);
  cr_expect_eq(o.exit_code, 0, "exit %d signal %d output %s", o.exit_code,
               o.signal, o.data);
  free(o.data);
}

Test(proc, pty_is_the_controlling_terminal) {
  uint64_t id = start_tty("tty >/dev/null && echo yes; echo $TERM", NULL, 0);
  struct output o = read_all(id, 0);
  cr_expect_str_eq(o.data, "yes\r\nxterm-256color\r\n");
  free(o.data);
}

Test(proc, pty_resize_is_visible) {
  uint64_t id = start_tty("stty size; read x; stty size", NULL, 0);
  char *out = read_until(id, "24 80\r\n");
  cr_expect_str_eq(out, "24 80\r\n");
  free(out);
  cr_assert_eq(call_simple(id, 'z', 50, 132, NULL), 0);
  cr_assert_eq(call_write(id, "go\n", 3, false, NULL), 0);
  struct output o = read_all(id, 0);
  cr_expect(strstr(o.data, "50 132\r\n"), "got %s", o.data);
  free(o.data);
}

Test(proc, pty_ctrl_c_interrupts) {
  char *argv[] = {"sleep", "100"};
  uint64_t id = start_tty(NULL, argv, 2);
  cr_assert_eq(call_write(id, "\x03", 1, false, NULL), 0);
  struct output o = read_all(id, 0);
  cr_expect(o.exited);
  cr_expect(o.signal == SIGINT || o.exit_code == 130, "signal %d code %d",
            o.signal, o.exit_code);
  free(o.data);
}

Test(proc, pty_refuses_stderr_and_close) {
  char *argv[] = {"cat"};
  uint64_t id = start_tty(NULL, argv, 1);
  struct harness_call *hc = call_read((struct rd){.id = id, .stream = 1});
  cr_expect_lt(hc->rc, 0);
  cr_expect_eq(hc->call.err.code, SBX_INVALID_ARGUMENT);
  harness_call_free(hc);
  struct sbx_error err;
  cr_expect_lt(call_write(id, "x", 1, true, &err), 0);
  cr_expect_eq(err.code, SBX_INVALID_ARGUMENT);
}

Test(proc, resize_needs_a_terminal) {
  uint64_t id = start_cmd("sleep 100");
  struct sbx_error err;
  cr_expect_lt(call_simple(id, 'z', 10, 10, &err), 0);
  cr_expect_eq(err.code, SBX_INVALID_ARGUMENT);
}

/* ---- timeouts and signals --------------------------------------------- */

Test(proc, timeout_kills_the_whole_tree) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "sleep 100 & echo $!; sleep 100";
  st.timeout_ms = 300;
  uint64_t t0 = sbx_now_ms();
  uint64_t id = start(&st);
  struct output o = read_all(id, 0);
  uint64_t ms = sbx_now_ms() - t0;
  cr_expect(o.timed_out);
  cr_expect_eq(o.signal, SIGTERM);
  cr_expect_geq(ms, 250);
  cr_expect_lt(ms, 2000, "TERM sufficed (%lu ms)", (unsigned long)ms);
  pid_t grandchild = (pid_t)strtol(o.data, NULL, 10);
  cr_assert_gt(grandchild, 1, "grandchild pid from \"%s\"", o.data);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; i++) {
    gone = pid_gone(grandchild);
    if (!gone)
      (void)nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  cr_expect(gone, "grandchild %d survived", (int)grandchild);
  free(o.data);
}

Test(proc, timeout_kills_what_ignores_term) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "trap '' TERM; sleep 100 & echo $!; wait";
  st.timeout_ms = 100;
  uint64_t t0 = sbx_now_ms();
  struct output o = read_all(start(&st), 0);
  uint64_t ms = sbx_now_ms() - t0;
  cr_expect(o.timed_out);
  cr_expect_eq(o.signal, SIGKILL);
  cr_expect_geq(ms, 2000, "KILL comes 2 s after TERM (%lu ms)",
                (unsigned long)ms);
  cr_expect_lt(ms, 6000);
  pid_t grandchild = (pid_t)strtol(o.data, NULL, 10);
  cr_assert_gt(grandchild, 1);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; i++) {
    gone = pid_gone(grandchild);
    if (!gone)
      (void)nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  cr_expect(gone, "grandchild %d survived", (int)grandchild);
  free(o.data);
}

Test(proc, timeout_covers_what_the_leader_left_behind) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "sleep 100 & echo started";
  st.timeout_ms = 300;
  uint64_t t0 = sbx_now_ms();
  struct output o = read_all(start(&st), 0);
  uint64_t ms = sbx_now_ms() - t0;
  cr_expect_str_eq(o.data, "started\n");
  cr_expect_eq(o.exit_code, 0, "the shell itself exited normally");
  cr_expect(o.timed_out, "the background sleep was killed by the timeout");
  cr_expect_geq(ms, 250);
  cr_expect_lt(ms, 2000);
  free(o.data);
}

Test(proc, read_after_exit_waits_for_a_background_writer) {
  uint64_t id = start_cmd("(sleep 0.4; echo late) & echo early");
  /* Wait for the shell to be reaped. */
  for (int i = 0; i < 500; i++) {
    struct harness_call *hc = call_read((struct rd){.id = id});
    bool exited = hc->resp.exec_read->exited;
    harness_call_free(hc);
    if (exited)
      break;
    (void)nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
  }
  uint64_t t0 = sbx_now_ms();
  struct harness_call *hc =
      call_read((struct rd){.id = id, .offset = 6, .wait_ms = 10000});
  uint64_t ms = sbx_now_ms() - t0;
  cr_assert_eq(hc->rc, 0);
  Sbx__V1__ExecReadReply *r = hc->resp.exec_read;
  cr_expect(r->exited);
  cr_expect_eq(r->data.len, 5,
               "waited for the data instead of answering "
               "empty (%lu ms)",
               (unsigned long)ms);
  cr_expect_lt(ms, 5000);
  harness_call_free(hc);
}

Test(proc, signal_to_the_process_and_its_group) {
  uint64_t id = start_sleep();
  cr_assert_eq(call_simple(id, 's', SIGUSR1, 0, NULL), 0);
  struct output o = read_all(id, 0);
  cr_expect_eq(o.signal, SIGUSR1);
  free(o.data);
  struct sbx_error err;
  cr_expect_lt(call_simple(id, 's', SIGTERM, 0, &err), 0);
  cr_expect_eq(err.code, SBX_CONFLICT, "signal to an exited process");
  cr_expect_lt(call_simple(id, 's', 0, 0, &err), 0);
  cr_expect_eq(err.code, SBX_INVALID_ARGUMENT);

  id = start_cmd("sleep 100 & sleep 100; echo not reached");
  cr_assert_eq(call_simple(id, 's', SIGKILL, 1, NULL), 0);
  o = read_all(id, 0);
  cr_expect_eq(o.signal, SIGKILL);
  cr_expect_eq(o.len, 0);
  free(o.data);
}

/* ---- identity, cwd, environment --------------------------------------- */

Test(proc, run_as_switches_user) {
  if (geteuid() != 0)
    cr_skip("run_as needs the test to run as root");
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "id -u; id -g; echo $USER $HOME";
  st.run_as = "nobody";
  struct output o = read_all(start(&st), 0);
  cr_expect_str_eq(o.data, "65534\n65534\nnobody /nonexistent\n");
  free(o.data);
}

Test(proc, run_as_needs_root) {
  h.d.is_root = false;
  h.d.uid = 12345;
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "id -u";
  st.run_as = "nobody";
  char msg[SBX_ERROR_MSG_MAX];
  cr_expect_eq(start_fails(&st, msg, sizeof(msg)), SBX_PERMISSION_DENIED);
  cr_expect_str_eq(msg, "run_as needs sandboxd to run as root");
  st.run_as = "no-such-user-sbx";
  cr_expect_eq(start_fails(&st, msg, sizeof(msg)), SBX_NOT_FOUND);
  cr_expect_str_eq(msg, "user \"no-such-user-sbx\" not found");
}

Test(proc, cwd_beneath_the_root) {
  harness_write(&h, "sub/dir/f", "x");
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "pwd; echo $PWD; ls";
  st.cwd = "sub/dir";
  struct output o = read_all(start(&st), 0);
  char want[512];
  (void)snprintf(want, sizeof(want), "%s/sub/dir\n%s/sub/dir\nf\n", h.root,
                 h.root);
  cr_expect_str_eq(o.data, want);
  free(o.data);

  st.cwd = NULL;
  st.command = "pwd";
  o = read_all(start(&st), 0);
  (void)snprintf(want, sizeof(want), "%s\n", h.root);
  cr_expect_str_eq(o.data, want, "the default is the root");
  free(o.data);
}

Test(proc, cwd_may_not_escape) {
  char link[256];
  (void)snprintf(link, sizeof(link), "%s/out", h.root);
  cr_assert_eq(symlink("/tmp", link), 0);
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "pwd";
  st.cwd = "../";
  enum sbx_code code = start_fails(&st, NULL, 0);
  cr_expect(code == SBX_INVALID_ARGUMENT || code == SBX_PERMISSION_DENIED,
            "code %d", code);
  st.cwd = "out";
  cr_expect_eq(start_fails(&st, NULL, 0), SBX_PERMISSION_DENIED);
  st.cwd = "/etc";
  cr_expect_eq(start_fails(&st, NULL, 0), SBX_PERMISSION_DENIED);
  st.cwd = "missing";
  char msg[SBX_ERROR_MSG_MAX];
  cr_expect_eq(start_fails(&st, msg, sizeof(msg)), SBX_NOT_FOUND);
  cr_expect(strstr(msg, "missing"), "message names it: %s", msg);
}

Test(proc, environment_is_clean) {
  cr_assert_eq(setenv("SBX_TEST_INHERITED_7F3A", "leak", 1), 0);
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {"env"};
  st.argv = argv;
  st.n_argv = 1;
  Sbx__V1__EnvVar v1 = SBX__V1__ENV_VAR__INIT, v2 = SBX__V1__ENV_VAR__INIT;
  v1.name = "FOO";
  v1.value = "bar baz";
  v2.name = "LANG";
  v2.value = "fr_FR.UTF-8";
  Sbx__V1__EnvVar *vars[] = {&v1, &v2};
  st.env = vars;
  st.n_env = 2;
  struct output o = read_all(start(&st), 0);
  cr_expect_null(strstr(o.data, "SBX_TEST_INHERITED"), "inherited: %s", o.data);
  cr_expect(strstr(o.data, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                           "/usr/bin:/sbin:/bin\n"));
  char home[256];
  (void)snprintf(home, sizeof(home), "HOME=%s\n", h.root);
  cr_expect(strstr(o.data, home), "%s", o.data);
  cr_expect(strstr(o.data, "TERM=dumb\n"));
  cr_expect(strstr(o.data, "FOO=bar baz\n"));
  cr_expect(strstr(o.data, "LANG=fr_FR.UTF-8\n"), "the request overrides");
  cr_expect_null(strstr(o.data, "LANG=C.UTF-8"));
  cr_expect(strstr(o.data, "USER=sandbox\n"), "as the SDK's: %s", o.data);
  cr_expect(strstr(o.data, "LOGNAME=sandbox\n"));
  cr_expect(strstr(o.data, "TMPDIR=/tmp\n"), "as the SDK's: %s", o.data);
  cr_expect(strstr(o.data, "SHELL=/bin/sh\n"));
  int lines = 0;
  for (const char *p = o.data; *p; p++)
    lines += *p == '\n';
  cr_expect_eq(lines, 10, "the base (9) plus FOO: %s", o.data);
  free(o.data);
}

Test(proc, children_inherit_no_fds) {
  /* stdin, stdout, stderr and the fd ls uses for /proc/self/fd. */
  struct output o = read_all(start_cmd("ls /proc/self/fd | wc -l"), 0);
  cr_expect_eq(strtol(o.data, NULL, 10), 4, "fds: %s", o.data);
  free(o.data);
}

/* ---- limits and records ----------------------------------------------- */

Test(proc, full_table_of_running_processes_refuses) {
  h.d.limits.max_processes = 2;
  restart_table();
  start_cmd("sleep 100");
  start_cmd("sleep 100");
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "true";
  char msg[SBX_ERROR_MSG_MAX];
  cr_expect_eq(start_fails(&st, msg, sizeof(msg)), SBX_LIMIT_EXCEEDED);
  cr_expect(strstr(msg, "max_processes"), "%s", msg);
}

static size_t list_ids(uint64_t *ids, size_t max) {
  Sbx__V1__ExecList rq = SBX__V1__EXEC_LIST__INIT;
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_EXEC_LIST;
  req.exec_list = &rq;
  struct harness_call *hc = harness_call(&h, &req, rpc_exec_list);
  cr_assert_eq(hc->rc, 0);
  size_t n = hc->resp.exec_list->n_execs;
  for (size_t i = 0; i < n && i < max; i++)
    ids[i] = hc->resp.exec_list->execs[i]->exec_id;
  harness_call_free(hc);
  return n;
}

Test(proc, full_table_prunes_the_least_recently_used_finished) {
  h.d.limits.max_processes = 3;
  restart_table();
  uint64_t a = start_cmd("true");
  uint64_t b = start_cmd("true");
  uint64_t c = start_cmd("sleep 100");
  free(read_all(a, 0).data);
  free(read_all(b, 0).data);
  free(read_all(a, 0).data); /* a is now used more recently than b */
  uint64_t d = start_cmd("true");
  uint64_t ids[8];
  size_t n = list_ids(ids, 8);
  cr_assert_eq(n, 3);
  cr_expect_eq(ids[0], a);
  cr_expect_eq(ids[1], c);
  cr_expect_eq(ids[2], d);
  struct harness_call *hc = call_read((struct rd){.id = b});
  cr_expect_eq(hc->call.err.code, SBX_NOT_FOUND, "b was pruned");
  harness_call_free(hc);
}

Test(proc, list_describes_processes) {
  uint64_t id = start_cmd("echo hi; echo there >&2");
  free(read_all(id, 0).data);
  free(read_all(id, 1).data);
  Sbx__V1__ExecList rq = SBX__V1__EXEC_LIST__INIT;
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_EXEC_LIST;
  req.exec_list = &rq;
  struct harness_call *hc = harness_call(&h, &req, rpc_exec_list);
  cr_assert_eq(hc->rc, 0);
  cr_assert_eq(hc->resp.exec_list->n_execs, 1);
  Sbx__V1__ExecInfo *e = hc->resp.exec_list->execs[0];
  cr_expect_eq(e->exec_id, id);
  cr_expect_not(e->running);
  cr_expect_eq(e->exit_code, 0);
  cr_expect_eq(e->stdout_bytes, 3);
  cr_expect_eq(e->stderr_bytes, 6);
  cr_expect_str_eq(e->summary, "echo hi; echo there >&2");
  cr_expect_gt(e->started_unix_ms, 1600000000000ull);
  harness_call_free(hc);
}

Test(proc, release_forgets_only_finished_processes) {
  uint64_t id = start_sleep();
  struct sbx_error err;
  cr_expect_lt(call_simple(id, 'r', 0, 0, &err), 0);
  cr_expect_eq(err.code, SBX_CONFLICT);
  cr_assert_eq(call_simple(id, 's', SIGKILL, 0, NULL), 0);
  free(read_all(id, 0).data);
  cr_expect_eq(call_simple(id, 'r', 0, 0, NULL), 0);
  cr_expect_lt(call_simple(id, 'r', 0, 0, &err), 0);
  cr_expect_eq(err.code, SBX_NOT_FOUND);
  struct harness_call *hc = call_read((struct rd){.id = id});
  cr_expect_eq(hc->call.err.code, SBX_NOT_FOUND);
  cr_expect_str_eq(hc->call.err.msg, "exec 1 not found");
  harness_call_free(hc);
}

Test(proc, bad_requests_are_refused_with_a_reason) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  char *argv[] = {"true"};
  char msg[SBX_ERROR_MSG_MAX];
  /* both */
  st.argv = argv;
  st.n_argv = 1;
  st.command = "true";
  cr_expect_eq(start_fails(&st, msg, sizeof(msg)), SBX_INVALID_ARGUMENT);
  cr_expect_str_eq(msg, "exec start needs exactly one of argv and command");
  /* neither */
  st.n_argv = 0;
  st.command = "";
  cr_expect_eq(start_fails(&st, NULL, 0), SBX_INVALID_ARGUMENT);
  /* bad environment names */
  st.command = "true";
  Sbx__V1__EnvVar v = SBX__V1__ENV_VAR__INIT;
  Sbx__V1__EnvVar *vars[] = {&v};
  st.env = vars;
  st.n_env = 1;
  const char *bad[] = {"1X", "A=B", "", "A-B", "É"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    v.name = (char *)bad[i];
    cr_expect_eq(start_fails(&st, msg, sizeof(msg)), SBX_INVALID_ARGUMENT,
                 "name \"%s\"", bad[i]);
  }
  cr_expect(strstr(msg, "environment variable name"), "%s", msg);
  st.n_env = 0;
  /* unknown ids */
  struct sbx_error err;
  struct harness_call *hc = call_read((struct rd){.id = 99});
  cr_expect_eq(hc->call.err.code, SBX_NOT_FOUND);
  harness_call_free(hc);
  cr_expect_lt(call_write(99, "x", 1, false, &err), 0);
  cr_expect_eq(err.code, SBX_NOT_FOUND);
  cr_expect_lt(call_simple(99, 's', SIGTERM, 0, &err), 0);
  cr_expect_eq(err.code, SBX_NOT_FOUND);
  cr_expect_lt(call_simple(99, 'r', 0, 0, &err), 0);
  cr_expect_eq(err.code, SBX_NOT_FOUND);
  /* an offset past the end */
  uint64_t id = start_cmd("echo hi");
  free(read_all(id, 0).data);
  hc = call_read((struct rd){.id = id, .offset = 4});
  cr_expect_eq(hc->call.err.code, SBX_INVALID_ARGUMENT);
  harness_call_free(hc);
  /* too many arguments */
  static char *many[5000];
  for (size_t i = 0; i < 5000; i++)
    many[i] = "x";
  st.command = NULL;
  st.argv = many;
  st.n_argv = 5000;
  cr_expect_eq(start_fails(&st, NULL, 0), SBX_LIMIT_EXCEEDED);
}

/* Parked calls made without the harness, to see RPC_PENDING as it happens. */
struct parked {
  struct rpc_call call;
  Sbx__V1__Response resp;
  int rc;
};
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_cv = PTHREAD_COND_INITIALIZER;
static int parked_done;

static void parked_complete(struct rpc_call *c, int r) {
  struct parked *p = c->server_data;
  pthread_mutex_lock(&parked_mu);
  p->rc = r;
  parked_done++;
  pthread_cond_broadcast(&parked_cv);
  pthread_mutex_unlock(&parked_mu);
}

Test(proc, too_many_parked_reads_are_refused) {
  uint64_t id = start_sleep();
  enum { N = 64 };
  static struct parked ps[N + 1];
  Sbx__V1__ExecRead rq = SBX__V1__EXEC_READ__INIT;
  rq.exec_id = id;
  rq.wait_ms = 30000;
  Sbx__V1__Request req = SBX__V1__REQUEST__INIT;
  req.body_case = SBX__V1__REQUEST__BODY_EXEC_READ;
  req.exec_read = &rq;
  for (int i = 0; i <= N; i++) {
    struct parked *p = &ps[i];
    sbx__v1__response__init(&p->resp);
    p->call = (struct rpc_call){.d = &h.d,
                                .req = &req,
                                .resp = &p->resp,
                                .complete = parked_complete,
                                .server_data = p};
    int r = rpc_exec_read(&p->call);
    if (i < N) {
      cr_assert_eq(r, RPC_PENDING, "read %d parks", i);
    } else {
      cr_expect_lt(r, 0);
      cr_expect_eq(p->call.err.code, SBX_LIMIT_EXCEEDED);
      cr_expect(strstr(p->call.err.msg, "too many reads"), "%s",
                p->call.err.msg);
    }
  }
  cr_assert_eq(call_simple(id, 's', SIGKILL, 0, NULL), 0);
  pthread_mutex_lock(&parked_mu);
  while (parked_done < N)
    pthread_cond_wait(&parked_cv, &parked_mu);
  pthread_mutex_unlock(&parked_mu);
  for (int i = 0; i < N; i++) {
    cr_expect_eq(ps[i].rc, 0);
    /* The pipe may close just before the exit is seen. */
    cr_expect(ps[i].resp.exec_read->exited || ps[i].resp.exec_read->eof);
    sbx_arena_reset(&ps[i].call.arena);
  }
  sbx_arena_reset(&ps[N].call.arena);
}

Test(proc, table_free_answers_parked_reads_and_kills) {
  uint64_t id = start_cmd("sleep 100 & echo $!; sleep 100");
  char *out = read_until(id, "\n");
  pid_t grandchild = (pid_t)strtol(out, NULL, 10);
  free(out);
  struct bg_read b = {
      .rd = {.id = id, .offset = 0, .wait_ms = 30000, .until_exit = true}};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, bg_read_main, &b), 0);
  (void)nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  proc_table_free(h.d.procs, 200);
  h.d.procs = NULL;
  pthread_join(th, NULL);
  cr_assert_eq(b.hc->rc, 0);
  cr_expect_lt(b.ms, 5000);
  harness_call_free(b.hc);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; i++) {
    gone = pid_gone(grandchild);
    if (!gone)
      (void)nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  cr_expect(gone, "grandchild %d survived", (int)grandchild);
  start_table(); /* for the teardown */
}

Test(proc, shutdown_answers_parked_reads_and_refuses_starts) {
  uint64_t id = start_sleep();
  struct bg_read b = {.rd = {.id = id, .wait_ms = 30000, .until_exit = true}};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, bg_read_main, &b), 0);
  (void)nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  proc_table_shutdown(h.d.procs, 200);
  pthread_join(th, NULL);
  cr_assert_eq(b.hc->rc, 0);
  cr_expect_lt(b.ms, 5000);
  harness_call_free(b.hc);
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.command = "true";
  cr_expect_eq(start_fails(&st, NULL, 0), SBX_UNAVAILABLE);
  uint64_t t0 = sbx_now_ms();
  struct harness_call *hc = call_read((struct rd){.id = id, .wait_ms = 10000});
  cr_expect_eq(hc->rc, 0);
  cr_expect_lt(sbx_now_ms() - t0, 1000, "reads answer at once");
  harness_call_free(hc);
}

/* ---- seccomp ---------------------------------------------------------- */

/* A python probe: prints the errno of name_to_handle_at with bad flags
 * (EINVAL when allowed: no privilege is needed to get that far). */
static const char *probe_handle =
    "import ctypes\n"
    "l = ctypes.CDLL(None, use_errno=True)\n"
    "l.name_to_handle_at(-100, b'/', None, None, 0xffff)\n"
    "print(ctypes.get_errno())\n";

static const char *probe_net =
    "import socket, sys\n"
    "socket.socket(socket.AF_UNIX).close()\n"
    "try:\n"
    "    socket.socket(socket.AF_INET).close(); print('inet ok')\n"
    "except PermissionError: print('inet refused')\n"
    "try:\n"
    "    socket.socket(socket.AF_INET6).close(); print('inet6 ok')\n"
    "except PermissionError: print('inet6 refused')\n"
    "except OSError: print('inet6 ok')\n";

static char *run_py(const char *code) {
  char *argv[] = {"python3", "-c", (char *)code};
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = 3;
  struct output o = read_all(start(&st), 0);
  cr_expect_eq(o.exit_code, 0, "python: %s", o.data);
  return o.data;
}

Test(seccomp, default_refuses_with_eperm) {
  char *out = run_py(probe_handle);
  cr_expect_eq(strtol(out, NULL, 10), EPERM, "errno %s", out);
  free(out);
  struct output o = read_all(start_cmd("unshare -U true 2>&1"), 0);
  cr_expect_neq(o.exit_code, 0);
  cr_expect(strstr(o.data, "Operation not permitted"), "%s", o.data);
  free(o.data);
  out = run_py(probe_net);
  cr_expect_str_eq(out, "inet ok\ninet6 ok\n");
  free(out);
}

Test(seccomp, off_allows) {
  h.d.seccomp = SANDBOXD_SECCOMP_OFF;
  restart_table();
  char *out = run_py(probe_handle);
  cr_expect_neq(strtol(out, NULL, 10), EPERM, "errno %s", out);
  free(out);
}

Test(seccomp, off_allows_unshare_where_the_kernel_does) {
  h.d.seccomp = SANDBOXD_SECCOMP_OFF;
  restart_table();
  struct output o = read_all(start_cmd("unshare -U true 2>&1"), 0);
  if (o.exit_code != 0) {
    free(o.data);
    cr_skip("unprivileged user namespaces are not available here");
  }
  cr_expect_eq(o.exit_code, 0);
  free(o.data);
}

Test(seccomp, no_network_refuses_inet_sockets) {
  h.d.seccomp = SANDBOXD_SECCOMP_NO_NETWORK;
  restart_table();
  char *out = run_py(probe_net);
  cr_expect_str_eq(out, "inet refused\ninet6 refused\n");
  free(out);
}

Test(seccomp, other_abis_are_killed) {
  /* x32: getpid with the x32 bit. Killed by the filter (SIGSYS), where
   * without it the kernel would answer ENOSYS or run it. */
#if defined(__x86_64__)
  struct output o =
      read_all(start_cmd("python3 -c 'import ctypes; "
                         "ctypes.CDLL(None).syscall(0x40000000 | 39)'"),
               0);
  cr_expect_eq(o.exit_code, 128 + SIGSYS, "exit %d", o.exit_code);
  free(o.data);
#else
  cr_skip("x32 exists only on x86_64");
#endif
}

Test(seccomp, children_lose_cap_sys_ptrace) {
  if (geteuid() != 0)
    cr_skip("only a root child has CAP_SYS_PTRACE to lose");
  struct output o = read_all(start_cmd("grep CapBnd /proc/self/status"), 0);
  unsigned long long bnd = strtoull(strchr(o.data, ':') + 1, NULL, 16);
  cr_expect_eq(bnd & (1ull << 19), 0, "CapBnd %llx", bnd);
  free(o.data);
}

/* A stream closed while its process runs: a read waits for the exit (its
 * news) instead of answering empty at once, so a reader does not spin. */
Test(proc, a_closed_stream_s_read_waits_for_the_exit) {
  uint64_t id = start_cmd("exec >&-; sleep 0.4; exit 5");
  usleep(150000); /* stdout is closed by now */
  uint64_t t0 = sbx_now_ns();
  struct harness_call *hc =
      call_read((struct rd){.id = id, .offset = 0, .wait_ms = 10000});
  uint64_t ms = (sbx_now_ns() - t0) / 1000000;
  cr_assert_eq(hc->rc, 0, "read: %s", hc->call.err.msg);
  Sbx__V1__ExecReadReply *r = hc->resp.exec_read;
  cr_expect(r->exited, "answered at the exit, after %llu ms",
            (unsigned long long)ms);
  cr_expect_eq(r->exit_code, 5);
  cr_expect(r->eof);
  cr_expect_eq(r->data.len, 0);
  cr_expect_geq(ms, 100, "it waited for the exit");
  harness_call_free(hc);
}
