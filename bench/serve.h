/* What bench_server drives: child processes (the scripted model server,
 * `sbx serve`, `sbx token create`), the process tree under a pid and its
 * memory, and an HTTP client for the server's API: plain requests over one
 * kept-alive connection, Server-Sent Events handed over one at a time with
 * the wall-clock time their bytes arrived, runs submitted ("Run true.")
 * and their events kept; and latencies in microseconds.
 *
 * Header-only like bench.h, and like it: every helper returns 0 or a
 * negative errno and says what went wrong on stderr; nothing here exits.
 * Not thread-safe. */
#ifndef SBX_BENCH_SERVE_H
#define SBX_BENCH_SERVE_H

#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <jansson.h>
#include <sys/prctl.h>

#include "bench/bench.h"
#include "shared/buf.h"

extern char **environ;

/* CLOCK_REALTIME in microseconds: comparable with the events' own
 * "timestamp" (the same machine's clock, in milliseconds). */
static inline int64_t bench_wall_us(void) {
  struct timespec ts;
  (void)clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* An event's "timestamp" (RFC 3339, UTC, milliseconds) in unix ms; -1 when
 * it is not one. */
static inline int64_t bench_rfc3339_ms(const char *s) {
  struct tm tm = {0};
  int ms = 0;
  if (!s || sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon,
                   &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
    return -1;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return (int64_t)timegm(&tm) * 1000 + ms;
}

static inline int bench_write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  size_t n = strlen(text);
  ssize_t w = write(fd, text, n);
  int err = errno;
  (void)close(fd);
  return w == (ssize_t)n ? 0 : -(w < 0 ? err : EIO);
}

/* ---- child processes -------------------------------------------------- */

/* Starts ARGV (searched in PATH) with ENVP (NULL: ours), stdin from
 * /dev/null, stdout to OUT and stderr to ERR (-1: /dev/null). The child
 * dies with us. Its pid, or -1 with errno. */
static inline pid_t bench_spawn(char *const argv[], char *const envp[], int out,
                                int err) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent ||
        null < 0 || dup2(null, 0) < 0 || dup2(out >= 0 ? out : null, 1) < 0 ||
        dup2(err >= 0 ? err : null, 2) < 0)
      _exit(127);
    execvpe(argv[0], argv, envp ? envp : environ);
    _exit(127);
  }
  return pid;
}

/* Waits up to TIMEOUT_MS for PID, then SIGKILLs it; its wait status. */
static inline int bench_reap(pid_t pid, int timeout_ms) {
  int status = -1;
  for (int i = 0;; i++) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR))
      return status;
    if (i >= timeout_ms) {
      (void)kill(pid, SIGKILL);
      (void)waitpid(pid, &status, 0);
      return status;
    }
    (void)nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
  }
}

/* Reads FD to its end into BUF (N bytes, NUL-terminated), keeping the
 * last bytes when there are more; how many were read in all. */
