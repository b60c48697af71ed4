/* libFuzzer target for the HTTP API of sbx serve (controller/server/): the
 * input is raw HTTP, one request or a few pipelined, sent over a loopback
 * TCP connection to the real httpd and api_dispatch of a server started
 * once, on SQLite in a temporary directory and without workers (no run is
 * ever executed: no model server, no sandboxes).
 *
 * Placeholders in the input are replaced before it is sent, so that the
 * fuzzer can use secrets and ids it cannot guess:
 *   @ADMIN@ @RUNNER@ @READ@   tokens with the scopes admin, run,approve
 *                             and read
 *   @WAIT@                    a run waiting for approvals of calls c1, c2
 *   @FAILED@                  a failed run with a state file (retryable)
 *   @DONE@                    a completed run
 * A POST may change the store, so after an input with one the store is
 * looked at: runs of the fixture that changed (decided, cancelled,
 * retried) are made anew, and so are the tokens when runs were made (each
 * token may have QUOTA unfinished) or an Idempotency-Key was sent (the
 * answers are kept by token), each time with new ids and names: the next
 * input finds the fixture as the first did. Past RUNS_MAX runs the server
 * starts again on a new directory, so that lists stay short.
 *
 * Each input: connect, send, shut the write side, read until the server
 * closes, close. Checked (abort on violation): an answer arrives within
 * ANSWER_MS, and the server lets go of the connection within LINGER_MS
 * once it is closed; each answer in it starts with "HTTP/1.1 " and a 3-digit
 * status; a JSON body parses, and an error's has error.code and
 * error.message; no 5xx (the store does not fail here), but 505 from
 * libmicrohttpd for an HTTP version it does not speak; no answer shows
 * the server's state directory (unless the request did). An event stream
 * (text/event-stream) does not end while its run waits, so reading stops
 * at its head. Every HEALTH_EVERY inputs GET /healthz must answer 200.
 * Two faults of libmicrohttpd 0.9.75 are stepped around (see
 * spoil_expect and scan_answers).
 *
 * SBX_FUZZ_API_SHOW=1 prints each request and its answers, to see what a
 * seed or a finding does: fuzz_api -runs=0 FILE. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/server/server_internal.h"
#include "controller/state/store.h"
#include "shared/buf.h"
#include "shared/log.h"
#include "tests/fuzz/fuzz_tmp.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__asan_default_options(void);

/* The server's threads free what they allocate on and off, so libFuzzer's
 * leak check after an input that allocated more than it freed comes now and
 * then; it walks every chunk, the quarantine's too, which at ASan's default
 * of 256 MiB takes seconds. A smaller one still catches a use after free
 * within an input. */
const char *__asan_default_options(void) {
  return "quarantine_size_mb=32";
}

#define ANSWER_MS 5000        /* a hang past it is a finding */
#define LINGER_MS 3000        /* a connection kept past it too */
#define HEALTH_EVERY 64       /* inputs between two /healthz checks */
#define RUNS_MAX 32           /* runs in one server's store */
#define MAX_BODY 5120         /* the server's --max-body */
#define QUOTA 2               /* the server's --max-runs */
#define ANSWER_MAX (16 << 20) /* read at most this much of the answers */
#define TOKEN_MAX 96

struct fixture {
  char dir[256];
  char state[300];
  char db[320];
  struct server_config cfg;
  struct server *srv;
  uint16_t port;
  unsigned long token_sets, run_sets; /* made in all, for new names */
  unsigned long inputs;
  bool saw_2xx;  /* an answer of this input was a success */
  int64_t runs;  /* in the store */
  char *rows[3]; /* the fixture's runs as made (JSON text) */
  char admin[TOKEN_MAX], runner[TOKEN_MAX], reader[TOKEN_MAX];
  char wait[SERVER_ID_MAX], failed[SERVER_ID_MAX], done[SERVER_ID_MAX];
};

