"""Log observers for txdilation processes: filtered by level, quiet, journal- or JSON-ready.

Layer: process edge (``twisted.logger`` observers; library code never imports this module, it
only logs). Three ``twistd --logger`` factories: :func:`text_logger` (twistd's format),
:func:`journal_logger` (syslog priority prefixes for journald, no timestamps) and
:func:`json_logger` (one object per line); they write to ``TXDILATION_LOG_FILE`` or stdout, at
the level of :func:`configure`, else ``TXDILATION_LOG_LEVEL``, else ``info``.
:func:`twistd_observer` is ``twistd dilation``'s default. Formats: docs/plugin.md,
docs/module-notes.md.

Invariants: an event below the level is dropped before it is formatted; Twisted's chatter
(``Starting factory``/``Stopping factory``, ``... starting on PORT``, ``(TCP Port N Closed)``)
counts as debug whatever level it was logged at; a failing output never raises into the
logging system (Twisted removes an observer that raises).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping
from typing import IO, Any, Final

from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LogEvent,
    LogLevel,
    PredicateResult,
    formatEvent,
    textFileLogObserver,
)
from twisted.python.logfile import LogFile
from zope.interface import implementer

__all__ = [
    "ENV_FILE",
    "ENV_LEVEL",
    "LEVELS",
    "configure",
    "current_level",
    "filtered",
    "is_chatter",
    "journal_logger",
    "journal_observer",
    "json_logger",
    "json_observer",
    "parse_level",
    "text_logger",
    "twistd_observer",
]

ENV_LEVEL: Final = "TXDILATION_LOG_LEVEL"
"""Environment variable naming the lowest level the observers let through."""

ENV_FILE: Final = "TXDILATION_LOG_FILE"
"""Environment variable naming the file the ``--logger`` factories append to (else stdout)."""

LEVELS: Final[dict[str, LogLevel]] = {
    "debug": LogLevel.debug,
    "info": LogLevel.info,
    "warn": LogLevel.warn,
    "error": LogLevel.error,
    "critical": LogLevel.critical,
}
"""Level names, lowest first (``warning`` is accepted for ``warn``)."""

_PRIORITY: Final = {
    LogLevel.debug: 7,
    LogLevel.info: 6,
    LogLevel.warn: 4,
    LogLevel.error: 3,
    LogLevel.critical: 2,
}
_CHATTER_FORMATS: Final = frozenset(
    {"Starting factory {factory!r}", "Stopping factory {factory!r}"}
)
_CHATTER_TEXT: Final = re.compile(r"\S+ starting on \S+|\((?:TCP |UDP |UNIX )?Port \S+ Closed\)")

_configured: LogLevel | None = None


def parse_level(name: str) -> LogLevel:
    """The level called ``name`` (case does not matter).

    :raises ValueError: for an unknown name (the message lists the known ones).
    """
    key = name.strip().lower()
    key = "warn" if key == "warning" else key
    if key not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {name!r}")
    return LEVELS[key]


def configure(level: LogLevel | str | None) -> None:
    """Set the level the observers made afterwards let through (None: back to the default)."""
    global _configured
    _configured = parse_level(level) if isinstance(level, str) else level


def current_level(environ: Mapping[str, str] | None = None) -> LogLevel:
    """:func:`configure`'s level, else ``TXDILATION_LOG_LEVEL``'s, else info.

    :raises ValueError: when ``TXDILATION_LOG_LEVEL`` names no level.
    """
    if _configured is not None:
        return _configured
    env = os.environ if environ is None else environ
    raw = env.get(ENV_LEVEL, "").strip()
    return parse_level(raw) if raw else LogLevel.info


def is_chatter(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is Twisted's per-factory or per-port chatter (treated as debug)."""
    log_format = event.get("log_format")
    if log_format in _CHATTER_FORMATS:
        return True
    if log_format == "{log_text}" or "message" in event:  # a legacy log.msg() line
        return _CHATTER_TEXT.fullmatch(formatEvent(dict(event)).strip()) is not None
    return False


def _level_of(event: Mapping[str, Any]) -> LogLevel:
    found: Any = event.get("log_level")
    level: LogLevel = LogLevel.info
    if found in (LogLevel.debug, LogLevel.warn, LogLevel.error, LogLevel.critical):
        level = found
    if level > LogLevel.debug and is_chatter(event):
        level = LogLevel.debug
    return level


@implementer(ILogFilterPredicate)
class _AtLeast:
    """Lets through events at a level or above (Twisted's chatter counting as debug)."""

    def __init__(
        self, lowest: LogLevel, exclude: Callable[[Mapping[str, Any]], bool] | None
    ) -> None:
        self._lowest = lowest
        self._exclude = exclude

    def __call__(self, event: LogEvent) -> Any:
        if self._exclude is not None and self._exclude(event):
            return PredicateResult.no
        return PredicateResult.yes if _level_of(event) >= self._lowest else PredicateResult.no


