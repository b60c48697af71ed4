/* ExecStart: everything a start needs is planned before the child exists
 * (argv, identity, working directory, environment, the files to try), the
 * pipes or the PTY are opened, a slot is reserved, the child is launched
 * (launch.h) and its record inserted; a start that waits answers with the
 * output read until the exit (exec_read.c). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "sandboxd/fs/resolve.h"
#include "sandboxd/proc/launch.h"
#include "sandboxd/proc/proc_internal.h"
#include "sandboxd/proc/reaper.h"
#include "sandboxd/proc/tty.h"
#include "sandboxd/users/userdb.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"

#define PROC_MAX_ARGS 4096             /* argv entries */
#define PROC_MAX_ENV 1024              /* request environment entries */
#define PROC_MAX_STRING (128u << 10)   /* one argument or NAME=value */
#define PROC_MAX_EXEC_BYTES (1u << 20) /* argv and environment together */
#define PROC_MAX_PATH_DIRS 64
#define PROC_BASE_PATH                                                         \
  "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* ---- ExecStart -------------------------------------------------------- */

/* Everything a start needs, prepared before the child exists. */
struct start_plan {
  struct sbx_arena a; /* the strings and arrays below */
  char **argv;
  size_t argc;
  char **envp;
  size_t nenv;
  char **paths;
  const char *shell;
  char pwd[SBX_PATH_MAX * 2];
  int cwd_fd;
  bool set_ids;
  struct userdb_user user;
  const char *home;
  const char *user_name;
  size_t bytes; /* argv + environment, for the limit */
};

/* Frees what the plan SP holds; for _cleanup_. */
static void start_plan_done(struct start_plan *sp) {
  sbx_arena_reset(&sp->a);
  if (sp->cwd_fd >= 0)
    (void)close(sp->cwd_fd);
}

/* Whether S is a shell variable name: letters, digits and _, not starting
 * with a digit. */
static bool env_name_valid(const char *s) {
  if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
    return false;
  for (s++; *s; s++)
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
          (*s >= '0' && *s <= '9') || *s == '_'))
      return false;
  return true;
}

/* Accounts one argv or environment string against the limits. */
static int count_string(struct rpc_call *c, struct start_plan *sp,
                        const char *what, size_t len) {
  if (len > PROC_MAX_STRING)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "%s is too long (%zu bytes, at most %u)", what, len,
                    PROC_MAX_STRING);
  sp->bytes += len + 1;
  if (sp->bytes > PROC_MAX_EXEC_BYTES)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "arguments and environment exceed %u bytes",
                    PROC_MAX_EXEC_BYTES);
  return 0;
}

/* X (XL bytes), SEP and Y (YL bytes) as one string in SP's arena: a
 * NAME=value or a DIR/name. NULL on OOM. */
static char *plan_join(struct start_plan *sp, const char *x, size_t xl,
                       char sep, const char *y, size_t yl) {
  char *s = sbx_arena_alloc_raw(&sp->a, xl + yl + 2);
  if (!s)
    return NULL;
  memcpy(s, x, xl);
  s[xl] = sep;
  memcpy(s + xl + 1, y, yl);
  s[xl + 1 + yl] = '\0';
  return s;
}

/* Sets NAME=VALUE in the environment being built, replacing an earlier
 * NAME. */
static int env_set(struct rpc_call *c, struct start_plan *sp, const char *name,
                   const char *value) {
  size_t nl = strlen(name), vl = strlen(value);
  int r = count_string(c, sp, "an environment variable", nl + 1 + vl);
  if (r < 0)
    return r;
  char *kv = plan_join(sp, name, nl, '=', value, vl);
  if (!kv)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  for (size_t i = 0; i < sp->nenv; i++)
    if (strncmp(sp->envp[i], name, nl) == 0 && sp->envp[i][nl] == '=') {
      sp->envp[i] = kv;
      return 0;
    }
  sp->envp[sp->nenv++] = kv;
  return 0;
}

/* The value of NAME in the environment being built, or NULL. */
static const char *env_get(const struct start_plan *sp, const char *name) {
  size_t nl = strlen(name);
  for (size_t i = 0; i < sp->nenv; i++)
    if (strncmp(sp->envp[i], name, nl) == 0 && sp->envp[i][nl] == '=')
      return sp->envp[i] + nl + 1;
  return NULL;
}

