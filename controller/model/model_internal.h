/* Private to the model clients: what both APIs share (api_common.c), the
 * operations each API defines (responses.c, chat.c), the table that
 * finds them by enum model_api (apis.c), and the recording and replay of
 * calls (replay.c). The APIs depend on the shared
 * helpers only; the client (model.c) on the table, never the other way.
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
#define MODEL_MAX_EXTRA_HEADERS 256 /* an agent file's extra_headers */

/* ---- shared by both APIs (api_common.c) ---------------------------- */

/* True for the tool_choice keywords "auto", "required" and "none"; any
 * other string names a tool. */
bool model_tool_choice_is_keyword(const char *s);

/* The message of an API error object (borrowed from J, NULL when none):
 * error.message, error (a string), message or detail. */
const char *model_error_message(json_t *j);
/* "error from URL: <message>" for the API error object J. */
int model_error_from(json_t *j, const char *url, struct sbx_error *e);
/* Whether REPLY from URL is an object without an "error": 0, or the error
 * (naming URL) that either API's parser reports. */
int model_reply_check(json_t *reply, const char *url, struct sbx_error *e);
/* Reads J[KEY] as an integer (0 when absent or not a number; a real past
 * the range of long long clamped to it). */
long long model_json_int(json_t *j, const char *key);
/* The most a token count of a reply is taken for: a server's count is
 * clamped to 0..MODEL_COUNT_MAX, so that a run's sums cannot overflow. */
#define MODEL_COUNT_MAX ((long long)1 << 40)
/* J[KEY] as a token count: model_json_int within 0..MODEL_COUNT_MAX. */
long long model_json_count(json_t *j, const char *key);

/* ---- beyond the body (settings.c) ---------------------------------- */

/* URL with SETTINGS' extra_query appended, percent-encoded (new; NULL on
 * OOM). */
char *model_settings_url(const char *url, json_t *settings);
/* "Name: value" lines (new, into OUT[0..*N)) for SETTINGS' extra_headers,
 * at most MAX: -E2BIG beyond, -ENOMEM. */
int model_settings_headers(json_t *settings, char **out, size_t max, size_t *n);

/* ---- the APIs (responses.c, chat.c) -------------------------------- */

/* A streamed reply being assembled from its events; each API defines its
 * own, and only that API's operations see inside. */
struct model_stream;

/* What a replay's divergence check compares of one conversation entry
 * (an input item, or a chat message). */
struct model_shape {
  const char *type;
  const char *role;
  const char *name;
  const char *call_id;
  char names[256]; /* chat: the names of an assistant message's tool calls */
  char ids[256];
};

/* One model API: its names, its endpoint, and how its bodies, replies and
 * streams are made and read. */
struct model_api_ops {
  struct model_api_features features; /* what callers may ask (model.h) */
  const char *name; /* in recordings and logs: "responses", "chat" */
  const char *path; /* appended to the base URL's path */
  /* The body member that holds the conversation ("input", "messages"),
   * and what replay errors call one entry of it and several. */
  const char *input_key;
  const char *entry_name;
  const char *entries_name;
  /* The conversation is sent as the items are, so the client keeps them
   * serialized from one call to the next. */
  bool cache_input;

  /* The body of the POST for REQ (new; it may share REQ's input array).
   * NULL on OOM. */
  json_t *(*build_body)(const struct model_request *req, bool stream);
  /* Reads a reply (borrowed; chat writes the ids it makes up for tool
   * calls into it, so a recording holds the ids the run used) into OUT
   * (new values). An error status or member is an error. */
  int (*parse)(json_t *reply, const char *url, struct model_response *out,
               struct sbx_error *e);

  /* Streaming. NEW: NULL on OOM; MAX_BYTES bounds what is assembled.
   * EVENT: one event's data (chat: a chunk or "[DONE]"); 0, or an error
   * for error events and data that is not JSON. DELIVERED: whether a text
   * delta has been handed to ON_DELTA. END: after the stream, the reply
   * in the non-stream shape (new) into *REPLY, or an error when the stream
   * ended before its end. FREE accepts NULL and returns NULL. */
  struct model_stream *(*stream_new)(model_delta_fn on_delta, void *delta_arg,
                                     size_t max_bytes);
  int (*stream_event)(struct model_stream *s, const char *data, size_t len,
                      const char *url, struct sbx_error *e);
  bool (*stream_delivered)(const struct model_stream *s);
  int (*stream_end)(struct model_stream *s, json_t **reply, const char *url,
                    struct sbx_error *e);
  struct model_stream *(*stream_free)(struct model_stream *s);

  /* Replay: the shape of one conversation entry of a body, and the name
   * of one of its tools (NULL: the tool's type is shown). */
  void (*shape_of)(json_t *entry, struct model_shape *s);
  const char *(*tool_name)(json_t *tool);
};

extern const struct model_api_ops model_responses_api;
extern const struct model_api_ops model_chat_api;

/* ---- the table of APIs (apis.c) ------------------------------------ */

/* API's operations, or NULL for an unknown API. */
const struct model_api_ops *model_api_ops(enum model_api api);
/* The API whose name (model_api_ops.name) is NAME, or NULL. */
const struct model_api_ops *model_api_named(const char *name);

/* ---- record and replay (replay.c) ---------------------------------- */

/* Appends each successful call to a file, one JSON line. */
struct model_recorder {
  int fd; /* -1 when not recording */
  char *path;
};

/* Opens PATH for appending. */
int model_record_open(struct model_recorder *r, const char *path,
                      struct sbx_error *e);
/* Closes; an unopened recorder ({.fd = -1}) is fine. */
void model_record_close(struct model_recorder *r);
/* Appends {"version":1, "api", "request":BODY, "response":REPLY}. */
int model_record_write(struct model_recorder *r,
                       const struct model_api_ops *api, json_t *body,
                       json_t *reply, struct sbx_error *e);

/* Serves calls from such a file. */
struct model_replay {
  char *path;    /* NULL when not replaying */
  json_t *calls; /* the recorded lines */
  size_t next;   /* calls served */
};

/* Reads the recording at PATH whole (at most 256 MiB and 100000 calls). */
int model_replay_load(struct model_replay *r, const char *path,
                      struct sbx_error *e);
/* Frees what model_replay_load read; a zeroed replay is fine. */
void model_replay_clear(struct model_replay *r);
/* The next recorded reply (new) into *REPLY, after checking that BODY,
 * what the run would send to API, matches the recorded request. */
int model_replay_next(struct model_replay *r, const struct model_api_ops *api,
                      json_t *body, json_t **reply, struct sbx_error *e);

#endif
