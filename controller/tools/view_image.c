/* The view_image tool: an image file of the sandbox as a data URL. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/telemetry/trace.h"
#include "controller/tools/tools_internal.h"
#include "shared/cleanup.h"
#include "shared/encode.h"

/* The MIME type of the image in P (N bytes) by its magic bytes, SVG also
 * by PATH's extension or its start; NULL when not an image. */
static const char *sniff_image(const uint8_t *p, size_t n, const char *path) {
  if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0)
    return "image/png";
  if (n >= 3 && memcmp(p, "\xff\xd8\xff", 3) == 0)
    return "image/jpeg";
  if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0))
    return "image/gif";
  if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
    return "image/webp";
  if (n >= 2 && memcmp(p, "BM", 2) == 0)
    return "image/bmp";
  if (n >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0 ||
                 memcmp(p, "II+\0", 4) == 0 || memcmp(p, "MM\0+", 4) == 0))
    return "image/tiff";
  size_t pl = strlen(path);
  if ((pl >= 4 && strcmp(path + pl - 4, ".svg") == 0) ||
      (pl >= 5 && strcmp(path + pl - 5, ".svgz") == 0))
    return "image/svg+xml";
  /* SVG by content: the first 512 bytes, trimmed and lowercased. */
  char head[513];
  size_t i = 0, k = 0;
  while (i < n && i < 512 &&
         (p[i] == ' ' || p[i] == '\n' || p[i] == '\r' || p[i] == '\t'))
    i++;
  for (; i < n && i < 512; i++)
    head[k++] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] + 32 : p[i]);
  head[k] = '\0';
  if (strncmp(head, "<svg", 4) == 0 ||
      (strncmp(head, "<?xml", 5) == 0 && strstr(head, "<svg")))
    return "image/svg+xml";
  return NULL;
}

/* The ways view_image fails, each with the SDK's text. */
enum image_err {
  IMG_NOT_FOUND,
  IMG_NOT_FILE,
  IMG_TOO_BIG,
  IMG_FORMAT,
  IMG_OTHER
};

/* The SDK's view_image error texts; PATH is the path as the model gave it. */
static json_t *image_error(struct tool_op *op, enum image_err kind,
                           const char *path, const char *detail) {
  char msg[1200];
  switch (kind) {
  case IMG_NOT_FOUND:
    (void)snprintf(msg, sizeof(msg), "image path `%s` was not found", path);
    break;
  case IMG_NOT_FILE:
    (void)snprintf(msg, sizeof(msg), "image path `%s` is not a file", path);
    break;
  case IMG_TOO_BIG:
    (void)snprintf(msg, sizeof(msg),
                   "image path `%s` exceeded the allowed size of 10MB; resize "
                   "or compress the image and try again",
                   path);
    break;
  case IMG_FORMAT:
    (void)snprintf(msg, sizeof(msg),
                   "image path `%s` is not a supported image file", path);
    break;
  case IMG_OTHER:
    (void)snprintf(msg, sizeof(msg), "unable to read image at `%s`: %s", path,
                   detail);
    break;
  }
  return tools_op_fail(op, json_string(msg), "%s", msg);
}

/* view_image: reads the image at PATH (at most TOOLS_VIEW_IMAGE_MAX bytes)
 * and returns it as a data URL, as input_image content or, for chat models,
 * as text. */
json_t *tools_view_image(struct toolbox *t, json_t *args, struct tool_op *op) {
  const char *path;
  if (!tools_opt_str(args, "path", &path) || !path)
    return tools_op_invalid(op);
  trace_set_str(op->sp, "sandbox.path", path);
  _cleanup_free_ char *p = tools_anchor(t, path);
  if (!p)
    return NULL;
  struct sbx_error e = {0};
  Sbx__V1__Response *r = NULL;
  int ret = sbx_file_stat(t->sb->client, p, &r, &e);
  if (ret < 0) {
    if (e.code == SBX_NOT_FOUND)
      return image_error(op, IMG_NOT_FOUND, path, NULL);
    return image_error(op, IMG_OTHER, path,
                       e.code == SBX_PERMISSION_DENIED
                           ? "SandboxInvalidManifestPathError"
                           : "SandboxError");
  }
  Sbx__V1__FileType type = r->file_stat->type;
  uint64_t size = r->file_stat->size;
  sbx_client_reply_free(r);
  if (type == SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK) {
    /* The image may sit behind a link inside the workspace; reading
     * follows it beneath the root. */
    type = SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR;
    size = 0;
  }
  if (type != SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR)
    return image_error(op, IMG_NOT_FILE, path, NULL);
  if (size > TOOLS_VIEW_IMAGE_MAX)
    return image_error(op, IMG_TOO_BIG, path, NULL);
  _cleanup_buf_ struct sbx_buf data;
  sbx_buf_init(&data, TOOLS_VIEW_IMAGE_MAX + 1);
  for (;;) {
    Sbx__V1__FileRead fr = SBX__V1__FILE_READ__INIT;
    fr.path = p;
    fr.offset = data.len;
    fr.length = 4u << 20;
    ret = sbx_file_read(t->sb->client, &fr, &r, &e);
    if (ret < 0) {
      if (e.code == SBX_NOT_FOUND)
        return image_error(op, IMG_NOT_FOUND, path, NULL);
      if (e.code == SBX_INVALID_ARGUMENT)
        return image_error(op, IMG_NOT_FILE, path, NULL);
      return image_error(op, IMG_OTHER, path, "SandboxError");
    }
    Sbx__V1__FileReadReply *x = r->file_read;
    bool eof = x->eof || x->data.len == 0;
    ret = sbx_buf_append(&data, x->data.data, x->data.len);
    sbx_client_reply_free(r);
    if (ret == -E2BIG || data.len > TOOLS_VIEW_IMAGE_MAX)
      return image_error(op, IMG_TOO_BIG, path, NULL);
    if (ret < 0)
      return NULL;
    if (eof)
      break;
  }
  const char *mime = sniff_image((const uint8_t *)(data.data ? data.data : ""),
                                 data.len, path);
  if (!mime)
    return image_error(op, IMG_FORMAT, path, NULL);
  trace_set_str(op->sp, "sandbox.view_image.mime_type", mime);
  trace_set_int(op->sp, "sandbox.view_image.bytes", (int64_t)data.len);
  size_t prefix = strlen("data:;base64,") + strlen(mime);
  _cleanup_free_ char *url =
      malloc(prefix + sbx_base64_encoded_size(data.len) + 1);
  if (!url)
    return NULL;
  /* PREFIX + 1 bytes hold it exactly: it cannot be cut. */
  (void)snprintf(url, prefix + 1, "data:%s;base64,", mime);
  sbx_base64_encode(data.data ? data.data : "", data.len, url + prefix);
  if (t->text_images)
    return json_string(url);
  return json_pack("[{s:s, s:s}]", "type", "input_image", "image_url", url);
}
