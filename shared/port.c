#include "shared/port.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "shared/cleanup.h"

int sbx_free_tcp_port(uint16_t *port) {
  _cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
      getsockname(s, (struct sockaddr *)&a, &len) < 0)
    return -errno;
  *port = ntohs(a.sin_port);
  return 0;
}
