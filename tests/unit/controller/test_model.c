/* The model clients against the scripted model server
 * (tests/support/model_server.py): a real HTTP server on loopback. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "controller/model/model.h"
#include "controller/model/model_internal.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/errors.h"
#include "tests/support/model_server.h"

static struct test_model_server srv;
static char tmpdir[] = "/tmp/sbx-test-model-XXXXXX";
static char record_path[128];

static void setup(void) {
  (void)unsetenv("OPENAI_API_KEY");
  (void)unsetenv("OPENAI_BASE_URL");
  (void)setenv("no_proxy", "127.0.0.1,localhost", 1);
  cr_assert_not_null(mkdtemp(tmpdir));
  (void)snprintf(record_path, sizeof(record_path), "%s/rec.jsonl", tmpdir);
}

static void teardown(void) {
  test_model_server_stop(&srv);
  (void)unlink(record_path);
  (void)rmdir(tmpdir);
}

TestSuite(model, .init = setup, .fini = teardown);

/* ---- helpers --------------------------------------------------------- */

struct deltas {
  char text[8192];
  size_t len;
  int count;
};

static void collect(void *arg, const char *text, size_t len) {
  struct deltas *d = arg;
  cr_assert_lt(d->len + len, sizeof(d->text));
  memcpy(d->text + d->len, text, len);
  d->len += len;
  d->text[d->len] = '\0';
  d->count++;
}

static struct model_config config(enum model_api api) {
  struct model_config c = {
      .api = api,
      .base_url = srv.base_url,
      .retry_base_ms = 1,
      .timeout_ms = 20000,
  };
  return c;
}

static struct model_client *client(const struct model_config *cfg) {
  struct model_client *m = NULL;
  struct sbx_error e = {0};
  cr_assert_eq(model_client_new(cfg, &m, &e), 0, "client: %s", e.msg);
  return m;
}

static json_t *user_input(const char *text) {
  return json_pack("[{s:s, s:s}]", "role", "user", "content", text);
}

/* The text of the first message item of OUTPUT. */
static const char *first_text(json_t *output) {
  size_t i;
  json_t *item;
  json_array_foreach(output, i, item) {
    const char *type = json_string_value(json_object_get(item, "type"));
    if (type && strcmp(type, "message") == 0)
      return json_string_value(json_object_get(
          json_array_get(json_object_get(item, "content"), 0), "text"));
  }
  return NULL;
}

static size_t request_count(void) {
  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  return json_array_size(reqs);
}

/* The body of request I (new). */
static json_t *request_body(size_t i) {
  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  json_t *r = json_array_get(reqs, i);
  cr_assert_not_null(r, "request %zu was not made", i);
  return json_incref(json_object_get(r, "body"));
}

static int call_simple(struct model_client *m, const char *prompt,
                       struct model_response *out, struct sbx_error *e) {
  _cleanup_json_ json_t *input = user_input(prompt);
  struct model_request req = {.model = "gpt-test", .input = input};
  return model_call(m, &req, out, e);
}

static void expect_prefix(const char *msg, const char *prefix) {
  cr_expect(strncmp(msg, prefix, strlen(prefix)) == 0,
            "message \"%s\" should start with \"%s\"", msg, prefix);
}

static char *url_of(const char *path) {
  char *s = NULL;
  cr_assert_geq(asprintf(&s, "http://127.0.0.1:%d/v1/%s", srv.port, path), 0);
  return s;
}

/* Calls M once and expects -ERR with a message (into *E) that is BEFORE,
 * the URL of PATH and AFTER, or starts with that when PREFIX. */
static void expect_failure(struct model_client *m, int err, const char *path,
                           const char *before, const char *after, bool prefix,
                           struct sbx_error *e) {
  struct model_response out = {0};
  cr_expect_eq(call_simple(m, "hi", &out, e), -err);
  _cleanup_free_ char *url = url_of(path);
  char msg[512];
  (void)snprintf(msg, sizeof(msg), "%s%s%s", before, url, after);
  if (prefix)
    expect_prefix(e->msg, msg);
  else
    cr_expect_str_eq(e->msg, msg);
}

/* ---- Responses ------------------------------------------------------- */

Test(model, responses_plain_reply) {
  test_model_server_start(
      &srv,
      "[{\"text\": \"hello world\", \"id\": \"resp_abc\", \"usage\": "
      "{\"input_tokens\": 11, \"output_tokens\": 7, \"cached_tokens\": 3, "
      "\"reasoning_tokens\": 2}}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_assert_eq(call_simple(m, "hi", &out, &e), 0, "%s", e.msg);
  cr_expect_eq(json_array_size(out.output), 1);
  cr_expect_str_eq(first_text(out.output), "hello world");
  cr_expect_str_eq(out.id, "resp_abc");
  cr_expect_eq(out.usage.input_tokens, 11);
  cr_expect_eq(out.usage.output_tokens, 7);
  cr_expect_eq(out.usage.total_tokens, 18);
  cr_expect_eq(out.usage.cached_tokens, 3);
  cr_expect_eq(out.usage.reasoning_tokens, 2);
  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(reqs, 0), "path")),
      "/v1/responses");
  cr_expect(
      json_is_false(json_object_get(json_array_get(reqs, 0), "authorization")),
      "no key, no Authorization header");
  model_response_clear(&out);
  model_client_free(m);
}

/* A full Responses object with a reasoning item, a message and a function
 * call, served twice. */
static const char two_same_responses[] =
    "[{\"repeat\": 2, \"response\": {\"id\": \"resp_1\", \"object\": "
    "\"response\", \"status\": \"completed\", \"model\": \"gpt-test\", "
    "\"output\": ["
    "{\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [], "
    "\"encrypted_content\": \"enc\"},"
    "{\"type\": \"message\", \"id\": \"msg_1\", \"status\": \"completed\", "
    "\"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", "
    "\"text\": \"Streaming works fine, thank you.\", \"annotations\": []}]},"
    "{\"type\": \"function_call\", \"id\": \"fc_1\", \"call_id\": \"call_1\", "
    "\"name\": \"exec_command\", \"arguments\": \"{\\\"cmd\\\":\\\"ls\\\"}\", "
    "\"status\": \"completed\"}],"
    "\"usage\": {\"input_tokens\": 5, \"output_tokens\": 6, "
    "\"total_tokens\": 11}}}]";

