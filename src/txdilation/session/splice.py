"""A splice: one local stream connection and one subchannel joined both ways.

Layer: session forwarding (Twisted glue, no protocol logic). A :class:`Splice` owns
:class:`LocalEnd` (the local connection) and :class:`ChannelEnd` (the subchannel), both
``IHalfCloseableProtocol``; the end that exists first waits, paused, for :meth:`Splice.join`.

Invariants: flow control both ways (each transport the other's producer); half-close passes
through, after everything before it was written; the local connection closes once both its
directions are; bytes for a gone side are counted as dropped; a cut (:meth:`Splice.cut`, the
wormhole closing under it, ``peer-restarted``) is never passed on as a normal end: the local
connection is reset and no CLOSE sent; :attr:`Splice.ended` fires once, with final byte counts
and why. In full: docs/module-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IHalfCloseableProtocol, IReactorTime
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from zope.interface import implementer

from txdilation.pairing.pairing_errors import PeerRestarted

__all__ = ["ChannelEnd", "LocalEnd", "Splice"]


class Splice:
    """One forwarded connection (see the module docstring).

    :param ident: a number unique within the session (reported in status events).
    :param name: the subprotocol name.
    :param direction: ``outbound`` (a local connection we carry to the peer, ``--listen``) or
        ``inbound`` (a subchannel the peer opened, ``--connect``).
    :param clock: for ``duration_s``.
    :ivar bytes_to_peer: bytes read from the local connection and written to the subchannel.
    :ivar bytes_from_peer: bytes read from the subchannel and written to the local connection.
    :ivar dropped: bytes that arrived after the side they were for was gone.
    :ivar reason: why it ended (``closed`` when both sides closed normally, ``cut``).
    :ivar detail: for a cut, why, in words (e.g. ``the 30 s grace period ended``).
    :ivar refused: the peer closed the subchannel before sending anything, while ours was
        still open (it does not offer the name, or could not reach its service).
    :ivar reset: the local connection was reset, not closed (why, in words), or ``""``: the
        peer's side only gets an end of input (a subchannel has no reset), so it is reported.
    """

    def __init__(self, ident: int, name: str, direction: str, clock: IReactorTime) -> None:
        self.ident = ident
        self.name = name
        self.direction = direction
        self._clock = clock
        self.started = clock.seconds()
        self.local = LocalEnd(self)
        self.channel = ChannelEnd(self)
        self.bytes_to_peer = 0
        self.bytes_from_peer = 0
        self.dropped = 0
        self.reason = "closed"
        self.detail = ""
        self.refused = False
        self.reset = ""
        self.joined = False
        self.ended: Deferred[Splice] = Deferred()
        self.on_joined: Callable[[Splice], object] | None = None

    @property
    def duration(self) -> float:
        """Seconds since the splice was created."""
        return max(0.0, self._clock.seconds() - self.started)

    # --- life ---

    def end_made(self, end: _End) -> None:
        """An end connected: join once both have; otherwise pause the one that is waiting. An
        end that connects after the splice was abandoned is closed at once."""
        if self.ended.called:
            end.close()
        elif self.local.connected and self.channel.connected:
            self.join()
        elif self.local.connected:
            self.local.transport.pauseProducing()
        elif self.channel.connected:
            self.channel.transport.pauseProducing()

    def join(self) -> None:
        """Both ends are connected: resume them and register each as the other's producer."""
        if self.joined:
            return
        self.joined = True
        local, channel = self.local.transport, self.channel.transport
        local.resumeProducing()
        channel.resumeProducing()
        self.local.register_producer(channel)
        self.channel.register_producer(local)
        if self.on_joined is not None:
            self.on_joined(self)

    def abandon(self, reason: str) -> None:
        """The other end will never come (open or connect failed, or we are stopping): close
        the end that exists; the splice ends once it is gone."""
        self.reason = reason
        if self.local.connected:
            self.local.close()
        elif self.channel.connected:
            self.channel.close()
        else:
            self._maybe_end()

    def cut(self, detail: str, reason: str = "cut") -> None:
        """End now, as a cut (see the module docstring): reset the local connection, send the
        peer nothing more (no CLOSE), end the splice with ``reason``. Does nothing once it
        ended."""
        if self.ended.called:
            return
        self.reason, self.detail = reason, detail
        self.local.unregister_producer()
        self.channel.unregister_producer()
        self.local.abort()
        self.ended.callback(self)

    def _maybe_end(self) -> None:
        if self.ended.called:
            return
        local_done = self.local.lost or not self.local.connected
        channel_done = self.channel.lost or not self.channel.connected
        if local_done and channel_done:
            self.ended.callback(self)

    # --- data and closes, from the ends ---

    def to_peer(self, data: bytes) -> None:
        if self.channel.writable:
            self.bytes_to_peer += len(data)
            self.channel.transport.write(data)
        else:
            self.dropped += len(data)

    def from_peer(self, data: bytes) -> None:
        if self.local.writable:
            self.bytes_from_peer += len(data)
            self.local.transport.write(data)
        else:
            self.dropped += len(data)

    def local_input_ended(self) -> None:
        self.channel.close_write()

    def channel_input_ended(self) -> None:
        if self.bytes_from_peer == 0 and self.local.writable and not self.local.read_closed:
            self.refused = True  # the peer answered nothing while our client waits
        self.local.close_write()

    def local_gone(self, reason: Failure) -> None:
        if not self.ended.called:
            if not (self.local.read_closed or isinstance(reason.value, ConnectionDone)):
                self.reset = str(reason.value) or type(reason.value).__name__
            self.channel.close_write()
        self._maybe_end()

    def channel_gone(self, reason: Failure) -> None:
        if reason.check(PeerRestarted):  # type: ignore[no-untyped-call]
            # not a clean end: the paired peer's process that had the other end is gone
            self.cut("the paired peer restarted", reason="peer-restarted")
            return
        if not (self.channel.read_closed or self.channel.closed_by_us):
            self.cut("the wormhole closed under it: the peer stopped or left")
            return
        self.local.close()
        self._maybe_end()


