/* The skills capability at run time, as the SDK's Skills does it
 * (sandbox/capabilities/skills.js): the "## Skills" instruction fragment
 * with the skill index (a lazy source's, read when the agent file was
 * loaded, or else the skills found under skills_path in the sandbox), and
 * the load_skill tool, which materializes one lazy skill into the
 * workspace through sandboxd. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "controller/config/manifest.h"
#include "controller/config/skills.h"
#include "controller/run/run_internal.h"
#include "controller/sandbox/materialize.h"
#include "shared/buf.h"
#include "shared/cleanup.h"
#include "shared/client.h"
#include "shared/path.h"

/* The SDK's texts, word for word. */
static const char skills_intro[] =
    "A skill is a set of local instructions to follow that is stored in a "
    "`SKILL.md` file. Below is the list of skills that can be used. Each "
    "entry includes a name, description, and file path so you can open the "
    "source for full instructions when using a specific skill.";

#define HOW_TO_COMMON                                                          \
  "- Trigger rules: If the user names a skill (with `$SkillName` or plain "    \
  "text) OR the task clearly matches a skill's description shown above, you "  \
  "must use that skill for that turn. Multiple mentions mean use them all. "   \
  "Do not carry skills across turns unless re-mentioned.\n"                    \
  "- Missing/blocked: If a named skill isn't in the list or the path can't "   \
  "be read, say so briefly and continue with the best fallback.\n"             \
  "- How to use a skill (progressive disclosure):\n"

#define HOW_TO_REST                                                            \
  "  2) If `SKILL.md` points to extra folders such as `references/`, load "    \
  "only the specific files needed for the request; don't bulk-load "           \
  "everything.\n"                                                              \
  "  3) If `scripts/` exist, prefer running or patching them instead of "      \
  "retyping large code blocks.\n"                                              \
  "  4) If `assets/` or templates exist, reuse them instead of recreating "    \
  "from scratch.\n"                                                            \
  "- Coordination and sequencing:\n"                                           \
  "  - If multiple skills apply, choose the minimal set that covers the "      \
  "request and state the order you'll use them.\n"                             \
  "  - Announce which skill(s) you're using and why (one short line). If you " \
  "skip an obvious skill, say why.\n"                                          \
  "- Context hygiene:\n"                                                       \
  "  - Keep context small: summarize long sections instead of pasting them; "  \
  "only load extra files when needed.\n"                                       \
  "  - Avoid deep reference-chasing: prefer opening only files directly "      \
  "linked from `SKILL.md` unless you're blocked.\n"                            \
  "  - When variants exist (frameworks, providers, domains), pick only the "   \
  "relevant reference file(s) and note that choice.\n"                         \
  "- Safety and fallback: If a skill can't be applied cleanly (missing "       \
  "files, unclear instructions), state the issue, pick the next-best "         \
  "approach, and continue."

static const char how_to_use[] =
    "### How to use skills\n"
    "- Discovery: The list above is the skills available in this session "
    "(name + description + file path). Skill bodies live on disk at the "
    "listed paths.\n" HOW_TO_COMMON
    "  1) After deciding to use a skill, open its `SKILL.md`. Read only "
    "enough to follow the workflow.\n" HOW_TO_REST;

static const char how_to_use_lazy[] =
    "### How to use skills\n"
    "- Discovery: The list above is the skill index available in this "
    "session (name + description + workspace path). In lazy mode, those "
    "paths are loaded on demand instead of being present up "
    "front.\n" HOW_TO_COMMON
    "  1) After deciding to use a lazy skill, call `load_skill` for that "
    "skill first, then open its `SKILL.md`.\n" HOW_TO_REST;

static const char lazy_loading[] =
    "### Lazy loading\n"
    "- These skills are indexed for planning, but they are not materialized "
    "in the workspace yet.\n"
    "- Call `load_skill` with a single skill name from the list before "
    "reading its `SKILL.md` or other files from the workspace.\n"
    "- `load_skill` stages exactly one skill under the listed path. If you "
    "need more than one skill, call it multiple times.";

