/* Import, pass 1: reading the spool with libarchive and checking every
 * member before anything is written: names, types, sizes, owners, the
 * limits, and then what needs the whole list (nothing beneath a symlink or
 * a file, what a non-empty destination holds). */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandboxd/archive/archive_internal.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"

/* libarchive reads a spool that is not mapped in 64 KiB blocks, as export
 * copies (export_tar.c): a read(2) and the write(2) that follows stay in the
 * CPU's cache, where 1 MiB ones went through memory (extraction 10-15%
 * slower on tmpfs). */
#define READ_BLOCK_BYTES (64u << 10)
#define SPARSE_SIZE_MAX (16ull << 40) /* a sparse file's size: ext4's most */
#define HEADER_ALLOWANCE                                                       \
  (16u << 10) /* tar stream bytes per member beyond                            \
                 its data: headers, pax records */

/* FNV-1a of N bytes of S: the member table's hash of a path. */
static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* The member whose path is S (N bytes), or -1, H being hash_bytes(S, N). */
static ssize_t im_lookup_h(const struct importer *im, const char *s, size_t n,
                           uint64_t h) {
  if (im->htcap == 0)
    return -1;
  for (size_t i = h & (im->htcap - 1);; i = (i + 1) & (im->htcap - 1)) {
    uint32_t v = im->ht[i];
    if (v == 0)
      return -1;
    const struct member *mm = &im->m[v - 1];
    if (mm->plen == n && memcmp(im->pool + mm->path, s, n) == 0)
      return (ssize_t)(v - 1);
  }
}

/* The member whose path is S (N bytes), or -1. */
ssize_t import_lookup(const struct importer *im, const char *s, size_t n) {
  return im_lookup_h(im, s, n, hash_bytes(s, n));
}

/* Adds member IDX to the table by path; the table doubles at half full. */
static int im_ht_put(struct importer *im, size_t idx) {
  if ((im->n + 1) * 2 > im->htcap) {
    size_t cap = im->htcap ? im->htcap * 2 : 1024;
    uint32_t *t = calloc(cap, sizeof(*t));
    if (!t)
      return -ENOMEM;
    for (size_t i = 0; i < im->htcap; i++) {
      uint32_t v = im->ht[i];
      if (!v)
        continue;
      const struct member *mm = &im->m[v - 1];
      size_t j = hash_bytes(im->pool + mm->path, mm->plen) & (cap - 1);
      while (t[j])
        j = (j + 1) & (cap - 1);
      t[j] = v;
    }
    free(im->ht);
    im->ht = t;
    im->htcap = cap;
  }
  const struct member *mm = &im->m[idx];
  size_t j = hash_bytes(im->pool + mm->path, mm->plen) & (im->htcap - 1);
  while (im->ht[j])
    j = (j + 1) & (im->htcap - 1);
  im->ht[j] = (uint32_t)idx + 1;
  return 0;
}

/* Copies S (N bytes plus a NUL) into the pool; its offset in *OFF. */
static int im_pool_add(struct importer *im, const char *s, size_t n,
                       uint32_t *off) {
  if (im->plen + n + 1 > NAME_POOL_MAX)
    return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "the archive's member names and link targets exceed "
                         "%u bytes",
                         NAME_POOL_MAX);
  if (im->plen + n + 1 > im->pcap) {
    size_t cap = im->pcap ? im->pcap * 2 : 65536;
    while (cap < im->plen + n + 1)
      cap *= 2;
    char *p = realloc(im->pool, cap);
    if (!p)
      return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
    im->pool = p;
    im->pcap = cap;
  }
  memcpy(im->pool + im->plen, s, n);
  im->pool[im->plen + n] = '\0';
  *off = (uint32_t)im->plen;
  im->plen += n + 1;
  return 0;
}

/* Whether P has a ".." component. */
static bool has_dotdot(const char *p) {
  for (const char *s = p; *s;) {
    const char *e = strchr(s, '/');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (n == 2 && s[0] == '.' && s[1] == '.')
      return true;
    if (!e)
      break;
    s = e + 1;
  }
  return false;
}

