#!/usr/bin/env python3
"""A loopback OTLP/HTTP receiver for tests: records what exporters POST.

    otlp_receiver.py REQUESTS.jsonl [--hang] [--status N]

Prints "listening PORT" on stdout once it accepts connections on
127.0.0.1. Every POST (any path) is appended to REQUESTS.jsonl as one line:

    {"n": 1, "path": "/v1/traces",
     "headers": {"content-type": "application/json", ...},   (lower-case)
     "body": {...} | null, "body_text": "..." (only when not JSON)}

and answered with STATUS (default 200) and the body {} (an OTLP
ExportTraceServiceResponse without partialSuccess). With --hang the request
is recorded and then never answered: the connection stays open until the
receiver is killed, like a collector that has stopped responding.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "otlp_receiver/1"

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        srv = self.server
        with srv.lock:
            srv.count += 1
            line = {"n": srv.count, "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body}
            if body is None:
                line["body_text"] = raw.decode("utf-8", "replace")
            srv.log.write(json.dumps(line) + "\n")
            srv.log.flush()
        if srv.hang:
            while True:
                time.sleep(3600)
        data = b"{}"
        self.send_response(srv.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def main(argv):
    if len(argv) < 2:
        sys.stderr.write("usage: otlp_receiver.py REQUESTS [--hang] "
                         "[--status N]\n")
        return 2
    hang = False
    status = 200
    rest = argv[2:]
    while rest:
        if rest[0] == "--hang":
            hang = True
            rest = rest[1:]
        elif rest[0] == "--status" and len(rest) > 1:
            status = int(rest[1])
            rest = rest[2:]
        else:
            sys.stderr.write("otlp_receiver.py: unknown argument %s\n"
                             % rest[0])
            return 2
    srv = Server(("127.0.0.1", 0), Handler)
    srv.hang = hang
    srv.status = status
    srv.log = open(argv[1], "a")
    srv.lock = threading.Lock()
    srv.count = 0
    sys.stdout.write("listening %d\n" % srv.server_address[1])
    sys.stdout.flush()
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
