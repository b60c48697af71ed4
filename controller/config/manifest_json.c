/* The persisted form of a manifest (manifest_to_json). */
#include "controller/config/manifest.h"

#include <errno.h>

json_t *manifest_to_json(const struct manifest *m) {
  json_t *j = json_pack("{s:i, s:s}", "version", m->version, "root", m->root);
  json_t *entries = json_object();
  json_t *env = json_object();
  json_t *users = json_array();
  json_t *groups = json_array();
  json_t *grants = json_array();
  if (!j || !entries || !env || !users || !groups || !grants)
    goto fail;
  for (size_t i = 0; i < m->nentries; i++) {
    const struct manifest_entry *en = &m->entries[i];
    if (en->ephemeral)
      continue;
    if (json_object_set(entries, en->path, en->json) < 0)
      goto fail;
  }
  for (size_t i = 0; i < m->nenv; i++) {
    if (m->env[i].ephemeral)
      continue;
    json_t *v = json_pack("{s:s}", "value", m->env[i].value);
    if (v && m->env[i].description)
      json_object_set_new(v, "description", json_string(m->env[i].description));
    if (!v || json_object_set_new(env, m->env[i].name, v) < 0)
      goto fail;
  }
  for (size_t i = 0; i < m->nusers; i++)
    json_array_append_new(users, json_pack("{s:s}", "name", m->users[i]));
  for (size_t i = 0; i < m->ngroups; i++) {
    json_t *us = json_array();
    for (size_t k = 0; us && k < m->groups[i].nusers; k++)
      json_array_append_new(us, json_string(m->groups[i].users[k]));
    json_array_append_new(groups, json_pack("{s:s, s:o*}", "name",
                                            m->groups[i].name, "users", us));
  }
  for (size_t i = 0; i < m->ngrants; i++) {
    const struct manifest_grant *g = &m->grants[i];
    json_t *o =
        json_pack("{s:s, s:b}", "path", g->path, "read_only", g->read_only);
    if (o && g->description)
      json_object_set_new(o, "description", json_string(g->description));
    json_array_append_new(grants, o);
  }
  json_object_set_new(j, "entries", entries);
  json_object_set_new(j, "environment", env);
  json_object_set_new(j, "users", users);
  json_object_set_new(j, "groups", groups);
  json_object_set_new(j, "extra_path_grants", grants);
  return j;
fail:
  json_decref(j);
  json_decref(entries);
  json_decref(env);
  json_decref(users);
  json_decref(groups);
  json_decref(grants);
  return NULL;
}
