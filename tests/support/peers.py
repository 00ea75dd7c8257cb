"""
``tests.support.peer`` processes inside network namespaces, and what their events say about the
path.

Layer: test infrastructure. ``placement(node)`` is the ``tests.support.harness.Placement`` that runs
a peer inside ``node``'s namespace, unconfined (``--no-loopback``: both implementations discover
and advertise that namespace's own addresses) and killed if this process dies; pass it to
``run_peer_pair``/``PeerPair`` as ``left=``/``right=``. The rest reads peers' events:
which path the link took and when.
"""

from __future__ import annotations

from typing import Any

from tests.support.harness import PeerResult, Placement
from tests.support.netns import Node, python_environment


def placement(node: Node) -> Placement:
    """Run a peer inside ``node`` (see the module docstring)."""
    return Placement(
        prefix=tuple(node.exec_argv([])),
        env=python_environment(),
        extra_args=("--no-loopback",),
    )


def status_events(peer: PeerResult) -> list[dict[str, Any]]:
    """A peer's ``status`` events, in order (each has ``peer``, ``hint_description``, ``t``)."""
    return [e for e in peer.events if e.get("event") == "status"]


def path_of(description: str | None) -> str:
    """``"relay"`` or ``"direct"`` for a ``ConnectedPeer.hint_description``
    (``->relay:tcp:H:P``, ``->tcp:H:P``, ``<-tcp:H:P``); ``"unknown"`` without one."""
    if not description:
        return "unknown"
    return "relay" if "relay" in description else "direct"


def described_host(description: str) -> str:
    """The remote host of a direct connection's description: ``H`` of ``->tcp:H:P`` (the
    address dialed) or ``<-tcp:H:P`` (the address it came from), an IPv6 ``H`` without its
    brackets."""
    _, _, hostport = description.partition("tcp:")
    host = hostport.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") else host


def connections(peer: PeerResult) -> list[dict[str, Any]]:
    """The ``ConnectedPeer`` status events of a peer (one per link it was on)."""
    return [e for e in status_events(peer) if e.get("peer") == "ConnectedPeer"]


def first_path(peer: PeerResult) -> str:
    """The path of the first link a peer was on (``"none"`` if it never connected)."""
    found = connections(peer)
    return path_of(found[0].get("hint_description")) if found else "none"


def dilate_seconds(peer: PeerResult) -> float:
    """Seconds from a peer's first ``ConnectingPeer`` status to its first ``ConnectedPeer``
    (how long its first generation took to select a link)."""
    events = status_events(peer)
    start = next(e["t"] for e in events if e.get("peer") == "ConnectingPeer")
    return float(connections(peer)[0]["t"] - start)


def noticed_at(peer: PeerResult, after: float) -> float | None:
    """When a peer first reported its link gone (any status but ``ConnectedPeer``) or moved
    (a ``ConnectedPeer`` on another connection: to its standby path) after time ``after``,
    or ``None``."""
    hint = None
    for event in status_events(peer):
        connected = event.get("peer") == "ConnectedPeer"
        moved = hint is not None and event.get("hint_description") != hint
        if event.get("t", 0.0) > after and (not connected or moved):
            return float(event["t"])
        if connected:
            hint = event.get("hint_description")
    return None


def moves(peer: PeerResult, after: float) -> int:
    """How many times a peer's link moved to another connection without a loss in between
    (a ``ConnectedPeer`` on a new connection right after another: a path upgrade, or a move
    to its standby path) after time ``after``."""
    count, hint = 0, None
    for event in status_events(peer):
        if event.get("peer") != "ConnectedPeer":
            hint = None
            continue
        new = event.get("hint_description")
        if event.get("t", 0.0) > after and hint is not None and new != hint:
            count += 1
        hint = new
    return count


def reconnections(peer: PeerResult, after: float) -> int:
    """How many times a peer reported losing its link after time ``after``."""
    count, connected = 0, True
    for event in status_events(peer):
        if event.get("t", 0.0) <= after:
            continue
        is_connected = event.get("peer") == "ConnectedPeer"
        if connected and not is_connected:
            count += 1
        connected = is_connected
    return count
