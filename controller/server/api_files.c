/* Files of an API sandbox: PUT (written beside the target in chunks and
 * renamed over it, so a reader never sees half a file), GET (streamed in
 * chunks as sandboxd reads them), DELETE; and POST …/patch, a `*** Begin
 * Patch` text applied all files or none. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/sandbox/lifecycle.h"
#include "controller/server/server_internal.h"
#include "shared/cleanup.h"
#include "shared/client.h"
#include "shared/rand.h"
#include "shared/utf8.h"

#define CHUNK ((size_t)4 << 20)
#define PATH_MAX_BYTES 4096

/* The temporary name beside PATH: its directory, ".NAME.sbx-upload-HEX". */
static int upload_name(const char *path, char *out, size_t n) {
  char hex[17];
  if (sbx_random_hex(hex, 8) < 0)
    return -EIO;
  const char *slash = strrchr(path, '/');
  int k = slash ? snprintf(out, n, "%.*s.%s.sbx-upload-%s",
                           (int)(slash - path + 1), path, slash + 1, hex)
                : snprintf(out, n, ".%s.sbx-upload-%s", path, hex);
  return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

/* Writes LEN bytes of DATA to TMP in chunks. */
static int write_chunks(struct sbx_client *c, const char *tmp, const char *data,
                        size_t len, struct sbx_error *e) {
  size_t off = 0;
  do {
    Sbx__V1__FileWrite w;
    sbx__v1__file_write__init(&w);
    w.path = (char *)tmp;
    w.mode =
        off ? SBX__V1__WRITE_MODE__WRITE_AT : SBX__V1__WRITE_MODE__WRITE_CREATE;
    w.offset = off;
    w.parents = true;
    size_t n = len - off < CHUNK ? len - off : CHUNK;
    w.data.data = (uint8_t *)(data + off);
    w.data.len = n;
    Sbx__V1__Response *resp = NULL;
    int r = sbx_file_write(c, &w, &resp, e);
    sbx_client_reply_free(resp);
    if (r < 0)
      return r;
    off += n;
  } while (off < len);
  return 0;
}

/* A path (or a text naming one) as JSON: bytes that are not UTF-8 (a file
 * name may hold any) become U+FFFD, as JSON text must be UTF-8 (new). */
static json_t *path_json(const char *path) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, PATH_MAX_BYTES * 3 + 1);
  if (sbx_utf8_sanitize(path, strlen(path), &b) < 0 ||
      sbx_buf_append(&b, "", 1) < 0)
    return NULL;
  return json_string(b.data);
}

void api_files_put(struct api *a) {
  struct sb_use u;
  if (api_sandbox_attach(a, &u) < 0)
    return;
  const char *path = a->param[1];
  char tmp[PATH_MAX_BYTES + 64];
  struct sbx_error e = {0};
  size_t len = 0;
  const char *data = http_req_body(a->r, &len);
  int r = upload_name(path, tmp, sizeof(tmp));
  if (r < 0)
    r = sbx_error_set(&e, SBX_INVALID_ARGUMENT, -r, "path too long");
  if (r == 0 && (r = write_chunks(u.sb->client, tmp, data, len, &e)) == 0)
    r = sbx_file_rename(u.sb->client, tmp, path, true, &e);
  if (r < 0) {
    struct sbx_error ignore = {0};
    (void)sbx_file_remove(u.sb->client, tmp, false, true, &ignore);
    (void)api_fail(a, &e, r);
  } else {
    (void)api_reply(a, 200,
                    json_pack("{s:o, s:I}", "path", path_json(path), "size",
                              (json_int_t)len));
  }
  attached_put(&u, r);
}

struct file_stream {
  struct sb_use u;
  char *path;
  uint64_t offset;
  Sbx__V1__Response *resp; /* the chunk being handed out */
  size_t used;
  bool eof;
  int err; /* the last read's */
};

static void file_stream_free(void *arg) {
  struct file_stream *f = arg;
  sbx_client_reply_free(f->resp);
  attached_put(&f->u, f->err);
  free(f->path);
  free(f);
}