/* The files to try for NAME: itself when it has a slash, else NAME in each
 * directory of PATH (an empty entry is the working directory). */
static int plan_paths(struct rpc_call *c, struct start_plan *sp,
                      const char *name) {
  sp->paths = sbx_arena_new_array(&sp->a, char *, PROC_MAX_PATH_DIRS + 1);
  if (!sp->paths)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  if (strchr(name, '/')) {
    sp->paths[0] = (char *)name;
    return 0;
  }
  const char *path = env_get(sp, "PATH");
  if (!path)
    path = "";
  size_t n = 0, nl = strlen(name);
  for (const char *p = path; n < PROC_MAX_PATH_DIRS;) {
    const char *end = strchrnul(p, ':');
    size_t dl = (size_t)(end - p);
    if (dl == 0) {
      p = ".";
      dl = 1;
    }
    if (dl + 1 + nl < PATH_MAX) {
      char *f = plan_join(sp, p, dl, '/', name, nl);
      if (!f)
        return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
      sp->paths[n++] = f;
    }
    if (!*end)
      break;
    p = end + 1;
  }
  if (n == 0)
    return rpc_fail(c, SBX_NOT_FOUND, ENOENT,
                    "exec \"%s\": not found (PATH is empty)", name);
  return 0;
}

/* The shell of a command without one: bash for a login shell when there
 * is one, else sh. */
static const char *default_shell(bool login) {
  if (login && access("/bin/bash", X_OK) == 0)
    return "/bin/bash";
  return "/bin/sh";
}

/* argv, from the request's argv or its command. */
static int plan_argv(struct rpc_call *c, struct start_plan *sp,
                     const Sbx__V1__ExecStart *st) {
  bool has_cmd = st->command && st->command[0];
  if ((st->n_argv > 0) == has_cmd)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "exec start needs exactly one of argv and command");
  sp->shell = st->shell && st->shell[0] ? st->shell : default_shell(st->login);
  if (has_cmd) {
    sp->argc = 3;
    sp->argv = sbx_arena_new_array(&sp->a, char *, 4);
    if (!sp->argv)
      return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
    sp->argv[0] = (char *)sp->shell;
    sp->argv[1] = st->login ? "-lc" : "-c";
    sp->argv[2] = st->command;
  } else {
    if (st->n_argv > PROC_MAX_ARGS)
      return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "too many arguments (%zu, at most %u)", st->n_argv,
                      PROC_MAX_ARGS);
    if (!st->argv[0][0])
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL, "argv[0] is empty");
    sp->argc = st->n_argv;
    sp->argv = sbx_arena_new_array(&sp->a, char *, st->n_argv + 1);
    if (!sp->argv)
      return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
    memcpy(sp->argv, st->argv, st->n_argv * sizeof(char *));
  }
  for (size_t i = 0; i < sp->argc; i++) {
    int r = count_string(c, sp, "an argument", strlen(sp->argv[i]));
    if (r < 0)
      return r;
  }
  return 0;
}

/* The identity: run_as's, or sandboxd's own, which USER and LOGNAME call
 * "sandbox" as the SDK's sandboxes do. */
static int plan_user(struct rpc_call *c, struct start_plan *sp,
                     const Sbx__V1__ExecStart *st) {
  sp->home = c->d->root;
  sp->user_name = "sandbox";
  if (!st->run_as || !st->run_as[0])
    return 0;
  int r = userdb_user(NULL, st->run_as, &sp->user);
  if (r == -ENOENT)
    return rpc_fail(c, SBX_NOT_FOUND, ENOENT, "user \"%s\" not found",
                    st->run_as);
  if (r == -EINVAL)
    return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                    "run_as \"%s\" is not a user name or uid", st->run_as);
  if (r < 0)
    return rpc_fail(c, SBX_OK, -r, "looking up user \"%s\": %s", st->run_as,
                    strerror(-r));
  if (!c->d->is_root) {
    if (sp->user.uid != c->d->uid)
      return rpc_fail(c, SBX_PERMISSION_DENIED, EPERM,
                      "run_as needs sandboxd to run as root");
  } else {
    sp->set_ids = true;
  }
  sp->user_name = sp->user.name;
  if (sp->user.home[0])
    sp->home = sp->user.home;
  return 0;
}

/* The working directory, opened beneath the root or a grant, and its
 * absolute path as the child sees it (PWD). */
