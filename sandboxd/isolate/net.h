/* TEMP stub */
#ifndef SANDBOXD_NET_H
#define SANDBOXD_NET_H
#include "shared/errors.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
struct net_forward {
  uint16_t host_port;
  uint16_t port;
};
struct isolate_net;
int isolate_net_start(pid_t pid, const struct net_forward *fw, size_t nfw,
                      struct isolate_net **out, struct sbx_error *e);
pid_t isolate_net_pid(const struct isolate_net *n);
void isolate_net_stop(struct isolate_net *n);
int isolate_net_free_port(uint16_t *port, struct sbx_error *e);
#endif
