"""parse_command on plain strings: the seed story's launches, redirects, builds, bad input."""

import pytest
from ctxd.discovery.shellparse import CommandFacts, parse_command
from hypothesis import given, settings
from hypothesis import strategies as st

SEED_EAGLE = (
    "cd /data/sglang && HF_TOKEN=hf_secretvalue123 nohup python -m sglang.launch_server "
    "--model-path /models/Kimi-K2.5-INT4 --tp 8 --speculative-algorithm EAGLE3 "
    "--speculative-draft-model-path /models/AQ-MedAI-drafter --port 8000 "
    "> /data/sglang/server.log 2>&1 &"
)
SEED_DEBUG = (
    "pkill -f sglang; sleep 5; nohup python -m sglang.launch_server --model-path "
    "/models/Kimi-K2.5-INT4 --tp 8 --port 8000 --disable-cuda-graph --log-level debug "
    "> server_debug.log 2>&1 & echo $!"
)


def test_seed_launch_is_found_with_its_log_port_and_env_names() -> None:
    facts = parse_command(SEED_EAGLE)
    assert facts.parsed
    (launch,) = facts.launches
    assert launch.argv[:3] == ("python", "-m", "sglang.launch_server")
    assert launch.background == "nohup"
    assert launch.cwd == "/data/sglang"
    assert launch.env == {"HF_TOKEN": "hf_secretvalue123"}
    assert facts.env_names == ("HF_TOKEN",)
    assert facts.logs == ("/data/sglang/server.log",)
    assert facts.ports == (8000,)


def test_debug_relaunch_after_pkill_and_sleep() -> None:
    facts = parse_command(SEED_DEBUG)
    (launch,) = facts.launches
    assert "--disable-cuda-graph" in launch.argv
    assert facts.logs == ("server_debug.log",)
    assert [c.argv[0] for c in facts.commands] == ["pkill", "sleep", "python", "echo"]


@pytest.mark.parametrize(
    ("command", "way", "program"),
    [
        ("python serve.py &", "&", "python"),
        ("setsid ./run.sh &> run.log", "setsid", "./run.sh"),
        ("./run.sh > r.log 2>&1 & disown", "&", "./run.sh"),
        ("./run.sh; disown", "disown", "./run.sh"),
        ("tmux new -d -s srv 'python serve.py --port 8001'", "tmux", "python"),
        ("tmux new-session -d -s srv python serve.py --port 8001", "tmux", "python"),
        ("screen -dmS w python w.py --listen 0.0.0.0:9000", "screen", "python"),
        ("bash -c 'nohup python a.py > a.log 2>&1 &'", "nohup", "python"),
        ("env FOO=1 nohup nice -n 5 python a.py &", "nohup", "python"),
    ],
)
def test_background_launches(command: str, way: str, program: str) -> None:
    (launch,) = parse_command(command).launches
    assert launch.background == way
    assert launch.argv[0] == program


def test_foreground_commands_are_not_launches() -> None:
    assert parse_command("python train.py > out.log 2>&1").launches == ()
    assert parse_command("tmux new -s srv python a.py").launches == ()  # attached, not detached
    assert parse_command("a && b || c").launches == ()


@pytest.mark.parametrize(
    ("command", "logs"),
    [
        ("python x.py | tee -a run.log", ("run.log",)),
        ("python x.py 2>&1 | tee run.log /dev/null", ("run.log",)),
        ("python x.py >> train.log", ("train.log",)),
        ("python x.py &>> both.log", ("both.log",)),
        ("python x.py 2> err.txt > /dev/null", ("err.txt",)),
        ("python x.py --log-file /var/tmp/x.log --log-level debug", ("/var/tmp/x.log",)),
        ("python x.py --logfile=run/x.log", ("run/x.log",)),
        ("python x.py --log debug", ()),
        ("echo hi > config.yaml", ()),  # writing a file is not a log
        ("nohup python x.py > config.yaml &", ("config.yaml",)),  # a launch's output is one
    ],
)
def test_log_targets(command: str, logs: tuple[str, ...]) -> None:
    assert parse_command(command).logs == logs


@pytest.mark.parametrize(
    ("command", "ports"),
    [
        ("python -m sglang.launch_server --port 30000", (30000,)),
        ("python -m sglang.launch_server --port=30000", (30000,)),
        ("docker run -p 8080 img", (8080,)),
        ("mkdir -p logs", ()),
        ("docker run -d -p 127.0.0.1:8005:80 img", (8005,)),
        ("git log --since 10:00", ()),
        ("nohup python t.py --resume ckpt:12 &", ()),
        ("nohup x --endpoint http://0.0.0.0:7000 &", (7000,)),
        ("uvicorn app:app --host 0.0.0.0 --port 9001", (9001,)),
        ("gunicorn -b 127.0.0.1:8002 app:app", (8002,)),
        ("python -m http.server 8003", (8003,)),
        ("python3 -m http.server 8006 --bind 0.0.0.0", (8006,)),  # its port, wherever it stands
        ("python3 -m http.server --bind 127.0.0.1 -d /srv 8007", (8007,)),
        ("python3 -m http.server -d /srv", ()),  # 8000, its default: not said, not guessed
        ("vllm serve m --listen localhost:8004", (8004,)),
        ("curl -s localhost:30000/health", ()),  # a client, not a listener
        ("python -c 'print(1)' --port 99999", ()),
    ],
)
def test_expected_ports(command: str, ports: tuple[int, ...]) -> None:
    assert parse_command(command).ports == ports


