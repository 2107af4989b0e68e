"""Imports the MCP SDK's server without its parts ctxd's /mcp rarely needs, until they are.

Loading the SDK is a quarter of the server's peak RSS, and four of its parts do nothing on
ctxd's path:

- cryptography (7 MB resident, most of it the OpenSSL it bundles) seals the `requestState`
  of multi-round-trip tool calls. No ctxd tool asks the client for input, so a seal is only
  ever checked when a client echoes a state, to reject it. The SDK imports it at module
  level: that import meets stand-ins, and `LazySeal`, the codec given to the server, loads
  the real library (and puts it in place of the stand-ins) on the first seal or unseal.
- the client side (1 MB), which the package's __init__ imports for `from mcp import Client`,
  and httpx2 (1 MB), which only fetches the URL resources ctxd never registers: both
  modules are put in place without running their code until a name is asked of them.
- rich (2 MB) is imported to build a root log handler that the SDK then hands to
  `logging.basicConfig`, which drops it: Litestar has configured the root logger already.
  `plain_logging` is the SDK's own branch for when rich is not installed.
"""

import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import threading
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.request_state import RequestStateCodec, RequestStateSecurity

# The modules the SDK imports cryptography's names from (mcp.server.request_state).
CRYPTO_MODULES = (
    "cryptography.exceptions",
    "cryptography.hazmat.primitives.ciphers.aead",
    "cryptography.hazmat.primitives.hashes",
    "cryptography.hazmat.primitives.kdf.hkdf",
)
# Imported by the SDK's server, which uses none of their names on ctxd's path.
DEFERRED_MODULES = ("mcp", "httpx2")

_load_lock = threading.Lock()
_run_lock = threading.RLock()  # a deferred module's code may ask another for a name


class CryptoDeferred(ImportError):
    """A stand-in for a cryptography name was used before the real library was loaded."""


class _StandIn(Exception):
    """What `from cryptography... import X` gives the SDK until the real X is loaded.

    An exception class, so `except X:` still compiles to a clause that matches nothing;
    creating one raises, so a use the codec did not foresee fails loudly."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "_StandIn":
        raise CryptoDeferred(f"{cls.__qualname__} is used before cryptography was loaded")


def _stand_in_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    made: dict[str, type] = {}

    def stand_in(attr: str) -> type:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr not in made:
            made[attr] = type(attr, (_StandIn,), {"__module__": name})
        return made[attr]

    module.__getattr__ = stand_in  # type: ignore[method-assign]  # PEP 562
    return module


@contextlib.contextmanager
def _crypto_stand_ins() -> Iterator[None]:
    if any(name.split(".")[0] == "cryptography" for name in sys.modules):
        yield  # already loaded by someone else: nothing to save
        return
    stand_ins = {name: _stand_in_module(name) for name in CRYPTO_MODULES}
    sys.modules.update(stand_ins)
    try:
        yield
    finally:
        for name, module in stand_ins.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]


def _deferred(name: str) -> None:
    """Put module `name` in sys.modules without running its code; the first name asked of it
    (`from mcp import Client`, `httpx2.AsyncClient`) runs the code in place, in that module.

    Not importlib's LazyLoader: an `import` statement reads `__spec__` of a module already in
    sys.modules, which makes LazyLoader run it at once; here `__spec__`, `__path__` and the
    rest are set as usual, and only a name the module's code defines starts it."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        return
    loader = spec.loader
    module = importlib.util.module_from_spec(spec)

    def run(attr: str) -> Any:
        with _run_lock:
            if "__getattr__" in vars(module):
                del module.__getattr__  # its code may define one; and no recursion in it
                loader.exec_module(module)
        return getattr(module, attr)

    module.__getattr__ = run  # type: ignore[method-assign]  # PEP 562
    sys.modules[name] = module


def import_server() -> None:
    """Import the SDK's server side with cryptography deferred and rich-free logging."""
    if "mcp.server.mcpserver" not in sys.modules:
        for name in DEFERRED_MODULES:
            if name not in sys.modules:
                _deferred(name)
        try:
            with _crypto_stand_ins():
                importlib.import_module("mcp.server.mcpserver")
        except CryptoDeferred:  # this SDK uses cryptography at import: load it after all
            importlib.import_module("mcp.server.mcpserver")
    server_module = importlib.import_module("mcp.server.mcpserver.server")
    if hasattr(server_module, "configure_logging"):
        setattr(server_module, "configure_logging", plain_logging)  # noqa: B010


def plain_logging(level: str = "INFO") -> None:
    """The SDK's configure_logging as it is where rich is not installed."""
    logging.basicConfig(level=level, format="%(message)s", handlers=[logging.StreamHandler()])


def load_crypto() -> None:
    """Import cryptography for real and put its names where the SDK holds stand-ins."""
    with _load_lock:
        real = {name: importlib.import_module(name) for name in CRYPTO_MODULES}
        for module in list(sys.modules.values()):
            if not getattr(module, "__name__", "").startswith("mcp."):
                continue
            for attr, value in list(vars(module).items()):
                if isinstance(value, type) and issubclass(value, _StandIn):
                    setattr(module, attr, getattr(real[value.__module__], value.__name__))


class LazySeal:
    """The SDK's own AES-GCM request-state codec under a process-local key, built (and
    cryptography loaded) on the first seal or unseal: what `RequestStateSecurity.ephemeral()`
    gives, without loading cryptography for servers that never see a request state."""

    def __init__(self) -> None:
        self._key = os.urandom(32)
        self._codec: RequestStateCodec | None = None

    def _real(self) -> "RequestStateCodec":
        if self._codec is None:
            load_crypto()
            from mcp.server.request_state import AESGCMRequestStateCodec

            self._codec = AESGCMRequestStateCodec([self._key])
        return self._codec

    def seal(self, payload: bytes) -> str:
        return self._real().seal(payload)

    def unseal(self, token: str) -> bytes:
        return self._real().unseal(token)


def request_state_security() -> "RequestStateSecurity":
    """`RequestStateSecurity.ephemeral()`'s policy (same TTL, principal binding, audience)."""
    from mcp.server.request_state import RequestStateSecurity

    return RequestStateSecurity(codec=LazySeal())
