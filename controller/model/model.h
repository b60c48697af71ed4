/* Model clients: the OpenAI Responses API and Chat Completions over libcurl,
 * with retries, streaming (SSE), bounded responses, and record/replay.
 *
 * The conversation is kept in the Responses API's item format (json_t
 * arrays of items such as {"type":"message",...}, {"type":"function_call",
 * ...}, {"type":"function_call_output",...}, {"type":"reasoning",...},
 * {"type":"apply_patch_call",...}). The Chat Completions client converts
 * items to messages on the way out and the reply back to items, so the
 * runner sees one format.
 *
 * Thread-safety: one model_client may be used by one call at a time per
 * thread; calls on the same client from several threads are serialized
 * internally (record/replay files are shared). */
#ifndef SBX_MODEL_H
#define SBX_MODEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "shared/errors.h"

enum model_api {
  MODEL_API_RESPONSES = 0,
  MODEL_API_CHAT = 1,
};

/* What an API offers that its callers shape requests by. */
struct model_api_features {
  const char *trace_name; /* sbx.model.api: "responses", "chat_completions" */
  bool hosted_tools; /* takes hosted tools such as {"type":"apply_patch"} */
  bool compaction;   /* compacts on the server (context_management) */
  bool tool_images;  /* a tool's output may hold images, not only text */
};

/* API's features (static), or NULL for an unknown API. */
const struct model_api_features *model_api_features(enum model_api api);

/* Called for each text delta while streaming (may be NULL). */
typedef void (*model_delta_fn)(void *arg, const char *text, size_t len);

struct model_config {
  enum model_api api;
  const char *base_url;        /* default $OPENAI_BASE_URL or
                                  https://api.openai.com/v1; http:// or https://,
                                  "/responses" or "/chat/completions" is added */
  const char *api_key;         /* default $OPENAI_API_KEY (when NULL); "" or no
                                  key: no Authorization header (local servers);
                                  refused for OpenAI's own API (*.openai.com)
                                  unless replaying: "no API key for URL: ..."
                                  $OPENAI_ORG_ID and $OPENAI_PROJECT_ID, when
                                  set, go as OpenAI-Organization and
                                  OpenAI-Project headers, as the openai
                                  client sends them */
  unsigned timeout_ms;         /* whole request; 0 means 600000 */
  unsigned connect_timeout_ms; /* 0 means 10000 */
  unsigned first_byte_timeout_ms; /* nothing of the response this long after
                                     the request; 0 means 60000 */
  unsigned idle_timeout_ms; /* nothing more of it this long; 0 means 30000 */
  unsigned max_retries;     /* on 429, 5xx and connection errors; 0 means 4;
                               use model_config.no_retries to disable; a
                               timeout is retried once at most */
  bool no_retries;
  unsigned retry_base_ms;    /* first backoff; 0 means 500 */
  size_t max_response_bytes; /* 0 means 64 MiB */
  bool stream;               /* use SSE */
  const char *record_path;   /* append request/response pairs as JSON lines */
  const char *replay_path;   /* serve responses from such a file */
  model_delta_fn on_delta;
  void *delta_arg;
  /* When set, a call (a request in flight or a wait between retries)
   * stops soon after *cancel turns true: -ECANCELED. Borrowed. */
  const volatile bool *cancel;
};

/* Sets CFG's timeouts from SPEC, "NAME=SECONDS[,...]" with NAME connect,
 * first_byte, idle or total (1..86400 s each). -EINVAL with E naming the
 * bad part. */
int model_parse_timeouts(const char *spec, struct model_config *cfg,
                         struct sbx_error *e);

struct model_request {
  const char *model;
  const char *instructions; /* system prompt */
  json_t *input;            /* borrowed: array of items */
  json_t *tools;            /* borrowed: array of Responses-format tools
                               ({"type":"function",name,description,
                               parameters,strict} or {"type":"apply_patch"}) */
  json_t *model_settings;   /* borrowed, may be NULL: the Python SDK's
                               ModelSettings as an agent file holds them
                               (temperature, top_p, max_tokens, reasoning,
                               verbosity, store, extra_headers, ...),
                               mapped onto each API's names */
  json_t *output_schema;    /* borrowed, may be NULL: JSON schema of the
                               final output (structured output) */
  const char *output_name;  /* schema name, default "final_output" */
  json_t *extra;            /* borrowed, may be NULL: merged into the body
                               (e.g. context_management) */
  json_t *prompt;           /* borrowed, may be NULL: the Responses API's
                               reusable prompt; with it MODEL may be NULL
                               (the prompt's model applies) */
};

struct model_usage {
  long long input_tokens;
  long long output_tokens;
  long long total_tokens;
  long long reasoning_tokens;
  long long cached_tokens;
};

struct model_response {
  json_t *output; /* new: array of items */
  char *id;       /* new, may be NULL */
  struct model_usage usage;
};

struct model_client;

int model_client_new(const struct model_config *cfg, struct model_client **out,
                     struct sbx_error *e);
