/* The server's connections: which nng pipes are admitted, which of them
 * have proven the token, and the deadline of those that have not.
 *
 * At NNG_PIPE_EV_ADD_PRE a pipe is admitted as unauthenticated. When that
 * would make more than max_unauth unauthenticated pipes, or more than
 * max_total pipes in all, the oldest unauthenticated one is closed to make
 * room: idle connections cannot lock a client out, and none that has proven
 * the token is ever closed for a newcomer. Only when max_total pipes are all
 * authenticated is the new one refused (closed at once). A pipe becomes
 * authenticated when a request with the right token arrives on it
 * (conns_authenticated); one that has not within handshake_ms is closed.
 *
 * The table's thread keeps those deadlines and returns freed heap to the
 * kernel (malloc_trim) once it holds more than a little, so that a flood of
 * connections leaves no lasting growth behind.
 *
 * Thread-safe: every function may be called from any thread, nng's pipe
 * callbacks included. The table calls nng_pipe_close itself, never with its
 * lock held. */
#ifndef SANDBOXD_CONNS_H
#define SANDBOXD_CONNS_H

#include <nng/nng.h>
#include <stdint.h>

struct conns_config {
  uint32_t max_total;    /* admitted pipes, authenticated or not; >= 1 */
  uint32_t max_unauth;   /* of which unauthenticated; 1..max_total */
  unsigned handshake_ms; /* from admission to the first valid token; >= 1 */
};

struct conns;

/* A new table with its thread started: 0, -EINVAL for a CFG out of range,
 * -ENOMEM, or -EAGAIN (no thread). */
int conns_new(const struct conns_config *cfg, struct conns **out);
/* Stops the thread and frees; accepts NULL, returns NULL. Call once nng
 * sends no more pipe events (the socket is closed). */
struct conns *conns_free(struct conns *c);

/* For NNG_PIPE_EV_ADD_PRE: admits P (closing the oldest unauthenticated
 * pipe when a cap is reached), or closes P when every admitted pipe is
 * authenticated and there are max_total of them. */
void conns_add(struct conns *c, nng_pipe p);
/* For NNG_PIPE_EV_REM_POST: forgets P (refused pipes were never known). */
void conns_remove(struct conns *c, nng_pipe p);
/* P has sent a request with the right token: it no longer counts against
 * max_unauth, has no deadline and is never closed for a newcomer. Cheap for
 * a pipe already marked; a pipe not admitted, or being closed, is left
 * alone. */
void conns_authenticated(struct conns *c, nng_pipe p);

#endif
