"""Claude Code's newer hook fields, in payloads shaped as its 2.1.197 CLI sent them when driven
offline here (tests/test_harness_claude.py drives the CLI itself): PostCompact's
`compact_summary` kept with the version taken as it compacted and set beside that version's
dump for its page; StopFailure as a snapshot; PostToolUse's `duration_ms`, and a long Bash
output read from the end of its `persistedOutputPath`; `prompt_id` and `tool_use_id` telling a
second delivery of one event (ctxd's hooks wired twice) from a new one."""

import json
from pathlib import Path

import httpx
import pytest
from ctxd.harness import claude
from ctxd.harness.claude import ADAPTER as CLAUDE
from ctxd.hookclient.harnesses import HOOKS
from ctxd.render import pagedata
from ctxd.store.database import Store

from tests.conftest import Server

CONVERSATION = "bd57370d-8d66-4b26-bdc8-b6beae471709"
SECRET = "hf_Tq7vK2mXw9LkP4sR8yB1nC5dF3gH6jZ0aW"
SUMMARY = (
    "The user asked why the vLLM server hangs. The agent relaunched it with "
    f"--enforce-eager (HF_TOKEN={SECRET}); it still waits on NCCL."
)


def event(name: str, cwd: Path, **fields: object) -> dict[str, object]:
    return {
        "session_id": CONVERSATION,
        "transcript_path": str(cwd / "transcript.jsonl"),
        "cwd": str(cwd),
        "hook_event_name": name,
        **fields,
    }


def send(client: httpx.Client, payload: dict[str, object], pid: int = 4242) -> dict:
    """One hook event as `ctxd hook claude` forwards it (from a harness process `pid`)."""
    said = client.post("/api/hooks/claude", json={"payload": payload, "harness_pid": pid})
    assert said.status_code == 200, said.text
    return dict(said.json())


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "vllm-hang"
    folder.mkdir()
    return folder


def store(server: Server) -> Store:
    return Store(server.data_dir / "ctxd.db")


def test_the_summary_after_a_compaction_stays_with_the_version_taken_as_it_compacted(
    server: Server, client: httpx.Client, work: Path
) -> None:
    prompt = "Find out why the vLLM server hangs at startup on 4 GPUs"
    sid = send(client, event("UserPromptSubmit", work, prompt_id="p1", prompt=prompt))["session"]
    send(client, event("PreCompact", work, prompt_id="p2", trigger="manual"))
    (taken,) = client.get(f"/api/sessions/{sid}/snapshots").json()
    send(client, event("SessionStart", work, prompt_id="p2", source="compact"))
    later = client.post(f"/api/sessions/{sid}/snapshots", json={"note": "later", "force": True})
    assert later.status_code == 201, later.text
    answer = send(client, event("PostCompact", work, prompt_id="p2", trigger="manual",
                                compact_summary=SUMMARY))  # fmt: skip
    assert answer == {"session": sid, "context": None, "message": None,
                      "hook_max_chars": answer["hook_max_chars"]}  # fmt: skip

    # kept with the version the compaction took, not the newest; redacted like all ctxd keeps
    kept = store(server).harness_summary(sid, taken["version"])
    assert kept is not None and kept["harness"] == "Claude Code"
    assert "relaunched it with --enforce-eager" in kept["text"] and SECRET not in kept["text"]
    latest = store(server).latest_version(sid)
    assert latest > taken["version"] and store(server).harness_summary(sid, latest) is None

    # what the version page is given: the summary beside the dump, and what only the dump has
    page = pagedata.version_page(store(server), sid, taken["version"])
    assert page.harness_summary is not None
    assert page.harness_summary.text == kept["text"]
    assert page.harness_summary.harness == "Claude Code"
    assert pagedata.version_page(store(server), sid, latest).harness_summary is None

    # the page itself: the summary once, beside the dump, with what only the dump says
    html = client.get(f"/s/{sid}/v/{taken['version']}").text
    assert html.count('id="harness-summary"') == 1 and 'href="#harness-summary"' in html
    assert "relaunched it with --enforce-eager" in html
    said = "Only in ctxd's dump" if page.harness_summary.only_in_dump else "names every pid"
    assert said in html
    assert 'id="harness-summary"' not in client.get(f"/s/{sid}/v/{latest}").text
    for path in server.data_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_what_only_the_dump_has_is_what_the_summary_never_names() -> None:
    from ctxd.render.harness_summary import only_in

    dump = (
        "## Attempts\n**attempt 1** `python serve.py --tp 4 --port 30000` (pid 4711): "
        "torch.OutOfMemoryError in logs/serve.log\n**attempt 2** `--tp 4 --enforce-eager` "
        "(pid 4790) **running**; port 30000 not listening\n"
    )
    summary = "Relaunched with --enforce-eager after an out-of-memory error; pid 4790 waits."
    assert only_in(dump, summary) == [
        "serve.py", "--tp", "--port", "port 30000", "pid 4711", "OutOfMemoryError",
        "logs/serve.log",
    ]  # fmt: skip
    assert only_in(dump, dump) == []


