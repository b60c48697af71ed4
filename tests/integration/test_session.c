/* Session state: sbx sandbox save prints a state without secrets; sbx
 * sandbox resume reconnects to the live sandbox, or restores the snapshot
 * into a new one, or says why it cannot. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/model_server.h"
#include "tests/support/otlp_receiver.h"
#include "tests/support/sbxrun.h"

static char dir[64], sdir[96], snaps[96];

static void setup(void) {
  (void)snprintf(dir, sizeof(dir), "/tmp/sbx-session-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  (void)snprintf(sdir, sizeof(sdir), "%s/state", dir);
  (void)snprintf(snaps, sizeof(snaps), "%s/snaps", dir);
}

static void sbx(struct sbx_run_out *r, const char *const *args) {
  sbx_sandbox_run(r, sdir, args);
}

static void teardown(void) {
  sbx_sandbox_remove_all(sdir);
  (void)test_rm_rf(dir);
}

TestSuite(session, .init = setup, .fini = teardown, .timeout = 120);

/* Creates a sandbox holding notes.txt and returns its id (new). */
static char *create(void) {
  const char *m = test_write_file(
      dir, "m.json",
      "{\"entries\": {\"notes.txt\": {\"type\": \"file\", \"content\": "
      "\"from the manifest\\n\"}}}");
  char mp[256];
  (void)snprintf(mp, sizeof(mp), "%s", m);
  const char *args[] = {"create", "--manifest", mp, NULL};
  char *id = sbx_sandbox_line(sdir, args);
  const char *ex[] = {"exec", id, "--", "sh", "-c", "echo changed >> notes.txt",
                      NULL};
  free(sbx_sandbox_line(sdir, ex));
  return id;
}

/* Saves ID's session state into a file; its path (new), and what sbx said
 * on stderr in *ERR (new) when ERR is not NULL. */
static char *save_err(const char *id, char **err) {
  struct sbx_run_out r;
  const char *args[] = {"save", id, "--snapshot-dir", snaps, NULL};
  sbx(&r, args);
  cr_assert_eq(r.status, 0, "%s", r.err);
  const char *p = test_write_file(dir, "state.json", r.out);
  char *path = strdup(p);
  if (err)
    *err = strdup(r.err);
  sbx_run_free(&r);
  return path;
}

static char *save(const char *id) {
  return save_err(id, NULL);
}

/* The contents of the file at PATH (new). */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "%s", path);
  char *text = NULL;
  size_t cap = 0;
  (void)getdelim(&text, &cap, '\0', f);
  fclose(f);
  cr_assert_not_null(text);
  return text;
}

/* The member names of the snapshot the session state at STATE records,
 * one a line (new). */
static char *snapshot_names(const char *state) {
  json_t *j = json_load_file(state, 0, NULL);
  cr_assert_not_null(j, "%s", state);
  const char *loc = json_string_value(
      json_object_get(json_object_get(j, "snapshot"), "location"));
  cr_assert_not_null(loc);
  char cmd[600];
  (void)snprintf(cmd, sizeof(cmd), "tar -I zstd -tf %s > %s/list.txt", loc,
                 dir);
  json_decref(j);
  cr_assert_eq(system(cmd), 0);
  char lp[160];
  (void)snprintf(lp, sizeof(lp), "%s/list.txt", dir);
  return read_text(lp);
}

Test(session, save_holds_no_secret_and_resume_reconnects) {
  char *id = create();
  char *st = save(id);
  char *text = read_text(st);
  json_t *j = json_loads(text, 0, NULL);
  cr_assert_not_null(j, "%s", text);
  cr_expect_str_eq(json_string_value(json_object_get(j, "type")), "local");
  cr_expect_eq(strlen(json_string_value(json_object_get(j, "session_id"))), 36);
  cr_expect_str_eq(json_string_value(
                       json_object_get(json_object_get(j, "snapshot"), "type")),
                   "local");
  cr_expect_eq(
      strlen(json_string_value(json_object_get(j, "snapshot_fingerprint"))),
      64);
  /* No token, no workspace path. */
  char tokpath[256];
  (void)snprintf(tokpath, sizeof(tokpath), "%s/sandboxes/%s.token", sdir, id);
  FILE *tf = fopen(tokpath, "r");
  if (tf) {
    char tok[128] = {0};
    (void)!fread(tok, 1, sizeof(tok) - 1, tf);
    fclose(tf);
    tok[strcspn(tok, "\n")] = '\0';
    cr_expect(tok[0] && !strstr(text, tok), "the token is in the state");
  }
  cr_expect(!strstr(text, "sbx-workspace-"), "a host path is in the state");
  cr_expect(!strstr(text, "token"), "%s", text);
  json_decref(j);
  free(text);

  struct sbx_run_out r;
  const char *res[] = {"resume", st, NULL};
  sbx(&r, res);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strncmp(r.out, id, strlen(id)) == 0, "same sandbox: %s", r.out);
  cr_expect(strstr(r.err, "reconnected") != NULL, "%s", r.err);
  sbx_run_free(&r);
  free(st);
  free(id);
}

