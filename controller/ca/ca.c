/* sbx's certificate authority, with OpenSSL's libcrypto (which sbx links
 * already for its hashes): keys, certificates and the revocation list. */
#include "controller/ca/ca.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "controller/state/state.h"
#include "shared/cleanup.h"
#include "shared/fileio.h"
#include "shared/rand.h"

#define CA_MAX_FILE (1u << 20)
#define CA_MAX_ISSUED 100000
#define CA_YEARS_DAYS (10 * 365)
#define DAY 86400

static int ossl(struct sbx_error *e, const char *what) {
  return sbx_error_set(e, SBX_INTERNAL, EIO, "cannot %s (libcrypto)", what);
}

int ca_dir_resolve(const char *given, const char *state_dir, char *out,
                   size_t n, struct sbx_error *e) {
  if (given && *given) {
    if ((size_t)snprintf(out, n, "%s", given) >= n)
      return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                           "the CA directory path is too long");
    return 0;
  }
  char dir[PATH_MAX];
  int r = state_dir_resolve(state_dir, dir, sizeof(dir), e);
  if (r < 0)
    return r;
  if ((size_t)snprintf(out, n, "%s/ca", dir) >= n)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "the CA directory path is too long");
  return 0;
}

int ca_name_check(const char *name, struct sbx_error *e) {
  size_t n = name ? strlen(name) : 0;
  bool ok = n >= 1 && n <= CA_NAME_MAX &&
            strchr("abcdefghijklmnopqrstuvwxyz0123456789", name[0]);
  for (size_t i = 0; ok && i < n; i++)
    ok = strchr("abcdefghijklmnopqrstuvwxyz0123456789.-", name[i]) &&
         name[i] != '\0';
  if (!ok)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "bad name \"%s\": expected 1 to %d of a-z, 0-9, "
                         "'.' and '-', starting with a letter or digit",
                         name ? name : "", CA_NAME_MAX);
  return 0;
}

static int path_in(char *out, size_t n, const char *dir, const char *name) {
  return (size_t)snprintf(out, n, "%s/%s", dir, name) < n ? 0 : -ENAMETOOLONG;
}

/* Takes DIR's lock (DIR/.lock): an fd to close, or a negative errno. */
static int ca_lock(const char *dir, struct sbx_error *e) {
  char p[PATH_MAX];
  if (path_in(p, sizeof(p), dir, ".lock") < 0)
    return -ENAMETOOLONG;
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return sbx_error_set(e, SBX_OK, errno, "cannot open \"%s\": %m", p);
  while (flock(fd, LOCK_EX) < 0)
    if (errno != EINTR) {
      int err = errno;
      close(fd);
      return sbx_error_set(e, SBX_OK, err, "cannot lock \"%s\": %m", p);
    }
  return fd;
}

static int mkdir_0700(const char *p, struct sbx_error *e) {
  if (mkdir(p, 0700) < 0 && errno != EEXIST)
    return sbx_error_set(e, SBX_OK, errno, "cannot create \"%s\": %m", p);
  return 0;
}

/* Writes PEM text of a BIO to PATH atomically with MODE. */
static int write_bio(BIO *b, const char *path, unsigned mode,
                     struct sbx_error *e) {
  char *data = NULL;
  long len = BIO_get_mem_data(b, &data);
  if (len <= 0)
    return ossl(e, "encode PEM");
  int r = sbx_write_file_atomic(path, data, (size_t)len, mode);
  if (r < 0)
    return sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\": %s", path,
                         strerror(-r));
  return 0;
}

static int write_key(EVP_PKEY *k, const char *path, struct sbx_error *e) {
  BIO *b = BIO_new(BIO_s_mem());
  int r = b && PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL) == 1
              ? write_bio(b, path, 0600, e)
              : ossl(e, "encode a key");
  BIO_free(b);
  return r;
}

static int write_cert(X509 *x, const char *path, struct sbx_error *e) {
  BIO *b = BIO_new(BIO_s_mem());
  int r = b && PEM_write_bio_X509(b, x) == 1 ? write_bio(b, path, 0644, e)
                                             : ossl(e, "encode a certificate");
  BIO_free(b);
  return r;
}

