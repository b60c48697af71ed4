/* sbx --server URL sandbox exec -i, shell and cp: what needs this
 * process's stdin or files, through the server's sandboxes API. A
 * command's stdin is copied to .../stdin as it is read and closed at its
 * end; its output is read by offset as it comes (remote_sandbox.c); cp
 * moves one regular file with PUT and GET .../files/PATH. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "controller/cli/cli_internal.h"
#include "controller/cli/remote_internal.h"
#include "controller/net/http.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

#define STDIN_CHUNK 65536
#define FILE_MAX ((unsigned long long)1 << 34) /* what cp moves at most */

/* Percent-encodes PATH for a URL, keeping '/' and unreserved bytes. */
static int encode_path(const char *path, char *out, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    bool keep = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                (*p >= '0' && *p <= '9') || strchr("-._~/", *p);
    if (k + (keep ? 1 : 3) >= n)
      return -ENAMETOOLONG;
    if (keep) {
      out[k++] = (char)*p;
    } else {
      out[k++] = '%';
      out[k++] = hex[*p >> 4];
      out[k++] = hex[*p & 15];
    }
  }
  out[k] = '\0';
  return 0;
}

/* Copies this process's stdin to the exec's as it is read, and closes it
 * at its end; stops when told. */
struct feeder {
  struct remote *rm;
  char url[URL_MAX];
  atomic_bool stop;
  int rc;
};

static int post_stdin(struct feeder *f, struct http_client *http,
                      const char *data, size_t len, bool close_in) {
  char url[URL_MAX + 16];
  (void)snprintf(url, sizeof(url), "%s%s", f->url, close_in ? "?close=1" : "");
  const char *headers[] = {f->rm->auth[0] ? f->rm->auth : "Accept: */*",
                           "Content-Type: application/octet-stream", NULL};
  struct http_request req = {.url = url,
                             .method = "POST",
                             .body = data,
                             .body_len = len,
                             .headers = headers,
                             .timeout_ms = 60000,
                             .connect_timeout_ms = 10000};
  struct http_response resp;
  struct sbx_error e = {0};
  int r = http_send(http, &req, &resp, &e);
  if (r == 0 && resp.status != 200 && !atomic_load(&f->stop))
    r = -EIO; /* the command has ended, or its stdin is closed */
  if (r == 0 || r == -EIO)
    http_response_clear(&resp);
  return r;
}

static void *feeder_main(void *arg) {
  struct feeder *f = arg;
  struct http_client *http = NULL;
  struct sbx_error e = {0};
  if (http_client_new(&http, &e) < 0) {
    f->rc = -ENOMEM;
    return NULL;
  }
  char *buf = malloc(STDIN_CHUNK);
  while (buf && !atomic_load(&f->stop)) {
    struct pollfd p = {.fd = 0, .events = POLLIN};
    int k = poll(&p, 1, 100);
    if (k < 0 && errno != EINTR)
      break;
    if (k <= 0)
      continue;
    ssize_t n = read(0, buf, STDIN_CHUNK);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      (void)post_stdin(f, http, "", 0, true);
      break;
    }
    if (post_stdin(f, http, buf, (size_t)n, false) < 0)
      break;
  }
  free(buf);
  http_client_free(http);
  return NULL;
}

static struct termios saved_tio;
static bool tio_saved;

static void restore_tty(void) {
  if (tio_saved)
    (void)tcsetattr(0, TCSADRAIN, &saved_tio);
  tio_saved = false;
}

int remote_attached(struct remote *rm, const char *sid, json_t *body, bool feed,
                    bool raw) {
  char path[512];
  (void)snprintf(path, sizeof(path), "/v1/sandboxes/%s/execs", sid);
  long status = 0;
  _cleanup_json_ json_t *out = NULL;
  if (remote_call(rm, "POST", path, body, &status, &out) < 0)
    return 1;
  if (!remote_expect(out, status, 201, "sandbox exec"))
    return status == 400 ? 2 : status == 404 ? 127 : 1;
  const char *x = json_string_value(json_object_get(out, "exec_id"));
  struct feeder f = {.rm = rm};
  (void)snprintf(f.url, sizeof(f.url), "%s/v1/sandboxes/%s/execs/%s/stdin",
                 rm->server, sid, x);
  pthread_t t;
  bool fed = feed && pthread_create(&t, NULL, feeder_main, &f) == 0;
  if (raw && isatty(0) && tcgetattr(0, &saved_tio) == 0) {
    struct termios r = saved_tio;
    cfmakeraw(&r);
    if (tcsetattr(0, TCSADRAIN, &r) == 0) {
      tio_saved = true;
      (void)atexit(restore_tty);
    }
  }
  int code = remote_copy_all(rm, sid, x);
  restore_tty();
  atomic_store(&f.stop, true);
  if (fed)
    (void)pthread_join(t, NULL);
  return code;
}

