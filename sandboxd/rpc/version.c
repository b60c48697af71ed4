#include "sandboxd/rpc/version.h"

const char *sandboxd_version(void) {
  return SBX_VERSION;
}
