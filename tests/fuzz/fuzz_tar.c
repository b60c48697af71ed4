/* libFuzzer target for archive import (sandboxd/archive/): the input, after
 * one flags byte, is a tar sent through ArchiveImportStart, Write and
 * Finish into ROOT/dst, in a scratch ROOT that also holds ROOT/outside/
 * (a file the archive must never reach).
 *
 *   bit 0     stage: extract while the archive arrives
 *   bit 1     the destination already holds a file, a directory and
 *             symlinks (one into ROOT/outside)
 *   bit 2     compression AUTO (zstd allowed), else NONE
 *   bit 3     close the transfer without finishing it
 *   bits 4-6  the number of ImportWrite chunks, minus one
 *   bit 7     send the tar as it is; otherwise (unless it is zstd) the
 *             checksum of each header is made right first, so that
 *             mutated headers get read
 *
 * Checks: nothing outside the destination changes; an import refused for
 * its content (INVALID_ARGUMENT, LIMIT_EXCEEDED) or closed unfinished
 * leaves the destination as it was, staging directory included; one that
 * succeeds stays within the limits, holds no device, fifo, socket, setuid
 * or setgid file, and holds every member as the archive has it (read again
 * with libarchive): type, mode, owner, mtime, size and bytes of files, link
 * targets (symbolic links are made as they are, absolute ones too: never
 * followed, they cannot lead a write outside), hard links. Each run has a table
 * of its own and removes the destination afterwards, so runs are independent
 * and bounded (members, input and extracted bytes are limited). */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/archive/transfer.h"
#include "shared/path.h"
#include "tests/fuzz/fuzz_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LIM_MEMBERS 256
#define LIM_INPUT (256u << 10)
#define LIM_EXTRACTED (1u << 20)
#define SIG_DEPTH 6 /* levels a signature looks at: any change shows above */

static struct sandboxd d;
static char root[256];
static uint64_t outside_sig;

/* A tree's signature: the sum of a hash of each entry's path, type, mode,
 * size and link target, so the order entries are met in does not count. */
struct sig {
  uint64_t sum;
  uint64_t n;
  bool bad; /* a device, fifo, socket, or a setuid or setgid file */
};

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    h ^= s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* Adds the entries of the directory DFD (its path PATH) to S, SIG_DEPTH
 * levels down. */
static void sig_dir(int dfd, const char *path, unsigned depth, struct sig *s) {
  int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    if (fd >= 0)
      (void)close(fd);
    s->sum += 0xbad;
    return;
  }
  struct dirent *de;
  while ((de = readdir(dir))) {
    const char *n = de->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
      continue;
    struct stat st;
    if (fstatat(dirfd(dir), n, &st, AT_SYMLINK_NOFOLLOW) < 0)
      abort();
    char p[SBX_PATH_MAX + 512];
    (void)snprintf(p, sizeof(p), "%s/%s", path, n);
    char link[SBX_PATH_MAX] = "";
    if (S_ISLNK(st.st_mode)) {
      ssize_t k = readlinkat(dirfd(dir), n, link, sizeof(link) - 1);
      link[k > 0 ? k : 0] = '\0';
    }
    s->bad |=
        !S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode);
    s->bad |= (st.st_mode & (S_ISUID | S_ISGID)) != 0;
    uint64_t h = fnv(0xcbf29ce484222325ull, p, strlen(p) + 1);
    h = fnv(h, link, strlen(link));
    uint64_t meta[2] = {st.st_mode,
                        S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0};
    s->sum += fnv(h, meta, sizeof(meta));
    s->n++;
    if (S_ISDIR(st.st_mode) && depth < SIG_DEPTH) {
      int sub =
          openat(dirfd(dir), n, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) {
        sig_dir(sub, p, depth + 1, s);
        (void)close(sub);
      } else {
        s->sum += 0xbad;
      }
    }
  }
  (void)closedir(dir);
}

/* The signature of ROOT/NAME. */
static struct sig sig_of(const char *name) {
  struct sig s = {0};
  int fd =
      openat(d.root_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    abort();
  sig_dir(fd, name, 0, &s);
  (void)close(fd);
  return s;
}

/* The value of the tar number field F (N bytes: octal, or base-256 when
 * its first bit is set), at most SIZE_MAX / 2. */
static size_t tar_number(const uint8_t *f, size_t n) {
  size_t v = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned c = i == 0 && (f[0] & 0x80) ? f[0] & 0x7f : f[i];
    if (f[0] & 0x80)
      v = v > SIZE_MAX / 512 ? SIZE_MAX / 2 : (v << 8) | c;
    else if (c >= '0' && c <= '7')
      v = v > SIZE_MAX / 16 ? SIZE_MAX / 2 : (v << 3) | (c - '0');
  }
  return v;
}

