/* Random bytes, ids and tokens from getrandom(2). Thread-safe. */
#ifndef SBX_RAND_H
#define SBX_RAND_H

#include <stddef.h>
#include <stdint.h>

#define SBX_TOKEN_BYTES 32
#define SBX_TOKEN_HEX (SBX_TOKEN_BYTES * 2)

/* Fills BUF with N random bytes; 0 or a negative errno. */
int sbx_random_bytes(void *buf, size_t n);
/* Writes 2*NBYTES random hex digits and a NUL to OUT. */
int sbx_random_hex(char *out, size_t nbytes);
/* A random 128-bit id as 32 hex digits plus NUL (OUT holds 33 bytes). */
int sbx_random_id(char out[33]);
/* An RFC 4122 version 4 UUID, 36 chars plus NUL. */
int sbx_random_uuid(char out[37]);
/* A random 64-bit value (never fails: falls back to the clock if getrandom
 * does). */
uint64_t sbx_random_u64(void);

#endif