Test(model, responses_stream_delivers_deltas_and_same_output) {
  test_model_server_start(&srv, two_same_responses, NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *plain = client(&cfg);
  struct deltas d = {0};
  cfg.stream = true;
  cfg.on_delta = collect;
  cfg.delta_arg = &d;
  struct model_client *streaming = client(&cfg);

  struct model_response a = {0}, b = {0};
  struct sbx_error e = {0};
  cr_assert_eq(call_simple(plain, "hi", &a, &e), 0, "%s", e.msg);
  cr_assert_eq(call_simple(streaming, "hi", &b, &e), 0, "%s", e.msg);
  cr_expect(json_equal(a.output, b.output), "streamed output differs");
  cr_expect_eq(json_array_size(b.output), 3);
  cr_expect_str_eq(d.text, "Streaming works fine, thank you.");
  cr_expect_geq(d.count, 2, "the text came in %d deltas", d.count);
  cr_expect_eq(b.usage.total_tokens, 11);
  cr_expect_str_eq(b.id, "resp_1");

  _cleanup_json_ json_t *body = request_body(1);
  cr_expect(json_is_true(json_object_get(body, "stream")));
  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  cr_expect_str_eq(
      json_string_value(json_object_get(
          json_object_get(json_array_get(reqs, 1), "headers"), "accept")),
      "text/event-stream");
  model_response_clear(&a);
  model_response_clear(&b);
  model_client_free(plain);
  model_client_free(streaming);
}

Test(model, responses_apply_patch_call_kept_as_it_comes) {
  test_model_server_start(
      &srv,
      "[{\"apply_patch\": {\"type\": \"update_file\", \"path\": \"a.txt\", "
      "\"diff\": \"@@\\n-a\\n+b\\n\", \"call_id\": \"call_p\"}, "
      "\"reasoning\": \"thinking\"}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_assert_eq(call_simple(m, "patch it", &out, &e), 0, "%s", e.msg);
  cr_assert_eq(json_array_size(out.output), 2);
  json_t *rs = json_array_get(out.output, 0);
  cr_expect_str_eq(json_string_value(json_object_get(rs, "type")), "reasoning");
  cr_expect_str_eq(json_string_value(json_object_get(rs, "encrypted_content")),
                   "enc_1");
  json_t *ap = json_array_get(out.output, 1);
  cr_expect_str_eq(json_string_value(json_object_get(ap, "type")),
                   "apply_patch_call");
  cr_expect_str_eq(json_string_value(json_object_get(ap, "call_id")), "call_p");
  json_t *op = json_object_get(ap, "operation");
  cr_expect_str_eq(json_string_value(json_object_get(op, "type")),
                   "update_file");
  cr_expect_str_eq(json_string_value(json_object_get(op, "path")), "a.txt");
  cr_expect_str_eq(json_string_value(json_object_get(op, "diff")),
                   "@@\n-a\n+b\n");
  model_response_clear(&out);
  model_client_free(m);
}

Test(model, responses_incomplete_is_an_error) {
  test_model_server_start(
      &srv,
      "[{\"response\": {\"id\": \"r\", \"status\": \"incomplete\", "
      "\"incomplete_details\": {\"reason\": \"max_output_tokens\"}, "
      "\"output\": []}}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_expect_lt(call_simple(m, "hi", &out, &e), 0);
  _cleanup_free_ char *url = url_of("responses");
  char want[256];
  (void)snprintf(want, sizeof(want),
                 "incomplete response from %s: max_output_tokens", url);
  cr_expect_str_eq(e.msg, want);
  cr_expect_null(out.output);
  model_client_free(m);
}

Test(model, responses_stream_cut_short_is_an_error) {
  test_model_server_start(
      &srv, "[{\"text\": \"partial answer\", \"stream_cut\": true}]", NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct deltas d = {0};
  cfg.stream = true;
  cfg.on_delta = collect;
  cfg.delta_arg = &d;
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_expect_lt(call_simple(m, "hi", &out, &e), 0);
  cr_expect(strstr(e.msg, "ended before response.completed"), "%s", e.msg);
  cr_expect_str_eq(d.text, "partial answer");
  cr_expect_eq(request_count(), 1,
               "no retry once deltas were shown (they would repeat)");
  model_client_free(m);
}

Test(model, stream_asked_but_json_reply_still_shows_text) {
  test_model_server_start(
      &srv,
      "[{\"body\": {\"id\": \"r\", \"status\": \"completed\", \"output\": "
      "[{\"type\": \"message\", \"role\": \"assistant\", \"content\": "
      "[{\"type\": \"output_text\", \"text\": \"plain\"}]}]}, "
      "\"status\": 200}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct deltas d = {0};
  cfg.stream = true;
  cfg.on_delta = collect;
  cfg.delta_arg = &d;
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_assert_eq(call_simple(m, "hi", &out, &e), 0, "%s", e.msg);
  cr_expect_str_eq(d.text, "plain");
  model_response_clear(&out);
  model_client_free(m);
}

/* ---- Chat Completions ------------------------------------------------ */

static const char chat_tool_script[] =
    "[{\"repeat\": 2, \"text\": \"Let me look.\", \"tool_calls\": ["
    "{\"name\": \"exec_command\", \"arguments\": {\"cmd\": \"ls -la\"}, "
    "\"call_id\": \"call_a\"},"
    "{\"name\": \"view_image\", \"arguments\": {\"path\": \"x.png\"}, "
    "\"call_id\": \"call_b\"}],"
    "\"usage\": {\"input_tokens\": 20, \"output_tokens\": 4}}]";

static void expect_chat_tool_output(json_t *output) {
  cr_assert_eq(json_array_size(output), 3, "%zu items",
               json_array_size(output));
  cr_expect_str_eq(first_text(output), "Let me look.");
  json_t *a = json_array_get(output, 1);
  cr_expect_str_eq(json_string_value(json_object_get(a, "type")),
                   "function_call");
  cr_expect_str_eq(json_string_value(json_object_get(a, "call_id")), "call_a");
  cr_expect_str_eq(json_string_value(json_object_get(a, "name")),
                   "exec_command");
  cr_expect_str_eq(json_string_value(json_object_get(a, "arguments")),
                   "{\"cmd\":\"ls -la\"}");
  json_t *b = json_array_get(output, 2);
  cr_expect_str_eq(json_string_value(json_object_get(b, "call_id")), "call_b");
  cr_expect_str_eq(json_string_value(json_object_get(b, "name")), "view_image");
}

Test(model, chat_tool_calls_plain_and_streamed) {
  test_model_server_start(&srv, chat_tool_script, NULL);
  struct model_config cfg = config(MODEL_API_CHAT);
  struct model_client *plain = client(&cfg);
  struct deltas d = {0};
  cfg.stream = true;
  cfg.on_delta = collect;
  cfg.delta_arg = &d;
  struct model_client *streaming = client(&cfg);

  struct model_response a = {0}, b = {0};
  struct sbx_error e = {0};
  cr_assert_eq(call_simple(plain, "hi", &a, &e), 0, "%s", e.msg);
  expect_chat_tool_output(a.output);
  cr_expect_eq(a.usage.input_tokens, 20);
  cr_expect_eq(a.usage.output_tokens, 4);
  cr_expect_eq(a.usage.total_tokens, 24);

  cr_assert_eq(call_simple(streaming, "hi", &b, &e), 0, "%s", e.msg);
  expect_chat_tool_output(b.output);
  cr_expect(json_equal(a.output, b.output), "streamed output differs");
  cr_expect_str_eq(d.text, "Let me look.");
  cr_expect_geq(d.count, 2);
  cr_expect_eq(b.usage.total_tokens, 24, "usage from the include_usage chunk");

  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(reqs, 0), "path")),
      "/v1/chat/completions");
  json_t *body = json_object_get(json_array_get(reqs, 1), "body");
  cr_expect(json_is_true(json_object_get(body, "stream")));
  cr_expect(json_is_true(json_object_get(
      json_object_get(body, "stream_options"), "include_usage")));
  model_response_clear(&a);
  model_response_clear(&b);
  model_client_free(plain);
  model_client_free(streaming);
}

/* ---- retries and errors --------------------------------------------- */

Test(model, retries_500_twice_then_succeeds) {
  test_model_server_start(
      &srv, "[{\"status\": 500}, {\"status\": 502}, {\"text\": \"ok\"}]", NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_assert_eq(call_simple(m, "hi", &out, &e), 0, "%s", e.msg);
  cr_expect_str_eq(first_text(out.output), "ok");
  cr_expect_eq(request_count(), 3);
  model_response_clear(&out);
  model_client_free(m);
}

Test(model, dropped_connection_is_retried) {
  test_model_server_start(&srv, "[{\"drop\": true}, {\"text\": \"ok\"}]", NULL);
  struct model_config cfg = config(MODEL_API_CHAT);
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_assert_eq(call_simple(m, "hi", &out, &e), 0, "%s", e.msg);
  cr_expect_str_eq(first_text(out.output), "ok");
  cr_expect_eq(request_count(), 2);
  model_response_clear(&out);
  model_client_free(m);
}

Test(model, retry_after_is_honoured) {
  test_model_server_start(
      &srv,
      "[{\"status\": 429, \"headers\": {\"Retry-After\": \"1\"}}, "
      "{\"status\": 503, \"headers\": {\"retry-after-ms\": \"200\"}}, "
      "{\"text\": \"ok\"}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  uint64_t t0 = sbx_now_ms();
  cr_assert_eq(call_simple(m, "hi", &out, &e), 0, "%s", e.msg);
  uint64_t took = sbx_now_ms() - t0;
  cr_expect_geq(took, 1150, "waited only %llu ms", (unsigned long long)took);
  cr_expect_lt(took, 15000, "waited %llu ms", (unsigned long long)took);
  cr_expect_eq(request_count(), 3);
  model_response_clear(&out);
  model_client_free(m);
}

Test(model, retries_give_up_after_max_retries) {
  test_model_server_start(&srv, "[{\"status\": 503, \"repeat\": 5}]", NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  cfg.max_retries = 2;
  struct model_client *m = client(&cfg);
  struct sbx_error e = {0};
  expect_failure(m, EAGAIN, "responses", "503 from ",
                 ": scripted 503 (after 2 retries)", false, &e);
  cr_expect_eq(request_count(), 3);
  model_client_free(m);
}

Test(model, unauthorized_names_status_url_and_message) {
  static const char key[] = "sk-wrong-secret-0123456789";
  test_model_server_start(&srv, "[{\"text\": \"never\"}]", "sk-right");
  struct model_config cfg = config(MODEL_API_RESPONSES);
  cfg.api_key = key;
  struct model_client *m = client(&cfg);
  struct sbx_error e = {0};
  expect_failure(m, EKEYREJECTED, "responses", "401 from ",
                 ": Incorrect API key provided: [redacted].", false, &e);
  cr_expect_eq(e.code, SBX_UNAUTHENTICATED);
  cr_expect_null(strstr(e.msg, key), "the key leaked: %s", e.msg);
  cr_expect_eq(request_count(), 1, "a 401 is not retried");
  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  cr_expect(
      json_is_true(json_object_get(json_array_get(reqs, 0), "authorization")));
  model_client_free(m);
}

Test(model, redaction_takes_whole_keys_of_8_or_more_characters) {
  /* A 1-character key is no secret to hide: the message stays whole. */
  test_model_server_start(
      &srv, "[{\"status\": 400, \"body\": \"The model `m1` does not exist\"}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  cfg.api_key = "x";
  struct model_client *m = client(&cfg);
  struct sbx_error e = {0};
  expect_failure(m, EINVAL, "responses", "400 from ",
                 ": The model `m1` does not exist", false, &e);
  model_client_free(m);
  test_model_server_stop(&srv);
  /* An 8-character key, every whole occurrence. */
  test_model_server_start(&srv,
                          "[{\"status\": 400, \"body\": \"key k3y-abcd "
                          "rejected; k3y-abcd is revoked\"}]",
                          NULL);
  cfg.api_key = "k3y-abcd";
  m = client(&cfg);
  expect_failure(m, EINVAL, "responses", "400 from ",
                 ": key [redacted] rejected; [redacted] is revoked", false, &e);
  model_client_free(m);
  test_model_server_stop(&srv);
  /* A key that the body's excerpt (200 bytes) would cut in two. */
  char script[512], pad[200];
  memset(pad, 'a', 190);
  pad[190] = '\0';
  (void)snprintf(script, sizeof(script),
                 "[{\"status\": 400, \"body\": \"%s sk-cut-secret-0123456789 "
                 "end\"}]",
                 pad);
  test_model_server_start(&srv, script, NULL);
  cfg.api_key = "sk-cut-secret-0123456789";
  m = client(&cfg);
  struct model_response out = {0};
  cr_expect_lt(call_simple(m, "hi", &out, &e), 0);
  cr_expect_null(strstr(e.msg, "sk-cut"), "a start of the key: %s", e.msg);
  cr_expect(strstr(e.msg, "aaaa [redac"), "%s", e.msg);
  model_client_free(m);
}

Test(model, right_key_is_sent_as_bearer) {
  test_model_server_start(&srv, "[{\"text\": \"ok\"}]", "sk-right");
  struct model_config cfg = config(MODEL_API_CHAT);
  cfg.api_key = "sk-right";
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_expect_eq(call_simple(m, "hi", &out, &e), 0, "%s", e.msg);
  model_response_clear(&out);
  model_client_free(m);
}

Test(model, key_from_environment_and_never_in_errors) {
  static const char key[] = "sk-env-secret-abcdefghijkl";
  (void)setenv("OPENAI_API_KEY", key, 1);
  test_model_server_start(
      &srv,
      "[{\"status\": 500, \"body\": \"upstream rejected sk-env-secret-"
      "abcdefghijkl, sorry\"}, {\"garbage\": \"sk-env-secret-abcdefghijkl\"}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  cfg.no_retries = true;
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_expect_lt(call_simple(m, "hi", &out, &e), 0);
  cr_expect_null(strstr(e.msg, key), "the key leaked: %s", e.msg);
  cr_expect(strstr(e.msg, "upstream rejected [redacted], sorry"), "%s", e.msg);
  cr_expect_lt(call_simple(m, "hi", &out, &e), 0);
  cr_expect_null(strstr(e.msg, key), "the key leaked: %s", e.msg);
  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  cr_expect(
      json_is_true(json_object_get(json_array_get(reqs, 0), "authorization")),
      "the key came from OPENAI_API_KEY");
  model_client_free(m);

  /* A closed port, with the key set. */
  char base[64];
  (void)snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1",
                 test_closed_port());
  cfg.base_url = base;
  m = client(&cfg);
  cr_expect_lt(call_simple(m, "hi", &out, &e), 0);
  cr_expect_null(strstr(e.msg, key), "the key leaked: %s", e.msg);
  model_client_free(m);
}

Test(model, garbage_body_is_invalid_json) {
  test_model_server_start(&srv, "[{\"garbage\": \"<html>oops</html>\"}]", NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  struct sbx_error e = {0};
  expect_failure(m, EBADMSG, "responses", "invalid JSON from ", ": ", true, &e);
  cr_expect_eq(request_count(), 1);
  model_client_free(m);
}

Test(model, error_body_without_json_is_quoted_sanitized) {
  test_model_server_start(
      &srv,
      "[{\"status\": 404, \"body\": \"no\\nsuch\\u0001 \\u00e9ndpoint\"}]",
      NULL);
  struct model_config cfg = config(MODEL_API_CHAT);
  struct model_client *m = client(&cfg);
  struct sbx_error e = {0};
  expect_failure(m, ENOENT, "chat/completions", "404 from ",
                 ": no such ??ndpoint", false, &e);
  model_client_free(m);
}

Test(model, bad_request_is_not_retried) {
  test_model_server_start(
      &srv,
      "[{\"status\": 400, \"body\": {\"error\": {\"message\": \"Invalid "
      "schema for function 'x'\"}}}, {\"text\": \"unused\"}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  struct sbx_error e = {0};
  expect_failure(m, EINVAL, "responses", "400 from ",
                 ": Invalid schema for function 'x'", false, &e);
  cr_expect_eq(request_count(), 1);
  model_client_free(m);
}

Test(model, response_over_the_limit_is_refused) {
  char *script = NULL;
  cr_assert_geq(
      asprintf(&script, "[{\"repeat\": 2, \"text\": \"%0*d\"}]", 20000, 0), 0);
  test_model_server_start(&srv, script, NULL);
  free(script);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  cfg.max_response_bytes = 4096;
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  _cleanup_free_ char *url = url_of("responses");
  char want[256];
  (void)snprintf(want, sizeof(want), "response from %s exceeds 4 KiB", url);
  cr_expect_eq(call_simple(m, "hi", &out, &e), -E2BIG);
  cr_expect_str_eq(e.msg, want);
  model_client_free(m);

  cfg.stream = true;
  m = client(&cfg);
  cr_expect_eq(call_simple(m, "hi", &out, &e), -E2BIG);
  cr_expect_str_eq(e.msg, want);
  cr_expect_eq(request_count(), 2, "not retried");
  model_client_free(m);
}

Test(model, connection_refused_after_retries) {
  char base[64];
  int port = test_closed_port();
  (void)snprintf(base, sizeof(base), "http://127.0.0.1:%d/v1", port);
  struct model_config cfg = {
      .api = MODEL_API_RESPONSES,
      .base_url = base,
      .max_retries = 2,
      .retry_base_ms = 1,
  };
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_expect_eq(call_simple(m, "hi", &out, &e), -ECONNREFUSED);
  char want[128];
  (void)snprintf(want, sizeof(want),
                 "cannot connect to http://127.0.0.1:%d/v1/responses: ", port);
  expect_prefix(e.msg, want);
  cr_expect(strstr(e.msg, "(after 2 retries)"), "%s", e.msg);
  model_client_free(m);
}

Test(model, timeout_is_reported) {
  test_model_server_start(&srv, "[{\"delay_ms\": 3000, \"text\": \"late\"}]",
                          NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  cfg.timeout_ms = 300;
  cfg.no_retries = true;
  struct model_client *m = client(&cfg);
  struct sbx_error e = {0};
  expect_failure(m, ETIMEDOUT, "responses", "request to ", " timed out: ", true,
                 &e);
  model_client_free(m);
}

Test(model, bad_base_url_is_refused) {
  struct model_config cfg = {.api = MODEL_API_RESPONSES,
                             .base_url = "ftp://example.com"};
  struct model_client *m = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(model_client_new(&cfg, &m, &e), -EINVAL);
  cr_expect_null(m);
  cr_expect(strstr(e.msg, "http:// or https://"), "%s", e.msg);
}

/* ---- request bodies -------------------------------------------------- */

static json_t *conversation(void) {
  return json_pack(
      "[{s:s, s:s},"
      " {s:s, s:s, s:s, s:[{s:s, s:s}]},"
      " {s:s, s:s, s:[], s:s},"
      " {s:s, s:s, s:s, s:s},"
      " {s:s, s:s, s:s, s:s},"
      " {s:s, s:s, s:s},"
      " {s:s, s:s, s:[{s:s, s:s}, {s:s, s:s}]},"
      " {s:s, s:[{s:s, s:s}, {s:s, s:s, s:s}]}]",
      /* user */
      "role", "user", "content", "List the files.",
      /* assistant message */
      "type", "message", "role", "assistant", "status", "completed", "content",
      "type", "output_text", "text", "Looking.",
      /* reasoning */
      "type", "reasoning", "id", "rs_1", "summary", "encrypted_content", "enc",
      /* two calls */
      "type", "function_call", "call_id", "call_1", "name", "exec_command",
      "arguments", "{\"cmd\":\"ls\"}", "type", "function_call", "call_id",
      "call_2", "name", "view_image", "arguments", "{\"path\":\"a.png\"}",
      /* their outputs */
      "type", "function_call_output", "call_id", "call_1", "output",
      "a.png\nb.txt", "type", "function_call_output", "call_id", "call_2",
      "output", "type", "input_text", "text", "the image:", "type",
      "input_image", "image_url", "data:image/png;base64,AAAA",
      /* user with an image */
      "role", "user", "content", "type", "input_text", "text", "And this?",
      "type", "input_image", "image_url", "data:image/png;base64,BBBB",
      "detail", "low");
}

static json_t *tools(void) {
  return json_pack("[{s:s, s:s, s:s, s:{s:s, s:{s:{s:s}}, s:[s], s:b}, s:b},"
                   " {s:s}]",
                   "type", "function", "name", "exec_command", "description",
                   "Runs a command.", "parameters", "type", "object",
                   "properties", "cmd", "type", "string", "required", "cmd",
                   "additionalProperties", 0, "strict", 1, "type",
                   "apply_patch");
}

Test(model, responses_request_body) {
  test_model_server_start(&srv, "[{\"text\": \"ok\"}]", NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  cfg.api_key = "sk-test";
  struct model_client *m = client(&cfg);
  _cleanup_json_ json_t *input = conversation();
  _cleanup_json_ json_t *tl = tools();
  _cleanup_json_ json_t *settings = json_pack(
      "{s:f, s:{s:s, s:s}, s:s, s:b, s:i, s:s, s:s, s:{s:s}, s:i, "
      "s:[s], s:{s:s}, s:{s:s, s:i}, s:{s:i}}",
      "temperature", 0.5, "reasoning", "effort", "low", "summary", "auto",
      "tool_choice", "apply_patch", "parallel_tool_calls", 0, "max_tokens",
      1000, "verbosity", "low", "truncation", "auto", "metadata", "k", "v",
      "top_logprobs", 2, "response_include", "reasoning.encrypted_content",
      "extra_headers", "X-Extra", "yes", "extra_query", "q", "a b", "n", 3,
      "extra_body", "seed", 7);
  _cleanup_json_ json_t *schema =
      json_pack("{s:s, s:{s:{s:s}}, s:[s], s:b}", "type", "object",
                "properties", "answer", "type", "string", "required", "answer",
                "additionalProperties", 0);
  _cleanup_json_ json_t *extra =
      json_pack("{s:[{s:s, s:i}]}", "context_management", "type", "compaction",
                "compact_threshold", 360000);
  struct model_request req = {
      .model = "gpt-5",
      .instructions = "Be brief.",
      .input = input,
      .tools = tl,
      .model_settings = settings,
      .output_schema = schema,
      .extra = extra,
  };
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_assert_eq(model_call(m, &req, &out, &e), 0, "%s", e.msg);

  _cleanup_json_ json_t *b = request_body(0);
  _cleanup_json_ json_t *built = model_build_body(m, &req);
  cr_expect(json_equal(b, built), "the body sent is model_build_body's");
  cr_expect_str_eq(json_string_value(json_object_get(b, "model")), "gpt-5");
  cr_expect_str_eq(json_string_value(json_object_get(b, "instructions")),
                   "Be brief.");
  cr_expect(json_equal(json_object_get(b, "input"), input),
            "items go out as they are");
  cr_expect(json_equal(json_object_get(b, "tools"), tl));
  _cleanup_json_ json_t *choice = json_pack("{s:s}", "type", "apply_patch");
  cr_expect(json_equal(json_object_get(b, "tool_choice"), choice));
  cr_expect(json_is_false(json_object_get(b, "parallel_tool_calls")));
  cr_expect_float_eq(json_number_value(json_object_get(b, "temperature")), 0.5,
                     1e-9);
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(b, "reasoning"), "effort")),
                   "low");
  cr_expect_eq(json_integer_value(json_object_get(b, "max_output_tokens")),
               1000, "max_tokens goes as max_output_tokens");
  cr_expect_null(json_object_get(b, "max_tokens"));
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(b, "reasoning"), "summary")),
                   "auto");
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(b, "text"),
                                                     "verbosity")),
                   "low");
  cr_expect_null(json_object_get(b, "verbosity"));
  cr_expect_str_eq(json_string_value(json_object_get(b, "truncation")), "auto");
  cr_expect_str_eq(
      json_string_value(json_object_get(json_object_get(b, "metadata"), "k")),
      "v");
  cr_expect_eq(json_integer_value(json_object_get(b, "top_logprobs")), 2);
  cr_expect_eq(json_integer_value(json_object_get(b, "seed")), 7,
               "extra_body is merged");
  cr_expect_null(json_object_get(b, "extra_body"));
  cr_expect_null(json_object_get(b, "extra_headers"));
  json_t *fmt = json_object_get(json_object_get(b, "text"), "format");
  cr_expect_str_eq(json_string_value(json_object_get(fmt, "type")),
                   "json_schema");
  cr_expect_str_eq(json_string_value(json_object_get(fmt, "name")),
                   "final_output");
  cr_expect(json_is_true(json_object_get(fmt, "strict")));
  cr_expect(json_equal(json_object_get(fmt, "schema"), schema));
  cr_expect(json_is_false(json_object_get(b, "stream")));
  cr_expect_null(json_object_get(b, "store"), "store is the server's");
  _cleanup_json_ json_t *include = json_pack(
      "[s, s]", "reasoning.encrypted_content", "message.output_text.logprobs");
  cr_expect(json_equal(json_object_get(b, "include"), include),
            "response_include, then what top_logprobs needs");
  cr_expect(json_equal(json_object_get(b, "context_management"),
                       json_object_get(extra, "context_management")));

  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  json_t *r0 = json_array_get(reqs, 0);
  cr_expect(json_is_true(json_object_get(r0, "authorization")));
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(r0, "headers"), "content-type")),
                   "application/json");
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(r0, "headers"), "x-extra")),
                   "yes", "extra_headers are sent");
  cr_expect_str_eq(json_string_value(json_object_get(r0, "path")),
                   "/v1/responses?q=a%20b&n=3", "extra_query is sent");
  model_response_clear(&out);
  model_client_free(m);
}

