"""Each harness adapter names the programs it runs under (`Adapter.programs`), and process
discovery takes none of them for the agent's work, whatever folder it runs in: a harness added
with its adapter needs no word in `discovery/procscan.py`."""

import pytest
from ctxd.discovery import procscan
from ctxd.harness.registry import MODULES, adapter, programs


@pytest.mark.parametrize("name", list(MODULES))
def test_each_adapters_programs_are_never_the_agents_work(name: str) -> None:
    harness = adapter(name)
    assert harness.program in harness.programs
    for program in harness.programs:
        assert program in programs()
        assert procscan.is_excluded(program, [f"/usr/local/bin/{program}", "--resume"])
        # its npm launcher: a JS runtime running its script
        launcher = ["node", f"/usr/lib/node_modules/{program}/bin/{program}.js"]
        assert procscan.is_excluded("node", launcher)


def test_a_program_no_adapter_names_is_the_agents_work() -> None:
    assert not procscan.is_excluded("python3", ["python3", "train.py", "--epochs", "3"])
    assert not procscan.is_excluded("node", ["node", "server.js", "--port", "3000"])
    assert procscan.is_excluded("aider", ["aider"])  # a harness ctxd has no adapter for
