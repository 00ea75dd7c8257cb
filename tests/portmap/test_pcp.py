"""The PCP codec (RFC 6887): MAP requests, answers checked against their request."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txdilation.portmap import pcp

NONCE = bytes(range(12))


def answer(
    result: int = 0,
    *,
    nonce: bytes = NONCE,
    port: int = 40000,
    external: int = 40001,
    version: int = 2,
    lifetime: int = 120,
) -> bytes:
    """A MAP answer as a gateway sends it (IPv4-mapped 198.20.1.2)."""
    header = struct.pack("!BBBBII12x", version, 0x81, 0, result, lifetime, 77)
    address = bytes(10) + b"\xff\xff" + bytes((198, 20, 1, 2))
    return header + nonce + struct.pack("!B3xHH", 6, port, external) + address


class MapRequestTests(SynchronousTestCase):
    """What we send."""

    def test_layout(self) -> None:
        """A 60-byte MAP request: version 2, opcode 1, the lifetime, our address IPv4-mapped,
        the nonce, TCP, both ports, and the all-zeros IPv4 address as the suggestion."""
        data = pcp.map_request("192.168.1.2", NONCE, 40000, 40001, 7200)
        self.assertEqual(len(data), 60)
        self.assertEqual(data[:4], bytes((2, 1, 0, 0)))
        self.assertEqual(struct.unpack("!I", data[4:8])[0], 7200)
        self.assertEqual(data[8:24], bytes(10) + b"\xff\xff" + bytes((192, 168, 1, 2)))
        self.assertEqual(data[24:36], NONCE)
        self.assertEqual(data[36], 6)
        self.assertEqual(struct.unpack("!HH", data[40:44]), (40000, 40001))
        self.assertEqual(data[44:60], bytes(10) + b"\xff\xff" + bytes(4))

    def test_bad_values(self) -> None:
        """A nonce of another size, port 0 or a port past 65535 are refused."""
        for args in ((b"short", 1, 1, 1), (NONCE, 0, 1, 1), (NONCE, 1, 70000, 1)):
            with self.subTest(args=args), self.assertRaises(ValueError):
                pcp.map_request("192.168.1.2", *args)


class MapResponseTests(SynchronousTestCase):
    """What we accept."""

    def test_success(self) -> None:
        """A success answer gives the external address, port and lifetime."""
        r = pcp.parse_map_response(answer(), NONCE, 40000)
        self.assertEqual(
            (r.result, r.external_address, r.external_port, r.lifetime, r.epoch),
            (0, "198.20.1.2", 40001, 120, 77),
        )

    def test_error_result_returned(self) -> None:
        """An error answer is returned with its result code (the client decides)."""
        self.assertEqual(pcp.parse_map_response(answer(8), NONCE, 40000).result, 8)

    def test_not_ours(self) -> None:
        """Another nonce, another port, a short datagram or another opcode: PcpError."""
        cases = [
            answer(nonce=bytes(12)),
            answer(port=1),
            answer()[:40],
            answer()[:1] + b"\x82" + answer()[2:],
        ]
        for data in cases:
            with self.subTest(data=data[:8]), self.assertRaises(pcp.PcpError):
                pcp.parse_map_response(data, NONCE, 40000)

    def test_nat_pmp_gateway(self) -> None:
        """A version 0 answer (a NAT-PMP gateway's 'unsupported version') is WrongVersion."""
        with self.assertRaises(pcp.WrongVersion):
            pcp.parse_map_response(bytes((0, 0x81, 0, 1)) + bytes(4), NONCE, 40000)

    @given(st.binary(max_size=120))
    def test_garbage_never_crashes(self, data: bytes) -> None:
        """Any datagram is an answer or a PcpError, nothing else."""
        with contextlib.suppress(pcp.PcpError):
            pcp.parse_map_response(data, NONCE, 40000)
