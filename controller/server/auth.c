/* Bearer tokens: "sbx_" ID "_" SECRET, where the store keeps the token's
 * id, name, scopes and the SHA-256 of its secret. A request's token is
 * found by its id and its secret's hash compared in constant time, so
 * neither the lookup nor the comparison tells an attacker how close a
 * guess came. */
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

int auth_check(struct server *srv, struct http_req *r, char *name,
               size_t name_n, char *scopes, size_t scopes_n,
               struct sbx_error *e) {
  const char *h = http_req_header(r, "Authorization");
  if (!h || strncasecmp(h, "Bearer ", 7) != 0)
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "this endpoint needs \"Authorization: Bearer "
                         "TOKEN\" (make one with sbx token create)");
  const char *t = h + 7;
  while (*t == ' ')
    t++;
  size_t idn = 2 * TOKEN_ID_BYTES, sn = 2 * TOKEN_SECRET_BYTES;
  if (strlen(t) != 4 + idn + 1 + sn || strncmp(t, "sbx_", 4) != 0 ||
      t[4 + idn] != '_' || strspn(t + 4, "0123456789abcdef") != idn ||
      strspn(t + 5 + idn, "0123456789abcdef") != sn)
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "the bearer token is not an sbx token");
  char id[2 * TOKEN_ID_BYTES + 1];
  memcpy(id, t + 4, idn);
  id[idn] = '\0';
  uint8_t digest[SBX_SHA256_BYTES];
  char hash[SBX_SHA256_HEX];
  sbx_sha256(t + 5 + idn, sn, digest);
  sbx_sha256_hex(digest, hash);
  _cleanup_json_ json_t *tok = NULL;
  struct sbx_error se = {0};
  int k = store_token_get(srv->store, id, &tok, &se);
  if (k == -ENOENT)
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "the bearer token is not valid (unknown or "
                         "removed)");
  if (k < 0)
    return sbx_error_set(e, SBX_UNAVAILABLE, -k, "%s", se.msg);
  const char *want = json_string_value(json_object_get(tok, "hash"));
  if (!want || strlen(want) != strlen(hash) ||
      !sbx_equal_ct(want, hash, strlen(hash)))
    return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                         "the bearer token is not valid (unknown or "
                         "removed)");
  (void)snprintf(name, name_n, "%s",
                 json_string_value(json_object_get(tok, "name")));
  (void)snprintf(scopes, scopes_n, "%s",
                 json_string_value(json_object_get(tok, "scopes")));
  return 0;
}
