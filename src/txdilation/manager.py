"""L1: the Manager (one per dilated wormhole); stock's name for this module also gives the
Dilator (``txdilation.dilator``), which builds it.

The Manager speaks the DILATE-n mailbox messages (``please``, ``connection-hints``,
``reconnect``, ``reconnecting``; parsed and built by ``txdilation.dilate_messages``), decides
the role, runs one Connector per generation, keeps the link alive with PING/PONG, and hands
OPEN/DATA/CLOSE/ACK records to the Multiplexer.

Lifecycle (module-level Automat machine ``manager_machine``)::

    waiting -start-> wanting -please-> connecting -connection_made-> connected
    connected -lost-> disconnected (Leader sends 'reconnect')
    disconnected -reconnecting (Leader) | reconnect (Follower)-> connecting
    connected -reconnect (Follower)-> abandoning -lost-> connecting
    connected|abandoning -closing-> peer_leaving -lost-> peer_gone
    waiting|wanting|connecting|disconnected -closing-> peer_gone
    connecting|disconnected|abandoning -peer_absent-> peer_gone
    connecting -generation_stalled (Leader)-> disconnected (Leader sends 'reconnect')
    (any) -stop-> stopping -> stopped

txdilation extensions (wire-safe with stock, which ignores unknown ``please`` keys and logs and
ignores unknown message types; we send them only to a peer whose ``please`` listed them in
``"extensions"``): ``{"type": "closing"}`` says the peer's application closed its wormhole
(sent before its mailbox closes, so the last generation ends in ``peer_gone`` and
``StoppedPeer`` instead of reconnecting forever, stock defect 12); ``{"type": "link-lost",
"generation": n}`` is a Follower's report that the connection of generation ``n`` (counted in
``reconnecting`` messages) is gone, whether it ended, was cut or its liveness check gave it up,
so a Leader that has not noticed (a longer ping interval, a relay that keeps its side open)
starts a new generation at once. A peer that cannot say it left (stock, or crashed)
is given up after ``ReconnectPolicy.peer_timeout`` seconds of silence (see
``txdilation.keepalive.PeerAbsence``). docs/reliability.md discusses the limits.

Invariants:
- DILATE-n phases are numbered from 0 without gaps, one counter for every message type;
- the Follower never sends ``reconnect`` and answers each ``reconnect`` with exactly one
  ``reconnecting``; the Leader ignores hints between losing a connection and hearing
  ``reconnecting``;
- every (state, input) pair is a transition or a logged no-op: nothing the peer sends raises
  ``NoTransition`` into the reactor;
- both roles watch liveness: a connection that delivered nothing for 1.5 ping intervals is
  aborted (``abortConnection``, not a TCP timeout) and a new generation starts, so a dead path
  is left within 2 x ping_interval (``txdilation.keepalive.Liveness``);
- a Leader whose generation has nothing left in flight (every attempt and candidate failed,
  e.g. cut during the handshake) starts a new one after ``GENERATION_RETRY`` seconds, doubling
  up to ``GENERATION_RETRY_MAX`` while generations keep failing (stock waits forever);
- status updates: ``generation`` never decreases and ``peer_connection`` only moves
  NoPeer -> Connecting -> Connected <-> Reconnecting -> Stopped.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any
from typing import Protocol as TypingProtocol

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IStreamClientEndpoint, IStreamServerEndpoint
from twisted.internet.task import Cooperator
from twisted.logger import Logger
from twisted.python.failure import Failure
from wormhole._interfaces import ISend
from wormhole._status import (
    Connected,
    ConnectedPeer,
    ConnectingPeer,
    DilationHint,
    DilationStatus,
    PeerConnection,
    ReconnectingPeer,
    StoppedPeer,
    WormholeStatus,
)
from zope.interface import implementer

from ._interfaces import IDilatedConnection, IRecordSink
from .config import Limits, NetworkSettings, ReconnectPolicy, TelemetrySettings
from .connection import Ack, Close, Data, Open, Ping, Pong, Record
from .connector import Connector, ConnectorSettings
from .dilate_messages import (
    CLOSING,
    EXTENSIONS,
    LINK_LOST,
    Closing,
    ConnectionHints,
    MalformedDilationMessage,
    Please,
    Reconnect,
    Reconnecting,
    build_please,
    choose_version,
    hint_type_counts,
    make_side,
    parse_dilation_message,
)
from .errors import (
    CanOnlyDilateOnceError,
    OldPeerCannotDilateError,
    UnexpectedKCM,
    UnknownDilationMessageType,
    UnknownMessageType,
)
from .hints import RelayV1Hint, parse_hint_argv
from .keepalive import Liveness, PeerAbsence
from .l2 import DilatedConnectionProtocol
from .multiplexer import Multiplexer
from .roles import FOLLOWER, LEADER, Role
from .semantics import STOCK, Semantics
from .telemetry import Telemetry

__all__ = [
    "CLOSING",
    "DILATION_VERSIONS",
    "EXTENSIONS",
    "LINK_LOST",
    "CanOnlyDilateOnceError",
    "DilatedWormhole",
    "Manager",
    "OldPeerCannotDilateError",
    "UnexpectedKCM",
    "UnknownDilationMessageType",
    "UnknownMessageType",
    "choose_version",
    "make_side",
]

DILATION_VERSIONS = ["ged"]
DEFAULT_PING_INTERVAL = 30.0
CLOSE_TIMEOUT = 5.0
GENERATION_RETRY = 1.0
GENERATION_RETRY_MAX = 60.0
#: hints kept from a peer whose please came before we could start (more are dropped)
MAX_EARLY_HINTS = 64

_log = Logger(namespace="txdilation.manager")


def _mailbox_up(status: WormholeStatus) -> bool:
    """Whether this wormhole status says our mailbox (rendezvous) connection is up."""
    return isinstance(status.mailbox_connection, Connected)


def normalize_ping_interval(ping_interval: float | int | None) -> float:
    """``None``/0 mean the default (30 s, as stock); ints are accepted; negatives are errors."""
    if ping_interval is None or ping_interval == 0:
        return DEFAULT_PING_INTERVAL
    if isinstance(ping_interval, bool) or not isinstance(ping_interval, int | float):
        raise TypeError(f"ping_interval must be a number, not {ping_interval!r}")
    if ping_interval < 0:
        raise ValueError(f"ping_interval must be positive, not {ping_interval!r}")
    return float(ping_interval)


class DilatedWormhole:
    """What ``w.dilate()`` returns: the application's handle on the dilated link."""

    def __init__(self, manager: Manager) -> None:
        self._manager = manager

    def when_dilated(self) -> Deferred[None]:
        """Fires once the first connection is selected; errbacks with
        OldPeerCannotDilateError, or WormholeClosedError if the wormhole closes first."""
        return self._manager._mux.when_dilated()

    def listener_for(self, subprotocol_name: str) -> IStreamServerEndpoint:
        """An endpoint whose ``listen(factory)`` accepts subchannels opened by the peer."""
        endpoint: IStreamServerEndpoint = self._manager._mux.listener_for(subprotocol_name)
        return endpoint

    def connector_for(self, subprotocol_name: str) -> IStreamClientEndpoint:
        """An endpoint whose ``connect(factory)`` opens a subchannel to the peer.

        :raises ValueError: for an empty name.
        """
        endpoint: IStreamClientEndpoint = self._manager._mux.connector_for(subprotocol_name)
        return endpoint


