"""The ctxd CLI against a real server, and its answer when no server runs."""

from tests.conftest import Server, ctxd, free_port


def test_cli_drives_a_session_end_to_end(server: Server, tmp_path):
    log = tmp_path / "app.log"
    log.write_text("starting\nready on :8000\n")
    assert ctxd(server.url, "session", "cli-run", "--objective", "ship it").returncode == 0
    assert ctxd(server.url, "watch", "cli-run", "log", str(log), "--lines", "5").returncode == 0
    note = ctxd(server.url, "note", "cli-run", "attempt", "first try", "--status", "failed")
    assert note.returncode == 0, note.stderr
    snap = ctxd(server.url, "snapshot", "cli-run")
    assert snap.returncode == 0 and snap.stdout.strip().startswith("cli-run v1")
    dump = ctxd(server.url, "resume", "cli-run", "--stored")
    assert (
        "ship it" in dump.stdout and "ready on :8000" in dump.stdout and "first try" in dump.stdout
    )


def test_cli_watches_a_slurm_job_and_a_process_on_a_peer(server: Server, tmp_path):
    import json

    assert ctxd(server.url, "session", "multi").returncode == 0
    job = ctxd(server.url, "watch", "multi", "slurm", "1234")
    mine = ctxd(server.url, "watch", "multi", "slurm", "--mine", "--workdir", str(tmp_path))
    remote = ctxd(server.url, "watch", "multi", "process", "sglang", "--host", "node2")
    assert (job.returncode, mine.returncode, remote.returncode) == (0, 0, 0), remote.stderr
    listed = json.loads(ctxd(server.url, "watches", "multi", "--json").stdout)
    specs = [w["spec"] for w in (listed if isinstance(listed, list) else listed["watches"])]
    assert specs[0]["kind"] == "slurm" and specs[0]["job"] == "1234"
    assert specs[1]["mine"] is True and specs[1]["workdir"] == str(tmp_path)
    assert specs[2]["match"] == "sglang" and specs[2]["host"] == "node2"


def test_cli_watches_a_ray_cluster_by_port_or_found_as_ray_finds_it(server: Server):
    import json

    assert ctxd(server.url, "session", "rays").returncode == 0
    by_port = ctxd(server.url, "watch", "rays", "ray", "8265")
    found = ctxd(server.url, "watch", "rays", "ray", "auto", "--name", "loader")
    assert (by_port.returncode, found.returncode) == (0, 0), found.stderr
    listed = json.loads(ctxd(server.url, "watches", "rays", "--json").stdout)
    specs = [w["spec"] for w in (listed if isinstance(listed, list) else listed["watches"])]
    assert specs[0]["url"] == "http://127.0.0.1:8265" and specs[0]["address"] is None
    assert specs[1]["address"] == "auto" and specs[1]["actors"] == "loader"


def test_cli_errors_are_one_line_with_what_to_do(server: Server):
    missing = ctxd(server.url, "snapshot", "no-such-session")
    assert missing.returncode == 3  # not found
    assert "404" in missing.stderr and "no-such-session" in missing.stderr
    bad = ctxd(server.url, "note", "no-such-session", "gossip", "x")
    assert bad.returncode == 2 and "hypothesis" in bad.stderr  # bad input: names what is allowed


def test_cli_without_a_service_says_how_to_start_one():
    down = ctxd(f"http://127.0.0.1:{free_port()}", "resume", "anything")
    assert down.returncode == 1
    assert "cannot reach the service" in down.stderr and "ctxd serve" in down.stderr
    assert "Traceback" not in down.stderr


def test_token_new_writes_a_private_file_the_server_then_requires(tmp_path):
    from tests.conftest import start_server, stop_server

    made = ctxd("http://127.0.0.1:9", "token", "--new", "--data-dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    token_file = tmp_path / "token"
    assert token_file.stat().st_mode & 0o777 == 0o600
    token = token_file.read_text().strip()
    srv = start_server(tmp_path / "data", tmp_path / "ctxd.log", env={"CTXD_TOKEN": token})
    try:
        import httpx

        assert httpx.get(f"{srv.url}/health").status_code == 401
        ok = httpx.get(f"{srv.url}/health", headers={"Authorization": f"Bearer {token}"})
        assert ok.status_code == 200
    finally:
        stop_server(srv)


def test_serve_logs_no_line_per_request_unless_asked(server: Server):
    # every hook and tool call is a request: by default they do not fill the log
    assert ctxd(server.url, "sessions").returncode == 0
    assert "GET /api/sessions" not in server.log()
