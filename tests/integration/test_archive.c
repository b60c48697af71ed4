/* Archives through the real daemon and the C client: a zstd round trip in
 * chunks, and hostile archives refused with nothing written. */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/daemon.h"

static void put(struct test_daemon *t, const char *rel, const char *content) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/%s", t->root, rel);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f, "%s", p);
  fputs(content, f);
  fclose(f);
}

static char *get(struct test_daemon *t, const char *rel) {
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/%s", t->root, rel);
  FILE *f = fopen(p, "r");
  if (!f)
    return NULL;
  char *buf = calloc(1, 4096);
  cr_assert_not_null(buf);
  (void)!fread(buf, 1, 4095, f);
  fclose(f);
  return buf;
}

#define STREAM_MAX (16u << 20) /* the most a streamed export here holds */

/* Exports DIR from T, whole, into a new buffer; STREAM: produced while it is
 * read, until eof. */
static unsigned char *export_dir_as(struct test_daemon *t, const char *dir,
                                    Sbx__V1__Compression comp, bool stream,
                                    size_t *len) {
  Sbx__V1__ArchiveExportStart a = SBX__V1__ARCHIVE_EXPORT_START__INIT;
  a.path = (char *)dir;
  a.compression = comp;
  a.stream = stream;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_archive_export_start(t->client, &a, &r, &e), 0, "%s", e.msg);
  uint64_t handle = r->archive_export_start->handle;
  uint64_t total = r->archive_export_start->total_bytes;
  sbx_client_reply_free(r);
  if (stream) {
    cr_expect_eq(total, 0);
    total = STREAM_MAX;
  }
  unsigned char *buf = malloc(total + 1);
  cr_assert_not_null(buf);
  uint64_t off = 0;
  for (;;) {
    cr_assert_eq(
        sbx_archive_export_read(t->client, handle, off, 100000, &r, &e), 0,
        "%s", e.msg);
    Sbx__V1__ArchiveExportReadReply *x = r->archive_export_read;
    cr_assert_leq(off + x->data.len, total);
    memcpy(buf + off, x->data.data, x->data.len);
    off += x->data.len;
    bool eof = x->eof;
    sbx_client_reply_free(r);
    if (eof)
      break;
  }
  if (!stream)
    cr_expect_eq(off, total);
  cr_assert_eq(sbx_archive_close(t->client, handle, &e), 0, "%s", e.msg);
  *len = off;
  return buf;
}

static unsigned char *export_dir(struct test_daemon *t, const char *dir,
                                 Sbx__V1__Compression comp, size_t *len) {
  return export_dir_as(t, dir, comp, false, len);
}

static bool last_staged; /* whether the last import_dir was staged */

/* Imports DATA into DIR in chunks of CHUNK bytes; the finish's result, E
 * filled on failure. */
static int import_dir_in(struct test_daemon *t, const char *dir,
                         const unsigned char *data, size_t len, size_t chunk,
                         uint64_t *members, struct sbx_error *e) {
  Sbx__V1__ArchiveImportStart a = SBX__V1__ARCHIVE_IMPORT_START__INIT;
  a.stage = true;
  a.path = (char *)dir;
  a.compression = SBX__V1__COMPRESSION__COMPRESSION_AUTO;
  Sbx__V1__Response *r = NULL;
  cr_assert_eq(sbx_archive_import_start(t->client, &a, &r, e), 0, "%s", e->msg);
  uint64_t handle = r->archive_import_start->handle;
  /* An empty directory is extracted while the archive arrives. */
  char want[600];
  (void)snprintf(want, sizeof(want), "%s/.sbx-import-%016llx", dir,
                 (unsigned long long)handle);
  const char *sp = r->archive_import_start->staging_path;
  last_staged = sp[0] != '\0';
  if (last_staged)
    cr_expect_str_eq(sp, want);
  sbx_client_reply_free(r);
  for (size_t off = 0; off < len;) {
    size_t n = len - off < chunk ? len - off : chunk;
    uint64_t received = 0;
    cr_assert_eq(sbx_archive_import_write(t->client, handle, off, data + off, n,
                                          &received, e),
                 0, "%s", e->msg);
    cr_assert_eq(received, off + n);
    off += n;
  }
  int rc = sbx_archive_import_finish(t->client, handle, &r, e);
  if (rc == 0) {
    *members = r->archive_import_finish->members;
    sbx_client_reply_free(r);
  }
  struct sbx_error ce = {0};
  cr_assert_eq(sbx_archive_close(t->client, handle, &ce), 0, "%s", ce.msg);
  return rc;
}