/* Walks the uncompressed tar S (N bytes) header by header and writes each
 * header's right checksum, so that a mutated name, size or type is read
 * rather than refused as a broken header. */
static void fix_checksums(uint8_t *s, size_t n) {
  for (size_t off = 0; off + 512 <= n;) {
    uint8_t *h = s + off;
    bool zero = true;
    for (size_t i = 0; i < 512 && zero; i++)
      zero = h[i] == 0;
    if (zero)
      return; /* the end */
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++)
      sum += i >= 148 && i < 156 ? ' ' : h[i];
    (void)snprintf((char *)h + 148, 8, "%06o", sum & 0777777);
    h[155] = ' ';
    size_t size = tar_number(h + 124, 12);
    size_t blocks = size / 512 + (size % 512 != 0);
    if (blocks > (n - off) / 512)
      return;
    off += 512 * (blocks + 1);
  }
}

/* Whether the file FD holds exactly the data of the current entry of A,
 * whose size is SIZE: what libarchive reads, then zeros (a sparse file's
 * hole at the end, which reading does not fill). */
static bool same_data(struct archive *a, int fd, off_t size) {
  static char want[1u << 16], got[sizeof(want)];
  off_t off = 0;
  for (;;) {
    la_ssize_t n = archive_read_data(a, want, sizeof(want));
    if (n < 0)
      abort(); /* it was read once already, by the import */
    if (n == 0)
      break;
    if (pread(fd, got, (size_t)n, off) != n || memcmp(want, got, (size_t)n))
      return false;
    off += n;
  }
  memset(want, 0, sizeof(want));
  while (off < size) {
    size_t k =
        size - off < (off_t)sizeof(got) ? (size_t)(size - off) : sizeof(got);
    if (pread(fd, got, k, off) != (ssize_t)k || memcmp(want, got, k))
      return false;
    off += (off_t)k;
  }
  return pread(fd, got, 1, off) == 0; /* and nothing more */
}

/* Checks member ENT of A (its normalized path P) against ROOT/dst. */
static void check_member(struct archive *a, struct archive_entry *ent, int dst,
                         const char *p) {
  struct stat st;
  if (fstatat(dst, p, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno == EACCES && !d.is_root)
      return; /* beneath a directory whose mode shuts us out */
    abort();  /* every member is there */
  }
  const char *hard = archive_entry_hardlink(ent);
  mode_t ft = archive_entry_filetype(ent);
  if (hard) {
    char tp[SBX_PATH_MAX];
    while (hard[0] == '.' && hard[1] == '/')
      hard += 2;
    struct stat tst;
    if (sbx_path_normalize_rel(hard, strlen(hard), tp, sizeof(tp),
                               SBX_PATH_NO_DOTDOT, NULL) < 0 ||
        fstatat(dst, tp, &tst, AT_SYMLINK_NOFOLLOW) < 0 ||
        tst.st_ino != st.st_ino || tst.st_dev != st.st_dev)
      abort(); /* a hard link shares its target's file */
    return;
  }
  if (ft == AE_IFLNK) {
    char t[SBX_PATH_MAX];
    ssize_t k = readlinkat(dst, p, t, sizeof(t) - 1);
    const char *want = archive_entry_symlink(ent);
    if (!want)
      want = archive_entry_symlink_utf8(ent);
    if (!S_ISLNK(st.st_mode) || k < 0 || !want || (size_t)k != strlen(want) ||
        memcmp(t, want, (size_t)k))
      abort();
    return;
  }
  bool dir = ft == AE_IFDIR;
  if ((dir && !S_ISDIR(st.st_mode)) || (!dir && !S_ISREG(st.st_mode)))
    abort();
  if (st.st_nlink > 1 && !dir)
    return; /* hard-linked: the last member's metadata wins */
  if ((st.st_mode & 07777) != (archive_entry_perm(ent) & (dir ? 01777 : 0777)))
    abort(); /* setuid and setgid never come through */
  if (d.is_root && (st.st_uid != (uid_t)archive_entry_uid(ent) ||
                    st.st_gid != (gid_t)archive_entry_gid(ent)))
    abort();
  time_t mt = archive_entry_mtime(ent);
  if (archive_entry_mtime_is_set(ent) && mt >= 0 && mt < (1ll << 31) &&
      st.st_mtime != mt)
    abort();
  if (dir)
    return;
  int fd = openat(dst, p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || st.st_size != archive_entry_size(ent) ||
      !same_data(a, fd, st.st_size))
    abort();
  (void)close(fd);
}

