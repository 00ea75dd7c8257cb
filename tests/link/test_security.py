"""Security properties of the L2 link, tested against real Dilators over real TCP on 127.0.0.1.

Pinned (see docs/security.md for the threat model):

- a party that relays the L2 bytes but lacks the dilation key (a hostile transit relay) reads
  nothing: neither the application's data nor the subprotocol names appear in what it relayed;
  and it cannot inject: a flipped bit, a forged frame, a replayed frame or a dropped frame is
  detected by the receiver, which drops the connection; the application sees exactly what was
  written, once, in order, after the next generation carried it;
- someone without the key cannot complete a handshake with either role;
- a recorded handshake replayed to a listener (the Leader's or the Follower's) does not yield
  a connection: it is dropped (NoiseError) and nothing is selected, even though a Follower
  answers a replayed message 1;
- records that arrive on a connection that lost the selection are never delivered, whichever
  role picks the winner.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet.defer import DeferredList, ensureDeferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol, ServerFactory
from twisted.trial.unittest import TestCase

from tests.mailbox.test_manager import Collector
from tests.support.hostile import (
    HIGHEST_SIDE,
    LOWEST_SIDE,
    Attacker,
    LogCapture,
    Mailbox,
    RawL2,
    RogueMailbox,
    connect_raw,
    reactor,
    record_figures,
    rogue_connection,
    use_environment,
)
from tests.support.waits import wait_until
from txdilation.link.framer import PROLOGUE_FOLLOWER, PROLOGUE_LEADER, Framer
from txdilation.wire.records import KCM, Data, Open, encode_record
from txdilation.wire.roles import FOLLOWER, LEADER

SECRET_NAME = "secret-subprotocol-7f3a"
MARKER = b"SECRET-APPLICATION-DATA-c4e1"

# ---------------------------------------------------------------------------------------------
# a hostile transit relay: pairs connections as the real one does, then relays frame by frame


class _RelayedStream:
    """One direction of a relayed pair: the prologue, then whole frames, each offered to the
    relay's ``tamper`` before it is forwarded."""

    def __init__(self, relay: EvilRelay, source: _RelayConnection) -> None:
        self.relay = relay
        self.source = source
        self.buffer = bytearray()
        self.prologue_done = False
        self.frames = 0

    def received(self, data: bytes) -> None:
        self.relay.seen.extend(data)
        self.buffer += data
        if not self.prologue_done:
            for prologue in (PROLOGUE_LEADER, PROLOGUE_FOLLOWER):
                if self.buffer.startswith(prologue):
                    self.forward(bytes(self.buffer[: len(prologue)]))
                    del self.buffer[: len(prologue)]
                    self.prologue_done = True
            if not self.prologue_done:
                return
        while len(self.buffer) >= 4:
            length = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < 4 + length:
                return
            payload = bytes(self.buffer[4 : 4 + length])
            del self.buffer[: 4 + length]
            self.frames += 1
            for out in self.relay.tamper(payload):
                self.forward(b"".join(Framer.frame(out)))

    def forward(self, data: bytes) -> None:
        partner = self.source.partner
        if partner is not None and partner.transport is not None:
            partner.transport.write(data)


