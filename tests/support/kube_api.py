#!/usr/bin/env python3
"""A Kubernetes API server for the tests of sbx's kubernetes backend.

    kube_api.py WORKDIR KUBECONFIG_OUT LOG.jsonl [--token T] [--no-podman]
                [--namespace NS] [--watch-seconds S] [--probe-seconds S]
                [--history N]

Serves HTTPS on 127.0.0.1 (a free port) with a certificate for the IP
127.0.0.1 from a CA it makes with the openssl command in WORKDIR, and
requires "Authorization: Bearer T" (T random unless given). It writes a
kubeconfig (server, certificate-authority-data, token, namespace NS,
default "sbx-test") to KUBECONFIG_OUT, logs every request as a JSON line
(method, path, query, content_type, auth, body) to LOG.jsonl, and prints
"listening PORT" once it serves. SIGTERM: it removes every podman pod it
made and exits.

The API: /version, /api, /api/v1, /apis, /apis/networking.k8s.io[/v1];
pods and secrets (v1) and networkpolicies (networking.k8s.io/v1) in the
namespaces "default" and NS (others: 404): create (POST, application/json),
get, list (labelSelector, fieldSelector metadata.name/metadata.namespace/
status.phase), PATCH (application/merge-patch+json only, others 415; a
metadata.resourceVersion that is not the current one: 409 Conflict), DELETE
(DeleteOptions' preconditions and propagationPolicy; dependents named by
ownerReferences go too, as the garbage collector does, unless Orphan) and
watch (?watch=1 on a collection, or on one object's path: chunked JSON
lines ADDED/MODIFIED/DELETED after resourceVersion, without one the
objects there as ADDED first; with selectors, an object that stops or
starts matching is DELETED or ADDED, as on a real server; an RV older than the history: one ERROR event carrying a
410 Expired Status, in a 200 reply, as real API servers answer a watch; the
stream ends after timeoutSeconds, else after --watch-seconds, default 30).
Errors are Status objects with the real reasons (NotFound, AlreadyExists,
Conflict, Invalid with details.causes[].field, BadRequest, Unauthorized,
MethodNotAllowed, UnsupportedMediaType). Deleting a Pod first sets its
deletionTimestamp (MODIFIED), removes what runs it, then the Pod (DELETED).

Two requests no real server has, for tests (same token):
  POST /fixture/compact      forgets the event history: watches from any
                             earlier RV get the 410 ERROR event
  POST /fixture/end-watches  ends every open watch stream now

Running Pods (kube_podman.py): once every Secret a Pod's volumes name
exists, the Pod runs with `podman kube play --replace`, its container ports
published on 127.0.0.N (N from 20, an address of its own), its readiness
port (readinessProbe.tcpSocket) probed over TCP; then status.podIP is
127.0.0.N, phase Running, condition Ready "True". A probe unanswered for
--probe-seconds (default 60) fails the Pod (phase Failed, reason
ReadinessProbeTimeout). When its containers exit: Succeeded or Failed with
each container's state.terminated (exitCode, reason). A play that fails
leaves the Pod Pending with the container waiting (ErrImageNeverPull,
ErrImagePull or CreateContainerError, message from podman). --no-podman:
Pods are Running and Ready with their 127.0.0.N at once; nothing runs.

What podman 4.3.1 (Debian 12) does with the Pod sbx sends, and so how the
fixture adapts it before playing it (the API objects stay as sent):
  - JSON documents separated by "---" are accepted; ports with hostIP
    127.0.0.N and hostPort are published there (conmon holds the port,
    connections reach the container).
  - A Secret document is stored as a podman secret, but a secret volume
    gets each key's base64 text, not its decoded bytes; defaultMode is
    ignored (files 0644); and the volume is a named podman volume called
    after the Secret that outlives `podman kube down` and is reused, stale,
    by the next Pod naming that Secret. So the fixture does the kubelet's
    part: it writes each key decoded, with defaultMode (or the item's
    mode), into WORKDIR/pods/NAME/volumes/VOLUME and plays the volume as a
    hostPath. No podman secret is made.
  - emptyDir becomes a podman named volume called after the volume
    ("workspace"), shared by every Pod that names a volume so; sizeLimit is
    ignored. The fixture plays it as a hostPath directory of the Pod's
    own, so sizeLimit is not enforced here either.
  - Honoured as asked: securityContext capabilities drop ALL + add list,
    allowPrivilegeEscalation false (no_new_privs), seccompProfile
    RuntimeDefault, resources cpu and memory limits, restartPolicy Never
    (restart policy "no"), imagePullPolicy Never. Accepted and ignored:
    ephemeral-storage, readinessProbe (probed here instead),
    automountServiceAccountToken and enableServiceLinks (podman mounts no
    token and sets no service variables anyway).
  - An environment taken from a Secret (envFrom secretRef, env
    valueFrom secretKeyRef) fails: podman reads the Secret it stored as
    YAML back as JSON. The fixture writes the values into env, as the
    kubelet does; a Pod waits for those Secrets as for its volumes'.
    An httpGet readiness probe is probed as TCP on its port. $(NAME) in
    a command or its arguments is expanded from the environment. Secret
    volumes get the Pod's fsGroup as their files' group.
  - Init containers take the Pod's restart policy: under Always one is
    restarted as it ends and the play fails ("cannot remove ... as it is
    running"). A Pod with init containers and restartPolicy Always is
    played with OnFailure.
  - Nothing is pulled: every container is played with imagePullPolicy
    Never, so no test reaches a registry; an image that is not here fails
    the Pod at once (ErrImageNeverPull when the Pod asked for Never, else
    ErrImagePull).
  - podman needs catatonit for the pod's infra container.
"""

