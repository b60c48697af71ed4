/* sbx sandbox exec and shell: a command in the sandbox with its output
 * streamed to ours (stdin passed on, signals forwarded), or an interactive
 * shell on our terminal. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

#define CLI_JSON_OUTPUT_MAX (16u << 20)
#define CLI_MAX_ENV 256

/* What the threads of one attached command share: DONE_FD, an eventfd that
 * becomes readable (and stays so) once the stdout reader has seen the end,
 * so that the main thread and the stdin writer stop at once, not at their
 * next timeout. */
struct relay {
  int done_fd;
  atomic_bool done;
};

static void relay_finish(struct relay *rl) {
  atomic_store(&rl->done, true);
  uint64_t one = 1;
  while (write(rl->done_fd, &one, sizeof(one)) < 0 && errno == EINTR)
    ;
}

struct reader {
  struct sbx_client *client;
  uint64_t exec_id;
  Sbx__V1__Stream stream;
  int fd;              /* where the output goes; -1 to collect */
  struct sbx_buf *buf; /* collected output (--json) */
  struct relay *relay; /* told of the end; NULL for none */
  uint64_t off;        /* the next byte to read */
  bool exited, ended;  /* ended: exited and all output read */
  int code, sig;
  int rc;
  struct sbx_error e;
};

/* Takes one read X of RD's stream: its note of a gap, its data, its
 * offset, the command's exit. */
static void reader_take(struct reader *rd, const Sbx__V1__ExecReadReply *x) {
  if (x->gap && rd->fd >= 0) {
    char note[96];
    int n = snprintf(note, sizeof(note),
                     "\n[sbx: %llu bytes of output were dropped]\n",
                     (unsigned long long)x->gap);
    (void)sbx_write_all(2, note, (size_t)n);
  }
  if (x->data.len) {
    if (rd->fd >= 0)
      (void)sbx_write_all(rd->fd, x->data.data, x->data.len);
    else
      (void)sbx_buf_append(rd->buf, x->data.data, x->data.len);
  }
  rd->off = x->next_offset;
  if (x->exited) {
    rd->exited = true;
    rd->code = x->exit_code;
    rd->sig = x->signal;
  }
  rd->ended = x->eof && x->exited;
}

/* One read handed from the thread that fetches to the one that writes, so
 * that the next read is in flight while the last is being written. */
struct handoff {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  Sbx__V1__Response *slot; /* a reply waiting to be taken */
  bool done;               /* no more replies come */
  struct reader *rd;
};

/* Takes the replies HANDOFF passes and writes them out, in order. */
static void *sink_main(void *arg) {
  struct handoff *h = arg;
  for (;;) {
    pthread_mutex_lock(&h->mu);
    while (!h->slot && !h->done)
      pthread_cond_wait(&h->cv, &h->mu);
    Sbx__V1__Response *r = h->slot;
    h->slot = NULL;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (!r)
      return NULL;
    reader_take(h->rd, r->exec_read);
    sbx_client_reply_free(r);
  }
}

