"""The default gateway from /proc/net/route, and the home-router rule."""

from __future__ import annotations

import os
import tempfile

from twisted.trial.unittest import SynchronousTestCase

from txdilation.portmap.gateway import find_gateway, parse_routes

HEADER = "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"


def route(iface: str, dest: str, gateway: str, flags: str, metric: int, mask: str) -> str:
    return f"{iface}\t{dest}\t{gateway}\t{flags}\t0\t0\t{metric}\t{mask}\t0\t0\t0\n"


# (little-endian hex, as the kernel prints it on this machine's byte order)
def hexed(address: str) -> str:
    import socket
    import struct

    return f"{struct.unpack('=I', socket.inet_aton(address))[0]:08X}"


class RoutesTests(SynchronousTestCase):
    """Parsing the route table."""

    def test_parse(self) -> None:
        """Default and on-link routes are read, lowest metric first; down routes and garbage
        lines are left out."""
        text = (
            HEADER
            + route("eth1", "00000000", hexed("192.168.7.1"), "0003", 200, "00000000")
            + route("eth0", "00000000", hexed("192.168.1.1"), "0003", 100, "00000000")
            + route("eth0", hexed("192.168.1.0"), "00000000", "0001", 0, hexed("255.255.255.0"))
            + route("eth2", "00000000", hexed("10.9.9.1"), "0002", 0, "00000000")
            + "garbage\n"
        )
        routes = parse_routes(text)
        self.assertEqual(
            [(str(r.network), r.gateway) for r in routes],
            [
                ("192.168.1.0/24", None),
                ("0.0.0.0/0", "192.168.1.1"),
                ("0.0.0.0/0", "192.168.7.1"),
            ],
        )

    def test_no_file(self) -> None:
        """Without the file (not Linux), there is no gateway to ask."""
        self.assertIsNone(find_gateway("/nonexistent/route"))

    def test_only_home_routers(self) -> None:
        """A default gateway that is not a private (RFC 1918) address is not asked: a host on
        a public or documentation network sends no mapping request anywhere."""
        text = HEADER + route("lo", "00000000", hexed("192.0.2.1"), "0003", 0, "00000000")
        fd, path = tempfile.mkstemp()
        self.addCleanup(os.unlink, path)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        self.assertIsNone(find_gateway(path))
