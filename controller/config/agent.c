#include "controller/config/agent.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "controller/config/agent_internal.h"
#include "controller/config/skills.h"
#include "shared/cleanup.h"

static int failv(const struct agent_ctx *c, enum sbx_code code, int err,
                 const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static int failv(const struct agent_ctx *c, enum sbx_code code, int err,
                 const char *fmt, va_list ap) {
  char msg[SBX_ERROR_MSG_MAX];
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
  return sbx_error_set(c->e, code, err, "%s: %s", c->path, msg);
}

/* Fails with a message about the file: "<path>: <message>". */
int agent_fail(const struct agent_ctx *c, enum sbx_code code, int err,
               const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = failv(c, code, err, fmt, ap);
  va_end(ap);
  return r;
}

/* A bad key or value: -EINVAL. */
int agent_invalid(const struct agent_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int r = failv(c, SBX_INVALID_ARGUMENT, EINVAL, fmt, ap);
  va_end(ap);
  return r;
}

int agent_nomem(const struct agent_ctx *c) {
  return agent_fail(c, SBX_LIMIT_EXCEEDED, ENOMEM, "out of memory");
}

const struct agent_approval *agent_find_approval(const struct agent *a,
                                                 const char *tool) {
  for (size_t i = 0; i < a->napprovals; i++)
    if (strcmp(a->approvals[i].tool, tool) == 0)
      return &a->approvals[i];
  return NULL;
}

const struct agent_command *agent_find_command(const struct agent *a,
                                               const char *name) {
  for (size_t i = 0; i < a->ncommands; i++)
    if (strcmp(a->commands[i].name, name) == 0)
      return &a->commands[i];
  return NULL;
}

static void agent_free(struct agent *a) {
  if (!a)
    return;
  free(a->path);
  free(a->name);
  free(a->model);
  free(a->instructions);
  free(a->base_instructions);
  json_decref(a->default_manifest);
  skills_free(a->skills);
  agent_memory_free(a->memory);
  free(a->run_as);
  json_decref(a->model_settings);
  free(a->api_key_env);
  json_decref(a->output_type);
  json_decref(a->prompt);
  for (size_t i = 0; i < a->nhandoffs; i++)
    free(a->handoff_paths[i]);
  free(a->handoff_paths);
  free(a->handoffs);
  for (size_t i = 0; i < a->ntools; i++) {
    free(a->tools[i].agent_path);
    free(a->tools[i].name);
    free(a->tools[i].description);
  }
  free(a->tools);
  agent_host_tools_free(a);
  agent_guardrails_free(a);
  free(a->base_url);
  free(a->run_backend);
  json_decref(a->run_options);
  for (size_t i = 0; i < a->napprovals; i++) {
    free(a->approvals[i].tool);
    for (size_t j = 0; j < a->approvals[i].nprefixes; j++)
      free(a->approvals[i].prefixes[j]);
    free(a->approvals[i].prefixes);
  }
  free(a->approvals);
  free(a);
}

struct agent_set *agent_set_free(struct agent_set *s) {
  if (!s)
    return NULL;
  for (size_t i = 0; i < s->n; i++)
    agent_free(s->agents[i]);
  free(s);
  return NULL;
}

/* REL relative to the directory of the file BASE (new string). */
static char *resolve_path(const char *base, const char *rel) {
  if (rel[0] == '/')
    return strdup(rel);
  const char *slash = strrchr(base, '/');
  size_t dlen = slash ? (size_t)(slash - base) + 1 : 0;
  size_t rlen = strlen(rel);
  char *p = malloc(dlen + rlen + 1);
  if (!p)
    return NULL;
  memcpy(p, base, dlen);
  memcpy(p + dlen, rel, rlen + 1);
  return p;
}

/* Reads the regular file FD of SIZE bytes into *OUT (new), refusing more than
 * AGENT_MAX_FILE_BYTES even if it grows meanwhile. */
static int read_file(const struct agent_ctx *c, int fd, off_t size, char **out,
                     size_t *len) {
  size_t cap = (size_t)size + 1;
  if (cap > AGENT_MAX_FILE_BYTES + 1)
    cap = AGENT_MAX_FILE_BYTES + 1;
  _cleanup_free_ char *buf = malloc(cap);
  size_t n = 0;
  if (!buf)
    return agent_nomem(c);
  for (;;) {
    if (n == cap) {
      if (cap > AGENT_MAX_FILE_BYTES)
        return agent_fail(c, SBX_LIMIT_EXCEEDED, EFBIG,
                          "file is larger than %u bytes", AGENT_MAX_FILE_BYTES);
      size_t ncap = cap * 2 > AGENT_MAX_FILE_BYTES + 1
                        ? AGENT_MAX_FILE_BYTES + 1
                        : cap * 2;
      char *nb = realloc(buf, ncap);
      if (!nb)
        return agent_nomem(c);
      buf = nb;
      cap = ncap;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      int err = errno;
      return agent_fail(c, SBX_OK, err, "cannot read: %s", strerror(err));
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  *out = TAKE_PTR(buf);
  *len = n;
  return 0;
}

struct loader {
  struct agent_set *set;
  struct sbx_error *e;
};

static int load_file(struct loader *L, const char *path, const char *from,
                     unsigned depth, struct agent **out);

/* Loads the files that A names, then checks its handoffs are distinct. */
static int load_references(struct loader *L, const struct agent_ctx *c,
                           struct agent *a, unsigned depth) {
  char from[KEY_MAX + 64];

  for (size_t i = 0; i < a->nhandoffs; i++) {
    _cleanup_free_ char *p = resolve_path(a->path, a->handoff_paths[i]);
    if (!p)
      return agent_nomem(c);
    (void)snprintf(from, sizeof(from), "\"handoffs[%zu]\" of %.128s", i,
                   a->path);
    int r = load_file(L, p, from, depth + 1, &a->handoffs[i]);
    if (r < 0)
      return r;
    for (size_t j = 0; j < i; j++)
      if (a->handoffs[j] == a->handoffs[i])
        return agent_invalid(c,
                             "\"handoffs[%zu]\" is the same agent file as "
                             "\"handoffs[%zu]\"",
                             i, j);
  }
  for (size_t i = 0; i < a->ntools; i++) {
    _cleanup_free_ char *p = resolve_path(a->path, a->tools[i].agent_path);
    if (!p)
      return agent_nomem(c);
    (void)snprintf(from, sizeof(from), "\"tools[%zu].agent\" of %.128s", i,
                   a->path);
    int r = load_file(L, p, from, depth + 1, &a->tools[i].agent);
    if (r < 0)
      return r;
  }
  for (size_t i = 0; i < a->ninput_guardrails + a->noutput_guardrails; i++) {
    bool in = i < a->ninput_guardrails;
    struct agent_guardrail *g =
        in ? &a->input_guardrails[i]
           : &a->output_guardrails[i - a->ninput_guardrails];
    if (!g->agent_path)
      continue;
    _cleanup_free_ char *p = resolve_path(a->path, g->agent_path);
    if (!p)
      return agent_nomem(c);
    (void)snprintf(from, sizeof(from), "\"%s[%zu].agent\" of %.128s",
                   in ? "input_guardrails" : "output_guardrails",
                   in ? i : i - a->ninput_guardrails, a->path);
    int r = load_file(L, p, from, depth + 1, &g->agent);
    if (r < 0)
      return r;
  }
  return 0;
}

/* The guard agent of A's guardrail I (input ones first), or NULL for a
 * command. */
static const struct agent *guard_agent(const struct agent *a, size_t i) {
  return i < a->ninput_guardrails
             ? a->input_guardrails[i].agent
             : a->output_guardrails[i - a->ninput_guardrails].agent;
}

/* Loads PATH (named by FROM, for messages; NULL for the first file) unless a
 * file with its identity is already in the set, and everything it names.
 * *OUT is borrowed from the set. */
static int load_file(struct loader *L, const char *path, const char *from,
                     unsigned depth, struct agent **out) {
  struct agent_ctx c = {.path = path, .e = L->e};
  struct stat st;
  char via[KEY_MAX + 80] = "";

  if (from)
    (void)snprintf(via, sizeof(via), " (%s)", from);
  _cleanup_close_ int fd =
      open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    int err = errno;
    return agent_fail(&c, SBX_OK, err, "cannot open%s: %s", via, strerror(err));
  }
  if (fstat(fd, &st) < 0) {
    int err = errno;
    return agent_fail(&c, SBX_OK, err, "cannot stat%s: %s", via, strerror(err));
  }
  if (!S_ISREG(st.st_mode))
    return agent_invalid(&c, "not a regular file%s", via);
  for (size_t i = 0; i < L->set->n; i++) {
    if (L->set->agents[i]->dev == st.st_dev &&
        L->set->agents[i]->ino == st.st_ino) {
      *out = L->set->agents[i];
      return 0;
    }
  }
  if (st.st_size > (off_t)AGENT_MAX_FILE_BYTES)
    return agent_fail(&c, SBX_LIMIT_EXCEEDED, EFBIG,
                      "file is larger than %u bytes", AGENT_MAX_FILE_BYTES);
  if (depth > AGENT_MAX_DEPTH)
    return agent_fail(&c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "agent files nested more than %d deep%s", AGENT_MAX_DEPTH,
                      via);
  if (L->set->n >= AGENT_MAX_AGENTS)
    return agent_fail(&c, SBX_LIMIT_EXCEEDED, E2BIG,
                      "more than %d agent files in one set%s", AGENT_MAX_AGENTS,
                      via);

  _cleanup_free_ char *text = NULL;
  size_t len = 0;
  int r = read_file(&c, fd, st.st_size, &text, &len);
  if (r < 0)
    return r;
  json_error_t jerr;
  _cleanup_json_ json_t *root =
      json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return sbx_error_set(L->e, SBX_INVALID_ARGUMENT, EINVAL, "%s:%d:%d: %s",
                         path, jerr.line, jerr.column, jerr.text);

  struct agent *a = calloc(1, sizeof(*a));
  if (!a)
    return agent_nomem(&c);
  a->path = strdup(path);
  if (!a->path) {
    free(a);
    return agent_nomem(&c);
  }
  a->index = L->set->n;
  a->dev = st.st_dev;
  a->ino = st.st_ino;
  /* In the set before its references load, so a cycle finds it. */
  L->set->agents[L->set->n++] = a;
  (void)close(TAKE_FD(fd));

  r = agent_parse(&c, a, root);
  if (r < 0)
    return r;
  r = load_references(L, &c, a, depth);
  if (r < 0)
    return r;
  *out = a;
  return 0;
}

/* True when TO can be reached from FROM through handoffs and tools. */
static bool reaches(const struct agent *from, const struct agent *to) {
  bool seen[AGENT_MAX_AGENTS] = {false};
  const struct agent *stack[AGENT_MAX_AGENTS];
  size_t n = 0;

  stack[n++] = from;
  seen[from->index] = true;
  while (n > 0) {
    const struct agent *a = stack[--n];
    if (a == to)
      return true;
    size_t ng = a->ninput_guardrails + a->noutput_guardrails;
    for (size_t i = 0; i < a->nhandoffs + a->ntools + ng; i++) {
      const struct agent *b =
          i < a->nhandoffs ? a->handoffs[i]
          : i < a->nhandoffs + a->ntools
              ? a->tools[i - a->nhandoffs].agent
              : guard_agent(a, i - a->nhandoffs - a->ntools);
      if (b && !seen[b->index]) {
        seen[b->index] = true;
        stack[n++] = b;
      }
    }
  }
  return false;
}

/* Refuses a cycle through an agent_as_tool reference: each call of such a
 * tool starts a nested run, so the cycle would nest runs without end. */
static int check_tool_cycles(const struct agent_set *s, struct sbx_error *e) {
  for (size_t i = 0; i < s->n; i++) {
    const struct agent *a = s->agents[i];
    for (size_t j = 0; j < a->ntools; j++) {
      if (reaches(a->tools[j].agent, a)) {
        struct agent_ctx c = {.path = a->path, .e = e};
        return agent_invalid(&c,
                             "\"tools[%zu].agent\" (%.128s) leads back to this "
                             "agent: agents used as tools may not form a cycle",
                             j, a->tools[j].agent->path);
      }
    }
    for (size_t j = 0; j < a->ninput_guardrails + a->noutput_guardrails; j++) {
      const struct agent *g = guard_agent(a, j);
      if (g && reaches(g, a)) {
        struct agent_ctx c = {.path = a->path, .e = e};
        return agent_invalid(&c,
                             "the guard agent %.128s leads back to this "
                             "agent: guard agents may not form a cycle",
                             g->path);
      }
    }
  }
  return 0;
}

/* Whether A has capability C. */
static bool has_cap(const struct agent *a, enum agent_capability c) {
  for (size_t i = 0; i < a->ncapabilities; i++)
    if (a->capabilities[i] == c)
      return true;
  return false;
}

/* Whether A works in a sandbox (the runner gives it one): it has the
 * filesystem or shell capability, or a manifest. */
static bool works_in_sandbox(const struct agent *a) {
  return has_cap(a, AGENT_CAP_FILESYSTEM) || has_cap(a, AGENT_CAP_SHELL) ||
         a->default_manifest;
}

/* The agent of the nested run in the sandbox of its caller, or one it
 * hands off to, that has a default_manifest, which would not apply there;
 * NULL for none. */
static const struct agent *nested_manifest(const struct agent *start) {
  bool seen[AGENT_MAX_AGENTS] = {false};
  const struct agent *stack[AGENT_MAX_AGENTS];
  size_t n = 0;
  stack[n++] = start;
  seen[start->index] = true;
  while (n > 0) {
    const struct agent *a = stack[--n];
    if (a->default_manifest || (a->skills && a->skills->from))
      return a;
    for (size_t i = 0; i < a->nhandoffs; i++)
      if (!seen[a->handoffs[i]->index]) {
        seen[a->handoffs[i]->index] = true;
        stack[n++] = a->handoffs[i];
      }
  }
  return NULL;
}

/* Checks each agent_as_tool entry whose run_config says "sandbox":
 * "parent": its caller has a sandbox to share, the agent it uses works in
 * a sandbox, and no agent of that nested run brings a manifest of its
 * own. */
static int check_parent_sandboxes(const struct agent_set *s,
                                  struct sbx_error *e) {
  for (size_t i = 0; i < s->n; i++) {
    const struct agent *a = s->agents[i];
    struct agent_ctx c = {.path = a->path, .e = e};
    for (size_t j = 0; j < a->ntools; j++) {
      const struct agent_tool *t = &a->tools[j];
      if (!t->parent_sandbox)
        continue;
      if (!works_in_sandbox(a))
        return agent_invalid(&c,
                             "\"tools[%zu].run_config.sandbox\" is "
                             "\"parent\", but agent \"%s\" has no sandbox "
                             "to share: give it the \"filesystem\" or "
                             "\"shell\" capability or a default_manifest",
                             j, a->name);
      if (!has_cap(t->agent, AGENT_CAP_FILESYSTEM) &&
          !has_cap(t->agent, AGENT_CAP_SHELL))
        return agent_invalid(&c,
                             "\"tools[%zu].run_config.sandbox\" is "
                             "\"parent\", but agent \"%s\" (%.128s) has "
                             "neither the \"filesystem\" nor the \"shell\" "
                             "capability: it would not use the sandbox",
                             j, t->agent->name, t->agent->path);
      const struct agent *m = nested_manifest(t->agent);
      if (m)
        return agent_invalid(
            &c,
            "\"tools[%zu].run_config.sandbox\" is "
            "\"parent\": agent \"%s\" (%.128s) works in "
            "the sandbox of agent \"%s\", where its "
            "%s would not apply; list what it "
            "needs in the default_manifest of \"%s\"",
            j, m->name, m->path, a->name,
            m->default_manifest ? "default_manifest" : "skills from", a->name);
    }
  }
  return 0;
}

/* Checks that each guard agent gives a verdict: its output_type has a
 * boolean "tripwire_triggered" (the runner refuses an answer without
 * one). */
static int check_guard_agents(const struct agent_set *s, struct sbx_error *e) {
  for (size_t i = 0; i < s->n; i++) {
    const struct agent *a = s->agents[i];
    for (size_t j = 0; j < a->ninput_guardrails + a->noutput_guardrails; j++) {
      const struct agent *g = guard_agent(a, j);
      if (!g)
        continue;
      json_t *t = json_object_get(json_object_get(g->output_type, "properties"),
                                  "tripwire_triggered");
      const char *type = json_string_value(json_object_get(t, "type"));
      if (type && strcmp(type, "boolean") == 0)
        continue;
      struct agent_ctx c = {.path = a->path, .e = e};
      bool in = j < a->ninput_guardrails;
      return agent_invalid(&c,
                           "\"%s[%zu].agent\": the guard agent %.128s must "
                           "have an output_type with a boolean "
                           "\"tripwire_triggered\" property (and optionally "
                           "\"output_info\")",
                           in ? "input_guardrails" : "output_guardrails",
                           in ? j : j - a->ninput_guardrails, g->path);
    }
  }
  return 0;
}

/* Refuses "max_turns" on an agent reached only by handoff: a run's turn
 * limit is that of the agent that starts it (the first file, an agent
 * used as a tool, a guard agent), so it would do nothing. */
static int check_handoff_max_turns(const struct agent_set *s,
                                   struct sbx_error *e) {
  bool starts[AGENT_MAX_AGENTS] = {false};
  starts[0] = true;
  for (size_t i = 0; i < s->n; i++) {
    const struct agent *a = s->agents[i];
    for (size_t j = 0; j < a->ntools; j++)
      starts[a->tools[j].agent->index] = true;
    for (size_t j = 0; j < a->ninput_guardrails + a->noutput_guardrails; j++)
      if (guard_agent(a, j))
        starts[guard_agent(a, j)->index] = true;
  }
  for (size_t i = 0; i < s->n; i++) {
    const struct agent *a = s->agents[i];
    if (starts[i] || a->max_turns == 0)
      continue;
    struct agent_ctx c = {.path = a->path, .e = e};
    return agent_invalid(&c,
                         "\"max_turns\" would do nothing: agent \"%s\" is "
                         "reached only by handoff here, and a run's turn "
                         "limit is that of the agent that starts it (%s)",
                         a->name, s->agents[0]->path);
  }
  return 0;
}

int agent_load(const char *path, struct agent_set **out, struct sbx_error *e) {
  struct agent_set *s = calloc(1, sizeof(*s));
  struct loader L = {.set = s, .e = e};
  struct agent *root = NULL;

  if (!s)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, ENOMEM, "%s: out of memory",
                         path);
  int r = load_file(&L, path, NULL, 0, &root);
  if (r == 0)
    r = check_tool_cycles(s, e);
  if (r == 0)
    r = check_parent_sandboxes(s, e);
  if (r == 0)
    r = check_guard_agents(s, e);
  if (r == 0)
    r = check_handoff_max_turns(s, e);
  if (r < 0) {
    agent_set_free(s);
    return r;
  }
  *out = s;
  return 0;
}
