/* Snapshots through a real sandboxd: local and remote (nginx WebDAV on
 * loopback) round trips, the fingerprint skip, tampered and hostile
 * archives, prune and "none". */
#include <archive.h>
#include <archive_entry.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "controller/snapshot/snapshot.h"
#include "shared/cleanup.h"
#include "shared/sha256.h"
#include "tests/support/daemon.h"
#include "tests/support/webdav.h"

#define SID "0b7e5d2c-8d1e-4c55-9a0f-5e8f2b1c3d4e"
#define TOKEN "s3cret-token"

static struct test_daemon T;
static struct test_webdav W;
static struct sandbox SB;
static char base[128]; /* local snapshot dir (not created: save creates it) */
static char scratch[96];

static void start(void) {
  test_daemon_start(&T, NULL);
  memset(&SB, 0, sizeof(SB));
  (void)snprintf(SB.session_id, sizeof(SB.session_id), "%s", SID);
  SB.client = T.client;
  SB.root = T.root;
  (void)snprintf(scratch, sizeof(scratch), "%s/out", T.dir);
  (void)mkdir(scratch, 0700);
  (void)snprintf(base, sizeof(base), "%s/state/sbx/snapshots", scratch);
}

static void stop(void) {
  test_webdav_stop(&W);
  test_daemon_stop(&T);
}

static void start_dav(void) {
  start();
  test_webdav_start(&W, TOKEN);
  cr_assert_eq(setenv("SBX_SNAPSHOT_TOKEN", TOKEN, 1), 0);
}

/* ---- the workspace, through the client ---- */

static void put(const char *rel, const char *data, size_t len, unsigned perm) {
  Sbx__V1__FileWrite a = SBX__V1__FILE_WRITE__INIT;
  a.path = (char *)rel;
  a.data.data = (uint8_t *)data;
  a.data.len = len;
  a.perm = perm;
  a.parents = true;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(sbx_file_write(T.client, &a, &r, &e), 0, "%s: %s", rel, e.msg);
  sbx_client_reply_free(r);
  /* The umask may have narrowed PERM on creation. */
  cr_assert_eq(sbx_file_chmod(T.client, rel, perm, false, &e), 0, "%s", e.msg);
}

static void put_str(const char *rel, const char *s, unsigned perm) {
  put(rel, s, strlen(s), perm);
}

static void host_path(const char *rel, char *out, size_t n) {
  (void)snprintf(out, n, "%s/%s", T.root, rel);
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  cr_assert_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  cr_assert_geq(n, 0);
  rewind(f);
  char *buf = malloc((size_t)n + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  if (len)
    *len = (size_t)n;
  return buf;
}

static void expect_file(const char *rel, const char *want, unsigned mode) {
  char p[512];
  host_path(rel, p, sizeof(p));
  char *got = slurp(p, NULL);
  cr_expect_not_null(got, "%s is missing", rel);
  if (got)
    cr_expect_str_eq(got, want, "%s", rel);
  free(got);
  struct stat st;
  if (lstat(p, &st) == 0)
    cr_expect_eq(st.st_mode & 07777, mode, "%s: mode %o, want %o", rel,
                 st.st_mode & 07777, mode);
}

static bool exists(const char *rel) {
  char p[512];
  struct stat st;
  host_path(rel, p, sizeof(p));
  return lstat(p, &st) == 0;
}

static void wipe(void) {
  char cmd[256];
  (void)snprintf(cmd, sizeof(cmd), "rm -rf %s/* %s/.[!.]*", T.root, T.root);
  cr_assert_eq(system(cmd), 0);
}

static char big[300000];

/* Files of several modes, a symlink, an empty directory, a nested tree and
 * an excluded (ephemeral) directory. */
static void fill(void) {
  put_str("README.md", "# hello\n", 0644);
  put_str("bin/run.sh", "#!/bin/sh\necho run\n", 0755);
  put_str("src/deep/er/file.c", "int main(void) { return 0; }\n", 0600);
  put_str("secret.txt", "mine\n", 0640);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < sizeof(big); i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    big[i] = (char)('a' + x % 26);
  }
  big[sizeof(big) - 1] = '\0';
  put("data/big.txt", big, sizeof(big) - 1, 0644);
  struct sbx_error e = {0};
  cr_assert_eq(sbx_file_mkdir(T.client, "empty/inner", true, 0700, &e), 0, "%s",
               e.msg);
  cr_assert_eq(sbx_file_chmod(T.client, "empty", 0750, false, &e), 0, "%s",
               e.msg);
  /* No symlink RPC: made on the host side of the workspace. */
  char p[512];
  host_path("link", p, sizeof(p));
  cr_assert_eq(symlink("src/deep/er/file.c", p), 0);
  put_str("tmp/cache.bin", "ephemeral\n", 0644);
}

