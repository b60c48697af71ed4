#!/usr/bin/env python3
"""A scripted Docker Engine API on a unix socket, for what a real engine
will not do on demand.

    fake_engine.py SOCKET REQUESTS.jsonl [--busy-starts N] [--podman]
                   [--no-subids] [--remap]

Prints "listening 1" (no port: a socket) once it accepts connections on SOCKET. Every request
is appended to REQUESTS.jsonl as {"method": ..., "path": ...} (the path
without the /vX.Y or /vX.Y.Z/libpod prefix and the query; a create also
gives "userns", its HostConfig.UsernsMode or null). It answers like an
engine with one image and containers that exit at once; the first N
container starts fail as Podman's do when a published host port was taken
after the container was created ("bind: address already in use"). With
--podman it says it is Podman (Libpod-Api-Version); with --no-subids a
create that asks for a user namespace fails as a Podman without
subordinate ids for "containers" does; with --remap it is a Docker whose
daemon remaps user ids (userns-remap) to 165536.
"""

import json
import os
import socketserver
import sys
import threading
from http.server import BaseHTTPRequestHandler

BUSY = ("cannot listen on the TCP port: listen tcp4 127.0.0.1:40000: "
        "bind: address already in use")
NO_IDS = ("container create: creating container storage: could not find "
          "enough available IDs")


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
        body = json.loads(self.rfile.read(n) or b"null") if n else None
        parts = self.path.split("?")[0].split("/")
        if len(parts) > 1 and parts[1].startswith("v"):
            del parts[1]
            if len(parts) > 1 and parts[1] == "libpod":
                del parts[1]
        p = "/".join(parts)
        srv = self.server
        entry = {"method": method, "path": p}
        userns = None
        if p == "/containers/create":
            userns = (body or {}).get("HostConfig", {}).get("UsernsMode")
            entry["userns"] = userns
        with srv.lock:
            srv.log.write(json.dumps(entry) + "\n")
            srv.log.flush()
        if p == "/_ping":
            headers = {"Api-Version": "1.41"}
            if srv.podman:
                headers["Libpod-Api-Version"] = "4.3.1"
            return self.reply(200, "OK", headers)
        if p == "/info":
            info = {"SecurityOptions": ["name=seccomp,profile=default"],
                    "DockerRootDir": "/var/lib/docker"}
            if srv.remap:
                info["SecurityOptions"].append("name=userns")
                info["DockerRootDir"] = "/var/lib/docker/165536.165536"
            return self.reply(200, info)
        if p.startswith("/images/") and p.endswith("/json"):
            return self.reply(200, {"Config": {"Labels": {}}})
        if p == "/containers/create":
            if userns and srv.no_subids:
                return self.reply(500, {"message": NO_IDS})
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
    flags = {f: f in args for f in ("--podman", "--no-subids", "--remap")}
    args = [a for a in args if a not in flags]
    sock, log = args
    if os.path.exists(sock):
        os.unlink(sock)
    srv = Server(sock, Handler)
    srv.lock = threading.Lock()
    srv.log = open(log, "a")
    srv.created = 0
    srv.starts = 0
    srv.busy = busy
    srv.podman = flags["--podman"]
    srv.no_subids = flags["--no-subids"]
    srv.remap = flags["--remap"]
    print("listening 1", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
