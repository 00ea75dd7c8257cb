"""Status events: one JSON object per line, each with a ``kind`` and a ``ts``.

Layer: session observability. The schema (every kind and its fields) is in
``docs/status-events.md``; :data:`KINDS` lists the kinds. A :class:`StatusWriter` stamps each
event with ``ts`` (``clock.seconds()``, Unix time on a real reactor) and ``seq`` (0, 1, 2, ...
per writer), writes it as one line to its stream (flushed at once, so that a reader of a file or
a pipe sees every event as it happens and the last one survives a kill), and hands it to its
observers (e.g. the live status line of ``txdilation run``).

Invariants: one ``emit`` is one line; lines are written in ``seq`` order; an unknown ``kind`` is
a programming error (``ValueError``); a failing stream or observer is logged and never raises
into the session.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import IO, Any, Final

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from txdilation.wire.waiting import Waiters

__all__ = ["KINDS", "EventLog", "StatusEvent", "StatusWriter", "open_status_writer"]

KINDS: Final = frozenset(
    {
        "starting",  # appid, mailbox, listen/connect names
        "listening",  # name, address: a --listen endpoint is accepting local connections
        "mailbox",  # state (connecting|connected|disconnected|failed|closed), url
        "code",  # code
        "peer-connected",  # verifier (hex)
        "connecting",  # generation: a generation's connection attempts started
        "connection-selected",  # generation, path (direct|relay), hint
        "dilated",  # the first connection was selected: generation, path, hint
        "reconnecting",  # generation: the selected connection was lost
        "rtt",  # rtt_ms, generation
        "port-mapping",  # protocol (pcp|nat-pmp|upnp-igd|null), port, lifetime_s
        "link-cut",  # generation: the debug cut signal aborted the current connection
        "subchannel-opened",  # id, name, direction (outbound|inbound), local
        "subchannel-closed",  # id, name, bytes_to_peer, bytes_from_peer, duration_s, reason,
        # detail (a cut's cause in words)
        "error",  # message, where, fatal, advice
        "warning",  # message, advice: a setting that looks wrong (nothing stops)
        "paired",  # peer, path, generation: the code meeting wrote the pairing file
        "waiting",  # peer, generation, reason (started|peer-left): waiting for the paired peer
        "meeting",  # peer, generation: meeting the paired peer (a derived wormhole)
        "peer-restarted",  # peer: the paired peer came back as a new process
        "reconnected",  # peer, generation, restarted (peer|self), down_s | since_start_s
        "ratchet",  # peer, generation: the pairing's secret moved forward
        "stopping",  # reason (signal name, "stop", "shutdown" or "peer-closed"), open, grace_s
        "draining",  # open, remaining_s: the grace period's countdown
        "closed",  # reason (stopped|failed|peer-closed), mood, cut
    }
)
"""Every event ``kind`` a session writes."""

StatusEvent = dict[str, Any]
"""One event: ``{"kind": ..., "ts": ..., "seq": ..., <fields>}``."""

_log = Logger()


class StatusWriter:
    """Writes status events as JSON lines and tells observers.

    :param clock: gives ``ts``.
    :param stream: a text stream to write lines to, or ``None`` for none.
    :param close_stream: close ``stream`` in :meth:`close` (True for files we opened).
    """

    def __init__(
        self, clock: IReactorTime, stream: IO[str] | None = None, *, close_stream: bool = False
    ) -> None:
        self._clock = clock
        self._stream = stream
        self._close_stream = close_stream
        self._observers: list[Callable[[StatusEvent], object]] = []
        self._seq = 0

    def add_observer(self, observer: Callable[[StatusEvent], object]) -> None:
        """Call ``observer(event)`` for every later event."""
        self._observers.append(observer)

    def emit(self, kind: str, **fields: Any) -> StatusEvent:
        """Write one event; returns it (with ``kind``, ``ts`` and ``seq`` first).

        :raises ValueError: when ``kind`` is not one of :data:`KINDS`.
        """
        if kind not in KINDS:
            raise ValueError(f"unknown status event kind {kind!r}")
        event: StatusEvent = {"kind": kind, "ts": round(self._clock.seconds(), 6), "seq": self._seq}
        event.update(fields)
        self._seq += 1
        if self._stream is not None:
            try:
                self._stream.write(json.dumps(event, separators=(",", ":")) + "\n")
                self._stream.flush()
            except (OSError, ValueError) as e:
                _log.warn("cannot write status event: {err}", err=str(e))
                self._stream = None
        for observer in list(self._observers):
            try:
                observer(event)
            except Exception:
                _log.failure("status observer raised")
        return event

    def close(self) -> None:
        """Close the stream if this writer opened it; later events only reach observers."""
        stream, self._stream = self._stream, None
        if stream is not None and self._close_stream:
            stream.close()


def open_status_writer(clock: IReactorTime, path: str | None) -> StatusWriter:
    """A writer for ``--status PATH``: ``-`` is stdout, ``None`` writes nowhere; a file is
    opened for appending (line-buffered), so a restarted service keeps its history.

    :raises OSError: when the file cannot be opened.
    """
    if path is None:
        return StatusWriter(clock)
    if path == "-":
        return StatusWriter(clock, sys.stdout)
    stream = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (closed by close())
    return StatusWriter(clock, stream, close_stream=True)


class EventLog:
    """Keeps events (e.g. a writer's, as an observer, or a child process's) and lets a
    supervisor wait for one: :meth:`next_event` fires with the first event of a kind that
    matches, at once if it already came, and fails once :meth:`end` was called (no more
    events will come)."""

    def __init__(self) -> None:
        self.events: list[StatusEvent] = []
        self._next: Waiters[StatusEvent] = Waiters()
        self._ended: Exception | None = None

    def __call__(self, event: StatusEvent) -> None:
        """Add an event (the observer interface of :class:`StatusWriter`)."""
        self.events.append(event)
        self._next.fire(event)

    def of_kind(self, kind: str) -> list[StatusEvent]:
        """Every event of ``kind`` so far."""
        return [e for e in self.events if e["kind"] == kind]

    def next_event(
        self, kind: str, match: Callable[[StatusEvent], bool] = lambda e: True, *, after: int = 0
    ) -> Deferred[StatusEvent]:
        """The first event of ``kind`` among events number ``after`` and later for which
        ``match`` is true (cancellable while it waits)."""

        def wanted(event: StatusEvent) -> bool:
            return bool(event["kind"] == kind and match(event))

        for event in self.events[after:]:
            if wanted(event):
                return succeed(event)
        if self._ended is not None:
            return fail(self._ended)
        return Deferred.fromCoroutine(self._wait_for(wanted, after))

    async def _wait_for(self, wanted: Callable[[StatusEvent], bool], after: int) -> StatusEvent:
        while True:
            event = await self._next.wait()
            if len(self.events) > after and wanted(event):
                return event

    def end(self, error: Exception) -> None:
        """No more events will come (e.g. the process exited): errback everything waiting,
        and later waits for events that did not come, with ``error``."""
        self._ended = error
        self._next.fire(Failure(error))  # type: ignore[no-untyped-call]