static void expect_filled(void) {
  expect_file("README.md", "# hello\n", 0644);
  expect_file("bin/run.sh", "#!/bin/sh\necho run\n", 0755);
  expect_file("src/deep/er/file.c", "int main(void) { return 0; }\n", 0600);
  expect_file("secret.txt", "mine\n", 0640);
  expect_file("data/big.txt", big, 0644);
  char p[512], target[256] = {0};
  host_path("link", p, sizeof(p));
  cr_expect_gt(readlink(p, target, sizeof(target) - 1), 0, "link is missing");
  cr_expect_str_eq(target, "src/deep/er/file.c");
  struct stat st;
  host_path("empty/inner", p, sizeof(p));
  cr_expect_eq(stat(p, &st), 0, "empty/inner is missing");
  cr_expect(S_ISDIR(st.st_mode));
  cr_expect_eq(st.st_mode & 07777, 0700);
  host_path("empty", p, sizeof(p));
  cr_expect_eq(stat(p, &st), 0);
  cr_expect_eq(st.st_mode & 07777, 0750);
}

static const char *const EXCL[] = {"tmp", NULL};

static struct snapshot_spec local_spec(void) {
  return (struct snapshot_spec){
      .type = SNAPSHOT_LOCAL, .base_dir = base, .excludes = EXCL};
}

static void expect_sha_of(const char *path, const struct snapshot_record *r) {
  size_t len = 0;
  char *data = slurp(path, &len);
  cr_assert_not_null(data, "%s", path);
  uint8_t d[SBX_SHA256_BYTES];
  char hex[SBX_SHA256_HEX];
  sbx_sha256(data, len, d);
  sbx_sha256_hex(d, hex);
  cr_expect_str_eq(hex, r->sha256);
  cr_expect_eq(len, r->size);
  free(data);
}

static unsigned progress_calls;
static bool progress_finished;
static void on_progress(void *arg, const struct snapshot_progress *p) {
  (void)arg;
  progress_calls++;
  cr_expect_leq(p->bytes_done, p->bytes_total ? p->bytes_total : UINT64_MAX);
  if (p->finished)
    progress_finished = true;
}

/* ---- local ---- */

TestSuite(snapshot, .init = start, .fini = stop, .timeout = 120);

