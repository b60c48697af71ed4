/* The memory capability end to end: the real sbx, a real sandboxd and the
 * scripted model server. A run with "memory" appends its rollout to
 * sessions/, runs the SDK's phase one and phase two as agents of their
 * own in its sandbox, and the next run in the same developer sandbox
 * reads the summary they left into its instructions, within the SDK's
 * limits. A phase that fails is warned about and fails no run. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"

static char dir[64];
static char state[96];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-memory-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(state, sizeof(state), "%s/state", dir);
}

static void teardown(void) {
  sbx_sandbox_remove_all(state);
  (void)test_rm_rf(dir);
}

TestSuite(memory, .init = setup, .fini = teardown, .timeout = 180);

#define CAPS "\"capabilities\": [\"filesystem\", \"shell\", "

/* Writes the agent NAME.json with the memory capability MEMORY (JSON);
 * returns its path (static). */
static const char *agent(const char *name, const char *memory) {
  static char path[256];
  char text[1024];
  (void)snprintf(text, sizeof(text),
                 "{\"name\": \"Keeper\", \"model\": \"gpt-test\", " CAPS "%s]}",
                 memory);
  char file[64];
  (void)snprintf(file, sizeof(file), "%s.json", name);
  (void)snprintf(path, sizeof(path), "%s", test_write_file(dir, file, text));
  return path;
}

/* A developer sandbox made for AGENT: its id (new). */
static char *create(const char *agent_path) {
  char *id = sbx_sandbox_line(
      state, (const char *const[]){"create", "--agent", agent_path, NULL});
  cr_assert_not_null(id);
  id[strcspn(id, "\n")] = '\0';
  return id;
}

/* Runs AGENT on PROMPT in the sandbox ID against SCRIPT into *OUT; the
 * requests into *REQS (new). */
static void run_in(const char *id, const char *agent_path, const char *prompt,
                   const char *script, struct sbx_run_out *out, json_t **reqs) {
  struct test_model_server srv;
  test_model_server_start(&srv, script, NULL);
  sbx_run(out, srv.base_url,
          (const char *const[]){"run", "--state-dir", state, "--sandbox", id,
                                agent_path, prompt, NULL});
  *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
}

/* The output of "sh -c CMD" in the sandbox ID (new). */
static char *sh(const char *id, const char *cmd) {
  struct sbx_run_out out;
  sbx_sandbox_run(
      &out, state,
      (const char *const[]){"exec", id, "--", "sh", "-c", cmd, NULL});
  cr_expect_eq(out.status, 0, "%s: %s", cmd, out.err);
  char *text = strdup(out.out);
  sbx_run_free(&out);
  return text;
}

static json_t *body(json_t *reqs, size_t n) {
  return json_object_get(json_array_get(reqs, n), "body");
}

static const char *instructions(json_t *reqs, size_t n) {
  const char *s =
      json_string_value(json_object_get(body(reqs, n), "instructions"));
  return s ? s : "";
}

/* The text of the first input item of request N. */
static const char *first_input(json_t *reqs, size_t n) {
  json_t *it = json_array_get(json_object_get(body(reqs, n), "input"), 0);
  const char *s = json_string_value(json_object_get(it, "content"));
  return s ? s : "";
}

/* Phase one's answer, as the model's final text. */
#define PHASE_ONE(summary, slug, raw)                                          \
  "{\"text\": \"{\\\"rollout_summary\\\": \\\"" summary                        \
  "\\\", \\\"rollout_slug\\\": \\\"" slug "\\\", \\\"raw_memory\\\": \\\"" raw \
  "\\\"}\"}"

/* Phase two: one command that writes the summary, then its answer. */
#define PHASE_TWO(text)                                                        \
  "{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"p2\", "       \
  "\"arguments\": {\"cmd\": \"printf '" text                                   \
  "\\\\n' > memories/memory_summary.md\"}}]}, {\"text\": \"consolidated\"}"

