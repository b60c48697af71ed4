/* File RPC handlers, called directly. Every escape test also checks that the
 * file outside the workspace is unchanged. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/fs/files.h"
#include "tests/support/harness.h"

static struct harness h;
static char out_dir[128]; /* h.dir/out: outside the workspace */

static const char *ws(const char *rel) {
  static char p[4][4200];
  static int i;
  i = (i + 1) % 4;
  (void)snprintf(p[i], sizeof(p[i]), "%s/%s", h.root, rel);
  return p[i];
}

static const char *outp(const char *rel) {
  static char p[4][512];
  static int i;
  i = (i + 1) % 4;
  (void)snprintf(p[i], sizeof(p[i]), "%s/%s", out_dir, rel);
  return p[i];
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return NULL;
  char *buf = NULL;
  size_t cap = 0;
  ssize_t n = getdelim(&buf, &cap, '\0', f);
  fclose(f);
  if (n < 0) {
    free(buf);
    return strdup("");
  }
  return buf;
}

static void expect_secret_intact(void) {
  char *s = slurp(outp("secret"));
  cr_expect_not_null(s, "the outside file must survive");
  if (s)
    cr_expect_str_eq(s, "secret\n", "the outside file must be unchanged");
  free(s);
  struct stat st;
  cr_expect_eq(lstat(outp("secret"), &st), 0);
  cr_expect_eq(st.st_mode & 07777, 0640, "outside mode unchanged");
  cr_expect_eq(st.st_uid, getuid(), "outside owner unchanged");
}

static void setup(void) {
  harness_init(&h);
  (void)snprintf(out_dir, sizeof(out_dir), "%s/out", h.dir);
  cr_assert_eq(mkdir(out_dir, 0755), 0);
  FILE *f = fopen(outp("secret"), "w");
  cr_assert_not_null(f);
  fputs("secret\n", f);
  fclose(f);
  cr_assert_eq(chmod(outp("secret"), 0640), 0);
  harness_write(&h, "sub/f", "inside\n");
  cr_assert_eq(symlink("/", ws("x")), 0);               /* escapes: absolute */
  cr_assert_eq(symlink("..", ws("up")), 0);             /* escapes: .. */
  cr_assert_eq(symlink("sub", ws("inner")), 0);         /* stays inside */
  cr_assert_eq(symlink(out_dir, ws("outlink")), 0);     /* a dir outside */
  cr_assert_eq(symlink(outp("secret"), ws("leak")), 0); /* a file outside */
  cr_assert_eq(symlink("sub/../../out/secret", ws("dotdot")), 0);
}

static void teardown(void) {
  harness_fini(&h);
}

TestSuite(files, .init = setup, .fini = teardown);

/* ---- request helpers ---------------------------------------------------- */

static struct harness_call *run(Sbx__V1__Request *req,
                                int (*fn)(struct rpc_call *)) {
  return harness_call(&h, req, fn);
}

static struct harness_call *do_stat(const char *path) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileStat m = SBX__V1__FILE_STAT__INIT;
  m.path = (char *)path;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_STAT;
  req.file_stat = &m;
  return run(&req, rpc_file_stat);
}

static struct harness_call *do_read(const char *path, uint64_t off,
                                    uint32_t len) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileRead m = SBX__V1__FILE_READ__INIT;
  m.path = (char *)path;
  m.offset = off;
  m.length = len;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_READ;
  req.file_read = &m;
  return run(&req, rpc_file_read);
}

struct wopt {
  const char *path;
  const char *data;
  Sbx__V1__WriteMode mode;
  uint32_t perm;
  bool atomic, parents;
  const char *owner, *group;
  uint64_t offset;
};

static struct harness_call *do_write(const struct wopt *o) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileWrite m = SBX__V1__FILE_WRITE__INIT;
  m.path = (char *)o->path;
  m.data.data = (uint8_t *)o->data;
  m.data.len = o->data ? strlen(o->data) : 0;
  m.mode = o->mode;
  m.perm = o->perm;
  m.atomic = o->atomic;
  m.parents = o->parents;
  if (o->owner)
    m.owner = (char *)o->owner;
  if (o->group)
    m.group = (char *)o->group;
  m.offset = o->offset;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_WRITE;
  req.file_write = &m;
  return run(&req, rpc_file_write);
}
#define WRITE(...) do_write(&(struct wopt){__VA_ARGS__})

static struct harness_call *do_list(const char *path, uint32_t depth,
                                    uint32_t limit) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileList m = SBX__V1__FILE_LIST__INIT;
  m.path = (char *)path;
  m.depth = depth;
  m.limit = limit;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_LIST;
  req.file_list = &m;
  return run(&req, rpc_file_list);
}

static struct harness_call *do_mkdir(const char *path, bool parents,
                                     uint32_t mode) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileMkdir m = SBX__V1__FILE_MKDIR__INIT;
  m.path = (char *)path;
  m.parents = parents;
  m.mode = mode;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_MKDIR;
  req.file_mkdir = &m;
  return run(&req, rpc_file_mkdir);
}

static struct harness_call *do_remove(const char *path, bool recursive,
                                      bool missing_ok) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileRemove m = SBX__V1__FILE_REMOVE__INIT;
  m.path = (char *)path;
  m.recursive = recursive;
  m.missing_ok = missing_ok;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_REMOVE;
  req.file_remove = &m;
  return run(&req, rpc_file_remove);
}

static struct harness_call *do_rename(const char *from, const char *to,
                                      bool overwrite) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileRename m = SBX__V1__FILE_RENAME__INIT;
  m.from = (char *)from;
  m.to = (char *)to;
  m.overwrite = overwrite;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_RENAME;
  req.file_rename = &m;
  return run(&req, rpc_file_rename);
}

static struct harness_call *do_chmod(const char *path, uint32_t mode,
                                     bool recursive) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileChmod m = SBX__V1__FILE_CHMOD__INIT;
  m.path = (char *)path;
  m.mode = mode;
  m.recursive = recursive;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_CHMOD;
  req.file_chmod = &m;
  return run(&req, rpc_file_chmod);
}

