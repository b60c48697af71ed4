/* A SKILL.md's front matter read as the SDK reads it: each case's
 * expected name and description are what the JS SDK's
 * parseSkillFrontmatter returns for it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/skills.h"

static const struct {
  const char *md;
  const char *name;        /* NULL: absent */
  const char *description; /* NULL: absent */
} cases[] = {
    {"---\nname: pdf\ndescription: Reads PDFs.\n---\nbody", "pdf",
     "Reads PDFs."},
    {"---\nname: \"quoted: name\"\ndescription: 'single'\n---\n",
     "quoted: name", "single"},
    {"---\r\nname: crlf\r\ndescription: a\r\n  wrapped\r\n  value\r\n---\r\n",
     "crlf", "a wrapped value"},
    {"---\nname: fold\ndescription: >\n  one\n  two\n\n  three\n---\n", "fold",
     "one two\nthree"},
    {"---\nname: lit\ndescription: |\n  line one\n    indented\n  line "
     "three\n---\n",
     "lit", "line one\n  indented\nline three"},
    {"---\nname: cmt\n# a comment\ndescription: plain # not a comment\n  # "
     "skipped\n  more\n---\n",
     "cmt", "plain # not a comment more"},
    {"---\nmeta:\n  name: nested\n  description: nested too\nname: root\n---\n",
     "root", NULL},
    {"---\nname: noend\n", NULL, NULL},
    {"name: nofront\n", NULL, NULL},
    {"---\ndescription: >2-\n    kept\n   x\n---\n", NULL, "kept\n x"},
    {"  ---\n  name: indented\n  ---\n", "indented", NULL},
    {"---\nname:\ndescription: \"unterminated\n---\n", "", "\"unterminated"},
};

Test(skills_frontmatter, reads_as_the_sdk) {
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *name = NULL, *desc = NULL;
    cr_assert_eq(
        skills_frontmatter(cases[i].md, strlen(cases[i].md), &name, &desc), 0);
    if (cases[i].name)
      cr_expect_str_eq(name ? name : "(absent)", cases[i].name, "case %zu", i);
    else
      cr_expect_null(name, "case %zu: %s", i, name);
    if (cases[i].description)
      cr_expect_str_eq(desc ? desc : "(absent)", cases[i].description,
                       "case %zu", i);
    else
      cr_expect_null(desc, "case %zu: %s", i, desc);
    free(name);
    free(desc);
  }
}

Test(skills_frontmatter, index_entry_defaults_and_limits) {
  struct skill_meta m;
  char err[128];
  cr_assert_eq(
      skills_meta_from_md("no front matter", 15, "pdf", &m, err, sizeof(err)),
      0);
  cr_expect_str_eq(m.name, "pdf");
  cr_expect_str_eq(m.description, "No description provided.");
  cr_expect_str_eq(m.dir, "pdf");
  free(m.name), free(m.description), free(m.dir);
  cr_expect_eq(skills_meta_from_md("a\0b", 3, "x", &m, err, sizeof(err)),
               -EINVAL);
  cr_expect_str_eq(err, "is not UTF-8 text");
  static const char two_lines[] = "---\nname: |\n  a\n  b\n---\n";
  cr_expect_eq(skills_meta_from_md(two_lines, strlen(two_lines), "x", &m, err,
                                   sizeof(err)),
               -EINVAL);
  cr_expect_str_eq(err, "has a name over several lines");
  size_t big = SKILLS_MAX_SKILL_MD + 1;
  char *text = calloc(1, big + 1);
  cr_assert_not_null(text);
  memset(text, 'x', big);
  cr_expect_eq(skills_meta_from_md(text, big, "x", &m, err, sizeof(err)),
               -EFBIG);
  free(text);
}