static int read_pem(const char *dir, const char *name, bool key, void **out,
                    struct sbx_error *e) {
  char p[PATH_MAX];
  if (path_in(p, sizeof(p), dir, name) < 0)
    return -ENAMETOOLONG;
  FILE *f = fopen(p, "re");
  if (!f)
    return sbx_error_set(e, errno == ENOENT ? SBX_NOT_FOUND : SBX_OK, errno,
                         "cannot read \"%s\": %m", p);
  *out = key ? (void *)PEM_read_PrivateKey(f, NULL, NULL, NULL)
             : (void *)PEM_read_X509(f, NULL, NULL, NULL);
  fclose(f);
  if (!*out)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a PEM %s", p,
                         key ? "private key" : "certificate");
  return 0;
}

/* A random positive 127-bit serial, set on X and written in hex to HEX. */
static int set_serial(X509 *x, char hex[41]) {
  unsigned char raw[16];
  if (sbx_random_bytes(raw, sizeof(raw)) < 0)
    return -EIO;
  raw[0] &= 0x7f;
  raw[0] |= 0x40; /* no leading zero byte: the hex has one spelling */
  BIGNUM *bn = BN_bin2bn(raw, sizeof(raw), NULL);
  ASN1_INTEGER *ai = bn ? BN_to_ASN1_INTEGER(bn, NULL) : NULL;
  int r = ai && X509_set_serialNumber(x, ai) == 1 ? 0 : -ENOMEM;
  for (size_t i = 0; i < sizeof(raw); i++)
    (void)snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  ASN1_INTEGER_free(ai);
  BN_free(bn);
  return r;
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
  X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
  int ok = ext && X509_add_ext(x, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok ? 0 : -EINVAL;
}

/* The extensions of a CA, server or client certificate. */
static int add_exts(X509 *x, X509 *issuer, int kind, const char *name) {
  char san[CA_NAME_MAX + 32];
  struct in_addr a4;
  struct in6_addr a6;
  bool ip =
      inet_pton(AF_INET, name, &a4) == 1 || inet_pton(AF_INET6, name, &a6) == 1;
  (void)snprintf(san, sizeof(san), "DNS:%s%s%s", name, ip ? ",IP:" : "",
                 ip ? name : "");
  int r = add_ext(x, issuer, NID_subject_key_identifier, "hash");
  if (kind < 0)
    return r ? r
           : add_ext(x, issuer, NID_basic_constraints, "critical,CA:TRUE")
               ? -EINVAL
               : add_ext(x, issuer, NID_key_usage,
                         "critical,keyCertSign,cRLSign");
  if (r == 0)
    r = add_ext(x, issuer, NID_authority_key_identifier, "keyid");
  if (r == 0)
    r = add_ext(x, issuer, NID_basic_constraints, "critical,CA:FALSE");
  if (r == 0)
    r = add_ext(x, issuer, NID_key_usage, "critical,digitalSignature");
  if (r == 0)
    r = add_ext(x, issuer, NID_ext_key_usage,
                kind == CA_SERVER ? "serverAuth" : "clientAuth");
  if (r == 0 && kind == CA_SERVER)
    r = add_ext(x, issuer, NID_subject_alt_name, san);
  return r;
}

/* A certificate for KEY named CN, signed by ISSUER's CAKEY (NULL issuer:
 * self-signed, a CA). KIND -1 is the CA. *OUT new. */
static int make_cert(EVP_PKEY *key, const char *cn, int kind, X509 *issuer,
                     EVP_PKEY *cakey, int64_t nb, int64_t na, X509 **out,
                     char hex[41]) {
  X509 *x = X509_new();
  X509_NAME *n = X509_NAME_new();
  int r = x && n ? 0 : -ENOMEM;
  if (r == 0 &&
      (X509_set_version(x, 2) != 1 || set_serial(x, hex) < 0 ||
       X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8,
                                  (const unsigned char *)cn, -1, -1, 0) != 1 ||
       X509_set_subject_name(x, n) != 1 ||
       X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : n) !=
           1 ||
       !ASN1_TIME_set(X509_getm_notBefore(x), (time_t)nb) ||
       !ASN1_TIME_set(X509_getm_notAfter(x), (time_t)na) ||
       X509_set_pubkey(x, key) != 1))
    r = -EINVAL;
  if (r == 0)
    r = add_exts(x, issuer ? issuer : x, kind, cn);
  if (r == 0 && X509_sign(x, cakey, EVP_sha256()) <= 0)
    r = -EINVAL;
  X509_NAME_free(n);
  if (r < 0) {
    X509_free(x);
    return r;
  }
  *out = x;
  return 0;
}

