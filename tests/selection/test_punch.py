"""Hole punching and IPv6 (selection.punch, selection.addresses): the I/O-free parts (public
addresses from the welcome, punched hints, dial bindings, IPv6 discovery, the setting), a
connector on the real reactor (what it advertises and how it listens, with punching on and off).
(The welcome's way to the connector: tests/mailbox/test_welcome.py.)"""

from __future__ import annotations

import errno
import socket
from typing import Any

from twisted.internet import reactor as _reactor
from twisted.internet.defer import inlineCallbacks
from twisted.internet.error import ConnectError, ConnectionRefusedError, TimeoutError
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase, TestCase

from txdilation.selection.addresses import ipv6_addresses, parse_if_inet6
from txdilation.selection.connector import Connector
from txdilation.selection.hints import DirectTCPV1Hint, TorTCPV1Hint
from txdilation.selection.punch import (
    PUNCH_PRIORITY,
    PUNCH_RETRY_DELAY,
    PUNCH_WINDOW,
    dial_binding,
    public_addresses,
    punched_hints,
    sockets_reusable,
)
from txdilation.selection.punch_schedule import CROSSING_SPACING, CROSSING_WINDOW
from txdilation.selection.upgrade import STEADY_RETRY
from txdilation.settings import NetworkSettings, Settings
from txdilation.wire.roles import LEADER

from .test_connector import FakeCandidate, RecordingOwner, make
from .test_listen_port import first_hints, real_connector

reactor: Any = _reactor


class PublicAddressTests(SynchronousTestCase):
    def test_your_address(self) -> None:
        """The mailbox server's your-address, either family; an IPv4-mapped IPv6 address
        is its IPv4 address."""
        self.assertEqual(
            public_addresses({"your-address": {"ipv4": "203.0.113.7", "port": 5000}}),
            ("203.0.113.7",),
        )
        self.assertEqual(
            public_addresses({"your-address": {"ipv6": "2001:DB8::7", "port": 5000}}),
            ("2001:db8::7",),
        )
        self.assertEqual(
            public_addresses({"your-address": {"ipv6": "::ffff:203.0.113.7", "port": 1}}),
            ("203.0.113.7",),
        )

    def test_nothing_useful(self) -> None:
        """No your-address (an older server), junk, loopback, link-local, unspecified: none."""
        for welcome in (
            {},
            {"motd": "hi"},
            {"your-address": "203.0.113.7"},
            {"your-address": {"ipv4": 7}},
            {"your-address": {"ipv4": "not an address"}},
            {"your-address": {"ipv4": "127.0.0.1", "port": 1}},
            {"your-address": {"ipv6": "::1", "port": 1}},
            {"your-address": {"ipv6": "fe80::1", "port": 1}},
            {"your-address": {"ipv4": "0.0.0.0", "port": 1}},
        ):
            with self.subTest(welcome=welcome):
                self.assertEqual(public_addresses(welcome), ())


class PunchedHintTests(SynchronousTestCase):
    def test_low_priority_hint_with_our_port(self) -> None:
        """Each public address becomes a direct-tcp-v1 hint with the port given, below the
        ordinary hints' priority."""
        hints = punched_hints(("203.0.113.7",), 4001, ["192.168.1.2"])
        self.assertEqual(hints, [DirectTCPV1Hint("203.0.113.7", 4001, PUNCH_PRIORITY)])
        self.assertLess(PUNCH_PRIORITY, 0.0)

    def test_not_behind_nat(self) -> None:
        """A public address we already advertise (no NAT) adds nothing."""
        self.assertEqual(punched_hints(("10.2.0.2",), 4001, ["10.2.0.2"]), [])
        self.assertEqual(punched_hints(("2001:db8::7",), 4001, ["2001:DB8:0::7"]), [])

    def test_dial_binding(self) -> None:
        """A dial to an IP literal starts from the listening port (the family's any address,
        or the listen interface of the same family); a name, or a family other than the
        listen interface's, is dialled from an ephemeral port."""
        v4 = dial_binding(DirectTCPV1Hint("198.51.100.1", 5), 4001, None)
        self.assertEqual((v4._address, v4._port, v4._reusePort), ("0.0.0.0", 4001, True))
        v6 = dial_binding(DirectTCPV1Hint("2001:db8::1", 5), 4001, None)
        self.assertEqual((v6._address, v6._port), ("::", 4001))
        bound = dial_binding(DirectTCPV1Hint("127.0.0.2", 5), 4001, "127.0.0.1")
        self.assertEqual((bound._address, bound._port), ("127.0.0.1", 4001))
        self.assertIsNone(dial_binding(DirectTCPV1Hint("peer.example", 5), 4001, None))
        self.assertIsNone(dial_binding(DirectTCPV1Hint("2001:db8::1", 5), 4001, "127.0.0.1"))
        self.assertIsNone(dial_binding(TorTCPV1Hint("x.onion", 5), 4001, None))

    def test_only_real_reactors(self) -> None:
        """Socket options are asked only of a real reactor."""
        self.assertFalse(sockets_reusable(MemoryReactorClock()))
        self.assertEqual(sockets_reusable(reactor), hasattr(socket, "SO_REUSEPORT"))


