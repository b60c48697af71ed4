/* The remote store: plain HTTP, PUT of the archive, GET into a temporary
 * file and HEAD, with the bearer token from the environment at each use and
 * URLs shown without credentials. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/net/http.h"
#include "controller/snapshot/snapshot_internal.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

#define HTTP_CONNECT_MS 30000
#define HTTP_STALL_MS 60000
#define BODY_SHOWN 200 /* bytes of an error page quoted in messages */

/* The URL for SESSION_ID: SPEC_URL itself, or with the file name appended
 * when it is a prefix (no query, ends in '/'). */
static int remote_url(const char *spec_url, const char *file, char **out,
                      struct sbx_error *e) {
  size_t n = strlen(spec_url);
  bool prefix = n > 0 && spec_url[n - 1] == '/' && !strchr(spec_url, '?');
  *out = prefix ? snapshot_join3(spec_url, file, "") : strdup(spec_url);
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

/* The bearer token of a request, from the environment at each use. */
struct auth {
  const char *env; /* the variable's name, for messages */
  char *line;      /* "Authorization: Bearer ..." or NULL */
  const char *headers[2];
};

/* Reads SPEC's token variable (default SNAPSHOT_TOKEN_ENV) into A: no
 * header when it is unset or empty. */
static int auth_load(struct auth *a, const struct snapshot_spec *spec,
                     struct sbx_error *e) {
  *a = (struct auth){0};
  a->env = spec && spec->token_env ? spec->token_env : SNAPSHOT_TOKEN_ENV;
  const char *tok = getenv(a->env);
  if (tok && tok[0]) {
    if (strpbrk(tok, "\r\n"))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "$%s holds a line break", a->env);
    a->line = snapshot_join3("Authorization: Bearer ", tok, "");
    if (!a->line)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    a->headers[0] = a->line;
  }
  return 0;
}

/* Wipes the token from memory and frees it. */
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

/* Frees what remote_send filled in RM. */
static void remote_clear(struct remote *rm) {
  free(rm->shown);
  auth_clear(&rm->a);
}

/* The PUT body: the next piece of the export, hashed and reported. */
static int put_read(void *arg, char *buf, size_t max, size_t *got) {
  struct snapshot_saver *s = arg;
  const uint8_t *data = NULL;
  size_t len = 0;
  int r = snapshot_export_next(&s->ex, max, &data, &len, &s->err);
  if (r < 0)
    return r;
  memcpy(buf, data, len);
  sbx_sha256_update(&s->sha, data, len);
  *got = len;
  snapshot_meter_report(&s->prog, s->ex.off, 0, false);
  return 0;
}

int snapshot_remote_save(const struct snapshot_spec *spec,
                         struct snapshot_saver *s, const char *file,
                         struct snapshot_record *out, struct sbx_error *e) {
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

/* An unlinked temporary file in $TMPDIR (or /tmp) for a download. */
static int temp_file(struct sbx_error *e) {
  const char *dir = getenv("TMPDIR");
  if (!dir || dir[0] != '/')
    dir = "/tmp";
  int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0)
    return fd;
  _cleanup_free_ char *tmpl = snapshot_join3(dir, "/sbx-snapshot-XXXXXX", "");
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

/* A download in progress into a temporary file. */
struct dl {
  int fd;
  uint64_t got, max;
  struct sbx_sha256 *sha;
  struct snapshot_meter *prog;
  struct sbx_error err;
};

/* The GET body: written to the file and hashed, within the input limit. */
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
  snapshot_meter_report(d->prog, d->got, 0, false);
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
int snapshot_remote_download(const struct snapshot_spec *spec,
                             const struct snapshot_record *rec,
                             uint64_t max_input, struct sbx_sha256 *sha,
                             struct snapshot_meter *prog, struct sbx_error *e) {
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
  snapshot_meter_report(prog, d.got, 0, true);
  return d.fd;
}

int snapshot_remote_exists(const struct snapshot_spec *spec,
                           const struct snapshot_record *rec, bool *exists,
                           struct sbx_error *e) {
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
