"""The harnesses that run a hook command per event (`… hook <name>`), as the hook sees them:
the payload's event name, which events a person waits on (their time budget) and should hear
of trouble in, where the harness injects context, and the one hook output shape Claude Code
defined and Codex and Gemini CLI took over. Claude Code also keeps the session for the
agent's own shells (CLAUDE_ENV_FILE) and can be woken by a waiter (`hook.py --wake`).

Data and plain functions, standard library only: the hook imports this on every event. The
server reads the harnesses' payloads with its own adapters (`ctxd.harness`), and answers an
event a harness posted itself in the shape `output` writes here.
"""

import os

TYPE_CHECKING = False  # typing's own flag costs the hook its import
if TYPE_CHECKING:
    from typing import Any


class CommandHook:
    """One harness that runs a command per hook event: how to read and answer it."""

    def __init__(
        self, name: str, label: str, slow_events: "dict[str, float]",
        tell_events: "tuple[str, ...]", inject_events: "tuple[str, ...]", shows_as: str = "",
    ) -> None:  # fmt: skip
        self.name = name
        self.label = label  # its name for people
        self.slow_events = slow_events  # events a person waits on, with their time budget (s)
        self.tell_events = tell_events  # events whose trouble the person should see
        self.inject_events = inject_events  # events whose context reaches the model
        self.shows_as = shows_as  # how the harness changes the context on its way to the model

    def event_name(self, payload: "dict[str, Any]") -> "str | None":
        """The payload's event name; None when it names none (not this harness's)."""
        name = payload.get("hook_event_name")
        return name if isinstance(name, str) and name else None

    def output(self, event: str, answer: "dict[str, Any]") -> "dict[str, Any] | None":
        """ctxd's answer ({"session", "context", "message"}) as the harness's hook output: the
        context for the model, after its lead, on the events where the harness injects it;
        a message for the person."""
        output: dict[str, Any] = {}
        context, message = answer.get("context"), answer.get("message")
        if context and event in self.inject_events:
            output["hookSpecificOutput"] = {
                "hookEventName": event,
                "additionalContext": context_lead(answer.get("session", ""), self.shows_as)
                + context,
            }
        if message:
            output["systemMessage"] = f"ctxd: {message}"
        return output or None

    def trouble(self, event: str, message: str) -> "dict[str, Any] | None":
        """A one-line problem, shown to the person on the events they should hear it on."""
        return self.output(event, {"message": message}) if event in self.tell_events else None

    def remember(self, event: str, sid: str) -> None:
        """Keep the session for the agent's own commands where the harness allows it."""

    def wakes(self, event: str, payload: "dict[str, Any]") -> "bool | None":
        """Whether this event starts a waiter (`hook.py --wake`, for a harness that can be
        woken): True, it launched something, whose outcome is pending; False, wait if ctxd
        says an attempt is pending (the turn's end); None, no waiter."""
        return None


class ClaudeCodeHook(CommandHook):
    def remember(self, event: str, sid: str) -> None:
        """At SessionStart Claude Code names a file (CLAUDE_ENV_FILE) whose exports its Bash
        tool's shells load: CTXD_SESSION there sends the agent's `ctxd note` to this session."""
        path = os.environ.get("CLAUDE_ENV_FILE")
        if event != "SessionStart" or not path or not sid:
            return
        import shlex

        line = f"export CTXD_SESSION={shlex.quote(sid)}\n"
        try:
            with open(path, "a+", encoding="utf-8") as exports:
                exports.seek(0)
                if line not in exports.read():
                    exports.write(line)
        except OSError:
            pass

    def wakes(self, event: str, payload: "dict[str, Any]") -> "bool | None":
        """A Bash call that sent something off (`run_in_background`, or a lone `&`, `nohup`,
        `setsid` in its line) waits for its outcome; the turn's end waits for any pending."""
        if event == "Stop":
            return False
        tool = payload.get("tool_input")
        bash = event == "PostToolUse" and payload.get("tool_name") == "Bash"
        if not bash or not isinstance(tool, dict):
            return None
        if tool.get("run_in_background") is True:
            return True
        command = tool.get("command")
        return True if isinstance(command, str) and sends_off(command) else None


def sends_off(command: str) -> bool:
    """A line that sends something off: a lone `&` (not `&&`, `>&`, `&>`), or `nohup`/`setsid`
    (only a waiter asks: `re` is not the hook's to import on every event)."""
    import re

    return re.search(r"(?<![&>])&(?![&>])|(?:^|[\s;|(])(?:nohup|setsid)\s", command) is not None


def context_lead(sid: str, shows_as: str = "") -> str:
    """The line before a dump handed to the model: what it is, as a fact (the harnesses ask
    that injected context read as information, not orders), and how the harness shows it
    (`shows_as`); its last line says where more is."""
    told = f" {shows_as}" if shows_as else ""
    return f"[ctxd] Saved working state of session `{sid}`, as ctxd recorded it.{told}\n\n"


# Events a person waits on get the time a fresh snapshot may take; the others are quick.
HOOKS: "dict[str, CommandHook]" = {
    "claude": ClaudeCodeHook(
        "claude", "Claude Code",
        {"SessionStart": 30.0, "UserPromptSubmit": 30.0, "PreCompact": 60.0, "StopFailure": 30.0,
         "SubagentStart": 30.0},
        ("SessionStart", "UserPromptSubmit", "PreCompact"),
        ("SessionStart", "UserPromptSubmit", "SubagentStart"),
    ),
    "codex": CommandHook(
        "codex", "Codex",
        {"SessionStart": 30.0, "UserPromptSubmit": 30.0, "PreCompact": 60.0},
        ("SessionStart", "UserPromptSubmit", "PreCompact"),
        ("SessionStart", "UserPromptSubmit"),  # reaches the model as a developer message
    ),
    # not PreCompress among those told: it fires on every model request, nor a tool call's
    "gemini": CommandHook(
        "gemini", "Gemini CLI",
        {"SessionStart": 30.0, "BeforeAgent": 30.0, "PreCompress": 60.0},
        ("SessionStart", "BeforeAgent"),
        ("SessionStart", "BeforeAgent"),  # inside the turn's prompt, as <hook_context>
        # in words: the signs themselves would read as the entities (readers retyped `&gt;`)
        "Gemini CLI writes each less-than sign in it as &lt; and each greater-than sign as"
        " &gt;: a command holding them runs with the signs.",
    ),
}  # fmt: skip
COMMAND_HOOKS = tuple(HOOKS)  # opencode runs ctxd's plugin instead