static inline size_t bench_read_all(int fd, char *buf, size_t n) {
  size_t got = 0, total = 0;
  for (;;) {
    ssize_t k = read(fd, buf + got, n - 1 - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      break;
    got += (size_t)k;
    total += (size_t)k;
    if (got == n - 1)
      got = 0; /* only the end matters */
  }
  buf[got] = '\0';
  return total;
}

/* ---- the scripted model server ---------------------------------------- */

struct bench_model {
  pid_t pid;
  char base_url[64]; /* http://127.0.0.1:PORT/v1 */
};

static inline void bench_model_stop(struct bench_model *m) {
  if (m->pid > 0) {
    (void)kill(m->pid, SIGTERM);
    (void)bench_reap(m->pid, 5000);
  }
  m->pid = 0;
}

/* Starts tests/support/model_server.py (PY) on the script file SCRIPT. It
 * logs the requests to /dev/null: nothing here reads them. */
static inline int bench_model_start(struct bench_model *m, const char *py,
                                    const char *script) {
  memset(m, 0, sizeof(*m));
  int out[2];
  if (pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  char *argv[] = {"python3", (char *)py, (char *)script, "/dev/null", NULL};
  m->pid = bench_spawn(argv, NULL, out[1], -1);
  int err = errno;
  (void)close(out[1]);
  if (m->pid < 0) {
    (void)close(out[0]);
    m->pid = 0;
    return -err;
  }
  char line[64] = {0};
  size_t got = 0;
  while (got < sizeof(line) - 1 && !memchr(line, '\n', got)) {
    struct pollfd pfd = {.fd = out[0], .events = POLLIN};
    if (poll(&pfd, 1, 20000) <= 0)
      break;
    ssize_t n = read(out[0], line + got, sizeof(line) - 1 - got);
    if (n <= 0)
      break;
    got += (size_t)n;
  }
  (void)close(out[0]);
  int port = 0;
  if (sscanf(line, "listening %d", &port) != 1 || port <= 0) {
    (void)fprintf(stderr, "bench: model server did not start: \"%s\"\n", line);
    bench_model_stop(m);
    return -EIO;
  }
  (void)snprintf(m->base_url, sizeof(m->base_url), "http://127.0.0.1:%d/v1",
                 port);
  return 0;
}

static inline size_t bench_discard(char *p, size_t size, size_t n, void *arg) {
  (void)p;
  (void)arg;
  return size * n;
}

/* The mean ms of N answers from M to a one-message request, streamed
 * (STREAM) or not: what the answer's form costs the model server. A
 * streamed answer closes its connection, so each comes on a new one, as
 * it does for sbx. */
static inline int bench_model_probe(const struct bench_model *m, bool stream,
                                    unsigned n, double *ms) {
  char url[128], body[160];
  (void)snprintf(url, sizeof(url), "%s/responses", m->base_url);
  (void)snprintf(body, sizeof(body),
                 "{\"model\":\"bench-model\",\"stream\":%s,\"input\":"
                 "[{\"role\":\"user\",\"content\":\"Run true.\"}]}",
                 stream ? "true" : "false");
  CURL *c = curl_easy_init();
  struct curl_slist *h =
      curl_slist_append(NULL, "Content-Type: application/json");
  int r = c && h ? 0 : -ENOMEM;
  if (r == 0) {
    (void)curl_easy_setopt(c, CURLOPT_URL, url);
    (void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    (void)curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    (void)curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bench_discard);
    (void)curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
  }
  uint64_t t0 = bench_now_ns();
  for (unsigned i = 0; r == 0 && i < n; i++) {
    long code = 0;
    CURLcode cc = curl_easy_perform(c);
    (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (cc != CURLE_OK || code != 200) {
      (void)fprintf(stderr, "bench: model server probe: %s, HTTP %ld\n",
                    curl_easy_strerror(cc), code);
      r = -EIO;
    }
  }
  *ms = (double)(bench_now_ns() - t0) / 1e6 / n;
  curl_slist_free_all(h);
  if (c)
    curl_easy_cleanup(c);
  return r;
}

/* ---- sbx serve --------------------------------------------------------- */

struct bench_serve {
  pid_t pid;
  char state[128]; /* its --state-dir */
  char db[160];    /* sqlite:STATE/sbx.db */
  char log[160];   /* its stderr */
  char url[64];    /* http://127.0.0.1:PORT */
  char token[128]; /* an admin token */
};

/* DIR/NAME as the server's state dir, with an admin token made by SBX in
 * its store (`sbx token create`); the server is not started. */
static inline int bench_serve_init(struct bench_serve *s, const char *sbx,
                                   const char *dir, const char *name) {
  memset(s, 0, sizeof(*s));
  (void)snprintf(s->state, sizeof(s->state), "%s/%s", dir, name);
  (void)snprintf(s->db, sizeof(s->db), "sqlite:%s/sbx.db", s->state);
  (void)snprintf(s->log, sizeof(s->log), "%s/%s.log", dir, name);
  if (mkdir(s->state, 0700) < 0)
    return -errno;
  int out[2];
  if (pipe2(out, O_CLOEXEC) < 0)
    return -errno;
  char *argv[] = {(char *)sbx,   "token",  "create", "admin",
                  "--scopes",    "admin",  "--db",   s->db,
                  "--state-dir", s->state, NULL};
  pid_t pid = bench_spawn(argv, NULL, out[1], -1);
  (void)close(out[1]);
  char text[256];
  size_t n = pid > 0 ? bench_read_all(out[0], text, sizeof(text)) : 0;
  (void)close(out[0]);
  int status = pid > 0 ? bench_reap(pid, 30000) : -1;
  if (n == 0 || n >= sizeof(text) || status != 0 ||
      strncmp(text, "sbx_", 4) != 0) {
    (void)fprintf(stderr, "bench: sbx token create failed (%d)\n", status);
    return -EIO;
  }
  (void)snprintf(s->token, sizeof(s->token), "%.*s", (int)strcspn(text, "\n"),
                 text);
  return 0;
}

/* The URL of the log's "listening on URL" line into s->url, once there. */
static inline bool bench_serve_listening(struct bench_serve *s) {
  FILE *f = fopen(s->log, "re");
  if (!f)
    return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof(line), f)) {
    const char *p = strstr(line, "sbx serve: listening on ");
    if (p) {
      p += strlen("sbx serve: listening on ");
      (void)snprintf(s->url, sizeof(s->url), "%.*s", (int)strcspn(p, " \n"), p);
      found = true;
    }
  }
  (void)fclose(f);
  return found;
}

/* Starts SBX serve on a free loopback port with environment ENVP and the
 * flags EXTRA (NULL-terminated, may be NULL); returns once it listens. */
static inline int bench_serve_start(struct bench_serve *s, const char *sbx,
                                    char *const envp[],
                                    const char *const *extra) {
  char *argv[24] = {(char *)sbx, "serve", "--listen",    "127.0.0.1:0",
                    "--db",      s->db,   "--state-dir", s->state};
  size_t n = 8;
  for (size_t i = 0; extra && extra[i] && n < 23; i++)
    argv[n++] = (char *)extra[i];
  argv[n] = NULL;
  int log = open(s->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0)
    return -errno;
  s->url[0] = '\0';
  s->pid = bench_spawn(argv, envp, -1, log);
  int err = errno;
  (void)close(log);
  if (s->pid < 0) {
    s->pid = 0;
    return -err;
  }
  for (int i = 0; !bench_serve_listening(s); i++) {
    int status;
    bool gone = waitpid(s->pid, &status, WNOHANG) == s->pid;
    if (gone || i == 30000) {
      (void)fprintf(stderr, "bench: sbx serve did not listen (see %s)\n",
                    s->log);
      if (!gone) {
        (void)kill(s->pid, SIGKILL);
        (void)bench_reap(s->pid, 5000);
      }
      s->pid = 0;
      return -EIO;
    }
    (void)nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
  }
  return 0;
}

/* Sends SIG and reaps the server (SIGKILL after 60 s). */
static inline void bench_serve_stop(struct bench_serve *s, int sig) {
  if (s->pid > 0) {
    (void)kill(s->pid, sig);
    (void)bench_reap(s->pid, 60000);
  }
  s->pid = 0;
}

/* ---- processes and their memory ----------------------------------------- */

struct bench_procs {
  size_t n;
  pid_t *pid, *ppid;
  bool *sandboxd; /* its comm is "sandboxd" */
};

static inline void bench_procs_free(struct bench_procs *p) {
  free(p->pid);
  free(p->ppid);
  free(p->sandboxd);
  memset(p, 0, sizeof(*p));
}

/* Every process's pid, parent and whether it is a sandboxd, from /proc. */
static inline int bench_procs_scan(struct bench_procs *p) {
  size_t cap = 1u << 16;
  memset(p, 0, sizeof(*p));
  p->pid = calloc(cap, sizeof(*p->pid));
  p->ppid = calloc(cap, sizeof(*p->ppid));
  p->sandboxd = calloc(cap, sizeof(*p->sandboxd));
  DIR *d = opendir("/proc");
  if (!p->pid || !p->ppid || !p->sandboxd || !d) {
    if (d)
      (void)closedir(d);
    bench_procs_free(p);
    return -ENOMEM;
  }
  struct dirent *de;
  while ((de = readdir(d)) && p->n < cap) {
    char *end = NULL;
    long pid = strtol(de->d_name, &end, 10);
    if (!isdigit((unsigned char)de->d_name[0]) || *end || pid <= 0)
      continue;
    char path[64], line[512];
    (void)snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "re");
    if (!f)
      continue;
    bool ok = fgets(line, sizeof(line), f) != NULL;
    (void)fclose(f);
    const char *open_paren = ok ? strchr(line, '(') : NULL;
    const char *close_paren = ok ? strrchr(line, ')') : NULL;
    char state;
    int ppid;
    if (!open_paren || !close_paren ||
        sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2)
      continue;
    p->pid[p->n] = (pid_t)pid;
    p->ppid[p->n] = (pid_t)ppid;
    p->sandboxd[p->n] = close_paren - open_paren - 1 == 8 &&
                        strncmp(open_paren + 1, "sandboxd", 8) == 0;
    p->n++;
  }
  (void)closedir(d);
  return 0;
}