static int plan_cwd(struct rpc_call *c, struct start_plan *sp,
                    const Sbx__V1__ExecStart *st) {
  const char *cwd = st->cwd ? st->cwd : "";
  struct sbxd_loc loc;
  int r = sbxd_locate(c->d, cwd, false, &loc, &c->err);
  if (r < 0)
    return r;
  r = sbxd_openat(loc.base_fd, loc.rel, O_RDONLY | O_DIRECTORY, 0, &c->err);
  if (r < 0) {
    if (r == -ENOENT || r == -ENOTDIR)
      return rpc_fail(c, SBX_OK, -r, "working directory \"%s\": %s", cwd,
                      strerror(-r));
    return r;
  }
  sp->cwd_fd = r;
  const char *base = loc.grant < 0 ? c->d->root : c->d->grants[loc.grant].path;
  bool at_base = strcmp(loc.rel, ".") == 0;
  bool slash = strcmp(base, "/") == 0;
  (void)snprintf(sp->pwd, sizeof(sp->pwd), "%s%s%s", base,
                 at_base || slash ? "" : "/", at_base ? "" : loc.rel);
  return 0;
}

/* The clean base environment plus the request's variables. */
static int plan_env(struct rpc_call *c, struct start_plan *sp,
                    const Sbx__V1__ExecStart *st) {
  if (st->n_env > PROC_MAX_ENV)
    return rpc_fail(c, SBX_LIMIT_EXCEEDED, E2BIG,
                    "too many environment variables (%zu, at most %u)",
                    st->n_env, PROC_MAX_ENV);
  sp->envp = sbx_arena_new_array(&sp->a, char *, st->n_env + 9 + 1);
  if (!sp->envp)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  const char *base[][2] = {
      {"PATH", PROC_BASE_PATH}, {"HOME", sp->home},
      {"LANG", "C.UTF-8"},      {"TERM", st->tty ? "xterm-256color" : "dumb"},
      {"USER", sp->user_name},  {"LOGNAME", sp->user_name},
      {"SHELL", sp->shell},     {"PWD", sp->pwd},
      {"TMPDIR", "/tmp"},
  };
  int r;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(base); i++)
    if ((r = env_set(c, sp, base[i][0], base[i][1])) < 0)
      return r;
  for (size_t i = 0; i < st->n_env; i++) {
    const Sbx__V1__EnvVar *v = st->env[i];
    const char *name = v && v->name ? v->name : "";
    if (!env_name_valid(name))
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                      "environment variable name \"%.64s\" is not valid "
                      "(letters, digits and _, not starting with a digit)",
                      name);
    if ((r = env_set(c, sp, name, v->value ? v->value : "")) < 0)
      return r;
  }
  return 0;
}

/* The one line ExecList shows for the start ST: its command or argv, cut
 * to PROC_SUMMARY_MAX bytes on a character boundary, control characters
 * as spaces, into OUT. */
static void make_summary(const struct start_plan *sp,
                         const Sbx__V1__ExecStart *st, char *out) {
  char buf[PROC_SUMMARY_MAX + 8];
  size_t n = 0;
  buf[0] = '\0';
  if (st->command && st->command[0]) {
    (void)snprintf(buf, sizeof(buf), "%s", st->command);
  } else {
    for (size_t i = 0; i < sp->argc && n < sizeof(buf) - 1; i++) {
      int k =
          snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? " " : "", sp->argv[i]);
      n = k < 0 ? n : proc_min_u64(n + (size_t)k, sizeof(buf) - 1);
    }
  }
  n = strlen(buf);
  if (n > PROC_SUMMARY_MAX) { /* cut before a character, not inside one */
    n = PROC_SUMMARY_MAX;
    while (n > 0 && ((unsigned char)buf[n] & 0xc0) == 0x80)
      n--;
    buf[n] = '\0';
  }
  for (char *p = buf; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = ' ';
  memcpy(out, buf, n + 1);
}

/* The fds of one start: the child's ends and ours. */
struct start_fds {
  int child_in, child_out, child_err; /* child_err may equal child_out */
  int out, err, in;                   /* ours; -1 when absent */
};

/* Closes every fd of F still open (each once); for _cleanup_. */
static void start_fds_close(struct start_fds *f) {
  int *all[] = {&f->child_in, &f->child_out, &f->child_err,
                &f->out,      &f->err,       &f->in};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(all); i++) {
    if (*all[i] < 0)
      continue;
    for (size_t j = i + 1; j < SBX_ARRAY_SIZE(all); j++)
      if (*all[j] == *all[i])
        *all[j] = -1;
    (void)close(*all[i]);
    *all[i] = -1;
  }
}

