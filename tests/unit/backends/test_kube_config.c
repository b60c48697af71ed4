/* The kubernetes backend's kubeconfig reading: YAML (and JSON) through
 * libyaml, contexts, clusters and users with inline data or files, the
 * in-cluster service account under a fake root, and every refusal naming
 * what it refuses. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/kubernetes/kube_internal.h"
#include "shared/cleanup.h"

static char tmp[64];

static void setup(void) {
  (void)snprintf(tmp, sizeof(tmp), "/tmp/sbx-kubecfg-XXXXXX");
  cr_assert_not_null(mkdtemp(tmp));
}

static void teardown(void) {
  (void)sandbox_rm_rf(tmp);
}

TestSuite(kube_config, .init = setup, .fini = teardown);

/* base64 of "CA PEM", "CERT PEM", "KEY PEM". */
#define CA_B64 "Q0EgUEVN"
#define CERT_B64 "Q0VSVCBQRU0="
#define KEY_B64 "S0VZIFBFTQ=="

static const char two_contexts[] =
    "apiVersion: v1\n"
    "kind: Config\n"
    "clusters:\n"
    "- name: prod\n"
    "  cluster:\n"
    "    server: https://127.0.0.1:6443/\n"
    "    certificate-authority-data: " CA_B64 "\n"
    "users:\n"
    "- name: robot\n"
    "  user:\n"
    "    client-certificate-data: " CERT_B64 "\n"
    "    client-key-data: " KEY_B64 "\n"
    "- name: alice\n"
    "  user:\n"
    "    token: \"s3cret\"\n"
    "contexts:\n"
    "- name: robot@prod\n"
    "  context: {cluster: prod, user: robot, namespace: sandboxes}\n"
    "- name: alice@prod\n"
    "  context:\n"
    "    cluster: prod\n"
    "    user: alice\n"
    "current-context: robot@prod\n";

static int parse(const char *text, const char *context, struct kube_config *c,
                 char *msg) {
  struct sbx_error e = {0};
  int r = kube_config_parse(text, strlen(text), "/k/config", context, c, &e);
  (void)snprintf(msg, 600, "%s", e.msg);
  return r;
}

Test(kube_config, current_context_with_inline_certificates) {
  struct kube_config c;
  char msg[600];
  cr_assert_eq(parse(two_contexts, NULL, &c, msg), 0, "%s", msg);
  cr_expect_str_eq(c.server, "https://127.0.0.1:6443");
  cr_expect_eq(c.ca_len, 6);
  cr_expect_str_eq(c.ca_pem, "CA PEM");
  cr_expect_str_eq(c.cert_pem, "CERT PEM");
  cr_expect_str_eq(c.key_pem, "KEY PEM");
  cr_expect_null(c.token);
  cr_expect_str_eq(c.ns, "sandboxes");
  cr_expect_str_eq(c.context, "robot@prod");
  cr_expect_str_eq(c.path, "/k/config");
  kube_config_clear(&c);
}

Test(kube_config, another_context_with_a_token_and_the_default_namespace) {
  struct kube_config c;
  char msg[600];
  cr_assert_eq(parse(two_contexts, "alice@prod", &c, msg), 0, "%s", msg);
  cr_expect_str_eq(c.token, "s3cret");
  cr_expect_null(c.cert_pem);
  cr_expect_str_eq(c.ns, "default");
  kube_config_clear(&c);
}

Test(kube_config, json_is_yaml_too) {
  const char *j =
      "{\"clusters\": [{\"name\": \"c\", \"cluster\": {\"server\": "
      "\"https://[::1]:6443\"}}], \"users\": [{\"name\": \"u\", \"user\": "
      "{\"token\": \"t\"}}], \"contexts\": [{\"name\": \"x\", \"context\": "
      "{\"cluster\": \"c\", \"user\": \"u\", \"namespace\": \"ns1\"}}], "
      "\"current-context\": \"x\"}";
  struct kube_config c;
  char msg[600];
  cr_assert_eq(parse(j, NULL, &c, msg), 0, "%s", msg);
  cr_expect_str_eq(c.server, "https://[::1]:6443");
  cr_expect_null(c.ca_pem, "no CA: the system's");
  cr_expect_str_eq(c.ns, "ns1");
  kube_config_clear(&c);
}

