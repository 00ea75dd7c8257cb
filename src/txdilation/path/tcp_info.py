"""L3: what the kernel knows about a TCP connection's peer (Linux ``TCP_INFO``).

The dead-path detector asks this before ending a path whose probe went unanswered: when the
peer's kernel still acknowledges our segments (or nothing of ours is in flight because its
receive window is closed), the peer is alive but its application is not reading or is
starved, and the path must not be left.

Elsewhere (no ``TCP_INFO``, or a transport without a socket) the answer is None: unknown.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

__all__ = ["TcpInfo", "peer_tcp_alive", "read_tcp_info"]

# struct tcp_info (linux/tcp.h): 8 one-byte fields, then 32-bit fields; the ones read here are
# tcpi_unacked (the 5th u32) and tcpi_last_ack_recv (the 13th), stable since Linux 2.6.
_PREFIX = struct.Struct("=8B13I")
_TCP_INFO = getattr(socket, "TCP_INFO", None)


class TcpInfo:
    """The two fields we use: segments in flight, and ms since the last ACK arrived."""

    __slots__ = ("last_ack_recv_ms", "unacked")

    def __init__(self, unacked: int, last_ack_recv_ms: int) -> None:
        self.unacked = unacked
        self.last_ack_recv_ms = last_ack_recv_ms


def read_tcp_info(sock: Any) -> TcpInfo | None:
    """``TCP_INFO`` of ``sock``, or None where the platform or the socket has none."""
    if _TCP_INFO is None or sock is None:
        return None
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 104)
    except (OSError, AttributeError, TypeError):
        return None
    if len(raw) < _PREFIX.size:
        return None
    fields = _PREFIX.unpack_from(raw)
    return TcpInfo(unacked=fields[8 + 4], last_ack_recv_ms=fields[8 + 12])


def peer_tcp_alive(transport: Any, within: float) -> bool | None:
    """Whether the peer's TCP acknowledged our segments within ``within`` seconds, or has
    nothing of ours to acknowledge (its window is closed, or nothing was sent). None when the
    kernel cannot tell (no ``TCP_INFO``, no socket)."""
    get_handle = getattr(transport, "getHandle", None)
    info = read_tcp_info(get_handle() if get_handle is not None else None)
    if info is None:
        return None
    return info.unacked == 0 or info.last_ack_recv_ms < within * 1000
