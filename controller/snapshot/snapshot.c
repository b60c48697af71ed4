/* Workspace snapshots: export through sandboxd into a local file or an HTTP
 * object, and back. See snapshot.h for the contract. */
#include "controller/snapshot/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/net/http.h"
#include "shared/cleanup.h"
#include "shared/client.h"
#include "shared/clock.h"
#include "shared/fileio.h"
#include "shared/log.h"
#include "shared/path.h"
#include "shared/sha256.h"

#define CHUNK_BYTES (4u << 20)      /* export reads and import writes */
#define PROGRESS_EVERY_NS 250000000 /* at most 4 progress calls a second */
#define SESSION_ID_MAX 128
#define EXCLUDES_MAX 10000
#define HTTP_CONNECT_MS 30000
#define HTTP_STALL_MS 60000
#define BODY_SHOWN 200 /* bytes of an error page quoted in messages */
#define CLEAR_PASSES 64

/* ---- small helpers ---- */

void snapshot_record_clear(struct snapshot_record *r) {
  if (!r)
    return;
  free(r->location);
  memset(r, 0, sizeof(*r));
}

int snapshot_type_parse(const char *s, enum snapshot_type *out) {
  if (strcmp(s, "local") == 0)
    *out = SNAPSHOT_LOCAL;
  else if (strcmp(s, "remote") == 0)
    *out = SNAPSHOT_REMOTE;
  else if (strcmp(s, "none") == 0 || strcmp(s, "noop") == 0)
    *out = SNAPSHOT_NONE;
  else
    return -EINVAL;
  return 0;
}

const char *snapshot_type_name(enum snapshot_type t) {
  switch (t) {
  case SNAPSHOT_LOCAL:
    return "local";
  case SNAPSHOT_REMOTE:
    return "remote";
  case SNAPSHOT_NONE:
    return "none";
  }
  return "unknown";
}

static const char *ext_of(enum snapshot_compression c) {
  return c == SNAPSHOT_UNCOMPRESSED ? ".tar" : ".tar.zst";
}

static bool session_id_valid(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > SESSION_ID_MAX || s[0] == '.')
    return false;
  for (size_t i = 0; i < n; i++) {
    char ch = s[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
      return false;
  }
  return true;
}

static char *join3(const char *a, const char *b, const char *c) {
  size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
  char *s = malloc(la + lb + lc + 1);
  if (!s)
    return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb);
  memcpy(s + la + lb, c, lc + 1);
  return s;
}

/* ---- progress ---- */

struct progress {
  snapshot_progress_fn fn;
  void *arg;
  const char *phase;
  uint64_t start_ns, last_ns;
  uint64_t total;
};

static void progress_begin(struct progress *p, snapshot_progress_fn fn,
                           void *arg, const char *phase, uint64_t total) {
  *p = (struct progress){.fn = fn, .arg = arg, .phase = phase, .total = total};
  p->start_ns = p->last_ns = sbx_now_ns();
}

static void progress_report(struct progress *p, uint64_t done, uint64_t files,
                            bool finished) {
  if (!p->fn)
    return;
  uint64_t now = sbx_now_ns();
  if (!finished && now - p->last_ns < PROGRESS_EVERY_NS)
    return;
  p->last_ns = now;
  double secs = (double)(now - p->start_ns) / 1e9;
  struct snapshot_progress sp = {
      .phase = p->phase,
      .bytes_done = done,
      .bytes_total = p->total,
      .files_done = files,
      .rate = secs > 0 ? (double)done / secs : 0,
      .finished = finished,
  };
  p->fn(p->arg, &sp);
}

/* ---- excludes ---- */

struct excludes {
  char **v; /* normalized ("." for everything), NULL-terminated */
  size_t n;
};

static void excludes_free(struct excludes *x) {
  for (size_t i = 0; i < x->n; i++)
    free(x->v[i]);
  free(x->v);
  x->v = NULL;
  x->n = 0;
}

static int excludes_add(struct excludes *x, const char *const *list,
                        struct sbx_error *e) {
  for (size_t i = 0; list && list[i]; i++) {
    if (x->n >= EXCLUDES_MAX)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "more than %d snapshot excludes", EXCLUDES_MAX);
    size_t len = strlen(list[i]);
    char *norm = malloc(len + 2);
    if (!norm)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    struct sbx_error pe = {0};
    int r = sbx_path_normalize_rel(list[i], len, norm, len + 2,
                                   SBX_PATH_NO_DOTDOT | SBX_PATH_EMPTY_IS_ROOT,
                                   &pe);
    if (r < 0) {
      free(norm);
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, -r,
                           "snapshot exclude \"%s\": %s", list[i], pe.msg);
    }
    char **v = realloc(x->v, (x->n + 2) * sizeof(*v));
    if (!v) {
      free(norm);
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    }
    x->v = v;
    x->v[x->n++] = norm;
    x->v[x->n] = NULL;
  }
  return 0;
}

static int excludes_make(const struct snapshot_spec *spec,
                         const char *const *extra, struct excludes *out,
                         struct sbx_error *e) {
  *out = (struct excludes){0};
  int r = excludes_add(out, spec ? spec->excludes : NULL, e);
  if (r == 0)
    r = excludes_add(out, extra, e);
  if (r < 0)
    excludes_free(out);
  return r;
}

/* ---- export from sandboxd ---- */

/* A reader thread fetches the next chunks while the caller hashes and
 * writes the current one: sandboxd's reads and our writes overlap. */
#define PREFETCH 2 /* chunks queued ahead */
/* How long a streamed export may send nothing before we give up. */
#define EXPORT_STALL_NS (120ull * 1000000000ull)