Test(snapshot, local_round_trip_keeps_content_modes_links_and_empty_dirs) {
  fill();
  struct snapshot_spec spec = local_spec();
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_assert_eq(
      snapshot_save(&spec, &SB, NULL, NULL, &rec, on_progress, NULL, &e), 0,
      "%s", e.msg);
  cr_expect(progress_finished, "no final progress call");
  cr_expect_eq(rec.type, SNAPSHOT_LOCAL);
  cr_expect_str_eq(rec.version, "workspace_tar_sha256_v1");
  char want[256];
  (void)snprintf(want, sizeof(want), "%s/%s.tar.zst", base, SID);
  cr_expect_str_eq(rec.location, want);
  expect_sha_of(want, &rec);
  struct stat st;
  cr_assert_eq(stat(base, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0700, "snapshot dir mode %o",
               st.st_mode & 0777);
  cr_assert_eq(stat(want, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0600);
  /* zstd: 300 KB of letters shrink. */
  cr_expect_lt(rec.size, 250000);

  wipe();
  put_str("stray.txt", "not in the snapshot\n", 0644);
  put_str("tmp/kept.bin", "excluded paths survive a restore\n", 0644);
  struct snapshot_restore_result res = {0};
  cr_assert_eq(
      snapshot_restore(&spec, &rec, &SB, NULL, NULL, &res, NULL, NULL, &e), 0,
      "%s", e.msg);
  cr_expect_not(res.skipped);
  cr_expect_geq(res.members, 10);
  expect_filled();
  cr_expect_not(exists("stray.txt"), "restore clears the workspace");
  cr_expect(exists("tmp/kept.bin"), "restore keeps excluded paths");
  cr_expect_not(exists("tmp/cache.bin"), "excluded paths are not saved");
  snapshot_record_clear(&rec);
}

/* Seconds since an unspecified start, for the figures tests log. */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A snapshot saved by SPEC (NULL: local_spec()), the workspace wiped, and
 * the snapshot restored: the record (to clear), the restore's result, and
 * the seconds each took. */
struct round_trip {
  struct snapshot_record rec;
  struct snapshot_restore_result res;
  double save_s, restore_s;
};

static void save_wipe_restore(const struct snapshot_spec *spec,
                              struct round_trip *rt) {
  struct snapshot_spec local = local_spec();
  if (!spec)
    spec = &local;
  struct sbx_error e = {0};
  double t0 = now_s();
  cr_assert_eq(snapshot_save(spec, &SB, NULL, NULL, &rt->rec, NULL, NULL, &e),
               0, "%s", e.msg);
  double t1 = now_s();
  wipe();
  double t2 = now_s();
  cr_assert_eq(snapshot_restore(spec, &rt->rec, &SB, NULL, NULL, &rt->res, NULL,
                                NULL, &e),
               0, "%s", e.msg);
  rt->save_s = t1 - t0;
  rt->restore_s = now_s() - t2;
}

#define SPARSE_SIZE (5ull << 30)

Test(snapshot, sparse_file_stays_sparse_through_save_and_restore) {
  /* 5 GiB long, a few KiB of data: the snapshot holds the data only, and
   * the restored file has the same holes. */
  char p[512];
  host_path("disk.img", p, sizeof(p));
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert_geq(fd, 0);
  const off_t at[] = {0, 1 << 20, 3ll << 30, SPARSE_SIZE - 5};
  for (size_t i = 0; i < SBX_ARRAY_SIZE(at); i++)
    cr_assert_eq(pwrite(fd, "data!", 5, at[i]), 5);
  cr_assert_eq(ftruncate(fd, (off_t)SPARSE_SIZE), 0);
  close(fd);
  struct stat st;
  cr_assert_eq(stat(p, &st), 0);
  cr_assert_lt(st.st_blocks, 1024, "the file system keeps no holes");
  put_str("small.txt", "small\n", 0644);
  struct round_trip rt = {0};
  save_wipe_restore(NULL, &rt);
  fprintf(stderr,
          "sparse %llu bytes: save %.3f s, restore %.3f s, archive %llu "
          "bytes\n",
          SPARSE_SIZE, rt.save_s, rt.restore_s,
          (unsigned long long)rt.rec.size);
  cr_expect_lt(rt.rec.size, 64u << 10, "archive of %llu bytes",
               (unsigned long long)rt.rec.size);
  cr_assert_eq(stat(p, &st), 0, "disk.img is missing");
  cr_expect_eq((unsigned long long)st.st_size, SPARSE_SIZE);
  cr_expect_lt(st.st_blocks, 1024, "restored with %lld blocks: not sparse",
               (long long)st.st_blocks);
  fd = open(p, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  for (size_t i = 0; i < SBX_ARRAY_SIZE(at); i++) {
    char b[6] = {0};
    cr_expect_eq(pread(fd, b, 5, at[i]), 5);
    cr_expect_str_eq(b, "data!", "at %lld", (long long)at[i]);
  }
  char z[5] = {1, 1, 1, 1, 1};
  cr_expect_eq(pread(fd, z, 5, 2ll << 30), 5);
  cr_expect(!z[0] && !z[4], "a hole reads as zeros");
  close(fd);
  expect_file("small.txt", "small\n", 0644);
  snapshot_record_clear(&rt.rec);
}

Test(snapshot, save_refuses_what_restore_would_refuse) {
  /* The save applies the limits the restore will: a snapshot that could
   * not be restored is refused now, with the reason, not at resume. */
  fill();
  struct snapshot_spec spec = local_spec();
  spec.limits.max_members = 5;
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_expect_lt(snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e), 0);
  cr_expect_eq(e.code, SBX_LIMIT_EXCEEDED, "%s", e.msg);
  cr_expect(strstr(e.msg, "more than 5 entries"), "%s", e.msg);
  spec.limits.max_members = 0;
  spec.limits.max_extracted_bytes = 1000;
  cr_expect_lt(snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e), 0);
  cr_expect(strstr(e.msg, "more than 1000 bytes"), "%s", e.msg);
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/%s.tar.zst", base, SID);
  cr_expect_neq(access(p, F_OK), 0, "a refused snapshot was stored");
  /* Within them, it saves and restores. */
  spec.limits.max_extracted_bytes = 0;
  spec.limits.max_members = 64;
  struct round_trip rt = {0};
  save_wipe_restore(&spec, &rt);
  expect_filled();
  snapshot_record_clear(&rt.rec);
}

#define MANY_DIRS 150
#define MANY_FILES 1000

/* Counts the regular files beneath the host directory P. */
static size_t count_files(const char *p) {
  DIR *d = opendir(p);
  cr_assert_not_null(d, "%s", p);
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.')
      continue;
    if (de->d_type == DT_REG) {
      n++;
    } else if (de->d_type == DT_DIR) {
      char sub[512];
      (void)snprintf(sub, sizeof(sub), "%s/%s", p, de->d_name);
      n += count_files(sub);
    }
  }
  closedir(d);
  return n;
}

/* In a suite of its own for its timeout: a Test's own .timeout in a suite
 * that has one makes Criterion leak 48 bytes, which the sanitizer build
 * reports. */
TestSuite(snapshot_many, .init = start, .fini = stop, .timeout = 600);