/* Passes R to H's sink, after the one before was taken. */
static void handoff_put(struct handoff *h, Sbx__V1__Response *r) {
  pthread_mutex_lock(&h->mu);
  while (h->slot)
    pthread_cond_wait(&h->cv, &h->mu);
  h->slot = r;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

/* Reads RD's stream from RD->off to its end (or an error), then tells the
 * relay. Output to a file descriptor is written by a second thread while
 * the next read is fetched. A thread's body, or called directly. */
static void *reader_main(void *arg) {
  struct reader *rd = arg;
  struct handoff h = {.rd = rd};
  pthread_t sink;
  bool piped = rd->fd >= 0;
  if (piped) {
    (void)pthread_mutex_init(&h.mu, NULL);
    (void)pthread_cond_init(&h.cv, NULL);
    piped = pthread_create(&sink, NULL, sink_main, &h) == 0;
    if (!piped) {
      pthread_cond_destroy(&h.cv);
      pthread_mutex_destroy(&h.mu);
    }
  }
  uint64_t off = rd->off;
  bool ended = rd->ended;
  while (!ended) {
    Sbx__V1__ExecRead a = SBX__V1__EXEC_READ__INIT;
    a.exec_id = rd->exec_id;
    a.stream = rd->stream;
    a.offset = off;
    a.wait_ms = 1000;
    Sbx__V1__Response *resp = NULL;
    rd->rc = sbx_exec_read(rd->client, &a, &resp, &rd->e);
    if (rd->rc < 0)
      break;
    off = resp->exec_read->next_offset;
    ended = resp->exec_read->eof && resp->exec_read->exited;
    if (piped) {
      handoff_put(&h, resp);
      continue;
    }
    reader_take(rd, resp->exec_read);
    sbx_client_reply_free(resp);
  }
  if (piped) {
    pthread_mutex_lock(&h.mu);
    h.done = true;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    pthread_join(sink, NULL);
    pthread_cond_destroy(&h.cv);
    pthread_mutex_destroy(&h.mu);
  }
  if (rd->relay)
    relay_finish(rd->relay);
  return NULL;
}

struct writer {
  struct sbx_client *client;
  uint64_t exec_id;
  struct relay *relay;
  bool close_at_eof;
};

/* Passes our stdin on until its end (closing the command's when asked) or
 * until the command's output has ended. */
static void *writer_main(void *arg) {
  struct writer *w = arg;
  char buf[16384];
  while (!atomic_load(&w->relay->done)) {
    struct pollfd p[2] = {{.fd = 0, .events = POLLIN},
                          {.fd = w->relay->done_fd, .events = POLLIN}};
    int pr = poll(p, 2, -1);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0 || p[1].revents)
      break;
    ssize_t k = read(0, buf, sizeof(buf));
    if (k < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    struct sbx_error e = {0};
    if (k <= 0) {
      if (w->close_at_eof)
        (void)sbx_exec_write(w->client, w->exec_id, NULL, 0, true, &e);
      break;
    }
    if (sbx_exec_write(w->client, w->exec_id, buf, (size_t)k, false, &e) < 0)
      break;
  }
  return NULL;
}

/* Waits until the relay RL is done, handing each signal of SET (blocked in
 * every thread) to ON_SIGNAL as it comes. No polling interval: the command
 * ends the wait as soon as its output has. Should the signals not be
 * watchable (no fd left), the wait goes on without them. */
static void relay_wait(struct relay *rl, const sigset_t *set,
                       void (*on_signal)(int sig, void *arg), void *arg) {
  _cleanup_close_ int sfd = signalfd(-1, set, SFD_CLOEXEC);
  while (!atomic_load(&rl->done)) {
    struct pollfd p[2] = {{.fd = rl->done_fd, .events = POLLIN},
                          {.fd = sfd, .events = POLLIN}};
    int pr = poll(p, sfd >= 0 ? 2 : 1, -1);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0 || p[0].revents)
      break;
    struct signalfd_siginfo si;
    if (sfd >= 0 && (p[1].revents & POLLIN) &&
        read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
      on_signal((int)si.ssi_signo, arg);
  }
}

/* What exec's command line asks for. */
struct exec_args {
  bool interactive, tty;
  const char *cwd, *user;
  char *env[CLI_MAX_ENV];
  size_t nenv;
  unsigned timeout;
};

/* Starts ARGV (ARGC words) in SB as A asks; when WAIT_MS, the reply waits
 * that long for the command's end, so that a quick command costs one round
 * trip. *OUT is the reply (new). */
static int start_exec(struct sandbox *sb, char **argv, size_t argc,
                      const struct exec_args *a, unsigned wait_ms,
                      Sbx__V1__Response **out, struct sbx_error *e) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = argc;
  st.cwd = (char *)(a->cwd ? a->cwd : "");
  st.run_as = (char *)(a->user ? a->user : "");
  st.tty = a->tty;
  st.no_stdin = !a->interactive;
  st.timeout_ms = a->timeout;
  st.wait_ms = wait_ms;
  st.hold_ms = CLI_EXEC_HOLD_S * 1000;
  struct winsize ws;
  if (a->tty && ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
    st.rows = ws.ws_row;
    st.cols = ws.ws_col;
  }
  size_t n = sb->nenv + a->nenv + 1;
  _cleanup_free_ Sbx__V1__EnvVar *vars = calloc(n, sizeof(*vars));
  _cleanup_free_ Sbx__V1__EnvVar **vp = calloc(n, sizeof(*vp));
  _cleanup_free_ char *names = calloc(n, 512);
  if (!vars || !vp || !names)
    return -ENOMEM;
  size_t k = 0;
  const char *term = getenv("TERM");
  char termkv[256];
  char *all[CLI_MAX_ENV + 2 + 4096];
  size_t na = 0;
  for (size_t i = 0; i < sb->nenv && na < SBX_ARRAY_SIZE(all) - 1 - CLI_MAX_ENV;
       i++)
    all[na++] = sb->env[i];
  for (size_t i = 0; i < a->nenv; i++)
    all[na++] = a->env[i];
  if (a->tty && term && strlen(term) < 200) {
    (void)snprintf(termkv, sizeof(termkv), "TERM=%s", term);
    all[na++] = termkv;
  }
  for (size_t i = 0; i < na && k < n; i++) {
    const char *eq = strchr(all[i], '=');
    if (!eq || eq == all[i] || (size_t)(eq - all[i]) >= 512)
      continue;
    char *nm = names + k * 512;
    memcpy(nm, all[i], (size_t)(eq - all[i]));
    nm[eq - all[i]] = '\0';
    sbx__v1__env_var__init(&vars[k]);
    vars[k].name = nm;
    vars[k].value = (char *)(eq + 1);
    vp[k] = &vars[k];
    k++;
  }
  st.env = vp;
  st.n_env = k;
  return sbx_exec_start(sb->client, &st, out, e);
}