static struct harness_call *do_chown(const char *path, const char *user,
                                     const char *group, bool recursive) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileChown m = SBX__V1__FILE_CHOWN__INIT;
  m.path = (char *)path;
  m.user = (char *)(user ? user : "");
  m.group = (char *)(group ? group : "");
  m.recursive = recursive;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_CHOWN;
  req.file_chown = &m;
  return run(&req, rpc_file_chown);
}

static struct harness_call *do_exists(const char *path) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  Sbx__V1__FileExists m = SBX__V1__FILE_EXISTS__INIT;
  m.path = (char *)path;
  req.body_case = SBX__V1__REQUEST__BODY_FILE_EXISTS;
  req.file_exists = &m;
  return run(&req, rpc_file_exists);
}

/* Expects HC to have failed with CODE and a message containing WORDS; frees
 * it. */
static void expect_fail(struct harness_call *hc, enum sbx_code code,
                        const char *words, const char *what) {
  cr_expect_lt(hc->rc, 0, "%s must fail", what);
  enum sbx_code got = hc->call.err.code != SBX_OK ? hc->call.err.code
                                                  : sbx_code_from_errno(hc->rc);
  cr_expect_eq(got, code, "%s: code %s, want %s (%s)", what, sbx_code_name(got),
               sbx_code_name(code), hc->call.err.msg);
  if (words)
    cr_expect(strstr(hc->call.err.msg, words) != NULL,
              "%s: message \"%s\" lacks \"%s\"", what, hc->call.err.msg, words);
  harness_call_free(hc);
}

static void expect_ok(struct harness_call *hc, const char *what) {
  cr_expect_eq(hc->rc, 0, "%s: %s", what, hc->call.err.msg);
  harness_call_free(hc);
}

static mode_t mode_of(const char *path) {
  struct stat st;
  cr_assert_eq(lstat(path, &st), 0, "%s", path);
  return st.st_mode & 07777;
}

/* Sets up a grant directory (outside the root) named NAME under h.dir. */
static void add_grant(const char *name, bool ro) {
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/%s", h.dir, name);
  cr_assert_eq(mkdir(p, 0755), 0);
  char f[300];
  (void)snprintf(f, sizeof(f), "%s/g.txt", p);
  FILE *fp = fopen(f, "w");
  cr_assert_not_null(fp);
  fputs("grant\n", fp);
  fclose(fp);
  size_t n = h.d.ngrants + 1;
  h.d.grants = realloc(h.d.grants, n * sizeof(*h.d.grants));
  h.d.grant_fds = realloc(h.d.grant_fds, n * sizeof(int));
  cr_assert(h.d.grants && h.d.grant_fds);
  h.d.grants[n - 1].path = strdup(p);
  h.d.grants[n - 1].read_only = ro;
  h.d.grant_fds[n - 1] = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
  cr_assert_geq(h.d.grant_fds[n - 1], 0);
  h.d.ngrants = n;
}

static void free_grants(void) {
  for (size_t i = 0; i < h.d.ngrants; i++) {
    close(h.d.grant_fds[i]);
    free(h.d.grants[i].path);
  }
  free(h.d.grants);
  free(h.d.grant_fds);
  h.d.grants = NULL;
  h.d.grant_fds = NULL;
  h.d.ngrants = 0;
}

/* Runs the caller's checks with the effective ids of "nobody" when root, so
 * that permissions apply; back to root afterwards. */
static void become_nobody(void) {
  if (geteuid() == 0) {
    cr_assert_eq(setresgid(-1, 65534, -1), 0);
    cr_assert_eq(setresuid(-1, 65534, -1), 0);
  }
}

static void become_self(void) {
  if (getuid() == 0) {
    cr_assert_eq(setresuid(-1, 0, -1), 0);
    cr_assert_eq(setresgid(-1, 0, -1), 0);
  }
}

/* ---- stat --------------------------------------------------------------- */

Test(files, stat_reports_types_and_links) {
  struct harness_call *hc = do_stat("sub/f");
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_assert_eq(hc->resp.body_case, SBX__V1__RESPONSE__BODY_FILE_STAT);
  Sbx__V1__FileInfo *fi = hc->resp.file_stat;
  cr_expect_eq(fi->type, SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR);
  cr_expect_eq(fi->size, 7);
  cr_expect_str_eq(fi->path, "sub/f");
  cr_expect_eq(fi->nlink, 1);
  cr_expect_gt(fi->mtime_ns, 0);
  harness_call_free(hc);

  hc = do_stat("");
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_expect_eq(hc->resp.file_stat->type,
               SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY);
  harness_call_free(hc);

  /* The leaf symlink is reported, even one pointing outside. */
  hc = do_stat("x");
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_expect_eq(hc->resp.file_stat->type, SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK);
  cr_expect_str_eq(hc->resp.file_stat->link_target, "/");
  harness_call_free(hc);

  hc = do_stat(ws("inner"));
  cr_assert_eq(hc->rc, 0, "absolute path under the root: %s", hc->call.err.msg);
  cr_expect_str_eq(hc->resp.file_stat->link_target, "sub");
  harness_call_free(hc);

  expect_fail(do_stat("nope"), SBX_NOT_FOUND, "\"nope\"", "stat missing");
}

Test(files, stat_refuses_escapes) {
  expect_fail(do_stat("x/etc/passwd"), SBX_PERMISSION_DENIED, "escapes",
              "stat through ln -s /");
  expect_fail(do_stat("up/out/secret"), SBX_PERMISSION_DENIED, "escapes",
              "stat through a .. link");
  expect_fail(do_stat("outlink/secret"), SBX_PERMISSION_DENIED, "escapes",
              "stat through a symlinked parent");
  expect_fail(do_stat("../out/secret"), SBX_PERMISSION_DENIED, "escape",
              "stat of ..");
  expect_fail(do_stat("/etc/passwd"), SBX_PERMISSION_DENIED, "escapes",
              "stat of an absolute path outside");
}

/* ---- read --------------------------------------------------------------- */

