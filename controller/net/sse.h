/* A push parser for Server-Sent Events (text/event-stream), as the model APIs
 * stream responses.
 *
 * It follows the WHATWG HTML "event stream interpretation" rules: lines end in
 * \n, \r\n or \r (a \r at the end of one chunk and a \n at the start of the
 * next are one line end); one leading byte order mark is ignored; a line
 * starting with ':' is a comment; "field: value" loses one space after the
 * colon; "data" lines are joined with \n; "event" sets the type, "id" the last
 * event id (unless it holds a NUL) and "retry" the reconnection time (digits
 * only); other fields are ignored; an empty line dispatches the event, unless
 * no data line was seen. Bytes are passed through as they are: the parser
 * does not decode or check UTF-8.
 *
 * Memory is bounded: the pending line plus the event being built (data and
 * type) may not exceed max_event_bytes. Past it sse_feed fails with -E2BIG
 * and the parser stays failed.
 *
 * Not thread-safe: one parser per stream. */
#ifndef SBX_SSE_H
#define SBX_SSE_H

#include <stddef.h>
#include <stdint.h>

#include "shared/errors.h"

#define SSE_DEFAULT_MAX_EVENT_BYTES (16u << 20) /* 16 MiB */

/* One dispatched event. Every pointer is borrowed and valid only during the
 * callback; each string is NUL-terminated (data may also hold NUL bytes, so
 * use the lengths). */
struct sse_event {
  const char *type; /* the "event" field, or "message" when none was given */
  size_t type_len;
  const char *data; /* "data" lines joined by \n, without the last \n */
  size_t data_len;
  const char *id; /* the last event id, "" when none was set */
  size_t id_len;
};

/* Called once per event. Returning a negative errno stops sse_feed, which
 * returns that value; the bytes after the event are not parsed, and the
 * parser stays failed. */
typedef int (*sse_event_fn)(const struct sse_event *ev, void *userdata);

struct sse_parser;

/* Makes a parser into *OUT (new; free with sse_parser_free) that calls FN
 * with USERDATA. MAX_EVENT_BYTES 0 means SSE_DEFAULT_MAX_EVENT_BYTES.
 * 0 or -ENOMEM. */
int sse_parser_new(size_t max_event_bytes, sse_event_fn fn, void *userdata,
                   struct sse_parser **out);
/* Frees P; accepts NULL; returns NULL. */
struct sse_parser *sse_parser_free(struct sse_parser *p);

/* Parses LEN more bytes of the stream, calling the callback for each event
 * they complete. Chunks may split the stream anywhere. Returns 0; -E2BIG
 * (SBX_LIMIT_EXCEEDED) when an event grows past the limit; -ENOMEM; or the
 * callback's negative return. After a failure every call fails with the same
 * error. E (may be NULL) receives a message. */
int sse_feed(struct sse_parser *p, const void *bytes, size_t len,
             struct sbx_error *e);

/* Ends the stream. By the standard an event not yet ended by an empty line is
 * discarded, not dispatched. Returns 1 when something (an unfinished line or
 * event) was discarded, else 0. Afterwards the parser is ready for a new
 * stream (a failed one too); it keeps only the last event id and the retry
 * time. */
int sse_finish(struct sse_parser *p);

/* The last "retry" value in milliseconds, or -1 when none was valid. */
int64_t sse_retry_ms(const struct sse_parser *p);

#endif