/* A "Name:  N kB" line of /proc/PID/status in KiB, or a negative errno. */
static inline long bench_status_kib(pid_t pid, const char *name) {
  char path[64];
  (void)snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f)
    return -errno;
  char line[256];
  size_t n = strlen(name);
  long kib = -ENOENT;
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, name, n) == 0) {
      char *end = NULL;
      long v = strtol(line + n, &end, 10);
      if (end != line + n)
        kib = v;
      break;
    }
  (void)fclose(f);
  return kib;
}

struct bench_tree_mem {
  unsigned procs;         /* descendants of the root */
  unsigned sandboxds;     /* its children that are sandboxds (one a sandbox:
                           * an isolated one has more processes, named alike) */
  long rss_kib, anon_kib; /* their VmRSS and RssAnon, summed */
};

/* The memory of every descendant of ROOT (not ROOT itself). */
static inline int bench_tree_mem(pid_t root, struct bench_tree_mem *m) {
  *m = (struct bench_tree_mem){0};
  struct bench_procs p;
  int r = bench_procs_scan(&p);
  if (r < 0)
    return r;
  bool *in = calloc(p.n ? p.n : 1, sizeof(*in));
  if (!in) {
    bench_procs_free(&p);
    return -ENOMEM;
  }
  /* Passes until nothing is added: the tree is a few levels deep. */
  for (bool more = true; more;) {
    more = false;
    for (size_t i = 0; i < p.n; i++) {
      if (in[i])
        continue;
      bool under = p.ppid[i] == root;
      for (size_t j = 0; !under && j < p.n; j++)
        under = in[j] && p.pid[j] == p.ppid[i];
      if (under)
        in[i] = more = true;
    }
  }
  for (size_t i = 0; i < p.n; i++) {
    if (!in[i])
      continue;
    long rss = bench_status_kib(p.pid[i], "VmRSS:");
    long anon = bench_status_kib(p.pid[i], "RssAnon:");
    m->procs++;
    m->sandboxds += p.sandboxd[i] && p.ppid[i] == root;
    m->rss_kib += rss > 0 ? rss : 0;
    m->anon_kib += anon > 0 ? anon : 0;
  }
  free(in);
  bench_procs_free(&p);
  return 0;
}

