/* Bearer tokens: "sbx_" ID "_" SECRET, where the store keeps the token's
 * id, name, scopes and the SHA-256 of its secret. A request's token is
 * found by its id and its secret's hash compared in constant time, so
 * neither the lookup nor the comparison tells an attacker how close a
 * guess came. A request without an Authorization header may come from
 * the web page instead, with its session cookie (session.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controller/server/server_internal.h"
#include "shared/cleanup.h"
#include "shared/hmac.h"
#include "shared/rand.h"
#include "shared/sha256.h"

#define TOKEN_ID_BYTES 6      /* 12 hex digits */
#define TOKEN_SECRET_BYTES 20 /* 40 hex digits: 160 bits */
#define TOKEN_NAME_MAX 64

static const char *const scope_names[] = {"run", "approve", "read", "admin",
                                          NULL};

bool auth_scope_in(const char *list, const char *scope) {
  size_t n = strlen(scope);
  for (const char *p = list; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if ((len == n && strncmp(p, scope, n) == 0) ||
        (len == 5 && strncmp(p, "admin", 5) == 0))
      return true;
    p = end ? end + 1 : NULL;
  }
  return false;
}

/* Checks the comma list SCOPES: known names, none twice, at least one. */
static int check_scopes(const char *scopes, struct sbx_error *e) {
  unsigned seen = 0;
  const char *p = scopes;
  do {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    size_t i = 0;
    while (scope_names[i] && (strlen(scope_names[i]) != len ||
                              strncmp(scope_names[i], p, len) != 0))
      i++;
    if (!scope_names[i] || (seen & (1u << i)))
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                           "%s scope \"%.*s\" (the scopes are %s)",
                           scope_names[i] ? "repeated" : "unknown", (int)len, p,
                           SERVER_SCOPES);
    seen |= 1u << i;
    p = end ? end + 1 : NULL;
  } while (p);
  return 0;
}

static bool name_ok(const char *name) {
  size_t n = strlen(name);
  return n > 0 && n <= TOKEN_NAME_MAX &&
         strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789._-") == n;
}

int server_token_create(struct store *s, const char *name, const char *scopes,
                        char *token, size_t n, struct sbx_error *e) {
  if (!name_ok(name))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a token's name is 1 to %d letters, digits, '.', "
                         "'_' or '-': \"%s\" is not",
                         TOKEN_NAME_MAX, name);
  int r = check_scopes(scopes, e);
  if (r < 0)
    return r;
  char id[2 * TOKEN_ID_BYTES + 1], secret[2 * TOKEN_SECRET_BYTES + 1];
  if (sbx_random_hex(id, TOKEN_ID_BYTES) < 0 ||
      sbx_random_hex(secret, TOKEN_SECRET_BYTES) < 0)
    return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot make a random token");
  uint8_t digest[SBX_SHA256_BYTES];
  char hash[SBX_SHA256_HEX];
  sbx_sha256(secret, strlen(secret), digest);
  sbx_sha256_hex(digest, hash);
  r = store_token_add(s, id, name, hash, scopes, e);
  if (r == 0 && snprintf(token, n, "sbx_%s_%s", id, secret) >= (int)n)
    r = sbx_error_set(e, SBX_INTERNAL, ENOBUFS, "token buffer too small");
  explicit_bzero(secret, sizeof(secret));
  return r;
}

int auth_lookup(struct server *srv, const char *id, struct auth_who *who,
                struct sbx_error *e) {
  _cleanup_json_ json_t *tok = NULL;
  struct sbx_error se = {0};
  int k = store_token_get(srv->store, id, &tok, &se);
  if (k == -ENOENT)
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "the token is not valid (unknown or removed)");
  if (k < 0)
    return sbx_error_set(e, SBX_UNAVAILABLE, -k, "%s", se.msg);
  const char *hash = json_string_value(json_object_get(tok, "hash"));
  const char *name = json_string_value(json_object_get(tok, "name"));
  const char *scopes = json_string_value(json_object_get(tok, "scopes"));
  if (!hash || strlen(hash) != SBX_SHA256_HEX - 1 || !name || !scopes)
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "the token is not valid (unknown or removed)");
  *who = (struct auth_who){0};
  (void)snprintf(who->id, sizeof(who->id), "%s", id);
  (void)snprintf(who->name, sizeof(who->name), "%s", name);
  (void)snprintf(who->scopes, sizeof(who->scopes), "%s", scopes);
  memcpy(who->hash, hash, SBX_SHA256_HEX);
  return 0;
}

int auth_token(struct server *srv, const char *t, struct auth_who *who,
               struct sbx_error *e) {
  size_t idn = 2 * TOKEN_ID_BYTES, sn = 2 * TOKEN_SECRET_BYTES;
  if (strlen(t) != 4 + idn + 1 + sn || strncmp(t, "sbx_", 4) != 0 ||
      t[4 + idn] != '_' || strspn(t + 4, "0123456789abcdef") != idn ||
      strspn(t + 5 + idn, "0123456789abcdef") != sn)
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "the bearer token is not an sbx token");
  char id[AUTH_ID_MAX];
  memcpy(id, t + 4, idn);
  id[idn] = '\0';
  uint8_t digest[SBX_SHA256_BYTES];
  char hash[SBX_SHA256_HEX];
  sbx_sha256(t + 5 + idn, sn, digest);
  sbx_sha256_hex(digest, hash);
  int k = auth_lookup(srv, id, who, e);
  if (k < 0 && e && e->code == SBX_UNAUTHENTICATED)
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "the bearer token is not valid (unknown or "
                         "removed)");
  if (k < 0)
    return k;
  if (!sbx_equal_ct(who->hash, hash, SBX_SHA256_HEX - 1)) {
    *who = (struct auth_who){0};
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "the bearer token is not valid (unknown or "
                         "removed)");
  }
  return 0;
}

int auth_check(struct server *srv, struct http_req *r, struct auth_who *who,
               struct sbx_error *e) {
  const char *h = http_req_header(r, "Authorization");
  if (!h) {
    /* No bearer token: the page's session cookie, if there is one. */
    int k = session_check(srv, r, who, e);
    if (k != -ENOENT)
      return k;
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "this endpoint needs \"Authorization: Bearer "
                         "TOKEN\" (make one with sbx token create)");
  }
  if (strncasecmp(h, "Bearer ", 7) != 0)
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "this endpoint needs \"Authorization: Bearer "
                         "TOKEN\" (make one with sbx token create)");
  const char *t = h + 7;
  while (*t == ' ')
    t++;
  return auth_token(srv, t, who, e);
}

void auth_refuse(struct http_req *r, const struct sbx_error *e) {
  static const struct {
    enum sbx_code code;
    unsigned status;
    const char *name;
  } answers[] = {
      {SBX_UNAVAILABLE, 503, "unavailable"},
      {SBX_PERMISSION_DENIED, 403, "forbidden"}, /* a session's CSRF token */
      {SBX_UNAUTHENTICATED, 401, "unauthenticated"}, /* the rest */
  };
  size_t n = sizeof(answers) / sizeof(answers[0]), i = 0;
  while (i < n - 1 && answers[i].code != e->code)
    i++;
  if (answers[i].status == 401)
    (void)http_add_header(r, "WWW-Authenticate", "Bearer realm=\"sbx\"");
  (void)http_reply_error(r, answers[i].status, answers[i].name, "%s", e->msg);
}
