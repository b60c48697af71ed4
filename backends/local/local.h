/* The local backend: a sandboxd child of sbx serving a workspace directory
 * on the host, reached over ipc://. */
#ifndef SBX_LOCAL_H
#define SBX_LOCAL_H

#include "controller/backend/backend.h"

extern const struct backend backend_local;

#endif
