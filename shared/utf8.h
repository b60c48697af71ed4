/* UTF-8 as JavaScript sees it: scanning one character and replacing invalid
 * sequences, the way the WHATWG decoder (and so Node's TextDecoder) does.
 * For model-facing text (tool outputs, events, span attributes) that must be
 * valid UTF-8 in JSON. Pure functions, thread-safe. */
#ifndef SBX_UTF8_H
#define SBX_UTF8_H

#include <stdbool.h>
#include <stddef.h>

#include "shared/buf.h"

/* Scans one character at S (N > 0 bytes left). Returns the length of a valid
 * UTF-8 sequence and sets *VALID, or the length of the maximal invalid
 * subpart (at least 1) and clears *VALID: the lead byte plus the continuation
 * bytes that were acceptable before the sequence broke off (WHATWG). */
size_t sbx_utf8_scan(const unsigned char *s, size_t n, bool *valid);

/* Appends TEXT (LEN bytes) to OUT with every invalid UTF-8 sequence replaced
 * by U+FFFD, one per maximal invalid subpart, as the WHATWG decoder (and so
 * Node's TextDecoder) does. Overlong forms, surrogates and code points above
 * U+10FFFF are invalid. 0, -E2BIG or -ENOMEM. */
int sbx_utf8_sanitize(const char *text, size_t len, struct sbx_buf *out);

#endif
