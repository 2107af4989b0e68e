"""Harness payloads (Claude Code hooks, opencode tool.execute.after) mapped to actions, by
each harness module."""

import json
import subprocess
import sys

import pytest
from ctxd.discovery import actions, payloads
from ctxd.discovery.actions import CommandAction, FileEditAction, PromptAction
from ctxd.harness.claude import tool_actions as claude_actions
from ctxd.harness.opencode import tool_actions as opencode_actions
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

LAUNCH = "nohup python -m sglang.launch_server --port 30000 > server.log 2>&1 &"


def from_claude(payload: object) -> list:
    """A Claude Code payload's actions, as the service validates them."""
    return [actions.parse_action(a) for a in claude_actions(payload)]


def from_opencode(payload: object) -> list:
    return [actions.parse_action(a) for a in opencode_actions(payload)]


def claude(event: str, **fields: object) -> dict:
    base = {
        "session_id": "abc",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/srv/work",
        "hook_event_name": event,
    }
    return {**base, **fields}


def test_claude_bash_success_is_exit_zero_with_output_tail() -> None:
    payload = claude(
        "PostToolUse",
        tool_name="Bash",
        tool_use_id="toolu_01",
        tool_input={"command": "ls -la", "description": "list"},
        tool_response={"stdout": "a\nb", "stderr": "warn", "interrupted": False, "isImage": False},
    )
    (action,) = from_claude(payload)
    assert isinstance(action, CommandAction)
    assert (action.command, action.cwd, action.exit_status) == ("ls -la", "/srv/work", 0)
    assert action.output_tail == "a\nb\nwarn"
    assert action.tool_id == "toolu_01" and action.harness == "claude"
    assert action.background is False


@pytest.mark.parametrize(("given", "seconds"), [(1500, 1.5), (-3, None), (float("nan"), None)])
def test_duration_when_the_payload_has_one(given: float, seconds: float | None) -> None:
    payload = claude(
        "PostToolUse", tool_name="Bash", tool_input={"command": "x"}, tool_response={},
        duration_ms=given,
    )  # fmt: skip
    (action,) = from_claude(payload)
    assert isinstance(action, CommandAction) and action.duration_s == seconds


def test_claude_background_bash_has_no_exit_status() -> None:
    payload = claude(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "python serve.py", "run_in_background": True},
        tool_response={"stdout": "", "stderr": "", "interrupted": False, "backgroundTaskId": "b1"},
    )
    (action,) = from_claude(payload)
    assert isinstance(action, CommandAction)
    assert action.background is True and action.exit_status is None


@pytest.mark.parametrize(
    "response",
    [{"backgroundTaskId": "b2"}, {"backgroundedByUser": True}, {"timedOutAfterMs": 120000}],
)
def test_claude_commands_moved_to_the_background_later(response: dict) -> None:
    payload = claude(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "python train.py"},
        tool_response={"stdout": "", "stderr": "", "interrupted": False, **response},
    )
    (action,) = from_claude(payload)
    assert isinstance(action, CommandAction)
    assert action.background is True and action.exit_status is None


def test_claude_interpreted_return_code_is_unknown_exit() -> None:
    payload = claude(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "grep x f"},
        tool_response={"stdout": "", "returnCodeInterpretation": "No matches found"},
    )
    (action,) = from_claude(payload)
    assert isinstance(action, CommandAction) and action.exit_status is None


def test_claude_failure_reads_exit_code_from_error() -> None:
    payload = claude(
        "PostToolUseFailure",
        tool_name="Bash",
        tool_input={"command": "make"},
        error="Exit code 2\nmake: *** No targets specified",
    )
    (action,) = from_claude(payload)
    assert isinstance(action, CommandAction)
    assert action.exit_status == 2 and "No targets" in action.output_tail


@pytest.mark.parametrize(
    ("tool", "tool_input", "path"),
    [
        (
            "Edit",
            {"file_path": "/srv/work/a.py", "old_string": "a", "new_string": "b"},
            "/srv/work/a.py",
        ),
        ("Write", {"file_path": "/srv/work/b.py", "content": "x"}, "/srv/work/b.py"),
        ("MultiEdit", {"file_path": "/srv/work/c.py", "edits": []}, "/srv/work/c.py"),
        (
            "NotebookEdit",
            {"notebook_path": "/srv/work/n.ipynb", "new_source": ""},
            "/srv/work/n.ipynb",
        ),
    ],
)
def test_claude_file_edits(tool: str, tool_input: dict, path: str) -> None:
    payload = claude("PostToolUse", tool_name=tool, tool_input=tool_input, tool_response={})
    (action,) = from_claude(payload)
    assert isinstance(action, FileEditAction)
    assert (action.path, action.tool) == (path, tool)


def test_claude_prompt_and_ignored_events() -> None:
    (action,) = from_claude(claude("UserPromptSubmit", prompt="Deploy Kimi on SGLang"))
    assert isinstance(action, PromptAction) and action.text == "Deploy Kimi on SGLang"
    assert from_claude(claude("UserPromptSubmit", prompt="  ")) == []
    assert from_claude(claude("PostToolUse", tool_name="Read", tool_input={})) == []
    assert from_claude(claude("Stop")) == []
    assert from_claude(claude("PostToolUseFailure", tool_name="Edit", tool_input={})) == []
    for junk in (None, [], "text", 3, {"hook_event_name": 5}):
        assert from_claude(junk) == []
    bad_input = claude("PostToolUse", tool_name="Bash", tool_input="rm", tool_response=None)
    assert from_claude(bad_input) == []