/* Removes the sandbox ID and resumes its session state ST, which must
 * restore the snapshot into a new sandbox; its id (new). */
static char *remove_and_resume(const char *id, const char *st) {
  struct sbx_run_out r;
  const char *rm[] = {"rm", id, NULL};
  free(sbx_sandbox_line(sdir, rm));
  const char *res[] = {"resume", st, NULL};
  sbx(&r, res);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *nid = strndup(r.out, strcspn(r.out, "\n"));
  cr_expect_str_neq(nid, id);
  cr_expect(strstr(r.err, "restored its snapshot") != NULL, "%s", r.err);
  sbx_run_free(&r);
  return nid;
}

/* Runs the shell command CMD in sandbox ID and expects it to print WANT. */
static void expect_shell(const char *id, const char *cmd, const char *want) {
  struct sbx_run_out r;
  const char *args[] = {"exec", id, "--", "sh", "-c", cmd, NULL};
  sbx(&r, args);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, want, "%s", cmd);
  sbx_run_free(&r);
}

Test(session, resume_of_a_removed_sandbox_restores_the_snapshot) {
  char *id = create();
  char *st = save(id);
  char *nid = remove_and_resume(id, st);
  expect_shell(nid, "cat notes.txt", "from the manifest\nchanged\n");
  free(nid);
  free(st);
  free(id);
}

Test(session, resume_fails_clearly_when_neither_is_possible) {
  char *id = create();
  char *st = save(id);
  struct sbx_run_out r;
  const char *rm[] = {"rm", id, NULL};
  sbx(&r, rm);
  sbx_run_free(&r);
  cr_assert_eq(test_rm_rf(snaps), 0);
  const char *res[] = {"resume", st, NULL};
  sbx(&r, res);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "the live sandbox is gone") != NULL, "%s", r.err);
  cr_expect(strstr(r.err, "restoring the snapshot failed") != NULL, "%s",
            r.err);
  sbx_run_free(&r);
  /* A state without a snapshot says that. */
  const char *none = test_write_file(
      dir, "none.json",
      "{\"version\": 1, \"type\": \"local\", \"session_id\": "
      "\"00000000-0000-4000-8000-000000000000\", \"manifest\": {}, "
      "\"snapshot\": {\"type\": \"none\"}}");
  char np[256];
  (void)snprintf(np, sizeof(np), "%s", none);
  const char *res2[] = {"resume", np, NULL};
  sbx(&r, res2);
  cr_expect_eq(r.status, 1);
  cr_expect(strstr(r.err, "no restorable snapshot") != NULL, "%s", r.err);
  sbx_run_free(&r);
  const char *junk = test_write_file(dir, "junk.json", "[1]");
  char jp[256];
  (void)snprintf(jp, sizeof(jp), "%s", junk);
  const char *res3[] = {"resume", jp, NULL};
  sbx(&r, res3);
  cr_expect_eq(r.status, 2);
  sbx_run_free(&r);
  const char *noid[] = {"save", NULL};
  sbx(&r, noid);
  cr_expect_eq(r.status, 2);
  sbx_run_free(&r);
  free(st);
  free(id);
}

Test(session, run_with_a_session_state_uses_its_workspace) {
  char *id = create();
  char *st = save(id);
  struct sbx_run_out r;
  const char *rm[] = {"rm", id, NULL};
  sbx(&r, rm);
  sbx_run_free(&r);
  const char *a = test_write_file(dir, "a.json", "{\"name\": \"A\"}");
  char ap[256];
  (void)snprintf(ap, sizeof(ap), "%s", a);
  struct test_model_server srv;
  test_model_server_start(
      &srv,
      "[{\"tool_calls\": [{\"name\": \"exec_command\", \"call_id\": \"c\", "
      "\"arguments\": {\"cmd\": \"cat notes.txt\"}}]}, {\"text\": \"ok\"}]",
      NULL);
  const char *run[] = {"run", "--state-dir", sdir, "--session", st,
                       ap,    "read",        NULL};
  sbx_run(&r, srv.base_url, run);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  json_t *reqs = test_model_server_requests(&srv);
  test_model_server_stop(&srv);
  json_t *input = json_object_get(
      json_object_get(json_array_get(reqs, 1), "body"), "input");
  char *dump = json_dumps(input, 0);
  cr_expect(dump && strstr(dump, "from the manifest\\nchanged\\n"),
            "the restored workspace: %s", dump);
  free(dump);
  json_decref(reqs);
  free(st);
  free(id);
}