static int import_dir(struct test_daemon *t, const char *dir,
                      const unsigned char *data, size_t len, uint64_t *members,
                      struct sbx_error *e) {
  return import_dir_in(t, dir, data, len, 65536, members, e);
}

Test(archive_daemon, zstd_round_trip_in_chunks) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/src", t.root);
  cr_assert_eq(mkdir(p, 0755), 0);
  (void)snprintf(p, sizeof(p), "%s/src/sub", t.root);
  cr_assert_eq(mkdir(p, 0700), 0);
  put(&t, "src/a.txt", "alpha\n");
  put(&t, "src/sub/b.txt", "beta\n");
  (void)snprintf(p, sizeof(p), "%s/src/link", t.root);
  cr_assert_eq(symlink("sub/b.txt", p), 0);
  /* Enough incompressible data for several chunks. */
  (void)snprintf(p, sizeof(p), "%s/src/random.bin", t.root);
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  cr_assert_geq(fd, 0);
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 300000 / 8; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    cr_assert_eq(write(fd, &x, 8), 8);
  }
  close(fd);

  size_t len;
  unsigned char *tar =
      export_dir(&t, "src", SBX__V1__COMPRESSION__COMPRESSION_ZSTD, &len);
  cr_expect_gt(len, 300000);
  uint64_t members = 0;
  struct sbx_error e = {0};
  cr_assert_eq(import_dir(&t, "restored/here", tar, len, &members, &e), 0, "%s",
               e.msg);
  cr_expect(last_staged, "a new directory is staged");
  cr_expect_eq(members, 5);
  char *s = get(&t, "restored/here/link");
  cr_expect_str_eq(s, "beta\n");
  free(s);
  struct stat st;
  (void)snprintf(p, sizeof(p), "%s/restored/here/sub", t.root);
  cr_assert_eq(stat(p, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0700);
  (void)snprintf(p, sizeof(p), "%s/restored/here/random.bin", t.root);
  cr_assert_eq(stat(p, &st), 0);
  cr_expect_eq(st.st_size, 300000);
  /* A streamed export has the same bytes. */
  size_t slen;
  unsigned char *streamed = export_dir_as(
      &t, "src", SBX__V1__COMPRESSION__COMPRESSION_ZSTD, true, &slen);
  cr_assert_eq(slen, len);
  cr_expect_eq(memcmp(streamed, tar, len), 0);
  free(streamed);
  free(tar);
  test_daemon_stop(&t);
}

static la_ssize_t grow(struct archive *a, void *cd, const void *buf, size_t n) {
  (void)a;
  struct {
    unsigned char *d;
    size_t len;
  } *b = cd;
  b->d = realloc(b->d, b->len + n);
  cr_assert_not_null(b->d);
  memcpy(b->d + b->len, buf, n);
  b->len += n;
  return (la_ssize_t)n;
}

/* A bare ustar header for a regular file NAME claiming SIZE bytes (written
 * by hand: libarchive's writer would insist on the data). */