struct exporter {
  struct sbx_client *client;
  uint64_t handle;
  uint64_t total; /* the size given at start; 0 when streamed */
  uint64_t max;   /* the most archive bytes accepted */
  uint64_t off;   /* bytes handed to the caller's chunks so far */
  bool open;
  /* the chunk being handed out */
  Sbx__V1__Response *reply;
  const uint8_t *data;
  size_t len, pos;
  /* the reader thread and its queue, under mu */
  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  Sbx__V1__Response *q[PREFETCH];
  size_t qhead, qcount;
  uint64_t fetched; /* archive bytes fetched by the reader */
  bool eof;         /* the reader has fetched the whole archive */
  bool done;        /* the reader has stopped: end, error or stop */
  bool stop;        /* the caller gave up */
  int err;
  struct sbx_error rerr;
};

/* Fetches chunk after chunk until eof, an error or a stop. A size given at
 * start must be met exactly (the sandbox may lie); a streamed archive is
 * held to x->max as it arrives. */
static void *export_reader(void *arg) {
  struct exporter *x = arg;
  uint64_t off = 0, last_ns = sbx_now_ns();
  int r = 0;
  bool eof = false;
  struct sbx_error e = {0};
  while (!eof) {
    pthread_mutex_lock(&x->mu);
    while (x->qcount == PREFETCH && !x->stop)
      pthread_cond_wait(&x->cv, &x->mu);
    bool stop = x->stop;
    pthread_mutex_unlock(&x->mu);
    if (stop)
      break;
    uint64_t want = CHUNK_BYTES;
    if (x->total && x->total - off < want)
      want = x->total - off;
    Sbx__V1__Response *rep = NULL;
    r = sbx_archive_export_read(x->client, x->handle, off, (uint32_t)want, &rep,
                                &e);
    if (r < 0)
      break;
    Sbx__V1__ArchiveExportReadReply *c = rep->archive_export_read;
    eof = c->eof;
    if (x->total && (c->data.len > want || c->data.len == 0 ||
                     eof != (off + c->data.len == x->total))) {
      r = sbx_error_set(&e, SBX_INTERNAL, EPROTO,
                        "sandboxd sent %zu archive bytes at offset %" PRIu64
                        " of %" PRIu64,
                        c->data.len, off, x->total);
      sbx_client_reply_free(rep);
      break;
    }
    if (c->data.len > x->max - off) {
      char sz[32];
      http_format_size((size_t)x->max, sz, sizeof(sz));
      r = sbx_error_set(&e, SBX_LIMIT_EXCEEDED, EFBIG,
                        "the workspace archive is larger than the snapshot "
                        "limit of %s",
                        sz);
      sbx_client_reply_free(rep);
      break;
    }
    if (c->data.len == 0) {
      sbx_client_reply_free(rep);
      if (eof)
        break;
      /* Still being produced: sandboxd waited; ask again, not forever. */
      if (sbx_now_ns() - last_ns > EXPORT_STALL_NS) {
        r = sbx_error_set(&e, SBX_UNAVAILABLE, ETIMEDOUT,
                          "the workspace archive made no progress for %llu s",
                          EXPORT_STALL_NS / 1000000000ull);
        break;
      }
      (void)usleep(10000);
      continue;
    }
    last_ns = sbx_now_ns();
    off += c->data.len;
    pthread_mutex_lock(&x->mu);
    x->q[(x->qhead + x->qcount) % PREFETCH] = rep;
    x->qcount++;
    x->fetched = off;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
  }
  pthread_mutex_lock(&x->mu);
  x->done = true;
  x->eof = eof && r == 0;
  x->err = r;
  if (r < 0)
    x->rerr = e;
  pthread_cond_broadcast(&x->cv);
  pthread_mutex_unlock(&x->mu);
  return NULL;
}

/* Starts the export and its reader. STREAM: sandboxd produces the archive
 * while it is read (its size is then unknown until the end). */
static int export_open(struct exporter *x, struct sandbox *sb,
                       const struct excludes *ex,
                       enum snapshot_compression comp, uint64_t max_bytes,
                       bool stream, struct sbx_error *e) {
  *x = (struct exporter){.client = sb->client, .max = max_bytes};
  Sbx__V1__ArchiveExportStart a = SBX__V1__ARCHIVE_EXPORT_START__INIT;
  a.path = (char *)".";
  a.stream = stream;
  a.excludes = ex->v;
  a.n_excludes = ex->n;
  a.compression = comp == SNAPSHOT_UNCOMPRESSED
                      ? SBX__V1__COMPRESSION__COMPRESSION_NONE
                      : SBX__V1__COMPRESSION__COMPRESSION_ZSTD;
  Sbx__V1__Response *r = NULL;
  int rc = sbx_archive_export_start(sb->client, &a, &r, e);
  if (rc < 0)
    return rc;
  x->handle = r->archive_export_start->handle;
  x->total = r->archive_export_start->total_bytes;
  x->open = true;
  sbx_client_reply_free(r);
  if (x->total > max_bytes) {
    char sz[32];
    http_format_size((size_t)max_bytes, sz, sizeof(sz));
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "the workspace archive (%" PRIu64
                         " bytes) is larger than the snapshot limit of %s",
                         x->total, sz);
  }
  if ((rc = pthread_mutex_init(&x->mu, NULL)) != 0)
    return sbx_error_set(e, SBX_OK, rc, "cannot create a mutex: %s",
                         strerror(rc));
  if ((rc = pthread_cond_init(&x->cv, NULL)) != 0) {
    pthread_mutex_destroy(&x->mu);
    return sbx_error_set(e, SBX_OK, rc, "cannot create a condition: %s",
                         strerror(rc));
  }
  if ((rc = pthread_create(&x->thread, NULL, export_reader, x)) != 0) {
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    return sbx_error_set(e, SBX_OK, rc, "cannot start a thread: %s",
                         strerror(rc));
  }
  x->started = true;
  return 0;
}

