/* What the MCP files of controller/tools/ share, internal to the folder:
 *   mcp_client.c  the protocol (initialize, tools/list, tools/call, their
 *                 results as tool outputs) and the set of an agent's
 *                 servers (mcp.h)
 *   mcp_stdio.c   the stdio transport: a server process, JSON-RPC messages
 *                 one a line, a reader thread that answers the server's
 *                 requests and hands replies to the callers waiting */
#ifndef SBX_MCP_INTERNAL_H
#define SBX_MCP_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "controller/config/agent.h"
#include "shared/errors.h"

#define MCP_MAX_MESSAGE (4u << 20) /* bytes of one JSON-RPC message */

struct mcp_conn;

/* Starts the stdio server CFG (borrowed; it must outlive the connection).
 * -errno with E when the program cannot be started. */
int mcp_conn_start(const struct agent_mcp_server *cfg, struct mcp_conn **out,
                   struct sbx_error *e);
/* Sends the request METHOD with PARAMS (borrowed, may be NULL) and waits
 * at most TIMEOUT_MS for its reply: *RESULT (new) is its "result". A
 * timeout sends notifications/cancelled and returns -ETIMEDOUT; an error
 * reply -EPROTO; a server that is gone -EPIPE; E says which. Thread-safe:
 * requests may be in flight at once. */
int mcp_conn_request(struct mcp_conn *c, const char *method, json_t *params,
                     int64_t timeout_ms, json_t **result, struct sbx_error *e);
/* Sends the notification METHOD with PARAMS (borrowed, may be NULL). */
int mcp_conn_notify(struct mcp_conn *c, const char *method, json_t *params,
                    int64_t timeout_ms);
/* True once since the server last said notifications/tools/list_changed. */
bool mcp_conn_take_list_changed(struct mcp_conn *c);
/* Closes stdin, gives the server a moment to exit, then kills its process
 * group; fails what still waits. Accepts NULL; returns NULL. */
struct mcp_conn *mcp_conn_free(struct mcp_conn *c);

#endif
