/* Names, labels, durations and --filter of developer-owned sandboxes
 * (meta.h): what is taken and what is refused. */
#include <criterion/criterion.h>
#include <string.h>

#include "controller/sandbox/meta.h"

Test(meta, names_follow_dockers_rule) {
  struct sbx_error e = {0};
  static const char *const good[] = {"web", "a", "My_box.2-x", "0abc"};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
    cr_expect_eq(meta_check_name(good[i], &e), 0, "%s: %s", good[i], e.msg);
  char longest[META_NAME_MAX + 2];
  memset(longest, 'a', sizeof(longest));
  longest[META_NAME_MAX] = '\0';
  cr_expect_eq(meta_check_name(longest, &e), 0);
  longest[META_NAME_MAX] = 'a';
  longest[META_NAME_MAX + 1] = '\0';
  static const char *bad[] = {"", "-web", ".x", "a b", "a/b", "é", "a:b"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    cr_expect_lt(meta_check_name(bad[i], &e), 0, "%s", bad[i]);
  cr_expect_lt(meta_check_name(longest, &e), 0);
  cr_expect_lt(meta_check_name("0123456789ab", &e), 0);
  cr_expect(strstr(e.msg, "looks like a sandbox id"), "%s", e.msg);
}

Test(meta, labels_are_checked_and_sbx_is_reserved) {
  json_t *l = json_object();
  struct sbx_error e = {0};
  cr_expect_eq(meta_add_label(l, "env=dev", &e), 0, "%s", e.msg);
  cr_expect_eq(meta_add_label(l, "io.example/team=a=b", &e), 0, "%s", e.msg);
  cr_expect_eq(meta_add_label(l, "flag", &e), 0, "%s", e.msg);
  cr_expect_str_eq(json_string_value(json_object_get(l, "io.example/team")),
                   "a=b");
  cr_expect_str_eq(json_string_value(json_object_get(l, "flag")), "");
  cr_expect_lt(meta_add_label(l, "env=prod", &e), 0);
  cr_expect(strstr(e.msg, "given twice"), "%s", e.msg);
  cr_expect_lt(meta_add_label(l, "sbx.session=x", &e), 0);
  cr_expect(strstr(e.msg, "reserved"), "%s", e.msg);
  cr_expect_lt(meta_add_label(l, "sbx=x", &e), 0);
  cr_expect_lt(meta_add_label(l, "=x", &e), 0);
  cr_expect_lt(meta_add_label(l, "a b=x", &e), 0);
  cr_expect_lt(meta_add_label(l, "k=line\nbreak", &e), 0);
  char big[META_LABEL_VALUE_MAX + 8];
  memset(big, 'v', sizeof(big));
  memcpy(big, "k=", 2);
  big[sizeof(big) - 1] = '\0';
  cr_expect_lt(meta_add_label(l, big, &e), 0);
  json_object_clear(l);
  for (int i = 0; i < META_LABELS_MAX; i++) {
    char kv[32];
    (void)snprintf(kv, sizeof(kv), "k%d=v", i);
    cr_assert_eq(meta_add_label(l, kv, &e), 0, "%s", e.msg);
  }
  cr_expect_lt(meta_add_label(l, "one=more", &e), 0);
  json_decref(l);
}

Test(meta, durations_as_go_writes_them) {
  struct sbx_error e = {0};
  static const struct {
    const char *text;
    unsigned secs;
  } good[] = {{"90", 90},      {"90s", 90},    {"5m", 300},
              {"1h30m", 5400}, {"2d", 172800}, {"1h1m1s", 3661}};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    unsigned s = 0;
    cr_expect_eq(meta_parse_duration(good[i].text, &s, &e), 0, "%s: %s",
                 good[i].text, e.msg);
    cr_expect_eq(s, good[i].secs, "%s", good[i].text);
  }
  static const char *bad[] = {
      "", "0", "0s", "5x", "1h30", "-5s", "m", "367d", "99999999999999999999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    unsigned s = 0;
    cr_expect_lt(meta_parse_duration(bad[i], &s, &e), 0, "%s", bad[i]);
  }
  char out[40];
  meta_format_duration(3661, out, sizeof(out));
  cr_expect_str_eq(out, "1h1m1s");
  meta_format_duration(90000, out, sizeof(out));
  cr_expect_str_eq(out, "1d1h");
  meta_format_duration(0, out, sizeof(out));
  cr_expect_str_eq(out, "0s");
}

Test(meta, status_and_time_left) {
  json_t *labels = json_pack("{s:s}", "env", "dev");
  json_t *r = meta_record("web", labels, 60, 30, 1000);
  cr_assert_not_null(r);
  cr_expect_eq(meta_expires_at(r), 1060);
  cr_expect_str_eq(json_string_value(json_object_get(r, "expires_at")),
                   "1970-01-01T00:17:40Z");
  cr_expect_str_eq(meta_status(r, true, 2000), "running");
  cr_expect_str_eq(meta_status(r, false, 1059), "stopped");
  cr_expect_str_eq(meta_status(r, false, 1060), "expired");
  cr_expect_eq(meta_show(r, true, 1010), 0);
  cr_expect_eq(json_integer_value(json_object_get(r, "expires_in_seconds")),
               50);
  json_decref(r);
  r = meta_record(NULL, NULL, 0, 0, 1000);
  cr_expect_eq(json_object_size(r), 0, "nothing given, nothing recorded");
  cr_expect_str_eq(meta_status(r, false, 5000), "stopped");
  json_decref(r);
  json_decref(labels);
}

Test(meta, filters_as_docker_combines_them) {
  struct meta_filters fs = {0};
  struct sbx_error e = {0};
  json_t *a = json_pack("{s:s, s:s, s:s, s:{s:s, s:s}}", "id", "aaaa11112222",
                        "name", "web-1", "status", "running", "labels", "env",
                        "dev", "team", "x");
  json_t *b = json_pack("{s:s, s:s, s:{s:s}}", "id", "bbbb11112222", "status",
                        "stopped", "labels", "env", "prod");
  cr_expect(meta_filter_match(&fs, a) && meta_filter_match(&fs, b));
  cr_assert_eq(meta_filter_add(&fs, "label=env", &e), 0, "%s", e.msg);
  cr_expect(meta_filter_match(&fs, a) && meta_filter_match(&fs, b));
  cr_assert_eq(meta_filter_add(&fs, "label=team=x", &e), 0, "%s", e.msg);
  cr_expect(meta_filter_match(&fs, a) && !meta_filter_match(&fs, b));
  fs.n = 0;
  cr_assert_eq(meta_filter_add(&fs, "status=running", &e), 0);
  cr_assert_eq(meta_filter_add(&fs, "status=stopped", &e), 0);
  cr_expect(meta_filter_match(&fs, a) && meta_filter_match(&fs, b),
            "one key's values are alternatives");
  cr_assert_eq(meta_filter_add(&fs, "name=web", &e), 0);
  cr_expect(meta_filter_match(&fs, a) && !meta_filter_match(&fs, b),
            "different keys must all match (b has no name)");
  fs.n = 0;
  cr_assert_eq(meta_filter_add(&fs, "id=bbbb", &e), 0);
  cr_expect(!meta_filter_match(&fs, a) && meta_filter_match(&fs, b));
  static const char *bad[] = {"color=red", "status=paused", "name=", "label",
                              "nothing"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    cr_expect_lt(meta_filter_add(&fs, bad[i], &e), 0, "%s", bad[i]);
  json_decref(a);
  json_decref(b);
}
