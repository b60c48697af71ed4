/* Floods of idle connections against a sandboxd, for the tests and the
 * benchmarks: N stream sockets to a listen URL (ipc://PATH, tcp:// or
 * tls+tcp://HOST:PORT), held by child processes of at most FLOOD_PER_PROC
 * each (one process may hold fewer descriptors than a flood needs; each child
 * raises its RLIMIT_NOFILE to what it needs, within the hard limit). A
 * connection either sends nothing (a TLS or SP handshake left hanging) or
 * the SP header of a REQ peer (an nng pipe that never sends a request).
 *
 * Not Criterion: every call returns 0 or a negative errno and says why on
 * stderr, so that benchmarks can use it. Not thread-safe. */
#ifndef SBX_TEST_FLOOD_H
#define SBX_TEST_FLOOD_H

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

#define FLOOD_PER_PROC 5000

/* Whether an RSS figure means anything in this build: not under
 * AddressSanitizer (the tests and sandboxd are one build), whose quarantine
 * and shadow memory keep what was freed. */
#if defined(__SANITIZE_ADDRESS__)
#define FLOOD_RSS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FLOOD_RSS_CHECKED 0
#endif
#endif
#ifndef FLOOD_RSS_CHECKED
#define FLOOD_RSS_CHECKED 1
#endif

enum flood_mode {
  FLOOD_SILENT,    /* connect and send nothing */
  FLOOD_SP_HEADER, /* connect and send the 8-byte SP header of a REQ peer */
};

struct flood;

/* The socket address of URL's host and port, or of its ipc:// path, into
 * SA (*LEN its size). -EINVAL for a URL of another form. */
int flood_sockaddr(const char *url, struct sockaddr_storage *sa,
                   socklen_t *len);

/* Opens N connections to URL (blocking connects, the children side by
 * side) and returns once all have been tried: *OUT is new (flood_stop).
 * -EMFILE when the hard RLIMIT_NOFILE is too low for FLOOD_PER_PROC. */
int flood_start(const char *url, unsigned n, enum flood_mode mode,
                struct flood **out);
/* How many of the N connected (the others failed to connect). */
unsigned flood_connected(const struct flood *f);
/* How many of those the server has not closed yet (each child reads what
 * its sockets hold and looks for end of file or a reset). */
int flood_open(struct flood *f, unsigned *open);
/* Closes every connection and reaps the children; accepts NULL, returns
 * NULL. */
struct flood *flood_stop(struct flood *f);

/* Counts as flood_open does, every 100 ms, until at most MAX are open or
 * WAIT_MS have passed; *OPEN is the last count. */
int flood_wait_open(struct flood *f, unsigned max, unsigned wait_ms,
                    unsigned *open);

/* VmRSS of PID in KiB (/proc/PID/status), or a negative errno. */
long flood_rss_kib(pid_t pid);
/* Reads PID's VmRSS every 100 ms until it is under KIB or WAIT_MS have
 * passed; the last figure, or a negative errno. */
long flood_wait_rss(pid_t pid, long kib, unsigned wait_ms);

#endif
