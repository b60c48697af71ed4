/* The HTTP server of sbx serve, over libmicrohttpd: one thread per
 * connection (so a handler may block: a long-poll, an event stream), the
 * request body gathered up to a limit before the handler runs, and TLS with
 * optional client certificates through GnuTLS.
 *
 * Limits: connections (past it new ones are refused), the header block
 * (libmicrohttpd answers 431 past it), the body (413), and an idle timeout
 * that closes a connection on which nothing moved (slow clients).
 *
 * A handler is called once per request, on the connection's thread, and
 * answers with exactly one http_reply* call; a handler that returns
 * without one gets a 500. The request and everything it returns are valid
 * until the handler returns. */
#ifndef SBX_HTTPD_H
#define SBX_HTTPD_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/errors.h"

struct httpd;
struct http_req;

struct httpd_config {
  const char *host; /* an IP address to listen on; NULL: 127.0.0.1 */
  uint16_t port;    /* 0: any free port (httpd_port says which) */
  const char *tls_cert, *tls_key; /* PEM files: both or neither */
  const char *tls_client_ca;      /* PEM file: clients must show a
                                     certificate it signed; needs TLS */
  unsigned max_connections;       /* 0: 1024 */
  size_t max_body;                /* 0: 16 MiB */
  size_t max_header;              /* the header block; 0: 32 KiB */
  unsigned idle_timeout_s;        /* 0: 60 */
};

typedef void (*httpd_handler_fn)(void *arg, struct http_req *r);

/* Listens and serves; handlers run on connection threads. 0 or a negative
 * errno with E (a port in use; -EINVAL for TLS files that cannot be read,
 * hold no certificate, or a key that is not the certificate's). */
int httpd_start(const struct httpd_config *c, httpd_handler_fn fn, void *arg,
                struct httpd **out, struct sbx_error *e);
/* The port listened on. */
uint16_t httpd_port(const struct httpd *h);
/* Whether it serves TLS. */
bool httpd_tls(const struct httpd *h);
/* The connections open now (a test waits for those of its clients to
 * end). */
unsigned httpd_connections(const struct httpd *h);
/* Stops listening, ends the streams (http_stream_over turns true) and
 * waits for every connection to end. Accepts NULL; returns NULL. */
struct httpd *httpd_stop(struct httpd *h);

/* The request. Borrowed strings, valid during the handler. */
const char *http_req_method(const struct http_req *r);
/* The path without the query, percent-decoded. */
const char *http_req_path(const struct http_req *r);
/* A query argument or a header (case-insensitive), NULL when absent. */
const char *http_req_query(const struct http_req *r, const char *name);
const char *http_req_header(const struct http_req *r, const char *name);
/* The value of the cookie NAME in the Cookie header, NULL when absent. */
const char *http_req_cookie(const struct http_req *r, const char *name);
/* The body (NUL-terminated; "" when none) and its length. */
const char *http_req_body(const struct http_req *r, size_t *len);
/* The status replied with, 0 before a reply. */
unsigned http_req_status(const struct http_req *r);

/* Adds a header to the reply to come (copied). */
int http_add_header(struct http_req *r, const char *name, const char *value);
/* Replies STATUS with BODY (copied) of type CTYPE. */
int http_reply(struct http_req *r, unsigned status, const char *ctype,
               const void *body, size_t len);
/* Replies STATUS with the JSON BODY (stolen; NULL: an out-of-memory 500). */
int http_reply_json(struct http_req *r, unsigned status, json_t *body);
/* The body {"error": {"code": CODE, "message": MSG}}, with MSG made valid
 * UTF-8 (a message may quote a request's bytes: its path, a query
 * argument, cut at any byte). New; NULL when out of memory. */
json_t *http_error_body(const char *code, const char *msg);
/* Replies STATUS with http_error_body(CODE, the formatted message). */
int http_reply_error(struct http_req *r, unsigned status, const char *code,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A streamed body: called on the connection's thread to fill BUF with up
 * to MAX bytes; it may block, but should look at http_stream_over(ST)
 * every second or so and end the body once it is true. Returns the bytes
 * written (> 0), 0 at the end of the body, or a negative errno to break
 * the connection. */
struct http_stream;
typedef ssize_t (*http_stream_fn)(void *arg, char *buf, size_t max,
                                  const struct http_stream *st);
/* Whether stream ST should end: the server is going down, or its client
 * has closed the connection (or its sending side), which a stream that
 * waits for something to send would otherwise see only at its next write,
 * keeping its thread and connection until then. */
bool http_stream_over(const struct http_stream *st);
/* Replies STATUS with a body of unknown length from FN; FREE_FN(ARG) is
 * called once the stream has ended (or could not start). */
int http_reply_stream(struct http_req *r, unsigned status, const char *ctype,
                      http_stream_fn fn, void *arg, void (*free_fn)(void *));

#endif