@pytest.mark.parametrize(
    ("command", "tool", "outputs"),
    [
        ("make -j8", "make", ()),
        ("make -C kernels all", "make", ("kernels",)),
        ("cmake --build build -j", "cmake", ("build",)),
        ("ninja -C out", "ninja", ("out",)),
        ("pip wheel . -w wheelhouse", "pip wheel", ("wheelhouse",)),
        ("python -m pip wheel . --wheel-dir=dist", "pip wheel", ("dist",)),
        ("python -m build --wheel -o dist/", "python -m build", ("dist/",)),
        ("python setup.py bdist_wheel -d out", "setup.py", ("out",)),
        ("cargo build --release", "cargo", ()),
        ("nvcc -O3 -arch=sm_120 -o kern kern.cu", "nvcc", ("kern",)),
        ("gcc-13 -ofast.o -c fast.c", "gcc-13", ("fast.o",)),
        ("cd sgl-kernel && python -m build --wheel", "python -m build", ()),
    ],
)
def test_builds(command: str, tool: str, outputs: tuple[str, ...]) -> None:
    (build,) = parse_command(command).builds
    assert (build.tool, build.outputs) == (tool, outputs)


def test_files_read() -> None:
    assert parse_command("tail -n 50 -f server.log").reads == ("server.log",)
    assert parse_command("grep -n ERROR server.log other.log | tail").reads == (
        "server.log",
        "other.log",
    )
    assert parse_command("grep -e ERROR -e WARN server.log").reads == ("server.log",)
    assert parse_command("ps aux | grep sglang").reads == ()


def test_comments_end_at_the_line_and_only_start_words() -> None:
    facts = parse_command("echo a#b c; ls # nohup fake &\nnohup ./x > l.log &")
    assert [c.argv for c in facts.commands] == [("echo", "a#b", "c"), ("ls",), ("./x",)]
    assert [c.argv for c in facts.launches] == [("./x",)]
    assert parse_command("grep '#include' f.c").reads == ("f.c",)


def test_env_options_with_values_are_skipped() -> None:
    (launch,) = parse_command("env -u FOO -C /srv python serve.py &").launches
    assert launch.argv == ("python", "serve.py")


def test_heredoc_body_is_not_commands() -> None:
    facts = parse_command("cat > notes.md <<'EOF'\nnohup rm -rf / &\nEOF\nls")
    assert facts.launches == ()
    assert [c.argv for c in facts.commands] == [("cat",), ("ls",)]


@pytest.mark.parametrize(
    "text",
    [
        'echo "unbalanced',
        "x" * 1_000_000,
        "",
        "   ",
        "echo \\",
        "\x00\x01 ;;; ||| &&& (((",
        "))) <<",
    ],
)
def test_not_shell_yields_empty_facts(text: str) -> None:
    facts = parse_command(text)
    assert isinstance(facts, CommandFacts)
    assert facts.launches == () and facts.logs == () and facts.ports == ()


def test_non_string_input_is_empty() -> None:
    assert parse_command(None) == CommandFacts()  # type: ignore[arg-type]


SHELLISH = st.text(
    alphabet=st.sampled_from(list("ab -=./\"'\\;&|()<>$`\n\t2019:#~*")), max_size=200
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(SHELLISH, st.text(max_size=300)))
def test_parse_command_never_raises(text: str) -> None:
    facts = parse_command(text)
    assert isinstance(facts, CommandFacts)
    assert all(isinstance(port, int) and 0 < port < 65536 for port in facts.ports)


@pytest.mark.parametrize(
    ("line", "env"),
    [
        ("export HF_TOKEN=t; nohup python3 x.py &", {"HF_TOKEN": "t"}),
        ("B=2; export B && nohup python3 x.py &", {"B": "2"}),
        ("set -a; C=3; set +a; D=4; nohup python3 x.py &", {"C": "3"}),  # D: not exported
        ("declare -x F=6; A=1 nohup python3 x.py &", {"F": "6", "A": "1"}),
        ("export E=5 && cd w && NCCL_DEBUG=INFO setsid python3 x.py &",
         {"E": "5", "NCCL_DEBUG": "INFO"}),
        ("G=7; nohup python3 x.py &", {}),  # a shell variable, not exported: not its
    ],
)  # fmt: skip
def test_what_the_line_exports_before_a_launch_is_in_its_environment(line: str, env: dict):
    (launch,) = parse_command(line).launches
    assert launch.env == env
