/* A plain HTTP GET for tests that reach a server through a published or
 * forwarded port. */
#ifndef SBX_TEST_HTTPGET_H
#define SBX_TEST_HTTPGET_H

/* Connects to HOST:PORT (IPv4) and returns what "GET / HTTP/1.0" brings
 * back (new), trying for up to 10 s while the server starts; "" when
 * nothing answered. */
char *test_http_get(const char *host, unsigned port);

#endif
