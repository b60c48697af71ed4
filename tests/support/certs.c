#include "tests/support/certs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* The openssl commands, run in the new directory (%s). */
#define CERTS_SCRIPT                                                           \
  "(set -e; cd %s; K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "       \
  "-nodes'\n"                                                                  \
  "openssl req -x509 $K -keyout ca.key -out ca.crt -days 2 -subj "             \
  "/CN=sbx-test-ca\n"                                                          \
  "openssl req -x509 $K -keyout evil.key -out evil.crt -days 2 -subj "         \
  "/CN=evil-ca\n"                                                              \
  "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext\n"          \
  "for n in server client; do openssl req $K -keyout $n.key -out $n.csr "      \
  "-subj /CN=$n; openssl x509 -req -in $n.csr -CA ca.crt -CAkey ca.key "       \
  "-CAcreateserial -out $n.crt -days 2 -extfile san.ext; done\n"               \
  "openssl req $K -keyout rogue.key -out rogue.csr -subj /CN=rogue\n"          \
  "openssl x509 -req -in rogue.csr -CA evil.crt -CAkey evil.key "              \
  "-CAcreateserial -out rogue.crt -days 2\n"                                   \
  ") >/dev/null 2>&1"

int test_make_certs(char *dir, size_t size) {
  if (size < 32)
    return -EINVAL;
  (void)snprintf(dir, size, "/tmp/sbx-tls-XXXXXX");
  if (!mkdtemp(dir))
    return -errno;
  char cmd[sizeof(CERTS_SCRIPT) + 64];
  (void)snprintf(cmd, sizeof(cmd), CERTS_SCRIPT, dir);
  return system(cmd) == 0 ? 0 : -EIO;
}