static void write_file(const char *dir, const char *name, const char *text) {
  char p[256];
  (void)snprintf(p, sizeof(p), "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f, "%s", p);
  fputs(text, f);
  fclose(f);
}

Test(kube_config, files_are_relative_to_the_kubeconfig_and_kubeconfig_env) {
  write_file(tmp, "ca.crt", "FILE CA");
  write_file(tmp, "tok", "file-token\n");
  write_file(tmp, "config",
             "clusters: [{name: c, cluster: {server: 'https://h', "
             "certificate-authority: ca.crt}}]\n"
             "users: [{name: u, user: {tokenFile: tok}}]\n"
             "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
             "current-context: x\n");
  char env[200];
  (void)snprintf(env, sizeof(env), "%s/config:/nonexistent/other", tmp);
  cr_assert_eq(setenv("KUBECONFIG", env, 1), 0);
  struct kube_config c;
  struct sbx_error e = {0};
  cr_assert_eq(kube_config_load(NULL, NULL, NULL, &c, &e), 0, "%s", e.msg);
  cr_expect_str_eq(c.ca_pem, "FILE CA");
  cr_expect_str_eq(c.token, "file-token");
  kube_config_clear(&c);
  (void)unsetenv("KUBECONFIG");
}

struct refusal {
  const char *text, *context, *want;
};

Test(kube_config, refusals_name_what_they_refuse) {
  static const char base[] =
      "clusters: [{name: c, cluster: {server: 'https://h'%s}}]\n"
      "users: [{name: u, user: {%s}}]\n"
      "contexts: [{name: x, context: {cluster: c, user: %s}}]\n"
      "current-context: x\n";
  static const struct {
    const char *cluster, *user, *uname, *context, *want;
  } cases[] = {
      {"", "token: t", "u", "nope", "no context \"nope\""},
      {"", "token: t", "bob", NULL, "unknown user \"bob\""},
      {", certificate-authority-data: '!!notbase64'", "token: t", "u", NULL,
       "certificate-authority-data is not base64"},
      {", insecure-skip-tls-verify: true", "token: t", "u", NULL,
       "insecure-skip-tls-verify"},
      {"", "exec: {command: aws}", "u", NULL, "exec is not supported"},
      {"", "client-certificate-data: " CERT_B64, "u", NULL,
       "client certificate without its key"},
      {"", "", "u", NULL, "no token, tokenFile or client certificate"},
      {", tls-server-name: x", "token: t", "u", NULL,
       "tls-server-name is not supported"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char text[1024];
    (void)snprintf(text, sizeof(text), base, cases[i].cluster, cases[i].user,
                   cases[i].uname);
    struct kube_config c;
    char msg[600];
    cr_expect_lt(parse(text, cases[i].context, &c, msg), 0, "case %zu", i);
    cr_expect(strstr(msg, cases[i].want), "case %zu: %s", i, msg);
    cr_expect(strstr(msg, "/k/config"), "names the file: %s", msg);
  }
}

Test(kube_config, plain_http_anchors_and_missing_current_context_are_refused) {
  static const struct refusal cases[] = {
      {"clusters: [{name: c, cluster: {server: 'http://h'}}]\n"
       "users: [{name: u, user: {token: t}}]\n"
       "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
       "current-context: x\n",
       NULL, "not an https:// URL"},
      {"users: &u [{name: u, user: {token: t}}]\n", NULL,
       "anchors (&name) are not supported"},
      {"a: 1\na: 2\n", NULL, "duplicate key \"a\""},
      {"users: []\n", NULL, "no current-context"},
      {"- a\n- b\n", NULL, "not a mapping"},
      {"a: [\n", NULL, "line "},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct kube_config c;
    char msg[600];
    cr_expect_lt(parse(cases[i].text, cases[i].context, &c, msg), 0, "case %zu",
                 i);
    cr_expect(strstr(msg, cases[i].want), "case %zu: %s", i, msg);
  }
}

Test(kube_config, an_oversized_file_is_refused) {
  char p[128];
  (void)snprintf(p, sizeof(p), "%s/big", tmp);
  FILE *f = fopen(p, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < (1 << 20) / 16 + 1; i++)
    fputs("# padding......\n", f);
  fclose(f);
  struct kube_config c;
  struct sbx_error e = {0};
  cr_expect_lt(kube_config_load(p, NULL, NULL, &c, &e), 0);
  cr_expect(strstr(e.msg, "larger than 1048576 bytes"), "%s", e.msg);
  cr_expect_lt(kube_config_load("/nonexistent/kc", NULL, NULL, &c, &e), 0);
  cr_expect(strstr(e.msg, "cannot read it"), "%s", e.msg);
}

Test(kube_config, in_cluster_from_the_service_account_files) {
  char dir[256];
  (void)snprintf(dir, sizeof(dir), "%s/var/run/secrets/kubernetes.io", tmp);
  char cmd[400];
  (void)snprintf(cmd, sizeof(cmd), "mkdir -p %s/serviceaccount", dir);
  cr_assert_eq(system(cmd), 0);
  (void)snprintf(dir, sizeof(dir), "%s/%s", tmp, KUBE_SA_DIR);
  write_file(dir, "token", "sa-token\n");
  write_file(dir, "ca.crt", "SA CA");
  write_file(dir, "namespace", "team-a\n");
  (void)unsetenv("KUBECONFIG");
  cr_assert_eq(setenv("HOME", tmp, 1), 0); /* no ~/.kube/config */
  cr_assert_eq(setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1), 0);
  cr_assert_eq(setenv("KUBERNETES_SERVICE_PORT", "443", 1), 0);
  struct kube_config c;
  struct sbx_error e = {0};
  cr_assert_eq(kube_config_load(NULL, NULL, tmp, &c, &e), 0, "%s", e.msg);
  cr_expect_str_eq(c.server, "https://10.0.0.1:443");
  cr_expect_str_eq(c.token, "sa-token");
  cr_expect_str_eq(c.ca_pem, "SA CA");
  cr_expect_str_eq(c.ns, "team-a");
  cr_expect_null(c.path);
  kube_config_clear(&c);
  cr_expect_lt(kube_config_load(NULL, "ctx", tmp, &c, &e), 0);
  cr_expect(strstr(e.msg, "context \"ctx\" given but no kubeconfig"), "%s",
            e.msg);
  (void)unsetenv("KUBERNETES_SERVICE_HOST");
  cr_expect_lt(kube_config_load(NULL, NULL, tmp, &c, &e), 0);
  cr_expect(strstr(e.msg, "not in a cluster"), "%s", e.msg);
}