class _End(Protocol):
    """What both ends share: connection state and closing the write side."""

    transport: Any

    def __init__(self, splice: Splice) -> None:
        self.splice = splice
        self.read_closed = False
        self.write_closed = False
        self.lost = False
        self._producer: Any = None

    @property
    def writable(self) -> bool:
        return bool(self.connected) and not self.lost and not self.write_closed

    def connectionMade(self) -> None:
        self.splice.end_made(self)

    def close(self) -> None:
        """Close this end (each end knows how)."""
        raise NotImplementedError

    def register_producer(self, producer: Any) -> None:
        """Let our transport pause ``producer`` (the other end's transport) when it is full."""
        if self.writable:
            self._producer = producer
            self.transport.registerProducer(producer, True)

    def unregister_producer(self) -> None:
        """Undo :meth:`register_producer` (once)."""
        if self._producer is not None:
            self._producer = None
            self.transport.unregisterProducer()

    def close_write(self) -> None:
        """Close our write side (after what is buffered), if it is still open."""
        if self.writable:
            self.write_closed = True
            self.unregister_producer()
            self.transport.loseWriteConnection()


@implementer(IHalfCloseableProtocol)
class LocalEnd(_End):
    """The protocol on the local connection (accepted by ``--listen`` or made by ``--connect``)."""

    def dataReceived(self, data: bytes) -> None:
        self.splice.to_peer(data)

    def readConnectionLost(self) -> None:
        self.read_closed = True
        self.splice.local_input_ended()
        self._close_if_done()

    def writeConnectionLost(self) -> None:
        self.write_closed = True
        self._close_if_done()

    def _close_if_done(self) -> None:
        if self.read_closed and self.write_closed and not self.lost:
            self.transport.loseConnection()

    def close(self) -> None:
        """Close the connection (what is buffered is still written)."""
        if self.connected and not self.lost:
            self.write_closed = True
            self.unregister_producer()
            self.transport.loseConnection()

    def abort(self) -> None:
        """Reset the connection (what is buffered is dropped: the other end reads an error)."""
        if self.connected and not self.lost:
            self.write_closed = True
            self.unregister_producer()
            self.transport.abortConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.lost = True
        self.splice.local_gone(reason)


@implementer(IHalfCloseableProtocol)
class ChannelEnd(_End):
    """The protocol on the subchannel."""

    def dataReceived(self, data: bytes) -> None:
        self.splice.from_peer(data)

    def readConnectionLost(self) -> None:
        self.read_closed = True
        self.splice.channel_input_ended()

    def writeConnectionLost(self) -> None:
        self.write_closed = True

    closed_by_us = False

    def close(self) -> None:
        """Stop taking the peer's data and close our write side (the peer's CLOSE finishes
        the subchannel)."""
        if self.connected and not self.lost:
            self.closed_by_us = True
            self.close_write()
            self.transport.stopProducing()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.lost = True
        self.splice.channel_gone(reason)