Test(memory, what_one_run_writes_the_next_reads) {
  const char *a1 = agent("writer", "\"memory\"");
  char *id = create(a1);
  static const char script[] = "[{\"text\": \"noted\"}, " PHASE_ONE(
      "The user set a code word.", "code-word.md",
      "The code word is owl.") ", " PHASE_TWO("The code word is owl.") "]";
  struct sbx_run_out out;
  json_t *reqs;
  run_in(id, a1, "Remember the code word owl.", script, &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect_str_eq(out.out, "noted\n");
  cr_assert_eq(json_array_size(reqs), 4);
  /* The run's own request: no summary yet, the layout in the tree. */
  cr_expect_null(strstr(instructions(reqs, 0), "## Memory"));
  cr_expect(strstr(instructions(reqs, 0), "memories/ # /workspace/memories\n"
                                          "sessions/ # /workspace/sessions"),
            "%s", instructions(reqs, 0));
  /* Phase one: its agent, model, settings, schema and the rollout. */
  json_t *b1 = body(reqs, 1);
  cr_expect_str_eq(json_string_value(json_object_get(b1, "model")),
                   "gpt-5.4-mini");
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(b1, "reasoning"), "effort")),
                   "medium");
  cr_expect(strstr(instructions(reqs, 1),
                   "\n\n# Agent instructions\n\n## Memory Writing Agent: "
                   "Phase 1 (Rollout Extraction)\n"),
            "%s", instructions(reqs, 1));
  cr_expect_not_null(json_object_get(json_object_get(b1, "text"), "format"));
  const char *p1 = first_input(reqs, 1);
  cr_expect(strncmp(p1,
                    "Analyze this memory rollout and produce JSON with "
                    "`raw_memory`, `rollout_summary`, and `rollout_slug`",
                    80) == 0,
            "%s", p1);
  /* The SDK's stable JSON: sorted keys, two spaces, no space after a
   * colon. */
  cr_expect(strstr(p1, "```json\n{\n  \"exception_message\":null,\n  "
                       "\"exception_type\":null,\n  \"has_final_output\":"
                       "true,\n  \"terminal_state\":\"completed\"\n}\n```"),
            "%s", p1);
  cr_expect(strstr(p1, "\"input\":[{\"role\":\"user\",\"content\":"
                       "\"Remember the code word owl.\"}]"),
            "%s", p1);
  /* Phase two: its model, no agent instructions, the consolidation prompt
   * with the selection. */
  cr_expect_str_eq(json_string_value(json_object_get(body(reqs, 2), "model")),
                   "gpt-5.4");
  cr_expect_null(strstr(instructions(reqs, 2), "# Agent instructions"));
  const char *p2 = first_input(reqs, 2);
  cr_expect(
      strncmp(p2, "## Memory Writing Agent: Phase 2 (Consolidation)", 48) == 0,
      "%s", p2);
  cr_expect(strstr(p2, "- selected inputs this run: 1\n"
                       "- newly added since the last successful Phase 2 "
                       "run: 1\n"),
            "%s", p2);
  cr_expect(strstr(p2, "_code-word.md, updated_at=20"), "%s", p2);
  json_decref(reqs);
  sbx_run_free(&out);

  /* The files, where the SDK puts them. */
  char *files = sh(id, "cd memories && find . -type f | sort");
  cr_expect(strstr(files, "./MEMORY.md\n./memory_summary.md\n"
                          "./phase_two_selection.json\n./raw_memories.md\n"
                          "./raw_memories/"),
            "%s", files);
  cr_expect(strstr(files, "_code-word.md\n"), "%s", files);
  free(files);
  char *raw = sh(id, "cat memories/raw_memories/*.md");
  cr_expect(strncmp(raw, "rollout_id: ", 12) == 0, "%s", raw);
  cr_expect(strstr(raw, "\nterminal_state: completed\n\nThe code word is "
                        "owl.\n"),
            "%s", raw);
  free(raw);
  char *sessions = sh(id, "cat sessions/*.jsonl | wc -l");
  cr_expect_str_eq(sessions, "1\n");
  free(sessions);

  /* The next run reads the summary into its instructions, and without
   * "generate" asks nothing more. */
  const char *a2 = agent("reader", "{\"type\": \"memory\", \"generate\": "
                                   "false}");
  run_in(id, a2, "What is the code word?", "[{\"text\": \"owl\"}]", &out,
         &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect_eq(json_array_size(reqs), 1);
  const char *in = instructions(reqs, 0);
  cr_expect(strstr(in, "# Sandbox capability instructions\n\nWhen using the "
                       "shell:\n"),
            "%s", in);
  cr_expect(strstr(in, "\n\n## Memory\n\nYou have access to a memory folder "
                       "with guidance from prior runs in this sandbox "
                       "workspace.\n"),
            "%s", in);
  cr_expect(strstr(in, "You are authorized to edit memories/MEMORY.md when "
                       "stale"),
            "%s", in);
  cr_expect(strstr(in, "========= MEMORY_SUMMARY BEGINS =========\nThe code "
                       "word is owl.\n========= MEMORY_SUMMARY ENDS "
                       "=========\n"),
            "%s", in);
  json_decref(reqs);
  sbx_run_free(&out);
  sessions = sh(id, "cat sessions/*.jsonl | wc -l");
  cr_expect_str_eq(sessions, "1\n", "generate: false wrote a rollout");
  free(sessions);
  free(id);
}