/* The next piece of the archive, at most MAX bytes, into *DATA and *LEN;
 * *LEN is 0 at the end. The bytes stay valid until the next call. */
static int export_next(struct exporter *x, size_t max, const uint8_t **data,
                       size_t *len, struct sbx_error *e) {
  if (x->pos == x->len) {
    sbx_client_reply_free(x->reply);
    x->reply = NULL;
    x->data = NULL;
    x->len = x->pos = 0;
    pthread_mutex_lock(&x->mu);
    while (x->qcount == 0 && !x->done)
      pthread_cond_wait(&x->cv, &x->mu);
    Sbx__V1__Response *rep = NULL;
    if (x->qcount > 0) {
      rep = x->q[x->qhead];
      x->qhead = (x->qhead + 1) % PREFETCH;
      x->qcount--;
      pthread_cond_broadcast(&x->cv);
    }
    int err = x->err;
    bool eof = x->eof;
    pthread_mutex_unlock(&x->mu);
    if (!rep) {
      if (err < 0) {
        if (e)
          *e = x->rerr;
        return err;
      }
      if (eof) {
        *len = 0;
        return 0;
      }
      return sbx_error_set(e, SBX_INTERNAL, EPROTO,
                           "the archive ended after %" PRIu64 " bytes", x->off);
    }
    x->reply = rep;
    x->data = rep->archive_export_read->data.data;
    x->len = rep->archive_export_read->data.len;
  }
  size_t n = x->len - x->pos;
  if (n > max)
    n = max;
  *data = x->data + x->pos;
  *len = n;
  x->pos += n;
  x->off += n;
  return 0;
}

static void export_close(struct exporter *x) {
  if (x->started) {
    pthread_mutex_lock(&x->mu);
    x->stop = true;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    (void)pthread_join(x->thread, NULL);
    for (size_t i = 0; i < x->qcount; i++)
      sbx_client_reply_free(x->q[(x->qhead + i) % PREFETCH]);
    x->qcount = 0;
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    x->started = false;
  }
  sbx_client_reply_free(x->reply);
  x->reply = NULL;
  if (x->open) {
    struct sbx_error ignored = {0};
    if (sbx_archive_close(x->client, x->handle, &ignored) < 0)
      log_debug("snapshot: closing export %016" PRIx64 ": %s", x->handle,
                ignored.msg);
    x->open = false;
  }
}

/* ---- writing files ---- */

/* Creates PATH and its missing parents; the ones created get MODE. */
static int mkdir_p(const char *path, mode_t mode, struct sbx_error *e) {
  _cleanup_free_ char *p = strdup(path);
  if (!p)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  size_t n = strlen(p);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0')
      continue;
    char saved = p[i];
    p[i] = '\0';
    if (mkdir(p, mode) < 0 && errno != EEXIST)
      return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %s", p,
                           strerror(errno));
    p[i] = saved;
  }
  struct stat st;
  if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
    return sbx_error_set(e, SBX_OK, ENOTDIR, "\"%s\" is not a directory", path);
  return 0;
}

int snapshot_default_base_dir(char **out, struct sbx_error *e) {
  *out = NULL;
  const char *xdg = getenv("XDG_STATE_HOME");
  if (xdg && xdg[0] == '/')
    *out = join3(xdg, "/sbx/snapshots", "");
  else {
    const char *home = getenv("HOME");
    if (!home || home[0] != '/')
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                           "no snapshot directory: neither XDG_STATE_HOME nor "
                           "HOME is an absolute path");
    *out = join3(home, "/.local/state/sbx/snapshots", "");
  }
  return *out ? 0 : sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
}

/* An unlinked temporary file in $TMPDIR (or /tmp) for a download. */
static int temp_file(struct sbx_error *e) {
  const char *dir = getenv("TMPDIR");
  if (!dir || dir[0] != '/')
    dir = "/tmp";
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0)
    return fd;
  _cleanup_free_ char *tmpl = join3(dir, "/sbx-snapshot-XXXXXX", "");
  if (!tmpl)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  fd = mkostemp(tmpl, O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno,
                         "cannot create a temporary file in \"%s\": %s", dir,
                         strerror(errno));
  (void)unlink(tmpl);
  return fd;
}

/* ---- HTTP ---- */

/* The URL for SESSION_ID: SPEC_URL itself, or with the file name appended
 * when it is a prefix (no query, ends in '/'). */
static int remote_url(const char *spec_url, const char *file, char **out,
                      struct sbx_error *e) {
  size_t n = strlen(spec_url);
  bool prefix = n > 0 && spec_url[n - 1] == '/' && !strchr(spec_url, '?');
  *out = prefix ? join3(spec_url, file, "") : strdup(spec_url);
  if (!*out)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  _cleanup_free_ char *shown = NULL;
  if (http_url_redact(*out, &shown) < 0) {
    free(*out);
    *out = NULL;
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "snapshot URL is not an http:// or https:// URL");
  }
  return 0;
}

struct auth {
  const char *env; /* the variable's name, for messages */
  char *line;      /* "Authorization: Bearer ..." or NULL */
  const char *headers[2];
};

static int auth_load(struct auth *a, const struct snapshot_spec *spec,
                     struct sbx_error *e) {
  *a = (struct auth){0};
  a->env = spec && spec->token_env ? spec->token_env : SNAPSHOT_TOKEN_ENV;
  const char *tok = getenv(a->env);
  if (tok && tok[0]) {
    if (strpbrk(tok, "\r\n"))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "$%s holds a line break", a->env);
    a->line = join3("Authorization: Bearer ", tok, "");
    if (!a->line)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    a->headers[0] = a->line;
  }
  return 0;
}

