"""Which account is on the other end of a loopback connection, as the kernel says.

Loopback is every local account: on a box several people share, a ctxd running as root would
read root's files to anyone who can open a socket. The kernel's socket tables
(`/proc/net/tcp`, `/proc/net/tcp6`) list each socket with the uid that owns it, as identd reads
them: the caller's end of the connection is the socket whose local address is the request's
client address and whose remote address is ctxd's own. Read per request (a connection's port
may be another account's a moment after it closed), one table, a few hundred lines.
"""

import ipaddress
import socket
from pathlib import Path

TABLES = {socket.AF_INET: Path("/proc/net/tcp"), socket.AF_INET6: Path("/proc/net/tcp6")}
_ESTABLISHED = "01"


def is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped or address).is_loopback)


def _hex(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """(family, the kernel's spelling of host:port): each 32-bit word of the address in the
    machine's byte order (little-endian here), the port in big-endian hex."""
    address = ipaddress.ip_address(host)
    packed = address.packed
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    spelled = "".join(word[::-1].hex().upper() for word in words)
    return family, f"{spelled}:{port:04X}"


def owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client's end of the established TCP connection client -> server,
    or None when the kernel lists no such connection (gone, or not this host's)."""
    try:
        family, mine = _hex(*client)
        _, theirs = _hex(*server)
        lines = TABLES[family].read_text(encoding="ascii", errors="replace").splitlines()[1:]
    except (ValueError, OSError):
        return None
    for line in lines:
        fields = line.split()
        ours = len(fields) > 7 and fields[1] == mine and fields[2] == theirs
        if ours and fields[3] == _ESTABLISHED and fields[7].isdigit():
            return int(fields[7])
    return None