static void ustar_header(unsigned char h[512], const char *name,
                         unsigned long long size) {
  memset(h, 0, 512);
  (void)snprintf((char *)h, 100, "%s", name);
  memcpy(h + 100, "0000644", 8);
  memcpy(h + 108, "0000000", 8);
  memcpy(h + 116, "0000000", 8);
  (void)snprintf((char *)h + 124, 12, "%011llo", size);
  memcpy(h + 136, "14533462000", 12);
  h[156] = '0';
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++)
    sum += h[i];
  (void)snprintf((char *)h + 148, 8, "%06o", sum);
}

Test(archive_daemon, hostile_archives_write_nothing) {
  struct test_daemon t;
  /* The bomb below claims more than the server's limit, a flag. */
  const char *args[] = {"--archive-max-extracted-bytes", "4294967296", NULL};
  test_daemon_start(&t, args);
  struct {
    unsigned char *d;
    size_t len;
  } b = {0};
  /* A fine member, then one that climbs out of the destination. */
  struct archive *a = archive_write_new();
  archive_write_set_format_pax(a);
  archive_write_set_bytes_per_block(a, 0);
  cr_assert_eq(archive_write_open2(a, &b, NULL, grow, NULL, NULL), ARCHIVE_OK);
  struct archive_entry *en = archive_entry_new();
  const char *names[] = {"fine.txt", "../../evil"};
  for (int i = 0; i < 2; i++) {
    archive_entry_clear(en);
    archive_entry_set_pathname(en, names[i]);
    archive_entry_set_filetype(en, AE_IFREG);
    archive_entry_set_perm(en, 0644);
    archive_entry_set_size(en, 4);
    cr_assert_eq(archive_write_header(a, en), ARCHIVE_OK);
    cr_assert_eq(archive_write_data(a, "evil", 4), 4);
  }
  cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  uint64_t members = 0;
  struct sbx_error e = {0};
  cr_expect_lt(import_dir(&t, "dst/d", b.d, b.len, &members, &e), 0);
  cr_expect_eq(e.code, SBX_INVALID_ARGUMENT, "%s", e.msg);
  cr_expect(strstr(e.msg, "escapes the destination"), "%s", e.msg);
  char *s = get(&t, "dst/d/fine.txt");
  cr_expect_null(s, "nothing inside");
  free(s);
  s = get(&t, "evil");
  cr_expect_null(s, "nothing outside");
  free(s);

  /* A bomb: a header claiming 5 GiB, more than the server allows (4). */
  archive_entry_free(en);
  unsigned char hdr[512];
  ustar_header(hdr, "bomb", 5ull << 30);
  free(b.d);
  b.d = NULL;
  b.len = 0;
  grow(NULL, &b, hdr, sizeof(hdr));
  cr_expect_lt(import_dir(&t, "dst/bomb", b.d, b.len, &members, &e), 0);
  cr_expect_eq(e.code, SBX_LIMIT_EXCEEDED, "%s", e.msg);
  s = get(&t, "dst/bomb/bomb");
  cr_expect_null(s);
  free(s);
  free(b.d);
  test_daemon_stop(&t);
}

Test(archive_daemon, shutdown_during_a_streamed_export_is_clean) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/src", t.root);
  cr_assert_eq(mkdir(p, 0755), 0);
  /* 24 MiB that zstd at level 19 takes seconds over. */
  size_t n = 8u << 20;
  unsigned char *data = malloc(n);
  cr_assert_not_null(data);
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = (unsigned char)(x & 0x0f);
  }
  for (int i = 0; i < 3; i++) {
    (void)snprintf(p, sizeof(p), "%s/src/f%d", t.root, i);
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, data, n), (ssize_t)n);
    close(fd);
  }
  free(data);
  Sbx__V1__ArchiveExportStart a = SBX__V1__ARCHIVE_EXPORT_START__INIT;
  a.path = "src";
  a.compression = SBX__V1__COMPRESSION__COMPRESSION_ZSTD;
  a.zstd_level = 19;
  a.stream = true;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_archive_export_start(t.client, &a, &r, &e), 0, "%s", e.msg);
  uint64_t handle = r->archive_export_start->handle;
  sbx_client_reply_free(r);
  cr_assert_eq(sbx_archive_export_read(t.client, handle, 0, 100, &r, &e), 0,
               "%s", e.msg);
  cr_expect(!r->archive_export_read->eof, "the export is still produced");
  sbx_client_reply_free(r);
  /* test_daemon_stop expects a clean exit within 5 s. */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  test_daemon_stop(&t);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took =
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  cr_expect_lt(took, 2.0, "shutdown took %.2f s", took);
}

