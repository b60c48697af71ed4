#include "sandboxd/proc/tty.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "shared/cleanup.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

int tty_resize(int master, unsigned rows, unsigned cols) {
  struct winsize ws = {.ws_row = (unsigned short)rows,
                       .ws_col = (unsigned short)cols};
  if (ioctl(master, TIOCSWINSZ, &ws) < 0)
    return -errno;
  return 0;
}

/* The slave of MASTER: through TIOCGPTPEER (no path lookup, so a hostile
 * /dev/pts cannot substitute another file), else by its name. */
static int open_slave(int master) {
  int fd = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (fd >= 0)
    return fd;
  if (errno != EINVAL && errno != ENOTTY)
    return -errno;
  char name[64];
  if (ptsname_r(master, name, sizeof(name)) != 0)
    return -errno;
  fd = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

int tty_open(unsigned rows, unsigned cols, int *master, int *slave) {
  _cleanup_close_ int m =
      posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  if (m < 0)
    return -errno;
  if (grantpt(m) < 0 || unlockpt(m) < 0)
    return -errno;
  int fl = fcntl(m, F_GETFL);
  if (fl < 0 || fcntl(m, F_SETFL, fl | O_NONBLOCK) < 0)
    return -errno;
  _cleanup_close_ int s = open_slave(m);
  if (s < 0)
    return s;
  int r = tty_resize(m, rows ? rows : TTY_DEFAULT_ROWS,
                     cols ? cols : TTY_DEFAULT_COLS);
  if (r < 0)
    return r;
  *master = TAKE_FD(m);
  *slave = TAKE_FD(s);
  return 0;
}
