"""The CLI as a shell-driving agent uses it: every operation, --json, meaningful exit codes."""

import json

from tests.conftest import Server, ctxd


def as_json(url: str, *args: str):
    done = ctxd(url, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_operation_has_a_subcommand_with_json(server: Server):
    url = server.url
    assert as_json(url, "health")["status"] == "ok"
    assert as_json(url, "session", "sh", "--objective", "script it")["objective"] == "script it"
    watch = as_json(url, "watch", "sh", "port", "1")
    assert [w["id"] for w in as_json(url, "watches", "sh")] == [watch["id"]]
    entry = as_json(url, "note", "sh", "attempt", "first", "--status", "running")
    assert (
        as_json(url, "update", "sh", str(entry["id"]), "--status", "failed")["status"] == "failed"
    )
    assert [e["text"] for e in as_json(url, "journal", "sh")] == ["first"]
    assert as_json(url, "snapshot", "sh")["header"]["version"] == 1
    assert as_json(url, "unwatch", "sh", str(watch["id"])) == {"status": "ok"}
    assert as_json(url, "watches", "sh") == []
    assert as_json(url, "heartbeat", "sh") == {"status": "ok"}
    assert as_json(url, "message", "sh", "still failing") == {"status": "recorded"}
    dump = as_json(url, "message", "sh", "")
    assert dump["session"] == "sh" and "script it" in dump["markdown"]
    versions = as_json(url, "snapshots", "sh")
    assert [v["version"] for v in versions] == [2, 1] and versions[0]["trigger"] == "continue"
    assert as_json(url, "show", "sh", "1")["header"]["version"] == 1
    assert ctxd(url, "show", "sh", "1").stdout.startswith("# sh · v1")
    diff = as_json(url, "diff", "sh", "1", "2")
    assert diff["to_version"] == 2 and "+++ v2" in diff["markdown_diff"]
    assert "+++ v2" in ctxd(url, "diff", "sh", "1", "2").stdout
    assert "script it" in as_json(url, "resume", "sh", "--stored")["markdown"]
    assert "script it" in as_json(url, "continue", "sh")["markdown"]
    assert [s["id"] for s in as_json(url, "sessions")] == ["sh"]


def test_exit_codes_tell_not_found_from_bad_input_from_no_service(server: Server):
    missing = ctxd(server.url, "snapshots", "no-such-session")
    assert missing.returncode == 3 and "ctxd sessions" in missing.stderr
    ctxd(server.url, "session", "codes")
    assert ctxd(server.url, "unwatch", "codes", "99").returncode == 3
    bad = ctxd(server.url, "note", "codes", "gossip", "x")
    assert bad.returncode == 2 and "fix the input" in bad.stderr
    assert ctxd(server.url, "nonsense").returncode == 2
    down = ctxd("http://127.0.0.1:9", "health")
    assert down.returncode == 1 and "ctxd serve" in down.stderr