/* Normalizes a member's name (or a hardlink's target) RAW into OUT:
 * relative, no "..", a leading "./" stripped; "" for the archive's root.
 * WHAT and WHO name the member for messages. */
int import_norm(struct importer *im, const char *raw, char *out,
                const char *what, const char *who) {
  char q[NAME_SHOWN + 4], q2[NAME_SHOWN + 4];
  if (raw[0] == '/')
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "%s \"%s\" is an absolute path%s%s%s", what,
                         xfer_shown(raw, q), who ? " (in \"" : "",
                         who ? xfer_shown(who, q2) : "", who ? "\")" : "");
  const char *p = raw;
  while (p[0] == '.' && p[1] == '/')
    p += 2;
  if (has_dotdot(p)) {
    /* Name the worse fault: leaving the destination, or just "..". */
    char tmp[SBX_PATH_MAX];
    bool escapes = sbx_path_normalize_rel(p, strlen(p), tmp, sizeof(tmp), 0,
                                          NULL) == -EACCES;
    return sbx_error_set(
        im->e, SBX_INVALID_ARGUMENT, EINVAL, "%s \"%s\" %s%s%s%s", what,
        xfer_shown(raw, q),
        escapes ? "escapes the destination" : "must not contain \"..\"",
        who ? " (in \"" : "", who ? xfer_shown(who, q2) : "", who ? "\")" : "");
  }
  if (*p == '\0' || strcmp(p, ".") == 0) {
    out[0] = '\0';
    return 0;
  }
  struct sbx_error pe = {0};
  int r = sbx_path_normalize_rel(p, strlen(p), out, SBX_PATH_MAX,
                                 SBX_PATH_NO_DOTDOT, &pe);
  if (r < 0)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, -r,
                         "%s \"%s\" has an invalid path: %s", what,
                         xfer_shown(raw, q), pe.msg);
  if (strcmp(out, ".") == 0)
    out[0] = '\0';
  return 0;
}

/* Maps an uncompressed spool so libarchive hands out pointers into the page
 * cache and file data goes to its destination in one copy, not two (read(2)
 * into a buffer, then write(2)). The spool is private and unlinked: nothing
 * can truncate it under the mapping. A zstd spool is not mapped: its file
 * data comes out of the decompressor's buffer anyway, and a mapping read
 * through would leave the whole archive in sandboxd's resident set. Without
 * a mapping (zstd, an empty archive, no address space) the spool is read
 * with read(2) in blocks. */
void import_map(struct importer *im) {
  static const uint8_t zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
  uint8_t head[sizeof(zstd_magic)];
  if (im->x->size == 0 || im->x->size > SIZE_MAX)
    return;
  if (pread(im->x->spool_fd, head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
      memcmp(head, zstd_magic, sizeof(head)) == 0)
    return;
  void *p = mmap(NULL, (size_t)im->x->size, PROT_READ, MAP_SHARED,
                 im->x->spool_fd, 0);
  if (p == MAP_FAILED)
    return;
  (void)madvise(p, (size_t)im->x->size, MADV_SEQUENTIAL);
  im->map = p;
  im->maplen = (size_t)im->x->size;
}

/* Releases what checking and extracting IM built (the fds are closed as
 * they go); for _cleanup_ too. */
void import_fini(struct importer *im) {
  if (im->map)
    (void)munmap((void *)im->map, im->maplen);
  im->map = NULL;
  free(im->m);
  free(im->pool);
  free(im->ht);
}

/* A libarchive reader of the formats and filters allowed, not open yet. */
int import_archive(struct importer *im, struct archive **out) {
  struct archive *a = archive_read_new();
  if (!a)
    return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
  int r = archive_read_support_format_tar(a);
  if (r == ARCHIVE_OK)
    r = archive_read_support_filter_none(a);
  if (r == ARCHIVE_OK &&
      im->x->compression != SBX__V1__COMPRESSION__COMPRESSION_NONE)
    r = archive_read_support_filter_zstd(a);
  if (r != ARCHIVE_OK) {
    r = xfer_la_fail(im->e, a, "cannot read the archive");
    archive_read_free(a);
    return r;
  }
  *out = a;
  return 0;
}

/* Opens the spool for reading with the formats and filters allowed. */
int import_reader(struct importer *im, struct archive **out) {
  if (lseek(im->x->spool_fd, 0, SEEK_SET) < 0)
    return sbx_error_set(im->e, SBX_OK, errno,
                         "cannot read the archive's temporary file: %s",
                         strerror(errno));
  struct archive *a = NULL;
  int r = import_archive(im, &a);
  if (r < 0)
    return r;
  if (im->map)
    r = archive_read_open_memory(a, im->map, im->maplen);
  else
    r = archive_read_open_fd(a, im->x->spool_fd, READ_BLOCK_BYTES);
  if (r != ARCHIVE_OK) {
    r = xfer_la_fail(im->e, a, "cannot read the archive");
    archive_read_free(a);
    return r;
  }
  *out = a;
  return 0;
}

/* The next header, checked against the compression asked for. */
int import_next(struct importer *im, struct archive *a,
                struct archive_entry **ent) {
  int r = archive_read_next_header(a, ent);
  if (r == ARCHIVE_EOF)
    return 0;
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
    return xfer_la_fail(im->e, a, "cannot read the archive");
  if (im->x->compression == SBX__V1__COMPRESSION__COMPRESSION_ZSTD &&
      archive_filter_code(a, 0) != ARCHIVE_FILTER_ZSTD)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "the archive is not zstd-compressed");
  return 1;
}

