"""
Tests for the test harness itself (tests/support/harness.py, tests/conftest.py): the real servers
start, serve, stop cleanly and restart; loopback confinement; trial and pytest-twisted coexisting.

The module-level ``test_*`` functions are pytest-only (trial ignores them); everything else is a
trial TestCase that both runners execute.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import unittest as pyunit
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure
from twisted.trial import unittest

from tests.support.harness import (
    LOOPBACK,
    SRC_DIR,
    PeerFailure,
    RealServersMixin,
    apply_loopback_env,
    loopback_env,
    peer_environment,
    restore_env,
    run_peer_pair,
    start_mailbox_server,
    start_transit_relay,
    stock_loopback,
)
from tests.support.waits import sleep

APPID = "lothar.com/txdilation/harness-test"


class _Recorder(Protocol):
    """Records what arrives; ``lost`` fires at connectionLost."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.lost: defer.Deferred[None] = defer.Deferred()
        self.waiters: list[tuple[bytes, defer.Deferred[None]]] = []

    def dataReceived(self, data: bytes) -> None:
        self.received += data
        for expected, d in list(self.waiters):
            if expected in self.received:
                self.waiters.remove((expected, d))
                d.callback(None)

    def wait_for(self, expected: bytes) -> defer.Deferred[None]:
        d: defer.Deferred[None] = defer.Deferred()
        if expected in self.received:
            d.callback(None)
        else:
            self.waiters.append((expected, d))
        return d

    def connectionLost(self, reason: Failure = Failure(Exception())) -> None:  # noqa: B008
        self.lost.callback(None)


async def _connect(reactor: Any, port: int) -> _Recorder:
    proto: _Recorder = await TCP4ClientEndpoint(reactor, LOOPBACK, port).connect(
        Factory.forProtocol(_Recorder)
    )
    return proto


async def _exchange_through_mailbox(reactor: Any, url: str, code: str | None = None) -> bytes:
    """Two stock wormholes (no dilation) exchange one message through ``url``."""
    import wormhole

    a = wormhole.create(APPID, url, reactor)
    b = wormhole.create(APPID, url, reactor)
    if code is None:
        a.allocate_code()
    else:
        a.set_code(code)
    b.set_code(await a.get_code())
    a.send_message(b"over the real mailbox")
    received: bytes = await b.get_message()
    await a.close()
    await b.close()
    return received


class MailboxServerTests(unittest.TestCase):
    """``start_mailbox_server`` runs the real mailbox server on loopback."""

    timeout = 30

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor

    async def _start(self, **kw: Any) -> Any:
        server = await start_mailbox_server(self.reactor, **kw)
        self.addCleanup(server.stop)
        return server

    @defer.inlineCallbacks
    def test_wormholes_exchange_a_message(self) -> Any:
        """Two stock wormhole clients exchange a message through the in-process server."""
        server = yield defer.ensureDeferred(self._start())
        self.assertEqual(server.url, f"ws://127.0.0.1:{server.port}/v1")
        received = yield defer.ensureDeferred(_exchange_through_mailbox(self.reactor, server.url))
        self.assertEqual(received, b"over the real mailbox")

    @defer.inlineCallbacks
    def test_stop_drops_clients_and_frees_the_port(self) -> Any:
        """stop() disconnects a connected client, closes the port, and is idempotent."""
        server = yield defer.ensureDeferred(self._start())
        client = yield defer.ensureDeferred(_connect(self.reactor, server.port))
        yield server.stop()
        yield client.lost
        yield self.assertFailure(
            defer.ensureDeferred(_connect(self.reactor, server.port)), ConnectionRefusedError
        )
        yield server.stop()

    @defer.inlineCallbacks
    def test_restart_on_same_port_and_database_keeps_the_nameplate(self) -> Any:
        """
        A server stopped and restarted on its port with the same channel database keeps its
        state: a code allocated before the restart still connects two clients after it.
        """
        db = os.path.join(self.mktemp() + ".d", "channel.sqlite")
        os.makedirs(os.path.dirname(db))
        first = yield defer.ensureDeferred(start_mailbox_server(self.reactor, channel_db=db))
        import wormhole

        a = wormhole.create(APPID, first.url, self.reactor)
        a.allocate_code()
        code = yield a.get_code()
        yield first.stop()
        second = yield defer.ensureDeferred(self._start(channel_db=db, port=first.port))
        self.assertEqual((second.url, second.channel_db), (first.url, db))
        b = wormhole.create(APPID, second.url, self.reactor)
        b.set_code(code)
        b.send_message(b"after the restart")
        received = yield a.get_message()
        self.assertEqual(received, b"after the restart")
        yield a.close()
        yield b.close()

    @defer.inlineCallbacks
    def test_port_in_use_is_an_error(self) -> Any:
        """Asking for a port that is taken fails instead of picking another one."""
        server = yield defer.ensureDeferred(self._start())
        from twisted.internet.error import CannotListenError

        yield self.assertFailure(
            defer.ensureDeferred(start_mailbox_server(self.reactor, port=server.port)),
            CannotListenError,
        )


