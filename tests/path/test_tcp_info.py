"""Tests for txdilation.path.tcp_info: the kernel's word on a TCP peer (Linux TCP_INFO)."""

from __future__ import annotations

import socket
import struct

from twisted.trial import unittest

from txdilation.path.tcp_info import peer_tcp_alive, read_tcp_info


class TcpInfoTests(unittest.SynchronousTestCase):
    """The kernel's word on a real loopback connection (None where TCP_INFO is missing)."""

    def test_loopback_peer_is_alive(self) -> None:
        """TCP_INFO of a live loopback connection: nothing unacknowledged, the peer alive."""
        server = socket.socket()
        self.addCleanup(server.close)
        server.bind(("127.0.0.1", 0))
        server.listen()
        client = socket.create_connection(server.getsockname())
        self.addCleanup(client.close)
        accepted, _ = server.accept()
        self.addCleanup(accepted.close)
        info = read_tcp_info(client)
        if info is None:
            raise unittest.SkipTest("no TCP_INFO on this platform")
        self.assertEqual(info.unacked, 0)

        class Transport:
            def getHandle(self) -> socket.socket:
                return client

        self.assertIs(peer_tcp_alive(Transport(), 1.0), True)
        self.assertIsNone(peer_tcp_alive(object(), 1.0))
        self.assertIsNone(read_tcp_info(None))


class FakeSocket:
    """A socket whose TCP_INFO is what the test says."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def getsockopt(self, level: int, option: int, size: int) -> bytes:
        return self.raw


class Transport:
    def __init__(self, sock: object) -> None:
        self.sock = sock

    def getHandle(self) -> object:
        return self.sock


def tcp_info(unacked: int, last_ack_recv_ms: int) -> bytes:
    """The start of a struct tcp_info with those two fields (the 5th and 13th u32)."""
    words = [0] * 13
    words[4], words[12] = unacked, last_ack_recv_ms
    return struct.pack("=8B13I", *([0] * 8), *words) + bytes(20)


class DecisionTests(unittest.SynchronousTestCase):
    """How the two fields decide, on crafted TCP_INFO bytes."""

    def setUp(self) -> None:
        if getattr(socket, "TCP_INFO", None) is None:
            raise unittest.SkipTest("no TCP_INFO on this platform")

    def test_fields(self) -> None:
        """The fields are read at their offsets in struct tcp_info."""
        info = read_tcp_info(FakeSocket(tcp_info(3, 250)))
        assert info is not None
        self.assertEqual((info.unacked, info.last_ack_recv_ms), (3, 250))

    def test_alive_when_acknowledging_or_nothing_in_flight(self) -> None:
        """Alive: nothing in flight, or an ACK within the window; not alive: segments in
        flight and no ACK for longer; unknown: a truncated answer or no socket."""
        self.assertIs(peer_tcp_alive(Transport(FakeSocket(tcp_info(0, 99_000))), 1.0), True)
        self.assertIs(peer_tcp_alive(Transport(FakeSocket(tcp_info(2, 500))), 1.0), True)
        self.assertIs(peer_tcp_alive(Transport(FakeSocket(tcp_info(2, 1500))), 1.0), False)
        self.assertIsNone(peer_tcp_alive(Transport(FakeSocket(b"short")), 1.0))
        self.assertIsNone(peer_tcp_alive(Transport(None), 1.0))