static int read_issued(const char *dir, json_t **out, struct sbx_error *e) {
  char p[PATH_MAX];
  if (path_in(p, sizeof(p), dir, "issued.json") < 0)
    return -ENAMETOOLONG;
  json_error_t je;
  json_t *a = json_load_file(p, 0, &je);
  if (!a && access(p, F_OK) < 0 && errno == ENOENT)
    a = json_array();
  if (!json_is_array(a)) {
    json_decref(a);
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "\"%s\" is not a JSON array", p);
  }
  *out = a;
  return 0;
}

static int write_issued(const char *dir, json_t *a, struct sbx_error *e) {
  char p[PATH_MAX];
  if (path_in(p, sizeof(p), dir, "issued.json") < 0)
    return -ENAMETOOLONG;
  _cleanup_free_ char *text = json_dumps(a, JSON_INDENT(2));
  if (!text)
    return -ENOMEM;
  int r = sbx_write_file_atomic(p, text, strlen(text), 0600);
  return r < 0 ? sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\": %s", p,
                               strerror(-r))
               : 0;
}

static int write_bundle_locked(const char *dir, const char *path,
                               struct sbx_error *e);

/* Makes the CA's key and certificate; the lock is held. */
static int make_ca(const char *dir, struct sbx_error *e) {
  char kp[PATH_MAX], cp[PATH_MAX], hex[41], sub[PATH_MAX];
  if (path_in(kp, sizeof(kp), dir, "ca.key") < 0 ||
      path_in(cp, sizeof(cp), dir, "ca.crt") < 0)
    return -ENAMETOOLONG;
  EVP_PKEY *k = EVP_EC_gen("P-256");
  if (!k)
    return ossl(e, "make a P-256 key");
  char cn[64];
  char id[9];
  (void)sbx_random_hex(id, 4);
  (void)snprintf(cn, sizeof(cn), "sbx CA %s", id);
  int64_t now = (int64_t)time(NULL);
  X509 *x = NULL;
  int r = make_cert(k, cn, -1, NULL, k, now - 300,
                    now + (int64_t)CA_YEARS_DAYS * DAY, &x, hex);
  if (r < 0)
    r = ossl(e, "make the CA certificate");
  if (r == 0)
    r = write_key(k, kp, e);
  if (r == 0)
    r = write_cert(x, cp, e);
  X509_free(x);
  EVP_PKEY_free(k);
  for (size_t i = 0; r == 0 && i < 2; i++) {
    if (path_in(sub, sizeof(sub), dir, i ? "clients" : "servers") < 0)
      return -ENAMETOOLONG;
    r = mkdir_0700(sub, e);
  }
  if (r == 0) {
    if (path_in(cp, sizeof(cp), dir, "ca.pem") < 0)
      return -ENAMETOOLONG;
    r = write_bundle_locked(dir, cp, e);
  }
  return r;
}

/* Makes the CA when missing; the lock is held. */
static int ensure_ca(const char *dir, bool *created, struct sbx_error *e) {
  char p[PATH_MAX];
  if (path_in(p, sizeof(p), dir, "ca.key") < 0)
    return -ENAMETOOLONG;
  if (created)
    *created = false;
  if (access(p, F_OK) == 0)
    return 0;
  if (errno != ENOENT)
    return sbx_error_set(e, SBX_OK, errno, "cannot use \"%s\": %m", p);
  int r = make_ca(dir, e);
  if (r == 0 && created)
    *created = true;
  return r;
}

/* Creates DIR and its missing parents (0700), then takes its lock. */
static int open_dir(const char *dir, struct sbx_error *e) {
  char p[PATH_MAX];
  if ((size_t)snprintf(p, sizeof(p), "%s", dir) >= sizeof(p))
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "the CA directory path is too long");
  for (char *s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
    *s = '\0';
    int r = mkdir_0700(p, e);
    *s = '/';
    if (r < 0)
      return r;
  }
  int r = mkdir_0700(p, e);
  return r < 0 ? r : ca_lock(dir, e);
}

int ca_init(const char *dir, bool *created, struct sbx_error *e) {
  _cleanup_close_ int lock = open_dir(dir, e);
  if (lock < 0)
    return lock;
  return ensure_ca(dir, created, e);
}