import argparse
import base64
import json
import os
import secrets as pysecrets
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=wrong-import-position
from kube_podman import Kubelet  # noqa: E402
from kube_store import (RESOURCES, ApiError, Store, bad_request,  # noqa: E402
                        fields_match, labels_match, parse_field_selector,
                        parse_label_selector)

BODY_MAX = 4 * 1024 * 1024
GROUP = "networking.k8s.io"


def verbs_resource(name, singular, kind, short):
    return {"name": name, "singularName": singular, "namespaced": True,
            "kind": kind, "verbs": ["create", "delete", "get", "list",
                                    "patch", "watch"], "shortNames": short}


DISCOVERY = {
    "/version": {"major": "1", "minor": "30", "gitVersion":
                 "v1.30.0-sbx-fixture", "gitCommit": "0" * 40,
                 "gitTreeState": "clean", "buildDate":
                 "2024-04-17T00:00:00Z", "goVersion": "go1.22.2",
                 "compiler": "gc", "platform": "linux/amd64"},
    "/api/v1": {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "v1", "resources": [
                    verbs_resource("pods", "pod", "Pod", ["po"]),
                    verbs_resource("secrets", "secret", "Secret", [])]},
    "/apis/networking.k8s.io/v1": {
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": GROUP + "/v1", "resources": [
            verbs_resource("networkpolicies", "networkpolicy",
                           "NetworkPolicy", ["netpol"])]},
}
GROUP_DOC = {"name": GROUP, "versions": [{"groupVersion": GROUP + "/v1",
                                          "version": "v1"}],
             "preferredVersion": {"groupVersion": GROUP + "/v1",
                                  "version": "v1"}}
DISCOVERY["/apis"] = {"kind": "APIGroupList", "apiVersion": "v1",
                      "groups": [GROUP_DOC]}
DISCOVERY["/apis/" + GROUP] = dict(GROUP_DOC, kind="APIGroup",
                                   apiVersion="v1")


