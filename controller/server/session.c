/* The web page's sessions. POST /ui/login turns a token into the cookie
 * sbx_session = "ID.EXPIRES.MAC": the token's id, the session's end (unix
 * seconds), and an HMAC-SHA256 of both under a key derived from the
 * token's stored hash. Nothing is stored, so every server of one store
 * checks it, a restart keeps it, and removing the token (sbx token rm)
 * ends it: its hash is gone. Logging out drops the cookie from the
 * browser; a copy of it stays valid until it expires, as a copied token
 * stays valid until it is removed.
 *
 * The cookie is HttpOnly and SameSite=Strict. A request it authorizes
 * that is not a GET or HEAD must also carry X-CSRF-Token, another HMAC
 * of the session under the same key, which only a page of this origin can
 * have read (GET /ui/session); a request with a bearer token needs none. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "controller/server/server_internal.h"
#include "shared/cleanup.h"
#include "shared/hmac.h"
#include "shared/sha256.h"

#define COOKIE "sbx_session"
#define SESSION_MAX_AGE_S (12 * 60 * 60)
#define EXPIRES_DIGITS_MAX 12
#define TOKEN_TEXT_MAX 128
#define LOGIN_BODY_MAX 4096
#define HEX "0123456789abcdef"

/* The hex MAC of WHAT ("session", "csrf") for the session of token ID
 * (whose stored hash is HASH) ending at EXPIRES. */
static void session_mac(const char *hash, const char *what, const char *id,
                        int64_t expires, char out[SBX_SHA256_HEX]) {
  static const char label[] = "sbx web session v1";
  uint8_t key[SBX_HMAC_SHA256_BYTES], mac[SBX_HMAC_SHA256_BYTES];
  sbx_hmac_sha256(hash, strlen(hash), label, sizeof(label) - 1, key);
  char msg[96];
  int n =
      snprintf(msg, sizeof(msg), "%s\n%s\n%lld", what, id, (long long)expires);
  sbx_hmac_sha256(key, sizeof(key), msg, (size_t)n, mac);
  explicit_bzero(key, sizeof(key));
  sbx_sha256_hex(mac, out);
}

/* Splits the cookie value C into its id, expiry and MAC: 0, or -EINVAL
 * for anything but "12 hex digits.digits.64 hex digits". */
static int cookie_parse(const char *c, char id[AUTH_ID_MAX], int64_t *expires,
                        char mac[SBX_SHA256_HEX]) {
  size_t idn = AUTH_ID_MAX - 1, macn = SBX_SHA256_HEX - 1;
  if (strspn(c, HEX) != idn || c[idn] != '.')
    return -EINVAL;
  const char *x = c + idn + 1;
  size_t xn = strspn(x, "0123456789");
  if (xn == 0 || xn > EXPIRES_DIGITS_MAX || x[xn] != '.')
    return -EINVAL;
  const char *m = x + xn + 1;
  if (strspn(m, HEX) != macn || m[macn] != '\0')
    return -EINVAL;
  memcpy(id, c, idn);
  id[idn] = '\0';
  *expires = strtoll(x, NULL, 10);
  memcpy(mac, m, macn);
  mac[macn] = '\0';
  return 0;
}

static int expired(struct sbx_error *e, const char *why) {
  return sbx_error_set(e, SBX_UNAUTHENTICATED, EACCES,
                       "the session %s: log in again", why);
}