/* Reads the tar S (N bytes) again and checks that ROOT/dst holds each of
 * its members as the archive has it. */
static void check_extracted(const uint8_t *s, size_t n, bool zstd) {
  struct archive *a = archive_read_new();
  if (!a || archive_read_support_format_tar(a) != ARCHIVE_OK ||
      (zstd && archive_read_support_filter_zstd(a) != ARCHIVE_OK) ||
      archive_read_open_memory(a, s, n) != ARCHIVE_OK)
    abort();
  int dst = openat(d.root_fd, "dst", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dst < 0)
    abort();
  struct archive_entry *ent;
  int r;
  while ((r = archive_read_next_header(a, &ent)) == ARCHIVE_OK ||
         r == ARCHIVE_WARN) {
    const char *raw = archive_entry_pathname(ent);
    if (!raw)
      raw = archive_entry_pathname_utf8(ent);
    if (!raw)
      abort(); /* the import took it */
    char p[SBX_PATH_MAX];
    while (raw[0] == '.' && raw[1] == '/')
      raw += 2;
    if (!raw[0] || strcmp(raw, ".") == 0)
      continue; /* the destination itself */
    if (sbx_path_normalize_rel(raw, strlen(raw), p, sizeof(p),
                               SBX_PATH_NO_DOTDOT, NULL) < 0)
      abort(); /* the import took it */
    if (strcmp(p, ".") != 0)
      check_member(a, ent, dst, p);
  }
  if (r != ARCHIVE_EOF)
    abort();
  (void)close(dst);
  archive_read_free(a);
}