/* The next block of member I's data from A: 1 and the block, 0 at its
 * end; a block outside the size the header gives is refused. */
int import_data_block(struct importer *im, struct archive *a, size_t i,
                      const void **buf, size_t *len, uint64_t *off,
                      uint64_t *end) {
  char q[NAME_SHOWN + 4];
  const struct member *mm = &im->m[i];
  la_int64_t o;
  int r = archive_read_data_block(a, buf, len, &o);
  if (r == ARCHIVE_EOF)
    return 0;
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
    return xfer_la_fail(im->e, a, "cannot read the archive");
  if (o < 0 || (uint64_t)o > mm->size || *len > mm->size - (uint64_t)o)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member \"%s\" holds more data than its header "
                         "says",
                         xfer_shown(import_path(im, i), q));
  if ((uint64_t)o < *end)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member \"%s\" has sparse regions that overlap or "
                         "are out of order",
                         xfer_shown(import_path(im, i), q));
  *off = (uint64_t)o;
  *end = (uint64_t)o + *len;
  return 1;
}

/* Reads the data of the regular file just recorded, so that pass 1 refuses
 * what pass 2 would: a sparse map (GNU or pax) may place data past the size
 * in the header, which only reading the blocks shows. Mapped, the blocks
 * are pointers into the spool, nothing is copied; compressed, they were
 * decompressed to be skipped anyway. */
static int im_check_data(struct importer *im, struct archive *a) {
  size_t i = im->n - 1;
  if (im->m[i].type != M_REG)
    return 0;
  for (uint64_t end = 0;;) {
    const void *buf;
    size_t len;
    uint64_t off;
    int r = import_data_block(im, a, i, &buf, &len, &off, &end);
    if (r <= 0)
      return r;
  }
}

/* The size of the regular file member ENT (RAW for messages) into *SIZE
 * and the bytes of data it holds into *DATA: the size, or for a sparse
 * file the sum of its data regions, which must lie within the size. A
 * sparse file's holes take no space, so only its data counts against the
 * extraction limit; its size is bounded by SPARSE_SIZE_MAX. */
static int im_file_size(struct importer *im, struct archive_entry *ent,
                        const char *raw, uint64_t *size, uint64_t *data) {
  char q[NAME_SHOWN + 4];
  la_int64_t sz = archive_entry_size_is_set(ent) ? archive_entry_size(ent) : 0;
  if (sz < 0)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member \"%s\" has a negative size",
                         xfer_shown(raw, q));
  *size = *data = (uint64_t)sz;
  if (archive_entry_sparse_reset(ent) <= 0)
    return 0;
  if (*size > SPARSE_SIZE_MAX)
    return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "sparse member \"%s\" is larger than %llu bytes",
                         xfer_shown(raw, q), SPARSE_SIZE_MAX);
  la_int64_t off = 0, len = 0;
  *data = 0;
  while (archive_entry_sparse_next(ent, &off, &len) == ARCHIVE_OK) {
    if (off < 0 || len < 0 || (uint64_t)off > *size ||
        (uint64_t)len > *size - (uint64_t)off)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "member \"%s\" has a sparse region outside its "
                           "size",
                           xfer_shown(raw, q));
    *data += (uint64_t)len;
  }
  return 0;
}

