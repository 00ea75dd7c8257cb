"""
``path.netwatch``: rtnetlink datagrams are read without a third-party parser, and a real
watcher reports a change of the host's addresses (inside a network namespace of the test's own).
"""

from __future__ import annotations

import struct
import textwrap

from twisted.trial import unittest

from tests.support.netns import Network, require_namespaces
from txdilation.path.netwatch import message_types

_HEADER = struct.Struct("=IHHII")


def _message(kind: int, payload: bytes = b"") -> bytes:
    """One netlink message of type ``kind``, padded to 4 bytes as the kernel sends it."""
    length = _HEADER.size + len(payload)
    padding = b"\0" * (-length % 4)
    return _HEADER.pack(length, kind, 0, 0, 0) + payload + padding


class MessageTypesTests(unittest.SynchronousTestCase):
    def test_every_message_of_a_datagram_is_read_in_order(self) -> None:
        """A datagram carries several messages, each padded to 4 bytes; all are read."""
        datagram = _message(20, b"abcde") + _message(24, b"xyz") + _message(17)
        self.assertEqual(message_types(datagram), [20, 24, 17])

    def test_a_truncated_tail_keeps_what_came_before(self) -> None:
        """A short or zero-length header ends the walk without raising (no endless loop)."""
        self.assertEqual(message_types(_message(21) + b"\x01\x02"), [21])
        zero = _HEADER.pack(0, 16, 0, 0, 0)
        self.assertEqual(message_types(_message(25) + zero + _message(16)), [25])
        self.assertEqual(message_types(b""), [])


_WATCH = textwrap.dedent(
    """
    import subprocess, sys
    from twisted.internet import reactor
    from txdilation.path import netwatch

    changes = []
    netwatch.subscribe(reactor, lambda: changes.append(1))
    def change():
        subprocess.run(["ip", "address", "add", "10.77.0.9/32", "dev", "lo"], check=True)
    def report():
        print(len(changes)); reactor.stop()
    reactor.callLater(0.2, change)
    reactor.callLater(1.5, report)
    reactor.run()
    """
)


class RealWatcherTests(unittest.TestCase):
    timeout = 60

    def test_an_address_added_is_reported(self) -> None:
        """The raw rtnetlink socket hears an address appear: the watcher reports it."""
        require_namespaces()
        with Network() as net:
            host = net.host("h", net.router())
            self.assertGreaterEqual(int(host.python(["-c", _WATCH], timeout=30).strip()), 1)
