"""Which Ray watch an agent's command makes by itself: a head's dashboard by its URL; a worker
node's `ray start --address`, or a multi-node server that starts Ray itself, by `address:
auto` (found as Ray finds its cluster), one per session however many commands say so."""

from datetime import UTC, datetime

import pytest
from ctxd.discovery.rules import propose_for_command, watch_key
from ctxd.discovery.shellparse import parse_command
from ctxd.models import WatchIn

AT = datetime(2026, 12, 6, 23, 0, tzinfo=UTC)


def rays(command: str) -> list[dict]:
    found = propose_for_command(parse_command(command), cwd="/w", at=AT)
    specs = [{k: v for k, v in p.items() if k not in ("auto", "reason")} for p in found]
    return [s for s in specs if s["kind"] == "ray"]


def test_a_vllm_or_sglang_launch_on_ray_watches_the_cluster_it_starts() -> None:
    launch = (
        "nohup vllm serve meta-llama/Llama-3.1-405B --tensor-parallel-size 8 "
        "--pipeline-parallel-size 2 --distributed-executor-backend ray > vllm.log 2>&1 &"
    )
    (spec,) = rays(launch)
    assert spec == {"kind": "ray", "address": "auto"}
    watch = WatchIn.model_validate(spec).root
    assert (watch.kind, watch.address, watch.url) == ("ray", "auto", "http://127.0.0.1:8265")
    as_module = "python -m vllm.entrypoints.openai.api_server --distributed-executor-backend=ray"
    assert rays(as_module) == [{"kind": "ray", "address": "auto"}]
    sglang = "python -m sglang.launch_server --model-path m --tp 16 --nnodes 2 --use-ray"
    assert rays(sglang) == [{"kind": "ray", "address": "auto"}]
    assert rays("python train.py --use-ray") == []  # a flag of another program's own
    # the same server on its own processes (mp) starts no Ray
    assert rays("vllm serve m --tensor-parallel-size 2 --distributed-executor-backend mp") == []


def test_a_worker_node_joining_a_head_watches_it_by_address_auto() -> None:
    assert rays("ray start --address=10.0.0.5:6379 --block") == [{"kind": "ray", "address": "auto"}]
    assert rays("ray start --address 10.0.0.5:6379") == [{"kind": "ray", "address": "auto"}]
    assert rays("ray start --head --dashboard-port=8300") == [
        {"kind": "ray", "url": "http://127.0.0.1:8300"}
    ]


def test_address_auto_is_one_watch_and_not_a_url() -> None:
    """Two launches that both start Ray make one watch (its key is `auto`, not the default
    URL it carries); a URL beside `auto` is refused as two targets."""
    both = "ray start --address=10.0.0.5:6379; vllm serve m --distributed-executor-backend ray"
    assert rays(both) == [{"kind": "ray", "address": "auto"}]
    stored = WatchIn.model_validate({"kind": "ray", "address": "auto"}).root.model_dump()
    assert watch_key(stored) == ("ray", "auto")
    assert watch_key({"kind": "ray", "url": "http://127.0.0.1:8300"}) == (
        "ray",
        "http://127.0.0.1:8300",
    )
    again = WatchIn.model_validate(stored).root  # a stored watch, defaults and all, reloads
    assert again.address == "auto"
    with pytest.raises(ValueError, match="give 'url' or 'address': 'auto', not both"):
        WatchIn.model_validate({"kind": "ray", "address": "auto", "url": "http://127.0.0.1:1"})