/* With us a child subreaper, the sandboxds of a server that died are ours:
 * ends (SIGTERM, then SIGKILL) and reaps every child of ours but the
 * NKEEP pids in KEEP. */
static inline void bench_reap_orphans(const pid_t *keep, size_t nkeep) {
  struct bench_procs p;
  if (bench_procs_scan(&p) < 0)
    return;
  pid_t self = getpid();
  for (size_t i = 0; i < p.n; i++) {
    bool kept = p.ppid[i] != self;
    for (size_t k = 0; !kept && k < nkeep; k++)
      kept = keep[k] == p.pid[i];
    if (!kept) {
      (void)kill(p.pid[i], SIGTERM);
      (void)bench_reap(p.pid[i], 5000);
    }
  }
  bench_procs_free(&p);
}

/* ---- HTTP --------------------------------------------------------------- */

struct bench_http {
  CURL *c;
  struct curl_slist *headers;
  const struct bench_serve *s;
  struct sbx_buf body; /* the last reply's body, NUL-terminated */
};

static inline size_t bench_http_body(char *p, size_t size, size_t n,
                                     void *arg) {
  return sbx_buf_append(arg, p, size * n) < 0 ? 0 : size * n;
}

static inline void bench_http_close(struct bench_http *h) {
  if (h->c)
    curl_easy_cleanup(h->c);
  curl_slist_free_all(h->headers);
  sbx_buf_free(&h->body);
  memset(h, 0, sizeof(*h));
}

