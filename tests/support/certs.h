/* Certificates for the TLS tests and benchmarks, made with the openssl
 * command in a new directory under /tmp: a CA (ca.crt, ca.key), a server
 * certificate for 127.0.0.1 and localhost (server.crt, server.key), a client
 * certificate from the CA (client.crt, client.key) and one from an
 * unrelated CA (rogue.crt, rogue.key). Not Criterion: 0 or a negative
 * errno. */
#ifndef SBX_TEST_CERTS_H
#define SBX_TEST_CERTS_H

#include <stddef.h>

/* Makes them in a new directory whose path goes into DIR (SIZE bytes, at
 * least 32); -EIO when openssl failed. The caller removes the directory. */
int test_make_certs(char *dir, size_t size);

#endif
