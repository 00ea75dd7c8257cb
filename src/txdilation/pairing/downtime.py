"""How long the pairing was down: what the ``reconnected`` event reports (no I/O).

Layer: pairing bookkeeping (pure; times are given). :class:`Downtime` knows when this process
started, whether it has had a meeting, and since when the current one has been down; at each
meeting dilated it says whether this side or the peer restarted and how long it took.

Invariant: ``down_since`` is None while a meeting is up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Downtime"]


@dataclass
class Downtime:
    """See the module docstring."""

    started_at: float = 0.0
    down_since: float | None = None
    had_meeting: bool = False

    def lost(self, now: float, *, only_after_a_meeting: bool = False) -> None:
        """The meeting (or its link) went down at ``now`` (kept if already down)."""
        if self.down_since is None and (self.had_meeting or not only_after_a_meeting):
            self.down_since = now

    def back(self) -> None:
        """The link came back within the meeting."""
        self.down_since = None

    def paired(self) -> None:
        """The code meeting made the pairing: later meetings are reunions with the peer."""
        self.had_meeting = True

    def reconnected(self, now: float) -> dict[str, Any]:
        """A meeting is dilated: the ``reconnected`` event's timing fields."""
        fields: dict[str, Any]
        if self.had_meeting:
            fields = {"restarted": "peer"}
            if self.down_since is not None:
                fields["down_s"] = round(now - self.down_since, 3)
        else:
            fields = {"restarted": "self", "since_start_s": round(now - self.started_at, 3)}
        self.had_meeting = True
        self.down_since = None
        return fields