static void fingerprint(X509 *x, char *out, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  out[0] = '\0';
  if (X509_digest(x, EVP_sha256(), md, &len) != 1)
    return;
  size_t k = 0;
  for (unsigned i = 0; i < len && k + 4 < n; i++)
    k += (size_t)snprintf(out + k, n - k, "%s%02X", i ? ":" : "", md[i]);
}

static int64_t asn1_unix(const ASN1_TIME *t) {
  struct tm tm;
  return ASN1_TIME_to_tm(t, &tm) == 1 ? (int64_t)timegm(&tm) : 0;
}

int ca_show(const char *dir, json_t **out, struct sbx_error *e) {
  X509 *x = NULL;
  int r = read_pem(dir, "ca.crt", false, (void **)&x, e);
  if (r < 0)
    return r;
  char fp[128], cn[256] = "";
  fingerprint(x, fp, sizeof(fp));
  (void)X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
                                  sizeof(cn));
  json_int_t na = (json_int_t)asn1_unix(X509_get0_notAfter(x));
  X509_free(x);
  json_t *issued = NULL;
  if ((r = read_issued(dir, &issued, e)) < 0)
    return r;
  *out = json_pack("{s:s, s:s, s:s, s:I, s:o}", "dir", dir, "subject", cn,
                   "sha256", fp, "not_after", na, "issued", issued);
  return *out ? 0 : -ENOMEM;
}

/* Appends a record of a certificate issued to the list. */
static int record_issued(const char *dir, const char *hex, enum ca_kind kind,
                         const char *name, int64_t na, struct sbx_error *e) {
  _cleanup_json_ json_t *a = NULL;
  int r = read_issued(dir, &a, e);
  if (r < 0)
    return r;
  if (json_array_size(a) >= CA_MAX_ISSUED)
    return sbx_error_set(e, SBX_LIMIT_EXCEEDED, E2BIG,
                         "the CA has issued %d certificates; make a new one",
                         CA_MAX_ISSUED);
  if (json_array_append_new(
          a, json_pack("{s:s, s:s, s:s, s:I}", "serial", hex, "kind",
                       kind == CA_SERVER ? "server" : "client", "name", name,
                       "not_after", (json_int_t)na)) < 0)
    return -ENOMEM;
  return write_issued(dir, a, e);
}

int ca_issue(const char *dir, enum ca_kind kind, const char *name,
             int64_t not_before, int64_t not_after, const char *cert_path,
             const char *key_path, char *serial, struct sbx_error *e) {
  int r = ca_name_check(name, e);
  if (r < 0)
    return r;
  if (not_after <= not_before)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, EINVAL,
                         "a certificate must end after it begins");
  _cleanup_close_ int lock = open_dir(dir, e);
  if (lock < 0)
    return lock;
  if ((r = ensure_ca(dir, NULL, e)) < 0)
    return r;
  X509 *ca = NULL, *x = NULL;
  EVP_PKEY *cakey = NULL, *k = NULL;
  char hex[41];
  if ((r = read_pem(dir, "ca.crt", false, (void **)&ca, e)) < 0 ||
      (r = read_pem(dir, "ca.key", true, (void **)&cakey, e)) < 0)
    goto out;
  if (!(k = EVP_EC_gen("P-256"))) {
    r = ossl(e, "make a P-256 key");
    goto out;
  }
  if ((r = make_cert(k, name, (int)kind, ca, cakey, not_before, not_after, &x,
                     hex)) < 0) {
    r = ossl(e, "make the certificate");
    goto out;
  }
  if ((r = write_key(k, key_path, e)) < 0 ||
      (r = write_cert(x, cert_path, e)) < 0 ||
      (r = record_issued(dir, hex, kind, name, not_after, e)) < 0)
    goto out;
  if (serial)
    memcpy(serial, hex, sizeof(hex));
out:
  X509_free(ca);
  X509_free(x);
  EVP_PKEY_free(cakey);
  EVP_PKEY_free(k);
  return r;
}

static int add_revoked(X509_CRL *crl, const char *hex, int64_t when) {
  BIGNUM *bn = NULL;
  if (BN_hex2bn(&bn, hex) == 0)
    return -EINVAL;
  ASN1_INTEGER *ai = BN_to_ASN1_INTEGER(bn, NULL);
  ASN1_TIME *t = ASN1_TIME_set(NULL, (time_t)when);
  X509_REVOKED *rv = X509_REVOKED_new();
  int ok = ai && t && rv && X509_REVOKED_set_serialNumber(rv, ai) == 1 &&
           X509_REVOKED_set_revocationDate(rv, t) == 1 &&
           X509_CRL_add0_revoked(crl, rv) == 1;
  if (!ok)
    X509_REVOKED_free(rv);
  ASN1_INTEGER_free(ai);
  ASN1_TIME_free(t);
  BN_free(bn);
  return ok ? 0 : -ENOMEM;
}