static void auth_clear(struct auth *a) {
  if (a->line) {
    explicit_bzero(a->line, strlen(a->line));
    free(a->line);
  }
  *a = (struct auth){0};
}

/* The error for a non-2xx reply, naming the status and the URL. */
static int http_status_error(const struct http_response *resp,
                             const char *shown, const struct auth *a,
                             struct sbx_error *e) {
  long st = resp->status;
  if (st == 401)
    return sbx_error_set(
        e, SBX_UNAUTHENTICATED, EACCES, "401 from %s: unauthorized (%s $%s)",
        shown, a->line ? "check the token in" : "no token in", a->env);
  if (st == 403)
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EACCES,
                         "403 from %s: forbidden", shown);
  if (st == 404)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "404 from %s: no snapshot there", shown);
  if (st == 413)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "413 from %s: the server refused the archive's size",
                         shown);
  /* Quote the start of the error page, printable ASCII only. */
  char body[BODY_SHOWN + 1];
  size_t n = 0;
  for (size_t i = 0; i < resp->body_len && n < BODY_SHOWN; i++) {
    unsigned char ch = (unsigned char)resp->body[i];
    if (ch == '\n' && n > 0)
      break;
    if (ch >= 0x20 && ch < 0x7f)
      body[n++] = (char)ch;
  }
  body[n] = '\0';
  return sbx_error_set(e, st >= 500 ? SBX_UNAVAILABLE : SBX_INTERNAL, EIO,
                       "%ld from %s: %s", st, shown,
                       n ? body : "unexpected status");
}

/* A request to a remote snapshot store: the URL as shown in messages and
 * the token's header. */
struct remote {
  char *shown;
  struct auth a;
};

/* Sends REQ (its method, body and callbacks set) to URL with the snapshot
 * token; RM holds what messages about the reply need: remote_clear it,
 * whatever the result. A non-2xx status is the caller's to judge. */
static int remote_send(const struct snapshot_spec *spec, const char *url,
                       struct http_request *req, struct remote *rm,
                       struct http_response *resp, struct sbx_error *e) {
  *rm = (struct remote){0};
  if (http_url_redact(url, &rm->shown) < 0)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  int r = auth_load(&rm->a, spec, e);
  if (r < 0)
    return r;
  struct http_client *hc = NULL;
  r = http_client_new(&hc, e);
  if (r < 0)
    return r;
  req->url = url;
  req->url_display = rm->shown;
  req->headers = rm->a.headers;
  req->connect_timeout_ms = HTTP_CONNECT_MS;
  r = http_send(hc, req, resp, e);
  http_client_free(hc);
  return r;
}

static void remote_clear(struct remote *rm) {
  free(rm->shown);
  auth_clear(&rm->a);
}

/* ---- save ---- */

struct saver {
  struct exporter ex;
  struct sbx_sha256 sha;
  struct progress prog;
  struct sbx_error err; /* why the upload callback failed */
};

static int put_read(void *arg, char *buf, size_t max, size_t *got) {
  struct saver *s = arg;
  const uint8_t *data = NULL;
  size_t len = 0;
  int r = export_next(&s->ex, max, &data, &len, &s->err);
  if (r < 0)
    return r;
  memcpy(buf, data, len);
  sbx_sha256_update(&s->sha, data, len);
  *got = len;
  progress_report(&s->prog, s->ex.off, 0, false);
  return 0;
}

static int save_remote(const struct snapshot_spec *spec, struct saver *s,
                       const char *file, struct snapshot_record *out,
                       struct sbx_error *e) {
  if (!spec->url)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a remote snapshot needs a URL");
  _cleanup_free_ char *url = NULL;
  int r = remote_url(spec->url, file, &url, e);
  if (r < 0)
    return r;
  struct http_request req = {
      .stall_timeout_ms = HTTP_STALL_MS,
      .method = "PUT",
      .stream_body = true,
      .upload = put_read,
      .upload_arg = s,
      .upload_len = s->ex.total,
  };
  struct http_response resp = {0};
  struct remote rm;
  r = remote_send(spec, url, &req, &rm, &resp, e);
  if (r < 0 && e && s->err.msg[0])
    *e = s->err; /* the export's own failure, not the upload's */
  if (r == 0 && (resp.status < 200 || resp.status > 299))
    r = http_status_error(&resp, rm.shown, &rm.a, e);
  http_response_clear(&resp);
  if (r == 0)
    out->location = TAKE_PTR(rm.shown);
  remote_clear(&rm);
  return r;
}