int remote_shell(struct remote *rm, int argc, char **argv) {
  const char *cwd = NULL;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if ((!strcmp(argv[i], "-w") || !strcmp(argv[i], "--workdir")) &&
        i + 1 < argc)
      cwd = argv[++i];
    else
      break;
  }
  if (argc - i != 1 || argv[i][0] == '-')
    return remote_usage("sbx --server URL sandbox shell [-w DIR] ID (no "
                        "--user or --shell through a server)");
  bool tty = isatty(0) != 0;
  _cleanup_json_ json_t *body =
      json_pack("{s:[s, s, s], s:b, s:b, s:i}", "cmd", "/bin/sh", "-c",
                "if command -v bash >/dev/null 2>&1; then exec bash -l; "
                "else exec sh -l; fi",
                "tty", tty, "stdin", true, "hold_s", CLI_EXEC_HOLD_S);
  if (body && cwd)
    (void)json_object_set_new(body, "cwd", json_string(cwd));
  return body ? remote_attached(rm, argv[i], body, true, tty) : 1;
}

#define ID_MAX 128

/* ID:PATH: splits ARG into ID and PATH; false when it is a local path (no
 * colon, or a slash before it). */
static bool remote_path(const char *arg, char id[ID_MAX], const char **path) {
  const char *colon = strchr(arg, ':');
  const char *slash = strchr(arg, '/');
  if (!colon || colon == arg || (slash && slash < colon) ||
      (size_t)(colon - arg) >= ID_MAX)
    return false;
  (void)snprintf(id, ID_MAX, "%.*s", (int)(colon - arg), arg);
  *path = colon + 1;
  return true;
}

static int upload_read(void *arg, char *buf, size_t max, size_t *got) {
  ssize_t r;
  do
    r = read(*(int *)arg, buf, max);
  while (r < 0 && errno == EINTR);
  if (r < 0)
    return -errno;
  *got = (size_t)r;
  return 0;
}

static int cp_up(struct remote *rm, const char *local, const char *id,
                 const char *path) {
  _cleanup_close_ int fd = open(local, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) < 0) {
    fprintf(stderr, "sbx sandbox cp: \"%s\": %s\n", local, strerror(errno));
    return 1;
  }
  if (!S_ISREG(st.st_mode)) {
    fprintf(stderr,
            "sbx sandbox cp: \"%s\" is not a regular file: with --server, cp "
            "copies one file\n",
            local);
    return 2;
  }
  char enc[URL_MAX / 2], url[URL_MAX];
  if (encode_path(path, enc, sizeof(enc)) < 0) {
    fprintf(stderr, "sbx sandbox cp: the path is too long\n");
    return 2;
  }
  (void)snprintf(url, sizeof(url), "%s/v1/sandboxes/%s/files/%s", rm->server,
                 id, enc);
  const char *headers[] = {rm->auth[0] ? rm->auth : "Accept: */*",
                           "Content-Type: application/octet-stream", NULL};
  struct http_request req = {.url = url,
                             .method = "PUT",
                             .headers = headers,
                             .connect_timeout_ms = 10000,
                             .stall_timeout_ms = 60000,
                             .upload = upload_read,
                             .upload_arg = &fd,
                             .upload_len = (unsigned long long)st.st_size};
  long status = 0;
  _cleanup_json_ json_t *b = NULL;
  if (remote_send(rm, &req, "sbx sandbox cp", &status, &b) < 0)
    return 1;
  if (status != 200 && status != 201 && status != 204) {
    fprintf(stderr, "sbx sandbox cp: %s\n", remote_message(b, status));
    return status == 404 || status == 400 ? 2 : 1;
  }
  return 0;
}

static int write_out(void *arg, const char *data, size_t len) {
  return sbx_write_all(*(int *)arg, data, len);
}

