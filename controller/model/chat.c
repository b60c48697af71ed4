/* Chat Completions for OpenAI-compatible servers: items become messages on
 * the way out, the reply becomes items on the way back. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/model/model_internal.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/rand.h"

/* Appends the text of a Responses content array (output_text, input_text,
 * text and refusal parts) to B; a string is taken as it is. */
static int join_text(json_t *content, struct sbx_buf *b) {
  if (json_is_string(content))
    return sbx_buf_append(b, json_string_value(content),
                          json_string_length(content));
  size_t i;
  json_t *part;
  json_array_foreach(content, i, part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    json_t *text = json_object_get(part, "text");
    if (type && strcmp(type, "refusal") == 0)
      text = json_object_get(part, "refusal");
    if (json_is_string(text)) {
      int r =
          sbx_buf_append(b, json_string_value(text), json_string_length(text));
      if (r < 0)
        return r;
    }
  }
  return 0;
}

/* A string JSON value of the text of CONTENT (new). */
static json_t *text_of(json_t *content) {
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, SIZE_MAX / 2);
  if (join_text(content, &b) < 0)
    return NULL;
  return json_stringn(b.data ? b.data : "", b.len);
}

/* The URL of an input_image part: image_url as a string or {url}. */
static const char *image_url(json_t *part) {
  json_t *u = json_object_get(part, "image_url");
  if (json_is_object(u))
    u = json_object_get(u, "url");
  return json_string_value(u);
}

/* User or system content (new): a string stays a string; a parts array
 * becomes chat parts, text and image_url. */
static json_t *user_content(json_t *content) {
  if (!json_is_array(content))
    return json_is_string(content) ? json_incref(content) : json_string("");
  _cleanup_json_ json_t *parts = json_array();
  if (!parts)
    return NULL;
  size_t i;
  json_t *part;
  json_array_foreach(content, i, part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    json_t *p = NULL;
    if (!type)
      continue;
    if (strcmp(type, "input_text") == 0 || strcmp(type, "output_text") == 0 ||
        strcmp(type, "text") == 0) {
      p = json_pack("{sssO?}", "type", "text", "text",
                    json_object_get(part, "text"));
    } else if (strcmp(type, "input_image") == 0 && image_url(part)) {
      json_t *detail = json_object_get(part, "detail");
      p = json_is_string(detail)
              ? json_pack("{ss s{sssO}}", "type", "image_url", "image_url",
                          "url", image_url(part), "detail", detail)
              : json_pack("{ss s{ss}}", "type", "image_url", "image_url", "url",
                          image_url(part));
    } else {
      continue;
    }
    if (json_array_append_new(parts, p) < 0)
      return NULL;
  }
  return TAKE_PTR(parts);
}

/* A tool output as chat text (new): strings as they are; arrays of
 * input_text / input_image parts joined by newlines, images as their URL;
 * anything else as its JSON text. */
static json_t *tool_output_text(json_t *output) {
  if (json_is_string(output))
    return json_incref(output);
  if (!json_is_array(output)) {
    _cleanup_free_ char *s = json_dumps(output, JSON_COMPACT | JSON_ENCODE_ANY);
    return s ? json_string(s) : NULL;
  }
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, SIZE_MAX / 2);
  size_t i;
  json_t *part;
  json_array_foreach(output, i, part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    const char *text = NULL;
    if (json_is_string(part))
      text = json_string_value(part);
    else if (type &&
             (strcmp(type, "input_text") == 0 ||
              strcmp(type, "output_text") == 0 || strcmp(type, "text") == 0))
      text = json_string_value(json_object_get(part, "text"));
    else if (type && strcmp(type, "input_image") == 0)
      text = image_url(part);
    if (!text)
      continue;
    if ((b.len && sbx_buf_append(&b, "\n", 1) < 0) ||
        sbx_buf_append_str(&b, text) < 0)
      return NULL;
  }
  return json_stringn(b.data ? b.data : "", b.len);
}

/* Appends a tool call to the assistant message *CUR, making one (and
 * appending it to MSGS) when there is none. -ENOMEM. */