/* Creates FILE in ROOT (path relative to it) holding TEXT. */
static void put(const char *file, const char *text) {
  int fd =
      openat(d.root_fd, file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
    abort();
  (void)close(fd);
}

/* What a destination that is not empty holds. */
static void populate(void) {
  if (mkdirat(d.root_fd, "dst", 0755) < 0 ||
      mkdirat(d.root_fd, "dst/sub", 0755) < 0)
    abort();
  put("dst/keep.txt", "kept\n");
  put("dst/sub/f", "f\n");
  if (symlinkat("sub", d.root_fd, "dst/link") < 0 ||
      symlinkat("../outside", d.root_fd, "dst/out") < 0)
    abort();
}

/* Removes ROOT at exit. */
static void teardown(void) {
  fuzz_tmpdir_remove(root);
}

static void setup(void) {
  fuzz_tmpdir(root, sizeof(root), "tar");
  d.root = root;
  d.root_fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (d.root_fd < 0)
    abort();
  sandboxd_limits_default(&d.limits);
  d.limits.archive_max_members = LIM_MEMBERS;
  d.limits.archive_max_input_bytes = LIM_INPUT;
  d.limits.archive_max_extracted_bytes = LIM_EXTRACTED;
  d.uid = geteuid();
  d.gid = getegid();
  d.is_root = d.uid == 0; /* as sandboxd decides it */
  if (mkdirat(d.root_fd, "outside", 0755) < 0)
    abort();
  put("outside/secret", "never overwritten\n");
  outside_sig = sig_of("outside").sum;
  (void)atexit(teardown);
}

static void done(struct rpc_call *c, int r) {
  (void)c;
  (void)r;
}

/* Runs HANDLER on REQ in C, whose arena then holds the reply *RESP (until
 * the next call). */
static int call(struct rpc_call *c, int (*handler)(struct rpc_call *),
                Sbx__V1__Request *req, Sbx__V1__Response *resp) {
  sbx_arena_reset(&c->arena);
  sbx__v1__response__init(resp);
  c->req = req;
  c->resp = resp;
  c->err = (struct sbx_error){0};
  int r = handler(c);
  if (r < 0 && !c->err.msg[0])
    abort(); /* every failure says why */
  if (r == 0 && resp->body_case == SBX__V1__RESPONSE__BODY__NOT_SET)
    abort();
  return r;
}

/* The import of the tar S (N bytes) as FLAGS say; 0 or its error, the
 * finish's counts in *MEMBERS and *BYTES. */
static int import(uint8_t flags, const uint8_t *s, size_t n, uint64_t *members,
                  uint64_t *bytes, struct sbx_error *e) {
  struct rpc_call c = {.d = &d, .complete = done};
  Sbx__V1__Request req;
  Sbx__V1__Response resp;
  sbx__v1__request__init(&req);
  Sbx__V1__ArchiveImportStart st;
  sbx__v1__archive_import_start__init(&st);
  st.path = "dst";
  st.stage = flags & 1;
  st.compression = flags & 4 ? SBX__V1__COMPRESSION__COMPRESSION_AUTO
                             : SBX__V1__COMPRESSION__COMPRESSION_NONE;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_START;
  req.archive_import_start = &st;
  int r = call(&c, rpc_archive_import_start, &req, &resp);
  if (r < 0) {
    *e = c.err;
    sbx_arena_reset(&c.arena);
    return r;
  }
  uint64_t handle = resp.archive_import_start->handle;

  size_t nchunks = (size_t)((flags >> 4) & 7) + 1;
  size_t chunk = n / nchunks + 1;
  for (size_t off = 0; r == 0 && off < n; off += chunk) {
    Sbx__V1__ArchiveImportWrite w;
    sbx__v1__archive_import_write__init(&w);
    w.handle = handle;
    w.offset = off;
    w.data.data = (uint8_t *)s + off;
    w.data.len = n - off < chunk ? n - off : chunk;
    req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_WRITE;
    req.archive_import_write = &w;
    r = call(&c, rpc_archive_import_write, &req, &resp);
    if (r == 0 && resp.archive_import_write->received != off + w.data.len)
      abort();
  }
  if (r == 0 && !(flags & 8)) {
    Sbx__V1__ArchiveImportFinish f;
    sbx__v1__archive_import_finish__init(&f);
    f.handle = handle;
    req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_IMPORT_FINISH;
    req.archive_import_finish = &f;
    r = call(&c, rpc_archive_import_finish, &req, &resp);
    if (r == 0) {
      *members = resp.archive_import_finish->members;
      *bytes = resp.archive_import_finish->extracted_bytes;
    }
  }
  Sbx__V1__ArchiveClose cl;
  sbx__v1__archive_close__init(&cl);
  cl.handle = handle;
  req.body_case = SBX__V1__REQUEST__BODY_ARCHIVE_CLOSE;
  req.archive_close = &cl;
  *e = c.err;
  if (call(&c, rpc_archive_close, &req, &resp) < 0)
    abort();
  sbx_arena_reset(&c.arena);
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  if (!root[0])
    setup();
  uint8_t flags = data[0];
  if (flags & 2)
    populate();
  else if (mkdirat(d.root_fd, "dst", 0755) < 0)
    abort();
  struct sig before = sig_of("dst");
  if (archive_table_new(&d, &d.archives) < 0)
    abort();
  const uint8_t *tar = data + 1;
  size_t n = size - 1;
  uint8_t *fixed = NULL;
  static const uint8_t zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  if (!(flags & 0x80) && n >= 512 && memcmp(tar, zstd_magic, 4) != 0) {
    if (!(fixed = malloc(n)))
      abort();
    memcpy(fixed, tar, n);
    fix_checksums(fixed, n);
    tar = fixed;
  }
  uint64_t members = 0, bytes = 0;
  struct sbx_error e = {0};
  int r = import(flags, tar, n, &members, &bytes, &e);
  /* The transfer's thread is joined, its staging directory removed. */
  archive_table_free(d.archives);
  d.archives = NULL;

  struct sig after = sig_of("dst");
  bool refused =
      r < 0 && (e.code == SBX_INVALID_ARGUMENT || e.code == SBX_LIMIT_EXCEEDED);
  if ((refused || (r == 0 && (flags & 8))) &&
      (after.sum != before.sum || after.n != before.n))
    abort(); /* a refused or unfinished import leaves it as it was */
  if (r == 0 && !(flags & 8) &&
      (after.bad || members > LIM_MEMBERS || bytes > LIM_EXTRACTED))
    abort();
  if (r == 0 && !(flags & 8))
    check_extracted(tar, n, flags & 4);
  struct sig top = {0};
  sig_dir(d.root_fd, ".", SIG_DEPTH, &top);
  if (sig_of("outside").sum != outside_sig || top.n != 2)
    abort(); /* nothing outside the destination changes */
  fuzz_rmtree(d.root_fd, "dst");
  free(fixed);
  return 0;
}