static int save_local(const struct snapshot_spec *spec, struct saver *s,
                      const char *file, struct snapshot_record *out,
                      struct sbx_error *e) {
  _cleanup_free_ char *base = NULL;
  int r = 0;
  if (spec->base_dir)
    base = strdup(spec->base_dir);
  else
    r = snapshot_default_base_dir(&base, e);
  if (r < 0)
    return r;
  if (!base)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  r = mkdir_p(base, 0700, e);
  if (r < 0)
    return r;
  _cleanup_close_ int dfd =
      open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dfd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %s", base,
                         strerror(errno));
  _cleanup_free_ char *final = join3(base, "/", file);
  _cleanup_free_ char *tmp = join3(base, "/.", file);
  _cleanup_free_ char *tmpl = tmp ? join3(tmp, ".", "XXXXXX") : NULL;
  if (!final || !tmpl)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  _cleanup_close_ int fd = mkostemp(tmpl, O_CLOEXEC);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot create a file in \"%s\": %s",
                         base, strerror(errno));
  for (;;) {
    const uint8_t *data = NULL;
    size_t len = 0;
    r = export_next(&s->ex, CHUNK_BYTES, &data, &len, e);
    if (r < 0 || len == 0)
      break;
    sbx_sha256_update(&s->sha, data, len);
    r = sbx_write_all(fd, data, len);
    if (r < 0) {
      r = sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\": %s", tmpl,
                        strerror(-r));
      break;
    }
    progress_report(&s->prog, s->ex.off, 0, false);
  }
  uint64_t ts = sbx_now_ns();
  if (r == 0 && fsync(fd) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot sync \"%s\": %s", tmpl,
                      strerror(errno));
  if (r == 0) {
    int fdc = TAKE_FD(fd);
    if (close(fdc) < 0)
      r = sbx_error_set(e, SBX_OK, errno, "cannot write \"%s\": %s", tmpl,
                        strerror(errno));
  }
  if (r == 0 && rename(tmpl, final) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot rename \"%s\" to \"%s\": %s",
                      tmpl, final, strerror(errno));
  if (r < 0) {
    (void)unlink(tmpl);
    return r;
  }
  if (fsync(dfd) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot sync \"%s\": %s", base,
                         strerror(errno));
  log_debug("snapshot: fsync and rename took %.3f s",
            (double)(sbx_now_ns() - ts) / 1e9);
  out->location = TAKE_PTR(final);
  return 0;
}

int snapshot_save(const struct snapshot_spec *spec, struct sandbox *sb,
                  const char *session_id, const char *const *excludes,
                  struct snapshot_record *out, snapshot_progress_fn progress,
                  void *progress_arg, struct sbx_error *e) {
  memset(out, 0, sizeof(*out));
  if (!spec || spec->type == SNAPSHOT_NONE) {
    out->type = SNAPSHOT_NONE;
    return 0;
  }
  if (spec->type != SNAPSHOT_LOCAL && spec->type != SNAPSHOT_REMOTE)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown snapshot type %d", (int)spec->type);
  const char *sid = session_id ? session_id : sb->session_id;
  if (!session_id_valid(sid))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "session id \"%.*s\" cannot name a snapshot", 64, sid);
  _cleanup_free_ char *file = join3(sid, ext_of(spec->compression), "");
  if (!file)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  struct excludes ex;
  int r = excludes_make(spec, excludes, &ex, e);
  if (r < 0)
    return r;

  struct saver s = {0};
  uint64_t t0 = sbx_now_ns();
  struct progress arch;
  progress_begin(&arch, progress, progress_arg, "archiving", 0);
  progress_report(&arch, 0, 0, false);
  /* A local file is written as the archive is produced; an upload needs
   * its length first. */
  r = export_open(&s.ex, sb, &ex, spec->compression,
                  spec->max_bytes ? spec->max_bytes : SNAPSHOT_MAX_INPUT_BYTES,
                  spec->type == SNAPSHOT_LOCAL, e);
  excludes_free(&ex);
  if (r == 0) {
    if (s.ex.total)
      log_debug("snapshot: sandboxd archived %" PRIu64 " bytes in %.3f s",
                s.ex.total, (double)(sbx_now_ns() - t0) / 1e9);
    else
      log_debug("snapshot: sandboxd started a streamed export in %.3f s",
                (double)(sbx_now_ns() - t0) / 1e9);
    t0 = sbx_now_ns();
    arch.total = s.ex.total;
    progress_report(&arch, s.ex.total, 0, true);
    sbx_sha256_init(&s.sha);
    progress_begin(&s.prog, progress, progress_arg, "saving", s.ex.total);
    if (spec->type == SNAPSHOT_LOCAL)
      r = save_local(spec, &s, file, out, e);
    else
      r = save_remote(spec, &s, file, out, e);
    uint8_t d[SBX_SHA256_BYTES];
    sbx_sha256_final(&s.sha, d);
    sbx_sha256_hex(d, out->sha256);
  }
  export_close(&s.ex);
  if (r < 0) {
    snapshot_record_clear(out);
    return r;
  }
  log_debug("snapshot: stored %s in %.3f s", out->location,
            (double)(sbx_now_ns() - t0) / 1e9);
  progress_report(&s.prog, s.ex.off, 0, true);
  out->type = spec->type;
  out->size = s.ex.off;
  (void)snprintf(out->version, sizeof(out->version), "%s",
                 SNAPSHOT_FINGERPRINT_VERSION);
  return 0;
}

int snapshot_fingerprint(const struct snapshot_spec *spec, struct sandbox *sb,
                         const char *const *excludes, char out[65],
                         struct sbx_error *e) {
  out[0] = '\0';
  struct excludes ex;
  int r = excludes_make(spec, excludes, &ex, e);
  if (r < 0)
    return r;
  struct exporter x;
  r = export_open(&x, sb, &ex, spec ? spec->compression : SNAPSHOT_ZSTD,
                  UINT64_MAX, true, e);
  excludes_free(&ex);
  struct sbx_sha256 sha;
  sbx_sha256_init(&sha);
  while (r == 0) {
    const uint8_t *data = NULL;
    size_t len = 0;
    r = export_next(&x, CHUNK_BYTES, &data, &len, e);
    if (r < 0 || len == 0)
      break;
    sbx_sha256_update(&sha, data, len);
  }
  export_close(&x);
  uint8_t d[SBX_SHA256_BYTES];
  sbx_sha256_final(&sha, d);
  if (r == 0)
    sbx_sha256_hex(d, out);
  return r;
}

/* ---- restore ---- */

struct dl {
  int fd;
  uint64_t got, max;
  struct sbx_sha256 *sha;
  struct progress *prog;
  struct sbx_error err;
};

