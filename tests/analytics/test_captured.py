"""Real captured data: the real servers on 127.0.0.1, stock and txdilation peers, then ``analyze``.

The REAL mailbox server (with a usage DB) and the REAL transit relay (with a ``--log-fd``
style JSON log and a usage DB) run in this process (tests/support/harness.py). Then:

- stock magic-wormhole clients: a text exchange (with ``--dump-timing`` style timing files), a
  lonely code, a wrong code, and a stock dilation through the relay in two peer processes;
- txdilation peer processes (``--impl txdilation``, each writing its own ``TXDILATION_EVENTS``
  file): a direct dilation (relay hints offered too; 1 s of echoes with pings), a relay-only
  one (neither side listens), one whose link is cut again and again during a transfer (forced
  reconnects, retransmissions), and a txdilation peer dilating with a stock peer.

After both servers stop, one deliberately corrupt (truncated) line is appended to one events
file and ``txdilation-analytics analyze`` runs on all the files. ``summary.json`` must agree
with numbers computed here directly: server counts with sqlite3 and json, session metrics with
plain json from the events files, following the metric definitions of docs/analytics.md (this
module's own code, not the pipeline's).
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
import sys
import time
from collections import Counter
from typing import Any

import pytest
from twisted.internet import defer
from twisted.trial import unittest

from tests.support.harness import (
    PeerResult,
    run_peer_pair,
    start_mailbox_server,
    start_transit_relay,
)

from ._spark import have_spark, spark
from .plain import connected_seconds, percentile, rate, read_event_files

pytestmark = pytest.mark.spark
APPID = "lothar.com/txdilation/analytics-test"
ECHO = ["--count", "2", "--sizes", "1,70000"]
STEADY = ["--count", "1", "--ping-interval", "0.25"]  # pings on a direct link for 1 s
CUT_BULK = ["--total", str(16 << 20), "--chunk", "65536"]
STEADY_MESSAGE = 512  # bytes per echo-steady exchange (tests/support/peer_scenarios.py)
PAIR_TIMEOUT = 40.0
CORRUPT_LINE = '{"schema": "txdilation-telemetry/1", "ts": 1795312733.5, "event": "ping_r\n'


def _db_counts(path: str, table: str) -> dict[str, int]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute(f"SELECT result, COUNT(*) FROM {table} GROUP BY result").fetchall()
    finally:
        db.close()
    return dict(sorted(rows))


# ---------------------------------------------------------------------------------------------
# the session metrics, computed independently from the events files with plain json


def expected_session_metrics(sessions: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The session part of summary.json, by the definitions in docs/analytics.md."""
    ttd: list[float] = []
    throughput: list[float] = []
    selections = relayed = reconnects = generations = 0
    sent = retransmitted = 0
    for records in sessions.values():
        selected = [r for r in records if r["event"] == "connection_selected"]
        generations += len({r["generation"] for r in records if r.get("generation") is not None})
        selections += len(selected)
        relayed += sum(1 for r in selected if r["via_relay"])
        reconnects += max(len(selected) - 1, 0)
        if selected:
            first = selected[0]
            if first.get("since_request_s") is not None:
                ttd.append(first["since_request_s"])
            else:
                requested = next(r for r in records if r["event"] == "dilation_requested")
                ttd.append(first["ts"] - requested["ts"])
        traffic = [r for r in records if r["event"] == "traffic"]
        if traffic:  # cumulative counters: the last record holds the session's totals
            last = traffic[-1]
            sent += last["bytes_sent"]
            retransmitted += last["bytes_retransmitted"]
            moved = last["bytes_sent"] + last["bytes_received"]
            connected = connected_seconds(records)
            if connected > 0 and moved > 0:
                throughput.append(moved / connected)
    dilated = sum(
        1 for rs in sessions.values() if any(r["event"] == "connection_selected" for r in rs)
    )
    rtts = [r["rtt_s"] for rs in sessions.values() for r in rs if r["event"] == "ping_rtt"]
    return {
        "sessions": len(sessions),
        "sessions_dilated": dilated,
        "dilation_success_rate": rate(dilated, len(sessions)),
        "time_to_dilate_s": {f"p{round(p * 100)}": percentile(ttd, p) for p in (0.5, 0.9, 0.99)},
        "relay_share": rate(relayed, selections),
        "reconnects_per_session": rate(reconnects, dilated),
        "generations_total": generations,
        "retransmitted_bytes_ratio": rate(retransmitted, sent),
        "throughput_Bps": {f"p{round(p * 100)}": percentile(throughput, p) for p in (0.5, 0.9)},
        "rtt_s": {f"p{round(p * 100)}": percentile(rtts, p) for p in (0.5, 0.9)},
        "rtt_samples": len(rtts),
        "bytes_sent_total": sent,
        "bytes_retransmitted_total": retransmitted,
        "pairs": len({r["pair"] for rs in sessions.values() for r in rs if r.get("pair")}),
    }