static int status_code(const struct reader *rd) {
  if (rd->sig)
    return 128 + rd->sig;
  return rd->code;
}

/* Exec's options: -1 when parsing goes on, else the exit code. */
static int exec_option(struct cli_common *c, struct exec_args *a, int ch,
                       char *arg) {
  switch (ch) {
  case 'i':
    a->interactive = true;
    return -1;
  case 't':
    a->tty = true;
    return -1;
  case 'w':
    a->cwd = arg;
    return -1;
  case 'u':
    a->user = arg;
    return -1;
  case 'e':
    if (a->nenv == CLI_MAX_ENV || !strchr(arg, '=') || arg[0] == '=')
      return cli_usage_error(c, "exec", "--env \"%s\": expected NAME=VALUE",
                             arg);
    a->env[a->nenv++] = arg;
    return -1;
  case 256: { /* --timeout */
    char *end = NULL;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || !*arg || *end || v < 1 || v > 86400000)
      return cli_usage_error(c, "exec",
                             "--timeout \"%s\": milliseconds, 1 or "
                             "more",
                             arg);
    a->timeout = (unsigned)v;
    return -1;
  }
  default:
    return cli_common_option(c, "exec", ch);
  }
}

struct exec_signal {
  struct sbx_client *client;
  uint64_t exec_id;
};

/* Exec passes Ctrl-C, SIGTERM and SIGHUP on to the command's group. */
static void exec_on_signal(int sig, void *arg) {
  struct exec_signal *x = arg;
  struct sbx_error se = {0};
  (void)sbx_exec_signal(x->client, x->exec_id, sig, true, &se);
}

/* The command's status after the relay, or --json's object printed. */
static int relay_result(struct cli_common *c, struct reader *ro,
                        const struct sbx_buf *bo, const struct sbx_buf *be) {
  if (ro->rc < 0)
    return cli_fail(c, &ro->e, ro->rc);
  if (c->json) {
    _cleanup_json_ json_t *j =
        json_pack("{s:i, s:i, s:s%, s:s%}", "exit_code", ro->code, "signal",
                  ro->sig, "stdout", bo->data ? bo->data : "", bo->len,
                  "stderr", be->data ? be->data : "", be->len);
    if (j)
      (void)cli_print_json(c, j); /* the status is the command's */
    else
      (void)cli_error(c, SBX_INVALID_ARGUMENT, 1,
                      "the output is not valid UTF-8 for --json");
  }
  return status_code(ro);
}

/* The signals exec passes on (shell on a terminal: and SIGWINCH). They are
 * blocked before the sandbox is attached, so that every thread, nng's
 * too, blocks them: one that comes reaches the signalfd of relay_wait, even
 * before the start, and is never taken (and dropped, or the process
 * killed) by a thread that does not wait for it. */
static void attach_signals(sigset_t *set, bool winch) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGHUP);
  if (winch)
    sigaddset(set, SIGWINCH);
}

