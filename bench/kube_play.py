#!/usr/bin/env python3
"""The Pod sbx's kubernetes backend sent, as `podman kube play` takes it,
for bench_ready's baseline.

    kube_play.py LOG.jsonl ADDR DIR

Reads the request log of the fixture API server (tests/support/kube_api.py)
and takes the first Pod POSTed that is not a warm Pod of a pool (no
sbx.warm label), with the Secrets its volumes and environment name as they
were POSTed. Writes DIR/play.yaml: that Pod, its name kept, adapted as the
fixture adapts every Pod before it plays it (kube_podman.play_document:
container ports published on ADDR, Secret volumes written out decoded under
DIR/volumes as hostPath directories, emptyDir a hostPath directory). Prints
the Pod's name. Exit status 1 with a message when the log has no such Pod.
"""

import json
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "support"))
# pylint: disable=wrong-import-position
from kube_podman import play_document, secret_names  # noqa: E402


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: kube_play.py LOG.jsonl ADDR DIR")
    log, addr, out = sys.argv[1:]
    pods, secrets = [], {}
    with open(log, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            body = r.get("body")
            if r.get("method") != "POST" or not isinstance(body, dict):
                continue
            if body.get("kind") == "Pod":
                pods.append(body)
            elif body.get("kind") == "Secret":
                secrets[body["metadata"]["name"]] = body
    cold = [p for p in pods
            if "sbx.warm" not in (p["metadata"].get("labels") or {})]
    if not cold:
        sys.exit(f"kube_play.py: no Pod outside a warm pool in {log}")
    pod = cold[0]
    needed = {}
    for name, optional in secret_names(pod["spec"]).items():
        if name in secrets:
            needed[name] = secrets[name]
        elif not optional:
            sys.exit(f"kube_play.py: no Secret {name} in {log}")
    doc = play_document(pod, addr, os.path.join(out, "volumes"), needed)
    with open(os.path.join(out, "play.yaml"), "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=1) + "\n")
    print(pod["metadata"]["name"])


if __name__ == "__main__":
    main()