static int dl_data(void *arg, const char *data, size_t len) {
  struct dl *d = arg;
  if (len > d->max - d->got) {
    char sz[32];
    http_format_size((size_t)d->max, sz, sizeof(sz));
    return sbx_error_set(&d->err, SBX_LIMIT_EXCEEDED, EFBIG,
                         "the snapshot is larger than the input limit of %s",
                         sz);
  }
  int r = sbx_write_all(d->fd, data, len);
  if (r < 0)
    return sbx_error_set(&d->err, SBX_OK, -r,
                         "cannot write the downloaded snapshot: %s",
                         strerror(-r));
  sbx_sha256_update(d->sha, data, len);
  d->got += len;
  progress_report(d->prog, d->got, 0, false);
  return 0;
}

/* The URL a remote restore or HEAD uses: SPEC's (object or prefix + the
 * record's file name), else the record's location. */
static int restore_url(const struct snapshot_spec *spec,
                       const struct snapshot_record *rec, char **out,
                       struct sbx_error *e) {
  if (!spec || !spec->url) {
    if (!rec->location)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "the snapshot record has no location");
    return remote_url(rec->location, "", out, e);
  }
  const char *file = rec->location ? strrchr(rec->location, '/') : NULL;
  file = file ? file + 1 : "";
  return remote_url(spec->url, file, out, e);
}

/* GETs REC's archive into an unlinked temporary file, at most MAX_INPUT
 * bytes, hashed into SHA on the way; the fd, positioned at 0. */
static int download(const struct snapshot_spec *spec,
                    const struct snapshot_record *rec, uint64_t max_input,
                    struct sbx_sha256 *sha, struct progress *prog,
                    struct sbx_error *e) {
  _cleanup_free_ char *url = NULL;
  int r = restore_url(spec, rec, &url, e);
  if (r < 0)
    return r;
  struct dl d = {
      .fd = temp_file(e), .max = max_input, .sha = sha, .prog = prog};
  if (d.fd < 0)
    return d.fd;
  struct http_request req = {
      .stall_timeout_ms = HTTP_STALL_MS,
      .max_response_bytes = SIZE_MAX, /* dl_data applies max_input */
      .method = "GET",
      .stream_body = true,
      .on_data = dl_data,
      .data_arg = &d,
  };
  struct http_response resp = {0};
  struct remote rm;
  r = remote_send(spec, url, &req, &rm, &resp, e);
  if (e && r < 0 && d.err.msg[0])
    *e = d.err; /* the download's own failure (a limit) */
  if (r == 0 && (resp.status < 200 || resp.status > 299))
    r = http_status_error(&resp, rm.shown, &rm.a, e);
  http_response_clear(&resp);
  remote_clear(&rm);
  if (r == 0 && lseek(d.fd, 0, SEEK_SET) < 0)
    r = sbx_error_set(e, SBX_OK, errno, "cannot rewind the download: %s",
                      strerror(errno));
  if (r < 0) {
    (void)close(d.fd);
    return r;
  }
  progress_report(prog, d.got, 0, true);
  return d.fd;
}

static int read_full(int fd, uint8_t *buf, size_t max, size_t *got) {
  size_t n = 0;
  while (n < max) {
    ssize_t k = read(fd, buf + n, max - n);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    if (k == 0)
      break;
    n += (size_t)k;
  }
  *got = n;
  return 0;
}

/* Removes everything in the workspace beneath DIR (normalized, "." for the
 * root) except the excluded paths and the directories leading to them. */
static int clear_dir(struct sbx_client *c, const char *dir,
                     const struct excludes *ex, unsigned depth,
                     struct sbx_error *e) {
  if (depth > 256)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ELOOP,
                         "snapshot excludes are nested too deep");
  for (unsigned pass = 0; pass < CLEAR_PASSES; pass++) {
    Sbx__V1__FileList a = SBX__V1__FILE_LIST__INIT;
    a.path = (char *)dir;
    a.depth = 1;
    Sbx__V1__Response *r = NULL;
    int rc = sbx_file_list(c, &a, &r, e);
    if (rc < 0)
      return rc;
    Sbx__V1__FileListReply *l = r->file_list;
    bool removed_any = false;
    for (size_t i = 0; i < l->n_entries && rc == 0; i++) {
      const Sbx__V1__FileInfo *fi = l->entries[i];
      char child[SBX_PATH_MAX];
      if (sbx_path_join(dir, fi->path, child, sizeof(child)) < 0) {
        rc = sbx_error_set(e, SBX_INTERNAL, ENAMETOOLONG,
                           "workspace path too long under \"%s\"", dir);
        break;
      }
      bool keep = false, descend = false;
      for (size_t k = 0; k < ex->n; k++) {
        if (sbx_path_is_under(ex->v[k], child))
          keep = true;
        else if (sbx_path_is_under(child, ex->v[k]))
          descend = true;
      }
      if (keep)
        continue;
      if (descend && fi->type == SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY)
        rc = clear_dir(c, child, ex, depth + 1, e);
      else {
        rc = sbx_file_remove(c, child, true, true, e);
        removed_any = true;
      }
    }
    bool truncated = l->truncated;
    sbx_client_reply_free(r);
    if (rc < 0)
      return rc;
    if (!truncated || !removed_any)
      return 0;
  }
  return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                       "too many entries to clear in \"%s\"", dir);
}