class ManagerEvents(TypingProtocol):
    """Inputs of the Manager's lifecycle machine."""

    def start(self) -> None:
        """dilate() was called and the key and the peer's versions are known."""

    def rx_please(self, side: str) -> None:
        """The peer's ``please`` arrived."""

    def rx_hints(self, hints: list[Any]) -> None:
        """The peer's ``connection-hints`` arrived."""

    def rx_reconnect(self) -> None:
        """The Leader asks us to reconnect (only delivered to a Follower)."""

    def rx_reconnecting(self) -> None:
        """The Follower is ready for a new generation (only delivered to a Leader)."""

    def connection_made(self, connection: DilatedConnectionProtocol) -> None:
        """The current connector selected a connection."""

    def connection_lost(self) -> None:
        """The selected connection is gone."""

    def stop(self) -> None:
        """The wormhole is closing."""

    def rx_closing(self) -> None:
        """The peer announced that its application is closing its wormhole."""

    def peer_absent(self) -> None:
        """The peer gave no sign of life for ``ReconnectPolicy.peer_timeout`` (PeerAbsence)."""

    def generation_stalled(self) -> None:
        """(Leader) this generation's connector has nothing left that could connect."""


@implementer(IRecordSink)
class Manager:
    """One dilated wormhole's L1; see the module docstring for its invariants."""

    def __init__(
        self,
        sender: ISend,
        my_side: str,
        transit_relay_location: str | None,
        reactor: Any,
        eventual_queue: Any,
        cooperator: Cooperator | None,
        acceptable_versions: Iterable[str],
        ping_interval: float,
        expected_subprotocols: Iterable[str] | None,
        no_listen: bool,
        status_update: Callable[[DilationStatus], object] | None,
        initial_mailbox_status: WormholeStatus | None = None,
        tor: Any = None,
        network: NetworkSettings | None = None,
        limits: Limits | None = None,
        policy: ReconnectPolicy | None = None,
        semantics: Semantics = STOCK,
    ) -> None:
        self._S = sender
        self._my_side = my_side
        self._reactor = reactor
        self._eventual_queue = eventual_queue
        self._acceptable_versions = list(acceptable_versions)
        self._ping_interval = ping_interval
        self._no_listen = no_listen
        self._status_update = status_update
        self._tor = tor
        self._network = network or NetworkSettings.from_environ()
        self._limits = limits or Limits.from_environ()
        self._policy = policy or ReconnectPolicy.from_environ()
        self._relay_hints: tuple[RelayV1Hint, ...] = ()
        if transit_relay_location:
            self._relay_hints = (RelayV1Hint((parse_hint_argv(transit_relay_location),)),)
        self._dilation_key: bytes | None = None
        self._their_versions: dict[str, Any] | None = None
        self._version: str | None = None
        self._started = False
        self._role: Role | None = None
        self._next_phase = 0
        self._connector: Connector | None = None
        self._connection: DilatedConnectionProtocol | None = None
        self._generation = 0
        self._status = DilationStatus(
            mailbox=initial_mailbox_status or WormholeStatus(), generation=0
        )
        self._hints_seen: set[DilationHint] = set()
        self._stopped_waiters: list[Deferred[None]] = []
        self._is_stopped = False
        self._close_timer: IDelayedCall | None = None
        self._close_deadline = 0.0
        self._liveness: Liveness | None = None
        self._absence = PeerAbsence(reactor, self._policy.peer_timeout, self._peer_absent)
        if initial_mailbox_status is not None:
            self._absence.mailbox_connected(_mailbox_up(initial_mailbox_status))
        self._peer_extensions: frozenset[str] = frozenset()
        self._closing_announced = False
        self._reconnectings = 0  # 'reconnecting' messages sent (Follower) or received (Leader)
        self._stall_timer: IDelayedCall | None = None
        self._stall_delay = GENERATION_RETRY
        self._next_ping_id = 0
        self._pings_sent: deque[tuple[bytes, float]] = deque(maxlen=16)
        #: the application's pings (stock's ``send_ping``): id -> (on_pong, sent at)
        self._app_pings: dict[bytes, tuple[Callable[[float], object] | None, float]] = {}
        self.last_rtt: float | None = None
        self._debug_stall_connector: Callable[[Connector], object] | bool = False
        self._early_please: str | None = None
        self._early_hints: list[DilationHint] = []
        self._mux_dilated = False
        self.telemetry = Telemetry(reactor)
        self._traffic_interval = TelemetrySettings.from_environ().traffic_interval
        self._mux = Multiplexer(
            manager=self,
            reactor=reactor,
            cooperator=cooperator,
            expected_subprotocols=expected_subprotocols,
            max_unacked_bytes=self._limits.max_unacked_bytes,
            max_pending_open_bytes=self._limits.max_pending_open_bytes,
            max_buffered_inbound_bytes=self._limits.max_buffered_inbound_bytes,
            max_record_size=self._limits.max_record_size,
            telemetry=self.telemetry,
            semantics=semantics,
            # stock fires when_dilated/connect/listen through its eventual queue: so do we
            eventually=getattr(eventual_queue, "eventually", None),
        )
        self.telemetry.set_traffic_source(self._mux.traffic_stats)
        self._api = DilatedWormhole(self)
        self.telemetry.dilation_requested()
        self.events: ManagerEvents = manager_machine(self)

    # --- inputs from the Dilator / Boss ---

    def got_dilation_key(self, key: bytes) -> None:
        self._dilation_key = key
        self._maybe_start()

    def got_wormhole_versions(self, their_versions: dict[str, Any]) -> None:
        self._their_versions = their_versions
        self._version = choose_version(self._acceptable_versions, their_versions.get("can-dilate"))
        if self._version is None:
            # stock defect 8: never send 'please' without a shared version
            self._fail_dilation(OldPeerCannotDilateError())
            return
        self._maybe_start()

    def _fail_dilation(self, error: Exception) -> None:
        self._mux.fail_dilation(Failure(error))  # type: ignore[no-untyped-call]

    def _maybe_start(self) -> None:
        if not self._started and self._dilation_key is not None and self._version is not None:
            self._started = True
            self.events.start()

    def _wormhole_status(self, wormhole_status: WormholeStatus) -> None:
        """The mailbox status changed (called by stock's Boss)."""
        self._absence.mailbox_connected(_mailbox_up(wormhole_status))
        self._set_status(mailbox=wormhole_status)

    def received_dilation_message(self, plaintext: bytes) -> None:
        """One DILATE-n body, in order. Malformed messages are logged and ignored."""
        try:
            message = parse_dilation_message(plaintext)
        except MalformedDilationMessage as e:
            _log.warn("ignoring dilation message: {why}", why=str(e))
            return
        if isinstance(message, Please):
            if message.use_version is not None and (
                message.use_version not in self._acceptable_versions
            ):
                _log.warn(
                    "peer wants dilation version {v!r} we do not speak", v=message.use_version
                )
                self._fail_dilation(OldPeerCannotDilateError())
                return
            if not self._peer_extensions:
                self._peer_extensions = message.extensions
            self.telemetry.please_received()
            self.telemetry.set_pair(self._my_side, message.side)
            self.events.rx_please(message.side)
        elif isinstance(message, ConnectionHints):
            for problem in message.problems:
                _log.warn("ignoring hint: {problem}", problem=problem)
            self.telemetry.hints_received(message.type_counts)
            self.events.rx_hints(message.hints)
        elif isinstance(message, Reconnect):
            if self._role is FOLLOWER:
                self.events.rx_reconnect()
            else:
                _log.warn("ignoring 'reconnect': only a Leader may send it to a Follower")
        elif isinstance(message, Reconnecting):
            if self._role is LEADER:
                self._reconnectings += 1
                self.events.rx_reconnecting()
            else:
                _log.warn("ignoring 'reconnecting': only a Follower may send it to a Leader")
        elif isinstance(message, Closing):
            _log.info("the peer is closing its wormhole")
            self.events.rx_closing()
        else:
            self._peer_lost_link(message.generation)
        self._absence.heard_from_peer()

    def _peer_lost_link(self, generation: int) -> None:
        """The Follower's liveness check gave up the connection of ``generation``."""
        connection = self._connection
        if self._role is not LEADER:
            _log.warn("ignoring 'link-lost': only a Follower may send it to a Leader")
        elif generation != self._reconnectings:
            _log.info("ignoring 'link-lost' for generation {g}", g=generation)
        elif connection is not None:
            connection.fail("the Follower reports this connection dead")

    def announce_closing(self) -> None:
        """Our application is closing the wormhole (called before our mailbox closes): tell a
        peer that understands it, so it stops reconnecting. Once at most."""
        if (
            self._started
            and not self._closing_announced
            and not self._is_stopped
            and CLOSING in self._peer_extensions
        ):
            self._closing_announced = True
            self._send_dilation_message(type="closing")

    def stop(self) -> None:
        """The wormhole is closing (idempotent)."""
        self.events.stop()

    def when_stopped(self) -> Deferred[None]:
        d: Deferred[None] = Deferred()
        if self._is_stopped:
            d.callback(None)
        else:
            self._stopped_waiters.append(d)
        return d

    # --- outgoing mailbox messages ---

    def _send_dilation_message(self, **fields: Any) -> None:
        if fields["type"] == "reconnecting":
            self._reconnectings += 1
            self.telemetry.reconnecting()
        elif fields["type"] == "reconnect":
            self.telemetry.reconnect()
        phase = f"dilate-{self._next_phase}"
        self._next_phase += 1
        try:
            self._S.send(phase, json.dumps(fields).encode("utf-8"))
        except Exception:
            # stock's mailbox machine refuses sends while the wormhole is closing; the message
            # cannot matter any more then, and must not become an unhandled error
            _log.failure("could not send {phase} (wormhole closing?)", phase=phase)

    # --- connector owner ---

    @property
    def record_sink(self) -> IRecordSink:
        return self

    def send_hints(self, hints: list[dict[str, Any]]) -> None:
        self.telemetry.hints_sent(hint_type_counts(hints))
        self._send_dilation_message(type="connection-hints", hints=hints)

    def hint_status(self, hints: list[DilationHint]) -> None:
        self._hints_seen.update(hints)
        self._set_status(hints=set(self._hints_seen))

    # kept for stock's Connector-facing name
    _hint_status = hint_status

    def connector_connection_made(self, connection: DilatedConnectionProtocol) -> None:
        connector = self._connector
        self.telemetry.connection_selected(
            "direct-tcp-v1" if connection.is_direct else "relay-v1",
            via_relay=not connection.is_direct,
            candidates=connector.candidates if connector is not None else 1,
        )
        if self._traffic_interval is not None and not self.telemetry.periodic_traffic:
            self.telemetry.start_periodic_traffic(self._traffic_interval)
        self.events.connection_made(connection)

    def _start_connector(self) -> None:
        assert self._role is not None and self._dilation_key is not None
        self._generation += 1
        self.telemetry.set_role(self._role)
        self.telemetry.set_generation(self._generation)
        settings = ConnectorSettings(
            role=self._role,
            dilation_key=self._dilation_key,
            side=self._my_side,
            relay_hints=self._relay_hints,
            no_listen=self._no_listen,
            tor=self._tor,
            network=self._network,
            max_record_size=self._limits.max_record_size,
            handshake_timeout=self._limits.handshake_timeout,
        )
        self._connector = Connector(
            settings,
            owner=self,
            reactor=self._reactor,
            telemetry=self.telemetry,
            eventually=getattr(self._eventual_queue, "eventually", None),
        )
        if self._role is LEADER:
            self._watch_generation(self._stall_delay)
        stall = self._debug_stall_connector
        if callable(stall):
            stall(self._connector)
        else:
            self._connector.start()

    def _answer_reconnect(self) -> None:
        """Follower: drop this generation's attempts, answer one 'reconnecting', start anew."""
        self._stop_connector()
        self._send_dilation_message(type="reconnecting")
        self._start_connector()

    def _stop_connector(self) -> None:
        self._cancel_stall_timer()
        if self._connector is not None:
            self._connector.events.stop()
            self._connector = None

    def _watch_generation(self, delay: float) -> None:
        self._cancel_stall_timer()
        self._stall_timer = self._reactor.callLater(delay, self._check_generation)

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None and self._stall_timer.active():
            self._stall_timer.cancel()
        self._stall_timer = None

    def _check_generation(self) -> None:
        """(Leader) the generation has not connected yet: wait on while something is in
        flight, else give it up and start another, waiting twice as long next time."""
        self._stall_timer = None
        connector = self._connector
        if connector is None or connector.selected is not None:
            return
        if connector.busy:
            self._watch_generation(self._stall_delay)
            return
        _log.info(
            "generation {g} has nothing left in flight after {s:g}s: starting another",
            g=self._generation,
            s=self._stall_delay,
        )
        self._stall_delay = min(2 * self._stall_delay, GENERATION_RETRY_MAX)
        self.events.generation_stalled()

    # --- IRecordSink (from the selected connection) ---

    def got_record(self, record: Record) -> None:
        if self._liveness is not None:
            self._liveness.received += 1
        t = type(record)
        if t is Data or t is Ack or t is Open or t is Close:
            self._mux.got_record(record)
        elif t is Ping:
            assert isinstance(record, Ping)
            if self._connection is not None and self._mux.may_send_pong():
                self._connection.send_record(Pong(record.ping_id))
        elif t is Pong:
            assert isinstance(record, Pong)
            self._got_pong(record.ping_id)
        else:
            _log.warn("unexpected record {r!r}", r=record)

    def connection_lost(self, connection: IDilatedConnection, reason: str) -> None:
        if connection is not self._connection:
            return
        _log.info(
            "dilated connection {desc} lost: {reason}", desc=connection.description, reason=reason
        )
        self._connection = None
        self.telemetry.connection_lost(_lost_reason(reason))
        self._stop_liveness()
        self._mux.connection_lost()
        self._absence.waiting_for_peer(True)
        self.events.connection_lost()

    # --- keepalive ---

    def _start_liveness(self, connection: DilatedConnectionProtocol) -> None:
        self._stop_liveness()
        self._liveness = Liveness(
            self._reactor,
            self._ping_interval,
            send_ping=lambda: self._send_ping(connection),
            on_silent=lambda: self._silent(connection),
            reading_paused=lambda: connection.reading_paused,
        )

    def _stop_liveness(self) -> None:
        if self._liveness is not None:
            self._liveness.stop()
        self._liveness = None

    def _silent(self, connection: DilatedConnectionProtocol) -> None:
        """Liveness gave the connection up: drop it; a Follower tells the Leader at once."""
        self._liveness = None
        _log.info(
            "nothing heard on {desc} for 1.5 ping intervals ({s:.3g}s): abandoning it",
            desc=connection.description,
            s=1.5 * self._ping_interval,
        )
        connection.fail("peer silent for 1.5 ping intervals")

    def _report_link_lost(self) -> None:
        """(Follower) our selected connection is gone: tell a Leader that understands it.

        The Leader may never see this connection end by itself: the real transit relay does
        not close the surviving side when the other side dies while the relay has it paused
        (a Twisted ``loseConnection`` with a paused streaming producer never completes), and
        a Leader whose reading is paused (a slow application) sees no end of stream on any
        path. Without this the Leader would only leave the dead link by its liveness check
        (1.5 ping intervals of silence, not counted while its reading is paused)."""
        if LINK_LOST in self._peer_extensions:
            self._send_dilation_message(type="link-lost", generation=self._reconnectings)

    def _send_ping(self, connection: DilatedConnectionProtocol) -> None:
        ping_id = (self._next_ping_id % 2**32).to_bytes(4, "big")
        self._next_ping_id += 1
        self._pings_sent.append((ping_id, self._reactor.seconds()))
        connection.send_record(Ping(ping_id))

    def send_ping(self, ping_id: bytes, on_pong: Callable[[float], object] | None = None) -> None:
        """Stock's API (fowl's ``ping`` command calls it): send a PING carrying ``ping_id`` on
        the current connection, if there is one, and call ``on_pong(rtt)`` (RTT in seconds, a
        float) when its PONG arrives. Without a connection nothing is sent and the ping stays
        outstanding, as in stock. An exception raised by ``on_pong`` is logged.

        :param ping_id: 4 bytes.
        :raises TypeError: when ``ping_id`` is not bytes (as stock, whose record encoding
            fails the same way: fowld passes an int, and stock reports that error to it).
        :raises ValueError: when ``ping_id`` is not 4 bytes long.
        :raises AssertionError: when ``ping_id`` still waits for its PONG (as stock).
        """
        if not isinstance(ping_id, bytes):
            raise TypeError(f"can't concat {type(ping_id).__name__} to bytes")
        if len(ping_id) != 4:
            raise ValueError(f"ping_id must be 4 bytes, not {len(ping_id)}")
        if ping_id in self._app_pings:
            raise AssertionError("Duplicate ping_id")
        self._app_pings[ping_id] = (on_pong, self._reactor.seconds())
        if self._connection is not None:
            self._connection.send_record(Ping(ping_id))

    def _got_pong(self, ping_id: bytes) -> None:
        now = self._reactor.seconds()
        app_ping = self._app_pings.pop(ping_id, None)
        if app_ping is not None:
            on_pong, sent_at = app_ping
            if on_pong is not None:
                try:
                    on_pong(now - sent_at)
                except Exception:
                    _log.failure("the on_pong callback given to send_ping() raised")
        for sent_id, sent_at in self._pings_sent:
            if sent_id == ping_id:
                self.last_rtt = now - sent_at
                self.telemetry.ping_rtt(self.last_rtt)
                break
        if isinstance(self._status.peer_connection, ConnectedPeer):
            pc = self._status.peer_connection
            self._set_status(
                peer_connection=ConnectedPeer(
                    pc.connected_at, now + 2 * self._ping_interval, pc.hint_description
                )
            )

    # --- status ---

    def _set_status(self, **changes: Any) -> None:
        current = self._status
        if isinstance(current.peer_connection, StoppedPeer) and "peer_connection" in changes:
            changes.pop("peer_connection")
        fields = {
            "mailbox": current.mailbox,
            "generation": current.generation,
            "peer_connection": current.peer_connection,
            "hints": current.hints,
        }
        fields.update(changes)
        fields["generation"] = max(fields["generation"], current.generation)
        self._status = DilationStatus(**fields)
        if self._status_update is not None:
            try:
                self._status_update(self._status)
            except Exception:
                _log.failure("on_status_update callback raised")

    def _peer(self, peer: PeerConnection) -> None:
        self._set_status(peer_connection=peer, generation=self._generation)

    # --- teardown ---

    def _drain_then_close(self) -> None:
        """Poll until the peer acknowledged everything (or the deadline), then disconnect."""
        self._close_timer = None
        connection = self._connection
        if connection is None:
            self.events.connection_lost()
            return
        now = self._reactor.seconds()
        if self._mux.unacknowledged_records and now < self._close_deadline:
            self._close_timer = self._reactor.callLater(0.02, self._drain_then_close)
            return
        connection.disconnect()
        self._close_timer = self._reactor.callLater(
            max(0.0, self._close_deadline - now) + 1.0, connection.abort
        )

    def _peer_absent(self) -> None:
        _log.info(
            "no sign of the peer for {s:g}s: presuming it gone", s=self._policy.peer_timeout or 0
        )
        self.events.peer_absent()

    def _finish_stopping(self) -> None:
        self.telemetry.session_ended("closed")
        self._absence.stop()
        if self._close_timer is not None and self._close_timer.active():
            self._close_timer.cancel()
        self._close_timer = None
        self._is_stopped = True
        self._set_status(peer_connection=StoppedPeer())
        waiters, self._stopped_waiters = self._stopped_waiters, []
        for d in waiters:
            d.callback(None)


