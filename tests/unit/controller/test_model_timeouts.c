/* sbx run --model-timeouts: the spec's names, values and errors. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "controller/model/model.h"

Test(model_timeouts, each_name_sets_its_timeout_in_ms) {
  struct model_config cfg = {0};
  struct sbx_error e = {0};
  cr_assert_eq(
      model_parse_timeouts("connect=3,first_byte=7,idle=2,total=90", &cfg, &e),
      0, "%s", e.msg);
  cr_expect_eq(cfg.connect_timeout_ms, 3000);
  cr_expect_eq(cfg.first_byte_timeout_ms, 7000);
  cr_expect_eq(cfg.idle_timeout_ms, 2000);
  cr_expect_eq(cfg.timeout_ms, 90000);
  struct model_config one = {0};
  cr_assert_eq(model_parse_timeouts("idle=86400", &one, &e), 0, "%s", e.msg);
  cr_expect_eq(one.idle_timeout_ms, 86400000u);
  cr_expect_eq(one.connect_timeout_ms, 0, "the others keep their defaults");
}

Test(model_timeouts, bad_specs_are_refused_with_the_reason) {
  static const struct {
    const char *spec, *says;
  } bad[] = {
      {"", "expected NAME=SECONDS"},
      {"idle", "expected NAME=SECONDS"},
      {"speed=3", "expected NAME=SECONDS"},
      {"idle=0", "idle must be a whole number of seconds from 1 to 86400"},
      {"idle=86401", "from 1 to 86400"},
      {"idle=-1", "idle must be"},
      {"idle=+1", "idle must be"},
      {"idle=1.5", "idle must be"},
      {"idle=", "idle must be"},
      {"idle=1,", "a trailing comma"},
      {",idle=1", "expected NAME=SECONDS"},
      {"first_byte=99999999999999999999", "first_byte must be"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct model_config cfg = {0};
    struct sbx_error e = {0};
    int r = model_parse_timeouts(bad[i].spec, &cfg, &e);
    cr_expect_eq(r, -EINVAL, "\"%s\"", bad[i].spec);
    cr_expect(strstr(e.msg, bad[i].says) != NULL, "\"%s\": %s", bad[i].spec,
              e.msg);
  }
}