static int add_tool_call(json_t *msgs, json_t **cur, const char *call_id,
                         const char *name, json_t *arguments) {
  if (!*cur) {
    json_t *m = json_pack("{sssn}", "role", "assistant", "content");
    if (!m || json_array_append_new(msgs, m) < 0)
      return -ENOMEM;
    *cur = m;
  }
  json_t *calls = json_object_get(*cur, "tool_calls");
  if (!calls) {
    calls = json_array();
    if (!calls || json_object_set_new(*cur, "tool_calls", calls) < 0)
      return -ENOMEM;
  }
  json_t *tc = json_pack("{s:s, s:s, s:{s:s, s:o}}", "id",
                         call_id ? call_id : "", "type", "function", "function",
                         "name", name, "arguments", arguments);
  if (!tc || json_array_append_new(calls, tc) < 0)
    return -ENOMEM;
  return 0;
}

/* The messages for REQ's instructions and input items (new). */
static json_t *build_messages(const struct model_request *req) {
  _cleanup_json_ json_t *msgs = json_array();
  if (!msgs)
    return NULL;
  if (req->instructions && req->instructions[0] &&
      json_array_append_new(msgs, json_pack("{ssss}", "role", "system",
                                            "content", req->instructions)) < 0)
    return NULL;
  json_t *cur = NULL; /* the assistant message tool calls join */
  size_t i;
  json_t *item;
  json_array_foreach(req->input, i, item) {
    const char *type = json_string_value(json_object_get(item, "type"));
    const char *role = json_string_value(json_object_get(item, "role"));
    const char *call_id = json_string_value(json_object_get(item, "call_id"));
    if (!type && role)
      type = "message";
    if (!type)
      continue;
    json_t *m = NULL;
    if (strcmp(type, "message") == 0 && role) {
      json_t *content = json_object_get(item, "content");
      if (strcmp(role, "assistant") == 0) {
        m = json_pack("{ssso}", "role", "assistant", "content",
                      text_of(content));
        if (!m || json_array_append_new(msgs, m) < 0)
          return NULL;
        cur = m; /* tool calls that follow join this message */
        continue;
      }
      if (strcmp(role, "developer") == 0)
        role = "system";
      m = json_pack("{ssso}", "role", role, "content", user_content(content));
    } else if (strcmp(type, "function_call") == 0) {
      json_t *args = json_object_get(item, "arguments");
      const char *name = json_string_value(json_object_get(item, "name"));
      if (add_tool_call(msgs, &cur, call_id, name ? name : "",
                        json_is_string(args) ? json_incref(args)
                                             : json_string("{}")) < 0)
        return NULL;
      continue;
    } else if (strcmp(type, "apply_patch_call") == 0) {
      /* The function-tool form of the hosted tool: {"operation": ...}. */
      _cleanup_json_ json_t *a =
          json_pack("{sO?}", "operation", json_object_get(item, "operation"));
      _cleanup_free_ char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
      if (!s ||
          add_tool_call(msgs, &cur, call_id, "apply_patch", json_string(s)) < 0)
        return NULL;
      continue;
    } else if (strcmp(type, "function_call_output") == 0) {
      m = json_pack("{s:s, s:s?, s:o}", "role", "tool", "tool_call_id", call_id,
                    "content",
                    tool_output_text(json_object_get(item, "output")));
    } else if (strcmp(type, "apply_patch_call_output") == 0) {
      json_t *o = json_object_get(item, "output");
      const char *status = json_string_value(json_object_get(item, "status"));
      bool ok = status && strcmp(status, "completed") == 0;
      m = json_pack("{s:s, s:s?, s:s}", "role", "tool", "tool_call_id", call_id,
                    "content",
                    json_is_string(o) ? json_string_value(o)
                    : ok              ? "Patch applied."
                                      : "Patch failed.");
    } else {
      /* reasoning, compaction and other Responses-only items. */
      continue;
    }
    if (!m || json_array_append_new(msgs, m) < 0)
      return NULL;
    cur = NULL;
  }
  return TAKE_PTR(msgs);
}

/* Function tools in the chat shape (new); hosted tools are dropped. */
static json_t *build_tools(json_t *tools) {
  _cleanup_json_ json_t *out = json_array();
  if (!out)
    return NULL;
  size_t i;
  json_t *t;
  json_array_foreach(tools, i, t) {
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!type || strcmp(type, "function") != 0)
      continue;
    _cleanup_json_ json_t *fn = json_object();
    if (!fn)
      return NULL;
    static const char *const keys[] = {"name", "description", "parameters",
                                       "strict"};
    for (size_t k = 0; k < SBX_ARRAY_SIZE(keys); k++) {
      json_t *v = json_object_get(t, keys[k]);
      if (v && !json_is_null(v) && json_object_set(fn, keys[k], v) < 0)
        return NULL;
    }
    if (json_array_append_new(
            out, json_pack("{sssO}", "type", "function", "function", fn)) < 0)
      return NULL;
  }
  return TAKE_PTR(out);
}