Test(session, progress_only_on_a_terminal_and_never_with_json) {
  char *id = create();
  char cmd[1024];
  (void)snprintf(cmd, sizeof(cmd),
                 "mkdir -p %s/big && head -c 33554432 /dev/urandom > "
                 "%s/big/blob",
                 dir, dir);
  cr_assert_eq(system(cmd), 0);
  char out[160];
  (void)snprintf(out, sizeof(out), "%s/tty.out", dir);
  /* On a terminal (script gives sbx one): a progress line. */
  (void)snprintf(cmd, sizeof(cmd),
                 "script -qec \"%s sandbox --state-dir %s cp %s/big %s:big\" "
                 "/dev/null > %s 2>&1",
                 test_sbx_path(), sdir, dir, id, out);
  cr_expect_eq(system(cmd), 0);
  char *text = read_text(out);
  cr_expect(text && strstr(text, "copying in: ") && strstr(text, "MiB"), "%s",
            text);
  free(text);
  /* Not a terminal, or --json: none. */
  struct sbx_run_out r;
  char src[160], dst[160];
  (void)snprintf(src, sizeof(src), "%s/big", dir);
  (void)snprintf(dst, sizeof(dst), "%s:big2", id);
  const char *cp[] = {"cp", src, dst, NULL};
  sbx(&r, cp);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(!strstr(r.err, "copying"), "%s", r.err);
  sbx_run_free(&r);
  (void)snprintf(cmd, sizeof(cmd),
                 "script -qec \"%s sandbox --state-dir %s --json cp %s/big "
                 "%s:big3\" /dev/null > %s 2>&1",
                 test_sbx_path(), sdir, dir, id, out);
  cr_expect_eq(system(cmd), 0);
  text = read_text(out);
  cr_expect(text && !strstr(text, "copying in"), "%s", text);
  free(text);
  free(id);
}

Test(session, save_is_traced_as_sandbox_snapshot) {
  char *id = create();
  struct test_otlp_receiver rcv;
  test_otlp_receiver_start(&rcv, false);
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.endpoint, 1);
  char *st = save(id);
  unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT");
  json_t *reqs = test_otlp_receiver_requests(&rcv);
  test_otlp_receiver_stop(&rcv);
  json_t *spans = test_otlp_spans(reqs);
  bool found = false;
  size_t i;
  json_t *sp;
  json_array_foreach(spans, i, sp) {
    const char *n = json_string_value(json_object_get(sp, "name"));
    if (n && strcmp(n, "sandbox.snapshot") == 0)
      found = true;
  }
  cr_expect(found, "no sandbox.snapshot span among %zu",
            json_array_size(spans));
  json_decref(spans);
  json_decref(reqs);
  free(st);
  free(id);
}

Test(session, ephemeral_entries_stay_out_of_the_snapshot) {
  const char *m = test_write_file(
      dir, "e.json",
      "{\"entries\": {\"keep.txt\": {\"type\": \"file\", \"content\": \"k\"},"
      " \"scratch.txt\": {\"type\": \"file\", \"content\": \"s\", "
      "\"ephemeral\": true}}}");
  char mp[256];
  (void)snprintf(mp, sizeof(mp), "%s", m);
  const char *args[] = {"create", "--manifest", mp, NULL};
  char *id = sbx_sandbox_line(sdir, args);
  char *st = save(id);
  char *text = snapshot_names(st);
  cr_expect(strstr(text, "keep.txt"), "%s", text);
  cr_expect(!strstr(text, "scratch.txt"), "%s", text);
  free(text);
  free(st);
  free(id);
}

