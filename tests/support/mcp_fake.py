#!/usr/bin/env python3
"""A small MCP server over stdio for the tests of what the real servers do
not do on demand: crash, hang, change their tool list, send too much.

    mcp_fake.py LOG.jsonl

Every message it receives is appended to LOG.jsonl. It answers initialize
(protocol 2025-06-18), ping, tools/list (two pages) and tools/call:

    add {a, b}      the sum as text; sends a progress notification and a
                    ping request of its own first
    grow {}         adds the tool "extra" and says
                    notifications/tools/list_changed
    extra {}        "extra ran" (listed only after grow)
    crash {}        exits with status 3 without answering
    hang {}         never answers (a notifications/cancelled is logged)
    big {}          answers with a line over 4 MiB
"""

import json
import sys

log_path = sys.argv[1]
grown = False


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def tool(name, desc):
    return {"name": name, "description": desc,
            "inputSchema": {"type": "object", "properties": {
                "a": {"type": "number"}, "b": {"type": "number"}}}}


def tools_page(cursor):
    first = [tool("add", "Adds a and b."), tool("grow", "Adds a tool.")]
    rest = [tool("crash", "Exits."), tool("hang", "Never answers."),
            tool("big", "Answers too much.")]
    if grown:
        rest.append(tool("extra", "Listed after grow."))
    if cursor is None:
        return {"tools": first, "nextCursor": "page2"}
    return {"tools": rest}


def call(mid, params):
    global grown
    name = params.get("name")
    args = params.get("arguments") or {}
    text = lambda t: send({"jsonrpc": "2.0", "id": mid,
                           "result": {"content": [{"type": "text", "text": t}]}})
    if name == "add":
        send({"jsonrpc": "2.0", "method": "notifications/progress",
              "params": {"progressToken": 1, "progress": 1}})
        send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
        text(str(args.get("a", 0) + args.get("b", 0)))
    elif name == "grow":
        grown = True
        text("grown")
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    elif name == "extra" and grown:
        text("extra ran")
    elif name == "crash":
        sys.exit(3)
    elif name == "hang":
        pass
    elif name == "big":
        text("x" * (5 << 20))
    else:
        send({"jsonrpc": "2.0", "id": mid,
              "error": {"code": -32602, "message": "Unknown tool " + str(name)}})


for line in sys.stdin:
    msg = json.loads(line)
    with open(log_path, "a") as f:
        f.write(json.dumps(msg) + "\n")
    method = msg.get("method")
    mid = msg.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "fake", "version": "1"}}})
    elif method == "ping" and mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "result": {}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid,
              "result": tools_page((msg.get("params") or {}).get("cursor"))})
    elif method == "tools/call":
        call(mid, msg.get("params") or {})