def test_a_turn_that_fails_on_an_api_error_leaves_a_snapshot_saying_so(
    server: Server, client: httpx.Client, work: Path
) -> None:
    sid = send(client, event("UserPromptSubmit", work, prompt_id="p1", prompt="profile it"))[
        "session"
    ]
    error = {"type": "invalid_request_error", "message": "prompt is too long"}
    details = "400 " + json.dumps({"type": "error", "error": error})
    failed = event("StopFailure", work, prompt_id="p1", error="invalid_request",
                   error_details=details, last_assistant_message="Prompt is too long")  # fmt: skip
    send(client, failed)
    (version,) = client.get(f"/api/sessions/{sid}/snapshots").json()
    note = client.get(f"/api/sessions/{sid}/snapshots/{version['version']}").json()["header"]
    assert note["note"].startswith("Claude Code: the turn failed: invalid_request (400 {")
    assert "prompt is too long" in note["note"]


def tool_results(home: Path) -> Path:
    """Where Claude Code keeps a conversation's long outputs."""
    folder = home / ".claude" / "projects" / "-tmp-vllm-hang" / CONVERSATION / "tool-results"
    folder.mkdir(parents=True)
    return folder


def bash(work: Path, command: str, stdout: str, tool_use_id: str, **response: object) -> dict:
    return event(
        "PostToolUse", work, prompt_id="p1", tool_name="Bash", tool_use_id=tool_use_id,
        tool_input={"command": command, "description": "scripted step"},
        tool_response={"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False,
                       "noOutputExpected": False, **response},
        duration_ms=189,
    )  # fmt: skip


def test_a_long_bash_output_is_read_from_the_end_of_the_file_claude_code_kept_it_in(
    server: Server, client: httpx.Client, work: Path, tmp_path: Path
) -> None:
    sid = send(client, event("UserPromptSubmit", work, prompt_id="p1", prompt="check shards"))[
        "session"
    ]
    whole = "".join(f"shard {n} ok\n" for n in range(1, 40000))
    whole += f"FATAL: checksum mismatch in shard 7 (token {SECRET})\n"
    kept = tool_results(tmp_path / "home") / "b9x2k.txt"
    kept.write_text(whole)
    head = whole[:30000]  # what the payload carries inline: the start
    send(client, bash(work, "python check.py", head, "toolu_0001",
                      persistedOutputPath=str(kept), persistedOutputSize=len(whole)))  # fmt: skip
    (action,) = store(server).list_actions(sid, "command")
    ends = "FATAL: checksum mismatch in shard 7 (token [REDACTED])\n"
    assert action["output_tail"].endswith(ends), action["output_tail"][-200:]
    assert "shard 1 ok" not in action["output_tail"] and SECRET not in action["output_tail"]
    assert action["duration_s"] == 0.189  # duration_ms, read into the action

    # a name outside a conversation's tool-results, or a link out of it: the inline output
    elsewhere = tmp_path / "notes.txt"
    elsewhere.write_text("not claude's\n")
    link = kept.with_name("link.txt")
    link.symlink_to(elsewhere)
    for n, named in enumerate((elsewhere, link, Path("/etc/hostname")), start=2):
        send(client, bash(work, f"python check.py --run {n}", "shard 1 ok\n", f"toolu_000{n}",
                          persistedOutputPath=str(named)))  # fmt: skip
        assert store(server).list_actions(sid, "command")[-1]["output_tail"] == "shard 1 ok\n"