Test(memory, the_summary_is_read_within_the_sdks_limits) {
  const char *a = agent("ro", "{\"type\": \"memory\", \"read\": "
                              "{\"live_update\": false}, \"generate\": null}");
  char *id = create(a);
  /* 70,000 bytes: 10,000 over the 15,000-token budget, 2,500 tokens. */
  free(sh(id, "mkdir -p memories && { head -c 35000 /dev/zero | tr '\\0' a; "
              "head -c 35000 /dev/zero | tr '\\0' b; } > "
              "memories/memory_summary.md"));
  struct sbx_run_out out;
  json_t *reqs;
  run_in(id, a, "Go.", "[{\"text\": \"ok\"}]", &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  const char *in = instructions(reqs, 0);
  const char *begin = strstr(in, "MEMORY_SUMMARY BEGINS =========\n");
  cr_assert_not_null(begin, "%s", in);
  begin += strlen("MEMORY_SUMMARY BEGINS =========\n");
  cr_expect_eq(strspn(begin, "a"), 30000);
  cr_expect(strncmp(begin + 30000, "...2500 tokens truncated...", 27) == 0,
            "%.80s", begin + 29990);
  cr_expect_eq(strspn(begin + 30027, "b"), 30000);
  cr_expect(strncmp(begin + 60027, "\n=========", 10) == 0);
  cr_expect(strstr(in, "Never update memories. You can only read them."));
  cr_expect_null(strstr(in, "When to update memory"));
  json_decref(reqs);
  sbx_run_free(&out);
  /* More than the 1,000,000 bytes read: the rest is never seen. */
  free(sh(id, "{ head -c 1000000 /dev/zero | tr '\\0' a; echo "
              "TAIL-NOT-READ; } > memories/memory_summary.md"));
  run_in(id, a, "Go.", "[{\"text\": \"ok\"}]", &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  in = instructions(reqs, 0);
  cr_expect(strstr(in, "...235000 tokens truncated...aaaa"), "%.200s",
            strstr(in, "truncated") ? strstr(in, "truncated") - 20 : in);
  cr_expect_null(strstr(in, "TAIL-NOT-READ"));
  json_decref(reqs);
  sbx_run_free(&out);
  /* Blank: no memory section at all. */
  free(sh(id, "printf ' \\n\\t\\n' > memories/memory_summary.md"));
  run_in(id, a, "Go.", "[{\"text\": \"ok\"}]", &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect_null(strstr(instructions(reqs, 0), "## Memory"));
  json_decref(reqs);
  sbx_run_free(&out);
  free(id);
}

/* A phase that fails is warned about; the run's answer and exit status
 * stay (the SDK logs the failure). */
Test(memory, a_failing_phase_fails_no_run) {
  const char *a = agent("w", "\"memory\"");
  char *id = create(a);
  /* Phase one's model call fails (a 400 is not retried): no raw memory,
   * no phase two, but the rollout is kept for later. */
  struct sbx_run_out out;
  json_t *reqs;
  run_in(id, a, "First.", "[{\"text\": \"one\"}, {\"status\": 400}]", &out,
         &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect_str_eq(out.out, "one\n");
  cr_expect(strstr(out.err, "sandbox memory phase 1 failed"), "%s", out.err);
  cr_expect_eq(json_array_size(reqs), 2);
  json_decref(reqs);
  sbx_run_free(&out);
  char *files = sh(id, "ls memories/raw_memories | wc -l; cat "
                       "sessions/*.jsonl | wc -l");
  cr_expect_str_eq(files, "0\n1\n");
  free(files);
  /* Partly empty artifacts are an error of phase one. */
  run_in(id, a, "Second.", "[{\"text\": \"two\"}, " PHASE_ONE("", "x", "y") "]",
         &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect(strstr(out.err, "Phase 1 returned partially-empty memory "
                            "artifacts."),
            "%s", out.err);
  cr_expect_eq(json_array_size(reqs), 2);
  json_decref(reqs);
  sbx_run_free(&out);
  /* A slug that is not one. */
  run_in(id, a, "Third.",
         "[{\"text\": \"three\"}, " PHASE_ONE("s", "Bad Slug", "r") "]", &out,
         &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect(strstr(out.err, "Invalid rollout_slug: Bad Slug"), "%s", out.err);
  json_decref(reqs);
  sbx_run_free(&out);
  /* All empty: nothing worth remembering, no phase two, no warning. */
  run_in(id, a, "Fourth.", "[{\"text\": \"four\"}, " PHASE_ONE("", "", "") "]",
         &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect_null(strstr(out.err, "phase"), "%s", out.err);
  cr_expect_eq(json_array_size(reqs), 2);
  json_decref(reqs);
  sbx_run_free(&out);
  /* Phase two fails: warned about, and no selection recorded. */
  run_in(id, a, "Fifth.",
         "[{\"text\": \"five\"}, " PHASE_ONE("s", "five",
                                             "r") ", "
                                                  "{\"status\": 400}]",
         &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect_str_eq(out.out, "five\n");
  cr_expect(strstr(out.err, "sandbox memory phase 2 failed"), "%s", out.err);
  json_decref(reqs);
  sbx_run_free(&out);
  files = sh(id, "ls memories/raw_memories | wc -l; test -e "
                 "memories/phase_two_selection.json || echo none");
  cr_expect_str_eq(files, "1\nnone\n");
  free(files);
  free(id);
}

/* A run that fails is remembered too, with how it ended, and keeps its
 * exit status; kept for a retry (sbx run's default), it is remembered
 * now all the same. */
Test(memory, a_failed_run_is_remembered_as_failed) {
  const char *a = agent("f", "\"memory\"");
  char *id = create(a);
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
      "\"c1\", \"arguments\": {\"cmd\": \"true\"}}]}, " PHASE_ONE("", "",
                                                                  "") "]",
      NULL);
  struct sbx_run_out out;
  sbx_run(&out, srv.base_url,
          (const char *const[]){"run", "--state-dir", state, "--sandbox", id,
                                "--max-turns", "1", a, "Loop.", NULL});
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  cr_expect_eq(out.status, 1, "%s", out.err);
  cr_assert_eq(json_array_size(reqs), 2);
  const char *p1 = first_input(reqs, 1);
  cr_expect(strstr(p1, "\"exception_type\":\"MaxTurnsExceededError\""), "%s",
            p1);
  cr_expect(strstr(p1, "\"terminal_state\":\"max_turns_exceeded\""), "%s", p1);
  cr_expect(strstr(p1, "\"type\":\"function_call_output\""), "%s", p1);
  json_decref(reqs);
  sbx_run_free(&out);
  free(id);
}

/* Memory lives in the workspace, so a snapshot carries it: a sandbox
 * saved, removed and restored holds what the first run wrote, and the
 * next run there reads it. */
Test(memory, a_snapshot_carries_memory) {
  const char *a1 = agent("writer", "\"memory\"");
  char *id = create(a1);
  static const char script[] = "[{\"text\": \"noted\"}, " PHASE_ONE(
      "Saved.", "saved", "The colour is teal.") ", " PHASE_TWO("The "
                                                               "colour is "
                                                               "teal.") "]";
  struct sbx_run_out out;
  json_t *reqs;
  run_in(id, a1, "The colour is teal.", script, &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  json_decref(reqs);
  sbx_run_free(&out);
  char snaps[128];
  (void)snprintf(snaps, sizeof(snaps), "%s/snaps", dir);
  sbx_sandbox_run(
      &out, state,
      (const char *const[]){"save", id, "--snapshot-dir", snaps, NULL});
  cr_assert_eq(out.status, 0, "%s", out.err);
  char *saved = strdup(test_write_file(dir, "saved.json", out.out));
  sbx_run_free(&out);
  sbx_sandbox_run(&out, state, (const char *const[]){"rm", "-f", id, NULL});
  cr_assert_eq(out.status, 0, "%s", out.err);
  sbx_run_free(&out);
  char *id2 =
      sbx_sandbox_line(state, (const char *const[]){"resume", saved, NULL});
  id2[strcspn(id2, "\n")] = '\0';
  cr_expect_str_neq(id2, id, "a new sandbox from the snapshot");
  const char *a2 = agent("reader", "{\"type\": \"memory\", \"generate\": "
                                   "false}");
  run_in(id2, a2, "Which colour?", "[{\"text\": \"teal\"}]", &out, &reqs);
  cr_expect_eq(out.status, 0, "%s", out.err);
  cr_expect(strstr(instructions(reqs, 0),
                   "MEMORY_SUMMARY BEGINS =========\nThe colour is teal.\n"),
            "%s", instructions(reqs, 0));
  json_decref(reqs);
  sbx_run_free(&out);
  free(saved);
  free(id2);
  free(id);
}

/* A run that stops for an approval is remembered too, as the SDK does at
 * an interruption: its segment says so and holds the call it waits on. */
Test(memory, a_paused_run_is_remembered_as_interrupted) {
  (void)test_write_file(dir, "ask.json",
                        "{\"name\": \"Asker\", \"model\": \"gpt-test\", " CAPS
                        "\"memory\"], \"approvals\": {\"exec_command\": "
                        "\"always\"}}");
  char a[128];
  (void)snprintf(a, sizeof(a), "%s/ask.json", dir);
  char *id = create(a);
  struct sbx_run_out out;
  json_t *reqs;
  run_in(id, a, "Clean up.",
         "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": "
         "\"w1\", \"arguments\": {\"cmd\": \"rm -rf build\"}}]}, " PHASE_ONE(
             "", "", "") "]",
         &out, &reqs);
  cr_expect_eq(out.status, 3, "%s", out.err);
  cr_assert_eq(json_array_size(reqs), 2);
  const char *p1 = first_input(reqs, 1);
  cr_expect(strstr(p1, "\"terminal_state\":\"interrupted\""), "%s", p1);
  cr_expect(strstr(p1, "\"has_final_output\":false"), "%s", p1);
  cr_expect(strstr(p1, "\"interruptions\":[{\"type\":\"function_call\""), "%s",
            p1);
  cr_expect(strstr(p1, "\"call_id\":\"w1\""), "%s", p1);
  json_decref(reqs);
  sbx_run_free(&out);
  free(id);
}
