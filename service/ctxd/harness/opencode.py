"""opencode as ctxd speaks to it: the events its plugin forwards read, and `ctxd
install|uninstall opencode` (ctxd's plugin file put in opencode's plugin folder and its MCP
server merged into `opencode.json`, idempotently, keeping everything else, with a backup and a
dry run; the file plumbing is `files.py`'s).

The plugin (`integrations/opencode/ctxd.js`) forwards `tool.execute.after` and the session
lookup as `{"event", "sessionID", "cwd", ...}` to `POST /api/hooks/opencode`; it injects the
dump itself (a bare "continue" through `/prompts`, compaction through opencode's own hook).

opencode 1.x and 2.x both load every `{plugin,plugins}/*.{ts,js}` of their config folders
(`.opencode/` in a project, `~/.config/opencode/` for the user), so the plugin goes there and
no `plugin` (1.x) or `plugins` (2.x) key names it: a key would load it a second time. The one
file loads in both (see its header). The config names MCP servers in the 1.x form (`mcp.NAME`)
or the 2.x form (`mcp.servers.NAME`; 2.x still reads the 1.x form); ctxd writes into the form
the file already uses, else the installed opencode's (`installed_version`: 2.x's for 2.x, the
1.x form, which both read, otherwise), and removes its entry from both. The plugin file is
ctxd's whole: it is recognised by its first line, and a `ctxd.js` not ours is never touched.

Payload shapes relied on (checked against public sources, not guessed):
opencode (plugin hook `tool.execute.after(input, output)`: dist/index.d.ts of the npm package
@opencode-ai/plugin 1.18.33, and packages/opencode/src/tool/bash.ts in the opencode repository):
  input {"tool", "sessionID", "callID", "args"} ("args" is in 1.18's types, not in older ones;
  a bash "workdir" arg, where a release has one, is taken as the cwd);
  output {"title", "output", "metadata"}; for bash, title is the command and metadata is
  {"output", "exit", "description"}; edit/write take args {"filePath", ...}. The ctxd plugin
  forwards {"input": input, "output": output, "args": args-from-tool.execute.before,
  "cwd": directory}.
"""

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxd import shipped
from ctxd.discovery.payloads import as_dict, as_text, command_action, file_edit_action
from ctxd.harness.adapter import EventKind, HarnessName, HookEvent, text_of
from ctxd.harness.files import MCP_NAME, Change, InstallError, json_text, read_json, read_text

# The npm packages that carry opencode's command: 1.x, and 2.x
PACKAGES = ("opencode-ai", "@opencode/cli")
VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
LOADS_BOTH = (1, 18, 29)  # the first 1.x reported to load a plugin with a V2 default export
PLUGIN_NAME = "ctxd.js"
PLUGIN_MARK = "// ctxd for opencode"
DEFAULT_URL_LINE = re.compile(r'^const DEFAULT_URL = "[^"\n]*"$', re.MULTILINE)
WAKES_LINE = re.compile(r"^const WAKES_INSTALLED = (?:true|false)$", re.MULTILINE)


KINDS: dict[str, EventKind] = {
    "tool.execute.after": "tool",
    "chat.message": "prompt",
    "session.idle": "idle",
    "session.compacted": "compact",
}


class Opencode:
    name: HarnessName = "opencode"
    label = "opencode"
    program = "opencode"
    programs = ("opencode",)

    def left_behind(self, command: str) -> str | None:
        return None

    def config_home(self, home: Path) -> Path:
        return user_folder(home)

    def event(self, payload: dict[str, Any]) -> HookEvent:
        name = text_of(payload, "event")
        kind = KINDS.get(name, "other")
        return HookEvent(
            kind=kind,
            name=name,
            conversation=text_of(payload, "sessionID"),
            cwd=text_of(payload, "cwd"),
            prompt=text_of(payload, "prompt"),
            actions=tuple(tool_actions(payload)) if kind == "tool" else (),
            # the plugin's: the text of the session's last assistant message, sent on idle
            said=text_of(payload, "last_assistant_message") if kind == "idle" else "",
        )

    def plan(
        self, url: str, scope: str, project: Path, home: Path, remove: bool, wake: bool = True
    ) -> list[Change]:
        return plan(url, scope, project, home, remove, wake)

    def notes(self, scope: str) -> list[str]:
        version = installed_version()
        if version is None or version >= LOADS_BOTH or version[0] >= 2:
            return []
        found = ".".join(map(str, version))
        return [
            f"opencode {found} is older than 1.18.29, the first 1.x known to load a plugin file "
            "that also serves opencode 2 (ctxd's does); if ctxd's plugin does not load, "
            "`opencode upgrade`."
        ]


ADAPTER = Opencode()


def user_folder(home: Path) -> Path:
    """opencode's user folder: `opencode` in `$XDG_CONFIG_HOME`, else in `~/.config`."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "opencode"


def targets(scope: str, project: Path, home: Path) -> tuple[Path, Path]:
    """(the plugin file, the opencode config file holding the MCP servers) for a scope."""
    if scope == "project":
        folder, config_dir = project / ".opencode", project
    else:
        folder = config_dir = user_folder(home)
    config = config_dir / "opencode.json"
    if not config.exists() and (config_dir / "opencode.jsonc").exists():
        config = config_dir / "opencode.jsonc"
    return folder / "plugins" / PLUGIN_NAME, config


def plugin_source() -> Path:
    """ctxd's opencode plugin, `integrations/opencode/ctxd.js` (shipped in the wheel)."""
    return shipped("integrations") / "opencode" / PLUGIN_NAME