def _payload_moved(scenario: str, result: dict[str, Any]) -> tuple[int, int]:
    """(bytes written, bytes read) by a peer's scenario, from its own result report."""
    if scenario == "bulk-send":
        return result["bytes"], 0
    if scenario == "bulk-recv":
        return 0, result["bytes"]
    if scenario == "echo-steady":
        return result["exchanges"] * STEADY_MESSAGE, result["exchanges"] * STEADY_MESSAGE
    return result["bytes"], result["bytes"]  # echo: every byte comes back


# ---------------------------------------------------------------------------------------------


class CapturedTests(unittest.TestCase):
    """summary.json of real server files and txdilation events equals direct counts."""

    timeout = 240

    def setUp(self) -> None:
        reason = have_spark()
        if reason:
            raise unittest.SkipTest(reason)
        spark()  # start the JVM before the servers, so their timeouts are not eaten by it
        self.pairs: dict[str, tuple[PeerResult, PeerResult]] = {}
        self.moved: dict[str, tuple[int, int]] = {}  # events file -> its peer's (sent, received)
        self.seconds: dict[str, float] = {}  # step -> wall seconds (printed)

    async def _stock_text(self, reactor: Any, url: str, timing_dir: str) -> None:
        import wormhole
        from wormhole.timing import DebugTiming

        timings = [DebugTiming(), DebugTiming()]
        w1 = wormhole.create(APPID, url, reactor, timing=timings[0])
        w1.allocate_code()
        code = await w1.get_code()
        w2 = wormhole.create(APPID, url, reactor, timing=timings[1])
        w2.set_code(code)
        w1.send_message(b"hello")
        self.assertEqual(await w2.get_message(), b"hello")
        w2.send_message(b"bye")
        self.assertEqual(await w1.get_message(), b"bye")
        await w1.close()
        await w2.close()
        with open(os.devnull, "w") as quiet:
            for i, timing in enumerate(timings):
                timing.write(os.path.join(timing_dir, f"timing-{i}.json"), quiet)

    async def _stock_lonely_and_scary(self, reactor: Any, url: str) -> None:
        import wormhole
        from wormhole.errors import LonelyError, WrongPasswordError

        lonely = wormhole.create(APPID, url, reactor)
        lonely.allocate_code()
        await lonely.get_code()
        with self.assertRaises(LonelyError):
            await lonely.close()

        w1 = wormhole.create(APPID, url, reactor)
        w1.allocate_code()
        code = await w1.get_code()
        w2 = wormhole.create(APPID, url, reactor)
        w2.set_code(code.split("-", 1)[0] + "-wrong-words")
        w1.send_message(b"x")
        w2.send_message(b"y")
        for w in (w1, w2):
            with self.assertRaises(WrongPasswordError):
                await w.get_message()
            with self.assertRaises(WrongPasswordError):
                await w.close()

    def _peer_pairs(self, tmp: str, relay_hint: str) -> dict[str, tuple[list[str], list[str]]]:
        """name -> (left args, right args); a txdilation peer writes events/<name>-<side>.jsonl."""

        def txd(name: str, side: str) -> list[str]:
            events = os.path.join(tmp, "events", f"{name}-{side}.jsonl")
            return ["--impl", "txdilation", "--events", events]

        relay = ["--relay", relay_hint]
        relay_only = ["--no-listen", *relay]
        stock_relay = ["--impl", "stock", *relay_only, *ECHO]
        return {
            "stock-relay": (
                [*stock_relay, "--scenario", "echo-server", "--side", "f" * 16],
                [*stock_relay, "--scenario", "echo-client", "--side", "0" * 16],
            ),
            "txd-direct": (  # relay hints offered too; the Leader prefers the direct link
                [*txd("direct", "l"), *relay, "--scenario", "echo-server", *STEADY],
                [*txd("direct", "r"), *relay, "--scenario", "echo-steady", *STEADY,
                 "--duration", "1"],
            ),
            "txd-relay": (
                [*txd("relay", "l"), *relay_only, "--scenario", "echo-server", *ECHO],
                [*txd("relay", "r"), *relay_only, "--scenario", "echo-client", *ECHO],
            ),
            "txd-cut": (  # 16 MiB, the sender cutting the link every 0.05 s; the receiver
                # reads nothing for 0.3 s, so the link is cut with records unacknowledged
                # however fast this machine is
                [*txd("cut", "l"), "--scenario", "bulk-recv", "--linger", "1", *CUT_BULK,
                 "--read-stall", "0.3"],
                [*txd("cut", "r"), "--scenario", "bulk-send", "--cut-interval", "0.05", *CUT_BULK],
            ),
            "txd-stock": (
                [*txd("mixed", "l"), "--scenario", "echo-server", *ECHO],
                ["--impl", "stock", "--scenario", "echo-client", *ECHO],
            ),
        }  # fmt: skip

    async def _capture(self, tmp: str) -> None:
        from twisted.internet import reactor

        os.makedirs(os.path.join(tmp, "events"))
        with open(os.path.join(tmp, "transit.jsonl"), "w", encoding="utf-8") as log:
            mailbox = await start_mailbox_server(
                reactor, usage_db=os.path.join(tmp, "mailbox-usage.sqlite")
            )
            relay = await start_transit_relay(
                reactor, log_fd_file=log, usage_db=os.path.join(tmp, "transit-usage.sqlite")
            )
            try:
                await self._stock_text(reactor, mailbox.url, tmp)
                await self._stock_lonely_and_scary(reactor, mailbox.url)
                for name, (left, right) in self._peer_pairs(tmp, relay.hint).items():
                    started = time.monotonic()
                    self.pairs[name] = await run_peer_pair(
                        reactor, mailbox.url, left, right, PAIR_TIMEOUT, appid=APPID
                    )
                    self.seconds[name] = round(time.monotonic() - started, 2)
                    for args, result in zip((left, right), self.pairs[name], strict=True):
                        if "--events" in args:
                            path = args[args.index("--events") + 1]
                            scenario = args[args.index("--scenario") + 1]
                            self.moved[path] = _payload_moved(scenario, result.result)
            finally:
                await mailbox.stop()
                await relay.stop()

    @defer.inlineCallbacks
    def test_summary_matches_server_files_and_events(self) -> Any:
        """Session metrics equal plain-json computations over the txdilation events files
        (one corrupt line counted); mailbox, nameplate and relay counts, relay bytes and
        timing files equal sqlite3/json counts and include the txdilation sessions."""
        tmp = os.path.abspath(self.mktemp())
        os.makedirs(tmp)
        started = time.monotonic()
        yield defer.ensureDeferred(self._capture(tmp))
        self.seconds["capture"] = round(time.monotonic() - started, 2)
        event_files = sorted(glob.glob(os.path.join(tmp, "events", "*.jsonl")))
        with open(event_files[0], "a", encoding="utf-8") as f:
            f.write(CORRUPT_LINE)  # a truncated last line, as from a killed writer

        from txdilation_analytics.cli import main

        out = os.path.join(tmp, "out")
        started = time.monotonic()
        status = main(
            [
                "analyze",
                "--events", os.path.join(tmp, "events", "*.jsonl"),
                "--mailbox-usage-db", os.path.join(tmp, "mailbox-usage.sqlite"),
                "--transit-log", os.path.join(tmp, "transit.jsonl"),
                "--transit-usage-db", os.path.join(tmp, "transit-usage.sqlite"),
                "--client-timing", os.path.join(tmp, "timing-*.json"),
                "--output", out,
                "--quiet",
            ]
        )  # fmt: skip
        self.seconds["analyze"] = round(time.monotonic() - started, 2)
        self.assertEqual(status, 0)
        with open(os.path.join(out, "report", "summary.json")) as f:
            summary = json.load(f)
        sys.stdout.write(f"\ncaptured summary.json:\n{json.dumps(summary, indent=1)}\n")
        sys.stdout.write(f"seconds: {json.dumps(self.seconds)}\n")

        self._check_sessions(summary, event_files)
        self._check_attempts(out, read_event_files(event_files)[0])
        self._check_servers(summary, tmp)
        self._check_timing_scrubbed(tmp, out)

    def _check_sessions(self, summary: dict[str, Any], event_files: list[str]) -> None:
        sessions, corrupt = read_event_files(event_files)
        self.assertEqual(corrupt, 1)
        self.assertEqual(summary["corrupt_lines"], 1)
        by_source = summary["corrupt_lines_by_source"]
        self.assertEqual({k: v for k, v in by_source.items() if v}, {"events": 1}, by_source)
        # the scenarios as designed: 7 txdilation peers in 4 wormholes, all dilated; the
        # relay-only pair only ever used the relay, the cut pair reconnected
        self.assertEqual(len(sessions), 7)
        per_file = {os.path.basename(p): read_event_files([p])[0] for p in event_files}
        kinds = {
            name: Counter(r["event"] for rs in s.values() for r in rs)
            for name, s in per_file.items()
        }
        self.assertGreaterEqual(kinds["cut-l.jsonl"]["connection_selected"], 2)
        self.assertGreater(kinds["direct-l.jsonl"]["ping_rtt"], 0)
        for side in ("l", "r"):
            selected = [
                r
                for rs in per_file[f"relay-{side}.jsonl"].values()
                for r in rs
                if r["event"] == "connection_selected"
            ]
            self.assertTrue(selected and all(r["via_relay"] for r in selected), selected)

        self._check_traffic(per_file)

        expected = expected_session_metrics(sessions)
        self.assertEqual(expected["sessions_dilated"], 7)
        self.assertEqual(expected["pairs"], 4)
        self.assertGreater(expected["reconnects_per_session"], 0)
        self.assertTrue(0 < expected["relay_share"] < 1)
        for key, want in expected.items():
            self._assert_close(summary[key], want, key)

    def _check_traffic(self, per_file: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
        """Each peer's last traffic record counts exactly the payload its scenario wrote and
        read; the cut transfer retransmitted some of it."""
        for path, (written, read) in self.moved.items():
            (records,) = per_file[os.path.basename(path)].values()
            last = [r for r in records if r["event"] == "traffic"][-1]
            self.assertTrue(last["final"], path)
            self.assertEqual((last["bytes_sent"], last["bytes_received"]), (written, read), path)
        (cut_sender,) = per_file["cut-r.jsonl"].values()
        retransmitted = [r["bytes_retransmitted"] for r in cut_sender if r["event"] == "traffic"]
        self.assertGreater(retransmitted[-1], 0)

    def _check_attempts(self, out: str, sessions: dict[str, list[dict[str, Any]]]) -> None:
        """silver attempts: one row per attempt of a session, its outcome that of its
        attempt_ended (``unfinished`` if none); one ``selected`` per selected connection."""
        want: Counter[str] = Counter()
        selections = 0
        for records in sessions.values():
            ended = {r["attempt"]: r["outcome"] for r in records if r["event"] == "attempt_ended"}
            ids = {r["attempt"] for r in records if r["event"] == "attempt_started"} | set(ended)
            want.update(ended.get(a, "unfinished") for a in ids)
            selections += sum(1 for r in records if r["event"] == "connection_selected")
        attempts = spark().read.parquet(os.path.join(out, "silver", "attempts"))
        got = {r["outcome"]: r["count"] for r in attempts.groupBy("outcome").count().collect()}
        self.assertEqual(got, dict(want))
        self.assertEqual(want["selected"], selections)

    def _assert_close(self, got: Any, want: Any, key: str) -> None:
        if isinstance(want, dict):
            self.assertEqual(set(got), set(want), key)
            for k in want:
                self._assert_close(got[k], want[k], f"{key}.{k}")
        elif isinstance(want, float):
            self.assertIsNotNone(got, key)
            self.assertAlmostEqual(got, want, delta=1e-9 * max(1.0, abs(want)), msg=key)
        else:
            self.assertEqual(got, want, key)

    def _check_servers(self, summary: dict[str, Any], tmp: str) -> None:
        mailboxes = _db_counts(os.path.join(tmp, "mailbox-usage.sqlite"), "mailboxes")
        nameplates = _db_counts(os.path.join(tmp, "mailbox-usage.sqlite"), "nameplates")
        with open(os.path.join(tmp, "transit.jsonl")) as f:
            relay_rows = [json.loads(line) for line in f]
        moods = dict(sorted(Counter(r["mood"] for r in relay_rows).items()))
        self.assertEqual(summary["mailbox_results"], mailboxes)
        self.assertEqual(summary["nameplate_results"], nameplates)
        self.assertEqual(summary["transit_results"], moods)
        self.assertEqual(
            _db_counts(os.path.join(tmp, "transit-usage.sqlite"), "usage"), moods
        )  # the DB and the log are the same rows, counted once
        self.assertEqual(summary["transit_bytes_total"], sum(r["total_bytes"] for r in relay_rows))
        # the rows include every wormhole of this test: the text exchange and each peer pair
        # were happy, the wrong code scary, the lonely code's nameplate lonely
        self.assertEqual(mailboxes, {"happy": 1 + len(self.pairs), "scary": 1})
        self.assertEqual(nameplates, {"happy": 2 + len(self.pairs), "lonely": 1})
        self.assertGreaterEqual(moods.get("happy", 0), 2)  # the two relay-only pairs
        echoed_via_relay = sum(
            self.pairs[name][1].result["bytes"] for name in ("stock-relay", "txd-relay")
        )
        self.assertGreater(summary["transit_bytes_total"], 2 * echoed_via_relay)
        self.assertEqual(summary["client_timing"]["files"], 2)

    def _check_timing_scrubbed(self, tmp: str, out: str) -> None:
        raw = ""
        for path in glob.glob(os.path.join(tmp, "timing-*.json")):
            with open(path) as f:
                raw += f.read()
        self.assertIn('"body"', raw)  # the stock dump has encrypted bodies ...
        scrubbed = spark().read.parquet(os.path.join(out, "bronze", "client_timing"))
        text = json.dumps([r.asDict() for r in scrubbed.collect()], default=str)
        self.assertNotIn("body", text)  # ... which never reach bronze
        self.assertNotIn("127.0.0.1", text)
        self.assertIn("pake1", text)
        with open(os.path.join(out, "report", "index.html")) as f:
            page = f.read()
        self.assertIn("<svg", page)  # the report's charts, inline
        self.assertNotIn("127.0.0.1", page)
