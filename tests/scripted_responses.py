"""A scripted stand-in for OpenAI's Responses API (streamed as server-sent events): what the
Codex CLI talks to through a custom model provider (`wire_api = "responses"`).

Like `tests/scripted_model.py` for Claude Code: each request of the agent loop (one that
offers tools) is answered with the next scripted step, an `exec_command` function call or a
text, and kept, so a test reads exactly what Codex and its hooks put in front of the model.
Requests without tools (a title, a summary) get a short text and do not consume the script.

The stream, as Codex 0.171 reads it: `response.created`, then for each output item
`response.output_item.added` and `response.output_item.done` (a `function_call` whose
`arguments` are a JSON string, or a `message` with `output_text` content), then
`response.completed` with the response's `usage`.
"""

import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.scripted_model import JsonHandler, Scripted, Step

MODEL = "scripted"


@dataclass
class ScriptedResponses(Scripted):
    """Codex's side: the Responses API."""

    path = "/v1"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    @staticmethod
    def texts(message: dict[str, Any]) -> str:
        return _texts(message)

    def answer(self, body: dict[str, Any]) -> tuple[Step, int]:
        return self.next_step(body, Step(text="scripted title"))

    def context_of_last_turn(self) -> str:
        """Every text of the newest agent-loop request after its last assistant message: the
        user's words plus what hooks added (as developer messages), as one string."""
        items = [i for i in self.requests[-1].get("input", []) if isinstance(i, dict)]
        last_assistant = max(
            (n for n, i in enumerate(items) if _is_assistant(i)), default=-1
        )  # fmt: skip
        return "\n".join(_texts(i) for i in items[last_assistant + 1 :])

    def roles_of_last_turn(self) -> list[str]:
        """The roles of the messages after the newest request's last assistant message."""
        items = [i for i in self.requests[-1].get("input", []) if isinstance(i, dict)]
        last = max((n for n, i in enumerate(items) if _is_assistant(i)), default=-1)
        return [i.get("role", "") for i in items[last + 1 :] if i.get("type") == "message"]


def _is_assistant(item: dict[str, Any]) -> bool:
    return item.get("type") == "message" and item.get("role") == "assistant"


def _texts(item: dict[str, Any]) -> str:
    """The texts of one input item: a message's parts, a tool call's output."""
    if item.get("type") == "function_call_output":
        output = item.get("output")
        return output if isinstance(output, str) else json.dumps(output)
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(
        part.get("text", "") for part in content or [] if isinstance(part, dict)
    )  # fmt: skip


def _output_item(step: Step, n: int) -> dict[str, Any]:
    if step.bash is not None:
        return {
            "type": "function_call", "id": f"fc_{n:04d}", "call_id": f"call_{n:04d}",
            "name": "exec_command", "arguments": json.dumps({"cmd": step.bash}),
            "status": "completed",
        }  # fmt: skip
    text = {"type": "output_text", "text": step.text, "annotations": []}
    return {"type": "message", "id": f"msg_{n:04d}", "role": "assistant",
            "status": "completed", "content": [text]}  # fmt: skip


def _events(step: Step, n: int) -> list[tuple[str, dict[str, Any]]]:
    """One answer as the Responses API streams it."""
    response = {"id": f"resp_{n:04d}", "object": "response", "model": MODEL,
                "status": "in_progress", "output": []}  # fmt: skip
    item = _output_item(step, n)
    usage = {
        "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 20,
    }  # fmt: skip
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    return [
        ("response.created", {"type": "response.created", "response": response}),
        ("response.output_item.added",
         {"type": "response.output_item.added", "output_index": 0, "item": item}),
        ("response.output_item.done",
         {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": done}),
    ]  # fmt: skip


def _handler(model: ScriptedResponses) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = self._body()
            if not self.path.rstrip("/").endswith("/responses"):
                self._json({"error": {"message": f"not scripted: {self.path}"}}, 404)
                return
            step, n = model.answer(body)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.end_headers()
            for name, data in _events(step, n):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        def do_GET(self) -> None:
            self._json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    return Handler
