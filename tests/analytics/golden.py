"""Hand-built telemetry logs for the golden tests, written by the real emitter on Clocks.

Five sessions over two UTC days (times are binary fractions, so every expected number below is
exact):

- S1/S2: both peers of pair A, direct win (leader 0.75 s, follower 0.5 s to dilate);
- S3: relay fallback (direct times out, relay selected after 2.5 s), upgraded to direct 6 s
  later;
- S4: reconnect with a retransmission burst (direct, lost after 10 s, then relay: a
  ``recovered`` with a 2 s gap);
- S5: failed dilation (both attempts fail).

Plus bad lines: unparseable, wrong schema, unknown event, missing field, bad value, and one
exact duplicate of a good line (dropped by sessionize, not counted as bad).
"""

from __future__ import annotations

import json
import os

from twisted.internet.task import Clock

from txdilation.telemetry import JsonLinesWriter, Telemetry

DAY1 = 1767571200.0  # 2026-01-05 00:00 UTC
DAY2 = DAY1 + 86400.0
S1, S2, S3, S4, S5 = ("1" * 16, "2" * 16, "3" * 16, "4" * 16, "5" * 16)
HINTS_SENT = {"direct-tcp-v1": 2, "relay-v1": 1}
HINTS_RECEIVED = {"direct-tcp-v1": 1, "relay-v1": 1}
BAD_LINES = [
    "this is not json",
    json.dumps(
        {
            "schema": "other/9",
            "ts": 1.0,
            "seq": 0,
            "event": "reconnect",
            "session": "9" * 16,
            "role": None,
        }
    ),
    json.dumps(
        {
            "schema": "txdilation-telemetry/1",
            "ts": 1.0,
            "seq": 0,
            "event": "teleport",
            "session": "9" * 16,
            "role": None,
        }
    ),
    json.dumps(
        {
            "schema": "txdilation-telemetry/1",
            "ts": 1.0,
            "seq": 0,
            "event": "attempt_started",
            "session": "9" * 16,
            "role": "leader",
            "hint_type": "relay-v1",
            "direction": "outbound",
        }
    ),
    json.dumps(
        {
            "schema": "txdilation-telemetry/1",
            "ts": 1.0,
            "seq": 1,
            "event": "attempt_started",
            "session": "9" * 16,
            "role": "leader",
            "attempt": 1,
            "hint_type": "tcp:10.0.0.1:4001",
            "direction": "outbound",
        }
    ),
]


def _open(
    session: str,
    start: float,
    sink: JsonLinesWriter,
    role: str,
    sides: tuple[str, str],
    please_at: float,
) -> tuple[Telemetry, Clock]:
    clock = Clock()
    clock.advance(start)
    t = Telemetry(clock, session_id=session, sink=sink)
    t.dilation_requested()
    clock.advance(please_at)
    t.please_received()
    t.set_role(role)
    t.set_pair(*sides)
    t.set_generation(1)
    t.hints_sent(HINTS_SENT)
    t.hints_received(HINTS_RECEIVED)
    return t, clock


def _direct_pair(sink: JsonLinesWriter) -> None:
    """S1 (leader) and S2 (follower): direct win at DAY1+100.75, 10 s up, happy end; the
    connection came in through S2's port mapping."""
    for session, role, request_at, direction, rtt, sent, received in (
        (S1, "leader", 100.0, "outbound", 1 / 64, 160_000, 40_000),
        (S2, "follower", 100.25, "inbound", 1 / 32, 40_000, 160_000),
    ):
        t, clock = _open(
            session, DAY1 + request_at, sink, role, ("a" * 10, "b" * 10), 100.25 - request_at
        )
        t.attempt_started(1, "direct-tcp-v1", direction)
        t.attempt_started(2, "relay-v1", "outbound")
        clock.advance(0.5)  # 100.75
        t.attempt_ended(1, "direct-tcp-v1", direction, "selected", 0.125, 0.25)
        t.connection_selected("direct-tcp-v1", False, candidates=1, via_mapping=role != "leader")
        t.attempt_ended(2, "relay-v1", "outbound", "cancelled", None, None)
        t.subchannel_opened(1, initiator=role == "leader")
        clock.advance(1.0)
        t.ping_rtt(rtt)
        clock.advance(9.0)  # 110.75
        t.subchannel_closed(1, received, sent, 10.0)
        t.traffic(10, sent, 10, 0, 5, received, 0, final=True)
        t.session_ended("happy")


def _relay_fallback(sink: JsonLinesWriter) -> None:
    """S3: direct times out, relay selected 2.5 s after the request, 20 s up; the link moves
    to a direct path 6 s after its selection (a path upgrade, same generation)."""
    t, clock = _open(S3, DAY1 + 200.0, sink, "leader", ("c" * 10, "d" * 10), 0.25)
    t.attempt_started(1, "direct-tcp-v1", "outbound")
    t.attempt_started(2, "relay-v1", "outbound")
    clock.advance(2.0)  # 202.25
    t.attempt_ended(1, "direct-tcp-v1", "outbound", "timeout", None, None)
    clock.advance(0.25)  # 202.5
    t.attempt_ended(2, "relay-v1", "outbound", "selected", 0.5, 0.25)
    t.connection_selected("relay-v1", True, candidates=1)
    clock.advance(1.0)
    t.ping_rtt(1 / 16)
    t.ping_rtt(1 / 8)
    clock.advance(5.0)  # 208.5
    t.path_changed("relay", "direct", 6.0)
    clock.advance(14.0)  # 222.5
    t.traffic(62, 1_000_000, 62, 0, 0, 0, 0, final=True)
    t.session_ended("happy")