def test_an_event_delivered_twice_is_acted_on_once(
    server: Server, client: httpx.Client, work: Path
) -> None:
    sid = send(client, event("UserPromptSubmit", work, prompt_id="p1", prompt="tune the loader"))[
        "session"
    ]
    # a resume, each hook twice (ctxd's plugin and its settings): its dump waits for the prompt
    resume = event("SessionStart", work, source="resume")
    assert [send(client, resume)["context"] for _ in "12"] == [None, None]
    # the turn's prompt (twice), after the resume: one dump, with it
    said = event("UserPromptSubmit", work, prompt_id="p8", prompt="and the collate fn")
    first_said, said_again = send(client, said), send(client, said)
    assert "“and the collate fn”" in first_said["context"] and said_again["context"] is None
    # a bare "continue" in a turn of its own, twice: one dump
    go = event("UserPromptSubmit", work, prompt_id="p9", prompt="continue")
    first, again = send(client, go), send(client, go)
    assert first["context"] and first["context"].startswith(f"# {sid}")
    assert again["context"] is None
    # a tool call, twice: one action; another call, or the same one from another process, counts
    call = bash(work, "make wheel", "built", "toolu_0042")
    send(client, call)
    send(client, call)
    assert [a["command"] for a in store(server).list_actions(sid, "command")] == ["make wheel"]
    send(client, {**call, "tool_use_id": "toolu_0043"})
    assert len(store(server).list_actions(sid, "command")) == 2
    # a resume of another process (another pid) is a resume of its own: its prompt's dump
    send(client, resume, pid=4343)
    assert send(client, {**said, "prompt_id": "p10"})["context"]


def test_the_adapter_reads_the_new_fields() -> None:
    work = Path("/srv/w")
    compacted = CLAUDE.event(event("PostCompact", work, trigger="auto", compact_summary="sum"))
    assert (compacted.kind, compacted.summary, compacted.event_id) == ("compacted", "sum", "")
    failed = CLAUDE.event(event("StopFailure", work, error="rate_limit"))
    assert (failed.kind, failed.error) == ("failed", "rate_limit")
    tool = CLAUDE.event(bash(work, "ls", "a", "toolu_1", persistedOutputPath="/p/x.txt"))
    assert (tool.output_file, tool.event_id) == ("/p/x.txt", "PostToolUse:toolu_1")
    prompt = CLAUDE.event(event("UserPromptSubmit", work, prompt_id="p7", prompt="go"))
    assert prompt.event_id == "UserPromptSubmit:p7"
    start = CLAUDE.event(event("SessionStart", work, source="resume"))
    assert start.event_id == "SessionStart:resume:"
    odd = CLAUDE.event(event("PostToolUse", work, tool_response="text", tool_name="Bash"))
    assert (odd.output_file, odd.event_id) == ("", "")
    # the plugin and `ctxd install` register the two new events (one source: claude.config),
    # waited for: `claude -p` cuts an asynchronous hook off as it exits
    hooks = claude.config("x")["hooks"]
    for name in ("PostCompact", "StopFailure"):
        assert "async" not in hooks[name][0]["hooks"][0] and hooks[name][0]["hooks"][0]["timeout"]


def test_the_lead_of_an_injected_dump_states_facts_not_orders() -> None:
    # Claude Code's docs ask that injected context read as information, not instructions
    from ctxd.hookclient.harnesses import context_lead

    lead = context_lead("vllm-hang")
    assert lead.startswith("[ctxd] Saved working state of session `vllm-hang`")
    assert "ctxd note" not in lead  # no hint to the model: the dump's last line names the rest
    for order in ("you must", "always", "never", "record progress", "make sure", "please"):
        assert order not in lead.lower(), order


def test_a_subagent_starts_with_the_dump_its_parent_would_resume_from(
    server: Server, client: httpx.Client, work: Path
) -> None:
    """SubagentStart (the payload names the parent's conversation and the subagent's own id):
    answered with the session's dump as the subagent's additionalContext, through the command
    hook's endpoint and the HTTP hook Claude Code posts itself; a second delivery adds none."""
    prompt = "Find out why the vLLM server hangs at startup on 4 GPUs"
    send(client, event("UserPromptSubmit", work, prompt_id="p1", prompt=prompt))
    start = event("SubagentStart", work, agent_id="a1f3", agent_type="general-purpose")
    answer = send(client, start)
    assert prompt in answer["context"], answer  # the objective, in the dump it is handed
    output = HOOKS["claude"].output("SubagentStart", answer)
    assert output is not None
    specific = output["hookSpecificOutput"]
    assert specific["hookEventName"] == "SubagentStart" and prompt in specific["additionalContext"]
    assert send(client, start)["context"] is None  # the same subagent, delivered twice
    posted = client.post(
        "/api/hooks/claude/http",
        json=event("SubagentStart", work, agent_id="b7c9", agent_type="Explore"),
    )
    assert posted.status_code == 200, posted.text
    said = posted.json()["hookSpecificOutput"]
    assert said["hookEventName"] == "SubagentStart" and prompt in said["additionalContext"]
    assert "SubagentStart" in claude.config("ctxd hook claude")["hooks"]  # install wires it
