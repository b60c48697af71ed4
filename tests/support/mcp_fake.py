#!/usr/bin/env python3
"""A small MCP server for the tests of what the real servers do not do on
demand: crash, hang, change their tool list, send too much.

    mcp_fake.py LOG.jsonl            over stdio
    mcp_fake.py LOG.jsonl --http     over Streamable HTTP on 127.0.0.1:
                                     prints "listening PORT", serves /mcp
    mcp_fake.py --run-http INDEX.js  runs server-everything's Streamable
                                     HTTP server (node INDEX.js) on a free
                                     port, prints "listening PORT" once it
                                     answers, and stops it on SIGTERM

Every message it receives is appended to LOG.jsonl. It answers initialize
(protocol 2025-06-18), ping, tools/list (two pages) and tools/call:

    add {a, b}      the sum as text; sends a progress notification and a
                    ping request of its own first
    grow {}         adds the tool "extra" and says
                    notifications/tools/list_changed: before its reply over
                    stdio, on the GET stream over HTTP
    extra {}        "extra ran" (listed only after grow)
    crash {}        exits with status 3 without answering
    hang {}         never answers (a notifications/cancelled is logged)
    big {}          answers with a line over 4 MiB
    elsewhere {}    HTTP only: its POST stream gives one event with an id
                    and ends; the reply ("came elsewhere") comes 0.3 s later
                    on the listener's GET stream (the one without
                    Last-Event-ID), never on the resumed one
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log_path = sys.argv[1]
grown = False
out = threading.local()  # where send() writes: stdout, or an HTTP reply


def log(entry):
    with open(log_path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def send(msg):
    sink = getattr(out, "sink", None)
    if sink is not None:
        sink.append(msg)
        return
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def tool(name, desc):
    return {"name": name, "description": desc,
            "inputSchema": {"type": "object", "properties": {
                "a": {"type": "number"}, "b": {"type": "number"}}}}


def tools_page(cursor):
    first = [tool("add", "Adds a and b."), tool("grow", "Adds a tool.")]
    rest = [tool("crash", "Exits."), tool("hang", "Never answers."),
            tool("big", "Answers too much."),
            tool("elsewhere", "Answers on the GET stream.")]
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
        changed = {"jsonrpc": "2.0",
                   "method": "notifications/tools/list_changed"}
        if getattr(out, "sink", None) is None:
            send(changed)  # stdio: before the reply, as SDK servers do
        else:
            push(changed)  # HTTP: on the GET stream
        text("grown")
    elif name == "extra" and grown:
        text("extra ran")
    elif name == "crash":
        os._exit(3)
    elif name == "hang":
        if getattr(out, "sink", None) is not None:
            time.sleep(3600)
    elif name == "big":
        text("x" * (5 << 20))
    elif name == "elsewhere" and getattr(out, "sink", None) is not None:
        reply = {"jsonrpc": "2.0", "id": mid, "result": {
            "content": [{"type": "text", "text": "came elsewhere"}]}}
        threading.Timer(0.3, push, (reply, False)).start()
        out.elsewhere = True
    else:
        send({"jsonrpc": "2.0", "id": mid,
              "error": {"code": -32602, "message": "Unknown tool " + str(name)}})


def handle(msg):
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


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def headers_seen(self):
        return {k.lower(): v for k, v in self.headers.items()
                if k.lower() in ("mcp-session-id", "mcp-protocol-version",
                                 "x-test", "accept", "content-type")}

    def do_GET(self):
        resumed = self.headers.get("Last-Event-ID") is not None
        log({"http": "GET", "headers": self.headers_seen(),
             "resumed": resumed})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        with streams_cv:
            streams.append((self.wfile, resumed))
            streams_cv.notify_all()
        time.sleep(3600)

    def do_DELETE(self):
        log({"http": "DELETE", "headers": self.headers_seen()})
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        msg = json.loads(body)
        entry = dict(msg)
        entry["headers"] = self.headers_seen()
        log(entry)
        out.sink = []
        out.elsewhere = False
        handle(msg)
        replies, out.sink = out.sink, None
        if out.elsewhere:
            data = b"id: e1\nretry: 100\ndata:\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if "id" not in msg or "method" not in msg:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if msg.get("method") == "tools/call":
            # As an event stream: what came before the reply, then it.
            data = "".join("event: message\ndata: %s\n\n" % json.dumps(r)
                           for r in replies).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
        else:
            data = json.dumps(replies[-1]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        if msg.get("method") == "initialize":
            self.send_header("Mcp-Session-Id", "sess-1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


streams = []  # the open GET streams (HTTP)
streams_cv = threading.Condition()


def push(msg, pause=True):
    """Sends MSG on the listener's GET streams (waiting up to 5 s for one),
    then, with PAUSE, gives the client a moment to read it before the
    reply that follows."""
    with streams_cv:
        streams_cv.wait_for(lambda: streams, timeout=5)
        for w, resumed in streams:
            if resumed:
                continue
            try:
                w.write(("event: message\ndata: %s\n\n" % json.dumps(msg))
                        .encode())
                w.flush()
            except OSError:
                pass
    if pause:
        time.sleep(0.5)


def run_everything(index_js):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = dict(os.environ, PORT=str(port))
    child = subprocess.Popen(["node", index_js, "streamableHttp"], env=env,
                             stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    signal.signal(signal.SIGTERM, lambda *a: (child.kill(), os._exit(0)))
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    print("listening %d" % port, flush=True)
    child.wait()


if sys.argv[1] == "--run-http":
    run_everything(sys.argv[2])
elif len(sys.argv) > 2 and sys.argv[2] == "--http":
    class Server(ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # a client that left mid-reply (sbx stops reading)

    srv = Server(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print("listening %d" % srv.server_address[1], flush=True)
    srv.serve_forever()
else:
    for line in sys.stdin:
        msg = json.loads(line)
        log(msg)
        handle(msg)