class TransitRelayTests(unittest.TestCase):
    """``start_transit_relay`` runs the real transit relay on loopback."""

    timeout = 30

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor

    async def _paired(self, relay: Any) -> tuple[_Recorder, _Recorder]:
        token = "a" * 64
        left = await _connect(self.reactor, relay.port)
        right = await _connect(self.reactor, relay.port)
        left.transport.write(f"please relay {token} for side {'1' * 16}\n".encode())
        right.transport.write(f"please relay {token} for side {'2' * 16}\n".encode())
        await left.wait_for(b"ok\n")
        await right.wait_for(b"ok\n")
        return left, right

    @defer.inlineCallbacks
    def test_relays_bytes_between_matching_handshakes(self) -> Any:
        """Two sided handshakes with one token are paired and bytes flow both ways."""
        relay = yield defer.ensureDeferred(start_transit_relay(self.reactor))
        self.addCleanup(relay.stop)
        self.assertEqual(relay.hint, f"tcp:127.0.0.1:{relay.port}")
        left, right = yield defer.ensureDeferred(self._paired(relay))
        left.transport.write(b"left to right")
        right.transport.write(b"right to left")
        yield right.wait_for(b"left to right")
        yield left.wait_for(b"right to left")
        left.transport.loseConnection()
        yield right.lost

    @defer.inlineCallbacks
    def test_stop_aborts_relayed_connections_and_usage_is_logged(self) -> Any:
        """stop() cuts paired connections and frees the port; usage lines reach log_fd_file."""
        log_path = self.mktemp()
        with open(log_path, "w") as log_file:
            relay = yield defer.ensureDeferred(
                start_transit_relay(self.reactor, log_fd_file=log_file)
            )
            left, right = yield defer.ensureDeferred(self._paired(relay))
            left.transport.write(b"x" * 1000)
            yield right.wait_for(b"x" * 1000)
            yield relay.stop()
            yield defer.DeferredList([left.lost, right.lost])
        yield self.assertFailure(
            defer.ensureDeferred(_connect(self.reactor, relay.port)), ConnectionRefusedError
        )
        with open(log_path) as f:
            records = [json.loads(line) for line in f if line.strip()]
        self.assertEqual(len(records), 1, records)
        self.assertEqual(records[0]["total_bytes"], 1000)


class RealServersMixinTests(RealServersMixin, unittest.TestCase):
    """The mixin starts both servers for each test and sets the loopback environment."""

    timeout = 30

    @defer.inlineCallbacks
    def test_both_servers_are_running(self) -> Any:
        """Both ports accept connections and the loopback variables are set."""
        mailbox_client = yield defer.ensureDeferred(_connect(self.reactor, self.mailbox.port))
        relay_client = yield defer.ensureDeferred(_connect(self.reactor, self.transit_relay.port))
        for name, value in loopback_env().items():
            self.assertEqual(os.environ.get(name), value)
        mailbox_client.transport.loseConnection()
        relay_client.transport.loseConnection()
        yield defer.DeferredList([mailbox_client.lost, relay_client.lost])


class LoopbackTests(unittest.SynchronousTestCase):
    """Loopback confinement for stock peers and for our own."""

    def test_stock_loopback_confines_discovery_and_listener(self) -> None:
        """Inside stock_loopback() stock's connector sees only 127.0.0.1; outside, the originals."""
        from twisted.internet.testing import MemoryReactor
        from wormhole._dilation import connector

        discover, listen = connector.ipaddrs.find_addresses, connector.serverFromString
        with stock_loopback():
            self.assertEqual(connector.ipaddrs.find_addresses(), ["127.0.0.1"])
            endpoint = connector.serverFromString(MemoryReactor(), "tcp:0")
            self.assertIsInstance(endpoint, TCP4ServerEndpoint)
            self.assertEqual((endpoint._interface, endpoint._port), ("127.0.0.1", 0))
        self.assertIs(connector.ipaddrs.find_addresses, discover)
        self.assertIs(connector.serverFromString, listen)

    def test_apply_and_restore_loopback_env(self) -> None:
        """apply_loopback_env sets both variables; restore_env puts back the earlier values."""
        names = sorted(loopback_env())
        self.assertEqual(names, ["TXDILATION_HINT_ADDRESSES", "TXDILATION_LISTEN_INTERFACE"])
        saved = {name: os.environ.get(name) for name in names}
        os.environ[names[0]] = "10.1.2.3"
        os.environ.pop(names[1], None)
        try:
            previous = apply_loopback_env()
            self.assertEqual({n: os.environ[n] for n in names}, loopback_env())
            restore_env(previous)
            self.assertEqual(os.environ.get(names[0]), "10.1.2.3")
            self.assertNotIn(names[1], os.environ)
        finally:
            restore_env(saved)

    def test_peer_environment(self) -> None:
        """A peer child gets src/ first on PYTHONPATH and the loopback variables."""
        env = peer_environment()
        self.assertEqual(env["PYTHONPATH"].split(os.pathsep)[0], str(SRC_DIR))
        for name, value in loopback_env().items():
            self.assertEqual(env[name], value)