/* Relays the command EXEC_ID of SB while it runs, with a thread per stream
 * (RO, RE) and one for our stdin with -i (closed at its end), our signals
 * passed on to its group. 0, or 1 after saying why not. */
static int relay_threads(struct cli_common *c, struct sandbox *sb,
                         uint64_t exec_id, const struct exec_args *a,
                         struct reader *ro, struct reader *re) {
  struct relay rl = {.done_fd = eventfd(0, EFD_CLOEXEC)};
  atomic_init(&rl.done, false);
  if (rl.done_fd < 0)
    return cli_error(c, sbx_code_from_errno(errno), 1,
                     "cannot make an eventfd: %s", strerror(errno));
  ro->relay = &rl;
  struct writer w = {.client = sb->client,
                     .exec_id = exec_id,
                     .relay = &rl,
                     .close_at_eof = true};
  pthread_t t1, t2, t3;
  bool have_err = !a->tty, have_w = a->interactive;
  if (pthread_create(&t1, NULL, reader_main, ro) != 0) {
    (void)close(rl.done_fd);
    return cli_error(c, SBX_INTERNAL, 1, "cannot start a thread");
  }
  if (have_err && pthread_create(&t2, NULL, reader_main, re) != 0)
    have_err = false;
  if (have_w && pthread_create(&t3, NULL, writer_main, &w) != 0)
    have_w = false;
  sigset_t set;
  attach_signals(&set, false);
  struct exec_signal xs = {sb->client, exec_id};
  relay_wait(&rl, &set, exec_on_signal, &xs);
  pthread_join(t1, NULL);
  if (have_err)
    pthread_join(t2, NULL);
  if (have_w)
    pthread_join(t3, NULL);
  (void)close(rl.done_fd);
  return 0;
}

/* Relays the started command EXEC_ID of SB, whose start's wait read FIRST
 * of its stdout (NULL: none): its output to ours (or into --json's
 * object), our stdin with -i, our signals (blocked by the caller). A
 * command that ended within the start's wait needs no thread: its stderr
 * is read and that is all. Releases it at the end. The command's status,
 * or 1 after saying why. */
static int relay_exec(struct cli_common *c, struct sandbox *sb,
                      uint64_t exec_id, const struct exec_args *a,
                      const Sbx__V1__ExecReadReply *first) {
  struct sbx_buf bo, be;
  sbx_buf_init(&bo, CLI_JSON_OUTPUT_MAX);
  sbx_buf_init(&be, CLI_JSON_OUTPUT_MAX);
  struct reader ro = {.client = sb->client,
                      .exec_id = exec_id,
                      .stream = SBX__V1__STREAM__STDOUT,
                      .fd = c->json ? -1 : 1,
                      .buf = &bo};
  struct reader re = ro;
  re.stream = SBX__V1__STREAM__STDERR;
  re.fd = c->json ? -1 : 2;
  re.buf = &be;
  if (first)
    reader_take(&ro, first);
  int code = 0;
  if (!ro.ended)
    code = relay_threads(c, sb, exec_id, a, &ro, &re);
  else if (!a->tty)
    (void)reader_main(&re);
  if (code == 0)
    code = relay_result(c, &ro, &bo, &be);
  struct sbx_error ie = {0};
  (void)sbx_exec_release(sb->client, exec_id, &ie);
  sbx_buf_free(&bo);
  sbx_buf_free(&be);
  return code;
}

/* Exec's command line: the options (before or after the ID, up to the
 * command), the ID, then the command (after "--", or from the first word
 * that is no option). -1 with *ID and *FIRST (the command's index) set, or
 * the exit code. */
