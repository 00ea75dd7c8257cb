"""
One dilation between two ``tests.support.peer`` processes in network namespaces: which path it
took and how long it took (issue 13, reach). Shared by ``tests/test_reach.py`` and
``benchmarks/reach.py``.

Layer: test infrastructure. Both peers start at once with the same random code; the left one
leads (its dilation side is forced higher), the right one follows; both echo two messages
(``--sizes 1,1000``) once dilated. The path is read from both peers' first ``ConnectedPeer``
status (``direct``, ``relay``, ``mixed: ...`` when they disagree) or ``failed`` when they had
not both dilated within ``cap`` seconds of both having the code; the time to dilate runs from
that moment to the later peer's dilation. With ``stay``, the link is kept up that long and the
path it ended on is reported too (a relayed start may move to a direct path). Both peers are
killed and waited for before it returns.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from twisted.internet.defer import Deferred, TimeoutError, ensureDeferred

from tests.support.harness import PeerPair
from tests.support.netns import Node
from tests.support.peers import connections, first_path, path_of, placement

LEADER_SIDE = "f" * 16  # the higher dilation side leads
FOLLOWER_SIDE = "0" * 16


async def within(reactor: Any, d: Deferred[Any], seconds: float) -> Any:
    """``d``'s result, or ``None`` if it has not fired within ``seconds`` (it is cancelled)."""
    try:
        return await d.addTimeout(seconds, reactor)
    except TimeoutError:
        return None


async def dilate_once(
    reactor: Any,
    mailbox_url: str,
    left: tuple[Node, str],
    right: tuple[Node, str],
    *,
    relay: str | None,
    cap: float = 30.0,
    extra: Sequence[str] = (),
    stay: float = 0.0,
    exit_within: float = 0.0,
) -> dict[str, Any]:
    """
    Dilate the Leader ``left = (node, impl)`` with the Follower ``right`` (``impl``:
    ``txdilation`` or ``stock``), the ``relay`` hint offered to both (or none).

    :param extra: more peer arguments for both.
    :param stay: keep the link up this many seconds after dilating (the Follower exchanges a
        message every 50 ms meanwhile) and report the path it ended on too.
    :param exit_within: give both peers that long to close their wormholes and exit by
        themselves before they are killed (``exited``: whether they did).
    :returns: ``{"path": ..., "seconds": ...}`` (``seconds`` is ``None`` when it failed); with
        ``stay``, also ``path_after`` (the last link's path) and ``moved_after`` (seconds from
        the first link to the first direct one after a relayed start, else ``None``).
    """
    common = ["--sizes", "1,1000", *(["--relay", relay] if relay else []), *extra]
    (left_node, left_impl), (right_node, right_impl) = left, right
    left_args = ["--impl", left_impl, "--side", LEADER_SIDE, "--scenario", "echo-server"]
    right_args = ["--impl", right_impl, "--side", FOLLOWER_SIDE, "--scenario", "echo-client"]
    if stay:
        right_args[-1:] = ["echo-steady", "--duration", str(stay)]
    pair = PeerPair(
        reactor,
        mailbox_url,
        [*left_args, *common],
        [*right_args, *common],
        cap + 60,
        left=placement(left_node),
        right=placement(right_node),
        code=f"{secrets.randbelow(900000) + 100000}-reach-run",  # both start at once
    ).start()
    joined, dilated, exited = None, [], None
    try:
        codes = [await within(reactor, pair.when(side, "code"), 60) for side in ("left", "right")]
        joined = max(codes, key=lambda c: float(c["t"])) if all(codes) else None
        ends = time.monotonic() + cap  # one deadline for both peers
        for side in ("left", "right"):
            left_over = max(0.0, ends - time.monotonic())
            dilated.append(await within(reactor, pair.when(side, "dilated"), left_over))
        if joined and all(dilated):
            await within(reactor, pair.when("right", "result"), 20 + stay)
        if exit_within:
            ended = ensureDeferred(pair.ended()).addCallback(lambda _: True)
            exited = await within(reactor, ended, exit_within)
    finally:
        pair.kill()
        await pair.ended()
    if not (joined and all(dilated)):
        return {"path": "failed", "seconds": None}
    paths = {first_path(peer) for peer in pair.results}
    path = paths.pop() if len(paths) == 1 else "mixed: " + ",".join(sorted(paths))
    seconds = max(float(d["t"]) for d in dilated if d) - float(joined["t"])
    outcome: dict[str, Any] = {"path": path, "seconds": round(seconds, 3)}
    if stay:
        outcome |= moves(pair.results)
    if exit_within:
        outcome["exited"] = bool(exited)
    return outcome


def moves(results: Sequence[Any]) -> dict[str, Any]:
    """Where the peers' links went after the first: the last link's path (``mixed: ...`` when
    they disagree) and, after a relayed start, the seconds until the first direct link (the
    later peer's; ``None`` if it never came)."""
    lasts, moved = set(), []
    for peer in results:
        links = connections(peer)
        lasts.add(path_of(links[-1].get("hint_description")) if links else "none")
        direct = [c for c in links if path_of(c.get("hint_description")) == "direct"]
        if links and direct and path_of(links[0].get("hint_description")) == "relay":
            moved.append(float(direct[0]["t"]) - float(links[0]["t"]))
    last = lasts.pop() if len(lasts) == 1 else "mixed: " + ",".join(sorted(lasts))
    after = round(max(moved), 3) if moved and len(moved) == len(results) else None
    return {"path_after": last, "moved_after": after}