def make_certs(workdir):
    """A CA and a server certificate for 127.0.0.1, made with openssl."""
    def ossl(*args):
        subprocess.run(["openssl"] + list(args), cwd=workdir, check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
          "-nodes"]
    ossl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt",
         "-days", "2", "-subj", "/CN=sbx-kube-fixture-ca")
    ossl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
         "-subj", "/CN=kube-apiserver")
    with open(os.path.join(workdir, "server.ext"), "w",
              encoding="utf-8") as f:
        f.write("subjectAltName=IP:127.0.0.1\n"
                "extendedKeyUsage=serverAuth\n")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey",
         "ca.key", "-CAcreateserial", "-out", "server.crt", "-days", "2",
         "-extfile", "server.ext")


def write_kubeconfig(path, port, ca_pem, token, namespace):
    """In kubectl's own layout (keys in order, block style)."""
    ca = base64.b64encode(ca_pem).decode()
    text = f"""apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: https://127.0.0.1:{port}
  name: sbx-fixture
contexts:
- context:
    cluster: sbx-fixture
    namespace: {namespace}
    user: sbx-fixture
  name: sbx-fixture
current-context: sbx-fixture
kind: Config
preferences: {{}}
users:
- name: sbx-fixture
  user:
    token: {token}
"""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class Log:
    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8")  # pylint: disable=R1732
        self.lock = threading.Lock()

    def write(self, entry):
        with self.lock:
            self.f.write(json.dumps(entry) + "\n")
            self.f.flush()