static json_t *tool_choice(json_t *choice) {
  const char *s = json_string_value(choice);
  if (s && !model_tool_choice_is_keyword(s))
    return json_pack("{sss{ss}}", "type", "function", "function", "name", s);
  /* The Responses shape {"type":"function","name":...}. */
  const char *name = json_string_value(json_object_get(choice, "name"));
  if (json_is_object(choice) && name && !json_object_get(choice, "function"))
    return json_pack("{sss{ss}}", "type", "function", "function", "name", name);
  return json_deep_copy(choice);
}

/* Settings copied under the same name. */
static const char *const same_name[] = {
    "temperature",       "top_p",
    "frequency_penalty", "presence_penalty",
    "max_tokens",        "verbosity",
    "metadata",          "store",
    "top_logprobs",      "prompt_cache_retention",
};

/* Adds the model settings ST (the Python SDK's names) as Chat
 * Completions' fields. -ENOMEM. */
static int add_settings(json_t *b, json_t *st, bool have_tools, bool stream) {
  json_t *v;
  int r = 0;
  for (size_t i = 0; i < SBX_ARRAY_SIZE(same_name); i++)
    if ((v = json_object_get(st, same_name[i])))
      r |= json_object_set(b, same_name[i], v);
  if (have_tools && (v = json_object_get(st, "tool_choice")))
    r |= json_object_set_new(b, "tool_choice", tool_choice(v));
  if (have_tools && (v = json_object_get(st, "parallel_tool_calls")))
    r |= json_object_set(b, "parallel_tool_calls", v);
  v = json_object_get(json_object_get(st, "reasoning"), "effort");
  if (json_is_string(v))
    r |= json_object_set(b, "reasoning_effort", v);
  /* The API wants logprobs on whenever top_logprobs is given. */
  if (json_object_get(st, "top_logprobs"))
    r |= json_object_set_new(b, "logprobs", json_true());
  if (stream) {
    v = json_object_get(st, "include_usage");
    r |= json_object_set_new(
        b, "stream_options",
        json_pack("{sb}", "include_usage", v ? json_is_true(v) : 1));
  }
  return r ? -ENOMEM : 0;
}

/* The body of POST /chat/completions for REQ (new): items become
 * messages, function tools are kept, other tools dropped. */
static json_t *build_body(const struct model_request *req, bool stream) {
  _cleanup_json_ json_t *b = json_object();
  _cleanup_json_ json_t *tools = build_tools(req->tools);
  if (!b || !tools)
    return NULL;
  json_t *st = json_is_object(req->model_settings) ? req->model_settings : NULL;
  bool have_tools = json_array_size(tools) > 0;
  int r = 0;
  r |= json_object_set_new(b, "model",
                           json_string(req->model ? req->model : ""));
  r |= json_object_set_new(b, "messages", build_messages(req));
  if (have_tools)
    r |= json_object_set(b, "tools", tools);
  if (r || add_settings(b, st, have_tools, stream) < 0)
    return NULL;
  if (req->output_schema) {
    const char *name =
        req->output_name ? req->output_name : MODEL_DEFAULT_OUTPUT_NAME;
    r |= json_object_set_new(b, "response_format",
                             json_pack("{sss{sssOsb}}", "type", "json_schema",
                                       "json_schema", "name", name, "schema",
                                       req->output_schema, "strict", 1));
  }
  if (json_is_object(req->extra))
    r |= json_object_update(b, req->extra);
  json_t *extra_body = json_object_get(st, "extra_body");
  if (json_is_object(extra_body))
    r |= json_object_update(b, extra_body);
  r |= json_object_set_new(b, "stream", json_boolean(stream));
  if (r)
    return NULL;
  return TAKE_PTR(b);
}

/* "call_" and 24 random hex digits, for servers that send no tool call
 * id. */
static json_t *new_call_id(void) {
  char hex[25];
  if (sbx_random_hex(hex, 12) < 0)
    return NULL;
  char id[32];
  (void)snprintf(id, sizeof(id), "call_%s", hex);
  return json_string(id);
}

