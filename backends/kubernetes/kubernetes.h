/* The kubernetes backend: each sandbox is a Pod running sandboxd as its
 * entrypoint, made through the Kubernetes REST API (libcurl; never kubectl),
 * with a Secret holding its TLS material and token and a NetworkPolicy
 * (ingress only from the controller; egress denied for network_mode
 * "none"), both owned by the Pod so that deleting the Pod removes them.
 * sbx waits for the Pod to be Ready by watching it, then dials
 * tls+tcp://POD_IP:7443 with the Pod's name as the TLS server name and its
 * client certificate from sbx's CA (controller/ca/ca.h). See
 * docs/kubernetes.md. */
#ifndef SBX_KUBERNETES_H
#define SBX_KUBERNETES_H

#include "controller/backend/backend.h"

extern const struct backend backend_kubernetes;

#endif