def _reconnect_burst(sink: JsonLinesWriter) -> None:
    """S4: direct gen 1 lost after 10 s, relay gen 2 for 10 s; 250 kB retransmitted."""
    t, clock = _open(S4, DAY2 + 50.0, sink, "leader", ("e" * 10, "f" * 10), 0.25)
    t.attempt_started(1, "direct-tcp-v1", "outbound")
    clock.advance(0.25)  # 50.5
    t.attempt_ended(1, "direct-tcp-v1", "outbound", "selected", 0.125, 0.125)
    t.connection_selected("direct-tcp-v1", False, candidates=2)
    t.ping_rtt(1 / 32)
    clock.advance(5.0)
    t.traffic(31, 500_000, 20, 0, 3, 50_000, 64_000)
    clock.advance(5.0)  # 60.5
    t.connection_lost("network_error")
    t.reconnect()
    t.set_generation(2)
    t.hints_sent(HINTS_SENT)
    t.hints_received(HINTS_RECEIVED)
    t.attempt_started(3, "direct-tcp-v1", "outbound")
    t.attempt_started(4, "relay-v1", "outbound")
    clock.advance(1.0)  # 61.5
    t.attempt_ended(3, "direct-tcp-v1", "outbound", "connect_failed", None, None)
    clock.advance(1.0)  # 62.5
    t.attempt_ended(4, "relay-v1", "outbound", "selected", 0.5, 0.5)
    t.connection_selected("relay-v1", True, candidates=1)
    t.recovered("direct", "connection_closed", 2.0)  # from the loss at 60.5
    t.ping_rtt(1 / 16)
    clock.advance(10.0)  # 72.5
    t.traffic(62, 1_000_000, 62, 250_000, 7, 100_000, 0, final=True)
    t.session_ended("happy")


def _failed(sink: JsonLinesWriter) -> None:
    """S5 (follower): both attempts fail; the session ends failed 30.5 s after the request."""
    t, clock = _open(S5, DAY2 + 300.0, sink, "follower", ("0" * 10, "9" * 10), 0.25)
    t.attempt_started(1, "direct-tcp-v1", "outbound")
    t.attempt_started(2, "relay-v1", "outbound")
    clock.advance(5.0)  # 305.25
    t.attempt_ended(2, "relay-v1", "outbound", "connect_failed", None, None)
    clock.advance(25.0)  # 330.25
    t.attempt_ended(1, "direct-tcp-v1", "outbound", "timeout", None, None)
    clock.advance(0.25)  # 330.5
    t.traffic(0, 0, 0, 0, 0, 0, 0, final=True)
    t.session_ended("failed")


def write_golden_log(path: str) -> int:
    """Write the five sessions, the bad lines and one duplicate line; returns good line count."""
    sink = JsonLinesWriter(path)
    try:
        for scenario in (_direct_pair, _relay_fallback, _reconnect_burst, _failed):
            scenario(sink)
    finally:
        sink.close()
    with open(path, encoding="utf-8") as f:
        good = f.read().splitlines()
    with open(path, "a", encoding="utf-8") as f:
        for line in BAD_LINES:
            f.write(line + "\n")
        f.write(good[3] + "\n")  # a duplicate: same session and seq
    return len(good)


# --- server records beside the golden log (the report and cluster tests) ------------------

MAILBOXES = {"happy": 2000, "lonely": 2, "scary": 1, "crowded": 1}
NAMEPLATES = {"happy": 2000, "lonely": 2}
RELAY = {"happy": 3, "redundant": 2, "lonely": 1}


def write_mailbox_db(path: str) -> None:
    """The mailbox server's usage-v2 tables (INTEGER-declared, REAL values), rows by result."""
    import sqlite3

    from txdilation_analytics.synth import USAGE_DDL

    db = sqlite3.connect(path)
    try:
        db.executescript(USAGE_DDL)
        started = [DAY1 + 50 + i * 80 for i in range(sum(MAILBOXES.values()))]
        results = [r for r, n in MAILBOXES.items() for _ in range(n)]
        db.executemany(
            "INSERT INTO mailboxes VALUES ('app', 1, ?, 2.5, 0.5, ?)",
            zip(started, results, strict=False),
        )
        results = [r for r, n in NAMEPLATES.items() for _ in range(n)]
        db.executemany(
            "INSERT INTO nameplates VALUES ('app', ?, 0.5, 1.5, ?)",
            zip(started, results, strict=False),
        )
        db.commit()
    finally:
        db.close()


def write_relay_log(path: str) -> None:
    """A transit relay ``--log-fd`` file with :data:`RELAY` rows by mood."""
    moods = [m for m, n in RELAY.items() for _ in range(n)]
    with open(path, "w", encoding="utf-8") as f:
        for i, mood in enumerate(moods):
            row = {
                "started": DAY1 + 200 + i,
                "total_time": 20.0,
                "waiting_time": 0.25 if mood == "happy" else None,
                "total_bytes": 1_000_000 if mood == "happy" else 0,
                "mood": mood,
            }
            f.write(json.dumps(row) + "\n")


def write_inputs(directory: str) -> tuple[dict[str, str], int]:
    """The golden log, :func:`write_mailbox_db` and :func:`write_relay_log` in ``directory``;
    returns (``analyze`` option -> path, the log's good line count)."""
    inputs = {
        "--events": os.path.join(directory, "events.jsonl"),
        "--mailbox-usage-db": os.path.join(directory, "usage.sqlite"),
        "--transit-log": os.path.join(directory, "transit.jsonl"),
    }
    good_lines = write_golden_log(inputs["--events"])
    write_mailbox_db(inputs["--mailbox-usage-db"])
    write_relay_log(inputs["--transit-log"])
    return inputs, good_lines