Test(snapshot_many, a_150k_file_workspace_saves_and_restores) {
  /* More files than the old limit of 100000 members: a monorepo's
   * checkout is 500k. */
  char p[512];
  double t0 = now_s();
  for (int d = 0; d < MANY_DIRS; d++) {
    (void)snprintf(p, sizeof(p), "%s/pkg%03d", T.root, d);
    cr_assert_eq(mkdir(p, 0755), 0);
    int dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(dfd, 0);
    for (int f = 0; f < MANY_FILES; f++) {
      char name[32], body[32];
      (void)snprintf(name, sizeof(name), "f%04d.c", f);
      int n = snprintf(body, sizeof(body), "%d/%d\n", d, f);
      int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      cr_assert_geq(fd, 0);
      cr_assert_eq(write(fd, body, (size_t)n), n);
      close(fd);
    }
    close(dfd);
  }
  double t1 = now_s();
  struct round_trip rt = {0};
  save_wipe_restore(NULL, &rt);
  fprintf(stderr,
          "%d files: created in %.2f s, saved in %.2f s (%llu bytes), "
          "restored in %.2f s\n",
          MANY_DIRS * MANY_FILES, t1 - t0, rt.save_s,
          (unsigned long long)rt.rec.size, rt.restore_s);
  cr_expect_eq(rt.res.members, MANY_DIRS * MANY_FILES + MANY_DIRS);
  cr_expect_eq(count_files(T.root), (size_t)MANY_DIRS * MANY_FILES);
  expect_file("pkg000/f0000.c", "0/0\n", 0644);
  expect_file("pkg149/f0999.c", "149/999\n", 0644);
  expect_file("pkg077/f0500.c", "77/500\n", 0644);
  snapshot_record_clear(&rt.rec);
}

Test(snapshot, files_hard_linked_outside_the_workspace_are_left_out) {
  /* secret.txt outside the workspace, hard-linked in as "token": its
   * contents are not the workspace's. "a" and "b" link each other only. */
  fill();
  char outside[256], in[512];
  (void)snprintf(outside, sizeof(outside), "%s/secret.txt", scratch);
  FILE *f = fopen(outside, "w");
  cr_assert_not_null(f);
  fputs("another sandbox's token\n", f);
  fclose(f);
  host_path("src/token", in, sizeof(in));
  cr_assert_eq(link(outside, in), 0, "%s", strerror(errno));
  put_str("a", "linked inside\n", 0644);
  char a[512], b[512];
  host_path("a", a, sizeof(a));
  host_path("b", b, sizeof(b));
  cr_assert_eq(link(a, b), 0);
  struct round_trip rt = {0};
  save_wipe_restore(NULL, &rt);
  cr_expect_eq(rt.rec.skipped_total, 1);
  cr_assert_eq(rt.rec.nskipped, 1);
  cr_expect_str_eq(rt.rec.skipped[0], "src/token");
  expect_filled();
  cr_expect_not(exists("src/token"), "the outside file was saved");
  expect_file("b", "linked inside\n", 0644);
  struct stat s1, s2;
  cr_assert_eq(stat(a, &s1), 0);
  cr_assert_eq(stat(b, &s2), 0);
  cr_expect_eq(s1.st_ino, s2.st_ino, "a and b are one file again");
  snapshot_record_clear(&rt.rec);
}

Test(snapshot, snapshot_over_its_limit_is_refused_and_leaves_no_file) {
  fill();
  struct snapshot_spec spec = local_spec();
  spec.compression = SNAPSHOT_UNCOMPRESSED;
  spec.limits.max_input_bytes = 64 << 10;
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_assert_lt(snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e), 0);
  cr_expect_eq(e.code, SBX_LIMIT_EXCEEDED, "%s", e.msg);
  /* sandboxd stops the export at the limit it was given. */
  cr_expect_str_eq(e.msg, "the archive would be larger than 65536 bytes");
  DIR *d = opendir(base);
  cr_assert_not_null(d);
  struct dirent *de;
  while ((de = readdir(d)))
    cr_expect(strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0,
              "\"%s\" was left behind", de->d_name);
  closedir(d);
}

Test(snapshot, uncompressed_snapshot_is_a_plain_tar) {
  fill();
  struct snapshot_spec spec = local_spec();
  spec.compression = SNAPSHOT_UNCOMPRESSED;
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_assert_eq(snapshot_save(&spec, &SB, "plain", NULL, &rec, NULL, NULL, &e),
               0, "%s", e.msg);
  char want[256];
  (void)snprintf(want, sizeof(want), "%s/plain.tar", base);
  cr_expect_str_eq(rec.location, want);
  cr_expect_gt(rec.size, sizeof(big));
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd),
                 "tar -tf %s | grep -qE '^(\\./)?data/big\\.txt$'", want);
  cr_expect_eq(system(cmd), 0, "GNU tar cannot list the snapshot");
  wipe();
  cr_assert_eq(
      snapshot_restore(&spec, &rec, &SB, NULL, NULL, NULL, NULL, NULL, &e), 0,
      "%s", e.msg);
  expect_filled();
  snapshot_record_clear(&rec);
}