static int cp_down(struct remote *rm, const char *id, const char *path,
                   const char *local) {
  char enc[URL_MAX / 2], url[URL_MAX], tmp[4200];
  struct stat st;
  if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
    fprintf(stderr,
            "sbx sandbox cp: \"%s\" is a directory: with --server, cp "
            "copies one file to a file's path\n",
            local);
    return 2;
  }
  if (encode_path(path, enc, sizeof(enc)) < 0 ||
      snprintf(tmp, sizeof(tmp), "%s.sbx-cp-XXXXXX", local) >=
          (int)sizeof(tmp)) {
    fprintf(stderr, "sbx sandbox cp: the path is too long\n");
    return 2;
  }
  (void)snprintf(url, sizeof(url), "%s/v1/sandboxes/%s/files/%s", rm->server,
                 id, enc);
  _cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "sbx sandbox cp: \"%s\": %s\n", local, strerror(errno));
    return 1;
  }
  const char *headers[] = {rm->auth[0] ? rm->auth : "Accept: */*", NULL};
  struct http_request req = {.url = url,
                             .method = "GET",
                             .headers = headers,
                             .connect_timeout_ms = 10000,
                             .stall_timeout_ms = 60000,
                             .max_response_bytes = FILE_MAX,
                             .stream_body = true,
                             .on_data = write_out,
                             .data_arg = &fd};
  struct http_response resp;
  struct sbx_error e = {0};
  int r = http_send(rm->http, &req, &resp, &e);
  long status = r == 0 ? resp.status : 0;
  json_error_t je;
  _cleanup_json_ json_t *b = r == 0 && status != 200
                                 ? json_loadb(resp.body, resp.body_len, 0, &je)
                                 : NULL;
  if (r == 0)
    http_response_clear(&resp);
  if (r == 0 && status == 200 && fsync(fd) == 0 && rename(tmp, local) == 0)
    return 0;
  (void)unlink(tmp);
  if (r < 0)
    fprintf(stderr, "sbx sandbox cp: %s\n", e.msg);
  else if (status != 200)
    fprintf(stderr, "sbx sandbox cp: %s\n", remote_message(b, status));
  else
    fprintf(stderr, "sbx sandbox cp: \"%s\": %s\n", local, strerror(errno));
  return status == 404 || status == 400 ? 2 : 1;
}

int remote_cp(struct remote *rm, int argc, char **argv) {
  if (argc != 3)
    return remote_usage("sbx --server URL sandbox cp SRC DST (one of them "
                        "ID:PATH; one regular file)");
  char id[ID_MAX], other[ID_MAX];
  const char *path = NULL, *unused = NULL;
  bool from = remote_path(argv[1], id, &path);
  bool to = remote_path(argv[2], from ? other : id, from ? &unused : &path);
  if (from && !to)
    return cp_down(rm, id, path, argv[2]);
  if (to && !from)
    return cp_up(rm, argv[1], id, path);
  return remote_usage("sbx --server URL sandbox cp SRC DST: exactly one of "
                      "them is ID:PATH");
}

#define PATCH_MAX ((size_t)64 << 20)

/* sbx --server URL sandbox apply-patch [--json] ID < PATCH: the patch read
 * from stdin, applied by the server, every file or none. */
int remote_apply_patch(struct remote *rm, int argc, char **argv) {
  bool json = argc == 3 && strcmp(argv[1], "--json") == 0;
  if (argc != 2 + json || argv[argc - 1][0] == '-')
    return remote_usage("sbx --server URL sandbox apply-patch [--json] ID < "
                        "PATCH (no --dir through a server)");
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, PATCH_MAX);
  int rr = cli_read_stdin(&b);
  if (rr == -E2BIG)
    return remote_usage("sbx sandbox apply-patch: the patch is larger than "
                        "64 MiB");
  if (rr < 0) {
    fprintf(stderr, "sbx sandbox apply-patch: cannot read stdin: %s\n",
            strerror(-rr));
    return 1;
  }
  if (b.len == 0)
    return remote_usage("sbx sandbox apply-patch: no patch on stdin");
  char url[URL_MAX];
  (void)snprintf(url, sizeof(url), "%s/v1/sandboxes/%s/patch", rm->server,
                 argv[argc - 1]);
  const char *headers[] = {rm->auth[0] ? rm->auth : "Accept: */*",
                           "Content-Type: text/plain", NULL};
  struct http_request req = {.url = url,
                             .method = "POST",
                             .body = b.data,
                             .body_len = b.len,
                             .headers = headers,
                             .timeout_ms = 300000,
                             .connect_timeout_ms = 10000};
  long status = 0;
  _cleanup_json_ json_t *out = NULL;
  if (remote_send(rm, &req, "sbx sandbox apply-patch", &status, &out) < 0)
    return 1;
  if (!remote_expect(out, status, 200, "sandbox apply-patch"))
    return status == 400 || status == 404 || status == 422 ? 2 : 1;
  json_t *res = json_object_get(out, "results");
  if (json) {
    (void)json_dumpf(res, stdout, JSON_INDENT(2));
    printf("\n");
  } else {
    size_t i;
    json_t *it;
    json_array_foreach(res, i, it) {
      printf("%s\n", json_string_value(json_object_get(it, "summary")));
    }
  }
  return fflush(stdout) != 0;
}