class _RelayConnection(Protocol):
    def __init__(self, relay: EvilRelay) -> None:
        self.relay = relay
        self.line = bytearray()
        self.token: bytes | None = None
        self.partner: _RelayConnection | None = None
        self.stream = _RelayedStream(relay, self)

    def dataReceived(self, data: bytes) -> None:
        if self.token is None:
            self.line += data
            if b"\n" not in self.line:
                return
            line, _, rest = bytes(self.line).partition(b"\n")
            words = line.split()  # please relay TOKEN for side SIDE
            self.token = words[2]
            self.relay.pair(self)
            data = rest
        if data:
            self.stream.received(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.relay.gone(self)
        if self.partner is not None and self.partner.transport is not None:
            self.partner.transport.loseConnection()


class EvilRelay(ServerFactory):
    """A transit relay that records every byte it relays and can tamper with one frame.

    ``arm(mode)``: the next frame of more than 200 bytes (application data, not ACK or PING)
    is flipped, preceded by a forged frame, sent twice, or dropped. Relayed bytes are kept in
    ``seen``.
    """

    def __init__(self) -> None:
        self.waiting: dict[bytes, _RelayConnection] = {}
        self.connections: set[_RelayConnection] = set()
        self.seen = bytearray()
        self.mode: str | None = None
        self.tampered = 0
        # without the key, a forged frame can only be bytes of a plausible length
        self._forged = os.urandom(16 + len(encode_record(Data(0, 1, MARKER))))

    def buildProtocol(self, addr: Any) -> _RelayConnection:
        connection = _RelayConnection(self)
        self.connections.add(connection)
        return connection

    def pair(self, connection: _RelayConnection) -> None:
        assert connection.token is not None
        other = self.waiting.pop(connection.token, None)
        if other is None:
            self.waiting[connection.token] = connection
            return
        connection.partner, other.partner = other, connection
        for c in (connection, other):
            assert c.transport is not None
            c.transport.write(b"ok\n")
        if other.stream.buffer:  # bytes that came before the pair was complete
            pending, other.stream.buffer = bytes(other.stream.buffer), bytearray()
            other.stream.received(pending)

    def gone(self, connection: _RelayConnection) -> None:
        self.connections.discard(connection)
        if connection.token is not None and self.waiting.get(connection.token) is connection:
            del self.waiting[connection.token]

    def arm(self, mode: str) -> None:
        self.mode = mode

    def tamper(self, payload: bytes) -> list[bytes]:
        if self.mode is None or len(payload) <= 200:
            return [payload]
        mode, self.mode = self.mode, None
        self.tampered += 1
        if mode == "flip":
            flipped = bytearray(payload)
            flipped[len(flipped) // 2] ^= 0x01
            return [bytes(flipped)]
        if mode == "forge":
            return [self._forged, payload]
        if mode == "replay":
            return [payload, payload]
        assert mode == "drop"
        return []

    def close_all(self) -> None:
        for c in list(self.connections):
            if c.transport is not None:
                c.transport.abortConnection()


class RelayWithoutKeyTests(TestCase):
    """Both peers reach each other only through a hostile relay (no_listen=True)."""

    timeout = 60

    def test_relay_can_neither_read_nor_inject(self) -> Any:
        """Data written on a subchannel never appears in the relayed bytes (nor its name, nor
        the keys); each tampering (flip, forge, replay, drop) makes the receiver drop the
        connection with a NoiseError, and the application receives exactly what was written."""
        return ensureDeferred(self._relay())

    async def _relay(self) -> None:
        use_environment(self)
        log = LogCapture(self)
        relay = EvilRelay()
        port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(relay)
        self.addCleanup(port.stopListening)
        self.addCleanup(relay.close_all)
        mailbox = Mailbox()
        self.addCleanup(lambda: ensureDeferred(mailbox.stop()))
        hint = f"tcp:127.0.0.1:{port.getHost().port}"
        apis = mailbox.dilate(transit_relay_location=hint, no_listen=True)
        await DeferredList([api.when_dilated() for api in apis], fireOnOneErrback=True)
        received: list[bytes] = []

        class Keep(Collector):
            def dataReceived(self, data: bytes) -> None:
                received.append(data)

        await apis[1].listener_for(SECRET_NAME).listen(Factory.forProtocol(Keep))
        client = await apis[0].connector_for(SECRET_NAME).connect(Factory.forProtocol(Collector))
        written: list[bytes] = []

        async def send(tag: bytes) -> None:
            message = MARKER + tag + bytes(600)
            written.append(message)
            client.transport.write(message)
            await wait_until(lambda: len(received) == len(written), 20, f"{tag!r} delivered")

        await send(b"-plain")
        for mode in ("flip", "forge", "replay", "drop"):
            connection = apis[1]._manager.connection
            relay.arm(mode)
            await send(mode.encode())
            self.assertEqual(relay.tampered, ("flip", "forge", "replay", "drop").index(mode) + 1)
            self.assertIsNot(apis[1]._manager.connection, connection, f"{mode}: not detected")
        self.assertEqual(received, written)
        drops = [t for t in log.texts() if "dropping L2 connection" in t]
        self.assertGreaterEqual(sum("NoiseError" in t for t in drops), 4, drops)
        seen = bytes(relay.seen)
        self.assertGreater(len(seen), 5 * 600)
        self.assertNotIn(MARKER, seen)
        self.assertNotIn(SECRET_NAME.encode(), seen)
        for d in mailbox.dilators:
            self.assertNotIn(d._manager._core.dilation_key, seen)
        record_figures(self, hostile_connections_handled=relay.tampered)


# ---------------------------------------------------------------------------------------------
# replayed handshakes


class RecordingProxy(Protocol):
    """Forwards a client to ``port`` on 127.0.0.1, recording what the client sent."""

    def __init__(self, target: int, record: bytearray) -> None:
        self.target = target
        self.record = record
        self.backend: Attacker | None = None
        self.pending = bytearray()

    def connectionMade(self) -> None:
        backend = Attacker()
        backend.dataReceived = self._from_backend  # type: ignore[method-assign]
        backend.closed.addCallback(lambda _: self._close())
        d = ensureDeferred(connect_raw(self.target, backend))
        d.addCallback(self._connected)
        d.addErrback(lambda _: self._close())

    def _connected(self, backend: Any) -> None:
        self.backend = backend
        if self.pending:
            backend.transport.write(bytes(self.pending))

    def _from_backend(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.loseConnection()

    def dataReceived(self, data: bytes) -> None:
        self.record.extend(data)
        if self.backend is None or self.backend.transport is None:
            self.pending.extend(data)
        else:
            self.backend.transport.write(data)

    def connectionLost(self, reason: Any = None) -> None:
        if self.backend is not None:
            self.backend.close()


class ReplayTests(TestCase):
    """Record what one peer sent to the other's listener; replay it in the next generation."""

    timeout = 60

    def test_replay_to_the_leader(self) -> Any:
        """A recorded generation replayed to the Leader is dropped (NoiseError); it resumes."""
        return ensureDeferred(self._replay(listener=LEADER))

    def test_replay_to_the_follower(self) -> Any:
        """A recorded generation replayed to the Follower is dropped (NoiseError); it resumes."""
        return ensureDeferred(self._replay(listener=FOLLOWER))

    async def _replay(self, listener: Any) -> None:
        """Generation 1 goes through a recording proxy in front of the ``listener`` role's
        port (the other side's hints are withheld, so that is the only path). The link is
        dropped; while generation 2's hints are withheld, the recording (prologue, handshake
        message, KCM, records) is replayed to the new listener: the connection is dropped with
        a NoiseError and nothing is selected; then the hints go out and the session resumes."""
        use_environment(self)
        log = LogCapture(self)
        recorded = bytearray()
        proxies: list[Any] = []
        mailbox = Mailbox()
        self.addCleanup(lambda: ensureDeferred(mailbox.stop()))

        def first_generation(sender: int, body: dict[str, Any]) -> dict[str, Any] | None:
            if mailbox.role(sender) is not listener:
                return None
            return {**body, "hints": [dict(h, port=proxies[0]) for h in body["hints"]]}

        proxy_port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
            Factory.forProtocol(
                lambda: RecordingProxy(mailbox.ports(mailbox.index_of(listener))[-1], recorded)
            )
        )
        self.addCleanup(proxy_port.stopListening)
        proxies.append(proxy_port.getHost().port)
        mailbox.hint_rule = first_generation
        apis = mailbox.dilate()
        await DeferredList([api.when_dilated() for api in apis], fireOnOneErrback=True)
        owner = mailbox.index_of(listener)
        expected = PROLOGUE_FOLLOWER if listener is LEADER else PROLOGUE_LEADER
        self.assertTrue(recorded.startswith(expected))
        owner_manager = mailbox.dilators[owner]._manager

        mailbox.hint_rule = lambda sender, body: None  # generation 2: nobody learns hints yet
        before = len(mailbox.ports(owner))
        owner_manager.connection.abort()
        await wait_until(lambda: len(mailbox.ports(owner)) > before, 10, "generation 2 listener")
        replayer = Attacker(bytes(recorded))
        await connect_raw(mailbox.ports(owner)[-1], replayer)
        await replayer.closed
        reason = log.drop_reasons().get(replayer.local_port, "")
        if listener is LEADER:  # its fresh message 1 does not match the recorded message 2
            self.assertIn("NoiseError: reading handshake message failed", reason)
        else:  # a Follower completes its side of a replayed message 1, then cannot read the
            # recorded KCM: the handshake "succeeded" only with keys nobody else holds
            self.assertIn("NoiseError: decrypting failed", reason)
        self.assertIsNone(owner_manager.connection)
        connector = owner_manager.connector
        self.assertTrue(connector is None or connector.selected is None)

        mailbox.hint_rule = None
        mailbox.deliver_withheld()
        await wait_until(lambda: owner_manager.connection is not None, 10, "generation 2 selected")
        record_figures(self, hostile_connections_handled=1)


# ---------------------------------------------------------------------------------------------
# selection


class LosingConnectionTests(TestCase):
    """A rogue peer with the key makes two candidates and sends records on both."""

    timeout = 30

    def test_leader_never_delivers_from_the_loser(self) -> Any:
        """The Leader delivers only the winner's DATA, never the losing Follower candidate's."""
        return ensureDeferred(self._losers(rogue_role=FOLLOWER))

    def test_follower_never_delivers_from_the_loser(self) -> Any:
        """The Follower delivers only the winner's DATA, never the losing Leader candidate's."""
        return ensureDeferred(self._losers(rogue_role=LEADER))

    async def _losers(self, rogue_role: Any) -> None:
        """Both candidates complete the handshake; then, in the same instant, each sends its
        KCM followed at once by an OPEN and a DATA naming the connection. Exactly one is
        selected, the other is dropped, and the application receives only the winner's
        DATA."""
        use_environment(self)
        mailbox = RogueMailbox()
        self.addCleanup(lambda: ensureDeferred(mailbox.stop()))
        api = mailbox.start(HIGHEST_SIDE if rogue_role is LEADER else LOWEST_SIDE)
        await wait_until(mailbox.ports, 10, "hints")
        candidates = [await rogue_connection(mailbox, rogue_role, auto_kcm=False) for _ in range(2)]
        for raw in candidates:
            self.addCleanup(raw.abort)
        if rogue_role is LEADER:  # the Follower sent its KCM on both already
            for raw in candidates:
                await raw.wait_for(lambda r: isinstance(r, KCM))
        received: list[bytes] = []

        class Keep(Collector):
            def dataReceived(self, data: bytes) -> None:
                received.append(data)

        scid = 1 if rogue_role is LEADER else 2
        for index, raw in enumerate(candidates):
            parts = [Framer.frame(raw.noise.encrypt(encode_record(KCM())))]
            for record in (Open(0, scid, "x"), Data(1, scid, b"from candidate %d" % index)):
                parts.append(Framer.frame(raw.noise.encrypt(encode_record(record))))
            raw.transport.writeSequence([b for pair in parts for b in pair])  # type: ignore[union-attr]
        await api.when_dilated()
        await api.listener_for("x").listen(Factory.forProtocol(Keep))
        await wait_until(lambda: received, 5, "the winner's DATA")
        winner = received[0][-1] - ord("0")
        await candidates[1 - winner].closed
        self.assertEqual(received, [b"from candidate %d" % winner])
        selected = mailbox.dilator._manager.connection
        winner_port = candidates[winner].local_port
        self.assertEqual(selected.transport.getPeer().port, winner_port)


class WrongKeyTests(TestCase):
    """Someone who knows the protocol but not the key."""

    timeout = 30

    def test_no_handshake_without_the_key(self) -> Any:
        """A Leader with a wrong key: the real Follower cannot read its message 1 and drops
        the connection (NoiseError). A Follower with a wrong key cannot even read the real
        Leader's message 1, so it has no message 2 to send. Nothing is selected."""
        return ensureDeferred(self._wrong_key())

    async def _wrong_key(self) -> None:
        use_environment(self)
        log = LogCapture(self)
        for rogue_role, side in ((FOLLOWER, LOWEST_SIDE), (LEADER, HIGHEST_SIDE)):
            mailbox = RogueMailbox()
            self.addCleanup(lambda m=mailbox: ensureDeferred(m.stop()))
            mailbox.start(side)
            await wait_until(mailbox.ports, 10, "hints")
            impostor = RawL2(rogue_role, os.urandom(32))
            await connect_raw(mailbox.ports()[-1], impostor)
            await impostor.closed
            if rogue_role is FOLLOWER:
                self.assertIn("reading handshake message failed", str(impostor.error))
            else:
                port = impostor.local_port
                await wait_until(lambda port=port: port in log.drop_reasons(), 5, "the drop logged")
                self.assertIn("NoiseError", log.drop_reasons()[port])
            self.assertIsNone(mailbox.dilator._manager.connection)