/* The CRL of the certificates revoked in ISSUED, PEM into B. */
static int make_crl(X509 *ca, EVP_PKEY *cakey, json_t *issued, BIO *b) {
  X509_CRL *crl = X509_CRL_new();
  int64_t now = (int64_t)time(NULL);
  ASN1_TIME *last = ASN1_TIME_set(NULL, (time_t)(now - 300));
  ASN1_TIME *next = ASN1_TIME_set(NULL, (time_t)(now + 365 * DAY));
  int r =
      crl && last && next && X509_CRL_set_version(crl, 1) == 1 &&
              X509_CRL_set_issuer_name(crl, X509_get_subject_name(ca)) == 1 &&
              X509_CRL_set1_lastUpdate(crl, last) == 1 &&
              X509_CRL_set1_nextUpdate(crl, next) == 1
          ? 0
          : -ENOMEM;
  size_t i;
  json_t *v;
  json_array_foreach(issued, i, v) {
    json_int_t at = json_integer_value(json_object_get(v, "revoked_at"));
    const char *hex = json_string_value(json_object_get(v, "serial"));
    if (r == 0 && at > 0 && hex)
      r = add_revoked(crl, hex, (int64_t)at);
  }
  if (r == 0 && (X509_CRL_sort(crl) != 1 ||
                 X509_CRL_sign(crl, cakey, EVP_sha256()) <= 0 ||
                 PEM_write_bio_X509_CRL(b, crl) != 1))
    r = -EINVAL;
  X509_CRL_free(crl);
  ASN1_TIME_free(last);
  ASN1_TIME_free(next);
  return r;
}

/* ca.crt and a fresh CRL to PATH, and the CRL alone to crl.pem. */
static int write_bundle_locked(const char *dir, const char *path,
                               struct sbx_error *e) {
  X509 *ca = NULL;
  EVP_PKEY *cakey = NULL;
  json_t *issued = NULL;
  BIO *crl = BIO_new(BIO_s_mem()), *all = BIO_new(BIO_s_mem());
  char p[PATH_MAX];
  int r = crl && all ? 0 : -ENOMEM;
  if (r == 0 && ((r = read_pem(dir, "ca.crt", false, (void **)&ca, e)) < 0 ||
                 (r = read_pem(dir, "ca.key", true, (void **)&cakey, e)) < 0 ||
                 (r = read_issued(dir, &issued, e)) < 0))
    goto out;
  if (r == 0 && (make_crl(ca, cakey, issued, crl) < 0 ||
                 PEM_write_bio_X509(all, ca) != 1))
    r = ossl(e, "make the revocation list");
  char *data = NULL;
  long len = r == 0 ? BIO_get_mem_data(crl, &data) : 0;
  if (r == 0 && BIO_write(all, data, (int)len) != (int)len)
    r = -ENOMEM;
  if (r == 0 && path_in(p, sizeof(p), dir, "crl.pem") < 0)
    r = -ENAMETOOLONG;
  if (r == 0)
    r = write_bio(crl, p, 0644, e);
  if (r == 0)
    r = write_bio(all, path, 0644, e);
out:
  BIO_free(crl);
  BIO_free(all);
  X509_free(ca);
  EVP_PKEY_free(cakey);
  json_decref(issued);
  return r;
}

int ca_write_bundle(const char *dir, const char *path, struct sbx_error *e) {
  _cleanup_close_ int lock = ca_lock(dir, e);
  if (lock < 0)
    return lock;
  char p[PATH_MAX];
  if (path_in(p, sizeof(p), dir, "ca.pem") < 0)
    return -ENAMETOOLONG;
  int r = write_bundle_locked(dir, p, e);
  if (r == 0 && strcmp(path, p) != 0)
    r = write_bundle_locked(dir, path, e);
  return r;
}

