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
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

#define CLI_JSON_OUTPUT_MAX (16u << 20)
#define CLI_MAX_ENV 256

struct reader {
  struct sbx_client *client;
  uint64_t exec_id;
  Sbx__V1__Stream stream;
  int fd;              /* where the output goes; -1 to collect */
  struct sbx_buf *buf; /* collected output (--json) */
  atomic_bool *done;
  bool exited;
  int code, sig;
  int rc;
  struct sbx_error e;
};

static void *reader_main(void *arg) {
  struct reader *rd = arg;
  uint64_t off = 0;
  for (;;) {
    Sbx__V1__ExecRead a = SBX__V1__EXEC_READ__INIT;
    a.exec_id = rd->exec_id;
    a.stream = rd->stream;
    a.offset = off;
    a.wait_ms = 1000;
    Sbx__V1__Response *resp = NULL;
    rd->rc = sbx_exec_read(rd->client, &a, &resp, &rd->e);
    if (rd->rc < 0)
      break;
    Sbx__V1__ExecReadReply *x = resp->exec_read;
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
    off = x->next_offset;
    bool end = x->eof && x->exited;
    if (x->exited) {
      rd->exited = true;
      rd->code = x->exit_code;
      rd->sig = x->signal;
    }
    sbx_client_reply_free(resp);
    if (end)
      break;
  }
  atomic_store(rd->done, true);
  return NULL;
}

struct writer {
  struct sbx_client *client;
  uint64_t exec_id;
  atomic_bool *done;
  bool close_at_eof;
};