/* The SDK's defaults per model (defaultModel.js). */
Test(model, default_settings_per_model) {
  static const struct {
    const char *model, *want;
  } cases[] = {
      {"gpt-5.6-luna",
       "{\"reasoning\": {\"effort\": \"none\"}, \"verbosity\": \"low\"}"},
      {"gpt-5",
       "{\"reasoning\": {\"effort\": \"low\"}, \"verbosity\": \"low\"}"},
      {"gpt-5-2025-08-07",
       "{\"reasoning\": {\"effort\": \"low\"}, \"verbosity\": \"low\"}"},
      {"gpt-5.4-pro",
       "{\"reasoning\": {\"effort\": \"medium\"}, \"verbosity\": \"low\"}"},
      {"gpt-5.6-2026-01-01", "{\"verbosity\": \"low\"}"},
      {"gpt-5-mini", "{\"verbosity\": \"low\"}"},
      {"gpt-7", "{\"verbosity\": \"low\"}"},
      {"gpt-5-chat-latest", "{}"},
      {"gpt-4.1", "{}"},
      {"gpt-50x", "{}"},
      {"llama3", "{}"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    _cleanup_json_ json_t *got = model_default_settings(cases[i].model);
    _cleanup_json_ json_t *want = json_loads(cases[i].want, 0, NULL);
    _cleanup_free_ char *text = json_dumps(got, JSON_COMPACT);
    cr_expect(json_equal(got, want), "%s: %s", cases[i].model, text);
  }
}

/* The conversation is serialized item by item and kept between calls:
 * whatever the calls' inputs share, each body sent is the one built. */
Test(model, responses_body_across_calls_is_the_built_body) {
  test_model_server_start(&srv,
                          "[{\"text\": \"1\"}, {\"text\": \"2\"}, {\"text\": "
                          "\"3\"}, {\"text\": \"4\"}, {\"text\": \"5\"}]",
                          NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  _cleanup_json_ json_t *grow = user_input("first \"quoted\" \u00e9\n");
  json_t *first = json_array_get(grow, 0);
  _cleanup_json_ json_t *other = json_array();
  json_array_append(other, first);
  json_array_append_new(other, json_pack("{s:s, s:s, s:s}", "type", "message",
                                         "role", "user", "content", "other"));
  _cleanup_json_ json_t *empty = json_array();
  json_t *inputs[5] = {grow, grow, other, empty, grow};
  for (size_t i = 0; i < 5; i++) {
    if (i == 1) /* the same array, grown */
      json_array_append_new(grow, json_pack("{s:s, s:s, s:s, s:s}", "type",
                                            "function_call", "call_id", "c1",
                                            "name", "exec_command", "arguments",
                                            "{\"cmd\":\"ls\"}"));
    struct model_request req = {
        .model = "gpt-test", .instructions = "x", .input = inputs[i]};
    struct model_response out = {0};
    struct sbx_error e = {0};
    cr_assert_eq(model_call(m, &req, &out, &e), 0, "call %zu: %s", i, e.msg);
    model_response_clear(&out);
    _cleanup_json_ json_t *b = request_body(i);
    _cleanup_json_ json_t *built = model_build_body(m, &req);
    cr_expect(json_equal(b, built), "call %zu: the body sent is the built one",
              i);
    cr_expect_eq(json_array_size(json_object_get(b, "input")),
                 json_array_size(inputs[i]), "call %zu", i);
  }
  model_client_free(m);
}

Test(model, chat_request_body_from_items) {
  struct model_config cfg = {.api = MODEL_API_CHAT,
                             .base_url = "http://127.0.0.1:1/v1"};
  struct model_client *m = client(&cfg);
  _cleanup_json_ json_t *input = conversation();
  _cleanup_json_ json_t *tl = tools();
  _cleanup_json_ json_t *settings =
      json_pack("{s:s, s:i, s:{s:s}, s:b, s:f, s:f, s:s, s:b, s:i, s:{s:s}}",
                "tool_choice", "exec_command", "max_tokens", 50, "reasoning",
                "effort", "high", "parallel_tool_calls", 1, "frequency_penalty",
                0.5, "presence_penalty", -0.5, "verbosity", "medium", "store",
                1, "top_logprobs", 3, "metadata", "k", "v");
  _cleanup_json_ json_t *schema = json_pack("{s:s}", "type", "object");
  struct model_request req = {
      .model = "llama3",
      .instructions = "Be brief.",
      .input = input,
      .tools = tl,
      .model_settings = settings,
      .output_schema = schema,
      .output_name = "answer",
  };
  _cleanup_json_ json_t *b = model_build_body(m, &req);
  cr_assert_not_null(b);

  _cleanup_json_ json_t *want_msgs = json_pack(
      "[{s:s, s:s},"
      " {s:s, s:s},"
      " {s:s, s:s, s:[{s:s, s:s, s:{s:s, s:s}}, {s:s, s:s, s:{s:s, s:s}}]},"
      " {s:s, s:s, s:s},"
      " {s:s, s:s, s:s},"
      " {s:s, s:[{s:s, s:s}, {s:s, s:{s:s, s:s}}]}]",
      "role", "system", "content", "Be brief.",
      /* */
      "role", "user", "content", "List the files.",
      /* */
      "role", "assistant", "content", "Looking.", "tool_calls", "id", "call_1",
      "type", "function", "function", "name", "exec_command", "arguments",
      "{\"cmd\":\"ls\"}", "id", "call_2", "type", "function", "function",
      "name", "view_image", "arguments", "{\"path\":\"a.png\"}",
      /* */
      "role", "tool", "tool_call_id", "call_1", "content", "a.png\nb.txt",
      /* */
      "role", "tool", "tool_call_id", "call_2", "content",
      "the image:\ndata:image/png;base64,AAAA",
      /* */
      "role", "user", "content", "type", "text", "text", "And this?", "type",
      "image_url", "image_url", "url", "data:image/png;base64,BBBB", "detail",
      "low");
  json_t *msgs = json_object_get(b, "messages");
  char *got = json_dumps(msgs, JSON_INDENT(1));
  cr_expect(json_equal(msgs, want_msgs), "messages: %s", got);
  free(got);

  json_t *tools_out = json_object_get(b, "tools");
  cr_expect_eq(json_array_size(tools_out), 1, "only function tools");
  json_t *fn = json_object_get(json_array_get(tools_out, 0), "function");
  cr_expect_str_eq(json_string_value(json_object_get(fn, "name")),
                   "exec_command");
  cr_expect(json_is_true(json_object_get(fn, "strict")));
  cr_expect(json_equal(json_object_get(fn, "parameters"),
                       json_object_get(json_array_get(tl, 0), "parameters")));
  _cleanup_json_ json_t *choice = json_pack(
      "{s:s, s:{s:s}}", "type", "function", "function", "name", "exec_command");
  cr_expect(json_equal(json_object_get(b, "tool_choice"), choice));
  cr_expect(json_is_true(json_object_get(b, "parallel_tool_calls")));
  cr_expect_eq(json_integer_value(json_object_get(b, "max_tokens")), 50);
  cr_expect_str_eq(json_string_value(json_object_get(b, "reasoning_effort")),
                   "high");
  json_t *rf = json_object_get(b, "response_format");
  cr_expect_str_eq(json_string_value(json_object_get(rf, "type")),
                   "json_schema");
  json_t *js = json_object_get(rf, "json_schema");
  cr_expect_str_eq(json_string_value(json_object_get(js, "name")), "answer");
  cr_expect(json_equal(json_object_get(js, "schema"), schema));
  cr_expect(json_is_true(json_object_get(js, "strict")));
  cr_expect(json_is_false(json_object_get(b, "stream")));
  cr_expect(json_is_true(json_object_get(b, "store")), "store when set");
  cr_expect_null(json_object_get(b, "include"));
  cr_expect_float_eq(json_number_value(json_object_get(b, "frequency_penalty")),
                     0.5, 1e-9);
  cr_expect_float_eq(json_number_value(json_object_get(b, "presence_penalty")),
                     -0.5, 1e-9);
  cr_expect_str_eq(json_string_value(json_object_get(b, "verbosity")),
                   "medium");
  cr_expect_eq(json_integer_value(json_object_get(b, "top_logprobs")), 3);
  cr_expect(json_is_true(json_object_get(b, "logprobs")),
            "top_logprobs needs logprobs");
  cr_expect_str_eq(
      json_string_value(json_object_get(json_object_get(b, "metadata"), "k")),
      "v");
  model_client_free(m);
}

/* ---- record and replay ----------------------------------------------- */

static json_t *second_turn_input(void) {
  return json_pack("[{s:s, s:s}, {s:s, s:s, s:s, s:s}, {s:s, s:s, s:s}]",
                   "role", "user", "content", "List the files.", "type",
                   "function_call", "call_id", "call_1", "name", "exec_command",
                   "arguments", "{\"cmd\":\"ls\"}", "type",
                   "function_call_output", "call_id", "call_1", "output",
                   "Chunk ID: 1a2b3c\nWall time: 0.0123 seconds\nOutput:\na b");
}

static void record_then_replay(enum model_api api, bool record_stream,
                               bool replay_stream) {
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"arguments\": "
      "{\"cmd\": \"ls\"}, \"call_id\": \"call_1\"}]},"
      " {\"text\": \"There are two files: a and b.\"}]",
      NULL);
  struct model_config cfg = config(api);
  cfg.api_key = "sk-recorded-secret-123";
  cfg.record_path = record_path;
  cfg.stream = record_stream;
  struct model_client *m = client(&cfg);
  cr_expect(!model_client_replaying(m));
  _cleanup_json_ json_t *in1 = user_input("List the files.");
  _cleanup_json_ json_t *in2 = second_turn_input();
  _cleanup_json_ json_t *tl = tools();
  struct model_request r1 = {.model = "gpt-test", .input = in1, .tools = tl};
  struct model_request r2 = {.model = "gpt-test", .input = in2, .tools = tl};
  struct model_response a1 = {0}, a2 = {0}, b1 = {0}, b2 = {0};
  struct sbx_error e = {0};
  cr_assert_eq(model_call(m, &r1, &a1, &e), 0, "%s", e.msg);
  cr_assert_eq(model_call(m, &r2, &a2, &e), 0, "%s", e.msg);
  model_client_free(m);
  test_model_server_stop(&srv);

  /* The recording: two lines, no key. */
  FILE *f = fopen(record_path, "re");
  cr_assert_not_null(f);
  char *line = NULL;
  size_t cap = 0, lines = 0;
  while (getline(&line, &cap, f) > 0) {
    lines++;
    cr_expect_null(strstr(line, "sk-recorded-secret"));
    json_error_t jerr;
    _cleanup_json_ json_t *j = json_loads(line, 0, &jerr);
    cr_assert_not_null(j, "%s", jerr.text);
    cr_expect_eq(json_integer_value(json_object_get(j, "version")), 1);
    cr_expect_str_eq(json_string_value(json_object_get(j, "api")),
                     api == MODEL_API_CHAT ? "chat" : "responses");
    cr_expect(json_is_object(json_object_get(j, "request")));
    cr_expect(json_is_object(json_object_get(j, "response")));
  }
  free(line);
  fclose(f);
  cr_expect_eq(lines, 2);

  /* Replay: no server, same outputs. */
  struct deltas d = {0};
  struct model_config rc = {
      .api = api,
      .base_url = srv.base_url[0] ? srv.base_url : "http://127.0.0.1:1/v1",
      .replay_path = record_path,
      .stream = replay_stream,
      .on_delta = collect,
      .delta_arg = &d,
  };
  m = client(&rc);
  cr_expect(model_client_replaying(m));
  cr_assert_eq(model_call(m, &r1, &b1, &e), 0, "%s", e.msg);
  cr_assert_eq(model_call(m, &r2, &b2, &e), 0, "%s", e.msg);
  cr_expect(json_equal(a1.output, b1.output), "call 1 replays differently");
  cr_expect(json_equal(a2.output, b2.output), "call 2 replays differently");
  cr_expect_str_eq(first_text(b2.output), "There are two files: a and b.");
  cr_expect_eq(a2.usage.total_tokens, b2.usage.total_tokens);
  cr_expect_eq(a1.usage.input_tokens, b1.usage.input_tokens);
  cr_expect_str_eq(a2.id, b2.id);
  if (replay_stream)
    cr_expect_str_eq(d.text, "There are two files: a and b.");
  else
    cr_expect_eq(d.count, 0);
  model_response_clear(&a1);
  model_response_clear(&a2);
  model_response_clear(&b1);
  model_response_clear(&b2);
  model_client_free(m);
}

Test(model, record_then_replay_responses) {
  record_then_replay(MODEL_API_RESPONSES, false, true);
}

Test(model, record_streamed_then_replay_responses) {
  record_then_replay(MODEL_API_RESPONSES, true, false);
}

Test(model, record_streamed_then_replay_chat) {
  record_then_replay(MODEL_API_CHAT, true, true);
}

/* Writes a recording: a user message, answered "hi"; then, with the
 * second call, a tool's output, answered "done". */
static void write_recording(void) {
  static const char line[] =
      "{\"version\": 1, \"api\": \"responses\", \"request\": {\"model\": "
      "\"gpt-test\", \"instructions\": \"Be brief.\", \"input\": "
      "[{\"role\": \"user\", \"content\": \"x\"}, "
      "{\"type\": \"message\", \"role\": \"user\", \"content\": \"y\"}], "
      "\"tools\": [{\"type\": \"function\", \"name\": \"exec_command\"}]}, "
      "\"response\": {\"id\": \"r1\", \"status\": \"completed\", \"output\": "
      "[{\"type\": \"message\", \"role\": \"assistant\", \"content\": "
      "[{\"type\": \"output_text\", \"text\": \"hi\"}]}]}}\n"
      "{\"version\": 1, \"api\": \"responses\", \"request\": {\"model\": "
      "\"gpt-test\", \"instructions\": \"Be brief.\", \"input\": "
      "[{\"role\": \"user\", \"content\": \"x\"}, "
      "{\"type\": \"function_call_output\", \"call_id\": \"c1\", "
      "\"output\": \"Wall time: 0.01 seconds\"}], "
      "\"tools\": [{\"type\": \"function\", \"name\": \"exec_command\"}]}, "
      "\"response\": {\"id\": \"r2\", \"status\": \"completed\", \"output\": "
      "[{\"type\": \"message\", \"role\": \"assistant\", \"content\": "
      "[{\"type\": \"output_text\", \"text\": \"done\"}]}]}}\n";
  int fd = open(record_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, line, sizeof(line) - 1), (ssize_t)sizeof(line) - 1);
  close(fd);
}

