"""The NAT-PMP codec (RFC 6886): the external address and TCP mappings."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.portmap import natpmp


class NatPmpTests(SynchronousTestCase):
    """Requests built, answers parsed and checked."""

    def test_requests(self) -> None:
        """The address request is 2 bytes; a TCP mapping request 12 (opcode 2, the ports, the
        lifetime); deleting is lifetime 0 and suggested port 0."""
        self.assertEqual(natpmp.address_request(), b"\0\0")
        self.assertEqual(
            natpmp.map_request(40000, 40001, 60), struct.pack("!BBHHHI", 0, 2, 0, 40000, 40001, 60)
        )
        self.assertEqual(natpmp.map_request(40000, 0, 0)[-6:], bytes(6))

    def test_address_response(self) -> None:
        """The answer gives the external address; an error answer its result code."""
        data = struct.pack("!BBHI4s", 0, 128, 0, 9, bytes((198, 20, 1, 2)))
        self.assertEqual(natpmp.parse_address_response(data).external_address, "198.20.1.2")
        self.assertEqual(natpmp.parse_address_response(bytes((0, 128, 0, 3))).result, 3)

    def test_map_response(self) -> None:
        """The answer for our port gives the mapped port and lifetime; for another port, or
        to another opcode, it is not ours."""
        data = struct.pack("!BBHIHHI", 0, 130, 0, 9, 40000, 40001, 60)
        r = natpmp.parse_map_response(data, 40000)
        self.assertEqual((r.result, r.external_port, r.lifetime), (0, 40001, 60))
        for port, bad in ((1, data), (40000, data[:1] + b"\x81" + data[2:])):
            with self.assertRaises(natpmp.NatPmpError):
                natpmp.parse_map_response(bad, port)

    def test_map_error(self) -> None:
        """A short error answer still gives its result code."""
        self.assertEqual(natpmp.parse_map_response(bytes((0, 130, 0, 2)), 40000).result, 2)

    @given(st.binary(max_size=40))
    def test_garbage_never_crashes(self, data: bytes) -> None:
        """Any datagram is an answer or a NatPmpError, nothing else."""
        for parse in (natpmp.parse_address_response, lambda d: natpmp.parse_map_response(d, 1)):
            with contextlib.suppress(natpmp.NatPmpError):
                parse(data)