static const char load_skill_description[] =
    "Load a single lazily configured skill into the sandbox so its SKILL.md, "
    "scripts, references, and assets can be read from the workspace.";

/* A workspace path REL as the model sees it: absolute under ROOT when the
 * run has a cwd (the SDK's modelResourcePath), else REL. */
static int model_path(struct sbx_buf *b, const char *root, const char *cwd,
                      const char *rel) {
  if (!cwd || !*cwd)
    return sbx_buf_append_str(b, rel);
  return sbx_buf_printf(b, "%s/%s", strcmp(root, "/") == 0 ? "" : root, rel);
}

/* The SDK sorts the list by name with localeCompare: case folded first,
 * lower case before upper case. */
static int by_name(const void *x, const void *y) {
  const struct skill_meta *a = x, *b = y;
  int r = strcasecmp(a->name, b->name);
  return r ? r : -strcmp(a->name, b->name);
}

/* The skills found in the sandbox SB under PATH (the SDK's runtime scan
 * for "from"): each child directory's SKILL.md, within the SKILLS_MAX_*
 * limits; a SKILL.md over them or not text is left out. *OUT new. */
static int scan_sandbox(struct sandbox *sb, const char *path,
                        struct skill_meta **out, size_t *n) {
  *out = NULL;
  *n = 0;
  Sbx__V1__FileList fl = SBX__V1__FILE_LIST__INIT;
  fl.path = (char *)path;
  fl.depth = 1;
  fl.limit = SKILLS_MAX_SKILLS * 4;
  Sbx__V1__Response *r = NULL;
  struct sbx_error e = {0};
  if (sbx_file_list(sb->client, &fl, &r, &e) < 0)
    return 0; /* nothing there: the discovery text */
  struct skill_meta *idx = calloc(SKILLS_MAX_SKILLS, sizeof(*idx));
  size_t k = 0;
  Sbx__V1__FileListReply *l = r->file_list;
  for (size_t i = 0; idx && i < l->n_entries && k < SKILLS_MAX_SKILLS; i++) {
    const Sbx__V1__FileInfo *fi = l->entries[i];
    if (fi->type != SBX__V1__FILE_TYPE__FILE_TYPE_DIRECTORY ||
        strchr(fi->path, '/'))
      continue;
    char p[SBX_PATH_MAX + 16];
    (void)snprintf(p, sizeof(p), "%s/%s/SKILL.md", path, fi->path);
    Sbx__V1__FileRead rd = SBX__V1__FILE_READ__INIT;
    rd.path = p;
    rd.length = SKILLS_MAX_SKILL_MD + 1;
    Sbx__V1__Response *fr = NULL;
    struct sbx_error re = {0};
    if (sbx_file_read(sb->client, &rd, &fr, &re) < 0)
      continue;
    char err[128];
    int rc = skills_meta_from_md((const char *)fr->file_read->data.data,
                                 fr->file_read->data.len, fi->path, &idx[k],
                                 err, sizeof(err));
    sbx_client_reply_free(fr);
    if (rc == -ENOMEM) {
      skills_index_free(idx, k);
      idx = NULL;
    } else if (rc == 0) {
      k++;
    }
  }
  sbx_client_reply_free(r);
  if (!idx)
    return -ENOMEM;
  *out = idx;
  *n = k;
  return 0;
}

