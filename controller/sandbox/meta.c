#include "controller/sandbox/meta.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "shared/client.h"

const char *const meta_record_keys[] = {
    "name",       "labels",          "ttl_seconds",
    "expires_at", "expires_at_unix", "idle_timeout_seconds",
    NULL};

static bool alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9');
}

int meta_check_name(const char *name, struct sbx_error *e) {
  size_t n = strlen(name);
  bool ok = n > 0 && n <= META_NAME_MAX && alnum(name[0]);
  bool hex = n == 12;
  for (size_t i = 0; ok && i < n; i++) {
    ok = alnum(name[i]) || strchr("_.-", name[i]);
    hex &= (name[i] >= '0' && name[i] <= '9') ||
           (name[i] >= 'a' && name[i] <= 'f');
  }
  if (!ok)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "invalid name \"%.80s\": a name is 1 to %d "
                         "characters of [a-zA-Z0-9_.-], starting with a "
                         "letter or digit",
                         name, META_NAME_MAX);
  if (hex)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "invalid name \"%s\": it looks like a sandbox id",
                         name);
  return 0;
}

int meta_add_label(json_t *labels, const char *kv, struct sbx_error *e) {
  const char *eq = strchr(kv, '=');
  size_t kn = eq ? (size_t)(eq - kv) : strlen(kv);
  const char *v = eq ? eq + 1 : "";
  bool ok = kn > 0 && kn <= META_LABEL_KEY_MAX && alnum(kv[0]);
  for (size_t i = 0; ok && i < kn; i++)
    ok = alnum(kv[i]) || strchr("._/-", kv[i]);
  if (!ok)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "invalid label \"%.80s\": expected KEY=VALUE with a "
                         "KEY of 1 to %d characters of [A-Za-z0-9._/-], "
                         "starting with a letter or digit",
                         kv, META_LABEL_KEY_MAX);
  char key[META_LABEL_KEY_MAX + 1];
  memcpy(key, kv, kn);
  key[kn] = '\0';
  if (strcmp(key, "sbx") == 0 || strncmp(key, "sbx.", 4) == 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "label \"%s\" is reserved: sbx.* labels are set by "
                         "sbx itself",
                         key);
  size_t vn = strlen(v);
  ok = vn <= META_LABEL_VALUE_MAX && sbx_utf8_valid(v, vn);
  for (size_t i = 0; ok && i < vn; i++)
    ok = (unsigned char)v[i] >= 0x20 && v[i] != 0x7f;
  if (!ok)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "label \"%s\": its value must be printable UTF-8 of "
                         "at most %d bytes",
                         key, META_LABEL_VALUE_MAX);
  if (json_object_get(labels, key))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "label \"%s\" is given twice", key);
  if (json_object_size(labels) >= META_LABELS_MAX)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG, "at most %d labels",
                         META_LABELS_MAX);
  return json_object_set_new(labels, key, json_string(v)) < 0 ? -ENOMEM : 0;
}

int meta_parse_duration(const char *s, unsigned *secs, struct sbx_error *e) {
  static const struct {
    char unit;
    unsigned secs;
  } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
  unsigned long long total = 0;
  const char *p = s;
  bool any = false;
  while (*p && total <= META_DURATION_MAX) {
    unsigned long long v = 0;
    const char *start = p;
    while (*p >= '0' && *p <= '9' && v <= META_DURATION_MAX)
      v = v * 10 + (unsigned)(*p++ - '0');
    if (p == start)
      break;
    unsigned mul = 0;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
      if (*p == units[i].unit)
        mul = units[i].secs;
    if (mul)
      p++;
    else if (*p == '\0' && !any)
      mul = 1; /* bare seconds */
    else {
      p = start; /* a number without its unit: refused below */
      break;
    }
    total += v * mul;
    any = true;
  }
  if (!any || *p || total < 1 || total > META_DURATION_MAX)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "invalid duration \"%.40s\": expected e.g. 90s, 5m, "
                         "1h30m or 2d (1 s to %u days)",
                         s, META_DURATION_MAX / 86400);
  *secs = (unsigned)total;
  return 0;
}

void meta_format_duration(uint64_t secs, char *out, size_t n) {
  uint64_t d = secs / 86400, h = secs / 3600 % 24, m = secs / 60 % 60,
           s = secs % 60;
  size_t k = 0;
  out[0] = '\0';
  if (d && k < n)
    k += (size_t)snprintf(out + k, n - k, "%llud", (unsigned long long)d);
  if (h && k < n)
    k += (size_t)snprintf(out + k, n - k, "%lluh", (unsigned long long)h);
  if (m && k < n)
    k += (size_t)snprintf(out + k, n - k, "%llum", (unsigned long long)m);
  if ((s || secs == 0) && k < n)
    (void)snprintf(out + k, n - k, "%llus", (unsigned long long)s);
}