/* A client of S's API with its admin token, on one kept-alive connection. */
static inline int bench_http_open(struct bench_http *h,
                                  const struct bench_serve *s) {
  memset(h, 0, sizeof(*h));
  char auth[192];
  (void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s", s->token);
  h->s = s;
  h->c = curl_easy_init();
  h->headers = curl_slist_append(NULL, auth);
  struct curl_slist *t = h->headers
                             ? curl_slist_append(h->headers, "Content-Type: "
                                                             "application/json")
                             : NULL;
  sbx_buf_init(&h->body, 64u << 20);
  if (!h->c || !t) {
    bench_http_close(h);
    return -ENOMEM;
  }
  h->headers = t;
  (void)curl_easy_setopt(h->c, CURLOPT_HTTPHEADER, h->headers);
  (void)curl_easy_setopt(h->c, CURLOPT_WRITEFUNCTION, bench_http_body);
  (void)curl_easy_setopt(h->c, CURLOPT_WRITEDATA, &h->body);
  (void)curl_easy_setopt(h->c, CURLOPT_TIMEOUT, 60L);
  (void)curl_easy_setopt(h->c, CURLOPT_TCP_NODELAY, 1L);
  return 0;
}

/* METHOD PATH with BODY (NULL: none); the reply's body is in h->body and,
 * when OUT is not NULL, parsed into *OUT (new; NULL when not JSON). */
static inline int bench_http_do(struct bench_http *h, const char *method,
                                const char *path, const char *body,
                                long *status, json_t **out) {
  char url[512];
  (void)snprintf(url, sizeof(url), "%s%s", h->s->url, path);
  sbx_buf_reset(&h->body);
  (void)curl_easy_setopt(h->c, CURLOPT_URL, url);
  (void)curl_easy_setopt(h->c, CURLOPT_CUSTOMREQUEST, method);
  (void)curl_easy_setopt(h->c, CURLOPT_POSTFIELDS,
                         body                          ? body
                         : strcmp(method, "POST") == 0 ? ""
                                                       : NULL);
  if (strcmp(method, "GET") == 0)
    (void)curl_easy_setopt(h->c, CURLOPT_HTTPGET, 1L);
  CURLcode cc = curl_easy_perform(h->c);
  *status = 0;
  (void)curl_easy_getinfo(h->c, CURLINFO_RESPONSE_CODE, status);
  if (cc != CURLE_OK || sbx_buf_append(&h->body, "", 1) < 0) {
    (void)fprintf(stderr, "bench: %s %s: %s\n", method, url,
                  curl_easy_strerror(cc));
    return -EIO;
  }
  h->body.len--;
  if (out)
    *out = json_loadb(h->body.data, h->body.len, 0, NULL);
  return 0;
}

/* ---- Server-Sent Events ------------------------------------------------- */

/* One event: its type, its data (LEN bytes of JSON, not NUL-terminated)
 * and when the bytes that ended it arrived (bench_wall_us). 1 stops the
 * stream, 0 reads on, a negative errno fails it. */
typedef int (*bench_sse_fn)(void *arg, const char *type, const char *data,
                            size_t len, int64_t recv_us);

struct bench_sse {
  bench_sse_fn fn;
  void *arg;
  int64_t first_us; /* when the first bytes came */
  bool ended;       /* the server ended the stream */
  bool stopped;     /* FN stopped it */
  int err;          /* FN's error */
  /* the parser's */
  struct sbx_buf line, data;
  char type[40];
};

/* One line of the stream (without its newline), at RECV_US. */
static inline int bench_sse_line(struct bench_sse *x, const char *l, size_t n,
                                 int64_t recv_us) {
  if (n == 0) {
    int r = 0;
    if (x->type[0])
      r = x->fn(x->arg, x->type, x->data.data ? x->data.data : "", x->data.len,
                recv_us);
    x->type[0] = '\0';
    sbx_buf_reset(&x->data);
    return r;
  }
  if (n > 7 && strncmp(l, "event: ", 7) == 0)
    (void)snprintf(x->type, sizeof(x->type), "%.*s", (int)(n - 7), l + 7);
  else if (n > 6 && strncmp(l, "data: ", 6) == 0 &&
           sbx_buf_append(&x->data, l + 6, n - 6) < 0)
    return -ENOMEM;
  return 0;
}

static inline size_t bench_sse_bytes(char *p, size_t size, size_t n,
                                     void *arg) {
  struct bench_sse *x = arg;
  int64_t now = bench_wall_us();
  if (!x->first_us)
    x->first_us = now;
  size_t len = size * n;
  for (size_t i = 0; i < len;) {
    const char *nl = memchr(p + i, '\n', len - i);
    size_t k = nl ? (size_t)(nl - (p + i)) : len - i;
    if (sbx_buf_append(&x->line, p + i, k) < 0) {
      x->err = -ENOMEM;
      return 0;
    }
    i += k;
    if (!nl)
      break;
    i++;
    int r =
        bench_sse_line(x, x->line.data ? x->line.data : "", x->line.len, now);
    sbx_buf_reset(&x->line);
    if (r != 0) {
      x->stopped = r > 0;
      x->err = r < 0 ? r : 0;
      return 0;
    }
  }
  return len;
}

/* Streams the events of run ID from S, after seq AFTER (-1: from the
 * first), to FN, until FN stops it, the server ends it, or TIMEOUT_MS. 0
 * when FN stopped it or the server ended it (x->stopped, x->ended). */
static inline int bench_sse_run(const struct bench_serve *s, const char *id,
                                long after, long timeout_ms,
                                struct bench_sse *x) {
  x->first_us = 0;
  x->ended = x->stopped = false;
  x->err = 0;
  x->type[0] = '\0';
  sbx_buf_init(&x->line, 64u << 20);
  sbx_buf_init(&x->data, 64u << 20);
  char url[512], auth[192], last[64];
  (void)snprintf(url, sizeof(url), "%s/v1/runs/%s/events", s->url, id);
  (void)snprintf(auth, sizeof(auth), "Authorization: Bearer %s", s->token);
  (void)snprintf(last, sizeof(last), "Last-Event-ID: %ld", after);
  CURL *c = curl_easy_init();
  struct curl_slist *h = curl_slist_append(NULL, auth);
  struct curl_slist *t = h && after >= 0 ? curl_slist_append(h, last) : h;
  int r = -ENOMEM;
  if (c && t) {
    (void)curl_easy_setopt(c, CURLOPT_URL, url);
    (void)curl_easy_setopt(c, CURLOPT_HTTPHEADER, t);
    (void)curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bench_sse_bytes);
    (void)curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    (void)curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    (void)curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    x->ended = cc == CURLE_OK;
    r = x->err;
    if (r == 0 && (status != 200 || (!x->ended && !x->stopped))) {
      (void)fprintf(stderr, "bench: GET %s: HTTP %ld, %s\n", url, status,
                    curl_easy_strerror(cc));
      r = -EIO;
    }
  }
  if (c)
    curl_easy_cleanup(c);
  curl_slist_free_all(h);
  sbx_buf_free(&x->line);
  sbx_buf_free(&x->data);
  return r;
}

