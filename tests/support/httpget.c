#include "tests/support/httpget.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"

/* Connects to HOST:PORT and returns what a GET / brings back (new), trying
 * for up to 10 s while the server starts. */
char *test_http_get(const char *host, unsigned port) {
  uint64_t deadline = sbx_now_ms() + 10000;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    cr_assert_eq(inet_pton(AF_INET, host, &sa.sin_addr), 1, "%s", host);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
      const char req[] = "GET / HTTP/1.0\r\n\r\n";
      cr_assert_eq(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
      struct timeval tv = {5, 0};
      (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      char buf[4096];
      size_t n = 0;
      ssize_t k;
      while (n < sizeof(buf) - 1 &&
             (k = read(fd, buf + n, sizeof(buf) - 1 - n)) > 0)
        n += (size_t)k;
      buf[n] = '\0';
      close(fd);
      /* A forwarder may accept before the server inside listens. */
      if (n > 0 || sbx_now_ms() > deadline)
        return strdup(buf);
    } else {
      close(fd);
      if (sbx_now_ms() > deadline)
        return strdup("");
    }
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}