int ca_revoke(const char *dir, const char *what, size_t *count,
              struct sbx_error *e) {
  *count = 0;
  _cleanup_close_ int lock = ca_lock(dir, e);
  if (lock < 0)
    return lock;
  _cleanup_json_ json_t *a = NULL;
  int r = read_issued(dir, &a, e);
  if (r < 0)
    return r;
  size_t i;
  json_t *v;
  int64_t now = (int64_t)time(NULL);
  json_array_foreach(a, i, v) {
    const char *serial = json_string_value(json_object_get(v, "serial"));
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *kind = json_string_value(json_object_get(v, "kind"));
    if (!serial || !name || !kind || strcmp(kind, "client") != 0 ||
        json_object_get(v, "revoked_at"))
      continue;
    if (strcasecmp(serial, what) != 0 && strcmp(name, what) != 0)
      continue;
    if (json_object_set_new(v, "revoked_at", json_integer(now)) < 0)
      return -ENOMEM;
    (*count)++;
  }
  if (*count == 0)
    return sbx_error_set(e, SBX_NOT_FOUND, ENOENT,
                         "no client certificate \"%s\" that is not revoked "
                         "already (see sbx ca show)",
                         what);
  char p[PATH_MAX];
  if ((r = write_issued(dir, a, e)) < 0 ||
      path_in(p, sizeof(p), dir, "ca.pem") < 0)
    return r < 0 ? r : -ENAMETOOLONG;
  return write_bundle_locked(dir, p, e);
}

int ca_server_token(const char *dir, const char *name, bool make, char *out,
                    size_t n, struct sbx_error *e) {
  char p[PATH_MAX];
  int r = ca_name_check(name, e);
  if (r < 0)
    return r;
  if ((size_t)snprintf(p, sizeof(p), "%s/servers/%s.token", dir, name) >=
      sizeof(p))
    return -ENAMETOOLONG;
  char *t = NULL;
  size_t len = 0;
  r = sbx_read_file(p, n - 1, &t, &len);
  if (r == -ENOENT && make) {
    char hex[SBX_TOKEN_HEX + 1];
    if ((r = sbx_random_hex(hex, SBX_TOKEN_BYTES)) < 0)
      return r;
    r = sbx_write_file_atomic(p, hex, strlen(hex), 0600);
    if (r == 0 && n > strlen(hex))
      memcpy(out, hex, strlen(hex) + 1);
    explicit_bzero(hex, sizeof(hex));
    return r < 0 ? sbx_error_set(e, SBX_OK, -r, "cannot write \"%s\": %s", p,
                                 strerror(-r))
                 : 0;
  }
  if (r < 0)
    return sbx_error_set(e, r == -ENOENT ? SBX_NOT_FOUND : SBX_OK, -r,
                         "cannot read the token of \"%s\" (\"%s\"): %s", name,
                         p, strerror(-r));
  memcpy(out, t, len);
  out[len] = '\0';
  explicit_bzero(t, len);
  free(t);
  while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == '\r'))
    out[--len] = '\0';
  return 0;
}

int ca_client_files(const char *dir, const char *name, bool make_ca,
                    char **ca_pem, char **cert, char **key,
                    struct sbx_error *e) {
  if (asprintf(ca_pem, "%s/ca.pem", dir) < 0 ||
      asprintf(cert, "%s/clients/%s.crt", dir, name) < 0 ||
      asprintf(key, "%s/clients/%s.key", dir, name) < 0)
    return sbx_error_set(e, SBX_INTERNAL, ENOMEM, "out of memory");
  int r = make_ca ? ca_init(dir, NULL, e) : 0;
  if (r < 0)
    return r;
  if (access(*ca_pem, R_OK) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, errno,
                         "no CA in \"%s\" (%m): make one with sbx ca init and "
                         "give each sandboxd host its certificate with sbx ca "
                         "issue-server NAME --out DIR",
                         dir);
  if (access(*cert, R_OK) == 0)
    return 0;
  char cakey[PATH_MAX];
  if (path_in(cakey, sizeof(cakey), dir, "ca.key") < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENAMETOOLONG,
                         "the CA directory path is too long");
  if (access(cakey, R_OK) < 0)
    return sbx_error_set(e, SBX_INVALID_ARGUMENT, ENOENT,
                         "no client certificate \"%s\" and no CA key to "
                         "issue it (sbx ca issue-client %s on the CA's host)",
                         *cert, name);
  int64_t now = (int64_t)time(NULL);
  return ca_issue(dir, CA_CLIENT, name, now - 300,
                  now + (int64_t)CA_DEFAULT_DAYS * 86400, *cert, *key, NULL, e);
}