/* Checks one header and records it as a member. */
static int im_add(struct importer *im, struct archive_entry *ent) {
  char q[NAME_SHOWN + 4], q2[NAME_SHOWN + 4];
  char path[SBX_PATH_MAX];
  const char *raw = archive_entry_pathname(ent);
  if (!raw)
    raw = archive_entry_pathname_utf8(ent);
  if (!raw)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member %zu has no readable name", im->n + 1);
  int r = import_norm(im, raw, path, "member", NULL);
  if (r < 0)
    return r;
  struct member mm = {.link = UINT32_MAX, .target = UINT32_MAX};
  const char *hardlink = archive_entry_hardlink(ent);
  mode_t ft = archive_entry_filetype(ent);
  if (hardlink)
    mm.type = M_HARDLINK;
  else if (ft == AE_IFREG)
    mm.type = M_REG;
  else if (ft == AE_IFDIR)
    mm.type = M_DIR;
  else if (ft == AE_IFLNK)
    mm.type = M_SYMLINK;
  else
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member \"%s\" is %s", xfer_shown(raw, q),
                         ft == AE_IFCHR || ft == AE_IFBLK ? "a device node"
                         : ft == AE_IFIFO                 ? "a fifo"
                         : ft == AE_IFSOCK                ? "a socket"
                                           : "of an unsupported type");
  if (path[0] == '\0') {
    if (mm.type != M_DIR)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "member \"%s\" would replace the destination",
                           xfer_shown(raw, q));
    mm.type = M_SELF;
  }
  size_t plen = strlen(path);
  if (mm.type != M_SELF && import_lookup(im, path, plen) >= 0)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EEXIST,
                         "member \"%s\" appears twice in the archive",
                         xfer_shown(raw, q));

  if (mm.type == M_REG) {
    uint64_t data = 0;
    r = im_file_size(im, ent, raw, &mm.size, &data);
    if (r < 0)
      return r;
    if (data > im->x->lim.extracted_bytes ||
        im->total + data > im->x->lim.extracted_bytes)
      return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, EFBIG,
                           "archive extracts to more than %" PRIu64
                           " bytes (at member \"%s\")",
                           im->x->lim.extracted_bytes, xfer_shown(raw, q));
    im->total += data;
  }
  la_int64_t uid = archive_entry_uid(ent), gid = archive_entry_gid(ent);
  if (uid < 0 || uid >= UINT32_MAX || gid < 0 || gid >= UINT32_MAX)
    return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                         "member \"%s\" has an invalid owner",
                         xfer_shown(raw, q));
  mm.uid = (uint32_t)uid;
  mm.gid = (uint32_t)gid;
  mm.mode = archive_entry_perm(ent);
  mm.has_mtime = archive_entry_mtime_is_set(ent);
  mm.mtime = archive_entry_mtime(ent);
  mm.mtime_ns = archive_entry_mtime_nsec(ent);
  if (mm.mtime_ns < 0 || mm.mtime_ns > 999999999)
    mm.mtime_ns = 0;

  if (mm.type == M_SYMLINK) {
    const char *t = archive_entry_symlink(ent);
    if (!t)
      t = archive_entry_symlink_utf8(ent);
    if (!t || !*t)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "symbolic link \"%s\" has no target",
                           xfer_shown(raw, q));
    size_t tl = strlen(t);
    if (tl >= SBX_PATH_MAX)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "symbolic link \"%s\" has a target that is too long",
                           xfer_shown(raw, q));
    r = im_pool_add(im, t, tl, &mm.link);
    if (r < 0)
      return r;
  } else if (mm.type == M_HARDLINK) {
    char tp[SBX_PATH_MAX];
    r = import_norm(im, hardlink, tp, "hard link target", raw);
    if (r < 0)
      return r;
    ssize_t j = tp[0] ? import_lookup(im, tp, strlen(tp)) : -1;
    if (j < 0)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "hard link \"%s\" points at \"%s\", which is not "
                           "an earlier member",
                           xfer_shown(raw, q), xfer_shown(hardlink, q2));
    if (im->m[j].type == M_HARDLINK)
      j = im->m[j].target;
    if (im->m[j].type != M_REG)
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                           "hard link \"%s\" points at \"%s\", which is not "
                           "a regular file",
                           xfer_shown(raw, q), xfer_shown(hardlink, q2));
    mm.target = (uint32_t)j;
  }

  if (im->n == im->cap) {
    size_t cap = im->cap ? im->cap * 2 : 256;
    struct member *nm = realloc(im->m, cap * sizeof(*nm));
    if (!nm)
      return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
    im->m = nm;
    im->cap = cap;
  }
  r = im_pool_add(im, path, plen, &mm.path);
  if (r < 0)
    return r;
  mm.plen = (uint32_t)plen;
  im->m[im->n] = mm;
  if (mm.type != M_SELF && im_ht_put(im, im->n) < 0)
    return sbx_error_set(im->e, SBX_OK, ENOMEM, "out of memory");
  im->n++;
  return 0;
}