/* Makes FD non-blocking; 0 or -errno. */
static int set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return -errno;
  return 0;
}

/* A pipe with both ends above 2: [0] read, [1] write; O_CLOEXEC. */
static int make_pipe(int p[2]) {
  if (pipe2(p, O_CLOEXEC) < 0)
    return -errno;
  for (int i = 0; i < 2; i++) {
    int fd = sbx_fd_above_stdio(p[i]);
    if (fd < 0) {
      if (i == 0)
        (void)close(p[1]);
      else
        (void)close(p[0]);
      return fd;
    }
    p[i] = fd;
  }
  return 0;
}

/* Opens the child's stdio for ST into F: a PTY, or pipes (stderr onto
 * stdout, stdin from /dev/null when asked); our ends non-blocking. */
static int open_fds(struct rpc_call *c, const Sbx__V1__ExecStart *st,
                    struct start_fds *f) {
  int r;
  if (st->tty) {
    if (st->rows > 65535 || st->cols > 65535)
      return rpc_fail(c, SBX_INVALID_ARGUMENT, EINVAL,
                      "terminal size %ux%u is too large", st->rows, st->cols);
    int m, s;
    if ((r = tty_open(st->rows, st->cols, &m, &s)) < 0)
      return rpc_fail(c, SBX_OK, -r, "opening a terminal: %s", strerror(-r));
    f->out = m;
    if ((s = sbx_fd_above_stdio(s)) < 0)
      return rpc_fail(c, SBX_OK, -s, "opening a terminal: %s", strerror(-s));
    f->child_in = f->child_out = f->child_err = s;
    return 0;
  }
  int p[2];
  if ((r = make_pipe(p)) < 0)
    return rpc_fail(c, SBX_OK, -r, "creating a pipe: %s", strerror(-r));
  f->out = p[0];
  f->child_out = p[1];
  /* A held stream is read as fast as its reader reads: a larger pipe
   * takes more of the command's output per wake-up. Best effort (the
   * kernel caps it per user). */
  if (st->hold_ms)
    (void)fcntl(p[0], F_SETPIPE_SZ, (int)PROC_HOLD_PIPE);
  if (st->stderr_to_stdout) {
    f->child_err = f->child_out;
  } else {
    if ((r = make_pipe(p)) < 0)
      return rpc_fail(c, SBX_OK, -r, "creating a pipe: %s", strerror(-r));
    f->err = p[0];
    f->child_err = p[1];
  }
  if (st->no_stdin) {
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      /* No /dev/null in this sandbox: a pipe nobody writes to is as
       * empty. */
      if ((r = make_pipe(p)) < 0)
        return rpc_fail(c, SBX_OK, -r, "creating a pipe: %s", strerror(-r));
      (void)close(p[1]);
      fd = p[0];
    }
    if ((fd = sbx_fd_above_stdio(fd)) < 0)
      return rpc_fail(c, SBX_OK, -fd, "opening /dev/null: %s", strerror(-fd));
    f->child_in = fd;
  } else {
    if ((r = make_pipe(p)) < 0)
      return rpc_fail(c, SBX_OK, -r, "creating a pipe: %s", strerror(-r));
    f->child_in = p[0];
    f->in = p[1];
  }
  int ours[] = {f->out, f->err, f->in};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(ours); i++)
    if (ours[i] >= 0 && (r = set_nonblock(ours[i])) < 0)
      return rpc_fail(c, SBX_OK, -r, "pipe: %s", strerror(-r));
  return 0;
}

/* Inserts the started process; returns its record or NULL (then the group
 * was killed). Locked. */
