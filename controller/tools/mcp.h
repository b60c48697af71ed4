/* MCP servers of an agent (its "mcp_servers"), for one run: started on the
 * controller's host (stdio; trusted configuration, never in the sandbox)
 * or connected to (Streamable HTTP) when the agent's first turn needs its
 * tools, and stopped with the run.
 *
 * Protocol per the MCP specification (2025-11-25, with 2025-06-18,
 * 2025-03-26 and 2024-11-05 accepted from a server): initialize with the
 * protocol version and no client capabilities, notifications/initialized,
 * tools/list (every page, cached; listed again after the server says
 * notifications/tools/list_changed), tools/call with the server's
 * client_session_timeout_seconds and notifications/cancelled when it runs
 * out. Progress and logging notifications are ignored; a ping is
 * answered. Over Streamable HTTP a reply's event stream that ends before
 * the reply is resumed with Last-Event-ID after its retry time.
 *
 * A server that crashes, hangs or breaks the protocol fails its calls (the
 * model is told, as the Python SDK's default_tool_error_function words
 * it), not the run. One that cannot be started or initialized fails the
 * run's first turn: its tools cannot be offered.
 *
 * Thread-safety: mcp_set_call and mcp_set_needs_approval may run from many
 * threads at once; mcp_set_refresh and mcp_set_definitions only from the
 * turn loop, between the calls. */
#ifndef SBX_MCP_H
#define SBX_MCP_H

#include <jansson.h>
#include <stdbool.h>

#include "controller/config/agent.h"
#include "controller/tools/tools.h"
#include "shared/errors.h"

#define MCP_MAX_TOOLS 512 /* tools of one server */
#define MCP_MAX_PAGES 64  /* tools/list pages of one listing */

struct mcp_set;

/* Starts agent A's servers (A borrowed; it must outlive the set), lists
 * their tools and keeps those the filters let through. Tool names must be
 * unique across the servers. 0, or -errno with E naming the server. */
int mcp_set_start(const struct agent *a, struct mcp_set **out,
                  struct sbx_error *e);
/* Lists again the tools of the servers that said their list changed;
 * true when a list was replaced (the model's tools are to be rebuilt). A
 * failed listing keeps the old list and is warned about. */
bool mcp_set_refresh(struct mcp_set *s);
/* Appends the servers' tools to TOOLS as function tools, Responses
 * format, not strict (the servers' schemas are used as they are). */
int mcp_set_definitions(struct mcp_set *s, json_t *tools);
/* Calls the MCP tool NAME with ARGS (the model's arguments text). *OUTPUT
 * is new: the text content as a string, several parts or an image as
 * input_text/input_image parts, or the structuredContent's JSON text with
 * use_structured_content. A result with isError reaches the model as the
 * server wrote it; a failed call as the Python SDK words it. Both are in
 * CTX->failure. -ENOENT when NAME is not one of the set's tools; -ENOMEM. */
int mcp_set_call(struct mcp_set *s, const char *name, const char *args,
                 json_t **output, struct tool_ctx *ctx);
/* Whether NAME is one of the set's tools. */
bool mcp_set_has(const struct mcp_set *s, const char *name);
/* Whether the server of tool NAME asks for approval of its calls
 * (require_approval); false for a tool that is not the set's. */
bool mcp_set_needs_approval(const struct mcp_set *s, const char *name);
/* Stops the servers. Accepts NULL; returns NULL. */
struct mcp_set *mcp_set_free(struct mcp_set *s);

#endif