Test(files, read_ranges_and_eof) {
  harness_write(&h, "r.txt", "0123456789");
  struct harness_call *hc = do_read("r.txt", 0, 0);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  Sbx__V1__FileReadReply *r = hc->resp.file_read;
  cr_expect_eq(r->data.len, 10);
  cr_expect(memcmp(r->data.data, "0123456789", 10) == 0);
  cr_expect_eq(r->size, 10);
  cr_expect(r->eof);
  harness_call_free(hc);

  hc = do_read("r.txt", 3, 4);
  cr_assert_eq(hc->rc, 0);
  r = hc->resp.file_read;
  cr_expect_eq(r->data.len, 4);
  cr_expect(memcmp(r->data.data, "3456", 4) == 0);
  cr_expect(!r->eof);
  harness_call_free(hc);

  hc = do_read("r.txt", 6, 100);
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.file_read->data.len, 4);
  cr_expect(hc->resp.file_read->eof);
  harness_call_free(hc);

  hc = do_read("r.txt", 50, 0);
  cr_assert_eq(hc->rc, 0, "reading past the end is empty, not an error");
  cr_expect_eq(hc->resp.file_read->data.len, 0);
  cr_expect(hc->resp.file_read->eof);
  harness_call_free(hc);

  /* The server's cap bounds every read. */
  h.d.limits.max_read_bytes = 4;
  hc = do_read("r.txt", 0, 0);
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.file_read->data.len, 4);
  cr_expect(!hc->resp.file_read->eof);
  harness_call_free(hc);
  hc = do_read("r.txt", 0, 1000);
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.file_read->data.len, 4);
  harness_call_free(hc);
}

Test(files, read_refuses_non_files) {
  expect_fail(do_read("sub", 0, 0), SBX_INVALID_ARGUMENT, "is a directory",
              "read of a directory");
  cr_assert_eq(mkfifo(ws("fifo"), 0644), 0);
  expect_fail(do_read("fifo", 0, 0), SBX_INVALID_ARGUMENT, "not a regular file",
              "read of a fifo (must not block)");
  expect_fail(do_read("missing", 0, 0), SBX_NOT_FOUND, "\"missing\"",
              "read of a missing file");
}

Test(files, read_follows_links_inside_only) {
  struct harness_call *hc = do_read("inner/f", 0, 0);
  cr_assert_eq(hc->rc, 0, "a link inside is followed: %s", hc->call.err.msg);
  cr_expect_eq(hc->resp.file_read->data.len, 7);
  harness_call_free(hc);
  cr_assert_eq(symlink("sub/f", ws("flink")), 0);
  hc = do_read("flink", 0, 0);
  cr_assert_eq(hc->rc, 0, "a leaf link inside is followed: %s",
               hc->call.err.msg);
  harness_call_free(hc);

  const char *bad[] = {
      "x/etc/passwd", "up/out/secret",          "outlink/secret", "leak",
      "dotdot",       "inner/../up/out/secret", "../out/secret"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    hc = do_read(bad[i], 0, 0);
    cr_expect_lt(hc->rc, 0, "read of %s must fail", bad[i]);
    cr_expect_eq(hc->call.err.code, SBX_PERMISSION_DENIED, "%s: %s", bad[i],
                 hc->call.err.msg);
    cr_expect_eq(hc->resp.body_case, SBX__V1__RESPONSE__BODY__NOT_SET);
    harness_call_free(hc);
  }
}

/* ---- write -------------------------------------------------------------- */

Test(files, write_modes) {
  struct harness_call *hc = WRITE(.path = "w.txt", .data = "hello");
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_expect_eq(hc->resp.file_write->size, 5);
  harness_call_free(hc);
  char *s = harness_read(&h, "w.txt");
  cr_expect_str_eq(s, "hello");
  free(s);

  expect_ok(WRITE(.path = "w.txt", .data = "hi"), "truncate");
  s = harness_read(&h, "w.txt");
  cr_expect_str_eq(s, "hi", "truncate replaces the content");
  free(s);

  expect_fail(WRITE(.path = "w.txt", .data = "x",
                    .mode = SBX__V1__WRITE_MODE__WRITE_CREATE),
              SBX_ALREADY_EXISTS, "already exists", "create over a file");
  expect_ok(WRITE(.path = "new.txt", .data = "n",
                  .mode = SBX__V1__WRITE_MODE__WRITE_CREATE),
            "create");

  hc = WRITE(.path = "w.txt", .data = "!!",
             .mode = SBX__V1__WRITE_MODE__WRITE_APPEND);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_expect_eq(hc->resp.file_write->size, 4);
  harness_call_free(hc);
  s = harness_read(&h, "w.txt");
  cr_expect_str_eq(s, "hi!!");
  free(s);

  /* Resumable chunks: write the second chunk first, then the first. */
  expect_ok(WRITE(.path = "chunks", .data = "world",
                  .mode = SBX__V1__WRITE_MODE__WRITE_AT, .offset = 6),
            "at 6");
  hc = WRITE(.path = "chunks", .data = "hello ",
             .mode = SBX__V1__WRITE_MODE__WRITE_AT, .offset = 0);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_expect_eq(hc->resp.file_write->size, 11);
  harness_call_free(hc);
  s = harness_read(&h, "chunks");
  cr_expect_str_eq(s, "hello world");
  free(s);

  expect_fail(WRITE(.path = "w.txt", .data = "x", .offset = 3),
              SBX_INVALID_ARGUMENT, "WRITE_AT", "offset without WRITE_AT");
  expect_fail(WRITE(.path = "sub", .data = "x"), SBX_INVALID_ARGUMENT,
              "is a directory", "write over a directory");
  cr_assert_eq(mkfifo(ws("fifo"), 0644), 0);
  expect_fail(WRITE(.path = "fifo", .data = "x"), SBX_INVALID_ARGUMENT,
              "not a regular file", "write to a fifo (must not block)");
  expect_fail(WRITE(.path = "fifo", .data = "x",
                    .mode = SBX__V1__WRITE_MODE__WRITE_APPEND),
              SBX_INVALID_ARGUMENT, "not a regular file", "append to a fifo");
  expect_fail(WRITE(.path = "", .data = "x"), SBX_INVALID_ARGUMENT, "root",
              "write to the root");
  expect_fail(WRITE(.path = "w.txt", .data = "x", .mode = 17),
              SBX_INVALID_ARGUMENT, "unknown write mode", "bad mode");
}