Test(snapshot, restore_skipped_when_the_fingerprint_matches) {
  fill();
  struct snapshot_spec spec = local_spec();
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_assert_eq(snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e), 0,
               "%s", e.msg);
  char fp[65];
  cr_assert_eq(snapshot_fingerprint(&spec, &SB, NULL, fp, &e), 0, "%s", e.msg);
  cr_expect_str_eq(fp, rec.sha256,
                   "an unchanged workspace has the "
                   "snapshot's fingerprint");

  put_str("marker", "written after the fingerprint\n", 0644);
  struct snapshot_restore_result res = {0};
  cr_assert_eq(
      snapshot_restore(&spec, &rec, &SB, NULL, fp, &res, NULL, NULL, &e), 0,
      "%s", e.msg);
  cr_expect(res.skipped);
  cr_expect(exists("marker"), "a skipped restore touches nothing");

  /* A changed workspace has another fingerprint, and is restored. */
  put_str("README.md", "# changed\n", 0644);
  char fp2[65];
  cr_assert_eq(snapshot_fingerprint(&spec, &SB, NULL, fp2, &e), 0, "%s", e.msg);
  cr_expect_str_neq(fp2, rec.sha256);
  cr_assert_eq(
      snapshot_restore(&spec, &rec, &SB, NULL, fp2, &res, NULL, NULL, &e), 0,
      "%s", e.msg);
  cr_expect_not(res.skipped);
  expect_file("README.md", "# hello\n", 0644);
  cr_expect_not(exists("marker"));
  snapshot_record_clear(&rec);
}

Test(snapshot, tampered_archive_is_refused_and_nothing_changes) {
  fill();
  struct snapshot_spec spec = local_spec();
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_assert_eq(snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e), 0,
               "%s", e.msg);
  /* Flip one byte in the middle. */
  int fd = open(rec.location, O_RDWR | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  unsigned char b;
  off_t at = (off_t)(rec.size / 2);
  cr_assert_eq(pread(fd, &b, 1, at), 1);
  b ^= 0x40;
  cr_assert_eq(pwrite(fd, &b, 1, at), 1);
  close(fd);

  put_str("README.md", "# changed\n", 0644);
  int r = snapshot_restore(&spec, &rec, &SB, NULL, NULL, NULL, NULL, NULL, &e);
  cr_expect_eq(r, -EBADMSG, "%d: %s", r, e.msg);
  cr_expect(strstr(e.msg, "does not match its fingerprint"), "%s", e.msg);
  cr_expect(strstr(e.msg, rec.location), "%s", e.msg);
  expect_file("README.md", "# changed\n", 0644);
  expect_file("secret.txt", "mine\n", 0640);

  /* A truncated one too. */
  cr_assert_eq(truncate(rec.location, (off_t)rec.size - 1), 0);
  r = snapshot_restore(&spec, &rec, &SB, NULL, NULL, NULL, NULL, NULL, &e);
  cr_expect_eq(r, -EBADMSG, "%d: %s", r, e.msg);
  expect_file("README.md", "# changed\n", 0644);
  snapshot_record_clear(&rec);
}

/* ---- hostile archives whose records match ---- */

struct member {
  const char *path;
  size_t size; /* of zeros */
};