static struct model_client *replayer(void) {
  struct model_config cfg = {.api = MODEL_API_RESPONSES,
                             .replay_path = record_path};
  return client(&cfg);
}

static json_t *exec_tool(void) {
  return json_pack("[{s:s, s:s}]", "type", "function", "name", "exec_command");
}

/* The recording's first request: its instructions, prompt and tools. */
static json_t *first_input(void) {
  return json_pack("[{s:s, s:s}, {s:s, s:s, s:s}]", "role", "user", "content",
                   "x", "type", "message", "role", "user", "content", "y");
}

Test(model, replay_checks_tool_outputs_by_shape_not_text) {
  write_recording();
  struct model_client *m = replayer();
  _cleanup_json_ json_t *tl = exec_tool();
  _cleanup_json_ json_t *input = first_input();
  struct model_request req = {.model = "gpt-test",
                              .instructions = "Be brief.",
                              .input = input,
                              .tools = tl};
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_assert_eq(model_call(m, &req, &out, &e), 0, "%s", e.msg);
  cr_expect_str_eq(first_text(out.output), "hi");
  model_response_clear(&out);
  /* A tool's output with other text (its time, its ids), same shape: not
   * a divergence after the first call. */
  _cleanup_json_ json_t *second = json_pack(
      "[{s:s, s:s}, {s:s, s:s, s:s}]", "role", "user", "content", "x", "type",
      "function_call_output", "call_id", "c1", "output", "Wall time: 0.5 s");
  req.input = second;
  cr_assert_eq(model_call(m, &req, &out, &e), 0, "%s", e.msg);
  cr_expect_str_eq(first_text(out.output), "done");
  model_response_clear(&out);

  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect_str_eq(e.msg, "replay has only 2 recorded model calls");
  model_client_free(m);
}