def parse_path(path):
    """(resource, namespace or None, name or None) or None."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest, group = parts[2:], "v1"
    elif parts[:3] == ["apis", GROUP, "v1"]:
        rest, group = parts[3:], GROUP + "/v1"
    else:
        return None
    ns = None
    if len(rest) >= 2 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not 1 <= len(rest) <= 2 or rest[0] not in RESOURCES or \
            RESOURCES[rest[0]][0] != group or (ns is None and len(rest) == 2):
        return None
    return rest[0], ns, rest[1] if len(rest) == 2 else None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sbx-kube-fixture"
    fx = None  # the Fixture

    def log_message(self, format, *args):  # pylint: disable=W0622
        pass

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_PUT(self):
        self.dispatch("PUT")

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > BODY_MAX:
            self.close_connection = True
            raise ApiError(413, "RequestEntityTooLarge",
                           "the request is too large")
        return self.rfile.read(n) if n > 0 else b""

    def dispatch(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in
                 urllib.parse.parse_qs(url.query,
                                       keep_blank_values=True).items()}
        ctype = (self.headers.get("Content-Type") or "").split(";")[0] \
            .strip().lower()
        auth = self.headers.get("Authorization") or ""
        authed = auth == "Bearer " + self.fx.token
        try:
            raw = self.read_body()
        except ApiError as e:
            self.send_json(e.code, e.status())
            return
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        self.fx.log.write({"method": method, "path": url.path,
                           "query": query, "content_type": ctype,
                           "auth": "ok" if authed else
                           ("wrong" if auth else "none"), "body": body})
        try:
            if not authed:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            if isinstance(body, str):
                raise bad_request("the body is not JSON")
            self.route(method, url.path, query, ctype, body)
        except ApiError as e:
            self.send_json(e.code, e.status())
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
        except Exception as e:  # pylint: disable=broad-except
            traceback.print_exc()
            self.send_json(500, ApiError(500, "InternalError",
                                         f"fixture error: {e!r}").status())

    def route(self, method, path, query, ctype, body):
        path = path.rstrip("/") or "/"
        if path in DISCOVERY or path == "/api":
            if method != "GET":
                raise not_allowed(method)
            doc = DISCOVERY.get(path) or {
                "kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0",
                     "serverAddress": f"127.0.0.1:{self.fx.port}"}]}
            self.send_json(200, doc)
            return
        if path in ("/fixture/compact", "/fixture/end-watches") and \
                method == "POST":
            (self.fx.store.compact if path.endswith("compact")
             else self.fx.store.end_watches)()
            self.send_json(200, {"kind": "Status", "apiVersion": "v1",
                                 "metadata": {}, "status": "Success"})
            return
        target = parse_path(path)
        if target is None:
            raise ApiError(404, "NotFound", "the server could not find the "
                           "requested resource", {})
        resource, ns, name = target
        self.resource_call(method, resource, ns, name, query, ctype, body)

    def resource_call(self, method, resource, ns, name, query, ctype, body):
        store = self.fx.store
        if method == "GET" and query.get("watch") in ("1", "true"):
            if name is not None:  # the older form of a one-object watch
                query["fieldSelector"] = ",".join(
                    s for s in (query.get("fieldSelector"),
                                "metadata.name=" + name) if s)
            self.watch(resource, ns, query)
        elif method == "GET" and name is None:
            self.send_json(200, store.list(
                resource, ns, parse_label_selector(query.get("labelSelector")),
                parse_field_selector(query.get("fieldSelector"), resource)))
        elif method == "GET":
            self.send_json(200, store.get(resource, ns, name))
        elif method == "POST" and name is None and ns is not None:
            need_type(ctype, ("application/json",))
            if not isinstance(body, dict):
                raise bad_request("the body must be a JSON object")
            self.send_json(201, store.create(resource, ns, body))
        elif method == "PATCH" and name is not None:
            need_type(ctype, ("application/merge-patch+json",))
            self.send_json(200, store.patch(resource, ns, name, body))
        elif method == "DELETE" and name is not None:
            self.delete(resource, ns, name, query, body)
        else:
            raise not_allowed(method)

    def delete(self, resource, ns, name, query, body):
        opts = body if isinstance(body, dict) else {}
        policy = opts.get("propagationPolicy") or \
            query.get("propagationPolicy") or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" '
                           f'is invalid: propagationPolicy: Unsupported '
                           f'value: "{policy}"', {"causes": [{
                               "reason": "FieldValueNotSupported",
                               "field": "propagationPolicy"}]})
        precond = opts.get("preconditions")
        orphan = policy == "Orphan"
        if resource != "pods":
            gone = self.fx.store.delete(resource, ns, name, precond, orphan)
            self.send_json(200, {
                "kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Success", "details": {
                    "name": name, "kind": resource,
                    "uid": gone["metadata"]["uid"]}})
            return
        grace = opts.get("gracePeriodSeconds", 30)
        pod = self.fx.store.mark_deleting(ns, name, precond, grace)
        uid = pod["metadata"]["uid"]

        def finish():
            self.fx.kubelet.stop_pod(uid)
            try:
                self.fx.store.delete("pods", ns, name, None, orphan, uid)
            except ApiError:
                pass
        if self.fx.podman:
            threading.Thread(target=finish, daemon=True).start()
        else:
            finish()
        self.send_json(200, pod)

    def watch(self, resource, ns, query):
        store = self.fx.store
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"), resource)
        if ns is not None:
            store.check_namespace(ns)
        try:
            seconds = float(query.get("timeoutSeconds") or
                            self.fx.watch_seconds)
        except ValueError:
            raise bad_request("timeoutSeconds: not a number") from None
        rv_text = query.get("resourceVersion") or "0"
        if not rv_text.isdigit():
            raise bad_request(f"invalid resource version: {rv_text!r}")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.close_connection = True
        deadline = time.monotonic() + seconds
        with store.cond:
            epoch = store.watch_epoch
            rv = int(rv_text)
            if rv == 0:
                initial = store.list(resource, ns, labels, fields)
                rv = int(initial["metadata"]["resourceVersion"])
                pending = [("ADDED", dict(o, apiVersion=RESOURCES[resource][0],
                                          kind=RESOURCES[resource][1]))
                           for o in initial["items"]]
            else:
                pending = []
        try:
            self.stream(resource, ns, labels, fields, rv, pending, deadline,
                        epoch)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass

    def stream(self, resource, ns, labels, fields, rv, pending, deadline,
               epoch):
        store = self.fx.store
        while True:
            for typ, obj in pending:
                self.chunk({"type": typ, "object": obj})
            if any(t == "ERROR" for t, _ in pending):
                return
            with store.cond:
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0 or store.watch_epoch != epoch or \
                            self.fx.stopping:
                        return
                    events = store.events_since(rv)
                    if events is None:
                        pending = [("ERROR", expired(rv, store.compacted))]
                        break
                    if events:
                        rv = events[-1][0]
                        pending = [e for e in (
                            seen(ev, resource, ns, labels, fields)
                            for ev in events) if e]
                        if pending:
                            break
                        continue
                    store.cond.wait(min(left, 1.0))

    def chunk(self, event):
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def seen(ev, resource, ns, labels, fields):
    """What a watch with these selectors sees of event EV, or None."""
    _, res, ev_ns, typ, old, new = ev
    if res != resource or ns not in (None, ev_ns):
        return None

    def match(o):
        return o is not None and \
            labels_match(labels, o["metadata"].get("labels")) and \
            fields_match(fields, o)
    if typ == "DELETED":
        return (typ, new) if match(new) else None
    was, now = match(old), match(new)
    if typ == "MODIFIED" and was and not now:
        return ("DELETED", new)
    if typ == "MODIFIED" and now and not was:
        return ("ADDED", new)
    return (typ, new) if now else None


def expired(rv, oldest):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message":
            f"too old resource version: {rv} ({oldest})",
            "reason": "Expired", "code": 410}


def not_allowed(method):
    return ApiError(405, "MethodNotAllowed", f"the server does not allow "
                    f"this method on the requested resource ({method})", {})


def need_type(ctype, allowed):
    if ctype not in allowed:
        raise ApiError(415, "UnsupportedMediaType", f'the body of the '
                       f'request was in an unknown format - accepted media '
                       f'types include: {", ".join(allowed)}', {})


class TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    ctx = None

    def finish_request(self, request, client_address):
        """The TLS handshake in the request's own thread."""
        request.settimeout(30)
        try:
            tls = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        tls.settimeout(None)
        super().finish_request(tls, client_address)