/* A text message item holding TEXT, or a refusal. */
static json_t *message_item(json_t *text, bool refusal) {
  return refusal
             ? json_pack("{sssssss[{sssO}]}", "type", "message", "role",
                         "assistant", "status", "completed", "content", "type",
                         "refusal", "refusal", text)
             : json_pack("{sssssss[{sssOs[]}]}", "type", "message", "role",
                         "assistant", "status", "completed", "content", "type",
                         "output_text", "text", text, "annotations");
}

/* Reads a chat completion (borrowed; tool calls without an id get one
 * written into it, so a recording holds the ids the run used) into OUT. */
static int parse(json_t *reply, const char *url, struct model_response *out,
                 struct sbx_error *e) {
  memset(out, 0, sizeof(*out));
  int rc = model_reply_check(reply, url, e);
  if (rc < 0)
    return rc;
  json_t *choice = json_array_get(json_object_get(reply, "choices"), 0);
  json_t *msg = json_object_get(choice, "message");
  if (!json_is_object(msg))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "unexpected reply from %s: no choices[0].message",
                         url);
  const char *finish =
      json_string_value(json_object_get(choice, "finish_reason"));
  if (finish && strcmp(finish, "length") == 0)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "incomplete response from %s: the model reached "
                         "its token limit (finish_reason \"length\")",
                         url);

  _cleanup_json_ json_t *output = json_array();
  if (!output)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  int r = 0;
  _cleanup_json_ json_t *text = text_of(json_object_get(msg, "content"));
  if (!text)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  if (json_string_length(text) > 0)
    r |= json_array_append_new(output, message_item(text, false));
  json_t *refusal = json_object_get(msg, "refusal");
  if (json_is_string(refusal) && json_string_length(refusal) > 0)
    r |= json_array_append_new(output, message_item(refusal, true));

  size_t i;
  json_t *tc;
  json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) {
    json_t *fn = json_object_get(tc, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    if (!name)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                           "unexpected reply from %s: tool call %zu has no "
                           "function name",
                           url, i);
    if (!json_is_string(json_object_get(tc, "id")) &&
        json_object_set_new(tc, "id", new_call_id()) < 0)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    /* Arguments sent as JSON rather than its text: their text; anything
     * else that is not a string: none. */
    json_t *args = json_object_get(fn, "arguments");
    bool container = json_is_object(args) || json_is_array(args);
    _cleanup_free_ char *dumped =
        container ? json_dumps(args, JSON_COMPACT) : NULL;
    if (container && !dumped)
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    const char *a = json_is_string(args) ? json_string_value(args)
                    : dumped             ? dumped
                                         : "{}";
    r |= json_array_append_new(
        output, json_pack("{ssssssssss}", "type", "function_call", "call_id",
                          json_string_value(json_object_get(tc, "id")), "name",
                          name, "arguments", a, "status", "completed"));
  }
  const char *id = json_string_value(json_object_get(reply, "id"));
  out->id = id ? strdup(id) : NULL;
  if (r || (id && !out->id)) {
    free(out->id);
    out->id = NULL;
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  out->output = TAKE_PTR(output);

  json_t *u = json_object_get(reply, "usage");
  out->usage.input_tokens = model_json_count(u, "prompt_tokens");
  out->usage.output_tokens = model_json_count(u, "completion_tokens");
  out->usage.total_tokens = model_json_count(u, "total_tokens");
  out->usage.reasoning_tokens = model_json_count(
      json_object_get(u, "completion_tokens_details"), "reasoning_tokens");
  out->usage.cached_tokens = model_json_count(
      json_object_get(u, "prompt_tokens_details"), "cached_tokens");
  if (!out->usage.total_tokens)
    out->usage.total_tokens =
        out->usage.input_tokens + out->usage.output_tokens;
  return 0;
}

struct chat_call {
  char *id;
  struct sbx_buf name;
  struct sbx_buf args;
  bool seen;
};

/* Assembles a streamed completion from its chunks. */
struct model_stream {
  model_delta_fn on_delta;
  void *delta_arg;
  bool delivered;
  bool done; /* data: [DONE] */
  size_t max;
  struct sbx_buf content;
  struct sbx_buf refusal;
  struct chat_call calls[MODEL_MAX_STREAM_TOOL_CALLS];
  size_t ncalls; /* highest index seen + 1 */
  json_t *id, *model, *created, *usage, *finish_reason;
};