/* The processes of sandboxd PID: itself and its children. */
static size_t daemon_pids(pid_t pid, pid_t out[8]) {
  char p[64];
  (void)snprintf(p, sizeof(p), "/proc/%d/task/%d/children", (int)pid, (int)pid);
  out[0] = pid;
  size_t n = 1;
  FILE *f = fopen(p, "r");
  int c;
  while (f && n < 8 && fscanf(f, "%d", &c) == 1)
    out[n++] = (pid_t)c;
  if (f)
    fclose(f);
  return n;
}

/* Resets the peak resident set of sandboxd PID's processes. */
static void hwm_reset(pid_t pid) {
  pid_t ps[8];
  size_t n = daemon_pids(pid, ps);
  for (size_t i = 0; i < n; i++) {
    char p[64];
    (void)snprintf(p, sizeof(p), "/proc/%d/clear_refs", (int)ps[i]);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs("5", f);
    fclose(f);
  }
}

/* The largest peak resident set of sandboxd PID's processes, KiB. */
static long hwm_kib(pid_t pid) {
  pid_t ps[8];
  size_t n = daemon_pids(pid, ps);
  long most = 0;
  for (size_t i = 0; i < n; i++) {
    char p[64], line[256];
    (void)snprintf(p, sizeof(p), "/proc/%d/status", (int)ps[i]);
    FILE *f = fopen(p, "r");
    long kb = 0;
    while (f && fgets(line, sizeof(line), f))
      if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
        break;
    if (f)
      fclose(f);
    if (kb > most)
      most = kb;
  }
  return most;
}

/* A 96 MiB zstd archive imported in 4 MiB chunks (as snapshots restore)
 * leaves sandboxd's peak resident set far below the archive's size, staged
 * into a new directory and by two passes into one with a file in it. */
Test(archive_daemon, large_import_keeps_sandboxd_small) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  char p[512];
  (void)snprintf(p, sizeof(p), "%s/src", t.root);
  cr_assert_eq(mkdir(p, 0755), 0);
  size_t n = 96u << 20;
  uint64_t *data = malloc(n);
  cr_assert_not_null(data);
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < n / 8; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = x;
  }
  (void)snprintf(p, sizeof(p), "%s/src/random.bin", t.root);
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, data, n), (ssize_t)n);
  close(fd);
  free(data);
  size_t len;
  unsigned char *tar =
      export_dir(&t, "src", SBX__V1__COMPRESSION__COMPRESSION_ZSTD, &len);
  cr_assert_gt(len, n);
  (void)snprintf(p, sizeof(p), "%s/full", t.root);
  cr_assert_eq(mkdir(p, 0755), 0);
  put(&t, "full/other.txt", "other\n");
  const char *dirs[] = {"fresh", "full"};
  for (int k = 0; k < 2; k++) {
    hwm_reset(t.pid);
    uint64_t members = 0;
    struct sbx_error e = {0};
    cr_assert_eq(import_dir_in(&t, dirs[k], tar, len, 4u << 20, &members, &e),
                 0, "%s", e.msg);
    cr_expect_eq(last_staged, k == 0);
    long kib = hwm_kib(t.pid);
#ifndef __SANITIZE_ADDRESS__
    /* AddressSanitizer's allocator and shadow memory take far more. */
    cr_expect_lt(kib, 32 << 10, "%s: sandboxd's peak was %ld KiB", dirs[k],
                 kib);
#else
    (void)kib;
#endif
    struct stat st;
    (void)snprintf(p, sizeof(p), "%s/%s/random.bin", t.root, dirs[k]);
    cr_assert_eq(stat(p, &st), 0);
    cr_expect_eq(st.st_size, (off_t)n);
  }
  free(tar);
  test_daemon_stop(&t);
}

