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