static int parse_exec(struct cli_common *c, struct exec_args *a, int argc,
                      char **argv, const char **id, int *first) {
  static const struct option opts[] = {
      {"interactive", no_argument, NULL, 'i'},
      {"tty", no_argument, NULL, 't'},
      {"workdir", required_argument, NULL, 'w'},
      {"user", required_argument, NULL, 'u'},
      {"env", required_argument, NULL, 'e'},
      {"timeout", required_argument, NULL, 256},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  *id = NULL;
  optind = 0; /* a fresh scan */
  for (;;) {
    int ch = getopt_long(argc, argv, "+itw:u:e:h", opts, NULL);
    if (ch != -1) {
      int k = exec_option(c, a, ch, optarg);
      if (k >= 0)
        return k;
      continue;
    }
    /* Stopped at "--" (taken), at a word, or at the end: the first word
     * is the ID, and options may follow it. */
    bool dashes = optind > 1 && strcmp(argv[optind - 1], "--") == 0;
    if (*id || dashes || optind >= argc)
      break;
    *id = argv[optind++];
  }
  if (!*id && optind < argc)
    *id = argv[optind++]; /* "exec [options] -- ID CMD" */
  if (!*id)
    return cli_usage_error(c, "exec", "expected ID -- CMD [ARG...]");
  if (optind < argc && strcmp(argv[optind], "--") == 0 &&
      strcmp(argv[optind - 1], "--") != 0)
    optind++;
  if (optind >= argc)
    return cli_usage_error(c, "exec", "expected a command after the ID");
  if (c->json && (a->tty || a->interactive))
    return cli_usage_error(c, "exec",
                           "--json cannot be combined with -t or -i");
  *first = optind;
  return -1;
}

/* How long a start waits for the command's end (not with -i, whose
 * stdin may be what it waits for): a quick command then costs one round
 * trip, and a slow one shows its first output at most this late. */
#define EXEC_START_WAIT_MS 50

/* Runs ARGV (ARGC words) in SB as A asks, attached to us (relay_exec;
 * attach_signals blocked by the caller). The command's status, or 1 after
 * saying why. */
static int exec_attached(struct cli_common *c, struct sandbox *sb, char **argv,
                         size_t argc, const struct exec_args *a) {
  Sbx__V1__Response *resp = NULL;
  struct sbx_error e = {0};
  int r = start_exec(sb, argv, argc, a, a->interactive ? 0 : EXEC_START_WAIT_MS,
                     &resp, &e);
  int code = r < 0 ? cli_fail(c, &e, r)
                   : relay_exec(c, sb, resp->exec_start->exec_id, a,
                                resp->exec_start->output);
  sbx_client_reply_free(resp);
  return code;
}

int cli_sandbox_exec(struct cli_common *c, int argc, char **argv) {
  struct exec_args a = {0};
  const char *id = NULL;
  int first = 0;
  int k = parse_exec(c, &a, argc, argv, &id, &first);
  if (k >= 0)
    return k;
  sigset_t set, old;
  attach_signals(&set, false);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  int code = cli_attach_for(c, "exec", id, &rec, &sb);
  if (code == 0) {
    code = exec_attached(c, sb, argv + first, (size_t)(argc - first), &a);
    sb->backend->detach(sb);
    lifecycle_record_clear(&rec);
  }
  (void)fflush(stdout);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return code;
}

static struct termios saved_tio;

static bool tio_saved;

static void restore_tty(void) {
  if (tio_saved) {
    (void)tcsetattr(0, TCSADRAIN, &saved_tio);
    tio_saved = false;
  }
}

/* Puts our terminal in raw mode until restore_tty (also at exit). */
static void raw_tty(void) {
  if (tcgetattr(0, &saved_tio) == 0) {
    struct termios raw = saved_tio;
    cfmakeraw(&raw);
    if (tcsetattr(0, TCSADRAIN, &raw) == 0) {
      tio_saved = true;
      (void)atexit(restore_tty);
    }
  }
}

/* The shell on a terminal gets our window's size when it changes, a
 * SIGINT sent to us (Ctrl-C itself is a byte in raw mode), and a hangup for
 * SIGTERM and SIGHUP. */
static void shell_on_signal(int sig, void *arg) {
  struct exec_signal *x = arg;
  struct sbx_error se = {0};
  if (sig == SIGWINCH) {
    struct winsize ws;
    if (ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
      (void)sbx_exec_resize(x->client, x->exec_id, ws.ws_row, ws.ws_col, &se);
  } else {
    (void)sbx_exec_signal(x->client, x->exec_id,
                          sig == SIGINT ? SIGINT : SIGHUP, true, &se);
  }
}

/* Attaches the shell EXEC_ID, started on a terminal, to ours in raw mode.
 * Its status, or 1 after saying why. */
static int relay_shell(struct cli_common *c, struct sandbox *sb,
                       uint64_t exec_id) {
  sigset_t set;
  attach_signals(&set, true);
  struct relay rl = {.done_fd = eventfd(0, EFD_CLOEXEC)};
  atomic_init(&rl.done, false);
  if (rl.done_fd < 0)
    return cli_error(c, sbx_code_from_errno(errno), 1,
                     "cannot make an eventfd: %s", strerror(errno));
  raw_tty();
  struct reader ro = {.client = sb->client,
                      .exec_id = exec_id,
                      .stream = SBX__V1__STREAM__STDOUT,
                      .fd = 1,
                      .relay = &rl};
  struct writer w = {.client = sb->client, .exec_id = exec_id, .relay = &rl};
  pthread_t t1, t2;
  bool have_w = true;
  int code = 1;
  if (pthread_create(&t1, NULL, reader_main, &ro) != 0) {
    restore_tty();
    code = cli_error(c, SBX_INTERNAL, 1, "cannot start a thread");
    goto out;
  }
  if (pthread_create(&t2, NULL, writer_main, &w) != 0)
    have_w = false;
  struct exec_signal xs = {sb->client, exec_id};
  relay_wait(&rl, &set, shell_on_signal, &xs);
  pthread_join(t1, NULL);
  if (have_w)
    pthread_join(t2, NULL);
  restore_tty();
  code = ro.rc < 0 ? cli_fail(c, &ro.e, ro.rc) : status_code(&ro);
out:;
  struct sbx_error ie = {0};
  (void)sbx_exec_release(sb->client, exec_id, &ie);
  (void)close(rl.done_fd);
  return code;
}

int cli_sandbox_shell(struct cli_common *c, int argc, char **argv) {
  enum { O_SHELL = 256 };
  static const struct option opts[] = {
      {"workdir", required_argument, NULL, 'w'},
      {"user", required_argument, NULL, 'u'},
      {"shell", required_argument, NULL, O_SHELL},
      {"state-dir", required_argument, NULL, 'S'},
      {"json", no_argument, NULL, 'J'},
      {"help", no_argument, NULL, 'h'},
      {0},
  };
  struct exec_args a = {.interactive = true};
  const char *shell = NULL;
  int ch;
  optind = 0; /* a fresh scan that permutes: options after the id too */
  while ((ch = getopt_long(argc, argv, "w:u:h", opts, NULL)) != -1) {
    switch (ch) {
    case 'w':
    case 'u':
      (void)exec_option(c, &a, ch, optarg);
      break;
    case O_SHELL:
      shell = optarg;
      break;
    default: {
      int r = cli_common_option(c, "shell", ch);
      if (r >= 0)
        return r;
    }
    }
  }
  if (argc - optind != 1)
    return cli_usage_error(c, "shell", "expected ID");
  if (c->json)
    return cli_usage_error(c, "shell",
                           "shell is interactive: --json is not available "
                           "(use exec --json)");
  char *sh_argv[4];
  size_t sh_argc;
  if (shell) {
    sh_argv[0] = (char *)shell;
    sh_argv[1] = "-l";
    sh_argc = 2;
  } else {
    sh_argv[0] = "/bin/sh";
    sh_argv[1] = "-c";
    sh_argv[2] = "if command -v bash >/dev/null 2>&1; then exec bash -l; "
                 "else exec sh -l; fi";
    sh_argc = 3;
  }
  sh_argv[sh_argc] = NULL;
  /* On a terminal, a terminal; else the shell reads our stdin as a script
   * and ends at its end, its stdout and stderr apart (as exec -i). */
  a.tty = isatty(0);
  sigset_t set, old;
  attach_signals(&set, a.tty);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  int code = cli_attach_for(c, "shell", argv[optind], &rec, &sb);
  if (code == 0 && !a.tty) {
    code = exec_attached(c, sb, sh_argv, sh_argc, &a);
  } else if (code == 0) {
    Sbx__V1__Response *resp = NULL;
    struct sbx_error e = {0};
    int r = start_exec(sb, sh_argv, sh_argc, &a, 0, &resp, &e);
    code = r < 0 ? cli_fail(c, &e, r)
                 : relay_shell(c, sb, resp->exec_start->exec_id);
    sbx_client_reply_free(resp);
  }
  if (sb) {
    sb->backend->detach(sb);
    lifecycle_record_clear(&rec);
  }
  (void)fflush(stdout);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return code;
}