class Fixture:
    def __init__(self, args):
        self.token = args.token or pysecrets.token_hex(16)
        self.podman = not args.no_podman
        self.watch_seconds = args.watch_seconds
        self.stopping = False
        self.log = Log(args.log)
        self.store = Store({"default", args.namespace}, args.history)
        self.kubelet = Kubelet(self.store, args.workdir, self.podman,
                               args.probe_seconds)
        self.port = 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("kubeconfig")
    ap.add_argument("log")
    ap.add_argument("--token")
    ap.add_argument("--no-podman", action="store_true")
    ap.add_argument("--namespace", default="sbx-test")
    ap.add_argument("--watch-seconds", type=float, default=30)
    ap.add_argument("--probe-seconds", type=float, default=60)
    ap.add_argument("--history", type=int, default=1000)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    make_certs(args.workdir)
    fx = Fixture(args)
    Handler.fx = fx
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(args.workdir, "server.crt"),
                        os.path.join(args.workdir, "server.key"))
    ctx.set_alpn_protocols(["http/1.1"])
    TLSServer.ctx = ctx
    srv = TLSServer(("127.0.0.1", 0), Handler)
    srv.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    fx.port = srv.server_address[1]
    with open(os.path.join(args.workdir, "ca.crt"), "rb") as f:
        write_kubeconfig(args.kubeconfig, fx.port, f.read(), fx.token,
                         args.namespace)

    def stop(signum, frame):  # pylint: disable=unused-argument
        fx.stopping = True
        fx.store.end_watches()
        threading.Thread(target=srv.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"listening {fx.port}", flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    finally:
        fx.kubelet.shutdown()


if __name__ == "__main__":
    main()