Test(files, write_perm_is_exact) {
  mode_t old = umask(077);
  expect_ok(WRITE(.path = "p0", .data = "x"), "default perm");
  cr_expect_eq(mode_of(ws("p0")), 0644, "perm 0 means 0644, umask ignored");
  expect_ok(WRITE(.path = "p1", .data = "x", .perm = 0751), "perm 0751");
  cr_expect_eq(mode_of(ws("p1")), 0751);
  expect_ok(WRITE(.path = "p2", .data = "x", .perm = 0600, .atomic = true),
            "atomic perm");
  cr_expect_eq(mode_of(ws("p2")), 0600);
  /* An existing file keeps its mode. */
  expect_ok(WRITE(.path = "p1", .data = "y", .perm = 0600), "rewrite");
  cr_expect_eq(mode_of(ws("p1")), 0751);
  umask(old);

  expect_fail(WRITE(.path = "p3", .data = "x", .perm = 010000),
              SBX_INVALID_ARGUMENT, "07777", "perm beyond 07777");
  h.d.is_root = false;
  expect_fail(WRITE(.path = "p3", .data = "x", .perm = 04755),
              SBX_PERMISSION_DENIED, "setuid", "setuid when not root");
  cr_expect_neq(access(ws("p3"), F_OK), 0, "nothing written");
  h.d.is_root = getuid() == 0;
  if (h.d.is_root) {
    expect_ok(WRITE(.path = "p4", .data = "x", .perm = 04755), "setuid");
    cr_expect_eq(mode_of(ws("p4")), 04755);
  }
}

/* Names in the root directory, sorted, joined with ','. */
static void dir_names(const char *dir, char *out, size_t n) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  char *names[64];
  size_t k = 0;
  struct dirent *de;
  while ((de = readdir(d)) && k < 64)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
      names[k++] = strdup(de->d_name);
  closedir(d);
  for (size_t i = 0; i < k; i++)
    for (size_t j = i + 1; j < k; j++)
      if (strcmp(names[j], names[i]) < 0) {
        char *t = names[i];
        names[i] = names[j];
        names[j] = t;
      }
  out[0] = '\0';
  for (size_t i = 0; i < k; i++) {
    if (i)
      strncat(out, ",", n - strlen(out) - 1);
    strncat(out, names[i], n - strlen(out) - 1);
    free(names[i]);
  }
}

Test(files, write_atomic_leaves_no_temp_files) {
  cr_assert_eq(mkdir(ws("at"), 0755), 0);
  harness_write(&h, "at/a", "old");
  cr_assert_eq(chmod(ws("at/a"), 0600), 0);
  struct harness_call *hc =
      WRITE(.path = "at/a", .data = "new", .atomic = true);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_expect_eq(hc->resp.file_write->size, 3);
  harness_call_free(hc);
  char *s = harness_read(&h, "at/a");
  cr_expect_str_eq(s, "new");
  free(s);
  cr_expect_eq(mode_of(ws("at/a")), 0600, "replacing keeps the mode");

  expect_ok(WRITE(.path = "at/b", .data = "b", .atomic = true,
                  .mode = SBX__V1__WRITE_MODE__WRITE_CREATE),
            "atomic create");
  expect_fail(WRITE(.path = "at/b", .data = "again", .atomic = true,
                    .mode = SBX__V1__WRITE_MODE__WRITE_CREATE),
              SBX_ALREADY_EXISTS, "already exists", "atomic create over b");
  s = harness_read(&h, "at/b");
  cr_expect_str_eq(s, "b", "a refused create changes nothing");
  free(s);
  expect_fail(WRITE(.path = "at/c", .data = "x", .atomic = true,
                    .mode = SBX__V1__WRITE_MODE__WRITE_APPEND),
              SBX_INVALID_ARGUMENT, "atomic", "atomic append");
  expect_fail(WRITE(.path = "at", .data = "x", .atomic = true),
              SBX_INVALID_ARGUMENT, "is a directory", "atomic over a dir");

  char names[256];
  dir_names(ws("at"), names, sizeof(names));
  cr_expect_str_eq(names, "a,b", "no temporary file is left behind");
}

Test(files, write_parents) {
  expect_fail(WRITE(.path = "a/b/c.txt", .data = "x"), SBX_NOT_FOUND, NULL,
              "missing parents");
  expect_ok(WRITE(.path = "a/b/c.txt", .data = "x", .parents = true),
            "parents");
  char *s = harness_read(&h, "a/b/c.txt");
  cr_expect_str_eq(s, "x");
  free(s);
  cr_expect_eq(mode_of(ws("a/b")), 0755);
  /* Through a link inside: fine, it lands in sub/. */
  expect_ok(WRITE(.path = "inner/n/m.txt", .data = "y", .parents = true),
            "parents through an inside link");
  cr_expect_eq(access(ws("sub/n/m.txt"), F_OK), 0);
  /* A file in the way. */
  expect_fail(WRITE(.path = "sub/f/g", .data = "x", .parents = true),
              SBX_INVALID_ARGUMENT, "not a directory", "a file as parent");
}

Test(files, write_never_escapes) {
  expect_fail(WRITE(.path = "leak", .data = "pwned"), SBX_INVALID_ARGUMENT,
              "symbolic link", "write through a leaf link to outside");
  expect_fail(WRITE(.path = "leak", .data = "pwned",
                    .mode = SBX__V1__WRITE_MODE__WRITE_APPEND),
              SBX_INVALID_ARGUMENT, "symbolic link", "append through a link");
  expect_fail(WRITE(.path = "outlink/secret", .data = "pwned"),
              SBX_PERMISSION_DENIED, "escapes", "write via a linked parent");
  expect_fail(WRITE(.path = "outlink/new/f", .data = "pwned", .parents = true),
              SBX_PERMISSION_DENIED, "escapes", "parents via a linked parent");
  expect_fail(
      WRITE(.path = "x/tmp/sbx-pwned", .data = "pwned", .parents = true),
      SBX_PERMISSION_DENIED, "escapes", "parents via ln -s /");
  expect_fail(WRITE(.path = "up/out/secret", .data = "pwned", .atomic = true),
              SBX_PERMISSION_DENIED, "escapes", "atomic via ..");
  expect_fail(WRITE(.path = "../out/secret", .data = "pwned"),
              SBX_PERMISSION_DENIED, "escape", "write to ..");
  cr_expect_neq(access(outp("new"), F_OK), 0, "nothing created outside");
  cr_expect_neq(access("/tmp/sbx-pwned", F_OK), 0);
  expect_secret_intact();

  /* Atomic replaces the link itself, never its target. */
  expect_ok(WRITE(.path = "leak", .data = "mine", .atomic = true),
            "atomic over a link");
  struct stat st;
  cr_assert_eq(lstat(ws("leak"), &st), 0);
  cr_expect(S_ISREG(st.st_mode), "the link became a file");
  cr_expect_eq(st.st_mode & 07777, 0644);
  expect_secret_intact();
}

