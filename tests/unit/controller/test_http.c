#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

#include "controller/net/http.h"

static void expect_redacted(const char *in, const char *want) {
  char *out = NULL;
  cr_assert_eq(http_url_redact(in, &out), 0, "%s", in);
  cr_expect_str_eq(out, want);
  free(out);
}

Test(http, redact_drops_credentials_query_and_fragment) {
  expect_redacted("https://user:pw@bucket.example/a/b.tar.zst?X-Amz-"
                  "Signature=abc&X-Amz-Credential=k#frag",
                  "https://bucket.example/a/b.tar.zst");
  expect_redacted("http://127.0.0.1:8080/snap/", "http://127.0.0.1:8080/snap/");
  char *out = NULL;
  cr_expect_eq(http_url_redact("file:///etc/passwd", &out), -EINVAL);
  cr_expect_null(out);
  cr_expect_eq(http_url_redact("not a url", &out), -EINVAL);
}
