/* Base64 (RFC 4648, standard alphabet, padded) and lowercase hex. */
#ifndef SBX_ENCODE_H
#define SBX_ENCODE_H

#include <stddef.h>
#include <stdint.h>

/* Bytes needed for the encoding of N bytes, including the NUL. */
size_t sbx_base64_encoded_size(size_t n);
/* Encodes IN into OUT (at least sbx_base64_encoded_size(n) bytes), NUL-ends
 * it and returns its length. */
size_t sbx_base64_encode(const void *in, size_t n, char *out);
/* Decodes LEN chars of IN (padding optional, no whitespace) into OUT, which
 * holds at least len/4*3+3 bytes. Returns the decoded length or -EINVAL. */
long sbx_base64_decode(const char *in, size_t len, void *out);

/* Writes 2*N lowercase hex digits and a NUL to OUT. */
void sbx_hex_encode(const void *in, size_t n, char *out);
/* Appends the K bytes at B to OUT, of which N of OUTSZ bytes are used,
 * as far as they fit with a NUL after them; control bytes but newline
 * become '?', so a child's output can go into a message. The new N. */
size_t sbx_append_printable(char *out, size_t n, size_t outsz, const char *b,
                            size_t k);
/* The value of the hex digit C (either case), or -1. */
int sbx_hex_value(char c);
/* Decodes 2*N hex digits into N bytes; -EINVAL on odd length or a bad digit. */
int sbx_hex_decode(const char *in, size_t len, void *out);

#endif