/* Writes a zstd pax tar of MEMBERS to PATH and fills REC for it. */
static void hostile(const char *path, const struct member *m, size_t n,
                    struct snapshot_record *rec) {
  struct archive *a = archive_write_new();
  cr_assert_not_null(a);
  cr_assert_eq(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
  cr_assert_eq(archive_write_add_filter_zstd(a), ARCHIVE_OK);
  cr_assert_eq(archive_write_open_filename(a, path), ARCHIVE_OK);
  static char zeros[65536];
  for (size_t i = 0; i < n; i++) {
    struct archive_entry *en = archive_entry_new();
    archive_entry_set_pathname(en, m[i].path);
    archive_entry_set_filetype(en, AE_IFREG);
    archive_entry_set_perm(en, 0644);
    archive_entry_set_size(en, (la_int64_t)m[i].size);
    cr_assert_eq(archive_write_header(a, en), ARCHIVE_OK, "%s",
                 archive_error_string(a));
    for (size_t left = m[i].size; left > 0;) {
      size_t k = left < sizeof(zeros) ? left : sizeof(zeros);
      cr_assert_eq(archive_write_data(a, zeros, k), (la_ssize_t)k);
      left -= k;
    }
    archive_entry_free(en);
  }
  cr_assert_eq(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);

  size_t len = 0;
  char *data = slurp(path, &len);
  cr_assert_not_null(data);
  uint8_t d[SBX_SHA256_BYTES];
  sbx_sha256(data, len, d);
  free(data);
  memset(rec, 0, sizeof(*rec));
  rec->type = SNAPSHOT_LOCAL;
  rec->location = strdup(path);
  sbx_sha256_hex(d, rec->sha256);
  rec->size = len;
  (void)snprintf(rec->version, sizeof(rec->version), "%s",
                 SNAPSHOT_FINGERPRINT_VERSION);
}

Test(snapshot, hostile_archives_are_refused_by_the_daemon) {
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/escape.tar.zst", scratch);
  struct member up[] = {{"ok.txt", 10}, {"../escape.txt", 10}};
  struct snapshot_record rec;
  hostile(p, up, 2, &rec);
  struct sbx_error e = {0};
  int r = snapshot_restore(NULL, &rec, &SB, NULL, NULL, NULL, NULL, NULL, &e);
  cr_expect_lt(r, 0, "a ../ member was accepted");
  cr_expect(strstr(e.msg, "escape.txt") || strstr(e.msg, ".."), "%s", e.msg);
  char out[256];
  (void)snprintf(out, sizeof(out), "%s/escape.txt", T.dir);
  cr_expect_neq(access(out, F_OK), 0, "something was written outside");
  cr_expect_not(exists("ok.txt"), "a refused archive is not extracted");
  snapshot_record_clear(&rec);

  /* A bomb by header sizes: 4 MiB of zeros in a few KiB, against a 1 MiB
   * extraction limit. */
  (void)snprintf(p, sizeof(p), "%s/bomb.tar.zst", scratch);
  struct member bomb[] = {
      {"a", 1u << 20}, {"b", 1u << 20}, {"c", 1u << 20}, {"d", 1u << 20}};
  hostile(p, bomb, 4, &rec);
  cr_expect_lt(rec.size, 64u << 10);
  struct snapshot_limits lim = {.max_extracted_bytes = 1u << 20};
  r = snapshot_restore(NULL, &rec, &SB, &lim, NULL, NULL, NULL, NULL, &e);
  cr_expect_lt(r, 0, "the bomb was accepted");
  cr_expect(strstr(e.msg, "extracts to more than 1048576 bytes"), "%s", e.msg);
  cr_expect_not(exists("a"));

  /* Too many members. */
  struct snapshot_limits few = {.max_members = 2};
  r = snapshot_restore(NULL, &rec, &SB, &few, NULL, NULL, NULL, NULL, &e);
  cr_expect_lt(r, 0, "the member limit was not applied");
  cr_expect_not(exists("a"));

  /* The input limit applies before anything is read. */
  struct snapshot_limits tiny = {.max_input_bytes = 100};
  r = snapshot_restore(NULL, &rec, &SB, &tiny, NULL, NULL, NULL, NULL, &e);
  cr_expect_eq(r, -EFBIG, "%d: %s", r, e.msg);
  snapshot_record_clear(&rec);
}

/* ---- prune and none ---- */

static void touch(const char *dir, const char *name, const char *when) {
  char cmd[512];
  (void)snprintf(cmd, sizeof(cmd), "touch -d '%s' '%s/%s'", when, dir, name);
  cr_assert_eq(system(cmd), 0);
}

Test(snapshot, prune_removes_snapshots_older_than_30_days) {
  char dir[160];
  (void)snprintf(dir, sizeof(dir), "%s/prune", scratch);
  cr_assert_eq(mkdir(dir, 0700), 0);
  touch(dir, "old.tar.zst", "40 days ago");
  touch(dir, "old-plain.tar", "31 days ago");
  touch(dir, ".old.tar.zst.Ab12Cd", "40 days ago");
  touch(dir, "recent.tar.zst", "29 days ago");
  touch(dir, "new.tar.zst", "now");
  touch(dir, "notes.txt", "90 days ago");
  unsigned removed = 0;
  struct sbx_error e = {0};
  cr_assert_eq(snapshot_prune(dir, 0, &removed, &e), 0, "%s", e.msg);
  cr_expect_eq(removed, 3);
  char p[256];
  const char *gone[] = {"old.tar.zst", "old-plain.tar", ".old.tar.zst.Ab12Cd"};
  const char *kept[] = {"recent.tar.zst", "new.tar.zst", "notes.txt"};
  for (size_t i = 0; i < 3; i++) {
    (void)snprintf(p, sizeof(p), "%s/%s", dir, gone[i]);
    cr_expect_neq(access(p, F_OK), 0, "%s was kept", gone[i]);
    (void)snprintf(p, sizeof(p), "%s/%s", dir, kept[i]);
    cr_expect_eq(access(p, F_OK), 0, "%s was removed", kept[i]);
  }
  cr_assert_eq(snapshot_prune(dir, 1, &removed, &e), 0, "%s", e.msg);
  cr_expect_eq(removed, 1, "recent.tar.zst is older than a day");
  (void)snprintf(p, sizeof(p), "%s/missing", scratch);
  cr_expect_eq(snapshot_prune(p, 0, &removed, &e), 0, "%s", e.msg);
}

Test(snapshot, none_discards) {
  fill();
  struct snapshot_spec spec = {.type = SNAPSHOT_NONE, .base_dir = base};
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_assert_eq(snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e), 0,
               "%s", e.msg);
  cr_expect_eq(rec.type, SNAPSHOT_NONE);
  cr_expect_null(rec.location);
  cr_expect_str_empty(rec.sha256);
  cr_expect_neq(access(base, F_OK), 0, "nothing is written");
  int r = snapshot_restore(&spec, &rec, &SB, NULL, NULL, NULL, NULL, NULL, &e);
  cr_expect_eq(r, -ENOENT);
  bool there = true;
  cr_expect_eq(snapshot_exists(&spec, &rec, &there, &e), 0);
  cr_expect_not(there);
  enum snapshot_type t;
  cr_expect_eq(snapshot_type_parse("none", &t), 0);
  cr_expect_eq(t, SNAPSHOT_NONE);
  cr_expect_eq(snapshot_type_parse("s3", &t), -EINVAL);
}

