"""Where telemetry records go besides the log: a JSON-lines file (one shared writer per path and
process), and back out of the log (``record_from_log_event``); the lazy ``key=value`` text of a
record's log line.

Invariants: one line per record, flushed after each; a closed writer drops records; a log line's
fields are formatted only if an observer renders the event.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import IO, Any, Final

from txdilation.telemetry.vocabulary import NAMESPACE, Record


class JsonLinesWriter:
    """Appends records to one file as JSON lines, flushing after each line.

    Use :func:`writer_for` to share one writer per path within a process.
    """

    def __init__(self, path: str) -> None:
        """Open ``path`` for appending (created if missing).

        :raises OSError: the file cannot be opened.
        """
        self.path = path
        self._file: IO[str] | None = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def __call__(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line; a closed writer drops it."""
        line = json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        """Close the file; later records are dropped."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


_writers: dict[str, JsonLinesWriter] = {}
_writers_lock = threading.Lock()


def writer_for(path: str) -> JsonLinesWriter:
    """Return the process-wide writer appending to ``path`` (opened on first use).

    :raises OSError: the file cannot be opened.
    """
    key = os.path.abspath(path)
    with _writers_lock:
        writer = _writers.get(key)
        if writer is None or writer._file is None:
            writer = _writers[key] = JsonLinesWriter(key)
        return writer


class LogFields:
    """A record's fields as ``key=value`` words for a log line (formatted only if a log
    observer renders the event: nothing is paid for when nobody reads debug lines)."""

    __slots__ = ("_record",)
    _SKIP: Final = frozenset({"schema", "ts", "seq", "event", "session"})

    def __init__(self, record: Record) -> None:
        self._record = record

    def __str__(self) -> str:
        fields = self._record.items()
        return "".join(f" {k}={v}" for k, v in fields if k not in self._SKIP and v is not None)


def record_from_log_event(event: Mapping[str, Any]) -> Record | None:
    """Return the telemetry record carried by a ``twisted.logger`` event, or None.

    For observers of the global log that want the records (e.g. a ``--events`` option).
    """
    if event.get("log_namespace") != NAMESPACE:
        return None
    record = event.get("telemetry")
    return dict(record) if isinstance(record, Mapping) else None


__all__ = ["JsonLinesWriter", "LogFields", "record_from_log_event", "writer_for"]