int snapshot_restore(const struct snapshot_spec *spec,
                     const struct snapshot_record *rec, struct sandbox *sb,
                     const struct snapshot_limits *limits,
                     const char *current_fingerprint,
                     struct snapshot_restore_result *res,
                     snapshot_progress_fn progress, void *progress_arg,
                     struct sbx_error *e) {
  struct snapshot_restore_result dummy;
  if (!res)
    res = &dummy;
  memset(res, 0, sizeof(*res));
  if (rec->type == SNAPSHOT_NONE)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "no snapshot to restore (snapshots were off)");
  if (rec->type != SNAPSHOT_LOCAL && rec->type != SNAPSHOT_REMOTE)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "unknown snapshot type %d", (int)rec->type);
  if (strcmp(rec->version, SNAPSHOT_FINGERPRINT_VERSION) != 0)
    return sbx_error_set(e, SBX_NOT_SUPPORTED, ENOTSUP,
                         "snapshot fingerprint version \"%.*s\" is not "
                         "supported (only %s)",
                         64, rec->version, SNAPSHOT_FINGERPRINT_VERSION);
  if (strlen(rec->sha256) != 64)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the snapshot record has no sha256 fingerprint");
  if (current_fingerprint && strcmp(current_fingerprint, rec->sha256) == 0) {
    res->skipped = true;
    return 0;
  }
  struct snapshot_limits lim = {
      .max_input_bytes = SNAPSHOT_MAX_INPUT_BYTES,
      .max_extracted_bytes = SNAPSHOT_MAX_EXTRACTED_BYTES,
      .max_members = SNAPSHOT_MAX_MEMBERS,
  };
  if (limits && limits->max_input_bytes)
    lim.max_input_bytes = limits->max_input_bytes;
  if (limits && limits->max_extracted_bytes)
    lim.max_extracted_bytes = limits->max_extracted_bytes;
  if (limits && limits->max_members)
    lim.max_members = limits->max_members;
  const char *where = rec->location ? rec->location : "(no location)";
  char sz[32];
  if (rec->size > lim.max_input_bytes) {
    http_format_size((size_t)lim.max_input_bytes, sz, sizeof(sz));
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "snapshot %s (%" PRIu64
                         " bytes) is larger than the input limit of %s",
                         where, rec->size, sz);
  }

  /* The archive as a file: the local snapshot, or a verified download. */
  struct progress prog;
  _cleanup_close_ int fd = -1;
  bool verified = false;
  if (rec->type == SNAPSHOT_LOCAL) {
    if (!rec->location)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "the snapshot record has no location");
    fd = open(rec->location, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      return sbx_error_set(e, errno == ENOENT ? SBX_NOT_FOUND : SBX_OK, errno,
                           "cannot open snapshot \"%s\": %s", where,
                           strerror(errno));
  } else {
    struct sbx_sha256 sha;
    sbx_sha256_init(&sha);
    progress_begin(&prog, progress, progress_arg, "loading", rec->size);
    fd = download(spec, rec, lim.max_input_bytes, &sha, &prog, e);
    uint8_t d[SBX_SHA256_BYTES];
    char hex[SBX_SHA256_HEX];
    sbx_sha256_final(&sha, d);
    if (fd < 0)
      return fd;
    sbx_sha256_hex(d, hex);
    if (strcmp(hex, rec->sha256) != 0)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                           "snapshot %s does not match its fingerprint "
                           "(sha256 %s, expected %s): refusing to restore it",
                           where, hex, rec->sha256);
    verified = true;
  }
  struct stat st;
  if (fstat(fd, &st) < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot stat snapshot \"%s\": %s",
                         where, strerror(errno));
  if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != rec->size)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "snapshot %s has %jd bytes, its record says %" PRIu64
                         ": refusing to restore it",
                         where, (intmax_t)st.st_size, rec->size);

  struct excludes ex;
  int r = excludes_make(spec, NULL, &ex, e);
  if (r < 0)
    return r;

  /* Send it to sandboxd, hashing a local file on the way. Nothing is
   * extracted in place before the finish; into an empty workspace sandboxd
   * extracts into a staging directory as the archive arrives, which the
   * clearing below leaves alone. */
  Sbx__V1__ArchiveLimits al = SBX__V1__ARCHIVE_LIMITS__INIT;
  al.max_input_bytes = lim.max_input_bytes;
  al.max_extracted_bytes = lim.max_extracted_bytes;
  al.max_members = lim.max_members;
  Sbx__V1__ArchiveImportStart a = SBX__V1__ARCHIVE_IMPORT_START__INIT;
  a.path = (char *)".";
  a.limits = &al;
  a.compression = SBX__V1__COMPRESSION__COMPRESSION_AUTO;
  a.stage = true;
  Sbx__V1__Response *reply = NULL;
  r = sbx_archive_import_start(sb->client, &a, &reply, e);
  if (r < 0) {
    excludes_free(&ex);
    return r;
  }
  uint64_t handle = reply->archive_import_start->handle;
  const char *staging[] = {reply->archive_import_start->staging_path, NULL};
  if (staging[0][0])
    r = excludes_add(&ex, staging, e);
  sbx_client_reply_free(reply);
  reply = NULL;

  _cleanup_free_ uint8_t *buf = malloc(CHUNK_BYTES);
  struct sbx_sha256 sha;
  sbx_sha256_init(&sha);
  progress_begin(&prog, progress, progress_arg, "restoring", rec->size);
  uint64_t off = 0;
  if (!buf)
    r = sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  while (r == 0) {
    size_t n = 0;
    r = read_full(fd, buf, CHUNK_BYTES, &n);
    if (r < 0) {
      r = sbx_error_set(e, SBX_OK, -r, "cannot read snapshot \"%s\": %s", where,
                        strerror(-r));
      break;
    }
    if (n == 0)
      break;
    if (n > rec->size - off) {
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                        "snapshot %s grew while it was read", where);
      break;
    }
    if (!verified)
      sbx_sha256_update(&sha, buf, n);
    uint64_t received = 0;
    r = sbx_archive_import_write(sb->client, handle, off, buf, n, &received, e);
    if (r < 0)
      break;
    off += n;
    if (received != off)
      r = sbx_error_set(e, SBX_INTERNAL, EPROTO,
                        "sandboxd acknowledged %" PRIu64 " of %" PRIu64
                        " archive bytes",
                        received, off);
    progress_report(&prog, off, 0, false);
  }
  uint8_t d[SBX_SHA256_BYTES];
  sbx_sha256_final(&sha, d);
  if (r == 0 && off != rec->size)
    r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                      "snapshot %s has %" PRIu64
                      " bytes, its record says %" PRIu64
                      ": refusing to restore it",
                      where, off, rec->size);
  if (r == 0 && !verified) {
    char hex[SBX_SHA256_HEX];
    sbx_sha256_hex(d, hex);
    if (strcmp(hex, rec->sha256) != 0)
      r = sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                        "snapshot %s does not match its fingerprint "
                        "(sha256 %s, expected %s): refusing to restore it",
                        where, hex, rec->sha256);
  }
  /* Verified: make room, then let sandboxd check and extract. */
  uint64_t t0 = sbx_now_ns();
  log_debug("snapshot: sent and checked %" PRIu64 " bytes in %.3f s", off,
            (double)(t0 - prog.start_ns) / 1e9);
  if (r == 0)
    r = clear_dir(sb->client, ".", &ex, 0, e);
  uint64_t t1 = sbx_now_ns();
  if (r == 0)
    r = sbx_archive_import_finish(sb->client, handle, &reply, e);
  log_debug("snapshot: cleared in %.3f s, extracted in %.3f s",
            (double)(t1 - t0) / 1e9, (double)(sbx_now_ns() - t1) / 1e9);
  if (r == 0) {
    res->members = reply->archive_import_finish->members;
    res->extracted_bytes = reply->archive_import_finish->extracted_bytes;
    sbx_client_reply_free(reply);
  }
  excludes_free(&ex);
  struct sbx_error ignored = {0};
  if (sbx_archive_close(sb->client, handle, &ignored) < 0)
    log_debug("snapshot: closing import %016" PRIx64 ": %s", handle,
              ignored.msg);
  if (r < 0)
    return r;
  progress_report(&prog, off, res->members, true);
  return 0;
}