/* An event's "seq", "turn" (0: none) and "timestamp" (unix ms), from its
 * data. -EINVAL when the data is not an event. */
static inline int bench_event_fields(const char *data, size_t len, int64_t *seq,
                                     int *turn, int64_t *ts_ms) {
  json_t *j = json_loadb(data, len, 0, NULL);
  *seq = json_integer_value(json_object_get(j, "seq"));
  *turn = (int)json_integer_value(json_object_get(j, "turn"));
  *ts_ms = bench_rfc3339_ms(json_string_value(json_object_get(j, "timestamp")));
  json_decref(j);
  return *seq > 0 && *ts_ms > 0 ? 0 : -EINVAL;
}

/* ---- latencies ------------------------------------------------------------
 */

struct bench_lats {
  uint64_t *v; /* microseconds */
  size_t n, cap;
};

static inline int bench_lats_push(struct bench_lats *l, int64_t us) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 1024;
    uint64_t *v = cap <= (1u << 22) ? realloc(l->v, cap * sizeof(*v)) : NULL;
    if (!v)
      return -ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = us > 0 ? (uint64_t)us : 0;
  return 0;
}

static inline double bench_pct_ms(struct bench_lats *l, double p) {
  return (double)bench_percentile(l->v, l->n, p) / 1000.0;
}

