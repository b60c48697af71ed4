/* A free TCP port on the host's loopback, for forwards. */
#ifndef SBX_PORT_H
#define SBX_PORT_H

#include <stdint.h>

/* A TCP port that is free on 127.0.0.1 now (bind port 0, read it, close).
 * Another process may take it before the caller binds it. 0 or -errno. */
int sbx_free_tcp_port(uint16_t *port);

#endif
