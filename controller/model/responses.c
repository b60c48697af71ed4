/* The OpenAI Responses API: request bodies, replies and streamed events. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "controller/model/model_internal.h"
#include "shared/cleanup.h"

/* True when TOOLS has a hosted tool (not a function) of type NAME. */
static bool has_hosted_tool(json_t *tools, const char *name) {
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *type = json_string_value(json_object_get(t, "type"));
    if (type && strcmp(type, "function") != 0 && strcmp(type, name) == 0)
      return true;
  }
  return false;
}

/* The tool_choice value for the Responses API (new; NULL on OOM). */
static json_t *tool_choice(json_t *choice, json_t *tools) {
  const char *s = json_string_value(choice);
  if (!s || model_tool_choice_is_keyword(s))
    return json_deep_copy(choice);
  if (has_hosted_tool(tools, s))
    return json_pack("{ss}", "type", s);
  return json_pack("{ssss}", "type", "function", "name", s);
}

/* Settings copied under the same name. */
static const char *const same_name[] = {
    "temperature", "top_p", "truncation",   "reasoning",
    "metadata",    "store", "top_logprobs", "prompt_cache_retention",
};

/* Adds the model settings ST (the Python SDK's names) as the Responses
 * API's fields. -ENOMEM. */
static int add_settings(json_t *b, json_t *st, bool have_tools, json_t *tools) {
  json_t *v;
  int r = 0;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(same_name); i++)
    if ((v = json_object_get(st, same_name[i])))
      r |= json_object_set(b, same_name[i], v);
  if ((v = json_object_get(st, "max_tokens")))
    r |= json_object_set(b, "max_output_tokens", v);
  if (have_tools && (v = json_object_get(st, "tool_choice")))
    r |= json_object_set_new(b, "tool_choice", tool_choice(v, tools));
  if (have_tools && (v = json_object_get(st, "parallel_tool_calls")))
    r |= json_object_set(b, "parallel_tool_calls", v);
  return r ? -ENOMEM : 0;
}

/* The include list: response_include, then the logprobs that top_logprobs
 * asks for (new; [] when neither). */
static json_t *include_list(json_t *st) {
  json_t *inc = json_object_get(st, "response_include");
  _cleanup_json_ json_t *out =
      json_is_array(inc) ? json_copy(inc) : json_array();
  if (!out)
    return NULL;
  static const char logprobs[] = "message.output_text.logprobs";
  if (json_object_get(st, "top_logprobs")) {
    bool have = false;
    size_t i;
    json_t *x;
    json_array_foreach(out, i, x) {
      if (json_is_string(x) && strcmp(json_string_value(x), logprobs) == 0)
        have = true;
    }
    if (!have && json_array_append_new(out, json_string(logprobs)) < 0)
      return NULL;
  }
  return TAKE_PTR(out);
}

/* The text member: the output schema's format and the verbosity (new),
 * or NULL with neither (*OOM tells). */
static json_t *text_member(const struct model_request *req, bool *oom) {
  json_t *verbosity = json_object_get(req->model_settings, "verbosity");
  *oom = false;
  if (!req->output_schema && !verbosity)
    return NULL;
  _cleanup_json_ json_t *t = json_object();
  int r = t ? 0 : -1;
  if (r == 0 && verbosity)
    r = json_object_set(t, "verbosity", verbosity);
  if (r == 0 && req->output_schema) {
    const char *name =
        req->output_name ? req->output_name : MODEL_DEFAULT_OUTPUT_NAME;
    r = json_object_set_new(t, "format",
                            json_pack("{sssssOsb}", "type", "json_schema",
                                      "name", name, "schema",
                                      req->output_schema, "strict", 1));
  }
  *oom = r < 0;
  return r < 0 ? NULL : TAKE_PTR(t);
}