static struct model_stream *stream_new(model_delta_fn on_delta, void *delta_arg,
                                       size_t max_bytes) {
  struct model_stream *s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  s->on_delta = on_delta;
  s->delta_arg = delta_arg;
  s->max = max_bytes ? max_bytes : ((size_t)64 << 20);
  sbx_buf_init(&s->content, s->max);
  sbx_buf_init(&s->refusal, s->max);
  for (size_t i = 0; i < MODEL_MAX_STREAM_TOOL_CALLS; i++) {
    sbx_buf_init(&s->calls[i].name, 4096);
    sbx_buf_init(&s->calls[i].args, s->max);
  }
  return s;
}

static struct model_stream *stream_free(struct model_stream *s) {
  if (!s)
    return NULL;
  sbx_buf_free(&s->content);
  sbx_buf_free(&s->refusal);
  for (size_t i = 0; i < MODEL_MAX_STREAM_TOOL_CALLS; i++) {
    free(s->calls[i].id);
    sbx_buf_free(&s->calls[i].name);
    sbx_buf_free(&s->calls[i].args);
  }
  json_decref(s->id);
  json_decref(s->model);
  json_decref(s->created);
  json_decref(s->usage);
  json_decref(s->finish_reason);
  free(s);
  return NULL;
}

static bool stream_delivered(const struct model_stream *s) {
  return s->delivered;
}

/* Keeps the first value of J[KEY] in *SLOT. */
static void keep(json_t **slot, json_t *j, const char *key) {
  json_t *v = json_object_get(j, key);
  if (!*slot && v && !json_is_null(v))
    *slot = json_incref(v);
}

static int append_str(struct sbx_buf *b, json_t *v) {
  if (!json_is_string(v))
    return 0;
  return sbx_buf_append(b, json_string_value(v), json_string_length(v));
}

static int stream_tool_calls(struct model_stream *s, json_t *calls,
                             const char *url, struct sbx_error *e) {
  size_t i;
  json_t *tc;
  json_array_foreach(calls, i, tc) {
    json_t *jidx = json_object_get(tc, "index");
    long long idx =
        json_is_integer(jidx) ? json_integer_value(jidx) : (long long)i;
    if (idx < 0 || idx >= MODEL_MAX_STREAM_TOOL_CALLS)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "event stream from %s: tool call index %lld is "
                           "out of range (at most %d calls)",
                           url, idx, MODEL_MAX_STREAM_TOOL_CALLS);
    struct chat_call *c = &s->calls[idx];
    c->seen = true;
    if ((size_t)idx + 1 > s->ncalls)
      s->ncalls = (size_t)idx + 1;
    const char *id = json_string_value(json_object_get(tc, "id"));
    if (id && id[0] && !c->id && !(c->id = strdup(id)))
      return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
    json_t *fn = json_object_get(tc, "function");
    int r = append_str(&c->name, json_object_get(fn, "name"));
    if (r == 0)
      r = append_str(&c->args, json_object_get(fn, "arguments"));
    if (r < 0)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, -r,
                           "event stream from %s: tool call %lld is too "
                           "large",
                           url, idx);
  }
  return 0;
}

/* One "data:" payload: a chunk, or "[DONE]". */
static int stream_event(struct model_stream *s, const char *data, size_t len,
                        const char *url, struct sbx_error *e) {
  if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
    s->done = true;
    return 0;
  }
  json_error_t jerr;
  _cleanup_json_ json_t *ev = json_loadb(data, len, 0, &jerr);
  if (!ev)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EBADMSG,
                         "invalid JSON in the event stream from %s: %s", url,
                         jerr.text);
  json_t *err = json_object_get(ev, "error");
  if (err && !json_is_null(err))
    return model_error_from(ev, url, e);
  keep(&s->id, ev, "id");
  keep(&s->model, ev, "model");
  keep(&s->created, ev, "created");
  json_t *u = json_object_get(ev, "usage");
  if (json_is_object(u)) {
    json_decref(s->usage);
    s->usage = json_incref(u);
  }
  size_t i;
  json_t *choice;
  json_array_foreach(json_object_get(ev, "choices"), i, choice) {
    json_t *idx = json_object_get(choice, "index");
    if (json_is_integer(idx) && json_integer_value(idx) != 0)
      continue; /* only the first choice is used */
    json_t *delta = json_object_get(choice, "delta");
    json_t *content = json_object_get(delta, "content");
    if (json_is_string(content) && json_string_length(content) > 0) {
      if (append_str(&s->content, content) < 0)
        return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                             "event stream from %s: the message is too large",
                             url);
      if (s->on_delta) {
        s->on_delta(s->delta_arg, json_string_value(content),
                    json_string_length(content));
        s->delivered = true;
      }
    }
    if (append_str(&s->refusal, json_object_get(delta, "refusal")) < 0)
      return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                           "event stream from %s: the refusal is too large",
                           url);
    int r = stream_tool_calls(s, json_object_get(delta, "tool_calls"), url, e);
    if (r < 0)
      return r;
    json_t *fin = json_object_get(choice, "finish_reason");
    if (json_is_string(fin)) {
      json_decref(s->finish_reason);
      s->finish_reason = json_incref(fin);
    }
  }
  return 0;
}