/* Frees; accepts NULL; returns NULL. */
struct model_client *model_client_free(struct model_client *m);
enum model_api model_client_api(const struct model_client *m);
/* True when serving from a recording. */
bool model_client_replaying(const struct model_client *m);

/* One model call. On success OUT holds new values (free with
 * model_response_clear); on failure OUT is empty.
 *
 * Retries: 408, 409, 429, 500, 502, 503, 504 (or what an x-should-retry
 * header says), connection failures, timeouts and cut-off replies are tried
 * again up to max_retries times, waiting Retry-After / retry-after-ms
 * (at most 60 s) or else retry_base_ms doubled per attempt (at most 20 s)
 * with jitter. A stream that already delivered deltas is not retried (the
 * text would show twice). Other 4xx fail at once.
 *
 * Errors are for a person and never contain the API key (each whole
 * occurrence is replaced by "[redacted]" should a server echo it, before a
 * body is cut to fit; a key shorter than 8 characters is no secret and is
 * left, so that it cannot mangle the message):
 *   "401 from https://api.openai.com/v1/responses: Incorrect API key ..."
 *   "503 from URL: <message> (after 4 retries)"
 *   "cannot connect to URL: <curl message>"
 *   "request to URL timed out: <curl message>"
 *   "response from URL exceeds 64 MiB"
 *   "invalid JSON from URL: <jansson message>"
 *   "incomplete response from URL: max_output_tokens"
 *   "replay diverged at model call 3: input item 5 is function_call_output
 *    for call_ab, the recording has message (user)"
 *   "replay has only 4 recorded model calls"
 *   "replay refused: the instructions differ from the recording's first
 *    request at byte 120: the run has \"...\", the recording \"...\" (...)"
 *
 * Record and replay: with record_path each successful call appends one line
 * {"version":1, "api":"responses"|"chat", "request":<the body sent>,
 * "response":<the reply; a streamed chat reply assembled into the
 * non-stream shape>}. With replay_path (read whole at model_client_new, at
 * most 256 MiB and 100000 calls) each call takes the next line instead of
 * the network, after checking that the run has not diverged: the same API,
 * model and tool names, the same number of input items (chat: messages),
 * and for each the same type, role, call_id and name (tool output text is
 * not compared: it holds wall times and random chunk ids). The first call
 * must be the recording's own: the same instructions, system, developer
 * and user messages (the prompt) and tool definitions, so that a recording
 * is not replayed for another agent, prompt or tools. When streaming,
 * a replayed reply's text is handed to on_delta.
 *
 * With stream set, text deltas go to on_delta as they arrive; a server
 * that answers a streaming request with plain JSON still works, and its
 * final text is handed to on_delta. */
int model_call(struct model_client *m, const struct model_request *req,
               struct model_response *out, struct sbx_error *e);
void model_response_clear(struct model_response *r);

/* The body model_call would send for REQ (new; it may share REQ's input
 * and tools arrays, so use it before changing them). NULL on OOM.
 *
 * Responses, as the SDK's OpenAIResponsesModel: {model, instructions,
 * input, include (response_include, plus message.output_text.logprobs
 * with top_logprobs; [] when neither), tools, tool_choice and
 * parallel_tool_calls (with tools), temperature, top_p, truncation,
 * max_output_tokens (max_tokens), reasoning, text {format (json_schema,
 * strict) for output_schema, verbosity}, metadata, store (only when set),
 * prompt_cache_retention, top_logprobs, stream} with EXTRA merged, then
 * extra_body; stream stays. A tool_choice naming a hosted tool (e.g.
 * "apply_patch") becomes {"type":"apply_patch"}, another name
 * {"type":"function","name":...}.
 *
 * Chat, as OpenAIChatCompletionsModel: {model, messages, tools (function
 * tools only), tool_choice, parallel_tool_calls, temperature, top_p,
 * frequency_penalty, presence_penalty, max_tokens, reasoning_effort
 * (reasoning.effort), verbosity, metadata, store, prompt_cache_retention,
 * top_logprobs with logprobs:true, response_format, stream,
 * stream_options.include_usage when streaming (include_usage, default
 * true)} with EXTRA merged, then extra_body.
 * Instructions become the system message; consecutive function_call items
 * one assistant message with tool_calls; function_call_output a "tool"
 * message whose content is the output text (input_text parts and
 * input_image URLs joined by newlines); developer messages are sent as
 * system; reasoning and other Responses-only items are dropped. */
json_t *model_build_body(const struct model_client *m,
                         const struct model_request *req);

/* The SDK's model settings for MODEL when an agent gives none (new; NULL
 * on OOM): for GPT-5 and newer (chat aliases aside) {"verbosity": "low"}
 * with the model's default {"reasoning": {"effort"}} when one is known
 * ("none" for gpt-5.6-luna, "low" for gpt-5, ...); {} for other models. */
json_t *model_default_settings(const char *model);

/* The context length at which to compact MODEL's conversation: 0.9 of
 * its context window; 240000 for unknown models (or NULL). A provider
 * prefix ("openai/gpt-5") and case do not matter. */
long long model_compaction_threshold(const char *model);

#endif
