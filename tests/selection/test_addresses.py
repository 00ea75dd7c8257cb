"""Tests for txdilation.selection.addresses: this host's usable global IPv6 addresses."""

from __future__ import annotations

import os

from twisted.trial.unittest import SynchronousTestCase

from txdilation.selection.addresses import ipv6_addresses, parse_if_inet6

# address ifindex prefixlen scope flags name, as /proc/net/if_inet6 lists them
IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
fe800000000000000000000000000001 02 40 20 80     eth0
20010db8000000000000000000000001 02 40 00 00     eth0
20010db8000000000000000000000002 02 40 00 20     eth0
20010db8000000000000000000000003 02 40 00 40     eth0
20010db8000000000000000000000004 02 40 00 08     eth0
20010db8000000000000000000000005 03 40 00 80     eth1
20010db8000000000000000000000001 03 40 00 00     eth1
00000000000000000000ffffc0000201 02 60 00 00     eth0
garbage line
zz010db8000000000000000000000009 02 40 00 00     eth0
"""


class ParseTests(SynchronousTestCase):
    def test_only_usable_global_addresses_once_in_order(self) -> None:
        """Loopback, link-local, IPv4-mapped, tentative, deprecated and DAD-failed addresses
        are left out, malformed lines skipped, duplicates listed once, in the file's order."""
        self.assertEqual(parse_if_inet6(IF_INET6), ["2001:db8::1", "2001:db8::5"])

    def test_unreadable_file_finds_none(self) -> None:
        """A path that cannot be read (not Linux) gives no address, no error."""
        self.assertEqual(ipv6_addresses(os.path.join(self.mktemp(), "missing")), [])

    def test_reads_the_file(self) -> None:
        """ipv6_addresses parses the file it is given."""
        path = self.mktemp()
        with open(path, "w") as f:
            f.write(IF_INET6)
        self.assertEqual(ipv6_addresses(path), ["2001:db8::1", "2001:db8::5"])


class ListenInterfaceTests(SynchronousTestCase):
    def test_bound_addresses(self) -> None:
        """A listener bound to one address is reached at that address only (in its normal
        form); one on every address (none, 0.0.0.0, ::), or a name, says nothing."""
        from txdilation.selection.addresses import bound_addresses

        self.assertEqual(bound_addresses("127.0.0.1"), ["127.0.0.1"])
        self.assertEqual(bound_addresses(" [2001:DB8::0001] "), ["2001:db8::1"])
        for everywhere in (None, "", "0.0.0.0", "::", "localhost"):
            self.assertIsNone(bound_addresses(everywhere), everywhere)

    def test_unreachable_listener(self) -> None:
        """Hint addresses that miss the one address the listener binds: said in one line,
        with what to do; nothing to say when they include it, when a hint port says a port
        forward leads there, or when the listener takes every address."""
        from txdilation.selection.addresses import unreachable_listener
        from txdilation.settings import NetworkSettings

        said = unreachable_listener(NetworkSettings("127.0.0.1", ("192.0.2.5",)))
        assert said is not None
        self.assertNotIn("\n", said)
        self.assertIn("binds only 127.0.0.1", said)
        self.assertIn("advertise 127.0.0.1 too", said)
        for fine in (
            NetworkSettings("127.0.0.1", ("192.0.2.5", "127.0.0.1")),
            NetworkSettings("::1", ("0:0::1",)),
            NetworkSettings("127.0.0.1", ("192.0.2.5",), hint_port=4001),
            NetworkSettings(None, ("192.0.2.5",)),
            NetworkSettings("127.0.0.1", None),
        ):
            self.assertIsNone(unreachable_listener(fine), fine)
