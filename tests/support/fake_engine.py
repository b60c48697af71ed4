#!/usr/bin/env python3
"""A scripted Docker Engine API on a unix socket, for what a real engine
will not do on demand.

    fake_engine.py SOCKET REQUESTS.jsonl [--busy-starts N]

Prints "listening 1" (no port: a socket) once it accepts connections on SOCKET. Every request
is appended to REQUESTS.jsonl as {"method": ..., "path": ...} (the path
without the /vX.Y prefix and the query). It answers like an engine with one
image and containers that exit at once; the first N container starts fail
as Podman's do when a published host port was taken after the container
was created ("bind: address already in use").
"""

import json
import os
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler

BUSY = ("cannot listen on the TCP port: listen tcp4 127.0.0.1:40000: "
        "bind: address already in use")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake_engine/1"

    def log_message(self, fmt, *args):
        pass

    def address_string(self):
        return "unix"

    def reply(self, status, obj=None, headers=None):
        body = b"" if obj is None or status == 204 else json.dumps(obj).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def serve(self, method):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        parts = self.path.split("?")[0].split("/")
        if len(parts) > 1 and parts[1].startswith("v1."):
            del parts[1]
        p = "/".join(parts)
        srv = self.server
        with srv.lock:
            srv.log.write(json.dumps({"method": method, "path": p}) + "\n")
            srv.log.flush()
        if p == "/_ping":
            return self.reply(200, "OK", {"Api-Version": "1.41"})
        if p.startswith("/images/") and p.endswith("/json"):
            return self.reply(200, {"Config": {"Labels": {}}})
        if p == "/containers/create":
            with srv.lock:
                srv.created += 1
                cid = "c%d" % srv.created
            return self.reply(201, {"Id": cid, "Warnings": []})
        if p.startswith("/containers/") and p.endswith("/start"):
            with srv.lock:
                srv.starts += 1
                busy = srv.starts <= srv.busy
            if busy:
                return self.reply(500, {"message": BUSY})
            return self.reply(204)
        if p.startswith("/containers/") and p.endswith("/json"):
            return self.reply(200, {"State": {"Running": False,
                                              "Status": "exited",
                                              "ExitCode": 3},
                                    "NetworkSettings": {"Ports": {}}})
        if p.startswith("/containers/") and p.endswith("/logs"):
            return self.reply(200, None)
        if method == "DELETE" and p.startswith("/containers/"):
            return self.reply(204)
        return self.reply(404, {"message": "no such endpoint: " + p})

    def do_GET(self):
        self.serve("GET")

    def do_POST(self):
        self.serve("POST")

    def do_DELETE(self):
        self.serve("DELETE")


def main():
    args = sys.argv[1:]
    busy = 0
    if "--busy-starts" in args:
        i = args.index("--busy-starts")
        busy = int(args[i + 1])
        del args[i:i + 2]
    sock, log = args
    if os.path.exists(sock):
        os.unlink(sock)
    srv = Server(sock, Handler)
    srv.lock = threading.Lock()
    srv.log = open(log, "a")
    srv.created = 0
    srv.starts = 0
    srv.busy = busy
    print("listening 1", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