def test_opencode_bash_with_args_and_metadata_exit() -> None:
    forwarded = {
        "input": {"tool": "bash", "sessionID": "ses_1", "callID": "call_9"},
        "output": {"title": LAUNCH, "output": "", "metadata": {"output": "", "exit": 0}},
        "args": {"command": LAUNCH, "description": "start server"},
        "cwd": "/srv/work",
    }
    (action,) = from_opencode(forwarded)
    assert isinstance(action, CommandAction)
    assert (action.command, action.exit_status, action.cwd) == (LAUNCH, 0, "/srv/work")
    assert action.tool_id == "call_9" and action.harness == "opencode"


def test_opencode_without_args_uses_title_and_newer_input_args() -> None:
    older = {"input": {"tool": "bash"}, "output": {"title": "make", "metadata": {"exit": 2}}}
    (action,) = from_opencode(older)
    assert isinstance(action, CommandAction)
    assert (action.command, action.exit_status) == ("make", 2)
    newer = {"input": {"tool": "edit", "args": {"filePath": "/srv/work/x.py"}}, "output": {}}
    (edit,) = from_opencode(newer)
    assert isinstance(edit, FileEditAction) and edit.path == "/srv/work/x.py"
    assert from_opencode({"input": {"tool": "read"}, "output": {}}) == []
    assert from_opencode({"input": {"tool": "bash"}, "output": {"metadata": {}}}) == []
    assert from_opencode("junk") == []


def test_caps_cut_command_start_kept_output_end_kept() -> None:
    big = "x" * 20_000 + "END"
    payload = claude(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "echo " + big},
        tool_response={"stdout": "start" + big},
    )
    (action,) = from_claude(payload)
    assert isinstance(action, CommandAction)
    assert len(action.command) == payloads.COMMAND_MAX_CHARS and action.command.startswith("echo x")
    assert len(action.output_tail) == payloads.OUTPUT_TAIL_MAX_CHARS
    assert action.output_tail.endswith("END")
    prompt = actions.parse_action({"kind": "prompt", "text": "p" * 100_000})
    assert isinstance(prompt, PromptAction) and len(prompt.text) == payloads.PROMPT_MAX_CHARS
    # a client's over-long refusal is cut like the rest, not refused
    refused = actions.parse_action({"kind": "command", "command": "x", "refused": "r" * 5_000})
    assert isinstance(refused, CommandAction)
    assert refused.refused is not None and len(refused.refused) == payloads.REFUSAL_MAX_CHARS


def test_one_megabyte_of_output_is_cut_fast() -> None:
    payload = claude(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": "cat big"},
        tool_response={"stdout": "line\n" * 200_000},
    )
    (action,) = claude_actions(payload)
    assert len(action["output_tail"]) == payloads.OUTPUT_TAIL_MAX_CHARS


def test_malformed_dict_is_refused_by_the_model() -> None:
    with pytest.raises(ValidationError):
        actions.parse_action({"kind": "command", "command": ""})
    with pytest.raises(ValidationError):
        actions.parse_action({"kind": "nope"})


def test_payloads_module_imports_without_pydantic() -> None:
    code = (
        "import sys, json; import ctxd.discovery.payloads as p; "
        "print(json.dumps(['pydantic' in sys.modules, 'psutil' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == [False, False]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = [
    "command",
    "file_path",
    "notebook_path",
    "run_in_background",
    "stdout",
    "stderr",
    "backgroundTaskId",
    "interrupted",
    "filePath",
    "exit",
    "tool",
    "callID",
    "metadata",
]
LOOSE = st.dictionaries(st.sampled_from(KEYS), JSON | st.text(max_size=30), max_size=6)
CLAUDE = st.fixed_dictionaries(
    {
        "hook_event_name": st.sampled_from(["PostToolUse", "PostToolUseFailure", "Stop"]),
        "tool_name": st.sampled_from(["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit", "X"]),
    },
    optional={"tool_input": LOOSE | JSON, "tool_response": LOOSE | JSON, "error": JSON,
              "prompt": JSON, "cwd": JSON, "tool_use_id": JSON, "duration_ms": JSON},
)  # fmt: skip
OPENCODE = st.fixed_dictionaries(
    {"input": st.fixed_dictionaries({"tool": st.sampled_from(["bash", "edit", "write"])}) | JSON},
    optional={"output": st.fixed_dictionaries({"metadata": LOOSE}, optional={"title": JSON})
              | JSON, "args": LOOSE | JSON, "cwd": JSON},
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(CLAUDE, OPENCODE)
def test_arbitrary_payloads_map_to_valid_actions_or_nothing(claude_data: dict, oc: dict) -> None:
    for item in claude_actions(claude_data) + opencode_actions(oc):
        actions.parse_action(item)  # whatever the mapping emits, the model accepts


def test_commands_carrying_secrets_are_redacted_by_the_service_redactor() -> None:
    from ctxd import redact

    secret_cmd = (
        "HF_TOKEN=hf_AbCdEf0123456789abcdef0123 nohup python -m sglang.launch_server "
        "--api-key sk-live-0123456789abcdefghijkl --port 30000 > s.log 2>&1 &"
    )
    payload = claude(
        "PostToolUse",
        tool_name="Bash",
        tool_input={"command": secret_cmd},
        tool_response={"stdout": "using api key sk-live-0123456789abcdefghijkl"},
    )
    (action,) = from_claude(payload)
    clean = redact.scrub(action)
    dumped = clean.model_dump_json()
    assert "hf_AbCdEf0123456789abcdef0123" not in dumped
    assert "sk-live-0123456789abcdefghijkl" not in dumped
    assert isinstance(clean, CommandAction) and "sglang.launch_server" in clean.command
