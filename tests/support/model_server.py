#!/usr/bin/env python3
"""A scripted model server for tests: the OpenAI Responses API and Chat
Completions, with and without streaming, on 127.0.0.1.

    model_server.py SCRIPT.json REQUESTS.jsonl [--api-key KEY] [--port N]

Prints "listening PORT" on stdout once it accepts connections. Serves
POST /v1/responses, /v1/chat/completions, /responses and /chat/completions.
Every request is appended to REQUESTS.jsonl as one JSON line:

    {"n": 1, "method": "POST", "path": "/v1/responses",
     "headers": {"content-type": "application/json", ...},  (lower-case names,
                                                 Authorization left out)
     "authorization": true,           (whether an Authorization header came)
     "body": {...} | null, "body_text": "..." (only when not JSON)}

The script may also be {"by_turn": true, "steps": [...]}: then the step is
the one whose index is the number of tool outputs in the request (items of a
type ending in "_output", or "tool" messages), so a request repeated by a
resumed run gets the same answer.

The script is a JSON list of steps, used one per request in order (a 401 for
a wrong --api-key and a 404 for an unknown path use no step). When the steps
run out the answer is 500 with a message saying so. A step is an object
whose keys combine:

    "delay_ms": N         wait N ms before answering
    "status": N           the HTTP status (default 200; 500 for a bare
                          {"body"} or {"headers"} step)
    "headers": {...}      extra response headers, e.g. {"Retry-After": "1"}
    "body": X             the body as is: a string is sent raw, anything else
                          as JSON (status >= 400 without a body gets
                          {"error": {"message": "scripted <status>", ...}})
    "garbage": "text"     send TEXT raw as a 200 application/json body
    "drop": true          close the connection without answering
    "repeat": N           serve this step N times (default 1)

  and the reply, either in full for one API:

    "response": {...}     a Responses object (only for /responses)
    "chat": {...}         a chat completion (only for /chat/completions)

  or built for whichever API was asked from shortcuts:

    "text": "hello"                a final assistant message
    "tool_calls": [{"name": "exec_command", "arguments": {...} or "...",
                    "call_id": "call_1"}]          (call_id optional)
    "apply_patch": {"type": "update_file", "path": "a.txt", "diff": "...",
                    "call_id": "..."} or a list of them   (Responses: hosted
                   apply_patch_call items; chat: a function call to
                   "apply_patch" with {"operation": ...} as arguments)
    "reasoning": "summary"         a reasoning item first (Responses only)
    "usage": {"input_tokens": N, "output_tokens": N}
    "id": "resp_1"                 the response id

A request with "stream": true gets Server-Sent Events: for Responses
response.created, response.output_item.added, response.content_part.added,
response.output_text.delta (the text in up to three pieces),
response.output_text.done, response.content_part.done,
response.function_call_arguments.delta/.done, response.output_item.done and
response.completed; for chat, chat.completion.chunk deltas (content and
tool_calls by index), a usage chunk when stream_options.include_usage is set,
and "data: [DONE]". "stream_cut": true ends such a stream after the deltas,
without the completion; "stall_ms": N pauses N ms after its first event.

Example:

    [{"status": 500},
     {"status": 429, "headers": {"Retry-After": "1"}},
     {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls"},
                      "call_id": "call_1"}]},
     {"text": "done"}]
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RESPONSES_PATHS = ("/v1/responses", "/responses")
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


class Script:
    def __init__(self, steps, by_turn=False):
        self.by_turn = by_turn
        self.steps = []
        for s in steps:
            for _ in range(int(s.get("repeat", 1))):
                self.steps.append(s)
        self.next = 0
        self.lock = threading.Lock()

    def take(self, body=None):
        with self.lock:
            if self.by_turn:
                # The step is chosen by how many tool outputs the request
                # carries, so a repeated request (a resumed run) gets the
                # same answer again.
                items = (body or {}).get("input") or \
                    (body or {}).get("messages") or []
                n = sum(1 for it in items if isinstance(it, dict) and (
                    str(it.get("type", "")).endswith("_output") or
                    it.get("role") == "tool"))
                self.next += 1
                if n >= len(self.steps):
                    return None, n + 1
                return self.steps[n], n + 1
            if self.next >= len(self.steps):
                self.next += 1
                return None, self.next
            s = self.steps[self.next]
            self.next += 1
            return s, self.next


def pieces(text, n=3):
    """TEXT in up to N non-empty pieces."""
    if not text:
        return []
    size = max(1, -(-len(text) // n))
    return [text[i:i + size] for i in range(0, len(text), size)]


def args_text(a):
    return a if isinstance(a, str) else json.dumps(a, separators=(",", ":"))


def estimate_tokens(body):
    return max(1, len(json.dumps(body)) // 4)


def patch_ops(step):
    ops = step.get("apply_patch")
    if ops is None:
        return []
    return ops if isinstance(ops, list) else [ops]


def build_responses(step, n, body):
    if "response" in step:
        return step["response"]
    output = []
    if step.get("reasoning") is not None:
        summary = step["reasoning"]
        output.append({
            "type": "reasoning", "id": "rs_%d" % n,
            "summary": [{"type": "summary_text", "text": summary}]
            if isinstance(summary, str) else [],
            "encrypted_content": "enc_%d" % n})
    if step.get("text") is not None:
        output.append({
            "type": "message", "id": "msg_%d" % n, "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": step["text"],
                         "annotations": []}]})
    for i, tc in enumerate(step.get("tool_calls", [])):
        output.append({
            "type": "function_call", "id": "fc_%d_%d" % (n, i),
            "call_id": tc.get("call_id", "call_%d_%d" % (n, i)),
            "name": tc["name"], "arguments": args_text(tc.get("arguments", {})),
            "status": "completed"})
    for i, op in enumerate(patch_ops(step)):
        op = dict(op)
        call_id = op.pop("call_id", "call_ap_%d_%d" % (n, i))
        output.append({
            "type": "apply_patch_call", "id": "apc_%d_%d" % (n, i),
            "call_id": call_id, "status": "completed", "operation": op})
    u = step.get("usage", {})
    inp = u.get("input_tokens", estimate_tokens(body))
    out = u.get("output_tokens", 5)
    return {
        "id": step.get("id", "resp_%d" % n), "object": "response",
        "created_at": int(time.time()), "status": "completed",
        "model": body.get("model"), "output": output, "error": None,
        "incomplete_details": None,
        "usage": {"input_tokens": inp, "output_tokens": out,
                  "total_tokens": inp + out,
                  "input_tokens_details": {
                      "cached_tokens": u.get("cached_tokens", 0)},
                  "output_tokens_details": {
                      "reasoning_tokens": u.get("reasoning_tokens", 0)}}}


def build_chat(step, n, body):
    if "chat" in step:
        return step["chat"]
    calls = []
    for i, tc in enumerate(step.get("tool_calls", [])):
        calls.append({"id": tc.get("call_id", "call_%d_%d" % (n, i)),
                      "type": "function",
                      "function": {"name": tc["name"],
                                   "arguments": args_text(
                                       tc.get("arguments", {}))}})
    for i, op in enumerate(patch_ops(step)):
        op = dict(op)
        call_id = op.pop("call_id", "call_ap_%d_%d" % (n, i))
        calls.append({"id": call_id, "type": "function",
                      "function": {"name": "apply_patch",
                                   "arguments": args_text({"operation": op})}})
    msg = {"role": "assistant", "content": step.get("text")}
    if calls:
        msg["tool_calls"] = calls
    u = step.get("usage", {})
    inp = u.get("input_tokens", estimate_tokens(body))
    out = u.get("output_tokens", 5)
    return {
        "id": step.get("id", "chatcmpl-%d" % n),
        "object": "chat.completion", "created": int(time.time()),
        "model": body.get("model"),
        "choices": [{"index": 0, "message": msg,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": inp, "completion_tokens": out,
                  "total_tokens": inp + out}}


def responses_events(resp, cut):
    """The SSE events of a Responses object, as (type, data) pairs."""
    seq = [0]

    def ev(t, **kw):
        d = {"type": t, "sequence_number": seq[0]}
        d.update(kw)
        seq[0] += 1
        return t, d

    created = dict(resp, status="in_progress", output=[])
    yield ev("response.created", response=created)
    for idx, item in enumerate(resp.get("output", [])):
        t = item.get("type")
        iid = item.get("id", "item_%d" % idx)
        if t == "message":
            yield ev("response.output_item.added", output_index=idx,
                     item=dict(item, status="in_progress", content=[]))
            for ci, part in enumerate(item.get("content", [])):
                yield ev("response.content_part.added", item_id=iid,
                         output_index=idx, content_index=ci,
                         part=dict(part, text="") if "text" in part else part)
                text = part.get("text", "")
                for p in pieces(text):
                    yield ev("response.output_text.delta", item_id=iid,
                             output_index=idx, content_index=ci, delta=p)
                if cut:
                    return
                yield ev("response.output_text.done", item_id=iid,
                         output_index=idx, content_index=ci, text=text)
                yield ev("response.content_part.done", item_id=iid,
                         output_index=idx, content_index=ci, part=part)
        elif t == "function_call":
            yield ev("response.output_item.added", output_index=idx,
                     item=dict(item, status="in_progress", arguments=""))
            for p in pieces(item.get("arguments", ""), 2):
                yield ev("response.function_call_arguments.delta",
                         item_id=iid, output_index=idx, delta=p)
            yield ev("response.function_call_arguments.done", item_id=iid,
                     output_index=idx, arguments=item.get("arguments", ""))
        else:
            yield ev("response.output_item.added", output_index=idx,
                     item=item)
        if cut:
            return
        yield ev("response.output_item.done", output_index=idx, item=item)
    if cut:
        return
    yield ev("response.completed", response=resp)


def chat_chunks(comp, include_usage, cut):
    """The stream chunks of a chat completion (JSON objects)."""
    base = {"id": comp.get("id"), "object": "chat.completion.chunk",
            "created": comp.get("created"), "model": comp.get("model")}
    choice = (comp.get("choices") or [{}])[0]
    msg = choice.get("message", {})

    def chunk(delta, finish=None):
        return dict(base, choices=[{"index": 0, "delta": delta,
                                    "finish_reason": finish}])

    yield chunk({"role": "assistant", "content": ""})
    for p in pieces(msg.get("content") or ""):
        yield chunk({"content": p})
    for i, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc.get("function", {})
        yield chunk({"tool_calls": [{"index": i, "id": tc.get("id"),
                                     "type": "function",
                                     "function": {"name": fn.get("name"),
                                                  "arguments": ""}}]})
        for p in pieces(fn.get("arguments", ""), 2):
            yield chunk({"tool_calls": [{"index": i,
                                         "function": {"arguments": p}}]})
    if cut:
        return
    yield chunk({}, choice.get("finish_reason", "stop"))
    if include_usage and comp.get("usage") is not None:
        yield dict(base, choices=[], usage=comp["usage"])
    yield "[DONE]"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "model_server/1"
    # Headers and body go out in separate writes: with Nagle's algorithm the
    # body waits for the client's delayed ACK of the headers, 40 ms a reply
    # on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):
        pass

    def record(self, body, raw):
        srv = self.server
        headers = {}
        for k, v in self.headers.items():
            if k.lower() != "authorization":
                headers[k.lower()] = v
        with srv.log_lock:
            srv.count += 1
            line = {"n": srv.count, "method": self.command, "path": self.path,
                    "headers": headers,
                    "authorization": self.headers.get("Authorization")
                    is not None,
                    "body": body}
            if body is None:
                line["body_text"] = raw.decode("utf-8", "replace")
            srv.log.write(json.dumps(line) + "\n")
            srv.log.flush()

    def send_json(self, status, obj, extra=None, raw=None):
        data = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(extra or {})
        for k, v in hdrs.items():
            self.send_header(k, str(v))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, message, extra=None):
        self.send_json(status, {"error": {"message": message,
                                          "type": "model_server",
                                          "code": None}}, extra)

    def start_stream(self, status, extra):
        self.send_response(status)
        hdrs = {"Content-Type": "text/event-stream",
                "Cache-Control": "no-cache", "Connection": "close"}
        hdrs.update(extra or {})
        for k, v in hdrs.items():
            self.send_header(k, str(v))
        self.end_headers()
        self.close_connection = True

    def send_event(self, name, data):
        text = data if isinstance(data, str) else json.dumps(data)
        out = ("event: %s\n" % name if name else "") + "data: %s\n\n" % text
        self.wfile.write(out.encode())
        self.wfile.flush()

    def do_POST(self):
        try:
            self.handle_post()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def handle_post(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.record(body, raw)
        path = self.path.split("?", 1)[0]
        if path in RESPONSES_PATHS:
            api = "responses"
        elif path in CHAT_PATHS:
            api = "chat"
        else:
            return self.error(404, "model_server: no endpoint POST %s" % path)
        key = self.server.api_key
        if key is not None:
            got = self.headers.get("Authorization", "")
            if got != "Bearer " + key:
                shown = got[7:] if got.startswith("Bearer ") else got
                return self.error(401, "Incorrect API key provided: %s."
                                  % shown)
        if not isinstance(body, dict):
            body = {}
        step, num = self.server.script.take(body)
        if step is None:
            return self.error(500, "model_server: the script has no step "
                              "for request %d (it has %d steps)"
                              % (num, len(self.server.script.steps)))
        if step.get("delay_ms"):
            time.sleep(step["delay_ms"] / 1000.0)
        extra = step.get("headers")
        if step.get("drop"):
            self.close_connection = True
            return
        if "garbage" in step:
            return self.send_json(step.get("status", 200), None, extra,
                                  raw=step["garbage"].encode())
        reply_keys = ("response", "chat", "text", "tool_calls",
                      "apply_patch", "reasoning")
        has_reply = any(k in step for k in reply_keys)
        status = step.get("status", 200 if has_reply else 500)
        if "body" in step:
            b = step["body"]
            if isinstance(b, str):
                return self.send_json(status, None, extra, raw=b.encode())
            return self.send_json(status, b, extra)
        if status >= 400 or not has_reply:
            return self.error(status, "scripted %d" % status, extra)
        if api == "responses" and "chat" in step:
            return self.error(500, "model_server: step %d is a chat "
                              "completion but the request went to %s"
                              % (num, path))
        if api == "chat" and "response" in step:
            return self.error(500, "model_server: step %d is a Responses "
                              "object but the request went to %s"
                              % (num, path))
        if api == "responses":
            reply = build_responses(step, num, body)
        else:
            reply = build_chat(step, num, body)
        if not body.get("stream"):
            return self.send_json(status, reply, extra)
        cut = bool(step.get("stream_cut"))
        self.start_stream(status, extra)
        stall = step.get("stall_ms")
        if api == "responses":
            events = list(responses_events(reply, cut))
        else:
            usage = (body.get("stream_options") or {}).get("include_usage")
            events = [(None, c) for c in chat_chunks(reply, usage, cut)]
        for i, (name, data) in enumerate(events):
            self.send_event(name, data)
            if i == 0 and stall:
                time.sleep(stall / 1000.0)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up (a test of limits or timeouts) is expected.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: model_server.py SCRIPT REQUESTS "
                         "[--api-key KEY] [--port N]\n")
        return 2
    with open(argv[1]) as f:
        steps = json.load(f)
    by_turn = False
    if isinstance(steps, dict) and "by_turn" in steps:
        by_turn = bool(steps["by_turn"])
        steps = steps.get("steps", [])
    elif isinstance(steps, dict):
        steps = [steps]
    api_key = None
    port = 0
    rest = argv[3:]
    while rest:
        if rest[0] == "--api-key" and len(rest) > 1:
            api_key = rest[1]
            rest = rest[2:]
        elif rest[0] == "--port" and len(rest) > 1:
            port = int(rest[1])
            rest = rest[2:]
        else:
            sys.stderr.write("model_server.py: unknown argument %s\n"
                             % rest[0])
            return 2
    srv = Server(("127.0.0.1", port), Handler)
    srv.script = Script(steps, by_turn)
    srv.api_key = api_key
    srv.log = open(argv[2], "a")
    srv.log_lock = threading.Lock()
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