Test(session, a_venv_with_an_absolute_symlink_round_trips) {
  /* Every Python venv has bin/python -> /usr/bin/python3: a snapshot keeps
   * the link as a link, and resume restores the whole workspace. */
  const char *args[] = {"create", NULL};
  char *id = sbx_sandbox_line(sdir, args);
  const char *ex[] = {"exec",
                      id,
                      "--",
                      "sh",
                      "-c",
                      "echo work > w.txt; mkdir -p venv/bin; "
                      "ln -s /usr/bin/python3 venv/bin/python",
                      NULL};
  free(sbx_sandbox_line(sdir, ex));
  char *st = save(id);
  char *nid = remove_and_resume(id, st);
  expect_shell(nid, "cat w.txt; readlink venv/bin/python",
               "work\n/usr/bin/python3\n");
  free(nid);
  free(st);
  free(id);
}

Test(session, save_refuses_a_snapshot_its_limits_could_not_restore) {
  char *id = create();
  const char *ex[] = {"exec", id, "--", "touch", "other.txt", NULL};
  free(sbx_sandbox_line(sdir, ex));
  struct sbx_run_out r;
  const char *args[] = {
      "save", id, "--snapshot-dir", snaps, "--snapshot-max-members", "1", NULL};
  sbx(&r, args);
  cr_expect_eq(r.status, 1, "%s", r.err);
  cr_expect(strstr(r.err, "more than 1 entries"), "%s", r.err);
  cr_expect_str_eq(r.out, "", "no state for a refused snapshot");
  sbx_run_free(&r);
  const char *bad[] = {"save", id, "--snapshot-max-members", "lots", NULL};
  sbx(&r, bad);
  cr_expect_eq(r.status, 2, "%s", r.err);
  sbx_run_free(&r);
  /* The restore applies the limits it is given as well. */
  char *st = save(id);
  const char *rm[] = {"rm", id, NULL};
  sbx(&r, rm);
  sbx_run_free(&r);
  const char *res[] = {"resume", st, "--snapshot-max-members", "1", NULL};
  sbx(&r, res);
  cr_expect_eq(r.status, 1, "%s", r.err);
  cr_expect(strstr(r.err, "more than 1 members"), "%s", r.err);
  sbx_run_free(&r);
  free(st);
  free(id);
}

/* The "local" object of sbx sandbox info ID (new). */
static json_t *local_info(const char *id) {
  struct sbx_run_out r;
  const char *args[] = {"--json", "info", id, NULL};
  sbx(&r, args);
  cr_assert_eq(r.status, 0, "%s", r.err);
  json_t *j = json_loads(r.out, 0, NULL);
  cr_assert_not_null(j, "%s", r.out);
  sbx_run_free(&r);
  json_t *l = json_incref(json_object_get(j, "local"));
  json_decref(j);
  cr_assert_not_null(l);
  return l;
}

Test(session, a_file_hard_linked_outside_is_left_out_and_named) {
  /* Another sandbox's token, hard-linked into this one's workspace: the
   * snapshot leaves it out, and the person saving is told which file. */
  char *id = create();
  const char *args[] = {"create", NULL};
  char *other = sbx_sandbox_line(sdir, args);
  json_t *mine = local_info(id), *theirs = local_info(other);
  const char *ws = json_string_value(json_object_get(mine, "workspace"));
  const char *tok = json_string_value(json_object_get(theirs, "token_file"));
  cr_assert(ws && tok);
  char link_path[512];
  (void)snprintf(link_path, sizeof(link_path), "%s/stolen-token", ws);
  cr_assert_eq(link(tok, link_path), 0, "link %s: %s", tok, strerror(errno));
  char *err = NULL;
  char *st = save_err(id, &err);
  cr_expect(strstr(err, "\"stolen-token\" is not in the snapshot: it has "
                        "hard links outside the workspace"),
            "%s", err);
  free(err);
  char *text = snapshot_names(st);
  cr_expect(strstr(text, "notes.txt"), "%s", text);
  cr_expect(!strstr(text, "stolen-token"), "%s", text);
  free(text);
  free(st);
  /* A copy out (an export too) leaves it out and says so. */
  char from[64], to[160];
  (void)snprintf(from, sizeof(from), "%s:.", id);
  (void)snprintf(to, sizeof(to), "%s/out", dir);
  const char *cp[] = {"cp", from, to, NULL};
  struct sbx_run_out r;
  sbx(&r, cp);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect(strstr(r.err, "\"stolen-token\" in \".\" was not copied: it has "
                          "hard links outside it"),
            "%s", r.err);
  sbx_run_free(&r);
  char copied[200];
  (void)snprintf(copied, sizeof(copied), "%s/out/notes.txt", dir);
  cr_expect_eq(access(copied, F_OK), 0, "%s was not copied", copied);
  (void)snprintf(copied, sizeof(copied), "%s/out/stolen-token", dir);
  cr_expect_neq(access(copied, F_OK), 0, "%s was copied", copied);
  json_decref(mine);
  json_decref(theirs);
  free(other);
  free(id);
}