Test(snapshot, bad_session_ids_and_excludes_are_refused) {
  struct snapshot_spec spec = local_spec();
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_expect_eq(snapshot_save(&spec, &SB, "../evil", NULL, &rec, NULL, NULL, &e),
               -EINVAL);
  cr_expect_eq(snapshot_save(&spec, &SB, ".hidden", NULL, &rec, NULL, NULL, &e),
               -EINVAL);
  const char *const bad[] = {"../up", NULL};
  cr_expect_eq(snapshot_save(&spec, &SB, NULL, bad, &rec, NULL, NULL, &e),
               -EINVAL);
  cr_expect(strstr(e.msg, "../up"), "%s", e.msg);
}

Test(snapshot, default_base_dir_follows_xdg_state_home) {
  char *d = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(setenv("XDG_STATE_HOME", "/x/state", 1), 0);
  cr_assert_eq(snapshot_default_base_dir(&d, &e), 0, "%s", e.msg);
  cr_expect_str_eq(d, "/x/state/sbx/snapshots");
  free(d);
  cr_assert_eq(setenv("XDG_STATE_HOME", "relative", 1), 0);
  cr_assert_eq(setenv("HOME", "/home/u", 1), 0);
  cr_assert_eq(snapshot_default_base_dir(&d, &e), 0, "%s", e.msg);
  cr_expect_str_eq(d, "/home/u/.local/state/sbx/snapshots");
  free(d);
}

/* ---- remote, against nginx ---- */

TestSuite(snapshot_remote, .init = start_dav, .fini = stop, .timeout = 120);

Test(snapshot_remote, round_trip_through_webdav) {
  fill();
  struct snapshot_spec spec = {
      .type = SNAPSHOT_REMOTE, .url = W.url, .excludes = EXCL};
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  progress_calls = 0;
  progress_finished = false;
  cr_assert_eq(
      snapshot_save(&spec, &SB, NULL, NULL, &rec, on_progress, NULL, &e), 0,
      "%s", e.msg);
  cr_expect(progress_finished);
  char want[256];
  (void)snprintf(want, sizeof(want), "%s%s.tar.zst", W.url, SID);
  cr_expect_str_eq(rec.location, want);
  char stored[256];
  (void)snprintf(stored, sizeof(stored), "%s/snap/%s.tar.zst", W.root, SID);
  expect_sha_of(stored, &rec);
  bool there = false;
  cr_assert_eq(snapshot_exists(&spec, &rec, &there, &e), 0, "%s", e.msg);
  cr_expect(there);

  wipe();
  struct snapshot_restore_result res = {0};
  cr_assert_eq(
      snapshot_restore(&spec, &rec, &SB, NULL, NULL, &res, NULL, NULL, &e), 0,
      "%s", e.msg);
  expect_filled();

  /* Without a spec, the record's location is used. */
  wipe();
  cr_assert_eq(
      snapshot_restore(NULL, &rec, &SB, NULL, NULL, &res, NULL, NULL, &e), 0,
      "%s", e.msg);
  expect_filled();
  snapshot_record_clear(&rec);
}

