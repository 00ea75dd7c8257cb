"""The forwarded services of one session: ``--listen`` ports, ``--connect`` handlers, splices.

Layer: session forwarding (Twisted glue). A :class:`Forwarder` listens on every ``--listen``
port at once (connections wait, paused, for dilation) and splices each to a new subchannel;
splices each subchannel the peer opens for a ``--connect`` name to its endpoint; reports
``listening``, ``subchannel-opened``, ``subchannel-closed``, ``error`` and ``warning`` events
and byte totals; and stops accepting (:meth:`stop_accepting`), tells when idle
(:meth:`when_idle`) and cuts the rest (:meth:`cut_all`, see :mod:`.splice`).

Invariants: every splice ends in exactly one ``subchannel-closed`` event (after its
``subchannel-opened`` when a subchannel was opened; a cut one with ``reason`` ``cut`` and a
``detail`` in words, and counted in :attr:`Forwarder.cut`); totals never decrease; a failure to
open or connect one forwarded connection never stops the session (it is an ``error`` event).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import count
from typing import Any

from twisted.internet.defer import Deferred, DeferredList, succeed
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.reporting.status_events import StatusWriter
from txdilation.session.forwarding_specs import (
    ForwardSpec,
    client_endpoint,
    describe_address,
    server_endpoint,
)
from txdilation.session.splice import Splice
from txdilation.wire.waiting import Waiters

__all__ = ["Forwarder"]

_log = Logger()


_BOILERPLATE = ("An error occurred while connecting: ", "Connection was refused by other side: ")


def _describe_failure(f: Failure) -> str:
    """The failure in words: the error's own message, without Twisted's boilerplate."""
    text = str(f.value).strip()
    for boilerplate in (
        "An error occurred while connecting: ",
        "Connection was refused by other side: ",
    ):
        text = text.removeprefix(boilerplate)
    return text.rstrip(".") or (f.type.__name__ if f.type is not None else "unknown error")


class _Prebuilt(Factory):
    """A factory for exactly one already-built protocol (a splice's end)."""

    noisy = False  # no "Starting/Stopping factory" line per forwarded connection

    def __init__(self, protocol: Protocol) -> None:
        self._protocol = protocol

    def buildProtocol(self, addr: object) -> Protocol:
        return self._protocol


class _LocalListenFactory(Factory):
    """``--listen``: each accepted local connection becomes an outbound splice."""

    noisy = False  # no "Starting/Stopping factory" line per forwarded connection

    def __init__(self, forwarder: Forwarder, spec: ForwardSpec) -> None:
        self._forwarder = forwarder
        self._spec = spec

    def buildProtocol(self, addr: object) -> Protocol | None:
        return self._forwarder._accept_local(self._spec, addr)


class _ChannelListenFactory(Factory):
    """``--connect``: each subchannel the peer opens becomes an inbound splice."""

    noisy = False  # no "Starting/Stopping factory" line per forwarded connection

    def __init__(self, forwarder: Forwarder, spec: ForwardSpec) -> None:
        self._forwarder = forwarder
        self._spec = spec

    def buildProtocol(self, addr: object) -> Protocol | None:
        return self._forwarder._accept_channel(self._spec)


class Forwarder:
    """See the module docstring.

    :param reactor: for the local endpoints and timestamps.
    :param listen: the ``--listen`` specs.
    :param connect: the ``--connect`` specs.
    :param writer: where status events go.
    """

    def __init__(
        self,
        reactor: Any,
        listen: Iterable[ForwardSpec],
        connect: Iterable[ForwardSpec],
        writer: StatusWriter,
    ) -> None:
        self._reactor = reactor
        self._listen = tuple(listen)
        self._connect = tuple(connect)
        self._writer = writer
        self._ports: list[IListeningPort] = []
        self._dilated: Any = None
        self._ids = count(1)
        self._live: set[Splice] = set()
        self._idle_waiters: Waiters[None] = Waiters()
        self.accepting = True
        self.finished_to_peer = 0
        self.finished_from_peer = 0
        self.opened = 0
        self.cut = 0

    # --- totals ---

    @property
    def live(self) -> int:
        """Forwarded connections not yet ended."""
        return len(self._live)

    @property
    def bytes_to_peer(self) -> int:
        """Bytes carried from local connections to the peer so far."""
        return self.finished_to_peer + sum(s.bytes_to_peer for s in self._live)

    @property
    def bytes_from_peer(self) -> int:
        """Bytes carried from the peer to local connections so far."""
        return self.finished_from_peer + sum(s.bytes_from_peer for s in self._live)

    # --- setup ---

    async def start_listening(self) -> None:
        """Listen on every ``--listen`` endpoint; emits ``listening`` for each. Call after
        :meth:`attach` (connections accepted before it are refused).

        :raises Exception: whatever the endpoint raises when it cannot listen (the ports
            already opened stay open until :meth:`stop_accepting`).
        """
        for spec in self._listen:
            port: IListeningPort = await server_endpoint(self._reactor, spec).listen(
                _LocalListenFactory(self, spec)
            )
            self._ports.append(port)
            self._writer.emit("listening", name=spec.name, address=describe_address(port.getHost()))

    def attach(self, dilated: Any) -> Deferred[Any]:
        """Use ``dilated`` (what ``w.dilate()`` returned): listen for the ``--connect`` names.

        :returns: a Deferred that fires once every name is registered (after dilation).
        """
        self._dilated = dilated
        waits = [
            dilated.listener_for(spec.name).listen(_ChannelListenFactory(self, spec))
            for spec in self._connect
        ]
        return DeferredList(waits, fireOnOneErrback=True, consumeErrors=True)

    # --- stopping ---

    def stop_accepting(self) -> Deferred[Any]:
        """Close the local ports and refuse the peer's new subchannels (idempotent)."""
        self.accepting = False
        ports, self._ports = self._ports, []
        return DeferredList([Deferred.fromCoroutine(_stop(p)) for p in ports], consumeErrors=True)

    def when_idle(self) -> Deferred[None]:
        """Fires once no forwarded connection is left (at once if none is)."""
        if not self._live:
            return succeed(None)
        return self._idle_waiters.wait()

    def cut_all(self, detail: str) -> None:
        """Cut every forwarded connection now (see :meth:`.splice.Splice.cut`); ``detail``
        says why, in words."""
        for splice in list(self._live):
            splice.cut(detail)

    # --- splices ---

    def _new_splice(self, spec: ForwardSpec, direction: str) -> Splice:
        splice = Splice(next(self._ids), spec.name, direction, self._reactor)
        self._live.add(splice)
        splice.ended.addCallback(self._ended)
        return splice

    def _opened(self, splice: Splice, **fields: Any) -> None:
        self.opened += 1
        self._writer.emit(
            "subchannel-opened",
            id=splice.ident,
            name=splice.name,
            direction=splice.direction,
            **fields,
        )

    def _accept_local(self, spec: ForwardSpec, addr: object) -> Protocol | None:
        if not self.accepting or self._dilated is None:
            return None
        splice = self._new_splice(spec, "outbound")
        local = describe_address(addr)
        d = self._dilated.connector_for(spec.name).connect(_Prebuilt(splice.channel))

        def opened(_: object) -> None:
            self._opened(splice, local=local)

        def failed(f: Failure) -> None:
            self._error(f"cannot open a subchannel for {spec.name}: {_describe_failure(f)}")
            splice.abandon("open-failed")

        d.addCallbacks(opened, failed)
        return splice.local

    def _accept_channel(self, spec: ForwardSpec) -> Protocol | None:
        if not self.accepting:
            _log.info("refusing a {name} subchannel: stopping", name=spec.name)
            return None
        splice = self._new_splice(spec, "inbound")
        self._opened(splice, local=spec.endpoint)
        d = client_endpoint(self._reactor, spec).connect(_Prebuilt(splice.local))

        def failed(f: Failure) -> None:
            self._error(
                f"{spec.name} #{splice.ident} (opened by the peer): cannot connect to "
                f"{spec.endpoint}: {_describe_failure(f)}",
                advice=f"is the service at {spec.endpoint} running? The peer's connection is "
                "closed at once",
            )
            splice.abandon("connect-failed")

        d.addErrback(failed)
        return splice.channel

    def _ended(self, splice: Splice) -> None:
        self._live.discard(splice)
        self.finished_to_peer += splice.bytes_to_peer
        self.finished_from_peer += splice.bytes_from_peer
        fields: dict[str, Any] = {}
        if splice.dropped:
            fields["dropped"] = splice.dropped
        if splice.reason == "cut":
            self.cut += 1
            fields["detail"] = splice.detail
        if splice.reset and splice.reason != "cut":
            side = "local client" if splice.direction == "outbound" else "service"
            self._writer.emit(
                "warning",
                message=f"{splice.name} #{splice.ident}: the {side} reset the connection "
                f"({splice.reset}) after {splice.bytes_to_peer} bytes to the peer",
                advice="the peer's side could only be given an end of input: a subchannel "
                "cannot carry a reset",
            )
        if splice.refused and splice.direction == "outbound":
            self._writer.emit(
                "warning",
                message=f"{splice.name} #{splice.ident}: the peer closed the subchannel at once, "
                "without sending anything",
                advice=f"the peer may not offer {splice.name!r} (its --connect), or could not "
                "reach the service it forwards to: its log says which",
            )
        self._writer.emit(
            "subchannel-closed",
            id=splice.ident,
            name=splice.name,
            bytes_to_peer=splice.bytes_to_peer,
            bytes_from_peer=splice.bytes_from_peer,
            duration_s=round(splice.duration, 3),
            reason=splice.reason,
            **fields,
        )
        if not self._live:
            self._idle_waiters.fire(None)

    def _error(self, message: str, advice: str = "") -> None:
        self._writer.emit("error", message=message, where="forwarding", fatal=False, advice=advice)


async def _stop(port: IListeningPort) -> None:
    stopped = port.stopListening()
    if stopped is not None:
        await stopped
