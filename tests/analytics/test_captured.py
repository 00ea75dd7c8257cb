"""Real captured data: the real servers on 127.0.0.1, stock clients, then ``analyze``.

The REAL mailbox server (with a usage DB) and the REAL transit relay (with a ``--log-fd``
style JSON log and a usage DB) run in this process (tests/harness.py). Stock magic-wormhole
clients then run: a text exchange (with ``--dump-timing`` style timing files), a lonely code,
a wrong code, and a stock dilation through the relay in two peer processes. After both servers
stop, ``txdilation-analytics analyze`` runs on their files and ``summary.json`` must agree with
counts taken directly from the same files with sqlite3 and json.

txdilation's own events join this test once the protocol emits them (TXDILATION_EVENTS in the
peer processes' environment, ``--impl txdilation``).
"""

from __future__ import annotations

import glob
import json
import os
import sqlite3
from collections import Counter
from typing import Any

import pytest
from twisted.internet import defer
from twisted.trial import unittest

from tests.harness import run_peer_pair, start_mailbox_server, start_transit_relay

from ._spark import have_spark, spark

pytestmark = pytest.mark.spark
APPID = "lothar.com/txdilation/analytics-test"


def _db_counts(path: str, table: str) -> dict[str, int]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute(f"SELECT result, COUNT(*) FROM {table} GROUP BY result").fetchall()
    finally:
        db.close()
    return dict(sorted(rows))


class CapturedTests(unittest.TestCase):
    """summary.json of real server files equals direct counts over the same files."""

    timeout = 120

    def setUp(self) -> None:
        reason = have_spark()
        if reason:
            raise unittest.SkipTest(reason)
        spark()  # start the JVM before the servers, so their timeouts are not eaten by it

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

    async def _capture(self, tmp: str) -> None:
        from twisted.internet import reactor

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
                relay_only = ["--impl", "stock", "--no-listen", "--relay", relay.hint]
                common = ["--count", "1", "--sizes", "1,70000"]
                await run_peer_pair(
                    reactor,
                    mailbox.url,
                    [*relay_only, "--scenario", "echo-server", "--side", "f" * 16, *common],
                    [*relay_only, "--scenario", "echo-client", "--side", "0" * 16, *common],
                    40.0,
                    appid=APPID,
                )
            finally:
                await mailbox.stop()
                await relay.stop()

    @defer.inlineCallbacks
    def test_summary_matches_server_files(self) -> Any:
        """Mailbox, nameplate and relay counts, relay bytes and timing files agree exactly."""
        tmp = os.path.abspath(self.mktemp())
        os.makedirs(tmp)
        yield defer.ensureDeferred(self._capture(tmp))

        from txdilation_analytics.cli import main

        out = os.path.join(tmp, "out")
        status = main(
            [
                "analyze",
                "--mailbox-usage-db", os.path.join(tmp, "mailbox-usage.sqlite"),
                "--transit-log", os.path.join(tmp, "transit.jsonl"),
                "--transit-usage-db", os.path.join(tmp, "transit-usage.sqlite"),
                "--client-timing", os.path.join(tmp, "timing-*.json"),
                "--output", out,
                "--quiet",
            ]
        )  # fmt: skip
        self.assertEqual(status, 0)
        with open(os.path.join(out, "report", "summary.json")) as f:
            summary = json.load(f)

        mailboxes = _db_counts(os.path.join(tmp, "mailbox-usage.sqlite"), "mailboxes")
        nameplates = _db_counts(os.path.join(tmp, "mailbox-usage.sqlite"), "nameplates")
        with open(os.path.join(tmp, "transit.jsonl")) as f:
            relay_rows = [json.loads(line) for line in f]
        moods = dict(sorted(Counter(r["mood"] for r in relay_rows).items()))
        self.assertTrue({"happy", "scary"} <= set(mailboxes), mailboxes)
        self.assertIn("happy", moods)
        self.assertEqual(summary["mailbox_results"], mailboxes)
        self.assertEqual(summary["nameplate_results"], nameplates)
        self.assertEqual(summary["transit_results"], moods)
        self.assertEqual(
            _db_counts(os.path.join(tmp, "transit-usage.sqlite"), "usage"), moods
        )  # the DB and the log are the same rows, counted once
        self.assertEqual(summary["transit_bytes_total"], sum(r["total_bytes"] for r in relay_rows))
        self.assertGreater(summary["transit_bytes_total"], 2 * 70_000)
        self.assertEqual(summary["corrupt_lines"], 0)
        self.assertEqual(summary["sessions"], 0)  # no txdilation events yet
        self.assertEqual(summary["client_timing"]["files"], 2)

        raw = ""
        for path in glob.glob(os.path.join(tmp, "timing-*.json")):
            with open(path) as f:
                raw += f.read()
        self.assertIn('"body"', raw)  # the stock dump has encrypted bodies ...
        scrubbed = spark().read.parquet(os.path.join(out, "bronze", "client_timing"))
        text = json.dumps([r.asDict() for r in scrubbed.collect()])
        self.assertNotIn("body", text)  # ... which never reach bronze
        self.assertNotIn("127.0.0.1", text)
        self.assertIn("pake1", text)
        with open(os.path.join(out, "report", "index.html")) as f:
            self.assertIn("data:image/png;base64,", f.read())