/* The "## Skills" fragment from the N skills of INDEX. */
static int render_index(struct sbx_buf *b, const struct agent_skills *s,
                        struct skill_meta *index, size_t n, const char *root,
                        const char *cwd) {
  bool lazy = s->lazy_src != NULL;
  _cleanup_free_ struct skill_meta *sorted = calloc(n + 1, sizeof(*sorted));
  if (!sorted)
    return -ENOMEM;
  memcpy(sorted, index, n * sizeof(*sorted));
  qsort(sorted, n, sizeof(*sorted), by_name);
  int r = sbx_buf_printf(b, "## Skills\n%s\n\n### Available skills\n",
                         skills_intro);
  for (size_t i = 0; r == 0 && i < n; i++) {
    char rel[SBX_PATH_MAX + 300];
    (void)snprintf(rel, sizeof(rel), "%s/%s", s->skills_path, sorted[i].dir);
    r = sbx_buf_printf(b, "%s- %s: %s (file: ", i ? "\n" : "", sorted[i].name,
                       sorted[i].description);
    if (r == 0)
      r = model_path(b, root, cwd, rel);
    if (r == 0)
      r = sbx_buf_append_str(b, ")");
  }
  if (r == 0 && lazy)
    r = sbx_buf_printf(b, "\n\n%s", lazy_loading);
  if (r == 0)
    r = sbx_buf_printf(b, "\n\n%s", lazy ? how_to_use_lazy : how_to_use);
  return r;
}

int run_skills_fragment(const struct agent *a, struct agent_state *st,
                        const char *cwd, char **out) {
  *out = NULL;
  const struct agent_skills *s = a->skills;
  if (!s)
    return 0;
  const char *root = st->sb ? st->sb->root : "/workspace";
  struct skill_meta *found = NULL;
  size_t nfound = 0;
  if (!s->lazy_src && st->sb) {
    int r = scan_sandbox(st->sb, s->skills_path, &found, &nfound);
    if (r < 0)
      return r;
  }
  _cleanup_buf_ struct sbx_buf b;
  sbx_buf_init(&b, 4u << 20);
  int r;
  if (s->lazy_src) {
    if (s->nindex == 0)
      return 0; /* the SDK's null fragment */
    r = render_index(&b, s, s->index, s->nindex, root, cwd);
  } else if (nfound) {
    r = render_index(&b, s, found, nfound, root, cwd);
  } else {
    r = sbx_buf_printf(&b,
                       "## Skills\n%s\n\n### Skill source\n- Skills are "
                       "materialized under ",
                       skills_intro);
    if (r == 0)
      r = model_path(&b, root, cwd, s->skills_path);
    if (r == 0)
      r = sbx_buf_printf(&b,
                         ". Discover available skills by inspecting "
                         "child directories and their SKILL.md files at "
                         "runtime.\n\n%s",
                         how_to_use);
  }
  skills_index_free(found, nfound);
  if (r < 0)
    return r;
  *out = sbx_buf_steal(&b, NULL);
  return *out ? 0 : -ENOMEM;
}

json_t *run_skills_tool_json(void) {
  return json_pack(
      "{s:s, s:s, s:s, s:{s:s, s:{s:{s:s, s:i, s:s}}, s:[s], "
      "s:b}, s:b}",
      "type", "function", "name", "load_skill", "description",
      load_skill_description, "parameters", "type", "object", "properties",
      "skill_name", "type", "string", "minLength", 1, "description",
      "Name of the lazily configured skill to materialize.", "required",
      "skill_name", "additionalProperties", 0, "strict", 1);
}

/* The one skill of S's index that SKILL_NAME names: by its name, its
 * directory or that directory's base name. NULL with *WHY set. */
static const struct skill_meta *match(const struct agent_skills *s,
                                      const char *name, const char **why) {
  const struct skill_meta *m = NULL;
  size_t n = 0;
  for (size_t i = 0; i < s->nindex; i++) {
    const struct skill_meta *x = &s->index[i];
    const char *base = strrchr(x->dir, '/');
    base = base ? base + 1 : x->dir;
    if (strcmp(x->name, name) == 0 || strcmp(x->dir, name) == 0 ||
        strcmp(base, name) == 0) {
      m = x;
      n++;
    }
  }
  *why = n == 0 ? "lazy skill not found" : "lazy skill name is ambiguous";
  return n == 1 ? m : NULL;
}

/* A failed call: the SDK's generic text for the model, WHY for the
 * events and traces. */
static json_t *load_failed(struct tool_ctx *tc, const char *why,
                           const char *name) {
  (void)sbx_error_set(&tc->failure, SBX_INVALID_ARGUMENT, EINVAL, "%s: %s", why,
                      name);
  return json_string(tools_generic_error);
}

