"""synth's sessions have the shape of real ones.

The shape is checked by :func:`shape_problems`, written from the emitter's documented order
(docs/telemetry.md and the emitters' docstrings), not from synth's output, and run on both:

- a real dilation: two real Managers over loopback TCP with a real transit relay (so each side
  races its relay dial, its dial of the peer's direct hint and the peer's dial into its
  listener), one subchannel, a cut link (a reconnect), periodic traffic records every 0.1 s
  and a graceful close, written by the real emitter through ``TXDILATION_EVENTS``;
- a few hundred synth sessions (direct, relayed, failed, reconnecting, long ones with periodic
  traffic and pings).
"""

from __future__ import annotations

import itertools
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import Factory
from twisted.trial.unittest import SynchronousTestCase

from tests.mailbox.test_manager import Collector, DilatedPairBase, EchoProtocol
from tests.support.harness import restore_env, start_transit_relay
from tests.support.waits import sleep
from txdilation import telemetry as tm

from ._spark import have_spark, spark

Record = dict[str, Any]
LOSERS = {"cancelled", "superseded"}
EARLY = ("dilation_requested", "please_received", "hints_received")
"""What may come before the role is known (the peer's hints may overtake its please)."""
IN_FLIGHT = {"hints_received", "hints_sent", "attempt_started", "attempt_ended"}
"""What may come between a lost link and the reconnect that turns the generation."""
REAL_INTERVAL = 0.1
REAL_SLACK = 2.0
"""A loaded CI machine may run the real reactor's timers late; exact schedules are checked on
synth and on a Clock."""
Need = Callable[[bool, str], None]