/* Makes DIR/NAME a directory (asserted). */
static void make_dir(const char *name, char *out, size_t n) {
  (void)snprintf(out, n, "%s/%s", dir, name);
  cr_assert_eq(mkdir(out, 0755), 0, "%s", out);
}

/* A restore reads the manifest's local sources beside the sandbox's
 * manifest (or --base-dir), wherever it runs: from another directory,
 * one that even holds sources of the same names, it restores the same
 * workspace; without anything saying where they are, it refuses rather
 * than reading the current directory. */
Test(session, restores_resolve_local_sources_against_the_base_dir) {
  char proj[128], elsewhere[128], sub[160];
  make_dir("proj", proj, sizeof(proj));
  make_dir("elsewhere", elsewhere, sizeof(elsewhere));
  (void)snprintf(sub, sizeof(sub), "%s/data", proj);
  cr_assert_eq(mkdir(sub, 0755), 0);
  test_write_file(sub, "real.txt", "real data\n");
  test_write_file(proj, "secret.txt", "the real secret\n");
  (void)snprintf(sub, sizeof(sub), "%s/data", elsewhere);
  cr_assert_eq(mkdir(sub, 0755), 0);
  test_write_file(sub, "decoy.txt", "decoy\n");
  test_write_file(elsewhere, "secret.txt", "a decoy secret\n");
  char mp[256];
  (void)snprintf(
      mp, sizeof(mp), "%s",
      test_write_file(proj, "m.json",
                      "{\"entries\": {\"data\": {\"type\": \"local_dir\", "
                      "\"src\": \"data\"}, \"secret.txt\": {\"type\": "
                      "\"local_file\", \"src\": \"secret.txt\", "
                      "\"ephemeral\": true}}}"));
  /* Created from proj's parent, with the manifest's directory as base. */
  cr_assert_eq(chdir(dir), 0);
  const char *create_args[] = {"create", "--manifest", "proj/m.json", NULL};
  char *id = sbx_sandbox_line(sdir, create_args);
  char *st = save(id);
  cr_assert_eq(chdir(elsewhere), 0);

  /* The record is there (the sandbox is only stopped): its base holds. */
  const char *stop[] = {"stop", id, NULL};
  free(sbx_sandbox_line(sdir, stop));
  const char *res[] = {"resume", st, NULL};
  struct sbx_run_out r;
  sbx(&r, res);
  cr_assert_eq(r.status, 0, "%s", r.err);
  char *nid = strndup(r.out, strcspn(r.out, "\n"));
  sbx_run_free(&r);
  expect_shell(nid, "ls data", "real.txt\n");
  const char *rm_new[] = {"rm", nid, NULL};
  free(sbx_sandbox_line(sdir, rm_new));
  free(nid);

  /* The record gone, nothing says where the sources are: refused. */
  const char *rm[] = {"rm", id, NULL};
  free(sbx_sandbox_line(sdir, rm));
  sbx(&r, res);
  cr_expect_eq(r.status, 2, "%s", r.err);
  cr_expect(strstr(r.err, "give --manifest TRUSTED (sources relative to its "
                          "directory) or --base-dir DIR; the current "
                          "directory is not assumed") != NULL,
            "%s", r.err);
  sbx_run_free(&r);

  /* The trusted manifest's directory, or --base-dir: the ephemeral file,
   * which the snapshot leaves out, comes from there. */
  char rel[64];
  (void)snprintf(rel, sizeof(rel), "../proj/m.json");
  const char *trusted[] = {"resume", st, "--manifest", rel, NULL};
  const char *based[] = {"resume",     st,   "--manifest", mp,
                         "--base-dir", proj, NULL};
  const char *const *ways[] = {trusted, based};
  for (size_t i = 0; i < 2; i++) {
    sbx(&r, ways[i]);
    cr_assert_eq(r.status, 0, "%s", r.err);
    nid = strndup(r.out, strcspn(r.out, "\n"));
    sbx_run_free(&r);
    expect_shell(nid, "cat secret.txt; ls data", "the real secret\nreal.txt\n");
    free(nid);
  }
  free(st);
  free(id);
}