static struct fixture fx;
static bool show; /* SBX_FUZZ_API_SHOW=1: print each exchange */

static const struct placeholder {
  const char *text;
  const char *value;
} placeholders[] = {
    {"@ADMIN@", fx.admin}, {"@RUNNER@", fx.runner}, {"@READ@", fx.reader},
    {"@WAIT@", fx.wait},   {"@FAILED@", fx.failed}, {"@DONE@", fx.done},
};
#define NPLACEHOLDERS (sizeof(placeholders) / sizeof(placeholders[0]))

/* Reports a finding (DETAIL: the answer or value it is about, shown up
 * to 400 bytes) and aborts. */
static void die(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_api: %s%s%.400s\n", what, detail ? ": " : "",
          detail ? detail : "");
  abort();
}

/* ---- the fixture: tokens and runs in the store ---- */

static void make_tokens(void) {
  static const struct {
    const char *prefix, *scopes;
    char *out;
  } tokens[] = {
      {"admin", "admin", fx.admin},
      {"runner", "run,approve", fx.runner},
      {"reader", "read", fx.reader},
  };
  for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
    char name[64];
    (void)snprintf(name, sizeof(name), "%s-%lu", tokens[i].prefix,
                   fx.token_sets);
    struct sbx_error e = {0};
    if (server_token_create(fx.srv->store, name, tokens[i].scopes,
                            tokens[i].out, TOKEN_MAX, &e) < 0)
      die("cannot make a token", e.msg);
  }
  fx.token_sets++;
}

static json_t *json_text(const char *text) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  if (!j)
    die("bad fixture JSON", text);
  return j;
}

/* What a run of the fixture is made of. */
struct run_spec {
  const char *status;
  const char *result; /* JSON text */
  const char *events; /* space-separated types, recorded as seq 1, 2, ... */
  const char *state;  /* the runner's state file, or NULL for none */
};

static void add_run(char *id, unsigned kind, const struct run_spec *spec) {
  struct store *s = fx.srv->store;
  struct sbx_error e = {0};
  (void)snprintf(id, SERVER_ID_MAX, SERVER_RUN_PREFIX "%016lx%016x",
                 fx.run_sets, kind);
  json_t *req = json_text("{\"agent\": {\"name\": \"A\", \"model\": \"m1\"}, "
                          "\"input\": \"hello\", \"metadata\": {\"t\": 1}}");
  json_t *res = json_text(spec->result);
  if (store_run_insert(s, id, "admin", spec->status, req, &e) < 0 ||
      store_run_update(s, id, NULL, NULL, res, &e) < 0)
    die("cannot add a run", e.msg);
  json_decref(req);
  json_decref(res);
  int64_t seq = 0;
  for (const char *p = spec->events; *p;) {
    size_t n = strcspn(p, " ");
    char type[64], data[160];
    (void)snprintf(type, sizeof(type), "%.*s", (int)n, p);
    (void)snprintf(data, sizeof(data),
                   "{\"type\":\"%s\",\"seq\":%lld,\"run_id\":\"%s\"}", type,
                   (long long)++seq, id + strlen(SERVER_RUN_PREFIX));
    if (store_event_add(s, id, seq, type, data, &e) < 0)
      die("cannot add an event", e.msg);
    p += n + (p[n] == ' ');
  }
  if (spec->state &&
      store_state_put(s, id, spec->state, strlen(spec->state), &e) < 0)
    die("cannot put a run's state", e.msg);
}