/* Starts an import into DIR (a fresh subdirectory of T's root) on client
 * C: its handle, or 0 with E filled when refused. */
static uint64_t start_import(struct test_daemon *t, struct sbx_client *c, int i,
                             struct sbx_error *e) {
  char p[512], rel[32];
  (void)snprintf(rel, sizeof(rel), "in%d", i);
  (void)snprintf(p, sizeof(p), "%s/%s", t->root, rel);
  (void)mkdir(p, 0755);
  Sbx__V1__ArchiveImportStart a = SBX__V1__ARCHIVE_IMPORT_START__INIT;
  a.path = rel;
  a.compression = SBX__V1__COMPRESSION__COMPRESSION_NONE;
  Sbx__V1__Response *r = NULL;
  if (sbx_archive_import_start(c, &a, &r, e) < 0)
    return 0;
  uint64_t h = r->archive_import_start->handle;
  sbx_client_reply_free(r);
  return h;
}

/* A transfer abandoned in the middle (its client's connection closed)
 * gives its slot to a new one when every slot is taken; one whose client
 * is still there does not, and a client that comes back on another
 * connection goes on with its transfer. */
Test(archive_daemon, an_abandoned_transfer_frees_its_slot) {
  struct test_daemon t;
  test_daemon_start(&t, NULL);
  struct sbx_error e = {0};
  /* Client b fills all 16 slots, writes a chunk into two, and goes. */
  struct sbx_client *b = test_daemon_client(&t, NULL);
  uint64_t hs[16];
  for (int i = 0; i < 16; i++) {
    hs[i] = start_import(&t, b, i, &e);
    cr_assert_neq(hs[i], 0, "%d: %s", i, e.msg);
  }
  uint64_t received = 0;
  for (int i = 0; i < 2; i++)
    cr_assert_eq(sbx_archive_import_write(b, hs[i], 0, "abc", 3, &received, &e),
                 0, "%s", e.msg);
  cr_assert_eq(start_import(&t, t.client, 99, &e), 0, "the table is full");
  cr_expect_eq(e.code, SBX_LIMIT_EXCEEDED, "%s", e.msg);
  sbx_client_free(b);
  /* The daemon learns of the closed connection asynchronously; then the
   * transfer abandoned first (in the lowest slot on a tie) gives way. */
  uint64_t h = 0;
  for (int i = 0; i < 100 && !h; i++) {
    (void)nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    sbx_error_clear(&e);
    h = start_import(&t, t.client, 16, &e);
  }
  cr_assert_neq(h, 0, "an abandoned slot was given: %s", e.msg);
  sbx_error_clear(&e);
  cr_expect_neq(
      sbx_archive_import_write(t.client, hs[0], 3, "def", 3, &received, &e), 0);
  cr_expect_eq(e.code, SBX_NOT_FOUND, "%s", e.msg);
  /* The second, taken up again on this connection, goes on. */
  sbx_error_clear(&e);
  cr_expect_eq(
      sbx_archive_import_write(t.client, hs[1], 3, "def", 3, &received, &e), 0,
      "%s", e.msg);
  cr_expect_eq(received, 6);
  /* The 14 others abandoned give way; then the table is full of this
   * client's transfers, which keep their slots. */
  int got = 0;
  sbx_error_clear(&e);
  for (int i = 17; i < 40 && start_import(&t, t.client, i, &e); i++)
    got++;
  cr_expect_eq(got, 14);
  cr_expect_eq(e.code, SBX_LIMIT_EXCEEDED, "%s", e.msg);
  test_daemon_stop(&t);
}
