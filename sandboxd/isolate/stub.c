#include "sandboxd/isolate/net.h"
#include <errno.h>
int isolate_net_start(pid_t pid, const struct net_forward *fw, size_t nfw,
                      struct isolate_net **out, struct sbx_error *e) {
  (void)pid;
  (void)fw;
  (void)nfw;
  (void)e;
  *out = NULL;
  return 0;
}
pid_t isolate_net_pid(const struct isolate_net *n) {
  (void)n;
  return 0;
}
void isolate_net_stop(struct isolate_net *n) {
  (void)n;
}
int isolate_net_free_port(uint16_t *port, struct sbx_error *e) {
  (void)e;
  *port = 0;
  return 0;
}