def filtered(
    observer: ILogObserver,
    level: LogLevel | None = None,
    *,
    exclude: Callable[[Mapping[str, Any]], bool] | None = None,
) -> ILogObserver:
    """``observer`` behind a filter letting through events at ``level`` or above (default:
    :func:`current_level`), Twisted's chatter counting as debug, except those for which
    ``exclude(event)`` is true."""
    lowest = current_level() if level is None else level
    return FilteringLogObserver(observer, [_AtLeast(lowest, exclude)])


@implementer(ILogObserver)
class _LineObserver:
    """Writes one or more lines per event to a stream (errors writing are swallowed)."""

    def __init__(self, stream: IO[str], render: Callable[[dict[str, Any]], str]) -> None:
        self._stream = stream
        self._render = render

    def __call__(self, event: dict[str, Any]) -> None:
        try:
            self._stream.write(self._render(event))
            self._stream.flush()
        except (OSError, ValueError):
            pass  # a closed or full stream: nothing better to do from inside the logger


def _text_and_traceback(event: Mapping[str, Any]) -> tuple[str, str | None]:
    text = formatEvent(dict(event))
    failure = event.get("log_failure")
    traceback = None
    if failure is not None:
        try:
            traceback = failure.getTraceback()
        except Exception:  # pragma: no cover (a broken Failure)
            traceback = repr(failure)
    return text, traceback


def _journal_lines(event: dict[str, Any]) -> str:
    text, traceback = _text_and_traceback(event)
    priority = _PRIORITY.get(_level_of(event), 6)
    namespace = event.get("log_namespace", "-")
    lines = [f"[{namespace}] {line}" for line in (text or "").splitlines() or [""]]
    if traceback:
        lines.extend(traceback.rstrip("\n").splitlines())
    return "".join(f"<{priority}>{line}\n" for line in lines)


_KEPT: Final = ("status", "telemetry", "gap_ms")


def _json_line(event: dict[str, Any]) -> str:
    text, traceback = _text_and_traceback(event)
    ts = float(event.get("log_time") or time.time())
    level = _level_of(event)
    record: dict[str, Any] = {
        "ts": round(ts, 6),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z",
        "level": level.name,
        "namespace": event.get("log_namespace", "-"),
        "text": text,
    }
    for key in _KEPT:
        if key in event:
            record[key] = event[key]
    fields = {
        k: v
        for k, v in event.items()
        if not k.startswith("log_")
        and k not in _KEPT
        and k not in ("text", "message", "format", "system", "time", "isError", "failure", "why")
        and (v is None or isinstance(v, str | int | float | bool))
    }
    if fields:
        record["fields"] = fields
    if traceback:
        record["failure"] = traceback
    return json.dumps(record, separators=(",", ":"), default=repr) + "\n"


def journal_observer(stream: IO[str], level: LogLevel | None = None) -> ILogObserver:
    """Lines for journald on ``stream``: ``<PRIORITY>[namespace] text``, no timestamp."""
    return filtered(_LineObserver(stream, _journal_lines), level)


def json_observer(stream: IO[str], level: LogLevel | None = None) -> ILogObserver:
    """One JSON object per event on ``stream`` (see the module docstring for the keys)."""
    return filtered(_LineObserver(stream, _json_line), level)


def _output() -> IO[str]:
    path = os.environ.get(ENV_FILE, "").strip()
    if not path:
        return sys.stdout
    return open(path, "a", encoding="utf-8", buffering=1)  # lives as long as the process


def text_logger() -> ILogObserver:
    """``twistd --logger txdilation.logs.text_logger``: twistd's text lines, filtered."""
    return filtered(textFileLogObserver(_output()))


def journal_logger() -> ILogObserver:
    """``twistd --logger txdilation.logs.journal_logger``: lines for systemd's journal."""
    return journal_observer(_output())


def json_logger() -> ILogObserver:
    """``twistd --logger txdilation.logs.json_logger``: JSON lines."""
    return json_observer(_output())


def twistd_observer(
    options: Mapping[str, Any], level: LogLevel | None = None
) -> ILogObserver | None:
    """The observer twistd would make from its own ``options`` (``--logfile``, ``-n``), behind
    :func:`filtered`; None when twistd must decide itself (``--logger``, ``--syslog``, or a
    daemon logging to stdout, which twistd refuses).

    Follows twistd's rules: ``--logfile -``, or ``-n`` without ``--logfile``: stdout; otherwise
    the file (default ``twistd.log``), rotated by size as twistd's is and reopened on SIGUSR1.
    """
    if options.get("logger") or options.get("syslog"):
        return None
    logfile = options.get("logfile") or ""
    nodaemon = bool(options.get("nodaemon"))
    stream: IO[str]
    if logfile == "-" or (nodaemon and not logfile):
        if not nodaemon:
            return None
        stream = sys.stdout
    else:
        log_file = LogFile.fromFullPath(logfile or "twistd.log")  # type: ignore[no-untyped-call]
        sigusr1 = getattr(signal, "SIGUSR1", None)
        if sigusr1 is not None and not signal.getsignal(sigusr1):

            def rotate(signum: int, frame: object) -> None:
                from twisted.internet import reactor

                reactor.callFromThread(log_file.rotate)  # type: ignore[attr-defined]

            signal.signal(sigusr1, rotate)
        stream = log_file  # type: ignore[assignment]
    return filtered(textFileLogObserver(stream), level)
