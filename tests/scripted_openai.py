"""A scripted stand-in for an OpenAI-compatible model API (Chat Completions, streamed as
server-sent events): what opencode talks to through a custom `@ai-sdk/openai-compatible`
provider.

Like `tests/scripted_model.py` for Claude Code: each request of the agent loop (one that
offers tools) is answered with the next scripted step, a `bash` tool call or a text, and
kept, so a test reads exactly what opencode and its plugins put in front of the model. Side
requests (a session title) get a short text and do not consume the script.
"""

import json
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.scripted_model import JsonHandler, Scripted, Step

MODEL = "scripted"


@dataclass
class ScriptedOpenAI(Scripted):
    """opencode's side: Chat Completions."""

    path = "/v1"

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    @staticmethod
    def texts(message: dict[str, Any]) -> str:
        return _texts(message)

    def answer(self, body: dict[str, Any]) -> tuple[Step, int]:
        return self.next_step(body, Step(text="scripted title"))


def _texts(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(
        part.get("text", "") for part in content or [] if isinstance(part, dict)
    )  # fmt: skip


def _chunks(step: Step, n: int) -> list[dict[str, Any]]:
    """One answer as Chat Completions streams it: role, content or a tool call, finish, usage."""
    if step.bash is not None:
        arguments = json.dumps({"command": step.bash, "description": "scripted step"})
        call = {"index": 0, "id": f"call_{n:04d}", "type": "function",
                "function": {"name": "bash", "arguments": arguments}}  # fmt: skip
        deltas: list[dict[str, Any]] = [{"role": "assistant", "tool_calls": [call]}]
        finish = "tool_calls"
    else:
        deltas = [{"role": "assistant", "content": ""}, {"content": step.text}]
        finish = "stop"
    head = {"id": f"chatcmpl-{n:04d}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": MODEL}  # fmt: skip
    chunks = [
        {**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
    chunks.append({**head, "choices": [], "usage": usage})
    return chunks


def _whole(step: Step, n: int) -> dict[str, Any]:
    """The same answer unstreamed, for a request that did not ask for a stream."""
    message: dict[str, Any] = {"role": "assistant", "content": step.text}
    finish = "stop"
    if step.bash is not None:
        call = _chunks(step, n)[0]["choices"][0]["delta"]["tool_calls"][0]
        message = {"role": "assistant", "content": None, "tool_calls": [
            {k: v for k, v in call.items() if k != "index"}]}  # fmt: skip
        finish = "tool_calls"
    return {
        "id": f"chatcmpl-{n:04d}", "object": "chat.completion", "created": int(time.time()),
        "model": MODEL, "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }  # fmt: skip


def _handler(model: ScriptedOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = self._body()
            if not self.path.endswith("/chat/completions"):
                self._json({"error": {"message": f"not scripted: {self.path}"}}, 404)
                return
            step, n = model.answer(body)
            if not body.get("stream"):
                self._json(_whole(step, n))
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.end_headers()
            for chunk in _chunks(step, n):
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def do_GET(self) -> None:
            self._json({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    return Handler
