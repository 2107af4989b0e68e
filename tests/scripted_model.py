"""A scripted stand-in for a model API: the real agent harness talks to it instead of a model.

Claude Code speaks the Anthropic Messages API (streamed as server-sent events). The stand-in
answers each request of the agent loop (the ones that offer tools) with the next scripted step,
a `Bash` tool call or a text, and keeps every request, so a test reads exactly what the
harness put in front of the model, hooks' additions included. Side requests (titles,
summaries) get a short text and do not consume the script.
"""

import itertools
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    """One scripted answer: a shell command for the harness to run, a subagent to start, or a
    text that ends the turn."""

    bash: str | None = None
    background: bool = False
    text: str = "done"
    agent: str | None = None  # a subagent to start (Claude Code's Agent tool) with this prompt


@dataclass
class Scripted:
    """What every stand-in shares: a local HTTP server, the script, and the requests kept.
    A subclass names its request handler (`handler`), the part of the URL after the port
    (`path`) and how a message's texts read (`texts`)."""

    steps: list[Step]
    requests: list[dict[str, Any]] = field(default_factory=list)
    side_requests: list[dict[str, Any]] = field(default_factory=list)
    path = ""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{self.path}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @staticmethod
    def texts(message: dict[str, Any]) -> str:
        raise NotImplementedError

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_step(self, body: dict[str, Any], side: Step) -> tuple[Step, int]:
        """The step that answers `body` and its answer's number: the script's next for an
        agent-loop request (it offers tools), `side` for any other, which is kept apart."""
        with self._lock:
            if not body.get("tools"):
                self.side_requests.append(body)
                return side, next(self._ids)
            self.requests.append(body)
            return (self.steps.pop(0) if self.steps else Step()), next(self._ids)

    def context_of_last_turn(self) -> str:
        """Every text the model was given in the newest agent-loop request after its last
        assistant message: the user's words plus what hooks or plugins added, as one string."""
        messages = self.requests[-1]["messages"]
        last_assistant = max(
            (i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1
        )
        return "\n".join(self.texts(m) for m in messages[last_assistant + 1 :])


@dataclass
class ScriptedModel(Scripted):
    """Claude Code's side: the Anthropic Messages API."""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    @staticmethod
    def texts(message: dict[str, Any]) -> str:
        return _texts(message)

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        step, n = self.next_step(body, Step(text="ok"))
        return _message(step, body.get("model", "claude"), n)

    def all_context(self) -> str:
        return "\n".join(_texts(m) for body in self.requests for m in body["messages"])


def _texts(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    parts = []
    for block in content:
        if block.get("type") == "text":
            parts.append(block["text"])
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            parts.append(inner if isinstance(inner, str) else json.dumps(inner))
    return "\n".join(parts)


def _message(step: Step, model: str, n: int) -> dict[str, Any]:
    if step.agent is not None:
        tool_input = {"description": "scripted subagent", "prompt": step.agent,
                      "subagent_type": "general-purpose"}  # fmt: skip
        content = [{"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Agent",
                    "input": tool_input}]  # fmt: skip
        stop = "tool_use"
    elif step.bash is not None:
        tool_input: dict[str, Any] = {"command": step.bash, "description": "scripted step"}
        if step.background:
            tool_input["run_in_background"] = True
        call = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash", "input": tool_input}
        content = [call]
        stop = "tool_use"
    else:
        content = [{"type": "text", "text": step.text}]
        stop = "end_turn"
    return {
        "id": f"msg_{n:04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 10},
    }


def _events(message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A whole message as the Messages API streams it."""
    head = {**message, "content": [], "stop_reason": None}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": head})
    ]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": i}),
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
        events[-3][1]["content_block"] = start
    stop = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events += [
        ("message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 10}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


class JsonHandler(BaseHTTPRequestHandler):
    """A stand-in's HTTP side: a request's JSON body in, JSON answers out, no access log."""

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        return dict(json.loads(self.rfile.read(length) or b"{}"))

    def _json(self, value: Any, status: int = 200) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _handler(model: ScriptedModel) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = self._body()
            if "count_tokens" in self.path:
                self._json({"input_tokens": 100})
                return
            message = model.answer(body)
            if not body.get("stream"):
                self._json(message)
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for name, data in _events(message):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def do_GET(self) -> None:
            self._json({})

    return Handler
