"""The /mcp endpoint loads the SDK without cryptography and rich: a real server driven by the
official MCP client, and the request-state seal checked in a fresh interpreter."""

import asyncio
import base64
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import start_server, stop_server


async def _session(url: str, request_state: str | None = None) -> list[Any]:
    async with (
        streamable_http_client(f"{url}/mcp") as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = await session.list_tools()
        put = {"session": "lean", "objective": "a small footprint"}
        results: list[Any] = [tools, await session.call_tool("put_session", put)]
        results.append(await session.call_tool("take_snapshot", {"session": "lean"}))
        results.append(await session.call_tool("resume", {"session": "lean", "fresh": False}))
        if request_state is not None:
            try:
                forged = await session.call_tool(
                    "resume", {"session": "lean"}, request_state=request_state
                )
            except MCPError as exc:
                forged = exc
            results.append(forged)
        return results


def _imported(log: str) -> set[str]:
    return set(re.findall(r"\|\s+([\w.]+)$", log, re.MULTILINE))


def test_an_mcp_session_never_loads_cryptography_or_rich(tmp_path: Path) -> None:
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        tools, put, snap, dump = asyncio.run(_session(server.url))
    finally:
        stop_server(server)
    assert {"take_snapshot", "resume"} <= {t.name for t in tools.tools}
    assert not any(r.is_error for r in (put, snap, dump))
    assert snap.structured_content["version"] == 1
    imported = _imported(server.log())
    assert {"mcp.server.mcpserver", "mcp.server.request_state"} <= imported
    assert not {name for name in imported if name.split(".")[0] in ("cryptography", "rich")}
    assert not {name for name in imported if name.startswith(("mcp.client", "httpx2."))}
    # The SDK's INFO lines still reach the log, through the root handler Litestar set up.
    started = r"INFO\b.*mcp\.server\.streamable_http_manager\b.*session manager started"
    assert re.search(started, server.log())


def test_a_forged_request_state_is_refused(tmp_path: Path) -> None:
    """The seal is checked by the real cryptography, loaded when the first state arrives."""
    token = "v1." + base64.urlsafe_b64encode(bytes(64)).decode().rstrip("=")
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    server = start_server(tmp_path / "data", tmp_path / "ctxd.log", env=env)
    try:
        *_, forged = asyncio.run(_session(server.url, request_state=token))
        with server.client() as client:  # the server is still up and serving
            assert client.get("/api/sessions/lean").status_code == 200
    finally:
        stop_server(server)
    refused = isinstance(forged, MCPError) or forged.is_error
    assert refused, forged
    assert "requestState rejected" in server.log()
    assert "cryptography.hazmat.bindings._rust" in _imported(server.log())  # loaded for it


SEAL_CHECK = """
import sys
from ctxd.http.mcp import sdk as mcp_sdk
mcp_sdk.import_server()
assert not [m for m in sys.modules if m.split(".")[0] == "cryptography"], "loaded at import"
from mcp.server import request_state
from mcp.server.mcpserver import MCPServer
MCPServer("probe", request_state_security=mcp_sdk.request_state_security())
assert not [m for m in sys.modules if m.split(".")[0] == "cryptography"], "loaded by the server"
seal = mcp_sdk.LazySeal()
token = seal.seal(b"state")
assert seal.unseal(token) == b"state"
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
assert request_state.AESGCM is AESGCM
def refused(codec, token, reason):
    try:
        codec.unseal(token)
    except request_state.InvalidRequestState as exc:
        assert str(exc) == reason, exc
    else:
        raise AssertionError(f"accepted, where {reason!r} was expected")
refused(seal, token[:-4] + ("AAAA" if token[-4:] != "AAAA" else "BBBB"), "seal")  # tampered
refused(mcp_sdk.LazySeal(), token, "unknown key")  # another process's key
print("ok")
"""


PACKAGE_CHECK = """
import sys
from ctxd.http.mcp import sdk as mcp_sdk
mcp_sdk.import_server()
assert not [m for m in sys.modules if m.startswith(("mcp.client", "httpx2."))], "loaded"
import httpx2
assert httpx2.AsyncClient.__name__ == "AsyncClient" and "httpx2._client" in sys.modules
assert "mcp.client" not in sys.modules
import mcp
from mcp import ClientSession, MCPError, stdio_client
from mcp.client.session import ClientSession as Session
assert ClientSession is Session and mcp.Client.__module__ == "mcp.client.client"
assert "Client" in mcp.__all__ and mcp.types.Tool.__name__ == "Tool"
print("ok")
"""


def test_the_package_and_httpx2_run_when_a_name_is_asked_of_them() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PACKAGE_CHECK], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_the_deferred_seal_is_the_sdks_aes_gcm_once_loaded() -> None:
    """Fresh interpreter: this test process has imported cryptography with the MCP client."""
    done = subprocess.run(
        [sys.executable, "-c", SEAL_CHECK], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