def plugin_text(url: str, wake: bool = True) -> str:
    """The plugin as installed: its fallback address is the one ctxd was installed for
    (CTXD_URL in opencode's environment still wins); with `wake` False (`ctxd install
    --no-wake`) it never waits for an attempt's news nor wakes the idle session."""
    source = plugin_source().read_text(encoding="utf-8")
    line = f"const DEFAULT_URL = {_js_string(url.rstrip('/'))}"
    source = DEFAULT_URL_LINE.sub(lambda _: line, source, count=1)
    wakes = f"const WAKES_INSTALLED = {'true' if wake else 'false'}"
    return WAKES_LINE.sub(lambda _: wakes, source, count=1)


def plan(
    url: str, scope: str, project: Path, home: Path, remove: bool, wake: bool = True
) -> list[Change]:
    """What install (or uninstall, with `remove`) would write, file by file."""
    plugin_path, config_path = targets(scope, project, home)
    before = read_text(plugin_path)
    theirs = bool(before) and not before.startswith(PLUGIN_MARK)
    if theirs and not remove:
        raise InstallError(f"{plugin_path} is not ctxd's plugin; not touched")
    config = read_json(config_path)
    # no OAuth discovery: ctxd takes a bearer token, or nothing on loopback
    entry = {"type": "remote", "url": url.rstrip("/") + "/mcp", "enabled": True, "oauth": False}
    new_config = _with_server(config, None if remove else entry, _reads_v2_form)
    after = before if theirs else "" if remove else plugin_text(url, wake)
    return [
        Change(plugin_path, before, after, backup=False),
        Change(config_path, read_text(config_path), json_text(new_config, config_path)),
    ]


def _with_server(
    config: dict[str, Any], entry: dict[str, Any] | None, v2_default: Callable[[], bool]
) -> dict[str, Any]:
    """The config with ctxd's MCP entry set (or, with None, gone) in the form it uses; a file
    with no server yet takes the 2.x form where `v2_default()` says so."""
    mcp = config.get("mcp", {})
    if not isinstance(mcp, dict):
        raise InstallError("its 'mcp' is not an object; fix the file by hand first")
    servers = mcp.get("servers")
    v2 = isinstance(servers, dict) and "type" not in servers  # a 1.x server may be "servers"
    v1 = any(isinstance(v, dict) and k != MCP_NAME for k, v in mcp.items() if k != "servers")
    if entry is not None and not v1 and servers is None and v2_default():
        servers, v2 = {}, True
    new_mcp = {k: v for k, v in mcp.items() if k != MCP_NAME}
    if v2:
        assert isinstance(servers, dict)
        inner = {k: v for k, v in servers.items() if k != MCP_NAME}
        if entry is not None:
            inner[MCP_NAME] = entry
        new_mcp["servers"] = inner  # in its place, where it was one
        if not inner and entry is None:  # a "servers" that held ctxd's alone goes with it
            del new_mcp["servers"]
    elif entry is not None:
        new_mcp[MCP_NAME] = entry
    if new_mcp:
        return {**config, "mcp": new_mcp}
    return {k: v for k, v in config.items() if k != "mcp"}


def _reads_v2_form() -> bool:
    version = installed_version()
    return version is not None and version[0] >= 2


def installed_version() -> tuple[int, int, int] | None:
    """The version of the opencode on PATH; None when there is none, or it names none. Read
    from the package.json of the npm package its command is a link into (opencode-ai, 1.x;
    @opencode/cli, 2.x), else asked (`opencode --version`, a second: a native binary)."""
    import shutil  # only when installing

    command = shutil.which("opencode")
    if command is None:
        return None
    for folder in list(Path(os.path.realpath(command)).parents)[:3]:
        try:
            package = json.loads((folder / "package.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(package, dict) and package.get("name") in PACKAGES:
            return _version(package.get("version"))
    import subprocess  # only when installing, and only for a command outside npm

    try:
        done = subprocess.run(
            [command, "--version"], capture_output=True, text=True, timeout=10,
            stdin=subprocess.DEVNULL, env={**os.environ, "OPENCODE_DISABLE_AUTOUPDATE": "1"},
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return _version(done.stdout) if done.returncode == 0 else None


def _version(text: Any) -> tuple[int, int, int] | None:
    found = VERSION.search(text) if isinstance(text, str) else None
    return (int(found[1]), int(found[2]), int(found[3])) if found else None


def _js_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a JS string literal: newlines escaped too


OPENCODE_EDIT_TOOLS = {"edit", "write", "multiedit", "patch", "apply_patch"}


def tool_actions(data: Any) -> list[dict[str, Any]]:
    """The actions in one forwarded opencode `tool.execute.after`: {input, output, args, cwd}."""
    if not isinstance(data, dict):
        return []
    hook_input = as_dict(data.get("input"))
    output = as_dict(data.get("output"))
    metadata = as_dict(output.get("metadata"))
    args = as_dict(data.get("args")) or as_dict(hook_input.get("args"))
    tool = as_text(hook_input.get("tool"))
    cwd = as_text(args.get("workdir")) or as_text(data.get("cwd"))
    call_id = as_text(hook_input.get("callID"))
    if tool == "bash":
        command = as_text(args.get("command")) or as_text(output.get("title"))
        if not command:
            return []
        exit_value = metadata.get("exit")
        exit_status = (
            exit_value if isinstance(exit_value, int) and not isinstance(exit_value, bool) else None
        )
        text = as_text(output.get("output")) or as_text(metadata.get("output"))
        action = command_action(
            command,
            cwd=cwd,
            exit_status=exit_status,
            output=text,
            tool_id=call_id,
            harness="opencode",
        )
        return [action]
    if tool in OPENCODE_EDIT_TOOLS:
        path = as_text(args.get("filePath")) or as_text(metadata.get("filepath"))
        if path:
            return [file_edit_action(path, tool, cwd=cwd, harness="opencode")]
    return []
