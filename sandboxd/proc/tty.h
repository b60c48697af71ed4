/* Pseudo-terminals for exec with a tty: open a pair, resize it. (Not pty.h,
 * which would hide glibc's <pty.h>: sandboxd/ is on the include path.)
 * Thread-safe (no shared state). */
#ifndef SANDBOXD_TTY_H
#define SANDBOXD_TTY_H

/* The size used when a request gives none. */
#define TTY_DEFAULT_ROWS 24
#define TTY_DEFAULT_COLS 80

/* Opens a new pseudo-terminal of ROWS x COLS. *MASTER is non-blocking;
 * *SLAVE is blocking and not yet anyone's controlling terminal (the child
 * makes it its own). Both are new, O_CLOEXEC fds. Returns 0 or a negative
 * errno. */
int tty_open(unsigned rows, unsigned cols, int *master, int *slave);

/* Sets the window size through MASTER; the kernel sends SIGWINCH to the
 * terminal's foreground process group. 0 or a negative errno. */
int tty_resize(int master, unsigned rows, unsigned cols);

#endif
