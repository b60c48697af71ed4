/* The skills capability of an agent file, as the Python SDK's
 * Skills(from_=..., lazy_from=..., skills_path=".agents") is spelled there:
 *
 *   {"type": "skills", "from": SOURCE} or
 *   {"type": "skills", "lazy_from": {"type": "local_dir", "src": DIR}}
 *   with "skills_path"?: a relative path, default ".agents"
 *
 * SOURCE is a manifest entry: {"type": "local_dir", "src"} or
 * {"type": "git_repo", "repo" | "url", "ref"?, "subpath"?}; it becomes the
 * manifest entry at skills_path. A local src is resolved against the agent
 * file's directory. A lazy source is indexed when the file is loaded: each
 * child directory's SKILL.md front matter (name, description) as the SDK
 * reads it (symbolic links skipped, sorted by directory name), within the
 * SKILLS_MAX_* limits.
 *
 * The bare string "skills" is the SDK's Skills() without a source, which
 * the SDK refuses; so does sbx, with the SDK's message. Inline "skills"
 * lists and every other key are refused by name. */
#ifndef SBX_SKILLS_H
#define SBX_SKILLS_H

#include <jansson.h>
#include <stddef.h>

#define SKILLS_MAX_SKILLS 256             /* skills in one source */
#define SKILLS_MAX_SKILL_MD (256u << 10)  /* one SKILL.md */
#define SKILLS_MAX_NAME 256               /* a skill's name, in bytes */
#define SKILLS_MAX_DESCRIPTION (4u << 10) /* a skill's description */
#define SKILLS_DEFAULT_DESCRIPTION "No description provided."

/* One skill of an index. */
struct skill_meta {
  char *name;
  char *description;
  char *dir; /* its directory's name in the source */
};

struct agent_skills {
  char *skills_path; /* normalized, relative */
  json_t *from;      /* the manifest entry (owned; local src absolute), or
                        NULL */
  char *lazy_src;    /* the lazy source's absolute host directory, or NULL */
  struct skill_meta *index; /* the lazy source's, sorted by dir */
  size_t nindex;
};

/* Frees S; accepts NULL; returns NULL. */
struct agent_skills *skills_free(struct agent_skills *s);

static inline void skills_freep(struct agent_skills **s) {
  (void)skills_free(*s);
}

/* Frees the N entries of INDEX and INDEX. */
void skills_index_free(struct skill_meta *index, size_t n);

/* Reads the front matter of the skill file MD (LEN bytes) as the SDK's
 * parseSkillFrontmatter does: *NAME and *DESCRIPTION are new strings, or
 * NULL when the key is absent. 0, or -ENOMEM. */
int skills_frontmatter(const char *md, size_t len, char **name,
                       char **description);

/* The index entry (*OUT, new strings) of the skill in directory DIR whose
 * SKILL.md is MD (LEN bytes): the front matter's name and description, or
 * DIR and SKILLS_DEFAULT_DESCRIPTION. A SKILL.md over SKILLS_MAX_SKILL_MD
 * (-EFBIG), not UTF-8 text, or with a name or description over the limits
 * or a name over several lines (-EINVAL) is refused; ERR (ERRSZ bytes)
 * then says why, to follow the file's name. */
int skills_meta_from_md(const char *md, size_t len, const char *dir,
                        struct skill_meta *out, char *err, size_t errsz);

#endif