/* Checks what needs the whole member list: nothing beneath a symlink or a
 * file. A symlink's target is not checked: the link is made as it is, and
 * nothing is ever opened through it (extraction resolves every path with
 * RESOLVE_NO_SYMLINKS), so where it points does not matter here. */
int import_check_tree(struct importer *im) {
  char q[NAME_SHOWN + 4], q2[NAME_SHOWN + 4];
  uint64_t hashes[SBX_PATH_MAX / 2];
  size_t ends[SBX_PATH_MAX / 2];
  for (size_t i = 0; i < im->n; i++) {
    const struct member *mm = &im->m[i];
    if (mm->type == M_SELF)
      continue;
    const char *p = import_path(im, i);
    /* Find the nearest ancestor that is a member; it must be a directory
     * (a directory member's own ancestors are checked in its turn). */
    size_t k = 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t j = 0; j < mm->plen; j++) {
      if (p[j] == '/' && k < SBX_ARRAY_SIZE(hashes)) {
        hashes[k] = h;
        ends[k++] = j;
      }
      h ^= (unsigned char)p[j];
      h *= 0x100000001b3ull;
    }
    while (k > 0) {
      k--;
      ssize_t a = im_lookup_h(im, p, ends[k], hashes[k]);
      if (a < 0)
        continue;
      if (im->m[a].type == M_SYMLINK)
        return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                             "member \"%s\" is beneath the symbolic link "
                             "\"%s\"",
                             xfer_shown(p, q),
                             xfer_shown(import_path(im, (size_t)a), q2));
      if (im->m[a].type != M_DIR)
        return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EINVAL,
                             "member \"%s\" is beneath \"%s\", which is not "
                             "a directory",
                             xfer_shown(p, q),
                             xfer_shown(import_path(im, (size_t)a), q2));
      break;
    }
  }

  return 0;
}

/* For a destination that is not empty: refuses what extraction could not
 * do cleanly (a file over a directory, a path through an existing symlink or
 * file that no directory member replaces). */
