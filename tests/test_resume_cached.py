"""Resume of the latest stored dump answers with bytes encoded once per dump: the same bytes
while the dump stands, the new dump as soon as one is stored, each session its own."""

from pathlib import Path

import httpx
from ctxd.http.encoded import EncodedAnswers

from tests.conftest import app_client

LATEST = "/api/sessions/{}/resume?fresh=false"


def _snapshot(client: httpx.Client, sid: str, note: str) -> int:
    taken = client.post(f"/api/sessions/{sid}/snapshots", json={"note": note, "force": True})
    return int(taken.raise_for_status().json()["header"]["version"])


def test_a_new_dump_is_served_at_once_and_each_session_gets_its_own(tmp_path: Path) -> None:
    with app_client(tmp_path / "data") as client:
        for sid in ("alpha", "beta"):
            client.put(f"/api/sessions/{sid}", json={"objective": f"objective of {sid}"})
            _snapshot(client, sid, f"first note of {sid}")
        first = client.get(LATEST.format("alpha"))
        again = client.get(LATEST.format("alpha"))
        assert first.status_code == again.status_code == 200
        assert first.content == again.content
        assert first.headers["content-type"] == "text/markdown; charset=utf-8"
        assert int(first.headers["content-length"]) == len(first.content)
        assert "first note of alpha" in first.text

        other = client.get(LATEST.format("beta"))
        assert "objective of beta" in other.text and "objective of alpha" not in other.text

        version = _snapshot(client, "alpha", "second note of alpha")
        newer = client.get(LATEST.format("alpha"))
        assert "second note of alpha" in newer.text
        assert f"v{version}" in newer.text.splitlines()[0]
        assert client.get(LATEST.format("beta")).content == other.content


def test_cut_and_changes_since_answers_are_not_the_cached_dump(tmp_path: Path) -> None:
    with app_client(tmp_path / "data") as client:
        client.put("/api/sessions/cut", json={"objective": "o" * 50})
        _snapshot(client, "cut", "n" * 3000)
        whole = client.get(LATEST.format("cut")).text
        short = client.get(LATEST.format("cut") + "&max_chars=500")
        assert short.status_code == 200
        assert len(short.text) <= 500 < len(whole)
        assert client.get(LATEST.format("cut")).text == whole


def test_encoded_answers_reuse_only_the_same_text_and_keep_few() -> None:
    answers = EncodedAnswers("text/markdown", size=2)
    text = "".join(["# dump", " v1"])  # built at run time: a text object of its own
    first = answers.answer("a", text)
    assert answers.answer("a", text) is first
    equal_copy = "".join(["# dump", " v1"])
    assert equal_copy is not text
    assert answers.answer("a", equal_copy) is not first  # a new object: encoded anew
    answers.answer("b", "b")
    answers.answer("c", "c")
    assert len(answers._kept) == 2 and "a" not in answers._kept
