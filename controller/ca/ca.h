/* sbx's own certificate authority: the mutual TLS of remote sandboxes.
 *
 * One directory (STATE_DIR/ca by default), made on first use, 0700:
 *   ca.key, ca.crt        the CA (ECDSA P-256; the key 0600)
 *   crl.pem               the revocation list, signed by the CA
 *   ca.pem                ca.crt and crl.pem together: what sandboxd's
 *                         --tls-ca and sbx's client read, so both refuse
 *                         a revoked certificate (mbedtls through nng)
 *   issued.json           every certificate issued: serial, kind, name,
 *                         expiry, revocation time
 *   servers/NAME.token    the token of sandbox NAME's sandboxd (0600)
 *   clients/NAME.crt/.key a controller's client certificate (key 0600)
 *
 * A server certificate names its sandbox (subject CN and a DNS
 * subjectAltName NAME, also an IP one when NAME is an address) and sbx
 * dials with NAME as the TLS server name, so a sandbox cannot stand in for
 * another. Calls take the directory's lock (a flock on ca/.lock) while they
 * change it. Errors: a negative errno with E saying why. */
#ifndef SBX_CA_H
#define SBX_CA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/errors.h"

#define CA_NAME_MAX 63
#define CA_DEFAULT_DAYS 365

enum ca_kind { CA_SERVER, CA_CLIENT };

/* The CA directory: GIVEN, else the state directory's "ca" (STATE_DIR,
 * else the default state directory). */
int ca_dir_resolve(const char *given, const char *state_dir, char *out,
                   size_t n, struct sbx_error *e);

/* Checks NAME: 1 to 63 of [a-z0-9.-], starting with a letter or digit. */
int ca_name_check(const char *name, struct sbx_error *e);

/* Makes the CA in DIR unless it is there; *CREATED says which. */
int ca_init(const char *dir, bool *created, struct sbx_error *e);

/* What the CA is: subject, SHA-256 fingerprint, expiry, the certificates
 * issued. *OUT new. -ENOENT when there is no CA in DIR. */
int ca_show(const char *dir, json_t **out, struct sbx_error *e);

/* A certificate of KIND for NAME, valid from NOT_BEFORE to NOT_AFTER (Unix
 * seconds), with a fresh key: the PEM certificate to CERT_PATH and the key
 * to KEY_PATH (0600), recorded in issued.json. SERIAL (at least 41 bytes,
 * may be NULL) gets its serial in hex. Makes the CA first when missing. */
int ca_issue(const char *dir, enum ca_kind kind, const char *name,
             int64_t not_before, int64_t not_after, const char *cert_path,
             const char *key_path, char *serial, struct sbx_error *e);

/* Revokes the client certificates WHAT names (a serial in hex, or a
 * name: every one of that name not yet revoked) and writes crl.pem and
 * ca.pem again. *COUNT gets how many were revoked; -ENOENT when none. */
int ca_revoke(const char *dir, const char *what, size_t *count,
              struct sbx_error *e);

/* Writes the CA bundle (ca.crt and a fresh crl.pem: its next update a
 * year away) to PATH, 0644. */
int ca_write_bundle(const char *dir, const char *path, struct sbx_error *e);

/* DIR/servers/NAME.token into OUT (N bytes), made (random, 0600) when
 * MAKE and missing. */
int ca_server_token(const char *dir, const char *name, bool make, char *out,
                    size_t n, struct sbx_error *e);

/* What a controller presents to a remote sandboxd: DIR/ca.pem and the
 * client certificate NAME (DIR/clients/NAME.crt and .key), into *CA_PEM,
 * *CERT and *KEY (new paths). The certificate is issued when missing and
 * the CA's key is at hand. MAKE_CA: the CA is made first when missing;
 * else a missing CA is an error saying how to make one. */
int ca_client_files(const char *dir, const char *name, bool make_ca,
                    char **ca_pem, char **cert, char **key,
                    struct sbx_error *e);

/* One TLS handshake with the sandboxd at URL (tls+tcp://HOST:PORT) with
 * the CA bundle CA_PEM, the client certificate CERT and its KEY, checking
 * that its certificate names SERVER_NAME, within TIMEOUT_MS (0: 5 s).
 * 0 when both sides accept; -EKEYREJECTED with E saying which side refused
 * what; -ETIMEDOUT or another negative errno when it cannot be reached. */
int ca_tls_probe(const char *url, const char *server_name, const char *ca_pem,
                 const char *cert, const char *key, unsigned timeout_ms,
                 struct sbx_error *e);

#endif
