#include "version.h"

const char *sandboxd_version(void) {
  return SBX_VERSION;
}