class SettingTests(SynchronousTestCase):
    def test_punch_setting(self) -> None:
        """TXDILATION_PUNCH: on by default; off, 0, no, false turn it off; junk is refused."""
        self.assertTrue(NetworkSettings.from_environ({}).punch)
        self.assertTrue(Settings.from_environ({"TXDILATION_PUNCH": " "}).network.punch)
        for word in ("off", "0", "No", "false"):
            self.assertFalse(NetworkSettings.from_environ({"TXDILATION_PUNCH": word}).punch)
        for word in ("on", "1", "yes", "TRUE"):
            self.assertTrue(NetworkSettings.from_environ({"TXDILATION_PUNCH": word}).punch)
        self.assertRaises(ValueError, NetworkSettings.from_environ, {"TXDILATION_PUNCH": "maybe"})


IF_INET6 = """\
00000000000000000000000000000001 01 80 10 80       lo
20010db8000200000000000000000002 04 40 00 80     eth0
20010db8000200000000000000000003 04 40 00 c0     eth0
20010db8000200000000000000000004 04 40 00 20     eth0
fd000000000000000000000000000002 05 40 00 80     eth1
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
20010db8000200000000000000000002 06 40 00 80     eth2
garbage
"""


class AddressTests(SynchronousTestCase):
    def test_parse_if_inet6(self) -> None:
        """Global, usable addresses once each; no loopback, link-local, tentative or
        deprecated one."""
        self.assertEqual(parse_if_inet6(IF_INET6), ["2001:db8:2::2", "fd00::2"])

    def test_unreadable(self) -> None:
        """No such file (not Linux): no IPv6 addresses."""
        self.assertEqual(ipv6_addresses(self.mktemp()), [])


class ListenerTests(TestCase):
    """A connector on the real reactor, confined to loopback."""

    timeout = 10

    def connector(self, *, punch: bool, interface: str | None = "127.0.0.1") -> Any:
        addresses = ("127.0.0.1",) if interface else ("127.0.0.1", "::1")
        network = NetworkSettings(interface, addresses, punch=punch)
        return real_connector(self, network, public_addresses=("203.0.113.7",))

    def hints(self, owner: RecordingOwner) -> Any:
        return first_hints(self, owner)

    @inlineCallbacks
    def test_punching_advertises_the_public_address(self) -> Any:
        """Punching on: the public address is advertised with the listening port at the punch
        priority, after the ordinary hints; the listener has SO_REUSEPORT."""
        if not sockets_reusable(reactor):
            self.skipTest("no SO_REUSEPORT here")
        c, owner = self.connector(punch=True)
        c.start()
        hints = yield self.hints(owner)
        port = c._advertiser.listeners[0].getHost().port
        self.assertEqual(
            [(h["hostname"], h["port"], h["priority"]) for h in hints],
            [("127.0.0.1", port, 0.0), ("203.0.113.7", port, PUNCH_PRIORITY)],
        )
        sock = c._advertiser.listeners[0].socket
        self.assertTrue(sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT))

    @inlineCallbacks
    def test_punching_off(self) -> Any:
        """Punching off: no punched hint, no SO_REUSEPORT (as before punching existed)."""
        c, owner = self.connector(punch=False)
        c.start()
        hints = yield self.hints(owner)
        self.assertEqual([h["hostname"] for h in hints], ["127.0.0.1"])
        sock = c._advertiser.listeners[0].socket
        self.assertFalse(sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT))

    @inlineCallbacks
    def test_dual_stack(self) -> Any:
        """No listen interface: one listener on :: that IPv4 and IPv6 clients both reach."""
        if not (socket.has_ipv6 and sockets_reusable(reactor)):
            self.skipTest("no IPv6 here")
        c, owner = self.connector(punch=True, interface=None)
        c.start()
        yield self.hints(owner)
        (listener,) = c._advertiser.listeners
        port = listener.getHost().port
        self.assertEqual(listener.getHost().host, "::")
        for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect((address, port))  # accepted by the kernel: the listener has it


