#!/usr/bin/env python3
"""The differential test against the real Agents SDK: runs each scenario
(tests/sdk/scenarios/*.json) once with @openai/agents (run_sdk.mjs) and
once with `sbx run`, each against its own scripted model server
(tests/support/model_server.py) playing the same steps, and compares every
request the two sent, field by field.

    sdk_diff.py SBX NODE_MODULES_DIR [SCENARIO.json ...]

A scenario is {"agent": <an sbx agent file>, "others": {<file name>: <the
agent files its handoffs and agent tools name>}, "prompt": "...", "script":
[<model_server.py steps>]}. Compared, per request: the request fields both
SDK and sbx set (model, include, store, reasoning, text, tool_choice,
parallel_tool_calls, temperature, top_p, max_output_tokens, truncation,
metadata, context_management), the tools, the instructions after the base
ones (those are sbx's own words, a deliberate difference), and the input items with the random Chunk ID and the wall
time of exec output masked. Prints each difference and a tally; exits 1
when any item differs."""

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "support", "model_server.py")
FIELDS = ("model", "include", "store", "reasoning", "text", "tool_choice",
          "parallel_tool_calls", "temperature", "top_p", "max_output_tokens",
          "truncation", "metadata", "context_management",
          # Chat Completions
          "max_tokens", "reasoning_effort", "verbosity", "frequency_penalty",
          "presence_penalty", "response_format", "stream_options")


def serve_and_run(script, cmd, env, tmp, tag):
    """Runs CMD against a model server playing SCRIPT; the requests."""
    script_path = os.path.join(tmp, tag + "-script.json")
    reqs_path = os.path.join(tmp, tag + "-requests.jsonl")
    with open(script_path, "w") as f:
        json.dump(script, f)
    srv = subprocess.Popen([sys.executable, SERVER, script_path, reqs_path],
                           stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline().split()[1])
        env = dict(env, OPENAI_BASE_URL="http://127.0.0.1:%d/v1" % port,
                   OPENAI_API_KEY="sdk-diff-key")
        out = subprocess.run(cmd, env=env, capture_output=True, text=True,
                             timeout=300)
    finally:
        srv.terminate()
        srv.wait()
    if out.returncode != 0:
        sys.stderr.write("%s failed (%d):\n%s\n" % (tag, out.returncode,
                                                   out.stderr[-4000:]))
    reqs = []
    if os.path.exists(reqs_path):
        with open(reqs_path) as f:
            reqs = [json.loads(line)["body"] for line in f if line.strip()]
    return reqs


def mask(v):
    """V with exec output's random chunk id and wall time masked."""
    if isinstance(v, str):
        v = re.sub(r"^Chunk ID: [0-9a-f]{6}$", "Chunk ID: ******", v,
                   flags=re.M)
        return re.sub(r"^Wall time: [0-9.]+ seconds$",
                      "Wall time: * seconds", v, flags=re.M)
    if isinstance(v, list):
        return [mask(x) for x in v]
    if isinstance(v, dict):
        return {k: mask(x) for k, x in v.items()}
    return v


def items(n, sdk, sbx):
    """The compared items of request N: (name, SDK's, sbx's)."""
    out = [("request %d: %s" % (n, k), sdk.get(k), sbx.get(k))
           for k in FIELDS]

    def name(t):
        return t.get("name") or (t.get("function") or {}).get("name") or \
            t.get("type")
    tools_sdk = {name(t): t for t in sdk.get("tools", [])}
    tools_sbx = {name(t): t for t in sbx.get("tools", [])}
    out.append(("request %d: tool names in order" % n,
                [name(t) for t in sdk.get("tools", [])],
                [name(t) for t in sbx.get("tools", [])]))
    for name in sorted(set(tools_sdk) | set(tools_sbx)):
        out.append(("request %d: tool %s" % (n, name), tools_sdk.get(name),
                    tools_sbx.get(name)))

    def tail(s):
        """S from the first section after the base instructions."""
        s = s or ""
        for h in ("# Agent instructions", "# Sandbox capability instructions",
                  "# Filesystem"):
            i = s.find("\n\n" + h)
            if i >= 0:
                return s[i + 2:]
        return s
    def instructions(body):
        if "messages" in body:  # Chat: the system message
            m = body["messages"][0] if body["messages"] else {}
            return m.get("content") if m.get("role") == "system" else None
        return body.get("instructions")
    out.append(("request %d: instructions after the base ones" % n,
                tail(instructions(sdk)), tail(instructions(sbx))))
    if "messages" in sdk or "messages" in sbx:
        a, b = sdk.get("messages", [])[1:], sbx.get("messages", [])[1:]
    else:
        a, b = sdk.get("input", []), sbx.get("input", [])
    for i in range(max(len(a), len(b))):
        out.append(("request %d: item %d" % (n, i),
                    mask(a[i]) if i < len(a) else None,
                    mask(b[i]) if i < len(b) else None))
    return out


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    sbx, modules = argv[1], argv[2]
    scenarios = argv[3:] or sorted(
        os.path.join(HERE, "scenarios", f)
        for f in os.listdir(os.path.join(HERE, "scenarios")))
    env = dict(os.environ, NODE_PATH=modules)
    compared = differ = 0
    with tempfile.TemporaryDirectory(prefix="sbx-sdk-diff-") as tmp:
        for path in scenarios:
            with open(path) as f:
                sc = json.load(f)
            agent = os.path.join(tmp, "agent.json")
            with open(agent, "w") as f:
                json.dump(sc["agent"], f)
            for other, text in sc.get("others", {}).items():
                with open(os.path.join(tmp, other), "w") as f:
                    json.dump(text, f)
            # The .mjs is copied beside node_modules: ESM resolves from there.
            runner = os.path.join(os.path.dirname(modules), "run_sdk.mjs")
            with open(os.path.join(HERE, "run_sdk.mjs")) as src, \
                    open(runner, "w") as dst:
                dst.write(src.read())
            name = os.path.basename(path)
            sdk = serve_and_run(sc["script"], ["node", runner, path], env,
                                tmp, name + "-sdk")
            mine = serve_and_run(sc["script"],
                                 [sbx, "run", agent, sc["prompt"]], env, tmp,
                                 name + "-sbx")
            if len(sdk) != len(mine):
                print("%s: the SDK sent %d requests, sbx %d" %
                      (name, len(sdk), len(mine)))
                differ += 1
            for n in range(min(len(sdk), len(mine))):
                for what, x, y in items(n, sdk[n], mine[n]):
                    compared += 1
                    if x != y:
                        differ += 1
                        print("%s: %s\n  SDK: %s\n  sbx: %s" %
                              (name, what, json.dumps(x)[:600],
                               json.dumps(y)[:600]))
    print("%d passed, %d failed" % (compared - differ, differ))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