Test(model, replay_refuses_another_first_request) {
  write_recording();
  _cleanup_json_ json_t *tl = exec_tool();
  _cleanup_json_ json_t *input = first_input();
  struct model_response out = {0};
  struct sbx_error e = {0};
  /* Another prompt, same shape. */
  _cleanup_json_ json_t *prompt =
      json_pack("[{s:s, s:s}, {s:s, s:s, s:s}]", "role", "user", "content", "x",
                "type", "message", "role", "user", "content", "z");
  struct model_request req = {.model = "gpt-test",
                              .instructions = "Be brief.",
                              .input = prompt,
                              .tools = tl};
  struct model_client *m = replayer();
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect_str_eq(e.msg,
                   "replay refused: the user message (input item 2) differs "
                   "from the recording's first request at byte 0: the run "
                   "has \"z\", the recording \"y\" (replay the run with the "
                   "agent, prompt and tools it was recorded with)");
  cr_expect_eq(e.code, SBX_CONFLICT);
  model_client_free(m);
  /* Other instructions (another agent). */
  req.input = input;
  req.instructions = "Be thorough.";
  m = replayer();
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect(strstr(e.msg, "replay refused: the instructions differ from the "
                          "recording's first request at byte 3: the run has "
                          "\"thorough.\", the recording \"brief.\""),
            "%s", e.msg);
  model_client_free(m);
  /* No instructions where the recording had some. */
  req.instructions = NULL;
  m = replayer();
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect(strstr(e.msg, "the instructions differ"), "%s", e.msg);
  model_client_free(m);
  /* The same tool by name, defined otherwise. */
  req.instructions = "Be brief.";
  _cleanup_json_ json_t *tl2 =
      json_pack("[{s:s, s:s, s:s}]", "type", "function", "name", "exec_command",
                "description", "Runs it.");
  req.tools = tl2;
  m = replayer();
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect(strstr(e.msg, "replay refused: the tool exec_command's "
                          "definition differs"),
            "%s", e.msg);
  model_client_free(m);
  /* The recorded request itself replays. */
  req.tools = tl;
  m = replayer();
  cr_expect_eq(model_call(m, &req, &out, &e), 0, "%s", e.msg);
  model_response_clear(&out);
  model_client_free(m);
}

