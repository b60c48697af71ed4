/* libFuzzer target for the apply_patch engine: parses the input and, when it
 * parses, applies every Update op to a small fixed file (LF and CRLF) and to
 * the input itself. Checks what callers rely on: results NUL-terminated at
 * their length, messages NUL-terminated, nothing kept on failure. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shared/errors.h"
#include "shared/patch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char lf_file[] = "class A:\n"
                              "    def f():\n"
                              "        return 1\n"
                              "\n"
                              "class B:\n"
                              "    def f():\n"
                              "        return \xe2\x80\x9c"
                              "1\xe2\x80\x9d\n"
                              "x - y\n"
                              "end";
static const char crlf_file[] = "a\r\nb\r\n\r\nc \r\nb\r\n";

/* Applies OP to IN and checks the result's shape. */
static void apply(const struct sbx_patch_op *op, const char *in, size_t len) {
  struct sbx_error e = {0};
  char *out = NULL;
  size_t outlen = 0;
  int r = sbx_patch_apply_update(
      op, in, len, len % 2 ? SBX_PATCH_EOL_SDK : SBX_PATCH_EOL_CODEX, &out,
      &outlen, &e);
  if (r == 0) {
    if (!out || out[outlen] != '\0')
      abort();
    if (op->nhunks == 0 && (outlen != len || (len && memcmp(out, in, len))))
      abort(); /* a pure rename keeps the bytes */
  } else if (out || outlen || !memchr(e.msg, '\0', sizeof(e.msg))) {
    abort();
  }
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *text = (const char *)data;
  struct sbx_patch *p = NULL;
  struct sbx_error e = {0};

  if (sbx_patch_parse(text, size, &p, &e) < 0) {
    if (p || !memchr(e.msg, '\0', sizeof(e.msg)))
      abort();
    return 0;
  }
  for (size_t i = 0; i < p->nops; i++) {
    const struct sbx_patch_op *op = &p->ops[i];
    if (!op->path)
      abort();
    if (op->kind == SBX_PATCH_ADD &&
        (!op->content || strlen(op->content) != op->content_len))
      abort();
    if (op->kind != SBX_PATCH_UPDATE)
      continue;
    apply(op, lf_file, sizeof(lf_file) - 1);
    apply(op, crlf_file, sizeof(crlf_file) - 1);
    apply(op, text, size);
    apply(op, NULL, 0);
  }
  sbx_patch_free(p);
  return 0;
}
