#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "shared/port.h"

Test(port, a_free_port_is_bindable_on_the_loopback) {
  uint16_t a = 0, b = 0;
  cr_assert_eq(sbx_free_tcp_port(&a), 0);
  cr_expect_neq(a, 0);
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in in = {.sin_family = AF_INET,
                           .sin_port = htons(a),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_expect_eq(bind(s, (struct sockaddr *)&in, sizeof(in)), 0, "%s",
               strerror(errno));
  /* While it is taken, another call gives another port. */
  cr_assert_eq(sbx_free_tcp_port(&b), 0);
  cr_expect_neq(a, b);
  close(s);
}