class TrialWaitTests(unittest.SynchronousTestCase):
    """
    Trial TestCases returning Deferreds pass and time out properly under either runner.
    """

    def _run_inner(self) -> pyunit.TestResult:
        from twisted.internet import reactor

        class Inner(unittest.TestCase):
            timeout = 0.5

            def test_fires(self) -> defer.Deferred[None]:
                return sleep(0.01, reactor)

            def test_hangs(self) -> defer.Deferred[None]:
                return defer.Deferred()

        result = pyunit.TestResult()
        pyunit.TestSuite([Inner("test_fires"), Inner("test_hangs")]).run(result)
        return result

    def _check(self, result: pyunit.TestResult) -> None:
        self.assertEqual(result.testsRun, 2)
        self.assertEqual(result.failures, [])
        names = [case.id().rsplit(".", 1)[-1] for case, _ in result.errors]
        self.assertEqual(names, ["test_hangs"])
        self.assertIn("TimeoutError", result.errors[0][1])

    def test_deferred_results_and_timeouts(self) -> None:
        """A Deferred that fires passes; one that never fires errors with a timeout."""
        self._check(self._run_inner())

    def test_inside_pytest_twisted_greenlet(self) -> None:
        """
        Under pytest, once pytest-twisted's greenlet runs the reactor, trial's Deferred tests
        still pass and time out properly (they wait through the greenlet), leaving no
        unhandled failure behind to be logged in a later test.
        """
        conftest = sys.modules.get("tests.conftest")
        if conftest is None:
            raise unittest.SkipTest("only meaningful under pytest (tests/conftest.py loaded)")
        from twisted.internet import reactor

        pytest_twisted.blockon(sleep(0, reactor))
        self.assertIsNotNone(conftest._GreenletAwareWait._reactor_greenlet())
        self._check(self._run_inner())
        gc.collect()  # a timed-out test's failure left unhandled would be logged here (and fail)


class RunPeerPairFailureTests(RealServersMixin, unittest.TestCase):
    """run_peer_pair reports failures with both peers' output instead of hanging."""

    timeout = 60

    async def _failure(self, left: list[str], right: list[str], timeout: float) -> str:
        run = run_peer_pair(self.reactor, self.mailbox.url, left, right, timeout)
        failure = await self.assertFailure(defer.ensureDeferred(run), PeerFailure)
        return str(failure)

    @defer.inlineCallbacks
    def test_peers_waiting_for_each_other_are_killed_at_the_timeout(self) -> Any:
        """Two peers waiting for each other are killed at run_peer_pair's timeout."""
        args = ["--impl", "stock", "--scenario", "close-second", "--timeout", "60"]
        message = yield defer.ensureDeferred(self._failure(args, args, 8.0))
        self.assertIn("timed out after 8.0 s", message)
        self.assertIn("--- left: exit None", message)
        self.assertIn("--- right: exit None", message)

    @defer.inlineCallbacks
    def test_peer_gives_up_at_its_own_timeout(self) -> Any:
        """
        A peer stuck past --timeout exits with status 3 and says where it was waiting; its
        partner, told by stdin EOF that it has gone, finishes normally.
        """
        args = ["--impl", "stock", "--scenario", "close-second", "--timeout"]
        # 10 s: under a loaded CI machine a stock peer may need several seconds to get there
        message = yield defer.ensureDeferred(self._failure([*args, "10"], [*args, "60"], 45.0))
        self.assertIn("left exited with 3", message)
        self.assertNotIn("right exited", message)
        self.assertIn('"phase": "close-second: waiting for the other peer to finish"', message)

    @defer.inlineCallbacks
    def test_scenario_error_and_exit_status_are_reported(self) -> Any:
        """A peer whose scenario fails exits non-zero with an error event naming the problem."""
        server = ["--impl", "stock", "--scenario", "echo-server", "--count", "2"]
        client = ["--impl", "stock", "--scenario", "echo-client", "--count", "1"]
        message = yield defer.ensureDeferred(self._failure(server, client, 40.0))
        self.assertIn("left exited with 1", message)
        self.assertIn("1 of 2 ended", message)
        self.assertNotIn("right exited", message)


# ---------------------------------------------------------------------------------------------
# pytest-only: fixtures and the conftest glue


@pytest_twisted.ensureDeferred
async def test_fixtures_serve_on_loopback(reactor: Any, mailbox: Any, transit_relay: Any) -> None:
    """The pytest fixtures give running servers (this also starts pytest-twisted's greenlet)."""
    received = await _exchange_through_mailbox(reactor, mailbox.url)
    assert received == b"over the real mailbox"
    client = await _connect(reactor, transit_relay.port)
    client.transport.loseConnection()
    await client.lost
    assert os.environ["TXDILATION_LISTEN_INTERFACE"] == LOOPBACK


@pytest_twisted.ensureDeferred
async def test_timeout_marker_bounds_coroutine_tests() -> None:
    """The conftest timeout wrapper turns a hanging coroutine test into a TimeoutError."""
    from tests.conftest import _with_timeout

    async def hangs() -> None:
        await defer.Deferred()

    with pytest.raises(defer.TimeoutError):
        await _with_timeout(hangs, 0.2)()
