"""The object store of the Kubernetes fixture API server (kube_api.py).

Pods, Secrets and NetworkPolicies by (resource, namespace, name), one global
resourceVersion counter, the event history that watches read, and the
validation the real API server does for the fields sbx sends. Every method
takes the store's condition (self.cond); watchers wait on it.

What is validated is what a real API server validates, nothing more: object
names (DNS-1123), label keys and values, ownerReferences' required fields,
the required fields of a Pod (containers, their names and images), volume
and port shapes, Secret data keys, the base64 of Secret data (a decode
error: 400, as the real server's JSON decoder answers), NetworkPolicy
policyTypes. Pod specs are immutable through PATCH except for what the real
server allows (here: nothing in spec), as on a real server.
"""

import base64
import binascii
import copy
import datetime
import re
import threading
import uuid

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case "
                 "alphanumeric characters, '-' or '.', and must start and end "
                 "with an alphanumeric character (e.g. 'example.com', regex "
                 "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-"
                 "z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case "
             "alphanumeric characters or '-', and must start and end with an "
             "alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
             "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")

# resource -> (apiVersion, kind, list kind)
RESOURCES = {
    "pods": ("v1", "Pod", "PodList"),
    "secrets": ("v1", "Secret", "SecretList"),
    "networkpolicies": ("networking.k8s.io/v1", "NetworkPolicy",
                        "NetworkPolicyList"),
}
SECRET_MAX_BYTES = 1024 * 1024


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """A failure answered with a Status object."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details

    def status(self):
        s = {"kind": "Status", "apiVersion": "v1", "metadata": {},
             "status": "Failure", "message": self.message,
             "reason": self.reason, "code": self.code}
        if self.details is not None:
            s["details"] = self.details
        return s


def not_found(resource, name):
    return ApiError(404, "NotFound", f'{resource} "{name}" not found',
                    {"name": name, "kind": resource})


def conflict(resource, name):
    return ApiError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": the object '
        "has been modified; please apply your changes to the latest version "
        "and try again", {"name": name, "kind": resource})


def bad_request(message):
    return ApiError(400, "BadRequest", message)


class Invalid:
    """Collects field errors; raise_for() turns them into a 422 Status."""

    def __init__(self):
        self.causes = []

    def add(self, field, message, reason="FieldValueInvalid"):
        self.causes.append({"reason": reason, "message": message,
                            "field": field})

    def invalid(self, field, value, why):
        self.add(field, f"Invalid value: {quote(value)}: {why}")

    def required(self, field, why=""):
        self.add(field, "Required value" + (f": {why}" if why else ""),
                 "FieldValueRequired")

    def raise_for(self, kind, name):
        if not self.causes:
            return
        text = ", ".join(f"{c['field']}: {c['message']}" for c in self.causes)
        if len(self.causes) > 1:
            text = "[" + text + "]"
        raise ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}',
                       {"name": name, "kind": kind, "causes": self.causes})


def quote(v):
    if v is None:
        return '""'
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    return str(v)


def check_subdomain(inv, field, name):
    if not isinstance(name, str) or len(name) > 253 or \
            not DNS1123_SUBDOMAIN.match(name):
        inv.invalid(field, name, SUBDOMAIN_MSG)


def check_label_name(inv, field, name):
    if not isinstance(name, str) or len(name) > 63 or \
            not DNS1123_LABEL.match(name):
        inv.invalid(field, name, LABEL_MSG)


def check_labels(inv, labels):
    if labels is None:
        return
    if not isinstance(labels, dict):
        raise bad_request("metadata.labels: expected an object of strings")
    for k, v in labels.items():
        field = "metadata.labels"
        prefix, _, nm = k.rpartition("/")
        if (prefix and (len(prefix) > 253
                        or not DNS1123_SUBDOMAIN.match(prefix))) \
                or len(nm) > 63 or not QUALIFIED_NAME.match(nm):
            inv.invalid(field, k, "name part must consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end "
                        "with an alphanumeric character")
        if not isinstance(v, str):
            raise bad_request(f"metadata.labels[{k}]: expected a string")
        if len(v) > 63 or not LABEL_VALUE.match(v):
            inv.invalid(field, v, "a valid label must be an empty string or "
                        "consist of alphanumeric characters, '-', '_' or '.',"
                        " and must start and end with an alphanumeric "
                        "character")


def check_owner_refs(inv, refs):
    if refs is None:
        return
    if not isinstance(refs, list):
        raise bad_request("metadata.ownerReferences: expected a list")
    controllers = 0
    for i, r in enumerate(refs):
        f = f"metadata.ownerReferences[{i}]"
        if not isinstance(r, dict):
            raise bad_request(f"{f}: expected an object")
        for key in ("apiVersion", "kind", "name", "uid"):
            if not r.get(key):
                inv.invalid(f"{f}.{key}", r.get(key, ""),
                            f"{key} must not be empty")
        if r.get("controller") is True:
            controllers += 1
    if controllers > 1:
        inv.invalid("metadata.ownerReferences", refs,
                    "Only one reference can have Controller set to true")


def check_meta(inv, meta):
    name = meta.get("name")
    if not name:
        inv.required("metadata.name", "name or generateName is required")
    else:
        check_subdomain(inv, "metadata.name", name)
    check_labels(inv, meta.get("labels"))
    check_owner_refs(inv, meta.get("ownerReferences"))


def check_pod_spec(inv, spec):
    if not isinstance(spec, dict):
        inv.required("spec")
        return
    vols = {}
    for i, v in enumerate(spec.get("volumes") or []):
        f = f"spec.volumes[{i}]"
        check_label_name(inv, f + ".name", v.get("name", ""))
        if v.get("name") in vols:
            inv.add(f + ".name", f"Duplicate value: {quote(v.get('name'))}",
                    "FieldValueDuplicate")
        vols[v.get("name")] = v
        sec = v.get("secret")
        if isinstance(sec, dict):
            if not sec.get("secretName"):
                inv.required(f + ".secret.secretName")
            mode = sec.get("defaultMode")
            if mode is not None and (not isinstance(mode, int)
                                     or not 0 <= mode <= 0o777):
                inv.invalid(f + ".secret.defaultMode", mode,
                            "must be a number between 0 and 0777 (octal), "
                            "both inclusive")
    containers = spec.get("containers")
    if not containers:
        inv.required("spec.containers")
        return
    names = set()
    for i, c in enumerate(containers):
        f = f"spec.containers[{i}]"
        if not c.get("name"):
            inv.required(f + ".name")
        else:
            check_label_name(inv, f + ".name", c["name"])
            if c["name"] in names:
                inv.add(f + ".name", f"Duplicate value: {quote(c['name'])}",
                        "FieldValueDuplicate")
            names.add(c["name"])
        if not c.get("image"):
            inv.required(f + ".image")
        for j, p in enumerate(c.get("ports") or []):
            port = p.get("containerPort")
            if not isinstance(port, int) or not 1 <= port <= 65535:
                inv.invalid(f"{f}.ports[{j}].containerPort", port,
                            "must be between 1 and 65535, inclusive")
        for j, m in enumerate(c.get("volumeMounts") or []):
            if m.get("name") not in vols:
                inv.add(f"{f}.volumeMounts[{j}].name",
                        f"Not found: {quote(m.get('name', ''))}",
                        "FieldValueNotFound")
            if not m.get("mountPath"):
                inv.required(f"{f}.volumeMounts[{j}].mountPath")
    rp = spec.get("restartPolicy")
    if rp not in ("Always", "OnFailure", "Never"):
        inv.add("spec.restartPolicy", f"Unsupported value: {quote(rp)}: "
                'supported values: "Always", "OnFailure", "Never"',
                "FieldValueNotSupported")


def check_secret(inv, obj):
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise bad_request("Secret in version \"v1\" cannot be handled as a "
                          "Secret: data: expected an object")
    total = 0
    for k, v in data.items():
        if not isinstance(v, str):
            raise bad_request("Secret in version \"v1\" cannot be handled as"
                              f" a Secret: data[{k}]: expected a string")
        try:
            raw = base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise bad_request("Secret in version \"v1\" cannot be handled as"
                              " a Secret: illegal base64 data in "
                              f"data[{k}]") from None
        total += len(raw)
        if not CONFIG_KEY.match(k):
            inv.invalid(f"data[{k}]", k, "a valid config key must consist "
                        "of alphanumeric characters, '-', '_' or '.'")
    if total > SECRET_MAX_BYTES:
        inv.add("data", f"Too long: must have at most {SECRET_MAX_BYTES} "
                "bytes", "FieldValueTooLong")


def check_netpol(inv, obj):
    spec = obj.get("spec") or {}
    for i, t in enumerate(spec.get("policyTypes") or []):
        if t not in ("Ingress", "Egress"):
            inv.add(f"spec.policyTypes[{i}]", f"Unsupported value: "
                    f'{quote(t)}: supported values: "Ingress", "Egress"',
                    "FieldValueNotSupported")


def validate(resource, obj):
    kind = RESOURCES[resource][1]
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise bad_request(f"{kind}: metadata: expected an object")
    inv = Invalid()
    check_meta(inv, meta)
    if resource == "pods":
        check_pod_spec(inv, obj.get("spec"))
    elif resource == "secrets":
        check_secret(inv, obj)
    else:
        check_netpol(inv, obj)
    inv.raise_for(kind, meta.get("name") or "")


def checked(resource, obj, fn):
    """Runs FN; a field of the wrong JSON type is a decode error (400), as
    on a real server."""
    try:
        fn()
    except (TypeError, AttributeError, KeyError, ValueError) as e:
        kind = RESOURCES[resource][1]
        raise bad_request(f'{kind} in version "{obj.get("apiVersion", "")}" '
                          f"cannot be handled as a {kind}: a field of the "
                          f"wrong type ({e})") from None


def pod_defaults(pod):
    """The defaults a real API server fills in that sbx may read back."""
    spec = pod["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    for c in spec.get("containers") or []:
        img = c.get("image", "")
        tagged = ":" in img.rsplit("/", 1)[-1] and \
            not img.endswith(":latest")
        c.setdefault("imagePullPolicy", "IfNotPresent" if tagged or "@" in img
                     else "Always")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        for p in c.get("ports") or []:
            p.setdefault("protocol", "TCP")


def qos_class(spec):
    rs = [c.get("resources") or {} for c in spec.get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in rs):
        return "BestEffort"
    for r in rs:
        lim, req = r.get("limits") or {}, r.get("requests") or {}
        for k in ("cpu", "memory"):
            if k not in lim or req.get(k, lim[k]) != lim[k]:
                return "Burstable"
    return "Guaranteed"


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# Label selectors: k=v, k==v, k!=v, k in (a,b), k notin (a,b), k, !k.
SEL_TERM = re.compile(
    r"^\s*(?:(!)\s*([^\s=!(),]+)|([^\s=!(),]+)\s*(?:(==|=|!=)\s*([^\s,()]*)"
    r"|\s+(in|notin)\s*\(([^)]*)\))?)\s*$")


def parse_label_selector(text):
    terms = []
    for part in split_selector(text or ""):
        m = SEL_TERM.match(part)
        if not m:
            raise bad_request(f"unable to parse requirement: {part!r}")
        if m.group(1):
            terms.append(("!", m.group(2), None))
        elif m.group(4):
            terms.append((m.group(4).replace("==", "="), m.group(3),
                          m.group(5)))
        elif m.group(6):
            vals = {v.strip() for v in m.group(7).split(",") if v.strip()}
            terms.append((m.group(6), m.group(3), vals))
        else:
            terms.append(("exists", m.group(3), None))
    return terms


def split_selector(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def labels_match(terms, labels):
    labels = labels or {}
    for op, k, v in terms:
        have = labels.get(k)
        if op in ("in", "notin"):
            ok = have is not None and have in v
            ok = ok if op == "in" else not ok
        else:
            ok = {"=": have == v, "!=": have != v, "exists": k in labels,
                  "!": k not in labels}[op]
        if not ok:
            return False
    return True


FIELDS = {
    "metadata.name": lambda o: o["metadata"].get("name"),
    "metadata.namespace": lambda o: o["metadata"].get("namespace"),
    "status.phase": lambda o: (o.get("status") or {}).get("phase"),
}


def parse_field_selector(text, resource):
    terms = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = re.match(r"^\s*([^=!]+?)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid selector: {part!r}")
        field = m.group(1)
        if field not in FIELDS or (field == "status.phase"
                                   and resource != "pods"):
            raise bad_request(f'"{field}" is not a known field selector: '
                              "only \"metadata.name\", \"metadata.namespace\""
                              + (", \"status.phase\"" if resource == "pods"
                                 else ""))
        terms.append((field, m.group(2) != "!=", m.group(3)))
    return terms


def fields_match(terms, obj):
    return all((FIELDS[f](obj) == v) == eq for f, eq, v in terms)


class Store:
    """Objects, the resourceVersion counter and the event history."""

    def __init__(self, namespaces, history=1000):
        self.cond = threading.Condition()
        self.objects = {}  # (resource, ns, name) -> object
        self.rv = 1
        self.events = []  # (rv, resource, ns, type, old, new)
        self.compacted = 1  # events after this RV are all in self.events
        self.history = history
        self.namespaces = set(namespaces)
        self.watch_epoch = 0  # bumped to end every open watch
        self.listeners = []  # fn(resource, type, obj), called under cond

    def check_namespace(self, ns):
        if ns not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                           {"name": ns, "kind": "namespaces"})

    def _emit(self, resource, ns, typ, old, new):
        """Under cond: records an event with a new RV, set on NEW."""
        self.rv += 1
        obj = new if new is not None else old
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, resource, ns, typ,
                            copy.deepcopy(old) if old else None,
                            copy.deepcopy(obj)))
        if len(self.events) > self.history:
            drop = self.events[:len(self.events) - self.history]
            self.compacted = drop[-1][0]
            del self.events[:len(drop)]
        for fn in self.listeners:
            fn(resource, typ, obj)
        self.cond.notify_all()

    def compact(self):
        with self.cond:
            self.compacted = self.rv
            self.events.clear()

    def end_watches(self):
        with self.cond:
            self.watch_epoch += 1
            self.cond.notify_all()

    def create(self, resource, ns, obj):
        api_version, kind, _ = RESOURCES[resource]
        for key, want in (("apiVersion", api_version), ("kind", kind)):
            if obj.get(key) not in (None, want):
                raise bad_request(f"the {key} of the object "
                                  f"({obj.get(key)}) does not match the "
                                  f"expected {key} ({want})")
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace") not in (None, ns):
            raise bad_request("the namespace of the provided object does not"
                              " match the namespace sent on the request")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        checked(resource, obj, lambda: (
            pod_defaults(obj) if resource == "pods" and
            isinstance(obj.get("spec"), dict) else None,
            validate(resource, obj)))
        with self.cond:
            self.check_namespace(ns)
            key = (resource, ns, meta["name"])
            if key in self.objects:
                raise ApiError(409, "AlreadyExists",
                               f'{resource} "{meta["name"]}" already exists',
                               {"name": meta["name"], "kind": resource})
            obj["apiVersion"], obj["kind"] = api_version, kind
            meta.update(namespace=ns, uid=str(uuid.uuid4()),
                        creationTimestamp=now_rfc3339())
            for k in ("resourceVersion", "deletionTimestamp", "generation",
                      "managedFields"):
                meta.pop(k, None)
            if resource == "pods":
                obj["status"] = {"phase": "Pending",
                                 "qosClass": qos_class(obj["spec"])}
            elif resource == "secrets":
                obj.setdefault("type", "Opaque")
            self.objects[key] = obj
            self._emit(resource, ns, "ADDED", None, obj)
            return copy.deepcopy(obj)

    def get(self, resource, ns, name):
        with self.cond:
            self.check_namespace(ns)
            obj = self.objects.get((resource, ns, name))
            if obj is None:
                raise not_found(resource, name)
            return copy.deepcopy(obj)

    def list(self, resource, ns, labels, fields):
        with self.cond:
            if ns is not None:
                self.check_namespace(ns)
            items = [copy.deepcopy(o) for (r, n, _), o in
                     sorted(self.objects.items())
                     if r == resource and ns in (None, n)
                     and labels_match(labels, o["metadata"].get("labels"))
                     and fields_match(fields, o)]
            for o in items:
                del o["apiVersion"], o["kind"]
            api_version, _, list_kind = RESOURCES[resource]
            return {"kind": list_kind, "apiVersion": api_version,
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": items}

    def patch(self, resource, ns, name, patch):
        if not isinstance(patch, dict):
            raise bad_request("a merge patch must be a JSON object")
        with self.cond:
            old = self.objects.get((resource, ns, name))
            if old is None:
                self.check_namespace(ns)
                raise not_found(resource, name)
            want = (patch.get("metadata") or {}).get("resourceVersion")
            if want is not None and want != old["metadata"]["resourceVersion"]:
                raise conflict(resource, name)
            new = merge_patch(old, patch)
            meta = new.get("metadata")
            if not isinstance(meta, dict) or meta.get("name") != name:
                raise bad_request(f"the name of the object "
                                  f"({(meta or {}).get('name')}) does not "
                                  f"match the name on the URL ({name})")
            for k in ("uid", "namespace", "creationTimestamp",
                      "deletionTimestamp", "resourceVersion"):
                meta.pop(k, None)
                if k in old["metadata"]:
                    meta[k] = old["metadata"][k]
            new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            checked(resource, new, lambda: validate(resource, new))
            if resource == "pods" and new.get("spec") != old.get("spec"):
                inv = Invalid()
                inv.add("spec", "Forbidden: pod updates may not change "
                        "fields other than `spec.containers[*].image`, "
                        "`spec.initContainers[*].image`, "
                        "`spec.activeDeadlineSeconds`, "
                        "`spec.tolerations` (only additions to existing "
                        "tolerations) or `spec.terminationGracePeriodSeconds`",
                        "FieldValueForbidden")
                inv.raise_for("Pod", name)
            if new == old:
                return copy.deepcopy(old)
            self.objects[(resource, ns, name)] = new
            self._emit(resource, ns, "MODIFIED", old, new)
            return copy.deepcopy(new)

    def set_status(self, ns, name, uid, fn):
        """Changes the Pod NAME's status with FN(status) when it is still
        the Pod of UID; returns whether it did."""
        with self.cond:
            old = self.objects.get(("pods", ns, name))
            if old is None or old["metadata"]["uid"] != uid:
                return False
            new = copy.deepcopy(old)
            fn(new["status"])
            if new == old:
                return True
            self.objects[("pods", ns, name)] = new
            self._emit("pods", ns, "MODIFIED", old, new)
            return True

    def mark_deleting(self, ns, name, precond, grace):
        """Sets the Pod's deletionTimestamp (a MODIFIED event)."""
        with self.cond:
            old = self.get_checked("pods", ns, name, precond)
            if old["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(old)
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            self.objects[("pods", ns, name)] = new
            self._emit("pods", ns, "MODIFIED", old, new)
            return copy.deepcopy(new)

    def get_checked(self, resource, ns, name, precond):
        self.check_namespace(ns)
        obj = self.objects.get((resource, ns, name))
        if obj is None:
            raise not_found(resource, name)
        precond = precond or {}
        for k in ("uid", "resourceVersion"):
            if precond.get(k) not in (None, obj["metadata"][k]):
                raise ApiError(
                    409, "Conflict",
                    f"Precondition failed: {k}: {precond[k]}, {k} in "
                    f"object meta: {obj['metadata'][k]}",
                    {"name": name, "kind": resource})
        return obj

    def delete(self, resource, ns, name, precond=None, orphan=False,
               uid=None):
        """Removes the object (a DELETED event), then, as the garbage
        collector does, its dependents (or, orphaning, their
        ownerReferences to it). UID: only when it is still that object."""
        with self.cond:
            obj = self.get_checked(resource, ns, name, precond)
            if uid is not None and obj["metadata"]["uid"] != uid:
                return None
            del self.objects[(resource, ns, name)]
            self._emit(resource, ns, "DELETED", None, obj)
            self._collect(ns, obj["metadata"]["uid"], orphan)
            return copy.deepcopy(obj)

    def _collect(self, ns, uid, orphan):
        for key, o in sorted(self.objects.items()):
            refs = o["metadata"].get("ownerReferences") or []
            if key[1] != ns or not any(r.get("uid") == uid for r in refs):
                continue
            rest = [r for r in refs if r.get("uid") != uid]
            if orphan or rest:
                new = copy.deepcopy(o)
                new["metadata"]["ownerReferences"] = rest
                if not rest:
                    del new["metadata"]["ownerReferences"]
                self.objects[key] = new
                self._emit(key[0], ns, "MODIFIED", o, new)
            else:
                del self.objects[key]
                self._emit(key[0], ns, "DELETED", None, o)
                self._collect(ns, o["metadata"]["uid"], False)

    def events_since(self, rv):
        """Under cond: the events after RV, or None when RV is too old."""
        if rv < self.compacted:
            return None
        return [e for e in self.events if e[0] > rv]