Test(files, write_owner_needs_root) {
  h.d.is_root = false;
  expect_fail(WRITE(.path = "o1", .data = "x", .owner = "nobody"),
              SBX_PERMISSION_DENIED, "needs sandboxd to run as root",
              "owner when not root");
  cr_expect_neq(access(ws("o1"), F_OK), 0);
  h.d.is_root = getuid() == 0;
  expect_fail(WRITE(.path = "o1", .data = "x", .owner = "no-such-user-x"),
              SBX_NOT_FOUND, "unknown user", "unknown owner");
  expect_fail(WRITE(.path = "o1", .data = "x", .owner = "Bad:Name"),
              SBX_INVALID_ARGUMENT, "invalid user", "malformed owner");
  if (!h.d.is_root)
    cr_skip_test("owners need root");
  expect_ok(
      WRITE(.path = "o1", .data = "x", .owner = "nobody", .group = "65534"),
      "owner nobody");
  struct stat st;
  cr_assert_eq(stat(ws("o1"), &st), 0);
  cr_expect_eq(st.st_uid, 65534);
  cr_expect_eq(st.st_gid, 65534);
  expect_ok(WRITE(.path = "o2", .data = "x", .owner = "nobody", .atomic = true),
            "atomic owner nobody");
  cr_assert_eq(stat(ws("o2"), &st), 0);
  cr_expect_eq(st.st_uid, 65534);
  /* Atomic replacement keeps the owner. */
  expect_ok(WRITE(.path = "o2", .data = "y", .atomic = true), "replace");
  cr_assert_eq(stat(ws("o2"), &st), 0);
  cr_expect_eq(st.st_uid, 65534);
}

/* ---- grants ------------------------------------------------------------- */

Test(files, read_only_grant_refuses_every_write) {
  add_grant("ro", true);
  add_grant("rw", false);
  char ro_file[256], ro_dir[256], rw_file[256];
  (void)snprintf(ro_file, sizeof(ro_file), "%s/ro/g.txt", h.dir);
  (void)snprintf(ro_dir, sizeof(ro_dir), "%s/ro/d", h.dir);
  (void)snprintf(rw_file, sizeof(rw_file), "%s/rw/g.txt", h.dir);
  const char *ro = "read-only extra path grant";

  struct harness_call *hc = do_read(ro_file, 0, 0);
  cr_expect_eq(hc->rc, 0, "reading a read-only grant works: %s",
               hc->call.err.msg);
  harness_call_free(hc);
  hc = do_exists(ro_file);
  cr_expect_eq(hc->rc, 0);
  harness_call_free(hc);

  expect_fail(WRITE(.path = ro_file, .data = "x"), SBX_PERMISSION_DENIED, ro,
              "write");
  expect_fail(WRITE(.path = ro_file, .data = "x", .atomic = true),
              SBX_PERMISSION_DENIED, ro, "atomic write");
  expect_fail(do_mkdir(ro_dir, true, 0), SBX_PERMISSION_DENIED, ro, "mkdir");
  expect_fail(do_remove(ro_file, false, false), SBX_PERMISSION_DENIED, ro,
              "remove");
  expect_fail(do_rename(ro_file, ro_dir, false), SBX_PERMISSION_DENIED, ro,
              "rename");
  expect_fail(do_rename("sub/f", ro_dir, false), SBX_PERMISSION_DENIED, ro,
              "rename into");
  expect_fail(do_chmod(ro_file, 0600, false), SBX_PERMISSION_DENIED, ro,
              "chmod");
  expect_fail(do_chown(ro_file, "0", NULL, false), SBX_PERMISSION_DENIED, ro,
              "chown");
  char *s = slurp(ro_file);
  cr_expect_str_eq(s, "grant\n", "the read-only file is unchanged");
  free(s);
  cr_expect_eq(mode_of(ro_file), 0644);

  expect_ok(WRITE(.path = rw_file, .data = "changed"), "write in a rw grant");
  s = slurp(rw_file);
  cr_expect_str_eq(s, "changed");
  free(s);
  expect_fail(do_rename(rw_file, "moved", false), SBX_INVALID_ARGUMENT,
              "different roots", "rename across grants");
  free_grants();
}

/* ---- exists ------------------------------------------------------------- */

Test(files, exists_absent_vs_errors) {
  struct harness_call *hc = do_exists("sub/f");
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.file_exists->existence, SBX__V1__EXISTENCE__EXISTS);
  cr_expect_eq(hc->resp.file_exists->type,
               SBX__V1__FILE_TYPE__FILE_TYPE_REGULAR);
  harness_call_free(hc);

  const char *absent[] = {"nope", "nope/deeper", "sub/f/below"};
  for (size_t i = 0; i < 3; i++) {
    hc = do_exists(absent[i]);
    cr_expect_eq(hc->rc, 0, "%s: %s", absent[i], hc->call.err.msg);
    cr_expect_eq(hc->resp.file_exists->existence, SBX__V1__EXISTENCE__ABSENT,
                 "%s is absent", absent[i]);
    harness_call_free(hc);
  }

  /* The leaf link itself exists, wherever it points. */
  hc = do_exists("x");
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.file_exists->type,
               SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK);
  harness_call_free(hc);

  expect_fail(do_exists("x/etc/passwd"), SBX_PERMISSION_DENIED, "escapes",
              "exists through ln -s /");
  expect_fail(do_exists("outlink/nothing-here"), SBX_PERMISSION_DENIED,
              "escapes", "exists of a missing file behind an escaping link");
  expect_fail(do_exists("../out/secret"), SBX_PERMISSION_DENIED, "escape",
              "exists of ..");

  cr_assert_eq(mkdir(ws("locked"), 0700), 0);
  harness_write(&h, "locked/f", "x");
  if (getuid() != 0)
    cr_assert_eq(chmod(ws("locked"), 0), 0);
  become_nobody();
  hc = do_exists("locked/f");
  become_self();
  expect_fail(hc, SBX_PERMISSION_DENIED, "permission denied",
              "exists behind a permission error");
}