/* After the stream: the chunks assembled into the non-stream shape. */
static int stream_end(struct model_stream *s, json_t **reply, const char *url,
                      struct sbx_error *e) {
  *reply = NULL;
  if (!s->done && !s->finish_reason)
    return sbx_error_set(e, SBX_UNAVAILABLE, ECONNRESET,
                         "the event stream from %s ended before [DONE]", url);
  _cleanup_json_ json_t *msg = json_pack("{ss}", "role", "assistant");
  _cleanup_json_ json_t *calls = json_array();
  if (!msg || !calls)
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  int r = json_object_set_new(
      msg, "content",
      s->content.len ? json_stringn(s->content.data, s->content.len)
                     : json_null());
  if (s->refusal.len)
    r |= json_object_set_new(msg, "refusal",
                             json_stringn(s->refusal.data, s->refusal.len));
  for (size_t i = 0; i < s->ncalls; i++) {
    struct chat_call *c = &s->calls[i];
    if (!c->seen)
      continue;
    json_t *tc = json_pack(
        "{s:s?, s:s, s:{s:s%, s:s%}}", "id", c->id, "type", "function",
        "function", "name", c->name.data ? c->name.data : "", c->name.len,
        "arguments", c->args.data ? c->args.data : "", c->args.len);
    r |= json_array_append_new(calls, tc);
  }
  if (json_array_size(calls))
    r |= json_object_set(msg, "tool_calls", calls);
  json_t *out =
      json_pack("{s:O?, s:s, s:O?, s:O?, s:[{s:i, s:O, s:O?}], s:O?}", "id",
                s->id, "object", "chat.completion", "created", s->created,
                "model", s->model, "choices", "index", 0, "message", msg,
                "finish_reason", s->finish_reason, "usage", s->usage);
  if (r || !out) {
    json_decref(out);
    return sbx_error_set(e, SBX_OK, ENOMEM, "out of memory");
  }
  *reply = out;
  return 0;
}

/* A chat message as a replay compares it: an assistant message's tool
 * calls by their names and ids. */
static void shape_of(json_t *msg, struct model_shape *s) {
  memset(s, 0, sizeof(*s));
  s->role = json_string_value(json_object_get(msg, "role"));
  s->type = "message";
  s->call_id = json_string_value(json_object_get(msg, "tool_call_id"));
  size_t i;
  json_t *tc;
  size_t nn = 0, ni = 0;
  json_array_foreach(json_object_get(msg, "tool_calls"), i, tc) {
    const char *name = json_string_value(
        json_object_get(json_object_get(tc, "function"), "name"));
    const char *id = json_string_value(json_object_get(tc, "id"));
    int w = snprintf(s->names + nn, sizeof(s->names) - nn, "%s%s", i ? "," : "",
                     name ? name : "?");
    if (w > 0 && (size_t)w < sizeof(s->names) - nn)
      nn += (size_t)w;
    w = snprintf(s->ids + ni, sizeof(s->ids) - ni, "%s%s", i ? "," : "",
                 id ? id : "?");
    if (w > 0 && (size_t)w < sizeof(s->ids) - ni)
      ni += (size_t)w;
  }
  if (nn)
    s->name = s->names;
  if (ni)
    s->call_id = s->ids;
}

static const char *tool_name(json_t *tool) {
  return json_string_value(
      json_object_get(json_object_get(tool, "function"), "name"));
}

const struct model_api_ops model_chat_api = {
    .features =
        {
            .trace_name = "chat_completions",
            .hosted_tools = false,
            .compaction = false,
            .tool_images = false,
        },
    .name = "chat",
    .path = "/chat/completions",
    .input_key = "messages",
    .entry_name = "message",
    .entries_name = "messages",
    .cache_input = false,
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
