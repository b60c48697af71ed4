/* The web page's sessions over real HTTP to the real sbx serve: a login
 * that fails sets no cookie, the cookie's flags, forged, expired and
 * borrowed cookies refused, the CSRF header required of a session's
 * POSTs (and not of a bearer token's), a removed token's session ended, a
 * session kept across a restart, and the page and its files served. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shared/hmac.h"
#include "shared/sha256.h"
#include "tests/support/certs.h"
#include "tests/support/model_server.h"
#include "tests/support/sbxrun.h"
#include "tests/support/server.h"

static struct test_model_server ms;
static struct test_server srv;
static char certs[64];

static void stop_all(void) {
  test_server_fini(&srv);
  test_model_server_stop(&ms);
  if (certs[0] && !getenv("SBX_TEST_KEEP"))
    (void)test_rm_rf(certs);
}

TestSuite(server_ui, .fini = stop_all, .timeout = 120);

static void start(const char *const *extra) {
  test_model_server_start(&ms, "[]", NULL);
  test_server_init(&srv, NULL, ms.base_url);
  test_server_start(&srv, extra);
}

/* A session of TOKEN: its cookie value (new) and, when CSRF, its CSRF
 * token (65 bytes). */
static char *login(const char *token, char *csrf) {
  char body[256];
  (void)snprintf(body, sizeof(body), "{\"token\": \"%s\"}", token);
  struct test_http h;
  test_http(&h, &srv, "POST", "/ui/login", NULL, body, NULL);
  cr_assert_eq(h.status, 200, "%s", h.body);
  char *set = test_http_header(&h, "Set-Cookie");
  cr_assert_not_null(set);
  cr_assert(strncmp(set, "sbx_session=", 12) == 0, "%s", set);
  char *value = strndup(set + 12, strcspn(set + 12, ";"));
  if (csrf)
    (void)snprintf(csrf, 65, "%s",
                   json_string_value(json_object_get(h.json, "csrf")));
  free(set);
  test_http_free(&h);
  return value;
}

/* METHOD PATH with the cookie VALUE and, when CSRF, that header. */
static void with_cookie(struct test_http *h, const char *method,
                        const char *path, const char *value, const char *csrf,
                        const char *body) {
  char cookie[256], x[128];
  (void)snprintf(cookie, sizeof(cookie), "Cookie: sbx_session=%s", value);
  (void)snprintf(x, sizeof(x), "X-CSRF-Token: %s", csrf ? csrf : "");
  const char *headers[] = {cookie, csrf ? x : NULL, NULL};
  test_http(h, &srv, method, path, NULL, body, headers);
}

/* The status of METHOD PATH with the cookie VALUE and CSRF (or none). */
static long status_with(const char *method, const char *path, const char *value,
                        const char *csrf) {
  struct test_http h;
  with_cookie(&h, method, path, value, csrf, NULL);
  long s = h.status;
  test_http_free(&h);
  return s;
}

Test(server_ui, a_login_with_a_bad_token_sets_no_cookie) {
  start(NULL);
  const char *bad[] = {
      "{\"token\": "
      "\"sbx_000000000000_0000000000000000000000000000000000000000\"}",
      "{\"token\": \"nope\"}",
  };
  for (size_t i = 0; i < 2; i++) {
    struct test_http h;
    test_http(&h, &srv, "POST", "/ui/login", NULL, bad[i], NULL);
    cr_expect_eq(h.status, 401, "%s", h.body);
    char *set = test_http_header(&h, "Set-Cookie");
    cr_expect_null(set, "%s", set);
    free(set);
    test_http_free(&h);
  }
  /* A real token id with a wrong secret. */
  char bad_secret[128], body[256];
  (void)snprintf(bad_secret, sizeof(bad_secret), "%s", srv.token);
  char *end = bad_secret + strlen(bad_secret) - 1;
  *end = *end == '0' ? '1' : '0';
  (void)snprintf(body, sizeof(body), "{\"token\": \"%s\"}", bad_secret);
  struct test_http h;
  test_http(&h, &srv, "POST", "/ui/login", NULL, body, NULL);
  cr_expect_eq(h.status, 401, "%s", h.body);
  cr_expect(!strstr(h.headers, "Set-Cookie"), "%s", h.headers);
  test_http_free(&h);
  /* Not a login at all. */
  const char *malformed[] = {"{}", "[]", "{\"token\": \"x\", \"more\": 1}",
                             "not json"};
  for (size_t i = 0; i < 4; i++) {
    test_http(&h, &srv, "POST", "/ui/login", NULL, malformed[i], NULL);
    cr_expect_eq(h.status, 400, "%s: %s", malformed[i], h.body);
    test_http_free(&h);
  }
  /* A page of another site may not log a browser in. */
  (void)snprintf(body, sizeof(body), "{\"token\": \"%s\"}", srv.token);
  const char *evil[] = {"Origin: http://evil.example", NULL};
  test_http(&h, &srv, "POST", "/ui/login", NULL, body, evil);
  cr_expect_eq(h.status, 403, "%s", h.body);
  cr_expect(!strstr(h.headers, "Set-Cookie"), "%s", h.headers);
  test_http_free(&h);
  /* Without a session, the page's session is 401 and the API too. */
  test_http(&h, &srv, "GET", "/ui/session", NULL, NULL, NULL);
  cr_expect_eq(h.status, 401, "%s", h.body);
  test_http_free(&h);
}

