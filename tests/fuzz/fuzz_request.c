/* Fuzzes sandboxd's request decoding and dispatch: any bytes are unpacked
 * as a Request and, when they decode, handed to the handler the server
 * would run, against a scratch workspace. Requests that would start
 * processes, create users or stop the daemon are skipped. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd.pb-c.h"
#include "sandboxd/server/dispatch.h"
#include "tests/fuzz/fuzz_tmp.h"

static struct sandboxd d;
static int ready;
static char root[256];

/* Removes the scratch workspace at exit, with what the requests wrote. */
static void teardown(void) {
  fuzz_tmpdir_remove(root);
}

/* The scratch workspace: a file, a directory and a symlink out of it. */
static void setup(void) {
  fuzz_tmpdir(root, sizeof(root), "request");
  (void)atexit(teardown);
  d.root = root;
  d.root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (d.root_fd < 0)
    abort();
  sandboxd_limits_default(&d.limits);
  d.limits.max_read_bytes = 1u << 16;
  d.limits.archive_max_input_bytes = 1u << 20;
  d.limits.archive_max_extracted_bytes = 1u << 20;
  d.uid = getuid();
  d.gid = getgid();
  d.is_root = false; /* never chown or create users */
  d.gate_fd = -1;
  d.reaper_fd = -1;
  int fd = openat(d.root_fd, ".", O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)mkdirat(fd, "dir", 0755);
    int f = openat(fd, "dir/file.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f >= 0) {
      (void)!write(f, "hello\nworld\n", 12);
      close(f);
    }
    (void)symlinkat("/etc", fd, "escape");
    close(fd);
  }
  ready = 1;
}

static void done(struct rpc_call *c, int r) {
  (void)c;
  (void)r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ready)
    setup();
  Sbx__V1__Request *req = sbx__v1__request__unpack(NULL, size, data);
  if (!req)
    return 0;
  switch (req->body_case) {
  case SBX__V1__REQUEST__BODY_EXEC_START:
  case SBX__V1__REQUEST__BODY_USERS_ENSURE:
  case SBX__V1__REQUEST__BODY_SHUTDOWN:
  case SBX__V1__REQUEST__BODY_EXEC_READ: /* parks without a process table */
    sbx__v1__request__free_unpacked(req, NULL);
    return 0;
  default:
    break;
  }
  const struct rpc_entry *en = dispatch_lookup(req->body_case);
  if (en) {
    Sbx__V1__Response resp = SBX__V1__RESPONSE__INIT;
    struct rpc_call c = {.d = &d, .req = req, .resp = &resp, .complete = done};
    int r = en->handler(&c);
    if (r == 0) {
      size_t n = sbx__v1__response__get_packed_size(&resp);
      uint8_t *buf = malloc(n ? n : 1);
      if (buf) {
        (void)sbx__v1__response__pack(&resp, buf);
        free(buf);
      }
    }
    sbx_arena_reset(&c.arena);
  }
  sbx__v1__request__free_unpacked(req, NULL);
  return 0;
}