def shape_problems(events: Iterable[Record], interval: float, slack: float) -> list[str]:
    """What in one session's records breaks the emitter's documented order (empty: nothing).

    :param interval: the periodic traffic interval (``TXDILATION_TRAFFIC_INTERVAL``).
    :param slack: how far a periodic record may be off its schedule (reactor latency).

    Rules, from docs/telemetry.md: ``seq`` counts from 0 and ``ts`` never goes back; the first
    record is ``dilation_requested``; ``please_received`` comes before the role is known
    (``role`` null; the peer's hints may overtake its please), later records all carry the one
    role; the last two are the ``final`` traffic record and ``session_ended``; ``generation``
    never goes back and steps by one. The Manager reports each hint message it sends and
    receives, and the Connector sends its relay hints and its listener's direct hints in separate
    messages: one hint type per record. Attempts: ids 1, 2, 3, ... in start order, each ended
    once after it started, with the same hint type, direction and generation; at least one
    relay attempt in a generation that sent relay hints. A race that selects ends every attempt
    of its generation before ``connection_selected``: the ``selected`` one (of the selected
    hint type), then its losers ``cancelled`` or ``superseded`` right before the selection;
    attempts started after the selection are a warm standby's race (at most one ``standby``).
    Connections alternate ``connection_selected``/``connection_lost``; the session's last
    connection ends with a ``connection_lost`` ``closed`` (the graceful close) before the final
    traffic record; between a loss and the next generation the Leader records ``reconnect``,
    the Follower ``reconnecting``, at once (but for the lost generation's hints and attempts
    still in flight: a standby connector's, the peer's; one may also follow the last loss,
    when the close overtook it); each selection after a loss is followed at once by
    ``recovered``, and only those. Pings only while connected. Periodic ``traffic`` every
    ``interval`` from the first selection on (none missing before the final one), counters
    never decreasing. Each
    subchannel opens once while dilated and closes once, before the final traffic record.

    Not checked, because real logs do not follow it: hints received carry the generation the
    receiver is in, which may lag (the peer's next-generation hints can arrive before our
    connector starts), and early hints are not always dialled.
    """
    ev = sorted(events, key=lambda r: r["seq"])
    problems: list[str] = []

    def need(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    kinds = [r["event"] for r in ev]
    need([r["seq"] for r in ev] == list(range(len(ev))), "seq is not 0, 1, 2, ...")
    need(all(a["ts"] <= b["ts"] for a, b in itertools.pairwise(ev)), "ts goes back")
    known = next((i for i, r in enumerate(ev) if r["role"] is not None), len(ev))
    need(kinds[:1] == ["dilation_requested"] and "please_received" in kinds[:known],
         f"starts with {kinds[:known]}")  # fmt: skip
    need(set(kinds[:known]) <= set(EARLY), f"before the role: {kinds[:known]}")
    roles = {r["role"] for r in ev[known:]}
    need(len(roles) == 1 and None not in roles, f"roles {roles}")
    role = next(iter(roles), None)
    need(kinds[-2:] == ["traffic", "session_ended"] and ev[-2]["final"], "no final traffic, end")
    need(sum(1 for r in ev if r["event"] == "traffic" and r["final"]) == 1, "final traffic x2")
    gens = [r["generation"] for r in ev[known:] if not r["event"].startswith("attempt")]
    need(gens == sorted(gens) and gens[:1] in ([], [1]), f"generations {sorted(set(gens))}")
    need(all(b - a <= 1 for a, b in itertools.pairwise(gens)), "a generation skipped")
    _hints_and_attempts(ev, need)
    _connections(ev, role, need)
    _periodic(ev, interval, slack, need)
    return problems


def hint_count(ev: list[Record], generation: int, hint_type: str, kinds: Iterable[str]) -> int:
    """How many hints of ``hint_type`` the ``kinds`` records of ``generation`` carry."""
    return sum(
        r["hints"].get(hint_type, 0)
        for r in ev
        if r["event"] in kinds and r["generation"] == generation
    )


def _hints_and_attempts(ev: list[Record], need: Need) -> None:
    for r in ev:
        if r["event"] in ("hints_sent", "hints_received"):
            need(len(r["hints"]) == 1, f"several hint types in one record: {r['hints']}")
    started = [r for r in ev if r["event"] == "attempt_started"]
    ended = {r["attempt"]: r for r in ev if r["event"] == "attempt_ended"}
    need([r["attempt"] for r in started] == list(range(1, len(started) + 1)), "attempt ids")
    need(len(ended) == sum(r["event"] == "attempt_ended" for r in ev), "an attempt ended twice")
    need(set(ended) == {r["attempt"] for r in started}, "attempts not ended once each")
    for s in started:
        e = ended.get(s["attempt"])
        same = e is not None and all(e[k] == s[k] for k in ("hint_type", "direction", "generation"))
        need(same and e["seq"] > s["seq"], f"attempt {s['attempt']} ends unlike it started")
    for g in {r["generation"] for r in started}:
        relays = sum(r["hint_type"] == "relay-v1" for r in started if r["generation"] == g)
        relay_hints = hint_count(ev, g, "relay-v1", ("hints_sent",))
        need(relays >= 1 if relay_hints else relays == 0, f"gen {g}: {relays} relay attempts")
    for i, r in enumerate(ev):
        if r["event"] != "connection_selected":
            continue
        g = r["generation"]
        won = [e for e in ended.values() if e["generation"] == g and e["outcome"] == "selected"]
        need(len(won) == 1, f"gen {g}: {len(won)} attempts selected")
        if len(won) != 1:
            continue
        need(won[0]["hint_type"] == r["hint_type"], f"gen {g}: selected another hint type")
        need(r["via_relay"] == (r["hint_type"] == "relay-v1"), f"gen {g}: via_relay")
        race = [s["attempt"] for s in started if s["generation"] == g and s["seq"] < r["seq"]]
        need(all(ended[a]["seq"] < r["seq"] for a in race if a in ended),
             f"gen {g}: an attempt ends after the selection")  # fmt: skip
        later = [
            ended[s["attempt"]]
            for s in started
            if s["generation"] == g and s["seq"] > r["seq"] and s["attempt"] in ended
        ]
        need(sum(e["outcome"] == "standby" for e in later) <= 1, f"gen {g}: standby x2")
        between = ev[won[0]["seq"] + 1 : i]
        need(all(e["event"] == "attempt_ended" and e["outcome"] in LOSERS for e in between),
             f"gen {g}: not only losers between selected and selection")  # fmt: skip


def _connections(ev: list[Record], role: str | None, need: Need) -> None:
    up = False
    lost_at: list[int] = []
    for i, r in enumerate(ev):
        kind = r["event"]
        if kind == "connection_selected":
            need(not up, "selected while connected")
            up = True
            after = ev[i + 1]["event"] if i + 1 < len(ev) else None
            need((after == "recovered") == bool(lost_at), "a reselection without recovered")
        elif kind == "recovered":
            previous = ev[i - 1]
            need(previous["event"] == "connection_selected" and bool(lost_at)
                 and previous["generation"] == r["generation"], "recovered not after a "
                 "reselection")  # fmt: skip
        elif kind == "connection_lost":
            need(up, "lost while not connected")
            up = False
            lost_at.append(i)
        elif kind == "ping_rtt":
            need(up, "a ping while not connected")
        elif kind in ("reconnect", "reconnecting"):
            need(kind == ("reconnect" if role == "leader" else "reconnecting"), f"{role} {kind}")
            need(not up and bool(lost_at), f"{kind} while connected")
    need(not up, "still connected at the end")
    final = len(ev) - 2
    for n, i in enumerate(lost_at):
        gap = [r["event"] for r in ev[i + 1 : lost_at[n + 1] if n + 1 < len(lost_at) else final]]
        turns = [k for k in gap if k in ("reconnect", "reconnecting")]
        if n + 1 < len(lost_at):
            later = [r["generation"] for r in ev[i + 1 : lost_at[n + 1]]]
            before = gap[: gap.index(turns[0])] if len(turns) == 1 else gap
            need(len(turns) == 1 and set(before) <= IN_FLIGHT, "no reconnect after a loss")
            need(max(later, default=0) == ev[i]["generation"] + 1, "no new generation")
        else:
            need(ev[i]["reason"] == "closed", f"last loss {ev[i]['reason']}, not closed")
            late = {"reconnect", "reconnecting", "subchannel_closed", "traffic"}
            need(set(gap) <= late, f"after the close: {gap}")
    opened = Counter(r["scid"] for r in ev if r["event"] == "subchannel_opened")
    closed = Counter(r["scid"] for r in ev if r["event"] == "subchannel_closed")
    need(opened == closed and set(opened.values()) <= {1}, "subchannels not opened+closed once")
    first_sel = next((r["seq"] for r in ev if r["event"] == "connection_selected"), len(ev))
    for r in ev:
        if r["event"] == "subchannel_opened":
            need(r["seq"] > first_sel, "a subchannel before dilation")


def _periodic(ev: list[Record], interval: float, slack: float, need: Need) -> None:
    traffic = [r for r in ev if r["event"] == "traffic"]
    for a, b in itertools.pairwise(traffic):
        need(all(a[k] <= b[k] for k in ("records_sent", "bytes_sent", "records_received",
                                         "bytes_received", "records_acked")),
             "traffic counters decrease")  # fmt: skip
    selected = [r["ts"] for r in ev if r["event"] == "connection_selected"]
    ticks = [r["ts"] for r in traffic if not r["final"]]
    if not selected:
        need(not ticks, "periodic traffic without a connection")
        return
    schedule = [selected[0], *ticks, ev[-2]["ts"]]
    for n, (a, b) in enumerate(itertools.pairwise(schedule)):
        if n < len(schedule) - 2:
            need(interval - slack <= b - a <= interval + slack, f"periodic traffic {b - a:.3f}")
        else:
            need(b - a < interval + slack, f"periodic traffic missing before {b - a:.3f}")


def by_session(records: Iterable[Record]) -> dict[str, list[Record]]:
    """Records grouped by session id."""
    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(r["session"], []).append(r)
    return out


class ShapeCheckerTests(SynchronousTestCase):
    """The checker itself notices broken shapes (so its passing means something)."""

    def session(self) -> list[Record]:
        """A minimal valid session written by the real Telemetry on a Clock."""
        from twisted.internet.task import Clock

        clock = Clock()
        records: list[Record] = []
        t = tm.Telemetry(clock, sink=lambda r: records.append(dict(r)))
        t.set_traffic_source(lambda: tm.TrafficStats())
        t.dilation_requested()
        t.please_received()
        t.set_role("leader")
        t.set_generation(1)
        t.hints_sent({"relay-v1": 1})
        t.attempt_started(t.new_attempt_id(), "relay-v1", "outbound")
        t.hints_received({"direct-tcp-v1": 1})
        t.attempt_started(t.new_attempt_id(), "direct-tcp-v1", "outbound")
        clock.advance(0.5)
        t.attempt_ended(2, "direct-tcp-v1", "outbound", "selected", 0.1, 0.2)
        t.attempt_ended(1, "relay-v1", "outbound", "cancelled", 0.1, None)
        t.connection_selected("direct-tcp-v1", via_relay=False)
        t.start_periodic_traffic(60.0)
        clock.pump([10.0] * 13)
        t.connection_lost("closed")
        t.session_ended("closed")
        return records

    def test_valid(self) -> None:
        """A session in the documented order passes."""
        self.assertEqual(shape_problems(self.session(), 60.0, 1e-6), [])

    def test_broken(self) -> None:
        """Shapes synth used to have fail: hints of two types in one record, no final
        connection_lost, a periodic traffic record missing, a loser ended after the selection."""
        valid = self.session()
        merged = [dict(r) for r in valid]
        merged[2]["hints"] = {"relay-v1": 1, "direct-tcp-v1": 1}
        no_close = [r for r in valid if r["event"] != "connection_lost"]
        no_tick = [r for r in valid if r["event"] != "traffic" or r["final"] or r["ts"] > 100]
        late = [dict(r) for r in valid]
        i = next(n for n, r in enumerate(late) if r["event"] == "connection_selected")
        late[i - 1], late[i] = late[i], late[i - 1]
        for broken in (merged, no_close, no_tick, late):
            broken = [dict(r, seq=n) for n, r in enumerate(broken)]
            self.assertNotEqual(shape_problems(broken, 60.0, 1e-6), [], broken)


class RealShapeTests(DilatedPairBase):
    """The checker accepts what the real emitter writes in a real dilation."""

    timeout = 60

    def setUp(self) -> None:
        names = ("TXDILATION_LISTEN_INTERFACE", "TXDILATION_HINT_ADDRESSES", tm.ENV_VAR,
                 "TXDILATION_TRAFFIC_INTERVAL")  # fmt: skip
        self.addCleanup(restore_env, {name: os.environ.get(name) for name in names})
        super().setUp()
        handle, self.path = tempfile.mkstemp(suffix=".jsonl")
        os.close(handle)
        self.addCleanup(os.unlink, self.path)
        os.environ[tm.ENV_VAR] = self.path
        os.environ["TXDILATION_TRAFFIC_INTERVAL"] = str(REAL_INTERVAL)

    @inlineCallbacks
    def test_real_dilation_has_the_shape(self) -> Any:
        """Both sides of a real dilation with a relay offered, a subchannel, a reconnect,
        periodic traffic and a graceful close pass the checker, and exercised its rules:
        a relay attempt beside the direct ones in the first race, two generations, periodic
        records."""
        relay = yield Deferred.fromCoroutine(start_transit_relay(reactor))
        self.addCleanup(relay.stop)
        _pipes, dilators, apis = yield self.dilate_pair(transit_relay_location=relay.hint)
        apis[0].listener_for("echo").listen(Factory.forProtocol(EchoProtocol))
        client = yield apis[1].connector_for("echo").connect(Factory.forProtocol(Collector))
        client.transport.write(b"x" * 1000)
        yield client.wait_for(1000)
        yield sleep(REAL_INTERVAL * 2.5)
        dilators[1]._manager.connection.disconnect()
        client.transport.write(b"y")
        yield client.wait_for(1001)
        client.transport.loseConnection()
        yield client.lost
        for d in dilators:
            d.stop()
        for t in self._terms:
            yield t.stopped
        with open(self.path, encoding="utf-8") as f:
            sessions = by_session(json.loads(line) for line in f)
        self.assertEqual(len(sessions), 2)
        for events in sessions.values():
            self.assertEqual(shape_problems(events, REAL_INTERVAL, REAL_SLACK), [])
            first_race = [r for r in events if r["event"] == "attempt_started"
                          and r["generation"] == 1]  # fmt: skip
            self.assertIn("relay-v1", {r["hint_type"] for r in first_race})
            self.assertGreaterEqual(len(first_race), 2)
            self.assertEqual(max(r.get("generation") or 0 for r in events), 2)
            self.assertTrue(any(r["event"] == "traffic" and not r["final"] for r in events))


@pytest.mark.spark
class SynthShapeTests(SynchronousTestCase):
    """synth sessions pass the same checker, in realistic proportions."""

    def setUp(self) -> None:
        reason = have_spark()
        if reason:
            self.skipTest(reason)

    def test_synth_sessions_have_the_shape(self) -> None:
        """Every one of 300 synth sessions passes the checker (exact 60 s schedule); they
        include each kind of session the checker distinguishes; direct races have one attempt
        per direct hint plus the relay and the peer's dial in; most sessions have one
        subchannel and some periodic traffic."""
        from txdilation_analytics.synth import SynthOptions, event_lines

        options = SynthOptions(sessions=300, seed=11, days=1)
        lines = event_lines(spark(), options, 2).collect()
        sessions = by_session(json.loads(row.value) for row in lines)
        self.assertEqual(len(sessions), 300)
        kinds: Counter[str] = Counter()
        for name, events in sessions.items():
            self.assertEqual(shape_problems(events, 60.0, 1e-6), [], name)
            names = Counter(r["event"] for r in events)
            selected = [r for r in events if r["event"] == "connection_selected"]
            kinds["failed"] += not selected
            kinds["relayed"] += any(r["via_relay"] for r in selected)
            kinds["reconnected"] += len(selected) > 1
            kinds["recovered"] += names["recovered"] == len(selected) - 1 > 0
            kinds["periodic"] += names["traffic"] > 1
            kinds["pings"] += names["ping_rtt"] > 0
            kinds["subchannel"] += names["subchannel_opened"] == 1
            for r in selected:
                if not r["via_relay"]:
                    g = r["generation"]
                    race = [e for e in events if e["event"] == "attempt_started"
                            and e["generation"] == g]  # fmt: skip
                    hints = hint_count(events, g, "direct-tcp-v1", ("hints_received",))
                    self.assertEqual(len(race), hints + 2, name)
        self.assertTrue(all(kinds[k] > 0 for k in ("failed", "relayed", "reconnected")), kinds)
        self.assertEqual(kinds["recovered"], kinds["reconnected"], kinds)
        self.assertGreater(kinds["subchannel"], 0.9 * (300 - kinds["failed"]), kinds)
        self.assertTrue(0.2 * 300 < kinds["periodic"] < 0.9 * 300, kinds)
        self.assertTrue(0.2 * 300 < kinds["pings"] < 0.95 * 300, kinds)