Test(server_ui, the_cookie_is_httponly_strict_and_bounded) {
  start(NULL);
  char *ops = test_server_token(&srv, "ops", "read,run");
  char body[256], origin[128];
  (void)snprintf(body, sizeof(body), "{\"token\": \"%s\"}", ops);
  (void)snprintf(origin, sizeof(origin), "Origin: %s", srv.url);
  const char *same[] = {origin, NULL};
  struct test_http h;
  test_http(&h, &srv, "POST", "/ui/login", NULL, body, same);
  cr_assert_eq(h.status, 200, "%s", h.body);
  char *set = test_http_header(&h, "Set-Cookie");
  cr_assert_not_null(set);
  cr_expect(strstr(set, "; HttpOnly"), "%s", set);
  cr_expect(strstr(set, "; SameSite=Strict"), "%s", set);
  cr_expect(strstr(set, "; Path=/"), "%s", set);
  cr_expect(strstr(set, "; Max-Age=43200"), "%s", set);
  cr_expect(!strstr(set, "Secure"), "plain HTTP: %s", set);
  free(set);
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "name")), "ops");
  json_t *scopes = json_object_get(h.json, "scopes");
  cr_expect_eq(json_array_size(scopes), 2);
  cr_expect_str_eq(json_string_value(json_array_get(scopes, 1)), "run");
  cr_expect_eq(strlen(json_string_value(json_object_get(h.json, "csrf"))), 64);
  test_http_free(&h);
  /* The form of a page without script is sent back to the page. */
  char form[256];
  (void)snprintf(form, sizeof(form), "token=%s", ops);
  test_http_bytes(&h, &srv, "POST", "/ui/login", NULL, form, strlen(form),
                  "application/x-www-form-urlencoded", NULL);
  cr_expect_eq(h.status, 303, "%s", h.body);
  char *loc = test_http_header(&h, "Location");
  cr_expect_str_eq(loc ? loc : "", "/");
  free(loc);
  cr_expect(strstr(h.headers, "sbx_session="), "%s", h.headers);
  test_http_free(&h);
  /* The session is the token's: its name and scopes. */
  char csrf[65];
  char *value = login(ops, csrf);
  struct test_http s;
  with_cookie(&s, "GET", "/ui/session", value, NULL, NULL);
  cr_expect_eq(s.status, 200, "%s", s.body);
  cr_expect_str_eq(json_string_value(json_object_get(s.json, "csrf")), csrf);
  test_http_free(&s);
  free(value);
  free(ops);
}

Test(server_ui, the_cookie_is_secure_under_tls) {
  cr_assert_eq(test_make_certs(certs, sizeof(certs)), 0,
               "openssl could not make test certificates");
  char crt[128], key[128];
  (void)snprintf(crt, sizeof(crt), "%s/server.crt", certs);
  (void)snprintf(key, sizeof(key), "%s/server.key", certs);
  const char *tls[] = {"--tls-cert", crt, "--tls-key", key, NULL};
  start(tls);
  (void)snprintf(srv.tls_ca, sizeof(srv.tls_ca), "%s/ca.crt", certs);
  char body[256];
  (void)snprintf(body, sizeof(body), "{\"token\": \"%s\"}", srv.token);
  struct test_http h;
  test_http(&h, &srv, "POST", "/ui/login", NULL, body, NULL);
  cr_assert_eq(h.status, 200, "%s", h.body);
  char *set = test_http_header(&h, "Set-Cookie");
  cr_expect(set && strstr(set, "; Secure"), "%s", set ? set : "(none)");
  free(set);
  test_http_free(&h);
}

/* The cookie a server would make for TOKEN ("sbx_ID_SECRET") ending at
 * EXPIRES, made here from what the store keeps (the secret's hash). */
