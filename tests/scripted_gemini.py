"""A scripted stand-in for the Gemini API (`generateContent`, and `streamGenerateContent` as
server-sent events): what the Gemini CLI talks to when `GOOGLE_GEMINI_BASE_URL` points here.

Like `tests/scripted_model.py` for Claude Code: each request of the agent loop (one that
offers tools) is answered with the next scripted step, a `run_shell_command` function call or
a text, and kept, so a test reads exactly what Gemini CLI and its hooks put in front of the
model. Requests without tools (the model router's classification, a next-speaker check, a
title) get a JSON text that answers each of them and do not consume the script: the router
that gets no answer it can parse prints a stack trace and waits before it falls back.

The wire shapes, as Gemini CLI 0.61 sends and reads them: `POST
/v1beta/models/MODEL:generateContent` and `…:streamGenerateContent?alt=sse`; a request holds
`contents` (`{"role": "user" | "model", "parts": [{"text"} | {"functionCall"} |
{"functionResponse"}]}`), `systemInstruction`, `tools` (`[{"functionDeclarations": […]}]`);
an answer (each `data:` event of the stream) is `{"candidates": [{"content": {"role":
"model", "parts": […]}, "finishReason", "index"}], "usageMetadata", "modelVersion"}`.
"""

import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.scripted_model import JsonHandler, Scripted, Step

MODEL = "gemini-2.5-flash"
# One text for every side request: the router's classification (`reasoning`, `model_choice`),
# the next-speaker check (`next_speaker`); other keys are ignored by each reader.
SIDE_ANSWER = json.dumps(
    {"reasoning": "scripted", "model_choice": "flash", "next_speaker": "user"}
)  # fmt: skip


@dataclass
class ScriptedGemini(Scripted):
    """Gemini CLI's side: the Gemini API (its base URL is the server's root)."""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        return _handler(self)

    @staticmethod
    def texts(message: dict[str, Any]) -> str:
        return _texts(message)

    def answer(self, body: dict[str, Any]) -> tuple[Step, int]:
        return self.next_step(body, Step(text=SIDE_ANSWER))

    def context_of_last_turn(self) -> str:
        """Every text of the newest agent-loop request after its last model turn: the
        user's words plus what hooks added (`<hook_context>` parts), as one string."""
        contents = [c for c in self.requests[-1].get("contents", []) if isinstance(c, dict)]
        last_model = max(
            (n for n, c in enumerate(contents) if c.get("role") == "model"), default=-1
        )  # fmt: skip
        return "\n".join(_texts(c) for c in contents[last_model + 1 :])

    def tool_names(self) -> list[str]:
        """The functions the newest agent-loop request offered the model."""
        return [
            declaration.get("name", "")
            for tool in self.requests[-1].get("tools", [])
            for declaration in tool.get("functionDeclarations", [])
        ]  # fmt: skip


def _texts(content: dict[str, Any]) -> str:
    """The texts of one content: its text parts and the outputs of function responses."""
    said = []
    for part in content.get("parts") or []:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            said.append(part["text"])
        elif isinstance(part.get("functionResponse"), dict):
            said.append(json.dumps(part["functionResponse"].get("response")))
    return "\n".join(said)


def _answer(step: Step, n: int) -> dict[str, Any]:
    """One whole answer, as `generateContent` returns it and each stream event carries it."""
    if step.bash is not None:
        call = {"name": "run_shell_command", "args": {"command": step.bash}, "id": f"call_{n:04d}"}
        parts: list[dict[str, Any]] = [{"functionCall": call}]
    else:
        parts = [{"text": step.text}]
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20}
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": usage,
        "modelVersion": MODEL,
        "responseId": f"resp_{n:04d}",
    }


def _handler(model: ScriptedGemini) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_POST(self) -> None:
            body = self._body()
            method = self.path.split("?", 1)[0].rsplit(":", 1)[-1]
            if method == "countTokens":
                self._json({"totalTokens": 10})
                return
            if method not in ("generateContent", "streamGenerateContent"):
                self._json({"error": {"code": 404, "message": f"not scripted: {self.path}"}}, 404)
                return
            step, n = model.answer(body)
            if method == "generateContent":
                self._json(_answer(step, n))
                return
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(_answer(step, n))}\r\n\r\n".encode())
            self.wfile.flush()

        def do_GET(self) -> None:
            self._json({"models": [{"name": f"models/{MODEL}"}]})

    return Handler