def _lost_reason(reason: str) -> str:
    """Map a connection-loss message onto the telemetry vocabulary (no free text leaves)."""
    if "silent" in reason or "not selected within" in reason:
        return "timeout"
    if "Error" in reason and "Connection" not in reason:
        return "protocol_error"
    if "cleanly" in reason:
        return "closed"
    return "network_error"


def _build_manager_machine() -> Callable[[Manager], ManagerEvents]:
    b = TypeMachineBuilder(ManagerEvents, Manager)
    waiting = b.state("waiting")
    wanting = b.state("wanting")
    connecting = b.state("connecting")
    connected = b.state("connected")
    disconnected = b.state("disconnected")
    abandoning = b.state("abandoning")
    stopping = b.state("stopping")
    stopped = b.state("stopped")
    peer_leaving = b.state("peer_leaving")
    peer_gone = b.state("peer_gone")
    E = ManagerEvents

    @waiting.upon(E.start).to(wanting)
    def send_please(events: ManagerEvents, m: Manager) -> None:
        m._send_dilation_message(**build_please(m._my_side, m._version))
        early, m._early_please = m._early_please, None
        hints, m._early_hints = m._early_hints, []
        if early is not None:
            events.rx_please(early)
            if hints:
                events.rx_hints(hints)

    @waiting.upon(E.rx_please).loop()
    def remember_please(events: ManagerEvents, m: Manager, side: str) -> None:
        m._early_please = side

    @waiting.upon(E.rx_hints).loop()
    def remember_hints(events: ManagerEvents, m: Manager, hints: list[Any]) -> None:
        # the peer's please came before we could start (it is remembered above); its hints
        # follow it and belong to the generation that please starts
        room = MAX_EARLY_HINTS - len(m._early_hints)
        m._early_hints.extend(hints[: max(0, room)])

    @wanting.upon(E.rx_please).to(connecting)
    def choose_role_and_connect(events: ManagerEvents, m: Manager, side: str) -> None:
        if side == m._my_side:
            _log.error("peer chose the same dilation side as ours; cannot pick a Leader")
            events.stop()
            return
        m._role = LEADER if m._my_side > side else FOLLOWER
        m._mux.set_role(m._role)
        m._absence.waiting_for_peer(True)
        m._start_connector()
        m._peer(ConnectingPeer(int(m._reactor.seconds())))

    @connecting.upon(E.rx_hints).loop()
    def use_hints(events: ManagerEvents, m: Manager, hints: list[Any]) -> None:
        if m._connector is not None:
            m._connector.got_hints(hints)

    @connecting.upon(E.connection_made).to(connected)
    def use_connection(
        events: ManagerEvents, m: Manager, connection: DilatedConnectionProtocol
    ) -> None:
        m._connector = None
        m._connection = connection
        # The status first: an application woken by when_dilated() sees ConnectedPeer.
        now = m._reactor.seconds()
        m._peer(ConnectedPeer(int(now), int(now + 2 * m._ping_interval), connection.description))
        first = not m._mux_dilated
        m._mux.connection_made(connection)
        if first:
            m._mux_dilated = True
            m._mux.dilated()
        m._absence.waiting_for_peer(False)
        m._cancel_stall_timer()
        m._stall_delay = GENERATION_RETRY
        m._start_liveness(connection)

    @connected.upon(E.connection_lost).to(disconnected)
    def lost(events: ManagerEvents, m: Manager) -> None:
        # The Leader asks for a new generation; the Follower waits to be asked (and tells a
        # txdilation Leader, which may not have noticed: see _report_link_lost).
        m._peer(ReconnectingPeer(int(m._reactor.seconds())))
        if m._role is LEADER:
            m._send_dilation_message(type="reconnect")
        else:
            m._report_link_lost()

    @connected.upon(E.rx_reconnect).to(abandoning)
    def abandon(events: ManagerEvents, m: Manager) -> None:
        if m._connection is not None:
            m._connection.abort()

    @disconnected.upon(E.rx_reconnecting).to(connecting)
    def leader_reconnects(events: ManagerEvents, m: Manager) -> None:
        m._start_connector()
        m._peer(ConnectingPeer(int(m._reactor.seconds())))

    @disconnected.upon(E.rx_reconnect).to(connecting)
    def follower_reconnects(events: ManagerEvents, m: Manager) -> None:
        m._answer_reconnect()
        m._peer(ConnectingPeer(int(m._reactor.seconds())))

    @abandoning.upon(E.connection_lost).to(connecting)
    def follower_reconnects_after_abandon(events: ManagerEvents, m: Manager) -> None:
        m._peer(ReconnectingPeer(int(m._reactor.seconds())))
        m._answer_reconnect()
        m._peer(ConnectingPeer(int(m._reactor.seconds())))

    @connecting.upon(E.generation_stalled).to(disconnected)
    def leader_restarts_generation(events: ManagerEvents, m: Manager) -> None:
        # As after a lost connection: the Follower answers 'reconnecting' (stock too, from
        # its CONNECTING state) and we ignore hints until then.
        m._stop_connector()
        m._send_dilation_message(type="reconnect")

    @connecting.upon(E.rx_reconnect).loop()
    def follower_restarts_generation(events: ManagerEvents, m: Manager) -> None:
        # The Leader lost a connection we never saw selected: start afresh, answering once.
        m._answer_reconnect()

    # --- stopping ---
    @waiting.upon(E.stop).to(stopped)
    @wanting.upon(E.stop).to(stopped)
    @disconnected.upon(E.stop).to(stopped)
    @connecting.upon(E.stop).to(stopped)
    def stop_now(events: ManagerEvents, m: Manager) -> None:
        m._stop_connector()
        m._mux.stop("wormhole closed")
        m._finish_stopping()

    @connected.upon(E.stop).to(stopping)
    @abandoning.upon(E.stop).to(stopping)
    @peer_leaving.upon(E.stop).to(stopping)
    def stop_connection(events: ManagerEvents, m: Manager) -> None:
        # Drain first: records already written (a final CLOSE, the last DATA) reach the peer
        # and are acknowledged before the link goes, within CLOSE_TIMEOUT.
        m._stop_connector()
        m._close_deadline = m._reactor.seconds() + CLOSE_TIMEOUT
        m._drain_then_close()

    @stopping.upon(E.connection_lost).to(stopped)
    def stopped_after_close(events: ManagerEvents, m: Manager) -> None:
        m._stop_liveness()
        m._mux.stop("wormhole closed")
        m._finish_stopping()

    @peer_gone.upon(E.stop).to(stopped)
    def stop_after_peer(events: ManagerEvents, m: Manager) -> None:
        m._finish_stopping()

    # --- the peer left (txdilation's 'closing', or silent for peer_timeout) ---
    @connected.upon(E.rx_closing).to(peer_leaving)
    @abandoning.upon(E.rx_closing).to(peer_leaving)
    def let_peer_finish(events: ManagerEvents, m: Manager) -> None:
        # The peer still drains its last records over this connection before it drops it;
        # when it does, we do not reconnect.
        m._absence.stop()

    @waiting.upon(E.rx_closing).to(peer_gone)
    @wanting.upon(E.rx_closing).to(peer_gone)
    @connecting.upon(E.rx_closing).to(peer_gone)
    @disconnected.upon(E.rx_closing).to(peer_gone)
    @peer_leaving.upon(E.connection_lost).to(peer_gone)
    @connecting.upon(E.peer_absent).to(peer_gone)
    @disconnected.upon(E.peer_absent).to(peer_gone)
    @abandoning.upon(E.peer_absent).to(peer_gone)
    def peer_left(events: ManagerEvents, m: Manager) -> None:
        m._stop_connector()
        m._stop_liveness()
        m._absence.stop()
        if m._connection is not None:
            m._connection.abort()
        m._peer(StoppedPeer())
        m._mux.stop("the peer closed the wormhole")

    # --- documented no-ops (logged where the peer could be at fault) ---
    def ignore(why: str | None) -> Callable[..., None]:
        def ignored(events: ManagerEvents, m: Manager, *args: object) -> None:
            if why:
                _log.info("ignoring {why}", why=why)

        return ignored

    def refuse_connection(
        events: ManagerEvents, m: Manager, connection: DilatedConnectionProtocol
    ) -> None:
        # a connection selected when no generation is connecting (never seen; defensive): it
        # must not stay open beside the current one, delivering records nobody expects
        _log.warn("aborting a connection selected outside a generation's connecting phase")
        connection.abort()

    handled = {
        (waiting, E.start),
        (waiting, E.rx_please),
        (wanting, E.rx_please),
        (waiting, E.rx_hints),
        (connecting, E.rx_hints),
        (connecting, E.connection_made),
        (connected, E.connection_lost),
        (connected, E.rx_reconnect),
        (disconnected, E.rx_reconnecting),
        (disconnected, E.rx_reconnect),
        (abandoning, E.connection_lost),
        (connecting, E.rx_reconnect),
        (waiting, E.stop),
        (wanting, E.stop),
        (disconnected, E.stop),
        (connecting, E.stop),
        (connected, E.stop),
        (abandoning, E.stop),
        (stopping, E.connection_lost),
        (peer_leaving, E.stop),
        (peer_gone, E.stop),
        (connected, E.rx_closing),
        (abandoning, E.rx_closing),
        (waiting, E.rx_closing),
        (wanting, E.rx_closing),
        (connecting, E.rx_closing),
        (disconnected, E.rx_closing),
        (peer_leaving, E.connection_lost),
        (connecting, E.peer_absent),
        (disconnected, E.peer_absent),
        (abandoning, E.peer_absent),
        (connecting, E.generation_stalled),
    }
    reasons = {
        E.start: None,
        E.rx_please: "a second 'please'",
        E.rx_hints: "hints outside a generation's connecting phase",
        E.rx_reconnect: "'reconnect' at this point",
        E.rx_reconnecting: "'reconnecting' at this point",
        E.connection_made: None,  # refused: the connection is aborted
        E.connection_lost: None,
        E.stop: None,
        E.rx_closing: "'closing' at this point",
        E.peer_absent: None,
        E.generation_stalled: None,
    }
    for state in (
        waiting,
        wanting,
        connecting,
        connected,
        disconnected,
        abandoning,
        stopping,
        stopped,
        peer_leaving,
        peer_gone,
    ):
        for event, why in reasons.items():
            if (state, event) in handled:
                continue
            if event is E.connection_made:
                state.upon(event).loop()(refuse_connection)
            else:
                state.upon(event).loop()(ignore(why))  # type: ignore[arg-type]
    return b.build()


manager_machine = _build_manager_machine()


def __getattr__(name: str) -> Any:
    # Stock's Boss imports ``Dilator`` from ``wormhole._dilation.manager`` (this module, once
    # txdilation is installed). It lives in txdilation.dilator, which imports this module.
    if name == "Dilator":
        from .dilator import Dilator

        return Dilator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
