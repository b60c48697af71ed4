"""The kubelet of the Kubernetes fixture API server (kube_api.py).

Runs each Pod whose Secret volumes all exist with `podman kube play`, probes
its readiness port, reports its status (Running, Ready, the podIP, each
container's state) and notices containers that exit. Without podman
(--no-podman) a Pod is marked Running and Ready at once and nothing runs.

Each Pod gets a loopback address of its own, 127.0.0.N (N from 20), held by
an flock on a file under the temporary directory so that fixtures running at
the same time never share one. What podman 4.3 does with a Pod and how the
Pod is adapted before it is played is told at the top of kube_api.py.
"""

import base64
import copy
import fcntl
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from kube_store import now_rfc3339

FIRST_ADDR = 20
LAST_ADDR = 250
ADDR_LOCKS = os.path.join(tempfile.gettempdir(), "sbx-kube-fixture-addrs")


class Addresses:
    """Loopback addresses 127.0.0.N, each held by an flock while in use."""

    def __init__(self):
        os.makedirs(ADDR_LOCKS, exist_ok=True)
        self.held = {}  # address -> fd
        self.lock = threading.Lock()

    def take(self, ports):
        with self.lock:
            for n in range(FIRST_ADDR, LAST_ADDR + 1):
                addr = f"127.0.0.{n}"
                if addr in self.held:
                    continue
                fd = os.open(os.path.join(ADDR_LOCKS, addr),
                             os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                if all(port_free(addr, p) for p in ports):
                    self.held[addr] = fd
                    return addr
                os.close(fd)
            raise RuntimeError("no free loopback address in 127.0.0.20-250")

    def give(self, addr):
        with self.lock:
            fd = self.held.pop(addr, None)
            if fd is not None:
                os.close(fd)


def port_free(addr, port):
    s = socket.socket()
    try:
        s.bind((addr, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def run(argv, timeout=120):
    """Runs ARGV: (exit status, its output and errors together)."""
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, check=False)
        return p.returncode, p.stdout.decode(errors="replace").strip()
    except subprocess.TimeoutExpired:
        return -1, f"{argv[0]} {argv[1]} timed out after {timeout} s"
    except OSError as e:
        return -1, f"{argv[0]}: {e}"


def write_secret_volume(path, secret, src, fs_group=None):
    """Writes SECRET's data into PATH as the kubelet does: each key (or
    each of SRC's items) a file of DEFAULTMODE (0644 unless set), of the
    group FS_GROUP (the Pod's securityContext.fsGroup) when there is one."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    data = {k: base64.b64decode(v)
            for k, v in (secret.get("data") or {}).items()}
    mode = src.get("defaultMode", 0o644)
    items = src.get("items") or [{"key": k, "path": k} for k in data]
    for it in items:
        if it["key"] not in data:
            continue
        f = os.path.join(path, it["path"])
        os.makedirs(os.path.dirname(f), exist_ok=True)
        with open(f, "wb") as out:
            out.write(data[it["key"]])
        os.chmod(f, it.get("mode", mode))
        if fs_group is not None:
            os.chown(f, -1, fs_group)


def secret_names(spec):
    """The Secrets SPEC's volumes and containers' environments name, each
    with whether it is optional."""
    names = {}
    for v in spec.get("volumes") or []:
        src = v.get("secret")
        if src:
            names[src["secretName"]] = bool(src.get("optional"))
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        for f in c.get("envFrom") or []:
            ref = f.get("secretRef")
            if ref:
                names[ref["name"]] = bool(ref.get("optional"))
        for e in c.get("env") or []:
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names[ref["name"]] = bool(ref.get("optional"))
    return names


def secret_value(secret, key):
    data = (secret or {}).get("data") or {}
    return base64.b64decode(data[key]).decode() if key in data else None


def resolve_env(c, secrets):
    """C's environment with what it takes from Secrets written out, as the
    kubelet does (podman 4.3 reads a kube-played Secret back as JSON, which
    it stored as YAML, and fails)."""
    env = []
    for f in c.pop("envFrom", None) or []:
        ref = f.get("secretRef")
        if not ref:
            continue
        data = (secrets.get(ref["name"]) or {}).get("data") or {}
        prefix = f.get("prefix", "")
        env += [{"name": prefix + k, "value": secret_value(
            secrets[ref["name"]], k)} for k in sorted(data)]
    for e in c.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if ref:
            v = secret_value(secrets.get(ref["name"]), ref["key"])
            if v is None:
                continue
            e = {"name": e["name"], "value": v}
        env.append(e)
    if env:
        c["env"] = env
    # $(NAME) in the command and arguments, as the kubelet expands them.
    values = {e["name"]: e.get("value", "") for e in env}
    for key in ("command", "args"):
        if key in c:
            c[key] = [expand(a, values) for a in c[key]]


def expand(text, values):
    """TEXT with each $(NAME) of VALUES replaced ($$ is a $), as the
    kubelet expands a container's command and arguments."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2:end]
            out.append(values[name] if name in values else text[i:end + 1])
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def play_document(pod, addr, voldir, secrets):
    """The Pod as podman plays it (see the adaptations in kube_api.py)."""
    meta = pod["metadata"]
    doc = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": meta["name"],
                        "labels": copy.deepcopy(meta.get("labels") or {}),
                        "annotations": copy.deepcopy(
                            meta.get("annotations") or {})},
           "spec": copy.deepcopy(pod["spec"])}
    spec = doc["spec"]
    for c in spec["containers"]:
        for p in c.get("ports") or []:
            p["hostIP"], p["hostPort"] = addr, p["containerPort"]
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        resolve_env(c, secrets)
        # Tests never pull: an image that is not here fails at once,
        # reported as ErrImagePull unless the Pod asked for Never.
        c["imagePullPolicy"] = "Never"
    # podman 4.3 gives init containers the Pod's restart policy: under
    # Always (a Deployment's) one is restarted as it ends and the play
    # fails; OnFailure lets a finished one be.
    if spec.get("initContainers") and \
            spec.get("restartPolicy", "Always") == "Always":
        spec["restartPolicy"] = "OnFailure"
    vols = []
    for v in spec.get("volumes") or []:
        path = os.path.join(voldir, v["name"])
        if "secret" in v:
            src = v["secret"]
            write_secret_volume(path, secrets[src["secretName"]], src,
                                (spec.get("securityContext") or {})
                                .get("fsGroup"))
            vols.append({"name": v["name"],
                         "hostPath": {"path": path, "type": "Directory"}})
        elif "emptyDir" in v:
            os.makedirs(path, mode=0o777, exist_ok=True)
            os.chmod(path, 0o777)
            vols.append({"name": v["name"],
                         "hostPath": {"path": path, "type": "Directory"}})
        else:
            vols.append(v)
    spec["volumes"] = vols
    return doc


