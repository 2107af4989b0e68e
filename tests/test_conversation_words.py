"""The conversation's own words in a snapshot's narrative, from every harness: the user's newest
prompts (a bare "continue" as an empty text) and what the agent last said as its turn ended
(Claude Code's and Codex's Stop `last_assistant_message`, Gemini CLI's AfterAgent
`prompt_response`, the opencode plugin's idle event), each posted to a real ctxd in the shape
that harness sends and read back from the snapshot the API serves."""

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Server

CONVERSATION = "5e0c1b7a-93f4-4d2e-8a61-0f7c2d9b4e33"
SECRET = "hf_Tq7vK2mXw9LkP4sR8yB1nC5dF3gH6jZ0aW"
REPLY = (
    "Relaunched vLLM with --enforce-eager and HF_TOKEN="
    + SECRET
    + "; it now waits on NCCL init, so the hang is in the collective setup."
)
HARNESSES = ("claude", "codex", "gemini", "opencode")


def prompt_payload(harness: str, cwd: Path, text: str, n: int) -> dict[str, Any]:
    """The user's prompt as the harness's hook (or the opencode plugin) sends it."""
    if harness == "claude":
        return {
            "session_id": CONVERSATION, "transcript_path": str(cwd / "t.jsonl"),
            "cwd": str(cwd), "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit", "prompt_id": f"p{n}", "prompt": text,
        }  # fmt: skip
    if harness == "codex":
        return {
            "session_id": CONVERSATION, "transcript_path": f"/h/.codex/rollout-{n}.jsonl",
            "cwd": str(cwd), "hook_event_name": "UserPromptSubmit", "model": "gpt-5.5",
            "permission_mode": "bypassPermissions", "turn_id": f"t{n}", "prompt": text,
        }  # fmt: skip
    if harness == "gemini":
        return {
            "session_id": CONVERSATION, "transcript_path": str(cwd / "g.jsonl"),
            "cwd": str(cwd), "hook_event_name": "BeforeAgent",
            "timestamp": "2026-12-03T10:00:00.000Z", "prompt": text,
        }  # fmt: skip
    return {"event": "chat.message", "sessionID": CONVERSATION, "cwd": str(cwd), "prompt": text}


def idle_payload(harness: str, cwd: Path, said: str) -> dict[str, Any]:
    """The turn's end as the harness reports it, with the agent's last words."""
    if harness == "claude":
        return {
            "session_id": CONVERSATION, "transcript_path": str(cwd / "t.jsonl"),
            "cwd": str(cwd), "permission_mode": "default", "hook_event_name": "Stop",
            "stop_hook_active": False, "last_assistant_message": said, "background_tasks": [],
        }  # fmt: skip
    if harness == "codex":
        return {
            "session_id": CONVERSATION, "transcript_path": "/h/.codex/rollout-1.jsonl",
            "cwd": str(cwd), "hook_event_name": "Stop", "model": "gpt-5.5",
            "permission_mode": "bypassPermissions", "turn_id": "t9",
            "stop_hook_active": False, "last_assistant_message": said,
        }  # fmt: skip
    if harness == "gemini":
        return {
            "session_id": CONVERSATION, "transcript_path": str(cwd / "g.jsonl"),
            "cwd": str(cwd), "hook_event_name": "AfterAgent",
            "timestamp": "2026-12-03T10:01:00.000Z", "prompt": "why does it hang?",
            "prompt_response": said, "stop_hook_active": False,
        }  # fmt: skip
    # what integrations/opencode/ctxd.js posts on session.idle once the agent said something
    return {
        "event": "session.idle", "sessionID": CONVERSATION, "cwd": str(cwd),
        "last_assistant_message": said,
    }  # fmt: skip


def send(client: httpx.Client, harness: str, payload: dict[str, Any]) -> str:
    answer = client.post(f"/api/hooks/{harness}", json={"payload": payload, "harness_pid": 4242})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["session"])


def narrative(client: httpx.Client, sid: str) -> dict[str, Any]:
    """The narrative of a snapshot taken now, as the API serves the stored version."""
    taken = client.post(f"/api/sessions/{sid}/snapshots", json={"force": True})
    assert taken.status_code == 201, taken.text
    version = taken.json()["header"]["version"]
    stored = client.get(f"/api/sessions/{sid}/snapshots/{version}")
    assert stored.status_code == 200, stored.text
    return dict(stored.json()["narrative"])


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "vllm-hang"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("harness", HARNESSES)
def test_the_agents_last_words_are_kept_redacted(
    harness: str, server: Server, client: httpx.Client, work: Path
) -> None:
    sid = send(client, harness, prompt_payload(harness, work, "why does vLLM hang?", 1))
    assert narrative(client, sid)["agent_said"] is None

    send(client, harness, idle_payload(harness, work, REPLY))
    said = narrative(client, sid)["agent_said"]
    assert said["text"].startswith("Relaunched vLLM with --enforce-eager")
    assert "collective setup." in said["text"] and SECRET not in said["text"]
    assert said["at"]
    # the secret is not in the database either, in any form ctxd keeps
    assert SECRET.encode() not in (server.data_dir / "ctxd.db").read_bytes()

    # a newer turn's words replace it; a long reply keeps its last ~2,000 characters
    long = "step " * 1000 + "Done: the NCCL timeout was the culprit."
    send(client, harness, idle_payload(harness, work, long))
    said = narrative(client, sid)["agent_said"]
    assert said["text"].endswith("Done: the NCCL timeout was the culprit.")
    assert len(said["text"]) <= 2000 and said["text"].startswith("…")


@pytest.mark.parametrize("harness", HARNESSES)
def test_the_newest_five_prompts_in_order_a_bare_continue_as_typed(
    harness: str, client: httpx.Client, work: Path
) -> None:
    texts = [f"prompt number {n}: check shard {n}" for n in range(1, 6)]
    texts.insert(4, "continue")  # the 5th of six: a bare continue
    texts.append(f"and the token is HF_TOKEN={SECRET}")
    sid = ""
    for n, text in enumerate(texts, 1):
        sid = send(client, harness, prompt_payload(harness, work, text, n))
    told = narrative(client, sid)
    kept = [m["text"] for m in told["user_messages"]]
    assert kept[:4] == [
        "prompt number 3: check shard 3",
        "prompt number 4: check shard 4",
        "continue",  # a bare continue, kept as typed: the dump quotes it
        "prompt number 5: check shard 5",
    ]
    assert len(kept) == 5 and kept[4].startswith("and the token is") and SECRET not in kept[4]
    times = [m["at"] for m in told["user_messages"]]
    assert times == sorted(times)
    assert told["latest_message"] == kept[4]  # the newest prompt, as before


def test_an_empty_continue_counts_and_gemini_says_nothing_without_text(
    client: httpx.Client, work: Path
) -> None:
    sid = send(client, "gemini", prompt_payload("gemini", work, "profile the loader", 1))
    send(client, "gemini", idle_payload("gemini", work, "The loader waits on disk reads."))
    # a turn with no text: Gemini CLI 0.61 sends this placeholder, which is not the agent's
    send(client, "gemini", idle_payload("gemini", work, "[no response text]"))
    # an empty message through the API is a "continue" too
    assert client.post(f"/api/sessions/{sid}/messages", json={"text": ""}).status_code == 200
    told = narrative(client, sid)
    assert told["agent_said"]["text"] == "The loader waits on disk reads."
    assert [m["text"] for m in told["user_messages"]] == ["profile the loader", ""]
    assert told["latest_message"] == "profile the loader"
