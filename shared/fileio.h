/* Small whole-file helpers. */
#ifndef SBX_FILEIO_H
#define SBX_FILEIO_H

#include <stddef.h>
#include <stdint.h>

/* Writes all N bytes of BUF to FD, going on after short writes and EINTR.
 * 0 or a negative errno (-EIO for a write that wrote nothing). */
int sbx_write_all(int fd, const void *buf, size_t n);

/* FD itself when it is above 2 (or negative: passed on, errno kept), else
 * a new O_CLOEXEC duplicate above 2, FD closed: so that a child's dup onto
 * 0-2 cannot clobber it. A negative errno when the dup fails (FD is closed
 * then too). */
int sbx_fd_above_stdio(int fd);

/* openat2(2) of PATH beneath DIRFD: O_CLOEXEC, RESOLVE_BENEATH and
 * RESOLVE_NO_MAGICLINKS always, RESOLVE (e.g. RESOLVE_NO_SYMLINKS) added;
 * MODE for O_CREAT and O_TMPFILE. Retried on EINTR and EAGAIN. The fd, or
 * a negative errno (-EXDEV: PATH would leave DIRFD). */
int sbx_openat2(int dirfd, const char *path, int flags, unsigned mode,
                uint64_t resolve);

/* Reads PATH into *OUT (new, NUL-terminated; *LEN bytes without the NUL).
 * -EFBIG when the file holds more than MAX bytes. */
int sbx_read_file(const char *path, size_t max, char **out, size_t *len);

/* Writes DATA to PATH atomically: a temp file in the same directory with
 * MODE, fsync, rename, fsync of the directory. */
int sbx_write_file_atomic(const char *path, const void *data, size_t len,
                          unsigned mode);

/* As sbx_write_file_atomic, but without the fsyncs: readers and a restart
 * after the writing process dies see the old or the new file, never a
 * part; only a power loss may lose the last writes. For state rewritten
 * many times a second (a run's state after every step). */
int sbx_write_file_replace(const char *path, const void *data, size_t len,
                           unsigned mode);

#endif
