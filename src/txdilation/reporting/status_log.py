"""Status events as log lines: what happened to a session, readable in twistd's log or a journal.

Layer: session observability. A :class:`StatusLog` observes a
:class:`~txdilation.reporting.status_events.StatusWriter` and emits every status event on
``twisted.logger`` (namespace ``txdilation.session``) as ONE readable line, the event itself
under the key ``status``; levels: ``error`` for fatal errors, ``warn`` for other errors and
warnings, ``debug`` for ``rtt`` samples, ``info`` else. Examples: docs/module-notes.md.

Invariants: one event is one log line (one ``emit``); the text never spans lines; the reconnect
gap is measured between the ``reconnecting`` event and the next ``connection-selected`` (both
stamped by the writer's clock).
"""

from __future__ import annotations

from typing import Any, Final

from twisted.logger import Logger, LogLevel

from txdilation.reporting.status_events import StatusEvent

__all__ = ["NAMESPACE", "StatusLog", "describe_for_log", "describe_stopping", "format_bytes"]

NAMESPACE: Final = "txdilation.session"
"""The ``twisted.logger`` namespace of the lines."""


def format_bytes(n: int) -> str:
    """``n`` bytes in B, kB, MB or GB (decimal units, 3 significant digits)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def _connections(count: int) -> str:
    return f"{count} forwarded connection{'' if count == 1 else 's'}"


def describe_stopping(event: StatusEvent, *, interactive: bool = False) -> str:
    """The ``stopping`` event in words: why, and what is still open (with the grace period
    and, after a signal, that a second one cuts at once).

    :param interactive: for a command's terminal: a signal is said to have interrupted it.
    """
    reason = str(event["reason"])
    signalled = reason.startswith("SIG")
    still_open = event.get("open", 0)
    if event.get("forced"):
        return f"{reason} again: stopping now" + (
            f", cutting {_connections(still_open)}" if still_open else ""
        )
    text = f"interrupted by {reason}: stopping" if interactive and signalled else "stopping"
    text += "" if interactive and signalled else f" ({reason})"
    if not still_open:
        return text
    if "grace_s" not in event:
        return f"{text}: cutting {_connections(still_open)} now"
    them = "it" if still_open == 1 else "them"
    again = f"; a second {reason} cuts {them} now" if signalled else ""
    return (
        f"{text}: {_connections(still_open)} open, waiting up to {event['grace_s']:g} s for "
        f"{them} to end{again}"
    )


def _connection(event: StatusEvent) -> str:
    return f"{event.get('path', '?')} connection {event.get('hint', '?')}"


def _with_advice(event: StatusEvent) -> str:
    advice = event.get("advice")
    return f"{event['message']}; {advice}" if advice else str(event["message"])


def describe_for_log(
    event: StatusEvent, gap_ms: float | None = None, subject: str = "session"
) -> tuple[LogLevel, str]:
    """The level and one-line text of ``event``.

    :param gap_ms: for a ``connection-selected`` after a loss: milliseconds since the loss.
    :param subject: what starts and closes (``session``; ``wormhole`` for endpoints).
    """
    kind = event["kind"]
    info = LogLevel.info
    match kind:
        case "starting":
            forwards = ", ".join(
                [f"listen {n}" for n in event.get("listen", [])]
                + [f"connect {n}" for n in event.get("connect", [])]
            )
            return info, (
                f"{subject} starting (pid {event.get('pid')}): appid {event.get('appid')}, "
                f"mailbox {event.get('mailbox')}" + (f", {forwards}" if forwards else "")
            )
        case "listening":
            return info, f"listening for {event['name']} on {event['address']}"
        case "mailbox":
            state = event["state"]
            text = f"mailbox {state}" + (f" {event['url']}" if "url" in event else "")
            if state == "failed":
                return LogLevel.warn, f"{text}: {event.get('reason', '?')}"
            if state == "disconnected":
                text += " (the wormhole reconnects by itself; the peer link goes on)"
            return info, text
        case "code":
            return info, f"wormhole code: {event['code']}"
        case "peer-connected":
            return info, f"peer connected; verifier {event['verifier']}"
        case "connecting":
            text = f"generation {event['generation']}: connecting to the peer"
            if event.get("waits_on") == "stock-leader":
                text += " (waiting on its stock Leader, which never retries by itself)"
            return info, text
        case "dilated":
            if "hint" in event:
                return info, f"dilated: generation {event.get('generation')}, {_connection(event)}"
            return info, "dilated"
        case "connection-selected":
            text = f"generation {event['generation']}: {_connection(event)}"
            if gap_ms is not None:
                text = (
                    f"reconnected: generation {event['generation']}, {_connection(event)}, "
                    f"{gap_ms:.0f} ms after the loss"
                )
            return info, text
        case "reconnecting":
            return info, (
                f"generation {event['generation']}: connection lost, reconnecting "
                "(open subchannels stay open)"
            )
        case "rtt":
            return LogLevel.debug, f"rtt {event['rtt_ms']} ms (generation {event['generation']})"
        case "port-mapping":
            if event.get("protocol") is None:
                return info, "port mapping gone"
            lease = f" for {event['lifetime_s']:.0f} s" if "lifetime_s" in event else ""
            return info, f"port {event['port']} mapped by the router ({event['protocol']}){lease}"
        case "link-cut":
            return info, f"generation {event['generation']}: link cut (debug signal SIGUSR2)"
        case "subchannel-opened":
            return info, (
                f"{event['name']} #{event['id']} opened ({event['direction']}, "
                f"local {event.get('local', '?')})"
            )
        case "subchannel-closed":
            dropped = f", {event['dropped']} bytes dropped" if event.get("dropped") else ""
            moved = (
                f"{format_bytes(event['bytes_to_peer'])} to the peer, "
                f"{format_bytes(event['bytes_from_peer'])} from the peer in "
                f"{event['duration_s']} s{dropped}"
            )
            if event["reason"] == "cut":
                return LogLevel.warn, (
                    f"{event['name']} #{event['id']} cut after {moved}: {event.get('detail', '?')}"
                )
            return info, f"{event['name']} #{event['id']} closed ({event['reason']}): {moved}"
        case "error":
            if event.get("fatal"):
                return LogLevel.error, f"fatal error ({event['where']}): {_with_advice(event)}"
            return LogLevel.warn, f"error ({event['where']}): {_with_advice(event)}"
        case "warning":
            return LogLevel.warn, f"warning: {_with_advice(event)}"
        case "paired":
            return info, (
                f"paired with {event['peer']}: pairing written to {event['path']} (a restart "
                "of either side now meets again without a code)"
            )
        case "waiting":
            if event.get("reason") == "peer-left":
                return info, (
                    f"paired peer {event['peer']} left; waiting for it to come back (generation "
                    f"{event['generation']})"
                )
            return info, (
                f"waiting for paired peer {event['peer']} (generation {event['generation']}, "
                "no code needed)"
            )
        case "meeting":
            return LogLevel.debug, (
                f"meeting paired peer {event['peer']} (generation {event['generation']})"
            )
        case "peer-restarted":
            return info, (
                f"paired peer {event['peer']} restarted: what was open with its previous "
                "process is closed"
            )
        case "reconnected":
            if event.get("restarted") == "self":
                return info, (
                    f"reconnected to paired peer {event['peer']} after a restart of this side "
                    f"({event.get('since_start_s', '?')} s after it started)"
                )
            down = event.get("down_s")
            return info, (
                f"reconnected to paired peer {event['peer']} after a restart"
                + (f" (down {down} s)" if down is not None else "")
            )
        case "ratchet":
            return LogLevel.debug, (
                f"pairing with {event['peer']}: secret moved to generation {event['generation']}"
            )
        case "stopping":
            return info, describe_stopping(event)
        case "draining":
            return info, (
                f"stopping: {_connections(event['open'])} still open, cut in "
                f"{event['remaining_s']} s"
            )
        case "closed":
            cut = f"; {_connections(event['cut'])} cut" if event.get("cut") else ""
            return info, f"{subject} closed ({event['reason']}, mood {event['mood']}{cut})"
    return info, f"{kind}: " + ", ".join(
        f"{k}={v}" for k, v in event.items() if k not in ("kind", "ts", "seq")
    )


class StatusLog:
    """Logs every status event as one line (register with ``StatusWriter.add_observer``).

    :param log: the logger to emit on (namespace :data:`NAMESPACE` by default).
    :param subject: what the ``starting`` and ``closed`` lines name.
    """

    def __init__(self, log: Logger | None = None, subject: str = "session") -> None:
        self._log = log if log is not None else Logger(namespace=NAMESPACE)
        self._subject = subject
        self._lost_at: float | None = None

    def __call__(self, event: StatusEvent) -> None:
        """Log ``event``."""
        gap_ms: float | None = None
        kind = event["kind"]
        if kind == "reconnecting" and self._lost_at is None:
            self._lost_at = float(event["ts"])
        elif kind == "connection-selected" and self._lost_at is not None:
            gap_ms = max(0.0, 1000 * (float(event["ts"]) - self._lost_at))
            self._lost_at = None
        level, text = describe_for_log(event, gap_ms, self._subject)
        fields: dict[str, Any] = {"text": text, "status": event}
        if gap_ms is not None:
            fields["gap_ms"] = round(gap_ms, 3)
        self._log.emit(level, "{text}", **fields)