static char *cookie_for(const char *token, long long expires) {
  const char *id = token + 4, *secret = token + 17;
  uint8_t d[SBX_SHA256_BYTES], key[32], mac[32];
  char hash[SBX_SHA256_HEX], hex[SBX_SHA256_HEX], msg[96];
  sbx_sha256(secret, strlen(secret), d);
  sbx_sha256_hex(d, hash);
  static const char label[] = "sbx web session v1";
  sbx_hmac_sha256(hash, strlen(hash), label, sizeof(label) - 1, key);
  int n = snprintf(msg, sizeof(msg), "session\n%.12s\n%lld", id, expires);
  sbx_hmac_sha256(key, sizeof(key), msg, (size_t)n, mac);
  sbx_sha256_hex(mac, hex);
  char *out = NULL;
  cr_assert_geq(asprintf(&out, "%.12s.%lld.%s", id, expires, hex), 0);
  return out;
}

Test(server_ui, forged_expired_and_borrowed_cookies_are_refused) {
  start(NULL);
  char *other = test_server_token(&srv, "other", "read");
  char *value = login(srv.token, NULL);
  cr_expect_eq(status_with("GET", "/v1/runs", value, NULL), 200);
  /* The test makes cookies as the server does: one that is still valid
   * is accepted, so the refusals below are for what they change. */
  long long now = (long long)time(NULL);
  char *made = cookie_for(srv.token, now + 3600);
  cr_expect_eq(status_with("GET", "/v1/runs", made, NULL), 200);
  free(made);
  /* A MAC changed in one digit. */
  char *forged = strdup(value);
  char *last = forged + strlen(forged) - 1;
  *last = *last == '0' ? '1' : '0';
  cr_expect_eq(status_with("GET", "/v1/runs", forged, NULL), 401);
  cr_expect_eq(status_with("GET", "/ui/session", forged, NULL), 401);
  free(forged);
  /* Another expiry under the old MAC. */
  char *longer = strdup(value);
  char *digit = strrchr(longer, '.') - 1;
  *digit = *digit == '9' ? '8' : (char)(*digit + 1);
  cr_expect_eq(status_with("GET", "/v1/runs", longer, NULL), 401);
  free(longer);
  /* Expired, and valid for longer than a session lasts. */
  char *old = cookie_for(srv.token, now - 5);
  cr_expect_eq(status_with("GET", "/v1/runs", old, NULL), 401);
  struct test_http h;
  with_cookie(&h, "GET", "/v1/runs", old, NULL, NULL);
  cr_expect(strstr(h.body, "expired"), "%s", h.body);
  test_http_free(&h);
  free(old);
  char *far = cookie_for(srv.token, now + 86400 * 365);
  cr_expect_eq(status_with("GET", "/v1/runs", far, NULL), 401);
  free(far);
  /* Another token's id under this session's MAC. */
  char *borrowed = strdup(value);
  memcpy(borrowed, other + 4, 12);
  cr_expect_eq(status_with("GET", "/v1/runs", borrowed, NULL), 401);
  free(borrowed);
  const char *junk[] = {"", "x", "..", "000000000000.1.00", value + 1};
  for (size_t i = 0; i < 5; i++)
    cr_expect_eq(status_with("GET", "/v1/runs", junk[i], NULL), 401, "%s",
                 junk[i]);
  /* A bearer token is taken as before, whatever the cookie. */
  const char *cookie[] = {"Cookie: sbx_session=junk", NULL};
  test_http(&h, &srv, "GET", "/v1/runs", srv.token, NULL, cookie);
  cr_expect_eq(h.status, 200, "%s", h.body);
  test_http_free(&h);
  free(value);
  free(other);
}