/* Reads the next chunk into F->resp. */
static int read_chunk(struct file_stream *f, struct sbx_error *e) {
  sbx_client_reply_free(f->resp);
  f->resp = NULL;
  f->used = 0;
  Sbx__V1__FileRead x;
  sbx__v1__file_read__init(&x);
  x.path = f->path;
  x.offset = f->offset;
  x.length = (uint32_t)CHUNK;
  int r = sbx_file_read(f->u.sb->client, &x, &f->resp, e);
  if (r < 0)
    return r;
  f->offset += f->resp->file_read->data.len;
  f->eof = f->resp->file_read->eof || f->resp->file_read->data.len == 0;
  return 0;
}

static ssize_t file_stream_read(void *arg, char *buf, size_t max,
                                const struct http_stream *st) {
  struct file_stream *f = arg;
  for (;;) {
    ProtobufCBinaryData *d = &f->resp->file_read->data;
    if (f->used < d->len) {
      size_t n = d->len - f->used < max ? d->len - f->used : max;
      memcpy(buf, d->data + f->used, n);
      f->used += n;
      return (ssize_t)n;
    }
    if (f->eof || http_stream_over(st))
      return 0;
    struct sbx_error e = {0};
    if (read_chunk(f, &e) < 0)
      return -EIO; /* the client sees a cut body */
  }
}

void api_files_get(struct api *a) {
  struct file_stream *f = calloc(1, sizeof(*f));
  if (!f || !(f->path = strdup(a->param[1]))) {
    free(f);
    return (void)api_error(a, 500, "internal", "out of memory");
  }
  if (api_sandbox_attach(a, &f->u) < 0) {
    free(f->path);
    free(f);
    return;
  }
  struct sbx_error e = {0};
  int r = read_chunk(f, &e);
  if (r < 0) {
    (void)api_fail(a, &e, r);
    file_stream_free(f);
    return;
  }
  char size[32];
  (void)snprintf(size, sizeof(size), "%llu",
                 (unsigned long long)f->resp->file_read->size);
  (void)http_add_header(a->r, "Sbx-File-Size", size);
  (void)http_reply_stream(a->r, 200, "application/octet-stream",
                          file_stream_read, f, file_stream_free);
}

void api_files_delete(struct api *a) {
  const char *rec_q = http_req_query(a->r, "recursive");
  if (rec_q && strcmp(rec_q, "true") != 0 && strcmp(rec_q, "false") != 0)
    return (void)api_error(a, 400, "invalid_request",
                           "\"recursive\" is true or false");
  struct sb_use u;
  if (api_sandbox_attach(a, &u) < 0)
    return;
  struct sbx_error e = {0};
  int r = sbx_file_remove(u.sb->client, a->param[1],
                          rec_q && strcmp(rec_q, "true") == 0, false, &e);
  if (r < 0)
    (void)api_fail(a, &e, r);
  else
    (void)http_reply(a->r, 204, NULL, "", 0);
  attached_put(&u, r);
}

void api_sandboxes_patch(struct api *a) {
  size_t len = 0;
  const char *text = http_req_body(a->r, &len);
  if (len == 0 || strlen(text) != len)
    return (void)api_error(a, 400, "invalid_request",
                           "the body is the patch text (\"*** Begin "
                           "Patch\" ... \"*** End Patch\")");
  struct sb_use u;
  if (api_sandbox_attach(a, &u) < 0)
    return;
  Sbx__V1__Response *resp = NULL;
  struct sbx_error e = {0};
  int r = sbx_patch_apply(u.sb->client, text, NULL, false, &resp, &e);
  if (r < 0) {
    (void)api_fail(a, &e, r);
  } else {
    json_t *res = json_array();
    Sbx__V1__PatchApplyReply *p = resp->patch_apply;
    for (size_t i = 0; res && i < p->n_results; i++)
      (void)json_array_append_new(
          res,
          json_pack("{s:o, s:s, s:o}", "path", path_json(p->results[i]->path),
                    "action", p->results[i]->action, "summary",
                    path_json(p->results[i]->summary)));
    (void)api_reply(a, 200, json_pack("{s:o*}", "results", res));
  }
  sbx_client_reply_free(resp);
  attached_put(&u, r);
}