static void *writer_main(void *arg) {
  struct writer *w = arg;
  char buf[16384];
  while (!atomic_load(w->done)) {
    struct pollfd p = {.fd = 0, .events = POLLIN};
    int pr = poll(&p, 1, 100);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr <= 0)
      continue;
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

static int start_exec(struct sandbox *sb, char **argv, size_t argc,
                      const char *cwd, const char *user, bool tty,
                      bool stdin_open, char **extra_env, size_t nextra,
                      unsigned timeout_ms, uint64_t *id, struct sbx_error *e) {
  Sbx__V1__ExecStart st = SBX__V1__EXEC_START__INIT;
  st.argv = argv;
  st.n_argv = argc;
  st.cwd = (char *)(cwd ? cwd : "");
  st.run_as = (char *)(user ? user : "");
  st.tty = tty;
  st.no_stdin = !stdin_open;
  st.timeout_ms = timeout_ms;
  struct winsize ws;
  if (tty && ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
    st.rows = ws.ws_row;
    st.cols = ws.ws_col;
  }
  size_t n = sb->nenv + nextra + 1;
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
  for (size_t i = 0; i < sb->nenv && na < SBX_ARRAY_SIZE(all) - 2; i++)
    all[na++] = sb->env[i];
  for (size_t i = 0; i < nextra; i++)
    all[na++] = extra_env[i];
  if (tty && term && strlen(term) < 200) {
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
  Sbx__V1__Response *resp = NULL;
  int r = sbx_exec_start(sb->client, &st, &resp, e);
  if (r < 0)
    return r;
  *id = resp->exec_start->exec_id;
  sbx_client_reply_free(resp);
  return 0;
}

static int status_code(const struct reader *rd) {
  if (rd->sig)
    return 128 + rd->sig;
  return rd->code;
}

/* What exec's command line asks for. */
struct exec_args {
  bool interactive, tty;
  const char *cwd, *user;
  char *env[CLI_MAX_ENV];
  size_t nenv;
  unsigned timeout;
};

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

/* Relays the started command EXEC_ID of SB: its output to ours (or into
 * --json's object), our stdin to it with -i, our signals to its group;
 * releases it at the end. The command's status, or 1 after saying why. */
static int relay_exec(struct cli_common *c, struct sandbox *sb,
                      uint64_t exec_id, const struct exec_args *a) {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  atomic_bool done;
  atomic_init(&done, false);
  atomic_bool done_err;
  atomic_init(&done_err, false);
  struct sbx_buf bo, be;
  sbx_buf_init(&bo, CLI_JSON_OUTPUT_MAX);
  sbx_buf_init(&be, CLI_JSON_OUTPUT_MAX);
  struct reader ro = {.client = sb->client,
                      .exec_id = exec_id,
                      .stream = SBX__V1__STREAM__STDOUT,
                      .fd = c->json ? -1 : 1,
                      .buf = &bo,
                      .done = &done};
  struct reader re = ro;
  re.stream = SBX__V1__STREAM__STDERR;
  re.fd = c->json ? -1 : 2;
  re.buf = &be;
  re.done = &done_err;
  struct writer w = {.client = sb->client,
                     .exec_id = exec_id,
                     .done = &done,
                     .close_at_eof = true};
  pthread_t t1, t2, t3;
  bool have_err = !a->tty, have_w = a->interactive;
  if (pthread_create(&t1, NULL, reader_main, &ro) != 0) {
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fprintf(stderr, "%s: cannot start a thread\n", c->prog);
    return 1;
  }
  if (have_err && pthread_create(&t2, NULL, reader_main, &re) != 0)
    have_err = false;
  if (have_w && pthread_create(&t3, NULL, writer_main, &w) != 0)
    have_w = false;
  while (!atomic_load(&done)) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    int sig = sigtimedwait(&set, NULL, &ts);
    if (sig > 0) {
      struct sbx_error se = {0};
      (void)sbx_exec_signal(sb->client, exec_id, sig, true, &se);
    }
  }
  pthread_join(t1, NULL);
  if (have_err)
    pthread_join(t2, NULL);
  if (have_w)
    pthread_join(t3, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  struct sbx_error ie = {0};
  (void)sbx_exec_release(sb->client, exec_id, &ie);
  int code = 1;
  if (ro.rc < 0) {
    cli_fail(c, &ro.e, ro.rc);
  } else if (c->json) {
    _cleanup_json_ json_t *j =
        json_pack("{s:i, s:i, s:s%, s:s%}", "exit_code", ro.code, "signal",
                  ro.sig, "stdout", bo.data ? bo.data : "", bo.len, "stderr",
                  be.data ? be.data : "", be.len);
    if (j)
      (void)cli_print_json(c, j); /* the status is the command's */
    else
      fprintf(stderr, "%s: the output is not valid UTF-8 for --json\n",
              c->prog);
    code = status_code(&ro);
  } else {
    code = status_code(&ro);
  }
  sbx_buf_free(&bo);
  sbx_buf_free(&be);
  return code;
}

int cli_sandbox_exec(struct cli_common *c, int argc, char **argv) {
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
  struct exec_args a = {0};
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+itw:u:e:h", opts, NULL)) != -1) {
    int k = exec_option(c, &a, ch, optarg);
    if (k >= 0)
      return k;
  }
  if (argc - optind < 1)
    return cli_usage_error(c, "exec", "expected ID -- CMD [ARG...]");
  const char *id = argv[optind++];
  if (optind < argc && strcmp(argv[optind], "--") == 0)
    optind++;
  if (optind >= argc)
    return cli_usage_error(c, "exec", "expected a command after the ID");
  if (c->json && (a.tty || a.interactive))
    return cli_usage_error(c, "exec",
                           "--json cannot be combined with -t or -i");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = cli_attach_for(c, "exec", id, &rec, &sb);
  if (k)
    return k;
  uint64_t exec_id = 0;
  int r =
      start_exec(sb, argv + optind, (size_t)(argc - optind), a.cwd, a.user,
                 a.tty, a.interactive, a.env, a.nenv, a.timeout, &exec_id, &e);
  int code = r < 0 ? cli_fail(c, &e, r) : relay_exec(c, sb, exec_id, &a);
  sb->backend->detach(sb);
  lifecycle_record_clear(&rec);
  (void)fflush(stdout);
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
  const char *cwd = NULL, *user = NULL, *shell = NULL;
  int ch;
  optind = 1;
  while ((ch = getopt_long(argc, argv, "+w:u:h", opts, NULL)) != -1) {
    switch (ch) {
    case 'w':
      cwd = optarg;
      break;
    case 'u':
      user = optarg;
      break;
    case O_SHELL:
      shell = optarg;
      break;
    case 'J':
      return cli_usage_error(c, "shell",
                             "shell is interactive: --json is not "
                             "available (use exec --json)");
    default: {
      int r = cli_common_option(c, "shell", ch);
      if (r >= 0)
        return r;
    }
    }
  }
  if (argc - optind != 1)
    return cli_usage_error(c, "shell", "expected ID");
  struct lifecycle_record rec;
  struct sandbox *sb = NULL;
  struct sbx_error e = {0};
  int k = cli_attach_for(c, "shell", argv[optind], &rec, &sb);
  if (k)
    return k;
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
  uint64_t exec_id = 0;
  int code = 1;
  int r = start_exec(sb, sh_argv, sh_argc, cwd, user, true, true, NULL, 0, 0,
                     &exec_id, &e);
  if (r < 0) {
    cli_fail(c, &e, r);
    goto out;
  }
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGWINCH);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  if (isatty(0) && tcgetattr(0, &saved_tio) == 0) {
    struct termios raw = saved_tio;
    cfmakeraw(&raw);
    if (tcsetattr(0, TCSADRAIN, &raw) == 0) {
      tio_saved = true;
      (void)atexit(restore_tty);
    }
  }
  atomic_bool done;
  atomic_init(&done, false);
  struct reader ro = {.client = sb->client,
                      .exec_id = exec_id,
                      .stream = SBX__V1__STREAM__STDOUT,
                      .fd = 1,
                      .done = &done};
  struct writer w = {.client = sb->client, .exec_id = exec_id, .done = &done};
  pthread_t t1, t2;
  bool have_w = true;
  if (pthread_create(&t1, NULL, reader_main, &ro) != 0) {
    restore_tty();
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fprintf(stderr, "%s: cannot start a thread\n", c->prog);
    goto out;
  }
  if (pthread_create(&t2, NULL, writer_main, &w) != 0)
    have_w = false;
  while (!atomic_load(&done)) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    int sig = sigtimedwait(&set, NULL, &ts);
    struct sbx_error se = {0};
    if (sig == SIGWINCH) {
      struct winsize ws;
      if (ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
        (void)sbx_exec_resize(sb->client, exec_id, ws.ws_row, ws.ws_col, &se);
    } else if (sig == SIGINT) {
      /* Not in raw mode (stdin is no terminal): pass it on. */
      (void)sbx_exec_signal(sb->client, exec_id, SIGINT, true, &se);
    } else if (sig > 0) {
      (void)sbx_exec_signal(sb->client, exec_id, SIGHUP, true, &se);
    }
  }
  pthread_join(t1, NULL);
  if (have_w)
    pthread_join(t2, NULL);
  restore_tty();
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  {
    struct sbx_error ie = {0};
    (void)sbx_exec_release(sb->client, exec_id, &ie);
  }
  if (ro.rc < 0)
    cli_fail(c, &ro.e, ro.rc);
  else
    code = status_code(&ro);
out:
  sb->backend->detach(sb);
  lifecycle_record_clear(&rec);
  return code;
}