json_t *meta_record(const char *name, json_t *labels, unsigned ttl_s,
                    unsigned idle_s, int64_t now) {
  json_t *j = json_object();
  if (!j)
    return NULL;
  int r = 0;
  if (name)
    r |= json_object_set_new(j, "name", json_string(name));
  if (labels && json_object_size(labels))
    r |= json_object_set(j, "labels", labels);
  if (ttl_s) {
    time_t at = (time_t)(now + ttl_s);
    struct tm tm;
    char text[32];
    gmtime_r(&at, &tm);
    (void)strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
    r |= json_object_set_new(j, "ttl_seconds", json_integer(ttl_s));
    r |= json_object_set_new(j, "expires_at", json_string(text));
    r |=
        json_object_set_new(j, "expires_at_unix", json_integer((json_int_t)at));
  }
  if (idle_s)
    r |= json_object_set_new(j, "idle_timeout_seconds", json_integer(idle_s));
  if (r) {
    json_decref(j);
    return NULL;
  }
  return j;
}

int64_t meta_expires_at(json_t *rec) {
  json_int_t at = json_integer_value(json_object_get(rec, "expires_at_unix"));
  return at > 0 ? (int64_t)at : 0;
}

const char *meta_status(json_t *rec, bool running, int64_t now) {
  if (running)
    return "running";
  int64_t at = meta_expires_at(rec);
  return at && now >= at ? "expired" : "stopped";
}

int meta_show(json_t *shown, bool running, int64_t now) {
  if (json_object_set_new(shown, "status",
                          json_string(meta_status(shown, running, now))) < 0)
    return -ENOMEM;
  int64_t at = meta_expires_at(shown);
  if (at && json_object_set_new(shown, "expires_in_seconds",
                                json_integer(at > now ? at - now : 0)) < 0)
    return -ENOMEM;
  return 0;
}

static const struct {
  const char *name;
  enum meta_filter_key key;
} filter_keys[] = {
    {"name", META_FILTER_NAME},
    {"status", META_FILTER_STATUS},
    {"label", META_FILTER_LABEL},
    {"id", META_FILTER_ID},
};

int meta_filter_add(struct meta_filters *fs, const char *spec,
                    struct sbx_error *e) {
  const char *eq = strchr(spec, '=');
  size_t kn = eq ? (size_t)(eq - spec) : 0;
  int k = -1;
  for (size_t i = 0; eq && i < sizeof(filter_keys) / sizeof(filter_keys[0]);
       i++)
    if (strlen(filter_keys[i].name) == kn &&
        strncmp(spec, filter_keys[i].name, kn) == 0)
      k = (int)i;
  if (k < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "invalid filter \"%.80s\": expected name=TEXT, "
                         "status=running|stopped|expired, label=KEY[=VALUE] "
                         "or id=PREFIX",
                         spec);
  const char *v = eq + 1;
  enum meta_filter_key key = filter_keys[k].key;
  if (key == META_FILTER_STATUS && strcmp(v, "running") &&
      strcmp(v, "stopped") && strcmp(v, "expired"))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "invalid filter \"%.80s\": a status is running, "
                         "stopped or expired",
                         spec);
  if (!*v)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "invalid filter \"%.80s\": no value", spec);
  if (fs->n == META_FILTERS_MAX)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG, "at most %d filters",
                         META_FILTERS_MAX);
  const char *leq = strchr(v, '=');
  fs->f[fs->n].key = key;
  fs->f[fs->n].value = v;
  fs->f[fs->n].keylen = leq ? (size_t)(leq - v) : strlen(v);
  fs->n++;
  return 0;
}

/* Whether filter I of FS passes SHOWN. */
static bool one_matches(const struct meta_filters *fs, size_t i,
                        json_t *shown) {
  const char *v = fs->f[i].value;
  const char *s;
  switch (fs->f[i].key) {
  case META_FILTER_NAME:
    s = json_string_value(json_object_get(shown, "name"));
    return s && strstr(s, v);
  case META_FILTER_STATUS:
    s = json_string_value(json_object_get(shown, "status"));
    return s && strcmp(s, v) == 0;
  case META_FILTER_ID:
    s = json_string_value(json_object_get(shown, "id"));
    return s && strncmp(s, v, strlen(v)) == 0;
  case META_FILTER_LABEL: {
    char key[META_LABEL_KEY_MAX + 1];
    size_t kn = fs->f[i].keylen;
    if (kn > META_LABEL_KEY_MAX)
      return false;
    memcpy(key, v, kn);
    key[kn] = '\0';
    json_t *have = json_object_get(json_object_get(shown, "labels"), key);
    if (!json_is_string(have))
      return false;
    return v[kn] != '=' || strcmp(json_string_value(have), v + kn + 1) == 0;
  }
  }
  return false;
}

bool meta_filter_match(const struct meta_filters *fs, json_t *shown) {
  /* Labels: each must match. The others: one of each key's values. */
  bool seen[4] = {false}, hit[4] = {false};
  for (size_t i = 0; i < fs->n; i++) {
    enum meta_filter_key k = fs->f[i].key;
    bool m = one_matches(fs, i, shown);
    if (k == META_FILTER_LABEL && !m)
      return false;
    seen[k] = true;
    hit[k] |= m;
  }
  for (int k = 0; k < 4; k++)
    if (seen[k] && !hit[k])
      return false;
  return true;
}