class PunchPolicyTests(SynchronousTestCase):
    """The connector's punching policy on a MemoryReactorClock (punching forced on, as if
    it listened on port 5555 of a real reactor)."""

    def punching_leader(self, **kw: Any) -> tuple[Connector, RecordingOwner, MemoryReactorClock]:
        c, owner, reactor = make(LEADER, **kw)
        c._advertiser.punch, c._advertiser.port = True, 5555
        return c, owner, reactor

    def refuse_while_retried(self, c: Connector, reactor: MemoryReactorClock) -> int:
        """Refuse the latest dial, each retry within a couple of CROSSING_SPACING (here the
        refusal comes at once, and a memory reactor allows no low TTLs: crossing SYNs are the
        only way through), until none follows; how many dials were refused."""
        dials = 0
        while True:
            reactor.tcpClients[-1][2].clientConnectionFailed(
                None, Failure(ConnectionRefusedError())
            )
            dials += 1
            if not c._dialer.punch_retries:
                return dials
            (retry,) = c._dialer.punch_retries
            delay = retry.getTime() - reactor.seconds()
            self.assertTrue(CROSSING_SPACING <= delay <= 2 * CROSSING_SPACING, delay)
            before = len(reactor.tcpClients)
            reactor.advance(delay)
            self.assertEqual(len(reactor.tcpClients), before + 1)

    def test_dials_from_the_listening_port(self) -> None:
        """Direct hints that are IP literals are dialled from the listening port; names are
        not."""
        c, _owner, reactor = self.punching_leader()
        c.got_hints([DirectTCPV1Hint("198.51.100.7", 6000, PUNCH_PRIORITY)])
        c.got_hints([DirectTCPV1Hint("peer.example", 6001)])
        bindings = [bind for _h, _p, _f, _t, bind in reactor.tcpClients]
        self.assertEqual(bindings[0]._port, 5555)
        self.assertEqual(bindings[1:], [None])  # the name, resolved by HostnameEndpoint

    def test_relay_first_while_punching(self) -> None:
        """A relay candidate is taken at once while the peer's punched hint is being dialled
        (the punched path is moved to later, by a peer that moves links); the punched hint is
        then dialled again from the listening port in the background."""
        c, owner, reactor = self.punching_leader(path_upgrade=True)
        relay = FakeCandidate("->relay:tcp:127.0.0.1:4001", False)
        c.got_hints([DirectTCPV1Hint("198.51.100.7", 6000, PUNCH_PRIORITY)])
        c.candidate_ready(relay)
        self.assertEqual(owner.made, [relay])
        first = reactor.tcpClients[-1][2]
        first.clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        reactor.advance(1.0)
        punched = [b for h, _p, _f, _t, b in reactor.tcpClients if h == "198.51.100.7"]
        self.assertGreaterEqual(len(punched), 2)
        self.assertTrue(all(b is not None and b._port == 5555 for b in punched))

    def test_refused_punched_dial_bursts_while_relayed(self) -> None:
        """While the link is relayed, a punched hint that only crossing SYNs can get through
        is tried again and again (refused, again within a couple of CROSSING_SPACING) from the
        relay's selection (the retry due then is kept, not left to the schedule's first try)
        until CROSSING_WINDOW after the first dial; later tries are single ones."""
        c, _owner, reactor = self.punching_leader(path_upgrade=True)
        c.got_hints([DirectTCPV1Hint("198.51.100.7", 6000, PUNCH_PRIORITY)])
        reactor.tcpClients[-1][2].clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        c.candidate_ready(FakeCandidate("->relay:tcp:127.0.0.1:4001", False))
        (retry,) = c._dialer.punch_retries  # kept through the switch to the relay
        delay = retry.getTime() - reactor.seconds()
        self.assertLessEqual(delay, 2 * CROSSING_SPACING)
        reactor.advance(delay)
        tries = self.refuse_while_retried(c, reactor)
        self.assertGreater(tries, 5 / (2 * CROSSING_SPACING))
        end = reactor.seconds()
        self.assertTrue(CROSSING_WINDOW <= end <= CROSSING_WINDOW + 0.01, end)
        reactor.advance(STEADY_RETRY)  # the schedule's next try: a single one
        dials = len(reactor.tcpClients)
        reactor.tcpClients[-1][2].clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        self.assertEqual(c._dialer.punch_retries, set())
        self.assertEqual(len(reactor.tcpClients), dials)

    def test_failed_punched_dial_is_retried_within_the_window(self) -> None:
        """A dial from the listening port that fails (other than by a refusal) is tried again
        after PUNCH_RETRY_DELAY, until PUNCH_WINDOW has passed since the first; meanwhile the
        connector is busy."""
        c, _owner, reactor = self.punching_leader()
        c.got_hints([DirectTCPV1Hint("198.51.100.7", 6000, PUNCH_PRIORITY)])
        dials = 1
        while reactor.seconds() < PUNCH_WINDOW + 2:
            factory = reactor.tcpClients[-1][2]
            factory.clientConnectionFailed(None, Failure(TimeoutError()))
            if not c._dialer.punch_retries:
                break
            self.assertTrue(c.busy)
            reactor.advance(PUNCH_RETRY_DELAY)
            dials += 1
            self.assertEqual(len(reactor.tcpClients), dials)
        self.assertEqual(dials, int(PUNCH_WINDOW / PUNCH_RETRY_DELAY) + 1)
        self.assertFalse(c.busy)

    def test_refused_punched_dial_is_retried_soon(self) -> None:
        """A refused punched dial (the peer's NAT resets SYNs it was not expecting) is made
        again within a couple of CROSSING_SPACING each time, until the window has passed: many
        more dials than other failures get."""
        c, _owner, reactor = self.punching_leader()
        c.got_hints([DirectTCPV1Hint("198.51.100.7", 6000, PUNCH_PRIORITY)])
        dials = self.refuse_while_retried(c, reactor)
        self.assertGreaterEqual(reactor.seconds(), PUNCH_WINDOW)
        self.assertGreater(dials, PUNCH_WINDOW / (2 * CROSSING_SPACING))
        self.assertFalse(c.busy)

    def test_no_retry_for_ordinary_hints_or_an_existing_connection(self) -> None:
        """Only a punched hint is retried, and not when the kernel says the connection between
        those two ports exists already (our listener accepted the peer's dial)."""
        c, _owner, reactor = self.punching_leader()
        c.got_hints([DirectTCPV1Hint("192.168.1.2", 6000)])
        reactor.tcpClients[-1][2].clientConnectionFailed(None, Failure(ConnectionRefusedError()))
        c.got_hints([DirectTCPV1Hint("198.51.100.7", 6000, PUNCH_PRIORITY)])
        taken = ConnectError(osError=errno.EADDRNOTAVAIL, string="in use")
        reactor.tcpClients[-1][2].clientConnectionFailed(None, Failure(taken))
        self.assertEqual(c._dialer.punch_retries, set())
        self.assertEqual(len(reactor.tcpClients), 2)