/* The run ID as the store has it (JSON text, new). */
static char *run_text(const char *id) {
  json_t *row = NULL;
  struct sbx_error e = {0};
  if (store_run_get(fx.srv->store, id, &row, &e) < 0)
    die("cannot read a run of the fixture", e.msg);
  char *text = json_dumps(row, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(row);
  if (!text)
    die("out of memory", NULL);
  return text;
}

/* The number of runs in the store. */
static int64_t count_runs(void) {
  json_t *counts = NULL;
  struct sbx_error e = {0};
  if (store_run_counts(fx.srv->store, &counts, &e) < 0)
    die("cannot count the runs", e.msg);
  int64_t n = 0;
  const char *k;
  json_t *v;
  json_object_foreach(counts, k, v) {
    n += json_integer_value(v);
  }
  json_decref(counts);
  return n;
}

/* The runs of the fixture, and where their ids are. */
static const struct run_spec fixture_runs[] = {
    {
        "waiting_approval",
        "{\"pending_approvals\": [{\"call_id\": \"c1\", \"tool\": "
        "\"exec_command\", \"arguments\": {\"cmd\": \"ls\"}}, {\"call_id\": "
        "\"c2\", \"tool\": \"apply_patch\", \"arguments\": {}}]}",
        "run_started approval_requested approval_requested",
        "{\"status\": \"waiting_approval\", \"items_count\": 0, \"pending\": "
        "[{\"call_id\": \"c1\"}, {\"call_id\": \"c2\"}]}",
    },
    {
        "failed",
        "{\"error\": {\"code\": \"model_error\", \"message\": \"boom\"}}",
        "run_started turn_finished run_failed",
        "{\"status\": \"failed\", \"items_count\": 2, \"pending\": []}",
    },
    {
        "completed",
        "{\"final_output\": \"done\", \"usage\": {\"input_tokens\": 3, "
        "\"output_tokens\": 1, \"total_tokens\": 4}}",
        "run_started message_output turn_finished run_finished",
        NULL,
    },
};
#define NRUNS (sizeof(fixture_runs) / sizeof(fixture_runs[0]))
static char *const run_ids[NRUNS] = {fx.wait, fx.failed, fx.done};
_Static_assert(NRUNS == sizeof(fx.rows) / sizeof(fx.rows[0]), "one row a run");

/* Makes run I of the fixture anew, with a new id. */
static void make_run(unsigned i) {
  add_run(run_ids[i], i + 1, &fixture_runs[i]);
  free(fx.rows[i]);
  fx.rows[i] = run_text(run_ids[i]);
  fx.run_sets++;
}

/* Makes anew the runs of the fixture that are not as they were made (all
 * of them when EVERY): how many. */
static unsigned make_runs(bool every) {
  unsigned n = 0;
  for (unsigned i = 0; i < NRUNS; i++) {
    char *now = every ? NULL : run_text(run_ids[i]);
    if (every || strcmp(now, fx.rows[i]) != 0) {
      make_run(i);
      n++;
    }
    free(now);
  }
  return n;
}

static void server_up(void) {
  fuzz_tmpdir(fx.dir, sizeof(fx.dir), "api");
  (void)snprintf(fx.state, sizeof(fx.state), "%s/state", fx.dir);
  (void)snprintf(fx.db, sizeof(fx.db), "sqlite:%s/sbx.db", fx.state);
  char runs[320];
  (void)snprintf(runs, sizeof(runs), "%s/runs", fx.state);
  if (mkdir(fx.state, 0700) < 0 || mkdir(runs, 0700) < 0)
    die("cannot make the state directory", fx.state);
  fx.cfg = (struct server_config){
      .db = fx.db,
      .state_dir = fx.state,
      .max_runs = QUOTA,
      .max_body = MAX_BODY,
      .ready_fd = -1,
  };
  struct sbx_error e = {0};
  if (server_start(&fx.cfg, false, &fx.srv, &e) < 0)
    die("cannot start the server", e.msg);
  fx.port = httpd_port(fx.srv->http);
  make_tokens();
  fx.runs = make_runs(true);
}

static void server_down(void) {
  fx.srv = server_stop(fx.srv);
  fuzz_tmpdir_remove(fx.dir);
  for (unsigned i = 0; i < NRUNS; i++) {
    free(fx.rows[i]);
    fx.rows[i] = NULL;
  }
}

/* ---- one exchange over TCP ---- */

static int64_t now_ms(void) {
  struct timespec ts;
  (void)clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until the server has let go of every connection (so that none of
 * its threads works on past this input, which would make the coverage of
 * one input another's, and LeakSanitizer's checks between inputs see
 * pointers in flight), waking its event streams, as a recorded event
 * would, so that one whose client has gone sees it now. Aborts after
 * LINGER_MS: the server keeps a connection whose client has gone. */
static void settle(void) {
  struct server *srv = fx.srv;
  int64_t deadline = now_ms() + LINGER_MS;
  for (unsigned n; (n = httpd_connections(srv->http)) > 0;) {
    if (now_ms() > deadline) {
      char what[64];
      (void)snprintf(what, sizeof(what), "%u open", n);
      die("the server keeps a connection its client has closed", what);
    }
    pthread_mutex_lock(&srv->mu);
    (void)pthread_cond_broadcast(&srv->events_cv);
    pthread_mutex_unlock(&srv->mu);
    struct timespec ts = {0, 100000};
    (void)nanosleep(&ts, NULL);
  }
}

/* A non-blocking connection to the server (libFuzzer's signals may
 * interrupt a blocking connect). */
static int connect_server(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(fx.port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0)
    die("socket", strerror(errno));
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
    return fd;
  if (errno != EINPROGRESS && errno != EINTR)
    die("cannot connect to the server", strerror(errno));
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  int err = 0;
  socklen_t len = sizeof(err);
  int64_t deadline = now_ms() + ANSWER_MS, left;
  while ((left = deadline - now_ms()) > 0 && poll(&p, 1, (int)left) < 0 &&
         errno == EINTR)
    ;
  if (!(p.revents & (POLLOUT | POLLERR | POLLHUP)) ||
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0)
    die("cannot connect to the server", err ? strerror(err) : "timed out");
  return fd;
}

/* How the answers are scanned: while they come (only to see where they
 * end), once the server has reset the connection or more came than is
 * read (every whole answer checked), or once it has closed it (and no
 * answer may be cut short). */
enum mode { WALK, CHECK, STRICT };
enum scan { SCAN_MORE, SCAN_STREAM };
static enum scan scan_answers(const char *p, size_t len, bool heads_only,
                              enum mode mode);

/* How an exchange ended. */
enum end { END_CLOSED, END_RESET, END_STREAM };
static const char *const end_names[] = {
    [END_CLOSED] = "closed", [END_RESET] = "reset", [END_STREAM] = "a stream"};

/* Sends REQ (LEN bytes), shuts the write side and reads the answers into
 * OUT until the server closes (or resets), an event stream's head has come,
 * or ANSWER_MS pass (then aborts: a hang). */
static enum end exchange(const char *req, size_t len, bool heads_only,
                         struct sbx_buf *out) {
  int fd = connect_server();
  size_t off = 0;
  bool wr_open = true;
  enum end how = END_CLOSED;
  int64_t deadline = now_ms() + ANSWER_MS;
  if (len == 0) {
    (void)shutdown(fd, SHUT_WR);
    wr_open = false;
  }
  for (;;) {
    int64_t left = deadline - now_ms();
    if (left <= 0)
      die("no complete answer in time (a hang)", out->data ? out->data : "");
    struct pollfd pfd = {.fd = fd, .events = POLLIN | (wr_open ? POLLOUT : 0)};
    if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
      die("poll", strerror(errno));
    if (wr_open && (pfd.revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = send(fd, req + off, len - off, MSG_NOSIGNAL);
      if (w > 0)
        off += (size_t)w;
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || off == len) {
        (void)shutdown(fd, SHUT_WR); /* sent, or the server stopped reading */
        wr_open = false;
      }
    }
    if (!(pfd.revents & (POLLIN | POLLERR | POLLHUP)))
      continue;
    char buf[16384];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (n <= 0) {
      /* closed, or reset (a refused body is not read) */
      how = n == 0 ? END_CLOSED : END_RESET;
      break;
    }
    if (sbx_buf_append(out, buf, (size_t)n) < 0) {
      how = END_RESET; /* enough to check */
      break;
    }
    if (scan_answers(out->data, out->len, heads_only, WALK) == SCAN_STREAM) {
      how = END_STREAM;
      break;
    }
  }
  (void)close(fd);
  settle();
  return how;
}

/* ---- the answers' checks ---- */

/* The value of header NAME in the head H (LEN bytes, lines ending in CRLF)
 * into OUT, or false. */
static bool header(const char *h, size_t len, const char *name, char *out,
                   size_t n) {
  size_t nl = strlen(name);
  for (const char *p = h, *end = h + len; p < end;) {
    const char *eol = memmem(p, (size_t)(end - p), "\r\n", 2);
    if (!eol)
      eol = end;
    if ((size_t)(eol - p) > nl && strncasecmp(p, name, nl) == 0 &&
        p[nl] == ':') {
      const char *v = p + nl + 1;
      while (v < eol && (*v == ' ' || *v == '\t'))
        v++;
      (void)snprintf(out, n, "%.*s", (int)(eol - v), v);
      return true;
    }
    if (eol == end)
      break;
    p = eol + 2;
  }
  return false;
}

/* The chunked body at P (LEN bytes): the bytes it spans on the wire into
 * *SPAN and its data into DATA: 0, or -EAGAIN when it is not all there. */
static int chunked(const char *p, size_t len, size_t *span,
                   struct sbx_buf *data) {
  size_t off = 0;
  for (;;) {
    const char *eol = memmem(p + off, len - off, "\r\n", 2);
    if (!eol)
      return -EAGAIN;
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull(p + off, &end, 16);
    if (errno || end == p + off || n > ANSWER_MAX)
      die("a bad chunk size in an answer", p + off);
    off = (size_t)(eol - p) + 2;
    if (n == 0) { /* trailers, then an empty line */
      const char *fin = memmem(p + off - 2, len - off + 2, "\r\n\r\n", 4);
      if (!fin)
        return -EAGAIN;
      *span = (size_t)(fin - p) + 4;
      return 0;
    }
    if (len - off < n + 2)
      return -EAGAIN;
    if (memcmp(p + off + n, "\r\n", 2) != 0)
      die("a chunk without its CRLF in an answer", p + off);
    if (data && sbx_buf_append(data, p + off, n) < 0)
      die("out of memory", NULL);
    off += n + 2;
  }
}

/* Checks a JSON body BODY (LEN bytes) of an answer with STATUS. */
static void check_json(unsigned status, const char *body, size_t len) {
  json_error_t je;
  json_t *j = json_loadb(body, len, 0, &je);
  if (!j)
    die("an answer's JSON body does not parse", body);
  if (status >= 400) {
    json_t *err = json_object_get(j, "error");
    if (!json_is_string(json_object_get(err, "code")) ||
        !json_is_string(json_object_get(err, "message")))
      die("an error's body lacks error.code or error.message", body);
  }
  json_decref(j);
}

/* Checks the head of one answer at P (HEAD_LEN bytes, up to its empty
 * line): its status line and status. The status. */
static unsigned check_head(const char *p, size_t head_len) {
  if (head_len < 13 || memcmp(p, "HTTP/1.1 ", 9) != 0 ||
      strspn(p + 9, "0123456789") != 3 || (p[12] != ' ' && p[12] != '\r'))
    die("an answer does not start with \"HTTP/1.1 \" and a status", p);
  unsigned status = (unsigned)(p[9] - '0') * 100 +
                    (unsigned)(p[10] - '0') * 10 + (unsigned)(p[11] - '0');
  if (status < 100)
    die("an answer's status is under 100", p);
  /* libmicrohttpd's own answer to a version it does not speak. */
  if (status >= 500 && status != 505)
    die("a 5xx answer", p);
  fx.saw_2xx |= status / 100 == 2;
  return status;
}

/* Walks or checks (MODE) the answers P (LEN bytes) one after the other.
 * HEADS_ONLY: the input has a HEAD, whose answer has no body, so the
 * answers cannot be told apart past the first head. Stops at an event
 * stream's head (SCAN_STREAM). */
static enum scan scan_answers(const char *p, size_t len, bool heads_only,
                              enum mode mode) {
  bool final = mode == STRICT;
  size_t off = 0;
  while (off < len) {
    const char *a = p + off;
    size_t rest = len - off;
    const char *eoh = memmem(a, rest, "\r\n\r\n", 4);
    if (!eoh) {
      if (final && rest >= 13)
        (void)check_head(a, rest);
      if (final)
        die("an answer cut within its head", a);
      return SCAN_MORE;
    }
    size_t head_len = (size_t)(eoh - a) + 2, start = head_len + 2;
    unsigned status = check_head(a, head_len);
    if (status < 200) { /* 100 Continue: another head follows */
      off += start;
      continue;
    }
    char ctype[128] = "", te[64] = "", cl[32] = "";
    bool typed = header(a, head_len, "Content-Type", ctype, sizeof(ctype));
    /* libmicrohttpd 0.9.75 sends the head of its own error answers
     * (untyped, HTML) twice when it refuses a Content-Length: one copy is
     * skipped, ours are held to the rules. */
    if (!typed && status >= 400 && rest - start >= start &&
        memcmp(a + start, a, start) == 0) {
      off += start;
      continue;
    }
    if (strncmp(ctype, "text/event-stream", 17) == 0)
      return SCAN_STREAM;
    if (heads_only)
      return SCAN_MORE;
    _cleanup_buf_ struct sbx_buf body;
    sbx_buf_init(&body, ANSWER_MAX);
    size_t span = 0;
    if (header(a, head_len, "Transfer-Encoding", te, sizeof(te)) &&
        strcasecmp(te, "chunked") == 0) {
      if (chunked(a + start, rest - start, &span, &body) < 0) {
        if (final)
          die("an answer cut within its chunked body", a);
        return SCAN_MORE;
      }
    } else if (header(a, head_len, "Content-Length", cl, sizeof(cl))) {
      char *end = NULL;
      unsigned long long n = strtoull(cl, &end, 10);
      if (end == cl || *end)
        die("a bad Content-Length in an answer", cl);
      if (rest - start < n) {
        if (final)
          die("an answer cut within its body", a);
        return SCAN_MORE;
      }
      span = (size_t)n;
      if (sbx_buf_append(&body, a + start, span) < 0)
        die("out of memory", NULL);
    } else { /* until the server closes */
      if (!final)
        return SCAN_MORE;
      span = rest - start;
      if (sbx_buf_append(&body, a + start, span) < 0)
        die("out of memory", NULL);
    }
    if (mode != WALK && strncmp(ctype, "application/json", 16) == 0)
      check_json(status, body.data ? body.data : "", body.len);
    off += start + span;
  }
  return SCAN_MORE;
}

/* ---- the input ---- */

/* DATA with its placeholders replaced, into OUT. */
static void substitute(const uint8_t *data, size_t size, struct sbx_buf *out) {
  const char *p = (const char *)data, *end = p + size;
  while (p < end) {
    const char *at = memchr(p, '@', (size_t)(end - p));
    if (!at) {
      (void)sbx_buf_append(out, p, (size_t)(end - p));
      return;
    }
    (void)sbx_buf_append(out, p, (size_t)(at - p));
    size_t i = 0;
    for (; i < NPLACEHOLDERS; i++) {
      size_t n = strlen(placeholders[i].text);
      if ((size_t)(end - at) >= n && memcmp(at, placeholders[i].text, n) == 0)
        break;
    }
    if (i == NPLACEHOLDERS) {
      (void)sbx_buf_append(out, "@", 1);
      p = at + 1;
      continue;
    }
    (void)sbx_buf_append_str(out, placeholders[i].value);
    p = at + strlen(placeholders[i].text);
  }
}

/* Spoils every "Expect: 100-continue" in REQ (LEN bytes): libmicrohttpd
 * 0.9.75 answers "100 Continue" to a request without a body that has it
 * and is followed by another, then neither answers nor reads until its
 * idle timeout; our handlers never see the header. */
static void spoil_expect(char *req, size_t len) {
  static const char v[] = "100-continue";
  for (size_t i = 0; i + sizeof(v) - 1 <= len; i++)
    if (strncasecmp(req + i, v, sizeof(v) - 1) == 0)
      req[i + 5] = '0';
}

/* Whether DATA (SIZE bytes) holds TEXT, in any case. */
static bool holds_caseless(const uint8_t *data, size_t size, const char *text) {
  size_t n = strlen(text);
  for (size_t i = 0; i + n <= size; i++)
    if (strncasecmp((const char *)data + i, text, n) == 0)
      return true;
  return false;
}

/* After an input: the fixture made anew where the input changed it, or the
 * server started again once its store holds RUNS_MAX runs. Only a POST
 * changes the store, and only with a success, or under an Idempotency-Key
 * (whose answer is kept, even a refusal); HOW says whether every answer
 * was seen. */
static void restore(const uint8_t *data, size_t size, enum end how) {
  bool idem = holds_caseless(data, size, "idempotency-key");
  if (!memmem(data, size, "POST", 4) ||
      (!fx.saw_2xx && !idem && how == END_CLOSED))
    return;
  int64_t runs = count_runs();
  if (runs >= RUNS_MAX) {
    server_down();
    server_up();
    return;
  }
  unsigned made = make_runs(false);
  if (runs != fx.runs || idem)
    make_tokens();
  fx.runs = runs + made;
}

static void check_health(void) {
  static const char req[] = "GET /healthz HTTP/1.1\r\nHost: fuzz\r\n\r\n";
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, ANSWER_MAX);
  enum end how = exchange(req, sizeof(req) - 1, false, &out);
  if (out.len < 12 || memcmp(out.data, "HTTP/1.1 200", 12) != 0)
    die("GET /healthz does not answer 200", out.data ? out.data : "");
  (void)scan_answers(out.data, out.len, false,
                     how == END_CLOSED ? STRICT : CHECK);
}

static void teardown(void) {
  server_down();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  sbx_log_set_level(SBX_LOG_ERROR);
  show = getenv("SBX_FUZZ_API_SHOW") != NULL;
  server_up();
  (void)atexit(teardown);
  check_health();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fx.saw_2xx = false;
  _cleanup_buf_ struct sbx_buf req;
  sbx_buf_init(&req, 10 * size + 64); /* a placeholder is at most 10 times
                                        longer than its text */
  substitute(data, size, &req);
  if (req.data)
    spoil_expect(req.data, req.len);
  bool heads_only = memmem(data, size, "HEAD", 4) != NULL;
  _cleanup_buf_ struct sbx_buf out;
  sbx_buf_init(&out, ANSWER_MAX);
  enum end how = exchange(req.data ? req.data : "", req.len, heads_only, &out);
  if (show)
    fprintf(stderr, "fuzz_api: >>>\n%s\n<<< (%s)\n%s\n",
            req.data ? req.data : "", end_names[how], out.data ? out.data : "");
  if (how != END_STREAM && out.len)
    (void)scan_answers(out.data, out.len, heads_only,
                       how == END_CLOSED ? STRICT : CHECK);
  if (out.len && memmem(out.data, out.len, fx.state, strlen(fx.state)) &&
      !memmem(req.data ? req.data : "", req.len, fx.state, strlen(fx.state)))
    die("an answer shows the server's state directory", out.data);
  restore(data, size, how);
  if (++fx.inputs % HEALTH_EVERY == 0)
    check_health();
  return 0;
}
