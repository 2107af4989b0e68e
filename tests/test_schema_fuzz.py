"""schemathesis against the live OpenAPI schema: no 5xx, and every answer fits its schema.

Bounded: a fixed number of generated cases per operation, so the run ends in a couple of
minutes. Status codes the schema does not list (404 for an unknown session, 413, 403 for a
refused path) are deliberate answers, so `status_code_conformance` is not among the checks.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

schemathesis = pytest.importorskip("schemathesis")

from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
)

from tests.conftest import Server, start_server, stop_server  # noqa: E402

CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance]
EXAMPLES = 25
KNOWN = {"sid": "fuzz", "n": 1, "wid": 1, "eid": 1}
LONG_POLL_S = 1  # the longest wait a generated long poll is sent with


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder: Path = tmp_path_factory.mktemp("fuzz")
    # Generated watch paths land under this folder; the rate limit is not what is tested.
    env = {"CTXD_RATE_PER_S": "100000", "CTXD_RATE_BURST": "100000"}
    srv = start_server(folder / "data", folder / "ctxd.log", env=env)
    with srv.client() as c:
        for sid in ("fuzz", "a", "0"):
            c.put(f"/api/sessions/{sid}", json={"title": "fuzz"})
            c.post(f"/api/sessions/{sid}/snapshots", json={"force": True})
            c.post(f"/api/sessions/{sid}/snapshots", json={"force": True})
            c.post(f"/api/sessions/{sid}/journal", json={"kind": "note", "text": "n"})
            log = folder / "fuzz.log"
            log.write_text("line\n")
            c.post(f"/api/sessions/{sid}/watches", json={"kind": "log", "path": str(log)})
    yield srv
    stop_server(srv)
    assert "Traceback" not in srv.log()


def _operations(url: str) -> list:
    loaded = schemathesis.openapi.from_url(f"{url}/schema/openapi.json")
    return [result.ok() for result in loaded.get_all_operations()]


def _strategy(operation):
    """Valid and invalid cases; half aimed at a session and versions that exist, so the
    handlers behind the 404 get fuzzed too."""
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )

    def aim(pair: tuple) -> object:
        case, aimed = pair
        params = case.path_parameters
        if aimed and params:
            params.update({k: v for k, v in KNOWN.items() if k in params})
        query = case.query
        if query and isinstance(query.get("wait"), int | float) and query["wait"] > LONG_POLL_S:
            query["wait"] = LONG_POLL_S  # a long poll answers when its wait is over, by design
        return case

    return st.tuples(cases, st.booleans()).map(aim)


def test_api_never_5xx_and_fits_its_schema(live: Server) -> None:
    # Driven by hand rather than by schemathesis's pytest plugin, which does not load
    # under this pytest; each operation gets its own bounded hypothesis run.
    operations = _operations(live.url)
    assert len(operations) >= 15, [op.label for op in operations]
    failures: list[str] = []
    for operation in operations:

        @given(case=_strategy(operation))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case) -> None:
            # A call may take a snapshot (collectors run): generous timeout, never timed.
            case.call_and_validate(base_url=live.url, checks=CHECKS, timeout=60)

        try:
            run()
        except Exception as exc:
            failures.append(f"{operation.label}: {str(exc)[:600]}")
    assert not failures, "\n\n".join(failures)