static bool safe_method(const struct http_req *r) {
  const char *m = http_req_method(r);
  return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

int session_check(struct server *srv, struct http_req *r, struct auth_who *who,
                  struct sbx_error *e) {
  const char *c = http_req_cookie(r, COOKIE);
  if (!c || !*c)
    return -ENOENT;
  char id[AUTH_ID_MAX], mac[SBX_SHA256_HEX];
  int64_t exp = 0, now = store_now_ms() / 1000;
  if (cookie_parse(c, id, &exp, mac) < 0)
    return expired(e, "cookie is not valid");
  if (exp <= now || exp > now + SESSION_MAX_AGE_S + 60)
    return expired(e, "has expired");
  int k = auth_lookup(srv, id, who, e);
  if (k < 0 && e && e->code == SBX_UNAUTHENTICATED)
    return expired(e, "token is not valid (unknown or removed)");
  if (k < 0)
    return k;
  char want[SBX_SHA256_HEX];
  session_mac(who->hash, "session", id, exp, want);
  if (!sbx_equal_ct(want, mac, SBX_SHA256_HEX - 1)) {
    *who = (struct auth_who){0};
    return expired(e, "cookie is not valid");
  }
  who->session = true;
  who->expires = exp;
  session_mac(who->hash, "csrf", id, exp, who->csrf);
  if (safe_method(r))
    return 0;
  const char *t = http_req_header(r, "X-CSRF-Token");
  if (!t || strlen(t) != SBX_SHA256_HEX - 1 ||
      !sbx_equal_ct(t, who->csrf, SBX_SHA256_HEX - 1))
    return sbx_error_set(e, SBX_PERMISSION_DENIED, EPERM,
                         "a request made with the page's session needs its "
                         "X-CSRF-Token header (GET /ui/session gives it)");
  return 0;
}

/* Sets the cookie to VALUE for MAX_AGE seconds (0: removes it). */
static void set_cookie(struct api *a, const char *value, int max_age) {
  char h[256];
  (void)snprintf(h, sizeof(h),
                 COOKIE "=%s; Path=/; Max-Age=%d; HttpOnly; "
                        "SameSite=Strict%s",
                 value, max_age, httpd_tls(a->srv->http) ? "; Secure" : "");
  (void)http_add_header(a->r, "Set-Cookie", h);
}

/* {"name", "scopes": [...], "csrf", "expires_at"} of session WHO (new). */
static json_t *session_view(const struct auth_who *who) {
  json_t *scopes = json_array();
  for (const char *p = who->scopes; scopes && *p;) {
    size_t n = strcspn(p, ",");
    (void)json_array_append_new(scopes, json_stringn(p, n));
    p += n + (p[n] == ',');
  }
  time_t t = (time_t)who->expires;
  struct tm tm;
  char at[40] = "";
  if (gmtime_r(&t, &tm))
    (void)strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
  return json_pack("{s:s, s:o, s:s, s:s}", "name", who->name, "scopes",
                   scopes ? scopes : json_array(), "csrf", who->csrf,
                   "expires_at", at);
}

/* Whether the request's Origin, when it has one, is this server: a login
 * posted from another site's page is refused (SameSite does not guard a
 * request that carries no cookie yet). */
static bool same_origin(const struct api *a) {
  const char *o = http_req_header(a->r, "Origin");
  const char *host = http_req_header(a->r, "Host");
  if (!o)
    return true;
  char want[300];
  int n =
      snprintf(want, sizeof(want), "%s://%s",
               httpd_tls(a->srv->http) ? "https" : "http", host ? host : "");
  return host && n > 0 && (size_t)n < sizeof(want) && strcmp(o, want) == 0;
}

static int hexval(char c) {
  const char *p = c ? strchr(HEX "ABCDEF", c) : NULL;
  if (!p)
    return -1;
  int v = (int)(p - HEX);
  return v < 16 ? v : v - 6;
}

/* The token of a form body "token=VALUE" (percent-decoded) into OUT. */
static int form_token(const char *body, char out[TOKEN_TEXT_MAX]) {
  if (strncmp(body, "token=", 6) != 0)
    return -EINVAL;
  size_t n = 0;
  for (const char *p = body + 6; *p; p++) {
    int c = (unsigned char)*p;
    if (c == '%') {
      int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
      if (lo < 0)
        return -EINVAL;
      c = hi * 16 + lo;
      p += 2;
    } else if (c == '+') {
      c = ' ';
    } else if (c == '&') {
      return -EINVAL; /* one field only */
    }
    if (n == TOKEN_TEXT_MAX - 1)
      return -EINVAL;
    out[n++] = (char)c;
  }
  out[n] = '\0';
  return 0;
}

/* The token of a JSON body {"token": "..."} into OUT. */
static int json_token(const char *body, size_t len, char out[TOKEN_TEXT_MAX]) {
  json_error_t je;
  _cleanup_json_ json_t *j = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
  const char *t = json_string_value(json_object_get(j, "token"));
  if (!t || json_object_size(j) != 1 || strlen(t) >= TOKEN_TEXT_MAX)
    return -EINVAL;
  (void)snprintf(out, TOKEN_TEXT_MAX, "%s", t);
  return 0;
}

void api_ui_login(struct api *a) {
  if (!same_origin(a))
    return (void)http_reply_error(a->r, 403, "forbidden",
                                  "a login from another origin is refused");
  size_t len = 0;
  const char *body = http_req_body(a->r, &len);
  const char *ct = http_req_header(a->r, "Content-Type");
  bool form =
      ct && strncasecmp(ct, "application/x-www-form-urlencoded",
                        strlen("application/x-www-form-urlencoded")) == 0;
  char token[TOKEN_TEXT_MAX] = "";
  if (len > LOGIN_BODY_MAX || strlen(body) != len ||
      (form ? form_token(body, token) : json_token(body, len, token)) < 0)
    return (void)http_reply_error(
        a->r, 400, "invalid_request",
        "a login is {\"token\": \"sbx_...\"} or the form field token");
  struct auth_who who;
  struct sbx_error e = {0};
  int k = auth_token(a->srv, token, &who, &e);
  explicit_bzero(token, sizeof(token));
  if (k < 0 && e.code == SBX_UNAUTHENTICATED)
    (void)sbx_error_set(&e, SBX_UNAUTHENTICATED, EACCES,
                        "the token is not valid (unknown, removed, or not "
                        "an sbx token)");
  if (k < 0)
    return auth_refuse(a->r, &e);
  who.session = true;
  who.expires = store_now_ms() / 1000 + SESSION_MAX_AGE_S;
  char mac[SBX_SHA256_HEX], value[AUTH_ID_MAX + EXPIRES_DIGITS_MAX + 72];
  session_mac(who.hash, "session", who.id, who.expires, mac);
  session_mac(who.hash, "csrf", who.id, who.expires, who.csrf);
  (void)snprintf(value, sizeof(value), "%s.%lld.%s", who.id,
                 (long long)who.expires, mac);
  set_cookie(a, value, SESSION_MAX_AGE_S);
  if (form) {
    /* A page without script: back to it, now with its session. */
    (void)http_add_header(a->r, "Location", "/");
    (void)http_reply(a->r, 303, "text/plain", "", 0);
  } else {
    (void)http_reply_json(a->r, 200, session_view(&who));
  }
  explicit_bzero(&who, sizeof(who)); /* its hash keys the sessions */
}

void api_ui_logout(struct api *a) {
  struct auth_who who;
  struct sbx_error e = {0};
  /* A live session logs out only with its CSRF token; any other cookie is
   * dropped as it is. */
  int k = session_check(a->srv, a->r, &who, &e);
  explicit_bzero(&who, sizeof(who));
  if (k < 0 && e.code == SBX_PERMISSION_DENIED)
    return auth_refuse(a->r, &e);
  set_cookie(a, "", 0);
  (void)http_reply(a->r, 204, NULL, "", 0);
}

void api_ui_session(struct api *a) {
  struct auth_who who;
  struct sbx_error e = {0};
  int k = session_check(a->srv, a->r, &who, &e);
  if (k == -ENOENT)
    (void)sbx_error_set(&e, SBX_UNAUTHENTICATED, EACCES,
                        "no session: log in (POST /ui/login)");
  if (k < 0)
    return auth_refuse(a->r, &e);
  (void)http_reply_json(a->r, 200, session_view(&who));
  explicit_bzero(&who, sizeof(who));
}
