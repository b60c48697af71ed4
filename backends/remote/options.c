/* The remote backend's options: the endpoints (given, or from a pool
 * file), the CA directory and the client certificate's name. */
#include "backends/remote/remote_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/ca_options.h"
#include "controller/ca/ca.h"
#include "shared/cleanup.h"

static int endpoint_flag(const char *text, json_t **out, struct sbx_error *e) {
  (void)e;
  *out = json_string(text);
  return *out ? 0 : -ENOMEM;
}

const struct backend_option remote_option_table[] = {
    {"endpoints", "endpoint", "tls+tcp://HOST:PORT",
     "a sandboxd to claim (repeatable; in run_config also {\"url\", "
     "\"name\", \"token_file\"})",
     BACKEND_OPTION_JSON, "", endpoint_flag},
    {"pool", "pool", "FILE",
     "a JSON file listing the endpoints ({\"endpoints\": [...]})",
     BACKEND_OPTION_STRING, ""},
    BACKEND_CA_OPTIONS,
    {0},
};

/* The host of URL (tls+tcp://HOST:PORT, HOST may be [v6]) into OUT. */
static int url_host(const char *url, char *out, size_t n) {
  static const char pre[] = "tls+tcp://";
  if (strncmp(url, pre, sizeof(pre) - 1) != 0)
    return -EINVAL;
  const char *h = url + sizeof(pre) - 1, *end;
  if (*h == '[') {
    h++;
    end = strchr(h, ']');
    if (!end || end[1] != ':')
      return -EINVAL;
  } else {
    end = strrchr(h, ':');
  }
  const char *port = end && *end == ']' ? end + 2 : end ? end + 1 : NULL;
  if (!end || end == h || (size_t)(end - h) >= n || !port || !*port ||
      strspn(port, "0123456789") != strlen(port) || strlen(port) > 5)
    return -EINVAL;
  memcpy(out, h, (size_t)(end - h));
  out[end - h] = '\0';
  return 0;
}

/* One element of "endpoints": a URL, or {"url", "name", "token_file"}. */
static int take_endpoint(json_t *v, const char *where, const char *key,
                         struct remote_endpoint *ep, struct sbx_error *e) {
  json_t *u = json_is_object(v) ? json_object_get(v, "url") : v;
  const char *url = json_string_value(u);
  if (!url)
    return backend_option_bad(e, where, key, "%s",
                              "expected a URL or an object with \"url\"");
  const char *k;
  json_t *x;
  json_object_foreach(json_is_object(v) ? v : NULL, k, x) {
    if ((strcmp(k, "url") && strcmp(k, "name") && strcmp(k, "token_file")) ||
        !json_is_string(x))
      return backend_option_bad(
          e, where, key,
          "unknown key or not a string \"%s\" (expected url, name, "
          "token_file)",
          k);
  }
  char host[256];
  if (url_host(url, host, sizeof(host)) < 0)
    return backend_option_bad(
        e, where, key,
        "\"%s\" is not tls+tcp://HOST:PORT (the remote backend "
        "speaks mutual TLS only)",
        url);
  const char *name = json_string_value(json_object_get(v, "name"));
  struct sbx_error ne = {0};
  if (ca_name_check(name ? name : host, &ne) < 0)
    return backend_option_bad(e, where, key, "%s", ne.msg);
  const char *tf = json_string_value(json_object_get(v, "token_file"));
  ep->url = strdup(url);
  ep->name = strdup(name ? name : host);
  ep->token_file = tf ? strdup(tf) : NULL;
  return ep->url && ep->name && (!tf || ep->token_file) ? 0 : -ENOMEM;
}

static int take_list(json_t *arr, const char *where, const char *key,
                     struct remote_options *o, struct sbx_error *e) {
  if (!json_is_array(arr) || json_array_size(arr) == 0)
    return backend_option_bad(e, where, key, "%s",
                              "expected a non-empty array of endpoints");
  if (o->neps + json_array_size(arr) > REMOTE_MAX_ENDPOINTS)
    return backend_option_bad(e, where, key, "more than %d endpoints",
                              REMOTE_MAX_ENDPOINTS);
  struct remote_endpoint *n =
      realloc(o->eps, (o->neps + json_array_size(arr)) * sizeof(*n));
  if (!n)
    return -ENOMEM;
  o->eps = n;
  size_t i;
  json_t *v;
  json_array_foreach(arr, i, v) {
    o->eps[o->neps] = (struct remote_endpoint){0};
    int r = take_endpoint(v, where, key, &o->eps[o->neps], e);
    o->neps++;
    if (r < 0)
      return r;
  }
  return 0;
}

/* The endpoints of the pool file PATH. */
static int take_pool(const char *path, const char *where,
                     struct remote_options *o, struct sbx_error *e) {
  json_error_t je;
  _cleanup_json_ json_t *p = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!p)
    return backend_option_bad(e, where, "pool", "%s", je.text);
  json_t *arr = json_is_object(p) ? json_object_get(p, "endpoints") : p;
  return take_list(arr, where, "pool", o, e);
}

int remote_options_parse(json_t *obj, const char *where, void **out,
                         struct sbx_error *e) {
  *out = NULL;
  struct remote_options *o = calloc(1, sizeof(*o));
  if (!o)
    return -ENOMEM;
  int r = 0;
  json_t *v;
  if ((v = json_object_get(obj, "endpoints")))
    r = take_list(v, where, "endpoints", o, e);
  if (r == 0 && (v = json_object_get(obj, "pool")))
    r = take_pool(json_string_value(v), where, o, e);
  const char *ca = json_string_value(json_object_get(obj, "ca_dir"));
  const char *cl = json_string_value(json_object_get(obj, "client"));
  struct sbx_error ne = {0};
  if (r == 0 && ca && !*ca)
    r = backend_option_bad(e, where, "ca_dir", "%s", "expected a directory");
  if (r == 0 && cl && ca_name_check(cl, &ne) < 0)
    r = backend_option_bad(e, where, "client", "%s", ne.msg);
  if (r == 0 && ((ca && !(o->ca_dir = strdup(ca))) ||
                 !(o->client = strdup(cl ? cl : "default"))))
    r = -ENOMEM;
  if (r < 0) {
    remote_options_free(o);
    return r;
  }
  *out = o;
  return 0;
}

void remote_options_free(void *own) {
  struct remote_options *o = own;
  if (!o)
    return;
  for (size_t i = 0; i < o->neps; i++) {
    free(o->eps[i].url);
    free(o->eps[i].name);
    free(o->eps[i].token_file);
  }
  free(o->eps);
  free(o->ca_dir);
  free(o->client);
  free(o);
}
