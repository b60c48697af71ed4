/* Private to the model clients (model.c, responses.c, chat.c): request
 * bodies, reply parsing and stream assembly for each API.
 *
 * Every function that fails returns a negative errno and fills E with a
 * message that names URL, the endpoint as a person sees it. */
#ifndef SBX_MODEL_INTERNAL_H
#define SBX_MODEL_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "controller/model/model.h"
#include "shared/errors.h"

#define MODEL_DEFAULT_OUTPUT_NAME "final_output"
#define MODEL_MAX_STREAM_TOOL_CALLS 256

/* True for the tool_choice keywords "auto", "required" and "none"; any
 * other string names a tool. */
bool model_tool_choice_is_keyword(const char *s);

/* The message of an API error object (borrowed from J, NULL when none):
 * error.message, error (a string), message or detail. */
const char *model_error_message(json_t *j);
/* Whether REPLY from URL is an object without an "error": 0, or the error
 * (naming URL) that either API's parser reports. */
int model_reply_check(json_t *reply, const char *url, struct sbx_error *e);
/* Reads J[KEY] as an integer (0 when absent or not a number). */
long long model_json_int(json_t *j, const char *key);

/* ---- Responses API (responses.c) ---------------------------------- */

/* The body of POST /responses for REQ (new; shares REQ's input array). */
json_t *responses_build_body(const struct model_request *req, bool stream);
/* Reads a Responses object (borrowed) into OUT (new values). A status of
 * "failed", "incomplete" or "cancelled", or an "error" member, is an
 * error. */
int responses_parse(json_t *reply, const char *url, struct model_response *out,
                    struct sbx_error *e);

/* Assembles a streamed response from its events. */
struct responses_stream;
struct responses_stream *responses_stream_new(model_delta_fn on_delta,
                                              void *delta_arg);
struct responses_stream *responses_stream_free(struct responses_stream *s);
/* One event's data (a JSON object with a "type"). 0, or an error for
 * error events ("error", "response.failed", "response.incomplete") and
 * data that is not JSON. */
int responses_stream_event(struct responses_stream *s, const char *data,
                           size_t len, const char *url, struct sbx_error *e);
/* True once a text delta has been handed to the delta callback. */
bool responses_stream_delivered(const struct responses_stream *s);
/* After the stream: the final Responses object (new) into *REPLY, or an
 * error when the stream ended before response.completed. */
int responses_stream_end(struct responses_stream *s, json_t **reply,
                         const char *url, struct sbx_error *e);

/* ---- Chat Completions (chat.c) ------------------------------------ */

/* The body of POST /chat/completions for REQ (new): items become
 * messages, function tools are kept, other tools dropped. */
json_t *chat_build_body(const struct model_request *req, bool stream);
/* Reads a chat completion (borrowed; tool calls without an id get one
 * written into it, so a recording holds the ids the run used) into OUT. */
int chat_parse(json_t *reply, const char *url, struct model_response *out,
               struct sbx_error *e);

struct chat_stream;
struct chat_stream *chat_stream_new(model_delta_fn on_delta, void *delta_arg,
                                    size_t max_bytes);
struct chat_stream *chat_stream_free(struct chat_stream *s);
/* One "data:" payload: a chunk, or "[DONE]". */
int chat_stream_event(struct chat_stream *s, const char *data, size_t len,
                      const char *url, struct sbx_error *e);
bool chat_stream_delivered(const struct chat_stream *s);
/* After the stream: the chunks assembled into the non-stream shape (new). */
int chat_stream_end(struct chat_stream *s, json_t **reply, const char *url,
                    struct sbx_error *e);

#endif