Test(snapshot_remote, object_url_with_a_query_is_kept_out_of_the_record) {
  fill();
  char url[256];
  (void)snprintf(url, sizeof(url), "%sobj/one.tar.zst?X-Amz-Signature=abc",
                 W.url);
  struct snapshot_spec spec = {.type = SNAPSHOT_REMOTE, .url = url};
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_assert_eq(snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e), 0,
               "%s", e.msg);
  char want[256];
  (void)snprintf(want, sizeof(want), "%sobj/one.tar.zst", W.url);
  cr_expect_str_eq(rec.location, want);
  wipe();
  cr_assert_eq(
      snapshot_restore(&spec, &rec, &SB, NULL, NULL, NULL, NULL, NULL, &e), 0,
      "%s", e.msg);
  expect_file("README.md", "# hello\n", 0644);
  snapshot_record_clear(&rec);
}

Test(snapshot_remote, wrong_token_is_a_401_naming_the_url) {
  fill();
  cr_assert_eq(setenv("MY_TOKEN", "wrong", 1), 0);
  struct snapshot_spec spec = {
      .type = SNAPSHOT_REMOTE, .url = W.url, .token_env = "MY_TOKEN"};
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  int r = snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e);
  cr_expect_eq(r, -EACCES, "%d: %s", r, e.msg);
  char want[256];
  (void)snprintf(want, sizeof(want), "401 from %s%s.tar.zst: unauthorized",
                 W.url, SID);
  cr_expect(strstr(e.msg, want), "%s", e.msg);
  cr_expect(strstr(e.msg, "MY_TOKEN"), "%s", e.msg);
  cr_expect_not(strstr(e.msg, "wrong"), "the token leaked: %s", e.msg);
  cr_expect_null(rec.location);

  cr_assert_eq(unsetenv("MY_TOKEN"), 0);
  r = snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e);
  cr_expect_eq(r, -EACCES);
  cr_expect(strstr(e.msg, "no token in $MY_TOKEN"), "%s", e.msg);
}

Test(snapshot_remote, missing_object_is_a_clear_404) {
  struct snapshot_record rec = {0};
  rec.type = SNAPSHOT_REMOTE;
  char url[256];
  (void)snprintf(url, sizeof(url), "%snobody.tar.zst", W.url);
  rec.location = strdup(url);
  memset(rec.sha256, 'a', 64);
  rec.size = 10;
  (void)snprintf(rec.version, sizeof(rec.version), "%s",
                 SNAPSHOT_FINGERPRINT_VERSION);
  struct sbx_error e = {0};
  put_str("keep.txt", "untouched\n", 0644);
  int r = snapshot_restore(NULL, &rec, &SB, NULL, NULL, NULL, NULL, NULL, &e);
  cr_expect_eq(r, -ENOENT, "%d: %s", r, e.msg);
  char want[300];
  (void)snprintf(want, sizeof(want), "404 from %s", url);
  cr_expect(strstr(e.msg, want), "%s", e.msg);
  expect_file("keep.txt", "untouched\n", 0644);
  bool there = true;
  cr_expect_eq(snapshot_exists(NULL, &rec, &there, &e), 0, "%s", e.msg);
  cr_expect_not(there);
  snapshot_record_clear(&rec);
}

Test(snapshot_remote, tampered_object_is_refused) {
  fill();
  struct snapshot_spec spec = {.type = SNAPSHOT_REMOTE, .url = W.url};
  struct snapshot_record rec = {0};
  struct sbx_error e = {0};
  cr_assert_eq(snapshot_save(&spec, &SB, NULL, NULL, &rec, NULL, NULL, &e), 0,
               "%s", e.msg);
  char stored[256];
  (void)snprintf(stored, sizeof(stored), "%s/snap/%s.tar.zst", W.root, SID);
  int fd = open(stored, O_RDWR | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  unsigned char b = 0;
  cr_assert_eq(pread(fd, &b, 1, 100), 1);
  b ^= 1;
  cr_assert_eq(pwrite(fd, &b, 1, 100), 1);
  close(fd);
  put_str("README.md", "# changed\n", 0644);
  int r = snapshot_restore(&spec, &rec, &SB, NULL, NULL, NULL, NULL, NULL, &e);
  cr_expect_eq(r, -EBADMSG, "%d: %s", r, e.msg);
  cr_expect(strstr(e.msg, "does not match its fingerprint"), "%s", e.msg);
  expect_file("README.md", "# changed\n", 0644);

  /* Larger than the input limit: the download stops at the limit. */
  struct snapshot_limits lim = {.max_input_bytes = 1000};
  rec.size = 500; /* a record that lies about the size */
  r = snapshot_restore(&spec, &rec, &SB, &lim, NULL, NULL, NULL, NULL, &e);
  cr_expect_eq(r, -EFBIG, "%d: %s", r, e.msg);
  snapshot_record_clear(&rec);
}
