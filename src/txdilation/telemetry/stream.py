"""Telemetry's record stream: each record's envelope (schema, time, sequence number, session,
role, generation, pair), the context later records carry, and where every record goes (the
log, the JSON-lines file, the caller's sink). :class:`~txdilation.telemetry.recorder.Telemetry`
builds its events' fields on it (``txdilation.telemetry`` states the schema's rules).

Invariants: ``seq`` counts the records of one session from 0 without gaps; a field whose value
is None is left out; the sides of the pair are never kept (only their ``pair_id``); time comes
from the ``IReactorTime`` passed in (``ts`` is ``clock.seconds()``).
"""

from __future__ import annotations

import secrets

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from txdilation.telemetry.sinks import LogFields, writer_for
from txdilation.telemetry.vocabulary import (
    NAMESPACE,
    SCHEMA,
    SESSION_ID,
    Record,
    Sink,
    as_count,
    pair_id,
)
from txdilation.wire.roles import Role

__all__ = ["RecordStream"]


class RecordStream:
    """One session's records, their envelope and their destinations (see the module
    docstring)."""

    def __init__(
        self,
        clock: IReactorTime,
        *,
        session_id: str | None = None,
        sink: Sink | None = None,
        events_path: str | None = None,
        log: Logger | None = None,
        log_records: bool = True,
    ) -> None:
        """
        :param clock: where ``ts`` and computed durations come from.
        :param session_id: 16-64 lowercase hex digits; random when None.
        :param sink: extra callable receiving every record (after the log and the file).
        :param events_path: a file to append every record to as a JSON line (shared per path).
        :param log: the ``twisted.logger.Logger`` to emit on (namespace ``txdilation.telemetry``
            by default).
        :param log_records: emit each record on ``log`` (at debug); False: only the file and
            the sink get them.
        :raises ValueError: ``session_id`` is not 16-64 lowercase hex digits.
        :raises OSError: ``events_path`` cannot be opened.
        """
        if session_id is None:
            session_id = secrets.token_hex(8)
        if not SESSION_ID.fullmatch(session_id):
            raise ValueError("session_id must be 16-64 lowercase hex digits")
        self.session_id = session_id
        self._clock = clock
        self._log = log if log is not None else Logger(namespace=NAMESPACE)
        self._log_records = log_records
        file_sink = writer_for(events_path) if events_path else None
        self._sinks = [s for s in (file_sink, sink) if s is not None]
        self._seq = 0
        self._role: str | None = None
        self._generation: int | None = None
        self._pair: str | None = None
        self._begin()

    def _begin(self) -> None:
        """Set up a subclass's own state, last in ``__init__`` (so that subclasses do not
        repeat its parameters to forward them)."""

    def set_role(self, role: Role | str) -> None:
        """Record our role on later records.

        :param role: ``Role.LEADER``/``Role.FOLLOWER`` or their names in any case.
        :raises ValueError: ``role`` is neither (a programming error).
        """
        name = (role.value if isinstance(role, Role) else str(role)).lower()
        if name not in ("leader", "follower"):
            raise ValueError(f"unknown role {role!r}")
        self._role = name

    def set_generation(self, generation: int) -> None:
        """Record the current connection generation on later records."""
        self._generation = as_count(generation)

    def set_pair(self, my_side: str, their_side: str) -> None:
        """Derive and record the pair id from both mailbox sides (the sides are not kept)."""
        self._pair = pair_id(my_side, their_side)

    @property
    def pair(self) -> str | None:
        """The pair id, once :meth:`set_pair` was called."""
        return self._pair

    @property
    def generation(self) -> int | None:
        """The generation later records carry, once :meth:`set_generation` was called."""
        return self._generation

    def _emit(self, event: str, fields: Record, generation: int | None = None) -> None:
        if generation is None:
            generation = self._generation
        record: Record = {
            "schema": SCHEMA,
            "ts": self._clock.seconds(),
            "seq": self._seq,
            "event": event,
            "session": self.session_id,
            "role": self._role,
        }
        if generation is not None:
            record["generation"] = generation
        if self._pair is not None:
            record["pair"] = self._pair
        record.update({k: v for k, v in fields.items() if v is not None})
        self._seq += 1
        if self._log_records:
            self._log.debug(
                "telemetry {telemetry[event]}{telemetry_fields}",
                telemetry=record,
                telemetry_fields=LogFields(record),
            )
        for sink in self._sinks:
            sink(record)