/* Materializes the lazy skill M at DEST in ST's sandbox, owned by RUN_AS
 * when there is one. */
static int materialize_skill(const struct agent_skills *s,
                             const struct skill_meta *m, const char *dest,
                             struct agent_state *st,
                             const struct run_options *o, const char *run_as,
                             struct sbx_error *e) {
  char src[SBX_PATH_MAX + 300];
  (void)snprintf(src, sizeof(src), "%s/%s", s->lazy_src, m->dir);
  _cleanup_json_ json_t *mj = json_pack("{s:{s:{s:s, s:s}}}", "entries", dest,
                                        "type", "local_dir", "src", src);
  struct manifest *man = NULL;
  int r = mj ? manifest_parse(mj, "load_skill", &man, e) : -ENOMEM;
  if (r < 0)
    return r;
  struct materialize_options mo = o->materialize;
  mo.base_dir = s->lazy_src;
  mo.progress = false;
  /* The skills directory, made for RUN_AS as the SDK's materializeEntry
   * under runAs makes it, when it is not there yet. */
  bool there = false;
  r = sbx_file_exists(st->sb->client, s->skills_path, &there, NULL, e);
  if (r == 0 && !there) {
    r = sbx_file_mkdir(st->sb->client, s->skills_path, true, 0755, e);
    if (r == 0 && run_as)
      r = sbx_file_chown(st->sb->client, s->skills_path, run_as, "", false, e);
  }
  if (r == 0)
    r = materialize_manifest(st->sb, man, &mo, e);
  manifest_free(man);
  if (r == 0 && run_as)
    r = sbx_file_chown(st->sb->client, dest, run_as, "", true, e);
  return r;
}

int run_load_skill(struct run *run, const struct agent *a, const char *args,
                   json_t **out, struct tool_ctx *tc) {
  const struct agent_skills *s = a->skills;
  struct agent_state *st = &run->states[a->index];
  const struct run_options *o = run->sh->o;
  _cleanup_json_ json_t *j = json_loads(args ? args : "", 0, NULL);
  const char *name = json_string_value(json_object_get(j, "skill_name"));
  if (!json_is_object(j) || !name || !*name || json_object_size(j) != 1) {
    *out = load_failed(tc, "invalid load_skill arguments", args ? args : "");
    return *out ? 0 : -ENOMEM;
  }
  const char *why = NULL;
  const struct skill_meta *m = match(s, name, &why);
  if (!m) {
    *out = load_failed(tc, why, name);
    return *out ? 0 : -ENOMEM;
  }
  char dest[SBX_PATH_MAX + 300], md[SBX_PATH_MAX + 320];
  (void)snprintf(dest, sizeof(dest), "%s/%s", s->skills_path, m->dir);
  (void)snprintf(md, sizeof(md), "%s/SKILL.md", dest);
  bool exists = false;
  struct sbx_error e = {0};
  int r = sbx_file_exists(st->sb->client, md, &exists, NULL, &e);
  if (r == 0 && !exists)
    r = materialize_skill(s, m, dest, st, o, a->run_as, &e);
  if (r < 0) {
    tc->failure = e;
    *out = json_string(tools_generic_error);
    return *out ? 0 : -ENOMEM;
  }
  _cleanup_buf_ struct sbx_buf p;
  sbx_buf_init(&p, SBX_PATH_MAX * 2);
  _cleanup_free_ char *path = NULL;
  if (model_path(&p, st->sb->root, o->cwd, dest) < 0 ||
      !(path = sbx_buf_steal(&p, NULL)))
    return -ENOMEM;
  _cleanup_json_ json_t *res = json_pack("{s:s, s:s, s:s}", "status",
                                         exists ? "already_loaded" : "loaded",
                                         "skill_name", m->name, "path", path);
  char *text = res ? json_dumps(res, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  *out = text ? json_string(text) : NULL;
  free(text);
  return *out ? 0 : -ENOMEM;
}