/* The body of POST /responses for REQ (new; shares REQ's input array). */
static json_t *build_body(const struct model_request *req, bool stream) {
  _cleanup_json_ json_t *b = json_object();
  if (!b)
    return NULL;
  json_t *st = json_is_object(req->model_settings) ? req->model_settings : NULL;
  bool have_tools = json_is_array(req->tools) && json_array_size(req->tools);
  int r = 0;
  /* With a reusable prompt and no model of its own, the agent leaves the
   * model to the prompt, as the SDK does. */
  if (req->model || !req->prompt)
    r |= json_object_set_new(b, "model",
                             json_string(req->model ? req->model : ""));
  if (req->instructions && req->instructions[0])
    r |= json_object_set_new(b, "instructions", json_string(req->instructions));
  r |= json_object_set_new(b, "input",
                           json_is_array(req->input) ? json_incref(req->input)
                                                     : json_array());
  r |= json_object_set_new(b, "include", include_list(st));
  if (have_tools)
    r |= json_object_set(b, "tools", req->tools);
  if (json_is_object(req->prompt))
    r |= json_object_set(b, "prompt", req->prompt);
  if (r || add_settings(b, st, have_tools, req->tools) < 0)
    return NULL;
  bool oom;
  json_t *text = text_member(req, &oom);
  if (oom || (text && json_object_set_new(b, "text", text) < 0))
    return NULL;
  if (json_is_object(req->extra))
    r |= json_object_update(b, req->extra);
  json_t *extra_body = json_object_get(st, "extra_body");
  if (json_is_object(extra_body))
    r |= json_object_update(b, extra_body);
  /* The transport stays what the call asks, as the SDK keeps it. */
  r |= json_object_set_new(b, "stream", json_boolean(stream));
  if (r)
    return NULL;
  return TAKE_PTR(b);
}

static void read_usage(json_t *u, struct model_usage *out) {
  memset(out, 0, sizeof(*out));
  if (!json_is_object(u))
    return;
  out->input_tokens = model_json_count(u, "input_tokens");
  out->output_tokens = model_json_count(u, "output_tokens");
  out->total_tokens = model_json_count(u, "total_tokens");
  out->reasoning_tokens = model_json_count(
      json_object_get(u, "output_tokens_details"), "reasoning_tokens");
  out->cached_tokens = model_json_count(
      json_object_get(u, "input_tokens_details"), "cached_tokens");
  if (!out->total_tokens)
    out->total_tokens = out->input_tokens + out->output_tokens;
}

/* The error for a response whose status is not a success. */
static int status_error(json_t *reply, const char *status, const char *url,
                        struct sbx_error *e) {
  if (strcmp(status, "incomplete") == 0) {
    const char *why = json_string_value(json_object_get(
        json_object_get(reply, "incomplete_details"), "reason"));
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "incomplete response from %s: %s", url,
                         why ? why : "no reason given");
  }
  const char *msg = model_error_message(reply);
  return sbx_error_set(e, SBX_UNAVAILABLE, EIO, "response %s at %s: %s", status,
                       url, msg ? msg : "no message given");
}

/* Reads a Responses object (borrowed) into OUT (new values). A status of
 * "failed", "incomplete" or "cancelled", or an "error" member, is an
 * error. */
static int parse(json_t *reply, const char *url, struct model_response *out,
                 struct sbx_error *e) {
  memset(out, 0, sizeof(*out));
  int rc = model_reply_check(reply, url, e);
  if (rc < 0)
    return rc;
  const char *status = json_string_value(json_object_get(reply, "status"));
  if (status &&
      (strcmp(status, "failed") == 0 || strcmp(status, "incomplete") == 0 ||
       strcmp(status, "cancelled") == 0))
    return status_error(reply, status, url, e);
  json_t *output = json_object_get(reply, "output");
  if (!json_is_array(output))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "unexpected reply from %s: no \"output\" array", url);
  out->output = json_deep_copy(output);
  const char *id = json_string_value(json_object_get(reply, "id"));
  out->id = id ? strdup(id) : NULL;
  if (!out->output || (id && !out->id)) {
    model_response_clear(out);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  read_usage(json_object_get(reply, "usage"), &out->usage);
  return 0;
}

/* Assembles a streamed response from its events. */
struct model_stream {
  model_delta_fn on_delta;
  void *delta_arg;
  bool delivered;
  json_t *completed; /* the response of response.completed */
  json_t *items;     /* items of response.output_item.done, in order */
};

static struct model_stream *stream_new(model_delta_fn on_delta, void *delta_arg,
                                       size_t max_bytes) {
  (void)max_bytes; /* what it keeps is bounded by the reply's limit */
  struct model_stream *s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  s->items = json_array();
  if (!s->items) {
    free(s);
    return NULL;
  }
  s->on_delta = on_delta;
  s->delta_arg = delta_arg;
  return s;
}

