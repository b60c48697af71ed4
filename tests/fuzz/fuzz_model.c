/* libFuzzer target for the model replies (controller/model/responses.c and
 * chat.c): what a model server sends back, turned into the items the
 * runner reads, through the operations model_call uses.
 *
 * Input: one header byte, then the body.
 *   bit 0  the API: 0 Responses, 1 Chat Completions
 *   bit 1  0: a JSON reply (parse); 1: a text/event-stream, its events'
 *          data handed to stream_event, then stream_end and parse, as
 *          model.c does with a streamed reply
 *
 * Checks: a reply that parses gives an array of items that survive a
 * serialization round trip (they go into the journal and the next
 * request); chat's items are objects with a type, function calls with a
 * call id, name and arguments; a streamed chat reply's message holds
 * exactly the text deltas shown on the way. A refused one leaves nothing
 * in the response and its message names the server, unless memory ran
 * out. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controller/model/model_internal.h"
#include "controller/net/sse.h"
#include "shared/buf.h"
#include "shared/cleanup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define URL "https://model.test/v1"

struct stream_run {
  const struct model_api_ops *ops;
  struct model_stream *s;
  struct sbx_error e;
  struct sbx_buf deltas; /* the text shown while streaming */
};

/* The delta callback: collects what a person would have seen. */
static void on_delta(void *arg, const char *text, size_t len) {
  struct stream_run *r = arg;
  if (!text || !len || text[len] != '\0')
    abort();
  if (sbx_buf_append(&r->deltas, text, len) < 0)
    abort();
}

/* One server-sent event, as model.c's on_event hands it on. */
static int on_event(const struct sse_event *ev, void *arg) {
  struct stream_run *r = arg;
  return r->ops->stream_event(r->s, ev->data, ev->data_len, URL, &r->e);
}

/* Whether an error message names the server, as every one must (those
 * for memory that ran out need not). */
static void check_error(int rc, const struct sbx_error *e) {
  if (rc >= 0 || !memchr(e->msg, '\0', sizeof(e->msg)))
    abort();
  if (rc != -ENOMEM && !strstr(e->msg, URL))
    abort();
}

/* Checks the items of a parsed reply. */
static void check_output(const struct model_api_ops *ops, json_t *output) {
  if (!json_is_array(output))
    abort();
  _cleanup_free_ char *text = json_dumps(output, JSON_COMPACT);
  if (!text)
    abort();
  json_error_t jerr;
  _cleanup_json_ json_t *again = json_loads(text, 0, &jerr);
  if (!again || !json_equal(again, output))
    abort();
  if (ops != &model_chat_api)
    return; /* Responses items are passed on as the server wrote them */
  size_t i;
  json_t *item;
  json_array_foreach(output, i, item) {
    const char *type = json_string_value(json_object_get(item, "type"));
    if (!type)
      abort();
    if (strcmp(type, "function_call") == 0 &&
        (!json_is_string(json_object_get(item, "call_id")) ||
         !json_is_string(json_object_get(item, "name")) ||
         !json_is_string(json_object_get(item, "arguments"))))
      abort();
  }
}

/* The text of a chat reply's message item (borrowed), or "". */
static const char *chat_text(json_t *output, size_t *len) {
  json_t *first = json_array_get(output, 0);
  json_t *part = json_array_get(json_object_get(first, "content"), 0);
  const char *pt = json_string_value(json_object_get(part, "type"));
  json_t *text = json_object_get(part, "text");
  if (!pt || strcmp(pt, "output_text") != 0 || !json_is_string(text)) {
    *len = 0;
    return "";
  }
  *len = json_string_length(text);
  return json_string_value(text);
}

/* Parses REPLY (borrowed) and checks the result. */
static void parse_reply(const struct model_api_ops *ops, json_t *reply,
                        const struct sbx_buf *deltas) {
  struct model_response out;
  struct sbx_error e = {0};
  int rc = ops->parse(reply, URL, &out, &e);
  if (rc < 0) {
    if (out.output || out.id)
      abort();
    check_error(rc, &e);
    return;
  }
  check_output(ops, out.output);
  if (deltas && ops == &model_chat_api) {
    size_t len;
    const char *text = chat_text(out.output, &len);
    if (len != deltas->len || (len && memcmp(text, deltas->data, len)))
      abort(); /* the message is what was shown */
  }
  model_response_clear(&out);
}

/* The body as an event stream, then the reply it assembles. */
static void stream(const struct model_api_ops *ops, const uint8_t *s,
                   size_t n) {
  struct stream_run r = {.ops = ops};
  sbx_buf_init(&r.deltas, SIZE_MAX / 2);
  r.s = ops->stream_new(on_delta, &r, 1u << 20);
  struct sse_parser *p = NULL;
  if (!r.s || sse_parser_new(1u << 20, on_event, &r, &p) < 0)
    abort();
  struct sbx_error pe = {0};
  int rc = sse_feed(p, s, n, &pe);
  if (rc < 0 && r.e.msg[0])
    check_error(rc, &r.e); /* the API's own refusal */
  if (ops->stream_delivered(r.s) != (r.deltas.len > 0))
    abort();
  json_t *reply = NULL;
  if (rc == 0) {
    struct sbx_error e = {0};
    rc = ops->stream_end(r.s, &reply, URL, &e);
    if (rc < 0) {
      if (reply)
        abort();
      check_error(rc, &e);
    } else {
      parse_reply(ops, reply, &r.deltas);
    }
  }
  json_decref(reply);
  sse_parser_free(p);
  ops->stream_free(r.s);
  sbx_buf_free(&r.deltas);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const struct model_api_ops *ops =
      data[0] & 1 ? &model_chat_api : &model_responses_api;
  if (data[0] & 2) {
    stream(ops, data + 1, size - 1);
    return 0;
  }
  json_error_t jerr;
  _cleanup_json_ json_t *reply =
      json_loadb((const char *)data + 1, size - 1, 0, &jerr);
  if (reply)
    parse_reply(ops, reply, NULL);
  return 0;
}