static struct proc *insert(struct proc_table *t, struct rpc_call *c,
                           const Sbx__V1__ExecStart *st,
                           const struct start_plan *sp, struct start_fds *f,
                           pid_t pid, int pidfd) {
  struct proc *p = calloc(1, sizeof(*p));
  if (!p) {
    if (pidfd >= 0)
      (void)close(pidfd);
    (void)kill(-pid, SIGKILL);
    (void)rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
    return NULL;
  }
  p->id = t->next_id;
  p->pid = pid;
  p->tty = st->tty;
  p->running = true;
  p->started_ms = sbx_wall_ms();
  p->used = ++t->tick;
  if (st->timeout_ms)
    p->term_at_ms = sbx_now_ms() + st->timeout_ms;
  p->hold_ms = st->hold_ms;
  make_summary(sp, st, p->summary);
  sbx_buf_init(&p->inq, PROC_STDIN_MAX);
  /* A held stream waits for its reader rather than drop: a ring of at
   * least PROC_HOLD_WINDOW lets the process run on while a read is in
   * flight, and lets each read take that much. */
  uint64_t tail = t->d->limits.retention_tail;
  if (p->hold_ms && tail < PROC_HOLD_WINDOW)
    tail = PROC_HOLD_WINDOW;
  for (int i = 0; i < 2; i++) {
    outbuf_init(&p->out[i].buf, t->d->limits.retention_head, tail);
    p->out[i].read_ms = sbx_now_ms();
  }
  p->out[K_STDOUT].fd = -1;
  p->out[K_STDERR].fd = -1;
  p->in_fd = -1;
  p->pty_hold = -1;
  p->pidfd = -1;
  int r = proc_ep_set(t, EPOLL_CTL_ADD, f->out, EPOLLIN, KEY(p->id, K_STDOUT));
  if (r == 0 && f->err >= 0) {
    r = proc_ep_set(t, EPOLL_CTL_ADD, f->err, EPOLLIN, KEY(p->id, K_STDERR));
    if (r < 0)
      proc_ep_del(t, f->out);
  }
  if (r < 0) {
    if (pidfd >= 0)
      (void)close(pidfd);
    (void)kill(-pid, SIGKILL);
    free(p);
    (void)rpc_fail(c, SBX_OK, -r, "watching the output of \"%s\": %s",
                   sp->argv[0], strerror(-r));
    return NULL;
  }
  p->out[K_STDOUT].fd = TAKE_FD(f->out);
  p->out[K_STDERR].fd = TAKE_FD(f->err);
  p->in_fd = TAKE_FD(f->in);
  /* The exit shows on the pidfd even where SIGCHLD goes astray (a thread
   * that does not block it); the signalfd still reaps orphans. */
  if (pidfd >= 0 &&
      proc_ep_set(t, EPOLL_CTL_ADD, pidfd, EPOLLIN, KEY(p->id, K_EXIT)) == 0)
    p->pidfd = pidfd;
  else if (pidfd >= 0)
    (void)close(pidfd);
  t->next_id++;
  t->procs[t->nprocs++] = p;
  int status;
  if (proc_stash_take(t, pid, &status)) /* it was quicker than us */
    proc_on_exit(t, p, status);
  return p;
}

/* The longest a command waits for an isolated sandbox's limits and
 * network (pasta starts in ~20 ms; its supervisor gives up after 5 s). */
#define PROC_GATE_WAIT_MS 10000

/* Waits, once per sandbox, until its cgroup and network are in place: a
 * command started earlier would escape the limits or find no route. The
 * first caller reads the supervisor's word; the others wait for it on the
 * mutex. */
static int wait_gate(struct rpc_call *c) {
  struct sandboxd *d = c->d;
  if (!d->gate_wait)
    return 0;
  pthread_mutex_lock(&d->gate_mu);
  bool up = !d->gate_wait;
  if (!up) {
    struct pollfd p = {.fd = d->gate_fd, .events = POLLIN};
    char word = 0;
    int n;
    do
      n = poll(&p, 1, PROC_GATE_WAIT_MS);
    while (n < 0 && errno == EINTR);
    up = n == 1 && read(d->gate_fd, &word, 1) == 1 && word == 'n';
    d->gate_wait = !up;
  }
  pthread_mutex_unlock(&d->gate_mu);
  if (!up)
    return rpc_fail(c, SBX_UNAVAILABLE, ENETDOWN,
                    "the sandbox's limits and network are not in place (see "
                    "sandboxd's log)");
  return 0;
}

/* ExecStart: plans, launches and records a process; with wait_ms, answers
 * with its output once it exits (or the wait ends). */
