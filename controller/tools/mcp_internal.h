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

/* One connection to a server, through its transport. Every function but
 * free may run from many threads at once. */
struct mcp_transport {
  /* Connects to the server CFG (borrowed; it must outlive the connection):
   * starts it (stdio) or just remembers where it is (HTTP). -errno with E
   * naming the program or URL. */
  int (*start)(const struct agent_mcp_server *cfg, void **out,
               struct sbx_error *e);
  /* Sends the request METHOD with PARAMS (borrowed, may be NULL) and waits
   * at most TIMEOUT_MS for its reply: *RESULT (new) is its "result". A
   * timeout sends notifications/cancelled and returns -ETIMEDOUT; an error
   * reply -EPROTO; a server that is gone -EPIPE; E says which. */
  int (*request)(void *c, const char *method, json_t *params,
                 int64_t timeout_ms, json_t **result, struct sbx_error *e);
  /* Sends the notification METHOD with PARAMS (borrowed, may be NULL). */
  int (*notify)(void *c, const char *method, json_t *params,
                int64_t timeout_ms);
  /* True once since the server last said notifications/tools/list_changed. */
  bool (*take_list_changed)(void *c);
  /* Ends the session and frees C; fails what still waits. Accepts NULL. */
  void (*free)(void *c);
};

/* mcp_stdio.c: the server is a program on the controller's host, its
 * messages one a line on its stdin and stdout. */
extern const struct mcp_transport mcp_stdio_transport;
/* mcp_http.c: Streamable HTTP, each message POSTed to the server's URL. */
extern const struct mcp_transport mcp_http_transport;

/* Shared by the transports: the "result" of the JSON-RPC reply REPLY from
 * server NAME (new, in *RESULT), or -EPROTO with E for an error reply. */
int mcp_reply_result(const char *name, json_t *reply, json_t **result,
                     struct sbx_error *e);

#endif