Test(server_ui, a_session_s_posts_need_its_csrf_token) {
  start(NULL);
  char *ops = test_server_token(&srv, "ops", "read,run");
  char *reader = test_server_token(&srv, "reader", "read");
  char csrf[65], other_csrf[65], reader_csrf[65];
  char *value = login(ops, csrf);
  char *admin = login(srv.token, other_csrf);
  char *rs = login(reader, reader_csrf);
  const char *del = "/v1/sandboxes/000000000000";
  cr_expect_eq(status_with("DELETE", del, value, NULL), 403);
  cr_expect_eq(status_with("DELETE", del, value, "0"), 403);
  cr_expect_eq(status_with("DELETE", del, value, other_csrf), 403);
  char wrong[65];
  (void)snprintf(wrong, sizeof(wrong), "%s", csrf);
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  cr_expect_eq(status_with("DELETE", del, value, wrong), 403);
  cr_expect_eq(status_with("DELETE", del, value, csrf), 404);
  struct test_http h;
  with_cookie(&h, "POST", "/v1/runs/run_0/cancel", value, NULL, NULL);
  cr_expect_eq(h.status, 403, "%s", h.body);
  cr_expect(strstr(h.body, "X-CSRF-Token"), "%s", h.body);
  test_http_free(&h);
  const char *run = "{\"agent\": {\"name\": \"A\", \"model\": \"m1\"}, "
                    "\"input\": \"x\"}";
  with_cookie(&h, "POST", "/v1/runs", value, NULL, run);
  cr_expect_eq(h.status, 403, "%s", h.body);
  test_http_free(&h);
  with_cookie(&h, "POST", "/v1/runs", value, csrf, run);
  cr_expect_eq(h.status, 201, "%s", h.body);
  test_http_free(&h);
  /* The session has its token's scopes, no more. */
  with_cookie(&h, "POST", "/v1/runs", rs, reader_csrf, run);
  cr_expect_eq(h.status, 403, "%s", h.body);
  cr_expect(strstr(h.body, "scope"), "%s", h.body);
  test_http_free(&h);
  cr_expect_eq(status_with("GET", "/v1/runs", rs, NULL), 200);
  /* A bearer token needs no CSRF header. */
  test_http(&h, &srv, "DELETE", del, srv.token, NULL, NULL);
  cr_expect_eq(h.status, 404, "%s", h.body);
  test_http_free(&h);
  /* Logging out needs it too; then the cookie is removed. */
  cr_expect_eq(status_with("POST", "/ui/logout", value, NULL), 403);
  with_cookie(&h, "POST", "/ui/logout", value, csrf, NULL);
  cr_expect_eq(h.status, 204, "%s", h.body);
  char *set = test_http_header(&h, "Set-Cookie");
  cr_expect(set && strstr(set, "sbx_session=;") && strstr(set, "Max-Age=0"),
            "%s", set ? set : "(none)");
  free(set);
  test_http_free(&h);
  free(value);
  free(admin);
  free(rs);
  free(ops);
  free(reader);
}

Test(server_ui, a_removed_token_s_session_ends) {
  start(NULL);
  char *ops = test_server_token(&srv, "ops", "read,run");
  char *value = login(ops, NULL);
  cr_expect_eq(status_with("GET", "/v1/runs", value, NULL), 200);
  struct sbx_run_out r;
  const char *rm[] = {"token", "rm",          "ops",     "--db",
                      srv.db,  "--state-dir", srv.state, NULL};
  sbx_run(&r, NULL, rm);
  cr_expect_eq(r.status, 0, "%s", r.err);
  sbx_run_free(&r);
  cr_expect_eq(status_with("GET", "/v1/runs", value, NULL), 401);
  cr_expect_eq(status_with("GET", "/ui/session", value, NULL), 401);
  /* A token made again under the same name is another token. */
  char *again = test_server_token(&srv, "ops", "read,run");
  cr_expect_eq(status_with("GET", "/v1/runs", value, NULL), 401);
  free(again);
  free(value);
  free(ops);
}

Test(server_ui, a_session_outlives_a_server_restart) {
  start(NULL);
  char csrf[65];
  char *value = login(srv.token, csrf);
  cr_expect_eq(status_with("GET", "/v1/runs", value, NULL), 200);
  test_server_kill(&srv, SIGTERM);
  test_server_start(&srv, NULL);
  struct test_http h;
  with_cookie(&h, "GET", "/ui/session", value, NULL, NULL);
  cr_expect_eq(h.status, 200, "%s", h.body);
  cr_expect_str_eq(json_string_value(json_object_get(h.json, "csrf")), csrf);
  test_http_free(&h);
  cr_expect_eq(status_with("GET", "/v1/runs", value, NULL), 200);
  cr_expect_eq(status_with("DELETE", "/v1/sandboxes/000000000000", value, csrf),
               404);
  free(value);
}

Test(server_ui, the_page_and_its_files_are_served) {
  start(NULL);
  const struct {
    const char *path, *ctype, *needle;
  } files[] = {
      {"/", "text/html", "/ui/app.js"},
      {"/ui/app.js", "text/javascript", "X-CSRF-Token"},
      {"/ui/app.css", "text/css", "@media"},
  };
  for (size_t i = 0; i < 3; i++) {
    struct test_http h;
    test_http(&h, &srv, "GET", files[i].path, NULL, NULL, NULL);
    cr_expect_eq(h.status, 200, "%s", files[i].path);
    char *ct = test_http_header(&h, "Content-Type");
    cr_expect(ct && strncmp(ct, files[i].ctype, strlen(files[i].ctype)) == 0,
              "%s: %s", files[i].path, ct ? ct : "(none)");
    free(ct);
    char *csp = test_http_header(&h, "Content-Security-Policy");
    cr_expect(csp && strstr(csp, "default-src 'none'") &&
                  strstr(csp, "frame-ancestors 'none'"),
              "%s", csp ? csp : "(none)");
    free(csp);
    cr_expect(strstr(h.body, files[i].needle), "%s", files[i].path);
    /* Nothing of the page comes from elsewhere. */
    cr_expect(!strstr(h.body, "http://") && !strstr(h.body, "https://"),
              "%s names another origin", files[i].path);
    test_http_free(&h);
  }
}
