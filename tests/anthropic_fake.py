"""A local fake of Anthropic's Messages API, for driving the real SDK in tests.

A loopback HTTP server answers `POST /v1/messages` from a script, in order: a streamed assistant
message in the real server-sent-events wire format (message_start, content_block_start, text and
input_json deltas, content_block_stop, message_delta, message_stop), an HTTP error with the API's
JSON error body and its headers (retry-after-ms, ...), an error event in the middle of a stream, or
any of these sent late; and the faults of a misbehaving endpoint: an event whose data is not JSON,
a 200 whose JSON body is cut off, a stream that sends keep-alive pings and nothing else for ever.
Every request is recorded with its headers and JSON body.

It fakes Anthropic's HTTP API only; nothing of kerntune is faked.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer."""

    blocks: list = field(default_factory=list)  # ("text", str) | ("tool_use", id, name, input)
    stop_reason: str = "end_turn"
    status: int = 200
    error: dict | None = None  # the JSON body of an HTTP error
    headers: dict = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a timeout, when longer than the client waits)
    stream_error: dict | None = None  # an SSE error event sent after the first block
    # "bad_event_json": an event whose data is not JSON, after the first block; "bad_body": a 200
    # with a JSON content type and a body cut off mid-object; "pings": message_start, then a ping
    # every `ping_every` seconds until the client goes away
    fault: str = ""
    ping_every: float = 0.05
    usage: dict = field(default_factory=lambda: {"input_tokens": 1200, "output_tokens": 80,
                                                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})


def text(s: str, **kw: Any) -> Reply:
    """An assistant turn of text."""
    return Reply([("text", s)], "end_turn", **kw)


def tool(name: str, args: Any, tool_id: str, say: str = "", **kw: Any) -> Reply:
    """An assistant turn calling one tool (after a line of text when `say`)."""
    blocks = ([("text", say)] if say else []) + [("tool_use", tool_id, name, args)]
    return Reply(blocks, "tool_use", **kw)


def error(status: int, kind: str, message: str, **headers: str) -> Reply:
    """An HTTP error with the API's error body (`retry_after_ms="10"` becomes a retry-after-ms header)."""
    return Reply(status=status, error={"type": "error", "error": {"type": kind, "message": message}},
                 headers={k.replace("_", "-"): v for k, v in headers.items()})


def broken(fault: str, **kw: Any) -> Reply:
    """A reply with one of the faults of a misbehaving endpoint (see Reply.fault)."""
    return Reply([("text", "Half a pl"), ("text", "an")], fault=fault, **kw)


def _chunks(s: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(s) // n))
    return [s[i:i + size] for i in range(0, len(s), size)] or [""]


def sse(reply: Reply, model: str, number: int) -> list[bytes]:
    """The reply as server-sent events, one bytes chunk per event."""
    def ev(kind: str, data: dict) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    usage = dict(reply.usage)
    out = [ev("message_start", {"type": "message_start", "message": {
        "id": f"msg_{number:04d}", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1}}})]
    out.append(ev("ping", {"type": "ping"}))
    for i, block in enumerate(reply.blocks):
        if block[0] == "text":
            out.append(ev("content_block_start", {"type": "content_block_start", "index": i,
                                                  "content_block": {"type": "text", "text": ""}}))
            for part in _chunks(block[1]):
                out.append(ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                                      "delta": {"type": "text_delta", "text": part}}))
        else:
            _, tool_id, name, args = block
            out.append(ev("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                "type": "tool_use", "id": tool_id, "name": name, "input": {}}}))
            for part in _chunks(json.dumps(args)):
                out.append(ev("content_block_delta", {"type": "content_block_delta", "index": i,
                                                      "delta": {"type": "input_json_delta", "partial_json": part}}))
        out.append(ev("content_block_stop", {"type": "content_block_stop", "index": i}))
        if i == 0 and reply.stream_error is not None:
            out.append(ev("error", reply.stream_error))
            return out
        if i == 0 and reply.fault == "bad_event_json":
            out.append(b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 1, "delt\n\n')
    out.append(ev("message_delta", {"type": "message_delta",
                                    "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                                    "usage": {"output_tokens": usage.get("output_tokens", 10)}}))
    out.append(ev("message_stop", {"type": "message_stop"}))
    return out


class FakeAnthropic:
    """The scripted server; `url` is its base URL, `requests` what it was sent."""

    def __init__(self, script: list[Reply]):
        self.script = list(script)
        self.requests: list[dict] = []
        self.closed = False
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake.lock:
                    fake.requests.append({"path": self.path, "body": body,
                                          "headers": {k.lower(): v for k, v in self.headers.items()}})
                    number = len(fake.requests)
                    reply = fake.script.pop(0) if fake.script else error(500, "api_error", "the script ran out")
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    if reply.error is not None:
                        data = json.dumps(reply.error).encode()
                        self.send_response(reply.status)
                        self.send_header("content-type", "application/json")
                        self.send_header("content-length", str(len(data)))
                        for k, v in reply.headers.items():
                            self.send_header(k, v)
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    if reply.fault == "bad_body":
                        data = b'{"id": "msg_x", "type": "message", "role": "assistant", "content": [{"ty'
                        self.send_response(200)
                        self.send_header("content-type", "application/json")
                        self.send_header("content-length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("cache-control", "no-cache")
                    self.send_header("connection", "close")
                    self.end_headers()
                    chunks = sse(reply, body.get("model", "?"), number)
                    if reply.fault == "pings":
                        self.wfile.write(chunks[0])
                        while not fake.closed:
                            self.wfile.write(b'event: ping\ndata: {"type": "ping"}\n\n')
                            self.wfile.flush()
                            time.sleep(reply.ping_every)
                        return
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    self.close_connection = True
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    pass  # the client gave up waiting (a timeout test)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self.closed = True
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "FakeAnthropic":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