Test(model, replay_divergence_names_the_item) {
  write_recording();
  _cleanup_json_ json_t *tl = exec_tool();
  struct model_response out = {0};
  struct sbx_error e = {0};

  struct model_client *m = replayer();
  _cleanup_json_ json_t *input = json_pack(
      "[{s:s, s:s}, {s:s, s:s, s:s}]", "role", "user", "content", "x", "type",
      "function_call_output", "call_id", "call_ab", "output", "...");
  struct model_request req = {.model = "gpt-test", .input = input, .tools = tl};
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect_str_eq(e.msg, "replay diverged at model call 1: input item 2 is "
                          "function_call_output for call_ab, the recording has "
                          "message (user)");
  model_client_free(m);

  m = replayer();
  _cleanup_json_ json_t *longer = json_pack(
      "[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}]", "role", "user", "content", "x",
      "role", "user", "content", "y", "role", "user", "content", "z");
  req.input = longer;
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect_str_eq(e.msg, "replay diverged at model call 1: the run has 3 "
                          "input items, the recording has 2");
  model_client_free(m);

  m = replayer();
  req.input = input;
  req.model = "gpt-other";
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect_str_eq(e.msg, "replay diverged at model call 1: the model is "
                          "gpt-other, the recording has gpt-test");
  model_client_free(m);

  m = replayer();
  req.model = "gpt-test";
  _cleanup_json_ json_t *tl2 = tools();
  req.tools = tl2;
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect_str_eq(e.msg, "replay diverged at model call 1: the tools are "
                          "[exec_command, apply_patch], the recording has "
                          "[exec_command]");
  model_client_free(m);

  struct model_config chat = {.api = MODEL_API_CHAT,
                              .replay_path = record_path};
  m = client(&chat);
  req.tools = tl;
  cr_expect_eq(model_call(m, &req, &out, &e), -EBUSY);
  cr_expect_str_eq(e.msg, "replay diverged at model call 1: the run uses the "
                          "chat API, the recording has responses");
  model_client_free(m);
}