/* ---- list --------------------------------------------------------------- */

static void expect_names(const Sbx__V1__FileListReply *r, const char *const *w,
                         size_t n, const char *what) {
  cr_expect_eq(r->n_entries, n, "%s: %zu entries, want %zu", what, r->n_entries,
               n);
  for (size_t i = 0; i < n && i < r->n_entries; i++)
    cr_expect_str_eq(r->entries[i]->path, w[i], "%s: entry %zu", what, i);
}

Test(files, list_sorted_depth_limit) {
  cr_assert_eq(mkdir(ws("l"), 0755), 0);
  harness_write(&h, "l/b", "b");
  harness_write(&h, "l/a", "a");
  harness_write(&h, "l/c/d", "d");
  harness_write(&h, "l/c/e/f", "f");
  harness_write(&h, "l/c-x", "x");
  cr_assert_eq(symlink(out_dir, ws("l/z")), 0);

  const char *one[] = {"a", "b", "c", "c-x", "z"};
  struct harness_call *hc = do_list("l", 1, 0);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  expect_names(hc->resp.file_list, one, 5, "depth 1");
  cr_expect(!hc->resp.file_list->truncated);
  cr_expect_eq(hc->resp.file_list->entries[4]->type,
               SBX__V1__FILE_TYPE__FILE_TYPE_SYMLINK);
  cr_expect_str_eq(hc->resp.file_list->entries[4]->link_target, out_dir);
  cr_expect_eq(hc->resp.file_list->entries[2]->type,
               SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY);
  harness_call_free(hc);
  hc = do_list("l", 0, 0);
  cr_assert_eq(hc->rc, 0);
  expect_names(hc->resp.file_list, one, 5, "depth 0");
  harness_call_free(hc);

  /* Recursive: a parent before its children; the link is not followed. */
  const char *all[] = {"a", "b", "c", "c/d", "c/e", "c/e/f", "c-x", "z"};
  hc = do_list("l", 10, 0);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  expect_names(hc->resp.file_list, all, 8, "depth 10");
  cr_expect(!hc->resp.file_list->truncated);
  harness_call_free(hc);
  const char *two[] = {"a", "b", "c", "c/d", "c/e", "c-x", "z"};
  hc = do_list("l", 2, 0);
  cr_assert_eq(hc->rc, 0);
  expect_names(hc->resp.file_list, two, 7, "depth 2");
  harness_call_free(hc);

  hc = do_list("l", 10, 4);
  cr_assert_eq(hc->rc, 0);
  expect_names(hc->resp.file_list, all, 4, "limit 4");
  cr_expect(hc->resp.file_list->truncated);
  harness_call_free(hc);
  hc = do_list("l", 10, 8);
  cr_assert_eq(hc->rc, 0);
  expect_names(hc->resp.file_list, all, 8, "limit 8");
  cr_expect(!hc->resp.file_list->truncated, "exactly the limit");
  harness_call_free(hc);

  h.d.limits.max_list_entries = 3;
  hc = do_list("l", 1, 100);
  cr_assert_eq(hc->rc, 0);
  expect_names(hc->resp.file_list, one, 3, "server cap");
  cr_expect(hc->resp.file_list->truncated);
  harness_call_free(hc);
  hc = do_list("l", 1, 0);
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.file_list->n_entries, 3);
  harness_call_free(hc);
}

Test(files, list_errors_and_escapes) {
  expect_fail(do_list("sub/f", 1, 0), SBX_INVALID_ARGUMENT, "not a directory",
              "list a file");
  expect_fail(do_list("nope", 1, 0), SBX_NOT_FOUND, "\"nope\"", "list missing");
  expect_fail(do_list("x", 1, 0), SBX_PERMISSION_DENIED, "escapes",
              "list ln -s /");
  expect_fail(do_list("outlink", 1, 0), SBX_PERMISSION_DENIED, "escapes",
              "list a link to outside");
  struct harness_call *hc = do_list("inner", 1, 0);
  cr_assert_eq(hc->rc, 0, "a link to a directory inside is listed: %s",
               hc->call.err.msg);
  cr_expect_eq(hc->resp.file_list->n_entries, 1);
  harness_call_free(hc);
  hc = do_list("", 1, 0);
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.file_list->n_entries, 7, "the root's entries");
  harness_call_free(hc);
}

/* ---- mkdir -------------------------------------------------------------- */

Test(files, mkdir_cases) {
  mode_t old = umask(077);
  expect_ok(do_mkdir("m", false, 0), "mkdir");
  cr_expect_eq(mode_of(ws("m")), 0755, "mode 0 means 0755, exactly");
  expect_ok(do_mkdir("m2", false, 0710), "mkdir 0710");
  cr_expect_eq(mode_of(ws("m2")), 0710);
  umask(old);
  expect_fail(do_mkdir("m", false, 0), SBX_ALREADY_EXISTS, "already exists",
              "mkdir existing");
  expect_ok(do_mkdir("m", true, 0), "mkdir -p existing");
  expect_ok(do_mkdir("", true, 0), "mkdir -p of the root");
  expect_ok(do_mkdir("inner", true, 0), "mkdir -p of a link to a dir inside");
  expect_fail(do_mkdir("p/q/r", false, 0), SBX_NOT_FOUND, NULL,
              "missing parent");
  expect_ok(do_mkdir("p/q/r", true, 0700), "mkdir -p");
  cr_expect_eq(mode_of(ws("p/q/r")), 0700);
  cr_expect_eq(mode_of(ws("p/q")), 0755);
  expect_fail(do_mkdir("sub/f", true, 0), SBX_ALREADY_EXISTS, "file",
              "mkdir -p over a file");
  expect_fail(do_mkdir("m3", false, 017777), SBX_INVALID_ARGUMENT, "07777",
              "bad mode");
  expect_fail(do_mkdir("outlink/evil", false, 0), SBX_PERMISSION_DENIED,
              "escapes", "mkdir via a link to outside");
  expect_fail(do_mkdir("x/tmp/sbx-evil/a", true, 0), SBX_PERMISSION_DENIED,
              "escapes", "mkdir -p via ln -s /");
  expect_fail(do_mkdir("outlink", true, 0), SBX_PERMISSION_DENIED, "escapes",
              "mkdir -p of a link to outside");
  cr_expect_neq(access(outp("evil"), F_OK), 0, "nothing created outside");
  cr_expect_neq(access("/tmp/sbx-evil", F_OK), 0);
}

