/* libFuzzer target for agent files (controller/config/agent*.c): the input
 * is written to DIR/fuzz.json and loaded with agent_load, as `sbx run`
 * loads one. DIR also holds agents it may reference by name: helper.json
 * (a plain agent), reviewer.json (hands off back to fuzz.json), loop.json
 * (uses fuzz.json as a tool), bad.json (not JSON) and sub/ (a directory).
 *
 * A loaded set must be what agent.h promises: every agent named and at
 * its index, its handoffs and tools in the set, capabilities without
 * repeats, settings within their ranges, no cycle through a tool; each
 * agent's default_manifest is handed to the manifest parser as a run
 * would. A refused file leaves no set, and the message names the file
 * (every path here is absolute, so it starts with "/"). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/config/agent.h"
#include "controller/config/manifest.h"
#include "tests/fuzz/fuzz_tmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256];
static char path[300];
static struct agent_set untouched; /* what agent_load must not replace */

/* Writes LEN bytes of TEXT to NAME in DIR, or aborts. */
static void put(const char *name, const void *text, size_t len) {
  char p[320];
  (void)snprintf(p, sizeof(p), "%s/%s", dir, name);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    abort();
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, (const char *)text + off, len - off);
    if (w <= 0)
      abort();
    off += (size_t)w;
  }
  (void)close(fd);
}

/* Removes the directory at exit. */
static void teardown(void) {
  fuzz_tmpdir_remove(dir);
}

/* The directory and the agents the input may reference, made once. */
static void setup(void) {
  fuzz_tmpdir(dir, sizeof(dir), "agent");
  (void)atexit(teardown);
  (void)snprintf(path, sizeof(path), "%s/fuzz.json", dir);
  static const char helper[] = "{\"name\": \"Helper\"}";
  static const char reviewer[] =
      "{\"name\": \"Reviewer\", \"handoffs\": [\"fuzz.json\"]}";
  static const char loop[] = "{\"name\": \"Loop\", \"tools\": [{\"type\": "
                             "\"agent_as_tool\", \"agent\": \"fuzz.json\"}]}";
  put("helper.json", helper, sizeof(helper) - 1);
  put("reviewer.json", reviewer, sizeof(reviewer) - 1);
  put("loop.json", loop, sizeof(loop) - 1);
  put("bad.json", "{", 1);
  char sub[320];
  (void)snprintf(sub, sizeof(sub), "%s/sub", dir);
  (void)mkdir(sub, 0755);
}

/* Whether B is one of S's agents. */
static bool in_set(const struct agent_set *s, const struct agent *b) {
  for (size_t i = 0; i < s->n; i++)
    if (s->agents[i] == b)
      return true;
  return false;
}

/* Checks one agent of S against agent.h. */
static void check_agent(const struct agent_set *s, const struct agent *a,
                        size_t i) {
  if (a->index != i || !a->path || !a->name || !a->name[0])
    abort();
  bool seen[AGENT_CAP_COUNT] = {false};
  if (a->ncapabilities > AGENT_CAP_COUNT)
    abort();
  for (size_t k = 0; k < a->ncapabilities; k++) {
    if (!agent_capability_name(a->capabilities[k]) || seen[a->capabilities[k]])
      abort();
    seen[a->capabilities[k]] = true;
  }
  json_t *ms = a->model_settings;
  json_t *t = json_object_get(ms, "temperature");
  if (ms && !json_is_object(ms))
    abort();
  if (t && !(json_number_value(t) >= 0 && json_number_value(t) <= 2))
    abort();
  json_t *mt = json_object_get(ms, "max_tokens");
  if (a->max_turns < 0 || (mt && json_integer_value(mt) < 1))
    abort();
  for (size_t k = 0; k < a->nhandoffs; k++)
    if (!a->handoff_paths[k] || !in_set(s, a->handoffs[k]))
      abort();
  for (size_t k = 0; k < a->ntools; k++)
    if (!a->tools[k].agent_path || !in_set(s, a->tools[k].agent) ||
        a->tools[k].agent == a || a->tools[k].max_turns < 0)
      abort();
  for (size_t k = 0; k < a->napprovals; k++) {
    const struct agent_approval *ap = &a->approvals[k];
    if (!ap->tool || agent_find_approval(a, ap->tool) != ap)
      abort(); /* one entry per tool */
    if ((ap->mode == AGENT_APPROVAL_PREFIXES) != (ap->nprefixes > 0))
      abort();
    for (size_t p = 0; p < ap->nprefixes; p++)
      if (!ap->prefixes[p] || !ap->prefixes[p][0])
        abort();
  }
  if (a->default_manifest) {
    struct manifest *m = NULL;
    struct sbx_error e = {0};
    if (manifest_parse(a->default_manifest, "default_manifest", &m, &e) < 0 &&
        m)
      abort();
    manifest_free(m);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dir[0])
    setup();
  put("fuzz.json", data, size);
  struct agent_set *s = &untouched;
  struct sbx_error e = {0};
  int r = agent_load(path, &s, &e);
  if (r < 0) {
    if (s != &untouched || e.msg[0] != '/')
      abort();
    return 0;
  }
  if (s->n < 1 || s->n > AGENT_MAX_AGENTS || strcmp(s->agents[0]->path, path))
    abort();
  for (size_t i = 0; i < s->n; i++)
    check_agent(s, s->agents[i], i);
  agent_set_free(s);
  return 0;
}