def ready_port(c):
    """The TCP port of container C's readiness probe (tcpSocket, or the
    port of an httpGet probed as TCP), or None."""
    rp = c.get("readinessProbe") or {}
    port = (rp.get("tcpSocket") or rp.get("httpGet") or {}).get("port")
    if isinstance(port, str):
        port = next((p["containerPort"] for p in c.get("ports") or []
                     if p.get("name") == port), None)
    return port


def probe(addr, port):
    try:
        with socket.create_connection((addr, port), timeout=1):
            return True
    except OSError:
        return False


class Kubelet:
    """Runs Pods (with podman or, without, pretends) and reports them."""

    def __init__(self, store, workdir, use_podman, probe_seconds=60):
        self.store = store
        self.workdir = workdir
        self.podman = use_podman
        self.probe_seconds = probe_seconds
        self.addrs = Addresses()
        self.pods = {}  # uid -> dict(ns, name, addr, state, containers)
        self.lock = threading.Lock()
        self.stopping = False
        store.listeners.append(self.on_event)
        if use_podman:
            threading.Thread(target=self.monitor, daemon=True).start()

    # Called under the store's condition: never blocks.
    def on_event(self, resource, typ, obj):
        if typ == "DELETED" or resource not in ("pods", "secrets"):
            return
        ns = obj["metadata"]["namespace"]
        pods = [obj] if resource == "pods" else \
            [o for (r, n, _), o in self.store.objects.items()
             if r == "pods" and n == ns]
        for pod in pods:
            self.maybe_start(pod)

    def maybe_start(self, pod):
        uid = pod["metadata"]["uid"]
        if uid in self.pods or pod["metadata"].get("deletionTimestamp"):
            return
        ns = pod["metadata"]["namespace"]
        secrets = {}
        for name, optional in secret_names(pod["spec"]).items():
            s = self.store.objects.get(("secrets", ns, name))
            if s is None:
                if optional:
                    continue
                return  # Pending until it exists, as on a real node
            secrets[name] = copy.deepcopy(s)
        with self.lock:
            self.pods[uid] = {"ns": ns, "name": pod["metadata"]["name"],
                              "addr": None, "state": "starting",
                              "played": threading.Event(),
                              "containers": [c["name"] for c in
                                             pod["spec"]["containers"]]}
        threading.Thread(target=self.start, daemon=True,
                         args=(copy.deepcopy(pod), secrets)).start()

    def status(self, uid, fn):
        p = self.pods.get(uid)
        if p is None:
            return False
        return self.store.set_status(p["ns"], p["name"], uid, fn)

    def start(self, pod, secrets):
        p = self.pods.get(pod["metadata"]["uid"])
        try:
            self.start_pod(p, pod, secrets)
        finally:
            p["played"].set()

    def start_pod(self, p, pod, secrets):
        uid = pod["metadata"]["uid"]
        containers = pod["spec"]["containers"]
        ports = [p["containerPort"] for c in containers
                 for p in c.get("ports") or []]
        try:
            addr = self.addrs.take(ports)
        except RuntimeError as e:
            self.status(uid, lambda s: waiting(s, containers,
                                               "CreateContainerError", str(e)))
            return
        p["addr"] = addr
        if p["state"] == "deleted":
            return
        if not self.podman:
            self.status(uid, lambda s: running(s, containers, addr, {}))
            self.status(uid, lambda s: set_ready(s, True))
            p["state"] = "ready"
            return
        err = self.play(pod, addr, secrets)
        if p["state"] == "deleted":
            # Deleted while it was being played: what the play made is
            # removed here, as the delete found nothing yet.
            run(["podman", "pod", "rm", "-f", "-i", "-t", "0",
                 pod["metadata"]["name"]])
            return
        if err:
            reason = "CreateContainerError"
            if "image not known" in err or "unable to find" in err.lower():
                reason = "ErrImageNeverPull" if containers[0].get(
                    "imagePullPolicy") == "Never" else "ErrImagePull"
            p["state"] = "failed"
            self.status(uid, lambda s: waiting(s, containers, reason, err))
            return
        ids = self.container_ids(pod["metadata"]["name"], containers)
        self.status(uid, lambda s: running(s, containers, addr, ids))
        p["state"] = "probing"
        self.wait_ready(uid, pod, addr)

    def play(self, pod, addr, secrets):
        name = pod["metadata"]["name"]
        pdir = os.path.join(self.workdir, "pods", name)
        shutil.rmtree(pdir, ignore_errors=True)
        os.makedirs(pdir)
        doc = play_document(pod, addr, os.path.join(pdir, "volumes"),
                            secrets)
        path = os.path.join(pdir, "play.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
        rc, out = run(["podman", "kube", "play", "--replace", path])
        if rc != 0:
            run(["podman", "pod", "rm", "-f", "-i", "-t", "0", name])
            return out or f"podman kube play exited with {rc}"
        return None

    @staticmethod
    def container_ids(name, containers):
        ids = {}
        for c in containers:
            rc, out = run(["podman", "inspect", "--format", "{{.Id}}",
                           f"{name}-{c['name']}"], timeout=30)
            if rc == 0:
                ids[c["name"]] = "podman://" + out
        return ids

    def wait_ready(self, uid, pod, addr):
        ports = [ready_port(c) for c in pod["spec"]["containers"]]
        ports = [p for p in ports if p]
        deadline = time.monotonic() + self.probe_seconds
        while True:
            p = self.pods.get(uid)
            if p is None or p["state"] != "probing" or self.stopping:
                return
            if all(probe(addr, port) for port in ports):
                if self.status(uid, lambda s: set_ready(s, True)):
                    p["state"] = "ready"
                return
            if time.monotonic() > deadline:
                msg = (f"readiness probe: {addr} port(s) {ports} did not "
                       f"answer within {self.probe_seconds} s")
                p["state"] = "failed"
                self.status(uid, lambda s: probe_failed(s, msg))
                return
            time.sleep(0.2)

    def monitor(self):
        """Every 0.5 s: containers of running Pods that exited."""
        while not self.stopping:
            time.sleep(0.5)
            with self.lock:
                live = {p["name"]: (uid, p) for uid, p in self.pods.items()
                        if p["state"] in ("probing", "ready")}
            if not live:
                continue
            argv = ["podman", "ps", "-a", "--format", "json"]
            for name in live:
                argv += ["--filter", f"pod={name}"]
            rc, out = run(argv, timeout=30)
            try:
                rows = json.loads(out) if rc == 0 else []
            except ValueError:
                rows = []
            self.check_exits(live, rows)

    def check_exits(self, live, rows):
        for name, (uid, p) in live.items():
            states = {}
            for r in rows:
                cname = (r.get("Names") or [""])[0]
                if cname.startswith(name + "-") and \
                        cname[len(name) + 1:] in p["containers"]:
                    states[cname[len(name) + 1:]] = r
            done = {c: r for c, r in states.items()
                    if r.get("State") in ("exited", "stopped")}
            if not done or len(done) < len(p["containers"]) or \
                    p["state"] not in ("probing", "ready"):
                continue
            p["state"] = "terminated"
            self.status(uid, lambda s, d=done: terminated(s, d))

    def stop_pod(self, uid):
        """Removes what was made for the Pod of UID (its podman pod, its
        volumes, its address). Blocks."""
        with self.lock:
            p = self.pods.pop(uid, None)
        if p is None:
            return
        p["state"] = "deleted"
        p["played"].wait(180)
        if self.podman:
            run(["podman", "pod", "rm", "-f", "-i", "-t", "0", p["name"]])
            shutil.rmtree(os.path.join(self.workdir, "pods", p["name"]),
                          ignore_errors=True)
        if p["addr"]:
            self.addrs.give(p["addr"])

    def shutdown(self):
        """Removes every podman pod made (SIGTERM)."""
        self.stopping = True
        deadline = time.monotonic() + 3
        with self.lock:
            pods = list(self.pods.values())
            self.pods.clear()
        for p in pods:
            p["state"] = "deleted"
            p["played"].wait(max(0.0, deadline - time.monotonic()))
        if not self.podman:
            return
        rms = [threading.Thread(target=run, args=(
            ["podman", "pod", "rm", "-f", "-i", "-t", "0", p["name"]],))
            for p in pods]
        for t in rms:
            t.start()
        for t in rms:
            t.join()
        for p in pods:
            shutil.rmtree(os.path.join(self.workdir, "pods", p["name"]),
                          ignore_errors=True)


def waiting(s, containers, reason, message):
    s["phase"] = "Pending"
    s["conditions"] = conditions(False, "ContainersNotReady",
                                 "containers with unready status")
    s["containerStatuses"] = [
        {"name": c["name"], "image": c.get("image", ""), "imageID": "",
         "ready": False, "started": False, "restartCount": 0,
         "state": {"waiting": {"reason": reason, "message": message}}}
        for c in containers]


def running(s, containers, addr, ids):
    t = now_rfc3339()
    s.update(phase="Running", hostIP="127.0.0.1", hostIPs=[{"ip":
                                                             "127.0.0.1"}],
             podIP=addr, podIPs=[{"ip": addr}], startTime=t)
    s["conditions"] = conditions(False, "ContainersNotReady",
                                 "containers with unready status")
    s["containerStatuses"] = [
        {"name": c["name"], "image": c.get("image", ""), "imageID": "",
         "containerID": ids.get(c["name"], ""), "ready": False,
         "started": True, "restartCount": 0,
         "state": {"running": {"startedAt": t}}} for c in containers]


def set_ready(s, ready):
    s["conditions"] = conditions(ready, None if ready else
                                 "ContainersNotReady", None)
    for cs in s.get("containerStatuses") or []:
        cs["ready"] = ready


def probe_failed(s, msg):
    s["phase"] = "Failed"
    s["reason"] = "ReadinessProbeTimeout"
    s["message"] = msg
    set_ready(s, False)


def terminated(s, done):
    codes = []
    for cs in s.get("containerStatuses") or []:
        r = done.get(cs["name"])
        if r is None:
            continue
        code = int(r.get("ExitCode") or 0)
        codes.append(code)
        started = (cs.get("state") or {}).get("running", {}) \
            .get("startedAt", now_rfc3339())
        cs["state"] = {"terminated": {
            "exitCode": code, "reason": "Completed" if code == 0 else
            ("OOMKilled" if r.get("OOMKilled") else "Error"),
            "startedAt": started, "finishedAt": now_rfc3339(),
            "containerID": cs.get("containerID", "")}}
        cs["ready"], cs["started"] = False, False
    s["phase"] = "Succeeded" if all(c == 0 for c in codes) else "Failed"
    s["conditions"] = conditions(False, "PodCompleted", None)


def conditions(ready, reason, message):
    t = now_rfc3339()
    out = []
    for typ in ("Initialized", "Ready", "ContainersReady", "PodScheduled"):
        ok = ready or typ in ("Initialized", "PodScheduled")
        c = {"type": typ, "status": "True" if ok else "False",
             "lastProbeTime": None, "lastTransitionTime": t}
        if not ok and reason:
            c["reason"] = reason
            if message:
                c["message"] = message
        out.append(c)
    return out