/* ---- remove ------------------------------------------------------------- */

Test(files, remove_cases) {
  harness_write(&h, "rm/a", "a");
  harness_write(&h, "rm/d/b", "b");
  cr_assert_eq(symlink(out_dir, ws("rm/d/out")), 0);
  cr_assert_eq(symlink(outp("secret"), ws("rm/s")), 0);

  struct harness_call *hc = do_remove("rm/a", false, false);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_expect(hc->resp.file_remove->removed);
  harness_call_free(hc);
  cr_expect_neq(access(ws("rm/a"), F_OK), 0);

  expect_fail(do_remove("rm/a", false, false), SBX_NOT_FOUND, "rm/a",
              "remove missing");
  hc = do_remove("rm/a", false, true);
  cr_assert_eq(hc->rc, 0);
  cr_expect(!hc->resp.file_remove->removed);
  harness_call_free(hc);
  hc = do_remove("rm/nodir/x", false, true);
  cr_expect_eq(hc->rc, 0, "a missing parent is missing too");
  harness_call_free(hc);

  expect_fail(do_remove("rm/d", false, false), SBX_CONFLICT, "not empty",
              "remove a full directory");

  /* Removing a link removes the link, not its target. */
  expect_ok(do_remove("rm/s", false, false), "remove a link");
  expect_secret_intact();

  /* Recursive: the link to outside is removed, the outside survives. */
  expect_ok(do_remove("rm", true, false), "remove -r");
  cr_expect_neq(access(ws("rm"), F_OK), 0);
  expect_secret_intact();
  cr_expect_eq(access(out_dir, F_OK), 0);

  expect_fail(do_remove("", true, false), SBX_INVALID_ARGUMENT, "root",
              "remove the root");
  expect_fail(do_remove(h.root, true, false), SBX_INVALID_ARGUMENT, "root",
              "remove the root by its absolute path");
  expect_fail(do_remove("outlink/secret", false, false), SBX_PERMISSION_DENIED,
              "escapes", "remove via a link to outside");
  expect_fail(do_remove("x/tmp", true, false), SBX_PERMISSION_DENIED, "escapes",
              "remove via ln -s /");
  expect_fail(do_remove("up/out", true, false), SBX_PERMISSION_DENIED,
              "escapes", "remove via ..");
  expect_secret_intact();
  cr_expect_eq(access(ws("sub/f"), F_OK), 0);
}

Test(files, recursion_is_bounded) {
  char rel[1024] = "deep";
  cr_assert_eq(mkdir(ws(rel), 0755), 0);
  for (int i = 0; i < 300; i++) {
    strncat(rel, "/d", sizeof(rel) - strlen(rel) - 1);
    cr_assert_eq(mkdir(ws(rel), 0755), 0);
  }
  expect_fail(do_remove("deep", true, false), SBX_LIMIT_EXCEEDED, "levels",
              "remove of a 300-level tree");
  expect_fail(do_chmod("deep", 0755, true), SBX_LIMIT_EXCEEDED, "levels",
              "chmod of a 300-level tree");
  struct harness_call *hc = do_list("deep", 100000, 0);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  cr_expect_eq(hc->resp.file_list->n_entries, 256, "depth is capped at 256");
  harness_call_free(hc);
}

/* ---- rename ------------------------------------------------------------- */

Test(files, rename_cases) {
  harness_write(&h, "mv/a", "a");
  harness_write(&h, "mv/b", "b");
  expect_fail(do_rename("mv/a", "mv/b", false), SBX_ALREADY_EXISTS, "exists",
              "rename over without overwrite");
  char *s = harness_read(&h, "mv/b");
  cr_expect_str_eq(s, "b");
  free(s);
  expect_ok(do_rename("mv/a", "mv/b", true), "rename with overwrite");
  s = harness_read(&h, "mv/b");
  cr_expect_str_eq(s, "a");
  free(s);
  expect_ok(do_rename("mv/b", "mv/c", false), "rename");
  cr_expect_eq(access(ws("mv/c"), F_OK), 0);
  expect_fail(do_rename("mv/nope", "mv/d", false), SBX_NOT_FOUND, "mv/nope",
              "rename missing");
  expect_fail(do_rename("mv", "mv/inside", false), SBX_INVALID_ARGUMENT,
              "into itself", "rename into itself");

  /* A link moves as a link. */
  expect_ok(do_rename("leak", "mv/leak2", false), "rename a link");
  struct stat st;
  cr_assert_eq(lstat(ws("mv/leak2"), &st), 0);
  cr_expect(S_ISLNK(st.st_mode));

  expect_fail(do_rename("", "mv/root", false), SBX_INVALID_ARGUMENT, "root",
              "move the root");
  expect_fail(do_rename("mv/c", "", true), SBX_INVALID_ARGUMENT, "root",
              "move onto the root");
  expect_fail(do_rename("outlink/secret", "stolen", false),
              SBX_PERMISSION_DENIED, "escapes", "move from outside");
  expect_fail(do_rename("mv/c", "outlink/planted", false),
              SBX_PERMISSION_DENIED, "escapes", "move to outside");
  expect_fail(do_rename("x/etc/passwd", "p", false), SBX_PERMISSION_DENIED,
              "escapes", "move via ln -s /");
  expect_fail(do_rename("mv/c", "up/out/secret", true), SBX_PERMISSION_DENIED,
              "escapes", "move over a file outside via ..");
  cr_expect_neq(access(outp("planted"), F_OK), 0);
  cr_expect_neq(access(ws("stolen"), F_OK), 0);
  expect_secret_intact();
}

/* ---- chmod -------------------------------------------------------------- */