static int im_check_existing(struct importer *im) {
  char q[NAME_SHOWN + 4], q2[NAME_SHOWN + 4];
  for (size_t i = 0; i < im->n; i++) {
    const struct member *mm = &im->m[i];
    if (mm->type == M_SELF)
      continue;
    const char *p = import_path(im, i);
    int fd = sbx_openat2(im->x->dest_fd, p, O_PATH | O_NOFOLLOW, 0,
                         RESOLVE_NO_SYMLINKS);
    if (fd >= 0) {
      struct stat st;
      int r = fstat(fd, &st);
      (void)close(fd);
      if (r == 0 && S_ISDIR(st.st_mode) && mm->type != M_DIR)
        return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, EISDIR,
                             "member \"%s\" would replace a directory",
                             xfer_shown(p, q));
      continue;
    }
    if (fd == -ENOENT)
      continue;
    if (fd != -ENOTDIR && fd != -ELOOP && fd != -EXDEV)
      return sbx_error_set(im->e, SBX_OK, -fd, "cannot check \"%s\": %s",
                           xfer_shown(p, q), strerror(-fd));
    /* Something on the way is not a directory: find it. */
    char buf[SBX_PATH_MAX];
    memcpy(buf, p, mm->plen + 1);
    for (char *s = strchr(buf, '/'); s; s = strchr(s + 1, '/')) {
      *s = '\0';
      int f = sbx_openat2(im->x->dest_fd, buf, O_PATH | O_DIRECTORY, 0,
                          RESOLVE_NO_SYMLINKS);
      if (f >= 0) {
        (void)close(f);
        *s = '/';
        continue;
      }
      if (f == -ENOENT)
        break;
      ssize_t a = import_lookup(im, buf, strlen(buf));
      if (a >= 0 && im->m[a].type == M_DIR)
        break; /* that directory member replaces it */
      return sbx_error_set(im->e, SBX_INVALID_ARGUMENT, ENOTDIR,
                           "member \"%s\" would be extracted through \"%s\", "
                           "which is not a directory in the destination",
                           xfer_shown(p, q), xfer_shown(buf, q2));
    }
  }
  return 0;
}

/* Whether the directory DIR_FD has no entries but "." and "..". */
int import_dir_is_empty(int dir_fd, bool *empty) {
  int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  DIR *dir = fdopendir(fd);
  if (!dir) {
    int err = errno;
    (void)close(fd);
    return -err;
  }
  *empty = true;
  struct dirent *de;
  while ((de = readdir(dir))) {
    const char *n = de->d_name;
    if (n[0] == '.' && (n[1] == '\0' || (n[1] == '.' && n[2] == '\0')))
      continue;
    *empty = false;
    break;
  }
  (void)closedir(dir);
  return 0;
}

/* The tar stream may not be much longer than its members' data: a small
 * zstd input could otherwise expand into endless (1 MiB each) pax headers. */
static uint64_t im_stream_max(const struct xfer_limits *lim) {
  if (lim->members > (UINT64_MAX - lim->extracted_bytes) / HEADER_ALLOWANCE)
    return UINT64_MAX;
  return lim->extracted_bytes + lim->members * HEADER_ALLOWANCE;
}

/* Checks the header just read from A against the limits on the stream and
 * on members, then adds its member. */
int import_take(struct importer *im, struct archive *a,
                struct archive_entry *ent) {
  uint64_t stream_max = im_stream_max(&im->x->lim);
  la_int64_t pos = archive_filter_bytes(a, 0);
  if (pos > 0 && (uint64_t)pos > stream_max)
    return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, EFBIG,
                         "archive expands to more than %" PRIu64 " bytes",
                         stream_max);
  if (im->n >= im->x->lim.members)
    return sbx_error_set(im->e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "archive has more than %" PRIu64 " members",
                         im->x->lim.members);
  return im_add(im, ent);
}

/* Pass 1: reads every header and every file's data blocks, and refuses
 * the archive unless all are fine. */
int import_check(struct importer *im) {
  struct archive *a = NULL;
  int r = import_reader(im, &a);
  if (r < 0)
    return r;
  for (;;) {
    struct archive_entry *ent;
    r = import_next(im, a, &ent);
    if (r <= 0)
      break;
    r = import_take(im, a, ent);
    if (r == 0)
      r = im_check_data(im, a);
    if (r < 0)
      break;
  }
  archive_read_free(a);
  if (r < 0)
    return r;
  r = import_dir_is_empty(im->x->dest_fd, &im->fresh);
  if (r < 0)
    return sbx_error_set(im->e, SBX_OK, -r, "cannot list the destination: %s",
                         strerror(-r));
  r = import_check_tree(im);
  if (r < 0)
    return r;
  if (!im->fresh)
    return im_check_existing(im);
  return 0;
}
