/* The remote backend: sandboxd instances already running on other hosts or
 * VMs (deploy/systemd/sandboxd-remote.service), reached over tls+tcp://
 * with mutual TLS from sbx's CA (controller/ca/ca.h). A sandbox claims a
 * free endpoint (a lease file beside its workspace), uses it, and empties
 * it and gives the lease back when it is removed. */
#ifndef SBX_REMOTE_H
#define SBX_REMOTE_H

#include "controller/backend/backend.h"

extern const struct backend backend_remote;

#endif