Test(files, chmod_cases) {
  harness_write(&h, "cm/a", "a");
  harness_write(&h, "cm/d/b", "b");
  cr_assert_eq(symlink(outp("secret"), ws("cm/d/s")), 0);
  expect_ok(do_chmod("cm/a", 0600, false), "chmod");
  cr_expect_eq(mode_of(ws("cm/a")), 0600);
  expect_ok(do_chmod("cm", 0700, true), "chmod -R");
  cr_expect_eq(mode_of(ws("cm")), 0700);
  cr_expect_eq(mode_of(ws("cm/d")), 0700);
  cr_expect_eq(mode_of(ws("cm/d/b")), 0700);
  expect_secret_intact(); /* the link inside was skipped */

  expect_fail(do_chmod("leak", 0777, false), SBX_INVALID_ARGUMENT,
              "symbolic link", "chmod of a link");
  expect_fail(do_chmod("outlink/secret", 0777, false), SBX_PERMISSION_DENIED,
              "escapes", "chmod via a link to outside");
  expect_fail(do_chmod("up/out", 0777, true), SBX_PERMISSION_DENIED, "escapes",
              "chmod via ..");
  expect_fail(do_chmod("cm/a", 010000, false), SBX_INVALID_ARGUMENT, "07777",
              "mode beyond 07777");
  expect_fail(do_chmod("nope", 0600, false), SBX_NOT_FOUND, "nope",
              "chmod missing");
  h.d.is_root = false;
  expect_fail(do_chmod("cm/a", 04755, false), SBX_PERMISSION_DENIED, "setuid",
              "setuid when not root");
  h.d.is_root = getuid() == 0;
  cr_expect_eq(mode_of(ws("cm/a")), 0700);
  expect_secret_intact();
  cr_expect_eq(mode_of(out_dir), 0755);
}

/* ---- chown -------------------------------------------------------------- */

Test(files, chown_needs_root) {
  harness_write(&h, "co/a", "a");
  h.d.is_root = false;
  expect_fail(do_chown("co/a", "nobody", NULL, false), SBX_PERMISSION_DENIED,
              "needs sandboxd to run as root", "chown when not root");
  expect_fail(do_chown("co/a", NULL, "nogroup", false), SBX_PERMISSION_DENIED,
              "needs sandboxd to run as root", "chgrp when not root");
  char self[16];
  (void)snprintf(self, sizeof(self), "%u", (unsigned)getuid());
  expect_ok(do_chown("co/a", self, NULL, false), "chown to oneself: a no-op");
  h.d.is_root = getuid() == 0;
  expect_fail(do_chown("co/a", "no-such-user-x", NULL, false), SBX_NOT_FOUND,
              "unknown user", "unknown user");
  expect_fail(do_chown("co/a", NULL, "no-such-group-x", false), SBX_NOT_FOUND,
              "unknown group", "unknown group");
}

Test(files, chown_as_root) {
  if (getuid() != 0)
    cr_skip_test("chown to nobody needs root");
  harness_write(&h, "co/a", "a");
  harness_write(&h, "co/d/b", "b");
  cr_assert_eq(symlink(outp("secret"), ws("co/d/s")), 0);
  expect_ok(do_chown("co/a", "nobody", NULL, false), "chown nobody");
  struct stat st;
  cr_assert_eq(stat(ws("co/a"), &st), 0);
  cr_expect_eq(st.st_uid, 65534);
  cr_expect_eq(st.st_gid, 0, "group unchanged");

  expect_ok(do_chown("co", "nobody", "nogroup", true), "chown -R");
  const char *all[] = {"co", "co/d", "co/d/b", "co/d/s"};
  for (size_t i = 0; i < 4; i++) {
    cr_assert_eq(lstat(ws(all[i]), &st), 0);
    cr_expect_eq(st.st_uid, 65534, "%s", all[i]);
    cr_expect_eq(st.st_gid, 65534, "%s", all[i]);
  }
  expect_secret_intact(); /* the link changed owner, not its target */

  expect_ok(do_chown("leak", "nobody", NULL, false), "chown of a leaf link");
  cr_assert_eq(lstat(ws("leak"), &st), 0);
  cr_expect_eq(st.st_uid, 65534);
  expect_secret_intact();
  expect_fail(do_chown("outlink/secret", "nobody", NULL, false),
              SBX_PERMISSION_DENIED, "escapes", "chown via a link to outside");
  expect_fail(do_chown("up/out", "nobody", NULL, true), SBX_PERMISSION_DENIED,
              "escapes", "chown via ..");
  expect_secret_intact();
}

/* ---- misc --------------------------------------------------------------- */

Test(files, wrong_body_is_refused) {
  Sbx__V1__Request req;
  sbx__v1__request__init(&req);
  int (*fns[])(struct rpc_call *) = {
      rpc_file_stat,  rpc_file_read,   rpc_file_write,  rpc_file_list,
      rpc_file_mkdir, rpc_file_remove, rpc_file_rename, rpc_file_chmod,
      rpc_file_chown, rpc_file_exists};
  for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
    expect_fail(run(&req, fns[i]), SBX_INVALID_ARGUMENT, "request",
                "a request without a body");
}

Test(files, list_keeps_the_smallest_names_of_a_large_directory) {
  cr_assert_eq(mkdir(ws("big"), 0755), 0);
  char rel[64];
  for (int i = 299; i >= 0; i--) {
    (void)snprintf(rel, sizeof(rel), "big/n%03d", (i * 7919) % 300);
    harness_write(&h, rel, "");
  }
  struct harness_call *hc = do_list("big", 1, 10);
  cr_assert_eq(hc->rc, 0, "%s", hc->call.err.msg);
  Sbx__V1__FileListReply *r = hc->resp.file_list;
  cr_expect(r->truncated);
  cr_assert_eq(r->n_entries, 10);
  for (size_t i = 0; i < 10; i++) {
    (void)snprintf(rel, sizeof(rel), "n%03zu", i);
    cr_expect_str_eq(r->entries[i]->path, rel);
  }
  harness_call_free(hc);
  hc = do_list("big", 1, 0);
  cr_assert_eq(hc->rc, 0);
  cr_expect_eq(hc->resp.file_list->n_entries, 300);
  cr_expect(!hc->resp.file_list->truncated);
  cr_expect_str_eq(hc->resp.file_list->entries[299]->path, "n299");
  harness_call_free(hc);
}
