/* The toolbox: one sandbox session's tool state, the table of exec
 * sessions still running (the model's session ids for sandboxd's exec ids),
 * kept across calls, saved for a pause and loaded on resume. The table is
 * locked here; nothing else touches it. */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "controller/tools/tools_internal.h"
#include "shared/cleanup.h"
#include "shared/clock.h"
#include "shared/log.h"

void toolbox_init(struct toolbox *t, struct sandbox *sb, const char *cwd,
                  const char *run_as, bool text_images) {
  memset(t, 0, sizeof(*t));
  t->sb = sb;
  t->cwd = cwd && *cwd ? cwd : NULL;
  t->run_as = run_as && *run_as ? run_as : NULL;
  t->text_images = text_images;
  t->next_id = 1;
  pthread_mutex_init(&t->mu, NULL);
}

void toolbox_fini(struct toolbox *t) {
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->nsessions; i++) {
    struct sbx_error e = {0};
    (void)sbx_exec_signal(t->sb->client, t->sessions[i].exec_id, SIGKILL, true,
                          &e);
  }
  t->nsessions = 0;
  pthread_mutex_unlock(&t->mu);
  pthread_mutex_destroy(&t->mu);
}

void toolbox_detach(struct toolbox *t) {
  pthread_mutex_lock(&t->mu);
  t->nsessions = 0;
  pthread_mutex_unlock(&t->mu);
  pthread_mutex_destroy(&t->mu);
}

json_t *toolbox_save(struct toolbox *t) {
  _cleanup_json_ json_t *arr = json_array();
  if (!arr)
    return NULL;
  int r = 0;
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; r == 0 && i < t->nsessions; i++) {
    const struct tool_exec_session *s = &t->sessions[i];
    r = json_array_append_new(
        arr, json_pack("{s:i, s:I, s:I, s:b}", "id", s->id, "exec_id",
                       (json_int_t)s->exec_id, "offset", (json_int_t)s->offset,
                       "tty", s->tty));
  }
  int next = t->next_id;
  pthread_mutex_unlock(&t->mu);
  if (r < 0)
    return NULL;
  return json_pack("{s:i, s:O}", "next_id", next, "sessions", arr);
}

void toolbox_load(struct toolbox *t, json_t *j) {
  pthread_mutex_lock(&t->mu);
  json_t *n = json_object_get(j, "next_id");
  if (json_is_integer(n) && json_integer_value(n) > 0 &&
      json_integer_value(n) < 1000000)
    t->next_id = (int)json_integer_value(n);
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(j, "sessions"), i, x) {
    if (t->nsessions == TOOLS_MAX_EXEC_SESSIONS)
      break;
    json_t *id = json_object_get(x, "id"), *ex = json_object_get(x, "exec_id"),
           *off = json_object_get(x, "offset");
    if (!json_is_integer(id) || !json_is_integer(ex) || !json_is_integer(off))
      continue;
    struct tool_exec_session *s = &t->sessions[t->nsessions++];
    s->id = (int)json_integer_value(id);
    s->exec_id = (uint64_t)json_integer_value(ex);
    s->offset = (uint64_t)json_integer_value(off);
    s->tty = json_is_true(json_object_get(x, "tty"));
    s->last_used = sbx_now_ns();
  }
  pthread_mutex_unlock(&t->mu);
}

/* Remembers a running process; prunes the least recently used when full. */
int tools_session_add(struct toolbox *t, uint64_t exec_id, uint64_t offset,
                      bool tty) {
  pthread_mutex_lock(&t->mu);
  if (t->nsessions == TOOLS_MAX_EXEC_SESSIONS) {
    size_t lru = 0;
    for (size_t i = 1; i < t->nsessions; i++)
      if (t->sessions[i].last_used < t->sessions[lru].last_used)
        lru = i;
    struct sbx_error e = {0};
    log_warn("too many running sessions; killing session %d",
             t->sessions[lru].id);
    (void)sbx_exec_signal(t->sb->client, t->sessions[lru].exec_id, SIGKILL,
                          true, &e);
    t->sessions[lru] = t->sessions[--t->nsessions];
  }
  struct tool_exec_session *s = &t->sessions[t->nsessions++];
  s->id = t->next_id++;
  s->exec_id = exec_id;
  s->offset = offset;
  s->tty = tty;
  s->last_used = sbx_now_ns();
  int id = s->id;
  pthread_mutex_unlock(&t->mu);
  return id;
}

bool tools_session_get(struct toolbox *t, int64_t id,
                       struct tool_exec_session *out) {
  bool found = false;
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->nsessions; i++)
    if (t->sessions[i].id == id) {
      found = true;
      t->sessions[i].last_used = sbx_now_ns();
      *out = t->sessions[i];
    }
  pthread_mutex_unlock(&t->mu);
  return found;
}

void tools_session_update(struct toolbox *t, int64_t id, uint64_t offset,
                          bool exited) {
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->nsessions; i++)
    if (t->sessions[i].id == id) {
      if (exited)
        t->sessions[i] = t->sessions[--t->nsessions];
      else
        t->sessions[i].offset = offset;
      break;
    }
  pthread_mutex_unlock(&t->mu);
}
