/* libFuzzer target for the manifest parser (controller/config/manifest*.c):
 * the input is a JSON document, parsed as `sbx sandbox create --manifest`
 * and agent files' default_manifest are.
 *
 * A manifest that parses must survive what sbx does with it later: its
 * persisted form (manifest_to_json, kept in the sandbox's record) parses
 * again into the same persisted form, as an attach reparses it; the
 * manifest it came from may be applied to that live sandbox again
 * (manifest_delta), adding only what was not persisted; and its tree for
 * the instructions stays within the size asked. A refused one leaves no
 * manifest and says why. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "controller/config/manifest.h"
#include "shared/cleanup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DESCRIBE_MAX_CHARS 2000

/* Whether P, an entry's path, is relative, not empty and without "..". */
static bool path_ok(const char *p) {
  if (!p[0] || p[0] == '/' || strchr(p, '\\'))
    return false;
  for (const char *s = p;;) {
    size_t n = strcspn(s, "/");
    if (n == 0 || (n == 2 && s[0] == '.' && s[1] == '.'))
      return false;
    if (!s[n])
      return true;
    s += n + 1;
  }
}

/* Checks what the parser promises of M's fields. */
static void check_fields(const struct manifest *m) {
  if (!m->root || m->root[0] != '/' || m->version != 1)
    abort();
  for (size_t i = 0; i < m->nentries; i++) {
    const struct manifest_entry *en = &m->entries[i];
    if (!en->path || !path_ok(en->path) || !en->type_name || !en->json)
      abort();
    if (en->type == MANIFEST_FILE && !en->content && en->content_len)
      abort();
    for (size_t k = 0; k < i; k++)
      if (strcmp(m->entries[k].path, en->path) == 0)
        abort(); /* no path twice */
  }
  for (size_t i = 0; i < m->ngrants; i++)
    if (!m->grants[i].path || m->grants[i].path[0] != '/' ||
        strcmp(m->grants[i].path, "/") == 0)
      abort();
}

/* Whether M holds an ephemeral mount: never persisted, such an entry is
 * added again on every attach, and a live sandbox takes no new mounts. */
static bool has_ephemeral_mount(const struct manifest *m) {
  for (size_t i = 0; i < m->nentries; i++)
    if (m->entries[i].ephemeral && (m->entries[i].type == MANIFEST_MOUNT ||
                                    m->entries[i].type == MANIFEST_CLOUD_MOUNT))
      return true;
  return false;
}

/* The persisted form of M reparsed (as an attach does), checked against
 * M. */
static void check_persisted(const struct manifest *m) {
  _cleanup_json_ json_t *j1 = manifest_to_json(m);
  if (!j1)
    abort();
  struct manifest *m2 = NULL;
  struct sbx_error e = {0};
  if (manifest_parse(j1, "persisted", &m2, &e) < 0)
    abort(); /* a persisted manifest must parse again */
  _cleanup_json_ json_t *j2 = manifest_to_json(m2);
  if (!j2 || !json_equal(j1, j2))
    abort();
  size_t *added = NULL, nadded = 0;
  int r = manifest_delta(m2, m, &added, &nadded, &e);
  if (r < 0 && !has_ephemeral_mount(m))
    abort(); /* the same manifest again fits its own live sandbox */
  for (size_t i = 0; r == 0 && i < nadded; i++)
    if (added[i] >= m->nentries || !m->entries[added[i]].ephemeral)
      abort(); /* only what was not persisted is added */
  free(added);
  manifest_free(m2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t jerr;
  _cleanup_json_ json_t *j =
      json_loadb((const char *)data, size,
                 JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  if (!j)
    return 0;
  struct manifest *m = NULL;
  struct sbx_error e = {0};
  int r = manifest_parse(j, "fuzz.json", &m, &e);
  if (r < 0) {
    if (m || (r != -ENOMEM && !e.msg[0]))
      abort();
    return 0;
  }
  check_fields(m);
  check_persisted(m);
  char *tree = manifest_describe(m, m->root, 3, 40, DESCRIBE_MAX_CHARS);
  size_t tlen = tree ? strlen(tree) : 0;
  if (!tree || (tlen > DESCRIBE_MAX_CHARS && tlen != strlen(m->root)))
    abort(); /* within the size asked, unless the root alone is longer */
  free(tree);
  if (manifest_add_user(m, "fuzzer") < 0)
    abort();
  manifest_free(m);
  return 0;
}