/* ---- exists and prune ---- */

int snapshot_exists(const struct snapshot_spec *spec,
                    const struct snapshot_record *rec, bool *exists,
                    struct sbx_error *e) {
  *exists = false;
  if (rec->type == SNAPSHOT_NONE)
    return 0;
  if (rec->type == SNAPSHOT_LOCAL) {
    if (!rec->location)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "the snapshot record has no location");
    struct stat st;
    if (lstat(rec->location, &st) == 0) {
      *exists = S_ISREG(st.st_mode);
      return 0;
    }
    if (errno == ENOENT)
      return 0;
    return sbx_error_set(e, SBX_OK, errno, "cannot stat \"%s\": %s",
                         rec->location, strerror(errno));
  }
  _cleanup_free_ char *url = NULL;
  int r = restore_url(spec, rec, &url, e);
  if (r < 0)
    return r;
  struct http_request req = {
      .timeout_ms = HTTP_CONNECT_MS * 2,
      .method = "HEAD",
  };
  struct http_response resp = {0};
  struct remote rm;
  r = remote_send(spec, url, &req, &rm, &resp, e);
  if (r == 0 && resp.status >= 200 && resp.status <= 299)
    *exists = true;
  else if (r == 0 && resp.status != 404)
    r = http_status_error(&resp, rm.shown, &rm.a, e);
  http_response_clear(&resp);
  remote_clear(&rm);
  return r;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* A snapshot ("x.tar.zst", "x.tar") or a save's leftover (".x.tar.zst.*"). */
static bool prunable(const char *name) {
  if (name[0] == '.')
    return strstr(name, ".tar.") != NULL || ends_with(name, ".tar");
  return ends_with(name, ".tar.zst") || ends_with(name, ".tar");
}

int snapshot_prune(const char *base_dir, unsigned max_age_days,
                   unsigned *removed, struct sbx_error *e) {
  if (removed)
    *removed = 0;
  _cleanup_free_ char *def = NULL;
  if (!base_dir) {
    int r = snapshot_default_base_dir(&def, e);
    if (r < 0)
      return r;
    base_dir = def;
  }
  if (max_age_days == 0)
    max_age_days = SNAPSHOT_PRUNE_DAYS;
  int dfd = open(base_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT)
      return 0;
    return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %s", base_dir,
                         strerror(errno));
  }
  DIR *dir = fdopendir(dfd);
  if (!dir) {
    int err = errno;
    (void)close(dfd);
    return sbx_error_set(e, SBX_OK, err, "cannot read \"%s\": %s", base_dir,
                         strerror(err));
  }
  time_t cutoff = time(NULL) - (time_t)max_age_days * 86400;
  int r = 0;
  struct dirent *de;
  while ((de = readdir(dir))) {
    if (!prunable(de->d_name))
      continue;
    struct stat st;
    if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISREG(st.st_mode) || st.st_mtime >= cutoff)
      continue;
    if (unlinkat(dfd, de->d_name, 0) < 0) {
      if (errno != ENOENT && r == 0)
        r = sbx_error_set(e, SBX_OK, errno, "cannot remove \"%s/%s\": %s",
                          base_dir, de->d_name, strerror(errno));
      continue;
    }
    if (removed)
      (*removed)++;
  }
  (void)closedir(dir);
  return r;
}