int rpc_exec_start(struct rpc_call *c) {
  struct proc_table *t = c->d->procs;
  if (!t)
    return proc_no_table(c);
  int nr = wait_gate(c);
  if (nr < 0)
    return nr;
  const Sbx__V1__ExecStart *st = RPC_BODY(c, EXEC_START, exec_start);
  if (!st)
    return rpc_no_body(c);

  _cleanup_(start_plan_done) struct start_plan sp = {.cwd_fd = -1};
  int r;
  if ((r = plan_argv(c, &sp, st)) < 0 || (r = plan_user(c, &sp, st)) < 0 ||
      (r = plan_cwd(c, &sp, st)) < 0 || (r = plan_env(c, &sp, st)) < 0 ||
      (r = plan_paths(c, &sp, sp.argv[0])) < 0)
    return r;
  Sbx__V1__ExecStartReply *reply =
      sbx_arena_new(&c->arena, Sbx__V1__ExecStartReply);
  if (!reply)
    return rpc_fail(c, SBX_INTERNAL, ENOMEM, "out of memory");
  sbx__v1__exec_start_reply__init(reply);

  _cleanup_(start_fds_close) struct start_fds f = {-1, -1, -1, -1, -1, -1};
  if ((r = open_fds(c, st, &f)) < 0)
    return r;

  struct waiter *done = NULL;
  pthread_mutex_lock(&t->mu);
  r = proc_reserve_slot(t, c, &done);
  pthread_mutex_unlock(&t->mu);
  proc_complete_waiters(done);
  if (r < 0)
    return r;

  struct launch_plan plan = {
      .name = sp.argv[0],
      .argv = sp.argv,
      .paths = sp.paths,
      .envp = sp.envp,
      .cwd_fd = sp.cwd_fd,
      .fd_in = f.child_in,
      .fd_out = f.child_out,
      .fd_err = f.child_err,
      .tty = st->tty,
      .set_ids = sp.set_ids,
      .uid = sp.user.uid,
      .gid = sp.user.gid,
      .groups = sp.user.groups,
      .ngroups = sp.user.ngroups,
      /* Inherited when this thread carries it already. */
      .seccomp = proc_thread_filter == t->seccomp ? NULL : t->seccomp,
      .drop_caps = c->d->isolated,
  };
  pid_t pid = -1;
  int pidfd = -1;
  r = launch_start(&plan, &pid, &pidfd, &c->err);

  pthread_mutex_lock(&t->mu);
  t->starting--;
  if (r == 0 && t->closing) {
    /* The table shut down while this one started: it must not outlive
     * the kill. The thread reaps it. */
    (void)kill(-pid, SIGKILL);
    if (pidfd >= 0)
      (void)close(pidfd);
    r = rpc_fail(c, SBX_UNAVAILABLE, ESHUTDOWN, "sandboxd is shutting down");
  }
  struct proc *p = r < 0 ? NULL : insert(t, c, st, &sp, &f, pid, pidfd);
  if (p) {
    reaper_add(c->d->reaper_fd, pid);
    reply->exec_id = p->id;
    reply->pid = pid;
    /* Its exit wakes the thread through the pidfd (or SIGCHLD); its
     * deadlines, and the reaping poll without a pidfd, may need a wake. */
    uint64_t due =
        p->pidfd >= 0 ? UINT64_MAX : sbx_now_ms() + PROC_REAP_POLL_MS;
    if (p->term_at_ms)
      due = proc_min_u64(due, p->term_at_ms);
    proc_wake_by(t, due);
    log_debug("exec %" PRIu64 ": started \"%s\" as pid %d", p->id, sp.argv[0],
              (int)pid);
    if (st->wait_ms > 0) {
      /* The reply, output and all, must stay small enough to be kept for
       * a retry: a retried start must not run the command twice. */
      struct waiter w = {
          .c = c,
          .stream = K_STDOUT,
          .max = (uint32_t)proc_min_u64(proc_read_cap(c->d, st->max_bytes),
                                        RPC_CACHE_REPLY_MAX - 4096),
          .until_exit = true,
          .saw_running = true,
          .deadline_ms = sbx_now_ms() + st->wait_ms,
          .start = reply,
      };
      /* Once parked, C is the thread's: touch nothing after unlocking. */
      r = proc_read_or_park(t, p, &w, st->wait_ms);
      pthread_mutex_unlock(&t->mu);
      return r;
    }
  }
  pthread_mutex_unlock(&t->mu);
  if (r < 0)
    return r;
  if (!p)
    return -EIO;
  c->resp->body_case = SBX__V1__RESPONSE__BODY_EXEC_START;
  c->resp->exec_start = reply;
  return 0;
}