static struct model_stream *stream_free(struct model_stream *s) {
  if (!s)
    return NULL;
  json_decref(s->completed);
  json_decref(s->items);
  free(s);
  return NULL;
}

static bool stream_delivered(const struct model_stream *s) {
  return s->delivered;
}

/* One event's data (a JSON object with a "type"). Error events are
 * "error", "response.failed" and "response.incomplete". */
static int stream_event(struct model_stream *s, const char *data, size_t len,
                        const char *url, struct sbx_error *e) {
  json_error_t jerr;
  _cleanup_json_ json_t *ev = json_loadb(data, len, 0, &jerr);
  if (!ev)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "invalid JSON in the event stream from %s: %s", url,
                         jerr.text);
  const char *type = json_string_value(json_object_get(ev, "type"));
  if (!type)
    return 0;
  if (strcmp(type, "response.output_text.delta") == 0) {
    json_t *d = json_object_get(ev, "delta");
    if (json_is_string(d) && json_string_length(d) > 0 && s->on_delta) {
      s->on_delta(s->delta_arg, json_string_value(d), json_string_length(d));
      s->delivered = true;
    }
  } else if (strcmp(type, "response.output_item.done") == 0) {
    json_t *item = json_object_get(ev, "item");
    if (json_is_object(item) && json_array_append(s->items, item) < 0)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  } else if (strcmp(type, "response.completed") == 0) {
    json_t *resp = json_object_get(ev, "response");
    if (!json_is_object(resp))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                           "unexpected event from %s: response.completed "
                           "without a response",
                           url);
    json_decref(s->completed);
    s->completed = json_incref(resp);
  } else if (strcmp(type, "response.failed") == 0 ||
             strcmp(type, "response.incomplete") == 0) {
    json_t *resp = json_object_get(ev, "response");
    const char *status = json_string_value(json_object_get(resp, "status"));
    if (!status)
      status = strcmp(type, "response.failed") == 0 ? "failed" : "incomplete";
    return status_error(resp, status, url, e);
  } else if (strcmp(type, "error") == 0) {
    return model_error_from(ev, url, e);
  }
  return 0;
}

/* After the stream: the response of response.completed, or an error when
 * the stream ended before it. */
static int stream_end(struct model_stream *s, json_t **reply, const char *url,
                      struct sbx_error *e) {
  *reply = NULL;
  if (!s->completed)
    return sbx_error_set(e, SBX_UNAVAILABLE, ECONNRESET,
                         "the event stream from %s ended before "
                         "response.completed",
                         url);
  /* Some servers send the items only as output_item.done events. */
  json_t *output = json_object_get(s->completed, "output");
  if ((!json_is_array(output) || json_array_size(output) == 0) &&
      json_array_size(s->items) > 0 &&
      json_object_set(s->completed, "output", s->items) < 0)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  *reply = TAKE_PTR(s->completed);
  return 0;
}

/* An input item as a replay compares it. */
static void shape_of(json_t *item, struct model_shape *s) {
  memset(s, 0, sizeof(*s));
  s->role = json_string_value(json_object_get(item, "role"));
  s->type = json_string_value(json_object_get(item, "type"));
  if (!s->type && s->role)
    s->type = "message";
  s->name = json_string_value(json_object_get(item, "name"));
  s->call_id = json_string_value(json_object_get(item, "call_id"));
}

static const char *tool_name(json_t *tool) {
  return json_string_value(json_object_get(tool, "name"));
}

const struct model_api_ops model_responses_api = {
    .features =
        {
            .trace_name = "responses",
            .hosted_tools = true,
            .compaction = true,
            .tool_images = true,
        },
    .name = "responses",
    .path = "/responses",
    .input_key = "input",
    .entry_name = "input item",
    .entries_name = "input items",
    .cache_input = true,
    .build_body = build_body,
    .parse = parse,
    .stream_new = stream_new,
    .stream_event = stream_event,
    .stream_delivered = stream_delivered,
    .stream_end = stream_end,
    .stream_free = stream_free,
    .shape_of = shape_of,
    .tool_name = tool_name,
};
