"""The human view of a running session: event lines and a live status line.

Layer: presentation for ``txdilation run`` (reads the session's state and status events; no
influence on the session). Notable events are printed as one line each (``wormhole code:
7-guitarist-revenge``, ``generation 2: direct connection ->tcp:10.0.0.5:41233``, ``waiting for
paired peer backup-b (generation 3, no code needed)``, ...). On a
terminal a status line below them is redrawn every half second::

    gen 2 | direct ->tcp:10.0.0.5:41233 | rtt 0.4 ms | 3 open, 12.5 MB out, 3.1 MB in

Invariant: nothing here raises into the session (the status writer logs observer errors).
"""

from __future__ import annotations

from typing import IO, Any

from twisted.internet.task import LoopingCall

from txdilation.reporting.status_events import StatusEvent
from txdilation.reporting.status_log import describe_for_log, describe_stopping, format_bytes
from txdilation.session.service import Session

__all__ = ["LiveStatusLine", "describe_event", "format_bytes"]

REFRESH_SECONDS = 0.5


def describe_event(event: StatusEvent) -> str | None:
    """One human line for a notable event, or None for the others (``rtt``, subchannels)."""
    kind = event["kind"]
    match kind:
        case "code":
            return f"wormhole code: {event['code']}"
        case "listening":
            return f"listening for {event['name']} on {event['address']}"
        case "mailbox":
            return f"mailbox {event['state']}" + (f" {event['url']}" if "url" in event else "")
        case "peer-connected":
            return f"peer connected, verifier {event['verifier'][:16]}..."
        case "dilated":
            return "dilated"
        case "connection-selected":
            return f"generation {event['generation']}: {event['path']} connection {event['hint']}"
        case "reconnecting":
            return f"generation {event['generation']}: connection lost, reconnecting"
        case "link-cut":
            return "link cut (debug signal)"
        case "paired" | "waiting" | "peer-restarted" | "reconnected" | "ratchet":
            return describe_for_log(event)[1]  # (the pairing: docs/pairing.md)
        case "error":
            advice = f"\n  {event['advice']}" if event.get("advice") else ""
            if event.get("fatal"):
                return f"fatal error: {event['message']}{advice}"
            return f"error ({event['where']}): {event['message']}{advice}"
        case "warning":
            advice = f"\n  {event['advice']}" if event.get("advice") else ""
            return f"warning: {event['message']}{advice}"
        case "subchannel-closed" if event["reason"] == "cut":
            return describe_for_log(event)[1]
        case "stopping":
            return describe_stopping(event, interactive=True)
        case "draining":
            return describe_for_log(event)[1]
        case "closed":
            return describe_for_log(event, subject="")[1].lstrip()
    return None


class LiveStatusLine:
    """Prints a session's notable events and, on a terminal, a live status line.

    :param session: the session to show.
    :param stream: where to print (stderr).
    :param clock: drives the redraws.
    :param tty: redraw a status line in place (else only event lines).
    """

    def __init__(self, session: Session, stream: IO[str], clock: Any, *, tty: bool) -> None:
        self._session = session
        self._stream = stream
        self._tty = tty
        self._loop = LoopingCall(self.refresh)
        self._loop.clock = clock
        self._drawn = 0
        self._paired_peer: str | None = None  # (a paired session: whom it waits for)

    def start(self) -> None:
        """Start redrawing (on a terminal)."""
        if self._tty and not self._loop.running:
            self._loop.start(REFRESH_SECONDS, now=True)

    def stop(self) -> None:
        """Stop redrawing and leave the last status line in place."""
        if self._loop.running:
            self._loop.stop()
            self.refresh()
            self._stream.write("\n")
            self._drawn = 0

    def observe(self, event: StatusEvent) -> None:
        """A status event (register with ``StatusWriter.add_observer``)."""
        if event["kind"] in ("paired", "waiting") and "peer" in event:
            self._paired_peer = str(event["peer"])
        line = describe_event(event)
        if line is None:
            return
        self._clear()
        self._stream.write(line + "\n")
        self._stream.flush()
        if self._tty and self._loop.running:
            self.refresh()

    def render(self) -> str:
        """The status line's text."""
        link = self._session.link
        forwarder = self._session.forwarder
        parts = [f"gen {link.generation}"]
        if link.state == "connected" and link.hint is not None:
            parts.append(f"{link.path} {link.hint}")
        elif link.state == "waiting" and self._paired_peer is not None:
            parts.append(f"waiting for paired peer {self._paired_peer}")
        else:
            parts.append(link.state)
        if link.rtt_s is not None:
            parts.append(f"rtt {link.rtt_s * 1000:.1f} ms")
        parts.append(
            f"{forwarder.live} open, {format_bytes(forwarder.bytes_to_peer)} out, "
            f"{format_bytes(forwarder.bytes_from_peer)} in"
        )
        return " | ".join(parts)

    def refresh(self) -> None:
        """Redraw the status line."""
        text = self.render()
        self._stream.write("\r" + text.ljust(self._drawn))
        self._stream.flush()
        self._drawn = len(text)

    def _clear(self) -> None:
        if self._drawn:
            self._stream.write("\r" + " " * self._drawn + "\r")
            self._drawn = 0