Test(model, replay_file_errors_name_the_line) {
  int fd = open(record_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0);
  static const char text[] =
      "\n{\"version\": 1, \"api\": \"responses\", \"request\": {}, "
      "\"response\": {}}\n{not json\n";
  cr_assert_eq(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
  close(fd);
  struct model_config cfg = {.api = MODEL_API_RESPONSES,
                             .replay_path = record_path};
  struct model_client *m = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(model_client_new(&cfg, &m, &e), -EBADMSG);
  char want[256];
  (void)snprintf(want, sizeof(want),
                 "replay file %s line 3: invalid JSON: ", record_path);
  expect_prefix(e.msg, want);
  cr_expect_null(m);

  cfg.replay_path = "/nonexistent/rec.jsonl";
  cr_expect_eq(model_client_new(&cfg, &m, &e), -ENOENT);
  expect_prefix(e.msg, "cannot open replay file /nonexistent/rec.jsonl: ");
}

Test(model, chat_call_without_id_gets_one_that_replays) {
  test_model_server_start(
      &srv,
      "[{\"chat\": {\"id\": \"c1\", \"choices\": [{\"index\": 0, "
      "\"message\": {\"role\": \"assistant\", \"content\": null, "
      "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
      "\"exec_command\", \"arguments\": {\"cmd\": \"ls\"}}}]}, "
      "\"finish_reason\": \"tool_calls\"}]}}]",
      NULL);
  struct model_config cfg = config(MODEL_API_CHAT);
  cfg.record_path = record_path;
  struct model_client *m = client(&cfg);
  struct model_response a = {0}, b = {0};
  struct sbx_error e = {0};
  cr_assert_eq(call_simple(m, "hi", &a, &e), 0, "%s", e.msg);
  model_client_free(m);
  cr_assert_eq(json_array_size(a.output), 1);
  json_t *fc = json_array_get(a.output, 0);
  const char *id = json_string_value(json_object_get(fc, "call_id"));
  cr_assert_not_null(id);
  expect_prefix(id, "call_");
  cr_expect_gt(strlen(id), 10);
  cr_expect_str_eq(json_string_value(json_object_get(fc, "arguments")),
                   "{\"cmd\":\"ls\"}", "object arguments become text");

  struct model_config rc = {.api = MODEL_API_CHAT, .replay_path = record_path};
  m = client(&rc);
  cr_assert_eq(call_simple(m, "hi", &b, &e), 0, "%s", e.msg);
  cr_expect(json_equal(a.output, b.output), "the replay has the same id");
  model_response_clear(&a);
  model_response_clear(&b);
  model_client_free(m);
}

Test(model, chat_length_finish_is_an_error) {
  test_model_server_start(
      &srv,
      "[{\"chat\": {\"choices\": [{\"index\": 0, \"message\": {\"role\": "
      "\"assistant\", \"content\": \"cut\"}, \"finish_reason\": "
      "\"length\"}]}}]",
      NULL);
  struct model_config cfg = config(MODEL_API_CHAT);
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_expect_eq(call_simple(m, "hi", &out, &e), -E2BIG);
  cr_expect(strstr(e.msg, "finish_reason \"length\""), "%s", e.msg);
  model_client_free(m);
}

Test(model, should_retry_header_wins) {
  test_model_server_start(
      &srv,
      "[{\"status\": 500, \"headers\": {\"x-should-retry\": \"false\"}},"
      " {\"status\": 400, \"headers\": {\"x-should-retry\": \"true\"}},"
      " {\"text\": \"ok\"}]",
      NULL);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_expect_eq(call_simple(m, "hi", &out, &e), -EAGAIN);
  cr_expect_eq(request_count(), 1, "x-should-retry: false stops retries");
  cr_assert_eq(call_simple(m, "hi", &out, &e), 0, "%s", e.msg);
  cr_expect_eq(request_count(), 3, "x-should-retry: true retries a 400");
  model_response_clear(&out);
  model_client_free(m);
}

Test(model, compaction_threshold_is_nine_tenths_of_the_window) {
  cr_expect_eq(model_compaction_threshold("gpt-5"), 360000);
  cr_expect_eq(model_compaction_threshold("openai/GPT-4.1"), 1047576 * 9 / 10,
               "the provider prefix and case are ignored");
  cr_expect_eq(model_compaction_threshold("o3"), 180000);
  cr_expect_eq(model_compaction_threshold("some-local-model"), 240000);
  /* A dated snapshot has its model's window. */
  cr_expect_eq(model_compaction_threshold("gpt-5-2025-08-07"), 360000);
  cr_expect_eq(model_compaction_threshold("gpt-4o-2024-08-06"), 115200);
  cr_expect_eq(model_compaction_threshold("gpt-4o-2024-08-0x"), 240000);
  cr_expect_eq(model_compaction_threshold("-2024-08-06"), 240000);
  cr_expect_eq(model_compaction_threshold(NULL), 240000);
}

/* OpenAI's own API answers nothing without a key: said at once, not by a
 * 401 after the request. Other servers may need none. */
Test(model, no_key_for_openai_is_refused_at_once) {
  struct model_config cfg = {.api = MODEL_API_RESPONSES,
                             .base_url = "https://api.openai.com/v1",
                             .api_key = ""};
  struct model_client *m = NULL;
  struct sbx_error e = {0};
  cr_expect_eq(model_client_new(&cfg, &m, &e), -EINVAL);
  cr_expect_null(m);
  cr_expect_str_eq(e.msg, "no API key for https://api.openai.com/v1/responses: "
                          "set OPENAI_API_KEY (or the agent's api_key_env)");
  cfg.base_url = "https://eu.api.openai.com/v1";
  cr_expect_eq(model_client_new(&cfg, &m, &e), -EINVAL);
  cfg.base_url = "http://127.0.0.1:1/v1";
  cr_expect_eq(model_client_new(&cfg, &m, &e), 0, "%s", e.msg);
  model_client_free(m);
  m = NULL;
  cfg.base_url = "https://notopenai.com/v1";
  cr_expect_eq(model_client_new(&cfg, &m, &e), 0, "%s", e.msg);
  model_client_free(m);
}

/* OPENAI_ORG_ID and OPENAI_PROJECT_ID go as the openai client sends them. */
Test(model, organization_and_project_headers) {
  test_model_server_start(&srv, "[{\"text\": \"ok\"}]", NULL);
  setenv("OPENAI_ORG_ID", "org-123", 1);
  setenv("OPENAI_PROJECT_ID", "proj_456", 1);
  struct model_config cfg = config(MODEL_API_RESPONSES);
  struct model_client *m = client(&cfg);
  unsetenv("OPENAI_ORG_ID");
  unsetenv("OPENAI_PROJECT_ID");
  _cleanup_json_ json_t *input = user_input("hi");
  struct model_request req = {.model = "m", .input = input};
  struct model_response out = {0};
  struct sbx_error e = {0};
  cr_assert_eq(model_call(m, &req, &out, &e), 0, "%s", e.msg);
  _cleanup_json_ json_t *reqs = test_model_server_requests(&srv);
  json_t *h = json_object_get(json_array_get(reqs, 0), "headers");
  cr_expect_str_eq(json_string_value(json_object_get(h, "openai-organization")),
                   "org-123");
  cr_expect_str_eq(json_string_value(json_object_get(h, "openai-project")),
                   "proj_456");
  model_response_clear(&out);
  model_client_free(m);
}

/* A number a model server sends may be any double: one past the range of
 * long long is clamped, not cast (undefined behaviour, found by
 * fuzz_model). */
Test(model, json_numbers_past_long_long_are_clamped) {
  json_t *j = json_pack("{s:f, s:f, s:f, s:I}", "big", 4.44444e35, "small",
                        -4.44444e35, "frac", 12.75, "n", (json_int_t)42);
  cr_assert_not_null(j);
  cr_expect_eq(model_json_int(j, "big"), LLONG_MAX);
  cr_expect_eq(model_json_int(j, "small"), LLONG_MIN);
  cr_expect_eq(model_json_int(j, "frac"), 12);
  cr_expect_eq(model_json_int(j, "n"), 42);
  cr_expect_eq(model_json_int(j, "missing"), 0);
  json_decref(j);
}

/* Token counts are taken within 0..MODEL_COUNT_MAX, so that sums of them
 * cannot overflow whatever a server sends. */
Test(model, token_counts_are_bounded) {
  json_t *j =
      json_pack("{s:I, s:I, s:f, s:I}", "huge", (json_int_t)LLONG_MAX,
                "negative", (json_int_t)-5, "real", 1e30, "n", (json_int_t)7);
  cr_assert_not_null(j);
  cr_expect_eq(model_json_count(j, "huge"), MODEL_COUNT_MAX);
  cr_expect_eq(model_json_count(j, "negative"), 0);
  cr_expect_eq(model_json_count(j, "real"), MODEL_COUNT_MAX);
  cr_expect_eq(model_json_count(j, "n"), 7);
  json_decref(j);
}