/* ---- runs through the API ---------------------------------------------- */

/* POSTs a run of AGENT (JSON text) for up to MAX_TURNS model calls: its id
 * into ID and its created_at (unix ms) into *CREATED. */
static inline int bench_api_submit(struct bench_http *h, const char *agent,
                                   unsigned max_turns, char *id, size_t n,
                                   int64_t *created) {
  json_t *req =
      json_pack("{s:o, s:s, s:I}", "agent", json_loads(agent, 0, NULL), "input",
                "Run true.", "max_turns", (json_int_t)max_turns);
  char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
  json_decref(req);
  if (!body)
    return -ENOMEM;
  long status = 0;
  json_t *reply = NULL;
  int r = bench_http_do(h, "POST", "/v1/runs", body, &status, &reply);
  free(body);
  const char *got = json_string_value(json_object_get(reply, "id"));
  if (r == 0 && (status != 201 || !got)) {
    (void)fprintf(stderr, "bench: POST /v1/runs: %ld %.300s\n", status,
                  h->body.data);
    r = -EIO;
  }
  if (r == 0) {
    (void)snprintf(id, n, "%s", got);
    *created = bench_rfc3339_ms(
        json_string_value(json_object_get(reply, "created_at")));
  }
  json_decref(reply);
  return r;
}

struct bench_event {
  int64_t seq, ts_ms, recv_us;
  int turn;
  char type[24];
};

/* What one reading of a run's event stream keeps. */
struct bench_watch {
  bool parse;        /* keep each event (else only the last one's type) */
  const char *until; /* stop after this type; NULL: after a terminal one */
  struct bench_event *ev;
  size_t n, cap;
  char last[40];
  int64_t last_seq;
};

static inline bool bench_terminal(const char *type) {
  return strcmp(type, "run_finished") == 0 || strcmp(type, "run_failed") == 0 ||
         strcmp(type, "run_cancelled") == 0;
}

static inline int bench_watch_event(void *arg, const char *type,
                                    const char *data, size_t len,
                                    int64_t recv_us) {
  struct bench_watch *w = arg;
  (void)snprintf(w->last, sizeof(w->last), "%s", type);
  if (w->parse) {
    if (w->n == w->cap) {
      size_t cap = w->cap ? w->cap * 2 : 64;
      struct bench_event *v =
          cap <= (1u << 20) ? realloc(w->ev, cap * sizeof(*v)) : NULL;
      if (!v)
        return -ENOMEM;
      w->ev = v;
      w->cap = cap;
    }
    struct bench_event *e = &w->ev[w->n];
    if (bench_event_fields(data, len, &e->seq, &e->turn, &e->ts_ms) < 0)
      return -EINVAL;
    e->recv_us = recv_us;
    (void)snprintf(e->type, sizeof(e->type), "%s", type);
    w->last_seq = e->seq;
    w->n++;
  }
  return w->until ? strcmp(type, w->until) == 0 : bench_terminal(type);
}

/* Reads run ID's events after AFTER (-1: all) into W, up to 10 min. */
static inline int bench_watch_run(const struct bench_serve *s, const char *id,
                                  long after, struct bench_watch *w,
                                  int64_t *first_us) {
  struct bench_sse x = {.fn = bench_watch_event, .arg = w};
  int r = bench_sse_run(s, id, after, 600000, &x);
  if (first_us)
    *first_us = x.first_us;
  return r;
}

#endif
